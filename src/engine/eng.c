/*
 * eng.c - the engine thread's loop: slots, continuous batching, sampling,
 * stop conditions and speed counters.  See eng.h for the design; the
 * mailbox and the calls other threads make are eng_api.c.
 *
 *   One step, named as the loop calls them:
 *     eng_take_mailbox -> drop_cancelled -> eng_place_waiting -> build_batch
 *     -> decode -> sample_and_emit -> eng_admit_step -> publish [-> eng_check]
 *
 *   slot[i] decodes under sequence i.  Its `cache` mirrors the tokens
 *   whose state is in that sequence (positions 0..n_hist-1), which is what
 *   the prompt cache matches new prompts against.
 */
#include "eng.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/buf.h"
#include "../common/utf8.h"
#include "../grammar/gram.h"
#include "../save/sav.h"
#include "eng_impl.h"

eng_params eng_default_params(void)
{
    return (eng_params){ .n_slots = 4, .n_ctx = 8192, .n_batch = 512, .n_batch_decoding = 0, .n_threads = 1,
                         .type_k = TQ_F16, .type_v = TQ_F16, .tps_window_tokens = 128, .tps_window_ms = 2000,
                         .policy = pol_params_default(), .cache_ram_mib = 8192, .n_pools = 16,
                         .pool_grace_ms = 30000, .admission = adm_policy_default(),
                         .spec = spec_params_default(), .kv_block_size = 16 };
}

const eng_params *eng_get_params(const eng *e) { return &e->p; }
int32_t eng_n_ctx_slot(const eng *e) { return e->n_ctx_slot; }
int32_t eng_n_states(const eng *e) { return model_state_bytes(e->m) ? eng_ctx_params(e).n_rs : 0; }
int32_t eng_window(const eng *e) { return mem_window(e->mem); }
const model *eng_model(const eng *e) { return e->m; }

/* ---- events ---- */

/* Where a stop string starts in s (length n), or -1; *partial gets the
 * longest tail of s that is a prefix of some stop string (text to hold back). */
static long find_stop(const eng_task *t, const char *s, size_t n, size_t *partial, const char **word)
{
    *partial = 0;
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        const char *w = t->stop[i];
        size_t wl = strlen(w);
        const char *hit = wl <= n ? memmem(s, n, w, wl) : NULL;
        if (hit && (best < 0 || hit - s < best)) {
            best = hit - s;
            *word = w;
        }
        for (size_t k = MIN(wl - 1, n); k > *partial; k--)
            if (!memcmp(s + n - k, w, k)) {
                *partial = k;
                break;
            }
    }
    return best;
}

static void emit_token(slot *s, int32_t id, float lp, const smp_logprob *top, int32_t n_top,
                       size_t upto)
{
    eng_event ev = { .kind = ENG_EV_TOKEN, .token = id, .logprob = lp, .n_top = n_top };
    memcpy(ev.top, top, (size_t)n_top * sizeof *top);
    size_t n = upto > s->text_sent ? upto - s->text_sent : 0;
    ev.text = malloc(n + 1);
    if (ev.text) {
        memcpy(ev.text, s->text + s->text_sent, n);
        ev.text[n] = 0;
        ev.text_len = n;
        s->text_sent += n;
    }
    eng_task_push(s->task, &ev);
}

static void slot_release(eng *e, slot *s)
{
    eng_task_unref(s->task);
    s->task = NULL;
    s->state = ENG_SLOT_IDLE;
    eng_spec_trim(e, s);
    /* This step's guesses and re-run are judged with it (a failed step
     * leaves them set): an idle slot's history is n_hist as it stands. */
    s->n_draft = s->n_replay = s->n_replay_step = 0;
    eng_history_done(e, s);
}

/* Keeps a finished task's matcher for the next task on an equal grammar
 * (agents repeat their schemas: the next one starts with its masks built). */
static void park_matcher(eng *e, gram_matcher *m)
{
    if (!m) return;
    if (!gram_matcher_reset(m)) { gram_matcher_free(m); return; }
    int32_t cap = (int32_t)ARRAY_LEN(e->batch.gram_idle);
    if (e->batch.n_gram_idle == cap) {
        gram_matcher_free(e->batch.gram_idle[0]);
        memmove(e->batch.gram_idle, e->batch.gram_idle + 1, (size_t)(cap - 1) * sizeof *e->batch.gram_idle);
        e->batch.n_gram_idle--;
    }
    e->batch.gram_idle[e->batch.n_gram_idle++] = m;
}

/* A parked matcher for g (newest first), or a new one; NULL out of memory. */
static gram_matcher *take_matcher(eng *e, gram_grammar *g)
{
    for (int32_t i = e->batch.n_gram_idle - 1; i >= 0; i--) {
        gram_matcher *m = e->batch.gram_idle[i];
        if (!gram_equal(gram_matcher_grammar(m), g)) continue;
        memmove(e->batch.gram_idle + i, e->batch.gram_idle + i + 1, (size_t)(e->batch.n_gram_idle - i - 1) * sizeof *e->batch.gram_idle);
        e->batch.n_gram_idle--;
        return m;
    }
    gram_matcher *m = NULL;
    return gram_matcher_new(g, e->batch.gvocab, &m) == PK_OK ? m : NULL;
}

/* What was published is about to change (a control message, a task's
 * end): readers ask the engine until the next step publishes again
 * (read-your-writes). */
void eng_unpublish(eng *e)
{
    if (!e->pub.copy) return;
    pthread_mutex_lock(&e->pub.pub_mu);
    e->pub.copy->valid = false;
    pthread_mutex_unlock(&e->pub.pub_mu);
}

static void finish(eng *e, slot *s, eng_stop why, const char *word)
{
    double now = pk_time_ms();
    eng_event ev = { .kind = ENG_EV_DONE, .stop = why, .slot = s->id, .n_prompt = s->n_prompt,
                     .n_cached = s->n_cached, .n_gen = s->n_gen, .truncated = s->truncated,
                     .pool_id = s->pool_id, .pool_shared = s->pool_shared,
                     .prompt_ms = s->t_prompt_ms - s->t_start_ms,
                     .gen_ms = s->n_gen > 0 ? now - s->t_prompt_ms : 0,
                     .n_drafted = s->n_drafted, .n_accepted = s->n_accepted };
    if (word) snprintf(ev.stop_word, sizeof ev.stop_word, "%s", word);
    park_matcher(e, s->gm);
    s->gm = NULL;
    eng_spec_finished(e, s);
    e->stat.n_predicted_tokens += (uint64_t)s->n_gen;
    e->stat.predicted_ms_total += ev.gen_ms;
    e->stat.n_done++;
    /* The copy readers are answered from still shows this task running
     * until the step ends; a client that asks right after its DONE must
     * not be told so (it read its own agent as decoding, and a spawner
     * the wrong count). */
    eng_unpublish(e);
    eng_task_push(s->task, &ev);
    slot_release(e, s);
}

/* A running task ends with an ERROR (out of memory while it ran): its
 * cells stay as the slot's history, as after a DONE. */
static void fail_running(eng *e, slot *s, pk_status st, const char *why)
{
    gram_matcher_free(s->gm);
    s->gm = NULL;
    eng_unpublish(e);
    eng_task_fail(s->task, st, why);
    slot_release(e, s);
}

static bool text_append(slot *s, const char *p, size_t n)
{
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = (s->text_cap + n + 1) * 2;
        char *t = realloc(s->text, cap);
        if (!t) return false;
        s->text = t;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    return true;
}

/* The context of slot s is full.  With --context-shift and cells of its
 * own only, drops n_discard tokens after n_keep (half the rest by default,
 * as llama.cpp does) and moves the rest down, K rows rotated; returns true
 * when there is room again.  A slot that shares any cell (a pool, another
 * slot, a history) never moves them: shared cells are immutable. */
static bool ctx_shift(eng *e, slot *s)
{
    if (!e->p.ctx_shift) return false;
    s->truncated = true;
    const eng_completion *rq = &s->task->req;
    int32_t n_keep = rq->n_keep < 0 ? s->n_prompt : MIN(rq->n_keep, s->n_hist - 2);
    n_keep = MAX(n_keep, s->n_hist > 0 && s->hist[0] == tok_bos(model_vocab(e->m)) ? 1 : 0);   /* BOS stays */
    int32_t left = s->n_hist - n_keep;
    int32_t n_discard = rq->n_discard > 0 ? MIN(rq->n_discard, left - 1) : left / 2;
    if (n_discard < 1) return false;
    pk_status st = mem_shift(e->mem, s->id, n_keep, n_discard);
    if (st == PK_ECONFLICT) return false;
    if (st != PK_OK) {
        s->n_hist = n_keep;
        return false;
    }
    memmove(s->hist + n_keep, s->hist + n_keep + n_discard,
            (size_t)(s->n_hist - n_keep - n_discard) * sizeof *s->hist);
    s->n_hist -= n_discard;
    return true;
}

/* A token was sampled for slot s: stream it and decide whether to go on. */
static void on_token(eng *e, slot *s, int32_t id, float lp, const smp_logprob *top, int32_t n_top)
{
    eng_task *t = s->task;
    s->n_gen++;
    if (tok_is_eog(model_vocab(e->m), id) && !t->req.ignore_eos) {
        emit_token(s, id, lp, top, n_top, s->text_len);
        finish(e, s, ENG_STOP_EOS, NULL);
        return;
    }
    char piece[256];
    int32_t n = tok_piece(model_vocab(e->m), id, piece, sizeof piece, false);
    if (n < 0 || !text_append(s, piece, (size_t)n)) {
        fail_running(e, s, PK_ENOMEM, "out of memory for the generated text");   /* never a "length" stop */
        return;
    }
    smp_accept(s->smp, id);
    /* The mask allowed only this grammar's tokens, so accept cannot fail;
     * a complete grammar ends the output as an end-of-generation would. */
    if (s->gm && (gram_matcher_accept(s->gm, id) != PK_OK || gram_matcher_done(s->gm))) {
        emit_token(s, id, lp, top, n_top, s->text_len);
        finish(e, s, ENG_STOP_EOS, NULL);
        return;
    }
    const char *word = NULL;
    size_t partial = 0;
    long at = find_stop(t, s->text + s->text_sent, s->text_len - s->text_sent, &partial, &word);
    if (at >= 0) {
        s->text_len = s->text_sent + (size_t)at;
        emit_token(s, id, lp, top, n_top, s->text_len);
        finish(e, s, ENG_STOP_WORD, word);
        return;
    }
    size_t upto = s->text_sent + tok_utf8_complete(s->text + s->text_sent, s->text_len - s->text_sent);
    upto = MIN(upto, s->text_len - partial);
    bool done = t->req.n_predict >= 0 && s->n_gen >= t->req.n_predict;
    /* llama-server's rule: a slot stops (or shifts) once its cache plus the
     * token just sampled would fill the context, so the last token sampled
     * always has a cell to go to: a prompt of P tokens gets n_ctx - P. */
    bool full = !done && s->n_hist + 1 >= e->n_ctx_slot;
    if (full && ctx_shift(e, s)) full = false;
    if (full) s->truncated = true;                /* it ends here: say so */
    emit_token(s, id, lp, top, n_top, done || full ? s->text_len : upto);
    if (done) finish(e, s, ENG_STOP_LIMIT, NULL);
    else if (full) finish(e, s, ENG_STOP_CTX, NULL);
    else s->next_token = id;
}

/* ---- starting a task ---- */

/* The vocabulary's bytes for grammar masks, once (about 50 ms for 150k
 * tokens), and the masked row.  False on memory exhaustion. */
static bool gram_ready(eng *e)
{
    if (e->batch.gvocab) return true;
    int64_t *off = malloc((size_t)(e->n_vocab + 1) * sizeof *off);
    bool *eog = calloc((size_t)e->n_vocab, sizeof *eog);
    pk_buf b = {0};
    if (!off || !eog) goto out;
    for (int32_t i = 0; i < e->n_vocab; i++) {
        char piece[256];
        off[i] = (int64_t)b.n;
        eog[i] = tok_is_eog(model_vocab(e->m), i);
        int32_t n = tok_piece(model_vocab(e->m), i, piece, sizeof piece, false);
        if (n > 0 && !eog[i]) pk_buf_put(&b, piece, (size_t)n);   /* longer pieces: never allowed */
    }
    off[e->n_vocab] = (int64_t)b.n;
    if (!b.oom && !(e->batch.gram_logits = malloc((size_t)e->n_vocab * sizeof *e->batch.gram_logits))) b.oom = true;
    if (!b.oom) gram_vocab_new(e->n_vocab, b.p ? b.p : "", off, eog, &e->batch.gvocab);
out:
    free(off);
    free(eog);
    pk_buf_free(&b);
    return e->batch.gvocab != NULL;
}

bool eng_slot_prepare(eng *e, eng_task *t, eng_slot_res *out)
{
    *out = (eng_slot_res){ 0 };
    if (t->req.grammar && (!gram_ready(e) || !(out->gm = take_matcher(e, t->req.grammar)))) {
        eng_task_fail(t, PK_ENOMEM, "out of memory for the grammar");
        return false;
    }
    if (smp_new(&t->req.sp, e->n_vocab, e->n_ctx_slot, &out->smp)) {
        gram_matcher_free(out->gm);
        eng_task_fail(t, PK_ENOMEM, "out of memory for the sampler");
        return false;
    }
    return true;
}

void eng_slot_start(eng *e, slot *s, eng_task *t, eng_slot_res *res)
{
    smp_ctx *smp = res->smp;
    gram_matcher *gm = res->gm;
    gram_matcher_free(s->gm);
    s->gm = gm;
    smp_free(s->smp);
    s->smp = smp;
    s->n_prefilled = s->n_hist;
    s->n_cached = s->n_hist;
    s->n_prompt = t->req.n_prompt;
    s->n_gen = 0;
    s->truncated = false;
    s->text_len = s->text_sent = 0;
    s->rate = (adm_rate){ 0 };
    s->n_drafted = s->n_accepted = s->n_verify_steps = 0;
    s->n_draft = s->spec_misses = s->spec_skip = s->n_replay = s->n_replay_step = 0;
    s->spec_pos0 = -1;
    s->spec_k = ENG_SPEC_MAX;
    s->moved = false;
    s->task = t;
    s->task_id = t->id;
    s->state = ENG_SLOT_PREFILL;
    s->t_start_ms = pk_time_ms();
    s->has_params = true;
    s->last_sp = t->req.sp;
    s->last_n_predict = t->req.n_predict;
    for (int32_t i = 0; i < t->req.n_prompt; i++) smp_accept(smp, t->prompt[i]);
}

/* ---- the loop ---- */

bool eng_running(const eng *e)
{
    for (int32_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state != ENG_SLOT_IDLE) return true;
    return false;
}

bool eng_has_work(const eng *e)
{
    return e->wq.n_waiting > 0 || eng_pool_busy(e) || eng_running(e);
}

static void drop_cancelled(eng *e)
{
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_IDLE && atomic_load(&s->task->cancelled)) {
            eng_task_fail(s->task, PK_ECANCELLED, "cancelled");
            slot_release(e, s);
        }
    }
}

void eng_batch_add(eng *e, int32_t *n, int32_t tok, kv_pos pos, kv_seq seq, bool want)
{
    e->batch.b_tok[*n] = tok;
    e->batch.b_pos[*n] = pos;
    e->batch.b_nseq[*n] = 1;
    e->batch.b_seq[*n][0] = seq;
    e->batch.b_want[*n] = want;
    (*n)++;
}

/* The batch of one step: the next token of every decoding slot first (so
 * running sessions never wait on a long prompt for more than one chunk),
 * then materialization chunks of pools, then prompt chunks of slots,
 * shortest remaining first, up to n_batch tokens, or --batch-decoding
 * prompt tokens while sessions decode: every session waits for its step,
 * and a 512-token chunk makes a step of the 0.5B benchmark model about 1 s
 * long.  Off by default: spawn ramps with 128 and without did not show a
 * gain larger than the machine's run-to-run noise.
 * Returns the count; *n_dec the decode tokens. */
static int32_t build_batch(eng *e, int32_t *n_dec)
{
    int32_t n = 0, n_rows = 0, n_decoding = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        e->slots[i].logits_row = -1;
        n_decoding += e->slots[i].state == ENG_SLOT_DECODE;
    }
    /* A decoding session's next token, then the guesses it verifies in
     * the same step (eng_spec.c), each with its logits row. */
    int32_t spec_left = MIN(ENG_SPEC_STEP, e->p.n_batch - n_decoding), dec_left = n_decoding;
    for (int32_t i = 0; i < e->p.n_slots && n < e->p.n_batch; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_DECODE) continue;
        int32_t room = e->p.n_batch - n - dec_left--;  /* past one token for each slot after this */
        if (s->n_replay > 0) {
            /* A hybrid's rollback: the kept tokens again, then its token. */
            int32_t r = MAX(MIN(s->n_replay, room), 0);
            for (int32_t j = 0; j < r; j++) eng_batch_add(e, &n, s->hist[s->n_hist + j], s->n_hist + j, s->id, false);
            s->n_replay_step = r;
            s->n_draft = 0;
            if (r < s->n_replay) continue;
            s->logits_row = n_rows++;
            eng_batch_add(e, &n, s->next_token, s->n_hist + r, s->id, true);
            continue;
        }
        int32_t k = spec_left > 0 && room > 0 ? eng_spec_propose(e, s, MIN(spec_left, room)) : (s->n_draft = 0);
        spec_left -= k;
        s->logits_row = n_rows;
        n_rows += 1 + k;
        eng_batch_add(e, &n, s->next_token, s->n_hist, s->id, true);
        for (int32_t j = 0; j < k; j++) eng_batch_add(e, &n, s->draft[j], s->n_hist + 1 + j, s->id, true);
    }
    *n_dec = n;
    int32_t lim = n > 0 && e->p.n_batch_decoding > 0 ? MIN(e->p.n_batch, n + e->p.n_batch_decoding) : e->p.n_batch;
    n = eng_pool_batch(e, n, lim);
    /* Prompt chunks shortest remaining first (ties: slot order), so a short
     * turn placed while a long prompt reads is read in the next step, not
     * after the long one: the long one loses at most the short one's
     * tokens of one step. */
    int32_t order[ENG_MAX_SLOTS], n_pre = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_PREFILL) continue;
        int32_t left = s->n_prompt - s->n_prefilled, k = n_pre++;
        for (; k > 0; k--) {
            const slot *o = &e->slots[order[k - 1]];
            if (o->n_prompt - o->n_prefilled <= left) break;
            order[k] = order[k - 1];
        }
        order[k] = i;
    }
    for (int32_t r = 0; r < n_pre && n < lim; r++) {
        slot *s = &e->slots[order[r]];
        const int32_t *pr = s->task->prompt;
        int32_t left = s->n_prompt - s->n_prefilled, k = MIN(left, lim - n);
        for (int32_t j = 0; j < k; j++) {
            int32_t pi = s->n_prefilled + j;
            bool last = pi == s->n_prompt - 1;
            eng_batch_add(e, &n, pr[pi], pi, s->id, last);
            if (last) s->logits_row = n_rows++;
        }
    }
    return n;
}

/* The step needs more cells than are free once droppable histories are
 * gone (with --kv-unified the slots' contexts add up to more than the
 * cache): the newest running task ends with an ERROR and its cells go, so
 * the older ones keep their work.  Returns false when no task runs. */
static bool shed_newest(eng *e)
{
    slot *v = NULL;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_IDLE && (!v || s->task->id > v->task->id)) v = s;
    }
    if (!v) return false;
    eng_task_fail(v->task, PK_EFULL, "the context size has been exceeded: no free KV cell is left for this "
                                    "request (older requests and pools hold them)");
    mem_drop(e->mem, v->id);
    v->n_hist = 0;
    v->session[0] = 0;
    eng_pool_detach(e, v);
    slot_release(e, v);
    return true;
}

/* Runs the batch; on failure every busy slot's task ends with an ERROR
 * (and its new cells go) and every materializing pool fails. */
static pk_status decode(eng *e, int32_t n, int32_t n_dec)
{
    eng_make_room(e, n);
    model_batch b = { n, e->batch.b_tok, e->batch.b_pos, e->batch.b_nseq,
                      (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])e->batch.b_seq, e->batch.b_want };
    double t0 = pk_time_ms();
    pk_status st = model_decode(e->ctx, &b, e->batch.logits);
    double now = pk_time_ms();
    e->stat.step++;
    e->stat.n_decode_calls++;
    for (int32_t i = 0; st == PK_OK && i < e->p.n_slots; i++)
        e->stat.n_tokens_max = MAX(e->stat.n_tokens_max, e->slots[i].n_hist);
    eng_pool_decoded(e, st);
    if (st != PK_OK) {
        for (int32_t i = 0; i < e->p.n_slots; i++) {
            slot *s = &e->slots[i];
            if (s->state == ENG_SLOT_IDLE) continue;
            eng_task_fail(s->task, st, st == PK_EFULL ? "the KV cache is full" : "decode failed");
            s->n_hist = mem_keep(e->mem, s->id, s->n_hist);
            slot_release(e, s);
        }
        return st;
    }
    if (n > n_dec) {
        e->stat.n_prompt_tokens += (uint64_t)(n - n_dec);
        e->stat.prompt_ms_total += now - t0;
        /* Prompt rate for the policy's "within one second" near matches;
         * only chunks of some size say anything about it. */
        if (n - n_dec >= 32) {
            double tps = (n - n_dec) * 1000.0 / fmax(now - t0, 1e-3);
            e->stat.prompt_tps = e->stat.prompt_tps > 0 ? 0.8 * e->stat.prompt_tps + 0.2 * tps : tps;
        }
    }
    return PK_OK;
}

/* Samples row `row` of this step's logits for slot s (its grammar's mask
 * and its biases applied) and hands the token to on_token.  Returns the
 * token, or -1 when the slot ended without one (its grammar allows
 * nothing more, or its mask could not be built). */
static int32_t sample_row(eng *e, slot *s, int32_t row_i)
{
    smp_logprob top[ENG_MAX_PROBS];
    float lp = 0;
    int32_t nt = MIN(s->task->req.n_probs, ENG_MAX_PROBS);
    const float *row = e->batch.logits + (size_t)row_i * e->n_vocab;
    if (s->gm) {
        /* The grammar's mask as -inf logits: every sampler after it
         * (penalties, top-k/p, min-p, temperature) sees only allowed tokens. */
        const uint64_t *mask = gram_matcher_mask(s->gm);
        bool any = false;
        for (int32_t w = 0; mask && w < (e->n_vocab + 63) / 64; w++) any |= mask[w] != 0;
        if (!mask) {                       /* out of memory: an error, never a "length" stop */
            fail_running(e, s, PK_ENOMEM, "out of memory for the grammar's mask");
            return -1;
        }
        if (!any) {                        /* nothing can follow: the grammar's output ends */
            finish(e, s, ENG_STOP_EOS, NULL);
            return -1;
        }
        for (int32_t v0 = 0; v0 < e->n_vocab; v0 += 64) {   /* by words: most are all-0 or all-1 */
            uint64_t w = mask[v0 >> 6];
            int32_t nw = MIN(64, e->n_vocab - v0);
            float *o = e->batch.gram_logits + v0;
            if (w == ~0ULL) memcpy(o, row + v0, (size_t)nw * sizeof *o);
            else for (int32_t k = 0; k < nw; k++) o[k] = w >> k & 1 ? row[v0 + k] : -INFINITY;
        }
        row = e->batch.gram_logits;
    }
    if (s->task->req.n_bias > 0) {
        memcpy(e->batch.bias_logits, row, (size_t)e->n_vocab * sizeof *row);
        for (int32_t k = 0; k < s->task->req.n_bias; k++)
            e->batch.bias_logits[s->task->req.bias[k].token] += s->task->req.bias[k].bias;
        row = e->batch.bias_logits;
    }
    int32_t id = smp_sample(s->smp, row, nt > 0 ? top : NULL, nt, nt > 0 ? &lp : NULL);
    on_token(e, s, id, lp, top, nt);
    return id;
}

/* Records what entered the slots' caches, then samples where logits came
 * back and emits the tokens. */
static void sample_and_emit(eng *e, int32_t n, int32_t n_dec_batch)
{
    double now = pk_time_ms();
    for (int32_t i = 0; i < n; i++) {
        if (e->batch.b_seq[i][0] >= e->p.n_slots) continue;   /* a pool's: eng_pool_decoded */
        slot *s = &e->slots[e->batch.b_seq[i][0]];
        s->hist[e->batch.b_pos[i]] = e->batch.b_tok[i];
        s->n_hist = e->batch.b_pos[i] + 1;
        if (s->state == ENG_SLOT_PREFILL) s->n_prefilled = s->n_hist;
    }
    for (int32_t i = 0; i < e->p.n_slots; i++) {     /* guesses are in the cells, not judged yet */
        slot *s = &e->slots[i];
        s->n_hist -= s->n_draft;
        s->n_replay -= s->n_replay_step;
        s->n_replay_step = 0;
    }
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_PREFILL || !s->task->req.report_progress || s->n_prefilled <= s->n_progress)
            continue;
        s->n_progress = s->n_prefilled;
        eng_event pe = { .kind = ENG_EV_PROGRESS, .slot = s->id, .n_prompt = s->task->req.n_prompt,
                         .n_cached = s->n_cached, .n_processed = MIN(s->n_prefilled, s->task->req.n_prompt),
                         .prompt_ms = now - s->t_start_ms };
        eng_task_push(s->task, &pe);
    }
    int32_t busy = 0, pausing = 0, n_dec = 0, n_emitted = 0;
    double now_s = eng_now_s();
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != ENG_SLOT_IDLE) busy++;
        else pausing += slot_history_within(s, now_s, adm_turn_ms(s->max_gap_ms));
        if (s->logits_row < 0) continue;
        bool decoding = s->state == ENG_SLOT_DECODE;
        if (decoding) {
            n_dec++;
        } else {
            s->t_prompt_ms = now;
            s->state = ENG_SLOT_DECODE;
        }
        double dt = now - s->t_last_ms;
        s->t_last_ms = now;
        if (s->task->req.n_predict == 0) {      /* prompt processing only */
            finish(e, s, ENG_STOP_LIMIT, NULL);
            continue;
        }
        /* Row j follows next_token and the first j guesses; guess j is
         * kept when row j's token is it, and the next row is read. */
        int32_t n_draft = s->n_draft, n_emit = 0;
        if (n_draft > 0) {
            s->n_drafted += n_draft;
            s->n_verify_steps++;
            e->stat.n_drafted += (uint64_t)n_draft;
            e->stat.n_verify_steps++;
        }
        eng_task *held = NULL;                 /* the step's tokens wake the reader once */
        if (n_draft > 0) {
            held = s->task;
            atomic_fetch_add(&held->refs, 1);  /* the slot may let go of it while sampling */
            eng_task_hold(held);
        }
        for (int32_t j = 0;; j++) {
            int32_t id = sample_row(e, s, s->logits_row + j);
            n_emit += id >= 0;
            if (id < 0 || s->state != ENG_SLOT_DECODE || j == n_draft || id != s->draft[j]) break;
            s->n_hist++;                       /* the guess's cell holds the right token */
            s->n_accepted++;
            e->stat.n_accepted++;
        }
        if (held) {
            eng_task_wake(held);
            eng_task_unref(held);
        }
        eng_spec_judged(e, s, n_emit - 1);
        n_emitted += n_emit;
        /* Experienced speed: the time since this slot's previous step over
         * the tokens it gave (accepted guesses count; others never do). */
        if (decoding && n_emit > 0)
            adm_rate_add_n(&s->rate, dt, n_emit, e->p.tps_window_tokens, e->p.tps_window_ms);
    }
    if (n_emitted > 0) {
        e->stat.agg[e->stat.agg_head].t_ms = now;
        e->stat.agg[e->stat.agg_head].n = n_emitted;
        e->stat.agg_head = (e->stat.agg_head + 1) % AGG_RING;
    }
    /* The load curve and the knee, with the agents running or between
     * turns (as the step began: a slot that finished in it counts as
     * running); the knee's mean is the admission mean (warm sessions). */
    if (n_dec > 0) {
        int32_t agents = busy + pausing + eng_away_pausing(e, now_s), n_warm;
        double mean = eng_warm_mean(e, -1, &n_warm);
        adm_curve_add(&e->adm.curve, n_dec, now - e->adm.t_step_ms, n > n_dec_batch, agents, now);
        if (n_warm > 0) adm_knee_add(&e->adm.curve, agents, mean, now - e->adm.t_step_ms, now);
    }
    e->stat.n_busy_slots_sum += (uint64_t)busy;
    /* What a row costs, for the n-gram guesses (a draft model's passes
     * are in the step's time too: its guesses are not cut) */
    if (n == n_dec_batch && !e->draft.ctx && !e->draft.mtp)
        spec_gain_step(&e->spec_gain, n, pk_time_ms() - e->adm.t_step_ms);
}

static void publish(eng *e)
{
    double t0 = pk_time_ms();
    if (!e->pub.copy || e->sleep.sleeping || t0 - atomic_load(&e->pub.pub_want_ms) > PUB_WANT_MS) {
        if (e->pub.n_pend_placed > 0) {            /* a copy this old is not read */
            pthread_mutex_lock(&e->pub.pub_mu);
            eng_pend_flush(e);
            pthread_mutex_unlock(&e->pub.pub_mu);
        }
        return;
    }
    static __thread eng_stats st;          /* filled outside the lock */
    eng_stats_fill(e, &st);
    if (!e->adm.adm_in_step) eng_adm_inputs(e, &e->adm.adm_in);
    pthread_mutex_lock(&e->pub.pub_mu);
    e->pub.copy->stats = st;
    e->pub.copy->in = e->adm.adm_in;
    e->pub.copy->n_scope = eng_adm_scopes(e, e->pub.copy->scope, ENG_MAX_POOLS + 1);
    eng_pend_flush(e);                     /* the copy shows their slots now */
    e->pub.copy->t_ms = pk_time_ms();
    e->pub.copy->valid = true;
    pthread_mutex_unlock(&e->pub.pub_mu);
    e->stat.control_ms += pk_time_ms() - t0;
}

void *eng_main(void *arg)
{
    eng *e = arg;
    pthread_setname_np(pthread_self(), "pk-engine");     /* per-thread CPU in /proc, profilers */
    while (eng_take_mailbox(e)) {
        e->adm.t_step_ms = pk_time_ms();       /* the step's time, placement and prompt work included */
        drop_cancelled(e);
        eng_place_waiting(e);
        if (e->draft.ctx || e->draft.mtp) eng_draft_step(e);
        int32_t n_dec, n = build_batch(e, &n_dec);
        while (n > 0 && !eng_make_room(e, n) && shed_newest(e)) n = build_batch(e, &n_dec);
        if (n > 0 && e->dbg.test_step_ms > 0)
            nanosleep(&(struct timespec){ .tv_sec = e->dbg.test_step_ms / 1000,
                                          .tv_nsec = (long)(e->dbg.test_step_ms % 1000) * 1000000 }, NULL);
        if (n > 0 && decode(e, n, n_dec) == PK_OK) sample_and_emit(e, n, n_dec);
        if (n > 0 || eng_has_work(e)) e->sleep.idle_since_ms = pk_time_ms();
        e->wq.nap = n == 0 && e->wq.n_waiting > 0 && !eng_running(e) && !eng_pool_busy(e);
        eng_admit_step(e);
        double t_ev = pk_time_ms();
        eng_kvev_step(e);
        e->stat.kv_events_ms += pk_time_ms() - t_ev;
        publish(e);
        if (e->dbg.check) eng_check(e);
    }
    return NULL;
}

/* ---- stats ---- */

void eng_stats_fill(eng *e, eng_stats *o)
{
    if (e->sleep.sleeping) {                     /* nothing changes while asleep but the clock */
        *o = *e->sleep.sleep_stats;
        o->ts_ms = pk_wall_ms();
        return;
    }
    memset(o, 0, sizeof *o);
    o->ts_ms = pk_wall_ms();
    o->n_slots = e->p.n_slots;
    double now = pk_time_ms(), sum = 0;
    int32_t n_active = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        eng_slot_info *si = &o->slots[i];
        si->id = i;
        si->state = s->state;
        si->n_ctx = e->n_ctx_slot;
        si->n_past = s->n_hist;
        si->n_cached = s->n_cached;
        si->n_prompt = s->n_prompt;
        si->n_decoded = s->n_gen;
        si->n_remain = s->state != ENG_SLOT_IDLE && s->task && s->task->req.n_predict >= 0
                     ? MAX(s->task->req.n_predict - s->n_gen, 0) : -1;
        si->has_params = s->has_params;
        si->sp = s->last_sp;
        si->n_predict = s->last_n_predict;
        si->n_drafted = s->n_drafted;
        si->n_accepted = s->n_accepted;
        si->n_verify_steps = s->n_verify_steps;
        si->tps_ewma = adm_rate_tps(&s->rate);
        si->task_id = s->task_id;
        snprintf(si->session_id, sizeof si->session_id, "%s", s->session);
        si->pool_id = s->pool_id;
        si->pool_shared = s->pool_shared;
        si->kv_owned = mem_seq_owned(e->mem, s->id);
        si->state_bytes = mem_seq_state_bytes(e->mem, s->id);
        si->ttft_ms = s->state != ENG_SLOT_PREFILL && s->task_id ? s->t_prompt_ms - s->t_start_ms : 0;
        si->warming = s->state == ENG_SLOT_DECODE && !slot_warm(s);
        o->n_warming += si->warming;
        if (s->state != ENG_SLOT_IDLE) o->n_running++;
        if (slot_warm(s)) {                        /* as the admission mean */
            sum += si->tps_ewma;
            n_active++;
        }
    }
    o->mean_active_tps = n_active ? sum / n_active : 0;
    int32_t toks = 0;
    double oldest = now;
    for (int32_t k = 0; k < AGG_RING; k++) {
        if (e->stat.agg[k].t_ms <= 0 || now - e->stat.agg[k].t_ms > e->p.tps_window_ms) continue;
        toks += e->stat.agg[k].n;
        oldest = fmin(oldest, e->stat.agg[k].t_ms);
    }
    o->aggregate_tps = toks > 0 ? toks * 1000.0 / fmax(now - oldest, e->p.tps_window_ms / 4.0) : 0;
    o->n_waiting = e->wq.n_waiting;
    o->kv_used = mem_used(e->mem);
    o->kv_total = e->p.n_ctx;
    o->n_prompt_tokens = e->stat.n_prompt_tokens;
    o->n_predicted_tokens = e->stat.n_predicted_tokens;
    o->n_decode_calls = e->stat.n_decode_calls;
    o->n_tokens_max = e->stat.n_tokens_max;
    o->n_busy_slots_sum = e->stat.n_busy_slots_sum;
    o->control_ms_total = e->stat.control_ms;
    o->kv_events_ms_total = e->stat.kv_events_ms;
    o->draft_ms_total = e->stat.draft_ms;
    o->draft_cells = e->draft.mem ? mem_used(e->draft.mem) : 0;
    o->n_requests_done = e->stat.n_done;
    o->n_drafted = e->stat.n_drafted;
    o->n_accepted = e->stat.n_accepted;
    o->n_verify_steps = e->stat.n_verify_steps;
    o->spec_store_tokens = e->spec_store ? spec_store_tokens(e->spec_store) : 0;
    o->prompt_ms_total = e->stat.prompt_ms_total;
    o->predicted_ms_total = e->stat.predicted_ms_total;
    o->kv_cell_bytes = mem_pos_bytes(e->mem);
    o->window = mem_window(e->mem);
    o->window_cells_used = mem_window_used(e->mem);
    o->window_cell_bytes = mem_window_pos_bytes(e->mem);
    o->state_bytes = mem_state_bytes(e->mem);
    o->states_used = mem_states_used(e->mem);
    o->states_total = mem_states_used(e->mem) + mem_states_free(e->mem);
    o->seq_ids_used = e->seqs.n_used;
    o->seq_ids_max = eng_seq_max(e);
    eng_place_stats(e, o);
    eng_pool_stats(e, o);
    eng_admit_stats(e, 0, &o->adm);
}

