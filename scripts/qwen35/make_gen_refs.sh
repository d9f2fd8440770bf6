#!/bin/sh
# make_gen_refs.sh - writes tests/data/qwen35/gen-*.json: llama.cpp's
# outputs on qwen35 / qwen35moe models that `polykv gen-model` writes (the
# converter's keys and tensors, random weights, the 151,936-token vocabulary
# of ../shared/models/vocab/ggml-vocab-qwen35.gguf), which
# tests/test_qwen35.c's check_gen checks polykv against with no model kept
# anywhere: the test writes each model again with the binary under test and
# first checks it is byte for byte the one recorded here.  Never run by the
# Makefile: it needs a llama.cpp build beside the project.
#
#   1. `polykv gen-model` writes each model under OUT in F32, BF16, Q8_0
#      and Q4_K (gen-model's q4_k_m-like mix; at n_embd 64 most rows fall
#      back to Q5_0 and Q6_K to Q8_0, the 256-wide attn_output stays Q4_K).
#   2. scripts/refs/probe.cpp (unchanged) runs each on
#      tests/data/qwen35/prompts.txt: F32 K/V cache, flash attention off,
#      32 greedy steps; the JSON goes to tests/data/qwen35/.
#   3. Every command, with each model's sha256 (the test's check) and each
#      JSON's, in tests/data/qwen35/commands-gen.txt.
#
# The shapes are tests/test_qwen35.c's GEN_DENSE / GEN_MOE: change both.
#
# Usage: sh scripts/qwen35/make_gen_refs.sh [BUILD]   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   models and the probe (default /work/peers/qwen35-gen)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/qwen35-gen}
SHARED=${POLYKV_SHARED:-../shared}
BIN=$PEER/build/bin
DATA=tests/data/qwen35
PROMPTS=$DATA/prompts.txt
VOCAB=$SHARED/models/vocab/ggml-vocab-qwen35.gguf
DENSE="--arch qwen35 --n-embd 64 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 128
       --ssm-groups 2 --ssm-heads 4 --ssm-state 32 --ssm-conv 4 --untied --seed 35"
MOE="--arch qwen35moe --n-embd 64 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-expert 4
     --n-expert-used 2 --n-ff-exp 64 --n-ff-shexp 128 --ssm-groups 2 --ssm-heads 4 --ssm-state 32
     --ssm-conv 4 --seed 36"
[ -d "$PEER/build" ] || { echo "make_gen_refs: no llama.cpp build at $PEER/build" >&2; exit 2; }
[ -r "$VOCAB" ] || { echo "make_gen_refs: no $VOCAB" >&2; exit 2; }
mkdir -p "$OUT" "$DATA"

[ -x "$BUILD/polykv" ] || make -s BUILD="$BUILD" "$BUILD/polykv"
g++ -std=c++17 -O2 -I"$PEER/include" -I"$PEER/ggml/include" scripts/refs/probe.cpp -L"$BIN" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$OUT/probe"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

rev=$(git -C "$PEER" rev-parse HEAD 2>/dev/null || echo unknown)
log=$DATA/commands-gen.txt
{
    echo "# Written by scripts/qwen35/make_gen_refs.sh; llama.cpp: $rev"
    echo "# (the node-llama-cpp@3.22.1 bundle, release v0.5.0: see ../shared/reference/README.md)"
    echo "# \$OUT = $OUT; \$PEER = $PEER"
} > "$log"
say() { echo "$*" | sed "s|$OUT|\$OUT|g; s|$BIN|\$BIN|g" >> "$log"; "$@"; }

for a in "qwen35-e64-l4:$DENSE" "qwen35moe-e64-l4-x4a2:$MOE"; do
    base=gen-${a%%:*} args=$(echo "${a#*:}" | tr -s ' \n' '  ')
    for t in F32 BF16 Q8_0 Q4_K; do
        m=$OUT/$base-$t.gguf
        # shellcheck disable=SC2086 # args is a list of options
        say "$BUILD/polykv" gen-model $args --type "$(echo "$t" | tr 'A-Z' 'a-z')" --vocab "$VOCAB" -o "$m"
        echo "# sha256 $(sha256sum "$m" | cut -d' ' -f1)  \$OUT/$base-$t.gguf" >> "$log"
        say "$OUT/probe" run "$m" "$PROMPTS" "$DATA/$base-$t.json" 32 - > "$OUT/probe-$base-$t.log" 2>&1
    done
done
(cd "$DATA" && sha256sum ./gen-*.json ./prompts.txt | sed 's/^/# sha256 /') >> "$log"
