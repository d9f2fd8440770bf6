/*
 * test_pools.c - pools in the engine, on real models (docs/pools.md):
 *   - fork correctness: a root R, an extend E and a branch B of it, and a
 *     session on each, give the logits of the same prompt prefilled alone
 *     (within 1e-4 of max |logit|) at every step of a 32-token greedy
 *     continuation; through the engine, the same greedy tokens, log-probs
 *     and n_cached >= P (stories260K, random qwen2 F16, random llama Q8_0);
 *   - accounting: pools' + slots' + parked charges == cells in use, after
 *     every step of a random mix of every operation with completions
 *     running; after releasing everything, nothing is left;
 *   - lifetime: release with children, a released pool's cells living on in
 *     its session, evict then attach (identical log-probs), from_session
 *     (no prefill), sequence-id exhaustion, recursive auto-pin under the
 *     pressure of 50 unrelated conversations.
 * The engine checks its own invariants after every step (POLYKV_CHECK=1).
 */
#include "ref.h"

#include "../src/engine/eng.h"
#include "../src/kvev/kvev_pub.h"
#include "../src/pool/pool.h"

static int V;

/* ---- helpers -------------------------------------------------------------- */

static int encode(const tok_vocab *v, const char *text, bool bos, int32_t *out, int cap)
{
    int32_t n = 0;
    ASSERT(tok_encode(v, text, strlen(text), bos, false, out, cap, &n) == PK_OK);
    return n;
}

static double max_abs(const float *x, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static double log_softmax_at(const float *x, int n, int k)
{
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, x[i]);
    for (int i = 0; i < n; i++) s += exp(x[i] - mx);
    return x[k] - mx - log(s);
}

static int second_margin_ok(const float *x, int n, int best, double tol)
{
    for (int i = 0; i < n; i++)
        if (i != best && x[best] - x[i] < tol) return 0;
    return 1;
}

static eng_pool_reply pool_op(eng *e, eng_pool_verb verb, int32_t id, const int32_t *tok, int n, int32_t bp)
{
    eng_pool_req rq = { .verb = verb, .pool_id = id, .tokens = tok, .n_tokens = n, .branch_pos = bp };
    eng_pool_reply r;
    eng_pool_op(e, &rq, &r);
    return r;
}

typedef struct run {
    int32_t tok[64];
    float lp[64];
    int n;
    eng_event placed, done;
    bool have_placed, failed;
    pk_status err;
} run;

static void collect(eng_task *t, run *r)
{
    memset(r, 0, sizeof *r);
    eng_event ev;
    while (eng_task_next(t, &ev, 60000) == PK_OK) {
        if (ev.kind == ENG_EV_PLACED) {
            r->placed = ev;
            r->have_placed = true;
        } else if (ev.kind == ENG_EV_TOKEN) {
            if (r->n < 64) {
                r->lp[r->n] = ev.logprob;
                r->tok[r->n++] = ev.token;
            }
        } else {
            if (ev.kind == ENG_EV_ERROR) {
                r->failed = true;
                r->err = ev.status;
            }
            r->done = ev;
            eng_event_clear(&ev);
            break;
        }
        eng_event_clear(&ev);
    }
}

static eng_completion greedy(const int32_t *p, int n, int n_predict, int32_t pool)
{
    eng_completion c = { .prompt = p, .n_prompt = n, .n_predict = n_predict, .cache_prompt = true,
                         .id_slot = -1, .ignore_eos = true, .pool_id = pool, .report_placed = true,
                         .n_probs = 1 };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    return c;
}

static run complete(eng *e, const int32_t *p, int n, int n_predict, int32_t pool)
{
    eng_completion c = greedy(p, n, n_predict, pool);
    eng_task *t;
    run r;
    ASSERT(eng_submit(e, &c, &t) == PK_OK);
    collect(t, &r);
    eng_task_release(t);
    return r;
}

/* The ownership identity of docs/pools.md, from one snapshot. */
static bool accounting_exact(eng *e, eng_stats *st)
{
    ASSERT(eng_get_stats(e, st) == PK_OK);
    int64_t sum = st->parked_owned_cells;
    for (int i = 0; i < st->n_pools; i++) sum += st->pools[i].own_cells;
    for (int i = 0; i < st->n_slots; i++) sum += st->slots[i].kv_owned;
    if (sum != st->kv_used) fprintf(stderr, "accounting: %lld charged, %d used\n", (long long)sum, st->kv_used);
    return sum == st->kv_used;
}

static const eng_pool_info *pool_info(const eng_stats *st, int32_t id)
{
    for (int i = 0; i < st->n_pools; i++)
        if (st->pools[i].pool_id == id) return &st->pools[i];
    return NULL;
}

/* ---- fork correctness ----------------------------------------------------- */

#define NG 32

/* Greedy NG steps of prompt[0, n) alone in a fresh context, and in lockstep
 * the session seq of ctx (whose cells [0, n_shared) exist already) fed the
 * same tokens: the worst logit difference over max |logit|, and the alone
 * run's tokens and log-probs. */
static double lockstep(model *m, model_ctx *shared, kv_seq seq, const int32_t *prompt, int n, int n_shared,
                       int32_t *tok, float *lp, int *n_near_tie)
{
    model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16 };
    model_ctx *alone;
    ASSERT(model_ctx_new(m, &cp, &alone) == PK_OK);
    float *la = malloc((size_t)V * sizeof *la), *ls = malloc((size_t)V * sizeof *ls);
    static ref_batch rb;
    ref_batch_make(&rb, prompt, n, 0, 0, false);
    ASSERT(model_decode(alone, &rb.b, la) == PK_OK);
    ref_batch_make(&rb, prompt + n_shared, n - n_shared, n_shared, seq, false);
    ASSERT(model_decode(shared, &rb.b, ls) == PK_OK);
    double worst = 0;
    for (int k = 0; k < NG; k++) {
        double mx = max_abs(la, V), d = 0;
        for (int i = 0; i < V; i++) d = fmax(d, fabs(la[i] - ls[i]));
        worst = fmax(worst, d / mx);
        tok[k] = smp_argmax(la, V);
        lp[k] = (float)log_softmax_at(la, V, tok[k]);
        if (!second_margin_ok(la, V, tok[k], 1e-3 * mx)) (*n_near_tie)++;
        else if (smp_argmax(ls, V) != tok[k]) worst = fmax(worst, 1.0);   /* a greedy mismatch */
        ref_batch_make(&rb, &tok[k], 1, n + k, 0, false);
        ASSERT(model_decode(alone, &rb.b, la) == PK_OK);
        ref_batch_make(&rb, &tok[k], 1, n + k, seq, false);
        ASSERT(model_decode(shared, &rb.b, ls) == PK_OK);
    }
    free(la);
    free(ls);
    model_ctx_free(alone);
    return worst;
}

static const char *ROOT = "Once upon a time there was a little girl named Lily. She liked to play in the park "
                          "with her red ball and her dog.";
static const char *EXT = " One day the sun was hot and the sky was blue, so they went to the lake.";
static const char *BRANCH = " ran to the big tree and saw a bird in a nest.";
static const char *SUFFIX[3] = { " Then Lily said", " The dog was happy and", " After that, Tom" };

static void test_forks(const char *shared_dir, const char *name)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", shared_dir, name);
    model *m;
    if (model_load(path, MODEL_MMAP, &m, err, sizeof err) != PK_OK) {
        CHECK(!"model load");
        return;
    }
    const tok_vocab *v = model_vocab(m);
    V = model_get_hparams(m)->n_vocab;
    int32_t r[256], ex[256], br[256], tmp[256];
    int nr = encode(v, ROOT, true, r, 256);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s", ROOT, EXT);
    int ne = encode(v, buf, true, ex, 256);
    int D = nr / 2;
    memcpy(br, r, (size_t)D * sizeof *br);
    int nb = D + encode(v, BRANCH, false, br + D, 256 - D);
    CHECK(nb > D && pol_common_prefix(r, nr, ex, ne) == nr);
    const int32_t *pool_tok[3] = { r, ex, br };
    int pool_n[3] = { nr, ne, nb }, prompt_n[3];
    static int32_t prompt[3][512];
    for (int k = 0; k < 3; k++) {
        memcpy(prompt[k], pool_tok[k], (size_t)pool_n[k] * sizeof(int32_t));
        prompt_n[k] = pool_n[k] + encode(v, SUFFIX[k], false, prompt[k] + pool_n[k], 256);
    }

    /* The mechanism at the model level: the tree's sequences in one cache. */
    model_ctx_params cp = { .n_ctx = 2048, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16 };
    model_ctx *ctx;
    ASSERT(model_ctx_new(m, &cp, &ctx) == PK_OK);
    kv_cache *kv = model_ctx_kv(ctx);
    float *dummy = malloc((size_t)V * sizeof *dummy);
    static ref_batch rb;
    ref_batch_make(&rb, r, nr, 0, 10, false);
    ASSERT(model_decode(ctx, &rb.b, dummy) == PK_OK);
    kv_seq_cp(kv, 10, 11, 0, nr);
    ref_batch_make(&rb, ex + nr, ne - nr, nr, 11, false);
    ASSERT(model_decode(ctx, &rb.b, dummy) == PK_OK);
    kv_seq_cp(kv, 10, 12, 0, D);
    ref_batch_make(&rb, br + D, nb - D, D, 12, false);
    ASSERT(model_decode(ctx, &rb.b, dummy) == PK_OK);
    int32_t want_tok[3][NG];
    float want_lp[3][NG];
    double worst = 0;
    int near = 0;
    for (int k = 0; k < 3; k++) {
        kv_seq_cp(kv, 10 + k, k, 0, pool_n[k]);
        worst = fmax(worst, lockstep(m, ctx, k, prompt[k], prompt_n[k], pool_n[k], want_tok[k], want_lp[k], &near));
    }
    free(dummy);
    model_ctx_free(ctx);
    printf("%s: R %d, E %d, B %d tokens (D %d): worst |dlogit| / max|logit| %.2e over 3 x %d steps "
           "(%d near ties)\n", name, nr, ne, nb, D, worst, NG, near);
    CHECK(worst <= 1e-4);

    /* The same through the engine: pools made by messages, sessions attached. */
    eng_params ep = eng_default_params();
    ep.n_slots = 3;
    ep.n_ctx = 3 * 256;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    eng_pool_reply pr = pool_op(e, ENG_POOL_CREATE, 0, r, nr, -1);
    CHECK_EQ_INT(pr.status, PK_OK);
    CHECK_EQ_INT(pr.prefix_len, nr);
    CHECK_EQ_INT(pr.n_prefilled, nr);
    int32_t id_r = pr.pool_id;
    pr = pool_op(e, ENG_POOL_FORK, id_r, ex, ne, -1);
    CHECK_EQ_INT(pr.status, PK_OK);
    CHECK_EQ_INT(pr.branch_pos, nr);            /* an extend */
    CHECK_EQ_INT(pr.n_prefilled, ne - nr);
    int32_t id_e = pr.pool_id;
    pr = pool_op(e, ENG_POOL_FORK, id_r, br, nb, D);
    CHECK_EQ_INT(pr.status, PK_OK);
    CHECK_EQ_INT(pr.branch_pos, D);
    int32_t id_b = pr.pool_id;
    /* A fork that contradicts the parent before branch_pos: 409 with the position. */
    memcpy(tmp, r, (size_t)nr * sizeof *tmp);
    tmp[3] = tmp[3] == 5 ? 6 : 5;
    pr = pool_op(e, ENG_POOL_FORK, id_r, tmp, nr, 10);
    CHECK_EQ_INT(pr.status, PK_ECONFLICT);
    CHECK_EQ_INT(pr.conflict_pos, 3);
    pr = pool_op(e, ENG_POOL_FORK, id_r, ex, ne, nr + 1);
    CHECK_EQ_INT(pr.status, PK_EINVAL);           /* D > parent's L */

    int32_t ids[3] = { id_r, id_e, id_b };
    eng_task *ts[3];
    for (int k = 0; k < 3; k++) {
        eng_completion c = greedy(prompt[k], prompt_n[k], NG, ids[k]);
        ASSERT(eng_submit(e, &c, &ts[k]) == PK_OK);
    }
    double lp_worst = 0;
    for (int k = 0; k < 3; k++) {
        run got;
        collect(ts[k], &got);
        eng_task_release(ts[k]);
        CHECK(!got.failed && got.have_placed);
        CHECK_EQ_INT(got.placed.pool_id, ids[k]);
        CHECK_EQ_INT(got.placed.pool_shared, pool_n[k]);
        CHECK(got.done.n_cached >= pool_n[k]);
        CHECK_EQ_INT(got.n, NG);
        CHECK(memcmp(got.tok, want_tok[k], sizeof want_tok[k]) == 0);
        for (int i = 0; i < got.n; i++) lp_worst = fmax(lp_worst, fabs(got.lp[i] - want_lp[k][i]));
    }
    printf("%s: engine sessions on R, E, B: greedy tokens equal; worst |dlogprob| %.2e\n", name, lp_worst);
    CHECK(lp_worst <= 1e-3);

    eng_stats *st = malloc(sizeof *st);
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(pool_info(st, id_r)->own_cells, nr);
    CHECK_EQ_INT(pool_info(st, id_e)->own_cells, ne - nr);
    CHECK_EQ_INT(pool_info(st, id_b)->own_cells, nb - D);
    CHECK(pool_info(st, id_r)->auto_pinned && pool_info(st, id_e)->n_sessions == 1);
    CHECK_EQ_INT(st->pool_tree_depth, 2);
    free(st);
    eng_free(e);
    model_free(m);
}

/* ---- lifetime ------------------------------------------------------------- */

static void fill_words(const tok_vocab *v, int32_t *out, int n, unsigned seed)
{
    static const char *w[] = { " cat", " dog", " ran", " sun", " big", " red", " tree", " park", " ball", " sky" };
    char text[16384];
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof text - 16; i++) {
        seed = seed * 1103515245u + 12345u;
        at += (size_t)snprintf(text + at, sizeof text - at, "%s", w[(seed >> 16) % 10]);
    }
    static int32_t all[8192];
    int k = encode(v, text, true, all, 8192);
    ASSERT(k >= n);
    memcpy(out, all, (size_t)n * sizeof *out);
}

static void test_lifetime(model *m)
{
    const tok_vocab *v = model_vocab(m);
    V = model_get_hparams(m)->n_vocab;
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 2 * 512;
    ep.n_threads = 2;
    ep.n_pools = 5;
    ep.pool_grace_ms = 0;                         /* pins come from use, never from grace */
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    eng_stats *st = malloc(sizeof *st);
    static int32_t a[400], b[400], p[400];
    fill_words(v, a, 300, 1);

    eng_pool_reply root = pool_op(e, ENG_POOL_CREATE, 0, a, 100, -1);
    eng_pool_reply mid = pool_op(e, ENG_POOL_FORK, root.pool_id, a, 150, -1);
    eng_pool_reply leaf = pool_op(e, ENG_POOL_FORK, mid.pool_id, a, 200, -1);
    CHECK(root.status == PK_OK && mid.status == PK_OK && leaf.status == PK_OK);
    CHECK_EQ_INT(pool_op(e, ENG_POOL_RELEASE, root.pool_id, NULL, 0, -1).status, PK_ECONFLICT);

    /* A session on the grandchild; then 50 unrelated conversations press on
     * the cache.  An unused pool beside the tree is what goes. */
    fill_words(v, b, 120, 99);
    eng_pool_reply lone = pool_op(e, ENG_POOL_CREATE, 0, b, 120, -1);
    CHECK_EQ_INT(lone.status, PK_OK);
    memcpy(p, a, 230 * sizeof *p);
    run s1 = complete(e, p, 230, 8, leaf.pool_id);
    CHECK(!s1.failed && s1.placed.pool_shared == 200);
    for (int k = 0; k < 50; k++) {
        fill_words(v, b, 380, 1000 + k);
        run u = complete(e, b, 380, 4, 0);
        CHECK(!u.failed);
        CHECK(accounting_exact(e, st));
    }
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(pool_info(st, root.pool_id)->residency, POOL_RESIDENT);
    CHECK_EQ_INT(pool_info(st, mid.pool_id)->residency, POOL_RESIDENT);
    CHECK_EQ_INT(pool_info(st, leaf.pool_id)->residency, POOL_RESIDENT);
    CHECK_EQ_INT(pool_info(st, lone.pool_id)->residency, POOL_EVICTED);   /* the pressure was real */
    CHECK(pool_info(st, mid.pool_id)->auto_pinned && !pool_info(st, lone.pool_id)->auto_pinned);

    /* Evict, then attach: re-materialized, the same log-probs. */
    run before = complete(e, p, 230, 8, mid.pool_id);
    CHECK_EQ_INT(pool_op(e, ENG_POOL_EVICT, leaf.pool_id, NULL, 0, -1).status, PK_OK);
    ASSERT(eng_erase(e, -1, NULL) == PK_OK);
    CHECK_EQ_INT(pool_op(e, ENG_POOL_EVICT, mid.pool_id, NULL, 0, -1).status, PK_OK);
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(pool_info(st, mid.pool_id)->residency, POOL_EVICTED);
    run after = complete(e, p, 230, 8, mid.pool_id);
    CHECK(!after.failed && after.placed.pool_shared == 150);
    CHECK(after.n == before.n && memcmp(after.tok, before.tok, sizeof(int32_t) * (size_t)before.n) == 0);
    double d = 0;
    for (int i = 0; i < after.n; i++) d = fmax(d, fabs(after.lp[i] - before.lp[i]));
    printf("lifetime: evict + attach re-materialized pool %d: worst |dlogprob| %.2e\n", mid.pool_id, d);
    CHECK(d <= 1e-5);
    CHECK_EQ_INT(pool_op(e, ENG_POOL_FLUSH, leaf.pool_id, NULL, 0, -1).status, PK_OK);
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(pool_info(st, leaf.pool_id)->residency, POOL_RESIDENT);

    /* from_session: every cell shared, nothing computed. */
    eng_completion c = greedy(p, 230, 4, leaf.pool_id);
    snprintf(c.session_id, sizeof c.session_id, "agent-7");
    eng_task *t;
    run rs;
    ASSERT(eng_submit(e, &c, &t) == PK_OK);
    collect(t, &rs);
    eng_task_release(t);
    eng_pool_req rq = { .verb = ENG_POOL_CREATE, .from_session = "agent-7" };
    eng_pool_reply snap;
    CHECK_EQ_INT(eng_pool_op(e, &rq, &snap), PK_OK);
    CHECK_EQ_INT(snap.n_prefilled, 0);
    CHECK_EQ_INT(snap.prefix_len, 230 + 4 - 1);   /* the last sampled token has no cell yet */
    rq.from_session = "nobody";
    CHECK_EQ_INT(eng_pool_op(e, &rq, &snap), PK_ENOTFOUND);
    CHECK(accounting_exact(e, st));

    /* Five pool ids: the sixth is refused, naming the limit. */
    eng_pool_reply x = pool_op(e, ENG_POOL_CREATE, 0, b, 50, -1);
    CHECK_EQ_INT(x.status, PK_EFULL);
    CHECK(strstr(x.message, "--pools 5") != NULL);

    /* A released pool's cells live on in its session, and go with it. */
    run s2 = complete(e, p, 230, 4, root.pool_id);
    CHECK(!s2.failed);
    eng_pool_reply rel = pool_op(e, ENG_POOL_RELEASE, root.pool_id, NULL, 0, -1);
    CHECK_EQ_INT(rel.status, PK_ECONFLICT);
    rq = (eng_pool_req){ .verb = ENG_POOL_RELEASE, .pool_id = root.pool_id, .recursive = true };
    CHECK_EQ_INT(eng_pool_op(e, &rq, &rel), PK_OK);
    CHECK_EQ_INT(rel.n_released, 3);
    CHECK(accounting_exact(e, st));
    CHECK(st->kv_used >= 230);
    run gone = complete(e, p, 230, 4, root.pool_id);
    CHECK(gone.failed && gone.err == PK_ENOTFOUND);
    for (int i = 0; i < st->n_pools; i++) {
        rq = (eng_pool_req){ .verb = ENG_POOL_RELEASE, .pool_id = st->pools[i].pool_id, .recursive = true };
        eng_pool_op(e, &rq, &rel);
    }
    ASSERT(eng_erase(e, -1, NULL) == PK_OK);
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(st->kv_used, 0);
    CHECK_EQ_INT(st->n_pools, 0);
    CHECK_EQ_INT(st->seq_ids_used, ep.n_slots);
    free(st);
    eng_free(e);
}

/* ---- random operations with completions running --------------------------- */

static unsigned rs = 17;
static int RND(int n)
{
    rs = rs * 1103515245u + 12345u;
    return (int)((rs >> 8) % (unsigned)n);
}

static void test_random(model *m, int n_steps)
{
    const tok_vocab *v = model_vocab(m);
    V = model_get_hparams(m)->n_vocab;
    eng_params ep = eng_default_params();
    ep.n_slots = 4;
    ep.n_ctx = 4 * 256;
    ep.n_threads = 2;
    ep.n_pools = 8;
    ep.pool_grace_ms = 50;
    /* KV events on: eng_check (POLYKV_CHECK=1) holds the tracker to every
     * holder after each step, forks, evictions and erases included. */
    kvev_pub_config kc = kvev_pub_default();
    snprintf(kc.endpoint, sizeof kc.endpoint, "ipc:///tmp/polykv-test-pools-%d", (int)getpid());
    char why[256];
    kvev_pub *kv;
    ASSERT(kvev_pub_new(&kc, &kv, why, sizeof why) == PK_OK);
    ep.kv_events = kv;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    eng_stats *st = malloc(sizeof *st);
    static int32_t base[4][300];
    for (int k = 0; k < 4; k++) fill_words(v, base[k], 240, 7 + (unsigned)k);
    enum { MAXT = 64 };
    eng_task *live[MAXT] = { 0 };
    int n_ops[10] = { 0 }, n_done = 0, n_err = 0, bad = 0;
    for (int step = 0; step < n_steps; step++) {
        ASSERT(eng_get_stats(e, st) == PK_OK);
        int32_t some = st->n_pools ? st->pools[RND(st->n_pools)].pool_id : 1 + RND(40);
        const int32_t *b = base[RND(4)];
        int op = RND(10), len = 20 + RND(200);
        eng_pool_req rq = { .pool_id = some, .tokens = b, .n_tokens = len, .branch_pos = -1 };
        eng_pool_reply rp;
        switch (op) {
        case 0: rq.verb = ENG_POOL_CREATE; break;
        case 1: rq.verb = ENG_POOL_FORK; rq.branch_pos = RND(3) ? -1 : RND(len); break;
        case 2: rq.verb = RND(2) ? ENG_POOL_PIN : ENG_POOL_UNPIN; break;
        case 3: rq.verb = ENG_POOL_EVICT; break;
        case 4: rq.verb = ENG_POOL_FLUSH; break;
        case 5: rq.verb = ENG_POOL_RELEASE; rq.recursive = RND(2); break;
        case 6: eng_erase(e, RND(ep.n_slots + 1) - 1, NULL); break;
        default: {                                   /* a completion, maybe on a pool */
            int k = 0;
            while (k < MAXT && live[k]) k++;
            if (k == MAXT) break;
            int n_predict = 1 + RND(12);
            eng_completion c = greedy(b, len + 5, n_predict, RND(3) ? some : 0);
            c.report_placed = RND(2);
            if (RND(4) == 0) snprintf(c.session_id, sizeof c.session_id, "s%d", RND(6));
            if (eng_submit(e, &c, &live[k]) != PK_OK) bad++;
        }
        }
        if (op <= 5) {
            pk_status s = eng_pool_op(e, &rq, &rp);
            bad += s != PK_OK && s != PK_ENOTFOUND && s != PK_EINVAL && s != PK_ECONFLICT && s != PK_EFULL;
        }
        n_ops[op]++;
        /* Drain what has finished; every task ends with DONE or ERROR. */
        for (int k = 0; k < MAXT; k++) {
            eng_event ev;
            while (live[k] && eng_task_next(live[k], &ev, 0) == PK_OK) {
                if (ev.kind == ENG_EV_DONE || ev.kind == ENG_EV_ERROR) {
                    n_done += ev.kind == ENG_EV_DONE;
                    n_err += ev.kind == ENG_EV_ERROR;
                    eng_task_release(live[k]);
                    live[k] = NULL;
                }
                eng_event_clear(&ev);
            }
        }
        if (!accounting_exact(e, st)) {
            CHECK(!"accounting after a random step");
            break;
        }
    }
    for (int k = 0; k < MAXT; k++)
        if (live[k]) {
            run r;
            collect(live[k], &r);
            CHECK(r.done.kind == ENG_EV_DONE || r.done.kind == ENG_EV_ERROR);
            eng_task_release(live[k]);
        }
    CHECK_EQ_INT(bad, 0);
    ASSERT(eng_get_stats(e, st) == PK_OK);
    while (st->n_pools > 0) {
        eng_pool_req rq = { .verb = ENG_POOL_RELEASE, .pool_id = st->pools[0].pool_id, .recursive = true };
        eng_pool_reply rp;
        CHECK_EQ_INT(eng_pool_op(e, &rq, &rp), PK_OK);
        ASSERT(eng_get_stats(e, st) == PK_OK);
    }
    ASSERT(eng_erase(e, -1, NULL) == PK_OK);
    CHECK(accounting_exact(e, st));
    CHECK_EQ_INT(st->kv_used, 0);
    CHECK_EQ_INT(st->seq_ids_used, ep.n_slots);
    printf("random: %d steps (create %d, fork %d, pin %d, evict %d, flush %d, release %d, erase %d, "
           "completions %d: %d done, %d errors); accounting exact after each, nothing left\n", n_steps,
           n_ops[0], n_ops[1], n_ops[2], n_ops[3], n_ops[4], n_ops[5], n_ops[6], n_ops[7] + n_ops[8] + n_ops[9],
           n_done, n_err);
    free(st);
    eng_free(e);
    kvev_pub_stats ks;
    kvev_pub_stats_get(kv, &ks);
    CHECK(ks.batches > 10 && ks.events > ks.batches && ks.dropped == 0);
    kvev_pub_free(kv);
    unlink(kc.endpoint + 6);
}

/* ---- context shift and its guard ------------------------------------------ */

/* model_kv_shift: a sequence computed at positions 10.. and shifted by -10
 * is the sequence computed at 0.. (RoPE is linear in the position), so the
 * next token's logits agree; a shared cell refuses to move. */
static void test_kv_shift(model *m)
{
    V = model_get_hparams(m)->n_vocab;
    const tok_vocab *v = model_vocab(m);
    int32_t t[128];
    int n = encode(v, ROOT, true, t, 128);
    model_ctx_params cp = { .n_ctx = 512, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32 };
    model_ctx *a, *b;
    ASSERT(model_ctx_new(m, &cp, &a) == PK_OK && model_ctx_new(m, &cp, &b) == PK_OK);
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    static ref_batch rb;
    ref_batch_make(&rb, t, n - 1, 10, 0, false);
    ASSERT(model_decode(a, &rb.b, la) == PK_OK);
    CHECK_EQ_INT(model_kv_shift(a, 0, -1, -1, -10), PK_OK);
    CHECK_EQ_INT(kv_seq_pos_min(model_ctx_kv(a), 0), 0);
    ref_batch_make(&rb, t + n - 1, 1, n - 1, 0, false);
    ASSERT(model_decode(a, &rb.b, la) == PK_OK);
    ref_batch_make(&rb, t, n, 0, 0, false);
    ASSERT(model_decode(b, &rb.b, lb) == PK_OK);
    double d = 0, mx = max_abs(lb, V);
    for (int i = 0; i < V; i++) d = fmax(d, fabs(la[i] - lb[i]));
    printf("context shift: %d tokens computed at 10.. and shifted by -10: |dlogit| / max|logit| %.2e\n", n, d / mx);
    CHECK(d / mx <= 1e-4);
    kv_seq_cp(model_ctx_kv(a), 0, 1, 0, 4);
    CHECK_EQ_INT(model_kv_shift(a, 0, 2, -1, -1), PK_EINVAL);   /* cells 2, 3 are shared */
    CHECK_EQ_INT(kv_seq_pos_min(model_ctx_kv(a), 0), 0);
    CHECK_EQ_INT(kv_seq_pos_max(model_ctx_kv(a), 0), n - 1);
    free(la);
    free(lb);
    model_ctx_free(a);
    model_ctx_free(b);
}

/* --context-shift in the engine: a session of its own goes past its
 * context; one on a pool stops at the end with truncated, and the pool is
 * intact after it (a fresh attach answers as before). */
static void test_ctx_guard(model *m)
{
    const tok_vocab *v = model_vocab(m);
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 2 * 64;
    ep.n_threads = 2;
    ep.ctx_shift = true;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    int32_t p[128];
    int n = encode(v, ROOT, true, p, 128);
    ASSERT(n >= 30);
    run own = complete(e, p, 20, 100, 0);
    CHECK(!own.failed);
    CHECK_EQ_INT(own.done.stop, ENG_STOP_LIMIT);
    CHECK_EQ_INT(own.done.n_gen, 100);
    CHECK(own.done.truncated);

    eng_pool_reply pr = pool_op(e, ENG_POOL_CREATE, 0, p, 20, -1);
    CHECK_EQ_INT(pr.status, PK_OK);
    run before = complete(e, p, 25, 8, pr.pool_id);
    run pooled = complete(e, p, 25, 100, pr.pool_id);
    CHECK(!pooled.failed);
    CHECK_EQ_INT(pooled.done.stop, ENG_STOP_CTX);
    CHECK(pooled.done.truncated);
    CHECK_EQ_INT(pooled.done.n_gen, 64 - 25);        /* prompt + output fill the slot, as llama-server */
    ASSERT(eng_erase(e, -1, NULL) == PK_OK);
    run after = complete(e, p, 25, 8, pr.pool_id);
    CHECK(after.n == 8 && memcmp(after.tok, before.tok, sizeof(int32_t) * 8) == 0);
    double d = 0;
    for (int i = 0; i < 8; i++) d = fmax(d, fabs(after.lp[i] - before.lp[i]));
    CHECK(d == 0);
    printf("context guard: own session shifted through %d tokens in a %d-token slot; pooled one stopped "
           "(truncated) after %d; pool intact (|dlogprob| %.1e)\n", own.done.n_gen, 64, pooled.done.n_gen, d);
    eng_stats *st = malloc(sizeof *st);
    CHECK(accounting_exact(e, st));
    free(st);
    eng_free(e);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): pool checks need a model");
    setenv("POLYKV_CHECK", "1", 0);
    TEST_RUN(test_forks, shared, "stories260K");
    TEST_RUN(test_forks, shared, "rand-qwen2-qwen2vocab-e64-l2-F16");
    TEST_RUN(test_forks, shared, "rand-llama-llama3vocab-e256-l2-Q8_0");
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    model *m;
    ASSERT(model_load(path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    TEST_RUN(test_lifetime, m);
    TEST_RUN(test_kv_shift, m);
    TEST_RUN(test_ctx_guard, m);
    TEST_RUN(test_random, m, 400);
    model_free(m);
    return test_finish();
}
