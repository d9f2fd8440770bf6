/*
 * tk_elem_avx512.c - element-wise steps of a layer (tk.h: rms_norm with the
 * residual add fused in, swiglu) on 16 float lanes, AVX-512F.  The float
 * operations are the reference's (tk_scalar.c) except where said:
 *
 *   rms_norm  the squares (float products, as the reference) go into 16
 *             double partial sums, added at the end: only the double
 *             summation order differs, far below float resolution.
 *   swiglu    exp from tk_exp_avx512.h (relative error below 2e-7), the
 *             division and products exact IEEE as in the reference.
 *
 * Tails shorter than 16 use masked loads and stores.
 */
#include "tk_exp_avx512.h"
#include "tk_impl.h"

#include <math.h>

static inline __mmask16 tail(int n, int i)
{
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

static void rms_norm(float *x, const float *d, const float *w, float *y, int n, float eps)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail(n, i);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        if (d) {
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, d + i));
            _mm512_mask_storeu_ps(x + i, k, v);
        }
        __m512 sq = _mm512_mul_ps(v, v);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    float mean = (float)(sum / n);
    __m512 scale = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail(n, i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), scale);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i)));
    }
}

static void swiglu(const float *g, const float *u, float *h, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail(n, i);
        __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        __m512 e = tk_exp16(_mm512_xor_ps(gv, neg));
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(h + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

void tk_fill_avx512_elem(tk_ops *o)
{
    o->rms_norm = rms_norm;
    o->swiglu = swiglu;
}
