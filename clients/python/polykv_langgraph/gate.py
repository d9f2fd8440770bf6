"""CapacityGate: a graph node that asks polykv before a spawn.

It reads ``/polykv/pools/{pool_id}/capacity?expected_tokens=N`` (the pool
is ``state["pool_id"]``; when the state carries none, the gate's own
``pool_id``; with neither, the server scope) and returns
``Command(update=..., goto=...)``:

    can_admit                              -> spawn_node
    reason "measurement settling"          -> wait_node   (never spawns: the
                                              last admit is not measured yet)
    reason "context headroom exhausted"    -> exhausted_node (default wait_node;
                                              a compaction node is the usual choice)
    any other refusal                      -> wait_node, or, with interrupt=True,
                                              interrupt() and, once resumed,
                                              read capacity again

The update holds ``capacity_ok``, ``headroom_sessions``,
``mean_active_tps``, ``capacity_reason``, ``compaction_pressure`` and
``retry_after_s`` (what a wait node should sleep).
"""

from __future__ import annotations

from typing import Any, Callable

from langchain_core.runnables import RunnableLambda
from langgraph.types import Command, interrupt

from .client import AsyncPolyKVClient, PolyKVClient

SETTLING = "measurement settling"
CONTEXT_EXHAUSTED = "context headroom exhausted"


class CapacityGate:
    def __init__(self, client: PolyKVClient | None = None, *, spawn_node: str, wait_node: str,
                 exhausted_node: str | None = None, expected_tokens: int | Callable[[dict], int | None] | None = None,
                 interrupt: bool = False, aclient: AsyncPolyKVClient | None = None,
                 pool_id: int | None = None) -> None:
        self.client = client
        self.aclient = aclient
        self.spawn_node = spawn_node
        self.wait_node = wait_node
        self.exhausted_node = exhausted_node or wait_node
        self.expected_tokens = expected_tokens
        self.use_interrupt = interrupt
        self.pool_id = pool_id

    @property
    def destinations(self) -> tuple[str, ...]:
        """For ``add_node(..., destinations=gate.destinations)``."""
        return tuple(dict.fromkeys((self.spawn_node, self.wait_node, self.exhausted_node)))

    def _pool(self, state: dict) -> int | None:
        pid = state.get("pool_id")
        return self.pool_id if pid is None else pid

    def _query(self, state: dict) -> dict[str, Any]:
        et = self.expected_tokens(state) if callable(self.expected_tokens) else self.expected_tokens
        return {"pool_id": self._pool(state), "expected_tokens": et}

    def route(self, cap: dict[str, Any]) -> str:
        """The node a capacity answer leads to (pure)."""
        if cap.get("can_admit"):
            return self.spawn_node
        if cap.get("reason") == CONTEXT_EXHAUSTED:
            return self.exhausted_node
        return self.wait_node

    def _command(self, cap: dict[str, Any]) -> Command:
        return Command(update={"capacity_ok": bool(cap.get("can_admit")),
                               "headroom_sessions": cap.get("headroom_sessions"),
                               "mean_active_tps": cap.get("mean_active_tps"),
                               "capacity_reason": cap.get("reason"),
                               "compaction_pressure": cap.get("compaction_pressure"),
                               "retry_after_s": cap.get("retry_after_s")},
                       goto=self.route(cap))

    def _blocks(self, cap: dict[str, Any]) -> bool:
        """Whether an interrupt applies: a refusal that waiting on a human
        (or an outside event) can change; settling always passes by itself."""
        return (self.use_interrupt and not cap.get("can_admit") and not cap.get("settling")
                and cap.get("reason") not in (SETTLING, CONTEXT_EXHAUSTED))

    def __call__(self, state: dict) -> Command:
        cap = self.client.capacity(**self._query(state))
        if self._blocks(cap):
            interrupt({"capacity": cap, "pool_id": self._pool(state)})
            cap = self.client.capacity(**self._query(state))
        return self._command(cap)

    async def acall(self, state: dict) -> Command:
        cap = await self.aclient.capacity(**self._query(state))
        if self._blocks(cap):
            interrupt({"capacity": cap, "pool_id": self._pool(state)})
            cap = await self.aclient.capacity(**self._query(state))
        return self._command(cap)

    def as_runnable(self) -> RunnableLambda:
        """Sync and async in one node (async needs ``aclient``)."""
        return RunnableLambda(self.__call__, afunc=self.acall if self.aclient else None, name="capacity_gate")
