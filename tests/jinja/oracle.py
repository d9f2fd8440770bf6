"""The Jinja oracle: every template x every conversation rendered by jinja2
exactly as Hugging Face transformers' apply_chat_template sets it up, and by
`polykv template`; the two outputs must be byte-identical, or both must raise
the same class of error.

Usage: python oracle.py POLYKV_BIN TEMPLATE_DIR [--excluded FILE]
Exits 1 when a template outside the excluded list disagrees, when the corpus
does not hold the N_TEMPLATES templates docs/chat-templates.md counts, or when
fewer than all of them agree on every conversation.
"""
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# docs/chat-templates.md: "All 70 templates agree byte for byte".  A corpus of
# another size, or one template fewer agreeing, makes that sentence false.
N_TEMPLATES = 70
MIN_AGREE = N_TEMPLATES
NOW = 1768478400  # 2026-01-15 12:00:00 UTC: strftime_now's fixed clock on both sides
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "documents": None}


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers renders the body
    as it is (it only records where the assistant's text lies)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_py(env, src, ctx):
    try:
        return True, env.from_string(src).render(**ctx)
    except Exception as e:  # a template error is an expected outcome
        return False, f"{type(e).__name__}: {e}"


# polykv's messages keep Python's and jinja2's wording; the class each one
# names, first match wins.  A message not here is class "?", which agrees
# with nothing: a new kind of refusal must be classed before it can pass.
C_ERROR_CLASSES = [
    ("is unsafe", "SecurityError"),
    ("No filter named", "TemplateRuntimeError"),
    ("No test named", "TemplateRuntimeError"),
    ("has no callable attribute", "UndefinedError"),
    ("is undefined", "UndefinedError"),
    ("undefined value", "UndefinedError"),
    ("division by zero", "ZeroDivisionError"),
    ("modulo by zero", "ZeroDivisionError"),
    ("unsupported operand type", "TypeError"),
    ("is not iterable", "TypeError"),
    ("Can only get item pairs from a mapping", "TypeError"),
    ("is not JSON serializable", "TypeError"),
    ("has no len()", "TypeError"),
    ("not supported between instances of", "TypeError"),
    ("unhashable type", "TypeError"),
    ("bad operand type", "TypeError"),
    ("object is not callable", "TypeError"),
    ("requires string as left operand", "TypeError"),
    ("integer argument expected", "TypeError"),
    ("slice indices must be integers", "TypeError"),
    ("must be str", "TypeError"),
    ("expected str instance", "TypeError"),
    ("slice step cannot be zero", "ValueError"),
    ("must not be zero", "ValueError"),
    ("cannot unpack", "ValueError"),
    ("empty separator", "ValueError"),
    ("x not in list", "ValueError"),
]


def c_error_class(msg):
    for needle, cls in C_ERROR_CLASSES:
        if needle in msg:
            return cls
    return "?"


def same_error(py_out, c_out):
    """Both raised: the same class, and raise_exception's message unchanged."""
    cls = py_out.split(":")[0]
    if c_out.startswith("CRASH"):
        return False
    if cls == "TemplateError":
        return py_out[len("TemplateError: "):] in c_out
    return c_error_class(c_out) == cls


def render_c(binary, tpath, cpath):
    p = subprocess.run([binary, "template", "--file", tpath, "--context", cpath, "--now", str(NOW)],
                       capture_output=True, timeout=60)
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8", "surrogateescape")
    if p.returncode == 1 and p.stderr.startswith(b"template error:"):
        return False, p.stderr.decode("utf-8", "replace").strip()
    return False, f"CRASH rc={p.returncode}: {p.stderr.decode('utf-8', 'replace')[-300:]}"


def main():
    binary, tdir = sys.argv[1], sys.argv[2]
    excluded = {}
    if "--excluded" in sys.argv:
        for line in open(sys.argv[sys.argv.index("--excluded") + 1], encoding="utf-8"):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, why = line.partition(" ")
                excluded[name] = why.strip()
    convs = sorted(glob.glob(os.path.join(HERE, "conversations", "*.json")))
    templates = sorted(glob.glob(os.path.join(tdir, "*.jinja")))
    env = environment()
    n_agree, failed, rows, crashes, raised = 0, [], [], 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        for tpath in templates:
            name = os.path.basename(tpath)
            src = open(tpath, encoding="utf-8").read()
            ok_all, n_same, n_raise, first_diff = True, 0, 0, ""
            for cpath in convs:
                ctx = dict(TOKENS)
                ctx.update(json.load(open(cpath, encoding="utf-8")))
                full = os.path.join(tmp, "ctx.json")
                json.dump(ctx, open(full, "w", encoding="utf-8"), ensure_ascii=False)
                py_ok, py_out = render_py(env, src, ctx)
                c_ok, c_out = render_c(binary, tpath, full)
                crashes += c_out.startswith("CRASH")
                same = (py_ok and c_ok and py_out == c_out) or (not py_ok and not c_ok and same_error(py_out, c_out))
                if same and not py_ok:
                    raised.setdefault(py_out.split(":")[0], 0)
                    raised[py_out.split(":")[0]] += 1
                if same:
                    n_same += 1
                    n_raise += not py_ok
                else:
                    ok_all = False
                    if not first_diff:
                        conv = os.path.basename(cpath)
                        if py_ok and c_ok:
                            k = next((i for i in range(min(len(py_out), len(c_out))) if py_out[i] != c_out[i]),
                                     min(len(py_out), len(c_out)))
                            first_diff = f"{conv}: differs at {k}: jinja2 {py_out[k:k+40]!r} polykv {c_out[k:k+40]!r}"
                        else:
                            first_diff = f"{conv}: jinja2 {'ok' if py_ok else py_out[:120]!r} / polykv {'ok' if c_ok else c_out[:160]!r}"
            n_agree += ok_all
            status = "agree" if ok_all else ("excluded" if name in excluded else "FAIL")
            if not ok_all and name not in excluded:
                failed.append(name)
            rows.append((name, status, n_same, n_raise, first_diff or excluded.get(name, "")))
    print(f"| template | result | conversations identical (of {len(convs)}) | of which both raise | note |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4][:200]} |")
    print(f"{n_agree} of {len(templates)} templates agree byte for byte on all {len(convs)} conversations "
          f"(both raising the same class counts as agreeing); {len(failed)} disagree outside the excluded list; "
          f"{crashes} crashes")
    print("both raise: " + ", ".join(f"{k} x{v}" for k, v in sorted(raised.items())))
    if failed:
        print("disagree: " + " ".join(failed))
    if len(templates) != N_TEMPLATES:
        print(f"the corpus holds {len(templates)} templates; docs/chat-templates.md counts {N_TEMPLATES}")
    if n_agree < MIN_AGREE:
        print(f"{n_agree} templates agree; every one of the {MIN_AGREE} must")
    bad = failed or crashes or len(templates) != N_TEMPLATES or n_agree < MIN_AGREE
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
