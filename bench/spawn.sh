#!/bin/sh
# bench/spawn.sh - the admission issue's spawn ramp in one command:
#   sh bench/spawn.sh [MODEL.gguf] [RUNS] [spawn.mjs options...]
# starts polykv (-np 8 -c 16384 -t 2) on a free loopback port, runs
# bench/spawn.mjs RUNS times against it (each run measures its own knee on
# a new pool), stops it.  Needs a quiet machine: the three strategies are
# compared within one run, on one speed curve.
set -e
model=${1:-build/bench-models/qwen2-0.5b-shape-q8_0.gguf}
runs=${2:-1}
[ $# -gt 2 ] && shift 2 || shift $#
bin=${POLYKV_BIN:-build/polykv}
[ -f "$model" ] || { echo "bench/spawn.sh: no model $model (bench/run.mjs makes it)" >&2; exit 1; }
port=${SPAWN_PORT:-18097}
log=${SPAWN_LOG:-build/spawn-server.log}
"$bin" serve -m "$model" -np 8 -c 16384 -t 2 --host 127.0.0.1 --port "$port" > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for i in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { echo "polykv did not start, see $log" >&2; exit 1; }
    sleep 0.5
done
for r in $(seq 1 "$runs"); do
    echo "# run $r of $runs"
    node bench/spawn.mjs --url "http://127.0.0.1:$port" "$@"
done
