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
 *   - the engine (eng_check after every step, POLYKV_CHECK=1 as tests/run.sh
 *     sets it): greedy completions equal greedy decoding with the model
 *     directly, for a first prompt, its retry (continued from the
 *     checkpoint one token before its end), a next turn that extends the
 *     transcript (from the history's end), a rewritten last message (from
 *     a checkpoint), a history parked by other sessions and one restored
 *     from the RAM tier, a slot saved, erased and restored, and sessions
 *     on a pool; a fork where the pool has no state is refused.
 * The model: the random-weight qwen35 that `polykv gen-model` writes from
 * a seed (gen.h; test_qwen35 holds it to llama.cpp's outputs), in Q8_0.
 */
#include "ref.h"
#include "../src/mem/mem.h"
#include "../src/engine/eng.h"
#include "gen.h"

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

/* Random shares, keeps, drops, checkpoints and steps over 6 sequences:
 * the invariants after each, everything free at the end. */
static void case_random(void)
{
    mem_clear(g_mem);
    int32_t len[6] = { 0 };
    for (int op = 0; op < 300; op++) {
        kv_seq a = (kv_seq)below(6), b = (kv_seq)below(6);
        switch (below(6)) {
        case 0:   /* extend a by a few tokens, maybe with a checkpoint inside */
            if (len[a] + 8 < 200) {
                int add = 1 + (int)below(8);
                if (add > 1 && below(2)) mem_checkpoint_at(g_mem, a, len[a] + add / 2);
                if (feed(a, len[a], len[a] + add, NULL) == PK_OK) len[a] += add;
            }
            break;
        case 1:
            if (a != b) {
                mem_drop(g_mem, b);
                len[b] = mem_share(g_mem, a, b, 0, (int32_t)below((uint32_t)len[a] + 1));
            }
            break;
        case 2: len[a] = mem_keep(g_mem, a, (int32_t)below((uint32_t)len[a] + 1)); break;
        case 3: mem_drop(g_mem, a), len[a] = 0; break;
        default:
            if (len[a] > 0 && len[a] < 200 && feed(a, len[a], len[a] + 1, NULL) == PK_OK) len[a]++;
            break;
        }
        CHECK(mem_holds(g_mem, a, len[a]) && mem_holds(g_mem, b, len[b]));
        CHECK(len[a] == 0 || mem_can_resume(g_mem, a, len[a]));
        check_accounting();
    }
    for (kv_seq s = 0; s < 6; s++) mem_drop(g_mem, s);
    CHECK_EQ_INT(mem_used(g_mem), 0);
    CHECK_EQ_INT(mem_states_used(g_mem), 0);
}

/* ---- the engine ---- */

/* Greedy tokens straight from the model (a fresh context), the reference. */
static int greedy_direct(const int32_t *prompt, int n, int n_gen, int32_t *out)
{
    model_ctx_params cp = { .n_ctx = 1024, .n_ubatch = 512, .n_threads = 2, .type_k = TQ_F16, .type_v = TQ_F16 };
    model_ctx *ctx;
    ASSERT(model_ctx_new(g_m, &cp, &ctx) == PK_OK);
    float *logits = malloc((size_t)g_V * sizeof *logits);
    static ref_batch rb;
    ref_batch_make(&rb, prompt, n, 0, 0, false);
    ASSERT(model_decode(ctx, &rb.b, logits) == PK_OK);
    int k = 0;
    for (; k < n_gen; k++) {
        out[k] = smp_argmax(logits, g_V);
        ref_batch_make(&rb, &out[k], 1, n + k, 0, false);
        ASSERT(model_decode(ctx, &rb.b, logits) == PK_OK);
    }
    free(logits);
    model_ctx_free(ctx);
    return k;
}

typedef struct run {
    int32_t tok[64];
    int n_tok;
    int32_t n_cached, slot;
    eng_ev_kind end;
} run;

static int32_t g_pool;   /* the pool the completions attach to, 0: none */

/* A greedy completion of n_gen tokens through the engine (slot -1: any). */
static run complete(eng *e, const int32_t *prompt, int n, int n_gen, int32_t slot)
{
    eng_completion c = { .prompt = prompt, .n_prompt = n, .n_predict = n_gen, .cache_prompt = true,
                         .id_slot = slot, .ignore_eos = true, .report_placed = true, .pool_id = g_pool };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    run r = { .n_cached = -1, .slot = -1 };
    eng_task *t;
    CHECK_EQ_INT(eng_submit(e, &c, &t), PK_OK);
    eng_event ev;
    while (eng_task_next(t, &ev, 60000) == PK_OK) {
        eng_ev_kind k = ev.kind;
        if (k == ENG_EV_PLACED) r.n_cached = ev.n_cached, r.slot = ev.slot;
        if (k == ENG_EV_TOKEN && r.n_tok < 64) r.tok[r.n_tok++] = ev.token;
        eng_event_clear(&ev);
        if (k != ENG_EV_TOKEN && k != ENG_EV_PLACED && k != ENG_EV_PROGRESS) {
            r.end = k;
            break;
        }
    }
    eng_task_release(t);
    return r;
}

/* The engine's run of prompt equals the model's own greedy run. */
static run check_run(eng *e, const int32_t *prompt, int n, int32_t slot, const char *what)
{
    enum { G = 12 };
    int32_t want[G];
    greedy_direct(prompt, n, G, want);
    run r = complete(e, prompt, n, G, slot);
    CHECK_EQ_INT(r.n_tok, G);
    bool eq = r.n_tok == G && !memcmp(r.tok, want, sizeof want);
    CHECK(eq);
    printf("%-28s %3d prompt tokens, %3d reused, greedy %s\n", what, n, r.n_cached, eq ? "equal" : "DIFFERS");
    return r;
}

/* ram: the RAM tier on (the pushed-out history is spilled there) or off
 * (it is parked in the cache). */
static void case_engine(bool ram)
{
    eng_params ep = eng_default_params();
    if (!ram) ep.cache_ram_mib = 0, ep.policy.park_min_value = 0;   /* a short history is parked too */
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(g_m, &ep, &e) == PK_OK);
    static int32_t p[512];
    int n = 80;
    memcpy(p, g_tok, (size_t)n * sizeof *p);
    run r = check_run(e, p, n, -1, "first prompt");
    CHECK_EQ_INT(r.n_cached, 0);
    r = check_run(e, p, n, -1, "retry");
    CHECK_EQ_INT(r.n_cached, n - 1);                 /* the checkpoint before the prompt's end */
    /* the next turn: the transcript with the reply, then more */
    memcpy(p + n, r.tok, 12 * sizeof *p);
    memcpy(p + n + 12, g_tok + 100, 30 * sizeof *p);
    int n2 = n + 42;
    r = check_run(e, p, n2, -1, "next turn");
    CHECK(r.n_cached >= n + 11);                    /* the history's end (the last reply token is not in it) */
    /* a classifier rewrites the last message: from the checkpoint at the
     * previous prompt's end */
    p[n2 - 5] = 7;
    r = check_run(e, p, n2, -1, "last message rewritten");
    CHECK(r.n_cached >= n - 1 && r.n_cached < n2 - 5);
    /* a slot saved, erased, restored into the other slot, continued */
    char dir[] = "/tmp/polykv-hybrid-XXXXXX";
    ASSERT(mkdtemp(dir));
    eng_file_reply fr;
    CHECK_EQ_INT(eng_slot_save(e, r.slot, dir, "h.bin", &fr), PK_OK);
    int32_t saved = fr.n_tokens;
    CHECK_EQ_INT(eng_erase(e, 0, NULL), PK_OK);
    CHECK_EQ_INT(eng_erase(e, 1, NULL), PK_OK);
    CHECK_EQ_INT(eng_slot_restore(e, 1 - r.slot, dir, "h.bin", &fr), PK_OK);
    CHECK_EQ_INT(fr.n_tokens, saved);
    memcpy(p + n2, r.tok, 12 * sizeof *p);
    int n3 = n2 + 12;
    r = check_run(e, p, n3, -1, "after save and restore");
    CHECK(r.n_cached >= saved - 1);
    char path[128];
    snprintf(path, sizeof path, "%s/h.bin", dir);
    unlink(path);
    rmdir(dir);
    /* two other sessions at once take both slots: the history is parked
     * (or spilled to RAM); its next turn still finds it */
    static int32_t o[2][200];
    eng_task *t[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 120; i++) o[k][i] = g_tok[(i * 7 + k * 13) % 256] + k;
        eng_completion c = { .prompt = o[k], .n_prompt = 120, .n_predict = 8, .cache_prompt = true,
                             .id_slot = -1, .ignore_eos = true };
        c.sp = smp_default_params();
        CHECK_EQ_INT(eng_submit(e, &c, &t[k]), PK_OK);
    }
    for (int k = 0; k < 2; k++) {
        eng_event ev;
        while (eng_task_next(t[k], &ev, 60000) == PK_OK) {
            bool end = ev.kind != ENG_EV_TOKEN && ev.kind != ENG_EV_PLACED && ev.kind != ENG_EV_PROGRESS;
            eng_event_clear(&ev);
            if (end) break;
        }
        eng_task_release(t[k]);
    }
    eng_stats st;
    CHECK_EQ_INT(eng_get_stats(e, &st), PK_OK);
    CHECK(ram ? st.n_spilled >= 1 : st.n_parked >= 1);
    printf("out of its slot: %d parked, %d in RAM\n", st.n_parked, st.n_spilled);
    for (int i = 0; getenv("SHOW_EVENTS") && i < st.n_events; i++)
        printf("  event %d slot %d seq %d n %d: %s\n", st.events[i].kind, st.events[i].slot, st.events[i].seq,
               st.events[i].n_tokens, st.events[i].reason);
    memcpy(p + n3, r.tok, 12 * sizeof *p);
    int n4 = n3 + 12;
    r = check_run(e, p, n4, -1, "parked or in RAM");
    CHECK(r.n_cached >= n3);
    eng_free(e);
}

/* A pool: sessions attach from its end; a fork inside it is refused (409
 * in HTTP) where the pool has no state, and accepted at its end. */
static void case_pool(void)
{
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(g_m, &ep, &e) == PK_OK);
    enum { L = 60 };
    eng_pool_req rq = { .verb = ENG_POOL_CREATE, .tokens = g_tok, .n_tokens = L, .branch_pos = -1 };
    eng_pool_reply rp;
    CHECK_EQ_INT(eng_pool_op(e, &rq, &rp), PK_OK);
    g_pool = rp.pool_id;
    static int32_t p[256];
    memcpy(p, g_tok, L * sizeof *p);
    for (int k = 0; k < 2; k++) {
        memcpy(p + L, g_tok + 100 + 20 * k, 20 * sizeof *p);
        run r = check_run(e, p, L + 20, -1, k ? "second sequence on the pool" : "a sequence on the pool");
        CHECK_EQ_INT(r.n_cached, L);
    }
    g_pool = 0;
    memcpy(p, g_tok, L * sizeof *p);
    memcpy(p + L, g_tok + 200, 10 * sizeof *p);
    eng_pool_req fk = { .verb = ENG_POOL_FORK, .pool_id = rp.pool_id, .tokens = p, .n_tokens = L + 10,
                        .branch_pos = 30 };
    eng_pool_reply fr;
    CHECK_EQ_INT(eng_pool_op(e, &fk, &fr), PK_ECONFLICT);
    printf("fork at 30: %s\n", fr.message);
    fk.branch_pos = L;
    CHECK_EQ_INT(eng_pool_op(e, &fk, &fr), PK_OK);
    CHECK_EQ_INT(fr.n_prefilled, 10);
    eng_free(e);
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
    TEST_RUN(case_engine, true);
    TEST_RUN(case_engine, false);
    TEST_RUN(case_pool);
    mem_free(g_mem);
    model_ctx_free(g_ctx);
    model_free(g_m);
    unlink(path);
    rmdir(dir);
    return test_finish();
}
