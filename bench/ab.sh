#!/bin/sh
# bench/ab.sh - two polykv binaries on the same model and work, interleaved
# (A B A B ...): the agent trace (bench/agents.mjs: prompt tokens evaluated,
# next-turn time to first token) and the decode speed per session with 1 to
# 4 sessions decoding at once (bench/together.mjs).  What a change that
# must not change behaviour is checked with: the prompt tokens evaluated
# must be equal, the times within the machine's noise.
#
#   sh bench/ab.sh OLD/polykv NEW/polykv MODEL.gguf [ROUNDS]
#
# Needs a quiet machine.  Prints each run's lines; the medians are the
# reader's (a JSON line per agent-trace run).
set -e
a=$1; b=$2; model=$3; rounds=${4:-2}
[ -x "$a" ] && [ -x "$b" ] && [ -f "$model" ] || { echo "usage: sh bench/ab.sh OLD NEW MODEL [ROUNDS]" >&2; exit 2; }
port=${AB_PORT:-18131}
run_one() {
    "$1" serve -m "$model" -np 4 -c 16384 -t 2 --host 127.0.0.1 --port "$port" > /tmp/ab-server.log 2>&1 &
    pid=$!
    trap 'kill $pid 2>/dev/null' EXIT
    for i in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 $pid 2>/dev/null || { echo "$1 did not start" >&2; exit 1; }
        sleep 0.5
    done
    echo "## $2: $1"
    node bench/agents.mjs --url "http://127.0.0.1:$port" --convs 6 --turns 4 --shared-words 1500 \
        --context-words 500 --reply 16 --concurrency 3 --seed 1 --json
    node bench/together.mjs --url "http://127.0.0.1:$port" --max 4
    kill $pid; wait $pid 2>/dev/null || true
}
for r in $(seq 1 "$rounds"); do
    run_one "$a" "A round $r"
    run_one "$b" "B round $r"
done
