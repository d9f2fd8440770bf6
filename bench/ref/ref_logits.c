/*
 * ref_logits.c - the reference engine's logits at the first generated
 * position of a prompt, printed as "token_id<TAB>logit" (%.9g) like
 * first_logits.c, built by bench/quant_logits.sh against the reference
 * build beside the project (never by the Makefile: polykv does not link it).
 *
 * Settings as ../shared/reference/README.md gives them for its files: default
 * model parameters (mmap, CPU), the prompt tokenized with add_special and no
 * special parsing, n_ctx = n_batch = n_ubatch = 2048, one sequence, 2
 * threads, an F32 K/V cache, flash attention off, the prompt decoded as one
 * batch.
 *
 * Usage: ref_logits MODEL.gguf PROMPT > OUT.tsv
 */
#include "llama.h"

#include <stdio.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ref_logits MODEL.gguf PROMPT\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    static llama_token tok[2048];
    int n = llama_tokenize(v, argv[2], (int)strlen(argv[2]), tok, 2048, true, false);
    if (n < 1) return 1;

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 2048;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx || llama_decode(ctx, llama_batch_get_one(tok, n)) != 0) return 1;
    const float *logits = llama_get_logits_ith(ctx, -1);
    printf("token_id\tlogit\n");
    for (int i = 0; i < llama_vocab_n_tokens(v); i++) printf("%d\t%.9g\n", i, logits[i]);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}
