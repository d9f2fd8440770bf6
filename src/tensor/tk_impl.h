/*
 * tk_impl.h - internal to src/tensor: the per-ISA fillers behind tk.h.
 *
 * tk.c builds each ISA's tk_ops by calling the fillers that belong to it on
 * a zeroed table, then copies the scalar entry into every slot still NULL.
 * A filler sets only the entries its file implements: vec_dot[weight type]
 * and quantize[activation type].  Each lives in a file compiled with its
 * ISA's -m flags (tk_legacy_avx2.c, tk_kquant_avx512.c, ...), so it must only
 * be called after tk.c has checked the CPU supports that ISA.
 */
#ifndef TK_IMPL_H
#define TK_IMPL_H

#include "tk.h"

void tk_fill_scalar(tk_ops *o);          /* every supported type (tk_scalar.c) */
void tk_fill_avx2_legacy(tk_ops *o);     /* F32/F16/BF16, 32-value formats, Q8_0/F16/BF16 quantizers */
void tk_fill_avx512_legacy(tk_ops *o);
void tk_fill_avx2_kquant(tk_ops *o);     /* Q2_K..Q6_K dots, Q8_K quantizer */
void tk_fill_avx512_kquant(tk_ops *o);
void tk_fill_avx2_iquant(tk_ops *o);     /* IQ4_NL, IQ4_XS, MXFP4 and lattice dots (tk_iquant_avx2.c) */
void tk_fill_avx512_iquant(tk_ops *o);   /* the lattice formats' dots (tk_iquant_avx512.c) */
void tk_fill_avx512_attn(tk_ops *o);     /* attend (tk_attn_avx512.c) */
void tk_fill_avx512_elem(tk_ops *o);     /* rms_norm, swiglu (tk_elem_avx512.c) */
void tk_attend_ref(const tk_attn *a, void *scratch);   /* tk_scalar.c */
void tk_attend_rows(const tk_attn *a, void *scratch);  /* tk_scalar.c: the same bits, rows sharing cells */

/*
 * GEMM pieces (several tokens against one weight matrix), used by tk.c's
 * matmul when a table has them for the weight type.  The product is cut
 * into tiles of TK_GEMM_ROWS weight rows x TK_GEMM_LANES tokens, the tokens
 * across the lanes of a vector register, so every step of the kernel is
 * vertical: one vpdpbusd multiplies 4 values of one weight row (broadcast)
 * by the same 4 values of 16 tokens.
 *
 * PANEL: one tile's weight rows, made by pack_w from the mapped blocks into
 * a thread's scratch (rows past the matrix are zero), as records of
 * rec_cols columns x TK_GEMM_ROWS rows of rec_bytes: the values as bytes
 * plus whatever per-row scales the type needs, laid out for its tile
 * kernel (see tk_gemm_avx512.c, tk_gemmk_avx512.c).
 *
 * GROUP: TK_GEMM_LANES tokens' activations, made by pack_a from rows
 * already converted to the vec_dot_type (at most tk_group_bytes):
 *
 *   a8 [n_cols / 4][LANES][4] uint8 = activation ^ 0x80   (u8 = s8 + 128)
 *   then per activation type its scales and block sums
 *
 * The +128 makes the activations the unsigned operand of vpdpbusd; each
 * panel carries the 128 * sum(w) that adds, so the integer sums are exact.
 * pack_a with row NULL blanks a lane (zero activation, zero scales).
 *
 * Every output is the same sequence of per-lane operations whatever its
 * tile, lane or thread, so results depend neither on the thread count nor
 * on the token's place in the batch.
 */
#define TK_GEMM_ROWS 12
#define TK_GEMM_LANES 16

static inline size_t tk_group_bytes(int64_t n_cols) { return (size_t)n_cols * 20; }

/* Rows [0, n) of the weight matrix at w (row stride wrow, n <= TK_GEMM_ROWS)
 * into `panel`; rows n.. are zeroed. */
typedef void (*tk_pack_w_fn)(const void *w, size_t wrow, int n, int64_t n_cols, void *panel);
/* The same for a tiled matrix (tq.h) at w: rows [r0, r0 + n) into `panel`,
 * in the panel layout of its untiled type. */
typedef void (*tk_pack_wt_fn)(const void *w, int64_t r0, int n, int64_t n_cols, void *panel);
/* One converted activation row (the weight type's vec_dot_type), or NULL
 * for a blank, into lane `lane` of `group`. */
typedef void (*tk_pack_a_fn)(const void *row, int64_t n_cols, int lane, void *group);
/* out[r][l] = y of panel row r and group lane l, over all n_cols. */
typedef void (*tk_tile_fn)(const void *panel, int64_t n_cols, const void *group,
                           float out[TK_GEMM_ROWS][TK_GEMM_LANES]);

/*
 * SMALL BATCH: 2 .. TK_SMALL_LANES - 1 tokens (batched decoding), where a
 * weight serves too few tokens to pay for a panel: weights are read straight
 * from the mapped rows, tokens across 8 lanes (tk_small_avx512.c), with the
 * per-output arithmetic of the type's GEMM.  small_pack_a writes one token's
 * converted row (NULL: a blank) into lane `lane` of a tk_small_act_bytes
 * buffer; small_rows computes y[t * y_stride + r] for its n_rows rows and
 * every token t < n_tok.
 */
#define TK_SMALL_LANES 8
static inline size_t tk_small_act_bytes(int64_t n_cols) { return (size_t)n_cols * 10; }
typedef void (*tk_small_rows_fn)(const void *w, size_t wrow, int n_rows, int64_t n_cols, const void *act,
                                 int n_tok, float *y, int64_t y_stride);

/*
 * FEW TOKENS (decoding, 1 .. TK_SMALL_LANES - 1), 32-value formats: 16 rows
 * at a time, each row read once for all tokens, rows across the lanes for
 * the float work, the per-output arithmetic of the GEMM again
 * (tk_gemv_avx512.c).  gemv_pack_a lays token `lane`'s converted row out in
 * a buffer of tk_gemv_buf_bytes (activations, then the kernel's work area);
 * gemv_rows takes small_rows' arguments.
 */
/* The converted activations, per token, per group of 4 blocks (token t's
 * groups start at buf + t * groups * TK_GEMV_GRP):
 *   lo [4][16] s8 | hi [4][16] s8 | sa [16] i32 (block k's sum in lane 4k)
 *   | as [4] f32 | am [4] f32 (as * sum)
 * values 0-15 of block k at lo + 16k, 16-31 at hi + 16k. */
#define TK_GEMV_GRP 256
enum { TK_GEMV_LO = 0, TK_GEMV_HI = 64, TK_GEMV_SA = 128, TK_GEMV_AS = 192, TK_GEMV_AM = 208 };
static inline size_t tk_gemv_buf_bytes(int64_t n_cols, int64_t n_tok)
{
    /* per token and 4-block group: activations 256, start values 64,
     * totals 256; per group: scale and min halves 256 */
    return (size_t)((n_cols / 32 + 3) / 4) * (576 * (size_t)n_tok + 256);
}

typedef struct tk_gemm {
    tk_pack_w_fn pack_w[TQ_COUNT];   /* by weight type; NULL: no GEMM for it */
    tk_pack_wt_fn pack_wt[TQ_COUNT]; /* by tiled type: panels from tiles (tile[] of the untiled type) */
    tk_tile_fn tile[TQ_COUNT];       /* by weight type */
    int rec_cols[TQ_COUNT];          /* by weight type: columns per panel record */
    size_t rec_bytes[TQ_COUNT];      /* by weight type: bytes per panel record */
    int min_tokens[TQ_COUNT];        /* by weight type: fewer tokens take vec_dot */
    tk_pack_a_fn pack_a[TQ_COUNT];   /* by activation type (Q8_0, Q8_K) */
    /* the small-batch path (2 .. TK_SMALL_LANES - 1 tokens) */
    tk_pack_a_fn small_pack_a[TQ_COUNT];   /* by activation type */
    tk_small_rows_fn small_rows[TQ_COUNT]; /* by weight type */
    /* the one-token path (tk_gemv_avx512.c): same signatures, n_tok 1 */
    tk_pack_a_fn gemv_pack_a[TQ_COUNT];    /* by activation type */
    tk_small_rows_fn gemv_rows[TQ_COUNT];  /* by weight type */
    int gemv_max_tokens[TQ_COUNT];         /* by weight type: more take small_rows */
} tk_gemm;

/* Bytes of a panel of `type` over n_cols columns. */
static inline size_t tk_panel_bytes(const tk_gemm *g, int type, int64_t n_cols)
{
    return (size_t)(n_cols / g->rec_cols[type]) * g->rec_bytes[type];
}

void tk_fill_avx512_gemm(tk_gemm *g);    /* tk_gemm_avx512.c: VNNI, 32-value formats */
void tk_fill_avx512_gemmk(tk_gemm *g);   /* tk_gemmk_avx512.c: VNNI, K-quants */
void tk_fill_avx512_small(tk_gemm *g);   /* tk_small_avx512.c: VNNI, 32-value formats */
void tk_fill_avx512_gemv(tk_gemm *g);    /* tk_gemv_avx512.c: VNNI, 32-value formats */
/* The tiled kernels (tk_tiled_avx512.c, tk_tiledk_avx512.c: gemv_rows of
 * the tiled types) serve up to gemv_max_tokens tokens where their product
 * has no plain matrix (tiled Q4_0 / Q8_0 / IQ4_NL / MXFP4 / Q4_K:
 * TK_TILED_MAX_TOKENS, 4 tokens per pass over a tile, at about the GEMM's
 * speed whatever the count; Q6_K, a token per pass: 31, then its GEMM).
 * The 32-value ones read the same activations as the few-token kernel and
 * need less work area: per token and group, the activations and 4 start
 * values.  The K-quants read per token one
 * TK_KREC record per super-block:
 *   qs [256] s8 | b4 [4] i32: int16 pairs of 32-value sums (s_2k, s_2k+1)
 *   | b6 [8] i32: int16 pairs of minus the 16-value sums (-s_2m, -s_2m+1)
 *   | d f32 */
#ifndef TK_TILED_MAX_TOKENS
#define TK_TILED_MAX_TOKENS 63
#endif
#define TK_KREC 320
enum { TK_KREC_B4 = 256, TK_KREC_B6 = 272, TK_KREC_D = 304 };
static inline size_t tk_tiled_buf_bytes(tq_type vt, int64_t n_cols, int64_t n_tok)
{
    if (vt == TQ_Q8_K) return (size_t)(n_cols / TQ_QK_K) * TK_KREC * (size_t)n_tok;
    return (size_t)((n_cols / 32 + 3) / 4) * (TK_GEMV_GRP + 64) * (size_t)n_tok;
}
/* tk_tiled_avx512.c: VNNI, tiled Q4_0 / Q8_0 / IQ4_NL / MXFP4 and plain IQ4_NL / MXFP4 (gemv_rows) */
void tk_fill_avx512_tiled(tk_gemm *g);
void tk_fill_avx512_tiledk(tk_gemm *g);  /* tk_tiledk_avx512.c: VNNI, tiled Q4_K / Q6_K (gemv_rows) */

#endif
