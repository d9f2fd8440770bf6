/*
 * tk_gemm_avx512.c - the GEMM pieces of tk_impl.h for the 32-value formats
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) against Q8_0 activations,
 * AVX-512 VNNI.
 * tk.c calls tk_fill_avx512_gemm only on CPUs with AVX-512 F/BW/VL/DQ + VNNI.
 *
 *   y[r][t] = sum over blocks b of  ws[r][b] * as[t][b] * I[r][t][b]
 *                                  + wm[r][b] * am[t][b]        (Q4_1, Q5_1)
 *   I = the block's exact integer dot, ws / as the weight / activation
 *   scales, wm the weight min, am = as * (sum of the block's activations)
 *
 * one fused multiply-add per block in block order, as the reference
 * engine's repacked GEMM does (its vec_dot splits each block into 8 lanes
 * instead, so the two agree to rounding, not to the bit).
 *
 * TILE KERNEL.  12 weight rows x 16 tokens, the tokens across the lanes of
 * a zmm register.  For each block b of the row panel:
 *
 *   ai[r] = corr[r]                                    (12 int32 x 16)
 *   for each 4-byte group g of the block:
 *       A = a8 of group g, 16 tokens                   (one 64-byte load)
 *       ai[r] += vpdpbusd(A, broadcast w8[r][g..g+3])  (r = 0..11)
 *   acc[r] += float(ai[r]) * (as * ws[r])              (+ am * wm[r])
 *
 * so one vpdpbusd does 64 multiply-adds for 16 tokens, the activations are
 * loaded once per 12 rows and the weights are broadcast straight from the
 * panel in L1/L2.  12 + 12 accumulators, A and the scales fill the 32 zmm
 * registers without spilling.
 *
 * PANEL record b (12 rows x 32 columns, 528 bytes):
 *
 *   w8 [12][32] int8 | corr [12] int32 = -128 * sum(w8) | ws [12] f32 | wm [12] f32
 *
 * w8 is Q8_0 as stored, Q4_0 / Q5_0 codes minus their zero point, Q4_1 /
 * Q5_1 raw codes (the min goes to wm), IQ4_NL / MXFP4 the table's values
 * (MXFP4's doubled E2M1, with ws = 2^(e - 128) as tq_e8m0_half gives it).
 * A panel is packed once per 12 rows and reused by every token group.
 *
 * GROUP after a8: as [n_cols / 32][16] f32 | am [n_cols / 32][16] f32.
 */
#include "tk_impl.h"
#include "tk_codes_avx512.h"
#include "tq_impl.h"

#include <immintrin.h>
#include <string.h>

#define RT TK_GEMM_ROWS
#define NL TK_GEMM_LANES

_Static_assert(RT == 12 && NL == 16, "the tile kernel is written for 12 x 16");

/* ---- panels ----------------------------------------------------------------- */

/* Pointers into record b of a panel. */
typedef struct {
    int8_t *w8;
    int32_t *corr;
    float *ws, *wm;
} rec;

static inline rec record(void *panel, int64_t b)
{
    char *p = (char *)panel + (size_t)b * RT * (32 + 12);
    rec r = { (int8_t *)p, (int32_t *)(p + RT * 32), NULL, NULL };
    r.ws = (float *)(r.corr + RT);
    r.wm = r.ws + RT;
    return r;
}

static inline void put32(rec k, int r, __m256i v, float ws, float wm)
{
    _mm256_storeu_si256((__m256i *)(k.w8 + 32 * r), v);
    k.corr[r] = -128 * sum_s8_32(v);
    k.ws[r] = ws;
    k.wm[r] = wm;
}

/* Zeroes rows [n, RT) of every record: they give zero outputs. */
static void zero_rows(void *panel, int64_t n_blocks, int n)
{
    if (n == RT) return;
    for (int64_t b = 0; b < n_blocks; b++) {
        rec k = record(panel, b);
        memset(k.w8 + 32 * n, 0, (size_t)(RT - n) * 32);
        for (int r = n; r < RT; r++) k.corr[r] = 0, k.ws[r] = 0, k.wm[r] = 0;
    }
}

static void pack_w_q8_0(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    for (int r = 0; r < n; r++) {
        const tq_block_q8_0 *x = (const tq_block_q8_0 *)((const char *)w + (size_t)r * wrow);
        for (int64_t b = 0; b < n_cols / 32; b++)
            put32(record(panel, b), r, _mm256_loadu_si256((const __m256i *)x[b].qs), _cvtsh_ss(x[b].d), 0);
    }
    zero_rows(panel, n_cols / 32, n);
}

static void pack_w_q4_0(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    for (int r = 0; r < n; r++) {
        const tq_block_q4_0 *x = (const tq_block_q4_0 *)((const char *)w + (size_t)r * wrow);
        for (int64_t b = 0; b < n_cols / 32; b++)
            put32(record(panel, b), r, _mm256_sub_epi8(nibbles32(x[b].qs), _mm256_set1_epi8(8)),
                  _cvtsh_ss(x[b].d), 0);
    }
    zero_rows(panel, n_cols / 32, n);
}

static void pack_w_q4_1(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    for (int r = 0; r < n; r++) {
        const tq_block_q4_1 *x = (const tq_block_q4_1 *)((const char *)w + (size_t)r * wrow);
        for (int64_t b = 0; b < n_cols / 32; b++)
            put32(record(panel, b), r, nibbles32(x[b].qs), _cvtsh_ss(x[b].d), _cvtsh_ss(x[b].m));
    }
    zero_rows(panel, n_cols / 32, n);
}

static void pack_w_q5_0(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    for (int r = 0; r < n; r++) {
        const tq_block_q5_0 *x = (const tq_block_q5_0 *)((const char *)w + (size_t)r * wrow);
        for (int64_t b = 0; b < n_cols / 32; b++)
            put32(record(panel, b), r, _mm256_sub_epi8(codes5_32(x[b].qs, x[b].qh), _mm256_set1_epi8(16)),
                  _cvtsh_ss(x[b].d), 0);
    }
    zero_rows(panel, n_cols / 32, n);
}

static void pack_w_q5_1(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    for (int r = 0; r < n; r++) {
        const tq_block_q5_1 *x = (const tq_block_q5_1 *)((const char *)w + (size_t)r * wrow);
        for (int64_t b = 0; b < n_cols / 32; b++)
            put32(record(panel, b), r, codes5_32(x[b].qs, x[b].qh), _cvtsh_ss(x[b].d), _cvtsh_ss(x[b].m));
    }
    zero_rows(panel, n_cols / 32, n);
}

/* The non-linear formats: each level's value from the 16-entry table
 * (vpshufb works within 128-bit lanes: the table is in both). */
static inline __m256i table32(const uint8_t *qs, const int8_t *table)
{
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table)), nibbles32(qs));
}

/* IQ4_NL (mx false: f16 d, codes at 2) or MXFP4 (E8M0 e, codes at 1). */
static inline __attribute__((always_inline)) void
pack_w_table(const void *w, size_t wrow, int n, int64_t n_cols, void *panel, const bool mx)
{
    const size_t bs = mx ? sizeof(tq_block_mxfp4) : sizeof(tq_block_iq4_nl);
    for (int r = 0; r < n; r++) {
        const char *x = (const char *)w + (size_t)r * wrow;
        for (int64_t b = 0; b < n_cols / 32; b++) {
            const char *blk = x + (size_t)b * bs;
            float ws = mx ? tq_e8m0_half(((const tq_block_mxfp4 *)blk)->e) : _cvtsh_ss(((const tq_block_iq4_nl *)blk)->d);
            const uint8_t *qs = mx ? ((const tq_block_mxfp4 *)blk)->qs : ((const tq_block_iq4_nl *)blk)->qs;
            put32(record(panel, b), r, table32(qs, mx ? tq_mxfp4_values : tq_iq4nl_values), ws, 0);
        }
    }
    zero_rows(panel, n_cols / 32, n);
}

static void pack_w_iq4_nl(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    pack_w_table(w, wrow, n, n_cols, panel, false);
}

static void pack_w_mxfp4(const void *w, size_t wrow, int n, int64_t n_cols, void *panel)
{
    pack_w_table(w, wrow, n, n_cols, panel, true);
}

/* The tiled layouts (tq.h): the same records, rows r0 .. r0 + n - 1 of the
 * matrix at w gathered from their tiles (4 code bytes per 64-byte line).
 * type: the plain format (Q4_0, Q8_0, IQ4_NL, MXFP4). */
static inline __attribute__((always_inline)) void
pack_wt(const void *w, int64_t r0, int n, int64_t n_cols, void *panel, const tq_type type)
{
    const int64_t nb = n_cols / 32;
    const int cb = type == TQ_Q8_0 ? 32 : 16;
    const bool mx = type == TQ_MXFP4;
    const size_t wrow = (size_t)nb * tq_get(type)->type_size;
    for (int r = 0; r < n; r++) {
        const int64_t row = r0 + r;
        const char *tile = tq_tile_of(w, row, wrow);
        const int i = (int)(row % TQ_TILE_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const char *q = tile + (mx ? tq_tile_codes_mx(b) : tq_tile_codes(b, cb)) + 4 * i;
            float ws;
            if (mx) {
                ws = tq_e8m0_half((uint8_t)tile[tq_tile_scales_mx(b) + i]);
            } else {
                tq_f16 d;
                memcpy(&d, tile + tq_tile_scales(b, cb) + 2 * i, sizeof d);
                ws = _cvtsh_ss(d);
            }
            __m256i v;
            if (cb == 16) {   /* the 16 qs bytes, then nibbles as nibbles32 does */
                uint8_t qs[16];
                for (int k = 0; k < 4; k++) memcpy(qs + 4 * k, q + 64 * k, 4);
                v = type == TQ_Q4_0 ? _mm256_sub_epi8(nibbles32(qs), _mm256_set1_epi8(8))
                                    : table32(qs, mx ? tq_mxfp4_values : tq_iq4nl_values);
            } else {          /* stored + 128 */
                v = _mm256_i32gather_epi32((const int *)q, _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448), 1);
                v = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
            }
            put32(record(panel, b), r, v, ws, 0);
        }
    }
    zero_rows(panel, nb, n);
}

static void pack_wt_q4_0(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_wt(w, r0, n, n_cols, panel, TQ_Q4_0);
}

static void pack_wt_q8_0(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_wt(w, r0, n, n_cols, panel, TQ_Q8_0);
}

static void pack_wt_iq4_nl(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_wt(w, r0, n, n_cols, panel, TQ_IQ4_NL);
}

static void pack_wt_mxfp4(const void *w, int64_t r0, int n, int64_t n_cols, void *panel)
{
    pack_wt(w, r0, n, n_cols, panel, TQ_MXFP4);
}

/* ---- activation groups ------------------------------------------------------ */

static inline size_t group_as(int64_t n_cols) { return (size_t)n_cols * 16; }
static inline size_t group_am(int64_t n_cols) { return (size_t)n_cols * 18; }

static void pack_a_q8_0(const void *row, int64_t n_cols, int lane, void *group)
{
    const tq_block_q8_0 *x = row;
    uint32_t *a8 = (uint32_t *)group + lane;
    float *as = (float *)((char *)group + group_as(n_cols)) + lane;
    float *am = (float *)((char *)group + group_am(n_cols)) + lane;
    if (!x) {
        for (int64_t k = 0; k < n_cols / 4; k++) a8[k * NL] = 0x80808080u;
        for (int64_t b = 0; b < n_cols / 32; b++) as[b * NL] = am[b * NL] = 0;
        return;
    }
    for (int64_t b = 0; b < n_cols / 32; b++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)x[b].qs);
        uint32_t u[8];
        _mm256_storeu_si256((__m256i *)u, _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        for (int g = 0; g < 8; g++) a8[(b * 8 + g) * NL] = u[g];
        float d = _cvtsh_ss(x[b].d);
        as[b * NL] = d;
        am[b * NL] = d * (float)sum_s8_32(v);
    }
}

/* ---- the tile kernel -------------------------------------------------------- */

/*
 * has_min: add am * wm.  Inlined into one function per case, so every loop
 * below has constant bounds and the arrays live in registers.
 */
static inline __attribute__((always_inline)) void
tile(const void *panel, int64_t n_cols, const void *group, float out[RT][NL], const bool has_min)
{
    const uint8_t *a8 = group;
    const float *as = (const float *)((const char *)group + group_as(n_cols));
    const float *am = (const float *)((const char *)group + group_am(n_cols));
    const int64_t n_blocks = n_cols / 32;
    const size_t rec_bytes = (size_t)RT * (32 + 12);
    __m512 acc[RT];
    #pragma GCC unroll 12
    for (int r = 0; r < RT; r++) acc[r] = _mm512_setzero_ps();

    const char *p = panel;
    for (int64_t b = 0; b < n_blocks; b++, p += rec_bytes, a8 += 32 * NL) {
        const int8_t *w8 = (const int8_t *)p;
        const int32_t *corr = (const int32_t *)(p + RT * 32);
        const float *ws = (const float *)(corr + RT), *wm = ws + RT;
        __m512i ai[RT];
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++) ai[r] = _mm512_set1_epi32(corr[r]);
        #pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i A = _mm512_load_si512(a8 + 64 * g);
            #pragma GCC unroll 12
            for (int r = 0; r < RT; r++)
                ai[r] = _mm512_dpbusd_epi32(ai[r], A, _mm512_set1_epi32(load_i32(w8 + 32 * r + 4 * g)));
        }
        __m512 s = _mm512_load_ps(as + b * NL);
        #pragma GCC unroll 12
        for (int r = 0; r < RT; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r]), _mm512_mul_ps(s, _mm512_set1_ps(ws[r])), acc[r]);
        if (has_min) {
            __m512 m = _mm512_load_ps(am + b * NL);
            #pragma GCC unroll 12
            for (int r = 0; r < RT; r++) acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(wm[r]), acc[r]);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < RT; r++) _mm512_storeu_ps(out[r], acc[r]);
}

static void tile_plain(const void *p, int64_t n, const void *g, float o[RT][NL]) { tile(p, n, g, o, false); }
static void tile_min(const void *p, int64_t n, const void *g, float o[RT][NL]) { tile(p, n, g, o, true); }

void tk_fill_avx512_gemm(tk_gemm *g)
{
    static const struct { int type; tk_pack_w_fn pack; bool min; } t[] = {
        { TQ_Q8_0, pack_w_q8_0, false }, { TQ_Q4_0, pack_w_q4_0, false }, { TQ_Q5_0, pack_w_q5_0, false },
        { TQ_Q4_1, pack_w_q4_1, true },  { TQ_Q5_1, pack_w_q5_1, true },
        { TQ_IQ4_NL, pack_w_iq4_nl, false }, { TQ_MXFP4, pack_w_mxfp4, false },
    };
    g->pack_a[TQ_Q8_0] = pack_a_q8_0;
    for (size_t i = 0; i < ARRAY_LEN(t); i++) {
        g->pack_w[t[i].type] = t[i].pack;
        g->tile[t[i].type] = t[i].min ? tile_min : tile_plain;
        g->rec_cols[t[i].type] = 32;
        g->rec_bytes[t[i].type] = RT * (32 + 12);
        g->min_tokens[t[i].type] = TK_GEMM_MIN_TOKENS;
    }
    g->pack_wt[TQ_Q4_0X16] = pack_wt_q4_0;
    g->pack_wt[TQ_Q8_0X16] = pack_wt_q8_0;
    g->pack_wt[TQ_IQ4_NLX16] = pack_wt_iq4_nl;
    g->pack_wt[TQ_MXFP4X16] = pack_wt_mxfp4;
}
