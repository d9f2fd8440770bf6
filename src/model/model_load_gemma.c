/*
 * model_load_gemma.c - Gemma 4's models (the 31B's layout, E2B / E4B's and
 * the 26B-A4B's) from a GGUF: the keys and tensors llama.cpp's converter writes,
 * checked so the forward pass (model_gemma.c) can trust them.
 *
 * Two layer types, named per layer by attention.sliding_window_pattern:
 * sliding-window layers (key_length_swa heads, rope.dimension_count_swa
 * dims rotated at rope.freq_base_swa) and global ones (key_length heads,
 * rope.dimension_count at rope.freq_base, divided by rope_freqs: Gemma's
 * "proportional" RoPE turns most pairs by ~0).  attention.head_count_kv is
 * a count per layer; each type must have one count.  A layer without
 * attn_v uses its K projection as V (the 31B's global layers).
 *
 * E2B / E4B add two things.  Per-layer embeddings
 * (embedding_length_per_layer_input wide): per_layer_token_embd,
 * per_layer_model_proj and per_layer_proj_norm make each token's input to
 * every layer, and each layer mixes its own in through inp_gate, proj and
 * post_norm.  Shared KV layers (attention.shared_kv_layers): the last ones
 * compute no K/V and attend over the cells of an earlier layer of their
 * type; the reference engine takes the last layer with K/V for the global
 * ones and the one before it for the sliding ones, so those two must be
 * global and sliding.  Their attn_k / attn_v / attn_k_norm, which some
 * files carry and some omit, are not read.  feed_forward_length may be a
 * count per layer (E2B's shared layers are twice as wide).
 *
 * The 26B-A4B (expert_count) adds experts to a layer that has
 * ffn_gate_inp: its dense MLP stays as a shared expert, beside
 * pre_ffw_norm_2, post_ffw_norm_1 and post_ffw_norm_2, the router's input
 * scale ffn_gate_inp.scale, the experts' gate and up (one
 * ffn_gate_up_exps, as the converter writes it, or the two), their down
 * and each expert's output scale ffn_down_exps.scale.
 *
 * Not here, refused with its name: YaRN.
 */
#include "model_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file's sliding_window_pattern: a bool per layer into swa[n_layer]. */
static pk_status read_pattern(const gguf_ctx *g, const char *arch, int n_layer, bool *swa, char *err,
                              size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gguf_type et;
    uint64_t n;
    const unsigned char *d;
    if (gguf_get_arr(g, key, &et, &n) != PK_OK || et != GGUF_TYPE_BOOL || n != (uint64_t)n_layer ||
        !(d = gguf_arr_data(g, key)))
        return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: need an array of %d bools", key, n_layer);
    for (int i = 0; i < n_layer; i++) swa[i] = d[i] != 0;
    return PK_OK;
}

/* A key holding one count for every layer or one per layer (u32 or i32),
 * each in [1, hi], into out[n_layer]. */
static pk_status read_layer_counts(const gguf_ctx *g, const char *arch, const char *suffix, int n_layer, int32_t hi,
                                   int32_t *out, char *err, size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t one;
    if (gguf_get_int(g, key, &one) == PK_OK) {
        for (int i = 0; i < n_layer; i++) out[i] = one < 1 || one > hi ? 0 : (int32_t)one;
    } else {
        gguf_type et;
        uint64_t n;
        const char *d;
        if (gguf_get_arr(g, key, &et, &n) != PK_OK || (et != GGUF_TYPE_UINT32 && et != GGUF_TYPE_INT32) ||
            n != (uint64_t)n_layer || !(d = gguf_arr_data(g, key)))
            return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: need a count or %d of them", key, n_layer);
        for (int i = 0; i < n_layer; i++) {
            int32_t x;
            memcpy(&x, d + 4 * (size_t)i, 4);   /* the array may be misaligned in the file */
            out[i] = x < 1 || x > hi ? 0 : x;
        }
    }
    for (int i = 0; i < n_layer; i++)
        if (!out[i]) return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: layer %d's count out of range", key, i);
    return PK_OK;
}

/* The layer whose cells shared layer il (>= n_kv, the layers with K/V)
 * attends over: the reference engine's rule. */
static int kv_source(int n_kv, bool swa) { return n_kv - (swa ? 2 : 1); }

/* Every shared layer's source is a layer of its own type. */
static pk_status check_sharing(const bool *swa, int n_layer, int n_kv, char *err, size_t err_len)
{
    for (int il = n_kv; il < n_layer; il++) {
        const int src = kv_source(n_kv, swa[il]);
        if (swa[src] != swa[il])
            return pk_errf(err, err_len, PK_EUNSUPPORTED,
                           "gemma4: shared KV layer %d (%s) would attend over layer %d (%s): the last two layers "
                           "with K/V must be a sliding and a global one",
                           il, swa[il] ? "sliding" : "global", src, swa[src] ? "sliding" : "global");
    }
    return PK_OK;
}

/* One KV head count per layer type into hp; n_ff the widest layer's. */
static pk_status check_layers(const bool *swa, const int32_t *kv, const int32_t *ff, model_hparams *hp, char *err,
                              size_t err_len)
{
    int32_t kv_type[2] = { 0, 0 };   /* global, sliding */
    hp->n_ff = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        int32_t *want = &kv_type[swa[i]];
        if (*want && *want != kv[i])
            return pk_errf(err, err_len, PK_EUNSUPPORTED, "gemma4: layers of one type with %d and %d KV heads",
                           *want, kv[i]);
        if (hp->n_head % kv[i])
            return pk_errf(err, err_len, PK_EFORMAT, "head_count %d not a multiple of layer %d's %d KV heads",
                           hp->n_head, i, kv[i]);
        *want = kv[i];
        hp->n_ff = MAX(hp->n_ff, ff[i]);
    }
    hp->n_head_kv = kv_type[0] ? kv_type[0] : kv_type[1];
    hp->n_head_kv_swa = kv_type[1] ? kv_type[1] : kv_type[0];
    return check_sharing(swa, hp->n_layer, hp->n_layer_attn, err, err_len);
}

/* The per-layer keys: layer types, KV heads, FFN widths, KV sharing. */
static pk_status read_layers(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len)
{
    const size_t n = (size_t)hp->n_layer;
    bool *swa = malloc(n * sizeof *swa);
    int32_t *kv = malloc(n * sizeof *kv), *ff = malloc(n * sizeof *ff);
    pk_status st = !swa || !kv || !ff ? pk_errf(err, err_len, PK_ENOMEM, "out of memory") : PK_OK;
    if (!st) st = read_pattern(g, arch, hp->n_layer, swa, err, err_len);
    if (!st) st = read_layer_counts(g, arch, "attention.head_count_kv", hp->n_layer, 4096, kv, err, err_len);
    if (!st) st = read_layer_counts(g, arch, "feed_forward_length", hp->n_layer, 1 << 24, ff, err, err_len);
    if (!st) st = check_layers(swa, kv, ff, hp, err, err_len);
    free(swa);
    free(kv);
    free(ff);
    return st;
}

pk_status model_gemma_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len)
{
    pk_status st;
    int32_t shared = 0, n_expert = 0;
    hp->n_embd_per_layer = 0;
    if ((st = model_arch_int(g, arch, "attention.shared_kv_layers", false, 0, 4096, &shared, err, err_len)) ||
        (st = model_arch_int(g, arch, "embedding_length_per_layer_input", false, 0, 1 << 16, &hp->n_embd_per_layer,
                             err, err_len)) ||
        (st = model_arch_int(g, arch, "expert_count", false, 0, 4096, &n_expert, err, err_len)))
        return st;
    if (n_expert) {
        if ((st = model_moe_hparams(g, arch, hp, err, err_len))) return st;
        /* the reference's gemma4 graph: softmax over all, the k best
         * renormalized, GEGLU experts */
        hp->moe_gate = MODEL_GATE_SOFTMAX;
        hp->moe_act = MODEL_ACT_GEGLU;
    }
    if (hp->rope_yarn)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "gemma4 with YaRN is not supported");
    if (hp->head_dim_k != hp->head_dim_v)
        return pk_errf(err, err_len, PK_EFORMAT, "gemma4 needs key_length == value_length");
    /* the reference engine's sharing reads the last two layers with K/V */
    if (shared && shared > hp->n_layer - 2)
        return pk_errf(err, err_len, PK_EFORMAT, "gemma4: %d shared KV layers of %d leave fewer than 2 with K/V",
                       shared, hp->n_layer);
    hp->n_layer_attn = hp->n_layer - shared;

    hp->head_dim_swa = hp->head_dim_k;
    int32_t hd_v_swa = hp->head_dim_k;
    hp->n_rot_swa = hp->n_rot;
    hp->rope_freq_base_swa = 10000.0f;
    if ((st = model_arch_int(g, arch, "attention.sliding_window", true, 1, 1 << 30, &hp->n_swa, err, err_len)) ||
        (st = model_arch_int(g, arch, "attention.key_length_swa", false, 1, 65536, &hp->head_dim_swa, err,
                             err_len)) ||
        (st = model_arch_int(g, arch, "attention.value_length_swa", false, 1, 65536, &hd_v_swa, err, err_len)) ||
        (st = model_arch_int(g, arch, "rope.dimension_count_swa", false, 2, 65536, &hp->n_rot_swa, err, err_len)) ||
        (st = model_arch_float(g, arch, "rope.freq_base_swa", &hp->rope_freq_base_swa, err, err_len)) ||
        (st = model_arch_float(g, arch, "final_logit_softcapping", &hp->logit_softcap, err, err_len)))
        return st;
    if (hd_v_swa != hp->head_dim_swa)
        return pk_errf(err, err_len, PK_EFORMAT, "gemma4 needs key_length_swa == value_length_swa");
    if (hp->n_rot_swa > hp->head_dim_swa || hp->n_rot_swa % 2)
        return pk_errf(err, err_len, PK_EFORMAT, "rope.dimension_count_swa %d invalid for head dim %d",
                       hp->n_rot_swa, hp->head_dim_swa);
    if ((st = read_layers(g, arch, hp, err, err_len))) return st;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    return PK_OK;
}

/* The layers' types and cells: a shared layer's are its source's. */
static pk_status layer_kinds(model *m, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    bool *swa = malloc((size_t)hp->n_layer * sizeof *swa);
    pk_status st = !swa ? pk_errf(err, err_len, PK_ENOMEM, "out of memory")
                        : read_pattern(m->gguf, "gemma4", hp->n_layer, swa, err, err_len);
    for (int il = 0; !st && il < hp->n_layer; il++) {
        const bool reuse = il >= hp->n_layer_attn;
        m->layers[il] = (model_layer){ .kv_layer = il, .rs_layer = -1, .swa = swa[il], .kv_reuse = reuse };
        if (reuse) m->layers[il].kv_layer = m->layers[kv_source(hp->n_layer_attn, swa[il])].kv_layer;
    }
    free(swa);
    return st;
}

/* The tensors outside the layers: embeddings (tied when there is no
 * output.weight), the final norm, RoPE factors where a layer is global,
 * and E2B / E4B's per-layer embeddings. */
static pk_status model_tensors(model *m, char *err, size_t err_len)
{
    const gguf_ctx *g = m->gguf;
    model_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, w = hp->n_embd_per_layer, all = w * hp->n_layer;
    bool any_global = false;
    for (int il = 0; il < hp->n_layer; il++) any_global = any_global || !m->layers[il].swa;
    pk_status st;
    if ((st = model_get_w(g, "token_embd.weight", e, hp->n_vocab, 1, true, &m->tok_embd, err, err_len)) ||
        (st = model_get_w(g, "output_norm.weight", e, 0, 1, true, &m->out_norm, err, err_len)) ||
        (st = model_get_w(g, "output.weight", e, hp->n_vocab, 1, false, &m->output, err, err_len)) ||
        (st = model_get_w(g, "rope_freqs.weight", hp->head_dim_k / 2, 0, 1, any_global, &m->rope_freqs, err,
                          err_len)))
        return st;
    if (!m->output.data) {
        m->output = m->tok_embd;
        hp->tied_output = true;
    }
    if (w &&
        ((st = model_get_w(g, "per_layer_token_embd.weight", all, hp->n_vocab, 1, true, &m->pl_tok_embd, err,
                           err_len)) ||
         (st = model_get_w(g, "per_layer_model_proj.weight", e, all, 1, true, &m->pl_model_proj, err, err_len)) ||
         (st = model_get_w(g, "per_layer_proj_norm.weight", w, 0, 1, true, &m->pl_proj_norm, err, err_len))))
        return st;
    return PK_OK;
}

/* Layer il's tensors, F its FFN's width.  A shared layer's K/V tensors are
 * left unread (and may be absent). */
static pk_status layer_weights(const gguf_ctx *g, const model_hparams *hp, model_layer *L, int il, int64_t F,
                               char *err, size_t err_len)
{
    const int64_t e = hp->n_embd, npl = hp->n_embd_per_layer;
    const int64_t hd = L->swa ? hp->head_dim_swa : hp->head_dim_k;
    const int64_t qd = hp->n_head * hd, kd = (L->swa ? hp->n_head_kv_swa : hp->n_head_kv) * hd;
    const bool kv = !L->kv_reuse, pl = npl > 0;
    const struct { model_w *w; const char *name; int64_t cols, rows; bool read, required; } spec[] = {
        { &L->attn_norm, "attn_norm.weight", e, 0, true, true },
        { &L->wq, "attn_q.weight", e, qd, true, true },
        { &L->wk, "attn_k.weight", e, kd, kv, true },
        { &L->wv, "attn_v.weight", e, kd, kv, false },   /* absent: V is K's projection */
        { &L->wo, "attn_output.weight", qd, e, true, true },
        { &L->q_norm, "attn_q_norm.weight", hd, 0, true, true },
        { &L->k_norm, "attn_k_norm.weight", hd, 0, kv, true },
        { &L->attn_post_norm, "post_attention_norm.weight", e, 0, true, true },
        { &L->ffn_norm, "ffn_norm.weight", e, 0, true, true },
        { &L->w_gate, "ffn_gate.weight", e, F, true, true },
        { &L->w_up, "ffn_up.weight", e, F, true, true },
        { &L->w_down, "ffn_down.weight", F, e, true, true },
        { &L->ffn_post_norm, "post_ffw_norm.weight", e, 0, true, true },
        { &L->pl_gate, "inp_gate.weight", e, npl, pl, true },
        { &L->pl_proj, "proj.weight", npl, e, pl, true },
        { &L->pl_post_norm, "post_norm.weight", e, 0, pl, true },
        { &L->out_scale, "layer_output_scale.weight", 1, 0, true, false },
    };
    for (size_t k = 0; k < ARRAY_LEN(spec); k++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].name);
        pk_status st;
        if (spec[k].read &&
            (st = model_get_w(g, name, spec[k].cols, spec[k].rows, 1, spec[k].required, spec[k].w, err, err_len)))
            return st;
    }
    return PK_OK;
}

/* The 26B-A4B's experts of layer il, where it has a router (the
 * reference's test for a MoE layer). */
static pk_status layer_experts(const gguf_ctx *g, const model_hparams *hp, model_layer *L, int il, char *err,
                               size_t err_len)
{
    const int64_t e = hp->n_embd, F = hp->n_ff_exp;
    const int32_t nx = hp->n_expert;
    char name[96];
    pk_status st;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (!nx || (st = model_get_w(g, name, e, nx, 1, false, &L->moe_router, err, err_len))) return nx ? st : PK_OK;
    if (!L->moe_router.data) return PK_OK;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
    if ((st = model_get_w(g, name, e, 2 * F, nx, false, &L->exp_gate_up, err, err_len))) return st;
    const bool sep = !L->exp_gate_up.data;
    const struct { model_w *w; const char *name; int64_t cols, rows; int32_t n_mat; bool read, required; } spec[] = {
        { &L->moe_router_s, "ffn_gate_inp.scale", e, 0, 1, true, true },
        { &L->ffn_pre_norm_2, "pre_ffw_norm_2.weight", e, 0, 1, true, true },
        { &L->ffn_post_norm_1, "post_ffw_norm_1.weight", e, 0, 1, true, true },
        { &L->ffn_post_norm_2, "post_ffw_norm_2.weight", e, 0, 1, true, true },
        { &L->exp_gate, "ffn_gate_exps.weight", e, F, nx, sep, true },
        { &L->exp_up, "ffn_up_exps.weight", e, F, nx, sep, true },
        { &L->exp_down, "ffn_down_exps.weight", F, e, nx, true, true },
        { &L->exp_down_s, "ffn_down_exps.scale", nx, 0, 1, true, false },
    };
    for (size_t k = 0; k < ARRAY_LEN(spec); k++) {
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].name);
        if (spec[k].read && (st = model_get_w(g, name, spec[k].cols, spec[k].rows, spec[k].n_mat,
                                              spec[k].required, spec[k].w, err, err_len)))
            return st;
    }
    return PK_OK;
}

pk_status model_gemma_weights(model *m, char *err, size_t err_len)
{
    const model_hparams *hp = &m->hp;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    int32_t *ff = malloc((size_t)hp->n_layer * sizeof *ff);
    pk_status st = !m->layers || !ff ? pk_errf(err, err_len, PK_ENOMEM, "out of memory") : layer_kinds(m, err, err_len);
    if (!st) st = read_layer_counts(m->gguf, "gemma4", "feed_forward_length", hp->n_layer, 1 << 24, ff, err, err_len);
    if (!st) st = model_tensors(m, err, err_len);
    for (int il = 0; !st && il < hp->n_layer; il++)
        if (!(st = layer_weights(m->gguf, hp, &m->layers[il], il, ff[il], err, err_len)))
            st = layer_experts(m->gguf, hp, &m->layers[il], il, err, err_len);
    free(ff);
    return st;
}
