/* model_fwd.h - the forward pass's context and the steps the llama-family
 * pass (model_forward.c) and the hybrids' (model_hybrid.c) share.  Private
 * to src/model. */
#ifndef MODEL_FWD_H
#define MODEL_FWD_H

#include "model_impl.h"
#include "../tensor/tk.h"

#include <stdatomic.h>

#define FWD_MAX_LISTS 32

struct model_ctx {
    const model *m;
    model_ctx_params p;
    kv_cache *kv;        /* every attention layer's cells, or with kvw the global layers' */
    kv_cache *kvw;       /* the sliding-window layers' cells, freed behind the window (NULL:
                          * in kv, every cell kept: --swa-full, or no window) */
    int32_t n_win;       /* kvw: the positions before a token its window layers read (n_swa - 1) */
    int8_t *kvl_swa;     /* [KV layers] a window layer's (its cells in kvw when there is one) */
    int32_t *kvl_idx;    /* [KV layers] its layer in its cache */
    kv_pos swa_pin[KV_MAX_SEQ][MODEL_SWA_PINS];   /* kvw: windows kept besides the end, -1 */
    tp_pool *tp;
    const tk_ops *ops;

    /* Scratch, [n_ubatch][width] unless said otherwise. */
    float *x;            /* residual stream [n_embd] */
    float *xn;           /* normed input [max(n_embd, q width, n_ff)] */
    float *q, *k, *v;    /* [n_head*hd_k], [n_head_kv*hd_k], [n_head_kv*hd_v] */
    float *att;          /* [n_head*hd_v] */
    float *gate, *up;    /* [n_ff] */
    float *tmp;          /* [n_embd] product output before the residual add */
    float *rope;         /* [n_rot/2][2] cos, sin per token */
    void *mm_scratch;    /* converted activations for tk_matmul_job */
    char *attn_buf;      /* [n_threads][attn_bytes]: tk_attend scratch, query and output rows */
    size_t attn_bytes;
    atomic_int attn_next;   /* next attention unit; reset by thread 0 before the phase */
    float *priv;         /* [n_threads][priv_floats]: each thread's residual, normed input
                          * and SwiGLU output when decoding (see layers_job) */
    size_t priv_floats;

    int *cells;          /* [n_ctx] cells of the whole batch */
    uint64_t *vis;       /* [FWD_MAX_LISTS][n_ctx] (pos << 32 | cell), sorted */
    int32_t *vis_cells;  /* [FWD_MAX_LISTS][n_ctx] the cells of vis, same order */
    int32_t vis_n[FWD_MAX_LISTS];
    kv_seq vis_seq[FWD_MAX_LISTS];
    int n_lists;
    int32_t list_start[FWD_MAX_LISTS + 1];   /* tokens of list l: tok_order[list_start[l] ..] */
    int32_t *tok_order;  /* [n_ubatch] chunk tokens grouped by list, in chunk order */
    int32_t *tok_list;   /* [n_ubatch] list of each token */
    int32_t *tok_nvis;   /* [n_ubatch] visible cells of each token */
    int32_t *tok_vis0;   /* [n_ubatch] its first visible cell in a sliding-window layer (hp.n_swa) */
    kv_pos *tok_pos;     /* [n_ubatch] */
    int32_t *tok_cell;   /* [n_ubatch] */
    int32_t *out_rows;   /* [n_ubatch] chunk rows that want logits */
    /* kvw: the same for the window layers' cells (tok_vis0 then indexes these) */
    int *cells_w;
    uint64_t *vis_w;
    int32_t *vis_cells_w, vis_n_w[FWD_MAX_LISTS], *tok_nvis_w, *tok_cell_w;

    rs_cache *rs;        /* hybrids: the sequences' recurrent states */
    kv_pos ckpt_at[KV_MAX_SEQ][MODEL_CKPT_PENDING];   /* hybrids: checkpoint each sequence there, -1 */
    struct hy_ctx *hy;   /* hybrids: model_hybrid.c's scratch */
    struct moe_ctx *moe; /* MoE models: model_moe.c's scratch */
    struct mtp_ctx *mtp; /* p.mtp: model_mtp.c's ring and scratch */
    struct gm_ctx *gm;   /* gemma4: model_gemma.c's scratch */
};


/* y = W x for the chunk's n_tok rows (a phase of a job: ends with a barrier). */
void fwd_matmul(int ith, int nth, model_ctx *c, const model_w *w, const float *x, int n_tok, float *y);
/* Products of up to 8 matrices with the same input. */
void fwd_matmul_set(int ith, int nth, model_ctx *c, const model_w *const *ws, float *const *ys, int n,
                    const float *x, int n_tok);
/* A layer's attention shape: head sizes, KV heads, the K.Q scale. */
typedef struct fwd_attn_dims { int hd_k, hd_v, n_head_kv; float scale; } fwd_attn_dims;
/* The model's own (every layer's but Gemma 4's): scale 1 / sqrt(hd_k). */
fwd_attn_dims fwd_dims(const model_hparams *hp);
/* Attention of the chunk's queries (c->q, [n_head][d.hd_k] a token) over
 * the cells of KV layer kvl (of layer L: its window and sinks), into c->att
 * ([n_head][d.hd_v] a token); attn_next reset to 0 before the phase. */
void fwd_attention(model_ctx *c, int ith, const model_layer *L, int kvl, fwd_attn_dims d);
/* The chunk's token t's K and V (n_head_kv heads, F32) into its cell of KV
 * layer kvl, in the cache's types; _n: nk and nv values (a row's first). */
void fwd_kv_store(model_ctx *c, int kvl, int t, const float *k, const float *v);
void fwd_kv_store_n(model_ctx *c, int kvl, int t, const float *k, int nk, const float *v, int nv);
void fwd_rope_head(float *x, const float *cs, int n_rot, model_rope type);
/* cos, sin of each of n_rot / 2 dim pairs at pos (with YaRN where hp has
 * it; ff: frequency divisors or NULL). */
void fwd_rope_angles(const model_hparams *hp, int n_rot, float base, float scale, const float *ff, kv_pos pos,
                     float *cs);
void *fwd_alloc(size_t n);   /* zeroed, 64-byte aligned */

/* model_hybrid.c */
/* model_moe.c: the MoE FFN of the chunk's normed inputs xn into c->tmp,
 * routed by the router's product of xr (xn itself but for Gemma 4)
 * (a phase of a job; rows of c->tmp are written by the thread that owns
 * the token, tp_split's share, so a reader of other rows waits at a
 * barrier). */
pk_status moe_ctx_new(model_ctx *c);
void moe_ctx_free(model_ctx *c);
void fwd_moe(model_ctx *c, int ith, int nth, const model_layer *L, int T, const float *xn, const float *xr);

/* model_gemma.c: Gemma 4's layers over a chunk (the job tp_run runs);
 * each token's RoPE rows in c->rope are [n_rot global | n_rot_swa]. */
pk_status gm_ctx_new(model_ctx *c);
void gm_ctx_free(model_ctx *c);
void gm_layers_job(int ith, int nth, void *arg);
/* The RoPE rows of one token at pos (global then sliding). */
void gm_rope_angles(const model *m, kv_pos pos, float *cs);
/* Chunk row i holds token (E2B / E4B's per-layer inputs read its row). */
void gm_token(model_ctx *c, int i, int32_t token);
/* h = gelu(g) * u, the reference engine's GEGLU (once gm_ctx_new ran). */
void gm_geglu(const float *g, const float *u, float *h, int n);

pk_status hy_ctx_new(model_ctx *c);
void hy_ctx_free(model_ctx *c);
/* The batch's hybrid rules (model_decode in model.h); PK_EFULL when its new
 * sequences need more state slots than are free.  Changes nothing. */
pk_status hy_check_batch(const model_ctx *c, const model_batch *b);
/* Before the first chunk: fresh states for the sequences that start. */
void hy_begin_batch(model_ctx *c, const model_batch *b);
/* The chunk's layers (the job tp_run runs), and after it the states'
 * positions advanced. */
void hy_layers_job(int ith, int nth, void *arg);
/* One layer of a hybrid (DeltaNet or gated attention, then the FFN) over
 * the chunk's T rows of c->x (a phase of a job: ends with a barrier). */
void hy_layer(model_ctx *c, int ith, int nth, const model_layer *L, int T);
void hy_chunk_done(model_ctx *c, const model_batch *b, int i0, int n);
/* A checkpoint of s is asked for at pos. */
bool hy_ckpt_pending(const model_ctx *c, kv_seq s, kv_pos pos);

typedef struct fwd_job {
    model_ctx *c;
    int n_tok;           /* tokens in this chunk */
} fwd_job;

/* model_mtp.c: the MTP block over a chunk (b's tokens [i0, i0 + n_tok)):
 * after a pass's trunk (draft false: its K/V, and the chunk's h kept), or
 * as a draft (its normed output to h_out, its logits to logits). */
typedef struct mtp_job_args {
    model_ctx *c;
    const model_batch *b;
    int i0, n_tok;
    bool draft;
    float *h_out, *logits;
} mtp_job_args;
pk_status mtp_ctx_new(model_ctx *c);
void mtp_ctx_free(model_ctx *c);
/* Each token's h_{p-1}: h_in's row (drafts after the first), else the row
 * before it in the chunk (passes), else its sequence's kept one. */
void mtp_prepare(model_ctx *c, const model_batch *b, int i0, int n, bool draft, const float *h_in);
void mtp_job(int ith, int nth, void *arg);

#endif
