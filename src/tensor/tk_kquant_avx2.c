/*
 * tk_kquant_avx2.c - AVX2 kernels for the K-quants: Q2_K, Q3_K, Q4_K, Q5_K
 * and Q6_K dot products against Q8_K activations, and the Q8_K activation quantizer.
 * Compiled with -mavx2 -mfma -mf16c; tk.c calls tk_fill_avx2_kquant() only
 * on CPUs that have them.
 *
 * DESIGN: one super-block (256 values) per iteration.  The integer products
 * are formed with vpmaddubsw (unsigned level x signed activation, pairs
 * summed to int16; no saturation: |15*127*2|, |31*127*2|, |63*127*2| all fit;
 * Q3_K's signed levels go in as |level| with the activation signed to match)
 * and vpmaddwd against the sub-block scale (pairs summed to int32), which
 * leaves int32 lane m holding values 4m..4m+3 of every 32-value run.  Those
 * lanes are exactly the scalar reference's (tq_kquant.c), and so is the
 * float work after them (Q5_K, Q6_K: one fused multiply-add of the block's
 * d into 8 float lanes, the same pairwise final sum; Q4_K: the lanes' exact
 * total into one float).  The results therefore equal tq_dot_* bit for bit,
 * not merely within tk.h's error budget.
 *
 * The short inner loops carry "#pragma GCC unroll": their shift counts and
 * shuffle patterns are only immediates once unrolled, which -O2 alone does
 * not do (it costs a third of the speed).
 */
#include "tk_impl.h"

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

static inline float half_to_float(tq_f16 h)
{
    return _cvtsh_ss(h);
}

/* Sum of 4 int32 lanes (exact). */
static inline int32_t hsum4_i32(__m128i v)
{
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 1));
    return _mm_cvtsi128_si32(v);
}

/* The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a
 * Q4_K/Q5_K block's 12 packed bytes, as one vector (layout in tq_kquant.c). */
static inline __m128i unpack_scales_mins(const uint8_t *packed)
{
    uint32_t w[3];
    memcpy(w, packed, 12);
    return _mm_set_epi32((int)(((w[2] >> 4) & 0x0f0f0f0f) | (((w[1] >> 6) & 0x03030303) << 4)),
                         (int)(w[1] & 0x3f3f3f3f),
                         (int)((w[2] & 0x0f0f0f0f) | (((w[0] >> 6) & 0x03030303) << 4)),
                         (int)(w[0] & 0x3f3f3f3f));
}

/*
 * One Q4_K block's float step: lane 0 of acc += total(s4) * (d_w * d_a),
 * lane 1 += total(m4) * (dmin_w * d_a), each one rounding of a fused
 * multiply-add like the scalar reference's two fmaf() (d and dmin are
 * adjacent halves, converted together).
 */
_Static_assert(offsetof(tq_block_q4_K, d) == 0 && offsetof(tq_block_q4_K, dmin) == 2, "q4_K d, dmin");
static inline __m128 q4_K_accumulate(__m128 acc, __m128i s4, __m128i m4, const tq_block_q4_K *b, float d_a)
{
    __m128i t = _mm_hadd_epi32(s4, m4);                 /* s0+s1 s2+s3 m0+m1 m2+m3 */
    t = _mm_hadd_epi32(t, t);                           /* S M S M */
    uint32_t dd;
    memcpy(&dd, b, sizeof dd);
    __m128 scale = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(d_a));
    return _mm_fmadd_ps(_mm_cvtepi32_ps(t), scale, acc);
}

/* The 16 bsums of a Q8_K block paired into 8 sums of 32 values each. */
static inline __m128i bsums_by_32(const int16_t *bsums)
{
    __m256i b = _mm256_loadu_si256((const __m256i *)bsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

/* Words of sc (8 x int16 in each 128-bit half) broadcast: word j everywhere. */
static inline __m256i bcast_word(__m256i sc, int j)
{
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* int32 lanes of sc * (lv . a) for one 32-value run. */
static inline __m256i run_dot(__m256i lv, const int8_t *a, __m256i sc)
{
    __m256i p = _mm256_maddubs_epi16(lv, _mm256_loadu_si256((const __m256i *)a));
    return _mm256_madd_epi16(sc, p);
}

/*
 * Whole-block integer totals into two floats (tq_kquant.c, NUMERICS), kept
 * as lanes 0 (scaled part) and 1 (min part) of one vector so each block
 * costs one convert, one multiply and one fused multiply-add.
 */
static float dot_q4_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q4_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        __m256i sm = _mm256_cvtepu8_epi16(unpack_scales_mins(b->scales));
        __m128i mins = _mm256_extracti128_si256(sm, 1);
        __m128i min_lanes = _mm_madd_epi16(mins, bsums_by_32(a->bsums));

        __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * k));
            __m256i lo = _mm256_and_si256(bits, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(
                run_dot(lo, a->qs + 64 * k, bcast_word(sc, 2 * k)),
                run_dot(hi, a->qs + 64 * k + 32, bcast_word(sc, 2 * k + 1))));
        }
        acc = q4_K_accumulate(acc, _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1)),
                              min_lanes, b, a->d);
    }
    return _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_movehdup_ps(acc));
}

/* Bit j of every byte of h moved to bit 4 (j is a constant after unrolling). */
static inline __m256i fifth_bit(__m256i h, int j)
{
    __m256i bit = _mm256_and_si256(h, _mm256_set1_epi8((char)(1 << j)));
    return j <= 4 ? _mm256_slli_epi16(bit, 4 - j) : _mm256_srli_epi16(bit, j - 4);
}

static float dot_q5_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q5_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    float sum_min = 0;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * half_to_float(b->d);
        float dmin = -a->d * half_to_float(b->dmin);
        __m256i sm = _mm256_cvtepu8_epi16(unpack_scales_mins(b->scales));
        __m128i mins = _mm256_extracti128_si256(sm, 1);
        int32_t total_min = hsum4_i32(_mm_madd_epi16(mins, bsums_by_32(a->bsums)));
        sum_min = fmaf(dmin, (float)total_min, sum_min);

        __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        __m256i h = _mm256_loadu_si256((const __m256i *)b->qh);
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * k));
            __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), fifth_bit(h, 2 * k));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                         fifth_bit(h, 2 * k + 1));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(
                run_dot(lo, a->qs + 64 * k, bcast_word(sc, 2 * k)),
                run_dot(hi, a->qs + 64 * k + 32, bcast_word(sc, 2 * k + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc) + sum_min;
}

/* Q6_K scales 2g (lanes 0-3 of a run) and 2g+1 (lanes 4-7) as int16. */
static inline __m256i q6_scale_pair(__m128i sc8, int g)
{
    const long long lo = 0x0101010101010101LL * (2 * g), hi = 0x0101010101010101LL * (2 * g + 1);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_set_epi64x(hi, lo)));
}

static float dot_q6_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q6_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * half_to_float(b->d);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
        __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        /* the levels are used as 0..63; the -32 comes off in one go */
        __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bs, _mm256_cvtepi8_epi16(sc8)), 5);

        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = b->ql + 64 * half;
            const int8_t *q8 = a->qs + 128 * half;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * half));
            __m256i v[4];
            v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x03)), 4));
            v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x0c)), 2));
            v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
            v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8((char)0xc0)), 2));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                sumi = _mm256_add_epi32(sumi, run_dot(v[k], q8 + 32 * k, q6_scale_pair(sc8, 4 * half + k)));
        }
        sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc);
}

/*
 * Q2_K: the mins first (lane m of the bsum pairs times -dmin * d_a), then
 * the levels, whose 2 bits of runs 4h..4h+3 are bit pairs 0-1 .. 6-7 of
 * qs[32h .. 32h + 32); each run's two 16-value scales as q6_scale_pair's.
 */
static float dot_q2_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q2_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * half_to_float(b->d);
        float dmin = -a->d * half_to_float(b->dmin);
        __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
        __m128i sc8 = _mm_and_si128(packed, m4);
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        __m256i mins = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)a->bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), acc);

        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * half));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i lv = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                sumi = _mm256_add_epi32(sumi, run_dot(lv, a->qs + 128 * half + 32 * k,
                                                      q6_scale_pair(sc8, 4 * half + k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc);
}

/* The 16 six-bit Q3_K scales minus 32, as int8 (layout in tq_kquant.c). */
static inline __m128i q3_scales(const uint8_t *packed)
{
    uint32_t w[3];
    memcpy(w, packed, 12);
    const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    __m128i s = _mm_set_epi32((int)(((w[1] >> 4) & lo4) | (((w[2] >> 6) & hi2) << 4)),
                              (int)(((w[0] >> 4) & lo4) | (((w[2] >> 4) & hi2) << 4)),
                              (int)((w[1] & lo4) | (((w[2] >> 2) & hi2) << 4)),
                              (int)((w[0] & lo4) | ((w[2] & hi2) << 4)));
    return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

/*
 * Q3_K: levels -4..3 (the Q2_K bits, plus 4 where hmask bit 4h + k is set,
 * minus 4) are signed, so vpmaddubsw gets |level| and the activations with
 * the level's sign (|4 * 127 * 2| fits int16); the lanes are exact, then
 * one fused multiply-add per block as for Q6_K.
 */
static float dot_q3_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q3_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * half_to_float(b->d);
        __m128i sc8 = q3_scales(b->scales);
        __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * half));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * half + k), one);
                __m256i lv = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)), four);
                __m256i q8 = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * half + 32 * k));
                __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(lv, lv), _mm256_sign_epi8(q8, lv));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(q6_scale_pair(sc8, 4 * half + k), p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc);
}

/* round_nearest() of tq_kquant.c on 8 floats, clamped above at 127: the
 * same bits for every input, NaN and infinities included (they arise when
 * the block's peak is so small that -127 / peak overflows), where vcvtps2dq
 * would give 0x80000000 instead. */
static inline __m256i round_clamp(__m256 v)
{
    __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.0f)));
    bits = _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                            _mm256_set1_epi32(0x00400000));
    return _mm256_min_epi32(bits, _mm256_set1_epi32(127));
}

/*
 * Q8_K, bit-exact with tq_quant_q8_K for every input: the peak is the first
 * value of largest magnitude (found again by a compare after the vector
 * max, since the max loses the position), levels are rounded as the
 * reference rounds and narrowed to their low byte as C's int8_t conversion
 * does, and the bsums are summed from the stored bytes.
 */
static void quantize_q8_K(const float *x, void *vy, int64_t n)
{
    tq_block_q8_K *b = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i low_byte = _mm256_set1_epi32(0xff);
    const __m128i bias = _mm_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int l = 0; l < TQ_QK_K; l += 8)   /* max(new, old): a NaN is skipped */
            vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + l)), vmax);
        __m128 m = _mm_max_ps(_mm256_extractf128_ps(vmax, 1), _mm256_castps256_ps128(vmax));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float apeak = _mm_cvtss_f32(m);
        if (!apeak) {
            memset(b, 0, sizeof *b);
            continue;
        }
        __m256 vpeak = _mm256_set1_ps(apeak);
        int at = 0;
        for (int l = 0; l < TQ_QK_K; l += 8) {
            __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + l));
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(ax, vpeak, _CMP_EQ_OQ));
            if (mask) {
                at = l + __builtin_ctz((unsigned)mask);
                break;
            }
        }
        float inv = -127.f / x[at];
        __m256 vinv = _mm256_set1_ps(inv);
        for (int l = 0; l < TQ_QK_K; l += 32) {
            __m256i q[4];
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_and_si256(round_clamp(_mm256_mul_ps(vinv, _mm256_loadu_ps(x + l + 8 * k))),
                                        low_byte);
            /* 0..255 in every dword: the unsigned packs cannot saturate; they
             * interleave 128-bit halves, which the permute undoes */
            __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(b->qs + l), p);
        }
        /* bsums: bias to unsigned, sum 8 bytes at a time with vpsadbw */
        for (int g = 0; g < TQ_QK_K / 16; g++) {
            __m128i q = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(b->qs + 16 * g)), bias);
            __m128i s = _mm_sad_epu8(q, _mm_setzero_si128());
            b->bsums[g] = (int16_t)(_mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128);
        }
        b->d = 1 / inv;
    }
}

void tk_fill_avx2_kquant(tk_ops *o)
{
    o->vec_dot[TQ_Q2_K] = dot_q2_K;
    o->vec_dot[TQ_Q3_K] = dot_q3_K;
    o->vec_dot[TQ_Q4_K] = dot_q4_K;
    o->vec_dot[TQ_Q5_K] = dot_q5_K;
    o->vec_dot[TQ_Q6_K] = dot_q6_K;
    o->quantize[TQ_Q8_K] = quantize_q8_K;
}
