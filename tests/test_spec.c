/*
 * test_spec.c - speculative decoding (docs/speculative.md):
 *   - the n-gram lookups against a brute-force search over random texts
 *     of a small alphabet (longest key, latest place, the store's
 *     separators and its ring);
 *   - on stories260K: greedy text with each proposer equals greedy
 *     decoding with the model directly, alone and 8 sessions at once, with
 *     guesses verified and kept (else nothing was tested);
 *   - seeded sampling at temperature 1 draws the same tokens with and
 *     without speculation, and the next 3 tokens' distribution over
 *     unrelated seeds passes a chi-square test against the one without;
 *   - a grammar-constrained request writes the same text either way;
 *   - a session started behind another on the same prompt guesses from
 *     the tokens the running one wrote (before it finished);
 *   - the slot's history after a verified step is exactly its tokens
 *     (eng_check runs after every step: POLYKV_CHECK=1);
 *   - on a Qwen3.5 hybrid (gen-model, random weights) the recurrent state
 *     goes back after a guess not kept: greedy equals the model run
 *     directly, 4 sessions at once, and seeded sampling draws the same.
 */
#include "ref.h"

#include <math.h>
#include <time.h>

#include "../src/engine/eng.h"
#include "../src/grammar/gram.h"
#include "../src/spec/spec.h"
#include "gen.h"
#include "spec_run.h"
static uint32_t rnd_u32(void)           /* xorshift64*: the same texts everywhere */
{
    static uint64_t x = 0x5bec5bec1234ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return (uint32_t)((x * 0x2545f4914f6cdd1dull) >> 32);
}

/* ---- the lookups ---- */

/* spec_ngram_lookup by definition: every i, every L. */
static int32_t naive_lookup(const int32_t *t, int32_t n, int32_t kmin, int32_t kmax, int32_t *out, int32_t max,
                            int32_t *key)
{
    *key = 0;
    for (int32_t l = kmax; l >= kmin; l--) {
        for (int32_t i = n - 2; i >= l - 1; i--) {
            bool eq = true;
            for (int32_t d = 0; d < l && eq; d++) eq = t[i - d] == t[n - 1 - d];
            if (!eq) continue;
            int32_t c = MIN(max, n - 1 - i);
            memcpy(out, t + i + 1, (size_t)c * sizeof *out);
            *key = l;
            return c;
        }
    }
    return 0;
}

static void test_lookup(void)
{
    int32_t t[400], a[16], b[16];
    int bad = 0, hits = 0;
    for (int round = 0; round < 3000; round++) {
        int32_t n = 2 + (int32_t)(rnd_u32() % 398), alpha = 2 + (int32_t)(rnd_u32() % 5);
        for (int32_t i = 0; i < n; i++) t[i] = (int32_t)(rnd_u32() % (uint32_t)alpha);
        int32_t kmin = 1 + (int32_t)(rnd_u32() % 4), kmax = kmin + (int32_t)(rnd_u32() % 6);
        int32_t ka, kb, na = spec_ngram_lookup(t, n, kmin, kmax, a, 16, &ka);
        int32_t nb = naive_lookup(t, n, kmin, kmax, b, 16, &kb);
        hits += na > 0;
        bad += na != nb || ka != kb || memcmp(a, b, (size_t)na * sizeof *a) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(hits > 1000);
}

/* The store against a plain list of its generations: of the latest
 * SPEC_STORE_PROBES stored places of the context's last key_min tokens,
 * the one whose key extends furthest back (to key_max; the latest of
 * equals) with a token after it in its generation, and its continuation
 * to the generation's end. */
static void test_store(void)
{
    enum { CAP = 4096, KMIN = 3, KMAX = 6 };
    spec_store *st;
    CHECK_EQ_INT(spec_store_new(CAP, KMIN, &st), PK_OK);
    static int32_t all[1 << 16];        /* every stored token, -1 between generations */
    int32_t n_all = 0, bad = 0, hits = 0, older = 0, ctx[40], out[16], want[16];
    for (int g = 0; g < 600; g++) {
        int32_t len = 1 + (int32_t)(rnd_u32() % 40);
        int32_t gen[40];
        for (int32_t i = 0; i < len; i++) gen[i] = (int32_t)(rnd_u32() % 4);
        spec_store_add(st, gen, len);
        all[n_all++] = -1;
        memcpy(all + n_all, gen, (size_t)len * sizeof *gen);
        n_all += len;
        int32_t nc = KMIN + (int32_t)(rnd_u32() % 8);
        for (int32_t i = 0; i < nc; i++) ctx[i] = (int32_t)(rnd_u32() % 4);
        int32_t key, got = spec_store_lookup(st, ctx, nc, KMAX, out, 16, &key);
        int32_t lo = MAX(0, n_all - (CAP - 1)), wn = 0, wk = 0, wp = -1, latest = -1, seen = 0;
        for (int32_t p = n_all - 1; p >= lo + KMIN - 1 && seen < SPEC_STORE_PROBES; p--) {
            int32_t l = 0;
            while (l < KMAX && l < nc && p - l >= lo && all[p - l] == ctx[nc - 1 - l]) l++;
            if (l < KMIN) continue;
            seen++;
            if (p + 1 >= n_all || all[p + 1] < 0) continue;
            if (latest < 0) latest = p;
            if (l > wk) {
                wk = l;
                wp = p;
            }
        }
        for (int32_t q = wp + 1; wp >= 0 && q < n_all && all[q] >= 0 && wn < 16; q++) want[wn++] = all[q];
        older += wp != latest;   /* a longer key further back than the latest place */
        hits += got > 0;
        bad += got != wn || (got > 0 && (key != wk || memcmp(out, want, (size_t)got * sizeof *out) != 0));
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(hits > 100);
    CHECK(older > 50);
    CHECK_EQ_INT(spec_store_tokens(st), CAP);
    spec_store_free(st);
}

/* spec_gain against its doc's rule, worked by hand: steps on the line
 * t = 10 + 5 rows (a = 10, b = 5) make a row cost 5 / (10 + 5) of one
 * session's token and 4 x 5 / (10 + 4 x 5) with four sessions decoding;
 * a guess keeps the depths whose tallied chance reaches that. */
static void test_gain(void)
{
    static spec_gain g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < 40; i++) spec_gain_step(&g, 1, 15);
    CHECK(spec_gain_threshold(&g, 1) == 0);        /* rows never varied: no cost known */
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 5, spec_gain_threshold(&g, 1)), 5);
    for (int i = 0; i < 200; i++) {
        int rows = 1 + i % 4;
        spec_gain_step(&g, rows, 10 + 5.0 * rows);
    }
    CHECK_NEAR(spec_gain_threshold(&g, 1), 5.0 / 15, 1e-9);
    CHECK_NEAR(spec_gain_threshold(&g, 4), 20.0 / 30, 1e-9);

    /* key 3: depth 1 kept 80 of 105, depth 2 45, depth 3 20, depth 4 tried 5 times only */
    for (int i = 0; i < 100; i++) spec_gain_judged(&g, 3, 3, i < 20 ? 3 : i < 45 ? 2 : i < 80 ? 1 : 0);
    for (int i = 0; i < 5; i++) spec_gain_judged(&g, 3, 4, 0);
    CHECK_NEAR(g.kept[3][0] / g.tried[3][0], 80.0 / 105, 1e-6);
    CHECK_NEAR(g.kept[3][1] / g.tried[3][1], 45.0 / 105, 1e-6);
    const double th1 = spec_gain_threshold(&g, 1), th4 = spec_gain_threshold(&g, 4);
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 6, th1), 2);  /* 0.76 and 0.43 reach 1/3; 0.19 does not */
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 6, th4), 1);  /* with four sessions only 0.76 reaches 2/3 */
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 1, th1), 1);
    CHECK_EQ_INT(spec_gain_cut(&g, 8, 6, th1), 6);  /* a key never tallied: tried whole */
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 6, 0), 6);    /* --spec-ngram-p-min 0: nothing cut */
    CHECK_EQ_INT(spec_gain_cut(&g, 3, 6, 0.9), 0);
    /* every SPEC_GAIN_EXPLORE-th cut guess goes whole, the tallies of its cut depths stay current */
    int whole = 0;
    for (int i = 0; i < 4 * SPEC_GAIN_EXPLORE; i++) whole += spec_gain_cut(&g, 3, 6, th1) == 6;
    CHECK_EQ_INT(whole, 4);
    /* tallies forget: past the window both halve, the ratio stays */
    for (int i = 0; i < 1000; i++) spec_gain_judged(&g, 5, 1, i % 2);
    CHECK(g.tried[5][0] <= 257 && g.tried[5][0] >= 128);
    CHECK_NEAR(g.kept[5][0] / g.tried[5][0], 0.5, 0.01);
    /* a flat line (decoding bound by memory): no row costs anything, nothing is cut */
    memset(&g, 0, sizeof g);
    for (int i = 0; i < 200; i++) spec_gain_step(&g, 1 + i % 4, 20);
    CHECK(spec_gain_threshold(&g, 1) == 0);
}

/* ---- the engine ---- */

static model *g_m;
static eng *g_e;
enum { N_PROMPTS = 6, N_GEN = 200 };
static int32_t pr[N_PROMPTS][64], np[N_PROMPTS], want[N_PROMPTS][N_GEN], nw[N_PROMPTS];

/* Greedy, one session at a time and all at once (8 with 6 prompts and two
 * repeated), each proposer: the model's own greedy tokens. */
static void test_greedy(void)
{
    static const spec_kind kinds[] = { SPEC_NGRAM_CACHE, SPEC_NGRAM_SIMPLE };
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++) {
        int64_t drafted = 0, kept = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            eng_completion c = req(pr[i], np[i], N_GEN, kinds[k]);
            eng_task *t;
            collected got;
            CHECK(eng_submit(g_e, &c, &t) == PK_OK);
            collect(t, &got);
            CHECK_EQ_INT(got.n_tok, nw[i]);
            CHECK(memcmp(got.tok, want[i], sizeof(int32_t) * (size_t)MIN(nw[i], got.n_tok)) == 0);
            drafted += got.done.n_drafted;
            kept += got.done.n_accepted;
        }
        eng_task *ts[8];
        for (int i = 0; i < 8; i++) {
            eng_completion c = req(pr[i % N_PROMPTS], np[i % N_PROMPTS], N_GEN, kinds[k]);
            CHECK(eng_submit(g_e, &c, &ts[i]) == PK_OK);
        }
        for (int i = 0; i < 8; i++) {
            collected got;
            collect(ts[i], &got);
            CHECK_EQ_INT(got.n_tok, nw[i % N_PROMPTS]);
            CHECK(memcmp(got.tok, want[i % N_PROMPTS], sizeof(int32_t) * (size_t)MIN(nw[i % N_PROMPTS], got.n_tok)) == 0);
            drafted += got.done.n_drafted;
            kept += got.done.n_accepted;
        }
        printf("  %s: %lld guesses verified, %lld kept\n", spec_kind_name(kinds[k]), (long long)drafted,
               (long long)kept);
        CHECK(kept > 100);
        CHECK(drafted > kept);               /* some were wrong: the rollback ran */
    }
    eng_stats s;
    CHECK(eng_get_stats(g_e, &s) == PK_OK);
    CHECK(s.n_accepted > 0 && s.n_accepted < s.n_drafted && s.n_verify_steps > 0);
}

/* Seeded sampling: the same seed draws the same tokens with or without
 * speculation (a guess only moves where a row's logits come from). */
static void test_seeded(void)
{
    int same = 0, kept = 0;
    for (int i = 0; i < 8; i++) {
        eng_event done;
        same += seeded_same(g_e, pr[i % N_PROMPTS], np[i % N_PROMPTS], 120, 1000 + (uint64_t)i, SPEC_NGRAM_CACHE, &done);
        kept += done.n_accepted;
    }
    CHECK_EQ_INT(same, 8);
    CHECK(kept > 0);
}

/* The next 3 tokens after a text that repeats itself (so the n-gram
 * guesses), drawn at temperature 1 with unrelated seeds with and without
 * speculation: the two histograms of whole 3-token continuations come
 * from one distribution (chi-square of two samples, rare ones pooled,
 * p > 0.01, POLYKV_SPEC_DRAWS draws each, 2,000 by default). */
static double chi2_sf(double x, int k)          /* Wilson-Hilferty */
{
    double z = (pow(x / k, 1.0 / 3) - (1 - 2.0 / (9 * k))) / sqrt(2.0 / (9 * k));
    return 0.5 * erfc(z / sqrt(2.0));
}

static void test_distribution(void)
{
    const char *env = getenv("POLYKV_SPEC_DRAWS");
    int n_draws = env ? atoi(env) : 2000;
    const char *text = "Lily had a red ball. Lily had a red ball. Lily had a red ball. Lily had a";
    int32_t p[64], n;
    ASSERT(tok_encode(model_vocab(g_m), text, strlen(text), true, false, p, 64, &n) == PK_OK);
    enum { MAXC = 4096 };
    static int32_t key[MAXC][3];
    static int cnt[MAXC][2];
    int n_keys = 0, kept = 0;
    for (int sp = 0; sp < 2; sp++) {
        for (int d = 0; d < n_draws; d += 8) {
            eng_task *ts[8];
            for (int j = 0; j < 8; j++) {
                eng_completion c = req(p, n, 3, sp ? SPEC_NGRAM_CACHE : SPEC_NONE);
                c.cache_prompt = true;
                c.sp.temp = 1.0f;
                c.sp.seed = (uint64_t)(sp * 10000000 + d + j + 1);
                CHECK(eng_submit(g_e, &c, &ts[j]) == PK_OK);
            }
            for (int j = 0; j < 8; j++) {
                collected got;
                collect(ts[j], &got);
                kept += sp ? got.done.n_accepted : 0;
                int32_t k3[3] = { -1, -1, -1 };
                memcpy(k3, got.tok, sizeof(int32_t) * (size_t)MIN(got.n_tok, 3));
                int f = 0;
                while (f < n_keys && memcmp(key[f], k3, sizeof k3)) f++;
                if (f == n_keys && n_keys < MAXC) memcpy(key[n_keys++], k3, sizeof k3);
                if (f < MAXC) cnt[f][sp]++;
            }
        }
    }
    /* Categories with fewer than 10 draws in all are pooled into one. */
    double chi = 0, pool[2] = { 0, 0 };
    int dof = 0;
    for (int f = 0; f < n_keys; f++) {
        double a = cnt[f][0], b = cnt[f][1];
        if (a + b < 10) { pool[0] += a; pool[1] += b; continue; }
        chi += (a - b) * (a - b) / (a + b);
        dof++;
    }
    if (pool[0] + pool[1] > 0) {
        chi += (pool[0] - pool[1]) * (pool[0] - pool[1]) / (pool[0] + pool[1]);
        dof++;
    }
    double pv = dof > 1 ? chi2_sf(chi, dof - 1) : 1;
    printf("  distribution: %d continuations, chi2 %.1f on %d dof, p = %.3f; %d guesses kept\n", n_keys, chi, dof - 1,
           pv, kept);
    CHECK(dof > 5);
    CHECK(kept > n_draws / 4);               /* speculation ran on most draws */
    CHECK(pv > 0.01);
}

/* A grammar (the story's sentence, then anything of a-z and spaces):
 * the same text with and without speculation. */
static void test_grammar(void)
{
    const char *g = "root ::= \"Lily had a red ball.\" [a-z .]*";
    gram_grammar *gr;
    gram_error ge;
    CHECK_EQ_INT(gram_parse(g, strlen(g), "root", &gr, &ge), PK_OK);
    collected got[2];
    for (int sp = 0; sp < 2; sp++) {
        eng_completion c = req(pr[1], np[1], 150, sp ? SPEC_NGRAM_CACHE : SPEC_NONE);
        c.grammar = gr;
        eng_task *t;
        CHECK(eng_submit(g_e, &c, &t) == PK_OK);
        collect(t, &got[sp]);
    }
    gram_free(gr);
    CHECK_EQ_INT(got[0].n_tok, got[1].n_tok);
    CHECK(!memcmp(got[0].tok, got[1].tok, sizeof(int32_t) * (size_t)got[0].n_tok));
    CHECK(got[1].done.n_accepted > 0);
}

/* A turn that continues a speculated one reuses its history whole: the
 * cells of guesses not kept are gone and the kept ones are the tokens. */
static void test_continue(void)
{
    eng_completion c = req(pr[0], np[0], 100, SPEC_NGRAM_CACHE);
    c.cache_prompt = true;
    c.id_slot = 3;
    eng_task *t;
    collected got;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    collect(t, &got);
    CHECK(got.done.n_drafted > got.done.n_accepted && got.done.n_accepted > 0);
    int32_t next[400], n = 0;
    memcpy(next, pr[0], sizeof(int32_t) * (size_t)np[0]);
    n = np[0];
    memcpy(next + n, got.tok, sizeof(int32_t) * (size_t)got.n_tok);
    n += got.n_tok;
    eng_completion c2 = req(next, n, 4, SPEC_NONE);
    c2.cache_prompt = true;
    c2.id_slot = 3;
    CHECK(eng_submit(g_e, &c2, &t) == PK_OK);
    collect(t, &got);
    /* Every token but the last sampled one (never decoded) was in the cache. */
    CHECK_EQ_INT(got.done.n_cached, n - 1);
}

/* A sibling behind a running session: B starts on A's prompt when A has
 * written 100 tokens (steps slowed to 2 ms, so A is still running when B
 * ends) and keeps most of its guesses, which only A's text can give (the
 * store is empty: this engine has finished nothing). */
static void test_sibling(void)
{
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 2 * 512;
    ep.n_threads = 2;
    ep.spec.kind = SPEC_NGRAM_CACHE;
    setenv("POLYKV_TEST_STEP_DELAY_MS", "2", 1);
    eng *e;
    pk_status st = eng_new(g_m, &ep, &e);
    unsetenv("POLYKV_TEST_STEP_DELAY_MS");
    CHECK_EQ_INT(st, PK_OK);
    if (st) return;
    eng_completion ca = req(pr[0], np[0], 400, SPEC_NGRAM_CACHE), cb = req(pr[0], np[0], 60, SPEC_NGRAM_CACHE);
    ca.ignore_eos = cb.ignore_eos = true;
    eng_task *ta, *tb;
    CHECK(eng_submit(e, &ca, &ta) == PK_OK);
    int32_t a_tok[400];
    int n_a = 0;
    eng_event ev;
    while (n_a < 100 && eng_task_next(ta, &ev, 30000) == PK_OK && ev.kind == ENG_EV_TOKEN) {
        a_tok[n_a++] = ev.token;
        eng_event_clear(&ev);
    }
    CHECK(eng_submit(e, &cb, &tb) == PK_OK);
    collected b;
    collect(tb, &b);
    eng_stats stats;
    CHECK(eng_get_stats(e, &stats) == PK_OK);
    CHECK_EQ_INT(stats.n_running, 1);                 /* A still runs */
    CHECK_EQ_INT(b.n_tok, 60);
    CHECK(!memcmp(b.tok, a_tok, sizeof(int32_t) * 60));
    printf("  sibling: %d of %d guesses kept\n", b.done.n_accepted, b.done.n_drafted);
    CHECK(b.done.n_accepted >= 40);
    eng_task_cancel(ta);
    eng_task_release(ta);
    eng_free(e);
}

static void test_hybrid(const char *bin, const char *shared)
{
    char dir[] = "/tmp/polykv-test-spec-XXXXXX", path[300], err[512] = "";
    ASSERT(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/qwen35.gguf", dir);
    ASSERT(gen_model(bin, shared, GEN_DENSE " --type q8_0", path));
    model *m;
    ASSERT(model_load(path, MODEL_MMAP, &m, err, sizeof err) == PK_OK);
    enum { NH = 4, GEN = 150 };
    static int32_t p[NH][40], w[NH][GEN];
    int np_[NH], nw_[NH];
    for (int i = 0; i < NH; i++) {
        np_[i] = 10 + 7 * i;
        for (int j = 0; j < np_[i]; j++) p[i][j] = 100 + (int32_t)(rnd_u32() % 5000);
        nw_[i] = ref_greedy(m, p[i], np_[i], GEN, w[i]);
    }
    eng_params ep = eng_default_params();
    ep.n_slots = NH;
    ep.n_ctx = NH * 512;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    int64_t drafted = 0, kept = 0;
    eng_task *ts[NH];
    for (int i = 0; i < NH; i++) {
        eng_completion c = req(p[i], np_[i], GEN, SPEC_NGRAM_CACHE);
        CHECK(eng_submit(e, &c, &ts[i]) == PK_OK);
    }
    for (int i = 0; i < NH; i++) {
        collected got;
        collect(ts[i], &got);
        CHECK_EQ_INT(got.n_tok, nw_[i]);
        CHECK(!memcmp(got.tok, w[i], sizeof(int32_t) * (size_t)MIN(nw_[i], got.n_tok)));
        drafted += got.done.n_drafted;
        kept += got.done.n_accepted;
    }
    int same = 0;
    for (int i = 0; i < NH; i++) {
        eng_event done;
        same += seeded_same(e, p[i], np_[i], GEN, 77 + (uint64_t)i, SPEC_NGRAM_CACHE, &done);
        drafted += done.n_drafted;
        kept += done.n_accepted;
    }
    CHECK_EQ_INT(same, NH);
    /* Guesses that go wrong: a request that bans the token its text had
     * at position 30 (a logit bias) after that text went into the store:
     * the store guesses the old text past 30, the model writes another,
     * and the state goes back to the step's start.  Against the same
     * request without speculation. */
    int64_t d0 = drafted, k0 = kept;
    for (int i = 0; i < NH; i++) {
        eng_completion c = req(p[i], np_[i], 60, SPEC_NONE);
        eng_task *t;
        collected g;
        CHECK(eng_submit(e, &c, &t) == PK_OK);
        collect(t, &g);
        eng_bias ban = { g.tok[30], -INFINITY };
        eng_event done;
        CHECK(banned_same(e, p[i], np_[i], 60, &ban, 1, SPEC_NGRAM_CACHE, &done));
        drafted += done.n_drafted;
        kept += done.n_accepted;
    }
    CHECK(drafted - d0 > kept - k0);          /* guesses not kept: rollbacks ran */
    eng_stats st;
    CHECK(eng_get_stats(e, &st) == PK_OK);
    printf("  hybrid: %lld guesses verified, %lld kept; %d states in use after\n", (long long)drafted,
           (long long)kept, st.states_used);
    CHECK(kept > 20 && drafted > kept);      /* kept ones and rolled-back ones both ran */
    eng_free(e);
    model_free(m);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_lookup);
    TEST_RUN(test_store);
    TEST_RUN(test_gain);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): the engine checks need stories260K");
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    ASSERT(model_load(path, MODEL_COPY, &g_m, err, sizeof err) == PK_OK);
    const char *texts[N_PROMPTS] = { "Once upon a time", "Lily had a red ball. She", "The sun was",
                                     "Tom and his dog", "One day, a little girl named Sue", "The bird sang" };
    for (int i = 0; i < N_PROMPTS; i++) {
        ASSERT(tok_encode(model_vocab(g_m), texts[i], strlen(texts[i]), true, false, pr[i], 64, &np[i]) == PK_OK);
        nw[i] = ref_greedy(g_m, pr[i], np[i], N_GEN, want[i]);
    }
    eng_params ep = eng_default_params();
    ep.n_slots = 8;
    ep.n_ctx = 8 * 512;
    ep.n_threads = 2;
    ep.spec.size_n = 3;                      /* ngram-simple's key: stories repeat short phrases */
    ep.spec.ngram_p_min = 0;                 /* every guess verified: the checks below need guesses */
    ASSERT(eng_new(g_m, &ep, &g_e) == PK_OK);
    TEST_RUN(test_greedy);
    TEST_RUN(test_seeded);
    TEST_RUN(test_grammar);
    TEST_RUN(test_continue);
    TEST_RUN(test_distribution);
    eng_free(g_e);
    TEST_RUN(test_sibling);
    TEST_RUN(test_hybrid, gen_bin(argv[0]), shared);
    model_free(g_m);
    return test_finish();
}
