/*
 * tk.c - kernel table selection and the threaded matrix products (see tk.h
 * for the contract).
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
 * MATMUL.  One call (of one or several matrices sharing their input) is a
 * conversion step and a work phase; the path (tk.h) is fixed by the types
 * and sizes, so every thread takes the same one:
 *
 *   scratch:  [ pad to 64 | counters (64 B) | converted activations ... ]
 *   tp_scratch(ith): this thread's row buffer, packed panel or private
 *                    activations
 *
 *   1. convert: few tokens (the few-token and small-batch kernels, and
 *      vec_dot with <= TK_PRIVATE_TOKENS): every thread converts all of x
 *      into its own tp_scratch, no barrier.  Otherwise the work is split
 *      (GEMM: by token, into 16-token groups; vec_dot: by activation
 *      block) into the shared scratch, then a barrier.
 *   2. work: units of output rows (about TK_CHUNK_BYTES of weights each, a
 *      12-row panel for the GEMM; for the few-token kernels 16-row tiles,
 *      claimed several at a time, fewer as fewer are left), matrices one
 *      after the other, taken from a shared counter until none is left, so
 *      a thread slowed by another process does less of the work.  The last
 *      thread to run out resets the counter, so the next call needs no
 *      barrier before its work.                         -- barrier --
 *
 * The final barrier makes y complete for every thread.  Every output is
 * computed by one unit with the same per-output operations whichever
 * thread runs it, so results do not depend on the thread count.
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
static tk_gemm gemms[ISA_COUNT];     /* GEMM pieces; all NULL below avx512 */
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
    if (!o->attend) o->attend = below->attend;
    if (!o->rms_norm) o->rms_norm = below->rms_norm;
    if (!o->swiglu) o->swiglu = below->swiglu;
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
        tk_fill_avx2_iquant(&tables[ISA_AVX2]);
        inherit(&tables[ISA_AVX2], &tables[ISA_SCALAR]);
        isa_ok[ISA_AVX2] = true;
    }
    if (best >= ISA_AVX512) {
        tables[ISA_AVX512].isa = isa_names[ISA_AVX512];
        tk_fill_avx512_legacy(&tables[ISA_AVX512]);
        tk_fill_avx512_kquant(&tables[ISA_AVX512]);
        tk_fill_avx512_iquant(&tables[ISA_AVX512]);
        tk_fill_avx512_attn(&tables[ISA_AVX512]);
        tk_fill_avx512_elem(&tables[ISA_AVX512]);
        tk_fill_avx512_gemm(&gemms[ISA_AVX512]);
        tk_fill_avx512_gemmk(&gemms[ISA_AVX512]);
        tk_fill_avx512_small(&gemms[ISA_AVX512]);
        tk_fill_avx512_gemv(&gemms[ISA_AVX512]);
        tk_fill_avx512_tiled(&gemms[ISA_AVX512]);
        tk_fill_avx512_tiledk(&gemms[ISA_AVX512]);
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
#define TK_TILE_ROWS 16        /* weight rows kept hot while all tokens pass; the decode kernels' grain */
/* Decoding claims 1 / (TK_GUIDE * threads) of the tiles left (at least
 * one) at a time: long runs while much is left (the prefetchers' best
 * case: tiles handed out round-robin decoded 22% slower), single tiles at
 * the end, so threads finish a product within a tile of each other.  1
 * (the first claim is half a product) beat 2 by a median 4% in 18
 * interleaved tg128 pairs. */
#define TK_GUIDE 1

static const tk_gemm *gemm_get(void)
{
    pthread_once(&tables_once, build_tables);
    return &gemms[isa_chosen];
}

enum path { PATH_VEC_DOT, PATH_GEMV, PATH_SMALL, PATH_GEMM, PATH_SPLIT };

/* Which paths could run this product (the kernels exist for every matrix
 * and their buffers fit a thread's scratch), and whether it holds a tiled
 * matrix. */
typedef struct {
    bool gemm, gemv, small, tiled;
} paths;

static paths paths_fit(const tk_gemm *g, const tk_mat *mats, int n_mat, int64_t n_cols, int64_t n_tok)
{
    bool mixed = false;
    paths ok = { true, true, n_tok >= 2 && n_tok < TK_SMALL_LANES, false };
    for (int i = 0; i < n_mat; i++) {
        bool tiled = tq_get(mats[i].type)->tile_rows && !tk_ops_get()->dot_rows[mats[i].type];
        ok.tiled = ok.tiled || tiled;
        mixed = mixed || !tiled;
    }
    mixed = mixed && ok.tiled;
    ok.small = ok.small && !ok.tiled;
    for (int i = 0; i < n_mat; i++) {
        int t = mats[i].type;
        const tq_traits *tr = tq_get(t);
        int pt = tr->tile_rows ? (int)tr->untiled : t;   /* the panels' layout */
        tq_type vt = tr->vec_dot_type;
        size_t row = tq_row_size(vt, n_cols) + TK_LINE;
        bool packs = tr->tile_rows ? g->pack_wt[t] != NULL : g->pack_w[t] != NULL;
        if (!packs || !g->pack_a[vt] || n_cols % g->rec_cols[pt] != 0 ||
            n_tok < MAX(TK_GEMM_MIN_TOKENS, g->min_tokens[pt]) || tk_panel_bytes(g, pt, n_cols) + row > TP_SCRATCH_BYTES)
            ok.gemm = false;
        if (!g->small_rows[t] || !g->small_pack_a[vt] || tk_small_act_bytes(n_cols) + row > TP_SCRATCH_BYTES)
            ok.small = false;
        int max = mixed ? TK_SMALL_LANES - 1 : g->gemv_max_tokens[t];
        size_t buf = tr->tile_rows ? tk_tiled_buf_bytes(vt, n_cols, n_tok) : tk_gemv_buf_bytes(n_cols, n_tok);
        if (!g->gemv_rows[t] || !g->gemv_pack_a[vt] || n_tok > max || buf + row > TP_SCRATCH_BYTES)
            ok.gemv = false;
    }
    return ok;
}

/* The path for this product, from the types and sizes alone (so every
 * thread and every call with the same shapes agrees): the GEMM where every
 * matrix has it and its panel plus one converted row fit a thread's
 * scratch; for fewer tokens the few-token kernel up to the count where the
 * small-batch one gets faster (both do the same arithmetic), then that one;
 * else one vec_dot per output.  A set with a tiled matrix (tq.h) takes the
 * tiled kernel wherever it may (up to its gemv_max_tokens, or up to
 * TK_SMALL_LANES - 1 beside plain matrices, which then take their few-token
 * kernel) and the GEMM beyond: tiled layouts have no other kernels, and
 * tk_runs_tiled checked that one of the two fits.  A set mixing tiled and
 * plain matrices where neither fits (the plain ones have no few-token
 * kernel: the K-quants) runs as one product per matrix. */
static enum path choose_path(const tk_gemm *g, const tk_mat *mats, int n_mat, int64_t n_cols, int64_t n_tok)
{
    paths ok = paths_fit(g, mats, n_mat, n_cols, n_tok);
    /* the tiled kernel beats the GEMM up to its limit (tk_impl.h) */
    enum path p = ok.tiled && ok.gemv ? PATH_GEMV
                  : ok.gemm           ? PATH_GEMM
                  : ok.tiled          ? PATH_SPLIT
                  : ok.gemv           ? PATH_GEMV
                  : ok.small          ? PATH_SMALL
                                      : PATH_VEC_DOT;
    ASSERT(p != PATH_SPLIT || n_mat > 1);
    return p;
}

bool tk_runs_tiled(tq_type type, int64_t n_rows, int64_t n_cols)
{
    if (!tq_tileable(type, n_rows, n_cols)) return false;
    int tt = tq_tiled(type);
    if (tk_ops_get()->dot_rows[tt]) return true;   /* F32X16: its dot_rows serves every count */
    /* every count takes the tiled kernel or the GEMM: the kernel's buffer
     * fits up to where the GEMM starts, and the GEMM's panel fits there;
     * beside a plain matrix with a few-token kernel, the kernels fit at
     * their last count */
    const tk_gemm *g = gemm_get();
    tk_mat m[2] = { { (tq_type)tt, NULL, n_rows, NULL }, { type, NULL, n_rows, NULL } };
    int64_t gemm_from = MAX(TK_GEMM_MIN_TOKENS, g->min_tokens[type]);
    if (g->gemv_max_tokens[tt] < gemm_from - 1) return false;
    if (!paths_fit(g, m, 1, n_cols, gemm_from - 1).gemv || !paths_fit(g, m, 1, n_cols, gemm_from).gemm)
        return false;
    return !g->gemv_rows[type] || paths_fit(g, m, 2, n_cols, TK_SMALL_LANES - 1).gemv;
}

static size_t act_bytes(const tk_gemm *g, const tk_mat *mats, int n_mat, int64_t n_cols, int64_t n_tok)
{
    enum path path = choose_path(g, mats, n_mat, n_cols, n_tok);
    if (path == PATH_SPLIT) {
        size_t most = 0;
        for (int i = 0; i < n_mat; i++) most = MAX(most, act_bytes(g, &mats[i], 1, n_cols, n_tok));
        return most;
    }
    const tq_traits *tw = tq_get(mats[0].type);
    ASSERT(tw && tw->supported);
    size_t rows = tw->vec_dot_type == TQ_F32 ? 0 : tq_row_size(tw->vec_dot_type, n_cols) * (size_t)n_tok;
    size_t groups = (size_t)((n_tok + TK_GEMM_LANES - 1) / TK_GEMM_LANES) * tk_group_bytes(n_cols);
    return path == PATH_GEMM ? MAX(rows, groups) : rows;
}

size_t tk_matmul_multi_scratch_size(const tk_mat *mats, int n_mat, int64_t n_cols, int64_t n_tok)
{
    /* alignment slack + counter line + activations */
    return 2 * TK_LINE + act_bytes(gemm_get(), mats, n_mat, n_cols, n_tok);
}

size_t tk_matmul_scratch_size(tq_type wtype, int64_t n_cols, int64_t n_tok)
{
    tk_mat m = { wtype, NULL, 1, NULL };
    return tk_matmul_multi_scratch_size(&m, 1, n_cols, n_tok);
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

/* Work units of matrix m: panels (GEMM), 16-row tiles claimed by the
 * guided rule (few-token kernel: it streams from memory faster in longer
 * runs, 2 threads, 4864 x 896 q4_0 from a 256 MiB ring: 24.5 GB/s in
 * units of 64 rows, 29.3 in units of 256), or row chunks. */
static int64_t unit_rows(const tk_mat *m, int64_t n_cols, int nth, enum path path)
{
    if (path == PATH_GEMM) return TK_GEMM_ROWS;
    if (path == PATH_GEMV) return TK_TILE_ROWS;
    size_t wrow = tq_row_size(m->type, n_cols);
    int64_t chunk = (int64_t)((TK_CHUNK_BYTES + wrow - 1) / wrow);
    int64_t fair = (m->n_rows + (int64_t)nth * TK_CHUNKS_PER_THREAD - 1) / ((int64_t)nth * TK_CHUNKS_PER_THREAD);
    int64_t per = MAX(1, MIN(chunk, fair));
    /* a tiled matrix on its dot_rows (F32X16): whole tiles to a unit */
    return tq_get(m->type)->tile_rows ? (per + TK_TILE_ROWS - 1) / TK_TILE_ROWS * TK_TILE_ROWS : per;
}

/* Rows [r0, r1) of m against every token, one vec_dot per output. */
static void rows_vec_dot(const tk_ops *ops, const tk_mat *m, int64_t n_cols, const char *act, size_t arow,
                         int64_t n_tok, int64_t r0, int64_t r1)
{
    tk_vec_dot_fn dot = ops->vec_dot[m->type];
    size_t wrow = tq_row_size(m->type, n_cols);
    if (ops->dot_rows[m->type]) {
        ops->dot_rows[m->type](n_cols, (const char *)m->w + (size_t)r0 * wrow, wrow, (int)(r1 - r0), act, arow,
                               (int)n_tok, m->y + r0, m->n_rows);
        return;
    }
    for (int64_t a = r0; a < r1; a += TK_TILE_ROWS) {
        int64_t b = MIN(r1, a + TK_TILE_ROWS);
        for (int64_t t = 0; t < n_tok; t++) {
            const void *x = act + (size_t)t * arow;
            float *yt = m->y + t * m->n_rows;
            for (int64_t r = a; r < b; r++) yt[r] = dot(n_cols, (const char *)m->w + (size_t)r * wrow, x);
        }
    }
}

/* Rows [r0, r0 + TK_GEMM_ROWS) of m (clipped) against every token group. */
static void rows_gemm(const tk_gemm *g, const tk_mat *m, int64_t n_cols, const char *groups, int64_t n_tok,
                      int64_t r0, void *panel)
{
    const tq_traits *tr = tq_get(m->type);
    tq_type pt = tr->tile_rows ? tr->untiled : m->type;   /* panels in its layout */
    size_t wrow = tq_row_size(m->type, n_cols), gbytes = tk_group_bytes(n_cols);
    int nr = (int)MIN(TK_GEMM_ROWS, m->n_rows - r0);
    if (tr->tile_rows)
        g->pack_wt[m->type](m->w, r0, nr, n_cols, panel);
    else
        g->pack_w[pt]((const char *)m->w + (size_t)r0 * wrow, wrow, nr, n_cols, panel);
    float out[TK_GEMM_ROWS][TK_GEMM_LANES];
    for (int64_t t0 = 0; t0 < n_tok; t0 += TK_GEMM_LANES) {
        g->tile[pt](panel, n_cols, groups + (size_t)(t0 / TK_GEMM_LANES) * gbytes, out);
        int nl = (int)MIN(TK_GEMM_LANES, n_tok - t0);
        for (int l = 0; l < nl; l++) {
            float *y = m->y + (t0 + l) * m->n_rows + r0;
            for (int r = 0; r < nr; r++) y[r] = out[r][l];
        }
    }
}

/* Converts tokens [t0, t1) into their lanes of the token groups, through
 * one row of vec_dot_type in `row`; thread 0 also blanks the lanes past
 * n_tok (see tk_impl.h). */
static void pack_groups(const tk_ops *ops, const tk_gemm *g, tq_type vt, const float *x, int64_t n_cols,
                        int64_t n_tok, char *groups, int64_t t0, int64_t t1, void *row, int ith)
{
    size_t gbytes = tk_group_bytes(n_cols);
    for (int64_t t = t0; t < t1; t++) {
        ops->quantize[vt](x + t * n_cols, row, n_cols);
        g->pack_a[vt](row, n_cols, (int)(t % TK_GEMM_LANES), groups + (size_t)(t / TK_GEMM_LANES) * gbytes);
    }
    if (ith != 0) return;
    for (int64_t t = n_tok; t % TK_GEMM_LANES != 0; t++)
        g->pack_a[vt](NULL, n_cols, (int)(t % TK_GEMM_LANES), groups + (size_t)(t / TK_GEMM_LANES) * gbytes);
}

/* The shared words at the start of scratch: the next work unit, and how
 * many threads have run out of units (the last one resets both, so the
 * scratch is ready for the next call without a barrier of its own). */
typedef struct {
    atomic_llong next_unit;
    atomic_int n_done;
} mm_sync;

void tk_matmul_multi_job(int ith, int nth, tp_pool *tp, const tk_mat *mats, int n_mat, int64_t n_cols,
                         const float *x, int64_t n_tok, void *scratch)
{
    const tk_ops *ops = tk_ops_get();
    const tk_gemm *g = gemm_get();
    ASSERT(n_mat >= 1 && nth == tp_n_threads(tp));
    tq_type vt = tq_get(mats[0].type)->vec_dot_type;
    for (int i = 0; i < n_mat; i++) {
        const tq_traits *tw = tq_get(mats[i].type);
        ASSERT(tw && tw->supported && n_cols % tw->blck_size == 0 && tw->vec_dot_type == vt);
        ASSERT(ops->vec_dot[mats[i].type] || tw->tile_rows);   /* tiled: choose_path never takes vec_dot */
    }
    const tq_traits *ta = tq_get(vt);
    ASSERT(n_cols % ta->blck_size == 0);
    enum path path = choose_path(g, mats, n_mat, n_cols, n_tok);
    if (path == PATH_SPLIT) {
        for (int i = 0; i < n_mat; i++) tk_matmul_multi_job(ith, nth, tp, &mats[i], 1, n_cols, x, n_tok, scratch);
        return;
    }
    bool gemm = path == PATH_GEMM;

    char *base = (char *)(((uintptr_t)scratch + TK_LINE - 1) & ~(uintptr_t)(TK_LINE - 1));
    mm_sync *sync = (mm_sync *)base;
    char *act = base + TK_LINE;
    size_t arow = tq_row_size(vt, n_cols);
    char *mine = tp_scratch(tp, ith);
    if (gemm) {
        int64_t t0, t1;
        tp_split(n_tok, ith, nth, &t0, &t1);
        pack_groups(ops, g, vt, x, n_cols, n_tok, act, t0, t1, mine, ith);
        tp_barrier(tp);
    } else if (path == PATH_SMALL) {
        /* every thread packs all tokens for itself: no barrier */
        act = mine + tq_row_size(vt, n_cols) + TK_LINE;
        act -= (uintptr_t)act % TK_LINE;
        for (int64_t t = 0; t < TK_SMALL_LANES; t++) {
            if (t < n_tok) ops->quantize[vt](x + t * n_cols, mine, n_cols);
            g->small_pack_a[vt](t < n_tok ? mine : NULL, n_cols, (int)t, act);
        }
    } else if (path == PATH_GEMV) {
        act = mine + tq_row_size(vt, n_cols) + TK_LINE;
        act -= (uintptr_t)act % TK_LINE;
        for (int64_t t = 0; t < n_tok; t++) {
            ops->quantize[vt](x + t * n_cols, mine, n_cols);
            g->gemv_pack_a[vt](mine, n_cols, (int)t, act);
        }
    } else if (vt == TQ_F32) {
        act = (char *)x;
        arow = (size_t)n_cols * sizeof(float);
    } else if (n_tok <= TK_PRIVATE_TOKENS && arow * (size_t)n_tok <= TP_SCRATCH_BYTES) {
        /* few tokens: every thread converts all of x for itself, which costs
         * less than the barrier a shared copy would need */
        for (int64_t t = 0; t < n_tok; t++)
            ops->quantize[vt](x + t * n_cols, mine + (size_t)t * arow, n_cols);
        act = mine;
    } else {
        int64_t lo, hi;
        tp_split(n_cols / ta->blck_size * n_tok, ith, nth, &lo, &hi);
        convert_blocks(ops->quantize[vt], ta, x, n_cols, act, arow, lo, hi);
        tp_barrier(tp);
    }

    int64_t per[8], n_units = 0;
    ASSERT(n_mat <= (int)ARRAY_LEN(per));
    for (int i = 0; i < n_mat; i++) {
        per[i] = unit_rows(&mats[i], n_cols, nth, path);
        n_units += (mats[i].n_rows + per[i] - 1) / per[i];
    }
    int64_t u = atomic_load_explicit(&sync->next_unit, memory_order_relaxed);
    while (u < n_units) {
        int i = 0;
        int64_t ui = u, n_i;
        for (; ui >= (n_i = (mats[i].n_rows + per[i] - 1) / per[i]); i++) ui -= n_i;
        /* decoding: a share of what is left, within one matrix (guided) */
        int64_t k = path == PATH_GEMV ? MIN(n_i - ui, MAX(1, (n_units - u) / (TK_GUIDE * nth))) : 1;
        if (!atomic_compare_exchange_weak_explicit(&sync->next_unit, &u, u + k, memory_order_relaxed,
                                                   memory_order_relaxed))
            continue;   /* u now holds the counter's value */
        int64_t r0 = ui * per[i], r1 = MIN(mats[i].n_rows, (ui + k) * per[i]);
        if (gemm) {
            rows_gemm(g, &mats[i], n_cols, act, n_tok, r0, mine);
        } else if (path == PATH_SMALL || path == PATH_GEMV) {
            size_t wrow = tq_row_size(mats[i].type, n_cols);
            (path == PATH_SMALL ? g->small_rows : g->gemv_rows)[mats[i].type](
                (const char *)mats[i].w + (size_t)r0 * wrow, wrow, (int)(r1 - r0), n_cols, act, (int)n_tok,
                mats[i].y + r0, mats[i].n_rows);
        } else
            rows_vec_dot(ops, &mats[i], n_cols, act, arow, n_tok, r0, r1);
        u = atomic_load_explicit(&sync->next_unit, memory_order_relaxed);
    }
    if (atomic_fetch_add_explicit(&sync->n_done, 1, memory_order_acq_rel) == nth - 1) {
        atomic_store_explicit(&sync->next_unit, 0, memory_order_relaxed);
        atomic_store_explicit(&sync->n_done, 0, memory_order_relaxed);
    }
    tp_barrier(tp);
}

void tk_matmul_job(int ith, int nth, tp_pool *tp, tq_type wtype, const void *w,
                   int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                   float *y, void *scratch)
{
    tk_mat m = { wtype, w, n_rows, y };
    tk_matmul_multi_job(ith, nth, tp, &m, 1, n_cols, x, n_tok, scratch);
}

typedef struct {
    tp_pool *tp;
    const tk_mat *mats;
    int n_mat;
    int64_t n_cols, n_tok;
    const float *x;
    void *scratch;
} matmul_args;

static void matmul_thread(int ith, int nth, void *p)
{
    matmul_args *m = p;
    tk_matmul_multi_job(ith, nth, m->tp, m->mats, m->n_mat, m->n_cols, m->x, m->n_tok, m->scratch);
}

void tk_matmul_scratch_init(void *scratch)
{
    char *base = (char *)(((uintptr_t)scratch + TK_LINE - 1) & ~(uintptr_t)(TK_LINE - 1));
    mm_sync *sync = (mm_sync *)base;
    atomic_init(&sync->next_unit, 0);
    atomic_init(&sync->n_done, 0);
}

void tk_matmul(tp_pool *tp, tq_type wtype, const void *w, int64_t n_rows, int64_t n_cols,
               const float *x, int64_t n_tok, float *y, void *scratch)
{
    tk_matmul_scratch_init(scratch);
    tk_mat mat = { wtype, w, n_rows, y };
    matmul_args m = { tp, &mat, 1, n_cols, n_tok, x, scratch };
    tp_run(tp, matmul_thread, &m);
}
