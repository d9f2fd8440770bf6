/*
 * cli_gen_gemma.c - `polykv gen-model --arch gemma4`: a Gemma 4 dense model
 * in the 31B's layout or E2B / E4B's, with the keys and tensor names
 * llama.cpp's converter writes (conversion/gemma.py, Gemma4Model).
 *
 * Every swa_every-th layer (the last of each group; 6 in the 31B) is a
 * global layer: head_dim_global heads, n_head_kv_global KV heads, no
 * attn_v (V is K's projection, the 31B's attention_k_eq_v), RoPE at
 * --rope-base over a quarter of its dims (rope_freqs: 1 for those pairs,
 * 1e30 for the rest, as the converter writes for "proportional" RoPE).
 * The others slide over --swa positions with head_dim heads rotated
 * whole at base 10,000.  Norms are stored as the weights themselves
 * (Gemma 4's converter adds no 1; the QK norms' near head_dim^-1/4), the embeddings are tied, each layer has
 * a layer_output_scale, and the logits are soft-capped at --softcap.
 *
 * --per-layer W writes E2B / E4B's layout: per-layer embeddings W wide
 * (per_layer_token_embd, per_layer_model_proj, per_layer_proj_norm, and
 * each layer's inp_gate, proj, post_norm) and attn_v on every layer.
 * --shared-kv N makes the last N layers reuse the K/V of the last layers
 * with their own (which must then be a sliding and a global one, the
 * reference engine's rule) and leaves out their attn_k, attn_v and
 * attn_k_norm, as the quantized E2B / E4B files do; --double-wide doubles
 * those layers' FFN (E2B), writing feed_forward_length per layer.  The
 * types follow llama-quantize on a BF16 conversion: per_layer_token_embd
 * as the (tied) embeddings, per_layer_model_proj left in BF16.
 *
 * --n-expert N writes the 26B-A4B's layers: beside the dense FFN (its
 * shared expert), N experts of --n-ff-exp with --n-expert-used chosen per
 * token: the router (F32, as llama-quantize leaves it) and its input
 * scale, the gate and up of every expert in one ffn_gate_up_exps, their
 * ffn_down_exps and each expert's output scale, and the three extra
 * norms.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_gen.h"

static bool is_global(const gen_shape *sh, long il) { return il % sh->swa_every == sh->swa_every - 1; }

/* Layer il computes no K/V of its own. */
static bool is_shared(const gen_shape *sh, long il) { return il >= sh->n_layer - sh->shared_kv; }

/* Layer il's FFN width. */
static long layer_ff(const gen_shape *sh, long il)
{
    return sh->double_wide && is_shared(sh, il) ? 2 * sh->n_ff : sh->n_ff;
}

/* The reference engine reads the last layer with K/V for shared global
 * layers and the one before for sliding ones. */
static bool sharing_ok(const gen_shape *sh)
{
    const long n_kv = sh->n_layer - sh->shared_kv;
    if (!sh->shared_kv) return true;
    if (sh->shared_kv < 0 || n_kv < 2 || !is_global(sh, n_kv - 1) || is_global(sh, n_kv - 2)) {
        fprintf(stderr, "polykv gen-model: gemma4 --shared-kv N needs layer n_layer - N - 1 global and the one "
                        "before it sliding (see --swa-every)\n");
        return false;
    }
    return true;
}

static long exp_ff(const gen_shape *sh) { return sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff / 4; }

bool gen_gemma_check(gen_shape *sh)
{
    if (!sh->head_dim) sh->head_dim = sh->n_embd / sh->n_head;
    if (!sh->head_dim_global) sh->head_dim_global = 2 * sh->head_dim;
    if (!sh->n_head_kv_global) sh->n_head_kv_global = sh->n_head_kv;
    if (sh->swa_every < 1 || sh->n_swa < 1 || sh->n_head % sh->n_head_kv_global || sh->head_dim_global % 8 ||
        sh->head_dim % 2 || !(sh->softcap >= 0)) {
        fprintf(stderr, "polykv gen-model: gemma4 needs --swa >= 1, --swa-every >= 1, --n-head a multiple of "
                        "--n-head-kv-global, --head-dim-global a multiple of 8, --softcap >= 0\n");
        return false;
    }
    sh->tied = true;   /* Gemma's embeddings are its output */
    return sharing_ok(sh);
}

void gen_gemma_keys(gguf_writer *w, const gen_shape *sh)
{
    char key[128];
    const char *a = sh->arch;
    int32_t *counts = malloc((size_t)sh->n_layer * sizeof *counts);   /* FFN widths, then KV heads */
    bool *swa = malloc((size_t)sh->n_layer * sizeof *swa);
    ASSERT(counts && swa);
    for (long il = 0; il < sh->n_layer; il++) swa[il] = !is_global(sh, il);
    gguf_add_u32(w, gen_akey(key, a, "context_length"), (uint32_t)sh->n_ctx);
    gguf_add_u32(w, gen_akey(key, a, "embedding_length"), (uint32_t)sh->n_embd);
    gguf_add_u32(w, gen_akey(key, a, "block_count"), (uint32_t)sh->n_layer);
    if (sh->double_wide && sh->shared_kv) {
        for (long il = 0; il < sh->n_layer; il++) counts[il] = (int32_t)layer_ff(sh, il);
        gguf_add_arr(w, gen_akey(key, a, "feed_forward_length"), GGUF_TYPE_INT32, counts, (uint64_t)sh->n_layer);
    } else {
        gguf_add_u32(w, gen_akey(key, a, "feed_forward_length"), (uint32_t)sh->n_ff);
    }
    if (sh->experts) {
        gguf_add_u32(w, gen_akey(key, a, "expert_count"), (uint32_t)sh->n_expert);
        gguf_add_u32(w, gen_akey(key, a, "expert_used_count"), (uint32_t)sh->n_expert_used);
        gguf_add_u32(w, gen_akey(key, a, "expert_feed_forward_length"), (uint32_t)exp_ff(sh));
    }
    for (long il = 0; il < sh->n_layer; il++) counts[il] = (int32_t)(swa[il] ? sh->n_head_kv : sh->n_head_kv_global);
    gguf_add_u32(w, gen_akey(key, a, "attention.head_count"), (uint32_t)sh->n_head);
    gguf_add_arr(w, gen_akey(key, a, "attention.head_count_kv"), GGUF_TYPE_INT32, counts, (uint64_t)sh->n_layer);
    gguf_add_f32(w, gen_akey(key, a, "rope.freq_base"), (float)sh->rope_base);
    gguf_add_f32(w, gen_akey(key, a, "rope.freq_base_swa"), 10000.0f);
    gguf_add_f32(w, gen_akey(key, a, "attention.layer_norm_rms_epsilon"), (float)sh->eps);
    gguf_add_u32(w, gen_akey(key, a, "attention.key_length"), (uint32_t)sh->head_dim_global);
    gguf_add_u32(w, gen_akey(key, a, "attention.value_length"), (uint32_t)sh->head_dim_global);
    if (sh->softcap > 0) gguf_add_f32(w, gen_akey(key, a, "final_logit_softcapping"), (float)sh->softcap);
    gguf_add_u32(w, gen_akey(key, a, "attention.sliding_window"), (uint32_t)sh->n_swa);
    gguf_add_u32(w, gen_akey(key, a, "attention.shared_kv_layers"), (uint32_t)sh->shared_kv);
    gguf_add_u32(w, gen_akey(key, a, "embedding_length_per_layer_input"), (uint32_t)sh->per_layer);
    gguf_add_arr(w, gen_akey(key, a, "attention.sliding_window_pattern"), GGUF_TYPE_BOOL, swa,
                 (uint64_t)sh->n_layer);
    gguf_add_u32(w, gen_akey(key, a, "attention.key_length_swa"), (uint32_t)sh->head_dim);
    gguf_add_u32(w, gen_akey(key, a, "attention.value_length_swa"), (uint32_t)sh->head_dim);
    gguf_add_u32(w, gen_akey(key, a, "rope.dimension_count"), (uint32_t)sh->head_dim_global);
    gguf_add_u32(w, gen_akey(key, a, "rope.dimension_count_swa"), (uint32_t)sh->head_dim);
    free(counts);
    free(swa);
}

/* E2B / E4B's tensors outside the layers: every layer's token input in one
 * row a token, the embedding's projection to it and the projection's norm. */
static int per_layer_globals(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t *ts)
{
    const long pw = sh->per_layer, all = pw * sh->n_layer;
    const tq_type t = gt->type, embd_t = gt->k_mix ? TQ_Q6_K : t;
    /* llama-quantize leaves the projection as the conversion wrote it */
    const tq_type proj_t = tq_get(t)->blck_size == 1 ? t : TQ_BF16;
    int rc = 0;
    int64_t ne[2] = { all, n_vocab };
    rc |= gen_add_normal(w, "per_layer_token_embd.weight", embd_t, 2, ne, (*ts)++, 0, 1.0f / sqrtf((float)pw));
    ne[0] = sh->n_embd, ne[1] = all;
    rc |= gen_add_normal(w, "per_layer_model_proj.weight", proj_t, 2, ne, (*ts)++, 0,
                         1.5f / sqrtf((float)sh->n_embd));
    ne[0] = pw;
    rc |= gen_add_normal(w, "per_layer_proj_norm.weight", TQ_F32, 1, ne, (*ts)++, 1.0f, 0.1f);
    return rc;
}

/* Layer il's per-layer input gate, projection back and its norm. */
static int per_layer_tensors(gguf_writer *w, const gen_shape *sh, tq_type t, long il, uint64_t *ts)
{
    const long e = sh->n_embd, pw = sh->per_layer;
    char name[128];
    int rc = 0;
    int64_t ne[2] = { e, pw };
    snprintf(name, sizeof name, "blk.%ld.inp_gate.weight", il);
    rc |= gen_add_normal(w, name, t, 2, ne, (*ts)++, 0, 1.5f / sqrtf((float)e));
    ne[0] = pw, ne[1] = e;
    snprintf(name, sizeof name, "blk.%ld.proj.weight", il);
    rc |= gen_add_normal(w, name, t, 2, ne, (*ts)++, 0, 1.5f / sqrtf((float)pw));
    ne[0] = e;
    snprintf(name, sizeof name, "blk.%ld.post_norm.weight", il);
    rc |= gen_add_normal(w, name, TQ_F32, 1, ne, (*ts)++, 1.0f, 0.1f);
    return rc;
}

/* Layer il's experts (the 26B-A4B), tv the type of its down products. */
static int expert_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, tq_type tv, long il,
                          uint64_t *ts)
{
    const long e = sh->n_embd, nx = sh->n_expert, ffx = exp_ff(sh);
    const tq_type te = gt->exp_type ? gt->exp_type : gt->type;
    const float s_e = 1.5f / sqrtf((float)e), s_x = 1.5f / sqrtf((float)ffx);
    /* the router reads a unit-RMS row divided by sqrt(n_embd): weights of
     * std 1.5 spread its logits as qwen3moe's are (std ~1.5); at s_e they
     * would be near equal, and the rounding of the quantized types would
     * keep switching which experts a token takes */
    const struct { const char *n; tq_type t; int n_dims; long cols, rows, mats; float mean, std; } L[] = {
        { "ffn_gate_inp.weight", TQ_F32, 2, e, nx, 1, 0, 1.5f },
        { "ffn_gate_inp.scale", TQ_F32, 1, e, 1, 1, 1.0f, 0.1f },
        { "pre_ffw_norm_2.weight", TQ_F32, 1, e, 1, 1, 1.0f, 0.1f },
        { "post_ffw_norm_1.weight", TQ_F32, 1, e, 1, 1, 1.0f, 0.1f },
        { "post_ffw_norm_2.weight", TQ_F32, 1, e, 1, 1, 1.0f, 0.1f },
        { "ffn_gate_up_exps.weight", te, 3, e, 2 * ffx, nx, 0, s_e },
        { "ffn_down_exps.weight", gt->exp_type ? te : tv, 3, ffx, e, nx, 0, s_x },
        { "ffn_down_exps.scale", TQ_F32, 1, nx, 1, 1, 1.0f, 0.2f },
    };
    int rc = 0;
    for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
        char name[128];
        snprintf(name, sizeof name, "blk.%ld.%s", il, L[k].n);
        int64_t dims[3] = { L[k].cols, L[k].rows, L[k].mats };
        rc |= gen_add_normal(w, name, L[k].t, L[k].n_dims, dims, (*ts)++, L[k].mean, L[k].std);
    }
    return rc;
}

int gen_gemma_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t ts)
{
    const long e = sh->n_embd, hg = sh->head_dim_global;
    tq_type t = gt->type, out_t = gt->k_mix ? TQ_Q6_K : t;
    float s_e = 1.5f / sqrtf((float)e);
    int rc = 0;
    int64_t ne[2] = { e, n_vocab };
    rc |= gen_add_normal(w, "token_embd.weight", out_t, 2, ne, ts++, 0, 0.02f);
    /* proportional RoPE: a quarter of the global head's pairs turn (the
     * reference loads rope_freqs only when a layer is global) */
    bool any_global = false;
    for (long il = 0; il < sh->n_layer; il++) any_global = any_global || is_global(sh, il);
    float *ff_div = malloc((size_t)(hg / 2) * sizeof *ff_div);
    if (!ff_div) return -1;
    for (long i = 0; i < hg / 2; i++) ff_div[i] = i < hg / 8 ? 1.0f : 1e30f;
    ne[0] = hg / 2;
    if (any_global) rc |= gen_add_floats(w, "rope_freqs.weight", TQ_F32, 1, ne, ff_div);
    free(ff_div);
    ne[0] = e;
    rc |= gen_add_normal(w, "output_norm.weight", TQ_F32, 1, ne, ts++, 1.0f, 0.1f);
    if (sh->per_layer) rc |= per_layer_globals(w, sh, gt, n_vocab, &ts);
    for (long il = 0; il < sh->n_layer && !rc; il++) {
        const bool glob = is_global(sh, il), kv = !is_shared(sh, il);
        const long hd = glob ? hg : sh->head_dim, kd = (glob ? sh->n_head_kv_global : sh->n_head_kv) * hd;
        const long qd = sh->n_head * hd, ff = layer_ff(sh, il);
        tq_type tv = gt->k_mix && gen_more_bits((int)il, (int)sh->n_layer) ? TQ_Q6_K : t;
        float s_o = 1.5f / sqrtf((float)qd), s_f = 1.5f / sqrtf((float)ff);
        /* Gemma 4 scales K.Q by 1, so the QK norms' weights carry the
         * 1/sqrt(hd): at 1 the logits' spread is sqrt(hd), the softmax all
         * but picks one cell, and a last-bit difference between two engines
         * can switch which, which left this model unable to tell a bug from
         * rounding (9e-4 of max |logit| apart from llama.cpp, which differed
         * from itself by 2.5e-3 between batch sizes). */
        const float qk = 1.0f / sqrtf(sqrtf((float)hd));
        /* the 31B's global layers take V from K; E2B / E4B's have attn_v */
        const bool has_v = kv && (!glob || sh->per_layer);
        const struct { const char *n; tq_type t; long cols, rows; float mean, std; } L[] = {
            { "attn_norm.weight", TQ_F32, e, 1, 1.0f, 0.1f },
            { "attn_q.weight", t, e, qd, 0, s_e },
            { kv ? "attn_k.weight" : NULL, t, e, kd, 0, s_e },
            { has_v ? "attn_v.weight" : NULL, tv, e, kd, 0, s_e },
            { "attn_output.weight", t, qd, e, 0, s_o },
            { "attn_q_norm.weight", TQ_F32, hd, 1, qk, 0.1f * qk },
            { kv ? "attn_k_norm.weight" : NULL, TQ_F32, hd, 1, qk, 0.1f * qk },
            { "post_attention_norm.weight", TQ_F32, e, 1, 1.0f, 0.1f },
            { "ffn_norm.weight", TQ_F32, e, 1, 1.0f, 0.1f },
            { "ffn_gate.weight", t, e, ff, 0, s_e },
            { "ffn_up.weight", t, e, ff, 0, s_e },
            { "ffn_down.weight", tv, ff, e, 0, s_f },
            { "post_ffw_norm.weight", TQ_F32, e, 1, 1.0f, 0.1f },
            { "layer_output_scale.weight", TQ_F32, 1, 1, 0.8f, 0.1f },
        };
        for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
            uint64_t s = ts++;   /* taken by absent tensors too: the others keep their values */
            if (!L[k].n) continue;
            char name[128];
            snprintf(name, sizeof name, "blk.%ld.%s", il, L[k].n);
            int64_t dims[2] = { L[k].cols, L[k].rows };
            rc |= gen_add_normal(w, name, L[k].t, L[k].rows > 1 ? 2 : 1, dims, s, L[k].mean, L[k].std);
        }
        if (sh->per_layer) rc |= per_layer_tensors(w, sh, t, il, &ts);
        if (sh->experts) rc |= expert_tensors(w, sh, gt, tv, il, &ts);
    }
    return rc;
}
