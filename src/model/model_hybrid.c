/*
 * model_hybrid.c - the forward pass of the Qwen3.5 hybrids (qwen35,
 * qwen35moe; docs/hybrid.md): gated DeltaNet layers with a recurrent
 * state per sequence, gated attention layers over the KV cells, and a
 * dense or MoE FFN.
 *
 * DESIGN
 *   model_decode prepares each chunk as for the llama family (embeddings,
 *   RoPE angles, cells, one list per sequence) and runs hy_layers_job on
 *   the pool.  Every thread walks every phase, taking its share, and the
 *   threads meet at a barrier where the next phase reads what the last
 *   wrote:
 *
 *   DeltaNet layer: norm -> [qkv, z, beta, alpha] products (one phase) ->
 *     causal convolution over each sequence's tokens (channels split) and
 *     the gates -> L2 norms of q and k -> the delta rule per (sequence,
 *     value head) (gdn.h) -> gated RMSNorm -> output product
 *   attention layer: norm -> [q|gate, k, v] products -> QK-norm, RoPE, K/V
 *     into cells -> attention -> times sigmoid(gate) -> output product
 *   then residual + norm -> FFN (dense SwiGLU, or the router, each chosen
 *     expert over the tokens routed to it, and the gated shared expert)
 *     -> residual.
 *
 *   A sequence's tokens are contiguous in the batch (hy_check_batch), so a
 *   sequence's run inside a chunk is rows [first, first + n) of every
 *   buffer, and its state (rs.h) is read and written in place.
 *
 *   Numerics follow llama.cpp's graph: its ssm_conv (taps summed in float,
 *   oldest first), L2 norm as rms_norm(eps / n) then a scale by
 *   1 / sqrt(n), softplus with its x > 20 cut, the router's softmax summed
 *   in double, the chosen experts' outputs weighted and added in the order
 *   chosen.  Value head h reads key head h mod n_k_heads, as ggml repeats
 *   heads.
 */
#include "model_fwd.h"
#include "gdn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/tk.h"

struct hy_ctx {
    int key_dim, value_dim, conv_dim;
    float *qg;          /* [nub][2 n_head hd]  each head's query and gate */
    float *gt;          /* [nub][n_head hd]    the attention output gate */
    float *mix;         /* [nub][conv_dim]     q, k, v before the convolution */
    float *cv;          /* [nub][conv_dim]     after it, q and k L2-normed */
    float *z;           /* [nub][value_dim] */
    float *bl, *al;     /* [nub][n_v]          beta and alpha logits */
    float *gT, *bT;     /* [n_v][nub]          log decay and beta, per head */
    float *o;           /* [nub][value_dim]    the delta rule's output */
};

void hy_ctx_free(model_ctx *c)
{
    struct hy_ctx *h = c->hy;
    if (!h) return;
    void *bufs[] = { h->qg, h->gt, h->mix, h->cv, h->z, h->bl, h->al, h->gT, h->bT, h->o };
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(h);
    c->hy = NULL;
}

pk_status hy_ctx_new(model_ctx *c)
{
    const model_hparams *hp = &c->m->hp;
    struct hy_ctx *h = calloc(1, sizeof *h);
    if (!h) return PK_ENOMEM;
    c->hy = h;
    const size_t nub = (size_t)c->p.n_ubatch, fl = sizeof(float), nv = (size_t)hp->ssm_n_v_heads;
    const size_t ds = (size_t)hp->ssm_d_state;
    h->key_dim = (int)(ds * hp->ssm_n_k_heads);
    h->value_dim = (int)(ds * nv);
    h->conv_dim = 2 * h->key_dim + h->value_dim;
    const size_t hq = (size_t)hp->n_head * hp->head_dim_k;
    rs_params rp = { .n_layer = 0, .conv_floats = (size_t)(hp->ssm_d_conv - 1) * h->conv_dim,
                     .ssm_floats = nv * ds * ds, .n_slots = c->p.n_rs > 0 ? c->p.n_rs : 8 };
    for (int il = 0; il < hp->n_layer; il++) rp.n_layer += c->m->layers[il].rs_layer >= 0;
    pk_status st = rs_new(&rp, &c->rs);
    if (st) return st;
    for (int s = 0; s < KV_MAX_SEQ; s++)
        for (int i = 0; i < MODEL_CKPT_PENDING; i++) c->ckpt_at[s][i] = -1;
    if (!(h->qg = fwd_alloc(nub * 2 * hq * fl)) || !(h->gt = fwd_alloc(nub * hq * fl)) ||
        !(h->mix = fwd_alloc(nub * h->conv_dim * fl)) || !(h->cv = fwd_alloc(nub * h->conv_dim * fl)) ||
        !(h->z = fwd_alloc(nub * h->value_dim * fl)) || !(h->bl = fwd_alloc(nub * nv * fl)) ||
        !(h->al = fwd_alloc(nub * nv * fl)) || !(h->gT = fwd_alloc(nub * nv * fl)) ||
        !(h->bT = fwd_alloc(nub * nv * fl)) || !(h->o = fwd_alloc(nub * h->value_dim * fl)))
        return PK_ENOMEM;
    return PK_OK;
}

/* ---- the batch ---- */

pk_status hy_check_batch(const model_ctx *c, const model_batch *b)
{
    uint64_t done[KV_MAX_SEQ / 64] = { 0 };
    int fresh = 0;
    for (int i = 0; i < b->n_tokens;) {
        if (b->n_seq[i] != 1) return PK_EINVAL;
        kv_seq s = b->seq[i][0];
        if (done[s >> 6] >> (s & 63) & 1) return PK_EINVAL;   /* its tokens are not contiguous */
        done[s >> 6] |= 1ull << (s & 63);
        kv_pos at = rs_pos(c->rs, s);
        if (at < 0) {
            if (b->pos[i] != 0) return PK_EINVAL;
            fresh++;
        } else if (b->pos[i] != at) {
            return PK_EINVAL;
        }
        int j = i + 1;
        while (j < b->n_tokens && b->n_seq[j] == 1 && b->seq[j][0] == s) {
            if (b->pos[j] != b->pos[j - 1] + 1) return PK_EINVAL;
            j++;
        }
        i = j;
    }
    return fresh > rs_free_slots(c->rs) ? PK_EFULL : PK_OK;
}

void model_rs_checkpoint_at(model_ctx *c, kv_seq seq, kv_pos pos)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    kv_pos *at = c->ckpt_at[seq];
    if (pos < 0) {
        for (int i = 0; i < MODEL_CKPT_PENDING; i++) at[i] = -1;
        return;
    }
    if (hy_ckpt_pending(c, seq, pos)) return;
    memmove(at + 1, at, (MODEL_CKPT_PENDING - 1) * sizeof *at);   /* the oldest falls off */
    at[0] = pos;
}

bool hy_ckpt_pending(const model_ctx *c, kv_seq s, kv_pos pos)
{
    for (int i = 0; i < MODEL_CKPT_PENDING; i++)
        if (c->ckpt_at[s][i] == pos) return true;
    return false;
}

/* A checkpoint asked for where seq's state is now.  No free slot: none is
 * kept (the sequence is then continued from an earlier one). */
static void maybe_checkpoint(model_ctx *c, kv_seq s)
{
    kv_pos p = rs_pos(c->rs, s), *at = c->ckpt_at[s];
    for (int i = 0; i < MODEL_CKPT_PENDING; i++)
        if (at[i] >= 0 && at[i] == p) {
            (void)rs_checkpoint(c->rs, s);
            at[i] = -1;
        }
}

void hy_begin_batch(model_ctx *c, const model_batch *b)
{
    for (int i = 0; i < b->n_tokens; i++) {
        kv_seq s = b->seq[i][0];
        if (rs_live(c->rs, s) < 0) {
            pk_status st = rs_begin(c->rs, s);
            ASSERT(st == PK_OK);   /* hy_check_batch counted the free slots */
        }
    }
    /* Then the checkpoints asked for where states are now, into the slots
     * left (none left: none is kept), never before a state the batch needs. */
    for (int i = 0; i < b->n_tokens; i++)
        if (i == 0 || b->seq[i - 1][0] != b->seq[i][0]) maybe_checkpoint(c, b->seq[i][0]);
}

void hy_chunk_done(model_ctx *c, const model_batch *b, int i0, int n)
{
    for (int i = i0; i < i0 + n; i++)
        if (i + 1 == i0 + n || b->seq[i + 1][0] != b->seq[i][0]) {
            rs_advance(c->rs, b->seq[i][0], b->pos[i] + 1);
            maybe_checkpoint(c, b->seq[i][0]);
        }
}

/* ---- element-wise steps ---- */

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* x / max(|x|, ...) as llama.cpp computes it: rms_norm with eps / n, then
 * a scale by 1 / sqrt(n). */
static void l2_norm(float *x, int n, float eps)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / n) + eps / (float)n), post = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] = x[i] * scale * post;
}

/* ---- the layers ---- */

/* A sequence's run of the chunk: list l's rows [first, first + n). */
static void run_of(const model_ctx *c, int l, int *first, int *n)
{
    *first = c->tok_order[c->list_start[l]];
    *n = c->list_start[l + 1] - c->list_start[l];
}

static void deltanet(model_ctx *c, int ith, int nth, const model_layer *L, int T, float *xn)
{
    const model_hparams *hp = &c->m->hp;
    struct hy_ctx *h = c->hy;
    const int nv = hp->ssm_n_v_heads, nk = hp->ssm_n_k_heads, ds = hp->ssm_d_state, dc = hp->ssm_d_conv;
    const int CD = h->conv_dim, VD = h->value_dim, KD = h->key_dim, nub = c->p.n_ubatch;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);

    const model_w *ws[4] = { &L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha };
    float *ys[4] = { h->mix, h->z, h->bl, h->al };
    fwd_matmul_set(ith, nth, c, ws, ys, 4, xn, T);

    /* the convolution, channels split: window = the last dc - 1 inputs */
    int64_t c0, c1;
    tp_split(CD, ith, nth, &c0, &c1);
    const float *cw = L->ssm_conv.data;
    for (int l = 0; l < c->n_lists; l++) {
        int first, n;
        run_of(c, l, &first, &n);
        float *win = rs_conv(c->rs, rs_live(c->rs, c->vis_seq[l]), L->rs_layer);
        for (int64_t ch = c0; ch < c1; ch++) {
            float *wd = win + ch * (dc - 1);
            const float *w = cw + ch * dc;
            for (int t = first; t < first + n; t++) {
                const float xin = h->mix[(size_t)t * CD + ch];
                float sum = 0.0f;
                for (int k = 0; k < dc - 1; k++) sum += wd[k] * w[k];
                sum += xin * w[dc - 1];
                h->cv[(size_t)t * CD + ch] = silu(sum);
                memmove(wd, wd + 1, (size_t)(dc - 2) * sizeof(float));
                wd[dc - 2] = xin;
            }
        }
    }
    /* the gates: beta = sigmoid, g = softplus(alpha + dt) * a (a = -exp(A_log)) */
    const float *dt = L->ssm_dt.data, *a = L->ssm_a.data;
    for (int64_t t = t0; t < t1; t++)
        for (int j = 0; j < nv; j++) {
            h->bT[(size_t)j * nub + t] = sigmoid(h->bl[t * nv + j]);
            h->gT[(size_t)j * nub + t] = softplus(h->al[t * nv + j] + dt[j]) * a[j];
        }
    tp_barrier(c->tp);
    for (int64_t t = t0; t < t1; t++)
        for (int j = 0; j < 2 * nk; j++) l2_norm(h->cv + t * CD + (size_t)j * ds, ds, hp->rms_eps);
    tp_barrier(c->tp);

    /* the delta rule, one (sequence, value head) a unit: the serial form
     * for prompts too, the faster on CPUs (gdn.h) */
    for (int u = ith; u < c->n_lists * nv; u += nth) {
        const int l = u / nv, j = u % nv, kh = j % nk;
        int first, n;
        run_of(c, l, &first, &n);
        float *M = rs_ssm(c->rs, rs_live(c->rs, c->vis_seq[l]), L->rs_layer) + (size_t)j * ds * ds;
        const float *row = h->cv + (size_t)first * CD;
        gdn_in in = { .n = n, .d_k = ds, .d_v = ds, .q = row + (size_t)kh * ds, .k = row + KD + (size_t)kh * ds,
                      .v = row + 2 * KD + (size_t)j * ds, .g = h->gT + (size_t)j * nub + first,
                      .beta = h->bT + (size_t)j * nub + first, .q_stride = CD, .k_stride = CD, .v_stride = CD };
        float *o = h->o + (size_t)first * VD + (size_t)j * ds;
        gdn_serial(&in, M, o, VD);
    }
    tp_barrier(c->tp);

    /* gated RMSNorm per head: norm(o) * silu(z) */
    for (int64_t t = t0; t < t1; t++)
        for (int j = 0; j < nv; j++) {
            float *o = h->o + t * VD + (size_t)j * ds;
            const float *z = h->z + t * VD + (size_t)j * ds;
            c->ops->rms_norm(o, NULL, L->ssm_norm.data, o, ds, hp->rms_eps);
            for (int i = 0; i < ds; i++) o[i] *= silu(z[i]);
        }
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->ssm_out, h->o, T, c->tmp);
}

static void gated_attention(model_ctx *c, int ith, int nth, const model_layer *L, int T, float *xn)
{
    const model_hparams *hp = &c->m->hp;
    struct hy_ctx *h = c->hy;
    const int hd = hp->head_dim_k, nq = hp->n_head, nk = hp->n_head_kv, kvl = L->kv_layer;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);

    const model_w *ws[3] = { &L->wq, &L->wk, &L->wv };
    float *ys[3] = { h->qg, c->k, c->v };
    fwd_matmul_set(ith, nth, c, ws, ys, 3, xn, T);
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = c->rope + t * hp->n_rot;
        float *q = c->q + t * nq * hd, *k = c->k + t * nk * hd, *v = c->v + t * nk * hd;
        for (int i = 0; i < nq; i++) {
            const float *qg = h->qg + (t * nq + i) * 2 * hd;
            memcpy(h->gt + (t * nq + i) * hd, qg + hd, (size_t)hd * sizeof(float));
            c->ops->rms_norm((float *)qg, NULL, L->q_norm.data, q + i * hd, hd, hp->rms_eps);
            fwd_rope_head(q + i * hd, cs, hp->n_rot, hp->rope_type);
        }
        for (int i = 0; i < nk; i++) {
            c->ops->rms_norm(k + i * hd, NULL, L->k_norm.data, k + i * hd, hd, hp->rms_eps);
            fwd_rope_head(k + i * hd, cs, hp->n_rot, hp->rope_type);
        }
        fwd_kv_store(c, kvl, t, k, v);
    }
    if (ith == 0) atomic_store_explicit(&c->attn_next, 0, memory_order_relaxed);
    tp_barrier(c->tp);
    fwd_attention(c, ith, L, kvl, fwd_dims(hp));
    tp_barrier(c->tp);
    for (int64_t t = t0; t < t1; t++) {
        float *a = c->att + t * nq * hd;
        const float *g = h->gt + t * nq * hd;
        for (int i = 0; i < nq * hd; i++) a[i] *= sigmoid(g[i]);
    }
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->wo, c->att, T, c->tmp);
}

void hy_layer(model_ctx *c, int ith, int nth, const model_layer *L, int T)
{
    const model_hparams *hp = &c->m->hp;
    const int E = hp->n_embd, F = hp->n_ff;
    float *x = c->x, *xn = c->xn;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) c->ops->rms_norm(x + t * E, NULL, L->attn_norm.data, xn + t * E, E, hp->rms_eps);
    tp_barrier(c->tp);
    if (L->rs_layer >= 0) deltanet(c, ith, nth, L, T, xn);
    else gated_attention(c, ith, nth, L, T, xn);
    for (int64_t t = t0; t < t1; t++)
        c->ops->rms_norm(x + t * E, c->tmp + t * E, L->ffn_norm.data, xn + t * E, E, hp->rms_eps);
    tp_barrier(c->tp);
    if (L->moe_router.data) {
        fwd_moe(c, ith, nth, L, T, xn, xn);
    } else {
        const model_w *gu[2] = { &L->w_gate, &L->w_up };
        float *gy[2] = { c->gate, c->up };
        fwd_matmul_set(ith, nth, c, gu, gy, 2, xn, T);
        for (int64_t t = t0; t < t1; t++) c->ops->swiglu(c->gate + t * F, c->up + t * F, c->up + t * F, F);
        tp_barrier(c->tp);
        fwd_matmul(ith, nth, c, &L->w_down, c->up, T, c->tmp);
    }
    for (int64_t t = t0; t < t1; t++) {
        float *xt = x + t * E;
        const float *d = c->tmp + t * E;
        for (int i = 0; i < E; i++) xt[i] += d[i];
    }
    tp_barrier(c->tp);
}

void hy_layers_job(int ith, int nth, void *arg)
{
    const fwd_job *j = arg;
    model_ctx *c = j->c;
    for (int il = 0; il < c->m->hp.n_layer; il++) hy_layer(c, ith, nth, &c->m->layers[il], j->n_tok);
}
