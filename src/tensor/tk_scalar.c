/*
 * tk_scalar.c - the scalar kernel table: tq_impl.h's reference routines
 * behind tk.h's function pointers.  Every supported weight type gets a
 * vec_dot and every activation type a quantizer, so this table is complete
 * and the SIMD tables can fall back to it entry by entry.
 */
#include "tk_impl.h"
#include "tq_impl.h"

void tk_fill_scalar(tk_ops *o)
{
    o->vec_dot[TQ_F32]  = tq_dot_f32;
    o->vec_dot[TQ_F16]  = tq_dot_f16;
    o->vec_dot[TQ_BF16] = tq_dot_bf16;
    o->vec_dot[TQ_Q4_0] = tq_dot_q4_0;
    o->vec_dot[TQ_Q4_1] = tq_dot_q4_1;
    o->vec_dot[TQ_Q5_0] = tq_dot_q5_0;
    o->vec_dot[TQ_Q5_1] = tq_dot_q5_1;
    o->vec_dot[TQ_Q8_0] = tq_dot_q8_0;
    o->vec_dot[TQ_Q4_K] = tq_dot_q4_K;
    o->vec_dot[TQ_Q5_K] = tq_dot_q5_K;
    o->vec_dot[TQ_Q6_K] = tq_dot_q6_K;

    o->quantize[TQ_F32]  = tq_quant_f32;
    o->quantize[TQ_F16]  = tq_quant_f16;
    o->quantize[TQ_BF16] = tq_quant_bf16;
    o->quantize[TQ_Q8_0] = tq_quant_q8_0;
    o->quantize[TQ_Q8_K] = tq_quant_q8_K;
}
