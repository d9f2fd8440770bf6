/*
 * tk.c - kernel table selection and the threaded matrix-vector product
 * (see tk.h for the contract).
 *
 * TABLES.  Three tables, built once: scalar (complete), avx2 and avx512.
 * A SIMD table starts empty, its own files fill what they implement, and
 * every entry still NULL is taken from the table one level down, so avx512
 * falls back to avx2 and avx2 to scalar.  A table is only built when cpuid
 * says the CPU has the instructions and xgetbv says the OS saves the
 * registers; the fillers live in files compiled with those -m flags and are
 * never called otherwise.
 *
 *   avx2:   AVX2, FMA, F16C; XCR0 saves XMM and YMM
 *   avx512: the above + AVX512 F, BW, VL, DQ, VNNI, BF16 (the flags its files
 *           are compiled with); XCR0 also saves opmask and ZMM
 *
 * MATMUL.  One call is two phases separated by barriers:
 *
 *   scratch:  [ pad to 64 | chunk counter (64 B) | act row 0 | act row 1 | ... ]
 *
 *   1. convert: the n_tok x (n_cols / blck) activation blocks, counted as one
 *      flat range, are split evenly over the threads; each converts its
 *      blocks to vec_dot_type into scratch (F32 weights skip this: x is used
 *      as it is).  Thread 0 also zeroes the chunk counter.   -- barrier --
 *   2. multiply: output rows come in chunks of about TK_CHUNK_BYTES of
 *      weights; threads take chunks from the shared counter until none is
 *      left, so a thread slowed by another process does less of the work.
 *      Inside a chunk, TK_TILE_ROWS weight rows at a time are run against
 *      every token, so each weight row comes from memory once per call and
 *      the activations stay in cache.                        -- barrier --
 *
 * The final barrier makes y complete for every thread and frees scratch for
 * the next call.  Every (row, token) result is computed by exactly one call
 * of the same vec_dot, so results do not depend on the thread count.
 */
#include "tk_impl.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_COUNT };

static const char *const isa_names[ISA_COUNT] = { "scalar", "avx2", "avx512" };

static tk_ops tables[ISA_COUNT];
static bool isa_ok[ISA_COUNT];
static int isa_chosen;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* Best ISA level this CPU and OS support. */
static int detect_isa(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return ISA_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
    bool f16c = c & (1u << 29);
    if (!osxsave || !avx) return ISA_SCALAR;
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return ISA_SCALAR;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return ISA_SCALAR;
    bool avx2 = b & (1u << 5);
    bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    if (!(avx2 && fma && f16c)) return ISA_SCALAR;

    unsigned max7 = a;
    bool bf16 = false;
    if (max7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) bf16 = a & (1u << 5);
    if (f512 && dq && bw && vl && vnni && bf16 && (xcr0 & 0xe6) == 0xe6) return ISA_AVX512;
    return ISA_AVX2;
}

/* Fills every NULL entry of `o` from `below`. */
static void inherit(tk_ops *o, const tk_ops *below)
{
    for (int t = 0; t < TQ_COUNT; t++) {
        if (!o->vec_dot[t]) o->vec_dot[t] = below->vec_dot[t];
        if (!o->quantize[t]) o->quantize[t] = below->quantize[t];
    }
}

static void build_tables(void)
{
    int best = detect_isa();

    tables[ISA_SCALAR].isa = isa_names[ISA_SCALAR];
    tk_fill_scalar(&tables[ISA_SCALAR]);
    isa_ok[ISA_SCALAR] = true;

    if (best >= ISA_AVX2) {
        tables[ISA_AVX2].isa = isa_names[ISA_AVX2];
        tk_fill_avx2_legacy(&tables[ISA_AVX2]);
        tk_fill_avx2_kquant(&tables[ISA_AVX2]);
        inherit(&tables[ISA_AVX2], &tables[ISA_SCALAR]);
        isa_ok[ISA_AVX2] = true;
    }
    if (best >= ISA_AVX512) {
        tables[ISA_AVX512].isa = isa_names[ISA_AVX512];
        tk_fill_avx512_legacy(&tables[ISA_AVX512]);
        tk_fill_avx512_kquant(&tables[ISA_AVX512]);
        inherit(&tables[ISA_AVX512], &tables[ISA_AVX2]);
        isa_ok[ISA_AVX512] = true;
    }

    /* POLYKV_ISA may only lower the level: an unknown name or one above
     * what the CPU has leaves the best in place. */
    isa_chosen = best;
    const char *env = getenv("POLYKV_ISA");
    for (int i = 0; env && i < best; i++)
        if (strcmp(env, isa_names[i]) == 0) isa_chosen = i;
}

const tk_ops *tk_ops_get(void)
{
    pthread_once(&tables_once, build_tables);
    return &tables[isa_chosen];
}

const tk_ops *tk_ops_named(const char *isa)
{
    pthread_once(&tables_once, build_tables);
    for (int i = 0; isa && i < ISA_COUNT; i++)
        if (strcmp(isa, isa_names[i]) == 0) return isa_ok[i] ? &tables[i] : NULL;
    return NULL;
}

/* ---- matmul ------------------------------------------------------------- */

#define TK_LINE 64
#define TK_CHUNK_BYTES 65536   /* weight bytes per work unit: amortizes the counter */
#define TK_CHUNKS_PER_THREAD 4 /* at least this many units each, for balance */
#define TK_TILE_ROWS 16        /* weight rows kept hot while all tokens pass */

size_t tk_matmul_scratch_size(tq_type wtype, int64_t n_cols, int64_t n_tok)
{
    const tq_traits *tw = tq_get(wtype);
    ASSERT(tw && tw->supported);
    size_t act = tw->vec_dot_type == TQ_F32 ? 0 : tq_row_size(tw->vec_dot_type, n_cols) * (size_t)n_tok;
    return 2 * TK_LINE + act;   /* alignment slack + counter line + activations */
}

/* Converts the flat block range [lo, hi) of the n_tok activation rows. */
static void convert_blocks(tk_quantize_fn quantize, const tq_traits *ta, const float *x,
                           int64_t n_cols, char *act, size_t arow, int64_t lo, int64_t hi)
{
    int64_t nb = n_cols / ta->blck_size;
    while (lo < hi) {
        int64_t t = lo / nb, b = lo % nb;
        int64_t end = MIN(hi - t * nb, nb);   /* stop at the end of this row */
        quantize(x + t * n_cols + b * ta->blck_size,
                 act + (size_t)t * arow + (size_t)b * ta->type_size,
                 (end - b) * ta->blck_size);
        lo = t * nb + end;
    }
}

void tk_matmul_job(int ith, int nth, tp_pool *tp, tq_type wtype, const void *w,
                   int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                   float *y, void *scratch)
{
    const tk_ops *ops = tk_ops_get();
    const tq_traits *tw = tq_get(wtype);
    ASSERT(tw && tw->supported && n_cols % tw->blck_size == 0);
    ASSERT(nth == tp_n_threads(tp));
    tq_type vt = tw->vec_dot_type;
    const tq_traits *ta = tq_get(vt);
    ASSERT(n_cols % ta->blck_size == 0);
    tk_vec_dot_fn dot = ops->vec_dot[wtype];
    ASSERT(dot);

    char *base = (char *)(((uintptr_t)scratch + TK_LINE - 1) & ~(uintptr_t)(TK_LINE - 1));
    atomic_llong *next_chunk = (atomic_llong *)base;
    const char *act;
    size_t arow;
    if (vt == TQ_F32) {
        act = (const char *)x;
        arow = (size_t)n_cols * sizeof(float);
    } else {
        arow = tq_row_size(vt, n_cols);
        int64_t lo, hi;
        tp_split(n_cols / ta->blck_size * n_tok, ith, nth, &lo, &hi);
        convert_blocks(ops->quantize[vt], ta, x, n_cols, base + TK_LINE, arow, lo, hi);
        act = base + TK_LINE;
    }
    if (ith == 0) atomic_store_explicit(next_chunk, 0, memory_order_relaxed);
    tp_barrier(tp);

    size_t wrow = tq_row_size(wtype, n_cols);
    int64_t chunk = (int64_t)((TK_CHUNK_BYTES + wrow - 1) / wrow);
    int64_t fair = (n_rows + (int64_t)nth * TK_CHUNKS_PER_THREAD - 1) / ((int64_t)nth * TK_CHUNKS_PER_THREAD);
    chunk = MAX(1, MIN(chunk, fair));
    int64_t n_chunks = (n_rows + chunk - 1) / chunk;

    for (;;) {
        int64_t c = atomic_fetch_add_explicit(next_chunk, 1, memory_order_relaxed);
        if (c >= n_chunks) break;
        int64_t r_end = MIN(n_rows, (c + 1) * chunk);
        for (int64_t r0 = c * chunk; r0 < r_end; r0 += TK_TILE_ROWS) {
            int64_t r1 = MIN(r_end, r0 + TK_TILE_ROWS);
            for (int64_t t = 0; t < n_tok; t++) {
                const void *a = act + (size_t)t * arow;
                float *yt = y + t * n_rows;
                for (int64_t r = r0; r < r1; r++)
                    yt[r] = dot(n_cols, (const char *)w + (size_t)r * wrow, a);
            }
        }
    }
    tp_barrier(tp);
}

typedef struct {
    tp_pool *tp;
    tq_type wtype;
    const void *w;
    int64_t n_rows, n_cols, n_tok;
    const float *x;
    float *y;
    void *scratch;
} matmul_args;

static void matmul_thread(int ith, int nth, void *p)
{
    matmul_args *m = p;
    tk_matmul_job(ith, nth, m->tp, m->wtype, m->w, m->n_rows, m->n_cols, m->x, m->n_tok,
                  m->y, m->scratch);
}

void tk_matmul(tp_pool *tp, tq_type wtype, const void *w, int64_t n_rows, int64_t n_cols,
               const float *x, int64_t n_tok, float *y, void *scratch)
{
    matmul_args m = { tp, wtype, w, n_rows, n_cols, n_tok, x, y, scratch };
    tp_run(tp, matmul_thread, &m);
}
