/*
 * test_policy.c - the slot policy (src/policy) on hand-built tables: curves
 * at their knots, parameters (flags, environment, JSON), each placement rule,
 * parking, drop order and the worked example of docs/policy.md.  The random
 * property test and the timing are in test_policy_prop.c.
 *
 * POL_TEST_VERBOSE=1 prints every decision and the worked example's values.
 */
#include "policy_tables.h"

/* ---- curves ----------------------------------------------------------- */

static void test_curves(void)
{
    static const struct { int64_t n; double s; } knots[] = {
        { 500, 0.1 }, { 2000, 2 }, { 8000, 10 }, { 32000, 45 },
        { 50000, 65 }, { 100000, 90 }, { 262144, 120 },
    };
    for (size_t i = 0; i < ARRAY_LEN(knots); i++) {
        CHECK_NEAR(pol_ttl_s(knots[i].n, 120), knots[i].s, 1e-12);
        CHECK_NEAR(pol_ttl_s(knots[i].n, 60), knots[i].s / 2, 1e-12);
        CHECK_NEAR(pol_ttl_s(knots[i].n, 240), knots[i].s * 2, 1e-12);
    }
    CHECK_NEAR(pol_ttl_s(1250, 120), 1.05, 1e-12);
    CHECK_NEAR(pol_ttl_s(250, 120), 0.05, 1e-12);
    CHECK_NEAR(pol_ttl_s(41000, 120), 55, 1e-12);
    CHECK_NEAR(pol_ttl_s(1000000, 120), 120, 0);
    CHECK_NEAR(pol_ttl_s(0, 120), 0, 0);
    CHECK_NEAR(pol_ttl_s(-5, 120), 0, 0);
    CHECK_NEAR(pol_ttl_s(50000, 0), 0, 0);

    CHECK_NEAR(pol_size_weight(50000), (50000.0 / 52000) * (50000.0 / 52000), 1e-12);
    CHECK_NEAR(pol_size_weight(100000), pow(2, 0.7) * pow(100000.0 / 102000, 2), 1e-12);
    CHECK_NEAR(pol_size_weight(0), 0, 0);

    pol_params p = pol_params_default();
    int64_t n = 32000;
    double sz = pol_size_weight(n), ttl = pol_ttl_s(n, 120);
    CHECK_NEAR(pol_retention(n, 0, ttl), sz, 1e-12);
    CHECK_NEAR(pol_retention(n, ttl / 2, ttl), sz * 0.625, 1e-12);
    CHECK_NEAR(pol_retention(n, ttl, ttl), sz * 0.25, 1e-12);
    CHECK_NEAR(pol_retention(n, -3, ttl), sz, 1e-12);
    CHECK_NEAR(pol_retention(n, 5, 0), sz * 0.25, 1e-12);
    CHECK_NEAR(pol_value(n, 0, &p), sz, 1e-12);
    CHECK_NEAR(pol_value(n, 9, &p), sz * (0.25 + 0.75 * 0.8), 1e-12);
    CHECK_NEAR(pol_value(n, ttl - 1e-9, &p), sz * 0.25, 1e-9);  /* continuous at ttl */
    CHECK_NEAR(pol_value(n, ttl, &p), sz * 0.25, 1e-12);
    CHECK_NEAR(pol_value(n, ttl + (1800 - ttl) / 2, &p), sz * 0.25 * 0.75, 1e-12);
    CHECK_NEAR(pol_value(n, 1800, &p), 0, 1e-15);
    CHECK_NEAR(pol_value(n, 5000, &p), 0, 0);
    p.idle_value_zero_s = 0;
    CHECK_NEAR(pol_value(n, 1e6, &p), sz * 0.25, 1e-12);
    p.idle_value_zero_s = 30;   /* below the ttl: worthless once expired */
    CHECK_NEAR(pol_value(n, 44, &p), pol_retention(n, 44, ttl), 1e-12);
    CHECK_NEAR(pol_value(n, 45, &p), 0, 0);
    p = pol_params_default();
    p.ttl_max_s = 0;
    CHECK_NEAR(pol_value(n, 0, &p), sz * 0.25, 1e-12);
    CHECK_NEAR(pol_overwrite_score(0), 1, 0);
    CHECK_NEAR(pol_overwrite_score(1), 0.5, 0);

    pol_state st;
    pol_hist h = { .tokens = NULL, .n_tokens = 0, .valid = true, .last_use_s = 0 };
    st = pol_hist_state(&p, &h, 10);
    CHECK(st.blank && !st.is_protected && st.value == 0);
}

static void test_tokens(void)
{
    const int32_t t1[] = { 1, MK, 2, MK, 3 };
    const int32_t m1[] = { MK };
    CHECK_EQ_INT(pol_last_marker(t1, 5, m1, 1), 3);
    CHECK_EQ_INT(pol_last_marker(t1, 3, m1, 1), 1);
    CHECK_EQ_INT(pol_last_marker(t1, 1, m1, 1), -1);
    CHECK_EQ_INT(pol_last_marker(t1, 5, m1, 0), -1);
    const int32_t t2[] = { MK, 8, 1, MK, 8, 2, MK };
    const int32_t m2[] = { MK, 8 };
    CHECK_EQ_INT(pol_last_marker(t2, 7, m2, 2), 3);
    CHECK_EQ_INT(pol_last_marker(t2, 2, m2, 2), 0);
    CHECK_EQ_INT(pol_last_marker(t2, 1, m2, 2), -1);
    CHECK_EQ_INT(pol_last_marker(t1, 5, t2, 7), -1);

    enum { N = 1000 };
    int32_t a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = 100 + i;
    CHECK_EQ_INT(pol_common_prefix(a, N, b, N), N);
    CHECK_EQ_INT(pol_common_prefix(a, N, b, 300), 300);
    CHECK_EQ_INT(pol_common_prefix(a, 0, b, N), 0);
    CHECK_EQ_INT(pol_common_prefix(NULL, 0, NULL, 0), 0);
    static const int at[] = { 0, 1, 126, 127, 128, 129, 255, 256, 257, 511, 998, 999 };
    for (size_t k = 0; k < ARRAY_LEN(at); k++) {
        b[at[k]] = -1;
        CHECK_EQ_INT(pol_common_prefix(a, N, b, N), at[k]);
        CHECK_EQ_INT(pol_common_prefix(b, N, a, N - 1), MIN(at[k], N - 1));
        b[at[k]] = a[at[k]];
    }
}

/* ---- parameters -------------------------------------------------------- */

static void test_params(void)
{
    pol_params p = pol_params_default();
    CHECK_NEAR(p.ttl_max_s, 120, 0);
    CHECK_NEAR(p.idle_value_zero_s, 1800, 0);
    CHECK_NEAR(p.sibling_share, 0.98, 0);
    CHECK_NEAR(p.expired_keep_score, 0.01, 0);
    CHECK_NEAR(p.park_min_value, 0.01, 0);
    CHECK_NEAR(p.park_kept_share, 0.98, 0);
    CHECK_NEAR(p.park_value_ratio, 2, 0);
    CHECK_EQ_INT(p.near_tokens, 4096);
    CHECK_STR(p.turn_marker, "auto");
    CHECK_EQ_INT(pol_params_check(&p), PK_OK);

    CHECK_EQ_INT(pol_params_set(&p, "ttl-max-s", "60"), PK_OK);
    CHECK_NEAR(p.ttl_max_s, 60, 0);
    CHECK_EQ_INT(pol_params_set(&p, "--slot-sibling-share", "0.9"), PK_OK);
    CHECK_NEAR(p.sibling_share, 0.9, 0);
    CHECK_EQ_INT(pol_params_set(&p, "slot-near-tokens", "512"), PK_OK);
    CHECK_EQ_INT(p.near_tokens, 512);
    CHECK_EQ_INT(pol_params_set(&p, "turn-marker", "<|start_header_id|>"), PK_OK);
    CHECK_STR(p.turn_marker, "<|start_header_id|>");
    pol_params before = p;
    CHECK_EQ_INT(pol_params_set(&p, "no-such-thing", "1"), PK_ENOTFOUND);
    static const char *bad[][2] = {
        { "ttl-max-s", "-1" }, { "ttl-max-s", "nan" }, { "ttl-max-s", "inf" }, { "ttl-max-s", "" },
        { "ttl-max-s", "5s" }, { "sibling-share", "1.5" }, { "near-tokens", "1e3" },
        { "near-tokens", "-4" }, { "near-tokens", "99999999999" }, { "park-kept-share", "2" },
        { "turn-marker", "0123456789012345678901234567890123456789012345678901234567890123" },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        CHECK_EQ_INT(pol_params_set(&p, bad[i][0], bad[i][1]), PK_EINVAL);
    CHECK(memcmp(&p, &before, sizeof p) == 0);
    CHECK_EQ_INT(pol_params_set(&p, "turn-marker", "012345678901234567890123456789012345678901234567890123456789012"), PK_OK);
    CHECK_EQ_INT(pol_params_set(&p, "turn-marker", ""), PK_OK);
    CHECK_STR(p.turn_marker, "");

    int n = pol_param_count();
    CHECK_EQ_INT(n, 12);
    CHECK(pol_param_at(-1) == NULL && pol_param_at(n) == NULL);
    for (int i = 0; i < n; i++) {
        const pol_param_info *r = pol_param_at(i);
        char env[96] = "POLYKV_SLOT_";
        size_t k = strlen(env);
        for (const char *c = r->name; *c; c++)
            env[k++] = *c == '-' ? '_' : (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        env[k] = '\0';
        CHECK_STR(r->env, env);
        CHECK(r->help && strlen(r->help) > 10);
        pol_params q = pol_params_default();
        CHECK_EQ_INT(pol_params_set(&q, r->name, "0"), PK_OK);   /* 0 is in every range */
    }

    p = pol_params_default();
    setenv("POLYKV_SLOT_TTL_MAX_S", "240", 1);
    setenv("POLYKV_SLOT_PARK_VALUE_RATIO", "0", 1);
    setenv("POLYKV_SLOT_TURN_MARKER", "<|im_start|>", 1);
    const char *bad_var = NULL;
    CHECK_EQ_INT(pol_params_from_env(&p, &bad_var), PK_OK);
    CHECK_NEAR(p.ttl_max_s, 240, 0);
    CHECK_NEAR(p.park_value_ratio, 0, 0);
    CHECK_STR(p.turn_marker, "<|im_start|>");
    setenv("POLYKV_SLOT_NEAR_SHARE", "lots", 1);
    before = p = pol_params_default();
    CHECK_EQ_INT(pol_params_from_env(&p, &bad_var), PK_EINVAL);
    CHECK_STR(bad_var, "POLYKV_SLOT_NEAR_SHARE");
    CHECK(memcmp(&p, &before, sizeof p) == 0);
    unsetenv("POLYKV_SLOT_TTL_MAX_S");
    unsetenv("POLYKV_SLOT_PARK_VALUE_RATIO");
    unsetenv("POLYKV_SLOT_TURN_MARKER");
    unsetenv("POLYKV_SLOT_NEAR_SHARE");

    char buf[1024];
    size_t len = 0;
    p = pol_params_default();
    CHECK_EQ_INT(pol_params_json(&p, buf, sizeof buf, &len), PK_OK);
    CHECK_STR(buf, "{\"ttl_max_s\":120,\"idle_value_zero_s\":1800,\"sibling_share\":0.98,"
              "\"expired_keep_score\":0.01,\"park_min_value\":0.01,\"park_kept_share\":0.98,"
              "\"park_value_ratio\":2,\"near_share\":0.02,\"near_s\":1,\"near_tokens\":4096,"
              "\"loss_tie\":0.1,\"turn_marker\":\"auto\",\"ttl_curve\":[[500,0.1],[2000,2],"
              "[8000,10],[32000,45],[50000,65],[100000,90],[262144,120]]}");
    CHECK_EQ_INT(len, strlen(buf));
    snprintf(p.turn_marker, sizeof p.turn_marker, "a\"b\\c\n");
    p.ttl_max_s = 0.1 + 0.2;   /* needs all 17 digits to read back */
    CHECK_EQ_INT(pol_params_json(&p, buf, sizeof buf, &len), PK_OK);
    CHECK(strstr(buf, "\"turn_marker\":\"a\\\"b\\\\c\\u000a\"") != NULL);
    CHECK(strstr(buf, "\"ttl_max_s\":0.30000000000000004,") != NULL);
    CHECK_EQ_INT(pol_params_json(&p, buf, 40, &len), PK_EFULL);
    CHECK_EQ_INT(strlen(buf), 39);

    CHECK_STR(pol_turn_marker_for("chatml"), "<|im_start|>");
    CHECK_STR(pol_turn_marker_for("llama3"), "<|start_header_id|>");
    CHECK_STR(pol_turn_marker_for("mistral"), "[INST]");
    CHECK_STR(pol_turn_marker_for("unknown"), "");
    CHECK_STR(pol_kind_name(POL_LEAST_LOSS), "least-loss");
}

/* ---- the rules, one by one ---------------------------------------------- */

/* A 2,000-token system prompt shared by every conversation of these tests. */
static int32_t *sys_prompt;
#define NSYS 2000

static void setup_sys(void)
{
    static const int m[] = { 0, -1 };
    sys_prompt = conv(NSYS, NULL, 0, 1, m);
}

/* A conversation: the system prompt, a user turn from `user`, and an
 * assistant turn (its marker at `amark`) up to n. */
static int32_t *chat(int n, int amark, uint64_t seed)
{
    const int m[] = { 0, NSYS, amark, -1 };
    return conv(n, sys_prompt, NSYS, seed, m);
}

static void test_wait_and_continue(void)
{
    arena_reset();
    setup_sys();
    tb_init(3);
    int32_t *a = chat(12000, 11000, 10);
    int32_t *b = chat(6000, 5000, 11);
    tb_put(0, tb_hist(a, 12000, 500), false);     /* expired, its own slot */
    tb_put(2, tb_hist(b, 6000, 1), false);
    /* Next turn of A, the last reply's thinking dropped: it differs from
     * the history right after the assistant marker. */
    int32_t *p = arena_take(13000);
    memcpy(p, a, 11002 * sizeof *p);
    fill_content(p + 11002, 13000 - 11002, 99);
    p[12500] = MK;
    tb_prompt(p, 13000);
    place();
    CHECK_EQ_INT(D.kind, POL_CONTINUE);
    CHECK_EQ_INT(D.slot, 0);
    CHECK_EQ_INT(D.source, 0);
    CHECK_EQ_INT(D.n_reuse, 11002);
    CHECK_EQ_INT(D.n_keep, 11002);
    CHECK(D.continuation && D.park == -1 && !D.source_busy && D.n_drop == 0);

    /* A regenerated reply: the prompt stops at the assistant marker. */
    tb_prompt(a, 11002);
    place();
    CHECK_EQ_INT(D.kind, POL_CONTINUE);
    CHECK_EQ_INT(D.slot, 0);

    /* A prompt that differs before the marker is another conversation: it
     * goes to the blank slot 1 and borrows the system prompt. */
    int32_t *q = chat(9000, 8500, 12);
    tb_prompt(q, 9000);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 1);
    CHECK(!D.continuation);
    CHECK_EQ_INT(D.n_reuse, NSYS + 1);   /* the user marker is shared too */
    CHECK_EQ_INT(D.n_keep, 0);

    /* Every slot busy: wait, however good the match. */
    for (int k = 0; k < 3; k++)
        T.slots[k].busy = true;
    tb_prompt(p, 13000);
    place();
    CHECK_EQ_INT(D.kind, POL_WAIT);
    CHECK_EQ_INT(D.slot, -1);
    CHECK_EQ_INT(D.source, -1);

    /* The conversation's history is busy (the same chat sent twice): run in
     * the blank slot and share the busy cells by membership. */
    T.slots[0].busy = true;
    T.slots[1].busy = false;
    T.slots[2].busy = false;
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 1);
    CHECK(D.continuation);
    CHECK_EQ_INT(D.source, 0);
    CHECK(D.source_busy);
    CHECK_EQ_INT(D.n_reuse, 11002);

    /* The conversation's history is parked and slot 1 still blank: it runs
     * there and reuses the parked cells, whatever slot 2 holds. */
    tb_init(3);
    int ha = tb_hist(a, 12000, 500);
    tb_put(0, tb_hist(b, 6000, 1), false);
    int32_t *c = chat(7000, 6500, 13);
    tb_put(2, tb_hist(c, 7000, 3000), false);     /* worthless, but not blank */
    tb_prompt(p, 13000);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.source, ha);
    CHECK_EQ_INT(D.n_keep, 0);
}

static void test_sibling(void)
{
    arena_reset();
    setup_sys();
    tb_init(2);
    /* A classifier transcript: its last 400 tokens (instructions + reply,
     * after the marker at 19,700) are rewritten on every query. */
    int32_t *v1 = chat(20000, 19700, 20);
    int h = tb_hist(v1, 20000, 0.5);             /* fresh: protected */
    tb_put(0, h, false);
    int32_t *v2 = arena_take(21000);
    memcpy(v2, v1, 19500 * sizeof *v2);          /* 19500 / 19700 = 0.9898 */
    fill_content(v2 + 19500, 21000 - 19500, 21);
    v2[20600] = MK;
    tb_prompt(v2, 21000);
    place();
    CHECK_EQ_INT(D.kind, POL_SIBLING);            /* before the blank slot 1 */
    CHECK_EQ_INT(D.slot, 0);
    CHECK_EQ_INT(D.n_reuse, 19500);
    CHECK_EQ_INT(D.n_keep, 19500);
    CHECK_EQ_INT(D.park, -1);
    CHECK(!D.continuation);

    T.p.sibling_share = 0;                        /* off: a new conversation */
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.source, h);
    CHECK_EQ_INT(D.n_keep, 0);

    T.p.sibling_share = 0.995;                    /* 0.9898 is not enough */
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);

    /* Siblings are judged on the key: the 0.98 share holds against the
     * marker position even though it fails against the full length. */
    T.p.sibling_share = 0.98;
    tb_init(2);
    int32_t *w1 = chat(30000, 20000, 22);         /* a 10,000-token last reply */
    tb_put(1, tb_hist(w1, 30000, 0.5), false);
    tb_put(0, tb_hist(v1, 20000, 0.5), true);     /* busy: never a sibling */
    int32_t *w2 = arena_take(20500);
    memcpy(w2, w1, 19700 * sizeof *w2);
    fill_content(w2 + 19700, 800, 23);
    tb_prompt(w2, 20500);
    place();
    CHECK_EQ_INT(D.kind, POL_SIBLING);
    CHECK_EQ_INT(D.slot, 1);
}

static void test_reclaim_order(void)
{
    arena_reset();
    setup_sys();
    tb_init(5);
    int32_t *k1 = chat(40000, 39000, 30);
    int32_t *k2 = chat(20000, 19000, 31);
    int32_t *k3 = chat(3000, 2500, 32);
    int32_t *k4 = chat(50000, 49000, 33);
    tb_put(0, tb_hist(k1, 40000, 600), false);    /* expired, worth keeping */
    tb_put(1, tb_hist(k2, 20000, 600), false);    /* expired, worth less */
    tb_put(2, tb_hist(k3, 3000, 1000), false);    /* expired, below 0.01 */
    tb_put(3, tb_hist(k4, 50000, 1), false);      /* protected */
    tb_put(4, tb_hist(chat(20000, 19000, 35), 20000, 600), true);   /* busy */
    int32_t *p = chat(8000, 7000, 34);
    tb_prompt(p, 8000);
    CHECK(pol_value(3000, 1000, &T.p) < 0.01);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 2);
    CHECK_EQ_INT(D.park, -1);                     /* below park-min-value */

    T.slots[2].hist = -1;                         /* now blank: still first */
    place();
    CHECK_EQ_INT(D.slot, 2);

    T.slots[2].hist = 2;
    T.hists[2].valid = false;                     /* invalid = blank */
    place();
    CHECK_EQ_INT(D.slot, 2);
    CHECK_EQ_INT(D.park, -1);

    T.slots[2].busy = true;                       /* then the lowest value */
    place();
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.park, 1);                      /* worth keeping: parked */
    CHECK_NEAR(D.loss, 0, 0);

    /* Blank before a zero-value history, then slot order among blanks. */
    tb_init(4);
    tb_put(0, tb_hist(k1, 40000, 5000), false);   /* value exactly 0 */
    tb_put(1, -1, false);
    tb_put(2, -1, false);
    tb_put(3, tb_hist(k3, 3000, 5000), false);
    CHECK_NEAR(pol_value(40000, 5000, &T.p), 0, 0);
    place();
    CHECK_EQ_INT(D.slot, 1);
    T.slots[1].busy = true;
    place();
    CHECK_EQ_INT(D.slot, 2);
    T.slots[2].busy = true;
    place();
    CHECK_EQ_INT(D.slot, 0);                      /* both 0: slot order */

    /* Within the not-worth-keeping tier the lower value goes first. */
    tb_init(2);
    T.p.expired_keep_score = 0.5;
    tb_put(0, tb_hist(k1, 40000, 600), false);
    tb_put(1, tb_hist(k2, 20000, 600), false);
    place();
    CHECK_EQ_INT(D.slot, 1);
}

static void test_least_loss_and_parking(void)
{
    arena_reset();
    setup_sys();
    tb_init(3);
    int32_t *a = chat(60000, 59000, 40);
    int32_t *b = chat(20000, 19000, 41);
    int32_t *c = chat(21000, 20000, 42);
    int ha = tb_hist(a, 60000, 5), hb = tb_hist(b, 20000, 10), hc = tb_hist(c, 21000, 10);
    tb_put(0, ha, false);
    tb_put(1, hb, false);
    tb_put(2, hc, false);
    int32_t *p = chat(9000, 8000, 43);
    tb_prompt(p, 9000);
    /* Room to park anything: every loss is 0, slot order decides, and the
     * request is placed at once. */
    place();
    CHECK_EQ_INT(D.kind, POL_LEAST_LOSS);
    CHECK_EQ_INT(D.slot, 0);
    CHECK_EQ_INT(D.park, ha);

    /* No reserve id and nothing to drop: losses are the values. */
    T.s.n_reserve_free = 0;
    double vb = pol_value(20000, 10, &T.p), vc = pol_value(21000, 10, &T.p);
    CHECK(vb < vc && vc <= vb * 1.1);
    place();
    CHECK_EQ_INT(D.kind, POL_LEAST_LOSS);
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.park, -1);
    CHECK_NEAR(D.loss, vb, 1e-12);
    /* Swap b and c: c is within 10% of the least and comes first. */
    tb_put(1, hc, false);
    tb_put(2, hb, false);
    place();
    CHECK_EQ_INT(D.slot, 1);
    CHECK_NEAR(D.loss, vc, 1e-12);
    T.p.loss_tie = 0;
    place();
    CHECK_EQ_INT(D.slot, 2);

    /* Parking needs room: a parked blank and a worthless parked history are
     * dropped freely, lowest value first, blank first. */
    tb_init(1);
    int32_t *old = chat(5000, 4000, 44);
    int32_t *junk = chat(3000, 2500, 45);
    int hk = tb_hist(b, 20000, 600);              /* expired keeper in slot 0 */
    tb_put(0, hk, false);
    int hj = tb_hist(junk, 3000, 1500);           /* worth < 0.01 */
    int hx = tb_hist(old, 5000, 10);
    T.hists[hx].valid = false;                    /* blank */
    T.hists[hx].n_cells_excl = 2000;
    T.s.n_cells_free = 3000;
    T.s.n_cells_extra = 1000;
    tb_prompt(p, 9000);                           /* needs 9000 - 2001 + 1000 */
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.park, hk);
    CHECK_EQ_INT(D.n_drop, 2);
    CHECK_EQ_INT(D.drop[0], hx);
    CHECK_EQ_INT(D.drop[1], hj);
    CHECK_EQ_INT(D.n_reuse, NSYS + 1);

    /* Only an expired keeper to drop: allowed when the parked history is
     * worth at least park_value_ratio times more. */
    T.hists[hx].valid = true;
    T.hists[hx].last_use_s = T.s.now_s - 900;    /* value about 0.009 < 0.01 */
    T.hists[hj].last_use_s = T.s.now_s - 400;    /* 3,000 tokens: about 0.003 */
    T.hists[hj].n_tokens = 3000;
    int32_t *big = chat(40000, 39000, 46);
    T.hists[hj].tokens = big;
    T.hists[hj].n_tokens = 40000;
    T.hists[hj].marker_pos = 39000;
    T.hists[hj].n_cells_excl = 40000;
    T.hists[hx].n_cells_excl = 0;
    double v_keep = pol_value(20000, 600, &T.p), v_big = pol_value(40000, 400, &T.p);
    CHECK(v_big >= 0.01 && v_keep < 2 * v_big && v_keep > 0.5 * v_big);
    place();
    CHECK_EQ_INT(D.park, -1);                     /* ratio 2 refuses */
    T.p.park_value_ratio = 0.5;
    place();
    CHECK_EQ_INT(D.park, hk);
    CHECK_EQ_INT(D.n_drop, 1);
    CHECK_EQ_INT(D.drop[0], hj);
    CHECK_NEAR(D.loss, v_big, 1e-12);
    T.p.park_value_ratio = 0;                     /* never */
    place();
    CHECK_EQ_INT(D.park, -1);
    T.p.park_value_ratio = 0.5;
    T.hists[hj].last_use_s = T.s.now_s - 1;      /* protected: never */
    place();
    CHECK_EQ_INT(D.park, -1);

    /* No reserve id: a worthless parked history frees one. */
    tb_init(1);
    hk = tb_hist(b, 20000, 600);
    tb_put(0, hk, false);
    hj = tb_hist(junk, 3000, 1500);
    T.s.n_reserve_free = 0;
    place();
    CHECK_EQ_INT(D.park, hk);
    CHECK_EQ_INT(D.n_drop, 1);
    CHECK_EQ_INT(D.drop[0], hj);

    /* Not parked when another history holds 98% of its key... */
    tb_init(1);
    hk = tb_hist(b, 20000, 600);
    tb_put(0, hk, false);
    int32_t *b2 = arena_take(19000);
    memcpy(b2, b, 18700 * sizeof *b2);            /* 18700 / 19000 = 0.984 */
    fill_content(b2 + 18700, 300, 47);
    int hb2 = tb_hist(b2, 19000, 10);
    pol_park_plan plan;
    CHECK_EQ_INT(pol_park(&T.s, hk, -1, 0, &plan), PK_OK);
    CHECK(!plan.park);
    CHECK_EQ_INT(plan.kept_by, hb2);
    CHECK_NEAR(plan.kept_share, 18700.0 / 19000, 1e-12);
    CHECK_NEAR(plan.loss, 0, 0);
    place();
    CHECK_EQ_INT(D.park, -1);
    T.p.park_kept_share = 0;                      /* off */
    place();
    CHECK_EQ_INT(D.park, hk);
    T.p.park_kept_share = 0.98;
    /* ... or when the new request itself will hold it. */
    T.hists[hb2].valid = false;
    T.p.sibling_share = 0;
    tb_prompt(b2, 19000);
    CHECK_EQ_INT(pol_park(&T.s, hk, -1, 0, &plan), PK_OK);
    CHECK(!plan.park);
    CHECK_EQ_INT(plan.kept_by, POL_KEPT_BY_REQUEST);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.park, -1);
    CHECK_EQ_INT(D.source, hk);
    CHECK_EQ_INT(D.n_keep, 18700);

    /* pol_park refuses what is not worth parking. */
    CHECK_EQ_INT(pol_park(&T.s, hb2, -1, 0, &plan), PK_OK);
    CHECK(!plan.park);
    CHECK_STR(plan.why, "blank");
    CHECK_EQ_INT(pol_park(&T.s, 5, -1, 0, &plan), PK_EINVAL);
}

static void test_near_sources(void)
{
    arena_reset();
    setup_sys();
    tb_init(3);
    /* Busy slot 0 holds 12,000 tokens the prompt repeats; idle slot 1 holds
     * 9,000 of them (an earlier fork), slot 2 is blank. */
    int32_t *full = chat(12000, 11500, 50);
    int32_t *fork = arena_take(9500);
    memcpy(fork, full, 9000 * sizeof *fork);
    fill_content(fork + 9000, 500, 51);
    fork[9400] = MK;                              /* its own assistant turn */
    int hb = tb_hist(full, 12000, 0), hf = tb_hist(fork, 9500, 100);
    tb_put(0, hb, true);
    tb_put(1, hf, false);
    int32_t *p = arena_take(13000);
    memcpy(p, full, 12000 * sizeof *p);
    fill_content(p + 12000, 1000, 52);
    tb_prompt(p, 13000);
    place();                                      /* 3,000 short: within 4096 */
    CHECK_EQ_INT(D.slot, 2);
    CHECK_EQ_INT(D.source, hf);
    CHECK(!D.source_busy);
    CHECK_EQ_INT(D.n_reuse, 9000);

    T.p.near_tokens = 2000;                       /* beyond reach: share the busy one */
    place();
    CHECK_EQ_INT(D.source, hb);
    CHECK(D.source_busy);
    CHECK_EQ_INT(D.n_reuse, 12000);
    T.s.prompt_tps = 3500;                        /* one second of prefill covers it */
    place();
    CHECK_EQ_INT(D.source, hf);
    T.s.prompt_tps = 0;
    T.p.near_share = 0.25;                        /* 25% of 12,000 covers it */
    place();
    CHECK_EQ_INT(D.source, hf);
    T.p.near_share = 0.02;

    /* Tokens are compared, not trusted: one changed token in the middle
     * ends the match there. */
    T.p.near_tokens = 0;
    int32_t *twin = arena_take(12000);
    memcpy(twin, full, 12000 * sizeof *twin);
    twin[6000] = 42;
    T.hists[hb].tokens = twin;
    place();
    CHECK_EQ_INT(D.source, hf);
    CHECK_EQ_INT(D.n_reuse, 9000);

    /* Equal matches: the run slot's own history wins, no copy. */
    tb_init(3);
    int h0 = tb_hist(fork, 9500, 5000);
    int h1 = tb_hist(fork, 9500, 5000);
    tb_put(0, h0, false);
    tb_put(2, h1, false);
    tb_put(1, tb_hist(full, 12000, 1), false);
    T.p.sibling_share = 0;
    T.s.n_prompt = 9200;                          /* ends inside the fork */
    T.s.prompt = arena_take(9200);
    memcpy((int32_t *)T.s.prompt, fork, 9100 * sizeof(int32_t));
    fill_content((int32_t *)T.s.prompt + 9100, 100, 53);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK_EQ_INT(D.slot, 0);
    CHECK_EQ_INT(D.source, h0);
    T.slots[0].busy = true;
    place();
    CHECK_EQ_INT(D.slot, 2);
    CHECK_EQ_INT(D.source, h1);
    CHECK_EQ_INT(D.n_keep, 9100);
}

static void test_invalid_and_drop_order(void)
{
    arena_reset();
    setup_sys();
    tb_init(2);
    int32_t *a = chat(5000, 4000, 60);
    int h = tb_hist(a, 5000, 10);
    tb_put(0, h, false);
    tb_prompt(a, 100);
    pol_decision keep;
    memset(&keep, 0xAB, sizeof keep);
    D = keep;
    T.slots[1].hist = h;                          /* two slots, one history */
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    CHECK(memcmp(&D, &keep, sizeof D) == 0);
    T.slots[1].hist = 5;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.slots[1].hist = -1;
    T.hists[h].marker_pos = 5000;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.hists[h].marker_pos = 4000;
    T.hists[h].tokens = NULL;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.hists[h].tokens = a;
    T.p.sibling_share = 2;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.p.sibling_share = 0.98;
    T.s.n_slots = 0;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.s.n_slots = 2;
    T.s.now_s = NAN;
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_EINVAL);
    T.s.now_s = 1000;
    CHECK_EQ_INT(pol_place(NULL, &D), PK_EINVAL);
    CHECK_EQ_INT(pol_place(&T.s, &D), PK_OK);

    /* Drop order: unprotected by value, blanks first at equal value,
     * protected last, busy and excluded never. */
    tb_init(3);
    int32_t *x = chat(30000, 29000, 61);
    int p0 = tb_hist(x, 30000, 5);                /* protected, high value */
    int p1 = tb_hist(x, 2000, 1);                 /* protected, low value */
    int e0 = tb_hist(x, 30000, 900);              /* expired */
    int e1 = tb_hist(x, 8000, 900);               /* expired, lower */
    int b0 = tb_hist(x, 8000, 900);
    T.hists[b0].valid = false;                    /* blank */
    int z0 = tb_hist(x, 8000, 5000);              /* value 0, not blank */
    int bz = tb_hist(x, 100, 5);                  /* busy */
    int ex = tb_hist(x, 100, 5000);               /* excluded */
    tb_put(0, p1, false);
    tb_put(1, bz, true);
    tb_put(2, e1, false);
    int32_t order[16], n = -1;
    const int32_t excl[] = { ex };
    CHECK_EQ_INT(pol_drop_order(&T.s, excl, 1, order, 16, &n), PK_OK);
    const int32_t want[] = { b0, z0, e1, e0, p1, p0 };
    CHECK_EQ_INT(n, 6);
    for (int i = 0; i < 6 && i < n; i++)
        CHECK_EQ_INT(order[i], want[i]);
    CHECK_EQ_INT(pol_drop_order(&T.s, NULL, 0, order, 3, &n), PK_OK);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(order[0], b0);
    CHECK_EQ_INT(order[1], ex < z0 ? ex : z0);
    CHECK_EQ_INT(pol_drop_order(&T.s, NULL, 0, order, -1, &n), PK_EINVAL);
}

/* ---- the worked example of docs/policy.md --------------------------------- */

static void test_worked_example(void)
{
    arena_reset();
    /* Agents share an 8,000-token system prompt with tool definitions. */
    static const int m0[] = { 0, -1 };
    int32_t *tools = conv(8000, NULL, 0, 70, m0);
    const int ma[] = { 8000, 30000, 46500, -1 };
    const int mb[] = { 8000, 8600, -1 };
    const int mc[] = { 8000, 60000, 119900, -1 };
    const int md[] = { 8000, 12000, -1 };   /* busy, generating its reply */
    const int me[] = { 0, 2000, -1 };
    int32_t *A = conv(48000, tools, 8000, 71, ma);
    int32_t *B = conv(9000, tools, 8000, 72, mb);
    int32_t *C = conv(120000, tools, 8000, 73, mc);
    int32_t *Dt = conv(30000, tools, 8000, 74, md);
    int32_t *E = conv(3000, NULL, 0, 75, me);
    tb_init(4);
    int ha = tb_hist(A, 48000, 30), hb = tb_hist(B, 9000, 200), hc = tb_hist(C, 120000, 100);
    int hd = tb_hist(Dt, 30000, 0), he = tb_hist(E, 3000, 1500);
    tb_put(0, ha, false);
    tb_put(1, hb, false);
    tb_put(2, hc, false);
    tb_put(3, hd, true);
    T.s.n_cells_free = 2000;
    T.s.n_cells_extra = 1024;
    T.s.n_reserve_free = 1;
    T.hists[he].seq = 40;
    T.hists[he].n_cells_excl = 3000;

    static const char *names = "ABCDE";
    if (verbose)
        printf("  worked example, now = %.0f s\n", T.s.now_s);
    for (int i = 0; i < T.s.n_hists; i++) {
        pol_state st = pol_hist_state(&T.p, &T.hists[i], T.s.now_s);
        if (verbose)
            printf("    %c: %6d tokens, key %6d, idle %5.0f s, ttl %7.3f s, %s, value %.4f, score %.4f\n",
                   names[i], T.hists[i].n_tokens, T.hists[i].marker_pos, st.age_s, st.ttl_s,
                   st.is_protected ? "protected" : "expired  ", st.value, st.overwrite_score);
    }
    CHECK_NEAR(pol_ttl_s(48000, 120), 62.7778, 1e-4);
    CHECK_NEAR(pol_value(48000, 30, &T.p), 0.5746, 1e-4);
    CHECK_NEAR(pol_ttl_s(9000, 120), 11.4583, 1e-4);
    CHECK_NEAR(pol_value(9000, 200, &T.p), 0.0498, 1e-4);
    CHECK_NEAR(pol_ttl_s(120000, 120), 93.7004, 1e-4);
    CHECK_NEAR(pol_value(120000, 100, &T.p), 0.4464, 1e-4);
    CHECK_NEAR(pol_value(3000, 1500, &T.p), 0.0038, 1e-4);

    /* 1: a new sub-agent, the tools plus 2,000 tokens. */
    const int mf[] = { 8000, 9990, -1 };
    int32_t *F = conv(10000, tools, 8000, 76, mf);
    tb_prompt(F, 10000);
    place();
    CHECK_EQ_INT(D.kind, POL_RECLAIM);
    CHECK(!D.continuation);
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.park, hb);
    CHECK_EQ_INT(D.n_drop, 1);
    CHECK_EQ_INT(D.drop[0], he);
    CHECK_EQ_INT(D.source, hb);
    CHECK_EQ_INT(D.n_reuse, 8001);
    CHECK_EQ_INT(D.n_keep, 8001);

    /* 2: A's next turn, its last reply sent back without the thinking. */
    int32_t *A2 = arena_take(49000);
    memcpy(A2, A, 46502 * sizeof *A2);
    fill_content(A2 + 46502, 49000 - 46502, 77);
    A2[47500] = MK;
    A2[48990] = MK;
    tb_prompt(A2, 49000);
    place();
    CHECK_EQ_INT(D.kind, POL_CONTINUE);
    CHECK_EQ_INT(D.slot, 0);
    CHECK_EQ_INT(D.n_reuse, 46502);

    /* 3: C is a classifier transcript whose last 1,200 tokens are rewritten. */
    int32_t *C2 = arena_take(121000);
    memcpy(C2, C, 118800 * sizeof *C2);
    fill_content(C2 + 118800, 121000 - 118800, 78);
    C2[120990] = MK;
    tb_prompt(C2, 121000);
    place();
    CHECK_EQ_INT(D.kind, POL_SIBLING);
    CHECK_EQ_INT(D.slot, 2);
    CHECK_EQ_INT(D.park, -1);
    CHECK_EQ_INT(D.source, hc);
    CHECK_EQ_INT(D.n_reuse, 118800);         /* the docs' 118,800 / 119,900 = 99.08% of C's key */

    /* 4: ten seconds later every idle history is fresh again (A, B and C
     * each just ran); a fifth agent arrives and no reserve id is free. */
    T.hists[ha].last_use_s = T.s.now_s - 10;
    T.hists[hb].last_use_s = T.s.now_s - 10;
    T.hists[hc].last_use_s = T.s.now_s - 10;
    T.s.n_reserve_free = 0;
    T.s.n_cells_free = 100000;
    T.hists[he].valid = true;
    T.hists[he].last_use_s = T.s.now_s - 1;      /* E protected too: nothing to drop */
    tb_prompt(F, 10000);
    if (verbose)
        for (int i = 0; i < 3; i++)
            printf("    %c now: value %.4f\n", names[i], pol_value(T.hists[i].n_tokens, 10, &T.p));
    place();
    CHECK_EQ_INT(D.kind, POL_LEAST_LOSS);
    CHECK_EQ_INT(D.slot, 1);
    CHECK_EQ_INT(D.park, -1);
    /* The docs' values at 10 s idle, all protected; B's is the loss. */
    CHECK_NEAR(pol_value(48000, 10, &T.p), 0.7886, 1e-4);
    CHECK_NEAR(pol_value(120000, 10, &T.p), 1.6427, 1e-4);
    CHECK_NEAR(D.loss, 0.0696, 1e-4);
}

/* ---- pools: pinned entries and their ids -------------------------------- */

/* Thousands of random tables with pool entries (some pinned) beside slot and
 * parked histories: a pinned entry is never in the drop order nor in a
 * decision's drops; a pool in a slot is a malformed snapshot; a pool is a
 * source like any history; dropping a pool frees no parking id. */
static void test_pools_pinned(void)
{
    int n_cases = 4000, n_pinned_seen = 0, n_pool_source = 0;
    rng_state = 4242;
    for (int it = 0; it < n_cases; it++) {
        arena_reset();
        setup_sys();
        int n_slots = 1 + (int)rndn(4);
        tb_init(n_slots);
        T.s.n_cells_free = (int32_t)rndn(6000);
        T.s.n_reserve_free = (int32_t)rndn(2);
        int nh = 2 + (int)rndn(8);
        for (int i = 0; i < nh; i++) {
            int n = NSYS + 10 + (int)rndn(4000);
            int h = tb_hist(chat(n, NSYS + 5 + (int)rndn(5), 1000 + it * 16 + i), n, rndu() * 3000);
            T.hists[h].n_cells_excl = (int32_t)rndn((uint32_t)n + 1);
            if (rndn(3) == 0) {
                T.hists[h].is_pool = true;
                T.hists[h].pinned = rndn(2) == 0;
                T.hists[h].marker_pos = -1;
            }
        }
        for (int k = 0; k < n_slots; k++) {
            int h = (int)rndn((uint32_t)nh + 1) - 1;
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= T.slots[j].hist == h;
            if (h >= 0 && !taken && !T.hists[h].is_pool) tb_put(k, h, rndn(3) == 0);
        }
        int32_t *pr = chat(NSYS + 300, NSYS + 2, 999 + it);
        tb_prompt(pr, NSYS + 300);

        int32_t order[POL_MAX_HIST], n = 0;
        CHECK_EQ_INT(pol_drop_order(&T.s, NULL, 0, order, POL_MAX_HIST, &n), PK_OK);
        for (int k = 0; k < n; k++)
            if (T.hists[order[k]].pinned) {
                CHECK(!"a pinned entry is in the drop order");
                break;
            }
        pol_decision d;
        CHECK_EQ_INT(pol_place(&T.s, &d), PK_OK);
        int ids_freed = 0;
        for (int k = 0; k < d.n_drop; k++) {
            const pol_hist *h = &T.hists[d.drop[k]];
            n_pinned_seen += h->pinned;
            CHECK(!h->pinned);
            bool in_slot = false;
            for (int j = 0; j < n_slots; j++) in_slot |= T.slots[j].hist == d.drop[k];
            ids_freed += !in_slot && !h->is_pool;
        }
        /* A park planned with no free id must have freed one from a parked
         * history, never from a pool. */
        if (d.park >= 0 && T.s.n_reserve_free == 0) CHECK(ids_freed >= 1);
        n_pool_source += d.source >= 0 && T.hists[d.source].is_pool;
        for (int h = 0; h < nh; h++) {
            if (!T.hists[h].is_pool || T.slots[0].busy) continue;
            int keep = T.slots[0].hist;
            bool busy = T.slots[0].busy;
            T.slots[0].hist = h;
            pol_decision bad;
            CHECK_EQ_INT(pol_place(&T.s, &bad), PK_EINVAL);   /* a pool in a slot */
            T.slots[0].hist = keep;
            T.slots[0].busy = busy;
            break;
        }
    }
    CHECK_EQ_INT(n_pinned_seen, 0);
    CHECK(n_pool_source > 0);   /* the generator does make pools the best source */
    if (verbose) printf("    pools: %d tables, a pool was the source in %d\n", n_cases, n_pool_source);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    arena_init((size_t)4 << 20);
    TEST_RUN(test_curves);
    TEST_RUN(test_tokens);
    TEST_RUN(test_params);
    TEST_RUN(test_wait_and_continue);
    TEST_RUN(test_sibling);
    TEST_RUN(test_reclaim_order);
    TEST_RUN(test_least_loss_and_parking);
    TEST_RUN(test_near_sources);
    TEST_RUN(test_invalid_and_drop_order);
    TEST_RUN(test_worked_example);
    TEST_RUN(test_pools_pinned);
    free(arena);
    return test_finish();
}
