/*
 * tp.c - the compute threadpool (see tp.h for the contract).
 *
 * DESIGN
 *
 *   owner (ith 0)                        worker ith (1 .. n-1)
 *   -------------                        ---------------------
 *   fn, arg = job; n_done = 0            seen = gen
 *   gen++, wake sleepers  ------------>  wait until gen != seen
 *   fn(0, n, arg)                        fn(ith, n, arg)
 *   wait until n_done == n-1  <-------   n_done++ (the last one wakes the owner)
 *
 * Every wait in the pool (a worker for the next job, the owner for the
 * workers, a thread at the barrier) is the same primitive, wait_change():
 * spin on the word with pause for a while, then sleep on it with a futex.
 * Spinning keeps the hundreds of back-to-back jobs of a forward pass at
 * sub-microsecond dispatch cost; sleeping makes an idle pool cost no CPU
 * and keeps an oversubscribed machine (more runnable threads than cores)
 * from stalling on a waiter that burns the core its partner needs.  While
 * spinning, waiters start yielding the core after a short while for the
 * same reason.
 *
 * A waiter announces itself in the word's sleeper count before its last
 * check and the futex call; a waker changes the word and then reads that
 * count, and calls futex_wake only when someone sleeps.  Both sides are
 * sequentially consistent (a Dekker pair), and the kernel rechecks the word
 * before sleeping, so a wake-up is never lost.
 *
 * The barrier counts arrivals; the last thread in resets the count and bumps
 * bar_gen, the generation the others wait on (a sense-reversing barrier with
 * a counter for a sense, so threads need no private state).
 *
 * Hot words have their own cache lines: gen is written once per job by the
 * owner and polled by every worker; n_done and the barrier words are
 * written by all.
 *
 * Invariants: between jobs every worker has finished (n_done == n - 1), so
 * the owner may rewrite fn/arg/n_done without a race; bar_count is 0 outside
 * a barrier.
 */
#include "tp.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#else
static inline void cpu_relax(void) { sched_yield(); }
#endif

/* How long an idle worker spins for the next job before it sleeps: long
 * enough to bridge the owner's serial work between the jobs of a forward
 * pass, short enough that an idle pool stops burning CPU at once. */
#define TP_JOB_SPIN_US 1000
/* How long the owner and barrier waiters spin: a job's threads normally
 * arrive within microseconds of each other. */
#define TP_SYNC_SPIN_US 200
/* Pause rounds between clock reads; pauses before a spinner starts yielding. */
#define TP_SPIN_CHECK 128
#define TP_YIELD_AFTER 2048

#define TP_LINE 64

/* A word threads wait on, and how many sleep on it. */
typedef struct {
    atomic_uint v;
    atomic_int n_sleep;
} tp_word;

struct tp_pool {
    int n;                                   /* threads, the owner included; fixed */
    pthread_t *threads;                      /* [n - 1] workers; owner only */
    char *scratch;                           /* [n][TP_SCRATCH_BYTES], thread ith its row */

    /* Job slot: written by the owner between jobs, read by workers. */
    tp_fn fn;
    void *arg;
    atomic_bool stop;                        /* set by tp_free before its last bump */

    alignas(TP_LINE) tp_word gen;            /* bumped by the owner per job / at stop */
    alignas(TP_LINE) tp_word n_done;         /* workers finished with this job */
    alignas(TP_LINE) atomic_uint bar_count;  /* threads arrived at the barrier */
    alignas(TP_LINE) tp_word bar_gen;        /* bumped when all have arrived */
};

typedef struct {
    tp_pool *tp;
    int ith;
} tp_worker_arg;

static void futex_wait(atomic_uint *addr, unsigned val)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until w->v differs from `old`: spins for about spin_us, then
 * sleeps.  Returns the new value. */
static unsigned wait_change(tp_word *w, unsigned old, int64_t spin_us)
{
    int64_t t0 = 0;
    unsigned v;
    for (int round = 0;; round++) {
        for (int i = 0; i < TP_SPIN_CHECK; i++) {
            v = atomic_load_explicit(&w->v, memory_order_acquire);
            if (v != old) return v;
            cpu_relax();
        }
        if (round == 0) t0 = pk_time_us();
        else if (pk_time_us() - t0 > spin_us) break;
        if (round * TP_SPIN_CHECK >= TP_YIELD_AFTER) sched_yield();
    }
    atomic_fetch_add(&w->n_sleep, 1);
    while ((v = atomic_load(&w->v)) == old) futex_wait(&w->v, old);
    atomic_fetch_sub(&w->n_sleep, 1);
    return v;
}

/* Call after changing w->v: wakes whoever sleeps on it. */
static void wake(tp_word *w)
{
    if (atomic_load(&w->n_sleep) > 0) futex_wake_all(&w->v);
}

static void *worker_main(void *p)
{
    tp_worker_arg wa = *(tp_worker_arg *)p;
    free(p);
    tp_pool *tp = wa.tp;
    unsigned seen = 0;
    pthread_setname_np(pthread_self(), "pk-compute");
    for (;;) {
        seen = wait_change(&tp->gen, seen, TP_JOB_SPIN_US);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        tp->fn(wa.ith, tp->n, tp->arg);
        if (atomic_fetch_add(&tp->n_done.v, 1) + 1 == (unsigned)tp->n - 1) wake(&tp->n_done);
    }
    return NULL;
}

/* Publishes the current job (or the stop flag) to the workers. */
static void publish(tp_pool *tp)
{
    atomic_fetch_add(&tp->gen.v, 1);
    wake(&tp->gen);
}

pk_status tp_new(int n_threads, tp_pool **out)
{
    *out = NULL;
    if (n_threads < 1) return PK_EINVAL;
    tp_pool *tp = aligned_alloc(TP_LINE, (sizeof *tp + TP_LINE - 1) / TP_LINE * TP_LINE);
    if (!tp) return PK_ENOMEM;
    *tp = (tp_pool){ .n = n_threads };
    atomic_init(&tp->stop, false);
    atomic_init(&tp->gen.v, 0);
    atomic_init(&tp->gen.n_sleep, 0);
    atomic_init(&tp->n_done.v, 0);
    atomic_init(&tp->n_done.n_sleep, 0);
    atomic_init(&tp->bar_count, 0);
    atomic_init(&tp->bar_gen.v, 0);
    atomic_init(&tp->bar_gen.n_sleep, 0);
    tp->scratch = aligned_alloc(TP_LINE, (size_t)n_threads * TP_SCRATCH_BYTES);
    if (n_threads > 1) tp->threads = calloc((size_t)n_threads - 1, sizeof *tp->threads);
    if (!tp->scratch || (n_threads > 1 && !tp->threads)) {
        free(tp->scratch);
        free(tp->threads);
        free(tp);
        return PK_ENOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        tp_worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (tp_worker_arg){ tp, i };
        if (!wa || pthread_create(&tp->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n = i;           /* tp_free stops and joins the i - 1 started */
            tp_free(tp);
            return PK_ENOMEM;
        }
    }
    *out = tp;
    return PK_OK;
}

void tp_free(tp_pool *tp)
{
    if (!tp) return;
    if (tp->n > 1) {
        atomic_store(&tp->stop, true);
        publish(tp);
        for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i - 1], NULL);
    }
    free(tp->threads);
    free(tp->scratch);
    free(tp);
}

void *tp_scratch(tp_pool *tp, int ith)
{
    return tp->scratch + (size_t)ith * TP_SCRATCH_BYTES;
}

int tp_n_threads(const tp_pool *tp)
{
    return tp->n;
}

void tp_run(tp_pool *tp, tp_fn fn, void *arg)
{
    if (tp->n == 1) {
        fn(0, 1, arg);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_done.v, 0, memory_order_relaxed);
    publish(tp);
    fn(0, tp->n, arg);
    unsigned done = atomic_load_explicit(&tp->n_done.v, memory_order_acquire);
    while (done != (unsigned)tp->n - 1) done = wait_change(&tp->n_done, done, TP_SYNC_SPIN_US);
}

void tp_barrier(tp_pool *tp)
{
    if (tp->n == 1) return;
    unsigned g = atomic_load_explicit(&tp->bar_gen.v, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->bar_count, 1, memory_order_acq_rel) == (unsigned)tp->n - 1) {
        atomic_store_explicit(&tp->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&tp->bar_gen.v, 1);
        wake(&tp->bar_gen);
        return;
    }
    wait_change(&tp->bar_gen, g, TP_SYNC_SPIN_US);
}
