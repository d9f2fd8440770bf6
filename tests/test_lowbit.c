/*
 * test_lowbit.c - the weight formats added for the files people download
 * after Q4_K_M: Q2_K and Q3_K (against Q8_K activations), IQ4_NL and
 * MXFP4 (against Q8_0), IQ4_XS and the lattice formats IQ2_XXS, IQ3_XXS,
 * IQ2_XS, IQ3_S, IQ2_S, IQ1_S, IQ1_M (against Q8_K).
 *
 *   - layouts: blocks built field by field here, decoded here bit by bit,
 *     and dequantize must give the same floats; a few entries of the
 *     lattice tables as ggml-common.h lists them;
 *   - quantizers: relative RMS error of dequant(quant(x)) within each
 *     format's budget, all-zero input decoding to zeros (the lattice
 *     formats have none: their weights here are random blocks);
 *   - the reference dot against the dequantized rows within an error budget
 *     computed from the magnitudes summed (dot_in_budget);
 *   - every SIMD table's dot equal to the scalar one bit for bit (the
 *     kernels keep the reference's integer lanes and float order), and
 *     within the budget on its own; for the lattice formats also on
 *     blocks of one repeated byte (all-max codes, sign patterns) against
 *     activations at +-127, over rows of several super-blocks;
 *   - tk_matmul at 1, 3, 9 and 40 tokens equal to one scalar dot per
 *     output, or for IQ4_NL and MXFP4 on the avx512 table (their kernels
 *     round once per block, as Q4_0's) within the dot's budget, equal for
 *     a token alone and in a batch, and equal from the tiled layout.
 *
 * Every expected value is computed at test time; nothing is read from
 * another program.  (bench/quant_logits.sh compares whole models with the
 * reference engine; it needs the reference build beside the project.)
 */
#include "../src/tensor/tk.h"
#include "../src/tensor/tq_impl.h"   /* the lattice tables */
#include "test.h"

#include <math.h>
#include <stdint.h>

#define TEST_RNG_SEED 0x853c49e6748fea9bull
#include "test_rng.h"

static const tq_type types[] = {
    TQ_Q2_K, TQ_Q3_K, TQ_IQ4_NL, TQ_IQ4_XS, TQ_MXFP4,
    TQ_IQ2_XXS, TQ_IQ3_XXS, TQ_IQ2_XS, TQ_IQ3_S, TQ_IQ2_S, TQ_IQ1_S, TQ_IQ1_M,
};

/* Weights of type wt for the floats w: quantized, or for the lattice
 * formats random blocks with scales of the magnitude w's would get. */
static void make_weights(tq_type wt, const float *w, void *qw, int n)
{
    if (tq_has_quantizer(wt)) {
        tq_quantize_row(wt, w, qw, n);
        return;
    }
    size_t bs = tq_get(wt)->type_size;
    for (int b = 0; b < n / 256; b++) random_scaled_block(wt, (char *)qw + b * bs, 0.002f + 0.01f * uniform());
}

/* ---- layouts ------------------------------------------------------------ */

/* Bytes of a pseudo-random block (any bit pattern is a valid block), with
 * finite scales. */
static void random_block(void *blk, size_t size)
{
    uint8_t *p = blk;
    for (size_t i = 0; i < size; i++) p[i] = (uint8_t)next_u32();
}

/* Q2_K value v: scale/min nibbles of byte v/16, level bits 2k..2k+1 of
 * qs[32h + l] for v = 128h + 32k + l. */
static float decode_q2_K(const tq_block_q2_K *b, int v)
{
    int h = v / 128, k = (v % 128) / 32, l = v % 32;
    int q = (b->qs[32 * h + l] >> (2 * k)) & 3;
    float d = tq_f16_to_f32(b->d) * (b->scales[v / 16] & 15), m = tq_f16_to_f32(b->dmin) * (b->scales[v / 16] >> 4);
    return d * q - m;
}

/* Q3_K value v: 6-bit scale j = v/16 from bit positions (low nibble j/8 of
 * byte j%8, bits 2(j/4) of byte 8 + j%4), the third level bit from hmask. */
static float decode_q3_K(const tq_block_q3_K *b, int v)
{
    int j = v / 16, sc = 0;
    for (int bit = 0; bit < 4; bit++) sc |= ((b->scales[j % 8] >> (4 * (j / 8) + bit)) & 1) << bit;
    for (int bit = 0; bit < 2; bit++) sc |= ((b->scales[8 + j % 4] >> (2 * (j / 4) + bit)) & 1) << (4 + bit);
    int h = v / 128, k = (v % 128) / 32, l = v % 32;
    int q = ((b->qs[32 * h + l] >> (2 * k)) & 3) + 4 * ((b->hmask[l] >> (v / 32)) & 1) - 4;
    return tq_f16_to_f32(b->d) * (sc - 32) * q;
}

static const int8_t iq4_table[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* IQ4 value v of a group of 16 level bytes: nibble (v / 16) of byte v % 16. */
static int iq4_value(const uint8_t *qs, int v)
{
    return iq4_table[(qs[v % 16] >> (4 * (v / 16))) & 15];
}

static float decode_iq4_xs(const tq_block_iq4_xs *b, int v)
{
    int j = v / 32;
    int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b->scales_h >> (2 * j)) & 3) << 4;
    return tq_f16_to_f32(b->d) * (ls - 32) * iq4_value(b->qs + 16 * j, v % 32);
}

/* ---- the lattice formats, decoded from their description (tq_iqgrid.c) */

static uint32_t le32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 7 stored sign bits, the 8th their parity (an even count of minus signs). */
static int sign_of(unsigned seven, int j)
{
    unsigned eight = seven | (unsigned)(__builtin_popcount(seven) & 1) << 7;
    return eight >> j & 1 ? -1 : 1;
}

static float signed_value(float scale, int mag, int sign)
{
    float v = scale * mag;
    return sign < 0 ? -v : v;
}

static uint8_t byte_of(uint64_t word, int j) { return (uint8_t)(word >> (8 * j)); }

/* value v of a block: run r, group of 8 l, place j */
static float decode_lattice(tq_type t, const void *blk, int v)
{
    int r = v / 32, l = v % 32 / 8, j = v % 8, k = v % 32 / 4, h = v % 32 / 16;
    switch (t) {
    case TQ_IQ2_XXS: {
        const tq_block_iq2_xxs *b = blk;
        const uint8_t *q = (const uint8_t *)b->qs;
        uint32_t s = le32_at(q + 8 * r + 4);
        float sc = tq_f16_to_f32(b->d) * (0.5f + (s >> 28)) * 0.25f;
        return signed_value(sc, byte_of(tq_iq2xxs_grid[q[8 * r + l]], j), sign_of((s >> 7 * l) & 127, j));
    }
    case TQ_IQ2_XS: {
        const tq_block_iq2_xs *b = blk;
        uint16_t q = b->qs[4 * r + l];
        float sc = tq_f16_to_f32(b->d) * (0.5f + ((b->scales[r] >> 4 * h) & 15)) * 0.25f;
        return signed_value(sc, byte_of(tq_iq2xs_grid[q & 511], j), sign_of(q >> 9, j));
    }
    case TQ_IQ2_S: {
        const tq_block_iq2_s *b = blk;
        int idx = b->qs[4 * r + l] | ((b->qh[r] >> 2 * l) & 3) << 8;
        float sc = tq_f16_to_f32(b->d) * (0.5f + ((b->scales[r] >> 4 * h) & 15)) * 0.25f;
        return signed_value(sc, byte_of(tq_iq2s_grid[idx], j), b->qs[32 + 4 * r + l] >> j & 1 ? -1 : 1);
    }
    case TQ_IQ3_XXS: {
        const tq_block_iq3_xxs *b = blk;
        uint32_t s = le32_at(b->qs + 64 + 4 * r);
        float sc = tq_f16_to_f32(b->d) * (0.5f + (s >> 28)) * 0.5f;
        int mag = (tq_iq3xxs_grid[b->qs[8 * r + k]] >> (8 * (v % 4))) & 255;
        return signed_value(sc, mag, sign_of((s >> 7 * l) & 127, j));
    }
    case TQ_IQ3_S: {
        const tq_block_iq3_s *b = blk;
        int idx = b->qs[8 * r + k] | ((b->qh[r] >> k) & 1) << 8;
        float sc = tq_f16_to_f32(b->d) * (1 + 2 * ((b->scales[r / 2] >> 4 * (r % 2)) & 15));
        int mag = (tq_iq3s_grid[idx] >> (8 * (v % 4))) & 255;
        return signed_value(sc, mag, b->signs[4 * r + l] >> j & 1 ? -1 : 1);
    }
    case TQ_IQ1_S: {
        const tq_block_iq1_s *b = blk;
        uint16_t q = b->qh[r];
        int idx = b->qs[4 * r + l] | ((q >> 3 * l) & 7) << 8;
        float sc = tq_f16_to_f32(b->d) * (2 * ((q >> 12) & 7) + 1);
        return sc * ((int8_t)byte_of(tq_iq1s_grid[idx], j) + (q & 0x8000 ? -0.125f : 0.125f));
    }
    case TQ_IQ1_M: {
        const tq_block_iq1_m *b = blk;
        int w[4], nib = (b->qh[2 * r + l / 2] >> 4 * (l % 2)) & 15;
        for (int i = 0; i < 4; i++) w[i] = b->scales[2 * i] | b->scales[2 * i + 1] << 8;
        tq_f16 d = (tq_f16)((w[0] >> 12) | (w[1] >> 12) << 4 | (w[2] >> 12) << 8 | (w[3] >> 12) << 12);
        int idx = b->qs[4 * r + l] | (nib & 7) << 8;
        float sc = tq_f16_to_f32(d) * (2 * ((w[r / 2] >> (6 * (r % 2) + 3 * h)) & 7) + 1);
        return sc * ((int8_t)byte_of(tq_iq1s_grid[idx], j) + (nib & 8 ? -0.125f : 0.125f));
    }
    default: break;
    }
    return NAN;
}

/* MXFP4 value v: E2M1 code (sign, 2-bit exponent, 1-bit mantissa) of
 * nibble v / 16 of byte v % 16, times 2^(e - 127). */
static float decode_mxfp4(const tq_block_mxfp4 *b, int v)
{
    int code = (b->qs[v % 16] >> (4 * (v / 16))) & 15, ex = (code >> 1) & 3, man = code & 1;
    float mag = ex == 0 ? 0.5f * man : ldexpf(1.0f + 0.5f * man, ex - 1);
    float scale = ldexpf(1.0f, b->e - 127);
    return (code & 8 ? -mag : mag) * scale;
}

/* Table entries as ggml-common.h lists them (first, last), and the sign
 * table's parity rule. */
static void test_lattice_tables(void)
{
    CHECK(tq_iq2xxs_grid[0] == 0x0808080808080808ull && tq_iq2xxs_grid[1] == 0x080808080808082bull);
    CHECK(tq_iq2xxs_grid[255] == 0x2b2b2b1908081908ull);
    CHECK(tq_iq2xs_grid[511] == 0x2b2b2b2b2b2b2b2bull && tq_iq2s_grid[1023] == 0x2b2b2b2b2b2b2b2bull);
    CHECK(tq_iq3xxs_grid[0] == 0x04040404u && tq_iq3xxs_grid[255] == 0x3e341c04u);
    CHECK(tq_iq3s_grid[0] == 0x01010101u && tq_iq3s_grid[511] == 0x0f0f0101u);
    CHECK(tq_iq1s_grid[0] == 0xffffffffffffffffull && tq_iq1s_grid[2047] == 0x0101010101010101ull);
    int bad = 0;
    for (unsigned i = 0; i < 128; i++) {
        for (int j = 0; j < 8; j++) {
            bad += (tq_ksigns_iq2xs[i] >> j & 1 ? -1 : 1) != sign_of(i, j);
            bad += (int8_t)byte_of(tq_signs64[i], j) != sign_of(i, j);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_layouts(void)
{
    int bad = 0;
    float y[256];
    for (int rep = 0; rep < 50; rep++) {
        tq_block_q2_K b2;
        random_block(&b2, sizeof b2);
        b2.d = tq_f32_to_f16(uniform());
        b2.dmin = tq_f32_to_f16(uniform());
        tq_dequantize_row(TQ_Q2_K, &b2, y, 256);
        for (int v = 0; v < 256; v++) bad += y[v] != decode_q2_K(&b2, v);

        tq_block_q3_K b3;
        random_block(&b3, sizeof b3);
        b3.d = tq_f32_to_f16(uniform() - 0.5f);
        tq_dequantize_row(TQ_Q3_K, &b3, y, 256);
        for (int v = 0; v < 256; v++) bad += y[v] != decode_q3_K(&b3, v);

        tq_block_iq4_nl bn;
        random_block(&bn, sizeof bn);
        bn.d = tq_f32_to_f16(uniform() - 0.5f);
        tq_dequantize_row(TQ_IQ4_NL, &bn, y, 32);
        for (int v = 0; v < 32; v++) bad += y[v] != tq_f16_to_f32(bn.d) * iq4_value(bn.qs, v);

        tq_block_iq4_xs bx;
        random_block(&bx, sizeof bx);
        bx.d = tq_f32_to_f16(uniform() - 0.5f);
        tq_dequantize_row(TQ_IQ4_XS, &bx, y, 256);
        for (int v = 0; v < 256; v++) bad += y[v] != decode_iq4_xs(&bx, v);

        tq_block_mxfp4 bm;
        random_block(&bm, sizeof bm);
        bm.e = (uint8_t)(100 + rep);
        tq_dequantize_row(TQ_MXFP4, &bm, y, 32);
        for (int v = 0; v < 32; v++) bad += y[v] != decode_mxfp4(&bm, v);

        for (size_t t = 0; t < ARRAY_LEN(types); t++) {
            if (tq_has_quantizer(types[t])) continue;
            uint8_t blk[128];
            random_scaled_block(types[t], blk, uniform() - 0.5f);
            tq_dequantize_row(types[t], blk, y, 256);
            for (int v = 0; v < 256; v++) {
                float want = decode_lattice(types[t], blk, v);
                if (memcmp(&y[v], &want, sizeof want) != 0 && bad++ < 3)
                    fprintf(stderr, "%s value %d: %.9g, decoded here %.9g\n", tq_get(types[t])->name, v, y[v], want);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(tq_row_size(TQ_Q2_K, 256), 84);
    CHECK_EQ_INT(tq_row_size(TQ_Q3_K, 512), 220);
    CHECK_EQ_INT(tq_row_size(TQ_IQ4_NL, 64), 36);
    CHECK_EQ_INT(tq_row_size(TQ_IQ4_XS, 256), 136);
    CHECK_EQ_INT(tq_get(TQ_IQ4_NL)->vec_dot_type, TQ_Q8_0);
    CHECK_EQ_INT(tq_get(TQ_IQ4_XS)->vec_dot_type, TQ_Q8_K);
    CHECK_EQ_INT(tq_row_size(TQ_MXFP4, 64), 34);
    CHECK_EQ_INT(tq_get(TQ_MXFP4)->vec_dot_type, TQ_Q8_0);
    static const struct { tq_type t; int bytes; } sizes[] = {
        { TQ_IQ2_XXS, 66 }, { TQ_IQ2_XS, 74 }, { TQ_IQ2_S, 82 }, { TQ_IQ3_XXS, 98 },
        { TQ_IQ3_S, 110 }, { TQ_IQ1_S, 50 }, { TQ_IQ1_M, 56 },
    };
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        CHECK_EQ_INT(tq_row_size(sizes[i].t, 512), 2 * sizes[i].bytes);
        CHECK_EQ_INT(tq_get(sizes[i].t)->vec_dot_type, TQ_Q8_K);
        CHECK(!tq_has_quantizer(sizes[i].t));
    }
}

/* ---- quantizer accuracy -------------------------------------------------- */

/* Relative RMS error on gaussian rows of 4 widths; bounds about 1.25x what
 * the formats reach here (Q2_K 0.284, Q3_K 0.144, IQ4_NL 0.073, IQ4_XS
 * 0.075, MXFP4 0.116).  The lattice formats have no quantizer. */
static void test_round_trip(void)
{
    enum { N = 256 * 32 };
    static float x[N], y[N];
    static uint8_t q[N];
    const double bound[] = { 0.355, 0.18, 0.092, 0.094, 0.145 };   /* as types[] */
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        if (!tq_has_quantizer(types[t])) continue;
        for (int i = 0; i < N; i++) x[i] = gaussish() * (1 + i / 256 % 4);
        tq_quantize_row(types[t], x, q, N);
        tq_dequantize_row(types[t], q, y, N);
        double err = 0, sig = 0;
        for (int i = 0; i < N; i++) {
            err += (double)(x[i] - y[i]) * (x[i] - y[i]);
            sig += (double)x[i] * x[i];
        }
        double rel = sqrt(err / sig);
        printf("%-7s relative rms error %.4f (bound %.3f)\n", tq_get(types[t])->name, rel, bound[t]);
        CHECK(rel <= bound[t]);
        CHECK(rel > 0);

        memset(x, 0, 256 * sizeof *x);
        memset(q, 0x5a, sizeof q);
        tq_quantize_row(types[t], x, q, 256);
        tq_dequantize_row(types[t], q, y, 256);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += y[i] != 0;
        CHECK_EQ_INT(nonzero, 0);
    }
}

/* ---- the dot's error budget ---------------------------------------------- */

/* The activation row of x for weight type wt (Q8_0 or Q8_K) into qa. */
static void quantize_act(tq_type wt, const float *x, void *qa, int n)
{
    tq_quantize_row(tq_get(wt)->vec_dot_type, x, qa, n);
}

/*
 * The dot of the integer kernel equals sum_i w_i * a_i of the dequantized
 * rows up to float rounding, relative to the magnitudes summed before they
 * cancel: sum |w*a|, plus for Q2_K its min part sum |min_i * a_i| (min_i
 * the value level 0 decodes to).  Budget: 1e-5 of that plus 1e-6.
 */
static bool dot_in_budget(tq_type wt, int n, const void *qw, const void *qa, float got, double *exact)
{
    static float wd[8192], ad[8192], zl[8192];
    static uint8_t qz[8192];
    tq_dequantize_row(wt, qw, wd, n);
    tq_dequantize_row(tq_get(wt)->vec_dot_type, qa, ad, n);
    memset(zl, 0, (size_t)n * sizeof *zl);
    if (wt == TQ_Q2_K) {
        memcpy(qz, qw, tq_row_size(wt, n));
        for (int k = 0; k < n / 256; k++) memset(((tq_block_q2_K *)qz)[k].qs, 0, 64);
        tq_dequantize_row(wt, qz, zl, n);
    }
    double mag = 0;
    *exact = 0;
    for (int i = 0; i < n; i++) {
        *exact += (double)wd[i] * ad[i];
        mag += fabs((double)wd[i] * ad[i]) + fabs((double)zl[i] * ad[i]);
    }
    return fabs(got - *exact) <= 1e-5 * mag + 1e-6;
}

static void fill(float *w, float *x, int n, int rep)
{
    for (int i = 0; i < n; i++) {
        w[i] = gaussish() * 0.05f + (rep % 3 == 0 ? 0.02f : 0.0f);
        x[i] = gaussish() * (rep % 5 == 0 ? 40.0f : 1.0f);
        if (rep % 7 == 6 && i < 256) w[i] = 0;   /* an all-zero block */
    }
}

static void test_dot_vs_dequant(void)
{
    enum { N = 4864 };
    static float w[N], x[N];
    static uint8_t qw[N], qa[N * 2];
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        int bad = 0;
        for (int rep = 0; rep < 30; rep++) {
            fill(w, x, N, rep);
            make_weights(types[t], w, qw, N);
            quantize_act(types[t], x, qa, N);
            double exact;
            float got = tq_vec_dot_ref(types[t], N, qw, qa);
            if (!dot_in_budget(types[t], N, qw, qa, got, &exact) && bad++ < 3)
                fprintf(stderr, "%s: dot %.9g vs dequantized %.9g\n", tq_get(types[t])->name, got, exact);
        }
        CHECK_EQ_INT(bad, 0);
    }
}

/* ---- SIMD against the scalar reference ----------------------------------- */

/* n in {256, 512, 4864} and, for IQ4_NL, an odd block count (4896 = 153
 * blocks: the reference's lone last block). */
static void test_dots_simd(const tk_ops *ref, const tk_ops *simd)
{
    static const int sizes[] = { 256, 512, 4864, 4896 };
    static float w[4896], x[4896];
    static uint8_t qw[4896], qa[4896 * 2];
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        tq_type wt = types[t];
        int n_exact = 0, n_budget = 0, n_cases = 0;
        for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
            int n = sizes[s];
            if (n % tq_get(wt)->blck_size) continue;
            for (int rep = 0; rep < 30; rep++) {
                fill(w, x, n, rep);
                make_weights(wt, w, qw, n);
                quantize_act(wt, x, qa, n);
                float r = ref->vec_dot[wt](n, qw, qa), v = simd->vec_dot[wt](n, qw, qa);
                double exact;
                n_exact += memcmp(&r, &v, sizeof r) == 0;
                n_budget += dot_in_budget(wt, n, qw, qa, v, &exact);
                n_cases++;
            }
        }
        if (n_exact != n_cases)
            fprintf(stderr, "%s %s: %d of %d dots not bit-equal\n", simd->isa, tq_get(wt)->name, n_cases - n_exact,
                    n_cases);
        CHECK(ref->vec_dot[wt] != simd->vec_dot[wt]);   /* a SIMD kernel, not the scalar fallback */
        CHECK_EQ_INT(n_exact, n_cases);
        CHECK_EQ_INT(n_budget, n_cases);
    }
}

/* Activations for test_lattice_edges' pattern `act`: +1 everywhere, -1,
 * signs alternating by value, by group of 8 (Q8_K makes them -127 and
 * +127), or gaussian with a few large values. */
static void edge_activations(int act, float *x, int n)
{
    for (int i = 0; i < n; i++) {
        switch (act) {
        case 0: x[i] = 1; break;
        case 1: x[i] = -1; break;
        case 2: x[i] = i % 2 ? -1.0f : 1.0f; break;
        case 3: x[i] = i / 8 % 2 ? -1.0f : 1.0f; break;
        default: x[i] = gaussish() * (next_u32() % 50 == 0 ? 30.0f : 1.0f); break;
        }
    }
}

/*
 * The lattice formats' dot of a SIMD table on blocks that random bytes
 * rarely make, bit for bit against the scalar one: every byte of a block
 * the same -- 0xff (the largest grid indices, scale codes and 7-bit sign
 * codes: all 8 signs negative; IQ1: shift -1/8), 0x00, and sign patterns
 * 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f (alternate and half-set sign bits,
 * codes of odd and even parity) -- with random blocks among them, a
 * pattern per super-block along rows of 17, against activations at +-127
 * (the extremes of vpmaddubsw's int16 pairs) and random ones, over the
 * first 1, 3 and all 17 super-blocks.  Rows are allocated to their size,
 * so a sanitized build sees a read past the last block.  The avx512 table
 * must hold kernels of its own for them (tk_iquant_avx512.c), not avx2's.
 */
static void test_lattice_edges(const tk_ops *ref, const tk_ops *simd)
{
    static const uint8_t fills[] = { 0xff, 0x00, 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f };
    static const tq_type lattice[] = { TQ_IQ2_XXS, TQ_IQ2_XS, TQ_IQ2_S, TQ_IQ3_XXS, TQ_IQ3_S, TQ_IQ1_S, TQ_IQ1_M };
    enum { NB = 17, N = NB * 256, N_FILL = sizeof fills, N_PATTERN = N_FILL + 2 };
    static const int sizes[] = { 256, 3 * 256, N };
    static float x[N];
    const tk_ops *avx2 = tk_ops_named("avx2");
    uint8_t *qa = malloc(tq_row_size(TQ_Q8_K, N));
    for (size_t t = 0; qa && t < ARRAY_LEN(lattice); t++) {
        tq_type wt = lattice[t];
        size_t bs = tq_get(wt)->type_size;
        uint8_t *qw = malloc(tq_row_size(wt, N));
        CHECK(qw != NULL);
        if (!qw) break;
        int n_bad = 0, n_cases = 0;
        for (int shift = 0; shift < N_PATTERN; shift += 3) {   /* which super-block gets which pattern */
            for (int k = 0; k < NB; k++) {
                int f = (k + shift) % N_PATTERN;
                uint8_t *blk = qw + k * bs;
                if (f >= N_FILL) {
                    random_scaled_block(wt, blk, 0.01f);
                    continue;
                }
                memset(blk, fills[f], bs);
                set_block_scale(wt, blk, (k % 3 + 1) / 32.0f);
            }
            for (int act = 0; act < 5; act++) {
                edge_activations(act, x, N);
                quantize_act(wt, x, qa, N);
                for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
                    float r = ref->vec_dot[wt](sizes[s], qw, qa), v = simd->vec_dot[wt](sizes[s], qw, qa);
                    if (memcmp(&r, &v, sizeof r) != 0 && n_bad++ < 3)
                        fprintf(stderr, "%s %s n=%d patterns from %d, activations %d: %.9g vs scalar %.9g\n",
                                simd->isa, tq_get(wt)->name, sizes[s], shift, act, v, r);
                    n_cases++;
                }
            }
        }
        free(qw);
        CHECK_EQ_INT(n_bad, 0);
        CHECK(n_cases > 0);
        if (strcmp(simd->isa, "avx512") == 0) CHECK(avx2 && simd->vec_dot[wt] != avx2->vec_dot[wt]);
    }
    CHECK(qa != NULL);
    free(qa);
}

/* ---- the threaded product ------------------------------------------------- */

/* Whether tk_matmul runs wt through the 32-value kernels of the avx512
 * table (tk_tiled_avx512.c, tk_gemm_avx512.c): one rounding per block in
 * block order, as for Q4_0, not the reference's lanes.  Then its outputs
 * are held to Q4_0's standard (test_tensor.c): within the dot's budget,
 * the same bits for a token alone as in any batch, and the same bits from
 * the tiled layout as from the plain rows. */
static bool block_order(tq_type wt)
{
    return (wt == TQ_IQ4_NL || wt == TQ_MXFP4) && strcmp(tk_ops_get()->isa, "avx512") == 0;
}

/*
 * tk_matmul of the ROWS x COLS matrix at qw (n_toks tokens of x) into y
 * (2 threads), and the checks above: bit for bit equal to one scalar dot
 * per output, or with block_order the 32-value kernels' standard.
 * Returns the number of outputs that fail.
 */
static int check_products(tp_pool *tp, tq_type wt, const uint8_t *qw, int rows, int cols, const float *x)
{
    static const int n_toks[] = { 1, 3, 9, 40 };
    static float y[40 * 64], y1[64], yt[40 * 64];
    static uint8_t qa[4096 * 2], tiled[64 * 4096];
    const tk_ops *ref = tk_ops_named("scalar");
    const size_t wrow = tq_row_size(wt, cols);
    const bool tile = block_order(wt) && tk_runs_tiled(wt, rows, cols);
    if (tile) tq_tile((tq_type)tq_tiled(wt), qw, rows, cols, tiled);
    int bad = 0;
    for (size_t k = 0; k < ARRAY_LEN(n_toks); k++) {
        int nt = n_toks[k];
        void *scratch = malloc(tk_matmul_scratch_size(wt, cols, nt));
        tk_matmul(tp, wt, qw, rows, cols, x, nt, y, scratch);
        if (tile) {
            tk_matmul(tp, (tq_type)tq_tiled(wt), tiled, rows, cols, x, nt, yt, scratch);
            bad += memcmp(y, yt, (size_t)(nt * rows) * sizeof *y) != 0;
        }
        for (int tok = 0; tok < nt; tok++) {
            quantize_act(wt, x + tok * cols, qa, cols);
            if (block_order(wt)) tk_matmul(tp, wt, qw, rows, cols, x + tok * cols, 1, y1, scratch);
            for (int r = 0; r < rows; r++) {
                float got = y[tok * rows + r], want = ref->vec_dot[wt](cols, qw + r * wrow, qa);
                double exact;
                if (block_order(wt))
                    bad += !dot_in_budget(wt, cols, qw + r * wrow, qa, got, &exact) || got != y1[r];
                else
                    bad += memcmp(&want, &got, sizeof want) != 0;
            }
        }
        free(scratch);
    }
    return bad;
}

/* tk_matmul (the table this CPU chose) on 2 threads at token counts that
 * take every path tk.h lists (check_products). */
static void test_matmul(void)
{
    enum { ROWS = 48, COLS = 768, MAX_TOK = 40 };
    static float w[COLS], x[MAX_TOK * COLS];
    static uint8_t qw[ROWS * COLS];
    tp_pool *tp = NULL;
    CHECK(tp_new(2, &tp) == PK_OK);
    if (!tp) return;
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        tq_type wt = types[t];
        size_t wrow = tq_row_size(wt, COLS);
        for (int r = 0; r < ROWS; r++) {
            float dummy[COLS];
            fill(w, dummy, COLS, r);
            make_weights(wt, w, qw + r * wrow, COLS);
        }
        for (int i = 0; i < MAX_TOK * COLS; i++) x[i] = gaussish();
        int bad = check_products(tp, wt, qw, ROWS, COLS, x);
        if (bad) fprintf(stderr, "matmul %s: %d outputs off\n", tq_get(wt)->name, bad);
        CHECK_EQ_INT(bad, 0);
    }
    tp_free(tp);
}

/* MXFP4 blocks of random levels and scale bytes from the extremes a file
 * can hold without overflowing a float product (0 and 1: subnormal
 * scales; up to 180), through every path, plain and tiled. */
static void test_matmul_mxfp4_scales(void)
{
    enum { ROWS = 32, COLS = 2880, MAX_TOK = 40 };
    static const uint8_t es[] = { 0, 1, 2, 3, 60, 120, 127, 128, 129, 140, 180 };
    static uint8_t qw[ROWS * COLS];
    static float x[MAX_TOK * COLS];
    tp_pool *tp = NULL;
    CHECK(tp_new(2, &tp) == PK_OK);
    if (!tp) return;
    tq_block_mxfp4 *b = (tq_block_mxfp4 *)qw;
    for (size_t k = 0; k < (size_t)ROWS * COLS / 32; k++) {
        random_block(&b[k], sizeof b[k]);
        b[k].e = es[next_u32() % ARRAY_LEN(es)];
    }
    for (int i = 0; i < MAX_TOK * COLS; i++) x[i] = gaussish();
    int bad = check_products(tp, TQ_MXFP4, qw, ROWS, COLS, x);
    if (bad) fprintf(stderr, "matmul mxfp4 (extreme scales): %d outputs off\n", bad);
    CHECK_EQ_INT(bad, 0);
    tp_free(tp);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_layouts);
    TEST_RUN(test_lattice_tables);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_dot_vs_dequant);
    const tk_ops *ref = tk_ops_named("scalar");
    CHECK(ref != NULL);
    const char *simd_names[] = { "avx2", "avx512" };
    for (size_t i = 0; ref && i < ARRAY_LEN(simd_names); i++) {
        const tk_ops *simd = tk_ops_named(simd_names[i]);
        if (!simd) {
            SKIP_PART("%s kernels not run: this CPU lacks the instructions", simd_names[i]);
            continue;
        }
        TEST_RUN(test_dots_simd, ref, simd);
        TEST_RUN(test_lattice_edges, ref, simd);
    }
    if (ref) {
        test_matmul();
        test_matmul_mxfp4_scales();
    }
    return test_finish();
}
