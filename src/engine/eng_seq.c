/*
 * eng_seq.c - the one allocator of KV sequence ids.
 *
 *   [0, n_slots)            slots: id = slot index, held for the engine's life
 *   [n_slots, +n_pools)     pools: one each, from create to release
 *   [.., +n_parked_max)     parked histories: one each while parked
 *
 * Reserves keep one kind from starving another: 96 parked histories can
 * never take the last pool id.  kind[] is the truth eng_check compares the
 * slots, pools and parked entries with.
 */
#include "eng_impl.h"

pk_status eng_seq_init(eng *e, int32_t n_parked_max)
{
    eng_seqs *q = &e->seqs;
    memset(q, 0, sizeof *q);
    int32_t n[4] = { 0, e->p.n_slots, e->p.n_pools, n_parked_max };
    int32_t at = 0;
    for (int k = ENG_SEQ_SLOT; k <= ENG_SEQ_PARKED; k++) {
        q->lo[k] = at;
        q->hi[k] = at += n[k];
    }
    if (at > KV_MAX_SEQ) return PK_EINVAL;
    for (int32_t i = 0; i < e->p.n_slots; i++) q->kind[i] = ENG_SEQ_SLOT;
    q->n_used = e->p.n_slots;
    return PK_OK;
}

kv_seq eng_seq_take(eng *e, eng_seq_kind kind)
{
    eng_seqs *q = &e->seqs;
    ASSERT(kind == ENG_SEQ_POOL || kind == ENG_SEQ_PARKED);
    for (int32_t i = q->lo[kind]; i < q->hi[kind]; i++)
        if (q->kind[i] == ENG_SEQ_FREE) {
            ASSERT(mem_seq_cells(e->mem, i) == 0);
            q->kind[i] = (int8_t)kind;
            q->n_used++;
            return i;
        }
    return -1;
}

void eng_seq_give(eng *e, kv_seq seq)
{
    eng_seqs *q = &e->seqs;
    ASSERT(seq >= e->p.n_slots && seq < KV_MAX_SEQ && q->kind[seq] != ENG_SEQ_FREE);
    ASSERT(mem_seq_cells(e->mem, seq) == 0);
    q->kind[seq] = ENG_SEQ_FREE;
    q->n_used--;
}

int32_t eng_seq_max(const eng *e)
{
    return e->seqs.hi[ENG_SEQ_PARKED];
}
