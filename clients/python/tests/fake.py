"""A scripted stand-in for polykv behind httpx.MockTransport.

``Fake`` answers each (method, path) from ``routes``: a dict, a
(status, body[, headers]) tuple, a callable(request) -> httpx.Response, or
a list of those consumed in order.  Every request is recorded in
``calls`` as (method, path, query, json body).
"""

from __future__ import annotations

import json
from typing import Any

import httpx


def sse(*objs: Any) -> bytes:
    out = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)
    return out + b"data: [DONE]\n\n"


class Fake:
    def __init__(self, routes: dict[tuple[str, str], Any] | None = None) -> None:
        self.routes = dict(routes or {})
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path, dict(request.url.params), body))
        self.headers.append(request.headers)
        key = (request.method, request.url.path)
        if key not in self.routes:
            return httpx.Response(404, json={"error": {"code": 404, "message": f"no route {key}",
                                                       "type": "not_found_error"}})
        r = self.routes[key]
        if isinstance(r, list):
            r = r.pop(0) if len(r) > 1 else r[0]
        if callable(r):
            return r(request)
        if isinstance(r, tuple):
            status, payload, *rest = r
            headers = rest[0] if rest else {}
            if isinstance(payload, bytes):
                return httpx.Response(status, content=payload, headers={"content-type": "text/event-stream",
                                                                        **headers})
            return httpx.Response(status, json=payload, headers=headers)
        return httpx.Response(200, json=r)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def paths(self) -> list[str]:
        return [f"{m} {p}" for m, p, _, _ in self.calls]


def err(status: int, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": "x", **extra}}
