#!/bin/sh
# bench/persist.sh MODEL [TOKENS] [RUNS] - what a restart costs a pinned
# pool with --pool-dir: the pool's prefill (its create answer's "ms") against
# its restore at the next start (the engine's "restored ... in X ms" line),
# RUNS times (3), each on a fresh directory; prints both per run and the
# medians and their ratio.  Loopback only; stops its servers itself.
set -eu
model=$1
n=${2:-4000}
runs=${3:-3}
bin=${POLYKV_BIN:-build/polykv}
port=${PORT:-18977}
ctx=$((n + 512))
tokens=$(awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", 100 + (i * 7919) % 20000 }')

serve() {  # serve DIR LOG: starts the server, waits for /health
    "$bin" serve -m "$model" -c "$ctx" -np 1 -t 1 --port "$port" --pools 4 --pool-dir "$1" 2> "$2" &
    pid=$!
    i=0
    until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
        i=$((i + 1)); [ $i -lt 3000 ] || { cat "$2"; exit 1; }; sleep 0.01
    done
}

pre=""; res=""
for r in $(seq 1 "$runs"); do
    dir=$(mktemp -d)
    serve "$dir" "$dir/log1"
    ms=$(curl -s "http://127.0.0.1:$port/polykv/pools" -d "{\"tokens\": [$tokens]}" | sed -n 's/.*"ms":\([0-9.]*\).*/\1/p')
    curl -s -X POST "http://127.0.0.1:$port/polykv/pools/1/pin" > /dev/null
    kill "$pid"; wait "$pid" || true
    serve "$dir" "$dir/log2"
    rs=$(sed -n 's/.*pool restored ([0-9]* tokens) in \([0-9.]*\) ms.*/\1/p' "$dir/log2")
    kill "$pid"; wait "$pid" || true
    echo "run $r: prefill $ms ms, restore $rs ms ($(du -k "$dir/pool-1.pkv" | cut -f1) KiB file)"
    pre="$pre $ms"; res="$res $rs"
    rm -rf "$dir"
done
med() { echo "$@" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mp=$(med $pre); mr=$(med $res)
echo "median: prefill $mp ms, restore $mr ms, restore/prefill $(awk -v a="$mr" -v b="$mp" 'BEGIN { printf "%.4f", a / b }')"
