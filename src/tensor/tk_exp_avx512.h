/*
 * tk_exp_avx512.h - exp on 16 or 8 float lanes for the AVX-512 kernel files
 * (include only from files compiled with the AVX-512 flags).
 *
 * exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 (ln2 in two parts
 * so r is exact to a few ulp), p the degree-6 Taylor polynomial of e^r on
 * |r| <= ln2 / 2 (relative error below 2e-7), vscalefps for the 2^n.  Inputs
 * below -88 give exactly 0 (so -inf does), above 88 give 2^127-ish (no inf:
 * callers pass x <= 0 or small arguments).
 */
#ifndef TK_EXP_AVX512_H
#define TK_EXP_AVX512_H

#include <immintrin.h>

static inline __m512 tk_exp16(__m512 x)
{
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

/* exp(x) for x <= 88, 0 below -88 as tk_exp16, for chains bound by
 * latency (attention's head-dim-8 rows): the range reduction in one step,
 * n rounded by the 1.5 * 2^23 trick (two multiply-adds where vrndscaleps
 * is two cycles) and the polynomial in Estrin's order.  Latency ~28 cycles
 * to tk_exp16's ~52; relative error below 3e-7 (6e-7 under x = -20, for
 * weights that add nothing). */
static inline __m512 tk_exp16_short(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic), magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945f), x);
    __m512 r2 = _mm512_mul_ps(r, r), r4 = _mm512_mul_ps(r2, r2);
    __m512 p01 = _mm512_add_ps(r, _mm512_set1_ps(1.0f));
    __m512 p23 = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 6), _mm512_set1_ps(0.5f));
    __m512 p45 = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 120), _mm512_set1_ps(1.0f / 24));
    __m512 p = _mm512_fmadd_ps(r4, _mm512_fmadd_ps(r2, _mm512_set1_ps(1.0f / 720), p45), _mm512_fmadd_ps(r2, p23, p01));
    return _mm512_maskz_scalef_ps(live, p, n);
}

static inline __m256 tk_exp8(__m256 x)
{
    __mmask8 live = _mm256_cmp_ps_mask(x, _mm256_set1_ps(-88.0f), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_roundscale_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    return _mm256_maskz_mov_ps(live, _mm256_scalef_ps(p, n));
}

#endif
