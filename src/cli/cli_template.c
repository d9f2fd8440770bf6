/*
 * cli_template.c - `polykv template`: renders a Jinja chat template with a
 * JSON object of variables (messages, tools, add_generation_prompt, ...) and
 * prints the text.  The Jinja oracle test (tests/jinja) drives it beside
 * Python's jinja2; --bench N renders N times and prints the median time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../jinja/jj.h"
#include "cli.h"

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    for (size_t k; p && (k = fread(p + len, 1, cap - len - 1, f)) > 0;) {
        len += k;
        if (cap - len - 1 == 0) {
            char *q = realloc(p, cap *= 2);
            if (!q) { free(p); p = NULL; }
            else p = q;
        }
    }
    fclose(f);
    if (p) { p[len] = 0; *n = len; }
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cli_template(int argc, char **argv)
{
    const char *file = NULL, *ctx_path = NULL;
    long now = 0, n_bench = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--file")) { if (!(file = cli_arg(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--context")) { if (!(ctx_path = cli_arg(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--now")) {
            if (!(v = cli_arg(argc, argv, &i)) || !cli_int(a, v, 1, 1L << 40, &now)) return 2;
        } else if (!strcmp(a, "--bench")) {
            if (!(v = cli_arg(argc, argv, &i)) || !cli_int(a, v, 1, 1000000, &n_bench)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: polykv template --file T.jinja [--context CTX.json] [--now EPOCH] [--bench N]\n"
                   "  renders T with the members of the JSON object CTX as variables and prints it;\n"
                   "  --now fixes strftime_now's clock (UTC); --bench N renders N times and prints\n"
                   "  the median and the 10th/90th percentile times in microseconds instead\n");
            return 0;
        } else {
            fprintf(stderr, "polykv template: unknown option %s\n", a);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "usage: polykv template --file T.jinja [--context CTX.json]\n");
        return 2;
    }
    size_t n_src;
    char *src = read_file(file, &n_src);
    if (!src) { fprintf(stderr, "polykv template: cannot read %s\n", file); return 1; }
    json_t *ctx = NULL;
    if (ctx_path) {
        json_error_t je;
        ctx = json_load_file(ctx_path, 0, &je);
        if (!json_is_object(ctx)) {
            fprintf(stderr, "polykv template: %s: not a JSON object (%s)\n", ctx_path, je.text);
            free(src);
            json_decref(ctx);
            return 1;
        }
    }
    char err[512] = "";
    jj_tmpl *t;
    int rc = 0;
    if (jj_compile(src, n_src, &t, err, sizeof err)) {
        fprintf(stderr, "template error: %s\n", err);
        free(src);
        json_decref(ctx);
        return 1;
    }
    jj_limits lim = { .now = (time_t)now };
    double *times = n_bench ? calloc((size_t)n_bench, sizeof *times) : NULL;
    for (long r = 0; r < (n_bench ? n_bench : 1); r++) {
        char *out;
        size_t n_out;
        double t0 = pk_time_ms();
        pk_status st = jj_render(t, ctx, &lim, &out, &n_out, err, sizeof err);
        if (times) times[r] = (pk_time_ms() - t0) * 1000.0;
        if (st) {
            fprintf(stderr, "template error: %s\n", err);
            rc = 1;
            break;
        }
        if (!n_bench) fwrite(out, 1, n_out, stdout);
        free(out);
    }
    if (times && rc == 0) {
        qsort(times, (size_t)n_bench, sizeof *times, cmp_double);
        printf("renders %ld  median_us %.1f  p10_us %.1f  p90_us %.1f\n", n_bench, times[n_bench / 2],
               times[n_bench / 10], times[n_bench * 9 / 10]);
    }
    free(times);
    jj_free(t);
    free(src);
    json_decref(ctx);
    return rc;
}
