"""Compaction by re-rooting.

A session whose context fills up is moved to a new, shorter branch of its
stable ancestor instead of being truncated or shifted:

    1. summarize  the model summarizes the old messages (the session's
                  own turn, on its current pool);
    2. fork       the stable ancestor pool (system + tools: ``root_pool_id``)
                  gets a child whose prefix is system + summary + the
                  recent tail, so the session's next turn shares all of it;
    3. migrate    the new pool is checked (it exists, with the forked
                  prefix) and the graph state moves to it: ``pool_id`` and
                  ``messages`` are replaced;
    4. release    the old pool (when it is not the ancestor itself) is
                  unpinned, then released with its subtree, so no pin is
                  left on an orphan.

A 409 on the fork (the new prefix does not start with the ancestor's)
stops before anything changes: the error is raised, the session stays
where it was.  A 409 on the release comes after the migration: the
result is kept (``released`` False, ``release_error`` set) and the old
pool, unpinned, is left to eviction by pressure.

``compact_by_refork`` is the protocol as a function; ``CompactionNode``
is the LangGraph pre-model hook (``create_react_agent(...,
pre_model_hook=node)``, or a node of your own graph) that runs it when
``compaction_pressure`` or the session's own context use crosses
``threshold``; it also moves the ``pool_id`` of the chat models it
follows, since a prebuilt agent passes its model only the messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (AIMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage,
                                     ToolMessage)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from .chat import message_to_dict
from .client import PolyKVClient
from .errors import PolyKVError

SUMMARY_PROMPT = ("Summarize the conversation so far in a few sentences: the task, what was found, and "
                  "what is left to do. Answer with the summary only.")


@dataclass
class CompactionResult:
    pool_id: int                        # the new pool (the session's home from now on)
    old_pool_id: int | None
    messages: list[BaseMessage]         # system + summary + tail: the new history
    summary: str
    prefix_len: int
    released: bool = False
    release_error: str | None = None
    prefilled_tokens: int = 0           # what the fork computed (the rest it shared)
    summary_usage: dict[str, Any] | None = None
    calls: list[str] = field(default_factory=list)   # the protocol's steps, in order

    def state_update(self) -> dict[str, Any]:
        """The graph-state update that migrates the session."""
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *self.messages],
                "pool_id": self.pool_id, "compaction_pressure": 0.0}


def _split(messages: Sequence[BaseMessage], keep_last: int) -> tuple[list, list, list]:
    """(leading system messages, the old middle, the recent tail).  The tail
    never starts with a tool answer cut from its call."""
    i = 0
    while i < len(messages) and isinstance(messages[i], SystemMessage):
        i += 1
    head, rest = list(messages[:i]), list(messages[i:])
    cut = max(0, len(rest) - keep_last)
    while cut > 0 and isinstance(rest[cut], ToolMessage):
        cut -= 1
    return head, rest[:cut], rest[cut:]


def compact_by_refork(client: PolyKVClient, model: BaseChatModel, messages: Sequence[BaseMessage], *,
                      root_pool_id: int, old_pool_id: int | None, session_id: str | None = None,
                      tools: list[dict[str, Any]] | None = None, keep_last: int = 4,
                      summary_prompt: str = SUMMARY_PROMPT, summary_max_tokens: int = 128) -> CompactionResult:
    """Run the four steps above; raises PoolConflictError / PoolNotFoundError
    from the fork (nothing changed then).  ``tools`` (OpenAI format) must be
    the ones the root pool was made with, so the rendered prefix matches."""
    calls: list[str] = []
    head, old, tail = _split(messages, keep_last)
    # 1. summarize, on the session's current pool
    kw: dict[str, Any] = {"max_tokens": summary_max_tokens}
    if old_pool_id is not None:
        kw["pool_id"] = old_pool_id
    if session_id is not None:
        kw["session_id"] = session_id
    answer = model.invoke([*head, *old, HumanMessage(summary_prompt)], **kw)
    summary = answer.content if isinstance(answer.content, str) else str(answer.content)
    calls.append("summarize")
    new_messages = [*head, HumanMessage(f"Summary of the earlier conversation: {summary}"),
                    AIMessage("Understood."), *tail]
    # 2. fork the stable ancestor with the new history
    forked = client.fork_pool(root_pool_id, messages=[message_to_dict(m) for m in new_messages], tools=tools)
    calls.append("fork")
    # 3. migrate: the new pool must be there, with what was forked
    tree = client.pool_status(forked["pool_id"])
    mine = [p for p in tree.get("pools", []) if p["pool_id"] == forked["pool_id"]]
    if not mine or mine[0]["prefix_len"] != forked["prefix_len"] or mine[0]["parent"] != root_pool_id:
        raise PolyKVError(500, f"pool {forked['pool_id']} is not the fork just made: {mine}", tree)
    calls.append("migrate")
    res = CompactionResult(pool_id=forked["pool_id"], old_pool_id=old_pool_id, messages=new_messages,
                           summary=summary, prefix_len=forked["prefix_len"], calls=calls,
                           prefilled_tokens=forked.get("prefilled_tokens", 0),
                           summary_usage=dict(answer.usage_metadata) if getattr(answer, "usage_metadata", None) else None)
    # 4. release the old branch (never the ancestor itself)
    if old_pool_id is not None and old_pool_id != root_pool_id:
        try:
            client.unpin(old_pool_id)
            client.release_pool(old_pool_id, recursive=True)
            res.released = True
        except PolyKVError as e:
            res.release_error = str(e)
        calls.append("release")
    return res


def session_context_use(client: PolyKVClient, pool_id: int | None, session_id: str | None) -> float:
    """ctx_used / ctx_total of the session on its pool (0 when not found)."""
    if pool_id is None or session_id is None:
        return 0.0
    try:
        tree = client.pool_status(pool_id)
    except PolyKVError:
        return 0.0
    for p in tree.get("pools", []):
        for s in p.get("sessions", []):
            if s.get("session_id") == session_id and s.get("ctx_total"):
                return s["ctx_used"] / s["ctx_total"]
    return 0.0


class CompactionNode:
    """Pre-model hook: compacts when ``max(state["compaction_pressure"],
    the session's ctx_used/ctx_total) >= threshold``; otherwise returns {}
    (no change).  Reads ``pool_id``, ``root_pool_id``, ``session_id`` and
    ``messages`` from the state."""

    def __init__(self, model: BaseChatModel, client: PolyKVClient, *, threshold: float = 0.8,
                 keep_last: int = 4, tools: list[dict[str, Any]] | None = None,
                 session_id: str | None = None, follow: Sequence[Any] | None = None) -> None:
        self.model = model
        # The chat models whose pool_id moves with the session (the agent's
        # model in a prebuilt agent, which sees only messages): by default
        # the summarizing model itself when it has a pool_id.
        self.follow = list(follow) if follow is not None else ([model] if hasattr(model, "pool_id") else [])
        self.client = client
        self.threshold = threshold
        self.keep_last = keep_last
        self.tools = tools
        self.session_id = session_id
        self.last: CompactionResult | None = None

    def pressure(self, state: dict) -> float:
        session = state.get("session_id") or self.session_id or getattr(self.model, "session_id", None)
        own = session_context_use(self.client, state.get("pool_id"), session)
        return max(float(state.get("compaction_pressure") or 0.0), own)

    def __call__(self, state: dict) -> dict[str, Any]:
        if state.get("root_pool_id") is None or self.pressure(state) < self.threshold:
            return {}
        session = state.get("session_id") or self.session_id or getattr(self.model, "session_id", None)
        self.last = compact_by_refork(self.client, self.model, state["messages"],
                                      root_pool_id=state["root_pool_id"], old_pool_id=state.get("pool_id"),
                                      session_id=session, tools=self.tools, keep_last=self.keep_last)
        for m in self.follow:
            m.pool_id = self.last.pool_id
        return self.last.state_update()
