/*
 * cli_router.c - `polykv serve` in router mode (no -m): the registry of
 * models and their children (src/router) behind the HTTP server's router
 * routes (srv_router.c), until SIGINT or SIGTERM; then the server stops
 * first (no request reaches a child after), then every child.
 *
 * --models-preset's sections become flags here (llama-server's rules): a
 * key is a flag without its dashes (`c = 4096` is -c 4096, `ctx-size =
 * 4096` --ctx-size 4096), `true` / `false` give a switch or its `--no-`
 * form; `model` is the file, `load-on-startup` loads it at start; [*]
 * applies to every model.  Each model's whole command line is checked
 * with serve's own parser before the router listens, so a bad key stops
 * the start with serve's message, not a child later.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../router/rt.h"
#include "../server/srv.h"
#include "cli.h"

/* A child that is not healthy by then has failed (a large model read from
 * a slow disk takes minutes). */
#define LOAD_TIMEOUT_MS (10 * 60 * 1000)

typedef struct presets presets;
static int serve(srv_params *sp, const cli_router_opts *ro, const presets *ps);

/* Growing arrays of strings owned here. */
typedef struct strv {
    char **v;
    int n;
    size_t cap;
} strv;

static bool strv_add(strv *s, const char *a)
{
    char *c = strdup(a);
    if (!c || pk_grow((void **)&s->v, &s->cap, (size_t)s->n + 1, sizeof *s->v)) {
        free(c);
        return false;
    }
    s->v[s->n++] = c;
    return true;
}

static void strv_free(strv *s)
{
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static bool truthy(const char *v, bool *out)
{
    static const char *const yes[] = { "true", "1", "on", "yes", "" }, *const no[] = { "false", "0", "off", "no" };
    for (size_t k = 0; k < ARRAY_LEN(yes); k++)
        if (!strcasecmp(v, yes[k])) return *out = true;
    for (size_t k = 0; k < ARRAY_LEN(no); k++)
        if (!strcasecmp(v, no[k])) return !(*out = false);
    return false;
}

/* One key = value of section sec as serve flags on out.  False with a
 * message for a key the router sets itself or that is not a flag's name. */
static bool preset_flag(const char *sec, const rt_kv *kv, strv *out)
{
    static const char *const routers[] = {
        "host", "port", "a", "alias", "tags", "api-key", "m", "model", "models-dir", "models-preset", "models-max",
        "models-autoload", "no-models-autoload", "h", "help",
    };
    const char *k = kv->key;
    for (size_t i = 0; i < ARRAY_LEN(routers); i++)
        if (!strcmp(k, routers[i])) {
            fprintf(stderr, "polykv: --models-preset [%s]: '%s' is the router's own (set on its command line)\n", sec, k);
            return false;
        }
    if (!strncmp(k, "LLAMA_ARG_", 10) || k[0] == '-') {
        fprintf(stderr, "polykv: --models-preset [%s]: '%s': name the flag without dashes (ctx-size = 4096)\n", sec, k);
        return false;
    }
    char flag[128];
    snprintf(flag, sizeof flag, "-%s", k);
    if (!cli_serve_takes_value(flag)) snprintf(flag, sizeof flag, "--%s", k);
    if (cli_serve_takes_value(flag)) return strv_add(out, flag) && strv_add(out, kv->value);
    bool on;
    if (!truthy(kv->value, &on)) {
        fprintf(stderr, "polykv: --models-preset [%s]: %s = %s: no flag of serve takes a value by that name, and "
                        "a switch is true or false\n", sec, k, kv->value);
        return false;
    }
    if (!on) snprintf(flag, sizeof flag, strncmp(k, "no-", 3) ? "--no-%s" : "--%s", strncmp(k, "no-", 3) ? k : k + 3);
    return strv_add(out, flag);
}

/* The preset file as specs: global flags, one spec per named section with
 * its flags (and path), the models to load at start. */
typedef struct presets {
    rt_ini ini;
    strv global;
    strv *args;                 /* [n_sec] */
    rt_spec *specs;
    int n_specs;
    strv load;                  /* names of load-on-startup models */
} presets;

static void presets_free(presets *ps)
{
    for (int i = 0; ps->args && i < ps->ini.n_sec; i++) strv_free(&ps->args[i]);
    free(ps->args);
    free(ps->specs);
    strv_free(&ps->global);
    strv_free(&ps->load);
    rt_ini_free(&ps->ini);
}

static bool presets_read(const char *file, presets *ps)
{
    char err[512] = "";
    if (rt_ini_load(file, &ps->ini, err, sizeof err)) {
        fprintf(stderr, "polykv: --models-preset %s\n", err);
        return false;
    }
    ps->args = calloc((size_t)ps->ini.n_sec, sizeof *ps->args);
    ps->specs = calloc((size_t)ps->ini.n_sec, sizeof *ps->specs);
    if (!ps->args || !ps->specs) return false;
    for (int i = 0; i < ps->ini.n_sec; i++) {
        const rt_section *sec = &ps->ini.sec[i];
        bool global = !strcmp(sec->name, "*");
        rt_spec sp = { .name = sec->name };
        for (int k = 0; k < sec->n_kv; k++) {
            const rt_kv *kv = &sec->kv[k];
            bool on;
            if (!sec->name[0]) {
                if (strcmp(kv->key, "version")) {
                    fprintf(stderr, "polykv: --models-preset: '%s' outside a section (only 'version')\n", kv->key);
                    return false;
                }
            } else if (!global && !strcmp(kv->key, "model")) {
                sp.path = kv->value;
            } else if (!global && !strcmp(kv->key, "load-on-startup")) {
                if (!truthy(kv->value, &on)) {
                    fprintf(stderr, "polykv: --models-preset [%s]: load-on-startup is true or false\n", sec->name);
                    return false;
                }
                if (on && !strv_add(&ps->load, sec->name)) return false;
            } else if (!preset_flag(sec->name, kv, global ? &ps->global : &ps->args[i])) {
                return false;
            }
        }
        if (!sec->name[0] || global) continue;
        sp.args = (const char *const *)ps->args[i].v;
        sp.n_args = ps->args[i].n;
        ps->specs[ps->n_specs++] = sp;
    }
    return true;
}

/* Every model's command line through serve's parser: false (serve's
 * message, then which model) when one is refused. */
static bool check_models(rt *r)
{
    for (int i = 0; i < rt_count(r); i++) {
        const char *argv[260] = { "serve" };
        char port[16];
        int n = 1 + rt_child_argv(r, i, 1, port, argv + 1, (int)ARRAY_LEN(argv) - 1);
        if (!cli_serve_check(n, (char **)argv)) {
            rt_info in;
            rt_info_at(r, i, &in);
            fprintf(stderr, "polykv: router: model %s: its flags are refused (above)\n", in.name);
            return false;
        }
    }
    return true;
}

int cli_router(srv_params *sp, const cli_router_opts *ro)
{
    presets ps = {0};
    if (ro->models_preset && !presets_read(ro->models_preset, &ps)) {
        presets_free(&ps);
        return 1;
    }
    int rc = serve(sp, ro, &ps);
    presets_free(&ps);
    return rc;
}

static int serve(srv_params *sp, const cli_router_opts *ro, const presets *ps)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "polykv: router: cannot find its own binary (/proc/self/exe)\n");
        return 1;
    }
    exe[n] = 0;
    rt_params rp = {
        .exe = exe,
        .models_dir = ro->models_dir,
        .models_max = ro->models_max,
        .autoload = ro->autoload,
        .child_args = ro->child_args,
        .n_child_args = ro->n_child_args,
        .global_args = (const char *const *)ps->global.v,
        .n_global_args = ps->global.n,
        .specs = ps->specs,
        .n_specs = ps->n_specs,
        .api_key = sp->api_key,
        .load_timeout_ms = LOAD_TIMEOUT_MS,
    };
    char err[512] = "";
    rt *r;
    if (rt_new(&rp, &r, err, sizeof err)) {
        fprintf(stderr, "polykv: %s\n", err[0] ? err : "out of memory");
        return 1;
    }
    if (!check_models(r)) {
        rt_free(r);
        return 1;
    }
    sp->router = r;
    srv *s;
    if (srv_new(sp, &s, err, sizeof err)) {
        fprintf(stderr, "polykv: %s\n", err);
        rt_free(r);
        return 1;
    }
    fprintf(stderr, "polykv: listening on http://%s%s%s:%d\n", strchr(sp->host, ':') ? "[" : "", sp->host,
            strchr(sp->host, ':') ? "]" : "", srv_port(s));
    cli_serve_note_probes(sp);
    char cap[32] = "no cap on loaded models";
    if (ro->models_max) snprintf(cap, sizeof cap, "at most %d loaded", ro->models_max);
    fprintf(stderr, "polykv: router: %d models%s%s; %s; autoload %s\n", rt_count(r), ro->models_dir ? " from " : "",
            ro->models_dir ? ro->models_dir : " (no --models-dir)", cap, ro->autoload ? "on" : "off");
    for (int i = 0; i < rt_count(r); i++) {
        rt_info in;
        if (rt_info_at(r, i, &in))
            fprintf(stderr, "polykv: router: model %s: %s%s\n", in.name, in.path, in.preset ? " (preset)" : "");
    }
    for (int k = 0; k < ps->load.n; k++) {
        char why[256] = "";
        if (rt_load(r, rt_find(r, ps->load.v[k]), why, sizeof why))
            fprintf(stderr, "polykv: router: model %s not loaded at start: %s\n", ps->load.v[k], why);
    }

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "polykv: %s: shutting down the router and its models\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_free(s);
    rt_free(r);
    return 0;
}
