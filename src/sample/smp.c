/*
 * smp.c - token samplers and log-probabilities (see smp.h).
 *
 * PIPELINE (one smp_sample call): llama.cpp's default chain, draw for draw
 *
 *   logits --copy--> work[V] --penalties--> work (penalized logits)
 *     greedy / top_k == 1:  argmax(work) (top_k 1 still draws once)
 *     otherwise:            candidates cand[0..n) as (id, logit)
 *       top-k   min-heap of the k best, then heap-sorted: cand sorted, n = k
 *               (k >= V sorts everything, as the reference does)
 *       top-p   Z = float sum of expf(l - max) over the candidates (sorted
 *               order after top-k, id order without); the cut is the first
 *               index where the float running sum of expf(l - max) / Z is
 *               >= top_p.  Sorted: a scan.  Unsorted: one pass gathers, in
 *               id order, the ids at or above a gate (min-p's threshold,
 *               raised to max - 20), a max-heap pops the best one at a time,
 *               so only the kept tokens are ever ordered (no full sort)
 *       min-p   keep l >= max + logf(min_p): a prefix when sorted, a
 *               gather in id order when neither top-k nor top-p ran
 *               (min_keep > 1: top-p and min-p keep at least that many,
 *               the best ones, and top-p then gathers by the span alone)
 *       temp    each kept logit divided by temp, in float
 *       draw    u from mt19937 (mt.h); weights expf(x - max x) in float,
 *               summed in double; the first candidate, in the order above,
 *               whose running sum (double) is >= sum * u
 *
 *   Each step rounds as the reference's does (float or double, the same
 *   order of additions, >= where it has >=), because a seed must give the
 *   reference's tokens: a different rounding moves a cut or a draw's
 *   boundary now and then, and from there the streams part.  Where ours is
 *   faster (a heap for top-k, the gated heap for top-p) it visits the same
 *   values in the same order, so the sums are the same.
 *
 *   Every non-greedy call draws exactly one number from the RNG (two
 *   mt19937 outputs), even when one candidate is left, as the reference
 *   does, so a seed gives the same stream whatever the filters leave.
 *
 * WHERE IT CAN STILL DIFFER FROM THE REFERENCE
 *   - Ties: our orders put the lower id first on equal logits; the
 *     reference's std::partial_sort / std::sort leave tied tokens in an
 *     order of their own.  A tie matters only when it straddles the top-k
 *     cut or when the draw lands on one of the tied tokens: then the other
 *     one may be picked.  Rare with a real model's float logits.
 *   - u == 0 exactly (both outputs 0) in id order: the reference takes the
 *     first candidate even with weight 0; we take the first with weight > 0
 *     (never a masked token).
 *   - A temperature so small that logit / temp overflows: the reference
 *     computes inf - inf; we put the mass on the best tokens.
 *   - Seeds are 32-bit there; here the low 32 bits of the 64-bit seed seed
 *     the generator.
 *
 * PENALTIES
 *   The history is a ring of the last history_max accepted tokens; the
 *   window is its last min(penalty_last_n, history_max) entries (all when
 *   penalty_last_n is -1).  count[V] is all zero between calls: one pass over
 *   the window counts, a second applies each distinct token once and zeroes
 *   its count again, O(window) instead of O(V).
 *
 * MEMORY: work[V] floats, count[V] ints, cand[V] pairs and the ring, all
 * allocated at smp_new.  Top-N log-probs use the caller's array as a heap.
 */
#include "smp.h"
#include "mt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct smp_cand { int32_t id; float logit; } smp_cand;

struct smp_ctx {
    smp_params p;
    int32_t n_vocab;
    uint64_t seed;          /* effective seed (SMP_SEED_RANDOM replaced) */
    mt19937 rng;            /* the reference's stream, seeded with seed's low 32 bits */

    int32_t *hist;          /* [history_max] ring of accepted tokens */
    int32_t history_max;
    int32_t hist_n;         /* tokens held, <= history_max */
    int32_t hist_head;      /* next write index */

    int32_t *count;         /* [n_vocab], zero between calls */
    float *work;            /* [n_vocab] penalized logits */
    smp_cand *cand;         /* [n_vocab] */
};

/* ---- seeds ------------------------------------------------------------- */

/* A seed for SMP_SEED_RANDOM: 32 bits like any other, never 0xFFFFFFFF
 * itself, so the reported seed replays the stream. */
static uint64_t random_seed(const void *salt)
{
    uint32_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = (uint32_t)(pk_time_us() ^ (uint64_t)(uintptr_t)salt) * 0x9e3779b9u;
    return v == SMP_SEED_RANDOM ? 0 : v;
}

/* ---- create / destroy -------------------------------------------------- */

smp_params smp_default_params(void)
{
    return (smp_params){
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .penalty_last_n = 64, .seed = SMP_SEED_RANDOM,
    };
}

static bool params_ok(const smp_params *p);
bool smp_params_valid(const smp_params *p) { return p && params_ok(p); }

static bool params_ok(const smp_params *p)
{
    return !isnan(p->temp) && !isnan(p->top_p) && !isnan(p->min_p) &&
           isfinite(p->repeat_penalty) && p->repeat_penalty > 0 &&
           isfinite(p->presence_penalty) && isfinite(p->frequency_penalty) &&
           p->penalty_last_n >= -1 && p->min_keep >= 0;
}

pk_status smp_new(const smp_params *p, int32_t n_vocab, int32_t history_max, smp_ctx **out)
{
    *out = NULL;
    if (!p || n_vocab <= 0 || history_max < 0 || !params_ok(p)) return PK_EINVAL;
    smp_ctx *s = calloc(1, sizeof(*s));
    if (!s) return PK_ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->history_max = history_max;
    s->hist = malloc((size_t)(history_max > 0 ? history_max : 1) * sizeof(*s->hist));
    s->count = calloc((size_t)n_vocab, sizeof(*s->count));
    s->work = malloc((size_t)n_vocab * sizeof(*s->work));
    s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
    if (!s->hist || !s->count || !s->work || !s->cand) {
        smp_free(s);
        return PK_ENOMEM;
    }
    s->seed = p->seed == SMP_SEED_RANDOM ? random_seed(s) : p->seed;
    smp_reset(s);
    *out = s;
    return PK_OK;
}

void smp_free(smp_ctx *s)
{
    if (!s) return;
    free(s->hist);
    free(s->count);
    free(s->work);
    free(s->cand);
    free(s);
}

void smp_reset(smp_ctx *s)
{
    s->hist_n = 0;
    s->hist_head = 0;
    mt_seed(&s->rng, (uint32_t)s->seed);
}

uint64_t smp_get_seed(const smp_ctx *s)
{
    return s->seed;
}

void smp_accept(smp_ctx *s, int32_t token)
{
    if (s->history_max == 0 || token < 0 || token >= s->n_vocab) return;
    s->hist[s->hist_head] = token;
    s->hist_head = s->hist_head + 1 == s->history_max ? 0 : s->hist_head + 1;
    if (s->hist_n < s->history_max) s->hist_n++;
}

/* ---- penalties --------------------------------------------------------- */

static void apply_penalties(smp_ctx *s, float *l)
{
    const smp_params *p = &s->p;
    if (p->penalty_last_n == 0 ||
        (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    int32_t last = p->penalty_last_n < 0 ? s->history_max : MIN(p->penalty_last_n, s->history_max);
    int32_t n = MIN(last, s->hist_n);
    int32_t cap = s->history_max, start = s->hist_head - n;
    if (start < 0) start += cap;

    int32_t i = start;
    for (int32_t j = 0; j < n; j++) {
        s->count[s->hist[i]]++;
        if (++i == cap) i = 0;
    }
    i = start;
    for (int32_t j = 0; j < n; j++) {
        int32_t t = s->hist[i];
        int32_t c = s->count[t];
        if (c > 0) {
            /* Shrinking toward zero must not make a negative logit likelier,
             * hence multiply below zero and divide above. */
            if (l[t] <= 0) l[t] *= p->repeat_penalty;
            else l[t] /= p->repeat_penalty;
            l[t] -= (float)c * p->frequency_penalty + p->presence_penalty;
            s->count[t] = 0;
        }
        if (++i == cap) i = 0;
    }
}

/* ---- ordering helpers -------------------------------------------------- */

/* The order every selection uses: higher logit first, lower id on ties. */
static bool better(smp_cand a, smp_cand b)
{
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Min-heap (root = worst) sift-down over h[0..n). */
static void sift_worst(smp_cand *h, int32_t n, int32_t i)
{
    smp_cand x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(h[c], h[c + 1])) c++;
        if (!better(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Max-heap (root = best) sift-down over h[0..n). */
static void sift_best(smp_cand *h, int32_t n, int32_t i)
{
    smp_cand x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(h[c + 1], h[c])) c++;
        if (!better(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Writes the k best of l[0..n) to c[0..k), best first.  O(n log k), and
 * O(n) when most values lose to the current k-th at a glance. */
static void select_top_k(const float *l, int32_t n, int32_t k, smp_cand *c)
{
    for (int32_t i = 0; i < k; i++) c[i] = (smp_cand){ i, l[i] };
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_worst(c, k, i);
    for (int32_t i = k; i < n; i++) {
        smp_cand x = { i, l[i] };
        if (better(x, c[0])) {
            c[0] = x;
            sift_worst(c, k, 0);
        }
    }
    for (int32_t end = k - 1; end > 0; end--) {
        smp_cand t = c[0];
        c[0] = c[end];
        c[end] = t;
        sift_worst(c, end, 0);
    }
}

/* The first index of the largest value, as a scan keeping the first
 * strict improvement would find it (NaNs never win; a NaN at 0 stays), in
 * two passes the compiler vectorizes: lane maxima, then the first index
 * holding their maximum.  A scan's compare-and-branch on the best so far
 * ran 0.40 ms over a 151,936-token vocabulary, this 0.07 ms: a speculative
 * step takes one per verified row and one per draft guess. */
int32_t smp_argmax(const float *logits, int32_t n)
{
    enum { LANES = 16 };
    if (n <= 0 || isnan(logits[0])) return 0;
    float m[LANES];
    for (int k = 0; k < LANES; k++) m[k] = logits[0];
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) m[k] = logits[i + k] > m[k] ? logits[i + k] : m[k];
    float mx = m[0];
    for (int k = 1; k < LANES; k++) mx = m[k] > mx ? m[k] : mx;
    for (; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (i = 0; logits[i] != mx; i++) {}
    return i;
}

/* ---- the truncation pipeline ------------------------------------------ */

/* Below max - SMP_TAIL_SPAN a token weighs under e^-20 (2e-9) of the best:
 * top-p first tries to order only the tokens above it (see below). */
#define SMP_TAIL_SPAN 20.0f

/* Top-p's cut over c[0..n) sorted best first, in the reference's
 * arithmetic: each probability is expf(l - M) / Z in float, their running
 * sum is a float, and the first index where it is >= top_p ends the kept
 * prefix, if it holds min_keep tokens.  Returns the prefix's length, n when
 * rounding never reaches top_p. */
static int32_t top_p_sorted(const smp_cand *c, int32_t n, float M, float Z, float top_p, int32_t min_keep)
{
    float cum = 0.0f;
    for (int32_t m = 0; m < n; m++) {
        cum += expf(c[m].logit - M) / Z;
        if (cum >= top_p && m + 1 >= min_keep) return m + 1;
    }
    return n;
}

/* The same cut for unsorted c[0..n): pops best-first from a max-heap, so
 * only the kept tokens are ever ordered.  Popped tokens collect at the tail
 * and are turned best first at the end; returns how many, the kept set
 * being c[n - taken .. n).  *reached says whether the sum got to top_p (if
 * not, every token was taken and the cut lies below them). */
static int32_t top_p_heap(smp_cand *c, int32_t n, float M, float Z, float top_p, int32_t min_keep,
                          bool *reached)
{
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_best(c, n, i);
    float cum = 0.0f;
    int32_t left = n;
    *reached = false;
    while (left > 0 && !*reached) {
        smp_cand b = c[0];
        c[0] = c[left - 1];
        c[left - 1] = b;
        left--;
        sift_best(c, left, 0);
        cum += expf(b.logit - M) / Z;
        *reached = cum >= top_p && n - left >= min_keep;
    }
    for (int32_t i = left, j = n - 1; i < j; i++, j--) {
        smp_cand t = c[i];
        c[i] = c[j];
        c[j] = t;
    }
    return n - left;
}

/* Writes to c, in id order, the tokens whose logit is at or above th;
 * returns how many. */
static int32_t gather(const float *l, int32_t V, float th, smp_cand *c)
{
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] >= th) c[n++] = (smp_cand){ i, l[i] };
    return n;
}

/* Min-p on c[0..n) sorted best first (n >= 1): the best always stays, then
 * every token down to the first below th that is past the min_keep first. */
static int32_t min_p_prefix(const smp_cand *c, int32_t n, float th, int32_t min_keep)
{
    int32_t m = 1;
    while (m < n && (c[m].logit >= th || m < min_keep)) m++;
    return m;
}

/* Applies top-k, top-p and min-p to the penalized logits, in that order,
 * and leaves the kept candidates in *kept[0..n), returning n (>= 1): best
 * first when top-k or top-p ran, else in id order, the orders the reference
 * draws in.  *mx gets the largest logit (always kept). */
static int32_t filter_candidates(smp_ctx *s, const float *l, smp_cand **kept, float *mx)
{
    const smp_params *p = &s->p;
    int32_t V = s->n_vocab;
    smp_cand *c = s->cand;
    bool use_top_p = p->top_p < 1.0f, use_min_p = p->min_p > 0.0f;
    float log_min_p = use_min_p ? logf(p->min_p) : 0.0f;
    *kept = c;

    if (p->top_k > 0) {
        int32_t n = MIN(p->top_k, V);
        select_top_k(l, V, n, c);
        float M = *mx = c[0].logit;
        if (use_top_p) {
            float Z = 0.0f;                  /* float, in the sorted order */
            for (int32_t i = 0; i < n; i++) Z += expf(c[i].logit - M);
            n = top_p_sorted(c, n, M, Z, p->top_p, p->min_keep);
        }
        return use_min_p ? min_p_prefix(c, n, M + log_min_p, p->min_keep) : n;
    }

    int32_t best = smp_argmax(l, V);
    float M = *mx = l[best];
    float th = use_min_p ? M + log_min_p : -INFINITY;
    if (!use_top_p) {
        /* The reference's min-p keeps id order; when that keeps nothing
         * (min_p > 1) or fewer than min_keep it falls back to its sorted
         * path, which then keeps the best max(min_keep, 1). */
        int32_t n = gather(l, V, th, c);
        if (n == 0 || n < p->min_keep) {
            n = MIN(MAX(p->min_keep, 1), V);
            select_top_k(l, V, n, c);
        }
        return n;
    }

    /* Top-p's normalizer: a float sum over every token in id order.  Then
     * order only the tokens at or above a gate: min-p's threshold (min-p
     * keeps a prefix of the same order after top-p), raised to
     * max - SMP_TAIL_SPAN.  The gathered tokens are a prefix of the
     * descending order, so when their running sum reaches top_p the cut is
     * inside them and the far tail never needs ordering; otherwise gather
     * again down to min-p's threshold alone. */
    float Z = 0.0f;
    for (int32_t i = 0; i < V; i++) Z += expf(l[i] - M);
    /* min_p > 1 still gathers the best; a min_keep floor can keep tokens
     * below min-p's threshold, so then only the tail span gates. */
    float th_gather = p->min_keep > 1 ? -INFINITY : MIN(th, M);
    float gate = MAX(th_gather, M - SMP_TAIL_SPAN);
    bool reached;
    int32_t n = gather(l, V, gate, c);
    int32_t taken = top_p_heap(c, n, M, Z, p->top_p, p->min_keep, &reached);
    if (!reached && gate > th_gather) {
        n = gather(l, V, th_gather, c);
        taken = top_p_heap(c, n, M, Z, p->top_p, p->min_keep, &reached);
    }
    *kept = c + n - taken;
    return use_min_p ? min_p_prefix(*kept, taken, th, p->min_keep) : taken;
}

/* Temperature and one draw over c[0..n) (M the largest logit, finite), in
 * the reference's arithmetic: each logit divided by temp in float, weights
 * expf(x - max x) in float summed in double, target = sum * u, and the
 * first token whose running sum (double) is >= target.  Overwrites the
 * logits with the weights. */
static int32_t draw(smp_ctx *s, smp_cand *c, int32_t n, float M)
{
    double u = mt_uniform(&s->rng);
    if (n == 1) {
        c[0].logit = 1.0f;
        return c[0].id;
    }
    float t = s->p.temp;
    if (!isfinite(M / t)) {
        /* A temperature so small that the scaled logits overflow: the
         * reference would compute inf - inf; take the limit instead, all
         * the mass on the best (shared by ties). */
        for (int32_t i = 0; i < n; i++) c[i].logit = c[i].logit == M ? 1.0f : 0.0f;
    } else {
        float xmax = -INFINITY;
        for (int32_t i = 0; i < n; i++) {
            c[i].logit /= t;
            xmax = MAX(xmax, c[i].logit);
        }
        for (int32_t i = 0; i < n; i++) c[i].logit = expf(c[i].logit - xmax);
    }
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += c[i].logit;
    double target = sum * u, run = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].logit <= 0) continue;      /* never a masked token, even at u == 0 */
        run += c[i].logit;
        last = i;
        if (run >= target) return c[i].id;
    }
    return c[last].id;                      /* not reached: run ends at sum > target */
}

/* ---- log-probabilities -------------------------------------------------- */

/* Log of the softmax normalizer of l[0..n): log sum exp(l - mx), in double. */
static double log_norm(const float *l, int32_t n, float mx)
{
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp((double)l[i] - mx);
    return log(z);
}

static bool lp_better(smp_logprob a, smp_logprob b)
{
    return better((smp_cand){ a.id, a.logprob }, (smp_cand){ b.id, b.logprob });
}

static void lp_sift_worst(smp_logprob *h, int n, int i)
{
    smp_logprob x = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && lp_better(h[c], h[c + 1])) c++;
        if (!lp_better(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static smp_logprob lp_entry(const float *l, const smp_cand *c, int32_t i)
{
    return c ? (smp_logprob){ c[i].id, c[i].logit } : (smp_logprob){ i, l[i] };
}

/* The k best of n entries into top[0..k), best first: of l[0..n) (the ids
 * are the indices) or, when c is given, of c[0..n).  The caller's array is
 * the heap, so nothing is allocated. */
static void lp_best(const float *l, const smp_cand *c, int32_t n, smp_logprob *top, int k)
{
    for (int i = 0; i < k; i++) top[i] = lp_entry(l, c, i);
    for (int i = k / 2 - 1; i >= 0; i--) lp_sift_worst(top, k, i);
    for (int32_t i = k; i < n; i++) {
        smp_logprob x = lp_entry(l, c, i);
        if (lp_better(x, top[0])) {
            top[0] = x;
            lp_sift_worst(top, k, 0);
        }
    }
    for (int end = k - 1; end > 0; end--) {
        smp_logprob t = top[0];
        top[0] = top[end];
        top[end] = t;
        lp_sift_worst(top, end, 0);
    }
}

/* The n_top best of l into top[], best first, as log-probs. */
static void top_logprobs(const float *l, int32_t V, float mx, double lz, smp_logprob *top, int n_top)
{
    int k = n_top < V ? n_top : (int)V;
    lp_best(l, NULL, V, top, k);
    for (int i = 0; i < k; i++) top[i].logprob = (float)((double)top[i].logprob - mx - lz);
    for (int i = k; i < n_top; i++) top[i] = (smp_logprob){ -1, -INFINITY };
}

/* The post-sampling report: c[0..n) hold the drawn distribution's weights
 * (summing to sum); the n_top heaviest into top[] as log-probs, best first,
 * and the chosen token's. */
static void post_report(const smp_cand *c, int32_t n, double sum, int32_t tok, smp_logprob *top, int n_top,
                        float *chosen_logprob)
{
    if (chosen_logprob) {
        *chosen_logprob = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            if (c[i].id == tok) *chosen_logprob = (float)log(c[i].logit / sum);
    }
    if (!top || n_top <= 0) return;
    int k = n_top < n ? n_top : (int)n;
    lp_best(NULL, c, n, top, k);
    for (int i = 0; i < k; i++) top[i].logprob = (float)log(top[i].logprob / sum);
    for (int i = k; i < n_top; i++) top[i] = (smp_logprob){ -1, -INFINITY };
}

/* ---- sampling ---------------------------------------------------------- */

int32_t smp_sample(smp_ctx *s, const float *logits, smp_logprob *top, int n_top,
                   float *chosen_logprob)
{
    int32_t V = s->n_vocab;
    float *l = s->work;
    memcpy(l, logits, (size_t)V * sizeof(*l));
    apply_penalties(s, l);

    int32_t tok;
    float mx;
    if (s->p.temp <= 0) {
        tok = smp_argmax(l, V);
        mx = l[tok];
    } else if (s->p.top_k == 1) {
        /* The reference's top-1 is the first maximum too, then a draw over
         * one candidate. */
        tok = smp_argmax(l, V);
        mx = l[tok];
        mt_uniform(&s->rng);
    } else {
        smp_cand *kept;
        int32_t n_kept = filter_candidates(s, l, &kept, &mx);
        if (isfinite(mx)) {
            tok = draw(s, kept, n_kept, mx);
        } else {
            tok = smp_argmax(l, V);
            mt_uniform(&s->rng);            /* one draw per call, always */
        }
        if (s->p.post_probs && isfinite(mx)) {
            double sum = 0;
            for (int32_t i = 0; i < n_kept; i++) sum += kept[i].logit;
            post_report(kept, n_kept, sum, tok, top, n_top, chosen_logprob);
            return tok;
        }
    }
    if (s->p.post_probs) {                  /* greedy: all the mass on the chosen token */
        smp_cand one = { tok, 1.0f };
        post_report(&one, 1, 1.0, tok, top, n_top, chosen_logprob);
        return tok;
    }

    bool want_top = top && n_top > 0;
    if (want_top || chosen_logprob) {
        if (!isfinite(mx)) {
            /* No finite logit: nothing to normalize; report the uniform. */
            double lu = -log((double)V);
            if (chosen_logprob) *chosen_logprob = (float)lu;
            if (want_top) {
                for (int i = 0; i < n_top; i++)
                    top[i] = i < V ? (smp_logprob){ i, (float)lu } : (smp_logprob){ -1, -INFINITY };
            }
        } else {
            double lz = log_norm(l, V, mx);
            if (chosen_logprob) *chosen_logprob = (float)((double)l[tok] - mx - lz);
            if (want_top) top_logprobs(l, V, mx, lz, top, n_top);
        }
    }
    return tok;
}
