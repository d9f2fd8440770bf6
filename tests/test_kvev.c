/*
 * test_kvev.c - the block tracker (src/kvev/kvev.h) against a subscriber
 * that applies its events and a recount from scratch: after every flush,
 * the blocks the subscriber believes stored are exactly the chained
 * hashes of what the holders hold, computed here from docs/kv-events.md's
 * formula, each stored event's hashes chain from its parent over its own
 * tokens, nothing is stored twice or removed unknown.
 */
#include <xxhash.h>

#include "test.h"
#include "../src/kvev/kvev.h"

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

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_shared_once);
    TEST_RUN(test_random, 3000);
    TEST_RUN(test_growth);
    return test_finish();
}
