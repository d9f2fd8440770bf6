"""PolyKVClient / AsyncPolyKVClient against a scripted server: every route's
request, its answer, the SSE stream and the error mapping."""

import asyncio

import pytest

from fake import Fake, err
from polykv_langgraph import (AsyncPolyKVClient, PolyKVClient, PolyKVError, PoolConflictError,
                              PoolNotFoundError, PoolSaturatedError)

CREATED = {"pool_id": 1, "prefix_len": 20, "parent": -1, "branch_pos": 0, "own_tokens": 20,
           "prefilled_tokens": 20, "ms": 1.5}
TREE = {"pools": [{"pool_id": 1, "parent": -1, "prefix_len": 20, "children": [], "sessions": []}],
        "seq_ids_used": 5, "seq_ids_max": 20}
CAP = {"can_admit": True, "reason": "ok", "headroom_sessions": 3, "mean_active_tps": 12.5}

ROUTES = {
    ("POST", "/polykv/pools"): (201, CREATED),
    ("POST", "/polykv/pools/1/fork"): (201, {**CREATED, "pool_id": 2, "parent": 1, "prefix_len": 30}),
    ("POST", "/polykv/pools/1/pin"): {"pool_id": 1, "ok": True},
    ("POST", "/polykv/pools/1/unpin"): {"pool_id": 1, "ok": True},
    ("POST", "/polykv/pools/1/evict"): {"pool_id": 1, "ok": True},
    ("POST", "/polykv/pools/1/flush"): {"pool_id": 1, "ok": True, "ms": 2.0},
    ("DELETE", "/polykv/pools/1"): {"pool_id": 1, "ok": True, "released": 2},
    ("GET", "/polykv/pools"): TREE,
    ("GET", "/polykv/pools/1"): TREE,
    ("GET", "/polykv/admission"): {"set": False, "mode": "advisory", "pool_id": None},
    ("POST", "/polykv/pools/1/admission"): {"set": True, "mode": "enforced", "pool_id": 1},
    ("GET", "/polykv/pools/1/admission"): {"set": True, "mode": "enforced", "pool_id": 1},
    ("GET", "/polykv/capacity"): CAP,
    ("GET", "/polykv/pools/1/capacity"): {**CAP, "pool_id": 1},
    ("GET", "/polykv/tps"): {"aggregate_tps": 40.0, "sessions": []},
    ("POST", "/tokenize"): {"tokens": [1, 2, 3]},
    ("POST", "/apply-template"): {"prompt": "<|im_start|>system\nhi<|im_end|>\n"},
}

# (method, args, kwargs, expected (method, path, query, body), expected result)
CASES = [
    ("create_pool", (), {"messages": [{"role": "system", "content": "s"}], "tools": [{"type": "function"}]},
     ("POST", "/polykv/pools", {}, {"messages": [{"role": "system", "content": "s"}],
                                    "tools": [{"type": "function"}]}), CREATED),
    ("create_pool", (), {"tokens": [5, 6]}, ("POST", "/polykv/pools", {}, {"tokens": [5, 6]}), CREATED),
    ("create_pool", (), {"prompt": "p"}, ("POST", "/polykv/pools", {}, {"prompt": "p"}), CREATED),
    ("create_pool", (), {"from_session": "a7"}, ("POST", "/polykv/pools", {}, {"from_session": "a7"}), CREATED),
    ("fork_pool", (1,), {"tokens": [5, 6, 7], "branch_pos": 2},
     ("POST", "/polykv/pools/1/fork", {}, {"tokens": [5, 6, 7], "branch_pos": 2}), 2),
    ("pin", (1,), {}, ("POST", "/polykv/pools/1/pin", {}, {}), {"pool_id": 1, "ok": True}),
    ("unpin", (1,), {}, ("POST", "/polykv/pools/1/unpin", {}, {}), {"pool_id": 1, "ok": True}),
    ("evict", (1,), {}, ("POST", "/polykv/pools/1/evict", {}, {}), {"pool_id": 1, "ok": True}),
    ("flush", (1,), {}, ("POST", "/polykv/pools/1/flush", {}, {}), {"pool_id": 1, "ok": True, "ms": 2.0}),
    ("release_pool", (1,), {"recursive": True}, ("DELETE", "/polykv/pools/1", {"recursive": "true"}, None),
     {"pool_id": 1, "ok": True, "released": 2}),
    ("release_pool", (1,), {}, ("DELETE", "/polykv/pools/1", {}, None), {"pool_id": 1, "ok": True, "released": 2}),
    ("pools", (), {}, ("GET", "/polykv/pools", {}, None), TREE),
    ("pool_status", (1,), {}, ("GET", "/polykv/pools/1", {}, None), TREE),
    ("pool_status", (), {}, ("GET", "/polykv/pools", {}, None), TREE),
    ("admission", (), {}, ("GET", "/polykv/admission", {}, None), {"set": False, "mode": "advisory",
                                                                   "pool_id": None}),
    ("admission", (1,), {}, ("GET", "/polykv/pools/1/admission", {}, None),
     {"set": True, "mode": "enforced", "pool_id": 1}),
    ("set_admission", (1,), {"mode": "enforced", "target_tps_per_session": 5.0, "on_saturation": "reject"},
     ("POST", "/polykv/pools/1/admission", {}, {"mode": "enforced", "target_tps_per_session": 5.0,
                                                 "on_saturation": "reject"}),
     {"set": True, "mode": "enforced", "pool_id": 1}),
    ("capacity", (), {}, ("GET", "/polykv/capacity", {}, None), CAP),
    ("capacity", (1,), {"expected_tokens": 256, "session_id": "a1"},
     ("GET", "/polykv/pools/1/capacity", {"expected_tokens": "256", "session_id": "a1"}, None),
     {**CAP, "pool_id": 1}),
    ("tps", (), {}, ("GET", "/polykv/tps", {}, None), {"aggregate_tps": 40.0, "sessions": []}),
    ("tokenize", ("hello",), {"add_special": True},
     ("POST", "/tokenize", {}, {"content": "hello", "add_special": True, "with_pieces": False}), [1, 2, 3]),
    ("apply_template", ([{"role": "system", "content": "hi"}],), {},
     ("POST", "/apply-template", {}, {"messages": [{"role": "system", "content": "hi"}]}),
     "<|im_start|>system\nhi<|im_end|>\n"),
]


def _check(out, expected):
    if isinstance(expected, int) and not isinstance(expected, bool):
        assert out["pool_id"] == expected
    else:
        assert out == expected


@pytest.mark.parametrize("name,args,kwargs,req,expected", CASES, ids=[c[0] for c in CASES])
def test_sync_route(name, args, kwargs, req, expected):
    fake = Fake(ROUTES)
    with PolyKVClient("http://polykv", transport=fake.transport()) as c:
        out = getattr(c, name)(*args, **kwargs)
    assert fake.calls == [req]
    _check(out, expected)


@pytest.mark.parametrize("name,args,kwargs,req,expected", CASES, ids=[c[0] for c in CASES])
def test_async_route(name, args, kwargs, req, expected):
    fake = Fake(ROUTES)

    async def go():
        async with AsyncPolyKVClient("http://polykv", transport=fake.transport()) as c:
            return await getattr(c, name)(*args, **kwargs)

    _check(asyncio.run(go()), expected)
    assert fake.calls == [req]


def test_prefix_needs_exactly_one_source():
    c = PolyKVClient("http://polykv", transport=Fake(ROUTES).transport())
    with pytest.raises(ValueError):
        c.create_pool()
    with pytest.raises(ValueError):
        c.create_pool(prompt="a", tokens=[1])
    with pytest.raises(ValueError):
        c.create_pool(prompt="a", tools=[{}])


def test_errors_are_typed():
    fake = Fake({
        ("POST", "/polykv/pools/9/fork"): (404, err(404, "pool 9 not found")),
        ("POST", "/polykv/pools/1/fork"): (409, err(409, "the prefix differs from the parent at 17",
                                                    first_differing_position=17)),
        ("DELETE", "/polykv/pools/1"): (409, err(409, "pool 1 has children")),
        ("POST", "/polykv/pools"): (429, err(429, "all 16 pool ids are taken (--pools)")),
        ("GET", "/polykv/pools/1/capacity"): (400, err(400, "'expected_tokens' must be an integer >= 0")),
    })
    c = PolyKVClient("http://polykv", transport=fake.transport())
    with pytest.raises(PoolNotFoundError) as e:
        c.fork_pool(9, prompt="x")
    assert e.value.status == 404 and "pool 9" in e.value.message
    with pytest.raises(PoolConflictError) as e:
        c.fork_pool(1, prompt="x")
    assert e.value.first_differing_position == 17
    with pytest.raises(PoolConflictError) as e:
        c.release_pool(1)
    assert e.value.first_differing_position is None
    with pytest.raises(PoolSaturatedError) as e:
        c.create_pool(prompt="x")
    assert e.value.retry_after is None and e.value.capacity is None
    with pytest.raises(PolyKVError) as e:
        c.capacity(1)
    assert type(e.value) is PolyKVError and e.value.status == 400


def test_saturated_carries_retry_after_and_capacity():
    cap = {"can_admit": False, "reason": "projected mean tps below floor", "retry_after_s": 3.0}
    fake = Fake({("POST", "/polykv/pools"): (429, {**err(429, "saturated"), "capacity": cap}, {"Retry-After": "3"})})

    async def go():
        c = AsyncPolyKVClient("http://polykv", transport=fake.transport())
        await c.create_pool(prompt="x")

    with pytest.raises(PoolSaturatedError) as e:
        asyncio.run(go())
    assert e.value.retry_after == 3.0 and e.value.capacity == cap


def test_tps_stream_yields_snapshots():
    snaps = b"".join(b'data: {"ts": %d, "aggregate_tps": %d.5}\n\n' % (i, i) for i in range(3))
    fake = Fake({("GET", "/polykv/tps"): (200, b": comment\n\n" + snaps)})
    c = PolyKVClient("http://polykv", transport=fake.transport())
    got = list(c.tps_stream(interval_ms=100))
    assert [s["ts"] for s in got] == [0, 1, 2] and got[2]["aggregate_tps"] == 2.5
    assert fake.calls[0][2] == {"stream": "1", "interval_ms": "100"}

    async def go():
        ac = AsyncPolyKVClient("http://polykv", transport=Fake({("GET", "/polykv/tps"): (200, snaps)}).transport())
        return [s async for s in ac.tps_stream()]

    assert [s["ts"] for s in asyncio.run(go())] == [0, 1, 2]


def test_api_key_is_sent():
    fake = Fake(ROUTES)
    PolyKVClient("http://polykv", api_key="k1", transport=fake.transport()).tps()
    assert fake.headers[0]["authorization"] == "Bearer k1"
