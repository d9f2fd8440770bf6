/*
 * ref.h - loading ../shared/reference JSON files and running a model over
 * them; shared by the model tests.  Header-only so each test stays one file.
 */
#ifndef REF_H
#define REF_H

#include <jansson.h>

#include "../src/model/model.h"
#include "../src/sample/smp.h"
#include "test.h"

/* One model of ../shared/models with its reference files. */
typedef struct ref_model {
    const char *name;        /* file stem */
    bool quantized;          /* looser tolerance: 1e-2 instead of 1e-3 of max |logit| */
    bool real;               /* a trained model: greedy must match all 32 tokens */
} ref_model;

static const ref_model ref_models[] = {
    { "stories260K", false, true },
    { "rand-qwen2-qwen2vocab-e64-l2-F16", false, false },
    { "rand-qwen3-qwen2vocab-e64-l2-Q8_0", true, false },
    { "rand-llama-llama3vocab-e256-l2-Q8_0", true, false },
    { "rand-llama-llama3vocab-e256-l2-Q4_0", true, false },
    { "rand-llama-llama3vocab-e256-l2-Q4_K_M", true, false },
};

static inline json_t *ref_load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) fprintf(stderr, "%s: %s (line %d)\n", path, e.text, e.line);
    return j;
}

/* A model_batch of n tokens of sequence seq at positions p0.., logits for the
 * last only. */
typedef struct ref_batch {
    kv_pos pos[4096];
    int32_t n_seq[4096];
    kv_seq seq[4096][MODEL_MAX_TOKEN_SEQS];
    bool want[4096];
    model_batch b;
} ref_batch;

static inline void ref_batch_make(ref_batch *rb, const int32_t *tok, int n, kv_pos p0, kv_seq seq, bool all_logits)
{
    ASSERT(n <= 4096);
    for (int i = 0; i < n; i++) {
        rb->pos[i] = p0 + i;
        rb->n_seq[i] = 1;
        rb->seq[i][0] = seq;
        rb->want[i] = all_logits || i == n - 1;
    }
    rb->b = (model_batch){ n, tok, rb->pos, rb->n_seq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])rb->seq, rb->want };
}

#endif
