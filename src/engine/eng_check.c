/*
 * eng_check.c - the engine's invariants, asserted where the state is (as
 * kv_check does for the cells).  Run after every step in debug builds
 * (-DPK_DEBUG: make test-asan) and when POLYKV_CHECK=1 (tests/run.sh sets
 * it), so a broken invariant stops the run at the step that broke it.
 *
 *   cells      kv_check: counts, owners, free cells blank; every charge
 *              belongs to an id the allocator gave out
 *   queue      n_waiting is the wait list's length; a waiting task's
 *              pending entry is its own, no placed entry outlives the
 *              publish after its step (eng_pend_flush)
 *   slots      busy <=> a task; the slot's cells are exactly its n_cache
 *              positions [0, n_cache)
 *   parked     used <=> a parking id, holding its n_tokens cells
 *   RAM tier   spill_bytes is the sum of its entries
 *   pools      eng_pool_check: resident pools hold [0, L), evicted none,
 *              the allocator's pool ids are the tree's
 *   asleep     no cache, no history anywhere, the weights released
 */
#include "eng_impl.h"

static void check_asleep(const eng *e)
{
    ASSERT(!e->ctx && !e->mem && e->wq.n_waiting == 0 && model_weights_released(e->m));
    for (int32_t i = 0; i < e->p.n_slots; i++)
        ASSERT(e->slots[i].state == ENG_SLOT_IDLE && e->slots[i].n_cache == 0 && !e->slots[i].pool_id);
    for (int32_t i = 0; i < e->hist.n_parked_max; i++) ASSERT(!e->hist.parked[i].used);
    ASSERT(e->hist.spill_bytes == 0);
}

void eng_check(eng *e)
{
    if (e->sleep.sleeping) {
        check_asleep(e);
        return;
    }
    ASSERT(mem_check(e->mem));
    int32_t n_used_ids = 0, owned = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) {
        bool held = e->seqs.kind[s] != ENG_SEQ_FREE;
        n_used_ids += held;
        if (!held) ASSERT(mem_seq_cells(e->mem, s) == 0);
        owned += mem_seq_owned(e->mem, s);
    }
    ASSERT(n_used_ids == e->seqs.n_used && owned == mem_used(e->mem));

    int32_t n = 0;
    for (const eng_task *t = e->wq.wait_head; t; t = t->next) {
        n++;
        ASSERT(t->pend >= 0 && t->pend <= ENG_PEND_MAX);
        ASSERT(!t->pend || (e->pub.pend[t->pend - 1].task_id == t->id && !e->pub.pend[t->pend - 1].placed));
    }
    ASSERT(n == e->wq.n_waiting);
    ASSERT(e->pub.n_pend_placed == 0);

    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        ASSERT(e->seqs.kind[i] == ENG_SEQ_SLOT);
        ASSERT((s->state != ENG_SLOT_IDLE) == (s->task != NULL));
        ASSERT(!s->task || !s->task->pend);
        ASSERT(s->n_cache >= 0 && s->n_cache <= e->n_ctx_slot);
        ASSERT(mem_holds(e->mem, s->id, s->n_cache));
    }
    for (int32_t i = 0; i < e->hist.n_parked_max; i++) {
        const parked *p = &e->hist.parked[i];
        if (!p->used) {
            ASSERT(p->seq == -1);
            continue;
        }
        ASSERT(e->seqs.kind[p->seq] == ENG_SEQ_PARKED);
        ASSERT(mem_seq_cells(e->mem, p->seq) == p->n_tokens);
    }
    size_t bytes = 0;
    for (int32_t i = 0; i < e->hist.n_spill_max; i++)
        if (e->hist.spill[i].used) bytes += mem_image_bytes(e->mem, e->hist.spill[i].n_tokens);
    ASSERT(bytes == e->hist.spill_bytes);
    ASSERT(eng_pool_check(e));
}
