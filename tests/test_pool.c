/*
 * test_pool.c - the pool tree (src/pool) without a model: the prefix
 * contract case by case (root, extend, branch, conflicts, bounds), the hash
 * match against a plain comparison, and thousands of random operation
 * sequences checked against a naive model of the tree after every step.
 */
#include "../src/pool/pool.h"
#include "test.h"

static uint64_t rng = 12345;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (uint32_t)((rng >> 33) % n) : 0;
}

static int32_t lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

static void test_contract(void)
{
    pool_tree *t;
    CHECK_EQ_INT(pool_tree_new(0, &t), PK_EINVAL);
    CHECK_EQ_INT(pool_tree_new(4, &t), PK_OK);
    int32_t sys[100], ext[140], br[120];
    for (int i = 0; i < 100; i++) sys[i] = 1000 + i;
    memcpy(ext, sys, sizeof sys);
    for (int i = 100; i < 140; i++) ext[i] = 5000 + i;
    memcpy(br, sys, 60 * sizeof *br);
    for (int i = 60; i < 120; i++) br[i] = 9000 + i;

    int32_t root, e, b, d, conflict;
    CHECK_EQ_INT(pool_add(t, -1, sys, 100, -1, 7, 1.0, &root), PK_OK);
    CHECK_EQ_INT(root, 1);
    const pool_node *p = pool_get(t, root);
    CHECK(p && p->parent == -1 && p->branch_pos == 0 && p->prefix_len == 100 && p->seq == 7);
    CHECK_EQ_INT(p->residency, POOL_MATERIALIZING);

    /* Extend: D found as the whole parent. */
    CHECK_EQ_INT(pool_plan(t, root, ext, 140, -1, &d, &conflict), PK_OK);
    CHECK_EQ_INT(d, 100);
    CHECK_EQ_INT(pool_add(t, root, ext, 140, -1, 8, 2.0, &e), PK_OK);
    CHECK_EQ_INT(pool_get(t, e)->branch_pos, 100);
    /* Branch: found at 60, or asked at 40 (fewer shared tokens than agree). */
    CHECK_EQ_INT(pool_plan(t, root, br, 120, -1, &d, &conflict), PK_OK);
    CHECK_EQ_INT(d, 60);
    CHECK_EQ_INT(pool_plan(t, root, br, 120, 40, &d, &conflict), PK_OK);
    CHECK_EQ_INT(d, 40);
    /* Conflicts name the first differing position; bounds are 400s. */
    CHECK_EQ_INT(pool_plan(t, root, br, 120, 80, &d, &conflict), PK_ECONFLICT);
    CHECK_EQ_INT(conflict, 60);
    CHECK_EQ_INT(pool_plan(t, root, ext, 140, 101, &d, &conflict), PK_EINVAL);    /* > parent.L */
    CHECK_EQ_INT(pool_plan(t, root, sys, 100, -1, &d, &conflict), PK_EINVAL);     /* owns nothing */
    CHECK_EQ_INT(pool_plan(t, root, sys, 50, 60, &d, &conflict), PK_EINVAL);      /* D > n */
    CHECK_EQ_INT(pool_plan(t, 99, sys, 100, -1, &d, &conflict), PK_ENOTFOUND);
    CHECK_EQ_INT(pool_plan(t, root, sys, 0, -1, &d, &conflict), PK_EINVAL);
    CHECK_EQ_INT(pool_add(t, root, br, 120, 80, 9, 3.0, &b), PK_ECONFLICT);
    CHECK_EQ_INT(pool_count(t), 2);
    CHECK_EQ_INT(pool_add(t, root, br, 120, -1, 9, 3.0, &b), PK_OK);
    CHECK_EQ_INT(pool_depth(t), 2);
    CHECK_EQ_INT(pool_get(t, root)->n_children, 2);

    /* Lifetime: children and sessions pin, grace keeps, explicit pins stay. */
    CHECK(pool_auto_pinned(pool_get(t, root), 0));
    CHECK(!pool_auto_pinned(pool_get(t, e), 0));
    CHECK(pool_auto_pinned(pool_get(t, e), 1));
    CHECK(pool_kept(pool_get(t, e), 0, 2.5, 1.0));
    CHECK(!pool_kept(pool_get(t, e), 0, 3.5, 1.0));
    pool_set_pinned(t, e, true);
    CHECK(pool_kept(pool_get(t, e), 0, 1e9, 1.0));
    CHECK(pool_orphaned_pin(pool_get(t, e), 0));
    CHECK(!pool_orphaned_pin(pool_get(t, e), 2));

    /* Roll-up and subtree order, then release leaves first. */
    int64_t own[3] = { 100, 40, 60 }, sub[3];
    pool_rollup(t, own, sub);
    CHECK_EQ_INT(sub[0], 200);
    CHECK_EQ_INT(sub[1], 40);
    int32_t ids[8];
    CHECK_EQ_INT(pool_subtree(t, root, ids, 8), 3);
    CHECK_EQ_INT(ids[2], root);
    CHECK_EQ_INT(pool_subtree(t, 77, ids, 8), -1);
    CHECK_EQ_INT(pool_remove(t, root), PK_ECONFLICT);
    CHECK_EQ_INT(pool_remove(t, e), PK_OK);
    CHECK_EQ_INT(pool_remove(t, e), PK_ENOTFOUND);
    CHECK_EQ_INT(pool_remove(t, b), PK_OK);
    CHECK_EQ_INT(pool_remove(t, root), PK_OK);
    CHECK_EQ_INT(pool_count(t), 0);
    /* Ids are never reused. */
    CHECK_EQ_INT(pool_add(t, -1, sys, 100, -1, 7, 1.0, &root), PK_OK);
    CHECK_EQ_INT(root, 4);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(pool_add(t, -1, sys, 10 + i, -1, 7, 1.0, &b), PK_OK);
    CHECK_EQ_INT(pool_add(t, -1, sys, 5, -1, 7, 1.0, &b), PK_EFULL);
    CHECK(pool_tree_check(t));
    pool_tree_free(t);
    pool_tree_free(NULL);
}

/* pool_match equals a plain comparison, with prompts that agree for a
 * random length and then differ (or stop). */
static void test_match(void)
{
    pool_tree *t;
    CHECK_EQ_INT(pool_tree_new(1, &t), PK_OK);
    static int32_t base[3000], pr[3000];
    static uint64_t ph[3001];
    for (int i = 0; i < 3000; i++) base[i] = (int32_t)rnd(50);    /* small alphabet: many repeats */
    int32_t id;
    CHECK_EQ_INT(pool_add(t, -1, base, 2000, -1, 0, 0, &id), PK_OK);
    const pool_node *p = pool_get(t, id);
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        int32_t n = 1 + (int32_t)rnd(3000), k = (int32_t)rnd((uint32_t)n + 1);
        memcpy(pr, base, (size_t)n * sizeof *pr);
        if (k < n) pr[k] = 50 + (int32_t)rnd(10);
        pool_hash_chain(pr, n, ph);
        bad += pool_match(p, pr, n, ph) != lcp(base, 2000, pr, n);
    }
    CHECK_EQ_INT(bad, 0);
    pool_tree_free(t);
}

/* ---- random sequences against a naive model ----------------------------- */

#define CAP 24
#define MAXL 64

typedef struct mnode { bool used; int32_t id, parent, d, n; int32_t tok[MAXL]; } mnode;
static mnode M[CAP * 8];
static int n_model;

static int m_find(int32_t id)
{
    for (int i = 0; i < n_model; i++)
        if (M[i].used && M[i].id == id) return i;
    return -1;
}

static int m_children(int32_t id)
{
    int k = 0;
    for (int i = 0; i < n_model; i++) k += M[i].used && M[i].parent == id;
    return k;
}

static void test_random(int n_runs, int n_steps)
{
    int n_ops[4] = { 0 };
    for (int run = 0; run < n_runs; run++) {
        pool_tree *t;
        ASSERT(pool_tree_new(CAP, &t) == PK_OK);
        n_model = 0;
        int live = 0;
        for (int step = 0; step < n_steps; step++) {
            int op = (int)rnd(4);
            int32_t tok[MAXL], n = 1 + (int32_t)rnd(MAXL);
            int pi = -1;
            if (live > 0 && rnd(4)) {               /* a parent from the model */
                do pi = (int)rnd((uint32_t)n_model); while (!M[pi].used);
            }
            if (op <= 1) {                          /* add: agree with the parent a while */
                int32_t agree = pi >= 0 ? (int32_t)rnd((uint32_t)M[pi].n + 1) : 0;
                for (int i = 0; i < n; i++) tok[i] = i < agree && pi >= 0 && i < M[pi].n ? M[pi].tok[i] : (int32_t)rnd(4);
                int32_t bp = rnd(2) ? -1 : (int32_t)rnd(MAXL + 2);
                int32_t parent = pi >= 0 ? M[pi].id : -1, id = -1;
                /* The model's answer. */
                int32_t common = pi >= 0 ? lcp(M[pi].tok, M[pi].n, tok, n) : 0;
                int32_t d = pi < 0 ? 0 : bp < 0 ? common : bp;
                pk_status want = PK_OK;
                if (pi >= 0 && bp >= 0 && (bp > M[pi].n || bp > n)) want = PK_EINVAL;
                else if (pi >= 0 && bp >= 0 && common < bp) want = PK_ECONFLICT;
                else if (d >= n) want = PK_EINVAL;
                else if (live == CAP) want = PK_EFULL;
                pk_status st = pool_add(t, parent, tok, n, bp, step, step, &id);
                CHECK_EQ_INT(st, want);
                if (st == PK_OK) {
                    mnode *x = &M[n_model++];
                    *x = (mnode){ .used = true, .id = id, .parent = parent, .d = d, .n = n };
                    memcpy(x->tok, tok, (size_t)n * sizeof *tok);
                    live++;
                }
            } else if (op == 2 && pi >= 0) {        /* remove */
                pk_status want = m_children(M[pi].id) ? PK_ECONFLICT : PK_OK;
                CHECK_EQ_INT(pool_remove(t, M[pi].id), want);
                if (want == PK_OK) {
                    M[pi].used = false;
                    live--;
                }
            } else if (op == 3 && pi >= 0) {        /* release a subtree, leaves first */
                int32_t ids[CAP];
                int32_t k = pool_subtree(t, M[pi].id, ids, CAP);
                CHECK(k >= 1);
                for (int32_t j = 0; j < k; j++) {
                    CHECK_EQ_INT(pool_remove(t, ids[j]), PK_OK);
                    int mi = m_find(ids[j]);
                    CHECK(mi >= 0);
                    if (mi >= 0) M[mi].used = false;
                    live--;
                }
                CHECK(m_find(M[pi].id) < 0);
            }
            n_ops[op]++;
            /* The tree equals the model. */
            CHECK_EQ_INT(pool_count(t), live);
            for (int32_t i = 0; i < pool_count(t); i++) {
                const pool_node *p = pool_at(t, i);
                int mi = m_find(p->id);
                if (mi < 0) { CHECK(mi >= 0); break; }
                if (p->parent != M[mi].parent || p->branch_pos != M[mi].d || p->prefix_len != M[mi].n ||
                    memcmp(p->tokens, M[mi].tok, (size_t)M[mi].n * sizeof(int32_t)) ||
                    p->n_children != m_children(p->id)) {
                    CHECK(!"tree differs from the model");
                    break;
                }
            }
            if (!pool_tree_check(t)) {
                CHECK(!"pool_tree_check");
                break;
            }
        }
        pool_tree_free(t);
    }
    printf("random: %d runs x %d steps (add %d, remove %d, subtree %d)\n", n_runs, n_steps,
           n_ops[0] + n_ops[1], n_ops[2], n_ops[3]);
}

/* A tree read back from files keeps its ids: the next id can be moved
 * forward, never back (ids are never reused). */
static void test_next_id(void)
{
    pool_tree *t;
    CHECK_EQ_INT(pool_tree_new(4, &t), PK_OK);
    int32_t tok[3] = { 1, 2, 3 }, id;
    CHECK_EQ_INT(pool_set_next_id(t, 7), PK_OK);
    CHECK_EQ_INT(pool_add(t, -1, tok, 3, -1, 0, 0, &id), PK_OK);
    CHECK_EQ_INT(id, 7);
    CHECK_EQ_INT(pool_set_next_id(t, 7), PK_EINVAL);
    CHECK_EQ_INT(pool_set_next_id(t, 3), PK_EINVAL);
    CHECK_EQ_INT(pool_set_next_id(t, 9), PK_OK);
    CHECK_EQ_INT(pool_add(t, 7, tok, 3, 2, 1, 0, &id), PK_OK);
    CHECK_EQ_INT(id, 9);
    CHECK(pool_tree_check(t));
    pool_tree_free(t);
}

/* Ids never wrap: past POOL_ID_MAX (reached here by a restored file's id,
 * as a planted pool-2147483646.pkv once did, and the ids went negative),
 * the lowest id no pool holds is given; an id past the range is refused. */
static void test_id_range(void)
{
    pool_tree *t;
    CHECK_EQ_INT(pool_tree_new(4, &t), PK_OK);
    int32_t tok[3] = { 1, 2, 3 }, a, b, c, d;
    CHECK_EQ_INT(pool_set_next_id(t, POOL_ID_MAX + 2), PK_EINVAL);
    CHECK_EQ_INT(pool_set_next_id(t, POOL_ID_MAX), PK_OK);
    CHECK_EQ_INT(pool_add(t, -1, tok, 3, -1, 0, 0, &a), PK_OK);
    CHECK_EQ_INT(a, POOL_ID_MAX);
    CHECK_EQ_INT(pool_add(t, -1, tok, 3, -1, 1, 0, &b), PK_OK);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(pool_add(t, -1, tok, 3, -1, 2, 0, &c), PK_OK);
    CHECK_EQ_INT(c, 2);
    CHECK_EQ_INT(pool_remove(t, b), PK_OK);
    CHECK_EQ_INT(pool_add(t, a, tok, 3, 2, 3, 0, &d), PK_OK);
    CHECK_EQ_INT(d, 1);                         /* the freed one, the lowest */
    CHECK(pool_tree_check(t));
    pool_tree_free(t);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_id_range);
    TEST_RUN(test_next_id);
    TEST_RUN(test_contract);
    TEST_RUN(test_match);
    TEST_RUN(test_random, 300, 60);
    return test_finish();
}
