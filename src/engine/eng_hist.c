/*
 * eng_hist.c - the history store: histories that left their slots.
 *
 * A finished request leaves its history in its slot (eng_place.c).  When
 * the slot is needed, a history still worth keeping leaves it, as one
 * record kind in one table, in one of two places:
 *
 *   parked   its state stays in the cache under a parking id (mem_share
 *            from the slot: nothing is copied)
 *   RAM      its state is copied out as an image (mem_copy_out) and its
 *            cells are freed; a prompt that reuses it gets the image's
 *            positions copied back into free cells (mem_copy_in), a copy
 *            instead of a prefill
 *
 *   rec[i] : { where, seq (parked), image (RAM), tokens, marker_pos,
 *              last_use_s, session, max_gap_ms, pool_id }
 *
 * Both keep what placement and admission read of a history (its tokens,
 * turn marker, session, pool and the pause before its next turn), so every
 * scan over histories out of slots is one loop, and eng_hist_find is the
 * one lookup by session.  Parking is bounded by the parking ids
 * (n_parked_max), the RAM tier by its table (n_spill_max entries) and its
 * budget (cache_ram_mib): a new spill evicts the least valuable RAM
 * entries first, and is refused when even that cannot make room for it.
 * When the RAM table is full, a new spill takes the place of the entry
 * used longest ago, if that is older than itself.  Not by value there:
 * value grows with size, so a live agent's fresh 700-token context lost to
 * the 1,300-token ones of agents finished minutes before.  (A table that
 * refused every spill once full dropped a live agent's context whenever its
 * slot was taken on a server that had spilled ~150 histories, and its next
 * turn read the context again: a stall for every session.)
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"

pk_status eng_hist_init(eng *e)
{
    eng_hists *h = &e->hist;
    h->n_rec = h->n_parked_max + h->n_spill_max;
    h->rec = calloc((size_t)MAX(h->n_rec, 1), sizeof *h->rec);
    if (!h->rec) return PK_ENOMEM;
    for (int32_t i = 0; i < h->n_rec; i++) h->rec[i].seq = -1;
    h->spill_pin = -1;
    return PK_OK;
}

void eng_hist_free(eng *e)
{
    for (int32_t i = 0; e->hist.rec && i < e->hist.n_rec; i++) eng_hist_drop(e, i);
    free(e->hist.rec);
    e->hist.rec = NULL;
}

/* A free record; -1 when none is (never while each kind is under its
 * bound: the table holds both bounds). */
static int32_t free_rec(const eng *e)
{
    for (int32_t i = 0; i < e->hist.n_rec; i++)
        if (e->hist.rec[i].where == HIST_FREE) return i;
    return -1;
}

void eng_hist_drop(eng *e, int32_t i)
{
    hrec *r = &e->hist.rec[i];
    if (r->where == HIST_PARKED) {
        mem_drop(e->mem, r->seq);
        eng_seq_give(e, r->seq);
        e->hist.n_parked--;
    } else if (r->where == HIST_RAM) {
        e->hist.spill_bytes -= mem_image_bytes(e->mem, r->n_tokens);
        e->hist.n_spilled--;
    } else {
        return;
    }
    free(r->tokens);
    free(r->image);
    *r = (hrec){ .seq = -1 };
}

int32_t eng_hist_find(const eng *e, const char *session)
{
    int32_t found = -1;
    if (!session || !session[0]) return -1;
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        const hrec *r = &e->hist.rec[i];
        if (r->where != HIST_FREE && !strcmp(r->session, session) &&
            (found < 0 || r->last_use_s > e->hist.rec[found].last_use_s))
            found = i;
    }
    return found;
}

/* A record filled from a history's fields (tokens copied); -1 when no
 * record or memory is free. */
static int32_t take_rec(eng *e, const int32_t *tokens, int32_t n, int32_t marker_pos, double last_use_s,
                        const char *session, double max_gap_ms, int32_t pool_id)
{
    int32_t i = free_rec(e);
    if (i < 0) return -1;
    hrec *r = &e->hist.rec[i];
    if (!(r->tokens = malloc((size_t)MAX(n, 1) * sizeof(int32_t)))) return -1;
    memcpy(r->tokens, tokens, (size_t)n * sizeof(int32_t));
    r->n_tokens = n;
    r->marker_pos = marker_pos < n ? marker_pos : -1;
    r->last_use_s = last_use_s;
    r->max_gap_ms = max_gap_ms;
    r->pool_id = pool_id;
    r->serial = ++e->hist.next_serial;
    snprintf(r->session, sizeof r->session, "%s", session ? session : "");
    return i;
}

int32_t eng_hist_park(eng *e, const slot *s, int32_t pool_id, int32_t keep)
{
    if (e->hist.n_parked >= e->hist.n_parked_max) return -1;
    int32_t i = take_rec(e, s->hist, s->n_hist, s->marker_pos, s->last_use_s, s->session, s->max_gap_ms,
                         pool_id);
    if (i < 0) return -1;
    hrec *r = &e->hist.rec[i];
    if ((r->seq = eng_seq_take(e, ENG_SEQ_PARKED)) < 0) {
        free(r->tokens);
        *r = (hrec){ .seq = -1 };
        return -1;
    }
    /* on a hybrid, as far as the slot has a recurrent state (and one is
     * free for the copy) */
    int32_t n = mem_share(e->mem, s->id, r->seq, 0, s->n_hist);
    if (n == 0) {
        eng_seq_give(e, r->seq);
        free(r->tokens);
        *r = (hrec){ .seq = -1 };
        return -1;
    }
    r->n_tokens = n;
    /* on a hybrid the checkpoints go with it, but those the slot, cut to
     * keep, needs to go on from */
    mem_give_checkpoints(e->mem, s->id, r->seq, keep, n);
    r->where = HIST_PARKED;
    e->hist.n_parked++;
    return i;
}

/* ---- the RAM tier ---- */

static double entry_value(const eng *e, int32_t n_tokens, double last_use_s, double now)
{
    pol_hist h = { .n_tokens = n_tokens, .last_use_s = last_use_s, .valid = true };
    return pol_hist_state(&e->p.policy, &h, now).value;
}

static bool evictable(const eng *e, int32_t i)
{
    return e->hist.rec[i].where == HIST_RAM && i != e->hist.spill_pin;
}

/* The RAM entry worth least, and less than `value`; -1 when none is. */
static int32_t least_entry(const eng *e, double value, double now)
{
    int32_t least = -1;
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        if (!evictable(e, i)) continue;
        double v = entry_value(e, e->hist.rec[i].n_tokens, e->hist.rec[i].last_use_s, now);
        if (v < value) {
            value = v;
            least = i;
        }
    }
    return least;
}

/* The RAM entry used longest ago, and before `last_use_s`; -1 when none. */
static int32_t oldest_entry(const eng *e, double last_use_s)
{
    int32_t oldest = -1;
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        if (!evictable(e, i) || e->hist.rec[i].last_use_s >= last_use_s) continue;
        if (oldest < 0 || e->hist.rec[i].last_use_s < e->hist.rec[oldest].last_use_s) oldest = i;
    }
    return oldest;
}

/* Room in the table and the budget for `need` more bytes, for a history
 * worth `value` last used at `last_use_s`; false when there is none. */
static bool make_ram(eng *e, size_t need, double value, double last_use_s)
{
    size_t budget = (size_t)e->p.cache_ram_mib << 20;
    double now = eng_now_s();
    for (;;) {
        bool table_full = e->hist.n_spilled >= e->hist.n_spill_max;
        if (!table_full && e->hist.spill_bytes + need <= budget) return true;
        int32_t victim = table_full ? oldest_entry(e, last_use_s) : least_entry(e, value, now);
        if (victim < 0) return false;
        eng_hist_drop(e, victim);
    }
}

int32_t eng_spill(eng *e, kv_seq seq, const int32_t *tokens, int32_t n, int32_t marker_pos, double last_use_s,
                  const char *session, double max_gap_ms, int32_t pool_id)
{
    if (n <= 0 || e->hist.n_spill_max <= 0) return -1;
    int32_t m = mem_extent(e->mem, seq, n);       /* a gap ends what can be spilled */
    if (mem_resume_limited(e->mem)) {
        /* and on a hybrid, the last position with a recurrent state */
        kv_pos at[MEM_MAX_RESUME];
        int k = mem_resume_points(e->mem, seq, at) - 1;
        while (k >= 0 && at[k] > m) k--;
        m = k >= 0 ? at[k] : 0;
    }
    size_t need = mem_image_bytes(e->mem, m);
    if (m <= 0 || !make_ram(e, need, entry_value(e, m, last_use_s, eng_now_s()), last_use_s)) return -1;
    uint8_t *image = mem_copy_out(e->mem, seq, 0, m);
    int32_t i = image ? take_rec(e, tokens, m, marker_pos, last_use_s, session, max_gap_ms, pool_id) : -1;
    if (i < 0) {
        free(image);
        return -1;
    }
    e->hist.rec[i].where = HIST_RAM;
    e->hist.rec[i].image = image;
    e->hist.n_spilled++;
    e->hist.spill_bytes += need;
    return i;
}

int32_t eng_hist_copy_in(eng *e, int32_t i, kv_seq dst, int32_t p0, int32_t p1)
{
    const hrec *r = &e->hist.rec[i];
    ASSERT(r->where == HIST_RAM);
    if (p1 > r->n_tokens) return p0;
    p1 = mem_image_resume(e->mem, r->image, 0, r->n_tokens, p1);
    if (p1 <= p0 || mem_copy_in(e->mem, dst, p0, p1, r->image, 0, r->n_tokens) != PK_OK) return p0;
    e->stat.n_tokens_restored += (uint64_t)(p1 - p0);
    return p1;
}

/* ---- checks and stats ---- */

bool eng_hist_check(const eng *e)
{
    int32_t n_parked = 0, n_spilled = 0;
    size_t bytes = 0;
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        const hrec *r = &e->hist.rec[i];
        switch (r->where) {
        case HIST_FREE:
            if (r->seq != -1 || r->tokens || r->image) return false;
            break;
        case HIST_PARKED:
            n_parked++;
            if (e->seqs.kind[r->seq] != ENG_SEQ_PARKED || !mem_holds(e->mem, r->seq, r->n_tokens)) return false;
            break;
        case HIST_RAM:
            n_spilled++;
            bytes += mem_image_bytes(e->mem, r->n_tokens);
            if (r->seq != -1 || !r->image) return false;
            break;
        }
    }
    return n_parked == e->hist.n_parked && n_spilled == e->hist.n_spilled && bytes == e->hist.spill_bytes &&
           n_parked <= e->hist.n_parked_max && n_spilled <= e->hist.n_spill_max && e->hist.spill_pin == -1;
}

void eng_hist_stats(eng *e, eng_stats *o)
{
    for (int32_t i = 0; i < e->hist.n_rec; i++) {
        const hrec *r = &e->hist.rec[i];
        if (r->where == HIST_PARKED) {
            o->n_parked++;
            o->parked_tokens += r->n_tokens;
            o->parked_owned_cells += mem_seq_owned(e->mem, r->seq);
            o->parked_state_bytes += mem_seq_state_bytes(e->mem, r->seq);
        } else if (r->where == HIST_RAM) {
            o->n_spilled++;
            o->spilled_tokens += r->n_tokens;
        }
    }
    o->spilled_mib = e->hist.spill_bytes / 1048576.0;
}
