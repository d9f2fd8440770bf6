/*
 * cli_bench.c - `polykv bench`: prompt processing (pp) and text generation
 * (tg) speed, measured like the reference engine's tools:
 *
 *   default    like llama-bench: pp decodes -p tokens as one batch, tg
 *              decodes -n tokens one at a time, each from an empty cache;
 *              with -d D both start from a cache already holding D tokens
 *              (filled before the clock starts), as llama-bench -d does.
 *   --batch B  like llama-batched-bench (prompts not shared): B sequences
 *              each get a -p token prompt, all in one model_decode, then
 *              -n steps each decode one token of every sequence in one
 *              model_decode; pp = B * p / time, tg = B * n / time (total
 *              tokens per second, its S_PP and S_TG).
 *
 * Each test runs once to warm up, then -r times; the median is reported.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../tensor/tk.h"
#include "cli.h"

#define UBATCH 512

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A batch of up to cap tokens and its per-token arrays. */
typedef struct bench_batch {
    int cap;
    int32_t *tok;
    kv_pos *pos;
    int32_t *n_seq;
    kv_seq (*seq)[MODEL_MAX_TOKEN_SEQS];
    bool *want;
} bench_batch;

static void batch_init(bench_batch *b, int cap)
{
    b->cap = cap;
    b->tok = calloc((size_t)cap, sizeof *b->tok);
    b->pos = calloc((size_t)cap, sizeof *b->pos);
    b->n_seq = calloc((size_t)cap, sizeof *b->n_seq);
    b->seq = calloc((size_t)cap, sizeof *b->seq);
    b->want = calloc((size_t)cap, sizeof *b->want);
    ASSERT(b->tok && b->pos && b->n_seq && b->seq && b->want);
}

static void batch_free(bench_batch *b)
{
    free(b->tok); free(b->pos); free(b->n_seq); free(b->seq); free(b->want);
}

/*
 * Decodes n_seq sequences together: `len` more tokens each, starting at
 * position p0, `step` positions per model_decode (the batch holds step
 * tokens of every sequence, sequence by sequence); each sequence wants the
 * logits of its last token of a step.  Tokens come from tok by position.
 */
static void decode_run(model_ctx *ctx, bench_batch *b, const int32_t *tok, int n_seq, int p0, int len, int step,
                       float *logits)
{
    for (int i0 = 0; i0 < len; i0 += step) {
        int k = MIN(step, len - i0), n = 0;
        for (int s = 0; s < n_seq; s++) {
            for (int i = 0; i < k; i++, n++) {
                int p = p0 + i0 + i;
                b->tok[n] = tok[(p + 7919 * s) % (1 << 16)];
                b->pos[n] = p;
                b->n_seq[n] = 1;
                b->seq[n][0] = s;
                b->want[n] = i == k - 1;
            }
        }
        ASSERT(n <= b->cap);
        model_batch mb = { n, b->tok, b->pos, b->n_seq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])b->seq, b->want };
        pk_status st = model_decode(ctx, &mb, logits);
        ASSERT(st == PK_OK);
    }
}

/* One timed test: clear, fill `depth` untimed, then decode len tokens per
 * sequence in steps of `step`; returns ms. */
static double timed(model_ctx *ctx, bench_batch *b, const int32_t *tok, int n_seq, int depth, int len, int step,
                    float *logits)
{
    model_ctx_clear(ctx);
    if (depth > 0) decode_run(ctx, b, tok, n_seq, 0, depth, MAX(1, UBATCH / n_seq), logits);
    double t0 = pk_time_ms();
    decode_run(ctx, b, tok, n_seq, depth, len, step, logits);
    return pk_time_ms() - t0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: polykv bench -m MODEL [-p 512] [-n 128] [-d 0] [--batch 1] [-t N] [-r 3] [-ctk T] [-ctv T] [--mmap] [--json]\n"
               "  -d D       start pp and tg from a cache holding D tokens (llama-bench -d)\n"
               "  --batch B  B sequences decoded together (llama-batched-bench): tg in total tok/s\n"
               "  -ctk, -ctv K and V cache types (default f16; serve's choices)\n"
               "  --mmap     map the model file instead of reading it into huge pages\n");
}

int cli_bench(int argc, char **argv)
{
    const char *path = NULL;
    long n_pp = 512, n_tg = 128, n_threads = cli_default_threads(), reps = 3, depth = 0, n_seq = 1;
    bool json = false, mmap = false;
    tq_type type_k = TQ_F16, type_v = TQ_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "--mmap") || !strcmp(a, "--no-mmap")) { mmap = !strcmp(a, "--mmap"); continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!(v = cli_arg(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "-p")) { if (!cli_int(a, v, 0, 1 << 20, &n_pp)) return 2; }
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 0, 1 << 20, &n_tg)) return 2; }
        else if (!strcmp(a, "-d")) { if (!cli_int(a, v, 0, 1 << 20, &depth)) return 2; }
        else if (!strcmp(a, "--batch")) { if (!cli_int(a, v, 1, 64, &n_seq)) return 2; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 1, 1024, &n_threads)) return 2; }
        else if (!strcmp(a, "-r")) { if (!cli_int(a, v, 1, 1000, &reps)) return 2; }
        else if (!strcmp(a, "-ctk")) { if (!cli_kv_type(a, v, &type_k)) return 2; }
        else if (!strcmp(a, "-ctv")) { if (!cli_kv_type(a, v, &type_v)) return 2; }
        else { fprintf(stderr, "polykv bench: unknown option %s\n", a); return 2; }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    char err[512] = "";
    model *m;
    if (model_load(path, mmap ? MODEL_MMAP : MODEL_COPY, &m, err, sizeof err)) {
        fprintf(stderr, "polykv: %s: %s\n", path, err);
        return 1;
    }
    if (!cli_kv_types_ok(m, type_k, type_v)) {
        model_free(m);
        return 2;
    }
    model_wait_copy(m);   /* time the weights where decoding will read them */
    const model_hparams *hp = model_get_hparams(m);
    /* batched: each sequence holds its prompt and its generated tokens */
    long per_seq = n_seq > 1 ? n_pp + n_tg : depth + MAX(n_pp, n_tg);
    model_ctx_params cp = { .n_ctx = (int32_t)MAX(1, per_seq * n_seq), .n_ubatch = UBATCH,
                            .n_threads = (int32_t)n_threads, .type_k = type_k, .type_v = type_v };
    model_ctx *ctx;
    if (model_ctx_new(m, &cp, &ctx)) {
        fprintf(stderr, "polykv: out of memory\n");
        return 1;
    }
    int32_t *tok = malloc(sizeof *tok << 16);
    float *logits = malloc((size_t)hp->n_vocab * n_seq * sizeof(float));
    double *ms = malloc((size_t)reps * sizeof *ms);
    bench_batch b;
    batch_init(&b, (int)MAX(UBATCH, n_seq * MAX(1, n_pp)));
    ASSERT(tok && logits && ms);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < 1 << 16; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)hp->n_vocab);
    }
    double pp_tps = 0, tg_tps = 0;
    int ns = (int)n_seq;
    if (n_pp > 0) {
        /* one batch of every prompt when batched, else chunks of UBATCH */
        int step = ns > 1 ? (int)n_pp : UBATCH;
        timed(ctx, &b, tok, ns, (int)depth, (int)n_pp, step, logits);
        for (long k = 0; k < reps; k++) ms[k] = timed(ctx, &b, tok, ns, (int)depth, (int)n_pp, step, logits);
        pp_tps = n_seq * n_pp * 1000.0 / median(ms, (int)reps);
    }
    if (n_tg > 0) {
        /* batched tg continues after the prompts, as llama-batched-bench */
        int d = ns > 1 ? (int)n_pp : (int)depth;
        timed(ctx, &b, tok, ns, d, (int)MIN(n_tg, 16), 1, logits);
        for (long k = 0; k < reps; k++) ms[k] = timed(ctx, &b, tok, ns, d, (int)n_tg, 1, logits);
        tg_tps = n_seq * n_tg * 1000.0 / median(ms, (int)reps);
    }
    /* weights stream once per decode step, whatever the batch */
    double bytes = tg_tps / n_seq * (double)model_weight_bytes(m);
    /* multiply-adds of the layers' matrices per token (the logits' product
     * runs once per batch in pp, so it is left out) */
    double layer_macs = model_layer_macs(m);
    if (json) {
        printf("{\"model\":\"%s\",\"isa\":\"%s\",\"threads\":%ld,\"pp\":%ld,\"tg\":%ld,\"depth\":%ld,\"batch\":%ld,"
               "\"pp_tps\":%.3f,\"tg_tps\":%.3f,\"decode_bytes_per_s\":%.0f,\"weight_bytes\":%zu,"
               "\"tiled_bytes\":%zu,\"layer_macs_per_token\":%.0f}\n",
               model_desc(m), tk_ops_get()->isa, n_threads, n_pp, n_tg, depth, n_seq, pp_tps, tg_tps, bytes,
               model_weight_bytes(m), model_tiled_bytes(m), layer_macs);
    } else {
        printf("model: %s, %.1f MiB of weights (%.1f tiled), isa %s, %ld threads, median of %ld", model_desc(m),
               model_weight_bytes(m) / 1048576.0, model_tiled_bytes(m) / 1048576.0, tk_ops_get()->isa, n_threads,
               reps);
        if (depth) printf(", depth %ld", depth);
        if (n_seq > 1) printf(", %ld sequences (total tok/s)", n_seq);
        printf("\n");
        if (n_pp > 0) printf("pp%-5ld %10.2f tok/s\n", n_pp, pp_tps);
        if (n_tg > 0) printf("tg%-5ld %10.2f tok/s   %.2f GB/s of weights\n", n_tg, tg_tps, bytes / 1e9);
    }
    batch_free(&b);
    free(tok); free(logits); free(ms);
    model_ctx_free(ctx);
    model_free(m);
    return 0;
}
