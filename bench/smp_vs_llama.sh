#!/bin/sh
# smp_vs_llama.sh - polykv's sampler against the reference engine's sampler
# chain, token for token (bench/ref/smp_vs_llama.c says how), for a few
# vocabulary sizes: 100 (the reference's small-array paths), 32000 and
# 152064 (its bucket sort).  Needs the reference build beside the project
# (PEER, default /work/peers/llama.cpp, with build/bin/libllama.so); builds
# into OUT (default /tmp/pk_smp_vs_llama), never into the repository.
#
# Usage: sh bench/smp_vs_llama.sh [BUILD]   (from the repository root)
set -eu
build=${1:-build}
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/tmp/pk_smp_vs_llama}
BIN="$PEER/build/bin"
[ -f "$BIN/libllama.so" ] || { echo "$0: no $BIN/libllama.so (build the reference first)" >&2; exit 2; }
make -s "$build/libpolykv.a"
mkdir -p "$OUT"
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -I"$PEER/include" -I"$PEER/ggml/include" -Isrc \
    bench/ref/smp_vs_llama.c "$build/libpolykv.a" -L"$BIN" -lllama -lggml -lggml-base \
    -Wl,-rpath,"$BIN" -lmicrohttpd -ljansson -lxxhash -lcurl -lm -pthread -o "$OUT/smp_vs_llama"
rc=0
for run in "100 300" "32000 100" "152064 20"; do
    # shellcheck disable=SC2086 # two words on purpose: N_VOCAB STEPS
    "$OUT/smp_vs_llama" $run > "$OUT/last.txt" || rc=1
    grep ' [1-9][0-9]* of ' "$OUT/last.txt" || true
    echo "V ${run% *}: $(tail -n 1 "$OUT/last.txt")"
done
exit $rc
