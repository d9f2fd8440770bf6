/*
 * test_qwen35.c - the Qwen3.5 hybrids (qwen35, qwen35moe) against
 * llama.cpp's own outputs on the same files, read from tests/data/qwen35/
 * (scripts/qwen35/make_refs.sh wrote them with a llama.cpp build beside the
 * project; its README and commands.txt say how).
 *
 * The models are random-weight checkpoints that transformers initialized
 * and llama.cpp's converter wrote (F32, BF16, Q8_0) or llama-quantize
 * (Q4_K_M): 130 to 545 MB each for the 248,320-token vocabulary, so they
 * are not in the repository; the cases read them from $POLYKV_QWEN35_DIR
 * and skip with a message without it.  Each model is checked as
 * test_types.c checks the llama types (ref_check_prompt, the margin rule):
 * four prompts of 4 to 1,670 tokens (the last one runs in 4 chunks of 512),
 * an F32 cache, 32 greedy steps.
 *
 * Budgets (frac of max |logit|): the first positions' (every prompt token
 * read at once), then the greedy steps', above what was measured (max
 * |diff| / max |logit| at the first positions, then over all steps):
 *   qwen35     F32 1.4e-6, 1.4e-6; BF16 1.8e-3, 5.0e-3; Q8_0 6.9e-3,
 *              1.2e-2 (1.75e-2 in other runs); Q4_K_M 1.2e-2, 1.2e-2;
 *   qwen35moe  F32 6.7e-7, 6.9e-7; BF16 1.5e-3, 9.8e-2; Q8_0 2.7e-3,
 *              5.0e-2 (4.4e-3 in other runs); Q4_K_M 5.8e-3, 1.3e-2.
 * Eight layers of activations rounded to Q8 / BF16 before each product
 * leave the quantized types a little above the llama types' 1.5e-2.  The
 * MoE runs' large step values are single greedy steps where a token's two
 * best experts are nearly tied (the random router gives 8 experts almost
 * equal weights) and a rounding picks the other one: the logits after it
 * move, by a different step in different builds.  So the MoE steps of the
 * rounded types hold a budget of 1.2e-1 (their margin rule then checks
 * little), their first positions 1e-2.  F32 matches every greedy token of
 * every prompt on both.
 *
 * check_gen needs no model from outside: gen-model writes small qwen35 and
 * qwen35moe files (n_embd 64, 3 DeltaNet + 1 attention layers and the MTP
 * block; the 151,936-token vocabulary of ../shared) that llama.cpp ran once
 * (scripts/qwen35/make_gen_refs.sh, commands-gen.txt); the case writes
 * each again, checks its sha256 against the recorded one, and checks it
 * as above.  Measured, the largest of the scalar, AVX2 and AVX-512
 * kernels (max |diff| / max |logit| over all steps):
 *   qwen35     F32 1.3e-6, BF16 2.8e-3, Q8_0 1.05e-2, Q4_K 1.03e-2;
 *   qwen35moe  F32 1.1e-6, BF16 2.3e-3, Q8_0 6.3e-3, Q4_K 1.0e-2.
 * F32 checks all 128 greedy steps of each and matches every one.  The
 * eight take about 15 s on 2 threads.
 */
#include "gen_ref.h"

#include <stdlib.h>
#include <unistd.h>

#define DATA "tests/data/qwen35"

static const gen_ref_file models[] = {
    { "rand-qwen35-e256-l8-F32", 1e-4, 1e-4 },
    { "rand-qwen35-e256-l8-BF16", 1e-2, 1e-2 },
    { "rand-qwen35-e256-l8-Q8_0", 1e-2, 2e-2 },
    { "rand-qwen35-e256-l8-Q4_K_M", 2e-2, 2e-2 },
    { "rand-qwen35moe-e256-l4-x8a2-F32", 1e-4, 1e-4 },
    { "rand-qwen35moe-e256-l4-x8a2-BF16", 1e-2, 1.2e-1 },
    { "rand-qwen35moe-e256-l4-x8a2-Q8_0", 1e-2, 1.2e-1 },
    { "rand-qwen35moe-e256-l4-x8a2-Q4_K_M", 1e-2, 1.2e-1 },
};

static const struct { const char *name, *args; double frac; } gen_models[] = {
    { "gen-qwen35-e64-l4-F32", GEN_DENSE " --type f32", 3e-6 },
    { "gen-qwen35-e64-l4-BF16", GEN_DENSE " --type bf16", 4e-3 },
    { "gen-qwen35-e64-l4-Q8_0", GEN_DENSE " --type q8_0", 1.5e-2 },
    { "gen-qwen35-e64-l4-Q4_K", GEN_DENSE " --type q4_k", 1.5e-2 },
    { "gen-qwen35moe-e64-l4-x4a2-F32", GEN_MOE " --type f32", 3e-6 },
    { "gen-qwen35moe-e64-l4-x4a2-BF16", GEN_MOE " --type bf16", 4e-3 },
    { "gen-qwen35moe-e64-l4-x4a2-Q8_0", GEN_MOE " --type q8_0", 1e-2 },
    { "gen-qwen35moe-e64-l4-x4a2-Q4_K", GEN_MOE " --type q4_k", 1.5e-2 },
};

static const char *g_bin;

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); p = NULL; }
    if (p) p[len] = 0;
    fclose(f);
    *n = p ? (size_t)len : 0;
    return p;
}

/* llama.cpp's test texts for the qwen35 pre-tokenizer (../shared), with
 * Qwen3.5's own vocabulary (the models'): every text's ids as llama.cpp
 * gave them (vocab-qwen35.out, scripts/qwen35/make_refs.sh). */
static void check_vocab(void)
{
    const char *dir = getenv("POLYKV_QWEN35_DIR"), *shared = test_shared_dir();
    if (!dir || !*dir || !shared) {
        printf("vocab: skipped: needs POLYKV_QWEN35_DIR and ../shared\n");
        return;
    }
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/rand-qwen35-e256-l8-Q4_K_M.gguf", dir);
    gguf_ctx *g;
    tok_vocab *v = NULL;
    CHECK(gguf_open(path, &g, err, sizeof err) == PK_OK);
    CHECK(tok_load_gguf(g, &v, err, sizeof err) == PK_OK);
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-qwen35.gguf.inp", shared);
    size_t n_inp, n_out;
    char *inp = slurp(path, &n_inp), *out = slurp(DATA "/vocab-qwen35.out", &n_out);
    CHECK(inp && out && v);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n_tests = 0, n_ok = 0;
    static int32_t ids[8192];
    for (char *p = inp, *line = out; inp && out && v && p < inp + n_inp && *line;) {
        char *next = strstr(p, sep), *eol = strchr(line, '\n');
        size_t len = next ? (size_t)(next - p) : (size_t)(inp + n_inp - p);
        if (eol) *eol = 0;
        int32_t n = 0;
        CHECK(tok_encode(v, p, len, false, false, ids, 8192, &n) == PK_OK);
        bool ok = true;
        int32_t k = 0;
        for (char *q = line, *e; ok; q = e) {
            long x = strtol(q, &e, 10);
            if (e == q) break;
            ok = k < n && ids[k++] == x;
        }
        ok = ok && k == n;
        CHECK(ok);
        n_tests++, n_ok += ok;
        if (!next || !eol) break;
        p = next + sizeof sep - 1;
        line = eol + 1;
    }
    printf("vocab: %d/%d texts tokenized as llama.cpp does with Qwen3.5's vocabulary\n", n_ok, n_tests);
    CHECK(n_tests == 50);
    free(inp);
    free(out);
    tok_free(v);
    gguf_close(g);
}

/* POLYKV_BIN, else the polykv of the build this test is in. */
int main(int argc, char **argv)
{
    test_select(argc, argv);
    g_bin = gen_bin(argv[0]);
    if (access(DATA "/commands.txt", R_OK) != 0)
        SKIP(DATA " absent (run from the repository root): llama.cpp's outputs are there");
    TEST_RUN(check_vocab);
    gen_ref_check_env_all("POLYKV_QWEN35_DIR", "scripts/qwen35/make_refs.sh", DATA, models, ARRAY_LEN(models));
    for (size_t i = 0; i < ARRAY_LEN(gen_models); i++)
        TEST_RUN(gen_ref_check_gen, g_bin, DATA, DATA "/commands-gen.txt", "scripts/qwen35/make_gen_refs.sh",
                 gen_models[i].name, gen_models[i].args, gen_models[i].frac, 0.0);
    return test_finish();
}
