/*
 * ref.h - loading ../shared/reference JSON files and running a model over
 * them; shared by the model tests.  Header-only so each test stays one file.
 */
#ifndef REF_H
#define REF_H

#include <jansson.h>
#include <math.h>
#include <string.h>

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
    model_ctx_clear(ctx);
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

/* What ref_check_prompt found over a model's prompts. */
typedef struct ref_tally {
    double max_first;        /* largest |diff| / max |logit| at the first positions */
    double max_rel;          /* the same with the greedy steps */
    int n_steps, n_checked;  /* greedy steps, steps with margin >= 2 eps */
    int n_free;              /* tokens the free run agrees on, all prompts */
    char full[64];           /* prompts that must match all 32 ("0 1 2") */
} ref_tally;

/* One reference prompt checked against llama.cpp's run of it with the
 * margin rule (test_types.c says it whole): its tokens, its first
 * position's top 10 (and every logit in tsv, when given) within eps = frac
 * x max |logit|, then 32 greedy steps teacher-forced, each chosen token's
 * logit within eps_s = frac_steps x max |logit| and the argmax llama.cpp's
 * wherever its margin is >= 2 eps_s. */
static inline void ref_check_prompt(const char *name, model_ctx *ctx, int32_t V, const tok_vocab *voc, json_t *res,
                                    float *logits, double frac, double frac_steps, const char *tsv, ref_tally *ta)
{
    const char *prompt = json_string_value(json_object_get(res, "prompt"));
    static int32_t ids[4096];
    static ref_batch rb;
    int32_t n;
    if (!ref_first_logits(ctx, voc, res, ids, 4096, &n, logits)) return;
    json_t *top = json_object_get(res, "first_position_top10");
    double maxabs = ref_top_maxabs(top), diff = 0;
    const double eps = frac * maxabs, eps_s = frac_steps * maxabs;
    for (size_t i = 0; i < json_array_size(top); i++) {
        json_t *e = json_array_get(top, i);
        int id = (int)json_integer_value(json_object_get(e, "id"));
        double want = json_real_value(json_object_get(e, "logit"));
        CHECK(id >= 0 && id < V);
        if (id < 0 || id >= V) return;
        diff = fmax(diff, fabs(logits[id] - want));
    }
    CHECK(diff <= eps);

    if (tsv) {                 /* every logit of prompt 0's first position */
        FILE *f = fopen(tsv, "r");
        CHECK(f != NULL);
        char line[128];
        int id, n_rows = 0;
        double want;
        if (f && fgets(line, sizeof line, f))
            while (fscanf(f, "%d %lf", &id, &want) == 2 && id == n_rows && id < V) {
                diff = fmax(diff, fabs(logits[id] - want));
                n_rows++;
            }
        if (f) fclose(f);
        CHECK_EQ_INT(n_rows, V);
        CHECK(diff <= eps);
    }

    ta->max_first = fmax(ta->max_first, diff / maxabs);
    json_t *gt = json_object_get(res, "greedy_tokens"), *gl = json_object_get(res, "greedy_logits");
    json_t *gm = json_object_get(res, "greedy_margin_top1_minus_top2");
    int n_gen = (int)json_array_size(gt);
    bool free_run = true, all_wide = true;
    for (int s = 0; s < n_gen; s++) {
        int32_t want_id = (int32_t)json_integer_value(json_array_get(gt, s));
        double want_logit = json_real_value(json_array_get(gl, s));
        double margin = json_real_value(json_array_get(gm, s));
        diff = fmax(diff, fabs(logits[want_id] - want_logit));
        CHECK_NEAR(logits[want_id], want_logit, eps_s);
        int32_t mine = smp_argmax(logits, V);
        ta->n_steps++;
        if (margin >= 2 * eps_s) {
            ta->n_checked++;
            CHECK_EQ_INT(mine, want_id);
            if (mine != want_id)
                fprintf(stderr, "%s prompt '%.20s' step %d: token %d, llama.cpp %d "
                        "(margin %.3g >= 2 eps %.3g)\n",
                        name, prompt, s, mine, want_id, margin, 2 * eps_s);
        } else {
            all_wide = false;
        }
        free_run = free_run && mine == want_id;
        ta->n_free += free_run;
        ref_batch_make(&rb, &want_id, 1, n + s, 0, false);
        CHECK(model_decode(ctx, &rb.b, logits) == PK_OK);
    }
    CHECK(n_gen == 32);
    if (all_wide) {
        size_t l = strlen(ta->full);
        snprintf(ta->full + l, sizeof ta->full - l, "%s%lld", l ? " " : "",
                 (long long)json_integer_value(json_object_get(res, "prompt_index")));
    }
    ta->max_rel = fmax(ta->max_rel, diff / maxabs);
}

/* Greedy tokens straight from the model, one token a pass, as the
 * reference for the engine (n_gen at most 1024 - n; EOG ends it, counted). */
static inline int ref_greedy(model *m, const int32_t *prompt, int n, int n_gen, int32_t *out)
{
    model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16,
                            .swa_full = true };   /* every cell kept: the plainest pass */
    model_ctx *ctx;
    ASSERT(model_ctx_new(m, &cp, &ctx) == PK_OK);
    const int V = model_get_hparams(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    static ref_batch rb;
    ref_batch_make(&rb, prompt, n, 0, 0, false);
    ASSERT(model_decode(ctx, &rb.b, logits) == PK_OK);
    int k = 0;
    for (; k < n_gen; k++) {
        out[k] = smp_argmax(logits, V);
        if (tok_is_eog(model_vocab(m), out[k])) { k++; break; }
        ref_batch_make(&rb, &out[k], 1, n + k, 0, false);
        ASSERT(model_decode(ctx, &rb.b, logits) == PK_OK);
    }
    free(logits);
    model_ctx_free(ctx);
    return k;
}

#endif
