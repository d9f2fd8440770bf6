"""CapacityGate's routing in each capacity state, inside a real LangGraph
graph (so the Command it returns is what LangGraph follows), and the
PolyKVState reducer."""

import asyncio

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from fake import Fake
from polykv_langgraph import AsyncPolyKVClient, CapacityGate, PolyKVClient, PolyKVState, latest


def cap(can, reason, **kw):
    base = {"can_admit": can, "reason": reason, "headroom_sessions": 4, "mean_active_tps": 22.5,
            "settling": False, "compaction_pressure": 0.25, "retry_after_s": 2.0}
    return {**base, **kw}


STATES = {
    "ok": (cap(True, "ok"), "spawn"),
    "guaranteed": (cap(True, "guaranteed minimum", guaranteed=True), "spawn"),
    "settling": (cap(False, "measurement settling", settling=True, settle_remaining_ms=3800), "wait"),
    "below_floor": (cap(False, "projected mean tps below floor", headroom_sessions=4), "wait"),
    "idle_estimate": (cap(False, "projected mean tps below floor (idle estimate)"), "wait"),
    "kv_exhausted": (cap(False, "kv headroom exhausted", headroom_sessions=0), "wait"),
    "context_exhausted": (cap(False, "context headroom exhausted", ctx_headroom_tokens=10), "compact"),
}


def graph(gate, checkpointer=None):
    g = StateGraph(PolyKVState)
    g.add_node("gate", gate, destinations=("spawn", "wait", "compact"))
    for n in ("spawn", "wait", "compact"):
        g.add_node(n, lambda s, n=n: {"capacity_reason": s["capacity_reason"] + f" -> {n}"})
        g.add_edge(n, END)
    g.add_edge(START, "gate")
    return g.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("name", list(STATES))
def test_routes_each_state(name):
    answer, dest = STATES[name]
    fake = Fake({("GET", "/polykv/pools/5/capacity"): answer})
    gate = CapacityGate(PolyKVClient("http://polykv", transport=fake.transport()), spawn_node="spawn",
                        wait_node="wait", exhausted_node="compact", expected_tokens=lambda s: 300)
    out = graph(gate).invoke({"pool_id": 5})
    assert out["capacity_reason"] == f"{answer['reason']} -> {dest}"
    assert out["capacity_ok"] is answer["can_admit"]
    assert out["headroom_sessions"] == answer["headroom_sessions"]
    assert out["mean_active_tps"] == 22.5 and out["compaction_pressure"] == 0.25
    assert fake.calls == [("GET", "/polykv/pools/5/capacity", {"expected_tokens": "300"}, None)]


def test_no_pool_asks_the_server_scope_and_exhausted_defaults_to_wait():
    fake = Fake({("GET", "/polykv/capacity"): cap(False, "context headroom exhausted")})
    gate = CapacityGate(PolyKVClient("http://polykv", transport=fake.transport()), spawn_node="spawn",
                        wait_node="wait")
    cmd = gate({})
    assert isinstance(cmd, Command) and cmd.goto == "wait" and fake.calls[0][1] == "/polykv/capacity"


def test_fixed_pool_when_the_state_has_none():
    fake = Fake({("GET", "/polykv/pools/7/capacity"): cap(True, "ok"),
                 ("GET", "/polykv/pools/5/capacity"): cap(False, "kv headroom exhausted")})
    gate = CapacityGate(PolyKVClient("http://polykv", transport=fake.transport()), spawn_node="spawn",
                        wait_node="wait", exhausted_node="compact", pool_id=7)
    assert graph(gate).invoke({})["capacity_reason"] == "ok -> spawn"
    assert graph(gate).invoke({"pool_id": 5})["capacity_reason"] == "kv headroom exhausted -> wait"
    assert [c[1] for c in fake.calls] == ["/polykv/pools/7/capacity", "/polykv/pools/5/capacity"]


def test_async_gate_fixed_pool():
    fake = Fake({("GET", "/polykv/pools/7/capacity"): cap(True, "ok")})
    gate = CapacityGate(aclient=AsyncPolyKVClient("http://polykv", transport=fake.transport()),
                        spawn_node="spawn", wait_node="wait", pool_id=7)
    out = asyncio.run(graph(gate.as_runnable()).ainvoke({}))
    assert out["capacity_reason"] == "ok -> spawn" and fake.calls[0][1] == "/polykv/pools/7/capacity"


def test_async_gate():
    fake = Fake({("GET", "/polykv/pools/5/capacity"): cap(True, "ok")})
    gate = CapacityGate(aclient=AsyncPolyKVClient("http://polykv", transport=fake.transport()),
                        spawn_node="spawn", wait_node="wait", exhausted_node="compact")
    out = asyncio.run(graph(gate.as_runnable()).ainvoke({"pool_id": 5}))
    assert out["capacity_reason"] == "ok -> spawn"


def test_interrupt_blocks_until_resumed_then_reads_again():
    fake = Fake({("GET", "/polykv/pools/5/capacity"): [cap(False, "kv headroom exhausted"),
                                                        cap(False, "kv headroom exhausted"),
                                                        cap(True, "ok")]})
    gate = CapacityGate(PolyKVClient("http://polykv", transport=fake.transport()), spawn_node="spawn",
                        wait_node="wait", exhausted_node="compact", interrupt=True)
    app = graph(gate, InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    first = app.invoke({"pool_id": 5}, cfg)
    assert "__interrupt__" in first and first["__interrupt__"][0].value["capacity"]["can_admit"] is False
    assert len(fake.calls) == 1
    out = app.invoke(Command(resume=True), cfg)
    # the node re-runs: the capacity it read before, then once more after the interrupt
    assert out["capacity_reason"] == "ok -> spawn" and len(fake.calls) == 3


def test_settling_never_interrupts():
    fake = Fake({("GET", "/polykv/pools/5/capacity"): cap(False, "measurement settling", settling=True)})
    gate = CapacityGate(PolyKVClient("http://polykv", transport=fake.transport()), spawn_node="spawn",
                        wait_node="wait", interrupt=True)
    assert gate({"pool_id": 5}).goto == "wait" and len(fake.calls) == 1


def test_latest_reducer_and_parallel_writes():
    assert latest(3, None) == 3 and latest(3, 4) == 4
    g = StateGraph(PolyKVState)
    g.add_node("a", lambda s: {"pool_id": 7, "headroom_sessions": 1})
    g.add_node("b", lambda s: {"pool_id": 7, "headroom_sessions": None})
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    out = g.compile().invoke({"pool_id": 1, "session_id": "s"})
    assert out["pool_id"] == 7 and out["headroom_sessions"] == 1 and out["session_id"] == "s"
