/*
 * tq_legacy.c - scalar reference routines for the plain float types (F32,
 * F16, BF16) and the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
 *
 * Block layouts (GGUF's), 32 values per block, value j of the block:
 *
 *   q4_0  d:f16 | qs[16]          v_j = d * (nib_j - 8)
 *   q4_1  d:f16 m:f16 | qs[16]    v_j = d * nib_j + m
 *   q5_0  d:f16 | qh[4] | qs[16]  v_j = d * ((hbit_j << 4 | nib_j) - 16)
 *   q5_1  d:f16 m:f16 | qh | qs   v_j = d * (hbit_j << 4 | nib_j) + m
 *   q8_0  d:f16 | qs[32] int8     v_j = d * qs[j]
 *
 *   nib_j  = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4   (first half in the low
 *            nibbles, second half in the high nibbles of the same bytes)
 *   hbit_j = bit j of qh read as a little-endian uint32
 *
 * Weight quantizers reproduce the reference engine's model-file quantizers
 * (scale from the signed extreme, truncating +0.5 rounding) so gen-model
 * writes the files that tool would.  Q8_0 is also the activation type of
 * the 32-value formats, and there it must match what the engine does to
 * activations on x86 bit for bit: d = amax / 127 stored as f16, values
 * multiplied by 127 / amax (not by 1 / d) and rounded to nearest even.
 *
 * Dot products accumulate in double: they are the yardstick the SIMD
 * kernels are measured against, so their own rounding should be negligible.
 * Products inside a block are exact integers.
 */
#include "tq_impl.h"

#include <math.h>
#include <string.h>

/* Value j's 4-bit code in a 32-value block of packed nibbles. */
static int nibble(const uint8_t *qs, int j)
{
    return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Value j's 5-bit code: its nibble plus bit j of qh as bit 4. */
static int code5(const uint8_t *qh, const uint8_t *qs, int j)
{
    return nibble(qs, j) | (int)((load_u32le(qh) >> j) & 1) << 4;
}

/* Packs 32 codes (each < 16) into nibbles and, when qh is given, their bit 4
 * into qh. */
static void pack_codes(const uint8_t codes[32], uint8_t *qs, uint8_t *qh)
{
    uint32_t hbits = 0;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((codes[j] & 15) | (codes[j + 16] & 15) << 4);
    for (int j = 0; j < 32; j++)
        hbits |= (uint32_t)((codes[j] >> 4) & 1) << j;
    if (qh) store_u32le(qh, hbits);
}

/* The element of largest magnitude, sign kept (the first one on ties). */
static float signed_extreme(const float *x)
{
    float amax = 0.0f, ext = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            ext = x[j];
        }
    }
    return ext;
}

static void min_max(const float *x, float *mn, float *mx)
{
    *mn = x[0];
    *mx = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

/* ---- F32 ---------------------------------------------------------------- */

void tq_dequant_f32(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void tq_quant_f32(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

float tq_dot_f32(int64_t n, const void *w, const void *a)
{
    const float *wf = w, *af = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)wf[i] * af[i];
    return (float)sum;
}

/* ---- F16 / BF16 ----------------------------------------------------------- */

void tq_dequant_f16(const void *x, float *y, int64_t n)
{
    const tq_f16 *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = tq_f16_to_f32(h[i]);
}

void tq_quant_f16(const float *x, void *y, int64_t n)
{
    tq_f16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = tq_f32_to_f16(x[i]);
}

float tq_dot_f16(int64_t n, const void *w, const void *a)
{
    const tq_f16 *wh = w, *ah = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)tq_f16_to_f32(wh[i]) * tq_f16_to_f32(ah[i]);
    return (float)sum;
}

void tq_dequant_bf16(const void *x, float *y, int64_t n)
{
    const tq_bf16 *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = tq_bf16_to_f32(h[i]);
}

void tq_quant_bf16(const float *x, void *y, int64_t n)
{
    tq_bf16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = tq_f32_to_bf16(x[i]);
}

float tq_dot_bf16(int64_t n, const void *w, const void *a)
{
    const tq_bf16 *wh = w, *ah = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)tq_bf16_to_f32(wh[i]) * tq_bf16_to_f32(ah[i]);
    return (float)sum;
}

/* ---- Q4_0 ----------------------------------------------------------------- */

void tq_dequant_q4_0(const void *x, float *y, int64_t n)
{
    const tq_block_q4_0 *b = x;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = tq_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)(nibble(b[i].qs, j) - 8) * d;
    }
}

void tq_quant_q4_0(const float *x, void *y, int64_t n)
{
    tq_block_q4_0 *b = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        /* The extreme maps to code 0 exactly (-8 * d), so the range used is
         * [-8, 7] with the larger side at full resolution. */
        float d = signed_extreme(x) / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t codes[32];
        for (int j = 0; j < 32; j++) {
            int c = (int8_t)(x[j] * id + 8.5f);
            codes[j] = (uint8_t)(c > 15 ? 15 : c);
        }
        b[i].d = tq_f32_to_f16(d);
        pack_codes(codes, b[i].qs, NULL);
    }
}

float tq_dot_q4_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_0 *bw = w;
    const tq_block_q8_0 *ba = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t si = 0;
        for (int j = 0; j < 32; j++) si += (nibble(bw[i].qs, j) - 8) * ba[i].qs[j];
        sum += (double)(tq_f16_to_f32(bw[i].d) * tq_f16_to_f32(ba[i].d)) * si;
    }
    return (float)sum;
}

/* ---- Q4_1 ----------------------------------------------------------------- */

void tq_dequant_q4_1(const void *x, float *y, int64_t n)
{
    const tq_block_q4_1 *b = x;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = tq_f16_to_f32(b[i].d), m = tq_f16_to_f32(b[i].m);
        for (int j = 0; j < 32; j++) y[j] = (float)nibble(b[i].qs, j) * d + m;
    }
}

void tq_quant_q4_1(const float *x, void *y, int64_t n)
{
    tq_block_q4_1 *b = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        min_max(x, &mn, &mx);
        float d = (mx - mn) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t codes[32];
        for (int j = 0; j < 32; j++) {
            int c = (int8_t)((x[j] - mn) * id + 0.5f);
            codes[j] = (uint8_t)(c > 15 ? 15 : c);
        }
        b[i].d = tq_f32_to_f16(d);
        b[i].m = tq_f32_to_f16(mn);
        pack_codes(codes, b[i].qs, NULL);
    }
}

/* Q8_0 activations, not Q8_1: the offset term m * sum(a) is rebuilt from the
 * activation block's integer sum, sum_j (d q_j + m) da qa_j =
 * d da sum(q_j qa_j) + m da sum(qa_j). */
float tq_dot_q4_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q4_1 *bw = w;
    const tq_block_q8_0 *ba = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t si = 0, sa = 0;
        for (int j = 0; j < 32; j++) {
            si += nibble(bw[i].qs, j) * ba[i].qs[j];
            sa += ba[i].qs[j];
        }
        float da = tq_f16_to_f32(ba[i].d);
        sum += (double)(tq_f16_to_f32(bw[i].d) * da) * si
             + (double)(tq_f16_to_f32(bw[i].m) * da) * sa;
    }
    return (float)sum;
}

/* ---- Q5_0 ----------------------------------------------------------------- */

void tq_dequant_q5_0(const void *x, float *y, int64_t n)
{
    const tq_block_q5_0 *b = x;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = tq_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)(code5(b[i].qh, b[i].qs, j) - 16) * d;
    }
}

void tq_quant_q5_0(const float *x, void *y, int64_t n)
{
    tq_block_q5_0 *b = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float d = signed_extreme(x) / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t codes[32];
        for (int j = 0; j < 32; j++) {
            int c = (int8_t)(x[j] * id + 16.5f);
            codes[j] = (uint8_t)(c > 31 ? 31 : c);
        }
        b[i].d = tq_f32_to_f16(d);
        pack_codes(codes, b[i].qs, b[i].qh);
    }
}

float tq_dot_q5_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_0 *bw = w;
    const tq_block_q8_0 *ba = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t si = 0;
        for (int j = 0; j < 32; j++)
            si += (code5(bw[i].qh, bw[i].qs, j) - 16) * ba[i].qs[j];
        sum += (double)(tq_f16_to_f32(bw[i].d) * tq_f16_to_f32(ba[i].d)) * si;
    }
    return (float)sum;
}

/* ---- Q5_1 ----------------------------------------------------------------- */

void tq_dequant_q5_1(const void *x, float *y, int64_t n)
{
    const tq_block_q5_1 *b = x;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = tq_f16_to_f32(b[i].d), m = tq_f16_to_f32(b[i].m);
        for (int j = 0; j < 32; j++) y[j] = (float)code5(b[i].qh, b[i].qs, j) * d + m;
    }
}

void tq_quant_q5_1(const float *x, void *y, int64_t n)
{
    tq_block_q5_1 *b = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        min_max(x, &mn, &mx);
        float d = (mx - mn) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t codes[32];
        /* (x - min) * id lies in [0, 31] up to rounding, so +0.5 and
         * truncation stays in range without a clamp (as the reference). */
        for (int j = 0; j < 32; j++) codes[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        b[i].d = tq_f32_to_f16(d);
        b[i].m = tq_f32_to_f16(mn);
        pack_codes(codes, b[i].qs, b[i].qh);
    }
}

float tq_dot_q5_1(int64_t n, const void *w, const void *a)
{
    const tq_block_q5_1 *bw = w;
    const tq_block_q8_0 *ba = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t si = 0, sa = 0;
        for (int j = 0; j < 32; j++) {
            si += code5(bw[i].qh, bw[i].qs, j) * ba[i].qs[j];
            sa += ba[i].qs[j];
        }
        float da = tq_f16_to_f32(ba[i].d);
        sum += (double)(tq_f16_to_f32(bw[i].d) * da) * si
             + (double)(tq_f16_to_f32(bw[i].m) * da) * sa;
    }
    return (float)sum;
}

/* ---- Q8_0 ----------------------------------------------------------------- */

void tq_dequant_q8_0(const void *x, float *y, int64_t n)
{
    const tq_block_q8_0 *b = x;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = tq_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

void tq_quant_q8_0(const float *x, void *y, int64_t n)
{
    tq_block_q8_0 *b = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = tq_f32_to_f16(amax / 127.0f);
        /* nearbyintf rounds half to even under the default rounding mode,
         * as the engine's vector rounding does; |x * id| <= 127 so no clamp. */
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

float tq_dot_q8_0(int64_t n, const void *w, const void *a)
{
    const tq_block_q8_0 *bw = w;
    const tq_block_q8_0 *ba = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t si = 0;
        for (int j = 0; j < 32; j++) si += bw[i].qs[j] * ba[i].qs[j];
        sum += (double)(tq_f16_to_f32(bw[i].d) * tq_f16_to_f32(ba[i].d)) * si;
    }
    return (float)sum;
}
