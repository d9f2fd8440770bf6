/*
 * tk_impl.h - internal to src/tensor: the per-ISA fillers behind tk.h.
 *
 * tk.c builds each ISA's tk_ops by calling the fillers that belong to it on
 * a zeroed table, then copies the scalar entry into every slot still NULL.
 * A filler sets only the entries its file implements: vec_dot[weight type]
 * and quantize[activation type].  Each lives in a file compiled with its
 * ISA's -m flags (tk_legacy_avx2.c, tk_kquant_avx512.c, ...), so it must only
 * be called after tk.c has checked the CPU supports that ISA.
 */
#ifndef TK_IMPL_H
#define TK_IMPL_H

#include "tk.h"

void tk_fill_scalar(tk_ops *o);          /* every supported type (tk_scalar.c) */
void tk_fill_avx2_legacy(tk_ops *o);     /* F32/F16/BF16, 32-value formats, Q8_0/F16/BF16 quantizers */
void tk_fill_avx512_legacy(tk_ops *o);
void tk_fill_avx2_kquant(tk_ops *o);     /* Q4_K/Q5_K/Q6_K dots, Q8_K quantizer */
void tk_fill_avx512_kquant(tk_ops *o);

#endif
