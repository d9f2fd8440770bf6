/*
 * model_gemma.c - Gemma 4's dense layers (the 31B's layout) over a chunk.
 *
 * DESIGN
 *   Per layer, with n() an RMSNorm times the named weight (Gemma 4 stores
 *   the weights themselves, no 1 + w):
 *
 *     q = rope(n_q(Wq n_attn(x)))  k = rope(n_k(Wk n_attn(x)))
 *     v = n1(Wv n_attn(x))   (n1: no weight; without Wv, V is K's projection)
 *     x += n_post_attn(Wo attn(q, k, v))      (K.Q scaled by 1, not 1/sqrt(d))
 *     x += n_post_ffw(Wd (gelu_tanh(Wg n_ffn(x)) * Wu n_ffn(x)))
 *     x *= layer_output_scale                  (when the file has it)
 *
 *   A layer is a sliding-window one (window hp.n_swa, its own head size,
 *   KV heads, rotated dims and RoPE base, the second half of a token's
 *   RoPE row) or a global one (head_dim_k, n_head_kv, rope_freqs).  The
 *   embeddings are scaled by sqrt(n_embd) and the logits soft-capped in
 *   model_forward.c, which runs the rest of the pass.
 *
 *   Every thread takes its slice of each phase, as layers_job does with
 *   more tokens than TK_PRIVATE_TOKENS, and the threads meet at a barrier
 *   after every step whose result others read.
 *
 *   GELU is the reference engine's: its input rounded to F16 and looked
 *   up in a table of F16 results of the tanh formula (exact beyond +-10),
 *   so the products match it bit for bit.
 */
#include "model_fwd.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct gm_ctx {
    float *ones;         /* [max head size]: the weight of V's plain norm */
};

static uint16_t gelu_tab[1 << 16];   /* F16 x -> F16 gelu(x); written once, then read-only */
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_init(void)
{
    for (int i = 0; i < 1 << 16; i++) {
        float f = tq_f16_to_f32((tq_f16)i);
        float y = 0.5f * f * (1.0f + tanhf(0.79788456080286535587989211986876f * f * (1.0f + 0.044715f * f * f)));
        gelu_tab[i] = tq_f32_to_f16(y);
    }
}

/* h = gelu(g) * u, the reference engine's GEGLU. */
static void geglu(const float *g, const float *u, float *h, int n)
{
    for (int i = 0; i < n; i++) {
        if (g[i] <= -10.0f) h[i] = 0.0f;
        else if (g[i] >= 10.0f) h[i] = g[i] * u[i];
        else h[i] = tq_f16_to_f32(gelu_tab[tq_f32_to_f16(g[i])]) * u[i];
    }
}

void gm_ctx_free(model_ctx *c)
{
    if (!c->gm) return;
    free(c->gm->ones);
    free(c->gm);
    c->gm = NULL;
}

pk_status gm_ctx_new(model_ctx *c)
{
    const model_hparams *hp = &c->m->hp;
    pthread_once(&gelu_once, gelu_init);
    if (!(c->gm = calloc(1, sizeof *c->gm))) return PK_ENOMEM;
    const int hd = MAX(hp->head_dim_k, hp->head_dim_swa);
    if (!(c->gm->ones = fwd_alloc((size_t)hd * sizeof(float)))) return PK_ENOMEM;
    for (int i = 0; i < hd; i++) c->gm->ones[i] = 1.0f;
    return PK_OK;
}

void gm_rope_angles(const model *m, kv_pos pos, float *cs)
{
    const model_hparams *hp = &m->hp;
    fwd_rope_angles(hp, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale, m->rope_freqs.data, pos, cs);
    fwd_rope_angles(hp, hp->n_rot_swa, hp->rope_freq_base_swa, 1.0f, NULL, pos, cs + hp->n_rot);
}

/* The shape of layer L's attention. */
static fwd_attn_dims layer_dims(const model_hparams *hp, const model_layer *L)
{
    int hd = L->swa ? hp->head_dim_swa : hp->head_dim_k;
    return (fwd_attn_dims){ hd, hd, L->swa ? hp->n_head_kv_swa : hp->n_head_kv, 1.0f };
}

/* Token t's Q, K, V of layer il: norms, RoPE, K and V into its cell. */
static void qkv_finish(model_ctx *c, const model_layer *L, int il, fwd_attn_dims d, int t)
{
    const model_hparams *hp = &c->m->hp;
    const int hd = d.hd_k, nq = hp->n_head, nk = d.n_head_kv;
    const int n_rot = L->swa ? hp->n_rot_swa : hp->n_rot;
    const float *cs = c->rope + (size_t)t * (hp->n_rot + hp->n_rot_swa) + (L->swa ? hp->n_rot : 0);
    float *q = c->q + (size_t)t * nq * hd, *k = c->k + (size_t)t * nk * hd, *v = c->v + (size_t)t * nk * hd;
    const float *vin = L->wv.data ? v : k;   /* V from K's projection, before K's norm */
    for (int h = 0; h < nk; h++)
        c->ops->rms_norm((float *)vin + h * hd, NULL, c->gm->ones, v + h * hd, hd, hp->rms_eps);
    for (int h = 0; h < nk; h++) {
        c->ops->rms_norm(k + h * hd, NULL, L->k_norm.data, k + h * hd, hd, hp->rms_eps);
        fwd_rope_head(k + h * hd, cs, n_rot, hp->rope_type);
    }
    for (int h = 0; h < nq; h++) {
        c->ops->rms_norm(q + h * hd, NULL, L->q_norm.data, q + h * hd, hd, hp->rms_eps);
        fwd_rope_head(q + h * hd, cs, n_rot, hp->rope_type);
    }
    fwd_kv_store_n(c, L->kv_layer, t, k, nk * hd, v, nk * hd);
}

void gm_layers_job(int ith, int nth, void *arg)
{
    const fwd_job *j = arg;
    model_ctx *c = j->c;
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const int T = j->n_tok, E = hp->n_embd, F = hp->n_ff;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);
    float *x = c->x, *xn = c->xn;

    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const fwd_attn_dims d = layer_dims(hp, L);

        for (int64_t t = t0; t < t1; t++)
            c->ops->rms_norm(x + t * E, NULL, L->attn_norm.data, xn + t * E, E, hp->rms_eps);
        tp_barrier(c->tp);
        const model_w *qkv_w[3] = { &L->wq, &L->wk, &L->wv };
        float *qkv_y[3] = { c->q, c->k, c->v };
        fwd_matmul_set(ith, nth, c, qkv_w, qkv_y, L->wv.data ? 3 : 2, xn, T);
        for (int64_t t = t0; t < t1; t++) qkv_finish(c, L, il, d, (int)t);
        if (ith == 0) atomic_store_explicit(&c->attn_next, 0, memory_order_relaxed);
        tp_barrier(c->tp);

        fwd_attention(c, ith, L, L->kv_layer, d);
        tp_barrier(c->tp);

        fwd_matmul(ith, nth, c, &L->wo, c->att, T, c->tmp);
        for (int64_t t = t0; t < t1; t++) {   /* x += n_post(o), then the FFN's norm */
            float *o = c->tmp + t * E;
            c->ops->rms_norm(o, NULL, L->attn_post_norm.data, o, E, hp->rms_eps);
            c->ops->rms_norm(x + t * E, o, L->ffn_norm.data, xn + t * E, E, hp->rms_eps);
        }
        tp_barrier(c->tp);

        const model_w *gu_w[2] = { &L->w_gate, &L->w_up };
        float *gu_y[2] = { c->gate, c->up };
        fwd_matmul_set(ith, nth, c, gu_w, gu_y, 2, xn, T);
        for (int64_t t = t0; t < t1; t++) geglu(c->gate + t * F, c->up + t * F, c->gate + t * F, F);
        tp_barrier(c->tp);
        fwd_matmul(ith, nth, c, &L->w_down, c->gate, T, c->tmp);
        for (int64_t t = t0; t < t1; t++) {   /* the next norm reads only this thread's tokens */
            float *o = c->tmp + t * E, *xt = x + t * E;
            c->ops->rms_norm(o, NULL, L->ffn_post_norm.data, o, E, hp->rms_eps);
            for (int i = 0; i < E; i++) xt[i] += o[i];
            if (L->out_scale.data) {
                const float s = *(const float *)L->out_scale.data;
                for (int i = 0; i < E; i++) xt[i] *= s;
            }
        }
    }
}
