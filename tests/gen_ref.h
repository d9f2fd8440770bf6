/*
 * gen_ref.h - a model checked against llama.cpp's run of it
 * (scripts/refs/probe.cpp's JSON: four prompts, the first positions'
 * logits, 32 greedy steps), and gen-model's own files checked that way with
 * no model kept anywhere: the test writes the file again, checks its
 * sha256 against the one the reference script recorded, and checks it.
 * Used by test_qwen35, test_moe, test_gemma and test_conv.  Header-only so
 * each test stays one file.
 */
#ifndef GEN_REF_H
#define GEN_REF_H

#include <stdlib.h>
#include <unistd.h>

#include "ref.h"
#include "gen.h"
#include "../src/common/sha256.h"

/* One model against llama.cpp's run of it (the JSON at jpath): its
 * n_prompts prompts, 32 greedy steps each, within frac of max |logit| at
 * the first positions and frac_steps at the greedy steps; tsv (or NULL):
 * every logit of prompt 0's first position. */
static inline void gen_ref_check_file(const char *name, const char *path, const char *jpath, size_t n_prompts,
                                      const char *tsv, double frac, double frac_steps)
{
    char err[512] = "";
    model *m;
    pk_status s = model_load(path, MODEL_MMAP, &m, err, sizeof err);
    CHECK(s == PK_OK);
    if (s) {
        fprintf(stderr, "%s: %s\n", path, err);
        return;
    }
    model_ctx_params cp = { .n_ctx = 2048, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32 };
    model_ctx *ctx;
    CHECK(model_ctx_new(m, &cp, &ctx) == PK_OK);
    json_t *j = ref_load_json(jpath);
    CHECK(j != NULL);
    int32_t V = model_get_hparams(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    ref_tally ta = {0};
    json_t *results = json_object_get(j, "results");
    CHECK(json_array_size(results) == n_prompts);
    for (size_t p = 0; p < json_array_size(results); p++)
        ref_check_prompt(name, ctx, V, model_vocab(m), json_array_get(results, p), logits, frac, frac_steps,
                         p == 0 ? tsv : NULL, &ta);
    printf("%-36s max |diff| / max |logit| %.2e, at the first positions %.2e (budgets %.1e, %.1e); greedy: %d of %d "
           "steps with margin >= 2 eps checked, free run agrees %d/%d, prompts that must match all 32: %s\n",
           name, ta.max_rel, ta.max_first, frac, frac_steps, ta.n_checked, ta.n_steps, ta.n_free, ta.n_steps,
           ta.full[0] ? ta.full : "none");
    free(logits);
    json_decref(j);
    model_ctx_free(ctx);
    model_free(m);
}

/* A file a reference script wrote outside the repository, and its
 * budgets (gen_ref_check_file's frac and frac_steps). */
typedef struct gen_ref_file {
    const char *name;
    double frac, frac_steps;
} gen_ref_file;

/* A model a reference script (script) wrote outside the repository, read
 * from the directory the environment variable env names, against
 * llama.cpp's run of it (data/<name>.json) as gen_ref_check_file checks
 * it, four prompts; skipped, with the reason, where env is unset or the
 * file is not there. */
static inline void gen_ref_check_env(const char *env, const char *script, const char *data, const char *name,
                                     double frac, double frac_steps)
{
    const char *dir = getenv(env);
    char path[768], jpath[512];
    if (!dir || !*dir) {
        SKIP_PART("%s: set %s to the directory %s wrote", name, env, script);
        return;
    }
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    if (access(path, R_OK) != 0) {
        SKIP_PART("%s: not in %s: run %s", name, env, script);
        return;
    }
    snprintf(jpath, sizeof jpath, "%s/%s.json", data, name);
    gen_ref_check_file(name, path, jpath, 4, NULL, frac, frac_steps);
}

/* gen_ref_check_env for each of n files, each a test case. */
static inline void gen_ref_check_env_all(const char *env, const char *script, const char *data,
                                         const gen_ref_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++)
        TEST_RUN(gen_ref_check_env, env, script, data, files[i].name, files[i].frac, files[i].frac_steps);
}

/* The sha256 the commands file records for $OUT/<name>.gguf in hex[65]. */
static inline bool gen_ref_sha(const char *commands, const char *name, char hex[65])
{
    FILE *f = fopen(commands, "r");
    char line[1024], tail[256];
    snprintf(tail, sizeof tail, "  $OUT/%s.gguf\n", name);
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        size_t n = strlen(line), nt = strlen(tail);
        found = !strncmp(line, "# sha256 ", 9) && n == 9 + 64 + nt && !strcmp(line + 9 + 64, tail);
        if (found) snprintf(hex, 65, "%.64s", line + 9);
    }
    if (f) fclose(f);
    return found;
}

/* gen-model's own file of name (bin gen-model ARGS), written here by the
 * binary under test, checked to be byte for byte the file llama.cpp ran
 * (its sha256 in data/commands: a change to gen-model fails here rather
 * than turning the references stale), then held to llama.cpp's outputs
 * (data/<name>.json) within frac at the first positions and frac_steps
 * (0: frac) at the greedy steps, with gen-model's --vocab VOCAB; script is
 * what writes the references again. */
static inline void gen_ref_check_vocab(const char *bin, const char *vocab, const char *data, const char *commands,
                                       const char *script, const char *name, const char *args, double frac,
                                       double frac_steps)
{
    if (access(bin, X_OK) != 0) {
        SKIP_PART("%s: %s not built (set POLYKV_BIN)", name, bin);
        return;
    }
    char want[65] = "", got[65] = "", dir[] = "/tmp/polykv-test-genref-XXXXXX", path[256], jpath[512];
    CHECK(gen_ref_sha(commands, name, want));
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    CHECK(gen_model_vocab(bin, vocab, args, path));
    CHECK(pk_sha256_file(path, got));
    CHECK_STR(got, want);
    if (strcmp(got, want)) {
        fprintf(stderr, "%s: gen-model wrote another file than the one llama.cpp ran: rerun %s\n", name, script);
    } else {
        snprintf(jpath, sizeof jpath, "%s/%s.json", data, name);
        gen_ref_check_file(name, path, jpath, 4, NULL, frac, frac_steps > 0 ? frac_steps : frac);
    }
    unlink(path);
    rmdir(dir);
}

/* gen_ref_check_vocab with ../shared's Qwen3.5 vocabulary. */
static inline void gen_ref_check_gen(const char *bin, const char *data, const char *commands, const char *script,
                                     const char *name, const char *args, double frac, double frac_steps)
{
    const char *shared = test_shared_dir();
    if (!shared) {
        SKIP_PART("%s: ../shared absent (set POLYKV_SHARED): gen-model needs its Qwen3.5 vocabulary", name);
        return;
    }
    char vocab[512];
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-qwen35.gguf", shared);
    gen_ref_check_vocab(bin, vocab, data, commands, script, name, args, frac, frac_steps);
}

#endif
