/*
 * tk_kquant_avx512.c - AVX-512 kernels for the K-quants: Q2_K, Q4_K, Q5_K
 * and Q6_K dot products against Q8_K activations, and the Q8_K quantizer.
 * (Q3_K runs its AVX2 kernel here: a version of this file's shape, two runs
 * per register with the level signs moved onto the activations under a
 * mask, ran at 0.73x of it on a Zen 4 (2-core EPYC VM).)
 * Compiled with -mavx512f/bw/vl/dq/vnni; tk.c calls tk_fill_avx512_kquant()
 * only on CPUs that have them.
 *
 * DESIGN: the integer work of a super-block runs 64 values per instruction
 * with VNNI's vpdpwssd fusing the scale multiply and the accumulate
 * (vpmaddubsw then vpdpwssd, where AVX2 needs vpmaddubsw, vpmaddwd, vpaddd).
 * vpdpbusd does not pay here: every 32 (Q6_K: 16) values carry their own
 * scale, so its 4-byte sums would still need a 32-bit multiply per run.
 *
 * A 512-bit register holds two 32-value runs, one per 256-bit half; which
 * runs share a register does not matter, because the halves are added at
 * the end of the block and int32 lane m (0..7) then holds values 4m..4m+3
 * of every run -- the same integer lanes as the AVX2 kernels and the scalar
 * reference.  The float work after them is the reference's, in its order,
 * so the results equal tq_dot_* bit for bit.
 *
 *   Q4_K qs[0..63], nibbles:  low = runs 0 | 2   high = runs 1 | 3
 *                             (q8 loaded to match, 256 bits per half)
 *   Q6_K ql[0..63], nibbles:  low = runs 0 | 1   high = runs 2 | 3
 *                             (q8 loaded as it is, 512 bits)
 *   Q2_K qs[32h..32h+31], bit pairs 0-1 | 2-3 = runs 4h | 4h+1,
 *                             4-5 | 6-7 = runs 4h+2 | 4h+3 (q8 as it is)
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

/* Sum of 4 int32 lanes (exact). */
static inline int32_t hsum4_i32(__m128i v)
{
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 1));
    return _mm_cvtsi128_si32(v);
}

/* The two 256-bit halves of v added: 8 int32 lanes. */
static inline __m256i fold_halves(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a
 * Q4_K/Q5_K block's 12 packed bytes (layout in tq_kquant.c). */
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

/* Mins against the Q8_K bsums: 4 int32 lanes, lane k covering sub-blocks
 * 2k and 2k+1 (mins are words 8..15 of sm). */
static inline __m128i min_lanes(__m256i sm, const int16_t *bsums)
{
    __m256i b = _mm256_loadu_si256((const __m256i *)bsums);
    __m128i by32 = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), by32);
}

/* vpshufb pattern taking word `lo` into the low 256 bits and word `hi` into
 * the high 256 bits, from a register holding the same 8 words in every 128
 * bits. */
static inline __m512i word_pair(int lo, int hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi16((short)((2 * lo + 1) << 8 | 2 * lo)),
                              _mm256_set1_epi16((short)((2 * hi + 1) << 8 | 2 * hi)), 1);
}

/* Levels of a Q4_K/Q5_K block as runs (0|2), (1|3), (4|6), (5|7): the
 * nibbles of 64 qs bytes as they come. */
static inline void q4_runs(const uint8_t *qs, __m512i r[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    #pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        __m512i bits = _mm512_loadu_si512(qs + 64 * k);
        r[2 * k] = _mm512_and_si512(bits, m4);
        r[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
    }
}

/* Activations of runs j (low half) and j + 2 (high half). */
static inline __m512i q8_runs(const int8_t *a, int j)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 32 * j))),
                              _mm256_loadu_si256((const __m256i *)(a + 32 * j + 64)), 1);
}

/* Integer lanes of one Q4_K/Q5_K block: sum over runs of sc[j] * (q . a).
 * Two accumulators halve the vpdpwssd dependency chain. */
static inline __m256i scaled_runs(const __m512i r[4], __m256i sm, const int8_t *a)
{
    __m512i sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sm));   /* scales: words 0..7 */
    __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
    #pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        int j = 4 * k;   /* r[2k] holds runs j, j+2; r[2k+1] runs j+1, j+3 */
        __m512i p0 = _mm512_maddubs_epi16(r[2 * k], q8_runs(a, j));
        __m512i p1 = _mm512_maddubs_epi16(r[2 * k + 1], q8_runs(a, j + 1));
        acc0 = _mm512_dpwssd_epi32(acc0, p0, _mm512_shuffle_epi8(sc, word_pair(j, j + 2)));
        acc1 = _mm512_dpwssd_epi32(acc1, p1, _mm512_shuffle_epi8(sc, word_pair(j + 1, j + 3)));
    }
    return fold_halves(_mm512_add_epi32(acc0, acc1));
}

/* Whole-block integer totals into two floats (see the AVX2 version). */
static float dot_q4_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q4_K *b = vw;
    const tq_block_q8_K *a = va;
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        __m256i sm = _mm256_cvtepu8_epi16(unpack_scales_mins(b->scales));
        __m512i r[4];
        q4_runs(b->qs, r);
        __m256i sumi = scaled_runs(r, sm, a->qs);
        acc = q4_K_accumulate(acc, _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1)),
                              min_lanes(sm, a->bsums), b, a->d);
    }
    return _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_movehdup_ps(acc));
}

static float dot_q5_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q5_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m512i sixteen = _mm512_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    float sum_min = 0;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * _cvtsh_ss(b->d);
        float dmin = -a->d * _cvtsh_ss(b->dmin);
        __m256i sm = _mm256_cvtepu8_epi16(unpack_scales_mins(b->scales));
        sum_min = fmaf(dmin, (float)hsum4_i32(min_lanes(sm, a->bsums)), sum_min);

        __m512i r[4];
        q4_runs(b->qs, r);
        /* run j's fifth bits are bit j of qh[0..31]: test and add 16; r[k]
         * holds runs j and j + 2 with j = 4 * (k / 2) + k % 2 */
        __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            int j = 4 * (k / 2) + k % 2;
            __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j)),
                                              _mm256_set1_epi8((char)(1 << (j + 2))), 1);
            r[k] = _mm512_mask_add_epi8(r[k], _mm512_test_epi8_mask(h, bits), r[k], sixteen);
        }
        __m256i sumi = scaled_runs(r, sm, a->qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return sum8(acc) + sum_min;
}

static float dot_q6_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q6_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* top bits of runs 0|1 (qh bits 0-1 | 2-3) and runs 2|3 (4-5 | 6-7),
     * masked then shifted per half into bits 4-5 */
    const __m512i mask01 = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0c), 1);
    const __m512i mask23 = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8((char)0xc0), 1);
    const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    /* vpermw indexes: scales 4j..4j+3, each over 8 words (16 values) */
    __m512i idx[4];
    for (int j = 0; j < 4; j++) {
        __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * j))),
                                             _mm_set1_epi16((short)(4 * j + 1)), 1);
        __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * j + 2))),
                                             _mm_set1_epi16((short)(4 * j + 3)), 1);
        idx[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * _cvtsh_ss(b->d);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        /* the levels are used as 0..63; the -32 comes off in one go */
        __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
        __m512i sc = _mm512_castsi256_si512(sc16);

        /* two accumulators halve the vpdpwssd dependency chain */
        __m512i acc01 = _mm512_setzero_si512(), acc23 = _mm512_setzero_si512();
        #pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            __m512i l = _mm512_loadu_si512(b->ql + 64 * half);
            __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * half)));
            __m512i v01 = _mm512_or_si512(_mm512_and_si512(l, m4),
                                          _mm512_sllv_epi16(_mm512_and_si512(h, mask01), shl01));
            __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_srlv_epi16(_mm512_and_si512(h, mask23), shr23));
            const int8_t *q8 = a->qs + 128 * half;
            __m512i p01 = _mm512_maddubs_epi16(v01, _mm512_loadu_si512(q8));
            __m512i p23 = _mm512_maddubs_epi16(v23, _mm512_loadu_si512(q8 + 64));
            acc01 = _mm512_dpwssd_epi32(acc01, p01, _mm512_permutexvar_epi16(idx[2 * half], sc));
            acc23 = _mm512_dpwssd_epi32(acc23, p23, _mm512_permutexvar_epi16(idx[2 * half + 1], sc));
        }
        __m256i lanes = _mm256_sub_epi32(fold_halves(_mm512_add_epi32(acc01, acc23)), offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
    }
    return sum8(acc);
}

/* vpermw indexes taking 16-value scales 4j..4j+3 each over 8 words (16
 * values): the scales of runs 2j (low 256 bits) and 2j + 1 (high). */
static inline __m512i scale_quad(int j)
{
    __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * j))),
                                         _mm_set1_epi16((short)(4 * j + 1)), 1);
    __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * j + 2))),
                                         _mm_set1_epi16((short)(4 * j + 3)), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Runs 2j and 2j + 1 of a Q2_K block as bit pairs of the 32 qs
 * bytes of their half: shifts 4(j % 2) and 4(j % 2) + 2. */
static inline __m512i two_runs_2bit(const uint8_t *qs, int j)
{
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * (j % 2))),
                                             _mm256_set1_epi16((short)(4 * (j % 2) + 2)), 1);
    __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2))));
    return _mm512_and_si512(_mm512_srlv_epi16(bits, shift), _mm512_set1_epi8(3));
}

/* Q2_K: the AVX2 kernel's integer lanes and float steps (see there), two
 * 32-value runs per register. */
static float dot_q2_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q2_K *b = vw;
    const tq_block_q8_K *a = va;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * _cvtsh_ss(b->d);
        float dmin = -a->d * _cvtsh_ss(b->dmin);
        __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        __m256i mins = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)a->bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), acc);

        __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
        #pragma GCC unroll 2
        for (int j = 0; j < 4; j += 2) {
            __m512i p0 = _mm512_maddubs_epi16(two_runs_2bit(b->qs, j), _mm512_loadu_si512(a->qs + 64 * j));
            __m512i p1 = _mm512_maddubs_epi16(two_runs_2bit(b->qs, j + 1), _mm512_loadu_si512(a->qs + 64 * j + 64));
            acc0 = _mm512_dpwssd_epi32(acc0, p0, _mm512_permutexvar_epi16(scale_quad(j), sc));
            acc1 = _mm512_dpwssd_epi32(acc1, p1, _mm512_permutexvar_epi16(scale_quad(j + 1), sc));
        }
        __m256i lanes = fold_halves(_mm512_add_epi32(acc0, acc1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
    }
    return sum8(acc);
}

/* round_nearest() of tq_kquant.c on 16 floats, clamped above at 127: the
 * same bits for every input (see the AVX2 version). */
static inline __m512i round_clamp(__m512 v)
{
    __m512i bits = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12582912.0f)));
    bits = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)),
                            _mm512_set1_epi32(0x00400000));
    return _mm512_min_epi32(bits, _mm512_set1_epi32(127));
}

/*
 * Q8_K, bit-exact with tq_quant_q8_K for every input (see the AVX2
 * version): 16 values per step, narrowed to their low byte (vpmovdb
 * truncates, as C's int8_t conversion does), each step's stored levels
 * summed into its bsum.
 */
static void quantize_q8_K(const float *x, void *vy, int64_t n)
{
    tq_block_q8_K *b = vy;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int l = 0; l < TQ_QK_K; l += 16)   /* max(new, old): a NaN is skipped */
            vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + l)), vmax);
        float apeak = _mm512_reduce_max_ps(vmax);
        if (!apeak) {
            memset(b, 0, sizeof *b);
            continue;
        }
        __m512 vpeak = _mm512_set1_ps(apeak);
        int at = 0;
        for (int l = 0; l < TQ_QK_K; l += 16) {
            __mmask16 k = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + l)), vpeak, _CMP_EQ_OQ);
            if (k) {
                at = l + __builtin_ctz((unsigned)k);
                break;
            }
        }
        float inv = -127.f / x[at];
        __m512 vinv = _mm512_set1_ps(inv);
        for (int g = 0; g < TQ_QK_K / 16; g++) {
            __m128i q = _mm512_cvtepi32_epi8(round_clamp(_mm512_mul_ps(vinv, _mm512_loadu_ps(x + 16 * g))));
            _mm_storeu_si128((__m128i *)(b->qs + 16 * g), q);
            b->bsums[g] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q));
        }
        b->d = 1 / inv;
    }
}

void tk_fill_avx512_kquant(tk_ops *o)
{
    o->vec_dot[TQ_Q2_K] = dot_q2_K;
    o->vec_dot[TQ_Q4_K] = dot_q4_K;
    o->vec_dot[TQ_Q5_K] = dot_q5_K;
    o->vec_dot[TQ_Q6_K] = dot_q6_K;
    o->quantize[TQ_Q8_K] = quantize_q8_K;
}
