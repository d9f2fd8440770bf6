/*
 * test_router.c - src/router without a model: the loopback HTTP client
 * (rt_http.c) over a socketpair fed by a writer thread, byte by byte and in
 * chunks (Content-Length, chunked, up to the close, an interim 100, and
 * malformed answers; an event handed on before the next exists; a watch
 * that ends a wait), and the registry (rt.c): --models-dir's listing, a
 * child that exits at once (FAILED, its exit status), and the refusals of
 * load / unload / acquire; with a stand-in child (python3's http.server)
 * leases: a leased model is never the one --models-max unloads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <netinet/in.h>

#include "../src/router/rt.h"
#include "../src/server/srv.h"
#include "test.h"

typedef struct feed {
    int fd;
    const char *text;
    size_t step;                 /* bytes per write (0: all at once) */
} feed;

static void *writer(void *arg)
{
    feed *f = arg;
    size_t n = strlen(f->text);
    for (size_t at = 0; at < n;) {
        size_t k = f->step ? MIN(f->step, n - at) : n - at;
        if (write(f->fd, f->text + at, k) != (ssize_t)k) break;
        at += k;
        if (f->step) nanosleep(&(struct timespec){ .tv_nsec = 200000 }, NULL);
    }
    close(f->fd);
    return NULL;
}

/* Reads the answer text through the client: its status and body (at most
 * cap - 1 bytes, NUL-terminated); the body read's last result in *last. */
static int answer(const char *text, size_t step, char *body, size_t cap, ssize_t *last, rt_resp *head)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return -2;
    feed f = { .fd = sv[1], .text = text, .step = step };
    pthread_t t;
    pthread_create(&t, NULL, writer, &f);
    rt_conn *c;
    int status = -1;
    size_t n = 0;
    *last = -2;
    if (rt_http_wrap(sv[0], 2000, &c) == PK_OK) {
        if (rt_http_head(c, head) == PK_OK) {
            status = head->status;
            char buf[7];         /* small reads: the decoder must keep its place */
            while ((*last = rt_http_body(c, buf, sizeof buf)) > 0) {
                size_t k = MIN((size_t)*last, cap - 1 - n);
                memcpy(body + n, buf, k);
                n += k;
            }
        }
        rt_http_close(c);
    }
    body[n] = 0;
    pthread_join(t, NULL);
    return status;
}

static void test_http(void)
{
    static const char *const chunked =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nx-pool-id: 3\r\n\r\n"
        "e\r\ndata: {\"a\":1}\n\r\n19;ext=1\r\ndata: {\"b\":\"two words\"}\n\n\r\n0\r\nX-Trailer: t\r\n\r\n";
    char body[256];
    ssize_t last;
    rt_resp h;
    for (size_t step = 0; step < 4; step++) {
        CHECK_EQ_INT(answer(chunked, step, body, sizeof body, &last, &h), 200);
        CHECK_STR(body, "data: {\"a\":1}\ndata: {\"b\":\"two words\"}\n\n");
        CHECK_EQ_INT(last, 0);
        CHECK_STR(rt_http_header(&h, "content-type"), "text/event-stream");
        CHECK_STR(rt_http_header(&h, "X-Pool-Id"), "3");
        CHECK_EQ_INT(h.content_length, -1);
    }
    CHECK_EQ_INT(answer("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nhello",
                        1, body, sizeof body, &last, &h), 400);
    CHECK_STR(body, "hello");
    CHECK_EQ_INT(h.content_length, 5);
    CHECK_EQ_INT(last, 0);
    CHECK_EQ_INT(answer("HTTP/1.0 200 OK\r\n\r\nuntil the close", 0, body, sizeof body, &last, &h), 200);
    CHECK_STR(body, "until the close");
    CHECK_EQ_INT(last, 0);
    /* A body cut short, a bad chunk size, a missing CRLF after a chunk, a
     * bad status line: errors, never a silent end. */
    CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 0, body, sizeof body, &last, &h), 200);
    CHECK_EQ_INT(last, -1);
    CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 0, body,
                        sizeof body, &last, &h), 200);
    CHECK_EQ_INT(last, -1);
    CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 0, body,
                        sizeof body, &last, &h), 200);
    CHECK_EQ_INT(last, -1);
    CHECK_EQ_INT(answer("SMTP ready\r\n\r\n", 0, body, sizeof body, &last, &h), -1);
    CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, body, sizeof body, &last, &h), -1);
    /* Nobody listens there: no answer. */
    CHECK_EQ_INT(rt_http_get_status(1, "/health", NULL, 500), -1);
}

/* The first event of a stream comes out before the second exists: the
 * writer sends the rest only once the reader said it has the first, so a
 * client that waited for more would time out instead. */
static void *write_two(void *arg)
{
    int *fds = arg;               /* socket, "go on" pipe's read end */
    static const char one[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n";
    static const char two[] = "7\r\nsecond\n\r\n0\r\n\r\n";
    char go;
    if (write(fds[0], one, sizeof one - 1) == (ssize_t)(sizeof one - 1) && read(fds[1], &go, 1) == 1)
        if (write(fds[0], two, sizeof two - 1) < 0) {}
    close(fds[0]);
    return NULL;
}

static void test_no_buffering(void)
{
    int sv[2], go[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(go)) return;
    int fds[2] = { sv[1], go[0] };
    pthread_t t;
    pthread_create(&t, NULL, write_two, fds);
    rt_conn *c;
    rt_resp h;
    char buf[64];
    CHECK_EQ_INT(rt_http_wrap(sv[0], 2000, &c), PK_OK);
    CHECK_EQ_INT(rt_http_head(c, &h), PK_OK);
    ssize_t n = rt_http_body(c, buf, sizeof buf);
    CHECK_EQ_INT(n, 6);
    CHECK(n == 6 && !memcmp(buf, "first\n", 6));
    CHECK_EQ_INT(write(go[1], "g", 1), 1);
    n = rt_http_body(c, buf, sizeof buf);
    CHECK_EQ_INT(n, 7);
    CHECK(n == 7 && !memcmp(buf, "second\n", 7));
    CHECK_EQ_INT(rt_http_body(c, buf, sizeof buf), 0);
    rt_http_close(c);
    pthread_join(t, NULL);
    close(go[0]);
    close(go[1]);
}

/* A watch that says the client left ends a wait for a child that says
 * nothing, long before the timeout. */
static bool gone(void *arg) { return false; }

static void test_watch(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
    rt_conn *c;
    rt_resp h;
    CHECK_EQ_INT(rt_http_wrap(sv[0], 60000, &c), PK_OK);
    rt_http_watch(c, gone, NULL);
    double t0 = pk_time_ms();
    CHECK_EQ_INT(rt_http_head(c, &h), PK_EIO);
    CHECK(pk_time_ms() - t0 < 5000);
    rt_http_close(c);
    close(sv[1]);
}

static void touch(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
}

static void test_registry(void)
{
    char dir[] = "/tmp/test_router_XXXXXX";
    if (!mkdtemp(dir)) {
        SKIP_PART("no temporary directory");
        return;
    }
    touch(dir, "zeta.gguf");
    touch(dir, "alpha-Q4_0.gguf");
    touch(dir, "notes.txt");
    touch(dir, "mmproj-alpha.gguf");
    touch(dir, ".gguf");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/folder.gguf", dir);
    mkdir(sub, 0700);
    rt_params p = { .exe = "/bin/false", .models_dir = dir, .models_max = 1, .load_timeout_ms = 5000 };
    rt *r = NULL;
    char err[256] = "";
    CHECK_EQ_INT(rt_new(&p, &r, err, sizeof err), PK_OK);
    if (!r) return;
    CHECK_EQ_INT(rt_count(r), 2);
    rt_info in;
    CHECK(rt_info_at(r, 0, &in));
    CHECK_STR(in.name, "alpha-Q4_0");
    CHECK_EQ_INT(in.status, RT_UNLOADED);
    CHECK(rt_info_at(r, 1, &in));
    CHECK_STR(in.name, "zeta");
    CHECK(!rt_info_at(r, 2, &in));
    CHECK_EQ_INT(rt_find(r, "zeta"), 1);
    CHECK_EQ_INT(rt_find(r, "zeta.gguf"), -1);
    CHECK_EQ_INT(rt_find(r, NULL), -1);

    rt_lease lease;
    CHECK_EQ_INT(rt_acquire(r, 1, false, 1000, &lease, err, sizeof err), PK_ECONFLICT);
    CHECK_EQ_INT(rt_unload(r, 1, err, sizeof err), PK_ECONFLICT);
    CHECK_EQ_INT(rt_load(r, 7, err, sizeof err), PK_ENOTFOUND);
    /* /bin/false exits 1 before any /health: the load fails, with its status. */
    CHECK_EQ_INT(rt_acquire(r, 1, true, 5000, &lease, err, sizeof err), PK_EIO);
    CHECK(rt_info_at(r, 1, &in));
    CHECK_EQ_INT(in.status, RT_FAILED);
    CHECK_EQ_INT(in.exit_code, 1);
    CHECK_EQ_INT(in.pid, 0);
    /* A failed model is not running: it can be loaded again (and fails
     * again), once the failure's back-off (1 s) passed. */
    CHECK_EQ_INT(rt_load(r, 1, err, sizeof err), PK_EFULL);
    nanosleep(&(struct timespec){ .tv_sec = 1, .tv_nsec = 100000000 }, NULL);
    CHECK_EQ_INT(rt_load(r, 1, err, sizeof err), PK_OK);
    for (int k = 0; k < 500 && rt_info_at(r, 1, &in) && in.status != RT_FAILED; k++)
        nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
    CHECK_EQ_INT(in.status, RT_FAILED);
    rt_free(r);

    /* Presets: flags on a listed model, a new model from its own file, in
     * every child's flags between the preset's global ones and the router's. */
    char zeta[600];
    snprintf(zeta, sizeof zeta, "%s/zeta.gguf", dir);
    const char *np2[] = { "-np", "2" }, *glob[] = { "-c", "512" }, *own[] = { "-t", "1" };
    rt_spec specs[] = { { .name = "alpha-Q4_0", .args = np2, .n_args = 2 }, { .name = "beta", .path = zeta } };
    rt_params pp = p;
    pp.specs = specs;
    pp.n_specs = 2;
    pp.global_args = glob;
    pp.n_global_args = 2;
    pp.child_args = own;
    pp.n_child_args = 2;
    CHECK_EQ_INT(rt_new(&pp, &r, err, sizeof err), PK_OK);
    if (r) {
        CHECK_EQ_INT(rt_count(r), 3);
        CHECK_EQ_INT(rt_find(r, "beta"), 1);
        CHECK(rt_info_at(r, 1, &in) && in.preset && !strcmp(in.path, zeta));
        CHECK(rt_info_at(r, 2, &in) && !in.preset);
        const char *argv[32];
        char port_buf[16];
        int n = rt_child_argv(r, 0, 77, port_buf, argv, 32);
        CHECK_EQ_INT(n, 14);
        if (n == 14) {
            CHECK_STR(argv[5], "77");
            CHECK_STR(argv[7], "alpha-Q4_0");
            CHECK_STR(argv[8], "-c");
            CHECK_STR(argv[10], "-np");
            CHECK_STR(argv[12], "-t");
        }
        rt_free(r);
    }
    rt_spec lost = { .name = "nowhere" }, gone = { .name = "gone", .path = "/nonexistent/gone.gguf" };
    pp.specs = &lost;
    pp.n_specs = 1;
    CHECK_EQ_INT(rt_new(&pp, &r, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "nowhere") != NULL);
    pp.specs = &gone;
    CHECK_EQ_INT(rt_new(&pp, &r, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "/nonexistent/gone.gguf") != NULL);

    rt_params bad = p;
    bad.models_dir = "/nonexistent/models";
    CHECK_EQ_INT(rt_new(&bad, &r, err, sizeof err), PK_EIO);
    CHECK(strstr(err, "/nonexistent/models") != NULL);
    rt_params none = { .exe = "/bin/false" };
    CHECK_EQ_INT(rt_new(&none, &r, err, sizeof err), PK_OK);
    if (r) CHECK_EQ_INT(rt_count(r), 0);
    rt_free(r);

    const char *names[] = { "zeta.gguf", "alpha-Q4_0.gguf", "notes.txt", "mmproj-alpha.gguf", ".gguf" };
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        char f[512];
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        unlink(f);
    }
    rmdir(sub);
    rmdir(dir);
}

/* A stand-in child (python3's http.server) on the --port it is given, so
 * leases and eviction run without a model: 200 to every GET; a POST whose
 * body says "stream" gets an SSE stream of 400 chunked events 50 ms apart,
 * any other POST an answer after 20 s.  --sleep S (a preset's flag) waits S
 * seconds before it listens: a load that takes that long. */
static const char fake_child[] =
    "#!/bin/sh\n"
    "delay=0\n"
    "while [ $# -gt 0 ]; do [ \"$1\" = --port ] && port=$2; [ \"$1\" = --sleep ] && delay=$2; shift; done\n"
    "sleep $delay\n"
    "exec python3 -c 'import http.server, sys, time\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    protocol_version = \"HTTP/1.1\"\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.send_header(\"Content-Length\", \"2\"); self.end_headers()\n"
    "        self.wfile.write(b\"ok\")\n"
    "    def do_POST(self):\n"
    "        body = self.rfile.read(int(self.headers.get(\"Content-Length\", 0)))\n"
    "        if b\"stream\" not in body:\n"
    "            time.sleep(20)\n"
    "            self.send_response(200); self.send_header(\"Content-Length\", \"2\"); self.end_headers()\n"
    "            self.wfile.write(b\"{}\"); return\n"
    "        self.send_response(200); self.send_header(\"Content-Type\", \"text/event-stream\")\n"
    "        self.send_header(\"Transfer-Encoding\", \"chunked\"); self.end_headers()\n"
    "        for i in range(400):\n"
    "            ev = b\"data: {\\\"n\\\": %d}\\n\\n\" % i\n"
    "            self.wfile.write(b\"%x\\r\\n%s\\r\\n\" % (len(ev), ev)); self.wfile.flush(); time.sleep(0.05)\n"
    "        self.wfile.write(b\"0\\r\\n\\r\\n\")\n"
    "    def log_message(self, *a): pass\n"
    "http.server.ThreadingHTTPServer((\"127.0.0.1\", int(sys.argv[1])), H).serve_forever()' \"$port\"\n";

/* Writes the stand-in child into dir; false when it cannot. */
static bool write_child(const char *dir, char *exe, size_t cap)
{
    snprintf(exe, cap, "%s/child.sh", dir);
    FILE *f = fopen(exe, "w");
    if (!f) return false;
    fputs(fake_child, f);
    fclose(f);
    chmod(exe, 0700);
    return true;
}

/* Removes the two models and the child write_child left in dir, then dir. */
static void remove_models_dir(const char *dir)
{
    char path[700];
    const char *names[] = { "a.gguf", "b.gguf", "child.sh" };
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static rt_status status_of(rt *r, int i)
{
    rt_info in;
    return rt_info_at(r, i, &in) ? in.status : RT_FAILED;
}

static void test_leases(void)
{
    if (system("python3 -c 1 2>/dev/null")) {
        SKIP_PART("no python3 for the stand-in child");
        return;
    }
    char dir[] = "/tmp/test_router_XXXXXX";
    if (!mkdtemp(dir)) return;
    char exe[600];
    if (!write_child(dir, exe, sizeof exe)) return;
    touch(dir, "a.gguf");
    touch(dir, "b.gguf");
    rt_params p = { .exe = exe, .models_dir = dir, .models_max = 1, .load_timeout_ms = 10000 };
    rt *r = NULL;
    char err[256] = "";
    CHECK_EQ_INT(rt_new(&p, &r, err, sizeof err), PK_OK);
    if (!r) return;
    rt_lease a, b;
    CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &a, err, sizeof err), PK_OK);
    CHECK_EQ_INT(status_of(r, 0), RT_LOADED);
    CHECK_EQ_INT(rt_http_get_status(a.port, "/health", NULL, 1000), 200);
    /* a is leased: b cannot have its place, and a keeps running. */
    CHECK_EQ_INT(rt_acquire(r, 1, true, 300, &b, err, sizeof err), PK_EFULL);
    CHECK_EQ_INT(rt_load(r, 1, err, sizeof err), PK_EFULL);
    CHECK_EQ_INT(status_of(r, 0), RT_LOADED);
    CHECK_EQ_INT(status_of(r, 1), RT_UNLOADED);
    /* Released, a is the least recently used: b's load unloads it. */
    rt_release(r, &a);
    CHECK_EQ_INT(rt_acquire(r, 1, true, 10000, &b, err, sizeof err), PK_OK);
    CHECK_EQ_INT(status_of(r, 0), RT_UNLOADED);
    CHECK_EQ_INT(status_of(r, 1), RT_LOADED);
    CHECK_EQ_INT(rt_http_get_status(a.port, "/health", NULL, 500), -1);
    /* With b's lease ended, a takes its place again. */
    rt_release(r, &b);
    rt_release(r, &b);          /* twice: a no-op */
    CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &a, err, sizeof err), PK_OK);
    CHECK_EQ_INT(status_of(r, 1), RT_UNLOADED);
    /* An unload stops a leased child too; its old lease's release is a no-op. */
    CHECK_EQ_INT(rt_unload(r, 0, err, sizeof err), PK_OK);
    CHECK_EQ_INT(status_of(r, 0), RT_UNLOADED);
    rt_release(r, &a);
    CHECK_EQ_INT(rt_acquire(r, 1, true, 10000, &b, err, sizeof err), PK_OK);
    rt_free(r);
    CHECK_EQ_INT(rt_http_get_status(b.port, "/health", NULL, 500), -1);
    remove_models_dir(dir);
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF;) n += ch == '\n';
    if (f) fclose(f);
    return n;
}

/* A model whose server exits at once: the failed load backs off (1 s,
 * then 2 s), and requests meanwhile start no child; each error says why the
 * load failed and when the next one is tried. */
static void test_backoff(void)
{
    char dir[] = "/tmp/test_router_XXXXXX";
    if (!mkdtemp(dir)) return;
    char exe[600], starts[600];
    snprintf(exe, sizeof exe, "%s/child.sh", dir);
    snprintf(starts, sizeof starts, "%s/starts", dir);
    FILE *f = fopen(exe, "w");
    if (!f) return;
    fprintf(f, "#!/bin/sh\necho start >> %s\nexit 3\n", starts);
    fclose(f);
    chmod(exe, 0700);
    touch(dir, "a.gguf");
    rt_params p = { .exe = exe, .models_dir = dir, .load_timeout_ms = 10000 };
    rt *r = NULL;
    char err[256] = "";
    CHECK_EQ_INT(rt_new(&p, &r, err, sizeof err), PK_OK);
    if (!r) return;
    rt_lease l;
    CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &l, err, sizeof err), PK_EIO);
    CHECK(strstr(err, "exited with status 3 before it was ready") != NULL);
    CHECK(strstr(err, "the next load is tried in 1.0 s") || strstr(err, "the next load is tried in 0.9 s"));
    for (int k = 0; k < 20; k++) CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &l, err, sizeof err), PK_EFULL);
    CHECK(strstr(err, "model a failed to load") && strstr(err, "exited with status 3"));
    CHECK(strstr(err, " s ago: its server exited") && strstr(err, "; the next load is tried in "));
    CHECK_EQ_INT(rt_load(r, 0, err, sizeof err), PK_EFULL);
    CHECK_EQ_INT(count_lines(starts), 1);
    nanosleep(&(struct timespec){ .tv_sec = 1, .tv_nsec = 100000000 }, NULL);
    /* The second failure in a row waits twice as long. */
    CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &l, err, sizeof err), PK_EIO);
    CHECK(strstr(err, "tried in 2.0 s") || strstr(err, "tried in 1.9 s"));
    CHECK_EQ_INT(rt_acquire(r, 0, true, 10000, &l, err, sizeof err), PK_EFULL);
    CHECK_EQ_INT(count_lines(starts), 2);
    rt_free(r);
    unlink(exe);
    unlink(starts);
    char a[700];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    unlink(a);
    rmdir(dir);
}

/* ---- a router server (srv) over the stand-in children ---- */

static int send_req(int port, const char *method, const char *path, const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    char head[512];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", method, path,
                     strlen(body), body);
    if (write(fd, head, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads fd into buf[cap] (NUL-terminated, *n bytes so far) until want is
 * in it (true), or the peer closes or timeout_ms passes (false; want NULL:
 * true at the close). */
static bool read_until(int fd, char *buf, size_t cap, size_t *n, const char *want, int timeout_ms)
{
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        buf[*n] = 0;
        if (want && strstr(buf, want)) return true;
        if (*n + 1 >= cap) return false;
        ssize_t k = read(fd, buf + *n, cap - 1 - *n);
        /* With SO_RCVTIMEO a read is not restarted after a signal: a child's
         * SIGCHLD, queued while posix_spawn had every signal blocked, can
         * end it with EINTR though nothing handles the signal. */
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return !want && k == 0;
        *n += (size_t)k;
    }
}

typedef struct call {
    int port;
    const char *method, *path, *body;
    int status;
    char text[8192];
} call;

static void *call_main(void *arg)
{
    call *c = arg;
    c->status = -1;
    c->text[0] = 0;
    int fd = send_req(c->port, c->method, c->path, c->body);
    if (fd < 0) return NULL;
    size_t n = 0;
    read_until(fd, c->text, sizeof c->text, &n, NULL, 60000);
    close(fd);
    sscanf(c->text, "HTTP/1.%*d %d", &c->status);
    return NULL;
}

static int call_now(call *c, int port, const char *method, const char *path, const char *body)
{
    *c = (call){ .port = port, .method = method, .path = path, .body = body };
    call_main(c);
    return c->status;
}

static bool wait_status(rt *r, int i, rt_status want, int timeout_ms)
{
    rt_info in;
    for (int t = 0; t < timeout_ms; t += 10) {
        if (rt_info_at(r, i, &in) && in.status == want) return true;
        nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
    }
    return false;
}

/* POST /models/unload under requests in flight: a stream ends with an
 * error event naming the unload and its last chunk, an answer not begun
 * is a 503 saying so, and a request waiting for the load it started gets
 * a 503 too (not "failed to load (exit status 0)"); the model ends
 * unloaded, whatever the order of a load and an unload. */
static void test_unload_in_flight(void)
{
    if (system("python3 -c 1 2>/dev/null")) {
        SKIP_PART("no python3 for the stand-in child");
        return;
    }
    char dir[] = "/tmp/test_router_XXXXXX";
    char exe[600];
    if (!mkdtemp(dir) || !write_child(dir, exe, sizeof exe)) return;
    touch(dir, "a.gguf");
    touch(dir, "b.gguf");
    const char *slow[] = { "--sleep", "3" };
    rt_spec spec = { .name = "b", .args = slow, .n_args = 2 };
    rt_params p = { .exe = exe, .models_dir = dir, .autoload = true, .specs = &spec, .n_specs = 1,
                    .load_timeout_ms = 20000 };
    rt *r = NULL;
    srv *s = NULL;
    char err[256] = "";
    CHECK_EQ_INT(rt_new(&p, &r, err, sizeof err), PK_OK);
    srv_params sp = srv_default_params();
    sp.host = "127.0.0.1";
    sp.port = 0;
    sp.router = r;
    if (r) CHECK_EQ_INT(srv_new(&sp, &s, err, sizeof err), PK_OK);
    if (!s) {
        rt_free(r);
        return;
    }
    int port = srv_port(s);
    call u;

    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int fd = send_req(port, "POST", "/completion", "{\"model\": \"a\", \"stream\": true}");
    CHECK(fd >= 0 && read_until(fd, buf, cap, &n, "{\"n\": 2}", 20000));
    CHECK_EQ_INT(call_now(&u, port, "POST", "/models/unload", "{\"model\": \"a\"}"), 200);
    CHECK(read_until(fd, buf, cap, &n, "\r\n0\r\n\r\n", 10000));
    CHECK(strstr(buf, "data: {\"error\": {\"code\": 503") || strstr(buf, "data: {\"error\":{\"code\":503"));
    CHECK(strstr(buf, "model a was unloaded while the request ran") != NULL);
    if (fd >= 0) close(fd);
    free(buf);
    CHECK_EQ_INT(status_of(r, 0), RT_UNLOADED);

    /* Not streamed: the child answers after 20 s, the unload comes first. */
    call c = { .port = port, .method = "POST", .path = "/completion", .body = "{\"model\": \"a\"}" };
    pthread_t t;
    pthread_create(&t, NULL, call_main, &c);
    CHECK(wait_status(r, 0, RT_LOADED, 20000));
    nanosleep(&(struct timespec){ .tv_nsec = 500000000 }, NULL);
    CHECK_EQ_INT(call_now(&u, port, "POST", "/models/unload", "{\"model\": \"a\"}"), 200);
    pthread_join(t, NULL);
    CHECK_EQ_INT(c.status, 503);
    CHECK(strstr(c.text, "model a was unloaded while the request ran") != NULL);

    /* b takes 3 s to load: the request that started the load waits, and
     * the unload ends that wait. */
    c = (call){ .port = port, .method = "POST", .path = "/completion", .body = "{\"model\": \"b\"}" };
    pthread_create(&t, NULL, call_main, &c);
    CHECK(wait_status(r, 1, RT_LOADING, 5000));
    CHECK_EQ_INT(call_now(&u, port, "POST", "/models/unload", "{\"model\": \"b\"}"), 200);
    pthread_join(t, NULL);
    CHECK_EQ_INT(c.status, 503);
    CHECK(strstr(c.text, "model b was unloaded (POST /models/unload) before it finished loading") != NULL);
    /* A load, then an unload before it is ready: unloaded it stays. */
    CHECK_EQ_INT(call_now(&u, port, "POST", "/models/load", "{\"model\": \"b\"}"), 200);
    CHECK_EQ_INT(call_now(&u, port, "POST", "/models/unload", "{\"model\": \"b\"}"), 200);
    nanosleep(&(struct timespec){ .tv_sec = 1 }, NULL);
    CHECK_EQ_INT(status_of(r, 1), RT_UNLOADED);
    rt_info in;
    CHECK(rt_info_at(r, 1, &in) && in.pid == 0);

    srv_free(s);
    rt_free(r);
    remove_models_dir(dir);
}

static void test_ini(void)
{
    static const char text[] =
        "version = 1\n; a comment\n# another\n\n[*]\nc = 8192\n"
        "[ my-model ]\r\nmodel = \"/m/x.gguf\"\n  np=2  \njinja = true\nempty =\n";
    rt_ini ini;
    char err[128] = "";
    CHECK_EQ_INT(rt_ini_parse(text, sizeof text - 1, &ini, err, sizeof err), PK_OK);
    CHECK_EQ_INT(ini.n_sec, 3);
    if (ini.n_sec == 3) {
        CHECK_STR(ini.sec[0].name, "");
        CHECK_EQ_INT(ini.sec[0].n_kv, 1);
        CHECK_STR(ini.sec[0].kv[0].key, "version");
        CHECK_STR(ini.sec[1].name, "*");
        CHECK_STR(ini.sec[1].kv[0].value, "8192");
        CHECK_STR(ini.sec[2].name, "my-model");
        CHECK_EQ_INT(ini.sec[2].n_kv, 4);
        CHECK_STR(ini.sec[2].kv[0].value, "/m/x.gguf");
        CHECK_STR(ini.sec[2].kv[1].key, "np");
        CHECK_STR(ini.sec[2].kv[1].value, "2");
        CHECK_STR(ini.sec[2].kv[3].key, "empty");
        CHECK_STR(ini.sec[2].kv[3].value, "");
    }
    rt_ini_free(&ini);
    static const char *const bad[] = { "[open\n", "[]\n", "[a] b\n", "just words\n", "= 3\n", "a = 1\n\0b = 2\n" };
    static const size_t bad_len[] = { 6, 3, 6, 11, 4, 13 };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        err[0] = 0;
        CHECK_EQ_INT(rt_ini_parse(bad[i], bad_len[i], &ini, err, sizeof err), PK_EFORMAT);
        CHECK(strstr(err, "line ") != NULL);
        CHECK_EQ_INT(ini.n_sec, 0);
    }
    CHECK_EQ_INT(rt_ini_load("/nonexistent/p.ini", &ini, err, sizeof err), PK_EIO);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_http);
    TEST_RUN(test_no_buffering);
    TEST_RUN(test_watch);
    TEST_RUN(test_registry);
    TEST_RUN(test_ini);
    TEST_RUN(test_leases);
    TEST_RUN(test_backoff);
    TEST_RUN(test_unload_in_flight);
    return test_finish();
}
