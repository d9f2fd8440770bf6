/*
 * tk.h - compute kernels with runtime CPU dispatch.
 *
 * DESIGN: one table of function pointers per instruction set (scalar,
 * AVX2, AVX-512), each filled by files compiled with their own -m flags
 * (tk_scalar.c; tk_legacy_avx2.c + tk_kquant_avx2.c; tk_legacy_avx512.c +
 * tk_kquant_avx512.c; see tk_impl.h).  tk_ops_get() picks the best table
 * the CPU supports once, from cpuid and xgetbv; POLYKV_ISA=scalar|avx2|avx512
 * in the environment forces a lower one (an unknown or unsupported name is
 * ignored).  A NULL entry in a SIMD table falls back to the level below
 * (avx512 -> avx2 -> scalar), so ISA files can grow type by type.
 *
 * Error budget: a SIMD kernel may differ from the scalar reference only by
 * float summation order: |simd - ref| <= 1e-5 * sum_k |w_k * a_k| + 1e-6
 * for dot products.  Quantizers of activations must be bit-exact to the
 * reference (tq_quantize_row), since later integer dots depend on them.
 */
#ifndef TK_H
#define TK_H

#include "tq.h"
#include "tp.h"

/* Dot of a weight row w (n values of the weight type) with activations a
 * (n values of its vec_dot_type). */
typedef float (*tk_vec_dot_fn)(int64_t n, const void *w, const void *a);
/* n floats -> n values of an activation type (F16, BF16, Q8_0, Q8_K). */
typedef void (*tk_quantize_fn)(const float *x, void *y, int64_t n);

typedef struct tk_ops {
    const char *isa;                        /* "scalar", "avx2", "avx512" */
    tk_vec_dot_fn  vec_dot[TQ_COUNT];       /* indexed by weight type */
    tk_quantize_fn quantize[TQ_COUNT];      /* indexed by activation type */
} tk_ops;

/* The table for this CPU (chosen once; thread-safe after first call). */
const tk_ops *tk_ops_get(void);
/* The table of a named ISA, or NULL when unknown or not supported here. */
const tk_ops *tk_ops_named(const char *isa);

/*
 * y = W x for n_tok activation rows:
 *   y[t * n_rows + r] = dot(W row r, x[t * n_cols ...])   r < n_rows, t < n_tok
 * W is n_rows rows of n_cols values of `wtype` (row stride tq_row_size).
 * Runs on every thread of tp (call from the pool's owner thread, outside a
 * job).  `scratch` holds the converted activations and a work counter: at
 * least tk_matmul_scratch_size(wtype, n_cols, n_tok) bytes, any alignment,
 * not shared with a concurrent call.  Allocates nothing.  Each output is one
 * vec_dot of the chosen table, so results do not depend on the thread count.
 */
void tk_matmul(tp_pool *tp, tq_type wtype, const void *w, int64_t n_rows, int64_t n_cols,
               const float *x, int64_t n_tok, float *y, void *scratch);
size_t tk_matmul_scratch_size(tq_type wtype, int64_t n_cols, int64_t n_tok);

/* The same, as a phase of a job already running on the pool: every thread
 * of the job calls it with its (ith, nth), nth == tp_n_threads(tp); it
 * contains its own barriers (y is complete for all threads on return, and
 * scratch may be reused by the next call). */
void tk_matmul_job(int ith, int nth, tp_pool *tp, tq_type wtype, const void *w,
                   int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                   float *y, void *scratch);

#endif
