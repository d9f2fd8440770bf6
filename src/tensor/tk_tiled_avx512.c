/*
 * tk_tiled_avx512.c - decoding and small batches (1 .. TK_TILED_MAX_TOKENS
 * tokens) against the tiled layouts of tq.h (TQ_Q4_0X16, TQ_Q8_0X16),
 * AVX-512 VNNI.
 * tk.c calls tk_fill_avx512_tiled only on CPUs with the avx512 table.
 *
 * WHY: the row-major kernel (tk_gemv_avx512.c) spends about 3 vector
 * operations per block and row gathering codes and reducing partial sums
 * across lanes; for Q4_0 that kept 2 threads from the memory's rate.  In a
 * tile every 64-byte line is 4 code bytes of 16 rows, so a vpdpbusd against
 * 4 broadcast activations adds to 16 rows' sums at once, and the sums end
 * up with rows across the lanes, where the float work wants them: per
 * block and 16 rows, Q4_0 takes 4 loads, 12 unpacking operations (3 per
 * line), 8 vpdpbusd and 4 float operations per token, about 1.5 per block
 * and row; Q8_0 takes 8 loads and 8 vpdpbusd.  One thread in cache, one
 * token (bench_kernels): Q4_0 17.5 -> 45.6 GB/s, Q8_0 28.8 -> 66.4; 4 to
 * 48 tokens about 460 GOP/s on 2 threads, 2-3x the small-batch kernel and
 * the GEMM below 32 tokens.
 *
 * ARITHMETIC: that of every other path for the 32-value formats (see
 * tk_gemv_avx512.c): per block b in order,
 *   I_b = sum(code * a) - zero * sum(a)   (exact; zero 8, or 128 for the
 *                                          stored +128 Q8_0 codes)
 *   acc = fma(float(I_b), as_b * ws_b, acc)
 * so a sequence's outputs are the same bits whether its weights are tiled
 * or not and whichever path its batch takes.
 *
 * Reads tk_impl.h's TK_GEMV_* activations; the work area after them holds
 * each token's per-block start values (-zero * sum).  Each tile is one
 * sequential run of memory, and a unit of rows (tk.c) is whole tiles.
 */
#include "tk_codes_avx512.h"
#include "tk_impl.h"

/* Software prefetch distance, as in tk_gemv_avx512.c (into L2); 0, 2, 4
 * and 16 KiB measured no better in decode (noise of +-15% between runs). */
#define PF_AHEAD 8192
#define ROWS TQ_TILE_ROWS

/*
 * One tile (16 rows) against NT tokens (act, init, y already at the
 * first of them).  CB: code bytes per block and row (16: Q4_0 nibbles,
 * 32: Q8_0 bytes).  Both are constants in every instance, so the loops
 * over lines and tokens unroll and the sums stay in registers.
 */
static inline __attribute__((always_inline)) void
tile16(const char *tile, int64_t nb, const char *act, size_t act_tok, const int32_t *init, float *y, int64_t ys,
       const int CB, const int NT)
{
    const size_t block_codes = (size_t)ROWS * CB;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[NT];
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *codes = tile + tq_tile_codes(b, CB), *wd = tile + tq_tile_scales(b, CB);
        for (size_t k = 0; k < block_codes; k += 64) _mm_prefetch(codes + PF_AHEAD + k, _MM_HINT_T1);
        if (b % 2 == 0) _mm_prefetch(wd + PF_AHEAD, _MM_HINT_T1);
        /* two chains per token (values 0-15, 16-31): half the latency */
        __m512i s[NT], s2[NT];
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            s[t] = _mm512_set1_epi32(init[t * nb + b]);
            s2[t] = _mm512_setzero_si512();
        }
        const size_t a_off = (size_t)(b / 4) * TK_GEMV_GRP + 16 * (size_t)(b % 4);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            __m512i lo, hi;
            if (CB == 16) {   /* line i: values 4i..4i+3 in the low nibbles, 16+4i.. in the high */
                __m512i v = _mm512_loadu_si512(codes + 64 * i);
                lo = _mm512_and_si512(v, m4);
                hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            } else {          /* lines i (values 4i..) and 4+i (16+4i..) */
                lo = _mm512_loadu_si512(codes + 64 * i);
                hi = _mm512_loadu_si512(codes + 64 * (4 + i));
            }
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const char *a = act + t * act_tok + a_off;
                s[t] = _mm512_dpbusd_epi32(s[t], lo, _mm512_set1_epi32(load_i32(a + TK_GEMV_LO + 4 * i)));
                s2[t] = _mm512_dpbusd_epi32(s2[t], hi, _mm512_set1_epi32(load_i32(a + TK_GEMV_HI + 4 * i)));
            }
        }
        const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wd));
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const float as = ((const float *)(act + t * act_tok + (b / 4) * TK_GEMV_GRP + TK_GEMV_AS))[b % 4];
            __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(s[t], s2[t]));
            acc[t] = _mm512_fmadd_ps(sum, _mm512_mul_ps(_mm512_set1_ps(as), ws), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* Tokens per pass over a tile: 3 registers each (two integer chains and
 * the float sum).  Measured (896 x 4864, GOP/s at 4-24 tokens, 2 threads):
 * 4 and 6 both about 460, 8 about 90 (the sums spill). */
#define GROUP 4

#define TILE16_CASES(CB)                                                         \
    switch (nt) {                                                                \
    case 1: tile16(tile, nb, a, act_tok, in, yt, ys, CB, 1); break;              \
    case 2: tile16(tile, nb, a, act_tok, in, yt, ys, CB, 2); break;              \
    case 3: tile16(tile, nb, a, act_tok, in, yt, ys, CB, 3); break;              \
    default: tile16(tile, nb, a, act_tok, in, yt, ys, CB, GROUP); break;         \
    }
_Static_assert(GROUP == 4, "TILE16_CASES has an instance per group size");

/*
 * n_rows (whole tiles) from w against n_tok tokens: per tile, the tokens
 * in groups of up to GROUP, the tile read from memory by the first group
 * and from cache by the others.
 */
static inline __attribute__((always_inline)) void
tiles(const char *w, size_t wrow, int n_rows, int64_t n_cols, const char *act, int n_tok, float *y, int64_t ys,
      const int CB)
{
    const int64_t nb = n_cols / 32, ng = (nb + 3) / 4;
    const size_t act_tok = (size_t)ng * TK_GEMV_GRP;
    const int32_t zero = CB == 16 ? 8 : 128;   /* the codes' zero point */
    /* per token and block: the integer start value, from the block's sum
     * (the work area after the activations, tk_tiled_buf_bytes) */
    int32_t *init = (int32_t *)(act + (size_t)n_tok * act_tok);
    for (int t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const char *g = act + t * act_tok + (b / 4) * TK_GEMV_GRP;
            init[t * nb + b] = -zero * ((const int32_t *)(g + TK_GEMV_SA))[4 * (b % 4)];
        }
    for (int r = 0; r < n_rows; r += ROWS) {
        const char *tile = w + (size_t)r * wrow;
        for (int t0 = 0; t0 < n_tok; t0 += GROUP) {
            const int nt = MIN(GROUP, n_tok - t0);
            const char *a = act + t0 * act_tok;
            const int32_t *in = init + t0 * nb;
            float *yt = y + t0 * ys + r;
            if (CB == 16) {
                TILE16_CASES(16)
            } else {
                TILE16_CASES(32)
            }
        }
    }
}

static void rows_q4_0x16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    tiles(w, wrow, n, c, a, t, y, ys, 16);
}

static void rows_q8_0x16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    tiles(w, wrow, n, c, a, t, y, ys, 32);
}

void tk_fill_avx512_tiled(tk_gemm *g)
{
    g->gemv_rows[TQ_Q4_0X16] = rows_q4_0x16;
    g->gemv_rows[TQ_Q8_0X16] = rows_q8_0x16;
    g->gemv_max_tokens[TQ_Q4_0X16] = g->gemv_max_tokens[TQ_Q8_0X16] = TK_TILED_MAX_TOKENS;
}
