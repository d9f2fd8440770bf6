/*
 * tq_impl.h - per-type scalar routines behind tq.h's switches.  Internal to
 * src/tensor: tq.c dispatches on the type id to these.  Each works on whole
 * blocks (n % block size == 0).  tq_legacy.c holds F32/F16/BF16 and the
 * 32-value formats, tq_kquant.c the 256-value K-quants, tq_iquant.c the
 * non-linear IQ4_NL / IQ4_XS.
 */
#ifndef TQ_IMPL_H
#define TQ_IMPL_H

#include "tq.h"

#include <string.h>

#define TQ_DECLARE(t) \
    void tq_dequant_##t(const void *x, float *y, int64_t n); \
    void tq_quant_##t(const float *x, void *y, int64_t n); \
    float tq_dot_##t(int64_t n, const void *w, const void *a);

TQ_DECLARE(f32)
TQ_DECLARE(f16)
TQ_DECLARE(bf16)
TQ_DECLARE(q4_0)
TQ_DECLARE(q4_1)
TQ_DECLARE(q5_0)
TQ_DECLARE(q5_1)
TQ_DECLARE(q8_0)
TQ_DECLARE(q2_K)
TQ_DECLARE(q3_K)
TQ_DECLARE(q4_K)
TQ_DECLARE(q5_K)
TQ_DECLARE(q6_K)
TQ_DECLARE(q8_K)   /* tq_dot_q8_K is unused (Q8_K is an activation type) */
TQ_DECLARE(iq4_nl)
TQ_DECLARE(iq4_xs)

#undef TQ_DECLARE

/* Rounds to the nearest integer, ties to even, for |v| < 2^22: adding
 * 1.5 * 2^23 leaves the rounded value in the low mantissa bits.  Out of that
 * range the result is meaningless but deterministic, the same as the
 * reference engine's, which the quantizers rely on for identical bytes. */
static inline int tq_round_nearest(float v)
{
    float biased = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* The 8 float lanes of the reference engine's x86 kernels summed in their
 * order: ((0+4) + (2+6)) + ((1+5) + (3+7)). */
static inline float tq_sum_lanes(const float acc[8])
{
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* lane[m] += sc * (q . a) over values 4m..4m+3 of one 32-value run, with
 * sc = sc_lo for lanes 0-3 and sc_hi for lanes 4-7: how 256-bit multiply-add
 * instructions group a run's products. */
static inline void tq_run_lanes(int32_t lane[8], int32_t sc_lo, int32_t sc_hi, const int8_t *q,
                                const int8_t *a)
{
    for (int m = 0; m < 8; m++) {
        int32_t s = 0;
        for (int t = 0; t < 4; t++) s += q[4 * m + t] * a[4 * m + t];
        lane[m] += (m < 4 ? sc_lo : sc_hi) * s;
    }
}

#endif
