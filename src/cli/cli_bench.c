/*
 * cli_bench.c - `polykv bench`: prompt processing (pp) and text generation
 * (tg) speed, measured like llama-bench: pp decodes -p tokens as one batch,
 * tg decodes -n tokens one at a time from an empty cache; each test runs
 * once to warm up, then -r times, and the median is reported.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../tensor/tk.h"
#include "cli.h"

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

/* Decodes tokens [0, n) in batches of `step` from an empty cache; returns ms. */
static double run_once(model_ctx *ctx, const int32_t *tok, int n, int step, float *logits)
{
    kv_clear(model_ctx_kv(ctx));
    kv_pos *pos = malloc((size_t)step * sizeof *pos);
    int32_t *nseq = malloc((size_t)step * sizeof *nseq);
    kv_seq (*seq)[MODEL_MAX_TOKEN_SEQS] = calloc((size_t)step, sizeof *seq);
    bool *want = calloc((size_t)step, sizeof *want);
    ASSERT(pos && nseq && seq && want);
    double t0 = pk_time_ms();
    for (int i0 = 0; i0 < n; i0 += step) {
        int k = MIN(step, n - i0);
        for (int i = 0; i < k; i++) {
            pos[i] = i0 + i;
            nseq[i] = 1;
            want[i] = i == k - 1;
        }
        model_batch b = { k, tok + i0, pos, nseq, (const kv_seq (*)[MODEL_MAX_TOKEN_SEQS])seq, want };
        pk_status st = model_decode(ctx, &b, logits);
        ASSERT(st == PK_OK);
    }
    double ms = pk_time_ms() - t0;
    free(pos); free(nseq); free(seq); free(want);
    return ms;
}

int cli_bench(int argc, char **argv)
{
    const char *path = NULL;
    long n_pp = 512, n_tg = 128, n_threads = cli_default_threads(), reps = 3;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: polykv bench -m MODEL [-p 512] [-n 128] [-t N] [-r 3] [--json]\n");
            return 0;
        }
        if (!(v = cli_arg(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "-p")) { if (!cli_int(a, v, 0, 1 << 20, &n_pp)) return 2; }
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 0, 1 << 20, &n_tg)) return 2; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 1, 1024, &n_threads)) return 2; }
        else if (!strcmp(a, "-r")) { if (!cli_int(a, v, 1, 1000, &reps)) return 2; }
        else { fprintf(stderr, "polykv bench: unknown option %s\n", a); return 2; }
    }
    if (!path) {
        fprintf(stderr, "usage: polykv bench -m MODEL [-p 512] [-n 128] [-t N] [-r 3] [--json]\n");
        return 2;
    }
    char err[512] = "";
    model *m;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "polykv: %s: %s\n", path, err);
        return 1;
    }
    const model_hparams *hp = model_get_hparams(m);
    long n_max = MAX(MAX(n_pp, n_tg), 1);
    model_ctx_params cp = { .n_ctx = (int32_t)n_max, .n_ubatch = 512,
                            .n_threads = (int32_t)n_threads, .kv_type = TQ_F16 };
    model_ctx *ctx;
    if (model_ctx_new(m, &cp, &ctx)) {
        fprintf(stderr, "polykv: out of memory\n");
        return 1;
    }
    int32_t *tok = malloc((size_t)n_max * sizeof *tok);
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    double *ms = malloc((size_t)reps * sizeof *ms);
    ASSERT(tok && logits && ms);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < n_max; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)hp->n_vocab);
    }
    double pp_tps = 0, tg_tps = 0;
    if (n_pp > 0) {
        run_once(ctx, tok, (int)n_pp, 512, logits);
        for (long k = 0; k < reps; k++) ms[k] = run_once(ctx, tok, (int)n_pp, 512, logits);
        pp_tps = n_pp * 1000.0 / median(ms, (int)reps);
    }
    if (n_tg > 0) {
        run_once(ctx, tok, (int)MIN(n_tg, 16), 1, logits);
        for (long k = 0; k < reps; k++) ms[k] = run_once(ctx, tok, (int)n_tg, 1, logits);
        tg_tps = n_tg * 1000.0 / median(ms, (int)reps);
    }
    double bytes = tg_tps * (double)model_weight_bytes(m);
    if (json) {
        printf("{\"model\":\"%s\",\"isa\":\"%s\",\"threads\":%ld,\"pp\":%ld,\"tg\":%ld,"
               "\"pp_tps\":%.3f,\"tg_tps\":%.3f,\"decode_bytes_per_s\":%.0f}\n",
               model_desc(m), tk_ops_get()->isa, n_threads, n_pp, n_tg, pp_tps, tg_tps, bytes);
    } else {
        printf("model: %s, %.1f MiB of weights, isa %s, %ld threads, median of %ld\n",
               model_desc(m), model_weight_bytes(m) / 1048576.0, tk_ops_get()->isa, n_threads, reps);
        if (n_pp > 0) printf("pp%-5ld %10.2f tok/s\n", n_pp, pp_tps);
        if (n_tg > 0) printf("tg%-5ld %10.2f tok/s   %.2f GB/s of weights\n", n_tg, tg_tps, bytes / 1e9);
    }
    free(tok); free(logits); free(ms);
    model_ctx_free(ctx);
    model_free(m);
    return 0;
}
