#!/bin/sh
# make_moe_refs.sh - writes tests/data/moe/gen-*.json: llama.cpp's outputs on
# qwen3moe and gpt-oss models that `polykv gen-model` writes (the converter's keys and
# tensors, random weights, the 151,936-token vocabulary of
# ../shared/models/vocab/ggml-vocab-qwen35.gguf), which tests/test_moe.c
# checks polykv against with no model kept anywhere: the test writes each
# model again with the binary under test and first checks it is byte for
# byte the one recorded here.  Never run by the Makefile: it needs a
# llama.cpp build beside the project.
#
#   1. `polykv gen-model` writes each model under OUT in F32, BF16, Q8_0 and
#      Q4_K (gen-model's q4_k_m-like mix).
#   2. scripts/refs/probe.cpp runs each on tests/data/qwen35/prompts.txt:
#      F32 K/V cache, flash attention off, 32 greedy steps; the JSON goes to
#      tests/data/moe/.
#   3. Every command, with each model's sha256 (the test's check) and each
#      JSON's, in tests/data/moe/commands.txt.
#
# The shapes are tests/test_moe.c's GEN_QWEN3MOE and GEN_GPTOSS: change both.
#
# Usage: sh scripts/refs/make_moe_refs.sh [BUILD]   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   models and the probe (default /work/peers/moe-gen)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/moe-gen}
SHARED=${POLYKV_SHARED:-../shared}
DATA=tests/data/moe
PROMPTS=tests/data/qwen35/prompts.txt
VOCAB=$SHARED/models/vocab/ggml-vocab-qwen35.gguf
QWEN3MOE="--arch qwen3moe --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 --n-ff 256 --n-expert 8
          --n-expert-used 2 --n-ff-exp 64 --seed 37"
GPTOSS="--arch gpt-oss --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 32 --n-ff 256 --n-expert 8
        --n-expert-used 2 --n-ff-exp 64 --swa 32 --seed 43"
[ -r "$VOCAB" ] || { echo "make_moe_refs: no $VOCAB" >&2; exit 2; }
. scripts/refs/lib.sh
[ -x "$BUILD/polykv" ] || make -s BUILD="$BUILD" "$BUILD/polykv"
refs_start make_moe_refs.sh

# model:types:args (gpt-oss also as its downloads come: experts in MXFP4)
for a in "qwen3moe-e128-l3-x8a2:F32 BF16 Q8_0 Q4_K:$QWEN3MOE" \
         "gptoss-e128-l4-x8a2-w32:F32 BF16 Q8_0 Q4_K MXFP4_MOE:$GPTOSS"; do
    base=gen-${a%%:*} rest=${a#*:}
    types=${rest%%:*} args=$(echo "${rest#*:}" | tr -s ' \n' '  ')
    for t in $types; do
        m=$OUT/$base-$t.gguf
        # shellcheck disable=SC2086 # args is a list of options
        say "$BUILD/polykv" gen-model $args --type "$(echo "$t" | tr 'A-Z' 'a-z')" --vocab "$VOCAB" -o "$m"
        echo "# sha256 $(sha256sum "$m" | cut -d' ' -f1)  \$OUT/$base-$t.gguf" >> "$log"
        say "$OUT/probe" run "$m" "$PROMPTS" "$DATA/$base-$t.json" 32 - > "$OUT/probe-$base-$t.log" 2>&1
    done
done
(cd "$DATA" && sha256sum ./gen-*.json | sed 's/^/# sha256 /') >> "$log"
