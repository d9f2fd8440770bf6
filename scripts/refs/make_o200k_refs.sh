#!/bin/sh
# make_o200k_refs.sh - writes tests/data/o200k/: llama.cpp's token ids for
# gpt-oss's vocabulary (o200k_harmony, written by scripts/o200k_vocab.mjs
# from the pinned js-tiktoken ranks, as make test writes it), which
# tests/test_tok.c checks polykv's tokenizer against.  Never run by the
# Makefile: it needs a llama.cpp build beside the project.
#
#   scripts/refs/probe.cpp's `tokenize` (llama.cpp's tokenizer, vocabulary
#   only, no special tokens added or parsed) on ../shared's tokenizer test
#   inputs (ggml-vocab-qwen35.gguf.inp, llama.cpp's usual set) and on
#   tests/data/pretok/gpt-4o-llama3.inp (the pre-tokenizer's hard cases);
#   the commands and the sha256 of the vocabulary and of each file in
#   tests/data/o200k/commands.txt.
#
# Usage: sh scripts/refs/make_o200k_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   the vocabulary and the probe (default /work/peers/o200k)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/o200k}
SHARED=${POLYKV_SHARED:-../shared}
DATA=tests/data/o200k
. scripts/refs/lib.sh
refs_start make_o200k_refs.sh

say node scripts/o200k_vocab.mjs "$OUT/gpt-oss-o200k.gguf"
echo "# sha256 $(sha256sum "$OUT/gpt-oss-o200k.gguf" | cut -d' ' -f1)  \$OUT/gpt-oss-o200k.gguf" >> "$log"
say "$OUT/probe" tokenize "$OUT/gpt-oss-o200k.gguf" "$SHARED/models/vocab/ggml-vocab-qwen35.gguf.inp" "$DATA/vocab.out"
say "$OUT/probe" tokenize "$OUT/gpt-oss-o200k.gguf" tests/data/pretok/gpt-4o-llama3.inp "$DATA/pretok.out"
(cd "$DATA" && sha256sum ./*.out | sed 's/^/# sha256 /') >> "$log"
