/*
 * eng_task.h - a completion task and its event channel, private to the
 * engine (eng.c) and its task functions (eng_task.c).
 *
 * A task has two references: the submitter's (HTTP thread) and the
 * engine's.  The channel is a FIFO of events under the task's own mutex, so
 * the engine never waits on a reader and readers never touch engine state.
 * `cancelled` is the one field both sides write: an atomic flag.
 */
#ifndef ENG_TASK_H
#define ENG_TASK_H

#include <pthread.h>
#include <stdatomic.h>

#include "eng.h"

/* The mailbox's messages: one kind per thing other threads ask of the
 * engine, answered in one switch (eng.c: take_mailbox).  A completion's
 * message is in its task. */
typedef enum eng_msg_kind {
    ENG_MSG_TASK = 1, ENG_MSG_STATS, ENG_MSG_POOL, ENG_MSG_ERASE, ENG_MSG_ADMISSION, ENG_MSG_CAPACITY,
    ENG_MSG_SLOT_FILE, ENG_MSG_WAKE, ENG_MSG_LOOKUP,
    ENG_MSG_END                 /* one past the last kind */
} eng_msg_kind;

typedef struct eng_msg {
    eng_msg_kind kind;
    struct eng_msg *next;       /* mailbox link (under eng.mu) */
} eng_msg;

struct eng_task {
    eng_msg msg;                 /* its mailbox message (ENG_MSG_TASK); first member */
    uint64_t id;
    eng_completion req;          /* prompt and stop strings owned by the task */
    int32_t *prompt;
    eng_bias *bias;              /* req.bias's copy */
    char *stop[ENG_MAX_STOP];
    int32_t n_stop;
    double t_submit_ms;

    pthread_mutex_t mu;          /* guards the channel below */
    pthread_cond_t cv;
    eng_event *q;                /* ring of q_cap events */
    int32_t q_head, q_n, q_cap;
    int32_t q_max;               /* tests: the ring never grows past this, 0 = no limit */
    bool finished;               /* the last event was queued */
    bool drained;                /* ... and read */
    bool held, unwoken;          /* eng_task_hold: pushes wait for eng_task_wake to wake the reader */

    /* Admission (engine thread): a new session of a scope with a policy,
     * held once (counted once), admitted over a "no". */
    bool adm_new, adm_held, adm_warned;
    int32_t adm_remaining;       /* X-Sessions-Remaining under "warn", -1 none */
    int32_t pend;                /* 1 + its entry in eng.pend while not placed, 0 none (under pub_mu) */

    atomic_bool cancelled;
    atomic_int refs;
    struct eng_task *next;       /* engine-side queues (engine thread only) */
};

eng_task *eng_task_new(uint64_t id, const eng_completion *c);
void eng_task_unref(eng_task *t);
/* Queues an event (the task takes its text).  ERROR and DONE finish it. */
void eng_task_push(eng_task *t, eng_event *ev);
/* The tokens of one step go to the reader together: after eng_task_hold
 * pushes queue without waking it, eng_task_wake wakes it once (a step
 * that keeps several speculated tokens costs the reader one wake-up, not
 * one per token).  A final event always wakes.  Engine thread only. */
void eng_task_hold(eng_task *t);
void eng_task_wake(eng_task *t);
/* Queues an ERROR event with a message. */
void eng_task_fail(eng_task *t, pk_status st, const char *msg);

#endif
