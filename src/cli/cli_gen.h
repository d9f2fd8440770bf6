/*
 * cli_gen.h - what `polykv gen-model`'s writers share: cli_gen.c parses the
 * options and writes the llama family (llama, qwen2, qwen3), cli_gen_hybrid.c
 * the Qwen3.5 hybrids (qwen35, qwen35moe), cli_gen_gemma.c Gemma 4 (gemma4).
 */
#ifndef CLI_GEN_H
#define CLI_GEN_H

#include <stdint.h>

#include "../gguf/gguf.h"
#include "../tensor/tq.h"

typedef struct gen_shape {
    const char *arch;
    long n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim, n_ctx;
    /* the hybrids: DeltaNet heads (key heads = ssm.group_count, value heads
     * = ssm.time_step_rank, each ssm_state wide), conv taps, every
     * attn_every-th layer full attention; qwen35moe's experts */
    long ssm_state, ssm_groups, ssm_heads, ssm_conv, attn_every;
    long n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* layers from pass_from on add nothing (their output projections are
     * zero, so the residual stream passes through; 0: none do): a target
     * that a draft of its first layers predicts exactly, for speculation */
    long pass_from;             /* (-1 in the hybrids' parse when not given) */
    bool mtp_agree;             /* hybrids: an MTP block that predicts what a pass-through trunk does */
    double rope_base, eps;
    bool tied;
    /* gpt-oss: the sliding window of its even layers, YaRN's factor */
    long n_swa, yarn;
    /* gemma4: every swa_every-th layer global, with its own head size and
     * KV heads (0: 2 x head_dim, n_head_kv); the logits' soft cap */
    long swa_every, head_dim_global, n_head_kv_global;
    double softcap;
    /* gemma4 E2B / E4B: per-layer embeddings this wide (0: none, the 31B's
     * layout), the last shared_kv layers without K/V of their own, and
     * those layers' FFN twice n_ff (E2B's double-wide MLP) */
    long per_layer, shared_kv;
    bool double_wide;
    /* gemma4: --n-expert given, the 26B-A4B's experts on every layer */
    bool experts;
} gen_shape;

/* A --type: the matrices' type (k_mix: llama-quantize's Q4_K_M mix of
 * Q6_K rows), and the MoE experts' when it differs (0: the same). */
typedef struct gen_type { const char *name; tq_type type; bool k_mix; int ftype; tq_type exp_type; } gen_type;

/* "<arch>.<suffix>" in buf (128 bytes). */
const char *gen_akey(char *buf, const char *arch, const char *suffix);
/* Whether layer il of n gets llama-quantize's "more bits" type in a k mix. */
bool gen_more_bits(int il, int n);
/* n values N(mean, std) from the stream of seed. */
void gen_fill_normal(float *x, size_t n, uint64_t seed, float mean, float std);
/* Tensor name of shape ne[n_dims] (ne[0] the row) from the floats x,
 * quantized to type (or the type llama-quantize falls back to for rows
 * that are not a multiple of its block; 1-D tensors stay F32).  0 or -1. */
int gen_add_floats(gguf_writer *w, const char *name, tq_type type, int n_dims, const int64_t *ne, const float *x);
/* The same with the values drawn N(mean, std) from seed. */
int gen_add_normal(gguf_writer *w, const char *name, tq_type type, int n_dims, const int64_t *ne, uint64_t seed,
                   float mean, float std);

/* cli_gen_hybrid.c: the arch keys, then (after the tokenizer's) the
 * tensors of a qwen35 / qwen35moe model; seed is the first tensor's
 * stream.  gen_hybrid_check says on stderr why a shape does not make one. */
bool gen_hybrid_check(const gen_shape *sh);
void gen_hybrid_keys(gguf_writer *w, const gen_shape *sh);
int gen_hybrid_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t seed);

/* cli_gen_gemma.c: gemma4's keys and tensors, as the hybrids'; the check
 * also fills the shape's defaults. */
bool gen_gemma_check(gen_shape *sh);
void gen_gemma_keys(gguf_writer *w, const gen_shape *sh);
int gen_gemma_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t seed);

#endif
