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
 * and the output accumulators (head dim 8: a chunk of K and V laid out by
 * dimension and each row's softmax state); the reference one row's scores. */
size_t tk_attn_scratch_size(void)
{
    return 64 + sizeof(float) * (size_t)(2 * TK_ATTN_MAX_DIM * TK_ATTN_ROWS + 2 * 64 * TK_ATTN_MAX_DIM
                                        + 64 * TK_ATTN_ROWS + TK_ATTN_MAX_DIM);
}

bool tk_kv_type_ok(tq_type type)
{
    switch (type) {
    case TQ_F32: case TQ_F16: case TQ_BF16:
    case TQ_Q8_0: case TQ_Q4_0: case TQ_Q4_1: case TQ_Q5_0: case TQ_Q5_1: case TQ_IQ4_NL:
        return true;
    default:
        return false;
    }
}

/* The reference engine converts the query to K's vec_dot_type before its
 * K.Q product (its flash attention for the block formats, its matrix
 * product for F16 and BF16): rounding it the same way here keeps scores
 * on its values.  (Q8_1, Q4_1 / Q5_1's activation type, has Q8_0's values.) */
void tk_attn_round_query(tq_type type_k, float *q, int n)
{
    switch (type_k) {
    case TQ_F32:
        break;
    case TQ_F16:
        for (int d = 0; d < n; d++) q[d] = tq_f16_to_f32(tq_f32_to_f16(q[d]));
        break;
    case TQ_BF16:
        for (int d = 0; d < n; d++) q[d] = tq_bf16_to_f32(tq_f32_to_bf16(q[d]));
        break;
    default: {
        tq_block_q8_0 b;
        ASSERT(n % TQ_QK8_0 == 0);
        for (int d = 0; d < n; d += TQ_QK8_0) {
            tq_quant_q8_0(q + d, &b, TQ_QK8_0);
            float s = tq_f16_to_f32(b.d);
            for (int j = 0; j < TQ_QK8_0; j++) q[d + j] = s * b.qs[j];
        }
    }
    }
}

static void kv_row(const tk_attn *a, bool v, int j, float *out)
{
    const char *base = v ? a->v : a->k;
    size_t stride = v ? a->v_stride : a->k_stride;
    tq_dequantize_row(v ? a->type_v : a->type_k, base + (size_t)a->cells[j] * stride, out, v ? a->hd_v : a->hd_k);
}

/* One row at a time, over the cells: max, then exp(s - max) summed in
 * double, then the weighted sum of V. */
void tk_attend_ref(const tk_attn *a, void *scratch)
{
    float *q = scratch;                      /* [hd_k] the (rounded) query */
    float *kr = q + TK_ATTN_MAX_DIM, *vr = kr + TK_ATTN_MAX_DIM;
    ASSERT(a->n_q <= TK_ATTN_ROWS && a->hd_k <= TK_ATTN_MAX_DIM && a->hd_v <= TK_ATTN_MAX_DIM);
    for (int i = 0; i < a->n_q; i++) {
        float *out = a->out + (size_t)i * a->hd_v;
        memcpy(q, a->q + (size_t)i * a->hd_k, (size_t)a->hd_k * sizeof *q);
        tk_attn_round_query(a->type_k, q, a->hd_k);
        const int n = a->n_kv[i], j0 = a->kv0 ? a->kv0[i] : 0;
        float mx = -INFINITY;
        for (int j = j0; j < n; j++) {
            kv_row(a, false, j, kr);
            double s = 0;
            for (int d = 0; d < a->hd_k; d++) s += (double)kr[d] * q[d];
            mx = fmaxf(mx, (float)s * a->scale);
        }
        if (a->sink) mx = fmaxf(mx, a->sink[i]);
        double sum = 0;
        for (int d = 0; d < a->hd_v; d++) out[d] = 0;
        for (int j = j0; j < n; j++) {
            kv_row(a, false, j, kr);
            kv_row(a, true, j, vr);
            double s = 0;
            for (int d = 0; d < a->hd_k; d++) s += (double)kr[d] * q[d];
            float p = expf((float)s * a->scale - mx);
            sum += p;
            for (int d = 0; d < a->hd_v; d++) out[d] += p * vr[d];
        }
        if (a->sink) sum += expf(a->sink[i] - mx);
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
        memcpy(q + (size_t)i * hk, a->q + (size_t)i * hk, (size_t)hk * sizeof *q);
        tk_attn_round_query(a->type_k, q + (size_t)i * hk, hk);
        mx[i] = -INFINITY;
        sum[i] = 0;
        for (int d = 0; d < hv; d++) a->out[(size_t)i * hv + d] = 0;
        n_all = a->n_kv[i] > n_all ? a->n_kv[i] : n_all;
    }
    const bool keep = (size_t)n_all * nq <= room;
    for (int j = 0; j < n_all; j++) {
        kv_row(a, false, j, kr);
        for (int i = 0; i < nq; i++) {
            if (j >= a->n_kv[i] || (a->kv0 && j < a->kv0[i])) continue;
            double s = 0;
            for (int d = 0; d < hk; d++) s += (double)kr[d] * q[(size_t)i * hk + d];
            float x = (float)s * a->scale;
            if (keep) sc[(size_t)j * nq + i] = x;
            mx[i] = fmaxf(mx[i], x);
        }
    }
    for (int i = 0; a->sink && i < nq; i++) mx[i] = fmaxf(mx[i], a->sink[i]);
    for (int j = 0; j < n_all; j++) {
        if (!keep) kv_row(a, false, j, kr);
        kv_row(a, true, j, vr);
        for (int i = 0; i < nq; i++) {
            if (j >= a->n_kv[i] || (a->kv0 && j < a->kv0[i])) continue;
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
        if (a->sink) sum[i] += expf(a->sink[i] - mx[i]);
        float inv = (float)(1.0 / sum[i]);
        for (int d = 0; d < hv; d++) a->out[(size_t)i * hv + d] *= inv;
    }
}
