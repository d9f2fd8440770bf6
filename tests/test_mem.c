/*
 * test_mem.c - the sequence-memory seam (src/mem) on a real model:
 *   - share, keep, drop and charge keep the accounting exact (owned cells
 *     add up to the cells in use, bytes are cells times mem_pos_bytes) and
 *     mem_check holds after every operation;
 *   - an image copied out and back in under another sequence continues
 *     with the same logits, bit for bit, as the sequence it was copied
 *     from (the RAM tier's and the slot files' promise);
 *   - refusals change nothing: a copy-in with too few free cells, a shift
 *     of a sequence that shares its cells.
 * Each case runs alone by name: test_mem [case].
 */
#include "ref.h"
#include "../src/mem/mem.h"

static model *g_m;
static model_ctx *g_ctx;
static mem *g_mem;
static int g_V;
static int32_t g_tok[128];
static int g_n;

static int32_t owned_sum(void)
{
    int32_t sum = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) sum += mem_seq_owned(g_mem, s);
    return sum;
}

static void check_accounting(void)
{
    CHECK(mem_check(g_mem));
    CHECK_EQ_INT(owned_sum(), mem_used(g_mem));
    for (kv_seq s = 0; s < 8; s++)
        CHECK_EQ_INT(mem_seq_bytes(g_mem, s), (size_t)mem_seq_owned(g_mem, s) * mem_pos_bytes(g_mem));
}

/* Prefills g_tok[0, n) under seq; the last logits into out (may be NULL). */
static void prefill(kv_seq seq, int n, float *out)
{
    static ref_batch rb;
    static float scratch[1 << 16];
    ref_batch_make(&rb, g_tok, n, 0, seq, false);
    CHECK_EQ_INT(model_decode(g_ctx, &rb.b, out ? out : scratch), PK_OK);
}

/* Decodes token tok at pos under seq into out. */
static void step(kv_seq seq, int32_t tok, kv_pos pos, float *out)
{
    static ref_batch rb;
    ref_batch_make(&rb, &tok, 1, pos, seq, false);
    CHECK_EQ_INT(model_decode(g_ctx, &rb.b, out), PK_OK);
}

static void case_share_keep_drop(void)
{
    mem_clear(g_mem);
    prefill(0, g_n, NULL);
    CHECK(mem_holds(g_mem, 0, g_n));
    CHECK_EQ_INT(mem_used(g_mem), g_n);
    mem_share(g_mem, 0, 1, 0, g_n - 2);           /* a prefix, by membership */
    CHECK(mem_holds(g_mem, 1, g_n - 2));
    CHECK_EQ_INT(mem_used(g_mem), g_n);
    CHECK_EQ_INT(mem_seq_owned(g_mem, 1), 0);
    CHECK_EQ_INT(mem_common(g_mem, 0, 1, 0, g_n), g_n - 2);
    check_accounting();
    int32_t excl[KV_MAX_SEQ];
    mem_excl_counts(g_mem, excl);
    CHECK_EQ_INT(excl[0], 2);                      /* only the tail is 0's alone */
    CHECK_EQ_INT(excl[1], 0);
    mem_charge(g_mem, 1, 0, g_n - 2);               /* a pool taking the cells it was made from */
    CHECK_EQ_INT(mem_seq_owned(g_mem, 1), g_n - 2);
    check_accounting();
    mem_drop(g_mem, 0);                             /* 1's cells stay, now 1's alone */
    CHECK_EQ_INT(mem_used(g_mem), g_n - 2);
    CHECK(mem_holds(g_mem, 1, g_n - 2));
    check_accounting();
    mem_keep(g_mem, 1, 3);
    CHECK(mem_holds(g_mem, 1, 3));
    CHECK(!mem_holds(g_mem, 1, 4));
    CHECK_EQ_INT(mem_used(g_mem), 3);
    mem_drop_prefix(g_mem, 1, 1);
    CHECK_EQ_INT(mem_seq_cells(g_mem, 1), 2);
    CHECK(!mem_holds(g_mem, 1, 2));                 /* [1, 3) is not a prefix */
    CHECK_EQ_INT(mem_extent(g_mem, 1, 3), 0);
    check_accounting();
    mem_drop(g_mem, 1);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    check_accounting();
}

static void case_image_roundtrip(void)
{
    float *a = malloc(sizeof(float) * (size_t)g_V), *b = malloc(sizeof(float) * (size_t)g_V);
    mem_clear(g_mem);
    prefill(0, g_n, NULL);
    CHECK_EQ_INT(mem_extent(g_mem, 0, g_n + 5), g_n);
    uint8_t *image = mem_copy_out(g_mem, 0, 0, g_n);
    CHECK(image != NULL);
    CHECK(mem_copy_out(g_mem, 0, 0, g_n + 1) == NULL);   /* a missing position */
    int32_t next = 7;
    step(0, next, g_n, a);                          /* the original, continued */
    mem_drop(g_mem, 0);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_copy_in(g_mem, 3, 0, g_n, image, 0, g_n), PK_OK);
    CHECK(mem_holds(g_mem, 3, g_n));
    CHECK_EQ_INT(mem_seq_owned(g_mem, 3), g_n);
    check_accounting();
    step(3, next, g_n, b);                          /* the copy, continued */
    CHECK(memcmp(a, b, sizeof(float) * (size_t)g_V) == 0);
    /* A part of an image: positions [2, n) after a shared [0, 2). */
    uint8_t *tail = mem_copy_out(g_mem, 3, 2, g_n);
    CHECK(tail && !memcmp(tail, image + mem_image_bytes(g_mem, 2), mem_image_bytes(g_mem, g_n - 2)));
    free(tail);
    free(image);
    free(a);
    free(b);
}

static void case_refusals(void)
{
    mem_clear(g_mem);
    prefill(0, g_n, NULL);
    uint8_t *image = mem_copy_out(g_mem, 0, 0, g_n);
    CHECK(image != NULL);
    /* Fill the cache until fewer than g_n cells are free. */
    int32_t room = mem_n_cells(g_mem) - mem_used(g_mem);
    while (room >= g_n) {
        CHECK_EQ_INT(mem_copy_in(g_mem, 4, 0, g_n, image, 0, g_n), PK_OK);
        mem_share(g_mem, 4, 5 + (room / g_n) % 100, 0, g_n);
        mem_drop(g_mem, 4);
        room = mem_n_cells(g_mem) - mem_used(g_mem);
    }
    int32_t used = mem_used(g_mem);
    CHECK_EQ_INT(mem_copy_in(g_mem, 4, 0, g_n, image, 0, g_n), PK_EFULL);
    CHECK_EQ_INT(mem_used(g_mem), used);
    CHECK_EQ_INT(mem_seq_cells(g_mem, 4), 0);
    check_accounting();
    /* A sequence that shares its cells is never shifted. */
    mem_clear(g_mem);
    prefill(0, g_n, NULL);
    mem_share(g_mem, 0, 1, 0, 2);
    CHECK_EQ_INT(mem_shift(g_mem, 0, 1, 2), PK_ECONFLICT);
    CHECK(mem_holds(g_mem, 0, g_n));
    mem_drop(g_mem, 1);
    CHECK_EQ_INT(mem_shift(g_mem, 0, 1, 2), PK_OK);
    CHECK(mem_holds(g_mem, 0, g_n - 2));
    CHECK(mem_can_resume(g_mem, 0, g_n - 2));
    check_accounting();
    free(image);
}

static const struct { const char *name; void (*fn)(void); } cases[] = {
    { "share_keep_drop", case_share_keep_drop },
    { "image_roundtrip", case_image_roundtrip },
    { "refusals", case_refusals },
};

int main(int argc, char **argv)
{
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): the seam is tested on a model");
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    if (model_load(path, MODEL_COPY, &g_m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    g_V = model_get_hparams(g_m)->n_vocab;
    model_ctx_params cp = { .n_ctx = 256, .n_ubatch = 64, .n_threads = 1, .type_k = TQ_F16, .type_v = TQ_F16 };
    if (model_ctx_new(g_m, &cp, &g_ctx) != PK_OK || mem_new(g_ctx, &g_mem) != PK_OK) return 1;
    const char *text = "Once upon a time there was a little dog who liked the sun";
    CHECK_EQ_INT(tok_encode(model_vocab(g_m), text, strlen(text), true, false, g_tok, 128, &g_n), PK_OK);
    CHECK(g_n > 8);
    int ran = 0;
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name)) continue;
        cases[i].fn();
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "no case named %s\n", argv[1]);
        return 1;
    }
    mem_free(g_mem);
    model_ctx_free(g_ctx);
    model_free(g_m);
    return test_finish();
}
