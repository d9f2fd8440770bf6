"""Chat-template rendering cost: polykv's Jinja engine (`polykv template
--bench N`, in process) beside jinja2 rendering the same compiled template in
Python the way transformers does, on a 20-message conversation with tools
(bench/jinja_20msg.json).  Prints a markdown table of medians and the ratio.

Usage: python bench/jinja_render.py POLYKV_BIN TEMPLATE_DIR [N]
(TEMPLATE_DIR: the corpus tests/jinja/fetch_templates.sh installs; the
largest template by bytes is measured, then the ones named below.)
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "jinja"))
import oracle  # noqa: E402

binary, tdir = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
ctx_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jinja_20msg.json")
ctx = json.load(open(ctx_path))
names = sorted(os.listdir(tdir), key=lambda f: -os.path.getsize(os.path.join(tdir, f)))
names = [f for f in names if f.endswith(".jinja")]
picked = [names[0]] + [f for f in ("Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja") if f in names]
env = oracle.environment()
print("| template | bytes | prompt bytes | polykv median us | jinja2 median us | jinja2 / polykv |")
print("|---|---|---|---|---|---|")
for name in picked:
    path = os.path.join(tdir, name)
    out = subprocess.run([binary, "template", "--file", path, "--context", ctx_path, "--now", str(oracle.NOW),
                          "--bench", str(n)], capture_output=True, text=True, check=True).stdout
    pk_us = float(out.split("median_us")[1].split()[0])
    t = env.from_string(open(path).read())
    prompt = t.render(**ctx)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        t.render(**ctx)
        times.append((time.perf_counter() - t0) * 1e6)
    py_us = statistics.median(times)
    print(f"| {name} | {os.path.getsize(path)} | {len(prompt.encode())} | {pk_us:.0f} | {py_us:.0f} | {py_us / pk_us:.1f}x |")
