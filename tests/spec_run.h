/*
 * spec_run.h - what the speculation tests (test_spec, test_draft) share:
 * a greedy request that names its proposer, and a task's tokens and DONE
 * collected.  Header-only so each test stays one file.
 */
#ifndef SPEC_RUN_H
#define SPEC_RUN_H

#include <string.h>

#include "../src/engine/eng.h"

#define SPEC_RUN_MAX 256        /* tokens a collected task keeps */

typedef struct collected {
    int32_t tok[SPEC_RUN_MAX];
    int n_tok;
    eng_event done;
} collected;

/* t's tokens until its end (at most 60 s between events), then t released. */
static inline void collect(eng_task *t, collected *c)
{
    memset(c, 0, sizeof *c);
    eng_event ev;
    while (eng_task_next(t, &ev, 60000) == PK_OK) {
        if (ev.kind == ENG_EV_TOKEN) {
            if (c->n_tok < SPEC_RUN_MAX) c->tok[c->n_tok++] = ev.token;
            eng_event_clear(&ev);
        } else {
            c->done = ev;
            eng_event_clear(&ev);
            break;
        }
    }
    eng_task_release(t);
}

/* A greedy completion of p[0..n) with proposer kind, no cache reuse. */
static inline eng_completion req(const int32_t *p, int n, int n_predict, spec_kind kind)
{
    eng_completion c = { .prompt = p, .n_prompt = n, .n_predict = n_predict, .cache_prompt = false, .id_slot = -1,
                         .has_spec_kind = true, .spec_kind = kind };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    return c;
}

/* One prompt sampled at temperature 1 with seed, without speculation and
 * with proposer kind: true when both drew the same tokens; *done the
 * speculating run's DONE. */
static inline bool seeded_same(eng *e, const int32_t *p, int n, int n_gen, uint64_t seed, spec_kind kind,
                               eng_event *done)
{
    collected got[2];
    memset(done, 0, sizeof *done);
    for (int sp = 0; sp < 2; sp++) {
        eng_completion c = req(p, n, n_gen, sp ? kind : SPEC_NONE);
        c.sp.temp = 1.0f;
        c.sp.seed = seed;
        eng_task *t;
        if (eng_submit(e, &c, &t) != PK_OK) return false;
        collect(t, &got[sp]);
    }
    *done = got[1].done;
    return got[0].n_tok == got[1].n_tok && !memcmp(got[0].tok, got[1].tok, sizeof(int32_t) * (size_t)got[0].n_tok);
}

/* Greedy text of p[0..n) (n_gen tokens) with tokens banned (logit bias
 * -inf), with proposer kind and without (in that order: the speculating
 * run goes first, so an n-gram store holds only the text without the ban):
 * true when both wrote the same tokens; *done the speculating run's DONE.
 * The ban is what makes guesses wrong: proposers do not see biases. */
static inline bool banned_same(eng *e, const int32_t *p, int n, int n_gen, const eng_bias *ban, int n_ban,
                               spec_kind kind, eng_event *done)
{
    collected r[2];
    memset(done, 0, sizeof *done);
    for (int sp = 1; sp >= 0; sp--) {
        eng_completion c = req(p, n, n_gen, sp ? kind : SPEC_NONE);
        c.bias = ban;
        c.n_bias = n_ban;
        eng_task *t;
        if (eng_submit(e, &c, &t) != PK_OK) return false;
        collect(t, &r[sp]);
    }
    *done = r[1].done;
    return r[0].n_tok == r[1].n_tok && !memcmp(r[0].tok, r[1].tok, sizeof(int32_t) * (size_t)r[0].n_tok);
}

#endif
