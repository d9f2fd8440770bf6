/*
 * test_batch.c - batch equivalence and zero-copy sharing on real model files:
 *   - N sequences decoded together in one batch give the logits each gives
 *     decoded alone (within 1e-4 of max |logit|), prefill and decode steps;
 *   - a sequence that received a prefix by membership (kv_seq_cp, or one
 *     prefill whose tokens carry two sequence ids) gives the logits of one
 *     that prefilled the prefix itself, also after the donor is removed.
 */
#include "ref.h"

#define N_SEQ 3
#define N_STEPS 4

static const char *texts[N_SEQ] = {
    "Once upon a time there was a little dog",
    "The capital of France is a big city with many",
    "Lily and Max went to the park. They saw a bird and",
};

static double max_abs(const float *x, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void check_close(const char *what, const float *got, const float *want, int n)
{
    double d = max_diff(got, want, n), tol = 1e-4 * max_abs(want, n);
    if (d > tol) fprintf(stderr, "%s: max diff %.3g > %.3g\n", what, d, tol);
    CHECK(d <= tol);
}

static void run_model(const char *shared, const char *name)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/%s.gguf", shared, name);
    model *m;
    if (model_load(path, MODEL_COPY, &m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        CHECK(false);
        return;
    }
    const int V = model_get_hparams(m)->n_vocab;
    model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 64, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16 };
    model_ctx *ctx;
    CHECK(model_ctx_new(m, &cp, &ctx) == PK_OK);
    kv_cache *kv = model_ctx_kv(ctx);

    int32_t tok[N_SEQ][128], n[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        CHECK(tok_encode(model_vocab(m), texts[s], strlen(texts[s]), true, false, tok[s], 128, &n[s]) == PK_OK);

    /* Alone: prefill, then N_STEPS greedy steps; remember every logit row. */
    float *alone = malloc(sizeof(float) * (size_t)V * N_SEQ * (N_STEPS + 1));
    int32_t next[N_SEQ][N_STEPS];
    static ref_batch rb;
    for (int s = 0; s < N_SEQ; s++) {
        kv_clear(kv);
        float *row = alone + (size_t)V * s * (N_STEPS + 1);
        ref_batch_make(&rb, tok[s], n[s], 0, 0, false);
        CHECK(model_decode(ctx, &rb.b, row) == PK_OK);
        for (int k = 0; k < N_STEPS; k++) {
            next[s][k] = smp_argmax(row + (size_t)V * k, V);
            ref_batch_make(&rb, &next[s][k], 1, n[s] + k, 0, false);
            CHECK(model_decode(ctx, &rb.b, row + (size_t)V * (k + 1)) == PK_OK);
        }
    }

    /* Together: all prompts in one batch (seq ids 5, 6, 7), then steps of N_SEQ tokens. */
    kv_clear(kv);
    int32_t all[512];
    int total = 0;
    for (int s = 0; s < N_SEQ; s++) {
        for (int i = 0; i < n[s]; i++) {
            all[total] = tok[s][i];
            rb.pos[total] = i;
            rb.n_seq[total] = 1;
            rb.seq[total][0] = 5 + s;
            rb.want[total] = i == n[s] - 1;
            total++;
        }
    }
    rb.b = (model_batch){ total, all, rb.pos, rb.n_seq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])rb.seq, rb.want };
    float *out = malloc(sizeof(float) * (size_t)V * N_SEQ);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    for (int s = 0; s < N_SEQ; s++)
        check_close("batched prefill", out + (size_t)V * s, alone + (size_t)V * s * (N_STEPS + 1), V);
    for (int k = 0; k < N_STEPS; k++) {
        int32_t step[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            step[s] = next[s][k];
            rb.pos[s] = n[s] + k;
            rb.n_seq[s] = 1;
            rb.seq[s][0] = 5 + s;
            rb.want[s] = true;
        }
        rb.b = (model_batch){ N_SEQ, step, rb.pos, rb.n_seq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])rb.seq, rb.want };
        CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
        for (int s = 0; s < N_SEQ; s++)
            check_close("batched decode", out + (size_t)V * s, alone + (size_t)V * (s * (N_STEPS + 1) + k + 1), V);
    }

    /* Zero copy: prefix of text 0 under seq 1, shared to seq 2 by membership,
     * the donor removed, then the rest decoded under seq 2. */
    const int np = n[0] / 2;
    kv_clear(kv);
    ref_batch_make(&rb, tok[0], np, 0, 1, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    int used = kv_used(kv);
    kv_seq_cp(kv, 1, 2, 0, np);
    CHECK_EQ_INT(kv_used(kv), used);             /* no cell was copied */
    kv_seq_rm(kv, 1, -1, -1);
    CHECK_EQ_INT(kv_used(kv), used);             /* seq 2 still holds them */
    ref_batch_make(&rb, tok[0] + np, n[0] - np, np, 2, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    check_close("prefix by kv_seq_cp", out, alone, V);

    /* One prefill whose prefix tokens carry two sequences, then two suffixes. */
    kv_clear(kv);
    ref_batch_make(&rb, tok[0], np, 0, 3, false);
    for (int i = 0; i < np; i++) {
        rb.n_seq[i] = 2;
        rb.seq[i][1] = 4;
    }
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    CHECK_EQ_INT(kv_used(kv), np);
    ref_batch_make(&rb, tok[0] + np, n[0] - np, np, 4, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    check_close("prefix by multi-sequence tokens", out, alone, V);
    ref_batch_make(&rb, tok[0] + np, n[0] - np, np, 3, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    check_close("prefix by multi-sequence tokens (other member)", out, alone, V);

    /* A batch larger than the free cells, or with a bad token id, changes nothing. */
    kv_clear(kv);
    ref_batch_make(&rb, tok[0], n[0], 0, 0, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_OK);
    int before = kv_used(kv);
    static int32_t many[1100];
    for (int i = 0; i < 1100; i++) many[i] = tok[0][i % n[0]];
    ref_batch_make(&rb, many, 1100, n[0], 1, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_EFULL);
    CHECK_EQ_INT(kv_used(kv), before);
    many[3] = V;
    ref_batch_make(&rb, many, 10, n[0], 1, false);
    CHECK(model_decode(ctx, &rb.b, out) == PK_EINVAL);
    CHECK_EQ_INT(kv_used(kv), before);

    printf("%s: batch and sharing equivalence checked\n", name);
    free(alone);
    free(out);
    model_ctx_free(ctx);
    model_free(m);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): batch checks need a model");
    TEST_RUN(run_model, shared, "stories260K");
    TEST_RUN(run_model, shared, "rand-llama-llama3vocab-e256-l2-Q8_0");
    TEST_RUN(run_model, shared, "rand-qwen3-qwen2vocab-e64-l2-Q8_0");
    TEST_RUN(run_model, shared, "rand-llama-llama3vocab-e256-l2-Q4_K_M");
    return test_finish();
}
