/*
 * gdn.c - the gated delta rule, serial and chunked (gdn.h).
 */
#include <math.h>
#include <string.h>

#include "gdn.h"

static float dot(const float *a, const float *b, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void gdn_serial(const gdn_in *x, float *M, float *o, size_t o_stride)
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
            for (int i = 0; i < dk; i++) m[i] *= decay;
            const float u = (v[j] - dot(m, k, dk)) * beta;
            for (int i = 0; i < dk; i++) m[i] += u * k[i];
            ot[j] = dot(m, q, dk) * scale;
        }
    }
}

/* Scratch, per block of C = GDN_CHUNK tokens:
 *   G [C]        decays accumulated inside the block
 *   A [C][C]     the strictly lower system, then tril(Q K^T . D)
 *   U [C][d_v]   the corrections
 *   P [C][d_v]   Q S0 (the block's reads of the state it started from) */
size_t gdn_scratch_floats(int d_k, int d_v)
{
    (void)d_k;
    return (size_t)GDN_CHUNK * (1 + GDN_CHUNK + 2 * (size_t)d_v);
}

/* One block of c tokens starting at token t0. */
static void block(const gdn_in *x, int t0, int c, float *M, float *o, size_t o_stride, float *scr)
{
    const int dk = x->d_k, dv = x->d_v;
    const float scale = 1.0f / sqrtf((float)dk);
    float *G = scr, *A = G + GDN_CHUNK, *U = A + GDN_CHUNK * GDN_CHUNK, *P = U + (size_t)GDN_CHUNK * dv;
#define Q_(t) (x->q + (size_t)(t0 + (t)) * x->q_stride)
#define K_(t) (x->k + (size_t)(t0 + (t)) * x->k_stride)
#define V_(t) (x->v + (size_t)(t0 + (t)) * x->v_stride)
    float acc = 0;
    for (int t = 0; t < c; t++) G[t] = acc += x->g[t0 + t];

    /* U = diag(beta) V - diag(beta exp(G)) K S0, and P = Q S0: one pass
     * over the state's rows for both. */
    for (int t = 0; t < c; t++) {
        const float b = x->beta[t0 + t], bd = b * expf(G[t]);
        const float *k = K_(t), *q = Q_(t), *v = V_(t);
        float *u = U + (size_t)t * dv, *p = P + (size_t)t * dv;
        for (int j = 0; j < dv; j++) {
            const float *m = M + (size_t)j * dk;
            u[j] = b * v[j] - bd * dot(m, k, dk);
            p[j] = dot(m, q, dk);
        }
    }
    /* Forward substitution of (I + A) U = RHS, A[t][s] = beta_t
     * exp(G_t - G_s) (k_t . k_s), row by row. */
    for (int t = 1; t < c; t++) {
        float *ut = U + (size_t)t * dv;
        const float b = x->beta[t0 + t];
        for (int s = 0; s < t; s++) {
            const float a = b * expf(G[t] - G[s]) * dot(K_(t), K_(s), dk);
            const float *us = U + (size_t)s * dv;
            for (int j = 0; j < dv; j++) ut[j] -= a * us[j];
        }
    }
    /* O = scale (diag(exp(G)) P + tril(Q K^T . D) U). */
    for (int t = 0; t < c; t++) {
        float *ot = o + (size_t)(t0 + t) * o_stride;
        const float e = expf(G[t]);
        const float *p = P + (size_t)t * dv;
        for (int j = 0; j < dv; j++) ot[j] = e * p[j];
        for (int s = 0; s <= t; s++) {
            const float w = expf(G[t] - G[s]) * dot(Q_(t), K_(s), dk);
            const float *us = U + (size_t)s * dv;
            for (int j = 0; j < dv; j++) ot[j] += w * us[j];
        }
        for (int j = 0; j < dv; j++) ot[j] *= scale;
    }
    /* S = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T, in M's layout:
     * M[j][i] = exp(G_C) M[j][i] + sum_s w_s u_s[j] k_s[i]. */
    const float eC = expf(G[c - 1]);
    for (int s = 0; s < c; s++) A[s] = expf(G[c - 1] - G[s]);
    for (int j = 0; j < dv; j++) {
        float *m = M + (size_t)j * dk;
        for (int i = 0; i < dk; i++) m[i] *= eC;
        for (int s = 0; s < c; s++) {
            const float w = A[s] * U[(size_t)s * dv + j];
            const float *k = K_(s);
            for (int i = 0; i < dk; i++) m[i] += w * k[i];
        }
    }
#undef Q_
#undef K_
#undef V_
}

void gdn_chunked(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch)
{
    for (int t0 = 0; t0 < x->n; t0 += GDN_CHUNK) {
        int c = x->n - t0 < GDN_CHUNK ? x->n - t0 : GDN_CHUNK;
        block(x, t0, c, M, o, o_stride, scratch);
    }
}
