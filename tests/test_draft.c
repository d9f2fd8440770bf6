/*
 * test_draft.c - speculation with a draft model (-md, draft-simple) and
 * with a Qwen3.5 file's MTP block (draft-mtp; eng_draft.c, model_mtp.c,
 * docs/speculative.md), on models gen-model writes with the Qwen3.5
 * vocabulary:
 *   - a target whose layers after the first add nothing and a one-layer
 *     draft of the same seed: the draft is right, every guess is kept,
 *     and the text is the target's greedy text run directly, alone and 6
 *     sessions at once;
 *   - a draft of other weights (wrong most of the time): greedy and seeded
 *     text equal the target's without speculation, guesses are rolled
 *     back, and the adaptive limit stops guessing within 32 tokens;
 *   - a grammar: the draft guesses only what it allows, the text is the
 *     text without speculation;
 *   - sessions on one long prompt share the draft's cells for it;
 *   - a Qwen3.5 hybrid target with a dense draft: its state goes back after
 *     a guess not kept (greedy equals the model run directly);
 *   - a draft of another vocabulary or a hybrid draft is refused;
 *   - the MTP block: a context that runs it gives the trunk's logits bit
 *     for bit; its draft reads the kept state of the position before;
 *     a pass-through trunk with a block that agrees keeps every guess,
 *     a banned token makes some wrong (state rolled back, the same text);
 *     random blocks (qwen35, qwen35moe) give the model's own greedy and
 *     seeded text;
 *   - eng_check after every step (POLYKV_CHECK=1) holds the draft's cells
 *     to the tokens the engine says they are.
 */
#include "ref.h"

#include <math.h>

#include "../src/engine/eng.h"
#include "../src/grammar/gram.h"
#include "gen.h"
#include "spec_run.h"

#define SMALL "--n-embd 64 --n-head 4 --n-head-kv 2 --n-ff 128 --ctx 4096"

enum { N_GEN = 120, NP = 6 };

static char g_dir[] = "/tmp/polykv-test-draft-XXXXXX";
static const char *g_bin, *g_shared;

static model *make(const char *name, const char *args)
{
    char path[300], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, name);
    ASSERT(gen_model(g_bin, g_shared, args, path));
    model *m;
    ASSERT(model_load(path, MODEL_MMAP, &m, err, sizeof err) == PK_OK);
    unlink(path);
    return m;
}

static int32_t g_p[NP][300];
static int g_np[NP];

static eng *start(model *target, model *draft, int n_slots)
{
    eng_params ep = eng_default_params();
    ep.n_slots = n_slots;
    ep.n_ctx = n_slots * 1024;
    ep.n_threads = 2;
    ep.draft = draft;
    ep.spec.kind = SPEC_DRAFT_SIMPLE;
    ep.spec.n_max = 4;
    eng *e;
    ASSERT(eng_new(target, &ep, &e) == PK_OK);
    return e;
}

/* Task t (prompt i) wrote want; its guesses are added up. */
static void expect(eng_task *t, const int32_t *want, int nw, int64_t *drafted, int64_t *kept)
{
    collected got;
    collect(t, &got);
    CHECK_EQ_INT(got.n_tok, nw);
    CHECK(!memcmp(got.tok, want, sizeof(int32_t) * (size_t)MIN(got.n_tok, nw)));
    *drafted += got.done.n_drafted;
    *kept += got.done.n_accepted;
}

/* Every prompt alone, then all at once: the target's own greedy tokens.
 * Returns the guesses kept; *drafted the guesses verified. */
static int64_t greedy_equal_kind(eng *e, model *target, spec_kind kind, int64_t *drafted)
{
    static int32_t want[NP][N_GEN];
    int nw[NP];
    for (int i = 0; i < NP; i++) nw[i] = ref_greedy(target, g_p[i], g_np[i], N_GEN, want[i]);
    int64_t kept = 0;
    *drafted = 0;
    eng_task *ts[NP];
    for (int i = 0; i < NP; i++) {
        eng_completion c = req(g_p[i], g_np[i], N_GEN, kind);
        CHECK(eng_submit(e, &c, &ts[i]) == PK_OK);
        expect(ts[i], want[i], nw[i], drafted, &kept);
    }
    for (int i = 0; i < NP; i++) {
        eng_completion c = req(g_p[i], g_np[i], N_GEN, kind);
        CHECK(eng_submit(e, &c, &ts[i]) == PK_OK);
    }
    for (int i = 0; i < NP; i++) expect(ts[i], want[i], nw[i], drafted, &kept);
    return kept;
}

static int64_t greedy_equal(eng *e, model *target, int64_t *drafted)
{
    return greedy_equal_kind(e, target, SPEC_DRAFT_SIMPLE, drafted);
}

/* The draft is the target's first layer, which is all the target does. */
static void test_exact_draft(void)
{
    model *t = make("t", "--arch qwen3 " SMALL " --n-layer 4 --pass-through-from 1 --seed 40 --type q8_0");
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 40 --type q8_0");
    CHECK(eng_draft_compatible(t, d) == NULL);
    eng *e = start(t, d, NP);
    int64_t drafted, kept = greedy_equal(e, t, &drafted);
    printf("  exact draft: %lld of %lld guesses kept\n", (long long)kept, (long long)drafted);
    CHECK(kept > NP * N_GEN);                /* most of the 2 x NP x N_GEN tokens came from guesses */
    CHECK(kept == drafted);
    eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    CHECK(st.draft_ms_total > 0 && st.draft_cells > 0);
    eng_free(e);
    /* One slot, one conversation after another: the draft's cells of the
     * last one are not the new one's (cut back to what they share). */
    e = start(t, d, 1);
    int64_t kept1 = 0, drafted1 = 0;
    for (int i = 0; i < NP; i++) {
        int32_t want[N_GEN];
        int nw = ref_greedy(t, g_p[i], g_np[i], N_GEN, want);
        eng_completion c = req(g_p[i], g_np[i], N_GEN, SPEC_DRAFT_SIMPLE);
        eng_task *task;
        CHECK(eng_submit(e, &c, &task) == PK_OK);
        expect(task, want, nw, &drafted1, &kept1);
    }
    CHECK(kept1 > 0 && kept1 == drafted1);
    eng_free(e);
    model_free(d);
    model_free(t);
}

/* A draft that is right only some of the time: the exact draft's
 * weights in 4 bits rather than 8. */
static void test_wrong_draft(void)
{
    model *t = make("t", "--arch qwen3 " SMALL " --n-layer 3 --pass-through-from 1 --seed 41 --type q8_0");
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 41 --type q4_0");
    eng *e = start(t, d, NP);
    int64_t drafted, kept = greedy_equal(e, t, &drafted);
    printf("  partial draft: %lld of %lld guesses kept\n", (long long)kept, (long long)drafted);
    CHECK(kept > 0 && drafted > kept);
    int same = 0;
    drafted = kept = 0;
    for (int i = 0; i < NP; i++) {
        eng_event done;
        same += seeded_same(e, g_p[i], g_np[i], 80, 500 + (uint64_t)i, SPEC_DRAFT_SIMPLE, &done);
        drafted += done.n_drafted;
        kept += done.n_accepted;
    }
    CHECK_EQ_INT(same, NP);
    CHECK(kept > 0 && drafted > kept);
    eng_free(e);
    model_free(d);

    /* Unrelated weights: nothing is kept, and after 4 verifications in a
     * row that keep nothing the session stops guessing, for longer each
     * time: of 120 tokens at most 4 + 4 + 4 steps guess. */
    d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 99 --type q8_0");
    e = start(t, d, 1);
    collected got;
    eng_task *task;
    eng_completion c = req(g_p[0], g_np[0], N_GEN, SPEC_DRAFT_SIMPLE);
    c.ignore_eos = true;
    CHECK(eng_submit(e, &c, &task) == PK_OK);
    collect(task, &got);
    printf("  unrelated draft: %d of %d guesses kept\n", got.done.n_accepted, got.done.n_drafted);
    CHECK_EQ_INT(got.n_tok, N_GEN);
    CHECK(got.done.n_drafted <= 3 * 4 * 4 + got.done.n_accepted * 4);
    eng_free(e);
    model_free(d);
    model_free(t);
}

/* A grammar: guesses it does not allow are never made; the text is the
 * text without speculation. */
static void test_grammar(void)
{
    model *t = make("t", "--arch qwen3 " SMALL " --n-layer 4 --pass-through-from 1 --seed 42 --type q8_0");
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 42 --type q8_0");
    eng *e = start(t, d, 2);
    const char *g = "root ::= \"{\\\"a\\\": \" [0-9]+ \", \\\"b\\\": \\\"\" [a-z]* \"\\\"}\"";
    gram_grammar *gr;
    gram_error ge;
    CHECK_EQ_INT(gram_parse(g, strlen(g), "root", &gr, &ge), PK_OK);
    collected got[2];
    for (int sp = 0; sp < 2; sp++) {
        eng_completion c = req(g_p[1], g_np[1], 100, sp ? SPEC_DRAFT_SIMPLE : SPEC_NONE);
        c.grammar = gr;
        eng_task *task;
        CHECK(eng_submit(e, &c, &task) == PK_OK);
        collect(task, &got[sp]);
    }
    gram_free(gr);
    printf("  grammar: %d tokens, %d of %d guesses kept\n", got[1].n_tok, got[1].done.n_accepted,
           got[1].done.n_drafted);
    CHECK(got[0].n_tok > 4);
    CHECK_EQ_INT(got[0].n_tok, got[1].n_tok);
    CHECK(!memcmp(got[0].tok, got[1].tok, sizeof(int32_t) * (size_t)got[0].n_tok));
    CHECK(got[1].done.n_accepted > 0);
    CHECK(got[1].done.n_accepted == got[1].done.n_drafted);   /* the draft is right: only allowed tokens */
    eng_free(e);
    model_free(d);
    model_free(t);
}

/* Four sessions on one 280-token prompt: the draft holds it once. */
static void test_shared_prefix(void)
{
    model *t = make("t", "--arch qwen3 " SMALL " --n-layer 2 --pass-through-from 1 --seed 43 --type q8_0");
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 43 --type q8_0");
    eng *e = start(t, d, 4);
    eng_task *ts[4];
    for (int i = 0; i < 4; i++) {
        eng_completion c = req(g_p[5], g_np[5], 40, SPEC_DRAFT_SIMPLE);
        CHECK(eng_submit(e, &c, &ts[i]) == PK_OK);
        if (i == 0) {                          /* the first one runs first: the others find its cells */
            collected got;
            collect(ts[0], &got);
        }
    }
    for (int i = 1; i < 4; i++) {
        collected got;
        collect(ts[i], &got);
        CHECK(got.done.n_accepted > 0);
    }
    eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    printf("  shared prefix: %d draft cells for 4 x %d prompt tokens\n", st.draft_cells, g_np[5]);
    CHECK(st.draft_cells < g_np[5] + 4 * 60);
    eng_free(e);
    model_free(d);
    model_free(t);
}

/* A Qwen3.5 target: the guesses not kept go back out of the recurrent
 * state (docs/speculative.md) while a dense draft guesses. */
static void test_hybrid_target(void)
{
    model *t = make("t", GEN_DENSE " --type q8_0");
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 44 --type q8_0");
    CHECK(eng_draft_compatible(t, d) == NULL);
    CHECK(eng_draft_compatible(d, t) != NULL);   /* a hybrid draft is refused */
    eng *e = start(t, d, NP);
    int64_t drafted, kept = greedy_equal(e, t, &drafted);
    printf("  hybrid target: %lld of %lld guesses kept\n", (long long)kept, (long long)drafted);
    CHECK(drafted > 0);
    eng_free(e);
    model_free(d);
    model_free(t);
}

/* The MTP block runs after the trunk: a context that runs it gives the
 * same logits, bit for bit, as one that does not. */
static void test_mtp_logits(void)
{
    model *m = make("t", GEN_DENSE " --type q8_0");
    CHECK(model_has_mtp(m));
    int32_t V = model_get_hparams(m)->n_vocab;
    float *l[2][2];
    static ref_batch rb;
    for (int on = 0; on < 2; on++) {
        model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 64, .n_threads = 2, .type_k = TQ_F32, .type_v = TQ_F32, .mtp = on,
                                .mtp_seqs = 2 };
        model_ctx *c;
        ASSERT(model_ctx_new(m, &cp, &c) == PK_OK);
        /* the 280-token prompt in chunks of 64, then one token more */
        for (int k = 0; k < 2; k++) l[on][k] = malloc((size_t)V * sizeof(float));
        ref_batch_make(&rb, g_p[5], g_np[5], 0, 0, false);
        CHECK(model_decode(c, &rb.b, l[on][0]) == PK_OK);
        ref_batch_make(&rb, &g_p[4][0], 1, g_np[5], 0, false);
        CHECK(model_decode(c, &rb.b, l[on][1]) == PK_OK);
        if (on) {
            /* A draft from the kept state of the position before (h_in
             * NULL), from zeros, and from the kept state again: the state
             * is there and is what the block reads; the draft's cell goes
             * each time. */
            const int E = model_get_hparams(m)->n_embd;
            float *d[3], *h = calloc((size_t)E, sizeof *h), *hout = malloc((size_t)E * sizeof *hout);
            kv_pos at = g_np[5] + 1;
            for (int k = 0; k < 3; k++) {
                d[k] = malloc((size_t)V * sizeof(float));
                ref_batch_make(&rb, &g_p[4][1], 1, at, 0, false);
                CHECK(model_mtp_draft(c, &rb.b, k == 1 ? h : NULL, d[k], hout) == PK_OK);
                kv_seq_rm(model_ctx_kv(c), 0, at, -1);
            }
            CHECK(!memcmp(d[0], d[2], (size_t)V * sizeof(float)));
            CHECK(memcmp(d[0], d[1], (size_t)V * sizeof(float)) != 0);
            for (int k = 0; k < 3; k++) free(d[k]);
            free(h);
            free(hout);
        }
        model_ctx_free(c);
    }
    for (int k = 0; k < 2; k++) {
        CHECK(!memcmp(l[0][k], l[1][k], (size_t)V * sizeof(float)));
        free(l[0][k]);
        free(l[1][k]);
    }
    model_ctx_params bad = { .n_ctx = 64, .n_ubatch = 8, .n_threads = 1, .type_k = TQ_F32, .type_v = TQ_F32, .mtp = true };
    model *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 46 --type q8_0");
    model_ctx *c = NULL;
    CHECK(!model_has_mtp(d));
    CHECK_EQ_INT(model_ctx_new(d, &bad, &c), PK_EINVAL);   /* no MTP block to run */
    model_free(d);
    model_free(m);
}

/* Engines whose sessions guess with the model's MTP block. */
static eng *start_mtp(model *m, int n_slots)
{
    eng_params ep = eng_default_params();
    ep.n_slots = n_slots;
    ep.n_ctx = n_slots * 1024;
    ep.n_threads = 2;
    ep.spec.kind = SPEC_DRAFT_MTP;
    ep.spec.n_max = 4;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    return e;
}

/* A trunk that adds nothing to the embeddings and an MTP block that
 * passes the next token's normed embedding through: the block predicts
 * what the trunk will say, every guess is kept.  Then the MTP block of
 * random weights (wrong nearly always): the text is the model's own
 * greedy text and seeded text, the state rolled back after every guess
 * not kept. */
static void test_mtp(void)
{
    model *m = make("t", GEN_DENSE " --type q8_0 --pass-through-from 0 --mtp-agree");
    eng *e = start_mtp(m, NP);
    int64_t drafted, kept = greedy_equal_kind(e, m, SPEC_DRAFT_MTP, &drafted);
    printf("  MTP that agrees: %lld of %lld guesses kept\n", (long long)kept, (long long)drafted);
    CHECK(kept > NP * N_GEN);
    CHECK(kept == drafted);
    /* A logit bias the block does not know of bans a token the text has:
     * the guesses past it are wrong, the state goes back and the kept
     * tokens are decoded again; the text is the one without guesses. */
    kept = drafted = 0;
    for (int i = 0; i < NP; i++) {
        collected g;
        eng_completion c = req(g_p[i], g_np[i], 60, SPEC_NONE);
        eng_task *t;
        CHECK(eng_submit(e, &c, &t) == PK_OK);
        collect(t, &g);
        /* (a step here keeps 4 guesses and samples a fifth: 21 and 33 are guesses) */
        eng_bias ban[2] = { { g.tok[21], -INFINITY }, { g.tok[33], -INFINITY } };
        eng_event done;
        CHECK(banned_same(e, g_p[i], g_np[i], 60, ban, 2, SPEC_DRAFT_MTP, &done));
        drafted += done.n_drafted;
        kept += done.n_accepted;
    }
    printf("  MTP that agrees, a token banned: %lld of %lld guesses kept\n", (long long)kept, (long long)drafted);
    CHECK(kept > 0 && drafted > kept);
    eng_free(e);
    model_free(m);

    static const char *const random[] = { GEN_DENSE " --type q8_0", GEN_MOE " --type q8_0" };
    for (size_t k = 0; k < ARRAY_LEN(random); k++) {
        m = make("t", random[k]);
        e = start_mtp(m, NP);
        kept = greedy_equal_kind(e, m, SPEC_DRAFT_MTP, &drafted);
        int same = 0;
        for (int i = 0; i < NP; i++) {
            eng_event done;
            same += seeded_same(e, g_p[i], g_np[i], 80, 900 + (uint64_t)i, SPEC_DRAFT_MTP, &done);
            drafted += done.n_drafted;
            kept += done.n_accepted;
        }
        printf("  MTP of random weights (%s): %lld of %lld guesses kept\n", k ? "qwen35moe" : "qwen35",
               (long long)kept, (long long)drafted);
        CHECK_EQ_INT(same, NP);
        CHECK(drafted > kept);
        eng_free(e);
        model_free(m);
    }
}

/* A draft with another vocabulary cannot guess the target's ids. */
static void test_refused(void)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", g_shared);
    model *s, *d = make("d", "--arch qwen3 " SMALL " --n-layer 1 --seed 45 --type q8_0");
    ASSERT(model_load(path, MODEL_MMAP, &s, err, sizeof err) == PK_OK);
    CHECK(eng_draft_compatible(s, d) != NULL);
    eng_params ep = eng_default_params();
    ep.n_slots = 1;
    ep.n_ctx = 512;
    ep.draft = d;
    eng *e = NULL;
    CHECK_EQ_INT(eng_new(s, &ep, &e), PK_EINVAL);
    CHECK(e == NULL);
    model_free(s);
    model_free(d);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    g_shared = test_shared_dir();
    if (!g_shared) SKIP("../shared/models not found (set POLYKV_SHARED): the models need its Qwen3.5 vocabulary");
    g_bin = gen_bin(argv[0]);
    ASSERT(mkdtemp(g_dir));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NP; i++) {
        g_np[i] = i == 5 ? 280 : 8 + 9 * i;
        for (int j = 0; j < g_np[i]; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            g_p[i][j] = 200 + (int32_t)(x % 20000);
        }
    }
    TEST_RUN(test_exact_draft);
    TEST_RUN(test_wrong_draft);
    TEST_RUN(test_grammar);
    TEST_RUN(test_shared_prefix);
    TEST_RUN(test_hybrid_target);
    TEST_RUN(test_refused);
    TEST_RUN(test_mtp_logits);
    TEST_RUN(test_mtp);
    rmdir(g_dir);
    return test_finish();
}
