/*
 * cli_serve.c - `polykv serve`: the HTTP server (src/server) over one model.
 *
 * Order matters for clients that start the server and poll it: the socket
 * is bound first (so /health answers 503 "loading" at once), then the model
 * is loaded and the engine started, then requests are served until SIGINT
 * or SIGTERM.  Those signals are blocked before any thread starts and
 * taken with sigwait, so no thread is interrupted by them.
 *
 * Without -m it is a router (cli_router.c): no model of its own, one child
 * `polykv serve` per model it starts, with this command's flags.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/eng.h"
#include "../kvev/kvev_pub.h"
#include "../hub/hub.h"
#include "../model/model.h"
#include "../server/srv.h"
#include "../tensor/tq.h"
#include "cli.h"

static void usage(void)
{
    fprintf(stderr,
        "usage: polykv serve -m MODEL [options]\n"
        "       polykv serve [--models-dir DIR] [options]   router mode (no -m): several models,\n"
        "                          each in its own child server started on demand\n"
        "  --models-dir DIR        router: one model per DIR/NAME.gguf, called NAME\n"
        "  --models-max N          router: models loaded at once, the least recently used unloaded\n"
        "                          first (default 4, 0 = no cap)\n"
        "  --models-autoload / --no-models-autoload   router: a request loads the model it names\n"
        "                          (default on; off: POST /models/load first)\n"
        "  --models-preset FILE    router: an INI file of models and their flags (docs/compat.md)\n"
        "  -c, --ctx-size N        KV cells shared by all slots (default 8192)\n"
        "  -np, --parallel N       slots: requests decoded together (default 4)\n"
        "  -t, --threads N         compute threads (default: all CPUs)\n"
        "  -b, --batch-size N      tokens per engine step (default 512)\n"
        "  --batch-decoding N      prompt tokens a step may add while sessions decode (default 0:\n"
        "                          the batch size); shorter steps make decoding sessions wait less\n"
        "  -ctk, --cache-type-k T  K cache type: f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0,\n"
        "                          q5_1, iq4_nl (the block formats need head dims of 32s)\n"
        "  -ctv, --cache-type-v T  V cache type, the same choices\n"
        "  --kv-type T             both\n"
        "  --swa-full              sliding-window layers keep every cell (default: cells behind the\n"
        "                          window are freed, kept only at turn checkpoints; docs/models.md)\n"
        "  --mmap / --no-mmap      map the model file instead of reading it into huge pages\n"
        "                          (starts without a copy; pages shared with other processes)\n"
        "  -cram, --cache-ram MIB  RAM for histories spilled out of the KV cache (default 8192, 0 = none)\n"
        "  --rs-slots N            hybrid models: recurrent states kept, live and checkpoints\n"
        "                          (default 3 x --parallel + 8; docs/hybrid.md)\n"
        "  --host ADDR[,ADDR...]   addresses to listen on, one port (default 127.0.0.1)\n"
        "  --port N                port (default 8080; 0 picks a free one)\n"
        "  --api-key KEY           require Authorization: Bearer KEY (or X-Api-Key) on every route\n"
        "                          but the page's files at / and /assets/\n"
        "  --api-key-file FILE     more keys, one a line: KEY (every right, as --api-key), NAME:KEY (a\n"
        "                          tenant: its own sessions and pools only) or NAME:KEY:admin\n"
        "                          (docs/security.md, \"Tenants\")\n"
        "  --public-probes         with a key: leave /health and /metrics open (probes, scrapers)\n"
        "  --slot-save-path DIR    POST /slots/{id}?action=save|restore read and write files in DIR\n"
        "  --slot-save-max-bytes N the files in --slot-save-path may hold at most N bytes (K, M, G, T\n"
        "                          suffixes); a save past it answers 507 (default 0: no bound)\n"
        "  --pool-dir DIR          pinned pools are saved in DIR and restored at start (docs/pools.md)\n"
        "  -a, --alias NAME        the model's name in responses (default: file name)\n"
        "  --jinja / --no-jinja    render the chat template with the Jinja engine (default on;\n"
        "                          off: the built-in ChatML, Llama 3, Llama 2 and Mistral layouts)\n"
        "  --chat-template-file F  a Jinja chat template to use instead of the model's\n"
        "                          (one that does not compile stops the start)\n"
        "  --chat-template NAME    chatml | llama3 | llama2 | llama2-sys | mistral | command-r: a built-in layout\n                          (default: the model's; chatml when unknown)\n"
        "  --metrics               enable GET /metrics (Prometheus)\n"
        "  --slots / --no-slots    enable / disable GET /slots (default on)\n"
        "  -to, --timeout S        idle connection timeout in seconds (default 600)\n"
        "  --max-body BYTES        largest request body (default 8388608)\n"
        "  --max-connections N     concurrent connections (default 256)\n"
        "  --header-timeout S      close a connection that sends no request for S seconds (default 10)\n"
        "  --max-per-ip N          connections from one address (default 0: no cap)\n"
        "  -v, --log-requests      one log line per request\n"
        "  --context-shift / --no-context-shift   a full context drops half its tokens after n_keep\n"
        "                          and goes on (default off)\n"
        "                          (sessions whose cells are shared, e.g. on a pool, stop instead)\n"
        "  -kvu, --kv-unified      a slot may use the whole context (-c) instead of -c / -np; the\n"
        "                          newest request ends (500, context size exceeded) when cells run out\n"
        "  --no-kv-unified         each slot holds -c / -np positions (the default)\n"
        "  --sleep-idle-seconds N  after N s with no task, free the weights and the KV cache (histories\n"
        "                          dropped, pools evicted); the next request reloads them (-1: never)\n"
        "  --pools N               sequence ids kept for pools (default 16, at most 128)\n"
        "  --admission-tps F       a server-wide admission policy (docs/admission.md): floor F tok/s\n"
        "                          per session; also every pool policy's default\n"
        "  --admission-mode M      advisory | enforced (default advisory)\n"
        "  --admission-on-saturation S   reject | warn | queue (default reject)\n"
        "  --admission-settle-tokens N, --admission-settle-max-ms MS, --admission-queue-max-ms MS,\n"
        "  --admission-guarantee N  the policy's other fields (48, 5000, 30000, 1)\n"
        "  --admission-margin-scale X   the floor arm's margin, times X (0..4, default 1)\n"
        "  --kv-events-endpoint E  publish KV events (docs/kv-events.md) on ZMQ endpoint E, bound when\n"
        "                          it has '*' (tcp://*:5557), else connected\n"
        "  --kv-events-replay-endpoint E   answer replay requests there (ROUTER)\n"
        "  --kv-events-topic T     default kv@<$POD_IP or host>@<model>\n"
        "  --kv-events-encoding array|tagged   events as positional arrays (default: what llm-d\n"
        "                          decodes) or as maps with \"type\"\n"
        "  --kv-events-config JSON vLLM's KVEventsConfig (enable_kv_cache_events, endpoint, ...)\n"
        "  --kv-block-size N       tokens per KV events block and lookup block (default 16)\n"
        "  --spec-type T           speculative decoding (docs/speculative.md): ngram-cache (the\n"
        "                          session's tokens and the server's recent generations),\n"
        "                          ngram-simple (the session's own, one key length) or draft-simple\n"
        "                          (a draft model, -md; its default with -md) or draft-mtp (a Qwen3.5\n"
        "                          file's own MTP block); default none\n"
        "  -md, --spec-draft-model FILE   a draft model: a smaller dense model, the same vocabulary\n"
        "  --spec-draft-p-min P    the draft stops where its token's probability is below P (0)\n"
        "  --spec-ngram-p-min P|auto   an n-gram guess stops at the depth whose chance of being kept\n"
        "                          (tallied per key length) is below P; auto (default): what a row\n"
        "                          costs over what a token is worth, as the steps measure it\n"
        "  --spec-draft-n-max N    guesses a session verifies per step, at most (default 16, 3 with\n"
        "                          a draft model; <= 64)\n"
        "  --spec-draft-n-min N    a shorter guess is not verified (default 0)\n"
        "  --spec-ngram-simple-size-n N, --spec-ngram-simple-size-m M   ngram-simple's key and its\n"
        "                          longest guess (12, 48)\n"
        "  --pool-grace-ms MS      a pool nothing uses is kept this long before cache pressure may\n"
        "                          evict it (default 30000)\n"
        "slot placement and retention (docs/policy.md; each also POLYKV_SLOT_<NAME>):\n");
    for (int i = 0; i < pol_param_count(); i++) {
        const pol_param_info *pi = pol_param_at(i);
        fprintf(stderr, "  --slot-%-18s %s\n", pi->name, pi->help);
    }
    cli_serve_llama_usage();
    cli_hub_usage();
}

typedef struct serve_opts {
    const char *model;           /* -m, or the file -hf resolved to */
    hub_opts hub;                /* -hf and its flags and environment */
    bool hf_flag;                /* -hf on the command line (not from LLAMA_ARG_HF_REPO) */
    char *hub_path;              /* what -hf resolved to (malloc'ed) */
    cli_router_opts router;
    bool router_flag;            /* a --models-* flag was given */
    bool mmap;
    eng_params ep;
    srv_params sp;
    kvev_pub_config kc;          /* --kv-events-* */
    bool kv_events;              /* on: a config enabling them, or an endpoint flag */
    const char *draft;           /* -md: a draft model (draft-simple) */
    bool n_max_set;              /* --spec-draft-n-max given */
} serve_opts;

/* --kv-events-config JSON (vLLM's KVEventsConfig) and polykv's single
 * flags, which also turn events on (docs/kv-events.md). */
static bool kv_events_flag(serve_opts *o, const char *a, const char *v)
{
    kvev_pub_config *c = &o->kc;
    if (!strcmp(a, "--kv-events-config")) {
        char why[256];
        if (kvev_pub_parse(v, c, &o->kv_events, why, sizeof why) == PK_OK) return true;
        fprintf(stderr, "polykv serve: %s\n", why);
        return false;
    }
    char *dst = !strcmp(a, "--kv-events-endpoint") ? c->endpoint
              : !strcmp(a, "--kv-events-replay-endpoint") ? c->replay_endpoint
              : !strcmp(a, "--kv-events-topic") ? c->topic : NULL;
    size_t cap = dst == c->topic ? sizeof c->topic : sizeof c->endpoint;
    if (dst) {
        if (strlen(v) >= cap || (dst == c->endpoint && !*v)) {
            fprintf(stderr, "polykv serve: %s: bad value\n", a);
            return false;
        }
        snprintf(dst, cap, "%s", v);
    } else if (!strcmp(a, "--kv-events-encoding") && (!strcmp(v, "tagged") || !strcmp(v, "array"))) {
        c->tagged = v[0] == 't';
    } else {
        fprintf(stderr, "polykv serve: %s: %s\n", a,
                !strcmp(a, "--kv-events-encoding") ? "must be tagged or array" : "unknown option");
        return false;
    }
    o->kv_events = true;
    return true;
}

/* The topic llm-d reads a replica and model from: kv@<pod>@<model>, the
 * pod being srv_replica_name's ($POD_IP:port, llm-d's form). */
static void kv_events_topic(serve_opts *o, const model *m, int port)
{
    if (o->kc.topic[0]) return;
    char name[240], pod[240];
    srv_model_name(o->sp.model_alias, o->model, m, name, sizeof name);
    srv_replica_name(port, pod, sizeof pod);
    snprintf(o->kc.topic, sizeof o->kc.topic, "kv@%s@%s", pod, name);
}

/* --admission-NAME VALUE: any of them makes the server-wide policy set. */
static bool admission_flag(adm_policy *p, const char *name, const char *v)
{
    long x;
    char flag[64];
    snprintf(flag, sizeof flag, "--admission-%s", name);
    p->set = true;
    double *num = !strcmp(name, "tps") ? &p->target_tps : !strcmp(name, "margin-scale") ? &p->margin_scale : NULL;
    if (num) {
        char *end;
        *num = strtod(v, &end);
        if (end == v || *end || adm_policy_check(p) != PK_OK) {
            fprintf(stderr, "polykv serve: %s: bad value '%s'\n", flag, v);
            return false;
        }
        return true;
    }
    if (!strcmp(name, "mode")) {
        if (adm_mode_parse(v, &p->mode) == PK_OK) return true;
        fprintf(stderr, "polykv serve: %s must be advisory or enforced\n", flag);
        return false;
    }
    if (!strcmp(name, "on-saturation")) {
        if (adm_sat_parse(v, &p->on_saturation) == PK_OK) return true;
        fprintf(stderr, "polykv serve: %s must be reject, warn or queue\n", flag);
        return false;
    }
    int32_t *f = !strcmp(name, "settle-tokens") ? &p->settle_tokens : !strcmp(name, "settle-max-ms") ? &p->settle_max_ms
               : !strcmp(name, "queue-max-ms") ? &p->queue_max_ms : !strcmp(name, "guarantee") ? &p->guarantee_min_sessions
               : NULL;
    if (!f) {
        fprintf(stderr, "polykv serve: unknown option %s\n", flag);
        return false;
    }
    if (!cli_int(flag, v, 0, 10000000, &x)) return false;
    *f = (int32_t)x;
    return true;
}

/* --spec-type NAME[,NAME]: llama-server's names; the ones polykv has not
 * built are refused by name (docs/speculative.md). */
static bool spec_flag(spec_params *p, const char *a, const char *v)
{
    long x;
    if (!strcmp(a, "--spec-type")) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", v);
        int n = 0;
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++) {
            spec_kind k;
            if (!spec_kind_parse(t, &k)) {
                fprintf(stderr, "polykv serve: --spec-type %s: polykv speculates with ngram-simple, ngram-cache, "
                        "draft-simple or draft-mtp (the other types are not built)\n", t);
                return false;
            }
            if (n > 0 && k != p->kind) {
                fprintf(stderr, "polykv serve: --spec-type %s: one type at a time\n", v);
                return false;
            }
            p->kind = k;
        }
        return true;
    }
    if (!strcmp(a, "--spec-ngram-p-min")) {
        double pm = -1;
        if (strcmp(v, "auto") && !cli_float(a, v, &pm)) return false;
        if (strcmp(v, "auto") && !(pm >= 0 && pm <= 1)) {
            fprintf(stderr, "polykv serve: --spec-ngram-p-min must be in 0..1 or auto\n");
            return false;
        }
        p->ngram_p_min = (float)pm;
        return true;
    }
    if (!strcmp(a, "--spec-draft-p-min")) {
        double pm;
        if (!cli_float(a, v, &pm)) return false;
        p->p_min = (float)pm;
        return true;
    }
    int32_t *f = !strcmp(a, "--spec-draft-n-max") ? &p->n_max : !strcmp(a, "--spec-draft-n-min") ? &p->n_min
               : !strcmp(a, "--spec-ngram-simple-size-n") ? &p->size_n
               : !strcmp(a, "--spec-ngram-simple-size-m") ? &p->size_m : NULL;
    if (!f) {
        fprintf(stderr, "polykv serve: unknown option %s\n", a);
        return false;
    }
    if (!cli_int(a, v, 0, 1024, &x)) return false;
    *f = (int32_t)x;                     /* checked with the others after the last flag */
    return true;
}

/* The options below that take a value: anything else is unknown, and is
 * named as such rather than as missing its value. */
static bool takes_value(const char *a)
{
    static const char *const names[] = {
        "-m", "--model", "-c", "--ctx-size", "-np", "--parallel", "-t", "--threads", "-cram", "--cache-ram",
        "-b", "--batch-size", "--batch-decoding", "--pools", "--pool-grace-ms", "--rs-slots", "--host", "--port", "--api-key",
        "--api-key-file",
        "-a", "--alias", "--chat-template", "--chat-template-file", "-to", "--timeout", "--max-body", "--header-timeout", "--max-per-ip",
        "--max-connections", "--kv-type", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "--pool-dir", "--models-dir", "--models-max", "--models-preset",
        "--sleep-idle-seconds", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min",
        "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "-md", "--spec-draft-model", "--model-draft",
        "--spec-draft-p-min", "--draft-p-min", "--spec-ngram-p-min", "--kv-events-config", "--kv-events-endpoint",
        "--kv-events-replay-endpoint", "--kv-events-topic", "--kv-events-encoding", "--kv-block-size",
    };
    if (!strncmp(a, "--slot-", 7) || !strncmp(a, "--admission-", 12)) return true;
    for (size_t k = 0; k < ARRAY_LEN(names); k++)
        if (!strcmp(a, names[k])) return true;
    return false;
}

/* The flags a router's children get: all of the router's but where it
 * listens, the model names (each child's is its model's) and the router's
 * own.  Run after parse accepted argv, so every value is there. */
static bool child_args(int argc, char **argv, serve_opts *o)
{
    static const char *const own[] = {
        "--host", "--port", "-a", "--alias", "--tags", "--models-dir", "--models-max", "--models-autoload",
        "--no-models-autoload", "--models-preset",
    };
    o->router.child_args = calloc((size_t)argc + 1, sizeof *o->router.child_args);
    if (!o->router.child_args) return false;
    for (int i = 1; i < argc; i++) {
        int n = 1 + cli_serve_takes_value(argv[i]);
        bool keep = true;
        for (size_t k = 0; k < ARRAY_LEN(own); k++) keep &= strcmp(argv[i], own[k]) != 0;
        for (int k = 0; keep && k < n && i + k < argc; k++) o->router.child_args[o->router.n_child_args++] = argv[i + k];
        i += n - 1;
    }
    return true;
}

/* --slot-save-path and --pool-dir must not be one directory, nor one inside
 * the other: the pool-dir scan would read clients' files as pools (a
 * client's "pool-9999.pkv" ran the pool ids past their range), and clients
 * could overwrite the pools' files.  Compared after realpath, so links and
 * "a/../b" spellings count.  False (with the message printed) when they
 * overlap. */
static bool dirs_apart(const char *slots, const char *pools)
{
    if (!slots || !pools) return true;
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(slots, a) || !realpath(pools, b)) {
        fprintf(stderr, "polykv serve: --slot-save-path %s / --pool-dir %s: %s\n", slots, pools, strerror(errno));
        return false;
    }
    size_t na = strlen(a), nb = strlen(b), n = MIN(na, nb);
    /* One is a prefix of the other at a '/' boundary (or they are equal; "/" holds everything). */
    bool nested = !strncmp(a, b, n) && (na == nb || n == 1 || (na > nb ? a[n] : b[n]) == '/');
    if (!nested) return true;
    fprintf(stderr, "polykv serve: --slot-save-path %s and --pool-dir %s overlap (%s, %s): give each its own "
            "directory, neither inside the other\n", slots, pools, a, b);
    return false;
}

static bool parse(int argc, char **argv, serve_opts *o)
{
    o->router.models_max = 4;
    o->router.autoload = true;
    o->ep = eng_default_params();
    o->ep.n_threads = cli_default_threads();
    o->sp = srv_default_params();
    o->kc = kvev_pub_default();
    cli_hub_env(&o->hub);
    const char *bad = NULL;
    if (pol_params_from_env(&o->ep.policy, &bad) != PK_OK) {   /* flags below override */
        fprintf(stderr, "polykv serve: %s: bad value\n", bad ? bad : "POLYKV_SLOT_*");
        return false;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); exit(0); }
        if (!strcmp(a, "--metrics")) { o->sp.endpoint_metrics = true; continue; }
        if (!strcmp(a, "--slots")) { o->sp.endpoint_slots = true; continue; }
        if (!strcmp(a, "--no-slots")) { o->sp.endpoint_slots = false; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--log-requests")) { o->sp.log_requests = true; continue; }
        if (!strcmp(a, "--mmap") || !strcmp(a, "--no-mmap")) { o->mmap = !strcmp(a, "--mmap"); continue; }
        if (!strcmp(a, "--jinja") || !strcmp(a, "--no-jinja")) { o->sp.jinja = !strcmp(a, "--jinja"); continue; }
        if (!strcmp(a, "--context-shift") || !strcmp(a, "--no-context-shift")) {
            o->ep.ctx_shift = !strcmp(a, "--context-shift");
            continue;
        }
        if (!strcmp(a, "--public-probes")) { o->sp.public_probes = true; continue; }
        if (!strcmp(a, "--models-autoload") || !strcmp(a, "--no-models-autoload")) {
            o->router.autoload = a[2] == 'm';
            o->router_flag = true;
            continue;
        }
        if (!strcmp(a, "-kvu") || !strcmp(a, "--kv-unified")) { o->ep.kv_unified = true; continue; }
        if (!strcmp(a, "--swa-full")) { o->ep.swa_full = true; continue; }
        if (!strcmp(a, "-no-kvu") || !strcmp(a, "--no-kv-unified")) { o->ep.kv_unified = false; continue; }
        const char *was = o->hub.repo;
        int hub = cli_hub_flag(argc, argv, &i, &o->hub);
        if (hub) {
            if (hub < 0) return false;
            o->hf_flag |= o->hub.repo != was;
            continue;
        }
        int llama = cli_serve_llama_flag(argc, argv, &i, &o->sp);
        if (llama) {
            if (llama < 0) return false;
            continue;
        }
        if (!takes_value(a)) {
            fprintf(stderr, "polykv serve: unknown option %s (polykv serve --help lists them all)\n", a);
            return false;
        }
        if (!(v = cli_arg(argc, argv, &i))) return false;
        if (!strcmp(a, "--slot-save-path") || !strcmp(a, "--pool-dir")) {
            struct stat sb;
            if (stat(v, &sb) || !S_ISDIR(sb.st_mode) || access(v, R_OK | W_OK | X_OK)) {
                fprintf(stderr, "polykv serve: %s %s: not a directory this process can read and write\n", a, v);
                return false;
            }
            if (a[2] == 's') o->sp.slot_save_path = v;
            else o->ep.pool_dir = v;
            continue;
        }
        if (!strcmp(a, "--slot-save-max-bytes")) {
            if (!cli_bytes(a, v, &o->ep.slot_save_max_bytes)) return false;
            continue;
        }
        if (!strncmp(a, "--slot-", 7)) {
            pk_status ps = pol_params_set(&o->ep.policy, a, v);
            if (ps == PK_OK) continue;
            fprintf(stderr, "polykv serve: %s: %s\n", a, ps == PK_ENOTFOUND ? "unknown option" : "bad value");
            return false;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--models-dir")) { o->router.models_dir = v; o->router_flag = true; }
        else if (!strcmp(a, "--models-max")) { if (!cli_int(a, v, 0, 1 << 16, &x)) return false; o->router.models_max = (int)x; o->router_flag = true; }
        else if (!strcmp(a, "--models-preset")) { o->router.models_preset = v; o->router_flag = true; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 1, 1 << 24, &x)) return false; o->ep.n_ctx = (int32_t)x; }
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) { if (!cli_int(a, v, 1, ENG_MAX_SLOTS, &x)) return false; o->ep.n_slots = (int32_t)x; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!cli_int(a, v, 1, 1024, &x)) return false; o->ep.n_threads = (int32_t)x; }
        else if (!strcmp(a, "-cram") || !strcmp(a, "--cache-ram")) { if (!cli_int(a, v, 0, 1 << 24, &x)) return false; o->ep.cache_ram_mib = (int32_t)x; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (!cli_int(a, v, 1, 1 << 20, &x)) return false; o->ep.n_batch = (int32_t)x; }
        else if (!strcmp(a, "--batch-decoding")) { if (!cli_int(a, v, 0, 1 << 20, &x)) return false; o->ep.n_batch_decoding = (int32_t)x; }
        else if (!strcmp(a, "--sleep-idle-seconds")) {
            /* llama-server's range: -1 never (the default), else at least 1 s */
            if (!cli_int(a, v, -1, 1 << 20, &x)) return false;
            if (x == 0) {
                fprintf(stderr, "polykv serve: %s must be -1 (never) or at least 1\n", a);
                return false;
            }
            o->ep.sleep_idle_ms = x < 0 ? 0 : (int32_t)x * 1000;
        }
        else if (!strcmp(a, "-md") || !strcmp(a, "--spec-draft-model") || !strcmp(a, "--model-draft")) o->draft = v;
        else if (!strcmp(a, "--draft-p-min")) { if (!spec_flag(&o->ep.spec, "--spec-draft-p-min", v)) return false; }
        else if (!strncmp(a, "--spec-", 7)) {
            if (!spec_flag(&o->ep.spec, a, v)) return false;
            o->n_max_set |= !strcmp(a, "--spec-draft-n-max");
        }
        else if (!strncmp(a, "--kv-events-", 12)) { if (!kv_events_flag(o, a, v)) return false; }
        else if (!strcmp(a, "--kv-block-size")) { if (!cli_int(a, v, 1, 1024, &x)) return false; o->ep.kv_block_size = (int32_t)x; }
        else if (!strcmp(a, "--rs-slots")) { if (!cli_int(a, v, 1, 4096, &x)) return false; o->ep.n_rs = (int32_t)x; }
        else if (!strcmp(a, "--pools")) { if (!cli_int(a, v, 0, ENG_MAX_POOLS, &x)) return false; o->ep.n_pools = (int32_t)x; }
        else if (!strcmp(a, "--pool-grace-ms")) { if (!cli_int(a, v, 0, 1 << 30, &x)) return false; o->ep.pool_grace_ms = (int32_t)x; }
        else if (!strncmp(a, "--admission-", 12)) { if (!admission_flag(&o->ep.admission, a + 12, v)) return false; }
        else if (!strcmp(a, "--host")) o->sp.host = v;
        else if (!strcmp(a, "--port")) { if (!cli_int(a, v, 0, 65535, &x)) return false; o->sp.port = (int)x; }
        else if (!strcmp(a, "--api-key")) o->sp.api_key = v;
        else if (!strcmp(a, "--api-key-file")) o->sp.api_key_file = v;
        else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) o->sp.model_alias = v;
        else if (!strcmp(a, "--chat-template")) o->sp.chat_template = v;
        else if (!strcmp(a, "--chat-template-file")) o->sp.chat_template_file = v;
        else if (!strcmp(a, "-to") || !strcmp(a, "--timeout")) { if (!cli_int(a, v, 0, 1 << 24, &x)) return false; o->sp.timeout_s = (int)x; }
        else if (!strcmp(a, "--max-body")) { if (!cli_int(a, v, 1, 1L << 34, &x)) return false; o->sp.max_body_bytes = (size_t)x; }
        else if (!strcmp(a, "--header-timeout")) { if (!cli_int(a, v, 1, 1 << 24, &x)) return false; o->sp.header_timeout_s = (int)x; }
        else if (!strcmp(a, "--max-per-ip")) { if (!cli_int(a, v, 0, 1 << 16, &x)) return false; o->sp.max_per_ip = (int)x; }
        else if (!strcmp(a, "--max-connections")) { if (!cli_int(a, v, 1, 1 << 16, &x)) return false; o->sp.max_connections = (int)x; }
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) { if (!cli_kv_type(a, v, &o->ep.type_k)) return false; }
        else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) { if (!cli_kv_type(a, v, &o->ep.type_v)) return false; }
        else if (!strcmp(a, "--kv-type")) {
            if (!cli_kv_type(a, v, &o->ep.type_k)) return false;
            o->ep.type_v = o->ep.type_k;
        } else {
            fprintf(stderr, "polykv serve: unknown option %s\n", a);
            return false;
        }
    }
    if (!dirs_apart(o->sp.slot_save_path, o->ep.pool_dir)) return false;
    if (o->model && o->hf_flag) {
        fprintf(stderr, "polykv serve: -m and -hf name two models: give one\n");
        return false;
    }
    if (o->model) o->hub.repo = o->hub.file = NULL;     /* -m wins over LLAMA_ARG_HF_REPO */
    if (cli_hub_check(&o->hub, "serve")) return false;
    bool one_model = o->model || o->hub.repo;
    /* A draft model speculates unless told otherwise, llama-server's 3
     * guesses at most unless told otherwise. */
    if (o->draft && o->ep.spec.kind == SPEC_NONE) o->ep.spec.kind = SPEC_DRAFT_SIMPLE;
    if ((o->draft || o->ep.spec.kind == SPEC_DRAFT_MTP) && !o->n_max_set) o->ep.spec.n_max = MIN(o->ep.spec.n_max, 3);
    if (o->ep.spec.kind == SPEC_DRAFT_SIMPLE && !o->draft) {
        fprintf(stderr, "polykv serve: --spec-type draft-simple needs a draft model (-md FILE)\n");
        return false;
    }
    const char *bad_spec = spec_params_check(&o->ep.spec);
    if (bad_spec) {
        fprintf(stderr, "polykv serve: %s\n", bad_spec);
        return false;
    }
    if (one_model && o->router_flag) {
        fprintf(stderr, "polykv serve: --models-dir, --models-preset, --models-max and --models-autoload are for "
                        "router mode (without -m)\n");
        return false;
    }
    if (!one_model && o->sp.api_key_file) {
        /* The router's own routes (load, unload) and its children's health
         * checks know one key; tenants' namespaces are a model server's. */
        fprintf(stderr, "polykv serve: --api-key-file is for a one-model server (-m), not router mode\n");
        return false;
    }
    if (!one_model && o->kv_events) {
        /* Every child would publish on one endpoint: events are a
         * replica's, one model each (docs/kv-events.md). */
        fprintf(stderr, "polykv serve: KV events are a one-model server's (-m): run one per replica, not router mode\n");
        return false;
    }
    if (!one_model && !child_args(argc, argv, o)) return false;
    /* Vertex AI's environment is a one-model server's; a router's children
     * inherit it but listen where the router says. */
    if (!one_model && getenv("AIP_MODE") && !strcmp(getenv("AIP_MODE"), "PREDICTION"))
        fprintf(stderr, "polykv: AIP_MODE=PREDICTION: the predict route is a one-model server's (-m); not in "
                        "router mode\n");
    if (one_model && !getenv("POLYKV_EXIT_ON_STDIN_EOF") && cli_serve_gcp_env(&o->sp) < 0) return false;
    if (o->ep.ctx_shift)
        fprintf(stderr, "polykv: --context-shift applies to sessions whose cells are their own; a session on a "
                        "pool (or sharing another's cells) stops at its context's end instead (truncated)\n");
    return true;
}

/* A router's child (POLYKV_EXIT_ON_STDIN_EOF=1) stops when its stdin ends:
 * the router holds the pipe's only write end, so that is the router gone,
 * however it went. */
static void *watch_stdin(void *arg)
{
    char buf[256];
    while (read(0, buf, sizeof buf) > 0) {}
    fprintf(stderr, "polykv: the router is gone (stdin closed): shutting down\n");
    kill(getpid(), SIGTERM);
    return NULL;
}

void cli_serve_note_probes(const srv_params *sp)
{
    if (!sp->api_key || sp->public_probes) return;
    fprintf(stderr, "polykv: --api-key guards /health and /metrics too (llama-server leaves /health open); "
                    "for Kubernetes probes or a scraper without the key, add --public-probes\n");
}

bool cli_serve_takes_value(const char *a)
{
    return takes_value(a) || cli_serve_llama_takes_value(a) || cli_hub_takes_value(a);
}

bool cli_serve_check(int argc, char **argv)
{
    serve_opts o = {0};
    bool ok = parse(argc, argv, &o);
    free(o.router.child_args);
    return ok;
}

int cli_serve(int argc, char **argv)
{
    serve_opts o = {0};
    if (!parse(argc, argv, &o)) {
        free(o.router.child_args);
        return 2;
    }

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    const char *watch = getenv("POLYKV_EXIT_ON_STDIN_EOF");
    pthread_t watcher;
    if (watch && !strcmp(watch, "1") && !pthread_create(&watcher, NULL, watch_stdin, NULL)) pthread_detach(watcher);
    if (!o.model && !o.hub.repo) {
        int rc = cli_router(&o.sp, &o.router);
        free(o.router.child_args);
        return rc;
    }
    /* As llama-server: the model is fetched before the server listens; its
     * name in responses is the -hf text unless -a gives one. */
    if (o.hub.repo) {
        if (cli_hub_resolve(&o.hub, &o.hub_path)) return 1;
        o.model = o.hub_path;
        if (!o.sp.model_alias) o.sp.model_alias = o.hub.repo;
    }

    char err[512] = "";
    srv *s;
    if (srv_new(&o.sp, &s, err, sizeof err)) {
        fprintf(stderr, "polykv: %s\n", err);
        free(o.hub_path);
        return 1;
    }
    fprintf(stderr, "polykv: listening on");
    for (const char *h = o.sp.host; *h;) {       /* each address of the list, as a URL */
        size_t n = strcspn(h, ",");
        while (n && *h == ' ') h++, n--;
        bool v6 = memchr(h, ':', n) && *h != '[';
        if (n) fprintf(stderr, " http://%s%.*s%s:%d", v6 ? "[" : "", (int)n, h, v6 ? "]" : "", srv_port(s));
        h += n + (h[n] == ',');
    }
    fprintf(stderr, "\n");
    cli_serve_note_probes(&o.sp);

    double t0 = pk_time_ms();
    model *m = NULL;
    eng *e = NULL;
    kvev_pub *kv = NULL;
    pk_status st;
    model *dm = NULL;
    const char *why;
    if ((st = model_load(o.model, o.mmap ? MODEL_MMAP : MODEL_COPY, &m, err, sizeof err)) != PK_OK) {
        fprintf(stderr, "polykv: %s: %s\n", o.model, err);
    } else if (o.draft && (st = model_load(o.draft, o.mmap ? MODEL_MMAP : MODEL_COPY, &dm, err, sizeof err)) != PK_OK) {
        fprintf(stderr, "polykv: %s: %s\n", o.draft, err);
    } else if (dm && (why = eng_draft_compatible(m, dm))) {
        fprintf(stderr, "polykv: -md %s: %s\n", o.draft, why);
        st = PK_EINVAL;
    } else if (o.ep.spec.kind == SPEC_DRAFT_MTP && !model_has_mtp(m)) {
        fprintf(stderr, "polykv: --spec-type draft-mtp: %s has no MTP block (a Qwen3.5 file with nextn "
                        "tensors has one)\n", o.model);
        st = PK_EINVAL;
    } else if (!cli_kv_types_ok(m, o.ep.type_k, o.ep.type_v)) {
        st = PK_EINVAL;
    } else if (o.kv_events && (kv_events_topic(&o, m, srv_port(s)), st = kvev_pub_new(&o.kc, &kv, err, sizeof err)) != PK_OK) {
        fprintf(stderr, "polykv: %s\n", err);
    } else if ((o.ep.kv_events = kv, o.ep.draft = dm, st = eng_new(m, &o.ep, &e)) != PK_OK) {
        fprintf(stderr, "polykv: cannot start the engine (%d slots, %d cells): %s\n", o.ep.n_slots, o.ep.n_ctx,
                pk_status_str(st));
    } else if ((srv_set_kv_events(s, kv), st = srv_set_engine(s, e, o.model, err, sizeof err)) != PK_OK) {
        fprintf(stderr, "polykv: %s\n", err);
    }
    if (st != PK_OK) {
        srv_free(s);
        eng_free(e);
        kvev_pub_free(kv);
        model_free(dm);
        model_free(m);
        free(o.hub_path);
        return 1;
    }
    fprintf(stderr, "polykv: model %s (%s, %s) loaded in %.0f ms; %d slots of %d positions, %d threads; ready\n",
            o.model, model_desc(m), o.mmap ? "mapped" : "mapped, weights copying into huge pages", pk_time_ms() - t0,
            o.ep.n_slots, eng_n_ctx_slot(e), o.ep.n_threads);
    if (model_state_bytes(m))
        fprintf(stderr, "polykv: hybrid model: a recurrent state of %.2f MiB per sequence and per checkpoint, "
                "%d state slots; no context shift: a session stops (truncated) at its context's end\n",
                model_state_bytes(m) / 1048576.0, eng_n_states(e));
    if (eng_window(e))
        fprintf(stderr, "polykv: sliding-window layers: cells more than %d positions behind a session's end are "
                "freed, kept at its turn checkpoints (--swa-full keeps them all)\n", eng_window(e));
    if (dm)
        fprintf(stderr, "polykv: draft model %s (%s): up to %d guesses a step (draft-simple)\n", o.draft,
                model_desc(dm), o.ep.spec.n_max);
    if (o.ep.spec.kind == SPEC_DRAFT_MTP)
        fprintf(stderr, "polykv: the model's MTP block drafts up to %d guesses a step (draft-mtp); its K/V are "
                        "one more layer of the cache\n", o.ep.spec.n_max);
    if (kv)
        fprintf(stderr, "polykv: KV events on %s%s%s, topic %s, blocks of %d tokens, %s encoding\n", o.kc.endpoint,
                o.kc.replay_endpoint[0] ? ", replay on " : "", o.kc.replay_endpoint, o.kc.topic, o.ep.kv_block_size,
                o.kc.tagged ? "tagged" : "array");

    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "polykv: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_free(s);
    eng_free(e);
    kvev_pub_free(kv);
    model_free(dm);
    model_free(m);
    free(o.hub_path);
    return 0;
}
