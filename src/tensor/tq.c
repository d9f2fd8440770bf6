/*
 * tq.c - the type traits table, half/bfloat16 conversions and the switches
 * that route tq.h's reference entry points to the per-type routines of
 * tq_impl.h.
 *
 * The table is indexed by GGUF type id.  Ids we know but cannot run (Q8_1)
 * keep their real sizes so a file holding them can still be
 * walked and reported, with supported = false.
 *
 * Half conversion rounds to nearest even and treats inf, NaN and subnormals
 * the way the F16C instruction vcvtps2ph does (MXCSR at its default: no
 * flush-to-zero, NaNs quieted with their top payload bits kept), so the
 * scalar and SIMD activation converters produce identical bits.
 */
#include "tq_impl.h"

#include <string.h>

static const tq_traits traits[TQ_COUNT] = {
    [TQ_F32]  = { "f32",  1,         sizeof(float),         TQ_F32,  true },
    [TQ_F16]  = { "f16",  1,         sizeof(tq_f16),        TQ_F16,  true },
    [TQ_BF16] = { "bf16", 1,         sizeof(tq_bf16),       TQ_BF16, true },
    [TQ_Q4_0] = { "q4_0", TQ_QK4_0,  sizeof(tq_block_q4_0), TQ_Q8_0, true },
    [TQ_Q4_1] = { "q4_1", TQ_QK4_1,  sizeof(tq_block_q4_1), TQ_Q8_0, true },
    [TQ_Q5_0] = { "q5_0", TQ_QK5_0,  sizeof(tq_block_q5_0), TQ_Q8_0, true },
    [TQ_Q5_1] = { "q5_1", TQ_QK5_1,  sizeof(tq_block_q5_1), TQ_Q8_0, true },
    [TQ_Q8_0] = { "q8_0", TQ_QK8_0,  sizeof(tq_block_q8_0), TQ_Q8_0, true },
    /* Q8_1: 32 int8 with f16 d and f16 d*sum; known, never produced here. */
    [TQ_Q8_1] = { "q8_1", 32,        36,                    TQ_Q8_1, false },
    [TQ_Q2_K] = { "q2_K", TQ_QK_K,   sizeof(tq_block_q2_K), TQ_Q8_K, true },
    [TQ_Q3_K] = { "q3_K", TQ_QK_K,   sizeof(tq_block_q3_K), TQ_Q8_K, true },
    [TQ_Q4_K] = { "q4_K", TQ_QK_K,   sizeof(tq_block_q4_K), TQ_Q8_K, true },
    [TQ_Q5_K] = { "q5_K", TQ_QK_K,   sizeof(tq_block_q5_K), TQ_Q8_K, true },
    [TQ_Q6_K] = { "q6_K", TQ_QK_K,   sizeof(tq_block_q6_K), TQ_Q8_K, true },
    [TQ_Q8_K] = { "q8_K", TQ_QK_K,   sizeof(tq_block_q8_K), TQ_Q8_K, true },
    [TQ_IQ4_NL] = { "iq4_nl", TQ_QK4_NL, sizeof(tq_block_iq4_nl), TQ_Q8_0, true },
    [TQ_IQ4_XS] = { "iq4_xs", TQ_QK_K,   sizeof(tq_block_iq4_xs), TQ_Q8_K, true },
    [TQ_MXFP4]  = { "mxfp4",  TQ_QK_MXFP4, sizeof(tq_block_mxfp4), TQ_Q8_0, true },
    [TQ_IQ2_XXS] = { "iq2_xxs", TQ_QK_K, sizeof(tq_block_iq2_xxs), TQ_Q8_K, true },
    [TQ_IQ2_XS]  = { "iq2_xs",  TQ_QK_K, sizeof(tq_block_iq2_xs),  TQ_Q8_K, true },
    [TQ_IQ2_S]   = { "iq2_s",   TQ_QK_K, sizeof(tq_block_iq2_s),   TQ_Q8_K, true },
    [TQ_IQ3_XXS] = { "iq3_xxs", TQ_QK_K, sizeof(tq_block_iq3_xxs), TQ_Q8_K, true },
    [TQ_IQ3_S]   = { "iq3_s",   TQ_QK_K, sizeof(tq_block_iq3_s),   TQ_Q8_K, true },
    [TQ_IQ1_S]   = { "iq1_s",   TQ_QK_K, sizeof(tq_block_iq1_s),   TQ_Q8_K, true },
    [TQ_IQ1_M]   = { "iq1_m",   TQ_QK_K, sizeof(tq_block_iq1_m),   TQ_Q8_K, true },
    [TQ_Q4_0X16] = { "q4_0x16", TQ_QK4_0, sizeof(tq_block_q4_0), TQ_Q8_0, true, TQ_TILE_ROWS, TQ_Q4_0 },
    [TQ_Q8_0X16] = { "q8_0x16", TQ_QK8_0, sizeof(tq_block_q8_0), TQ_Q8_0, true, TQ_TILE_ROWS, TQ_Q8_0 },
    [TQ_Q4_KX16] = { "q4_Kx16", TQ_QK_K, sizeof(tq_block_q4_K), TQ_Q8_K, true, TQ_TILE_ROWS, TQ_Q4_K },
    [TQ_Q6_KX16] = { "q6_Kx16", TQ_QK_K, sizeof(tq_block_q6_K), TQ_Q8_K, true, TQ_TILE_ROWS, TQ_Q6_K },
    [TQ_MXFP4X16] = { "mxfp4x16", TQ_QK_MXFP4, sizeof(tq_block_mxfp4), TQ_Q8_0, true, TQ_TILE_ROWS, TQ_MXFP4 },
    [TQ_IQ4_NLX16] = { "iq4_nlx16", TQ_QK4_NL, sizeof(tq_block_iq4_nl), TQ_Q8_0, true, TQ_TILE_ROWS, TQ_IQ4_NL },
    [TQ_F32X16] = { "f32x16", 1, sizeof(float), TQ_F32, true, TQ_TILE_ROWS, TQ_F32 },
};

/* The block structs must have exactly GGUF's byte sizes (no padding). */
_Static_assert(sizeof(tq_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(tq_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(tq_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(tq_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(tq_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(tq_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(tq_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(tq_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(tq_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(tq_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(tq_block_q8_K) == 292, "q8_K layout");
_Static_assert(sizeof(tq_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(tq_block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(tq_block_mxfp4) == 17, "mxfp4 layout");
_Static_assert(sizeof(tq_block_iq2_xxs) == 66, "iq2_xxs layout");
_Static_assert(sizeof(tq_block_iq2_xs) == 74, "iq2_xs layout");
_Static_assert(sizeof(tq_block_iq2_s) == 82, "iq2_s layout");
_Static_assert(sizeof(tq_block_iq3_xxs) == 98, "iq3_xxs layout");
_Static_assert(sizeof(tq_block_iq3_s) == 110, "iq3_s layout");
_Static_assert(sizeof(tq_block_iq1_s) == 50, "iq1_s layout");
_Static_assert(sizeof(tq_block_iq1_m) == 56, "iq1_m layout");

const tq_traits *tq_get(int type)
{
    if (type < 0 || type >= TQ_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

size_t tq_row_size(int type, int64_t n)
{
    const tq_traits *t = tq_get(type);
    if (!t || n < 0 || n % t->blck_size != 0) return 0;
    return (size_t)(n / t->blck_size) * t->type_size;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tq_f16_to_f32(tq_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f)                      /* inf / NaN: payload moves up */
        return bits_f32(sign | 0x7f800000 | (man << 13));
    if (exp == 0) {                       /* zero / subnormal: man * 2^-24, exact */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

tq_f16 tq_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;

    if (ax > 0x7f800000)                  /* NaN: quiet it, keep top payload */
        return (tq_f16)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000)                 /* >= 65520 rounds past 65504: inf */
        return (tq_f16)(sign | 0x7c00);
    if (ax >= 0x38800000) {               /* normal half: rebias, round at bit 13 */
        ax -= 0x38000000;
        ax += 0xfff + ((ax >> 13) & 1);
        return (tq_f16)(sign | (ax >> 13));
    }
    /* Subnormal half (or zero): units of 2^-24.  The float is m * 2^(e-150),
     * so the count is m >> (126 - e) rounded to nearest even; anything
     * below 2^-25 (e < 102) rounds to zero. */
    uint32_t e = ax >> 23;
    if (e < 102) return (tq_f16)sign;
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;             /* 14 .. 24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (tq_f16)(sign | q);            /* q may carry into the min normal: correct */
}

float tq_bf16_to_f32(tq_bf16 h)
{
    return bits_f32((uint32_t)h << 16);
}

tq_bf16 tq_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)    /* NaN: truncate and force quiet */
        return (tq_bf16)((u >> 16) | 0x40);
    return (tq_bf16)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

void tq_dequantize_row(tq_type type, const void *x, float *y, int64_t n)
{
    switch (type) {
    case TQ_F32:  tq_dequant_f32(x, y, n); break;
    case TQ_F16:  tq_dequant_f16(x, y, n); break;
    case TQ_BF16: tq_dequant_bf16(x, y, n); break;
    case TQ_Q4_0: tq_dequant_q4_0(x, y, n); break;
    case TQ_Q4_1: tq_dequant_q4_1(x, y, n); break;
    case TQ_Q5_0: tq_dequant_q5_0(x, y, n); break;
    case TQ_Q5_1: tq_dequant_q5_1(x, y, n); break;
    case TQ_Q8_0: tq_dequant_q8_0(x, y, n); break;
    case TQ_Q2_K: tq_dequant_q2_K(x, y, n); break;
    case TQ_Q3_K: tq_dequant_q3_K(x, y, n); break;
    case TQ_Q4_K: tq_dequant_q4_K(x, y, n); break;
    case TQ_Q5_K: tq_dequant_q5_K(x, y, n); break;
    case TQ_Q6_K: tq_dequant_q6_K(x, y, n); break;
    case TQ_Q8_K: tq_dequant_q8_K(x, y, n); break;
    case TQ_IQ4_NL: tq_dequant_iq4_nl(x, y, n); break;
    case TQ_IQ4_XS: tq_dequant_iq4_xs(x, y, n); break;
    case TQ_MXFP4: tq_dequant_mxfp4(x, y, n); break;
    case TQ_IQ2_XXS: tq_dequant_iq2_xxs(x, y, n); break;
    case TQ_IQ2_XS: tq_dequant_iq2_xs(x, y, n); break;
    case TQ_IQ2_S: tq_dequant_iq2_s(x, y, n); break;
    case TQ_IQ3_XXS: tq_dequant_iq3_xxs(x, y, n); break;
    case TQ_IQ3_S: tq_dequant_iq3_s(x, y, n); break;
    case TQ_IQ1_S: tq_dequant_iq1_s(x, y, n); break;
    case TQ_IQ1_M: tq_dequant_iq1_m(x, y, n); break;
    default: ASSERT(!"tq_dequantize_row: unsupported type");
    }
}

void tq_quantize_row(tq_type type, const float *x, void *y, int64_t n)
{
    switch (type) {
    case TQ_F32:  tq_quant_f32(x, y, n); break;
    case TQ_F16:  tq_quant_f16(x, y, n); break;
    case TQ_BF16: tq_quant_bf16(x, y, n); break;
    case TQ_Q4_0: tq_quant_q4_0(x, y, n); break;
    case TQ_Q4_1: tq_quant_q4_1(x, y, n); break;
    case TQ_Q5_0: tq_quant_q5_0(x, y, n); break;
    case TQ_Q5_1: tq_quant_q5_1(x, y, n); break;
    case TQ_Q8_0: tq_quant_q8_0(x, y, n); break;
    case TQ_Q2_K: tq_quant_q2_K(x, y, n); break;
    case TQ_Q3_K: tq_quant_q3_K(x, y, n); break;
    case TQ_Q4_K: tq_quant_q4_K(x, y, n); break;
    case TQ_Q5_K: tq_quant_q5_K(x, y, n); break;
    case TQ_Q6_K: tq_quant_q6_K(x, y, n); break;
    case TQ_Q8_K: tq_quant_q8_K(x, y, n); break;
    case TQ_IQ4_NL: tq_quant_iq4_nl(x, y, n); break;
    case TQ_IQ4_XS: tq_quant_iq4_xs(x, y, n); break;
    case TQ_MXFP4: tq_quant_mxfp4(x, y, n); break;
    default: ASSERT(!"tq_quantize_row: unsupported type");
    }
}

bool tq_has_quantizer(int type)
{
    const tq_traits *t = tq_get(type);
    if (!t || !t->supported || t->tile_rows) return false;
    switch (type) {
    case TQ_IQ2_XXS: case TQ_IQ2_XS: case TQ_IQ2_S: case TQ_IQ3_XXS: case TQ_IQ3_S: case TQ_IQ1_S: case TQ_IQ1_M:
        return false;
    default: return true;
    }
}

float tq_vec_dot_ref(tq_type wtype, int64_t n, const void *w, const void *a)
{
    switch (wtype) {
    case TQ_F32:  return tq_dot_f32(n, w, a);
    case TQ_F16:  return tq_dot_f16(n, w, a);
    case TQ_BF16: return tq_dot_bf16(n, w, a);
    case TQ_Q4_0: return tq_dot_q4_0(n, w, a);
    case TQ_Q4_1: return tq_dot_q4_1(n, w, a);
    case TQ_Q5_0: return tq_dot_q5_0(n, w, a);
    case TQ_Q5_1: return tq_dot_q5_1(n, w, a);
    case TQ_Q8_0: return tq_dot_q8_0(n, w, a);
    case TQ_Q2_K: return tq_dot_q2_K(n, w, a);
    case TQ_Q3_K: return tq_dot_q3_K(n, w, a);
    case TQ_Q4_K: return tq_dot_q4_K(n, w, a);
    case TQ_Q5_K: return tq_dot_q5_K(n, w, a);
    case TQ_Q6_K: return tq_dot_q6_K(n, w, a);
    case TQ_IQ4_NL: return tq_dot_iq4_nl(n, w, a);
    case TQ_IQ4_XS: return tq_dot_iq4_xs(n, w, a);
    case TQ_MXFP4: return tq_dot_mxfp4(n, w, a);
    case TQ_IQ2_XXS: return tq_dot_iq2_xxs(n, w, a);
    case TQ_IQ2_XS: return tq_dot_iq2_xs(n, w, a);
    case TQ_IQ2_S: return tq_dot_iq2_s(n, w, a);
    case TQ_IQ3_XXS: return tq_dot_iq3_xxs(n, w, a);
    case TQ_IQ3_S: return tq_dot_iq3_s(n, w, a);
    case TQ_IQ1_S: return tq_dot_iq1_s(n, w, a);
    case TQ_IQ1_M: return tq_dot_iq1_m(n, w, a);
    default: ASSERT(!"tq_vec_dot_ref: unsupported weight type");
    }
    return 0.0f;
}
