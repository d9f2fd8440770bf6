/*
 * tk_gemmk_avx512.c - the GEMM pieces of tk_impl.h for the K-quants (Q4_K,
 * Q5_K, Q6_K) against Q8_K activations, AVX-512 VNNI.  tk.c calls
 * tk_fill_avx512_gemmk only on CPUs with AVX-512 F/BW/VL/DQ + VNNI.
 *
 * NUMERICS: every output is computed with exactly the float operations of
 * the scalar reference (tq_kquant.c), which the vec_dot kernels also
 * follow, so the GEMM equals vec_dot to the bit:
 *
 *   Q4_K  per super-block an exact integer total sum_j sc_j (q_j . a_j) and
 *         min total sum_j mn_j bsum32_j; two float accumulators
 *         acc += total * (d * da), acc_min += mins * (dmin * da); acc - acc_min
 *   Q5_K  8 integer lanes m (values 4m..4m+3 of every 32-value run, times
 *   Q6_K  the run's scale), 8 float accumulators acc[m] += (da * d) * lane[m],
 *         summed in the reference's tree; Q5_K adds its min term like
 *         Q4_K, Q6_K takes its offset of 32 off each lane in integers.
 *
 * Only the integer work is rearranged, and integer sums are exact.
 *
 * KERNELS.  Tokens across the 16 lanes of a zmm register (see tk_impl.h).
 * Q4_K runs 12 rows at once: per 32-value run, 8 vpdpbusd into a fresh
 * int32 sum per row, then vpmulld by the run's scale into the row's total.
 * Q5_K / Q6_K keep 8 lanes per output, so they run 2 rows at a time: per
 * 4 values of a run, vpmaddubsw (activation x level, pairs summed, no
 * saturation: 255 * 63 * 2 < 32768) then vpdpwssd by the scale into lane m.
 * The float accumulators live in a small array on the stack (one update per
 * super-block per row).
 *
 * GROUP after a8 (nsb = n_cols / 256 super-blocks, 16 lanes each):
 *   as  [nsb][16] f32     the activation scale d
 *   bs4 [nsb][4][16] i32  int16 pairs (bsum32_2k, bsum32_2k+1): 32-value sums
 *   bs6 [nsb][8][16] i32  int16 pairs (bsum_2m, bsum_2m+1): 16-value sums
 *
 * PANEL records, one per super-block, 12 rows:
 *   Q4_K (3792 B)  w8 [12][256] codes | sc [12][8] i32 | mnp [12][4] i32 min
 *                  pairs | corr [12] i32 | d [12] f32 | dmin [12] f32
 *   Q5_K, Q6_K (4704 B)  w8 [12][256] | scp [12][8][2] i32 scale pairs
 *                  (sc, sc) for lanes 0-3 and 4-7 of each run | off [12][8]
 *                  i32 (Q5_K: min pairs; Q6_K: (-32 sc_2m, -32 sc_2m+1)) |
 *                  corr [12][8] i32 | d [12] f32 | dmin [12] f32
 * corr is -128 times what the activations' +128 adds to each total/lane.
 */
#include "tk_impl.h"
#include "tk_codes_avx512.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define RT TK_GEMM_ROWS
#define NL TK_GEMM_LANES
#define QK TQ_QK_K

enum { REC4 = RT * (256 + 32 + 16 + 4 + 4 + 4), REC56 = RT * (256 + 64 + 32 + 32 + 4 + 4) };

static inline int32_t pair16(int lo, int hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

/* ---- activation groups ------------------------------------------------------ */

static inline size_t group_as(int64_t n_cols) { return (size_t)n_cols * 16; }
static inline size_t group_bs4(int64_t n_cols) { return group_as(n_cols) + (size_t)n_cols / 4; }
static inline size_t group_bs6(int64_t n_cols) { return group_bs4(n_cols) + (size_t)n_cols; }

static void pack_a_q8_K(const void *row, int64_t n_cols, int lane, void *group)
{
    const tq_block_q8_K *x = row;
    uint32_t *a8 = (uint32_t *)group + lane;
    float *as = (float *)((char *)group + group_as(n_cols)) + lane;
    int32_t *bs4 = (int32_t *)((char *)group + group_bs4(n_cols)) + lane;
    int32_t *bs6 = (int32_t *)((char *)group + group_bs6(n_cols)) + lane;
    for (int64_t i = 0; i < n_cols / QK; i++) {
        if (!x) {
            for (int k = 0; k < 64; k++) a8[(i * 64 + k) * NL] = 0x80808080u;
        } else {
            for (int c = 0; c < 8; c++) {
                uint32_t u[8];
                __m256i v = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
                _mm256_storeu_si256((__m256i *)u, _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
                for (int g = 0; g < 8; g++) a8[(i * 64 + c * 8 + g) * NL] = u[g];
            }
        }
        as[i * NL] = x ? x[i].d : 0;
        for (int k = 0; k < 4; k++) {
            const int16_t *b = x ? x[i].bsums + 4 * k : NULL;
            bs4[(i * 4 + k) * NL] = b ? pair16(b[0] + b[1], b[2] + b[3]) : 0;
        }
        for (int m = 0; m < 8; m++) bs6[(i * 8 + m) * NL] = x ? pair16(x[i].bsums[2 * m], x[i].bsums[2 * m + 1]) : 0;
    }
}

/* ---- panels ----------------------------------------------------------------- */

/* Pointers into one super-block record. */
typedef struct {
    uint8_t *w8;          /* [RT][256] */
    int32_t *sc;          /* Q4_K: [RT][8] scales; Q5_K/Q6_K: [RT][8][2] scale pairs */
    int32_t *off;         /* Q4_K: [RT][4] min pairs; Q5_K/Q6_K: [RT][8] */
    int32_t *corr;        /* Q4_K: [RT]; Q5_K/Q6_K: [RT][8] */
    float *d, *dmin;      /* [RT] */
} rec;

static inline rec rec4(void *panel, int64_t i)
{
    char *p = (char *)panel + (size_t)i * REC4;
    rec k = { (uint8_t *)p, (int32_t *)(p + RT * 256), NULL, NULL, NULL, NULL };
    k.off = k.sc + RT * 8;
    k.corr = k.off + RT * 4;
    k.d = (float *)(k.corr + RT);
    k.dmin = k.d + RT;
    return k;
}

static inline rec rec56(void *panel, int64_t i)
{
    char *p = (char *)panel + (size_t)i * REC56;
    rec k = { (uint8_t *)p, (int32_t *)(p + RT * 256), NULL, NULL, NULL, NULL };
    k.off = k.sc + RT * 16;
    k.corr = k.off + RT * 8;
    k.d = (float *)(k.corr + RT * 8);
    k.dmin = k.d + RT;
    return k;
}

/* The 8 six-bit scales and mins of a Q4_K/Q5_K block (layout in tq_kquant.c). */
static inline void scales_mins(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

/* Sums of the 8 groups of 4 bytes of a 32-byte run (exact). */
static inline void group_sums(const uint8_t *v, int s[8])
{
    for (int m = 0; m < 8; m++) s[m] = v[4 * m] + v[4 * m + 1] + v[4 * m + 2] + v[4 * m + 3];
}

/* Levels of one Q4_K / Q5_K super-block in value order (run j = sub-block j). */
static void levels_k4(const uint8_t *qs, const uint8_t *qh, uint8_t out[QK])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {   /* run j's fifth bits are bit j of qh[0..31] */
            __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * k)), one);
            __m256i b1 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * k + 1)), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
        }
        _mm256_storeu_si256((__m256i *)(out + 64 * k), lo);
        _mm256_storeu_si256((__m256i *)(out + 64 * k + 32), hi);
    }
}

/* Levels (0..63) of one Q6_K super-block in value order: value 128h + 32k
 * + l has its low bits in ql[64h + 32(k & 1) + l] (low nibble for k < 2)
 * and bits 4-5 in qh[32h + l] >> 2k. */
static void levels_q6(const tq_block_q6_K *x, uint8_t out[QK])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        for (int k = 0; k < 4; k++) {
            __m256i l = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (k & 1)));
            __m256i nib = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
            __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m2);
            _mm256_storeu_si256((__m256i *)(out + 128 * h + 32 * k), _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4)));
        }
    }
}

/* n (a multiple of 16) 4-byte words of a tile row, word k at line + 64 k,
 * into dst: 16 at a time by gather. */
static inline void gather_words(const char *line, int n, char *dst)
{
    const __m512i step = _mm512_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960);
    _Static_assert(TQ_TILE_LINE == 64, "gather_words' steps");
    for (int k = 0; k < n; k += 16)
        _mm512_storeu_si512(dst + 4 * k, _mm512_i32gather_epi32(step, line + TQ_TILE_LINE * k, 1));
}

_Static_assert(offsetof(tq_block_q6_K, qh) == offsetof(tq_block_q6_K, ql) + 128 && TQ_Q6_KX16_QH == 32,
               "q6_K ql, qh adjacent in the block and the tile");

/* Block i (bsize bytes) of panel row r: at w + r * wrow in plain rows, or
 * copied into tmp out of the tiles of the tiled type tt (rows r0 + r),
 * the 4-byte fields by gather (layout in tq.h; test_tensor checks the
 * products against the plain rows' to the bit). */
static inline const void *src_block(const void *w, size_t wrow, size_t bsize, int tt, int64_t r0, int r, int64_t i,
                                    int64_t n_cols, void *tmp)
{
    if (tt < 0) return (const char *)w + (size_t)r * wrow + (size_t)i * bsize;
    const int64_t row = r0 + r;
    const int ri = (int)(row % TQ_TILE_ROWS);
    const char *tile = tq_tile_of(w, row, tq_row_size(tq_get(tt)->untiled, n_cols));
    if (tt == TQ_Q4_KX16) {   /* scales, qs; d, dmin */
        enum { U = TQ_Q4_KX16_UNIT, L = TQ_Q4_KX16_LINES };
        tq_block_q4_K *b = tmp;
        gather_words(tile + tq_tile_line(i, U, L, TQ_Q4_KX16_QS) + 4 * ri, 32, (char *)b->qs);
        for (int k = 0; k < 3; k++) memcpy(b->scales + 4 * k, tile + tq_tile_line(i, U, L, k) + 4 * ri, 4);
        memcpy(&b->d, tile + tq_tile_half(i, U, L, 0) + 2 * ri, 2);
        memcpy(&b->dmin, tile + tq_tile_half(i, U, L, 1) + 2 * ri, 2);
    } else {                  /* Q6_K: ql and qh (adjacent in the block and the tile), scales; d */
        enum { U = TQ_Q6_KX16_UNIT, L = TQ_Q6_KX16_LINES };
        ASSERT(tt == TQ_Q6_KX16);
        tq_block_q6_K *b = tmp;
        gather_words(tile + tq_tile_line(i, U, L, 0) + 4 * ri, 48, (char *)b->ql);
        for (int k = 0; k < 4; k++)
            memcpy(b->scales + 4 * k, tile + tq_tile_line(i, U, L, TQ_Q6_KX16_SCALES + k) + 4 * ri, 4);
        memcpy(&b->d, tile + tq_tile_half(i, U, L, 0) + 2 * ri, 2);
    }
    return tmp;
}

static void pack_q4_K(const void *w, size_t wrow, int tt, int64_t r0, int n, int64_t n_cols, void *panel)
{
    for (int64_t i = 0; i < n_cols / QK; i++) {
        rec k = rec4(panel, i);
        for (int r = 0; r < RT; r++) {
            if (r >= n) {
                memset(k.w8 + 256 * r, 0, 256);
                memset(k.sc + 8 * r, 0, 8 * sizeof(int32_t));
                memset(k.off + 4 * r, 0, 4 * sizeof(int32_t));
                k.corr[r] = 0, k.d[r] = 0, k.dmin[r] = 0;
                continue;
            }
            tq_block_q4_K tmp;
            const tq_block_q4_K *x = src_block(w, wrow, sizeof tmp, tt, r0, r, i, n_cols, &tmp);
            int sc[8], mn[8];
            scales_mins(x->scales, sc, mn);
            levels_k4(x->qs, NULL, k.w8 + 256 * r);
            int32_t corr = 0;
            for (int j = 0; j < 8; j++) {
                int s[8], t = 0;
                group_sums(k.w8 + 256 * r + 32 * j, s);
                for (int m = 0; m < 8; m++) t += s[m];
                corr += sc[j] * t;
                k.sc[8 * r + j] = sc[j];
            }
            for (int q = 0; q < 4; q++) k.off[4 * r + q] = pair16(mn[2 * q], mn[2 * q + 1]);
            k.corr[r] = -128 * corr;
            k.d[r] = _cvtsh_ss(x->d);
            k.dmin[r] = _cvtsh_ss(x->dmin);
        }
    }
}

static void pack_w_q4_K(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    pack_q4_K(w, wrow, -1, 0, n, n_cols, panel);
}

static void pack_wt_q4_K(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_q4_K(w, 0, TQ_Q4_KX16, r0, n, n_cols, panel);
}

/* Q5_K and Q6_K: levels, per-run lane scales, lane corrections. */
static void pack_lanes(const void *w, size_t wrow, int tt, int64_t r0, int n, int64_t n_cols, void *panel, bool six)
{
    size_t bsize = six ? sizeof(tq_block_q6_K) : sizeof(tq_block_q5_K);
    for (int64_t i = 0; i < n_cols / QK; i++) {
        rec k = rec56(panel, i);
        for (int r = 0; r < RT; r++) {
            uint8_t *lv = k.w8 + 256 * r;
            if (r >= n) {
                memset(lv, 0, 256);
                memset(k.sc + 16 * r, 0, 16 * sizeof(int32_t));
                memset(k.off + 8 * r, 0, 8 * sizeof(int32_t));
                memset(k.corr + 8 * r, 0, 8 * sizeof(int32_t));
                k.d[r] = 0, k.dmin[r] = 0;
                continue;
            }
            tq_block_q6_K tmp;   /* the larger */
            const char *blk = src_block(w, wrow, bsize, tt, r0, r, i, n_cols, &tmp);
            int run_sc[8][2];   /* scale of lanes 0-3 and 4-7 of each run */
            if (six) {
                const tq_block_q6_K *x = (const tq_block_q6_K *)blk;
                levels_q6(x, lv);
                for (int j = 0; j < 8; j++) run_sc[j][0] = x->scales[2 * j], run_sc[j][1] = x->scales[2 * j + 1];
                for (int m = 0; m < 8; m++)
                    k.off[8 * r + m] = pair16(-32 * x->scales[2 * m], -32 * x->scales[2 * m + 1]);
                k.d[r] = _cvtsh_ss(x->d);
                k.dmin[r] = 0;
            } else {
                const tq_block_q5_K *x = (const tq_block_q5_K *)blk;
                int sc[8], mn[8];
                scales_mins(x->scales, sc, mn);
                levels_k4(x->qs, x->qh, lv);
                for (int j = 0; j < 8; j++) run_sc[j][0] = run_sc[j][1] = sc[j];
                for (int q = 0; q < 8; q++) k.off[8 * r + q] = q < 4 ? pair16(mn[2 * q], mn[2 * q + 1]) : 0;
                k.d[r] = _cvtsh_ss(x->d);
                k.dmin[r] = _cvtsh_ss(x->dmin);
            }
            int32_t corr[8] = { 0 };
            for (int j = 0; j < 8; j++) {
                int s[8];
                group_sums(lv + 32 * j, s);
                for (int m = 0; m < 8; m++) corr[m] += run_sc[j][m >= 4] * s[m];
                k.sc[16 * r + 2 * j] = pair16(run_sc[j][0], run_sc[j][0]);
                k.sc[16 * r + 2 * j + 1] = pair16(run_sc[j][1], run_sc[j][1]);
            }
            for (int m = 0; m < 8; m++) k.corr[8 * r + m] = -128 * corr[m];
        }
    }
}

static void pack_w_q5_K(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    pack_lanes(w, wrow, -1, 0, n, n_cols, panel, false);
}

static void pack_w_q6_K(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    pack_lanes(w, wrow, -1, 0, n, n_cols, panel, true);
}

static void pack_wt_q6_K(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_lanes(w, 0, TQ_Q6_KX16, r0, n, n_cols, panel, true);
}

/* ---- tile kernels ----------------------------------------------------------- */

static inline __m512i bcast(const void *p)
{
    return _mm512_set1_epi32(load_i32(p));
}

static void tile_q4_K(const void *panel, int64_t n_cols, const void *group, float out[RT][NL])
{
    const uint8_t *a8 = group;
    const float *as = (const float *)((const char *)group + group_as(n_cols));
    const int32_t *bs4 = (const int32_t *)((const char *)group + group_bs4(n_cols));
    __m512 acc[RT], acc_min[RT];
    #pragma GCC unroll 12
    for (int r = 0; r < RT; r++) acc[r] = acc_min[r] = _mm512_setzero_ps();

    for (int64_t i = 0; i < n_cols / QK; i++, a8 += 64 * 64) {
        rec k = rec4((void *)panel, i);
        __m512i tot[RT];
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++) tot[r] = _mm512_set1_epi32(k.corr[r]);
        for (int j = 0; j < 8; j++) {
            __m512i ai[RT];
            #pragma GCC unroll 12
            for (int r = 0; r < RT; r++) ai[r] = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m512i A = _mm512_load_si512(a8 + (8 * j + g) * 64);
                #pragma GCC unroll 12
                for (int r = 0; r < RT; r++)
                    ai[r] = _mm512_dpbusd_epi32(ai[r], A, bcast(k.w8 + 256 * r + 32 * j + 4 * g));
            }
            #pragma GCC unroll 12
            for (int r = 0; r < RT; r++)
                tot[r] = _mm512_add_epi32(tot[r], _mm512_mullo_epi32(ai[r], _mm512_set1_epi32(k.sc[8 * r + j])));
        }
        __m512 s = _mm512_load_ps(as + i * NL);
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[r]), _mm512_mul_ps(_mm512_set1_ps(k.d[r]), s), acc[r]);
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++) tot[r] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i B = _mm512_load_si512(bs4 + (i * 4 + q) * NL);
            #pragma GCC unroll 12
            for (int r = 0; r < RT; r++) tot[r] = _mm512_dpwssd_epi32(tot[r], B, bcast(k.off + 4 * r + q));
        }
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++)
            acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[r]), _mm512_mul_ps(_mm512_set1_ps(k.dmin[r]), s),
                                         acc_min[r]);
    }
    #pragma GCC unroll 12
    for (int r = 0; r < RT; r++) _mm512_storeu_ps(out[r], _mm512_sub_ps(acc[r], acc_min[r]));
}

/* Rows [r0, r0 + 2) of a Q5_K / Q6_K panel: 8 lanes per output. */
static inline __attribute__((always_inline)) void
tile_lanes2(const void *panel, int64_t n_cols, const void *group, int r0, float out[RT][NL], const bool six)
{
    const uint8_t *a8 = group;
    const float *as = (const float *)((const char *)group + group_as(n_cols));
    const int32_t *bs4 = (const int32_t *)((const char *)group + group_bs4(n_cols));
    const int32_t *bs6 = (const int32_t *)((const char *)group + group_bs6(n_cols));
    __m512 acc[2][8], sum_min[2];
    #pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        sum_min[r] = _mm512_setzero_ps();
        #pragma GCC unroll 8
        for (int m = 0; m < 8; m++) acc[r][m] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n_cols / QK; i++, a8 += 64 * 64) {
        rec k = rec56((void *)panel, i);
        __m512i lane[2][8];
        #pragma GCC unroll 2
        for (int r = 0; r < 2; r++) {
            #pragma GCC unroll 8
            for (int m = 0; m < 8; m++) lane[r][m] = _mm512_set1_epi32(k.corr[8 * (r0 + r) + m]);
        }
        for (int j = 0; j < 8; j++) {
            __m512i sc[2][2];
            #pragma GCC unroll 2
            for (int r = 0; r < 2; r++) {
                sc[r][0] = bcast(k.sc + 16 * (r0 + r) + 2 * j);
                sc[r][1] = bcast(k.sc + 16 * (r0 + r) + 2 * j + 1);
            }
            #pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                __m512i A = _mm512_load_si512(a8 + (8 * j + m) * 64);
                #pragma GCC unroll 2
                for (int r = 0; r < 2; r++) {
                    __m512i p = _mm512_maddubs_epi16(A, bcast(k.w8 + 256 * (r0 + r) + 32 * j + 4 * m));
                    lane[r][m] = _mm512_dpwssd_epi32(lane[r][m], p, sc[r][m >= 4]);
                }
            }
        }
        if (six) {
            #pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                __m512i B = _mm512_load_si512(bs6 + (i * 8 + m) * NL);
                #pragma GCC unroll 2
                for (int r = 0; r < 2; r++) lane[r][m] = _mm512_dpwssd_epi32(lane[r][m], B, bcast(k.off + 8 * (r0 + r) + m));
            }
        }
        __m512 s = _mm512_load_ps(as + i * NL);
        #pragma GCC unroll 2
        for (int r = 0; r < 2; r++) {
            __m512 d = _mm512_mul_ps(s, _mm512_set1_ps(k.d[r0 + r]));
            #pragma GCC unroll 8
            for (int m = 0; m < 8; m++) acc[r][m] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lane[r][m]), acc[r][m]);
        }
        if (!six) {
            #pragma GCC unroll 2
            for (int r = 0; r < 2; r++) {
                __m512i t = _mm512_setzero_si512();
                #pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    t = _mm512_dpwssd_epi32(t, _mm512_load_si512(bs4 + (i * 4 + q) * NL), bcast(k.off + 8 * (r0 + r) + q));
                __m512 neg_s = _mm512_xor_ps(s, _mm512_set1_ps(-0.0f));
                __m512 dmin = _mm512_mul_ps(neg_s, _mm512_set1_ps(k.dmin[r0 + r]));
                sum_min[r] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(t), sum_min[r]);
            }
        }
    }
    #pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        __m512 (*a)[8] = &acc[r];
        __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps((*a)[0], (*a)[4]), _mm512_add_ps((*a)[2], (*a)[6])),
                                 _mm512_add_ps(_mm512_add_ps((*a)[1], (*a)[5]), _mm512_add_ps((*a)[3], (*a)[7])));
        if (!six) t = _mm512_add_ps(t, sum_min[r]);
        _mm512_storeu_ps(out[r0 + r], t);
    }
}

static void tile_q5_K(const void *panel, int64_t n_cols, const void *group, float out[RT][NL])
{
    for (int r0 = 0; r0 < RT; r0 += 2) tile_lanes2(panel, n_cols, group, r0, out, false);
}

static void tile_q6_K(const void *panel, int64_t n_cols, const void *group, float out[RT][NL])
{
    for (int r0 = 0; r0 < RT; r0 += 2) tile_lanes2(panel, n_cols, group, r0, out, true);
}

void tk_fill_avx512_gemmk(tk_gemm *g)
{
    g->pack_a[TQ_Q8_K] = pack_a_q8_K;
    g->pack_w[TQ_Q4_K] = pack_w_q4_K, g->tile[TQ_Q4_K] = tile_q4_K;
    g->pack_w[TQ_Q5_K] = pack_w_q5_K, g->tile[TQ_Q5_K] = tile_q5_K;
    g->pack_w[TQ_Q6_K] = pack_w_q6_K, g->tile[TQ_Q6_K] = tile_q6_K;
    g->pack_wt[TQ_Q4_KX16] = pack_wt_q4_K;
    g->pack_wt[TQ_Q6_KX16] = pack_wt_q6_K;
    g->rec_cols[TQ_Q4_K] = g->rec_cols[TQ_Q5_K] = g->rec_cols[TQ_Q6_K] = QK;
    g->rec_bytes[TQ_Q4_K] = REC4;
    g->rec_bytes[TQ_Q5_K] = g->rec_bytes[TQ_Q6_K] = REC56;
    /* below this the panel packing costs more than the faster tile saves */
    g->min_tokens[TQ_Q4_K] = g->min_tokens[TQ_Q5_K] = g->min_tokens[TQ_Q6_K] = 32;
}
