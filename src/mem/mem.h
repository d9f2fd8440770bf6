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
 *   On a hybrid model (docs/hybrid.md) a sequence also has a recurrent
 *   state, valid at one position (src/kv/rs.h): its live state at its end
 *   and checkpoints.  It is not shared by membership: a share copies the
 *   source's state at the share's end, a keep rewinds to a checkpoint, and
 *   both go only as far as a state exists (they return how far they went).
 *
 *   With sliding-window layers whose cells are apart (model_ctx_kv_swa),
 *   those layers' state at P is their cells [P - n_win, P): kept at each
 *   sequence's end and at its checkpoints (pins), freed elsewhere, shared
 *   by membership.  A share or a keep goes as far as such a window exists,
 *   as on a hybrid; the global layers' cells are what the counts below
 *   count (a sequence's window cells are never more than those).
 *
 *   An image is a sequence's state for positions [p0, p1) copied out of the
 *   cache: what the RAM tier holds and a file stores.  Its layout:
 *
 *     image : [p1 - p0][n_layer][ K row (k_row_bytes) | V row (v_row_bytes) ]
 *             then, on a hybrid, its states (state_bytes in all):
 *               the recurrent state at p1
 *               [RS_MAX_CKPT] int32 positions of checkpoints in (p0, p1), -1 unused
 *               [RS_MAX_CKPT] their states (zeros where unused)
 *             or, with windows apart, the last two windows (state_bytes):
 *               int32 lo: the rows below hold positions [lo, p1)
 *               [2 n_win][window layers][ K row | V row ] of positions
 *               p1 - 2 n_win .. p1 - 1 (zeros before lo)
 *             (the rows before it are then the global layers')
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
#include "../kv/rs.h"
#include "../model/model.h"

typedef struct mem mem;

/* What an image's bytes are laid out by: a file records it, and restoring
 * an image of another layout is refused. */
typedef struct mem_layout {
    tq_type type_k, type_v;     /* the cells' K and V types */
    int32_t n_layer;
    size_t k_row_bytes, v_row_bytes;
    size_t state_bytes;         /* an image's states section (0: not a hybrid) */
} mem_layout;

/* ---- create / destroy ---- */

/* The memory of the sequences that run in ctx (ctx keeps owning the
 * storage: the forward pass writes it).  PK_ENOMEM. */
pk_status mem_new(model_ctx *ctx, mem **out);
void mem_free(mem *m);                          /* NULL is a no-op */

/* ---- sequence operations ---- */

/* dst shares src's state at positions [p0, p1) (p1 < 0: to src's end):
 * nothing is copied, and from now on neither can change it for the other.
 * Returns the end of what dst holds now.  On a hybrid, when dst's state is
 * not already past p0, dst takes a copy of src's recurrent state at the
 * end: the share stops at the last position <= p1 where src has one
 * (p0 when none, sharing nothing, or no state slot is free). */
int32_t mem_share(mem *m, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1);
/* seq keeps only its positions [0, n), on a hybrid [0, k) for the largest
 * k <= n it can be continued from (mem_can_resume).  Returns what it
 * keeps. */
int32_t mem_keep(mem *m, kv_seq seq, kv_pos n);
/* Hybrids: seq's checkpoints in (lo, hi] move to dst (parking a history
 * of hi positions whose slot keeps only [0, lo)); a no-op on
 * attention-only models. */
void mem_give_checkpoints(mem *m, kv_seq seq, kv_seq dst, kv_pos lo, kv_pos hi);
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
 * recomputing anything.  Attention-only models: always; hybrids: at 0, at
 * its state's position and at its checkpoints. */
bool mem_can_resume(const mem *m, kv_seq seq, kv_pos pos);
/* Hybrids: keep a checkpoint of seq when its state reaches pos (the
 * forward pass ends a chunk there; one request a sequence, the last one
 * wins).  A no-op on attention-only models. */
void mem_checkpoint_at(mem *m, kv_seq seq, kv_pos pos);
/* The positions seq can be continued at besides 0, ascending, at most
 * MEM_MAX_RESUME; returns the count (0 on attention-only models, where
 * every position can). */
#define MEM_MAX_RESUME (RS_MAX_CKPT + 1)
int mem_resume_points(const mem *m, kv_seq seq, kv_pos *out);
bool mem_hybrid(const mem *m);
/* A history can be continued only at its resume points (a hybrid, or
 * sliding windows apart); else at every position it holds. */
bool mem_resume_limited(const mem *m);
/* Windows apart: the positions before a token its window layers read (0:
 * none apart), the window cells in use, one window cell's bytes. */
int32_t mem_window(const mem *m);
int32_t mem_window_used(const mem *m);
size_t mem_window_pos_bytes(const mem *m);

/* ---- speculation ----
 *
 * A step that verifies guesses writes seq's cells and state past what the
 * sampler then keeps.  Cells are cut back; a recurrent state cannot be, so
 * on a hybrid the step starts with a checkpoint at its first position
 * (made as the step begins, without cutting it: the weights are still
 * read once) and a step whose guesses were not all kept goes back to it;
 * the caller then decodes the kept tokens again. */

/* seq (holding [0, pos), its state at pos) may verify guesses in the next
 * step: on a hybrid a checkpoint at pos is asked for, when a state slot is
 * free and seq is under RS_MAX_CKPT checkpoints (so none is evicted);
 * false, nothing asked, otherwise.  Attention-only models: true. */
bool mem_spec_begin(mem *m, kv_seq seq, kv_pos pos);
/* The step begun at pos is judged: seq keeps [0, n).  Returns where seq's
 * state is now: n when every position of the step was kept or on
 * attention-only models (the checkpoint goes); else pos (the checkpoint
 * becomes the state), or less when the checkpoint could not be made (a
 * keep to the one before it): [returned, n) is to be decoded again. */
kv_pos mem_spec_end(mem *m, kv_seq seq, kv_pos pos, kv_pos n);

/* ---- copies out of the cache and back ---- */

size_t mem_pos_bytes(const mem *m);             /* one position's state */
size_t mem_image_bytes(const mem *m, int32_t n);   /* an image of n positions */
mem_layout mem_get_layout(const mem *m);
/* The positions [0, k) seq holds without a gap, for the largest k <= n:
 * how much of a history an image can take. */
int32_t mem_extent(const mem *m, kv_seq seq, int32_t n);
/* seq's state at [p0, p1) as a new image (malloc'ed, the caller frees);
 * NULL when a position is missing (on a hybrid: no state at p1) or memory
 * is short.  Changes nothing. */
uint8_t *mem_copy_out(const mem *m, kv_seq seq, kv_pos p0, kv_pos p1);
/* From an image of [i0, i1): its positions [p0, p1) placed in free cells
 * of seq, charged to seq, and on a hybrid the image's state at p1 as seq's
 * (p1 must be i1 or one of its checkpoints: PK_ECONFLICT otherwise) and
 * its checkpoints in (p0, p1) as seq's, where slots are free.  PK_EFULL
 * (nothing changed) when fewer cells or no state slot are free,
 * PK_ENOMEM. */
pk_status mem_copy_in(mem *m, kv_seq seq, kv_pos p0, kv_pos p1, const uint8_t *image, kv_pos i0, kv_pos i1);
/* The last position <= p an image of [i0, i1) can be copied in up to:
 * p on attention-only models; on a hybrid i1 or a checkpoint of the
 * image, i0 when none. */
kv_pos mem_image_resume(const mem *m, const uint8_t *image, kv_pos i0, kv_pos i1, kv_pos p);

/* ---- what is held ---- */

int32_t mem_n_cells(const mem *m);              /* capacity */
size_t mem_state_bytes(const mem *m);           /* one recurrent state, 0: not a hybrid */
int32_t mem_states_used(const mem *m);          /* recurrent states held (live and checkpoints) */
int32_t mem_states_free(const mem *m);
int32_t mem_seq_states(const mem *m, kv_seq seq);   /* states charged to seq (live and checkpoints) */
int32_t mem_used(const mem *m);                 /* cells in use */
int32_t mem_seq_cells(const mem *m, kv_seq seq);   /* cells seq is in */
int32_t mem_seq_owned(const mem *m, kv_seq seq);   /* cells charged to seq */
size_t mem_seq_bytes(const mem *m, kv_seq seq);    /* bytes charged to seq: cells and states */
/* The part of it besides its global cells: recurrent states, window cells. */
size_t mem_seq_state_bytes(const mem *m, kv_seq seq);
/* The positions in [p0, p1) that both a and b hold the same state for. */
int32_t mem_common(const mem *m, kv_seq a, kv_seq b, kv_pos p0, kv_pos p1);
/* For every sequence id, what dropping it alone would free, in cells:
 * out[KV_MAX_SEQ].  One pass. */
void mem_excl_counts(const mem *m, int32_t *out);
/* The lowest position seq lost (cut back, dropped, shifted) since the
 * last call for it, INT32_MAX when none; 0 before the first call.  KV
 * events (eng_kvev.c) learn from it which of a holder's blocks still
 * stand: below it, seq's state is what it was. */
int32_t mem_take_cut(mem *m, kv_seq seq);
/* True when seq holds exactly the positions [0, n) (n = 0: nothing). */
bool mem_holds(const mem *m, kv_seq seq, int32_t n);

/* Every invariant above, recomputed from the cells and states (each
 * state's owner holds the cells below its position); true when they hold. */
bool mem_check(const mem *m);

#endif
