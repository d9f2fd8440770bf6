/*
 * model_moe.c - the mixture-of-experts FFN, shared by every MoE
 * architecture (qwen3moe and gpt-oss in the llama family's pass, the
 * 26B-A4B in Gemma 4's, qwen35moe in the
 * hybrids').
 *
 * DESIGN
 *   The router's logits for the chunk's tokens (and the shared expert's
 *   gate, where there is one) in one phase; each token's k best experts
 *   by softmax, their weights renormalized to sum 1 (or, gpt-oss, the k
 *   best logits after the router's bias, weighted by a softmax over those
 *   k; its experts add their biases to each product and use the clamped
 *   SwiGLU).  A decode step (one
 *   token) runs its chosen experts' gate and up products 4 experts to a
 *   phase and reads only their rows.  A longer chunk groups its tokens by
 *   expert, so each chosen expert's three matrices are read once for all
 *   the tokens routed to it.  The outputs are weighted and added in the
 *   order the experts were chosen, then the shared expert's output times
 *   the sigmoid of its gate is added.
 *
 *   Gemma 4 (26B-A4B) routes from an input of its own (xr), stores each
 *   expert's gate and up as one matrix of 2 x n_ff_exp rows (gate first),
 *   uses GEGLU, and scales each expert's output by a factor of its own
 *   before the weighting, as the reference's down_exps_s does.
 *
 *   Numerics follow llama.cpp's build_moe_ffn: softmax summed in double,
 *   ties to the lower id, the weights' sum clamped at 2^-14 before the
 *   division.
 */
#include "model_fwd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct moe_ctx {
    float *rlog;        /* [nub][n_expert]     router logits */
    float *shg;         /* [nub]               shared expert gate logits */
    int32_t *sel;       /* [nub][k]            chosen experts, best first */
    float *selw;        /* [nub][k]            their weights */
    int32_t *ecount;    /* [n_expert] */
    int32_t *etok;      /* [n_expert][nub]     token * k + slot routed to each expert */
    float *xg;          /* [nub][n_embd]       one expert's inputs, gathered */
    float *eg, *eu, *eh;   /* [nub][n_ff_exp]; eg [nub][2 n_ff_exp]: a fused gate_up's rows */
    float *ey;          /* [nub][n_embd] */
    float *eout;        /* [nub][k][n_embd]    each slot's expert output */
};

void moe_ctx_free(model_ctx *c)
{
    struct moe_ctx *h = c->moe;
    if (!h) return;
    void *bufs[] = { h->rlog, h->shg, h->sel, h->selw, h->ecount, h->etok, h->xg, h->eg, h->eu, h->eh, h->ey,
                     h->eout };
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(h);
    c->moe = NULL;
}

pk_status moe_ctx_new(model_ctx *c)
{
    const model_hparams *hp = &c->m->hp;
    struct moe_ctx *h = calloc(1, sizeof *h);
    if (!h) return PK_ENOMEM;
    c->moe = h;
    const size_t nub = (size_t)c->p.n_ubatch, fl = sizeof(float), k = (size_t)hp->n_expert_used;
    const size_t nx = (size_t)hp->n_expert, ffe = (size_t)hp->n_ff_exp, E = (size_t)hp->n_embd;
    if (!(h->rlog = fwd_alloc(nub * nx * fl)) || !(h->shg = fwd_alloc(nub * fl)) ||
        !(h->sel = fwd_alloc(nub * k * sizeof(int32_t))) || !(h->selw = fwd_alloc(nub * k * fl)) ||
        !(h->ecount = fwd_alloc(nx * sizeof(int32_t))) || !(h->etok = fwd_alloc(nx * nub * sizeof(int32_t))) ||
        !(h->xg = fwd_alloc(nub * E * fl)) || !(h->eg = fwd_alloc(2 * nub * ffe * fl)) ||
        !(h->eu = fwd_alloc(nub * ffe * fl)) || !(h->eh = fwd_alloc(nub * ffe * fl)) ||
        !(h->ey = fwd_alloc(nub * E * fl)) || !(h->eout = fwd_alloc(nub * k * E * fl)))
        return PK_ENOMEM;
    return PK_OK;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* A stacked matrix's e-th matrix. */
static model_w slice(const model_w *w, int e)
{
    int64_t rows = w->n_rows / w->n_mat;
    return (model_w){ .type = w->type, .n_cols = w->n_cols, .n_rows = rows, .n_mat = 1,
                      .data = (const char *)w->data + (size_t)e * rows * tq_row_size(w->type, w->n_cols) };
}

/* The k best of p[n] (ties: the lower id) into sel, their values into w. */
static void top_k(const float *p, int n, int k, int32_t *sel, float *w)
{
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int r = 0; r < s; r++) taken = taken || sel[r] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[s] = best;
        w[s] = p[best];
    }
}

/* In place: softmax of x[n], the sum in double, scaled by its float
 * inverse (the reference's soft_max). */
static void softmax(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] = expf(x[i] - mx));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* The chosen experts and their weights from the router's logits (bias,
 * when the layer has one, added first). */
static void route(const model_hparams *hp, const model_layer *L, float *logit, int32_t *sel, float *w)
{
    const int n = hp->n_expert, k = hp->n_expert_used;
    if (L->moe_router_b.data)
        for (int e = 0; e < n; e++) logit[e] += ((const float *)L->moe_router_b.data)[e];
    if (hp->moe_gate == MODEL_GATE_TOPK_SOFTMAX) {
        top_k(logit, n, k, sel, w);
        softmax(w, k);
        return;
    }
    float mx = -INFINITY, p[4096];
    for (int e = 0; e < n; e++) mx = fmaxf(mx, logit[e]);
    double sum = 0;
    for (int e = 0; e < n; e++) sum += (double)(p[e] = expf(logit[e] - mx));
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n; e++) p[e] *= inv;
    top_k(p, n, k, sel, w);
    float ws = 0;
    for (int s = 0; s < k; s++) ws += w[s];
    ws = fmaxf(ws, 6.103515625e-5f);
    for (int s = 0; s < k; s++) w[s] /= ws;
}

/* gpt-oss's activation, as the reference computes it. */
static void swiglu_oai(const float *g, const float *u, float *out, int n)
{
    const float alpha = 1.702f, limit = 7.0f;
    for (int i = 0; i < n; i++) {
        const float x = fminf(g[i], limit), y = fminf(fmaxf(u[i], -limit), limit);
        out[i] = x / (1.f + expf(alpha * (-x))) * (y + 1.f);
    }
}

/* An expert's row of bias b (NULL data: none) added to y[n]. */
static void add_row(const model_w *b, int e, float *y, int n)
{
    if (!b->data) return;
    const float *r = (const float *)b->data + (size_t)e * n;
    for (int i = 0; i < n; i++) y[i] += r[i];
}

/* One expert's hidden row: its biases on the gate and up products, then
 * the activation. */
static void expert_act(model_ctx *c, const model_layer *L, int e, float *g, float *u, float *out, int F)
{
    add_row(&L->exp_gate_b, e, g, F);
    add_row(&L->exp_up_b, e, u, F);
    if (c->m->hp.moe_act == MODEL_ACT_SWIGLU_OAI) swiglu_oai(g, u, out, F);
    else if (c->m->hp.moe_act == MODEL_ACT_GEGLU) gm_geglu(g, u, out, F);
    else c->ops->swiglu(g, u, out, F);
}

/* An expert's output row y[n]: its scale (the reference multiplies the
 * product by it before adding the bias), then its bias. */
static void expert_out(const model_layer *L, int e, float *y, int n)
{
    if (L->exp_down_s.data) {
        const float s = ((const float *)L->exp_down_s.data)[e];
        for (int i = 0; i < n; i++) y[i] *= s;
    }
    add_row(&L->exp_down_b, e, y, n);
}

void fwd_moe(model_ctx *c, int ith, int nth, const model_layer *L, int T, const float *xn, const float *xr)
{
    const model_hparams *hp = &c->m->hp;
    struct moe_ctx *h = c->moe;
    const int E = hp->n_embd, K = hp->n_expert_used, F = hp->n_ff_exp, nub = c->p.n_ubatch;
    const bool shared = L->sh_gate.data != NULL, fused = L->exp_gate_up.data != NULL;
    /* where a row's gate and up products lie in eg / eu */
    const int gs = fused ? 2 * F : F;
    float *const eu = fused ? h->eg + F : h->eu;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);

    const model_w *rw[2] = { &L->moe_router, &L->sh_router };
    float *ry[2] = { h->rlog, h->shg };
    if (xr == xn || !shared) {
        fwd_matmul_set(ith, nth, c, rw, ry, shared ? 2 : 1, xr, T);
    } else {
        fwd_matmul(ith, nth, c, rw[0], xr, T, ry[0]);
        fwd_matmul(ith, nth, c, rw[1], xn, T, ry[1]);
    }
    for (int64_t t = t0; t < t1; t++) route(hp, L, h->rlog + t * hp->n_expert, h->sel + t * K, h->selw + t * K);
    tp_barrier(c->tp);
    if (ith == 0 && T > 1) {
        memset(h->ecount, 0, (size_t)hp->n_expert * sizeof(int32_t));
        for (int t = 0; t < T; t++)
            for (int s = 0; s < K; s++) {
                int e = h->sel[t * K + s];
                h->etok[(size_t)e * nub + h->ecount[e]++] = t * K + s;
            }
    }
    tp_barrier(c->tp);

    if (T == 1) {
        /* a decode step: every chosen expert reads the same token, so their
         * gate and up products run 4 experts (8 matrices) to a phase, and
         * their outputs go straight to the slots' rows */
        for (int s0 = 0; s0 < K; s0 += 4) {
            const int ns = MIN(4, K - s0);
            model_w g[4], u[4];
            const model_w *ws[8];
            float *ys[8];
            int n = 0;
            for (int i = 0; i < ns; i++) {
                const int e = h->sel[s0 + i];
                g[i] = slice(fused ? &L->exp_gate_up : &L->exp_gate, e);
                ws[n] = &g[i], ys[n++] = h->eg + (size_t)(s0 + i) * gs;
                if (fused) continue;
                u[i] = slice(&L->exp_up, e);
                ws[n] = &u[i], ys[n++] = eu + (size_t)(s0 + i) * gs;
            }
            fwd_matmul_set(ith, nth, c, ws, ys, n, xn, 1);
        }
        for (int i = ith; i < K; i += nth)
            expert_act(c, L, h->sel[i], h->eg + (size_t)i * gs, eu + (size_t)i * gs, h->eh + (size_t)i * F, F);
        tp_barrier(c->tp);
        for (int i = 0; i < K; i++) {
            model_w d = slice(&L->exp_down, h->sel[i]);
            fwd_matmul(ith, nth, c, &d, h->eh + (size_t)i * F, 1, h->eout + (size_t)i * E);
        }
        if (L->exp_down_b.data || L->exp_down_s.data) {
            tp_barrier(c->tp);
            for (int i = ith; i < K; i += nth) expert_out(L, h->sel[i], h->eout + (size_t)i * E, E);
        }
    }
    /* each chosen expert once over the tokens routed to it */
    for (int e = 0; e < hp->n_expert && T > 1; e++) {
        const int n = h->ecount[e];
        if (!n) continue;
        const int32_t *rows = h->etok + (size_t)e * nub;
        int64_t r0, r1;
        tp_split(n, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; r++)
            memcpy(h->xg + r * E, xn + (size_t)(rows[r] / K) * E, (size_t)E * sizeof(float));
        tp_barrier(c->tp);
        model_w d = slice(&L->exp_down, e);
        if (fused) {
            model_w gu = slice(&L->exp_gate_up, e);
            fwd_matmul(ith, nth, c, &gu, h->xg, n, h->eg);
        } else {
            model_w g = slice(&L->exp_gate, e), u = slice(&L->exp_up, e);
            const model_w *gu[2] = { &g, &u };
            float *gy[2] = { h->eg, h->eu };
            fwd_matmul_set(ith, nth, c, gu, gy, 2, h->xg, n);
        }
        for (int64_t r = r0; r < r1; r++) expert_act(c, L, e, h->eg + r * gs, eu + r * gs, h->eh + r * F, F);
        tp_barrier(c->tp);
        fwd_matmul(ith, nth, c, &d, h->eh, n, h->ey);
        for (int64_t r = r0; r < r1; r++) {
            memcpy(h->eout + (size_t)rows[r] * E, h->ey + r * E, (size_t)E * sizeof(float));
            expert_out(L, e, h->eout + (size_t)rows[r] * E, E);
        }
    }
    if (shared) {
        const int FS = hp->n_ff_shexp;
        const model_w *gu[2] = { &L->sh_gate, &L->sh_up };
        float *gy[2] = { c->gate, c->up };
        fwd_matmul_set(ith, nth, c, gu, gy, 2, xn, T);
        for (int64_t t = t0; t < t1; t++) c->ops->swiglu(c->gate + t * FS, c->up + t * FS, c->up + t * FS, FS);
        tp_barrier(c->tp);
        fwd_matmul(ith, nth, c, &L->sh_down, c->up, T, c->tmp);
    } else {
        tp_barrier(c->tp);   /* every expert's rows are in eout */
    }
    for (int64_t t = t0; t < t1; t++) {
        float *d = c->tmp + t * E;
        const float sg = shared ? sigmoid(h->shg[t]) : 0.0f;
        for (int i = 0; i < E; i++) {
            float acc = h->eout[((size_t)t * K) * E + i] * h->selw[t * K];
            for (int s = 1; s < K; s++) acc += h->eout[((size_t)t * K + s) * E + i] * h->selw[t * K + s];
            d[i] = shared ? acc + d[i] * sg : acc;
        }
    }
}
