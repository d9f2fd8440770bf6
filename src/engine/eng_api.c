/*
 * eng_api.c - the engine's public face: its start and stop, the mailbox
 * other threads post to, the typed control messages and the one table that
 * says how each kind is answered, and the calls that read the published
 * copy instead of waiting for a step.
 *
 *   any thread ── eng_submit / eng_pool_op / ... ──▶ post ──▶ mb.inbox
 *   engine ── eng_take_mailbox ──▶ msg_kinds[kind]: wake? unpublish?
 *                                   handler, then the answer (unless the
 *                                   handler defers it: pools)
 *
 * A control message is an eng_call on the asker's stack; the asker waits
 * on mb.reply_cv until the engine marks it done.  Adding a kind costs an
 * enum value (eng_task.h), a union member (eng_impl.h), a row below, its
 * handler and its public wrapper.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../grammar/gram.h"
#include "../save/sav.h"
#include "eng_impl.h"

/* ---- the message kinds ---- */

enum {
    MSG_ASLEEP = 1,             /* answered while asleep: does not wake the engine */
    MSG_CHANGES = 2,            /* changes state readers see: unpublish first */
    MSG_DEFERS = 4,             /* the handler answers (now or later) itself */
};

static void on_stats(eng *e, eng_call *c)
{
    eng_stats_fill(e, c->u.stats);
}

static void on_wake(eng *e, eng_call *c)
{
    c->status = PK_OK;          /* awake by now: eng_take_mailbox woke the engine */
}

static void on_erase(eng *e, eng_call *c)
{
    c->status = eng_drop_histories(e, c->u.erase.slot, "erased", &c->u.erase.n_erased);
}

static const struct {
    void (*handle)(eng *e, eng_call *c);
    unsigned flags;
} msg_kinds[] = {
    [ENG_MSG_STATS]     = { on_stats, MSG_ASLEEP },
    [ENG_MSG_POOL]      = { eng_pool_msg, MSG_CHANGES | MSG_DEFERS },
    [ENG_MSG_ERASE]     = { on_erase, MSG_CHANGES },
    [ENG_MSG_ADMISSION] = { eng_admission_msg, MSG_CHANGES },
    [ENG_MSG_CAPACITY]  = { eng_capacity_msg, 0 },
    [ENG_MSG_SLOT_FILE] = { eng_slot_file_msg, MSG_CHANGES },
    [ENG_MSG_WAKE]      = { on_wake, 0 },
    [ENG_MSG_LOOKUP]    = { eng_lookup_msg, MSG_ASLEEP },
};
_Static_assert(ARRAY_LEN(msg_kinds) == ENG_MSG_END, "a message kind without its row");

void eng_call_done(eng *e, eng_call *c)
{
    pthread_mutex_lock(&e->mb.mu);
    c->done = true;
    pthread_cond_broadcast(&e->mb.reply_cv);
    pthread_mutex_unlock(&e->mb.mu);
}

/* A message the engine does not serve (it could not wake up, it stops):
 * the task ends with an ERROR, a call is answered with st and why. */
static void refuse_msg(eng *e, eng_msg *m, pk_status st, const char *why)
{
    if (m->kind == ENG_MSG_TASK) {
        eng_task *t = container_of(m, eng_task, msg);
        eng_pend_drop(e, t, false);
        eng_task_fail(t, st, why);
        eng_task_unref(t);
        return;
    }
    eng_call *c = container_of(m, eng_call, msg);
    c->status = st;
    eng_pool_reply *pool = m->kind == ENG_MSG_POOL ? c->u.pool.out : NULL;
    eng_file_reply *file = m->kind == ENG_MSG_SLOT_FILE ? c->u.file.out : NULL;
    if (pool) {
        pool->status = st;
        snprintf(pool->message, sizeof pool->message, "%s", why);
    }
    if (file) {
        file->status = st;
        snprintf(file->message, sizeof file->message, "%s", why);
    }
    if (m->kind == ENG_MSG_CAPACITY) c->u.capacity.out->status = st;
    eng_call_done(e, c);
}

/* Waits (under mu) for mail or work; true when, instead, the engine has
 * been idle for sleep_idle_ms and should sleep. */
static bool wait_mail(eng *e)
{
    if (e->wq.nap && !e->mb.stop && !e->mb.inbox_head) {
        /* Only requests held by admission wait, and nothing runs: what
         * lifts a hold is mail or time (a settle's or a session's), so the
         * next look comes with the mail or in 5 ms, not in a spin. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 5 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&e->mb.cv, &e->mb.mu, &ts);
    }
    while (!e->mb.stop && !e->mb.inbox_head && !eng_has_work(e)) {
        if (e->p.sleep_idle_ms <= 0 || e->sleep.sleeping) {
            pthread_cond_wait(&e->mb.cv, &e->mb.mu);
            continue;
        }
        double due = e->sleep.idle_since_ms + e->p.sleep_idle_ms;
        if (pk_time_ms() >= due) return true;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);   /* cv waits on the monotonic clock (eng_new) */
        double ns = ts.tv_nsec + (due - pk_time_ms()) * 1e6 + 1e6;
        ts.tv_sec += (time_t)(ns / 1e9);
        ts.tv_nsec = (long)fmod(ns, 1e9);
        pthread_cond_timedwait(&e->mb.cv, &e->mb.mu, &ts);
    }
    return false;
}

/* Takes the mailbox and answers it through msg_kinds (control before new
 * work); returns false when the engine must stop.  Asleep, stats are
 * answered from the snapshot and anything else wakes the engine first. */
bool eng_take_mailbox(eng *e)
{
    pthread_mutex_lock(&e->mb.mu);
    while (wait_mail(e)) {
        pthread_mutex_unlock(&e->mb.mu);
        eng_unpublish(e);
        if (!eng_sleep_enter(e)) e->sleep.idle_since_ms = pk_time_ms();   /* no memory: try again later */
        pthread_mutex_lock(&e->mb.mu);
    }
    if (e->mb.stop) {
        pthread_mutex_unlock(&e->mb.mu);
        return false;
    }
    eng_msg *m = e->mb.inbox_head;
    e->mb.inbox_head = e->mb.inbox_tail = NULL;
    pthread_mutex_unlock(&e->mb.mu);

    for (eng_msg *next; m; m = next) {
        next = m->next;
        m->next = NULL;
        unsigned flags = m->kind == ENG_MSG_TASK ? 0 : msg_kinds[m->kind].flags;
        double t0 = pk_time_ms();           /* a control message's time, its wake-up included */
        if (!(flags & MSG_ASLEEP)) {
            e->sleep.idle_since_ms = pk_time_ms();
            pk_status st = e->sleep.sleeping ? eng_sleep_wake(e) : PK_OK;
            if (st != PK_OK) {
                refuse_msg(e, m, st, "the model could not be reloaded after sleeping");
                continue;
            }
        }
        if (m->kind == ENG_MSG_TASK) {
            eng_wait_push(e, container_of(m, eng_task, msg));
            continue;
        }
        eng_call *c = container_of(m, eng_call, msg);
        if (flags & MSG_CHANGES) eng_unpublish(e);
        msg_kinds[m->kind].handle(e, c);
        if (!(flags & MSG_DEFERS)) eng_call_done(e, c);
        e->stat.control_ms += pk_time_ms() - t0;
    }
    return true;
}

/* Posts m to the mailbox; false when the engine is stopping. */
static bool post(eng *e, eng_msg *m)
{
    pthread_mutex_lock(&e->mb.mu);
    if (e->mb.stop) {
        pthread_mutex_unlock(&e->mb.mu);
        return false;
    }
    m->next = NULL;
    if (e->mb.inbox_tail) e->mb.inbox_tail->next = m;
    else e->mb.inbox_head = m;
    e->mb.inbox_tail = m;
    pthread_cond_signal(&e->mb.cv);
    pthread_mutex_unlock(&e->mb.mu);
    return true;
}

/* Posts a control message and waits for its answer.  PK_ECANCELLED when
 * the engine stops first (eng_free answers what it still holds). */
static pk_status call(eng *e, eng_call *c)
{
    c->t0_ms = pk_time_ms();
    if (!post(e, &c->msg)) return PK_ECANCELLED;
    pthread_mutex_lock(&e->mb.mu);
    while (!c->done) pthread_cond_wait(&e->mb.reply_cv, &e->mb.mu);
    pthread_mutex_unlock(&e->mb.mu);
    return PK_OK;
}

/* ---- the calls ---- */

/* Says a reader wants the published copy and takes its lock; true when
 * the copy is fresh, so the reader need not wait for a batch (false: ask
 * the engine, which then publishes for the next ones).  The caller unlocks
 * pub_mu. */
static bool pub_lock(eng *e)
{
    atomic_store(&e->pub.pub_want_ms, pk_time_ms());
    pthread_mutex_lock(&e->pub.pub_mu);
    return e->pub.copy->valid && pk_time_ms() - e->pub.copy->t_ms < PUB_FRESH_MS;
}

static bool from_pub_stats(eng *e, eng_stats *out)
{
    bool ok = pub_lock(e);
    if (ok) *out = e->pub.copy->stats;
    pthread_mutex_unlock(&e->pub.pub_mu);
    return ok;
}

pk_status eng_get_stats(eng *e, eng_stats *out)
{
    eng_call c = { .msg.kind = ENG_MSG_STATS, .u.stats = out };
    return call(e, &c);
}

pk_status eng_get_stats_recent(eng *e, eng_stats *out)
{
    return from_pub_stats(e, out) ? PK_OK : eng_get_stats(e, out);
}

static bool from_pub_capacity(eng *e, int32_t pool_id, int32_t expected, const char *session, eng_capacity_reply *out)
{
    bool ok = pub_lock(e);
    eng_pub *p = e->pub.copy;
    const eng_pub_scope *ps = NULL;
    for (int32_t i = 0; ok && i < p->n_scope && !ps; i++)
        if (p->scope[i].pool_id == pool_id) ps = &p->scope[i];
    if (ok && ps) {
        eng_scope sc = ps->sc;
        if (!sc.policy.set) sc.policy = e->p.admission;
        adm_session ss[ENG_ADM_ROWS];
        adm_snapshot s;
        eng_adm_snapshot(&p->in, e->pub.pend, pool_id, ps->prefix_len, &sc, expected, eng_adm_known(&p->in, session), ss, &s);
        s.now_ms = pk_time_ms();         /* settle windows run on the reader's clock too */
        out->status = adm_decide(&s, &out->a);
        out->policy = sc.policy;
    }
    pthread_mutex_unlock(&e->pub.pub_mu);
    return ok && ps;   /* a pool the copy does not know yet: ask the engine */
}

pk_status eng_erase(eng *e, int32_t slot_id, int32_t *n_erased)
{
    eng_call c = { .msg.kind = ENG_MSG_ERASE, .u.erase.slot = slot_id };
    if (slot_id < -1 || slot_id >= e->p.n_slots) return PK_EINVAL;
    pk_status st = call(e, &c);
    if (n_erased) *n_erased = c.u.erase.n_erased;
    return st != PK_OK ? st : c.status;
}

static pk_status slot_file(eng *e, int32_t slot_id, const char *dir, const char *name, bool save,
                           eng_file_reply *out)
{
    memset(out, 0, sizeof *out);
    eng_call c = { .msg.kind = ENG_MSG_SLOT_FILE,
                   .u.file = { .slot = slot_id, .dir = dir, .name = name, .save = save, .out = out } };
    out->status = PK_EINVAL;
    if (slot_id < 0 || slot_id >= e->p.n_slots) snprintf(out->message, sizeof out->message, "Invalid slot ID");
    else if (!dir || !name || !sav_name_ok(name, strlen(name)))
        snprintf(out->message, sizeof out->message, "Invalid filename");
    else if (call(e, &c) != PK_OK) {
        out->status = PK_ECANCELLED;
        snprintf(out->message, sizeof out->message, "the engine is stopping");
    }
    return out->status;
}

pk_status eng_slot_save(eng *e, int32_t slot_id, const char *dir, const char *name, eng_file_reply *out)
{
    return slot_file(e, slot_id, dir, name, true, out);
}

pk_status eng_slot_restore(eng *e, int32_t slot_id, const char *dir, const char *name, eng_file_reply *out)
{
    return slot_file(e, slot_id, dir, name, false, out);
}

pk_status eng_admission(eng *e, int32_t pool_id, const adm_policy *set, adm_policy *out)
{
    eng_call c = { .msg.kind = ENG_MSG_ADMISSION, .u.admission = { .pool_id = pool_id, .set = set, .out = out } };
    pk_status st = call(e, &c);
    return st != PK_OK ? st : c.status;
}

pk_status eng_capacity(eng *e, int32_t pool_id, int32_t expected_tokens, const char *session,
                       eng_capacity_reply *out)
{
    memset(out, 0, sizeof *out);
    if (from_pub_capacity(e, pool_id, expected_tokens, session, out)) return out->status;
    eng_call c = { .msg.kind = ENG_MSG_CAPACITY,
                   .u.capacity = { .pool_id = pool_id, .expected_tokens = expected_tokens, .session = session,
                                   .out = out } };
    pk_status st = call(e, &c);
    return st != PK_OK ? st : out->status;
}

pk_status eng_lookup(eng *e, const int32_t *tokens, int32_t n, eng_lookup_reply *out)
{
    memset(out, 0, sizeof *out);
    eng_call c = { .msg.kind = ENG_MSG_LOOKUP, .u.lookup = { .tokens = tokens, .n = MAX(n, 0), .out = out } };
    pk_status st = call(e, &c);
    return st != PK_OK ? st : c.status;
}

pk_status eng_pool_op(eng *e, const eng_pool_req *rq, eng_pool_reply *out)
{
    memset(out, 0, sizeof *out);
    eng_call c = { .msg.kind = ENG_MSG_POOL, .u.pool = { .rq = rq, .out = out } };
    if (call(e, &c) != PK_OK) {
        out->status = PK_ECANCELLED;
        snprintf(out->message, sizeof out->message, "the engine is stopping");
    }
    return out->status;
}

pk_status eng_wake(eng *e)
{
    if (!eng_is_sleeping(e)) return PK_OK;
    eng_call c = { .msg.kind = ENG_MSG_WAKE };
    pk_status st = call(e, &c);
    return st != PK_OK ? st : c.status;
}

pk_status eng_submit(eng *e, const eng_completion *c, eng_task **out)
{
    *out = NULL;
    for (int i = 0; i < ENG_MAX_STOP && c->stop[i]; i++)
        if (strlen(c->stop[i]) >= ENG_STOP_CAP) return PK_EINVAL;
    if (!c->prompt || c->n_prompt < 1 || c->n_prompt >= e->n_ctx_slot || !smp_params_valid(&c->sp) ||
        c->id_slot >= e->p.n_slots || c->id_slot < -1 || c->n_probs < 0 || c->n_probs > ENG_MAX_PROBS)
        return PK_EINVAL;
    for (int32_t i = 0; i < c->n_prompt; i++)
        if (c->prompt[i] < 0 || c->prompt[i] >= e->n_vocab) return PK_EINVAL;
    if (c->n_bias < 0 || (c->n_bias > 0 && !c->bias)) return PK_EINVAL;
    for (int32_t i = 0; i < c->n_bias; i++)
        if (c->bias[i].token < 0 || c->bias[i].token >= e->n_vocab || isnan(c->bias[i].bias)) return PK_EINVAL;
    pthread_mutex_lock(&e->mb.mu);
    uint64_t id = ++e->mb.next_id;
    pthread_mutex_unlock(&e->mb.mu);
    eng_task *t = eng_task_new(id, c);
    if (!t) return PK_ENOMEM;
    t->t_submit_ms = pk_time_ms();
    eng_pend_add(e, t);
    if (!post(e, &t->msg)) {
        eng_pend_drop(e, t, false);
        eng_task_unref(t);
        eng_task_unref(t);
        return PK_ECANCELLED;
    }
    *out = t;
    return PK_OK;
}

/* ---- start and stop ---- */

model_ctx_params eng_ctx_params(const eng *e)
{
    /* Hybrids: a recurrent state for each slot and two of its
     * checkpoints, and 8 for parked histories and pools (docs/hybrid.md) */
    return (model_ctx_params){ .n_ctx = e->p.n_ctx, .n_ubatch = MIN(e->p.n_batch, 512),
                               .n_threads = e->p.n_threads, .type_k = e->p.type_k, .type_v = e->p.type_v,
                               .n_rs = e->p.n_rs > 0 ? e->p.n_rs : 3 * e->p.n_slots + 8,
                               .mtp = e->p.spec.kind == SPEC_DRAFT_MTP && model_has_mtp(e->m),
                               .mtp_seqs = e->p.n_slots, .swa_full = e->p.swa_full };
}

/* Frees whatever e holds, from any point of eng_new or after the engine
 * thread has ended: eng_new's failure and eng_free share it. */
static void teardown(eng *e)
{
    eng_save_free(e);
    eng_draft_free(e);                     /* its context runs on the target's threads */
    for (int32_t i = 0; e->slots && i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        smp_free(s->smp);
        gram_matcher_free(s->gm);
        free(s->hist);
        free(s->text);
    }
    for (int32_t i = 0; i < e->batch.n_gram_idle; i++) gram_matcher_free(e->batch.gram_idle[i]);
    gram_vocab_free(e->batch.gvocab);
    eng_pool_free(e);
    eng_place_free(e);
    free(e->slots);
    free(e->batch.b_tok);
    free(e->batch.b_pos);
    free(e->batch.b_nseq);
    free(e->batch.b_seq);
    free(e->batch.b_want);
    free(e->batch.logits);
    eng_spec_free(e);
    eng_kvev_free(e);
    free(e->batch.gram_logits);
    free(e->batch.bias_logits);
    mem_free(e->mem);
    model_ctx_free(e->ctx);
    pthread_mutex_destroy(&e->mb.mu);
    pthread_mutex_destroy(&e->pub.pub_mu);
    pthread_cond_destroy(&e->mb.cv);
    pthread_cond_destroy(&e->mb.reply_cv);
    free(e->pub.copy);
    free(e->sleep.sleep_stats);
    free(e);
}

static bool params_ok(const eng_params *p)
{
    return p->n_slots >= 1 && p->n_slots <= ENG_MAX_SLOTS && p->n_ctx >= p->n_slots * 2 && p->n_batch >= 1 &&
           p->n_batch_decoding >= 0 && p->n_threads >= 1 && p->tps_window_tokens >= 1 &&
           p->tps_window_ms >= 1 && p->cache_ram_mib >= 0 && p->n_pools >= 0 && p->n_pools <= ENG_MAX_POOLS &&
           p->n_slots + p->n_pools <= KV_MAX_SEQ && p->pool_grace_ms >= 0 && p->sleep_idle_ms >= 0 &&
           adm_policy_check(&p->admission) == PK_OK && pol_params_check(&p->policy) == PK_OK &&
           !spec_params_check(&p->spec) && p->kv_block_size >= 1 && p->kv_block_size <= 1024;
}

pk_status eng_new(const model *m, const eng_params *p, eng **out)
{
    *out = NULL;
    if (!params_ok(p)) return PK_EINVAL;
    eng *e = calloc(1, sizeof *e);
    if (!e) return PK_ENOMEM;
    pthread_mutex_init(&e->mb.mu, NULL);
    pthread_mutex_init(&e->pub.pub_mu, NULL);
    pthread_condattr_t ca;                 /* wait_mail's deadlines are on pk_time_ms's clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->mb.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&e->mb.reply_cv, NULL);
    atomic_init(&e->pub.pub_want_ms, -1e12);
    atomic_init(&e->sleep.asleep, false);
    e->m = m;
    e->p = *p;
    e->n_ctx_slot = p->kv_unified ? p->n_ctx : p->n_ctx / p->n_slots;
    e->n_vocab = model_get_hparams(m)->n_vocab;
    e->adm.server.policy = p->admission;
    model_ctx_params cp = eng_ctx_params(e);
    pk_status st = model_ctx_new(m, &cp, &e->ctx);
    if (st || (st = mem_new(e->ctx, &e->mem))) goto fail;
    st = PK_ENOMEM;
    eng_batch *b = &e->batch;
    e->slots = calloc((size_t)p->n_slots, sizeof *e->slots);
    b->b_tok = malloc((size_t)p->n_batch * sizeof *b->b_tok);
    b->b_pos = malloc((size_t)p->n_batch * sizeof *b->b_pos);
    b->b_nseq = malloc((size_t)p->n_batch * sizeof *b->b_nseq);
    b->b_seq = calloc((size_t)p->n_batch, sizeof *b->b_seq);
    b->b_want = malloc((size_t)p->n_batch * sizeof *b->b_want);
    b->logits = malloc((size_t)p->n_slots * e->n_vocab * sizeof(float));
    b->n_rows = p->n_slots;
    b->bias_logits = malloc((size_t)e->n_vocab * sizeof *b->bias_logits);
    e->pub.copy = calloc(1, sizeof *e->pub.copy);
    if (!e->slots || !b->b_tok || !b->b_pos || !b->b_nseq || !b->b_seq || !b->b_want || !b->logits ||
        !b->bias_logits || !e->pub.copy)
        goto fail;
    for (int32_t i = 0; i < p->n_slots; i++) {
        e->slots[i].id = i;
        e->slots[i].last_source_seq = -1;
        e->slots[i].spec_pos0 = -1;
        if (!(e->slots[i].hist = malloc((size_t)e->n_ctx_slot * sizeof(int32_t)))) goto fail;
    }
    if ((st = eng_place_init(e)) || (st = eng_pool_init(e)) || (st = eng_save_init(e)) || (st = eng_spec_init(e)) ||
        (st = eng_draft_init(e)) || (st = eng_kvev_init(e)))
        goto fail;
    st = PK_ENOMEM;
#ifdef PK_DEBUG
    e->dbg.check = true;
#endif
    const char *chk = getenv("POLYKV_CHECK");
    if (chk && *chk) e->dbg.check = strcmp(chk, "0") != 0;
    const char *delay = getenv("POLYKV_TEST_STEP_DELAY_MS");
    e->dbg.test_step_ms = delay ? MAX(atoi(delay), 0) : 0;
    e->sleep.idle_since_ms = pk_time_ms();
    if (pthread_create(&e->thread, NULL, eng_main, e)) goto fail;
    *out = e;
    return PK_OK;
fail:
    teardown(e);
    return st;
}

void eng_free(eng *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mb.mu);
    e->mb.stop = true;
    pthread_cond_broadcast(&e->mb.cv);
    pthread_mutex_unlock(&e->mb.mu);
    pthread_join(e->thread, NULL);

    /* What the loop never took: tasks join the wait queue, control
     * messages are answered "stopping" (post refuses new ones now). */
    for (eng_msg *m = e->mb.inbox_head, *nx; m; m = nx) {
        nx = m->next;
        if (m->kind == ENG_MSG_TASK) eng_wait_push(e, container_of(m, eng_task, msg));
        else refuse_msg(e, m, PK_ECANCELLED, "the engine is stopping");
    }
    e->mb.inbox_head = e->mb.inbox_tail = NULL;
    for (eng_task *t = e->wq.wait_head, *nx; t; t = nx) {
        nx = t->next;
        eng_task_fail(t, PK_ECANCELLED, "the server is shutting down");
        eng_task_unref(t);
    }
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->task) {
            eng_task_fail(s->task, PK_ECANCELLED, "the server is shutting down");
            eng_task_unref(s->task);
            s->task = NULL;
        }
    }
    /* A clean shutdown: whatever pinned pool has no file yet gets one. */
    eng_persist_sync(e, NULL, 0);             /* a failure is logged: nobody to answer */
    teardown(e);
}
