/*
 * test_hybrid.c - the sequence-memory seam (src/mem) on a hybrid model
 * (qwen35: recurrent states beside the KV cells, docs/hybrid.md):
 *   - every path that gives a sequence a state it did not compute (a share
 *     from another sequence's end or checkpoint, a rewind to a checkpoint,
 *     an image copied out and back in) continues with the same logits, bit
 *     for bit, as the sequence that computed it, fed the same batches (the
 *     chunked delta rule rounds by where a chunk starts, so each
 *     comparison feeds the same token runs);
 *   - four sequences decoding in one batch give each one's logits alone;
 *   - shares and keeps go only as far as a state exists, and say so;
 *   - accounting: mem_check after every operation, each sequence's bytes
 *     its cells' plus its states', and nothing held after all is dropped;
 *     a random sequence of operations keeps all of it;
 *   - the engine's control-plane paths (engine_paths.h).
 * The model: the random-weight qwen35 that `polykv gen-model` writes from
 * a seed (gen.h; test_qwen35 holds it to llama.cpp's outputs), in Q8_0.
 */
#include "ref.h"
#include "../src/mem/mem.h"
#include "../src/engine/eng.h"
#include "gen.h"
#include "mem_walk.h"
#include "engine_paths.h"

#include <time.h>

#include <stdlib.h>
#include <unistd.h>

static model *g_m;
static model_ctx *g_ctx;
static mem *g_mem;
static int g_V;
static int32_t g_tok[256];
enum { N = 96, K = 40 };   /* a prompt, a checkpoint inside it */

static uint64_t g_rng = 7;

static uint32_t below(uint32_t n)   /* xorshift64* */
{
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return n ? (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32) % n : 0;
}

static void check_accounting(void)
{
    CHECK(mem_check(g_mem));
    int32_t owned = 0, states = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) {
        owned += mem_seq_owned(g_mem, s);
        size_t cells = (size_t)mem_seq_owned(g_mem, s) * mem_pos_bytes(g_mem);
        CHECK(mem_seq_bytes(g_mem, s) >= cells && (mem_seq_bytes(g_mem, s) - cells) % mem_state_bytes(g_mem) == 0);
        states += (int32_t)((mem_seq_bytes(g_mem, s) - cells) / mem_state_bytes(g_mem));
    }
    CHECK_EQ_INT(owned, mem_used(g_mem));
    CHECK_EQ_INT(states, mem_states_used(g_mem));
}

/* Feeds g_tok[p0, p1) to seq in one batch; the last logits into out. */
static pk_status feed(kv_seq seq, int p0, int p1, float *out)
{
    static ref_batch rb;
    static float *scratch;
    if (!scratch) scratch = malloc(sizeof(float) * (size_t)g_V);
    ref_batch_make(&rb, g_tok + p0, p1 - p0, p0, seq, false);
    return model_decode(g_ctx, &rb.b, out ? out : scratch);
}

static bool same(const float *a, const float *b)
{
    return memcmp(a, b, sizeof(float) * (size_t)g_V) == 0;
}

static void case_share(void)
{
    float *a = malloc(sizeof(float) * (size_t)g_V), *b = malloc(sizeof(float) * (size_t)g_V);
    mem_clear(g_mem);
    mem_checkpoint_at(g_mem, 0, K);
    CHECK_EQ_INT(feed(0, 0, N, NULL), PK_OK);   /* runs as [0, K) and [K, N): the checkpoint */
    CHECK(mem_can_resume(g_mem, 0, K) && mem_can_resume(g_mem, 0, N) && mem_can_resume(g_mem, 0, 0));
    CHECK(!mem_can_resume(g_mem, 0, K + 1));
    kv_pos at[MEM_MAX_RESUME];
    CHECK_EQ_INT(mem_resume_points(g_mem, 0, at), 2);
    CHECK(at[0] == K && at[1] == N);
    check_accounting();

    /* from the end: one more token on each equals */
    CHECK_EQ_INT(mem_share(g_mem, 0, 1, 0, -1), N);
    CHECK(mem_holds(g_mem, 1, N));
    CHECK_EQ_INT(mem_seq_owned(g_mem, 1), 0);   /* cells by membership, the state by copy */
    check_accounting();
    CHECK_EQ_INT(feed(0, N, N + 1, a), PK_OK);
    CHECK_EQ_INT(feed(1, N, N + 1, b), PK_OK);
    CHECK(same(a, b));

    /* from a checkpoint: a share past it stops there */
    CHECK_EQ_INT(mem_share(g_mem, 0, 2, 0, K + 10), K);
    CHECK(mem_holds(g_mem, 2, K));
    check_accounting();
    CHECK_EQ_INT(feed(2, K, N, b), PK_OK);
    /* 0 computed [K, N) as one run too: continue both by the same token */
    CHECK_EQ_INT(feed(2, N, N + 1, b), PK_OK);
    CHECK(same(a, b));

    /* a keep rewinds to the last checkpoint at or before it */
    CHECK_EQ_INT(mem_keep(g_mem, 0, K + 5), K);
    CHECK(mem_holds(g_mem, 0, K));
    check_accounting();
    CHECK_EQ_INT(feed(0, K, N, NULL), PK_OK);
    CHECK_EQ_INT(feed(0, N, N + 1, b), PK_OK);
    CHECK(same(a, b));

    /* no state where the share would end: nothing is shared */
    CHECK_EQ_INT(mem_share(g_mem, 1, 3, 0, K), 0);
    CHECK_EQ_INT(mem_seq_cells(g_mem, 3), 0);
    /* a sequence the batch does not continue where its state is: refused */
    CHECK_EQ_INT(feed(3, 5, 6, NULL), PK_EINVAL);
    check_accounting();
    for (kv_seq s = 0; s < 4; s++) mem_drop(g_mem, s);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_states_used(g_mem), 0);
    check_accounting();
    free(a);
    free(b);
}

static void case_image(void)
{
    float *a = malloc(sizeof(float) * (size_t)g_V), *b = malloc(sizeof(float) * (size_t)g_V);
    mem_clear(g_mem);
    mem_checkpoint_at(g_mem, 0, K);
    CHECK_EQ_INT(feed(0, 0, N, NULL), PK_OK);
    CHECK(mem_copy_out(g_mem, 0, 0, N - 1) == NULL);   /* no state at N - 1 */
    uint8_t *image = mem_copy_out(g_mem, 0, 0, N);
    CHECK(image != NULL);
    CHECK_EQ_INT(mem_image_bytes(g_mem, N), (size_t)N * mem_pos_bytes(g_mem) + (1 + RS_MAX_CKPT) * mem_state_bytes(g_mem) +
                                                RS_MAX_CKPT * sizeof(int32_t));
    CHECK_EQ_INT(feed(0, N, N + 1, a), PK_OK);
    mem_drop(g_mem, 0);
    CHECK_EQ_INT(mem_copy_in(g_mem, 5, 0, N - 1, image, 0, N), PK_ECONFLICT);   /* the state is at N */
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_copy_in(g_mem, 5, 0, N, image, 0, N), PK_OK);
    CHECK(mem_holds(g_mem, 5, N) && mem_can_resume(g_mem, 5, N));
    check_accounting();
    CHECK_EQ_INT(feed(5, N, N + 1, b), PK_OK);
    CHECK(same(a, b));
    CHECK(mem_can_resume(g_mem, 5, K));                 /* the image's checkpoint came back too */
    /* a prefix of the image, up to its checkpoint */
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, K + 5), K);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, K - 1), 0);
    CHECK_EQ_INT(mem_copy_in(g_mem, 6, 0, K, image, 0, N), PK_OK);
    CHECK(mem_holds(g_mem, 6, K));
    check_accounting();
    CHECK_EQ_INT(feed(6, K, N, NULL), PK_OK);
    CHECK_EQ_INT(feed(6, N, N + 1, b), PK_OK);
    CHECK(same(a, b));
    free(image);
    free(a);
    free(b);
}

/* Four sequences, each with its own prompt, then one decode step in one
 * batch: each row equals that sequence's step alone. */
static void case_batch(void)
{
    float *alone = malloc(sizeof(float) * (size_t)g_V * 4), *both = malloc(sizeof(float) * (size_t)g_V * 4);
    int32_t next[4] = { 11, 22, 33, 44 };
    for (int pass = 0; pass < 2; pass++) {
        mem_clear(g_mem);
        for (kv_seq s = 0; s < 4; s++) CHECK_EQ_INT(feed(s, 0, 20 + 7 * s, NULL), PK_OK);
        if (pass == 0) {
            for (kv_seq s = 0; s < 4; s++) {
                static ref_batch rb;
                ref_batch_make(&rb, &next[s], 1, 20 + 7 * s, s, false);
                CHECK_EQ_INT(model_decode(g_ctx, &rb.b, alone + (size_t)s * g_V), PK_OK);
            }
        } else {
            kv_pos pos[4];
            int32_t nseq[4];
            kv_seq seq[4][MODEL_MAX_TOKEN_SEQS];
            bool want[4];
            for (int s = 0; s < 4; s++) pos[s] = 20 + 7 * s, nseq[s] = 1, seq[s][0] = s, want[s] = true;
            model_batch b = { 4, next, pos, nseq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])seq, want };
            CHECK_EQ_INT(model_decode(g_ctx, &b, both), PK_OK);
        }
    }
    for (int s = 0; s < 4; s++) CHECK(same(alone + (size_t)s * g_V, both + (size_t)s * g_V));
    check_accounting();
    free(alone);
    free(both);
}

/* A random walk of operations (mem_walk.h): the invariants after each,
 * everything free at the end. */
static pk_status walk_feed(kv_seq seq, int p0, int p1) { return feed(seq, p0, p1, NULL); }

static void case_random(void)
{
    int32_t len[WALK_SEQS];
    mem_walk(g_mem, &g_rng, walk_feed, 200, 8, check_accounting, len);
    for (kv_seq s = 0; s < WALK_SEQS; s++) mem_drop(g_mem, s);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_states_used(g_mem), 0);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared absent (set POLYKV_SHARED): gen-model needs its Qwen3.5 vocabulary");
    char dir[] = "/tmp/polykv-test-hybrid-XXXXXX", path[256], err[512];
    ASSERT(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/qwen35.gguf", dir);
    ASSERT(gen_model(gen_bin(argv[0]), shared, GEN_DENSE " --type q8_0", path));
    ASSERT(model_load(path, MODEL_MMAP, &g_m, err, sizeof err) == PK_OK);
    g_V = model_get_hparams(g_m)->n_vocab;
    model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 64, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32, .n_rs = 16 };
    ASSERT(model_ctx_new(g_m, &cp, &g_ctx) == PK_OK);
    ASSERT(mem_new(g_ctx, &g_mem) == PK_OK);
    CHECK(mem_hybrid(g_mem) && mem_state_bytes(g_mem) > 0);
    for (size_t i = 0; i < ARRAY_LEN(g_tok); i++) g_tok[i] = 100 + (int32_t)below(5000);
    TEST_RUN(case_share);
    TEST_RUN(case_image);
    TEST_RUN(case_batch);
    TEST_RUN(case_random);
    engine_paths_check(g_m, g_tok);
    mem_free(g_mem);
    model_ctx_free(g_ctx);
    model_free(g_m);
    unlink(path);
    rmdir(dir);
    return test_finish();
}
