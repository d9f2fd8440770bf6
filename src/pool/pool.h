/*
 * pool.h - the pool tree: shared prefixes as immutable nodes, the prefix
 * contract between a child and its parent, and the lifetime and roll-up
 * rules.  Pure: it knows tokens, ids and times, never the KV cache; the
 * engine (eng_pool.c) applies what it decides.  docs/pools.md is the manual.
 *
 * DESIGN
 *   A node holds its whole prefix [0, L) and a chained hash per position:
 *
 *     hash[0] = POOL_HASH_SEED,  hash[i + 1] = XXH3_64(tokens[i], seed hash[i])
 *
 *   so equal hashes at i mean (up to collisions) equal prefixes of length i,
 *   and prefix equality is monotone in i: the longest common prefix with a
 *   prompt is a binary search over the prompt's own chain, then checked
 *   token by token (a collision can only shorten the answer, never make a
 *   wrong one).
 *
 *     parent ──[0, D) shared by membership──▶ child, own range [D, L)
 *       root: D = 0;  extend: D = parent.L;  branch: D < parent.L
 *
 *   Lifetime: a node is auto-pinned while it has a child or an attached
 *   session (so every ancestor of a used pool is pinned too); after the last
 *   one goes, grace_s passes before it may be evicted by cache pressure.
 *   An explicit pin is never overridden.  Release removes a leaf; a subtree
 *   goes leaves first.
 *
 * INVARIANTS (pool_tree_check; tests/test_pool.c runs thousands of random
 * operation sequences against a naive model)
 *   - ids are unique, positive and never reused;
 *   - a child's parent is in the tree, branch_pos <= parent's prefix_len,
 *     and tokens[0, branch_pos) equal the parent's;
 *   - n_children is the number of nodes naming the node as parent;
 *   - hash[] is the chain of tokens[].
 *
 * Threads: a tree belongs to one thread (the engine's); every function is
 * reentrant over distinct trees.
 */
#ifndef POOL_H
#define POOL_H

#include "../common/pk.h"

#define POOL_HASH_SEED 0x9e3779b97f4a7c15ull

typedef enum pool_residency {
    POOL_MATERIALIZING = 1,     /* its own cells are being computed */
    POOL_RESIDENT,              /* every cell in [0, L) exists */
    POOL_EVICTED,               /* cells freed, tokens kept */
} pool_residency;

const char *pool_residency_name(pool_residency r);   /* "resident", ... */

typedef struct pool_node {
    int32_t id;                 /* > 0, never reused */
    int32_t parent;             /* parent's id, -1 for a root */
    int32_t branch_pos;         /* D: tokens shared with the parent */
    int32_t prefix_len;         /* L */
    const int32_t *tokens;      /* [L], owned by the tree */
    const uint64_t *hash;       /* [L + 1] chained hashes */
    bool pinned;                /* explicit pin */
    pool_residency residency;   /* set by the engine (pool_set_residency) */
    double last_access_s;       /* start of the grace time */
    int32_t n_children;
    int32_t seq;                /* the engine's KV sequence id for it (opaque here) */
} pool_node;

typedef struct pool_tree pool_tree;

/* ---- create / destroy ------------------------------------------------- */

/* A tree of at most cap nodes.  PK_EINVAL when cap < 1, PK_ENOMEM. */
pk_status pool_tree_new(int32_t cap, pool_tree **out);
void pool_tree_free(pool_tree *t);                   /* NULL is a no-op */

/* ---- the prefix contract ---------------------------------------------- */

/* The chain of hashes of tokens[0, n): out[n + 1]. */
void pool_hash_chain(const int32_t *tokens, int32_t n, uint64_t *out);

/* The longest common prefix of node p's tokens and prompt[0, n), given the
 * prompt's chain ph[n + 1] (pool_hash_chain).  Token-exact. */
int32_t pool_match(const pool_node *p, const int32_t *prompt, int32_t n, const uint64_t *ph);

/* What a fork of parent_id from tokens[0, n) would be.  branch_pos < 0 asks
 * for D = the longest common prefix with the parent (so a child that starts
 * with the whole parent is an extend).  Returns PK_OK with *d_out = D, or
 *   PK_ENOTFOUND  no such parent;
 *   PK_EINVAL     n < 1, branch_pos > parent's L or > n, or D == n (the
 *                 child would own no token: *d_out still says D);
 *   PK_ECONFLICT  tokens[0, branch_pos) differ from the parent's: *conflict
 *                 gets the first differing position.
 * parent_id -1 plans a root (D = 0). */
pk_status pool_plan(const pool_tree *t, int32_t parent_id, const int32_t *tokens, int32_t n,
                    int32_t branch_pos, int32_t *d_out, int32_t *conflict);

/* ---- use -------------------------------------------------------------- */

/* Adds a node (after pool_plan said PK_OK for the same arguments): copies
 * tokens, computes the chain, residency POOL_MATERIALIZING, unpinned,
 * last_access now_s.  *id_out gets the new id.  PK_EFULL when the tree is
 * full, PK_ENOMEM, PK_EINVAL / PK_ENOTFOUND / PK_ECONFLICT as pool_plan
 * (nothing added). */
pk_status pool_add(pool_tree *t, int32_t parent_id, const int32_t *tokens, int32_t n, int32_t branch_pos,
                   int32_t seq, double now_s, int32_t *id_out);

/* Pool ids are 1..POOL_ID_MAX, given in increasing order, so a released
 * id comes back only after POOL_ID_MAX others: then pool_add takes the
 * lowest id no pool holds.  An id never wraps to a negative number. */
#define POOL_ID_MAX (INT32_MAX / 2)

/* The next pool_add gives id (a tree restored from files keeps its ids).
 * PK_EINVAL when id is below the next one already, or past
 * POOL_ID_MAX + 1. */
pk_status pool_set_next_id(pool_tree *t, int32_t id);

/* Removes leaf id.  PK_ENOTFOUND, PK_ECONFLICT while it has children. */
pk_status pool_remove(pool_tree *t, int32_t id);

/* The node of id, NULL when there is none.  Valid until the next add or
 * remove. */
const pool_node *pool_get(const pool_tree *t, int32_t id);
/* Every node in creation order: index 0..pool_count()-1. */
int32_t pool_count(const pool_tree *t);
const pool_node *pool_at(const pool_tree *t, int32_t i);
int32_t pool_capacity(const pool_tree *t);

void pool_set_pinned(pool_tree *t, int32_t id, bool pinned);
void pool_set_residency(pool_tree *t, int32_t id, pool_residency r);
void pool_touch(pool_tree *t, int32_t id, double now_s);

/* The subtree of id (id included), leaves first (every node after all of
 * its descendants): ids into out[cap], the count returned (-1 when id is
 * not in the tree). */
int32_t pool_subtree(const pool_tree *t, int32_t id, int32_t *out, int32_t cap);
/* Depth of the deepest node (a root alone is 1; 0 for an empty tree). */
int32_t pool_depth(const pool_tree *t);
/* True when anc is id or one of its ancestors. */
bool pool_is_ancestor(const pool_tree *t, int32_t anc, int32_t id);

/* ---- lifetime --------------------------------------------------------- */

/* Auto-pinned: the node has a child or an attached session.  n_sessions is
 * the count of sessions attached to this node. */
bool pool_auto_pinned(const pool_node *p, int32_t n_sessions);
/* Pinned for the cache: explicit pin, auto-pin, or within grace_s of its
 * last access.  What the policy snapshot's `pinned` says. */
bool pool_kept(const pool_node *p, int32_t n_sessions, double now_s, double grace_s);
/* An explicit pin nothing uses: no child, no session. */
bool pool_orphaned_pin(const pool_node *p, int32_t n_sessions);

/* Roll-up over the subtree of every node: out[i] = own[i] + the sum of out[]
 * of node i's children (indices as pool_at). */
void pool_rollup(const pool_tree *t, const int64_t *own, int64_t *out);

/* Recomputes every invariant above; true when they hold. */
bool pool_tree_check(const pool_tree *t);

#endif
