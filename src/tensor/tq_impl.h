/*
 * tq_impl.h - per-type scalar routines behind tq.h's switches.  Internal to
 * src/tensor: tq.c dispatches on the type id to these.  Each works on whole
 * blocks (n % block size == 0).  tq_legacy.c holds F32/F16/BF16 and the
 * 32-value formats, tq_kquant.c the 256-value K-quants.
 */
#ifndef TQ_IMPL_H
#define TQ_IMPL_H

#include "tq.h"

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
TQ_DECLARE(q4_K)
TQ_DECLARE(q5_K)
TQ_DECLARE(q6_K)
TQ_DECLARE(q8_K)   /* tq_dot_q8_K is unused (Q8_K is an activation type) */

#undef TQ_DECLARE

#endif
