/*
 * mem.h - a sequence's memory: the one seam between the engine and the
 * state a sequence carries from one step to the next.
 *
 * DESIGN
 *   The engine speaks of histories, pools, parked and spilled
 *   conversations; this module speaks of what their state is made of and
 *   offers the few operations they need.  Today a sequence's state is its
 *   attention cells (src/kv: cells with sets of sequence ids, shared by
 *   membership).  A hybrid model adds a recurrent state valid at exactly one
 *   position, a sliding-window layer frees cells behind its window,
 *   speculation rolls back: each of those changes what the operations below
 *   do, never who calls them.  Placement, pools, parking, the RAM tier, slot
 *   files and --pool-dir call only this module; src/kv is called from here
 *   and from the forward pass (src/model), nowhere else.
 *
 *     engine ──▶ mem_share / mem_keep / mem_drop / mem_copy_out / mem_copy_in
 *                  │
 *                  └─▶ kv_* (cells: positions, sequence sets, owners, K/V rows)
 *     model_decode ──▶ kv_* (the forward pass writes the batch's cells)
 *
 *   An image is a sequence's state for positions [p0, p1) copied out of the
 *   cache: what the RAM tier holds and a file stores.  Its layout:
 *
 *     image : [p1 - p0][n_layer][ K row (k_row_bytes) | V row (v_row_bytes) ]
 *
 *   mem_image_bytes(m, n) is its size; mem_layout() is what a file records
 *   so a reader can refuse an image of another shape.
 *
 * INVARIANTS (mem_check)
 *   - Shared state is immutable: an operation never changes what another
 *     sequence sees (a share adds members, a drop removes one; the position
 *     shift refuses cells that more than one sequence holds).
 *   - Ownership adds up: every cell in use is charged to exactly one
 *     sequence, so the sum of mem_seq_owned over all sequences is
 *     mem_used.
 *   - A sequence can be continued from position P when it holds [0, P) and
 *     a checkpoint at P (mem_can_resume): on attention-only models every
 *     prefix is a checkpoint.
 *
 * COST
 *   Counts (mem_used, mem_seq_cells, mem_seq_owned) are O(1).  Sequence
 *   operations, mem_common and mem_extent scan the cells in use, O(n_ctx).
 *   mem_copy_out / mem_copy_in move (p1 - p0) * mem_pos_bytes() bytes.
 *
 * Errors: a sequence id outside [0, KV_MAX_SEQ) or a range with p1 < p0 is
 * a caller bug (ASSERT).  Threads: the engine thread only.
 */
#ifndef MEM_H
#define MEM_H

#include "../kv/kv.h"
#include "../model/model.h"

typedef struct mem mem;

/* What an image's bytes are laid out by: a file records it, and restoring
 * an image of another layout is refused. */
typedef struct mem_layout {
    tq_type type;               /* the cells' K/V type */
    int32_t n_layer;
    size_t k_row_bytes, v_row_bytes;
} mem_layout;

/* ---- create / destroy ---- */

/* The memory of the sequences that run in ctx (ctx keeps owning the
 * storage: the forward pass writes it).  PK_ENOMEM. */
pk_status mem_new(model_ctx *ctx, mem **out);
void mem_free(mem *m);                          /* NULL is a no-op */

/* ---- sequence operations ---- */

/* dst shares src's state at positions [p0, p1) (p1 < 0: to src's end):
 * nothing is copied, and from now on neither can change it for the other. */
void mem_share(mem *m, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1);
/* seq keeps only its positions [0, n). */
void mem_keep(mem *m, kv_seq seq, kv_pos n);
/* seq lets go of everything; state nobody else holds is freed. */
void mem_drop(mem *m, kv_seq seq);
/* seq lets go of its positions [0, n) (it then shares them again from
 * another sequence: an attach that replaces equal cells by a pool's). */
void mem_drop_prefix(mem *m, kv_seq seq, kv_pos n);
/* seq's positions [p0, p1) are charged to seq from now on (a pool taking
 * the cells it was made from): only the accounting changes. */
void mem_charge(mem *m, kv_seq seq, kv_pos p0, kv_pos p1);
/* Context shift: drops seq's [n_keep, n_keep + n_discard) and moves what
 * follows back by n_discard.  PK_ECONFLICT (nothing changed) when seq
 * shares any of its state; on any other failure seq keeps only
 * [0, n_keep): nothing half-moved stays. */
pk_status mem_shift(mem *m, kv_seq seq, kv_pos n_keep, kv_pos n_discard);
/* Frees every sequence's state. */
void mem_clear(mem *m);

/* ---- checkpoints ---- */

/* True when seq, holding [0, pos), can be continued at pos without
 * recomputing anything.  Attention-only models: always. */
bool mem_can_resume(const mem *m, kv_seq seq, kv_pos pos);

/* ---- copies out of the cache and back ---- */

size_t mem_pos_bytes(const mem *m);             /* one position's state */
size_t mem_image_bytes(const mem *m, int32_t n);   /* an image of n positions */
mem_layout mem_get_layout(const mem *m);
/* The positions [0, k) seq holds without a gap, for the largest k <= n:
 * how much of a history an image can take. */
int32_t mem_extent(const mem *m, kv_seq seq, int32_t n);
/* seq's state at [p0, p1) as a new image (malloc'ed, the caller frees);
 * NULL when a position is missing or memory is short.  Changes nothing. */
uint8_t *mem_copy_out(const mem *m, kv_seq seq, kv_pos p0, kv_pos p1);
/* The image's state placed in free cells at positions [p0, p1) of seq,
 * charged to seq.  PK_EFULL (nothing changed) when fewer cells are free,
 * PK_ENOMEM. */
pk_status mem_copy_in(mem *m, kv_seq seq, kv_pos p0, kv_pos p1, const uint8_t *image);

/* ---- what is held ---- */

int32_t mem_n_cells(const mem *m);              /* capacity */
int32_t mem_used(const mem *m);                 /* cells in use */
int32_t mem_seq_cells(const mem *m, kv_seq seq);   /* cells seq is in */
int32_t mem_seq_owned(const mem *m, kv_seq seq);   /* cells charged to seq */
size_t mem_seq_bytes(const mem *m, kv_seq seq);    /* bytes charged to seq */
/* The positions in [p0, p1) that both a and b hold the same state for. */
int32_t mem_common(const mem *m, kv_seq a, kv_seq b, kv_pos p0, kv_pos p1);
/* For every sequence id, what dropping it alone would free, in cells:
 * out[KV_MAX_SEQ].  One pass. */
void mem_excl_counts(const mem *m, int32_t *out);
/* True when seq holds exactly the positions [0, n) (n = 0: nothing). */
bool mem_holds(const mem *m, kv_seq seq, int32_t n);

/* Every invariant above, recomputed from the cells; true when they hold. */
bool mem_check(const mem *m);

#endif
