/*
 * rs.c - recurrent state slots and checkpoints (rs.h).
 */
#include <stdlib.h>
#include <string.h>

#include "rs.h"

typedef struct rs_slot {
    kv_seq seq;
    kv_pos pos;
    rs_kind kind;
} rs_slot;

struct rs_cache {
    rs_params p;
    size_t floats;            /* one slot */
    float *data;              /* [n_slots][floats] */
    rs_slot *slot;            /* [n_slots] */
    int used;
    int32_t seq_slots[KV_MAX_SEQ];
    int16_t live[KV_MAX_SEQ]; /* live slot of each sequence, -1 */
};

pk_status rs_new(const rs_params *p, rs_cache **out)
{
    *out = NULL;
    if (p->n_layer < 1 || p->n_slots < 1 || p->n_slots > 32767 || !p->conv_floats || !p->ssm_floats)
        return PK_EINVAL;
    rs_cache *rs = calloc(1, sizeof *rs);
    if (!rs) return PK_ENOMEM;
    rs->p = *p;
    rs->floats = (size_t)p->n_layer * (p->conv_floats + p->ssm_floats);
    void *d = NULL;
    if (posix_memalign(&d, 64, rs->floats * sizeof(float) * (size_t)p->n_slots)) d = NULL;
    rs->data = d;
    rs->slot = calloc((size_t)p->n_slots, sizeof *rs->slot);
    if (!rs->data || !rs->slot) {
        rs_free(rs);
        return PK_ENOMEM;
    }
    rs_clear(rs);
    *out = rs;
    return PK_OK;
}

void rs_free(rs_cache *rs)
{
    if (!rs) return;
    free(rs->data);
    free(rs->slot);
    free(rs);
}

const rs_params *rs_get_params(const rs_cache *rs) { return &rs->p; }
size_t rs_state_bytes(const rs_cache *rs) { return rs->floats * sizeof(float); }

float *rs_data(rs_cache *rs, int slot)
{
    ASSERT(slot >= 0 && slot < rs->p.n_slots);
    return rs->data + (size_t)slot * rs->floats;
}

float *rs_conv(rs_cache *rs, int slot, int layer)
{
    ASSERT(layer >= 0 && layer < rs->p.n_layer);
    return rs_data(rs, slot) + (size_t)layer * (rs->p.conv_floats + rs->p.ssm_floats);
}

float *rs_ssm(rs_cache *rs, int slot, int layer)
{
    return rs_conv(rs, slot, layer) + rs->p.conv_floats;
}

kv_pos rs_slot_pos(const rs_cache *rs, int slot) { return rs->slot[slot].pos; }
kv_seq rs_slot_seq(const rs_cache *rs, int slot) { return rs->slot[slot].seq; }
rs_kind rs_slot_kind(const rs_cache *rs, int slot) { return rs->slot[slot].kind; }

int rs_live(const rs_cache *rs, kv_seq seq)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    return rs->live[seq];
}

kv_pos rs_pos(const rs_cache *rs, kv_seq seq)
{
    int s = rs_live(rs, seq);
    return s < 0 ? -1 : rs->slot[s].pos;
}

/* seq's checkpoint at pos (at most one: a checkpoint is never made where
 * one is), -1 none. */
static int find_ckpt(const rs_cache *rs, kv_seq seq, kv_pos pos)
{
    for (int i = 0; i < rs->p.n_slots; i++)
        if (rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == seq && rs->slot[i].pos == pos) return i;
    return -1;
}

int rs_find(const rs_cache *rs, kv_seq seq, kv_pos pos)
{
    int l = rs_live(rs, seq);
    return l >= 0 && rs->slot[l].pos == pos ? l : find_ckpt(rs, seq, pos);
}

bool rs_has_ckpt(const rs_cache *rs, kv_seq seq, kv_pos pos) { return find_ckpt(rs, seq, pos) >= 0; }

int rs_n_ckpts(const rs_cache *rs, kv_seq seq)
{
    int n = 0;
    for (int i = 0; i < rs->p.n_slots; i++) n += rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == seq;
    return n;
}

int rs_positions(const rs_cache *rs, kv_seq seq, kv_pos *out)
{
    int n = 0;
    for (int i = 0; i < rs->p.n_slots; i++) {
        if (rs->slot[i].kind == RS_FREE || rs->slot[i].seq != seq) continue;
        kv_pos p = rs->slot[i].pos;
        int k = n;
        for (int j = 0; j < n; j++) if (out[j] == p) k = -1;
        if (k < 0 || n == RS_MAX_CKPT + 1) continue;
        while (k > 0 && out[k - 1] > p) { out[k] = out[k - 1]; k--; }
        out[k] = p;
        n++;
    }
    return n;
}

static void release(rs_cache *rs, int i);

/* seq's checkpoint nearest another of its states (its live one counts):
 * losing it costs the fewest tokens to recompute.  -1 when it has none. */
static int nearest_other(const rs_cache *rs, kv_seq seq)
{
    int best = -1;
    kv_pos best_gap = INT32_MAX;
    for (int a = 0; a < rs->p.n_slots; a++) {
        if (rs->slot[a].kind != RS_CKPT || rs->slot[a].seq != seq) continue;
        kv_pos gap = INT32_MAX;
        for (int b = 0; b < rs->p.n_slots; b++) {
            if (b == a || rs->slot[b].kind == RS_FREE || rs->slot[b].seq != seq) continue;
            kv_pos d = rs->slot[a].pos - rs->slot[b].pos;
            if (d < 0) d = -d;
            if (d < gap) gap = d;
        }
        if (gap < best_gap) best_gap = gap, best = a;
    }
    return best;
}

/* A free slot; for a live state, when none is free, a checkpoint gives
 * its slot: of the sequence holding the most, the one nearest another
 * (live states run sequences, checkpoints only save recomputing). */
static int take(rs_cache *rs, kv_seq seq, kv_pos pos, rs_kind kind)
{
    if (kind == RS_LIVE && rs->used == rs->p.n_slots) {
        kv_seq most = -1;
        int n_most = 0, count[KV_MAX_SEQ] = { 0 };
        for (int i = 0; i < rs->p.n_slots; i++)
            if (rs->slot[i].kind == RS_CKPT && ++count[rs->slot[i].seq] > n_most)
                n_most = count[rs->slot[i].seq], most = rs->slot[i].seq;
        if (most >= 0) release(rs, nearest_other(rs, most));
    }
    for (int i = 0; i < rs->p.n_slots; i++) {
        if (rs->slot[i].kind != RS_FREE) continue;
        rs->slot[i] = (rs_slot){ seq, pos, kind };
        rs->used++;
        rs->seq_slots[seq]++;
        if (kind == RS_LIVE) rs->live[seq] = (int16_t)i;
        return i;
    }
    return -1;
}

static void release(rs_cache *rs, int i)
{
    rs_slot *s = &rs->slot[i];
    if (s->kind == RS_FREE) return;
    if (s->kind == RS_LIVE) rs->live[s->seq] = -1;
    rs->seq_slots[s->seq]--;
    rs->used--;
    *s = (rs_slot){ -1, -1, RS_FREE };
}

pk_status rs_begin(rs_cache *rs, kv_seq seq)
{
    int l = rs_live(rs, seq);
    if (l < 0 && (l = take(rs, seq, 0, RS_LIVE)) < 0) return PK_EFULL;
    rs->slot[l].pos = 0;
    memset(rs_data(rs, l), 0, rs_state_bytes(rs));
    for (int i = 0; i < rs->p.n_slots; i++)
        if (rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == seq) release(rs, i);
    return PK_OK;
}

void rs_advance(rs_cache *rs, kv_seq seq, kv_pos pos)
{
    int l = rs_live(rs, seq);
    ASSERT(l >= 0 && pos >= rs->slot[l].pos);
    rs->slot[l].pos = pos;
}

/* seq's checkpoints past pos go: they belong to a history it no longer has. */
static void drop_past(rs_cache *rs, kv_seq seq, kv_pos pos)
{
    for (int i = 0; i < rs->p.n_slots; i++)
        if (rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == seq && rs->slot[i].pos > pos) release(rs, i);
}

pk_status rs_copy(rs_cache *rs, int slot, kv_seq dst)
{
    ASSERT(slot >= 0 && slot < rs->p.n_slots && rs->slot[slot].kind != RS_FREE);
    int l = rs_live(rs, dst);
    if (l == slot) return PK_OK;
    if (l < 0 && (l = take(rs, dst, 0, RS_LIVE)) < 0) return PK_EFULL;
    memcpy(rs_data(rs, l), rs_data(rs, slot), rs_state_bytes(rs));
    rs->slot[l].pos = rs->slot[slot].pos;
    drop_past(rs, dst, rs->slot[l].pos);
    return PK_OK;
}

pk_status rs_checkpoint(rs_cache *rs, kv_seq seq)
{
    int l = rs_live(rs, seq);
    if (l < 0) return PK_ENOTFOUND;
    kv_pos pos = rs->slot[l].pos;
    if (find_ckpt(rs, seq, pos) >= 0) return PK_OK;
    if (rs_n_ckpts(rs, seq) == RS_MAX_CKPT) release(rs, nearest_other(rs, seq));
    int c = take(rs, seq, pos, RS_CKPT);
    if (c < 0) return PK_EFULL;
    memcpy(rs_data(rs, c), rs_data(rs, l), rs_state_bytes(rs));
    return PK_OK;
}

pk_status rs_put_ckpt(rs_cache *rs, kv_seq seq, kv_pos pos, const float *state)
{
    if (rs_find(rs, seq, pos) >= 0) return PK_OK;
    int c = rs_n_ckpts(rs, seq) < RS_MAX_CKPT ? take(rs, seq, pos, RS_CKPT) : -1;
    if (c < 0) return PK_EFULL;
    memcpy(rs_data(rs, c), state, rs_state_bytes(rs));
    return PK_OK;
}

pk_status rs_rewind(rs_cache *rs, kv_seq seq, kv_pos pos)
{
    int s = rs_find(rs, seq, pos);
    if (s < 0) return PK_ENOTFOUND;
    int l = rs_live(rs, seq);
    if (s != l) {
        /* the checkpoint becomes the live state, the old live one goes */
        if (l >= 0) release(rs, l);
        rs->slot[s].kind = RS_LIVE;
        rs->live[seq] = (int16_t)s;
        /* keep a checkpoint where it was: copy it back when a slot is free */
        int c = take(rs, seq, pos, RS_CKPT);
        if (c >= 0) memcpy(rs_data(rs, c), rs_data(rs, s), rs_state_bytes(rs));
    }
    drop_past(rs, seq, pos);
    return PK_OK;
}

pk_status rs_restore(rs_cache *rs, kv_seq seq, kv_pos pos)
{
    int s = find_ckpt(rs, seq, pos);
    if (s < 0) return PK_ENOTFOUND;
    /* the checkpoint becomes the live state; the old live one goes */
    int l = rs_live(rs, seq);
    if (l >= 0) release(rs, l);
    rs->slot[s].kind = RS_LIVE;
    rs->live[seq] = (int16_t)s;
    drop_past(rs, seq, pos);
    return PK_OK;
}

void rs_drop_ckpt(rs_cache *rs, kv_seq seq, kv_pos pos)
{
    int c = find_ckpt(rs, seq, pos);
    if (c >= 0) release(rs, c);
}

void rs_give_ckpts(rs_cache *rs, kv_seq seq, kv_seq dst, kv_pos lo, kv_pos hi)
{
    ASSERT(dst >= 0 && dst < KV_MAX_SEQ && dst != seq);
    int have = 0;
    for (int i = 0; i < rs->p.n_slots; i++) have += rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == dst;
    for (int i = 0; i < rs->p.n_slots && have < RS_MAX_CKPT; i++) {
        rs_slot *x = &rs->slot[i];
        if (x->kind != RS_CKPT || x->seq != seq || x->pos <= lo || x->pos > hi || rs_find(rs, dst, x->pos) >= 0) continue;
        x->seq = dst;
        rs->seq_slots[seq]--;
        rs->seq_slots[dst]++;
        have++;
    }
}

void rs_drop(rs_cache *rs, kv_seq seq)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    if (!rs->seq_slots[seq]) return;
    for (int i = 0; i < rs->p.n_slots; i++)
        if (rs->slot[i].kind != RS_FREE && rs->slot[i].seq == seq) release(rs, i);
}

void rs_drop_ckpts(rs_cache *rs, kv_seq seq)
{
    for (int i = 0; i < rs->p.n_slots; i++)
        if (rs->slot[i].kind == RS_CKPT && rs->slot[i].seq == seq) release(rs, i);
}

void rs_clear(rs_cache *rs)
{
    for (int i = 0; i < rs->p.n_slots; i++) rs->slot[i] = (rs_slot){ -1, -1, RS_FREE };
    rs->used = 0;
    memset(rs->seq_slots, 0, sizeof rs->seq_slots);
    for (int s = 0; s < KV_MAX_SEQ; s++) rs->live[s] = -1;
}

int rs_used(const rs_cache *rs) { return rs->used; }
int rs_free_slots(const rs_cache *rs) { return rs->p.n_slots - rs->used; }

int rs_seq_slots(const rs_cache *rs, kv_seq seq)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    return rs->seq_slots[seq];
}

bool rs_check(const rs_cache *rs)
{
    int used = 0, per[KV_MAX_SEQ] = {0}, live[KV_MAX_SEQ] = {0}, ckpt[KV_MAX_SEQ] = {0};
    for (int i = 0; i < rs->p.n_slots; i++) {
        const rs_slot *s = &rs->slot[i];
        if (s->kind == RS_FREE) {
            if (s->seq != -1 || s->pos != -1) return false;
            continue;
        }
        if (s->seq < 0 || s->seq >= KV_MAX_SEQ || s->pos < 0) return false;
        used++;
        per[s->seq]++;
        if (s->kind == RS_LIVE) {
            if (rs->live[s->seq] != i) return false;
            live[s->seq]++;
        } else if (++ckpt[s->seq] > RS_MAX_CKPT) {
            return false;
        }
    }
    if (used != rs->used) return false;
    for (int q = 0; q < KV_MAX_SEQ; q++)
        if (per[q] != rs->seq_slots[q] || live[q] > 1 || (live[q] == 0) != (rs->live[q] < 0)) return false;
    return true;
}
