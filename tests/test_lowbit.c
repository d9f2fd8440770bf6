/*
 * test_lowbit.c - the weight formats added for the files people download
 * after Q4_K_M: Q2_K and Q3_K (against Q8_K activations), IQ4_NL (against
 * Q8_0) and IQ4_XS (against Q8_K).
 *
 *   - layouts: blocks built field by field here, decoded here bit by bit,
 *     and dequantize must give the same floats;
 *   - quantizers: relative RMS error of dequant(quant(x)) within each
 *     format's budget, all-zero input decoding to zeros;
 *   - the reference dot against the dequantized rows within an error budget
 *     computed from the magnitudes summed (dot_in_budget);
 *   - every SIMD table's dot equal to the scalar one bit for bit (the
 *     kernels keep the reference's integer lanes and float order), and
 *     within the budget on its own;
 *   - tk_matmul at 1, 3, 9 and 40 tokens equal to one scalar dot per output.
 *
 * Every expected value is computed at test time; nothing is read from
 * another program.  (bench/quant_logits.sh compares whole models with the
 * reference engine; it needs the reference build beside the project.)
 */
#include "../src/tensor/tk.h"
#include "test.h"

#include <math.h>
#include <stdint.h>

#define TEST_RNG_SEED 0x853c49e6748fea9bull
#include "test_rng.h"

static const tq_type types[] = { TQ_Q2_K, TQ_Q3_K, TQ_IQ4_NL, TQ_IQ4_XS };

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
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(tq_row_size(TQ_Q2_K, 256), 84);
    CHECK_EQ_INT(tq_row_size(TQ_Q3_K, 512), 220);
    CHECK_EQ_INT(tq_row_size(TQ_IQ4_NL, 64), 36);
    CHECK_EQ_INT(tq_row_size(TQ_IQ4_XS, 256), 136);
    CHECK_EQ_INT(tq_get(TQ_IQ4_NL)->vec_dot_type, TQ_Q8_0);
    CHECK_EQ_INT(tq_get(TQ_IQ4_XS)->vec_dot_type, TQ_Q8_K);
}

/* ---- quantizer accuracy -------------------------------------------------- */

/* Relative RMS error on gaussian rows of 4 widths; bounds about 1.25x what
 * the formats reach here (Q2_K 0.284, Q3_K 0.144, IQ4_NL 0.073, IQ4_XS
 * 0.075). */
static void test_round_trip(void)
{
    enum { N = 256 * 32 };
    static float x[N], y[N];
    static uint8_t q[N];
    const double bound[] = { 0.355, 0.18, 0.092, 0.094 };   /* as types[] */
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
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
            tq_quantize_row(types[t], w, qw, N);
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
                tq_quantize_row(wt, w, qw, n);
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

/* ---- the threaded product ------------------------------------------------- */

/* tk_matmul (the table this CPU chose) on 2 threads against one scalar dot
 * per output, bit for bit, at token counts that take every path tk.h lists. */
static void test_matmul(void)
{
    enum { ROWS = 40, COLS = 768, MAX_TOK = 40 };
    static float w[COLS], x[MAX_TOK * COLS], y[MAX_TOK * ROWS];
    static uint8_t qw[ROWS * COLS], qa[COLS * 2];
    const tk_ops *ref = tk_ops_named("scalar");
    tp_pool *tp = NULL;
    CHECK(tp_new(2, &tp) == PK_OK);
    if (!tp) return;
    static const int n_toks[] = { 1, 3, 9, MAX_TOK };
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        tq_type wt = types[t];
        size_t wrow = tq_row_size(wt, COLS);
        for (int r = 0; r < ROWS; r++) {
            float dummy[COLS];
            fill(w, dummy, COLS, r);
            tq_quantize_row(wt, w, qw + r * wrow, COLS);
        }
        for (int i = 0; i < MAX_TOK * COLS; i++) x[i] = gaussish();
        int bad = 0;
        for (size_t k = 0; k < ARRAY_LEN(n_toks); k++) {
            int nt = n_toks[k];
            void *scratch = malloc(tk_matmul_scratch_size(wt, COLS, nt));
            tk_matmul(tp, wt, qw, ROWS, COLS, x, nt, y, scratch);
            for (int tok = 0; tok < nt; tok++) {
                quantize_act(wt, x + tok * COLS, qa, COLS);
                for (int r = 0; r < ROWS; r++) {
                    float want = ref->vec_dot[wt](COLS, qw + r * wrow, qa);
                    bad += memcmp(&want, &y[tok * ROWS + r], sizeof want) != 0;
                }
            }
            free(scratch);
        }
        if (bad) fprintf(stderr, "matmul %s: %d outputs differ from the scalar dot\n", tq_get(wt)->name, bad);
        CHECK_EQ_INT(bad, 0);
    }
    tp_free(tp);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_layouts);
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
    }
    if (ref) test_matmul();
    return test_finish();
}
