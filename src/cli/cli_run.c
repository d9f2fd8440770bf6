/*
 * cli_run.c - `polykv run`: one generation from a prompt, streamed to stdout
 * or reported as one JSON object (--json).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/utf8.h"
#include "../model/model.h"
#include "../sample/smp.h"
#include "../tensor/tq.h"
#include "cli.h"

static void usage(void)
{
    fprintf(stderr,
        "usage: polykv run -m MODEL -p PROMPT [options]\n"
        "  -n N             tokens to generate (default 128)\n"
        "  --temp T         temperature, 0 = greedy (default 0.8)\n"
        "  --top-k K --top-p P --min-p P --repeat-penalty R\n"
        "  --seed S         sampler seed (default random)\n"
        "  -t N             threads (default: all CPUs)\n"
        "  -c N             context cells (default: prompt + n)\n"
        "  -ctk T, -ctv T   K and V cache types (default f16; serve's choices); --kv-type T both\n"
        "  --mmap           map the model file instead of reading it into huge pages\n"
        "  --chat           send the prompt as a user turn through the model's chat template\n"
        "  --chat-template NAME  use this template (chatml, llama3, llama2, llama2-sys, mistral, command-r)\n"
        "  --json           print one JSON object instead of streaming text\n");
}

typedef struct run_opts {
    const char *model, *prompt, *chat_template;
    bool chat;
    long n_predict, n_threads, n_ctx;
    smp_params sp;
    tq_type type_k, type_v;
    bool json, mmap;
} run_opts;

static bool parse(int argc, char **argv, run_opts *o)
{
    o->n_predict = 128;
    o->n_threads = cli_default_threads();
    o->type_k = o->type_v = TQ_F16;
    o->sp = smp_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "--chat")) { o->chat = true; continue; }
        if (!strcmp(a, "--mmap") || !strcmp(a, "--no-mmap")) { o->mmap = !strcmp(a, "--mmap"); continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); exit(0); }
        if (!(v = cli_arg(argc, argv, &i))) return false;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--chat-template")) { o->chat_template = v; o->chat = true; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_predict)) return false; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!cli_int(a, v, 1, 1024, &o->n_threads)) return false; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_ctx)) return false; }
        else if (!strcmp(a, "--seed")) { long s; if (!cli_int(a, v, -1, 0xffffffffL, &s)) return false; o->sp.seed = (uint64_t)s; }
        else if (!strcmp(a, "--top-k")) { long k; if (!cli_int(a, v, 0, 1 << 30, &k)) return false; o->sp.top_k = (int32_t)k; }
        else if (!strcmp(a, "--temp")) { if (!cli_float(a, v, &d)) return false; o->sp.temp = (float)d; }
        else if (!strcmp(a, "--top-p")) { if (!cli_float(a, v, &d)) return false; o->sp.top_p = (float)d; }
        else if (!strcmp(a, "--min-p")) { if (!cli_float(a, v, &d)) return false; o->sp.min_p = (float)d; }
        else if (!strcmp(a, "--repeat-penalty")) { if (!cli_float(a, v, &d)) return false; o->sp.repeat_penalty = (float)d; }
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) { if (!cli_kv_type(a, v, &o->type_k)) return false; }
        else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) { if (!cli_kv_type(a, v, &o->type_v)) return false; }
        else if (!strcmp(a, "--kv-type")) {
            if (!cli_kv_type(a, v, &o->type_k)) return false;
            o->type_v = o->type_k;
        } else {
            fprintf(stderr, "polykv run: unknown option %s\n", a);
            return false;
        }
    }
    if (!o->model || !o->prompt) {
        usage();
        return false;
    }
    return true;
}

/* Appends the bytes of token id to acc; streams the complete UTF-8 part when
 * stream is set. */
static void emit(const tok_vocab *v, int32_t id, char **acc, size_t *len, size_t *cap,
                 size_t *flushed, bool stream)
{
    char piece[256];
    int32_t n = tok_piece(v, id, piece, sizeof piece, false);
    if (n < 0) n = 0;
    if (*len + (size_t)n + 1 > *cap) {
        *cap = (*cap + (size_t)n + 1) * 2;
        *acc = realloc(*acc, *cap);
        ASSERT(*acc);
    }
    memcpy(*acc + *len, piece, (size_t)n);
    *len += (size_t)n;
    (*acc)[*len] = 0;
    if (stream) {
        size_t ok = *flushed + tok_utf8_complete(*acc + *flushed, *len - *flushed);
        fwrite(*acc + *flushed, 1, ok - *flushed, stdout);
        fflush(stdout);
        *flushed = ok;
    }
}

int cli_run(int argc, char **argv)
{
    run_opts o = {0};
    if (!parse(argc, argv, &o)) return 2;

    char err[512] = "";
    model *m;
    if (model_load(o.model, o.mmap ? MODEL_MMAP : MODEL_COPY, &m, err, sizeof err)) {
        fprintf(stderr, "polykv: %s: %s\n", o.model, err);
        return 1;
    }
    if (!cli_kv_types_ok(m, o.type_k, o.type_v)) {
        model_free(m);
        return 2;
    }
    const model_hparams *hp = model_get_hparams(m);
    const tok_vocab *voc = model_vocab(m);
    char *chat_text = NULL;
    if (o.chat) {
        tmpl_msg msg = { "user", o.prompt };
        size_t cap_t = strlen(o.prompt) + 4096, n_t = 0;
        chat_text = malloc(cap_t);
        ASSERT(chat_text);
        pk_status ts;
        if (o.chat_template) {
            tmpl_kind k = tmpl_from_name(o.chat_template);
            ts = k == TMPL_UNKNOWN ? PK_EUNSUPPORTED : tmpl_apply(k, &msg, 1, true, chat_text, cap_t, &n_t);
        } else {
            ts = tmpl_render(tok_chat_template(voc), &msg, 1, true, chat_text, cap_t, &n_t);
        }
        if (ts != PK_OK) {
            fprintf(stderr, "polykv: %s\n", ts == PK_EUNSUPPORTED
                    ? "chat template not recognised (known: chatml, llama3, llama2, llama2-sys, mistral, command-r; pick one with --chat-template)"
                    : "could not apply the chat template");
            return 1;
        }
        o.prompt = chat_text;
    }
    size_t plen = strlen(o.prompt);
    int32_t cap = (int32_t)MIN(plen + 8, (size_t)(1 << 24)), n_prompt = 0;
    int32_t *prompt = malloc((size_t)cap * sizeof *prompt);
    ASSERT(prompt);
    if (tok_encode(voc, o.prompt, plen, true, true, prompt, cap, &n_prompt) != PK_OK || n_prompt < 1) {
        fprintf(stderr, "polykv: the prompt gives no tokens\n");
        return 1;
    }
    long n_ctx = o.n_ctx ? o.n_ctx : n_prompt + o.n_predict;
    if (n_prompt + o.n_predict > n_ctx) {
        fprintf(stderr, "polykv: prompt (%d tokens) + n (%ld) exceeds the context (%ld)\n",
                n_prompt, o.n_predict, n_ctx);
        return 1;
    }
    model_ctx_params cp = { .n_ctx = (int32_t)n_ctx, .n_ubatch = 512,
                            .n_threads = (int32_t)o.n_threads, .type_k = o.type_k, .type_v = o.type_v };
    model_ctx *ctx;
    smp_ctx *smp;
    if (model_ctx_new(m, &cp, &ctx) || smp_new(&o.sp, hp->n_vocab, (int32_t)n_ctx, &smp)) {
        fprintf(stderr, "polykv: out of memory for a context of %ld\n", n_ctx);
        return 1;
    }
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    int32_t *gen = malloc(((size_t)o.n_predict + 1) * sizeof(int32_t));
    kv_pos *pos = malloc((size_t)n_prompt * sizeof(kv_pos));
    int32_t *nseq = malloc((size_t)n_prompt * sizeof(int32_t));
    kv_seq (*seq)[MODEL_MAX_TOKEN_SEQS] = calloc((size_t)n_prompt, sizeof *seq);
    bool *want = calloc((size_t)n_prompt, sizeof(bool));
    ASSERT(logits && gen && pos && nseq && seq && want);
    for (int32_t i = 0; i < n_prompt; i++) {
        pos[i] = i;
        nseq[i] = 1;
        smp_accept(smp, prompt[i]);
    }
    want[n_prompt - 1] = true;

    double t0 = pk_time_ms();
    model_batch b = { n_prompt, prompt, pos, nseq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])seq, want };
    pk_status st = model_decode(ctx, &b, logits);
    double t_prompt = pk_time_ms() - t0;

    char *text = NULL;
    size_t len = 0, tcap = 0, flushed = 0;
    int32_t n_gen = 0;
    double t1 = pk_time_ms();
    while (st == PK_OK && n_gen < o.n_predict) {
        int32_t id = smp_sample(smp, logits, NULL, 0, NULL);
        gen[n_gen++] = id;
        if (tok_is_eog(voc, id)) break;
        smp_accept(smp, id);
        emit(voc, id, &text, &len, &tcap, &flushed, !o.json);
        if (n_gen == o.n_predict) break;
        kv_pos p = n_prompt + n_gen - 1;
        int32_t one = 1;
        kv_seq s[1][MODEL_MAX_TOKEN_SEQS] = {{0}};
        bool w = true;
        model_batch nb = { 1, &id, &p, &one, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])s, &w };
        st = model_decode(ctx, &nb, logits);
    }
    double t_gen = pk_time_ms() - t1;
    if (st != PK_OK) fprintf(stderr, "polykv: decode failed: %s\n", pk_status_str(st));

    if (o.json) {
        json_t *jp = json_array(), *jg = json_array();
        for (int32_t i = 0; i < n_prompt; i++) json_array_append_new(jp, json_integer(prompt[i]));
        for (int32_t i = 0; i < n_gen; i++) json_array_append_new(jg, json_integer(gen[i]));
        char *clean = malloc(3 * len + 1);
        ASSERT(clean);
        size_t clen = pk_utf8_sanitize(text ? text : "", len, clean);
        json_t *root = json_pack("{s:o, s:o, s:s%, s:{s:i, s:f, s:i, s:f}}",
                                 "prompt_tokens", jp, "tokens", jg, "text", clean, clen,
                                 "timings", "prompt_n", n_prompt, "prompt_ms", t_prompt,
                                 "predicted_n", n_gen, "predicted_ms", t_gen);
        char *s = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s) puts(s);
        else fprintf(stderr, "polykv: could not format the JSON result\n");
        free(s);
        free(clean);
        json_decref(root);
    } else {
        if (flushed < len) fwrite(text + flushed, 1, len - flushed, stdout);
        printf("\n");
        fprintf(stderr, "\nprompt: %d tokens in %.1f ms (%.1f tok/s); generated %d tokens in %.1f ms (%.1f tok/s)\n",
                n_prompt, t_prompt, n_prompt * 1000.0 / t_prompt, n_gen, t_gen,
                n_gen > 0 ? n_gen * 1000.0 / t_gen : 0.0);
    }
    free(chat_text); free(text); free(logits); free(gen); free(pos); free(nseq); free(seq); free(want); free(prompt);
    smp_free(smp);
    model_ctx_free(ctx);
    model_free(m);
    return st == PK_OK ? 0 : 1;
}
