/*
 * main.c - the polykv binary: dispatches to a sub-command.
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../model/model.h"
#include "../tensor/tk.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: polykv COMMAND [options]\n"
        "  run       -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [-t N] [-c N] [--kv-type f16|f32] [--json]\n"
        "  tokenize  -m MODEL [--no-bos] [--json] TEXT\n"
        "  bench     -m MODEL [-p 512] [-n 128] [-t N] [-r 3] [--json]\n"
        "  serve     -m MODEL | -hf USER/REPO[:QUANT] [-c N_CTX] [-np N_SLOTS] [-t N] [--port 8080] [--slot-* ...]\n"
        "            (see serve --help)\n"
        "  pull      -hf USER/REPO[:QUANT] [-hff FILE] [--offline]   download to the cache, print the path\n"
        "  template  --file T.jinja [--context CTX.json] [--now EPOCH] [--bench N]\n"
        "  gen-model --arch llama|qwen2|qwen3 --vocab VOCAB.gguf [shape] --type T --seed S -o OUT.gguf\n"
        "Each command prints its own options with --help.\n");
}

const char *cli_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "polykv: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool cli_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "polykv: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_bytes(const char *opt, const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    char *end = NULL;
    errno = 0;
    bool digits = s[0] >= '0' && s[0] <= '9';       /* strtoull would take a sign and wrap "-1" */
    unsigned long long v = digits ? strtoull(s, &end, 10) : 0;
    int shift = 0;
    const char *u = digits && *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u) {
        shift = 10 * (int)(u - units + 1);
        end++;
    }
    if (!digits || errno || *end || v > UINT64_MAX >> shift) {
        fprintf(stderr, "polykv: %s: '%s' is not a byte count (digits, optionally followed by K, M, G or T: "
                "powers of 1024)\n", opt, s);
        return false;
    }
    *out = (uint64_t)v << shift;
    return true;
}

bool cli_kv_type(const char *opt, const char *s, tq_type *out)
{
    for (int t = 0; t < TQ_COUNT; t++)
        if (tk_kv_type_ok((tq_type)t) && !strcmp(tq_get(t)->name, s)) {
            *out = (tq_type)t;
            return true;
        }
    fprintf(stderr, "polykv: %s must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl\n", opt);
    return false;
}

bool cli_kv_types_ok(const model *m, tq_type k, tq_type v)
{
    const char *why = model_kv_types_refusal(m, k, v);
    if (why) fprintf(stderr, "polykv: -ctk %s -ctv %s: %s\n", tq_get(k)->name, tq_get(v)->name, why);
    return !why;
}

bool cli_float(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "polykv: %s: '%s' is not a number\n", opt, s);
        return false;
    }
    *out = v;
    return true;
}

int cli_default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-model")) return cli_gen_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cli_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "pull")) return cli_pull(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "polykv: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
