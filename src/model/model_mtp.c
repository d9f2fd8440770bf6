/*
 * model_mtp.c - Qwen3.5's multi-token-prediction block (nextn), which
 * speculation drafts with (--spec-type draft-mtp, docs/speculative.md).
 *
 * DESIGN
 *   The block predicts the token after next: at position p its input is
 *   eh_proj([enorm(embed(x_p)) | hnorm(h_{p-1})]), with h_{p-1} the trunk's
 *   normed last hidden state at p - 1 (the state that predicted x_p), then
 *   one gated-attention layer with its FFN, then shared_head_norm and the
 *   output matrix (the block's own where the file has them, the trunk's
 *   otherwise), as llama.cpp's qwen35 MTP graph.
 *
 *   Its attention reads its own K/V of every earlier position, so a context
 *   that runs it (model_ctx_params.mtp) has one more attention layer in its
 *   cache and every pass runs the block over its tokens after the trunk
 *   (mtp_pass): the block's K/V then live in the same cells as the trunk's
 *   and follow every sequence operation (shares, cuts, parking, images)
 *   with no code of their own.  A token's h_{p-1} is the row before it in
 *   the chunk, or the kept state of its sequence (a ring of the last
 *   MODEL_MTP_RING positions, for sequences below mtp_seqs), or zeros
 *   where neither exists (a pool's first token of a chunk, a history
 *   brought back from elsewhere): the block's K/V there are then less
 *   right, which costs guesses, never output.
 *
 *   A draft (model_mtp_draft) runs only the block over one token per
 *   sequence at the positions after its end; its output's normed state is
 *   the next round's h.  Its cells hold the block's K/V only and are cut
 *   by the caller before the next pass.
 */
#include "model_fwd.h"

#include <stdlib.h>
#include <string.h>

#define RING MODEL_MTP_RING

struct mtp_ctx {
    float *ring;        /* [mtp_seqs][RING][n_embd]  a sequence's recent h, by position % RING */
    kv_pos *tag;        /* [mtp_seqs][RING]          the position each holds, -1 none */
    float *hrow;        /* [nub][n_embd]             this chunk's h (pass), the block's output (draft) */
    float *cat;         /* [nub][2 n_embd]           the block's input before eh_proj */
    const float **prev; /* [nub]                     each token's h_{p-1}, NULL: zeros */
};

void mtp_ctx_free(model_ctx *c)
{
    struct mtp_ctx *t = c->mtp;
    if (!t) return;
    free(t->ring);
    free(t->tag);
    free(t->hrow);
    free(t->cat);
    free(t->prev);
    free(t);
    c->mtp = NULL;
}

pk_status mtp_ctx_new(model_ctx *c)
{
    const size_t E = (size_t)c->m->hp.n_embd, nub = (size_t)c->p.n_ubatch, ns = (size_t)MAX(c->p.mtp_seqs, 1);
    struct mtp_ctx *t = calloc(1, sizeof *t);
    if (!t) return PK_ENOMEM;
    c->mtp = t;
    if (!(t->ring = fwd_alloc(ns * RING * E * sizeof(float))) || !(t->tag = malloc(ns * RING * sizeof(kv_pos))) ||
        !(t->hrow = fwd_alloc(nub * E * sizeof(float))) || !(t->cat = fwd_alloc(nub * 2 * E * sizeof(float))) ||
        !(t->prev = calloc(nub, sizeof *t->prev)))
        return PK_ENOMEM;
    for (size_t i = 0; i < ns * RING; i++) t->tag[i] = -1;
    return PK_OK;
}

/* seq's kept h at pos, or NULL. */
static const float *ring_get(const model_ctx *c, kv_seq seq, kv_pos pos)
{
    if (seq >= c->p.mtp_seqs || pos < 0) return NULL;
    size_t i = (size_t)seq * RING + (size_t)(pos % RING);
    return c->mtp->tag[i] == pos ? c->mtp->ring + i * c->m->hp.n_embd : NULL;
}

static void ring_put(model_ctx *c, kv_seq seq, kv_pos pos, const float *h)
{
    if (seq >= c->p.mtp_seqs) return;
    size_t i = (size_t)seq * RING + (size_t)(pos % RING);
    memcpy(c->mtp->ring + i * c->m->hp.n_embd, h, (size_t)c->m->hp.n_embd * sizeof(float));
    c->mtp->tag[i] = pos;
}

void mtp_prepare(model_ctx *c, const model_batch *b, int i0, int n, bool draft, const float *h_in)
{
    struct mtp_ctx *t = c->mtp;
    const int E = c->m->hp.n_embd;
    for (int i = 0; i < n; i++) {
        const int bi = i0 + i;
        const kv_seq s = b->seq[bi][0];
        if (h_in) t->prev[i] = h_in + (size_t)bi * E;
        else if (!draft && i > 0 && b->seq[bi - 1][0] == s && b->pos[bi - 1] == b->pos[bi] - 1)
            t->prev[i] = t->hrow + (size_t)(i - 1) * E;   /* the row before, computed in the job */
        else t->prev[i] = ring_get(c, s, b->pos[bi] - 1);
    }
}

void mtp_job(int ith, int nth, void *arg)
{
    const mtp_job_args *j = arg;
    const model_batch *b = j->b;
    model_ctx *c = j->c;
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const model_layer *L = &m->mtp;
    struct mtp_ctx *t = c->mtp;
    const int T = j->n_tok, E = hp->n_embd;
    const float eps = hp->rms_eps;
    const model_w *embd = L->nextn_embd.data ? &L->nextn_embd : &m->tok_embd;
    const void *head_norm = L->nextn_head_norm.data ? L->nextn_head_norm.data : m->out_norm.data;
    int64_t t0, t1;
    tp_split(T, ith, nth, &t0, &t1);

    if (!j->draft) {   /* the trunk's normed output: this chunk's h */
        for (int64_t i = t0; i < t1; i++)
            c->ops->rms_norm(c->x + i * E, NULL, m->out_norm.data, t->hrow + i * E, E, eps);
        tp_barrier(c->tp);
    }
    for (int64_t i = t0; i < t1; i++) {
        float *e = t->cat + i * 2 * E, *h = e + E;
        tq_dequantize_row_at(embd->type, embd->data, b->token[j->i0 + i], embd->n_rows, E, e);
        c->ops->rms_norm(e, NULL, L->nextn_enorm.data, e, E, eps);
        if (t->prev[i]) c->ops->rms_norm((float *)t->prev[i], NULL, L->nextn_hnorm.data, h, E, eps);   /* not written: no add */
        else memset(h, 0, (size_t)E * sizeof *h);
    }
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, &L->nextn_eh_proj, t->cat, T, c->x);
    hy_layer(c, ith, nth, L, T);
    if (!j->draft) {   /* the chunk's h kept for the drafts and passes to come */
        if (ith == 0)
            for (int i = 0; i < T; i++) ring_put(c, b->seq[j->i0 + i][0], b->pos[j->i0 + i], t->hrow + (size_t)i * E);
        return;
    }
    for (int64_t i = t0; i < t1; i++)
        c->ops->rms_norm(c->x + i * E, NULL, head_norm, j->h_out + i * E, E, eps);
    tp_barrier(c->tp);
    fwd_matmul(ith, nth, c, L->nextn_head.data ? &L->nextn_head : &m->output, j->h_out, T, j->logits);
}
