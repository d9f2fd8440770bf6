/*
 * srv_impl.h - what every file of the server module shares: the server
 * object, the per-request context, replies and errors, CORS, the routes'
 * handlers and tenants.  Request validation and the chat template are
 * srv_parse.h; running a generation and its formats, srv_gen.h.  Not for
 * use outside src/server (and its tests).
 *
 * Ownership in one picture:
 *
 *   srv ──────────── MHD daemon ── connection ── srv_req (freed by MHD's
 *    │ (ready: e, m,                   │          request-completed callback)
 *    │  voc, tmpl set once)            └─ response ── srv_gen (freed by the
 *    └ stopping                                       response's free callback,
 *                                                     which releases the task)
 */
#ifndef SRV_IMPL_H
#define SRV_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <xxhash.h>

#include "../common/buf.h"
#include "../engine/eng.h"
#include "../jinja/jj.h"
#include "../tokenizer/tok.h"
#include "srv.h"
#include "srv_reason.h"
#include "srv_tools.h"

#define SRV_POLL_MS 100            /* longest wait before re-checking client and shutdown */
#define SRV_KEEPALIVE_MS 10000    /* most time a stream goes without a byte (an SSE comment) */
#define SRV_MAX_NAME 256
#define SRV_MAX_CHOICES 16         /* completions one request may ask for (n, or several prompts) */
/* How replies and events are written.  15 significant digits: a double
 * with a short decimal form prints as that form (0.8, not the 17-digit
 * 0.80000000000000004), a float-born one as llama-server shows it
 * (0.800000011920929), and derived values such as a rate in tokens/s keep
 * the micro-unit precision clients recompute them to (9 digits lost it
 * past 1000 tokens/s). */
#define SRV_JSON_DUMP (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* The Jinja chat template (srv_chat.c), compiled once at start; t NULL:
 * the built-in layouts of tmpl.c render the prompts. */
typedef struct srv_jinja {
    jj_tmpl *t;
    char *file_src;                /* --chat-template-file's text, or NULL */
    char *bos, *eos;               /* the vocabulary's bos / eos text, "" when none */
    bool knows_tools;              /* the template reads `tools` (else tmpl_tools.c lays them out) */
    bool object_arguments;         /* it shows tool-call arguments right only when they are objects */
    bool harmony;                  /* gpt-oss's: messages in channels, the analysis read from `thinking` */
} srv_jinja;

/* The throughput gauges of /metrics are over the time between two scrapes,
 * as llama-server's: the counters a scrape saw, for the next one. */
typedef struct srv_scrape {
    uint64_t n_prompt, n_predicted;
    double prompt_ms, predicted_ms;
} srv_scrape;

/* One API key (srv_tenant.c): its seeded digest, never the key itself. */
#define SRV_MAX_KEYS 256          /* a tenant's index is two hex digits in its session ids */
#define SRV_TENANT_NAME_CAP 33
#define SRV_KEY_MAX 512
typedef struct srv_key {
    XXH128_hash_t digest;
    char name[SRV_TENANT_NAME_CAP];
    bool admin;                    /* sees and may do everything; sessions unprefixed */
} srv_key;

/* A pool a tenant created (srv_tenant.c). */
typedef struct srv_owner { int32_t pool_id; int16_t tenant; } srv_owner;

struct srv {
    srv_params p;                  /* strings point at the owned copies below */
    char *host, *api_key, *chat_template, *chat_template_file, *alias, *cors_origins, *tags, *save_dir;
    char *gcp_predict, *gcp_health;
    struct MHD_Daemon *d[SRV_MAX_HOSTS];   /* one per address of --host, all on one port */
    int n_d;
    int port;
    int64_t t_start;               /* unix seconds */
    atomic_bool stopping;          /* set by srv_free; read by every request thread */
    /* Published once by srv_set_engine (release store of e); read-only after.
     * Readers load e (acquire) first and see NULL while loading. */
    _Atomic(eng *) e;
    const model *m;
    const tok_vocab *voc;
    tmpl_kind tmpl;
    const char *tmpl_src;          /* the model's template source when it is used, else NULL */
    srv_jinja jj;                  /* the Jinja template (srv_chat.c), set once with tmpl */
    char model_name[SRV_MAX_NAME];
    char replica[256];             /* srv_replica_name, at srv_new */
    struct kvev_pub *kv;           /* KV events (srv_set_kv_events, before the engine), NULL off */
    char *model_path;
    size_t max_token_bytes;        /* tok_max_token_bytes: bounds a prompt before tokenizing; 0 none */
    pthread_mutex_t scrape_mu;     /* guards scrape: the counters at the last /metrics */
    srv_scrape scrape;
    /* Keys, written by srv_new only: --api-key (an admin) and
     * --api-key-file's lines; none: no authentication. */
    srv_key *keys;
    int n_keys;
    bool tenancy;                  /* some key is a tenant's: answers are filtered */
    uint64_t key_seed;             /* of the digests, random per process */
    pthread_mutex_t own_mu;        /* guards own: pools tenants created */
    srv_owner *own;
    int32_t n_own, cap_own;
};

/* Returns the engine when the server is ready, NULL while loading. */
static inline eng *srv_engine(srv *s) { return atomic_load_explicit(&s->e, memory_order_acquire); }

/* One HTTP request, from its headers to the end of its response.
 * Owned by its MHD connection thread. */
typedef struct srv_req {
    srv *s;
    struct MHD_Connection *conn;
    const struct srv_route *route;
    const char *method, *url;
    bool http11;                   /* HTTP/1.1: interim responses allowed */
    pk_buf body;                   /* request body, NUL-terminated */
    bool body_oom;                 /* the body could not be kept (out of memory) */
    bool replied;
    unsigned status;               /* of the reply queued, for the log */
    double t0_ms;
    bool placed;                   /* a completion was placed: its reply says what it shared */
    int32_t placed_pool, placed_cached;   /* x-pool-id (0: none), x-cached-prefix-tokens */
    int32_t sessions_remaining;    /* X-Sessions-Remaining, -1 none */
    int32_t retry_after_s;         /* Retry-After, 0 none */
    char hdr_name[32], hdr_value[32];   /* one more header a handler adds ("" none) */
    /* A request a handler answers for another (srv_predict.c): the reply's
     * JSON body is kept in captured (owned) instead of being sent. */
    bool capture;
    json_t *captured;
    bool anthropic;                /* an Anthropic route: its errors in Anthropic's shape */
    int tenant;                    /* the key's index when it is a tenant's; -1: an admin key,
                                      or no key needed (srv_tenant.c) */
} srv_req;

/* The shape of an answer: llama.cpp's /completion, OpenAI's completions,
 * chat completions, Responses (a chat underneath, srv_responses.c), or
 * Anthropic's Messages (a chat underneath, srv_anthropic.c). */
typedef enum srv_api {
    SRV_API_NATIVE = 1, SRV_API_OAI_CMPL, SRV_API_OAI_CHAT, SRV_API_OAI_RESP, SRV_API_ANTHROPIC
} srv_api;

/* A request failure: HTTP status, OpenAI error type, the field at fault. */
typedef struct srv_err {
    unsigned status;
    const char *type;              /* static; NULL: derived from status */
    char param[64];
    char msg[256];
    int32_t n_prompt, n_ctx;       /* exceed_context_size_error details, else 0 */
} srv_err;

/* ---- replies (srv.c) ---- */

/* The OpenAI error object {"error": {"code", "message", "type"[, "param"]}}
 * for e.  Returns a new reference, NULL when out of memory. */
json_t *srv_error_json(const srv_err *e);
/* The error object r's API uses for e: srv_error_json's, or Anthropic's
 * (srv_anth_error_json) on its routes.  A new reference, NULL out of memory. */
json_t *srv_req_error_json(const srv_req *r, const srv_err *e);
/* The error type OpenAI clients expect for an HTTP status. */
const char *srv_error_type(unsigned status);
/* Sets e (status, type NULL, param, printf message); returns false so a
 * validator can `return srv_fail(...)`. */
bool srv_fail(srv_err *e, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Queue a response on r's connection.  srv_reply_json takes j (NULL means
 * out of memory: a 500); srv_reply_error formats e.  The result is what the
 * access handler returns to MHD. */
enum MHD_Result srv_reply_json(srv_req *r, unsigned status, json_t *j);
/* The same for a JSON text the caller wrote: takes text (malloc'ed, len
 * bytes; NULL: a 500) and sends it without a copy. */
enum MHD_Result srv_reply_json_text(srv_req *r, unsigned status, char *text, size_t len);
enum MHD_Result srv_reply_error(srv_req *r, const srv_err *e);
enum MHD_Result srv_reply_errorf(srv_req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
enum MHD_Result srv_reply_text(srv_req *r, unsigned status, const char *content_type, const char *text,
                               size_t len);
/* Queues resp, which the handler made (srv_queue destroys it; NULL: MHD_NO),
 * with the headers every answer carries (Content-Type, CORS, nosniff). */
enum MHD_Result srv_queue(srv_req *r, unsigned status, struct MHD_Response *resp, const char *content_type);
/* An SSE response read from reader(cls); free_cb(cls) runs when MHD is done
 * with it, whether it completed or the client went away.  When the
 * response cannot be made, free_cb(cls) runs at once and a 500 goes out. */
enum MHD_Result srv_reply_sse(srv_req *r, MHD_ContentReaderCallback reader, void *cls,
                              MHD_ContentReaderFreeCallback free_cb);

/* Any response read from reader(cls) (size bytes, or MHD_SIZE_UNKNOWN:
 * chunked), with headers ({name, value, ..., NULL}, may be NULL) besides
 * the ones every reply gets; free_cb as srv_reply_sse. */
enum MHD_Result srv_reply_callback(srv_req *r, unsigned status, const char *content_type, uint64_t size,
                                   const char *const *headers, MHD_ContentReaderCallback reader, void *cls,
                                   MHD_ContentReaderFreeCallback free_cb);

/* False when the peer of conn has gone.  A peer that shut down only its
 * sending side (end of stream) may still read: a half-close is not a
 * disconnect.  The two look alike until something is written: once the
 * response began (probe NULL) its own writes bring a closed peer's reset,
 * seen at a later call.  Before that, *probe says what to do at an end of
 * stream: SRV_PROBE_NONE (HTTP/1.0, no interim responses) takes it for a
 * close; SRV_PROBE_READY writes an interim "100 Continue", which HTTP/1.1
 * clients skip, and becomes SRV_PROBE_SENT (alive until a reset comes). */
enum { SRV_PROBE_NONE = -1, SRV_PROBE_READY = 0, SRV_PROBE_SENT = 1 };
bool srv_conn_alive(struct MHD_Connection *conn, int *probe);
/* Value of a query-string argument, NULL when absent. */
const char *srv_query(srv_req *r, const char *key);
/* The handler and path of the POST route a Vertex AI @requestFormat names:
 * its camelCase alias (srv_gcp_format_of) or its path; false for none. */
bool srv_route_by_format(const char *format, enum MHD_Result (**fn)(srv_req *, json_t *), const char **path);
/* The @requestFormat alias of a route's path: "/v1" dropped, then
 * camelCase at '/', '-' and '_' ("/v1/chat/completions" -> "chatCompletions",
 * "/apply-template" -> "applyTemplate").  Pure. */
void srv_gcp_format_of(const char *path, char *out, size_t cap);
/* Fills buf with prefix + 24 random alphanumerics (OpenAI-style ids). */
void srv_random_id(char *buf, size_t cap, const char *prefix);

/* {"type": "error", "error": {"type", "message"}} for e: Anthropic's
 * error shape (srv_anthropic_out.c). */
json_t *srv_anth_error_json(const srv_err *e);

/* Sanitized JSON string of n bytes of (possibly split) UTF-8. */
json_t *srv_json_text(const char *s, size_t n);

/* ---- CORS (srv_cors.c) ---- */

/* Whether a browser page from origin may read answers under policy
 * (srv_params.cors_origins).  Pure; NULL or "" origin: false. */
bool srv_cors_allowed(const char *policy, const char *origin);
/* The policy of p: its cors_origins, or when NULL the default ("*" with
 * an API key, "localhost" without).  Static or p's storage. */
const char *srv_cors_default(const srv_params *p);
/* Adds the CORS headers r's Origin earns to resp; a preflight also gets
 * the allowed methods, headers and credentials. */
void srv_cors_add(srv_req *r, struct MHD_Response *resp, bool preflight);

/* ---- handlers (one per route) ---- */

typedef enum MHD_Result (*srv_handler)(srv_req *r, json_t *body);

/* Who may call a route when --api-key is set. */
typedef enum srv_access {
    SRV_KEY = 0,                 /* the key, always */
    SRV_PROBE,                   /* the key, unless --public-probes */
    SRV_OPEN,                    /* nobody needs it: the page's static files, whose data
                                    calls then need the key */
} srv_access;

typedef struct srv_route {
    const char *path;
    const char *method;          /* "GET", "POST" (a JSON object body), "*": GET, POST
                                    (the body optional) and DELETE, the handler decides, or
                                    "RAW": GET or POST, the body left unparsed in r->body */
    srv_handler fn;
    srv_access access;
    bool prefix;                 /* path is a prefix: the handler parses the rest */
    bool wakes;                  /* uses the model: wakes a sleeping engine first, as llama-server
                                    does (routes that only read state answer asleep) */
} srv_route;

/* Router mode's table (srv_router.c), used instead of srv.c's when
 * srv_params.router is set. */
extern const srv_route srv_router_routes[];
extern const size_t srv_n_router_routes;


enum MHD_Result srv_h_oai_models(srv_req *r, json_t *body);
enum MHD_Result srv_h_oai_completions(srv_req *r, json_t *body);
enum MHD_Result srv_h_oai_chat(srv_req *r, json_t *body);
enum MHD_Result srv_h_oai_input_tokens(srv_req *r, json_t *body);   /* {"input_tokens": n} of a chat */
enum MHD_Result srv_h_responses(srv_req *r, json_t *body);          /* srv_responses.c */
enum MHD_Result srv_h_responses_input_tokens(srv_req *r, json_t *body);
enum MHD_Result srv_h_predict(srv_req *r, json_t *body);            /* srv_predict.c */
enum MHD_Result srv_h_anth_messages(srv_req *r, json_t *body);      /* srv_anthropic.c */
enum MHD_Result srv_h_anth_count_tokens(srv_req *r, json_t *body);
enum MHD_Result srv_h_completion(srv_req *r, json_t *body);
enum MHD_Result srv_h_tokenize(srv_req *r, json_t *body);
enum MHD_Result srv_h_detokenize(srv_req *r, json_t *body);
enum MHD_Result srv_h_apply_template(srv_req *r, json_t *body);
enum MHD_Result srv_h_health(srv_req *r, json_t *body);
enum MHD_Result srv_h_page(srv_req *r, json_t *body);          /* srv_page.c: / and /assets/ */
enum MHD_Result srv_h_props(srv_req *r, json_t *body);
enum MHD_Result srv_h_slots(srv_req *r, json_t *body);
enum MHD_Result srv_h_metrics(srv_req *r, json_t *body);
enum MHD_Result srv_h_tps(srv_req *r, json_t *body);
enum MHD_Result srv_h_cache(srv_req *r, json_t *body);
enum MHD_Result srv_h_lookup(srv_req *r, json_t *body);
enum MHD_Result srv_h_pools(srv_req *r, json_t *body);        /* srv_pools.c */
enum MHD_Result srv_h_pool(srv_req *r, json_t *body);
enum MHD_Result srv_h_slot_action(srv_req *r, json_t *body);
enum MHD_Result srv_h_cors_proxy(srv_req *r, json_t *body);   /* srv_proxy.c, --ui-mcp-proxy */
/* srv_admit.c: policies and capacity as JSON, their routes. */
json_t *srv_policy_json(const adm_policy *p);
json_t *srv_capacity_json(const adm_answer *a);
/* Sets the fields body names over *p; a 400 for a bad or unknown field. */
bool srv_parse_policy(const json_t *body, adm_policy *p, srv_err *e);
enum MHD_Result srv_admission(srv_req *r, json_t *body, int32_t pool);
enum MHD_Result srv_capacity(srv_req *r, int32_t pool);
enum MHD_Result srv_h_admission(srv_req *r, json_t *body);
enum MHD_Result srv_h_capacity(srv_req *r, json_t *body);
/* ---- tenants (srv_tenant.c) ---- */

/* What srv_view_filter left of a snapshot, for the JSON that shows it. */
typedef struct srv_view {
    bool tag;                      /* an admin reads a server with tenants: entries say whose */
    int16_t slot_tenant[ENG_MAX_SLOTS];  /* each kept slot's tenant, -1 the admins' or none */
    int16_t pool_tenant[ENG_MAX_POOLS];  /* each kept pool's */
} srv_view;

/* Adds the lines of an --api-key-file text (KEY, NAME:KEY or
 * NAME:KEY:admin; blank lines and # comments skipped) to *keys (realloc'ed,
 * the caller frees it), digests seeded with seed.  PK_EINVAL with the line
 * in err (never the key) for a malformed line, a name or key given twice,
 * more than SRV_MAX_KEYS or no key; PK_ENOMEM.  Pure. */
pk_status srv_keys_parse(const char *text, size_t len, uint64_t seed, srv_key **keys, int *n_keys, char *err,
                         size_t err_len);
/* s's keys from --api-key (an admin named "admin") and the file (NULL:
 * none); sets s->tenancy.  srv_keys_parse's errors, PK_EIO. */
pk_status srv_keys_load(srv *s, const char *api_key, const char *file, char *err, size_t err_len);
/* The index of the key given, -1 when none matches; the time depends on
 * no key's content. */
int srv_key_lookup(const srv_key *keys, int n_keys, uint64_t seed, const char *given);
const char *srv_tenant_name(const srv *s, int tenant);     /* NULL for -1 */
/* r's key may do what only an admin may (always true without tenants). */
bool srv_req_admin(const srv_req *r);
/* A checked session id (srv_session_id) as the engine knows it: a tenant
 * key's gets its prefix, in place.  400 naming param when it no longer
 * fits ENG_SESSION_CAP. */
bool srv_tenant_session(const srv_req *r, const char *param, char id[ENG_SESSION_CAP], srv_err *e);
/* The tenant an engine session id belongs to (-1: the admins' namespace,
 * or none); the prefix is stripped in place. */
int srv_session_owner(char id[ENG_SESSION_CAP]);
/* Pool ownership: recorded for a tenant's create or fork; -1 for a pool
 * no tenant created; srv_pool_mine: r may see and use the pool. */
void srv_pool_own(srv *s, int32_t pool_id, int tenant);
int srv_pool_owner(srv *s, int32_t pool_id);
bool srv_pool_mine(const srv_req *r, int32_t pool_id);
/* Forgets the pools st no longer holds (after a release). */
void srv_pool_prune(srv *s, const eng_stats *st);
/* A tenant's completion event: every count of reused tokens cut to what
 * it shared with its own pool (*shown_cached: set by PLACED, kept for the
 * task's later events). */
void srv_tenant_mask_event(eng_event *ev, int32_t *shown_cached);
/* Cuts st to what reader (a tenant's index, -1 an admin) may see: its
 * sessions' slots (prefix stripped), its pools, its pools' admission
 * events; reuse counts and owned cells as srv_tenant_mask_event.  An
 * admin keeps everything, prefixes stripped, and v says whose. */
void srv_view_filter(srv *s, int reader, eng_stats *st, srv_view *v);
/* Adds "tenant" (a name, or null) to o when v->tag. */
void srv_view_tag(const srv_view *v, const srv *s, json_t *o, int tenant);

/* The pool tree of a snapshot (root > 0: that subtree only); v (NULL:
 * none) tags entries for an admin. */
json_t *srv_pools_json(const srv *s, const eng_stats *st, int32_t root, const srv_view *v);

/* Prometheus text of a stats snapshot (llamacpp:, polykv:, vllm: series).
 * Returns a malloc'ed NUL-terminated string, NULL when out of memory. */
/* kv: KV events' counters, NULL when they are off. */
struct kvev_pub_stats;
char *srv_metrics_text(const eng_stats *st, const srv_scrape *since, const char *model_name, const char *replica,
                       const struct kvev_pub_stats *kv);
/* "idle", "prefill" or "decode", as /slots, /polykv/tps and /polykv/pools say it. */
const char *srv_slot_state(eng_slot_state s);
/* The /polykv/tps snapshot object. */
json_t *srv_tps_json(const srv *s, const eng_stats *st, const srv_view *v);

#endif
