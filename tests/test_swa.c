/*
 * test_swa.c - the sequence-memory seam (src/mem) on a model with sliding-
 * window layers whose cells are apart and freed behind the window (Gemma
 * 4's layout: window and global layers with their own head sizes; docs/
 * models.md, "Sliding windows"):
 *   - every path that gives a sequence window cells it did not compute (a
 *     share from another sequence's end or pin, a keep back to a pin, an
 *     image copied out and back in) continues with the logits, bit for bit,
 *     of a context that keeps every cell (--swa-full) fed the same tokens;
 *   - shares and keeps go only as far as a whole window exists, and say so;
 *   - the window cells stay bounded: a 600-token sequence fed in steps of
 *     16 holds at most its window, a step and its pins' windows;
 *   - a context shift moves and re-rotates the window cells as the rest;
 *   - accounting: mem_check after every operation (window cells counted,
 *     each held by sequences that hold the position), bytes are the global
 *     cells' plus the window cells'; a random sequence of operations keeps
 *     all of it;
 *   - the engine's control-plane paths (engine_paths.h) with prompts past
 *     the window.
 * The model: a random-weight gemma4 that `polykv gen-model` writes from a
 * seed (test_gemma holds that shape to llama.cpp's outputs), in Q8_0.
 */
#include "ref.h"
#include "../src/mem/mem.h"
#include "gen.h"
#include "mem_walk.h"
#include "engine_paths.h"

#include <stdlib.h>
#include <unistd.h>

#define GEN_GEMMA "--arch gemma4 --n-embd 128 --n-layer 6 --n-head 4 --n-head-kv 2 --n-head-kv-global 1 " \
                  "--head-dim 32 --head-dim-global 64 --n-ff 256 --swa 32 --swa-every 3 --softcap 2 --seed 47"

static model *g_m;
static model_ctx *g_ctx, *g_full;   /* windows apart; every cell kept (the reference) */
static mem *g_mem, *g_fmem;
static int g_V, g_W;                /* vocabulary, n_win */
static int32_t g_tok[1024];
enum { N = 96, K = 40, STEP = 8 };   /* a prompt, a pin inside it, the feeding step */

static uint64_t g_rng = 7;

static uint32_t below(uint32_t n)   /* xorshift64* */
{
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return n ? (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32) % n : 0;
}

static void check_accounting(void)
{
    CHECK(mem_check(g_mem));
    int32_t owned = 0;
    size_t win = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) {
        owned += mem_seq_owned(g_mem, s);
        size_t cells = (size_t)mem_seq_owned(g_mem, s) * mem_pos_bytes(g_mem);
        CHECK(mem_seq_bytes(g_mem, s) >= cells && (mem_seq_bytes(g_mem, s) - cells) % mem_window_pos_bytes(g_mem) == 0);
        win += (mem_seq_bytes(g_mem, s) - cells) / mem_window_pos_bytes(g_mem);
    }
    CHECK_EQ_INT(owned, mem_used(g_mem));
    CHECK_EQ_INT((int32_t)win, mem_window_used(g_mem));
    CHECK(mem_window_used(g_mem) <= mem_used(g_mem));
}

/* Feeds g_tok[p0, p1) to seq of ctx in steps of STEP; the last logits into out. */
static pk_status feed_ctx(model_ctx *ctx, kv_seq seq, int p0, int p1, float *out)
{
    static ref_batch rb;
    static float *scratch;
    if (!scratch) scratch = malloc(sizeof(float) * (size_t)g_V);
    pk_status st = PK_OK;
    for (int p = p0; p < p1 && st == PK_OK; p += STEP) {
        int n = MIN(STEP, p1 - p);
        ref_batch_make(&rb, g_tok + p, n, p, seq, false);
        st = model_decode(ctx, &rb.b, p + n == p1 && out ? out : scratch);
    }
    return st;
}

static pk_status feed(kv_seq seq, int p0, int p1, float *out) { return feed_ctx(g_ctx, seq, p0, p1, out); }

static bool same(const float *a, const float *b)
{
    return memcmp(a, b, sizeof(float) * (size_t)g_V) == 0;
}

/* The reference: [0, n) and then token n fed to a context that keeps
 * every cell. */
static void reference(int n, float *out)
{
    mem_clear(g_fmem);
    CHECK_EQ_INT(feed_ctx(g_full, 0, 0, n + 1, out), PK_OK);
}

static void case_share(void)
{
    float *want = malloc(sizeof(float) * (size_t)g_V), *a = malloc(sizeof(float) * (size_t)g_V);
    reference(N, want);
    mem_clear(g_mem);
    mem_checkpoint_at(g_mem, 0, K);
    CHECK_EQ_INT(feed(0, 0, N, NULL), PK_OK);
    CHECK(mem_can_resume(g_mem, 0, K) && mem_can_resume(g_mem, 0, N) && mem_can_resume(g_mem, 0, 0));
    CHECK(!mem_can_resume(g_mem, 0, K + 1) && !mem_can_resume(g_mem, 0, K + g_W + 1));
    kv_pos at[MEM_MAX_RESUME];
    CHECK_EQ_INT(mem_resume_points(g_mem, 0, at), 2);
    CHECK(at[0] == K && at[1] == N);
    /* the window cells: the pin's, the last step's window, the step */
    CHECK(mem_window_used(g_mem) <= 2 * g_W + STEP);
    check_accounting();

    /* from the end: one more token equals the reference */
    CHECK_EQ_INT(mem_share(g_mem, 0, 1, 0, -1), N);
    CHECK(mem_holds(g_mem, 1, N));
    CHECK_EQ_INT(mem_seq_owned(g_mem, 1), 0);   /* cells by membership */
    check_accounting();
    CHECK_EQ_INT(feed(1, N, N + 1, a), PK_OK);
    CHECK(same(a, want));

    /* from a pin: a share past it stops there */
    CHECK_EQ_INT(mem_share(g_mem, 0, 2, 0, K + 10), K);
    CHECK(mem_holds(g_mem, 2, K));
    check_accounting();
    CHECK_EQ_INT(feed(2, K, N + 1, a), PK_OK);
    CHECK(same(a, want));

    /* a keep goes back to the last pin at or before it */
    CHECK_EQ_INT(mem_keep(g_mem, 0, K + 5), K);
    CHECK(mem_holds(g_mem, 0, K));
    check_accounting();
    CHECK_EQ_INT(feed(0, K, N + 1, a), PK_OK);
    CHECK(same(a, want));

    /* no window where the share would end (1 holds its end's only): nothing */
    CHECK_EQ_INT(mem_share(g_mem, 1, 3, 0, K), 0);
    CHECK_EQ_INT(mem_seq_cells(g_mem, 3), 0);
    /* short of the window every position can be continued */
    CHECK_EQ_INT(feed(4, 0, g_W - 3, NULL), PK_OK);
    CHECK_EQ_INT(mem_share(g_mem, 4, 3, 0, 12), 12);
    CHECK_EQ_INT(mem_keep(g_mem, 4, 9), 9);
    check_accounting();
    for (kv_seq s = 0; s < 5; s++) mem_drop(g_mem, s);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_window_used(g_mem), 0);
    check_accounting();
    free(want);
    free(a);
}

static void case_image(void)
{
    float *want = malloc(sizeof(float) * (size_t)g_V), *a = malloc(sizeof(float) * (size_t)g_V);
    reference(N, want);
    mem_clear(g_mem);
    mem_checkpoint_at(g_mem, 0, K);
    CHECK_EQ_INT(feed(0, 0, N, NULL), PK_OK);
    CHECK(mem_copy_out(g_mem, 0, 0, K + 1) == NULL);   /* no window at K + 1 */
    uint8_t *image = mem_copy_out(g_mem, 0, 0, N);
    CHECK(image != NULL);
    const size_t sec = sizeof(int32_t) + 2 * (size_t)g_W * mem_window_pos_bytes(g_mem);
    CHECK_EQ_INT(mem_image_bytes(g_mem, N), (size_t)N * mem_pos_bytes(g_mem) + sec);
    CHECK_EQ_INT(mem_get_layout(g_mem).state_bytes, sec);
    mem_drop(g_mem, 0);
    /* the image holds the last two windows' rows: it continues anywhere in
     * its last window (here from N - 2 * STEP, where the last step began
     * with a trim), not before */
    const int lo = N - STEP - g_W;
    CHECK_EQ_INT(mem_copy_in(g_mem, 5, 0, K, image, 0, N), PK_ECONFLICT);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, K + 5), 0);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, lo + g_W), lo + g_W);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, lo + g_W - 1), 0);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, N, N + 5), N);
    CHECK_EQ_INT(mem_copy_in(g_mem, 5, 0, N, image, 0, N), PK_OK);
    CHECK(mem_holds(g_mem, 5, N) && mem_can_resume(g_mem, 5, N));
    CHECK_EQ_INT(mem_window_used(g_mem), N - lo);
    check_accounting();
    CHECK_EQ_INT(feed(5, N, N + 1, a), PK_OK);
    CHECK(same(a, want));
    /* one token short of its end: the tokens from there fed again */
    CHECK_EQ_INT(mem_copy_in(g_mem, 7, 0, N, image, 0, N), PK_OK);
    CHECK_EQ_INT(mem_keep(g_mem, 7, N - 1), N - 1);
    CHECK_EQ_INT(feed(7, N - 1, N + 1, a), PK_OK);
    CHECK(same(a, want));
    check_accounting();
    free(image);
    /* an image shorter than the window: any prefix */
    mem_clear(g_mem);
    CHECK_EQ_INT(feed(0, 0, g_W - 4, NULL), PK_OK);
    image = mem_copy_out(g_mem, 0, 0, g_W - 4);
    CHECK(image != NULL);
    CHECK_EQ_INT(mem_image_resume(g_mem, image, 0, g_W - 4, 10), 10);
    CHECK_EQ_INT(mem_copy_in(g_mem, 6, 0, 10, image, 0, g_W - 4), PK_OK);
    CHECK(mem_holds(g_mem, 6, 10));
    check_accounting();
    free(image);
    free(want);
    free(a);
}

/* A long sequence holds its global cells and a bounded window. */
static void case_bound(void)
{
    enum { LONG = 600 };
    mem_clear(g_mem);
    mem_checkpoint_at(g_mem, 0, 100);
    mem_checkpoint_at(g_mem, 0, 300);
    int32_t peak = 0;
    for (int p = 0; p < LONG; p += STEP) {
        CHECK_EQ_INT(feed(0, p, p + STEP, NULL), PK_OK);
        peak = MAX(peak, mem_window_used(g_mem));
    }
    CHECK_EQ_INT(mem_used(g_mem), LONG);
    CHECK(peak <= 3 * g_W + STEP);
    CHECK(mem_can_resume(g_mem, 0, 100) && mem_can_resume(g_mem, 0, 300) && !mem_can_resume(g_mem, 0, 200));
    printf("%d positions: %d global cells, at most %d window cells (window %d, 2 pins, steps of %d)\n", LONG,
           mem_used(g_mem), peak, g_W + 1, STEP);
    check_accounting();
}

/* A context shift moves both arrays (and re-rotates their K rows): the
 * next token equals a context that keeps every cell, shifted the same. */
static void case_shift(void)
{
    enum { LEN = 200, KEEP = 10, DROP = 50 };
    float *want = malloc(sizeof(float) * (size_t)g_V), *got = malloc(sizeof(float) * (size_t)g_V);
    mem_clear(g_mem);
    mem_clear(g_fmem);
    mem_checkpoint_at(g_mem, 0, 120);
    CHECK_EQ_INT(feed(0, 0, LEN, NULL), PK_OK);
    CHECK_EQ_INT(feed_ctx(g_full, 0, 0, LEN, NULL), PK_OK);
    CHECK_EQ_INT(mem_shift(g_mem, 0, KEEP, DROP), PK_OK);
    CHECK_EQ_INT(mem_shift(g_fmem, 0, KEEP, DROP), PK_OK);
    CHECK(mem_holds(g_mem, 0, LEN - DROP));
    kv_pos at[MEM_MAX_RESUME];
    CHECK_EQ_INT(mem_resume_points(g_mem, 0, at), 1);   /* the pin's positions moved: it went */
    check_accounting();
    static ref_batch rb;
    ref_batch_make(&rb, g_tok + LEN, 1, LEN - DROP, 0, false);
    CHECK_EQ_INT(model_decode(g_ctx, &rb.b, got), PK_OK);
    CHECK_EQ_INT(model_decode(g_full, &rb.b, want), PK_OK);
    CHECK(same(got, want));
    /* shared window cells are immutable: a shift is refused */
    CHECK_EQ_INT(mem_share(g_mem, 0, 1, 0, -1), LEN - DROP + 1);
    CHECK_EQ_INT(mem_shift(g_mem, 0, KEEP, DROP), PK_ECONFLICT);
    check_accounting();
    free(want);
    free(got);
}

/* A random walk of operations (mem_walk.h): the invariants after each,
 * then each sequence continued as the reference; everything free at the
 * end. */
static pk_status walk_feed(kv_seq seq, int p0, int p1) { return feed(seq, p0, p1, NULL); }

static void case_random(void)
{
    int32_t len[WALK_SEQS];
    mem_walk(g_mem, &g_rng, walk_feed, 400, 40, check_accounting, len);
    /* each sequence continues as the reference does */
    float *want = malloc(sizeof(float) * (size_t)g_V), *got = malloc(sizeof(float) * (size_t)g_V);
    for (kv_seq s = 0; s < WALK_SEQS; s++) {
        if (len[s] < 1) continue;
        reference(len[s], want);
        CHECK_EQ_INT(feed(s, len[s], len[s] + 1, got), PK_OK);
        CHECK(same(got, want));
    }
    free(want);
    free(got);
    for (kv_seq s = 0; s < WALK_SEQS; s++) mem_drop(g_mem, s);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_window_used(g_mem), 0);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared absent (set POLYKV_SHARED): gen-model needs its Qwen3.5 vocabulary");
    char dir[] = "/tmp/polykv-test-swa-XXXXXX", path[256], err[512];
    ASSERT(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gemma4.gguf", dir);
    ASSERT(gen_model(gen_bin(argv[0]), shared, GEN_GEMMA " --type q8_0", path));
    ASSERT(model_load(path, MODEL_MMAP, &g_m, err, sizeof err) == PK_OK);
    g_V = model_get_hparams(g_m)->n_vocab;
    model_ctx_params cp = { .n_ctx = 2048, .n_ubatch = 64, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16 };
    ASSERT(model_ctx_new(g_m, &cp, &g_ctx) == PK_OK);
    cp.swa_full = true;
    ASSERT(model_ctx_new(g_m, &cp, &g_full) == PK_OK);
    ASSERT(mem_new(g_ctx, &g_mem) == PK_OK && mem_new(g_full, &g_fmem) == PK_OK);
    g_W = mem_window(g_mem);
    CHECK(g_W == 31 && mem_resume_limited(g_mem) && !mem_hybrid(g_mem) && mem_window(g_fmem) == 0);
    for (size_t i = 0; i < ARRAY_LEN(g_tok); i++) g_tok[i] = 100 + (int32_t)below(5000);
    TEST_RUN(case_share);
    TEST_RUN(case_image);
    TEST_RUN(case_bound);
    TEST_RUN(case_shift);
    TEST_RUN(case_random);
    engine_paths_check(g_m, g_tok);
    mem_free(g_mem);
    mem_free(g_fmem);
    model_ctx_free(g_ctx);
    model_ctx_free(g_full);
    model_free(g_m);
    unlink(path);
    rmdir(dir);
    return test_finish();
}
