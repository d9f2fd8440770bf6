/*
 * cli_hub.c - a model by name on the command line (src/hub): llama-server's
 * -hf / -hff / -hft / --offline flags and their environment variables for
 * `polykv serve`, and `polykv pull`, which only downloads and prints the
 * path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../hub/hub.h"
#include "cli.h"

static const char *const repo_flags[] = { "-hf", "-hfr", "--hf-repo" };
static const char *const file_flags[] = { "-hff", "--hf-file" };
static const char *const token_flags[] = { "-hft", "--hf-token" };

static bool one_of(const char *a, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(a, names[i])) return true;
    return false;
}

bool cli_hub_takes_value(const char *a)
{
    return one_of(a, repo_flags, ARRAY_LEN(repo_flags)) || one_of(a, file_flags, ARRAY_LEN(file_flags)) ||
           one_of(a, token_flags, ARRAY_LEN(token_flags)) || !strcmp(a, "--connect-timeout");
}

/* llama.cpp's is_truthy, for a switch's environment variable. */
static bool truthy(const char *v)
{
    return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "enabled"));
}

void cli_hub_env(hub_opts *h)
{
    *h = hub_default_opts();
    const char *v;
    if ((v = getenv("LLAMA_ARG_HF_REPO")) && *v) h->repo = v;
    if ((v = getenv("LLAMA_ARG_HF_FILE")) && *v) h->file = v;
    if ((v = getenv("HF_TOKEN")) && *v) h->token = v;
    h->offline = truthy(getenv("LLAMA_ARG_OFFLINE"));
}

int cli_hub_flag(int argc, char **argv, int *i, hub_opts *h)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--offline")) { h->offline = true; return 1; }
    if (!strcmp(a, "--hf-refresh")) { h->refresh = true; return 1; }
    if (!cli_hub_takes_value(a)) return 0;
    const char *v = cli_arg(argc, argv, i);
    if (!v) return -1;
    long x;
    if (one_of(a, repo_flags, ARRAY_LEN(repo_flags))) h->repo = v;
    else if (one_of(a, file_flags, ARRAY_LEN(file_flags))) h->file = v;
    else if (one_of(a, token_flags, ARRAY_LEN(token_flags))) h->token = v;
    else if (!cli_int(a, v, 1, 3600, &x)) return -1;
    else h->connect_timeout_ms = x * 1000;
    return 1;
}

void cli_hub_usage(void)
{
    fprintf(stderr,
        "a model by name (docs/models.md), llama-server's flags and cache:\n"
        "  -hf, -hfr, --hf-repo USER/REPO[:QUANT]   a GGUF from the Hugging Face hub, found in the cache or\n"
        "                          downloaded there (QUANT any case; default Q4_K_M, then Q8_0, then the\n"
        "                          first GGUF); env LLAMA_ARG_HF_REPO\n"
        "  -hff, --hf-file FILE    that file of the repo instead of QUANT's pick; env LLAMA_ARG_HF_FILE\n"
        "  -hft, --hf-token TOKEN  a token for gated or private repos (default: env HF_TOKEN)\n"
        "  --offline               the cache only, never a request; env LLAMA_ARG_OFFLINE=1\n"
        "  --hf-refresh            ask the hub for the repo's newest commit even when the cache has the file\n"
        "  --connect-timeout S     seconds to reach the hub (default 30)\n"
        "  endpoint: MODEL_ENDPOINT or HF_ENDPOINT (default https://huggingface.co/); cache: LLAMA_CACHE,\n"
        "  HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub\n");
}

int cli_hub_check(const hub_opts *h, const char *cmd)
{
    if (h->file && !h->repo) {
        fprintf(stderr, "polykv %s: -hff / --hf-file names a file of the repo -hf names: give -hf too\n", cmd);
        return -1;
    }
    return 0;
}

int cli_hub_resolve(const hub_opts *h, char **path)
{
    hub_model m;
    char err[1024];
    *path = NULL;
    if (hub_resolve(h, &m, err, sizeof err) != PK_OK) {
        fprintf(stderr, "polykv: -hf %s: %s\n", h->repo, err);
        return -1;
    }
    int rc = 0;
    if (m.n_parts > 1) {
        fprintf(stderr, "polykv: -hf %s: %s is part 1 of a GGUF split in %d parts (all cached); polykv loads one-file "
                        "GGUFs: merge them with llama.cpp's llama-gguf-split --merge and pass -m\n", h->repo, m.file,
                m.n_parts);
        rc = -1;
    } else {
        fprintf(stderr, "polykv: -hf %s: %s (%s)\n", h->repo, m.path,
                m.cached ? "cached, no request made" : m.n_downloaded ? "downloaded" : "cached; the hub was asked");
        *path = m.path;
        m.path = NULL;
    }
    hub_model_free(&m);
    return rc;
}

int cli_pull(int argc, char **argv)
{
    hub_opts h;
    cli_hub_env(&h);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fprintf(stderr, "usage: polykv pull -hf USER/REPO[:QUANT] [-hff FILE] [options]\n"
                            "Finds the model in the cache or downloads it, and prints its path on stdout.\n");
            cli_hub_usage();
            return 0;
        }
        int r = cli_hub_flag(argc, argv, &i, &h);
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "polykv pull: unknown option %s (polykv pull --help lists them)\n", argv[i]);
            return 2;
        }
    }
    if (!h.repo) {
        fprintf(stderr, "polykv pull: -hf USER/REPO[:QUANT] is needed\n");
        return 2;
    }
    if (cli_hub_check(&h, "pull")) return 2;
    hub_model m;
    char err[1024];
    if (hub_resolve(&h, &m, err, sizeof err) != PK_OK) {
        fprintf(stderr, "polykv pull: %s\n", err);
        return 1;
    }
    printf("%s\n", m.path);
    hub_model_free(&m);
    return 0;
}
