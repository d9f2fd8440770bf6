/*
 * eng_kvev.c - KV events and the prefix lookup (docs/kv-events.md).
 *
 * A holder is whatever keeps a token prefix a next request can reuse: a
 * slot's history (running or idle), a parked history, a resident pool,
 * each under its sequence id, and a RAM-tier record (holder KV_MAX_SEQ +
 * its entry).  After every step eng_kvev_step tells the block tracker
 * (src/kvev) what each holds, in the primary medium for cells and the
 * secondary for RAM, and hands the net change to the publisher, which
 * never blocks the step.  What a sequence held below the lowest position
 * it lost since the last step (mem_take_cut) is unchanged, so a step
 * costs one look per holder plus the blocks that changed.
 *
 * eng_lookup answers what a router's score stands for: the longest prefix
 * of a token list some holder could give a new request now (on a hybrid,
 * only as far as a state to continue from exists), read-only.
 */
#include <stdlib.h>
#include <string.h>

#include "../kvev/kvev.h"
#include "../kvev/kvev_pub.h"
#include "eng_impl.h"

enum { K_SLOT, K_PARKED, K_POOL, K_RAM };

/* One holder as both the events and the lookup see it. */
typedef struct holder {
    int32_t id;                 /* tracker id: seq, or KV_MAX_SEQ + RAM entry */
    int kind;                   /* K_* */
    int32_t ref;                /* slot, record entry or pool id */
    kv_seq seq;                 /* -1: a RAM record */
    const int32_t *tokens;
    int32_t n;
} holder;

struct eng_kvev {
    kvev_tracker *t;
    uint64_t *ram_serial;       /* [n_rec] the record each RAM holder last was */
    holder *h;                  /* [KV_MAX_SEQ + n_rec] this step's holders */
    bool *seen;                 /* [KV_MAX_SEQ] */
};

/* Every holder of the engine now, into h; returns the count. */
static int32_t holders(eng *e, holder *h)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        if (s->n_hist > 0)
            h[n++] = (holder){ .id = s->id, .kind = K_SLOT, .ref = i, .seq = s->id, .tokens = s->hist,
                               .n = s->n_hist };
    }
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        const hrec *r = &e->hist.rec[i];
        if (r->where == HIST_PARKED)
            h[n++] = (holder){ .id = r->seq, .kind = K_PARKED, .ref = i, .seq = r->seq, .tokens = r->tokens,
                               .n = r->n_tokens };
        else if (r->where == HIST_RAM)
            h[n++] = (holder){ .id = KV_MAX_SEQ + i, .kind = K_RAM, .ref = i, .seq = -1, .tokens = r->tokens,
                               .n = r->n_tokens };
    }
    static const int32_t no_excl[KV_MAX_SEQ];
    pol_hist ph[ENG_MAX_POOLS];
    int32_t seq[ENG_MAX_POOLS];
    int32_t np = eng_pool_hists(e, no_excl, ph, seq, ENG_MAX_POOLS);
    for (int32_t k = 0; k < np; k++)
        h[n++] = (holder){ .id = seq[k], .kind = K_POOL, .ref = seq[k], .seq = seq[k], .tokens = ph[k].tokens,
                           .n = ph[k].n_tokens };
    return n;
}

pk_status eng_kvev_init(eng *e)
{
    if (!e->p.kv_events) return PK_OK;
    struct eng_kvev *k = calloc(1, sizeof *k);
    if (!k) return PK_ENOMEM;
    e->kvev = k;
    k->ram_serial = calloc((size_t)MAX(e->hist.n_rec, 1), sizeof *k->ram_serial);
    k->h = calloc((size_t)(KV_MAX_SEQ + e->hist.n_rec), sizeof *k->h);
    k->seen = calloc(KV_MAX_SEQ, sizeof *k->seen);
    /* One seed for every replica of a model: equal prefixes get equal
     * hashes wherever they are. */
    uint64_t seed = eng_model_fingerprint(e);
    if (!k->ram_serial || !k->h || !k->seen) return PK_ENOMEM;
    return kvev_new(e->p.kv_block_size, KV_MAX_SEQ + e->hist.n_rec, seed, &k->t);
}

void eng_kvev_free(eng *e)
{
    struct eng_kvev *k = e->kvev;
    if (!k) return;
    kvev_free(k->t);
    free(k->ram_serial);
    free(k->h);
    free(k->seen);
    free(k);
    e->kvev = NULL;
}

void eng_kvev_step(eng *e)
{
    struct eng_kvev *k = e->kvev;
    if (!k) return;
    if (!e->mem) {
        kvev_clear(k->t);           /* asleep: the cache is gone */
    } else {
        int32_t n = holders(e, k->h);
        memset(k->seen, 0, KV_MAX_SEQ * sizeof *k->seen);
        for (int32_t i = 0; i < n; i++) {
            const holder *h = &k->h[i];
            int32_t same;
            if (h->seq >= 0) {
                same = mem_take_cut(e->mem, h->seq);
                k->seen[h->seq] = true;
            } else {
                uint64_t serial = e->hist.rec[h->ref].serial;
                same = k->ram_serial[h->ref] == serial ? h->n : 0;
                k->ram_serial[h->ref] = serial;
            }
            kvev_medium m = h->seq >= 0 ? KVEV_GPU : KVEV_CPU;
            if (kvev_hold(k->t, h->id, m, h->tokens, h->n, same) != PK_OK) {
                /* No memory for its blocks: it is published as holding
                 * none, and taken as new at the next step. */
                kvev_release(k->t, h->id);
                if (h->seq < 0) k->ram_serial[h->ref] = 0;
            }
        }
        for (kv_seq s = 0; s < KV_MAX_SEQ; s++)
            if (!k->seen[s] && kvev_holder_blocks(k->t, s) > 0) kvev_release(k->t, s);
        for (int32_t i = 0; i < e->hist.n_rec; i++)
            if (e->hist.rec[i].where != HIST_RAM && kvev_holder_blocks(k->t, KV_MAX_SEQ + i) > 0) {
                kvev_release(k->t, KV_MAX_SEQ + i);
                k->ram_serial[i] = 0;
            }
    }
    kvev_list l;
    (void)kvev_flush(k->t, &l);     /* a failure is a resync at the next step */
    if (l.n_ev > 0) kvev_pub_send(e->p.kv_events, &l, pk_wall_ms());
}

bool eng_kvev_check(eng *e)
{
    struct eng_kvev *k = e->kvev;
    if (!k) return true;
    if (!kvev_check(k->t)) return false;
    int32_t want_total = 0, total = 0;
    if (e->mem) {
        int32_t n = holders(e, k->h);
        for (int32_t i = 0; i < n; i++) {
            int32_t nb = k->h[i].n / e->p.kv_block_size;
            if (kvev_holder_blocks(k->t, k->h[i].id) != nb) return false;
            want_total += nb;
        }
    }
    for (int32_t h = 0; h < KV_MAX_SEQ + e->hist.n_rec; h++) total += kvev_holder_blocks(k->t, h);
    return total == want_total;   /* nobody else holds any */
}

/* ---- the lookup ---- */

static int32_t common(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t n = MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* How far h can give a request whose first c tokens it shares: c, or on a
 * hybrid the last position <= c with a state to continue from. */
static int32_t reusable(eng *e, const holder *h, int32_t c)
{
    if (!mem_resume_limited(e->mem) || c == 0) return c;
    if (h->seq < 0) return mem_image_resume(e->mem, e->hist.rec[h->ref].image, 0, h->n, c);
    if (mem_can_resume(e->mem, h->seq, c)) return c;
    kv_pos at[MEM_MAX_RESUME];
    int n = mem_resume_points(e->mem, h->seq, at), best = 0;
    for (int i = 0; i < n; i++)
        if (at[i] <= c) best = MAX(best, at[i]);
    return best;
}

void eng_lookup_msg(eng *e, eng_call *c)
{
    eng_lookup_reply *o = c->u.lookup.out;
    *o = (eng_lookup_reply){ .where = "none", .ref = -1, .block_size = e->p.kv_block_size };
    c->status = PK_OK;
    if (e->sleep.sleeping) return;          /* asleep: nothing is held */
    holder *h = malloc((size_t)(KV_MAX_SEQ + e->hist.n_rec) * sizeof *h);
    if (!h) {
        c->status = PK_ENOMEM;
        return;
    }
    static const char *names[] = { [K_SLOT] = "slot", [K_PARKED] = "parked", [K_POOL] = "pool", [K_RAM] = "ram" };
    int32_t n = holders(e, h);
    for (int32_t i = 0; i < n; i++) {
        int32_t r = reusable(e, &h[i], common(h[i].tokens, h[i].n, c->u.lookup.tokens, c->u.lookup.n));
        /* Ties: cells before RAM, the first listed. */
        bool better = r > o->n_cached || (r == o->n_cached && r > 0 && o->medium == KVEV_CPU && h[i].seq >= 0);
        if (!better) continue;
        o->n_cached = r;
        o->where = names[h[i].kind];
        o->ref = h[i].kind == K_POOL ? eng_pool_id_of(e, h[i].seq) : h[i].ref;
        o->medium = h[i].seq >= 0 ? KVEV_GPU : KVEV_CPU;
    }
    free(h);
}
