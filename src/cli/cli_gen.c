/*
 * cli_gen.c - `polykv gen-model`: a deterministic random-weight model with a
 * real vocabulary, for tests, benchmarks and the demo.
 *
 * The tokenizer.* keys are copied from a vocabulary GGUF; without --vocab
 * the model gets a minimal SentencePiece vocabulary of the 256 byte tokens
 * plus <unk>, <s>, </s> (enough to run anything, on any machine).  Weights are drawn
 * from a seeded generator (each tensor from its own stream, so one tensor's
 * values do not depend on the others' sizes) with the scales the reference
 * models use: embeddings N(0, 0.02); Q and K N(0, 1.5/sqrt(n_embd)); other
 * matrices N(0, 1.5/sqrt(fan_in)); norms 1 + 0.1 N(0,1); qwen2's biases
 * N(0, 0.1).  Matrices are quantized to --type the way llama-quantize picks
 * types (q4_k_m: Q6_K for the output and for attn_v / ffn_down of the
 * "more bits" layers; a 256-block type falls back to Q5_0 / Q5_1 / Q8_0 when
 * a row is not a multiple of 256).  Norms and biases stay F32.
 *
 * The Qwen3.5 hybrids (qwen35, qwen35moe) are cli_gen_hybrid.c's and Gemma 4
 * (gemma4) cli_gen_gemma.c's: the options parsed here, the keys and tensors
 * written there.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_gen.h"

static const gen_type gen_types[] = {
    { "f32", TQ_F32, false, 0, 0 },   { "f16", TQ_F16, false, 1, 0 },   { "bf16", TQ_BF16, false, 32, 0 },
    { "q8_0", TQ_Q8_0, false, 7, 0 }, { "q4_0", TQ_Q4_0, false, 2, 0 }, { "q4_1", TQ_Q4_1, false, 3, 0 },
    { "q5_0", TQ_Q5_0, false, 8, 0 }, { "q5_1", TQ_Q5_1, false, 9, 0 }, { "q4_k", TQ_Q4_K, true, 15, 0 },
    { "q4_k_m", TQ_Q4_K, true, 15, 0 }, { "q4_k_s", TQ_Q4_K, false, 14, 0 }, { "q5_k", TQ_Q5_K, false, 16, 0 },
    { "q6_k", TQ_Q6_K, false, 18, 0 }, { "q2_k", TQ_Q2_K, false, 10, 0 }, { "q3_k", TQ_Q3_K, false, 11, 0 },
    { "iq4_nl", TQ_IQ4_NL, false, 25, 0 }, { "iq4_xs", TQ_IQ4_XS, false, 30, 0 },
    { "mxfp4", TQ_MXFP4, false, 38, 0 },   /* every matrix, as llama-quantize --pure MXFP4_MOE */
    /* experts in MXFP4, the rest Q8_0: the shape of gpt-oss's downloads */
    { "mxfp4_moe", TQ_Q8_0, false, 38, TQ_MXFP4 },
};

/* splitmix64: a fresh stream per tensor from (seed, tensor index). */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gen_fill_normal(float *x, size_t n, uint64_t seed, float mean, float std)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((mix64(&s) >> 11) + 1.0) * 0x1.0p-53, u2 = (mix64(&s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = mean + std * (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = mean + std * (float)(r * sin(2 * M_PI * u2));
    }
}

/* The type llama-quantize would give a matrix of n_cols columns. */
static tq_type fit_type(tq_type t, long n_cols)
{
    if (n_cols % tq_get(t)->blck_size == 0) return t;
    switch (t) {
    case TQ_Q2_K:
    case TQ_Q3_K: t = TQ_Q4_0; break;
    case TQ_IQ4_XS: t = TQ_IQ4_NL; break;
    case TQ_Q4_K: t = TQ_Q5_0; break;
    case TQ_Q5_K: t = TQ_Q5_1; break;
    case TQ_Q6_K: t = TQ_Q8_0; break;
    default: break;
    }
    return n_cols % tq_get(t)->blck_size == 0 ? t : TQ_F16;
}

const char *gen_akey(char *buf, const char *arch, const char *suffix)
{
    snprintf(buf, 128, "%s.%s", arch, suffix);
    return buf;
}

bool gen_more_bits(int il, int n)
{
    return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
}

int gen_add_floats(gguf_writer *w, const char *name, tq_type type, int n_dims, const int64_t *ne, const float *x)
{
    size_t n_rows = 1;
    for (int d = 1; d < n_dims; d++) n_rows *= (size_t)ne[d];
    type = n_dims > 1 ? fit_type(type, (long)ne[0]) : TQ_F32;
    size_t row = tq_row_size(type, ne[0]);
    char *q = malloc(row * n_rows);
    if (!q) return -1;
    for (size_t r = 0; r < n_rows; r++) tq_quantize_row(type, x + r * (size_t)ne[0], q + r * row, ne[0]);
    pk_status st = gguf_add_tensor(w, name, type, n_dims, ne, q, row * n_rows);
    free(q);
    return st == PK_OK ? 0 : -1;
}

int gen_add_normal(gguf_writer *w, const char *name, tq_type type, int n_dims, const int64_t *ne, uint64_t seed,
                   float mean, float std)
{
    size_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    float *x = malloc(n * sizeof *x);
    if (!x) return -1;
    gen_fill_normal(x, n, seed, mean, std);
    int rc = gen_add_floats(w, name, type, n_dims, ne, x);
    free(x);
    return rc;
}

/* A matrix of n_rows rows of n_cols (a vector when n_rows is 1). */
static int add_tensor(gguf_writer *w, const char *name, tq_type type, long n_cols, long n_rows,
                      uint64_t seed, float mean, float std)
{
    int64_t ne[2] = { n_cols, n_rows };
    return gen_add_normal(w, name, type, n_rows > 1 ? 2 : 1, ne, seed, mean, std);
}

/* <unk>, <s>, </s> and the 256 byte tokens, as a SentencePiece vocabulary. */
static void add_byte_vocab(gguf_writer *w)
{
    static char names[256][7];
    gguf_str tok[259];
    float score[259];
    int32_t type[259];
    tok[0] = (gguf_str){ "<unk>", 5 };
    tok[1] = (gguf_str){ "<s>", 3 };
    tok[2] = (gguf_str){ "</s>", 4 };
    type[0] = 2;
    type[1] = type[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tok[3 + b] = (gguf_str){ names[b], 6 };
        type[3 + b] = 6;
    }
    for (int i = 0; i < 259; i++) score[i] = 0.0f;
    gguf_add_str(w, "tokenizer.ggml.model", "llama", 5);
    gguf_add_arr_str(w, "tokenizer.ggml.tokens", tok, 259);
    gguf_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, score, 259);
    gguf_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type, 259);
    gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
}

static void usage(void)
{
    fprintf(stderr,
        "usage: polykv gen-model --arch llama|qwen2|qwen3|qwen3moe|gpt-oss|gemma4|qwen35|qwen35moe\n"
        "         [--vocab VOCAB.gguf]\n"
        "         --type T\n"
        "         --seed S\n"
        "         -o OUT.gguf\n"
        "  shape: --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 512 [--head-dim D]\n"
        "         [--ctx 4096] [--rope-base B] [--eps E] [--untied]\n"
        "         [--pass-through-from L]  layers L.. add nothing (zero output projections): a\n"
        "                                  one of L layers from the same seed predicts it exactly\n"
        "  qwen35, qwen35moe: [--mtp-agree]  an MTP block that adds nothing to the token's normed\n"
        "         embedding: with --pass-through-from 0 it predicts exactly what the trunk does\n"
        "  qwen35, qwen35moe (--n-layer: the trunk; one MTP block follows it):\n"
        "         [--attn-every 4] [--ssm-groups 2] [--ssm-heads 4] [--ssm-state 64] [--ssm-conv 4]\n"
        "  qwen35moe: [--n-expert 8] [--n-expert-used 2] [--n-ff-exp N_FF/4] [--n-ff-shexp N_FF/2]\n"
        "  qwen3moe: [--n-expert 8] [--n-expert-used 2] [--n-ff-exp N_FF/4] (--n-ff: the dense size the\n"
        "         file records, no dense FFN is written)\n"
        "  gpt-oss: qwen3moe's expert options, [--swa 128] (the even layers' window), [--yarn 32]\n"
        "         (YaRN's factor over --ctx; 0: none); untied, biases, sinks\n"
        "  gemma4: [--swa 128] [--swa-every 6] (every 6th layer global) [--head-dim-global 2xD]\n"
        "         [--n-head-kv-global N] [--softcap 30]; the 31B's layout: tied, no attn_v on global layers\n"
        "         E2B / E4B's: [--per-layer W] (per-layer embeddings W wide, attn_v on every layer)\n"
        "         [--shared-kv N] (the last N layers reuse K/V) [--double-wide] (their FFN 2 x --n-ff)\n"
        "         the 26B-A4B's: --n-expert N [--n-expert-used 2] [--n-ff-exp N_FF/4] (experts on every\n"
        "         layer beside the dense FFN)\n"
        "  types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k (= q4_k_m mix) q4_k_s q5_k q6_k\n"
        "         q2_k q3_k (= q3_k_s) iq4_nl iq4_xs mxfp4 (every matrix) mxfp4_moe (experts mxfp4, the\n"
        "         rest q8_0)\n");
}

static void llama_keys(gguf_writer *w, const gen_shape *sh)
{
    char key[128];
    if (!strcmp(sh->arch, "gpt-oss")) {
        gguf_add_u32(w, gen_akey(key, sh->arch, "attention.sliding_window"), (uint32_t)sh->n_swa);
        if (sh->yarn) {
            gguf_add_str(w, gen_akey(key, sh->arch, "rope.scaling.type"), "yarn", 4);
            gguf_add_f32(w, gen_akey(key, sh->arch, "rope.scaling.factor"), (float)sh->yarn);
            gguf_add_u32(w, gen_akey(key, sh->arch, "rope.scaling.original_context_length"), (uint32_t)sh->n_ctx);
        }
    }
    if (!strcmp(sh->arch, "qwen3moe") || !strcmp(sh->arch, "gpt-oss")) {
        gguf_add_u32(w, gen_akey(key, sh->arch, "expert_count"), (uint32_t)sh->n_expert);
        gguf_add_u32(w, gen_akey(key, sh->arch, "expert_used_count"), (uint32_t)sh->n_expert_used);
        gguf_add_u32(w, gen_akey(key, sh->arch, "expert_feed_forward_length"),
                     (uint32_t)(sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff / 4));
    }
    gguf_add_u32(w, gen_akey(key, sh->arch, "context_length"), (uint32_t)sh->n_ctx);
    gguf_add_u32(w, gen_akey(key, sh->arch, "embedding_length"), (uint32_t)sh->n_embd);
    gguf_add_u32(w, gen_akey(key, sh->arch, "block_count"), (uint32_t)sh->n_layer);
    gguf_add_u32(w, gen_akey(key, sh->arch, "feed_forward_length"), (uint32_t)sh->n_ff);
    gguf_add_u32(w, gen_akey(key, sh->arch, "attention.head_count"), (uint32_t)sh->n_head);
    gguf_add_u32(w, gen_akey(key, sh->arch, "attention.head_count_kv"), (uint32_t)sh->n_head_kv);
    gguf_add_f32(w, gen_akey(key, sh->arch, "rope.freq_base"), (float)sh->rope_base);
    gguf_add_f32(w, gen_akey(key, sh->arch, "attention.layer_norm_rms_epsilon"), (float)sh->eps);
    if (sh->head_dim) {
        gguf_add_u32(w, gen_akey(key, sh->arch, "attention.key_length"), (uint32_t)sh->head_dim);
        gguf_add_u32(w, gen_akey(key, sh->arch, "attention.value_length"), (uint32_t)sh->head_dim);
    }
}

static int llama_tensors(gguf_writer *w, const gen_shape *sh, const gen_type *gt, long n_vocab, uint64_t ts)
{
    const bool oss = !strcmp(sh->arch, "gpt-oss"), qwen2 = !strcmp(sh->arch, "qwen2");
    const bool moe = oss || !strcmp(sh->arch, "qwen3moe");
    const bool qwen3 = !strcmp(sh->arch, "qwen3moe") || !strcmp(sh->arch, "qwen3");
    const long nx = moe ? sh->n_expert : 1, ffx = sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff / 4;
    const long hd = sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
    tq_type t = gt->type, out_t = gt->k_mix ? TQ_Q6_K : t, te = gt->exp_type ? gt->exp_type : t;
    float s_e = 1.5f / sqrtf((float)sh->n_embd), s_o = 1.5f / sqrtf((float)(sh->n_head * hd));
    float s_f = 1.5f / sqrtf((float)sh->n_ff), s_qk = qwen3 ? 0.02f : s_e, s_x = 1.5f / sqrtf((float)ffx);
    char name[128];
    int rc = 0;
    rc |= add_tensor(w, "token_embd.weight", sh->tied ? out_t : t, sh->n_embd, n_vocab, ts++, 0, 0.02f);
    rc |= add_tensor(w, "output_norm.weight", TQ_F32, sh->n_embd, 1, ts++, 1.0f, 0.1f);
    if (!sh->tied) rc |= add_tensor(w, "output.weight", out_t, sh->n_embd, n_vocab, ts++, 0, s_e);
    for (int il = 0; il < sh->n_layer && !rc; il++) {
        tq_type tv = gt->k_mix && gen_more_bits(il, (int)sh->n_layer) ? TQ_Q6_K : t;
        bool silent = sh->pass_from >= 0 && il >= sh->pass_from;
        struct { const char *n; tq_type t; long cols, rows; float mean, std; long mats; } L[] = {
            { "attn_norm.weight", TQ_F32, sh->n_embd, 1, 1.0f, 0.1f, 1 },
            { "attn_q.weight", t, sh->n_embd, sh->n_head * hd, 0, s_qk, 1 },
            { "attn_k.weight", t, sh->n_embd, sh->n_head_kv * hd, 0, s_qk, 1 },
            { "attn_v.weight", tv, sh->n_embd, sh->n_head_kv * hd, 0, s_e, 1 },
            { "attn_output.weight", t, sh->n_head * hd, sh->n_embd, 0, silent ? 0 : s_o, 1 },
            { oss ? "post_attention_norm.weight" : "ffn_norm.weight", TQ_F32, sh->n_embd, 1, 1.0f, 0.1f, 1 },
            { moe ? NULL : "ffn_gate.weight", t, sh->n_embd, sh->n_ff, 0, s_e, 1 },
            { moe ? NULL : "ffn_up.weight", t, sh->n_embd, sh->n_ff, 0, s_e, 1 },
            { moe ? NULL : "ffn_down.weight", tv, sh->n_ff, sh->n_embd, 0, silent ? 0 : s_f, 1 },
            { qwen2 || oss ? "attn_q.bias" : NULL, TQ_F32, sh->n_head * hd, 1, 0, 0.1f, 1 },
            { qwen2 || oss ? "attn_k.bias" : NULL, TQ_F32, sh->n_head_kv * hd, 1, 0, 0.1f, 1 },
            { qwen2 || oss ? "attn_v.bias" : NULL, TQ_F32, sh->n_head_kv * hd, 1, 0, 0.1f, 1 },
            { qwen3 ? "attn_q_norm.weight" : NULL, TQ_F32, hd, 1, 1.0f, 0.1f, 1 },
            { qwen3 ? "attn_k_norm.weight" : NULL, TQ_F32, hd, 1, 1.0f, 0.1f, 1 },
            /* the experts last, each stream taken only when written: the
             * other architectures' tensors keep the values they had */
            { moe ? "ffn_gate_inp.weight" : NULL, TQ_F32, sh->n_embd, nx, 0, s_e, 1 },
            { moe ? "ffn_gate_exps.weight" : NULL, te, sh->n_embd, ffx, 0, s_e, nx },
            { moe ? "ffn_up_exps.weight" : NULL, te, sh->n_embd, ffx, 0, s_e, nx },
            { moe ? "ffn_down_exps.weight" : NULL, gt->exp_type ? te : tv, ffx, sh->n_embd, 0, silent ? 0 : s_x, nx },
            /* gpt-oss's biases and sinks (bias rows per expert: 2-D) */
            { oss ? "attn_output.bias" : NULL, TQ_F32, sh->n_embd, 1, 0, silent ? 0 : 0.1f, 1 },
            { oss ? "attn_sinks.weight" : NULL, TQ_F32, sh->n_head, 1, 0, 1.0f, 1 },
            { oss ? "ffn_gate_inp.bias" : NULL, TQ_F32, nx, 1, 0, 0.1f, 1 },
            { oss ? "ffn_gate_exps.bias" : NULL, TQ_F32, ffx, nx, 0, 0.1f, 1 },
            { oss ? "ffn_up_exps.bias" : NULL, TQ_F32, ffx, nx, 0, 0.1f, 1 },
            { oss ? "ffn_down_exps.bias" : NULL, TQ_F32, sh->n_embd, nx, 0, silent ? 0 : 0.1f, 1 },
        };
        const size_t n_always = ARRAY_LEN(L) - 10;
        for (size_t k = 0; k < ARRAY_LEN(L); k++) {
            if (!L[k].n && k >= n_always) continue;
            uint64_t s = ts++;
            if (!L[k].n) continue;
            snprintf(name, sizeof name, "blk.%d.%s", il, L[k].n);
            const int64_t ne[3] = { L[k].cols, L[k].rows, L[k].mats };
            rc |= L[k].mats > 1 ? gen_add_normal(w, name, L[k].t, 3, ne, s, L[k].mean, L[k].std)
                                : add_tensor(w, name, L[k].t, L[k].cols, L[k].rows, s, L[k].mean, L[k].std);
        }
    }
    return rc;
}

int cli_gen_model(int argc, char **argv)
{
    gen_shape sh = { .arch = NULL, .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                     .n_ff = 512, .n_ctx = 4096, .ssm_state = 64, .ssm_groups = 2, .ssm_heads = 4,
                     .ssm_conv = 4, .attn_every = 4, .n_expert = 8, .n_expert_used = 2,
                     .rope_base = 0, .eps = 0, .tied = true, .pass_from = -1, .n_swa = 128, .yarn = 32,
                     .swa_every = 6, .softcap = 30 };
    const char *vocab = NULL, *outp = NULL, *tname = "f16";
    long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--untied")) { sh.tied = false; continue; }
        if (!strcmp(a, "--mtp-agree")) { sh.mtp_agree = true; continue; }
        if (!strcmp(a, "--double-wide")) { sh.double_wide = true; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!(v = cli_arg(argc, argv, &i))) return 2;
        static const struct { const char *opt; size_t off; } longs[] = {
            { "--n-embd", offsetof(gen_shape, n_embd) },        { "--n-layer", offsetof(gen_shape, n_layer) },
            { "--n-head", offsetof(gen_shape, n_head) },        { "--n-head-kv", offsetof(gen_shape, n_head_kv) },
            { "--n-ff", offsetof(gen_shape, n_ff) },            { "--head-dim", offsetof(gen_shape, head_dim) },
            { "--ctx", offsetof(gen_shape, n_ctx) },            { "--attn-every", offsetof(gen_shape, attn_every) },
            { "--ssm-groups", offsetof(gen_shape, ssm_groups) }, { "--ssm-heads", offsetof(gen_shape, ssm_heads) },
            { "--ssm-state", offsetof(gen_shape, ssm_state) },  { "--ssm-conv", offsetof(gen_shape, ssm_conv) },
            { "--n-expert", offsetof(gen_shape, n_expert) },
            { "--n-expert-used", offsetof(gen_shape, n_expert_used) },
            { "--n-ff-exp", offsetof(gen_shape, n_ff_exp) },    { "--n-ff-shexp", offsetof(gen_shape, n_ff_shexp) },
            { "--pass-through-from", offsetof(gen_shape, pass_from) },
            { "--swa", offsetof(gen_shape, n_swa) },            { "--yarn", offsetof(gen_shape, yarn) },
            { "--swa-every", offsetof(gen_shape, swa_every) },
            { "--head-dim-global", offsetof(gen_shape, head_dim_global) },
            { "--n-head-kv-global", offsetof(gen_shape, n_head_kv_global) },
            { "--per-layer", offsetof(gen_shape, per_layer) },  { "--shared-kv", offsetof(gen_shape, shared_kv) },
        };
        long *lp = !strcmp(a, "--seed") ? &seed : NULL;
        for (size_t k = 0; k < ARRAY_LEN(longs) && !lp; k++)
            if (!strcmp(a, longs[k].opt)) lp = (long *)((char *)&sh + longs[k].off);
        if (!strcmp(a, "--n-expert")) sh.experts = true;
        if (lp) { if (!cli_int(a, v, 0, 1L << 30, lp)) return 2; }
        else if (!strcmp(a, "--arch")) sh.arch = v;
        else if (!strcmp(a, "--vocab")) vocab = v;
        else if (!strcmp(a, "--type")) tname = v;
        else if (!strcmp(a, "-o")) outp = v;
        else if (!strcmp(a, "--rope-base")) { if (!cli_float(a, v, &sh.rope_base)) return 2; }
        else if (!strcmp(a, "--eps")) { if (!cli_float(a, v, &sh.eps)) return 2; }
        else if (!strcmp(a, "--softcap")) { if (!cli_float(a, v, &sh.softcap)) return 2; }
        else { fprintf(stderr, "polykv gen-model: unknown option %s\n", a); return 2; }
    }
    const gen_type *gt = NULL;
    for (size_t i = 0; i < ARRAY_LEN(gen_types); i++)
        if (!strcmp(gen_types[i].name, tname)) gt = &gen_types[i];
    if (!sh.arch || !outp || !gt) {
        if (!gt) fprintf(stderr, "polykv gen-model: unknown type '%s'\n", tname);
        usage();
        return 2;
    }
    bool llama = !strcmp(sh.arch, "llama"), qwen2 = !strcmp(sh.arch, "qwen2");
    bool qwen3 = !strcmp(sh.arch, "qwen3") || !strcmp(sh.arch, "qwen3moe"), oss = !strcmp(sh.arch, "gpt-oss");
    bool hybrid = !strcmp(sh.arch, "qwen35") || !strcmp(sh.arch, "qwen35moe"), gemma = !strcmp(sh.arch, "gemma4");
    if (!llama && !qwen2 && !qwen3 && !hybrid && !oss && !gemma) {
        fprintf(stderr, "polykv gen-model: unknown arch '%s'\n", sh.arch);
        return 2;
    }
    if (sh.n_embd < 1 || sh.n_layer < 1 || sh.n_head < 1 || sh.n_head_kv < 1 || sh.n_ff < 1 ||
        sh.n_head % sh.n_head_kv || (!sh.head_dim && sh.n_embd % sh.n_head)) {
        fprintf(stderr, "polykv gen-model: inconsistent shape\n");
        return 2;
    }
    if (hybrid && !gen_hybrid_check(&sh)) return 2;
    if (gemma && !gen_gemma_check(&sh)) return 2;
    if ((!strcmp(sh.arch, "qwen3moe") || oss || (gemma && sh.experts)) &&
        (sh.n_expert < 2 || sh.n_expert_used < 1 || sh.n_expert_used > sh.n_expert)) {
        fprintf(stderr, "polykv gen-model: %s needs --n-expert >= 2 and 1 <= --n-expert-used <= --n-expert\n",
                sh.arch);
        return 2;
    }
    if (oss) {
        if (sh.n_swa < 1) {
            fprintf(stderr, "polykv gen-model: gpt-oss needs --swa >= 1\n");
            return 2;
        }
        sh.tied = false;   /* the reference engine requires gpt-oss's output.weight */
    }
    if (!hybrid && sh.mtp_agree) {
        fprintf(stderr, "polykv gen-model: --mtp-agree is for qwen35 and qwen35moe (their MTP block)\n");
        return 2;
    }
    if (!sh.rope_base) sh.rope_base = llama ? 500000.0 : hybrid ? 10000000.0 : oss ? 150000.0 : 1000000.0;
    if (!sh.eps) sh.eps = llama ? 1e-5 : 1e-6;

    char err[512] = "";
    gguf_ctx *vg = NULL;
    uint64_t n_vocab = 259;
    if (vocab) {
        gguf_type et;
        if (gguf_open(vocab, &vg, err, sizeof err)) {
            fprintf(stderr, "polykv: %s: %s\n", vocab, err);
            return 1;
        }
        if (gguf_get_arr(vg, "tokenizer.ggml.tokens", &et, &n_vocab) || et != GGUF_TYPE_STRING || !n_vocab) {
            fprintf(stderr, "polykv: %s has no tokenizer.ggml.tokens\n", vocab);
            gguf_close(vg);
            return 1;
        }
    }
    gguf_writer *w = gguf_writer_new();
    ASSERT(w);
    gguf_add_str(w, "general.architecture", sh.arch, strlen(sh.arch));
    gguf_add_str(w, "general.name", "polykv random-weight model", 26);
    gguf_add_u32(w, "general.file_type", (uint32_t)gt->ftype);
    gguf_add_u32(w, "general.quantization_version", 2);
    if (hybrid) gen_hybrid_keys(w, &sh);
    else if (gemma) gen_gemma_keys(w, &sh);
    else llama_keys(w, &sh);
    if (vg) {
        for (int64_t i = 0; i < gguf_n_kv(vg); i++) {
            gguf_str k = gguf_key(vg, i);
            if (k.n > 10 && !memcmp(k.p, "tokenizer.", 10)) gguf_add_kv_from(w, vg, i);
        }
    } else {
        add_byte_vocab(w);
    }
    uint64_t ts = (uint64_t)seed * 1000003u;
    int rc = hybrid ? gen_hybrid_tensors(w, &sh, gt, (long)n_vocab, ts)
             : gemma ? gen_gemma_tensors(w, &sh, gt, (long)n_vocab, ts)
                     : llama_tensors(w, &sh, gt, (long)n_vocab, ts);
    pk_status st = rc ? PK_ENOMEM : gguf_write_file(w, outp);
    if (st) fprintf(stderr, "polykv gen-model: writing %s failed: %s\n", outp, pk_status_str(st));
    gguf_writer_free(w);
    gguf_close(vg);
    return st ? 1 : 0;
}
