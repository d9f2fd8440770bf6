/*
 * tk_iquant_avx512.c - AVX-512 kernels for IQ4_NL (against Q8_0) and
 * IQ4_XS (against Q8_K).  Compiled with -mavx512f/bw/vl/dq/vnni; tk.c calls
 * tk_fill_avx512_iquant() only on CPUs that have them.
 *
 * DESIGN: two 32-value groups per 512-bit register, one per 256-bit half,
 * each half laid out as the AVX2 kernels' register (tk_iquant_avx2.c): the
 * low nibbles' values in its low 128 bits, the high nibbles' in its high
 * 128.  AVX-512 has no vpsignb, so |value| comes from vpabsb and the
 * activations of negative values are negated under a mask.  IQ4_XS adds
 * both halves' int32 lanes at the end of the super-block (integer sums:
 * exact, the same lanes as the scalar reference); IQ4_NL's halves are its
 * even and odd blocks, whose float accumulators the reference keeps apart,
 * so the float lanes stay in halves until the end.  Results equal
 * tq_dot_iq4_* bit for bit.
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

/* Values of two groups whose 16 level bytes are at q0 and q1. */
static inline __m512i two_groups(const uint8_t *q0, const uint8_t *q1, __m512i table)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i bits = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
                                           _mm_loadu_si128((const __m128i *)q1), 1);
    __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    /* 128-bit lanes lo0 lo1 hi0 hi1 -> lo0 hi0 lo1 hi1 */
    __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    idx = _mm512_shuffle_i64x2(idx, idx, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_shuffle_epi8(table, idx);
}

/* int16 pair sums of 64 values v times 64 activations q8 (exact). */
static inline __m512i pair_products(__m512i v, __m512i q8)
{
    __m512i signed_q8 = _mm512_mask_sub_epi8(q8, _mm512_movepi8_mask(v), _mm512_setzero_si512(), q8);
    return _mm512_maddubs_epi16(_mm512_abs_epi8(v), signed_q8);
}

static inline __m512i two_rows(const int8_t *a0, const int8_t *a1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0)),
                              _mm256_loadu_si256((const __m256i *)a1), 1);
}

static float dot_iq4_nl(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq4_nl *b = vw;
    const tq_block_q8_0 *a = va;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)tq_iq4nl_values));
    const __m512i ones = _mm512_set1_epi16(1);
    int64_t nb = n / TQ_QK4_NL, ib = 0;
    __m512 acc = _mm512_setzero_ps();   /* low half: even blocks, high half: odd */
    for (; ib + 1 < nb; ib += 2) {
        __m512i v = two_groups(b[ib].qs, b[ib + 1].qs, table);
        __m512i p = _mm512_madd_epi16(pair_products(v, two_rows(a[ib].qs, a[ib + 1].qs)), ones);
        float d0 = _cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d), d1 = _cvtsh_ss(a[ib + 1].d) * _cvtsh_ss(b[ib + 1].d);
        __m512 d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float total = sum8(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
    if (ib < nb) {   /* the reference's scalar tail (tq_iquant.c) */
        int32_t s = 0;
        for (int l = 0; l < 16; l++)
            s += tq_iq4nl_values[b[ib].qs[l] & 0xf] * a[ib].qs[l] + tq_iq4nl_values[b[ib].qs[l] >> 4] * a[ib].qs[16 + l];
        total += _cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d) * (float)s;
    }
    return total;
}

static float dot_iq4_xs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq4_xs *b = vw;
    const tq_block_q8_K *a = va;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)tq_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        uint32_t lo;
        memcpy(&lo, b->scales_l, sizeof lo);
        uint32_t h = b->scales_h;
        __m512i sumi = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            int ls0 = (int)(((lo >> (4 * j)) & 0xf) | (((h >> (2 * j)) & 3) << 4)) - 32;
            int ls1 = (int)(((lo >> (4 * j + 4)) & 0xf) | (((h >> (2 * j + 2)) & 3) << 4)) - 32;
            __m512i v = two_groups(b->qs + 16 * j, b->qs + 16 * j + 16, table);
            __m512i p = pair_products(v, _mm512_loadu_si512(a->qs + 32 * j));
            __m512i sc = _mm512_inserti64x4(_mm512_set1_epi16((short)ls0), _mm256_set1_epi16((short)ls1), 1);
            sumi = _mm512_dpwssd_epi32(sumi, p, sc);
        }
        __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
        float d = _cvtsh_ss(b->d) * a->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
    }
    return sum8(acc);
}

void tk_fill_avx512_iquant(tk_ops *o)
{
    o->vec_dot[TQ_IQ4_NL] = dot_iq4_nl;
    o->vec_dot[TQ_IQ4_XS] = dot_iq4_xs;
}
