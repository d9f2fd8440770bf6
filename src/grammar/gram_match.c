/*
 * gram_match.c - running a compiled grammar: stacks, stack sets, the lazy
 * byte DFA, token masks, and the sorted vocabulary they walk.
 *
 *   nodes[id] = {pos, parent}      a stack, interned (node_ht)
 *   sets[id]  = sorted stack ids   interned (set_ht); -1 in a set = may end
 *   states[id] = {set, partial, next[256], mask}   interned (state_ht)
 *   masks: MASK_SLOTS bitsets, reused round-robin (a state loses its mask)
 *
 * Everything grows per request and is freed with the matcher; caps on
 * stacks and states turn a hostile grammar into PK_ENOMEM, never a crash.
 */
#include <stdlib.h>
#include <string.h>

#include "gram_impl.h"

#define MAX_NODES (1 << 22)
#define MAX_STATES (1 << 15)
#define MASK_SLOTS 64
#define MAX_EXPAND_DEPTH 20000
#define T_UNKNOWN (-2)
#define T_DEAD (-1)

struct gram_vocab {
    int32_t n_vocab, n_sorted, max_len;
    int32_t *order;            /* [n_sorted] token ids in byte order */
    int32_t *lcp;              /* [n_sorted] common prefix with the previous in order */
    char *bytes;
    int64_t *off;              /* [n_vocab + 1] */
    int32_t *eog;
    int32_t n_eog;
};

typedef struct gnode { int32_t pos, parent; } gnode;

typedef struct gstate {
    int32_t set;
    uint32_t partial;          /* (length << 28) | (remaining bytes << 24) | code point bits so far */
    int32_t *next;             /* [256] lazily: T_UNKNOWN, T_DEAD or a state */
    int32_t mask;              /* its slot, -1 none */
} gstate;

typedef struct htab { int32_t *v; uint32_t cap, n; } htab;   /* ids + 1, 0 empty */

struct gram_matcher {
    gram_grammar *g;
    const gram_vocab *voc;
    gnode *nodes;
    int32_t n_nodes, cap_nodes;
    htab node_ht;
    int32_t *pool;             /* set members, end to end */
    int64_t n_pool, cap_pool;
    int64_t *set_off;          /* [n_sets + 1] */
    int32_t n_sets, cap_sets;
    htab set_ht;
    gstate *st;
    int32_t n_st, cap_st;
    htab st_ht;
    int32_t cur;
    int32_t *tmp;              /* scratch set being built */
    int32_t n_tmp, cap_tmp;
    uint64_t *masks;           /* [MASK_SLOTS][words] */
    int32_t mask_owner[MASK_SLOTS];
    int32_t mask_clock, words;
    int32_t *depth_st;         /* [max_len + 1] */
    bool oom;
    int32_t depth;             /* expand's recursion */
    uint32_t *seen;            /* [cap_nodes] epoch a stack was last closed in */
    uint32_t epoch;
    gram_stats stats;
};

/* ---- hashing ---- */

static uint32_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return (uint32_t)h;
}

static bool ht_grow(htab *t)
{
    if ((t->n + 1) * 2 <= t->cap) return true;
    uint32_t cap = t->cap ? t->cap * 2 : 1024;
    int32_t *v = calloc(cap, sizeof *v);
    if (!v) return false;
    t->v = v;                  /* the caller reinserts the old ids: it knows their keys */
    t->cap = cap;
    return true;
}

static uint32_t node_hash(gnode n) { return mix(((uint64_t)(uint32_t)n.pos << 32) | (uint32_t)n.parent); }

static uint32_t set_hash(const int32_t *s, int32_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 0x100000001b3ULL;
    return mix(h);
}

static uint32_t st_hash(int32_t set, uint32_t partial) { return mix(((uint64_t)(uint32_t)set << 32) | partial); }

/* Grows a table and reinserts its ids with hash(id). */
static bool ht_rehash(gram_matcher *m, htab *t, uint32_t (*hash_of)(const gram_matcher *, int32_t))
{
    int32_t *old = t->v;
    uint32_t ocap = t->cap;
    if (!ht_grow(t)) return false;
    if (t->v == old) return true;
    for (uint32_t i = 0; i < ocap; i++) {
        if (!old[i]) continue;
        uint32_t h = hash_of(m, old[i] - 1) & (t->cap - 1);
        while (t->v[h]) h = (h + 1) & (t->cap - 1);
        t->v[h] = old[i];
    }
    free(old);
    return true;
}

static uint32_t node_hash_id(const gram_matcher *m, int32_t id) { return node_hash(m->nodes[id]); }
static uint32_t set_hash_id(const gram_matcher *m, int32_t id)
{
    return set_hash(m->pool + m->set_off[id], (int32_t)(m->set_off[id + 1] - m->set_off[id]));
}
static uint32_t st_hash_id(const gram_matcher *m, int32_t id) { return st_hash(m->st[id].set, m->st[id].partial); }

/* ---- stacks ---- */

static int32_t intern_node(gram_matcher *m, int32_t pos, int32_t parent)
{
    if (m->oom) return -1;
    gnode n = { pos, parent };
    if (!ht_rehash(m, &m->node_ht, node_hash_id)) { m->oom = true; return -1; }
    uint32_t h = node_hash(n) & (m->node_ht.cap - 1);
    for (; m->node_ht.v[h]; h = (h + 1) & (m->node_ht.cap - 1)) {
        gnode *o = &m->nodes[m->node_ht.v[h] - 1];
        if (o->pos == pos && o->parent == parent) return m->node_ht.v[h] - 1;
    }
    if (m->n_nodes == m->cap_nodes) {
        int32_t cap = m->cap_nodes ? m->cap_nodes * 2 : 1024;
        gnode *nn = cap <= MAX_NODES ? realloc(m->nodes, (size_t)cap * sizeof *nn) : NULL;
        if (!nn) { m->oom = true; return -1; }
        m->nodes = nn;
        uint32_t *ns = realloc(m->seen, (size_t)cap * sizeof *ns);
        if (!ns) { m->oom = true; return -1; }
        memset(ns + m->cap_nodes, 0, (size_t)(cap - m->cap_nodes) * sizeof *ns);
        m->seen = ns;
        m->cap_nodes = cap;
    }
    m->nodes[m->n_nodes] = n;
    m->node_ht.v[h] = m->n_nodes + 1;
    m->node_ht.n++;
    return m->n_nodes++;
}

static void tmp_push(gram_matcher *m, int32_t id)
{
    if (m->n_tmp == m->cap_tmp) {
        int32_t cap = m->cap_tmp ? m->cap_tmp * 2 : 64;
        int32_t *t = realloc(m->tmp, (size_t)cap * sizeof *t);
        if (!t) { m->oom = true; return; }
        m->tmp = t;
        m->cap_tmp = cap;
    }
    m->tmp[m->n_tmp++] = id;
}

static void expand_one(gram_matcher *m, int32_t id);

/* Closes stack id into m->tmp: calls are entered, ENDs return, until each
 * top is a character class (or the stack is empty: -1, may end). */
static void expand(gram_matcher *m, int32_t id)
{
    if (m->oom) return;
    /* Chains of calls and returns nest the C stack: a grammar that needs
     * more than this is refused as too costly (PK_ENOMEM), not a crash. */
    if (m->depth > MAX_EXPAND_DEPTH) { m->oom = true; return; }
    /* A stack closed once in this closure adds nothing the second time;
     * without this, nullable repetitions branch exponentially. */
    if (id >= 0) {
        if (m->seen[id] == m->epoch) return;
        m->seen[id] = m->epoch;
    }
    m->depth++;
    expand_one(m, id);
    m->depth--;
}

static void expand_one(gram_matcher *m, int32_t id)
{
    if (id < 0) { tmp_push(m, -1); return; }
    gnode n = m->nodes[id];
    const gram_grammar *g = m->g;
    int32_t c = g->code[n.pos];
    if (c == GRAM_END) { expand(m, n.parent); return; }
    if (c >= 0) { tmp_push(m, id); return; }
    int32_t r = GRAM_REF_RULE(c);
    /* A call just before END is a tail call: returning lands on the parent. */
    int32_t cont = g->code[n.pos + 1] == GRAM_END ? n.parent : intern_node(m, n.pos + 1, n.parent);
    for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !m->oom; a++)
        expand(m, intern_node(m, g->alt[a], cont));
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Interns m->tmp as a set (sorted, unique); -1 for the empty set. */
static int32_t intern_set(gram_matcher *m)
{
    if (m->oom || m->n_tmp == 0) return -1;
    qsort(m->tmp, (size_t)m->n_tmp, sizeof *m->tmp, cmp_i32);
    int32_t w = 1;
    for (int32_t i = 1; i < m->n_tmp; i++)
        if (m->tmp[i] != m->tmp[w - 1]) m->tmp[w++] = m->tmp[i];
    m->n_tmp = w;
    if (!ht_rehash(m, &m->set_ht, set_hash_id)) { m->oom = true; return -1; }
    uint32_t h = set_hash(m->tmp, w) & (m->set_ht.cap - 1);
    for (; m->set_ht.v[h]; h = (h + 1) & (m->set_ht.cap - 1)) {
        int32_t id = m->set_ht.v[h] - 1;
        int64_t o = m->set_off[id], n = m->set_off[id + 1] - o;
        if (n == w && !memcmp(m->pool + o, m->tmp, (size_t)w * sizeof *m->tmp)) return id;
    }
    if (m->n_sets + 1 >= m->cap_sets) {
        int32_t cap = m->cap_sets ? m->cap_sets * 2 : 256;
        int64_t *so = realloc(m->set_off, (size_t)(cap + 1) * sizeof *so);
        if (!so) { m->oom = true; return -1; }
        m->set_off = so;
        m->cap_sets = cap;
    }
    if (m->n_pool + w > m->cap_pool) {
        int64_t cap = MAX(m->cap_pool * 2, m->n_pool + w + 1024);
        int32_t *np = cap <= MAX_NODES * 4LL ? realloc(m->pool, (size_t)cap * sizeof *np) : NULL;
        if (!np) { m->oom = true; return -1; }
        m->pool = np;
        m->cap_pool = cap;
    }
    memcpy(m->pool + m->n_pool, m->tmp, (size_t)w * sizeof *m->tmp);
    int32_t id = m->n_sets++;
    m->set_off[id] = m->n_pool;
    m->n_pool += w;
    m->set_off[id + 1] = m->n_pool;
    m->set_ht.v[h] = id + 1;
    m->set_ht.n++;
    return id;
}

static int32_t intern_state(gram_matcher *m, int32_t set, uint32_t partial)
{
    if (m->oom) return T_DEAD;
    if (!ht_rehash(m, &m->st_ht, st_hash_id)) { m->oom = true; return T_DEAD; }
    uint32_t h = st_hash(set, partial) & (m->st_ht.cap - 1);
    for (; m->st_ht.v[h]; h = (h + 1) & (m->st_ht.cap - 1)) {
        gstate *o = &m->st[m->st_ht.v[h] - 1];
        if (o->set == set && o->partial == partial) return m->st_ht.v[h] - 1;
    }
    if (m->n_st == m->cap_st) {
        int32_t cap = m->cap_st ? m->cap_st * 2 : 64;
        gstate *ns = cap <= MAX_STATES ? realloc(m->st, (size_t)cap * sizeof *ns) : NULL;
        if (!ns) { m->oom = true; return T_DEAD; }
        m->st = ns;
        m->cap_st = cap;
    }
    m->st[m->n_st] = (gstate){ .set = set, .partial = partial, .next = NULL, .mask = -1 };
    m->st_ht.v[h] = m->n_st + 1;
    m->st_ht.n++;
    m->stats.n_states++;
    return m->n_st++;
}

/* ---- transitions ---- */

/* The state after byte b from state s (T_DEAD when nothing matches). */
static int32_t step_slow(gram_matcher *m, int32_t s, uint8_t b)
{
    uint32_t partial = m->st[s].partial;
    uint32_t len = partial >> 28, rem = (partial >> 24) & 3, v = partial & 0xFFFFFF;
    bool complete = false;
    if (rem == 0) {
        if (b < 0x80) { v = b; complete = true; len = 1; }
        else if (b >= 0xC2 && b <= 0xDF) { v = b & 0x1F; rem = 1; len = 2; }
        else if (b >= 0xE0 && b <= 0xEF) { v = b & 0x0F; rem = 2; len = 3; }
        else if (b >= 0xF0 && b <= 0xF4) { v = b & 0x07; rem = 3; len = 4; }
        else return T_DEAD;
    } else {
        if ((b & 0xC0) != 0x80) return T_DEAD;
        v = (v << 6) | (b & 0x3F);
        if (--rem == 0) complete = true;
    }
    /* The code points this prefix can still become, without overlong
     * forms (an overlong '"' would slip past a string's end) or surrogates. */
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < least[len]) lo = least[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return T_DEAD;
    int32_t set = m->st[s].set;
    const int32_t *mem = m->pool + m->set_off[set];
    int32_t n = (int32_t)(m->set_off[set + 1] - m->set_off[set]);
    m->n_tmp = 0;
    m->epoch++;
    for (int32_t i = 0; i < n && !m->oom; i++) {
        int32_t id = mem[i];
        if (id < 0) continue;
        gnode nd = m->nodes[id];
        int32_t c = m->g->code[nd.pos];
        if (complete) {
            if (gram_cset_has(m->g, c, v)) expand(m, intern_node(m, nd.pos + 1, nd.parent));
        } else if (gram_cset_meets(m->g, c, lo, hi)) {
            tmp_push(m, id);                      /* still possible; decided at the last byte */
        }
        mem = m->pool + m->set_off[set];          /* the pool may have moved */
    }
    int32_t ns = intern_set(m);
    if (ns < 0) return T_DEAD;
    return intern_state(m, ns, complete ? 0 : (len << 28) | (rem << 24) | v);
}

static inline int32_t step(gram_matcher *m, int32_t s, uint8_t b)
{
    gstate *st = &m->st[s];
    if (!st->next) {
        st->next = malloc(256 * sizeof *st->next);
        if (!st->next) { m->oom = true; return T_DEAD; }
        for (int i = 0; i < 256; i++) st->next[i] = T_UNKNOWN;
    }
    int32_t t = st->next[b];
    if (t != T_UNKNOWN) return t;
    t = step_slow(m, s, b);
    if (m->oom) return T_DEAD;                    /* not cached: the state is unusable anyway */
    m->st[s].next[b] = t;
    return t;
}

static bool state_can_end(const gram_matcher *m, int32_t s)
{
    const gstate *st = &m->st[s];
    if (st->partial) return false;
    int64_t o = m->set_off[st->set];
    return m->pool[o] == -1;                      /* sorted: -1 comes first */
}

/* ---- the public matcher ---- */

pk_status gram_matcher_new(gram_grammar *g, const gram_vocab *v, gram_matcher **out)
{
    *out = NULL;
    gram_matcher *m = calloc(1, sizeof *m);
    if (!m) return PK_ENOMEM;
    m->g = gram_ref(g);
    m->voc = v;
    for (int i = 0; i < MASK_SLOTS; i++) m->mask_owner[i] = -1;
    m->epoch = 1;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        expand(m, intern_node(m, g->alt[a], -1));
    int32_t set = intern_set(m);
    m->cur = set >= 0 ? intern_state(m, set, 0) : T_DEAD;
    if (v) {
        m->words = (v->n_vocab + 63) / 64;
        m->masks = malloc((size_t)MASK_SLOTS * (size_t)m->words * sizeof *m->masks);
        m->depth_st = malloc((size_t)(v->max_len + 1) * sizeof *m->depth_st);
        if (!m->masks || !m->depth_st) m->oom = true;
    }
    if (m->oom || m->cur < 0) {
        gram_matcher_free(m);
        return PK_ENOMEM;
    }
    *out = m;
    return PK_OK;
}

void gram_matcher_free(gram_matcher *m)
{
    if (!m) return;
    for (int32_t i = 0; i < m->n_st; i++) free(m->st[i].next);
    free(m->st);
    free(m->st_ht.v);
    free(m->nodes);
    free(m->seen);
    free(m->node_ht.v);
    free(m->pool);
    free(m->set_off);
    free(m->set_ht.v);
    free(m->tmp);
    free(m->masks);
    free(m->depth_st);
    gram_free(m->g);
    free(m);
}

static void build_mask(gram_matcher *m, int32_t s, uint64_t *w)
{
    const gram_vocab *v = m->voc;
    memset(w, 0, (size_t)m->words * sizeof *w);
    if (state_can_end(m, s))
        for (int32_t i = 0; i < v->n_eog; i++) w[v->eog[i] / 64] |= 1ULL << (v->eog[i] % 64);
    int32_t *ds = m->depth_st;
    ds[0] = s;
    int32_t have = 0;          /* ds[0..have] hold the states of the current prefix */
    int32_t dead_at = -1;      /* the previous token's prefix of this length is dead */
    for (int32_t k = 0; k < v->n_sorted && !m->oom; k++) {
        int32_t l = v->lcp[k];
        if (dead_at >= 0 && l >= dead_at) continue;   /* under a dead prefix */
        dead_at = -1;
        if (have > l) have = l;
        int32_t id = v->order[k];
        const uint8_t *b = (const uint8_t *)v->bytes + v->off[id];
        int32_t n = (int32_t)(v->off[id + 1] - v->off[id]);
        int32_t j = have, cur = ds[j];
        while (j < n) {
            cur = step(m, cur, b[j]);
            j++;
            if (cur < 0) break;
            ds[j] = cur;
        }
        if (cur < 0) { dead_at = j; have = j - 1; continue; }
        have = n;
        w[id / 64] |= 1ULL << (id % 64);
    }
}

const uint64_t *gram_matcher_mask(gram_matcher *m)
{
    if (!m->voc || m->oom) return NULL;
    gstate *st = &m->st[m->cur];
    if (st->mask >= 0) {
        m->stats.n_mask_cached++;
        return m->masks + (size_t)st->mask * (size_t)m->words;
    }
    int32_t slot = m->mask_clock;
    m->mask_clock = (m->mask_clock + 1) % MASK_SLOTS;
    if (m->mask_owner[slot] >= 0) m->st[m->mask_owner[slot]].mask = -1;
    m->mask_owner[slot] = -1;
    uint64_t *w = m->masks + (size_t)slot * (size_t)m->words;
    build_mask(m, m->cur, w);
    if (m->oom) return NULL;
    m->st[m->cur].mask = slot;                    /* m->st may have moved: index again */
    m->mask_owner[slot] = m->cur;
    m->stats.n_mask_built++;
    return w;
}

static bool is_eog(const gram_vocab *v, int32_t token)
{
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == token) return true;
    return false;
}

pk_status gram_matcher_accept_bytes(gram_matcher *m, const char *s, size_t n)
{
    if (m->oom) return PK_ENOMEM;
    int32_t cur = m->cur;
    for (size_t i = 0; i < n; i++) {
        cur = step(m, cur, (uint8_t)s[i]);
        if (m->oom) return PK_ENOMEM;
        if (cur < 0) return PK_EINVAL;
    }
    m->cur = cur;
    return PK_OK;
}

pk_status gram_matcher_accept(gram_matcher *m, int32_t token)
{
    const gram_vocab *v = m->voc;
    if (!v || token < 0 || token >= v->n_vocab) return PK_EINVAL;
    if (is_eog(v, token)) return state_can_end(m, m->cur) ? PK_OK : PK_EINVAL;
    int64_t n = v->off[token + 1] - v->off[token];
    if (n == 0) return PK_EINVAL;
    return gram_matcher_accept_bytes(m, v->bytes + v->off[token], (size_t)n);
}

bool gram_matcher_can_end(const gram_matcher *m) { return state_can_end(m, m->cur); }

int32_t gram_matcher_state(const gram_matcher *m) { return m->cur; }

void gram_matcher_set_state(gram_matcher *m, int32_t state)
{
    ASSERT(state >= 0 && state < m->n_st);
    m->cur = state;
}

bool gram_matcher_reset(gram_matcher *m)
{
    m->cur = 0;                /* the start state was interned first */
    return !m->oom;
}

const gram_grammar *gram_matcher_grammar(const gram_matcher *m) { return m->g; }

bool gram_matcher_done(const gram_matcher *m)
{
    const gstate *st = &m->st[m->cur];
    return !st->partial && m->set_off[st->set + 1] - m->set_off[st->set] == 1 &&
           m->pool[m->set_off[st->set]] == -1;
}

gram_stats gram_matcher_stats(const gram_matcher *m)
{
    gram_stats s = m->stats;
    s.n_stacks = m->n_nodes;
    return s;
}

bool gram_accepts(gram_grammar *g, const char *s, size_t n)
{
    gram_matcher *m;
    if (gram_matcher_new(g, NULL, &m)) return false;
    bool ok = gram_matcher_accept_bytes(m, s, n) == PK_OK && gram_matcher_can_end(m);
    gram_matcher_free(m);
    return ok;
}

/* ---- vocabulary ---- */

typedef struct sort_ctx { const char *bytes; const int64_t *off; } sort_ctx;

static int cmp_tok(const void *a, const void *b, void *arg)
{
    const sort_ctx *c = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t nx = c->off[x + 1] - c->off[x], ny = c->off[y + 1] - c->off[y];
    int r = memcmp(c->bytes + c->off[x], c->bytes + c->off[y], (size_t)MIN(nx, ny));
    if (r) return r;
    return nx < ny ? -1 : nx > ny ? 1 : (x < y ? -1 : x > y);
}

pk_status gram_vocab_new(int32_t n_vocab, const char *bytes, const int64_t *off, const bool *is_eog_tok,
                         gram_vocab **out)
{
    *out = NULL;
    if (n_vocab <= 0 || !off) return PK_EINVAL;
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v) return PK_ENOMEM;
    v->n_vocab = n_vocab;
    int64_t total = off[n_vocab] - off[0];
    v->bytes = malloc((size_t)MAX(total, 1));
    v->off = malloc((size_t)(n_vocab + 1) * sizeof *v->off);
    v->order = malloc((size_t)n_vocab * sizeof *v->order);
    v->lcp = malloc((size_t)n_vocab * sizeof *v->lcp);
    v->eog = malloc((size_t)n_vocab * sizeof *v->eog);
    if (!v->bytes || !v->off || !v->order || !v->lcp || !v->eog) {
        gram_vocab_free(v);
        return PK_ENOMEM;
    }
    if (total) memcpy(v->bytes, bytes + off[0], (size_t)total);
    for (int32_t i = 0; i <= n_vocab; i++) v->off[i] = off[i] - off[0];
    for (int32_t i = 0; i < n_vocab; i++) {
        int64_t n = v->off[i + 1] - v->off[i];
        if (is_eog_tok && is_eog_tok[i]) v->eog[v->n_eog++] = i;
        else if (n > 0) {
            v->order[v->n_sorted++] = i;
            if (n > v->max_len) v->max_len = (int32_t)n;
        }
    }
    sort_ctx c = { v->bytes, v->off };
    qsort_r(v->order, (size_t)v->n_sorted, sizeof *v->order, cmp_tok, &c);
    for (int32_t k = 0; k < v->n_sorted; k++) {
        int32_t l = 0;
        if (k > 0) {
            int32_t a = v->order[k - 1], b = v->order[k];
            int64_t na = v->off[a + 1] - v->off[a], nb = v->off[b + 1] - v->off[b];
            while (l < na && l < nb && v->bytes[v->off[a] + l] == v->bytes[v->off[b] + l]) l++;
        }
        v->lcp[k] = l;
    }
    *out = v;
    return PK_OK;
}

void gram_vocab_free(gram_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->order);
    free(v->lcp);
    free(v->eog);
    free(v);
}
