#!/bin/sh
# make_kvq_refs.sh - writes tests/data/kvq/: llama.cpp's runs of two models
# of ../shared/models with a quantized K/V cache (q8_0 and q4_0 for both K
# and V, flash attention on, as llama.cpp needs for a quantized V), which
# tests/test_kvq.c holds polykv's -ctk / -ctv runs to, next to the F16
# cache's runs of tests/data/f16kv (flash attention off).  Never run by the
# Makefile: it needs a llama.cpp build beside the project.
#
#   scripts/refs/probe.cpp runs each model on ../shared/reference/prompts.txt
#   (5, 16 and 600 tokens with these vocabularies): n_ctx 2048, one batch
#   for the prompt, 32 greedy steps; every command and each JSON's sha256
#   go to tests/data/kvq/commands.txt.
#
# Usage: sh scripts/refs/make_kvq_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   the probe (default /work/peers/kvq)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/kvq}
SHARED=${POLYKV_SHARED:-../shared}
DATA=tests/data/kvq
. scripts/refs/lib.sh
refs_start make_kvq_refs.sh

for m in rand-llama-llama3vocab-e256-l2-Q8_0 rand-qwen3-qwen2vocab-e64-l2-Q8_0; do
    for t in q8_0 q4_0; do
        say "$OUT/probe" run "$SHARED/models/$m.gguf" "$SHARED/reference/prompts.txt" "$DATA/$m.$t.json" 32 - $t
    done
done
(cd "$DATA" && sha256sum ./*.json | sed 's/^/# sha256 /') >> "$log"
