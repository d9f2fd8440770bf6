/*
 * tq.h - tensor element types: block layouts, traits, and the scalar
 * reference conversions (dequantize, quantize, dot product).
 *
 * The type ids and block layouts are GGUF's (ggml's) so a mapped file's bytes
 * are used as they are.  Every quantized type stores blocks of `blck_size`
 * values in `type_size` bytes; a row of n values is n / blck_size blocks.
 *
 * The scalar functions here are the algorithmic reference: the SIMD kernels
 * (tk.h) are tested against them.  A weight type W is multiplied against
 * activations converted to tq_get(W)->vec_dot_type (F16 for F16, Q8_0 for
 * Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4 — Q8_1 is not used —, Q8_K for the
 * K-quants, IQ4_XS and the lattice formats IQ1_S/IQ1_M/IQ2_XXS/IQ2_XS/
 * IQ2_S/IQ3_XXS/IQ3_S, F32 for F32, BF16 for BF16), which is what the
 * reference engine does, so results agree with it to rounding.
 *
 * The lattice formats have no quantizer here: the reference engine's needs
 * an importance matrix and a search over the lattice per group, and files
 * of these types come quantized.  tq_quantize_row refuses them (an ASSERT:
 * callers check tq_has_quantizer first).
 */
#ifndef TQ_H
#define TQ_H

#include "../common/pk.h"

typedef enum tq_type {
    TQ_F32  = 0,
    TQ_F16  = 1,
    TQ_Q4_0 = 2,
    TQ_Q4_1 = 3,
    TQ_Q5_0 = 6,
    TQ_Q5_1 = 7,
    TQ_Q8_0 = 8,
    TQ_Q8_1 = 9,
    TQ_Q2_K = 10,
    TQ_Q3_K = 11,
    TQ_Q4_K = 12,
    TQ_Q5_K = 13,
    TQ_Q6_K = 14,
    TQ_Q8_K = 15,
    TQ_IQ2_XXS = 16,
    TQ_IQ2_XS = 17,
    TQ_IQ3_XXS = 18,
    TQ_IQ1_S = 19,
    TQ_IQ4_NL = 20,
    TQ_IQ3_S = 21,
    TQ_IQ2_S = 22,
    TQ_IQ4_XS = 23,
    TQ_IQ1_M = 29,
    TQ_BF16 = 30,
    TQ_MXFP4 = 39,
    /* tiled layouts (below): made at load time, never read from a file */
    TQ_Q4_0X16 = 40,
    TQ_Q8_0X16 = 41,
    TQ_Q4_KX16 = 42,
    TQ_Q6_KX16 = 43,
    TQ_MXFP4X16 = 44,
    TQ_IQ4_NLX16 = 45,
    TQ_F32X16 = 46,
    TQ_COUNT = 47,   /* table size: every id < TQ_COUNT */
} tq_type;

typedef uint16_t tq_f16;   /* IEEE half, bit pattern */
typedef uint16_t tq_bf16;  /* bfloat16, bit pattern */

#define TQ_QK4_0 32
#define TQ_QK4_1 32
#define TQ_QK5_0 32
#define TQ_QK5_1 32
#define TQ_QK8_0 32
#define TQ_QK4_NL 32
#define TQ_QK_MXFP4 32
#define TQ_QK_K 256
#define TQ_K_SCALE_SIZE 12

typedef struct { tq_f16 d; uint8_t qs[TQ_QK4_0 / 2]; } tq_block_q4_0;             /* 18 B */
typedef struct { tq_f16 d, m; uint8_t qs[TQ_QK4_1 / 2]; } tq_block_q4_1;          /* 20 B */
typedef struct { tq_f16 d; uint8_t qh[4]; uint8_t qs[TQ_QK5_0 / 2]; } tq_block_q5_0; /* 22 B */
typedef struct { tq_f16 d, m; uint8_t qh[4]; uint8_t qs[TQ_QK5_1 / 2]; } tq_block_q5_1; /* 24 B */
typedef struct { tq_f16 d; int8_t qs[TQ_QK8_0]; } tq_block_q8_0;                  /* 34 B */
typedef struct {                                                              /* 84 B */
    uint8_t scales[TQ_QK_K / 16];     /* 16 x (4-bit scale | 4-bit min << 4) */
    uint8_t qs[TQ_QK_K / 4];          /* 2-bit levels */
    tq_f16 d, dmin;
} tq_block_q2_K;
typedef struct {                                                              /* 110 B */
    uint8_t hmask[TQ_QK_K / 8];       /* third bit of each level */
    uint8_t qs[TQ_QK_K / 4];          /* low 2 bits */
    uint8_t scales[TQ_K_SCALE_SIZE];  /* 16 x 6-bit scale (+32), packed */
    tq_f16 d;
} tq_block_q3_K;
typedef struct {                                                              /* 144 B */
    tq_f16 d, dmin;
    uint8_t scales[TQ_K_SCALE_SIZE];  /* 8 x (6-bit scale, 6-bit min), packed */
    uint8_t qs[TQ_QK_K / 2];
} tq_block_q4_K;
typedef struct {                                                              /* 176 B */
    tq_f16 d, dmin;
    uint8_t scales[TQ_K_SCALE_SIZE];
    uint8_t qh[TQ_QK_K / 8];
    uint8_t qs[TQ_QK_K / 2];
} tq_block_q5_K;
typedef struct {                                                              /* 210 B */
    uint8_t ql[TQ_QK_K / 2];
    uint8_t qh[TQ_QK_K / 4];
    int8_t scales[TQ_QK_K / 16];
    tq_f16 d;
} tq_block_q6_K;
/* The non-linear 4-bit formats: a level is an index into tq_iq4nl_values. */
typedef struct { tq_f16 d; uint8_t qs[TQ_QK4_NL / 2]; } tq_block_iq4_nl;          /* 18 B */
typedef struct {                                                              /* 136 B */
    tq_f16 d;
    uint16_t scales_h;                /* top 2 bits of the 8 scales (+32) */
    uint8_t scales_l[TQ_QK_K / 64];   /* low 4 bits, two per byte */
    uint8_t qs[TQ_QK_K / 2];
} tq_block_iq4_xs;
/* MXFP4 (OCP microscaling): 32 E2M1 values sharing one power-of-two scale,
 * value = 2^(e - 127) * fp4(level); levels as Q4_0's nibbles. */
typedef struct { uint8_t e; uint8_t qs[TQ_QK_MXFP4 / 2]; } tq_block_mxfp4;        /* 17 B */
/*
 * The lattice formats (layouts in tq_iqgrid.c): a 256-value super-block of
 * 8 runs of 32; each group of 8 (IQ3: 4) values is an index into a table of
 * points (tq_impl.h's grids), with signs stored apart (IQ2/IQ3) or a shift
 * (IQ1), and a scale per run or half run.
 */
typedef struct { tq_f16 d; uint16_t qs[TQ_QK_K / 8]; } tq_block_iq2_xxs;          /* 66 B */
typedef struct {                                                              /* 74 B */
    tq_f16 d;
    uint16_t qs[TQ_QK_K / 8];         /* 9-bit grid index | 7 sign bits << 9 */
    uint8_t scales[TQ_QK_K / 32];     /* 4-bit scale per 16 values */
} tq_block_iq2_xs;
typedef struct {                                                              /* 82 B */
    tq_f16 d;
    uint8_t qs[TQ_QK_K / 4];          /* low 8 bits of 32 grid indices, then 32 sign bytes */
    uint8_t qh[TQ_QK_K / 32];         /* top 2 bits of the indices */
    uint8_t scales[TQ_QK_K / 32];
} tq_block_iq2_s;
typedef struct { tq_f16 d; uint8_t qs[3 * TQ_QK_K / 8]; } tq_block_iq3_xxs;       /* 98 B */
typedef struct {                                                              /* 110 B */
    tq_f16 d;
    uint8_t qs[TQ_QK_K / 4];          /* low 8 bits of 64 grid indices */
    uint8_t qh[TQ_QK_K / 32];         /* 9th bits */
    uint8_t signs[TQ_QK_K / 8];
    uint8_t scales[TQ_QK_K / 64];     /* 4-bit scale per run */
} tq_block_iq3_s;
typedef struct {                                                              /* 50 B */
    tq_f16 d;
    uint8_t qs[TQ_QK_K / 8];          /* low 8 bits of 32 grid indices */
    uint16_t qh[TQ_QK_K / 32];        /* 4 x 3 index bits | 3-bit scale << 12 | shift sign << 15 */
} tq_block_iq1_s;
typedef struct {                                                              /* 56 B */
    uint8_t qs[TQ_QK_K / 8];
    uint8_t qh[TQ_QK_K / 16];         /* 3 index bits | shift sign << 3, per nibble */
    uint8_t scales[TQ_QK_K / 32];     /* 16 x 3-bit scales; the f16 d in the top nibbles */
} tq_block_iq1_m;
typedef struct {                                                              /* 292 B */
    float d;
    int8_t qs[TQ_QK_K];
    int16_t bsums[TQ_QK_K / 16];      /* sum of each group of 16 qs */
} tq_block_q8_K;

/* The 16 values an IQ4_NL / IQ4_XS level stands for (GGUF's table). */
extern const int8_t tq_iq4nl_values[16];

typedef struct tq_traits {
    const char *name;       /* "q4_K", as GGUF tools print it */
    int64_t blck_size;      /* values per block (1 for F32/F16/BF16) */
    size_t type_size;       /* bytes per block */
    tq_type vec_dot_type;   /* activations are converted to this first */
    bool supported;         /* we can dequantize and multiply it */
    int tile_rows;          /* 0, or a tiled layout of `untiled`'s blocks */
    tq_type untiled;        /* for a tiled layout: the file type it holds */
} tq_traits;

/* Traits of a type; NULL when `type` is not a known id.  Thread-safe. */
const tq_traits *tq_get(int type);

/* Bytes of a row of n values; 0 when n is not a multiple of the block size
 * or the type is unknown. */
size_t tq_row_size(int type, int64_t n);

/* Scalar conversions between float and half / bfloat16 (round to nearest even). */
float  tq_f16_to_f32(tq_f16 h);
tq_f16 tq_f32_to_f16(float f);
float  tq_bf16_to_f32(tq_bf16 h);
tq_bf16 tq_f32_to_bf16(float f);

/* Reference: x (n values of `type`) -> y (n floats).  n % blck_size == 0. */
void tq_dequantize_row(tq_type type, const void *x, float *y, int64_t n);

/* Whether tq_quantize_row takes `type`: every supported type but the
 * lattice formats (see the top). */
bool tq_has_quantizer(int type);

/* Reference quantizer: n floats -> n values of `type` (a type with
 * tq_has_quantizer, including the activation types Q8_0 and Q8_K).  The activation types
 * (F16, BF16, Q8_0, Q8_K) match the reference engine's rounding exactly; the
 * weight types follow its reference quantizers (used by gen-model). */
void tq_quantize_row(tq_type type, const float *x, void *y, int64_t n);

/* Reference dot product of one weight row w (type `wtype`) with activations a
 * already converted to tq_get(wtype)->vec_dot_type.  n % blck_size == 0. */
float tq_vec_dot_ref(tq_type wtype, int64_t n, const void *w, const void *a);

/*
 * TILED LAYOUTS.  TQ_Q4_0X16, TQ_Q8_0X16, TQ_IQ4_NLX16, TQ_MXFP4X16,
 * TQ_Q4_KX16 and TQ_Q6_KX16 hold a Q4_0 / Q8_0 / IQ4_NL / MXFP4 / Q4_K /
 * Q6_K matrix's blocks, the same bytes, rearranged so that the decode
 * kernels (tk_tiled_avx512.c, tk_tiledk_avx512.c) read each 64-byte line
 * as 4 bytes of 16 rows: one vpdpbusd (or vpmaddubsw) against 4 broadcast
 * activations gives 16 rows' partial sums, with no shuffles, and the sums
 * end up with rows across the lanes where the float work wants them.  A
 * matrix of n_rows (% 16 == 0) rows is n_rows / 16 tiles; tile t holds
 * rows [16t, 16t + 16) at t * 16 * tq_row_size bytes (so a row range
 * starting on a tile is at the usual offset).  A tile is a run of units of
 * 1 or 2 blocks (every row's block b, b + 1); in a unit, block by block,
 * 64-byte lines whose line j holds bytes 4j..4j+3 of a block field of each
 * row (row i at + 4i), then the scale fields: 32 bytes per field and block
 * (row i's f16 at + 2i), or 16 for MXFP4's one-byte E8M0 (row i's at + i):
 *
 *   Q4_0X16, IQ4_NLX16  2 blocks: qs 4 lines each; d, d      (576 bytes)
 *   MXFP4X16            2 blocks: qs 4 lines each; e, e      (544)
 *   Q8_0X16             2 blocks: qs + 128 (as unsigned) 8 lines each; d, d (1088)
 *   Q4_KX16             1 block:  scales 3 lines, qs 32; d, dmin (2304)
 *   Q6_KX16             2 blocks: ql 32 lines, qh 16, scales 4; d, d (6720)
 *
 * Row widths: a multiple of the unit's values (64, 64, 64, 256, 512).
 * (MXFP4's units are 544 bytes, so every other one starts half way into a
 * 64-byte line: its loads straddle two lines, which costs nothing
 * measurable where the weights come from memory.)
 *
 * TQ_F32X16 holds an F32 matrix of any width and at least 16 rows: each
 * whole tile is its rows' value k, 16 floats (one per row, a 64-byte
 * line), for k = 0 .. n_cols - 1, so the kernel (tk_legacy_avx512.c)
 * multiplies a line by one broadcast activation for 16 rows' products and
 * never folds lanes; the rows past the last whole tile stay plain rows.
 * Where a row lies thus depends on the matrix's row count, which
 * tq_untile and tq_dequantize_row_at take for it.
 */
#define TQ_TILE_ROWS 16
#define TQ_TILE_LINE 64
/* The K layouts' units, lines per block and first lines of their fields. */
enum {
    TQ_Q4_KX16_UNIT = 1, TQ_Q4_KX16_LINES = 35, TQ_Q4_KX16_QS = 3,
    TQ_Q6_KX16_UNIT = 2, TQ_Q6_KX16_LINES = 52, TQ_Q6_KX16_QH = 32, TQ_Q6_KX16_SCALES = 48,
};

/* Where things are in the layout above, the one statement of it for the
 * converters and the kernels.  unit: blocks per unit; lines: lines of one
 * block's 4-byte fields (4 / 8 / 35 / 52); sw: bytes of one row's scale
 * field (2: f16; 1: MXFP4's E8M0).  Two scale fields per unit in every
 * layout (one per block, or Q4_K's d and dmin). */
static inline size_t tq_tile_unit_bytes_sw(int unit, int lines, int sw)
{
    return (size_t)TQ_TILE_LINE * unit * lines + (size_t)32 * sw;
}
static inline size_t tq_tile_unit_bytes(int unit, int lines) { return tq_tile_unit_bytes_sw(unit, lines, 2); }
/* Offset in a tile of line j of block b's 4-byte fields (row i at + 4i). */
static inline size_t tq_tile_line_sw(int64_t b, int unit, int lines, int j, int sw)
{
    return (size_t)(b / unit) * tq_tile_unit_bytes_sw(unit, lines, sw) + (size_t)TQ_TILE_LINE * ((b % unit) * lines + j);
}
static inline size_t tq_tile_line(int64_t b, int unit, int lines, int j) { return tq_tile_line_sw(b, unit, lines, j, 2); }
/* Offset in a tile of scale field f (0, or 1: Q4_K's dmin) of block b (row i at + sw * i). */
static inline size_t tq_tile_half_sw(int64_t b, int unit, int lines, int f, int sw)
{
    return (size_t)(b / unit) * tq_tile_unit_bytes_sw(unit, lines, sw) + (size_t)TQ_TILE_LINE * unit * lines +
           (size_t)16 * sw * (f + b % unit);
}
static inline size_t tq_tile_half(int64_t b, int unit, int lines, int f) { return tq_tile_half_sw(b, unit, lines, f, 2); }
/* The 32-value formats' names for these: code_bytes 16 (Q4_0, IQ4_NL) or
 * 32 (Q8_0); sw 2, or 1 for MXFP4. */
static inline size_t tq_tile_codes(int64_t b, int code_bytes) { return tq_tile_line(b, 2, code_bytes / 4, 0); }
static inline size_t tq_tile_scales(int64_t b, int code_bytes) { return tq_tile_half(b, 2, code_bytes / 4, 0); }
static inline size_t tq_tile_codes_mx(int64_t b) { return tq_tile_line_sw(b, 2, 4, 0, 1); }
static inline size_t tq_tile_scales_mx(int64_t b) { return tq_tile_half_sw(b, 2, 4, 0, 1); }
/* The tile holding row r of a matrix at w whose plain rows are wrow bytes. */
static inline const char *tq_tile_of(const void *w, int64_t r, size_t wrow)
{
    return (const char *)w + (size_t)(r / TQ_TILE_ROWS) * TQ_TILE_ROWS * wrow;
}

/* Whether a matrix of `type` (a file type) and this shape has a tiled
 * layout (tq_tiled(type) >= 0 and the shape fits the units). */
bool tq_tileable(tq_type type, int64_t n_rows, int64_t n_cols);
/* The tiled layout of `type`, or -1. */
int tq_tiled(tq_type type);
/* src (n_rows plain rows of `tq_get(tiled)->untiled`) -> dst, tiled. */
void tq_tile(tq_type tiled, const void *src, int64_t n_rows, int64_t n_cols, void *dst);
/* Rows [r0, r0 + n) of the tiled matrix w (n_rows rows) back as plain rows into dst. */
void tq_untile(tq_type tiled, const void *w, int64_t r0, int64_t n, int64_t n_rows, int64_t n_cols, void *dst);
/* Block b of row r of the tiled matrix w (a block format: not F32X16), as a plain block into blk. */
void tq_tile_block(tq_type tiled, const void *w, int64_t r, int64_t b, int64_t n_cols, void *blk);
/* Row r of a matrix (n_rows rows) of any supported type (plain rows, or tiled) as floats. */
void tq_dequantize_row_at(tq_type type, const void *w, int64_t r, int64_t n_rows, int64_t n_cols, float *y);

#endif
