/*
 * gdn_body.h - the delta rule's loops (gdn.h), written once and compiled
 * once per instruction set: gdn.c (baseline x86-64), gdn_avx2.c,
 * gdn_avx512.c each include it with GDN_ISA set, and gdn.c picks the one
 * the matrix kernels use (tk_ops_get).
 *
 * The inner loops run over 16 independent lanes (dot products keep 16
 * partial sums, added in a fixed order at the end), which the compiler
 * turns into vector code without reordering any sum itself: the same
 * source gives the same result on every instruction set.
 */
#include <math.h>
#include <stddef.h>

#include "gdn.h"

#define GDN_CAT2(a, b) a##_##b
#define GDN_CAT(a, b) GDN_CAT2(a, b)
#define GDN_FN(name) GDN_CAT(name, GDN_ISA)
#define LANES 16

/* The lanes' sum, halving (8 + 8, 4 + 4, ...): vector adds, a fixed order. */
static inline float reduce(float *acc)
{
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* a . b; n a multiple of LANES or not */
static inline float dot(const float *restrict a, const float *restrict b, int n)
{
    float acc[LANES] = { 0 };
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = reduce(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a x */
static inline void axpy(float *restrict y, float a, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* m *= d, returning (m * d) . k: the decay and the state's read of k in
 * one pass over the row */
static inline float scale_dot(float *restrict m, float d, const float *restrict k, int n)
{
    float acc[LANES] = { 0 };
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            m[i + l] *= d;
            acc[l] += m[i + l] * k[i + l];
        }
    float s = reduce(acc);
    for (; i < n; i++) m[i] *= d, s += m[i] * k[i];
    return s;
}

/* m += u k, returning the new m . q */
static inline float axpy_dot(float *restrict m, float u, const float *restrict k, const float *restrict q, int n)
{
    float acc[LANES] = { 0 };
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            m[i + l] += u * k[i + l];
            acc[l] += m[i + l] * q[i + l];
        }
    float s = reduce(acc);
    for (; i < n; i++) m[i] += u * k[i], s += m[i] * q[i];
    return s;
}

void GDN_FN(gdn_serial)(const gdn_in *x, float *M, float *o, size_t o_stride)
{
    const int dk = x->d_k, dv = x->d_v;
    const float scale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < x->n; t++) {
        const float *q = x->q + (size_t)t * x->q_stride, *k = x->k + (size_t)t * x->k_stride;
        const float *v = x->v + (size_t)t * x->v_stride;
        const float decay = expf(x->g[t]), beta = x->beta[t];
        float *ot = o + (size_t)t * o_stride;
        for (int j = 0; j < dv; j++) {
            float *m = M + (size_t)j * dk;
            const float u = (v[j] - scale_dot(m, decay, k, dk)) * beta;
            ot[j] = axpy_dot(m, u, k, q, dk) * scale;
        }
    }
}

/* One block of c tokens starting at token t0 (gdn.h says the algebra;
 * scratch as gdn_scratch_floats lays it out). */
static void GDN_FN(block)(const gdn_in *x, int t0, int c, float *M, float *o, size_t o_stride, float *scr)
{
    const int dk = x->d_k, dv = x->d_v;
    const float scale = 1.0f / sqrtf((float)dk);
    float *G = scr, *A = G + GDN_CHUNK, *U = A + GDN_CHUNK * GDN_CHUNK, *P = U + (size_t)GDN_CHUNK * dv;
#define Q_(t) (x->q + (size_t)(t0 + (t)) * x->q_stride)
#define K_(t) (x->k + (size_t)(t0 + (t)) * x->k_stride)
#define V_(t) (x->v + (size_t)(t0 + (t)) * x->v_stride)
    float acc = 0, bg[GDN_CHUNK];
    for (int t = 0; t < c; t++) G[t] = acc += x->g[t0 + t];
    for (int t = 0; t < c; t++) bg[t] = x->beta[t0 + t] * expf(G[t]);

    /* U = diag(beta) V - diag(beta exp(G)) K S0 and P = Q S0, a row of
     * the state at a time (each row read once for the whole block) */
    for (int j = 0; j < dv; j++) {
        const float *m = M + (size_t)j * dk;
        for (int t = 0; t < c; t++) {
            U[(size_t)t * dv + j] = x->beta[t0 + t] * V_(t)[j] - bg[t] * dot(m, K_(t), dk);
            P[(size_t)t * dv + j] = dot(m, Q_(t), dk);
        }
    }
    /* forward substitution of (I + A) U = RHS, A[t][s] = beta_t
     * exp(G_t - G_s) (k_t . k_s), row by row */
    for (int t = 1; t < c; t++) {
        float *ut = U + (size_t)t * dv;
        const float b = x->beta[t0 + t];
        for (int s = 0; s < t; s++) axpy(ut, -b * expf(G[t] - G[s]) * dot(K_(t), K_(s), dk), U + (size_t)s * dv, dv);
    }
    /* O = scale (diag(exp(G)) P + tril(Q K^T . D) U) */
    for (int t = 0; t < c; t++) {
        float *ot = o + (size_t)(t0 + t) * o_stride;
        const float e = expf(G[t]);
        const float *p = P + (size_t)t * dv;
        for (int j = 0; j < dv; j++) ot[j] = e * p[j];
        for (int s = 0; s <= t; s++) axpy(ot, expf(G[t] - G[s]) * dot(Q_(t), K_(s), dk), U + (size_t)s * dv, dv);
        for (int j = 0; j < dv; j++) ot[j] *= scale;
    }
    /* S = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T, in M's layout:
     * M[j][i] = exp(G_C) M[j][i] + sum_s w_s u_s[j] k_s[i] */
    const float eC = expf(G[c - 1]);
    for (int s = 0; s < c; s++) A[s] = expf(G[c - 1] - G[s]);
    for (int j = 0; j < dv; j++) {
        float *m = M + (size_t)j * dk;
        for (int i = 0; i < dk; i++) m[i] *= eC;
        for (int s = 0; s < c; s++) axpy(m, A[s] * U[(size_t)s * dv + j], K_(s), dk);
    }
#undef Q_
#undef K_
#undef V_
}

void GDN_FN(gdn_chunked)(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch)
{
    for (int t0 = 0; t0 < x->n; t0 += GDN_CHUNK) {
        int c = x->n - t0 < GDN_CHUNK ? x->n - t0 : GDN_CHUNK;
        GDN_FN(block)(x, t0, c, M, o, o_stride, scratch);
    }
}
