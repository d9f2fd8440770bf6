/*
 * kvev.c - the block tracker of kvev.h: holders' chained block hashes, one
 * table of blocks counted per medium, and the net change as events.
 *
 *   table : open addressing, linear probing, power-of-two capacity, load
 *           at most 1/2; deletion shifts the run back (no tombstones), and
 *           happens only in kvev_flush, so an entry found by kvev_hold
 *           stays where it is until then.
 *   tok   : [cap][block_size] the tokens of entry i, moved with it.
 *   touched : hashes whose counts changed since the last flush, in the
 *           order they first changed (a holder's new blocks parent first,
 *           which keeps stored runs whole).
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvev.h"
#include "../common/buf.h"

typedef struct entry {
    uint64_t hash;              /* 0: empty */
    uint64_t parent;
    int32_t count[KVEV_N_MEDIUM];
    int32_t check[KVEV_N_MEDIUM];   /* kvev_check's recount */
    uint8_t was;                /* media it was in at the last flush (bit m) */
    bool touched;
} entry;

typedef struct holder {
    uint64_t *hash;             /* [nb] its blocks' hashes */
    int32_t nb;
    size_t cap;
    kvev_medium medium;
} holder;

struct kvev_tracker {
    int32_t bs;                 /* tokens per block */
    uint64_t seed;
    holder *holders;            /* [n_holders] */
    int32_t n_holders;
    entry *tab;                 /* [cap] */
    int32_t *tok;               /* [cap][bs] */
    size_t cap, n_used;
    uint64_t *touched;          /* [cap] */
    size_t n_touched;
    bool resync;                /* new, or a flush failed: a clear first, then every block as stored */
    uint8_t *scratch;           /* [8 + 4 bs] a block's hash input */
    /* the last flush's list */
    kvev_event *ev;
    size_t n_ev, cap_ev;
    uint64_t *ev_hash;
    size_t n_ev_hash, cap_ev_hash;
    int32_t *ev_tok;
    size_t n_ev_tok, cap_ev_tok;
};

const char *kvev_medium_name(kvev_medium m)
{
    return m == KVEV_CPU ? "CPU" : "GPU";
}

pk_status kvev_new(int32_t block_size, int32_t n_holders, uint64_t seed, kvev_tracker **out)
{
    *out = NULL;
    if (block_size < 1 || block_size > 1024 || n_holders < 1) return PK_EINVAL;
    kvev_tracker *t = calloc(1, sizeof *t);
    if (!t) return PK_ENOMEM;
    t->bs = block_size;
    t->seed = seed;
    t->n_holders = n_holders;
    t->resync = true;           /* subscribers forget what an earlier process sent */
    t->cap = 1024;
    t->holders = calloc((size_t)n_holders, sizeof *t->holders);
    t->tab = calloc(t->cap, sizeof *t->tab);
    t->tok = malloc(t->cap * (size_t)block_size * sizeof *t->tok);
    t->touched = malloc(t->cap * sizeof *t->touched);
    t->scratch = malloc(8 + 4 * (size_t)block_size);
    if (!t->holders || !t->tab || !t->tok || !t->touched || !t->scratch) {
        kvev_free(t);
        return PK_ENOMEM;
    }
    *out = t;
    return PK_OK;
}

void kvev_free(kvev_tracker *t)
{
    if (!t) return;
    if (t->holders)
        for (int32_t h = 0; h < t->n_holders; h++) free(t->holders[h].hash);
    free(t->holders);
    free(t->tab);
    free(t->tok);
    free(t->touched);
    free(t->scratch);
    free(t->ev);
    free(t->ev_hash);
    free(t->ev_tok);
    free(t);
}

int32_t kvev_block_size(const kvev_tracker *t)
{
    return t->bs;
}

uint64_t kvev_hash(const kvev_tracker *t, uint64_t parent, const int32_t *tokens)
{
    /* x86-64 only: the bytes in memory are the little-endian encoding. */
    memcpy(t->scratch, &parent, 8);
    memcpy(t->scratch + 8, tokens, 4 * (size_t)t->bs);
    uint64_t h = XXH3_64bits_withSeed(t->scratch, 8 + 4 * (size_t)t->bs, t->seed);
    return h ? h : 1;
}

/* ---- the table ---- */

static size_t home(const kvev_tracker *t, uint64_t hash)
{
    /* The chained hash is already uniform; fold the high half in anyway. */
    return (size_t)(hash ^ (hash >> 32)) & (t->cap - 1);
}

static entry *find(const kvev_tracker *t, uint64_t hash)
{
    for (size_t i = home(t, hash);; i = (i + 1) & (t->cap - 1)) {
        if (t->tab[i].hash == hash) return &t->tab[i];
        if (!t->tab[i].hash) return NULL;
    }
}

static int32_t *tokens_of(const kvev_tracker *t, const entry *e)
{
    return t->tok + (size_t)(e - t->tab) * (size_t)t->bs;
}

/* Makes room for `more` new entries at load 1/2. */
static pk_status reserve(kvev_tracker *t, size_t more)
{
    if ((t->n_used + more) * 2 <= t->cap) return PK_OK;
    size_t cap = t->cap;
    while ((t->n_used + more) * 2 > cap) cap *= 2;
    entry *tab = calloc(cap, sizeof *tab);
    int32_t *tok = malloc(cap * (size_t)t->bs * sizeof *tok);
    /* An entry is touched at most once between flushes: a touched list as
     * long as the table never fills. */
    uint64_t *touched = tab && tok ? realloc(t->touched, cap * sizeof *touched) : NULL;
    if (touched) t->touched = touched;
    if (!tab || !tok || !touched) {
        free(tab);
        free(tok);
        return PK_ENOMEM;
    }
    entry *old = t->tab;
    int32_t *old_tok = t->tok;
    size_t old_cap = t->cap;
    t->tab = tab;
    t->tok = tok;
    t->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].hash) continue;
        size_t j = home(t, old[i].hash);
        while (tab[j].hash) j = (j + 1) & (cap - 1);
        tab[j] = old[i];
        memcpy(tok + j * (size_t)t->bs, old_tok + i * (size_t)t->bs, (size_t)t->bs * sizeof *tok);
    }
    free(old);
    free(old_tok);
    return PK_OK;
}

static entry *insert(kvev_tracker *t, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    size_t i = home(t, hash);
    while (t->tab[i].hash) {
        if (t->tab[i].hash == hash) return &t->tab[i];
        i = (i + 1) & (t->cap - 1);
    }
    t->tab[i] = (entry){ .hash = hash, .parent = parent };
    memcpy(t->tok + i * (size_t)t->bs, tokens, (size_t)t->bs * sizeof *t->tok);
    t->n_used++;
    return &t->tab[i];
}

/* Removes e, shifting back the entries after it that would no longer be
 * found past the hole. */
static void erase(kvev_tracker *t, entry *e)
{
    size_t mask = t->cap - 1, i = (size_t)(e - t->tab);
    for (size_t j = (i + 1) & mask; t->tab[j].hash; j = (j + 1) & mask) {
        size_t k = home(t, t->tab[j].hash);
        /* j's entry may fill the hole at i when its home is not in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        t->tab[i] = t->tab[j];
        memcpy(t->tok + i * (size_t)t->bs, t->tok + j * (size_t)t->bs, (size_t)t->bs * sizeof *t->tok);
        i = j;
    }
    t->tab[i] = (entry){ 0 };
    t->n_used--;
}

static void touch(kvev_tracker *t, entry *e)
{
    if (e->touched) return;
    e->touched = true;
    t->touched[t->n_touched++] = e->hash;   /* room made by the caller */
}

/* ---- holders ---- */

pk_status kvev_hold(kvev_tracker *t, int32_t h, kvev_medium m, const int32_t *tokens, int32_t n, int32_t same)
{
    ASSERT(h >= 0 && h < t->n_holders && n >= 0 && (int)m >= 0 && m < KVEV_N_MEDIUM);
    holder *H = &t->holders[h];
    int32_t nb = n / t->bs;
    int32_t keep = H->medium == m || H->nb == 0 ? MIN(MIN(H->nb, MAX(same, 0) / t->bs), nb) : 0;
    if (keep == H->nb && keep == nb) return PK_OK;

    /* Room first, so a failure changes nothing. */
    size_t more = (size_t)(nb - keep);
    if (pk_grow((void **)&H->hash, &H->cap, (size_t)nb, sizeof *H->hash) != PK_OK || reserve(t, more) != PK_OK)
        return PK_ENOMEM;

    for (int32_t i = keep; i < H->nb; i++) {
        entry *e = find(t, H->hash[i]);
        ASSERT(e && e->count[H->medium] > 0);
        e->count[H->medium]--;
        touch(t, e);
    }
    for (int32_t i = keep; i < nb; i++) {
        uint64_t parent = i ? H->hash[i - 1] : 0;
        const int32_t *bt = tokens + (size_t)i * (size_t)t->bs;
        H->hash[i] = kvev_hash(t, parent, bt);
        entry *e = insert(t, H->hash[i], parent, bt);
        e->count[m]++;
        touch(t, e);
    }
    H->nb = nb;
    H->medium = m;
    return PK_OK;
}

void kvev_release(kvev_tracker *t, int32_t h)
{
    ASSERT(h >= 0 && h < t->n_holders);
    holder *H = &t->holders[h];
    for (int32_t i = 0; i < H->nb; i++) {
        entry *e = find(t, H->hash[i]);
        ASSERT(e && e->count[H->medium] > 0);
        e->count[H->medium]--;
        touch(t, e);
    }
    H->nb = 0;
}

void kvev_clear(kvev_tracker *t)
{
    for (int32_t h = 0; h < t->n_holders; h++) kvev_release(t, h);
}

int32_t kvev_holder_blocks(const kvev_tracker *t, int32_t h)
{
    ASSERT(h >= 0 && h < t->n_holders);
    return t->holders[h].nb;
}

/* ---- events ---- */

static kvev_event *add_event(kvev_tracker *t, kvev_kind kind, kvev_medium m)
{
    if (pk_grow((void **)&t->ev, &t->cap_ev, t->n_ev + 1, sizeof *t->ev) != PK_OK) return NULL;
    kvev_event *ev = &t->ev[t->n_ev++];
    *ev = (kvev_event){ .kind = kind, .medium = m, .h0 = (int32_t)t->n_ev_hash, .t0 = (int32_t)t->n_ev_tok };
    return ev;
}

static bool add_hash(kvev_tracker *t, kvev_event *ev, uint64_t hash)
{
    if (pk_grow((void **)&t->ev_hash, &t->cap_ev_hash, t->n_ev_hash + 1, sizeof *t->ev_hash) != PK_OK)
        return false;
    t->ev_hash[t->n_ev_hash++] = hash;
    ev->n_hash++;
    return true;
}

static bool add_tokens(kvev_tracker *t, kvev_event *ev, const int32_t *tok)
{
    if (pk_grow((void **)&t->ev_tok, &t->cap_ev_tok, t->n_ev_tok + (size_t)t->bs, sizeof *t->ev_tok) != PK_OK)
        return false;
    memcpy(t->ev_tok + t->n_ev_tok, tok, (size_t)t->bs * sizeof *tok);
    t->n_ev_tok += (size_t)t->bs;
    ev->n_tok += t->bs;
    return true;
}

static uint8_t media_of(const entry *e)
{
    uint8_t b = 0;
    for (int m = 0; m < KVEV_N_MEDIUM; m++)
        if (e->count[m] > 0) b |= (uint8_t)(1u << m);
    return b;
}

/* The stored runs, then per medium one removal list. */
static bool build(kvev_tracker *t)
{
    kvev_event *run = NULL;     /* the stored event the next block may extend */
    if (t->resync && !add_event(t, KVEV_CLEARED, KVEV_GPU)) return false;
    for (size_t i = 0; i < t->n_touched; i++) {
        const entry *e = find(t, t->touched[i]);
        uint8_t now = media_of(e);
        for (int m = 0; m < KVEV_N_MEDIUM; m++) {
            if (!(now >> m & 1) || (e->was >> m & 1)) continue;
            bool extends = run && run == &t->ev[t->n_ev - 1] && run->medium == (kvev_medium)m &&
                           t->ev_hash[run->h0 + run->n_hash - 1] == e->parent;
            if (!extends) {
                run = add_event(t, KVEV_STORED, (kvev_medium)m);
                if (!run) return false;
                run->has_parent = e->parent != 0;
                run->parent = e->parent;
            }
            if (!add_hash(t, run, e->hash) || !add_tokens(t, run, tokens_of(t, e))) return false;
        }
    }
    for (int m = 0; m < KVEV_N_MEDIUM; m++) {
        kvev_event *rm = NULL;
        for (size_t i = 0; i < t->n_touched; i++) {
            const entry *e = find(t, t->touched[i]);
            if (!(e->was >> m & 1) || (media_of(e) >> m & 1)) continue;
            if (!rm && !(rm = add_event(t, KVEV_REMOVED, (kvev_medium)m))) return false;
            if (!add_hash(t, rm, e->hash)) return false;
        }
    }
    return true;
}

pk_status kvev_flush(kvev_tracker *t, kvev_list *out)
{
    t->n_ev = t->n_ev_hash = t->n_ev_tok = 0;
    bool ok = build(t);
    for (size_t i = 0; i < t->n_touched; i++) {
        entry *e = find(t, t->touched[i]);
        e->touched = false;
        e->was = media_of(e);
        if (!e->was) erase(t, e);
    }
    t->n_touched = 0;
    t->resync = false;
    if (!ok) {
        /* The change could not be described: the next flush tells
         * subscribers to start over and sends every block as stored. */
        t->n_ev = t->n_ev_hash = t->n_ev_tok = 0;
        t->resync = true;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->tab[i].hash) continue;
            t->tab[i].was = 0;
            touch(t, &t->tab[i]);
        }
    }
    *out = (kvev_list){ .ev = t->ev, .n_ev = (int32_t)t->n_ev, .hash = t->ev_hash, .tok = t->ev_tok,
                        .block_size = t->bs };
    return ok ? PK_OK : PK_ENOMEM;
}

/* ---- reading ---- */

int32_t kvev_blocks(const kvev_tracker *t, kvev_medium m)
{
    int32_t n = 0;
    for (size_t i = 0; i < t->cap; i++)
        if (t->tab[i].hash && t->tab[i].count[m] > 0) n++;
    return n;
}

int32_t kvev_match(const kvev_tracker *t, const int32_t *tokens, int32_t n, kvev_medium *medium)
{
    uint64_t parent = 0;
    int32_t k = 0;
    *medium = KVEV_GPU;
    for (; (k + 1) * t->bs <= n; k++) {
        uint64_t h = kvev_hash(t, parent, tokens + (size_t)k * (size_t)t->bs);
        const entry *e = find(t, h);
        if (!e || !media_of(e)) break;
        *medium = e->count[KVEV_GPU] > 0 ? KVEV_GPU : KVEV_CPU;
        parent = h;
    }
    return k;
}

bool kvev_check(const kvev_tracker *t)
{
    kvev_tracker *w = (kvev_tracker *)t;   /* only the recount fields change */
    for (size_t i = 0; i < t->cap; i++) memset(w->tab[i].check, 0, sizeof w->tab[i].check);
    for (int32_t h = 0; h < t->n_holders; h++) {
        const holder *H = &t->holders[h];
        for (int32_t i = 0; i < H->nb; i++) {
            entry *e = find(t, H->hash[i]);
            if (!e) return false;
            e->check[H->medium]++;
            /* A holder's chain: each block's parent is the one before it. */
            if (e->parent != (i ? H->hash[i - 1] : 0)) return false;
        }
    }
    size_t used = 0;
    for (size_t i = 0; i < t->cap; i++) {
        const entry *e = &t->tab[i];
        if (!e->hash) continue;
        used++;
        if (memcmp(e->count, e->check, sizeof e->count) != 0) return false;
        if (!media_of(e) && !e->touched) return false;
        if (find(t, e->hash) != e) return false;
    }
    return used == t->n_used;
}
