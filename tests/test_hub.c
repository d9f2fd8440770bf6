/*
 * test_hub.c - a model by name (src/hub) against a fake hub on loopback:
 * the hub's API (refs, the tree with lfs.oid), resolve URLs that redirect
 * an LFS file to a CDN on another port with X-Linked-Etag / X-Linked-Size,
 * the CDN's Range answers (206), and the faults: a connection cut midway,
 * a damaged body, garbage JSON, 401 and 404.  Every request is counted and
 * its Authorization and Range headers kept, so a case can say "no request"
 * and "the token went to the hub and not to the CDN".
 *
 * Nothing here reaches the internet: the endpoint is the fake's
 * (hub_opts.endpoint; the CLI's MODEL_ENDPOINT), the cache a fresh
 * directory per case.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "../src/common/sha256.h"
#include "../src/hub/hub.h"
#include "test.h"

#define REPO "tester/Tiny-GGUF"
#define COMMIT "0123456789abcdef0123456789abcdef01234567"
#define TOKEN "hf_abcdefghijklmnopqrstuvwxyz0123456789AB"

typedef struct fake_file {
    const char *path;
    size_t size;
    bool lfs;
    unsigned char *data;
    char sha[65];
} fake_file;

static fake_file files[] = {
    { "README.md", 300, false, NULL, "" },
    { "mmproj-tiny-Q4_K_M.gguf", 1000, true, NULL, "" },
    { "tiny-Q4_K_M.gguf", 200000, true, NULL, "" },
    { "tiny-Q8_0.gguf", 150000, true, NULL, "" },
    { "sub/tiny-F16-00001-of-00002.gguf", 5000, true, NULL, "" },
    { "sub/tiny-F16-00002-of-00002.gguf", 6000, true, NULL, "" },
};

/* The fake's state: set by the test between calls, read by the servers. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int hub_port, cdn_port;
static int n_requests, n_cdn_requests;      /* every request the two servers read */
static long cut_at = -1;                    /* the next CDN GET sends this many body bytes, then closes */
static bool corrupt;                        /* CDN bodies have one byte changed */
static const char *refs_body;               /* NULL: the real refs; else this text */
static int refs_status = 200;
static char hub_auth[256], cdn_auth[256];   /* the last Authorization each saw ("" none) */
static char last_range[64];                 /* the last Range the CDN saw ("" none) */
static int n_auth_hub;                      /* hub requests that carried the token */

static int listen_on(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        perror("listen");
        exit(1);
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p = (const char *)p + k;
        n -= (size_t)k;
    }
}

static void sendf(int fd, const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    send_all(fd, buf, (size_t)n);
}

/* A header's value in the request head req ("" when absent) into out. */
static void req_header(const char *req, const char *name, char *out, size_t cap)
{
    char key[64];
    snprintf(key, sizeof key, "\r\n%s:", name);
    const char *h = strcasestr(req, key);
    out[0] = 0;
    if (!h) return;
    h += strlen(key);
    while (*h == ' ') h++;
    size_t n = strcspn(h, "\r\n");
    snprintf(out, cap, "%.*s", (int)MIN(n, cap - 1), h);
}

static fake_file *file_by_path(const char *p)
{
    for (size_t i = 0; i < ARRAY_LEN(files); i++)
        if (!strcmp(files[i].path, p)) return &files[i];
    return NULL;
}

static fake_file *file_by_sha(const char *s)
{
    for (size_t i = 0; i < ARRAY_LEN(files); i++)
        if (!strcmp(files[i].sha, s)) return &files[i];
    return NULL;
}

static void json_answer(int fd, int status, const char *body)
{
    sendf(fd, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
          status, strlen(body), body);
}

static void tree(int fd)
{
    static char body[8192];
    size_t n = (size_t)snprintf(body, sizeof body, "[{\"type\":\"directory\",\"oid\":\"%040d\",\"size\":0,\"path\":\"sub\"}", 0);
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        const fake_file *f = &files[i];
        n += (size_t)snprintf(body + n, sizeof body - n, ",{\"type\":\"file\",\"oid\":\"%040zu\",\"size\":%zu,", i + 1,
                              f->lfs ? (size_t)134 : f->size);
        if (f->lfs)
            n += (size_t)snprintf(body + n, sizeof body - n, "\"lfs\":{\"oid\":\"%s\",\"size\":%zu,\"pointerSize\":134},",
                                  f->sha, f->size);
        n += (size_t)snprintf(body + n, sizeof body - n, "\"path\":\"%s\"}", f->path);
    }
    snprintf(body + n, sizeof body - n, "]");
    json_answer(fd, 200, body);
}

/* The hub: the API and resolve URLs (an LFS file redirects to the CDN). */
static void hub_answer(int fd, const char *method, const char *target, const char *req)
{
    char auth[256];
    req_header(req, "Authorization", auth, sizeof auth);
    pthread_mutex_lock(&mu);
    snprintf(hub_auth, sizeof hub_auth, "%s", auth);
    n_auth_hub += !strcmp(auth, "Bearer " TOKEN);
    const char *rb = refs_body;
    int rs = refs_status;
    pthread_mutex_unlock(&mu);
    const char *resolve = "/" REPO "/resolve/" COMMIT "/";
    if (!strcmp(target, "/api/models/" REPO "/refs")) {
        json_answer(fd, rs, rb ? rb : "{\"branches\":[{\"name\":\"dev\",\"ref\":\"refs/heads/dev\",\"targetCommit\":"
                    "\"ffffffffffffffffffffffffffffffffffffffff\"},{\"name\":\"main\",\"ref\":\"refs/heads/main\","
                    "\"targetCommit\":\"" COMMIT "\"}],\"converts\":[],\"tags\":[]}");
    } else if (!strcmp(target, "/api/models/" REPO "/tree/" COMMIT "?recursive=true")) {
        tree(fd);
    } else if (!strncmp(target, resolve, strlen(resolve)) && file_by_path(target + strlen(resolve))) {
        const fake_file *f = file_by_path(target + strlen(resolve));
        if (f->lfs) {
            sendf(fd, "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/cdn/%s?sig=x\r\nX-Linked-Etag: \"%s\"\r\n"
                  "X-Linked-Size: %zu\r\nX-Repo-Commit: %s\r\nETag: W/\"%040d\"\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n", cdn_port, f->sha, f->sha, f->size, COMMIT, 7);
        } else {
            sendf(fd, "HTTP/1.1 200 OK\r\nETag: \"%040d\"\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", 7, f->size);
            if (strcmp(method, "HEAD")) send_all(fd, f->data, f->size);
        }
    } else if (!strncmp(target, "/api/models/", 12)) {
        json_answer(fd, 404, "{\"error\":\"Repository not found\"}");
    } else {
        sendf(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
}

/* The CDN: /cdn/SHA?sig=..., with Range. */
static void cdn_answer(int fd, const char *target, const char *req)
{
    char auth[256], range[64], sha[65] = "";
    req_header(req, "Authorization", auth, sizeof auth);
    req_header(req, "Range", range, sizeof range);
    sscanf(target, "/cdn/%64[0-9a-f]", sha);
    pthread_mutex_lock(&mu);
    snprintf(cdn_auth, sizeof cdn_auth, "%s", auth);
    snprintf(last_range, sizeof last_range, "%s", range);
    long cut = cut_at;
    cut_at = -1;
    bool bad = corrupt;
    pthread_mutex_unlock(&mu);
    const fake_file *f = file_by_sha(sha);
    if (!f) {
        sendf(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    }
    size_t from = 0;
    if (range[0] && sscanf(range, "bytes=%zu-", &from) == 1 && from < f->size)
        sendf(fd, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %zu-%zu/%zu\r\n", from, f->size - 1, f->size);
    else
        sendf(fd, "HTTP/1.1 200 OK\r\n"), from = 0;
    sendf(fd, "Accept-Ranges: bytes\r\nETag: \"%s\"\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", f->sha,
          f->size - from);
    size_t n = f->size - from;
    if (cut >= 0 && (size_t)cut < n) n = (size_t)cut;
    unsigned char *body = malloc(n + 1);
    memcpy(body, f->data + from, n);
    if (bad && n > 10) body[n / 2] ^= 0x55;
    send_all(fd, body, n);
    free(body);
}

typedef struct server { int fd; bool cdn; char req[16384]; } server;

/* One server's thread: a request per connection, answered, closed. */
static void *serve(void *arg)
{
    server *sv = arg;
    bool cdn = sv->cdn;
    char *req = sv->req;
    for (;;) {
        int fd = accept(sv->fd, NULL, NULL);
        if (fd < 0) return NULL;
        size_t n = 0;
        req[0] = 0;
        while (!strstr(req, "\r\n\r\n") && n + 1 < sizeof sv->req) {
            ssize_t k = recv(fd, req + n, sizeof sv->req - 1 - n, 0);
            if (k <= 0) break;
            n += (size_t)k;
            req[n] = 0;
        }
        char method[16] = "", target[2048] = "";
        if (sscanf(req, "%15s %2047s", method, target) == 2) {
            pthread_mutex_lock(&mu);
            n_requests++;
            n_cdn_requests += cdn;
            pthread_mutex_unlock(&mu);
            if (cdn) cdn_answer(fd, target, req);
            else hub_answer(fd, method, target, req);
        }
        shutdown(fd, SHUT_WR);
        char drain[256];
        while (recv(fd, drain, sizeof drain, 0) > 0) {}
        close(fd);
    }
}

static int requests(void)
{
    pthread_mutex_lock(&mu);
    int n = n_requests;
    pthread_mutex_unlock(&mu);
    return n;
}

static void start_fake(void)
{
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        fake_file *f = &files[i];
        f->data = malloc(f->size);
        for (size_t k = 0; k < f->size; k++) f->data[k] = (unsigned char)(k * 31 + i * 7 + (k >> 8));
        pk_sha256 c;
        pk_sha256_init(&c);
        pk_sha256_update(&c, f->data, f->size);
        pk_sha256_hex(&c, f->sha);
    }
    static server hub, cdn;
    hub.fd = listen_on(&hub_port);
    cdn.fd = listen_on(&cdn_port);
    cdn.cdn = true;
    pthread_t t;
    pthread_create(&t, NULL, serve, &hub);
    pthread_detach(t);
    pthread_create(&t, NULL, serve, &cdn);
    pthread_detach(t);
}

/* --- the client side --- */

static char cache_root[256];
static int n_cache;

/* Options with a fresh, empty cache. */
static hub_opts opts(const char *spec, bool fresh)
{
    static char endpoint[64], dir[300];
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", hub_port);
    if (fresh) snprintf(dir, sizeof dir, "%s/c%d", cache_root, ++n_cache);
    hub_opts o = hub_default_opts();
    o.repo = spec;
    o.endpoint = endpoint;
    o.cache_dir = dir;
    o.progress = HUB_PROGRESS_NONE;
    o.retry_delay_ms = 10;
    o.stall_ms = 5000;
    return o;
}

static bool same_bytes(const char *path, const fake_file *f)
{
    char hex[65];
    return pk_sha256_file(path, hex) && !strcmp(hex, f->sha);
}

static bool exists(const char *fmt, const char *a, const char *b)
{
    char p[1024];
    snprintf(p, sizeof p, fmt, a, b);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void test_rules(void)
{
    char repo[HUB_REPO_MAX], tag[HUB_TAG_MAX];
    CHECK_EQ_INT(hub_parse_spec("ggml-org/Qwen3.5-0.8B-GGUF:Q4_K_M", repo, tag), PK_OK);
    CHECK_STR(repo, "ggml-org/Qwen3.5-0.8B-GGUF");
    CHECK_STR(tag, "Q4_K_M");
    CHECK_EQ_INT(hub_parse_spec("a/b:x:UD-Q4_K_XL", repo, tag), PK_OK);   /* llama.cpp: the last piece */
    CHECK_STR(repo, "a/b");
    CHECK_STR(tag, "UD-Q4_K_XL");
    CHECK_EQ_INT(hub_parse_spec("user/repo", repo, tag), PK_OK);
    CHECK_STR(tag, "");
    const char *bad[] = { "repo", "a/b/c", "/a", "a/", "a//b", "a/.b", "a/b-", "a b/c", "../x", "a/b:Q4 K", "", "a/b\n" };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) CHECK_EQ_INT(hub_parse_spec(bad[i], repo, tag), PK_EINVAL);

    hub_split s;
    CHECK(hub_split_info("dir/Model-Q4_K_M-00002-of-00005.gguf", &s));
    CHECK_EQ_INT(s.index, 2);
    CHECK_EQ_INT(s.count, 5);
    CHECK_EQ_INT(s.prefix_len, strlen("dir/Model-Q4_K_M"));
    CHECK_STR(s.tag, "Q4_K_M");
    CHECK(hub_split_info("qwen3-0.6b-q8_0.gguf", &s));
    CHECK_EQ_INT(s.count, 1);
    CHECK_STR(s.tag, "Q8_0");
    CHECK(!hub_split_info("model.GGUF", &s));
    CHECK(hub_is_model_gguf("x/Model-Q8_0.gguf"));
    CHECK(!hub_is_model_gguf("mmproj-Model-F16.gguf"));
    CHECK(!hub_is_model_gguf("Model-mtp-Q8_0.gguf"));
    CHECK(!hub_is_model_gguf("mtp-Model-Q8_0.gguf"));
    CHECK(!hub_is_model_gguf("Model.imatrix.gguf"));

    const char *l[] = { "README.md", "mmproj-M-Q4_K_M.gguf", "M-F16-00002-of-00002.gguf", "M-F16-00001-of-00002.gguf",
                        "M-IQ4_XS.gguf", "M-Q8_0.gguf", "M-Q4_K_M.gguf", "M-Q4_K_M-big.gguf" };
    int n = (int)ARRAY_LEN(l);
    CHECK_EQ_INT(hub_pick(l, n, ""), 6);              /* Q4_K_M first, never the mmproj */
    CHECK_EQ_INT(hub_pick(l, n, "q8_0"), 5);          /* any case */
    CHECK_EQ_INT(hub_pick(l, n, "F16"), 3);           /* a split by its first part */
    CHECK_EQ_INT(hub_pick(l, n, "Q5_K_S"), -1);
    CHECK_EQ_INT(hub_pick(l, n, "Q4_K"), -1);         /* a tag must end at '.' or '-' */
    CHECK_EQ_INT(hub_pick(l + 4, 1, ""), 0);          /* neither default: the first model file */
    CHECK_EQ_INT(hub_pick(l, 2, ""), -1);
    CHECK_EQ_INT(hub_pick(l + 5, 3, ""), 1);          /* Q4_K_M wins over an earlier Q8_0 */
}

/* A first start downloads (refs, tree, HEAD, the GET the hub redirects,
 * the CDN's GET); the second makes no request at all. */
static void test_download_then_cached(void)
{
    hub_opts o = opts(REPO, true);
    hub_model m;
    char err[512] = "";
    int r0 = requests();
    pk_status st = hub_resolve(&o, &m, err, sizeof err);
    CHECK_EQ_INT(st, PK_OK);
    if (st) fprintf(stderr, "  %s\n", err);
    CHECK_EQ_INT(requests() - r0, 5);
    CHECK_STR(m.file, "tiny-Q4_K_M.gguf");
    CHECK(!m.cached);
    CHECK_EQ_INT(m.n_downloaded, 1);
    CHECK(m.path && same_bytes(m.path, file_by_path("tiny-Q4_K_M.gguf")));
    char link[512] = "";
    if (m.path) CHECK(readlink(m.path, link, sizeof link - 1) > 0);
    CHECK(!strncmp(link, "../../blobs/", 12) && !strcmp(link + 12, file_by_path("tiny-Q4_K_M.gguf")->sha));
    CHECK(exists("%s/models--tester--Tiny-GGUF/refs/main%s", o.cache_dir, ""));
    hub_model_free(&m);

    r0 = requests();
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_EQ_INT(requests(), r0);
    CHECK(m.cached);
    CHECK_STR(m.file, "tiny-Q4_K_M.gguf");
    hub_model_free(&m);

    /* Offline, the same: the cache only. */
    o.offline = true;
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_EQ_INT(requests(), r0);
    hub_model_free(&m);
    /* Offline without the file: a clear error, no request. */
    o.repo = REPO ":Q8_0";
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_ENOTFOUND);
    CHECK(strstr(err, "offline") && strstr(err, "not in the cache") && strstr(err, "tiny-Q4_K_M.gguf"));
    CHECK_EQ_INT(requests(), r0);
    o = opts(REPO, true);
    o.offline = true;
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_ENOTFOUND);
    CHECK_EQ_INT(requests(), r0);

    /* Refresh asks the hub again (refs, tree) and downloads nothing new. */
    o = opts(REPO, true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    hub_model_free(&m);
    r0 = requests();
    o.refresh = true;
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_EQ_INT(requests() - r0, 2);
    CHECK_EQ_INT(m.n_downloaded, 0);
    hub_model_free(&m);
}

/* A cache laid out by llama.cpp (or the hub's own client) by hand: found
 * with no request. */
static void test_llama_cache(void)
{
    hub_opts o = opts(REPO ":Q8_0", true);
    char dir[512], cmd[4096];
    const fake_file *f = file_by_path("tiny-Q8_0.gguf");
    snprintf(dir, sizeof dir, "%s/models--tester--Tiny-GGUF", o.cache_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/refs %s/blobs %s/snapshots/%s && printf %s > %s/refs/main && "
             "ln -s ../../blobs/%s %s/snapshots/%s/tiny-Q8_0.gguf", dir, dir, dir, COMMIT, COMMIT, dir, f->sha, dir,
             COMMIT);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/blobs/%s", dir, f->sha);
    FILE *w = fopen(cmd, "wb");
    fwrite(f->data, 1, f->size, w);
    fclose(w);
    int r0 = requests();
    hub_model m;
    char err[512];
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_EQ_INT(requests(), r0);
    CHECK(m.path && same_bytes(m.path, f));
    hub_model_free(&m);
}

/* :QUANT and -hff pick the file; a split set comes whole; a missing
 * QUANT lists what there is. */
static void test_pick_files(void)
{
    hub_model m;
    char err[512];
    hub_opts o = opts(REPO ":q8_0", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(m.file, "tiny-Q8_0.gguf");
    CHECK(m.path && same_bytes(m.path, file_by_path("tiny-Q8_0.gguf")));
    hub_model_free(&m);

    o = opts(REPO ":Q4_K_M", true);
    o.file = "tiny-Q8_0.gguf";                        /* -hff wins over the quant */
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(m.file, "tiny-Q8_0.gguf");
    hub_model_free(&m);

    o = opts(REPO ":F16", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(m.file, "sub/tiny-F16-00001-of-00002.gguf");
    CHECK_EQ_INT(m.n_parts, 2);
    CHECK_EQ_INT(m.n_downloaded, 2);
    CHECK(exists("%s/models--tester--Tiny-GGUF/snapshots/" COMMIT "/sub/tiny-F16-00002-of-00002.gguf%s",
                 o.cache_dir, ""));
    hub_model_free(&m);
    int r0 = requests();
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);   /* both parts cached: no request */
    CHECK_EQ_INT(requests(), r0);
    hub_model_free(&m);

    o = opts(REPO ":Q5_K_S", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_ENOTFOUND);
    CHECK(strstr(err, "Q5_K_S") && strstr(err, "tiny-Q8_0.gguf"));
    o = opts(REPO, true);
    o.file = "nope.gguf";
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_ENOTFOUND);
    CHECK(strstr(err, "nope.gguf") != NULL);
    o.file = "README.md";                             /* not LFS: no sha256, stored in the snapshot */
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK(m.path && same_bytes(m.path, file_by_path("README.md")));
    hub_model_free(&m);
}

/* The connection cut midway: the partial file stays; the next start sends
 * Range from where it stopped and ends with the whole, checked file; and
 * within one start, the retry resumes. */
static void test_resume(void)
{
    hub_model m;
    char err[512];
    const fake_file *f = file_by_path("tiny-Q4_K_M.gguf");
    hub_opts o = opts(REPO, true);
    o.n_tries = 1;
    pthread_mutex_lock(&mu);
    cut_at = 70000;
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EIO);
    char partial[1024];
    snprintf(partial, sizeof partial, "%s/models--tester--Tiny-GGUF/blobs/%s.downloadInProgress", o.cache_dir, f->sha);
    struct stat sb;
    CHECK(stat(partial, &sb) == 0 && sb.st_size == 70000);
    CHECK(!exists("%s/models--tester--Tiny-GGUF/snapshots/" COMMIT "/tiny-Q4_K_M.gguf%s", o.cache_dir, ""));
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(last_range, "bytes=70000-");
    CHECK(m.path && same_bytes(m.path, f));
    CHECK(stat(partial, &sb) != 0);
    hub_model_free(&m);

    o = opts(REPO, true);
    o.n_tries = 2;
    pthread_mutex_lock(&mu);
    cut_at = 123457;
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(last_range, "bytes=123457-");
    CHECK(m.path && same_bytes(m.path, f));
    hub_model_free(&m);
}

/* A write that fails (a file size limit stands for a full disk): a clear
 * error, no retry, the partial file kept; the next start resumes it. */
static void test_write_fails(void)
{
    hub_model m;
    char err[1024];
    const fake_file *f = file_by_path("tiny-Q4_K_M.gguf");
    hub_opts o = opts(REPO, true);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 65536;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    int r0 = requests();
    pk_status st = hub_resolve(&o, &m, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_EQ_INT(st, PK_EFULL);
    CHECK(strstr(err, "writing") && strstr(err, "kept"));
    CHECK_EQ_INT(requests() - r0, 5);                 /* no second try */
    char partial[1024];
    snprintf(partial, sizeof partial, "%s/models--tester--Tiny-GGUF/blobs/%s.downloadInProgress", o.cache_dir, f->sha);
    struct stat sb;
    CHECK(stat(partial, &sb) == 0 && sb.st_size == 65536);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    CHECK_STR(last_range, "bytes=65536-");
    CHECK(m.path && same_bytes(m.path, f));
    hub_model_free(&m);
}

/* A damaged body: refused by its sha256, nothing left in the cache. */
static void test_corrupt(void)
{
    hub_model m;
    char err[1024];
    hub_opts o = opts(REPO ":Q8_0", true);
    pthread_mutex_lock(&mu);
    corrupt = true;
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EFORMAT);
    pthread_mutex_lock(&mu);
    corrupt = false;
    pthread_mutex_unlock(&mu);
    CHECK(strstr(err, "sha256 mismatch") && strstr(err, file_by_path("tiny-Q8_0.gguf")->sha) && strstr(err, "deleted"));
    char blobs[1024];
    snprintf(blobs, sizeof blobs, "%s/models--tester--Tiny-GGUF/blobs", o.cache_dir);
    DIR *d = opendir(blobs);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK_EQ_INT(n, 0);
    CHECK(!exists("%s/models--tester--Tiny-GGUF/snapshots/" COMMIT "/tiny-Q8_0.gguf%s", o.cache_dir, ""));
}

/* The token goes to the hub (API, HEAD) and not to the CDN on another
 * port; without one, no Authorization at all. */
static void test_token(void)
{
    hub_model m;
    char err[512];
    hub_opts o = opts(REPO, true);
    o.token = TOKEN;
    pthread_mutex_lock(&mu);
    n_auth_hub = 0;
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    hub_model_free(&m);
    CHECK_EQ_INT(n_auth_hub, 4);                      /* refs, tree, HEAD, the GET redirected */
    CHECK_STR(hub_auth, "Bearer " TOKEN);
    CHECK_STR(cdn_auth, "");
    o = opts(REPO, true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);
    hub_model_free(&m);
    CHECK_STR(hub_auth, "");
    o.token = "hf_bad token";
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EINVAL);
}

/* What the hub may answer instead: garbage, refusal, nothing; and a bad
 * name never leaves the machine. */
static void test_bad_answers(void)
{
    hub_model m;
    char err[512];
    int r0 = requests();
    hub_opts o = opts("not a repo", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "USER/REPO") != NULL);
    o = opts(REPO ":Q4_K_M:", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_OK);  /* the last piece, empty: no tag */
    hub_model_free(&m);
    o = opts(REPO, true);
    o.file = "../../etc/passwd";
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EINVAL);
    CHECK_EQ_INT(requests() - r0, 5);

    const char *garbage[] = { "{\"branches\": [", "[1,2,3]", "{\"branches\":[{\"name\":\"main\",\"targetCommit\":\"xyz\"}]}",
                              "{\"branches\":[{\"name\":\"../../x\",\"targetCommit\":\"" COMMIT "\"}]}", "" };
    for (size_t i = 0; i < ARRAY_LEN(garbage); i++) {
        pthread_mutex_lock(&mu);
        refs_body = garbage[i];
        pthread_mutex_unlock(&mu);
        o = opts(REPO, true);
        CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EFORMAT);
        CHECK(err[0] != 0);
    }
    pthread_mutex_lock(&mu);
    refs_body = "{\"error\":\"Invalid credentials in Authorization header\"}";
    refs_status = 401;
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EREFUSED);
    CHECK(strstr(err, "HF_TOKEN") && strstr(err, "Invalid credentials"));
    pthread_mutex_lock(&mu);
    refs_body = NULL;
    refs_status = 200;
    pthread_mutex_unlock(&mu);
    o = opts("tester/No-Such-Repo", true);
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_ENOTFOUND);
    CHECK(strstr(err, "no such repository") != NULL);
    /* Nobody listening: a clear error after the tries, not a hang. */
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:1");
    o = opts(REPO, true);
    o.endpoint = dead;
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EIO);
    CHECK(strstr(err, "cannot reach the hub") != NULL);
    o.endpoint = "ftp://x/";
    CHECK_EQ_INT(hub_resolve(&o, &m, err, sizeof err), PK_EUNSUPPORTED);
}

static void test_env(void)
{
    char buf[512];
    setenv("MODEL_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv("HF_ENDPOINT", "http://other/", 1);
    hub_endpoint(buf, sizeof buf);
    CHECK_STR(buf, "http://127.0.0.1:9/");
    unsetenv("MODEL_ENDPOINT");
    hub_endpoint(buf, sizeof buf);
    CHECK_STR(buf, "http://other/");
    unsetenv("HF_ENDPOINT");
    hub_endpoint(buf, sizeof buf);
    CHECK_STR(buf, "https://huggingface.co/");
    const char *vars[] = { "LLAMA_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME" };
    for (size_t i = 0; i < ARRAY_LEN(vars); i++) unsetenv(vars[i]);
    setenv("HOME", "/home/u", 1);
    CHECK_EQ_INT(hub_cache_dir(buf, sizeof buf), PK_OK);
    CHECK_STR(buf, "/home/u/.cache/huggingface/hub");
    setenv("XDG_CACHE_HOME", "/x", 1);
    CHECK_EQ_INT(hub_cache_dir(buf, sizeof buf), PK_OK);
    CHECK_STR(buf, "/x/huggingface/hub");
    setenv("HF_HOME", "/h", 1);
    CHECK_EQ_INT(hub_cache_dir(buf, sizeof buf), PK_OK);
    CHECK_STR(buf, "/h/hub");
    setenv("HF_HUB_CACHE", "/hc", 1);
    CHECK_EQ_INT(hub_cache_dir(buf, sizeof buf), PK_OK);
    CHECK_STR(buf, "/hc");
    setenv("LLAMA_CACHE", "/lc", 1);
    CHECK_EQ_INT(hub_cache_dir(buf, sizeof buf), PK_OK);
    CHECK_STR(buf, "/lc");
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    snprintf(cache_root, sizeof cache_root, "/tmp/pk_test_hub.%d", (int)getpid());
    mkdir(cache_root, 0755);
    start_fake();
    TEST_RUN(test_rules);
    TEST_RUN(test_download_then_cached);
    TEST_RUN(test_llama_cache);
    TEST_RUN(test_pick_files);
    TEST_RUN(test_resume);
    TEST_RUN(test_write_fails);
    TEST_RUN(test_corrupt);
    TEST_RUN(test_token);
    TEST_RUN(test_bad_answers);
    TEST_RUN(test_env);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache_root);
    if (!getenv("KEEP") && system(cmd)) {}
    return test_finish();
}
