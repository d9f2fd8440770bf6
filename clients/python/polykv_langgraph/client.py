"""PolyKVClient / AsyncPolyKVClient: every /polykv route on httpx.

Each route is described once, as a request spec (method, path, query,
body), by ``_Routes``; the sync and the async client only differ in how
they send it.  Errors come back as the typed exceptions of ``errors.py``.

    c = PolyKVClient("http://127.0.0.1:8080")
    root = c.create_pool(messages=[{"role": "system", "content": "..."}])
    kid = c.fork_pool(root["pool_id"], prompt="...")
    c.capacity(kid["pool_id"], expected_tokens=256)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator

import httpx

from .errors import raise_for

DEFAULT_URL = "http://127.0.0.1:8080"
# A held request (queue, settling) only answers once placed: reads wait long.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@dataclass
class _Req:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None


def _prefix_body(tokens, prompt, messages, tools, from_session) -> dict[str, Any]:
    given = {k: v for k, v in (("tokens", tokens), ("prompt", prompt),
                               ("messages", messages), ("from_session", from_session))
             if v is not None}
    if len(given) != 1:
        raise ValueError("give exactly one of tokens, prompt, messages or from_session")
    if tools is not None:
        if messages is None:
            raise ValueError("tools go with messages")
        given["tools"] = tools
    return given


class _Routes:
    """The request spec of every route (shared by both clients)."""

    @staticmethod
    def create_pool(tokens=None, prompt=None, messages=None, tools=None, from_session=None) -> _Req:
        return _Req("POST", "/polykv/pools", body=_prefix_body(tokens, prompt, messages, tools, from_session))

    @staticmethod
    def fork_pool(pool_id, tokens=None, prompt=None, messages=None, tools=None, branch_pos=None) -> _Req:
        body = _prefix_body(tokens, prompt, messages, tools, None)
        if branch_pos is not None:
            body["branch_pos"] = branch_pos
        return _Req("POST", f"/polykv/pools/{int(pool_id)}/fork", body=body)

    @staticmethod
    def verb(pool_id, verb) -> _Req:
        return _Req("POST", f"/polykv/pools/{int(pool_id)}/{verb}", body={})

    @staticmethod
    def release_pool(pool_id, recursive=False) -> _Req:
        return _Req("DELETE", f"/polykv/pools/{int(pool_id)}",
                    params={"recursive": "true"} if recursive else {})

    @staticmethod
    def pools(pool_id=None) -> _Req:
        return _Req("GET", "/polykv/pools" if pool_id is None else f"/polykv/pools/{int(pool_id)}")

    @staticmethod
    def admission(pool_id=None, policy=None) -> _Req:
        path = "/polykv/admission" if pool_id is None else f"/polykv/pools/{int(pool_id)}/admission"
        return _Req("GET", path) if policy is None else _Req("POST", path, body=policy)

    @staticmethod
    def capacity(pool_id=None, expected_tokens=None, session_id=None) -> _Req:
        path = "/polykv/capacity" if pool_id is None else f"/polykv/pools/{int(pool_id)}/capacity"
        params = {}
        if expected_tokens is not None:
            params["expected_tokens"] = int(expected_tokens)
        if session_id is not None:
            params["session_id"] = session_id
        return _Req("GET", path, params=params)

    @staticmethod
    def tokenize(content, add_special=False, with_pieces=False) -> _Req:
        return _Req("POST", "/tokenize", body={"content": content, "add_special": add_special,
                                               "with_pieces": with_pieces})

    @staticmethod
    def apply_template(messages, tools=None) -> _Req:
        body: dict[str, Any] = {"messages": messages}
        if tools is not None:
            body["tools"] = tools
        return _Req("POST", "/apply-template", body=body)


def _policy(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _sse_data(line: str) -> Any:
    """The JSON of one SSE ``data:`` line, None for other lines and [DONE]."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return None
    return json.loads(data)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class PolyKVClient:
    """Synchronous client.  ``transport`` (an httpx transport, e.g.
    ``httpx.MockTransport``) replaces the network, for tests."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: Any = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None,
                 http_client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = http_client or httpx.Client(base_url=self.base_url, timeout=timeout,
                                                 transport=transport, headers=_headers(api_key))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PolyKVClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, rq: _Req) -> Any:
        resp = self._http.request(rq.method, rq.path, params=rq.params or None,
                                  json=rq.body if rq.body is not None else None)
        raise_for(resp)
        return resp.json()

    def request(self, method: str, path: str, *, json_body: Any = None,
                headers: dict[str, str] | None = None) -> httpx.Response:
        """A raw request (the chat model's completions); errors raised typed."""
        resp = self._http.request(method, path, json=json_body, headers=headers)
        raise_for(resp)
        return resp

    def stream(self, method: str, path: str, *, json_body: Any = None,
               headers: dict[str, str] | None = None):
        """A streamed request: a context manager over the httpx response,
        whose error status is raised typed before the body is read."""
        return _SyncStream(self._http, method, path, json_body, headers)

    # pools
    def create_pool(self, *, tokens=None, prompt=None, messages=None, tools=None,
                    from_session=None) -> dict[str, Any]:
        """A root pool from exactly one source; returns {pool_id, prefix_len, ...}."""
        return self._send(_Routes.create_pool(tokens, prompt, messages, tools, from_session))

    def fork_pool(self, pool_id: int, *, tokens=None, prompt=None, messages=None, tools=None,
                  branch_pos: int | None = None) -> dict[str, Any]:
        """A child with its whole prefix; PoolConflictError when it contradicts the parent."""
        return self._send(_Routes.fork_pool(pool_id, tokens, prompt, messages, tools, branch_pos))

    def pin(self, pool_id: int) -> dict[str, Any]:
        return self._send(_Routes.verb(pool_id, "pin"))

    def unpin(self, pool_id: int) -> dict[str, Any]:
        return self._send(_Routes.verb(pool_id, "unpin"))

    def evict(self, pool_id: int) -> dict[str, Any]:
        return self._send(_Routes.verb(pool_id, "evict"))

    def flush(self, pool_id: int) -> dict[str, Any]:
        return self._send(_Routes.verb(pool_id, "flush"))

    def release_pool(self, pool_id: int, *, recursive: bool = False) -> dict[str, Any]:
        """DELETE; PoolConflictError while it has children unless recursive."""
        return self._send(_Routes.release_pool(pool_id, recursive))

    def pools(self) -> dict[str, Any]:
        """The whole tree: {pools: [...], seq_ids_used, kv_bytes_used, ...}."""
        return self._send(_Routes.pools())

    def pool_status(self, pool_id: int | None = None) -> dict[str, Any]:
        """One subtree (same shape as pools()); without pool_id the whole tree."""
        return self._send(_Routes.pools(pool_id))

    # admission and speed
    def admission(self, pool_id: int | None = None) -> dict[str, Any]:
        return self._send(_Routes.admission(pool_id))

    def set_admission(self, pool_id: int | None = None, *, target_tps_per_session=None, mode=None,
                      on_saturation=None, guarantee_min_sessions=None, settle_tokens=None,
                      settle_max_ms=None, queue_max_ms=None, floor_margin_scale=None) -> dict[str, Any]:
        """Sets the named fields over the policy in force; returns the policy."""
        return self._send(_Routes.admission(pool_id, _policy(dict(
            target_tps_per_session=target_tps_per_session, mode=mode, on_saturation=on_saturation,
            guarantee_min_sessions=guarantee_min_sessions, settle_tokens=settle_tokens,
            settle_max_ms=settle_max_ms, queue_max_ms=queue_max_ms,
            floor_margin_scale=floor_margin_scale))))

    def capacity(self, pool_id: int | None = None, *, expected_tokens: int | None = None,
                 session_id: str | None = None) -> dict[str, Any]:
        return self._send(_Routes.capacity(pool_id, expected_tokens, session_id))

    def tps(self) -> dict[str, Any]:
        return self._send(_Req("GET", "/polykv/tps"))

    def tps_stream(self, interval_ms: int = 500) -> Iterator[dict[str, Any]]:
        """Snapshots of /polykv/tps?stream=1 as they come (close the
        generator to end the stream)."""
        with self.stream("GET", f"/polykv/tps?stream=1&interval_ms={int(interval_ms)}") as resp:
            for line in resp.iter_lines():
                obj = _sse_data(line)
                if obj is not None:
                    yield obj

    def tokenize(self, content: Any, *, add_special: bool = False) -> list[int]:
        return self._send(_Routes.tokenize(content, add_special))["tokens"]

    def apply_template(self, messages: list[dict[str, Any]], tools=None) -> str:
        return self._send(_Routes.apply_template(messages, tools))["prompt"]


class _SyncStream:
    def __init__(self, http, method, path, body, headers):
        self._cm = http.stream(method, path, json=body, headers=headers)

    def __enter__(self) -> httpx.Response:
        resp = self._cm.__enter__()
        if resp.status_code >= 400:
            resp.read()
            try:
                raise_for(resp)
            finally:
                self._cm.__exit__(None, None, None)
        return resp

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)


class _AsyncStream:
    def __init__(self, http, method, path, body, headers):
        self._cm = http.stream(method, path, json=body, headers=headers)

    async def __aenter__(self) -> httpx.Response:
        resp = await self._cm.__aenter__()
        if resp.status_code >= 400:
            await resp.aread()
            try:
                raise_for(resp)
            finally:
                await self._cm.__aexit__(None, None, None)
        return resp

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(*exc)


class AsyncPolyKVClient:
    """The asynchronous twin of PolyKVClient (same methods, awaited)."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: Any = DEFAULT_TIMEOUT, transport: httpx.AsyncBaseTransport | None = None,
                 http_client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = http_client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout,
                                                      transport=transport, headers=_headers(api_key))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncPolyKVClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _send(self, rq: _Req) -> Any:
        resp = await self._http.request(rq.method, rq.path, params=rq.params or None,
                                        json=rq.body if rq.body is not None else None)
        raise_for(resp)
        return resp.json()

    async def request(self, method: str, path: str, *, json_body: Any = None,
                      headers: dict[str, str] | None = None) -> httpx.Response:
        resp = await self._http.request(method, path, json=json_body, headers=headers)
        raise_for(resp)
        return resp

    def stream(self, method: str, path: str, *, json_body: Any = None,
               headers: dict[str, str] | None = None):
        return _AsyncStream(self._http, method, path, json_body, headers)

    async def create_pool(self, *, tokens=None, prompt=None, messages=None, tools=None,
                          from_session=None) -> dict[str, Any]:
        return await self._send(_Routes.create_pool(tokens, prompt, messages, tools, from_session))

    async def fork_pool(self, pool_id: int, *, tokens=None, prompt=None, messages=None, tools=None,
                        branch_pos: int | None = None) -> dict[str, Any]:
        return await self._send(_Routes.fork_pool(pool_id, tokens, prompt, messages, tools, branch_pos))

    async def pin(self, pool_id: int) -> dict[str, Any]:
        return await self._send(_Routes.verb(pool_id, "pin"))

    async def unpin(self, pool_id: int) -> dict[str, Any]:
        return await self._send(_Routes.verb(pool_id, "unpin"))

    async def evict(self, pool_id: int) -> dict[str, Any]:
        return await self._send(_Routes.verb(pool_id, "evict"))

    async def flush(self, pool_id: int) -> dict[str, Any]:
        return await self._send(_Routes.verb(pool_id, "flush"))

    async def release_pool(self, pool_id: int, *, recursive: bool = False) -> dict[str, Any]:
        return await self._send(_Routes.release_pool(pool_id, recursive))

    async def pools(self) -> dict[str, Any]:
        return await self._send(_Routes.pools())

    async def pool_status(self, pool_id: int | None = None) -> dict[str, Any]:
        return await self._send(_Routes.pools(pool_id))

    async def admission(self, pool_id: int | None = None) -> dict[str, Any]:
        return await self._send(_Routes.admission(pool_id))

    async def set_admission(self, pool_id: int | None = None, *, target_tps_per_session=None, mode=None,
                            on_saturation=None, guarantee_min_sessions=None, settle_tokens=None,
                            settle_max_ms=None, queue_max_ms=None, floor_margin_scale=None) -> dict[str, Any]:
        return await self._send(_Routes.admission(pool_id, _policy(dict(
            target_tps_per_session=target_tps_per_session, mode=mode, on_saturation=on_saturation,
            guarantee_min_sessions=guarantee_min_sessions, settle_tokens=settle_tokens,
            settle_max_ms=settle_max_ms, queue_max_ms=queue_max_ms,
            floor_margin_scale=floor_margin_scale))))

    async def capacity(self, pool_id: int | None = None, *, expected_tokens: int | None = None,
                       session_id: str | None = None) -> dict[str, Any]:
        return await self._send(_Routes.capacity(pool_id, expected_tokens, session_id))

    async def tps(self) -> dict[str, Any]:
        return await self._send(_Req("GET", "/polykv/tps"))

    async def tps_stream(self, interval_ms: int = 500) -> AsyncIterator[dict[str, Any]]:
        async with self.stream("GET", f"/polykv/tps?stream=1&interval_ms={int(interval_ms)}") as resp:
            async for line in resp.aiter_lines():
                obj = _sse_data(line)
                if obj is not None:
                    yield obj

    async def tokenize(self, content: Any, *, add_special: bool = False) -> list[int]:
        return (await self._send(_Routes.tokenize(content, add_special)))["tokens"]

    async def apply_template(self, messages: list[dict[str, Any]], tools=None) -> str:
        return (await self._send(_Routes.apply_template(messages, tools)))["prompt"]
