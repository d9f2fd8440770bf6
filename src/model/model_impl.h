/* model_impl.h - the model's private layout, shared by model_load.c and
 * model_forward.c only. */
#ifndef MODEL_IMPL_H
#define MODEL_IMPL_H

#include "model.h"

struct model {
    gguf_ctx *gguf;           /* owns the mapping every model_w points into */
    tok_vocab *vocab;
    model_hparams hp;
    model_w tok_embd, out_norm, output, rope_freqs;
    model_layer *layers;      /* [n_layer] */
    size_t weight_bytes;
    char desc[96];
};

#endif
