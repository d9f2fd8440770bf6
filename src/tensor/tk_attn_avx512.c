/*
 * tk_attn_avx512.c - attention of a group of query rows sharing one K/V head
 * (tk.h, tk_attn), with AVX-512 F/VL (256-bit registers: on the target, AMD
 * Zen 4, two 256-bit FMAs per cycle equal one 512-bit one, and 8 lanes fit
 * a GQA group of 7 query heads of one decoded token far better than 16).
 *
 * DESIGN: query rows go across the 8 lanes of a ymm register, so every step
 * is vertical and no horizontal sum is ever needed:
 *
 *   qt [hd_k][8]   the group's queries transposed (lane = row)
 *   s_j = sum_d  K[j][d] (broadcast) * qt[d]        8 rows' scores of cell j
 *   o  [hd_v][8]   += V[j][d] (broadcast) * p_j     output, transposed
 *
 * The cells are walked once in blocks of 64: the block's K and V rows are
 * converted to float once (shared by both groups of 8 rows when there are
 * 16), then each group computes its scores, updates its running max m,
 * rescales its sum and output by exp(m_old - m_new) and adds the block's
 * exp(s - m) and weighted V rows.  Cells a row must not see (j >= n_kv[i])
 * score -inf and weigh exactly 0.  The block sums are float, the running
 * total double.
 *
 * exp: tk_exp_avx512.h (relative error below 2e-7; below -88 gives 0).
 */
#include "tk_exp_avx512.h"
#include "tk_impl.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define LANES 8
#define BLK 64

/* Row `cell` of K or V as n floats into dst. */
static inline void load_row(float *dst, const void *base, size_t stride, int cell, int n, tq_type type)
{
    const char *row = (const char *)base + (size_t)cell * stride;
    if (type == TQ_F16) {
        for (int d = 0; d < n; d += 16)
            _mm512_store_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * d))));
    } else {
        memcpy(dst, row, (size_t)n * sizeof(float));
    }
}

/* State of one group of up to 8 rows. */
typedef struct {
    float *qt;            /* [hd_k][8] */
    float *o;             /* [hd_v][8] */
    __m256i n_kv;         /* cells each lane sees (0 for absent lanes) */
    __m256 m;             /* running max */
    __m256d l_lo, l_hi;   /* running sum, lanes 0-3 and 4-7 */
    int max_kv;
} group;

/* Scores of cells [0, nb) of the block for group g into sb[j][8], masked;
 * returns their lane-wise max. */
static __m256 scores(const group *g, const float *kb, int hk, int j0, int nb, float scale, float *sb)
{
    __m256 bmax = _mm256_set1_ps(-INFINITY);
    const __m256 vscale = _mm256_set1_ps(scale);
    int j = 0;
    for (; j + 4 <= nb; j += 4) {
        const float *k0 = kb + (size_t)j * hk;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hk; d++) {
            __m256 q = _mm256_load_ps(g->qt + d * LANES);
            s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(k0 + d), q, s0);
            s1 = _mm256_fmadd_ps(_mm256_broadcast_ss(k0 + hk + d), q, s1);
            s2 = _mm256_fmadd_ps(_mm256_broadcast_ss(k0 + 2 * hk + d), q, s2);
            s3 = _mm256_fmadd_ps(_mm256_broadcast_ss(k0 + 3 * hk + d), q, s3);
        }
        __m256 s[4] = { s0, s1, s2, s3 };
        for (int c = 0; c < 4; c++) {
            __mmask8 vis = _mm256_cmpgt_epi32_mask(g->n_kv, _mm256_set1_epi32(j0 + j + c));
            __m256 v = _mm256_mask_blend_ps(vis, _mm256_set1_ps(-INFINITY), _mm256_mul_ps(s[c], vscale));
            _mm256_store_ps(sb + (j + c) * LANES, v);
            bmax = _mm256_max_ps(bmax, v);
        }
    }
    for (; j < nb; j++) {
        const float *k0 = kb + (size_t)j * hk;
        __m256 s0 = _mm256_setzero_ps();
        for (int d = 0; d < hk; d++) s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(k0 + d), _mm256_load_ps(g->qt + d * LANES), s0);
        __mmask8 vis = _mm256_cmpgt_epi32_mask(g->n_kv, _mm256_set1_epi32(j0 + j));
        __m256 v = _mm256_mask_blend_ps(vis, _mm256_set1_ps(-INFINITY), _mm256_mul_ps(s0, vscale));
        _mm256_store_ps(sb + j * LANES, v);
        bmax = _mm256_max_ps(bmax, v);
    }
    return bmax;
}

/* o[d] += sum over cells j < nb of V[j][d] * p_j, 16 dims at a time. */
static void accumulate(group *g, const float *vb, int hv, int nb, const float *sb)
{
    for (int d0 = 0; d0 < hv; d0 += 16) {
        __m256 acc[16];
        #pragma GCC unroll 16
        for (int k = 0; k < 16; k++) acc[k] = _mm256_load_ps(g->o + (d0 + k) * LANES);
        for (int j = 0; j < nb; j++) {
            __m256 p = _mm256_load_ps(sb + j * LANES);
            const float *v = vb + (size_t)j * hv + d0;
            #pragma GCC unroll 16
            for (int k = 0; k < 16; k++) acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(v + k), p, acc[k]);
        }
        #pragma GCC unroll 16
        for (int k = 0; k < 16; k++) _mm256_store_ps(g->o + (d0 + k) * LANES, acc[k]);
    }
}

/* One block for one group: scores, running max, rescale, exp, V. */
static void group_block(group *g, const float *kb, const float *vb, int hk, int hv, int j0, int nb,
                        float scale, float *sb)
{
    __m256 bmax = scores(g, kb, hk, j0, nb, scale, sb);
    __m256 m_new = _mm256_max_ps(g->m, bmax);
    __m256 corr = tk_exp8(_mm256_sub_ps(g->m, m_new));
    g->m = m_new;
    g->l_lo = _mm256_mul_pd(g->l_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(corr)));
    g->l_hi = _mm256_mul_pd(g->l_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(corr, 1)));
    for (int d = 0; d < hv; d++)
        _mm256_store_ps(g->o + d * LANES, _mm256_mul_ps(_mm256_load_ps(g->o + d * LANES), corr));
    __m256 psum = _mm256_setzero_ps();
    for (int j = 0; j < nb; j++) {
        __m256 p = tk_exp8(_mm256_sub_ps(_mm256_load_ps(sb + j * LANES), m_new));
        _mm256_store_ps(sb + j * LANES, p);
        psum = _mm256_add_ps(psum, p);
    }
    g->l_lo = _mm256_add_pd(g->l_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(psum)));
    g->l_hi = _mm256_add_pd(g->l_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(psum, 1)));
    accumulate(g, vb, hv, nb, sb);
}

static void attend(const tk_attn *a, void *scratch)
{
    const int hk = a->hd_k, hv = a->hd_v;
    if (a->n_q > TK_ATTN_ROWS || hk > TK_ATTN_MAX_DIM || hv > TK_ATTN_MAX_DIM || hk % 16 || hv % 16) {
        tk_attend_ref(a, scratch);
        return;
    }
    float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *kb = base, *vb = kb + BLK * hk, *sb = vb + BLK * hv;   /* [BLK][hk], [BLK][hv], [BLK][8] */
    float *rest = sb + BLK * LANES;
    const int n_groups = (a->n_q + LANES - 1) / LANES;
    group gs[TK_ATTN_ROWS / LANES];
    int max_kv = 0;
    for (int gi = 0; gi < n_groups; gi++) {
        group *g = &gs[gi];
        g->qt = rest;
        g->o = rest + hk * LANES;
        rest += (hk + hv) * LANES;
        int32_t nkv[LANES];
        g->max_kv = 0;
        for (int l = 0; l < LANES; l++) {
            int i = gi * LANES + l;
            nkv[l] = i < a->n_q ? a->n_kv[i] : 0;
            g->max_kv = MAX(g->max_kv, nkv[l]);
            for (int d = 0; d < hk; d++) {
                float v = i < a->n_q ? a->q[(size_t)i * hk + d] : 0.0f;
                if (a->kv_type == TQ_F16) v = _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
                g->qt[d * LANES + l] = v;
            }
        }
        memset(g->o, 0, (size_t)hv * LANES * sizeof(float));
        g->n_kv = _mm256_loadu_si256((const __m256i *)nkv);
        g->m = _mm256_set1_ps(-FLT_MAX);
        g->l_lo = g->l_hi = _mm256_setzero_pd();
        max_kv = MAX(max_kv, g->max_kv);
    }

    for (int j0 = 0; j0 < max_kv; j0 += BLK) {
        int nb = MIN(BLK, max_kv - j0);
        for (int j = 0; j < nb; j++) {
            load_row(kb + (size_t)j * hk, a->k, a->k_stride, a->cells[j0 + j], hk, a->kv_type);
            load_row(vb + (size_t)j * hv, a->v, a->v_stride, a->cells[j0 + j], hv, a->kv_type);
        }
        for (int gi = 0; gi < n_groups; gi++) {
            group *g = &gs[gi];
            if (j0 < g->max_kv) group_block(g, kb, vb, hk, hv, j0, MIN(nb, g->max_kv - j0), a->scale, sb);
        }
    }

    for (int gi = 0; gi < n_groups; gi++) {
        const group *g = &gs[gi];
        double l[LANES];
        _mm256_storeu_pd(l, g->l_lo);
        _mm256_storeu_pd(l + 4, g->l_hi);
        for (int k = 0; k < LANES && gi * LANES + k < a->n_q; k++) {
            float inv = (float)(1.0 / l[k]);
            float *out = a->out + (size_t)(gi * LANES + k) * hv;
            for (int d = 0; d < hv; d++) out[d] = g->o[d * LANES + k] * inv;
        }
    }
}

void tk_fill_avx512_attn(tk_ops *o)
{
    o->attend = attend;
}
