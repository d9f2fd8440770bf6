/*
 * probe.cpp - the reference engine's (llama.cpp's) outputs that
 * tests/test_types.c checks polykv against, written as data under
 * tests/data/types/.  Built by scripts/refs/make_refs.sh against a
 * llama.cpp build beside the project, never by the Makefile: polykv does
 * not link llama.cpp.
 *
 *   probe dequant OUT_DIR
 *       For every weight type, 64 blocks' worth of values: half made by
 *       ggml_quantize_chunk from random floats (six shapes of data), half
 *       random bytes with every F16/BF16 scale made finite; each dequantized
 *       by ggml's own ggml_get_type_traits(type)->to_float.  The types whose
 *       quantizer needs an importance matrix get one of all ones.  Writes
 *       OUT_DIR/dq_<TYPE>.bin: the block bytes, then the floats (f32, little
 *       endian); 64 * 256 values for every type.
 *
 *   probe run MODEL.gguf PROMPTS.txt OUT.json N_GEN TSV [KV]
 *       The settings of ../shared/reference/README.md's main files: default
 *       model parameters (mmap, CPU), llama_tokenize with add_special and no
 *       special parsing, a fresh context per prompt with n_ctx = n_batch =
 *       n_ubatch = 2048, one sequence, 2 threads, a K/V cache of type KV
 *       (f32, the default, or f16), flash attention off (with f16 too: its
 *       flash attention sums V in F16, which polykv does not); KV q8_0 or
 *       q4_0 (both K and V) turns flash attention on, as llama.cpp needs for
 *       a quantized V cache; the prompt
 *       decoded as one batch, then N_GEN greedy
 *       steps (argmax over the raw logits, ties to the lower id), one token
 *       per llama_decode.  Per prompt: the tokens, the top 10 at the first
 *       generated position, and per step the chosen id, its logit and the
 *       top-1 minus top-2 gap.  TSV gets every logit of prompt 0's first
 *       generated position (token_id, logit; %.9g); "-" for none.
 *
 *   probe tokenize MODEL.gguf INP OUT
 *       llama.cpp's tokenizer test vectors for MODEL's vocabulary (loaded
 *       vocab only): INP holds texts separated by "\n__ggml_vocab_test__\n"
 *       (llama.cpp's models/ggml-vocab-*.gguf.inp); OUT gets one line per
 *       text (none after a final separator), its ids separated by spaces, from llama_tokenize with neither
 *       special tokens added nor special text parsed, as test-tokenizer-0
 *       reads them (models/ggml-vocab-*.gguf.out).
 */
#include "ggml.h"
#include "llama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* ---- dequant ----------------------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float uniform01(void) { return (next_u32() >> 8) * (1.0f / 16777216.0f); }

static float gauss(void)
{
    float u1 = uniform01() + 1e-7f, u2 = uniform01();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* Offsets of the F16 scale fields in a block, -1 ended. */
static const int *f16_fields(ggml_type t)
{
    /* IQ1_M's f16 is the top nibbles of its 4 scale words: the exponent's
     * top bit is bit 6 of byte 55, the high byte of a "field" at 54 */
    static const int d0[] = { 0, -1 }, dm0[] = { 0, 2, -1 }, q2k[] = { 80, 82, -1 }, q3k[] = { 108, -1 },
                     q6k[] = { 208, -1 }, iq1m[] = { 54, -1 }, none[] = { -1 };
    switch (t) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ1_S: return d0;
    case GGML_TYPE_IQ1_M: return iq1m;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: return dm0;
    case GGML_TYPE_Q2_K: return q2k;
    case GGML_TYPE_Q3_K: return q3k;
    case GGML_TYPE_Q6_K: return q6k;
    default: return none;
    }
}

static int dequant(const char *dir)
{
    static const ggml_type types[] = {
        GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
        GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
        /* appended, so the random stream of the types above is unchanged */
        GGML_TYPE_MXFP4, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS,
        GGML_TYPE_IQ3_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M,
    };
    const std::vector<float> ones(256, 1.0f);
    const int64_t n = 64 * 256, half = n / 2;
    std::vector<float> x(n), y(n);
    for (ggml_type t : types) {
        const ggml_type_traits *tr = ggml_get_type_traits(t);
        size_t bytes = ggml_row_size(t, n), hb = ggml_row_size(t, half);
        std::vector<uint8_t> q(bytes);
        for (int64_t i = 0; i < half; i++) {       /* six shapes, one per 256 values */
            switch ((i / 256) % 6) {
            case 0: x[i] = gauss() * 0.02f; break;
            case 1: x[i] = uniform01() * 2 - 1; break;
            case 2: x[i] = gauss() * (next_u32() % 100 == 0 ? 50.0f : 1.0f); break;
            case 3: x[i] = uniform01() * 3 + 0.5f; break;
            case 4: x[i] = next_u32() % 10 < 3 ? 0.0f : gauss() * 1e-3f; break;
            case 5: x[i] = (float)((int)(next_u32() % 9) - 4) * 0.25f; break;
            }
        }
        ggml_quantize_chunk(t, x.data(), q.data(), 0, half / 256, 256,
                            ggml_quantize_requires_imatrix(t) ? ones.data() : NULL);
        for (size_t b = hb; b < bytes; b++) q[b] = (uint8_t)next_u32();
        if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
            for (size_t b = hb; b < bytes; b += 2) q[b + 1] &= 0xbf;  /* exponent's top bit off */
        } else {
            size_t bs = tr->type_size;
            for (size_t b = hb; b < bytes; b += bs)
                for (const int *o = f16_fields(t); *o >= 0; o++) q[b + *o + 1] &= 0xbf;
        }
        tr->to_float(q.data(), y.data(), n);
        std::string path = std::string(dir) + "/dq_" + ggml_type_name(t) + ".bin";
        FILE *f = fopen(path.c_str(), "wb");
        if (!f || fwrite(q.data(), 1, bytes, f) != bytes || fwrite(y.data(), 4, n, f) != (size_t)n ||
            fclose(f)) {
            fprintf(stderr, "probe: writing %s failed\n", path.c_str());
            return 1;
        }
    }
    return 0;
}

/* ---- run --------------------------------------------------------------- */

static void json_str(FILE *f, const std::string &s)
{
    fputc('"', f);
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Index of the largest logit (ties to the lower id) and the gap to the next. */
static int argmax(const float *l, int V, float *margin)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != best && l[i] > second) second = l[i];
    *margin = l[best] - second;
    return best;
}

static bool flash(ggml_type kv) { return kv != GGML_TYPE_F32 && kv != GGML_TYPE_F16; }

static int run(const char *mpath, const char *ppath, const char *opath, int n_gen, const char *tsv,
               ggml_type kv)
{
    llama_model *m = llama_model_load_from_file(mpath, llama_model_default_params());
    if (!m) return 1;
    const llama_vocab *v = llama_model_get_vocab(m);
    const int V = llama_vocab_n_tokens(v);
    FILE *pf = fopen(ppath, "r"), *out = fopen(opath, "w");
    if (!pf || !out) return 1;
    fprintf(out, "{\"model\": ");
    json_str(out, strrchr(mpath, '/') ? strrchr(mpath, '/') + 1 : mpath);
    fprintf(out, ", \"n_vocab\": %d, \"settings\": {\"n_ctx\": 2048, \"n_batch\": 2048, \"n_ubatch\": 2048, "
                 "\"kv_type\": \"%s\", \"flash_attn\": %d, \"threads\": 2}, \"results\": [", V,
            ggml_type_name(kv), flash(kv));
    static char line[65536];
    std::vector<llama_token> tok(4096);
    for (int p = 0; fgets(line, sizeof line, pf); p++) {
        line[strcspn(line, "\n")] = 0;
        int n = llama_tokenize(v, line, (int)strlen(line), tok.data(), (int)tok.size(), true, false);
        if (n < 1) return 1;
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = cp.n_batch = cp.n_ubatch = 2048;
        cp.n_seq_max = 1;
        cp.n_threads = cp.n_threads_batch = 2;
        cp.type_k = cp.type_v = kv;
        cp.flash_attn_type = flash(kv) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        llama_context *ctx = llama_init_from_model(m, cp);
        if (!ctx || llama_decode(ctx, llama_batch_get_one(tok.data(), n)) != 0) return 1;
        const float *l = llama_get_logits_ith(ctx, -1);
        if (p == 0 && strcmp(tsv, "-")) {
            FILE *tf = fopen(tsv, "w");
            if (!tf) return 1;
            fprintf(tf, "token_id\tlogit\n");
            for (int i = 0; i < V; i++) fprintf(tf, "%d\t%.9g\n", i, l[i]);
            fclose(tf);
        }
        fprintf(out, "%s\n{\"prompt_index\": %d, \"prompt\": ", p ? "," : "", p);
        json_str(out, line);
        fprintf(out, ", \"n_prompt_tokens\": %d, \"prompt_tokens\": [", n);
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", tok[i]);
        std::vector<int> order(V);
        for (int i = 0; i < V; i++) order[i] = i;
        std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                          [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        fprintf(out, "],\n \"first_position_top10\": [");
        for (int i = 0; i < 10; i++)
            fprintf(out, "%s{\"id\": %d, \"logit\": %.9g}", i ? ", " : "", order[i], l[order[i]]);
        std::vector<int> ids;
        std::vector<float> logit, margin;
        for (int s = 0; s < n_gen; s++) {
            float mg;
            llama_token t = argmax(l, V, &mg);
            ids.push_back(t);
            logit.push_back(l[t]);
            margin.push_back(mg);
            if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
            l = llama_get_logits_ith(ctx, -1);
        }
        fprintf(out, "],\n \"greedy_tokens\": [");
        for (int s = 0; s < n_gen; s++) fprintf(out, "%s%d", s ? ", " : "", ids[s]);
        fprintf(out, "],\n \"greedy_logits\": [");
        for (int s = 0; s < n_gen; s++) fprintf(out, "%s%.9g", s ? ", " : "", logit[s]);
        fprintf(out, "],\n \"greedy_margin_top1_minus_top2\": [");
        for (int s = 0; s < n_gen; s++) fprintf(out, "%s%.9g", s ? ", " : "", margin[s]);
        fprintf(out, "]}");
        llama_free(ctx);
    }
    fprintf(out, "\n]}\n");
    fclose(pf);
    fclose(out);
    llama_model_free(m);
    return 0;
}

/* ---- tokenize ---------------------------------------------------------- */

static int tokenize(const char *mpath, const char *ipath, const char *opath)
{
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model *m = llama_model_load_from_file(mpath, mp);
    if (!m) return 1;
    const llama_vocab *v = llama_model_get_vocab(m);
    FILE *in = fopen(ipath, "rb"), *out = fopen(opath, "w");
    if (!in || !out) return 1;
    std::string all;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0) all.append(buf, got);
    fclose(in);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<llama_token> tok;
    for (size_t at = 0;;) {
        size_t end = all.find(sep, at);
        std::string text = all.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (end == std::string::npos && text.empty() && at > 0) break;   /* INP ends with the separator */
        tok.resize(text.size() + 16);
        int n = llama_tokenize(v, text.data(), (int)text.size(), tok.data(), (int)tok.size(), false, false);
        if (n < 0) return 1;
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? " " : "", tok[i]);
        fputc('\n', out);
        if (end == std::string::npos) break;
        at = end + sep.size();
    }
    fclose(out);
    llama_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    llama_log_set(quiet, NULL);
    if (argc == 3 && !strcmp(argv[1], "dequant")) return dequant(argv[2]);
    if ((argc == 7 || argc == 8) && !strcmp(argv[1], "run")) {
        llama_backend_init();
        const char *kn = argc == 8 ? argv[7] : "f32";
        ggml_type kv = !strcmp(kn, "f16") ? GGML_TYPE_F16 : !strcmp(kn, "q8_0") ? GGML_TYPE_Q8_0
                     : !strcmp(kn, "q4_0") ? GGML_TYPE_Q4_0 : GGML_TYPE_F32;
        return run(argv[2], argv[3], argv[4], atoi(argv[5]), argv[6], kv);
    }
    if (argc == 5 && !strcmp(argv[1], "tokenize")) {
        llama_backend_init();
        return tokenize(argv[2], argv[3], argv[4]);
    }
    fprintf(stderr, "usage: probe dequant OUT_DIR\n"
                    "       probe tokenize MODEL.gguf INP OUT\n"
                    "       probe run MODEL.gguf PROMPTS.txt OUT.json N_GEN FIRSTPOS_P0.tsv|- [f32|f16|q8_0|q4_0]\n");
    return 2;
}
