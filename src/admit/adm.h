/*
 * adm.h - admission on per-session decode speed: the capacity answer and
 * the gate, as pure functions over a snapshot (docs/admission.md is the
 * manual, with the formulas and a worked example).
 *
 * DESIGN
 *   The engine keeps, per scope (a pool, or the server for sessions on no
 *   pool), a policy and a settle record; it fills an adm_snapshot with
 *   every slot's session (decoding or not, speed, tokens decoded, in scope
 *   or not) and asks:
 *     adm_decide       the capacity answer: can one more NEW session come,
 *                      why (a fixed reason string), and every signal;
 *     adm_gate         what enforced mode does with a request, given the
 *                      answer (admit, hold, reject, warn, queue);
 *     adm_settle_step  completes a settle window when it is due, folding
 *                      the measured step cost into its samples;
 *     adm_record_admit starts a settle window for an admitted session.
 *
 *   The engine also keeps, server-wide, the load curve and the knee
 *   (adm_curve: what a token cost against sessions decoding, and the mean
 *   the sessions experienced against agents active); the projection reads
 *   the knee where it knows one more agent, the curve's shape where not.
 *
 *   Speeds are over the sessions decoding on the whole server (one
 *   machine's compute); a session is warm after ADM_WARM_TOKENS decoded
 *   tokens: only warm ones count in the mean; sessions between turns and
 *   starting ones (running, not warm) count as load in the projection.
 *
 * INVARIANTS (tests/test_adm.c, 100,000+ random snapshots)
 *   - the context arm always holds: expected_tokens over the headroom is
 *     never admitted;
 *   - the guaranteed minimum always admits (context aside);
 *   - a continuation is never gated; settling never yields a reject;
 *   - the reason names the first arm that applies (table in the manual).
 *
 * Threads: reentrant; the engine thread calls them.
 */
#ifndef ADM_H
#define ADM_H

#include "../common/pk.h"

#include <math.h>

#define ADM_WARM_TOKENS 4          /* decoded tokens before a session's speed counts */
#define ADM_IDLE_MS 30000.0        /* a settled mean this young stands in for an idle pool */
#define ADM_PAUSE_FACTOR 3.0       /* a session idle this many times its longest pause is done */
#define ADM_PAUSE_MIN_MS 2000.0
#define ADM_COST_N 7               /* step-cost samples whose trimmed mean is the cost */
#define ADM_MAX_AT 64              /* sessions whose speed a settle record keeps */
#define ADM_MIN_ABSORBED 0.25      /* the settle's lag correction multiplies by at most 4 */
#define ADM_LONG_MS 10000.0        /* the long-run mean's window ... */
#define ADM_LONG_MIN_MS 2000.0     /* ... and the warm time it needs before it counts */
#define ADM_CURVE_K 16             /* the load curve's counts of decoding sessions, 1..ADM_CURVE_K */
#define ADM_CURVE_MS 30000.0       /* its window (decay by time) ... */
#define ADM_CURVE_MIN 8.0          /* ... and the decayed steps a count needs before it counts */
#define ADM_PROMPT_MAX 0.9         /* the prompt share a projection scales to at most */
#define ADM_MARGIN_Z 0.5           /* the floor arm's margin, in the mean's long-run spreads */
#define ADM_KNEE_MS 20000.0        /* the knee: each count of agents keeps its last 20 s ... */
#define ADM_KNEE_AGE_MS 300000.0   /* ... fading by wall time over 5 minutes ... */
#define ADM_KNEE_MIN_MS 2000.0     /* ... and counts once it holds 2 s */
#define ADM_KNEE_Z 1.0             /* the floor arm's margin on the knee, in its low-side spreads */
#define ADM_KNEE_LOW_MIN_MS 500.0  /* the time under a count's mean its low-side spread needs */

/* A session's experienced decode speed: tokens over the time they took,
 * both decayed over the last win_tokens tokens or win_ms ms, whichever is
 * shorter.  The ratio of two decayed sums, not a decayed mean of the gaps:
 * a mean of the gaps weighted by their length (alpha = dt/window) counts a
 * 400 ms stall in a 2 s window as a quarter of the speed where the
 * session lost a fifth of its tokens. */
typedef struct adm_rate {
    double n;                       /* decayed tokens, 0 = none yet */
    double ms;                      /* decayed time they took */
} adm_rate;

/* n tokens that came together after dt_ms (a step that kept speculated
 * guesses): the window moves by n tokens or dt_ms, whichever is more. */
static inline void adm_rate_add_n(adm_rate *r, double dt_ms, int n, double win_tokens, double win_ms)
{
    double d = exp(-fmax(n / win_tokens, dt_ms / win_ms));
    r->n = r->n * d + n;
    r->ms = r->ms * d + dt_ms;
}

/* One token that took dt_ms (a step verifying guesses gives n at once). */
static inline void adm_rate_add(adm_rate *r, double dt_ms, double win_tokens, double win_ms)
{
    adm_rate_add_n(r, dt_ms, 1, win_tokens, win_ms);
}

/* Tokens per second, 0 while unknown. */
static inline double adm_rate_tps(const adm_rate *r)
{
    return r->n > 0 && r->ms > 0 ? 1000.0 * r->n / r->ms : 0;
}

/* The mean speed after k more sessions, from M and the measured step
 * cost: a session at M tok/s takes 1000/M ms a token, and each session
 * more adds c ms to that.  A constant cost in time, not a constant drop in
 * speed: on 10 measured knee curves a drop learned at one step and
 * applied at another misses the speed by 15.5% at the median, the time
 * cost by 9.5% (test_adm, test_cost_model), because the same added time
 * costs a fast session more tokens/s than a slow one. */
static inline double adm_add_sessions(double M, double c_ms, double k)
{
    return M > 0 ? 1000.0 / (1000.0 / M + c_ms * k) : 0;
}

/* How long a history stays a live session (one between turns) after its
 * last use: ADM_IDLE_MS, or, once its conversation has paused between
 * turns (max_gap_ms > 0: the longest such pause), ADM_PAUSE_FACTOR times
 * that, at least ADM_PAUSE_MIN_MS.  An agent that waited 1.5 s on each tool
 * call and has been quiet for 5 s is done, not waiting on one more. */
static inline double adm_live_ms(double max_gap_ms)
{
    return max_gap_ms > 0 ? fmin(ADM_IDLE_MS, fmax(ADM_PAUSE_MIN_MS, ADM_PAUSE_FACTOR * max_gap_ms)) : ADM_IDLE_MS;
}

/* The load curve: what a token costs a decoding session against the
 * number of sessions decoding, over every step of the last ADM_CURVE_MS
 * (decayed by time), in two parts.  The steps that only decode give the
 * machine's decode step time at k decoding sessions; the steps that also
 * read prompt tokens (a turn's new tokens: every decoding session waits
 * for them) give the share of the time spent reading prompts, which grows
 * with the agents that send them.  Kept apart because they move apart:
 * on a CPU one more decoding session adds a millisecond to a step of 20,
 * one more agent's turn prompts a few times that, and a curve of the two
 * mixed, read off an agent workload, is flattened (few decode at once
 * exactly while the others' prompts are read), so its extrapolation
 * admitted into a mean 15-20% under the projection.  Kept by the engine,
 * server-wide (one machine's compute). */
typedef struct adm_curve {
    double n[ADM_CURVE_K + 1];      /* [k]: decayed decode-only steps with k sessions decoding */
    double ms[ADM_CURVE_K + 1];     /*   and the decayed sum of their times */
    double m[ADM_CURVE_K + 1];      /* [k]: decayed steps that also read prompt tokens */
    double mm[ADM_CURVE_K + 1];     /*   and their times */
    double active_ms;               /* decayed sum of (agents active) x step time */
    double t_ms;                    /* the last step folded in, 0 none */
    /* The knee: the warm mean the sessions experienced, by agents active
     * (adm_knee_add), what the floor is about, measured where the curve's
     * parts only model it. */
    double kn_ms[ADM_CURVE_K + 1];  /* [a]: decayed step time with a agents active, someone warm */
    double kn_sum[ADM_CURVE_K + 1]; /*   and the decayed sum of the warm mean x step time; */
    double kn_lo_ms[ADM_CURVE_K + 1];    /*   of it, the time the mean was under the count's */
    double kn_lo[ADM_CURVE_K + 1];  /*   mean, and the sum of the squared shortfall x step time */
    double kn_t_ms;                 /* the last step folded into them, 0 none */
    /* [a][i]: count i's mean as it stood when count a was last fed, 0 not
     * known then: how far the machine has moved since a was measured. */
    double kn_ref[ADM_CURVE_K + 1][ADM_CURVE_K + 1];
} adm_curve;

/* Folds one step of ms ms in which k sessions decoded a token (counts
 * over ADM_CURVE_K go to the last), prompt tokens read or not (prompt),
 * with active agents running or between turns on the server. */
void adm_curve_add(adm_curve *c, int32_t k, double ms, bool prompt, int32_t active, double now_ms);
/* The decode step time at x decoding sessions (x may be fractional): a
 * linear fit over the decode-only counts measured (each with
 * ADM_CURVE_MIN steps at least), weighted by their steps and by nearness
 * to x (1 / (1 + (k - x)^2): the curve bends, and the counts near x say
 * most about it), its slope at least 0.  false, *ms untouched, with fewer
 * than two counts. */
bool adm_curve_at(const adm_curve *c, double x, double *ms);
/* The share of the steps' time spent reading prompts beyond what their
 * decoding alone takes (adm_curve_at), and the mean count of agents active
 * over it.  false when the curve has no fit or no time. */
bool adm_curve_prompts(const adm_curve *c, double *share, double *active);
/* Folds one step of ms ms after which the warm sessions' mean speed was
 * mean, with active agents running or between turns on the server (counts
 * over ADM_CURVE_K go to the last).  Each count keeps its own last
 * ADM_KNEE_MS of such time (a count the load visits rarely is not washed
 * out by one it holds for minutes), and all of them fade by wall time over
 * ADM_KNEE_AGE_MS (a machine's speed moves; a count no longer visited
 * stops speaking for it). */
void adm_knee_add(adm_curve *c, int32_t active, double mean, double ms, double now_ms);
/* The experienced mean at x agents active (x may be fractional: linear
 * between the counts measured either side, each with ADM_KNEE_MIN_MS at
 * least; the last count, which holds the ones above it, only for itself).
 * false, *tps untouched, when no measured count lies at or either side of x. */
bool adm_knee_at(const adm_curve *c, double x, double *tps);
/* The highest count at most x that is measured, 0 none; *tps its mean. */
int32_t adm_knee_below(const adm_curve *c, double x, double *tps);
/* The low-side spread of the mean at a agents active: the root mean
 * square of its shortfall under the count's mean, over the time it was
 * under it (for a normal spread, the standard deviation).  What a floor
 * cares about: the time a load spends under it, not above.  NAN when a
 * is not measured or was under its mean for less than ADM_KNEE_LOW_MIN_MS. */
double adm_knee_low_sd(const adm_curve *c, int32_t a);
/* The drift since count j was measured, as the count a agents active now
 * reads it: a's mean now, plus its low-side spread (a slowdown counts past
 * its noise), over a's mean when j was last fed, at most 1 (a faster count
 * a says nothing: see knee_projection).  1 when j is a, when either is not
 * measured, or a was not measured when j was fed. */
double adm_knee_drift(const adm_curve *c, int32_t j, int32_t a);

/* How long a history idle between turns is counted as an agent on a tool
 * call where the share of sessions decoding at a time is measured:
 * ADM_TURN_FACTOR times its longest pause, ADM_PAUSE_MIN_MS before one is
 * seen.  Shorter than adm_live_ms: a finished agent stays live (load) for
 * three of its pauses, and counted so long as one that does not decode it
 * dilutes the share each agent decodes (a share of 0.14 read where the
 * agents decoded three quarters of the time, and an enforced gate
 * admitted five where the floor had room for two). */
#define ADM_TURN_FACTOR 1.5
static inline double adm_turn_ms(double max_gap_ms)
{
    return max_gap_ms > 0 ? fmax(ADM_PAUSE_MIN_MS, ADM_TURN_FACTOR * max_gap_ms) : ADM_PAUSE_MIN_MS;
}

typedef enum adm_mode { ADM_ADVISORY = 0, ADM_ENFORCED } adm_mode;
typedef enum adm_sat { ADM_REJECT = 0, ADM_WARN, ADM_QUEUE } adm_sat;

typedef struct adm_policy {
    bool set;                       /* false: no policy (nothing is gated or recorded) */
    double target_tps;              /* the floor F per session, 0 = none */
    adm_mode mode;
    adm_sat on_saturation;
    int32_t guarantee_min_sessions; /* 1 */
    int32_t settle_tokens;          /* 48 */
    int32_t settle_max_ms;          /* 5000 */
    int32_t queue_max_ms;           /* 30000 */
    double margin_scale;            /* 1: the floor arm's margin, times this (0..4) */
} adm_policy;

/* The defaults above (set = false). */
adm_policy adm_policy_default(void);
/* PK_OK, or PK_EINVAL naming nothing: a target that is negative or not
 * finite, a count or time out of [0, 10^7], a margin scale out of [0, 4]. */
pk_status adm_policy_check(const adm_policy *p);
const char *adm_mode_name(adm_mode m);          /* "advisory", "enforced" */
const char *adm_sat_name(adm_sat s);            /* "reject", "warn", "queue" */
/* Parses a name; PK_EINVAL when it is none of them. */
pk_status adm_mode_parse(const char *s, adm_mode *out);
pk_status adm_sat_parse(const char *s, adm_sat *out);

/* One slot's session. */
typedef struct adm_session {
    bool running;                   /* a task runs in its slot (prefilling or decoding) */
    bool decoding;                  /* generating now */
    bool in_scope;                  /* attached to the scope asked about */
    bool live;                      /* in scope and busy, or between turns: idle with its
                                       history for less than ADM_IDLE_MS (an agent waiting
                                       on a tool); older histories are finished work */
    bool pausing;                   /* live, not running, idle for less than adm_turn_ms */
    double tps_ewma;                /* 0 when unknown */
    int32_t n_decoded;              /* tokens its current task decoded */
    int32_t tokens_left;            /* of its current task, -1 when unknown */
    int32_t ctx_used, ctx_total;
    int32_t kv_owned;               /* cells charged to it: its suffix */
    uint64_t task_id;
} adm_session;

/* A warm session's speed when an admit was recorded. */
typedef struct adm_at {
    uint64_t task_id;
    double tps_ewma;
    int32_t n_decoded;
} adm_at;

/* A scope's settle window and what past windows measured. */
typedef struct adm_settle {
    bool active;
    double t_admit_ms;
    uint64_t task_id;               /* the admitted session's task */
    double mean_at_admit;           /* M when it was admitted, 0 unknown */
    adm_at at[ADM_MAX_AT];          /* the warm sessions then (the lag correction's base) */
    int32_t n_at;
    int32_t n_warm_at_admit;        /* warm sessions then */
    bool long_base;                 /* nobody was warm: mean_at_admit is the long-run mean, */
    double share_at_admit;          /*   read at this many sessions sharing it (n') */
    bool has_cost;
    double cost_ms;                 /* the trimmed mean of the last ADM_COST_N samples (without
                                       the lowest and highest), at least 0: ms one more
                                       session adds to every session's time per token
                                       (adm_add_sessions) */
    double cost_sample[ADM_COST_N]; /* a ring, cost_sample[n_cost % ADM_COST_N] the next */
    int32_t n_cost;
    bool has_settled;
    double mean_settled, t_settled_ms;   /* the last mean seen outside a settle window */
    uint64_t n_settled;
    /* The long-run mean: the warm mean and the sessions sharing it (n'),
     * time-weighted over the steps where someone was warm, decayed over
     * ADM_LONG_MS.  It sees the stalls of turn prompts in the proportion
     * the load brings them; the speeds' 2 s window sees one or none. */
    double long_ms;                 /* decayed warm time */
    double long_sum, long_share;    /* decayed sums of M dt and n' dt */
    double long_sq;                 /* decayed sum of M^2 dt (the mean's spread) */
    double long_dec;                /* decayed sums of (sessions decoding, warm or not) dt and */
    double long_active;             /*   (running or pausing) dt: their ratio is the share of
                                       the agents decoding at a time */
    double t_long_ms;               /* the last step folded in, 0 none */
} adm_settle;

typedef struct adm_snapshot {
    const adm_policy *policy;
    const adm_session *sessions;    /* [n_sessions]: every slot */
    int32_t n_sessions;
    const adm_settle *settle;
    double now_ms;                  /* the same clock as the settle times */
    int32_t n_slots, n_busy_slots;
    int32_t kv_free_cells;          /* free + what idle, unpinned histories alone hold */
    int32_t kv_used, kv_total;
    int32_t ctx_slot;               /* positions one session may use */
    int32_t prefix_len;             /* the pool's prefix, 0 for the server scope */
    int32_t expected_tokens;        /* the new session's suffix + generation, -1 unknown */
    bool known_session;             /* its session_id names a context the engine holds */
    int32_t n_pending;              /* requests submitted and not placed yet, not held by a
                                       gate, and not sessions counted above (server-wide) */
    int32_t n_pending_new;          /*   of them: NEW sessions of this scope (admits in flight) */
    const adm_curve *curve;         /* the server's load curve, NULL none */
    double rate_window_ms;          /* the speeds' window (adm_rate_add), 0 = unknown: */
    int32_t rate_window_tokens;     /*   a settle then takes the speeds as they are */
} adm_snapshot;

/* The arms of the decision, in the order they are tried: the first that
 * applies answers (docs/admission.md's table, rows 1..8). */
typedef enum adm_arm {
    ADM_ARM_CONTEXT = 1,        /* expected_tokens over the context headroom: no */
    ADM_ARM_KNOWN,              /* a known session continues: yes */
    ADM_ARM_GUARANTEED,         /* under the guaranteed minimum: yes */
    ADM_ARM_NO_SLOT,            /* every slot busy: no */
    ADM_ARM_KV,                 /* KV headroom under one session: no */
    ADM_ARM_SETTLING,           /* an admit's drop not measured yet: no, held */
    ADM_ARM_FLOOR,              /* projected mean below the floor: no */
    ADM_ARM_OK,                 /* yes */
} adm_arm;

typedef struct adm_answer {
    bool can_admit;
    const char *reason;             /* static: one of the manual's reasons */
    adm_arm arm;                    /* the row of the manual's table that answered */
    double mean_active_tps;         /* M, 0 when nobody is warm */
    double mean_long_tps;           /* the long-run mean at the load of now, NAN none */
    double projected;               /* the projected mean (NAN: nothing to project) */
    double floor_margin_tps;        /* the floor arm compares projected - this with the floor */
    double projected_model, projected_measured;   /* NAN when unknown */
    const char *projection_basis;   /* static: "knee", "load curve", "step cost", "model", or "none" */
    double decoding_share;          /* of the agents active (running, sent, between turns for
                                       under adm_turn_ms), the part decoding at a time
                                       (long-run), NAN unknown */
    double decoders_if_admitted;    /* the sessions decoding at a time after the admit, as the
                                       load curve is read at, NAN when it is not */
    double curve_tps[ADM_CURVE_K + 1];   /* [k]: decode-only steps a second at k decoding
                                            sessions, 0 where too few were measured */
    double knee_tps[ADM_CURVE_K + 1];    /* [a]: the knee's mean at a agents active, 0 where
                                            too little was measured */
    double knee_level;              /* what the knee's projection (or cap) is scaled by: the
                                       long-run mean (plus the knee's low-side spread) over the
                                       knee's at its load and the drift (adm_knee_drift), the
                                       lower, at most 1; NAN unused */
    double knee_low_sd;             /* the knee's low-side spread at A + 1 agents, x the level
                                       (NAN unknown): the floor arm's margin is ADM_KNEE_Z of it */
    double prompt_share;            /* of the steps' time, reading prompts (NAN unknown) */
    bool idle_estimate;
    double drop_per_admit_ewma;     /* tok/s one admit costs the mean now (from cost_ms), 0 before
                                       the first sample */
    double step_cost_ms;            /* the settle record's cost_ms, 0 before the first sample */
    int32_t n_active, n_warming, n_pool_sessions;
    int32_t n_paused;               /* live sessions between turns (idle, history recent) */
    int32_t n_starting;             /* running, not warm yet (prefilling or warming), or submitted
                                       and not placed yet (n_pending), server-wide */
    int32_t n_pending_new;          /* NEW sessions of the scope submitted, not placed yet */
    int32_t headroom_sessions;
    double kv_headroom_pct;
    int32_t kv_free_cells;
    bool settling;                  /* a settle window is open, or an admit is in flight */
    double settle_remaining_ms;
    bool guaranteed, known_session;
    int32_t ctx_headroom_tokens;
    double compaction_pressure;     /* [0, 1] */
    double retry_after_s;           /* what a 429 says in Retry-After */
} adm_answer;

/* The capacity answer.  PK_EINVAL for a malformed snapshot (NULL arrays,
 * counts out of range, a bad policy); *out is then untouched. */
pk_status adm_decide(const adm_snapshot *s, adm_answer *out);

typedef enum adm_action {
    ADM_ADMIT = 0,                  /* place it */
    ADM_ADMIT_WARN,                 /* place it, with X-Sessions-Remaining */
    ADM_HOLD,                       /* keep it waiting (settling, or queue) */
    ADM_REFUSE,                     /* 429 */
} adm_action;

/* Enforced mode's answer for a request: a continuation or an overcommit is
 * admitted, so is everything under an advisory or absent policy;
 * settling holds; a "no" rejects, warns or holds by on_saturation, and a
 * queued request that has waited queue_max_ms is refused. */
adm_action adm_gate(const adm_policy *p, const adm_answer *a, bool known_session, bool overcommit,
                    double waited_ms);

/* After every step.  Folds the step into the long-run mean; completes
 * the settle window when its session has
 * decoded settle_tokens tokens, has gone, or settle_max_ms passed: the
 * step-cost sample (the change in time per token between the mean at the
 * admit and the mean now, corrected for the part of the change the speeds'
 * window has not absorbed yet, over the warm sessions gained; none when
 * none was gained; within the time per token at the admit either way)
 * joins the last ADM_COST_N, whose trimmed mean is the cost.  Outside a window, keeps the
 * last mean seen as the settled one (the idle estimate's). */
void adm_settle_step(adm_settle *st, const adm_snapshot *s);
/* Starts a settle window for task_id, admitted now with mean M. */
void adm_record_admit(adm_settle *st, const adm_snapshot *s, uint64_t task_id);

#endif
