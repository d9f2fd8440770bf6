/*
 * policy_tables.h - what the policy tests share: a token arena, a seeded
 * random generator, token arrays with turn markers, and a slot table T that
 * small builders fill.  Included by test_policy.c and test_policy_prop.c
 * only (everything is static).
 */
#ifndef POLICY_TABLES_H
#define POLICY_TABLES_H

#include "../src/policy/pol.h"
#include "test.h"

#include <stdint.h>

#define MK 7   /* the turn-marker token in every table here */

static bool verbose;

/* ---- token arena ------------------------------------------------------ */

static int32_t *arena;
static size_t arena_used, arena_cap;

static inline void arena_reset(void) { arena_used = 0; }

static inline int32_t *arena_take(size_t n)
{
    ASSERT(arena_used + n <= arena_cap);
    int32_t *p = arena + arena_used;
    arena_used += n;
    return p;
}

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint32_t rndn(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static inline double rndu(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* n content tokens (never MK) from a seed. */
static inline void fill_content(int32_t *t, int n, uint64_t seed)
{
    uint64_t keep = rng_state;
    rng_state = seed * 7919 + 1;
    for (int i = 0; i < n; i++)
        t[i] = 100 + (int32_t)rndn(60000);
    rng_state = keep;
}

/* A token array: shared[0..n_shared) then content from seed up to n, with
 * MK at each marker position given (terminated by -1). */
static inline int32_t *conv(int n, const int32_t *shared, int n_shared, uint64_t seed, const int *markers)
{
    int32_t *t = arena_take((size_t)n);
    int k = MIN(n, n_shared);
    if (k > 0)
        memcpy(t, shared, (size_t)k * sizeof *t);
    fill_content(t + k, n - k, seed);
    for (; markers && *markers >= 0; markers++)
        if (*markers < n)
            t[*markers] = MK;
    return t;
}

/* ---- hand-built tables ------------------------------------------------- */

typedef struct table {
    pol_params p;
    pol_slot slots[POL_MAX_SLOTS];
    pol_hist hists[POL_MAX_HIST];
    pol_snapshot s;
} table;

static table T;

static inline void tb_init(int n_slots)
{
    memset(&T, 0, sizeof T);
    T.p = pol_params_default();
    for (int k = 0; k < n_slots; k++)
        T.slots[k] = (pol_slot){ .id = k, .busy = false, .hist = -1 };
    T.s = (pol_snapshot){
        .slots = T.slots, .n_slots = n_slots, .hists = T.hists, .n_hists = 0,
        .now_s = 1000, .n_cells_free = 1 << 20, .n_cells_extra = 0,
        .n_reserve_free = 8, .params = &T.p,
    };
}

static inline int32_t naive_last_marker(const int32_t *t, int n)
{
    for (int i = n - 1; i >= 0; i--)
        if (t[i] == MK)
            return i;
    return -1;
}

/* Adds a parked, valid history idle for age_s; returns its index. */
static inline int tb_hist(const int32_t *tokens, int n, double age_s)
{
    int i = T.s.n_hists++;
    T.hists[i] = (pol_hist){
        .seq = 100 + i, .tokens = tokens, .n_tokens = n,
        .marker_pos = naive_last_marker(tokens, n), .last_use_s = T.s.now_s - age_s,
        .valid = true, .n_cells_excl = n,
    };
    return i;
}

static inline void tb_put(int slot, int hist, bool busy)
{
    T.slots[slot].hist = hist;
    T.slots[slot].busy = busy;
    if (hist >= 0)
        T.hists[hist].seq = slot;
}

static inline void tb_prompt(const int32_t *t, int n)
{
    T.s.prompt = t;
    T.s.n_prompt = n;
}

static pol_decision D;

static inline pol_decision *place(void)
{
    pk_status st = pol_place(&T.s, &D);
    CHECK_EQ_INT(st, PK_OK);
    if (verbose)
        printf("    %-10s slot %d src %d reuse %d keep %d park %d drops %d: %s\n",
               pol_kind_name(D.kind), D.slot, D.source, D.n_reuse, D.n_keep, D.park, D.n_drop, D.reason);
    return &D;
}

/* Allocates the arena for n tokens (the caller frees `arena`). */
static inline void arena_init(size_t n)
{
    arena_cap = n;
    arena_used = 0;
    arena = malloc(n * sizeof *arena);
    ASSERT(arena);
    verbose = getenv("POL_TEST_VERBOSE") != NULL;
}

#endif
