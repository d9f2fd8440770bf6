"""PolyKVState: the graph state that carries a session's place on polykv.

``messages`` uses LangGraph's ``add_messages``; the polykv keys keep the
latest value written (``latest``: a None write leaves the value as it
was), so parallel branches of one step (fan-out sub-agents) may all write
them without LangGraph's "one value per step" error, and conditional
edges can branch on live capacity:

    pool_id, root_pool_id, session_id      where the session lives
    capacity_ok, capacity_reason           the last CapacityGate answer
    headroom_sessions, mean_active_tps     ... and its numbers
    compaction_pressure                    in [0, 1], from /capacity
    retry_after_s                          how long a wait node should sleep
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


def latest(old: Any, new: Any) -> Any:
    """Reducer: the newest non-None value."""
    return old if new is None else new


class PolyKVState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    pool_id: Annotated[int | None, latest]
    root_pool_id: Annotated[int | None, latest]
    session_id: Annotated[str | None, latest]
    capacity_ok: Annotated[bool | None, latest]
    capacity_reason: Annotated[str | None, latest]
    headroom_sessions: Annotated[int | None, latest]
    mean_active_tps: Annotated[float | None, latest]
    compaction_pressure: Annotated[float | None, latest]
    retry_after_s: Annotated[float | None, latest]
