/*
 * model_load_hybrid.c - the Qwen3.5 hybrids' metadata and weights
 * (qwen35, qwen35moe as llama.cpp's converter writes them; docs/hybrid.md).
 *
 * The file's block_count counts the trunk's layers and then its MTP (nextn)
 * blocks; which trunk layers are recurrent is the per-layer flag array
 * attention.recurrent_layers, or else every layer but each
 * full_attention_interval-th.
 */
#include "model_impl.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pk_status model_hybrid_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len)
{
    pk_status st;
    const int32_t big = 1 << 20;
    hp->n_layer_nextn = 0;
    if ((st = model_arch_int(g, arch, "nextn_predict_layers", false, 0, 16, &hp->n_layer_nextn, err, err_len)) ||
        (st = model_arch_int(g, arch, "ssm.conv_kernel", true, 2, 64, &hp->ssm_d_conv, err, err_len)) ||
        (st = model_arch_int(g, arch, "ssm.state_size", true, 1, 4096, &hp->ssm_d_state, err, err_len)) ||
        (st = model_arch_int(g, arch, "ssm.group_count", true, 1, 4096, &hp->ssm_n_k_heads, err, err_len)) ||
        (st = model_arch_int(g, arch, "ssm.time_step_rank", true, 1, 4096, &hp->ssm_n_v_heads, err, err_len)))
        return st;
    if (hp->n_layer_nextn > 1)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "%d MTP blocks (one is supported)", hp->n_layer_nextn);
    if (hp->n_layer <= hp->n_layer_nextn)
        return pk_errf(err, err_len, PK_EFORMAT, "block_count %d leaves no layer beside %d MTP blocks", hp->n_layer,
                       hp->n_layer_nextn);
    hp->n_layer -= hp->n_layer_nextn;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return pk_errf(err, err_len, PK_EFORMAT, "ssm.time_step_rank %d not a multiple of ssm.group_count %d",
                       hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    int32_t inner = hp->ssm_d_state * hp->ssm_n_v_heads;
    if ((st = model_arch_int(g, arch, "ssm.inner_size", true, 1, big, &inner, err, err_len))) return st;
    if (inner != hp->ssm_d_state * hp->ssm_n_v_heads)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "ssm.inner_size %d is not state_size x time_step_rank", inner);
    if (hp->head_dim_k != hp->head_dim_v)
        return pk_errf(err, err_len, PK_EFORMAT, "attention key and value head sizes differ");
    if (hp->arch == MODEL_QWEN35MOE) {
        if ((st = model_moe_hparams(g, arch, hp, err, err_len))) return st;
        hp->n_ff = MAX(hp->n_ff_exp, hp->n_ff_shexp);
    }
    return PK_OK;
}

/* Which trunk layers are recurrent: the flag array, else the interval. */
static pk_status recurrent_flags(const gguf_ctx *g, const char *arch, const model_hparams *hp, bool *rec, char *err,
                                 size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    gguf_type et;
    uint64_t n;
    if (gguf_get_arr(g, key, &et, &n) == PK_OK) {
        const void *d = gguf_arr_data(g, key);
        if (!d || n < (uint64_t)hp->n_layer || (et != GGUF_TYPE_BOOL && et != GGUF_TYPE_UINT8 && et != GGUF_TYPE_INT8))
            return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: not %d flags", key, hp->n_layer);
        for (int il = 0; il < hp->n_layer; il++) rec[il] = ((const uint8_t *)d)[il] != 0;
        return PK_OK;
    }
    int32_t every = 4;
    pk_status st = model_arch_int(g, arch, "full_attention_interval", false, 1, 4096, &every, err, err_len);
    if (st) return st;
    for (int il = 0; il < hp->n_layer; il++) rec[il] = (il + 1) % every != 0;
    return PK_OK;
}

typedef struct wspec {
    size_t off;
    const char *name;
    int64_t cols, rows;
    int32_t n_mat;
    bool required;
} wspec;

static pk_status load_specs(const gguf_ctx *g, int il, model_layer *L, const wspec *spec, size_t n, char *err,
                            size_t err_len)
{
    for (size_t k = 0; k < n; k++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].name);
        model_w *w = (model_w *)((char *)L + spec[k].off);
        pk_status st = model_get_w(g, name, spec[k].cols, spec[k].rows, spec[k].n_mat, spec[k].required, w, err,
                                   err_len);
        if (st) return st;
    }
    return PK_OK;
}

#define W(field) offsetof(model_layer, field)

/* The gated attention block's weights (a trunk layer or the MTP block). */
static pk_status load_attention(const gguf_ctx *g, const model_hparams *hp, int il, model_layer *L, char *err,
                                size_t err_len)
{
    const int64_t e = hp->n_embd, hd = hp->head_dim_k, nq = (int64_t)hp->n_head * hd;
    const int64_t nk = (int64_t)hp->n_head_kv * hd;
    const wspec spec[] = {
        { W(wq), "attn_q.weight", e, 2 * nq, 1, true },
        { W(wk), "attn_k.weight", e, nk, 1, true },
        { W(wv), "attn_v.weight", e, nk, 1, true },
        { W(wo), "attn_output.weight", nq, e, 1, true },
        { W(q_norm), "attn_q_norm.weight", hd, 0, 1, true },
        { W(k_norm), "attn_k_norm.weight", hd, 0, 1, true },
    };
    return load_specs(g, il, L, spec, ARRAY_LEN(spec), err, err_len);
}

static pk_status load_block(const gguf_ctx *g, const model_hparams *hp, int il, bool rec, model_layer *L, char *err,
                            size_t err_len)
{
    const int64_t e = hp->n_embd, ds = hp->ssm_d_state, nv = hp->ssm_n_v_heads;
    const int64_t key_dim = ds * hp->ssm_n_k_heads, value_dim = ds * nv, conv_dim = 2 * key_dim + value_dim;
    const wspec common[] = {
        { W(attn_norm), "attn_norm.weight", e, 0, 1, true },
        { W(ffn_norm), "post_attention_norm.weight", e, 0, 1, true },
    };
    const wspec ssm[] = {
        { W(ssm_qkv), "attn_qkv.weight", e, conv_dim, 1, true },
        { W(ssm_z), "attn_gate.weight", e, value_dim, 1, true },
        { W(ssm_conv), "ssm_conv1d.weight", hp->ssm_d_conv, conv_dim, 1, true },
        { W(ssm_dt), "ssm_dt.bias", nv, 0, 1, true },
        { W(ssm_a), "ssm_a", nv, 0, 1, true },
        { W(ssm_beta), "ssm_beta.weight", e, nv, 1, true },
        { W(ssm_alpha), "ssm_alpha.weight", e, nv, 1, true },
        { W(ssm_norm), "ssm_norm.weight", ds, 0, 1, true },
        { W(ssm_out), "ssm_out.weight", value_dim, e, 1, true },
    };
    const wspec dense[] = {
        { W(w_gate), "ffn_gate.weight", e, hp->n_ff, 1, true },
        { W(w_up), "ffn_up.weight", e, hp->n_ff, 1, true },
        { W(w_down), "ffn_down.weight", hp->n_ff, e, 1, true },
    };
    const int32_t nx = hp->n_expert;
    const bool sh = hp->n_ff_shexp > 0;
    const wspec moe[] = {
        { W(moe_router), "ffn_gate_inp.weight", e, nx, 1, true },
        { W(exp_gate), "ffn_gate_exps.weight", e, hp->n_ff_exp, nx, true },
        { W(exp_up), "ffn_up_exps.weight", e, hp->n_ff_exp, nx, true },
        { W(exp_down), "ffn_down_exps.weight", hp->n_ff_exp, e, nx, true },
        { W(sh_gate), "ffn_gate_shexp.weight", e, hp->n_ff_shexp, 1, sh },
        { W(sh_up), "ffn_up_shexp.weight", e, hp->n_ff_shexp, 1, sh },
        { W(sh_down), "ffn_down_shexp.weight", hp->n_ff_shexp, e, 1, sh },
        { W(sh_router), "ffn_gate_inp_shexp.weight", e, 1, 1, sh },
    };
    pk_status st = load_specs(g, il, L, common, ARRAY_LEN(common), err, err_len);
    if (st) return st;
    st = rec ? load_specs(g, il, L, ssm, ARRAY_LEN(ssm), err, err_len) : load_attention(g, hp, il, L, err, err_len);
    if (st) return st;
    if (rec && L->ssm_conv.type != TQ_F32)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "blk.%d.ssm_conv1d.weight must be f32", il);
    if (rec && L->ssm_beta.type != L->ssm_alpha.type)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "blk.%d: ssm_beta and ssm_alpha of different types", il);
    return hp->arch == MODEL_QWEN35MOE ? load_specs(g, il, L, moe, ARRAY_LEN(moe), err, err_len)
                                       : load_specs(g, il, L, dense, ARRAY_LEN(dense), err, err_len);
}

pk_status model_hybrid_weights(model *m, char *err, size_t err_len)
{
    const gguf_ctx *g = m->gguf;
    model_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd;
    pk_status st;
    if ((st = model_get_w(g, "token_embd.weight", e, hp->n_vocab, 1, true, &m->tok_embd, err, err_len)) ||
        (st = model_get_w(g, "output_norm.weight", e, 0, 1, true, &m->out_norm, err, err_len)) ||
        (st = model_get_w(g, "output.weight", e, hp->n_vocab, 1, false, &m->output, err, err_len)))
        return st;
    if (!m->output.data) {
        m->output = m->tok_embd;
        hp->tied_output = true;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    bool *rec = calloc((size_t)hp->n_layer, sizeof *rec);
    if (!m->layers || !rec) {
        free(rec);
        return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    }
    const char *arch = model_arch_name(hp->arch);
    if ((st = recurrent_flags(g, arch, hp, rec, err, err_len))) goto out;
    hp->n_layer_attn = 0;
    int n_rec = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &m->layers[il];
        L->kv_layer = rec[il] ? -1 : hp->n_layer_attn++;
        L->rs_layer = rec[il] ? n_rec++ : -1;
        if ((st = load_block(g, hp, il, rec[il], L, err, err_len))) goto out;
    }
    if (hp->n_layer_attn == 0 || n_rec == 0) {
        st = pk_errf(err, err_len, PK_EUNSUPPORTED, "a hybrid with %d attention and %d recurrent layers",
                     hp->n_layer_attn, n_rec);
        goto out;
    }
    if (hp->n_layer_nextn) {
        /* the MTP block: an attention block behind a projection of the
         * token's embedding and the trunk's last hidden state */
        const int il = hp->n_layer;
        model_layer *L = &m->mtp;
        L->kv_layer = hp->n_layer_attn;   /* the cache layer it takes where a context runs it */
        L->rs_layer = -1;
        const wspec nextn[] = {
            { W(nextn_eh_proj), "nextn.eh_proj.weight", 2 * e, e, 1, true },
            { W(nextn_enorm), "nextn.enorm.weight", e, 0, 1, true },
            { W(nextn_hnorm), "nextn.hnorm.weight", e, 0, 1, true },
            { W(nextn_head_norm), "nextn.shared_head_norm.weight", e, 0, 1, false },
            { W(nextn_embd), "nextn.embed_tokens.weight", e, hp->n_vocab, 1, false },
            { W(nextn_head), "nextn.shared_head_head.weight", e, hp->n_vocab, 1, false },
        };
        if ((st = load_block(g, hp, il, false, L, err, err_len)) ||
            (st = load_specs(g, il, L, nextn, ARRAY_LEN(nextn), err, err_len)))
            goto out;
    }
out:
    free(rec);
    return st;
}

size_t model_state_bytes(const model *m)
{
    const model_hparams *hp = &m->hp;
    if (!hp->hybrid) return 0;
    size_t ds = (size_t)hp->ssm_d_state, conv_dim = ds * (2 * (size_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads);
    size_t per_layer = (size_t)(hp->ssm_d_conv - 1) * conv_dim + (size_t)hp->ssm_n_v_heads * ds * ds;
    return (size_t)(hp->n_layer - hp->n_layer_attn) * per_layer * sizeof(float);
}
