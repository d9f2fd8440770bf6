"""Oracle data for Gemma 4's tool calls: chat_template.jinja (llama.cpp's
models/templates/google-gemma-4-31B-it.jinja, the template of the Jinja
oracle's corpus, byte for byte) rendered by jinja2, set up as transformers
sets it up (tests/jinja/oracle.py's environment), for assistant turns that
think and call tools.  tests/test_tools_families.c parses each turn's text
back; tests/test_server.c parses it too, sends the result back as an OpenAI
client would (arguments as JSON strings, ids, the tools' results) and
renders that through the server, which must give the turn's "prompt".

Usage (from the repository root, with the pinned jinja2 of make test):
    build/venv/bin/python tests/jinja/gemma4/turns.py > tests/jinja/gemma4/turns.json

Each turn's "text" is what the model writes for that turn: the rendering of
[user, assistant] minus the rendering of [user] with the generation prompt
(thinking on: it ends "<|turn>model\\n"), up to the "<|tool_response>" the
template writes after calls (the token that ends the model's generation).
The template writes a turn's content after its calls, and a dict's keys
sorted.  Each call's "want" is its arguments as compact JSON, keys in that
order, the form srv_tools_parse returns.  A
turn's "prompt" is [user, assistant, one tool message per call] rendered
with the generation prompt, the arguments as the objects the template
iterates.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from oracle import environment  # noqa: E402

END = "<|tool_response>"
BOS = "<bos>"  # Gemma 4's; tests/test_server.c gives the server the same


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

# (name, reasoning, content, [(function, arguments)], [tool results])
TURNS = [
    ("one_string", "The user wants the weather in Paris.", "", [("get_weather", {"city": "Paris"})],
     ["{\"temp\": 18, \"sky\": \"clear\"}"]),
    ("content_and_integer", "Three days of forecast.", "Let me look that up.",
     [("get_weather", {"city": "Z\u00fcrich", "days": 3})], ["sunny, then rain"]),
    ("object_and_array", "Search with filters.", "",
     [("search", {"query": "llama.cpp", "limit": 10, "filters": {"lang": "C", "stars": {"min": 100}},
                  "tags": ["inference", "gguf"]})], ["3 results"]),
    ("hard_strings", "Write the file.\nIt holds code.", "Writing it now.",
     [("write_file", {"path": "src/a, b {c}.py",
                      "content": "def f(x):\n    return {\"a\": [x, 'b']}  # \u00fc \u4f60 \\n\t<b>\n"})], ["ok"]),
    ("two_calls", "Two things to look up.", "", [("get_weather", {"city": "Oslo"}), ("now", {})],
     ["{\"temp\": -3}", "2026-01-15T12:00:00Z"]),
    ("typed_scalars", "Set it.", "", [("set_alarm", {"enabled": True, "volume": 0.25, "label": None,
                                                     "code": "12345"})], ["set"]),
    ("empty_containers", "", "", [("search", {"query": "", "filters": {}, "tags": []})], ["none"]),
    ("no_reasoning_no_content", "", "", [("now", {})], ["noon"]),
]

USER = {"role": "user", "content": "Please help."}


def render(env, src, messages, add_generation_prompt):
    ctx = {"messages": messages, "tools": TOOLS, "add_generation_prompt": add_generation_prompt,
           "bos_token": BOS, "eos_token": "<eos>", "documents": None, "enable_thinking": True}
    return env.from_string(src).render(**ctx)


def assistant(reasoning, content, calls, string_arguments=False):
    tc = [{"id": "call_%d" % i, "type": "function",
           "function": {"name": f, "arguments": json.dumps(a, ensure_ascii=False) if string_arguments else a}}
          for i, (f, a) in enumerate(calls)]
    return {"role": "assistant", "reasoning_content": reasoning, "content": content, "tool_calls": tc}


def results(texts):
    return [{"role": "tool", "tool_call_id": "call_%d" % i, "content": t} for i, t in enumerate(texts)]


def main():
    env = environment()
    src = open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8").read()
    out = {"bos_token": BOS, "tools": TOOLS, "user": USER, "turns": []}
    head = render(env, src, [USER], True)
    assert head.endswith("<|turn>model\n")
    for name, reasoning, content, calls, res in TURNS:
        full = render(env, src, [USER, assistant(reasoning, content, calls)], False)
        assert full.startswith(head) and full.endswith(END), name
        out["turns"].append({
            "name": name, "reasoning": reasoning, "content": content,
            "calls": [{"name": f, "want": json.dumps(a, ensure_ascii=False, separators=(",", ":"), sort_keys=True)}
                      for f, a in calls],
            "text": full[len(head):-len(END)],
            "results": results(res),
            "prompt": render(env, src, [USER, assistant(reasoning, content, calls)] + results(res), True),
        })
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
