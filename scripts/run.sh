#!/bin/sh
# `make run`: the server (polykv serve) on MODEL, which is a GGUF path or
# hf:USER/REPO[:QUANT], a model by name from the Hugging Face hub, found in
# its cache or downloaded there (docs/models.md).  Without MODEL: a small
# real instruct model, Qwen3.5 0.8B (llama.cpp's own example repo), when it
# is cached or the hub answers within 5 s; else a random-weight demo model
# that gen-model makes once (with the Qwen2 vocabulary of ../shared when
# present, else a byte vocabulary).  HOST, PORT and ARGS (more serve flags)
# pass through; Ctrl-C stops it.
bin=$1
model=$2
default_hf=ggml-org/Qwen3.5-0.8B-GGUF
serve() {
    # shellcheck disable=SC2086
    exec "$bin" serve "$@" --host "${HOST:-127.0.0.1}" --port "${PORT:-8080}" --metrics $ARGS
}
case $model in
hf:*) serve -hf "${model#hf:}" ;;
?*) serve -m "$model" ;;
esac

# The default model: the pull's progress shows (a line per 10%), its
# "cannot reach the hub" does not: the line below says it once.
rc=$( { "$bin" pull -hf "$default_hf" --connect-timeout 5 2>&1 >/dev/null; echo "rc=$?"; } |
      while IFS= read -r line; do
          case $line in
          rc=*) echo "${line#rc=}" ;;
          *"cannot reach the hub"*) ;;
          *) echo "$line" >&2 ;;
          esac
      done)
[ "$rc" = 0 ] && serve -hf "$default_hf"

model=models/demo-qwen2-q8_0.gguf
if [ ! -f "$model" ]; then
    mkdir -p models
    vocab=""
    [ -f ../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf ] &&
        vocab="--vocab ../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf"
    "$bin" gen-model --arch qwen2 $vocab --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 \
        --n-ff 768 --type q8_0 --seed 1 -o "$model" >/dev/null || exit 1
fi
echo "make run: $default_hf is not cached and the hub is out of reach: serving a random-weight demo model" \
     "($model); MODEL=path or MODEL=hf:USER/REPO:QUANT serves a real one" >&2
serve -m "$model"
