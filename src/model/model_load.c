/*
 * model_load.c - reading a llama-family GGUF: hyper-parameters from the
 * metadata, every weight resolved and checked against the shape the
 * architecture needs, so the forward pass can trust them.
 */
#include "model_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/tq.h"

const char *model_arch_name(model_arch a)
{
    switch (a) {
    case MODEL_LLAMA: return "llama";
    case MODEL_QWEN2: return "qwen2";
    case MODEL_QWEN3: return "qwen3";
    case MODEL_QWEN35: return "qwen35";
    case MODEL_QWEN35MOE: return "qwen35moe";
    case MODEL_QWEN3MOE: return "qwen3moe";
    case MODEL_GPTOSS: return "gpt-oss";
    case MODEL_GEMMA4: return "gemma4";
    }
    return "?";
}

/* Reads "<arch>.<suffix>" as an integer; absent keys keep *out. */
pk_status model_arch_int(const gguf_ctx *g, const char *arch, const char *suffix,
                          bool required, int32_t lo, int32_t hi, int32_t *out,
                          char *err, size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    pk_status st = gguf_get_int(g, key, &v);
    if (st == PK_ENOTFOUND && !required) return PK_OK;
    if (st != PK_OK)
        return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: %s", key,
                    st == PK_ENOTFOUND ? "missing" : "not an integer");
    if (v < lo || v > hi)
        return pk_errf(err, err_len, PK_EFORMAT, "metadata %s = %lld out of range [%d, %d]",
                    key, (long long)v, lo, hi);
    *out = (int32_t)v;
    return PK_OK;
}

pk_status model_arch_float(const gguf_ctx *g, const char *arch, const char *suffix,
                            float *out, char *err, size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    pk_status st = gguf_get_float(g, key, &v);
    if (st == PK_ENOTFOUND) return PK_OK;
    if (st != PK_OK || !(v > 0) || v > 1e12)
        return pk_errf(err, err_len, PK_EFORMAT, "metadata %s: not a positive float", key);
    *out = (float)v;
    return PK_OK;
}

/* YaRN as the reference engine sets it up: extrapolation factor 1, beta
 * fast 32 and slow 1 over the original context (it reads no yarn_* key for
 * these architectures), the magnitude factor 1 + 0.1 ln(factor) times its
 * attention factor, which cancels the same (rounded as it rounds it) and
 * takes rope.scaling.attn_factor, and the dims where the blend runs. */
static pk_status yarn(const gguf_ctx *g, const char *arch, float factor, model_hparams *hp, char *err, size_t err_len)
{
    int32_t n_orig = hp->n_ctx_train;
    float attn_factor = 1.0f;
    pk_status st;
    if ((st = model_arch_int(g, arch, "rope.scaling.original_context_length", false, 1, 1 << 30, &n_orig, err,
                             err_len)) ||
        (st = model_arch_float(g, arch, "rope.scaling.attn_factor", &attn_factor, err, err_len)))
        return st;
    hp->rope_yarn = true;
    hp->rope_freq_scale = 1.0f / factor;
    const float beta_fast = 32.0f, beta_slow = 1.0f, n = (float)hp->n_rot, base = hp->rope_freq_base;
    float lo = floorf(n * logf((float)n_orig / (beta_fast * 2 * (float)M_PI)) / (2 * logf(base)));
    float hi = ceilf(n * logf((float)n_orig / (beta_slow * 2 * (float)M_PI)) / (2 * logf(base)));
    hp->rope_yarn_corr[0] = fmaxf(0.0f, lo);
    hp->rope_yarn_corr[1] = fminf(n - 1, hi);
    float f = 1.0f / hp->rope_freq_scale;
    float attn = 0.1f * 1.0f * logf(f) + 1.0f;
    attn *= 1.0f / (1.0f + 0.1f * logf(f));
    attn *= attn_factor;
    hp->rope_mscale = attn * (1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale));
    return PK_OK;
}

static pk_status read_hparams(const gguf_ctx *g, model_hparams *hp, char *err, size_t err_len)
{
    gguf_str a;
    if (gguf_get_str(g, "general.architecture", &a) != PK_OK)
        return pk_errf(err, err_len, PK_EFORMAT, "metadata general.architecture missing");
    char arch[32];
    if (a.n >= sizeof arch)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "unsupported architecture (name too long)");
    memcpy(arch, a.p, a.n);
    arch[a.n] = 0;
    if (!strcmp(arch, "llama")) hp->arch = MODEL_LLAMA;
    else if (!strcmp(arch, "qwen2")) hp->arch = MODEL_QWEN2;
    else if (!strcmp(arch, "qwen3")) hp->arch = MODEL_QWEN3;
    else if (!strcmp(arch, "qwen35")) hp->arch = MODEL_QWEN35;
    else if (!strcmp(arch, "qwen35moe")) hp->arch = MODEL_QWEN35MOE;
    else if (!strcmp(arch, "qwen3moe")) hp->arch = MODEL_QWEN3MOE;
    else if (!strcmp(arch, "gpt-oss")) hp->arch = MODEL_GPTOSS;
    else if (!strcmp(arch, "gemma4")) hp->arch = MODEL_GEMMA4;
    else return pk_errf(err, err_len, PK_EUNSUPPORTED,
                     "unsupported architecture '%s' (llama, qwen2, qwen3, qwen3moe, gpt-oss, gemma4, qwen35, qwen35moe "
                     "are)", arch);
    const bool moe = hp->arch == MODEL_QWEN3MOE || hp->arch == MODEL_QWEN35MOE || hp->arch == MODEL_GPTOSS;
    hp->hybrid = hp->arch == MODEL_QWEN35 || hp->arch == MODEL_QWEN35MOE;

    pk_status st;
    const int32_t big = 1 << 24;
    hp->n_ctx_train = 2048;
    if ((st = model_arch_int(g, arch, "context_length", false, 1, 1 << 30, &hp->n_ctx_train, err, err_len)) ||
        (st = model_arch_int(g, arch, "embedding_length", true, 1, big, &hp->n_embd, err, err_len)) ||
        (st = model_arch_int(g, arch, "block_count", true, 1, 4096, &hp->n_layer, err, err_len)) ||
        /* Gemma 4's may be a count per layer (model_gemma_hparams) */
        (st = hp->arch == MODEL_GEMMA4 ? PK_OK
                                       : model_arch_int(g, arch, "feed_forward_length", !moe, 1, big, &hp->n_ff,
                                                        err, err_len)) ||
        (st = model_arch_int(g, arch, "attention.head_count", true, 1, 4096, &hp->n_head, err, err_len)))
        return st;
    hp->n_head_kv = hp->n_head;
    /* Gemma 4's is an array, a count per layer (model_gemma_hparams) */
    if (hp->arch != MODEL_GEMMA4 &&
        (st = model_arch_int(g, arch, "attention.head_count_kv", false, 1, 4096, &hp->n_head_kv, err, err_len)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return pk_errf(err, err_len, PK_EFORMAT, "head_count %d not a multiple of head_count_kv %d",
                    hp->n_head, hp->n_head_kv);
    if (hp->n_embd % hp->n_head)
        hp->head_dim_k = 0;
    else
        hp->head_dim_k = hp->n_embd / hp->n_head;
    if ((st = model_arch_int(g, arch, "attention.key_length", false, 1, 65536, &hp->head_dim_k, err, err_len)))
        return st;
    hp->head_dim_v = hp->head_dim_k;
    if ((st = model_arch_int(g, arch, "attention.value_length", false, 1, 65536, &hp->head_dim_v, err, err_len)))
        return st;
    if (hp->head_dim_k <= 0 || hp->head_dim_v <= 0)
        return pk_errf(err, err_len, PK_EFORMAT, "head dimension undefined");
    hp->n_rot = hp->head_dim_k;
    if ((st = model_arch_int(g, arch, "rope.dimension_count", false, 2, 65536, &hp->n_rot, err, err_len)))
        return st;
    if (hp->n_rot > hp->head_dim_k || hp->n_rot % 2)
        return pk_errf(err, err_len, PK_EFORMAT, "rope.dimension_count %d invalid for head dim %d",
                    hp->n_rot, hp->head_dim_k);
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rms_eps = 1e-5f;
    if ((st = model_arch_float(g, arch, "rope.freq_base", &hp->rope_freq_base, err, err_len)) ||
        (st = model_arch_float(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err, err_len)))
        return st;

    char key[128];
    gguf_str scaling = {0};
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    bool have_type = gguf_get_str(g, key, &scaling) == PK_OK;
    float factor = 1.0f;
    if ((st = model_arch_float(g, arch, "rope.scaling.factor", &factor, err, err_len))) return st;
    hp->rope_mscale = 1.0f;
    if (have_type && gguf_str_eq(scaling, "linear")) {
        hp->rope_freq_scale = 1.0f / factor;
    } else if (have_type && gguf_str_eq(scaling, "yarn") && factor > 1.0f) {
        if ((st = yarn(g, arch, factor, hp, err, err_len))) return st;
    } else if (have_type && !gguf_str_eq(scaling, "none") && factor != 1.0f) {
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "rope scaling type '%.*s' is not supported",
                    (int)scaling.n, scaling.p);
    } else if (!have_type && factor != 1.0f) {
        hp->rope_freq_scale = 1.0f / factor;
    }
    hp->rope_type = hp->arch == MODEL_LLAMA ? MODEL_ROPE_NORM : MODEL_ROPE_NEOX;
    hp->n_layer_attn = hp->n_layer;
    if ((hp->arch == MODEL_QWEN3MOE || hp->arch == MODEL_GPTOSS) && (st = model_moe_hparams(g, arch, hp, err, err_len)))
        return st;
    if (hp->arch == MODEL_GPTOSS) {
        hp->moe_gate = MODEL_GATE_TOPK_SOFTMAX;
        hp->moe_act = MODEL_ACT_SWIGLU_OAI;
        hp->n_ff = hp->n_ff_exp;
        if ((st = model_arch_int(g, arch, "attention.sliding_window", true, 1, 1 << 30, &hp->n_swa, err, err_len)))
            return st;
    }
    if (hp->arch == MODEL_GEMMA4) return model_gemma_hparams(g, arch, hp, err, err_len);
    return hp->hybrid ? model_hybrid_hparams(g, arch, hp, err, err_len) : PK_OK;
}

pk_status model_moe_hparams(const gguf_ctx *g, const char *arch, model_hparams *hp, char *err, size_t err_len)
{
    const int32_t big = 1 << 24;
    pk_status st;
    hp->n_ff_shexp = 0;
    if ((st = model_arch_int(g, arch, "expert_count", true, 2, 4096, &hp->n_expert, err, err_len)) ||
        (st = model_arch_int(g, arch, "expert_used_count", true, 1, 64, &hp->n_expert_used, err, err_len)) ||
        (st = model_arch_int(g, arch, "expert_feed_forward_length", true, 1, big, &hp->n_ff_exp, err, err_len)) ||
        (st = model_arch_int(g, arch, "expert_shared_feed_forward_length", false, 1, big, &hp->n_ff_shexp, err,
                             err_len)))
        return st;
    if (hp->n_expert_used > hp->n_expert)
        return pk_errf(err, err_len, PK_EFORMAT, "expert_used_count %d > expert_count %d", hp->n_expert_used,
                       hp->n_expert);
    return PK_OK;
}

pk_status model_get_w(const gguf_ctx *g, const char *name, int64_t n_cols, int64_t n_rows, int32_t n_mat,
                      bool required, model_w *w, char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        if (!required) return PK_OK;
        return pk_errf(err, err_len, PK_EFORMAT, "tensor '%s' missing", name);
    }
    const tq_traits *tr = tq_get(t->type);
    if (!tr || !tr->supported || t->type == TQ_Q8_K || tr->tile_rows)   /* tiled layouts are ours, not a file's */
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "tensor '%s': type %s is not supported",
                    name, tr ? tr->name : "unknown");
    int64_t rows = n_rows ? n_rows : 1, mats = n_mat > 1 ? n_mat : 1;
    int want_dims = n_mat > 1 ? 3 : n_rows ? 2 : 1;
    bool ok = t->ne[0] == n_cols && t->ne[1] == rows && t->ne[2] == mats && t->ne[3] == 1 &&
              t->n_dims <= MAX(want_dims, 2);
    if (!ok)
        return pk_errf(err, err_len, PK_EFORMAT,
                    "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                    (long long)t->ne[3], (long long)n_cols, (long long)rows, (long long)mats);
    if (n_rows == 0 && t->type != TQ_F32)
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "tensor '%s': norms and biases must be f32", name);
    w->type = t->type;
    w->data = t->data;
    w->n_cols = n_cols;
    w->n_rows = rows * mats;
    w->n_mat = (int32_t)mats;
    return PK_OK;
}

/* Resolves a tensor by name and checks its shape: a matrix of n_rows rows of
 * n_cols values (n_rows = 0: a vector of n_cols).  Missing optional tensors
 * leave *w zeroed. */
static pk_status get_w(const gguf_ctx *g, const char *name, int64_t n_cols, int64_t n_rows,
                       bool required, model_w *w, char *err, size_t err_len)
{
    return model_get_w(g, name, n_cols, n_rows, 1, required, w, err, err_len);
}

static pk_status load_weights(model *m, char *err, size_t err_len)
{
    const gguf_ctx *g = m->gguf;
    if (m->hp.hybrid) return model_hybrid_weights(m, err, err_len);
    if (m->hp.arch == MODEL_GEMMA4) return model_gemma_weights(m, err, err_len);
    const model_hparams *hp = &m->hp;
    int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim_k;
    int64_t kd = (int64_t)hp->n_head_kv * hp->head_dim_k, vd = (int64_t)hp->n_head_kv * hp->head_dim_v;
    int64_t od = (int64_t)hp->n_head * hp->head_dim_v;
    pk_status st;

    if ((st = get_w(g, "token_embd.weight", e, hp->n_vocab, true, &m->tok_embd, err, err_len)) ||
        (st = get_w(g, "output_norm.weight", e, 0, true, &m->out_norm, err, err_len)) ||
        (st = get_w(g, "output.weight", e, hp->n_vocab, false, &m->output, err, err_len)) ||
        (st = get_w(g, "rope_freqs.weight", hp->n_rot / 2, 0, false, &m->rope_freqs, err, err_len)))
        return st;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    /* gpt-oss: every other layer, from the first, has a sliding window (the
     * reference engine's pattern 2) */
    for (int il = 0; il < hp->n_layer; il++)
        m->layers[il] = (model_layer){ .kv_layer = il, .rs_layer = -1, .swa = hp->n_swa > 0 && il % 2 == 0 };
    const bool oss = hp->arch == MODEL_GPTOSS;
    bool qkv_bias = hp->arch == MODEL_QWEN2 || oss, qk_norm = hp->arch == MODEL_QWEN3 || hp->arch == MODEL_QWEN3MOE;
    bool moe = hp->arch == MODEL_QWEN3MOE || oss;
    const int32_t nx = hp->n_expert;
    const struct { size_t off; const char *name; int64_t cols, rows; int32_t n_mat; bool required; } spec[] = {
        { offsetof(model_layer, attn_norm), "attn_norm.weight", e, 0, 1, true },
        { offsetof(model_layer, wq), "attn_q.weight", e, qd, 1, true },
        { offsetof(model_layer, wk), "attn_k.weight", e, kd, 1, true },
        { offsetof(model_layer, wv), "attn_v.weight", e, vd, 1, true },
        { offsetof(model_layer, wo), "attn_output.weight", od, e, 1, true },
        { offsetof(model_layer, bq), "attn_q.bias", qd, 0, 1, qkv_bias },
        { offsetof(model_layer, bk), "attn_k.bias", kd, 0, 1, qkv_bias },
        { offsetof(model_layer, bv), "attn_v.bias", vd, 0, 1, qkv_bias },
        { offsetof(model_layer, q_norm), "attn_q_norm.weight", hp->head_dim_k, 0, 1, qk_norm },
        { offsetof(model_layer, k_norm), "attn_k_norm.weight", hp->head_dim_k, 0, 1, qk_norm },
        { offsetof(model_layer, bo), "attn_output.bias", e, 0, 1, oss },
        { offsetof(model_layer, sinks), "attn_sinks.weight", hp->n_head, 0, 1, oss },
        { offsetof(model_layer, ffn_norm), oss ? "post_attention_norm.weight" : "ffn_norm.weight", e, 0, 1, true },
        { offsetof(model_layer, w_gate), "ffn_gate.weight", e, hp->n_ff, 1, !moe },
        { offsetof(model_layer, w_up), "ffn_up.weight", e, hp->n_ff, 1, !moe },
        { offsetof(model_layer, w_down), "ffn_down.weight", hp->n_ff, e, 1, !moe },
        { offsetof(model_layer, moe_router), "ffn_gate_inp.weight", e, nx, 1, moe },
        { offsetof(model_layer, exp_gate), "ffn_gate_exps.weight", e, hp->n_ff_exp, nx, moe },
        { offsetof(model_layer, exp_up), "ffn_up_exps.weight", e, hp->n_ff_exp, nx, moe },
        { offsetof(model_layer, exp_down), "ffn_down_exps.weight", hp->n_ff_exp, e, nx, moe },
        { offsetof(model_layer, moe_router_b), "ffn_gate_inp.bias", nx, 0, 1, oss },
        { offsetof(model_layer, exp_gate_b), "ffn_gate_exps.bias", hp->n_ff_exp, nx, 1, oss },
        { offsetof(model_layer, exp_up_b), "ffn_up_exps.bias", hp->n_ff_exp, nx, 1, oss },
        { offsetof(model_layer, exp_down_b), "ffn_down_exps.bias", e, nx, 1, oss },
    };
    for (int il = 0; il < hp->n_layer; il++) {
        for (size_t k = 0; k < ARRAY_LEN(spec); k++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].name);
            model_w *w = (model_w *)((char *)&m->layers[il] + spec[k].off);
            if ((st = model_get_w(g, name, spec[k].cols, spec[k].rows, spec[k].n_mat, spec[k].required, w, err,
                                  err_len)))
                return st;
            if (w->data && w->type != TQ_F32 && strstr(spec[k].name, ".bias"))
                return pk_errf(err, err_len, PK_EUNSUPPORTED, "tensor '%s': biases must be f32", name);
        }
    }
    return PK_OK;
}

size_t model_w_bytes(const model_w *w)
{
    return w->data ? tq_row_size(w->type, w->n_cols) * (size_t)w->n_rows : 0;
}

void model_each_weight(model *m, void (*fn)(model_w *w, void *arg), void *arg)
{
    fn(&m->tok_embd, arg);
    fn(&m->out_norm, arg);
    fn(&m->output, arg);
    fn(&m->rope_freqs, arg);
    fn(&m->pl_tok_embd, arg);
    fn(&m->pl_model_proj, arg);
    fn(&m->pl_proj_norm, arg);
    /* a layer's weights up to the MTP block's (loaded, not run by a pass) */
    const size_t n_w = offsetof(model_layer, nextn_eh_proj) / sizeof(model_w);
    for (int il = 0; il < m->hp.n_layer; il++) {
        model_w *ws = &m->layers[il].attn_norm;
        for (size_t k = 0; k < n_w; k++) fn(&ws[k], arg);
    }
}

/* What a decoded token reads of w: all of it, or of stacked experts the
 * share a token routes to (n_expert_used of n_mat). */
static double read_share(const model *m, const model_w *w)
{
    return w->n_mat > 1 ? (double)m->hp.n_expert_used / w->n_mat : 1.0;
}

typedef struct { const model *m; double bytes, macs; } per_token;

static void add_bytes(model_w *w, void *arg)
{
    per_token *t = arg;
    double share = read_share(t->m, w);
    t->bytes += share * (double)model_w_bytes(w);
    if (w->data && w->n_rows > 1) t->macs += share * (double)w->n_rows * (double)w->n_cols;
}

pk_status model_load(const char *path, model_hold hold, model **out, char *err, size_t err_len)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    pk_status st = gguf_open(path, &m->gguf, err, err_len);
    if (st) goto fail;
    if ((st = read_hparams(m->gguf, &m->hp, err, err_len))) goto fail;
    if ((st = tok_load_gguf(m->gguf, &m->vocab, err, err_len))) goto fail;
    m->hp.n_vocab = tok_n_vocab(m->vocab);
    if ((st = load_weights(m, err, err_len))) goto fail;

    /* every weight but the embeddings (Gemma 4's per-layer one too: one
     * row read per token) and the RoPE factors (read per position, not
     * streamed); the layers' multiply-adds leave the logits' product out
     * too (a prompt runs it once) */
    per_token pt = { m, 0, 0 };
    model_each_weight(m, add_bytes, &pt);
    m->weight_bytes = (size_t)pt.bytes - model_w_bytes(&m->tok_embd) - model_w_bytes(&m->rope_freqs) -
                      model_w_bytes(&m->pl_tok_embd);
    m->layer_macs = pt.macs - (double)m->output.n_rows * m->output.n_cols -
                    (double)m->tok_embd.n_rows * m->tok_embd.n_cols -   /* each visited once, tied or not */
                    (double)m->pl_tok_embd.n_rows * m->pl_tok_embd.n_cols;
    const model_layer *L0 = &m->layers[0];
    snprintf(m->desc, sizeof m->desc, "%s %dL %dd %s", model_arch_name(m->hp.arch), m->hp.n_layer, m->hp.n_embd,
             tq_get(L0->wq.data ? L0->wq.type : L0->ssm_qkv.type)->name);
    m->hold = hold;
    if (hold == MODEL_COPY) model_copy_start(m);
    *out = m;
    return PK_OK;
fail:
    model_free(m);
    return st;
}

void model_free(model *m)
{
    if (!m) return;
    model_copy_free(m);
    tok_free(m->vocab);
    gguf_close(m->gguf);
    free(m->layers);
    free(m);
}

const model_hparams *model_get_hparams(const model *m) { return &m->hp; }
const tok_vocab *model_vocab(const model *m) { return m->vocab; }
const gguf_ctx *model_gguf(const model *m) { return m->gguf; }
size_t model_weight_bytes(const model *m) { return m->weight_bytes; }
double model_layer_macs(const model *m) { return m->layer_macs; }
const char *model_desc(const model *m) { return m->desc; }
