/*
 * gdn.h - the gated delta rule of a gated DeltaNet layer (Qwen3.5,
 * Qwen3-Next; docs/hybrid.md): one value head of one sequence over a run of
 * its tokens, serial or chunked.
 *
 * DESIGN
 *   Per token t, with the state S (d_k x d_v), a key k and query q
 *   (L2-normalized), a value v, a log decay g < 0 and a rate beta in (0, 1):
 *
 *     S  = exp(g) S                      decay
 *     u  = beta (v - S^T k)              what k should read, minus what it reads
 *     S += k u^T                         the correction
 *     o  = scale S^T q                   scale = 1 / sqrt(d_k)
 *
 *   The state is stored transposed, as llama.cpp stores it, so that every
 *   inner loop runs over a contiguous row of d_k floats:
 *
 *     M : [d_v][d_k]     M[j][i] = S[i][j]
 *
 *   gdn_serial applies the rule token by token.  gdn_chunked gives the
 *   same result for a prompt by blocks of GDN_CHUNK tokens: with the decays accumulated inside the block
 *   (G_t = g_1 + ... + g_t), the corrections U of the block solve one
 *   unit lower-triangular system
 *
 *     (I + A) U = diag(beta) V - diag(beta exp(G)) K S0,
 *     A[t][s] = beta_t exp(G_t - G_s) (k_t . k_s)   for s < t,
 *
 *   the outputs are O = scale (diag(exp(G)) Q S0 + tril(Q K^T . D) U), with
 *   D[t][s] = exp(G_t - G_s), and the state moves once per block:
 *   S = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T.  The products are
 *   matrix products over the block instead of C passes over the state.
 *
 * WHY the forward pass runs gdn_serial for prompts too: on a CPU the
 * block form does no less arithmetic.  Per token and head the serial rule
 * is 4 d^2 multiply-adds over a state that stays in cache; a block of C
 * tokens costs 3 C d^2 (the reads of S0 and the update) plus 2 C^2 d (the
 * triangular solve and the outputs), the same at C = d = 128.  What the
 * block form buys on a GPU, matrix units, a CPU's vector units give the
 * serial rule as well: measured on a 512-token prompt of a 128 x 128 head
 * (test_gdn), serial 2.7 ms, chunked 7.5 ms.  Both stay, held together by
 * test_gdn; the delta rule is under 1% of a prompt's arithmetic next to
 * the weight products anyway.
 *
 * Inputs are row-major [n][d] arrays; the caller repeats key heads to value
 * heads.  Pure functions, no allocation (gdn_chunked takes its scratch).
 */
#ifndef GDN_H
#define GDN_H

#include <stddef.h>

#define GDN_CHUNK 64

typedef struct gdn_in {
    int n, d_k, d_v;            /* tokens, key and value head sizes */
    const float *q, *k;         /* [n][d_k], L2-normalized, not scaled */
    const float *v;             /* [n][d_v] */
    const float *g;             /* [n] log decays */
    const float *beta;          /* [n] */
    size_t q_stride, k_stride, v_stride;   /* floats between tokens' rows */
} gdn_in;

/* Runs the rule over x's tokens: M ([d_v][d_k]) in and out, o
 * ([n] rows of d_v floats, o_stride apart) out. */
void gdn_serial(const gdn_in *x, float *M, float *o, size_t o_stride);

/* Floats of scratch gdn_chunked needs for these head sizes. */
size_t gdn_scratch_floats(int d_k, int d_v);
/* The same as gdn_serial, to rounding, by blocks of GDN_CHUNK tokens. */
void gdn_chunked(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch);

#endif
