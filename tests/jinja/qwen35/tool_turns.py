"""Oracle data for Qwen3.5's XML tool calls: chat_template.jinja (the
tokenizer.chat_template of a Qwen3.5 GGUF, byte for byte the same as
llama.cpp's models/templates/Qwen3.5-4B.jinja) rendered by jinja2, set up as
transformers sets it up (tests/jinja/oracle.py's environment), for assistant
turns that call tools.  tests/test_tools_families.c parses each turn's text
back and tests/test_server.c renders the history case through the server.

Usage (from the repository root, with the pinned jinja2 of make test):
    build/venv/bin/python tests/jinja/qwen35/tool_turns.py > tests/jinja/qwen35/tool_turns.json

Each turn's "text" is what the model writes for that turn: the rendering of
[user, assistant] minus the rendering of [user] with the generation prompt
(which ends inside "<think>\\n"), up to the turn's "<|im_end|>".  Each call's
"want" is its arguments as compact JSON, the form srv_tools_parse returns.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from oracle import TOKENS, environment  # noqa: E402

END = "<|im_end|>\n"


def fn(name, props, required=()):
    return {"type": "function", "function": {"name": name, "description": name.replace("_", " "),
            "parameters": {"type": "object", "properties": props, "required": list(required)}}}


TOOLS = [
    fn("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"]),
    fn("search", {"query": {"type": "string"}, "limit": {"type": "integer"}, "filters": {"type": "object"},
                  "tags": {"type": "array", "items": {"type": "string"}}}, ["query"]),
    fn("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    fn("set_alarm", {"enabled": {"type": "boolean"}, "volume": {"type": "number"},
                     "label": {"type": ["string", "null"]}, "code": {"type": "string"}}),
    fn("now", {}),
]

# (name, reasoning, content, [(function, arguments)])
TURNS = [
    ("one_string", "The user wants the weather in Paris.", "", [("get_weather", {"city": "Paris"})]),
    ("content_and_integer", "Three days of forecast.", "Let me look that up.",
     [("get_weather", {"city": "Z\u00fcrich", "days": 3})]),
    ("object_and_array", "Search with filters.", "",
     [("search", {"query": "llama.cpp", "limit": 10, "filters": {"lang": "C", "stars": {"min": 100}},
                  "tags": ["inference", "gguf"]})]),
    ("multi_line_string", "Write the file.", "Writing it now.",
     [("write_file", {"path": "src/hello.py",
                      "content": "\ndef hello():\n    print(\"<b>hi</b>\")\n\n"})]),
    ("two_calls", "Two things to look up.", "", [("get_weather", {"city": "Oslo"}), ("now", {})]),
    ("typed_scalars", "Set it.", "", [("set_alarm", {"enabled": True, "volume": 0.25, "label": None,
                                                     "code": "12345"})]),
    ("no_reasoning_no_content", "", "", [("now", {})]),
]

USER = {"role": "user", "content": "Please help."}


def render(env, src, messages, add_generation_prompt):
    ctx = dict(TOKENS)
    ctx.update({"messages": messages, "tools": TOOLS, "add_generation_prompt": add_generation_prompt})
    return env.from_string(src).render(**ctx)


def assistant(reasoning, content, calls, string_arguments=False):
    tc = [{"id": "call_%d" % i, "type": "function",
           "function": {"name": f, "arguments": json.dumps(a, ensure_ascii=False) if string_arguments else a}}
          for i, (f, a) in enumerate(calls)]
    return {"role": "assistant", "reasoning_content": reasoning, "content": content, "tool_calls": tc}


def main():
    env = environment()
    src = open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8").read()
    out = {"tools": TOOLS, "turns": []}
    head = render(env, src, [USER], True)
    assert head.endswith("<|im_start|>assistant\n<think>\n")
    for name, reasoning, content, calls in TURNS:
        full = render(env, src, [USER, assistant(reasoning, content, calls)], False)
        assert full.startswith(head) and full.endswith(END), name
        out["turns"].append({
            "name": name, "reasoning": reasoning, "content": content,
            "calls": [{"name": f, "want": json.dumps(a, ensure_ascii=False, separators=(",", ":"))}
                      for f, a in calls],
            "text": full[len(head):-len(END)],
        })
    # A conversation as an OpenAI client sends it back (arguments as JSON
    # strings), and the prompt the template gives it with the arguments as
    # the objects it iterates.
    _, reasoning, content, calls = TURNS[1]
    tail = [{"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 18}"}]
    out["history"] = {
        "messages": [USER, assistant(reasoning, content, calls, True)] + tail,
        "prompt": render(env, src, [USER, assistant(reasoning, content, calls)] + tail, True),
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
