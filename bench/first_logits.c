/*
 * first_logits.c - every logit polykv gives at the first generated position
 * of a prompt, as "token_id<TAB>logit" lines (%.9g), the format of the
 * reference's firstpos_logits TSV files (../shared/reference/README.md), so
 * bench/quant_logits.sh can put the two engines side by side.
 *
 * Settings are the reference files': the prompt tokenized with BOS where
 * the model says so and special texts not parsed, decoded as one batch, an
 * F32 K/V cache, 2 threads (results do not depend on the count), the
 * weights read from the mapping (MODEL_MMAP: the huge-page copy gives the
 * same bits).
 *
 * Usage: first_logits MODEL.gguf PROMPT > OUT.tsv
 */
#include "../src/model/model.h"
#include "../src/tokenizer/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TOKENS = 2048 };

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: first_logits MODEL.gguf PROMPT\n");
        return 2;
    }
    char err[512] = "";
    model *m;
    if (model_load(argv[1], MODEL_MMAP, &m, err, sizeof err) != PK_OK) {
        fprintf(stderr, "first_logits: %s: %s\n", argv[1], err);
        return 1;
    }
    static int32_t tok[MAX_TOKENS];
    int32_t n = 0;
    const tok_vocab *v = model_vocab(m);
    if (tok_encode(v, argv[2], strlen(argv[2]), true, false, tok, MAX_TOKENS, &n) != PK_OK || n < 1) {
        fprintf(stderr, "first_logits: the prompt does not tokenize into 1..%d tokens\n", MAX_TOKENS);
        return 1;
    }
    model_ctx_params cp = { .n_ctx = MAX_TOKENS, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32 };
    model_ctx *ctx;
    if (model_ctx_new(m, &cp, &ctx) != PK_OK) {
        fprintf(stderr, "first_logits: no context\n");
        return 1;
    }
    static kv_pos pos[MAX_TOKENS];
    static int32_t n_seq[MAX_TOKENS];
    static kv_seq seq[MAX_TOKENS][MODEL_MAX_TOKEN_SEQS];
    static bool want[MAX_TOKENS];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = i;
        n_seq[i] = 1;
        seq[i][0] = 0;
        want[i] = i == n - 1;
    }
    model_batch b = { n, tok, pos, n_seq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])seq, want };
    int32_t n_vocab = model_get_hparams(m)->n_vocab;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits || model_decode(ctx, &b, logits) != PK_OK) {
        fprintf(stderr, "first_logits: decode failed\n");
        return 1;
    }
    printf("token_id\tlogit\n");
    for (int32_t i = 0; i < n_vocab; i++) printf("%d\t%.9g\n", i, logits[i]);
    free(logits);
    model_ctx_free(ctx);
    model_free(m);
    return 0;
}
