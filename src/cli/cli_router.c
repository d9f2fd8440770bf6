/*
 * cli_router.c - `polykv serve` in router mode (no -m): the registry of
 * models and their children (src/router) behind the HTTP server's router
 * routes (srv_router.c), until SIGINT or SIGTERM; then the server stops
 * first (no request reaches a child after), then every child.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../router/rt.h"
#include "../server/srv.h"
#include "cli.h"

/* A child that is not healthy by then has failed (a large model read from
 * a slow disk takes minutes). */
#define LOAD_TIMEOUT_MS (10 * 60 * 1000)

int cli_router(srv_params *sp, const cli_router_opts *ro)
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
        .api_key = sp->api_key,
        .load_timeout_ms = LOAD_TIMEOUT_MS,
    };
    char err[512] = "";
    rt *r;
    if (rt_new(&rp, &r, err, sizeof err)) {
        fprintf(stderr, "polykv: %s\n", err[0] ? err : "out of memory");
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
    char cap[32] = "no cap on loaded models";
    if (ro->models_max) snprintf(cap, sizeof cap, "at most %d loaded", ro->models_max);
    fprintf(stderr, "polykv: router: %d models%s%s; %s; autoload %s\n", rt_count(r), ro->models_dir ? " from " : "",
            ro->models_dir ? ro->models_dir : " (no --models-dir)", cap, ro->autoload ? "on" : "off");
    for (int i = 0; i < rt_count(r); i++) {
        rt_info in;
        if (rt_info_at(r, i, &in)) fprintf(stderr, "polykv: router: model %s: %s\n", in.name, in.path);
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
