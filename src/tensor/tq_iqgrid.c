/*
 * tq_iqgrid.c - scalar reference for the lattice formats IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: dequantization, and the dot
 * product against Q8_K activations.  No quantizers (tq.h says why).
 *
 * LAYOUTS (structs in tq.h).  A 256-value super-block is 8 runs of 32.
 * Values come in groups of 8 (IQ3: two grid points of 4 make one group
 * of 8); a group is a point of a lattice table (tq_grids.c) chosen by an
 * index, with 8 sign bits (IQ2/IQ3) or a shared shift of +-1/8 (IQ1).
 * Sign bytes stored as 7 bits take the 8th as their parity
 * (tq_ksigns_iq2xs).  Scale codes ls are 3 or 4 bits.
 *
 *   IQ2_XXS  run r: qs bytes 8r..8r+3 = 4 indices into iq2xxs_grid; bytes
 *            8r+4..8r+7 as a little-endian uint32 u: signs of group l =
 *            bits 7l..7l+6, ls = u >> 28 for all 32 values.
 *            value = d * (0.5 + ls) / 4 * grid * sign
 *   IQ2_XS   qs[4r + l] (uint16): index & 511 into iq2xs_grid, signs >> 9;
 *            ls = nibble (values 0-15: low, 16-31: high) of scales[r];
 *            value as IQ2_XXS
 *   IQ2_S    qs[4r + l] | bits 2l, 2l+1 of qh[r] << 8 into iq2s_grid; the
 *            8 sign bits of group l in qs[32 + 4r + l]; ls as IQ2_XS;
 *            value as IQ2_XXS
 *   IQ3_XXS  qs[8r + k] into iq3xxs_grid (4 values each); bytes
 *            64 + 4r.. as uint32 u: signs of group l = bits 7l..7l+6,
 *            ls = u >> 28.  value = d * (0.5 + ls) / 2 * grid * sign
 *   IQ3_S    qs[8r + k] | bit k of qh[r] << 8 into iq3s_grid; sign bits of
 *            group l in signs[4r + l]; ls = nibble r % 2 of
 *            scales[r / 2].  value = d * (1 + 2 ls) * grid * sign
 *   IQ1_S    qs[4r + l] | bits 3l..3l+2 of qh[r] << 8 into iq1s_grid
 *            (values -1, 0, 1); ls = bits 12-14 of qh[r]; bit 15: the
 *            shift is -1/8 (else +1/8) for the run.
 *            value = d * (2 ls + 1) * (grid + shift)
 *   IQ1_M    index l of run r: qs[4r + l] | 3 bits of qh[2r + l / 2]
 *            (nibble l % 2) << 8; bit 3 of that nibble: shift -1/8;
 *            16-bit words sc[4] = scales: ls of run r's half h = bits
 *            6 (r % 2) + 3h .. +2 of sc[r / 2]; d is the f16 made of the
 *            top nibbles of sc[0..3] (sc[0]'s lowest).  value as IQ1_S.
 *
 * NUMERICS.  Dequantization does the reference engine's float operations
 * in its order (the scale, then times the grid value; a sign flip is
 * exact).  The dot products give the bits of its AVX2 kernels: each
 * super-block keeps 8 int32 lanes, lane m summing values 4m..4m+3 of every
 * run times the run's (or half run's: lanes 0-3 the first half, 4-7 the
 * second) 2 ls + 1 (tq_run_lanes); then acc[m] += d_w * d_a * lane[m]
 * (fused) over the super-blocks, summed in tq_sum_lanes' order and scaled
 * by the format's constant (1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S).
 * The IQ1 shifts go to a second sum: IQ1_S an integer per super-block
 * (sum over runs of (2 ls + 1) * sign * the run's activation sum) added to
 * a float times d_w * d_a by a fused multiply-add, the float times 1/8 then
 * added to the lanes' total (two roundings); IQ1_M a second set of int32
 * and float lanes, whose total times 1/8 is added to the first by a fused
 * multiply-add.  Those fusions are the reference build's: its compiler
 * contracts these scalar expressions (seen in its object code), where it
 * leaves MXFP4's and IQ4_NL's last-block products unfused.
 */
#include "tq_impl.h"

#include <math.h>
#include <string.h>

/* One super-block with its values laid out plainly. */
typedef struct {
    float d;                  /* the block's f16 scale */
    int8_t v[TQ_QK_K];        /* grid values, signs applied */
    uint8_t ls[TQ_QK_K / 16]; /* the scale code of each 16 values */
    int8_t shift[TQ_QK_K / 8];/* IQ1: -1 or +1, the sign of each group of 8's shift */
} unpacked;

typedef void (*unpack_fn)(const void *blk, unpacked *u);

/* 8 grid bytes with the 8 sign bits of `signs` applied. */
static void put_signed(int8_t *v, const uint8_t *grid, int n, uint8_t signs)
{
    for (int j = 0; j < n; j++) v[j] = (int8_t)(signs >> j & 1 ? -grid[j] : grid[j]);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void unpack_iq2_xxs(const void *blk, unpacked *u)
{
    const tq_block_iq2_xxs *b = blk;
    const uint8_t *q = (const uint8_t *)b->qs;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        uint32_t s = le32(q + 8 * r + 4);
        for (int l = 0; l < 4; l++) {
            uint64_t g = tq_iq2xxs_grid[q[8 * r + l]];
            put_signed(u->v + 32 * r + 8 * l, (const uint8_t *)&g, 8, tq_ksigns_iq2xs[(s >> 7 * l) & 127]);
        }
        u->ls[2 * r] = u->ls[2 * r + 1] = (uint8_t)(s >> 28);
    }
}

static void unpack_iq2_xs(const void *blk, unpacked *u)
{
    const tq_block_iq2_xs *b = blk;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        for (int l = 0; l < 4; l++) {
            uint16_t q = b->qs[4 * r + l];
            uint64_t g = tq_iq2xs_grid[q & 511];
            put_signed(u->v + 32 * r + 8 * l, (const uint8_t *)&g, 8, tq_ksigns_iq2xs[q >> 9]);
        }
        u->ls[2 * r] = b->scales[r] & 15;
        u->ls[2 * r + 1] = b->scales[r] >> 4;
    }
}

static void unpack_iq2_s(const void *blk, unpacked *u)
{
    const tq_block_iq2_s *b = blk;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        for (int l = 0; l < 4; l++) {
            uint64_t g = tq_iq2s_grid[b->qs[4 * r + l] | ((b->qh[r] << (8 - 2 * l)) & 0x300)];
            put_signed(u->v + 32 * r + 8 * l, (const uint8_t *)&g, 8, b->qs[TQ_QK_K / 8 + 4 * r + l]);
        }
        u->ls[2 * r] = b->scales[r] & 15;
        u->ls[2 * r + 1] = b->scales[r] >> 4;
    }
}

static void unpack_iq3_xxs(const void *blk, unpacked *u)
{
    const tq_block_iq3_xxs *b = blk;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        uint32_t s = le32(b->qs + TQ_QK_K / 4 + 4 * r);
        for (int l = 0; l < 4; l++) {
            uint8_t g[8], signs = tq_ksigns_iq2xs[(s >> 7 * l) & 127];
            uint32_t g0 = tq_iq3xxs_grid[b->qs[8 * r + 2 * l]], g1 = tq_iq3xxs_grid[b->qs[8 * r + 2 * l + 1]];
            memcpy(g, &g0, 4);
            memcpy(g + 4, &g1, 4);
            put_signed(u->v + 32 * r + 8 * l, g, 8, signs);
        }
        u->ls[2 * r] = u->ls[2 * r + 1] = (uint8_t)(s >> 28);
    }
}

static void unpack_iq3_s(const void *blk, unpacked *u)
{
    const tq_block_iq3_s *b = blk;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        for (int l = 0; l < 4; l++) {
            uint8_t g[8];
            for (int k = 0; k < 2; k++) {
                uint32_t e = tq_iq3s_grid[b->qs[8 * r + 2 * l + k] | ((b->qh[r] >> (2 * l + k) & 1) << 8)];
                memcpy(g + 4 * k, &e, 4);
            }
            put_signed(u->v + 32 * r + 8 * l, g, 8, b->signs[4 * r + l]);
        }
        u->ls[2 * r] = u->ls[2 * r + 1] = (b->scales[r / 2] >> (4 * (r % 2))) & 15;
    }
}

static void unpack_iq1_s(const void *blk, unpacked *u)
{
    const tq_block_iq1_s *b = blk;
    u->d = tq_f16_to_f32(b->d);
    for (int r = 0; r < 8; r++) {
        uint16_t h = b->qh[r];
        for (int l = 0; l < 4; l++) {
            uint64_t g = tq_iq1s_grid[b->qs[4 * r + l] | ((h >> 3 * l) & 7) << 8];
            memcpy(u->v + 32 * r + 8 * l, &g, 8);
            u->shift[4 * r + l] = h & 0x8000 ? -1 : 1;
        }
        u->ls[2 * r] = u->ls[2 * r + 1] = (h >> 12) & 7;
    }
}

static void unpack_iq1_m(const void *blk, unpacked *u)
{
    const tq_block_iq1_m *b = blk;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(b->scales[2 * k] | b->scales[2 * k + 1] << 8);
    u->d = tq_f16_to_f32((tq_f16)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                  (sc[3] & 0xf000)));
    for (int r = 0; r < 8; r++) {
        for (int l = 0; l < 4; l++) {
            int nib = (b->qh[2 * r + l / 2] >> (4 * (l % 2))) & 15;
            uint64_t g = tq_iq1s_grid[b->qs[4 * r + l] | (nib & 7) << 8];
            memcpy(u->v + 32 * r + 8 * l, &g, 8);
            u->shift[4 * r + l] = nib & 8 ? -1 : 1;
        }
        for (int h = 0; h < 2; h++) u->ls[2 * r + h] = (sc[r / 2] >> (6 * (r % 2) + 3 * h)) & 7;
    }
}

/* ---- dequantization ------------------------------------------------------ */

enum scale_rule { IQ2_RULE, IQ3_XXS_RULE, IQ3_S_RULE, IQ1_RULE };

/* The reference's float scale of 16 values with code ls. */
static float value_scale(enum scale_rule rule, float d, int ls)
{
    switch (rule) {
    case IQ2_RULE: return d * (0.5f + ls) * 0.25f;
    case IQ3_XXS_RULE: return d * (0.5f + ls) * 0.5f;
    case IQ3_S_RULE: return d * (1 + 2 * ls);
    case IQ1_RULE: break;
    }
    return d * (2 * ls + 1);
}

static void dequant(const void *x, size_t bsize, unpack_fn unpack, enum scale_rule rule, float *y, int64_t n)
{
    unpacked u;
    for (int64_t i = 0; i < n / TQ_QK_K; i++) {
        unpack((const char *)x + (size_t)i * bsize, &u);
        for (int h = 0; h < TQ_QK_K / 16; h++) {
            float dl = value_scale(rule, u.d, u.ls[h]);
            for (int j = 0; j < 16; j++) {
                int k = 16 * h + j;
                /* IQ1: (grid + shift) first, as the reference adds before scaling */
                *y++ = rule == IQ1_RULE ? dl * (u.v[k] + (u.shift[k / 8] < 0 ? -0.125f : 0.125f))
                                        : dl * u.v[k];
            }
        }
    }
}

void tq_dequant_iq2_xxs(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq2_xxs), unpack_iq2_xxs, IQ2_RULE, y, n);
}
void tq_dequant_iq2_xs(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq2_xs), unpack_iq2_xs, IQ2_RULE, y, n);
}
void tq_dequant_iq2_s(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq2_s), unpack_iq2_s, IQ2_RULE, y, n);
}
void tq_dequant_iq3_xxs(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq3_xxs), unpack_iq3_xxs, IQ3_XXS_RULE, y, n);
}
void tq_dequant_iq3_s(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq3_s), unpack_iq3_s, IQ3_S_RULE, y, n);
}
void tq_dequant_iq1_s(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq1_s), unpack_iq1_s, IQ1_RULE, y, n);
}
void tq_dequant_iq1_m(const void *x, float *y, int64_t n)
{
    dequant(x, sizeof(tq_block_iq1_m), unpack_iq1_m, IQ1_RULE, y, n);
}

/* ---- dot products -------------------------------------------------------- */

/* The 8 lanes of one super-block: values times activations, each run's
 * halves times 2 ls + 1. */
static void block_lanes(const unpacked *u, const int8_t *a, int32_t lane[8])
{
    memset(lane, 0, 8 * sizeof *lane);
    for (int r = 0; r < 8; r++)
        tq_run_lanes(lane, 2 * u->ls[2 * r] + 1, 2 * u->ls[2 * r + 1] + 1, u->v + 32 * r, a + 32 * r);
}

/* IQ2 / IQ3: the lanes, then the float steps, then the format's constant. */
static float dot_lattice(int64_t n, const void *w, size_t bsize, unpack_fn unpack, float factor, const void *va)
{
    const tq_block_q8_K *a = va;
    float acc[8] = {0};
    unpacked u;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, a++) {
        int32_t lane[8];
        unpack((const char *)w + (size_t)i * bsize, &u);
        block_lanes(&u, a->qs, lane);
        float d = u.d * a->d;
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
    }
    return factor * tq_sum_lanes(acc);
}

float tq_dot_iq2_xxs(int64_t n, const void *w, const void *a)
{
    return dot_lattice(n, w, sizeof(tq_block_iq2_xxs), unpack_iq2_xxs, 0.125f, a);
}
float tq_dot_iq2_xs(int64_t n, const void *w, const void *a)
{
    return dot_lattice(n, w, sizeof(tq_block_iq2_xs), unpack_iq2_xs, 0.125f, a);
}
float tq_dot_iq2_s(int64_t n, const void *w, const void *a)
{
    return dot_lattice(n, w, sizeof(tq_block_iq2_s), unpack_iq2_s, 0.125f, a);
}
float tq_dot_iq3_xxs(int64_t n, const void *w, const void *a)
{
    return dot_lattice(n, w, sizeof(tq_block_iq3_xxs), unpack_iq3_xxs, 0.25f, a);
}
float tq_dot_iq3_s(int64_t n, const void *w, const void *a)
{
    return dot_lattice(n, w, sizeof(tq_block_iq3_s), unpack_iq3_s, 1.0f, a);
}

/* IQ1_S: the shift term is one integer per super-block, from the
 * activations' 16-value sums. */
float tq_dot_iq1_s(int64_t n, const void *w, const void *va)
{
    const tq_block_q8_K *a = va;
    float acc[8] = {0}, acc_shift = 0;
    unpacked u;
    for (int64_t i = 0; i < n / TQ_QK_K; i++, a++) {
        int32_t lane[8], shift = 0;
        unpack_iq1_s((const tq_block_iq1_s *)w + i, &u);
        block_lanes(&u, a->qs, lane);
        for (int r = 0; r < 8; r++)
            shift += (a->bsums[2 * r] + a->bsums[2 * r + 1]) * u.shift[4 * r] * (2 * u.ls[2 * r] + 1);
        float d = a->d * u.d;
        for (int m = 0; m < 8; m++) acc[m] = fmaf(d, (float)lane[m], acc[m]);
        acc_shift = fmaf(d, (float)shift, acc_shift);   /* the reference's compiler fuses this one */
    }
    return tq_sum_lanes(acc) + 0.125f * acc_shift;
}

/* IQ1_M: the shift term in lanes of its own (each group of 8's sign times
 * its activations, by the half run's scale). */
float tq_dot_iq1_m(int64_t n, const void *w, const void *va)
{
    const tq_block_q8_K *a = va;
    float acc[8] = {0}, acc_shift[8] = {0};
    unpacked u;
    int8_t sv[TQ_QK_K];
    for (int64_t i = 0; i < n / TQ_QK_K; i++, a++) {
        int32_t lane[8], lane_shift[8] = {0};
        unpack_iq1_m((const tq_block_iq1_m *)w + i, &u);
        block_lanes(&u, a->qs, lane);
        for (int k = 0; k < TQ_QK_K; k++) sv[k] = u.shift[k / 8];
        for (int r = 0; r < 8; r++)
            tq_run_lanes(lane_shift, 2 * u.ls[2 * r] + 1, 2 * u.ls[2 * r + 1] + 1, sv + 32 * r, a->qs + 32 * r);
        float d = a->d * u.d;
        for (int m = 0; m < 8; m++) {
            acc[m] = fmaf(d, (float)lane[m], acc[m]);
            acc_shift[m] = fmaf(d, (float)lane_shift[m], acc_shift[m]);
        }
    }
    return fmaf(0.125f, tq_sum_lanes(acc_shift), tq_sum_lanes(acc));   /* fused there too */
}
