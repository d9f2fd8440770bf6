/*
 * tk_gemv_avx512.c - one or a few tokens against the 32-value formats
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): the matrix-vector products of decoding,
 * AVX-512 VNNI.
 * tk.c calls tk_fill_avx512_gemv only on CPUs with AVX-512 F/BW/VL/DQ + VNNI.
 *
 * WHY: vec_dot spends about 12 vector operations per 32-value block (nibble
 * unpacking, sign tricks, scale conversion and spreading per block), which
 * left the 4- and 5-bit formats compute-bound at about 11 GB/s of weights
 * per thread, well under the memory's 30.  This kernel needs about 4 per
 * block and token, and does the per-output arithmetic of the GEMM and
 * small-batch kernels
 * (tk_gemm_avx512.c), so a sequence's logits do not depend on whether it
 * is decoded alone or in a batch:
 *
 *   acc = fma(float(I_b), as_b * ws_b, acc)   over blocks b in order
 *         (+ fma(am_b, wm_b, acc) for Q4_1 / Q5_1)
 *
 * DESIGN: 16 rows at a time, 4 blocks (128 values) at a time.
 *
 *   per pair of rows, start to end (two sequential streams, prefetched in
 *   software 8 KiB ahead into L2; 16 rows read side by side came from
 *   memory at half the speed, the prefetcher does not follow them), per 4
 *   blocks:
 *             the 4 blocks' bytes in 2-3 masked loads; one vpermt2w picks
 *             their 64 value bytes (nibble formats) or two pick the low and
 *             high 16 of each block (Q8_0, stored +128 as unsigned); codes
 *             lo / hi go through 2 vpdpbusd per token against its
 *             activations laid out to match (values 0-15 and 16-31 of the 4
 *             blocks); 5 shuffles and adds reduce both rows' sums to each
 *             block's exact total, parked in L1 with the scale halves
 *   then per 4 blocks: the 16 rows' totals and scales are transposed to
 *             [block][16 rows], so the float work runs with rows across the
 *             lanes: 3 operations per block for 16 rows
 *
 * Unsigned codes against signed activations: sum(c * a) is exact, and the
 * zero point (8, 16, or 128 for the stored-+128 Q8_0) comes off with the
 * activations' block sums, folded into the start value of the integer sums.
 * Rows past the matrix repeat its last row and are not stored; blocks past
 * n_cols are masked loads (zero) and skipped.
 *
 * ACTIVATIONS: tk_impl.h's TK_GEMV_* layout (shared with the tiled kernel).
 */
#include "tk_impl.h"

#include <immintrin.h>
#include <string.h>

#define GRP TK_GEMV_GRP   /* 224 used, padded to keep every group 64-byte aligned */
#define ROWS 16
/* Software prefetch, every line of a group 8 KiB ahead of its row, into
 * L2.  Measured in decode (qwen2 0.5B shape, 2 threads, weights in huge
 * pages, tok/s, q8_0 / q4_0): 4 KiB ahead 47 / 101, 8 KiB 56 / 108, 16 KiB
 * 54 / 104, 32 KiB 50 / 97; 8 KiB into L1 37 / 87, as non-temporal 38 /
 * 95.  (An isolated 256 MiB ring of one matrix shape favoured 4 KiB; the
 * model's mix of shapes and phases does not.) */
#define PF_HINT _MM_HINT_T1
#define PF_AHEAD 8192


/* Token `lane`'s groups start at act + lane * ng * GRP; a NULL row is a
 * token not there (nothing is written: the kernels only read n_tok). */
static void pack_a_q8_0(const void *row, int64_t n_cols, int lane, void *act)
{
    const tq_block_q8_0 *x = row;
    const int64_t nb = n_cols / 32, ng = (nb + 3) / 4;
    if (!x) return;
    act = (char *)act + (size_t)lane * ng * GRP;
    memset(act, 0, (size_t)ng * GRP);
    for (int64_t b = 0; b < nb; b++) {
        char *g = (char *)act + (b / 4) * GRP;
        int k = (int)(b % 4);
        memcpy(g + TK_GEMV_LO + 16 * k, x[b].qs, 16);
        memcpy(g + TK_GEMV_HI + 16 * k, x[b].qs + 16, 16);
        int s = 0;
        for (int i = 0; i < 32; i++) s += x[b].qs[i];
        ((int32_t *)(g + TK_GEMV_SA))[4 * k] = s;
        float d = _cvtsh_ss(x[b].d);
        ((float *)(g + TK_GEMV_AS))[k] = d;
        ((float *)(g + TK_GEMV_AM))[k] = d * (float)s;
    }
}

/* Permute indexes, built once per call. */
typedef struct {
    __m512i q;        /* the 64 value bytes (nibble types), or Q8_0's low 16 of each block */
    __m512i q_hi;     /* Q8_0: high 16 of blocks 0-2 (from the first two loads) */
    __m512i q_hi3;    /* Q8_0: high 16 of block 3 (from the third load) */
    __m512i scales;   /* words 0-3: d of each block; 4-7: m (Q4_1 / Q5_1) */
    __m512i qh;       /* words 0-3: qh low halves; 4-7: high halves (Q5_0 / Q5_1) */
    __m512i pair;     /* dwords 0,4,8,12 of two registers side by side */
    __m512i pair2;    /* dwords 0,4,8,12 then 2,6,10,14 of one register */
    __m512i quad;     /* the low 8 dwords of two registers side by side */
    __m512i col[4];   /* [16 rows][4 blocks] dwords -> block b, lanes 0-7 of 2 registers */
    __m512i sc[4];    /* [16 rows][4 blocks] words -> block b's 16 words */
} idx_set;

typedef struct {
    int bsize;        /* bytes per block */
    int off_d, off_m, off_qh, off_qs;   /* byte offsets inside a block (-1: absent) */
    int zero;         /* the codes' zero point, taken off with the activation sums */
} fmt;

static const fmt fmt_q8_0 = { 34, 0, -1, -1, 2, 128 };
static const fmt fmt_q4_0 = { 18, 0, -1, -1, 2, 8 };
static const fmt fmt_q4_1 = { 20, 0, 2, -1, 4, 0 };
static const fmt fmt_q5_0 = { 22, 0, -1, 2, 6, 16 };
static const fmt fmt_q5_1 = { 24, 0, 2, 4, 8, 0 };

static idx_set make_idx(const fmt *f)
{
    int16_t q[32], qhi[32], qhi3[32], sc[32], qh[32];
    int32_t pair[16], quad[16];
    for (int j = 0; j < 32; j++) {
        int k = j / 8, i = j % 8;
        int base = (k * f->bsize) / 2;
        q[j] = (int16_t)(base + f->off_qs / 2 + i);
        qhi[j] = (int16_t)(base + f->off_qs / 2 + 8 + i);
        /* the third load starts at byte 72: block 3's high half of a Q8_0
         * group is at bytes 120..135 */
        qhi3[j] = (int16_t)((3 * f->bsize + f->off_qs + 16 - 72) / 2 + i);
        sc[j] = (int16_t)(j < 4 ? (j * f->bsize + f->off_d) / 2
                          : j < 8 && f->off_m >= 0 ? ((j - 4) * f->bsize + f->off_m) / 2 : 0);
        qh[j] = (int16_t)(j < 8 && f->off_qh >= 0 ? ((j % 4) * f->bsize + f->off_qh) / 2 + j / 4 : 0);
    }
    for (int j = 0; j < 16; j++) {
        pair[j] = j < 8 ? (j / 4) * 16 + 4 * (j % 4) : 0;
        quad[j] = j < 8 ? j : 16 + j - 8;
    }
    idx_set s;
    s.q = _mm512_loadu_si512(q);
    s.q_hi = _mm512_loadu_si512(qhi);
    s.q_hi3 = _mm512_loadu_si512(qhi3);
    s.scales = _mm512_loadu_si512(sc);
    s.qh = _mm512_loadu_si512(qh);
    s.pair = _mm512_loadu_si512(pair);
    const int32_t pair2[16] = { 0, 4, 8, 12, 2, 6, 10, 14 };
    s.pair2 = _mm512_loadu_si512(pair2);
    s.quad = _mm512_loadu_si512(quad);
    for (int b = 0; b < 4; b++) {
        int32_t col[16];
        int16_t w[32];
        for (int j = 0; j < 16; j++) col[j] = j < 8 ? 4 * j + b : 0;
        for (int j = 0; j < 32; j++) w[j] = (int16_t)(j < 16 ? 4 * j + b : 0);
        s.col[b] = _mm512_loadu_si512(col);
        s.sc[b] = _mm512_loadu_si512(w);
    }
    return s;
}

static inline __mmask64 bytes_mask(int64_t from, int64_t n)
{
    int64_t k = n - from;
    return k >= 64 ? ~(__mmask64)0 : k <= 0 ? 0 : (((__mmask64)1 << k) - 1);
}

/*
 * One row's blocks [4q, 4q + 4) at base (masks m0-m2 cover the bytes
 * there): their codes as unsigned bytes, values 0-15 of each block in lo
 * and 16-31 in hi (block k in 128-bit lane k); returns the scale halves
 * (words 0-3) and min halves (4-7).
 */
static inline __attribute__((always_inline)) __m128i
row_codes(const char *base, __mmask64 m0, __mmask64 m1, __mmask64 m2, const fmt *f, const idx_set *ix,
          __m512i *lo, __m512i *hi)
{
    __m512i z0 = _mm512_maskz_loadu_epi8(m0, base);
    __m512i z1 = _mm512_maskz_loadu_epi8(m1, base + 64);
    __m128i sc = _mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, ix->scales, z1));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    if (f->bsize == 34) {   /* Q8_0: stored bytes + 128 */
        __m512i z2 = _mm512_maskz_loadu_epi8(m2, base + 72);
        __m512i l = _mm512_permutex2var_epi16(z0, ix->q, z1);
        __m512i h = _mm512_permutex2var_epi16(z0, ix->q_hi, z1);
        h = _mm512_mask_permutexvar_epi16(h, (__mmask32)0xff000000u, ix->q_hi3, z2);
        *lo = _mm512_xor_si512(l, _mm512_set1_epi8((char)0x80));
        *hi = _mm512_xor_si512(h, _mm512_set1_epi8((char)0x80));
        return sc;
    }
    __m512i qs = _mm512_permutex2var_epi16(z0, ix->q, z1);
    *lo = _mm512_and_si512(qs, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), m4);
    if (f->off_qh >= 0) {   /* bit j of a block's qh: +16 on value j */
        __m128i h = _mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, ix->qh, z1));
        __mmask64 klo = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(h));
        __mmask64 khi = _cvtu64_mask64((uint64_t)_mm_extract_epi64(h, 1));
        *lo = _mm512_mask_add_epi8(*lo, klo, *lo, _mm512_set1_epi8(16));
        *hi = _mm512_mask_add_epi8(*hi, khi, *hi, _mm512_set1_epi8(16));
    }
    return sc;
}

/* Block b across 16 lanes (rows) from t[i] = rows 4i..4i+3 x 4 blocks. */
static inline __m512i column(const __m512i t[4], const idx_set *ix, int b)
{
    __m512i p01 = _mm512_permutex2var_epi32(t[0], ix->col[b], t[1]);
    __m512i p23 = _mm512_permutex2var_epi32(t[2], ix->col[b], t[3]);
    return _mm512_inserti64x4(p01, _mm512_castsi512_si256(p23), 1);
}

/*
 * Up to 16 rows from w against n_tok tokens: rows two at a time, start to
 * end, their block totals for every token and their scale halves parked in
 * L1 as [token][group][row][4]; then the float work runs token by token,
 * group by group, with rows across the lanes.
 */
static inline __attribute__((always_inline)) void
rows16(const char *w, size_t wrow, int nr, int64_t n_cols, const char *act, int n_tok, float *y, int64_t ys,
       const fmt *f, const idx_set *ix, const __m512i *init, int32_t *tot, uint64_t *dh, uint64_t *mh, const int NT)
{
    const int64_t nb = n_cols / 32, ng = (nb + 3) / 4, ng_full = nb / 4;
    const size_t act_tok = (size_t)ng * GRP, tot_tok = (size_t)ng * ROWS * 4;
    const bool has_min = f->off_m >= 0;
    if (NT) n_tok = NT;
    /* byte masks of a whole group of 4 blocks, and of the last one */
    const int64_t n_full = 4 * f->bsize, n_last = (nb - 4 * ng_full) * f->bsize;
    const __mmask64 f0 = bytes_mask(0, n_full), f1 = bytes_mask(64, n_full), f2 = bytes_mask(72, n_full);
    const __mmask64 l0 = bytes_mask(0, n_last), l1 = bytes_mask(64, n_last), l2 = bytes_mask(72, n_last);
    /* rows in pairs: the two rows' sums are reduced together (5 operations
     * for both instead of 4 each) */
    for (int r = 0; r < ROWS; r += 2) {
        const char *row0 = w + (size_t)MIN(r, nr - 1) * wrow, *row1 = w + (size_t)MIN(r + 1, nr - 1) * wrow;
        for (int64_t q = 0; q < ng; q++) {
            const bool full = q < ng_full;
            const __mmask64 m0 = full ? f0 : l0, m1 = full ? f1 : l1, m2 = full ? f2 : l2;
            const size_t off = (size_t)q * 4 * f->bsize;
            for (int k = 0; k < 4 * f->bsize; k += 64) {   /* every line of the group, ahead */
                _mm_prefetch(row0 + off + PF_AHEAD + k, PF_HINT);
                _mm_prefetch(row1 + off + PF_AHEAD + k, PF_HINT);
            }
            __m512i lo0, hi0, lo1, hi1;
            __m128i sc0 = row_codes(row0 + off, m0, m1, m2, f, ix, &lo0, &hi0);
            __m128i sc1 = row_codes(row1 + off, m0, m1, m2, f, ix, &lo1, &hi1);
            /* [row r's 4 halves, row r+1's 4 halves] (and the mins likewise) */
            _mm_store_si128((__m128i *)(dh + q * ROWS + r), _mm_unpacklo_epi64(sc0, sc1));
            if (has_min) _mm_store_si128((__m128i *)(mh + q * ROWS + r), _mm_unpackhi_epi64(sc0, sc1));
            for (int t = 0; t < n_tok; t++) {
                const char *g = act + t * act_tok + q * GRP;
                const __m512i alo = _mm512_load_si512(g + TK_GEMV_LO), ahi = _mm512_load_si512(g + TK_GEMV_HI), s0i = init[t * ng + q];
                __m512i s0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s0i, lo0, alo), hi0, ahi);
                __m512i s1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s0i, lo1, alo), hi1, ahi);
                /* per block lane: [p0 p1 p2 p3] of each row -> [r0 r0 r1 r1] totals */
                __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(s0, s1), _mm512_unpackhi_epi64(s0, s1));
                u = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_CDAB));
                _mm256_store_si256((__m256i *)(tot + t * tot_tok + (q * ROWS + r) * 4),
                                   _mm512_castsi512_si256(_mm512_permutexvar_epi32(ix->pair2, u)));
            }
        }
    }
    for (int t = 0; t < n_tok; t++) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t q = 0; q < ng; q++) {
            const int32_t *tq = tot + t * tot_tok + q * ROWS * 4;
            __m512i tt[4] = { _mm512_load_si512(tq), _mm512_load_si512(tq + 16), _mm512_load_si512(tq + 32),
                              _mm512_load_si512(tq + 48) };
            __m512i hd[2] = { _mm512_load_si512(dh + q * ROWS), _mm512_load_si512(dh + q * ROWS + 8) };
            __m512i hm[2] = { hd[0], hd[1] };
            if (has_min) hm[0] = _mm512_load_si512(mh + q * ROWS), hm[1] = _mm512_load_si512(mh + q * ROWS + 8);
            const char *g = act + t * act_tok + q * GRP;
            const float *as = (const float *)(g + TK_GEMV_AS), *am = (const float *)(g + TK_GEMV_AM);
            for (int b = 0; b < MIN(4, nb - 4 * q); b++) {
                __m512 ws = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(hd[0], ix->sc[b], hd[1])));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(column(tt, ix, b)), _mm512_mul_ps(_mm512_set1_ps(as[b]), ws), acc);
                if (has_min) {
                    __m512 wm = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(hm[0], ix->sc[b], hm[1])));
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(am[b]), wm, acc);
                }
            }
        }
        _mm512_mask_storeu_ps(y + t * ys, (__mmask16)((1u << nr) - 1), acc);
    }
}

enum { FMT_Q8_0, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q5_1, FMT_COUNT };
static const fmt *const fmts[FMT_COUNT] = { &fmt_q8_0, &fmt_q4_0, &fmt_q4_1, &fmt_q5_0, &fmt_q5_1 };
static idx_set idx_sets[FMT_COUNT];   /* written once by tk_fill_avx512_gemv, read-only after */

static inline __attribute__((always_inline)) void
rows_all(const void *w, size_t wrow, int n_rows, int64_t n_cols, const void *act, int n_tok, float *y, int64_t ys,
         int which)
{
    const fmt *f = fmts[which];
    const idx_set *ix = &idx_sets[which];
    const int64_t ng = (n_cols / 32 + 3) / 4;
    /* the work area after the activations (see tk_gemv_buf_bytes):
     * init [n_tok][ng] zmm | tot [n_tok][ng][16][4] i32 | dh, mh [ng][16] u64 */
    char *work = (char *)act + (size_t)n_tok * ng * GRP;
    __m512i *init = (__m512i *)work;
    int32_t *tot = (int32_t *)(init + n_tok * ng);
    uint64_t *dh = (uint64_t *)(tot + (size_t)n_tok * ng * ROWS * 4), *mh = dh + ng * ROWS;
    /* integer start values: minus the zero point times each block's activation sum */
    const int shift = f->zero == 128 ? 7 : f->zero == 16 ? 4 : f->zero == 8 ? 3 : 0;
    for (int64_t i = 0; i < n_tok * ng; i++) {
        __m512i sa = _mm512_load_si512((const char *)act + i * GRP + TK_GEMV_SA);
        init[i] = f->zero ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sa, shift)) : _mm512_setzero_si512();
    }
    for (int r = 0; r < n_rows; r += ROWS) {
        const char *wr = (const char *)w + (size_t)r * wrow;
        if (n_tok == 1)   /* decoding one sequence: the loops over tokens unrolled away */
            rows16(wr, wrow, MIN(ROWS, n_rows - r), n_cols, act, 1, y + r, ys, f, ix, init, tot, dh, mh, 1);
        else
            rows16(wr, wrow, MIN(ROWS, n_rows - r), n_cols, act, n_tok, y + r, ys, f, ix, init, tot, dh, mh, 0);
    }
}

static void rows_q8_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows_all(w, wrow, n, c, a, t, y, ys, FMT_Q8_0);
}
static void rows_q4_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows_all(w, wrow, n, c, a, t, y, ys, FMT_Q4_0);
}
static void rows_q4_1(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows_all(w, wrow, n, c, a, t, y, ys, FMT_Q4_1);
}
static void rows_q5_0(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows_all(w, wrow, n, c, a, t, y, ys, FMT_Q5_0);
}
static void rows_q5_1(const void *w, size_t wrow, int n, int64_t c, const void *a, int t, float *y, int64_t ys)
{
    rows_all(w, wrow, n, c, a, t, y, ys, FMT_Q5_1);
}

void tk_fill_avx512_gemv(tk_gemm *g)
{
    for (int i = 0; i < FMT_COUNT; i++) idx_sets[i] = make_idx(fmts[i]);
    g->gemv_pack_a[TQ_Q8_0] = pack_a_q8_0;
    g->gemv_rows[TQ_Q8_0] = rows_q8_0;
    g->gemv_rows[TQ_Q4_0] = rows_q4_0;
    g->gemv_rows[TQ_Q4_1] = rows_q4_1;
    g->gemv_rows[TQ_Q5_0] = rows_q5_0;
    g->gemv_rows[TQ_Q5_1] = rows_q5_1;
    /* from here on the small-batch kernel is faster (one thread, L3, GB/s
     * of weights, few-token vs small at 2 / 4 / 7 tokens: q8_0 16.6/14.0,
     * 12.7/14.7, 7.3/14.2; q4_0 10.8/4.2, 7.0/4.5, 4.2/4.5; q5_0 9.6/5.4,
     * 7.2/5.2, 4.4/5.1) */
    g->gemv_max_tokens[TQ_Q8_0] = 3;
    g->gemv_max_tokens[TQ_Q4_0] = g->gemv_max_tokens[TQ_Q4_1] = 6;
    g->gemv_max_tokens[TQ_Q5_0] = g->gemv_max_tokens[TQ_Q5_1] = 5;
}
