"""A supervisor that fans out k researcher sub-agents on one polykv pool.

    setup       root pool = the system block; task pool = root + the task (an extend)
    gate        CapacityGate on the task pool: spawn when there is room, wait
                while the last admit settles (or the floor says no)
    spawn       Send() one researcher per free place (at most headroom_sessions)
    researcher  one ChatPolyKV session per sub-agent, attached to the task pool
    join        back to the gate until k researchers have answered
    compact     CompactionNode: re-roots the supervisor's history on the root
                (summary + tail), releases the task pool
    synthesize  the supervisor's answer, on the new pool

Run it against `make run`'s server (127.0.0.1:8080):

    build/venv/bin/python clients/python/examples/supervisor.py --url http://127.0.0.1:8080 -k 3

`build_graph(..., chat_factory=...)` takes any chat model factory: the
benchmark (clients/python/bench_fanout.py) runs the same graph with plain
ChatOpenAI and no pools.
"""

from __future__ import annotations

import argparse
import operator
import time
from typing import Annotated, Any, Callable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send

from polykv_langgraph import CapacityGate, ChatPolyKV, CompactionNode, PolyKVClient, PolyKVState

SYSTEM = ("You are a researcher in a team of agents. Each researcher studies one angle of the task and "
          "reports findings in three short sentences: what is known, what is uncertain, and what to "
          "measure next. Be concrete, cite mechanisms, avoid filler. ") * 6


class SupervisorState(PolyKVState, total=False):
    task: str
    k: int
    spawned: int
    waits: int
    findings: Annotated[list[str], operator.add]
    usage: Annotated[list[dict[str, Any]], operator.add]
    report: str


def _usage(msg: AIMessage, who: str) -> dict[str, Any]:
    u = msg.usage_metadata or {}
    return {"who": who, "input_tokens": u.get("input_tokens", 0), "output_tokens": u.get("output_tokens", 0),
            "cache_read": (u.get("input_token_details") or {}).get("cache_read", 0)}


def polykv_chat(base_url: str, max_tokens: int) -> Callable[[str, int | None], BaseChatModel]:
    return lambda session, pool: ChatPolyKV(base_url=base_url, session_id=session, pool_id=pool,
                                            max_tokens=max_tokens, temperature=0.0, wait_on_saturation=True)


def build_graph(base_url: str, *, use_pools: bool = True, max_tokens: int = 32, system: str = SYSTEM,
                chat_factory: Callable[[str, int | None], BaseChatModel] | None = None,
                compact_threshold: float = 0.8, max_waits: int = 50):
    client = PolyKVClient(base_url)
    make_chat = chat_factory or polykv_chat(base_url, max_tokens)
    supervisor = make_chat("supervisor", None)

    def setup(state: SupervisorState) -> dict[str, Any]:
        head = [SystemMessage(system), HumanMessage(f"Task: {state['task']}")]
        out: dict[str, Any] = {"messages": head, "spawned": 0, "waits": 0, "session_id": "supervisor"}
        if use_pools:
            root = client.create_pool(messages=[{"role": "system", "content": system}])
            task = client.fork_pool(root["pool_id"], messages=[{"role": "system", "content": system},
                                                               {"role": "user", "content": f"Task: {state['task']}"}])
            out.update(root_pool_id=root["pool_id"], pool_id=task["pool_id"],
                       usage=[{"who": "pools", "prefilled_tokens": root["prefilled_tokens"] + task["prefilled_tokens"]}])
        return out

    gate = CapacityGate(client, spawn_node="spawn", wait_node="wait", exhausted_node="compact",
                        expected_tokens=max_tokens + 32)

    def wait(state: SupervisorState) -> Command:
        if state.get("waits", 0) >= max_waits:
            return Command(goto="compact")
        time.sleep(min(max(state.get("retry_after_s") or 0.2, 0.05), 1.0))
        return Command(update={"waits": state.get("waits", 0) + 1}, goto="gate")

    def spawn(state: SupervisorState) -> Command:
        left = state["k"] - state.get("spawned", 0)
        n = max(1, min(left, state.get("headroom_sessions") or 1))
        first = state.get("spawned", 0)
        sends = [Send("researcher", {"i": i, "task": state["task"], "pool_id": state.get("pool_id")})
                 for i in range(first, first + n)]
        return Command(update={"spawned": first + n}, goto=sends)

    def researcher(job: dict[str, Any]) -> dict[str, Any]:
        model = make_chat(f"researcher-{job['i']}", job["pool_id"])
        msg = model.invoke([SystemMessage(system), HumanMessage(f"Task: {job['task']}"),
                            HumanMessage(f"Your angle is number {job['i'] + 1}. Report.")])
        return {"findings": [f"researcher {job['i'] + 1}: {msg.content}"],
                "usage": [_usage(msg, f"researcher-{job['i']}")]}

    def join(state: SupervisorState) -> Command:
        if state.get("spawned", 0) < state["k"]:
            return Command(goto="gate")
        notes = "\n".join(state.get("findings", []))
        return Command(update={"messages": [AIMessage(f"Findings so far:\n{notes}")]}, goto="compact")

    compactor = CompactionNode(supervisor, client, threshold=compact_threshold, keep_last=1)

    def compact(state: SupervisorState) -> dict[str, Any]:
        return compactor(state)

    def synthesize(state: SupervisorState) -> dict[str, Any]:
        msgs = [*state["messages"], HumanMessage("Write the final report from the findings.")]
        kw = {"pool_id": state["pool_id"]} if state.get("pool_id") is not None else {}
        msg = supervisor.invoke(msgs, **kw)
        usage = [_usage(msg, "supervisor")]
        if compactor.last is not None:
            last = compactor.last
            usage.append({"who": "compaction", "pool_id": last.pool_id, "released": last.released,
                          "prefilled_tokens": last.prefilled_tokens, **(last.summary_usage or {})})
        return {"report": msg.content, "messages": [msg], "usage": usage}

    g = StateGraph(SupervisorState)
    g.add_node("setup", setup)
    g.add_node("gate", gate, destinations=gate.destinations)
    g.add_node("wait", wait, destinations=("gate", "compact"))
    g.add_node("spawn", spawn, destinations=("researcher",))
    g.add_node("researcher", researcher)
    g.add_node("join", join, destinations=("gate", "compact"))
    g.add_node("compact", compact)
    g.add_node("synthesize", synthesize)
    g.add_edge(START, "setup")
    g.add_edge("setup", "gate")
    g.add_edge("researcher", "join")
    g.add_edge("compact", "synthesize")
    g.add_edge("synthesize", END)
    return g.compile(), client, compactor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--task", default="how shared KV-cache prefixes change multi-agent serving cost")
    ap.add_argument("--compact-threshold", type=float, default=0.8)
    a = ap.parse_args()
    app, _, _ = build_graph(a.url, max_tokens=a.max_tokens, compact_threshold=a.compact_threshold)
    t = time.monotonic()
    out = app.invoke({"task": a.task, "k": a.k}, {"recursion_limit": 200})
    print(f"{len(out['findings'])} findings, pool {out.get('pool_id')}, {time.monotonic() - t:.2f} s")
    for u in out["usage"]:
        print(u)
    print("report:", out["report"][:300])


if __name__ == "__main__":
    main()
