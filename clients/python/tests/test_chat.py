"""ChatPolyKV against a scripted /v1/chat/completions: the body it sends,
what it makes of whole and streamed answers, tool calls, 429 handling."""

import asyncio
import json

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel

from fake import Fake, err, sse
from polykv_langgraph import ChatPolyKV, PoolSaturatedError

USAGE = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57,
         "prompt_tokens_details": {"cached_tokens": 40}}
TIMINGS = {"cache_n": 40, "prompt_n": 10, "predicted_n": 7, "predicted_per_second": 31.5}
HEADERS = {"x-pool-id": "3", "x-cached-prefix-tokens": "40", "X-Sessions-Remaining": "2"}


def completion(content="Hello there", tool_calls=None, finish="stop", usage=USAGE):
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "message": msg, "finish_reason": finish}], "usage": usage, "timings": TIMINGS}


def call(name, args, cid="call_1", raw=None):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": raw or json.dumps(args)}}


def chunk(delta=None, finish=None, **extra):
    ch = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if delta is not None or finish else []
    return {"id": "chatcmpl-2", "object": "chat.completion.chunk", "choices": ch, **extra}


STREAM = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
             chunk({}, "stop", timings=TIMINGS), chunk(usage=USAGE))
TOOL_STREAM = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Let me check."}),
                  chunk({"tool_calls": [{**call("capacity", {"pool_id": 3}), "index": 0}]}),
                  chunk({}, "tool_calls", timings=TIMINGS), chunk(usage=USAGE))
MSGS = [SystemMessage("You are a researcher."), HumanMessage("go")]


def model(fake, **kw):
    return ChatPolyKV(base_url="http://polykv", transport=fake.transport(), async_transport=fake.transport(), **kw)


def check_meta(m, session):
    assert m.usage_metadata == {"input_tokens": 50, "output_tokens": 7, "total_tokens": 57,
                                "input_token_details": {"cache_read": 40}}
    md = m.response_metadata
    assert md["pool_id"] == 3 and md["cached_prefix_tokens"] == 40 and md["sessions_remaining"] == 2
    assert md["session_id"] == session and md["session_tps"] == 31.5
    assert md["truncated"] is False


def test_invoke_body_and_metadata():
    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(), HEADERS)})
    m = model(fake, pool_id=3, session_id="agent-1", temperature=0.0, max_tokens=16, overcommit=True)
    out = m.invoke(MSGS, stop=["\n\n"])
    assert out.content == "Hello there" and out.tool_calls == []
    check_meta(out, "agent-1")
    assert out.response_metadata["finish_reason"] == "stop"
    body = fake.calls[0][3]
    assert body == {"model": "polykv", "messages": [{"role": "system", "content": "You are a researcher."},
                                                    {"role": "user", "content": "go"}],
                    "session_id": "agent-1", "temperature": 0.0, "max_tokens": 16, "pool_id": 3,
                    "overcommit": True, "stop": ["\n\n"]}
    assert fake.headers[0]["x-session-id"] == "agent-1"


def test_session_per_instance_and_per_call_override():
    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(), HEADERS)})
    a, b = model(fake), model(fake)
    assert a.session_id != b.session_id and a.session_id.startswith("lg-")
    a.invoke("hi")
    a.invoke("hi", pool_id=9, session_id="other")
    assert fake.calls[0][3]["session_id"] == a.session_id and "pool_id" not in fake.calls[0][3]
    assert fake.calls[1][3]["pool_id"] == 9 and fake.calls[1][3]["session_id"] == "other"


def test_history_with_tool_calls_is_sent_in_openai_shape():
    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(), HEADERS)})
    hist = [*MSGS, AIMessage("", tool_calls=[{"name": "capacity", "args": {"pool_id": 3}, "id": "c9"}]),
            ToolMessage('{"can_admit": true}', tool_call_id="c9")]
    model(fake).invoke(hist)
    sent = fake.calls[0][3]["messages"]
    assert sent[2] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "capacity", "arguments": '{"pool_id": 3}'}}]}
    assert sent[3] == {"role": "tool", "content": '{"can_admit": true}', "tool_call_id": "c9"}


def test_truncated_when_the_context_stops_it():
    fake = Fake({("POST", "/v1/chat/completions"): [
        (200, completion(finish="length"), HEADERS),                   # no max_tokens: the context
        (200, completion(finish="length"), HEADERS)]})                 # 7 == max_tokens: the limit
    assert model(fake).invoke("x").response_metadata["truncated"] is True
    assert model(fake, max_tokens=7).invoke("x").response_metadata["truncated"] is False


def test_ainvoke():
    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(), HEADERS)})
    m = model(fake, session_id="s2")
    out = asyncio.run(m.ainvoke(MSGS))
    assert out.content == "Hello there"
    check_meta(out, "s2")


def test_stream_chunks_and_last_chunk_metadata():
    fake = Fake({("POST", "/v1/chat/completions"): (200, STREAM, HEADERS)})
    m = model(fake, session_id="s3")
    chunks = list(m.stream(MSGS))
    assert [c.content for c in chunks] == ["Hel", "lo", ""]
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.content == "Hello"
    check_meta(total, "s3")
    body = fake.calls[0][3]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_astream_and_streaming_generate():
    fake = Fake({("POST", "/v1/chat/completions"): (200, STREAM, HEADERS)})
    m = model(fake, session_id="s4")

    async def go():
        return [c async for c in m.astream(MSGS)]

    chunks = asyncio.run(go())
    assert "".join(c.content for c in chunks) == "Hello"
    out = model(fake, streaming=True, session_id="s4").invoke(MSGS)
    assert out.content == "Hello"
    check_meta(out, "s4")
    assert fake.calls[-1][3]["stream"] is True


def test_bind_tools_sends_tools_and_parses_calls():
    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(None, [
        call("capacity", {"pool_id": 3}), call("fork_pool", {}, "call_2", raw="{not json")], "tool_calls"),
        HEADERS)})

    def capacity(pool_id: int) -> str:
        """Capacity of a pool."""
        return "ok"

    out = model(fake).bind_tools([capacity], tool_choice="capacity").invoke(MSGS)
    body = fake.calls[0][3]
    assert body["tools"][0]["function"]["name"] == "capacity"
    assert body["tools"][0]["function"]["parameters"]["properties"]["pool_id"]["type"] == "integer"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "capacity"}}
    assert out.content == ""
    assert out.tool_calls == [{"name": "capacity", "args": {"pool_id": 3}, "id": "call_1", "type": "tool_call"}]
    assert len(out.invalid_tool_calls) == 1 and out.invalid_tool_calls[0]["name"] == "fork_pool"
    assert out.response_metadata["finish_reason"] == "tool_calls"
    model(fake).bind_tools([capacity], tool_choice="any").invoke(MSGS)
    assert fake.calls[1][3]["tool_choice"] == "required"


def test_streamed_tool_calls_become_tool_calls():
    fake = Fake({("POST", "/v1/chat/completions"): (200, TOOL_STREAM, HEADERS)})
    chunks = list(model(fake).stream(MSGS))
    tc = [c for c in chunks if c.tool_call_chunks]
    assert tc[0].tool_call_chunks[0]["name"] == "capacity" and tc[0].tool_call_chunks[0]["index"] == 0
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.content == "Let me check."
    assert total.tool_calls == [{"name": "capacity", "args": {"pool_id": 3}, "id": "call_1", "type": "tool_call"}]


def test_structured_output_through_a_tool_call():
    class Finding(BaseModel):
        topic: str
        score: int

    fake = Fake({("POST", "/v1/chat/completions"): (200, completion(None, [
        call("Finding", {"topic": "kv", "score": 4})], "tool_calls"), HEADERS)})
    out = model(fake).with_structured_output(Finding).invoke(MSGS)
    assert out == Finding(topic="kv", score=4)
    assert fake.calls[0][3]["tool_choice"] == "required"


SAT = {**err(429, "admission: projected mean tps below floor"),
       "capacity": {"can_admit": False, "reason": "projected mean tps below floor"}}


def test_429_raises_saturated():
    fake = Fake({("POST", "/v1/chat/completions"): (429, SAT, {"Retry-After": "2"})})
    with pytest.raises(PoolSaturatedError) as e:
        model(fake).invoke(MSGS)
    assert e.value.retry_after == 2.0 and e.value.capacity["reason"] == "projected mean tps below floor"
    with pytest.raises(PoolSaturatedError):
        list(model(fake).stream(MSGS))
    assert len(fake.calls) == 2  # no retry unless told to wait


def test_wait_on_saturation_retries(monkeypatch):
    slept = []
    monkeypatch.setattr("polykv_langgraph.chat.time.sleep", slept.append)
    fake = Fake({("POST", "/v1/chat/completions"): [(429, SAT, {"Retry-After": "2"}),
                                                     (429, SAT, {"Retry-After": "1"}),
                                                     (200, completion(), HEADERS)]})
    out = model(fake, wait_on_saturation=True).invoke(MSGS)
    assert out.content == "Hello there" and slept == [2.0, 1.0] and len(fake.calls) == 3
    # a deadline shorter than Retry-After gives up at once
    fake2 = Fake({("POST", "/v1/chat/completions"): (429, SAT, {"Retry-After": "30"})})
    with pytest.raises(PoolSaturatedError):
        model(fake2, wait_on_saturation=True, max_wait_s=5).invoke(MSGS)
    assert len(fake2.calls) == 1


def test_async_wait_on_saturation_retries(monkeypatch):
    slept = []

    async def fake_sleep(s):
        slept.append(s)

    monkeypatch.setattr("polykv_langgraph.chat.asyncio.sleep", fake_sleep)
    fake = Fake({("POST", "/v1/chat/completions"): [(429, SAT, {"Retry-After": "4"}), (200, STREAM, HEADERS)]})

    async def go():
        return [c async for c in model(fake, wait_on_saturation=True).astream(MSGS)]

    assert "".join(c.content for c in asyncio.run(go())) == "Hello" and slept == [4.0]


def test_callbacks_see_each_token():
    from langchain_core.callbacks import BaseCallbackHandler

    class Rec(BaseCallbackHandler):
        def __init__(self):
            self.tokens = []

        def on_llm_new_token(self, token, **kw):
            self.tokens.append(token)

    rec = Rec()
    fake = Fake({("POST", "/v1/chat/completions"): (200, STREAM, HEADERS)})
    list(model(fake).stream(MSGS, config={"callbacks": [rec]}))
    assert rec.tokens == ["Hel", "lo", ""]          # the last chunk carries the metadata
    rec.tokens.clear()
    model(fake, streaming=True).invoke(MSGS, config={"callbacks": [rec]})
    assert rec.tokens == ["Hel", "lo", ""]          # once each: no double report


def test_server_error_is_raised():
    fake = Fake({("POST", "/v1/chat/completions"): (400, err(400, "'messages' must be an array"))})
    with pytest.raises(Exception) as e:
        model(fake).invoke(MSGS)
    assert "messages" in str(e.value)
    assert isinstance(httpx.Headers(HEADERS), httpx.Headers)
