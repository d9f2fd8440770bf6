/*
 * model_forward.c - the forward pass of one batch over the KV cache.
 *
 * DESIGN
 *   A batch is cut into chunks of at most n_ubatch tokens (and at most
 *   FWD_MAX_LISTS distinct first sequence ids).  For each chunk, on the
 *   engine thread: copy the token embeddings, compute the RoPE angles of
 *   every token once (shared by all layers), join each token's cell to its
 *   sequences, and build per sequence the list of visible cells sorted by
 *   position.  A token at position p of sequence s then sees a prefix of s's
 *   list: the cells with pos <= p.
 *
 *   The layers run as ONE job on the threadpool: every thread walks all the
 *   phases below, taking its share of each (rows of a matrix product,
 *   tokens of an element-wise step, attention units of a GQA group's rows)
 *   and meeting the others at a barrier where the next phase reads what
 *   the last wrote:
 *
 *     norm -> Q,K,V products (one phase) -> bias/qk-norm/rope, K/V into
 *     cells -> attention -> output product -> residual + norm -> gate,up
 *     products (one phase) -> swiglu -> down product -> residual
 *
 *   When decoding (T <= TK_PRIVATE_TOKENS) each thread keeps its own copy of
 *   the residual stream and does the element-wise steps for all tokens
 *   itself, so only the shared results need barriers: 6 per layer (see
 *   layers_job).
 *
 *   All buffers are sized at model_ctx_new; decoding allocates nothing.
 */
#include "model_fwd.h"

#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/tk.h"

void *fwd_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64)) return NULL;
    memset(p, 0, n);
    return p;
}

void model_ctx_free(model_ctx *c)
{
    if (!c) return;
    hy_ctx_free(c);
    gm_ctx_free(c);
    moe_ctx_free(c);
    mtp_ctx_free(c);
    rs_free(c->rs);
    kv_free(c->kv);
    kv_free(c->kvw);
    if (!c->p.tp) tp_free(c->tp);
    void *bufs[] = { c->x, c->xn, c->q, c->k, c->v, c->att, c->gate, c->up, c->tmp, c->rope,
                     c->mm_scratch, c->attn_buf, c->priv, c->cells, c->vis, c->vis_cells, c->tok_order,
                     c->tok_list, c->tok_nvis, c->tok_vis0, c->tok_pos, c->tok_cell, c->out_rows,
                     c->kvl_swa, c->kvl_idx, c->cells_w, c->vis_w, c->vis_cells_w, c->tok_nvis_w, c->tok_cell_w };
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(c);
}

kv_cache *model_ctx_kv(model_ctx *c) { return c->kv; }
kv_cache *model_ctx_kv_swa(model_ctx *c) { return c->kvw; }
tp_pool *model_ctx_tp(model_ctx *c) { return c->tp; }
rs_cache *model_ctx_rs(model_ctx *c) { return c->rs; }

void model_ctx_clear(model_ctx *c)
{
    kv_clear(c->kv);
    if (c->kvw) kv_clear(c->kvw);
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) model_swa_unpin(c, s, -1);
    if (c->rs) rs_clear(c->rs);
    for (kv_seq s = 0; c->rs && s < KV_MAX_SEQ; s++) model_rs_checkpoint_at(c, s, -1);
}
const model_ctx_params *model_ctx_get_params(const model_ctx *c) { return &c->p; }

static size_t scratch_for(const model_w *w, int64_t n_tok)
{
    return w->data && w->n_rows > 1 ? tk_matmul_scratch_size(w->type, w->n_cols, n_tok) : 0;
}

const char *model_kv_types_refusal(const model *m, tq_type k, tq_type v)
{
    if (!tk_kv_type_ok(k) || !tk_kv_type_ok(v))
        return "a K/V cache type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl";
    /* heads are sliced out of a row at block boundaries */
    if (m->hp.head_dim_k % tq_get(k)->blck_size || m->hp.head_dim_v % tq_get(v)->blck_size ||
        m->hp.head_dim_swa % tq_get(k)->blck_size || m->hp.head_dim_swa % tq_get(v)->blck_size)
        return "the model's head dimension is not a multiple of the cache type's block of 32 values";
    return NULL;
}

/* The KV caches: one for every attention layer, or, when the sliding-window
 * layers' cells are freed behind their window, one for the global layers
 * and one (kvw) for the window layers, each with rows of its layers' width
 * (Gemma 4's two kinds differ; one cache's rows are the wider of both). */
static pk_status kv_caches_new(model_ctx *c)
{
    const model_hparams *hp = &c->m->hp;
    const model_ctx_params *p = &c->p;
    const int n_kvl = hp->n_layer_attn + p->mtp;
    if (!(c->kvl_swa = calloc((size_t)n_kvl, 1)) || !(c->kvl_idx = calloc((size_t)n_kvl, sizeof(int32_t))))
        return PK_ENOMEM;
    for (int il = 0; il < hp->n_layer; il++)
        if (c->m->layers[il].kv_layer >= 0) c->kvl_swa[c->m->layers[il].kv_layer] |= c->m->layers[il].swa;
    int n_w = 0;
    for (int l = 0; l < n_kvl; l++) n_w += c->kvl_swa[l];
    const bool apart = hp->n_swa > 1 && !p->swa_full && !hp->hybrid && !p->mtp && n_w > 0 && n_w < n_kvl;
    const int nkv_w = hp->head_dim_swa ? hp->n_head_kv_swa : hp->n_head_kv;
    const int kw_w = nkv_w * (hp->head_dim_swa ? hp->head_dim_swa : hp->head_dim_k),
              vw_w = nkv_w * (hp->head_dim_swa ? hp->head_dim_swa : hp->head_dim_v);
    kv_params kp = { .n_layer = n_kvl, .n_ctx = p->n_ctx, .n_embd_k = hp->n_head_kv * hp->head_dim_k,
                     .n_embd_v = hp->n_head_kv * hp->head_dim_v, .type_k = p->type_k, .type_v = p->type_v };
    for (int l = 0, n[2] = { 0, 0 }; l < n_kvl; l++) c->kvl_idx[l] = apart ? n[c->kvl_swa[l]]++ : l;
    if (!apart) {
        kp.n_embd_k = MAX(kp.n_embd_k, hp->head_dim_swa ? kw_w : 0);
        kp.n_embd_v = MAX(kp.n_embd_v, hp->head_dim_swa ? vw_w : 0);
        return kv_new(&kp, &c->kv);
    }
    /* Both caches have n_ctx cells: a sequence's window cells are never more
     * than its global ones, so kv stays what fills first; the window
     * cache's pages past the cells in use are never touched (kv.h). */
    kv_params kw = kp;
    kp.n_layer = n_kvl - n_w;
    kw.n_layer = n_w, kw.n_embd_k = kw_w, kw.n_embd_v = vw_w;
    c->n_win = hp->n_swa - 1;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) model_swa_unpin(c, s, -1);
    pk_status st = kv_new(&kp, &c->kv);
    return st ? st : kv_new(&kw, &c->kvw);
}

pk_status model_ctx_new(const model *m, const model_ctx_params *p, model_ctx **out)
{
    *out = NULL;
    const model_hparams *hp = &m->hp;
    if (p->n_ctx < 1 || p->n_ubatch < 1 || p->n_threads < 1 ||
        !model_kv_types_ok(m, p->type_k, p->type_v) || (p->tp && tp_n_threads(p->tp) != p->n_threads) ||
        (p->mtp && !model_has_mtp(m)))
        return PK_EINVAL;
    model_ctx *c = calloc(1, sizeof *c);
    if (!c) return PK_ENOMEM;
    c->m = m;
    c->p = *p;
    c->ops = tk_ops_get();
    pk_status st = kv_caches_new(c);
    if (st) goto fail;
    if (p->tp) c->tp = p->tp;
    else if ((st = tp_new(p->n_threads, &c->tp))) goto fail;

    size_t nub = (size_t)p->n_ubatch, fl = sizeof(float);
    const size_t hdk = (size_t)MAX(hp->head_dim_k, hp->head_dim_swa), hdv = (size_t)MAX(hp->head_dim_v, hp->head_dim_swa);
    size_t qw = (size_t)hp->n_head * hdk, aw = (size_t)hp->n_head * hdv;
    size_t xnw = MAX(MAX((size_t)hp->n_embd, aw), (size_t)hp->n_ff);
    size_t mm = MAX(scratch_for(&m->output, p->n_ubatch), scratch_for(&m->pl_model_proj, p->n_ubatch));
    if (p->mtp)   /* the MTP block's projection (2 n_embd wide) and its own head */
        mm = MAX(mm, MAX(scratch_for(&m->mtp.nextn_eh_proj, p->n_ubatch), scratch_for(&m->mtp.nextn_head, p->n_ubatch)));
    for (int il = 0; il < hp->n_layer + p->mtp; il++) {
        const model_layer *L = il < hp->n_layer ? &m->layers[il] : &m->mtp;
        const model_w *ws = &L->attn_norm;
        for (size_t k = 0; k < offsetof(model_layer, nextn_eh_proj) / sizeof(model_w); k++)
            mm = MAX(mm, scratch_for(&ws[k], p->n_ubatch));
        /* the sets of products that share their input (fwd_matmul_set) */
        const model_w *sets[][4] = { { &L->wq, &L->wk, &L->wv }, { &L->w_gate, &L->w_up },
                                     { &L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha },
                                     { &L->sh_gate, &L->sh_up }, { &L->exp_gate, &L->exp_up } };
        for (size_t i = 0; i < ARRAY_LEN(sets); i++) {
            tk_mat mats[4];
            int n = 0;
            for (int j = 0; j < 4 && sets[i][j] && sets[i][j]->data; j++)
                mats[n++] = (tk_mat){ sets[i][j]->type, sets[i][j]->data, sets[i][j]->n_rows, NULL };
            if (n) mm = MAX(mm, tk_matmul_multi_scratch_size(mats, n, sets[i][0]->n_cols, p->n_ubatch));
        }
    }
    /* attention scratch per thread: the kernel's, then query rows, output
     * rows and the rows' visible-cell counts */
    c->attn_bytes = (tk_attn_scratch_size() + (size_t)TK_ATTN_ROWS * (hdk + hdv + 1) * fl
                     + 63) & ~(size_t)63;
    atomic_init(&c->attn_next, 0);
    c->priv_floats = ((size_t)TK_PRIVATE_TOKENS * (2 * hp->n_embd + hp->n_ff) + 15) & ~(size_t)15;
    st = PK_ENOMEM;
    if (!(c->x = fwd_alloc(nub * hp->n_embd * fl)) || !(c->xn = fwd_alloc(nub * xnw * fl)) ||
        !(c->q = fwd_alloc(nub * qw * fl)) ||
        !(c->k = fwd_alloc(nub * hdk * MAX(hp->n_head_kv, hp->n_head_kv_swa) * fl)) ||
        !(c->v = fwd_alloc(nub * hdv * MAX(hp->n_head_kv, hp->n_head_kv_swa) * fl)) ||
        !(c->att = fwd_alloc(nub * aw * fl)) || !(c->gate = fwd_alloc(nub * hp->n_ff * fl)) ||
        !(c->up = fwd_alloc(nub * hp->n_ff * fl)) || !(c->tmp = fwd_alloc(nub * hp->n_embd * fl)) ||
        !(c->rope = fwd_alloc(nub * (hp->n_rot + hp->n_rot_swa) * fl)) || !(c->mm_scratch = fwd_alloc(mm)) ||
        !(c->attn_buf = fwd_alloc((size_t)p->n_threads * c->attn_bytes)) ||
        !(c->priv = fwd_alloc((size_t)p->n_threads * c->priv_floats * fl)) ||
        !(c->vis_cells = fwd_alloc((size_t)FWD_MAX_LISTS * p->n_ctx * sizeof(int32_t))) ||
        !(c->tok_order = fwd_alloc(nub * sizeof(int32_t))) ||
        !(c->cells = fwd_alloc((size_t)p->n_ctx * sizeof(int))) ||
        !(c->vis = fwd_alloc((size_t)FWD_MAX_LISTS * p->n_ctx * sizeof(uint64_t))) ||
        !(c->tok_list = fwd_alloc(nub * sizeof(int32_t))) ||
        !(c->tok_nvis = fwd_alloc(nub * sizeof(int32_t))) ||
        !(c->tok_vis0 = fwd_alloc(nub * sizeof(int32_t))) ||
        !(c->tok_pos = fwd_alloc(nub * sizeof(kv_pos))) ||
        !(c->tok_cell = fwd_alloc(nub * sizeof(int32_t))) ||
        !(c->out_rows = fwd_alloc(nub * sizeof(int32_t))))
        goto fail;
    if (c->kvw && (!(c->cells_w = fwd_alloc((size_t)p->n_ctx * sizeof(int))) ||
                   !(c->vis_w = fwd_alloc((size_t)FWD_MAX_LISTS * p->n_ctx * sizeof(uint64_t))) ||
                   !(c->vis_cells_w = fwd_alloc((size_t)FWD_MAX_LISTS * p->n_ctx * sizeof(int32_t))) ||
                   !(c->tok_nvis_w = fwd_alloc(nub * sizeof(int32_t))) ||
                   !(c->tok_cell_w = fwd_alloc(nub * sizeof(int32_t)))))
        goto fail;
    tk_matmul_scratch_init(c->mm_scratch);
    if (hp->hybrid && (st = hy_ctx_new(c))) goto fail;
    if (hp->arch == MODEL_GEMMA4 && (st = gm_ctx_new(c))) goto fail;
    if (hp->n_expert > 0 && (st = moe_ctx_new(c))) goto fail;
    if (p->mtp && (st = mtp_ctx_new(c))) goto fail;
    *out = c;
    return PK_OK;
fail:
    model_ctx_free(c);
    return st;
}

/* ---- element-wise steps (each on one token row) ---- */

/* Rotates the first n_rot values of each head: adjacent pairs (NORM) or
 * the two halves (NEOX).  cs holds cos, sin for each pair. */
void fwd_rope_head(float *x, const float *cs, int n_rot, model_rope type)
{
    if (type == MODEL_ROPE_NEOX) {
        int half = n_rot / 2;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c - x1 * s;
            x[i + half] = x0 * s + x1 * c;
        }
    } else {
        for (int i = 0; i < n_rot; i += 2) {
            float c = cs[i], s = cs[i + 1], x0 = x[i], x1 = x[i + 1];
            x[i] = x0 * c - x1 * s;
            x[i + 1] = x0 * s + x1 * c;
        }
    }
}

/* cos and sin of each dim pair's angle at pos, the reference engine's
 * way: a running float product for the frequencies (so the low bits
 * agree); with YaRN each angle blends the interpolated and the
 * extrapolated one by a ramp over the corrected dims, and cos and sin are
 * scaled by rope_mscale. */
void fwd_rope_angles(const model_hparams *hp, int n_rot, float base, float scale, const float *ff, kv_pos pos,
                     float *cs)
{
    float theta_scale = powf(base, -2.0f / n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        float ext = ff ? theta / ff[i] : theta, t = scale * ext;
        if (hp->rope_yarn) {
            const float *cd = hp->rope_yarn_corr;
            float y = ((float)i - cd[0]) / fmaxf(0.001f, cd[1] - cd[0]);
            float mix = 1 - fminf(1, fmaxf(0, y));
            t = t * (1 - mix) + ext * mix;
        }
        cs[2 * i] = cosf(t) * hp->rope_mscale;
        cs[2 * i + 1] = sinf(t) * hp->rope_mscale;
        theta *= theta_scale;
    }
}

/* A token's RoPE rows: the model's one table, or Gemma 4's two. */
static void rope_angles(const model *m, kv_pos pos, float *cs)
{
    const model_hparams *hp = &m->hp;
    if (hp->arch == MODEL_GEMMA4) gm_rope_angles(m, pos, cs);
    else fwd_rope_angles(hp, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale, m->rope_freqs.data, pos, cs);
}

static void add_bias(float *x, const model_w *b, int n)
{
    if (!b->data) return;
    const float *bb = b->data;
    for (int i = 0; i < n; i++) x[i] += bb[i];
}

/* ---- the layer job ---- */

void fwd_matmul(int ith, int nth, model_ctx *c, const model_w *w, const float *x, int n_tok, float *y)
{
    tk_matmul_job(ith, nth, c->tp, w->type, w->data, w->n_rows, w->n_cols, x, n_tok, y, c->mm_scratch);
}

/* Products of up to 8 matrices with the same input: one phase when they
 * share a vec_dot_type, one each otherwise. */
void fwd_matmul_set(int ith, int nth, model_ctx *c, const model_w *const *ws, float *const *ys, int n,
                    const float *x, int n_tok)
{
    tk_mat mats[8];
    ASSERT(n <= 8);
    bool same = true;
    for (int i = 0; i < n; i++) {
        mats[i] = (tk_mat){ ws[i]->type, ws[i]->data, ws[i]->n_rows, ys[i] };
        same = same && tq_get(ws[i]->type)->vec_dot_type == tq_get(ws[0]->type)->vec_dot_type;
    }
    if (same) {
        tk_matmul_multi_job(ith, nth, c->tp, mats, n, ws[0]->n_cols, x, n_tok, c->mm_scratch);
        return;
    }
    for (int i = 0; i < n; i++) fwd_matmul(ith, nth, c, ws[i], x, n_tok, ys[i]);
}

/*
 * Attention of layer il.  Work units are up to TK_ATTN_ROWS query rows that
 * share a K/V head and a visible-cell list: the rows of list l are its
 * tokens (in chunk order) times the GQA group's heads, so one unit is the 7
 * heads of a decoded token, or a few tokens' heads in prefill, and each K/V
 * row is read once per unit.  Threads take units from a shared counter
 * (causal prefill units differ in cost).  The kernel rounds the query to
 * what the reference engine multiplies the cache's K with (tk.h).
 */
fwd_attn_dims fwd_dims(const model_hparams *hp)
{
    return (fwd_attn_dims){ hp->head_dim_k, hp->head_dim_v, hp->n_head_kv, 1.0f / sqrtf((float)hp->head_dim_k) };
}

void fwd_attention(model_ctx *c, int ith, const model_layer *L, int il, fwd_attn_dims d)
{
    const model_hparams *hp = &c->m->hp;
    const int hdk = d.hd_k, hdv = d.hd_v, nh = hp->n_head, nkv = d.n_head_kv;
    const int G = nh / nkv;
    /* a window layer reads its own cells when they are apart */
    const bool apart = c->kvw && c->kvl_swa[il];
    const kv_cache *kv = apart ? c->kvw : c->kv;
    const int32_t *vis_cells = apart ? c->vis_cells_w : c->vis_cells;
    const int kl = c->kvl_idx[il];
    const size_t k_head = tq_row_size(c->p.type_k, hdk), v_head = tq_row_size(c->p.type_v, hdv);
    char *buf = c->attn_buf + (size_t)ith * c->attn_bytes;
    float *qrows = (float *)(buf + tk_attn_scratch_size());   /* [TK_ATTN_ROWS][hdk] */
    float *orows = qrows + TK_ATTN_ROWS * hdk;                /* [TK_ATTN_ROWS][hdv] */
    int32_t *nvis = (int32_t *)(orows + TK_ATTN_ROWS * hdv);  /* [TK_ATTN_ROWS] */
    int32_t vis0[TK_ATTN_ROWS];
    float sink[TK_ATTN_ROWS];
    int32_t th[TK_ATTN_ROWS][2];                               /* (token, head) of each row */

    for (;;) {
        int u = atomic_fetch_add_explicit(&c->attn_next, 1, memory_order_relaxed);
        int l = 0, per = 0;
        for (; l < c->n_lists; l++) {
            int n_rows = (c->list_start[l + 1] - c->list_start[l]) * G;
            per = (n_rows + TK_ATTN_ROWS - 1) / TK_ATTN_ROWS;
            if (u < per * nkv) break;
            u -= per * nkv;
        }
        if (l == c->n_lists) break;
        const int kvh = u / per, r0 = (u % per) * TK_ATTN_ROWS;
        const int n_rows = (c->list_start[l + 1] - c->list_start[l]) * G;
        const int n = MIN(TK_ATTN_ROWS, n_rows - r0);
        for (int i = 0; i < n; i++) {
            int t = c->tok_order[c->list_start[l] + (r0 + i) / G], h = kvh * G + (r0 + i) % G;
            th[i][0] = t, th[i][1] = h;
            memcpy(qrows + (size_t)i * hdk, c->q + ((size_t)t * nh + h) * hdk, (size_t)hdk * sizeof(float));
            nvis[i] = apart ? c->tok_nvis_w[t] : c->tok_nvis[t];
            vis0[i] = L->swa ? c->tok_vis0[t] : 0;
            if (L->sinks.data) sink[i] = ((const float *)L->sinks.data)[h];
        }
        tk_attn a = {
            .n_q = n, .hd_k = hdk, .hd_v = hdv, .q = qrows, .n_kv = nvis,
            .cells = vis_cells + (size_t)l * c->p.n_ctx, .type_k = c->p.type_k, .type_v = c->p.type_v,
            .k = (const char *)kv_k_base(kv, kl) + (size_t)kvh * k_head,
            .v = (const char *)kv_v_base(kv, kl) + (size_t)kvh * v_head,
            .k_stride = kv_k_row_bytes(kv), .v_stride = kv_v_row_bytes(kv),
            .scale = d.scale, .out = orows,
            .kv0 = L->swa ? vis0 : NULL, .sink = L->sinks.data ? sink : NULL,
        };
        c->ops->attend(&a, buf);
        for (int i = 0; i < n; i++)
            memcpy(c->att + ((size_t)th[i][0] * nh + th[i][1]) * hdv, orows + (size_t)i * hdv,
                   (size_t)hdv * sizeof(float));
    }
}

/* Bias, Q/K norms and RoPE for one token, then its K and V into its cell. */
static void qkv_finish(model_ctx *c, int il, int t)
{
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const model_layer *L = &m->layers[il];
    const int hdk = hp->head_dim_k, nq = hp->n_head, nk = hp->n_head_kv;
    float *q = c->q + (size_t)t * nq * hdk;
    float *k = c->k + (size_t)t * nk * hdk;
    float *v = c->v + (size_t)t * nk * hp->head_dim_v;
    const float *cs = c->rope + (size_t)t * hp->n_rot;

    add_bias(q, &L->bq, nq * hdk);
    add_bias(k, &L->bk, nk * hdk);
    add_bias(v, &L->bv, nk * hp->head_dim_v);
    for (int h = 0; h < nq; h++) {
        if (L->q_norm.data) c->ops->rms_norm(q + h * hdk, NULL, L->q_norm.data, q + h * hdk, hdk, hp->rms_eps);
        fwd_rope_head(q + h * hdk, cs, hp->n_rot, hp->rope_type);
    }
    for (int h = 0; h < nk; h++) {
        if (L->k_norm.data) c->ops->rms_norm(k + h * hdk, NULL, L->k_norm.data, k + h * hdk, hdk, hp->rms_eps);
        fwd_rope_head(k + h * hdk, cs, hp->n_rot, hp->rope_type);
    }
    fwd_kv_store(c, L->kv_layer, t, k, v);
}

/* A row in the cache's type: the activation quantizers where the kernels
 * have one (F32, F16, BF16, Q8_0: the reference's rounding), else the
 * reference quantizer (the rarer block formats). */
static void kv_put(const model_ctx *c, tq_type type, const float *x, void *row, int n)
{
    if (c->ops->quantize[type]) c->ops->quantize[type](x, row, n);
    else tq_quantize_row(type, x, row, n);
}

void fwd_kv_store_n(model_ctx *c, int kvl, int t, const float *k, int nk, const float *v, int nv)
{
    const bool apart = c->kvw && c->kvl_swa[kvl];
    kv_cache *kv = apart ? c->kvw : c->kv;
    const int cell = apart ? c->tok_cell_w[t] : c->tok_cell[t], kl = c->kvl_idx[kvl];
    kv_put(c, c->p.type_k, k, kv_k_row(kv, kl, cell), nk);
    kv_put(c, c->p.type_v, v, kv_v_row(kv, kl, cell), nv);
}

void fwd_kv_store(model_ctx *c, int kvl, int t, const float *k, const float *v)
{
    const model_hparams *hp = &c->m->hp;
    fwd_kv_store_n(c, kvl, t, k, hp->n_head_kv * hp->head_dim_k, v, hp->n_head_kv * hp->head_dim_v);
}

/*
 * All layers of one chunk.  With few tokens (T <= TK_PRIVATE_TOKENS, i.e.
 * decoding) every thread keeps its own copy of the residual stream and does
 * the element-wise work for all tokens itself (the copies stay identical:
 * same operations on the same data), so the only barriers are the ones the
 * shared results need: after Q/K/V, after the K/V rows are stored, after
 * attention and after each of the output, gate/up and down products -- 6
 * per layer.  With more tokens each thread takes its slice of the tokens
 * and a barrier follows each element-wise step whose result others read.
 */
static void layers_job(int ith, int nth, void *arg)
{
    const fwd_job *j = arg;
    model_ctx *c = j->c;
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const int T = j->n_tok, E = hp->n_embd, F = hp->n_ff;
    const bool priv = T <= TK_PRIVATE_TOKENS;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);
    /* tokens whose element-wise work this thread does, and where */
    const int64_t e0 = priv ? 0 : t0, e1 = priv ? T : t1;
    float *x = c->x, *xn = c->xn, *h = c->gate;
    if (priv) {   /* [x | xn | h] of this thread: [P][E], [P][E], [P][F] */
        x = c->priv + (size_t)ith * c->priv_floats;
        xn = x + (size_t)TK_PRIVATE_TOKENS * E;
        h = xn + (size_t)TK_PRIVATE_TOKENS * E;
        memcpy(x, c->x, (size_t)T * E * sizeof(float));
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];

        for (int64_t t = e0; t < e1; t++)
            c->ops->rms_norm(x + t * E, NULL, L->attn_norm.data, xn + t * E, E, hp->rms_eps);
        if (!priv) tp_barrier(c->tp);
        const model_w *qkv_w[3] = { &L->wq, &L->wk, &L->wv };
        float *qkv_y[3] = { c->q, c->k, c->v };
        fwd_matmul_set(ith, nth, c, qkv_w, qkv_y, 3, xn, T);
        for (int64_t t = t0; t < t1; t++) qkv_finish(c, il, (int)t);
        if (ith == 0) atomic_store_explicit(&c->attn_next, 0, memory_order_relaxed);
        tp_barrier(c->tp);

        fwd_attention(c, ith, L, L->kv_layer, fwd_dims(hp));
        tp_barrier(c->tp);

        fwd_matmul(ith, nth, c, &L->wo, c->att, T, c->tmp);
        for (int64_t t = e0; t < e1; t++) {  /* residual add and norm in one pass */
            if (L->bo.data) {                /* x + (Wo a + bo), the reference's order */
                const float *bo = L->bo.data, *d = c->tmp + t * E;
                float *xt = x + t * E;
                for (int i = 0; i < E; i++) xt[i] += d[i] + bo[i];
                c->ops->rms_norm(xt, NULL, L->ffn_norm.data, xn + t * E, E, hp->rms_eps);
            } else {
                c->ops->rms_norm(x + t * E, c->tmp + t * E, L->ffn_norm.data, xn + t * E, E, hp->rms_eps);
            }
        }
        if (!priv) tp_barrier(c->tp);

        if (L->moe_router.data) {
            fwd_moe(c, ith, nth, L, T, xn, xn);
            tp_barrier(c->tp);              /* every token's rows of c->tmp */
        } else {
            const model_w *gu_w[2] = { &L->w_gate, &L->w_up };
            float *gu_y[2] = { c->gate, c->up };
            fwd_matmul_set(ith, nth, c, gu_w, gu_y, 2, xn, T);
            for (int64_t t = e0; t < e1; t++) c->ops->swiglu(c->gate + t * F, c->up + t * F, h + t * F, F);
            if (!priv) tp_barrier(c->tp);
            fwd_matmul(ith, nth, c, &L->w_down, h, T, c->tmp);
        }
        for (int64_t t = e0; t < e1; t++) {   /* the next norm reads only this thread's tokens */
            float *xt = x + t * E;
            const float *d = c->tmp + t * E;
            for (int i = 0; i < E; i++) xt[i] += d[i];
        }
    }
    if (priv && ith == 0) memcpy(c->x, x, (size_t)T * E * sizeof(float));
}

typedef struct out_job {
    model_ctx *c;
    int n_out;
    float *logits;
} out_job;

static void output_job(int ith, int nth, void *arg)
{
    const out_job *j = arg;
    model_ctx *c = j->c;
    const model *m = c->m;
    const int E = m->hp.n_embd;
    const bool priv = j->n_out <= TK_PRIVATE_TOKENS;   /* as in layers_job */
    float *xn = priv ? c->priv + (size_t)ith * c->priv_floats : c->xn;
    int64_t r0 = 0, r1 = j->n_out;
    if (!priv) tp_split(j->n_out, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        c->ops->rms_norm(c->x + (size_t)c->out_rows[r] * E, NULL, m->out_norm.data, xn + r * E, E, m->hp.rms_eps);
    if (!priv) tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &m->output, xn, j->n_out, j->logits);
    const float cap = m->hp.logit_softcap;
    if (cap > 0) {   /* the reference's order: x * (1 / c), tanh, * c; each thread a slice of the vocabulary */
        const int64_t V = m->hp.n_vocab;
        int64_t v0, v1;
        tp_split(V, ith, nth, &v0, &v1);
        const float inv = 1.0f / cap;
        for (int64_t r = 0; r < j->n_out; r++)
            for (int64_t i = v0; i < v1; i++) j->logits[r * V + i] = tanhf(j->logits[r * V + i] * inv) * cap;
    }
}

/* ---- batch preparation ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The first entry of v[0, n) above key. */
static int upper(const uint64_t *v, int n, uint64_t key)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] <= key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* kv's cells of each list's sequence, sorted by position, and each token's
 * count of visible ones (its prefix of its list). */
static void fill_lists(model_ctx *c, const kv_cache *kv, uint64_t *vis, int32_t *vis_cells, int32_t *vis_n,
                       int32_t *tok_nvis, int n)
{
    for (int l = 0; l < c->n_lists; l++) vis_n[l] = 0;
    const int end = kv_cells_end(kv);
    for (int cell = 0; cell < end; cell++) {
        kv_pos pos = kv_cell_pos(kv, cell);
        if (pos < 0) continue;
        const kv_seqset *set = kv_cell_seqs(kv, cell);
        for (int l = 0; l < c->n_lists; l++)
            if (kv_seqset_has(set, c->vis_seq[l]))
                vis[(size_t)l * c->p.n_ctx + vis_n[l]++] = (uint64_t)pos << 32 | (uint32_t)cell;
    }
    for (int l = 0; l < c->n_lists; l++) {
        uint64_t *v = vis + (size_t)l * c->p.n_ctx;
        bool sorted = true;
        for (int j = 1; j < vis_n[l] && sorted; j++) sorted = v[j - 1] <= v[j];
        if (!sorted) qsort(v, (size_t)vis_n[l], sizeof *v, cmp_u64);
        int32_t *cells = vis_cells + (size_t)l * c->p.n_ctx;
        for (int j = 0; j < vis_n[l]; j++) cells[j] = (int32_t)(uint32_t)v[j];
    }
    for (int i = 0; i < n; i++)
        tok_nvis[i] = upper(vis + (size_t)c->tok_list[i] * c->p.n_ctx, vis_n[c->tok_list[i]],
                            (uint64_t)c->tok_pos[i] << 32 | 0xffffffffu);
}

/* Builds the sorted visible-cell list of every distinct first sequence id of
 * the chunk (of each cache), and each token's count of visible cells. */
static void build_visibility(model_ctx *c, const model_batch *b, int i0, int n)
{
    int n_lists = 0;
    for (int i = 0; i < n; i++) {
        kv_seq s = b->seq[i0 + i][0];
        int l = 0;
        while (l < n_lists && c->vis_seq[l] != s) l++;
        if (l == n_lists) c->vis_seq[n_lists++] = s;
        c->tok_list[i] = l;
    }
    c->n_lists = n_lists;
    fill_lists(c, c->kv, c->vis, c->vis_cells, c->vis_n, c->tok_nvis, n);
    if (c->kvw) fill_lists(c, c->kvw, c->vis_w, c->vis_cells_w, c->vis_n_w, c->tok_nvis_w, n);
    /* the chunk's tokens grouped by list (a stable counting sort) */
    for (int l = 0; l <= n_lists; l++) c->list_start[l] = 0;
    for (int i = 0; i < n; i++) c->list_start[c->tok_list[i] + 1]++;
    for (int l = 0; l < n_lists; l++) c->list_start[l + 1] += c->list_start[l];
    int32_t fill[FWD_MAX_LISTS];
    memcpy(fill, c->list_start, sizeof fill);
    for (int i = 0; i < n; i++) c->tok_order[fill[c->tok_list[i]]++] = i;
    /* a sliding-window layer sees the positions after pos - n_swa: the
     * first of them in its list */
    const int32_t n_swa = c->m->hp.n_swa;
    if (n_swa <= 0) return;
    const uint64_t *vis = c->kvw ? c->vis_w : c->vis;
    for (int i = 0; i < n; i++) {
        int64_t p0 = (int64_t)c->tok_pos[i] - n_swa + 1;
        c->tok_vis0[i] = p0 > 0 ? upper(vis + (size_t)c->tok_list[i] * c->p.n_ctx,
                                        c->kvw ? c->tok_nvis_w[i] : c->tok_nvis[i], ((uint64_t)p0 << 32) - 1)
                                : 0;
    }
}

/* Tokens of the batch from i0 that fit one chunk. */
static int chunk_len(const model_ctx *c, const model_batch *b, int i0)
{
    kv_seq seen[FWD_MAX_LISTS];
    int n_seen = 0, n = 0;
    while (i0 + n < b->n_tokens && n < c->p.n_ubatch) {
        kv_seq s = b->seq[i0 + n][0];
        if (c->hy && n > 0 && hy_ckpt_pending(c, s, b->pos[i0 + n])) break;   /* the state there is kept */
        int l = 0;
        while (l < n_seen && seen[l] != s) l++;
        if (l == n_seen) {
            if (n_seen == FWD_MAX_LISTS) break;
            seen[n_seen++] = s;
        }
        n++;
    }
    return n;
}

static pk_status check_batch(const model_ctx *c, const model_batch *b)
{
    const model_hparams *hp = &c->m->hp;
    if (b->n_tokens < 1) return PK_EINVAL;
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab) return PK_EINVAL;
        if (b->pos[i] < 0) return PK_EINVAL;
        if (b->n_seq[i] < 1 || b->n_seq[i] > MODEL_MAX_TOKEN_SEQS) return PK_EINVAL;
        for (int s = 0; s < b->n_seq[i]; s++)
            if (b->seq[i][s] < 0 || b->seq[i][s] >= KV_MAX_SEQ) return PK_EINVAL;
    }
    return PK_OK;
}

/* ---- sliding windows apart (model.h) ---- */

int32_t model_swa_window(const model_ctx *c) { return c->kvw ? c->n_win : 0; }

void model_swa_pin(model_ctx *c, kv_seq seq, kv_pos pos)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    kv_pos *pin = c->swa_pin[seq];
    if (!c->kvw || pos <= 0) return;
    for (int i = 0; i < MODEL_SWA_PINS; i++)
        if (pin[i] == pos) return;
    memmove(pin + 1, pin, (MODEL_SWA_PINS - 1) * sizeof *pin);   /* the oldest falls off */
    pin[0] = pos;
}

void model_swa_unpin(model_ctx *c, kv_seq seq, kv_pos above)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    for (int i = 0; i < MODEL_SWA_PINS; i++)
        if (above < 0 || c->swa_pin[seq][i] > above) c->swa_pin[seq][i] = -1;
}

int model_swa_pins(const model_ctx *c, kv_seq seq, kv_pos *out)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    int n = 0;
    for (int i = 0; i < MODEL_SWA_PINS; i++) {
        kv_pos p = c->swa_pin[seq][i];
        if (p < 0) continue;
        int j = n++;
        for (; j > 0 && out[j - 1] > p; j--) out[j] = out[j - 1];
        out[j] = p;
    }
    return n;
}

void model_swa_trim(model_ctx *c, kv_seq seq, kv_pos end)
{
    if (!c->kvw) return;
    kv_pos pin[MODEL_SWA_PINS];
    int n = model_swa_pins(c, seq, pin);
    kv_pos from = 0;   /* [from, the next window's start) goes */
    for (int i = 0; i <= n; i++) {
        kv_pos at = i < n ? MIN(pin[i], end) : end, w0 = at - c->n_win;
        if (w0 > from) kv_seq_rm(c->kvw, seq, from, w0);
        from = MAX(from, at);
    }
}

/* Before a batch: each of its sequences lets go of the window cells before
 * its first position's window (the tokens after it read none of them). */
static void trim_windows(model_ctx *c, const model_batch *b)
{
    kv_pos first[KV_MAX_SEQ];
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) first[s] = -1;
    for (int i = 0; i < b->n_tokens; i++)
        for (int k = 0; k < b->n_seq[i]; k++) {
            kv_seq s = b->seq[i][k];
            if (first[s] < 0 || b->pos[i] < first[s]) first[s] = b->pos[i];
        }
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++)
        if (first[s] > c->n_win) model_swa_trim(c, s, first[s]);
}

pk_status model_decode(model_ctx *c, const model_batch *b, float *logits)
{
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    pk_status st = check_batch(c, b);
    if (st) return st;
    if (c->hy && (st = hy_check_batch(c, b))) return st;
    /* only attention layers take cells: a hybrid's batch still takes one
     * cell a token (every token has a position in every sequence) */
    if (b->n_tokens > c->p.n_ctx) return PK_EFULL;
    if (c->kvw) trim_windows(c, b);
    if ((st = kv_find_slot(c->kv, b->n_tokens, c->cells))) return st;
    if (c->kvw && (st = kv_find_slot(c->kvw, b->n_tokens, c->cells_w))) return st;
    if (c->hy) hy_begin_batch(c, b);

    model_pass_begin(m);
    float *out = logits;
    for (int i0 = 0; i0 < b->n_tokens;) {
        int n = chunk_len(c, b, i0);
        int n_out = 0;
        for (int i = 0; i < n; i++) {
            int bi = i0 + i;
            float *xi = c->x + (size_t)i * hp->n_embd;
            tq_dequantize_row_at(m->tok_embd.type, m->tok_embd.data, b->token[bi], m->tok_embd.n_rows, hp->n_embd, xi);
            for (int e = 0; hp->embd_scale > 0 && e < hp->n_embd; e++) xi[e] *= hp->embd_scale;
            if (c->gm) gm_token(c, i, b->token[bi]);
            rope_angles(m, b->pos[bi], c->rope + (size_t)i * (hp->n_rot + hp->n_rot_swa));
            c->tok_pos[i] = b->pos[bi];
            c->tok_cell[i] = c->cells[bi];
            kv_cell_set(c->kv, c->cells[bi], b->pos[bi], b->seq[bi], b->n_seq[bi]);
            if (c->kvw) {
                c->tok_cell_w[i] = c->cells_w[bi];
                kv_cell_set(c->kvw, c->cells_w[bi], b->pos[bi], b->seq[bi], b->n_seq[bi]);
            }
            if (b->want_logits[bi]) c->out_rows[n_out++] = i;
        }
        build_visibility(c, b, i0, n);

        fwd_job lj = { .c = c, .n_tok = n };
        tp_run(c->tp, c->hy ? hy_layers_job : c->gm ? gm_layers_job : layers_job, &lj);
        if (c->hy) hy_chunk_done(c, b, i0, n);
        if (n_out > 0) {
            out_job oj = { .c = c, .n_out = n_out, .logits = out };
            tp_run(c->tp, output_job, &oj);
            out += (size_t)n_out * hp->n_vocab;
        }
        if (c->mtp) {   /* the MTP block's K/V for these positions, from the trunk's output */
            mtp_prepare(c, b, i0, n, false, NULL);
            mtp_job_args mj = { .c = c, .b = b, .i0 = i0, .n_tok = n };
            tp_run(c->tp, mtp_job, &mj);
        }
        i0 += n;
    }
    model_pass_end(m);
    return PK_OK;
}

bool model_has_mtp(const model *m) { return m->hp.hybrid && m->mtp.nextn_eh_proj.data; }

pk_status model_mtp_draft(model_ctx *c, const model_batch *b, const float *h_in, float *logits, float *h_out)
{
    const model *m = c->m;
    pk_status st = check_batch(c, b);
    if (st) return st;
    if (!c->mtp || b->n_tokens > c->p.n_ubatch) return PK_EINVAL;
    if ((st = kv_find_slot(c->kv, b->n_tokens, c->cells))) return st;
    model_pass_begin(m);
    for (int i = 0; i < b->n_tokens; i++) {
        rope_angles(m, b->pos[i], c->rope + (size_t)i * m->hp.n_rot);
        c->tok_pos[i] = b->pos[i];
        c->tok_cell[i] = c->cells[i];
        kv_cell_set(c->kv, c->cells[i], b->pos[i], b->seq[i], b->n_seq[i]);
    }
    build_visibility(c, b, 0, b->n_tokens);
    mtp_prepare(c, b, 0, b->n_tokens, true, h_in);
    mtp_job_args mj = { .c = c, .b = b, .n_tok = b->n_tokens, .draft = true, .h_out = h_out, .logits = logits };
    tp_run(c->tp, mtp_job, &mj);
    model_pass_end(m);
    return PK_OK;
}

/* ---- context shift ---- */

/* One cache's part of a shift (window: kvw's). */
static pk_status shift_cache(model_ctx *c, bool window, kv_seq seq, kv_pos p0, kv_pos p1, kv_pos delta)
{
    const model_hparams *hp = &c->m->hp;
    kv_cache *kv = window ? c->kvw : c->kv;
    /* Validates (shared cells, overflow) and moves the positions, or
     * changes nothing; the rows are rotated after, only when it moved. */
    int end = kv_cells_end(kv);
    bool *moved = calloc((size_t)MAX(end, 1), sizeof *moved);
    if (!moved) return PK_ENOMEM;
    for (int i = 0; i < end; i++) {
        kv_pos pos = kv_cell_pos(kv, i);
        moved[i] = pos >= 0 && kv_seqset_has(kv_cell_seqs(kv, i), seq) && pos >= (p0 < 0 ? 0 : p0) &&
                   (p1 < 0 || pos < p1) && (int64_t)pos + delta >= 0;
    }
    pk_status st = kv_seq_add(kv, seq, p0, p1, delta);
    if (st != PK_OK || delta == 0) {
        free(moved);
        return st;
    }
    const int n = kv_get_params(kv)->n_embd_k;
    float *cs = malloc((size_t)(hp->n_rot + hp->n_rot_swa) * sizeof *cs), *row = malloc((size_t)n * sizeof *row);
    if (!cs || !row) {
        /* The positions moved but the rows could not be rotated: drop the
         * moved cells rather than keep K rows that lie about them. */
        for (int i = 0; i < end; i++)
            if (moved[i]) kv_seq_rm(kv, seq, kv_cell_pos(kv, i), kv_cell_pos(kv, i) + 1);
        free(cs);
        free(row);
        free(moved);
        return PK_ENOMEM;
    }
    rope_angles(c->m, delta, cs);
    for (int kvl = 0; kvl < hp->n_layer_attn + c->p.mtp; kvl++) {
        if (c->kvw && (bool)c->kvl_swa[kvl] != window) continue;
        /* Gemma 4's sliding layers: their heads, and the second RoPE row */
        const bool swa = hp->arch == MODEL_GEMMA4 && c->kvl_swa[kvl];
        const int nk = swa ? hp->n_head_kv_swa : hp->n_head_kv, hdk = swa ? hp->head_dim_swa : hp->head_dim_k;
        const int n_rot = swa ? hp->n_rot_swa : hp->n_rot;
        const float *rcs = swa ? cs + hp->n_rot : cs;
        for (int i = 0; i < end; i++) {
            if (!moved[i]) continue;
            void *k = kv_k_row(kv, c->kvl_idx[kvl], i);
            tq_dequantize_row(c->p.type_k, k, row, nk * hdk);
            for (int h = 0; h < nk; h++) fwd_rope_head(row + h * hdk, rcs, n_rot, hp->rope_type);
            kv_put(c, c->p.type_k, row, k, nk * hdk);
        }
    }
    free(cs);
    free(row);
    free(moved);
    return PK_OK;
}

pk_status model_kv_shift(model_ctx *c, kv_seq seq, kv_pos p0, kv_pos p1, kv_pos delta)
{
    pk_status st = shift_cache(c, false, seq, p0, p1, delta);
    if (st != PK_OK || !c->kvw) return st;
    model_swa_unpin(c, seq, -1);   /* their positions moved */
    if ((st = shift_cache(c, true, seq, p0, p1, delta)) != PK_OK)
        kv_seq_rm(c->kvw, seq, -1, -1);   /* no window lies about its positions */
    return st;
}
