"""KV events against an independent subscriber (docs/kv-events.md).

A subscriber written from vLLM's wire format with pyzmq and msgpack (no
polykv code) follows a polykv serving stories260K through shared prefixes,
a pool, cache pressure that parks histories and spills them to the RAM
tier, and erases.  After each phase, for every probe token list, the
blocks the subscriber's index matches (walking the chain by parent and
token content, as llm-d's indexer does) equal what /polykv/lookup says
the replica could reuse; sequence numbers have no gap; the replay socket
returns the batches the live socket sent, byte for byte.  Both encodings:
msgspec's positional arrays (the default, what llm-d decodes) and maps
tagged with "type".
"""
import contextlib
import os
import random
import re
import socket
import subprocess
import threading
import time

import msgpack
import pytest
import requests
import zmq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.environ.get("POLYKV_SHARED") or os.path.join(ROOT, "..", "shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
BIN = os.environ.get("POLYKV_BIN") or os.path.join(ROOT, "build", "polykv")
BS = 16
STORED = ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"]
REMOVED = ["type", "block_hashes", "medium"]


def as_map(ev, encoding):
    """An event as a map: tagged events are; positional ones name their
    fields in vLLM's order (tag first, trailing defaults may be absent)."""
    if encoding == "tagged":
        assert isinstance(ev, dict), ev
        return ev
    assert isinstance(ev, list) and ev and isinstance(ev[0], str), ev
    names = {"BlockStored": STORED, "BlockRemoved": REMOVED}.get(ev[0], ["type"])
    assert len(ev) <= len(names), ev
    return {k: (ev[i] if i < len(ev) else None) for i, k in enumerate(names)}

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"KV events: {MODEL} absent")


def free_port():
    """A free port below the kernel's ephemeral range, so the server's own
    --port 0 cannot be given the same one before polykv binds it."""
    lo, _ = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    rnd = random.Random()
    while True:
        port = rnd.randrange(max(lo - 12000, 1024), lo)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
                return port
            except OSError:
                continue


class Index:
    """What a router knows of one replica, from its events alone."""

    def __init__(self, encoding):
        self.encoding = encoding
        self.key = {}                       # (parent hash or None, block tokens) -> hash
        self.held = {"GPU": set(), "CPU": set()}
        self.n_stored = self.n_removed = self.n_cleared = 0

    def apply(self, payload):
        batch = msgpack.unpackb(payload, raw=False)
        assert isinstance(batch, list) and len(batch) == 3 and batch[2] is None, batch
        ts, events = batch[0], batch[1]
        assert isinstance(ts, float) and abs(ts - time.time()) < 600
        for ev in events:
            ev = as_map(ev, self.encoding)
            kind = ev["type"]
            if kind == "BlockStored":
                assert ev["block_size"] == BS and ev["lora_id"] is None
                toks, hashes = ev["token_ids"], ev["block_hashes"]
                assert len(toks) == BS * len(hashes)
                parent = ev["parent_block_hash"]
                for i, h in enumerate(hashes):
                    self.key[(parent, tuple(toks[i * BS:(i + 1) * BS]))] = h
                    assert h not in self.held[ev["medium"]], "stored twice"
                    self.held[ev["medium"]].add(h)
                    parent = h
                self.n_stored += len(hashes)
            elif kind == "BlockRemoved":
                for h in ev["block_hashes"]:
                    assert h in self.held[ev["medium"]], "removed a block never stored"
                    self.held[ev["medium"]].discard(h)
                self.n_removed += len(ev["block_hashes"])
            elif kind == "AllBlocksCleared":
                self.held = {"GPU": set(), "CPU": set()}
                self.n_cleared += 1
            else:
                raise AssertionError(f"unknown event {kind}")

    def match(self, tokens):
        parent, k, medium = None, 0, None
        while (k + 1) * BS <= len(tokens):
            h = self.key.get((parent, tuple(tokens[k * BS:(k + 1) * BS])))
            if h is None or not (h in self.held["GPU"] or h in self.held["CPU"]):
                break
            medium = "GPU" if h in self.held["GPU"] else "CPU"
            parent, k = h, k + 1
        return k, medium


class Subscriber(threading.Thread):
    def __init__(self, ctx, endpoint, encoding):
        super().__init__(daemon=True)
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sock.setsockopt(zmq.RCVTIMEO, 100)
        self.sock.connect(endpoint)
        self.batches = {}                   # seq -> (topic, payload)
        self.index = Index(encoding)
        self.lock = threading.Lock()
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                topic, seq, payload = self.sock.recv_multipart()
            except zmq.Again:
                continue
            with self.lock:
                n = int.from_bytes(seq, "big")
                assert n not in self.batches
                self.batches[n] = (topic, payload)
                self.index.apply(payload)


@contextlib.contextmanager
def polykv(args, env=None):
    """A polykv serving stories260K with args, until the block ends: its
    URL, once /health answers.  Its output is kept, and shown when it does
    not start or when it exits before the block ends."""
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"{BIN} is not built")
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", "0", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    base, lines, t0 = None, [], time.monotonic()
    while time.monotonic() - t0 < 30 and base is None:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        base = m.group(1) if m else None
    if base is None:
        p.kill()
        pytest.fail("polykv serve did not start:\n" + "".join(lines))
    threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
    while time.monotonic() - t0 < 30 and p.poll() is None:
        try:
            if requests.get(base + "/health").status_code == 200:
                break
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    if p.poll() is not None:
        pytest.fail("polykv serve exited:\n" + "".join(lines))
    try:
        yield base
    finally:
        died = p.poll()
        p.terminate()
        p.wait(10)
    assert died is None, f"polykv serve exited ({died}) during the tests:\n" + "".join(lines[-40:])


@pytest.fixture(scope="module", params=["array", "tagged"])
def server(request):
    pub, rep = free_port(), free_port()
    # 2 slots of 192 positions and a small RAM tier: pressure parks and
    # spills histories within a few requests.
    with polykv(["-np", "2", "-c", "384", "-t", "1", "--metrics", "--cache-ram", "64",
                 "--kv-events-endpoint", f"tcp://*:{pub}", "--kv-events-replay-endpoint", f"tcp://*:{rep}",
                 "--kv-events-topic", "kv@replica-a@stories", "--kv-events-encoding", request.param]) as base:
        yield base, f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{rep}", request.param


def metric(base, name):
    text = requests.get(base + "/metrics").text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1))


def settle(base, sub):
    """Waits until the subscriber holds every batch numbered so far."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        n = int(metric(base, "polykv:kv_events_batches_total"))
        with sub.lock:
            if n == 0 or (n - 1) in sub.batches:
                return n
        time.sleep(0.02)
    raise AssertionError("the subscriber never caught up")


def lookup(base, tokens):
    r = requests.post(base + "/polykv/lookup", json={"tokens": tokens})
    assert r.status_code == 200, r.text
    return r.json()


def complete(base, tokens, n=8, **extra):
    r = requests.post(base + "/completion", json={"prompt": tokens, "n_predict": n, "temperature": 0,
                                                  "cache_prompt": True, **extra})
    assert r.status_code == 200, r.text


def test_events_follow_the_cache(server):
    base, pub_ep, rep_ep, encoding = server
    ctx = zmq.Context()
    sub = Subscriber(ctx, pub_ep, encoding)
    sub.start()
    time.sleep(0.5)                          # the subscription reaches the publisher
    rng = random.Random(7)
    tok = lambda n: [1] + [rng.randrange(3, 500) for _ in range(n - 1)]
    probes, checked, mismatches, seen_cpu = [], 0, [], False

    def check(phase):
        nonlocal checked, seen_cpu
        settle(base, sub)
        for p in probes:
            want = lookup(base, p)
            with sub.lock:
                got, medium = sub.index.match(p)
            checked += 1
            if got != want["n_blocks"] or (got and medium != want["medium"]):
                mismatches.append((phase, len(p), got, medium, want))
            seen_cpu |= got > 0 and medium == "CPU"

    # 1. Two sessions on one shared prefix, and a continuation.
    shared = tok(40)
    a, b = shared + tok(30)[1:], shared + tok(25)[1:]
    complete(base, a)
    complete(base, b)
    probes += [a, b, shared, a[:20], tok(50)]
    check("shared")
    complete(base, a + tok(20)[1:])
    check("continued")

    # 2. A pool and a request attached to it.
    prefix = tok(48)
    r = requests.post(base + "/polykv/pools", json={"tokens": prefix})
    assert r.status_code == 201, r.text
    pool_id = r.json()["pool_id"]
    complete(base, prefix + tok(12)[1:], pool_id=pool_id)
    probes += [prefix, prefix + tok(12)[1:]]
    check("pool")

    # 3. Pressure: longer prompts than the slots hold together park and
    # spill earlier histories to the RAM tier.
    for _ in range(6):
        p = tok(120)
        complete(base, p, n=16)
        probes.append(p)
        check("pressure")

    # 4. Erased slots and a released pool leave within a second.
    for slot in (0, 1):
        requests.post(base + f"/slots/{slot}?action=erase")
    assert requests.delete(base + f"/polykv/pools/{pool_id}").status_code == 200
    t0 = time.monotonic()
    check("erased")
    assert time.monotonic() - t0 < 1.5
    assert all(lookup(base, p)["where"] != "pool" for p in probes)

    assert checked >= 60 and not mismatches, mismatches[:5]
    assert seen_cpu, "no probe matched in the RAM tier"
    with sub.lock:
        assert sub.index.n_removed > 0 and sub.index.n_stored > 0 and sub.index.n_cleared == 1
        seqs = sorted(sub.batches)
    n = settle(base, sub)
    assert seqs == list(range(n)), "a gap in the sequence numbers"
    assert metric(base, "polykv:kv_events_dropped_total") == 0

    # Replay from the middle: the same batches, byte for byte, then the end.
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 3000)
    dealer.connect(rep_ep)
    start = n // 2
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    got = []
    while True:
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        s = int.from_bytes(seq, "big", signed=True)
        if s == -1:
            assert payload == b""
            break
        got.append((s, payload))
    assert [s for s, _ in got] == list(range(start, n))
    with sub.lock:
        assert all(sub.batches[s][1] == p and sub.batches[s][0] == b"kv@replica-a@stories" for s, p in got)
    sub.stop = True
    sub.join(2)
    dealer.close(0)
    sub.sock.close(0)
    ctx.term()


def test_lookup_refuses_bad_input(server):
    base = server[0]
    assert requests.post(base + "/polykv/lookup", json={}).status_code == 400
    assert requests.post(base + "/polykv/lookup", json={"tokens": [1, -4]}).status_code == 400
    assert requests.post(base + "/polykv/lookup", json={"tokens": "x"}).status_code == 400
    r = requests.post(base + "/polykv/lookup", json={"prompt": "Once upon a time"})
    assert r.status_code == 200 and r.json()["n_tokens"] > 0


def test_default_topic_is_llm_d_s():
    """Without --kv-events-topic: kv@$POD_IP:port@<model>, the replica's
    name in /metrics and /polykv/pools too."""
    pub = free_port()
    with polykv(["-np", "1", "-c", "256", "-t", "1", "--metrics", "--kv-events-config",
                 f'{{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:{pub}"}}'],
                env=dict(os.environ, POD_IP="10.1.2.3")) as base:
        port = int(base.rsplit(":", 1)[1])
        ctx = zmq.Context()
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.setsockopt(zmq.RCVTIMEO, 200)
        s.connect(f"tcp://127.0.0.1:{pub}")
        topic = None
        for i in range(50):                  # until the subscription has reached the publisher:
            complete(base, [1, 300 + i] + list(range(10, 50)), n=1)   # new blocks each time
            try:
                topic = s.recv_multipart()[0]
                break
            except zmq.Again:
                pass
        assert topic == f"kv@10.1.2.3:{port}@stories260K.gguf".encode()
        assert f'polykv:replica_info{{replica="10.1.2.3:{port}",model_name="stories260K.gguf"}} 1' in \
            requests.get(base + "/metrics").text
        assert requests.get(base + "/polykv/pools").json()["replica"] == f"10.1.2.3:{port}"
        s.close(0)
        ctx.term()


def test_sleep_removes_every_block():
    """--sleep-idle-seconds: the cache goes, and with it every block; after
    waking, new blocks are stored again."""
    pub = free_port()
    with polykv(["-np", "2", "-c", "512", "-t", "1", "--metrics", "--sleep-idle-seconds", "1",
                 "--kv-events-endpoint", f"tcp://*:{pub}"]) as base:
        ctx = zmq.Context()
        sub = Subscriber(ctx, f"tcp://127.0.0.1:{pub}", "array")
        sub.start()
        time.sleep(0.5)
        prompt = [1] + list(range(20, 60))
        complete(base, prompt, n=4)
        settle(base, sub)
        with sub.lock:
            assert sub.index.match(prompt)[0] == 2
        t0 = time.monotonic()
        while not requests.get(base + "/props").json().get("is_sleeping"):
            assert time.monotonic() - t0 < 10, "never slept"
            time.sleep(0.1)
        settle(base, sub)
        with sub.lock:
            assert sub.index.match(prompt)[0] == 0 and not sub.index.held["GPU"] and sub.index.n_removed >= 2
        complete(base, prompt, n=4)                  # wakes, reads the prompt again
        settle(base, sub)
        with sub.lock:
            assert sub.index.match(prompt)[0] == 2
        assert lookup(base, prompt)["n_blocks"] == 2
        sub.stop = True
        sub.join(2)
        sub.sock.close(0)
        ctx.term()
