/*
 * tk_tiled_avx512.c - decoding and small batches (1 .. TK_TILED_MAX_TOKENS
 * tokens) against the tiled layouts of tq.h (TQ_Q4_0X16, TQ_Q8_0X16,
 * TQ_IQ4_NLX16, TQ_MXFP4X16), and against plain IQ4_NL / MXFP4 rows (1 ..
 * TK_SMALL_LANES - 1 tokens), AVX-512 VNNI.
 * tk.c calls tk_fill_avx512_tiled only on CPUs with the avx512 table.
 *
 * WHY: the row-major kernel (tk_gemv_avx512.c) spends about 3 vector
 * operations per block and row gathering codes and reducing partial sums
 * across lanes; for Q4_0 that kept 2 threads from the memory's rate.  In a
 * tile every 64-byte line is 4 code bytes of 16 rows, so a vpdpbusd against
 * 4 broadcast activations adds to 16 rows' sums at once, and the sums end
 * up with rows across the lanes, where the float work wants them: per
 * block and 16 rows, Q4_0 takes 4 loads, 8 unpacking operations (2 per
 * line: the high nibbles stay in place, 16 x the level, and their sum is
 * shifted back once), 8 vpdpbusd and 5 integer and float operations per
 * token, about 1.5 per block and row; Q8_0 takes 8 loads and 8 vpdpbusd.
 * One thread in cache, one token (bench_kernels): Q4_0 17.5 -> 45.6 GB/s,
 * Q8_0 28.8 -> 66.4; 4 to 48 tokens about 460 GOP/s on 2 threads, 2-3x
 * the small-batch kernel and the GEMM below 32 tokens.
 *
 * The non-linear formats (IQ4_NL, MXFP4: a level is an index into 16
 * values) take 2 more operations per line: each nibble goes through a
 * vpshufb of the 16 values + 128 (so they are unsigned, 1..241 or
 * 116..140), and the 128 comes off with the activation sums as Q8_0's
 * does.  MXFP4's scale is a byte (2^(e - 128)); its float is built from
 * the bits as tq_e8m0_half does, 16 rows at a time.  Their plain rows (the
 * weights before model_copy.c tiles them, or a matrix of a shape that does
 * not tile) go through the same kernel with each line gathered from 16
 * rows (vpgatherdd), so plain and tiled matrices give the same bits; the
 * gathers make it a few times slower than the tiled one, which is what
 * decoding runs once the copy is in place.
 *
 * ARITHMETIC: that of every other path for the 32-value formats (see
 * tk_gemv_avx512.c): per block b in order,
 *   I_b = sum(code * a) - zero * sum(a)   (exact; zero 8, or 128 for the
 *                                          stored +128 Q8_0 codes and the
 *                                          +128 table values)
 *   acc = fma(float(I_b), as_b * ws_b, acc)
 * so a sequence's outputs are the same bits whether its weights are tiled
 * or not and whichever path its batch takes.  For IQ4_NL and MXFP4 that
 * is not the reference's order (tq_iquant.c: 8 lanes per block, summed at
 * the end), so their products agree with vec_dot within tk.h's budget, as
 * Q4_0's do.
 *
 * Reads tk_impl.h's TK_GEMV_* activations; the work area after them holds
 * each token's per-block start values (-zero * sum).  Each tile is one
 * sequential run of memory, and a unit of rows (tk.c) is whole tiles.
 */
#include "tk_codes_avx512.h"
#include "tk_impl.h"
#include "tq_impl.h"

/* Software prefetch distance, as in tk_gemv_avx512.c (into L2); 0, 2, 4
 * and 16 KiB measured no better in decode (noise of +-15% between runs). */
#define PF_AHEAD 8192
#define ROWS TQ_TILE_ROWS

/* The weight formats, and how their codes and scales are read. */
enum kind { K_Q4_0, K_Q8_0, K_IQ4_NL, K_MXFP4 };

/* Where the 16 rows come from: a tile, or plain rows (PLAIN: `off` holds
 * each row's byte offset from w, the last row repeated past the matrix). */
typedef struct {
    const char *w;
    __m512i off;
} src16;

static inline int code_bytes(const int K) { return K == K_Q8_0 ? 32 : 16; }

/* Line j (bytes 4j..4j+3 of the block's codes, 16 rows) of block b. */
static inline __attribute__((always_inline)) __m512i
line(src16 s, int64_t b, int j, const int K, const bool PLAIN)
{
    if (PLAIN) {   /* IQ4_NL: 18-byte blocks, codes at 2; MXFP4: 17, at 1 */
        const size_t at = K == K_MXFP4 ? (size_t)b * sizeof(tq_block_mxfp4) + 1 : (size_t)b * sizeof(tq_block_iq4_nl) + 2;
        return _mm512_i32gather_epi32(s.off, s.w + at + 4 * j, 1);
    }
    const size_t at = K == K_MXFP4 ? tq_tile_codes_mx(b) : tq_tile_codes(b, code_bytes(K));
    return _mm512_loadu_si512(s.w + at + 64 * j);
}

/* The 16 rows' scales of block b as floats. */
static inline __attribute__((always_inline)) __m512 scales(src16 s, int64_t b, const int K, const bool PLAIN)
{
    __m512i e;
    if (PLAIN) {   /* the block's first 4 bytes: d (IQ4_NL), e (MXFP4) */
        const size_t bs = K == K_MXFP4 ? sizeof(tq_block_mxfp4) : sizeof(tq_block_iq4_nl);
        __m512i v = _mm512_i32gather_epi32(s.off, s.w + (size_t)b * bs, 1);
        if (K != K_MXFP4) return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
        e = _mm512_and_si512(v, _mm512_set1_epi32(0xff));
    } else if (K != K_MXFP4) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s.w + tq_tile_scales(b, code_bytes(K)))));
    } else {
        e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s.w + tq_tile_scales_mx(b))));
    }
    /* tq_e8m0_half: (e - 1) << 23, or the subnormals 2^-128, 2^-127 for e 0, 1 */
    __m512i bits = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    __mmask16 sub = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    bits = _mm512_mask_sllv_epi32(bits, sub, _mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(bits);
}

/*
 * One tile (16 rows) against NT tokens (act, init, y already at the
 * first of them).  K and PLAIN are constants in every instance, as is NT,
 * so the loops over lines and tokens unroll and the sums stay in
 * registers.  table: the format's 16 values + 128 in every 128-bit lane
 * (IQ4_NL, MXFP4).
 */
static inline __attribute__((always_inline)) void
tile16(src16 s, int64_t nb, const char *act, size_t act_tok, const int32_t *init, float *y, int64_t ys,
       __mmask16 store, __m512i table, const int K, const bool PLAIN, const int NT)
{
    const size_t block_codes = (size_t)ROWS * code_bytes(K);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[NT];
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (!PLAIN) {
            const char *codes = &s.w[K == K_MXFP4 ? tq_tile_codes_mx(b) : tq_tile_codes(b, code_bytes(K))];
            for (size_t k = 0; k < block_codes; k += 64) _mm_prefetch(codes + PF_AHEAD + k, _MM_HINT_T1);
            if (b % 2 == 0) _mm_prefetch(codes + PF_AHEAD + 2 * block_codes, _MM_HINT_T1);   /* the scales */
        }
        /* two chains per token (values 0-15, 16-31): half the latency */
        __m512i s1[NT], s2[NT];
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            s1[t] = _mm512_set1_epi32(init[t * nb + b]);
            s2[t] = _mm512_setzero_si512();
        }
        const size_t a_off = (size_t)(b / 4) * TK_GEMV_GRP + 16 * (size_t)(b % 4);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            __m512i lo, hi;
            if (K == K_Q8_0) {   /* lines i (values 4i..) and 4+i (16+4i..) */
                lo = line(s, b, i, K, PLAIN);
                hi = line(s, b, 4 + i, K, PLAIN);
            } else {             /* line i: values 4i..4i+3 in the low nibbles, 16+4i.. in the high */
                __m512i v = line(s, b, i, K, PLAIN);
                lo = _mm512_and_si512(v, m4);
                if (K == K_Q4_0) {
                    hi = _mm512_andnot_si512(m4, v);   /* 16 x the level: s2 is shifted back below */
                } else {
                    lo = _mm512_shuffle_epi8(table, lo);
                    hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                }
            }
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const char *a = act + t * act_tok + a_off;
                s1[t] = _mm512_dpbusd_epi32(s1[t], lo, _mm512_set1_epi32(load_i32(a + TK_GEMV_LO + 4 * i)));
                s2[t] = _mm512_dpbusd_epi32(s2[t], hi, _mm512_set1_epi32(load_i32(a + TK_GEMV_HI + 4 * i)));
            }
        }
        const __m512 ws = scales(s, b, K, PLAIN);
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const float as = ((const float *)(act + t * act_tok + (b / 4) * TK_GEMV_GRP + TK_GEMV_AS))[b % 4];
            const __m512i s2t = K == K_Q4_0 ? _mm512_srai_epi32(s2[t], 4) : s2[t];
            __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(s1[t], s2t));
            acc[t] = _mm512_fmadd_ps(sum, _mm512_mul_ps(_mm512_set1_ps(as), ws), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(y + t * ys, store, acc[t]);
}

/* Tokens per pass over a tile: 3 registers each (two integer chains and
 * the float sum).  Measured (896 x 4864, GOP/s at 4-24 tokens, 2 threads):
 * 4 and 6 both about 460, 8 about 90 (the sums spill). */
#define GROUP 4

#define TILE16_CASES(K, PLAIN)                                                                \
    switch (nt) {                                                                             \
    case 1: tile16(s, nb, a, act_tok, in, yt, ys, store, table, K, PLAIN, 1); break;          \
    case 2: tile16(s, nb, a, act_tok, in, yt, ys, store, table, K, PLAIN, 2); break;          \
    case 3: tile16(s, nb, a, act_tok, in, yt, ys, store, table, K, PLAIN, 3); break;          \
    default: tile16(s, nb, a, act_tok, in, yt, ys, store, table, K, PLAIN, GROUP); break;     \
    }
_Static_assert(GROUP == 4, "TILE16_CASES has an instance per group size");

/* The format's 16 values + 128 in each 128-bit lane (zero for Q4_0 / Q8_0). */
static __m512i table_of(const int K)
{
    if (K != K_IQ4_NL && K != K_MXFP4) return _mm512_setzero_si512();
    const int8_t *v = K == K_IQ4_NL ? tq_iq4nl_values : tq_mxfp4_values;
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i *)v), _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

/*
 * n_rows from w against n_tok tokens: per 16 rows (a tile, or 16 plain
 * rows), the tokens in groups of up to GROUP, the rows read from memory by
 * the first group and from cache by the others.  Tiled: n_rows whole tiles.
 */
static inline __attribute__((always_inline)) void
rows(const char *w, size_t wrow, int n_rows, int64_t n_cols, const char *act, int n_tok, float *y, int64_t ys,
     const int K, const bool PLAIN)
{
    const int64_t nb = n_cols / 32, ng = (nb + 3) / 4;
    const size_t act_tok = (size_t)ng * TK_GEMV_GRP;
    const int32_t zero = K == K_Q4_0 ? 8 : 128;   /* the codes' zero point */
    const __m512i table = table_of(K);
    /* per token and block: the integer start value, from the block's sum
     * (the work area after the activations, tk_tiled_buf_bytes) */
    int32_t *init = (int32_t *)(act + (size_t)n_tok * act_tok);
    for (int t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const char *g = act + t * act_tok + (b / 4) * TK_GEMV_GRP;
            init[t * nb + b] = -zero * ((const int32_t *)(g + TK_GEMV_SA))[4 * (b % 4)];
        }
    for (int r = 0; r < n_rows; r += ROWS) {
        const int nr = MIN(ROWS, n_rows - r);
        const __mmask16 store = (__mmask16)((1u << nr) - 1);
        src16 s = { w + (size_t)r * wrow, _mm512_setzero_si512() };
        if (PLAIN) {
            const __m512i i = _mm512_min_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(nr - 1));
            s.off = _mm512_mullo_epi32(i, _mm512_set1_epi32((int)wrow));
        }
        for (int t0 = 0; t0 < n_tok; t0 += GROUP) {
            const int nt = MIN(GROUP, n_tok - t0);
            const char *a = act + t0 * act_tok;
            const int32_t *in = init + t0 * nb;
            float *yt = y + t0 * ys + r;
            TILE16_CASES(K, PLAIN)
        }
    }
}

static void rows_q4_0x16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_Q4_0, false);
}

static void rows_q8_0x16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_Q8_0, false);
}

static void rows_iq4_nlx16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_IQ4_NL, false);
}

static void rows_mxfp4x16(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_MXFP4, false);
}

static void rows_iq4_nl(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_IQ4_NL, true);
}

static void rows_mxfp4(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows(w, wrow, n, c, a, t, y, ys, K_MXFP4, true);
}

void tk_fill_avx512_tiled(tk_gemm *g)
{
    g->gemv_rows[TQ_Q4_0X16] = rows_q4_0x16;
    g->gemv_rows[TQ_Q8_0X16] = rows_q8_0x16;
    g->gemv_rows[TQ_IQ4_NLX16] = rows_iq4_nlx16;
    g->gemv_rows[TQ_MXFP4X16] = rows_mxfp4x16;
    g->gemv_max_tokens[TQ_Q4_0X16] = g->gemv_max_tokens[TQ_Q8_0X16] = TK_TILED_MAX_TOKENS;
    g->gemv_max_tokens[TQ_IQ4_NLX16] = g->gemv_max_tokens[TQ_MXFP4X16] = TK_TILED_MAX_TOKENS;
    /* plain rows: up to where the GEMM takes over (they have no
     * small-batch kernel), so a token's outputs do not depend on its batch */
    g->gemv_rows[TQ_IQ4_NL] = rows_iq4_nl;
    g->gemv_rows[TQ_MXFP4] = rows_mxfp4;
    g->gemv_max_tokens[TQ_IQ4_NL] = g->gemv_max_tokens[TQ_MXFP4] = TK_SMALL_LANES - 1;
}
