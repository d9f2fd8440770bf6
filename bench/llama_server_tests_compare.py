"""Compares two junit files of bench/llama_server_tests.sh runs (llama-server's
and polykv's): per test file, passed / failed / skipped for each, and the tests
the first passes and the second does not, with the second's failure message.

    python3 bench/llama_server_tests_compare.py llama.xml polykv.xml [--list]
"""
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def load(path):
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("classname", "").replace("unit.", "") + "::" + tc.get("name")
        state, msg = "passed", ""
        for kind in ("failure", "error", "skipped"):
            el = tc.find(kind)
            if el is not None:
                state = "skipped" if kind == "skipped" else "failed"
                msg = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
                break
        out[name] = (state, msg)
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    per = defaultdict(lambda: defaultdict(int))
    for name, (st, _) in a.items():
        per[name.split("::")[0]]["a_" + st] += 1
    for name, (st, _) in b.items():
        per[name.split("::")[0]]["b_" + st] += 1
    print("| file | llama-server p/f/s | polykv p/f/s | polykv passes of llama's |")
    print("|---|---|---|---|")
    tot = defaultdict(int)
    for f in sorted(per):
        d = per[f]
        both = sum(1 for n, (st, _) in a.items() if n.startswith(f + "::") and st == "passed"
                   and b.get(n, ("",))[0] == "passed")
        la = sum(1 for n, (st, _) in a.items() if n.startswith(f + "::") and st == "passed")
        for k in ("a_passed", "a_failed", "a_skipped", "b_passed", "b_failed", "b_skipped"):
            tot[k] += d[k]
        tot["both"] += both
        tot["la"] += la
        print(f"| {f} | {d['a_passed']}/{d['a_failed']}/{d['a_skipped']} | "
              f"{d['b_passed']}/{d['b_failed']}/{d['b_skipped']} | {both}/{la} |")
    print(f"| all | {tot['a_passed']}/{tot['a_failed']}/{tot['a_skipped']} | "
          f"{tot['b_passed']}/{tot['b_failed']}/{tot['b_skipped']} | {tot['both']}/{tot['la']} |")
    if "--list" in sys.argv:
        for n, (st, _) in sorted(a.items()):
            if st == "passed" and b.get(n, ("missing", ""))[0] != "passed":
                print(f"{b.get(n, ('missing', ''))[0]}: {n}: {b.get(n, ('', ''))[1]}")


main()
