/*
 * bench_kernels.c - weight bandwidth of the matrix-vector kernels.
 *
 * For every supported weight type and every kernel table this CPU has, one
 * 896 x 5120 matrix (n_rows x n_cols, bigger than L2; an even count of
 * 256-value blocks a row, so Q6_K's two-block tiles run) is multiplied by
 * one activation row, on 1 and 2 threads, and the weight bytes per second
 * are printed:
 *
 *   cache  the same matrix again and again (it may sit in L3)
 *   dram   a ring of copies of the matrix, >= 256 MiB in all (in 2 MiB
 *          pages), so every pass streams its weights from memory as
 *          decode does
 *
 * The kernel rows ("avx512" ...) time that table's vec_dot over a row split
 * on the pool; the "matmul" rows time tk_matmul itself (the table tk_ops_get
 * chose, activation conversion and barriers included).  Before timing, every
 * table's result is checked against the scalar reference within tk.h's
 * budget; a mismatch aborts the benchmark.
 *
 * A second table times tk_matmul on several tokens at once (the GEMM path
 * of prefill and batched decode) in GOP/s.
 *
 * A third mode ("ratios") times the vec_dot of the 256-value and non-linear
 * formats interleaved, so their ratios to Q4_K hold on a busy machine; a
 * fourth ("lattice") the lattice formats' on the avx2 and avx512 tables,
 * interleaved the same way, on an 896 x 4864 matrix.  Both take 20x the
 * seconds given in all.
 *
 * Usage: bench_kernels [seconds per measurement, default 0.25] [gemm|gemv|ratios|lattice|all]
 *                      [types: "q4_Kx16,q8_0x16", the bandwidth table's rows to time; all]
 */
#include "../src/common/huge.h"
#include "../src/tensor/tk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* N_COLS: the ratios' and lattice's matrix, a 0.5B model's FFN down
 * projection; B_COLS: the bandwidth table's */
enum { N_ROWS = 896, N_COLS = 4864, B_COLS = 5120 };
#define RING_BYTES ((size_t)256 << 20)

static const char *const isas[] = { "scalar", "avx2", "avx512" };

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static float rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

typedef struct {
    tp_pool *tp;
    tk_vec_dot_fn dot;
    const char *w;       /* current matrix */
    size_t wrow;
    const void *a;
    float *y;
} job;

static void dot_rows(int ith, int nth, void *p)
{
    job *j = p;
    int64_t lo, hi;
    tp_split(N_ROWS, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) j->y[r] = j->dot(B_COLS, j->w + (size_t)r * j->wrow, j->a);
}

/* Runs one pass per copy in the ring until `secs` have passed; GB/s of weights. */
static double time_passes(tp_pool *tp, job *j, const char *ring, size_t n_copies, size_t mat,
                          bool use_matmul, tq_type wt, const float *x, void *scratch, double secs)
{
    int64_t passes = 0;
    double t0 = pk_time_ms(), el;
    do {
        for (size_t c = 0; c < n_copies; c++, passes++) {
            if (use_matmul) {
                tk_matmul(tp, wt, ring + c * mat, N_ROWS, B_COLS, x, 1, j->y, scratch);
            } else {
                j->w = ring + c * mat;
                tp_run(tp, dot_rows, j);
            }
        }
        el = (pk_time_ms() - t0) / 1e3;
    } while (el < secs);
    return (double)mat * (double)passes / el / 1e9;
}

/* ---- matrix-matrix ------------------------------------------------------------ */

enum { G_ROWS = 896, G_COLS = 4864 };   /* the FFN down projection of a 0.5B model */

/* CPU seconds of this thread: a 1-thread pool runs on the caller, so this
 * is the kernel's own time even when other processes share the cores. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * tk_matmul with n_tok tokens on one G_ROWS x G_COLS matrix (weights in
 * cache after the first pass, as in prefill where the activations are the
 * big operand): GOP/s counting a multiply-add as 2.  Validated first: every
 * output within tk.h's budget of the reference.
 */
static int bench_gemm(tp_pool *pools[2], double secs)
{
    static const int toks[] = { 4, 8, 16, 32, 48, 64, 512 };
    static const int types[] = { TQ_Q8_0, TQ_Q8_0X16, TQ_Q4_0, TQ_Q4_0X16, TQ_Q4_1, TQ_Q5_0, TQ_Q5_1, TQ_Q4_K, TQ_Q4_KX16, TQ_Q5_K, TQ_Q6_K,
                                 TQ_Q2_K, TQ_Q3_K, TQ_IQ4_NL, TQ_IQ4_NLX16, TQ_IQ4_XS, TQ_MXFP4, TQ_MXFP4X16 };
    const int T = 512;
    printf("\nmatmul %d x %d, GOP/s by tokens per call (1 thread, per CPU second | 2 threads, wall)\n",
           G_ROWS, G_COLS);
    printf("%-6s", "type");
    for (size_t k = 0; k < ARRAY_LEN(toks); k++) printf(" %8s%-4d", "n_tok=", toks[k]);
    printf("\n");
    float *wf = malloc((size_t)G_ROWS * G_COLS * sizeof *wf), *x = malloc((size_t)T * G_COLS * sizeof *x);
    float *y = malloc((size_t)T * G_ROWS * sizeof *y);
    void *a = malloc(G_COLS * sizeof(float));
    if (!wf || !x || !y || !a) return 1;
    for (size_t i = 0; i < (size_t)G_ROWS * G_COLS; i++) wf[i] = rnd();
    for (size_t i = 0; i < (size_t)T * G_COLS; i++) x[i] = rnd();
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        int wt = types[ti];
        const tq_traits *tr = tq_get(wt);
        tq_type plain = tr->tile_rows ? tr->untiled : (tq_type)wt;
        if (tr->tile_rows && !tk_runs_tiled(plain, G_ROWS, G_COLS)) continue;
        size_t wrow = tq_row_size(wt, G_COLS);
        char *w = malloc(wrow * G_ROWS), *rows = malloc(wrow * G_ROWS);
        void *scratch = malloc(tk_matmul_scratch_size(wt, G_COLS, T));
        if (!w || !rows || !scratch) return 1;
        for (int r = 0; r < G_ROWS; r++) tq_quantize_row(plain, wf + (size_t)r * G_COLS, rows + r * wrow, G_COLS);
        if (tr->tile_rows)
            tq_tile(wt, rows, G_ROWS, G_COLS, w);
        else
            memcpy(w, rows, wrow * G_ROWS);

        tk_matmul(pools[1], wt, w, G_ROWS, G_COLS, x, T, y, scratch);
        for (int t = 0; t < T; t += 61) {
            tq_quantize_row(tr->vec_dot_type, x + (size_t)t * G_COLS, a, G_COLS);
            for (int r = 0; r < G_ROWS; r += 31) {
                float ref = tq_vec_dot_ref(plain, G_COLS, rows + r * wrow, a), got = y[(size_t)t * G_ROWS + r];
                if (!(fabsf(got - ref) <= 1e-4f * fabsf(ref) + 1e-3f)) {
                    fprintf(stderr, "bench_kernels: gemm %s row %d token %d: %g vs reference %g\n",
                            tr->name, r, t, got, ref);
                    return 1;
                }
            }
        }
        printf("%-6s", tr->name);
        for (size_t k = 0; k < ARRAY_LEN(toks); k++) {
            double gops[2];
            for (int p = 0; p < 2; p++) {
                int64_t calls = 0;
                double t0 = p ? pk_time_ms() / 1e3 : cpu_s(), el;
                do {
                    tk_matmul(pools[p], wt, w, G_ROWS, G_COLS, x, toks[k], y, scratch);
                    calls++;
                    el = (p ? pk_time_ms() / 1e3 : cpu_s()) - t0;
                } while (el < secs);
                gops[p] = 2.0 * G_ROWS * G_COLS * toks[k] * (double)calls / el / 1e9;
            }
            printf(" %5.0f|%-6.0f", gops[0], gops[1]);
        }
        printf("\n");
        fflush(stdout);
        free(w);
        free(rows);
        free(scratch);
    }
    free(wf);
    free(x);
    free(y);
    free(a);
    return 0;
}

static int cmp_double(const void *pa, const void *pb)
{
    double x = *(const double *)pa, y = *(const double *)pb;
    return x < y ? -1 : x > y;
}

/* ---- interleaved ratios ---------------------------------------------------------- */

/* Rows of a lattice format (no quantizer): random bytes with a sane f16
 * scale in every block (IQ1_M: in the top nibbles of its 4 scale words, or
 * random bits may make it a NaN). */
static void lattice_rows(tq_type wt, char *rows, size_t bytes)
{
    const tq_traits *tr = tq_get(wt);
    for (size_t b = 0; b < bytes; b++) rows[b] = (char)(rnd() * 127);
    tq_f16 h = tq_f32_to_f16(1.0f / 64);
    for (size_t b = 0; b < bytes; b += tr->type_size) {
        if (wt != TQ_IQ1_M) {
            memcpy(rows + b, &h, sizeof h);
            continue;
        }
        uint8_t *sc = (uint8_t *)((tq_block_iq1_m *)(rows + b))->scales;
        for (int k = 0; k < 4; k++) sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | ((h >> (4 * k)) & 0xf) << 4);
    }
}

/* An N_ROWS x N_COLS matrix of type wt (quantized from random floats, or
 * lattice_rows) and the activation row x converted for it by `ops`. */
static int make_matrix(tq_type wt, const tk_ops *ops, const float *x, char **w, void **a)
{
    size_t wrow = tq_row_size(wt, N_COLS);
    float *wf = malloc((size_t)N_COLS * sizeof *wf);
    *w = malloc(wrow * N_ROWS);
    *a = malloc(N_COLS * sizeof(float));
    if (!wf || !*w || !*a) return 1;
    if (tq_has_quantizer(wt)) {
        for (int r = 0; r < N_ROWS; r++) {
            for (int i = 0; i < N_COLS; i++) wf[i] = rnd();
            tq_quantize_row(wt, wf, *w + r * wrow, N_COLS);
        }
    } else {
        lattice_rows(wt, *w, wrow * N_ROWS);
    }
    ops->quantize[tq_get(wt)->vec_dot_type](x, *a, N_COLS);
    free(wf);
    return 0;
}

/* Whether `ops`' vec_dot of wt equals the scalar reference's bit for bit
 * on every 97th row (tk_kquant_*.c and tk_iquant_*.c keep its order). */
static bool same_as_reference(const tk_ops *ops, tq_type wt, const char *w, const void *a)
{
    const tk_ops *ref = tk_ops_named("scalar");
    size_t wrow = tq_row_size(wt, N_COLS);
    for (int r = 0; r < N_ROWS; r += 97) {
        float want = ref->vec_dot[wt](N_COLS, w + r * wrow, a), got = ops->vec_dot[wt](N_COLS, w + r * wrow, a);
        if (memcmp(&want, &got, sizeof got) != 0) {
            fprintf(stderr, "bench_kernels: %s %s row %d: %.9g vs reference %.9g\n", ops->isa, tq_get(wt)->name, r,
                    got, want);
            return false;
        }
    }
    return true;
}

/* GB/s of weights of `dot` over the whole matrix, passes repeated for at
 * least secs CPU seconds of this thread (cpu_s). */
static double time_dot(tk_vec_dot_fn dot, tq_type wt, const char *w, const void *a, double secs)
{
    static volatile float sink;
    size_t wrow = tq_row_size(wt, N_COLS);
    int64_t passes = 0;
    double t0 = cpu_s(), el;
    do {
        for (int r = 0; r < N_ROWS; r++) sink += dot(N_COLS, w + r * wrow, a);
        passes++;
        el = cpu_s() - t0;
    } while (el < secs);
    return (double)wrow * N_ROWS * (double)passes / el / 1e9;
}

/*
 * The 256-value and non-linear formats' vec_dot (the table tk_ops_get
 * chose) on one N_ROWS x N_COLS matrix each, 1 thread, in CPU seconds of
 * the thread (cpu_s), interleaved: every round times each type once for
 * secs / ROUNDS, so load from other processes falls on all of them alike.
 * Prints each type's median GB/s of weights and the median over rounds of
 * its ratio to Q4_K in the same round.  Validated first against the scalar
 * reference, bit for bit.
 */
static int bench_ratios(double secs)
{
    enum { ROUNDS = 15 };
    static const int types[] = { TQ_Q4_K, TQ_Q2_K, TQ_Q3_K, TQ_Q5_K, TQ_Q6_K, TQ_IQ4_NL, TQ_IQ4_XS };
    enum { NT = sizeof types / sizeof types[0] };
    const tk_ops *ops = tk_ops_get();
    char *w[NT];
    void *a[NT];
    float *x = malloc((size_t)N_COLS * sizeof *x);
    static double gbs[NT][ROUNDS], ratio[NT][ROUNDS];
    if (!x) return 1;
    for (int i = 0; i < N_COLS; i++) x[i] = rnd();
    for (int t = 0; t < NT; t++)
        if (make_matrix(types[t], ops, x, &w[t], &a[t]) || !same_as_reference(ops, types[t], w[t], a[t])) return 1;
    for (int k = 0; k < ROUNDS; k++) {
        for (int t = 0; t < NT; t++) gbs[t][k] = time_dot(ops->vec_dot[types[t]], types[t], w[t], a[t], secs / ROUNDS);
        for (int t = 0; t < NT; t++) ratio[t][k] = gbs[t][k] / gbs[0][k];
    }
    printf("\nvec_dot (%s table), %d x %d matrix in cache, 1 thread, %d interleaved rounds: median GB/s of "
           "weights, median ratio to q4_K\n", ops->isa, N_ROWS, N_COLS, ROUNDS);
    for (int t = 0; t < NT; t++) {
        qsort(gbs[t], ROUNDS, sizeof(double), cmp_double);
        qsort(ratio[t], ROUNDS, sizeof(double), cmp_double);
        printf("%-7s %6.2f GB/s  %5.2f x q4_K\n", tq_get(types[t])->name, gbs[t][ROUNDS / 2], ratio[t][ROUNDS / 2]);
        free(w[t]);
        free(a[t]);
    }
    free(x);
    return 0;
}

/*
 * The lattice formats' vec_dot on the avx2 and the avx512 table, timed as
 * bench_ratios times (1 thread, CPU seconds, matrix in cache), interleaved
 * by round and by table: each round times every type on both.  Prints per
 * type the median GB/s of weights of each table and the median over rounds
 * of avx512 / avx2.  Validated first: both tables equal the scalar
 * reference bit for bit.  Where the avx512 table holds avx2's kernel
 * (tk_iquant_avx512.c says which) the ratio is 1 within noise.
 */
static int bench_lattice(double secs)
{
    enum { ROUNDS = 9 };
    static const int types[] = { TQ_IQ2_XXS, TQ_IQ2_XS, TQ_IQ2_S, TQ_IQ3_XXS, TQ_IQ3_S, TQ_IQ1_S, TQ_IQ1_M };
    enum { NT = sizeof types / sizeof types[0] };
    const tk_ops *ops[2] = { tk_ops_named("avx2"), tk_ops_named("avx512") };
    if (!ops[0] || !ops[1]) {
        fprintf(stderr, "bench_kernels: lattice needs the avx2 and avx512 tables; this CPU lacks one\n");
        return 1;
    }
    char *w[NT];
    void *a[NT];
    float *x = malloc((size_t)N_COLS * sizeof *x);
    static double gbs[NT][2][ROUNDS], ratio[NT][ROUNDS];
    if (!x) return 1;
    for (int i = 0; i < N_COLS; i++) x[i] = rnd();
    for (int t = 0; t < NT; t++)
        if (make_matrix(types[t], ops[0], x, &w[t], &a[t]) || !same_as_reference(ops[0], types[t], w[t], a[t]) ||
            !same_as_reference(ops[1], types[t], w[t], a[t]))
            return 1;
    for (int k = 0; k < ROUNDS; k++) {
        for (int t = 0; t < NT; t++) {
            for (int i = 0; i < 2; i++) {
                int o = (i + k) % 2;   /* alternate which table goes first */
                gbs[t][o][k] = time_dot(ops[o]->vec_dot[types[t]], types[t], w[t], a[t], secs / ROUNDS / NT / 2);
            }
            ratio[t][k] = gbs[t][1][k] / gbs[t][0][k];
        }
    }
    printf("\nlattice vec_dot, %d x %d matrix in cache, 1 thread, %d interleaved rounds: median GB/s of weights\n",
           N_ROWS, N_COLS, ROUNDS);
    printf("%-8s %8s %8s %8s\n", "type", "avx2", "avx512", "ratio");
    for (int t = 0; t < NT; t++) {
        for (int o = 0; o < 2; o++) qsort(gbs[t][o], ROUNDS, sizeof(double), cmp_double);
        qsort(ratio[t], ROUNDS, sizeof(double), cmp_double);
        printf("%-8s %8.2f %8.2f %7.2fx\n", tq_get(types[t])->name, gbs[t][0][ROUNDS / 2], gbs[t][1][ROUNDS / 2],
               ratio[t][ROUNDS / 2]);
        free(w[t]);
        free(a[t]);
    }
    free(x);
    return 0;
}

/* Whether name is one of the comma-separated names in list. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list;; p++) {
        size_t k = strcspn(p, ",");
        if (k == n && strncmp(p, name, n) == 0) return true;
        p += k;
        if (!*p) return false;
    }
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.25;
    if (!(secs > 0)) secs = 0.25;
    const char *what = argc > 2 ? argv[2] : "all";
    const char *only = argc > 3 ? argv[3] : NULL;
    tp_pool *pools[2];
    if (tp_new(1, &pools[0]) != PK_OK || tp_new(2, &pools[1]) != PK_OK) {
        fprintf(stderr, "bench_kernels: cannot start threads\n");
        return 1;
    }
    if (strcmp(what, "ratios") == 0 || strcmp(what, "lattice") == 0) {
        int rc = what[0] == 'r' ? bench_ratios(20 * secs) : bench_lattice(20 * secs);
        tp_free(pools[0]);
        tp_free(pools[1]);
        return rc;
    }
    if (strcmp(what, "gemv") != 0 && bench_gemm(pools, secs)) return 1;
    if (strcmp(what, "gemm") == 0) {
        tp_free(pools[0]);
        tp_free(pools[1]);
        return 0;
    }
    printf("vec_dot weight bandwidth, %d x %d matrix, GB/s (cache = one matrix, dram = %zu MiB ring)\n",
           N_ROWS, B_COLS, RING_BYTES >> 20);
    printf("kernels chosen: %s\n", tk_ops_get()->isa);
    printf("%-6s %-8s %10s | %9s %9s | %9s %9s\n", "type", "kernels", "MiB", "1t cache", "1t dram",
           "2t cache", "2t dram");

    float *wf = malloc((size_t)N_ROWS * B_COLS * sizeof *wf);
    float *x = malloc(B_COLS * sizeof *x), *y = malloc(N_ROWS * sizeof *y);
    void *a = malloc(B_COLS * sizeof(float));
    if (!wf || !x || !y || !a) return 1;
    for (size_t i = 0; i < (size_t)N_ROWS * B_COLS; i++) wf[i] = rnd();
    for (int i = 0; i < B_COLS; i++) x[i] = rnd();

    for (int wt = 0; wt < TQ_COUNT; wt++) {
        const tq_traits *tr = tq_get(wt);
        if (!tr || !tr->supported || wt == TQ_Q8_K) continue;
        /* a tiled layout (tq.h): only through tk_matmul, where this CPU runs it */
        tq_type plain = tr->tile_rows ? tr->untiled : (tq_type)wt;
        if (tr->tile_rows && !tk_runs_tiled(plain, N_ROWS, B_COLS)) continue;
        if (only && !listed(only, tr->name)) continue;
        size_t wrow = tq_row_size(wt, B_COLS), mat = wrow * N_ROWS;
        size_t n_copies = (RING_BYTES + mat - 1) / mat;
        /* in 2 MiB pages, as the model's weights are (model_copy.c) */
        char *ring = pk_huge_alloc(mat * n_copies), *rows = malloc(mat);
        void *scratch = malloc(tk_matmul_scratch_size(wt, B_COLS, 1));
        if (!ring || !rows || !scratch) return 1;
        if (tq_has_quantizer(plain)) {
            for (int r = 0; r < N_ROWS; r++) tq_quantize_row(plain, wf + (size_t)r * B_COLS, rows + r * wrow, B_COLS);
        } else {
            lattice_rows(plain, rows, mat);
        }
        if (tr->tile_rows)
            tq_tile(wt, rows, N_ROWS, B_COLS, ring);
        else
            memcpy(ring, rows, mat);
        for (size_t c = 1; c < n_copies; c++) memcpy(ring + c * mat, ring, mat);

        for (size_t k = tr->tile_rows ? ARRAY_LEN(isas) : 0; k <= ARRAY_LEN(isas); k++) {
            bool use_matmul = k == ARRAY_LEN(isas);
            const tk_ops *ops = use_matmul ? tk_ops_get() : tk_ops_named(isas[k]);
            if (!ops) continue;
            job j = { NULL, ops->vec_dot[wt], ring, wrow, a, y };
            ops->quantize[tr->vec_dot_type](x, a, B_COLS);
            if (use_matmul) tk_matmul(pools[1], wt, ring, N_ROWS, B_COLS, x, 1, y, scratch);

            /* Validate: this table (or tk_matmul) against the scalar reference. */
            for (int r = 0; r < N_ROWS; r += 97) {
                float ref = tq_vec_dot_ref(plain, B_COLS, rows + r * wrow, a);
                float got = use_matmul ? y[r] : j.dot(B_COLS, ring + r * wrow, a);
                if (!(fabsf(got - ref) <= 1e-4f * fabsf(ref) + 1e-3f)) {
                    fprintf(stderr, "bench_kernels: %s %s row %d: %g vs reference %g\n", ops->isa,
                            tr->name, r, got, ref);
                    return 1;
                }
            }
            double gbs[4];
            for (int t = 0; t < 2; t++) {
                j.tp = pools[t];
                gbs[2 * t] = time_passes(pools[t], &j, ring, 1, mat, use_matmul, wt, x, scratch, secs);
                gbs[2 * t + 1] = time_passes(pools[t], &j, ring, n_copies, mat, use_matmul, wt, x,
                                             scratch, secs);
            }
            printf("%-6s %-8s %10.2f | %9.2f %9.2f | %9.2f %9.2f\n", tr->name,
                   use_matmul ? "matmul" : ops->isa, mat / 1048576.0, gbs[0], gbs[1], gbs[2], gbs[3]);
            fflush(stdout);
        }
        pk_huge_free(ring, mat * n_copies);
        free(rows);
        free(scratch);
    }
    free(wf);
    free(x);
    free(y);
    free(a);
    tp_free(pools[0]);
    tp_free(pools[1]);
    return 0;
}
