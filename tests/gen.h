/*
 * gen.h - the small Qwen3.5 hybrids `polykv gen-model` writes for the
 * tests (test_qwen35 holds them to llama.cpp's outputs, test_hybrid runs
 * the seam and the engine on them), and running the binary that writes
 * them.  Header-only so each test stays one file.
 */
#ifndef GEN_H
#define GEN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* gen-model's hybrids: the arguments of each (scripts/qwen35/make_gen_refs.sh
 * passes the same, --vocab and -o aside). */
#define GEN_DENSE "--arch qwen35 --n-embd 64 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 128 " \
                  "--ssm-groups 2 --ssm-heads 4 --ssm-state 32 --ssm-conv 4 --untied --seed 35"
#define GEN_MOE "--arch qwen35moe --n-embd 64 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-expert 4 " \
                "--n-expert-used 2 --n-ff-exp 64 --n-ff-shexp 128 --ssm-groups 2 --ssm-heads 4 --ssm-state 32 " \
                "--ssm-conv 4 --seed 36"

/* The polykv binary: $POLYKV_BIN (tests/run.sh sets it), else the one
 * beside the test's own build directory (BUILD/tests/test_x -> BUILD/polykv). */
static inline const char *gen_bin(const char *argv0)
{
    const char *b = getenv("POLYKV_BIN");
    if (b && *b) return b;
    static char buf[512];
    const char *t = strstr(argv0, "tests/test_");
    if (!t || t - argv0 > 400) return "build/polykv";
    snprintf(buf, sizeof buf, "%.*spolykv", (int)(t - argv0), argv0);
    return buf;
}

/* Writes a model with `bin gen-model ARGS --vocab VOCAB -o path`; true
 * when it exits 0. */
static inline bool gen_model_vocab(const char *bin, const char *vocab, const char *args, const char *path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s gen-model %s --vocab %s -o %s", bin, args, vocab, path);
    return system(cmd) == 0;
}

/* The same with shared's qwen35 vocabulary. */
static inline bool gen_model(const char *bin, const char *shared, const char *args, const char *path)
{
    char vocab[512];
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-qwen35.gguf", shared);
    return gen_model_vocab(bin, vocab, args, path);
}

#endif
