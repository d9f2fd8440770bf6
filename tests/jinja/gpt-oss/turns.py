"""Writes turns.json: gpt-oss conversations (developer instructions, tools,
reasoning_effort, an assistant turn with reasoning_content and a tool call
whose arguments are a JSON string, the tool's result, a final answer with
its reasoning, a new question; and the same cut after the tool's result,
where the template keeps the call's analysis) as an OpenAI client sends
them, each with the prompt
jinja2 renders from chat_template.jinja (llama.cpp's
models/templates/openai-gpt-oss-120b.jinja) after the changes llama-server
makes for this template: reasoning_content copied to `thinking`, the content
of a turn with tool calls dropped, string arguments parsed into objects.
tests/test_server.c renders the request through polykv's server and
compares.  Usage (from the repository root, in build/venv):
  build/venv/bin/python tests/jinja/gpt-oss/turns.py
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import oracle  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"}}, "required": ["city"]}}}]

REQUEST = {
    "messages": [
        {"role": "developer", "content": "Answer briefly. Use metric units."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call get_weather.",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {
             "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "18 °C and clear.", "reasoning_content": "Report it."},
        {"role": "user", "content": "And \"tomorrow\" in Lima?\tThanks."},
    ],
    "tools": TOOLS,
    "chat_template_kwargs": {"reasoning_effort": "high"},
}


def adjusted(messages):
    out = []
    for m in copy.deepcopy(messages):
        if isinstance(m.get("reasoning_content"), str):
            m["thinking"] = m["reasoning_content"]
            if m.get("tool_calls"):
                m.pop("content", None)
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        out.append(m)
    return out


def render(src, request):
    ctx = {"messages": adjusted(request["messages"]), "tools": TOOLS, "add_generation_prompt": True,
           "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "documents": None,
           "enable_thinking": True}
    ctx.update(request["chat_template_kwargs"])
    ok, prompt = oracle.render_py(oracle.environment(), src, ctx)
    assert ok, prompt
    return prompt


def main():
    src = open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8").read()
    cut = dict(REQUEST, messages=REQUEST["messages"][:4])
    cases = [{"request": r, "prompt": render(src, r)} for r in (REQUEST, cut)]
    with open(os.path.join(HERE, "turns.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
