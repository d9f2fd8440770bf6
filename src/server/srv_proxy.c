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
 * The answer is read whole before it is sent: a stream (SSE) comes back
 * when it ends, not as it goes.
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

typedef struct proxy_watch { srv_req *r; int probe; } proxy_watch;

/* The fetch goes on while the client waits and the server runs. */
static bool still_wanted(void *cls)
{
    proxy_watch *w = cls;
    return !atomic_load(&w->r->s->stopping) && srv_conn_alive(w->r->conn, &w->probe);
}

static enum MHD_Result reply(srv_req *r, httpc_response *a)
{
    size_t n = a->body.n;
    char *data = a->body.p;
    struct MHD_Response *resp = data ? MHD_create_response_from_buffer_with_free_callback(n, data, free)
                                     : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return srv_reply_errorf(r, 500, "out of memory");
    a->body = (pk_buf){0};                      /* the response owns it now */
    const char *ctype = "application/octet-stream";
    for (int i = 0; i < a->n_headers; i++) {
        if (!strcasecmp(a->names[i], "content-type")) ctype = a->values[i];
        else if (!kept_back(a->names[i])) MHD_add_response_header(resp, a->names[i], a->values[i]);
    }
    return srv_queue(r, (unsigned)a->status, resp, ctype);
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
        return srv_reply_errorf(r, 400, "url: only http and https URLs with a host, and no user or password in "
                                "them, are proxied");
    proxy_headers ph = { .n = 0 };
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect, &ph);
    proxy_watch w = { r, r->http11 ? SRV_PROBE_READY : SRV_PROBE_NONE };
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
        .cls = &w,
    };
    httpc_response a;
    char err[256];
    pk_status st = httpc_fetch(&rq, &a, err, sizeof err);
    if (st == PK_OK) {
        enum MHD_Result ret = reply(r, &a);
        httpc_response_free(&a);
        return ret;
    }
    if (st == PK_ECANCELLED) return MHD_NO;     /* nobody is waiting for the answer */
    if (st == PK_EINVAL) return srv_reply_errorf(r, 400, "proxy: %s", err);
    if (st == PK_ENOMEM) return srv_reply_errorf(r, 500, "proxy: out of memory");
    return srv_reply_errorf(r, a.timed_out ? 504 : 502, "proxy: %s", err);
}
