#!/bin/sh
# Runs every test program in BUILD/tests, each in its own process with a
# timeout, from the repository root (so ../shared resolves).  Exit 77 means
# skipped (the test printed why).  Ends with "N passed, M failed, K skipped".
build=${1:-build}
timeout_s=${TEST_TIMEOUT:-600}
pass=0; fail=0; skip=0; failed=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s)
    out=$(timeout "$timeout_s" "$t" 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    case $rc in
    0)  pass=$((pass + 1)); echo "PASS $name (${secs}s): $(echo "$out" | tail -n 1)";;
    77) skip=$((skip + 1)); echo "SKIP $name: $(echo "$out" | grep '^SKIP' | head -n 1)";;
    *)  fail=$((fail + 1)); failed="$failed $name"
        echo "FAIL $name (exit $rc, ${secs}s)"; echo "$out" | tail -n 40 | sed 's/^/    /';;
    esac
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
