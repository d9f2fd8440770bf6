/*
 * test_kvev.c - the block tracker (src/kvev/kvev.h) against a subscriber
 * that applies its events and a recount from scratch: after every flush,
 * the blocks the subscriber believes stored are exactly the chained
 * hashes of what the holders hold, computed here from docs/kv-events.md's
 * formula, each stored event's hashes chain from its parent over its own
 * tokens, nothing is stored twice or removed unknown.
 */
#include <msgpack.h>
#include <xxhash.h>
#include <zmq.h>

#include "test.h"
#include "../src/kvev/kvev.h"
#include "../src/kvev/kvev_pub.h"

static uint64_t rng = 0x6b76657674657374ull;

static uint32_t next_u32(void)   /* xorshift64* */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

#define BS 4
#define SEED 0x1234u
#define N_HOLD 12
#define MAX_TOK 96
#define MAX_SET 4096

/* docs/kv-events.md: hash[i] = XXH3_64(seed, le64(hash[i-1]) || le32 tokens), 0 -> 1 */
static uint64_t doc_hash(uint64_t parent, const int32_t *tok, int bs)
{
    uint8_t buf[8 + 4 * 64];
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(parent >> (8 * i));
    for (int j = 0; j < bs; j++)
        for (int i = 0; i < 4; i++) buf[8 + 4 * j + i] = (uint8_t)((uint32_t)tok[j] >> (8 * i));
    uint64_t h = XXH3_64bits_withSeed(buf, 8 + 4 * (size_t)bs, SEED);
    return h ? h : 1;
}

/* A set of (medium, hash). */
typedef struct set { uint64_t h[MAX_SET]; int m[MAX_SET]; int n; } set;

static int set_find(const set *s, int m, uint64_t h)
{
    for (int i = 0; i < s->n; i++)
        if (s->h[i] == h && s->m[i] == m) return i;
    return -1;
}

static bool set_add(set *s, int m, uint64_t h)
{
    if (set_find(s, m, h) >= 0 || s->n == MAX_SET) return false;
    s->h[s->n] = h;
    s->m[s->n++] = m;
    return true;
}

static bool set_del(set *s, int m, uint64_t h)
{
    int i = set_find(s, m, h);
    if (i < 0) return false;
    s->h[i] = s->h[--s->n];
    s->m[i] = s->m[s->n];
    return true;
}

/* Applies a flush's events to sub; false on an event a subscriber could
 * not make sense of. */
static bool apply(set *sub, const kvev_list *l)
{
    bool ok = true;
    for (int32_t i = 0; i < l->n_ev; i++) {
        const kvev_event *ev = &l->ev[i];
        if (ev->kind == KVEV_CLEARED) {
            sub->n = 0;
            continue;
        }
        if (ev->kind == KVEV_STORED) {
            if (ev->n_tok != ev->n_hash * l->block_size) ok = false;
            uint64_t parent = ev->has_parent ? ev->parent : 0;
            for (int32_t k = 0; k < ev->n_hash; k++) {
                uint64_t h = doc_hash(parent, l->tok + ev->t0 + k * l->block_size, l->block_size);
                if (h != l->hash[ev->h0 + k]) ok = false;
                if (!set_add(sub, ev->medium, h)) ok = false;
                parent = h;
            }
        } else {
            for (int32_t k = 0; k < ev->n_hash; k++)
                if (!set_del(sub, ev->medium, l->hash[ev->h0 + k])) ok = false;
        }
    }
    return ok;
}

typedef struct holder { int32_t tok[MAX_TOK]; int32_t n; int m; } holder;

static void truth(const holder *hs, int n_hold, set *out)
{
    out->n = 0;
    for (int h = 0; h < n_hold; h++) {
        uint64_t parent = 0;
        for (int b = 0; (b + 1) * BS <= hs[h].n; b++) {
            parent = doc_hash(parent, hs[h].tok + b * BS, BS);
            set_add(out, hs[h].m, parent);
        }
    }
}

static bool same_sets(const set *a, const set *b)
{
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (set_find(b, a->m[i], a->h[i]) < 0) return false;
    return true;
}

static void test_shared_once(void)
{
    kvev_tracker *t;
    CHECK_EQ_INT(kvev_new(BS, 4, SEED, &t), PK_OK);
    int32_t a[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    kvev_list l;

    /* A new tracker's first batch: a clear, nothing else. */
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK(l.n_ev == 1 && l.ev[0].kind == KVEV_CLEARED);

    /* One holder of 10 tokens: one run of 2 blocks, no parent, 8 tokens. */
    CHECK_EQ_INT(kvev_hold(t, 0, KVEV_GPU, a, 10, 0), PK_OK);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK_EQ_INT(l.n_ev, 1);
    CHECK(l.ev[0].kind == KVEV_STORED && !l.ev[0].has_parent && l.ev[0].n_hash == 2 && l.ev[0].n_tok == 8);
    CHECK(l.hash[1] == doc_hash(doc_hash(0, a, BS), a + 4, BS));

    /* A second holder of the same prefix stores nothing; its third block
     * is a run whose parent is the second. */
    int32_t b[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44, 45 };
    CHECK_EQ_INT(kvev_hold(t, 1, KVEV_GPU, b, 12, 0), PK_OK);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK_EQ_INT(l.n_ev, 1);
    CHECK(l.ev[0].has_parent && l.ev[0].parent == doc_hash(doc_hash(0, a, BS), a + 4, BS) && l.ev[0].n_hash == 1);
    CHECK_EQ_INT(kvev_blocks(t, KVEV_GPU), 3);

    /* One of two holders letting go removes nothing. */
    kvev_release(t, 0);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK_EQ_INT(l.n_ev, 0);

    /* Let go and taken again in one step: no event. */
    kvev_release(t, 1);
    CHECK_EQ_INT(kvev_hold(t, 2, KVEV_GPU, b, 12, 0), PK_OK);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK_EQ_INT(l.n_ev, 0);

    /* The RAM tier: the same blocks in CPU are stored there too. */
    CHECK_EQ_INT(kvev_hold(t, 3, KVEV_CPU, a, 8, 0), PK_OK);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK(l.n_ev == 1 && l.ev[0].medium == KVEV_CPU && l.ev[0].n_hash == 2);
    kvev_medium med;
    CHECK_EQ_INT(kvev_match(t, b, 12, &med), 3);
    CHECK(med == KVEV_GPU);

    /* Every block leaves: removals per medium. */
    kvev_clear(t);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK_EQ_INT(l.n_ev, 2);
    CHECK(l.ev[0].kind == KVEV_REMOVED && l.ev[0].medium == KVEV_GPU && l.ev[0].n_hash == 3);
    CHECK(l.ev[1].kind == KVEV_REMOVED && l.ev[1].medium == KVEV_CPU && l.ev[1].n_hash == 2);
    CHECK_EQ_INT(kvev_blocks(t, KVEV_GPU) + kvev_blocks(t, KVEV_CPU), 0);
    CHECK(kvev_check(t));
    kvev_free(t);
}

/* Random holders over a few shared stems: append, cut, replace, move to
 * the other medium, release, clear; flushes between 1 and 3 changes. */
static void test_random(int rounds)
{
    kvev_tracker *t;
    CHECK_EQ_INT(kvev_new(BS, N_HOLD, SEED, &t), PK_OK);
    static holder hs[N_HOLD];
    static set sub, want;
    int32_t stem[3][MAX_TOK];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < MAX_TOK; i++) stem[s][i] = (int32_t)(next_u32() % 50);
    memset(hs, 0, sizeof hs);
    sub.n = 0;
    int bad_events = 0, bad_sets = 0, bad_check = 0, n_events = 0;
    for (int r = 0; r < rounds; r++) {
        int n_ops = 1 + (int)(next_u32() % 3);
        for (int k = 0; k < n_ops; k++) {
            int h = (int)(next_u32() % N_HOLD), op = (int)(next_u32() % 12);
            holder *H = &hs[h];
            int32_t same = H->n;
            if (op < 4 && H->n < MAX_TOK) {                       /* append (often a stem's next) */
                int add = 1 + (int)(next_u32() % (MAX_TOK - H->n));
                int s = h % 3;
                for (int i = 0; i < add; i++) {
                    int32_t p = H->n + i;
                    H->tok[p] = next_u32() % 4 ? stem[s][p] : (int32_t)(next_u32() % 50);
                }
                H->n += add;
            } else if (op < 6) {                                   /* cut */
                H->n = H->n ? (int32_t)(next_u32() % (uint32_t)H->n) : 0;
                same = H->n;
            } else if (op < 8) {                                   /* replaced by another stem's prefix */
                int s = (int)(next_u32() % 3);
                int32_t n = (int32_t)(next_u32() % MAX_TOK), c = 0;
                while (c < n && c < H->n && H->tok[c] == stem[s][c]) c++;
                memcpy(H->tok, stem[s], (size_t)n * sizeof *H->tok);
                H->n = n;
                same = next_u32() % 2 ? c : 0;                     /* exact or conservative */
            } else if (op < 9) {                                   /* to the other medium */
                H->m ^= 1;
            } else if (op < 11) {                                  /* released */
                H->n = 0;
                same = 0;
            } else if (next_u32() % 8 == 0) {                     /* everything goes */
                kvev_clear(t);
                for (int i = 0; i < N_HOLD; i++) hs[i].n = 0;
                continue;
            } else continue;
            if (H->n) CHECK_EQ_INT(kvev_hold(t, h, (kvev_medium)H->m, H->tok, H->n, same), PK_OK);
            else kvev_release(t, h);
            if (kvev_holder_blocks(t, h) != H->n / BS) bad_check++;
            if (!kvev_check(t)) bad_check++;
        }
        kvev_list l;
        CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
        n_events += l.n_ev;
        if (!apply(&sub, &l)) bad_events++;
        truth(hs, N_HOLD, &want);
        if (!same_sets(&sub, &want)) bad_sets++;
        if (kvev_blocks(t, KVEV_GPU) + kvev_blocks(t, KVEV_CPU) != want.n) bad_sets++;
        if (!kvev_check(t)) bad_check++;
    }
    CHECK_EQ_INT(bad_events, 0);
    CHECK_EQ_INT(bad_sets, 0);
    CHECK_EQ_INT(bad_check, 0);
    CHECK(n_events > rounds / 2);      /* the walk did change things */
    kvev_free(t);
}

/* A bigger table than the first allocation: growth keeps every entry
 * findable and every count. */
static void test_growth(void)
{
    kvev_tracker *t;
    CHECK_EQ_INT(kvev_new(1, 2, SEED, &t), PK_OK);
    enum { N = 5000 };
    int32_t *tok = malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)next_u32();
    CHECK_EQ_INT(kvev_hold(t, 0, KVEV_GPU, tok, N, 0), PK_OK);
    CHECK_EQ_INT(kvev_hold(t, 1, KVEV_GPU, tok, N / 2, 0), PK_OK);
    kvev_list l;
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK(l.n_ev == 2 && l.ev[0].kind == KVEV_CLEARED && l.ev[1].n_hash == N);
    CHECK(kvev_check(t));
    kvev_medium m;
    CHECK_EQ_INT(kvev_match(t, tok, N, &m), N);
    CHECK_EQ_INT(kvev_hold(t, 0, KVEV_GPU, tok, 10, 10), PK_OK);
    CHECK_EQ_INT(kvev_flush(t, &l), PK_OK);
    CHECK(l.n_ev == 1 && l.ev[0].kind == KVEV_REMOVED && l.ev[0].n_hash == N - N / 2);
    CHECK(kvev_check(t));
    CHECK_EQ_INT(kvev_blocks(t, KVEV_GPU), N / 2);
    free(tok);
    kvev_free(t);
}

/* ---- the encoding ---- */

static const msgpack_object *at(const msgpack_object *o, uint32_t i)
{
    return o->type == MSGPACK_OBJECT_ARRAY && i < o->via.array.size ? &o->via.array.ptr[i] : NULL;
}

static bool is_str(const msgpack_object *o, const char *s)
{
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, strlen(s));
}

static const msgpack_object *field(const msgpack_object *o, const char *k)
{
    if (!o || o->type != MSGPACK_OBJECT_MAP) return NULL;
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (is_str(&o->via.map.ptr[i].key, k)) return &o->via.map.ptr[i].val;
    return NULL;
}

/* One batch of each kind, decoded by msgpack-c: vLLM's fields in order
 * (arrays) or by name (maps); every hash a full 64-bit integer (0xcf),
 * the one form llm-d's adapter reads, even a small one. */
static void test_encode(void)
{
    uint64_t hash[] = { 5, 0xfedcba9876543210ull, 9 };
    int32_t tok[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    kvev_event ev[] = { { .kind = KVEV_STORED, .medium = KVEV_CPU, .h0 = 0, .n_hash = 2, .has_parent = true,
                          .parent = 7, .t0 = 0, .n_tok = 8 },
                        { .kind = KVEV_REMOVED, .medium = KVEV_GPU, .h0 = 2, .n_hash = 1 },
                        { .kind = KVEV_CLEARED } };
    kvev_list l = { .ev = ev, .n_ev = 3, .hash = hash, .tok = tok, .block_size = 4 };
    for (int tagged = 0; tagged < 2; tagged++) {
        uint8_t *p;
        size_t n;
        CHECK_EQ_INT(kvev_encode(&l, 1700000000123, tagged, -1, &p, &n), PK_OK);
        static const uint8_t five[] = { 0xcf, 0, 0, 0, 0, 0, 0, 0, 5 }, seven[] = { 0xcf, 0, 0, 0, 0, 0, 0, 0, 7 };
        CHECK(memmem(p, n, five, sizeof five) && memmem(p, n, seven, sizeof seven));
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CHECK(msgpack_unpack_next(&u, (const char *)p, n, &off) == MSGPACK_UNPACK_SUCCESS && off == n);
        const msgpack_object *root = &u.data, *evs = at(root, 1);
        CHECK(root->type == MSGPACK_OBJECT_ARRAY && root->via.array.size == 3);
        CHECK(at(root, 0) && at(root, 0)->type == MSGPACK_OBJECT_FLOAT64 && fabs(at(root, 0)->via.f64 - 1700000000.123) < 1e-6);
        CHECK(at(root, 2) && at(root, 2)->type == MSGPACK_OBJECT_NIL);
        CHECK(evs && evs->via.array.size == 3);
        const msgpack_object *st = at(evs, 0), *rm = at(evs, 1), *cl = at(evs, 2);
        const msgpack_object *hs, *parent, *toks, *bs, *medium;
        if (tagged) {
            CHECK(is_str(field(st, "type"), "BlockStored") && is_str(field(rm, "type"), "BlockRemoved") &&
                  is_str(field(cl, "type"), "AllBlocksCleared"));
            hs = field(st, "block_hashes"), parent = field(st, "parent_block_hash"), toks = field(st, "token_ids");
            bs = field(st, "block_size"), medium = field(st, "medium");
            CHECK(field(st, "lora_id") && field(st, "lora_id")->type == MSGPACK_OBJECT_NIL);
            CHECK(is_str(field(rm, "medium"), "GPU") && field(rm, "block_hashes")->via.array.ptr[0].via.u64 == 9);
        } else {
            CHECK(is_str(at(st, 0), "BlockStored") && st->via.array.size == 8 && is_str(at(rm, 0), "BlockRemoved") &&
                  rm->via.array.size == 3 && is_str(at(cl, 0), "AllBlocksCleared") && cl->via.array.size == 1);
            hs = at(st, 1), parent = at(st, 2), toks = at(st, 3), bs = at(st, 4), medium = at(st, 6);
            CHECK(at(st, 5)->type == MSGPACK_OBJECT_NIL && at(st, 7)->type == MSGPACK_OBJECT_NIL);
            CHECK(is_str(at(rm, 2), "GPU") && at(at(rm, 1), 0)->via.u64 == 9);
        }
        CHECK(hs && hs->via.array.size == 2 && hs->via.array.ptr[0].via.u64 == 5 &&
              hs->via.array.ptr[1].via.u64 == 0xfedcba9876543210ull);
        CHECK(parent && parent->type == MSGPACK_OBJECT_POSITIVE_INTEGER && parent->via.u64 == 7);
        CHECK(toks && toks->via.array.size == 8 && toks->via.array.ptr[7].via.u64 == 8);
        CHECK(bs && bs->via.u64 == 4 && is_str(medium, "CPU"));
        msgpack_unpacked_destroy(&u);
        free(p);
    }
}

/* ---- the publisher ---- */

static uint64_t be64(const void *p)
{
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    return v;
}

/* A real subscriber (libzmq SUB) and a replay client (DEALER): batches
 * arrive as topic | seq | payload with increasing numbers, the missing
 * numbers are exactly the drops counted, and a replay from the middle
 * returns the kept batches the subscriber saw, byte for byte, then -1. */
static void test_publisher(void)
{
    char ep[128], rep[128];
    snprintf(ep, sizeof ep, "ipc:///tmp/polykv-test-kvev-%d", (int)getpid());
    snprintf(rep, sizeof rep, "ipc:///tmp/polykv-test-kvev-replay-%d", (int)getpid());
    kvev_pub_config c = kvev_pub_default();
    snprintf(c.endpoint, sizeof c.endpoint, "%s", ep);
    snprintf(c.replay_endpoint, sizeof c.replay_endpoint, "%s", rep);
    snprintf(c.topic, sizeof c.topic, "kv@test@model");
    c.max_queue = 8;                    /* a flood drops some, unless the thread keeps up */
    c.buffer_steps = 100000;
    char why[256];
    kvev_pub *p;
    CHECK_EQ_INT(kvev_pub_new(&c, &p, why, sizeof why), PK_OK);
    void *zctx = zmq_ctx_new(), *sub = zmq_socket(zctx, ZMQ_SUB);
    int hwm = 0, ms = 2000;
    zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &ms, sizeof ms);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
    zmq_connect(sub, ep);

    uint64_t hash[1] = { 42 };
    int32_t tok[4] = { 1, 2, 3, 4 };
    kvev_event ev = { .kind = KVEV_STORED, .n_hash = 1, .n_tok = 4 };
    kvev_list l = { .ev = &ev, .n_ev = 1, .hash = hash, .tok = tok, .block_size = 4 };
    /* The subscription reaches the publisher: send until one arrives. */
    int64_t first = -1;
    char buf[4096];
    for (int i = 0; i < 200 && first < 0; i++) {
        kvev_pub_send(p, &l, 1);
        ms = 10;
        zmq_setsockopt(sub, ZMQ_RCVTIMEO, &ms, sizeof ms);
        if (zmq_recv(sub, buf, sizeof buf, 0) > 0) {        /* topic */
            zmq_recv(sub, buf, sizeof buf, 0);
            first = (int64_t)be64(buf);
            zmq_recv(sub, buf, sizeof buf, 0);
        }
    }
    CHECK(first >= 0);
    enum { FLOOD = 3000 };
    for (int i = 0; i < FLOOD; i++) kvev_pub_send(p, &l, 1);
    kvev_pub_stats s;
    kvev_pub_stats_get(p, &s);
    uint64_t last_sent = s.batches - 1;
    static uint8_t seen[FLOOD + 2000];
    int64_t prev = first, n_got = 0, bad_order = 0;
    ms = 1000;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &ms, sizeof ms);
    while (zmq_recv(sub, buf, sizeof buf, 0) > 0) {
        CHECK(zmq_recv(sub, buf, sizeof buf, 0) == 8);
        int64_t seq = (int64_t)be64(buf);
        int n = zmq_recv(sub, buf, sizeof buf, 0);
        bad_order += seq <= prev || n <= 0;
        prev = seq;
        if (seq < (int64_t)sizeof seen) seen[seq] = 1;
        n_got++;
        if ((uint64_t)seq == last_sent) break;
    }
    kvev_pub_stats_get(p, &s);
    uint64_t s_dropped_flood = s.dropped;
    int64_t missing = 0;
    for (int64_t q = first + 1; q <= (int64_t)last_sent; q++) missing += !seen[q];
    CHECK_EQ_INT(bad_order, 0);
    /* Every number after the first seen is a batch received or a drop
     * counted (the drops before it were the handshake's). */
    CHECK(missing <= (int64_t)s.dropped && n_got + missing == (int64_t)(last_sent - first));
    if (s.dropped == 0) SKIP_PART("publisher: its thread kept up with a flood of %d batches, no drop to count", FLOOD);
    else printf("publisher: %d batches flooded through a queue of 8: %lld received, %llu dropped, every gap one of them\n",
                FLOOD, (long long)n_got, (unsigned long long)s.dropped);

    /* Then 1500 batches at a pace the thread keeps (more than a ROUTER's
     * default high-water mark of 1000), which a replay returns whole. */
    uint64_t steady0 = s.batches;
    for (int i = 0; i < 1500; i++) {
        kvev_pub_send(p, &l, 1);
        usleep(200);
    }
    /* A replay answers with what the thread has forwarded: wait until it
     * has taken every batch queued (a loaded machine leaves some queued). */
    for (int i = 0; i < 20000; i++) {
        kvev_pub_stats_get(p, &s);
        if (s.forwarded + s.dropped >= s.batches) break;
        usleep(1000);
    }
    CHECK(s.forwarded + s.dropped == s.batches);
    last_sent = s.batches - 1;
    for (uint64_t q = steady0; q <= last_sent && q < sizeof seen; q++) seen[q] = 1;
    uint64_t dropped_steady = s.dropped;

    /* Replay from the middle of the flood. */
    void *d = zmq_socket(zctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &ms, sizeof ms);
    zmq_connect(d, rep);
    uint8_t start[8];
    uint64_t from = (uint64_t)first + (last_sent - (uint64_t)first) / 2;
    for (int i = 0; i < 8; i++) start[i] = (uint8_t)(from >> (56 - 8 * i));
    zmq_send(d, "", 0, ZMQ_SNDMORE);
    zmq_send(d, start, 8, 0);
    int64_t n_replayed = 0, replay_bad = 0;
    for (;;) {
        if (zmq_recv(d, buf, sizeof buf, 0) != 0) { replay_bad++; break; }
        if (zmq_recv(d, buf, sizeof buf, 0) != 8) { replay_bad++; break; }
        uint64_t seq = be64(buf);
        int n = zmq_recv(d, buf, sizeof buf, 0);
        if (seq == UINT64_MAX) {
            replay_bad += n != 0;
            break;
        }
        replay_bad += seq < from || seq > last_sent || !seen[seq] || n <= 0;
        n_replayed++;
    }
    int64_t want = 0;
    for (uint64_t q = from; q <= last_sent; q++) want += seen[q];
    want -= (int64_t)(dropped_steady - s_dropped_flood);   /* any steady batch dropped after all */
    CHECK_EQ_INT(replay_bad, 0);
    CHECK_EQ_INT(n_replayed, want);
    CHECK(n_replayed >= 1000);
    kvev_pub_stats_get(p, &s);
    CHECK_EQ_INT(s.replays, 1);
    zmq_close(d);
    zmq_close(sub);
    zmq_ctx_term(zctx);
    kvev_pub_free(p);
    unlink(ep + 6);
    unlink(rep + 6);
}

/* --kv-events-config: vLLM's fields, its default of off, refusals. */
static void test_config(void)
{
    kvev_pub_config c = kvev_pub_default();
    bool on;
    char why[256];
    CHECK_EQ_INT(kvev_pub_parse("{\"endpoint\": \"tcp://*:6000\", \"topic\": \"kv@a@b\"}", &c, &on, why, sizeof why), PK_OK);
    CHECK(!on && !strcmp(c.endpoint, "tcp://*:6000") && !strcmp(c.topic, "kv@a@b"));
    CHECK_EQ_INT(kvev_pub_parse("{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"buffer_steps\": 5, "
                                "\"replay_endpoint\": \"tcp://*:6001\", \"encoding\": \"tagged\"}", &c, &on, why, sizeof why),
                 PK_OK);
    CHECK(on && c.buffer_steps == 5 && c.tagged && !strcmp(c.replay_endpoint, "tcp://*:6001"));
    CHECK_EQ_INT(kvev_pub_parse("{\"enable_kv_cache_events\": true, \"publisher\": \"null\"}", &c, &on, why, sizeof why), PK_OK);
    CHECK(!on);
    CHECK_EQ_INT(kvev_pub_parse("{\"enable_kv_cache_events\": true, \"publisher\": \"kafka\"}", &c, &on, why, sizeof why),
                 PK_EINVAL);
    CHECK_EQ_INT(kvev_pub_parse("{\"hwm\": -1}", &c, &on, why, sizeof why), PK_EINVAL);
    CHECK_EQ_INT(kvev_pub_parse("{\"nope\": 1}", &c, &on, why, sizeof why), PK_EINVAL);
    CHECK(strstr(why, "nope") != NULL);
    CHECK_EQ_INT(kvev_pub_parse("[1]", &c, &on, why, sizeof why), PK_EINVAL);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_shared_once);
    TEST_RUN(test_random, 3000);
    TEST_RUN(test_growth);
    TEST_RUN(test_encode);
    TEST_RUN(test_publisher);
    TEST_RUN(test_config);
    return test_finish();
}
