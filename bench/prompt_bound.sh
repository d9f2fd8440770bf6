#!/bin/sh
# Time to refuse a text prompt far past the context (docs/benchmarks.md):
# BIN serve on a loopback port, N posts of a ~8 MB /completion prompt, the
# median milliseconds to the 400.  Usage: bench/prompt_bound.sh BIN MODEL [N]
bin=$1; model=$2; n=${3:-5}; port=${PORT:-18931}
tmp=$(mktemp -d)
python3 -c "import json; print(json.dumps({'prompt': 'Once upon a time there was a cat. ' * 240000, 'n_predict': 1}))" > "$tmp/body.json"
"$bin" serve -m "$model" -c 1024 -np 1 -t 1 --port "$port" --max-body 16777216 2>/dev/null &
pid=$!
i=0; until curl -s "http://127.0.0.1:$port/health" >/dev/null 2>&1 || [ $i -gt 300 ]; do sleep 0.1; i=$((i + 1)); done
for k in $(seq "$n"); do
    curl -s -o /dev/null -w '%{time_total}\n' -H 'content-type: application/json' --data-binary @"$tmp/body.json" \
        "http://127.0.0.1:$port/completion"
done | sort -n | awk '{ t[NR] = $1 * 1000 } END { printf "median %.0f ms over %d posts of %d bytes\n", t[int((NR + 1) / 2)], NR, '"$(wc -c < "$tmp/body.json")"' }'
kill "$pid"; wait "$pid" 2>/dev/null
rm -rf "$tmp"
