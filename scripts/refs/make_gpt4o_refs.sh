#!/bin/sh
# make_gpt4o_refs.sh - writes tests/data/pretok/gpt-4o-llama3.{inp,out}: the
# reference engine's own token ids for the gpt-4o pre-tokenizer's test
# texts, which tests/test_tok.c checks polykv against.  No o200k vocabulary
# is at hand, so the reference tokenizes with the Llama 3 vocabulary
# relabelled "gpt-4o": the ids then differ wherever the two engines split a
# text differently.  Never run by the Makefile: it needs a llama.cpp build
# beside the project.
#
#   1. The cases of tests/data/pretok/gpt-4o.txt (tests/pretok/oracle.py)
#      that are valid UTF-8 without NUL (the .inp format and test_tok's
#      round trip need both) go to gpt-4o-llama3.inp.
#   2. scripts/refs/relabel_pre.py copies $PEER/models/ggml-vocab-llama-bpe.gguf
#      with tokenizer.ggml.pre = gpt-4o (PY: a Python with numpy).
#   3. scripts/refs/probe.cpp tokenizes them (no special tokens added or
#      parsed), one line of ids per text.
#
# Usage: sh scripts/refs/make_gpt4o_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   OUT   the relabelled vocabulary and the probe (default /work/peers/gpt4o-refs)
#   PY    Python with numpy (default python3)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/gpt4o-refs}
PY=${PY:-python3}
DATA=tests/data/pretok
. scripts/refs/lib.sh
refs_start make_gpt4o_refs.sh
say python3 tests/pretok/oracle.py inp "$DATA/gpt-4o.txt" "$DATA/gpt-4o-llama3.inp"
say "$PY" scripts/refs/relabel_pre.py "$PEER/models/ggml-vocab-llama-bpe.gguf" "$OUT/llama3-gpt-4o.gguf" gpt-4o
say "$OUT/probe" tokenize "$OUT/llama3-gpt-4o.gguf" "$DATA/gpt-4o-llama3.inp" "$DATA/gpt-4o-llama3.out"
