/*
 * tk_tiledk_avx512.c - decoding and small batches against the tiled
 * K-quant layouts of tq.h (TQ_Q4_KX16, TQ_Q6_KX16), AVX-512 VNNI.
 * tk.c calls tk_fill_avx512_tiledk only on CPUs with the avx512 table.
 *
 * WHY: vec_dot (tk_kquant_avx512.c) takes one row and one token at a time
 * and ends every row with a horizontal reduction; its integer work held
 * Q4_K to about 18 GB/s a thread, so a Q4_K_M model decoded on 2 threads
 * at well under half the memory's rate.  In a tile every 64-byte line is 4
 * bytes of 16 rows: one vpdpbusd (Q4_K) or vpmaddubsw + vpdpwssd (Q6_K)
 * against 4 broadcast activations adds to 16 rows' sums at once, and the
 * sums end with rows across the lanes, where the scales and the float
 * work want them.
 *
 * ARITHMETIC: the scalar reference's (tq_kquant.c NUMERICS), so the
 * outputs equal vec_dot and the GEMM to the bit:
 *   Q4_K  per super-block the exact totals sum_j sc_j (q_j . a_j) and
 *         sum_j mn_j (s_2j + s_2j+1); acc += total * (d * da), acc_min +=
 *         mins * (dmin * da); y = acc - acc_min
 *   Q6_K  8 integer lanes m (values 4m..4m+3 of every 32-value run, times
 *         their 16-value scale, levels 0..63) minus 32 (sc_2m s_2m +
 *         sc_2m+1 s_2m+1); acc[m] += (da * d) * lane[m]; y summed as
 *         ((0+4) + (2+6)) + ((1+5) + (3+7))
 * Only the integer work is rearranged, and integer sums are exact.
 *
 * Q4_K: line j of a block's qs holds bytes 4j..4j+3 of each row: low
 * nibbles are values 4(j%8).. of run 2(j/8), high nibbles those of run
 * 2(j/8)+1; a run's 8 lines go into one fresh int32 sum per row, then
 * vpmulld by its scale into the row's total.  The high nibbles stay in
 * place (16 x the level, 240 * 128 * 32 < 2^31), and their run's sum is
 * shifted right by 4 once, which is exact: a line takes one vpandn where
 * it took a shift and an and (bench_kernels 0.3 gemv q4_Kx16, one thread,
 * from cache, GB/s: 34.2 / 32.5 -> 37.0 / 34.9; from L2, 896 x 1024:
 * 40.6-41.5 -> 44.1-46.2).  Up to 4 tokens per pass.
 * Q6_K: qh line h serves ql lines 16(h/8) + h%8 and + 8: their 4 sets of
 * levels all fall in lane h%8; vpmaddubsw (level x activation, pairs
 * summed: 63 * 128 * 2 < 32768) then vpdpwssd by the (scale, scale) pair.
 * One token per pass: its 8 lanes and 8 float sums fill the registers.
 */
#include "tk_impl.h"

#include <immintrin.h>
#include <string.h>

/* Software prefetch distance (prefetch_lines). */
#define PF_AHEAD 8192
#define ROWS TQ_TILE_ROWS
#define LINE TQ_TILE_LINE

enum {   /* tq.h's layouts */
    Q4_UNIT = TQ_Q4_KX16_UNIT, Q4_LINES = TQ_Q4_KX16_LINES, Q4_QS = TQ_Q4_KX16_QS,
    Q4_PF = (TQ_Q4_KX16_LINES + 1) / 4,   /* a block's lines and its scales' line, a quarter of them */
    Q6_UNIT = TQ_Q6_KX16_UNIT, Q6_LINES = TQ_Q6_KX16_LINES, Q6_QH = TQ_Q6_KX16_QH, Q6_SCALES = TQ_Q6_KX16_SCALES,
    Q6_PF = (TQ_Q6_KX16_LINES + 1 + 3) / 4,   /* a block's lines and its unit's d line, a quarter of them */
};

static inline int32_t pair16(int lo, int hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

static inline __m512i bcast(const char *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

static inline __m512i line_at(const char *p) { return _mm512_loadu_si512((const void *)p); }

static inline __m512 halves_at(const char *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* A vpshufb pattern applying `p` (4 byte indexes within a 32-bit lane,
 * 0x80 for a zero) to every 32-bit lane. */
static inline __m512i per_dword(uint32_t p)
{
    uint32_t q[4];
    for (uint32_t j = 0; j < 4; j++) {
        q[j] = 0;
        for (int k = 0; k < 4; k++) {
            uint32_t byte = p >> 8 * k & 0xff;
            q[j] |= (byte & 0x80 ? byte : byte + 4 * j) << 8 * k;
        }
    }
    return _mm512_broadcast_i32x4(_mm_setr_epi32((int)q[0], (int)q[1], (int)q[2], (int)q[3]));
}

/*
 * Lines [from, to) of p, 8 KiB ahead, into L2.
 *
 * An asm statement, not _mm_prefetch: GCC 12 at -O2 deleted the whole
 * 36-iteration loop of builtin prefetches from the Q4_K kernel (objdump
 * showed none in rows_q4_Kx16), and with each line left to the hardware
 * prefetcher behind a block's ~300 instructions it read 20 GB/s a thread
 * from memory, against 38 for a plain read.  Every line 8 KiB ahead into
 * L1 brought it to 35-36 (bench_kernels 0.3 gemv, 1 thread, interleaved);
 * 16 KiB ahead read slower, and so did a line in two in a copy of the
 * loop.  A block's lines asked for into L2 a quarter at a time (at the
 * block's start, then before each of its next three quarters) read faster
 * from memory than all into L1 at the start, on a slower host
 * (bench_kernels 0.3 gemv q6_Kx16,q4_Kx16,q8_0x16, two interleaved passes,
 * GB/s, 1 thread / 2 threads): Q4_K 14.3-14.4 / 29.5-29.9 against
 * 12.6-12.8 / 24.8-26.2; Q6_K 13.1-13.4 / 25.6-27.4 against 11.4-11.8 /
 * 22.3-23.4 (spread into L1, or all at the start into L2, no faster;
 * eighths no faster than quarters).
 */
static inline void prefetch_lines(const char *p, int from, int to)
{
    for (int k = from; k < to; k++) __asm__ volatile("prefetcht1 %0" : : "m"(p[PF_AHEAD + LINE * k]));
}

/* Quarter q (0-3; none past them) of a block's n lines, `per` lines a quarter. */
static inline void prefetch_quarter(const char *blk, int q, int per, int n)
{
    if (q < 4) prefetch_lines(blk, q * per, MIN((q + 1) * per, n));
}

/* One token's Q8_K row into its TK_KREC records. */
static void pack_a_q8_K(const void *row, int64_t n_cols, int lane, void *act)
{
    const tq_block_q8_K *x = row;
    char *rec = (char *)act + (size_t)lane * (size_t)(n_cols / TQ_QK_K) * TK_KREC;
    for (int64_t i = 0; i < n_cols / TQ_QK_K; i++, x++, rec += TK_KREC) {
        memcpy(rec, x->qs, sizeof x->qs);
        int32_t b4[4], b6[8];
        for (int k = 0; k < 4; k++)
            b4[k] = pair16(x->bsums[4 * k] + x->bsums[4 * k + 1], x->bsums[4 * k + 2] + x->bsums[4 * k + 3]);
        for (int m = 0; m < 8; m++) b6[m] = pair16(-x->bsums[2 * m], -x->bsums[2 * m + 1]);
        memcpy(rec + TK_KREC_B4, b4, sizeof b4);
        memcpy(rec + TK_KREC_B6, b6, sizeof b6);
        memcpy(rec + TK_KREC_D, &x->d, sizeof x->d);
    }
}


/* ---- Q4_K ------------------------------------------------------------------- */

/*
 * One tile (16 rows) against NT tokens (act at the first, its records
 * act_tok bytes apart; y at the first token's rows, ys apart).  NT is a
 * constant in every instance, so the loops unroll and the sums stay in
 * registers.
 */
static inline __attribute__((always_inline)) void
tile_q4_K(const char *tile, int64_t nb, const char *act, size_t act_tok, float *y, int64_t ys, const int NT)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), low6 = _mm512_set1_epi8(0x3f), low4 = _mm512_set1_epi8(0x0f);
    const __m512i top2 = _mm512_set1_epi8(0x03);
    /* min pairs (mn_2k, mn_2k+1) as int16 from bytes 0,1 / 2,3 of a lane */
    const __m512i pair01 = per_dword(0x80018000u), pair23 = per_dword(0x80038002u);
    /* scale k of a lane zero-extended */
    const __m512i byte_k[4] = { per_dword(0x80808000u), per_dword(0x80808001u), per_dword(0x80808002u),
                                per_dword(0x80808003u) };
    __m512 acc[NT], acc_min[NT];
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) acc[t] = acc_min[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *blk = tile + tq_tile_line(b, Q4_UNIT, Q4_LINES, 0);
        prefetch_quarter(blk, 0, Q4_PF, Q4_LINES + 1);
        /* the 12 packed bytes of 16 rows: 8 scales (sc03, sc47) and 8 mins
         * (mn03, mn47) per row, 4 to a lane (layout in tq_kquant.c) */
        const __m512i w0 = line_at(blk), w1 = line_at(blk + LINE), w2 = line_at(blk + LINE * 2);
        const __m512i sc03 = _mm512_and_si512(w0, low6), mn03 = _mm512_and_si512(w1, low6);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(w2, low4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), top2), 4));
        const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), top2), 4));
        __m512i tot[NT], mins[NT];
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) tot[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {   /* 64 values: runs 2c and 2c + 1 */
            __m512i sa[NT], sb[NT];
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) sa[t] = sb[t] = _mm512_setzero_si512();
            prefetch_quarter(blk, c + 1, Q4_PF, Q4_LINES + 1);
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) {
                const __m512i v = line_at(blk + LINE * (Q4_QS + 8 * c + l));
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_andnot_si512(m4, v);
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
                    const char *a = act + (size_t)t * act_tok + (size_t)b * TK_KREC + 64 * c + 4 * l;
                    sa[t] = _mm512_dpbusd_epi32(sa[t], lo, bcast(a));
                    sb[t] = _mm512_dpbusd_epi32(sb[t], hi, bcast(a + 32));
                }
            }
            /* sb summed the high nibbles in place, 16 x their levels */
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) sb[t] = _mm512_srai_epi32(sb[t], 4);
            const __m512i scs = c < 2 ? sc03 : sc47;
            const __m512i s_a = _mm512_shuffle_epi8(scs, byte_k[2 * (c % 2)]);
            const __m512i s_b = _mm512_shuffle_epi8(scs, byte_k[2 * (c % 2) + 1]);
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)
                tot[t] = _mm512_add_epi32(tot[t], _mm512_add_epi32(_mm512_mullo_epi32(sa[t], s_a),
                                                                   _mm512_mullo_epi32(sb[t], s_b)));
        }
        const __m512i mp[4] = { _mm512_shuffle_epi8(mn03, pair01), _mm512_shuffle_epi8(mn03, pair23),
                                _mm512_shuffle_epi8(mn47, pair01), _mm512_shuffle_epi8(mn47, pair23) };
        const __m512 dw = halves_at(tile + tq_tile_half(b, Q4_UNIT, Q4_LINES, 0));
        const __m512 mw = halves_at(tile + tq_tile_half(b, Q4_UNIT, Q4_LINES, 1));
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const char *rec = act + (size_t)t * act_tok + (size_t)b * TK_KREC;
            mins[t] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                mins[t] = _mm512_dpwssd_epi32(mins[t], mp[k], bcast(rec + TK_KREC_B4 + 4 * k));
            float da;
            memcpy(&da, rec + TK_KREC_D, sizeof da);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[t]), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[t]);
            acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins[t]), _mm512_mul_ps(mw, _mm512_set1_ps(da)),
                                         acc_min[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, _mm512_sub_ps(acc[t], acc_min[t]));
}

/* Tokens per pass over a Q4_K tile: 4 registers each in a run. */
#define GROUP 4

static void rows_q4_Kx16(const void *w, size_t wrow, int n_rows, int64_t n_cols, const void *act, int n_tok,
                         float *y, int64_t ys)
{
    const int64_t nb = n_cols / TQ_QK_K;
    const size_t act_tok = (size_t)nb * TK_KREC;
    for (int r = 0; r < n_rows; r += ROWS) {
        const char *tile = (const char *)w + (size_t)r * wrow;
        for (int t0 = 0; t0 < n_tok; t0 += GROUP) {
            const char *a = (const char *)act + (size_t)t0 * act_tok;
            float *yt = y + t0 * ys + r;
            switch (MIN(GROUP, n_tok - t0)) {
            case 1: tile_q4_K(tile, nb, a, act_tok, yt, ys, 1); break;
            case 2: tile_q4_K(tile, nb, a, act_tok, yt, ys, 2); break;
            case 3: tile_q4_K(tile, nb, a, act_tok, yt, ys, 3); break;
            default: tile_q4_K(tile, nb, a, act_tok, yt, ys, GROUP); break;
            }
        }
    }
}
_Static_assert(GROUP == 4, "rows_q4_Kx16 has an instance per group size");

/* ---- Q6_K ------------------------------------------------------------------- */

/* Patterns putting the signed byte(s) of a lane into the high bytes of
 * its two int16 halves, for vpsraw 8: byte k twice (a scale for
 * vpdpwssd against level-pair sums), or bytes k, k + 1. */
static inline __m512i twice(int k) { return per_dword(0x00800080u | (uint32_t)k << 8 | (uint32_t)k << 24); }
static inline __m512i both(int k) { return per_dword(0x00800080u | (uint32_t)k << 8 | (uint32_t)(k + 1) << 24); }

static inline __m512i signed_pairs(__m512i v, __m512i pattern)
{
    return _mm512_srai_epi16(_mm512_shuffle_epi8(v, pattern), 8);
}

/* 16 rows of a tile against one token (its records at rec). */
static void tile_q6_K(const char *tile, int64_t nb, const char *rec, float *y)
{
    const __m512i low4 = _mm512_set1_epi8(0x0f), m33 = _mm512_set1_epi8(0x33), mcc = _mm512_set1_epi8((char)0xcc);
    const __m512i tw[4] = { twice(0), twice(1), twice(2), twice(3) }, bo[2] = { both(0), both(2) };
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, rec += TK_KREC) {
        const char *blk = tile + tq_tile_line(b, Q6_UNIT, Q6_LINES, 0);
        const int end = Q6_LINES + (int)(b % 2);   /* the second block's lines end with the unit's d line */
        prefetch_quarter(blk, 0, Q6_PF, end);
        const char *sl = blk + LINE * Q6_SCALES;
        const __m512i s[4] = { line_at(sl), line_at(sl + LINE), line_at(sl + LINE * 2), line_at(sl + LINE * 3) };
        /* lane m starts at -32 (sc_2m s_2m + sc_2m+1 s_2m+1): groups 2m, 2m+1
         * are bytes 2(m % 2), +1 of scale line m / 2 */
        __m512i lane[8];
        _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++)
            lane[m] = _mm512_slli_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), signed_pairs(s[m / 2], bo[m % 2]),
                                                            bcast(rec + TK_KREC_B6 + 4 * m)), 5);
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {   /* values 128n .. 128n + 127 */
            _Pragma("GCC unroll 8") for (int h = 0; h < 8; h++) {
                if (h % 4 == 0) prefetch_quarter(blk, 2 * n + h / 4 + 1, Q6_PF, end);
                const __m512i qh = line_at(blk + LINE * (Q6_QH + 8 * n + h));
                const __m512i l1 = line_at(blk + LINE * (16 * n + h)), l2 = line_at(blk + LINE * (16 * n + 8 + h));
                const __m512i qa = _mm512_and_si512(qh, m33), qb = _mm512_and_si512(qh, mcc);
                /* levels of values 128n + 32r + 4h..: low 4 bits from ql,
                 * bits 4-5 from qh bits 2r, 2r + 1 (0xe4: low4 ? first : second) */
                const __m512i v[4] = {
                    _mm512_ternarylogic_epi32(l1, _mm512_slli_epi16(qa, 4), low4, 0xe4),
                    _mm512_ternarylogic_epi32(l2, _mm512_slli_epi16(qb, 2), low4, 0xe4),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4), qa, low4, 0xe4),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(l2, 4), _mm512_srli_epi16(qb, 2), low4, 0xe4),
                };
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
                    const int g = 8 * n + 2 * r + h / 4;   /* the 16-value group */
                    const __m512i p = _mm512_maddubs_epi16(v[r], bcast(rec + 128 * n + 32 * r + 4 * h));
                    lane[h] = _mm512_dpwssd_epi32(lane[h], p, signed_pairs(s[g / 4], tw[g % 4]));
                }
            }
        }
        float da;
        memcpy(&da, rec + TK_KREC_D, sizeof da);
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(da), halves_at(tile + tq_tile_half(b, Q6_UNIT, Q6_LINES, 0)));
        _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++)
            acc[m] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lane[m]), acc[m]);
    }
    const __m512 s04 = _mm512_add_ps(acc[0], acc[4]), s26 = _mm512_add_ps(acc[2], acc[6]);
    const __m512 s15 = _mm512_add_ps(acc[1], acc[5]), s37 = _mm512_add_ps(acc[3], acc[7]);
    _mm512_storeu_ps(y, _mm512_add_ps(_mm512_add_ps(s04, s26), _mm512_add_ps(s15, s37)));
}

static void rows_q6_Kx16(const void *w, size_t wrow, int n_rows, int64_t n_cols, const void *act, int n_tok,
                         float *y, int64_t ys)
{
    const int64_t nb = n_cols / TQ_QK_K;
    const size_t act_tok = (size_t)nb * TK_KREC;
    for (int r = 0; r < n_rows; r += ROWS)
        for (int t = 0; t < n_tok; t++)
            tile_q6_K((const char *)w + (size_t)r * wrow, nb, (const char *)act + (size_t)t * act_tok, y + t * ys + r);
}

void tk_fill_avx512_tiledk(tk_gemm *g)
{
    g->gemv_pack_a[TQ_Q8_K] = pack_a_q8_K;
    g->gemv_rows[TQ_Q4_KX16] = rows_q4_Kx16;
    g->gemv_rows[TQ_Q6_KX16] = rows_q6_Kx16;
    /* where the GEMM (tk_gemmk_avx512.c, panels packed from the tiles)
     * takes over: bench_kernels gemm, 896 x 4864, 2 threads, GOP/s at 4 /
     * 16 / 32 / 64 tokens: Q4_K tiled 820 / 912, GEMM 173 / 298; Q6_K
     * passes over a tile once per token */
    g->gemv_max_tokens[TQ_Q4_KX16] = TK_TILED_MAX_TOKENS;
    g->gemv_max_tokens[TQ_Q6_KX16] = 31;
}
