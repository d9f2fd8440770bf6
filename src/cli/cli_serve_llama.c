/*
 * cli_serve_llama.c - the flags of `polykv serve` that scripts written for
 * llama-server pass, with llama-server's meaning: request defaults
 * (sampling, -n), --verbose, --props, CORS, reasoning, and the flags that
 * are accepted because polykv already behaves that way (--cont-batching).
 * The hub's flags (-hf, -hff, -hft, --offline) are cli_hub.c's.  A
 * llama-server flag polykv cannot honour (a model by URL, embeddings,
 * LoRA, GPU offload ...) is refused by name with the reason, never taken
 * and ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/srv.h"
#include "cli.h"

void cli_serve_llama_usage(void)
{
    fprintf(stderr,
        "llama-server compatible (request defaults a request's own fields override):\n"
        "  -s, --seed N            sampling seed (default -1: random per request)\n"
        "  --temp F                temperature (default 0.8)\n"
        "  --top-k N, --top-p F, --min-p F     (defaults 40, 0.95, 0.05)\n"
        "  --repeat-penalty F, --repeat-last-n N, --presence-penalty F, --frequency-penalty F\n"
        "  -n, --n-predict, --predict N   tokens to generate (default -1: until the context ends)\n"
        "  --verbose               debug fields (\"__verbose\") in responses, and the request log\n"
        "  --props                 allow POST /props (off by default)\n"
        "  --cors-origins ORIGINS  localhost (reflect localhost origins) | * | a,b,c (default: * with\n"
        "                          --api-key, else localhost)\n"
        "  --cors-credentials / --no-cors-credentials   (default on)\n"
        "  --reasoning-format F    auto | none | deepseek | deepseek-legacy (default auto): where\n"
        "                          <think>...</think> goes in chat answers\n"
        "  -rea, --reasoning on|off|auto   off: no thinking, as --reasoning-budget 0; on, auto: the\n"
        "                          template's default (enable_thinking true, with --jinja)\n"
        "  --reasoning-budget N    -1 unlimited (default); 0 no thinking (an opened <think> is closed in\n"
        "                          the prompt, a <think> token banned); N > 0 is not supported\n"
        "  -cb, --cont-batching    accepted: batching is always continuous\n"
        "  --backend-sampling      accepted: polykv samples on the CPU, where its logits are\n"
        "  --no-ui                 no monitor page at / (404)\n"
        "  --no-prefill-assistant  a chat's last assistant message is a finished turn (default: its\n"
        "                          text starts the answer, which continues it); --prefill-assistant\n"
        "  --ui-mcp-proxy          GET/POST /cors-proxy?url=U forwards to U (http/https) for the web\n"
        "                          UI's MCP client; off by default (403). Do not enable in untrusted\n"
        "                          environments: callers reach what this machine reaches\n"
        "  --tags A,B              tags /v1/models lists for the model (--alias takes a list too)\n"
        "  -ub, --ubatch-size N    accepted: polykv picks its own micro-batch (min of -b and 512)\n"
        "refused with the reason: --model-url/-mu (pass -hf USER/REPO[:QUANT] or -m FILE),\n"
        "  --embedding(s), --reranking, --lora, -ngl/--n-gpu-layers, --mmproj(-url)\n");
}

static int fail(const char *a, const char *why)
{
    fprintf(stderr, "polykv serve: %s: %s\n", a, why);
    return -1;
}

static bool get_float(const char *a, const char *v, double lo, double hi, float *out)
{
    double x;
    if (!cli_float(a, v, &x)) return false;
    if (!(x >= lo && x <= hi)) {
        fprintf(stderr, "polykv serve: %s must be in [%g, %g], got %s\n", a, lo, hi, v);
        return false;
    }
    *out = (float)x;
    return true;
}

static int valued(const char *a, const char *v, srv_params *sp)
{
    long x;
    smp_params *p = &sp->sampling;
    if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        if (!cli_int(a, v, -1, 0x7fffffffffffffffL, &x)) return -1;
        p->seed = x < 0 ? 0xFFFFFFFFu : (uint64_t)x;
    } else if (!strcmp(a, "--temp")) {
        if (!get_float(a, v, -1e9, 1e9, &p->temp)) return -1;
    } else if (!strcmp(a, "--top-k")) {
        if (!cli_int(a, v, 0, 1 << 30, &x)) return -1;
        p->top_k = (int32_t)x;
    } else if (!strcmp(a, "--top-p")) {
        if (!get_float(a, v, 0, 1, &p->top_p)) return -1;
    } else if (!strcmp(a, "--min-p")) {
        if (!get_float(a, v, 0, 1, &p->min_p)) return -1;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (!get_float(a, v, 1e-9, 1e9, &p->repeat_penalty)) return -1;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (!cli_int(a, v, -1, 1 << 24, &x)) return -1;
        p->penalty_last_n = (int32_t)x;
    } else if (!strcmp(a, "--presence-penalty")) {
        if (!get_float(a, v, -2, 2, &p->presence_penalty)) return -1;
    } else if (!strcmp(a, "--frequency-penalty")) {
        if (!get_float(a, v, -2, 2, &p->frequency_penalty)) return -1;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--predict")) {
        if (!cli_int(a, v, -1, 1 << 24, &x)) return -1;
        sp->n_predict = (int32_t)x;
    } else if (!strcmp(a, "--cors-origins")) {
        if (!*v) return fail(a, "needs localhost, * or a comma-separated list of origins");
        sp->cors_origins = v;
    } else if (!strcmp(a, "--reasoning-format")) {
        if (!srv_reasoning_parse(v, &sp->reasoning_format))
            return fail(a, "must be auto, none, deepseek or deepseek-legacy");
    } else if (!strcmp(a, "--reasoning-budget")) {
        if (!cli_int(a, v, -1, 1 << 24, &x)) return -1;
        if (x > 0) return fail(a, "a budget of N > 0 thinking tokens is not supported (-1 unlimited, 0 off)");
        sp->reasoning_budget = (int32_t)x;
    } else if (!strcmp(a, "-rea") || !strcmp(a, "--reasoning")) {
        /* llama-server's on/off/auto: off is no thinking (as --reasoning-budget 0); on is the
         * template's enable_thinking, which the built-in families do not have. */
        if (!strcmp(v, "off")) sp->reasoning_budget = 0;
        else if (!strcmp(v, "on") && !sp->jinja) return fail(a, "'on' needs a Jinja template with enable_thinking (drop --no-jinja)");
        else if (strcmp(v, "on") && strcmp(v, "auto")) return fail(a, "must be on, off or auto");
    } else if (!strcmp(a, "--tags")) {
        sp->model_tags = v;
    } else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) {
        if (!cli_int(a, v, 1, 1 << 20, &x)) return -1;
    } else {
        return 0;
    }
    return 1;
}

bool cli_serve_llama_takes_value(const char *a)
{
    static const char *const with_value[] = {
        "-s", "--seed", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
        "--presence-penalty", "--frequency-penalty", "-n", "--n-predict", "--predict", "--cors-origins",
        "--reasoning-format", "--reasoning-budget", "-ub", "--ubatch-size", "--tags", "-rea", "--reasoning",
    };
    for (size_t k = 0; k < ARRAY_LEN(with_value); k++)
        if (!strcmp(a, with_value[k])) return true;
    return false;
}

int cli_serve_llama_flag(int argc, char **argv, int *i, srv_params *sp)
{
    const char *a = argv[*i];
    static const char *const refused[][2] = {
        { "--model-url", "a model by URL is not supported; pass -hf USER/REPO[:QUANT] (the hub) or -m FILE.gguf" },
        { "-mu", "a model by URL is not supported; pass -hf USER/REPO[:QUANT] (the hub) or -m FILE.gguf" },
        { "--embedding", "embeddings are not supported" },
        { "--embeddings", "embeddings are not supported" },
        { "--reranking", "reranking is not supported" },
        { "--rerank", "reranking is not supported" },
        { "--lora", "LoRA adapters are not supported" },
        { "-ngl", "polykv runs on the CPU only" },
        { "--n-gpu-layers", "polykv runs on the CPU only" },
        { "--gpu-layers", "polykv runs on the CPU only" },
        { "--mmproj", "multimodal projectors are not supported" },
        { "--mmproj-url", "multimodal projectors are not supported" },
    };
    for (size_t k = 0; k < ARRAY_LEN(refused); k++)
        if (!strcmp(a, refused[k][0])) return fail(a, refused[k][1]);
    if (!strcmp(a, "--verbose")) { sp->verbose = sp->log_requests = true; return 1; }
    if (!strcmp(a, "--props")) { sp->endpoint_props_write = true; return 1; }
    if (!strcmp(a, "--cors-credentials")) { sp->cors_credentials = true; return 1; }
    if (!strcmp(a, "--no-cors-credentials")) { sp->cors_credentials = false; return 1; }
    if (!strcmp(a, "--no-ui") || !strcmp(a, "--no-webui")) { sp->no_ui = true; return 1; }
    if (!strcmp(a, "--prefill-assistant")) { sp->no_prefill_assistant = false; return 1; }
    if (!strcmp(a, "--no-prefill-assistant")) { sp->no_prefill_assistant = true; return 1; }
    if (!strcmp(a, "--ui-mcp-proxy") || !strcmp(a, "--webui-mcp-proxy")) { sp->ui_mcp_proxy = true; return 1; }
    if (!strcmp(a, "--no-ui-mcp-proxy") || !strcmp(a, "--no-webui-mcp-proxy")) {
        sp->ui_mcp_proxy = false;
        return 1;
    }
    if (!strcmp(a, "-cb") || !strcmp(a, "--cont-batching")) return 1;
    /* llama.cpp's backend sampling moves the sampler chain onto the GPU
     * next to the logits, giving the same tokens and probabilities as the
     * host's; polykv samples on the CPU where its logits already are, so
     * the flag changes nothing a client can see. */
    if (!strcmp(a, "--backend-sampling") || !strcmp(a, "--backend_sampling") || !strcmp(a, "-bs"))
        return 1;
    if (!strcmp(a, "-nocb") || !strcmp(a, "--no-cont-batching"))
        return fail(a, "batching is always continuous in polykv");
    if (!cli_serve_llama_takes_value(a)) return 0;
    const char *v = cli_arg(argc, argv, i);
    return v ? valued(a, v, sp) : -1;
}

/* A path from the environment with the leading '/' Vertex AI may leave out. */
static const char *env_path(const char *name, const char *dflt, char *buf, size_t cap)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    snprintf(buf, cap, "%s%s", v[0] == '/' ? "" : "/", v);
    return buf;
}

int cli_serve_gcp_env(srv_params *sp)
{
    static char predict[256], health[256];
    const char *mode = getenv("AIP_MODE");
    if (!mode || strcmp(mode, "PREDICTION")) return 0;
    sp->gcp_predict_route = env_path("AIP_PREDICT_ROUTE", "/predict", predict, sizeof predict);
    sp->gcp_health_route = env_path("AIP_HEALTH_ROUTE", NULL, health, sizeof health);
    const char *port = getenv("AIP_HTTP_PORT");
    long x;
    if (!port || !*port) port = "8080";
    if (!cli_int("AIP_HTTP_PORT", port, 0, 65535, &x)) return -1;
    if (x != sp->port) fprintf(stderr, "polykv: AIP_MODE=PREDICTION: port %ld (AIP_HTTP_PORT), not %d\n", x, sp->port);
    sp->port = (int)x;
    return 1;
}
