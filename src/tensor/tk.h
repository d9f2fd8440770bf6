/*
 * tk.h - compute kernels with runtime CPU dispatch.
 *
 * DESIGN: one table of function pointers per instruction set (scalar,
 * AVX2, AVX-512), each filled by files compiled with their own -m flags
 * (tk_scalar.c; tk_legacy_avx2.c + tk_kquant_avx2.c + tk_iquant_avx2.c;
 * tk_legacy_avx512.c + tk_kquant_avx512.c; see tk_impl.h).  tk_ops_get() picks the best table
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
/* vec_dot of n_rows weight rows (stride wrow) by n_tok activation rows
 * (stride arow): y[t * y_stride + r], each the bits vec_dot gives. */
typedef void (*tk_dot_rows_fn)(int64_t n, const void *w, size_t wrow, int n_rows, const void *a, size_t arow,
                               int n_tok, float *y, int64_t y_stride);
/* n floats -> n values of an activation type (F16, BF16, Q8_0, Q8_K). */
typedef void (*tk_quantize_fn)(const float *x, void *y, int64_t n);

/*
 * Attention of up to TK_ATTN_ROWS query rows that share one K/V head (the
 * query heads of a GQA group, for one or several tokens of one sequence):
 *
 *   out[i] = sum_j softmax_j(scale * K[cell_j] . q[i]) * V[cell_j],  kv0[i] <= j < n_kv[i]
 *
 * (kv0 NULL: 0; a sliding window starts a row's cells later).  With sink
 * (per row, NULL: none) the softmax's sum has one more term, exp(sink[i]),
 * that carries no value: gpt-oss's attention sinks.
 * so each K/V row is read once for all the rows.  K and V rows are of any
 * cache type tk_kv_type_ok accepts (type_k, type_v: F32, F16, BF16 or a
 * 32-value block format); the row of cell c starts at k + c * k_stride
 * bytes (already offset to the head's slice).  The query is first rounded
 * to what the reference engine multiplies K with (tk_attn_round_query):
 * F16 for an F16 K, BF16 for BF16, Q8_0 for the block formats.  Rows may
 * see different spans of cells (a causal batch).  head dims <=
 * TK_ATTN_MAX_DIM, multiples of the types' block sizes.  kv0[i] < n_kv[i].
 */
#define TK_ATTN_ROWS 16
#define TK_ATTN_MAX_DIM 512   /* Gemma 4's global layers */
typedef struct tk_attn {
    int n_q, hd_k, hd_v;
    const float *q;          /* [n_q][hd_k] */
    const int32_t *n_kv;     /* [n_q] cells row i sees: cells[kv0[i] .. n_kv[i]) */
    const int32_t *kv0;      /* [n_q] or NULL (0) */
    const float *sink;       /* [n_q] or NULL */
    const int32_t *cells;    /* cell indices, in position order */
    tq_type type_k, type_v;  /* cache types (tk_kv_type_ok) */
    const void *k, *v;
    size_t k_stride, v_stride;
    float scale;
    float *out;              /* [n_q][hd_v] */
} tk_attn;
/* scratch: tk_attn_scratch_size() bytes, any alignment, private to the call. */
typedef void (*tk_attend_fn)(const tk_attn *a, void *scratch);
size_t tk_attn_scratch_size(void);
/* Whether a K/V cache may hold `type`: F32, F16, BF16, and the 32-value
 * block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL (llama-server's
 * -ctk / -ctv choices). */
bool tk_kv_type_ok(tq_type type);
/* q[0..n) rounded in place to the values the reference engine multiplies
 * a type_k K row with: F16 or BF16 for those caches, Q8_0 (per 32 values)
 * for the block formats, unchanged for F32.  n a multiple of 32 for block
 * formats. */
void tk_attn_round_query(tq_type type_k, float *q, int n);

typedef struct tk_ops {
    const char *isa;                        /* "scalar", "avx2", "avx512" */
    tk_vec_dot_fn  vec_dot[TQ_COUNT];       /* indexed by weight type */
    tk_dot_rows_fn dot_rows[TQ_COUNT];      /* optional: many vec_dots at once */
    tk_quantize_fn quantize[TQ_COUNT];      /* indexed by activation type */
    /*
     * Scalar: each row on its own, softmax in two passes (max, then exp
     * with the sum in double).  SIMD: rows across vector lanes, one pass
     * over the cells in blocks with a running max (each block's sum in
     * float, the total in double; AVX-512 at head dim 8: cells across the
     * lanes, a running max and sum per lane, the lanes' sums in float and
     * their total in double), within tk.h's budget of the scalar one.
     */
    tk_attend_fn attend;
    /* Element-wise steps of a layer, one token row each:
     * rms_norm: first x += d (the residual add, in the same pass; d may be
     * NULL), then y = (x / sqrt(mean(x^2) + eps)) * w, the squares summed in
     * double as the reference engine does (SIMD: 16 partial sums).
     * swiglu: h = g / (1 + exp(-g)) * u (SIMD exp within 2e-7 relative). */
    void (*rms_norm)(float *x, const float *d, const float *w, float *y, int n, float eps);
    void (*swiglu)(const float *g, const float *u, float *h, int n);
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
 * not shared with a concurrent call.  Allocates nothing (the GEMM path packs
 * weights, and few tokens are converted, in the pool's per-thread scratch,
 * tp_scratch).
 *
 * The path is chosen from (weight types, n_cols, n_tok) alone:
 *   - 32-value formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), with the avx512
 *     table: 1 to 3..6 tokens the few-token kernel (16 rows at a time, each
 *     row read once for all tokens), then up to 7 the small-batch kernel
 *     (tokens across 8 lanes), from TK_GEMM_MIN_TOKENS the GEMM of tk_impl.h
 *     (12 rows x 16 tokens per tile, packed panels, VNNI).  All three add
 *     whole blocks in order (one rounding per block), within the error
 *     budget above, and do the same operations per output, so a token's
 *     outputs are the same whatever batch it is in.
 *   - IQ4_NL and MXFP4, with the avx512 table: 1 to 7 tokens the tiled
 *     kernel's arithmetic on rows gathered from the plain ones, from 8 the
 *     GEMM; both add whole blocks in order, as above (so not the bits of
 *     their vec_dot, which keeps the reference engine's lanes).
 *   - the tiled layouts of Q4_0 / Q8_0 / IQ4_NL / MXFP4 (tq.h,
 *     tk_runs_tiled): the tiled kernel up to TK_TILED_MAX_TOKENS
 *     (tk_impl.h), then the GEMM; the same operations per output again,
 *     so the same bits as plain rows.
 *   - Q4_K, Q5_K, Q6_K: vec_dot below 32 tokens, the GEMM from 32; the
 *     GEMM does the reference's float operations, so it equals vec_dot to
 *     the bit.  The tiled layouts of Q4_K / Q6_K: the tiled kernel up to
 *     63 / 31 tokens, then the GEMM, the same float operations again.  A
 *     set mixing tiled and plain K-quant matrices runs one product per
 *     matrix below 32 tokens.  (Q2_K, Q3_K, IQ4_XS have no GEMM: the case
 *     below.)
 *   - F32 with the avx2 / avx512 tables: dot_rows, 8 / 16 rows at a time
 *     with the reductions done together, the bits of vec_dot.
 *   - anything else, or a table without these kernels: one vec_dot of the
 *     chosen table per output.
 * Either way results do not depend on the thread count.
 */
#define TK_GEMM_MIN_TOKENS 8

/*
 * Whether this CPU's kernels multiply the tiled layout of `type` (tq.h,
 * tq_tiled) for a matrix of this shape at every token count.  Then
 * tk_matmul accepts tq_tiled(type) as wtype, with the same results to the
 * bit as the plain rows (the few-token kernel reads tiles; the GEMM packs
 * its panels from them).  Tiled matrices have no vec_dot.
 */
bool tk_runs_tiled(tq_type type, int64_t n_rows, int64_t n_cols);
void tk_matmul(tp_pool *tp, tq_type wtype, const void *w, int64_t n_rows, int64_t n_cols,
               const float *x, int64_t n_tok, float *y, void *scratch);
size_t tk_matmul_scratch_size(tq_type wtype, int64_t n_cols, int64_t n_tok);
/* Sets up the work counter at the start of scratch (outside a job). */
void tk_matmul_scratch_init(void *scratch);

/*
 * The same, as a phase of a job already running on the pool: every thread
 * of the job calls it with its (ith, nth), nth == tp_n_threads(tp).  y is
 * complete for all threads on return (the call ends with a barrier) and
 * scratch may be reused by the next call.  The scratch's work counter must
 * be set up once before the first call (tk_matmul_scratch_init, or zeroed
 * memory); every call leaves it ready for the next.
 *
 * With at most TK_PRIVATE_TOKENS tokens on the vec_dot path each thread
 * converts all of x by itself and no barrier precedes the products: x need
 * only be complete in the calling thread's view, and may be a private copy
 * per thread.  Otherwise x must be complete for all threads (the call
 * converts it in parts and meets at a barrier).
 */
#define TK_PRIVATE_TOKENS 4
void tk_matmul_job(int ith, int nth, tp_pool *tp, tq_type wtype, const void *w,
                   int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                   float *y, void *scratch);

/* One matrix of a product sharing its input with others. */
typedef struct tk_mat {
    tq_type type;         /* weight type */
    const void *w;        /* n_rows rows of n_cols values of `type` */
    int64_t n_rows;
    float *y;             /* [n_tok][n_rows] output */
} tk_mat;

/*
 * tk_matmul_job for up to 8 matrices with the same input x and the same
 * vec_dot_type (a layer's Q, K and V projections; its gate and up): x is
 * converted once and all matrices share one work phase, so the job meets
 * at 1 or 2 barriers instead of 1 or 2 per matrix.  The path is chosen for the set
 * (GEMM only if every matrix has it), so each y is what tk_matmul_job
 * gives whenever that takes the same path.  Scratch:
 * tk_matmul_multi_scratch_size bytes.
 */
void tk_matmul_multi_job(int ith, int nth, tp_pool *tp, const tk_mat *mats, int n_mat, int64_t n_cols,
                         const float *x, int64_t n_tok, void *scratch);
size_t tk_matmul_multi_scratch_size(const tk_mat *mats, int n_mat, int64_t n_cols, int64_t n_tok);


#endif
