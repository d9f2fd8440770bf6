/*
 * engine_paths.h - the engine's control-plane paths on a model whose
 * histories can be continued only at resume points (a hybrid's recurrent
 * state, sliding windows with their cells freed): greedy completions equal
 * greedy decoding with the model directly (a fresh context), for a first
 * prompt, its retry (from the checkpoint one token before its end), a next
 * turn that extends the transcript (from the history's end), a rewritten
 * last message (from a checkpoint), a slot saved, erased and restored, a
 * history parked by other sessions or restored from the RAM tier, and
 * sessions on a pool; a fork where the pool cannot be continued is
 * refused.  eng_check runs after every step (POLYKV_CHECK=1, as
 * tests/run.sh sets it).  Used by test_hybrid and test_swa; header-only so
 * each test stays one file.
 */
#ifndef ENGINE_PATHS_H
#define ENGINE_PATHS_H

#include <stdlib.h>
#include <unistd.h>

#include "ref.h"
#include "../src/engine/eng.h"

static model *ep_m;
static const int32_t *ep_tok;   /* [256] tokens the prompts are made of */


typedef struct run {
    int32_t tok[64];
    int n_tok;
    int32_t n_cached, slot;
    eng_ev_kind end;
} run;

static int32_t ep_pool;   /* the pool the completions attach to, 0: none */

/* A greedy completion of n_gen tokens through the engine (slot -1: any). */
static run complete(eng *e, const int32_t *prompt, int n, int n_gen, int32_t slot)
{
    eng_completion c = { .prompt = prompt, .n_prompt = n, .n_predict = n_gen, .cache_prompt = true,
                         .id_slot = slot, .ignore_eos = true, .report_placed = true, .pool_id = ep_pool };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    run r = { .n_cached = -1, .slot = -1 };
    eng_task *t;
    CHECK_EQ_INT(eng_submit(e, &c, &t), PK_OK);
    eng_event ev;
    while (eng_task_next(t, &ev, 60000) == PK_OK) {
        eng_ev_kind k = ev.kind;
        if (k == ENG_EV_PLACED) r.n_cached = ev.n_cached, r.slot = ev.slot;
        if (k == ENG_EV_TOKEN && r.n_tok < 64) r.tok[r.n_tok++] = ev.token;
        eng_event_clear(&ev);
        if (k != ENG_EV_TOKEN && k != ENG_EV_PLACED && k != ENG_EV_PROGRESS) {
            r.end = k;
            break;
        }
    }
    eng_task_release(t);
    return r;
}

/* The engine's run of prompt equals the model's own greedy run. */
static run check_run(eng *e, const int32_t *prompt, int n, int32_t slot, const char *what)
{
    enum { G = 12 };
    int32_t want[G];
    CHECK_EQ_INT(ref_greedy(ep_m, prompt, n, G, want), G);   /* no end of generation in it */
    run r = complete(e, prompt, n, G, slot);
    CHECK_EQ_INT(r.n_tok, G);
    bool eq = r.n_tok == G && !memcmp(r.tok, want, sizeof want);
    CHECK(eq);
    printf("%-28s %3d prompt tokens, %3d reused, greedy %s\n", what, n, r.n_cached, eq ? "equal" : "DIFFERS");
    return r;
}

/* ram: the RAM tier on (the pushed-out history is spilled there) or off
 * (it is parked in the cache). */
static void case_engine(bool ram)
{
    eng_params ep = eng_default_params();
    if (!ram) ep.cache_ram_mib = 0, ep.policy.park_min_value = 0;   /* a short history is parked too */
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(ep_m, &ep, &e) == PK_OK);
    static int32_t p[512];
    int n = 80;
    memcpy(p, ep_tok, (size_t)n * sizeof *p);
    run r = check_run(e, p, n, -1, "first prompt");
    CHECK_EQ_INT(r.n_cached, 0);
    r = check_run(e, p, n, -1, "retry");
    CHECK_EQ_INT(r.n_cached, n - 1);                 /* the checkpoint before the prompt's end */
    /* the next turn: the transcript with the reply, then more */
    memcpy(p + n, r.tok, 12 * sizeof *p);
    memcpy(p + n + 12, ep_tok + 100, 30 * sizeof *p);
    int n2 = n + 42;
    r = check_run(e, p, n2, -1, "next turn");
    CHECK(r.n_cached >= n + 11);                    /* the history's end (the last reply token is not in it) */
    /* a classifier rewrites the last message: from the checkpoint at the
     * previous prompt's end */
    p[n2 - 5] = 7;
    r = check_run(e, p, n2, -1, "last message rewritten");
    CHECK(r.n_cached >= n - 1 && r.n_cached < n2 - 5);
    /* a slot saved, erased, restored into the other slot, continued */
    char dir[] = "/tmp/polykv-paths-XXXXXX";
    ASSERT(mkdtemp(dir));
    eng_file_reply fr;
    CHECK_EQ_INT(eng_slot_save(e, r.slot, dir, "h.bin", &fr), PK_OK);
    int32_t saved = fr.n_tokens;
    CHECK_EQ_INT(eng_erase(e, 0, NULL), PK_OK);
    CHECK_EQ_INT(eng_erase(e, 1, NULL), PK_OK);
    CHECK_EQ_INT(eng_slot_restore(e, 1 - r.slot, dir, "h.bin", &fr), PK_OK);
    CHECK_EQ_INT(fr.n_tokens, saved);
    memcpy(p + n2, r.tok, 12 * sizeof *p);
    int n3 = n2 + 12;
    r = check_run(e, p, n3, -1, "after save and restore");
    CHECK(r.n_cached >= saved - 1);
    char path[128];
    snprintf(path, sizeof path, "%s/h.bin", dir);
    unlink(path);
    rmdir(dir);
    /* two other sessions at once take both slots: the history is parked
     * (or spilled to RAM); its next turn still finds it */
    static int32_t o[2][200];
    eng_task *t[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 120; i++) o[k][i] = ep_tok[(i * 7 + k * 13) % 256] + k;
        eng_completion c = { .prompt = o[k], .n_prompt = 120, .n_predict = 8, .cache_prompt = true,
                             .id_slot = -1, .ignore_eos = true };
        c.sp = smp_default_params();
        CHECK_EQ_INT(eng_submit(e, &c, &t[k]), PK_OK);
    }
    for (int k = 0; k < 2; k++) {
        eng_event ev;
        while (eng_task_next(t[k], &ev, 60000) == PK_OK) {
            bool end = ev.kind != ENG_EV_TOKEN && ev.kind != ENG_EV_PLACED && ev.kind != ENG_EV_PROGRESS;
            eng_event_clear(&ev);
            if (end) break;
        }
        eng_task_release(t[k]);
    }
    eng_stats st;
    CHECK_EQ_INT(eng_get_stats(e, &st), PK_OK);
    CHECK(ram ? st.n_spilled >= 1 : st.n_parked >= 1);
    printf("out of its slot: %d parked, %d in RAM\n", st.n_parked, st.n_spilled);
    for (int i = 0; getenv("SHOW_EVENTS") && i < st.n_events; i++)
        printf("  event %d slot %d seq %d n %d: %s\n", st.events[i].kind, st.events[i].slot, st.events[i].seq,
               st.events[i].n_tokens, st.events[i].reason);
    memcpy(p + n3, r.tok, 12 * sizeof *p);
    int n4 = n3 + 12;
    r = check_run(e, p, n4, -1, "parked or in RAM");
    CHECK(r.n_cached >= n3);
    eng_free(e);
}

/* A pool: sessions attach from its end; a fork inside it is refused (409
 * in HTTP) where the pool has no state, and accepted at its end. */
static void case_pool(void)
{
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 2;
    ep.n_batch = 16;   /* the pool is made in chunks: a window's cells go behind it */
    eng *e;
    ASSERT(eng_new(ep_m, &ep, &e) == PK_OK);
    enum { L = 60 };
    eng_pool_req rq = { .verb = ENG_POOL_CREATE, .tokens = ep_tok, .n_tokens = L, .branch_pos = -1 };
    eng_pool_reply rp;
    CHECK_EQ_INT(eng_pool_op(e, &rq, &rp), PK_OK);
    ep_pool = rp.pool_id;
    static int32_t p[256];
    memcpy(p, ep_tok, L * sizeof *p);
    for (int k = 0; k < 2; k++) {
        memcpy(p + L, ep_tok + 100 + 20 * k, 20 * sizeof *p);
        run r = check_run(e, p, L + 20, -1, k ? "second sequence on the pool" : "a sequence on the pool");
        CHECK_EQ_INT(r.n_cached, L);
    }
    ep_pool = 0;
    memcpy(p, ep_tok, L * sizeof *p);
    memcpy(p + L, ep_tok + 200, 10 * sizeof *p);
    eng_pool_req fk = { .verb = ENG_POOL_FORK, .pool_id = rp.pool_id, .tokens = p, .n_tokens = L + 10,
                        .branch_pos = 30 };
    eng_pool_reply fr;
    CHECK_EQ_INT(eng_pool_op(e, &fk, &fr), PK_ECONFLICT);
    printf("fork at 30: %s\n", fr.message);
    fk.branch_pos = L;
    CHECK_EQ_INT(eng_pool_op(e, &fk, &fr), PK_OK);
    CHECK_EQ_INT(fr.n_prefilled, 10);
    eng_free(e);
}

static inline void engine_paths_check(model *m, const int32_t *tok)
{
    ep_m = m, ep_tok = tok;
    TEST_RUN(case_engine, true);
    TEST_RUN(case_engine, false);
    TEST_RUN(case_pool);
}

#endif
