/*
 * model_gemma.c - Gemma 4's layers (the 31B's layout, E2B / E4B's and the
 * 26B-A4B's experts) over a chunk.
 *
 * DESIGN
 *   Per layer, with n() an RMSNorm times the named weight (Gemma 4 stores
 *   the weights themselves, no 1 + w):
 *
 *     q = rope(n_q(Wq n_attn(x)))  k = rope(n_k(Wk n_attn(x)))
 *     v = n1(Wv n_attn(x))   (n1: no weight; without Wv, V is K's projection)
 *     x += n_post_attn(Wo attn(q, k, v))      (K.Q scaled by 1, not 1/sqrt(d))
 *     x += n_post_ffw(Wd (gelu_tanh(Wg n_ffn(x)) * Wu n_ffn(x)))
 *          (26B-A4B's MoE layers: x += n_post_ffw(n_post_1(that FFN) +
 *           n_post_2(experts(n_pre_2(x)))), the experts routed by
 *           Wr (n1(x) / sqrt(n_embd) * router_scale): model_moe.c)
 *     x += n_post(Wproj (gelu(Wgate x) * p_l))  (E2B / E4B: p_l below)
 *     x *= layer_output_scale                  (when the file has it)
 *
 *   A layer is a sliding-window one (window hp.n_swa, its own head size,
 *   KV heads, rotated dims and RoPE base, the second half of a token's
 *   RoPE row) or a global one (head_dim_k, n_head_kv, rope_freqs).  The
 *   embeddings are scaled by sqrt(n_embd) and the logits soft-capped in
 *   model_forward.c, which runs the rest of the pass.
 *
 *   E2B / E4B give each layer l an input p_l of its own, made once per
 *   token before the layers from the token's row of per_layer_token_embd
 *   (E_l, w wide) and the scaled embedding x0:
 *
 *     p_l = (n_proj((P x0 / sqrt(n_embd))_l) + sqrt(w) E_l[token]) / sqrt(2)
 *
 *   and their last layers (kv_reuse) compute Q only, attending over the
 *   cells an earlier layer of their type wrote (kv_layer).
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
    /* E2B / E4B: the chunk's tokens [n_ubatch] and per-layer inputs
     * [n_ubatch][n_layer][w], the gates [n_ubatch][w], and each thread's
     * token row of per_layer_token_embd [n_threads][n_layer * w] */
    int32_t *tok;
    float *pl_in, *pl_gate, *pl_row;
    /* 26B-A4B: the dense MLP's output and the router's input [n_ubatch][n_embd] */
    float *mlp, *xr;
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

void gm_geglu(const float *g, const float *u, float *h, int n)
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
    free(c->gm->tok);
    free(c->gm->pl_in);
    free(c->gm->pl_gate);
    free(c->gm->pl_row);
    free(c->gm->mlp);
    free(c->gm->xr);
    free(c->gm);
    c->gm = NULL;
}

pk_status gm_ctx_new(model_ctx *c)
{
    const model_hparams *hp = &c->m->hp;
    pthread_once(&gelu_once, gelu_init);
    if (!(c->gm = calloc(1, sizeof *c->gm))) return PK_ENOMEM;
    /* V's norm and the router input's (n_embd wide) have no weight */
    const int n1 = MAX(MAX(hp->head_dim_k, hp->head_dim_swa), hp->n_embd);
    if (!(c->gm->ones = fwd_alloc((size_t)n1 * sizeof(float)))) return PK_ENOMEM;
    for (int i = 0; i < n1; i++) c->gm->ones[i] = 1.0f;
    const size_t w = (size_t)hp->n_embd_per_layer, nub = (size_t)c->p.n_ubatch, fl = sizeof(float);
    const size_t E = (size_t)hp->n_embd;
    if (hp->n_expert &&
        (!(c->gm->mlp = fwd_alloc(nub * E * fl)) || !(c->gm->xr = fwd_alloc(nub * E * fl))))
        return PK_ENOMEM;
    if (w && (!(c->gm->tok = fwd_alloc(nub * sizeof(int32_t))) ||
              !(c->gm->pl_in = fwd_alloc(nub * hp->n_layer * w * fl)) ||
              !(c->gm->pl_gate = fwd_alloc(nub * w * fl)) ||
              !(c->gm->pl_row = fwd_alloc((size_t)c->p.n_threads * hp->n_layer * w * fl))))
        return PK_ENOMEM;
    return PK_OK;
}

void gm_token(model_ctx *c, int i, int32_t token)
{
    if (c->gm->tok) c->gm->tok[i] = token;
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

/* Token t's RoPE row for layer L's type. */
static const float *rope_row(const model_ctx *c, const model_layer *L, int t)
{
    const model_hparams *hp = &c->m->hp;
    return c->rope + (size_t)t * (hp->n_rot + hp->n_rot_swa) + (L->swa ? hp->n_rot : 0);
}

/* Token t's Q: its norm and RoPE. */
static void q_finish(model_ctx *c, const model_layer *L, fwd_attn_dims d, int t)
{
    const model_hparams *hp = &c->m->hp;
    const int hd = d.hd_k, nq = hp->n_head, n_rot = L->swa ? hp->n_rot_swa : hp->n_rot;
    const float *cs = rope_row(c, L, t);
    float *q = c->q + (size_t)t * nq * hd;
    for (int h = 0; h < nq; h++) {
        c->ops->rms_norm(q + h * hd, NULL, L->q_norm.data, q + h * hd, hd, hp->rms_eps);
        fwd_rope_head(q + h * hd, cs, n_rot, hp->rope_type);
    }
}

/* Token t's K and V: norms, RoPE, into its cell of the layer's cache. */
static void kv_finish(model_ctx *c, const model_layer *L, fwd_attn_dims d, int t)
{
    const model_hparams *hp = &c->m->hp;
    const int hd = d.hd_k, nk = d.n_head_kv, n_rot = L->swa ? hp->n_rot_swa : hp->n_rot;
    const float *cs = rope_row(c, L, t);
    float *k = c->k + (size_t)t * nk * hd, *v = c->v + (size_t)t * nk * hd;
    const float *vin = L->wv.data ? v : k;   /* V from K's projection, before K's norm */
    for (int h = 0; h < nk; h++)
        c->ops->rms_norm((float *)vin + h * hd, NULL, c->gm->ones, v + h * hd, hd, hp->rms_eps);
    for (int h = 0; h < nk; h++) {
        c->ops->rms_norm(k + h * hd, NULL, L->k_norm.data, k + h * hd, hd, hp->rms_eps);
        fwd_rope_head(k + h * hd, cs, n_rot, hp->rope_type);
    }
    fwd_kv_store_n(c, L->kv_layer, t, k, nk * hd, v, nk * hd);
}

/* The per-layer inputs of the chunk's T tokens (p_l in DESIGN) from the
 * scaled embeddings in c->x; this thread finishes tokens [t0, t1).  Each
 * scale is rounded on its own and the norm runs per layer, as in the
 * reference. */
static void per_layer_inputs(model_ctx *c, int ith, int nth, int T, int64_t t0, int64_t t1)
{
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const int w = hp->n_embd_per_layer, n = hp->n_layer * w;
    const float s_proj = 1.0f / sqrtf((float)hp->n_embd), s_tok = sqrtf((float)w), s_sum = 1.0f / sqrtf(2.0f);
    float *row = c->gm->pl_row + (size_t)ith * n;
    fwd_matmul(ith, nth, c, &m->pl_model_proj, c->x, T, c->gm->pl_in);
    for (int64_t t = t0; t < t1; t++) {
        float *p = c->gm->pl_in + t * n;
        tq_dequantize_row_at(m->pl_tok_embd.type, m->pl_tok_embd.data, c->gm->tok[t], m->pl_tok_embd.n_rows, n, row);
        for (int i = 0; i < n; i++) p[i] *= s_proj;
        for (int il = 0; il < hp->n_layer; il++)
            c->ops->rms_norm(p + il * w, NULL, m->pl_proj_norm.data, p + il * w, w, hp->rms_eps);
        for (int i = 0; i < n; i++) p[i] = (p[i] + row[i] * s_tok) * s_sum;
    }
}

/* x += n_post(Wproj (gelu(Wgate x) * p_l)) over the chunk: starts with a
 * barrier (the gate reads every token's x) and leaves rows [t0, t1) of x
 * to this thread. */
static void per_layer_mix(model_ctx *c, int ith, int nth, const model_layer *L, int il, int T, int64_t t0,
                          int64_t t1)
{
    const model_hparams *hp = &c->m->hp;
    const int w = hp->n_embd_per_layer, E = hp->n_embd;
    float *g = c->gm->pl_gate;
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->pl_gate, c->x, T, g);
    for (int64_t t = t0; t < t1; t++)
        gm_geglu(g + t * w, c->gm->pl_in + ((size_t)t * hp->n_layer + il) * w, g + t * w, w);
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->pl_proj, g, T, c->tmp);
    for (int64_t t = t0; t < t1; t++) {
        float *o = c->tmp + t * E, *xt = c->x + t * E;
        c->ops->rms_norm(o, NULL, L->pl_post_norm.data, o, E, hp->rms_eps);
        for (int i = 0; i < E; i++) xt[i] += o[i];
    }
}

/* x += n_post_attn(Wo attn) over the chunk, and the FFN's normed input
 * into xn.  A kv_reuse layer computes Q alone. */
static void attention_block(model_ctx *c, int ith, int nth, const model_layer *L, int T, int64_t t0, int64_t t1)
{
    const model_hparams *hp = &c->m->hp;
    const int E = hp->n_embd;
    const fwd_attn_dims d = layer_dims(hp, L);
    float *x = c->x, *xn = c->xn;

    for (int64_t t = t0; t < t1; t++)
        c->ops->rms_norm(x + t * E, NULL, L->attn_norm.data, xn + t * E, E, hp->rms_eps);
    tp_barrier(c->tp);
    const model_w *qkv_w[3] = { &L->wq, &L->wk, &L->wv };
    float *qkv_y[3] = { c->q, c->k, c->v };
    fwd_matmul_set(ith, nth, c, qkv_w, qkv_y, L->kv_reuse ? 1 : L->wv.data ? 3 : 2, xn, T);
    for (int64_t t = t0; t < t1; t++) {
        q_finish(c, L, d, (int)t);
        if (!L->kv_reuse) kv_finish(c, L, d, (int)t);
    }
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
}

/* x += n_post_ffw(FFN(xn)) over the chunk, at the layer's own width (E2B's
 * shared layers are twice as wide). */
static void ffn_block(model_ctx *c, int ith, int nth, const model_layer *L, int T, int64_t t0, int64_t t1)
{
    const model_hparams *hp = &c->m->hp;
    const int E = hp->n_embd, F = (int)L->w_gate.n_rows;
    const model_w *gu_w[2] = { &L->w_gate, &L->w_up };
    float *gu_y[2] = { c->gate, c->up };
    fwd_matmul_set(ith, nth, c, gu_w, gu_y, 2, c->xn, T);
    for (int64_t t = t0; t < t1; t++) gm_geglu(c->gate + t * F, c->up + t * F, c->gate + t * F, F);
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->w_down, c->gate, T, c->tmp);
    for (int64_t t = t0; t < t1; t++) {
        float *o = c->tmp + t * E, *xt = c->x + t * E;
        c->ops->rms_norm(o, NULL, L->ffn_post_norm.data, o, E, hp->rms_eps);
        for (int i = 0; i < E; i++) xt[i] += o[i];
    }
}

/* The 26B-A4B's FFN over the chunk: the dense MLP of xn (kept as a
 * shared expert) beside the experts of x's second pre-norm, routed from
 * x's plain norm scaled; x += n_post_ffw(their post-normed sum).  The
 * router's input is rounded after each step, as the reference's norm,
 * scale and product are. */
static void moe_block(model_ctx *c, int ith, int nth, const model_layer *L, int T, int64_t t0, int64_t t1)
{
    const model_hparams *hp = &c->m->hp;
    const int E = hp->n_embd, F = (int)L->w_gate.n_rows;
    float *mlp = c->gm->mlp, *xr = c->gm->xr;
    const float *rs = L->moe_router_s.data, s_embd = 1.0f / sqrtf((float)E);
    const model_w *gu_w[2] = { &L->w_gate, &L->w_up };
    float *gu_y[2] = { c->gate, c->up };
    fwd_matmul_set(ith, nth, c, gu_w, gu_y, 2, c->xn, T);
    for (int64_t t = t0; t < t1; t++) gm_geglu(c->gate + t * F, c->up + t * F, c->gate + t * F, F);
    tp_barrier(c->tp);   /* every thread is past its products of xn too */
    fwd_matmul(ith, nth, c, &L->w_down, c->gate, T, mlp);
    for (int64_t t = t0; t < t1; t++) {
        const float *xt = c->x + t * E;
        float *r = xr + t * E;
        c->ops->rms_norm(mlp + t * E, NULL, L->ffn_post_norm_1.data, mlp + t * E, E, hp->rms_eps);
        c->ops->rms_norm((float *)xt, NULL, L->ffn_pre_norm_2.data, c->xn + t * E, E, hp->rms_eps);
        c->ops->rms_norm((float *)xt, NULL, c->gm->ones, r, E, hp->rms_eps);
        for (int i = 0; i < E; i++) r[i] *= s_embd;
        for (int i = 0; i < E; i++) r[i] *= rs[i];
    }
    tp_barrier(c->tp);
    fwd_moe(c, ith, nth, L, T, c->xn, xr);
    for (int64_t t = t0; t < t1; t++) {
        float *o = c->tmp + t * E, *m = mlp + t * E, *xt = c->x + t * E;
        c->ops->rms_norm(o, NULL, L->ffn_post_norm_2.data, o, E, hp->rms_eps);
        c->ops->rms_norm(m, o, L->ffn_post_norm.data, o, E, hp->rms_eps);
        for (int i = 0; i < E; i++) xt[i] += o[i];
    }
}

void gm_layers_job(int ith, int nth, void *arg)
{
    const fwd_job *j = arg;
    model_ctx *c = j->c;
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const int T = j->n_tok, E = hp->n_embd;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);

    if (hp->n_embd_per_layer) per_layer_inputs(c, ith, nth, T, t0, t1);
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        attention_block(c, ith, nth, L, T, t0, t1);
        if (L->moe_router.data) moe_block(c, ith, nth, L, T, t0, t1);
        else ffn_block(c, ith, nth, L, T, t0, t1);
        if (hp->n_embd_per_layer) per_layer_mix(c, ith, nth, L, il, T, t0, t1);
        if (L->out_scale.data) {   /* the next norm reads only this thread's tokens */
            const float s = *(const float *)L->out_scale.data;
            for (int64_t t = t0; t < t1; t++)
                for (int i = 0; i < E; i++) c->x[t * E + i] *= s;
        }
    }
}
