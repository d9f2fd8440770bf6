/*
 * adm.c - the admission controller (see adm.h and docs/admission.md).
 * Every reason string is one of the manual's table; arms are tried in
 * its order and the first that applies decides.
 */
#include "adm.h"

#include <math.h>
#include <string.h>

adm_policy adm_policy_default(void)
{
    return (adm_policy){ .set = false, .target_tps = 0, .mode = ADM_ADVISORY, .on_saturation = ADM_REJECT,
                         .guarantee_min_sessions = 1, .settle_tokens = 48, .settle_max_ms = 5000,
                         .queue_max_ms = 30000, .margin_scale = 1.0 };
}

pk_status adm_policy_check(const adm_policy *p)
{
    const int32_t big = 10000000;
    if (!isfinite(p->target_tps) || p->target_tps < 0 || p->target_tps > 1e6) return PK_EINVAL;
    if (!(p->margin_scale >= 0 && p->margin_scale <= 4)) return PK_EINVAL;
    if ((unsigned)p->mode > ADM_ENFORCED || (unsigned)p->on_saturation > ADM_QUEUE) return PK_EINVAL;
    if (p->guarantee_min_sessions < 0 || p->guarantee_min_sessions > big || p->settle_tokens < 0 ||
        p->settle_tokens > big || p->settle_max_ms < 0 || p->settle_max_ms > big || p->queue_max_ms < 0 ||
        p->queue_max_ms > big)
        return PK_EINVAL;
    return PK_OK;
}

const char *adm_mode_name(adm_mode m) { return m == ADM_ENFORCED ? "enforced" : "advisory"; }

const char *adm_sat_name(adm_sat s)
{
    return s == ADM_WARN ? "warn" : s == ADM_QUEUE ? "queue" : "reject";
}

pk_status adm_mode_parse(const char *s, adm_mode *out)
{
    if (!strcmp(s, "advisory")) *out = ADM_ADVISORY;
    else if (!strcmp(s, "enforced")) *out = ADM_ENFORCED;
    else return PK_EINVAL;
    return PK_OK;
}

pk_status adm_sat_parse(const char *s, adm_sat *out)
{
    if (!strcmp(s, "reject")) *out = ADM_REJECT;
    else if (!strcmp(s, "warn")) *out = ADM_WARN;
    else if (!strcmp(s, "queue")) *out = ADM_QUEUE;
    else return PK_EINVAL;
    return PK_OK;
}

static bool warm(const adm_session *x)
{
    return x->decoding && x->n_decoded >= ADM_WARM_TOKENS && x->tps_ewma > 0;
}

/* M and n over the warm sessions of the whole server. */
static double mean_warm(const adm_snapshot *s, int32_t *n)
{
    double sum = 0;
    *n = 0;
    for (int32_t i = 0; i < s->n_sessions; i++)
        if (warm(&s->sessions[i])) {
            sum += s->sessions[i].tps_ewma;
            (*n)++;
        }
    return *n ? sum / *n : 0;
}

static bool snapshot_ok(const adm_snapshot *s)
{
    return s && s->policy && adm_policy_check(s->policy) == PK_OK && s->settle && s->n_sessions >= 0 &&
           (s->n_sessions == 0 || s->sessions) && isfinite(s->now_ms) && s->n_slots >= 1 &&
           s->n_busy_slots >= 0 && s->kv_total >= 1 && s->kv_used >= 0 && s->kv_free_cells >= 0 &&
           s->ctx_slot >= 1 && s->prefix_len >= 0 && s->n_pending >= 0 && s->n_pending_new >= 0 &&
           s->n_pending_new <= s->n_pending;
}

/* Sessions that will share the compute but have no speed to count yet:
 * running and not warm (prefilling a turn, or its first tokens), or sent
 * and not placed yet, on the whole server like the mean. */
static int32_t starting(const adm_snapshot *s)
{
    int32_t k = s->n_pending;
    for (int32_t i = 0; i < s->n_sessions; i++)
        k += s->sessions[i].running && !warm(&s->sessions[i]);
    return k;
}

/* Sessions sharing the compute with the n warm ones: live sessions of the
 * scope between turns, and those starting (starting()). */
static int32_t sharing(const adm_snapshot *s, int32_t n)
{
    int32_t k = n + starting(s);
    for (int32_t i = 0; i < s->n_sessions; i++) k += s->sessions[i].live && !s->sessions[i].running;
    return k;
}

/* The long-run mean, carried from the load it was measured at to n_all
 * sessions (by the step cost, or the model's 1/n); NAN when there is too
 * little of it, or when carrying it down a load that fell is more than the
 * cost can say (the instant mean speaks for that). */
static double long_mean(const adm_settle *st, int32_t n_all)
{
    if (st->long_ms < ADM_LONG_MIN_MS || st->long_sum <= 0 || n_all < 1) return NAN;
    double Ml = st->long_sum / st->long_ms, nl = st->long_share / st->long_ms;
    if (nl <= 0) return NAN;
    if (!st->has_cost) return Ml * nl / n_all;
    double ms = 1000.0 / Ml + st->cost_ms * (n_all - nl);
    return ms > 0 ? 1000.0 / ms : NAN;
}

/* Scales one of the curve's per-count arrays by d (a decay). */
static void scale_counts(double *v, double d)
{
    for (int32_t i = 0; i <= ADM_CURVE_K; i++) v[i] *= d;
}

void adm_curve_add(adm_curve *c, int32_t k, double ms, bool prompt, int32_t active, double now_ms)
{
    if (k < 1 || !(ms > 0) || !isfinite(ms) || !isfinite(now_ms) || active < 0) return;
    if (c->t_ms > 0 && now_ms > c->t_ms) {
        double d = exp(-(now_ms - c->t_ms) / ADM_CURVE_MS);
        scale_counts(c->n, d);
        scale_counts(c->ms, d);
        scale_counts(c->m, d);
        scale_counts(c->mm, d);
        c->active_ms *= d;
    }
    c->t_ms = fmax(c->t_ms, now_ms);
    k = MIN(k, ADM_CURVE_K);
    if (prompt) {
        c->m[k] += 1;
        c->mm[k] += ms;
    } else {
        c->n[k] += 1;
        c->ms[k] += ms;
    }
    c->active_ms += active * ms;
}

bool adm_curve_at(const adm_curve *c, double x, double *ms)
{
    if (!c || !isfinite(x)) return false;
    double w[ADM_CURVE_K + 1] = { 0 }, sw = 0, sk = 0, sy = 0;
    int32_t m = 0;
    for (int32_t k = 1; k <= ADM_CURVE_K; k++) {
        if (!(c->n[k] >= ADM_CURVE_MIN)) continue;
        w[k] = c->n[k] / (1 + (k - x) * (k - x));
        sw += w[k];
        sk += w[k] * k;
        sy += w[k] * c->ms[k] / c->n[k];
        m++;
    }
    if (m < 2) return false;
    double kb = sk / sw, yb = sy / sw, sxx = 0, sxy = 0;
    for (int32_t k = 1; k <= ADM_CURVE_K; k++) {
        if (w[k] <= 0) continue;
        sxx += w[k] * (k - kb) * (k - kb);
        sxy += w[k] * (k - kb) * (c->ms[k] / c->n[k] - yb);
    }
    double t = yb + fmax(0, sxy / sxx) * (x - kb);
    if (!(t > 0) || !isfinite(t)) return false;
    *ms = t;
    return true;
}

bool adm_curve_prompts(const adm_curve *c, double *share, double *active)
{
    double w = 0, extra = 0, t;
    int32_t counts = 0;
    for (int32_t k = 1; c && k <= ADM_CURVE_K; k++) counts += c->n[k] >= ADM_CURVE_MIN;
    if (counts < 2) return false;                /* no decode curve to measure against */
    for (int32_t k = 1; k <= ADM_CURVE_K; k++) {
        w += c->ms[k] + c->mm[k];
        if (c->m[k] <= 0) continue;
        if (!adm_curve_at(c, k, &t)) return false;
        extra += fmax(0, c->mm[k] - c->m[k] * t);
    }
    if (!(w > 0)) return false;
    *share = extra / w;
    *active = c->active_ms / w;
    return true;
}

static bool knee_known(const adm_curve *c, int32_t a)
{
    return a >= 1 && a <= ADM_CURVE_K && c->kn_ms[a] >= ADM_KNEE_MIN_MS && c->kn_sum[a] > 0;
}

static double knee_mean(const adm_curve *c, int32_t a) { return c->kn_sum[a] / c->kn_ms[a]; }

void adm_knee_add(adm_curve *c, int32_t active, double mean, double ms, double now_ms)
{
    if (active < 1 || !(mean > 0) || !isfinite(mean) || !(ms > 0) || !isfinite(ms) || !isfinite(now_ms)) return;
    if (c->kn_t_ms > 0 && now_ms > c->kn_t_ms) {
        double d = exp(-(now_ms - c->kn_t_ms) / ADM_KNEE_AGE_MS);
        scale_counts(c->kn_ms, d);
        scale_counts(c->kn_sum, d);
        scale_counts(c->kn_lo_ms, d);
        scale_counts(c->kn_lo, d);
    }
    c->kn_t_ms = fmax(c->kn_t_ms, now_ms);
    int32_t a = MIN(active, ADM_CURVE_K);
    double d = exp(-ms / ADM_KNEE_MS), mu = c->kn_ms[a] > 0 ? c->kn_sum[a] / c->kn_ms[a] : mean;
    c->kn_ms[a] = c->kn_ms[a] * d + ms;
    c->kn_sum[a] = c->kn_sum[a] * d + mean * ms;
    c->kn_lo_ms[a] *= d;
    c->kn_lo[a] *= d;
    if (mean < mu) {                     /* against the mean before this step: one pass */
        c->kn_lo_ms[a] += ms;
        c->kn_lo[a] += (mu - mean) * (mu - mean) * ms;
    }
    for (int32_t i = 1; i <= ADM_CURVE_K; i++)
        c->kn_ref[a][i] = knee_known(c, i) ? knee_mean(c, i) : 0;
}

int32_t adm_knee_below(const adm_curve *c, double x, double *tps)
{
    for (int32_t a = c && isfinite(x) ? (int32_t)fmin(floor(x), ADM_CURVE_K) : 0; a >= 1; a--)
        if (knee_known(c, a)) {
            *tps = knee_mean(c, a);
            return a;
        }
    return 0;
}

double adm_knee_low_sd(const adm_curve *c, int32_t a)
{
    return c && knee_known(c, a) && c->kn_lo_ms[a] >= ADM_KNEE_LOW_MIN_MS ? sqrt(c->kn_lo[a] / c->kn_lo_ms[a]) : NAN;
}

/* A count's low-side spread, 0 where it has none yet. */
static double knee_sd(const adm_curve *c, int32_t a)
{
    double sd = adm_knee_low_sd(c, a);
    return isfinite(sd) ? sd : 0;
}

double adm_knee_drift(const adm_curve *c, int32_t j, int32_t a)
{
    if (!c || j == a || !knee_known(c, j) || !knee_known(c, a) || !(c->kn_ref[j][a] > 0)) return 1;
    return fmin(1, (knee_mean(c, a) + knee_sd(c, a)) / c->kn_ref[j][a]);
}

/* The measured counts x is read between: lo at most x, hi the next above
 * it (0 where x is lo); false where the knee says nothing at x. */
static bool knee_line(const adm_curve *c, double x, int32_t *lo, int32_t *hi)
{
    double t;
    *hi = 0;
    if ((*lo = adm_knee_below(c, x, &t)) == 0) return false;
    if (*lo == x) return true;
    for (int32_t k = *lo + 1; k < ADM_CURVE_K && !*hi; k++)   /* the last holds the counts above it */
        if (knee_known(c, k)) *hi = k;
    return *hi && *hi >= x;
}

/* v_lo at lo, or on the line to v_hi at hi (hi 0: lo alone). */
static double line_at(int32_t lo, double v_lo, int32_t hi, double v_hi, double x)
{
    return hi ? v_lo + (v_hi - v_lo) * (x - lo) / (hi - lo) : v_lo;
}

/* adm_knee_at, each count's mean scaled by its drift as count a reads it
 * (a 0: none). */
static bool knee_read(const adm_curve *c, double x, int32_t a, double *tps)
{
    int32_t lo, hi;
    if (!knee_line(c, x, &lo, &hi)) return false;
    *tps = line_at(lo, knee_mean(c, lo) * (a > 0 ? adm_knee_drift(c, lo, a) : 1),
                   hi, hi ? knee_mean(c, hi) * (a > 0 ? adm_knee_drift(c, hi, a) : 1) : 0, x);
    return true;
}

/* The low-side spread read like the knee, 0 where it says nothing. */
static double knee_sd_at(const adm_curve *c, double x)
{
    int32_t lo, hi;
    return knee_line(c, x, &lo, &hi) ? line_at(lo, knee_sd(c, lo), hi, hi ? knee_sd(c, hi) : 0, x) : 0;
}

bool adm_knee_at(const adm_curve *c, double x, double *tps) { return knee_read(c, x, 0, tps); }

/* Agents active: running anywhere on the server (the compute is one),
 * between turns on the scope for less than adm_turn_ms, or sent and not
 * placed yet. */
static int32_t active(const adm_snapshot *s)
{
    int32_t k = s->n_pending;
    for (int32_t i = 0; i < s->n_sessions; i++) k += s->sessions[i].running || s->sessions[i].pausing;
    return k;
}

/* The speed the load curve says for a agents active: they decode at a
 * time in the share d, at least one, and their prompts take the share
 * the curve saw in proportion to the agents that send them; the time per
 * token at x decoding and a prompt share q is T(x) / (1 - q), the decode
 * step and the prompt time every decoding session waits through.  0 when
 * the curve says nothing at x. */
static double curve_speed(const adm_curve *c, double d, double a, double p, double act)
{
    double t, q = act > 0 ? p * a / act : p;
    return adm_curve_at(c, fmax(1, d * a), &t) ? 1000.0 * (1 - fmin(q, ADM_PROMPT_MAX)) / t : 0;
}

/* The load curve's projection: its speed at A + 1 agents (A active now:
 * running, between turns, sent), scaled to the long-run mean by the
 * curve's speed at the load that mean was read at.  The curve gives the
 * shape, what was measured the level: the curve's parts leave out the
 * time between steps and whatever else the speeds see (in a spawn ramp
 * the curve alone projected a third agent at 33.8 tok/s, the mean ran at
 * 24.8 after it).  false when the curve or the decoding share (the same
 * long-run record) is unknown. */
static bool curve_projection(const adm_snapshot *s, adm_answer *a)
{
    const adm_settle *st = s->settle;
    double p, act, d = a->decoding_share;
    int32_t A = active(s);
    if (!(d > 0) || !adm_curve_prompts(s->curve, &p, &act)) return false;
    double v0 = curve_speed(s->curve, d, A, p, act), v1 = curve_speed(s->curve, d, A + 1, p, act);
    if (!(v0 > 0) || !(v1 > 0)) return false;
    double scale = 1;
    if (st->long_ms >= ADM_LONG_MIN_MS && st->long_sum > 0 && st->long_active > 0) {
        double vl = curve_speed(s->curve, d, st->long_active / st->long_ms, p, act);
        if (vl > 0) scale = st->long_sum / st->long_ms / vl;
    }
    v1 = fmin(v1, v0);                     /* one more never speeds the others up */
    a->prompt_share = p;
    a->decoders_if_admitted = fmax(1, d * (A + 1));
    a->projected_measured = scale * v1;
    a->drop_per_admit_ewma = scale * (v0 - v1);
    a->projection_basis = "load curve";
    return true;
}

/* The knee's projection: the mean the sessions experienced with A + 1
 * agents active (A now), where that count was measured.  What the floor
 * is about, read directly: the load curve models the same from its parts
 * (decode steps, prompt share, decoding share) and understates what an
 * agent's turn prompts cost the others (in spawn ramps the enforced
 * gate's projections from the curve were 13-24% over what followed, in 6
 * of 8 runs).  Scaled
 * by the long-run mean over the knee's at the load it was read at, and by
 * the drift since the count it reads was measured (adm_knee_drift: the
 * counts are measured at different moments, and the one the load is at
 * now is refreshed while the one above it may hold a faster minute: a
 * ramp read three agents at 46.7 in a phase where one ran at 38-53), the
 * lower.  Down only: the machine is slower now than when the knee was
 * measured, or the load heavier in prompts; never up, for the tail of a
 * run (agents finishing, no more turn prompts) reads fast and is no sign
 * of room, and a faster count now is the same signal.  Each counts a
 * slowdown only past the noise of what it reads, the knee's low-side
 * spread there: the cap at 1 keeps every reading above the mean out, so
 * without it the noise alone scales down (a gated ramp read levels of
 * 0.89-0.95 on a steady machine, and held two agents where the floor
 * left room for three).
 * Where A + 1 was not measured, a measured count below it still caps the
 * other projections: one more agent never speeds the others up. */
static void knee_projection(const adm_snapshot *s, adm_answer *a, double M)
{
    const adm_settle *st = s->settle;
    const adm_curve *c = s->curve;
    double level = 1, kl, k0, k1, kd;
    int32_t A = active(s), j;
    double xl = st->long_ms > 0 ? st->long_active / st->long_ms : 0;   /* the long-run load */
    if (st->long_ms >= ADM_LONG_MIN_MS && st->long_sum > 0 && st->long_active > 0 && adm_knee_at(c, xl, &kl))
        level = fmin(1, (st->long_sum / st->long_ms + knee_sd_at(c, xl)) / kl);
    if (adm_knee_at(c, A + 1, &k1) && knee_read(c, A + 1, A, &kd)) {
        level = a->knee_level = fmin(level, kd / k1);
        a->projected_measured = level * k1;
        a->knee_low_sd = level * adm_knee_low_sd(c, A + 1);
        a->drop_per_admit_ewma = fmax(0, (adm_knee_at(c, A, &k0) ? level * k0 : M) - a->projected_measured);
        a->projection_basis = "knee";
    } else if (isfinite(a->projected_measured) && (j = adm_knee_below(c, A + 1, &k0)) > 0) {
        level = a->knee_level = fmin(level, adm_knee_drift(c, j, A));
        a->projected_measured = fmin(a->projected_measured, level * k0);
    }
}

static void projections(const adm_snapshot *s, adm_answer *a)
{
    const adm_settle *st = s->settle;
    double M = a->mean_active_tps;
    int32_t n = a->n_active;
    /* Sessions between turns come back and starting ones are about to
     * decode: each will cost the others what an admit was measured to
     * cost, or, before any admit settled, the model's share (speed as
     * 1/n).  Leaving them out is how a gate that checks at every step
     * finds a moment that looks free; charging them 1/n on a machine
     * where a session costs the others a few percent (a CPU: one weight
     * read per step for all) holds agents back for nothing. */
    int32_t n_all = n + a->n_paused + a->n_starting;   /* sharing(), counted already */
    a->idle_estimate = false;
    a->knee_level = a->knee_low_sd = NAN;
    for (int32_t k = 1; s->curve && k <= ADM_CURVE_K; k++) {
        if (s->curve->n[k] >= ADM_CURVE_MIN) a->curve_tps[k] = 1000.0 * s->curve->n[k] / s->curve->ms[k];
        if (knee_known(s->curve, k)) a->knee_tps[k] = knee_mean(s->curve, k);
    }
    a->prompt_share = NAN;
    a->mean_long_tps = long_mean(st, n_all);
    a->decoding_share = st->long_ms >= ADM_LONG_MIN_MS && st->long_active > 0 ? fmin(1, st->long_dec / st->long_active)
                      : NAN;
    if (n > 0) {
        M = st->has_cost ? adm_add_sessions(M, st->cost_ms, n_all - n) : M * n / n_all;
        /* The lower of the two: a check that falls in a lull (the agents'
         * turn prompts all read, nobody's window holding a stall) sees the
         * speed of a moment the load does not keep; an advisory client
         * that polls finds such a moment, an enforced gate every one. */
        if (a->mean_long_tps < M) M = a->mean_long_tps;
        n = n_all;
    } else if (n_all > 0 && st->has_settled && s->now_ms - st->t_settled_ms < ADM_IDLE_MS) {
        a->idle_estimate = true;     /* nobody measured now: the last settled mean stands in */
        M = st->mean_settled;
        n = n_all;
    }
    a->projected_model = n > 0 ? M * n / (n + 1) : NAN;
    a->step_cost_ms = st->has_cost ? st->cost_ms : 0;
    a->decoders_if_admitted = a->projected_measured = NAN;
    a->drop_per_admit_ewma = 0;
    a->projection_basis = "none";
    if (n > 0 && !curve_projection(s, a)) {
        a->projection_basis = st->has_cost ? "step cost" : "model";
        if (st->has_cost) {
            a->projected_measured = adm_add_sessions(M, st->cost_ms, 1);
            a->drop_per_admit_ewma = M - a->projected_measured;
        }
    }
    if (n > 0 && s->curve) knee_projection(s, a, M);
    a->projected = isfinite(a->projected_measured) ? a->projected_measured : a->projected_model;
}

/* The admitted session of an open settle window, NULL when it is gone
 * (the window then closes at the end of this step). */
static const adm_session *admitted(const adm_snapshot *s)
{
    for (int32_t i = 0; i < s->n_sessions; i++)
        if (s->sessions[i].task_id == s->settle->task_id) return &s->sessions[i];   /* prefilling still counts */
    return NULL;
}

/* When a settle window is expected to close: the settle_tokens its
 * session has not decoded yet (done of them are), at tps, and at least
 * one token's time, since a window closes at the end of a step.  A
 * spawner that waited out the settle_max_ms cap spawned 2-3 s after a
 * window that had closed, and held fewer agents than the gate would.
 * Infinite when nothing measures a speed: the cap answers. */
static double settle_estimate_ms(const adm_policy *p, int32_t done, double tps)
{
    return tps > 0 ? 1000.0 * MAX(p->settle_tokens - done, 1) / tps : INFINITY;
}

static double retry_after(const adm_snapshot *s, const adm_answer *a)
{
    if (a->settling) return fmin(60, fmax(1, ceil(a->settle_remaining_ms / 1000.0)));
    double best = INFINITY;
    for (int32_t i = 0; i < s->n_sessions; i++) {
        const adm_session *x = &s->sessions[i];
        if (x->decoding && x->tokens_left > 0 && x->tps_ewma > 0) best = fmin(best, x->tokens_left / x->tps_ewma);
    }
    return isfinite(best) ? fmin(60, fmax(1, ceil(best))) : 2;
}

pk_status adm_decide(const adm_snapshot *s, adm_answer *out)
{
    if (!snapshot_ok(s) || !out) return PK_EINVAL;
    const adm_policy *p = s->policy;
    const adm_settle *st = s->settle;
    adm_answer a;
    memset(&a, 0, sizeof a);
    a.mean_active_tps = mean_warm(s, &a.n_active);
    int32_t n_live = 0, max_ctx_pct_num = 0, max_ctx_pct_den = 1;
    double owned = 0;
    for (int32_t i = 0; i < s->n_sessions; i++) {
        const adm_session *x = &s->sessions[i];
        a.n_warming += x->decoding && !warm(x);
        if (!x->live) continue;
        n_live++;
        a.n_paused += !x->running;         /* live and not running: between turns */
        owned += x->kv_owned;
        if (x->ctx_total > 0 && (double)x->ctx_used * max_ctx_pct_den > (double)max_ctx_pct_num * x->ctx_total) {
            max_ctx_pct_num = x->ctx_used;
            max_ctx_pct_den = x->ctx_total;
        }
    }
    a.n_pool_sessions = n_live;
    a.known_session = s->known_session;
    a.n_starting = starting(s);
    projections(s, &a);

    a.ctx_headroom_tokens = MAX(s->ctx_slot - s->prefix_len, 0);
    a.kv_free_cells = s->kv_free_cells;
    a.kv_headroom_pct = 100.0 * s->kv_free_cells / s->kv_total;
    double marginal = s->expected_tokens > 0 ? s->expected_tokens
                    : n_live > 0 && owned > 0 ? owned / n_live : a.ctx_headroom_tokens;
    a.headroom_sessions = marginal > 0 ? (int32_t)fmin(s->kv_free_cells / marginal, 1e9) : s->kv_free_cells;
    a.compaction_pressure = n_live == 0 ? 0
        : fmin(1, fmax((double)s->kv_used / s->kv_total, (double)max_ctx_pct_num / max_ctx_pct_den));
    if (st->active) {
        double left = p->settle_max_ms - (s->now_ms - st->t_admit_ms);
        a.settling = left > 0;
        /* Its own speed once it decodes, else the warm mean: while it
         * reads its prompt the estimate leaves the prompt out, and a
         * caller that asks again is told the rest. */
        const adm_session *x = admitted(s);
        double tps = x && x->decoding && x->tps_ewma > 0 ? x->tps_ewma : a.mean_active_tps;
        double est = settle_estimate_ms(p, x ? x->n_decoded : p->settle_tokens, tps);
        a.settle_remaining_ms = fmax(fmin(left, est), 0);
    }
    /* A NEW session sent and not placed yet is an admit whose window has
     * not opened: a spawner that asks right after its spawn, while a long
     * step delays the placement, was told "ok" and spawned again. */
    a.n_pending_new = s->n_pending_new;
    if (s->n_pending_new > 0 && p->settle_max_ms > 0) {
        a.settling = true;
        double est = fmin(p->settle_max_ms, settle_estimate_ms(p, 0, a.mean_active_tps));
        a.settle_remaining_ms = fmax(a.settle_remaining_ms, est);
    }

    /* The floor is a floor, not a target: a projection right at it puts
     * the mean under it half the time after the admit, as the turns of
     * the agents move it about.  The margin is ADM_KNEE_Z of the knee's
     * low-side spread at the load after the admit, where the knee
     * projects (the time a load spends under a floor is what the floor
     * arm answers for: about a sixth of it, for a normal spread); else
     * ADM_MARGIN_Z of the mean's long-run spread, relative, at the
     * projection.  The policy scales it: an operator who would rather
     * run more agents than keep the mean above the floor five sixths of
     * the time takes less. */
    if (isfinite(a.knee_low_sd)) {
        a.floor_margin_tps = p->margin_scale * ADM_KNEE_Z * a.knee_low_sd;
    } else if (st->long_ms >= ADM_LONG_MIN_MS && st->long_sum > 0 && isfinite(a.projected)) {
        double m = st->long_sum / st->long_ms, var = st->long_sq / st->long_ms - m * m;
        a.floor_margin_tps = p->margin_scale * ADM_MARGIN_Z * sqrt(fmax(var, 0)) / m * a.projected;
    }
    bool floor_fails = p->target_tps > 0 && isfinite(a.projected) && a.projected - a.floor_margin_tps < p->target_tps;
    if (s->expected_tokens > a.ctx_headroom_tokens) {
        a.arm = ADM_ARM_CONTEXT, a.reason = "context headroom exhausted";
    } else if (s->known_session) {
        a.arm = ADM_ARM_KNOWN, a.can_admit = true, a.reason = "ok";
    } else if (n_live < p->guarantee_min_sessions) {
        a.arm = ADM_ARM_GUARANTEED, a.can_admit = true, a.guaranteed = true, a.reason = "guaranteed minimum";
    } else if (s->n_busy_slots >= s->n_slots) {
        a.arm = ADM_ARM_NO_SLOT, a.reason = "no sequence id left";
    } else if (a.headroom_sessions < 1) {
        a.arm = ADM_ARM_KV, a.reason = "kv headroom exhausted";
    } else if (a.settling) {
        a.arm = ADM_ARM_SETTLING, a.reason = "measurement settling";
    } else if (floor_fails) {
        a.arm = ADM_ARM_FLOOR;
        a.reason = a.idle_estimate ? "projected mean tps below floor (idle estimate)"
                                   : "projected mean tps below floor";
    } else {
        a.arm = ADM_ARM_OK, a.can_admit = true, a.reason = "ok";
    }
    a.retry_after_s = retry_after(s, &a);
    *out = a;
    return PK_OK;
}

adm_action adm_gate(const adm_policy *p, const adm_answer *a, bool known_session, bool overcommit,
                    double waited_ms)
{
    if (!p->set || p->mode != ADM_ENFORCED || known_session || overcommit || a->can_admit) return ADM_ADMIT;
    if (a->arm == ADM_ARM_SETTLING) return ADM_HOLD;                       /* settling: bounded by settle_max_ms */
    switch (p->on_saturation) {
    case ADM_WARN: return ADM_ADMIT_WARN;
    case ADM_QUEUE: return waited_ms < p->queue_max_ms ? ADM_HOLD : ADM_REFUSE;
    default: return ADM_REFUSE;
    }
}

/* The mean the speeds will show once they have absorbed the admit.  A
 * speed is decayed over its window, so dt after the admit a session that
 * was warm then still carries exp(-max(dt / W_ms, k / W_tokens)) of its
 * speed from before (k: its tokens since): what moved, over the part
 * absorbed, is what it moves to.  At the default 48 settle tokens about
 * half has been absorbed, and the raw drop was half the real one: the
 * next projection admitted into an overshoot, the failure the settle
 * window exists to prevent.  Sessions that started since are all new. */
static double absorbed_mean(const adm_settle *st, const adm_snapshot *s)
{
    double sum = 0;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_sessions; i++) {
        const adm_session *x = &s->sessions[i];
        if (!warm(x)) continue;
        double r = x->tps_ewma;
        for (int32_t k = 0; k < st->n_at && s->rate_window_ms > 0 && s->rate_window_tokens > 0; k++) {
            const adm_at *a = &st->at[k];
            if (a->task_id != x->task_id || x->task_id == 0) continue;
            double dt = s->now_ms - st->t_admit_ms, dk = x->n_decoded - a->n_decoded;
            double w = 1 - exp(-fmax(dt / s->rate_window_ms, dk / s->rate_window_tokens));
            r = fmax(0, a->tps_ewma + (r - a->tps_ewma) / fmax(w, ADM_MIN_ABSORBED));
            break;
        }
        sum += r;
        n++;
    }
    return n ? sum / n : 0;
}

/* The mean of the samples kept without the lowest and the highest (from
 * three on), at least 0.  Not their median: when an admit often finds the
 * mean higher after it than before (a stall at the admit, none at the
 * settle), half the samples are 0 or less and a median says admits are
 * free (projections at the instant mean, realized 20-35% lower). */
static double cost_trimmed(const adm_settle *st)
{
    int32_t k = MIN(st->n_cost, ADM_COST_N);
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (int32_t i = 0; i < k; i++) {
        sum += st->cost_sample[i];
        lo = fmin(lo, st->cost_sample[i]);
        hi = fmax(hi, st->cost_sample[i]);
    }
    double m = k >= 3 ? (sum - lo - hi) / (k - 2) : sum / k;
    return fmax(0, m);
}

void adm_settle_step(adm_settle *st, const adm_snapshot *s)
{
    int32_t n;
    double M = mean_warm(s, &n);
    double dt = st->t_long_ms > 0 ? s->now_ms - st->t_long_ms : 0;
    st->t_long_ms = s->now_ms;
    if (dt > 0) {                                /* the step just run, as it ended */
        double d = exp(-dt / ADM_LONG_MS);
        st->long_ms *= d;
        st->long_sum *= d;
        st->long_sq *= d;
        st->long_share *= d;
        st->long_dec *= d;
        st->long_active *= d;
        if (n > 0) {
            int32_t dec = 0;
            for (int32_t i = 0; i < s->n_sessions; i++) dec += s->sessions[i].decoding;
            st->long_ms += dt;
            st->long_sum += M * dt;
            st->long_sq += M * M * dt;
            st->long_share += sharing(s, n) * dt;
            st->long_dec += dec * dt;
            st->long_active += active(s) * dt;
        }
    }
    if (!st->active) {
        if (n > 0) {
            st->has_settled = true;
            st->mean_settled = M;
            st->t_settled_ms = s->now_ms;
        }
        return;
    }
    const adm_session *x = admitted(s);
    bool due = !x || x->n_decoded >= s->policy->settle_tokens || s->now_ms - st->t_admit_ms >= s->policy->settle_max_ms;
    if (!due) return;
    st->active = false;
    if (n == 0) return;                          /* nobody to measure: no sample */
    double m = absorbed_mean(st, s);
    /* Against the long-run mean when nobody was warm at the admit: the
     * load it was read at, and the load now, as sessions sharing the mean
     * (n').  An agent workload places its new sessions when the others
     * are between turns or reading their prompts as often as not; without
     * this, six of the eight admits of a naive ramp gave no sample, and a
     * spawner with none is left to the model's 1/n. */
    double gained = st->long_base ? sharing(s, n) - st->share_at_admit : n - st->n_warm_at_admit;
    if (st->mean_at_admit > 0 && m > 0 && gained >= (st->long_base ? 0.5 : 1)) {
        /* Within the time per token at the admit either way (one more
         * session doubling it: compute shared evenly by two): a turn prompt
         * read in the window, magnified by the lag correction, made samples
         * of 40 ms where admits cost 9, and an EWMA of them held every
         * later spawner to one agent.  A sample below 0 (the mean rose: a
         * stall at the admit, none at the settle) is kept as it is: the
         * trimmed mean averages the noise both ways. */
        double t0 = 1000.0 / st->mean_at_admit;
        double c = fmin(fmax((1000.0 / m - t0) / gained, -t0), t0);
        st->cost_sample[st->n_cost++ % ADM_COST_N] = c;
        st->cost_ms = cost_trimmed(st);
        st->has_cost = true;
    }
    st->has_settled = true;
    st->mean_settled = M;
    st->t_settled_ms = s->now_ms;
    st->n_settled++;
}

void adm_record_admit(adm_settle *st, const adm_snapshot *s, uint64_t task_id)
{
    int32_t n;
    double M = mean_warm(s, &n);
    st->active = true;
    st->t_admit_ms = s->now_ms;
    st->task_id = task_id;
    st->mean_at_admit = n ? M : 0;
    st->n_warm_at_admit = n;
    st->long_base = n == 0 && st->long_ms >= ADM_LONG_MIN_MS && st->long_sum > 0;
    if (st->long_base) {
        st->mean_at_admit = st->long_sum / st->long_ms;
        st->share_at_admit = st->long_share / st->long_ms;
    }
    st->n_at = 0;
    for (int32_t i = 0; i < s->n_sessions && st->n_at < ADM_MAX_AT; i++)
        if (warm(&s->sessions[i]))
            st->at[st->n_at++] = (adm_at){ .task_id = s->sessions[i].task_id, .tps_ewma = s->sessions[i].tps_ewma,
                                           .n_decoded = s->sessions[i].n_decoded };
}
