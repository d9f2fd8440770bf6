"""Live tests: a real `polykv serve` on a small model from ../shared/models,
started here on a free port.  Skipped, with the reason, when the models are
absent (POLYKV_SHARED points elsewhere); the binary is POLYKV_BIN or
build/polykv, and its absence is a failure (make test builds it)."""

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from polykv_langgraph import (ChatPolyKV, PolyKVClient, PoolConflictError, PoolNotFoundError,
                              PoolSaturatedError, compact_by_refork, pool_tools)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHARED = os.environ.get("POLYKV_SHARED") or os.path.join(ROOT, "..", "shared")
MODEL = os.path.join(SHARED, "models", "rand-qwen2-qwen2vocab-e64-l2-F16.gguf")
BIN = os.environ.get("POLYKV_BIN") or os.path.join(ROOT, "build", "polykv")
SYSTEM = "You are a careful research assistant who answers briefly. " * 8

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"live tests: {MODEL} absent")


@pytest.fixture(scope="module")
def url():
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"{BIN} is not built (make -j2)")
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", "0", "-np", "4", "-c", "8192", "-t", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, base = [], None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            base = m.group(1)
            break
    if base is None:
        p.kill()
        pytest.fail("polykv serve did not start:\n" + "".join(lines))
    threading.Thread(target=p.stdout.read, daemon=True).start()  # keep draining its output
    while time.monotonic() - t0 < 30 and httpx.get(base + "/health").status_code != 200:
        time.sleep(0.05)
    yield base
    p.terminate()
    p.wait(10)


def sid(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def sys_msgs():
    return [{"role": "system", "content": SYSTEM}]


def all_pools(c):
    return {p["pool_id"]: p for p in c.pools()["pools"]}


def test_pool_tree_root_extend_branch(url):
    c = PolyKVClient(url)
    root = c.create_pool(messages=sys_msgs())
    assert root["parent"] == -1 and root["prefix_len"] > 50
    ext = c.fork_pool(root["pool_id"], messages=sys_msgs() + [{"role": "user", "content": "Task: caches."}])
    assert ext["parent"] == root["pool_id"] and ext["branch_pos"] == root["prefix_len"]
    assert ext["prefix_len"] > root["prefix_len"] and ext["prefilled_tokens"] == ext["own_tokens"]
    toks = c.tokenize(c.apply_template(sys_msgs()))
    br = c.fork_pool(root["pool_id"], tokens=toks[:20] + [11, 12, 13], branch_pos=20)
    assert br["branch_pos"] == 20 and br["prefix_len"] == 23
    tree = all_pools(c)
    assert sorted(tree[root["pool_id"]]["children"]) == sorted([ext["pool_id"], br["pool_id"]])
    sub = c.pool_status(root["pool_id"])["pools"]
    assert {p["pool_id"] for p in sub} == {root["pool_id"], ext["pool_id"], br["pool_id"]}
    with pytest.raises(PoolConflictError) as e:
        c.fork_pool(root["pool_id"], tokens=toks[:3] + [7] * 10, branch_pos=8)
    assert e.value.first_differing_position == 3
    with pytest.raises(PoolConflictError):
        c.release_pool(root["pool_id"])                   # it has children
    assert c.release_pool(root["pool_id"], recursive=True)["released"] == 3
    with pytest.raises(PoolNotFoundError):
        c.pool_status(root["pool_id"])


def test_chat_invoke_and_stream_share_the_pool(url):
    c = PolyKVClient(url)
    root = c.create_pool(messages=sys_msgs())
    msgs = [SystemMessage(SYSTEM), HumanMessage("Name one cache.")]
    m = ChatPolyKV(base_url=url, pool_id=root["pool_id"], session_id=sid("chat"), max_tokens=8, temperature=0)
    out = m.invoke(msgs)
    md = out.response_metadata
    assert md["pool_id"] == root["pool_id"] and md["cached_prefix_tokens"] >= root["prefix_len"]
    assert out.usage_metadata["input_token_details"]["cache_read"] >= root["prefix_len"]
    assert out.usage_metadata["output_tokens"] == 8 and md["finish_reason"] == "length" and not md["truncated"]
    assert md["session_tps"] > 0 and md["session_id"] == m.session_id
    chunks = list(m.stream(msgs))
    total = chunks[0]
    for ch in chunks[1:]:
        total = total + ch
    assert total.content == out.content                  # greedy: the same answer
    assert total.response_metadata["cached_prefix_tokens"] >= root["prefix_len"]
    assert total.usage_metadata["output_tokens"] == 8
    am = ChatPolyKV(base_url=url, pool_id=root["pool_id"], session_id=sid("achat"), max_tokens=8, temperature=0)
    aout = asyncio.run(am.ainvoke(msgs))
    assert aout.content == out.content and aout.response_metadata["cached_prefix_tokens"] >= root["prefix_len"]
    sessions = {s["session_id"]: s for p in c.pool_status(root["pool_id"])["pools"] for s in p["sessions"]}
    assert sessions[am.session_id]["shared_tokens"] >= root["prefix_len"]
    c.release_pool(root["pool_id"], recursive=True)


def test_tool_node_round_trip(url):
    """The random-weight model cannot choose a tool, so the call is the
    AIMessage an agent model would write; ToolNode runs the pool tools
    against the server and the session continues with their answers."""
    c = PolyKVClient(url)
    root = c.create_pool(messages=sys_msgs())
    tools = pool_tools(c)
    model = ChatPolyKV(base_url=url, pool_id=root["pool_id"], session_id=sid("tools"), max_tokens=6,
                       temperature=0).bind_tools(tools)
    g = StateGraph(MessagesState)
    g.add_node("tools", ToolNode(tools))
    g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_edge(START, "tools")
    g.add_edge("tools", "agent")
    g.add_edge("agent", END)
    call = AIMessage("", tool_calls=[
        {"name": "capacity", "args": {"pool_id": root["pool_id"], "expected_tokens": 64}, "id": "call_a"},
        {"name": "pool_status", "args": {"pool_id": root["pool_id"]}, "id": "call_b"}])
    out = g.compile().invoke({"messages": [SystemMessage(SYSTEM), HumanMessage("Check the pool."), call]})
    tool_msgs, answer = out["messages"][3:5], out["messages"][5]
    assert [t.tool_call_id for t in tool_msgs] == ["call_a", "call_b"]
    assert '"can_admit": true' in tool_msgs[0].content
    assert f'"pool_id": {root["pool_id"]}' in tool_msgs[1].content
    assert isinstance(answer, AIMessage) and answer.usage_metadata["output_tokens"] == 6
    assert answer.response_metadata["pool_id"] == root["pool_id"]
    c.release_pool(root["pool_id"], recursive=True)


def test_enforced_pool_429_then_advisory_recovers(url):
    c = PolyKVClient(url)
    root = c.create_pool(messages=sys_msgs())
    pid = root["pool_id"]
    c.set_admission(pid, mode="enforced", on_saturation="reject", target_tps_per_session=1e6,
                    guarantee_min_sessions=0)
    bg = ChatPolyKV(base_url=url, session_id=sid("bg"), max_tokens=1200, temperature=1.0)
    th = threading.Thread(target=bg.invoke, args=("Write at length.",))
    th.start()
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:              # until the background session is warm
            if any(not s["warming"] for s in c.tps()["sessions"]):
                break
            time.sleep(0.02)
        agent = ChatPolyKV(base_url=url, pool_id=pid, session_id=sid("gated"), max_tokens=4)
        with pytest.raises(PoolSaturatedError) as e:
            agent.invoke([SystemMessage(SYSTEM), HumanMessage("go")])
        assert e.value.status == 429 and e.value.retry_after is not None and e.value.retry_after >= 1
        assert e.value.capacity["can_admit"] is False
        assert e.value.capacity["reason"] == "projected mean tps below floor"
        c.set_admission(pid, mode="advisory")
        out = agent.invoke([SystemMessage(SYSTEM), HumanMessage("go")])
        assert out.response_metadata["pool_id"] == pid and out.usage_metadata["output_tokens"] == 4
        cap = c.capacity(pid)
        # advisory: the answer still says no (the admit just made is settling,
        # or the floor), but nothing is refused
        assert cap["policy"]["mode"] == "advisory" and not cap["can_admit"]
        assert cap["reason"] in ("measurement settling", "projected mean tps below floor")
    finally:
        th.join(60)
    c.release_pool(pid, recursive=True)


def test_compaction_end_to_end(url):
    c = PolyKVClient(url)
    root = c.create_pool(messages=sys_msgs())
    head = [SystemMessage(SYSTEM), HumanMessage("Task: compare caches.")]
    branch = c.fork_pool(root["pool_id"], messages=[{"role": "system", "content": SYSTEM},
                                                    {"role": "user", "content": "Task: compare caches."}])
    c.pin(branch["pool_id"])
    session = sid("compact")
    model = ChatPolyKV(base_url=url, session_id=session, max_tokens=12, temperature=0)
    hist = list(head)
    for q in ("First point?", "Second point?", "Third point?"):
        a = model.invoke(hist + [HumanMessage(q)], pool_id=branch["pool_id"])
        assert a.response_metadata["pool_id"] == branch["pool_id"]
        hist += [HumanMessage(q), AIMessage(a.content)]
    res = compact_by_refork(c, model, hist, root_pool_id=root["pool_id"], old_pool_id=branch["pool_id"],
                            session_id=session, keep_last=2)
    assert res.calls == ["summarize", "fork", "migrate", "release"] and res.released
    with pytest.raises(PoolNotFoundError):
        c.pool_status(branch["pool_id"])
    tree = all_pools(c)
    new = tree[res.pool_id]
    assert new["parent"] == root["pool_id"] and new["branch_pos"] == root["prefix_len"]
    assert not any(p["orphaned_pin"] for p in tree.values())
    nxt = model.invoke(res.messages + [HumanMessage("Go on.")], pool_id=res.pool_id)
    assert nxt.response_metadata["pool_id"] == res.pool_id
    assert nxt.response_metadata["cached_prefix_tokens"] >= res.prefix_len
    sess = [s for s in all_pools(c)[res.pool_id]["sessions"] if s["session_id"] == session]
    assert sess and sess[0]["shared_tokens"] >= res.prefix_len
    c.release_pool(root["pool_id"], recursive=True)


def test_tps_stream_live(url):
    c = PolyKVClient(url)
    gen = c.tps_stream(interval_ms=100)
    first = next(gen)
    t0 = time.monotonic()
    second = next(gen)
    gap = time.monotonic() - t0
    gen.close()
    assert {"aggregate_tps", "sessions", "pools"} <= set(first) and second["ts"] >= first["ts"]
    assert 0.05 <= gap < 2.0                              # a snapshot each interval_ms


def test_example_graph_runs_to_the_end(url):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from supervisor import build_graph

    app, c, compactor = build_graph(url, max_tokens=16, compact_threshold=0.0)
    before = set(all_pools(c))
    out = app.invoke({"task": "shared prefixes", "k": 3}, {"recursion_limit": 100})
    assert len(out["findings"]) == 3 and out["report"]
    researchers = [u for u in out["usage"] if u["who"].startswith("researcher")]
    comp = [u for u in out["usage"] if u["who"] == "compaction"][0]
    assert comp["released"] and comp["output_tokens"] > 0 and comp["prefilled_tokens"] > 0
    assert len(researchers) == 3 and all(u["output_tokens"] == 16 for u in researchers)
    root = out["root_pool_id"]
    task_len = [p for p in all_pools(c).values() if p["pool_id"] == root][0]["prefix_len"]
    assert all(u["cache_read"] >= task_len for u in researchers)
    assert compactor.last is not None and compactor.last.released and out["pool_id"] == compactor.last.pool_id
    after = all_pools(c)
    assert out["pool_id"] in after and not any(p["orphaned_pin"] for p in after.values())
    c.release_pool(root, recursive=True)
    assert root not in set(all_pools(c)) - before


def test_async_client_live(url):
    from polykv_langgraph import AsyncPolyKVClient

    async def go():
        async with AsyncPolyKVClient(url) as c:
            toks = await c.tokenize("An async root prefix. " * 5)
            root = await c.create_pool(tokens=toks)
            kid = await c.fork_pool(root["pool_id"], tokens=toks + [11, 12, 13])
            cap = await c.capacity(kid["pool_id"], expected_tokens=32)
            sub = await c.pool_status(root["pool_id"])
            with pytest.raises(PoolConflictError):
                await c.release_pool(root["pool_id"])
            rel = await c.release_pool(root["pool_id"], recursive=True)
            return root, kid, cap, sub, rel

    root, kid, cap, sub, rel = asyncio.run(go())
    assert kid["parent"] == root["pool_id"] and kid["branch_pos"] == root["prefix_len"]
    assert kid["prefix_len"] == root["prefix_len"] + 3 and kid["prefilled_tokens"] == 3
    assert cap["pool_id"] == kid["pool_id"] and cap["can_admit"]
    assert len(sub["pools"]) == 2 and rel["released"] == 2
