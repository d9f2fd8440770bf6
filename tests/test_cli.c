/*
 * test_cli.c - the polykv binary as other checks call it: run --json,
 * tokenize on a vocab-only file, bench --json, gen-model for every weight
 * type (the file loads and decodes), and clean failures on bad input.
 * Runs build/polykv (POLYKV_BIN overrides) with popen.
 */
#include "ref.h"

#include <sys/wait.h>

static const char *bin(void)
{
    const char *b = getenv("POLYKV_BIN");
    return b ? b : "build/polykv";
}

/* Runs a shell command; returns its stdout (malloc'd) and exit status. */
static char *run(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[n] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static const char *g_shared;

/* Usage errors and bad files: a message and a non-zero exit, no crash. */
static void test_usage(void)
{
    char cmd[2048];
    int st;
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>/dev/null", bin());
    free(run(cmd, &st));
    CHECK_EQ_INT(st, 2);
    snprintf(cmd, sizeof cmd, "%s run -m /dev/null -p hi 2>&1", bin());
    char *out = run(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK(strstr(out, "polykv:") != NULL);
    free(out);
}

/* tokenize on a vocab-only GGUF equals the library's encoding. */
static void test_tokenize(void)
{
    char cmd[2048], vocab[512], err[256];
    int st;
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-gpt-2.gguf", g_shared);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --json 'Hello world, again!'", bin(), vocab);
    char *out = run(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_error_t je;
    json_t *arr = json_loads(out, 0, &je);
    CHECK(json_is_array(arr));
    gguf_ctx *g;
    tok_vocab *v;
    ASSERT(gguf_open(vocab, &g, err, sizeof err) == PK_OK && tok_load_gguf(g, &v, err, sizeof err) == PK_OK);
    int32_t ids[64], n = 0;
    tok_encode(v, "Hello world, again!", 19, true, true, ids, 64, &n);
    CHECK_EQ_INT(json_array_size(arr), n);
    for (int i = 0; i < n && i < (int)json_array_size(arr); i++)
        CHECK_EQ_INT(json_integer_value(json_array_get(arr, i)), ids[i]);
    json_decref(arr);
    tok_free(v);
    gguf_close(g);
    free(out);
}

/* run --json's greedy tokens equal decoding model_path through the library. */
static void check_run(const char *model_path)
{
    char cmd[2048], err[256];
    int st;
    json_error_t je;
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Hello there' -n 6 --temp 0 -t 2 --kv-type f32 --json",
             bin(), model_path);
    char *out = run(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *o = json_loads(out, 0, &je);
    CHECK(json_is_object(o));
    json_t *toks = json_object_get(o, "tokens"), *tm = json_object_get(o, "timings");
    CHECK(json_is_array(json_object_get(o, "prompt_tokens")) && json_is_string(json_object_get(o, "text")));
    CHECK(json_is_integer(json_object_get(tm, "prompt_n")) && json_is_number(json_object_get(tm, "prompt_ms")) &&
          json_is_integer(json_object_get(tm, "predicted_n")) && json_is_number(json_object_get(tm, "predicted_ms")));
    CHECK_EQ_INT(json_array_size(toks), 6);
    model *m;
    CHECK(model_load(model_path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    if (m && json_is_array(toks)) {
        model_ctx_params cp = { .n_ctx = 64, .n_ubatch = 32, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32 };
        model_ctx *ctx;
        ASSERT(model_ctx_new(m, &cp, &ctx) == PK_OK);
        json_t *pt = json_object_get(o, "prompt_tokens");
        int np = (int)json_array_size(pt);
        int32_t p[64];
        for (int k = 0; k < np; k++) p[k] = (int32_t)json_integer_value(json_array_get(pt, k));
        float *lg = malloc(sizeof(float) * (size_t)model_get_hparams(m)->n_vocab);
        static ref_batch rb;
        ref_batch_make(&rb, p, np, 0, 0, false);
        CHECK(model_decode(ctx, &rb.b, lg) == PK_OK);
        for (int k = 0; k < 6; k++) {
            int32_t want = smp_argmax(lg, model_get_hparams(m)->n_vocab);
            CHECK_EQ_INT(json_integer_value(json_array_get(toks, k)), want);
            ref_batch_make(&rb, &want, 1, np + k, 0, false);
            CHECK(model_decode(ctx, &rb.b, lg) == PK_OK);
        }
        free(lg);
        model_ctx_free(ctx);
        model_free(m);
    }
    json_decref(o);
    free(out);
}

/* gen-model for every type: the file loads and runs; run --json is
 * well-formed and greedy equals decoding through the library. */
static void test_gen_model(void)
{
    static const char *types[] = { "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                   "q4_k", "q5_k", "q6_k", "q2_k", "q3_k", "iq4_nl", "iq4_xs" };
    char cmd[2048], vocab[512], model_path[256];
    int st;
    snprintf(vocab, sizeof vocab, "%s/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf", g_shared);
    for (size_t i = 0; i < ARRAY_LEN(types); i++) {
        snprintf(model_path, sizeof model_path, "/tmp/polykv-test-cli-%d-%s.gguf", (int)getpid(), types[i]);
        snprintf(cmd, sizeof cmd, "%s gen-model --arch %s --vocab %s --n-embd 256 --n-layer 2 --n-head 4 "
                 "--n-head-kv 2 --n-ff 512 --type %s --seed 7 -o %s", bin(), i % 2 ? "qwen3" : "qwen2",
                 vocab, types[i], model_path);
        free(run(cmd, &st));
        CHECK_EQ_INT(st, 0);
        check_run(model_path);
        unlink(model_path);
    }
}

/* bench --json on stories260K. */
static void test_bench(void)
{
    char cmd[2048];
    int st;
    json_error_t je;
    snprintf(cmd, sizeof cmd, "%s bench -m %s/models/stories260K.gguf -p 32 -n 16 -r 1 -t 2 --json", bin(),
             g_shared);
    char *out = run(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *b = json_loads(out, 0, &je);
    CHECK(json_real_value(json_object_get(b, "pp_tps")) > 0);
    CHECK(json_real_value(json_object_get(b, "tg_tps")) > 0);
    CHECK(json_number_value(json_object_get(b, "decode_bytes_per_s")) > 0);
    json_decref(b);
    free(out);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    g_shared = test_shared_dir();
    if (access(bin(), X_OK) != 0) SKIP("%s not built", bin());
    TEST_RUN(test_usage);
    if (!g_shared) SKIP("../shared/models not found (set POLYKV_SHARED): the rest needs a vocabulary");
    TEST_RUN(test_tokenize);
    TEST_RUN(test_gen_model);
    TEST_RUN(test_bench);
    return test_finish();
}
