/*
 * test_kquant.c - the K-quant formats (Q4_K, Q5_K, Q6_K weights; Q8_K
 * activations): layouts, quantizer accuracy, the dot against the dequantized
 * rows, and the SIMD kernels against the scalar reference.
 *
 * Every expected value is computed at test time from the formats'
 * definitions (test_golden and dot_in_budget state the error budgets); no
 * hash of another program's output is pinned.
 *
 * The real-model check reads the Q4_K and Q6_K tensors of a file written by
 * the reference engine's quantize tool (../shared/models); without the
 * shared directory that part is counted as skipped (SKIP_PART).
 *
 * POLYKV_BENCH=1 also times each dot kernel over a 896 x 4864 weight matrix
 * (one thread) after the checks, and prints GB/s of weight bytes.
 */
#include "../src/gguf/gguf.h"
#include "../src/tensor/tk.h"
#include "test.h"

#include <stdint.h>
#include <time.h>

/* ---- deterministic inputs (integer PRNG, no libm: same bits everywhere) */

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "test_rng.h"

/* Row r of the golden inputs: six shapes of data, every 7th row starting
 * with an all-zero super-block. */
static void fill_row(float *x, int n, int r)
{
    for (int i = 0; i < n; i++) {
        switch (r % 6) {
        case 0: x[i] = gaussish() * 0.02f; break;
        case 1: x[i] = uniform() * 2 - 1; break;
        case 2: x[i] = gaussish() * (next_u32() % 100 == 0 ? 50.0f : 1.0f); break;
        case 3: x[i] = uniform() * 3 + 0.5f; break;
        case 4: x[i] = next_u32() % 10 < 3 ? 0.0f : gaussish() * 1e-3f; break;
        case 5: x[i] = (float)((int)(next_u32() % 9) - 4) * 0.25f; break;
        }
    }
    if (r % 7 == 6)
        for (int i = 0; i < 256 && i < n; i++) x[i] = 0.0f;
}

static const tq_type weight_types[] = { TQ_Q4_K, TQ_Q5_K, TQ_Q6_K };

/* ---- layouts ----------------------------------------------------------- */

/* A Q4_K block built field by field; dequantize must give d*sc*q - dmin*mn
 * with sc/mn from the 12-byte packing (here decoded bit by bit). */
static void test_q4_K_layout(void)
{
    tq_block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = tq_f32_to_f16(0.5f);
    b.dmin = tq_f32_to_f16(0.25f);
    uint8_t sc[8] = { 1, 2, 3, 63, 17, 33, 48, 62 }, mn[8] = { 0, 5, 63, 7, 31, 32, 16, 1 };
    for (int j = 0; j < 8; j++) {
        for (int bit = 0; bit < 6; bit++) {   /* where the format puts bit `bit` */
            int sb = (sc[j] >> bit) & 1, mb = (mn[j] >> bit) & 1;
            if (j < 4) {
                b.scales[j] |= (uint8_t)(sb << bit);
                b.scales[j + 4] |= (uint8_t)(mb << bit);
            } else if (bit < 4) {
                b.scales[j + 4] |= (uint8_t)(sb << bit | mb << (bit + 4));
            } else {
                b.scales[j - 4] |= (uint8_t)(sb << (bit + 2));
                b.scales[j] |= (uint8_t)(mb << (bit + 2));
            }
        }
    }
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)(i * 37 + 11);
    float y[256];
    tq_dequantize_row(TQ_Q4_K, &b, y, 256);
    int bad = 0;
    for (int v = 0; v < 256; v++) {
        int j = v / 32, byte = 32 * (v / 64) + v % 32;
        int q = (v / 32) % 2 ? b.qs[byte] >> 4 : b.qs[byte] & 15;
        float want = 0.5f * sc[j] * q - 0.25f * mn[j];
        bad += y[v] != want;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Q5_K adds bit j of qh[l] as value 32j+l's fifth bit; Q6_K's level of
 * value 32k+l in each half, minus 32, times its 16-value scale. */
static void test_q5_q6_layout(void)
{
    tq_block_q5_K b5;
    memset(&b5, 0, sizeof b5);
    b5.d = tq_f32_to_f16(1.0f);
    for (int j = 0; j < 4; j++) b5.scales[j] = 1;   /* sc 1 for runs 0..3 */
    b5.scales[8] = b5.scales[9] = b5.scales[10] = b5.scales[11] = 0x01;   /* and 4..7 */
    for (int l = 0; l < 32; l++) b5.qh[l] = (uint8_t)(l * 29 + 3);
    for (int i = 0; i < 128; i++) b5.qs[i] = (uint8_t)(i * 53 + 7);
    float y[256];
    tq_dequantize_row(TQ_Q5_K, &b5, y, 256);
    int bad = 0;
    for (int v = 0; v < 256; v++) {
        int byte = 32 * (v / 64) + v % 32, j = v / 32, l = v % 32;
        int q = (j % 2 ? b5.qs[byte] >> 4 : b5.qs[byte] & 15) | ((b5.qh[l] >> j) & 1) << 4;
        bad += y[v] != (float)q;
    }
    CHECK_EQ_INT(bad, 0);

    tq_block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = tq_f32_to_f16(0.125f);
    for (int j = 0; j < 16; j++) b6.scales[j] = (int8_t)(j * 17 - 128);
    for (int i = 0; i < 128; i++) b6.ql[i] = (uint8_t)(i * 71 + 5);
    for (int i = 0; i < 64; i++) b6.qh[i] = (uint8_t)(i * 13 + 1);
    tq_dequantize_row(TQ_Q6_K, &b6, y, 256);
    bad = 0;
    for (int v = 0; v < 256; v++) {
        int half = v / 128, k = (v % 128) / 32, l = v % 32;
        uint8_t lo = b6.ql[64 * half + l + (k == 1 || k == 3 ? 32 : 0)];
        int q = (k < 2 ? lo & 15 : lo >> 4) | ((b6.qh[32 * half + l] >> (2 * k)) & 3) << 4;
        bad += y[v] != 0.125f * b6.scales[v / 16] * (q - 32);
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- quantizer accuracy ------------------------------------------------ */

/* Relative RMS error of dequant(quant(x)) on gaussian rows; bounds are
 * about 1.3x what the formats reach (Q4_K ~0.076, Q5_K ~0.038, Q6_K
 * ~0.018, Q8_K ~0.0065 of the signal RMS).  Q8_K also obeys the hard bound
 * |x - y| <= |d| / 2 per value. */
static void test_round_trip(void)
{
    enum { N = 256 * 32 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    const struct { tq_type t; double bound; } cases[] = {
        { TQ_Q4_K, 0.10 }, { TQ_Q5_K, 0.05 }, { TQ_Q6_K, 0.025 }, { TQ_Q8_K, 0.0085 },
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        for (int i = 0; i < N; i++) x[i] = gaussish() * (1 + i / 256 % 4);
        tq_quantize_row(cases[c].t, x, q, N);
        tq_dequantize_row(cases[c].t, q, y, N);
        double err = 0, sig = 0;
        for (int i = 0; i < N; i++) {
            err += (double)(x[i] - y[i]) * (x[i] - y[i]);
            sig += (double)x[i] * x[i];
        }
        double rel = sqrt(err / sig);
        if (rel > cases[c].bound)
            fprintf(stderr, "%s: relative rms error %.4f\n", tq_get(cases[c].t)->name, rel);
        CHECK(rel <= cases[c].bound);
        CHECK(rel > 0);
    }

    int over = 0;
    const tq_block_q8_K *b = (const tq_block_q8_K *)q;
    for (int i = 0; i < N; i++) over += fabsf(x[i] - y[i]) > fabsf(b[i / 256].d) * 0.5f * 1.0001f;
    CHECK_EQ_INT(over, 0);

    /* all-zero input gives zero blocks that dequantize to zeros */
    memset(x, 0, 256 * sizeof *x);
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        memset(q, 0x5a, sizeof q);
        tq_quantize_row(cases[c].t, x, q, 256);
        tq_dequantize_row(cases[c].t, q, y, 256);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += y[i] != 0;
        CHECK_EQ_INT(nonzero, 0);
    }
}

/* ---- the dot's error budget -------------------------------------------- */

/*
 * The integer kernel must compute sum_i w_i * a_i of the dequantized rows up
 * to float rounding.  Rounding is relative to the magnitudes summed before
 * they cancel: the scale part |d*sc*q*a| and the min part |dmin*mn*a|,
 * bounded here by sum |w*a| + sum |min_i * a_i| with min_i the value a level
 * of 0 decodes to (0 for Q6_K).  Budget: 1e-5 of that plus 1e-6.  Returns
 * whether tq_vec_dot_ref(wt, n, qw, qa) is within it; *got, *exact, *mag
 * for the message.
 */
static bool dot_in_budget(tq_type wt, int n, const void *qw, const void *qa, float *got, double *exact,
                          double *mag)
{
    float *wd = malloc((size_t)n * sizeof *wd), *ad = malloc((size_t)n * sizeof *ad);
    float *zero_level = calloc((size_t)n, sizeof *zero_level);
    uint8_t *qz = malloc(tq_row_size(wt, n));
    tq_dequantize_row(wt, qw, wd, n);
    tq_dequantize_row(TQ_Q8_K, qa, ad, n);
    /* the decode of level 0: the block with every level cleared */
    memcpy(qz, qw, tq_row_size(wt, n));
    for (int k = 0; k < n / 256; k++) {
        if (wt == TQ_Q4_K) memset(((tq_block_q4_K *)qz)[k].qs, 0, 128);
        if (wt == TQ_Q5_K) {
            memset(((tq_block_q5_K *)qz)[k].qs, 0, 128);
            memset(((tq_block_q5_K *)qz)[k].qh, 0, 32);
        }
    }
    if (wt != TQ_Q6_K) tq_dequantize_row(wt, qz, zero_level, n);
    *exact = 0;
    *mag = 0;
    for (int i = 0; i < n; i++) {
        *exact += (double)wd[i] * ad[i];
        *mag += fabs((double)wd[i] * ad[i]) + fabs((double)zero_level[i] * ad[i]);
    }
    *got = tq_vec_dot_ref(wt, n, qw, qa);
    free(wd);
    free(ad);
    free(zero_level);
    free(qz);
    return fabs(*got - *exact) <= 1e-5 * *mag + 1e-6;
}

/* ---- the generated rows: quantizers and dots against their definitions -- */

/*
 * 96 rows x 4096 values of fill_row() (six shapes: small and wide gaussian,
 * uniform, outliers x50, offset, 30% zeros, 9 exact levels; every 7th row
 * starting with an all-zero super-block), each checked against values
 * computed here, nothing against stored hashes:
 *   - Q8_K: per value |x - d*q| <= |d|/2 (the hard bound of rounding to the
 *     nearest level), the first value of largest magnitude at level -127,
 *     bsums the sums of each 16 levels, all-zero blocks all zero;
 *   - Q4_K / Q5_K / Q6_K: each row's relative RMS error of dequant(quant(x))
 *     within the format's budget (test_round_trip's: 0.10, 0.05, 0.025;
 *     twice that for the outlier rows, where a sub-block's step is set by
 *     its outlier and its other values round coarsely: they reach 0.087,
 *     0.054, 0.036), all-zero super-blocks decoding to zeros;
 *   - each weight row's dot with the next row's Q8_K within dot_in_budget.
 */
static void test_golden(void)
{
    enum { N = 4096, ROWS = 96 };
    static float x[ROWS][N], y[N];
    static uint8_t qa[ROWS][N / 256 * sizeof(tq_block_q8_K)];
    static uint8_t qw[N / 256 * sizeof(tq_block_q6_K)];
    rng = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < ROWS; r++) fill_row(x[r], N, r);

    int bad8 = 0;
    for (int r = 0; r < ROWS; r++) {
        tq_quantize_row(TQ_Q8_K, x[r], qa[r], N);
        for (int k = 0; k < N / 256; k++) {
            const tq_block_q8_K *b = (const tq_block_q8_K *)qa[r] + k;
            const float *xb = x[r] + 256 * k;
            int peak = 0;
            for (int l = 1; l < 256; l++) peak = fabsf(xb[l]) > fabsf(xb[peak]) ? l : peak;
            if (xb[peak] == 0) {
                int nonzero = b->d != 0;
                for (int l = 0; l < 256; l++) nonzero += b->qs[l] != 0;
                for (int g = 0; g < 16; g++) nonzero += b->bsums[g] != 0;
                bad8 += nonzero > 0;
                continue;
            }
            bad8 += b->qs[peak] != -127;
            for (int l = 0; l < 256; l++) bad8 += fabsf(xb[l] - b->d * b->qs[l]) > fabsf(b->d) * 0.5f * 1.0001f;
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += b->qs[16 * g + l];
                bad8 += b->bsums[g] != sum;
            }
        }
    }
    if (bad8) fprintf(stderr, "generated rows q8_K: %d values or sums off\n", bad8);
    CHECK_EQ_INT(bad8, 0);

    static const double budget[] = { 0.10, 0.05, 0.025 };   /* as weight_types */
    for (size_t t = 0; t < ARRAY_LEN(weight_types); t++) {
        tq_type wt = weight_types[t];
        int n_rms = 0, n_zero = 0, n_dot = 0;
        double worst = 0;
        for (int r = 0; r < ROWS; r++) {
            tq_quantize_row(wt, x[r], qw, N);
            tq_dequantize_row(wt, qw, y, N);
            double err = 0, sig = 0;
            for (int i = 0; i < N; i++) {
                err += (double)(x[r][i] - y[i]) * (x[r][i] - y[i]);
                sig += (double)x[r][i] * x[r][i];
            }
            double rel = sqrt(err / sig);
            worst = fmax(worst, rel);
            n_rms += !(rel <= budget[t] * (r % 6 == 2 ? 2 : 1));
            if (r % 7 == 6)
                for (int i = 0; i < 256; i++) n_zero += y[i] != 0;
            float got;
            double exact, mag;
            if (!dot_in_budget(wt, N, qw, qa[(r + 1) % ROWS], &got, &exact, &mag) && n_dot++ < 3)
                fprintf(stderr, "generated row %d %s: dot %.9g vs dequantized %.9g (mag %.3g)\n", r,
                        tq_get(wt)->name, got, exact, mag);
        }
        if (n_rms || n_zero)
            fprintf(stderr, "generated rows %s: %d rows over the rms budget %.3f (worst %.4f), %d zeros not zero\n",
                    tq_get(wt)->name, n_rms, budget[t], worst, n_zero);
        CHECK_EQ_INT(n_rms, 0);
        CHECK_EQ_INT(n_zero, 0);
        CHECK_EQ_INT(n_dot, 0);
    }
}

/* ---- SIMD against the scalar reference --------------------------------- */

/* Inputs that stress the Q8_K quantizer: ties at .5 after scaling, the
 * same magnitude with both signs (the first occurrence decides the sign),
 * a lone spike, subnormals (-127 / peak overflows), large values, NaN and
 * infinity (the reference's results for them are odd but defined). */
static void q8_K_edge_row(float *x, int kind)
{
    for (int i = 0; i < 256; i++) {
        switch (kind) {
        case 0: x[i] = (float)((int)(next_u32() % 253) - 126) * 0.5f; break;   /* ties */
        case 1: x[i] = (i % 2 ? 3.0f : -3.0f) * (next_u32() % 4 == 0); break;
        case 2: x[i] = i == 200 ? -1e-3f : 1e-9f * gaussish(); break;
        case 3: x[i] = 1e-40f * (float)(int)(next_u32() % 7 - 3); break;       /* subnormal */
        case 4: x[i] = 3e37f * gaussish(); break;
        case 5: x[i] = next_u32() % 50 == 0 ? NAN : gaussish(); break;
        case 6: x[i] = i == 77 ? -INFINITY : gaussish(); break;
        default: x[i] = gaussish(); break;
        }
    }
    if (kind == 0) x[next_u32() % 256] = (next_u32() & 1) ? 127.0f : -127.0f;
}

static void test_q8_K_simd(const tk_ops *ref, const tk_ops *simd)
{
    static float x[256 * 19];
    static tq_block_q8_K a[19], b[19];
    int rows = 0, diff = 0;
    for (int kind = 0; kind < 8; kind++) {
        for (int rep = 0; rep < 40; rep++) {
            int n = 256 * (1 + rep % 19);
            for (int k = 0; k < n / 256; k++) q8_K_edge_row(x + 256 * k, (kind + k) % 8);
            memset(a, 0x11, sizeof a);
            memset(b, 0x22, sizeof b);
            ref->quantize[TQ_Q8_K](x, a, n);
            simd->quantize[TQ_Q8_K](x, b, n);
            diff += memcmp(a, b, (size_t)n / 256 * sizeof *a) != 0;
            rows++;
        }
    }
    if (diff) fprintf(stderr, "%s: q8_K differs on %d of %d rows\n", simd->isa, diff, rows);
    CHECK_EQ_INT(diff, 0);
}

/* Dots for n in {256, 512, 4864}: equal bit for bit to the scalar kernel
 * (tk_kquant_*.c keep the reference's lanes and order), hence also within
 * tk.h's budget, which is checked on its own in case that design changes. */
static void test_dots_simd(const tk_ops *ref, const tk_ops *simd)
{
    static const int sizes[] = { 256, 512, 4864 };
    static float w[4864], x[4864], wd[4864], ad[4864];
    static uint8_t qw[4864], qa[4864 / 256 * sizeof(tq_block_q8_K)];
    for (size_t t = 0; t < ARRAY_LEN(weight_types); t++) {
        tq_type wt = weight_types[t];
        int n_exact = 0, n_budget = 0, n_cases = 0;
        for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
            int n = sizes[s];
            for (int rep = 0; rep < 30; rep++) {
                for (int i = 0; i < n; i++) {
                    w[i] = gaussish() * 0.05f + (rep % 3 == 0 ? 0.02f : 0.0f);
                    x[i] = gaussish() * (rep % 5 == 0 ? 40.0f : 1.0f);
                }
                tq_quantize_row(wt, w, qw, n);
                ref->quantize[TQ_Q8_K](x, qa, n);
                float r = ref->vec_dot[wt](n, qw, qa), v = simd->vec_dot[wt](n, qw, qa);
                tq_dequantize_row(wt, qw, wd, n);
                tq_dequantize_row(TQ_Q8_K, qa, ad, n);
                double mag = 0;
                for (int i = 0; i < n; i++) mag += fabs((double)wd[i] * ad[i]);
                n_exact += memcmp(&r, &v, sizeof r) == 0;
                n_budget += fabs((double)v - r) <= 1e-5 * mag + 1e-6;
                n_cases++;
            }
        }
        if (n_exact != n_cases)
            fprintf(stderr, "%s %s: %d of %d dots not bit-equal\n", simd->isa, tq_get(wt)->name,
                    n_cases - n_exact, n_cases);
        CHECK_EQ_INT(n_exact, n_cases);
        CHECK_EQ_INT(n_budget, n_cases);
    }
}

/* ---- the dot against dequantized values -------------------------------- */

/* Gaussian rows, with and without an offset and wide activations, through
 * dot_in_budget. */
static void test_dot_vs_dequant(void)
{
    enum { N = 4864 };
    static float w[N], x[N];
    static uint8_t qw[N], qa[N / 256 * sizeof(tq_block_q8_K)];
    for (size_t t = 0; t < ARRAY_LEN(weight_types); t++) {
        tq_type wt = weight_types[t];
        int bad = 0;
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < N; i++) {
                w[i] = gaussish() * 0.05f + (rep % 2 ? 0.03f : 0.0f);
                x[i] = gaussish() * (rep % 4 == 0 ? 25.0f : 1.0f);
            }
            tq_quantize_row(wt, w, qw, N);
            tq_quantize_row(TQ_Q8_K, x, qa, N);
            float got;
            double exact, mag;
            if (!dot_in_budget(wt, N, qw, qa, &got, &exact, &mag) && bad++ < 3)
                fprintf(stderr, "%s: dot %.9g vs dequantized %.9g (mag %.3g)\n", tq_get(wt)->name, got, exact, mag);
        }
        CHECK_EQ_INT(bad, 0);
    }
}

/* ---- a real model file ----------------------------------------------- */

/* Value v (0..255) of a Q4_K / Q6_K block decoded here from the layout the
 * layout tests above build bit by bit, not by tq_kquant.c: Q4_K's 6-bit
 * scale and min j from the 12-byte packing, level from nibble v%32 of byte
 * run v/64, y = (d*sc)*q - dmin*mn (exact products, one rounding); Q6_K's
 * level from ql/qh, y = d*scale*(q-32) in that order. */
static float layout_q4_K(const tq_block_q4_K *b, int v)
{
    int j = v / 32, sc, mn;
    if (j < 4) {
        sc = b->scales[j] & 63;
        mn = b->scales[j + 4] & 63;
    } else {
        sc = (b->scales[j + 4] & 15) | (b->scales[j - 4] >> 6) << 4;
        mn = (b->scales[j + 4] >> 4) | (b->scales[j] >> 6) << 4;
    }
    uint8_t byte = b->qs[32 * (v / 64) + v % 32];
    int q = j % 2 ? byte >> 4 : byte & 15;
    return tq_f16_to_f32(b->d) * (float)sc * (float)q - tq_f16_to_f32(b->dmin) * (float)mn;
}

static float layout_q6_K(const tq_block_q6_K *b, int v)
{
    int half = v / 128, k = (v % 128) / 32, l = v % 32;
    uint8_t lo = b->ql[64 * half + l + (k == 1 || k == 3 ? 32 : 0)];
    int q = (k < 2 ? lo & 15 : lo >> 4) | ((b->qh[32 * half + l] >> (2 * k)) & 3) << 4;
    return tq_f16_to_f32(b->d) * (float)b->scales[v / 16] * (float)(q - 32);
}

/*
 * The first 16 rows of every Q4_K / Q6_K tensor of the reference engine's
 * Q4_K_M file against a generated Q8_K row (reseeded per tensor): the
 * dequantized weights equal the layout decode above bit for bit and are
 * finite, every ISA's dot equals the scalar one bit for bit, and the scalar
 * dot is within dot_in_budget of the dequantized rows.
 */
static void test_real_model(const tk_ops *const ops[], int n_ops)
{
    const char *dir = test_shared_dir();
    char path[512];
    static const char file[] = "rand-llama-llama3vocab-e256-l2-Q4_K_M.gguf";
    snprintf(path, sizeof path, "%s/models/%s", dir ? dir : ".", file);
    if (!dir || access(path, R_OK) != 0) {
        SKIP_PART("models/%s absent: real-model check not run", file);
        return;
    }
    gguf_ctx *g = NULL;
    char err[256];
    CHECK_EQ_INT(gguf_open(path, &g, err, sizeof err), PK_OK);
    if (!g) return;
    int n_q4 = 0, n_q6 = 0, n_rows = 0, n_simd_diff = 0, n_far = 0, n_nonfinite = 0, n_decode_diff = 0;
    for (int64_t ti = 0; ti < gguf_n_tensors(g); ti++) {
        const gguf_tensor *t = gguf_tensor_at(g, ti);
        if (t->type != TQ_Q4_K && t->type != TQ_Q6_K) continue;
        n_q4 += t->type == TQ_Q4_K;
        n_q6 += t->type == TQ_Q6_K;
        int64_t n = t->ne[0], rows = t->nbytes / tq_row_size(t->type, n);
        float *x = malloc(n * sizeof *x), *wd = malloc(n * sizeof *wd);
        void *qa = malloc(tq_row_size(TQ_Q8_K, n));
        rng = 0x1234567ull + (uint64_t)ti;
        for (int64_t i = 0; i < n; i++) x[i] = gaussish();
        tq_quantize_row(TQ_Q8_K, x, qa, n);
        for (int64_t r = 0; r < rows && r < 16; r++, n_rows++) {
            const uint8_t *w = (const uint8_t *)t->data + r * tq_row_size(t->type, n);
            float s = tq_vec_dot_ref(t->type, n, w, qa);
            for (int o = 0; o < n_ops; o++) {
                float v = ops[o]->vec_dot[t->type](n, w, qa);
                n_simd_diff += memcmp(&s, &v, sizeof s) != 0;
            }
            tq_dequantize_row(t->type, w, wd, n);
            for (int64_t i = 0; i < n; i++) {
                n_nonfinite += !isfinite(wd[i]);
                float want = t->type == TQ_Q4_K ? layout_q4_K((const tq_block_q4_K *)w + i / 256, (int)(i % 256))
                                                : layout_q6_K((const tq_block_q6_K *)w + i / 256, (int)(i % 256));
                n_decode_diff += memcmp(&want, &wd[i], sizeof want) != 0;
            }
            float got;
            double exact, mag;
            if (!dot_in_budget(t->type, (int)n, w, qa, &got, &exact, &mag) && n_far++ < 3)
                fprintf(stderr, "tensor %lld row %lld: dot %.9g vs dequantized %.9g (mag %.3g)\n",
                        (long long)ti, (long long)r, got, exact, mag);
        }
        free(x);
        free(wd);
        free(qa);
    }
    gguf_close(g);
    if (n_decode_diff) fprintf(stderr, "real model: %d values of %d rows decode differently\n", n_decode_diff, n_rows);
    CHECK_EQ_INT(n_q4, 12);
    CHECK_EQ_INT(n_q6, 3);
    CHECK(n_rows > 0);
    CHECK_EQ_INT(n_decode_diff, 0);
    CHECK_EQ_INT(n_simd_diff, 0);
    CHECK_EQ_INT(n_far, 0);
    CHECK_EQ_INT(n_nonfinite, 0);
}

/* ---- benchmark (POLYKV_BENCH=1) ---------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GB/s of weight bytes for one thread over a 896 x 4864 matrix: best of a
 * few passes (the machine is shared).  The kernels were validated above. */
static void bench(const tk_ops *const ops[], int n_ops)
{
    enum { ROWS = 896, COLS = 4864 };
    float *xf = malloc(COLS * sizeof *xf), *tmp = malloc(COLS * sizeof *tmp);
    uint8_t *qa = malloc(COLS / 256 * sizeof(tq_block_q8_K));
    for (int i = 0; i < COLS; i++) xf[i] = gaussish();
    tq_quantize_row(TQ_Q8_K, xf, qa, COLS);
    for (size_t t = 0; t < ARRAY_LEN(weight_types); t++) {
        tq_type wt = weight_types[t];
        size_t row_bytes = tq_row_size(wt, COLS);
        uint8_t *w = malloc(row_bytes * ROWS);
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < COLS; i++) tmp[i] = gaussish() * 0.05f;
            tq_quantize_row(wt, tmp, w + r * row_bytes, COLS);
        }
        for (int o = 0; o < n_ops; o++) {
            double best = 1e30;
            volatile float sink = 0;
            for (int pass = 0; pass < 5; pass++) {
                double t0 = now_s();
                for (int r = 0; r < ROWS; r++) sink += ops[o]->vec_dot[wt](COLS, w + r * row_bytes, qa);
                double dt = now_s() - t0;
                if (dt < best) best = dt;
            }
            printf("bench %-6s %s: %.2f GB/s (%.3f ms per %dx%d matvec)\n", ops[o]->isa,
                   tq_get(wt)->name, row_bytes * ROWS / best * 1e-9, best * 1e3, ROWS, COLS);
        }
        free(w);
    }
    for (int o = 0; o < n_ops; o++) {
        double best = 1e30;
        for (int pass = 0; pass < 5; pass++) {
            double s = now_s();
            for (int r = 0; r < 200; r++) ops[o]->quantize[TQ_Q8_K](xf, qa, COLS);
            double dt = now_s() - s;
            if (dt < best) best = dt;
        }
        printf("bench %-6s q8_K quantize: %.2f GB/s of floats\n", ops[o]->isa,
               200.0 * COLS * sizeof(float) / best * 1e-9);
    }
    free(xf);
    free(tmp);
    free(qa);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    test_q4_K_layout();
    TEST_RUN(test_q5_q6_layout);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_golden);
    TEST_RUN(test_dot_vs_dequant);

    const tk_ops *ref = tk_ops_named("scalar");
    CHECK(ref != NULL);
    const tk_ops *ops[3] = { ref };
    int n_ops = 1;
    const char *simd_names[] = { "avx2", "avx512" };
    for (size_t i = 0; ref && i < ARRAY_LEN(simd_names); i++) {
        const tk_ops *simd = tk_ops_named(simd_names[i]);
        if (!simd) {
            SKIP_PART("%s kernels not run: this CPU lacks the instructions", simd_names[i]);
            continue;
        }
        test_q8_K_simd(ref, simd);
        TEST_RUN(test_dots_simd, ref, simd);
        ops[n_ops++] = simd;
    }
    if (ref) test_real_model(ops, n_ops);
    if (ref && getenv("POLYKV_BENCH")) bench(ops, n_ops);
    return test_finish();
}
