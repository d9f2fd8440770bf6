"""compact_by_refork / CompactionNode: the order of the protocol's calls on
the wire (summarize -> fork -> migrate -> release) and its failure paths."""

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from fake import Fake, err
from polykv_langgraph import (ChatPolyKV, CompactionNode, PolyKVClient, PoolConflictError, compact_by_refork)
from polykv_langgraph.compaction import _split

SUMMARY = {"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "We found X."},
                                   "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 90, "completion_tokens": 4, "total_tokens": 94}}
FORKED = {"pool_id": 12, "prefix_len": 61, "parent": 1, "branch_pos": 30, "own_tokens": 31}
NEW_TREE = {"pools": [{"pool_id": 12, "parent": 1, "prefix_len": 61, "sessions": []}]}
HIST = [SystemMessage("sys"), HumanMessage("q1"), AIMessage("a1"), HumanMessage("q2"), AIMessage("a2"),
        HumanMessage("q3"), AIMessage("a3")]


def routes(over=None):
    r = {("POST", "/v1/chat/completions"): SUMMARY, ("POST", "/polykv/pools/1/fork"): (201, FORKED),
         ("GET", "/polykv/pools/12"): NEW_TREE, ("POST", "/polykv/pools/7/unpin"): {"pool_id": 7, "ok": True},
         ("DELETE", "/polykv/pools/7"): {"pool_id": 7, "ok": True, "released": 1}}
    r.update(over or {})
    return r


def setup(over=None):
    fake = Fake(routes(over))
    client = PolyKVClient("http://polykv", transport=fake.transport())
    model = ChatPolyKV(base_url="http://polykv", transport=fake.transport(), session_id="agent-3")
    return fake, client, model


def test_order_of_calls_and_result():
    fake, client, model = setup()
    res = compact_by_refork(client, model, HIST, root_pool_id=1, old_pool_id=7, session_id="agent-3", keep_last=2)
    assert fake.paths() == ["POST /v1/chat/completions", "POST /polykv/pools/1/fork", "GET /polykv/pools/12",
                            "POST /polykv/pools/7/unpin", "DELETE /polykv/pools/7"]
    assert res.calls == ["summarize", "fork", "migrate", "release"]
    summ = fake.calls[0][3]
    assert summ["pool_id"] == 7 and summ["session_id"] == "agent-3"
    assert summ["messages"][-1]["role"] == "user" and "Summarize" in summ["messages"][-1]["content"]
    fork = fake.calls[1][3]["messages"]
    assert fork[0] == {"role": "system", "content": "sys"} and "We found X." in fork[1]["content"]
    assert fork[-2:] == [{"role": "user", "content": "q3"}, {"role": "assistant", "content": "a3"}]
    assert fake.calls[4][2] == {"recursive": "true"}
    assert res.pool_id == 12 and res.released and res.release_error is None
    up = res.state_update()
    assert up["pool_id"] == 12 and up["messages"][0].id == "__remove_all__"
    assert [m.content for m in up["messages"][1:]][-2:] == ["q3", "a3"]


def test_fork_conflict_changes_nothing():
    fake, client, model = setup({("POST", "/polykv/pools/1/fork"): (409, err(
        409, "the prefix differs from the parent at 12", first_differing_position=12))})
    with pytest.raises(PoolConflictError) as e:
        compact_by_refork(client, model, HIST, root_pool_id=1, old_pool_id=7)
    assert e.value.first_differing_position == 12
    assert fake.paths() == ["POST /v1/chat/completions", "POST /polykv/pools/1/fork"]  # no release


def test_release_conflict_keeps_the_migration():
    fake, client, model = setup({("DELETE", "/polykv/pools/7"): (409, err(409, "pool 7 has children"))})
    res = compact_by_refork(client, model, HIST, root_pool_id=1, old_pool_id=7)
    assert fake.paths()[-2:] == ["POST /polykv/pools/7/unpin", "DELETE /polykv/pools/7"]
    assert res.pool_id == 12 and not res.released and "409" in res.release_error


def test_migrate_refuses_a_pool_that_is_not_the_fork():
    fake, client, model = setup({("GET", "/polykv/pools/12"): {"pools": [
        {"pool_id": 12, "parent": 1, "prefix_len": 5}]}})
    with pytest.raises(Exception) as e:
        compact_by_refork(client, model, HIST, root_pool_id=1, old_pool_id=7)
    assert "not the fork" in str(e.value)
    assert "DELETE /polykv/pools/7" not in fake.paths()


def test_the_ancestor_is_never_released():
    fake, client, model = setup()
    res = compact_by_refork(client, model, HIST, root_pool_id=1, old_pool_id=1)
    assert res.calls == ["summarize", "fork", "migrate"] and not any("DELETE" in p for p in fake.paths())


def test_split_keeps_tool_answers_with_their_call():
    hist = [SystemMessage("s"), HumanMessage("q"), AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
            ToolMessage("r", tool_call_id="1"), AIMessage("done")]
    head, old, tail = _split(hist, keep_last=2)
    assert [type(m).__name__ for m in tail] == ["AIMessage", "ToolMessage", "AIMessage"]
    assert len(head) == 1 and len(old) == 1


def test_node_below_threshold_does_nothing():
    tree = {"pools": [{"pool_id": 7, "sessions": [{"session_id": "agent-3", "ctx_used": 100, "ctx_total": 2048}]}]}
    fake, client, model = setup({("GET", "/polykv/pools/7"): tree})
    node = CompactionNode(model, client, threshold=0.8)
    state = {"messages": HIST, "pool_id": 7, "root_pool_id": 1, "session_id": "agent-3",
             "compaction_pressure": 0.3}
    assert node(state) == {} and fake.paths() == ["GET /polykv/pools/7"]


@pytest.mark.parametrize("pressure,ctx_used", [(0.85, 100), (0.1, 1900)])
def test_node_compacts_on_pressure_or_own_context(pressure, ctx_used):
    tree = {"pools": [{"pool_id": 7, "sessions": [{"session_id": "agent-3", "ctx_used": ctx_used,
                                                   "ctx_total": 2048}]}]}
    fake, client, model = setup({("GET", "/polykv/pools/7"): tree})
    node = CompactionNode(model, client, threshold=0.8, keep_last=2)
    up = node({"messages": HIST, "pool_id": 7, "root_pool_id": 1, "compaction_pressure": pressure})
    assert up["pool_id"] == 12 and node.last.released
    assert fake.paths()[1:] == ["POST /v1/chat/completions", "POST /polykv/pools/1/fork", "GET /polykv/pools/12",
                                "POST /polykv/pools/7/unpin", "DELETE /polykv/pools/7"]


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_as_pre_model_hook_of_a_prebuilt_agent():
    """create_react_agent(pre_model_hook=CompactionNode): the history is
    replaced before the model call, and the agent's model moves to the new pool."""
    from langgraph.prebuilt import create_react_agent
    from langgraph.prebuilt.chat_agent_executor import AgentState

    class State(AgentState, total=False):
        pool_id: int | None
        root_pool_id: int | None
        compaction_pressure: float | None

    tree = {"pools": [{"pool_id": 7, "sessions": []}]}
    fake, client, _ = setup({("GET", "/polykv/pools/7"): tree})
    model = ChatPolyKV(base_url="http://polykv", transport=fake.transport(), session_id="agent-3", pool_id=7)
    hook = CompactionNode(model, client, threshold=0.5, keep_last=2)
    agent = create_react_agent(model, [], pre_model_hook=hook, state_schema=State)
    out = agent.invoke({"messages": HIST[:-1], "pool_id": 7, "root_pool_id": 1, "compaction_pressure": 0.9})
    assert out["pool_id"] == 12 and model.pool_id == 12
    chats = [c for c in fake.calls if c[1] == "/v1/chat/completions"]
    assert len(chats) == 2 and chats[0][3]["pool_id"] == 7          # the summary, on the old pool
    sent = chats[1][3]                                               # the agent's turn, on the new one
    assert sent["pool_id"] == 12 and "Summary of the earlier conversation" in sent["messages"][1]["content"]
    assert len(sent["messages"]) == 1 + 2 + 2                        # system, summary + ack, tail
