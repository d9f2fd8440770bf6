"""Typed errors for the polykv HTTP API.

polykv answers every failure with an OpenAI-shaped body
``{"error": {"code", "message", "type", ...}}``; the status code says what
kind of failure it is (docs/pools.md, docs/admission.md).  ``raise_for``
maps a response to one of the classes below.
"""

from __future__ import annotations

from typing import Any

import httpx


class PolyKVError(Exception):
    """Any error answer from polykv: ``status`` (HTTP), ``message``, ``body``."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"polykv {status}: {message}")
        self.status = status
        self.message = message
        self.body = body


class PoolNotFoundError(PolyKVError):
    """404: an unknown or released pool (or session)."""


class PoolConflictError(PolyKVError):
    """409: a fork that contradicts its parent (``first_differing_position``
    is the first token where it does), a release with children, an evict
    while a session decodes."""

    def __init__(self, status: int, message: str, body: Any = None,
                 first_differing_position: int | None = None) -> None:
        super().__init__(status, message, body)
        self.first_differing_position = first_differing_position


class PoolSaturatedError(PolyKVError):
    """429: admission refused the session (or no pool sequence id / KV cells
    are left).  ``retry_after`` is the server's Retry-After in seconds (None
    when it sent none) and ``capacity`` the capacity answer it decided on
    (None for a refusal that is not an admission decision)."""

    def __init__(self, status: int, message: str, body: Any = None,
                 retry_after: float | None = None,
                 capacity: dict[str, Any] | None = None) -> None:
        super().__init__(status, message, body)
        self.retry_after = retry_after
        self.capacity = capacity


def raise_for(resp: httpx.Response) -> None:
    """Raise the typed error for an error response; return for a 2xx."""
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        message = str(err.get("message", ""))
    else:
        message = resp.text or resp.reason_phrase
    st = resp.status_code
    if st == 404:
        raise PoolNotFoundError(st, message, body)
    if st == 409:
        pos = err.get("first_differing_position") if isinstance(err, dict) else None
        raise PoolConflictError(st, message, body, pos)
    if st == 429:
        ra = resp.headers.get("retry-after")
        try:
            retry_after = float(ra) if ra is not None else None
        except ValueError:
            retry_after = None
        cap = body.get("capacity") if isinstance(body, dict) else None
        raise PoolSaturatedError(st, message, body, retry_after, cap)
    raise PolyKVError(st, message, body)
