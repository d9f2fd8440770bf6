/*
 * eng_check.c - the engine's invariants, asserted where the state is (as
 * kv_check does for the cells).  Run after every step in debug builds
 * (-DPK_DEBUG: make test-asan) and when POLYKV_CHECK=1 (tests/run.sh sets
 * it), so a broken invariant stops the run at the step that broke it.
 *
 *   mailbox    the inbox list ends at its tail; every message a known kind
 *   memory     mem_check: counts, owners, free cells blank; every charge
 *              belongs to an id the allocator gave out
 *   queue      n_waiting is the wait list's length, the tail its last; a
 *              waiting task's pending entry is its own
 *   published  no placed entry outlives the publish after its step
 *              (eng_pend_flush)
 *   scratch    the idle matchers, the event and rate rings in range; the
 *              server policy valid; asleep (atomic) agrees with sleeping
 *   slots      busy <=> a task; the slot's cells are exactly its n_hist
 *              positions [0, n_hist)
 *   histories  eng_hist_check: a parked record holds a parking id and
 *              exactly [0, n_tokens) under it, a RAM record an image;
 *              counts and spill_bytes add up; no entry left pinned
 *   pool-dir   eng_persist_check: saved ids distinct, in range, only with
 *              --pool-dir
 *   pools      eng_pool_check: resident pools hold [0, L), evicted none,
 *              the allocator's pool ids are the tree's
 *   KV events  eng_kvev_check: the tracker's counts are its holders',
 *              and each holder has the full blocks of what it holds now
 *   asleep     no cache, no history anywhere, the weights released
 */
#include "eng_impl.h"

static void check_asleep(const eng *e)
{
    ASSERT(!e->ctx && !e->mem && e->wq.n_waiting == 0 && model_weights_released(e->m));
    for (int32_t i = 0; i < e->p.n_slots; i++)
        ASSERT(e->slots[i].state == ENG_SLOT_IDLE && e->slots[i].n_hist == 0 && !e->slots[i].pool_id);
    ASSERT(e->hist.n_parked == 0 && e->hist.n_spilled == 0 && e->hist.spill_bytes == 0);
}

static void check_mailbox(eng *e)
{
    pthread_mutex_lock(&e->mb.mu);
    const eng_msg *last = NULL;
    for (const eng_msg *m = e->mb.inbox_head; m; m = m->next) {
        ASSERT(m->kind >= ENG_MSG_TASK && m->kind < ENG_MSG_END);
        last = m;
    }
    ASSERT(last == e->mb.inbox_tail);
    pthread_mutex_unlock(&e->mb.mu);
}

static void check_queue(const eng *e)
{
    int32_t n = 0;
    const eng_task *last = NULL;
    for (const eng_task *t = e->wq.wait_head; t; t = t->next) {
        n++;
        last = t;
        ASSERT(t->pend >= 0 && t->pend <= ENG_PEND_MAX);
        ASSERT(!t->pend || (e->pub.pend[t->pend - 1].task_id == t->id && !e->pub.pend[t->pend - 1].placed));
    }
    ASSERT(n == e->wq.n_waiting && last == e->wq.wait_tail);
}

static void check_published(eng *e)
{
    pthread_mutex_lock(&e->pub.pub_mu);
    ASSERT(e->pub.n_pend_placed == 0);          /* the publish after a step flushes them */
    for (int32_t i = 0; i < ENG_PEND_MAX; i++) ASSERT(!e->pub.pend[i].task_id || !e->pub.pend[i].placed);
    pthread_mutex_unlock(&e->pub.pub_mu);
}

static void check_slots(const eng *e)
{
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        ASSERT(e->seqs.kind[i] == ENG_SEQ_SLOT);
        ASSERT((s->state != ENG_SLOT_IDLE) == (s->task != NULL));
        ASSERT(!s->task || !s->task->pend);
        ASSERT(s->n_hist >= 0 && s->n_hist <= e->n_ctx_slot);
        ASSERT(mem_holds(e->mem, s->id, s->n_hist));
    }
}

static void check_hists(const eng *e)
{
    ASSERT(eng_hist_check(e));
    ASSERT(e->hist.n_marker >= 0 && e->hist.n_marker <= (int32_t)ARRAY_LEN(e->hist.marker));
}

static void check_scratch(const eng *e)
{
    ASSERT(e->batch.n_gram_idle >= 0 && e->batch.n_gram_idle <= (int32_t)ARRAY_LEN(e->batch.gram_idle));
    for (int32_t i = 0; i < e->batch.n_gram_idle; i++) ASSERT(e->batch.gram_idle[i]);
    ASSERT(e->stat.ev_n >= 0 && e->stat.ev_n <= ENG_CACHE_EVENTS);
    ASSERT(e->stat.ev_head >= 0 && e->stat.ev_head < ENG_CACHE_EVENTS);
    ASSERT(e->stat.agg_head >= 0 && e->stat.agg_head < AGG_RING);
    ASSERT(!e->adm.server.policy.set || adm_policy_check(&e->adm.server.policy) == PK_OK);
    ASSERT(atomic_load(&e->sleep.asleep) == e->sleep.sleeping);
}

void eng_check(eng *e)
{
    check_mailbox(e);
    check_published(e);
    check_scratch(e);
    ASSERT(eng_kvev_check(e));
    ASSERT(eng_draft_check(e));
    if (e->sleep.sleeping) {
        check_asleep(e);
        return;
    }
    ASSERT(mem_check(e->mem));
    int32_t n_used_ids = 0;                     /* charges adding up: mem_check */
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) {
        bool held = e->seqs.kind[s] != ENG_SEQ_FREE;
        n_used_ids += held;
        if (!held) ASSERT(mem_seq_cells(e->mem, s) == 0);
    }
    ASSERT(n_used_ids == e->seqs.n_used);
    check_queue(e);
    check_slots(e);
    check_hists(e);
    ASSERT(eng_pool_check(e));
    ASSERT(eng_persist_check(e));
}
