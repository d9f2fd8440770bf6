/*
 * eng.h - the engine: one thread that owns the model context, the KV cache,
 * the slots and their samplers, and serves completion tasks by continuous
 * batching.
 *
 * DESIGN
 *   Other threads (HTTP) never touch engine state.  They post messages to
 *   the engine's mailbox and read replies from channels:
 *     - eng_submit posts a completion task; its tokens come back as events
 *       on the task's own channel (eng_task_next), ending with DONE or ERROR;
 *     - eng_task_cancel marks a task cancelled (the client went away); the
 *       engine frees its slot at the next step;
 *     - eng_get_stats and eng_pool_op post a control message and wait for
 *       its answer, which the engine gives between two batches (control
 *       before new work); a pool create or fork is answered once the pool
 *       is materialized.
 *   One mailbox carries every kind (completion, stats, pool operation),
 *   and the loop answers them in one switch (eng.c: take_mailbox).
 *
 *   Engine loop, one step:
 *     take mailbox -> answer control messages -> drop cancelled tasks
 *     -> place waiting tasks (arrival order) in idle slots, reusing the
 *        longest common prefix already in a slot (prompt cache)
 *     -> one batch: the next token of every decoding slot, then prefill
 *        chunks of new prompts up to n_batch tokens
 *     -> model_decode -> sample, emit events, update speed counters.
 *   With nothing to do the thread sleeps on a condition variable (no CPU).
 *
 *   Slots and sequences: slot i decodes under KV sequence id i; the cells
 *   of the cache are shared by all slots (n_ctx in all), and each slot's
 *   request may use up to n_ctx / n_slots positions (n_ctx_slot), or all
 *   n_ctx with kv_unified.  When a step needs more free cells than the
 *   cache has (histories dropped first), the newest running task ends with
 *   a "context size has been exceeded" ERROR (PK_EFULL) and its cells go,
 *   until the step fits: the older tasks keep their work.  Pools
 *   (docs/pools.md) and parked histories take ids from reserves above the
 *   slots' (eng_seq.c, one allocator).
 *
 *   Histories (see docs/policy.md): what a finished request leaves in its
 *   slot stays there as a history.  Placement asks the pure policy
 *   (pol_place) where a new prompt runs and which history it reuses, then
 *   applies the decision with sequence operations only: reused cells join
 *   the slot's sequence by membership (also from a busy slot), and a history
 *   worth keeping that is about to be overwritten is parked under a reserve
 *   sequence id (n_slots .. KV_MAX_SEQ-1) instead of being freed.  When
 *   cells run short, histories are dropped lowest value first, or, when
 *   worth keeping, spilled: their K/V rows are copied to RAM (up to
 *   cache_ram_mib) and copied back into free cells when a prompt reuses
 *   them, a copy instead of a prefill.
 *
 *   Speed: per slot, the time between consecutive decoded tokens of that
 *   slot (measured when its batch completes); tps_ewma = the tokens over
 *   the time they took, both decayed over the last tps_window_tokens
 *   tokens or tps_window_ms ms, whichever is shorter (adm_rate).  Prefill
 *   is counted apart (prompt tokens/s) and never in decode speed.
 *
 * Threads: eng_new/eng_free by the owner; everything else from any thread.
 */
#ifndef ENG_H
#define ENG_H

#include "../admit/adm.h"
#include "../common/pk.h"
#include "../model/model.h"
#include "../policy/pol.h"
#include "../sample/smp.h"
#include "../spec/spec.h"

#define ENG_MAX_PROBS 20        /* top log-probs per token */
#define ENG_SPEC_MAX_GUESSES 64 /* guesses one session may verify in a step */
#define ENG_MAX_STOP 8          /* stop strings per request */
#define ENG_STOP_CAP 256        /* bytes of a stop string, NUL included */
#define ENG_SESSION_CAP 64      /* bytes of a session id, NUL included */
#define ENG_MAX_POOLS 128       /* --pools at most */

typedef struct eng_params {
    int32_t n_slots;            /* -np, default 4 */
    int32_t n_ctx;              /* KV cells in all, default 8192 */
    int32_t n_batch;            /* tokens per engine step, default 512 */
    int32_t n_batch_decoding;   /* --batch-decoding: prompt tokens a step may add while sessions
                                   decode (their next token waits for the step); 0 (default) = n_batch */
    int32_t n_threads;
    tq_type type_k, type_v;     /* the K/V cache's types (model_kv_types_ok), TQ_F16 */
    bool swa_full;              /* --swa-full: sliding-window layers keep every cell */
    int32_t tps_window_tokens;  /* 128 */
    int32_t tps_window_ms;      /* 2000 */
    pol_params policy;          /* slot placement and retention */
    int32_t cache_ram_mib;      /* RAM for histories spilled out of the cache, 8192 */
    int32_t n_rs;               /* hybrids: recurrent state slots, 0: 2 x n_slots + 8 */
    int32_t n_pools;            /* --pools: sequence ids reserved for pools, 16 */
    int32_t pool_grace_ms;      /* --pool-grace-ms: kept after the last user leaves, 30000 */
    bool kv_unified;            /* --kv-unified: a slot may use all n_ctx positions (cells
                                   permitting) rather than n_ctx / n_slots */
    int32_t sleep_idle_ms;      /* --sleep-idle-seconds: after this long with no task the engine
                                   sleeps (eng_sleep.c); 0 (default): never */
    bool ctx_shift;             /* --context-shift: a full context drops half of its
                                   tokens after n_keep and goes on (cells of its own only) */
    const char *pool_dir;       /* --pool-dir: pinned pools are saved here and restored at
                                   start (eng_save.c); NULL: none.  Copied. */
    uint64_t slot_save_max_bytes; /* --slot-save-max-bytes: a slot save that would bring its
                                     directory's files past this fails with PK_EFULL; 0 (default):
                                     no bound */
    adm_policy admission;       /* server-wide, for sessions on no pool (--admission-*);
                                   also the defaults of a pool's policy */
    spec_params spec;           /* speculative decoding (--spec-*; docs/speculative.md) */
    int32_t kv_block_size;      /* --kv-block-size: tokens per block of KV events and the lookup, 16 */
    const model *draft;         /* -md: the draft model of --spec-type draft-simple, NULL: none;
                                   borrowed, outlives the engine; eng_draft_compatible with m */
    struct kvev_pub *kv_events; /* where KV events go (docs/kv-events.md), NULL: none; borrowed,
                                   outlives the engine */
} eng_params;

eng_params eng_default_params(void);

typedef struct eng eng;
typedef struct eng_task eng_task;

/* Starts the engine thread over a loaded model (which must outlive it).
 * PK_EINVAL for bad params, PK_ENOMEM. */
pk_status eng_new(const model *m, const eng_params *p, eng **out);
/* NULL when draft can guess for target (the same tokens, ids and
 * specials, a dense model), else why not (static text). */
const char *eng_draft_compatible(const model *target, const model *draft);
/* Stops the thread; tasks still running end with an ERROR event. */
void eng_free(eng *e);                         /* NULL is a no-op */
const eng_params *eng_get_params(const eng *e);
int32_t eng_n_ctx_slot(const eng *e);          /* positions one request may use */
int32_t eng_n_states(const eng *e);            /* hybrids: recurrent state slots; 0 otherwise */
/* Sliding windows apart: the positions before a token its window layers
 * read (their cells behind it are freed); 0: every cell kept. */
int32_t eng_window(const eng *e);
const model *eng_model(const eng *e);

/* A bias added to one token's logit before sampling (-INFINITY bans it). */
typedef struct eng_bias { int32_t token; float bias; } eng_bias;

typedef struct eng_completion {
    const int32_t *prompt;      /* copied by eng_submit */
    int32_t n_prompt;           /* >= 1 */
    int32_t n_predict;          /* tokens to generate; < 0: until the slot's context is full */
    smp_params sp;
    int32_t n_probs;            /* top log-probs per token, 0..ENG_MAX_PROBS */
    bool cache_prompt;          /* reuse the slot's common prefix (default true) */
    int32_t id_slot;            /* -1: any slot */
    bool ignore_eos;
    const char *stop[ENG_MAX_STOP];  /* stop strings (copied), NULL-terminated list */
    int32_t pool_id;            /* attach to this pool (> 0), 0: none */
    bool shared_prefix_set;     /* with pool_id: share exactly shared_prefix_n tokens */
    int32_t shared_prefix_n;    /* (must not exceed the common prefix: else an ERROR) */
    char session_id[ENG_SESSION_CAP]; /* "" when none */
    bool report_placed;         /* queue an ENG_EV_PLACED event once placed */
    bool report_progress;       /* queue ENG_EV_PROGRESS events while the prompt is read */
    int32_t n_keep;             /* context shift: tokens kept at the start (-1: the prompt) */
    int32_t n_discard;          /* context shift: tokens dropped after them, 0: half the rest */
    bool overcommit;            /* skip an enforced admission gate (counted) */
    struct gram_grammar *grammar; /* constrains sampling (NULL: none); eng_submit takes its own
                                     reference; the output ends (ENG_STOP_EOS) when it is complete */
    const eng_bias *bias;       /* [n_bias] logit biases (copied by eng_submit); a token listed
                                   twice gets both; ids must be in the vocabulary */
    int32_t n_bias;
    /* Speculation for this request (llama-server's speculative.* fields):
     * each has_ flag says the value replaces the server's. */
    bool has_spec_kind, has_spec_n_max, has_spec_n_min;
    spec_kind spec_kind;
    int32_t spec_n_max, spec_n_min;

    /* Test hook, never set by the server (tests/test_engine.c's
     * channel_full case): the event channel cannot grow past this many
     * events, which stands in for memory running out (0: no limit). */
    int32_t test_event_cap;
} eng_completion;

typedef enum eng_ev_kind {
    ENG_EV_TOKEN = 1, ENG_EV_DONE, ENG_EV_ERROR, ENG_EV_PLACED, ENG_EV_PROGRESS
} eng_ev_kind;

typedef enum eng_stop {
    ENG_STOP_NONE = 0,
    ENG_STOP_EOS,               /* end-of-generation token */
    ENG_STOP_LIMIT,             /* n_predict reached */
    ENG_STOP_WORD,              /* a stop string matched */
    ENG_STOP_CTX,               /* the slot's context is full */
} eng_stop;

typedef struct eng_event {
    eng_ev_kind kind;
    /* TOKEN: the text this token completes (UTF-8, possibly empty while a
     * character is split or text is held back for a possible stop string),
     * the token, its log-prob and the top n_probs alternatives. */
    char *text;                 /* owned by the event; NUL-terminated */
    size_t text_len;
    int32_t token;
    float logprob;
    int32_t n_top;
    smp_logprob top[ENG_MAX_PROBS];
    /* DONE: why it stopped and what it cost.  PLACED (only when asked
     * for): slot, n_prompt, n_cached, pool_id and pool_shared, before any
     * token.  PROGRESS (only when asked for): n_prompt, n_cached, the
     * prompt tokens in the cache (n_processed) and prompt_ms since the
     * prompt's reading began; one when placed (n_processed = n_cached,
     * prompt_ms 0), then one after every step that read some of it. */
    int32_t n_processed;
    eng_stop stop;
    char stop_word[ENG_STOP_CAP];
    int32_t slot;
    int32_t n_prompt, n_cached, n_gen;
    int32_t pool_id, pool_shared;   /* the pool attached to and the tokens shared with it */
    bool truncated;                 /* DONE: the context was shifted, or it filled while
                                       its cells were shared (then stop is ENG_STOP_CTX) */
    int32_t n_drafted, n_accepted;  /* DONE: guesses verified and kept (speculation) */
    double prompt_ms, gen_ms;
    /* ERROR */
    pk_status status;
    char message[160];
    /* ERROR of a refused admission (then status is PK_EFULL), and PLACED
     * of an enforced "warn" admit: the capacity answer it was decided on. */
    bool has_cap;
    adm_answer cap;
    bool warned;                /* PLACED: admitted over a "no" (on_saturation warn) */
    int32_t sessions_remaining; /* PLACED under an enforced "warn" policy, else -1 */
} eng_event;

/* Queues a completion.  Returns PK_EINVAL when the prompt is empty, has a
 * bad token id or does not fit a slot's context (n_prompt >= n_ctx_slot),
 * or id_slot is out of range; PK_ENOMEM.  A pool that does not exist is
 * reported by an ERROR event with PK_ENOTFOUND, a shared_prefix_n over the
 * common prefix by one with PK_EINVAL.  *out is the caller's reference:
 * read events with eng_task_next and drop it with eng_task_release. */
pk_status eng_submit(eng *e, const eng_completion *c, eng_task **out);

/* Every task's channel ends with DONE or ERROR, also out of memory: when
 * it cannot grow, the task ends with an ERROR (PK_ENOMEM) in the entry
 * kept for it, and the engine stops the task.
 * Waits up to timeout_ms (< 0: forever) for the task's next event.
 * PK_OK with *ev filled (clear it with eng_event_clear), PK_ETIMEDOUT on timeout,
 * PK_ENOTFOUND after the last event (DONE or ERROR) was read. */
pk_status eng_task_next(eng_task *t, eng_event *ev, int timeout_ms);
void eng_event_clear(eng_event *ev);

/* The client is gone: the engine stops the task and frees its slot at its
 * next step.  Safe to call at any time, more than once. */
void eng_task_cancel(eng_task *t);
/* Drops the caller's reference (cancels the task if it is still running). */
void eng_task_release(eng_task *t);

typedef enum eng_slot_state { ENG_SLOT_IDLE = 0, ENG_SLOT_PREFILL, ENG_SLOT_DECODE } eng_slot_state;

typedef struct eng_slot_info {
    int32_t id;
    eng_slot_state state;
    int32_t n_ctx;              /* positions it may use */
    int32_t n_past;             /* positions in its KV sequence */
    int32_t n_cached;           /* prompt tokens reused by the current/last task */
    int32_t n_prompt;           /* of the current/last task */
    int32_t n_decoded;          /* tokens generated by the current/last task */
    double tps_ewma;            /* experienced decode tokens/s (0 when unknown) */
    uint64_t task_id;           /* 0 when none ever */
    /* The history the slot holds (its cells and tokens). */
    int32_t hist_tokens;
    double hist_age_s;          /* since its last actual use; 0 while busy */
    double protected_for_s;     /* protection left, 0 when expired */
    double hist_value;          /* pol_value now */
    int32_t last_source_seq;    /* sequence the last request reused from, -1 none */
    int32_t last_reused;        /* tokens that request reused */
    char last_reason[POL_REASON_CAP]; /* the last placement decision */
    char session_id[ENG_SESSION_CAP]; /* of the history / current task */
    int32_t pool_id, pool_shared;     /* attached pool (0 none), tokens shared */
    int32_t kv_owned;                 /* cells charged to the slot (its own suffix) */
    size_t state_bytes;               /* its recurrent state and checkpoints, window cells */
    double ttft_ms;                   /* of the current/last task, 0 unknown */
    bool warming;                     /* decoding, fewer than ADM_WARM_TOKENS tokens yet */
    int32_t n_remain;                 /* tokens the running task may still generate, -1: no
                                         limit or idle (llama.cpp's next_token.n_remain) */
    bool has_params;                  /* a task ran here: its sampling and n_predict below */
    smp_params sp;
    int32_t n_predict;
    /* Speculation of the current/last task: guesses verified, kept, and
     * the steps that verified some (mean kept per step: n_accepted /
     * n_verify_steps). */
    int32_t n_drafted, n_accepted, n_verify_steps;
} eng_slot_info;

typedef enum eng_cache_kind {
    ENG_CACHE_PLACE = 1,        /* a request placed in a slot (reason: continue/sibling/reclaim/least-loss/slot) */
    ENG_CACHE_ADMIT,            /* its prompt admitted: tokens reused from a source, tokens to read */
    ENG_CACHE_PARK,             /* a history kept under a reserve sequence id */
    ENG_CACHE_DROP,             /* a history dropped (with its value) */
    ENG_CACHE_ADMISSION,        /* an admission decision of an enforced scope (decision, pool_id, reason) */
} eng_cache_kind;

typedef struct eng_cache_event {
    int64_t ts_ms;              /* wall clock */
    eng_cache_kind kind;
    uint64_t task_id;
    int32_t slot;               /* -1 when none */
    int32_t seq;                /* the history's sequence id (park/drop), the source's (admit) */
    int32_t n_tokens;           /* history length (park/drop) */
    int32_t n_reused, n_read;   /* admit */
    double value;               /* park/drop: the history's value; admission: the projection (NAN: none) */
    int32_t decision, pool_id;  /* admission: an eng_adm_decision, the scope (0 the server's) */
    char reason[POL_REASON_CAP];
} eng_cache_event;

#define ENG_CACHE_EVENTS 96

#define ENG_MAX_SLOTS 64

/* Admission decisions counted per scope. */
typedef enum eng_adm_decision {
    ENG_ADM_ADMIT = 0, ENG_ADM_REJECT, ENG_ADM_WARN, ENG_ADM_QUEUE, ENG_ADM_HOLD, ENG_ADM_OVERCOMMIT,
    ENG_ADM_N
} eng_adm_decision;
const char *eng_adm_decision_name(eng_adm_decision d);   /* "admit", ... */

/* A scope's admission state as stats show it. */
typedef struct eng_adm_info {
    adm_policy policy;
    bool settling;
    double mean_tps;                  /* of the scope's warm decoding sessions */
    uint64_t decisions[ENG_ADM_N];
} eng_adm_info;

typedef struct eng_pool_info {
    int32_t pool_id, parent, branch_pos, prefix_len;
    int32_t residency;                /* pool_residency (src/pool/pool.h) */
    bool pinned, auto_pinned, orphaned_pin, kept;   /* kept: safe from cache pressure now */
    int64_t last_access_ms;           /* wall clock */
    int32_t own_cells;                /* cells charged to the pool */
    size_t own_state_bytes;           /* its recurrent states, window cells */
    int32_t subtree_cells;            /* own + descendants' + attached sessions' own */
    int32_t n_sessions;               /* slots attached now */
    int32_t n_children;
    uint64_t n_prefix_hits, n_queries; /* attaches that shared tokens; attaches in all */
    double gen_tps;                   /* sum of attached decoding sessions' tps_ewma */
    eng_adm_info adm;
} eng_pool_info;

typedef struct eng_stats {
    int64_t ts_ms;                       /* wall clock (ms since the epoch) */
    int32_t n_slots;
    eng_slot_info slots[ENG_MAX_SLOTS];
    double aggregate_tps;                /* decoded tokens/s over the last window */
    double mean_active_tps;              /* mean tps_ewma of decoding slots */
    int32_t n_waiting, n_running;
    int32_t kv_used, kv_total;
    /* Monotonic counters since start. */
    uint64_t n_prompt_tokens, n_predicted_tokens, n_decode_calls, n_busy_slots_sum;
    uint64_t n_requests_done;
    uint64_t n_drafted, n_accepted, n_verify_steps;   /* speculation: guesses verified, kept,
                                                        and the steps that verified some */
    int64_t spec_store_tokens;           /* ngram-cache's store: tokens held */
    int32_t n_tokens_max;                /* the most positions one slot has held after a step */
    double prompt_ms_total, predicted_ms_total;
    double draft_ms_total;               /* the draft model's passes (-md), since start */
    int32_t draft_cells;                 /* cells in use in the draft model's cache */
    double kv_events_ms_total;           /* the engine thread telling KV events' tracker what changed
                                            and queueing the batch (eng_kvev_step), since start */
    double control_ms_total;             /* the engine thread answering control messages and
                                            publishing snapshots: time no batch runs */
    /* Cache: histories parked now, prompt tokens reused vs read since start,
     * and the last ENG_CACHE_EVENTS events, oldest first. */
    int32_t n_parked, parked_tokens;
    int32_t n_spilled, spilled_tokens;   /* histories held in RAM */
    double spilled_mib;
    uint64_t n_tokens_reused, n_tokens_read;
    uint64_t n_tokens_restored;          /* copied back from the RAM tier */
    int32_t n_events;
    eng_cache_event events[ENG_CACHE_EVENTS];
    /* Pools, creation order; sequence ids; bytes per cell. */
    int32_t n_pools;
    eng_pool_info pools[ENG_MAX_POOLS];
    int32_t pool_tree_depth;
    int32_t seq_ids_used, seq_ids_max;
    int32_t parked_owned_cells;       /* cells charged to parked histories */
    size_t parked_state_bytes;        /* their recurrent states, window cells */
    size_t kv_cell_bytes;             /* K + V of one cell, every layer (the global ones with windows apart) */
    int32_t window;                   /* windows apart: n_swa - 1, 0 otherwise */
    int32_t window_cells_used;        /* ... the window layers' cells in use */
    size_t window_cell_bytes;         /* ... K + V of one, every window layer */
    size_t state_bytes;               /* hybrids: one recurrent state, 0 otherwise */
    int32_t states_used, states_total;   /* hybrids: state slots (live and checkpoints) */
    int32_t n_warming;
    eng_adm_info adm;                 /* the server scope (sessions on no pool) */
} eng_stats;

/* A snapshot, filled by the engine thread between batches.  PK_ECANCELLED
 * when the engine is stopping. */
pk_status eng_get_stats(eng *e, eng_stats *out);
/* The same, at most one step old (published after every step while read):
 * never waits for a batch.  For readers that poll (the tps stream, the
 * page); everything that must see its own writes uses eng_get_stats. */
pk_status eng_get_stats_recent(eng *e, eng_stats *out);

/* ---- sleeping (eng_sleep.c) ------------------------------------------- */

/* With sleep_idle_ms, an engine with nothing to do for that long sleeps:
 * every cached history goes, pools keep their tokens but lose their cells
 * (recomputed when next used), the KV cache and the compute threads are
 * freed and the model's weights released (model_weights_release).  Stats
 * are answered meanwhile from the snapshot taken on entering; any other
 * message (a task, a pool operation ...) wakes the engine first, so no
 * request ever runs on a half-loaded model. */
bool eng_is_sleeping(const eng *e);            /* any thread */
/* Wakes a sleeping engine and returns once the model is back (PK_OK at
 * once when awake); PK_ENOMEM when it cannot be reloaded (still asleep),
 * PK_ECANCELLED when stopping.  Any thread. */
pk_status eng_wake(eng *e);

/* Drops the cached history of slot `slot` (llama-server's slot erase):
 * PK_ECONFLICT while a task runs in it; slot -1 drops every idle slot's,
 * parked and RAM history.  *n_erased (may be NULL) gets the tokens they held.
 * PK_EINVAL for a slot out of range, PK_ECANCELLED when stopping. */
pk_status eng_erase(eng *e, int32_t slot, int32_t *n_erased);

/* ---- KV state on disk (eng_save.c, src/save/sav.h) ------------------- */

typedef struct eng_file_reply {
    pk_status status;
    char message[200];          /* why, when status is not PK_OK */
    int32_t n_tokens;           /* saved / restored */
    uint64_t n_bytes;           /* of the file */
    double ms;
} eng_file_reply;

/* Writes slot `slot`'s history (tokens and K/V rows) to dir/name, or
 * replaces the slot's history with the one in that file (llama-server's
 * /slots/{id}?action=save|restore); the file is written crash-safely
 * (sav_write).  name must pass sav_name_ok (else PK_EINVAL): it names a
 * file in dir and nothing else.  Returns
 * out->status: PK_OK; PK_EINVAL (slot out of range, nothing to save, a bad
 * name); PK_ECONFLICT (a task runs in the slot); PK_ENOTFOUND (no such
 * file); PK_EFORMAT / PK_EUNSUPPORTED (a file that is damaged, or from
 * another model or KV type: refused, the slot's history kept); PK_EFULL (no
 * KV room for a restore; for a save, the directory's bound or a full disk);
 * PK_EIO; PK_ECANCELLED.  Any thread. */
pk_status eng_slot_save(eng *e, int32_t slot, const char *dir, const char *name, eng_file_reply *out);
pk_status eng_slot_restore(eng *e, int32_t slot, const char *dir, const char *name, eng_file_reply *out);

/* ---- admission (docs/admission.md) --------------------------------------- */

/* The admission policy of pool_id (0: the server scope): with set != NULL
 * replaces it (set->set is forced true), then *out gets the one in force.
 * PK_ENOTFOUND (no such pool), PK_EINVAL (a bad policy), PK_ECANCELLED. */
pk_status eng_admission(eng *e, int32_t pool_id, const adm_policy *set, adm_policy *out);

/* The longest prefix of a token list the engine could reuse for a new
 * request now (docs/kv-events.md): where it is and in which medium. */
typedef struct eng_lookup_reply {
    int32_t n_cached;           /* tokens */
    int32_t block_size;         /* --kv-block-size */
    const char *where;          /* "slot", "parked", "pool", "ram" or "none" (static) */
    int32_t ref;                /* the slot id, pool id or RAM entry; -1 none */
    int medium;                 /* kvev_medium: 0 cells, 1 the RAM tier */
} eng_lookup_reply;

/* Read-only: nothing runs, nothing moves.  PK_ENOMEM, PK_ECANCELLED
 * (stopping). */
pk_status eng_lookup(eng *e, const int32_t *tokens, int32_t n, eng_lookup_reply *out);

typedef struct eng_capacity_reply {
    pk_status status;
    adm_answer a;
    adm_policy policy;
} eng_capacity_reply;

/* The capacity answer for one more NEW session on pool_id (0: no pool),
 * adding expected_tokens (-1 unknown), or for session `session` (a known
 * one is a continuation).  PK_ENOTFOUND, PK_ECANCELLED. */
pk_status eng_capacity(eng *e, int32_t pool_id, int32_t expected_tokens, const char *session,
                       eng_capacity_reply *out);

/* ---- pools (docs/pools.md) -------------------------------------------- */

typedef enum eng_pool_verb {
    ENG_POOL_CREATE = 1,        /* a root from tokens or from_session */
    ENG_POOL_FORK,              /* a child of pool_id (extend or branch) */
    ENG_POOL_PIN, ENG_POOL_UNPIN,
    ENG_POOL_EVICT,             /* free its cells, keep its tokens */
    ENG_POOL_FLUSH,             /* re-materialize an evicted pool now */
    ENG_POOL_RELEASE,           /* delete it (recursive: its subtree) */
} eng_pool_verb;

typedef struct eng_pool_req {
    eng_pool_verb verb;
    int32_t pool_id;            /* FORK: the parent; the others: the pool */
    const int32_t *tokens;      /* CREATE / FORK: the whole prefix [0, L), copied */
    int32_t n_tokens;
    const char *from_session;   /* CREATE / FORK: a session's context instead */
    int32_t branch_pos;         /* FORK: D, or -1 for the longest common prefix */
    bool recursive;             /* RELEASE */
} eng_pool_req;

typedef struct eng_pool_reply {
    pk_status status;
    char message[200];          /* why, when status is not PK_OK */
    int32_t pool_id, parent, branch_pos, prefix_len, own_tokens;
    int32_t n_prefilled;        /* tokens computed for it (0 when all were shared) */
    int32_t conflict_pos;       /* PK_ECONFLICT of a fork: first differing position */
    int32_t n_released;         /* RELEASE: pools released */
    double ms;                  /* from the request to the answer */
} eng_pool_reply;

/* Runs one pool operation and waits for its answer (a create or fork:
 * until the pool is materialized).  Returns out->status: PK_OK;
 * PK_ENOTFOUND (no such pool or session); PK_EINVAL (no tokens, a prefix
 * longer than a slot's context, a branch_pos past the parent's length);
 * PK_ECONFLICT (a fork's tokens differ from the parent's before
 * branch_pos; release with children; evict while sessions decode on it);
 * PK_EFULL (no pool sequence id left, or no KV room for its cells);
 * PK_ECANCELLED when the engine stops.  Any thread. */
pk_status eng_pool_op(eng *e, const eng_pool_req *rq, eng_pool_reply *out);

#endif
