/*
 * eng_spec.c - speculation's part of an engine step: which guesses a
 * decoding session verifies, what is counted when the sampler has judged
 * them, and the cells of guesses not kept.  The verification itself is
 * sample_and_emit's (eng.c): row j of a session's logits is sampled
 * exactly as without speculation, and guess j is kept when the sampled
 * token equals it.  A guess is a fixed token, so keeping it when the
 * draw agrees leaves every token's distribution the sampler's own (the
 * rejection rule min(1, p/q) with q one-hot), and seeded runs draw the
 * same RNG sequence: the text is the text without speculation.
 */
#include <stdlib.h>
#include <string.h>

#include "../grammar/gram.h"
#include "eng_impl.h"

#define STORE_CONTEXT 64        /* prompt tokens stored before a generation */
/* Verifications keeping nothing before a pause, and the first pause: a
 * draft model's guesses cost a pass of the draft each, an n-gram's only
 * its rows in the step, so a draft gives up sooner and for longer.  Each
 * miss after a pause doubles it, up to 256 tokens (512 for a draft). */
#define MISSES_BEFORE_SKIP 4
#define DRAFT_MISSES_BEFORE_SKIP 2

/* The store, made at start on an ngram-cache server and at the first
 * ngram-cache request on another.  False when memory is short. */
static bool store_ready(eng *e)
{
    return e->spec_store || spec_store_new(e->p.spec.store_tokens, e->p.spec.key_min, &e->spec_store) == PK_OK;
}

pk_status eng_spec_init(eng *e)
{
    return e->p.spec.kind != SPEC_NGRAM_CACHE || store_ready(e) ? PK_OK : PK_ENOMEM;
}

void eng_spec_free(eng *e)
{
    spec_store_free(e->spec_store);
    e->spec_store = NULL;
}

/* Room in the logits for ENG_SPEC_STEP more rows, made at the first
 * guess (a 150k vocabulary's 64 rows are 38 MB). */
static bool rows_ready(eng *e)
{
    int32_t want = e->p.n_slots + ENG_SPEC_STEP;
    if (e->batch.n_rows >= want) return true;
    float *l = realloc(e->batch.logits, (size_t)want * e->n_vocab * sizeof *l);
    if (!l) return false;
    e->batch.logits = l;
    e->batch.n_rows = want;
    return true;
}

/* Where a session's text worth guessing from starts: its prompt's last
 * STORE_CONTEXT tokens, then what it wrote. */
static int32_t written_from(const slot *s) { return MAX(0, MIN(s->n_prompt, s->n_hist) - STORE_CONTEXT); }

/* A lookup's n guesses (key length l) replace s's got (key *key) when
 * their key is longer. */
static void keep_longer(slot *s, const int32_t *alt, int32_t n, int32_t l, int32_t *got, int32_t *key)
{
    if (n <= 0 || l <= *key) return;
    memcpy(s->draft, alt, (size_t)n * sizeof *alt);
    *got = n;
    *key = l;
}

int32_t eng_spec_limit(const eng *e, const slot *s)
{
    const eng_completion *rq = &s->task->req;
    int32_t n_max = rq->has_spec_n_max ? rq->spec_n_max : e->p.spec.n_max;
    /* Room for every guess and the token after them inside the slot's
     * context (on_token's rule), and no guess past n_predict. */
    int32_t lim = MIN(MIN(n_max, s->spec_k), ENG_SPEC_MAX);
    lim = MIN(lim, e->n_ctx_slot - s->n_hist - 2);
    if (rq->n_predict >= 0) lim = MIN(lim, rq->n_predict - s->n_gen - 1);
    return lim;
}

int32_t eng_spec_propose(eng *e, slot *s, int32_t budget)
{
    s->n_draft = 0;
    const eng_completion *rq = &s->task->req;
    const spec_params *sp = &e->p.spec;
    spec_kind kind = eng_spec_kind(e, s);
    int32_t n_min = MAX(rq->has_spec_n_min ? rq->spec_n_min : sp->n_min, 1);
    if (kind == SPEC_NONE || s->n_replay > 0) return 0;
    if (s->spec_skip > 0) {
        s->spec_skip--;
        return 0;
    }
    int32_t lim = MIN(eng_spec_limit(e, s), budget);
    if (lim < n_min) return 0;
    if (kind == SPEC_NGRAM_CACHE && !store_ready(e)) return 0;
    /* The context ends with next_token, which this step decodes at
     * position n_hist (hist has room: n_hist + 1 < n_ctx_slot). */
    s->hist[s->n_hist] = s->next_token;
    int32_t n = s->n_hist + 1, key = 0, got;
    if (kind == SPEC_DRAFT_SIMPLE || kind == SPEC_DRAFT_MTP) {
        got = eng_draft_take(s, lim);
    } else if (kind == SPEC_NGRAM_SIMPLE) {
        got = spec_ngram_lookup(s->hist, n, sp->size_n, sp->size_n, s->draft, MIN(lim, sp->size_m), &key);
    } else {
        got = spec_ngram_lookup(s->hist, n, sp->key_min, sp->key_max, s->draft, lim, &key);
        /* A longer key in other sessions' text: the store of finished
         * ones, then the sessions running beside it (a sibling sub-agent a
         * few tokens behind another writing the same tool call follows it
         * before it has finished). */
        int32_t alt[ENG_SPEC_MAX], got2, key2;
        if (key < sp->key_max) {
            got2 = spec_store_lookup(e->spec_store, s->hist, n, sp->key_max, alt, lim, &key2);
            keep_longer(s, alt, got2, key2, &got, &key);
        }
        for (int32_t i = 0; i < e->p.n_slots && key < sp->key_max; i++) {
            const slot *o = &e->slots[i];
            if (o == s || o->state != ENG_SLOT_DECODE) continue;
            int32_t from = written_from(o);
            got2 = spec_ngram_lookup_in(o->hist + from, o->n_hist - from, s->hist, n, sp->key_min, sp->key_max, alt,
                                        lim, &key2);
            keep_longer(s, alt, got2, key2, &got, &key);
        }
    }
    /* Only the guesses worth their rows (spec.h, spec_gain). */
    if (kind == SPEC_NGRAM_SIMPLE || kind == SPEC_NGRAM_CACHE) {
        double th = sp->ngram_p_min;
        if (th < 0) {                          /* auto: the row's cost with the sessions decoding now */
            int32_t n_dec = 0;
            for (int32_t i = 0; i < e->p.n_slots; i++) n_dec += e->slots[i].state == ENG_SLOT_DECODE;
            th = spec_gain_threshold(&e->spec_gain, n_dec);
        }
        got = spec_gain_cut(&e->spec_gain, key, got, th);
    }
    s->spec_key = key;
    /* A constrained session guesses only what its grammar allows: the
     * guesses are run through its matcher, which is then set back. */
    if (s->gm && got > 0) {
        int32_t at = gram_matcher_state(s->gm), ok = 0;
        for (; ok < got; ok++) {
            if (gram_matcher_accept(s->gm, s->draft[ok]) != PK_OK) break;
            if (gram_matcher_done(s->gm)) {   /* it completes the output: nothing follows */
                ok++;
                break;
            }
        }
        gram_matcher_set_state(s->gm, at);
        got = ok;
    }
    for (int32_t j = 0; j < got; j++)         /* nothing follows an end of generation either */
        if (tok_is_eog(model_vocab(e->m), s->draft[j])) got = j + 1;
    /* On a hybrid the step starts with a checkpoint to come back to. */
    if (got < n_min || !rows_ready(e) || !mem_spec_begin(e->mem, s->id, s->n_hist)) return 0;
    s->spec_pos0 = s->n_hist;
    return s->n_draft = got;
}

spec_kind eng_spec_kind(const eng *e, const slot *s)
{
    const eng_completion *rq = &s->task->req;
    return rq->has_spec_kind ? rq->spec_kind : e->p.spec.kind;
}

void eng_spec_judged(eng *e, slot *s, int32_t n_kept)
{
    if (s->n_draft == 0) return;
    spec_kind kind = eng_spec_kind(e, s);
    if (kind == SPEC_NGRAM_SIMPLE || kind == SPEC_NGRAM_CACHE)
        spec_gain_judged(&e->spec_gain, s->spec_key, s->n_draft, n_kept);
    if (n_kept == s->n_draft) {
        s->spec_k = MIN(ENG_SPEC_MAX, s->spec_k * 2);
        s->spec_misses = 0;
    } else {
        s->spec_k = n_kept + 1;
        if (n_kept > 0) s->spec_misses = 0;
        else if (kind == SPEC_DRAFT_SIMPLE || kind == SPEC_DRAFT_MTP) {
            if (++s->spec_misses >= DRAFT_MISSES_BEFORE_SKIP)
                s->spec_skip = 16 << MIN(s->spec_misses - DRAFT_MISSES_BEFORE_SKIP, 5);
        } else if (++s->spec_misses >= MISSES_BEFORE_SKIP) {  /* nothing pays here: back off, longer each time */
            s->spec_skip = MIN(8 << MIN(s->spec_misses - MISSES_BEFORE_SKIP, 5), 256);
        }
    }
    s->n_draft = 0;
    eng_spec_trim(e, s);
}

void eng_spec_trim(eng *e, slot *s)
{
    if (s->spec_pos0 < 0) return;
    kv_pos at = mem_spec_end(e->mem, s->id, s->spec_pos0, s->n_hist);
    s->n_replay = s->n_hist - at;         /* a hybrid's state went back: decoded again */
    s->n_hist = at;
    s->spec_pos0 = -1;
}

void eng_spec_finished(eng *e, slot *s)
{
    if (!e->spec_store || s->n_gen == 0) return;
    int32_t from = written_from(s);
    spec_store_add(e->spec_store, s->hist + from, s->n_hist - from);
}
