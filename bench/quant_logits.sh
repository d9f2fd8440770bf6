#!/bin/sh
# quant_logits.sh - polykv's logits against the reference engine's on
# random-weight models quantized by the reference's own llama-quantize to
# Q2_K, Q3_K_S, Q3_K_M, IQ4_NL and IQ4_XS, with Q4_K_M and Q8_0 (types
# polykv ran before) as the baseline of the same method (docs/benchmarks.md).
#
# Needs the reference build beside the project (PEER, default
# /work/peers/llama.cpp with build/ configured) and ../shared (vocabularies,
# prompts).  Everything it makes goes under OUT (default /work/peers/quant),
# never into the repository: an F16 source model per arch written by
# `polykv gen-model`, its quantized copies, bench/ref/ref_logits.c built
# against the reference's libllama, and one TSV of first-position logits
# per engine, model and prompt (the three prompts of
# ../shared/reference/prompts.txt; both engines with an F32 K/V cache).
#
# Prints one row per model: the largest |diff| over all logits of the
# three prompts, the largest |logit|, the median over prompts of the
# largest |diff|, and on how many prompts the top-1 tokens agree.
#
# Usage: sh bench/quant_logits.sh [BUILD]   (from the repository root)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/quant}
SHARED=${POLYKV_SHARED:-../shared}
BIN=$PEER/build/bin
[ -d "$PEER/build" ] || { echo "quant_logits: no reference build at $PEER/build" >&2; exit 2; }
[ -f "$SHARED/reference/prompts.txt" ] || { echo "quant_logits: no $SHARED/reference/prompts.txt" >&2; exit 2; }
mkdir -p "$OUT"

[ -x "$BIN/llama-quantize" ] || cmake --build "$PEER/build" --target llama-quantize -j2 >&2
make -s "$BUILD/polykv" "$BUILD/bench/first_logits"
gcc -std=c11 -O2 -I"$PEER/include" -I"$PEER/ggml/include" bench/ref/ref_logits.c -L"$BIN" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$OUT/ref_logits"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# arch, vocabulary source, head count: rows of every matrix are multiples of 256
set -- "llama $SHARED/models/rand-llama-llama3vocab-e256-l2-Q8_0.gguf" \
       "qwen3 $SHARED/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf"
printf '%-22s %10s %10s %12s %6s\n' model "max|diff|" "max|logit|" "median/prompt" top1
for spec in "$@"; do
    arch=${spec%% *}
    vocab=${spec#* }
    src=$OUT/src-$arch-e256-f16.gguf
    [ -f "$src" ] || "$BUILD/polykv" gen-model --arch "$arch" --vocab "$vocab" --n-embd 256 --n-layer 2 \
        --n-head 4 --n-head-kv 2 --n-ff 512 --type f16 --seed 7 -o "$src" >&2
    for t in Q2_K Q3_K_S Q3_K_M IQ4_NL IQ4_XS Q4_K_M Q8_0; do
        m=$OUT/$arch-e256-$t.gguf
        [ -f "$m" ] || "$BIN/llama-quantize" "$src" "$m" "$t" 2 > "$OUT/quantize-$arch-$t.log" 2>&1
        p=0
        stats=""
        while IFS= read -r prompt; do
            "$OUT/ref_logits" "$m" "$prompt" > "$OUT/ref-$arch-$t-p$p.tsv"
            "$BUILD/bench/first_logits" "$m" "$prompt" > "$OUT/polykv-$arch-$t-p$p.tsv"
            stats="$stats $(paste "$OUT/ref-$arch-$t-p$p.tsv" "$OUT/polykv-$arch-$t-p$p.tsv" | awk '
                NR == 1 { next }
                $1 != $3 { print "token ids out of step" > "/dev/stderr"; exit 1 }
                { d = $2 - $4; if (d < 0) d = -d; if (d > md) md = d
                  a = $2 < 0 ? -$2 : $2; if (a > ma) ma = a
                  if (NR == 2 || $2 > br) { br = $2; ir = $1 }
                  if (NR == 2 || $4 > bp) { bp = $4; ip = $1 } }
                END { printf "%.3g:%.3g:%d", md, ma, ir == ip }')"
            p=$((p + 1))
        done < "$SHARED/reference/prompts.txt"
        echo "$stats" | tr ' ' '\n' | awk -F: -v name="$arch-$t" '
            NF == 3 { d[++n] = $1; if ($1 > md) md = $1; if ($2 > ma) ma = $2; agree += $3 }
            END { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (d[j] < d[i]) { x = d[i]; d[i] = d[j]; d[j] = x }
                  printf "%-22s %10.3g %10.3g %12.3g %4d/%d\n", name, md, ma, d[int((n + 1) / 2)], agree, n }'
    done
done
