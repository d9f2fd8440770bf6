/*
 * pol.h - slot placement and retention policy: where a request runs, which
 * cached history it reuses, and which histories are kept, parked or dropped.
 *
 * PURPOSE
 *   The engine keeps, for every finished request, a *history*: its token
 *   sequence plus the KV cells that hold it, under a sequence id (a slot's
 *   own id, or a reserve id when the history is parked).  This module decides,
 *   from a plain snapshot of slots and histories, what the engine should do
 *   with a new prompt.  It never touches the KV cache: the engine applies the
 *   decision (kv_seq_cp / kv_seq_rm).  Everything here is a pure function of
 *   its arguments, so thousands of synthetic tables can test it without a
 *   model.  docs/policy.md explains the policy in plain words with a worked
 *   example.
 *
 * DESIGN
 *   Worth of a history of n tokens, idle for `age` seconds:
 *
 *     ttl(n)    protection time, piecewise linear through the knots
 *               (0,0) (500,0.1) (2000,2) (8000,10) (32000,45) (50000,65)
 *               (100000,90) (262144,120) seconds, flat beyond; every knot's
 *               time is scaled by ttl_max_s / 120.
 *     size(n)   (n/50000)^0.7 * (n/(n+2000))^2
 *     value     age <  ttl: size * (0.25 + 0.75 * (1 - age/ttl))  (retention)
 *               age >= ttl: size * 0.25 * (1 - x^2),
 *                           x = clamp((age-ttl)/(idle_value_zero_s-ttl), 0, 1)
 *     overwrite score = 1 / (1 + value)
 *
 *   A *blank* history (no tokens, invalid, or a superseded copy) is expired
 *   and worth 0.  Value decides replacement only: a history of value 0 still
 *   matches prompts until something overwrites it, and no timer drops it.
 *
 *   "Same conversation" is judged on a history's *key*: its tokens before its
 *   last turn marker (<|im_start|> for ChatML), or all of them when it has
 *   none (or only one, at position 0).  The prompt continues history h when it agrees with all of h's key
 *   (so a next turn without the last reply's thinking, or a regenerated reply,
 *   still continues h).  Shares (sibling, kept) are fractions of the key.
 *
 *   Placement, first rule that applies:
 *     0. every slot busy                               -> POL_WAIT
 *     1. an idle slot holds a history the prompt continues (its own slot),
 *        longest common prefix first, then slot order  -> POL_CONTINUE
 *     2. an idle slot holds an older version: common prefix >= sibling_share
 *        of its key but not all of it; replaced in place, protected or not,
 *        never parked                                  -> POL_SIBLING
 *     3. an idle slot holds a blank or an expired history: take the minimum
 *        of (worth keeping?, value, non-blank?, slot index); "worth keeping"
 *        means non-blank with value >= expired_keep_score -> POL_RECLAIM
 *     4. every idle slot holds a protected history: take the one whose loss
 *        is least, losses within loss_tie (10%) of the least tie-broken by
 *        slot order                                    -> POL_LEAST_LOSS
 *   A blank slot always sorts first in rule 3 and rule 4 runs only when no
 *   idle slot is blank, so a continuation never lands in another
 *   conversation's slot while a blank one exists.
 *
 *   Source: among valid histories anywhere (idle slot, parked, busy slot) the
 *   longest token-identical common prefix with the prompt is `best`; every
 *   history with a prefix > 0 and >= best - max(near_share*best,
 *   prompt_tps*near_s, near_tokens) is a near match.  Near matches not in a
 *   busy slot are preferred; then the longest; then the run slot's own
 *   history; then history order.  A busy source is shared by membership.
 *
 *   Parking: before the run slot's current history h is overwritten it is
 *   kept under a reserve id (zero copy) unless h is blank, its value is below
 *   park_min_value, another valid history or the new request itself already
 *   holds park_kept_share of h's key, or there is no room.  Room means a free
 *   reserve id and n_cells_free >= the request's new cells (n_prompt -
 *   n_reuse + n_cells_extra), counting what the plan drops; to make room the
 *   plan drops (lowest value first) blanks and histories not worth keeping
 *   freely, expired histories worth keeping only when value(h) >=
 *   park_value_ratio * their value (ratio 0: never), protected ones never.
 *
 * INVARIANTS (checked by tests/test_policy_prop.c over 200,000 random tables)
 *   - the run slot is never busy; POL_WAIT exactly when every slot is busy;
 *   - when an idle slot is blank, the run slot is blank or holds the same
 *     conversation (continued or older version);
 *   - source tokens [0, n_reuse) equal the prompt's; a busy source only when
 *     no near match outside busy slots exists;
 *   - never parks a blank, busy or sibling history; never drops a busy,
 *     protected, source or parked-now history;
 *   - the same snapshot gives the same decision, byte for byte.
 *
 * Threads: every function is reentrant and touches only its arguments (and
 * the environment in pol_params_from_env).  The engine thread calls them.
 */
#ifndef POL_H
#define POL_H

#include "../common/pk.h"

#define POL_MAX_SLOTS   256   /* slots in one snapshot */
#define POL_MAX_HIST    256   /* histories in one snapshot (one sequence id each) */
#define POL_MARKER_CAP   64   /* bytes for the turn-marker text, NUL included */
#define POL_REASON_CAP  256

/* ---- parameters ------------------------------------------------------- */

/* Every threshold.  Each has a --slot-<name> flag and an environment variable
 * POLYKV_SLOT_<NAME> (dashes become underscores, upper case); see
 * pol_param_at for names, ranges and help. */
typedef struct pol_params {
    double  ttl_max_s;          /* 120: protection at 262144 tokens; scales the curve; 0 = none */
    double  idle_value_zero_s;  /* 1800: idle age where value reaches 0; 0 = no decay */
    double  sibling_share;      /* 0.98: older-version share of the key; 0 = off */
    double  expired_keep_score; /* 0.01: expired and below this = not worth keeping */
    double  park_min_value;     /* 0.01: not parked below this value */
    double  park_kept_share;    /* 0.98: not parked when another holds this share; 0 = off */
    double  park_value_ratio;   /* 2: drop an expired keeper for a park only if
                                   value(parked) >= ratio * value(keeper); 0 = never */
    double  near_share;         /* 0.02: near match within this share of the best */
    double  near_s;             /* 1: ... or within this many seconds of prompt rate */
    int32_t near_tokens;        /* 4096: ... or within this many tokens */
    double  loss_tie;           /* 0.10: least-loss candidates within this ratio tie */
    char    turn_marker[POL_MARKER_CAP]; /* "auto" (the chat template's turn
                                   start: see pol_turn_marker_for), "" = none,
                                   or the marker's text, e.g. "<|im_start|>" */
} pol_params;

/* The defaults above. */
pol_params pol_params_default(void);

/* Overrides fields of *p from the POLYKV_SLOT_* environment variables that
 * are set.  Returns PK_OK, or PK_EINVAL when one holds a malformed or
 * out-of-range value; then *p is unchanged and *bad_var (when bad_var is not
 * NULL) points to that variable's static name.  Reads the environment: call
 * it from one thread at start, before threads that setenv. */
pk_status pol_params_from_env(pol_params *p, const char **bad_var);

/* Sets the field named by a flag: name is "ttl-max-s", "slot-ttl-max-s" or
 * "--slot-ttl-max-s" (any of the three spellings), value its text.  Numbers
 * must be finite, in range and use the whole text.  Returns PK_OK,
 * PK_ENOTFOUND for an unknown name (*p unchanged), PK_EINVAL for a bad value
 * (*p unchanged). */
pk_status pol_params_set(pol_params *p, const char *name, const char *value);

/* Checks every field's range (what pol_params_set enforces).  PK_OK or
 * PK_EINVAL. */
pk_status pol_params_check(const pol_params *p);

/* Writes the parameters as one JSON object (the "slot_policy" member of
 * /props): every field under its flag name with underscores, plus
 * "ttl_curve": [[tokens, seconds], ...] with the scaled knots.  Writes a
 * NUL-terminated string of *n_out bytes (n_out may be NULL).  PK_EFULL when
 * cap is too small (buf then holds a truncated, NUL-terminated prefix). */
pk_status pol_params_json(const pol_params *p, char *buf, size_t cap, size_t *n_out);

/* One row per parameter, for --help and generic flag parsing. */
typedef struct pol_param_info {
    const char *name;   /* flag name without "--slot-": "ttl-max-s" */
    const char *env;    /* "POLYKV_SLOT_TTL_MAX_S" */
    const char *help;   /* one line: meaning, unit, range */
} pol_param_info;

/* The number of parameters, and row i of their table (static storage;
 * NULL when i is out of range). */
int pol_param_count(void);
const pol_param_info *pol_param_at(int i);

/* The turn-marker text of a chat template by its name ("chatml",
 * "llama3", "llama2", "mistral"), or "" for unknown ones.  Static storage. */
const char *pol_turn_marker_for(const char *template_name);

/* ---- curves ----------------------------------------------------------- */

/* Protection time in seconds of a history of n tokens (0 for n <= 0). */
double pol_ttl_s(int64_t n, double ttl_max_s);

/* The size factor (n/50000)^0.7 * (n/(n+2000))^2 (0 for n <= 0). */
double pol_size_weight(int64_t n);

/* Retention while protected: size * (0.25 + 0.75 * freshness), freshness =
 * 1 - age/ttl clamped to [0, 1] (0 when ttl <= 0).  Negative age counts 0. */
double pol_retention(int64_t n, double age_s, double ttl_s);

/* Current value of a history of n tokens idle for age_s seconds: the
 * retention while age < ttl, the decayed value after.  When
 * 0 < idle_value_zero_s <= ttl the value is 0 as soon as the history
 * expires. */
double pol_value(int64_t n, double age_s, const pol_params *p);

/* 1 / (1 + value): higher means cheaper to overwrite (for /slots). */
double pol_overwrite_score(double value);

/* Index of the first token of the last occurrence of marker[0..n_marker) in
 * tokens[0..n), or -1 when absent or n_marker <= 0.  The engine calls it
 * once when it stores a history and keeps the result in pol_hist. */
int32_t pol_last_marker(const int32_t *tokens, int32_t n, const int32_t *marker, int32_t n_marker);

/* Length of the common prefix of a[0..na) and b[0..nb), comparing tokens. */
int32_t pol_common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb);

/* ---- snapshot --------------------------------------------------------- */

/* One history.  Its tokens are at positions 0..n_tokens-1 of its sequence. */
typedef struct pol_hist {
    int32_t seq;             /* sequence id holding its cells (shown in reasons) */
    const int32_t *tokens;   /* [n_tokens] borrowed; for a busy slot: the tokens
                                whose cells exist now */
    int32_t n_tokens;
    int32_t marker_pos;      /* pol_last_marker of tokens, -1 when none */
    double  last_use_s;      /* engine clock (s) at the end of its last actual use;
                                a parked history keeps its own */
    bool    valid;           /* false: invalid or superseded copy (blank) */
    int32_t n_cells_excl;    /* cells no other sequence holds: freed if dropped */
    bool    pinned;          /* never dropped, by the drop order or a park plan (a
                                pool that is pinned, in use or in its grace time) */
    bool    is_pool;         /* a pool's prefix (never in a slot): a source like any
                                history, but dropping it frees no parking id */
} pol_hist;

typedef struct pol_slot {
    int32_t id;              /* the slot's id (shown in reasons) */
    bool    busy;            /* a request runs in it */
    int32_t hist;            /* index in pol_snapshot.hists, -1 when empty */
} pol_slot;

/* What the policy sees.  A history that no slot points to is parked.  Every
 * pointer is borrowed for the duration of the call. */
typedef struct pol_snapshot {
    const pol_slot *slots;   /* [n_slots] in slot order (ties go to lower index) */
    int32_t n_slots;         /* 1..POL_MAX_SLOTS */
    const pol_hist *hists;   /* [n_hists] */
    int32_t n_hists;         /* 0..POL_MAX_HIST */
    const int32_t *prompt;   /* [n_prompt] the new request's tokens */
    int32_t n_prompt;
    double  prompt_tps;      /* measured prompt processing rate (tokens/s), 0 unknown */
    double  now_s;           /* engine clock (s), same clock as last_use_s */
    int32_t n_cells_free;    /* free KV cells now */
    int32_t n_cells_extra;   /* cells the request needs beyond its prompt (generation) */
    int32_t n_reserve_free;  /* free reserve sequence ids for parking */
    const pol_params *params;
} pol_snapshot;

/* Worth of one history now, as /slots shows it. */
typedef struct pol_state {
    bool   blank;
    bool   is_protected;     /* age < ttl and not blank */
    double age_s, ttl_s, value, overwrite_score;
} pol_state;

pol_state pol_hist_state(const pol_params *p, const pol_hist *h, double now_s);

/* ---- decisions -------------------------------------------------------- */

typedef enum pol_kind {
    POL_WAIT = 0,      /* every slot busy: queue the request */
    POL_CONTINUE,      /* run in the conversation's own slot */
    POL_SIBLING,       /* replace an older version of the conversation in place */
    POL_RECLAIM,       /* take a blank, worthless or least valuable expired slot */
    POL_LEAST_LOSS,    /* all idle histories protected: overwrite the cheapest */
} pol_kind;

const char *pol_kind_name(pol_kind k);   /* "wait", "continue", ... */

/* The engine applies a decision in this order: drop drop[], move `park`'s
 * cells to a reserve id (kv_seq_cp slot -> reserve), cut the slot to n_keep
 * (kv_seq_rm slot [n_keep, inf)), share [n_keep, n_reuse) from the source
 * when source is not the slot's own history (kv_seq_cp source -> slot), then
 * compute the prompt from n_reuse.  n_reuse may equal n_prompt: the engine
 * re-evaluates the last prompt token to get logits. */
typedef struct pol_decision {
    pol_kind kind;
    int32_t slot;            /* index in slots to run in; -1 for POL_WAIT */
    int32_t source;          /* index in hists to reuse; -1 when nothing matches */
    int32_t n_reuse;         /* prompt tokens whose cells come from the source */
    bool    source_busy;     /* the source is in a busy slot: share by membership */
    int32_t n_keep;          /* tokens of the run slot's own history that stay (<= n_reuse) */
    bool    continuation;    /* some valid history continues into this prompt */
    int32_t park;            /* the run slot's history to park first, -1 none */
    double  loss;            /* value lost by this placement (display) */
    int32_t n_drop;          /* histories to drop first, to make room for the park */
    int32_t drop[POL_MAX_HIST];
    char    reason[POL_REASON_CAP]; /* one line for logs and /slots */
} pol_decision;

/* Places the snapshot's prompt.  Returns PK_OK with *out filled (POL_WAIT
 * included), or PK_EINVAL for a malformed snapshot (counts out of range, a
 * slot pointing outside hists, two slots sharing a history, NULL tokens with
 * n > 0, marker_pos outside the history, params out of range); *out is then
 * untouched.  Every byte of *out is written (unused drop[] entries are 0), so
 * equal snapshots give memcmp-equal decisions.  Cost: one token comparison
 * per shared prefix token, plus one pass per parking candidate; allocates
 * nothing (about 16 KB of stack). */
pk_status pol_place(const pol_snapshot *s, pol_decision *out);

/* Can history h be parked, and whom to drop to make room?  kept_by is
 * POL_KEPT_BY_REQUEST when the new request (the snapshot's prompt) holds
 * the share that makes parking needless. */
#define POL_KEPT_BY_REQUEST (-2)
typedef struct pol_park_plan {
    bool    park;            /* keep h under a reserve id */
    double  value;           /* h's value at its idle age */
    double  kept_share;      /* largest share of h's key another holder has */
    int32_t kept_by;         /* that holder: hist index, POL_KEPT_BY_REQUEST, -1 */
    double  loss;            /* park: sum of drop values; kept: 0; else value */
    const char *why;         /* static text: why (not) parked */
    int32_t n_drop;
    int32_t drop[POL_MAX_HIST];
} pol_park_plan;

/* Plans the parking of history h (its slot is about to be overwritten by
 * the snapshot's prompt).  n_cells_need: new cells the incoming request
 * needs; source: a history the request reuses (never dropped), -1 none.
 * Returns PK_OK, or PK_EINVAL for a malformed snapshot or h out of range. */
pk_status pol_park(const pol_snapshot *s, int32_t h, int32_t source, int32_t n_cells_need,
                   pol_park_plan *out);

/* KV cells run short: the order in which to drop histories, first first.
 * Lists every history not in a busy slot, not pinned and not in
 * exclude[0..n_exclude):
 * unprotected before protected, then by value ascending, blanks first at
 * equal value, then history order.  The engine drops from the front until it
 * has room.  Writes at most cap indices to out, *n_out the count.  PK_OK or
 * PK_EINVAL. */
pk_status pol_drop_order(const pol_snapshot *s, const int32_t *exclude, int32_t n_exclude,
                         int32_t *out, int32_t cap, int32_t *n_out);

#endif
