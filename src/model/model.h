/*
 * model.h - llama-family models (llama, qwen2, qwen3, qwen3moe, gpt-oss), Gemma 4's
 * dense models (gemma4: model_gemma.c) and the Qwen3.5
 * hybrids (qwen35, qwen35moe: gated DeltaNet and gated attention layers,
 * docs/hybrid.md): hyper-parameters, weights from a GGUF, and the forward
 * pass of one batch.
 *
 * DESIGN
 *   model_load maps the file (and copies the weights into huge pages
 *   behind the first passes, model_copy.c), reads the
 *   architecture's hyper-parameters and resolves every tensor of every layer,
 *   checking its type and shape.  A model is immutable and may be shared.
 *
 *   A model_ctx holds what one forward pass needs: the KV cache (cells with
 *   sequence sets, kv.h), the threadpool and scratch buffers sized at
 *   creation for n_ubatch tokens, so model_decode allocates nothing.
 *
 *   model_decode evaluates a batch of tokens from any number of sequences:
 *   each token has a position, a set of sequence ids (its cell joins all of
 *   them) and a flag saying whether its logits are wanted.  A token attends
 *   to the cells of its FIRST sequence id whose position is <= its own (so
 *   sharing a prefix is just membership).  Batches larger than n_ubatch run
 *   in chunks of n_ubatch (prefill in chunks).
 *
 *     per layer:  x += Wo * attn(rope(norm_q(Wq*n(x) + bq)), rope(norm_k(Wk*n(x) + bk)), Wv*n(x) + bv)
 *                 x += Wd * (silu(Wg*n(x)) * (Wu*n(x)))
 *     logits = Wout * n(x)   (Wout = token_embd when tied)
 *
 *   Numerics follow the reference engine: activations are converted to the
 *   weight type's vec_dot_type before each matrix product, RMSNorm sums in
 *   double, RoPE angles are a running float product, softmax sums each block
 *   of cells in float and the running total in double,
 *   and with an F16 cache the query is rounded to F16 before K·Q.
 *
 * Threads: a model is read-only after load.  A model_ctx belongs to one
 * thread (the engine thread); model_decode runs its compute on the pool.
 */
#ifndef MODEL_H
#define MODEL_H

#include "../common/pk.h"
#include "../gguf/gguf.h"
#include "../kv/kv.h"
#include "../kv/rs.h"
#include "../tensor/tp.h"
#include "../tokenizer/tok.h"

typedef enum model_arch {
    MODEL_LLAMA = 1, MODEL_QWEN2, MODEL_QWEN3, MODEL_QWEN35, MODEL_QWEN35MOE, MODEL_QWEN3MOE, MODEL_GPTOSS,
    MODEL_GEMMA4
} model_arch;
/* How a MoE router's logits become the chosen experts' weights: softmax
 * over all, the k best renormalized (qwen3moe, qwen35moe); or the k best
 * logits, softmax over those k (gpt-oss). */
typedef enum model_gate { MODEL_GATE_SOFTMAX = 0, MODEL_GATE_TOPK_SOFTMAX } model_gate;
/* An expert's activation: silu(g) * u, gpt-oss's clamped variant
 * min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1), or
 * Gemma 4's gelu_tanh(g) * u. */
typedef enum model_act { MODEL_ACT_SWIGLU = 0, MODEL_ACT_SWIGLU_OAI, MODEL_ACT_GEGLU } model_act;
typedef enum model_rope { MODEL_ROPE_NORM = 0, MODEL_ROPE_NEOX = 2 } model_rope;

typedef struct model_hparams {
    model_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim_k;       /* key_length, n_embd / n_head by default */
    int32_t head_dim_v;
    int32_t n_ff;
    int32_t n_rot;            /* rope dimension count */
    model_rope rope_type;
    float rope_freq_base;
    float rope_freq_scale;    /* 1 / linear (or YaRN) scaling factor */
    /* YaRN (rope.scaling.type yarn): frequencies between the corrected
     * dims blend interpolation and extrapolation; cos and sin are scaled */
    bool rope_yarn;
    float rope_yarn_corr[2];  /* the blend's first and last dim pair */
    float rope_mscale;        /* what cos and sin are multiplied by (1 without YaRN) */
    float rms_eps;
    bool tied_output;         /* logits use token_embd */

    /* Hybrids (qwen35, qwen35moe): n_layer counts the trunk's layers; the
     * file's block_count adds n_layer_nextn MTP blocks after them. */
    bool hybrid;
    int32_t n_layer_nextn;
    int32_t n_layer_attn;     /* layers with KV cells (every layer when not hybrid) */
    int32_t ssm_d_conv;       /* convolution taps */
    int32_t ssm_d_state;      /* DeltaNet key and value head size */
    int32_t ssm_n_k_heads;    /* key (and query) heads */
    int32_t ssm_n_v_heads;    /* value heads, a multiple of ssm_n_k_heads */
    /* MoE (qwen3moe, qwen35moe, gpt-oss, gemma4's 26B-A4B): experts, chosen
     * per token, and their FFN sizes */
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    model_gate moe_gate;
    model_act moe_act;
    /* sliding-window layers (gpt-oss: every other layer from the first;
     * gemma4: the file's pattern) see the n_swa positions up to their own;
     * 0: none */
    int32_t n_swa;

    /* Gemma 4: the sliding-window layers' own head size (keys = values),
     * KV heads, rotated dims and RoPE base (scale 1, no factors); the
     * global layers' are head_dim_k, n_head_kv, n_rot, rope_freq_base,
     * with rope_freqs.  0 elsewhere. */
    int32_t head_dim_swa, n_head_kv_swa, n_rot_swa;
    float rope_freq_base_swa;
    /* Gemma 4 E2B / E4B: each layer's input of this width from the token
     * and the embedding (model_gemma.c); 0: none.  n_ff is the widest
     * layer's when layers differ (E2B's double-wide KV-sharing layers). */
    int32_t n_embd_per_layer;
    float embd_scale;         /* token embeddings times this (Gemma 4: sqrt(n_embd)); 0: none */
    float logit_softcap;      /* logits = c tanh(logits / c); 0: none */
} model_hparams;

/* One weight matrix or vector: n_rows rows of n_cols values of `type`. */
typedef struct model_w {
    int type;                 /* tq_type; 0 with data NULL when absent */
    const void *data;
    int64_t n_cols, n_rows;
    int32_t n_mat;            /* > 1: that many matrices of n_rows / n_mat rows, stacked (experts) */
} model_w;

/* A layer's weights; what a layer lacks stays zeroed.  On a hybrid, wq
 * gives each head's query and output gate ([q | gate], 2 x head_dim rows a
 * head), ffn_norm is the file's post_attention_norm, and a recurrent layer
 * has the ssm_* weights instead of wq..wo.  Expert matrices hold n_expert
 * matrices one after another (n_rows = n_expert x the rows of one). */
typedef struct model_layer {
    model_w attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm;
    model_w sinks;            /* [n_head] F32: a logit per head that joins the softmax's sum (gpt-oss) */
    model_w ffn_norm, w_gate, w_up, w_down;
    /* gated DeltaNet */
    model_w ssm_qkv, ssm_z, ssm_conv, ssm_dt, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
    /* MoE: router, experts, shared expert and its gate */
    model_w moe_router, exp_gate, exp_up, exp_down, sh_gate, sh_up, sh_down, sh_router;
    /* gpt-oss: the router's bias, the experts' ([n_expert] rows each) */
    model_w moe_router_b, exp_gate_b, exp_up_b, exp_down_b;
    /* Gemma 4: norms of the attention's and the FFN's outputs before the
     * residual adds, and a scalar the layer's output is multiplied by */
    model_w attn_post_norm, ffn_post_norm, out_scale;
    /* Gemma 4 26B-A4B: each expert's gate and up as one matrix (gate
     * rows first), the router input's scale, each expert's output scale,
     * the experts' pre-norm and the post-norms of the dense MLP (kept as
     * a shared expert) and of the experts' sum */
    model_w exp_gate_up, moe_router_s, exp_down_s, ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2;
    /* Gemma 4 E2B / E4B: the per-layer input's gate (n_embd -> width),
     * projection back and its norm */
    model_w pl_gate, pl_proj, pl_post_norm;
    /* MTP (nextn) block: loaded and checked, run by speculation */
    model_w nextn_eh_proj, nextn_enorm, nextn_hnorm, nextn_head_norm, nextn_embd, nextn_head;
    /* the layer's index among the layers with KV cells (-1: recurrent) and
     * among the recurrent ones (-1: attention) */
    int32_t kv_layer, rs_layer;
    bool swa;                 /* a sliding-window layer (hp.n_swa) */
    bool kv_reuse;            /* stores no K/V: attends over kv_layer, an earlier layer's cells */
} model_layer;

typedef struct model model;

/* Where model_load keeps the weights.  Either way the file is mapped and
 * the model computes from the mapping at once; with MODEL_COPY a thread
 * reads the weights into private huge pages (common/huge.h), which decode
 * streams faster, and the first forward pass after the copy is complete
 * switches to them (model_copy.c). */
typedef enum model_hold {
    MODEL_COPY,   /* the default */
    MODEL_MMAP,   /* the mapping only: no copy, pages shared with other processes */
} model_hold;

/* Loads a GGUF model (and its tokenizer).  PK_EIO/PK_EFORMAT/PK_EUNSUPPORTED
 * /PK_ENOMEM with a one-line reason in err. */
pk_status model_load(const char *path, model_hold hold, model **out, char *err, size_t err_len);
/* Whether the passes now read the huge-page copy rather than the mapping. */
bool model_is_copy(const model *m);
/* Bytes of weights the copy holds in tiled layouts (tq.h; 0 before the
 * switch, with MODEL_MMAP, or where the CPU has no tiled kernels). */
size_t model_tiled_bytes(const model *m);
/* Returns once the copy is complete or has failed (benchmarks wait for it;
 * the next model_decode then switches). */
void model_wait_copy(const model *m);
void model_free(model *m);                         /* NULL is a no-op */

/* Sleeping (--sleep-idle-seconds): release gives the weights' memory back
 * to the OS (the huge-page copy is freed, the mapped pages dropped; the
 * mapping, the vocabulary and the metadata stay, so tokenizing still
 * works); reload brings them back as model_load did (computing from the
 * mapping at once, the copy made behind the first passes).  Both must run
 * while no forward pass runs or starts over the model: the caller is its
 * only user (the engine thread, with its contexts freed).  Idempotent. */
void model_weights_release(const model *m);
void model_weights_reload(const model *m);
bool model_weights_released(const model *m);        /* any thread */
const model_hparams *model_get_hparams(const model *m);
const tok_vocab *model_vocab(const model *m);
const gguf_ctx *model_gguf(const model *m);
const char *model_arch_name(model_arch a);
/* Hybrids: the bytes of one sequence's recurrent state (every DeltaNet
 * layer's convolution window and matrices, F32); 0 otherwise. */
size_t model_state_bytes(const model *m);
/* Bytes of weights read per decoded token (every matrix once; of a MoE's
 * experts, the share a token routes to). */
size_t model_weight_bytes(const model *m);
/* Multiply-adds of the layers' matrices per token (the logits' product
 * left out; of a MoE's experts, the share a token routes to). */
double model_layer_macs(const model *m);
/* The model's own description, e.g. "qwen2 24L 896d q8_0". */
const char *model_desc(const model *m);

typedef struct model_ctx_params {
    int32_t n_ctx;            /* KV cells */
    int32_t n_ubatch;         /* tokens per forward chunk */
    int32_t n_threads;
    tq_type type_k, type_v;   /* the K/V cache's types (model_kv_types_ok) */
    int32_t n_rs;             /* hybrids: recurrent state slots (rs.h), 0: 8 */
    bool mtp;                 /* run the MTP block with every pass (model_has_mtp): its K/V are one
                                 more layer of the cache; model_mtp_draft drafts with it */
    int32_t mtp_seqs;         /* ... and sequences [0, mtp_seqs) keep their recent hidden states */
    bool swa_full;            /* sliding-window layers keep every cell in the one cache (llama.cpp's
                                 --swa-full); else their cells are apart and freed behind the window */
    tp_pool *tp;              /* a threadpool to run on, borrowed (a draft model's context runs
                                 on its target's, so the two never spin against each other);
                                 NULL: its own of n_threads */
} model_ctx_params;

typedef struct model_ctx model_ctx;

/* Why m's K/V cache cannot hold types k and v (a type no cache takes, or a
 * block format whose block does not divide a head), as one sentence; NULL
 * when it can.  model_ctx_new refuses what this refuses (PK_EINVAL). */
const char *model_kv_types_refusal(const model *m, tq_type k, tq_type v);
static inline bool model_kv_types_ok(const model *m, tq_type k, tq_type v) { return !model_kv_types_refusal(m, k, v); }

pk_status model_ctx_new(const model *m, const model_ctx_params *p, model_ctx **out);
void model_ctx_free(model_ctx *c);                 /* NULL is a no-op */
kv_cache *model_ctx_kv(model_ctx *c);
/* The sliding-window layers' cells when they are apart from kv (a model
 * with a window and global layers, without swa_full); NULL otherwise. */
kv_cache *model_ctx_kv_swa(model_ctx *c);
tp_pool *model_ctx_tp(model_ctx *c);
/* The recurrent states of a hybrid's sequences (rs.h); NULL otherwise. */
rs_cache *model_ctx_rs(model_ctx *c);
/* Every sequence's cells and states freed (a benchmark's fresh start). */
void model_ctx_clear(model_ctx *c);
const model_ctx_params *model_ctx_get_params(const model_ctx *c);

#define MODEL_MAX_TOKEN_SEQS 8   /* sequence ids one batch token may carry */

typedef struct model_batch {
    int32_t n_tokens;
    const int32_t *token;      /* [n_tokens] */
    const kv_pos *pos;         /* [n_tokens] */
    const int32_t *n_seq;      /* [n_tokens] ids per token, 1..MODEL_MAX_TOKEN_SEQS */
    const kv_seq (*seq)[MODEL_MAX_TOKEN_SEQS];  /* [n_tokens] */
    const bool *want_logits;   /* [n_tokens] */
} model_batch;

/*
 * Evaluates the batch: stores every token's K/V in a free cell joined to its
 * sequences, and writes n_vocab logits for each token that wants them, in
 * batch order, to logits ([n_wanted][n_vocab]).  Returns PK_EFULL when the
 * cache has too few free cells (nothing changed), PK_EINVAL for a bad token
 * id, position or sequence id (nothing changed).  Engine thread only.
 *
 * On a hybrid each token carries one sequence id, a sequence's tokens are
 * contiguous in the batch at consecutive positions that continue its
 * recurrent state (rs_pos; a sequence without one starts at position 0 with
 * a fresh state), else PK_EINVAL; PK_EFULL when no state slot is free.
 */
pk_status model_decode(model_ctx *c, const model_batch *b, float *logits);

/*
 * Qwen3.5's MTP block (model_mtp.c).  With model_ctx_params.mtp, every
 * pass also runs the block over its tokens, so its K/V follow every
 * sequence like the trunk's, and the trunk's normed hidden states of the
 * last MODEL_MTP_RING positions of sequences below mtp_seqs are kept.
 * model_mtp_draft runs only the block over b (one token per sequence, at
 * and after the sequence's end, n_tokens <= n_ubatch): a token's input
 * hidden state is h_in's row (NULL: the kept state of the position
 * before), its logits go to logits and the block's normed output to h_out
 * ([n_tokens][n_embd], the next round's h_in).  Its cells hold only the
 * block's K/V: the caller cuts them before the next model_decode.  The
 * recurrent states do not move.  PK_EINVAL without MTP or for a bad batch,
 * PK_EFULL when cells are short.  Engine thread only.
 */
#define MODEL_MTP_RING 80
bool model_has_mtp(const model *m);
pk_status model_mtp_draft(model_ctx *c, const model_batch *b, const float *h_in, float *logits, float *h_out);

/* Hybrids: a checkpoint of seq's recurrent state is kept when it reaches
 * pos (rs_checkpoint; a chunk ends there).  MODEL_CKPT_PENDING are pending
 * at most (another replaces the oldest); pos < 0 cancels them all. */
#define MODEL_CKPT_PENDING 4
void model_rs_checkpoint_at(model_ctx *c, kv_seq seq, kv_pos pos);

/*
 * Sliding windows apart (model_ctx_kv_swa): a token at p reads the window
 * layers' cells at [p - n_win, p], so a sequence can be continued at P
 * only while it holds their cells [P - n_win, P): at its end, and at the
 * pins it keeps (docs/models.md, "Sliding windows").  Each batch first
 * lets go of the window cells its sequences no longer need: those before
 * the window of the batch's first position that no pin's window holds.
 * MODEL_SWA_PINS pins a sequence (another replaces the oldest).
 */
#define MODEL_SWA_PINS 4
int32_t model_swa_window(const model_ctx *c);        /* n_win; 0 without kvw */
void model_swa_pin(model_ctx *c, kv_seq seq, kv_pos pos);
void model_swa_unpin(model_ctx *c, kv_seq seq, kv_pos above);   /* pins > above go (-1: all) */
int model_swa_pins(const model_ctx *c, kv_seq seq, kv_pos *out); /* ascending; the count */
/* seq, continued at end, lets go of the window cells it no longer needs. */
void model_swa_trim(model_ctx *c, kv_seq seq, kv_pos end);

/*
 * Context shift: moves seq's cells at positions [p0, p1) by delta, with
 * their K rows rotated by delta (RoPE angles are linear in the position,
 * so rotating by delta is computing at the new position), as llama.cpp's
 * K-shift does.  PK_EINVAL, with nothing changed, when one of the cells is
 * held by another sequence too (shared cells are immutable) or a position
 * would leave [0, INT32_MAX].  Engine thread only.
 */
pk_status model_kv_shift(model_ctx *c, kv_seq seq, kv_pos p0, kv_pos p1, kv_pos delta);

#endif
