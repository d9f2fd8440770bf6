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
 * The avx512 table uses these too: versions with two groups per 512-bit
 * register (vpabsb and a masked negate in place of vpsignb) ran at 0.98x
 * (IQ4_NL) and 0.33x (IQ4_XS) of these on a Zen 4 (2-core EPYC VM),
 * 1 thread, interleaved medians.
 */
#include "tk_impl.h"

#include <immintrin.h>
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

static float dot_iq4_nl(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq4_nl *b = vw;
    const tq_block_q8_0 *a = va;
    const __m128i table = _mm_loadu_si128((const __m128i *)tq_iq4nl_values);
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t nb = n / TQ_QK4_NL, ib = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; ib + 1 < nb; ib += 2) {
        __m256i p0 = _mm256_madd_epi16(pair_products(group_values(b[ib].qs, table), a[ib].qs), ones);
        __m256i p1 = _mm256_madd_epi16(pair_products(group_values(b[ib + 1].qs, table), a[ib + 1].qs), ones);
        float d0 = _cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d), d1 = _cvtsh_ss(a[ib + 1].d) * _cvtsh_ss(b[ib + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    float total = sum8(_mm256_add_ps(acc0, acc1));
    if (ib < nb) {   /* the reference's scalar tail (tq_iquant.c) */
        __m256i p = _mm256_madd_epi16(pair_products(group_values(b[ib].qs, table), a[ib].qs), ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
        total += _cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d) * (float)_mm_cvtsi128_si32(s);
    }
    return total;
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

void tk_fill_avx2_iquant(tk_ops *o)
{
    o->vec_dot[TQ_IQ4_NL] = dot_iq4_nl;
    o->vec_dot[TQ_IQ4_XS] = dot_iq4_xs;
}
