/*
 * tk_iquant_avx2.c - AVX2 kernels for the non-linear 4-bit formats: IQ4_NL
 * dot products against Q8_0 activations, IQ4_XS against Q8_K.  Compiled
 * with -mavx2 -mfma -mf16c; tk.c calls tk_fill_avx2_iquant() only on CPUs
 * that have them.
 *
 * DESIGN: a 32-value group's 16 bytes of levels become its 32 values with
 * one vpshufb into the 16-entry table per nibble half (low nibbles: values
 * 0-15 in the low 128 bits; high nibbles: 16-31 in the high 128 bits).  The
 * values are signed, so vpmaddubsw takes |value| and the activations with
 * the value's sign (|127 * 127 * 2| fits int16; no activation is -128), and
 * vpmaddwd by 1 (IQ4_NL) or by the group's scale (IQ4_XS) leaves int32
 * lane m holding values 4m..4m+3 of each half: the scalar reference's lanes
 * (tq_iquant.c), followed by its float steps in its order, so the results
 * equal tq_dot_iq4_* bit for bit.
 *
 * The avx512 table uses the 4-bit ones too, as vec_dot (the lattice
 * formats below have their own there, tk_iquant_avx512.c; its matrix
 * products of IQ4_NL and MXFP4 go through tk_tiled_avx512.c and the
 * GEMM instead, which add whole blocks in order): versions with two
 * groups per 512-bit register (vpabsb and a masked negate in place of
 * vpsignb) ran at 0.98x (IQ4_NL) and 0.33x (IQ4_XS) of these on a Zen 4
 * (2-core EPYC VM), 1 thread, interleaved medians.
 */
#include "tk_impl.h"
#include "tq_impl.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* Sum of 8 float lanes: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1. */
static inline float sum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 values of one group of 16 level bytes, in value order. */
static inline __m256i group_values(const uint8_t *qs, __m128i table)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i bits = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
    __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* int16 pair sums of values v times activations at a (32 of each). */
static inline __m256i pair_products(__m256i v, const int8_t *a)
{
    __m256i q8 = _mm256_loadu_si256((const __m256i *)a);
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q8, v));
}

/* The scale of 32-value block i times its activation block's: IQ4_NL's
 * f16, or MXFP4's half E8M0 (the reference takes it from a table of the
 * same floats). */
static inline float nl_scale(const uint8_t *w, size_t bsize, bool mx, const tq_block_q8_0 *a, int64_t i)
{
    const uint8_t *blk = w + (size_t)i * bsize;
    if (mx) return _cvtsh_ss(a[i].d) * tq_e8m0_half(blk[0]);
    tq_f16 d;
    memcpy(&d, blk, sizeof d);
    return _cvtsh_ss(a[i].d) * _cvtsh_ss(d);
}

/* IQ4_NL and MXFP4: n / 32 blocks of bsize bytes, levels at qs_off. */
static inline float dot_nl32(int64_t n, const uint8_t *w, size_t bsize, size_t qs_off, bool mx,
                             const tq_block_q8_0 *a, __m128i table)
{
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t nb = n / 32, ib = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; ib + 1 < nb; ib += 2) {
        const uint8_t *q0 = w + (size_t)ib * bsize + qs_off, *q1 = q0 + bsize;
        __m256i p0 = _mm256_madd_epi16(pair_products(group_values(q0, table), a[ib].qs), ones);
        __m256i p1 = _mm256_madd_epi16(pair_products(group_values(q1, table), a[ib + 1].qs), ones);
        float d0 = nl_scale(w, bsize, mx, a, ib), d1 = nl_scale(w, bsize, mx, a, ib + 1);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    float total = sum8(_mm256_add_ps(acc0, acc1));
    if (ib < nb) {   /* the reference's scalar tail (tq_iquant.c) */
        const uint8_t *q = w + (size_t)ib * bsize + qs_off;
        __m256i p = _mm256_madd_epi16(pair_products(group_values(q, table), a[ib].qs), ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
        total += nl_scale(w, bsize, mx, a, ib) * (float)_mm_cvtsi128_si32(s);
    }
    return total;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *a)
{
    return dot_nl32(n, w, sizeof(tq_block_iq4_nl), offsetof(tq_block_iq4_nl, qs), false, a,
                    _mm_loadu_si128((const __m128i *)tq_iq4nl_values));
}

static float dot_mxfp4(int64_t n, const void *w, const void *a)
{
    return dot_nl32(n, w, sizeof(tq_block_mxfp4), offsetof(tq_block_mxfp4, qs), true, a,
                    _mm_loadu_si128((const __m128i *)tq_mxfp4_values));
}

static float dot_iq4_xs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq4_xs *b = vw;
    const tq_block_q8_K *a = va;
    const __m128i table = _mm_loadu_si128((const __m128i *)tq_iq4nl_values);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        uint32_t lo;
        memcpy(&lo, b->scales_l, sizeof lo);
        uint32_t h = b->scales_h;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            int ls = (int)(((lo >> (4 * j)) & 0xf) | (((h >> (2 * j)) & 3) << 4)) - 32;
            __m256i p = pair_products(group_values(b->qs + 16 * j, table), a->qs + 32 * j);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc);
}

/* ---- the lattice formats (layouts and numerics: tq_iqgrid.c) ----------- */

/*
 * One 32-value run: grid magnitudes g (unsigned bytes) times activations
 * q8 that already carry the values' signs, pairs to int16 by vpmaddubsw
 * (|62 * 127 * 2| fits), then by vpmaddwd with the scales (int16 lanes
 * 0-7: the first 16 values) to the reference's int32 lanes.
 */
static inline __m256i run_lanes(__m256i g, __m256i q8, __m256i sc)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(g, q8), sc);
}

/* 2 ls + 1 for the run's two halves, as vpmaddwd's multipliers. */
static inline __m256i half_scales(int lo, int hi)
{
    return _mm256_setr_m128i(_mm_set1_epi16((short)(2 * lo + 1)), _mm_set1_epi16((short)(2 * hi + 1)));
}

/* The activations with 4 bytes of sign bits applied, byte l's 8 bits to
 * values 8l..8l+7 (a set bit negates). */
static inline __m256i apply_sign_bytes(__m256i q8, uint32_t bits)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i m = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
    m = _mm256_cmpeq_epi8(m, bit);   /* 0xff where negated */
    return _mm256_sub_epi8(_mm256_xor_si256(q8, m), m);
}

/* The activations with 4 groups' 7-bit sign codes applied (tq_signs64). */
static inline __m256i apply_sign_codes(__m256i q8, unsigned c0, unsigned c1, unsigned c2, unsigned c3)
{
    __m256i s = _mm256_set_epi64x((long long)tq_signs64[c3], (long long)tq_signs64[c2], (long long)tq_signs64[c1],
                                  (long long)tq_signs64[c0]);
    return _mm256_sign_epi8(q8, s);
}

static inline __m256i load32(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline __m256i grid4(const uint64_t *grid, unsigned i0, unsigned i1, unsigned i2, unsigned i3)
{
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

static float dot_iq2_xxs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq2_xxs *b = vw;
    const tq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint8_t *q = (const uint8_t *)b->qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 8) {
            uint32_t s;
            memcpy(&s, q + 4, 4);
            __m256i g = grid4(tq_iq2xxs_grid, q[0], q[1], q[2], q[3]);
            __m256i q8 = apply_sign_codes(load32(a->qs + 32 * r), s & 127, (s >> 7) & 127, (s >> 14) & 127,
                                          (s >> 21) & 127);
            sumi = _mm256_add_epi32(sumi, run_lanes(g, q8, _mm256_set1_epi16((short)(2 * (s >> 28) + 1))));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * sum8(acc);
}

static float dot_iq2_xs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq2_xs *b = vw;
    const tq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint16_t *q = b->qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 4) {
            __m256i g = grid4(tq_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
            __m256i q8 = apply_sign_codes(load32(a->qs + 32 * r), q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
            sumi = _mm256_add_epi32(sumi, run_lanes(g, q8, half_scales(b->scales[r] & 15, b->scales[r] >> 4)));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * sum8(acc);
}

static float dot_iq2_s(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq2_s *b = vw;
    const tq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint8_t *q = b->qs, *signs = b->qs + TQ_QK_K / 8;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 4, signs += 4) {
            unsigned h = b->qh[r];
            __m256i g = grid4(tq_iq2s_grid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300),
                              q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300));
            uint32_t sb;
            memcpy(&sb, signs, 4);
            __m256i q8 = apply_sign_bytes(load32(a->qs + 32 * r), sb);
            sumi = _mm256_add_epi32(sumi, run_lanes(g, q8, half_scales(b->scales[r] & 15, b->scales[r] >> 4)));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * sum8(acc);
}

static float dot_iq3_xxs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq3_xxs *b = vw;
    const tq_block_q8_K *a = va;
    const uint32_t *G = tq_iq3xxs_grid;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint8_t *q = b->qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 8) {
            uint32_t s;
            memcpy(&s, b->qs + TQ_QK_K / 4 + 4 * r, 4);
            __m256i g = _mm256_setr_epi32((int)G[q[0]], (int)G[q[1]], (int)G[q[2]], (int)G[q[3]], (int)G[q[4]],
                                          (int)G[q[5]], (int)G[q[6]], (int)G[q[7]]);
            __m256i q8 = apply_sign_codes(load32(a->qs + 32 * r), s & 127, (s >> 7) & 127, (s >> 14) & 127,
                                          (s >> 21) & 127);
            sumi = _mm256_add_epi32(sumi, run_lanes(g, q8, _mm256_set1_epi16((short)(2 * (s >> 28) + 1))));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.25f * sum8(acc);
}

static float dot_iq3_s(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq3_s *b = vw;
    const tq_block_q8_K *a = va;
    const uint32_t *G = tq_iq3s_grid;
    const __m256i shift = _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1), bit8 = _mm256_set1_epi32(256);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint8_t *q = b->qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 8) {
            /* index k's 9th bit is bit k of qh[r] */
            __m256i hi = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(b->qh[r]), shift), bit8);
            __m256i idx = _mm256_or_si256(hi, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)));
            uint32_t k[8], sb;
            _mm256_storeu_si256((__m256i *)k, idx);
            __m256i g = _mm256_setr_epi32((int)G[k[0]], (int)G[k[1]], (int)G[k[2]], (int)G[k[3]], (int)G[k[4]],
                                          (int)G[k[5]], (int)G[k[6]], (int)G[k[7]]);
            memcpy(&sb, b->signs + 4 * r, 4);
            __m256i q8 = apply_sign_bytes(load32(a->qs + 32 * r), sb);
            int ls = (b->scales[r / 2] >> (4 * (r % 2))) & 15;
            sumi = _mm256_add_epi32(sumi, run_lanes(g, q8, _mm256_set1_epi16((short)(2 * ls + 1))));
        }
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc);
}

/* IQ1 grid values are signed (-1, 0, 1): |g| against q8 with g's sign. */
static inline __m256i signed_run_lanes(__m256i g, __m256i q8, __m256i sc)
{
    return run_lanes(_mm256_sign_epi8(g, g), _mm256_sign_epi8(q8, g), sc);
}

static float dot_iq1_s(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq1_s *b = vw;
    const tq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    float acc_shift = 0;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        const uint8_t *q = b->qs;
        __m256i sumi = _mm256_setzero_si256();
        int32_t shift = 0;
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 4) {
            unsigned h = b->qh[r];
            __m256i g = grid4(tq_iq1s_grid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700),
                              q[2] | ((h << 2) & 0x700), q[3] | ((h >> 1) & 0x700));
            int ls = 2 * ((h >> 12) & 7) + 1;
            sumi = _mm256_add_epi32(sumi, signed_run_lanes(g, load32(a->qs + 32 * r), _mm256_set1_epi16((short)ls)));
            shift += (a->bsums[2 * r] + a->bsums[2 * r + 1]) * (h & 0x8000 ? -ls : ls);
        }
        float d = a->d * _cvtsh_ss(b->d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_shift = fmaf(d, (float)shift, acc_shift);
    }
    return sum8(acc) + 0.125f * acc_shift;
}

static float dot_iq1_m(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq1_m *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), acc_shift = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        uint16_t sc[4];
        memcpy(sc, b->scales, sizeof sc);
        tq_f16 dh = (tq_f16)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const uint8_t *q = b->qs, *qh = b->qh;
        __m256i sumi = _mm256_setzero_si256(), sums = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++, q += 4, qh += 2) {
            unsigned h0 = qh[0], h1 = qh[1];
            __m256i g = grid4(tq_iq1s_grid, q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 4) & 0x700),
                              q[2] | ((h1 << 8) & 0x700), q[3] | ((h1 << 4) & 0x700));
            __m256i neg = _mm256_set_epi64x(h1 & 0x80 ? -1 : 0x0101010101010101, h1 & 0x08 ? -1 : 0x0101010101010101,
                                            h0 & 0x80 ? -1 : 0x0101010101010101, h0 & 0x08 ? -1 : 0x0101010101010101);
            int w = sc[r / 2] >> (6 * (r % 2));
            __m256i scl = half_scales(w & 7, (w >> 3) & 7);
            __m256i q8 = load32(a->qs + 32 * r);
            sumi = _mm256_add_epi32(sumi, signed_run_lanes(g, q8, scl));
            sums = _mm256_add_epi32(sums, run_lanes(ones, _mm256_sign_epi8(q8, neg), scl));
        }
        __m256 d = _mm256_set1_ps(a->d * _cvtsh_ss(dh));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        acc_shift = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc_shift);
    }
    return fmaf(0.125f, sum8(acc_shift), sum8(acc));
}

void tk_fill_avx2_iquant(tk_ops *o)
{
    o->vec_dot[TQ_IQ4_NL] = dot_iq4_nl;
    o->vec_dot[TQ_IQ4_XS] = dot_iq4_xs;
    o->vec_dot[TQ_MXFP4] = dot_mxfp4;
    o->vec_dot[TQ_IQ2_XXS] = dot_iq2_xxs;
    o->vec_dot[TQ_IQ2_XS] = dot_iq2_xs;
    o->vec_dot[TQ_IQ2_S] = dot_iq2_s;
    o->vec_dot[TQ_IQ3_XXS] = dot_iq3_xxs;
    o->vec_dot[TQ_IQ3_S] = dot_iq3_s;
    o->vec_dot[TQ_IQ1_S] = dot_iq1_s;
    o->vec_dot[TQ_IQ1_M] = dot_iq1_m;
}
