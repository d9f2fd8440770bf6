/* model_impl.h - the model's private layout, shared by model_load.c and
 * model_forward.c only. */
#ifndef MODEL_IMPL_H
#define MODEL_IMPL_H

#include "model.h"
#include "../tensor/tq.h"

#include <pthread.h>
#include <stdatomic.h>

struct model {
    gguf_ctx *gguf;           /* owns the mapping; model_w point into it or into copy_buf */
    tok_vocab *vocab;
    model_hparams hp;
    model_w tok_embd, out_norm, output, rope_freqs;
    /* Gemma 4 E2B / E4B: every layer's token input in one row a token
     * ([n_layer][n_embd_per_layer]), the embedding's projection to the
     * same and its norm */
    model_w pl_tok_embd, pl_model_proj, pl_proj_norm;
    model_layer *layers;      /* [n_layer] */
    model_layer mtp;          /* hybrids: the MTP (nextn) block, when the file has one */
    size_t weight_bytes;
    double layer_macs;
    char desc[96];
    model_hold hold;          /* model_load's choice: what model_weights_reload restores */
    atomic_bool released;     /* model_weights_release: no weight in memory until reload;
                                 written by the model's user, read by any thread */

    /* model_copy.c: the weights read into huge pages in the background */
    _Atomic int copy_state;   /* COPY_* */
    atomic_int passes;        /* forward passes running, -1 while switching to the copy */
    atomic_bool copy_stop;    /* model_free: the copier stops at its next read */
    pthread_t copier;
    bool copier_started;      /* joined by the switch or by model_free */
    char *copy_buf;
    size_t copy_off, copy_len;   /* the span of the file holding weights */
};

enum { COPY_NONE, COPY_RUNNING, COPY_READY, COPY_FAILED, COPY_ADOPTED };

/* model_load.c: the bytes of one weight's data (0 when absent); fn on
 * every model_w of m (token_embd, out_norm, output, rope_freqs, then each
 * layer's), where a tied output is the same data as token_embd. */
size_t model_w_bytes(const model_w *w);
void model_each_weight(model *m, void (*fn)(model_w *w, void *arg), void *arg);

/* model_load.c: metadata "<arch>.<suffix>" (absent optional keys keep *out)
 * and tensors checked against their shape (n_mat > 1: that many stacked
 * matrices), for the architecture-specific loaders. */
pk_status model_arch_int(const gguf_ctx *g, const char *arch, const char *suffix, bool required, int32_t lo,
                         int32_t hi, int32_t *out, char *err, size_t err_len);
pk_status model_arch_float(const gguf_ctx *g, const char *arch, const char *suffix, float *out, char *err,
                           size_t err_len);
pk_status model_get_w(const gguf_ctx *g, const char *name, int64_t n_cols, int64_t n_rows, int32_t n_mat,
                      bool required, model_w *w, char *err, size_t err_len);

/* model_load_hybrid.c: the Qwen3.5 hybrids' hyper-parameters (after the
 * common ones) and weights. */
/* The experts' keys (expert_count, expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length) of an MoE architecture. */
pk_status model_moe_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len);
pk_status model_hybrid_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len);
pk_status model_hybrid_weights(model *m, char *err, size_t err_len);

/* model_load_gemma.c: Gemma 4's hyper-parameters (after the common ones)
 * and weights. */
pk_status model_gemma_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len);
pk_status model_gemma_weights(model *m, char *err, size_t err_len);

/* model_copy.c */
void model_copy_start(model *m);                     /* at the end of model_load (MODEL_COPY) */
void model_copy_free(model *m);                      /* in model_free */
/* Around every forward pass (model_decode): the switch to the copy happens
 * in a begin with no other pass running. */
void model_pass_begin(const model *m);
void model_pass_end(const model *m);

#endif
