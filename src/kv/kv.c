/*
 * kv.c - the KV cache (see kv.h for the model: cells carrying sets of
 * sequence ids, sharing by membership, ownership charges).
 *
 * LAYOUT
 *   One calloc'd block holds every layer's K and V storage, each region
 *   starting on a 64-byte boundary so SIMD kernels may use aligned loads on
 *   row 0 of a layer:
 *
 *     [k layer 0][pad][v layer 0][pad][k layer 1][pad] ... [v layer L-1]
 *      n_ctx rows      n_ctx rows
 *
 *   Cell metadata lives in three parallel arrays (pos, seqs, owner) so the
 *   attention scan over pos/seqs touches no K/V bytes.
 *
 * BOOKKEEPING (all exact after every public call)
 *   n_used         cells with a non-empty set
 *   cells_end      1 + highest used index; every cell at or past it is free,
 *                  so every scan below stops there
 *   free_lo        lowest free index (n_ctx when full); every cell below it
 *                  is used, so kv_find_slot starts there
 *   seq_cells[s]   cells whose set holds s
 *   seq_owned[s]   cells whose owner is s; sums to n_used
 *
 *   Setting a cell only raises cells_end and may advance free_lo past a run
 *   of used cells; freeing lowers free_lo at once, and cells_end is pulled
 *   back once at the end of each bulk operation (trim_end).  Position
 *   min/max per sequence are not tracked: they are a scan of [0, cells_end),
 *   which the engine asks for once per request, not per token.
 */
#include "kv.h"
#include "../common/huge.h"

#include <stdlib.h>
#include <string.h>

#define KV_ALIGN 64
#define KV_WORDS (KV_MAX_SEQ / 64)

struct kv_cache {
    kv_params p;
    size_t k_row_bytes, v_row_bytes;
    size_t size_bytes;            /* K + V payload, without alignment padding */
    void *block;                  /* the pk_huge_alloc'd block, for pk_huge_free() */
    size_t block_bytes;
    uint8_t **k, **v;             /* [n_layer] -> [n_ctx][k_row_bytes] */

    kv_pos *pos;                  /* [n_ctx], -1 when free */
    kv_seqset *seqs;              /* [n_ctx] */
    kv_seq *owner;                /* [n_ctx], -1 when free */

    int n_used, cells_end, free_lo;
    int seq_cells[KV_MAX_SEQ];
    int seq_owned[KV_MAX_SEQ];
};

static size_t align_up(size_t n)
{
    return (n + KV_ALIGN - 1) & ~(size_t)(KV_ALIGN - 1);
}

/* a * b into *out; false on size_t overflow. */
static bool mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

static bool add_ok(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return false;
    *out = a + b;
    return true;
}

pk_status kv_new(const kv_params *p, kv_cache **out)
{
    *out = NULL;
    if (!p || p->n_layer <= 0 || p->n_ctx <= 0 || p->n_embd_k <= 0 || p->n_embd_v <= 0)
        return PK_EINVAL;
    size_t krow = tq_row_size(p->type_k, p->n_embd_k), vrow = tq_row_size(p->type_v, p->n_embd_v);
    if (!krow || !vrow)
        return PK_EINVAL;
    size_t kreg, vreg, layer, total, payload;
    if (!mul_ok(krow, (size_t)p->n_ctx, &kreg) || !mul_ok(vrow, (size_t)p->n_ctx, &vreg))
        return PK_ENOMEM;
    if (kreg > SIZE_MAX - 2 * KV_ALIGN || vreg > SIZE_MAX - 2 * KV_ALIGN)
        return PK_ENOMEM;
    if (!add_ok(align_up(kreg), align_up(vreg), &layer) ||
        !mul_ok(layer, (size_t)p->n_layer, &total) || !add_ok(total, KV_ALIGN, &total) ||
        !mul_ok(kreg + vreg, (size_t)p->n_layer, &payload))
        return PK_ENOMEM;

    kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv) return PK_ENOMEM;
    kv->p = *p;
    kv->k_row_bytes = krow;
    kv->v_row_bytes = vrow;
    kv->size_bytes = payload;
    /* zeroed pages from the kernel: untouched cells cost no resident memory
     * (beyond the 2 MiB page they share); huge pages because attention
     * streams the cells much as decode streams the weights */
    kv->block = pk_huge_alloc(total);
    kv->block_bytes = total;
    kv->k = calloc((size_t)p->n_layer, sizeof(*kv->k));
    kv->v = calloc((size_t)p->n_layer, sizeof(*kv->v));
    kv->pos = malloc((size_t)p->n_ctx * sizeof(*kv->pos));
    kv->seqs = calloc((size_t)p->n_ctx, sizeof(*kv->seqs));
    kv->owner = malloc((size_t)p->n_ctx * sizeof(*kv->owner));
    if (!kv->block || !kv->k || !kv->v || !kv->pos || !kv->seqs || !kv->owner) {
        kv_free(kv);
        return PK_ENOMEM;
    }

    uint8_t *base = (uint8_t *)(((uintptr_t)kv->block + KV_ALIGN - 1) & ~(uintptr_t)(KV_ALIGN - 1));
    for (int l = 0; l < p->n_layer; l++) {
        kv->k[l] = base;
        base += align_up(kreg);
        kv->v[l] = base;
        base += align_up(vreg);
    }
    for (int i = 0; i < p->n_ctx; i++) {
        kv->pos[i] = -1;
        kv->owner[i] = -1;
    }
    *out = kv;
    return PK_OK;
}

void kv_free(kv_cache *kv)
{
    if (!kv) return;
    pk_huge_free(kv->block, kv->block_bytes);
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv->seqs);
    free(kv->owner);
    free(kv);
}

const kv_params *kv_get_params(const kv_cache *kv) { return &kv->p; }
size_t kv_size_bytes(const kv_cache *kv) { return kv->size_bytes; }
size_t kv_k_row_bytes(const kv_cache *kv) { return kv->k_row_bytes; }
size_t kv_v_row_bytes(const kv_cache *kv) { return kv->v_row_bytes; }

void *kv_k_row(kv_cache *kv, int layer, int cell)
{
    DASSERT(layer >= 0 && layer < kv->p.n_layer && cell >= 0 && cell < kv->p.n_ctx);
    return kv->k[layer] + (size_t)cell * kv->k_row_bytes;
}

void *kv_v_row(kv_cache *kv, int layer, int cell)
{
    DASSERT(layer >= 0 && layer < kv->p.n_layer && cell >= 0 && cell < kv->p.n_ctx);
    return kv->v[layer] + (size_t)cell * kv->v_row_bytes;
}

const void *kv_k_base(const kv_cache *kv, int layer)
{
    DASSERT(layer >= 0 && layer < kv->p.n_layer);
    return kv->k[layer];
}

const void *kv_v_base(const kv_cache *kv, int layer)
{
    DASSERT(layer >= 0 && layer < kv->p.n_layer);
    return kv->v[layer];
}

/* ---- cell metadata ---------------------------------------------------- */

static void check_cell(const kv_cache *kv, int cell)
{
    ASSERT(cell >= 0 && cell < kv->p.n_ctx);
}

static void check_seq(kv_seq s)
{
    ASSERT(s >= 0 && s < KV_MAX_SEQ);
}

kv_pos kv_cell_pos(const kv_cache *kv, int cell)
{
    check_cell(kv, cell);
    return kv->pos[cell];
}

const kv_seqset *kv_cell_seqs(const kv_cache *kv, int cell)
{
    check_cell(kv, cell);
    return &kv->seqs[cell];
}

kv_seq kv_cell_owner(const kv_cache *kv, int cell)
{
    check_cell(kv, cell);
    return kv->owner[cell];
}

int kv_used(const kv_cache *kv) { return kv->n_used; }
int kv_cells_end(const kv_cache *kv) { return kv->cells_end; }

static bool set_empty(const kv_seqset *s)
{
    return (s->w[0] | s->w[1] | s->w[2] | s->w[3]) == 0;
}

static bool set_single(const kv_seqset *s)
{
    int n = 0;
    for (int i = 0; i < KV_WORDS; i++) n += __builtin_popcountll(s->w[i]);
    return n == 1;
}

static kv_seq set_lowest(const kv_seqset *s)
{
    for (int i = 0; i < KV_WORDS; i++)
        if (s->w[i]) return i * 64 + __builtin_ctzll(s->w[i]);
    return -1;
}

static void set_add(kv_seqset *s, kv_seq id) { s->w[id >> 6] |= (uint64_t)1 << (id & 63); }
static void set_del(kv_seqset *s, kv_seq id) { s->w[id >> 6] &= ~((uint64_t)1 << (id & 63)); }

static bool in_range(kv_pos pos, kv_pos p0, kv_pos p1)
{
    return pos >= p0 && pos < p1;
}

/* Normalizes a [p0, p1) range per kv.h: p0 < 0 means 0, p1 < 0 means +inf. */
static void norm_range(kv_pos *p0, kv_pos *p1)
{
    if (*p0 < 0) *p0 = 0;
    if (*p1 < 0) *p1 = INT32_MAX;
}

/* Marks a cell free (its set already empty and its charges already moved). */
static void cell_release(kv_cache *kv, int i)
{
    kv->pos[i] = -1;
    kv->owner[i] = -1;
    kv->n_used--;
    if (i < kv->free_lo) kv->free_lo = i;
}

/* Pulls cells_end back past trailing free cells after a bulk operation. */
static void trim_end(kv_cache *kv)
{
    int e = kv->cells_end;
    while (e > 0 && kv->pos[e - 1] < 0) e--;
    kv->cells_end = e;
}

/* Removes s from used cell i: moves the charge if s owned it, and frees the
 * cell when s was its last member.  Does not trim cells_end. */
static void cell_leave(kv_cache *kv, int i, kv_seq s)
{
    kv_seqset *set = &kv->seqs[i];
    DASSERT(kv_seqset_has(set, s));
    set_del(set, s);
    kv->seq_cells[s]--;
    if (kv->owner[i] != s) return;
    kv->seq_owned[s]--;
    kv_seq heir = set_lowest(set);
    if (heir < 0) {
        cell_release(kv, i);
    } else {
        kv->owner[i] = heir;
        kv->seq_owned[heir]++;
    }
}

/* Empties cell i's set, uncounting every member; the charge stays put. */
static void cell_drop_members(kv_cache *kv, int i)
{
    kv_seqset *set = &kv->seqs[i];
    for (int w = 0; w < KV_WORDS; w++) {
        for (uint64_t bits = set->w[w]; bits; bits &= bits - 1)
            kv->seq_cells[w * 64 + __builtin_ctzll(bits)]--;
        set->w[w] = 0;
    }
}

/* Frees used cell i whatever its members. */
static void cell_clear(kv_cache *kv, int i)
{
    cell_drop_members(kv, i);
    kv->seq_owned[kv->owner[i]]--;
    cell_release(kv, i);
}

/* ---- slots ------------------------------------------------------------ */

pk_status kv_find_slot(const kv_cache *kv, int n, int *cells)
{
    if (n < 0) return PK_EINVAL;
    if (n > kv->p.n_ctx - kv->n_used) return PK_EFULL;
    int got = 0;
    for (int i = kv->free_lo; got < n; i++) {
        DASSERT(i < kv->p.n_ctx);
        if (kv->pos[i] < 0) cells[got++] = i;
    }
    return PK_OK;
}

void kv_cell_set(kv_cache *kv, int cell, kv_pos pos, const kv_seq *seqs, int n_seqs)
{
    check_cell(kv, cell);
    ASSERT(kv->pos[cell] < 0 && pos >= 0 && n_seqs >= 1);
    kv_seqset *set = &kv->seqs[cell];
    for (int j = 0; j < n_seqs; j++) {
        check_seq(seqs[j]);
        if (kv_seqset_has(set, seqs[j])) continue;   /* a repeated id counts once */
        set_add(set, seqs[j]);
        kv->seq_cells[seqs[j]]++;
    }
    kv->pos[cell] = pos;
    kv->owner[cell] = seqs[0];
    kv->seq_owned[seqs[0]]++;
    kv->n_used++;
    if (cell >= kv->cells_end) kv->cells_end = cell + 1;
    if (cell == kv->free_lo) {
        int f = cell + 1;
        while (f < kv->p.n_ctx && kv->pos[f] >= 0) f++;
        kv->free_lo = f;
    }
}

/* ---- sequence operations ---------------------------------------------- */

void kv_seq_rm(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1)
{
    norm_range(&p0, &p1);
    if (seq < 0) {
        for (int i = 0; i < kv->cells_end; i++)
            if (kv->pos[i] >= 0 && in_range(kv->pos[i], p0, p1)) cell_clear(kv, i);
    } else {
        check_seq(seq);
        if (kv->seq_cells[seq] == 0) return;
        for (int i = 0; i < kv->cells_end; i++)
            if (kv_seqset_has(&kv->seqs[i], seq) && in_range(kv->pos[i], p0, p1))
                cell_leave(kv, i, seq);
    }
    trim_end(kv);
}

void kv_seq_cp(kv_cache *kv, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1)
{
    check_seq(src);
    check_seq(dst);
    if (src == dst || kv->seq_cells[src] == 0) return;
    norm_range(&p0, &p1);
    for (int i = 0; i < kv->cells_end; i++) {
        kv_seqset *set = &kv->seqs[i];
        if (kv_seqset_has(set, src) && !kv_seqset_has(set, dst) && in_range(kv->pos[i], p0, p1)) {
            set_add(set, dst);
            kv->seq_cells[dst]++;
        }
    }
}

void kv_seq_keep(kv_cache *kv, kv_seq seq)
{
    check_seq(seq);
    for (int i = 0; i < kv->cells_end; i++) {
        if (kv->pos[i] < 0) continue;
        if (!kv_seqset_has(&kv->seqs[i], seq)) {
            cell_clear(kv, i);
            continue;
        }
        cell_drop_members(kv, i);
        set_add(&kv->seqs[i], seq);
        kv->seq_cells[seq]++;
        kv->seq_owned[kv->owner[i]]--;
        kv->owner[i] = seq;
        kv->seq_owned[seq]++;
    }
    trim_end(kv);
}

pk_status kv_seq_add(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1, kv_pos delta)
{
    check_seq(seq);
    norm_range(&p0, &p1);
    if (kv->seq_cells[seq] == 0) return PK_OK;
    /* Validate everything first so a refusal leaves the cache untouched. */
    for (int i = 0; i < kv->cells_end; i++) {
        if (!kv_seqset_has(&kv->seqs[i], seq) || !in_range(kv->pos[i], p0, p1)) continue;
        if (!set_single(&kv->seqs[i])) return PK_EINVAL;
        if ((int64_t)kv->pos[i] + delta > INT32_MAX) return PK_EINVAL;
    }
    if (delta == 0) return PK_OK;
    for (int i = 0; i < kv->cells_end; i++) {
        if (!kv_seqset_has(&kv->seqs[i], seq) || !in_range(kv->pos[i], p0, p1)) continue;
        int64_t np = (int64_t)kv->pos[i] + delta;
        if (np < 0)
            cell_leave(kv, i, seq);   /* sole member: this frees the cell */
        else
            kv->pos[i] = (kv_pos)np;
    }
    trim_end(kv);
    return PK_OK;
}

void kv_seq_take(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1)
{
    check_seq(seq);
    norm_range(&p0, &p1);
    if (kv->seq_cells[seq] == 0) return;
    for (int i = 0; i < kv->cells_end; i++) {
        if (!kv_seqset_has(&kv->seqs[i], seq) || !in_range(kv->pos[i], p0, p1) || kv->owner[i] == seq)
            continue;
        kv->seq_owned[kv->owner[i]]--;
        kv->owner[i] = seq;
        kv->seq_owned[seq]++;
    }
}

int kv_seq_common(const kv_cache *kv, kv_seq a, kv_seq b, kv_pos p0, kv_pos p1)
{
    check_seq(a);
    check_seq(b);
    norm_range(&p0, &p1);
    int n = 0;
    for (int i = 0; i < kv->cells_end; i++)
        n += kv_seqset_has(&kv->seqs[i], a) && kv_seqset_has(&kv->seqs[i], b) && in_range(kv->pos[i], p0, p1);
    return n;
}

kv_pos kv_seq_pos_min(const kv_cache *kv, kv_seq seq)
{
    check_seq(seq);
    if (kv->seq_cells[seq] == 0) return -1;
    kv_pos m = INT32_MAX;
    for (int i = 0; i < kv->cells_end; i++)
        if (kv_seqset_has(&kv->seqs[i], seq) && kv->pos[i] < m) m = kv->pos[i];
    return m;
}

kv_pos kv_seq_pos_max(const kv_cache *kv, kv_seq seq)
{
    check_seq(seq);
    if (kv->seq_cells[seq] == 0) return -1;
    kv_pos m = -1;
    for (int i = 0; i < kv->cells_end; i++)
        if (kv_seqset_has(&kv->seqs[i], seq) && kv->pos[i] > m) m = kv->pos[i];
    return m;
}

int kv_seq_cells(const kv_cache *kv, kv_seq seq)
{
    check_seq(seq);
    return kv->seq_cells[seq];
}

int kv_seq_owned(const kv_cache *kv, kv_seq seq)
{
    check_seq(seq);
    return kv->seq_owned[seq];
}

void kv_excl_counts(const kv_cache *kv, int32_t *out)
{
    memset(out, 0, KV_MAX_SEQ * sizeof *out);
    for (int i = 0; i < kv->cells_end; i++) {
        if (kv->pos[i] < 0) continue;
        const kv_seqset *s = &kv->seqs[i];
        int n = 0;
        for (int w = 0; w < KV_MAX_SEQ / 64; w++) n += __builtin_popcountll(s->w[w]);
        if (n == 1) out[kv->owner[i]]++;
    }
}

void kv_clear(kv_cache *kv)
{
    for (int i = 0; i < kv->cells_end; i++) {
        kv->pos[i] = -1;
        kv->owner[i] = -1;
        memset(&kv->seqs[i], 0, sizeof(kv->seqs[i]));
    }
    memset(kv->seq_cells, 0, sizeof(kv->seq_cells));
    memset(kv->seq_owned, 0, sizeof(kv->seq_owned));
    kv->n_used = 0;
    kv->cells_end = 0;
    kv->free_lo = 0;
}

/* ---- self-check ------------------------------------------------------- */

bool kv_check(const kv_cache *kv)
{
    int n = kv->p.n_ctx, used = 0, end = 0, lo = n;
    int cells[KV_MAX_SEQ] = {0}, owned[KV_MAX_SEQ] = {0};
    for (int i = 0; i < n; i++) {
        const kv_seqset *set = &kv->seqs[i];
        if (kv->pos[i] < 0) {
            if (kv->pos[i] != -1 || kv->owner[i] != -1 || !set_empty(set)) return false;
            if (lo == n) lo = i;
            continue;
        }
        if (set_empty(set) || kv->owner[i] < 0 || kv->owner[i] >= KV_MAX_SEQ ||
            !kv_seqset_has(set, kv->owner[i]))
            return false;
        used++;
        end = i + 1;
        owned[kv->owner[i]]++;
        for (int w = 0; w < KV_WORDS; w++)
            for (uint64_t bits = set->w[w]; bits; bits &= bits - 1)
                cells[w * 64 + __builtin_ctzll(bits)]++;
    }
    if (used != kv->n_used || end != kv->cells_end || lo != kv->free_lo) return false;
    return memcmp(cells, kv->seq_cells, sizeof(cells)) == 0 &&
           memcmp(owned, kv->seq_owned, sizeof(owned)) == 0;
}
