#!/bin/sh
# fuzz/run.sh [SECONDS] - fuzzes the GGUF reader with libFuzzer for SECONDS
# (default 60).  Builds build-fuzz/fuzz_gguf with clang's fuzzer, ASan and
# UBSan, seeds build-fuzz/corpus_gguf with tiny files from the writer and the
# small real GGUFs in ../shared/models when present, and exits non-zero when
# libFuzzer finds a crash, a leak or a hang (the input is saved in build-fuzz/).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
cc=${FUZZ_CC:-clang}
src="src/gguf/gguf.c src/gguf/gguf_write.c src/common/pk.c"
flags="-std=c11 -D_GNU_SOURCE -Wall -Wextra -g"
mkdir -p "$out/corpus_gguf"

$cc $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer $src fuzz/fuzz_gguf.c -o "$out/fuzz_gguf"
$cc $flags -O1 $src fuzz/seed_gguf.c -o "$out/seed_gguf"
"$out/seed_gguf" "$out/corpus_gguf"
for f in ../shared/models/stories260K.gguf ../shared/models/vocab/*.gguf; do
    if [ -f "$f" ]; then cp "$f" "$out/corpus_gguf/"; fi
done

"$out/fuzz_gguf" "$out/corpus_gguf" -max_total_time="$secs" -max_len=2097152 \
    -rss_limit_mb=4096 -timeout=10 -artifact_prefix="$out/" -print_final_stats=1
