/*
 * tq_iquant.c - scalar reference for the non-linear 4-bit formats IQ4_NL
 * (32-value blocks, multiplied against Q8_0), IQ4_XS (256-value
 * super-blocks, against Q8_K) and MXFP4 (32-value blocks, against Q8_0).
 *
 * LAYOUTS (structs in tq.h)
 *
 *   A level is a 4-bit index into tq_iq4nl_values, 16 int8 values spaced
 *   closer near zero, where weights are dense.  A 32-value group keeps its
 *   levels as Q4_0 does: byte l of its 16 holds value l in the low nibble
 *   and value 16 + l in the high one.
 *
 *   IQ4_NL: one group, value = d * table[level].
 *   IQ4_XS: 8 groups, value = d * (ls[j] - 32) * table[level], ls 6-bit:
 *   low 4 bits in nibble j % 2 of scales_l[j / 2], top 2 bits in bits 2j,
 *   2j+1 of scales_h.
 *   MXFP4: one group, value = 2^(e - 128) * tq_mxfp4_values[level], the
 *   E2M1 values doubled (0, 1, 2, 3, 4, 6, 8, 12 and their negatives) so
 *   they are integers; e 255 is an ordinary scale here, as in the
 *   reference engine (the OCP format reserves it for NaN).
 *
 * NUMERICS
 *
 * The quantizer follows the reference engine's (as its quantize tool runs
 * it without an importance matrix: weights x^2, 7 trial grids either side),
 * so a file it writes holds the same bytes; like tq_kquant.c it relies on
 * -std=c11's -ffp-contract=off.
 *
 * The dot products give the bits of the reference's row-by-row AVX2
 * kernels: IQ4_NL sums each block's 8 int32 lanes (lane m: values 4m..4m+3
 * of each 16-value half) into one of two sets of 8 float lanes, even blocks
 * into the first, odd ones into the second, by a fused multiply-add of
 * d_w * d_a; the two sets are added lane by lane and summed in tq_sum_lanes'
 * order; a last odd block is added to that sum alone, d_w * d_a * total
 * rounded twice (no fused multiply-add).  IQ4_XS keeps 8 int32
 * lanes per super-block (each group's lanes times its scale) and one set of
 * float lanes.  (The reference repacks IQ4_NL matrices whose row count is a
 * multiple of 8, 8 rows at a time, on AVX2 CPUs; that kernel rounds
 * differently in the last bits; it does the same with MXFP4.)  MXFP4's
 * dot is IQ4_NL's with the scale product d_a * 2^(e - 128), its last odd
 * block added as that product times the total (one rounding each).
 *
 * MXFP4's quantizer is the reference's: the scale exponent from
 * floor(log2(max |x|)) - 2 (libm's log2f, as the reference calls it, so a
 * maximum just under a power of two lands where the reference's does),
 * then each value to the nearest table entry, the lower index on a tie.
 */
#include "tq_impl.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

const int8_t tq_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Index of the table value nearest v (the upper one on a tie). */
static int nearest_level(float v)
{
    const int8_t *t = tq_iq4nl_values;
    if (v <= t[0]) return 0;
    if (v >= t[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < t[mid]) hi = mid;
        else lo = mid;
    }
    return v - t[lo] < t[hi] - v ? lo : hi;
}

const int8_t tq_mxfp4_values[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

/* The values of one 32-value group of levels in qs, in value order. */
static void table_values(const int8_t *table, const uint8_t *qs, int8_t v[32])
{
    for (int l = 0; l < 16; l++) {
        v[l] = table[qs[l] & 0xf];
        v[16 + l] = table[qs[l] >> 4];
    }
}

static void group_values(const uint8_t *qs, int8_t v[32])
{
    table_values(tq_iq4nl_values, qs, v);
}

/*
 * Fits a 32-value group x as d * table[L], weights x^2: the grid that maps
 * the value of largest magnitude to the table's end, then 2 * ntry + 1
 * stretched grids, each solved for its best d; the best d is returned (L
 * is the first grid's levels, requantized by the caller with its stored
 * scale).  0 for an all-zero group.
 */
static float fit_group(const float *x, int ntry, uint8_t L[32])
{
    const int8_t *t = tq_iq4nl_values;
    float amax = 0, peak = 0;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            peak = x[j];
        }
    }
    if (amax < 1e-15f) return 0.0f;
    float d = ntry > 0 ? -peak / t[0] : peak / t[0];
    float id = 1 / d, sum_qx = 0, sum_q2 = 0;
    for (int j = 0; j < 32; j++) {
        L[j] = (uint8_t)nearest_level(id * x[j]);
        float q = t[L[j]], w = x[j] * x[j];
        sum_qx += w * q * x[j];
        sum_q2 += w * q * q;
    }
    d = sum_q2 > 0 ? sum_qx / sum_q2 : 0.0f;
    float best = d * sum_qx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        id = (itry + t[0]) / peak;
        sum_qx = sum_q2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = t[nearest_level(id * x[j])], w = x[j] * x[j];
            sum_qx += w * q * x[j];
            sum_q2 += w * q * q;
        }
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
            d = sum_qx / sum_q2;
            best = d * sum_qx;
        }
    }
    return d;
}

static void pack_group(const uint8_t L[32], uint8_t qs[16])
{
    for (int l = 0; l < 16; l++) qs[l] = (uint8_t)(L[l] | L[16 + l] << 4);
}

/* ---- IQ4_NL ------------------------------------------------------------- */

void tq_dequant_iq4_nl(const void *vx, float *y, int64_t n)
{
    const tq_block_iq4_nl *b = vx;
    int8_t v[32];
    for (int64_t i = 0; i < n / TQ_QK4_NL; i++, b++) {
        float d = tq_f16_to_f32(b->d);
        group_values(b->qs, v);
        for (int l = 0; l < 32; l++) *y++ = d * v[l];
    }
}

/* The block's own fit is its scale; levels are refitted to the stored d. */
void tq_quant_iq4_nl(const float *x, void *vy, int64_t n)
{
    tq_block_iq4_nl *b = vy;
    uint8_t L[32];
    for (int64_t i = 0; i < n / TQ_QK4_NL; i++, b++, x += TQ_QK4_NL) {
        float d = fit_group(x, 7, L);
        b->d = tq_f32_to_f16(d);
        float id = d ? 1 / d : 0.0f;   /* an all-zero block: every level at the table's 1 */
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_level(id * x[j]);
        pack_group(L, b->qs);
    }
}

/* 8 int32 lanes of one group: lane m = values 4m..4m+3 of each half. */
static void group_lanes(const int8_t v[32], const int8_t *a, int32_t sc, int32_t lane[8])
{
    for (int m = 0; m < 8; m++) {
        int32_t s = 0;
        for (int t = 0; t < 4; t++) s += v[4 * m + t] * a[4 * m + t];
        lane[m] += sc * s;
    }
}

/* The float scale of 32-value block i of a row times its activation
 * block's (d_w * d_a). */
typedef float (*block_scale_fn)(const void *w, int64_t i, const tq_block_q8_0 *a);

/*
 * The dot of n / 32 blocks of bsize bytes at w, each with its 16 level
 * bytes at qs_off and values from `table`, with Q8_0 blocks, in the
 * reference's AVX2 order (top of file); a last odd block adds its scale
 * times its total.
 */
static float dot_groups32(int64_t n, const int8_t *table, const void *w, size_t bsize, size_t qs_off,
                          block_scale_fn scale, const tq_block_q8_0 *a)
{
    int64_t nb = n / 32, ib = 0;
    float acc[2][8] = {{0}};
    int8_t v[32];
    for (; ib + 1 < nb; ib += 2) {
        for (int k = 0; k < 2; k++) {
            int32_t lane[8] = {0};
            table_values(table, (const uint8_t *)w + (size_t)(ib + k) * bsize + qs_off, v);
            group_lanes(v, a[ib + k].qs, 1, lane);
            float d = scale(w, ib + k, a);
            for (int m = 0; m < 8; m++) acc[k][m] = fmaf(d, (float)lane[m], acc[k][m]);
        }
    }
    float sum[8];
    for (int m = 0; m < 8; m++) sum[m] = acc[0][m] + acc[1][m];
    float total = tq_sum_lanes(sum);
    if (ib < nb) {
        int32_t s = 0;
        table_values(table, (const uint8_t *)w + (size_t)ib * bsize + qs_off, v);
        for (int l = 0; l < 32; l++) s += v[l] * a[ib].qs[l];
        total += scale(w, ib, a) * (float)s;
    }
    return total;
}

/* The reference rounds d_a * d_w first: the same float either way. */
static float iq4_nl_scale(const void *w, int64_t i, const tq_block_q8_0 *a)
{
    return tq_f16_to_f32(a[i].d) * tq_f16_to_f32(((const tq_block_iq4_nl *)w)[i].d);
}

float tq_dot_iq4_nl(int64_t n, const void *w, const void *a)
{
    return dot_groups32(n, tq_iq4nl_values, w, sizeof(tq_block_iq4_nl), offsetof(tq_block_iq4_nl, qs),
                        iq4_nl_scale, a);
}

/* ---- IQ4_XS ------------------------------------------------------------- */

static inline int xs_scale(const tq_block_iq4_xs *b, int j)
{
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xf) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

void tq_dequant_iq4_xs(const void *vx, float *y, int64_t n)
{
    const tq_block_iq4_xs *b = vx;
    int8_t v[32];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++) {
        float d = tq_f16_to_f32(b->d);
        for (int j = 0; j < 8; j++) {
            float dl = d * xs_scale(b, j);
            group_values(b->qs + 16 * j, v);
            for (int l = 0; l < 32; l++) *y++ = dl * v[l];
        }
    }
}

/* Each group's fit, then the 8 scales to 6 bits against the one of largest
 * magnitude (which takes -32), then levels refitted to the stored scales. */
void tq_quant_iq4_xs(const float *x, void *vy, int64_t n)
{
    tq_block_iq4_xs *b = vy;
    uint8_t L[TQ_QK_K];
    float scales[8];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, x += TQ_QK_K) {
        memset(L, 0, sizeof L);
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 8; j++) {
            scales[j] = fit_group(x + 32 * j, 7, L + 32 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        float d = -max_scale / 32;
        b->d = tq_f32_to_f16(d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        float id = d ? 1 / d : 0.0f;
        for (int j = 0; j < 8; j++) {
            int l = MAX(-32, MIN(31, tq_round_nearest(id * scales[j])));
            float dl = d * l, idl = dl ? 1 / dl : 0.0f;
            for (int k = 0; k < 32; k++) L[32 * j + k] = (uint8_t)nearest_level(idl * x[32 * j + k]);
            l += 32;
            b->scales_l[j / 2] |= (uint8_t)((l & 0xf) << (4 * (j % 2)));
            b->scales_h |= (uint16_t)((l >> 4) << (2 * j));
        }
        for (int j = 0; j < 8; j++) pack_group(L + 32 * j, b->qs + 16 * j);
    }
}

float tq_dot_iq4_xs(int64_t n, const void *vw, const void *va)
{
    const tq_block_iq4_xs *b = vw;
    const tq_block_q8_K *a = va;
    float acc[8] = {0};
    int8_t v[32];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, b++, a++) {
        int32_t lane[8] = {0};
        for (int j = 0; j < 8; j++) {
            group_values(b->qs + 16 * j, v);
            group_lanes(v, a->qs + 32 * j, xs_scale(b, j), lane);
        }
        float d = tq_f16_to_f32(b->d) * a->d;
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
    }
    return tq_sum_lanes(acc);
}

/* ---- MXFP4 -------------------------------------------------------------- */

void tq_dequant_mxfp4(const void *vx, float *y, int64_t n)
{
    const tq_block_mxfp4 *b = vx;
    int8_t v[32];
    for (int64_t i = 0; i < n / TQ_QK_MXFP4; i++, b++) {
        float d = tq_e8m0_half(b->e);
        table_values(tq_mxfp4_values, b->qs, v);
        for (int l = 0; l < 32; l++) *y++ = v[l] * d;
    }
}

/* The first table index whose value times d is nearest x. */
static int mxfp4_level(float x, float d)
{
    int best = 0;
    float best_err = fabsf(tq_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(tq_mxfp4_values[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void tq_quant_mxfp4(const float *x, void *vy, int64_t n)
{
    tq_block_mxfp4 *b = vy;
    for (int64_t i = 0; i < n / TQ_QK_MXFP4; i++, b++, x += TQ_QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < TQ_QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* through int as x86 converts float to uint8_t: a maximum below
         * 2^-125 wraps the same way as in the reference */
        b->e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        float d = tq_e8m0_half(b->e);
        for (int j = 0; j < TQ_QK_MXFP4 / 2; j++)
            b->qs[j] = (uint8_t)(mxfp4_level(x[j], d) | mxfp4_level(x[TQ_QK_MXFP4 / 2 + j], d) << 4);
    }
}

static float mxfp4_scale(const void *w, int64_t i, const tq_block_q8_0 *a)
{
    return tq_f16_to_f32(a[i].d) * tq_e8m0_half(((const tq_block_mxfp4 *)w)[i].e);
}

float tq_dot_mxfp4(int64_t n, const void *w, const void *a)
{
    return dot_groups32(n, tq_mxfp4_values, w, sizeof(tq_block_mxfp4), offsetof(tq_block_mxfp4, qs), mxfp4_scale,
                        a);
}
