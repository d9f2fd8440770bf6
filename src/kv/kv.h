/*
 * kv.h - the KV cache: cells that carry sets of sequence ids.
 *
 * DESIGN
 *   One array of n_ctx cells.  Cell i holds, for every layer, one K row
 *   (n_embd_k values of type_k) and one V row (n_embd_v values of type_v),
 *   plus a position and a set of sequence ids.  The types are the cache's
 *   (F16 by default; F32, BF16 or a 32-value block format such as Q8_0):
 *   a row is tq_row_size bytes, so a quantized cell is stored, shared and
 *   copied as the bytes it is.
 *
 *     k[layer] : [n_ctx][n_embd_k]   v[layer] : [n_ctx][n_embd_v]
 *     cell[i]  : { pos, seqs (bitset of KV_MAX_SEQ), owner }
 *
 *   A cell with an empty set is free (pos = -1).  Sharing is membership:
 *   kv_seq_cp adds dst to the sets of src's cells (no data moves), kv_seq_rm
 *   removes a sequence, and a cell is freed when the last member leaves, so
 *   freeing is reference counting by membership.
 *
 *   A token of sequence s at position p attends to every cell whose set holds
 *   s and whose pos <= p.
 *
 *   Ownership accounting: each used cell is charged to exactly one owner, the
 *   sequence that materialized it (the first member given to kv_cell_set).
 *   When the owner leaves a cell that others still hold, the charge moves to
 *   the lowest remaining member.  So kv_seq_owned(s) summed over all s equals
 *   kv_used().
 *
 *   Shared cells are immutable: kv_seq_add refuses to move a cell that more
 *   than one sequence holds.
 *
 * COST
 *   kv_used, kv_cells_end, kv_seq_cells and kv_seq_owned are O(1) (kept
 *   exact after every call).  kv_find_slot starts at the lowest free cell.
 *   The sequence operations and kv_seq_pos_min / kv_seq_pos_max scan the
 *   cells below kv_cells_end, O(n_ctx) at worst.
 *
 * Arguments: a cell index outside [0, n_ctx), a sequence id outside
 * [0, KV_MAX_SEQ) (other than the documented "seq < 0" of kv_seq_rm) or
 * kv_cell_set on a used cell is a caller bug and ASSERTs.
 *
 * Threads: the engine thread only.
 */
#ifndef KV_H
#define KV_H

#include "../common/pk.h"
#include "../tensor/tq.h"

#define KV_MAX_SEQ 256

typedef int32_t kv_pos;
typedef int32_t kv_seq;

typedef struct kv_seqset { uint64_t w[KV_MAX_SEQ / 64]; } kv_seqset;

static inline bool kv_seqset_has(const kv_seqset *s, kv_seq id)
{
    return (s->w[id >> 6] >> (id & 63)) & 1;
}

typedef struct kv_params {
    int n_layer;
    int n_ctx;          /* cells */
    int n_embd_k;       /* K values per cell per layer (n_head_kv * head_dim_k) */
    int n_embd_v;
    tq_type type_k;     /* any type tq_row_size knows; n_embd_k a multiple of its block */
    tq_type type_v;
} kv_params;

typedef struct kv_cache kv_cache;

/* Allocates the cells and K/V storage (zeroed).  PK_EINVAL for bad params,
 * PK_ENOMEM. */
pk_status kv_new(const kv_params *p, kv_cache **out);
void kv_free(kv_cache *kv);                      /* NULL is a no-op */
const kv_params *kv_get_params(const kv_cache *kv);
size_t kv_size_bytes(const kv_cache *kv);        /* K + V storage */

/* Storage rows (types kv_get_params()->type_k / type_v).  Each layer's K and V regions
 * start 64-byte aligned; row r is at base + r * row bytes. */
void *kv_k_row(kv_cache *kv, int layer, int cell);
void *kv_v_row(kv_cache *kv, int layer, int cell);
const void *kv_k_base(const kv_cache *kv, int layer);   /* row 0; stride = row bytes */
const void *kv_v_base(const kv_cache *kv, int layer);
size_t kv_k_row_bytes(const kv_cache *kv);
size_t kv_v_row_bytes(const kv_cache *kv);

/* Cell metadata. */
kv_pos kv_cell_pos(const kv_cache *kv, int cell);           /* -1 when free */
const kv_seqset *kv_cell_seqs(const kv_cache *kv, int cell);
kv_seq kv_cell_owner(const kv_cache *kv, int cell);          /* -1 when free */
int kv_used(const kv_cache *kv);       /* cells with a non-empty set */
int kv_cells_end(const kv_cache *kv);  /* 1 + highest used cell index (0 when empty) */

/* Finds n free cells for a batch, lowest indices first, and writes their
 * indices to cells[0..n).  Marks nothing: the caller fills the K/V rows and
 * then calls kv_cell_set.  PK_EFULL (cells untouched) when fewer than n are
 * free; PK_EINVAL when n < 0. */
pk_status kv_find_slot(const kv_cache *kv, int n, int *cells);

/* Occupies a free cell with position pos and the given members (n_seqs >= 1,
 * ids in [0, KV_MAX_SEQ), pos >= 0); the first member becomes its owner.
 * A repeated id counts once. */
void kv_cell_set(kv_cache *kv, int cell, kv_pos pos, const kv_seq *seqs, int n_seqs);

/* Sequence operations.  p0 < 0 means 0, p1 < 0 means +infinity; the range
 * is [p0, p1).  seq < 0 in kv_seq_rm means every sequence. */
void kv_seq_rm(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1);
void kv_seq_cp(kv_cache *kv, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1);
void kv_seq_keep(kv_cache *kv, kv_seq seq);    /* drops every other sequence */
/* Adds delta to the positions of seq's cells in [p0, p1); cells that would go
 * below 0 leave seq.  PK_EINVAL (nothing changed) when one of the cells is
 * held by another sequence too (checked even for delta 0), or when a
 * position would pass INT32_MAX. */
pk_status kv_seq_add(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1, kv_pos delta);
/* Charges seq's cells in [p0, p1) to seq (a pool taking the cells it was
 * made from): only owners change, so the per-owner counts still add up. */
void kv_seq_take(kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1);
/* Cells in [p0, p1) that both a and b hold. */
int kv_seq_common(const kv_cache *kv, kv_seq a, kv_seq b, kv_pos p0, kv_pos p1);
kv_pos kv_seq_pos_min(const kv_cache *kv, kv_seq seq);   /* -1 when empty */
kv_pos kv_seq_pos_max(const kv_cache *kv, kv_seq seq);   /* -1 when empty */
int kv_seq_cells(const kv_cache *kv, kv_seq seq);        /* cells seq is in */
int kv_seq_owned(const kv_cache *kv, kv_seq seq);        /* cells charged to seq */
/* For every sequence id, the cells it alone holds (what dropping it would
 * free): out[KV_MAX_SEQ].  One pass over the used cells. */
void kv_excl_counts(const kv_cache *kv, int32_t *out);
void kv_clear(kv_cache *kv);     /* frees every cell; K/V bytes are left as they are */

/* Self-check for tests and debug builds: recomputes every count from the
 * cells and compares (used, cells_end, lowest free cell, per-sequence cells
 * and owned cells, free cells blank, owner a member).  O(n_ctx).
 * Returns true when consistent. */
bool kv_check(const kv_cache *kv);

#endif
