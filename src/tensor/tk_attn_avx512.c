/*
 * tk_attn_avx512.c - attention of a group of query rows sharing one K/V head
 * (tk.h, tk_attn), AVX-512F.
 *
 * DESIGN: head dimensions go across the 16 lanes of a zmm register.  The
 * cells are walked once, in blocks of 16; a block's K and V rows are
 * converted to float once into L1 scratch (from F32, F16, BF16, Q8_0 and
 * Q4_0 in vector code, the rarer block formats by the reference's
 * conversion) and then serve every row:
 *
 *   scores   for one row, 16 cells at once: acc[c] = sum_k K[c][k..k+15] *
 *            q[k..k+15] (hd/16 FMAs each), then one transposing reduction
 *            tree turns the 16 accumulators into one register of 16 scores
 *            (45 shuffles and adds for 16 dot products)
 *   softmax  per row a running max m and sum l: the block's 16
 *            probabilities p = exp(s - m_new) in one vector exp, the old
 *            sum and output scaled by exp(m_old - m_new); cells the row must
 *            not see (j >= n_kv[i]) score -inf and weigh exactly 0
 *   values   o[r] += p[r][c] * V[c], a few rows at a time with their
 *            outputs held in registers, V rows loaded once per few rows
 *
 * so a decoded token's 7 query heads cost about 13 vector operations per
 * cell each (head dim 64), and nothing is ever reduced one value at a time.
 * Block sums are float, the running sum double; exp is tk_exp_avx512.h
 * (relative error below 2e-7).  Head dims are multiples of 8 up to
 * TK_ATTN_MAX_DIM (those not of 16 padded with zero lanes); other shapes
 * go to the scalar kernel.
 *
 * Head dim 8 with F32 / F16 / BF16 caches (stories260K) turns this around
 * (attend8): a score is too short to fill a register, and summing 16 of
 * them across lanes each block would cost more than the products, so
 * there the cells go across the lanes.  A chunk of blocks is laid out
 * dimension-major once for all rows, and each row keeps a softmax per
 * lane in registers, folding its lanes together once at the end.
 */
#include "tk_exp_avx512.h"
#include "tk_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define BLK 16

/* Lanes [d, d + 16) of an n-float row that exist: a full mask, or the
 * tail's (head dims of 8, 24, ...: the lanes past n read nothing and are 0). */
static inline __mmask16 lanes(int n, int d) { return n - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - d)) - 1); }

/*
 * The K and V rows of cells [j, j + nb) into L1 ahead of their block.  A
 * decoding step walks a long context's rows once, from memory, between
 * blocks of ~1,000 instructions each, and the hardware prefetcher does
 * not keep up: at 4,096 cells an F16 cache read 5 GB/s a thread.  An asm
 * statement, as in tk_tiledk_avx512.c: GCC 12 may drop _mm_prefetch loops.
 */
static inline void prefetch_block(const tk_attn *a, int j, int nb, size_t kbytes, size_t vbytes)
{
    for (int c = 0; c < nb; c++) {
        const char *k = (const char *)a->k + (size_t)a->cells[j + c] * a->k_stride;
        const char *v = (const char *)a->v + (size_t)a->cells[j + c] * a->v_stride;
        for (size_t o = 0; o < kbytes; o += 64) __asm__ volatile("prefetcht0 %0" : : "m"(k[o]));
        for (size_t o = 0; o < vbytes; o += 64) __asm__ volatile("prefetcht0 %0" : : "m"(v[o]));
    }
}

/* Rows ahead of the block being read that prefetch_block asks for. */
#define PF_BLOCKS 2

/* 8 values of an F32 / F16 / BF16 row at p as floats.  F16 in 256-bit
 * conversions: 512-bit vcvtph2ps is slower per value on Zen 4. */
static inline __m256 floats8(const char *p, tq_type type)
{
    if (type == TQ_F32) return _mm256_loadu_ps((const float *)p);
    if (type == TQ_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Row `cell` of K or V as n floats into dst (64-byte aligned), zeros up to
 * the next multiple of 16.  The block formats' n is a multiple of 32. */
static inline void load_row(float *dst, const void *base, size_t stride, int cell, int n, tq_type type)
{
    const char *row = (const char *)base + (size_t)cell * stride;
    switch (type) {
    case TQ_F16:
        for (int d = 0; d < n; d += 8) _mm256_store_ps(dst + d, floats8(row + 2 * d, TQ_F16));
        if (n % 16) _mm256_store_ps(dst + n, _mm256_setzero_ps());
        break;
    case TQ_F32: case TQ_BF16:
        for (int d = 0; d < n; d += 16) {
            __mmask16 k = lanes(n, d);
            __m512 v = type == TQ_F32 ? _mm512_maskz_loadu_ps(k, (const float *)row + d)
                     : _mm512_castsi512_ps(_mm512_slli_epi32(
                           _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, row + 2 * d)), 16));
            _mm512_store_ps(dst + d, v);
        }
        break;
    case TQ_Q8_0:
        for (const tq_block_q8_0 *b = (const void *)row; n > 0; n -= 32, b++, dst += 32) {
            __m512 s = _mm512_set1_ps(tq_f16_to_f32(b->d));
            __m128i lo = _mm_loadu_si128((const __m128i *)b->qs), hi = _mm_loadu_si128((const __m128i *)b->qs + 1);
            _mm512_store_ps(dst, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            _mm512_store_ps(dst + 16, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
        }
        break;
    case TQ_Q4_0:
        for (const tq_block_q4_0 *b = (const void *)row; n > 0; n -= 32, b++, dst += 32) {
            __m512 s = _mm512_set1_ps(tq_f16_to_f32(b->d));
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->qs)), eight = _mm512_set1_epi32(8);
            __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, _mm512_set1_epi32(15)), eight);
            __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
            _mm512_store_ps(dst, _mm512_mul_ps(s, _mm512_cvtepi32_ps(lo)));
            _mm512_store_ps(dst + 16, _mm512_mul_ps(s, _mm512_cvtepi32_ps(hi)));
        }
        break;
    default:   /* the rarer block formats: the reference's conversion */
        tq_dequantize_row(type, row, dst, n);
        break;
    }
}

/* Lane i of the result = the sum of the lanes of v[i], i < 16. */
static inline __m512 sum16x16(__m512 v[16])
{
    __m512 t[8], u[4], w[2];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++)   /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] */
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* per 128-bit lane: one partial of each of 4 vectors */
        __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    #pragma GCC unroll 2
    for (int i = 0; i < 2; i++)   /* 128-bit lanes (0+1, 2+3) of each of two: 4 sums per lane */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* A block's scores s of cells [j0, j0 + 16) with -inf for the cells a row
 * does not see (outside [kv0, n_kv)). */
static inline __m512 mask_unseen(__m512 s, int j0, int kv0, int n_kv)
{
    __m512i j = _mm512_add_epi32(_mm512_set1_epi32(j0), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    __mmask16 vis = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(n_kv), j) &
                    _mm512_cmpge_epi32_mask(j, _mm512_set1_epi32(kv0));
    return _mm512_mask_blend_ps(vis, _mm512_set1_ps(-INFINITY), s);
}

/* Row r's running max after a block's scores s: the factor its sum (done
 * here) and its output so far are to be scaled by, 1 when the max held. */
static inline float raise_max(__m512 s, float *m, double *l)
{
    float bmax = _mm512_reduce_max_ps(s);
    if (!(bmax > *m)) return 1.0f;
    float corr = _mm512_cvtss_f32(tk_exp16(_mm512_set1_ps(*m - bmax)));
    *l *= corr;
    *m = bmax;
    return corr;
}

/* A sink's term (one more in the sum, with no value) folded into row r's
 * sum l at max m: the factor its output is to be scaled by. */
static inline float fold_sink(const tk_attn *a, int r, float m, double *l)
{
    if (!a->sink) return 1.0f;
    float s = a->sink[r];
    if (!(s > m)) {
        *l += expf(s - m);
        return 1.0f;
    }
    float corr = expf(m - s);
    *l = *l * corr + 1.0;
    return corr;
}

/* Scores of row r (q, the cells it sees: [kv0, n_kv)) against the block's
 * cells [j0, j0 + 16). */
static inline __m512 scores16(const float *kb, int hk, const float *q, int j0, int kv0, int n_kv, float scale)
{
    __m512 acc[16];
    #pragma GCC unroll 16
    for (int c = 0; c < 16; c++) acc[c] = _mm512_setzero_ps();
    for (int k = 0; k < hk; k += 16) {
        __m512 qv = _mm512_load_ps(q + k);
        #pragma GCC unroll 16
        for (int c = 0; c < 16; c++) acc[c] = _mm512_fmadd_ps(_mm512_load_ps(kb + (size_t)c * hk + k), qv, acc[c]);
    }
    return mask_unseen(_mm512_mul_ps(sum16x16(acc), _mm512_set1_ps(scale)), j0, kv0, n_kv);
}

/* o[r] += sum over cells c < nb of p[r][c] * V[c] for rows [r0, r0 + G). */
static inline __attribute__((always_inline)) void
values(float *o, const float *vb, const float *p, int hv, int nb, int r0, const int G, const int NV)
{
    __m512 acc[24];
    #pragma GCC unroll 24
    for (int i = 0; i < G * NV; i++) acc[i] = _mm512_load_ps(o + (size_t)(r0 + i / NV) * hv + 16 * (i % NV));
    for (int c = 0; c < nb; c++) {
        __m512 v[8];
        #pragma GCC unroll 8
        for (int k = 0; k < NV; k++) v[k] = _mm512_load_ps(vb + (size_t)c * hv + 16 * k);
        #pragma GCC unroll 8
        for (int r = 0; r < G; r++) {
            __m512 pc = _mm512_set1_ps(p[(r0 + r) * BLK + c]);
            #pragma GCC unroll 8
            for (int k = 0; k < NV; k++) acc[r * NV + k] = _mm512_fmadd_ps(pc, v[k], acc[r * NV + k]);
        }
    }
    #pragma GCC unroll 24
    for (int i = 0; i < G * NV; i++) _mm512_store_ps(o + (size_t)(r0 + i / NV) * hv + 16 * (i % NV), acc[i]);
}

/* values() for n rows, in groups as large as the registers allow. */
static void values_all(float *o, const float *vb, const float *p, int hv, int nb, int n)
{
    int r = 0;
    switch (hv / 16) {
    case 1:  for (; r + 8 <= n; r += 8) values(o, vb, p, hv, nb, r, 8, 1); for (; r < n; r++) values(o, vb, p, hv, nb, r, 1, 1); break;
    case 2:  for (; r + 8 <= n; r += 8) values(o, vb, p, hv, nb, r, 8, 2); for (; r < n; r++) values(o, vb, p, hv, nb, r, 1, 2); break;
    case 4:  for (; r + 5 <= n; r += 5) values(o, vb, p, hv, nb, r, 5, 4); for (; r < n; r++) values(o, vb, p, hv, nb, r, 1, 4); break;
    case 8:  for (; r + 2 <= n; r += 2) values(o, vb, p, hv, nb, r, 2, 8); for (; r < n; r++) values(o, vb, p, hv, nb, r, 1, 8); break;
    default: for (; r < n; r++)
                 for (int k = 0; k < hv; k += 16) values(o + k, vb + k, p, hv, nb, r, 1, 1);
             break;
    }
}

/*
 * Head dims of 8 (stories260K).  With the dims across the lanes, as the
 * wide kernel has them, a score is a dot of 8 products to be summed across
 * lanes: a reduction tree per block, a horizontal max and sum per block
 * and a permute per value row, ~70 vector operations per row and block,
 * paid again by each of the 2 to 8 rows a decoding or verifying step
 * brings.  Here the cells go across the lanes instead, so nothing is
 * summed across lanes until a row's end:
 *
 *   layout   a chunk of up to CHUNK blocks of K and V is turned, once for
 *            all rows, dimension-major into L1 scratch: per block 8
 *            registers K[d][16 cells] and 8 of V.  The loads place one
 *            row in each 128-bit lane (broadcasts, which need no shuffle
 *            port), two rounds of in-lane unpacks and one of 64-bit
 *            permutes make it [dim][16 cells] for 16-bit rows, then one
 *            conversion per 16 values; F32 rows go by 128-bit halves and
 *            a 4 x 4 transpose in each lane.
 *   scores   s = sum_d q[d] * K[d], 8 multiply-adds for 16 cells (q
 *            rounded as tk_attn_round_query, then scaled once)
 *   softmax  each lane is a softmax of its own cells: lane maxima M, sums
 *            L and outputs A[d] (8 registers) stay in registers across the
 *            chunk's blocks, e = exp(s - M), L += e, A[d] += e * V[d]
 *            (8 multiply-adds).  M need not be the lanes' true maximum,
 *            only within RESCALE of it (e <= e^RESCALE, far from float's
 *            range), so it is raised, and L and A rescaled, only when a
 *            score passes M + RESCALE: at a row's first cells and then
 *            rarely, one compare a block otherwise.  Unseen cells
 *            (outside [kv0, n_kv), masked in edge blocks only) score -inf,
 *            never raise M, and weigh exactly 0.
 *   end      lanes are folded to the row's max once: scaled by
 *            exp(M - max), L summed in double, A by one tree for all 8
 *            dims; then the sink and 1 / l as the wide kernel does
 *
 * so a row costs ~36 operations per block (17 multiply-adds, one exp,
 * a compare), and a block's layout ~24 shuffles of K and as many of V,
 * shared by all rows.  A row's operations depend only on its own cells
 * (blocks sit at multiples of 16 from cell 0; chunks only decide when the
 * state goes to scratch), so its output has the same bits alone and in
 * any group.  Per-lane sums are float (a 16th of the cells each), their
 * total double.
 */
#define CHUNK 16           /* blocks laid out at a time: 16 KB of K and V */
#define RESCALE 8.0f       /* how far a score may pass M before M is raised */

/* Zeros for the rows past a block's last cell: masked, but V must be finite. */
static const char zero_row[32] __attribute__((aligned(32)));

/* 16 bytes at p into the 128-bit lanes set in k (a load, and a blend
 * where k is not all lanes: no shuffle). */
static inline __m512i lane_rows(__m512i z, __mmask16 k, const char *p)
{
    return _mm512_mask_broadcast_i32x4(z, k, _mm_loadu_si128((const __m128i *)p));
}

/* The 8-value rows at p[c] (c < 16) of one block as dst[d][c]. */
static inline __attribute__((always_inline)) void layout16(float *dst, const char *const p[16], tq_type type)
{
    if (type == TQ_F32) {
        #pragma GCC unroll 2
        for (int g = 0; g < 2; g++) {   /* dims 4g .. 4g + 3 */
            __m512 x[4];
            #pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {   /* lane L: cell 4L + m */
                __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p[m] + 16 * g)));
                z = lane_rows(z, 0x00F0, p[4 + m] + 16 * g);
                z = lane_rows(z, 0x0F00, p[8 + m] + 16 * g);
                x[m] = _mm512_castsi512_ps(lane_rows(z, 0xF000, p[12 + m] + 16 * g));
            }
            __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(x[0], x[1]));
            __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(x[0], x[1]));
            __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(x[2], x[3]));
            __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(x[2], x[3]));
            _mm512_store_ps(dst + 16 * (4 * g + 0), _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)));
            _mm512_store_ps(dst + 16 * (4 * g + 1), _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2)));
            _mm512_store_ps(dst + 16 * (4 * g + 2), _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)));
            _mm512_store_ps(dst + 16 * (4 * g + 3), _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3)));
        }
        return;
    }
    __m512i z[4];
    #pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {   /* lane L: cell 4L + g */
        z[g] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p[g]));
        z[g] = lane_rows(z[g], 0x00F0, p[4 + g]);
        z[g] = lane_rows(z[g], 0x0F00, p[8 + g]);
        z[g] = lane_rows(z[g], 0xF000, p[12 + g]);
    }
    /* lane L of b[k]: dim 2k of cells 4L .. 4L + 3, then dim 2k + 1 of them */
    __m512i a0 = _mm512_unpacklo_epi16(z[0], z[1]), a1 = _mm512_unpackhi_epi16(z[0], z[1]);
    __m512i a2 = _mm512_unpacklo_epi16(z[2], z[3]), a3 = _mm512_unpackhi_epi16(z[2], z[3]);
    __m512i b[4] = { _mm512_unpacklo_epi32(a0, a2), _mm512_unpackhi_epi32(a0, a2),
                     _mm512_unpacklo_epi32(a1, a3), _mm512_unpackhi_epi32(a1, a3) };
    const __m512i gather = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {   /* [dim 2k: 16 cells | dim 2k + 1: 16 cells] */
        __m512i o = _mm512_permutexvar_epi64(gather, b[k]);
        __m256i lo = _mm512_castsi512_si256(o), hi = _mm512_extracti64x4_epi64(o, 1);
        __m512 f0, f1;
        if (type == TQ_F16) {
            f0 = _mm512_cvtph_ps(lo);
            f1 = _mm512_cvtph_ps(hi);
        } else {
            f0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(lo), 16));
            f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
        }
        _mm512_store_ps(dst + 16 * (2 * k), f0);
        _mm512_store_ps(dst + 16 * (2 * k + 1), f1);
    }
}

/* Block j0's K and V rows (nb of them) laid out at kt, vt. */
static inline __attribute__((always_inline)) void layout_block(const tk_attn *a, int j0, int nb, float *kt, float *vt,
                                                               tq_type tk_, tq_type tv)
{
    const char *pk[16], *pv[16];
    if (nb == BLK) {
        #pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
            const size_t cell = (size_t)a->cells[j0 + c];
            pk[c] = (const char *)a->k + cell * a->k_stride;
            pv[c] = (const char *)a->v + cell * a->v_stride;
        }
    } else {
        for (int c = 0; c < 16; c++) {
            const size_t cell = c < nb ? (size_t)a->cells[j0 + c] : 0;
            pk[c] = c < nb ? (const char *)a->k + cell * a->k_stride : zero_row;
            pv[c] = c < nb ? (const char *)a->v + cell * a->v_stride : zero_row;
        }
    }
    layout16(kt, pk, tk_);
    layout16(vt, pv, tv);
}

/* A row's state between chunks: lane maxima, sums, outputs by dim. */
enum { ST_M = 0, ST_L = 16, ST_A = 32, ST_SIZE = 32 + 8 * 16 };
/* A chunk's K and V, the rows' states and queries: within one term of
 * tk_attn_scratch_size() alone. */
_Static_assert(2 * CHUNK * 128 + TK_ATTN_ROWS * (ST_SIZE + 8) <= 2 * 64 * TK_ATTN_MAX_DIM, "attend8's scratch");

/*
 * One block of a row: scores of the block's K (at kb) with the row's query
 * qd, then its softmax state M (with MT = M + RESCALE), L, A taken through
 * them and the block's V (at vb).  first: the row's first block, where
 * there is nothing to rescale (the general case would only scale zeros).
 */
static inline __attribute__((always_inline)) void
row_block(__m512 *M, __m512 *MT, __m512 *L, __m512 A[8], const __m512 qd[8], const float *kb, const float *vb,
          int j0, int kv0, int n_kv, bool first)
{
    __m512 s0 = _mm512_mul_ps(qd[0], _mm512_load_ps(kb)), s1 = _mm512_mul_ps(qd[1], _mm512_load_ps(kb + 16));
    #pragma GCC unroll 3
    for (int d = 2; d < 8; d += 2) {   /* two chains: half the latency */
        s0 = _mm512_fmadd_ps(qd[d], _mm512_load_ps(kb + 16 * d), s0);
        s1 = _mm512_fmadd_ps(qd[d + 1], _mm512_load_ps(kb + 16 * (d + 1)), s1);
    }
    __m512 s = _mm512_add_ps(s0, s1);
    if (j0 < kv0 || j0 + BLK > n_kv) s = mask_unseen(s, j0, kv0, n_kv);
    if (first) {
        *M = _mm512_max_ps(*M, s);
        *MT = _mm512_add_ps(*M, _mm512_set1_ps(RESCALE));
    } else if (_mm512_cmp_ps_mask(s, *MT, _CMP_GT_OQ)) {
        __m512 Mn = _mm512_max_ps(*M, s);
        __m512 c = tk_exp16_short(_mm512_sub_ps(*M, Mn));   /* 1 where M held, 0 from -FLT_MAX */
        *L = _mm512_mul_ps(*L, c);
        #pragma GCC unroll 8
        for (int d = 0; d < 8; d++) A[d] = _mm512_mul_ps(A[d], c);
        *M = Mn;
        *MT = _mm512_add_ps(*M, _mm512_set1_ps(RESCALE));
    }
    __m512 e = tk_exp16_short(_mm512_sub_ps(s, *M));
    *L = _mm512_add_ps(*L, e);
    #pragma GCC unroll 8
    for (int d = 0; d < 8; d++) A[d] = _mm512_fmadd_ps(e, _mm512_load_ps(vb + 16 * d), A[d]);
}

/*
 * Row state st (fresh: none yet, the row's first chunk) through blocks
 * [b0, b1) of the chunk at cell jc (laid out at kt, vt), q the row's 8
 * scaled query values, [kv0, n_kv) its cells.
 */
static void row_chunk(float *st, bool fresh, const float *q, const float *kt, const float *vt, int jc, int b0, int b1,
                      int kv0, int n_kv)
{
    __m512 M = _mm512_set1_ps(-FLT_MAX), L = _mm512_setzero_ps(), A[8], qd[8];
    #pragma GCC unroll 8
    for (int d = 0; d < 8; d++) A[d] = _mm512_setzero_ps(), qd[d] = _mm512_set1_ps(q[d]);
    if (!fresh) {
        M = _mm512_load_ps(st + ST_M);
        L = _mm512_load_ps(st + ST_L);
        #pragma GCC unroll 8
        for (int d = 0; d < 8; d++) A[d] = _mm512_load_ps(st + ST_A + 16 * d);
    }
    __m512 MT = _mm512_add_ps(M, _mm512_set1_ps(RESCALE));
    int b = b0;
    if (fresh) {
        row_block(&M, &MT, &L, A, qd, kt + 128 * b, vt + 128 * b, jc + BLK * b, kv0, n_kv, true);
        b++;
    }
    for (; b < b1; b++) row_block(&M, &MT, &L, A, qd, kt + 128 * b, vt + 128 * b, jc + BLK * b, kv0, n_kv, false);
    _mm512_store_ps(st + ST_M, M);
    _mm512_store_ps(st + ST_L, L);
    #pragma GCC unroll 8
    for (int d = 0; d < 8; d++) _mm512_store_ps(st + ST_A + 16 * d, A[d]);
}

/* Row r's output from its state: lanes folded to one max, then the sink. */
static inline void row_out(const tk_attn *a, int r, const float *st)
{
    __m512 M = _mm512_load_ps(st + ST_M);
    float m = _mm512_reduce_max_ps(M);   /* > -FLT_MAX unless the row has no cells */
    __m512 f = tk_exp16_short(_mm512_sub_ps(M, _mm512_set1_ps(m)));   /* 0 for lanes that saw nothing */
    __m512 Lf = _mm512_mul_ps(_mm512_load_ps(st + ST_L), f);
    double l = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(Lf)),
                                                  _mm512_cvtps_pd(_mm512_extractf32x8_ps(Lf, 1))));
    __m512 A[8], t[4], u[2];
    #pragma GCC unroll 8
    for (int d = 0; d < 8; d++) A[d] = _mm512_mul_ps(_mm512_load_ps(st + ST_A + 16 * d), f);
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)   /* 256-bit halves: A[2i], A[2i + 1] folded to 8 */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(A[2 * i], A[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(A[2 * i], A[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    #pragma GCC unroll 2
    for (int i = 0; i < 2; i++)   /* 128-bit lane k: A[4i + k] folded to 4 */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 v = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    v = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));   /* lane k: [A[k], A[4 + k], ...] */
    const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    __m256 o = _mm512_castps512_ps256(_mm512_permutexvar_ps(pick, v));
    float corr = fold_sink(a, r, m, &l);
    o = _mm256_mul_ps(_mm256_mul_ps(o, _mm256_set1_ps(corr)), _mm256_set1_ps((float)(1.0 / l)));
    _mm256_storeu_ps(a->out + (size_t)r * 8, o);
}

static inline __attribute__((always_inline)) void attend8_as(const tk_attn *a, void *scratch, tq_type tk_, tq_type tv)
{
    const int n = a->n_q;
    float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *kt = base;                       /* [CHUNK][8][16] K, dimension-major */
    float *vt = kt + CHUNK * 128;           /* [CHUNK][8][16] V */
    float *st = vt + CHUNK * 128;           /* [n][ST_SIZE] row states */
    float *qs = st + TK_ATTN_ROWS * ST_SIZE;   /* [n][8] queries, rounded and scaled */
    int max_kv = 0, min_kv0 = INT32_MAX;
    bool fresh[TK_ATTN_ROWS];
    for (int r = 0; r < n; r++) {
        float *q = qs + 8 * r;
        fresh[r] = true;
        __m256 qv = _mm256_loadu_ps(a->q + (size_t)r * 8);
        if (tk_ == TQ_F16) {   /* tk_attn_round_query's values, as the wide kernel rounds them */
            qv = _mm256_cvtph_ps(_mm256_cvtps_ph(qv, _MM_FROUND_TO_NEAREST_INT));
        } else if (tk_ != TQ_F32) {
            _mm256_store_ps(q, qv);
            tk_attn_round_query(tk_, q, 8);
            qv = _mm256_load_ps(q);
        }
        _mm256_store_ps(q, _mm256_mul_ps(qv, _mm256_set1_ps(a->scale)));
        max_kv = MAX(max_kv, a->n_kv[r]);
        min_kv0 = MIN(min_kv0, a->kv0 ? a->kv0[r] : 0);
    }

    const size_t kbytes = tk_ == TQ_F32 ? 32 : 16, vbytes = tv == TQ_F32 ? 32 : 16;
    for (int jc = min_kv0 / BLK * BLK; jc < max_kv; jc += CHUNK * BLK) {
        const int nbk = MIN(CHUNK, (max_kv - jc + BLK - 1) / BLK);
        for (int b = 0; b < nbk; b++) {   /* the next chunk's blocks on their way while the rows run */
            int j0 = jc + BLK * b, jp = j0 + CHUNK * BLK;
            if (jp < max_kv) prefetch_block(a, jp, MIN(BLK, max_kv - jp), kbytes, vbytes);
            layout_block(a, j0, MIN(BLK, max_kv - j0), kt + 128 * b, vt + 128 * b, tk_, tv);
        }
        for (int r = 0; r < n; r++) {
            const int kv0 = a->kv0 ? a->kv0[r] : 0, n_kv = a->n_kv[r];
            const int b0 = MAX(0, (kv0 - jc) / BLK), b1 = MIN(nbk, (n_kv - jc + BLK - 1) / BLK);
            if (b0 >= b1) continue;
            row_chunk(st + ST_SIZE * r, fresh[r], qs + 8 * r, kt, vt, jc, b0, b1, kv0, n_kv);
            fresh[r] = false;
        }
    }
    for (int r = 0; r < n; r++) {
        if (fresh[r]) {   /* no cells (outside the contract): the wide kernel's result, not stale scratch */
            _mm512_store_ps(st + ST_SIZE * r + ST_M, _mm512_set1_ps(-FLT_MAX));
            for (int i = ST_L; i < ST_SIZE; i += 16) _mm512_store_ps(st + ST_SIZE * r + i, _mm512_setzero_ps());
        }
        row_out(a, r, st + ST_SIZE * r);
    }
}

/* The F16 cache (the default) with its types fixed at compile time. */
static void attend8(const tk_attn *a, void *scratch)
{
    if (a->type_k == TQ_F16 && a->type_v == TQ_F16)
        attend8_as(a, scratch, TQ_F16, TQ_F16);
    else
        attend8_as(a, scratch, a->type_k, a->type_v);
}

static void attend(const tk_attn *a, void *scratch)
{
    if (a->hd_k == 8 && a->hd_v == 8 && a->n_q <= TK_ATTN_ROWS &&
        (a->type_k == TQ_F32 || a->type_k == TQ_F16 || a->type_k == TQ_BF16) &&
        (a->type_v == TQ_F32 || a->type_v == TQ_F16 || a->type_v == TQ_BF16)) {
        attend8(a, scratch);
        return;
    }
    const int hk0 = a->hd_k, hv0 = a->hd_v, n = a->n_q;
    if (n > TK_ATTN_ROWS || hk0 > TK_ATTN_MAX_DIM || hv0 > TK_ATTN_MAX_DIM || hk0 % 8 || hv0 % 8) {
        tk_attend_rows(a, scratch);
        return;
    }
    /* Head dims that are not multiples of 16 (24, 40, ...) run padded with
     * zero lanes: they add nothing to a score and nothing is stored from
     * them. */
    const int hk = (hk0 + 15) & ~15, hv = (hv0 + 15) & ~15;
    float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *q = base;                        /* [n][hk] the (rounded) queries */
    float *kb = q + TK_ATTN_ROWS * hk;      /* [BLK][hk] */
    float *vb = kb + BLK * hk;              /* [BLK][hv] */
    float *o = vb + BLK * hv;               /* [n][hv] outputs, unnormalized */
    float *p = o + TK_ATTN_ROWS * hv;       /* [n][BLK] a block's probabilities */
    float m[TK_ATTN_ROWS];
    double l[TK_ATTN_ROWS];
    int max_kv = 0, min_kv0 = INT32_MAX;
    for (int r = 0; r < n; r++) {
        for (int d = 0; d < hk; d += 16) {
            __m512 v = _mm512_maskz_loadu_ps(lanes(hk0, d), a->q + (size_t)r * hk0 + d);
            if (a->type_k == TQ_F16) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            _mm512_store_ps(q + (size_t)r * hk + d, v);
        }
        if (a->type_k != TQ_F32 && a->type_k != TQ_F16) tk_attn_round_query(a->type_k, q + (size_t)r * hk, hk0);
        memset(o + (size_t)r * hv, 0, (size_t)hv * sizeof(float));
        m[r] = -FLT_MAX;
        l[r] = 0;
        max_kv = MAX(max_kv, a->n_kv[r]);
        min_kv0 = MIN(min_kv0, a->kv0 ? a->kv0[r] : 0);
    }

    const size_t kbytes = tq_row_size(a->type_k, hk0), vbytes = tq_row_size(a->type_v, hv0);
    for (int j0 = min_kv0 / BLK * BLK; j0 < max_kv; j0 += BLK) {
        int nb = MIN(BLK, max_kv - j0), jp = j0 + PF_BLOCKS * BLK;
        if (jp < max_kv) prefetch_block(a, jp, MIN(BLK, max_kv - jp), kbytes, vbytes);
        for (int c = 0; c < nb; c++) {
            load_row(kb + (size_t)c * hk, a->k, a->k_stride, a->cells[j0 + c], hk0, a->type_k);
            load_row(vb + (size_t)c * hv, a->v, a->v_stride, a->cells[j0 + c], hv0, a->type_v);
        }
        if (nb < BLK) {   /* masked below; zeros keep stale scratch from making NaNs */
            memset(kb + (size_t)nb * hk, 0, (size_t)(BLK - nb) * hk * sizeof(float));
            memset(vb + (size_t)nb * hv, 0, (size_t)(BLK - nb) * hv * sizeof(float));
        }
        for (int r = 0; r < n; r++) {
            float *pr = p + r * BLK;
            const int kv0 = a->kv0 ? a->kv0[r] : 0;
            if (a->n_kv[r] <= j0 || kv0 >= j0 + BLK) {   /* nothing in this block for this row */
                _mm512_store_ps(pr, _mm512_setzero_ps());
                continue;
            }
            __m512 s = scores16(kb, hk, q + (size_t)r * hk, j0, kv0, a->n_kv[r], a->scale);
            float corr = raise_max(s, &m[r], &l[r]);
            if (corr != 1.0f) {
                float *orow = o + (size_t)r * hv;
                for (int d = 0; d < hv; d += 16)
                    _mm512_store_ps(orow + d, _mm512_mul_ps(_mm512_load_ps(orow + d), _mm512_set1_ps(corr)));
            }
            __m512 e = tk_exp16(_mm512_sub_ps(s, _mm512_set1_ps(m[r])));
            l[r] += _mm512_reduce_add_ps(e);
            _mm512_store_ps(pr, e);
        }
        values_all(o, vb, p, hv, nb, n);
    }

    for (int r = 0; r < n; r++) {
        __m512 corr = _mm512_set1_ps(fold_sink(a, r, m[r], &l[r]));
        __m512 inv = _mm512_set1_ps((float)(1.0 / l[r]));
        for (int d = 0; d < hv; d += 16)
            _mm512_mask_storeu_ps(a->out + (size_t)r * hv0 + d, lanes(hv0, d),
                                  _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(o + (size_t)r * hv + d), corr), inv));
    }
}

void tk_fill_avx512_attn(tk_ops *o)
{
    o->attend = attend;
}
