#!/bin/sh
# `make bench`: the speed benchmarks in one table (see bench/run.mjs), then
# the load test (bench/load.mjs: 64 clients for LOAD_SECONDS, 600 by default).
node "$(dirname "$0")/run.mjs" "$@" || exit 1
exec node "$(dirname "$0")/load.mjs" --bin "${1:-build}/polykv" --duration "${LOAD_SECONDS:-600}"
