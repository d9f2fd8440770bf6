#!/bin/sh
# `make run`: a generation on MODEL, or on a random-weight demo model that
# gen-model makes once (with the Qwen2 vocabulary of ../shared when present,
# else a byte vocabulary).
bin=$1
model=$2
prompt=${PROMPT:-"Once upon a time"}
if [ -z "$model" ]; then
    model=models/demo-qwen2-q8_0.gguf
    if [ ! -f "$model" ]; then
        mkdir -p models
        vocab=""
        [ -f ../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf ] &&
            vocab="--vocab ../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf"
        echo "make run: making a random-weight demo model ($model)"
        "$bin" gen-model --arch qwen2 $vocab --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 \
            --n-ff 768 --type q8_0 --seed 1 -o "$model" || exit 1
    fi
    echo "make run: random-weight demo model: pass MODEL=path to run a real GGUF"
fi
exec "$bin" run -m "$model" -p "$prompt" -n "${N:-64}"
