/*
 * gdn.c - the gated delta rule, serial and chunked (gdn.h): the baseline
 * build of gdn_body.h and the choice among the builds.
 */
#include <string.h>

#define GDN_ISA base
#include "gdn_body.h"

#include "../tensor/tk.h"

void gdn_serial_avx2(const gdn_in *x, float *M, float *o, size_t o_stride);
void gdn_serial_avx512(const gdn_in *x, float *M, float *o, size_t o_stride);
void gdn_chunked_avx2(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch);
void gdn_chunked_avx512(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch);

/* The build of the instruction set the matrix kernels run on. */
static int isa(void)
{
    const char *name = tk_ops_get()->isa;
    return !strcmp(name, "avx512") ? 2 : !strcmp(name, "avx2") ? 1 : 0;
}

void gdn_serial(const gdn_in *x, float *M, float *o, size_t o_stride)
{
    static void (*const fn[])(const gdn_in *, float *, float *, size_t) = { gdn_serial_base, gdn_serial_avx2,
                                                                           gdn_serial_avx512 };
    fn[isa()](x, M, o, o_stride);
}

/* Scratch, per block of C = GDN_CHUNK tokens:
 *   G [C]        decays accumulated inside the block
 *   A [C][C]     the block's end decays (C of them are used)
 *   U [C][d_v]   the corrections
 *   P [C][d_v]   Q S0 (the block's reads of the state it started from) */
size_t gdn_scratch_floats(int d_k, int d_v)
{
    (void)d_k;
    return (size_t)GDN_CHUNK * (1 + GDN_CHUNK + 2 * (size_t)d_v);
}

void gdn_chunked(const gdn_in *x, float *M, float *o, size_t o_stride, float *scratch)
{
    static void (*const fn[])(const gdn_in *, float *, float *, size_t, float *) = {
        gdn_chunked_base, gdn_chunked_avx2, gdn_chunked_avx512 };
    fn[isa()](x, M, o, o_stride, scratch);
}
