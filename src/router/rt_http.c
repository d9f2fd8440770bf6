/*
 * rt_http.c - the router's HTTP/1.1 client for its children on loopback
 * (rt.h).  One request per connection, so a response ends with its
 * Content-Length, its last chunk, or the close; no connection reuse, no
 * pipelining, nothing to resynchronize.
 *
 *   socket -> in[] (16 KiB) -> head: status line, header lines (8 KiB each)
 *                           -> body: BODY_LENGTH (left bytes) | BODY_CHUNKED
 *                                    (chunk_left of this chunk) | BODY_CLOSE
 *
 * A body read returns as soon as some bytes are there, so an SSE event the
 * child wrote goes on before the next one exists.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rt.h"

#define LINE_MAX_BYTES 8192

typedef enum body_mode { BODY_NONE = 0, BODY_LENGTH, BODY_CHUNKED, BODY_CLOSE, BODY_DONE } body_mode;

struct rt_conn {
    int fd;
    int timeout_ms;
    char in[16384];
    size_t pos, len;             /* unread bytes are in[pos, len) */
    body_mode mode;
    int64_t left;                /* BODY_LENGTH: bytes to come; BODY_CHUNKED: of this chunk */
    bool (*alive)(void *arg);    /* rt_http_watch */
    void *alive_arg;
};

#define WATCH_EVERY_MS 100

pk_status rt_http_wrap(int fd, int timeout_ms, rt_conn **out)
{
    *out = NULL;
    rt_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return PK_ENOMEM;
    }
    c->fd = fd;
    c->timeout_ms = timeout_ms;
    *out = c;
    return PK_OK;
}

pk_status rt_http_open(int port, int timeout_ms, rt_conn **out)
{
    *out = NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return PK_EIO;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    /* Loopback connects or refuses at once: no connect timeout needed. */
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return PK_EIO;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return rt_http_wrap(fd, timeout_ms, out);
}

void rt_http_close(rt_conn *c)
{
    if (!c) return;
    close(c->fd);
    free(c);
}

void rt_http_watch(rt_conn *c, bool (*alive)(void *arg), void *arg)
{
    c->alive = alive;
    c->alive_arg = arg;
}

/* Waits for events up to the timeout, in slices when a watch is set. */
static bool wait_fd(rt_conn *c, short events)
{
    struct pollfd p = { .fd = c->fd, .events = events };
    double t_end = pk_time_ms() + c->timeout_ms;
    for (;;) {
        int left = (int)(t_end - pk_time_ms());
        if (left < 0) left = 0;
        int n = poll(&p, 1, c->alive ? MIN(left, WATCH_EVERY_MS) : left);
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return false;
        if (n == 0 && left == 0) return false;
        if (c->alive && !c->alive(c->alive_arg)) return false;
    }
}

static bool write_all(rt_conn *c, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        if (!wait_fd(c, POLLOUT)) return false;
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* More bytes into in[]: > 0 read, 0 closed, -1 error or timeout. */
static ssize_t fill(rt_conn *c)
{
    if (c->pos == c->len) c->pos = c->len = 0;
    if (c->pos > 0 && c->len == sizeof c->in) {
        memmove(c->in, c->in + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    if (c->len == sizeof c->in) return -1;
    for (;;) {
        if (!wait_fd(c, POLLIN)) return -1;
        ssize_t k = recv(c->fd, c->in + c->len, sizeof c->in - c->len, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (k > 0) c->len += (size_t)k;
        return k;
    }
}

/* One line without its CRLF (or bare LF) into line.  PK_EIO when the
 * connection ends first, PK_EFORMAT when the line is too long. */
static pk_status read_line(rt_conn *c, char *line, size_t cap)
{
    size_t n = 0;
    for (;;) {
        while (c->pos < c->len) {
            char ch = c->in[c->pos++];
            if (ch == '\n') {
                if (n && line[n - 1] == '\r') n--;
                line[n] = 0;
                return PK_OK;
            }
            if (n + 1 >= cap) return PK_EFORMAT;
            line[n++] = ch;
        }
        if (fill(c) <= 0) return PK_EIO;
    }
}

pk_status rt_http_send(rt_conn *c, const char *method, const char *target, const char *headers,
                       const void *body, size_t body_len)
{
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method,
                     target);
    if (n < 0 || (size_t)n >= sizeof head) return PK_EINVAL;
    if (!write_all(c, head, (size_t)n)) return PK_EIO;
    if (headers && !write_all(c, headers, strlen(headers))) return PK_EIO;
    n = body_len || !strcmp(method, "POST") ? snprintf(head, sizeof head, "Content-Length: %zu\r\n\r\n", body_len)
                                            : snprintf(head, sizeof head, "\r\n");
    if (!write_all(c, head, (size_t)n)) return PK_EIO;
    return body_len && !write_all(c, body, body_len) ? PK_EIO : PK_OK;
}

const char *rt_http_header(const rt_resp *resp, const char *name)
{
    for (int i = 0; i < resp->n_headers; i++)
        if (!strcasecmp(resp->headers[i].name, name)) return resp->headers[i].value;
    return NULL;
}

static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = MIN(strlen(src), cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

static bool parse_header(char *line, rt_resp *out)
{
    char *colon = strchr(line, ':');
    if (!colon || colon == line) return false;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    size_t vn = strlen(v);
    while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) v[--vn] = 0;
    if (out->n_headers < RT_MAX_HEADERS) {
        rt_header *h = &out->headers[out->n_headers++];
        copy_cut(h->name, sizeof h->name, line);
        copy_cut(h->value, sizeof h->value, v);
    }
    return true;
}

pk_status rt_http_head(rt_conn *c, rt_resp *out)
{
    memset(out, 0, sizeof *out);
    char line[LINE_MAX_BYTES];
    pk_status st;
    /* Interim answers (100 Continue: polykv sends one to probe a half-closed
     * client) come before the real one. */
    do {
        if ((st = read_line(c, line, sizeof line))) return st;
        int minor;
        if (sscanf(line, "HTTP/1.%d %d", &minor, &out->status) != 2 || out->status < 100 || out->status > 999)
            return PK_EFORMAT;
        for (;;) {
            if ((st = read_line(c, line, sizeof line))) return st;
            if (!line[0]) break;
            if (out->status >= 200 && !parse_header(line, out)) return PK_EFORMAT;
        }
    } while (out->status < 200);
    out->content_length = -1;
    const char *te = rt_http_header(out, "Transfer-Encoding");
    const char *cl = rt_http_header(out, "Content-Length");
    if (te && strcasecmp(te, "chunked")) return PK_EFORMAT;
    if (te) {
        c->mode = BODY_CHUNKED;
        c->left = 0;
    } else if (cl) {
        char *end;
        long long v = strtoll(cl, &end, 10);
        if (end == cl || *end || v < 0) return PK_EFORMAT;
        out->content_length = c->left = v;
        c->mode = v ? BODY_LENGTH : BODY_DONE;
    } else {
        c->mode = out->status == 204 || out->status == 304 ? BODY_DONE : BODY_CLOSE;
    }
    return PK_OK;
}

/* Bytes of in[] handed out, at most want. */
static size_t take(rt_conn *c, char *buf, size_t want)
{
    size_t n = MIN(want, c->len - c->pos);
    memcpy(buf, c->in + c->pos, n);
    c->pos += n;
    return n;
}

/* At the start of a chunk: its size line (extensions ignored); after the
 * last one the trailer.  False for a malformed size or an early end. */
static bool next_chunk(rt_conn *c)
{
    char line[LINE_MAX_BYTES];
    if (read_line(c, line, sizeof line)) return false;
    char *end;
    errno = 0;
    long long v = strtoll(line, &end, 16);
    if (end == line || (*end && *end != ';' && *end != ' ') || v < 0 || errno) return false;
    c->left = v;
    if (v) return true;
    do {
        if (read_line(c, line, sizeof line)) return false;
    } while (line[0]);
    c->mode = BODY_DONE;
    return true;
}

ssize_t rt_http_body(rt_conn *c, char *buf, size_t cap)
{
    if (!cap) return -1;
    for (;;) {
        switch (c->mode) {
        case BODY_DONE: return 0;
        case BODY_NONE: return -1;
        case BODY_CLOSE: {
            if (c->pos == c->len) {
                ssize_t k = fill(c);
                if (k < 0) return -1;
                if (k == 0) {
                    c->mode = BODY_DONE;
                    return 0;
                }
            }
            return (ssize_t)take(c, buf, cap);
        }
        case BODY_LENGTH:
        case BODY_CHUNKED:
            if (c->mode == BODY_CHUNKED && c->left == 0) {
                if (!next_chunk(c)) return -1;
                continue;
            }
            if (c->pos == c->len && fill(c) <= 0) return -1;
            size_t n = take(c, buf, (size_t)MIN((int64_t)cap, c->left));
            c->left -= (int64_t)n;
            if (c->left == 0) {
                if (c->mode == BODY_LENGTH) {
                    c->mode = BODY_DONE;
                } else {
                    char crlf[8];
                    if (read_line(c, crlf, sizeof crlf) || crlf[0]) return -1;
                }
            }
            return (ssize_t)n;
        }
    }
}

int rt_http_get_status(int port, const char *path, const char *api_key, int timeout_ms)
{
    rt_conn *c;
    if (rt_http_open(port, timeout_ms, &c)) return -1;
    char auth[600] = "";
    if (api_key && *api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", api_key);
    rt_resp resp;
    int status = -1;
    if (!rt_http_send(c, "GET", path, auth, NULL, 0) && !rt_http_head(c, &resp)) status = resp.status;
    rt_http_close(c);
    return status;
}
