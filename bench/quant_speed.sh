#!/bin/sh
# quant_speed.sh - prefill and decode tokens/s of polykv and the reference
# engine side by side on the low-bit types (docs/benchmarks.md): one
# random-weight llama model of 16 layers, n_embd 1024, n_ff 2816 (every row
# a multiple of 256) with stories260K's 512-token vocabulary, so the layers
# and not the output matrix set the speed, written as F16 by `polykv
# gen-model` and quantized by the reference's llama-quantize to Q2_K,
# Q3_K_M, IQ4_NL, IQ4_XS and Q4_K_M (the baseline polykv ran before).
#
# Each round runs `polykv bench` then `llama-bench` on the same file, both
# -t 2, -p 128 -n 64, one repetition; ROUNDS rounds (default 3); prints the
# medians and polykv / reference.  Files go under OUT (default
# /work/peers/quant), never into the repository.
#
# Usage: sh bench/quant_speed.sh [BUILD]   (from the repository root)
set -eu
BUILD=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/quant}
SHARED=${POLYKV_SHARED:-../shared}
ROUNDS=${ROUNDS:-3}
BIN=$PEER/build/bin
[ -d "$PEER/build" ] || { echo "quant_speed: no reference build at $PEER/build" >&2; exit 2; }
mkdir -p "$OUT"
for tool in llama-quantize llama-bench; do
    [ -x "$BIN/$tool" ] || cmake --build "$PEER/build" --target "$tool" -j2 >&2
done
make -s "$BUILD/polykv"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

src=$OUT/speed-src-f16.gguf
[ -f "$src" ] || "$BUILD/polykv" gen-model --arch llama --vocab "$SHARED/models/stories260K.gguf" --n-embd 1024 \
    --n-layer 16 --n-head 16 --n-head-kv 4 --n-ff 2816 --type f16 --seed 3 -o "$src" >&2

med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
printf '%-8s %14s %14s %6s %14s %14s %6s\n' type "polykv pp128" "ref pp128" ratio "polykv tg64" "ref tg64" ratio
for t in Q2_K Q3_K_M IQ4_NL IQ4_XS Q4_K_M; do
    m=$OUT/speed-$t.gguf
    [ -f "$m" ] || "$BIN/llama-quantize" "$src" "$m" "$t" 2 > "$OUT/quantize-speed-$t.log" 2>&1
    : > "$OUT/speed-$t.txt"
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        "$BUILD/polykv" bench -m "$m" -p 128 -n 64 -t 2 -r 1 --json 2>/dev/null |
            sed -n 's/.*"pp_tps":\([0-9.]*\),"tg_tps":\([0-9.]*\).*/polykv \1 \2/p' >> "$OUT/speed-$t.txt"
        "$BIN/llama-bench" -m "$m" -p 128 -n 64 -t 2 -r 1 -o csv 2>/dev/null | awk -F, '
            NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
            { gsub(/"/, ""); if ($c["n_prompt"] > 0) pp = $c["avg_ts"]; else tg = $c["avg_ts"] }
            END { print "ref", pp, tg }' >> "$OUT/speed-$t.txt"
        r=$((r + 1))
    done
    pp=$(awk '$1 == "polykv" { print $2 }' "$OUT/speed-$t.txt" | med)
    tg=$(awk '$1 == "polykv" { print $3 }' "$OUT/speed-$t.txt" | med)
    rpp=$(awk '$1 == "ref" { print $2 }' "$OUT/speed-$t.txt" | med)
    rtg=$(awk '$1 == "ref" { print $3 }' "$OUT/speed-$t.txt" | med)
    awk -v t="$t" -v a="$pp" -v b="$rpp" -v c="$tg" -v d="$rtg" \
        'BEGIN { printf "%-8s %14.1f %14.1f %6.2f %14.1f %14.1f %6.2f\n", t, a, b, a / b, c, d, c / d }'
done
