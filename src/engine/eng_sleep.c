/*
 * eng_sleep.c - the engine asleep (--sleep-idle-seconds): the memory of the
 * model and its cache goes back to the OS while nobody asks for it, and
 * comes back before anything runs again.
 *
 *   awake ──(idle sleep_idle_ms: take_mailbox)──▶ eng_sleep_enter ──▶ asleep
 *   asleep ──(any message but stats: take_mailbox)──▶ eng_sleep_wake ──▶ awake
 *
 * Both transitions run on the engine thread between two steps, the only
 * thread that runs forward passes, so no pass ever sees weights or cells
 * that are half there.  While asleep: e->ctx and e->mem are NULL, no slot,
 * parked or RAM history exists, every pool is evicted (its tokens, id, pin
 * and files kept: the next task that needs it materializes it again, as
 * after an eviction under pressure), and stats answer e->sleep.sleep_stats.
 */
#include <stdio.h>
#include <stdlib.h>

#include "eng_impl.h"

bool eng_is_sleeping(const eng *e)
{
    return atomic_load(&((eng *)e)->sleep.asleep);
}

bool eng_sleep_enter(eng *e)
{
    if (!e->sleep.sleep_stats && !(e->sleep.sleep_stats = malloc(sizeof *e->sleep.sleep_stats))) return false;
    /* Histories first, with the cache still there: their cells go by the
     * sequence operations every other drop uses, so the counts stay true. */
    int32_t n_dropped;
    eng_drop_histories(e, -1, "the server sleeps", &n_dropped);
    for (int32_t i = 0; i < e->p.n_slots; i++) eng_pool_detach(e, &e->slots[i]);
    eng_pool_evict_all(e, "the server sleeps");
    eng_stats_fill(e, e->sleep.sleep_stats);
    eng_draft_sleep(e);
    mem_free(e->mem);
    e->mem = NULL;
    model_ctx_free(e->ctx);
    e->ctx = NULL;
    model_weights_release(e->m);
    /* Every block is gone: its removals leave now, before anyone can see
     * the engine asleep, not with the next message. */
    eng_kvev_step(e);
    e->sleep.sleeping = true;
    atomic_store(&e->sleep.asleep, true);
    fprintf(stderr, "polykv: idle for %g s: sleeping (weights and KV cache released)\n",
            e->p.sleep_idle_ms / 1000.0);
    return true;
}

pk_status eng_sleep_wake(eng *e)
{
    double t0 = pk_time_ms();
    model_weights_reload(e->m);
    model_ctx_params cp = eng_ctx_params(e);
    pk_status st = model_ctx_new(e->m, &cp, &e->ctx);
    if (st == PK_OK && (st = mem_new(e->ctx, &e->mem)) != PK_OK) {
        model_ctx_free(e->ctx);
        e->ctx = NULL;
    }
    if (st == PK_OK && (st = eng_draft_wake(e)) != PK_OK) {
        mem_free(e->mem);
        model_ctx_free(e->ctx);
        e->mem = NULL;
        e->ctx = NULL;
        model_weights_release(e->p.draft);
    }
    if (st != PK_OK) {
        e->ctx = NULL;
        model_weights_release(e->m);
        fprintf(stderr, "polykv: cannot wake up: %s\n", pk_status_str(st));
        return st;
    }
    e->sleep.sleeping = false;
    atomic_store(&e->sleep.asleep, false);
    fprintf(stderr, "polykv: awake in %.0f ms\n", pk_time_ms() - t0);
    return PK_OK;
}
