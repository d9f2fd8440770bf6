/*
 * ref.h - loading ../shared/reference JSON files and running a model over
 * them; shared by the model tests.  Header-only so each test stays one file.
 */
#ifndef REF_H
#define REF_H

#include <jansson.h>

#include "../src/model/model.h"
#include "../src/sample/smp.h"
#include "../src/tokenizer/tok.h"
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

/* A reference result's prompt, tokenized as llama.cpp did (BOS as the
 * vocabulary says) into ids[cap] (*n), checked against its prompt_tokens,
 * and decoded alone in a cleared cache: the first generated position's
 * logits in logits.  False when the tokens differ (a CHECK failed). */
static inline bool ref_first_logits(model_ctx *ctx, const tok_vocab *voc, json_t *res, int32_t *ids, int32_t cap,
                                    int32_t *n, float *logits)
{
    const char *prompt = json_string_value(json_object_get(res, "prompt"));
    json_t *jtok = json_object_get(res, "prompt_tokens");
    *n = 0;
    CHECK(prompt && tok_encode(voc, prompt, strlen(prompt), true, false, ids, cap, n) == PK_OK);
    bool same = *n == (int32_t)json_array_size(jtok);
    for (int32_t i = 0; same && i < *n; i++) same = ids[i] == json_integer_value(json_array_get(jtok, i));
    CHECK(same);
    if (!same) return false;
    kv_clear(model_ctx_kv(ctx));
    static ref_batch rb;
    ref_batch_make(&rb, ids, *n, 0, 0, false);
    CHECK(model_decode(ctx, &rb.b, logits) == PK_OK);
    return true;
}

/* The largest |logit| of a reference's first_position_top10. */
static inline double ref_top_maxabs(json_t *top)
{
    double m = 0;
    for (size_t i = 0; i < json_array_size(top); i++)
        m = fmax(m, fabs(json_real_value(json_object_get(json_array_get(top, i), "logit"))));
    return m;
}

#endif
