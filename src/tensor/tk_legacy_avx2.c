/*
 * tk_legacy_avx2.c - AVX2/FMA/F16C kernels for the plain float types and the
 * 32-value block formats: vec_dot for F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, and the activation converters to Q8_0, F16 and BF16.
 * Compiled with -mavx2 -mfma -mf16c; tk.c calls tk_fill_avx2_legacy only
 * on CPUs that have them.
 *
 * Integer dots.  One 32-value block fills one 256-bit register of int8.
 * vpmaddubsw multiplies unsigned by signed bytes, so a signed weight w is
 * split as |w| (unsigned) times a * sign(w); for the formats with an offset
 * (Q4_1, Q5_1) the codes are already unsigned and the offset term
 * m * da * sum(a) is added from a second vpmaddubsw against ones.  Pair sums
 * stay below 2 * 128 * 127, so the 16-bit saturation never triggers for
 * codes in range.  Each block's 8 int32 partial sums are scaled by dw * da
 * in float and accumulated with FMA; only summation order differs from
 * tq_legacy.c.
 *
 * The converters are bit-exact with tq_legacy.c: same scalar scale, the
 * same single float multiply, round to nearest even (cvtps2dq under the
 * default MXCSR), F16C for halves, integer rounding for bfloat16.
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

/* 32 nibble codes of a block: value j (low nibbles first, then high). */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Byte j = 0xff when bit j of the 32-bit little-endian mask is set, else 0. */
static inline __m256i bits_to_bytes32(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* Sums of 4 adjacent products of unsigned u and signed s bytes, 8 x int32. */
static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for two signed byte vectors. */
static inline __m256i dot_s8s8(__m256i w, __m256i a)
{
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

/* ---- float types ---------------------------------------------------------- */

/* The 8 lanes dot_f32 reduces (four accumulators over 32-float steps,
 * then 8-float steps into the first); *i where the scalar tail starts. */
static inline __m256 dot_f32_lanes(int64_t n, const float *x, const float *y, int64_t *i_tail)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    *i_tail = i;
    return _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
}

static inline float dot_f32_tail(float sum, int64_t i, int64_t n, const float *x, const float *y)
{
    for (; i < n; i++) sum += x[i] * y[i];
    return sum;
}

static float dot_f32(int64_t n, const void *w, const void *a)
{
    int64_t i;
    __m256 v = dot_f32_lanes(n, w, a, &i);
    return dot_f32_tail(hsum8(v), i, n, w, a);
}

/* Lane i = hsum8(v[i]) to the bit (128-bit halves, lanes j and j + 2, then
 * 0 and 1): 7 adds and 15 shuffles for 8 sums. */
static inline __m256 reduce8(const __m256 v[8])
{
    __m256 t[4];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)   /* [v2i's 4 | v2i+1's 4] */
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes [v0, v2, v4, v6 | v1, v3, v5, v7] */
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* dot_f32 of n_rows rows by n_tok tokens, 8 rows at a time per token so
 * the reductions go 8 at once. */
static void dot_rows_f32(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow, int n_tok,
                         float *y, int64_t y_stride)
{
    for (int r0 = 0; r0 < n_rows; r0 += 8) {
        int nr = n_rows - r0 < 8 ? n_rows - r0 : 8;
        const char *wt = (const char *)w + (size_t)r0 * wrow;
        for (int t = 0; t < n_tok; t++) {
            const float *x = (const float *)((const char *)a + (size_t)t * arow);
            __m256 v[8];
            int64_t i = n;
            for (int r = 0; r < 8; r++)
                v[r] = r < nr ? dot_f32_lanes(n, (const float *)(wt + (size_t)r * wrow), x, &i) : _mm256_setzero_ps();
            float out[8];
            _mm256_storeu_ps(out, reduce8(v));
            for (int r = 0; r < nr; r++)
                y[t * y_stride + r0 + r] = dot_f32_tail(out[r], i, n, (const float *)(wt + (size_t)r * wrow), x);
        }
    }
}

static inline __m256 load_f16x8(const tq_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static float dot_f16(int64_t n, const void *w, const void *a)
{
    const tq_f16 *x = w, *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), s0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += f16_to_f32(x[i]) * f16_to_f32(y[i]);
    return sum;
}

static inline __m256 load_bf16x8(const tq_bf16 *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static float dot_bf16(int64_t n, const void *w, const void *a)
{
    const tq_bf16 *x = w, *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), load_bf16x8(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_bf16x8(x + i + 16), load_bf16x8(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_bf16x8(x + i + 24), load_bf16x8(y + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), s0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += tq_bf16_to_f32(x[i]) * tq_bf16_to_f32(y[i]);
    return sum;
}

/* ---- 32-value block formats against Q8_0 activations ---------------------- */

/*
 * Each format has a block step acc += (its block's contribution), and the
 * loops run two blocks per iteration into two accumulators: one chain of
 * FMAs would be bound by FMA latency, not by the integer work.
 */

static inline __m256 step_q8_0(__m256 acc, const tq_block_q8_0 *x, const tq_block_q8_0 *y)
{
    __m256i qw = _mm256_loadu_si256((const __m256i *)x->qs);
    __m256i qa = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256 d = _mm256_set1_ps(f16_to_f32(x->d) * f16_to_f32(y->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qw, qa)), acc);
}

static inline __m256 step_q4_0(__m256 acc, const tq_block_q4_0 *x, const tq_block_q8_0 *y)
{
    __m256i qw = _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
    __m256i qa = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256 d = _mm256_set1_ps(f16_to_f32(x->d) * f16_to_f32(y->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qw, qa)), acc);
}

static inline __m256 step_q5_0(__m256 acc, const tq_block_q5_0 *x, const tq_block_q8_0 *y)
{
    /* code - 16 = nibble - 16 where the high bit is clear, nibble where set */
    __m256i off = _mm256_andnot_si256(bits_to_bytes32(x->qh), _mm256_set1_epi8(16));
    __m256i qw = _mm256_sub_epi8(nibbles32(x->qs), off);
    __m256i qa = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256 d = _mm256_set1_ps(f16_to_f32(x->d) * f16_to_f32(y->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qw, qa)), acc);
}

/* Q4_1 / Q5_1 block: d da sum(code a) + m da sum(a), codes unsigned. */
static inline __m256 step_offset(__m256 acc, __m256i codes, const tq_block_q8_0 *y,
                                 tq_f16 dw, tq_f16 mw)
{
    __m256i qa = _mm256_loadu_si256((const __m256i *)y->qs);
    float da = f16_to_f32(y->d);
    __m256i si = dot_u8s8(codes, qa);
    __m256i sa = dot_u8s8(_mm256_set1_epi8(1), qa);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_to_f32(dw) * da), _mm256_cvtepi32_ps(si), acc);
    return _mm256_fmadd_ps(_mm256_set1_ps(f16_to_f32(mw) * da), _mm256_cvtepi32_ps(sa), acc);
}

static inline __m256 step_q4_1(__m256 acc, const tq_block_q4_1 *x, const tq_block_q8_0 *y)
{
    return step_offset(acc, nibbles32(x->qs), y, x->d, x->m);
}

static inline __m256 step_q5_1(__m256 acc, const tq_block_q5_1 *x, const tq_block_q8_0 *y)
{
    __m256i hi = _mm256_and_si256(bits_to_bytes32(x->qh), _mm256_set1_epi8(16));
    return step_offset(acc, _mm256_or_si256(nibbles32(x->qs), hi), y, x->d, x->m);
}

static float dot_q8_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q8_0 *x = w, *y = a;
    int64_t nb = n / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = step_q8_0(acc0, &x[i], &y[i]);
        acc1 = step_q8_0(acc1, &x[i + 1], &y[i + 1]);
    }
    if (i < nb) acc0 = step_q8_0(acc0, &x[i], &y[i]);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static float dot_q4_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_0 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = step_q4_0(acc0, &x[i], &y[i]);
        acc1 = step_q4_0(acc1, &x[i + 1], &y[i + 1]);
    }
    if (i < nb) acc0 = step_q4_0(acc0, &x[i], &y[i]);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static float dot_q5_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_0 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = step_q5_0(acc0, &x[i], &y[i]);
        acc1 = step_q5_0(acc1, &x[i + 1], &y[i + 1]);
    }
    if (i < nb) acc0 = step_q5_0(acc0, &x[i], &y[i]);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static float dot_q4_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_1 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = step_q4_1(acc0, &x[i], &y[i]);
        acc1 = step_q4_1(acc1, &x[i + 1], &y[i + 1]);
    }
    if (i < nb) acc0 = step_q4_1(acc0, &x[i], &y[i]);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static float dot_q5_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_1 *x = w;
    const tq_block_q8_0 *y = a;
    int64_t nb = n / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = step_q5_1(acc0, &x[i], &y[i]);
        acc1 = step_q5_1(acc1, &x[i + 1], &y[i + 1]);
    }
    if (i < nb) acc0 = step_q5_1(acc0, &x[i], &y[i]);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* ---- activation converters ------------------------------------------------ */

static void quant_q8_0(const float *x, void *out, int64_t n)
{
    tq_block_q8_0 *y = out;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = (tq_f16)_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);

        __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        /* The packs work within 128-bit lanes; the dword permute restores
         * element order. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[i].qs, p);
    }
}

static void quant_f16(const float *x, void *out, int64_t n)
{
    tq_f16 *y = out;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = tq_f32_to_f16(x[i]);
}

/* 8 floats -> 8 bfloat16 in the low 16 bits of each dword. */
static inline __m256i bf16_round8(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, q, nan);
}

static void quant_bf16(const float *x, void *out, int64_t n)
{
    tq_bf16 *y = out;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round8(_mm256_loadu_ps(x + i));
        __m256i b = bf16_round8(_mm256_loadu_ps(x + i + 8));
        /* Values are < 65536, so unsigned saturation is a plain narrowing. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    for (; i < n; i++) y[i] = tq_f32_to_bf16(x[i]);
}

void tk_fill_avx2_legacy(tk_ops *o)
{
    o->vec_dot[TQ_F32]  = dot_f32;
    o->dot_rows[TQ_F32] = dot_rows_f32;
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
