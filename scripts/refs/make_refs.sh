#!/bin/sh
# make_refs.sh - writes tests/data/types/: one small random-weight model per
# weight type, quantized by llama.cpp's own llama-quantize, and llama.cpp's
# outputs on them (greedy runs, first-position logits, dequantized blocks),
# which tests/test_types.c checks polykv against.  Never run by the
# Makefile: it needs a llama.cpp build beside the project.
#
#   1. `polykv gen-model` writes one F32 source model (llama arch, the
#      512-token vocabulary of ../shared/models/stories260K.gguf, n_embd 256,
#      2 layers, 4 / 2 heads, n_ff 256, seed 11), under OUT (not committed:
#      the same command writes the same bytes).
#   2. `llama-quantize --pure SRC DST TYPE 2` makes one model per type, every
#      matrix in TYPE (token_embd too, which is also the tied output).  The
#      types llama-quantize refuses without an importance matrix (IQ2_XXS,
#      IQ3_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) get `--imatrix`, one made by
#      llama-imatrix from the F32 model reading tests/data/qwen35/prompts.txt
#      (any fixed text will do: the weights are random).  It has no entry for
#      token_embd (the tied output is not seen as a product), and ggml's
#      IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M quantizers stop without one,
#      so those five keep token_embd in Q8_0 (`--tensor-type
#      token_embd=q8_0`), as llama.cpp's own mixes keep the output wider.
#   3. scripts/refs/probe.cpp, built against the same libllama, runs each
#      model on ../shared/reference/prompts.txt (F32 cache, 32 greedy steps)
#      and dequantizes blocks of every type with ggml's to_float.
#   4. The same probe runs the six models of ../shared/models that
#      tests/test_model.c checks with an F16 K/V cache and flash attention
#      off: tests/data/f16kv/<model>.json, the reference of test_model's
#      F16-cache check (../shared/reference's F16 files have flash
#      attention on, which sums V in F16).
#   5. Every command is appended to tests/data/types/commands.txt (and
#      tests/data/f16kv/commands.txt), with each file's sha256.
#
# Usage: sh scripts/refs/make_refs.sh [BUILD]   (from the repository root)
#   PEER   llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT    scratch for the source model and the probe (default /work/peers/types)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/types}
SHARED=${POLYKV_SHARED:-../shared}
DATA=tests/data/types
TYPES="BF16 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q5_K IQ4_NL IQ4_XS MXFP4 IQ2_XXS IQ3_XXS IQ2_XS IQ3_S IQ2_S IQ1_S IQ1_M"
IMATRIX_TYPES="IQ2_XXS IQ3_XXS IQ2_XS IQ2_S IQ1_S IQ1_M"
EMBD_Q8_TYPES="IQ2_XXS IQ2_XS IQ2_S IQ1_S IQ1_M"
. scripts/refs/lib.sh
[ -d "$PEER/build" ] && { [ -x "$BIN/llama-quantize" ] && [ -x "$BIN/llama-imatrix" ] ||
    cmake --build "$PEER/build" --target llama-quantize llama-imatrix -j2 >&2; }
[ -x "$BUILD/polykv" ] || make -s "$BUILD/polykv"
refs_start make_refs.sh

src=$OUT/rand-llama-e256-l2-F32.gguf
say "$BUILD/polykv" gen-model --arch llama --vocab "$SHARED/models/stories260K.gguf" --n-embd 256 \
    --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 256 --type f32 --seed 11 -o "$src"
echo "# sha256 $(sha256sum "$src" | cut -d' ' -f1)  \$OUT/$(basename "$src")" >> "$log"
imat=$OUT/rand-llama-e256-l2.imatrix.gguf
say "$BIN/llama-imatrix" -m "$src" -f tests/data/qwen35/prompts.txt -c 256 -t 2 -o "$imat" > "$OUT/imatrix.log" 2>&1
echo "# sha256 $(sha256sum "$imat" | cut -d' ' -f1)  \$OUT/$(basename "$imat")" >> "$log"
for t in $TYPES; do
    m=$DATA/rand-llama-e256-l2-$t.gguf
    case " $IMATRIX_TYPES " in *" $t "*) im="--imatrix $imat" ;; *) im= ;; esac
    case " $EMBD_Q8_TYPES " in *" $t "*) im="$im --tensor-type token_embd=q8_0" ;; esac
    # shellcheck disable=SC2086  # $im: none, two or four words
    # the file types whose matrices are TYPE: MXFP4_MOE (with --pure every
    # matrix MXFP4), and IQ2_M for IQ2_S (llama.cpp's IQ2_S file type is
    # made of IQ2_XS matrices)
    case $t in MXFP4) qt=MXFP4_MOE ;; IQ2_S) qt=IQ2_M ;; *) qt=$t ;; esac
    say "$BIN/llama-quantize" $im --pure "$src" "$m" "$qt" 2 > "$OUT/quantize-$t.log" 2>&1
    say "$OUT/probe" run "$m" "$SHARED/reference/prompts.txt" "$DATA/rand-llama-e256-l2-$t.json" 32 \
        "$DATA/rand-llama-e256-l2-$t.firstpos_logits.p0.tsv"
done
say "$OUT/probe" dequant "$DATA"
(cd "$DATA" && sha256sum ./*.gguf ./*.json ./*.tsv ./*.bin | sed 's/^/# sha256 /') >> "$log"

F16=tests/data/f16kv
mkdir -p "$F16"
log=$F16/commands.txt
head -n 1 "$DATA/commands.txt" > "$log"
for m in stories260K rand-qwen2-qwen2vocab-e64-l2-F16 rand-qwen3-qwen2vocab-e64-l2-Q8_0 \
         rand-llama-llama3vocab-e256-l2-Q8_0 rand-llama-llama3vocab-e256-l2-Q4_0 \
         rand-llama-llama3vocab-e256-l2-Q4_K_M; do
    say "$OUT/probe" run "$SHARED/models/$m.gguf" "$SHARED/reference/prompts.txt" "$F16/$m.json" 32 - f16
done
(cd "$F16" && sha256sum ./*.json | sed 's/^/# sha256 /') >> "$log"
