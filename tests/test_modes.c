/*
 * test_modes.c - the engine's modes, on stories260K:
 *   - kv_unified: a slot runs past n_ctx / n_slots (up to n_ctx); without
 *     it the same request stops at its share; two requests whose contexts
 *     add up to more than the cache: the older gets every token, the newer
 *     ends with PK_EFULL "context size has been exceeded";
 *   - sleeping: after sleep_idle_ms with no task the engine sleeps (the
 *     weights released, stats still answered without waking it, the cache
 *     empty); the next task wakes it and gives the same greedy tokens as
 *     before; a pool made before sleeping is evicted asleep and a session
 *     on it after waking gets the same tokens as before; eng_wake.
 * The engine checks its own invariants after every step (POLYKV_CHECK=1).
 */
#include "ref.h"

#include <stdlib.h>
#include <time.h>

#include "../src/engine/eng.h"
#include "../src/pool/pool.h"

typedef struct run {
    int32_t tok[256];
    int n;
    eng_event end;              /* DONE or ERROR */
} run;

static void collect(eng_task *t, run *r)
{
    memset(r, 0, sizeof *r);
    eng_event ev;
    while (eng_task_next(t, &ev, 20000) == PK_OK) {
        if (ev.kind == ENG_EV_TOKEN && r->n < 256) r->tok[r->n++] = ev.token;
        bool end = ev.kind == ENG_EV_DONE || ev.kind == ENG_EV_ERROR;
        if (end) r->end = ev;
        eng_event_clear(&ev);
        if (end) break;
    }
    eng_task_release(t);
}

static eng_completion greedy(const int32_t *p, int n, int n_predict)
{
    eng_completion c = { .prompt = p, .n_prompt = n, .n_predict = n_predict, .cache_prompt = true,
                         .id_slot = -1, .ignore_eos = true };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    return c;
}

static void run_one(eng *e, const eng_completion *c, run *r)
{
    eng_task *t;
    CHECK(eng_submit(e, c, &t) == PK_OK);
    collect(t, r);
}

static void pause_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static bool wait_asleep(eng *e, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (eng_is_sleeping(e)) return true;
        pause_ms(20);
    }
    return eng_is_sleeping(e);
}

static const eng_pool_info *pool_info(const eng_stats *st, int32_t id)
{
    for (int32_t i = 0; i < st->n_pools; i++)
        if (st->pools[i].pool_id == id) return &st->pools[i];
    return NULL;
}

static void unified(model *m, const int32_t *pr, int np)
{
    eng_params ep = eng_default_params();
    ep.n_slots = 4;
    ep.n_ctx = 256;
    ep.n_threads = 2;
    eng *e;

    /* Without: a slot holds 64 positions. */
    CHECK(eng_new(m, &ep, &e) == PK_OK);
    CHECK_EQ_INT(eng_n_ctx_slot(e), 64);
    eng_completion c = greedy(pr, np, 150);
    run r;
    run_one(e, &c, &r);
    CHECK_EQ_INT(r.end.kind, ENG_EV_DONE);
    CHECK_EQ_INT(r.end.stop, ENG_STOP_CTX);
    CHECK(r.n < 64);
    eng_free(e);

    /* With: the whole context. */
    ep.kv_unified = true;
    CHECK(eng_new(m, &ep, &e) == PK_OK);
    CHECK_EQ_INT(eng_n_ctx_slot(e), 256);
    static run alone;
    run_one(e, &c, &alone);
    CHECK_EQ_INT(alone.end.kind, ENG_EV_DONE);
    CHECK_EQ_INT(alone.end.stop, ENG_STOP_LIMIT);
    CHECK_EQ_INT(alone.n, 150);
    eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    CHECK(st.n_tokens_max > 64);

    /* Two of 150: 2 * (np + 149) cells > 256.  The older finishes with the
     * same tokens as alone, the newer is the one that ends. */
    eng_task *t1, *t2;
    c.cache_prompt = false;
    CHECK(eng_submit(e, &c, &t1) == PK_OK);
    CHECK(eng_submit(e, &c, &t2) == PK_OK);
    static run r1, r2;
    collect(t1, &r1);
    collect(t2, &r2);
    CHECK_EQ_INT(r1.end.kind, ENG_EV_DONE);
    CHECK_EQ_INT(r1.n, 150);
    CHECK(memcmp(r1.tok, alone.tok, 150 * sizeof(int32_t)) == 0);
    CHECK_EQ_INT(r2.end.kind, ENG_EV_ERROR);
    CHECK_EQ_INT(r2.end.status, PK_EFULL);
    CHECK(strstr(r2.end.message, "context size has been exceeded") != NULL);
    CHECK(r2.n < 150);
    /* ... and the engine goes on: the cells it held are free again. */
    run_one(e, &c, &r);
    CHECK_EQ_INT(r.end.kind, ENG_EV_DONE);
    CHECK_EQ_INT(r.n, 150);
    eng_free(e);
}

static void sleeping(model *m, const int32_t *pr, int np)
{
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 512;
    ep.n_threads = 2;
    ep.sleep_idle_ms = 300;
    eng *e;
    CHECK(eng_new(m, &ep, &e) == PK_OK);
    eng_completion c = greedy(pr, np, 24);
    static run before, after, on_pool, on_pool_after;
    run_one(e, &c, &before);
    CHECK_EQ_INT(before.n, 24);
    CHECK(!eng_is_sleeping(e));

    /* A pool of the prompt, and a session on it. */
    eng_pool_req rq = { .verb = ENG_POOL_CREATE, .tokens = pr, .n_tokens = np, .branch_pos = -1 };
    eng_pool_reply pr_;
    CHECK_EQ_INT(eng_pool_op(e, &rq, &pr_), PK_OK);
    eng_completion cp = c;
    cp.pool_id = pr_.pool_id;
    run_one(e, &cp, &on_pool);
    CHECK_EQ_INT(on_pool.n, 24);
    CHECK(memcmp(on_pool.tok, before.tok, 24 * sizeof(int32_t)) == 0);

    eng_stats awake;
    CHECK(eng_get_stats(e, &awake) == PK_OK);
    CHECK(awake.kv_used > 0);
    CHECK(wait_asleep(e, 5000));
    CHECK(model_weights_released(m));

    /* Stats answer without waking it: counters kept, the cache empty, the
     * pool evicted with its tokens. */
    eng_stats st;
    for (int i = 0; i < 3; i++) CHECK(eng_get_stats(e, &st) == PK_OK);
    CHECK(eng_is_sleeping(e));
    CHECK_EQ_INT(st.kv_used, 0);
    CHECK_EQ_INT(st.n_predicted_tokens, awake.n_predicted_tokens);
    CHECK_EQ_INT(st.n_requests_done, awake.n_requests_done);
    const eng_pool_info *pi = pool_info(&st, pr_.pool_id);
    CHECK(pi && pi->residency == POOL_EVICTED && pi->prefix_len == np);
    for (int i = 0; i < st.n_slots; i++) CHECK_EQ_INT(st.slots[i].hist_tokens, 0);

    /* The next task wakes it: the same greedy tokens. */
    run_one(e, &c, &after);
    CHECK(!eng_is_sleeping(e));
    CHECK(!model_weights_released(m));
    CHECK_EQ_INT(after.end.kind, ENG_EV_DONE);
    CHECK_EQ_INT(after.n, 24);
    CHECK(memcmp(after.tok, before.tok, 24 * sizeof(int32_t)) == 0);
    CHECK_EQ_INT(after.end.n_cached, 0);          /* the history went with the cache */

    /* The pool comes back on use. */
    run_one(e, &cp, &on_pool_after);
    CHECK_EQ_INT(on_pool_after.end.kind, ENG_EV_DONE);
    CHECK(memcmp(on_pool_after.tok, before.tok, 24 * sizeof(int32_t)) == 0);
    CHECK(eng_get_stats(e, &st) == PK_OK);
    pi = pool_info(&st, pr_.pool_id);
    CHECK(pi && pi->residency == POOL_RESIDENT);

    /* Asleep again; eng_wake wakes it and nothing else. */
    CHECK(wait_asleep(e, 5000));
    CHECK_EQ_INT(eng_wake(e), PK_OK);
    CHECK(!eng_is_sleeping(e));
    CHECK(!model_weights_released(m));
    CHECK(wait_asleep(e, 5000));                  /* and sleeps again once idle */
    eng_free(e);                                  /* stopping while asleep */
    CHECK(model_weights_released(m));
    model_weights_reload(m);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): engine checks need a model");
    setenv("POLYKV_CHECK", "1", 0);
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    model *m;
    ASSERT(model_load(path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    const char *text = "Once upon a time";
    int32_t pr[64];
    int np;
    ASSERT(tok_encode(model_vocab(m), text, strlen(text), true, false, pr, 64, &np) == PK_OK);

    TEST_RUN(unified, m, pr, np);
    TEST_RUN(sleeping, m, pr, np);

    model_free(m);
    return test_finish();
}
