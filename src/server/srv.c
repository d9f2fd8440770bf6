/*
 * srv.c - the HTTP side of the server: the MHD daemon, routing, API-key
 * checks, request bodies (with their size limit), and the replies every
 * handler uses (JSON, OpenAI-shaped errors, SSE).
 *
 * A request goes through the access handler three ways (MHD's protocol):
 *   first call   headers only: route, auth, loading and size checks, each
 *                answered at once when it fails (the body is then skipped);
 *   upload calls body chunks appended; past the limit (a chunked body) a
 *                413 is written and the connection closed at once;
 *   final call   body complete: JSON parsed, the route's handler runs and
 *                queues the reply (it may block: this is the connection's
 *                own thread).
 */
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <pthread.h>
#include <time.h>
#include <xxhash.h>

#include "../model/model.h"
#include "../common/utf8.h"
#include "srv_parse.h"

static const srv_route routes[] = {
    { "/health",              "GET",  srv_h_health,          SRV_PROBE, false, false },
    { "/v1/health",           "GET",  srv_h_health,          SRV_PROBE, false, false },
    { "/v1/models",           "GET",  srv_h_oai_models,      SRV_KEY, false, false },
    { "/models",              "GET",  srv_h_oai_models,      SRV_KEY, false, false },
    { "/v1/completions",      "POST", srv_h_oai_completions, SRV_KEY, false, true },
    { "/v1/chat/completions", "POST", srv_h_oai_chat,        SRV_KEY, false, true },
    { "/chat/completions",    "POST", srv_h_oai_chat,        SRV_KEY, false, true },
    { "/v1/responses",        "POST", srv_h_responses,       SRV_KEY, false, true },
    { "/responses",           "POST", srv_h_responses,       SRV_KEY, false, true },
    { "/v1/responses/input_tokens", "POST", srv_h_responses_input_tokens, SRV_KEY, false, true },
    { "/responses/input_tokens",    "POST", srv_h_responses_input_tokens, SRV_KEY, false, true },
    { "/v1/chat/completions/input_tokens", "POST", srv_h_oai_input_tokens, SRV_KEY, false, true },
    { "/chat/completions/input_tokens",    "POST", srv_h_oai_input_tokens, SRV_KEY, false, true },
    { "/v1/messages",         "POST", srv_h_anth_messages,   SRV_KEY, false, true },
    { "/v1/messages/count_tokens", "POST", srv_h_anth_count_tokens, SRV_KEY, false, true },
    { "/completion",          "POST", srv_h_completion,      SRV_KEY, false, true },
    { "/completions",         "POST", srv_h_completion,      SRV_KEY, false, true },
    { "/tokenize",            "POST", srv_h_tokenize,        SRV_KEY, false, true },
    { "/detokenize",          "POST", srv_h_detokenize,      SRV_KEY, false, true },
    { "/apply-template",      "POST", srv_h_apply_template,  SRV_KEY, false, true },
    { "/props",               "*",    srv_h_props,           SRV_KEY, false, false },
    { "/slots",               "GET",  srv_h_slots,           SRV_KEY, false, false },
    { "/metrics",             "GET",  srv_h_metrics,         SRV_PROBE, false, false },
    { "/polykv/tps",          "GET",  srv_h_tps,             SRV_KEY, false, false },
    { "/polykv/cache",        "GET",  srv_h_cache,           SRV_KEY, false, false },
    { "/polykv/lookup",       "POST", srv_h_lookup,          SRV_KEY, false, true },
    { "/polykv/pools",        "*",    srv_h_pools,           SRV_KEY, false, false },
    { "/polykv/admission",    "*",    srv_h_admission,       SRV_KEY, false, false },
    { "/polykv/capacity",     "GET",  srv_h_capacity,        SRV_KEY, false, false },
    { "/polykv/pools/",       "*",    srv_h_pool,            SRV_KEY, true, false },
    { "/slots/",              "*",    srv_h_slot_action,     SRV_KEY, true, false },
    { "/cors-proxy",          "RAW",  srv_h_cors_proxy,      SRV_KEY, false, false },
    { "/",                    "GET",  srv_h_page,            SRV_OPEN, false, false },
    { "/assets/",             "GET",  srv_h_page,            SRV_OPEN, true, false },
};

srv_params srv_default_params(void)
{
    return (srv_params){
        .host = "127.0.0.1",
        .port = 8080,
        .endpoint_slots = true,
        .jinja = true,
        .timeout_s = 600,
        .header_timeout_s = 10,
        .max_body_bytes = 8u << 20,
        .max_connections = 256,
        .sampling = smp_default_params(),
        .n_predict = -1,
        .cors_credentials = true,
        .reasoning_budget = -1,
    };
}

/* ---- errors ---- */

const char *srv_error_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default:  return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

bool srv_fail(srv_err *e, unsigned status, const char *param, const char *fmt, ...)
{
    memset(e, 0, sizeof *e);
    e->status = status;
    if (param) snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

json_t *srv_error_json(const srv_err *e)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "code", json_integer(e->status));
    json_object_set_new(o, "message", srv_json_text(e->msg, strlen(e->msg)));
    json_object_set_new(o, "type", json_string(e->type ? e->type : srv_error_type(e->status)));
    if (e->param[0]) json_object_set_new(o, "param", json_string(e->param));
    if (e->n_ctx > 0) {
        json_object_set_new(o, "n_prompt_tokens", json_integer(e->n_prompt));
        json_object_set_new(o, "n_ctx", json_integer(e->n_ctx));
    }
    return json_pack("{s:o}", "error", o);
}

json_t *srv_req_error_json(const srv_req *r, const srv_err *e)
{
    return r->anthropic ? srv_anth_error_json(e) : srv_error_json(e);
}

/* ---- replies ---- */

static enum MHD_Result queue(srv_req *r, unsigned status, struct MHD_Response *resp, const char *content_type)
{
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    srv_cors_add(r, resp, !strcmp(r->method, "OPTIONS"));
    /* Error bodies quote the client's URL and fields (JSON-escaped); a
     * browser must never sniff one as HTML. */
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (r->placed) {
        char v[16];
        if (r->placed_pool > 0) {
            snprintf(v, sizeof v, "%d", r->placed_pool);
            MHD_add_response_header(resp, "x-pool-id", v);
        }
        snprintf(v, sizeof v, "%d", r->placed_cached);
        MHD_add_response_header(resp, "x-cached-prefix-tokens", v);
    }
    char n[16];
    if (r->sessions_remaining >= 0) {
        snprintf(n, sizeof n, "%d", r->sessions_remaining);
        MHD_add_response_header(resp, "X-Sessions-Remaining", n);
    }
    if (r->retry_after_s > 0) {
        snprintf(n, sizeof n, "%d", r->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, n);
    }
    if (r->hdr_name[0]) MHD_add_response_header(resp, r->hdr_name, r->hdr_value);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    r->status = status;
    return ret;
}

enum MHD_Result srv_queue(srv_req *r, unsigned status, struct MHD_Response *resp, const char *content_type)
{
    return queue(r, status, resp, content_type);
}

/* A captured reply (srv_req.capture) keeps the body for the caller. */
static enum MHD_Result capture(srv_req *r, unsigned status, json_t *body)
{
    json_decref(r->captured);
    r->captured = body;
    r->status = status;
    r->replied = true;
    return MHD_YES;
}

enum MHD_Result srv_reply_text(srv_req *r, unsigned status, const char *content_type, const char *text, size_t len)
{
    if (r->capture) {
        json_t *j = json_loadb(text, len, JSON_DECODE_ANY, NULL);
        return capture(r, status, j ? j : srv_json_text(text, len));
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    return queue(r, status, resp, content_type);
}

enum MHD_Result srv_reply_json_text(srv_req *r, unsigned status, char *text, size_t len)
{
    if (!text) {
        static const char oom[] = "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        return srv_reply_text(r, 500, "application/json", oom, sizeof oom - 1);
    }
    if (r->capture) {
        enum MHD_Result ret = srv_reply_text(r, status, "application/json; charset=utf-8", text, len);
        free(text);
        return ret;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, text, free);
    if (!resp) free(text);
    return queue(r, status, resp, "application/json; charset=utf-8");
}

enum MHD_Result srv_reply_json(srv_req *r, unsigned status, json_t *j)
{
    if (r->capture && j) return capture(r, status, j);
    char *s = j ? json_dumps(j, SRV_JSON_DUMP) : NULL;
    json_decref(j);
    return srv_reply_json_text(r, status, s, s ? strlen(s) : 0);
}

enum MHD_Result srv_reply_error(srv_req *r, const srv_err *e)
{
    return srv_reply_json(r, e->status, srv_req_error_json(r, e));
}

enum MHD_Result srv_reply_errorf(srv_req *r, unsigned status, const char *fmt, ...)
{
    srv_err e = { .status = status };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return srv_reply_error(r, &e);
}

enum MHD_Result srv_reply_sse(srv_req *r, MHD_ContentReaderCallback reader, void *cls,
                              MHD_ContentReaderFreeCallback free_cb)
{
    if (r->capture) {
        free_cb(cls);
        return srv_reply_errorf(r, 400, "this route answers with one JSON body, not a stream");
    }
    if (!strcmp(r->method, "HEAD")) {
        /* MHD 0.9.75 sends a chunked response's last chunk even to HEAD: an
         * empty body of known length has none. */
        free_cb(cls);
        struct MHD_Response *empty = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (empty) MHD_add_response_header(empty, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        return queue(r, 200, empty, "text/event-stream");
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, reader, cls, free_cb);
    if (!resp) {
        free_cb(cls);
        return srv_reply_errorf(r, 500, "out of memory");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, 200, resp, "text/event-stream");
}

enum MHD_Result srv_reply_callback(srv_req *r, unsigned status, const char *content_type, uint64_t size,
                                   const char *const *headers, MHD_ContentReaderCallback reader, void *cls,
                                   MHD_ContentReaderFreeCallback free_cb)
{
    struct MHD_Response *resp = MHD_create_response_from_callback(size, 16384, reader, cls, free_cb);
    if (!resp) {
        free_cb(cls);
        return srv_reply_errorf(r, 500, "out of memory");
    }
    for (size_t k = 0; headers && headers[k]; k += 2) MHD_add_response_header(resp, headers[k], headers[k + 1]);
    return queue(r, status, resp, content_type);
}

bool srv_conn_alive(struct MHD_Connection *conn, int *probe)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = { .fd = ci->connect_fd, .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
    /* Readable: a pipelined request, or the end of the peer's stream. */
    char c;
    if (recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0) return true;
    if (!probe || *probe == SRV_PROBE_SENT) return true;
    if (*probe == SRV_PROBE_NONE) return false;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    *probe = SRV_PROBE_SENT;
    return send(ci->connect_fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)(sizeof cont - 1);
}

const char *srv_query(srv_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

void srv_random_id(char *buf, size_t cap, const char *prefix)
{
    static const char alnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        /* Ids need to be unique, not secret. */
        uint64_t x = (uint64_t)pk_time_us() * 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < sizeof rnd; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            rnd[i] = (unsigned char)(x >> 33);
    }
    size_t n = (size_t)snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && n + 1 < cap; i++) buf[n++] = alnum[rnd[i] % (sizeof alnum - 1)];
    if (cap) buf[MIN(n, cap - 1)] = 0;
}

/* ---- auth ---- */

/* Finds the client's key among ours (srv_key_lookup: seeded 128-bit
 * digests compared whole, every key each time, so timing tells nothing of
 * any key's content or length) and notes whose it is in r->tenant. */
static bool authorized(srv_req *r)
{
    const srv *s = r->s;
    if (!s->n_keys) return true;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ') h++;
    } else {
        h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Api-Key");
    }
    int k = h ? srv_key_lookup(s->keys, s->n_keys, s->key_seed, h) : -1;
    if (k < 0) return false;
    r->tenant = s->keys[k].admin ? -1 : k;
    return true;
}

/* ---- the access handler ---- */

/* Vertex AI's routes (srv_predict.c), at the paths its environment names. */
static const srv_route gcp_predict = { NULL, "POST", srv_h_predict, SRV_KEY, false, true };
static const srv_route gcp_health = { NULL, "GET", srv_h_health, SRV_PROBE, false, false };

bool srv_route_by_format(const char *format, srv_handler *fn, const char **path)
{
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        const srv_route *rt = &routes[i];
        if (rt->prefix || strcmp(rt->method, "POST")) continue;
        char alias[64];
        srv_gcp_format_of(rt->path, alias, sizeof alias);
        if (!strcmp(format, alias) || !strcmp(format, rt->path)) {
            *fn = rt->fn;
            *path = rt->path;
            return true;
        }
    }
    return false;
}

static const srv_route *find_route(const srv *s, const char *url, bool *path_known)
{
    *path_known = false;
    const char *pr = s->p.gcp_predict_route, *hr = s->p.gcp_health_route;
    if ((pr && !strcmp(url, pr)) || (hr && !strcmp(url, hr))) {
        *path_known = true;
        return pr && !strcmp(url, pr) ? &gcp_predict : &gcp_health;
    }
    const srv_route *table = s->p.router ? srv_router_routes : routes;
    size_t n_routes = s->p.router ? srv_n_router_routes : ARRAY_LEN(routes);
    for (size_t i = 0; i < n_routes; i++) {
        const srv_route *rt = &table[i];
        size_t n = strlen(rt->path);
        if (rt->prefix ? !strncmp(rt->path, url, n) && url[n] : !strcmp(rt->path, url)) {
            *path_known = true;
            return rt;
        }
    }
    return NULL;
}

/* The checks that need no body; true when a reply was queued. */
static bool early_reply(srv_req *r, enum MHD_Result *ret)
{
    if (!strcmp(r->method, "OPTIONS")) {     /* a CORS preflight, on any path (srv_cors.c) */
        *ret = srv_reply_text(r, 200, "text/plain", "", 0);
        return true;
    }
    bool known;
    const srv_route *rt = find_route(r->s, r->url, &known);
    if (!rt) {
        *ret = srv_reply_errorf(r, 404, "File Not Found");
        return true;
    }
    /* Anthropic's clients read their own error shape, from here on. */
    r->anthropic = rt->fn == srv_h_anth_messages || rt->fn == srv_h_anth_count_tokens;
    bool get_post = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD") || !strcmp(r->method, "POST");
    bool any = (!strcmp(rt->method, "*") && (get_post || !strcmp(r->method, "DELETE"))) ||
               (!strcmp(rt->method, "RAW") && get_post);
    if (!any && strcmp(rt->method, r->method) && !(strcmp(rt->method, "GET") == 0 && !strcmp(r->method, "HEAD"))) {
        *ret = srv_reply_errorf(r, 405, "%s %s: method not allowed (use %s)", r->method, r->url, rt->method);
        return true;
    }
    r->route = rt;
    bool open = rt->access == SRV_OPEN || (rt->access == SRV_PROBE && r->s->p.public_probes);
    if (!open && !authorized(r)) {
        *ret = srv_reply_errorf(r, 401, "Invalid API Key");
        return true;
    }
    if (!r->s->p.router && !srv_engine(r->s)) {
        *ret = srv_reply_errorf(r, 503, "Loading model");
        return true;
    }
    /* MHD 0.9.75 knows only chunked and waits for the body of any other
     * coding until the timeout. */
    const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te && strcasecmp(te, "chunked")) {
        *ret = srv_reply_errorf(r, 501, "Transfer-Encoding '%.64s' is not supported (only chunked)", te);
        return true;
    }
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > r->s->p.max_body_bytes) {
        *ret = srv_reply_errorf(r, 413, "the request body (%s bytes) is over the limit of %zu bytes", cl,
                                r->s->p.max_body_bytes);
        return true;
    }
    return false;
}

/* A body of unknown length (chunked) that outgrew the limit: MHD 0.9.75
 * takes no response until the body ended, so the 413 is written here on
 * the connection's own thread (nothing else writes on it yet), the sending
 * side shut, and the caller returns MHD_NO, which closes the connection
 * without reading the rest. */
static void refuse_body(srv_req *r)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    srv_err e = { .status = 413 };
    snprintf(e.msg, sizeof e.msg, "the request body is over the limit of %zu bytes", r->s->p.max_body_bytes);
    json_t *j = srv_req_error_json(r, &e);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n"
                     "Content-Type: application/json; charset=utf-8\r\nContent-Length: %zu\r\n\r\n",
                     body ? strlen(body) : 0);
    if (send(ci->connect_fd, head, (size_t)n, MSG_NOSIGNAL) == n && body)
        send(ci->connect_fd, body, strlen(body), MSG_NOSIGNAL);
    free(body);
    shutdown(ci->connect_fd, SHUT_WR);
    /* A lingering close: closing with unread input sends a reset, which can
     * reach the client before it read the 413 and discard it there.  So the
     * input is read and dropped for a moment (1 s at most) first; a
     * client that reads the answer stops sending and closes sooner.  Time
     * bounds it, not bytes: on loopback a client that writes without
     * reading pushes 16 MiB in a few ms, less than a busy client takes to
     * get to its socket (a byte cap of 16 MiB lost the 413 under load). */
    char sink[65536];
    double t_end = pk_time_ms() + 1000;
    for (;;) {
        double left = t_end - pk_time_ms();
        struct pollfd p = { .fd = ci->connect_fd, .events = POLLIN };
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        if (recv(ci->connect_fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
    }
    r->replied = true;
    r->status = 413;
}

/* False when the body went over the limit and the connection must close. */
static bool body_append(srv_req *r, const char *data, size_t n)
{
    if (r->body.n + n > r->s->p.max_body_bytes) {
        pk_buf_free(&r->body);
        refuse_body(r);
        return false;
    }
    pk_buf_put(&r->body, data, n);
    if (r->body.oom) r->body_oom = true;
    return true;
}

static enum MHD_Result dispatch(srv_req *r)
{
    /* The request is whole: from here it may idle as long as a request may
     * take (the daemon's own timeout, the short one, bounds sockets that
     * send a request slowly or not at all). */
    if (r->s->p.timeout_s != r->s->p.header_timeout_s)
        MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)r->s->p.timeout_s);
    if (r->body_oom) return srv_reply_errorf(r, 500, "out of memory for the request body");
    json_t *body = NULL;
    bool optional = !strcmp(r->route->method, "*");
    if (!strcmp(r->method, "POST") && (r->body.n || !optional) && strcmp(r->route->method, "RAW")) {
        json_error_t je;
        body = r->body.n ? json_loadb(r->body.p, r->body.n, 0, &je) : NULL;
        if (!r->body.n) return srv_reply_errorf(r, 400, "the request body must be a JSON object");
        if (!body) return srv_reply_errorf(r, 400, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        if (!json_is_object(body)) {
            json_decref(body);
            return srv_reply_errorf(r, 400, "the request body must be a JSON object");
        }
    }
    if (r->route->wakes && eng_wake(srv_engine(r->s)) != PK_OK) {
        json_decref(body);
        return srv_reply_errorf(r, 503, "the model could not be reloaded after sleeping");
    }
    enum MHD_Result ret = r->route->fn(r, body);
    json_decref(body);
    return ret;
}

/* The request context of a request whose own could not be allocated. */
static srv_req oom_req;

/* Query parameters a request may carry: every route reads a few. */
#define SRV_MAX_QUERY_ARGS 64

/* Marks a request whose query had more than SRV_MAX_QUERY_ARGS
 * parameters (its context until on_request makes the real one). */
static char too_many_args;

/* MHD's URI callback: it sees the raw URI before the library parses the
 * query.  MHD 0.9.75 stores every parameter in the connection's 32 KiB
 * memory pool; about 500 of them (a 3.4 kB URL) exhaust it, and the
 * library then closes the connection with no answer, having no memory
 * left to build one.  So a query past the bound is emptied here (the
 * URI is the library's own buffer, and the request is refused anyway),
 * and on_request answers it with a 400. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    char *q = strchr(uri, '?');
    size_t n_args = 0;
    for (const char *p = q; p && (p = strchr(p + 1, '&'));) n_args++;
    if (!q || n_args + 1 <= SRV_MAX_QUERY_ARGS) return NULL;
    q[1] = 0;
    return &too_many_args;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    if (r == &oom_req) {             /* answered already; the body is dropped */
        *upload_data_size = 0;
        return MHD_YES;
    }
    bool over_args = r == (srv_req *)(void *)&too_many_args;
    if (over_args) r = NULL;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) {
            /* A static reply needs none of our memory (MHD's own pool holds it). */
            static const char oom[] = "{\"error\":{\"code\":503,\"message\":\"out of memory, try again\","
                                      "\"type\":\"unavailable_error\"}}";
            struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                                                        MHD_RESPMEM_PERSISTENT);
            if (!resp) return MHD_NO;
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
            enum MHD_Result ret = MHD_queue_response(conn, 503, resp);
            MHD_destroy_response(resp);
            *con_cls = &oom_req;
            return ret;
        }
        r->s = s;
        r->conn = conn;
        r->url = url;
        r->method = method;
        r->t0_ms = pk_time_ms();
        r->sessions_remaining = -1;
        r->tenant = -1;
        r->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        *con_cls = r;
        enum MHD_Result ret;
        if (over_args) return srv_reply_errorf(r, 400, "more than %d query parameters", SRV_MAX_QUERY_ARGS);
        if (early_reply(r, &ret)) return ret;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->replied) return MHD_NO;
        if (!body_append(r, upload_data, *upload_data_size)) return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->replied) return MHD_YES;
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    if (!r || r == &oom_req || r == (srv_req *)(void *)&too_many_args) return;
    if (s->p.log_requests) {
        /* The URL is decoded: a %0a in it would forge a log line of its
         * own, an escape sequence would drive the reader's terminal. */
        char method[48], url[1024];
        pk_log_escape(r->method, strlen(r->method), method, sizeof method);
        pk_log_escape(r->url, strlen(r->url), url, sizeof url);
        fprintf(stderr, "srv: %s %s %u %.1f ms%s\n", method, url, r->status, pk_time_ms() - r->t0_ms,
                code == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    }
    pk_buf_free(&r->body);
    json_decref(r->captured);
    free(r);
    *con_cls = NULL;
}

/* MHD's own messages.  The two it prints when a handler gives up on a
 * client that left are expected, so only the request log shows them. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    srv *s = cls;
    char msg[512], safe[1024];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (!s->p.log_requests && (strstr(msg, "application error generating response") ||
                               strstr(msg, "Application reported internal error")))
        return;
    /* Its messages can quote a request (a header, the URL): escaped as
     * the request log is, the line's own end kept. */
    size_t len = n < 0 ? 0 : MIN((size_t)n, sizeof msg - 1);
    if (len && msg[len - 1] == '\n') len--;
    pk_log_escape(msg, len, safe, sizeof safe);
    fprintf(stderr, "srv: %s\n", safe);
}

/* ---- life cycle ---- */

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

static bool resolve(const char *host, int port, struct sockaddr_storage *addr, char *err, size_t err_len)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *res = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    int rc = getaddrinfo(host, ports, &hints, &res);
    if (rc || !res) {
        snprintf(err, err_len, "cannot resolve host '%s': %s", host, gai_strerror(rc));
        return false;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return true;
}

/* Starts a daemon on host:port as s->d[s->n_d++]. */
static pk_status listen_on(srv *s, const char *host, int port, char *err, size_t err_len)
{
    const srv_params *p = &s->p;
    struct sockaddr_storage addr;
    if (!resolve(host, port, &addr, err, err_len)) return PK_EINVAL;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)MIN(p->header_timeout_s, p->timeout_s),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)p->max_per_ip,
                            MHD_OPTION_END);
    if (!d) {
        snprintf(err, err_len, "cannot listen on %s:%d (address in use, or not an address of this machine)",
                 host, port);
        return PK_EIO;
    }
    s->d[s->n_d++] = d;
    return PK_OK;
}

pk_status srv_new(const srv_params *p, srv **out, char *err, size_t err_len)
{
    *out = NULL;
    if (!p->host || p->port < 0 || p->port > 65535 || p->timeout_s < 0 || p->header_timeout_s < 0 ||
        p->max_per_ip < 0 || p->max_connections < 1 || p->max_body_bytes < 1) {
        snprintf(err, err_len, "invalid server parameters");
        return PK_EINVAL;
    }
    const char *pr = p->gcp_predict_route;
    bool taken = false;
    for (size_t i = 0; pr && i < ARRAY_LEN(routes); i++) taken |= !strcmp(pr, routes[i].path);
    if (pr && (pr[0] != '/' || taken)) {
        snprintf(err, err_len, "the predict route %s (AIP_PREDICT_ROUTE) must be a path polykv does not serve", pr);
        return PK_EINVAL;
    }
    srv *s = calloc(1, sizeof *s);
    if (!s) return PK_ENOMEM;
    bool oom = false;
    s->p = *p;
    s->p.host = s->host = dup_or_null(p->host, &oom);
    s->p.api_key = s->api_key = dup_or_null(p->api_key, &oom);
    s->p.slot_save_path = s->save_dir = dup_or_null(p->slot_save_path, &oom);
    s->p.chat_template = s->chat_template = dup_or_null(p->chat_template, &oom);
    s->p.chat_template_file = s->chat_template_file = dup_or_null(p->chat_template_file, &oom);
    s->p.model_alias = s->alias = dup_or_null(p->model_alias, &oom);
    s->p.cors_origins = s->cors_origins = dup_or_null(srv_cors_default(p), &oom);
    s->p.model_tags = s->tags = dup_or_null(p->model_tags, &oom);
    s->p.gcp_predict_route = s->gcp_predict = dup_or_null(p->gcp_predict_route, &oom);
    s->p.gcp_health_route = s->gcp_health = dup_or_null(p->gcp_health_route, &oom);
    s->t_start = (int64_t)time(NULL);
    atomic_init(&s->stopping, false);
    atomic_init(&s->e, NULL);
    pthread_mutex_init(&s->scrape_mu, NULL);
    pthread_mutex_init(&s->own_mu, NULL);
    if (oom) {
        srv_free(s);
        return PK_ENOMEM;
    }
    if (getrandom(&s->key_seed, sizeof s->key_seed, 0) != (ssize_t)sizeof s->key_seed)
        s->key_seed = (uint64_t)pk_time_us() * 0x9e3779b97f4a7c15ull;
    pk_status kst = srv_keys_load(s, p->api_key, p->api_key_file, err, err_len);
    s->p.api_key_file = NULL;          /* read once, here; the keys are what stays */
    if (kst != PK_OK) {
        if (kst == PK_ENOMEM) snprintf(err, err_len, "out of memory");
        srv_free(s);
        return kst;
    }
    /* One daemon per address (libmicrohttpd binds one socket per daemon);
     * the first picks the port when it is 0, the others take the same. */
    int port = p->port;
    for (const char *h = p->host; *h;) {
        size_t n = strcspn(h, ",");
        char host[256];
        snprintf(host, sizeof host, "%.*s", (int)MIN(n, sizeof host - 1), h);
        h += n + (h[n] == ',');
        char *a = host, *z = host + strlen(host);
        while (*a == ' ') a++;
        while (z > a && z[-1] == ' ') *--z = 0;
        if (z > a + 1 && *a == '[' && z[-1] == ']') {   /* [::1], as in a URL */
            a++;
            *--z = 0;
        }
        if (s->n_d == SRV_MAX_HOSTS) {
            snprintf(err, err_len, "--host: at most %d addresses", SRV_MAX_HOSTS);
            srv_free(s);
            return PK_EINVAL;
        }
        if (!*a) continue;
        pk_status st = listen_on(s, a, port, err, err_len);
        if (st != PK_OK) {
            srv_free(s);
            return st;
        }
        if (s->n_d == 1) {
            const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d[0], MHD_DAEMON_INFO_BIND_PORT);
            port = di ? di->port : p->port;
        }
    }
    if (s->n_d == 0) {
        snprintf(err, err_len, "--host: no address given");
        srv_free(s);
        return PK_EINVAL;
    }
    s->port = port;
    srv_replica_name(port, s->replica, sizeof s->replica);
    *out = s;
    return PK_OK;
}

int srv_port(const srv *s) { return s->port; }

/* The first, in byte order, of a comma-separated list of names. */
static void first_alias(const char *list, char *out, size_t cap)
{
    out[0] = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        char name[SRV_MAX_NAME];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        if (n && (!out[0] || strcmp(name, out) < 0)) snprintf(out, cap, "%s", name);
        p += n + (p[n] == ',');
    }
}

static void base_name(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
}

void srv_replica_name(int port, char *out, size_t cap)
{
    char host[256] = "localhost";
    const char *ip = getenv("POD_IP");
    if (ip && *ip) snprintf(host, sizeof host, "%s", ip);
    else if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(out, cap, "%s:%d", host, port);
}

void srv_set_kv_events(srv *s, struct kvev_pub *kv)
{
    s->kv = kv;
}

void srv_model_name(const char *alias, const char *model_path, const model *m, char *out, size_t cap)
{
    if (alias && *alias) first_alias(alias, out, cap);
    else if (model_path) base_name(model_path, out, cap);
    else snprintf(out, cap, "%s", model_desc(m));
}

pk_status srv_set_engine(srv *s, eng *e, const char *model_path, char *err, size_t err_len)
{
    ASSERT(!srv_engine(s));
    const model *m = eng_model(e);
    const tok_vocab *v = model_vocab(m);
    tmpl_kind k = TMPL_UNKNOWN;
    const char *src = NULL;
    if (s->p.chat_template && *s->p.chat_template) {
        k = tmpl_from_name(s->p.chat_template);
        if (k == TMPL_UNKNOWN && s->p.jinja) {
            /* Not a layout's name: Jinja source, as llama-server takes it under --jinja. */
            pk_status st = srv_chat_init(s, v, &k, &src, err, err_len);
            if (st) return st;
        } else if (k == TMPL_UNKNOWN) {
            snprintf(err, err_len, "unknown chat template '%s' (chatml, llama3, llama2, llama2-sys, mistral, "
                     "command-r; with --jinja, any other text is Jinja source)", s->p.chat_template);
            return PK_EINVAL;
        }
    } else if (s->p.jinja || s->p.chat_template_file) {
        pk_status st = srv_chat_init(s, v, &k, &src, err, err_len);
        if (st) return st;
    }
    if (k == TMPL_UNKNOWN && !(s->p.chat_template && *s->p.chat_template)) {
        src = tok_chat_template(v);
        k = tmpl_detect(src);
        if (k == TMPL_UNKNOWN) {
            /* llama-server's fallback as well. */
            fprintf(stderr, "srv: %s; using chatml (--chat-template NAME to choose)\n",
                    src ? "the model's chat template is not one polykv knows" : "the model has no chat template");
            k = TMPL_CHATML;
            src = NULL;
        }
    }
    s->m = m;
    s->voc = v;
    s->tmpl = k;
    s->tmpl_src = src;
    s->max_token_bytes = tok_max_token_bytes(v);
    s->model_path = model_path ? strdup(model_path) : NULL;
    srv_model_name(s->p.model_alias, model_path, m, s->model_name, sizeof s->model_name);
    atomic_store_explicit(&s->e, e, memory_order_release);
    return PK_OK;
}

void srv_free(srv *s)
{
    if (!s) return;
    atomic_store(&s->stopping, true);
    for (int i = 0; i < s->n_d; i++) MHD_stop_daemon(s->d[i]);
    free(s->host);
    free(s->api_key);
    free(s->save_dir);
    free(s->chat_template);
    free(s->chat_template_file);
    srv_chat_free(s);
    free(s->alias);
    free(s->cors_origins);
    free(s->tags);
    free(s->gcp_predict);
    free(s->gcp_health);
    free(s->model_path);
    pthread_mutex_destroy(&s->scrape_mu);
    free(s->keys);
    free(s->own);
    pthread_mutex_destroy(&s->own_mu);
    free(s);
}

srv_gen_defaults srv_gen_defaults_of(srv *s)
{
    return (srv_gen_defaults){
        .n_slots = eng_get_params(srv_engine(s))->n_slots,
        .sp = s->p.sampling,
        .n_predict = s->p.n_predict,
        .reasoning = s->p.reasoning_format,
        .verbose = s->p.verbose,
        .voc = s->voc,
    };
}

/* ---- /health ---- */

enum MHD_Result srv_h_health(srv_req *r, json_t *body)
{
    return srv_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}
