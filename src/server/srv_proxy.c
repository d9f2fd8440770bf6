/*
 * srv_proxy.c - GET/POST /cors-proxy?url=URL (--ui-mcp-proxy): the CORS
 * proxy llama-server's web UI uses to reach MCP servers that send no CORS
 * headers.  The request is sent to URL and its answer returned: status,
 * Content-Type, body and the end-to-end headers.
 *
 * It lets whoever may call it make this machine send requests anywhere it
 * can reach, so it is bounded (docs/security.md):
 *   - off unless --ui-mcp-proxy (then a 403, as llama-server answers);
 *   - behind --api-key like every route but /health;
 *   - http and https URLs only, with no user or password in them, the same
 *     for at most SRV_PROXY_REDIRECTS redirects;
 *   - forwarded: only the client's headers named X-Llama-Server-Proxy-Header-NAME,
 *     as NAME (so the caller's Authorization, X-Api-Key, Cookie and
 *     Proxy-Authorization for polykv never leave), never Host,
 *     Content-Length, Transfer-Encoding, Connection or Accept-Encoding;
 *   - the answer: at most SRV_PROXY_MAX_BYTES, within --timeout, connect
 *     within SRV_PROXY_CONNECT_MS; a client that leaves stops the fetch;
 *     hop-by-hop headers, CORS headers and Set-Cookie are not passed back
 *     (a proxied site must not set cookies on polykv's origin).
 * An event stream (text/event-stream) is passed on as it comes, within
 * the same size and time bounds; any other answer is read whole first.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../httpc/httpc.h"
#include "srv_impl.h"

#define SRV_PROXY_MAX_BYTES (16u << 20)
#define SRV_PROXY_CONNECT_MS 10000
#define SRV_PROXY_REDIRECTS 5
#define SRV_PROXY_MAX_HEADERS 64

static const char PREFIX[] = "x-llama-server-proxy-header-";

typedef struct proxy_headers {
    httpc_header h[SRV_PROXY_MAX_HEADERS];
    int n;
} proxy_headers;

/* Headers a client may not set on the forwarded request: libcurl writes
 * them from the request it sends, or they would change how it is framed. */
static bool framing_header(const char *name)
{
    static const char *const names[] = { "host", "content-length", "transfer-encoding", "connection",
                                         "keep-alive", "accept-encoding", "te", "upgrade", "trailer" };
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (!strcasecmp(name, names[i])) return true;
    return false;
}

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    proxy_headers *ph = cls;
    size_t n = sizeof PREFIX - 1;
    if (strncasecmp(key, PREFIX, n) || !key[n] || framing_header(key + n)) return MHD_YES;
    if (ph->n < SRV_PROXY_MAX_HEADERS) ph->h[ph->n++] = (httpc_header){ key + n, value ? value : "" };
    return MHD_YES;
}

/* Headers of the answer that stay with the hop they came on, or that the
 * server sets itself. */
static bool kept_back(const char *name)
{
    static const char *const names[] = { "connection", "keep-alive", "transfer-encoding", "content-length",
                                         "te", "trailer", "upgrade", "proxy-authenticate", "proxy-connection",
                                         "server", "date", "content-type", "x-content-type-options",
                                         "set-cookie", "set-cookie2" };
    if (!strncasecmp(name, "access-control-", 15)) return true;
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (!strcasecmp(name, names[i])) return true;
    return false;
}

/* One proxied exchange; owned by the handler until a streamed answer's
 * response takes it (freed by stream_free). */
typedef struct proxy_ctx {
    srv *s;
    struct MHD_Connection *conn;
    int probe;                     /* srv_conn_alive's, before the headers go */
    bool headers_sent;
    httpc_stream *hs;
} proxy_ctx;

/* The exchange goes on while the client waits and the server runs. */
static bool still_wanted(void *cls)
{
    proxy_ctx *p = cls;
    return !atomic_load(&p->s->stopping) && srv_conn_alive(p->conn, p->headers_sent ? NULL : &p->probe);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    proxy_ctx *p = cls;
    char err[256];
    long n = httpc_read(p->hs, buf, max, NULL, err, sizeof err);
    if (n > 0) return n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
    proxy_ctx *p = cls;
    httpc_close(p->hs);
    free(p);
}

static const char *content_type(const httpc_response *h)
{
    for (int i = 0; i < h->n_headers; i++)
        if (!strcasecmp(h->names[i], "content-type")) return h->values[i];
    return "application/octet-stream";
}

/* An event stream is passed on as it comes (MCP's SSE transports keep one
 * open); anything else is read whole first, so its length is known. */
static bool streamed(const srv_req *r, const httpc_response *h)
{
    return strncasecmp(content_type(h), "text/event-stream", 17) == 0 && strcmp(r->method, "HEAD") &&
           h->status != 204 && h->status != 304;
}

static enum MHD_Result send_head(srv_req *r, const httpc_response *h, struct MHD_Response *resp)
{
    if (!resp) return srv_reply_errorf(r, 500, "out of memory");
    for (int i = 0; i < h->n_headers; i++)
        if (!kept_back(h->names[i])) MHD_add_response_header(resp, h->names[i], h->values[i]);
    return srv_queue(r, (unsigned)h->status, resp, content_type(h));
}

static enum MHD_Result fail_with(srv_req *r, pk_status st, bool timed_out, const char *err)
{
    if (st == PK_ECANCELLED) return MHD_NO;     /* nobody is waiting for the answer */
    if (st == PK_EINVAL) return srv_reply_errorf(r, 400, "proxy: %s", err);
    if (st == PK_ENOMEM) return srv_reply_errorf(r, 500, "proxy: out of memory");
    return srv_reply_errorf(r, timed_out ? 504 : 502, "proxy: %s", err);
}

/* The whole body of p's answer, then the reply; p is freed. */
static enum MHD_Result relay_whole(srv_req *r, proxy_ctx *p, httpc_response *head)
{
    pk_buf body = {0};
    char chunk[16384], err[256];
    bool timed_out = false;
    long n;
    while ((n = httpc_read(p->hs, chunk, sizeof chunk, &timed_out, err, sizeof err)) > 0 && !body.oom)
        pk_buf_put(&body, chunk, (size_t)n);
    stream_free(p);
    if (n < 0 || body.oom) {
        pk_buf_free(&body);
        return fail_with(r, n < 0 ? (pk_status)n : PK_ENOMEM, timed_out, err);
    }
    struct MHD_Response *resp =
        body.p ? MHD_create_response_from_buffer_with_free_callback(body.n, body.p, free)
               : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) pk_buf_free(&body);
    return send_head(r, head, resp);
}

enum MHD_Result srv_h_cors_proxy(srv_req *r, json_t *body)
{
    srv *s = r->s;
    if (!s->p.ui_mcp_proxy) {
        srv_err e = { .status = 403, .type = "feature_disabled" };
        snprintf(e.msg, sizeof e.msg, "this feature is disabled (start the server with --ui-mcp-proxy)");
        return srv_reply_error(r, &e);
    }
    const char *url = srv_query(r, "url");
    if (!url || !*url) return srv_reply_errorf(r, 400, "/cors-proxy needs ?url=http(s)://...");
    if (!httpc_url_ok(url))
        return srv_reply_errorf(r, 400, "url: only http and https URLs with a host, and no user or "
                                "password in them, are proxied");
    proxy_headers ph = { .n = 0 };
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect, &ph);
    proxy_ctx *p = calloc(1, sizeof *p);
    if (!p) return srv_reply_errorf(r, 500, "out of memory");
    *p = (proxy_ctx){ .s = s, .conn = r->conn, .probe = r->http11 ? SRV_PROBE_READY : SRV_PROBE_NONE };
    bool post = !strcmp(r->method, "POST");
    httpc_request rq = {
        .method = post ? "POST" : r->method,
        .url = url,
        .headers = ph.h,
        .n_headers = ph.n,
        .body = post ? r->body.p : NULL,
        .n_body = post ? r->body.n : 0,
        .connect_timeout_ms = SRV_PROXY_CONNECT_MS,
        .timeout_ms = (long)s->p.timeout_s * 1000,
        .max_body_bytes = SRV_PROXY_MAX_BYTES,
        .max_redirects = SRV_PROXY_REDIRECTS,
        .keep_going = still_wanted,
        .cls = p,
    };
    httpc_response head;
    char err[256];
    pk_status st = httpc_open(&rq, &p->hs, &head, err, sizeof err);
    if (st != PK_OK) {
        free(p);
        return fail_with(r, st, head.timed_out, err);
    }
    enum MHD_Result ret;
    if (streamed(r, &head)) {
        p->headers_sent = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, p,
                                                                      stream_free);
        if (!resp) stream_free(p);
        ret = send_head(r, &head, resp);
    } else {
        ret = relay_whole(r, p, &head);
    }
    httpc_response_free(&head);
    return ret;
}
