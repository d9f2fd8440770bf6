/*
 * rt.h - router mode: several models behind one address, each served by its
 * own `polykv serve` child process started on demand (llama-server's
 * router, docs/compat.md "Router mode").
 *
 * DESIGN
 *   The registry (rt.c) is a fixed list of models, one per `.gguf` file of
 *   --models-dir, named by the file's stem, and those --models-preset's
 *   sections add (rt_preset.c reads its INI text; the caller makes the
 *   sections' keys into flags, rt_spec).  Each entry has a status and,
 *   while it runs, a child: its pid and the loopback port it listens on.
 *
 *       UNLOADED --rt_load / rt_acquire(autoload)--> LOADING --/health 200--> LOADED
 *          ^                                           |                       |
 *          +------- rt_unload, LRU eviction -----------+----- exits ----> FAILED
 *                                                                   (exit code kept;
 *                                                                    a load restarts it)
 *
 *   A load that fails (the child exits while LOADING, or is not healthy in
 *   time) backs off: no load of that model starts for 1 s, then 2, 4, ...
 *   up to 60 s after each further failure in a row (rt_load and rt_acquire
 *   answer PK_EFULL meanwhile, saying why it failed and when the next load
 *   is tried); a load that succeeds clears it.  A LOADED child that exits
 *   is restarted by the next request at once: it did load.
 *
 *   An unload stops the child at once, leases or not.  A request waiting
 *   for that load gets PK_ECANCELLED; one relayed by that child learns it
 *   from rt_lease_check, so its answer ends with a reason, not a cut.
 *
 *   A load runs on its own detached thread: pick a free port (the kernel's
 *   choice), posix_spawn the child, poll its /health until 200, the child
 *   exits, or the load times out.  Request threads that need the model wait
 *   on one condition variable for the status to leave LOADING.  Children are
 *   reaped under the registry lock only (rt.c's reap), called by every
 *   operation that reads a status, so a child that died is FAILED by the
 *   next look.  Every child's stdin is the read end of one pipe whose write
 *   end only the router holds: when the router goes, however it goes, each
 *   child reads EOF and stops (`polykv serve` watches stdin when
 *   POLYKV_EXIT_ON_STDIN_EOF=1 is in its environment).
 *
 *   --models-max N caps LOADING + LOADED entries: a load beyond it unloads
 *   the LOADED entry used least recently that no request holds (leases:
 *   rt_acquire / rt_release); when there is none, rt_load is refused
 *   (PK_EFULL) and rt_acquire waits for a lease to end.
 *
 *   The HTTP client (rt_http.c) is HTTP/1.1 over a loopback TCP socket, one
 *   request per connection (`Connection: close`): it writes a request, reads
 *   the status line and headers, then the body as it comes (Content-Length,
 *   chunked, or up to the close), so a relayed SSE stream goes chunk by
 *   chunk, never whole.
 *
 * Threads: rt_new and rt_free from the owner's thread; everything else from
 * any thread (one mutex guards the registry; no call holds it while it
 * waits on a child or a socket).  An rt_conn belongs to one thread at a time.
 */
#ifndef RT_H
#define RT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/pk.h"

#define RT_MAX_NAME 256

typedef enum rt_status { RT_UNLOADED = 0, RT_LOADING, RT_LOADED, RT_FAILED } rt_status;

/* "unloaded", "loading", "loaded", "failed" (llama-server's words). */
const char *rt_status_name(rt_status st);

/* A model a preset adds or configures (cli_router.c makes them from
 * --models-preset's sections). */
typedef struct rt_spec {
    const char *name;
    const char *path;           /* NULL: the --models-dir model of that name */
    const char *const *args;    /* its flags: after the preset's global ones, before the
                                   router's own (child_args), so those win */
    int n_args;
} rt_spec;

typedef struct rt_params {
    const char *exe;            /* the polykv binary children run */
    const char *models_dir;     /* NULL: no models (the router lists none) */
    int models_max;             /* LOADING + LOADED at most; 0 = no cap */
    bool autoload;              /* requests load the model they name (--models-autoload); kept
                                   for the server, which passes it to rt_acquire */
    const char *const *child_args;  /* flags every child gets after its own -m, --host,
                                       --port and --alias; n_child_args of them */
    int n_child_args;
    const char *const *global_args; /* the preset's [*] flags, before every model's own */
    int n_global_args;
    const rt_spec *specs;       /* n_specs presets */
    int n_specs;
    const char *api_key;        /* the children's key (also in child_args), sent by the
                                   health probe; NULL none */
    int load_timeout_ms;        /* a child not healthy by then is killed: FAILED */
} rt_params;

/* One entry, as rt_info copies it out. */
typedef struct rt_info {
    char name[RT_MAX_NAME];
    const char *path;           /* the GGUF file; lives as long as the registry */
    bool preset;                /* named by a preset (else only by --models-dir) */
    rt_status status;
    int exit_code;              /* FAILED: the child's exit status (128 + signal when killed) */
    int port;                   /* LOADING / LOADED: the child's port, else 0 */
    pid_t pid;                  /* LOADING / LOADED: the child's pid, else 0 */
} rt_info;

typedef struct rt rt;

/* Reads models_dir (when set), adds or configures the specs' models, and
 * starts nothing.  The strings of p are copied.  PK_EIO when the directory
 * cannot be read, PK_EINVAL for a spec without a path whose name is not in
 * the directory (reason in err), PK_ENOMEM. */
pk_status rt_new(const rt_params *p, rt **out, char *err, size_t err_len);

/* The parameters (strings owned by r). */
const rt_params *rt_get_params(const rt *r);

/* Number of models, and a copy of entry i (sorted by name) with the child's
 * state as of now.  False when i is out of range. */
int rt_count(rt *r);
bool rt_info_at(rt *r, int i, rt_info *out);
/* The index of the model called name, -1 when none. */
int rt_find(rt *r, const char *name);
/* The name of model i (0 <= i < rt_count), owned by r; names never change. */
const char *rt_name(const rt *r, int i);

/* The flags a child of model i runs with, after the binary and `serve`
 * (for listings): written into argv (at most cap, NUL-terminated strings
 * pointing into the registry or into port_buf, which must hold 16 bytes).
 * Returns the count. */
int rt_child_argv(rt *r, int i, int port, char *port_buf, const char **argv, int cap);

/* Starts loading model i in the background.  PK_ECONFLICT when it is
 * LOADING or LOADED already, PK_EFULL when --models-max is reached and no
 * LOADED model can be unloaded for it or while its last failed load backs
 * off (err says why it failed and when the next load is tried), PK_ENOMEM
 * / PK_EIO when no thread could be started (reason in err). */
pk_status rt_load(rt *r, int i, char *err, size_t err_len);

/* Stops model i's child (SIGTERM, SIGKILL after 5 s) and waits for it;
 * UNLOADED after.  PK_ECONFLICT when no child runs. */
pk_status rt_unload(rt *r, int i, char *err, size_t err_len);

/* A request's hold on a LOADED child: while held, the child is never the
 * one --models-max unloads (rt_unload still stops it). */
typedef struct rt_lease {
    int i;                      /* the model */
    int port;                   /* its child's loopback port */
    uint64_t gen;               /* which child of the model */
} rt_lease;

/* Waits (at most timeout_ms) until model i is LOADED, starting its load
 * first when it is not running and autoload is set, and leases it (*out;
 * rt_release when the request is done).  At --models-max with every loaded
 * model leased, it waits for one to be released.  PK_ECONFLICT when it
 * does not run and autoload is off, PK_EIO when the load failed (FAILED;
 * err says why and when the next load is tried), PK_EFULL when no model
 * came free in time or while a failed load backs off, PK_ECANCELLED
 * when still loading at the timeout, unloaded while it loaded, or the
 * router stops.  While it waits for the load, the model is not evicted. */
pk_status rt_acquire(rt *r, int i, bool autoload, int timeout_ms, rt_lease *out, char *err, size_t err_len);

/* Whether lease l's child still serves: PK_OK; PK_ECANCELLED when an
 * unload (or the router's stop) ended it; PK_EIO when it exited on its own
 * or was replaced.  The reason, naming the model, in why. */
pk_status rt_lease_check(rt *r, const rt_lease *l, char *why, size_t cap);

/* Ends a lease (a lease of a child since stopped is a no-op). */
void rt_release(rt *r, const rt_lease *l);

/* Stops every child (SIGTERM, then SIGKILL) and waits for loads in flight;
 * frees everything.  NULL is a no-op. */
void rt_free(rt *r);

/* ---- --models-preset's INI text (rt_preset.c) ---- */

typedef struct rt_kv { char *key, *value; } rt_kv;
typedef struct rt_section {
    char *name;                 /* "" for the keys before any [section] */
    rt_kv *kv;                  /* in file order */
    int n_kv;
} rt_section;
typedef struct rt_ini {
    rt_section *sec;            /* sec[0] is the unnamed one, then the file's in order */
    int n_sec;
} rt_ini;

/* Parses n bytes of INI text into out (rt_ini_free it).  PK_EFORMAT with
 * the line in err, PK_ENOMEM; out is empty on failure. */
pk_status rt_ini_parse(const char *text, size_t n, rt_ini *out, char *err, size_t err_len);
/* The same from a file (at most 1 MiB); PK_EIO when it cannot be read. */
pk_status rt_ini_load(const char *path, rt_ini *out, char *err, size_t err_len);
void rt_ini_free(rt_ini *ini);

/* ---- the loopback HTTP client (rt_http.c) ---- */

typedef struct rt_conn rt_conn;

#define RT_MAX_HEADERS 24

typedef struct rt_header {
    char name[64];
    char value[512];            /* longer values are cut */
} rt_header;

typedef struct rt_resp {
    int status;                 /* 200, ... */
    int64_t content_length;     /* -1: not given (chunked or up to the close) */
    int n_headers;              /* headers past RT_MAX_HEADERS are dropped */
    rt_header headers[RT_MAX_HEADERS];
} rt_resp;

/* Connects to 127.0.0.1:port; every later read or write waits at most
 * timeout_ms.  PK_EIO when the connection is refused, PK_ENOMEM. */
pk_status rt_http_open(int port, int timeout_ms, rt_conn **out);

/* While a read or write waits, alive(arg) is asked every 100 ms; false
 * ends the wait as an error (the client the request is for went away).
 * NULL: no such check. */
void rt_http_watch(rt_conn *c, bool (*alive)(void *arg), void *arg);

/* Wraps an already connected socket (tests use a socketpair); the
 * connection owns fd from here, even on failure (PK_ENOMEM). */
pk_status rt_http_wrap(int fd, int timeout_ms, rt_conn **out);

/* Writes one request: method, target (path and query), the header lines in
 * headers ("Name: value\r\n" each, may be NULL), then Content-Length and
 * the body (when body_len or method is POST).  PK_EIO on a write error or
 * timeout. */
pk_status rt_http_send(rt_conn *c, const char *method, const char *target, const char *headers,
                       const void *body, size_t body_len);

/* Reads the status line and headers.  PK_EFORMAT for a malformed answer,
 * PK_EIO for a closed connection or a timeout. */
pk_status rt_http_head(rt_conn *c, rt_resp *out);

/* Value of header name (case-insensitive) in resp, NULL when absent. */
const char *rt_http_header(const rt_resp *resp, const char *name);

/* Reads up to cap bytes of the body as they arrive, chunked coding
 * removed.  Returns the count (> 0), 0 at the body's end, -1 on an error, a
 * timeout or a malformed chunk. */
ssize_t rt_http_body(rt_conn *c, char *buf, size_t cap);

/* Closes the socket and frees c.  NULL is a no-op. */
void rt_http_close(rt_conn *c);

/* GET path on 127.0.0.1:port with an optional Bearer key: the status, or
 * -1 when there is no answer within timeout_ms. */
int rt_http_get_status(int port, const char *path, const char *api_key, int timeout_ms);

#endif
