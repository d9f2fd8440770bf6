/*
 * cli_gen_hybrid.c - `polykv gen-model --arch qwen35|qwen35moe`: a random
 * Qwen3.5 hybrid with every key and tensor llama.cpp's converter writes for
 * these archs (docs/hybrid.md; src/model/model_load_hybrid.c reads them),
 * so llama.cpp runs the file and its outputs can be an oracle for ours.
 *
 * Layout as the converter's: block_count is the trunk's --n-layer plus one
 * MTP block (blk.<n_layer>: an attention block and FFN behind
 * nextn.eh_proj / enorm / hnorm / shared_head_norm), recurrent_layers flags
 * every layer but each --attn-every-th (and the MTP block) as DeltaNet, the
 * rotary part is a quarter of the head (partial_rotary_factor 0.25) split
 * into MRoPE sections like Qwen3.5's ([11, 11, 10] of 32 pairs).  The
 * converter's F32 tensors stay F32 whatever --type: norms, ssm_a,
 * ssm_dt.bias, ssm_conv1d, the routers (ffn_gate_inp, and
 * ffn_gate_inp_shexp, which it writes as [n_embd, 1]).  The q4_k mix gives
 * Q6_K to the output and, in the "more bits" layers, to attn_qkv, attn_v
 * and the ffn_down tensors, as llama-quantize's Q4_K_M does.
 *
 * Scales keep every path alive rather than copying transformers' init
 * (std 0.02 everywhere, where the random model's logits come out flat):
 * embeddings and output N(0, 1/sqrt(n_embd)), which puts max |logit| at a
 * few units tied or not; matrices N(0, 1.5/sqrt(fan_in)); norms
 * 1 + 0.1 N(0,1); conv taps N(0, 1/sqrt(d_conv)).  The DeltaNet decay
 * exp(softplus(alpha + dt_bias) * a) is kept near 0.9 per token so that the
 * state carries over tens of tokens: a = -exp(N(0, 0.5)) (the converter
 * stores -exp(A_log)), dt_bias N(-2.5, 0.5), the alpha projection small
 * (N(0, 0.5/sqrt(n_embd))).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_gen.h"

/* A trunk layer is DeltaNet unless it is an attn_every-th one. */
static bool recurrent(const gen_shape *sh, long il)
{
    return il < sh->n_layer && (il + 1) % sh->attn_every != 0;
}

static long head_dim(const gen_shape *sh)
{
    return sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
}

bool gen_hybrid_check(const gen_shape *sh)
{
    const bool moe = !strcmp(sh->arch, "qwen35moe");
    const long hd = head_dim(sh);
    const char *why = sh->attn_every < 2 || sh->n_layer < sh->attn_every
                          ? "the trunk needs a DeltaNet and a full attention layer (--n-layer >= --attn-every >= 2)"
                      : hd % 8 ? "the head size must be a multiple of 8 (a quarter of it rotates, in pairs)"
                      : sh->ssm_groups < 1 || sh->ssm_heads < 1 || sh->ssm_heads % sh->ssm_groups
                          ? "--ssm-heads must be a multiple of --ssm-groups"
                      : sh->ssm_state < 1 || sh->ssm_conv < 2 ? "--ssm-state >= 1 and --ssm-conv >= 2"
                      : moe && (sh->n_expert < 2 || sh->n_expert_used < 1 || sh->n_expert_used > sh->n_expert)
                          ? "--n-expert >= 2 and 1 <= --n-expert-used <= --n-expert"
                      : moe && (sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff / 4) < 1
                          ? "--n-ff-exp (default --n-ff / 4) must be >= 1"
                      : moe && (sh->n_ff_shexp ? sh->n_ff_shexp : sh->n_ff / 2) < 1
                          ? "--n-ff-shexp (default --n-ff / 2) must be >= 1"
                          : NULL;
    if (why) fprintf(stderr, "polykv gen-model: %s\n", why);
    return !why;
}

void gen_hybrid_keys(gguf_writer *w, const gen_shape *sh)
{
    const char *a = sh->arch;
    const bool moe = !strcmp(a, "qwen35moe");
    const long hd = head_dim(sh), n_rot = hd / 4, pairs = n_rot / 2;
    const int32_t sections[4] = { (int32_t)((pairs + 2) / 3), (int32_t)((pairs + 2) / 3),
                                  (int32_t)(pairs - 2 * ((pairs + 2) / 3)), 0 };
    const long n_blocks = sh->n_layer + 1;
    uint8_t *rec = malloc((size_t)n_blocks);
    ASSERT(rec);
    for (long il = 0; il < n_blocks; il++) rec[il] = recurrent(sh, il);
    char key[128];
    gguf_add_u32(w, gen_akey(key, a, "block_count"), (uint32_t)n_blocks);
    gguf_add_u32(w, gen_akey(key, a, "context_length"), (uint32_t)sh->n_ctx);
    gguf_add_u32(w, gen_akey(key, a, "embedding_length"), (uint32_t)sh->n_embd);
    if (!moe) gguf_add_u32(w, gen_akey(key, a, "feed_forward_length"), (uint32_t)sh->n_ff);
    gguf_add_u32(w, gen_akey(key, a, "attention.head_count"), (uint32_t)sh->n_head);
    gguf_add_u32(w, gen_akey(key, a, "attention.head_count_kv"), (uint32_t)sh->n_head_kv);
    gguf_add_arr(w, gen_akey(key, a, "rope.dimension_sections"), GGUF_TYPE_INT32, sections, 4);
    gguf_add_f32(w, gen_akey(key, a, "rope.freq_base"), (float)sh->rope_base);
    gguf_add_f32(w, gen_akey(key, a, "attention.layer_norm_rms_epsilon"), (float)sh->eps);
    if (moe) {
        gguf_add_u32(w, gen_akey(key, a, "expert_count"), (uint32_t)sh->n_expert);
        gguf_add_u32(w, gen_akey(key, a, "expert_used_count"), (uint32_t)sh->n_expert_used);
    }
    gguf_add_u32(w, gen_akey(key, a, "attention.key_length"), (uint32_t)hd);
    gguf_add_u32(w, gen_akey(key, a, "attention.value_length"), (uint32_t)hd);
    if (moe) {
        gguf_add_u32(w, gen_akey(key, a, "expert_feed_forward_length"),
                     (uint32_t)(sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff / 4));
        gguf_add_u32(w, gen_akey(key, a, "expert_shared_feed_forward_length"),
                     (uint32_t)(sh->n_ff_shexp ? sh->n_ff_shexp : sh->n_ff / 2));
    }
    gguf_add_u32(w, gen_akey(key, a, "nextn_predict_layers"), 1);
    gguf_add_u32(w, gen_akey(key, a, "ssm.conv_kernel"), (uint32_t)sh->ssm_conv);
    gguf_add_u32(w, gen_akey(key, a, "ssm.state_size"), (uint32_t)sh->ssm_state);
    gguf_add_u32(w, gen_akey(key, a, "ssm.group_count"), (uint32_t)sh->ssm_groups);
    gguf_add_u32(w, gen_akey(key, a, "ssm.time_step_rank"), (uint32_t)sh->ssm_heads);
    gguf_add_u32(w, gen_akey(key, a, "ssm.inner_size"), (uint32_t)(sh->ssm_state * sh->ssm_heads));
    gguf_add_arr(w, gen_akey(key, a, "attention.recurrent_layers"), GGUF_TYPE_BOOL, rec, (uint64_t)n_blocks);
    free(rec);
    gguf_add_u32(w, gen_akey(key, a, "full_attention_interval"), (uint32_t)sh->attn_every);
    gguf_add_u32(w, gen_akey(key, a, "rope.dimension_count"), (uint32_t)n_rot);
}

/* One tensor of a block: its name, type, shape and distribution. */
typedef struct hspec {
    const char *name;       /* NULL: not in this block (its stream is still used) */
    tq_type type;
    int n_dims;
    long ne0, ne1, ne2;
    float mean, std;
    bool neg_exp;           /* -exp(N(mean, std)) */
} hspec;

static int add_spec(gguf_writer *w, const char *name, const hspec *h, uint64_t seed)
{
    const int64_t ne[3] = { h->ne0, h->ne1, h->ne2 };
    if (!h->neg_exp) return gen_add_normal(w, name, h->type, h->n_dims, ne, seed, h->mean, h->std);
    float *x = malloc((size_t)h->ne0 * sizeof *x);
    if (!x) return -1;
    gen_fill_normal(x, (size_t)h->ne0, seed, h->mean, h->std);
    for (long i = 0; i < h->ne0; i++) x[i] = -expf(x[i]);
    int rc = gen_add_floats(w, name, h->type, 1, ne, x);
    free(x);
    return rc;
}

/* eh_proj of an MTP block that passes the token's normed embedding
 * through: [I | 0] (n_embd rows of 2 n_embd). */
static int add_identity(gguf_writer *w, const char *name, tq_type type, long e)
{
    float *x = calloc((size_t)(2 * e * e), sizeof *x);
    if (!x) return -1;
    for (long r = 0; r < e; r++) x[r * 2 * e + r] = 1.0f;
    const int64_t ne[2] = { 2 * e, e };
    int rc = gen_add_floats(w, name, type, 2, ne, x);
    free(x);
    return rc;
}

int gen_hybrid_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t ts)
{
    const bool moe = !strcmp(sh->arch, "qwen35moe");
    const long e = sh->n_embd, hd = head_dim(sh), nq = sh->n_head * hd, nkv = sh->n_head_kv * hd;
    const long ds = sh->ssm_state, nv = sh->ssm_heads, key_dim = ds * sh->ssm_groups, value_dim = ds * nv;
    const long conv_dim = 2 * key_dim + value_dim, ff = sh->n_ff, nx = sh->n_expert;
    const long ffx = sh->n_ff_exp ? sh->n_ff_exp : ff / 4, ffs = sh->n_ff_shexp ? sh->n_ff_shexp : ff / 2;
    const int n_blocks = (int)sh->n_layer + 1;
    const tq_type t = gt->type, out_t = gt->k_mix ? TQ_Q6_K : t, F = TQ_F32;
    const float s_v = 1.0f / sqrtf((float)e), s_e = 1.5f / sqrtf((float)e);
#define S(n) (1.5f / sqrtf((float)(n)))
    char name[128];
    int rc = 0;
    const hspec head[] = {
        { "token_embd.weight", sh->tied ? out_t : t, 2, e, n_vocab, 1, 0, s_v, false },
        { "output_norm.weight", F, 1, e, 1, 1, 1.0f, 0.1f, false },
        { sh->tied ? NULL : "output.weight", out_t, 2, e, n_vocab, 1, 0, s_v, false },
    };
    for (size_t k = 0; k < ARRAY_LEN(head); k++) {
        uint64_t s = ts++;
        if (head[k].name) rc |= add_spec(w, head[k].name, &head[k], s);
    }
    for (int il = 0; il < n_blocks && !rc; il++) {
        const bool rec = recurrent(sh, il), mtp = il == sh->n_layer, att = !rec;
        const tq_type tv = gt->k_mix && gen_more_bits(il, n_blocks) ? TQ_Q6_K : t;
        /* a block that adds nothing to the residual stream: the trunk's
         * layers from pass_from on, the MTP block that agrees */
        const bool silent = mtp ? sh->mtp_agree : sh->pass_from >= 0 && il >= sh->pass_from;
        const float z = silent ? 0.0f : 1.0f;
        const hspec L[] = {
            { "attn_norm.weight", F, 1, e, 1, 1, 1.0f, 0.1f, false },
            { "post_attention_norm.weight", F, 1, e, 1, 1, 1.0f, 0.1f, false },
            /* gated DeltaNet */
            { rec ? "attn_qkv.weight" : NULL, tv, 2, e, conv_dim, 1, 0, s_e, false },
            { rec ? "attn_gate.weight" : NULL, t, 2, e, value_dim, 1, 0, s_e, false },
            { rec ? "ssm_conv1d.weight" : NULL, F, 2, sh->ssm_conv, conv_dim, 1, 0,
              1.0f / sqrtf((float)sh->ssm_conv), false },
            { rec ? "ssm_dt.bias" : NULL, F, 1, nv, 1, 1, -2.5f, 0.5f, false },
            { rec ? "ssm_a" : NULL, F, 1, nv, 1, 1, 0, 0.5f, true },
            { rec ? "ssm_beta.weight" : NULL, t, 2, e, nv, 1, 0, s_e, false },
            { rec ? "ssm_alpha.weight" : NULL, t, 2, e, nv, 1, 0, 0.5f / sqrtf((float)e), false },
            { rec ? "ssm_norm.weight" : NULL, F, 1, ds, 1, 1, 1.0f, 0.1f, false },
            { rec ? "ssm_out.weight" : NULL, t, 2, value_dim, e, 1, 0, z * S(value_dim), false },
            /* gated attention: per head [q | gate] rows */
            { att ? "attn_q.weight" : NULL, t, 2, e, 2 * nq, 1, 0, s_e, false },
            { att ? "attn_k.weight" : NULL, t, 2, e, nkv, 1, 0, s_e, false },
            { att ? "attn_v.weight" : NULL, tv, 2, e, nkv, 1, 0, s_e, false },
            { att ? "attn_output.weight" : NULL, t, 2, nq, e, 1, 0, z * S(nq), false },
            { att ? "attn_q_norm.weight" : NULL, F, 1, hd, 1, 1, 1.0f, 0.1f, false },
            { att ? "attn_k_norm.weight" : NULL, F, 1, hd, 1, 1, 1.0f, 0.1f, false },
            /* FFN */
            { moe ? NULL : "ffn_gate.weight", t, 2, e, ff, 1, 0, s_e, false },
            { moe ? NULL : "ffn_up.weight", t, 2, e, ff, 1, 0, s_e, false },
            { moe ? NULL : "ffn_down.weight", tv, 2, ff, e, 1, 0, z * S(ff), false },
            { moe ? "ffn_gate_inp.weight" : NULL, F, 2, e, nx, 1, 0, s_e, false },
            { moe ? "ffn_gate_exps.weight" : NULL, t, 3, e, ffx, nx, 0, s_e, false },
            { moe ? "ffn_up_exps.weight" : NULL, t, 3, e, ffx, nx, 0, s_e, false },
            { moe ? "ffn_down_exps.weight" : NULL, tv, 3, ffx, e, nx, 0, z * S(ffx), false },
            { moe ? "ffn_gate_shexp.weight" : NULL, t, 2, e, ffs, 1, 0, s_e, false },
            { moe ? "ffn_up_shexp.weight" : NULL, t, 2, e, ffs, 1, 0, s_e, false },
            { moe ? "ffn_down_shexp.weight" : NULL, tv, 2, ffs, e, 1, 0, z * S(ffs), false },
            { moe ? "ffn_gate_inp_shexp.weight" : NULL, F, 2, e, 1, 1, 0, s_e, false },
            /* MTP: the next token's embedding and the trunk's last state, normed and projected */
            { mtp ? "nextn.eh_proj.weight" : NULL, t, 2, 2 * e, e, 1, 0, S(2 * e), false },
            { mtp ? "nextn.enorm.weight" : NULL, F, 1, e, 1, 1, 1.0f, 0.1f * z, false },
            { mtp ? "nextn.hnorm.weight" : NULL, F, 1, e, 1, 1, 1.0f, 0.1f, false },
            /* agreeing: absent, so the trunk's output_norm is the head's norm */
            { mtp && !silent ? "nextn.shared_head_norm.weight" : NULL, F, 1, e, 1, 1, 1.0f, 0.1f, false },
        };
        for (size_t k = 0; k < ARRAY_LEN(L); k++) {
            uint64_t s = ts++;
            if (!L[k].name) continue;
            snprintf(name, sizeof name, "blk.%d.%s", il, L[k].name);
            if (mtp && silent && !strcmp(L[k].name, "nextn.eh_proj.weight")) rc |= add_identity(w, name, t, e);
            else rc |= add_spec(w, name, &L[k], s);
        }
    }
#undef S
    return rc;
}
