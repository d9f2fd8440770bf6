/*
 * tp.h - the compute threadpool.
 *
 * DESIGN: n threads, the caller being thread 0, so a pool of 1 starts no
 * thread.  tp_run() hands every thread the same job fn(ith, nth, arg) and
 * returns when all have finished.  Workers spin on an atomic generation
 * counter for a short while after a job (a forward pass runs hundreds of
 * jobs back to back) and then sleep (on a futex), so an idle process uses
 * no CPU.  Inside a job, tp_barrier() makes all nth threads meet
 * (spinning) so one job can hold several phases.  Kernels take no locks:
 * each thread works on its own slice, chosen from (ith, nth).
 *
 * Each thread also owns a fixed scratch area (tp_scratch) for kernels that
 * need private working memory (a packed weight panel), so nothing is
 * allocated while a job runs.
 *
 * Threads: tp_run and tp_free are called by one owner thread only (the
 * engine thread); tp_barrier and tp_scratch only from inside a job.
 */
#ifndef TP_H
#define TP_H

#include "../common/pk.h"

typedef struct tp_pool tp_pool;
typedef void (*tp_fn)(int ith, int nth, void *arg);

/* Creates a pool of n_threads (>= 1) compute threads. */
pk_status tp_new(int n_threads, tp_pool **out);
void tp_free(tp_pool *tp);                 /* NULL is a no-op */
int tp_n_threads(const tp_pool *tp);

/* Runs fn on every thread of the pool (the caller is thread 0) and waits. */
void tp_run(tp_pool *tp, tp_fn fn, void *arg);

/* All threads of the current job wait here for each other. */
void tp_barrier(tp_pool *tp);

/* Bytes of every thread's private scratch (tp_scratch). */
#define TP_SCRATCH_BYTES ((size_t)1 << 20)

/* Thread ith's private scratch: TP_SCRATCH_BYTES bytes, 64-byte aligned,
 * allocated by tp_new and owned by the pool.  Only code running as thread
 * ith of a job may use it, and nothing in it survives from one tk kernel
 * call to the next (each call may overwrite all of it). */
void *tp_scratch(tp_pool *tp, int ith);

/* Splits [0, n) into nth near-equal parts; sets [*lo, *hi) for part ith. */
static inline void tp_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif
