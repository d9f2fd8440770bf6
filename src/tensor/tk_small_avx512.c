/*
 * tk_small_avx512.c - products of a few tokens (2 .. 7: batched decoding)
 * for the 32-value formats, AVX-512 VNNI on 256-bit registers.  tk.c calls
 * tk_fill_avx512_small only on CPUs with AVX-512 F/BW/VL/DQ + VNNI.
 *
 * Each weight is used by only a few tokens here, so nothing is packed:
 * weights are read straight from the mapped rows, once.  The tokens go
 * across the 8 int32 lanes of a ymm register, lane 7 always holding a zero
 * activation:
 *
 *   A[g]  = activations + 128 of group g (4 values) of the block, 8 lanes
 *   ai    = sum over g of vpdpbusd(A[g], broadcast w[4g .. 4g+3])
 *   I     = ai - ai[lane 7]        (lane 7 is 128 * sum(w): the +128 back out)
 *   acc  += float(I) * (as * ws)    (+ am * wm for Q4_1 / Q5_1)
 *
 * which is, lane by lane, the arithmetic of the 16-token GEMM
 * (tk_gemm_avx512.c), so a token's outputs are the same whichever of the
 * two paths its batch takes.  Q8_0 blocks are broadcast as stored; the
 * 4- and 5-bit formats are unpacked to bytes in a 32-byte buffer first.
 * 4 rows at a time (8 activation registers, 4 accumulators), prefetching
 * the next 4 rows while these run: read as 4 interleaved streams, rows
 * otherwise come from memory at a third of the speed of one sequential
 * stream (measured: 5.5 against 14 GB/s on one thread, the prefetcher
 * does not follow them).
 *
 * ACTIVATIONS (tk_small_act_bytes): a8 [n_cols / 32][8 groups][8 lanes] u32
 * | as [n_cols / 32][8] f32 | am [n_cols / 32][8] f32.
 */
#include "tk_impl.h"
#include "tk_codes_avx512.h"

#include <immintrin.h>
#include <string.h>

#define NB 8   /* lanes */
#define RS 4   /* rows per tile: more interleaved streams read slower from memory */

static inline size_t act_as(int64_t n_cols) { return (size_t)n_cols * 8; }
static inline size_t act_am(int64_t n_cols) { return (size_t)n_cols * 9; }

static void pack_a_q8_0(const void *row, int64_t n_cols, int lane, void *act)
{
    const tq_block_q8_0 *x = row;
    uint32_t *a8 = (uint32_t *)act + lane;
    float *as = (float *)((char *)act + act_as(n_cols)) + lane;
    float *am = (float *)((char *)act + act_am(n_cols)) + lane;
    for (int64_t b = 0; b < n_cols / 32; b++) {
        if (!x) {
            for (int g = 0; g < 8; g++) a8[(b * 8 + g) * NB] = 0x80808080u;
            as[b * NB] = am[b * NB] = 0;
            continue;
        }
        __m256i v = _mm256_loadu_si256((const __m256i *)x[b].qs);
        uint32_t u[8];
        _mm256_storeu_si256((__m256i *)u, _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        for (int g = 0; g < 8; g++) a8[(b * 8 + g) * NB] = u[g];
        float d = _cvtsh_ss(x[b].d);
        as[b * NB] = d;
        am[b * NB] = d * (float)sum_s8_32(v);
    }
}

/*
 * Block b of a row of `type` as signed bytes: a pointer to them (the
 * stored qs for Q8_0, else `tmp` filled), its scale in *ws, its min in *wm.
 */
static inline __attribute__((always_inline)) const int8_t *
block_s8(const char *row, int64_t b, int type, int8_t *tmp, float *ws, float *wm)
{
    switch (type) {
    case TQ_Q8_0: {
        const tq_block_q8_0 *x = (const tq_block_q8_0 *)row + b;
        *ws = _cvtsh_ss(x->d), *wm = 0;
        return x->qs;
    }
    case TQ_Q4_0: {
        const tq_block_q4_0 *x = (const tq_block_q4_0 *)row + b;
        *ws = _cvtsh_ss(x->d), *wm = 0;
        _mm256_storeu_si256((__m256i *)tmp, _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8)));
        return tmp;
    }
    case TQ_Q4_1: {
        const tq_block_q4_1 *x = (const tq_block_q4_1 *)row + b;
        *ws = _cvtsh_ss(x->d), *wm = _cvtsh_ss(x->m);
        _mm256_storeu_si256((__m256i *)tmp, nibbles32(x->qs));
        return tmp;
    }
    case TQ_Q5_0: {
        const tq_block_q5_0 *x = (const tq_block_q5_0 *)row + b;
        *ws = _cvtsh_ss(x->d), *wm = 0;
        _mm256_storeu_si256((__m256i *)tmp, _mm256_sub_epi8(codes5_32(x->qs, x->qh), _mm256_set1_epi8(16)));
        return tmp;
    }
    default: {   /* TQ_Q5_1 */
        const tq_block_q5_1 *x = (const tq_block_q5_1 *)row + b;
        *ws = _cvtsh_ss(x->d), *wm = _cvtsh_ss(x->m);
        _mm256_storeu_si256((__m256i *)tmp, codes5_32(x->qs, x->qh));
        return tmp;
    }
    }
}

/* Rows [0, R) at w against the activations: y[t * ys + r] for t < n_tok. */
static inline __attribute__((always_inline)) void
tile(const char *w, size_t wrow, int64_t n_cols, const void *act, int n_tok, float *y, int64_t ys,
     const int R, const int type, const bool has_min)
{
    const uint8_t *a8 = act;
    const float *as = (const float *)((const char *)act + act_as(n_cols));
    const float *am = (const float *)((const char *)act + act_am(n_cols));
    const __m256i lane7 = _mm256_set1_epi32(7);
    _Alignas(32) int8_t tmp[RS][32];
    __m256 acc[RS];
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    /* the next tile's rows, spread over this tile's blocks: R interleaved
     * streams are more than the hardware prefetcher follows from memory */
    const int64_t nb = n_cols / 32, n_lines = ((int64_t)R * (int64_t)wrow + 63) / 64;
    const int64_t per_b = (n_lines + nb - 1) / nb;
    const char *next = w + (size_t)R * wrow;
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t k = b * per_b; k < MIN(n_lines, (b + 1) * per_b); k++) _mm_prefetch(next + 64 * k, _MM_HINT_T0);
        __m256i A[8];
        #pragma GCC unroll 8
        for (int g = 0; g < 8; g++) A[g] = _mm256_load_si256((const __m256i *)(a8 + (b * 8 + g) * 32));
        __m256 s = _mm256_load_ps(as + b * NB);
        const int8_t *q[RS];
        float ws[RS], wm[RS];
        __m256i ai[RS];
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            /* R rows are R interleaved streams, more than the hardware
             * prefetcher follows well from DRAM: ask for each a few blocks
             * ahead (past the row end this is the next row, read soon) */
            q[r] = block_s8(w + (size_t)r * wrow, b, type, tmp[r], &ws[r], &wm[r]);
            ai[r] = _mm256_setzero_si256();
        }
        /* groups outside, rows inside: R independent dependency chains */
        #pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                ai[r] = _mm256_dpbusd_epi32(ai[r], A[g], _mm256_set1_epi32(load_i32(q[r] + 4 * g)));
        }
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i i = _mm256_sub_epi32(ai[r], _mm256_permutexvar_epi32(lane7, ai[r]));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(s, _mm256_set1_ps(ws[r])), acc[r]);
            if (has_min) acc[r] = _mm256_fmadd_ps(_mm256_load_ps(am + b * NB), _mm256_set1_ps(wm[r]), acc[r]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float o[NB];
        _mm256_storeu_ps(o, acc[r]);
        for (int t = 0; t < n_tok; t++) y[t * ys + r] = o[t];
    }
}

static inline __attribute__((always_inline)) void
rows(const void *w, size_t wrow, int n_rows, int64_t n_cols, const void *act, int n_tok, float *y, int64_t ys,
     const int type, const bool has_min)
{
    int r = 0;
    for (; r + RS <= n_rows; r += RS)
        tile((const char *)w + (size_t)r * wrow, wrow, n_cols, act, n_tok, y + r, ys, RS, type, has_min);
    for (; r < n_rows; r++)
        tile((const char *)w + (size_t)r * wrow, wrow, n_cols, act, n_tok, y + r, ys, 1, type, has_min);
}

static void rows_q8_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, TQ_Q8_0, false);
}
static void rows_q4_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, TQ_Q4_0, false);
}
static void rows_q4_1(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, TQ_Q4_1, true);
}
static void rows_q5_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, TQ_Q5_0, false);
}
static void rows_q5_1(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, TQ_Q5_1, true);
}

void tk_fill_avx512_small(tk_gemm *g)
{
    g->small_pack_a[TQ_Q8_0] = pack_a_q8_0;
    g->small_rows[TQ_Q8_0] = rows_q8_0;
    g->small_rows[TQ_Q4_0] = rows_q4_0;
    g->small_rows[TQ_Q4_1] = rows_q4_1;
    g->small_rows[TQ_Q5_0] = rows_q5_0;
    g->small_rows[TQ_Q5_1] = rows_q5_1;
}
