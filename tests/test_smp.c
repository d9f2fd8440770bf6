/* test_smp.c - samplers: greedy and its limits, determinism, the truncation
 * filters checked statistically against a brute-force reference, the
 * penalties and log-probs numerically, and speed on a 152k vocabulary. */
#include "../src/sample/mt.h"
#include "../src/sample/smp.h"
#include "test.h"

#include <stdint.h>

static uint64_t trng = 0x243f6a8885a308d3ull;

static double t_uniform(void)
{
    trng ^= trng << 13;
    trng ^= trng >> 7;
    trng ^= trng << 17;
    return (double)(trng >> 11) * 0x1.0p-53;
}

/* Roughly normal logits (sum of uniforms), scaled. */
static void random_logits(float *l, int n, float scale)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)((t_uniform() + t_uniform() + t_uniform() - 1.5) * scale);
}

static smp_params plain(float temp)
{
    smp_params p = smp_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static smp_ctx *make(const smp_params *p, int32_t n_vocab, int32_t history_max)
{
    smp_ctx *s = NULL;
    CHECK_EQ_INT(smp_new(p, n_vocab, history_max, &s), PK_OK);
    if (!s) { test_finish(); exit(1); }
    return s;
}

/* ---- brute-force reference distribution --------------------------------- */

static const float *cmp_l;

static int cmp_desc(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (cmp_l[i] != cmp_l[j]) return cmp_l[i] > cmp_l[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* Fills prob[V] with the distribution the pipeline should draw from, for
 * already-penalized logits l: sort everything, cut top-k, softmax of the
 * remainder, cut top-p, cut min-p on the logits, temperature, softmax.
 * Top-p's cut is in llama.cpp's float arithmetic (the normalizer summed in
 * the sorted order after top-k, in id order without it; the running sum a
 * float compared with >=), since rounding there decides the kept set.
 * Returns the number of tokens kept. */
static int reference(const float *l, int V, const smp_params *p, double *prob)
{
    int *idx = malloc((size_t)V * sizeof(int));
    for (int i = 0; i < V; i++) idx[i] = i;
    cmp_l = l;
    qsort(idx, (size_t)V, sizeof(int), cmp_desc);
    int n = (p->top_k > 0 && p->top_k < V) ? p->top_k : V;
    double M = l[idx[0]];
    if (p->top_p < 1.0f) {
        float z = 0, cum = 0;
        bool top_k = p->top_k > 0;
        for (int i = 0; i < n; i++) z += expf(l[top_k ? idx[i] : i] - (float)M);
        int m = 0;
        while (m < n) {
            cum += expf(l[idx[m]] - (float)M) / z;
            m++;
            if (cum >= p->top_p) break;
        }
        n = m;
    }
    if (p->min_p > 0.0f) {
        float th = (float)M + logf(p->min_p);
        int m = 1;
        while (m < n && l[idx[m]] >= th) m++;
        n = m;
    }
    double z = 0;
    for (int i = 0; i < V; i++) prob[i] = 0;
    for (int i = 0; i < n; i++) z += prob[idx[i]] = exp(((double)l[idx[i]] - M) / p->temp);
    for (int i = 0; i < n; i++) prob[idx[i]] /= z;
    free(idx);
    return n;
}

/* Draws n_draws tokens and checks every one lies in the reference set and
 * every frequency is within 5 sigma of the reference probability.  Returns
 * the number of distinct tokens seen. */
static int check_distribution(const char *name, const float *l, int V, const smp_params *p, int n_draws)
{
    double *prob = malloc((size_t)V * sizeof(double));
    int *hits = calloc((size_t)V, sizeof(int));
    int kept = reference(l, V, p, prob);
    smp_ctx *s = make(p, V, 0);
    for (int d = 0; d < n_draws; d++) {
        int32_t t = smp_sample(s, l, NULL, 0, NULL);
        if (t >= 0 && t < V) hits[t]++;
    }
    int outside = 0, off = 0, seen = 0;
    for (int i = 0; i < V; i++) {
        seen += hits[i] > 0;
        if (prob[i] == 0) { outside += hits[i]; continue; }
        /* 5 sigma, plus a few counts of slack for rare tokens, where the
         * normal approximation of the binomial is poor. */
        double want = prob[i] * n_draws, sd = sqrt(want * (1 - prob[i]));
        if (fabs(hits[i] - want) > 5 * sd + 4) {
            if (off++ < 5) fprintf(stderr, "%s: token %d hits %d want %.1f (sd %.1f)\n", name, i, hits[i], want, sd);
        }
    }
    CHECK_EQ_INT(outside, 0);
    CHECK_EQ_INT(off, 0);
    CHECK(seen <= kept);
    smp_free(s);
    free(prob);
    free(hits);
    return seen;
}

/* ---- tests -------------------------------------------------------------- */

static void test_params(void)
{
    smp_params d = smp_default_params();
    CHECK_NEAR(d.temp, 0.8, 1e-7);
    CHECK_EQ_INT(d.top_k, 40);
    CHECK_NEAR(d.top_p, 0.95, 1e-7);
    CHECK_NEAR(d.min_p, 0.05, 1e-7);
    CHECK(d.repeat_penalty == 1.0f && d.presence_penalty == 0 && d.frequency_penalty == 0);
    CHECK_EQ_INT(d.penalty_last_n, 64);
    CHECK(d.seed == 0xFFFFFFFFu);

    smp_ctx *s = (smp_ctx *)1;
    CHECK_EQ_INT(smp_new(&d, 0, 10, &s), PK_EINVAL);
    CHECK(s == NULL);
    CHECK_EQ_INT(smp_new(&d, 10, -1, &s), PK_EINVAL);
    smp_params b = d;
    b.repeat_penalty = 0;
    CHECK_EQ_INT(smp_new(&b, 10, 10, &s), PK_EINVAL);
    b = d;
    b.temp = NAN;
    CHECK_EQ_INT(smp_new(&b, 10, 10, &s), PK_EINVAL);
    b = d;
    b.penalty_last_n = -2;
    CHECK_EQ_INT(smp_new(&b, 10, 10, &s), PK_EINVAL);
    smp_free(NULL);

    /* 0xFFFFFFFF is replaced by a random seed; others are kept. */
    smp_ctx *a = make(&d, 10, 0), *c = make(&d, 10, 0);
    CHECK(smp_get_seed(a) != 0xFFFFFFFFu);
    CHECK(smp_get_seed(a) != smp_get_seed(c));
    smp_free(a);
    smp_free(c);
    d.seed = 42;
    a = make(&d, 10, 0);
    CHECK(smp_get_seed(a) == 42);
    smp_free(a);
}

static void test_argmax(void)
{
    float a[] = { 1, 3, -2, 3, 0.5f };
    CHECK_EQ_INT(smp_argmax(a, 5), 1);           /* tie: lower id */
    float b[] = { -5, -1, -1, -3 };
    CHECK_EQ_INT(smp_argmax(b, 4), 1);
    float c[] = { -INFINITY, -INFINITY, 2 };
    CHECK_EQ_INT(smp_argmax(c, 3), 2);
    CHECK_EQ_INT(smp_argmax(c, 1), 0);
    float z[] = { -0.0f, 0.0f, -1 };             /* equal zeros: the first */
    CHECK_EQ_INT(smp_argmax(z, 3), 0);
    float nan0[] = { NAN, 5, 7 };                /* a scan never beats a NaN it starts on */
    CHECK_EQ_INT(smp_argmax(nan0, 3), 0);

    /* against the scan that keeps the first strict improvement, over
     * lengths around the vector width, ties, NaNs and infinities */
    static float r[100];
    uint32_t x = 7;
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + trial % 100;
        for (int i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            r[i] = (float)(x >> 28);                           /* 16 values: many ties */
            if ((x & 0xff) == 1) r[i] = NAN;
            if ((x & 0xff) == 2) r[i] = trial % 2 ? INFINITY : -INFINITY;
        }
        int32_t want = 0;
        for (int32_t i = 1; i < n; i++)
            if (r[i] > r[want]) want = i;
        CHECK_EQ_INT(smp_argmax(r, n), want);
    }

    smp_params p = plain(0);
    smp_ctx *s = make(&p, 5, 0);
    CHECK_EQ_INT(smp_sample(s, a, NULL, 0, NULL), 1);
    p.temp = -1;                                 /* any temp <= 0 is greedy */
    smp_ctx *s2 = make(&p, 5, 0);
    CHECK_EQ_INT(smp_sample(s2, a, NULL, 0, NULL), 1);
    smp_free(s);
    smp_free(s2);
}

/* Same seed, same stream; reset replays it; another seed differs. */
static void test_determinism(void)
{
    enum { V = 1000, N = 2000 };
    static float l[V];
    random_logits(l, V, 4);
    smp_params p = plain(1.0f);
    p.top_k = 50;
    p.top_p = 0.9f;
    smp_ctx *a = make(&p, V, 0), *b = make(&p, V, 0);
    p.seed = 1235;
    smp_ctx *c = make(&p, V, 0);
    static int32_t ta[N];
    int same_ab = 0, same_ac = 0, same_reset = 0;
    for (int i = 0; i < N; i++) {
        ta[i] = smp_sample(a, l, NULL, 0, NULL);
        same_ab += ta[i] == smp_sample(b, l, NULL, 0, NULL);
        same_ac += ta[i] == smp_sample(c, l, NULL, 0, NULL);
    }
    smp_reset(a);
    for (int i = 0; i < N; i++) same_reset += ta[i] == smp_sample(a, l, NULL, 0, NULL);
    CHECK_EQ_INT(same_ab, N);
    CHECK_EQ_INT(same_reset, N);
    CHECK(same_ac < N / 2);
    smp_free(a);
    smp_free(b);
    smp_free(c);
}

/* temp -> 0 and top_k = 1 behave as greedy. */
static void test_greedy_limits(void)
{
    enum { V = 500 };
    static float l[V];
    smp_params p0 = plain(0), pt = plain(1e-3f), pk = plain(1.0f);
    pk.top_k = 1;
    smp_ctx *g = make(&p0, V, 0), *t = make(&pt, V, 0), *k = make(&pk, V, 0);
    int agree_t = 0, agree_k = 0;
    for (int trial = 0; trial < 300; trial++) {
        random_logits(l, V, 5);
        int32_t m = smp_argmax(l, V);
        l[m] += 0.1f;                   /* a clear winner for the temp limit */
        if (trial % 3 == 0) l[V - 1] = l[m];   /* an exact tie: lower id wins */
        int32_t want = smp_sample(g, l, NULL, 0, NULL);
        CHECK_EQ_INT(want, smp_argmax(l, V));
        agree_k += smp_sample(k, l, NULL, 0, NULL) == want;
        if (trial % 3 != 0) agree_t += smp_sample(t, l, NULL, 0, NULL) == want;
    }
    /* A subnormal temperature is still the greedy limit, not NaN. */
    smp_params ps = plain(1e-40f);
    smp_ctx *sub = make(&ps, V, 0);
    CHECK_EQ_INT(smp_sample(sub, l, NULL, 0, NULL), smp_argmax(l, V));
    smp_free(sub);
    CHECK_EQ_INT(agree_k, 300);
    CHECK_EQ_INT(agree_t, 200);
    smp_free(g);
    smp_free(t);
    smp_free(k);
}

/* Small hand-computed sets, then random vocabularies against the
 * brute-force reference for each filter and for all of them together. */
static void test_filters(void)
{
    /* probs 0.4, 0.3, 0.2, 0.1 */
    float l4[4] = { logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f) };
    double prob[4];
    smp_params p = plain(1.0f);
    p.top_p = 0.65f;                         /* 0.4 + 0.3 = 0.7 >= 0.65 */
    CHECK_EQ_INT(reference(l4, 4, &p, prob), 2);
    CHECK_NEAR(prob[0], 4.0 / 7, 1e-6);
    CHECK_EQ_INT(check_distribution("top_p 4", l4, 4, &p, 100000), 2);
    p.top_p = 0.3f;                          /* the first alone reaches it */
    CHECK_EQ_INT(check_distribution("top_p 1", l4, 4, &p, 1000), 1);
    p.top_p = 1.0f;
    p.min_p = 0.4f;                          /* keep p >= 0.16 */
    CHECK_EQ_INT(reference(l4, 4, &p, prob), 3);
    CHECK_NEAR(prob[2], 0.2 / 0.9, 1e-6);
    CHECK_EQ_INT(check_distribution("min_p 4", l4, 4, &p, 100000), 3);
    p.min_p = 2.0f;                          /* above 1: only the best */
    CHECK_EQ_INT(check_distribution("min_p 2", l4, 4, &p, 1000), 1);
    p = plain(0.5f);                         /* temperature: p ~ prob^2 */
    CHECK_EQ_INT(reference(l4, 4, &p, prob), 4);
    CHECK_NEAR(prob[0], 0.16 / 0.30, 1e-6);
    check_distribution("temp 4", l4, 4, &p, 100000);
    p = plain(1.0f);
    p.top_k = 2;
    CHECK_EQ_INT(check_distribution("top_k 4", l4, 4, &p, 100000), 2);

    enum { V = 300 };
    static float l[V];
    random_logits(l, V, 6);
    l[17] = l[18] = l[smp_argmax(l, V)];     /* ties at the top */
    struct { const char *name; float temp; int k; float top_p, min_p; } cfg[] = {
        { "plain", 1.0f, 0, 1.0f, 0.0f },
        { "temp 0.6 top_k 7", 0.6f, 7, 1.0f, 0.0f },
        { "top_k 299", 1.0f, 299, 1.0f, 0.0f },
        { "top_p 0.8", 1.0f, 0, 0.8f, 0.0f },
        { "min_p 0.05", 1.0f, 0, 1.0f, 0.05f },
        { "top_p 0.9 min_p 0.02", 1.2f, 0, 0.9f, 0.02f },
        { "top_k 20 top_p 0.9 min_p 0.05 temp 1.3", 1.3f, 20, 0.9f, 0.05f },
        { "top_k 40 top_p 0.5", 0.8f, 40, 0.5f, 0.0f },
        { "top_p 0", 1.0f, 0, 0.0f, 0.0f },
    };
    for (size_t i = 0; i < ARRAY_LEN(cfg); i++) {
        p = plain(cfg[i].temp);
        p.top_k = cfg[i].k;
        p.top_p = cfg[i].top_p;
        p.min_p = cfg[i].min_p;
        p.seed = 77 + i;
        check_distribution(cfg[i].name, l, V, &p, 100000);
    }
}

/* How many tokens the drawn distribution holds (post_probs lists them). */
static int kept_count(const float *l, int V, smp_params p)
{
    p.post_probs = true;
    smp_ctx *s = make(&p, V, 0);
    smp_logprob top[16];
    smp_sample(s, l, top, V, NULL);
    smp_free(s);
    int n = 0;
    for (int i = 0; i < V; i++) n += top[i].id >= 0;
    return n;
}

/* Top-p's cut is llama.cpp's, to the last bit: the normalizer a float sum
 * (id order without top-k, sorted order with it), the running sum of the
 * float probabilities compared with >=.  top_p set to the running sum after
 * the two best keeps exactly two; one ulp above it keeps three.  Min-p
 * keeps a logit equal to its threshold. */
static void test_cut_boundaries(void)
{
    enum { V = 6 };
    const float l[V] = { 1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f };   /* order 1 3 5 0 2 4 */
    const int order[V] = { 1, 3, 5, 0, 2, 4 };
    for (int with_k = 0; with_k < 2; with_k++) {
        float M = l[1], z = 0;
        for (int i = 0; i < V; i++) z += expf(l[with_k ? order[i] : i] - M);
        float cum2 = expf(l[1] - M) / z;
        cum2 += expf(l[3] - M) / z;
        smp_params p = plain(1.0f);
        p.top_k = with_k ? V : 0;
        p.top_p = cum2;
        CHECK_EQ_INT(kept_count(l, V, p), 2);
        p.top_p = nextafterf(cum2, 0.0f);
        CHECK_EQ_INT(kept_count(l, V, p), 2);
        p.top_p = nextafterf(cum2, 1.0f);
        CHECK_EQ_INT(kept_count(l, V, p), 3);
        /* The cut with the sum in double would miss by an ulp somewhere
         * here; the sums as floats must be what the sampler compares. */
        float cum3 = cum2 + expf(l[5] - M) / z;
        p.top_p = cum3;
        CHECK_EQ_INT(kept_count(l, V, p), 3);
        p.top_p = nextafterf(cum3, 1.0f);
        CHECK_EQ_INT(kept_count(l, V, p), 4);
    }
    /* Min-p: l >= max + logf(min_p), the threshold itself kept, sorted or
     * not. */
    float lm[V] = { 1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f };
    smp_params p = plain(1.0f);
    p.min_p = 0.5f;
    lm[5] = 2.5f + logf(0.5f);
    CHECK_EQ_INT(kept_count(lm, V, p), 3);                  /* 1, 3, 5 */
    lm[5] = nextafterf(lm[5], -INFINITY);
    CHECK_EQ_INT(kept_count(lm, V, p), 2);
    p.top_k = 4;
    CHECK_EQ_INT(kept_count(lm, V, p), 2);
    lm[5] = 2.5f + logf(0.5f);
    CHECK_EQ_INT(kept_count(lm, V, p), 3);
}

/* min_keep (llama.cpp's): top-p and min-p keep at least that many, the best
 * ones, with or without top-k before them; 0 and 1 are no floor. */
static void test_min_keep(void)
{
    enum { V = 6 };
    const float l[V] = { 1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f };
    for (int with_k = 0; with_k < 2; with_k++) {
        smp_params p = plain(1.0f);
        p.top_k = with_k ? 5 : 0;
        p.top_p = 0.3f;                      /* the best alone reaches it */
        CHECK_EQ_INT(kept_count(l, V, p), 1);
        p.min_keep = 1;
        CHECK_EQ_INT(kept_count(l, V, p), 1);
        p.min_keep = 3;
        CHECK_EQ_INT(kept_count(l, V, p), 3);
        p.min_keep = 9;                      /* more than there are: all (top-k's 5) */
        CHECK_EQ_INT(kept_count(l, V, p), with_k ? 5 : V);
        p = plain(1.0f);
        p.top_k = with_k ? 5 : 0;
        p.min_p = 0.9f;                      /* the best alone passes */
        CHECK_EQ_INT(kept_count(l, V, p), 1);
        p.min_keep = 4;
        CHECK_EQ_INT(kept_count(l, V, p), 4);
        p.min_p = 2.0f;                      /* none passes: the floor still holds */
        p.min_keep = 2;
        CHECK_EQ_INT(kept_count(l, V, p), 2);
        p.top_p = 0.3f;
        p.min_p = 0.9f;
        p.min_keep = 3;
        CHECK_EQ_INT(kept_count(l, V, p), 3);
    }
    smp_params bad = plain(1.0f);
    bad.min_keep = -1;
    smp_ctx *s = NULL;
    CHECK_EQ_INT(smp_new(&bad, V, 0, &s), PK_EINVAL);
    CHECK(!smp_params_valid(&bad));
}

/* The draw, token for token against its definition with the RNG of mt.h:
 * x = logit / temp in float, weights expf(x - max) in float summed in
 * double, the first running sum >= sum * u, in sorted order after top-k /
 * top-p and in id order otherwise.  The order matters: the same u picks
 * different tokens from the same weights in another order. */
static int32_t draw_by_hand(const float *l, const int *ids, int n, float temp, double u)
{
    float x[16], mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        x[i] = l[ids[i]] / temp;
        mx = x[i] > mx ? x[i] : mx;
    }
    double sum = 0, w[16];
    for (int i = 0; i < n; i++) sum += w[i] = expf(x[i] - mx);
    double target = sum * u, run = 0;
    for (int i = 0; i < n; i++) {
        run += w[i];
        if (run >= target) return ids[i];
    }
    return ids[n - 1];
}

static void test_draw_by_hand(void)
{
    enum { V = 6, N = 20000 };
    const float l[V] = { 1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f };
    const int sorted[V] = { 1, 3, 5, 0, 2, 4 }, by_id[V] = { 0, 1, 2, 3, 4, 5 };
    for (int sort = 0; sort < 2; sort++) {
        smp_params p = plain(0.7f);
        p.top_k = sort ? V : 0;             /* top-k over all: sorted, nothing cut */
        p.seed = 42;
        smp_ctx *s = make(&p, V, 0);
        mt19937 mt;
        mt_seed(&mt, 42);
        int same = 0, other_order = 0;
        for (int i = 0; i < N; i++) {
            double u = mt_uniform(&mt);
            int32_t t = smp_sample(s, l, NULL, 0, NULL);
            same += t == draw_by_hand(l, sort ? sorted : by_id, V, 0.7f, u);
            other_order += t == draw_by_hand(l, sort ? by_id : sorted, V, 0.7f, u);
        }
        CHECK_EQ_INT(same, N);
        CHECK(other_order < N * 9 / 10);
        smp_free(s);
    }
}

/* Top-p without top-k orders only the tokens within 20 of the best unless
 * the far tail matters.  In float a tail token 21 below the best is under
 * half an ulp of a running sum near 1, so it can never end the cut; but it
 * can keep the sum from reaching top_p, and then every token is kept, as in
 * llama.cpp.  Here the tail comes first in id order, so the normalizer
 * holds its mass (1 + 1.2e-7), the winner alone stays under 1 - 6e-8 and
 * nothing ever reaches it.  A high temperature makes the tail visible. */
static void test_top_p_tail(void)
{
    enum { V = 301 };
    float l[V];
    double prob[V];
    for (int i = 0; i < V - 1; i++) l[i] = (float)(-21.0 - t_uniform());
    l[V - 1] = 0.0f;
    smp_params p = plain(100.0f);
    p.top_p = 0.99999994f;                   /* the float below 1 */
    int kept = reference(l, V, &p, prob);
    CHECK_EQ_INT(kept, V);
    int seen = check_distribution("top_p tail", l, V, &p, 100000);
    CHECK_EQ_INT(seen, kept);
    /* The winner first: the tail's mass is lost in the sum's rounding and
     * the winner alone reaches top_p. */
    l[0] = 0.0f;
    l[V - 1] = -21.5f;
    CHECK_EQ_INT(reference(l, V, &p, prob), 1);
    CHECK_EQ_INT(check_distribution("top_p tail first", l, V, &p, 1000), 1);
}

/* Log-probs of the penalized logits: read back with n_top = V. */
static void penalized(smp_ctx *s, const float *l, int V, double *out)
{
    smp_logprob top[16];
    smp_sample(s, l, top, V, NULL);
    for (int i = 0; i < V; i++) out[top[i].id] = top[i].logprob;
}

/* Expected log-softmax of the given penalized logits. */
static void log_softmax(const float *l, int V, double *out)
{
    double m = l[0], z = 0;
    for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - m);
    for (int i = 0; i < V; i++) out[i] = (double)l[i] - m - log(z);
}

static int same_logprobs(const double *got, const float *want_logits, int V)
{
    double want[16];
    log_softmax(want_logits, V, want);
    int bad = 0;
    for (int i = 0; i < V; i++)
        if (fabs(got[i] - want[i]) > 1e-5) {
            bad++;
            fprintf(stderr, "token %d: logprob %.7f want %.7f\n", i, got[i], want[i]);
        }
    return bad;
}

static void test_penalties(void)
{
    enum { V = 8 };
    const float l[V] = { 2.0f, -1.0f, 0.0f, 3.0f, 1.5f, -2.5f, 0.5f, 2.9f };
    double got[V];

    /* Repeat penalty: positive logits divided, negative multiplied. */
    smp_params p = plain(0);
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 64;
    smp_ctx *s = make(&p, V, 64);
    smp_accept(s, 0);
    smp_accept(s, 1);
    smp_accept(s, 2);
    smp_accept(s, 3);
    smp_accept(s, 3);
    smp_accept(s, 99);                       /* out of range: ignored */
    smp_accept(s, -1);
    penalized(s, l, V, got);
    float w1[V] = { 2.0f / 1.5f, -1.0f * 1.5f, 0.0f, 3.0f / 1.5f, 1.5f, -2.5f, 0.5f, 2.9f };
    CHECK_EQ_INT(same_logprobs(got, w1, V), 0);
    /* Greedy follows the penalized logits: 3 fell below 7. */
    CHECK_EQ_INT(smp_sample(s, l, NULL, 0, NULL), 7);
    smp_reset(s);                            /* forgets the history */
    penalized(s, l, V, got);
    CHECK_EQ_INT(same_logprobs(got, l, V), 0);
    CHECK_EQ_INT(smp_sample(s, l, NULL, 0, NULL), 3);
    smp_free(s);

    /* Frequency and presence: subtract count * f + present. */
    p = plain(0);
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.penalty_last_n = 64;
    s = make(&p, V, 64);
    int32_t h[] = { 4, 6, 4, 4, 5 };
    for (size_t i = 0; i < ARRAY_LEN(h); i++) smp_accept(s, h[i]);
    penalized(s, l, V, got);
    float w2[V] = { 2.0f, -1.0f, 0.0f, 3.0f, 1.5f - 0.75f - 0.5f, -2.5f - 0.25f - 0.5f, 0.5f - 0.25f - 0.5f, 2.9f };
    CHECK_EQ_INT(same_logprobs(got, w2, V), 0);
    smp_free(s);

    /* All three together, and the window: only the last 3 of 6 count. */
    p = plain(0);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.2f;
    p.penalty_last_n = 3;
    s = make(&p, V, 100);
    int32_t h3[] = { 0, 0, 3, 1, 1, 7 };     /* window: 1, 1, 7 */
    for (size_t i = 0; i < ARRAY_LEN(h3); i++) smp_accept(s, h3[i]);
    penalized(s, l, V, got);
    float w3[V] = { 2.0f, -1.0f * 2.0f - 0.2f - 0.2f, 0.0f, 3.0f, 1.5f, -2.5f, 0.5f, 2.9f / 2.0f - 0.1f - 0.2f };
    CHECK_EQ_INT(same_logprobs(got, w3, V), 0);
    smp_free(s);

    /* -1: every remembered token, bounded by history_max (a ring). */
    p.penalty_last_n = -1;
    s = make(&p, V, 4);
    int32_t h4[] = { 3, 3, 0, 6, 6, 6 };     /* ring keeps 0, 6, 6, 6 */
    for (size_t i = 0; i < ARRAY_LEN(h4); i++) smp_accept(s, h4[i]);
    penalized(s, l, V, got);
    float w4[V] = { 2.0f / 2.0f - 0.1f - 0.2f, -1.0f, 0.0f, 3.0f, 1.5f, -2.5f, 0.5f / 2.0f - 0.3f - 0.2f, 2.9f };
    CHECK_EQ_INT(same_logprobs(got, w4, V), 0);
    smp_free(s);

    /* last_n larger than history_max is capped by it; 0 turns it all off. */
    p.penalty_last_n = 1000;
    s = make(&p, V, 4);
    for (size_t i = 0; i < ARRAY_LEN(h4); i++) smp_accept(s, h4[i]);
    penalized(s, l, V, got);
    CHECK_EQ_INT(same_logprobs(got, w4, V), 0);
    smp_free(s);
    p.penalty_last_n = 0;
    s = make(&p, V, 4);
    for (size_t i = 0; i < ARRAY_LEN(h4); i++) smp_accept(s, h4[i]);
    penalized(s, l, V, got);
    CHECK_EQ_INT(same_logprobs(got, l, V), 0);
    smp_free(s);

    /* Penalties shape the sampled distribution too, and logits are not
     * modified. */
    p = plain(1.0f);
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.penalty_last_n = 8;
    s = make(&p, V, 8);
    smp_accept(s, 3);
    smp_accept(s, 7);
    float copy[V];
    memcpy(copy, l, sizeof(copy));
    smp_sample(s, copy, NULL, 0, NULL);
    CHECK(memcmp(copy, l, sizeof(copy)) == 0);
    smp_free(s);
    float pl[V];
    memcpy(pl, l, sizeof(pl));
    pl[3] = 3.0f / 1.3f - 0.4f;
    pl[7] = 2.9f / 1.3f - 0.4f;
    /* check_distribution has no history, so feed it the penalized logits;
     * the ctx above must produce the same stream for the same seed. */
    smp_params q = p;
    q.repeat_penalty = 1.0f;
    q.presence_penalty = 0.0f;
    smp_ctx *a = make(&p, V, 8), *b = make(&q, V, 8);
    smp_accept(a, 3);
    smp_accept(a, 7);
    int same = 0;
    for (int i = 0; i < 5000; i++) same += smp_sample(a, l, NULL, 0, NULL) == smp_sample(b, pl, NULL, 0, NULL);
    CHECK_EQ_INT(same, 5000);
    smp_free(a);
    smp_free(b);
}

static void test_logprobs(void)
{
    enum { V = 1000 };
    static float l[V];
    static smp_logprob top[V + 3];
    random_logits(l, V, 8);
    l[10] = l[11] = 20.0f;                   /* tie at the top */
    l[500] = -INFINITY;                      /* masked */
    smp_params p = plain(0.7f);
    p.top_k = 3;
    smp_ctx *s = make(&p, V, 0);
    float chosen = 0;
    int32_t t = smp_sample(s, l, top, V + 3, &chosen);
    double sum = 0;
    int ordered = 1, found = 0;
    for (int i = 0; i < V; i++) {
        sum += exp((double)top[i].logprob);
        if (i > 0 && top[i].logprob > top[i - 1].logprob) ordered = 0;
        if (top[i].id == t) { found = 1; CHECK_NEAR(top[i].logprob, chosen, 1e-7); }
    }
    CHECK_NEAR(sum, 1.0, 1e-5);
    CHECK(ordered);
    CHECK(found);
    CHECK_EQ_INT(top[0].id, 10);
    CHECK_EQ_INT(top[1].id, 11);
    CHECK_EQ_INT(top[V - 1].id, 500);
    CHECK(isinf(top[V - 1].logprob) && top[V - 1].logprob < 0);
    CHECK_EQ_INT(top[V].id, -1);
    CHECK_EQ_INT(top[V + 2].id, -1);
    CHECK(t == 10 || t == 11 || t == top[2].id);

    /* Log-probs ignore truncation and temperature: greedy reports the same,
     * and a short list is the head of the long one. */
    smp_params g = plain(0);
    smp_ctx *sg = make(&g, V, 0);
    smp_logprob few[5];
    float cg = 0;
    CHECK_EQ_INT(smp_sample(sg, l, few, 5, &cg), 10);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= few[i].id == top[i].id && few[i].logprob == top[i].logprob;
    CHECK(same);
    CHECK_NEAR(cg, few[0].logprob, 0);
    smp_sample(sg, l, NULL, 0, NULL);        /* both outputs optional */
    smp_free(s);
    smp_free(sg);

    /* Exact values on a small case. */
    float l3[3] = { 0.0f, logf(3.0f), -INFINITY };
    smp_ctx *s3 = make(&g, 3, 0);
    smp_logprob t3[3];
    smp_sample(s3, l3, t3, 3, NULL);
    CHECK_EQ_INT(t3[0].id, 1);
    CHECK_NEAR(t3[0].logprob, log(0.75), 1e-6);
    CHECK_NEAR(t3[1].logprob, log(0.25), 1e-6);
    smp_free(s3);
}

/* A real-size vocabulary: correctness of the heap paths against the
 * reference, then timings. */
static void test_large_vocab(void)
{
    enum { V = 152064 };
    float *l = malloc((size_t)V * sizeof(float));
    /* Spread like a model's logits: top-p 0.95 keeps a few thousand. */
    random_logits(l, V, 30);
    smp_params p = smp_default_params();
    p.seed = 5;
    check_distribution("default 152k", l, V, &p, 2000);
    p.top_k = 0;                             /* heap-popped top-p, min-p */
    check_distribution("top_p min_p 152k", l, V, &p, 1000);
    p.min_p = 0;
    check_distribution("top_p 152k", l, V, &p, 1000);
    p.top_p = 1.0f;
    p.min_p = 1e-30f;                        /* min-p alone, nearly all kept */
    check_distribution("min_p tiny 152k", l, V, &p, 500);

    struct { const char *name; float temp; int k; float top_p, min_p; int n_top; } cfg[] = {
        { "greedy", 0.0f, 0, 1.0f, 0.0f, 0 },
        { "greedy + 5 logprobs", 0.0f, 0, 1.0f, 0.0f, 5 },
        { "default (k40 p.95 min.05)", 0.8f, 40, 0.95f, 0.05f, 0 },
        { "top_p .95 min_p .05", 0.8f, 0, 0.95f, 0.05f, 0 },
        { "top_p .95", 0.8f, 0, 0.95f, 0.0f, 0 },
        { "temp only", 0.8f, 0, 1.0f, 0.0f, 0 },
    };
    for (size_t i = 0; i < ARRAY_LEN(cfg); i++) {
        p = plain(cfg[i].temp);
        p.top_k = cfg[i].k;
        p.top_p = cfg[i].top_p;
        p.min_p = cfg[i].min_p;
        p.repeat_penalty = 1.1f;
        smp_ctx *s = make(&p, V, 256);
        for (int j = 0; j < 64; j++) smp_accept(s, j * 97);
        smp_logprob top[5];
        int reps = 20;
        double t0 = pk_time_ms();
        for (int r = 0; r < reps; r++) smp_sample(s, l, top, cfg[i].n_top, NULL);
        printf("152k vocab, %-28s %8.1f us/sample\n", cfg[i].name, (pk_time_ms() - t0) * 1000 / reps);
        smp_free(s);
    }
    free(l);
}

/* post_probs: the reported distribution is the one drawn from: top-k 3
 * keeps three tokens whose probabilities (temperature applied) sum to 1,
 * the chosen token is among them with its own, and greedy reports 1. */
static void test_post_probs(void)
{
    float l[8] = { 1.0f, 3.0f, 2.0f, 0.5f, -1.0f, 2.5f, 0.0f, -2.0f };
    smp_params p = smp_default_params();
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 0.5f;
    p.seed = 7;
    p.post_probs = true;
    smp_ctx *s;
    CHECK_EQ_INT(smp_new(&p, 8, 16, &s), PK_OK);
    for (int rep = 0; rep < 20; rep++) {
        smp_logprob top[5];
        float lp;
        int32_t tok = smp_sample(s, l, top, 5, &lp);
        CHECK(tok == 1 || tok == 5 || tok == 2);
        CHECK_EQ_INT(top[0].id, 1);
        CHECK_EQ_INT(top[1].id, 5);
        CHECK_EQ_INT(top[2].id, 2);
        CHECK_EQ_INT(top[3].id, -1);
        /* softmax of {3, 2.5, 2} / 0.5 */
        double z = exp(0.0) + exp(-1.0) + exp(-2.0);
        CHECK_NEAR(exp(top[0].logprob), 1.0 / z, 1e-6);
        CHECK_NEAR(exp(top[2].logprob), exp(-2.0) / z, 1e-6);
        double sum = 0;
        for (int i = 0; i < 3; i++) sum += exp(top[i].logprob);
        CHECK_NEAR(sum, 1.0, 1e-6);
        for (int i = 0; i < 3; i++)
            if (top[i].id == tok) CHECK_NEAR(lp, top[i].logprob, 1e-6);
    }
    smp_free(s);
    p.temp = 0;
    CHECK_EQ_INT(smp_new(&p, 8, 16, &s), PK_OK);
    smp_logprob top[2];
    float lp;
    CHECK_EQ_INT(smp_sample(s, l, top, 2, &lp), 1);
    CHECK_NEAR(lp, 0.0, 0);
    CHECK_EQ_INT(top[0].id, 1);
    CHECK_EQ_INT(top[1].id, -1);
    smp_free(s);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_post_probs);
    TEST_RUN(test_params);
    TEST_RUN(test_argmax);
    TEST_RUN(test_determinism);
    TEST_RUN(test_greedy_limits);
    TEST_RUN(test_filters);
    TEST_RUN(test_top_p_tail);
    TEST_RUN(test_cut_boundaries);
    TEST_RUN(test_min_keep);
    TEST_RUN(test_draw_by_hand);
    TEST_RUN(test_penalties);
    TEST_RUN(test_logprobs);
    TEST_RUN(test_large_vocab);
    return test_finish();
}
