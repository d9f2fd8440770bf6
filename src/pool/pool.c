/*
 * pool.c - the pool tree (see pool.h).  Nodes sit in one dense array in
 * creation order, so a parent always comes before its children and a
 * reverse walk visits every node after its descendants.  Trees are small
 * (--pools, at most a few hundred), so lookups are linear scans.
 */
#include "pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct node {
    pool_node pub;
    int32_t *tokens;            /* owned: pub.tokens points here */
    uint64_t *hash;
} node;

struct pool_tree {
    node *n;                    /* [cap], [0, count) in use */
    int32_t count, cap;
    int32_t next_id;
};

const char *pool_residency_name(pool_residency r)
{
    switch (r) {
    case POOL_MATERIALIZING: return "materializing";
    case POOL_RESIDENT: return "resident";
    case POOL_EVICTED: return "evicted";
    }
    return "?";
}

pk_status pool_tree_new(int32_t cap, pool_tree **out)
{
    *out = NULL;
    if (cap < 1) return PK_EINVAL;
    pool_tree *t = calloc(1, sizeof *t);
    if (!t || !(t->n = calloc((size_t)cap, sizeof *t->n))) {
        free(t);
        return PK_ENOMEM;
    }
    t->cap = cap;
    t->next_id = 1;
    *out = t;
    return PK_OK;
}

void pool_tree_free(pool_tree *t)
{
    if (!t) return;
    for (int32_t i = 0; i < t->count; i++) {
        free(t->n[i].tokens);
        free(t->n[i].hash);
    }
    free(t->n);
    free(t);
}

/* ---- hashes and matching ---------------------------------------------- */

void pool_hash_chain(const int32_t *tokens, int32_t n, uint64_t *out)
{
    out[0] = POOL_HASH_SEED;
    for (int32_t i = 0; i < n; i++) out[i + 1] = XXH3_64bits_withSeed(&tokens[i], sizeof tokens[i], out[i]);
}

int32_t pool_match(const pool_node *p, const int32_t *prompt, int32_t n, const uint64_t *ph)
{
    /* Largest k with equal chains, by binary search (equality is monotone
     * in k), then the token check: a collision can only make k too long. */
    int32_t lo = 0, hi = MIN(n, p->prefix_len);
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (p->hash[mid] == ph[mid]) lo = mid;
        else hi = mid - 1;
    }
    int32_t k = 0;
    while (k < lo && p->tokens[k] == prompt[k]) k++;
    return k;
}

/* ---- lookups ---------------------------------------------------------- */

static int32_t index_of(const pool_tree *t, int32_t id)
{
    for (int32_t i = 0; i < t->count; i++)
        if (t->n[i].pub.id == id) return i;
    return -1;
}

const pool_node *pool_get(const pool_tree *t, int32_t id)
{
    int32_t i = index_of(t, id);
    return i < 0 ? NULL : &t->n[i].pub;
}

int32_t pool_count(const pool_tree *t) { return t->count; }
int32_t pool_capacity(const pool_tree *t) { return t->cap; }
const pool_node *pool_at(const pool_tree *t, int32_t i) { return &t->n[i].pub; }

/* ---- the contract ----------------------------------------------------- */

pk_status pool_plan(const pool_tree *t, int32_t parent_id, const int32_t *tokens, int32_t n,
                    int32_t branch_pos, int32_t *d_out, int32_t *conflict)
{
    *d_out = 0;
    if (conflict) *conflict = -1;
    if (n < 1 || !tokens) return PK_EINVAL;
    if (parent_id < 0) return PK_OK;
    const pool_node *p = pool_get(t, parent_id);
    if (!p) return PK_ENOTFOUND;
    int32_t common = 0, lim = MIN(n, p->prefix_len);
    while (common < lim && p->tokens[common] == tokens[common]) common++;
    if (branch_pos < 0) {
        *d_out = common;
    } else {
        *d_out = branch_pos;
        if (branch_pos > p->prefix_len || branch_pos > n) return PK_EINVAL;
        if (common < branch_pos) {
            if (conflict) *conflict = common;
            return PK_ECONFLICT;
        }
    }
    return *d_out >= n ? PK_EINVAL : PK_OK;
}

/* The next id: in increasing order while the range lasts, then the lowest
 * id no pool holds (there is one: the tree holds at most cap pools). */
static int32_t take_id(pool_tree *t)
{
    if (t->next_id <= POOL_ID_MAX) return t->next_id++;
    int32_t id = 1;
    while (index_of(t, id) >= 0) id++;
    return id;
}

pk_status pool_add(pool_tree *t, int32_t parent_id, const int32_t *tokens, int32_t n, int32_t branch_pos,
                   int32_t seq, double now_s, int32_t *id_out)
{
    int32_t d, conflict;
    pk_status st = pool_plan(t, parent_id, tokens, n, branch_pos, &d, &conflict);
    if (st != PK_OK) return st;
    if (t->count == t->cap) return PK_EFULL;
    node *x = &t->n[t->count];
    x->tokens = malloc((size_t)n * sizeof *x->tokens);
    x->hash = malloc((size_t)(n + 1) * sizeof *x->hash);
    if (!x->tokens || !x->hash) {
        free(x->tokens);
        free(x->hash);
        memset(x, 0, sizeof *x);
        return PK_ENOMEM;
    }
    memcpy(x->tokens, tokens, (size_t)n * sizeof *tokens);
    pool_hash_chain(tokens, n, x->hash);
    x->pub = (pool_node){ .id = take_id(t), .parent = parent_id < 0 ? -1 : parent_id, .branch_pos = d,
                          .prefix_len = n, .tokens = x->tokens, .hash = x->hash,
                          .residency = POOL_MATERIALIZING, .last_access_s = now_s, .seq = seq };
    if (parent_id >= 0) t->n[index_of(t, parent_id)].pub.n_children++;
    t->count++;
    *id_out = x->pub.id;
    return PK_OK;
}

pk_status pool_set_next_id(pool_tree *t, int32_t id)
{
    if (id < t->next_id || id > POOL_ID_MAX + 1) return PK_EINVAL;
    t->next_id = id;
    return PK_OK;
}

pk_status pool_remove(pool_tree *t, int32_t id)
{
    int32_t i = index_of(t, id);
    if (i < 0) return PK_ENOTFOUND;
    if (t->n[i].pub.n_children > 0) return PK_ECONFLICT;
    int32_t parent = t->n[i].pub.parent;
    if (parent >= 0) t->n[index_of(t, parent)].pub.n_children--;
    free(t->n[i].tokens);
    free(t->n[i].hash);
    memmove(&t->n[i], &t->n[i + 1], (size_t)(t->count - i - 1) * sizeof t->n[0]);
    t->count--;
    memset(&t->n[t->count], 0, sizeof t->n[0]);
    return PK_OK;
}

void pool_set_pinned(pool_tree *t, int32_t id, bool pinned)
{
    int32_t i = index_of(t, id);
    if (i >= 0) t->n[i].pub.pinned = pinned;
}

void pool_set_residency(pool_tree *t, int32_t id, pool_residency r)
{
    int32_t i = index_of(t, id);
    if (i >= 0) t->n[i].pub.residency = r;
}

void pool_touch(pool_tree *t, int32_t id, double now_s)
{
    int32_t i = index_of(t, id);
    if (i >= 0) t->n[i].pub.last_access_s = now_s;
}

/* ---- shape ------------------------------------------------------------ */

bool pool_is_ancestor(const pool_tree *t, int32_t anc, int32_t id)
{
    for (const pool_node *p = pool_get(t, id); p; p = p->parent < 0 ? NULL : pool_get(t, p->parent))
        if (p->id == anc) return true;
    return false;
}

int32_t pool_subtree(const pool_tree *t, int32_t id, int32_t *out, int32_t cap)
{
    if (index_of(t, id) < 0) return -1;
    /* Creation order puts descendants after ancestors: walking backwards
     * lists each node after all of its descendants. */
    int32_t n = 0;
    for (int32_t i = t->count - 1; i >= 0; i--)
        if (pool_is_ancestor(t, id, t->n[i].pub.id) && n < cap) out[n++] = t->n[i].pub.id;
    return n;
}

int32_t pool_depth(const pool_tree *t)
{
    int32_t best = 0;
    for (int32_t i = 0; i < t->count; i++) {
        int32_t d = 0;
        for (const pool_node *p = &t->n[i].pub; p; p = p->parent < 0 ? NULL : pool_get(t, p->parent)) d++;
        best = MAX(best, d);
    }
    return best;
}

/* ---- lifetime --------------------------------------------------------- */

bool pool_auto_pinned(const pool_node *p, int32_t n_sessions)
{
    return p->n_children > 0 || n_sessions > 0;
}

bool pool_kept(const pool_node *p, int32_t n_sessions, double now_s, double grace_s)
{
    return p->pinned || pool_auto_pinned(p, n_sessions) || now_s - p->last_access_s < grace_s;
}

bool pool_orphaned_pin(const pool_node *p, int32_t n_sessions)
{
    return p->pinned && !pool_auto_pinned(p, n_sessions);
}

void pool_rollup(const pool_tree *t, const int64_t *own, int64_t *out)
{
    for (int32_t i = 0; i < t->count; i++) out[i] = own[i];
    for (int32_t i = t->count - 1; i >= 0; i--) {   /* children before parents */
        int32_t parent = t->n[i].pub.parent;
        if (parent >= 0) out[index_of(t, parent)] += out[i];
    }
}

bool pool_tree_check(const pool_tree *t)
{
    uint64_t *h = NULL;
    bool ok = true;
    for (int32_t i = 0; i < t->count && ok; i++) {
        const pool_node *p = &t->n[i].pub;
        int32_t kids = 0;
        for (int32_t j = 0; j < t->count; j++) kids += t->n[j].pub.parent == p->id;
        ok = p->id > 0 && p->id <= POOL_ID_MAX && (p->id < t->next_id || t->next_id > POOL_ID_MAX) &&
             index_of(t, p->id) == i && kids == p->n_children &&
             p->prefix_len >= 1 && p->branch_pos >= 0 && p->branch_pos < p->prefix_len;
        if (ok && p->parent >= 0) {
            int32_t pi = index_of(t, p->parent);
            ok = pi >= 0 && pi < i && p->branch_pos <= t->n[pi].pub.prefix_len &&
                 !memcmp(p->tokens, t->n[pi].pub.tokens, (size_t)p->branch_pos * sizeof *p->tokens);
        } else if (ok) {
            ok = p->branch_pos == 0;
        }
        uint64_t *grown = ok ? realloc(h, (size_t)(p->prefix_len + 1) * sizeof *h) : NULL;
        if (grown) {                 /* out of memory: the hashes go unchecked, nothing leaks */
            h = grown;
            pool_hash_chain(p->tokens, p->prefix_len, h);
            ok = !memcmp(h, p->hash, (size_t)(p->prefix_len + 1) * sizeof *h);
        }
    }
    free(h);
    return ok;
}
