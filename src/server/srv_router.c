/*
 * srv_router.c - router mode's routes (docs/compat.md "Router mode"): the
 * list of models and their status, load and unload, and the proxy that
 * hands every model request to the model's own child server (src/router).
 *
 * The server's own checks come first, as for a one-model server: CORS
 * preflights, the API key, body limits (srv.c).  A proxied request then
 *
 *   names its model ("model" of the JSON body, or ?model= on a GET)
 *   -> rt_acquire: a lease on the child (its port), starting it when needed
 *      (autoload); held until the answer is relayed, so --models-max never
 *      unloads a model in the middle of a request
 *   -> rt_http: the same method, path and body to 127.0.0.1:port
 *   -> a callback response that reads the child's body as it comes, so an
 *      SSE stream goes out event by event; its free callback closes the
 *      child's connection (which makes the child cancel the task of a
 *      client that went away) and ends the lease.
 *
 * Only the child's content headers go back (Content-Type, Cache-Control and
 * polykv's own x-*, Retry-After): CORS and the rest are the router's.
 *
 * A child that goes away under a request (POST /models/unload stops it at
 * once, or it dies) never leaves the client with a cut answer: before the
 * child's headers came, the client gets a 503 (unloaded) or 502 (exited)
 * naming why (rt_lease_check); in the middle of an event stream, an error
 * event in the route's own format and the stream's proper end.  Only a
 * body with a Content-Length, already promised, can only be cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../router/rt.h"
#include "srv_parse.h"

/* How long a request waits for its model's child to load (the child's own
 * load timeout, rt_params.load_timeout_ms, is shorter). */
#define ACQUIRE_WAIT_MS (11 * 60 * 1000)

static rt *router_of(srv_req *r) { return r->s->p.router; }

/* ?autoload=true|1 / anything else overrides --models-autoload (llama-server's). */
static bool autoload_of(srv_req *r)
{
    const char *a = srv_query(r, "autoload");
    if (!a || !*a) return rt_get_params(router_of(r))->autoload;
    return !strcmp(a, "true") || !strcmp(a, "1");
}

/* ---- the model list ---- */

static json_t *status_json(rt *t, int i, const rt_info *in)
{
    const char *argv[256];
    char port[16];
    int n = rt_child_argv(t, i, in->port, port, argv, (int)ARRAY_LEN(argv));
    json_t *args = json_array();
    /* The router's key reaches every child on its command line; a listing
     * shows that a key is given, never the key. */
    for (int k = 0; k < n; k++)
        json_array_append_new(args, json_string(k > 0 && !strcmp(argv[k - 1], "--api-key") ? "<hidden>"
                                                : !strncmp(argv[k], "--api-key=", 10) ? "--api-key=<hidden>"
                                                : argv[k]));
    json_t *st = json_pack("{s:s, s:o}", "value", rt_status_name(in->status), "args", args);
    if (st && in->status == RT_FAILED) {
        json_object_set_new(st, "exit_code", json_integer(in->exit_code));
        json_object_set_new(st, "failed", json_true());
    }
    return st;
}

static enum MHD_Result h_models(srv_req *r, json_t *body)
{
    rt *t = router_of(r);
    json_t *data = json_array();
    json_int_t now = (json_int_t)time(NULL);
    rt_info in;
    for (int i = 0; data && rt_info_at(t, i, &in); i++) {
        json_t *m = json_pack("{s:s, s:[], s:[], s:s, s:s, s:I, s:o, s:s, s:b}", "id", in.name, "aliases", "tags",
                              "object", "model", "owned_by", "polykv", "created", now, "status",
                              status_json(t, i, &in), "source", in.preset ? "preset" : "models_dir", "can_remove", 0);
        if (!m || json_array_append_new(data, m)) {
            json_decref(data);
            data = NULL;
        }
    }
    return srv_reply_json(r, 200, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

/* ---- load / unload ---- */

/* The model a load or unload names: its index, or -1 with the 4xx sent. */
static int named_model(srv_req *r, json_t *body, unsigned unknown_status, enum MHD_Result *ret)
{
    const json_t *v = srv_field(body, "model");
    if (!json_is_string(v) || !json_string_length(v)) {
        *ret = srv_reply_errorf(r, 400, "'model' must be the name of a model (GET /models lists them)");
        return -1;
    }
    int i = rt_find(router_of(r), json_string_value(v));
    if (i < 0) *ret = srv_reply_errorf(r, unknown_status, "model '%s' not found", json_string_value(v));
    return i;
}

static enum MHD_Result reply_status(srv_req *r, pk_status st, const char *err)
{
    switch (st) {
    case PK_OK: return srv_reply_json(r, 200, json_pack("{s:b}", "success", 1));
    case PK_ECONFLICT: return srv_reply_errorf(r, 400, "%s", err);
    case PK_EFULL: case PK_ECANCELLED: return srv_reply_errorf(r, 503, "%s", err);
    default: return srv_reply_errorf(r, 500, "%s", err[0] ? err : pk_status_str(st));
    }
}

static enum MHD_Result h_load(srv_req *r, json_t *body)
{
    enum MHD_Result ret;
    int i = named_model(r, body, 404, &ret);
    if (i < 0) return ret;
    char err[256] = "";
    return reply_status(r, rt_load(router_of(r), i, err, sizeof err), err);
}

static enum MHD_Result h_unload(srv_req *r, json_t *body)
{
    enum MHD_Result ret;
    int i = named_model(r, body, 400, &ret);
    if (i < 0) return ret;
    char err[256] = "";
    return reply_status(r, rt_unload(router_of(r), i, err, sizeof err), err);
}

/* ---- the proxy ---- */

/* One proxied request's connection to its child, from the request to the
 * end of the relayed body. */
typedef struct relay {
    rt *t;
    rt_lease lease;
    rt_conn *c;
    struct MHD_Connection *client;
    int probe;                   /* srv_conn_alive's, until the response began */
    bool began;
    bool sse;                    /* the child's answer is an event stream */
    bool anthropic;              /* ... of the Messages API, whose error events differ */
    bool at_event_end;           /* the bytes relayed so far end with a blank line */
    char *tail;                  /* the error event ending a stream the child cut, then NULL */
    size_t tail_pos, tail_len;
    bool tail_done;
} relay;

/* The watch on the child's connection: a client that left ends the wait,
 * and closing the child's connection then cancels its task there. */
static bool client_alive(void *arg)
{
    relay *y = arg;
    return srv_conn_alive(y->client, y->began ? NULL : &y->probe);
}

/* The SSE error event that ends a stream the child cut, into y->tail: a
 * blank line first when the cut fell inside an event (that event is lost
 * either way; the error must not merge into it).  False when out of memory. */
static bool make_tail(relay *y)
{
    srv_err e = { .status = 502 };
    pk_status gone = rt_lease_check(y->t, &y->lease, e.msg, sizeof e.msg);
    if (gone == PK_ECANCELLED) e.status = 503;
    if (gone == PK_OK)
        snprintf(e.msg, sizeof e.msg, "model '%s': its server's answer broke off", rt_name(y->t, y->lease.i));
    json_t *j = y->anthropic ? srv_anth_error_json(&e) : srv_error_json(&e);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    pk_buf b = {0};
    if (text) pk_buf_printf(&b, "%s%sdata: %s\n\n", y->at_event_end ? "" : "\n\n",
                            y->anthropic ? "event: error\n" : "", text);
    free(text);
    if (!text || b.oom) {
        pk_buf_free(&b);
        return false;
    }
    y->tail = b.p;
    y->tail_len = b.n;
    return true;
}

static ssize_t relay_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    relay *y = cls;
    y->began = true;
    if (!y->tail) {
        ssize_t n = y->tail_done ? 0 : rt_http_body(y->c, buf, max);
        if (n > 0) {
            y->at_event_end = n >= 2 ? buf[n - 1] == '\n' && buf[n - 2] == '\n'
                                     : buf[0] == '\n' && y->at_event_end;
            return n;
        }
        if (n == 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!y->sse || !make_tail(y)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = MIN(max, y->tail_len - y->tail_pos);
    memcpy(buf, y->tail + y->tail_pos, k);
    y->tail_pos += k;
    if (y->tail_pos == y->tail_len) {
        free(y->tail);
        y->tail = NULL;
        y->tail_done = true;
    }
    return (ssize_t)k;
}

static void relay_free(void *cls)
{
    relay *y = cls;
    rt_http_close(y->c);
    rt_release(y->t, &y->lease);
    free(y->tail);
    free(y);
}

/* The request headers a child gets: the client's, less the hop-by-hop ones
 * and those the connection to the child sets itself. */
static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
    static const char *const skip[] = {
        "Host", "Connection", "Content-Length", "Transfer-Encoding", "Expect", "Keep-Alive", "TE", "Upgrade",
        "Proxy-Connection", "Trailer",
    };
    for (size_t k = 0; k < ARRAY_LEN(skip); k++)
        if (!strcasecmp(name, skip[k])) return MHD_YES;
    if (strpbrk(name, "\r\n") || (value && strpbrk(value, "\r\n"))) return MHD_YES;
    pk_buf_printf(cls, "%s: %s\r\n", name, value ? value : "");
    return MHD_YES;
}

/* The child's headers that describe the answer and go back with it. */
static bool relayed(const char *name)
{
    static const char *const keep[] = {
        "Cache-Control", "Retry-After", "x-pool-id", "x-cached-prefix-tokens", "X-Sessions-Remaining",
        "Process-Start-Time-Unix",
    };
    for (size_t k = 0; k < ARRAY_LEN(keep); k++)
        if (!strcasecmp(name, keep[k])) return true;
    return false;
}

/* The query string without the router's own arguments (model, autoload);
 * values are sent percent-encoded. */
static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    pk_buf *q = cls;
    if (!strcmp(key, "model") || !strcmp(key, "autoload")) return MHD_YES;
    pk_buf_puts(q, q->n ? "&" : "?");
    for (int part = 0; part < 2; part++) {
        const char *s = part ? value : key;
        if (!s) break;
        if (part) pk_buf_puts(q, "=");
        for (; *s; s++) {
            unsigned char ch = (unsigned char)*s;
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-_.~", ch))
                pk_buf_put(q, s, 1);
            else
                pk_buf_printf(q, "%%%02X", ch);
        }
    }
    return MHD_YES;
}

static enum MHD_Result proxy(srv_req *r, const char *name)
{
    rt *t = router_of(r);
    if (!name || !*name) return srv_reply_errorf(r, 400, "model name is missing from the request ('model')");
    int i = rt_find(t, name);
    if (i < 0) return srv_reply_errorf(r, 400, "model '%s' not found (GET /models lists them)", name);
    char err[256] = "";
    rt_lease lease;
    pk_status st = rt_acquire(t, i, autoload_of(r), ACQUIRE_WAIT_MS, &lease, err, sizeof err);
    if (st) return reply_status(r, st, err);

    pk_buf target = {0}, hdrs = {0};
    pk_buf_puts(&target, r->url);
    pk_buf q = {0};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    if (q.n) pk_buf_puts(&target, q.p);
    pk_buf_free(&q);
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, &hdrs);
    int timeout_ms = r->s->p.timeout_s > 0 ? r->s->p.timeout_s * 1000 : 600 * 1000;
    rt_resp *head = malloc(sizeof *head);
    relay *y = calloc(1, sizeof *y);
    if (!head || !y || target.oom || hdrs.oom) st = PK_ENOMEM;
    if (!st) st = rt_http_open(lease.port, timeout_ms, &y->c);
    if (!st) {
        y->client = r->conn;
        y->probe = r->http11 ? SRV_PROBE_READY : SRV_PROBE_NONE;
        y->t = t;
        y->lease = lease;
        rt_http_watch(y->c, client_alive, y);
        st = rt_http_send(y->c, r->method, target.p, hdrs.p, r->body.p, r->body.n);
    }
    if (!st) st = rt_http_head(y->c, head);
    pk_buf_free(&target);
    pk_buf_free(&hdrs);
    if (st) {
        /* The watch ended the wait: nobody to answer. */
        bool left = y && y->c && !client_alive(y);
        free(head);
        if (y) rt_http_close(y->c);
        free(y);
        pk_status gone = st == PK_ENOMEM ? PK_OK : rt_lease_check(t, &lease, err, sizeof err);
        rt_release(t, &lease);
        if (left) return MHD_NO;
        if (st == PK_ENOMEM) return srv_reply_errorf(r, 500, "out of memory");
        if (gone == PK_ECANCELLED) return srv_reply_errorf(r, 503, "%s", err);
        if (gone) return srv_reply_errorf(r, 502, "%s", err);
        return srv_reply_errorf(r, 502, "model '%s': its server did not answer (%s)", name, pk_status_str(st));
    }
    const char *extra[2 * RT_MAX_HEADERS + 1];
    int n = 0;
    for (int k = 0; k < head->n_headers; k++)
        if (relayed(head->headers[k].name)) {
            extra[n++] = head->headers[k].name;
            extra[n++] = head->headers[k].value;
        }
    extra[n] = NULL;
    const char *ct = rt_http_header(head, "Content-Type");
    y->sse = ct && !strncasecmp(ct, "text/event-stream", 17);
    y->anthropic = !strncmp(r->url, "/v1/messages", 12);
    y->at_event_end = true;
    uint64_t size = head->content_length >= 0 ? (uint64_t)head->content_length : MHD_SIZE_UNKNOWN;
    /* MHD copies the headers into the response: head may go after. */
    enum MHD_Result ret = srv_reply_callback(r, (unsigned)head->status, ct ? ct : "application/octet-stream", size,
                                             extra, relay_read, y, relay_free);
    free(head);
    return ret;
}

static enum MHD_Result h_proxy_post(srv_req *r, json_t *body)
{
    const json_t *m = srv_field(body, "model");
    if (m && !json_is_string(m)) return srv_reply_errorf(r, 400, "'model' must be a string");
    return proxy(r, json_string_value(m));
}

static enum MHD_Result h_proxy_get(srv_req *r, json_t *body)
{
    return proxy(r, srv_query(r, "model"));
}

/* GET /props: the router's own (role "router"), or ?model=NAME's. */
static enum MHD_Result h_props(srv_req *r, json_t *body)
{
    if (srv_query(r, "model")) return proxy(r, srv_query(r, "model"));
    if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
        return srv_reply_errorf(r, 405, "%s /props: the router's properties are read-only (GET)", r->method);
    const rt_params *p = rt_get_params(router_of(r));
    return srv_reply_json(r, 200, json_pack("{s:s, s:i, s:b, s:i, s:s, s:s, s:{s:{}, s:i}, s:s}", "role", "router",
                                            "max_instances", p->models_max, "models_autoload", p->autoload,
                                            "n_models", rt_count(router_of(r)), "model_alias", "polykv",
                                            "model_path", "none", "default_generation_settings", "params", "n_ctx", 0,
                                            "build_info", "b0-polykv"));
}

const srv_route srv_router_routes[] = {
    { "/health",              "GET",  srv_h_health, SRV_PROBE, false, false },
    { "/v1/health",           "GET",  srv_h_health, SRV_PROBE, false, false },
    { "/models",              "GET",  h_models,     SRV_KEY, false, false },
    { "/v1/models",           "GET",  h_models,     SRV_KEY, false, false },
    { "/models/load",         "POST", h_load,       SRV_KEY, false, false },
    { "/models/unload",       "POST", h_unload,     SRV_KEY, false, false },
    { "/props",               "GET",  h_props,      SRV_KEY, false, false },
    { "/v1/completions",      "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/chat/completions", "POST", h_proxy_post, SRV_KEY, false, false },
    { "/chat/completions",    "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/responses",        "POST", h_proxy_post, SRV_KEY, false, false },
    { "/responses",           "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/responses/input_tokens", "POST", h_proxy_post, SRV_KEY, false, false },
    { "/responses/input_tokens",    "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/chat/completions/input_tokens", "POST", h_proxy_post, SRV_KEY, false, false },
    { "/chat/completions/input_tokens",    "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/messages",         "POST", h_proxy_post, SRV_KEY, false, false },
    { "/v1/messages/count_tokens", "POST", h_proxy_post, SRV_KEY, false, false },
    { "/completion",          "POST", h_proxy_post, SRV_KEY, false, false },
    { "/completions",         "POST", h_proxy_post, SRV_KEY, false, false },
    { "/tokenize",            "POST", h_proxy_post, SRV_KEY, false, false },
    { "/detokenize",          "POST", h_proxy_post, SRV_KEY, false, false },
    { "/apply-template",      "POST", h_proxy_post, SRV_KEY, false, false },
    { "/slots",               "GET",  h_proxy_get,  SRV_KEY, false, false },
    { "/metrics",             "GET",  h_proxy_get,  SRV_PROBE, false, false },
};
const size_t srv_n_router_routes = ARRAY_LEN(srv_router_routes);
