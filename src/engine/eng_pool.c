/*
 * eng_pool.c - pools in the engine: the mechanism behind src/pool (the
 * tree and its rules) and docs/pools.md (the manual).
 *
 *   pool message ──▶ create / fork: a node and a sequence id, its parent's
 *                    [0, D) joined, [D, k) joined from whatever history
 *                    already holds those tokens, [k, L) computed by the
 *                    batch; answered once resident
 *                    pin / unpin / evict / flush / release
 *   waiting task with pool_id ──▶ eng_pool_ready (P, or wait) ──▶ placed
 *                    ──▶ eng_pool_attach: the slot's [0, P) are the pool's
 *
 * Materializing:  mat_pos < 0   waits for its parent to be resident
 *                 mat_pos >= 0  cells [0, mat_pos) exist; the batch adds a
 *                               chunk from mat_pos each step
 * Every pool holds its own sequence id for its whole life (evicted too).
 * Engine thread only.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pool/pool.h"
#include "eng_impl.h"

typedef struct pmech {
    int32_t id;                 /* pool id, 0: the id holds no pool */
    int32_t mat_pos;            /* see the top comment */
    int32_t mat_n;              /* tokens of it in this step's batch */
    int32_t n_prefilled;        /* tokens computed for it */
    bool was_resident;          /* once materialized (a failed flush keeps it, evicted) */
    eng_scope adm;              /* its admission policy and settle record (eng_admit.c) */
    eng_call *waiters;          /* create / fork / flush answered once resident */
    uint64_t hits, queries;
    int32_t checkpoints[2];     /* hybrids: kept when materializing (eng_pool_req) */
} pmech;

struct eng_pools {
    pool_tree *tree;
    pmech m[KV_MAX_SEQ];        /* by sequence id */
    uint64_t *ph;               /* prompt hash chain scratch [ph_cap] */
    int32_t ph_cap;
};

pk_status eng_pool_init(eng *e)
{
    struct eng_pools *ps = calloc(1, sizeof *ps);
    if (!ps) return PK_ENOMEM;
    e->pools = ps;
    ps->ph_cap = e->n_ctx_slot + 1;
    ps->ph = malloc((size_t)ps->ph_cap * sizeof *ps->ph);
    if (!ps->ph) return PK_ENOMEM;
    return pool_tree_new(MAX(e->p.n_pools, 1), &ps->tree);
}

static void reply_all(eng *e, pmech *pm, pk_status st, const char *msg);

void eng_pool_free(eng *e)
{
    struct eng_pools *ps = e->pools;
    if (!ps) return;
    for (int32_t i = 0; i < KV_MAX_SEQ; i++)
        if (ps->m[i].waiters) reply_all(e, &ps->m[i], PK_ECANCELLED, "the engine is stopping");
    pool_tree_free(ps->tree);
    free(ps->ph);
    free(ps);
    e->pools = NULL;
}

static pmech *mech(eng *e, const pool_node *p) { return &e->pools->m[p->seq]; }
static double grace_s(const eng *e) { return e->p.pool_grace_ms / 1000.0; }

/* Slots attached now: busy, or idle with the history that holds its cells. */
static int32_t n_sessions(const eng *e, int32_t id)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        n += s->pool_id == id && (s->state != ENG_SLOT_IDLE || s->n_hist > 0);
    }
    return n;
}

/* ---- answers ---------------------------------------------------------- */

static void fill_reply(const eng *e, const pool_node *p, const pmech *pm, eng_call *c)
{
    eng_pool_reply *o = c->u.pool.out;
    o->pool_id = p->id;
    o->parent = p->parent;
    o->branch_pos = p->branch_pos;
    o->prefix_len = p->prefix_len;
    o->own_tokens = p->prefix_len - p->branch_pos;
    o->n_prefilled = pm->n_prefilled;
    o->ms = pk_time_ms() - c->t0_ms;
}

static void answer(eng *e, eng_call *c, pk_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer(eng *e, eng_call *c, pk_status st, const char *fmt, ...)
{
    c->u.pool.out->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->u.pool.out->message, sizeof c->u.pool.out->message, fmt, ap);
        va_end(ap);
    }
    eng_call_done(e, c);
}

/* Answers every call waiting on pm (resident: PK_OK with the pool). */
static void reply_all(eng *e, pmech *pm, pk_status st, const char *msg)
{
    const pool_node *p = pool_get(e->pools->tree, pm->id);
    for (eng_call *c = pm->waiters, *nx; c; c = nx) {
        nx = c->next_wait;
        if (p) fill_reply(e, p, pm, c);
        answer(e, c, st, "%s", msg);
    }
    pm->waiters = NULL;
}

static void add_waiter(pmech *pm, eng_call *c)
{
    c->next_wait = pm->waiters;
    pm->waiters = c;
}

/* ---- materializing ---------------------------------------------------- */

/* Source i of the cache's token runs: slots, then parked histories, then
 * resident pools other than `self`.  false when i holds nothing. */
static bool source_at(eng *e, int32_t i, int32_t self, kv_seq *seq, const int32_t **tok, int32_t *n)
{
    if (i < e->p.n_slots) {
        *seq = i;
        *tok = e->slots[i].hist;
        *n = e->slots[i].n_hist;
        return *n > 0;
    }
    i -= e->p.n_slots;
    if (i < e->hist.n_rec) {
        const hrec *r = &e->hist.rec[i];
        *seq = r->seq;
        *tok = r->tokens;
        *n = r->n_tokens;
        return r->where == HIST_PARKED;
    }
    const pool_node *q = pool_at(e->pools->tree, i - e->hist.n_rec);
    *seq = q->seq;
    *tok = q->tokens;
    *n = q->prefix_len;
    return q->id != self && q->residency == POOL_RESIDENT;
}

/* The longest run of p's tokens from D on that some history or other pool
 * already holds (the hint, a from_session source, wins ties): the
 * sequence, and its cells [D, *end) to join; -1 when none goes past D. */
static kv_seq best_source(eng *e, const pool_node *p, kv_seq hint, int32_t *end)
{
    kv_seq best = -1, seq;
    int32_t best_n = p->branch_pos, L = p->prefix_len, n;
    const int32_t *tok;
    int32_t n_src = e->p.n_slots + e->hist.n_rec + pool_count(e->pools->tree);
    for (int32_t i = 0; i < n_src; i++) {
        if (!source_at(e, i, p->id, &seq, &tok, &n)) continue;
        int32_t k = pol_common_prefix(tok, MIN(n, L), p->tokens, L);
        if (k > best_n || (k == best_n && k > p->branch_pos && seq == hint)) {
            best_n = k;
            best = seq;
        }
    }
    *end = best_n;
    return best;
}

/* Every cell of p exists: it is resident, and what waited on it is answered. */
static void resident(eng *e, const pool_node *p)
{
    pmech *pm = mech(e, p);
    pool_set_residency(e->pools->tree, p->id, POOL_RESIDENT);
    pm->was_resident = true;
    eng_persist_sync(e, NULL, 0);             /* logged; the next sync tries again */
    reply_all(e, pm, PK_OK, "");
}

/* p's parent is resident (or p is a root): join [0, D) from it, then what
 * is already cached; the batch computes the rest.  Resident at once when
 * nothing is left. */
static void mat_start(eng *e, const pool_node *p, kv_seq hint)
{
    pmech *pm = mech(e, p);
    int32_t D = p->branch_pos, L = p->prefix_len;
    /* On a hybrid the parent's state at D may be gone (a checkpoint
     * dropped, the parent re-materialized): the pool then computes from
     * where it has one. */
    pm->mat_pos = p->parent >= 0 ? mem_share(e->mem, pool_get(e->pools->tree, p->parent)->seq, p->seq, 0, D) : 0;
    int32_t k;
    kv_seq src = pm->mat_pos == D ? best_source(e, p, hint, &k) : -1;
    if (src >= 0) {
        /* Histories hold every cell of their tokens (eng_check), so this
         * joins k - D cells (on a hybrid up to src's last state <= k);
         * anything else is a bug caught here. */
        k = mem_share(e->mem, src, p->seq, D, k);
        ASSERT(mem_seq_cells(e->mem, p->seq) == k);
        /* Cells a history computed become the pool's charge; cells another
         * pool computed stay that pool's (it owns its range for good). */
        if (e->seqs.kind[src] != ENG_SEQ_POOL) mem_charge(e->mem, p->seq, D, k);
        pm->mat_pos = k;
    }
    pm->n_prefilled = L - pm->mat_pos;
    for (int i = 0; i < 2; i++)
        if (pm->checkpoints[i] > pm->mat_pos && pm->checkpoints[i] < L)
            mem_checkpoint_at(e->mem, p->seq, pm->checkpoints[i]);
    if (pm->mat_pos == L) resident(e, p);
}

/* Starts (re-)materializing p: now when its parent is resident, else once
 * the parent is (which this starts too, when evicted). */
static void mat_begin(eng *e, const pool_node *p, kv_seq hint)
{
    pool_set_residency(e->pools->tree, p->id, POOL_MATERIALIZING);
    mech(e, p)->mat_pos = -1;
    const pool_node *par = p->parent >= 0 ? pool_get(e->pools->tree, p->parent) : NULL;
    if (!par || par->residency == POOL_RESIDENT) mat_start(e, p, hint);
    else if (par->residency == POOL_EVICTED) mat_begin(e, par, -1);
}

bool eng_pool_busy(const eng *e)
{
    const pool_tree *t = e->pools->tree;
    for (int32_t i = 0; i < pool_count(t); i++)
        if (pool_at(t, i)->residency == POOL_MATERIALIZING) return true;
    return false;
}

/* Removes pool p and everything of it from the engine (its cells stay for
 * whoever else holds them); answers its waiters with st. */
static void drop_pool(eng *e, const pool_node *p, pk_status st, const char *msg)
{
    int32_t id = p->id;
    kv_seq seq = p->seq;
    pmech *pm = &e->pools->m[seq];
    reply_all(e, pm, st, msg);
    for (int32_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].pool_id == id) e->slots[i].pool_id = e->slots[i].pool_shared = 0;
    mem_drop(e->mem, seq);
    ASSERT(pool_remove(e->pools->tree, id) == PK_OK);
    eng_seq_give(e, seq);
    *pm = (pmech){0};
}

/* A materialization cannot go on (no KV room): a pool that was never
 * resident goes away, an evicted one stays evicted; what waits on it ends. */
static void mat_fail(eng *e, const pool_node *p, pk_status st, const char *msg)
{
    pmech *pm = mech(e, p);
    eng_fail_waiting_pool(e, p->id, st, msg);
    if (!pm->was_resident) {
        drop_pool(e, p, st, msg);
        return;
    }
    reply_all(e, pm, st, msg);
    mem_drop(e->mem, p->seq);
    pm->mat_pos = -1;
    pm->mat_n = 0;
    pool_set_residency(e->pools->tree, p->id, POOL_EVICTED);
}

int32_t eng_pool_batch(eng *e, int32_t n, int32_t lim)
{
    pool_tree *t = e->pools->tree;
    for (int32_t i = 0; i < pool_count(t) && n < lim; i++) {
        const pool_node *p = pool_at(t, i);
        pmech *pm = mech(e, p);
        pm->mat_n = 0;
        if (p->residency != POOL_MATERIALIZING) continue;
        if (pm->mat_pos < 0) {
            const pool_node *par = pool_get(t, p->parent);
            if (par->residency != POOL_RESIDENT) continue;
            int32_t id = p->id;
            mat_start(e, p, -1);
            p = pool_get(t, id);
            if (p->residency != POOL_MATERIALIZING) continue;
        }
        int32_t k = MIN(p->prefix_len - pm->mat_pos, lim - n);
        /* Room first, for this pool alone: a pool too big for the cache
         * fails by itself and never takes the running sessions with it. */
        if (!eng_make_room(e, n + k)) {
            char msg[160];
            snprintf(msg, sizeof msg, "the KV cache cannot hold pool %d (%d more cells; the rest is pinned or busy)",
                     p->id, k);
            mat_fail(e, p, PK_EFULL, msg);
            i--;                                   /* the node may be gone: look again */
            continue;
        }
        for (int32_t j = 0; j < k; j++)
            eng_batch_add(e, &n, p->tokens[pm->mat_pos + j], pm->mat_pos + j, p->seq, false);
        pm->mat_n = k;
    }
    return n;
}

void eng_pool_decoded(eng *e, pk_status st)
{
    pool_tree *t = e->pools->tree;
    for (int32_t i = 0; i < pool_count(t); i++) {
        const pool_node *p = pool_at(t, i);
        pmech *pm = mech(e, p);
        if (pm->mat_n == 0) continue;
        if (st != PK_OK) {
            pm->mat_n = 0;
            mat_fail(e, p, st, "decode failed while materializing");
            i--;
            continue;
        }
        pm->mat_pos += pm->mat_n;
        pm->mat_n = 0;
        if (pm->mat_pos == p->prefix_len) resident(e, p);
    }
}

/* ---- operations ------------------------------------------------------- */

/* Hybrids: where the pool's recurrent state is kept besides its end: the
 * starts of its last two messages (the first token of the turn marker,
 * <|im_start|> on ChatML templates), so that a session sharing only the
 * first messages (a system block without the task) still continues from
 * the pool (docs/hybrid.md). */
static void message_starts(const eng *e, const int32_t *tok, int32_t n, int32_t *out)
{
    out[0] = out[1] = 0;
    if (!mem_resume_limited(e->mem) || e->hist.n_marker < 1) return;
    for (int32_t i = n - 1, got = 0; i > 0 && got < 2; i--)
        if (tok[i] == e->hist.marker[0]) out[got++] = i;
}

static void op_make(eng *e, eng_call *c)
{
    const eng_pool_req *rq = c->u.pool.rq;
    pool_tree *t = e->pools->tree;
    const int32_t *tok = rq->tokens;
    int32_t n = rq->n_tokens;
    kv_seq hint = -1;
    int32_t parent = rq->verb == ENG_POOL_FORK ? rq->pool_id : -1;
    if (rq->from_session) {
        hint = eng_session_find(e, rq->from_session, &tok, &n);
        if (hint < 0) {
            answer(e, c, PK_ENOTFOUND, "session '%s' holds no context now", rq->from_session);
            return;
        }
    }
    if (!tok || n < 1) {
        answer(e, c, PK_EINVAL, "a pool needs at least one token");
        return;
    }
    if (n >= e->n_ctx_slot) {
        answer(e, c, PK_EINVAL, "the prefix has %d tokens; a slot holds %d, and sessions need room after it",
               n, e->n_ctx_slot);
        return;
    }
    for (int32_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= e->n_vocab) {
            answer(e, c, PK_EINVAL, "token %d at position %d is not in the vocabulary", tok[i], i);
            return;
        }
    int32_t d, conflict;
    pk_status st = pool_plan(t, parent, tok, n, rq->branch_pos, &d, &conflict);
    if (st == PK_ENOTFOUND) {
        answer(e, c, st, "pool %d not found", parent);
        return;
    }
    if (st == PK_ECONFLICT) {
        c->u.pool.out->conflict_pos = conflict;
        answer(e, c, st, "the prefix differs from pool %d's at position %d (before branch_pos %d)", parent,
               conflict, rq->branch_pos);
        return;
    }
    if (st != PK_OK) {
        const pool_node *par = pool_get(t, parent);
        if (par && rq->branch_pos > par->prefix_len)
            answer(e, c, st, "branch_pos %d is past pool %d's prefix length %d", rq->branch_pos, parent,
                   par->prefix_len);
        else answer(e, c, st, "the child's prefix (%d tokens) must extend past its branch position %d", n, d);
        return;
    }
    const pool_node *par = parent >= 0 ? pool_get(t, parent) : NULL;
    if (par && mem_resume_limited(e->mem) && d < par->prefix_len &&
        !(par->residency == POOL_RESIDENT && mem_can_resume(e->mem, par->seq, d))) {
        /* a recurrent state cannot be cut back, nor a freed window
         * brought back: the fork needs the parent's state at its branch
         * position */
        kv_pos at[MEM_MAX_RESUME];
        int n_at = par->residency == POOL_RESIDENT ? mem_resume_points(e->mem, par->seq, at) : 0;
        char list[96] = "";
        for (int i = 0, len = 0; i < n_at && len < (int)sizeof list - 12; i++)
            if (at[i] != par->prefix_len) len += snprintf(list + len, sizeof list - (size_t)len, ", %d", at[i]);
        answer(e, c, PK_ECONFLICT,
               "branch_pos %d: pool %d's %s can be continued only at position%s %d%s", d, parent,
               mem_hybrid(e->mem) ? "recurrent state (a hybrid model)" : "sliding-window layers (their cells freed)",
               n_at > 1 ? "s" : "", par->prefix_len, list);
        return;
    }
    kv_seq seq = eng_seq_take(e, ENG_SEQ_POOL);
    if (seq < 0) {
        answer(e, c, PK_EFULL, "all %d pool sequence ids are in use (--pools %d): release a pool first",
               e->p.n_pools, e->p.n_pools);
        return;
    }
    int32_t id;
    st = pool_add(t, parent, tok, n, rq->branch_pos, seq, eng_now_s(), &id);
    if (st != PK_OK) {
        eng_seq_give(e, seq);
        answer(e, c, st, "%s", st == PK_EFULL ? "the pool tree is full" : pk_status_str(st));
        return;
    }
    pmech *pm = &e->pools->m[seq];
    *pm = (pmech){ .id = id, .mat_pos = -1 };
    message_starts(e, tok, n, pm->checkpoints);
    pm->adm.policy = e->p.admission;          /* the server's, until the pool gets its own */
    pm->adm.policy.set = false;
    add_waiter(pm, c);
    mat_begin(e, pool_get(t, id), hint);
}

static bool decoding_on(const eng *e, int32_t id)
{
    for (int32_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].pool_id == id && e->slots[i].state != ENG_SLOT_IDLE) return true;
    return false;
}

static void op_release(eng *e, eng_call *c, const pool_node *p)
{
    pool_tree *t = e->pools->tree;
    int32_t ids[ENG_MAX_POOLS], n = 1;
    ids[0] = p->id;
    if (p->n_children > 0) {
        if (!c->u.pool.rq->recursive) {
            answer(e, c, PK_ECONFLICT, "pool %d has %d child pool%s: release them first, or use recursive=true",
                   p->id, p->n_children, p->n_children == 1 ? "" : "s");
            return;
        }
        n = pool_subtree(t, p->id, ids, ENG_MAX_POOLS);
    }
    for (int32_t k = 0; k < n; k++) {
        char msg[96];
        snprintf(msg, sizeof msg, "pool %d was released", ids[k]);
        eng_fail_waiting_pool(e, ids[k], PK_ENOTFOUND, msg);
        drop_pool(e, pool_get(t, ids[k]), PK_ENOTFOUND, msg);
    }
    c->u.pool.out->n_released = n;
    eng_persist_sync(e, NULL, 0);             /* a failed save is logged, tried again at the next sync */
    answer(e, c, PK_OK, NULL);
}

void eng_pool_msg(eng *e, eng_call *c)
{
    const eng_pool_req *rq = c->u.pool.rq;
    pool_tree *t = e->pools->tree;
    if (rq->verb == ENG_POOL_CREATE || rq->verb == ENG_POOL_FORK) {
        op_make(e, c);
        return;
    }
    const pool_node *p = pool_get(t, rq->pool_id);
    if (!p) {
        answer(e, c, PK_ENOTFOUND, "pool %d not found", rq->pool_id);
        return;
    }
    pmech *pm = mech(e, p);
    fill_reply(e, p, pm, c);
    switch (rq->verb) {
    case ENG_POOL_PIN:
    case ENG_POOL_UNPIN: {
        bool was = p->pinned;
        char why[200];
        pool_set_pinned(t, p->id, rq->verb == ENG_POOL_PIN);
        pool_touch(t, p->id, eng_now_s());
        /* An answered pin is on disk: one whose file could not be written
         * is undone (the second sync removes what it did save) and refused. */
        if (eng_persist_sync(e, why, sizeof why) != PK_OK && rq->verb == ENG_POOL_PIN && !was) {
            pool_set_pinned(t, p->id, false);
            eng_persist_sync(e, NULL, 0);
            answer(e, c, PK_EIO, "pool %d not pinned: %s", p->id, why);
            return;
        }
        answer(e, c, PK_OK, NULL);
        return;
    }
    case ENG_POOL_EVICT:
        if (p->residency == POOL_MATERIALIZING) {
            answer(e, c, PK_ECONFLICT, "pool %d is materializing", p->id);
        } else if (decoding_on(e, p->id)) {
            answer(e, c, PK_ECONFLICT, "sessions are decoding on pool %d", p->id);
        } else {
            for (int32_t i = 0; i < pool_count(t); i++) {
                const pool_node *q = pool_at(t, i);
                if (q->parent == p->id && q->residency == POOL_MATERIALIZING) {
                    answer(e, c, PK_ECONFLICT, "child pool %d of pool %d is materializing", q->id, p->id);
                    return;
                }
            }
            if (p->residency == POOL_RESIDENT) eng_pool_evict_seq(e, p->seq, "asked for");
            answer(e, c, PK_OK, NULL);
        }
        return;
    case ENG_POOL_FLUSH:
        if (p->residency == POOL_RESIDENT) {
            answer(e, c, PK_OK, NULL);
            return;
        }
        add_waiter(pm, c);
        if (p->residency == POOL_EVICTED) mat_begin(e, p, -1);
        return;
    case ENG_POOL_RELEASE:
        op_release(e, c, p);
        return;
    default:
        answer(e, c, PK_EINVAL, "unknown pool operation");
    }
}

struct pool_tree *eng_pool_tree(eng *e) { return e->pools->tree; }

pk_status eng_pool_adopt(eng *e, int32_t id, int32_t parent, int32_t D, const int32_t *tokens, int32_t n,
                         bool pinned, const uint8_t *rows, char *why, size_t cap)
{
    pool_tree *t = e->pools->tree;
    int32_t d, conflict, got;
    if (n >= e->n_ctx_slot) {
        snprintf(why, cap, "%d tokens; a slot holds %d", n, e->n_ctx_slot);
        return PK_EINVAL;
    }
    pk_status st = pool_plan(t, parent, tokens, n, D, &d, &conflict);
    if (st != PK_OK || d != D) {
        snprintf(why, cap, st == PK_ENOTFOUND ? "its parent pool %d was not restored"
                 : "its tokens do not extend parent pool %d's at branch_pos", parent);
        return st != PK_OK ? st : PK_EFORMAT;
    }
    if ((st = pool_set_next_id(t, id)) != PK_OK) {
        snprintf(why, cap, id > POOL_ID_MAX ? "pool id %d is past the largest, %d" : "pool id %d is already taken",
                 id, POOL_ID_MAX);
        return st;
    }
    kv_seq seq = eng_seq_take(e, ENG_SEQ_POOL);
    if (seq < 0) {
        snprintf(why, cap, "all %d pool sequence ids are in use (--pools)", e->p.n_pools);
        return PK_EFULL;
    }
    if ((st = pool_add(t, parent, tokens, n, D, seq, eng_now_s(), &got)) != PK_OK) {
        eng_seq_give(e, seq);
        snprintf(why, cap, "%s", st == PK_EFULL ? "the pool tree is full (--pools)" : pk_status_str(st));
        return st;
    }
    ASSERT(got == id);
    pmech *pm = &e->pools->m[seq];
    *pm = (pmech){ .id = id, .mat_pos = n, .was_resident = true };
    pm->adm.policy = e->p.admission;
    pm->adm.policy.set = false;
    if (parent >= 0 && mem_share(e->mem, pool_get(t, parent)->seq, seq, 0, D) != D) {
        snprintf(why, cap, "parent pool %d holds no recurrent state at branch_pos %d", parent, D);
        drop_pool(e, pool_get(t, id), PK_ECONFLICT, why);
        return PK_ECONFLICT;
    }
    if (!eng_make_room(e, n - D) || mem_copy_in(e->mem, seq, D, n, rows, D, n) != PK_OK) {
        snprintf(why, cap, "the KV cache has no room for its %d cells", n - D);
        drop_pool(e, pool_get(t, id), PK_EFULL, why);
        return PK_EFULL;
    }
    pool_set_pinned(t, id, pinned);
    pool_set_residency(t, id, POOL_RESIDENT);
    return PK_OK;
}

/* ---- attaching -------------------------------------------------------- */

int eng_pool_ready(eng *e, eng_task *t, int32_t *p_share)
{
    struct eng_pools *ps = e->pools;
    const pool_node *p = pool_get(ps->tree, t->req.pool_id);
    char msg[160];
    if (!p) {
        snprintf(msg, sizeof msg, "pool %d not found (released, or never created)", t->req.pool_id);
        eng_task_fail(t, PK_ENOTFOUND, msg);
        return -1;
    }
    if (p->residency == POOL_EVICTED) mat_begin(e, p, -1);   /* attach re-materializes */
    p = pool_get(ps->tree, t->req.pool_id);
    if (!p || p->residency != POOL_RESIDENT) return 0;
    int32_t n = t->req.n_prompt;
    pool_hash_chain(t->prompt, n, ps->ph);
    int32_t common = pool_match(p, t->prompt, n, ps->ph);
    int32_t share = common;
    if (t->req.shared_prefix_set) {
        if (t->req.shared_prefix_n < 0 || t->req.shared_prefix_n > common) {
            snprintf(msg, sizeof msg, "shared_prefix_n_tokens %d exceeds the %d tokens the prompt shares with "
                     "pool %d", t->req.shared_prefix_n, common, p->id);
            eng_task_fail(t, PK_EINVAL, msg);
            return -1;
        }
        share = t->req.shared_prefix_n;
    }
    *p_share = MIN(share, n - 1);            /* the last prompt token gives the logits */
    pool_touch(ps->tree, p->id, eng_now_s());  /* its grace holds through the placement */
    return 1;
}

void eng_pool_attach(eng *e, slot *s, eng_task *t, int32_t P)
{
    const pool_node *p = pool_get(e->pools->tree, t->req.pool_id);
    if (!p || p->residency != POOL_RESIDENT) return;   /* evicted by this very placement */
    pmech *pm = mech(e, p);
    pm->queries++;
    pm->hits += P > 0;
    if (s->n_hist < P) {
        mem_drop(e->mem, s->id);
        P = mem_share(e->mem, p->seq, s->id, 0, P);   /* a hybrid: to the pool's last state <= P */
        memcpy(s->hist, p->tokens, (size_t)P * sizeof *s->hist);
        s->n_hist = P;
    } else if (mem_common(e->mem, s->id, p->seq, 0, P) != P) {
        /* Another copy of the same tokens: swap it for the pool's cells
         * (equal tokens at equal positions, so the rest stays valid). */
        mem_drop_prefix(e->mem, s->id, P);
        mem_share(e->mem, p->seq, s->id, 0, P);
    }
    s->pool_id = p->id;
    s->pool_shared = P;
    pool_touch(e->pools->tree, p->id, eng_now_s());
}

void eng_pool_detach(eng *e, slot *s)
{
    if (s->pool_id > 0) pool_touch(e->pools->tree, s->pool_id, eng_now_s());
    s->pool_id = s->pool_shared = 0;
}

eng_scope *eng_pool_scope(eng *e, int32_t pool_id)
{
    if (pool_id <= 0) return &e->adm.server;
    const pool_node *p = pool_get(e->pools->tree, pool_id);
    return p ? &mech(e, p)->adm : NULL;
}

void eng_pool_each_scope(eng *e, void (*fn)(eng *e, int32_t pool_id, eng_scope *sc))
{
    pool_tree *t = e->pools->tree;
    for (int32_t i = 0; i < pool_count(t); i++) {
        const pool_node *p = pool_at(t, i);
        fn(e, p->id, &mech(e, p)->adm);
    }
}

int32_t eng_pool_scopes(eng *e, eng_pub_scope *out, int32_t cap)
{
    pool_tree *t = e->pools->tree;
    int32_t n = 0;
    for (int32_t i = 0; i < pool_count(t) && n < cap; i++) {
        const pool_node *p = pool_at(t, i);
        out[n++] = (eng_pub_scope){ .pool_id = p->id, .prefix_len = p->prefix_len, .sc = mech(e, p)->adm };
    }
    return n;
}

int32_t eng_pool_prefix_len(eng *e, int32_t pool_id)
{
    const pool_node *p = pool_get(e->pools->tree, pool_id);
    return p ? p->prefix_len : 0;
}

/* ---- the cache's view ------------------------------------------------- */

int32_t eng_pool_hists(eng *e, const int32_t *excl, pol_hist *h, int32_t *seq, int32_t cap)
{
    pool_tree *t = e->pools->tree;
    double now = eng_now_s();
    int32_t n = 0;
    for (int32_t i = 0; i < pool_count(t) && n < cap; i++) {
        const pool_node *p = pool_at(t, i);
        if (p->residency != POOL_RESIDENT) continue;
        h[n] = (pol_hist){ .seq = p->seq, .tokens = p->tokens, .n_tokens = p->prefix_len, .marker_pos = -1,
                           .last_use_s = MIN(p->last_access_s + grace_s(e), now), .valid = true,
                           .n_cells_excl = excl[p->seq], .is_pool = true,
                           .pinned = pool_kept(p, n_sessions(e, p->id), now, grace_s(e)) };
        seq[n++] = p->seq;
    }
    return n;
}

int32_t eng_pool_id_of(const eng *e, kv_seq seq)
{
    return e->pools->m[seq].id;
}

void eng_pool_evict_seq(eng *e, kv_seq seq, const char *why)
{
    const pool_node *p = pool_get(e->pools->tree, e->pools->m[seq].id);
    ASSERT(p && p->residency == POOL_RESIDENT);
    eng_cache_event ev = { .kind = ENG_CACHE_DROP, .slot = -1, .seq = seq, .n_tokens = p->prefix_len };
    snprintf(ev.reason, sizeof ev.reason, "pool %d evicted: %s", p->id, why);
    mem_drop(e->mem, seq);
    pool_set_residency(e->pools->tree, p->id, POOL_EVICTED);
    e->pools->m[seq].mat_pos = -1;
    eng_cache_event_add(e, &ev);
}

void eng_pool_evict_all(eng *e, const char *why)
{
    for (int32_t i = 0; i < pool_count(e->pools->tree); i++) {
        const pool_node *p = pool_at(e->pools->tree, i);
        if (p->residency == POOL_RESIDENT) eng_pool_evict_seq(e, p->seq, why);
    }
}

void eng_pool_stats(eng *e, eng_stats *o)
{
    pool_tree *t = e->pools->tree;
    int32_t np = MIN(pool_count(t), ENG_MAX_POOLS);
    int64_t own[ENG_MAX_POOLS], sub[ENG_MAX_POOLS];
    double now = eng_now_s(), wall_off = (double)pk_wall_ms() - pk_time_ms();
    for (int32_t i = 0; i < np; i++) {
        const pool_node *p = pool_at(t, i);
        const pmech *pm = mech(e, p);
        eng_pool_info *pi = &o->pools[i];
        int32_t ns = n_sessions(e, p->id);
        *pi = (eng_pool_info){ .pool_id = p->id, .parent = p->parent, .branch_pos = p->branch_pos,
                               .prefix_len = p->prefix_len, .residency = p->residency, .pinned = p->pinned,
                               .auto_pinned = pool_auto_pinned(p, ns), .orphaned_pin = pool_orphaned_pin(p, ns),
                               .kept = pool_kept(p, ns, now, grace_s(e)),
                               .last_access_ms = (int64_t)(p->last_access_s * 1000.0 + wall_off),
                               .own_cells = mem_seq_owned(e->mem, p->seq), .n_sessions = ns,
                               .own_state_bytes = mem_seq_state_bytes(e->mem, p->seq),
                               .n_children = p->n_children, .n_prefix_hits = pm->hits,
                               .n_queries = pm->queries };
        own[i] = pi->own_cells;
        eng_admit_stats(e, p->id, &pi->adm);
        for (int32_t k = 0; k < e->p.n_slots; k++) {
            const eng_slot_info *si = &o->slots[k];
            if (si->pool_id != p->id) continue;
            own[i] += si->kv_owned;
            if (si->state == ENG_SLOT_DECODE) pi->gen_tps += si->tps_ewma;
        }
    }
    o->n_pools = np;
    pool_rollup(t, own, sub);
    for (int32_t i = 0; i < np; i++) o->pools[i].subtree_cells = (int32_t)sub[i];
    o->pool_tree_depth = pool_depth(t);
}

bool eng_pool_check(const eng *e)
{
    const struct eng_pools *ps = e->pools;
    const pool_tree *t = ps->tree;
    if (!pool_tree_check(t)) return false;
    int32_t n_pool_ids = 0;
    for (int32_t s = 0; s < KV_MAX_SEQ; s++) n_pool_ids += e->seqs.kind[s] == ENG_SEQ_POOL;
    if (n_pool_ids != pool_count(t)) return false;
    for (int32_t i = 0; i < pool_count(t); i++) {
        const pool_node *p = pool_at(t, i);
        const pmech *pm = &ps->m[p->seq];
        int32_t cells = mem_seq_cells(e->mem, p->seq);
        if (e->seqs.kind[p->seq] != ENG_SEQ_POOL || pm->id != p->id || pm->mat_n != 0) return false;
        switch (p->residency) {
        case POOL_RESIDENT:
            if (!mem_holds(e->mem, p->seq, p->prefix_len)) return false;
            break;
        case POOL_EVICTED:
            if (cells != 0) return false;
            break;
        case POOL_MATERIALIZING:
            if (cells != MAX(pm->mat_pos, 0)) return false;
            break;
        }
    }
    return true;
}
