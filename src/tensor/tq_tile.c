/*
 * tq_tile.c - the tiled layouts of tq.h: plain rows to tiles and back.
 *
 * Both directions move one (tile, block, row) at a time through move_block,
 * which reads the layout from one table of where each block field goes,
 * so they cannot disagree.  Speed: tq_tile runs once per weight at load
 * time, in the background copy (model_copy.c); tq_untile and tq_tile_block
 * serve the GEMM's panel packing, a small share of a prefill.
 */
#include "tq_impl.h"

#include <string.h>

/* A plain block's fields in a tiled unit: `seg` runs of 4-byte words
 * (bytes [from, from + 4 * words) of the block to lines line..), then
 * up to two scale fields of sw bytes (at half[f] in the block). */
typedef struct {
    tq_type plain, tiled;
    int unit, lines, sw;        /* tq.h's unit, lines and scale bytes */
    int n_seg;
    struct { int from, words, line; } seg[3];
    int n_half;
    int half[2];
    uint8_t flip;               /* xor on the first field's bytes: Q8_0's +128 */
} tile_fmt;

static const tile_fmt fmts[] = {
    { TQ_Q4_0, TQ_Q4_0X16, 2, 4, 2, 1, { { 2, 4, 0 } }, 1, { 0 }, 0 },
    { TQ_Q8_0, TQ_Q8_0X16, 2, 8, 2, 1, { { 2, 8, 0 } }, 1, { 0 }, 0x80 },
    { TQ_IQ4_NL, TQ_IQ4_NLX16, 2, 4, 2, 1, { { 2, 4, 0 } }, 1, { 0 }, 0 },
    { TQ_MXFP4, TQ_MXFP4X16, 2, 4, 1, 1, { { 1, 4, 0 } }, 1, { 0 }, 0 },
    { TQ_Q4_K, TQ_Q4_KX16, TQ_Q4_KX16_UNIT, TQ_Q4_KX16_LINES, 2, 2, { { 16, 32, TQ_Q4_KX16_QS }, { 4, 3, 0 } }, 2,
      { 0, 2 }, 0 },
    { TQ_Q6_K, TQ_Q6_KX16, TQ_Q6_KX16_UNIT, TQ_Q6_KX16_LINES, 2, 3,
      { { 0, 32, 0 }, { 128, 16, TQ_Q6_KX16_QH }, { 192, 4, TQ_Q6_KX16_SCALES } }, 1, { 208 }, 0 },
};

static const tile_fmt *fmt_of(int type)
{
    for (size_t k = 0; k < ARRAY_LEN(fmts); k++)
        if ((int)fmts[k].plain == type || (int)fmts[k].tiled == type) return &fmts[k];
    return NULL;
}

int tq_tiled(tq_type type)
{
    if (type == TQ_F32) return TQ_F32X16;
    const tile_fmt *f = fmt_of(type);
    return f && f->plain == type ? (int)f->tiled : -1;
}

bool tq_tileable(tq_type type, int64_t n_rows, int64_t n_cols)
{
    if (type == TQ_F32) return n_rows >= TQ_TILE_ROWS && n_cols > 0;
    const tile_fmt *f = fmt_of(type);
    int64_t unit_cols = f ? f->unit * tq_get(f->plain)->blck_size : 0;
    return f && f->plain == type && n_rows > 0 && n_rows % TQ_TILE_ROWS == 0 && n_cols > 0 &&
           n_cols % unit_cols == 0;
}

/* Where block b's fields start in a tile (row 0's bytes). */
typedef struct {
    size_t seg[3], half[2];
} block_at;

static inline __attribute__((always_inline)) block_at locate(const tile_fmt *f, int64_t b)
{
    block_at at = { { 0 }, { 0 } };
    for (int s = 0; s < f->n_seg; s++) at.seg[s] = tq_tile_line_sw(b, f->unit, f->lines, f->seg[s].line, f->sw);
    for (int h = 0; h < f->n_half; h++) at.half[h] = tq_tile_half_sw(b, f->unit, f->lines, h, f->sw);
    return at;
}

/* Row i (0..15) of a tile's block (at: locate's) to or from the plain
 * block at blk. */
static inline __attribute__((always_inline)) void
move_block(const tile_fmt *f, char *tile, const block_at *at, int i, char *blk, bool to_tile)
{
    for (int s = 0; s < f->n_seg; s++) {
        const uint32_t flip = s == 0 ? f->flip * 0x01010101u : 0;
        for (int w = 0; w < f->seg[s].words; w++) {
            char *t = tile + at->seg[s] + (size_t)TQ_TILE_LINE * w + 4 * i;
            char *p = blk + f->seg[s].from + 4 * w;
            uint32_t v;
            memcpy(&v, to_tile ? p : t, 4);
            v ^= flip;
            memcpy(to_tile ? t : p, &v, 4);
        }
    }
    for (int h = 0; h < f->n_half; h++) {
        char *t = tile + at->half[h] + (size_t)f->sw * i;
        char *p = blk + f->half[h];
        memcpy(to_tile ? t : p, to_tile ? p : t, (size_t)f->sw);
    }
}

/* Rows [r0, r0 + n) between plain rows at `rows` and the tiled matrix w,
 * row by row (the plain side read in order), inlined once per format
 * (move_rows) so the places and sizes are constants. */
static inline __attribute__((always_inline)) void
move_rows_fmt(const tile_fmt *f, char *w, char *rows, int64_t r0, int64_t n, int64_t n_cols, bool to_tile)
{
    const tq_traits *tr = tq_get(f->plain);
    const size_t wrow = tq_row_size(f->plain, n_cols);
    for (int64_t r = r0; r < r0 + n; r++) {
        char *tile = (char *)tq_tile_of(w, r, wrow), *row = rows + (size_t)(r - r0) * wrow;
        for (int64_t b = 0; b < n_cols / tr->blck_size; b++) {
            const block_at at = locate(f, b);
            move_block(f, tile, &at, (int)(r % TQ_TILE_ROWS), row + (size_t)b * tr->type_size, to_tile);
        }
    }
}

static void move_rows(tq_type tiled, char *w, char *rows, int64_t r0, int64_t n, int64_t n_cols, bool to_tile)
{
    const tile_fmt *f = fmt_of(tiled);
    ASSERT(f && f->tiled == tiled);
    _Static_assert(ARRAY_LEN(fmts) == 6, "one case per format");
    switch (f - fmts) {
    case 0: move_rows_fmt(&fmts[0], w, rows, r0, n, n_cols, to_tile); break;
    case 1: move_rows_fmt(&fmts[1], w, rows, r0, n, n_cols, to_tile); break;
    case 2: move_rows_fmt(&fmts[2], w, rows, r0, n, n_cols, to_tile); break;
    case 3: move_rows_fmt(&fmts[3], w, rows, r0, n, n_cols, to_tile); break;
    case 4: move_rows_fmt(&fmts[4], w, rows, r0, n, n_cols, to_tile); break;
    default: move_rows_fmt(&fmts[5], w, rows, r0, n, n_cols, to_tile); break;
    }
}

/* ---- F32X16: value k of 16 rows per 64-byte line, the rest plain ---- */

/* Where value k of row r lies in an F32X16 matrix of n_rows rows. */
static inline size_t f32x16_at(int64_t r, int64_t k, int64_t n_rows, int64_t n_cols)
{
    int64_t whole = n_rows / TQ_TILE_ROWS * TQ_TILE_ROWS;
    if (r >= whole) return (size_t)(r * n_cols + k);
    return (size_t)((r / TQ_TILE_ROWS * n_cols + k) * TQ_TILE_ROWS + r % TQ_TILE_ROWS);
}

static void f32x16_move(float *w, float *rows, int64_t r0, int64_t n, int64_t n_rows, int64_t n_cols, bool to_tile)
{
    for (int64_t r = r0; r < r0 + n; r++)
        for (int64_t k = 0; k < n_cols; k++) {
            float *t = w + f32x16_at(r, k, n_rows, n_cols), *p = rows + (r - r0) * n_cols + k;
            if (to_tile) *t = *p;
            else *p = *t;
        }
}

void tq_tile(tq_type tiled, const void *src, int64_t n_rows, int64_t n_cols, void *dst)
{
    ASSERT(tq_tileable(tq_get(tiled)->untiled, n_rows, n_cols));
    if (tiled == TQ_F32X16) f32x16_move(dst, (float *)src, 0, n_rows, n_rows, n_cols, true);
    else move_rows(tiled, dst, (char *)src, 0, n_rows, n_cols, true);
}

void tq_untile(tq_type tiled, const void *w, int64_t r0, int64_t n, int64_t n_rows, int64_t n_cols, void *dst)
{
    ASSERT(r0 >= 0 && r0 + n <= n_rows);
    if (tiled == TQ_F32X16) f32x16_move((float *)w, dst, r0, n, n_rows, n_cols, false);
    else move_rows(tiled, (char *)w, dst, r0, n, n_cols, false);
}

void tq_tile_block(tq_type tiled, const void *w, int64_t r, int64_t b, int64_t n_cols, void *blk)
{
    const tile_fmt *f = fmt_of(tiled);   /* the block formats: F32X16 rows are read whole */
    ASSERT(f && f->tiled == tiled);
    size_t wrow = tq_row_size(f->plain, n_cols);
    const block_at at = locate(f, b);
    move_block(f, (char *)tq_tile_of(w, r, wrow), &at, (int)(r % TQ_TILE_ROWS), blk, false);
}

void tq_dequantize_row_at(tq_type type, const void *w, int64_t r, int64_t n_rows, int64_t n_cols, float *y)
{
    const tq_traits *tr = tq_get(type);
    ASSERT(r >= 0 && r < n_rows);
    if (type == TQ_F32X16) {
        f32x16_move((float *)w, y, r, 1, n_rows, n_cols, false);
        return;
    }
    if (!tr->tile_rows) {
        tq_dequantize_row(type, (const char *)w + (size_t)r * tq_row_size(type, n_cols), y, n_cols);
        return;
    }
    /* block by block through one plain block on the stack */
    const tq_traits *pt = tq_get(tr->untiled);
    _Alignas(8) char blk[sizeof(tq_block_q6_K)];   /* the largest tiled block */
    ASSERT(pt->type_size <= sizeof blk);
    for (int64_t b = 0; b < n_cols / pt->blck_size; b++) {
        tq_tile_block(type, w, r, b, n_cols, blk);
        tq_dequantize_row(tr->untiled, blk, y + b * pt->blck_size, pt->blck_size);
    }
}
