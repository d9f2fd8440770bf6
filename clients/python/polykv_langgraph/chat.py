"""ChatPolyKV: a LangChain chat model over polykv's /v1/chat/completions.

What it adds to an OpenAI-compatible chat model: it attaches to a pool
(``pool_id``), names its session (``session_id``, one per instance unless
given, sent as the body field and the ``x-session-id`` header), can skip the
admission gate (``overcommit``), and reports what the server measured:

- ``usage_metadata``: prompt/completion tokens, with the prompt tokens read
  from the cache as ``input_token_details.cache_read``;
- ``response_metadata``: ``pool_id`` and ``cached_prefix_tokens`` (the
  ``x-pool-id`` / ``x-cached-prefix-tokens`` headers), ``session_id``,
  ``session_tps`` (the decode speed of this answer, timings.predicted_per_second),
  ``finish_reason``, ``truncated`` (stopped by the context, not by
  ``max_tokens``), ``sessions_remaining`` (``X-Sessions-Remaining``, present
  under an enforced ``warn`` policy), ``timings``.

Admission: a request the server holds (queue, settling) is simply awaited;
a 429 raises ``PoolSaturatedError`` unless ``wait_on_saturation`` is set,
then it sleeps ``Retry-After`` and retries for up to ``max_wait_s``.

Per-call overrides: ``model.invoke(msgs, pool_id=7, session_id="a")``.
Callbacks: LangChain's BaseChatModel reports each streamed chunk
(``on_llm_new_token``) itself, so ``_stream`` does not.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator, Callable, Iterator, Literal, Sequence

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (AIMessage, AIMessageChunk, BaseMessage, ChatMessage,
                                     HumanMessage, SystemMessage, ToolMessage)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from .client import DEFAULT_URL, AsyncPolyKVClient, PolyKVClient, _sse_data
from .errors import PoolSaturatedError

CHAT_PATH = "/v1/chat/completions"

# One connection pool per (url, key, timeout), shared by every instance (a
# sub-agent per instance is the usual shape, and each would otherwise make
# its own httpx client and connections).  Instances given a transport
# (tests) get their own.
_SHARED: dict[tuple, Any] = {}


def _shared(kind: type, base_url: str, key: str | None, timeout: float):
    k = (kind, base_url, key, timeout)
    if k not in _SHARED:
        _SHARED[k] = kind(base_url, api_key=key, timeout=httpx.Timeout(timeout, connect=10))
    return _SHARED[k]


def new_session_id() -> str:
    return "lg-" + uuid.uuid4().hex[:16]


def _text(content: Any) -> str:
    """Message content as text: strings as they are, text blocks joined."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
    return "".join(parts)


def message_to_dict(m: BaseMessage) -> dict[str, Any]:
    """One LangChain message as an OpenAI chat message."""
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": _text(m.content)}
    if isinstance(m, HumanMessage):
        return {"role": "user", "content": _text(m.content)}
    if isinstance(m, AIMessage):
        d: dict[str, Any] = {"role": "assistant", "content": _text(m.content)}
        if m.tool_calls:
            d["tool_calls"] = [{"id": tc.get("id") or f"call_{i}", "type": "function",
                                "function": {"name": tc["name"], "arguments": json.dumps(tc["args"])}}
                               for i, tc in enumerate(m.tool_calls)]
        return d
    if isinstance(m, ToolMessage):
        return {"role": "tool", "content": _text(m.content), "tool_call_id": m.tool_call_id}
    if isinstance(m, ChatMessage):
        return {"role": m.role, "content": _text(m.content)}
    raise TypeError(f"ChatPolyKV cannot send a {type(m).__name__}")


def _int_header(headers: httpx.Headers, name: str) -> int | None:
    v = headers.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def usage_from(usage: dict[str, Any] | None) -> UsageMetadata | None:
    if not usage:
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return UsageMetadata(input_tokens=usage.get("prompt_tokens", 0),
                         output_tokens=usage.get("completion_tokens", 0),
                         total_tokens=usage.get("total_tokens", 0),
                         input_token_details={"cache_read": cached})


def _tool_calls(raw: list[dict[str, Any]]) -> tuple[list, list]:
    good, bad = [], []
    for rc in raw or []:
        try:
            good.append(parse_tool_call(rc, return_id=True))
        except Exception as e:  # the arguments are not JSON: keep it, marked invalid
            bad.append(make_invalid_tool_call(rc, str(e)))
    return good, bad


class ChatPolyKV(BaseChatModel):
    """polykv chat model (see the module doc).  ``transport`` /
    ``async_transport`` replace the network (httpx.MockTransport in tests)."""

    base_url: str = DEFAULT_URL
    api_key: SecretStr | None = None
    model_name: str = Field(default="polykv", alias="model")
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    pool_id: int | None = None
    session_id: str = Field(default_factory=new_session_id)
    overcommit: bool = False
    shared_prefix_n_tokens: int | None = None
    wait_on_saturation: bool = False
    max_wait_s: float = 120.0
    streaming: bool = False
    stream_usage: bool = True
    timeout: float = 600.0
    extra_body: dict[str, Any] | None = None
    transport: Any = Field(default=None, exclude=True)
    async_transport: Any = Field(default=None, exclude=True)

    model_config = ConfigDict(populate_by_name=True, arbitrary_types_allowed=True)

    _client: PolyKVClient | None = PrivateAttr(default=None)
    _aclient: AsyncPolyKVClient | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "polykv"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "base_url": self.base_url, "pool_id": self.pool_id,
                "temperature": self.temperature, "max_tokens": self.max_tokens}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any):
        p = super()._get_ls_params(stop=stop, **kwargs)
        p["ls_provider"] = "polykv"
        return p

    @property
    def client(self) -> PolyKVClient:
        if self._client is None:
            key = self.api_key.get_secret_value() if self.api_key else None
            if self.transport is None:
                self._client = _shared(PolyKVClient, self.base_url, key, self.timeout)
            else:
                self._client = PolyKVClient(self.base_url, api_key=key, transport=self.transport,
                                            timeout=httpx.Timeout(self.timeout, connect=10))
        return self._client

    @property
    def async_client(self) -> AsyncPolyKVClient:
        if self._aclient is None:
            key = self.api_key.get_secret_value() if self.api_key else None
            # an async client belongs to one event loop: never shared
            self._aclient = AsyncPolyKVClient(self.base_url, api_key=key,
                                              timeout=httpx.Timeout(self.timeout, connect=10),
                                              transport=self.async_transport)
        return self._aclient

    # ---- the request ----

    def _body(self, messages: list[BaseMessage], stop: list[str] | None, stream: bool,
              kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], str]:
        kw = dict(kwargs)
        kw.pop("ls_structured_output_format", None)
        session = kw.pop("session_id", None) or self.session_id
        body: dict[str, Any] = {"model": self.model_name, "messages": [message_to_dict(m) for m in messages],
                                "session_id": session}
        for k in ("temperature", "max_tokens", "top_p", "seed", "shared_prefix_n_tokens"):
            v = kw.pop(k, getattr(self, k))
            if v is not None:
                body[k] = v
        pool = kw.pop("pool_id", self.pool_id)
        if pool is not None:
            body["pool_id"] = int(pool)
        if kw.pop("overcommit", self.overcommit):
            body["overcommit"] = True
        stops = stop if stop is not None else self.stop
        if stops:
            body["stop"] = stops
        if stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body or {})
        body.update(kw)  # tools, tool_choice, and any other field the caller binds
        return body, {"x-session-id": session}, session

    def _metadata(self, headers: httpx.Headers, session: str, finish: str | None, timings: dict | None,
                  usage: dict | None, max_tokens: int | None) -> dict[str, Any]:
        timings = timings or {}
        n_gen = (usage or {}).get("completion_tokens", timings.get("predicted_n"))
        truncated = finish == "length" and (max_tokens is None or (n_gen is not None and n_gen < max_tokens))
        return {"model_name": self.model_name, "model_provider": "polykv", "finish_reason": finish,
                "pool_id": _int_header(headers, "x-pool-id"), "session_id": session,
                "cached_prefix_tokens": _int_header(headers, "x-cached-prefix-tokens"),
                "session_tps": timings.get("predicted_per_second"), "truncated": truncated,
                "sessions_remaining": _int_header(headers, "x-sessions-remaining"), "timings": timings}

    def _result(self, resp: httpx.Response, session: str, max_tokens: int | None) -> ChatResult:
        data = resp.json()
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        raw = msg.get("tool_calls") or []
        good, bad = _tool_calls(raw)
        meta = self._metadata(resp.headers, session, choice.get("finish_reason"), data.get("timings"),
                              data.get("usage"), max_tokens)
        ai = AIMessage(content=msg.get("content") or "", tool_calls=good, invalid_tool_calls=bad,
                       additional_kwargs={"tool_calls": raw} if raw else {},
                       usage_metadata=usage_from(data.get("usage")), response_metadata=meta,
                       id=data.get("id"))
        return ChatResult(generations=[ChatGeneration(message=ai, generation_info={
            "finish_reason": choice.get("finish_reason")})], llm_output={"model_name": self.model_name})

    def _deadline_wait(self, err: PoolSaturatedError, start: float) -> float:
        """Seconds to sleep before retrying a 429, or raise it."""
        delay = err.retry_after if err.retry_after is not None else 1.0
        if not self.wait_on_saturation or time.monotonic() - start + delay > self.max_wait_s:
            raise err
        return delay

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        if self.streaming:
            from langchain_core.language_models.chat_models import generate_from_stream
            return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))
        body, headers, session = self._body(messages, stop, False, kwargs)
        start = time.monotonic()
        while True:
            try:
                resp = self.client.request("POST", CHAT_PATH, json_body=body, headers=headers)
                return self._result(resp, session, body.get("max_tokens"))
            except PoolSaturatedError as e:
                time.sleep(self._deadline_wait(e, start))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        if self.streaming:
            from langchain_core.language_models.chat_models import agenerate_from_stream
            return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))
        body, headers, session = self._body(messages, stop, False, kwargs)
        start = time.monotonic()
        while True:
            try:
                resp = await self.async_client.request("POST", CHAT_PATH, json_body=body, headers=headers)
                return self._result(resp, session, body.get("max_tokens"))
            except PoolSaturatedError as e:
                await asyncio.sleep(self._deadline_wait(e, start))

    # ---- streaming ----

    class _Acc:
        """What a stream leaves for its last chunk."""

        def __init__(self) -> None:
            self.finish = None
            self.timings = None
            self.usage = None

    def _chunk(self, obj: dict[str, Any], acc: "_Acc") -> ChatGenerationChunk | None:
        if obj.get("usage"):
            acc.usage = obj["usage"]
        if obj.get("timings"):
            acc.timings = obj["timings"]
        choices = obj.get("choices") or []
        if not choices:
            return None
        ch = choices[0]
        if ch.get("finish_reason"):
            acc.finish = ch["finish_reason"]
        delta = ch.get("delta") or {}
        content = delta.get("content") or ""
        tcc = [tool_call_chunk(name=(t.get("function") or {}).get("name"),
                               args=(t.get("function") or {}).get("arguments"), id=t.get("id"),
                               index=t.get("index", i))
               for i, t in enumerate(delta.get("tool_calls") or [])]
        if not content and not tcc:
            return None
        return ChatGenerationChunk(message=AIMessageChunk(content=content, tool_call_chunks=tcc, id=obj.get("id")))

    def _last(self, headers: httpx.Headers, session: str, acc: "_Acc", max_tokens: int | None) -> ChatGenerationChunk:
        meta = self._metadata(headers, session, acc.finish, acc.timings, acc.usage, max_tokens)
        return ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage_from(acc.usage),
                                                          response_metadata=meta, chunk_position="last"),
                                   generation_info={"finish_reason": acc.finish})

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        body, headers, session = self._body(messages, stop, True, kwargs)
        start = time.monotonic()
        while True:
            try:
                cm = self.client.stream("POST", CHAT_PATH, json_body=body, headers=headers)
                resp = cm.__enter__()
                break
            except PoolSaturatedError as e:
                time.sleep(self._deadline_wait(e, start))
        acc = self._Acc()
        try:
            for line in resp.iter_lines():
                obj = _sse_data(line)
                if obj is None:
                    continue
                chunk = self._chunk(obj, acc)
                if chunk is not None:
                    yield chunk
        finally:
            cm.__exit__(None, None, None)
        yield self._last(resp.headers, session, acc, body.get("max_tokens"))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        body, headers, session = self._body(messages, stop, True, kwargs)
        start = time.monotonic()
        while True:
            try:
                cm = self.async_client.stream("POST", CHAT_PATH, json_body=body, headers=headers)
                resp = await cm.__aenter__()
                break
            except PoolSaturatedError as e:
                await asyncio.sleep(self._deadline_wait(e, start))
        acc = self._Acc()
        try:
            async for line in resp.aiter_lines():
                obj = _sse_data(line)
                if obj is None:
                    continue
                chunk = self._chunk(obj, acc)
                if chunk is not None:
                    yield chunk
        finally:
            await cm.__aexit__(None, None, None)
        yield self._last(resp.headers, session, acc, body.get("max_tokens"))

    # ---- tools ----

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], *,
                   tool_choice: dict | str | Literal["auto", "none", "required", "any"] | bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools in the OpenAI format; ``tool_choice`` as ChatOpenAI takes
        it ("any" and True mean "required"; a tool's name selects it)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None and tool_choice is not False:
            if tool_choice is True or tool_choice == "any":
                tool_choice = "required"
            elif isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
                tool_choice = {"type": "function", "function": {"name": tool_choice}}
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=formatted, **kwargs)
