/*
 * test_tensor.c - element types (tq.h) and kernels (tk.h).
 *
 * Checked: the traits table; half/bfloat16 conversion (exhaustive half ->
 * float -> half, float -> half against the F16C instruction on a million
 * patterns around every rounding boundary); hand-built blocks of every
 * 32-value format dequantize to the GGUF layout; quantize/dequantize round
 * trips within each format's step; every SIMD dot within tk.h's budget of
 * the scalar reference and every SIMD activation converter bit-exact;
 * attention, RMSNorm and SwiGLU within their budgets of the scalar ones; and
 * tk_matmul / tk_matmul_job / tk_matmul_multi_job for several token counts:
 * within budget of the reference, equal to the chosen vec_dot below the
 * GEMM threshold, the same on 1 and 2 threads and whatever a token's place
 * in the batch.  The quantizers on rows with ties and wide scales, and the
 * dequantized weights and dots of the shared model files, against values
 * computed at test time from the formats' definitions (test_golden states
 * each error budget); no hash of another program's output is pinned.
 */
#include "../src/gguf/gguf.h"
#include "../src/tensor/tk.h"
#include "../src/tensor/tk_impl.h"
#include "test.h"

#include <immintrin.h>
#include <stdint.h>
#include <sys/wait.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rnd_unit(void)   /* uniform in [-1, 1) */
{
    return (float)((double)rnd_u32() / 2147483648.0 - 1.0);
}

/* Activation-like data: mostly small, a few outliers, varying block scale. */
static void fill_random(float *x, int64_t n)
{
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = 0.01f + 2.0f * (rnd_unit() + 1.0f);
        float v = (rnd_unit() + rnd_unit() + rnd_unit()) * scale;
        if (rnd_u32() % 97 == 0) v *= 8.0f;
        x[i] = v;
    }
}

/* A block of a lattice format (tq.h: no quantizer) of random bytes with its
 * f16 scale 1/64: at the start, or for IQ1_M in the top nibbles of its 4
 * scale words. */
static void lattice_block(tq_type t, uint8_t *blk)
{
    for (size_t i = 0; i < tq_get(t)->type_size; i++) blk[i] = (uint8_t)rnd_u32();
    tq_f16 h = tq_f32_to_f16(1.0f / 64);
    if (t != TQ_IQ1_M) {
        memcpy(blk, &h, sizeof h);
        return;
    }
    for (int k = 0; k < 4; k++) blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 15) | ((h >> 4 * k) & 15) << 4);
}

static const tq_type legacy_types[] = {
    TQ_F32, TQ_F16, TQ_BF16, TQ_Q4_0, TQ_Q4_1, TQ_Q5_0, TQ_Q5_1, TQ_Q8_0,
};

static const char *const isa_list[] = { "scalar", "avx2", "avx512" };

/* ---- traits ----------------------------------------------------------------- */

static void test_traits(void)
{
    CHECK(tq_get(-1) == NULL);
    CHECK(tq_get(4) == NULL);                /* ids 4, 5 were removed from GGUF */
    CHECK(tq_get(TQ_COUNT) == NULL);
    CHECK_STR(tq_get(TQ_Q4_K)->name, "q4_K");
    CHECK_EQ_INT(tq_get(TQ_Q4_0)->type_size, 18);
    CHECK_EQ_INT(tq_get(TQ_Q5_1)->type_size, 24);
    CHECK_EQ_INT(tq_get(TQ_Q6_K)->type_size, 210);
    CHECK_EQ_INT(tq_get(TQ_Q8_K)->type_size, 292);
    CHECK_EQ_INT(tq_get(TQ_BF16)->blck_size, 1);
    CHECK_EQ_INT(tq_get(TQ_Q4_1)->vec_dot_type, TQ_Q8_0);
    CHECK_EQ_INT(tq_get(TQ_Q5_K)->vec_dot_type, TQ_Q8_K);
    CHECK_EQ_INT(tq_get(TQ_F16)->vec_dot_type, TQ_F16);
    CHECK(!tq_get(TQ_Q8_1)->supported);     /* known, never produced */
    CHECK(tq_get(TQ_Q2_K)->supported);
    CHECK(tq_get(TQ_Q6_K)->supported);
    CHECK_EQ_INT(tq_row_size(TQ_Q8_0, 4864), 4864 / 32 * 34);
    CHECK_EQ_INT(tq_row_size(TQ_Q8_0, 33), 0);
    CHECK_EQ_INT(tq_row_size(TQ_F32, 7), 28);
    CHECK_EQ_INT(tq_row_size(TQ_Q4_K, 512), 288);
    CHECK_EQ_INT(tq_row_size(77, 32), 0);
}

/* ---- half / bfloat16 ---------------------------------------------------------- */

__attribute__((target("f16c"))) static tq_f16 hw_f32_to_f16(float f)
{
    return (tq_f16)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_f16(void)
{
    /* half -> float -> half is the identity except NaN, which stays NaN
     * with the quiet bit set. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tq_f16_to_f32((tq_f16)h);
        tq_f16 back = tq_f32_to_f16(f);
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? back != (h | 0x200) || !isnan(f) : back != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(tq_f16_to_f32(0x3c00) == 1.0f);
    CHECK(tq_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    CHECK(tq_f16_to_f32(0xfbff) == -65504.0f);
    CHECK_EQ_INT(tq_f32_to_f16(65519.99f), 0x7bff);
    CHECK_EQ_INT(tq_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ_INT(tq_f32_to_f16(-INFINITY), 0xfc00);
    CHECK_EQ_INT(tq_f32_to_f16(2.9802322387695312e-08f), 0);   /* 2^-25: tie to even 0 */
    CHECK_EQ_INT(tq_f32_to_f16(2.9802326e-08f), 1);             /* just above */

    if (!__builtin_cpu_supports("f16c")) {
        SKIP_PART("no F16C: float -> half not compared with hardware");
        return;
    }
    /* Every exponent, mantissas around the rounding points of every shift
     * (normal halves round at bit 13, subnormal ones at bits 14..24). */
    bad = 0;
    for (uint32_t e = 0; e < 256; e++) {
        for (int k = 0; k < 4096; k++) {
            uint32_t m;
            if (k < 3 * 12) {
                int bit = 13 + k / 3;    /* 13 .. 24 */
                m = (1u << (bit - 1)) + (uint32_t)(k % 3) - 1;   /* half-way -1, 0, +1 */
                m |= (rnd_u32() << bit) & 0x7fffff;
            } else {
                m = rnd_u32() & 0x7fffff;
            }
            for (uint32_t s = 0; s < 2; s++) {
                float f = bits_f32(s << 31 | e << 23 | m);
                if (tq_f32_to_f16(f) != hw_f32_to_f16(f)) bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_bf16(void)
{
    CHECK_EQ_INT(tq_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x3f808000)), 0x3f80);   /* tie, even stays */
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x3f818000)), 0x3f82);   /* tie, odd rounds up */
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x3f808001)), 0x3f81);
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x7f800001)), 0x7fc0);   /* signalling NaN quieted */
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x00008000)), 0x0000);   /* subnormal kept, tie to even */
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x00018000)), 0x0002);
    CHECK_EQ_INT(tq_f32_to_bf16(bits_f32(0x7f7fffff)), 0x7f80);   /* FLT_MAX rounds to inf */
    CHECK(tq_bf16_to_f32(0xc040) == -3.0f);
}

/* ---- block layouts ---------------------------------------------------------- */

static void test_layouts(void)
{
    float y[32];
    /* Q4_0: d = 1, low nibble of byte j is value j, high nibble value j + 16. */
    tq_block_q4_0 b4 = { .d = 0x3c00 };
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | (15 - j) << 4);
    tq_dequantize_row(TQ_Q4_0, &b4, y, 32);
    int bad = 0;
    for (int j = 0; j < 16; j++) bad += y[j] != j - 8 || y[j + 16] != 7 - j;
    CHECK_EQ_INT(bad, 0);

    /* Q4_1: d = 2, m = -1. */
    tq_block_q4_1 b41 = { .d = 0x4000, .m = 0xbc00 };
    memcpy(b41.qs, b4.qs, 16);
    tq_dequantize_row(TQ_Q4_1, &b41, y, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) bad += y[j] != 2 * j - 1 || y[j + 16] != 2 * (15 - j) - 1;
    CHECK_EQ_INT(bad, 0);

    /* Q5_0 / Q5_1: bit j of qh (little endian) is bit 4 of value j. */
    uint32_t qh = 0x80000001u | 1u << 16;   /* values 0, 16, 31 get the high bit */
    tq_block_q5_0 b5 = { .d = 0x3c00 };
    memcpy(b5.qh, &qh, 4);
    memcpy(b5.qs, b4.qs, 16);
    tq_dequantize_row(TQ_Q5_0, &b5, y, 32);
    CHECK(y[0] == 0 + 16 - 16);
    CHECK(y[1] == 1 - 16);
    CHECK(y[16] == 15 + 16 - 16);
    CHECK(y[17] == 14 - 16);
    CHECK(y[31] == 0 + 16 - 16);
    tq_block_q5_1 b51 = { .d = 0x3c00, .m = 0x3c00 };
    memcpy(b51.qh, &qh, 4);
    memcpy(b51.qs, b4.qs, 16);
    tq_dequantize_row(TQ_Q5_1, &b51, y, 32);
    CHECK(y[0] == 17);
    CHECK(y[15] == 16);
    CHECK(y[16] == 32);
    CHECK(y[30] == 2);

    /* Q8_0 activation quantizer: d = amax / 127, q = round-half-even(x * 127 / amax). */
    float x[32] = { 0 };
    x[0] = 127.0f;
    x[1] = -63.5f;    /* exactly half-way: even 64 -> -64 */
    x[2] = 62.5f;     /* half-way: even 62 */
    x[3] = 0.49f;
    tq_block_q8_0 q;
    tq_quantize_row(TQ_Q8_0, x, &q, 32);
    CHECK_EQ_INT(q.d, 0x3c00);
    CHECK_EQ_INT(q.qs[0], 127);
    CHECK_EQ_INT(q.qs[1], -64);
    CHECK_EQ_INT(q.qs[2], 62);
    CHECK_EQ_INT(q.qs[3], 0);
    memset(x, 0, sizeof x);
    tq_quantize_row(TQ_Q8_0, x, &q, 32);
    CHECK_EQ_INT(q.d, 0);
    CHECK_EQ_INT(q.qs[5], 0);
}

/* ---- round trips ------------------------------------------------------------ */

/* Largest |x - dequant(quant(x))| allowed in a block, from the block's data. */
static double roundtrip_bound(tq_type t, const float *x)
{
    float mn = x[0], mx = x[0], amax = 0;
    for (int j = 0; j < 32; j++) {
        mn = fminf(mn, x[j]);
        mx = fmaxf(mx, x[j]);
        amax = fmaxf(amax, fabsf(x[j]));
    }
    const double h = 1.0 / 1024;   /* f16 storage of d and m, relative, with margin */
    const double s = 0x1p-25;      /* ... or absolute (half the f16 subnormal step) for tiny d, m */
    switch (t) {
    case TQ_Q4_0: return amax / 8 * (1 + 8 * h) + 8 * s;   /* the clamped side can lose a full step */
    case TQ_Q5_0: return amax / 16 * (1 + 16 * h) + 16 * s;
    case TQ_Q4_1: return (mx - mn) / 15 * (0.5 + 15 * h) + fabsf(mn) * h + 16 * s;
    case TQ_Q5_1: return (mx - mn) / 31 * (0.5 + 31 * h) + fabsf(mn) * h + 32 * s;
    case TQ_Q8_0: return amax / 127 * (0.5 + 127 * h) + 127 * s;
    case TQ_F16:  return amax * h;
    case TQ_BF16: return amax / 128;
    default:      return 0;
    }
}

static void test_roundtrip(void)
{
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (size_t k = 0; k < ARRAY_LEN(legacy_types); k++) {
        tq_type t = legacy_types[k];
        fill_random(x, N);
        tq_quantize_row(t, x, q, N);
        tq_dequantize_row(t, q, y, N);
        int bad = 0;
        for (int b = 0; b < N / 32; b++) {
            double bound = roundtrip_bound(t, x + b * 32) + 1e-30;
            for (int j = 0; j < 32; j++)
                if (fabs((double)x[b * 32 + j] - y[b * 32 + j]) > bound) bad++;
        }
        if (bad) fprintf(stderr, "round trip %s: %d values off\n", tq_get(t)->name, bad);
        CHECK_EQ_INT(bad, 0);
    }
}

/* ---- SIMD against the reference ------------------------------------------------ */

/* sum_i |w_i a_i| of the dequantized operands: the scale of tk.h's budget. */
static double abs_dot(tq_type wt, int64_t n, const void *w, const void *a)
{
    float *wf = malloc((size_t)n * sizeof *wf), *af = malloc((size_t)n * sizeof *af);
    tq_dequantize_row(wt, w, wf, n);
    tq_dequantize_row(tq_get(wt)->vec_dot_type, a, af, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)wf[i] * af[i]);
    free(wf);
    free(af);
    return s;
}

static void test_simd_dots(const tk_ops *ops)
{
    static const int64_t sizes[] = { 1, 7, 16, 17, 31, 32, 33, 64, 96, 100, 160, 224, 256, 896, 1000, 4864 };
    float *x = malloc(4864 * sizeof *x), *xa = malloc(4864 * sizeof *xa);
    uint8_t *w = malloc(4864 * 4), *a = malloc(4864 * 4);
    for (size_t k = 0; k < ARRAY_LEN(legacy_types); k++) {
        tq_type wt = legacy_types[k];
        tq_type vt = tq_get(wt)->vec_dot_type;
        int bad = 0;
        for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
            int64_t n = sizes[s];
            if (n % tq_get(wt)->blck_size) continue;
            for (int rep = 0; rep < 4; rep++) {
                fill_random(x, n);
                fill_random(xa, n);
                tq_quantize_row(wt, x, w, n);
                ops->quantize[vt](xa, a, n);
                float ref = tq_vec_dot_ref(wt, n, w, a);
                float got = ops->vec_dot[wt](n, w, a);
                double tol = 1e-5 * abs_dot(wt, n, w, a) + 1e-6;
                if (!(fabs((double)got - ref) <= tol)) {
                    if (bad++ < 3)
                        fprintf(stderr, "%s dot %s n=%lld: %.9g vs ref %.9g (tol %.3g)\n", ops->isa,
                                tq_get(wt)->name, (long long)n, got, ref, tol);
                }
            }
        }
        CHECK_EQ_INT(bad, 0);
    }
    free(x);
    free(xa);
    free(w);
    free(a);
}

/*
 * Every dot_rows kernel of the table gives each output the bits its
 * vec_dot gives (so a token's outputs do not depend on its batch): row
 * counts around the 16-row tile, 1 to 5 tokens, row lengths with and
 * without a 64-value tail, rows and tokens at strides longer than a row.
 */
static void test_simd_dot_rows(const tk_ops *ops)
{
    static const int64_t sizes[] = { 8, 16, 64, 100, 172, 256, 288 };
    static const int rows[] = { 1, 5, 16, 17, 40 };
    int checked = 0;
    for (int wt = 0; wt < TQ_COUNT; wt++) {
        if (!ops->dot_rows[wt] || tq_get(wt)->tile_rows) continue;   /* tiled: check_tiled_f32 */
        tq_type vt = tq_get((tq_type)wt)->vec_dot_type;
        for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
            int64_t n = sizes[s];
            if (n % tq_get((tq_type)wt)->blck_size) continue;
            size_t wrow = tq_row_size((tq_type)wt, n) + 64, arow = tq_row_size(vt, n) + 32;
            uint8_t *w = calloc(40, wrow), *a = calloc(5, arow);
            float *x = malloc((size_t)n * sizeof *x), *y = malloc(5 * 48 * sizeof *y);
            for (int r = 0; r < 40; r++) {
                fill_random(x, n);
                tq_quantize_row((tq_type)wt, x, w + (size_t)r * wrow, n);
            }
            for (int t = 0; t < 5; t++) {
                fill_random(x, n);
                ops->quantize[vt] ? ops->quantize[vt](x, a + (size_t)t * arow, n)
                                  : tq_quantize_row(vt, x, a + (size_t)t * arow, n);
            }
            for (size_t k = 0; k < ARRAY_LEN(rows); k++)
                for (int nt = 1; nt <= 5; nt++) {
                    for (int i = 0; i < 5 * 48; i++) y[i] = -1.0f;
                    ops->dot_rows[wt](n, w, wrow, rows[k], a, arow, nt, y, 48);
                    int bad = 0;
                    for (int t = 0; t < 5; t++)
                        for (int r = 0; r < 48; r++) {
                            float want = t < nt && r < rows[k]
                                             ? ops->vec_dot[wt](n, w + (size_t)r * wrow, a + (size_t)t * arow)
                                             : -1.0f;
                            if (memcmp(&want, &y[t * 48 + r], sizeof want) != 0 && bad++ < 3)
                                fprintf(stderr, "%s dot_rows %s n=%lld rows %d tokens %d: [%d][%d] %.9g, vec_dot %.9g\n",
                                        ops->isa, tq_get((tq_type)wt)->name, (long long)n, rows[k], nt, t, r,
                                        y[t * 48 + r], want);
                        }
                    CHECK_EQ_INT(bad, 0);
                    checked++;
                }
            free(w);
            free(a);
            free(x);
            free(y);
        }
    }
    if (!checked) SKIP_PART("%s: no dot_rows kernels", ops->isa);
}

/* The K/V cache types attention is tested on, as (K, V) pairs. */
static const tq_type kv_pairs[][2] = {
    { TQ_F16, TQ_F16 }, { TQ_F32, TQ_F32 }, { TQ_BF16, TQ_BF16 }, { TQ_Q8_0, TQ_Q8_0 }, { TQ_Q4_0, TQ_Q4_0 },
    { TQ_Q4_1, TQ_Q5_0 }, { TQ_Q5_1, TQ_IQ4_NL }, { TQ_Q8_0, TQ_F16 }, { TQ_F16, TQ_Q4_0 },
};

/*
 * Attention against the scalar table's for every cache type pair of
 * kv_pairs, GQA-like row counts (1, 7, 8, 9, 16) with causal prefixes, head
 * dims 8..512 (8, 24 and 40 padded to 16 lanes, F16 / F32 / BF16 only: the
 * block formats take multiples of 32; rows packed at their own width),
 * cells in scattered order.  Both kernels read the same stored rows, so the
 * budget does not depend on the type: outputs are convex combinations of
 * V rows, so |simd - ref| <= 2e-5 * max |V| (score sums in float instead of
 * double, a running max, a polynomial exp).
 */
static void test_simd_attend(const tk_ops *ops)
{
    const tk_ops *ref = tk_ops_named("scalar");
    static const int rows[] = { 1, 7, 8, 9, 16 };
    static const int dims[][2] = { { 64, 64 }, { 32, 32 }, { 128, 128 }, { 64, 32 }, { 8, 8 }, { 24, 40 },
                                   { 256, 256 }, { 512, 512 } };
    enum { N_CELLS = 300 };
    void *scratch = malloc(tk_attn_scratch_size());
    int bad = 0;
    for (size_t ti = 0; ti < ARRAY_LEN(kv_pairs); ti++) {
        tq_type tk_ = kv_pairs[ti][0], tv = kv_pairs[ti][1];
        for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
            int hk = dims[di][0], hv = dims[di][1];
            if (!tq_row_size(tk_, hk) || !tq_row_size(tv, hv)) continue;
            size_t ks = tq_row_size(tk_, hk) + 16, vs = tq_row_size(tv, hv) + 8;   /* strides wider than a row */
            char *k = malloc(ks * N_CELLS), *v = malloc(vs * N_CELLS);
            float vmax = 0;
            for (int c = 0; c < N_CELLS; c++) {
                float kr[512], vr[512];
                fill_random(kr, hk);
                fill_random(vr, hv);
                tq_quantize_row(tk_, kr, k + c * ks, hk);
                tq_quantize_row(tv, vr, v + c * vs, hv);
                tq_dequantize_row(tv, v + c * vs, vr, hv);
                for (int d = 0; d < hv; d++) vmax = fmaxf(vmax, fabsf(vr[d]));
            }
            int32_t cells[N_CELLS];
            for (int j = 0; j < N_CELLS; j++) cells[j] = (j * 7919) % N_CELLS;   /* a permutation */
            for (size_t ri = 0; ri < ARRAY_LEN(rows); ri++) {
                int n = rows[ri];
                static float q[16 * 512], o1[16 * 512], o2[16 * 512];
                int32_t nkv[16], kv0[16];
                float sink[16];
                fill_random(q, (int64_t)n * hk);
                fill_random(sink, n);
                for (int i = 0; i < n; i++) {
                    nkv[i] = N_CELLS - (n - 1 - i) * 13 - (int)(rnd_u32() % 3);
                    kv0[i] = MAX(0, nkv[i] - 37 - (int)(rnd_u32() % 20));   /* a window of 37-56 cells */
                }
                /* every other pair: a sliding window and sinks (gpt-oss) */
                tk_attn a = { .n_q = n, .hd_k = hk, .hd_v = hv, .q = q, .n_kv = nkv, .cells = cells, .type_k = tk_,
                              .type_v = tv, .k = k, .v = v, .k_stride = ks, .v_stride = vs,
                              .scale = 1.0f / sqrtf((float)hk), .out = o1,
                              .kv0 = ri % 2 ? kv0 : NULL, .sink = (ri + di) % 2 ? sink : NULL };
                ops->attend(&a, scratch);
                a.out = o2;
                ref->attend(&a, scratch);
                for (int i = 0; i < n * hv; i++)
                    if (!(fabsf(o1[i] - o2[i]) <= 2e-5f * vmax)) {
                        if (bad++ < 3)
                            fprintf(stderr, "%s attend %s/%s %dx%d rows %d: %.7g vs %.7g\n", ops->isa,
                                    tq_get(tk_)->name, tq_get(tv)->name, hk, hv, n, o1[i], o2[i]);
                    }
            }
            free(k);
            free(v);
        }
    }
    if (bad) fprintf(stderr, "%s attend: %d outputs off the reference\n", ops->isa, bad);
    CHECK_EQ_INT(bad, 0);
    free(scratch);
}

/*
 * Head dim 8 (stories260K's; the AVX-512 table's own kernel) against the
 * scalar table's, within test_simd_attend's budget: F32 / F16 / BF16
 * caches, mixed K and V types, 5 to 700 cells (a part of one block to
 * three chunks of 256), rows seeing different spans (windows starting and
 * ending anywhere, down to one cell), sinks below and above every score,
 * and queries large enough that scores spread over hundreds (a row's
 * maximum rising late, most weights underflowing).  Each row's output
 * must also have the same bits when it is attended alone: the engine
 * relies on a token's result not depending on its batch.
 */
static void test_simd_attend8(const tk_ops *ops)
{
    const tk_ops *ref = tk_ops_named("scalar");
    static const tq_type pairs[][2] = { { TQ_F16, TQ_F16 }, { TQ_F32, TQ_F32 }, { TQ_BF16, TQ_BF16 },
                                        { TQ_F16, TQ_F32 }, { TQ_BF16, TQ_F16 }, { TQ_F32, TQ_BF16 } };
    static const int lens[] = { 5, 16, 40, 300, 700 };
    static const int rows[] = { 1, 2, 5, 8, 16 };
    void *scratch = malloc(tk_attn_scratch_size());
    int bad = 0, differ = 0;
    for (size_t pi = 0; pi < ARRAY_LEN(pairs); pi++)
    for (size_t li = 0; li < ARRAY_LEN(lens); li++) {
        const tq_type tk_ = pairs[pi][0], tv = pairs[pi][1];
        const int nc = lens[li];
        const size_t ks = tq_row_size(tk_, 8) * 3, vs = tq_row_size(tv, 8) * 2;   /* a head's slice of wider rows */
        char *k = malloc(ks * nc), *v = malloc(vs * nc);
        int32_t *cells = malloc(nc * sizeof *cells);
        float vmax = 0;
        memset(k, 0xff, ks * nc);   /* NaNs in the other heads' slices */
        memset(v, 0xff, vs * nc);
        for (int c = 0; c < nc; c++) {
            float kr[8], vr[8];
            char *kc = k + c * ks + tq_row_size(tk_, 8), *vc = v + c * vs + tq_row_size(tv, 8);
            fill_random(kr, 8);
            fill_random(vr, 8);
            tq_quantize_row(tk_, kr, kc, 8);
            tq_quantize_row(tv, vr, vc, 8);
            tq_dequantize_row(tv, vc, vr, 8);
            for (int d = 0; d < 8; d++) vmax = fmaxf(vmax, fabsf(vr[d]));
            cells[c] = (int32_t)(((int64_t)c * 7919) % nc);
        }
        for (size_t ri = 0; ri < ARRAY_LEN(rows); ri++)
        for (int var = 0; var < 4; var++) {   /* bit 0: windows and sinks; bit 1: large queries */
            const int n = rows[ri];
            float q[16 * 8], o1[16 * 8], o2[16 * 8], o3[8], sink[16];
            int32_t nkv[16], kv0[16];
            fill_random(q, n * 8);
            if (var & 2)
                for (int i = 0; i < n * 8; i++) q[i] *= 12.0f;
            for (int i = 0; i < n; i++) {
                nkv[i] = i == 0 ? nc : 1 + (int)(rnd_u32() % nc);
                int back = 1 + (int)(rnd_u32() % 40);
                kv0[i] = rnd_u32() % 2 ? (int)(rnd_u32() % nkv[i]) : MAX(0, nkv[i] - back);
                sink[i] = rnd_u32() % 3 ? rnd_unit() * 3 : 40.0f;   /* sometimes above every score */
            }
            tk_attn a = { .n_q = n, .hd_k = 8, .hd_v = 8, .q = q, .n_kv = nkv, .cells = cells, .type_k = tk_,
                          .type_v = tv, .k = k + tq_row_size(tk_, 8), .v = v + tq_row_size(tv, 8),
                          .k_stride = ks, .v_stride = vs, .scale = 1.0f / sqrtf(8.0f), .out = o1,
                          .kv0 = var & 1 ? kv0 : NULL, .sink = var & 1 ? sink : NULL };
            ops->attend(&a, scratch);
            a.out = o2;
            ref->attend(&a, scratch);
            for (int i = 0; i < n * 8; i++)
                if (!(fabsf(o1[i] - o2[i]) <= 2e-5f * vmax)) {
                    if (bad++ < 3)
                        fprintf(stderr, "%s attend8 %s/%s cells %d rows %d var %d row %d: %.7g vs %.7g\n", ops->isa,
                                tq_get(tk_)->name, tq_get(tv)->name, nc, n, var, i / 8, o1[i], o2[i]);
                }
            for (int i = 0; i < n; i++) {   /* row i alone */
                tk_attn one = a;
                one.n_q = 1, one.q = q + 8 * i, one.n_kv = nkv + i, one.out = o3;
                one.kv0 = a.kv0 ? kv0 + i : NULL, one.sink = a.sink ? sink + i : NULL;
                ops->attend(&one, scratch);
                differ += memcmp(o3, o1 + 8 * i, sizeof o3) != 0;
            }
        }
        free(k);
        free(v);
        free(cells);
    }
    if (bad) fprintf(stderr, "%s attend8: %d outputs off the reference\n", ops->isa, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(differ, 0);
    free(scratch);
}

/* A sink is one more term of the softmax's sum with no value: the output
 * with sink s is the output without it times sum / (sum + e^s), the sum
 * computed here in double from the scores; and a window [kv0, n) is the
 * attention over those cells alone. */
static void test_attend_sink_window(void)
{
    enum { HD = 64, N = 50 };
    static float k[N][HD], v[N][HD];
    float q[HD], o_plain[HD], o_sink[HD], o_win[HD], o_sub[HD], sink = 0.7f;
    fill_random(&k[0][0], N * HD);
    fill_random(&v[0][0], N * HD);
    fill_random(q, HD);
    int32_t cells[N], nkv = N, kv0 = 20, nsub = N - 20;
    for (int j = 0; j < N; j++) cells[j] = j;
    void *scratch = malloc(tk_attn_scratch_size());
    tk_attn a = { .n_q = 1, .hd_k = HD, .hd_v = HD, .q = q, .n_kv = &nkv, .cells = cells, .type_k = TQ_F32,
                  .type_v = TQ_F32, .k = k, .v = v, .k_stride = HD * 4, .v_stride = HD * 4, .scale = 0.125f,
                  .out = o_plain };
    tk_attend_ref(&a, scratch);
    a.sink = &sink, a.out = o_sink;
    tk_attend_ref(&a, scratch);
    double mx = sink, sum = 0;
    for (int j = 0; j < N; j++) {
        double s = 0;
        for (int d = 0; d < HD; d++) s += (double)k[j][d] * q[d];
        mx = fmax(mx, s * 0.125);
    }
    for (int j = 0; j < N; j++) {
        double s = 0;
        for (int d = 0; d < HD; d++) s += (double)k[j][d] * q[d];
        sum += exp(s * 0.125 - mx);
    }
    double f = sum / (sum + exp(sink - mx));
    for (int d = 0; d < HD; d++) CHECK_NEAR(o_sink[d], o_plain[d] * f, 1e-5);
    a.sink = NULL, a.kv0 = &kv0, a.out = o_win;
    tk_attend_ref(&a, scratch);
    a.kv0 = NULL, a.n_kv = &nsub, a.cells = cells + 20, a.out = o_sub;
    tk_attend_ref(&a, scratch);
    for (int d = 0; d < HD; d++) CHECK(o_win[d] == o_sub[d]);
    free(scratch);
}

/* The cells-outside kernel (head dims the SIMD kernels do not take, and
 * the scalar table's) against the reference: the same bits for every row,
 * with rows seeing different prefixes (a step verifying guesses), head
 * dims 8, 24 and 64 (the block formats: 64 only), every pair of
 * kv_pairs. */
static void test_attend_rows(void)
{
    static const int dims[][2] = { { 8, 8 }, { 24, 24 }, { 64, 32 }, { 64, 64 } };
    void *scratch = malloc(tk_attn_scratch_size());
    int diff = 0;
    /* 200 cells: the scores kept between the passes; 4,000 x 16 rows: recomputed */
    for (int n_cells = 200; n_cells <= 4000; n_cells += 3800)
    for (size_t ti = 0; ti < ARRAY_LEN(kv_pairs); ti++) {
        tq_type tk_ = kv_pairs[ti][0], tv = kv_pairs[ti][1];
        for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
            int hk = dims[di][0], hv = dims[di][1];
            if (!tq_row_size(tk_, hk) || !tq_row_size(tv, hv)) continue;
            size_t ks = tq_row_size(tk_, hk) + 8, vs = tq_row_size(tv, hv);
            char *k = malloc(ks * n_cells), *v = malloc(vs * n_cells);
            for (int c = 0; c < n_cells; c++) {
                float kr[64], vr[64];
                fill_random(kr, hk);
                fill_random(vr, hv);
                tq_quantize_row(tk_, kr, k + c * ks, hk);
                tq_quantize_row(tv, vr, v + c * vs, hv);
            }
            int32_t *cells = malloc(n_cells * sizeof *cells);
            for (int j = 0; j < n_cells; j++) cells[j] = (j * 37) % n_cells;   /* a permutation (37 is prime to both) */
            for (int n = 1; n <= TK_ATTN_ROWS; n += 5) {
                float q[TK_ATTN_ROWS * 64], o1[TK_ATTN_ROWS * 64], o2[TK_ATTN_ROWS * 64];
                int32_t nkv[TK_ATTN_ROWS], kv0[TK_ATTN_ROWS];
                float sink[TK_ATTN_ROWS];
                fill_random(q, (int64_t)n * hk);
                fill_random(sink, n);
                for (int i = 0; i < n; i++) {
                    nkv[i] = n_cells - (n - 1 - i) * 3 - (i % 2);
                    kv0[i] = nkv[i] - 1 - (int)(rnd_u32() % 100);
                }
                tk_attn a = { .n_q = n, .hd_k = hk, .hd_v = hv, .q = q, .n_kv = nkv, .cells = cells, .type_k = tk_,
                              .type_v = tv, .k = k, .v = v, .k_stride = ks, .v_stride = vs,
                              .scale = 1.0f / sqrtf((float)hk), .out = o1,
                              .kv0 = n % 2 ? kv0 : NULL, .sink = ti % 2 ? sink : NULL };
                tk_attend_rows(&a, scratch);
                a.out = o2;
                tk_attend_ref(&a, scratch);
                diff += memcmp(o1, o2, (size_t)n * hv * sizeof *o1) != 0;
            }
            free(k);
            free(v);
            free(cells);
        }
    }
    CHECK_EQ_INT(diff, 0);
    free(scratch);
}

/* rms_norm (with and without the residual add) and swiglu against the
 * scalar table's: 1e-6 relative per value (rms_norm differs only in the
 * double summation order; swiglu's exp is within 2e-7). */
static void test_simd_elementwise(const tk_ops *ops)
{
    const tk_ops *ref = tk_ops_named("scalar");
    static const int lens[] = { 1, 15, 64, 896, 4864 };
    int bad = 0;
    for (size_t li = 0; li < ARRAY_LEN(lens); li++) {
        int n = lens[li];
        float *x1 = malloc(n * sizeof(float)), *x2 = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float));
        float *w = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
        fill_random(x1, n);
        fill_random(d, n);
        fill_random(w, n);
        for (int with_d = 0; with_d < 2; with_d++) {
            memcpy(x2, x1, n * sizeof(float));
            ops->rms_norm(x1, with_d ? d : NULL, w, y1, n, 1e-6f);
            ref->rms_norm(x2, with_d ? d : NULL, w, y2, n, 1e-6f);
            for (int i = 0; i < n; i++) {
                if (x1[i] != x2[i]) bad++;
                if (!(fabsf(y1[i] - y2[i]) <= 1e-6f * fabsf(y2[i]))) bad++;
            }
        }
        for (int i = 0; i < n; i++) x1[i] *= 8;   /* into exp's tails */
        ops->swiglu(x1, d, y1, n);
        ref->swiglu(x1, d, y2, n);
        for (int i = 0; i < n; i++)
            if (!(fabsf(y1[i] - y2[i]) <= 1e-6f * fabsf(y2[i]) + 1e-30f)) bad++;
        free(x1), free(x2), free(d), free(w), free(y1), free(y2);
    }
    if (bad) fprintf(stderr, "%s element-wise: %d values off the reference\n", ops->isa, bad);
    CHECK_EQ_INT(bad, 0);
}

static void test_simd_quantizers(const tk_ops *ops)
{
    static const tq_type acts[] = { TQ_Q8_0, TQ_F16, TQ_BF16, TQ_Q8_K };
    enum { N = 4864 + 13 };
    static float x[N];
    static uint8_t r[N * 4], s[N * 4];
    for (size_t k = 0; k < ARRAY_LEN(acts); k++) {
        tq_type t = acts[k];
        int64_t bs = tq_get(t)->blck_size;
        for (int rep = 0; rep < 6; rep++) {
            fill_random(x, N);
            if (rep == 1) for (int i = 0; i < N; i++) x[i] *= 1e-6f;       /* half subnormals */
            if (rep == 2) for (int i = 0; i < N; i++) x[i] = bits_f32(rnd_u32());   /* any bits */
            if (rep == 3) for (int i = 0; i < N; i++) x[i] = (float)(int)(x[i] * 50) + 0.5f;
            if (rep == 4) for (int i = 0; i < N; i++) x[i] = i % 64 < 32 ? 0.0f : x[i];
            if (t != TQ_F16 && t != TQ_BF16 && rep == 2) continue;   /* NaN data: not for blocks */
            int64_t n = (rep == 5 ? N : 4864) / bs * bs;
            size_t sz = tq_row_size(t, n);
            memset(r, 0xa5, sz);
            memset(s, 0x5a, sz);
            tq_quantize_row(t, x, r, n);
            ops->quantize[t](x, s, n);
            if (memcmp(r, s, sz) != 0) fprintf(stderr, "%s quantize %s rep %d differs\n", ops->isa,
                                               tq_get(t)->name, rep);
            CHECK(memcmp(r, s, sz) == 0);
        }
    }
}

/* ---- quantizers and model files against independent decodes ------------- */

/* Deterministic rows of blocks with scales 2^-12 .. 2^11; a quarter of the
 * blocks hold exact halves (x * 127 / amax = k + 0.5), where round-half-even
 * and round-half-away differ. */
static uint32_t golden_next(uint64_t *st)
{
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;
    return (uint32_t)(*st >> 16);
}

static void golden_rows(float *x, int64_t n)
{
    uint64_t st = 0x853c49e6748fea9bULL;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        int e = (int)(golden_next(&st) % 24) - 12;
        bool ties = golden_next(&st) % 4 == 0;
        for (int j = 0; j < 32; j++) {
            float u = (float)((double)golden_next(&st) / 2147483648.0 - 1.0);
            x[j] = ties ? ldexpf((float)(int)(u * 126.0f) + 0.5f, e) : ldexpf(u, e);
        }
        if (ties) {
            uint32_t at = golden_next(&st) % 32;
            x[at] = ldexpf(golden_next(&st) % 2 ? 127.0f : -127.0f, e);
        }
    }
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(tq_f16 h)
{
    return _cvtsh_ss(h);
}

/* Value j of one block, decoded here from the GGUF layout (not by tq.c):
 * Q4_0 value j is the low nibble of qs[j] (j < 16) or the high nibble of
 * qs[j - 16], minus 8, times d; Q8_0 is qs[j] * d; F16 through the F16C
 * instruction when there is one. */
static float layout_value(tq_type t, const uint8_t *row, int64_t i)
{
    bool hw = __builtin_cpu_supports("f16c");
    tq_f16 h;
    switch (t) {
    case TQ_F16:
        memcpy(&h, row + 2 * i, 2);
        return hw ? hw_f16_to_f32(h) : tq_f16_to_f32(h);
    case TQ_Q4_0: {
        const uint8_t *b = row + (i / 32) * 18;   /* f16 d, 16 bytes of nibbles */
        int j = (int)(i % 32), q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
        memcpy(&h, b, 2);
        return (float)(q - 8) * (hw ? hw_f16_to_f32(h) : tq_f16_to_f32(h));
    }
    case TQ_Q8_0: {
        const uint8_t *b = row + (i / 32) * 34;   /* f16 d, 32 signed bytes */
        memcpy(&h, b, 2);
        return (float)(int8_t)b[2 + i % 32] * (hw ? hw_f16_to_f32(h) : tq_f16_to_f32(h));
    }
    default:
        return NAN;
    }
}

/* The double-precision dot of the dequantized operands. */
static double exact_dot(tq_type wt, int64_t n, const void *w, const void *a)
{
    float *wf = malloc((size_t)n * sizeof *wf), *af = malloc((size_t)n * sizeof *af);
    tq_dequantize_row(wt, w, wf, n);
    tq_dequantize_row(tq_get(wt)->vec_dot_type, a, af, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)wf[i] * af[i];
    free(wf);
    free(af);
    return s;
}

/*
 * Everything here is computed at test time; nothing is pinned to bits that
 * another program once wrote.  On golden_rows(64 x 4864):
 *   - Q8_0 byte for byte against its rule computed here: d = f16(amax / 127),
 *     q = round-half-even(x * (127 / amax)) (error budget 0: the rule is
 *     exact, and the tie blocks tell half-even from half-away);
 *   - Q4_0, Q4_1, Q5_0, Q5_1: every value of dequant(quant(x)) within
 *     roundtrip_bound of x (half a step, a full step on Q4_0/Q5_0's clamped
 *     side, plus the f16 rounding of d and m, relative or, for subnormal
 *     halves, absolute), at every scale 2^-12 .. 2^11; for Q4_1 / Q5_1 the
 *     blocks whose minimum is beyond f16's range (|m| > 65504: it is stored
 *     as infinity) have no budget and are left out (under a tenth of them).
 * On the first 16 rows of every Q4_0 / Q8_0 / F16 tensor of the shared model
 * files:
 *   - tq_dequantize_row equals layout_value's decode bit for bit (budget 0:
 *     each value is one product of an f16 scale and a small integer, exact
 *     in float);
 *   - tq_vec_dot_ref against a random activation row is within tk.h's
 *     budget (1e-5 * sum |w a| + 1e-6) of the double-precision dot of the
 *     dequantized operands, and so is every table's vec_dot of the scalar
 *     reference's.
 */
static void test_golden(void)
{
    static const tq_type quant[] = { TQ_Q8_0, TQ_Q4_0, TQ_Q4_1, TQ_Q5_0, TQ_Q5_1 };
    enum { N = 64 * 4864 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 2);
    golden_rows(x, N);
    for (size_t k = 0; k < ARRAY_LEN(quant); k++) {
        tq_type t = quant[k];
        tq_quantize_row(t, x, q, N);
        int bad = 0;
        if (t == TQ_Q8_0) {
            const tq_block_q8_0 *b = (const tq_block_q8_0 *)q;
            for (int64_t i = 0; i < N / 32; i++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i * 32 + j]));
                float id = amax > 0 ? 127.0f / amax : 0.0f;
                bad += b[i].d != tq_f32_to_f16(amax / 127.0f);
                for (int j = 0; j < 32; j++) bad += b[i].qs[j] != (int8_t)lrintf(x[i * 32 + j] * id);
            }
        } else {
            tq_dequantize_row(t, q, y, N);
            int n_out_of_range = 0;
            for (int64_t i = 0; i < N / 32; i++) {
                float mn = x[i * 32];
                for (int j = 1; j < 32; j++) mn = fminf(mn, x[i * 32 + j]);
                if ((t == TQ_Q4_1 || t == TQ_Q5_1) && fabsf(mn) > 65504.0f) {
                    n_out_of_range++;   /* m cannot be stored in f16: no budget */
                    continue;
                }
                double bound = roundtrip_bound(t, x + i * 32) + 1e-30;
                for (int j = 0; j < 32; j++) bad += fabs((double)x[i * 32 + j] - y[i * 32 + j]) > bound;
            }
            CHECK(n_out_of_range < N / 32 / 10);
        }
        if (bad) fprintf(stderr, "golden rows %s: %d values off\n", tq_get(t)->name, bad);
        CHECK_EQ_INT(bad, 0);
    }
    free(x);
    free(y);
    free(q);

    static const struct { const char *file; int n_tensors; } models[] = {
        { "rand-llama-llama3vocab-e256-l2-Q4_0.gguf", 15 },
        { "rand-llama-llama3vocab-e256-l2-Q8_0.gguf", 15 },
        { "rand-qwen2-qwen2vocab-e64-l2-F16.gguf", 15 },
    };
    const char *dir = test_shared_dir();
    if (!dir) {
        SKIP_PART("no shared directory: model-file decode and dot checks not run");
        return;
    }
    for (size_t f = 0; f < ARRAY_LEN(models); f++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/models/%s", dir, models[f].file);
        gguf_ctx *g = NULL;
        CHECK_EQ_INT(gguf_open(path, &g, err, sizeof err), PK_OK);
        if (!g) continue;
        int n_t = 0, n_far = 0, n_ref_far = 0;
        int64_t n_values = 0, n_decode_diff = 0;
        for (int64_t ti = 0; ti < gguf_n_tensors(g); ti++) {
            const gguf_tensor *t = gguf_tensor_at(g, ti);
            if (t->type != TQ_Q4_0 && t->type != TQ_Q8_0 && t->type != TQ_F16) continue;
            int64_t n = t->ne[0], rows = MIN((int64_t)(t->nbytes / tq_row_size(t->type, n)), 16);
            tq_type vt = tq_get(t->type)->vec_dot_type;
            float *yr = malloc((size_t)n * sizeof *yr), *xa = malloc((size_t)n * sizeof *xa);
            void *a = malloc(tq_row_size(vt, n));
            fill_random(xa, n);
            tq_quantize_row(vt, xa, a, n);
            for (int64_t r = 0; r < rows; r++) {
                const uint8_t *w = (const uint8_t *)t->data + r * tq_row_size(t->type, n);
                tq_dequantize_row(t->type, w, yr, n);
                for (int64_t i = 0; i < n; i++, n_values++) {
                    float want = layout_value(t->type, w, i);
                    n_decode_diff += memcmp(&yr[i], &want, sizeof want) != 0;
                }
                float ref = tq_vec_dot_ref(t->type, n, w, a);
                double tol = 1e-5 * abs_dot(t->type, n, w, a) + 1e-6;
                if (!(fabs(ref - exact_dot(t->type, n, w, a)) <= tol)) n_ref_far++;
                /* real weights through every table, against the reference */
                for (size_t i = 0; i < ARRAY_LEN(isa_list); i++) {
                    const tk_ops *o = tk_ops_named(isa_list[i]);
                    if (o && !(fabs(o->vec_dot[t->type](n, w, a) - ref) <= tol)) n_far++;
                }
            }
            n_t++;
            free(yr);
            free(xa);
            free(a);
        }
        gguf_close(g);
        if (n_decode_diff || n_ref_far || n_far)
            fprintf(stderr, "%s: %lld of %lld values decode differently, %d reference dots and %d table dots "
                    "out of budget\n", models[f].file, (long long)n_decode_diff, (long long)n_values,
                    n_ref_far, n_far);
        CHECK_EQ_INT(n_t, models[f].n_tensors);
        CHECK(n_values > 0);
        CHECK_EQ_INT(n_decode_diff, 0);
        CHECK_EQ_INT(n_ref_far, 0);
        CHECK_EQ_INT(n_far, 0);
    }
}

/* ---- matmul ------------------------------------------------------------------ */

/*
 * tk_matmul on random data, on 1 and 2 threads: both equal to the bit (so
 * results do not depend on the thread count), and every output within tk.h's
 * budget of the reference.  For the K-quants and float types every path
 * equals vec_dot to the bit.  With the avx512 table every path of the
 * 32-value formats does the same per-output operations, so each token's
 * outputs equal those of the same token decoded alone (on the others the
 * one-token path is vec_dot and tokens from 2 on agree with the batch
 * without the first token).
 */
static void check_matmul(tp_pool *tp[2], tq_type wt, int64_t n_rows, int64_t n_cols, int64_t n_tok)
{
    const tk_ops *ops = tk_ops_get();
    tq_type vt = tq_get(wt)->vec_dot_type;
    size_t wrow = tq_row_size(wt, n_cols), arow = tq_row_size(vt, n_cols);
    float *wf = malloc((size_t)(n_rows * n_cols) * sizeof *wf);
    float *x = malloc((size_t)(n_tok * n_cols) * sizeof *x);
    float *y[3];
    for (int i = 0; i < 3; i++) y[i] = malloc((size_t)(n_tok * n_rows) * sizeof *y[i]);
    uint8_t *w = malloc(wrow * (size_t)n_rows), *a = malloc(arow);
    void *scratch = malloc(tk_matmul_scratch_size(wt, n_cols, n_tok));
    fill_random(wf, n_rows * n_cols);
    fill_random(x, n_tok * n_cols);
    if (tq_has_quantizer(wt)) {
        for (int64_t r = 0; r < n_rows; r++) tq_quantize_row(wt, wf + r * n_cols, w + r * wrow, n_cols);
    } else {
        /* the lattice formats (no quantizer): random blocks, scale 1/64 */
        size_t bs = tq_get(wt)->type_size;
        for (size_t b = 0; b < wrow * (size_t)n_rows / bs; b++) lattice_block(wt, w + b * bs);
    }
    for (int i = 0; i < 3; i++)
        for (int64_t k = 0; k < n_tok * n_rows; k++) y[i][k] = NAN;

    tk_matmul(tp[0], wt, w, n_rows, n_cols, x, n_tok, y[0], scratch);
    tk_matmul(tp[1], wt, w, n_rows, n_cols, x, n_tok, y[1], scratch);
    bool legacy = tq_get(wt)->blck_size == 32;
    bool k_quant = wt == TQ_Q4_K || wt == TQ_Q5_K || wt == TQ_Q6_K;
    bool alone = !legacy || strcmp(ops->isa, "avx512") == 0;   /* compare with each token alone */
    if (alone) {
        for (int64_t t = 0; t < n_tok; t++)
            tk_matmul(tp[1], wt, w, n_rows, n_cols, x + t * n_cols, 1, y[2] + t * n_rows, scratch);
    } else if (n_tok >= 3) {
        tk_matmul(tp[1], wt, w, n_rows, n_cols, x + n_cols, n_tok - 1, y[2] + n_rows, scratch);
    }

    int bad = 0, off = 0, moved = 0;
    bool threads_same = memcmp(y[0], y[1], (size_t)(n_tok * n_rows) * sizeof(float)) == 0;
    for (int64_t t = 0; t < n_tok; t++) {
        ops->quantize[vt](x + t * n_cols, a, n_cols);
        for (int64_t r = 0; r < n_rows; r++) {
            const void *wr = w + r * wrow;
            float got = y[1][t * n_rows + r];
            if ((k_quant || !legacy) && got != ops->vec_dot[wt](n_cols, wr, a)) bad++;
            double tol = 1e-5 * abs_dot(wt, n_cols, wr, a) + 1e-6;
            if (!(fabs(got - tq_vec_dot_ref(wt, n_cols, wr, a)) <= tol)) off++;
            if ((alone || (n_tok >= 3 && t > 0)) && got != y[2][t * n_rows + r]) moved++;
        }
    }
    if (bad || off || moved || !threads_same)
        fprintf(stderr, "matmul %s %lldx%lld n_tok=%lld: %d differ from vec_dot, %d off ref, %d move, "
                "threads %s\n", tq_get(wt)->name, (long long)n_rows, (long long)n_cols, (long long)n_tok,
                bad, off, moved, threads_same ? "same" : "differ");
    CHECK(threads_same);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(off, 0);
    CHECK_EQ_INT(moved, 0);
    free(wf);
    free(x);
    for (int i = 0; i < 3; i++) free(y[i]);
    free(w);
    free(a);
    free(scratch);
}

/* tk_matmul_multi_job: Q4_K and Q6_K matrices (one activation type) of
 * different heights, as a layer's Q, K, V, against one tk_matmul each. */
typedef struct {
    tp_pool *tp;
    tk_mat mats[3];
    const float *x;
    int64_t n_cols, n_tok;
    void *scratch;
} multi_args;

static void multi_job(int ith, int nth, void *p)
{
    multi_args *m = p;
    tk_matmul_multi_job(ith, nth, m->tp, m->mats, 3, m->n_cols, m->x, m->n_tok, m->scratch);
}

static void test_matmul_multi(tp_pool *tp)
{
    enum { C = 512 };
    static const int64_t rows[3] = { 100, 24, 24 };
    static const tq_type types[3] = { TQ_Q4_K, TQ_Q4_K, TQ_Q6_K };
    static const int64_t toks[] = { 1, 5, 20 };
    for (size_t k = 0; k < ARRAY_LEN(toks); k++) {
        int64_t T = toks[k];
        multi_args m = { .tp = tp, .n_cols = C, .n_tok = T };
        float *x = malloc((size_t)(T * C) * sizeof *x), *y1 = malloc((size_t)(T * 100) * sizeof *y1);
        fill_random(x, T * C);
        m.x = x;
        void *w[3];
        for (int i = 0; i < 3; i++) {
            size_t wrow = tq_row_size(types[i], C);
            float *wf = malloc((size_t)(rows[i] * C) * sizeof *wf);
            fill_random(wf, rows[i] * C);
            w[i] = malloc(wrow * (size_t)rows[i]);
            for (int64_t r = 0; r < rows[i]; r++) tq_quantize_row(types[i], wf + r * C, (char *)w[i] + r * wrow, C);
            free(wf);
            m.mats[i] = (tk_mat){ types[i], w[i], rows[i], malloc((size_t)(T * rows[i]) * sizeof(float)) };
        }
        size_t sz = tk_matmul_multi_scratch_size(m.mats, 3, C, T);
        for (int i = 0; i < 3; i++) sz = MAX(sz, tk_matmul_scratch_size(types[i], C, T));
        m.scratch = malloc(sz);
        tk_matmul_scratch_init(m.scratch);
        tp_run(tp, multi_job, &m);
        for (int i = 0; i < 3; i++) {
            tk_matmul(tp, types[i], w[i], rows[i], C, x, T, y1, m.scratch);
            CHECK(memcmp(y1, m.mats[i].y, (size_t)(T * rows[i]) * sizeof(float)) == 0);
            free(w[i]);
            free(m.mats[i].y);
        }
        free(m.scratch);
        free(x);
        free(y1);
    }
}

/* Two matmuls chained inside one job: h = W1 x, y = W2 h, sharing scratch. */
typedef struct {
    tp_pool *tp;
    const void *w1, *w2;
    const float *x;
    float *h, *y;
    void *scratch;
    int64_t n, n_tok;
} chain_args;

static void chain_job(int ith, int nth, void *p)
{
    chain_args *c = p;
    tk_matmul_job(ith, nth, c->tp, TQ_Q8_0, c->w1, c->n, c->n, c->x, c->n_tok, c->h, c->scratch);
    tk_matmul_job(ith, nth, c->tp, TQ_Q8_0, c->w2, c->n, c->n, c->h, c->n_tok, c->y, c->scratch);
}

static void test_matmul_chain(tp_pool *tp)
{
    enum { N = 256, T = 5 };
    size_t wrow = tq_row_size(TQ_Q8_0, N);
    static float wf[N * N], x[T * N], h[T * N], y[T * N], h2[T * N], y2[T * N];
    uint8_t *w1 = malloc(wrow * N), *w2 = malloc(wrow * N);
    void *scratch = malloc(tk_matmul_scratch_size(TQ_Q8_0, N, T));
    fill_random(wf, N * N);
    for (int r = 0; r < N; r++) tq_quantize_row(TQ_Q8_0, wf + r * N, w1 + r * wrow, N);
    fill_random(wf, N * N);
    for (int r = 0; r < N; r++) tq_quantize_row(TQ_Q8_0, wf + r * N, w2 + r * wrow, N);
    fill_random(x, T * N);
    chain_args c = { tp, w1, w2, x, h, y, scratch, N, T };
    tk_matmul_scratch_init(scratch);
    tp_run(tp, chain_job, &c);
    tk_matmul(tp, TQ_Q8_0, w1, N, N, x, T, h2, scratch);
    tk_matmul(tp, TQ_Q8_0, w2, N, N, h2, T, y2, scratch);
    CHECK(memcmp(h, h2, sizeof h) == 0);
    CHECK(memcmp(y, y2, sizeof y) == 0);
    free(w1);
    free(w2);
    free(scratch);
}

/*
 * Tiled layouts (tq.h): tile / untile give back the plain bytes, every row
 * dequantizes as the plain row does, and tk_matmul of the tiled matrix
 * equals that of the plain rows to the bit at every token count (the
 * tiled kernel, and the GEMM with panels packed from tiles), alone and in
 * a set with a plain matrix.
 */
static void check_tiled(tp_pool *tp, tq_type plain, int64_t n_rows, int64_t n_cols)
{
    tq_type tiled = (tq_type)tq_tiled(plain);
    size_t wrow = tq_row_size(plain, n_cols), bytes = wrow * (size_t)n_rows;
    float *wf = malloc((size_t)(n_rows * n_cols) * sizeof *wf);
    uint8_t *w = malloc(bytes), *wt = malloc(bytes), *back = malloc(bytes);
    fill_random(wf, n_rows * n_cols);
    for (int64_t r = 0; r < n_rows; r++) tq_quantize_row(plain, wf + r * n_cols, w + r * wrow, n_cols);
    tq_tile(tiled, w, n_rows, n_cols, wt);
    CHECK(memcmp(w, wt, bytes) != 0);   /* the layout did change */
    tq_untile(tiled, wt, 0, n_rows, n_rows, n_cols, back);
    CHECK(memcmp(w, back, bytes) == 0);
    tq_untile(tiled, wt, 5, 13, n_rows, n_cols, back);   /* rows off the tile grid */
    CHECK(memcmp(w + 5 * wrow, back, 13 * wrow) == 0);
    float *d1 = malloc((size_t)n_cols * sizeof *d1), *d2 = malloc((size_t)n_cols * sizeof *d2);
    bool rows_same = true;
    for (int64_t r = 0; r < n_rows; r += 7) {
        tq_dequantize_row(plain, w + r * wrow, d1, n_cols);
        tq_dequantize_row_at(tiled, wt, r, n_rows, n_cols, d2);
        rows_same = rows_same && memcmp(d1, d2, (size_t)n_cols * sizeof *d1) == 0;
    }
    CHECK(rows_same);

    if (!tk_runs_tiled(plain, n_rows, n_cols)) {
        SKIP_PART("no tiled kernels on this CPU (%s): tiled matmul %s %lldx%lld not run", tk_ops_get()->isa,
                  tq_get(plain)->name, (long long)n_rows, (long long)n_cols);
    } else {
        /* tiled kernel up to its last count (4 per pass: 33 leaves 1),
         * beside the plain matrix up to 7 (Q4_0 / Q8_0) or one product
         * each (the K-quants); GEMM beyond */
        static const int64_t toks[] = { 1, 2, 3, 4, 7, 8, 9, 17, 31, 32, 33, 40, 70 };
        /* the plain companion: same activation type, no tiled layout */
        const tq_type other = tq_get(plain)->vec_dot_type == TQ_Q8_K ? TQ_Q5_K : TQ_Q4_1;
        for (size_t k = 0; k < ARRAY_LEN(toks); k++) {
            int64_t T = toks[k];
            float *x = malloc((size_t)(T * n_cols) * sizeof *x);
            float *y1 = malloc((size_t)(T * n_rows) * sizeof *y1), *y2 = malloc((size_t)(T * n_rows) * sizeof *y2);
            void *scratch = malloc(tk_matmul_scratch_size(plain, n_cols, T));
            fill_random(x, T * n_cols);
            tk_matmul(tp, plain, w, n_rows, n_cols, x, T, y1, scratch);
            tk_matmul(tp, tiled, wt, n_rows, n_cols, x, T, y2, scratch);
            bool same = memcmp(y1, y2, (size_t)(T * n_rows) * sizeof *y1) == 0;
            if (!same) fprintf(stderr, "tiled %s %lldx%lld n_tok=%lld differs\n", tq_get(tiled)->name,
                               (long long)n_rows, (long long)n_cols, (long long)T);
            CHECK(same);
            /* in a set with a plain matrix: both as in their own products */
            multi_args m = { .tp = tp, .n_cols = n_cols, .n_tok = T, .x = x };
            size_t q1row = tq_row_size(other, n_cols);
            uint8_t *q1 = malloc(q1row * 16);
            for (int64_t r = 0; r < 16; r++) tq_quantize_row(other, wf + r * n_cols, q1 + r * q1row, n_cols);
            m.mats[0] = (tk_mat){ tiled, wt, n_rows, malloc((size_t)(T * n_rows) * sizeof(float)) };
            m.mats[1] = (tk_mat){ other, q1, 16, malloc((size_t)(T * 16) * sizeof(float)) };
            m.mats[2] = m.mats[0];
            m.mats[2].y = malloc((size_t)(T * n_rows) * sizeof(float));
            m.scratch = malloc(tk_matmul_multi_scratch_size(m.mats, 3, n_cols, T) + tk_matmul_scratch_size(other, n_cols, T));
            tk_matmul_scratch_init(m.scratch);
            tp_run(tp, multi_job, &m);
            CHECK(memcmp(m.mats[0].y, y1, (size_t)(T * n_rows) * sizeof *y1) == 0);
            CHECK(memcmp(m.mats[2].y, y1, (size_t)(T * n_rows) * sizeof *y1) == 0);
            tk_matmul(tp, other, q1, 16, n_cols, x, T, y1, m.scratch);
            CHECK(memcmp(m.mats[1].y, y1, (size_t)(T * 16) * sizeof *y1) == 0);
            for (int i = 0; i < 3; i++) free(m.mats[i].y);
            free(m.scratch);
            free(q1);
            free(x);
            free(y1);
            free(y2);
            free(scratch);
        }
    }
    free(d1);
    free(d2);
    free(wf);
    free(w);
    free(wt);
    free(back);
}

/*
 * F32X16 (tq.h): tile / untile give back the plain floats (rows past the
 * last whole tile included), every row reads back as it was, and
 * tk_matmul of the tiled matrix equals that of the plain one to the bit at
 * every token count, alone and in a set with a plain F32 matrix: the
 * tiled kernel adds each output's products in dot_f32's order.  Widths
 * with and without a 16-value tail, heights with and without plain rows
 * after the tiles; values with both signs and zeros, so -0 sums occur.
 */
static void check_tiled_f32(tp_pool *tp, int64_t n_rows, int64_t n_cols)
{
    size_t bytes = (size_t)(n_rows * n_cols) * sizeof(float);
    float *w = malloc(bytes), *wt = malloc(bytes), *back = malloc(bytes), *d = malloc((size_t)n_cols * sizeof *d);
    fill_random(w, n_rows * n_cols);
    for (int64_t i = 0; i < n_rows * n_cols; i += 7) w[i] = i % 2 ? 0.0f : -0.0f;
    tq_tile(TQ_F32X16, w, n_rows, n_cols, wt);
    CHECK(memcmp(w, wt, bytes) != 0);
    tq_untile(TQ_F32X16, wt, 0, n_rows, n_rows, n_cols, back);
    CHECK(memcmp(w, back, bytes) == 0);
    tq_untile(TQ_F32X16, wt, 5, n_rows - 5, n_rows, n_cols, back);
    CHECK(memcmp(w + 5 * n_cols, back, bytes - (size_t)(5 * n_cols) * sizeof(float)) == 0);
    bool rows_same = true;
    for (int64_t r = 0; r < n_rows; r++) {
        tq_dequantize_row_at(TQ_F32X16, wt, r, n_rows, n_cols, d);
        rows_same = rows_same && memcmp(w + r * n_cols, d, (size_t)n_cols * sizeof *d) == 0;
    }
    CHECK(rows_same);
    if (!tk_runs_tiled(TQ_F32, n_rows, n_cols)) {
        SKIP_PART("no F32X16 kernel on this CPU (%s): tiled f32 %lldx%lld not multiplied", tk_ops_get()->isa,
                  (long long)n_rows, (long long)n_cols);
    } else {
        static const int64_t toks[] = { 1, 2, 3, 4, 5, 8, 9, 17, 33, 70 };
        for (size_t k = 0; k < ARRAY_LEN(toks); k++) {
            int64_t T = toks[k];
            float *x = malloc((size_t)(T * n_cols) * sizeof *x);
            float *y1 = malloc((size_t)(T * n_rows) * sizeof *y1), *y2 = malloc((size_t)(T * n_rows) * sizeof *y2);
            void *scratch = malloc(tk_matmul_scratch_size(TQ_F32, n_cols, T));
            fill_random(x, T * n_cols);
            for (int64_t i = 3; i < T * n_cols; i += 11) x[i] = 0.0f;
            tk_matmul(tp, TQ_F32, w, n_rows, n_cols, x, T, y1, scratch);
            tk_matmul(tp, TQ_F32X16, wt, n_rows, n_cols, x, T, y2, scratch);
            bool same = memcmp(y1, y2, (size_t)(T * n_rows) * sizeof *y1) == 0;
            if (!same) fprintf(stderr, "f32x16 %lldx%lld n_tok=%lld differs\n", (long long)n_rows, (long long)n_cols,
                               (long long)T);
            CHECK(same);
            multi_args m = { .tp = tp, .n_cols = n_cols, .n_tok = T, .x = x };
            m.mats[0] = (tk_mat){ TQ_F32X16, wt, n_rows, malloc((size_t)(T * n_rows) * sizeof(float)) };
            m.mats[1] = (tk_mat){ TQ_F32, w, 9, malloc((size_t)(T * 9) * sizeof(float)) };
            m.mats[2] = (tk_mat){ TQ_F32, w, n_rows, malloc((size_t)(T * n_rows) * sizeof(float)) };
            m.scratch = malloc(tk_matmul_multi_scratch_size(m.mats, 3, n_cols, T));
            tk_matmul_scratch_init(m.scratch);
            tp_run(tp, multi_job, &m);
            CHECK(memcmp(m.mats[0].y, y1, (size_t)(T * n_rows) * sizeof *y1) == 0);
            CHECK(memcmp(m.mats[2].y, y1, (size_t)(T * n_rows) * sizeof *y1) == 0);
            bool head = true;
            for (int64_t t = 0; t < T; t++)
                head = head && memcmp(m.mats[1].y + t * 9, y1 + t * n_rows, 9 * sizeof *y1) == 0;
            CHECK(head);
            for (int i = 0; i < 3; i++) free(m.mats[i].y);
            free(m.scratch);
            free(x);
            free(y1);
            free(y2);
            free(scratch);
        }
    }
    free(w);
    free(wt);
    free(back);
    free(d);
}

static void test_tiled(void)
{
    CHECK(tq_tiled(TQ_Q4_0) == TQ_Q4_0X16 && tq_tiled(TQ_Q8_0) == TQ_Q8_0X16 && tq_tiled(TQ_Q4_1) < 0);
    CHECK(tq_tiled(TQ_Q4_K) == TQ_Q4_KX16 && tq_tiled(TQ_Q6_K) == TQ_Q6_KX16 && tq_tiled(TQ_Q5_K) < 0);
    CHECK(tq_tiled(TQ_Q4_KX16) < 0);
    CHECK(tq_tiled(TQ_MXFP4) == TQ_MXFP4X16 && tq_tiled(TQ_IQ4_NL) == TQ_IQ4_NLX16 && tq_tiled(TQ_IQ4_XS) < 0);
    CHECK(tq_get(TQ_MXFP4X16)->untiled == TQ_MXFP4 && tq_row_size(TQ_MXFP4X16, 64) == 34);
    CHECK(tq_tileable(TQ_Q4_0, 32, 128) && !tq_tileable(TQ_Q4_0, 24, 128) && !tq_tileable(TQ_Q8_0, 32, 96));
    CHECK(tq_tileable(TQ_Q4_K, 16, 256) && tq_tileable(TQ_Q6_K, 16, 512) && !tq_tileable(TQ_Q6_K, 16, 768));
    CHECK(tq_get(TQ_Q4_0X16)->tile_rows == 16 && tq_get(TQ_Q4_0X16)->untiled == TQ_Q4_0);
    CHECK(tq_row_size(TQ_Q8_0X16, 64) == tq_row_size(TQ_Q8_0, 64));
    tp_pool *tp;
    CHECK_EQ_INT(tp_new(2, &tp), PK_OK);
    check_tiled(tp, TQ_Q4_0, 48, 256);
    check_tiled(tp, TQ_Q8_0, 48, 256);
    check_tiled(tp, TQ_Q4_0, 160, 896);   /* several units per thread */
    check_tiled(tp, TQ_Q8_0, 32, 4864);
    check_tiled(tp, TQ_Q4_K, 48, 256);
    check_tiled(tp, TQ_Q4_K, 160, 1024);
    check_tiled(tp, TQ_Q6_K, 48, 512);
    check_tiled(tp, TQ_Q6_K, 64, 2048);
    check_tiled(tp, TQ_IQ4_NL, 48, 256);
    check_tiled(tp, TQ_MXFP4, 48, 256);
    check_tiled(tp, TQ_MXFP4, 64, 2880);   /* gpt-oss's experts: 45 units, half of them off the line grid */
    check_tiled(tp, TQ_IQ4_NL, 32, 2880);
    CHECK(tq_tiled(TQ_F32) == TQ_F32X16 && tq_tiled(TQ_F32X16) < 0 && tq_get(TQ_F32X16)->untiled == TQ_F32);
    CHECK(tq_tileable(TQ_F32, 16, 1) && tq_tileable(TQ_F32, 172, 64) && !tq_tileable(TQ_F32, 15, 64));
    check_tiled_f32(tp, 64, 64);      /* stories260K's attention */
    check_tiled_f32(tp, 172, 64);     /* its FFN: 10 tiles and 12 plain rows */
    check_tiled_f32(tp, 64, 172);     /* a 12-value tail */
    check_tiled_f32(tp, 48, 100);
    check_tiled_f32(tp, 17, 8);
    check_tiled_f32(tp, 512, 64);     /* several units per thread */
    tp_free(tp);
}

static void test_matmul(void)
{
    static const int64_t toks[] = { 1, 2, 3, 4, 7, 16, 33 };
    tp_pool *tp[2];
    CHECK_EQ_INT(tp_new(1, &tp[0]), PK_OK);
    CHECK_EQ_INT(tp_new(2, &tp[1]), PK_OK);
    for (int wt = 0; wt < TQ_COUNT; wt++) {
        const tq_traits *tr = tq_get(wt);
        if (!tr || !tr->supported || wt == TQ_Q8_K || tr->tile_rows) continue;
        for (size_t k = 0; k < ARRAY_LEN(toks); k++) check_matmul(tp, wt, 37, 512, toks[k]);
        check_matmul(tp, wt, 5, 512, 18);          /* fewer rows than one tile */
    }
    check_matmul(tp, TQ_Q4_0, 700, 896, 2);        /* many chunks */
    check_matmul(tp, TQ_Q8_0, 130, 896, 21);       /* many tiles, two token groups */
    check_matmul(tp, TQ_Q6_K, 30, 512, 40);        /* K-quant GEMM: tiles, three groups */
    check_matmul(tp, TQ_Q4_K, 13, 768, 35);
    check_matmul(tp, TQ_F32, 3, 100, 4);           /* fewer rows than threads x chunks */
    for (int nt = 0; nt < 2; nt++) {
        test_matmul_chain(tp[nt]);
        test_matmul_multi(tp[nt]);
    }
    tp_free(tp[0]);
    tp_free(tp[1]);
}

/* POLYKV_ISA picks a lower table.  The choice is made once per process, so
 * each case runs in a child forked before this process makes its own. */
static void test_isa_env(void)
{
    static const char *const want[][2] = {
        { "scalar", "scalar" }, { "avx2", "avx2" }, { "bogus", NULL }, { "", NULL },
    };
    for (size_t i = 0; i < ARRAY_LEN(want); i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setenv("POLYKV_ISA", want[i][0], 1);
            const tk_ops *o = tk_ops_get();
            const tk_ops *named = want[i][1] ? tk_ops_named(want[i][1]) : NULL;
            /* An unavailable or unknown name leaves the best table, which is
             * whatever tk_ops_named of the best level returns. */
            bool ok = named ? o == named
                            : o == tk_ops_named("avx512") || (!tk_ops_named("avx512") && o == tk_ops_named("avx2"))
                              || (!tk_ops_named("avx2") && o == tk_ops_named("scalar"));
            _exit(ok ? 0 : 1);
        }
        int st = -1;
        waitpid(pid, &st, 0);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) fprintf(stderr, "POLYKV_ISA=%s\n", want[i][0]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

static void test_tables(void)
{
    const tk_ops *best = tk_ops_get();
    CHECK(best != NULL);
    CHECK(tk_ops_named("scalar") != NULL);
    CHECK(tk_ops_named("sse9") == NULL);
    CHECK(tk_ops_named(NULL) == NULL);
    printf("kernels: %s (avx2 %s, avx512 %s)\n", best->isa, tk_ops_named("avx2") ? "yes" : "no",
           tk_ops_named("avx512") ? "yes" : "no");
    for (size_t i = 0; i < ARRAY_LEN(isa_list); i++) {
        const tk_ops *o = tk_ops_named(isa_list[i]);
        if (!o) continue;
        CHECK_STR(o->isa, isa_list[i]);
        int missing = 0;
        for (int t = 0; t < TQ_COUNT; t++) {
            const tq_traits *tr = tq_get(t);
            if (!tr || !tr->supported || tr->tile_rows) continue;   /* tiled: no vec_dot (tk.h) */
            if (t != TQ_Q8_K && !o->vec_dot[t]) missing++;
            if ((int)tr->vec_dot_type == t && !o->quantize[t]) missing++;
        }
        CHECK_EQ_INT(missing, 0);
    }
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    test_isa_env();   /* first: before this process picks its table */
    TEST_RUN(test_traits);
    TEST_RUN(test_f16);
    TEST_RUN(test_bf16);
    TEST_RUN(test_layouts);
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_golden);
    TEST_RUN(test_tables);
    TEST_RUN(test_attend_rows);
    TEST_RUN(test_attend_sink_window);
    for (size_t i = 1; i < ARRAY_LEN(isa_list); i++) {
        const tk_ops *o = tk_ops_named(isa_list[i]);
        if (!o) {
            SKIP_PART("%s kernels not run: this CPU lacks the instructions", isa_list[i]);
            continue;
        }
        TEST_RUN(test_simd_dots, o);
        TEST_RUN(test_simd_dot_rows, o);
        TEST_RUN(test_simd_quantizers, o);
        TEST_RUN(test_simd_attend, o);
        TEST_RUN(test_simd_attend8, o);
        TEST_RUN(test_simd_elementwise, o);
    }
    TEST_RUN(test_matmul);
    TEST_RUN(test_tiled);
    return test_finish();
}
