/*
 * test_httpc.c - the HTTP client against a scripted server on loopback:
 * what goes out (exactly the caller's headers, the body), what comes back
 * (status, the final answer's headers only, the body), and every bound
 * (schemes, user:password in the URL, the size cap, the timeout, giving
 * up, header injection).
 *
 * The scripted server holds what is slow (the /slow answer, the second event
 * of /sse) until the test releases it: the test checks what it can observe,
 * what came back before the held part was sent, not how long things took
 * on a machine that may be loaded.  HOLD_MS only ends a hold nobody
 * releases (a broken client would then see the answer, and fail a check).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "../src/common/pk.h"
#include "../src/httpc/httpc.h"
#include "test.h"

#define HOLD_MS 20000

static int listen_fd, port;
static char last_request[65536];     /* the last request the server read, whole */

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool released;                /* under hold_mu: the next hold may end (consumed by it) */
static int n_held_sent;              /* under hold_mu: held parts the server has sent */

/* Server thread: waits until the test releases, or HOLD_MS pass. */
static void hold(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HOLD_MS / 1000;
    pthread_mutex_lock(&hold_mu);
    while (!released && pthread_cond_timedwait(&hold_cv, &hold_mu, &until) == 0) {}
    released = false;
    pthread_mutex_unlock(&hold_mu);
}

static void held_sent(void)
{
    pthread_mutex_lock(&hold_mu);
    n_held_sent++;
    pthread_mutex_unlock(&hold_mu);
}

static int count(const int *n)
{
    pthread_mutex_lock(&hold_mu);
    int v = *n;
    pthread_mutex_unlock(&hold_mu);
    return v;
}

/* Test thread: lets the server send what it holds (now, or as soon as it
 * comes to hold it). */
static void release(void)
{
    pthread_mutex_lock(&hold_mu);
    released = true;
    pthread_cond_broadcast(&hold_cv);
    pthread_mutex_unlock(&hold_mu);
}

/* The answer to a path (the request line's). */
static const char *answer_for(const char *req, char *buf, size_t cap)
{
    if (strstr(req, " /hello "))
        return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Up: one\r\nContent-Length: 5\r\n\r\nhello";
    if (strstr(req, " /nocontent "))
        return "HTTP/1.1 204 No Content\r\n\r\n";
    if (strstr(req, " /moved "))
        return "HTTP/1.1 302 Found\r\nLocation: /hello\r\nX-Hop: first\r\nContent-Length: 0\r\n\r\n";
    if (strstr(req, " /teapot "))
        return "HTTP/1.1 418 I'm a teapot\r\nContent-Length: 3\r\n\r\ntea";
    if (strstr(req, " /big ")) {
        snprintf(buf, cap, "HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n");
        size_t n = strlen(buf);
        memset(buf + n, 'x', 4000);
        buf[n + 4000] = 0;
        return buf;
    }
    if (strstr(req, " /slow ")) {
        hold();
        return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    }
    if (strstr(req, " /echo ")) {
        const char *b = strstr(req, "\r\n\r\n");
        b = b ? b + 4 : "";
        snprintf(buf, cap, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(b), b);
        return buf;
    }
    return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
}

static void *serve(void *arg)
{
    static char buf[16384];
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) return NULL;
        size_t n = 0;
        last_request[0] = 0;
        for (;;) {
            ssize_t k = recv(fd, last_request + n, sizeof last_request - 1 - n, 0);
            if (k <= 0) break;
            n += (size_t)k;
            last_request[n] = 0;
            const char *end = strstr(last_request, "\r\n\r\n");
            if (!end) continue;
            const char *cl = strcasestr(last_request, "\r\nContent-Length: ");
            size_t want = cl && cl < end ? (size_t)atoi(cl + 18) : 0;
            if (n >= (size_t)(end + 4 - last_request) + want) break;
        }
        if (n == 0) {                                /* a client that left before asking */
            close(fd);
            continue;
        }
        if (strstr(last_request, " /sse ")) {        /* an event now, another once released */
            static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n";
            send(fd, h, sizeof h - 1, MSG_NOSIGNAL);
            hold();
            static const char t[] = "9\r\ndata: 2\n\n\r\n0\r\n\r\n";
            send(fd, t, sizeof t - 1, MSG_NOSIGNAL);
            held_sent();
            close(fd);
            continue;
        }
        bool slow = strstr(last_request, " /slow ") != NULL;
        const char *a = answer_for(last_request, buf, sizeof buf);
        send(fd, a, strlen(a), MSG_NOSIGNAL);
        if (slow) held_sent();
        close(fd);
    }
}

static bool start_server(void)
{
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(listen_fd, 8) ||
        getsockname(listen_fd, (struct sockaddr *)&sa, &len))
        return false;
    port = ntohs(sa.sin_port);
    pthread_t t;
    return pthread_create(&t, NULL, serve, NULL) == 0 && pthread_detach(t) == 0;
}

static httpc_request req(const char *method, const char *url)
{
    return (httpc_request){ .method = method, .url = url, .connect_timeout_ms = 2000, .timeout_ms = 5000,
                            .max_body_bytes = 1 << 20, .max_redirects = 3 };
}

static const char *header(const httpc_response *r, const char *name)
{
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->names[i], name)) return r->values[i];
    return NULL;
}

static void test_urls(void)
{
    CHECK(httpc_url_ok("http://127.0.0.1:8080/x?y=1"));
    CHECK(httpc_url_ok("https://example.com"));
    CHECK(httpc_url_ok("HTTP://[::1]:3000/mcp"));
    CHECK(!httpc_url_ok("file:///etc/passwd"));
    CHECK(!httpc_url_ok("ftp://example.com/"));
    CHECK(!httpc_url_ok("gopher://example.com/"));
    CHECK(!httpc_url_ok("http://user:secret@example.com/"));
    CHECK(!httpc_url_ok("http://user@example.com/"));
    CHECK(!httpc_url_ok("http://"));
    CHECK(!httpc_url_ok("http://:80/"));
    CHECK(!httpc_url_ok("/relative"));
    CHECK(!httpc_url_ok("http://example.com/\r\nX: y"));
    CHECK(!httpc_url_ok(""));
    CHECK(!httpc_url_ok(NULL));
}

static void test_exchange(void)
{
    char url[128], err[256];
    httpc_response r;

    /* Exactly the caller's headers go out: no Accept, Expect or form type. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hello", port);
    httpc_header h[] = { { "Authorization", "Bearer explicit" }, { "X-Empty", "" } };
    httpc_request rq = req("GET", url);
    rq.headers = h;
    rq.n_headers = 2;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.body.p, "hello");
    CHECK_STR(header(&r, "x-up"), "one");
    CHECK_STR(header(&r, "Content-Type"), "text/plain");
    CHECK(strstr(last_request, "GET /hello HTTP/1.1\r\n") == last_request);
    CHECK(strstr(last_request, "\r\nAuthorization: Bearer explicit\r\n") != NULL);
    CHECK(strstr(last_request, "\r\nX-Empty:") != NULL);
    CHECK(strcasestr(last_request, "\r\nAccept:") == NULL);
    CHECK(strcasestr(last_request, "\r\nAccept-Encoding:") == NULL);
    httpc_response_free(&r);
    CHECK(r.body.p == NULL && r.n_headers == 0);

    /* A POST body, sent whole, without Expect: 100-continue or a form type. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/echo", port);
    static char body[3000];
    memset(body, 'b', sizeof body - 1);
    rq = req("POST", url);
    rq.body = body;
    rq.n_body = strlen(body);
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.body.n, strlen(body));
    CHECK(strcasestr(last_request, "\r\nExpect:") == NULL);
    CHECK(strcasestr(last_request, "\r\nContent-Type:") == NULL);
    httpc_response_free(&r);

    /* 204: no body; 418 passes through as an answer. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/nocontent", port);
    rq = req("POST", url);
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.status, 204);
    CHECK_EQ_INT(r.body.n, 0);
    httpc_response_free(&r);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/teapot", port);
    rq = req("GET", url);
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.status, 418);
    httpc_response_free(&r);

    /* A redirect followed: the final answer's headers only. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/moved", port);
    rq = req("GET", url);
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.body.p, "hello");
    CHECK(header(&r, "X-Hop") == NULL);
    httpc_response_free(&r);
    rq.max_redirects = 0;                              /* not followed: the 302 is the answer */
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.status, 302);
    CHECK_STR(header(&r, "Location"), "/hello");
    httpc_response_free(&r);
}

static bool give_up(void *cls) { return false; }

static void test_bounds(void)
{
    char url[128], err[256];
    httpc_response r;

    snprintf(url, sizeof url, "http://127.0.0.1:%d/big", port);
    httpc_request rq = req("GET", url);
    rq.max_body_bytes = 1000;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EFULL);
    CHECK(strstr(err, "1000 bytes") != NULL);
    CHECK(r.body.p == NULL);
    rq.max_body_bytes = 4000;                           /* exactly the cap fits */
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_OK);
    CHECK_EQ_INT(r.body.n, 4000);
    httpc_response_free(&r);

    /* Both end while the server still holds its answer: on the caller's
     * timeout, and on giving up (the second waits behind the first's hold). */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/slow", port);
    int sent0 = count(&n_held_sent);
    rq = req("GET", url);
    rq.timeout_ms = 500;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EIO);
    CHECK(r.timed_out);
    CHECK_EQ_INT(count(&n_held_sent), sent0);

    rq = req("GET", url);
    rq.keep_going = give_up;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_ECANCELLED);
    CHECK_EQ_INT(count(&n_held_sent), sent0);
    release();

    rq = req("GET", "http://127.0.0.1:1/");              /* nobody listens there */
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EIO);
    CHECK(!r.timed_out && err[0]);

    rq = req("GET", "file:///etc/passwd");
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EINVAL);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hello", port);
    httpc_header bad[] = { { "X-A", "v\r\nX-Injected: 1" } };
    rq = req("GET", url);
    rq.headers = bad;
    rq.n_headers = 1;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EINVAL);
    httpc_header bad_name[] = { { "X-A: b", "v" } };
    rq.headers = bad_name;
    CHECK_EQ_INT(httpc_fetch(&rq, &r, err, sizeof err), PK_EINVAL);
}

/* Keeps going for the first *cls calls: a read that gives up after its
 * third look has been waiting, polling, for data the server holds. */
static bool give_up_later(void *cls) { return (*(int *)cls)-- > 0; }

/* A stream: the headers come back with the first event, the body as it
 * arrives, its end as 0; giving up stops a read that waits. */
static void test_stream(void)
{
    char url[128], err[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sse", port);
    httpc_request rq = req("GET", url);
    httpc_stream *s;
    httpc_response head;
    int sent0 = count(&n_held_sent);
    CHECK_EQ_INT(httpc_open(&rq, &s, &head, err, sizeof err), PK_OK);
    CHECK_EQ_INT(head.status, 200);
    CHECK_STR(header(&head, "content-type"), "text/event-stream");
    char buf[64];
    long n = httpc_read(s, buf, sizeof buf, NULL, err, sizeof err);
    CHECK(n == 9 && !memcmp(buf, "data: 1\n\n", 9));
    CHECK_EQ_INT(count(&n_held_sent), sent0);            /* before the second event */
    release();
    n = httpc_read(s, buf, 4, NULL, err, sizeof err);    /* a small buffer: the rest comes next */
    CHECK(n == 4 && !memcmp(buf, "data", 4));
    n = httpc_read(s, buf, sizeof buf, NULL, err, sizeof err);
    CHECK(n == 5 && !memcmp(buf, ": 2\n\n", 5));
    CHECK_EQ_INT(httpc_read(s, buf, sizeof buf, NULL, err, sizeof err), 0);
    httpc_close(s);
    httpc_response_free(&head);

    int looks = 1 << 20;
    rq.keep_going = give_up_later;
    rq.cls = &looks;
    sent0 = count(&n_held_sent);
    CHECK_EQ_INT(httpc_open(&rq, &s, &head, err, sizeof err), PK_OK);
    CHECK_EQ_INT(httpc_read(s, buf, sizeof buf, NULL, err, sizeof err), 9);
    looks = 3;
    CHECK_EQ_INT(httpc_read(s, buf, sizeof buf, NULL, err, sizeof err), PK_ECANCELLED);
    CHECK_EQ_INT(count(&n_held_sent), sent0);            /* it gave up while the event was held */
    CHECK(looks < 0);
    httpc_close(s);
    httpc_response_free(&head);
    httpc_close(NULL);
    release();
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_urls);
    if (!start_server()) {
        fprintf(stderr, "test_httpc: no loopback socket\n");
        return 1;
    }
    TEST_RUN(test_exchange);
    TEST_RUN(test_stream);
    TEST_RUN(test_bounds);
    return test_finish();
}
