#!/bin/sh
# make_gemma_refs.sh - writes tests/data/gemma4/gen-*.json: llama.cpp's outputs
# on Gemma 4 models that `polykv gen-model --arch gemma4` writes (the
# converter's keys and tensors, the 31B's layout and E2B / E4B's scaled
# down, random weights, the 151,936-token vocabulary of
# ../shared/models/vocab/ggml-vocab-qwen35.gguf: the tokenizer plays no part
# in the layers, and ../shared is what make test has), which tests/test_gemma.c checks polykv
# against with no model kept anywhere: the test writes each model again
# with the binary under test and first checks it is byte for byte the one
# recorded here.  Never run by the Makefile: it needs a llama.cpp build
# beside the project.
#
#   1. `polykv gen-model` writes each model under OUT in F32, BF16, Q8_0 and
#      Q4_K (gen-model's q4_k_m-like mix): the 31B's layout (GEMMA4) and
#      E2B's (GEMMA4E: the same shape with per-layer embeddings 32 wide and
#      the last 3 layers sharing the K/V of layers 1 and 2, their FFN twice
#      as wide) and the 26B-A4B's (GEMMA4X: 8 experts of 256, 2 chosen a
#      token, beside every layer's dense FFN; GEMMA4X8 the same with all 8
#      taken, which no rounding can route differently).
#   2. scripts/refs/probe.cpp runs each on tests/data/qwen35/prompts.txt
#      (4, 5, 288 and 1,674 tokens with this vocabulary: the last two run
#      far past the window of 32): F32 K/V cache, flash
#      attention off, 32 greedy steps; the JSON goes to tests/data/gemma4/.
#   3. Every command, with each model's sha256 (the test's check) and each
#      JSON's, in tests/data/gemma4/commands.txt.
#
# The shapes are tests/test_gemma.c's GEN_GEMMA4, GEN_GEMMA4E, GEN_GEMMA4X and GEN_GEMMA4X8: change both.
#
# Usage: sh scripts/refs/make_gemma_refs.sh [BUILD]   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   models and the probe (default /work/peers/gemma-gen)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/gemma-gen}
DATA=tests/data/gemma4
PROMPTS=tests/data/qwen35/prompts.txt
SHARED=${POLYKV_SHARED:-../shared}
VOCAB=$SHARED/models/vocab/ggml-vocab-qwen35.gguf
GEMMA4="--arch gemma4 --n-embd 128 --n-layer 6 --n-head 4 --n-head-kv 2 --n-head-kv-global 1 --head-dim 32
        --head-dim-global 64 --n-ff 256 --swa 32 --swa-every 3 --softcap 2 --seed 47"
GEMMA4E="$GEMMA4 --per-layer 32 --shared-kv 3 --double-wide"
GEMMA4X="$GEMMA4 --n-expert 8 --n-expert-used 2 --n-ff-exp 256"
GEMMA4X8="$GEMMA4 --n-expert 8 --n-expert-used 8 --n-ff-exp 256"
[ -r "$VOCAB" ] || { echo "make_gemma_refs: no $VOCAB" >&2; exit 2; }
. scripts/refs/lib.sh
[ -x "$BUILD/polykv" ] || make -s BUILD="$BUILD" "$BUILD/polykv"
refs_start make_gemma_refs.sh

for shape in "gen-gemma4-e128-l6-w32:$GEMMA4" "gen-gemma4-e128-l6-w32-pl32-kv3:$GEMMA4E" \
             "gen-gemma4-e128-l6-w32-x8k2:$GEMMA4X" "gen-gemma4-e128-l6-w32-x8k8:$GEMMA4X8"; do
    base=${shape%%:*} args=$(echo "${shape#*:}" | tr -s ' \n' '  ')
    for t in F32 BF16 Q8_0 Q4_K; do
        m=$OUT/$base-$t.gguf
        # shellcheck disable=SC2086 # args is a list of options
        say "$BUILD/polykv" gen-model $args --type "$(echo "$t" | tr 'A-Z' 'a-z')" --vocab "$VOCAB" -o "$m"
        echo "# sha256 $(sha256sum "$m" | cut -d' ' -f1)  \$OUT/$base-$t.gguf" >> "$log"
        say "$OUT/probe" run "$m" "$PROMPTS" "$DATA/$base-$t.json" 32 - > "$OUT/probe-$base-$t.log" 2>&1
    done
done
(cd "$DATA" && sha256sum ./gen-*.json | sed 's/^/# sha256 /') >> "$log"
