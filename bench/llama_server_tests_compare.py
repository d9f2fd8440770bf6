"""Compares two junit files of bench/llama_server_tests.sh runs (llama-server's
and polykv's, the second made with -o junit_logging=all so each test's server
output is in it): per test file, passed / failed / skipped for each, and the
tests the first passes and the second does not, grouped by why:

  jinja      the test starts its server with --jinja (the template engine
             lands in another branch; rerun after merging it)
  refused    polykv refused a flag at start-up (the reason it printed)
  no-model   the server started without -m (llama-server's router mode)
  route      a route polykv does not have (404 "File Not Found")
  other      anything else, with the failure message

    python3 bench/llama_server_tests_compare.py llama.xml polykv.xml [--list]
"""
import re
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
        log = "".join((el.text or "") for el in tc.iter() if el.tag in ("system-out", "system-err"))
        out[name] = (state, msg, log)
    return out


def why(msg, log):
    if re.search(r"starting server with: .* --jinja( |$)", log, re.M):
        return "jinja", ""
    m = re.search(r"^polykv serve: (--?[\w-]+)[: ](.*)$", log, re.M)
    if m:
        return "refused", f"{m.group(1)}: {m.group(2)}"
    m = re.search(r"^polykv serve: unknown option (\S+)", log, re.M)
    if m:
        return "refused", f"{m.group(1)}: unknown"
    if "usage: polykv serve -m MODEL" in log:
        return "no-model", ""
    m = re.search(r"^polykv: (.*)$", log, re.M)
    if "died" in msg and m:
        return "refused", m.group(1)
    if "404" in msg or "File Not Found" in msg or "NotFoundError" in msg:
        return "route", ""
    return "other", msg


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    per = defaultdict(lambda: defaultdict(int))
    for who, res in (("a", a), ("b", b)):
        for name, (st, _, _) in res.items():
            per[name.split("::")[0]][who + "_" + st] += 1
    print("| file | llama-server passed/failed/skipped | polykv passed/failed/skipped | polykv passes of llama-server's |")
    print("|---|---|---|---|")
    tot = defaultdict(int)
    for f in sorted(per):
        d = per[f]
        la = [n for n, (st, _, _) in a.items() if n.startswith(f + "::") and st == "passed"]
        both = sum(1 for n in la if b.get(n, ("",))[0] == "passed")
        for k in ("a_passed", "a_failed", "a_skipped", "b_passed", "b_failed", "b_skipped"):
            tot[k] += d[k]
        tot["both"] += both
        tot["la"] += len(la)
        print(f"| {f} | {d['a_passed']}/{d['a_failed']}/{d['a_skipped']} | "
              f"{d['b_passed']}/{d['b_failed']}/{d['b_skipped']} | {both}/{len(la)} |")
    print(f"| all | {tot['a_passed']}/{tot['a_failed']}/{tot['a_skipped']} | "
          f"{tot['b_passed']}/{tot['b_failed']}/{tot['b_skipped']} | {tot['both']}/{tot['la']} |")
    groups = defaultdict(list)
    for n, (st, _, _) in sorted(a.items()):
        if st != "passed":
            continue
        bst, bmsg, blog = b.get(n, ("missing", "", ""))
        if bst != "passed":
            g, detail = why(bmsg, blog)
            groups[g].append((n, detail))
    print()
    for g in ("jinja", "refused", "no-model", "route", "other"):
        print(f"{g}: {len(groups[g])}")
    if "--list" in sys.argv:
        for g in ("refused", "no-model", "route", "other", "jinja"):
            for n, detail in groups[g]:
                print(f"  {g}: {n}: {detail}")


main()
