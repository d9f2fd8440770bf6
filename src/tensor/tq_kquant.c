/*
 * tq_kquant.c - scalar reference for the 256-value "K" formats: Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K (weights) and Q8_K (activations).
 *
 * LAYOUTS (one super-block = 256 values, see tq.h for the structs)
 *
 *   Q2_K: 16 sub-blocks of 16 values, value = d*sc[j]*q - dmin*mn[j], q
 *   2-bit, sc and mn 4-bit (scales[j] = sc | mn << 4).  Each half of 128
 *   values has 32 qs bytes; its value 32k + l has bits 2k, 2k+1 of qs[l].
 *
 *   Q3_K: 16 sub-blocks of 16 values, value = d*(sc[j] - 32)*(q - 4), q
 *   3-bit: its low 2 bits placed as Q2_K's, its top bit (value v) bit v/32
 *   of hmask[v % 32].  The 6-bit sc[j]: low 4 bits in nibble j/8 of
 *   scales[j % 8], top 2 bits in bits 2(j/4) of scales[8 + j % 4].
 *
 *   Q4_K / Q5_K: 8 sub-blocks of 32 values, value = d*sc[j]*q - dmin*mn[j],
 *   q unsigned (4 or 5 bits), sc/mn unsigned 6-bit, packed in 12 bytes:
 *
 *     byte  0..3 : sc[0..3] in bits 0-5, top 2 bits of sc[4..7] in bits 6-7
 *     byte  4..7 : mn[0..3] in bits 0-5, top 2 bits of mn[4..7] in bits 6-7
 *     byte  8..11: low 4 bits of sc[4..7] | low 4 bits of mn[4..7] << 4
 *
 *   qs holds 64 values per 32 bytes: byte l of the k-th 32-byte run has value
 *   64k + l in its low nibble and 64k + 32 + l in its high nibble.  Q5_K's
 *   fifth bit of value 32j + l is bit j of qh[l].
 *
 *   Q6_K: 16 sub-blocks of 16 values, value = d*sc[j]*(q - 32), sc signed
 *   8-bit, q 6-bit.  Each half of 128 values has 64 ql and 32 qh bytes; its
 *   value 32k + l (k = 0..3, l = 0..31) has its low 4 bits in
 *
 *       k = 0: ql[l] & 15     k = 1: ql[l + 32] & 15
 *       k = 2: ql[l] >> 4     k = 3: ql[l + 32] >> 4
 *
 *   and its top 2 bits in bits 2k, 2k+1 of qh[l].
 *
 *   Q8_K: 256 int8 with one float d (value = d*q) and the sums of each 16
 *   consecutive q, so a weight format's min term needs no pass over q.
 *
 * NUMERICS
 *
 * The weight quantizers follow the reference engine's quantizers without
 * importance weights operation for operation (same search grid, same float
 * evaluation order, same rounding trick), so a file they write holds the
 * same bytes.  That only holds if the compiler neither reorders nor fuses
 * float operations: this file relies on ISO C mode (-std=c11 gives
 * -ffp-contract=off in gcc) and no -ffast-math.
 *
 * The dot products reproduce, bit for bit, what the reference engine
 * computes on x86 CPUs with AVX2 by default (not its portable C fallback):
 *
 *   Q2_K, Q3_K: its row-by-row kernels, 8 int32 lanes as for Q5_K below
 *     (each 32-value run has two 16-value scales: lanes 0-3 take the first,
 *     4-7 the second), one fused multiply-add per lane per block (Q2_K's
 *     mins, as 8 lanes of bsum pairs, one before it).  The reference
 *     repacks Q2_K matrices 8 rows at a time on AVX-512 CPUs, and rounds
 *     differently in the last bits there.
 *
 *   Q5_K, Q6_K: its row-by-row kernels.  A super-block's integer products
 *     are gathered into 8 int32 "lanes" (lane m holds values 4m..4m+3 of
 *     every 32-value run, which is how 256-bit multiply-add instructions
 *     group them); each lane is converted to float and fused-multiply-added
 *     into its own accumulator; the 8 accumulators are summed at the end
 *     as ((0+4) + (2+6)) + ((1+5) + (3+7)).
 *   Q4_K: its kernels for weights repacked 8 rows at a time, which it uses
 *     for every Q4_K matrix whose row count is a multiple of 8.  Each
 *     super-block's scaled and min integer totals are fused-multiply-added
 *     into two floats (scale d_w * d_a, and dmin_w * d_a); the result is
 *     their difference.  (Its row-by-row Q4_K kernel, used when repacking
 *     is off, rounds differently in the last bits.)
 *
 * The SIMD kernels in tk_kquant_*.c keep the same integer groups and float
 * order, so every ISA gives the same bits, not just results within tk.h's
 * budget.
 */
#include "tq_impl.h"

#include <math.h>
#include <string.h>

/* Scale and min j (0..7) of a Q4_K/Q5_K super-block's 12 packed bytes. */
static inline void unpack_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void pack_scale_min(uint8_t *s, int j, uint8_t sc, uint8_t mn)
{
    if (j < 4) {
        s[j] = sc;
        s[j + 4] = mn;
    } else {   /* bytes j-4 and j were written whole for j-4 */
        s[j + 4] = (uint8_t)((sc & 0x0f) | ((mn & 0x0f) << 4));
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((mn >> 4) << 6);
    }
}

/* ---- quantizer search -------------------------------------------------- */

/*
 * Fits x[0..n) ~ scale * L - min with L in 0..nmax, scale >= 0, min >= 0
 * (the returned *neg_min is the positive offset subtracted), minimising the
 * weighted squared error (mad: the weighted absolute error).  Starts from the min/max grid and tries nstep + 1
 * stretched grids (nmax + rmin + rdelta*is levels over the range), solving
 * the 2x2 least-squares system for each.  L gets the best levels.
 */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, float rmin, float rdelta, int nstep, bool mad)
{
    uint8_t trial[32];
    float lo = x[0], hi = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float inv = nmax / (hi - lo);
    float scale = 1 / inv;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        int l = tq_round_nearest(inv * (x[i] - lo));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + lo - x[i];
        best_err += w[i] * (mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        inv = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = tq_round_nearest(inv * (x[i] - lo));
            l = MAX(0, MIN(nmax, l));
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;
        float t_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float t_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (t_min > 0) {   /* the offset may only lower values */
            t_min = 0;
            t_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = t_scale * trial[i] + t_min - x[i];
            err += w[i] * (mad ? fabsf(diff) : diff * diff);
        }
        if (err < best_err) {
            memcpy(L, trial, (size_t)n);
            best_err = err;
            scale = t_scale;
            lo = t_min;
        }
    }
    *neg_min = -lo;
    return scale;
}

/*
 * Fits x[0..n) ~ scale * (L - nmax) with L - nmax in -nmax..nmax-1, weights
 * x^2 (large values matter most).  The scale's sign follows the value of
 * largest magnitude so that value maps to -nmax, which has no positive twin.
 * Tries 18 grids around nmax levels and keeps the best by the closed-form
 * error.  Returns the scale (0 when the group is all zero, L then 0).
 */
static float fit_scale_signed(int n, int nmax, const float *x, int8_t *L)
{
    float peak = 0, apeak = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > apeak) { apeak = ax; peak = x[i]; }
    }
    if (apeak < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float inv = -nmax / peak;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        int l = tq_round_nearest(inv * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sum_lx += w * x[i] * l;
        sum_l2 += w * l * l;
    }
    float scale = sum_l2 ? sum_lx / sum_l2 : 0.0f;
    float best = scale * sum_lx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        inv = -(nmax + 0.1f * is) / peak;
        sum_lx = sum_l2 = 0;
        for (int i = 0; i < n; i++) {
            int l = tq_round_nearest(inv * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sum_lx += w * x[i] * l;
            sum_l2 += w * l * l;
        }
        /* sum_lx^2 / sum_l2 is the error reduction of this grid's best scale */
        if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
            for (int i = 0; i < n; i++) {
                int l = tq_round_nearest(inv * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sum_lx / sum_l2;
            best = scale * sum_lx;
        }
    }
    return scale;
}

/*
 * The shared half of the Q4_K and Q5_K quantizers: fits each 32-value
 * sub-block (weights |x| + rms, so small values still count), quantizes the
 * 8 scales and 8 mins to 6 bits against the largest of each, stores d, dmin
 * and the packed bytes, then requantizes x with the stored (rounded) scales.
 * L receives levels 0..nmax; a sub-block whose stored scale is 0 keeps the
 * levels of its fit.
 */
static void quant_scale_min_block(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                                  tq_f16 *d_out, tq_f16 *dmin_out, uint8_t *packed)
{
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = rms + fabsf(xj[l]);
        scales[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        /* through uint8_t first: a negative fit wraps and then clamps to 63,
         * as the reference does */
        uint8_t ls = (uint8_t)tq_round_nearest(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)tq_round_nearest(inv_min * mins[j]);
        pack_scale_min(packed, j, MIN(63, ls), MIN(63, lm));
    }
    *d_out = tq_f32_to_f16(max_scale / 63.f);
    *dmin_out = tq_f32_to_f16(max_min / 63.f);

    float d_all = tq_f16_to_f32(*d_out), dmin_all = tq_f16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        unpack_scale_min(packed, j, &sc, &mn);
        float d = d_all * sc;
        if (!d) continue;
        float dm = dmin_all * mn;
        for (int l = 0; l < 32; l++) {
            int q = tq_round_nearest((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)MAX(0, MIN(nmax, q));
        }
    }
}

/* ---- Q2_K -------------------------------------------------------------- */

/* Level (0..3) of value v of a Q2_K block: in each half of 128 values,
 * value 32k + l is bits 2k, 2k+1 of qs[32 * half + l]. */
static inline int q2_level(const tq_block_q2_K *b, int v)
{
    return (b->qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
}

void tq_dequant_q2_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q2_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d), dmin = tq_f16_to_f32(b->dmin);
        for (int j = 0; j < 16; j++) {
            float dl = d * (b->scales[j] & 0xf), ml = dmin * (b->scales[j] >> 4);
            for (int l = 0; l < 16; l++) *y++ = dl * q2_level(b, 16 * j + l) - ml;
        }
    }
}

/* Packs levels 0..3 (Q3_K: their low 2 bits) of 256 values into qs. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int half = 0; half < 2; half++) {
        const uint8_t *Lh = L + 128 * half;
        for (int l = 0; l < 32; l++)
            qs[32 * half + l] = (uint8_t)((Lh[l] & 3) | (Lh[l + 32] & 3) << 2 | (Lh[l + 64] & 3) << 4 |
                                          (Lh[l + 96] & 3) << 6);
    }
}

/*
 * Each 16-value group is fitted as scale * L - min with the absolute error
 * weighted by |x| (the reference's choice for 2 bits, where a squared error
 * lets large values pull every level), then scales and mins are quantized
 * to 4 bits against the largest of each and the values requantized with
 * the stored ones.
 */
void tq_quant_q2_K(const float *x, void *vy, int64_t n)
{
    tq_block_q2_K *b = vy;
    uint8_t L[TQ_QK_K];
    float w[16], scales[16], mins[16];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(b->scales, 0, sizeof b->scales);
        b->d = b->dmin = tq_f32_to_f16(0.0f);
        if (max_scale > 0) {
            float inv = 15.f / max_scale;
            for (int j = 0; j < 16; j++) b->scales[j] = (uint8_t)tq_round_nearest(inv * scales[j]);
            b->d = tq_f32_to_f16(max_scale / 15.f);
        }
        if (max_min > 0) {
            float inv = 15.f / max_min;
            for (int j = 0; j < 16; j++) b->scales[j] |= (uint8_t)(tq_round_nearest(inv * mins[j]) << 4);
            b->dmin = tq_f32_to_f16(max_min / 15.f);
        }
        for (int j = 0; j < 16; j++) {
            float d = tq_f16_to_f32(b->d) * (b->scales[j] & 0xf);
            if (!d) continue;
            float dm = tq_f16_to_f32(b->dmin) * (b->scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                int q = tq_round_nearest((x[16 * j + l] + dm) / d);
                L[16 * j + l] = (uint8_t)MAX(0, MIN(3, q));
            }
        }
        pack_2bit(L, b->qs);
    }
}

/* ---- Q3_K -------------------------------------------------------------- */

/* Scale j (0..15) of a Q3_K block, -32..31: its low 4 bits are nibble
 * j / 8 of byte j % 8, its top 2 bits bits 2(j / 4) of byte 8 + j % 4. */
static inline int q3_scale(const uint8_t *s, int j)
{
    int lo = (s[j % 8] >> (4 * (j / 8))) & 0xf, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Level (-4..3) of value v: the Q2_K position's 2 bits, minus 4 unless bit
 * v / 32 of hmask[v % 32] is set. */
static inline int q3_level(const tq_block_q3_K *b, int v)
{
    int lo = (b->qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
    return lo - ((b->hmask[v % 32] >> (v / 32)) & 1 ? 0 : 4);
}

void tq_dequant_q3_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q3_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d);
        for (int j = 0; j < 16; j++) {
            float dl = d * q3_scale(b->scales, j);
            for (int l = 0; l < 16; l++) *y++ = dl * q3_level(b, 16 * j + l);
        }
    }
}

/*
 * Fits x[0..n) ~ scale * (L - nmax), L - nmax in -nmax..nmax-1, weights x^2:
 * from the grid that maps the value of largest magnitude to -nmax, up to 5
 * sweeps move single levels to where they best fit the others while that
 * lowers the error (sum_lx^2 / sum_l2 grows).  Returns the scale.
 */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L)
{
    float peak = 0, apeak = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > apeak) { apeak = ax; peak = x[i]; }
    }
    if (apeak < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float inv = -nmax / peak, sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        int l = MAX(-nmax, MIN(nmax - 1, tq_round_nearest(inv * x[i])));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sum_lx += w * x[i] * l;
        sum_l2 += w * l * l;
    }
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sum_lx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = sum_l2 - w * L[i] * L[i];
            int l = MAX(-nmax, MIN(nmax - 1, tq_round_nearest(x[i] * sl2 / slx)));
            if (l == L[i]) continue;
            slx += w * x[i] * l;
            sl2 += w * l * l;
            if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
                L[i] = (int8_t)l;
                sum_lx = slx;
                sum_l2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sum_l2 > 0 ? sum_lx / sum_l2 : 0.0f;
}

/* Sixteen signed scales to 6 bits against the one of largest magnitude
 * (which takes -32), then the values requantized with the stored scales. */
void tq_quant_q3_K(const float *x, void *vy, int64_t n)
{
    tq_block_q3_K *b = vy;
    int8_t L[TQ_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(b->scales, 0, sizeof b->scales);
        b->d = tq_f32_to_f16(0.0f);
        if (max_scale) {
            float inv = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = MAX(-32, MIN(31, (int8_t)tq_round_nearest(inv * scales[j]))) + 32;
                b->scales[j % 8] |= (uint8_t)((l & 0xf) << (4 * (j / 8)));
                b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b->d = tq_f32_to_f16(1 / inv);
        }
        for (int j = 0; j < 16; j++) {
            float d = tq_f16_to_f32(b->d) * q3_scale(b->scales, j);
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                int q = tq_round_nearest(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)(MAX(-4, MIN(3, q)) + 4);
            }
        }
        memset(b->hmask, 0, sizeof b->hmask);
        uint8_t low[TQ_QK_K];
        for (int v = 0; v < TQ_QK_K; v++) {
            if (L[v] > 3) b->hmask[v % 32] |= (uint8_t)(1 << (v / 32));
            low[v] = (uint8_t)(L[v] & 3);
        }
        pack_2bit(low, b->qs);
    }
}

/* ---- Q4_K -------------------------------------------------------------- */

void tq_dequant_q4_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q4_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d), dmin = tq_f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, mn;
            unpack_scale_min(b->scales, j, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            unpack_scale_min(b->scales, j + 1, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void tq_quant_q4_K(const float *x, void *vy, int64_t n)
{
    tq_block_q4_K *b = vy;
    uint8_t L[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        quant_scale_min_block(x, 15, -1.0f, 20, L, &b->d, &b->dmin, b->scales);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * k + l] = (uint8_t)(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
    }
}

/* ---- Q5_K -------------------------------------------------------------- */

void tq_dequant_q5_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q5_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d), dmin = tq_f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, mn;
            unpack_scale_min(b->scales, j, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            unpack_scale_min(b->scales, j + 1, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((q[l] & 0xf) + ((b->qh[l] >> j) & 1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((q[l] >> 4) + ((b->qh[l] >> (j + 1)) & 1 ? 16 : 0)) - m2;
        }
    }
}

void tq_quant_q5_K(const float *x, void *vy, int64_t n)
{
    tq_block_q5_K *b = vy;
    uint8_t L[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        quant_scale_min_block(x, 31, -0.5f, 15, L, &b->d, &b->dmin, b->scales);
        memset(b->qh, 0, sizeof b->qh);
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * k + l], hi = L[64 * k + 32 + l];
                b->qs[32 * k + l] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
                b->qh[l] |= (uint8_t)(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
            }
        }
    }
}

/* ---- Q6_K -------------------------------------------------------------- */

/* The 6-bit level (0..63) of value v (0..255) of a Q6_K block. */
static inline int q6_level(const tq_block_q6_K *b, int v)
{
    int half = v / 128, k = (v % 128) / 32, l = v % 32;
    uint8_t lo = b->ql[64 * half + l + 32 * (k & 1)];
    uint8_t hi = b->qh[32 * half + l];
    return ((k < 2 ? lo & 0xf : lo >> 4) | (((hi >> (2 * k)) & 3) << 4));
}

void tq_dequant_q6_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q6_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d);
        for (int v = 0; v < TQ_QK_K; v++)
            *y++ = d * b->scales[v / 16] * (q6_level(b, v) - 32);
    }
}

void tq_quant_q6_K(const float *x, void *vy, int64_t n)
{
    tq_block_q6_K *b = vy;
    int8_t L[TQ_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_signed(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < 1e-15f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        /* -128 like the groups' own fit: the largest scale takes the level
         * without a positive twin */
        float inv = -128.f / max_scale;
        b->d = tq_f32_to_f16(1 / inv);
        for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)MIN(127, tq_round_nearest(inv * scales[j]));
        for (int j = 0; j < 16; j++) {
            float d = tq_f16_to_f32(b->d) * b->scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                int q = tq_round_nearest(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)(MAX(-32, MIN(31, q)) + 32);
            }
        }
        for (int half = 0; half < 2; half++) {
            const int8_t *Lh = L + 128 * half;
            uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
            for (int l = 0; l < 32; l++) {
                int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
                ql[l] = (uint8_t)((q0 & 0xf) | ((q2 & 0xf) << 4));
                ql[l + 32] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
                qh[l] = (uint8_t)((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
            }
        }
    }
}

/* ---- Q8_K -------------------------------------------------------------- */

void tq_dequant_q8_K(const void *vx, float *y, int64_t n)
{
    const tq_block_q8_K *b = vx;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++)
        for (int l = 0; l < TQ_QK_K; l++) *y++ = b->d * b->qs[l];
}

/*
 * d = -max/127 where max is the first value of largest magnitude, so that
 * value becomes -127 (a negative d when it is positive); q = round(x / d)
 * computed as x * (-127 / max).  An all-zero block gets d = 0, q = 0,
 * bsums = 0 (the reference engine leaves its bsums unwritten).
 */
void tq_quant_q8_K(const float *x, void *vy, int64_t n)
{
    tq_block_q8_K *b = vy;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        float peak = 0, apeak = 0;
        for (int l = 0; l < TQ_QK_K; l++) {
            float ax = fabsf(x[l]);
            if (ax > apeak) { apeak = ax; peak = x[l]; }
        }
        if (!apeak) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float inv = -127.f / peak;
        for (int l = 0; l < TQ_QK_K; l++) b->qs[l] = (int8_t)MIN(127, tq_round_nearest(inv * x[l]));
        for (int g = 0; g < TQ_QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b->qs[16 * g + l];
            b->bsums[g] = (int16_t)sum;
        }
        b->d = 1 / inv;
    }
}

/* ---- dot products ------------------------------------------------------ */

/* The levels (0..15) of a Q4_K block's qs, in value order. */
static void q4_levels(const uint8_t *qs, int8_t q[TQ_QK_K])
{
    for (int k = 0; k < 4; k++) {
        for (int l = 0; l < 32; l++) {
            q[64 * k + l] = (int8_t)(qs[32 * k + l] & 0xf);
            q[64 * k + 32 + l] = (int8_t)(qs[32 * k + l] >> 4);
        }
    }
}

/*
 * The integer part of a Q4_K/Q5_K block against a Q8_K block: lane[8] as
 * above, and the mins' 4 lanes, min_lane[k] = the sum over sub-blocks 2k and
 * 2k+1 of mn[j] * (bsum[2j] + bsum[2j+1]).
 */
static void scale_min_lanes(const int8_t q[TQ_QK_K], const uint8_t *packed,
                            const tq_block_q8_K *a, int32_t lane[8], int32_t min_lane[4])
{
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) unpack_scale_min(packed, j, &sc[j], &mn[j]);
    memset(lane, 0, 8 * sizeof *lane);
    for (int j = 0; j < 8; j++) tq_run_lanes(lane, sc[j], sc[j], q + 32 * j, a->qs + 32 * j);
    for (int k = 0; k < 4; k++)
        min_lane[k] = mn[2 * k] * (a->bsums[4 * k] + a->bsums[4 * k + 1]) +
                      mn[2 * k + 1] * (a->bsums[4 * k + 2] + a->bsums[4 * k + 3]);
}

/* Whole-block integer totals, two float accumulators (see NUMERICS). */
float tq_dot_q4_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q4_K *b = vw;
    const tq_block_q8_K *a = va;
    float acc = 0, acc_min = 0;
    int8_t q[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        int32_t lane[8], min_lane[4];
        q4_levels(b->qs, q);
        scale_min_lanes(q, b->scales, a, lane, min_lane);
        int32_t total = 0, total_min = 0;
        for (int m = 0; m < 8; m++) total += lane[m];
        for (int k = 0; k < 4; k++) total_min += min_lane[k];
        acc = fmaf((float)total, tq_f16_to_f32(b->d) * a->d, acc);
        acc_min = fmaf((float)total_min, tq_f16_to_f32(b->dmin) * a->d, acc_min);
    }
    return acc - acc_min;
}

/* 8 float lanes; the mins' integer total goes into one float per block. */
float tq_dot_q5_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q5_K *b = vw;
    const tq_block_q8_K *a = va;
    float acc[8] = {0}, sum_min = 0;
    int8_t q[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        int32_t lane[8], min_lane[4];
        q4_levels(b->qs, q);
        for (int v = 0; v < TQ_QK_K; v++) q[v] |= (int8_t)(((b->qh[v % 32] >> (v / 32)) & 1) << 4);
        scale_min_lanes(q, b->scales, a, lane, min_lane);
        float d = a->d * tq_f16_to_f32(b->d);
        float dmin = -a->d * tq_f16_to_f32(b->dmin);
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
        int32_t total = min_lane[0] + min_lane[1] + min_lane[2] + min_lane[3];
        sum_min = fmaf(dmin, (float)total, sum_min);
    }
    return tq_sum_lanes(acc) + sum_min;
}

/*
 * Q6_K: levels are used unsigned (0..63) and the offset of 32 comes off per
 * lane as 32 * (sc[2m] * bsum[2m] + sc[2m+1] * bsum[2m+1]).
 */
float tq_dot_q6_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q6_K *b = vw;
    const tq_block_q8_K *a = va;
    float acc[8] = {0};
    int8_t q[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        for (int v = 0; v < TQ_QK_K; v++) q[v] = (int8_t)q6_level(b, v);
        int32_t lane[8] = {0};
        for (int g = 0; g < 8; g++)
            tq_run_lanes(lane, b->scales[2 * g], b->scales[2 * g + 1], q + 32 * g, a->qs + 32 * g);
        float d = a->d * tq_f16_to_f32(b->d);
        for (int m = 0; m < 8; m++) {
            int32_t offset = 32 * (b->scales[2 * m] * a->bsums[2 * m] +
                                   b->scales[2 * m + 1] * a->bsums[2 * m + 1]);
            acc[m] = fmaf(d, (float)(lane[m] - offset), acc[m]);
        }
    }
    return tq_sum_lanes(acc);
}

/*
 * Q2_K: 8 float lanes; each block first adds its mins (lane m: mn[2m] *
 * bsum[2m] + mn[2m+1] * bsum[2m+1], times -dmin * d_a), then its scaled
 * levels (times d * d_a), two fused multiply-adds per lane per block.
 */
float tq_dot_q2_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q2_K *b = vw;
    const tq_block_q8_K *a = va;
    float acc[8] = {0};
    int8_t q[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * tq_f16_to_f32(b->d);
        float dmin = -a->d * tq_f16_to_f32(b->dmin);
        for (int m = 0; m < 8; m++) {
            int32_t mins = (b->scales[2 * m] >> 4) * a->bsums[2 * m] + (b->scales[2 * m + 1] >> 4) * a->bsums[2 * m + 1];
            acc[m] = fmaf(dmin, (float)mins, acc[m]);
        }
        for (int v = 0; v < TQ_QK_K; v++) q[v] = (int8_t)q2_level(b, v);
        int32_t lane[8] = {0};
        for (int g = 0; g < 8; g++)
            tq_run_lanes(lane, b->scales[2 * g] & 0xf, b->scales[2 * g + 1] & 0xf, q + 32 * g, a->qs + 32 * g);
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
    }
    return tq_sum_lanes(acc);
}

/* Q3_K: signed levels and scales, 8 float lanes like Q6_K's. */
float tq_dot_q3_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q3_K *b = vw;
    const tq_block_q8_K *a = va;
    float acc[8] = {0};
    int8_t q[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        float d = a->d * tq_f16_to_f32(b->d);
        for (int v = 0; v < TQ_QK_K; v++) q[v] = (int8_t)q3_level(b, v);
        int32_t lane[8] = {0};
        for (int g = 0; g < 8; g++)
            tq_run_lanes(lane, q3_scale(b->scales, 2 * g), q3_scale(b->scales, 2 * g + 1), q + 32 * g,
                         a->qs + 32 * g);
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
    }
    return tq_sum_lanes(acc);
}

/* Q8_K is only an activation type; a Q8_K . Q8_K dot is given for
 * completeness (d * d * integer dot per block, summed in order). */
float tq_dot_q8_K(int64_t n, const void *vw, const void *va)
{
    const tq_block_q8_K *w = vw, *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / TQ_QK_K; i++) {
        int32_t s = 0;
        for (int l = 0; l < TQ_QK_K; l++) s += w[i].qs[l] * a[i].qs[l];
        sum += w[i].d * a[i].d * (float)s;
    }
    return sum;
}
