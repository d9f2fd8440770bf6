/*
 * rs.h - recurrent states: what a hybrid model's DeltaNet layers carry from
 * one token to the next, per sequence, and checkpoints of it
 * (docs/hybrid.md).
 *
 * DESIGN
 *   One array of n_slots state slots, sized at start beside the KV cache.
 *   A slot holds one whole state, every recurrent layer's convolution
 *   window and delta-rule matrices, contiguous:
 *
 *     slot : [n_layer][ conv (conv_floats) | ssm (ssm_floats) ]   F32
 *
 *   and says whose it is and where it is valid: { seq, pos, kind }.  A
 *   state at pos has read the sequence's tokens [0, pos).
 *
 *     RS_LIVE  the sequence's state at its end: the one the forward pass
 *              reads and advances (at most one a sequence);
 *     RS_CKPT  a checkpoint, a copy of the live state made at pos, from
 *              which the sequence can be continued again (at most
 *              RS_MAX_CKPT a sequence).
 *
 *   A state cannot be shared by membership (each sequence writes its own)
 *   nor cut back: continuing a sequence at a position P needs a slot of
 *   it at P, and giving a sequence another's prefix copies a slot.  Every
 *   slot in use is charged to its seq, so rs_used = sum of rs_seq_slots.
 *   Checkpoints are a cache: a live state that finds no free slot takes a
 *   checkpoint's.
 *
 * Arguments: a slot or sequence id out of range is a caller bug (ASSERT).
 * Threads: the engine thread only (the forward pass writes the live slots
 * of its batch's sequences, from the pool's threads, inside model_decode).
 */
#ifndef RS_H
#define RS_H

#include "kv.h"

#define RS_MAX_CKPT 4

typedef enum rs_kind { RS_FREE = 0, RS_LIVE, RS_CKPT } rs_kind;

typedef struct rs_params {
    int n_layer;           /* recurrent layers */
    size_t conv_floats;    /* per layer: (d_conv - 1) x channels */
    size_t ssm_floats;     /* per layer: value heads x d_v x d_k */
    int n_slots;
} rs_params;

typedef struct rs_cache rs_cache;

/* PK_EINVAL for bad params, PK_ENOMEM. */
pk_status rs_new(const rs_params *p, rs_cache **out);
void rs_free(rs_cache *rs);                     /* NULL is a no-op */
const rs_params *rs_get_params(const rs_cache *rs);
size_t rs_state_bytes(const rs_cache *rs);      /* one slot */

/* A slot's state: all of it, or one recurrent layer's parts. */
float *rs_data(rs_cache *rs, int slot);
float *rs_conv(rs_cache *rs, int slot, int layer);
float *rs_ssm(rs_cache *rs, int slot, int layer);
kv_pos rs_slot_pos(const rs_cache *rs, int slot);
kv_seq rs_slot_seq(const rs_cache *rs, int slot);
rs_kind rs_slot_kind(const rs_cache *rs, int slot);

/* seq's live slot, -1 when it has none; the position it is valid at, -1
 * when none. */
int rs_live(const rs_cache *rs, kv_seq seq);
kv_pos rs_pos(const rs_cache *rs, kv_seq seq);
/* seq's slot (live or checkpoint) valid at pos, -1 when none. */
int rs_find(const rs_cache *rs, kv_seq seq, kv_pos pos);
/* The positions seq can be continued at (its live state's and its
 * checkpoints'), ascending, at most RS_MAX_CKPT + 1; returns the count. */
int rs_positions(const rs_cache *rs, kv_seq seq, kv_pos *out);

/* seq's live state: a zeroed one at position 0 (the start of a sequence),
 * replacing any it had.  A live state takes a checkpoint's slot when none
 * is free (of the sequence with the most, the one nearest another of its
 * states): PK_EFULL when every slot holds a live state. */
pk_status rs_begin(rs_cache *rs, kv_seq seq);
/* seq's live state advanced to pos (the forward pass, after a chunk). */
void rs_advance(rs_cache *rs, kv_seq seq, kv_pos pos);
/* dst's live state becomes a copy of slot (any sequence's, live or a
 * checkpoint), at the slot's position; dst's checkpoints past that
 * position go.  PK_EFULL when dst had no live slot and none is free. */
pk_status rs_copy(rs_cache *rs, int slot, kv_seq dst);
/* A checkpoint of seq at pos from a state's bytes (an image copied back):
 * a free slot only, nothing evicted.  PK_EFULL without one or past
 * RS_MAX_CKPT; PK_OK when seq has a state at pos already. */
pk_status rs_put_ckpt(rs_cache *rs, kv_seq seq, kv_pos pos, const float *state);
/* A checkpoint of seq's live state at its position (nothing when one is
 * there already).  Past RS_MAX_CKPT the checkpoint nearest another goes.
 * PK_EFULL when no slot is free, PK_ENOTFOUND when seq has no live state. */
pk_status rs_checkpoint(rs_cache *rs, kv_seq seq);
/* seq continues from pos: its slot at pos becomes the live state (the live
 * one at pos stays; a checkpoint is copied), and its slots past pos go.
 * PK_ENOTFOUND (nothing changed) when it has none at pos. */
pk_status rs_rewind(rs_cache *rs, kv_seq seq, kv_pos pos);
/* seq continues from its checkpoint at pos, which becomes the live state
 * with no copy kept (a speculation's step rolled back); the live slot and
 * the slots past pos go.  PK_ENOTFOUND (nothing changed) without one. */
pk_status rs_restore(rs_cache *rs, kv_seq seq, kv_pos pos);
/* seq's checkpoint at pos goes (none: nothing). */
void rs_drop_ckpt(rs_cache *rs, kv_seq seq, kv_pos pos);
/* seq's checkpoints, and whether one is at pos. */
int rs_n_ckpts(const rs_cache *rs, kv_seq seq);
bool rs_has_ckpt(const rs_cache *rs, kv_seq seq, kv_pos pos);
/* seq's checkpoints in (lo, hi] become dst's (a history parked under
 * another id, holding [0, hi), takes the ones its slot, cut to lo, no
 * longer needs), as many as dst has room for. */
void rs_give_ckpts(rs_cache *rs, kv_seq seq, kv_seq dst, kv_pos lo, kv_pos hi);
/* Every slot of seq goes, or only its checkpoints. */
void rs_drop(rs_cache *rs, kv_seq seq);
void rs_drop_ckpts(rs_cache *rs, kv_seq seq);
void rs_clear(rs_cache *rs);

int rs_used(const rs_cache *rs);                /* slots in use */
int rs_free_slots(const rs_cache *rs);
int rs_seq_slots(const rs_cache *rs, kv_seq seq);   /* slots charged to seq */

/* Recomputes every count (used, per sequence, one live slot a sequence,
 * at most RS_MAX_CKPT checkpoints, free slots blank); true when consistent. */
bool rs_check(const rs_cache *rs);

#endif
