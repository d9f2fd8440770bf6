"""Pool tools: what an agent can call through ``bind_tools`` / ``ToolNode``.

``pool_tools(client, aclient=None)`` returns six LangChain tools bound to a
polykv server: ``create_pool``, ``fork_pool``, ``pool_status``,
``session_tps``, ``capacity`` and ``release_pool``.  Each returns the
server's JSON answer; a polykv error comes back as ``{"error": message,
"status": code}`` (plus ``first_differing_position`` for a 409, and
``retry_after`` for a 429) so the agent can read it instead of the run
failing.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from .client import AsyncPolyKVClient, PolyKVClient
from .errors import PolyKVError, PoolConflictError, PoolSaturatedError


def error_dict(e: PolyKVError) -> dict[str, Any]:
    d: dict[str, Any] = {"error": e.message, "status": e.status}
    if isinstance(e, PoolConflictError) and e.first_differing_position is not None:
        d["first_differing_position"] = e.first_differing_position
    if isinstance(e, PoolSaturatedError):
        d["retry_after"] = e.retry_after
    return d


class CreatePoolArgs(BaseModel):
    prompt: str | None = Field(None, description="the shared prefix as text")
    messages: list[dict[str, Any]] | None = Field(
        None, description="the shared prefix as chat messages (e.g. the system block)")
    from_session: str | None = Field(None, description="snapshot this session's context as the pool")


class ForkPoolArgs(BaseModel):
    pool_id: int = Field(description="the parent pool")
    prompt: str | None = Field(None, description="the child's WHOLE prefix as text")
    messages: list[dict[str, Any]] | None = Field(None, description="the child's whole prefix as messages")
    branch_pos: int | None = Field(None, description="share only the parent's first N tokens")


class PoolIdArgs(BaseModel):
    pool_id: int = Field(description="the pool")


class ReleaseArgs(BaseModel):
    pool_id: int = Field(description="the pool to release")
    recursive: bool = Field(False, description="release its whole subtree too")


class SessionArgs(BaseModel):
    session_id: str = Field(description="the session (agent) id")


class CapacityArgs(BaseModel):
    pool_id: int | None = Field(None, description="the pool; none for the server-wide scope")
    expected_tokens: int | None = Field(None, description="tokens the new session expects to use")


def _session_tps(tps: dict[str, Any], tree: dict[str, Any], session_id: str) -> dict[str, Any]:
    for s in tps.get("sessions", []):
        if s.get("session_id") == session_id:
            return {"found": True, **s}
    for p in tree.get("pools", []):
        for s in p.get("sessions", []):
            if s.get("session_id") == session_id:
                return {"found": True, "pool_id": p["pool_id"], **s}
    return {"found": False, "session_id": session_id}


def pool_tools(client: PolyKVClient, aclient: AsyncPolyKVClient | None = None) -> list[BaseTool]:
    """The six pool tools, sync on ``client`` and async on ``aclient`` when given."""

    def guard(f):
        def run(**kw):
            try:
                return f(**kw)
            except PolyKVError as e:
                return error_dict(e)
        return run

    def aguard(f):
        async def run(**kw):
            try:
                return await f(**kw)
            except PolyKVError as e:
                return error_dict(e)
        return run if aclient is not None else None

    def drop_none(kw):
        return {k: v for k, v in kw.items() if v is not None}

    async def a_session_tps(session_id):
        return _session_tps(await aclient.tps(), await aclient.pools(), session_id)

    specs = [
        ("create_pool", "Create a root pool: a shared prefix held once in the KV cache. Give exactly one of "
         "prompt, messages or from_session. Returns pool_id and prefix_len.", CreatePoolArgs,
         lambda **kw: client.create_pool(**drop_none(kw)),
         lambda **kw: aclient.create_pool(**drop_none(kw))),
        ("fork_pool", "Fork a child pool from pool_id with the child's whole prefix (e.g. the parent's system "
         "block plus a task). A 409 answer gives first_differing_position.", ForkPoolArgs,
         lambda pool_id, **kw: client.fork_pool(pool_id, **drop_none(kw)),
         lambda pool_id, **kw: aclient.fork_pool(pool_id, **drop_none(kw))),
        ("pool_status", "The pool's subtree: prefix lengths, residency, pins, KV bytes, sessions and their speed.",
         PoolIdArgs, lambda pool_id: client.pool_status(pool_id), lambda pool_id: aclient.pool_status(pool_id)),
        ("session_tps", "A session's decode speed (tps_ewma), tokens decoded and context headroom.", SessionArgs,
         lambda session_id: _session_tps(client.tps(), client.pools(), session_id), a_session_tps),
        ("capacity", "Can one more agent be spawned? can_admit, reason, headroom_sessions, mean_active_tps, "
         "ctx_headroom_tokens, settling.", CapacityArgs,
         lambda **kw: client.capacity(**kw), lambda **kw: aclient.capacity(**kw)),
        ("release_pool", "Release a pool (recursive: with its subtree). Attached sessions keep their cells.",
         ReleaseArgs, lambda pool_id, recursive=False: client.release_pool(pool_id, recursive=recursive),
         lambda pool_id, recursive=False: aclient.release_pool(pool_id, recursive=recursive)),
    ]
    return [StructuredTool.from_function(func=guard(f), coroutine=aguard(af), name=name, description=desc,
                                         args_schema=schema)
            for name, desc, schema, f, af in specs]
