/*
 * test_gdn.c - the gated delta rule (src/model/gdn.h):
 *   - gdn_serial equals the rule computed in double from its definition
 *     (the state as S[d_k][d_v], not the transposed layout), outputs and
 *     final state within 1e-5 of their largest magnitude;
 *   - gdn_chunked equals gdn_serial within 1e-4, for runs shorter than a
 *     block, exactly one, one more, and several, and on a state carried
 *     from an earlier run;
 *   - the speed of both on a 512-token prompt of a 128 x 128 head (printed:
 *     docs/benchmarks.md keeps the number).
 * Each case runs alone by name: test_gdn [case].
 */
#include <stdint.h>
#include <time.h>

#include "../src/common/pk.h"
#include "../src/model/gdn.h"
#include "test.h"

/* xorshift64*: the inputs of each case from its own seed. */
static float rng_f(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 24);
}

typedef struct run {
    int n, dk, dv;
    float *q, *k, *v, *g, *beta, *M0;
} run;

static void normalize(float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / sqrt(s + 1e-12));
}

/* Inputs as a model makes them: unit q and k, g = -exp(a) softplus(x)
 * (decays between about 0.2 and 1 a token), beta = sigmoid(y). */
static run make_run(uint64_t *rng, int n, int dk, int dv)
{
    run r = { .n = n, .dk = dk, .dv = dv };
    r.q = malloc(sizeof(float) * (size_t)n * dk);
    r.k = malloc(sizeof(float) * (size_t)n * dk);
    r.v = malloc(sizeof(float) * (size_t)n * dv);
    r.g = malloc(sizeof(float) * (size_t)n);
    r.beta = malloc(sizeof(float) * (size_t)n);
    r.M0 = malloc(sizeof(float) * (size_t)dk * dv);
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < dk; i++) r.q[(size_t)t * dk + i] = rng_f(rng) * 2 - 1;
        for (int i = 0; i < dk; i++) r.k[(size_t)t * dk + i] = rng_f(rng) * 2 - 1;
        for (int j = 0; j < dv; j++) r.v[(size_t)t * dv + j] = rng_f(rng) * 2 - 1;
        normalize(r.q + (size_t)t * dk, dk);
        normalize(r.k + (size_t)t * dk, dk);
        double a = rng_f(rng) * 2 - 1, sp = log1p(exp(rng_f(rng) * 4 - 2));
        r.g[t] = (float)(-exp(a) * sp);
        r.beta[t] = (float)(1 / (1 + exp(-(rng_f(rng) * 6 - 3))));
    }
    for (size_t i = 0; i < (size_t)dk * dv; i++) r.M0[i] = (rng_f(rng) * 2 - 1) * 0.5f;
    return r;
}

static void free_run(run *r)
{
    free(r->q), free(r->k), free(r->v), free(r->g), free(r->beta), free(r->M0);
}

static gdn_in input(const run *r)
{
    return (gdn_in){ .n = r->n, .d_k = r->dk, .d_v = r->dv, .q = r->q, .k = r->k, .v = r->v, .g = r->g,
                     .beta = r->beta, .q_stride = (size_t)r->dk, .k_stride = (size_t)r->dk,
                     .v_stride = (size_t)r->dv };
}

/* The rule from its definition, in double, S[i][j] = M0[j][i]. */
static void reference(const run *r, double *S, double *o)
{
    const int dk = r->dk, dv = r->dv;
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) S[(size_t)i * dv + j] = r->M0[(size_t)j * dk + i];
    double *u = malloc(sizeof(double) * (size_t)dv);
    for (int t = 0; t < r->n; t++) {
        const float *q = r->q + (size_t)t * dk, *k = r->k + (size_t)t * dk, *v = r->v + (size_t)t * dv;
        double decay = exp((double)r->g[t]);
        for (size_t x = 0; x < (size_t)dk * dv; x++) S[x] *= decay;
        for (int j = 0; j < dv; j++) {
            double read = 0;
            for (int i = 0; i < dk; i++) read += S[(size_t)i * dv + j] * k[i];
            u[j] = r->beta[t] * (v[j] - read);
        }
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) S[(size_t)i * dv + j] += k[i] * u[j];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += S[(size_t)i * dv + j] * q[i];
            o[(size_t)t * dv + j] = s / sqrt((double)dk);
        }
    }
    free(u);
}

static double max_abs_d(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void test_serial(void)
{
    uint64_t rng = 1;
    static const int shapes[][3] = { { 1, 16, 16 }, { 7, 16, 32 }, { 130, 32, 32 }, { 70, 128, 128 } };
    for (size_t c = 0; c < ARRAY_LEN(shapes); c++) {
        run r = make_run(&rng, shapes[c][0], shapes[c][1], shapes[c][2]);
        size_t ns = (size_t)r.dk * r.dv, no = (size_t)r.n * r.dv;
        double *S = malloc(sizeof(double) * ns), *oref = malloc(sizeof(double) * no);
        float *M = malloc(sizeof(float) * ns), *o = malloc(sizeof(float) * no);
        reference(&r, S, oref);
        memcpy(M, r.M0, sizeof(float) * ns);
        gdn_in x = input(&r);
        gdn_serial(&x, M, o, (size_t)r.dv);
        double do_ = 0, ds = 0;
        for (size_t i = 0; i < no; i++) do_ = fmax(do_, fabs(o[i] - oref[i]));
        for (int i = 0; i < r.dk; i++)
            for (int j = 0; j < r.dv; j++)
                ds = fmax(ds, fabs(M[(size_t)j * r.dk + i] - S[(size_t)i * r.dv + j]));
        CHECK_NEAR(do_, 0, 1e-5 * fmax(1, max_abs_d(oref, no)));
        CHECK_NEAR(ds, 0, 1e-5 * fmax(1, max_abs_d(S, ns)));
        free(S), free(oref), free(M), free(o);
        free_run(&r);
    }
}

/* Chunked against serial, from the same state; then a second run carries
 * each one's state on, as a prompt after a cached prefix does. */
static void test_chunked(void)
{
    uint64_t rng = 2;
    static const int shapes[][3] = { { 1, 16, 16 },  { 5, 32, 16 },    { 64, 32, 32 },
                                     { 65, 32, 32 }, { 200, 128, 128 }, { 129, 16, 48 } };
    for (size_t c = 0; c < ARRAY_LEN(shapes); c++) {
        run r = make_run(&rng, shapes[c][0], shapes[c][1], shapes[c][2]);
        size_t ns = (size_t)r.dk * r.dv, no = (size_t)r.n * r.dv;
        float *Ms = malloc(sizeof(float) * ns), *Mc = malloc(sizeof(float) * ns);
        float *os = malloc(sizeof(float) * no), *oc = malloc(sizeof(float) * no);
        float *scr = malloc(sizeof(float) * gdn_scratch_floats(r.dk, r.dv));
        memcpy(Ms, r.M0, sizeof(float) * ns);
        memcpy(Mc, r.M0, sizeof(float) * ns);
        gdn_in x = input(&r);
        for (int pass = 0; pass < 2; pass++) {
            gdn_serial(&x, Ms, os, (size_t)r.dv);
            gdn_chunked(&x, Mc, oc, (size_t)r.dv, scr);
            double mo = 0, dmax = 0, ms = 0, dsmax = 0;
            for (size_t i = 0; i < no; i++) mo = fmax(mo, fabs(os[i])), dmax = fmax(dmax, fabs(os[i] - oc[i]));
            for (size_t i = 0; i < ns; i++) ms = fmax(ms, fabs(Ms[i])), dsmax = fmax(dsmax, fabs(Ms[i] - Mc[i]));
            if (dmax > 1e-4 * fmax(mo, 1) || dsmax > 1e-4 * fmax(ms, 1))
                fprintf(stderr, "n %d dk %d dv %d pass %d: output diff %.3g (max %.3g), state diff %.3g (max %.3g)\n",
                        r.n, r.dk, r.dv, pass, dmax, mo, dsmax, ms);
            CHECK(dmax <= 1e-4 * fmax(mo, 1));
            CHECK(dsmax <= 1e-4 * fmax(ms, 1));
        }
        free(Ms), free(Mc), free(os), free(oc), free(scr);
        free_run(&r);
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_speed(void)
{
    uint64_t rng = 3;
    run r = make_run(&rng, 512, 128, 128);
    size_t ns = (size_t)r.dk * r.dv, no = (size_t)r.n * r.dv;
    float *M = malloc(sizeof(float) * ns), *o = malloc(sizeof(float) * no);
    float *scr = malloc(sizeof(float) * gdn_scratch_floats(r.dk, r.dv));
    gdn_in x = input(&r);
    double best_s = 1e30, best_c = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        memcpy(M, r.M0, sizeof(float) * ns);
        double t0 = now_ms();
        gdn_serial(&x, M, o, (size_t)r.dv);
        best_s = fmin(best_s, now_ms() - t0);
        memcpy(M, r.M0, sizeof(float) * ns);
        t0 = now_ms();
        gdn_chunked(&x, M, o, (size_t)r.dv, scr);
        best_c = fmin(best_c, now_ms() - t0);
    }
    printf("gdn: 512 tokens, one 128 x 128 head: serial %.2f ms, chunked %.2f ms (%.2fx)\n", best_s, best_c,
           best_s / best_c);
    CHECK(best_s > 0 && best_c > 0);
    free(M), free(o), free(scr);
    free_run(&r);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_serial);
    TEST_RUN(test_chunked);
    TEST_RUN(test_speed);
    return test_finish();
}
