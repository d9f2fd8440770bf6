#!/bin/sh
# bench/fanout.sh - the pools issue's side-by-side run in one command:
#   sh bench/fanout.sh MODEL.gguf [LLAMA_SERVER_BIN]
# runs bench/fanout.mjs against polykv with pools, polykv without pools
# (implicit sharing, RAM tier on) and, when given, llama-server (default
# settings), each started fresh with -np 8 -c 24576 -t 2, one at a time.
set -e
model=${1:?usage: sh bench/fanout.sh MODEL.gguf [LLAMA_SERVER_BIN]}
peer=$2
bin=${POLYKV_BIN:-build/polykv}
args="-np 8 -c 24576 -t 2"
out=${FANOUT_OUT:-build/fanout}
mkdir -p "$out"
wait_up() {
    for i in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "server on port $1 did not come up" >&2
    return 1
}
run() {   # name port mode command...
    name=$1 port=$2 mode=$3
    shift 3
    "$@" > "$out/$name.log" 2>&1 &
    pid=$!
    wait_up "$port"
    node bench/fanout.mjs --url "http://127.0.0.1:$port" --mode "$mode" --json > "$out/$name.json"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$name: $(cat "$out/$name.json")"
}
run polykv-pools 18090 pools $bin serve -m "$model" $args --port 18090
run polykv-implicit 18091 implicit $bin serve -m "$model" $args --port 18091
[ -n "$peer" ] && run llama-server 18092 implicit "$peer" -m "$model" $args --port 18092
node -e '
const fs = require("fs"), d = process.argv[1];
const rows = ["polykv-pools", "polykv-implicit", "llama-server"].filter((n) => fs.existsSync(`${d}/${n}.json`))
  .map((n) => [n, JSON.parse(fs.readFileSync(`${d}/${n}.json`))]);
console.log("| phase | " + rows.map(([n]) => n + " prompt / restored / s").join(" | ") + " |");
const names = rows[0][1].phases.map((p) => p.name);
for (const nm of [...new Set(rows.flatMap(([, r]) => r.phases.map((p) => p.name)))]) {
  const cells = rows.map(([, r]) => { const p = r.phases.find((x) => x.name === nm);
    return p ? `${p.prompt_n} / ${p.restored} / ${(p.ms / 1000).toFixed(1)}` : "-"; });
  console.log(`| ${nm} | ${cells.join(" | ")} |`);
}
console.log("| total | " + rows.map(([, r]) => `${r.total.prompt_n} / ${r.total.restored} / ${(r.total.ms / 1000).toFixed(1)}`).join(" | ") + " |");
' "$out"
