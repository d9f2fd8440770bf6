/*
 * rt.c - the router's registry of models and their child processes (rt.h).
 *
 *   struct rt ── models[] (sorted by name, fixed after rt_new)
 *     │            name, path                      immutable
 *     │            status, pid, port, exit_code,   under mu
 *     │            last_used_ms, gen, n_users,
 *     │            n_waiting, stop_gen,
 *     │            n_failed, retry_ms, why
 *     ├ mu, changed (broadcast on every status change)
 *     ├ n_loads (load threads alive, under mu: rt_free waits for 0)
 *     └ stdin_pipe[2] (children's stdin; only the router holds the write end)
 *
 * Only reap() calls waitpid, always under mu, so a pid is waited for once.
 * An unload takes the pid out of its entry under mu before it signals and
 * waits outside, so neither reap() nor a load sees that child again; it
 * records the child's generation (stop_gen) first, so a request relayed by
 * that child learns why its answer was cut (rt_lease_check).
 *
 * A load that fails (the child exits before its /health answers, or never
 * answers) holds the next one back: 1 s after the first failure, twice as
 * long after each further one, at most BACKOFF_MAX_MS; one that succeeds
 * clears the count.  Without it every request on a broken model spawned a
 * child (20 processes in 1.1 s).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/buf.h"
#include "rt.h"

extern char **environ;

#define PROBE_EVERY_MS 50
#define STOP_GRACE_MS 5000
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS 60000

typedef struct rt_model {
    char name[RT_MAX_NAME];
    char *path;
    char **args;                 /* its preset's flags (NULL-terminated; NULL none) */
    bool preset;
    rt_status status;            /* under mu, as are all the fields below */
    pid_t pid;                   /* 0: no child */
    int port;
    int exit_code;
    double last_used_ms;
    uint64_t gen;                /* which child: one more at every spawn */
    int n_users;                 /* leases of this child not yet released: never evicted */
    int n_waiting;               /* requests waiting for its load to end: never evicted */
    uint64_t stop_gen;           /* the last child stopped on purpose (unload, eviction, rt_free) */
    int n_failed;                /* loads failed in a row; 0 after one that succeeds */
    double failed_ms, retry_ms;  /* pk_time_ms() of the last failed load; no new one starts before
                                    retry_ms */
    char why[200];               /* FAILED: what happened, for errors and the log */
} rt_model;

struct rt {
    rt_params p;                 /* strings point at the copies below */
    char *exe, *api_key;
    char **child_args, **global_args;   /* NULL-terminated copies */
    rt_model *models;
    size_t cap_models;
    int n_models;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    int n_loads;
    bool stopping;
    int stdin_pipe[2];
};

const char *rt_status_name(rt_status st)
{
    switch (st) {
    case RT_LOADING: return "loading";
    case RT_LOADED:  return "loaded";
    case RT_FAILED:  return "failed";
    default:         return "unloaded";
    }
}

/* ---- the registry ---- */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const rt_model *)a)->name, ((const rt_model *)b)->name);
}

/* One entry per readable regular *.gguf file of dir (symbolic links
 * followed), named by its stem (what llama-server's --models-dir lists for
 * a single-file model; its sub-folders of split models are not read). */
static pk_status scan_dir(rt *r, const char *dir, char *err, size_t err_len)
{
    DIR *d = opendir(dir);
    if (!d) return pk_errf(err, err_len, PK_EIO, "--models-dir %s: %s", dir, strerror(errno));
    size_t cap = r->cap_models;
    pk_status st = PK_OK;
    for (struct dirent *de; st == PK_OK && (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        if (n <= 5 || strcmp(de->d_name + n - 5, ".gguf") || n - 5 >= RT_MAX_NAME) continue;
        if (strstr(de->d_name, "mmproj")) continue;   /* a projector is no model of its own */
        char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) { st = PK_ENOMEM; break; }
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode) || access(path, R_OK) || (st = pk_grow((void **)&r->models, &cap, (size_t)r->n_models + 1,
                                                sizeof *r->models))) {
            free(path);
            continue;
        }
        rt_model *m = &r->models[r->n_models++];
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%.*s", (int)(n - 5), de->d_name);
        m->path = path;
    }
    closedir(d);
    r->cap_models = cap;
    return st;
}

/* A NULL-terminated copy of n strings, NULL when out of memory. */
static char **copy_list(const char *const *v, int n)
{
    char **c = calloc((size_t)n + 1, sizeof *c);
    for (int i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            for (int k = 0; k < i; k++) free(c[k]);
            free(c);
            return NULL;
        }
    return c;
}

static void free_list(char **v)
{
    for (int i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

/* A preset's model: its flags on the --models-dir entry of that name, or
 * a new entry for its own file. */
static pk_status add_spec(rt *r, const rt_spec *sp, char *err, size_t err_len)
{
    rt_model *m = NULL;
    for (int i = 0; i < r->n_models && !m; i++)
        if (!strcmp(r->models[i].name, sp->name)) m = &r->models[i];
    if (!m && !sp->path)
        return pk_errf(err, err_len, PK_EINVAL, "preset [%s]: no model of that name in --models-dir, and no "
                       "'model = FILE'", sp->name);
    if (strlen(sp->name) >= RT_MAX_NAME) return pk_errf(err, err_len, PK_EINVAL, "preset [%.32s...]: name too long", sp->name);
    if (!m) {
        if (pk_grow((void **)&r->models, &r->cap_models, (size_t)r->n_models + 1, sizeof *r->models)) return PK_ENOMEM;
        m = &r->models[r->n_models++];
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", sp->name);
    }
    if (sp->path && access(sp->path, R_OK))
        return pk_errf(err, err_len, PK_EINVAL, "preset [%s]: model = %s: %s", sp->name, sp->path, strerror(errno));
    if (sp->path) {
        free(m->path);
        if (!(m->path = strdup(sp->path))) return PK_ENOMEM;
    }
    free_list(m->args);
    m->preset = true;
    return (m->args = copy_list(sp->args, sp->n_args)) ? PK_OK : PK_ENOMEM;
}

pk_status rt_new(const rt_params *p, rt **out, char *err, size_t err_len)
{
    *out = NULL;
    rt *r = calloc(1, sizeof *r);
    if (!r) return PK_ENOMEM;
    r->stdin_pipe[0] = r->stdin_pipe[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->changed, NULL);
    r->p = *p;
    r->p.exe = r->exe = strdup(p->exe);
    r->p.api_key = r->api_key = p->api_key ? strdup(p->api_key) : NULL;
    r->child_args = copy_list(p->child_args, p->n_child_args);
    r->global_args = copy_list(p->global_args, p->n_global_args);
    bool oom = !r->exe || (p->api_key && !r->api_key) || !r->child_args || !r->global_args;
    r->p.child_args = (const char *const *)r->child_args;
    r->p.global_args = (const char *const *)r->global_args;
    r->p.models_dir = NULL;
    r->p.specs = NULL;
    r->p.n_specs = 0;
    pk_status st = oom ? PK_ENOMEM : PK_OK;
    if (!st && pipe2(r->stdin_pipe, O_CLOEXEC)) st = pk_errf(err, err_len, PK_EIO, "pipe: %s", strerror(errno));
    if (!st && p->models_dir) st = scan_dir(r, p->models_dir, err, err_len);
    for (int k = 0; !st && k < p->n_specs; k++) st = add_spec(r, &p->specs[k], err, err_len);
    if (st == PK_ENOMEM) pk_errf(err, err_len, st, "out of memory");
    if (!st && r->n_models) qsort(r->models, (size_t)r->n_models, sizeof *r->models, by_name);
    if (st) {
        rt_free(r);
        return st;
    }
    *out = r;
    return PK_OK;
}

/* Under mu: entry m's load failed (why: what happened); FAILED, and the
 * next load waits for the back-off. */
static void load_failed(rt *r, rt_model *m, const char *why)
{
    m->status = RT_FAILED;
    m->n_failed++;
    double wait_ms = BACKOFF_FIRST_MS;
    for (int k = 1; k < m->n_failed && wait_ms < BACKOFF_MAX_MS; k++) wait_ms *= 2;
    wait_ms = MIN(wait_ms, BACKOFF_MAX_MS);
    m->failed_ms = pk_time_ms();
    m->retry_ms = m->failed_ms + wait_ms;
    snprintf(m->why, sizeof m->why, "%s", why);
    fprintf(stderr, "router: model %s failed to load (%d in a row): %s; the next load is tried in %.0f s\n",
            m->name, m->n_failed, why, wait_ms / 1000);
    pthread_cond_broadcast(&r->changed);
}

/* Waits for children that exited; under mu.  A child that ends while it is
 * LOADING or LOADED has failed (nobody asked it to stop); while LOADING,
 * its load failed. */
static void reap(rt *r)
{
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        int ws;
        if (!m->pid || waitpid(m->pid, &ws, WNOHANG) != m->pid) continue;
        m->pid = 0;
        m->port = 0;
        m->exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        char why[120];
        if (WIFEXITED(ws))
            snprintf(why, sizeof why, "its server exited with status %d", m->exit_code);
        else
            snprintf(why, sizeof why, "its server was killed by signal %d", WTERMSIG(ws));
        if (m->status == RT_LOADING) {
            snprintf(why + strlen(why), sizeof why - strlen(why), " before it was ready (its messages are in the "
                     "router's log)");
            load_failed(r, m, why);
            continue;
        }
        m->status = RT_FAILED;
        snprintf(m->why, sizeof m->why, "%s", why);
        fprintf(stderr, "router: model %s: %s\n", m->name, why);
        pthread_cond_broadcast(&r->changed);
    }
}

int rt_count(rt *r) { return r->n_models; }

const rt_params *rt_get_params(const rt *r) { return &r->p; }

const char *rt_name(const rt *r, int i) { return r->models[i].name; }

int rt_find(rt *r, const char *name)
{
    for (int i = 0; name && i < r->n_models; i++)
        if (!strcmp(r->models[i].name, name)) return i;
    return -1;
}

bool rt_info_at(rt *r, int i, rt_info *out)
{
    if (i < 0 || i >= r->n_models) return false;
    pthread_mutex_lock(&r->mu);
    reap(r);
    const rt_model *m = &r->models[i];
    *out = (rt_info){ .path = m->path, .preset = m->preset, .status = m->status, .exit_code = m->exit_code, .port = m->port,
                      .pid = m->pid };
    snprintf(out->name, sizeof out->name, "%s", m->name);
    pthread_mutex_unlock(&r->mu);
    return true;
}

int rt_child_argv(rt *r, int i, int port, char *port_buf, const char **argv, int cap)
{
    const rt_model *m = &r->models[i];
    snprintf(port_buf, 16, "%d", port);
    const char *fixed[] = { "-m", m->path, "--host", "127.0.0.1", "--port", port_buf, "--alias", m->name };
    int n = 0;
    for (size_t k = 0; k < ARRAY_LEN(fixed) && n < cap - 1; k++) argv[n++] = fixed[k];
    /* Later flags win in `serve`: the preset's global ones, the model's, the router's own. */
    for (int k = 0; r->global_args[k] && n < cap - 1; k++) argv[n++] = r->global_args[k];
    for (int k = 0; m->args && m->args[k] && n < cap - 1; k++) argv[n++] = m->args[k];
    for (int k = 0; r->child_args[k] && n < cap - 1; k++) argv[n++] = r->child_args[k];
    argv[n] = NULL;
    return n;
}

/* ---- children ---- */

/* A loopback port nobody listens on now: the kernel's pick for port 0.  A
 * race with another process binding it in between makes the child fail to
 * listen, which is a failed load, reported as such. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t n = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &n))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The environment of a child: ours, plus the flag that makes it stop when
 * its stdin ends (the router went away). */
static char **child_env(void)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "POLYKV_EXIT_ON_STDIN_EOF=", 25)) env[k++] = environ[i];
    env[k++] = "POLYKV_EXIT_ON_STDIN_EOF=1";
    env[k] = NULL;
    return env;
}

static pk_status spawn_child(rt *r, int i, int port, pid_t *pid, char *err, size_t err_len)
{
    const char *argv[256];
    char port_buf[16];
    argv[0] = r->exe;
    argv[1] = "serve";
    rt_child_argv(r, i, port, port_buf, argv + 2, (int)ARRAY_LEN(argv) - 2);
    char **env = child_env();
    if (!env) return PK_ENOMEM;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, r->stdin_pipe[0], 0);
    posix_spawnattr_t sa;
    posix_spawnattr_init(&sa);
    /* The router blocks SIGINT/SIGTERM for sigwait; a child starts with
     * them open, as any process does. */
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&sa, &none);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK);
    int rc = posix_spawn(pid, r->exe, &fa, &sa, (char *const *)argv, env);
    posix_spawnattr_destroy(&sa);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc) return pk_errf(err, err_len, PK_EIO, "cannot start %s: %s", r->exe, strerror(rc));
    return PK_OK;
}

/* SIGTERM, up to STOP_GRACE_MS for the child to go, then SIGKILL; waits
 * for it.  The pid must be out of the registry (nobody else waits for it). */
static void stop_child(pid_t pid)
{
    kill(pid, SIGTERM);
    for (double t_end = pk_time_ms() + STOP_GRACE_MS; pk_time_ms() < t_end;) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000000 }, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

typedef struct load_job {
    rt *r;
    int i;
    pid_t pid;
    int port;
} load_job;

/* The load thread: polls the child's /health until 200, its exit (reap()
 * makes it FAILED), an unload (its pid leaves the entry), or the timeout. */
static void *load_main(void *arg)
{
    load_job *j = arg;
    rt *r = j->r;
    rt_model *m = &r->models[j->i];
    double t_end = pk_time_ms() + r->p.load_timeout_ms;
    bool ready = false, timed_out = false;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        reap(r);
        bool gone = m->pid != j->pid || r->stopping;
        pthread_mutex_unlock(&r->mu);
        if (gone) break;
        if (ready) break;
        if (pk_time_ms() > t_end) {
            timed_out = true;
            break;
        }
        ready = rt_http_get_status(j->port, "/health", r->p.api_key, 1000) == 200;
        if (!ready) nanosleep(&(struct timespec){ .tv_nsec = PROBE_EVERY_MS * 1000000 }, NULL);
    }
    pthread_mutex_lock(&r->mu);
    pid_t kill_pid = 0;
    if (m->pid == j->pid && !r->stopping) {
        if (ready) {
            m->status = RT_LOADED;
            m->last_used_ms = pk_time_ms();
            m->n_failed = 0;
            fprintf(stderr, "router: model %s loaded (port %d)\n", m->name, m->port);
        } else if (timed_out) {
            char why[120];
            snprintf(why, sizeof why, "its server was not ready after %d ms and was stopped", r->p.load_timeout_ms);
            kill_pid = m->pid;
            m->pid = m->port = 0;
            m->exit_code = -1;
            load_failed(r, m, why);
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (kill_pid) stop_child(kill_pid);
    pthread_mutex_lock(&r->mu);
    r->n_loads--;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    free(j);
    return NULL;
}

static int n_running(const rt *r)
{
    int n = 0;
    for (int i = 0; i < r->n_models; i++) n += r->models[i].status == RT_LOADING || r->models[i].status == RT_LOADED;
    return n;
}

/* Under mu: the least recently used LOADED entry other than i that no
 * request uses, or -1. */
static int lru_victim(const rt *r, int i)
{
    int v = -1;
    for (int k = 0; k < r->n_models; k++) {
        const rt_model *m = &r->models[k];
        if (k != i && m->status == RT_LOADED && !m->n_users && !m->n_waiting &&
            (v < 0 || m->last_used_ms < r->models[v].last_used_ms))
            v = k;
    }
    return v;
}

/* Under mu: takes entry i's child out of the registry (UNLOADED); the
 * caller stops the returned pid after unlocking. */
static pid_t detach(rt *r, int i)
{
    rt_model *m = &r->models[i];
    pid_t pid = m->pid;
    m->stop_gen = m->gen;
    m->pid = m->port = 0;
    m->status = RT_UNLOADED;
    m->n_users = 0;              /* their leases are of the old generation */
    pthread_cond_broadcast(&r->changed);
    return pid;
}

/* Under mu, which it may drop and take again (to stop an evicted child,
 * or to wait): starts entry i's load.  The caller checked it is not
 * running.  At the cap with every counted model busy or loading, it waits
 * until `until` for one to come free (until NULL: PK_EFULL at once). */
static pk_status start_load(rt *r, int i, const struct timespec *until, char *err, size_t err_len)
{
    rt_model *m = &r->models[i];
    double now = pk_time_ms();
    if (m->status == RT_FAILED && now < m->retry_ms)
        return pk_errf(err, err_len, PK_EFULL, "model %s failed to load %.1f s ago: %s; the next load is tried in "
                       "%.1f s", m->name, (now - m->failed_ms) / 1000, m->why,
                       (m->retry_ms - now) / 1000);
    while (r->p.models_max > 0 && n_running(r) >= r->p.models_max) {
        int v = lru_victim(r, i);
        if (v < 0) {
            if (!until || r->stopping || pthread_cond_timedwait(&r->changed, &r->mu, until) == ETIMEDOUT)
                return pk_errf(err, err_len, PK_EFULL, "model limit (--models-max %d) reached and every loaded "
                               "model is in use, try again later", r->p.models_max);
            if (m->status == RT_LOADING || m->status == RT_LOADED) return PK_OK;
            continue;
        }
        fprintf(stderr, "router: unloading model %s (least recently used) for %s\n", r->models[v].name, m->name);
        pid_t pid = detach(r, v);
        pthread_mutex_unlock(&r->mu);
        if (pid) stop_child(pid);
        pthread_mutex_lock(&r->mu);
        if (m->status == RT_LOADING || m->status == RT_LOADED) return PK_OK;   /* another request started it */
    }
    load_job *j = calloc(1, sizeof *j);
    int port = free_port();
    if (!j || port < 0) {
        free(j);
        return pk_errf(err, err_len, port < 0 ? PK_EIO : PK_ENOMEM, "no port or memory for a child server");
    }
    pid_t pid;
    pk_status st = spawn_child(r, i, port, &pid, err, err_len);
    if (st) {
        free(j);
        m->exit_code = -1;
        load_failed(r, m, err);
        return st;
    }
    *j = (load_job){ .r = r, .i = i, .pid = pid, .port = port };
    m->status = RT_LOADING;
    m->gen++;
    m->n_users = 0;
    m->pid = pid;
    m->port = port;
    m->exit_code = 0;
    pthread_t t;
    pthread_attr_t ta;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &ta, load_main, j);
    pthread_attr_destroy(&ta);
    if (rc) {
        free(j);
        pid_t p = detach(r, i);
        char why[120];
        snprintf(why, sizeof why, "cannot start a load thread: %s", strerror(rc));
        load_failed(r, m, why);
        pthread_mutex_unlock(&r->mu);
        stop_child(p);
        pthread_mutex_lock(&r->mu);
        return pk_errf(err, err_len, PK_EIO, "cannot start a load thread: %s", strerror(rc));
    }
    r->n_loads++;
    fprintf(stderr, "router: loading model %s (pid %d, port %d)\n", m->name, (int)pid, port);
    pthread_cond_broadcast(&r->changed);
    return PK_OK;
}

static bool running(const rt_model *m) { return m->status == RT_LOADING || m->status == RT_LOADED; }

pk_status rt_load(rt *r, int i, char *err, size_t err_len)
{
    if (i < 0 || i >= r->n_models) return PK_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    reap(r);
    pk_status st = running(&r->models[i]) ? pk_errf(err, err_len, PK_ECONFLICT, "model is already running")
                                          : start_load(r, i, NULL, err, err_len);
    pthread_mutex_unlock(&r->mu);
    return st;
}

pk_status rt_unload(rt *r, int i, char *err, size_t err_len)
{
    if (i < 0 || i >= r->n_models) return PK_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    reap(r);
    bool run = running(&r->models[i]);
    pid_t pid = run ? detach(r, i) : 0;
    pthread_mutex_unlock(&r->mu);
    if (!run) return pk_errf(err, err_len, PK_ECONFLICT, "model is not running");
    if (pid) stop_child(pid);
    fprintf(stderr, "router: model %s unloaded\n", r->models[i].name);
    return PK_OK;
}

pk_status rt_acquire(rt *r, int i, bool autoload, int timeout_ms, rt_lease *out, char *err, size_t err_len)
{
    if (i < 0 || i >= r->n_models) return PK_ENOTFOUND;
    rt_model *m = &r->models[i];
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_mutex_lock(&r->mu);
    reap(r);
    pk_status st = PK_OK;
    if (!running(m)) {
        st = autoload ? start_load(r, i, &until, err, err_len)
                      : pk_errf(err, err_len, PK_ECONFLICT, "model is not loaded");
    }
    /* A reap while waiting shows as a broadcast from the load thread, which
     * reaps every PROBE_EVERY_MS.  Waiters keep the model from being the
     * one --models-max evicts between its load and their lease. */
    m->n_waiting++;
    while (!st && m->status == RT_LOADING && !r->stopping)
        if (pthread_cond_timedwait(&r->changed, &r->mu, &until) == ETIMEDOUT) {
            st = pk_errf(err, err_len, PK_ECANCELLED, "model %s is still loading", m->name);
            break;
        }
    m->n_waiting--;
    if (!st && m->status != RT_LOADED) {
        double now = pk_time_ms();
        if (r->stopping)
            st = pk_errf(err, err_len, PK_ECANCELLED, "the router is stopping");
        else if (m->status == RT_FAILED && now < m->retry_ms)
            st = pk_errf(err, err_len, PK_EIO, "model %s failed to load: %s; the next load is tried in %.1f s",
                         m->name, m->why, (m->retry_ms - now) / 1000);
        else if (m->status == RT_FAILED)
            st = pk_errf(err, err_len, PK_EIO, "model %s failed: %s", m->name, m->why);
        else
            st = pk_errf(err, err_len, PK_ECANCELLED, "model %s was unloaded (POST /models/unload) before it "
                         "finished loading", m->name);
    }
    if (!st) {
        m->last_used_ms = pk_time_ms();
        m->n_users++;
        *out = (rt_lease){ .i = i, .port = m->port, .gen = m->gen };
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}

pk_status rt_lease_check(rt *r, const rt_lease *l, char *why, size_t cap)
{
    pthread_mutex_lock(&r->mu);
    reap(r);
    const rt_model *m = &r->models[l->i];
    pk_status st = PK_OK;
    if (m->gen == l->gen && m->status == RT_LOADED)
        st = PK_OK;
    else if (m->stop_gen == l->gen && r->stopping)
        st = pk_errf(why, cap, PK_ECANCELLED, "the router is stopping");
    else if (m->stop_gen == l->gen)
        st = pk_errf(why, cap, PK_ECANCELLED, "model %s was unloaded while the request ran (POST /models/unload)",
                     m->name);
    else if (m->gen == l->gen && m->status == RT_FAILED)
        st = pk_errf(why, cap, PK_EIO, "model %s: %s while the request ran", m->name, m->why);
    else
        st = pk_errf(why, cap, PK_EIO, "model %s: its server stopped while the request ran", m->name);
    pthread_mutex_unlock(&r->mu);
    return st;
}

void rt_release(rt *r, const rt_lease *l)
{
    pthread_mutex_lock(&r->mu);
    rt_model *m = &r->models[l->i];
    if (m->gen == l->gen && m->n_users > 0) {
        m->n_users--;
        m->last_used_ms = pk_time_ms();
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mu);
}

void rt_free(rt *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->changed);
    pid_t pids[r->n_models + 1];
    int n = 0;
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].pid) pids[n++] = detach(r, i);
    while (r->n_loads) pthread_cond_wait(&r->changed, &r->mu);
    pthread_mutex_unlock(&r->mu);
    for (int k = 0; k < n; k++) kill(pids[k], SIGTERM);
    for (int k = 0; k < n; k++) stop_child(pids[k]);
    for (int i = 0; i < r->n_models; i++) {
        free(r->models[i].path);
        free_list(r->models[i].args);
    }
    free(r->models);
    free_list(r->child_args);
    free_list(r->global_args);
    free(r->exe);
    free(r->api_key);
    if (r->stdin_pipe[0] >= 0) close(r->stdin_pipe[0]);
    if (r->stdin_pipe[1] >= 0) close(r->stdin_pipe[1]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->changed);
    free(r);
}
