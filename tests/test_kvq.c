/*
 * test_kvq.c - the quantized K/V cache (-ctk / -ctv q8_0, q4_0) against
 * llama.cpp's runs with the same cache (tests/data/kvq, written by
 * scripts/refs/make_kvq_refs.sh) and measured against llama.cpp's own
 * drift from its F16 cache (tests/data/f16kv).
 *
 * For each model and type T, three distances over the three prompts of
 * ../shared/reference/prompts.txt, each the largest |logit difference| /
 * max |logit| at the first generated position's top 10 and at the 32
 * greedy steps:
 *
 *   drift  llama.cpp T against llama.cpp F16 (steps while the two greedy
 *          runs agree: after that they see different tokens);
 *   self   polykv T against polykv F16, both teacher-forced along
 *          llama.cpp T's greedy tokens;
 *   match  polykv T against llama.cpp T, the same way (and polykv F16
 *          against llama.cpp F16, shown).
 *
 * The acceptance, that polykv's quantized cache stays within llama.cpp's
 * own F16-against-T drift, is held as: polykv's T run moves from its F16
 * run by at most 1.5 x (2 x on the llama model, see models[]) llama.cpp's
 * drift; on a model where both engines hold the same K and V, polykv's T
 * run is within drift / 2 of llama.cpp's (1e-5 of max |logit| on the short
 * prompts) and picks its greedy token at all but one of the steps.  Then the cache's bytes: a q8_0 cell is 34/64 of an
 * F16 one, q4_0 18/64.
 */
#include "ref.h"

#include "../src/kv/kv.h"

/* faithful: polykv's F32 cache gives llama.cpp's F32 logits to 1e-6 of
 * max |logit| on this model (checked below), so the two quantize the same
 * K and V and their quantized runs must agree closely.  The llama model's
 * F32 runs differ by 3.5e-3 already (test_model; its random attention
 * amplifies last-bit differences), and a 4-bit level moved by such a
 * difference moves its logits by as much as quantizing does: there only
 * the drift is compared. */
static const struct { const char *name; bool faithful; } models[] = {
    { "rand-llama-llama3vocab-e256-l2-Q8_0", false },
    { "rand-qwen3-qwen2vocab-e64-l2-Q8_0", true },
};
static const tq_type types[] = { TQ_Q8_0, TQ_Q4_0 };

static double logit_at(json_t *a, size_t i) { return json_real_value(json_array_get(a, i)); }

/* The logit of id in a first_position_top10, NAN when it is not there. */
static double top_logit(json_t *top, json_int_t id)
{
    for (size_t i = 0; i < json_array_size(top); i++) {
        json_t *e = json_array_get(top, i);
        if (json_integer_value(json_object_get(e, "id")) == id) return json_real_value(json_object_get(e, "logit"));
    }
    return NAN;
}

/* llama.cpp F16 (a) against llama.cpp T (b) on one prompt: the largest
 * |diff| over a's top 10 found in b's, and the greedy steps up to the
 * first token the two runs choose differently. */
static double drift(json_t *a, json_t *b)
{
    json_t *ta = json_object_get(a, "first_position_top10"), *tb = json_object_get(b, "first_position_top10");
    double d = 0;
    for (size_t i = 0; i < json_array_size(ta); i++) {
        json_t *e = json_array_get(ta, i);
        double lb = top_logit(tb, json_integer_value(json_object_get(e, "id")));
        if (!isnan(lb)) d = fmax(d, fabs(json_real_value(json_object_get(e, "logit")) - lb));
    }
    json_t *ga = json_object_get(a, "greedy_tokens"), *gb = json_object_get(b, "greedy_tokens");
    json_t *la = json_object_get(a, "greedy_logits"), *lb = json_object_get(b, "greedy_logits");
    for (size_t s = 0; s < json_array_size(ga); s++) {
        if (json_integer_value(json_array_get(ga, s)) != json_integer_value(json_array_get(gb, s))) break;
        d = fmax(d, fabs(logit_at(la, s) - logit_at(lb, s)));
    }
    return d;
}

/* The largest |diff| between logits a and b (or ref's logit where b is
 * NULL) at ref's first-position top 10 (first) or at the token of ref's
 * greedy step s. */
static double at_ref(const float *a, const float *b, json_t *ref, int s)
{
    double d = 0;
    if (s < 0) {
        json_t *top = json_object_get(ref, "first_position_top10");
        for (size_t i = 0; i < json_array_size(top); i++) {
            json_t *e = json_array_get(top, i);
            json_int_t id = json_integer_value(json_object_get(e, "id"));
            d = fmax(d, fabs(a[id] - (b ? b[id] : json_real_value(json_object_get(e, "logit")))));
        }
    } else {
        json_int_t id = json_integer_value(json_array_get(json_object_get(ref, "greedy_tokens"), s));
        d = fabs(a[id] - (b ? b[id] : logit_at(json_object_get(ref, "greedy_logits"), s)));
    }
    return d;
}

typedef struct dist { double match, self; int agree, steps; } dist;

/* ctx (and, when c2 is given, c2 beside it) on one of ref's prompts,
 * teacher-forced along ref's greedy tokens: match, the largest |diff|
 * between ctx's logits and ref's; self, between ctx's and c2's; agree,
 * the steps where ctx's argmax is ref's token. */
static void run_along(model_ctx *ctx, model_ctx *c2, const tok_vocab *voc, int32_t V, json_t *ref, float *la,
                      float *lb, dist *d)
{
    static int32_t ids[4096];
    static ref_batch rb;
    int32_t n;
    if (!ref_first_logits(ctx, voc, ref, ids, 4096, &n, la) || (c2 && !ref_first_logits(c2, voc, ref, ids, 4096, &n, lb))) {
        d->match = INFINITY;
        return;
    }
    json_t *g = json_object_get(ref, "greedy_tokens");
    for (int s = -1; s < (int)json_array_size(g); s++) {
        d->match = fmax(d->match, at_ref(la, NULL, ref, s));
        if (c2) d->self = fmax(d->self, at_ref(la, lb, ref, s));
        if (s < 0) continue;
        int32_t want = (int32_t)json_integer_value(json_array_get(g, s));
        d->agree += smp_argmax(la, V) == want;
        d->steps++;
        ref_batch_make(&rb, &want, 1, n + s, 0, false);
        CHECK(model_decode(ctx, &rb.b, la) == PK_OK);
        if (c2) CHECK(model_decode(c2, &rb.b, lb) == PK_OK);
    }
}

static void check(const char *shared, const char *name, bool faithful, tq_type t)
{
    char path[512], jq[512], jf[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", shared, name);
    snprintf(jq, sizeof jq, "tests/data/kvq/%s.%s.json", name, tq_get(t)->name);
    snprintf(jf, sizeof jf, "tests/data/f16kv/%s.json", name);
    char err[512] = "";
    model *m;
    pk_status st = model_load(path, MODEL_MMAP, &m, err, sizeof err);
    CHECK(st == PK_OK);
    if (st) {
        fprintf(stderr, "%s: %s\n", path, err);
        return;
    }
    model_ctx_params cp = { .n_ctx = 2048, .n_ubatch = 512, .n_threads = 2, .type_k = t, .type_v = t };
    model_ctx *ctx = NULL, *c16 = NULL;
    CHECK(model_ctx_new(m, &cp, &ctx) == PK_OK);
    cp.type_k = cp.type_v = TQ_F16;
    CHECK(model_ctx_new(m, &cp, &c16) == PK_OK);
    json_t *q = ref_load_json(jq), *f = ref_load_json(jf);
    int32_t V = model_get_hparams(m)->n_vocab;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    CHECK(q && f && ctx && c16);
    if (!q || !f || !ctx || !c16) goto out;
    json_t *rq = json_object_get(q, "results"), *rf = json_object_get(f, "results");
    CHECK_EQ_INT(json_array_size(rq), json_array_size(rf));
    double max_logit = 0, drift_ref = 0;
    dist dq = {0}, d16 = {0};
    double short_match = 0;   /* the prompts of 5 and 16 tokens */
    for (size_t p = 0; p < json_array_size(rq); p++) {
        json_t *q_p = json_array_get(rq, p);
        max_logit = fmax(max_logit, ref_top_maxabs(json_object_get(json_array_get(rf, p), "first_position_top10")));
        drift_ref = fmax(drift_ref, drift(json_array_get(rf, p), q_p));
        dist one = {0};
        run_along(ctx, c16, model_vocab(m), V, q_p, la, lb, &one);
        if (json_array_size(json_object_get(q_p, "prompt_tokens")) < 100) short_match = fmax(short_match, one.match);
        dq = (dist){ fmax(dq.match, one.match), fmax(dq.self, one.self), dq.agree + one.agree, dq.steps + one.steps };
        run_along(c16, NULL, model_vocab(m), V, json_array_get(rf, p), la, lb, &d16);
    }
    const char *tn = tq_get(t)->name;
    printf("%-36s %s, |diff| / max |logit|: llama.cpp %s vs its f16 %.2e, polykv %s vs its f16 %.2e; polykv vs "
           "llama.cpp: %s %.2e, f16 %.2e; greedy agreeing with llama.cpp %s %d/%d\n", name, tn, tn,
           drift_ref / max_logit, tn, dq.self / max_logit, tn, dq.match / max_logit, d16.match / max_logit, tn,
           dq.agree, dq.steps);
    CHECK(drift_ref > 0);
    /* Our quantized cache moves the logits from our F16 cache's about as
     * much as llama.cpp's moves its own (llama.cpp's drift is counted only
     * while its two runs choose the same tokens, so fewer steps). */
    CHECK(dq.self <= (faithful ? 1.5 : 2.0) * drift_ref);
    /* And where both engines hold the same K and V, our quantized run is
     * within half of llama.cpp's drift of its quantized run. */
    if (faithful) {
        CHECK(dq.match <= drift_ref / 2);
        /* on the short prompts, nothing for rounding to grow from: the same
         * cells and the query rounded as llama.cpp rounds it */
        CHECK(short_match <= 1e-5 * max_logit);
        CHECK(dq.agree >= dq.steps - 1);
        char jr[512];
        snprintf(jr, sizeof jr, "%s/reference/%s.json", shared, name);
        json_t *r = ref_load_json(jr);
        cp.type_k = cp.type_v = TQ_F32;
        model_ctx *c32 = NULL;
        CHECK(r && model_ctx_new(m, &cp, &c32) == PK_OK);
        dist d32 = {0};
        if (r && c32) run_along(c32, NULL, model_vocab(m), V, json_array_get(json_object_get(r, "results"), 0), la, lb, &d32);
        CHECK(d32.match <= 1e-6 * max_logit);
        model_ctx_free(c32);
        json_decref(r);
    }
    /* the real bytes: rows of the type's blocks */
    size_t cell = kv_k_row_bytes(model_ctx_kv(ctx)) + kv_v_row_bytes(model_ctx_kv(ctx));
    size_t cell16 = kv_k_row_bytes(model_ctx_kv(c16)) + kv_v_row_bytes(model_ctx_kv(c16));
    CHECK_EQ_INT(cell * 64, cell16 * (t == TQ_Q8_0 ? 34 : 18));
out:
    free(la);
    free(lb);
    json_decref(q);
    json_decref(f);
    model_ctx_free(ctx);
    model_ctx_free(c16);
    model_free(m);
}

/* A head dimension that is not a whole number of blocks is refused with
 * the reason (stories260K's 8), by the check and by model_ctx_new. */
static void refusals(const char *shared)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    model *m;
    CHECK(model_load(path, MODEL_MMAP, &m, err, sizeof err) == PK_OK);
    const char *why = model_kv_types_refusal(m, TQ_Q8_0, TQ_F16);
    CHECK(why && strstr(why, "head dimension"));
    CHECK(model_kv_types_refusal(m, TQ_F16, TQ_BF16) == NULL);
    CHECK(model_kv_types_refusal(m, TQ_Q4_K, TQ_F16) != NULL);
    model_ctx_params cp = { .n_ctx = 64, .n_ubatch = 16, .n_threads = 1, .type_k = TQ_F16, .type_v = TQ_Q4_0 };
    model_ctx *ctx = (model_ctx *)1;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &ctx), PK_EINVAL);
    CHECK(ctx == NULL);
    model_free(m);
}

int main(void)
{
    const char *shared = test_shared_dir();
    if (!shared) {
        printf("SKIP test_kvq: ../shared absent (set POLYKV_SHARED): the models and llama.cpp's runs of them\n");
        return 77;
    }
    for (size_t i = 0; i < ARRAY_LEN(models); i++)
        for (size_t t = 0; t < ARRAY_LEN(types); t++) check(shared, models[i].name, models[i].faithful, types[t]);
    refusals(shared);
    return test_finish();
}
