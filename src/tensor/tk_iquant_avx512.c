/*
 * tk_iquant_avx512.c - AVX-512 kernels for the lattice formats: IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M dot products against Q8_K
 * activations (layouts and numerics: tq_iqgrid.c).  Compiled with
 * -mavx512f/bw/vl/dq/vnni; tk.c calls tk_fill_avx512_iquant() only on CPUs
 * that have them.
 *
 * DESIGN: the AVX2 kernels (tk_iquant_avx2.c) spend most of their time
 * building vectors from scalars: the grid points, and the sign pattern of
 * each group of 8 looked up one at a time.  Here:
 *
 *   - signs become mask registers, and a masked vpsubb negates the
 *     activations (there is no vpsignb above 256 bits).  IQ2_S and IQ3_S
 *     store a group's 8 sign bits plainly: 8 bytes are the mask of 64
 *     values.  The 7-bit codes (IQ2_XXS, IQ2_XS, IQ3_XXS) get their 8th
 *     bit, the parity, 16 or 32 at a time in vector registers.
 *   - grid indices that need arithmetic (IQ2_XS, IQ2_S, IQ3_S, IQ1) are
 *     made in vector registers and leave them 4 to a 64-bit move; the
 *     points are still loaded one by one and inserted, as in AVX2:
 *     with vpgatherqq / vpgatherdd instead these kernels ran at 0.85-1.22x
 *     of AVX2 on the machine below.  IQ3's 4-byte points are paired into
 *     64-bit lanes in scalar registers, half the inserts.
 *   - IQ2 / IQ3 (grid bytes up to 62, unsigned): vpmaddubsw against the
 *     signed activations, then vpdpwssd by the run's or half run's
 *     2 ls + 1, which multiplies and accumulates in one instruction; a
 *     512-bit register holds two runs, one per 256-bit half.
 *   - IQ1 (grid values -1, 0, 1): vpsignb moves the signs onto the
 *     activations per 256-bit run, and vpdpbusd takes the scale as its
 *     unsigned bytes (2 ls + 1 <= 15): one instruction for the products,
 *     the scale and the sum.
 *
 * NUMERICS: every integer step is exact, and the 16 int32 lanes of the
 * two-run registers are folded to 8 at the end of a super-block, so lane m
 * holds values 4m..4m+3 of every run times its scale: the scalar
 * reference's lanes (tq_run_lanes).  The float steps are the reference's
 * in its order (one fused multiply-add per lane and super-block, then
 * tq_sum_lanes' order and the format's constant), so the results equal
 * tq_dot_* bit for bit.
 *
 * SPEED against the AVX2 kernels (build/bench/bench_kernels 0.5 lattice:
 * an 896 x 4864 matrix in cache, 1 thread, 9 interleaved rounds, medians;
 * the ratio is the median of each round's; Zen 4, 2-core EPYC VM): GB/s
 * of weights
 *
 *   type      avx2  avx512  ratio       type      avx2  avx512  ratio
 *   iq2_xxs   5.77   8.08   1.40x       iq3_s     5.09   7.28   1.44x
 *   iq2_xs    5.39   9.20   1.71x       iq1_s     3.73   5.48   1.47x
 *   iq2_s     5.99   9.38   1.59x       iq1_m     2.67   4.25   1.60x
 *   iq3_xxs   5.71   7.95   1.38x
 *
 * Every one is faster, so the avx512 table takes all seven.  Tried and
 * dropped: a vpgather per pair of runs (above); a gather for one pair in
 * four (IQ2_XXS 1.27x); 4-point vectors from broadcast loads and vpblendd
 * (IQ2_XS 1.53x, IQ2_S 1.54x, IQ1_S 1.28x; IQ1_M the same within noise).
 */
#include "tk_impl.h"
#include "tq_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Sum of 8 float lanes: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1. */
static inline float sum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The reference's float step of one super-block: acc[m] += d * lane[m],
 * fused, where lane[m] is the sum of v's two 256-bit halves. */
static inline __m256 block_step(__m256 acc, float d, __m512i v)
{
    __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

/* The 8 sign bytes at p as the mask of 64 values (IQ2_S, IQ3_S). */
static inline __mmask64 mask_at(const uint8_t *p)
{
    uint64_t m;
    memcpy(&m, p, sizeof m);
    return _cvtu64_mask64(m);
}

/* The 64 activations at a, negated where mask m is set. */
static inline __m512i signed_act(const int8_t *a, __mmask64 m)
{
    __m512i q8 = _mm512_loadu_si512(a);
    return _mm512_mask_sub_epi8(q8, m, _mm512_setzero_si512(), q8);
}

/* Two runs: grid bytes g times activations q8 (signs applied), to int16
 * pairs (|62 * 127 * 2| fits), then by vpdpwssd with scales sc into acc. */
static inline __m512i two_runs(__m512i acc, __m512i g, __m512i q8, __m512i sc)
{
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(g, q8), sc);
}

/* ---- scales -------------------------------------------------------------- */

/* The scales of runs 2p and 2p + 1 spread by vpermw over the 32 int16
 * products of their register (product j: values 2j, 2j + 1, half run j / 8
 * of the pair), from scale words r (a scale per run: IQ2_XXS, IQ3) or
 * 2r + h (per half run: IQ2_XS, IQ2_S). */
static inline __m512i run_scales(__m512i words, int p)
{
    const __m512i run = _mm512_setr_epi64(0, 0, 0, 0, 0x0001000100010001, 0x0001000100010001, 0x0001000100010001,
                                          0x0001000100010001);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(run, _mm512_set1_epi16((short)(2 * p))), words);
}

static inline __m512i half_scales(__m512i words, int p)
{
    const __m512i half = _mm512_setr_epi64(0, 0, 0x0001000100010001, 0x0001000100010001, 0x0002000200020002,
                                           0x0002000200020002, 0x0003000300030003, 0x0003000300030003);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16((short)(4 * p))), words);
}

/* vpermw pattern repeating word r at words 4r..4r+3: from a word per run
 * to one per group of 8 values (IQ2_S's and IQ1_S's index bits). */
static inline __m512i rep4_words(void)
{
    return _mm512_setr_epi32(0, 0, 0x10001, 0x10001, 0x20002, 0x20002, 0x30003, 0x30003, 0x40004, 0x40004, 0x50005,
                             0x50005, 0x60006, 0x60006, 0x70007, 0x70007);
}

/* 2 ls + 1 of the four-bit codes in s, low nibble first, as int16 words:
 * word 2j + h = nibble h of byte j (IQ2_XS, IQ2_S: half run h of run j;
 * IQ3_S: run 2j + h). */
static inline __m512i nibble_scales(uint64_t s)
{
    __m128i b = _mm_cvtsi64_si128((long long)s), m4 = _mm_set1_epi8(15);
    __m128i ls = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    __m256i w = _mm256_cvtepu8_epi16(ls);
    return _mm512_castsi256_si512(_mm256_add_epi16(_mm256_add_epi16(w, w), _mm256_set1_epi16(1)));
}

/* ---- sign codes ---------------------------------------------------------- */

/* Each 7-bit code (the low byte of a 16- or 32-bit lane, the lane's other
 * bits clear) with its parity as bit 7, the 8 sign bits of its group
 * (tq_ksigns_iq2xs).  The parity of 7 bits is that of the low nibble xor
 * the top 3 bits; vpshufb reads only an index's low nibble (bit 7 is
 * clear), and lanes' upper bytes index entry 0, which is 0. */
static inline __m512i with_parity(__m512i codes)
{
    const __m512i odd = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
    __m512i fold = _mm512_xor_si512(codes, _mm512_srli_epi16(codes, 4));
    return _mm512_or_si512(codes, _mm512_shuffle_epi8(odd, fold));
}

/* The sign masks of 8 runs whose words w[r] hold 4 seven-bit codes in
 * bits 0-27 (IQ2_XXS, IQ3_XXS): m[p] for runs 2p, 2p+1, bit v = value v. */
static inline void code_masks(__m256i w, uint64_t m[4])
{
    const __m512i pick = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i shifts = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
    const __m512i seven = _mm512_set1_epi32(127), four = _mm512_set1_epi32(4);
    __m512i wz = _mm512_castsi256_si512(w), pick_hi = _mm512_add_epi32(pick, four);
    __m512i c0 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(pick, wz), shifts), seven);
    __m512i c1 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(pick_hi, wz), shifts), seven);
    _mm_storeu_si128((__m128i *)m, _mm512_cvtepi32_epi8(with_parity(c0)));
    _mm_storeu_si128((__m128i *)m + 1, _mm512_cvtepi32_epi8(with_parity(c1)));
}

/* 2 (w[r] >> 28) + 1 as int16 word r (IQ2_XXS, IQ3_XXS). */
static inline __m512i top_scales(__m256i w)
{
    __m128i ls = _mm256_cvtepi32_epi16(_mm256_srli_epi32(w, 28));
    return _mm512_castsi128_si512(_mm_add_epi16(_mm_add_epi16(ls, ls), _mm_set1_epi16(1)));
}

/* ---- IQ2 / IQ3 ----------------------------------------------------------- */

/* 8 grid points of 8 bytes at byte indices k0[0..3], k1[0..3]: two runs. */
static inline __m512i grid8_bytes(const uint64_t *grid, const uint8_t *k0, const uint8_t *k1)
{
    return _mm512_set_epi64((long long)grid[k1[3]], (long long)grid[k1[2]], (long long)grid[k1[1]],
                            (long long)grid[k1[0]], (long long)grid[k0[3]], (long long)grid[k0[2]],
                            (long long)grid[k0[1]], (long long)grid[k0[0]]);
}

/* 4 grid points of 8 bytes at the 4 word indices in x: one run. */
static inline __m256i grid4_words(const uint64_t *grid, uint64_t x)
{
    return _mm256_set_epi64x((long long)grid[x >> 48], (long long)grid[(x >> 32) & 0xffff],
                             (long long)grid[(x >> 16) & 0xffff], (long long)grid[x & 0xffff]);
}

/* The 4 128-bit lanes of idx: the 8 word indices of each pair of runs
 * (taken before the pair loop: vextracti32x4 needs an immediate, which the
 * loop counter is only once unrolled, not at -O1). */
static inline void index_lanes(__m512i idx, __m128i lane[4])
{
    lane[0] = _mm512_castsi512_si128(idx);
    lane[1] = _mm512_extracti32x4_epi32(idx, 1);
    lane[2] = _mm512_extracti32x4_epi32(idx, 2);
    lane[3] = _mm512_extracti32x4_epi32(idx, 3);
}

/* Two runs at the 8 word indices of v.  The indices leave the vector
 * register 4 at a time: GCC's vpextrw per index (2 uops each on the vector
 * pipes) held IQ2_S at 1.1x of its AVX2 kernel. */
static inline void grid_pair(const uint64_t *grid, __m128i v, __m256i g[2])
{
    g[0] = grid4_words(grid, (uint64_t)_mm_cvtsi128_si64(v));
    g[1] = grid4_words(grid, (uint64_t)_mm_extract_epi64(v, 1));
}

/* The same as one register. */
static inline __m512i grid8_words(const uint64_t *grid, __m128i v)
{
    __m256i g[2];
    grid_pair(grid, v, g);
    return _mm512_inserti64x4(_mm512_castsi256_si512(g[0]), g[1], 1);
}

/* Two 4-byte grid points (IQ3) as one 64-bit lane, put together in scalar
 * registers: half the vector inserts of one per point (IQ3_XXS went from
 * 1.27x to 1.40x of AVX2). */
static inline long long g2(const uint32_t *grid, unsigned k0, unsigned k1)
{
    return (long long)((uint64_t)grid[k1] << 32 | grid[k0]);
}

/* 16 grid points of 4 bytes at byte indices k[0..15]: two runs. */
static inline __m512i grid16_bytes(const uint32_t *grid, const uint8_t *k)
{
    return _mm512_set_epi64(g2(grid, k[14], k[15]), g2(grid, k[12], k[13]), g2(grid, k[10], k[11]),
                            g2(grid, k[8], k[9]), g2(grid, k[6], k[7]), g2(grid, k[4], k[5]), g2(grid, k[2], k[3]),
                            g2(grid, k[0], k[1]));
}

/* 4 grid points of 4 bytes at the 4 word indices in x, as 2 lanes. */
static inline void grid4_pairs(const uint32_t *grid, uint64_t x, long long *lo, long long *hi)
{
    *lo = g2(grid, x & 0xffff, (x >> 16) & 0xffff);
    *hi = g2(grid, (x >> 32) & 0xffff, x >> 48);
}

/* grid16_bytes at the 16 word indices of v, read out 4 at a time. */
static inline __m512i grid16_words(const uint32_t *grid, __m256i v)
{
    __m128i v1 = _mm256_extracti128_si256(v, 1);
    long long q[8];
    grid4_pairs(grid, (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(v)), &q[0], &q[1]);
    grid4_pairs(grid, (uint64_t)_mm_extract_epi64(_mm256_castsi256_si128(v), 1), &q[2], &q[3]);
    grid4_pairs(grid, (uint64_t)_mm_cvtsi128_si64(v1), &q[4], &q[5]);
    grid4_pairs(grid, (uint64_t)_mm_extract_epi64(v1, 1), &q[6], &q[7]);
    return _mm512_set_epi64(q[7], q[6], q[5], q[4], q[3], q[2], q[1], q[0]);
}

/* One IQ2 / IQ3 super-block made ready for its products, by pair of runs
 * p (runs 2p, 2p + 1). */
typedef struct {
    __m512i g[4];       /* grid bytes */
    __mmask64 neg[4];   /* values whose sign is minus */
    __m512i sc;         /* 2 ls + 1 per run (word r) or half run (word 2r + h) */
} pairs;

typedef void (*unpack_fn)(const void *blk, pairs *u);

/* The dot of n / 256 blocks of bsize bytes (each starting with its f16 d)
 * against Q8_K, times the format's constant; per_half: a scale per half run.
 * Inlined into each format's kernel, where unpack is a known function and
 * inlined too. */
static inline __attribute__((always_inline)) float dot_pairs(int64_t n, const void *w, size_t bsize, unpack_fn unpack,
                                                              bool per_half, float factor, const void *va)
{
    const tq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, a++) {
        const char *blk = (const char *)w + (size_t)i * bsize;
        pairs u;
        unpack(blk, &u);
        __m512i sumi = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m512i sc = per_half ? half_scales(u.sc, p) : run_scales(u.sc, p);
            sumi = two_runs(sumi, u.g[p], signed_act(a->qs + 64 * p, u.neg[p]), sc);
        }
        tq_f16 d;
        memcpy(&d, blk, sizeof d);
        acc = block_step(acc, _cvtsh_ss(d) * a->d, sumi);
    }
    return factor * sum8(acc);
}

static inline void unpack_iq2_xxs(const void *blk, pairs *u)
{
    const tq_block_iq2_xxs *b = blk;
    /* run r: dword 2r = its 4 grid indices, dword 2r + 1 its codes and scale */
    __m256i w = _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_loadu_si512(b->qs), 32));
    u->sc = top_scales(w);
    uint64_t m[4];
    code_masks(w, m);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const uint8_t *k = (const uint8_t *)b->qs + 16 * p;
        u->g[p] = grid8_bytes(tq_iq2xxs_grid, k, k + 8);
        u->neg[p] = _cvtu64_mask64(m[p]);
    }
}

static inline void unpack_iq2_xs(const void *blk, pairs *u)
{
    const tq_block_iq2_xs *b = blk;
    __m512i q = _mm512_loadu_si512(b->qs);
    __m128i idx[4];
    index_lanes(_mm512_and_si512(q, _mm512_set1_epi16(511)), idx);
    uint64_t m[4], s8;
    _mm256_storeu_si256((__m256i *)m, _mm512_cvtepi16_epi8(with_parity(_mm512_srli_epi16(q, 9))));
    memcpy(&s8, b->scales, sizeof s8);
    u->sc = nibble_scales(s8);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        u->g[p] = grid8_words(tq_iq2xs_grid, idx[p]);
        u->neg[p] = _cvtu64_mask64(m[p]);
    }
}

static inline void unpack_iq2_s(const void *blk, pairs *u)
{
    const tq_block_iq2_s *b = blk;
    /* index 4r + l takes bits 2l, 2l+1 of qh[r] as its bits 8, 9 */
    const __m512i shl = _mm512_set1_epi64(0x0002000400060008);
    __m512i lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)b->qs));
    __m512i qh = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)b->qh)));
    __m512i hi = _mm512_sllv_epi16(_mm512_permutexvar_epi16(rep4_words(), qh), shl);
    __m128i idx[4];
    index_lanes(_mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi16(0x300))), idx);
    uint64_t s8;
    memcpy(&s8, b->scales, sizeof s8);
    u->sc = nibble_scales(s8);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        u->g[p] = grid8_words(tq_iq2s_grid, idx[p]);
        u->neg[p] = mask_at(b->qs + TQ_QK_K / 8 + 8 * p);
    }
}

static inline void unpack_iq3_xxs(const void *blk, pairs *u)
{
    const tq_block_iq3_xxs *b = blk;
    __m256i w = _mm256_loadu_si256((const __m256i *)(b->qs + TQ_QK_K / 4));
    u->sc = top_scales(w);
    uint64_t m[4];
    code_masks(w, m);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        u->g[p] = grid16_bytes(tq_iq3xxs_grid, b->qs + 16 * p);
        u->neg[p] = _cvtu64_mask64(m[p]);
    }
}

static inline void unpack_iq3_s(const void *blk, pairs *u)
{
    const tq_block_iq3_s *b = blk;
    uint32_t s4;
    memcpy(&s4, b->scales, sizeof s4);
    u->sc = nibble_scales(s4);
    uint16_t qh[4];
    memcpy(qh, b->qh, sizeof qh);
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        /* index 8r + j takes bit j of qh[r] as its bit 8 (added: the low byte has none) */
        __m256i idx = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16 * p)));
        idx = _mm256_mask_add_epi16(idx, _cvtu32_mask16(qh[p]), idx, _mm256_set1_epi16(256));
        u->g[p] = grid16_words(tq_iq3s_grid, idx);
        u->neg[p] = mask_at(b->signs + 8 * p);
    }
}

static float dot_iq2_xxs(int64_t n, const void *w, const void *a)
{
    return dot_pairs(n, w, sizeof(tq_block_iq2_xxs), unpack_iq2_xxs, false, 0.125f, a);
}
static float dot_iq2_xs(int64_t n, const void *w, const void *a)
{
    return dot_pairs(n, w, sizeof(tq_block_iq2_xs), unpack_iq2_xs, true, 0.125f, a);
}
static float dot_iq2_s(int64_t n, const void *w, const void *a)
{
    return dot_pairs(n, w, sizeof(tq_block_iq2_s), unpack_iq2_s, true, 0.125f, a);
}
static float dot_iq3_xxs(int64_t n, const void *w, const void *a)
{
    return dot_pairs(n, w, sizeof(tq_block_iq3_xxs), unpack_iq3_xxs, false, 0.25f, a);
}
static float dot_iq3_s(int64_t n, const void *w, const void *a)
{
    return dot_pairs(n, w, sizeof(tq_block_iq3_s), unpack_iq3_s, false, 1.0f, a);
}

/* ---- IQ1 ----------------------------------------------------------------- */

/* Grid indices of IQ1_S and IQ1_M: qs[k] | hi[k] & 0x700, hi already moved
 * into place per group k. */
static inline __m512i iq1_index(const uint8_t *qs, __m512i hi)
{
    __m512i lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)qs));
    return _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi16(0x700)));
}

static inline __m256i load32(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* One run's 32 activations q8 times grid values g (-1, 0, 1) by the scale
 * bytes sc, into acc: |g| * sc is sc or 0, so vpdpbusd takes sc as its
 * unsigned bytes and the activations with g's sign (0 where g is). */
static inline __m256i iq1_run(__m256i acc, __m256i g, __m256i q8, __m256i sc)
{
    return _mm256_dpbusd_epi32(acc, sc, _mm256_sign_epi8(q8, g));
}

/* vpshufb pattern putting byte lo of a 128-bit lane in the low half of a
 * run, byte hi in the high half (the run's two scale bytes). */
static inline __m256i halves(int lo, int hi)
{
    return _mm256_setr_m128i(_mm_set1_epi8((char)lo), _mm_set1_epi8((char)hi));
}

/* Sum of 8 int32 lanes (exact). */
static inline int32_t hsum8_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static float dot_iq1_s(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq1_s *b = vw;
    const tq_block_q8_K *a = va;
    /* group 4r + l takes bits 3l..3l+2 of qh[r]: each word four times,
     * shifted left by 8 - 3l (l = 3: right by 1) */
    const __m512i shl = _mm512_set1_epi64(0x0000000200050008), shr = _mm512_set1_epi64(0x0001000000000000);
    __m256 acc = _mm256_setzero_ps();
    float acc_shift = 0;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        __m128i qh = _mm_loadu_si128((const __m128i *)b->qh);
        __m512i h4 = _mm512_permutexvar_epi16(rep4_words(), _mm512_castsi128_si512(qh));
        __m128i idx[4];
        index_lanes(iq1_index(b->qs, _mm512_srlv_epi16(_mm512_sllv_epi16(h4, shl), shr)), idx);
        /* 2 ls + 1 per run (byte 2r of each lane of sc2), and with the
         * sign of the run's shift for the shift term */
        __m128i ls = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
        __m128i sc = _mm_add_epi16(_mm_add_epi16(ls, ls), _mm_set1_epi16(1));
        __m128i ssc = _mm_mask_sub_epi16(sc, _mm_movepi16_mask(qh), _mm_setzero_si128(), sc);
        __m256i sc2 = _mm256_broadcastsi128_si256(sc);
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i g[2];
            grid_pair(tq_iq1s_grid, idx[p], g);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                sumi = iq1_run(sumi, g[h], load32(a->qs + 64 * p + 32 * h),
                               _mm256_shuffle_epi8(sc2, halves(4 * p + 2 * h, 4 * p + 2 * h)));
        }
        /* sum over runs of the run's activation sum times its signed scale */
        __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        __m256i ssc2 = _mm256_setr_m128i(_mm_unpacklo_epi16(ssc, ssc), _mm_unpackhi_epi16(ssc, ssc));
        int32_t shift = hsum8_i32(_mm256_madd_epi16(bs, ssc2));
        float d = a->d * _cvtsh_ss(b->d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_shift = fmaf(d, (float)shift, acc_shift);
    }
    return sum8(acc) + 0.125f * acc_shift;
}

/* A 64-bit mask with byte j all ones where bit j of the 8 bits b is set. */
static inline uint64_t bits_to_bytes(unsigned b)
{
    uint64_t t = (b * 0x0101010101010101ull) & 0x8040201008040201ull;
    t = (t + 0x7f7f7f7f7f7f7f7full) & 0x8080808080808080ull;   /* no carry leaves a byte */
    return (t >> 7) * 0xff;
}

static float dot_iq1_m(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq1_m *b = vw;
    const tq_block_q8_K *a = va;
    /* group k = 2j + t takes nibble t of qh[j]: bits 0-2 its index bits
     * 8-10, bit 3 its shift's sign (bit 11 once moved) */
    const __m512i rep2 = _mm512_setr_epi32(0, 0x10001, 0x20002, 0x30003, 0x40004, 0x50005, 0x60006, 0x70007, 0x80008,
                                           0x90009, 0xa000a, 0xb000b, 0xc000c, 0xd000d, 0xe000e, 0xf000f);
    const __m512i shl = _mm512_set1_epi32(0x00040008);
    /* half run j = 2r + h: bits 3 (j % 4) .. +2 of scale word j / 4 */
    const __m256i rep4 = _mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m256i sh3 = _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
    __m256 acc = _mm256_setzero_ps(), acc_shift = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        uint16_t sw[4];
        memcpy(sw, b->scales, sizeof sw);
        tq_f16 dh = (tq_f16)((sw[0] >> 12) | ((sw[1] >> 8) & 0x00f0) | ((sw[2] >> 4) & 0x0f00) | (sw[3] & 0xf000));
        __m128i words = _mm_loadl_epi64((const __m128i *)b->scales);
        __m256i s4 = _mm256_permutexvar_epi16(rep4, _mm256_castsi128_si256(words));
        __m256i ls = _mm256_and_si256(_mm256_srlv_epi16(s4, sh3), _mm256_set1_epi16(7));
        __m256i sc2 = _mm256_broadcastsi128_si256(
            _mm256_cvtepi16_epi8(_mm256_add_epi16(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1))));

        __m512i qh = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->qh)));
        __m512i h2 = _mm512_sllv_epi16(_mm512_permutexvar_epi16(rep2, qh), shl);
        __m128i idx[4];
        index_lanes(iq1_index(b->qs, h2), idx);
        uint32_t neg = _cvtmask32_u32(_mm512_test_epi16_mask(h2, _mm512_set1_epi16(0x800)));
        __m256i sumi = _mm256_setzero_si256(), sums = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i g[2];
            grid_pair(tq_iq1s_grid, idx[p], g);
            uint64_t m = bits_to_bytes((neg >> (8 * p)) & 255);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i sc = _mm256_shuffle_epi8(sc2, halves(4 * p + 2 * h, 4 * p + 2 * h + 1));
                __m256i qr = load32(a->qs + 64 * p + 32 * h);
                sumi = iq1_run(sumi, g[h], qr, sc);
                /* the shift term: the activations with each group's shift sign */
                __mmask32 mr = _cvtu32_mask32((uint32_t)(m >> (32 * h)));
                sums = _mm256_dpbusd_epi32(sums, sc, _mm256_mask_sub_epi8(qr, mr, _mm256_setzero_si256(), qr));
            }
        }
        __m256 d = _mm256_set1_ps(a->d * _cvtsh_ss(dh));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        acc_shift = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc_shift);
    }
    return fmaf(0.125f, sum8(acc_shift), sum8(acc));
}

void tk_fill_avx512_iquant(tk_ops *o)
{
    o->vec_dot[TQ_IQ2_XXS] = dot_iq2_xxs;
    o->vec_dot[TQ_IQ2_XS] = dot_iq2_xs;
    o->vec_dot[TQ_IQ2_S] = dot_iq2_s;
    o->vec_dot[TQ_IQ3_XXS] = dot_iq3_xxs;
    o->vec_dot[TQ_IQ3_S] = dot_iq3_s;
    o->vec_dot[TQ_IQ1_S] = dot_iq1_s;
    o->vec_dot[TQ_IQ1_M] = dot_iq1_m;
}
