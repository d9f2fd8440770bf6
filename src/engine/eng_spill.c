/*
 * eng_spill.c - the RAM tier of histories.
 *
 * When KV cells run short, a history still worth keeping is spilled rather
 * than dropped: the K and V rows of its cells (every layer) are copied into
 * one RAM block, ordered by position, and its sequence leaves the cache.
 * The policy sees it as a parked history; when a prompt reuses it, its rows
 * for the reused positions are copied back into free cells under the slot's
 * sequence.  A copy costs far less than recomputing the prefix.
 *
 *   rows: an image of positions [0, n_tokens) (mem.h)
 *
 * The budget (cache_ram_mib) bounds the rows held: a new spill evicts the
 * least valuable entries first, and is refused when even that cannot make
 * room for it.  The table (n_spill_max entries) holds the most recent
 * histories: when it is full, a new spill takes the place of the entry
 * used longest ago, if that is older than itself.  Not by value there:
 * value grows with size, so a live agent's fresh 700-token context lost to
 * the 1,300-token ones of agents finished minutes before.  (A table that
 * refused every spill once full dropped a live agent's context whenever its
 * slot was taken on a server that had spilled ~150 histories, and its next
 * turn read the context again: a stall for every session.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng_impl.h"

void eng_spill_free(eng *e, int32_t i)
{
    spilled *sp = &e->hist.spill[i];
    if (!sp->used) return;
    e->hist.spill_bytes -= mem_image_bytes(e->mem, sp->n_tokens);
    free(sp->tokens);
    free(sp->rows);
    *sp = (spilled){0};
}

static double entry_value(const eng *e, const spilled *sp, double now)
{
    pol_hist h = { .n_tokens = sp->n_tokens, .last_use_s = sp->last_use_s, .valid = true };
    return pol_hist_state(&e->p.policy, &h, now).value;
}

/* The entry worth least, and less than `value`; -1 when none is. */
static int32_t least_entry(const eng *e, double value, double now)
{
    int32_t least = -1;
    for (int32_t i = 0; i < e->hist.n_spill_max; i++) {
        if (!e->hist.spill[i].used || i == e->hist.spill_pin) continue;
        double v = entry_value(e, &e->hist.spill[i], now);
        if (v < value) {
            value = v;
            least = i;
        }
    }
    return least;
}

/* The entry used longest ago, and before `last_use_s`; -1 when none is. */
static int32_t oldest_entry(const eng *e, double last_use_s)
{
    int32_t oldest = -1;
    for (int32_t i = 0; i < e->hist.n_spill_max; i++) {
        if (!e->hist.spill[i].used || i == e->hist.spill_pin || e->hist.spill[i].last_use_s >= last_use_s) continue;
        if (oldest < 0 || e->hist.spill[i].last_use_s < e->hist.spill[oldest].last_use_s) oldest = i;
    }
    return oldest;
}

/* A free entry, and room for `need` more bytes in the budget, for a
 * history worth `value` last used at `last_use_s`; -1 when there is none. */
static int32_t make_ram(eng *e, size_t need, double value, double last_use_s)
{
    size_t budget = (size_t)e->p.cache_ram_mib << 20;
    double now = eng_now_s();
    for (;;) {
        int32_t free_i = -1;
        for (int32_t i = 0; i < e->hist.n_spill_max && free_i < 0; i++)
            if (!e->hist.spill[i].used) free_i = i;
        if (free_i >= 0 && e->hist.spill_bytes + need <= budget) return free_i;
        int32_t victim = free_i < 0 ? oldest_entry(e, last_use_s) : least_entry(e, value, now);
        if (victim < 0) return -1;
        eng_spill_free(e, victim);
    }
}

int32_t eng_spill(eng *e, kv_seq seq, const int32_t *tokens, int32_t n, int32_t marker_pos, double last_use_s,
                  const char *session, double max_gap_ms, int32_t pool_id)
{
    if (n <= 0 || e->hist.n_spill_max <= 0) return -1;
    int32_t m = mem_extent(e->mem, seq, n);       /* a gap ends what can be spilled */
    spilled sp = { .used = true, .n_tokens = m, .marker_pos = marker_pos < m ? marker_pos : -1,
                   .last_use_s = last_use_s, .max_gap_ms = max_gap_ms, .pool_id = pool_id };
    snprintf(sp.session, sizeof sp.session, "%s", session ? session : "");
    size_t need = mem_image_bytes(e->mem, m);
    int32_t slot_i = m > 0 ? make_ram(e, need, entry_value(e, &sp, eng_now_s()), last_use_s) : -1;
    if (slot_i < 0 || !(sp.tokens = malloc((size_t)m * sizeof(int32_t))) ||
        !(sp.rows = mem_copy_out(e->mem, seq, 0, m))) {
        free(sp.tokens);
        return -1;
    }
    memcpy(sp.tokens, tokens, (size_t)m * sizeof(int32_t));
    e->hist.spill[slot_i] = sp;
    e->hist.spill_bytes += need;
    return slot_i;
}

bool eng_restore(eng *e, int32_t i, kv_seq dst, int32_t p0, int32_t p1)
{
    const spilled *sp = &e->hist.spill[i];
    int32_t n = p1 - p0;
    if (n <= 0) return true;
    if (p1 > sp->n_tokens) return false;
    if (mem_copy_in(e->mem, dst, p0, p1, sp->rows + mem_image_bytes(e->mem, p0)) != PK_OK) return false;
    e->stat.n_tokens_restored += (uint64_t)n;
    return true;
}
