/*
 * eng_impl.h - the engine's private state, shared by its files: the loop
 * (eng.c), its public face and mailbox (eng_api.c), placement
 * (eng_place.c), the history store (eng_hist.c), sequence ids (eng_seq.c),
 * pools (eng_pool.c), state on disk (eng_save.c), admission (eng_admit.c),
 * sleeping (eng_sleep.c) and the invariants (eng_check.c).  struct eng is
 * grouped by owner below: each sub-object says which file writes it and
 * which threads may touch it.
 */
#ifndef ENG_IMPL_H
#define ENG_IMPL_H

#include <pthread.h>
#include <string.h>

#include "eng.h"
#include "eng_task.h"
#include "../mem/mem.h"

#define AGG_RING 512   /* decode steps remembered for the aggregate rate */
#define ENG_SPEC_MAX ENG_SPEC_MAX_GUESSES
#define ENG_SPEC_STEP 64  /* guesses all sessions may verify in one step */

/* ---- the mailbox ---- */

/* A control message (eng_msg, eng_task.h) is an eng_call on the asker's
 * stack, which waits until `done`; its arguments and answer are the union
 * member of its kind (eng_api.c's table says how each kind is answered). */
typedef struct eng_call {
    eng_msg msg;
    bool done;                  /* under mb.mu; the asker waits on reply_cv */
    pk_status status;           /* the answer of every kind */
    double t0_ms;               /* when it was posted */
    struct eng_call *next_wait; /* a deferred answer's queue (engine thread) */
    union {
        eng_stats *stats;                                                   /* STATS */
        struct { const eng_pool_req *rq; eng_pool_reply *out; } pool;       /* POOL */
        struct { int32_t slot; int32_t n_erased; } erase;                   /* ERASE: -1 every idle one */
        struct { int32_t pool_id; const adm_policy *set; adm_policy *out; } admission;  /* 0: server */
        struct {
            int32_t pool_id, expected_tokens;
            const char *session;
            eng_capacity_reply *out;
        } capacity;                                                         /* CAPACITY */
        struct {
            const int32_t *tokens;
            int32_t n;
            eng_lookup_reply *out;
        } lookup;                                                           /* LOOKUP */
        struct {
            int32_t slot;
            const char *dir, *name;
            bool save;          /* save, else restore */
            eng_file_reply *out;
        } file;                                                             /* SLOT_FILE */
    } u;
} eng_call;

/* Readers that asked in the last 2 s get what they read refreshed after
 * every step, so they never wait for a batch to end. */
#define PUB_WANT_MS 2000.0
#define PUB_FRESH_MS 250.0

/* Marks c answered and wakes its asker (engine thread). */
void eng_call_done(struct eng *e, eng_call *c);

/* ---- admission scopes (eng_admit.c) ---- */

/* A pool's or the server's admission state. */
typedef struct eng_scope {
    adm_policy policy;
    adm_settle settle;
    uint64_t decisions[ENG_ADM_N];
    uint64_t held_pass;         /* the placement pass that held a NEW session of it */
    int32_t held_decision;      /* what that hold was (ENG_ADM_HOLD or ENG_ADM_QUEUE) */
} eng_scope;

/* One slot as admission sees it, and every input of a capacity answer. */
typedef struct eng_adm_slot {
    int32_t pool_id;
    bool running, decoding, recent, pausing;
    char session[ENG_SESSION_CAP];
    double tps_ewma;
    int32_t n_decoded, tokens_left, ctx_used, kv_owned;
    uint64_t task_id;
} eng_adm_slot;

#define ENG_ADM_KNOWN (ENG_MAX_SLOTS + 96)
#define ENG_ADM_AWAY 96         /* histories out of their slots that admission still counts */
#define ENG_ADM_ROWS (ENG_MAX_SLOTS + ENG_ADM_AWAY)
typedef struct eng_adm_in {
    /* The slots, then (up to n_rows) the recent histories that left theirs
     * for a parked reserve id or RAM: an agent between turns whose cells
     * made room for another is still an agent between turns (without them
     * the gate admitted a third agent on the count of two: a spilled
     * history had dropped out of it). */
    eng_adm_slot slot[ENG_ADM_ROWS];
    int32_t n_slots, n_rows, n_busy;
    int32_t kv_free_cells, kv_used, kv_total, ctx_slot;
    double now_ms;
    double rate_window_ms;
    int32_t rate_window_tokens;
    adm_curve curve;                              /* e->curve */
    char known[ENG_ADM_KNOWN][ENG_SESSION_CAP];   /* session ids with a context here */
    int32_t n_known;
} eng_adm_in;

/* A request submitted and not placed yet: in the mailbox or the wait
 * queue.  The capacity answer counts it (readers answer from what the
 * last step published, and a request sent during a step is in neither). */
#define ENG_PEND_MAX 256
typedef struct eng_pend {
    uint64_t task_id;           /* 0: a free entry */
    int32_t pool_id;            /* 0: no pool */
    bool held;                  /* held by its admission gate: not load, not an admit */
    bool placed;                /* placed since the last publish, which cannot show it yet */
    char session[ENG_SESSION_CAP];
} eng_pend;

/* A scope as published for readers. */
typedef struct eng_pub_scope {
    int32_t pool_id, prefix_len;
    eng_scope sc;
} eng_pub_scope;

/* What the engine publishes after a step when someone reads it (capacity,
 * stats), so those answers never wait for a batch: under pub_mu. */
typedef struct eng_pub {
    bool valid;
    double t_ms;                /* when it was filled */
    eng_stats stats;
    eng_adm_in in;
    eng_pub_scope scope[ENG_MAX_POOLS + 1];   /* [0]: the server's */
    int32_t n_scope;
} eng_pub;

/* ---- sequence ids (eng_seq.c) ---- */

typedef enum eng_seq_kind { ENG_SEQ_FREE = 0, ENG_SEQ_SLOT, ENG_SEQ_POOL, ENG_SEQ_PARKED } eng_seq_kind;

/* One allocator for every sequence id: slots own [0, n_slots), then a
 * reserve for pools and one for parked histories.  owner[] says who holds
 * each id, which eng_check compares with the slots, pools and parked. */
typedef struct eng_seqs {
    int8_t kind[KV_MAX_SEQ];    /* eng_seq_kind of each id */
    int32_t lo[4], hi[4];       /* each kind's reserve [lo, hi) */
    int32_t n_used;
} eng_seqs;

typedef struct slot {
    int32_t id;                 /* also its KV sequence id */
    eng_slot_state state;
    eng_task *task;
    int32_t *hist;              /* [n_ctx_slot] its history's tokens, state under sequence id */
    int32_t n_hist;             /* the history's length: positions [0, n_hist) */
    double last_use_s;          /* end of the history's last actual use */
    bool moved;                 /* its conversation went on in another slot */
    double max_gap_ms;          /* its conversation's longest pause between turns, 0 none */
    int32_t marker_pos;         /* pol_last_marker of the history (idle slots) */
    int32_t n_prefilled;        /* prompt tokens in the cache for this task */
    int32_t n_progress;         /* n_prefilled last reported (report_progress) */
    bool has_params;            /* the current/last task's parameters, for /slots */
    smp_params last_sp;
    int32_t last_n_predict;
    int32_t next_token;         /* sampled, not yet decoded */
    smp_ctx *smp;
    struct gram_matcher *gm;    /* the task's grammar state, NULL unconstrained */
    char *text;                 /* generated bytes of this task */
    size_t text_len, text_cap, text_sent;
    int32_t n_gen, n_cached, n_prompt;
    bool truncated;             /* the context was shifted or hit its end while shared */
    double t_start_ms, t_prompt_ms, t_last_ms;
    adm_rate rate;              /* experienced decode speed (adm.h) */
    uint64_t task_id;
    int32_t logits_row;         /* row in this step's logits, -1 none */
    int32_t last_source_seq, last_reused;
    char last_reason[POL_REASON_CAP];
    char session[ENG_SESSION_CAP];  /* session of the history / task, "" none */
    int32_t pool_id, pool_shared;   /* attached pool (0 none) and its tokens shared */
    /* Speculation (eng_spec.c): this step's guesses after next_token, in
     * the batch at positions n_hist + 1.. and in the sequence's cells until
     * the sampler has judged them; the task's counts; the adaptive limit. */
    int32_t draft[ENG_SPEC_MAX];
    int32_t n_draft;
    kv_pos spec_pos0;           /* the position of this step's first token when it guesses (its
                                   cells and state past n_hist are judged by eng_spec_trim), -1 */
    int32_t n_replay;           /* hybrids: kept tokens a rollback took out of the state,
                                   hist[n_hist ..), decoded again before next_token */
    int32_t n_replay_step;      /* ... of them in this step's batch */
    int32_t n_drafted, n_accepted, n_verify_steps;
    int32_t spec_k;             /* guesses the next step may verify (grows on success) */
    int32_t spec_misses;        /* verifications in a row that kept nothing */
    int32_t spec_skip;          /* tokens to decode before guessing again */
    int32_t spec_key;           /* the key length this step's n-gram guess matched */
    /* A draft model's side (eng_draft.c): what its sequence for this slot
     * holds, and this step's proposal. */
    int32_t *d_hist;            /* [n_ctx_slot] tokens of the draft's cells, NULL without -md */
    int32_t d_n;
    int32_t d_prop[ENG_SPEC_MAX];
    int32_t n_prop;
    int32_t d_gram_at;          /* the grammar's state as the draft began */
} slot;

/* An idle slot whose history its conversation left for less than ms ago
 * (adm_live_ms: a live session; adm_turn_ms: an agent between turns). */
static inline bool history_within(double last_use_s, double now_s, double ms)
{
    return (now_s - last_use_s) * 1000.0 < ms;
}

/* A slot that runs a session or keeps its history: the session is known,
 * its next request a continuation (eng_session_known, eng_adm_inputs). */
static inline bool slot_knows(const slot *s)
{
    return s->state != ENG_SLOT_IDLE || s->n_hist > 0;
}

static inline bool slot_history_within(const slot *s, double now_s, double ms)
{
    return s->n_hist > 0 && !s->moved && history_within(s->last_use_s, now_s, ms);
}

/* A slot decoding with a speed to count: admission's warm rule (adm.c's
 * warm(), over the engine's slots). */
static inline bool slot_warm(const slot *s)
{
    return s->state == ENG_SLOT_DECODE && s->n_gen >= ADM_WARM_TOKENS && adm_rate_tps(&s->rate) > 0;
}

/* The mean speed of the warm slots attached to pool_id (-1: every slot),
 * 0 when none is warm; *n their count when n is not NULL. */
double eng_warm_mean(const eng *e, int32_t pool_id, int32_t *n);

/* Agents between turns whose histories left their slots (parked, in RAM)
 * for less than adm_turn_ms: with the slots', the load curve's count. */
int32_t eng_away_pausing(const eng *e, double now_s);

/* A history out of its slot (eng_hist.c): parked, its state under a
 * parking id, or in RAM, its state copied out as an image. */
typedef enum hist_where { HIST_FREE = 0, HIST_PARKED, HIST_RAM } hist_where;

typedef struct hrec {
    hist_where where;
    kv_seq seq;                 /* HIST_PARKED: its parking id; -1 otherwise */
    uint8_t *image;             /* HIST_RAM: its state for [0, n_tokens) (mem.h) */
    int32_t *tokens;            /* [n_tokens], owned */
    int32_t n_tokens;
    int32_t marker_pos;         /* its turn marker, -1 none */
    double last_use_s;          /* kept from its slot: no renewed protection */
    char session[ENG_SESSION_CAP];  /* still a known session's context: never gated as new */
    double max_gap_ms;          /* kept from its slot (adm_live_ms) */
    int32_t pool_id;            /* kept from its slot: its agent's admission scope */
    uint64_t serial;            /* unique in the process: KV events tell a new record in a reused entry */
} hrec;

/* ---- the engine, by owner ----
 *
 * Each sub-object is written by the file named beside it and checked by
 * eng_check; "engine" means the engine thread only.  Other threads touch
 * only the mailbox (under mb.mu), the published copy (under pub.pub_mu) and
 * sleep.asleep (atomic). */

/* The mailbox (eng.c): posted by any thread, taken by the engine. */
typedef struct eng_mailbox {
    pthread_mutex_t mu;         /* guards everything below and calls' done */
    pthread_cond_t cv;          /* wakes the engine */
    pthread_cond_t reply_cv;    /* wakes askers of control messages */
    eng_msg *inbox_head, *inbox_tail;
    bool stop;
    uint64_t next_id;
} eng_mailbox;

/* Tasks taken from the mailbox and not placed yet, in placement order
 * (eng_place.c's functions are the only writers of the list; nap is the
 * loop's, eng.c; engine). */
typedef struct eng_waitq {
    eng_task *wait_head, *wait_tail;
    int32_t n_waiting;          /* the list's length */
    uint64_t place_pass;        /* eng_place_waiting calls */
    bool nap;                   /* the last step had nothing to do but hold requests */
} eng_waitq;

/* Histories out of their slots (eng_hist.c: the store; eng_place.c the
 * snapshot and markers; engine). */
typedef struct eng_hists {
    hrec *rec;                  /* [n_rec]: parked and RAM histories, one table */
    int32_t n_rec;              /* n_parked_max + n_spill_max */
    int32_t n_parked_max;       /* parking ids */
    int32_t n_spill_max;        /* RAM entries */
    int32_t n_parked, n_spilled;
    size_t spill_bytes;         /* images held now, at most p.cache_ram_mib */
    int32_t spill_pin;          /* RAM entry being restored: never evicted, -1 none */
    uint64_t next_serial;       /* hrec.serial of the next record */
    struct eng_snap *snap;      /* placement scratch */
    int32_t marker[16];         /* turn marker tokens */
    int32_t n_marker;
} eng_hists;

/* One step's batch and sampling scratch (eng.c; engine). */
typedef struct eng_batch {
    int32_t *b_tok;             /* [n_batch] */
    kv_pos *b_pos;
    int32_t *b_nseq;
    kv_seq (*b_seq)[MODEL_MAX_TOKEN_SEQS];
    bool *b_want;
    float *logits;              /* [n_rows][n_vocab] */
    int32_t n_rows;             /* n_slots, and ENG_SPEC_STEP more once a session speculates */
    struct gram_vocab *gvocab;  /* token bytes for grammar masks, built at the first constrained task */
    float *gram_logits;         /* [n_vocab] a row with the grammar's mask applied */
    float *bias_logits;         /* [n_vocab] a row with a request's logit biases added */
    struct gram_matcher *gram_idle[8];  /* finished tasks' matchers, oldest first: a task on an
                                           equal grammar takes one, warm (states, masks) */
    int32_t n_gram_idle;
} eng_batch;

/* Counters and the cache-event ring (eng.c, eng_place.c's events and
 * eng_hist.c's restores; engine). */
typedef struct eng_counters {
    int64_t step;
    struct { double t_ms; int32_t n; } agg[AGG_RING];
    int32_t agg_head;
    double prompt_tps;          /* EWMA of prefill tokens/s */
    uint64_t n_prompt_tokens, n_predicted_tokens, n_decode_calls, n_busy_slots_sum, n_done;
    double control_ms;          /* see eng_stats.control_ms_total */
    double kv_events_ms;        /* see eng_stats.kv_events_ms_total */
    double draft_ms;            /* see eng_stats.draft_ms_total */
    int32_t n_tokens_max;       /* largest slot n_hist seen after a decode */
    uint64_t n_tokens_reused, n_tokens_read, n_tokens_restored;
    uint64_t n_drafted, n_accepted, n_verify_steps;
    double prompt_ms_total, predicted_ms_total;
    eng_cache_event events[ENG_CACHE_EVENTS];
    int32_t ev_head, ev_n;
} eng_counters;

/* Admission's state (eng_admit.c; the curve is folded by eng.c's
 * sample_and_emit; engine). */
typedef struct eng_adm_state {
    eng_scope server;           /* the server scope */
    adm_curve curve;            /* the load curve, folded after every step */
    double t_step_ms;           /* when the running step began (after the mailbox) */
    eng_adm_in adm_in;          /* scratch for snapshots */
    bool adm_in_step;           /* adm_in is this step's, read once by eng_admit_step for all
                                   scopes and by publish after it */
} eng_adm_state;

/* What readers take without waiting for a step (eng_admit.c): under
 * pub_mu, except pub_want_ms (atomic). */
typedef struct eng_published {
    pthread_mutex_t pub_mu;
    eng_pub *copy;
    eng_pend pend[ENG_PEND_MAX]; /* requests submitted and not published placed yet */
    int32_t n_pend_placed;      /* entries marked placed */
    _Atomic double pub_want_ms; /* a reader asked at this time: publish while recent */
} eng_published;

/* Sleeping (eng_sleep.c; engine, except asleep). */
typedef struct eng_sleeper {
    atomic_bool asleep;         /* eng_is_sleeping: written by the engine thread */
    bool sleeping;              /* ctx, mem NULL, the weights released */
    double idle_since_ms;       /* the last step with work, or message other than stats */
    eng_stats *sleep_stats;     /* what stats answer while sleeping */
} eng_sleeper;

/* Switches read from the environment at start (eng.c). */
typedef struct eng_debug {
    bool check;                 /* eng_check after every step (debug builds, POLYKV_CHECK=1) */
    int32_t test_step_ms;       /* tests: every batch lasts this much longer (POLYKV_TEST_STEP_DELAY_MS),
                                   what a big model's steps do to the answers served between them */
} eng_debug;

/* A draft model's forward pass and memory (eng_draft.c); ctx NULL
 * without -md or asleep. */
typedef struct eng_draft {
    model_ctx *ctx;
    mem *mem;
    int32_t n_vocab, n_cand;    /* the draft's vocabulary; the ids both models have */
    int32_t *tok, *nseq, *row_of;   /* a batch of CATCHUP + n_slots; each slot's logits row */
    kv_pos *pos;
    kv_seq (*seq)[MODEL_MAX_TOKEN_SEQS];
    bool *want;
    float *logits;              /* [n_slots][n_vocab] */
    bool mtp;                   /* the model's MTP block drafts (draft-mtp), no model of its own */
    float *h_in, *h_out;        /* MTP: the rounds' hidden states [n_slots][n_embd] */
} eng_draft;

struct eng {
    const model *m;
    eng_params p;
    int32_t n_ctx_slot, n_vocab;
    model_ctx *ctx;             /* the forward pass; NULL asleep */
    mem *mem;                   /* the sequences' state (src/mem); NULL asleep */
    pthread_t thread;

    eng_mailbox mb;
    eng_waitq wq;
    slot *slots;                /* [p.n_slots] (eng.c runs tasks, eng_place.c places) */
    eng_hists hist;
    eng_seqs seqs;              /* eng_seq.c */
    struct eng_pools *pools;    /* eng_pool.c */
    struct eng_persist *persist; /* eng_save.c */
    eng_batch batch;
    eng_counters stat;
    eng_adm_state adm;
    eng_published pub;
    eng_sleeper sleep;
    eng_debug dbg;
    struct spec_store *spec_store;  /* ngram-cache's recent generations (eng_spec.c) */
    spec_gain spec_gain;            /* what n-gram guesses' rows are worth (eng_spec.c) */
    eng_draft draft;            /* -md (eng_draft.c) */
    struct eng_kvev *kvev;      /* KV events' tracker (eng_kvev.c), NULL when off */
};

/* eng_kvev.c: KV events and the prefix lookup (docs/kv-events.md). */
pk_status eng_kvev_init(eng *e);                /* after the history store and pools */
void eng_kvev_free(eng *e);
/* After every step: what each holder holds now, to the tracker; the net
 * change to the publisher. */
void eng_kvev_step(eng *e);
bool eng_kvev_check(eng *e);
void eng_lookup_msg(eng *e, eng_call *c);

/* eng_spec.c: speculation's part of a step (docs/speculative.md). */
pk_status eng_spec_init(eng *e);
void eng_spec_free(eng *e);
/* The guesses slot s (decoding) verifies this step, at most budget, into
 * s->draft; returns their count (also s->n_draft).  May grow the logits. */
int32_t eng_spec_propose(eng *e, slot *s, int32_t budget);
/* The most guesses s may verify in its next step (its limits, its
 * context's room, n_predict), before the step's budget. */
int32_t eng_spec_limit(const eng *e, const slot *s);
/* The proposer s's task guesses with. */
spec_kind eng_spec_kind(const eng *e, const slot *s);
/* The sampler kept n_kept of s's n_draft guesses: counts and the
 * adaptive limit; the guesses' cells past n_hist go (eng_spec_trim). */
void eng_spec_judged(eng *e, slot *s, int32_t n_kept);
/* Cells of guesses not kept leave s's sequence (before its history is
 * kept, parked or read). */
void eng_spec_trim(eng *e, slot *s);
/* s's task ends: what it wrote joins the store (ngram-cache). */
void eng_spec_finished(eng *e, slot *s);

/* eng_draft.c: a draft model's guesses (draft-simple). */
pk_status eng_draft_init(eng *e);               /* after the slots and the context */
void eng_draft_free(eng *e);
void eng_draft_sleep(eng *e);                   /* its context freed, its weights released */
pk_status eng_draft_wake(eng *e);
/* Before a step's batch: every session that guesses from the draft this
 * step gets its proposal (s->d_prop, s->n_prop). */
void eng_draft_step(eng *e);
/* At most lim of s's proposal into s->draft; their count. */
int32_t eng_draft_take(slot *s, int32_t lim);
bool eng_draft_check(eng *e);

/* eng_place.c */
pk_status eng_place_init(eng *e);               /* reserve ids, turn marker */
void eng_place_free(eng *e);
/* Places waiting tasks in arrival order while the policy finds a slot;
 * returns after the first task that must wait. */
void eng_place_waiting(eng *e);
/* Frees cells (dropping histories, lowest value first, busy slots never)
 * until n are free.  Returns false when that is impossible. */
bool eng_make_room(eng *e, int32_t n);
/* A task ended in slot s: its cells stay as the slot's history. */
void eng_history_done(eng *e, slot *s);
void eng_cache_event_add(eng *e, const eng_cache_event *ev);
void eng_place_stats(eng *e, eng_stats *o);
double eng_now_s(void);
/* Drops the history of slot slot_id (PK_ECONFLICT while it runs), or with
 * -1 every idle slot's, parked and RAM history; why names the drops in the
 * cache events; *n_erased the tokens dropped. */
pk_status eng_drop_histories(eng *e, int32_t slot_id, const char *why, int32_t *n_erased);
/* The wait queue (e->wq) is written here only: a task joins at the end;
 * the tasks for which first() is true move ahead of the others, each
 * group in its order. */
void eng_wait_push(eng *e, eng_task *t);
void eng_wait_first(eng *e, bool (*first)(eng *e, const eng_task *t));
/* Ends every waiting task attached to pool_id with an ERROR. */
void eng_fail_waiting_pool(eng *e, int32_t pool_id, pk_status st, const char *msg);

/* eng_hist.c: the history store */
pk_status eng_hist_init(eng *e);                /* after n_parked_max, n_spill_max are set */
void eng_hist_free(eng *e);
/* Frees record i (its cells or its image, its parking id); a free record
 * is a no-op. */
void eng_hist_drop(eng *e, int32_t i);
/* The record of session used last, -1 none: the one lookup by session. */
int32_t eng_hist_find(const eng *e, const char *session);
/* Keeps slot s's history under a new parking id (shared, no copy; on a
 * hybrid with a copy of its state and the checkpoints past keep, what
 * the slot goes on with); the record, or -1 when no parking id or memory
 * is free. */
int32_t eng_hist_park(eng *e, const slot *s, int32_t pool_id, int32_t keep);
/* Copies seq's state at positions [0, n) (up to its first gap) into a new
 * RAM record (evicting RAM entries worth less when the budget is short,
 * the one used longest ago when the table is full).  The caller then
 * drops seq.  Returns the record or -1. */
int32_t eng_spill(eng *e, kv_seq seq, const int32_t *tokens, int32_t n, int32_t marker_pos, double last_use_s,
                  const char *session, double max_gap_ms, int32_t pool_id);
/* Copies RAM record i's positions [p0, p) into free cells joined to dst,
 * for the largest p <= p1 the image can be continued at (on a hybrid: its
 * end or a checkpoint).  The caller has made room.  Returns p, p0 when
 * nothing was copied. */
int32_t eng_hist_copy_in(eng *e, int32_t i, kv_seq dst, int32_t p0, int32_t p1);
bool eng_hist_check(const eng *e);
void eng_hist_stats(eng *e, eng_stats *o);

/* eng.c: the loop */
void *eng_main(void *arg);                      /* the engine thread */
bool eng_running(const eng *e);                 /* a slot runs a task */
bool eng_has_work(const eng *e);                /* waiting, running or materializing */
/* What was published is about to change (a control message, a task's
 * end): readers ask the engine until the next step publishes again. */
void eng_unpublish(eng *e);
/* What a task needs before it may start: its sampler and grammar matcher.
 * eng_slot_prepare allocates them, or fails t (its ERROR queued, nothing
 * announced or changed) and returns false; eng_slot_start, which cannot
 * fail, then starts t in slot s, whose cache the placement has cut to the
 * tokens it reuses. */
typedef struct eng_slot_res {
    smp_ctx *smp;
    struct gram_matcher *gm;
} eng_slot_res;
bool eng_slot_prepare(eng *e, eng_task *t, eng_slot_res *out);
void eng_slot_start(eng *e, slot *s, eng_task *t, eng_slot_res *res);
/* Adds one token to this step's batch (n: its count so far). */
void eng_batch_add(eng *e, int32_t *n, int32_t tok, kv_pos pos, kv_seq seq, bool want);

/* eng_seq.c */
pk_status eng_seq_init(eng *e, int32_t n_parked_max);
/* A free id of the kind's reserve, taken; -1 when the reserve is spent. */
kv_seq eng_seq_take(eng *e, eng_seq_kind kind);
/* Gives a pool or parking id back (its cells must be gone). */
void eng_seq_give(eng *e, kv_seq seq);
int32_t eng_seq_max(const eng *e);   /* ids slots, pools and parking may hold */

/* eng_pool.c: the mechanism behind src/pool. */
pk_status eng_pool_init(eng *e);
void eng_pool_free(eng *e);                         /* fails what still waits */
/* An ENG_MSG_POOL message: answered now, or (create, fork, flush) once
 * the pool is materialized. */
void eng_pool_msg(eng *e, eng_call *c);
/* True while a pool is materializing (the loop must not sleep). */
bool eng_pool_busy(const eng *e);
/* Adds materialization chunks to the batch after the slots' tokens, up to
 * lim tokens in all; returns the new count.  After the decode:
 * eng_pool_decoded(e, ok). */
int32_t eng_pool_batch(eng *e, int32_t n, int32_t lim);
void eng_pool_decoded(eng *e, pk_status st);
/* A waiting task that names a pool: 1 = place it now, with *p_share the
 * tokens to take from the pool; 0 = wait (materializing, or a flush was
 * started); -1 = it failed (ERROR queued: unknown pool, bad share). */
int eng_pool_ready(eng *e, eng_task *t, int32_t *p_share);
/* After placement: the slot's cells for [0, p_share) become the pool's;
 * the slot is attached. */
void eng_pool_attach(eng *e, slot *s, eng_task *t, int32_t p_share);
/* The slot's attachment ends (new task, dropped history): the pool's grace
 * time starts. */
void eng_pool_detach(eng *e, slot *s);
/* Resident pools for the placement snapshot: fills h[0..cap) and their
 * seq ids, returns how many. */
int32_t eng_pool_hists(eng *e, const int32_t *excl, pol_hist *h, int32_t *seq, int32_t cap);
/* The id of the pool under sequence seq. */
int32_t eng_pool_id_of(const eng *e, kv_seq seq);
/* Drops a pool's cells under cache pressure (the policy chose it). */
void eng_pool_evict_seq(eng *e, kv_seq seq, const char *why);
/* A session's history: the sequence holding it and its tokens, or -1. */
kv_seq eng_session_find(eng *e, const char *session, const int32_t **tokens, int32_t *n);
void eng_pool_stats(eng *e, eng_stats *o);
/* eng_check's part for pools: every resident pool holds [0, L), evicted
 * ones nothing; ids agree with the allocator. */
bool eng_pool_check(const eng *e);
/* eng_save.c's part: --pool-dir's saved ids, one each, in range, and none
 * without --pool-dir. */
bool eng_persist_check(const eng *e);

/* The admission scope of pool_id (0: the server's), NULL when no such pool. */
eng_scope *eng_pool_scope(eng *e, int32_t pool_id);
int32_t eng_pool_prefix_len(eng *e, int32_t pool_id);
/* Copies every pool's scope into out[cap]; returns the count. */
int32_t eng_pool_scopes(eng *e, eng_pub_scope *out, int32_t cap);
/* Calls fn for every pool's admission scope. */
void eng_pool_each_scope(eng *e, void (*fn)(eng *e, int32_t pool_id, eng_scope *sc));

/* eng_admit.c */
void eng_adm_inputs(eng *e, eng_adm_in *in);
bool eng_adm_known(const eng_adm_in *in, const char *session);
/* pend: e->pend under pub_mu, or NULL (the gate: the engine sees its own
 * queue, and places in order). */
void eng_adm_snapshot(const eng_adm_in *in, const eng_pend *pend, int32_t pool_id, int32_t prefix_len,
                      const eng_scope *sc, int32_t expected, bool known, adm_session *ss, adm_snapshot *o);
/* The pending-request registry (e->pend): add at submission (any thread);
 * drop when the task leaves the mailbox and queue: failed, or placed (its
 * entry then stays until the next publish shows its slot, eng_pend_flush);
 * mark held by the gate (engine thread).  A full registry lists nothing
 * more: the answer is then as it was without it. */
void eng_pend_add(eng *e, eng_task *t);
void eng_pend_drop(eng *e, eng_task *t, bool placed);
void eng_pend_held(eng *e, eng_task *t);
/* Frees the entries of placed tasks; the caller holds pub_mu and has
 * published (or will not: a copy nobody asked for in 2 s is not read). */
void eng_pend_flush(eng *e);
/* Fills the published scopes (server + every pool). */
int32_t eng_adm_scopes(eng *e, eng_pub_scope *out, int32_t cap);
void eng_admission_msg(eng *e, eng_call *c);
void eng_capacity_msg(eng *e, eng_call *c);
/* The gate of a waiting task (its pool is ready, p_share known): true to
 * place it now; false when it waits (held) or failed (*failed: its ERROR
 * is queued and it must leave the queue). */
bool eng_admit_gate(eng *e, eng_task *t, int32_t p_share, bool *failed);
/* t was placed: a new session of a scope with a policy starts settling. */
void eng_admit_placed(eng *e, eng_task *t);
/* After every step: settle windows that are due complete. */
void eng_admit_step(eng *e);
/* Continuations first, when some scope has a policy (stable otherwise). */
void eng_admit_order(eng *e);
bool eng_session_known(const eng *e, const char *session);
void eng_admit_stats(eng *e, int32_t pool_id, eng_adm_info *o);

/* eng_save.c: KV state on disk */
/* The model's fingerprint (file formats, KV events' hash seed). */
uint64_t eng_model_fingerprint(const eng *e);
/* The model's fingerprint; with --pool-dir, the saved pools restored
 * (before the engine thread starts). */
pk_status eng_save_init(eng *e);
void eng_save_free(eng *e);
void eng_slot_file_msg(eng *e, eng_call *c);
/* With --pool-dir: writes every explicitly pinned pool and its ancestors
 * that has no file yet and is resident, and removes the files of pools no
 * longer in that set.  Call after a pin, unpin, release or a pool becoming
 * resident, before its answer (an answered pin is on disk).  PK_EIO when a
 * file could not be written (the reason in why[cap], the pool left to the
 * next sync), else PK_OK. */
pk_status eng_persist_sync(eng *e, char *why, size_t cap);
/* eng_pool.c, for eng_save.c */
struct pool_tree *eng_pool_tree(eng *e);
/* A pool read from a file: node `id` (above every id so far) under parent
 * (-1 a root) sharing its [0, D), tokens[0, n), own rows for [D, n);
 * resident at once.  PK_OK, else the reason in why (nothing kept). */
pk_status eng_pool_adopt(eng *e, int32_t id, int32_t parent, int32_t D, const int32_t *tokens, int32_t n,
                         bool pinned, const uint8_t *rows, char *why, size_t cap);

/* eng_api.c: the mailbox; false when the engine must stop. */
bool eng_take_mailbox(eng *e);

/* eng.c: the stats snapshot (engine thread, awake). */
void eng_stats_fill(eng *e, eng_stats *o);
model_ctx_params eng_ctx_params(const eng *e);

/* eng_sleep.c */
/* Nothing runs or waits: drops every history and the pools' cells, takes
 * the stats snapshot, frees the KV cache and releases the weights.  False
 * (nothing changed) when the snapshot cannot be allocated. */
bool eng_sleep_enter(eng *e);
/* Reloads the weights and makes a new KV cache; PK_ENOMEM (still asleep). */
pk_status eng_sleep_wake(eng *e);

/* eng_pool.c: drops the cells of every resident pool (tokens stay). */
void eng_pool_evict_all(eng *e, const char *why);

/* eng_check.c: every invariant of the engine's state; ASSERTs. */
void eng_check(eng *e);

#endif
