#!/bin/sh
# `make bench`: the speed benchmarks in one table (see bench/run.mjs).
exec node "$(dirname "$0")/run.mjs" "$@"
