/*
 * eng_admit.c - admission in the engine: the mechanism behind src/admit
 * (docs/admission.md).  It fills adm_snapshot from the slots, answers the
 * policy and capacity messages, gates NEW sessions of enforced scopes at
 * placement, records admits and completes settle windows after each step.
 *
 * Scopes: each pool has one (eng_pool.c keeps it beside the pool), and the
 * server has one for sessions on no pool (e->adm.server).  A scope whose policy is
 * not set records and gates nothing: a server with no policy behaves as
 * before.  Engine thread only.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eng_impl.h"

const char *eng_adm_decision_name(eng_adm_decision d)
{
    static const char *names[ENG_ADM_N] = { "admit", "reject", "warn", "queue", "hold", "overcommit" };
    return (unsigned)d < ENG_ADM_N ? names[d] : "?";
}

bool eng_session_known(const eng *e, const char *session)
{
    if (!session || !session[0]) return false;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if (slot_knows(s) && !strcmp(s->session, session)) return true;
    }
    return eng_hist_find(e, session) >= 0;
}

/* A history out of its slot, as a row after the slots: a session between
 * turns like an idle slot's, while it is recent (adm_live_ms). */
static void away(eng_adm_in *in, const char *session, int32_t pool_id, double last_use_s, double max_gap_ms,
                 int32_t n_tokens, int32_t owned, double now_s)
{
    if (!session[0] || !history_within(last_use_s, now_s, adm_live_ms(max_gap_ms)) || in->n_rows >= ENG_ADM_ROWS)
        return;
    for (int32_t i = 0; i < in->n_rows; i++)     /* a session counts once, where it runs or was last */
        if (!strcmp(in->slot[i].session, session) && (i >= in->n_slots || in->slot[i].running || in->slot[i].recent))
            return;
    eng_adm_slot *x = &in->slot[in->n_rows++];
    *x = (eng_adm_slot){ .pool_id = pool_id, .recent = true,
                         .pausing = history_within(last_use_s, now_s, adm_turn_ms(max_gap_ms)),
                         .tokens_left = -1, .ctx_used = n_tokens, .kv_owned = owned };
    memcpy(x->session, session, ENG_SESSION_CAP);
}

/* True when a slot runs session or holds its live history: away()'s rule
 * that a session counts once, where it runs or was last. */
static bool in_slot(const eng *e, const char *session, double now_s)
{
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if (!strcmp(s->session, session) &&
            ((s->state != ENG_SLOT_IDLE && s->task) || slot_history_within(s, now_s, adm_live_ms(s->max_gap_ms))))
            return true;
    }
    return false;
}

static bool away_pausing(const eng *e, const char *session, double last_use_s, double max_gap_ms, double now_s)
{
    return session[0] && history_within(last_use_s, now_s, adm_turn_ms(max_gap_ms)) && !in_slot(e, session, now_s);
}

int32_t eng_away_pausing(const eng *e, double now_s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        const hrec *r = &e->hist.rec[i];
        n += r->where != HIST_FREE && away_pausing(e, r->session, r->last_use_s, r->max_gap_ms, now_s);
    }
    return n;
}

/* Hybrids: the cells one recurrent state's bytes would fill; 0 otherwise. */
static int32_t state_cells(const eng *e)
{
    size_t pb = mem_pos_bytes(e->mem);
    return (int32_t)((mem_state_bytes(e->mem) + pb - 1) / pb);
}

/* The cells seq owns, its states counted as state_cells each. */
static int32_t owned_equiv(const eng *e, kv_seq seq)
{
    return mem_seq_owned(e->mem, seq) + state_cells(e) * mem_seq_states(e->mem, seq);
}

/* What every capacity answer is computed from, for all scopes at once:
 * filled by the engine (now, or after each step into e->pub.copy, so that
 * readers answer without waiting for a step). */
void eng_adm_inputs(eng *e, eng_adm_in *in)
{
    int32_t excl[KV_MAX_SEQ], reclaim = 0;
    mem_excl_counts(e->mem, excl);
    double now_s = eng_now_s();
    in->n_slots = e->p.n_slots;
    in->n_busy = 0;
    in->n_known = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        bool running = s->state != ENG_SLOT_IDLE && s->task;   /* (a slot being started has no task yet) */
        in->n_busy += running;
        if (!running) reclaim += excl[s->id];
        const eng_completion *rq = running ? &s->task->req : NULL;
        in->slot[i] = (eng_adm_slot){
            .pool_id = s->pool_id, .running = running, .decoding = s->state == ENG_SLOT_DECODE,
            .recent = slot_history_within(s, now_s, adm_live_ms(s->max_gap_ms)),
            .pausing = slot_history_within(s, now_s, adm_turn_ms(s->max_gap_ms)),
            .tps_ewma = adm_rate_tps(&s->rate), .n_decoded = running ? s->n_gen : 0,
            .tokens_left = rq && rq->n_predict >= 0 ? rq->n_predict - s->n_gen : -1, .ctx_used = s->n_hist,
            .kv_owned = owned_equiv(e, s->id), .task_id = running ? s->task->id : 0 };
        memcpy(in->slot[i].session, s->session, ENG_SESSION_CAP);
        if (slot_knows(s) && s->session[0])
            memcpy(in->known[in->n_known++], s->session, ENG_SESSION_CAP);
    }
    in->n_rows = in->n_slots;
    /* Parked histories, then those in RAM (which own no cells). */
    for (int where = HIST_PARKED; where <= HIST_RAM; where++)
        for (int32_t i = 0; i < e->hist.n_rec; i++) {
            const hrec *r = &e->hist.rec[i];
            if ((int)r->where != where) continue;
            int32_t owned = where == HIST_PARKED ? excl[r->seq] + state_cells(e) * mem_seq_states(e->mem, r->seq) : 0;
            reclaim += owned;
            if (r->session[0] && in->n_known < ENG_ADM_KNOWN)
                memcpy(in->known[in->n_known++], r->session, ENG_SESSION_CAP);
            away(in, r->session, r->pool_id, r->last_use_s, r->max_gap_ms, r->n_tokens, owned, now_s);
        }
    /* On a hybrid the recurrent states count as the cells their bytes
     * would fill (docs/hybrid.md): a session's share includes its state
     * and checkpoints, the totals the state slots. */
    int32_t sc = state_cells(e);
    in->kv_free_cells = e->p.n_ctx - mem_used(e->mem) + reclaim + sc * mem_states_free(e->mem);
    in->kv_used = mem_used(e->mem) + sc * mem_states_used(e->mem);
    in->kv_total = e->p.n_ctx + sc * (mem_states_used(e->mem) + mem_states_free(e->mem));
    in->ctx_slot = e->n_ctx_slot;
    in->now_ms = pk_time_ms();
    in->rate_window_ms = e->p.tps_window_ms;
    in->rate_window_tokens = e->p.tps_window_tokens;
    in->curve = e->adm.curve;
}

bool eng_adm_known(const eng_adm_in *in, const char *session)
{
    if (!session || !session[0]) return false;
    for (int32_t i = 0; i < in->n_known; i++)
        if (!strcmp(in->known[i], session)) return true;
    return false;
}

/* Requests sent and not placed yet, not held: the load they bring that
 * the slots do not show (n), and the NEW sessions of pool_id's scope among
 * them (n_new).  A continuation whose history waits in a slot of the scope
 * is counted between turns already. */
static void pending(const eng_adm_in *in, const eng_pend *pend, int32_t pool_id, int32_t *n, int32_t *n_new)
{
    *n = *n_new = 0;
    for (int32_t i = 0; pend && i < ENG_PEND_MAX; i++) {
        const eng_pend *p = &pend[i];
        if (!p->task_id || p->held) continue;
        if (!eng_adm_known(in, p->session)) {
            (*n)++;
            *n_new += p->pool_id == pool_id;
            continue;
        }
        bool paused = false;
        for (int32_t k = 0; k < in->n_rows && !paused; k++) {
            const eng_adm_slot *x = &in->slot[k];
            paused = x->pool_id == pool_id && !x->running && x->recent && !strcmp(x->session, p->session);
        }
        *n += !paused;
    }
}

void eng_adm_snapshot(const eng_adm_in *in, const eng_pend *pend, int32_t pool_id, int32_t prefix_len,
                      const eng_scope *sc, int32_t expected, bool known, adm_session *ss, adm_snapshot *o)
{
    for (int32_t i = 0; i < in->n_rows; i++) {
        const eng_adm_slot *x = &in->slot[i];
        bool in_scope = x->pool_id == pool_id;
        ss[i] = (adm_session){ .running = x->running, .decoding = x->decoding, .in_scope = in_scope,
                               .live = in_scope && (x->running || x->recent),
                               .pausing = in_scope && !x->running && x->recent && x->pausing, .tps_ewma = x->tps_ewma,
                               .n_decoded = x->n_decoded, .tokens_left = x->tokens_left, .ctx_used = x->ctx_used,
                               .ctx_total = in->ctx_slot, .kv_owned = x->kv_owned, .task_id = x->task_id };
    }
    *o = (adm_snapshot){ .policy = &sc->policy, .sessions = ss, .n_sessions = in->n_rows, .settle = &sc->settle,
                         .now_ms = in->now_ms, .n_slots = in->n_slots, .n_busy_slots = in->n_busy,
                         .kv_free_cells = in->kv_free_cells, .kv_used = in->kv_used, .kv_total = in->kv_total,
                         .ctx_slot = in->ctx_slot, .prefix_len = prefix_len, .expected_tokens = expected,
                         .known_session = known, .curve = &in->curve, .rate_window_ms = in->rate_window_ms,
                         .rate_window_tokens = in->rate_window_tokens };
    pending(in, pend, pool_id, &o->n_pending, &o->n_pending_new);
}

void eng_pend_add(eng *e, eng_task *t)
{
    pthread_mutex_lock(&e->pub.pub_mu);
    for (int32_t i = 0; i < ENG_PEND_MAX && !t->pend; i++) {
        eng_pend *p = &e->pub.pend[i];
        if (p->task_id) continue;
        *p = (eng_pend){ .task_id = t->id, .pool_id = MAX(t->req.pool_id, 0) };
        memcpy(p->session, t->req.session_id, ENG_SESSION_CAP);
        t->pend = i + 1;
    }
    pthread_mutex_unlock(&e->pub.pub_mu);
}

void eng_pend_drop(eng *e, eng_task *t, bool placed)
{
    if (!t->pend) return;
    pthread_mutex_lock(&e->pub.pub_mu);
    eng_pend *p = &e->pub.pend[t->pend - 1];
    if (placed) {
        p->placed = true;
        p->held = false;
        e->pub.n_pend_placed++;
    } else {
        p->task_id = 0;
    }
    t->pend = 0;
    pthread_mutex_unlock(&e->pub.pub_mu);
}

void eng_pend_flush(eng *e)
{
    for (int32_t i = 0; i < ENG_PEND_MAX && e->pub.n_pend_placed > 0; i++)
        if (e->pub.pend[i].task_id && e->pub.pend[i].placed) {
            e->pub.pend[i] = (eng_pend){ 0 };
            e->pub.n_pend_placed--;
        }
}

void eng_pend_held(eng *e, eng_task *t)
{
    if (!t->pend || e->pub.pend[t->pend - 1].held) return;   /* (only the engine writes held) */
    pthread_mutex_lock(&e->pub.pub_mu);
    e->pub.pend[t->pend - 1].held = true;
    pthread_mutex_unlock(&e->pub.pub_mu);
}

int32_t eng_adm_scopes(eng *e, eng_pub_scope *out, int32_t cap)
{
    out[0] = (eng_pub_scope){ .pool_id = 0, .prefix_len = 0, .sc = e->adm.server };
    return 1 + eng_pool_scopes(e, out + 1, cap - 1);
}

/* The snapshot of pool_id's scope from e->adm.adm_in as it was last read. */
static void scope_snap(eng *e, int32_t pool_id, const eng_scope *sc, int32_t expected, bool known, adm_session *ss,
                       adm_snapshot *o)
{
    eng_adm_snapshot(&e->adm.adm_in, NULL, pool_id, pool_id > 0 ? eng_pool_prefix_len(e, pool_id) : 0, sc, expected, known,
                     ss, o);
}

/* The snapshot of pool_id's scope, from the engine's state now. */
static void scope_snapshot_now(eng *e, int32_t pool_id, const eng_scope *sc, int32_t expected, bool known,
                               adm_session *ss, adm_snapshot *o)
{
    eng_adm_inputs(e, &e->adm.adm_in);
    scope_snap(e, pool_id, sc, expected, known, ss, o);
}

/* The answer for pool_id's scope now.  with_pending: as a reader would
 * answer it (from_pub_capacity), counting the requests not placed yet;
 * the gate leaves them out (it places in order). */
static void decide(eng *e, int32_t pool_id, const eng_scope *sc, int32_t expected, bool known, bool with_pending,
                   adm_answer *a)
{
    adm_session ss[ENG_ADM_ROWS];
    adm_snapshot s;
    eng_adm_inputs(e, &e->adm.adm_in);
    if (with_pending) pthread_mutex_lock(&e->pub.pub_mu);
    eng_adm_snapshot(&e->adm.adm_in, with_pending ? e->pub.pend : NULL, pool_id,
                     pool_id > 0 ? eng_pool_prefix_len(e, pool_id) : 0, sc, expected, known, ss, &s);
    ASSERT(adm_decide(&s, a) == PK_OK);
    if (with_pending) pthread_mutex_unlock(&e->pub.pub_mu);
}

/* ---- messages --------------------------------------------------------- */

void eng_admission_msg(eng *e, eng_call *c)
{
    eng_scope *sc = eng_pool_scope(e, c->u.admission.pool_id);
    c->status = PK_OK;
    if (!sc) {
        c->status = PK_ENOTFOUND;
        return;
    }
    if (c->u.admission.set) {
        adm_policy p = *c->u.admission.set;
        p.set = true;
        if (adm_policy_check(&p) != PK_OK) {
            c->status = PK_EINVAL;
            return;
        }
        sc->policy = p;
    }
    *c->u.admission.out = sc->policy;
}

void eng_capacity_msg(eng *e, eng_call *c)
{
    eng_scope *sc = eng_pool_scope(e, c->u.capacity.pool_id);
    eng_capacity_reply *o = c->u.capacity.out;
    if (!sc) {
        o->status = PK_ENOTFOUND;
        return;
    }
    /* A scope with no policy still answers, against its defaults. */
    eng_scope tmp = *sc;
    if (!tmp.policy.set) tmp.policy = e->p.admission;
    o->status = PK_OK;
    o->policy = tmp.policy;
    decide(e, c->u.capacity.pool_id, &tmp, c->u.capacity.expected_tokens, eng_session_known(e, c->u.capacity.session), true, &o->a);
}

/* ---- the gate --------------------------------------------------------- */

static void refuse(eng_task *t, const adm_answer *a)
{
    eng_event ev = { .kind = ENG_EV_ERROR, .status = PK_EREFUSED, .has_cap = true, .cap = *a };
    snprintf(ev.message, sizeof ev.message, "admission refused: %s", a->reason);
    eng_task_push(t, &ev);
}

/* An admission decision into the cache events (/polykv/cache), so that an
 * operator sees why a request was held or refused. */
static void log_decision(eng *e, const eng_task *t, int32_t pool, eng_adm_decision d, const adm_answer *a)
{
    eng_cache_event ev = { .kind = ENG_CACHE_ADMISSION, .task_id = t->id, .slot = -1, .seq = -1,
                           .decision = (int32_t)d, .pool_id = pool, .value = a ? a->projected : NAN };
    const char *reason = a ? a->reason : d == ENG_ADM_OVERCOMMIT ? "overcommit" : "behind an earlier new session";
    snprintf(ev.reason, sizeof ev.reason, "%s", reason);
    eng_cache_event_add(e, &ev);
}

bool eng_admit_gate(eng *e, eng_task *t, int32_t p_share, bool *failed)
{
    *failed = false;
    int32_t pool = t->req.pool_id > 0 ? t->req.pool_id : 0;
    eng_scope *sc = eng_pool_scope(e, pool);
    if (!sc || !sc->policy.set) return true;
    bool known = eng_session_known(e, t->req.session_id);
    t->adm_new = !known;
    if (known || sc->policy.mode != ADM_ENFORCED) return true;
    if (t->req.overcommit) {
        if (!t->adm_held) {
            sc->decisions[ENG_ADM_OVERCOMMIT]++;
            log_decision(e, t, pool, ENG_ADM_OVERCOMMIT, NULL);
        }
        t->adm_held = true;        /* counted once */
        return true;
    }
    /* A queue is first come, first served: a NEW session behind one this
     * pass held for the scope's sake (not its own size) waits too.  Asked
     * on its own, a moment later, it could find the hold just lifted (a
     * live session's time ran out between the two answers) and go first. */
    if (sc->held_pass == e->wq.place_pass) {
        if (!t->adm_held) {
            sc->decisions[sc->held_decision]++;
            log_decision(e, t, pool, (eng_adm_decision)sc->held_decision, NULL);
        }
        t->adm_held = true;
        eng_pend_held(e, t);
        return false;
    }
    /* What it will add: its suffix and generation, never more than its
     * context can take (past that it stops, truncated). */
    int32_t room = e->n_ctx_slot - (pool > 0 ? eng_pool_prefix_len(e, pool) : 0);
    int64_t want = (int64_t)t->req.n_prompt - p_share + MAX(t->req.n_predict, 0);
    int32_t expected = (int32_t)MIN(want, (int64_t)room);
    adm_answer a;
    decide(e, pool, sc, expected, known, false, &a);
    adm_action act = adm_gate(&sc->policy, &a, known, false, pk_time_ms() - t->t_submit_ms);
    if (sc->policy.on_saturation == ADM_WARN) t->adm_remaining = a.can_admit ? MAX(a.headroom_sessions - 1, 0) : 0;
    switch (act) {
    case ADM_ADMIT:
        sc->decisions[ENG_ADM_ADMIT]++;
        log_decision(e, t, pool, ENG_ADM_ADMIT, &a);
        return true;
    case ADM_ADMIT_WARN:
        sc->decisions[ENG_ADM_WARN]++;
        log_decision(e, t, pool, ENG_ADM_WARN, &a);
        t->adm_warned = true;
        return true;
    case ADM_HOLD: {
        eng_adm_decision d = a.arm == ADM_ARM_SETTLING ? ENG_ADM_HOLD : ENG_ADM_QUEUE;
        if (!t->adm_held) {
            sc->decisions[d]++;
            log_decision(e, t, pool, d, &a);
        }
        t->adm_held = true;
        eng_pend_held(e, t);
        if (a.arm != ADM_ARM_CONTEXT) {                  /* held for the scope, not for its own size */
            sc->held_pass = e->wq.place_pass;
            sc->held_decision = (int32_t)d;
        }
        return false;
    }
    case ADM_REFUSE:
        sc->decisions[ENG_ADM_REJECT]++;
        log_decision(e, t, pool, ENG_ADM_REJECT, &a);
        refuse(t, &a);
        *failed = true;
        return false;
    }
    return true;
}

void eng_admit_placed(eng *e, eng_task *t)
{
    int32_t pool = t->req.pool_id > 0 ? t->req.pool_id : 0;
    eng_scope *sc = eng_pool_scope(e, pool);
    if (!sc || !sc->policy.set || !t->adm_new) return;
    adm_session ss[ENG_ADM_ROWS];
    adm_snapshot s;
    scope_snapshot_now(e, pool, sc, -1, false, ss, &s);
    /* The mean at the admit leaves the new session out: it is not decoding
     * yet, so mean_warm cannot see it. */
    adm_record_admit(&sc->settle, &s, t->id);
}

/* Every scope with a policy, after every step (its settled mean is the
 * last one seen); a scope without one records nothing.  The engine's state
 * is read once for all of them: a settle step changes only its scope. */
static void settle_scope(eng *e, int32_t pool_id, eng_scope *sc)
{
    if (!sc->policy.set) return;
    if (!e->adm.adm_in_step) eng_adm_inputs(e, &e->adm.adm_in);
    e->adm.adm_in_step = true;
    adm_session ss[ENG_ADM_ROWS];
    adm_snapshot s;
    scope_snap(e, pool_id, sc, -1, false, ss, &s);
    adm_settle_step(&sc->settle, &s);
}

void eng_admit_step(eng *e)
{
    e->adm.adm_in_step = false;
    settle_scope(e, 0, &e->adm.server);
    eng_pool_each_scope(e, settle_scope);
}

/* Any scope with a policy?  Only then do continuations go first. */
static bool any_policy(eng *e)
{
    if (e->adm.server.policy.set) return true;
    for (eng_task *t = e->wq.wait_head; t; t = t->next) {
        eng_scope *sc = t->req.pool_id > 0 ? eng_pool_scope(e, t->req.pool_id) : NULL;
        if (sc && sc->policy.set) return true;
    }
    return false;
}

static bool is_continuation(eng *e, const eng_task *t)
{
    return eng_session_known(e, t->req.session_id);
}

void eng_admit_order(eng *e)
{
    if (e->wq.n_waiting > 1 && any_policy(e)) eng_wait_first(e, is_continuation);
}

void eng_admit_stats(eng *e, int32_t pool_id, eng_adm_info *o)
{
    eng_scope *sc = eng_pool_scope(e, pool_id);
    memset(o, 0, sizeof *o);
    if (!sc) return;
    o->policy = sc->policy;
    memcpy(o->decisions, sc->decisions, sizeof o->decisions);
    o->settling = sc->settle.active;
    o->mean_tps = eng_warm_mean(e, pool_id, NULL);
}

double eng_warm_mean(const eng *e, int32_t pool_id, int32_t *n)
{
    double sum = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if ((pool_id < 0 || s->pool_id == pool_id) && slot_warm(s)) sum += adm_rate_tps(&s->rate), k++;
    }
    if (n) *n = k;
    return k ? sum / k : 0;
}
