/*
 * test_placement.c - the cache-aware placement and retention scenarios of
 * the placement issue, run through the real engine on a small ChatML model
 * (rand-qwen2: <|im_start|> turn markers), lengths scaled to CI (1-3K):
 *   - park: one slot, conversation A, a side request, A's next turn reuses
 *     all but its new tokens, and its greedy output is unchanged;
 *   - alternation: two conversations taking turns on 4 slots past their
 *     protection each reuse all but their new tokens;
 *   - rewritten transcripts: 6 queries rewriting the end of one transcript
 *     hold one history and do not push a third conversation out;
 *   - no wait: with every idle history protected a request is admitted at once;
 *   - pigeonhole: N+1 agents on N slots never re-read their histories;
 *   - busy source: a prompt sharing a prefix with a busy slot shares its cells;
 *   - spill table: more histories than RAM entries: the least valuable go.
 */
#include "ref.h"

#include <time.h>

#include "../src/engine/eng.h"

static model *m;
static const tok_vocab *voc;

/* A deterministic "document" of n words. */
static void words(char *out, size_t cap, int n, unsigned seed)
{
    static const char *w[] = { "agent", "tool", "plan", "file", "search", "result", "the", "a", "of",
                               "query", "answer", "code", "test", "build", "river", "tree", "box" };
    size_t k = 0;
    for (int i = 0; i < n && k + 16 < cap; i++) {
        seed = seed * 1103515245u + 12345u;
        k += (size_t)snprintf(out + k, cap - k, "%s ", w[(seed >> 16) % ARRAY_LEN(w)]);
    }
}

typedef struct conv { tmpl_msg msg[16]; int n; char buf[16][32768]; } conv;

static void conv_add(conv *c, const char *role, const char *text)
{
    snprintf(c->buf[c->n], sizeof c->buf[c->n], "%s", text);
    c->msg[c->n] = (tmpl_msg){ role, c->buf[c->n] };
    c->n++;
}

static int conv_tokens(const conv *c, int32_t *out, int cap)
{
    static char text[1 << 17];
    size_t n = 0;
    ASSERT(tmpl_apply(TMPL_CHATML, c->msg, c->n, true, text, sizeof text, &n) == PK_OK);
    int32_t k = 0;
    ASSERT(tok_encode(voc, text, n, false, true, out, cap, &k) == PK_OK);
    return k;
}

typedef struct result {
    int32_t tok[64];
    int n_tok;
    int32_t n_cached, slot;      /* slot -1: never ended */
    double wait_ms;              /* submit to its placement; INFINITY when it has none */
    char place_kind[32];         /* its placement event's rule ("least-loss", ...) */
    char text[1024];
} result;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static result complete(eng *e, const int32_t *p, int n, int n_predict)
{
    eng_completion c = { .prompt = p, .n_prompt = n, .n_predict = n_predict, .cache_prompt = true, .id_slot = -1 };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    eng_task *t;
    result r = { .slot = -1, .wait_ms = INFINITY };
    int64_t t0 = wall_ms();
    ASSERT(eng_submit(e, &c, &t) == PK_OK);
    eng_event ev;
    while (eng_task_next(t, &ev, 60000) == PK_OK) {
        if (ev.kind == ENG_EV_TOKEN) {
            if (r.n_tok < 64) r.tok[r.n_tok++] = ev.token;
            strncat(r.text, ev.text, sizeof r.text - strlen(r.text) - 1);
        } else {
            r.n_cached = ev.n_cached;
            r.slot = ev.slot;
            ASSERT(ev.kind == ENG_EV_DONE);
        }
        bool done = ev.kind != ENG_EV_TOKEN;
        eng_event_clear(&ev);
        if (done) break;
    }
    eng_task_release(t);
    if (r.slot < 0) return r;
    /* Admission delay: from submit to this task's placement event (the
     * slot it ended in names it), not merely the last one: a task never
     * placed must not borrow an earlier task's. */
    static eng_stats st;
    ASSERT(eng_get_stats(e, &st) == PK_OK);
    uint64_t id = st.slots[r.slot].task_id;
    for (int i = st.n_events - 1; i >= 0; i--)
        if (st.events[i].kind == ENG_CACHE_PLACE && st.events[i].task_id == id) {
            r.wait_ms = (double)(st.events[i].ts_ms - t0);
            snprintf(r.place_kind, sizeof r.place_kind, "%s", st.events[i].reason);
            break;
        }
    return r;
}

static eng *make_engine(int n_slots, int n_ctx, double ttl_max_s)
{
    eng_params p = eng_default_params();
    p.n_slots = n_slots;
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    p.policy.ttl_max_s = ttl_max_s;
    eng *e;
    ASSERT(eng_new(m, &p, &e) == PK_OK);
    return e;
}

static int32_t lcp(const int32_t *a, int na, const int32_t *b, int nb)
{
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* What a completion leaves in its slot: the prompt and every generated token
 * but the last (sampled, never decoded).  A next turn can reuse at most its
 * common prefix with this; re-tokenizing the reply text may differ from the
 * sampled tokens, which no cache can help. */
static int32_t hist_buf[10][8192];
static int hist_of(int k, const int32_t *p, int n, const result *r)
{
    memcpy(hist_buf[k], p, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i + 1 < r->n_tok; i++) hist_buf[k][n + i] = r->tok[i];
    return n + MAX(r->n_tok - 1, 0);
}

/* The most a next turn p[0..n) can reuse from history k of length nh. */
static int reusable(int k, int nh, const int32_t *p, int n)
{
    return MIN(lcp(hist_buf[k], nh, p, n), n - 1);
}

static char doc[1 << 15];
static int32_t pa[8192], pb[8192], pc[8192];
static conv a, a2, b, cc, third, ag[6], tr;

static void scenario_park(void)
{
    /* Reference: A's two turns without the side request. */
    memset(&a, 0, sizeof a); memset(&b, 0, sizeof b);
    words(doc, sizeof doc, 2400, 1);
    conv_add(&a, "system", "You are a helpful agent.");
    conv_add(&a, "user", doc);
    int na = conv_tokens(&a, pa, 8192);
    eng *e = make_engine(1, 8192, 100000);
    result r1 = complete(e, pa, na, 8);
    a2 = a;
    conv_add(&a2, "assistant", r1.text);
    conv_add(&a2, "user", "And the next step?");
    int na2 = conv_tokens(&a2, pa, 8192);
    result want = complete(e, pa, na2, 8);
    eng_free(e);

    /* With a side request of another conversation in between. */
    e = make_engine(1, 8192, 100000);
    na = conv_tokens(&a, pa, 8192);
    result a1 = complete(e, pa, na, 8);
    int nh = hist_of(0, pa, na, &a1);
    words(doc, sizeof doc, 400, 2);
    conv_add(&b, "system", "You classify requests.");
    conv_add(&b, "user", doc);
    int nb = conv_tokens(&b, pb, 8192);
    result side = complete(e, pb, nb, 4);
    CHECK_EQ_INT(side.n_cached, lcp(pa, na, pb, nb));   /* the template's shared start */
    na2 = conv_tokens(&a2, pa, 8192);
    result got = complete(e, pa, na2, 8);
    /* All but the new tokens: A's first turn is reused. */
    CHECK_EQ_INT(got.n_cached, reusable(0, nh, pa, na2));
    CHECK_EQ_INT(got.n_tok, want.n_tok);
    CHECK(memcmp(got.tok, want.tok, sizeof(int32_t) * (size_t)want.n_tok) == 0);
    static eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    int parks = 0;
    for (int i = 0; i < st.n_events; i++) parks += st.events[i].kind == ENG_CACHE_PARK;
    CHECK(parks >= 1);
    printf("park: A's next turn reused %d of %d prompt tokens (%d new)\n", got.n_cached, na2, na2 - got.n_cached);
    eng_free(e);

    /* Without parking (park_min_value out of reach, no RAM tier) the side
     * request costs A its history: the mechanism, not luck, keeps it. */
    eng_params p = eng_default_params();
    p.n_slots = 1; p.n_ctx = 8192; p.n_threads = 2;
    p.policy.ttl_max_s = 100000;
    p.policy.park_min_value = 1e9;
    p.cache_ram_mib = 0;
    ASSERT(eng_new(m, &p, &e) == PK_OK);
    na = conv_tokens(&a, pa, 8192);
    complete(e, pa, na, 8);
    complete(e, pb, nb, 4);
    na2 = conv_tokens(&a2, pa, 8192);
    got = complete(e, pa, na2, 8);
    CHECK_EQ_INT(got.n_cached, lcp(pa, na2, pb, nb));
    eng_free(e);
}

/* KV cells for one history only: A's history moves to RAM while B runs and
 * comes back by copy for A's next turn (same answer as the reference), and
 * with no RAM budget it is lost. */
static void scenario_spill(void)
{
    memset(&a, 0, sizeof a); memset(&b, 0, sizeof b);
    words(doc, sizeof doc, 2400, 30);
    conv_add(&a, "system", "You are a helpful agent.");
    conv_add(&a, "user", doc);
    words(doc, sizeof doc, 2400, 31);
    conv_add(&b, "system", "Another agent.");
    conv_add(&b, "user", doc);
    for (int ram = 1; ram >= 0; ram--) {
        eng_params p = eng_default_params();
        p.n_slots = 1; p.n_ctx = 4096; p.n_threads = 2;
        p.policy.ttl_max_s = 100000;
        p.cache_ram_mib = ram ? 64 : 0;
        eng *e;
        ASSERT(eng_new(m, &p, &e) == PK_OK);
        int na = conv_tokens(&a, pa, 8192);
        result r1 = complete(e, pa, na, 8);
        int nh = hist_of(0, pa, na, &r1);
        int nb = conv_tokens(&b, pb, 8192);
        complete(e, pb, nb, 4);
        a2 = a;
        conv_add(&a2, "assistant", r1.text);
        conv_add(&a2, "user", "And now?");
        int na2 = conv_tokens(&a2, pa, 8192);
        result got = complete(e, pa, na2, 8);
        static eng_stats st;
        CHECK(eng_get_stats(e, &st) == PK_OK);
        if (ram) {
            CHECK_EQ_INT(got.n_cached, reusable(0, nh, pa, na2));
            printf("spill: A's next turn reused %d of %d tokens through RAM (4096 cells for two 2.4K histories)\n",
                   got.n_cached, na2);
        } else {
            CHECK(got.n_cached < 40);
            CHECK_EQ_INT(st.n_spilled, 0);
        }
        eng_free(e);
        /* The reference: the same turn on a fresh engine. */
        if (ram) {
            ASSERT(eng_new(m, &p, &e) == PK_OK);
            result want = complete(e, pa, na2, 8);
            CHECK_EQ_INT(want.n_tok, got.n_tok);
            CHECK(memcmp(want.tok, got.tok, sizeof(int32_t) * (size_t)got.n_tok) == 0);
            eng_free(e);
        }
    }
}

static void scenario_alternation(void)
{
    eng *e = make_engine(4, 16384, 0.001);     /* protection over almost at once */
    memset(&b, 0, sizeof b); memset(&cc, 0, sizeof cc);
    words(doc, sizeof doc, 500, 3);
    conv_add(&b, "system", "Agent B.");
    conv_add(&b, "user", doc);
    words(doc, sizeof doc, 500, 4);
    conv_add(&cc, "system", "Agent C.");
    conv_add(&cc, "user", doc);
    int hb = 0, hc = 0;
    for (int turn = 0; turn < 3; turn++) {
        int nb = conv_tokens(&b, pb, 8192);
        result rb = complete(e, pb, nb, 12);
        if (turn > 0) CHECK_EQ_INT(rb.n_cached, reusable(1, hb, pb, nb));
        hb = hist_of(1, pb, nb, &rb);
        conv_add(&b, "assistant", rb.text);
        conv_add(&b, "user", "continue");
        int nc = conv_tokens(&cc, pc, 8192);
        result rc = complete(e, pc, nc, 12);
        if (turn > 0) CHECK_EQ_INT(rc.n_cached, reusable(2, hc, pc, nc));
        hc = hist_of(2, pc, nc, &rc);
        conv_add(&cc, "assistant", rc.text);
        conv_add(&cc, "user", "continue");
    }
    eng_free(e);
}

static void scenario_rewrites(void)
{
    eng *e = make_engine(2, 16384, 100000);
    memset(&third, 0, sizeof third);
    words(doc, sizeof doc, 300, 5);
    conv_add(&third, "system", "Third.");
    conv_add(&third, "user", doc);
    int n3 = conv_tokens(&third, pc, 8192);
    complete(e, pc, n3, 4);
    words(doc, sizeof doc, 900, 6);
    int slots_used[8] = {0};
    for (int q = 0; q < 6; q++) {
        /* The same transcript, its last message rewritten every time. */
        memset(&tr, 0, sizeof tr);
        conv_add(&tr, "system", "Classifier.");
        conv_add(&tr, "user", doc);
        char tail[64];
        snprintf(tail, sizeof tail, "verdict request %d", q);
        conv_add(&tr, "user", tail);
        int n = conv_tokens(&tr, pa, 8192);
        result r = complete(e, pa, n, 2);
        slots_used[r.slot]++;
        if (q > 0) CHECK(r.n_cached > n / 2);
    }
    static eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    CHECK_EQ_INT(st.n_parked, 0);             /* one history, not six */
    result r3 = complete(e, pc, n3, 4);       /* the third conversation is still there */
    CHECK_EQ_INT(r3.n_cached, n3 - 1);
    eng_free(e);
}

/* True when every slot holds a history still protected: a new
 * conversation then has no blank or expired slot to take. */
static bool all_protected(eng *e)
{
    static eng_stats st;
    ASSERT(eng_get_stats(e, &st) == PK_OK);
    bool all = st.n_slots > 0;
    for (int32_t k = 0; k < st.n_slots; k++)
        all = all && st.slots[k].hist_tokens > 0 && st.slots[k].protected_for_s > 0;
    return all;
}

static void scenario_no_wait_and_pigeonhole(void)
{
    /* 3 slots, 4 agents taking turns: parking keeps every history; then
     * two more new conversations. */
    eng *e = make_engine(3, 16384, 100000);
    static int32_t toks[6][4096];
    int nh[6] = {0};
    memset(ag, 0, sizeof ag);
    for (int i = 0; i < 6; i++) {
        words(doc, sizeof doc, 2200, 10 + (unsigned)i);
        conv_add(&ag[i], "system", "A sub-agent.");
        conv_add(&ag[i], "user", doc);
    }
    double max_wait = 0;
    int n_cornered = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = round < 3 ? 0 : 4; i < (round < 3 ? 4 : 6); i++) {
            /* A new conversation meeting a protected history in every slot:
             * the case "no wait" is about. */
            bool cornered = (round == 0 || round == 3) && all_protected(e);
            int n = conv_tokens(&ag[i], toks[i], 4096);
            result r = complete(e, toks[i], n, 6);
            CHECK(r.slot >= 0 && isfinite(r.wait_ms));
            if (round == 1 || round == 2) CHECK_EQ_INT(r.n_cached, reusable(4 + i, nh[i], toks[i], n));
            if (cornered) {
                n_cornered++;
                CHECK_STR(r.place_kind, "least-loss");
            }
            max_wait = fmax(max_wait, r.wait_ms);
            nh[i] = hist_of(4 + i, toks[i], n, &r);
            conv_add(&ag[i], "assistant", r.text);
            conv_add(&ag[i], "user", "next");
        }
    }
    /* Agent 3 in the first round and the two new ones at the end. */
    CHECK_EQ_INT(n_cornered, 3);
    /* Every idle history protected, yet each request was placed at once
     * (within one engine step of a tiny model; generous for a noisy CI). */
    CHECK(max_wait < 250);
    printf("pigeonhole: 4 agents on 3 slots, every turn reused its history; %d new conversations met every "
           "slot protected; slowest admission %.0f ms\n", n_cornered, max_wait);
    eng_free(e);
}

/* Sub-agents spawned together with one long common prefix: the prefix is
 * computed once and shared by membership, though both arrive at once. */
static void scenario_spawn(void)
{
    eng *e = make_engine(4, 16384, 100000);
    static char common[1 << 15];
    words(common, sizeof common, 2000, 40);
    int32_t *pr[3] = { pa, pb, pc }, n[3];
    for (int k = 0; k < 3; k++) {
        memset(&a, 0, sizeof a);
        conv_add(&a, "system", common);
        char task[64];
        snprintf(task, sizeof task, "sub-task %d: check the tests", k);
        conv_add(&a, "user", task);
        n[k] = conv_tokens(&a, pr[k], 8192);
    }
    int shared = lcp(pa, n[0], pb, n[1]);
    eng_task *ts[3];
    for (int k = 0; k < 3; k++) {
        eng_completion c = { .prompt = pr[k], .n_prompt = n[k], .n_predict = 4, .cache_prompt = true, .id_slot = -1 };
        c.sp = smp_default_params();
        c.sp.temp = 0;
        ASSERT(eng_submit(e, &c, &ts[k]) == PK_OK);
    }
    int32_t cached = 0;
    for (int k = 0; k < 3; k++) {
        eng_event ev;
        while (eng_task_next(ts[k], &ev, 60000) == PK_OK) {
            bool done = ev.kind != ENG_EV_TOKEN;
            if (ev.kind == ENG_EV_DONE) cached += ev.n_cached;
            eng_event_clear(&ev);
            if (done) break;
        }
        eng_task_release(ts[k]);
    }
    /* Two of the three reuse the whole common prefix. */
    CHECK(cached >= 2 * (shared - 1));
    static eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    printf("spawn: 3 agents with a %d-token common prefix read %llu prompt tokens for %d\n", shared,
           (unsigned long long)st.n_tokens_read, n[0] + n[1] + n[2]);
    eng_free(e);
}

static void scenario_busy_source(void)
{
    eng *e = make_engine(2, 8192, 100000);
    memset(&a, 0, sizeof a);
    words(doc, sizeof doc, 600, 20);
    conv_add(&a, "system", "Shared tools and context.");
    conv_add(&a, "user", doc);
    int na = conv_tokens(&a, pa, 8192);
    /* A long generation keeps slot 0 busy while a second agent with the same
     * prefix arrives. */
    eng_completion c = { .prompt = pa, .n_prompt = na, .n_predict = 200, .cache_prompt = true,
                         .id_slot = -1, .ignore_eos = true };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    eng_task *t;
    ASSERT(eng_submit(e, &c, &t) == PK_OK);
    eng_event ev;
    ASSERT(eng_task_next(t, &ev, 60000) == PK_OK);   /* first token: prefix cells exist */
    eng_event_clear(&ev);
    a2 = a;
    conv_add(&a2, "user", "a different question");
    int nb = conv_tokens(&a2, pb, 8192);
    int shared_prefix = lcp(pa, na, pb, nb);
    result r = complete(e, pb, nb, 6);
    CHECK(r.n_cached >= shared_prefix - 1);
    eng_task_release(t);
    eng_free(e);
    /* The same prompt alone gives the same tokens. */
    e = make_engine(2, 8192, 100000);
    result alone = complete(e, pb, nb, 6);
    CHECK_EQ_INT(alone.n_tok, r.n_tok);
    CHECK(memcmp(alone.tok, r.tok, sizeof(int32_t) * (size_t)r.n_tok) == 0);
    printf("busy source: shared %d cells from a busy slot\n", r.n_cached);
    eng_free(e);
}

/* More histories than the RAM tier has entries: each new one takes the
 * place of the entry used longest ago, so the last conversation's history
 * survives the next one taking its slot, even where it is shorter (worth
 * less) than every older one.  (A full table used to refuse every spill:
 * past ~150 histories each agent lost its context whenever its slot was
 * taken.) */
static void scenario_spill_table(void)
{
    eng_params p = eng_default_params();
    p.n_slots = 1; p.n_ctx = 4096; p.n_threads = 2;
    p.policy.ttl_max_s = 100000;
    p.policy.park_min_value = 1e9;             /* never parked in the cache: every history goes to RAM */
    p.cache_ram_mib = 256;
    eng *e;
    ASSERT(eng_new(m, &p, &e) == PK_OK);
    static int32_t prev[8192];
    int n_prev = 0, n_hist = 250;
    for (int k = 0; k < n_hist; k++) {
        memset(&cc, 0, sizeof cc);
        bool last_two = k >= n_hist - 2;     /* short ones, after 248 long ones */
        words(doc, sizeof doc, last_two ? 80 : 300, 1000 + (unsigned)k);
        conv_add(&cc, "system", "A short-lived agent.");
        conv_add(&cc, "user", doc);
        int n = conv_tokens(&cc, pc, 8192);
        complete(e, pc, n, 1);
        if (k == n_hist - 2) {
            memcpy(prev, pc, sizeof(int32_t) * (size_t)n);
            n_prev = n;
        }
    }
    static eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    int held = st.n_spilled;
    /* The one before the last is in RAM, and comes back whole. */
    result got = complete(e, prev, n_prev, 1);
    CHECK_EQ_INT(got.n_cached, n_prev - 1);
    CHECK(held >= 100 && held < n_hist);        /* the table was full: old entries made room */
    printf("spill table: %d histories through one slot, %d held in RAM, the last but one (%d tokens, the others "
           "300+) reused %d\n", n_hist, held, n_prev, got.n_cached);
    eng_free(e);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): placement scenarios need a model");
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf", shared);
    ASSERT(model_load(path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    voc = model_vocab(m);
    TEST_RUN(scenario_park);
    TEST_RUN(scenario_spill);
    TEST_RUN(scenario_spill_table);
    TEST_RUN(scenario_alternation);
    TEST_RUN(scenario_rewrites);
    TEST_RUN(scenario_no_wait_and_pigeonhole);
    TEST_RUN(scenario_busy_source);
    TEST_RUN(scenario_spawn);
    model_free(m);
    return test_finish();
}
