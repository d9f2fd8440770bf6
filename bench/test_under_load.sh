#!/bin/sh
# bench/test_under_load.sh [RUNS] [OUT_DIR] - `make test` RUNS times in a
# row (default 5) while `make bench` runs beside it in a loop: the suite
# must stay green on a loaded machine (issue 17).  Each run's output is
# kept in OUT_DIR (default build/under-load); runs.txt gets a line per run
# with its load average and summary.  LLAMA_CPP_BIN, when set, reaches
# make bench as usual.  Exits non-zero when any run failed.
set -u
runs=${1:-5}
out=${2:-build/under-load}
mkdir -p "$out"
rm -f "$out/stop"
load() { cut -d' ' -f1-3 /proc/loadavg; }
( i=0
  while [ ! -f "$out/stop" ]; do
      i=$((i + 1))
      make bench > "$out/bench$i.log" 2>&1
      echo "bench $i rc=$? end $(date -u +%T)" >> "$out/bench.txt"
  done ) &
bench=$!
sleep 60                            # the benchmark is under way first
bad=0
for r in $(seq 1 "$runs"); do
    echo "test $r start $(date -u +%T) load $(load)" >> "$out/runs.txt"
    make test > "$out/test$r.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || bad=$((bad + 1))
    echo "test $r rc=$rc end $(date -u +%T) load $(load): $(tail -n 1 "$out/test$r.log")" >> "$out/runs.txt"
done
touch "$out/stop"                   # the running benchmark finishes, no new one starts
wait $bench
cat "$out/runs.txt"
[ $bad -eq 0 ]
