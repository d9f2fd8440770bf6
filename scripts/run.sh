#!/bin/sh
# `make run`: the server (polykv serve) on MODEL, or on a random-weight demo
# model that gen-model makes once (with the Qwen2 vocabulary of ../shared
# when present, else a byte vocabulary).  HOST, PORT and ARGS (more serve
# flags) pass through; Ctrl-C stops it.
bin=$1
model=$2
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
    echo "make run: random-weight demo model: pass -m to serve a real GGUF (make run MODEL=path)" >&2
fi
# shellcheck disable=SC2086
exec "$bin" serve -m "$model" --host "${HOST:-127.0.0.1}" --port "${PORT:-8080}" --metrics $ARGS
