#!/bin/sh
# `make bench`: the speed benchmarks in one table (see bench/run.mjs), the
# admission spawn ramp once on the model they made (bench/spawn.sh), KV
# events' cost (bench/kv_events.mjs), speculation with n-grams and with a
# draft model (bench/spec.mjs, bench/draft.mjs) and, with LLMD_SCORER built beside
# the project (bench/llmd/build.sh), routing by llm-d's index against
# round-robin (bench/llmd_route.mjs), then the load test (bench/load.mjs:
# 64 clients for LOAD_SECONDS, 600 by default).
node "$(dirname "$0")/run.mjs" "$@" || exit 1
model=${MODELS_DIR:-models/bench}/qwen2-0.5b-shape-q8_0.gguf
if [ -f "$model" ]; then
    # the workload and floor of docs/benchmarks.md, "Admission: the spawn ramp"
    POLYKV_BIN="${1:-build}/polykv" sh "$(dirname "$0")/spawn.sh" "$model" 1 --knee-stagger --knee-min 2 \
        --knee-max 4 --knee-from 3 --knee-window-s 24 --floor-at 0.25 --margin-scale 0.25 --agents 9 --turns 3 \
        --reply 200 --pause-ms 500 --every-s 2 || exit 1
else
    echo "skip the spawn ramp: $model not made (bench/run.mjs needs ../shared/models for it)"
fi
if [ -f "$model" ]; then
    node "$(dirname "$0")/kv_events.mjs" --bin "${1:-build}/polykv" --model "$model" --rounds 21 || exit 1
    node "$(dirname "$0")/spec.mjs" --bin "${1:-build}/polykv" --rounds 3 || exit 1
    node "$(dirname "$0")/draft.mjs" --bin "${1:-build}/polykv" --rounds 3 --shape 0.5b || exit 1
    if [ -x "${LLMD_SCORER:-build/llmd-scorer}" ]; then
        node "$(dirname "$0")/llmd_route.mjs" --bin "${1:-build}/polykv" --model "$model" --requests 200 \
             --cache-ram 256 || exit 1
    else
        echo "skip routing by llm-d's index: no ${LLMD_SCORER:-build/llmd-scorer} (bench/llmd/build.sh builds it beside the project)"
    fi
fi
exec node "$(dirname "$0")/load.mjs" --bin "${1:-build}/polykv" --duration "${LOAD_SECONDS:-600}"
