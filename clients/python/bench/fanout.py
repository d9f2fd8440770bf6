"""The fan-out example side by side: plain ChatOpenAI against polykv, and
the package with and without its pool attach.

    build/venv-bench/bin/pip install -r clients/python/requirements-bench.txt
    build/venv-bench/bin/pip install --no-deps ./clients/python
    build/venv-bench/bin/python clients/python/bench/fanout.py --model MODEL.gguf [-k 4] [--runs 3]

Each variant gets a fresh `polykv serve --metrics` (-np 4 -c 8192 -t 2) and
runs examples/supervisor.py's graph --runs times, each on a new task (so
no run reuses the previous one's task prefix; the system block is the same
for all, as in a real deployment).  Per run: wall time of the graph, and the
prompt tokens the engine evaluated (the delta of llamacpp:prompt_tokens_total,
which counts every non-decode token through the batch, pool prefills
included).  Prints medians and each variant's ratio to ChatOpenAI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from supervisor import SYSTEM, build_graph  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def serve(bin_path: str, model: str) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([bin_path, "serve", "-m", model, "--port", "0", "-np", "4", "-c", "8192", "-t", "2",
                          "--metrics"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=p.stdout.read, daemon=True).start()
            url = m.group(1)
            while httpx.get(url + "/health").status_code != 200:
                time.sleep(0.05)
            return p, url
    raise RuntimeError("polykv serve did not start")


def prompt_tokens(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return float(re.search(r"^llamacpp:prompt_tokens_total (\S+)", text, re.M).group(1))


def chatopenai_factory(url: str, max_tokens: int):
    from langchain_openai import ChatOpenAI
    return lambda session, pool: ChatOpenAI(base_url=url + "/v1", api_key="none", model="polykv",
                                            max_tokens=max_tokens, temperature=0.0,
                                            default_headers={"x-session-id": session})


def run_variant(name: str, args) -> list[dict]:
    p, url = serve(args.bin, args.model)
    try:
        factory = chatopenai_factory(url, args.max_tokens) if name == "chatopenai" else None
        app, _, _ = build_graph(url, use_pools=(name == "polykv-pools"), max_tokens=args.max_tokens,
                                system=SYSTEM * args.system_repeat, chat_factory=factory, compact_threshold=2.0)
        rows = []
        for r in range(args.runs):
            before = prompt_tokens(url)
            t0 = time.monotonic()
            out = app.invoke({"task": f"case {r}: how shared prefixes change the cost of agent number {r}",
                              "k": args.k}, {"recursion_limit": 200})
            wall = time.monotonic() - t0
            assert len(out["findings"]) == args.k
            calls = [u for u in out["usage"] if "input_tokens" in u]
            rows.append({"variant": name, "run": r, "wall_s": wall, "prompt_eval": prompt_tokens(url) - before,
                         "prompt_tokens": sum(u["input_tokens"] for u in calls),
                         "cache_read": sum(u["cache_read"] for u in calls)})
        return rows
    finally:
        p.terminate()
        p.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models",
                                                    "rand-qwen2-qwen2vocab-e64-l2-F16.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "polykv"))
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--system-repeat", type=int, default=4)
    a = ap.parse_args()
    rows = []
    for name in ("chatopenai", "polykv-nopool", "polykv-pools"):
        rows += run_variant(name, a)
    med = {}
    for name in ("chatopenai", "polykv-nopool", "polykv-pools"):
        rs = [r for r in rows if r["variant"] == name]
        med[name] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "prompt_eval", "prompt_tokens",
                                                                      "cache_read")}
    print(json.dumps(rows))
    print(f"k={a.k} researchers + 1 supervisor, {a.runs} runs each, medians")
    print("| variant | prompt tokens sent | read from cache | evaluated by the engine | wall s | evaluated vs ChatOpenAI | wall vs ChatOpenAI |")
    print("|---|---|---|---|---|---|---|")
    base = med["chatopenai"]
    for name, m in med.items():
        print(f"| {name} | {m['prompt_tokens']:.0f} | {m['cache_read']:.0f} | {m['prompt_eval']:.0f} | "
              f"{m['wall_s']:.3f} | {m['prompt_eval'] / base['prompt_eval']:.2f} | {m['wall_s'] / base['wall_s']:.2f} |")


if __name__ == "__main__":
    main()
