/*
 * pol.c - placement, parking and drop order over a snapshot (see pol.h for
 * the rules and docs/policy.md for the reasons).
 *
 * Every entry point first builds a `pctx` on the stack: the validated
 * snapshot plus, per history, where it sits, whether it is blank, busy or
 * protected, its value, its key length and its common prefix with the
 * prompt.  The rules then only read that table, so a decision allocates
 * nothing and costs one pass over the shared prefixes.
 *
 * Prefixes between two histories are never compared from scratch: both agree
 * with the prompt on [0, lcp), so when their prompt prefixes differ the
 * shorter one is also their common prefix, and when they are equal the
 * comparison starts there (hist_common).
 */
#include "pol.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens compared per memcmp before the scalar search for the mismatch. */
#define PREFIX_BLOCK 128

int32_t pol_common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t n = MIN(na, nb), i = 0;
    if (n <= 0)
        return 0;
    while (i + PREFIX_BLOCK <= n && memcmp(a + i, b + i, PREFIX_BLOCK * sizeof *a) == 0)
        i += PREFIX_BLOCK;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

int32_t pol_last_marker(const int32_t *tokens, int32_t n, const int32_t *marker, int32_t n_marker)
{
    if (!tokens || !marker || n_marker <= 0 || n < n_marker)
        return -1;
    for (int32_t i = n - n_marker; i >= 0; i--)
        if (tokens[i] == marker[0] && memcmp(tokens + i, marker, (size_t)n_marker * sizeof *marker) == 0)
            return i;
    return -1;
}

pol_state pol_hist_state(const pol_params *p, const pol_hist *h, double now_s)
{
    pol_state st = { 0 };
    st.blank = !h->valid || h->n_tokens <= 0;
    st.age_s = MAX(now_s - h->last_use_s, 0.0);
    st.ttl_s = st.blank ? 0 : pol_ttl_s(h->n_tokens, p->ttl_max_s);
    st.is_protected = !st.blank && st.age_s < st.ttl_s;
    st.value = st.blank ? 0 : pol_value(h->n_tokens, st.age_s, p);
    st.overwrite_score = pol_overwrite_score(st.value);
    return st;
}

const char *pol_kind_name(pol_kind k)
{
    switch (k) {
    case POL_WAIT:       return "wait";
    case POL_CONTINUE:   return "continue";
    case POL_SIBLING:    return "sibling";
    case POL_RECLAIM:    return "reclaim";
    case POL_LEAST_LOSS: return "least-loss";
    }
    return "unknown";
}

/* ---- the per-call table ----------------------------------------------- */

typedef struct pctx {
    const pol_snapshot *s;
    const pol_params *p;
    int32_t slot_of[POL_MAX_HIST];  /* slot index holding the history, -1 parked */
    int32_t lcp[POL_MAX_HIST];      /* common prefix with the prompt; 0 for blanks */
    int32_t key[POL_MAX_HIST];      /* tokens before its last turn marker, or all */
    double  value[POL_MAX_HIST];
    bool    blank[POL_MAX_HIST];
    bool    busy[POL_MAX_HIST];
    bool    prot[POL_MAX_HIST];
} pctx;

static bool snapshot_ok(const pol_snapshot *s)
{
    if (!s || !s->params || pol_params_check(s->params) != PK_OK)
        return false;
    if (s->n_slots < 1 || s->n_slots > POL_MAX_SLOTS || !s->slots)
        return false;
    if (s->n_hists < 0 || s->n_hists > POL_MAX_HIST || (s->n_hists > 0 && !s->hists))
        return false;
    if (s->n_prompt < 0 || (s->n_prompt > 0 && !s->prompt))
        return false;
    if (!isfinite(s->now_s) || !isfinite(s->prompt_tps) || s->prompt_tps < 0)
        return false;
    if (s->n_cells_free < 0 || s->n_cells_extra < 0 || s->n_reserve_free < 0)
        return false;
    for (int32_t i = 0; i < s->n_hists; i++) {
        const pol_hist *h = &s->hists[i];
        if (h->n_tokens < 0 || (h->n_tokens > 0 && !h->tokens) || h->n_cells_excl < 0)
            return false;
        if (h->marker_pos < -1 || (h->marker_pos >= 0 && h->marker_pos >= h->n_tokens))
            return false;
        if (!isfinite(h->last_use_s))
            return false;
    }
    return true;
}

/* Validates s and fills everything but lcp (zeroed).  false: malformed. */
static bool ctx_init(pctx *c, const pol_snapshot *s)
{
    if (!snapshot_ok(s))
        return false;
    c->s = s;
    c->p = s->params;
    for (int32_t i = 0; i < s->n_hists; i++)
        c->slot_of[i] = -1;
    for (int32_t k = 0; k < s->n_slots; k++) {
        int32_t h = s->slots[k].hist;
        if (h < -1 || h >= s->n_hists)
            return false;
        if (h >= 0) {
            if (c->slot_of[h] >= 0 || s->hists[h].is_pool)
                return false;
            c->slot_of[h] = k;
        }
    }
    for (int32_t i = 0; i < s->n_hists; i++) {
        const pol_hist *h = &s->hists[i];
        pol_state st = pol_hist_state(c->p, h, s->now_s);
        c->lcp[i] = 0;
        c->key[i] = h->marker_pos > 0 ? h->marker_pos : h->n_tokens;
        c->value[i] = st.value;
        c->blank[i] = st.blank;
        c->prot[i] = st.is_protected;
        c->busy[i] = c->slot_of[i] >= 0 && s->slots[c->slot_of[i]].busy;
    }
    return true;
}

static void ctx_prefixes(pctx *c)
{
    const pol_snapshot *s = c->s;
    for (int32_t i = 0; i < s->n_hists; i++)
        c->lcp[i] = c->blank[i] ? 0
            : pol_common_prefix(s->hists[i].tokens, s->hists[i].n_tokens, s->prompt, s->n_prompt);
}

/* Under a parking id: dropping it frees one (a pool's id is its own). */
static bool is_parked(const pctx *c, int32_t h) { return c->slot_of[h] < 0 && !c->s->hists[h].is_pool; }

/* The prompt repeats all of h's key: it continues h's conversation. */
static bool continues(const pctx *c, int32_t h)
{
    return !c->blank[h] && c->lcp[h] > 0 && c->lcp[h] >= c->key[h];
}

/* An older version: most of its key repeated, but not all of it. */
static bool older_version(const pctx *c, int32_t h)
{
    double share = c->p->sibling_share;
    return share > 0 && !c->blank[h] && c->lcp[h] > 0 && !continues(c, h)
        && (double)c->lcp[h] >= share * (double)c->key[h];
}

/* Common prefix of histories h and g, both valid (see the file comment). */
static int32_t hist_common(const pctx *c, int32_t h, int32_t g)
{
    int32_t a = c->lcp[h], b = c->lcp[g];
    if (a != b)
        return MIN(a, b);
    const pol_hist *x = &c->s->hists[h], *y = &c->s->hists[g];
    return a + pol_common_prefix(x->tokens + a, x->n_tokens - a, y->tokens + a, y->n_tokens - a);
}

/* ---- reason text ------------------------------------------------------ */

static void reason_add(char *buf, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= POL_REASON_CAP)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, POL_REASON_CAP - len, fmt, ap);
    va_end(ap);
}

/* ---- parking ---------------------------------------------------------- */

typedef struct rank {
    int32_t idx;
    int     tier;     /* 0 first */
    double  value;
    int     nonblank; /* 0 = blank first at equal value */
} rank;

static int rank_cmp(const void *pa, const void *pb)
{
    const rank *a = pa, *b = pb;
    if (a->tier != b->tier)     return a->tier < b->tier ? -1 : 1;
    if (a->value != b->value)   return a->value < b->value ? -1 : 1;
    if (a->nonblank != b->nonblank) return a->nonblank < b->nonblank ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* May v be dropped to make room for parking a history worth value_h? */
static bool droppable_for_park(const pctx *c, int32_t v, double value_h)
{
    if (c->blank[v])
        return true;
    if (c->prot[v])
        return false;
    if (c->value[v] < c->p->expired_keep_score)
        return true;
    return c->p->park_value_ratio > 0 && value_h >= c->p->park_value_ratio * c->value[v];
}

static void plan_park(const pctx *c, int32_t h, int32_t source, int64_t need, pol_park_plan *o)
{
    const pol_snapshot *s = c->s;
    const pol_params *p = c->p;
    o->park = false;
    o->value = c->blank[h] ? 0 : c->value[h];
    o->kept_share = 0;
    o->kept_by = -1;
    o->loss = 0;
    o->n_drop = 0;
    if (c->blank[h]) {
        o->why = "blank";
        return;
    }
    if (c->busy[h]) {
        o->why = "busy, not overwritten";
        return;
    }
    o->loss = o->value;
    if (o->value < p->park_min_value) {
        o->why = "worth less than park-min-value";
        return;
    }
    if (p->park_kept_share > 0) {
        double key = (double)c->key[h];
        o->kept_share = MIN(c->lcp[h], c->key[h]) / key;
        o->kept_by = o->kept_share > 0 ? POL_KEPT_BY_REQUEST : -1;
        for (int32_t g = 0; g < s->n_hists && o->kept_share < 1; g++) {
            if (g == h || c->blank[g])
                continue;
            int32_t common = hist_common(c, h, g);
            double share = MIN(common, c->key[h]) / key;
            if (share > o->kept_share) {
                o->kept_share = share;
                o->kept_by = g;
            }
        }
        if (o->kept_share >= p->park_kept_share) {
            o->loss = 0;
            o->why = "already held by another history";
            return;
        }
    }
    int64_t cells_short = need - s->n_cells_free;
    int32_t ids_short = 1 - s->n_reserve_free;
    if (cells_short > 0 || ids_short > 0) {
        rank cand[POL_MAX_HIST];
        int32_t n = 0;
        for (int32_t v = 0; v < s->n_hists; v++) {
            if (v == h || v == source || c->busy[v] || s->hists[v].pinned)
                continue;
            if (s->hists[v].n_cells_excl == 0 && !is_parked(c, v))
                continue;
            if (!droppable_for_park(c, v, o->value))
                continue;
            cand[n++] = (rank){ v, 0, c->value[v], !c->blank[v] };
        }
        qsort(cand, (size_t)n, sizeof cand[0], rank_cmp);
        double lost = 0;
        for (int32_t k = 0; k < n && (cells_short > 0 || ids_short > 0); k++) {
            int32_t v = cand[k].idx;
            bool frees_cells = cells_short > 0 && s->hists[v].n_cells_excl > 0;
            bool frees_id = ids_short > 0 && is_parked(c, v);
            if (!frees_cells && !frees_id)
                continue;
            o->drop[o->n_drop++] = v;
            lost += c->blank[v] ? 0 : c->value[v];
            cells_short -= s->hists[v].n_cells_excl;
            ids_short -= is_parked(c, v);
        }
        if (cells_short > 0 || ids_short > 0) {
            o->n_drop = 0;
            o->why = ids_short > 0 ? "no reserve id can be freed" : "no KV room can be freed";
            return;
        }
        o->loss = lost;
        o->park = true;
        o->why = "parked after drops";
        return;
    }
    o->loss = 0;
    o->park = true;
    o->why = "parked";
}

pk_status pol_park(const pol_snapshot *s, int32_t h, int32_t source, int32_t n_cells_need,
                   pol_park_plan *out)
{
    pctx c;
    if (!out || !ctx_init(&c, s) || h < 0 || h >= s->n_hists || source < -1
        || source >= s->n_hists || n_cells_need < 0)
        return PK_EINVAL;
    ctx_prefixes(&c);
    plan_park(&c, h, source, n_cells_need, out);
    return PK_OK;
}

/* ---- drop order ------------------------------------------------------- */

pk_status pol_drop_order(const pol_snapshot *s, const int32_t *exclude, int32_t n_exclude,
                         int32_t *out, int32_t cap, int32_t *n_out)
{
    pctx c;
    if (!n_out || cap < 0 || (cap > 0 && !out) || n_exclude < 0 || (n_exclude > 0 && !exclude)
        || !ctx_init(&c, s))
        return PK_EINVAL;
    bool skip[POL_MAX_HIST] = { false };
    for (int32_t i = 0; i < n_exclude; i++)
        if (exclude[i] >= 0 && exclude[i] < s->n_hists)
            skip[exclude[i]] = true;
    rank cand[POL_MAX_HIST];
    int32_t n = 0;
    for (int32_t v = 0; v < s->n_hists; v++)
        if (!c.busy[v] && !skip[v] && !s->hists[v].pinned)
            cand[n++] = (rank){ v, c.prot[v], c.value[v], !c.blank[v] };
    qsort(cand, (size_t)n, sizeof cand[0], rank_cmp);
    int32_t k = 0;
    for (; k < n && k < cap; k++)
        out[k] = cand[k].idx;
    *n_out = k;
    return PK_OK;
}

/* ---- placement -------------------------------------------------------- */

/* The source for a prompt: near matches outside busy slots first, then the
 * longest, then run_hist, then history order.  -1 when nothing matches. */
static int32_t pick_source(const pctx *c, int32_t run_hist)
{
    const pol_snapshot *s = c->s;
    const pol_params *p = c->p;
    int32_t best = 0;
    for (int32_t i = 0; i < s->n_hists; i++)
        best = MAX(best, c->lcp[i]);
    if (best == 0)
        return -1;
    double tol = MAX(p->near_share * best, MAX(s->prompt_tps * p->near_s, (double)p->near_tokens));
    bool free_near = false;
    for (int32_t i = 0; i < s->n_hists && !free_near; i++)
        free_near = c->lcp[i] > 0 && c->lcp[i] >= best - tol && !c->busy[i];
    int32_t pick = -1;
    for (int32_t i = 0; i < s->n_hists; i++) {
        if (c->lcp[i] == 0 || c->lcp[i] < best - tol || (free_near && c->busy[i]))
            continue;
        if (pick < 0 || c->lcp[i] > c->lcp[pick] || (c->lcp[i] == c->lcp[pick] && i == run_hist))
            pick = i;
    }
    return pick;
}

/* The idle slot whose history passes test with the longest prefix; ties go
 * to slot order.  -1 when none. */
static int32_t slot_by(const pctx *c, bool (*test)(const pctx *, int32_t))
{
    int32_t pick = -1, pick_lcp = -1;
    for (int32_t k = 0; k < c->s->n_slots; k++) {
        const pol_slot *sl = &c->s->slots[k];
        if (sl->busy || sl->hist < 0 || !test(c, sl->hist))
            continue;
        if (c->lcp[sl->hist] > pick_lcp) {
            pick = k;
            pick_lcp = c->lcp[sl->hist];
        }
    }
    return pick;
}

static bool slot_blank(const pctx *c, int32_t k)
{
    int32_t h = c->s->slots[k].hist;
    return h < 0 || c->blank[h];
}

/* Rule 3: the minimum of (worth keeping?, value, non-blank?, slot index)
 * over idle slots that are blank or expired.  -1 when all are protected.
 * The first key states the rule as written; value order alone agrees with
 * it, since "not worth keeping" means value below a threshold. */
static int32_t slot_reclaim(const pctx *c)
{
    rank best = { -1, 0, 0, 0 };
    for (int32_t k = 0; k < c->s->n_slots; k++) {
        if (c->s->slots[k].busy)
            continue;
        int32_t h = c->s->slots[k].hist;
        bool blank = slot_blank(c, k);
        if (!blank && c->prot[h])
            continue;
        double v = blank ? 0 : c->value[h];
        rank r = { k, !blank && v >= c->p->expired_keep_score, v, !blank };
        if (best.idx < 0 || rank_cmp(&r, &best) < 0)
            best = r;
    }
    return best.idx;
}

/* Rule 4: the idle slot whose loss is least, ties within loss_tie to slot
 * order.  Every idle slot holds a protected history here.  Each slot's plan
 * spares the source the request would use in that slot. */
static int32_t slot_least_loss(const pctx *c, int64_t need, pol_park_plan *plan)
{
    double loss[POL_MAX_SLOTS];
    double least = INFINITY;
    for (int32_t k = 0; k < c->s->n_slots; k++) {
        loss[k] = INFINITY;
        if (c->s->slots[k].busy)
            continue;
        int32_t h = c->s->slots[k].hist;
        plan_park(c, h, pick_source(c, h), need, plan);
        loss[k] = plan->loss;
        least = MIN(least, loss[k]);
    }
    double limit = least * (1.0 + c->p->loss_tie);
    int32_t pick = 0;
    while (pick < c->s->n_slots && !(loss[pick] <= limit))
        pick++;
    ASSERT(pick < c->s->n_slots);   /* the least itself qualifies */
    return pick;
}

pk_status pol_place(const pol_snapshot *s, pol_decision *out)
{
    pctx c;
    if (!out || !ctx_init(&c, s))
        return PK_EINVAL;
    pol_decision *d = out;
    memset(d, 0, sizeof *d);
    d->slot = d->source = d->park = -1;

    int32_t n_idle = 0;
    for (int32_t k = 0; k < s->n_slots; k++)
        n_idle += !s->slots[k].busy;
    if (n_idle == 0) {
        d->kind = POL_WAIT;
        reason_add(d->reason, "wait: all %d slots are busy", (int)s->n_slots);
        return PK_OK;
    }

    ctx_prefixes(&c);
    for (int32_t i = 0; i < s->n_hists && !d->continuation; i++)
        d->continuation = continues(&c, i);
    /* Only the reusable length is needed before the run slot is known (it
     * sizes the request's new cells); the source itself is picked after,
     * preferring the run slot's own history at equal length. */
    int32_t src = pick_source(&c, -1);
    int32_t n_reuse = src < 0 ? 0 : c.lcp[src];
    int64_t need = (int64_t)MAX(s->n_prompt - n_reuse, 0) + s->n_cells_extra;

    int32_t k;
    if ((k = slot_by(&c, continues)) >= 0)
        d->kind = POL_CONTINUE;
    else if ((k = slot_by(&c, older_version)) >= 0)
        d->kind = POL_SIBLING;
    else if ((k = slot_reclaim(&c)) >= 0)
        d->kind = POL_RECLAIM;
    else {
        pol_park_plan scratch;
        d->kind = POL_LEAST_LOSS;
        k = slot_least_loss(&c, need, &scratch);
    }

    int32_t run_hist = s->slots[k].hist;
    d->slot = k;
    d->source = pick_source(&c, run_hist);
    d->n_reuse = d->source < 0 ? 0 : c.lcp[d->source];
    ASSERT(d->n_reuse == n_reuse);
    d->source_busy = d->source >= 0 && c.busy[d->source];
    d->n_keep = slot_blank(&c, k) ? 0 : c.lcp[run_hist];
    ASSERT(d->n_keep <= d->n_reuse);

    pol_park_plan plan;
    plan.park = false;
    plan.n_drop = 0;
    plan.loss = 0;
    plan.why = "";
    if ((d->kind == POL_RECLAIM || d->kind == POL_LEAST_LOSS) && !slot_blank(&c, k))
        plan_park(&c, run_hist, d->source, need, &plan);
    if (plan.park) {
        d->park = run_hist;
        d->n_drop = plan.n_drop;
        memcpy(d->drop, plan.drop, (size_t)plan.n_drop * sizeof plan.drop[0]);
    }
    d->loss = plan.loss;

    const pol_slot *sl = &s->slots[k];
    const pol_hist *rh = run_hist >= 0 ? &s->hists[run_hist] : NULL;
    switch (d->kind) {
    case POL_CONTINUE:
        reason_add(d->reason, "continue in slot %d: seq %d is this conversation (%d of %d tokens shared)",
                   sl->id, rh->seq, c.lcp[run_hist], rh->n_tokens);
        break;
    case POL_SIBLING:
        reason_add(d->reason, "slot %d holds an older version (seq %d, %d of %d key tokens shared): replaced in place",
                   sl->id, rh->seq, c.lcp[run_hist], c.key[run_hist]);
        break;
    case POL_RECLAIM:
        if (slot_blank(&c, k))
            reason_add(d->reason, "%s into blank slot %d",
                       d->continuation ? "continuation" : "new conversation", sl->id);
        else
            reason_add(d->reason, "%s into slot %d: seq %d expired, value %.4g%s",
                       d->continuation ? "continuation" : "new conversation", sl->id, rh->seq,
                       c.value[run_hist],
                       c.value[run_hist] < c.p->expired_keep_score ? " (not worth keeping)" : " (lowest)");
        break;
    case POL_LEAST_LOSS:
        reason_add(d->reason, "every idle history protected: slot %d loses least (%.4g)", sl->id, d->loss);
        break;
    case POL_WAIT:
        break;
    }
    if (d->kind == POL_RECLAIM || d->kind == POL_LEAST_LOSS) {
        if (!slot_blank(&c, k))
            reason_add(d->reason, "; seq %d %s%s", rh->seq, plan.park ? "" : "not parked: ", plan.why);
        if (plan.park && plan.n_drop > 0)
            reason_add(d->reason, " (%d dropped)", (int)plan.n_drop);
    }
    if (d->source >= 0)
        reason_add(d->reason, "; reuses %d tokens of seq %d%s", d->n_reuse, s->hists[d->source].seq,
                   d->source_busy ? " (busy: shared by membership)" : "");
    return PK_OK;
}
