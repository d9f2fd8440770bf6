/*
 * tk_legacy_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI + BF16) kernels for the
 * plain float types and the 32-value block formats: vec_dot for F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and the activation converters to Q8_0,
 * F16 and BF16.  tk.c calls tk_fill_avx512_legacy only on CPUs with all of
 * these extensions.
 *
 * Integer dots work on two 32-value blocks per 512-bit register:
 *
 *   zmm bytes   0 .. 31          32 .. 63
 *               block i          block i + 1
 *   vpdpbusd -> 8 x int32        8 x int32       (sums of 4 products)
 *   scale       dw_i * da_i      dw_i+1 * da_i+1 (one float per half)
 *
 * vpdpbusd multiplies unsigned by signed bytes into int32 without
 * saturation.  Codes of the offset formats are unsigned already; for Q4_0 and
 * Q5_0 the code's zero point is taken out afterwards with a second vpdpbusd
 * (sum((c - z) a) = sum(c a) - sum(z a)), and Q8_0's signed weights go in as
 * |w| against a * sign(w).  A leftover odd block uses the 256-bit forms.
 *
 * BF16 uses vdpbf16ps, which pairs products before the float add and treats
 * subnormal bfloat16 as zero: inside tk.h's error budget (subnormals are
 * below 1e-37).  The converters are bit-exact with tq_legacy.c, so none of
 * them uses vcvtneps2bf16 (which flushes subnormals).
 */
#include "tk_impl.h"

#include <immintrin.h>
#include <string.h>

static inline float f16_to_f32(tq_f16 h)
{
    return _cvtsh_ss(h);
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m512 scale2(float lo, float hi)
{
    return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

static inline __m512i load2x32(const int8_t *p0, const int8_t *p1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* Nibble codes of one block, value order (low nibbles, then high). */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* Nibble codes of two blocks: [qs0 lo | qs0 hi | qs1 lo | qs1 hi]. */
static inline __m512i nibbles64(const uint8_t *qs0, const uint8_t *qs1)
{
    __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1),
                                 _mm_loadu_si128((const __m128i *)qs0));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- float types ---------------------------------------------------------- */

static float dot_f32(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), s3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static inline __m512 load_f16x16(__mmask16 m, const tq_f16 *p)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static float dot_f16(int64_t n, const void *w, const void *a)
{
    const tq_f16 *x = w, *y = a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(load_f16x16(0xffff, x + i), load_f16x16(0xffff, y + i), s0);
        s1 = _mm512_fmadd_ps(load_f16x16(0xffff, x + i + 16), load_f16x16(0xffff, y + i + 16), s1);
        s2 = _mm512_fmadd_ps(load_f16x16(0xffff, x + i + 32), load_f16x16(0xffff, y + i + 32), s2);
        s3 = _mm512_fmadd_ps(load_f16x16(0xffff, x + i + 48), load_f16x16(0xffff, y + i + 48), s3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(load_f16x16(m, x + i), load_f16x16(m, y + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static inline __m512bh load_bf16x32(__mmask32 m, const tq_bf16 *p)
{
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

static float dot_bf16(int64_t n, const void *w, const void *a)
{
    const tq_bf16 *x = w, *y = a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_dpbf16_ps(s0, load_bf16x32(~0u, x + i), load_bf16x32(~0u, y + i));
        s1 = _mm512_dpbf16_ps(s1, load_bf16x32(~0u, x + i + 32), load_bf16x32(~0u, y + i + 32));
    }
    for (; i < n; i += 32) {
        __mmask32 m = n - i >= 32 ? ~0u : (__mmask32)((1u << (n - i)) - 1);
        s0 = _mm512_dpbf16_ps(s0, load_bf16x32(m, x + i), load_bf16x32(m, y + i));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* ---- 32-value block formats against Q8_0 activations ---------------------- */

/* sum(w a) over 4-byte groups for signed w, 512 and 256 bits. */
static inline __m512i dot_s8s8_512(__m512i w, __m512i a)
{
    __mmask64 neg = _mm512_movepi8_mask(w);
    __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sa);
}

static inline __m256i dot_s8s8_256(__m256i w, __m256i a)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

static float dot_q8_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q8_0 *x = w, *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i s = dot_s8s8_512(load2x32(x[i].qs, x[i + 1].qs), load2x32(y[i].qs, y[i + 1].qs));
        __m512 d = scale2(f16_to_f32(x[i].d) * f16_to_f32(y[i].d),
                          f16_to_f32(x[i + 1].d) * f16_to_f32(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        __m256i s = dot_s8s8_256(_mm256_loadu_si256((const __m256i *)x[i].qs),
                                 _mm256_loadu_si256((const __m256i *)y[i].qs));
        sum += f16_to_f32(x[i].d) * f16_to_f32(y[i].d) * hsum8(_mm256_cvtepi32_ps(s));
    }
    return sum;
}

/* Q4_0 / Q5_0: codes c (unsigned) with zero point z: sum((c - z) a). */
static inline __m512i dot_zp_512(__m512i c, __m512i a, int z)
{
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, a);
    return _mm512_sub_epi32(s, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)z), a));
}

static inline __m256i dot_zp_256(__m256i c, __m256i a, int z)
{
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c, a);
    return _mm256_sub_epi32(s, _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)z), a));
}

static inline __m512i codes5_64(const uint8_t *qs0, const uint8_t *qh0,
                                const uint8_t *qs1, const uint8_t *qh1)
{
    __mmask64 hb = (__mmask64)load_u32(qh0) | (__mmask64)load_u32(qh1) << 32;
    __m512i nib = nibbles64(qs0, qs1);
    return _mm512_mask_add_epi8(nib, hb, nib, _mm512_set1_epi8(16));
}

static inline __m256i codes5_32(const uint8_t *qs, const uint8_t *qh)
{
    __m256i nib = nibbles32(qs);
    return _mm256_mask_add_epi8(nib, (__mmask32)load_u32(qh), nib, _mm256_set1_epi8(16));
}

static float dot_q4_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_0 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i s = dot_zp_512(nibbles64(x[i].qs, x[i + 1].qs), load2x32(y[i].qs, y[i + 1].qs), 8);
        __m512 d = scale2(f16_to_f32(x[i].d) * f16_to_f32(y[i].d),
                          f16_to_f32(x[i + 1].d) * f16_to_f32(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        __m256i s = dot_zp_256(nibbles32(x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs), 8);
        sum += f16_to_f32(x[i].d) * f16_to_f32(y[i].d) * hsum8(_mm256_cvtepi32_ps(s));
    }
    return sum;
}

static float dot_q5_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_0 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i c = codes5_64(x[i].qs, x[i].qh, x[i + 1].qs, x[i + 1].qh);
        __m512i s = dot_zp_512(c, load2x32(y[i].qs, y[i + 1].qs), 16);
        __m512 d = scale2(f16_to_f32(x[i].d) * f16_to_f32(y[i].d),
                          f16_to_f32(x[i + 1].d) * f16_to_f32(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        __m256i s = dot_zp_256(codes5_32(x[i].qs, x[i].qh),
                               _mm256_loadu_si256((const __m256i *)y[i].qs), 16);
        sum += f16_to_f32(x[i].d) * f16_to_f32(y[i].d) * hsum8(_mm256_cvtepi32_ps(s));
    }
    return sum;
}

/*
 * Q4_1 / Q5_1: d da sum(c a) + m da sum(a) for two blocks whose codes are
 * in `c`, scales from the weight blocks' d/m and activation blocks' d.
 */
static inline __m512 dot_offset2(__m512 acc, __m512i c, const tq_block_q8_0 *y,
                                 tq_f16 d0, tq_f16 m0, tq_f16 d1, tq_f16 m1)
{
    __m512i qa = load2x32(y[0].qs, y[1].qs);
    __m512i si = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, qa);
    __m512i sa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), qa);
    float da0 = f16_to_f32(y[0].d), da1 = f16_to_f32(y[1].d);
    acc = _mm512_fmadd_ps(scale2(f16_to_f32(d0) * da0, f16_to_f32(d1) * da1), _mm512_cvtepi32_ps(si), acc);
    return _mm512_fmadd_ps(scale2(f16_to_f32(m0) * da0, f16_to_f32(m1) * da1), _mm512_cvtepi32_ps(sa), acc);
}

static inline float dot_offset1(__m256i c, const tq_block_q8_0 *y, tq_f16 d, tq_f16 m)
{
    __m256i qa = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256i si = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c, qa);
    __m256i sa = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), qa);
    float da = f16_to_f32(y->d);
    return f16_to_f32(d) * da * hsum8(_mm256_cvtepi32_ps(si))
         + f16_to_f32(m) * da * hsum8(_mm256_cvtepi32_ps(sa));
}

static float dot_q4_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_1 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2)
        acc = dot_offset2(acc, nibbles64(x[i].qs, x[i + 1].qs), &y[i],
                          x[i].d, x[i].m, x[i + 1].d, x[i + 1].m);
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) sum += dot_offset1(nibbles32(x[i].qs), &y[i], x[i].d, x[i].m);
    return sum;
}

static float dot_q5_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_1 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2)
        acc = dot_offset2(acc, codes5_64(x[i].qs, x[i].qh, x[i + 1].qs, x[i + 1].qh), &y[i],
                          x[i].d, x[i].m, x[i + 1].d, x[i + 1].m);
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) sum += dot_offset1(codes5_32(x[i].qs, x[i].qh), &y[i], x[i].d, x[i].m);
    return sum;
}

/* ---- activation converters ------------------------------------------------ */

static void quant_q8_0(const float *x, void *out, int64_t n)
{
    tq_block_q8_0 *y = out;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = (tq_f16)_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
        __m512 vid = _mm512_set1_ps(id);
        __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i i1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtsepi32_epi8(i1));
    }
}

static void quant_f16(const float *x, void *out, int64_t n)
{
    tq_f16 *y = out;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(y + i, m, h);
    }
}

static void quant_bf16(const float *x, void *out, int64_t n)
{
    tq_bf16 *y = out;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512i u = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtepi32_epi16(r));
    }
}

void tk_fill_avx512_legacy(tk_ops *o)
{
    o->vec_dot[TQ_F32]  = dot_f32;
    o->vec_dot[TQ_F16]  = dot_f16;
    o->vec_dot[TQ_BF16] = dot_bf16;
    o->vec_dot[TQ_Q8_0] = dot_q8_0;
    o->vec_dot[TQ_Q4_0] = dot_q4_0;
    o->vec_dot[TQ_Q4_1] = dot_q4_1;
    o->vec_dot[TQ_Q5_0] = dot_q5_0;
    o->vec_dot[TQ_Q5_1] = dot_q5_1;

    o->quantize[TQ_Q8_0] = quant_q8_0;
    o->quantize[TQ_F16]  = quant_f16;
    o->quantize[TQ_BF16] = quant_bf16;
}
