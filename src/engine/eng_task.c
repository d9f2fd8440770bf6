/* eng_task.c - completion tasks: creation, the event channel, references. */
#include "eng_task.h"
#include "../grammar/gram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

eng_task *eng_task_new(uint64_t id, const eng_completion *c)
{
    eng_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->msg.kind = ENG_MSG_TASK;
    t->adm_remaining = -1;
    t->id = id;
    t->req = *c;
    t->req.grammar = NULL;       /* referenced below, once nothing can fail */
    t->prompt = malloc((size_t)c->n_prompt * sizeof *t->prompt);
    t->q_cap = 64;
    t->q_max = c->test_event_cap;
    if (t->q_max > 0 && t->q_max < t->q_cap) t->q_cap = MAX(t->q_max, 2);
    t->q = calloc((size_t)t->q_cap, sizeof *t->q);
    if (c->n_bias > 0 && !(t->bias = malloc((size_t)c->n_bias * sizeof *t->bias))) goto fail;
    if (!t->prompt || !t->q) goto fail;
    memcpy(t->prompt, c->prompt, (size_t)c->n_prompt * sizeof *t->prompt);
    t->req.prompt = t->prompt;
    if (c->n_bias > 0) memcpy(t->bias, c->bias, (size_t)c->n_bias * sizeof *t->bias);
    t->req.bias = t->bias;
    for (int i = 0; i < ENG_MAX_STOP && c->stop[i]; i++) {
        if (!c->stop[i][0]) continue;
        if (!(t->stop[t->n_stop] = strdup(c->stop[i]))) goto fail;
        t->n_stop++;
    }
    for (int i = 0; i < ENG_MAX_STOP; i++) t->req.stop[i] = t->stop[i];
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    atomic_init(&t->cancelled, false);
    atomic_init(&t->refs, 2);
    t->req.grammar = gram_ref(c->grammar);
    return t;
fail:
    free(t->prompt);
    free(t->bias);
    free(t->q);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t);
    return NULL;
}

void eng_event_clear(eng_event *ev)
{
    if (!ev) return;
    free(ev->text);
    memset(ev, 0, sizeof *ev);
}

void eng_task_unref(eng_task *t)
{
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    for (int32_t i = 0; i < t->q_n; i++) eng_event_clear(&t->q[(t->q_head + i) % t->q_cap]);
    free(t->q);
    free(t->prompt);
    free(t->bias);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    gram_free(t->req.grammar);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* Grows the ring to twice its size; false when that is impossible (out of
 * memory, or past the test cap). */
static bool grow(eng_task *t)
{
    int32_t cap = t->q_cap * 2;
    if (t->q_max > 0 && cap > t->q_max) cap = t->q_max;
    if (cap <= t->q_cap) return false;
    eng_event *nq = calloc((size_t)cap, sizeof *nq);
    if (!nq) return false;
    for (int32_t i = 0; i < t->q_n; i++) nq[i] = t->q[(t->q_head + i) % t->q_cap];
    free(t->q);
    t->q = nq;
    t->q_head = 0;
    t->q_cap = cap;
    return true;
}

/* The ring keeps its last free entry for the final event: a TOKEN never
 * takes it, so DONE or ERROR always has room, even out of memory.  When a
 * TOKEN finds only that entry and the ring cannot grow, the task ends with
 * an ERROR there (its reader sees why) and is cancelled. */
void eng_task_push(eng_task *t, eng_event *ev)
{
    pthread_mutex_lock(&t->mu);
    if (t->finished) {                    /* nothing follows DONE / ERROR */
        pthread_mutex_unlock(&t->mu);
        eng_event_clear(ev);
        return;
    }
    bool final = ev->kind == ENG_EV_DONE || ev->kind == ENG_EV_ERROR;
    if (!final && t->q_n + 1 >= t->q_cap && !grow(t)) {
        eng_event_clear(ev);
        *ev = (eng_event){ .kind = ENG_EV_ERROR, .status = PK_ENOMEM };
        snprintf(ev->message, sizeof ev->message, "out of memory: the task's event channel cannot grow");
        atomic_store(&t->cancelled, true);
        final = true;
    }
    ASSERT(t->q_n < t->q_cap);
    t->q[(t->q_head + t->q_n) % t->q_cap] = *ev;
    t->q_n++;
    if (final) t->finished = true;
    memset(ev, 0, sizeof *ev);
    if (t->held && !final) t->unwoken = true;
    else pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void eng_task_hold(eng_task *t)
{
    pthread_mutex_lock(&t->mu);
    t->held = true;
    pthread_mutex_unlock(&t->mu);
}

void eng_task_wake(eng_task *t)
{
    pthread_mutex_lock(&t->mu);
    if (t->unwoken) pthread_cond_broadcast(&t->cv);
    t->held = t->unwoken = false;
    pthread_mutex_unlock(&t->mu);
}

void eng_task_fail(eng_task *t, pk_status st, const char *msg)
{
    eng_event ev = { .kind = ENG_EV_ERROR, .status = st };
    snprintf(ev.message, sizeof ev.message, "%s", msg);
    eng_task_push(t, &ev);
}

pk_status eng_task_next(eng_task *t, eng_event *ev, int timeout_ms)
{
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&t->mu);
    while (t->q_n == 0 && !t->drained) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&t->cv, &t->mu);
        } else if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT) {
            if (t->q_n == 0 && !t->drained) {
                pthread_mutex_unlock(&t->mu);
                return PK_ETIMEDOUT;
            }
        }
    }
    if (t->q_n == 0) {
        pthread_mutex_unlock(&t->mu);
        return PK_ENOTFOUND;
    }
    *ev = t->q[t->q_head];
    memset(&t->q[t->q_head], 0, sizeof *ev);
    t->q_head = (t->q_head + 1) % t->q_cap;
    t->q_n--;
    if (ev->kind == ENG_EV_DONE || ev->kind == ENG_EV_ERROR) t->drained = true;
    pthread_mutex_unlock(&t->mu);
    return PK_OK;
}

void eng_task_cancel(eng_task *t)
{
    if (t) atomic_store(&t->cancelled, true);
}

void eng_task_release(eng_task *t)
{
    if (!t) return;
    eng_task_cancel(t);
    eng_task_unref(t);
}
