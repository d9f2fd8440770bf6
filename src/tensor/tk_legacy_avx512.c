/*
 * tk_legacy_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI + BF16) kernels for the
 * plain float types and the 32-value block formats: vec_dot for F32, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and the activation converters to Q8_0, F16
 * and BF16.  tk.c calls tk_fill_avx512_legacy only on CPUs with all of these
 * extensions.  F16 dots are left to the AVX2 kernel, which tk.c inherits:
 * on the target (AMD Zen 4) 512-bit vcvtph2ps made them 1.6x slower.
 *
 * Integer dots take four 32-value blocks per step, two per 512-bit register:
 *
 *   zmm bytes   0 .. 31          32 .. 63
 *               block i          block i + 1       (i + 2, i + 3 in a second)
 *   vpdpbusd -> 8 x int32        8 x int32         (sums of 4 products)
 *   scale       dw_i * da_i      dw_i+1 * da_i+1   (one float per half)
 *
 * vpdpbusd multiplies unsigned by signed bytes into int32 without
 * saturation.  Signed values (Q8_0, and Q4_0 / Q5_0 after taking out their
 * zero point) go in as |w| against a * sign(w); the unsigned codes of Q4_1 /
 * Q5_1 go in as they are, with a second vpdpbusd against ones for the
 * m * da * sum(a) term.  The four blocks' f16 scales are converted and
 * multiplied in one go, then spread to their halves.  Leftover blocks use
 * the 256-bit forms.
 *
 * BF16 uses vdpbf16ps, which pairs products before the float add and treats
 * subnormal bfloat16 as zero: inside tk.h's error budget (subnormals are
 * below 1e-37).  The converters are bit-exact with tq_legacy.c, so none of
 * them uses vcvtneps2bf16 (which flushes subnormals).
 */
#include "tk_impl.h"
#include "tk_codes_avx512.h"

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

/* Nibble codes of two blocks: [qs0 lo | qs0 hi | qs1 lo | qs1 hi]. */
static inline __m512i nibbles64(const uint8_t *qs0, const uint8_t *qs1)
{
    __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1),
                                 _mm_loadu_si128((const __m128i *)qs0));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* ---- float types ---------------------------------------------------------- */

/* The 16 lanes dot_f32 reduces: four accumulators over 64-float steps,
 * then the masked tail into the first. */
static inline __m512 dot_f32_lanes(int64_t n, const float *x, const float *y)
{
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
    return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
}

static float dot_f32(int64_t n, const void *w, const void *a)
{
    return _mm512_reduce_add_ps(dot_f32_lanes(n, w, a));
}

/*
 * Lane i = the sum of v[i]'s lanes, added in the order of GCC's
 * _mm512_reduce_add_ps (256-bit halves, 128-bit halves, lanes i and i + 2,
 * then i and i + 1), so each equals dot_f32's to the bit; 15 adds and 31
 * shuffles for 16 sums where one at a time takes 64 operations.
 */
static inline __m512 reduce16(const __m512 v[16])
{
    __m512 t[8], u[4], w[2];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {   /* 256-bit halves: [v2i's 8 | v2i+1's 8] */
        __m512d a = _mm512_castps_pd(v[2 * i]), b = _mm512_castps_pd(v[2 * i + 1]);
        t[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_shuffle_f64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2))),
                             _mm512_castpd_ps(_mm512_shuffle_f64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0))));
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)     /* 128-bit halves: 128-bit lane k holds v4i+k's 4 */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    #pragma GCC unroll 2
    for (int i = 0; i < 2; i++)     /* lanes j and j + 2: per 128-bit lane k, v8i+k's 2 then v8i+4+k's 2 */
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 0 and 1: lane 4k + j holds v4j+k */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), r);
}

/* dot_f32_lanes of one row against two tokens, the row read once. */
static inline void dot_f32_lanes2(int64_t n, const float *x, const float *y0, const float *y1, __m512 *l0, __m512 *l1)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 w0 = _mm512_loadu_ps(x + i), w1 = _mm512_loadu_ps(x + i + 16);
        __m512 w2 = _mm512_loadu_ps(x + i + 32), w3 = _mm512_loadu_ps(x + i + 48);
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y0 + i), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y0 + i + 16), a1);
        a2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(y0 + i + 32), a2);
        a3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(y0 + i + 48), a3);
        b0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y1 + i), b0);
        b1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y1 + i + 16), b1);
        b2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(y1 + i + 32), b2);
        b3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(y1 + i + 48), b3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 w = _mm512_maskz_loadu_ps(m, x + i);
        a0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, y0 + i), a0);
        b0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, y1 + i), b0);
    }
    *l0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    *l1 = _mm512_add_ps(_mm512_add_ps(b0, b1), _mm512_add_ps(b2, b3));
}

/* dot_f32 of n_rows rows by n_tok tokens: 16 rows by two tokens at a time,
 * each row read once for both and the reductions 16 at once; the rows of
 * a tile stay in L1 across the tokens. */
static inline __attribute__((always_inline)) void
rows_f32(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow, int n_tok, float *y,
         int64_t y_stride)
{
    for (int r0 = 0; r0 < n_rows; r0 += 16) {
        int nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
        __mmask16 keep = (__mmask16)((1u << nr) - 1);
        const char *wt = (const char *)w + (size_t)r0 * wrow;
        int t = 0;
        for (; t + 2 <= n_tok; t += 2) {
            const float *x0 = (const float *)((const char *)a + (size_t)t * arow);
            const float *x1 = (const float *)((const char *)x0 + arow);
            __m512 v0[16], v1[16];
            for (int r = 0; r < 16; r++) {
                if (r < nr) dot_f32_lanes2(n, (const float *)(wt + (size_t)r * wrow), x0, x1, &v0[r], &v1[r]);
                else v0[r] = v1[r] = _mm512_setzero_ps();
            }
            _mm512_mask_storeu_ps(y + t * y_stride + r0, keep, reduce16(v0));
            _mm512_mask_storeu_ps(y + (t + 1) * y_stride + r0, keep, reduce16(v1));
        }
        if (t < n_tok) {
            const float *x = (const float *)((const char *)a + (size_t)t * arow);
            __m512 v[16];
            for (int r = 0; r < 16; r++)
                v[r] = r < nr ? dot_f32_lanes(n, (const float *)(wt + (size_t)r * wrow), x) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(y + t * y_stride + r0, keep, reduce16(v));
        }
    }
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
        s0 = _mm512_dpbf16_ps(s0, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
        s1 = _mm512_dpbf16_ps(s1, (__m512bh)_mm512_loadu_si512(x + i + 32),
                              (__m512bh)_mm512_loadu_si512(y + i + 32));
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

/* Four f16 values as one 64-bit word, first in the low bits. */
static inline uint64_t pack4(tq_f16 h0, tq_f16 h1, tq_f16 h2, tq_f16 h3)
{
    return (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
}

/* Products of two packed quadruples of halves: one conversion and one
 * multiply for four blocks, instead of four of each. */
static inline __m128 mul4_f16(uint64_t x, uint64_t y)
{
    __m256 f = _mm256_cvtph_ps(_mm_set_epi64x((long long)y, (long long)x));
    return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

/* Lanes 0-7 = d[k], lanes 8-15 = d[k + 1]: the scales of a block pair. */
static inline __m512 spread_pair(__m128 d, int k)
{
    __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(k)), _mm256_set1_epi32(k + 1), 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(d));
}

static inline uint64_t act_scales4(const tq_block_q8_0 *y)
{
    return pack4(y[0].d, y[1].d, y[2].d, y[3].d);
}

/*
 * Four blocks of signed weight values w01 (blocks 0, 1) and w23 against
 * activation blocks y[0..3]; weight scales packed in dw4.  Two accumulators
 * keep the FMA chain off the critical path.
 */
static inline void step4_signed(__m512 *acc0, __m512 *acc1, __m512i w01, __m512i w23,
                                const tq_block_q8_0 *y, uint64_t dw4)
{
    __m128 d = mul4_f16(dw4, act_scales4(y));
    __m512i s01 = dot_s8s8_512(w01, load2x32(y[0].qs, y[1].qs));
    __m512i s23 = dot_s8s8_512(w23, load2x32(y[2].qs, y[3].qs));
    *acc0 = _mm512_fmadd_ps(spread_pair(d, 0), _mm512_cvtepi32_ps(s01), *acc0);
    *acc1 = _mm512_fmadd_ps(spread_pair(d, 2), _mm512_cvtepi32_ps(s23), *acc1);
}

/* One leftover block of signed values. */
static inline float step1_signed(__m256i w, const tq_block_q8_0 *y, tq_f16 dw)
{
    __m256i s = dot_s8s8_256(w, _mm256_loadu_si256((const __m256i *)y->qs));
    return f16_to_f32(dw) * f16_to_f32(y->d) * hsum8(_mm256_cvtepi32_ps(s));
}

static inline __m512i codes5_64(const uint8_t *qs0, const uint8_t *qh0,
                                const uint8_t *qs1, const uint8_t *qh1)
{
    __mmask64 hb = (__mmask64)(uint32_t)load_i32(qh0) | (__mmask64)(uint32_t)load_i32(qh1) << 32;
    __m512i nib = nibbles64(qs0, qs1);
    return _mm512_mask_add_epi8(nib, hb, nib, _mm512_set1_epi8(16));
}

static float dot_q8_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q8_0 *x = w, *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 4 <= nb; i += 4)
        step4_signed(&acc0, &acc1, load2x32(x[i].qs, x[i + 1].qs), load2x32(x[i + 2].qs, x[i + 3].qs),
                     &y[i], pack4(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d));
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++) sum += step1_signed(_mm256_loadu_si256((const __m256i *)x[i].qs), &y[i], x[i].d);
    return sum;
}

static float dot_q4_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_0 *x = w;
    const tq_block_q8_0 *y = a;
    const __m512i eight = _mm512_set1_epi8(8);
    int64_t nb = n / 32, i = 0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 4 <= nb; i += 4)
        step4_signed(&acc0, &acc1, _mm512_sub_epi8(nibbles64(x[i].qs, x[i + 1].qs), eight),
                     _mm512_sub_epi8(nibbles64(x[i + 2].qs, x[i + 3].qs), eight),
                     &y[i], pack4(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d));
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++)
        sum += step1_signed(_mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8)), &y[i], x[i].d);
    return sum;
}

static float dot_q5_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_0 *x = w;
    const tq_block_q8_0 *y = a;
    const __m512i sixteen = _mm512_set1_epi8(16);
    int64_t nb = n / 32, i = 0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 4 <= nb; i += 4) {
        __m512i w01 = codes5_64(x[i].qs, x[i].qh, x[i + 1].qs, x[i + 1].qh);
        __m512i w23 = codes5_64(x[i + 2].qs, x[i + 2].qh, x[i + 3].qs, x[i + 3].qh);
        step4_signed(&acc0, &acc1, _mm512_sub_epi8(w01, sixteen), _mm512_sub_epi8(w23, sixteen),
                     &y[i], pack4(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d));
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++)
        sum += step1_signed(_mm256_sub_epi8(codes5_32(x[i].qs, x[i].qh), _mm256_set1_epi8(16)),
                            &y[i], x[i].d);
    return sum;
}

/*
 * Q4_1 / Q5_1, four blocks: d da sum(c a) + m da sum(a) with unsigned codes
 * c01, c23; dw4 / mw4 the packed weight scales and minimums.
 */
static inline void step4_offset(__m512 *acc0, __m512 *acc1, __m512i c01, __m512i c23,
                                const tq_block_q8_0 *y, uint64_t dw4, uint64_t mw4)
{
    uint64_t da4 = act_scales4(y);
    __m128 d = mul4_f16(dw4, da4), m = mul4_f16(mw4, da4);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i a01 = load2x32(y[0].qs, y[1].qs), a23 = load2x32(y[2].qs, y[3].qs);
    __m512i s01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c01, a01);
    __m512i s23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c23, a23);
    __m512i t01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, a01);
    __m512i t23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, a23);
    *acc0 = _mm512_fmadd_ps(spread_pair(d, 0), _mm512_cvtepi32_ps(s01), *acc0);
    *acc1 = _mm512_fmadd_ps(spread_pair(d, 2), _mm512_cvtepi32_ps(s23), *acc1);
    *acc0 = _mm512_fmadd_ps(spread_pair(m, 0), _mm512_cvtepi32_ps(t01), *acc0);
    *acc1 = _mm512_fmadd_ps(spread_pair(m, 2), _mm512_cvtepi32_ps(t23), *acc1);
}

static inline float step1_offset(__m256i c, const tq_block_q8_0 *y, tq_f16 d, tq_f16 m)
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
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 4 <= nb; i += 4)
        step4_offset(&acc0, &acc1, nibbles64(x[i].qs, x[i + 1].qs), nibbles64(x[i + 2].qs, x[i + 3].qs),
                     &y[i], pack4(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d),
                     pack4(x[i].m, x[i + 1].m, x[i + 2].m, x[i + 3].m));
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++) sum += step1_offset(nibbles32(x[i].qs), &y[i], x[i].d, x[i].m);
    return sum;
}

static float dot_q5_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_1 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 4 <= nb; i += 4)
        step4_offset(&acc0, &acc1, codes5_64(x[i].qs, x[i].qh, x[i + 1].qs, x[i + 1].qh),
                     codes5_64(x[i + 2].qs, x[i + 2].qh, x[i + 3].qs, x[i + 3].qh),
                     &y[i], pack4(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d),
                     pack4(x[i].m, x[i + 1].m, x[i + 2].m, x[i + 3].m));
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++) sum += step1_offset(codes5_32(x[i].qs, x[i].qh), &y[i], x[i].d, x[i].m);
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

/* rows_f32, with the loops unrolled for the most common row length of
 * small models (64: stories260K's width). */
static void dot_rows_f32(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow, int n_tok,
                         float *y, int64_t y_stride)
{
    if (n == 64) rows_f32(64, w, wrow, n_rows, a, arow, n_tok, y, y_stride);
    else rows_f32(n, w, wrow, n_rows, a, arow, n_tok, y, y_stride);
}

/*
 * An F32X16 matrix (tq.h), in dot_f32's order with rows across the lanes.
 * dot_f32 gives lane l of its 16 four partial sums s0..s3 (columns
 * 64i + 16g + l into s_g), then the 16-column steps past the last 64 into
 * s0 (masked: a missing column adds +0), then (s0 + s1) + (s2 + s3), and
 * adds its lanes in _mm512_reduce_add_ps's tree (l with l + 8, + 4, + 2,
 * + 1).  Here lane r of L[l] is row r's lane l, one FMA of a tile's line
 * (column k of its 16 rows) by a broadcast activation per column, and the
 * L[l] are added in that tree: every output has dot_f32's bits, with no
 * lane folding per output.  Rows past the last whole tile are plain rows.
 */
static inline __attribute__((always_inline)) __m512 f32x16_lane(const float *wt, const float *x, int64_t n, int l)
{
    __m512 s[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    const int64_t n64 = n / 64 * 64;
    for (int64_t i = 0; i < n64; i += 64) {
        #pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const int64_t k = i + 16 * g + l;
            s[g] = _mm512_fmadd_ps(_mm512_loadu_ps(wt + k * 16), _mm512_set1_ps(x[k]), s[g]);
        }
    }
    for (int64_t i = n64; i < n; i += 16) {
        const int64_t k = i + l;
        s[0] = k < n ? _mm512_fmadd_ps(_mm512_loadu_ps(wt + k * 16), _mm512_set1_ps(x[k]), s[0])
                     : _mm512_add_ps(s[0], _mm512_setzero_ps());
    }
    return _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
}

static inline __attribute__((always_inline)) void
rows_f32x16(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow, int n_tok, float *y,
            int64_t y_stride)
{
    const int whole = n_rows / 16 * 16;
    for (int r0 = 0; r0 < whole; r0 += 16) {
        const float *wt = (const float *)((const char *)w + (size_t)r0 * wrow);   /* [n][16] */
        for (int t = 0; t < n_tok; t++) {
            const float *x = (const float *)((const char *)a + (size_t)t * arow);
            __m512 L[16];
            #pragma GCC unroll 16
            for (int l = 0; l < 16; l++) L[l] = f32x16_lane(wt, x, n, l);
            #pragma GCC unroll 8
            for (int l = 0; l < 8; l++) L[l] = _mm512_add_ps(L[l + 8], L[l]);
            #pragma GCC unroll 4
            for (int l = 0; l < 4; l++) L[l] = _mm512_add_ps(L[l + 4], L[l]);
            L[0] = _mm512_add_ps(L[0], L[2]);
            L[1] = _mm512_add_ps(L[1], L[3]);
            _mm512_storeu_ps(y + t * y_stride + r0, _mm512_add_ps(L[0], L[1]));
        }
    }
    if (whole < n_rows)
        rows_f32(n, (const char *)w + (size_t)whole * wrow, wrow, n_rows - whole, a, arow, n_tok, y + whole, y_stride);
}

/* rows_f32x16, unrolled for small models' most common width as dot_rows_f32 is. */
static void dot_rows_f32x16(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow,
                            int n_tok, float *y, int64_t y_stride)
{
    if (n == 64) rows_f32x16(64, w, wrow, n_rows, a, arow, n_tok, y, y_stride);
    else rows_f32x16(n, w, wrow, n_rows, a, arow, n_tok, y, y_stride);
}

void tk_fill_avx512_legacy(tk_ops *o)
{
    o->dot_rows[TQ_F32X16] = dot_rows_f32x16;
    o->vec_dot[TQ_F32]  = dot_f32;
    o->dot_rows[TQ_F32] = dot_rows_f32;
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
