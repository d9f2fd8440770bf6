/*
 * tk_scalar.c - the scalar kernel table: tq_impl.h's reference routines
 * behind tk.h's function pointers, plus the reference attention, RMSNorm
 * and SwiGLU.  Every supported weight type gets a vec_dot and every
 * activation type a quantizer, so this table is complete and the SIMD
 * tables can fall back to it entry by entry.
 */
#include "tk_impl.h"
#include "tq_impl.h"

#include <math.h>

/* The reference engine's RMSNorm: squares summed in double, the scale in
 * float, then the weight. */
static void rms_norm_ref(float *x, const float *d, const float *w, float *y, int n, float eps)
{
    if (d)
        for (int i = 0; i < n; i++) x[i] += d[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float mean = (float)(sum / n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

static void swiglu_ref(const float *g, const float *u, float *h, int n)
{
    for (int i = 0; i < n; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void tk_fill_scalar(tk_ops *o)
{
    o->vec_dot[TQ_F32]  = tq_dot_f32;
    o->vec_dot[TQ_F16]  = tq_dot_f16;
    o->vec_dot[TQ_BF16] = tq_dot_bf16;
    o->vec_dot[TQ_Q4_0] = tq_dot_q4_0;
    o->vec_dot[TQ_Q4_1] = tq_dot_q4_1;
    o->vec_dot[TQ_Q5_0] = tq_dot_q5_0;
    o->vec_dot[TQ_Q5_1] = tq_dot_q5_1;
    o->vec_dot[TQ_Q8_0] = tq_dot_q8_0;
    o->vec_dot[TQ_Q2_K] = tq_dot_q2_K;
    o->vec_dot[TQ_Q3_K] = tq_dot_q3_K;
    o->vec_dot[TQ_Q4_K] = tq_dot_q4_K;
    o->vec_dot[TQ_Q5_K] = tq_dot_q5_K;
    o->vec_dot[TQ_Q6_K] = tq_dot_q6_K;
    o->vec_dot[TQ_IQ4_NL] = tq_dot_iq4_nl;
    o->vec_dot[TQ_IQ4_XS] = tq_dot_iq4_xs;
    o->vec_dot[TQ_MXFP4] = tq_dot_mxfp4;
    o->vec_dot[TQ_IQ2_XXS] = tq_dot_iq2_xxs;
    o->vec_dot[TQ_IQ2_XS] = tq_dot_iq2_xs;
    o->vec_dot[TQ_IQ2_S] = tq_dot_iq2_s;
    o->vec_dot[TQ_IQ3_XXS] = tq_dot_iq3_xxs;
    o->vec_dot[TQ_IQ3_S] = tq_dot_iq3_s;
    o->vec_dot[TQ_IQ1_S] = tq_dot_iq1_s;
    o->vec_dot[TQ_IQ1_M] = tq_dot_iq1_m;

    o->quantize[TQ_F32]  = tq_quant_f32;
    o->quantize[TQ_F16]  = tq_quant_f16;
    o->quantize[TQ_BF16] = tq_quant_bf16;
    o->quantize[TQ_Q8_0] = tq_quant_q8_0;
    o->quantize[TQ_Q8_K] = tq_quant_q8_K;
    o->attend = tk_attend_rows;
    o->rms_norm = rms_norm_ref;
    o->swiglu = swiglu_ref;
}

/* Every implementation's scratch fits this: the SIMD kernels keep the
 * transposed queries, a block of converted K and V rows, the block's scores
 * and the output accumulators; the reference one row's scores. */
size_t tk_attn_scratch_size(void)
{
    return 64 + sizeof(float) * (size_t)(2 * TK_ATTN_MAX_DIM * TK_ATTN_ROWS + 2 * 64 * TK_ATTN_MAX_DIM
                                        + 64 * TK_ATTN_ROWS + TK_ATTN_MAX_DIM);
}

static float kv_value(const void *row, int d, tq_type type)
{
    return type == TQ_F16 ? tq_f16_to_f32(((const tq_f16 *)row)[d]) : ((const float *)row)[d];
}

/* One row at a time, over the cells in blocks of 64 scores: max, then
 * exp(s - max) summed in double, then the weighted sum of V. */
void tk_attend_ref(const tk_attn *a, void *scratch)
{
    float *q = scratch;                      /* [hd_k] the (rounded) query */
    ASSERT(a->n_q <= TK_ATTN_ROWS && a->hd_k <= TK_ATTN_MAX_DIM && a->hd_v <= TK_ATTN_MAX_DIM);
    for (int i = 0; i < a->n_q; i++) {
        const float *qi = a->q + (size_t)i * a->hd_k;
        float *out = a->out + (size_t)i * a->hd_v;
        for (int d = 0; d < a->hd_k; d++) q[d] = a->kv_type == TQ_F16 ? tq_f16_to_f32(tq_f32_to_f16(qi[d])) : qi[d];
        const int n = a->n_kv[i];
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const char *kr = (const char *)a->k + (size_t)a->cells[j] * a->k_stride;
            double s = 0;
            for (int d = 0; d < a->hd_k; d++) s += (double)kv_value(kr, d, a->kv_type) * q[d];
            mx = fmaxf(mx, (float)s * a->scale);
        }
        double sum = 0;
        for (int d = 0; d < a->hd_v; d++) out[d] = 0;
        for (int j = 0; j < n; j++) {
            const char *kr = (const char *)a->k + (size_t)a->cells[j] * a->k_stride;
            const char *vr = (const char *)a->v + (size_t)a->cells[j] * a->v_stride;
            double s = 0;
            for (int d = 0; d < a->hd_k; d++) s += (double)kv_value(kr, d, a->kv_type) * q[d];
            float p = expf((float)s * a->scale - mx);
            sum += p;
            for (int d = 0; d < a->hd_v; d++) out[d] += p * kv_value(vr, d, a->kv_type);
        }
        float inv = (float)(1.0 / sum);
        for (int d = 0; d < a->hd_v; d++) out[d] *= inv;
    }
}

/* tk_attend_ref's sums in another loop order: the cells outside, so each K
 * and V row is converted once for every row that sees it (the rows of a
 * GQA group, or the tokens a step verifies), where the reference converts
 * it per row and per pass.  Each row's sums run over the same cells in the
 * same order with the same operations: the same bits.  The kernel for head
 * dimensions the SIMD ones do not take (stories260K's 8). */
void tk_attend_rows(const tk_attn *a, void *scratch)
{
    const int nq = a->n_q, hk = a->hd_k, hv = a->hd_v;
    ASSERT(nq <= TK_ATTN_ROWS && hk <= TK_ATTN_MAX_DIM && hv <= TK_ATTN_MAX_DIM);
    float *q = scratch;                      /* [nq][hk] the (rounded) queries */
    float *kr = q + (size_t)nq * hk, *vr = kr + hk;
    /* The scaled scores of the first pass, [n_all][nq], kept for the second
     * when they fit in the scratch (a slot of 1,000-odd cells), else
     * computed again as the reference does: the same value either way. */
    float *sc = vr + hv;
    size_t room = (tk_attn_scratch_size() - 64) / sizeof(float) - (size_t)(sc - q);
    float mx[TK_ATTN_ROWS];
    double sum[TK_ATTN_ROWS];
    int n_all = 0;
    for (int i = 0; i < nq; i++) {
        for (int d = 0; d < hk; d++) {
            float x = a->q[(size_t)i * hk + d];
            q[(size_t)i * hk + d] = a->kv_type == TQ_F16 ? tq_f16_to_f32(tq_f32_to_f16(x)) : x;
        }
        mx[i] = -INFINITY;
        sum[i] = 0;
        for (int d = 0; d < hv; d++) a->out[(size_t)i * hv + d] = 0;
        n_all = a->n_kv[i] > n_all ? a->n_kv[i] : n_all;
    }
    const bool keep = (size_t)n_all * nq <= room;
    for (int j = 0; j < n_all; j++) {
        const char *k = (const char *)a->k + (size_t)a->cells[j] * a->k_stride;
        for (int d = 0; d < hk; d++) kr[d] = kv_value(k, d, a->kv_type);
        for (int i = 0; i < nq; i++) {
            if (j >= a->n_kv[i]) continue;
            double s = 0;
            for (int d = 0; d < hk; d++) s += (double)kr[d] * q[(size_t)i * hk + d];
            float x = (float)s * a->scale;
            if (keep) sc[(size_t)j * nq + i] = x;
            mx[i] = fmaxf(mx[i], x);
        }
    }
    for (int j = 0; j < n_all; j++) {
        const char *k = (const char *)a->k + (size_t)a->cells[j] * a->k_stride;
        const char *v = (const char *)a->v + (size_t)a->cells[j] * a->v_stride;
        if (!keep)
            for (int d = 0; d < hk; d++) kr[d] = kv_value(k, d, a->kv_type);
        for (int d = 0; d < hv; d++) vr[d] = kv_value(v, d, a->kv_type);
        for (int i = 0; i < nq; i++) {
            if (j >= a->n_kv[i]) continue;
            float x;
            if (keep) {
                x = sc[(size_t)j * nq + i];
            } else {
                double s = 0;
                for (int d = 0; d < hk; d++) s += (double)kr[d] * q[(size_t)i * hk + d];
                x = (float)s * a->scale;
            }
            float p = expf(x - mx[i]);
            sum[i] += p;
            float *out = a->out + (size_t)i * hv;
            for (int d = 0; d < hv; d++) out[d] += p * vr[d];
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = (float)(1.0 / sum[i]);
        for (int d = 0; d < hv; d++) a->out[(size_t)i * hv + d] *= inv;
    }
}
