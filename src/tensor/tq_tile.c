/*
 * tq_tile.c - the tiled layouts of tq.h: plain rows to tiles and back.
 *
 * Both directions walk one (tile, block, row) at a time through tile_at,
 * the single statement of where a block's bytes go, so they cannot
 * disagree.  Speed: tq_tile runs once per weight at load time, in the
 * background copy (model_copy.c); tq_untile serves the GEMM's panel
 * packing, a small share of a prefill.
 */
#include "tq_impl.h"

#include <string.h>

typedef struct {
    int code_bytes;   /* qs bytes per block and row: 16 or 32 */
    uint8_t flip;     /* xor on each code byte: 0x80 makes Q8_0's unsigned */
} tile_fmt;

static tile_fmt fmt_of(tq_type tiled)
{
    ASSERT(tiled == TQ_Q4_0X16 || tiled == TQ_Q8_0X16);
    return tiled == TQ_Q4_0X16 ? (tile_fmt){ 16, 0 } : (tile_fmt){ 32, 0x80 };
}

/* Where block b of row i (0..15) of a tile lives: its code bytes at
 * codes[4 * TQ_TILE_ROWS * line + j] for byte 4 * line + j, its d at *d. */
static void tile_at(tile_fmt f, char *tile, int64_t b, int i, char **codes, char **d)
{
    *codes = tile + tq_tile_codes(b, f.code_bytes) + 4 * i;
    *d = tile + tq_tile_scales(b, f.code_bytes) + 2 * i;
}

int tq_tiled(tq_type type)
{
    return type == TQ_Q4_0 ? TQ_Q4_0X16 : type == TQ_Q8_0 ? TQ_Q8_0X16 : -1;
}

bool tq_tileable(tq_type type, int64_t n_rows, int64_t n_cols)
{
    return tq_tiled(type) >= 0 && n_rows > 0 && n_rows % TQ_TILE_ROWS == 0 && n_cols > 0 && n_cols % 64 == 0;
}

/* One row's block b between plain (qs at q, d at pd) and tile form. */
static void move_block(tile_fmt f, char *tile, int64_t b, int i, uint8_t *q, tq_f16 *pd, bool to_tile)
{
    char *codes, *d;
    tile_at(f, tile, b, i, &codes, &d);
    const uint32_t flip = f.flip * 0x01010101u;
    for (int k = 0; k < f.code_bytes; k += 4) {   /* 4 bytes: one row's share of a line */
        char *t = codes + (size_t)(k / 4) * 4 * TQ_TILE_ROWS;
        uint32_t v;
        memcpy(&v, to_tile ? (const void *)(q + k) : t, 4);
        v ^= flip;
        memcpy(to_tile ? (void *)t : q + k, &v, 4);
    }
    if (to_tile)
        memcpy(d, pd, sizeof *pd);
    else
        memcpy(pd, d, sizeof *pd);
}

/* Plain block b of a row at `row` (Q4_0 / Q8_0: d first, then qs). */
static void plain_block(tq_type plain, char *row, int64_t b, uint8_t **q, tq_f16 **d)
{
    size_t bs = tq_get(plain)->type_size;
    *d = (tq_f16 *)(row + (size_t)b * bs);
    *q = (uint8_t *)(row + (size_t)b * bs + sizeof(tq_f16));
}

void tq_tile(tq_type tiled, const void *src, int64_t n_rows, int64_t n_cols, void *dst)
{
    const tq_traits *tr = tq_get(tiled);
    tile_fmt f = fmt_of(tiled);
    ASSERT(tq_tileable(tr->untiled, n_rows, n_cols));
    size_t wrow = tq_row_size(tr->untiled, n_cols);
    for (int64_t r = 0; r < n_rows; r++) {
        char *tile = (char *)tq_tile_of(dst, r, wrow);
        char *row = (char *)src + (size_t)r * wrow;
        for (int64_t b = 0; b < n_cols / 32; b++) {
            uint8_t *q;
            tq_f16 *d;
            plain_block(tr->untiled, row, b, &q, &d);
            move_block(f, tile, b, (int)(r % TQ_TILE_ROWS), q, d, true);
        }
    }
}

void tq_untile(tq_type tiled, const void *w, int64_t r0, int64_t n, int64_t n_cols, void *dst)
{
    const tq_traits *tr = tq_get(tiled);
    tile_fmt f = fmt_of(tiled);
    size_t wrow = tq_row_size(tr->untiled, n_cols);
    for (int64_t r = r0; r < r0 + n; r++) {
        char *tile = (char *)tq_tile_of(w, r, wrow);
        char *row = (char *)dst + (size_t)(r - r0) * wrow;
        for (int64_t b = 0; b < n_cols / 32; b++) {
            uint8_t *q;
            tq_f16 *d;
            plain_block(tr->untiled, row, b, &q, &d);
            move_block(f, tile, b, (int)(r % TQ_TILE_ROWS), q, d, false);
        }
    }
}

void tq_dequantize_row_at(tq_type type, const void *w, int64_t r, int64_t n_cols, float *y)
{
    const tq_traits *tr = tq_get(type);
    if (!tr->tile_rows) {
        tq_dequantize_row(type, (const char *)w + (size_t)r * tq_row_size(type, n_cols), y, n_cols);
        return;
    }
    /* block by block through one plain block on the stack */
    tile_fmt f = fmt_of(type);
    size_t wrow = tq_row_size(tr->untiled, n_cols);
    char *tile = (char *)tq_tile_of(w, r, wrow);
    tq_block_q8_0 blk;   /* the larger of the two */
    for (int64_t b = 0; b < n_cols / 32; b++) {
        uint8_t *q;
        tq_f16 *d;
        plain_block(tr->untiled, (char *)&blk, 0, &q, &d);
        move_block(f, tile, b, (int)(r % TQ_TILE_ROWS), q, d, false);
        tq_dequantize_row(tr->untiled, &blk, y + b * 32, 32);
    }
}
