#!/bin/sh
# bench/grammar.sh [MODEL] [PEER] - JSON-Schema-constrained vs unconstrained
# decode on the benchmark model, 1 and 4 sessions, polykv then (when PEER,
# a llama-server binary, exists) llama-server with the same flags
# (-np 4 -c 4096 -t 2), one server at a time.  Results: build/bench/grammar/.
set -eu
cd "$(dirname "$0")/.."
model=${1:-/work/main/build/bench-models/qwen2-0.5b-shape-q8_0.gguf}
peer=${2:-/work/peers/llama.cpp/build/bin/llama-server}
n=${N_PREDICT:-64}
d=build/bench/grammar
mkdir -p "$d"
run() {  # name port binary args...
    name=$1; port=$2; shift 2
    "$@" --host 127.0.0.1 --port "$port" >"$d/$name.log" 2>&1 &
    pid=$!
    i=0
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -gt 300 ] && { kill $pid; echo "$name did not start" >&2; return 1; }
        sleep 0.2
    done
    for s in 1 4; do node bench/grammar.mjs "http://127.0.0.1:$port" "$name" $s "$n" | tee -a "$d/results.jsonl"; done
    kill $pid; wait $pid 2>/dev/null || true
}
: > "$d/results.jsonl"
run polykv 18131 build/polykv serve -m "$model" -np 4 -c 4096 -t 2
[ -x "$peer" ] && run llama-server 18132 "$peer" -m "$model" -np 4 -c 4096 -t 2
