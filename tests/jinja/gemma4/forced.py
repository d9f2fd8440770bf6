"""Oracle data for Gemma 4's forced tool calls: chat_template.jinja rendered
by jinja2 (tests/jinja/oracle.py's environment, as turns.py sets it up) for
known calls of tools whose schemas hold strings, integers, numbers,
booleans, nulls, enums, nested objects, arrays and a free-form object.
tests/test_tools_families.c builds the forced-call grammar
(tool_choice "required") from these tools: every call's text must be a
sentence of it and parse back to the call's arguments; it also walks the
grammar at random and renders what it wrote back through the template.

Usage (from the repository root, with the pinned jinja2 of make test):
    build/venv/bin/python tests/jinja/gemma4/forced.py > tests/jinja/gemma4/forced.json

Each call's "text" is what the template writes for it in an assistant turn
without thinking or content: "<|tool_call>call:NAME{...}<tool_call|>".  Its
"want" is its arguments as compact JSON in the order the template prints
them (a dict's keys sorted by jinja2's dictsort, which ignores case): the
form srv_tools_parse returns.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from oracle import environment  # noqa: E402

OPEN, CLOSE = "<|tool_call>", "<tool_call|>"


def fn(name, props, required=()):
    return {"type": "function", "function": {"name": name, "description": name.replace("_", " "),
            "parameters": {"type": "object", "properties": props, "required": list(required)}}}


TOOLS = [
    fn("set_level", {"level": {"type": "integer", "minimum": 0, "maximum": 100},
                     "mode": {"type": "string", "enum": ["fast", "safe"]},
                     "note": {"type": "string", "maxLength": 12}}, ["level", "mode"]),
    fn("book", {"when": {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                                          "hour": {"type": "integer", "minimum": 0, "maximum": 23}},
                         "required": ["date"]},
                "Title": {"type": "string"},
                "guests": {"type": "array", "maxItems": 3,
                           "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                      "age": {"type": "integer"}},
                                     "required": ["name"]}},
                "price": {"type": "number"},
                "vip": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b c"]}},
                "ratio": {"type": ["number", "null"]},
                "level": {"enum": [1, 2.5, "max", None, True]}}, ["Title", "when"]),
    fn("log", {"message": {"type": "string"}, "extra": {"type": "object"}}, ["message"]),
    fn("now", {}),
]

CALLS = [
    ("set_level", {"level": 42, "mode": "safe"}),
    ("set_level", {"level": 0, "mode": "fast", "note": "x & \"y\"!"}),
    ("book", {"Title": "Dune, \"Part 2\"", "when": {"date": "2026-01-15", "hour": 9},
              "guests": [{"name": "Ana", "age": 30}, {"name": "Bo"}], "price": 0.25, "vip": True, "tags": ["b c"],
              "ratio": None, "level": 2.5}),
    ("book", {"Title": "", "when": {"date": "2024-02-28"}, "price": 1e-05, "ratio": 1.5e+20, "level": None}),
    ("book", {"Title": "Z\u00fcrich\nline <|x|>", "when": {"date": "1999-12-31"}, "price": -3, "vip": False,
              "tags": [], "level": "max"}),
    ("book", {"Title": "t", "when": {"date": "2000-01-01", "hour": 23}, "price": 12345.5, "ratio": -0.0001,
              "level": True}),
    ("log", {"message": "a:b}c, {d}", "extra": {"k": [1, {"z": None}], "A b": "v"}}),
    ("now", {}),
]

USER = {"role": "user", "content": "Please help."}


def dictsorted(v):
    """v with every dict's keys in dictsort's order (case ignored)."""
    if isinstance(v, dict):
        return {k: dictsorted(v[k]) for k in sorted(v, key=str.lower)}
    if isinstance(v, list):
        return [dictsorted(x) for x in v]
    return v


def main():
    env = environment()
    src = open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8").read()
    out = {"tools": TOOLS, "calls": []}
    for name, args in CALLS:
        turn = {"role": "assistant", "content": "",
                "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}
        text = env.from_string(src).render(messages=[USER, turn], tools=TOOLS, add_generation_prompt=False,
                                           bos_token="<bos>", eos_token="<eos>", documents=None,
                                           enable_thinking=True)
        a = text.index(OPEN)
        z = text.index(CLOSE, a) + len(CLOSE)
        out["calls"].append({"name": name, "text": text[a:z],
                             "want": json.dumps(dictsorted(args), ensure_ascii=False, separators=(",", ":"))})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
