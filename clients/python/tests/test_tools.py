"""The pool tools: their schemas, what they send, errors as answers, and a
ToolNode running them from an AIMessage's tool calls."""

import asyncio
import json

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from fake import Fake, err
from polykv_langgraph import AsyncPolyKVClient, PolyKVClient, pool_tools

ROUTES = {
    ("POST", "/polykv/pools"): (201, {"pool_id": 1, "prefix_len": 20}),
    ("POST", "/polykv/pools/1/fork"): (409, err(409, "differs at 8", first_differing_position=8)),
    ("GET", "/polykv/pools/1"): {"pools": [{"pool_id": 1, "sessions": [{"session_id": "idle-1", "tps_ewma": 3.0,
                                                                        "state": "idle"}]}]},
    ("GET", "/polykv/pools"): {"pools": [{"pool_id": 1, "sessions": [{"session_id": "idle-1", "tps_ewma": 3.0,
                                                                      "state": "idle"}]}]},
    ("GET", "/polykv/tps"): {"sessions": [{"session_id": "a1", "tps_ewma": 17.0, "pool_id": 1}]},
    ("GET", "/polykv/pools/1/capacity"): {"can_admit": True, "reason": "ok"},
    ("DELETE", "/polykv/pools/1"): {"pool_id": 1, "ok": True, "released": 3},
}


def tools(fake, aio=False):
    c = PolyKVClient("http://polykv", transport=fake.transport())
    a = AsyncPolyKVClient("http://polykv", transport=fake.transport()) if aio else None
    return {t.name: t for t in pool_tools(c, a)}


def test_names_and_schemas():
    t = tools(Fake(ROUTES))
    assert sorted(t) == ["capacity", "create_pool", "fork_pool", "pool_status", "release_pool", "session_tps"]
    assert set(t["fork_pool"].args) == {"pool_id", "prompt", "messages", "branch_pos"}


def test_each_tool():
    fake = Fake(ROUTES)
    t = tools(fake)
    assert t["create_pool"].invoke({"prompt": "sys"}) == {"pool_id": 1, "prefix_len": 20}
    assert fake.calls[-1][3] == {"prompt": "sys"}
    assert t["fork_pool"].invoke({"pool_id": 1, "prompt": "x"}) == {
        "error": "differs at 8", "status": 409, "first_differing_position": 8}
    assert t["pool_status"].invoke({"pool_id": 1})["pools"][0]["pool_id"] == 1
    assert t["session_tps"].invoke({"session_id": "a1"}) == {"found": True, "session_id": "a1",
                                                             "tps_ewma": 17.0, "pool_id": 1}
    assert t["session_tps"].invoke({"session_id": "idle-1"})["tps_ewma"] == 3.0
    assert t["session_tps"].invoke({"session_id": "nobody"}) == {"found": False, "session_id": "nobody"}
    assert t["capacity"].invoke({"pool_id": 1, "expected_tokens": 64}) == {"can_admit": True, "reason": "ok"}
    assert fake.calls[-1][2] == {"expected_tokens": "64"}
    assert t["release_pool"].invoke({"pool_id": 1, "recursive": True})["released"] == 3
    assert t["pool_status"].invoke({"pool_id": 2})["status"] == 404


def test_tool_node_runs_the_calls():
    fake = Fake(ROUTES)
    g = StateGraph(MessagesState)
    g.add_node("tools", ToolNode(list(tools(fake, aio=True).values())))
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    node = g.compile()
    msg = AIMessage("", tool_calls=[{"name": "capacity", "args": {"pool_id": 1}, "id": "c1"},
                                    {"name": "session_tps", "args": {"session_id": "a1"}, "id": "c2"}])
    out = node.invoke({"messages": [msg]})["messages"][1:]
    assert [m.tool_call_id for m in out] == ["c1", "c2"]
    assert json.loads(out[0].content) == {"can_admit": True, "reason": "ok"}
    aout = asyncio.run(node.ainvoke({"messages": [msg]}))["messages"][1:]
    assert json.loads(aout[1].content)["tps_ewma"] == 17.0
