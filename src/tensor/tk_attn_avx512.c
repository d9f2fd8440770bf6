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
 * Head dims of 8 (stories260K), where the 16-lane kernel would run half
 * its lanes on padding: two cells per register instead.  A block's K and V
 * rows sit 8 floats apart, register m = [cell 2m | cell 2m + 1]; a row's
 * scores are 8 products with [q | q] and one tree of 8 registers into 16
 * scores (22 operations where the padded kernel takes 61), and its output
 * is kept as [even cells' sum | odd cells' sum], 8 multiply-adds a block,
 * folded once at the end.  The softmax is the wide kernel's.
 */
static void attend8(const tk_attn *a, void *scratch)
{
    const int n = a->n_q;
    float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *q2 = base;                     /* [n][16] the (rounded) query, twice */
    float *o2 = q2 + TK_ATTN_ROWS * 16;   /* [n][16] outputs, unnormalized, in halves */
    float *kb = o2 + TK_ATTN_ROWS * 16;   /* [BLK][8] */
    float *vb = kb + BLK * 8;             /* [BLK][8] */
    float m[TK_ATTN_ROWS];
    double l[TK_ATTN_ROWS];
    int max_kv = 0, min_kv0 = INT32_MAX;
    for (int r = 0; r < n; r++) {
        float qr[8];
        memcpy(qr, a->q + (size_t)r * 8, sizeof qr);
        tk_attn_round_query(a->type_k, qr, 8);
        __m256 qv = _mm256_loadu_ps(qr);
        _mm512_store_ps(q2 + 16 * r, _mm512_insertf32x8(_mm512_castps256_ps512(qv), qv, 1));
        _mm512_store_ps(o2 + 16 * r, _mm512_setzero_ps());
        m[r] = -FLT_MAX;
        l[r] = 0;
        max_kv = MAX(max_kv, a->n_kv[r]);
        min_kv0 = MIN(min_kv0, a->kv0 ? a->kv0[r] : 0);
    }
    /* lane i of a block's scores comes out of the tree at lane 4 (i % 4) + i / 4 */
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);

    const size_t kbytes = tq_row_size(a->type_k, 8), vbytes = tq_row_size(a->type_v, 8);
    for (int j0 = min_kv0 / BLK * BLK; j0 < max_kv; j0 += BLK) {
        int nb = MIN(BLK, max_kv - j0), jp = j0 + PF_BLOCKS * BLK;
        if (jp < max_kv) prefetch_block(a, jp, MIN(BLK, max_kv - jp), kbytes, vbytes);
        for (int c = 0; c < nb; c++) {
            const size_t cell = (size_t)a->cells[j0 + c];
            _mm256_store_ps(kb + 8 * c, floats8((const char *)a->k + cell * a->k_stride, a->type_k));
            _mm256_store_ps(vb + 8 * c, floats8((const char *)a->v + cell * a->v_stride, a->type_v));
        }
        for (int c = nb; c < BLK; c++) {   /* masked below; zeros keep stale scratch from making NaNs */
            _mm256_store_ps(kb + 8 * c, _mm256_setzero_ps());
            _mm256_store_ps(vb + 8 * c, _mm256_setzero_ps());
        }
        for (int r = 0; r < n; r++) {
            const int kv0 = a->kv0 ? a->kv0[r] : 0;
            if (a->n_kv[r] <= j0 || kv0 >= j0 + BLK) continue;   /* nothing in this block for this row */
            __m512 qv = _mm512_load_ps(q2 + 16 * r), z[8], t[4];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i++) z[i] = _mm512_mul_ps(_mm512_load_ps(kb + 16 * i), qv);
            #pragma GCC unroll 4
            for (int i = 0; i < 4; i++)   /* 128-bit lane k: cell 4i + k's 4 partial sums */
                t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
            __m512 u0 = _mm512_add_ps(_mm512_unpacklo_ps(t[0], t[1]), _mm512_unpackhi_ps(t[0], t[1]));
            __m512 u1 = _mm512_add_ps(_mm512_unpacklo_ps(t[2], t[3]), _mm512_unpackhi_ps(t[2], t[3]));
            __m512d d0 = _mm512_castps_pd(u0), d1 = _mm512_castps_pd(u1);
            __m512 sc = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d0, d1)),
                                      _mm512_castpd_ps(_mm512_unpackhi_pd(d0, d1)));
            __m512 s = mask_unseen(_mm512_mul_ps(_mm512_permutexvar_ps(order, sc), _mm512_set1_ps(a->scale)), j0,
                                   kv0, a->n_kv[r]);
            __m512 acc = _mm512_load_ps(o2 + 16 * r);
            float corr = raise_max(s, &m[r], &l[r]);
            if (corr != 1.0f) acc = _mm512_mul_ps(acc, _mm512_set1_ps(corr));
            __m512 e = tk_exp16(_mm512_sub_ps(s, _mm512_set1_ps(m[r])));
            l[r] += _mm512_reduce_add_ps(e);
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i++)   /* [p(2i) x 8 | p(2i + 1) x 8] times [V(2i) | V(2i + 1)] */
                acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(2 * i)), e),
                                      _mm512_load_ps(vb + 16 * i), acc);
            _mm512_store_ps(o2 + 16 * r, acc);
        }
    }

    for (int r = 0; r < n; r++) {
        __m512 acc = _mm512_mul_ps(_mm512_load_ps(o2 + 16 * r), _mm512_set1_ps(fold_sink(a, r, m[r], &l[r])));
        __m256 o = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
        _mm256_storeu_ps(a->out + (size_t)r * 8, _mm256_mul_ps(o, _mm256_set1_ps((float)(1.0 / l[r]))));
    }
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
    /* Head dims that are not multiples of 16 (stories260K's 8) run padded
     * with zero lanes: they add nothing to a score and nothing is stored
     * from them. */
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
