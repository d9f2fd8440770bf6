/*
 * model_load_gemma.c - Gemma 4's dense models (the 31B's layout) from a
 * GGUF: the keys and tensors llama.cpp's converter writes, checked so the
 * forward pass (model_gemma.c) can trust them.
 *
 * Two layer types, named per layer by attention.sliding_window_pattern:
 * sliding-window layers (key_length_swa heads, rope.dimension_count_swa
 * dims rotated at rope.freq_base_swa) and global ones (key_length heads,
 * rope.dimension_count at rope.freq_base, divided by rope_freqs: Gemma's
 * "proportional" RoPE turns most pairs by ~0).  attention.head_count_kv is
 * a count per layer; each type must have one count.  A layer without
 * attn_v uses its K projection as V (the 31B's global layers).
 *
 * Not here yet, refused with their name: E2B / E4B's per-layer embeddings
 * and shared KV layers, the 26B-A4B's experts, YaRN.
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

/* head_count_kv: one count, or one per layer (u32 or i32) into kv[n_layer]. */
static pk_status read_kv_heads(const gguf_ctx *g, const char *arch, int n_layer, int32_t *kv, char *err,
                               size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    int64_t one;
    if (gguf_get_int(g, key, &one) == PK_OK) {
        for (int i = 0; i < n_layer; i++) kv[i] = one < 1 || one > 4096 ? 0 : (int32_t)one;
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
            kv[i] = x < 1 || x > 4096 ? 0 : x;
        }
    }
    for (int i = 0; i < n_layer; i++)
        if (!kv[i]) return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: layer %d's count out of range", key, i);
    return PK_OK;
}

pk_status model_gemma_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len)
{
    pk_status st;
    int32_t shared = 0, per_layer = 0, n_expert = 0;
    if ((st = model_arch_int(g, arch, "attention.shared_kv_layers", false, 0, 4096, &shared, err, err_len)) ||
        (st = model_arch_int(g, arch, "embedding_length_per_layer_input", false, 0, 1 << 24, &per_layer, err,
                             err_len)) ||
        (st = model_arch_int(g, arch, "expert_count", false, 0, 4096, &n_expert, err, err_len)))
        return st;
    if (shared || per_layer)
        return pk_errf(err, err_len, PK_EUNSUPPORTED,
                       "gemma4 with per-layer embeddings or shared KV layers (E2B, E4B) is not supported yet");
    if (n_expert)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "gemma4's mixture of experts (26B-A4B) is not supported yet");
    if (hp->rope_yarn)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "gemma4 with YaRN is not supported");
    if (hp->head_dim_k != hp->head_dim_v)
        return pk_errf(err, err_len, PK_EFORMAT, "gemma4 needs key_length == value_length");

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

    bool *swa = malloc((size_t)hp->n_layer * sizeof *swa);
    int32_t *kv = malloc((size_t)hp->n_layer * sizeof *kv);
    if (!swa || !kv) st = pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    if (!st) st = read_pattern(g, arch, hp->n_layer, swa, err, err_len);
    if (!st) st = read_kv_heads(g, arch, hp->n_layer, kv, err, err_len);
    int32_t kv_type[2] = { 0, 0 };   /* global, sliding */
    for (int i = 0; !st && i < hp->n_layer; i++) {
        int32_t *want = &kv_type[swa[i]];
        if (*want && *want != kv[i])
            st = pk_errf(err, err_len, PK_EUNSUPPORTED, "gemma4: layers of one type with %d and %d KV heads",
                         *want, kv[i]);
        else if (hp->n_head % kv[i])
            st = pk_errf(err, err_len, PK_EFORMAT, "head_count %d not a multiple of layer %d's %d KV heads",
                         hp->n_head, i, kv[i]);
        *want = kv[i];
    }
    free(swa);
    free(kv);
    if (st) return st;
    hp->n_head_kv = kv_type[0] ? kv_type[0] : kv_type[1];
    hp->n_head_kv_swa = kv_type[1] ? kv_type[1] : kv_type[0];
    hp->embd_scale = sqrtf((float)hp->n_embd);
    return PK_OK;
}

pk_status model_gemma_weights(model *m, char *err, size_t err_len)
{
    const gguf_ctx *g = m->gguf;
    const model_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, F = hp->n_ff;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    bool *swa = malloc((size_t)hp->n_layer * sizeof *swa);
    pk_status st = !m->layers || !swa ? pk_errf(err, err_len, PK_ENOMEM, "out of memory")
                                      : read_pattern(g, "gemma4", hp->n_layer, swa, err, err_len);
    bool any_global = false;
    for (int il = 0; !st && il < hp->n_layer; il++) {
        m->layers[il] = (model_layer){ .kv_layer = il, .rs_layer = -1, .swa = swa[il] };
        any_global = any_global || !swa[il];
    }
    free(swa);
    if (st) return st;

    if ((st = model_get_w(g, "token_embd.weight", e, hp->n_vocab, 1, true, &m->tok_embd, err, err_len)) ||
        (st = model_get_w(g, "output_norm.weight", e, 0, 1, true, &m->out_norm, err, err_len)) ||
        (st = model_get_w(g, "output.weight", e, hp->n_vocab, 1, false, &m->output, err, err_len)) ||
        (st = model_get_w(g, "rope_freqs.weight", hp->head_dim_k / 2, 0, 1, any_global, &m->rope_freqs, err,
                          err_len)))
        return st;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &m->layers[il];
        const int64_t hd = L->swa ? hp->head_dim_swa : hp->head_dim_k;
        const int64_t qd = hp->n_head * hd, kd = (L->swa ? hp->n_head_kv_swa : hp->n_head_kv) * hd;
        const struct { model_w *w; const char *name; int64_t cols, rows; bool required; } spec[] = {
            { &L->attn_norm, "attn_norm.weight", e, 0, true },
            { &L->wq, "attn_q.weight", e, qd, true },
            { &L->wk, "attn_k.weight", e, kd, true },
            { &L->wv, "attn_v.weight", e, kd, false },   /* absent: V is K's projection */
            { &L->wo, "attn_output.weight", qd, e, true },
            { &L->q_norm, "attn_q_norm.weight", hd, 0, true },
            { &L->k_norm, "attn_k_norm.weight", hd, 0, true },
            { &L->attn_post_norm, "post_attention_norm.weight", e, 0, true },
            { &L->ffn_norm, "ffn_norm.weight", e, 0, true },
            { &L->w_gate, "ffn_gate.weight", e, F, true },
            { &L->w_up, "ffn_up.weight", e, F, true },
            { &L->w_down, "ffn_down.weight", F, e, true },
            { &L->ffn_post_norm, "post_ffw_norm.weight", e, 0, true },
            { &L->out_scale, "layer_output_scale.weight", 1, 0, false },
        };
        for (size_t k = 0; k < ARRAY_LEN(spec); k++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].name);
            if ((st = model_get_w(g, name, spec[k].cols, spec[k].rows, 1, spec[k].required, spec[k].w, err,
                                  err_len)))
                return st;
        }
    }
    return PK_OK;
}
