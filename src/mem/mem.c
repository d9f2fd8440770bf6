/*
 * mem.c - a sequence's memory over the KV cells and, on hybrids, the
 * recurrent states (mem.h).
 *
 * Every operation maps to the cells' membership operations and the state
 * slots' copies; the K/V row copies of images are written once here (the
 * RAM tier, slot files and --pool-dir all move rows through mem_copy_out /
 * mem_copy_in).
 */
#include <stdlib.h>
#include <string.h>

#include "mem.h"

struct mem {
    model_ctx *ctx;             /* borrowed: the forward pass owns the storage */
    kv_cache *kv;               /* model_ctx_kv(ctx) */
    kv_cache *kvw;              /* model_ctx_kv_swa(ctx): the window layers' cells, NULL unless apart */
    int32_t n_win;              /* kvw: the positions before a token its window layers read */
    rs_cache *rs;               /* model_ctx_rs(ctx): NULL unless a hybrid */
    int32_t cut[KV_MAX_SEQ];    /* the lowest position each sequence lost since mem_take_cut */
};

/* An image's window section spans two windows (win_out). */
#define WIN_SPAN(m) (2 * (m)->n_win)

/* One position's rows, every layer of kv's K then V, out of cell into buf
 * or back; returns the byte after them. */
static uint8_t *rows_out(const kv_cache *kv, int cell, uint8_t *buf)
{
    const size_t kb = kv_k_row_bytes(kv), vb = kv_v_row_bytes(kv);
    for (int il = 0; il < kv_get_params(kv)->n_layer; il++, buf += kb + vb) {
        memcpy(buf, kv_k_row((kv_cache *)kv, il, cell), kb);
        memcpy(buf + kb, kv_v_row((kv_cache *)kv, il, cell), vb);
    }
    return buf;
}

static const uint8_t *rows_in(kv_cache *kv, int cell, const uint8_t *buf)
{
    const size_t kb = kv_k_row_bytes(kv), vb = kv_v_row_bytes(kv);
    for (int il = 0; il < kv_get_params(kv)->n_layer; il++, buf += kb + vb) {
        memcpy(kv_k_row(kv, il, cell), buf, kb);
        memcpy(kv_v_row(kv, il, cell), buf + kb, vb);
    }
    return buf;
}

/* seq's cells at p and past go: every removal passes here, so
 * mem_take_cut knows what still stands. */
static void rm_from(mem *m, kv_seq seq, kv_pos p0, kv_pos p1)
{
    kv_seq_rm(m->kv, seq, p0, p1);
    if (m->kvw) kv_seq_rm(m->kvw, seq, p0, p1);
    p0 = MAX(p0, 0);
    if (seq < 0)
        for (kv_seq s = 0; s < KV_MAX_SEQ; s++) m->cut[s] = MIN(m->cut[s], p0);
    else m->cut[seq] = MIN(m->cut[seq], p0);
}

int32_t mem_take_cut(mem *m, kv_seq seq)
{
    ASSERT(seq >= 0 && seq < KV_MAX_SEQ);
    int32_t c = m->cut[seq];
    m->cut[seq] = INT32_MAX;
    return c;
}

pk_status mem_new(model_ctx *ctx, mem **out)
{
    mem *m = calloc(1, sizeof *m);
    *out = m;
    if (!m) return PK_ENOMEM;
    m->ctx = ctx;
    m->kv = model_ctx_kv(ctx);
    m->kvw = model_ctx_kv_swa(ctx);
    m->n_win = model_swa_window(ctx);
    m->rs = model_ctx_rs(ctx);
    return PK_OK;
}

/* ---- sliding windows apart ----
 *
 * A window layer's state at P is its cells [P - n_win, P): a sequence can
 * be continued where it holds them, so these play the part a hybrid's
 * checkpoints play, held as cells (shared by membership, kept by pins). */

/* held[q - p0]: seq holds a window cell at q, for q in [p0, p1). */
static void win_held_map(const mem *m, kv_seq seq, kv_pos p0, kv_pos p1, bool *held)
{
    memset(held, 0, (size_t)MAX(p1 - p0, 0) * sizeof *held);
    for (int c = 0, end = kv_cells_end(m->kvw); c < end; c++) {
        kv_pos pos = kv_cell_pos(m->kvw, c);
        if (pos >= p0 && pos < p1 && kv_seqset_has(kv_cell_seqs(m->kvw, c), seq)) held[pos - p0] = true;
    }
}

/* The largest k <= n at which seq holds its window [k - n_win, k). */
static kv_pos win_resume(const mem *m, kv_seq seq, kv_pos n)
{
    if (n <= 0) return 0;
    bool *held = malloc((size_t)n * sizeof *held);
    if (!held) return 0;
    win_held_map(m, seq, 0, n, held);
    kv_pos best = 0;
    for (kv_pos q = 1, run = 0; q <= n; q++) {
        run = held[q - 1] ? run + 1 : 0;
        if (run >= MIN(q, m->n_win)) best = q;
    }
    free(held);
    return best;
}

static bool win_at(const mem *m, kv_seq seq, kv_pos p)
{
    return p <= 0 || win_resume(m, seq, p) == p;
}

/* dst joins src's window cells in [p0, p1) at the positions it holds none. */
static void win_share(mem *m, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1)
{
    p0 = MAX(p0, 0);
    if (p1 <= p0) return;
    bool *held = malloc((size_t)(p1 - p0) * sizeof *held);
    if (!held) return;
    win_held_map(m, dst, p0, p1, held);
    for (kv_pos q = p0; q < p1;) {
        if (held[q - p0]) {
            q++;
            continue;
        }
        kv_pos r = q;
        while (r < p1 && !held[r - p0]) r++;
        kv_seq_cp(m->kvw, src, dst, q, r);
        q = r;
    }
    free(held);
}

static size_t win_pos_bytes(const mem *m)
{
    return m->kvw ? (size_t)kv_get_params(m->kvw)->n_layer * (kv_k_row_bytes(m->kvw) + kv_v_row_bytes(m->kvw)) : 0;
}

bool mem_resume_limited(const mem *m)
{
    return m->rs || m->kvw;
}

void mem_free(mem *m)
{
    free(m);
}

bool mem_hybrid(const mem *m)
{
    return m->rs != NULL;
}

int32_t mem_share(mem *m, kv_seq src, kv_seq dst, kv_pos p0, kv_pos p1)
{
    if (p1 < 0) p1 = kv_seq_pos_max(m->kv, src) + 1;
    if (m->rs && rs_pos(m->rs, dst) <= p0) {
        /* dst continues at the end: it needs src's state there */
        kv_pos at[MEM_MAX_RESUME];
        int n = rs_positions(m->rs, src, at), k = n - 1;
        while (k >= 0 && at[k] > p1) k--;
        if (k < 0 || at[k] <= p0 || rs_copy(m->rs, rs_find(m->rs, src, at[k]), dst) != PK_OK) return p0;
        p1 = at[k];
    }
    if (m->kvw && kv_seq_pos_max(m->kv, dst) < p0) {
        /* dst continues at the end: it needs src's window there, and
         * takes every window src holds below it (a keep may stop at one;
         * its next step lets go of the others) */
        kv_pos k = win_resume(m, src, p1);
        if (k <= p0) return p0;
        p1 = k;
        win_share(m, src, dst, p0, p1);
    }
    if (p1 > p0) kv_seq_cp(m->kv, src, dst, p0, p1);
    return p1;
}

int32_t mem_keep(mem *m, kv_seq seq, kv_pos n)
{
    if (m->rs && rs_pos(m->rs, seq) != n) {
        kv_pos at[MEM_MAX_RESUME];
        int k = rs_positions(m->rs, seq, at) - 1;
        while (k >= 0 && at[k] > n) k--;
        if (k >= 0 && at[k] > 0) {
            n = at[k];
            pk_status st = rs_rewind(m->rs, seq, n);
            ASSERT(st == PK_OK);
        } else {
            n = 0;
            rs_drop(m->rs, seq);
        }
    }
    if (m->kvw) n = win_resume(m, seq, n);
    rm_from(m, seq, n, -1);
    if (m->kvw) {
        model_swa_unpin(m->ctx, seq, n);
        model_swa_trim(m->ctx, seq, n);
    }
    return n;
}

void mem_give_checkpoints(mem *m, kv_seq seq, kv_seq dst, kv_pos lo, kv_pos hi)
{
    if (m->rs) rs_give_ckpts(m->rs, seq, dst, lo, hi);
    if (!m->kvw) return;
    kv_pos pin[MODEL_SWA_PINS];
    for (int i = 0, n = model_swa_pins(m->ctx, seq, pin); i < n; i++)
        if (pin[i] > lo && pin[i] <= hi && win_at(m, seq, pin[i])) {
            win_share(m, seq, dst, pin[i] - m->n_win, pin[i]);
            model_swa_pin(m->ctx, dst, pin[i]);
        }
    model_swa_trim(m->ctx, dst, kv_seq_pos_max(m->kv, dst) + 1);
}

void mem_drop(mem *m, kv_seq seq)
{
    rm_from(m, seq, -1, -1);
    if (m->kvw) model_swa_unpin(m->ctx, seq, -1);
    if (m->rs) {
        rs_drop(m->rs, seq);
        model_rs_checkpoint_at(m->ctx, seq, -1);
    }
}

void mem_drop_prefix(mem *m, kv_seq seq, kv_pos n)
{
    /* the window layers keep their own cells: the positions come back
     * with the same tokens, so the same rows */
    kv_seq_rm(m->kv, seq, 0, n);
    m->cut[seq] = 0;
}

void mem_charge(mem *m, kv_seq seq, kv_pos p0, kv_pos p1)
{
    kv_seq_take(m->kv, seq, p0, p1);
    if (m->kvw) kv_seq_take(m->kvw, seq, p0, p1);
}

pk_status mem_shift(mem *m, kv_seq seq, kv_pos n_keep, kv_pos n_discard)
{
    if (m->rs) return PK_ECONFLICT;   /* a recurrent state cannot be moved */
    int32_t excl[KV_MAX_SEQ];
    kv_excl_counts(m->kv, excl);
    if (excl[seq] != kv_seq_cells(m->kv, seq)) return PK_ECONFLICT;
    if (m->kvw) {
        kv_excl_counts(m->kvw, excl);
        if (excl[seq] != kv_seq_cells(m->kvw, seq)) return PK_ECONFLICT;
    }
    rm_from(m, seq, n_keep, n_keep + n_discard);
    pk_status st = model_kv_shift(m->ctx, seq, n_keep + n_discard, -1, -n_discard);
    if (st != PK_OK) rm_from(m, seq, n_keep, -1);   /* nothing half-moved stays */
    return st;
}

void mem_clear(mem *m)
{
    kv_clear(m->kv);
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) m->cut[s] = 0;
    if (m->kvw) {
        kv_clear(m->kvw);
        for (kv_seq s = 0; s < KV_MAX_SEQ; s++) model_swa_unpin(m->ctx, s, -1);
    }
    if (m->rs) {
        rs_clear(m->rs);
        for (kv_seq s = 0; s < KV_MAX_SEQ; s++) model_rs_checkpoint_at(m->ctx, s, -1);
    }
}

bool mem_can_resume(const mem *m, kv_seq seq, kv_pos pos)
{
    if (m->kvw) return win_at(m, seq, pos);
    return !m->rs || pos == 0 || rs_find(m->rs, seq, pos) >= 0;
}

void mem_checkpoint_at(mem *m, kv_seq seq, kv_pos pos)
{
    if (m->kvw) model_swa_pin(m->ctx, seq, pos);
    if (m->rs && pos > 0 && rs_find(m->rs, seq, pos) < 0) model_rs_checkpoint_at(m->ctx, seq, pos);
}

bool mem_spec_begin(mem *m, kv_seq seq, kv_pos pos)
{
    if (!m->rs) return true;
    /* A checkpoint already at pos (a prompt's end) is the placement's: the
     * step's end would drop it or the rollback consume it. */
    if (rs_pos(m->rs, seq) != pos || rs_free_slots(m->rs) < 1 || rs_n_ckpts(m->rs, seq) >= RS_MAX_CKPT ||
        rs_has_ckpt(m->rs, seq, pos))
        return false;
    model_rs_checkpoint_at(m->ctx, seq, pos);
    return true;
}

kv_pos mem_spec_end(mem *m, kv_seq seq, kv_pos pos, kv_pos n)
{
    if (!m->rs || rs_pos(m->rs, seq) == n) {  /* cells cut back; a hybrid that kept every position */
        if (m->rs) rs_drop_ckpt(m->rs, seq, pos);    /* keeps the step's state */
        rm_from(m, seq, n, -1);
        return n;
    }
    if (rs_restore(m->rs, seq, pos) == PK_OK) {
        rm_from(m, seq, pos, -1);
        return pos;
    }
    return mem_keep(m, seq, MIN(n, pos));
}

int mem_resume_points(const mem *m, kv_seq seq, kv_pos *out)
{
    if (!m->kvw) return m->rs ? rs_positions(m->rs, seq, out) : 0;
    /* the pins and the end, where the window is whole */
    kv_pos at[MODEL_SWA_PINS + 1];
    int n_at = model_swa_pins(m->ctx, seq, at), n = 0;
    kv_pos end = kv_seq_pos_max(m->kv, seq) + 1;
    at[n_at++] = end;
    for (int i = 0; i < n_at; i++)
        if (at[i] > 0 && at[i] <= end && (n == 0 || out[n - 1] < at[i]) && win_at(m, seq, at[i])) out[n++] = at[i];
    return n;
}

/* ---- images ---- */

size_t mem_pos_bytes(const mem *m)
{
    return (size_t)kv_get_params(m->kv)->n_layer * (kv_k_row_bytes(m->kv) + kv_v_row_bytes(m->kv));
}

size_t mem_state_bytes(const mem *m)
{
    return m->rs ? rs_state_bytes(m->rs) : 0;
}

/* An image's states section: the state at its end, the checkpoints'
 * positions, their states (mem.h). */
static size_t section_bytes(const mem *m)
{
    if (m->kvw) return sizeof(int32_t) + (size_t)WIN_SPAN(m) * win_pos_bytes(m);
    return m->rs ? (1 + RS_MAX_CKPT) * rs_state_bytes(m->rs) + RS_MAX_CKPT * sizeof(int32_t) : 0;
}

size_t mem_image_bytes(const mem *m, int32_t n)
{
    return (size_t)MAX(n, 0) * mem_pos_bytes(m) + section_bytes(m);
}

mem_layout mem_get_layout(const mem *m)
{
    const kv_params *kp = kv_get_params(m->kv);
    return (mem_layout){ .type_k = kp->type_k, .type_v = kp->type_v, .n_layer = kp->n_layer, .k_row_bytes = kv_k_row_bytes(m->kv),
                         .v_row_bytes = kv_v_row_bytes(m->kv), .state_bytes = section_bytes(m) };
}

/* cell_of[pos - p0] = the cell of seq at pos, -1 where it holds none. */
static void cells_of(const kv_cache *kv, kv_seq seq, kv_pos p0, kv_pos p1, int *cell_of)
{
    for (kv_pos k = 0; k < p1 - p0; k++) cell_of[k] = -1;
    for (int c = 0, end = kv_cells_end(kv); c < end; c++) {
        kv_pos pos = kv_cell_pos(kv, c);
        if (pos >= p0 && pos < p1 && kv_seqset_has(kv_cell_seqs(kv, c), seq)) cell_of[pos - p0] = c;
    }
}

int32_t mem_extent(const mem *m, kv_seq seq, int32_t n)
{
    if (n <= 0) return 0;
    int *cell_of = malloc((size_t)n * sizeof *cell_of);
    if (!cell_of) return 0;
    cells_of(m->kv, seq, 0, n, cell_of);
    int32_t k = 0;
    while (k < n && cell_of[k] >= 0) k++;
    free(cell_of);
    return k;
}

/* The window section of an image of [p0, p1) spans two windows, so the
 * image can be continued anywhere in its last window (a retry one token
 * short of the end, a turn whose reply was shorter than the window):
 *   int32 lo: the rows are those of [lo, p1)
 *   [WIN_SPAN] rows of the window layers: slot j is position p1 - span + j
 *   (zeros before lo) */

static uint8_t *win_row(const mem *m, uint8_t *sec, kv_pos p1, kv_pos q)
{
    return sec + sizeof(int32_t) + (size_t)(q - (p1 - WIN_SPAN(m))) * win_pos_bytes(m);
}

static bool win_out(const mem *m, kv_seq seq, kv_pos p0, kv_pos p1, uint8_t *sec)
{
    kv_pos lo = MAX(p0, p1 - WIN_SPAN(m));
    int *cell_of = malloc((size_t)MAX(p1 - lo, 1) * sizeof *cell_of);
    if (!cell_of) return false;
    cells_of(m->kvw, seq, lo, p1, cell_of);
    memset(sec, 0, section_bytes(m));
    kv_pos from = p1;   /* the held run that ends at p1 */
    while (from > lo && cell_of[from - 1 - lo] >= 0) from--;
    for (kv_pos q = from; q < p1; q++) rows_out(m->kvw, cell_of[q - lo], win_row(m, sec, p1, q));
    memcpy(sec, &from, sizeof from);
    free(cell_of);
    return p1 - from >= MIN(m->n_win, p1 - p0);
}

static kv_pos win_lo(const uint8_t *sec)
{
    int32_t lo;
    memcpy(&lo, sec, sizeof lo);
    return lo;
}

/* seq's window cells [lo, p1) from an image's window section (its end i1). */
static pk_status win_in(mem *m, kv_seq seq, kv_pos lo, kv_pos p1, const uint8_t *sec, kv_pos i1)
{
    const int n = MAX(p1 - lo, 0);
    int *cells = malloc((size_t)MAX(n, 1) * sizeof *cells);
    if (!cells) return PK_ENOMEM;
    pk_status st = kv_find_slot(m->kvw, n, cells);
    for (int k = 0; st == PK_OK && k < n; k++) {
        rows_in(m->kvw, cells[k], win_row(m, (uint8_t *)sec, i1, lo + k));
        kv_cell_set(m->kvw, cells[k], lo + k, &seq, 1);
    }
    free(cells);
    return st;
}

uint8_t *mem_copy_out(const mem *m, kv_seq seq, kv_pos p0, kv_pos p1)
{
    ASSERT(p0 >= 0 && p1 >= p0);
    int32_t n = p1 - p0;
    int state = m->rs ? rs_find(m->rs, seq, p1) : -1;
    if ((m->rs && state < 0) || (m->kvw && !win_at(m, seq, p1))) return NULL;
    int *cell_of = malloc((size_t)MAX(n, 1) * sizeof *cell_of);
    uint8_t *image = malloc(MAX(mem_image_bytes(m, n), 1));
    if (!cell_of || !image) goto fail;
    cells_of(m->kv, seq, p0, p1, cell_of);
    uint8_t *dst = image;
    for (int32_t k = 0; k < n; k++) {
        if (cell_of[k] < 0) goto fail;
        dst = rows_out(m->kv, cell_of[k], dst);
    }
    if (m->kvw && !win_out(m, seq, p0, p1, dst)) goto fail;
    if (state >= 0) {
        size_t sb = rs_state_bytes(m->rs);
        memcpy(dst, rs_data(m->rs, state), sb);
        int32_t *pos = (int32_t *)(dst + sb);
        uint8_t *ck = dst + sb + RS_MAX_CKPT * sizeof(int32_t);
        kv_pos at[MEM_MAX_RESUME];
        int n_at = rs_positions(m->rs, seq, at), k = 0;
        memset(pos, 0xff, RS_MAX_CKPT * sizeof(int32_t));
        memset(ck, 0, RS_MAX_CKPT * sb);
        for (int i = 0; i < n_at && k < RS_MAX_CKPT; i++)
            if (at[i] > p0 && at[i] < p1) {
                pos[k] = at[i];
                memcpy(ck + (size_t)k++ * sb, rs_data(m->rs, rs_find(m->rs, seq, at[i])), sb);
            }
    }
    free(cell_of);
    return image;
fail:
    free(cell_of);
    free(image);
    return NULL;
}

/* The image's state at p (its end or a checkpoint), NULL when none. */
static const float *image_state(const mem *m, const uint8_t *image, kv_pos i0, kv_pos i1, kv_pos p)
{
    size_t sb = rs_state_bytes(m->rs);
    const uint8_t *sec = image + (size_t)(i1 - i0) * mem_pos_bytes(m);
    if (p == i1) return (const float *)sec;
    const int32_t *pos = (const int32_t *)(sec + sb);
    for (int k = 0; k < RS_MAX_CKPT; k++)
        if (pos[k] == p && p > i0) return (const float *)(sec + sb + RS_MAX_CKPT * sizeof(int32_t) + (size_t)k * sb);
    return NULL;
}

kv_pos mem_image_resume(const mem *m, const uint8_t *image, kv_pos i0, kv_pos i1, kv_pos p)
{
    /* a window: the image's end, or anywhere in an image no longer than it */
    if (m->kvw) {
        kv_pos lo = win_lo(image + (size_t)(i1 - i0) * mem_pos_bytes(m));
        return p >= i1 ? i1 : MAX(i0, p - m->n_win) >= lo ? p : i0;
    }
    if (!m->rs) return p;
    if (p >= i1) return i1;
    const int32_t *pos = (const int32_t *)(image + (size_t)(i1 - i0) * mem_pos_bytes(m) + rs_state_bytes(m->rs));
    kv_pos best = i0;
    for (int k = 0; k < RS_MAX_CKPT; k++)
        if (pos[k] > best && pos[k] <= p) best = pos[k];
    return best;
}

pk_status mem_copy_in(mem *m, kv_seq seq, kv_pos p0, kv_pos p1, const uint8_t *image, kv_pos i0, kv_pos i1)
{
    ASSERT(i0 <= p0 && p0 <= p1 && p1 <= i1);
    int32_t n = p1 - p0;
    const float *state = m->rs ? image_state(m, image, i0, i1, p1) : NULL;
    if (m->rs && !state) return PK_ECONFLICT;   /* no state of the image at p1 */
    if (m->rs && rs_live(m->rs, seq) < 0 && rs_free_slots(m->rs) == 0) return PK_EFULL;
    /* the window rows it brings: all the image has from p0 (a keep may stop
     * short of p1; the next step lets go of the rest) */
    const uint8_t *sec = image + (size_t)(i1 - i0) * mem_pos_bytes(m);
    if (m->kvw && MAX(p0, p1 - m->n_win) < win_lo(sec)) return PK_ECONFLICT;   /* no window at p1 */
    const kv_pos w_lo = m->kvw ? MAX(p0, win_lo(sec)) : p1;
    int *cells = malloc((size_t)MAX(n, 1) * sizeof *cells);
    if (!cells) return PK_ENOMEM;
    pk_status st = kv_find_slot(m->kv, n, cells);
    if (st == PK_OK && m->kvw)
        st = win_in(m, seq, w_lo, p1, sec, i1);
    if (st != PK_OK) {
        free(cells);
        return st;
    }
    if (m->rs) {
        /* the state first: a live slot exists or is free (checked above) */
        if (rs_live(m->rs, seq) < 0) {
            st = rs_begin(m->rs, seq);
            ASSERT(st == PK_OK);
        }
        memcpy(rs_data(m->rs, rs_live(m->rs, seq)), state, rs_state_bytes(m->rs));
        rs_advance(m->rs, seq, p1);
        /* the image's checkpoints before p1, where slots are free */
        const int32_t *pos = (const int32_t *)((const uint8_t *)image_state(m, image, i0, i1, i1) +
                                               rs_state_bytes(m->rs));
        for (int k = 0; k < RS_MAX_CKPT; k++)
            if (pos[k] > p0 && pos[k] < p1) (void)rs_put_ckpt(m->rs, seq, pos[k], image_state(m, image, i0, i1, pos[k]));
    }
    const uint8_t *src = image + (size_t)(p0 - i0) * mem_pos_bytes(m);
    for (int32_t k = 0; k < n; k++) {
        src = rows_in(m->kv, cells[k], src);
        kv_cell_set(m->kv, cells[k], p0 + k, &seq, 1);
    }
    free(cells);
    return PK_OK;
}

/* ---- what is held ---- */

int32_t mem_n_cells(const mem *m)
{
    return kv_get_params(m->kv)->n_ctx;
}

int32_t mem_used(const mem *m)
{
    return kv_used(m->kv);
}

int32_t mem_seq_cells(const mem *m, kv_seq seq)
{
    return kv_seq_cells(m->kv, seq);
}

int32_t mem_seq_owned(const mem *m, kv_seq seq)
{
    return kv_seq_owned(m->kv, seq);
}

size_t mem_seq_bytes(const mem *m, kv_seq seq)
{
    size_t states = m->rs ? (size_t)rs_seq_slots(m->rs, seq) * rs_state_bytes(m->rs) : 0;
    if (m->kvw) states += (size_t)kv_seq_owned(m->kvw, seq) * win_pos_bytes(m);
    return (size_t)kv_seq_owned(m->kv, seq) * mem_pos_bytes(m) + states;
}

size_t mem_seq_state_bytes(const mem *m, kv_seq seq)
{
    return mem_seq_bytes(m, seq) - (size_t)kv_seq_owned(m->kv, seq) * mem_pos_bytes(m);
}

int32_t mem_window(const mem *m)
{
    return m->kvw ? m->n_win : 0;
}

int32_t mem_window_used(const mem *m)
{
    return m->kvw ? kv_used(m->kvw) : 0;
}

size_t mem_window_pos_bytes(const mem *m)
{
    return win_pos_bytes(m);
}

int32_t mem_states_used(const mem *m)
{
    return m->rs ? rs_used(m->rs) : 0;
}

int32_t mem_seq_states(const mem *m, kv_seq seq)
{
    return m->rs ? rs_seq_slots(m->rs, seq) : 0;
}

int32_t mem_states_free(const mem *m)
{
    return m->rs ? rs_free_slots(m->rs) : 0;
}

int32_t mem_common(const mem *m, kv_seq a, kv_seq b, kv_pos p0, kv_pos p1)
{
    return kv_seq_common(m->kv, a, b, p0, p1);
}

void mem_excl_counts(const mem *m, int32_t *out)
{
    kv_excl_counts(m->kv, out);
}

bool mem_holds(const mem *m, kv_seq seq, int32_t n)
{
    if (kv_seq_cells(m->kv, seq) != n) return false;
    if (m->kvw && !win_at(m, seq, n)) return false;
    return n == 0 || (kv_seq_pos_min(m->kv, seq) == 0 && kv_seq_pos_max(m->kv, seq) == n - 1);
}

/* Window cells: counts true, charges adding up, and each member holding
 * the same position in the global cells. */
static bool win_check(const mem *m)
{
    const kv_cache *w = m->kvw;
    if (!kv_check(w)) return false;
    int32_t owned = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) owned += kv_seq_owned(w, s);
    if (owned != kv_used(w)) return false;
    const int n_ctx = kv_get_params(m->kv)->n_ctx;
    bool *held = malloc((size_t)n_ctx * sizeof *held);
    bool ok = held != NULL;
    for (kv_seq s = 0; ok && s < KV_MAX_SEQ; s++) {
        if (kv_seq_cells(w, s) == 0) continue;
        memset(held, 0, (size_t)n_ctx * sizeof *held);
        for (int c = 0, end = kv_cells_end(m->kv); c < end; c++) {
            kv_pos p = kv_cell_pos(m->kv, c);
            if (p >= 0 && p < n_ctx && kv_seqset_has(kv_cell_seqs(m->kv, c), s)) held[p] = true;
        }
        for (int c = 0, end = kv_cells_end(w); ok && c < end; c++) {
            kv_pos p = kv_cell_pos(w, c);
            if (p >= 0 && kv_seqset_has(kv_cell_seqs(w, c), s)) ok = p < n_ctx && held[p];
        }
    }
    free(held);
    return ok;
}

bool mem_check(const mem *m)
{
    if (!kv_check(m->kv)) return false;
    int32_t owned = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) owned += kv_seq_owned(m->kv, s);
    if (owned != kv_used(m->kv)) return false;
    if (m->kvw) return win_check(m);
    if (!m->rs) return true;
    if (!rs_check(m->rs)) return false;
    /* a state at pos stands for the tokens [0, pos): its sequence holds
     * exactly their cells (a live state), or more (a checkpoint of a
     * history that went on) */
    for (int i = 0; i < rs_get_params(m->rs)->n_slots; i++) {
        if (rs_slot_kind(m->rs, i) == RS_FREE) continue;
        kv_seq s = rs_slot_seq(m->rs, i);
        kv_pos p = rs_slot_pos(m->rs, i);
        if (rs_slot_kind(m->rs, i) == RS_LIVE ? !mem_holds(m, s, p) : kv_seq_cells(m->kv, s) < p)
            return false;
    }
    return true;
}
