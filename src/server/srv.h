/*
 * srv.h - the HTTP server: OpenAI and llama.cpp-compatible endpoints in
 * front of one engine (eng.h).
 *
 * DESIGN
 *   libmicrohttpd parses HTTP and owns the sockets; jansson reads and writes
 *   JSON.  Each connection gets its own MHD thread (thread-per-connection,
 *   bounded by max_connections): a request handler blocks on its task's
 *   event channel, and a blocked handler must not stall other connections,
 *   which MHD's shared thread pool would do.  Idle connections and an idle
 *   server sleep in poll(): no CPU.
 *
 *     MHD thread (one per connection)              engine thread
 *     -------------------------------              -------------
 *     route, auth, body (<= max_body_bytes)
 *     JSON -> validated request, tokens
 *     (tok_vocab is immutable: safe here)
 *     eng_submit ------------------------------->  mailbox
 *     eng_task_next (100 ms waits) <-------------  TOKEN ... DONE | ERROR
 *       between waits: client still there?
 *       server stopping?  else eng_task_cancel
 *     JSON body, or SSE chunks through an MHD
 *     callback response (one per event batch)
 *
 *   HTTP threads never touch engine state: they use eng_submit,
 *   eng_task_next/cancel/release and eng_get_stats only.  A client that goes
 *   away is noticed by a failed write (MHD then frees the response, whose
 *   free callback releases the task, which cancels it) or, while waiting for
 *   a token, by a zero-timeout poll on its socket; either way the engine
 *   frees the slot at its next step.
 *
 *   The server listens before the model is loaded: until srv_set_engine
 *   every known route answers 503 ("loading"), /health included, as
 *   llama-server does.
 *
 *   Files: srv.c (daemon, routing, auth, body limit, replies), srv_parse.c
 *   (request validation shared by the endpoints, prompts, chat messages),
 *   srv_gen.c (running a task: collect or stream), srv_openai.c (OpenAI
 *   shapes), srv_native.c (llama.cpp endpoints), srv_metrics.c (/metrics,
 *   /slots, /polykv/tps), srv_tools.c (tool calls in generated text),
 *   srv_router.c (router mode: the model list and the proxy to children).
 *
 * Threads: srv_new, srv_set_engine and srv_free from the owner's thread;
 * srv_set_engine once, while requests may be arriving.
 */
#ifndef SRV_H
#define SRV_H

#include "../common/pk.h"
#include "../engine/eng.h"

/* How thinking (<think>...</think>) in a chat answer is returned
 * (--reasoning-format, the request's reasoning_format; llama-server's names). */
typedef enum srv_reasoning {
    SRV_REASON_AUTO = 0,        /* "auto": as deepseek (what llama-server's auto picks for <think>) */
    SRV_REASON_NONE,            /* "none": left in content */
    SRV_REASON_DEEPSEEK,        /* "deepseek": moved to reasoning_content */
    SRV_REASON_DEEPSEEK_LEGACY, /* "deepseek-legacy": reasoning_content, and kept in content too */
} srv_reasoning;

/* The name's format; false for an unknown name. */
bool srv_reasoning_parse(const char *name, srv_reasoning *out);

#define SRV_MAX_HOSTS 8

typedef struct srv_params {
    const char *host;           /* address to bind, "127.0.0.1", or a comma-separated list of at
                                   most SRV_MAX_HOSTS ("127.0.0.1,::1"): a daemon on each, one port */
    int port;                   /* 8080; 0 picks a free one (see srv_port) */
    const char *api_key;        /* NULL or "": no authentication; else required on every
                                   route but the page's files (/, /assets/) */
    const char *api_key_file;   /* NULL, or a file of keys: KEY (an admin, as api_key), NAME:KEY
                                   (a tenant: its own sessions and pools only), NAME:KEY:admin;
                                   docs/security.md, "Tenants" */
    bool public_probes;         /* with a key: /health and /metrics need none */
    const char *slot_save_path; /* --slot-save-path: the only directory slot save and
                                   restore touch; NULL: they answer 501 */
    bool endpoint_metrics;      /* GET /metrics (--metrics), off by default */
    bool endpoint_slots;        /* GET /slots, on by default */
    const char *chat_template;  /* tmpl_from_name name overriding the model's, or NULL */
    bool jinja;                 /* render Jinja templates (src/jinja); on by default */
    const char *chat_template_file; /* a Jinja template file used instead of the model's, or NULL */
    const char *model_alias;    /* the model's name in responses; NULL: its file name.  A
                                   comma-separated list gives several (llama-server's --alias):
                                   the first in byte order is the id, /v1/models lists all */
    int timeout_s;              /* idle connection timeout once a request came, 600 */
    int header_timeout_s;       /* a connection whose request has not come yet is closed
                                   after this long idle (idle sockets cannot lock clients out), 10 */
    int max_per_ip;             /* connections from one address, 0 = no cap; 0 by default */
    size_t max_body_bytes;      /* request bodies above this get 413; 8 MiB */
    int max_connections;        /* concurrent connections (each a thread), 256 */
    bool log_requests;          /* one line per request on stderr */
    /* llama-server's request defaults (--temp, --top-k, ..., -n): what a
     * request that does not set a field gets. */
    smp_params sampling;        /* smp_default_params() unless set */
    int32_t n_predict;          /* -1: until the context is full */
    bool verbose;               /* --verbose: "__verbose" debug fields in responses */
    bool endpoint_props_write;  /* --props: POST /props allowed */
    const char *cors_origins;   /* "localhost" (reflect localhost origins), "*", or a
                                   comma-separated list of allowed origins; NULL (the default):
                                   "*" with an api_key, else "localhost" (srv_cors.c) */
    bool cors_credentials;      /* Access-Control-Allow-Credentials: true (default) */
    srv_reasoning reasoning_format;   /* the default of requests, auto */
    bool no_ui;                 /* --no-ui: no monitor page at / (404) */
    bool ui_mcp_proxy;          /* --ui-mcp-proxy: /cors-proxy forwards requests (srv_proxy.c);
                                   off: a 403 */
    const char *model_tags;     /* --tags: comma-separated, listed by /v1/models; NULL none */
    int32_t reasoning_budget;   /* -1: unlimited; 0: no thinking (an opened <think> closed in the
                                   prompt, a one-token "<think>" banned) */
    struct rt *router;          /* router mode (src/router, srv_router.c): the server serves no model
                                   itself, lists the router's and proxies to their children; NULL
                                   for a one-model server */
    const char *gcp_predict_route; /* Vertex AI (AIP_MODE=PREDICTION): POST path of the predict
                                   route (llama-server's /predict), NULL: none */
    const char *gcp_health_route;  /* and a GET path answering as /health, NULL: none */
    bool no_prefill_assistant;  /* --no-prefill-assistant: a chat's last assistant message is a
                                   finished turn, not the start of the answer */
} srv_params;

srv_params srv_default_params(void);

typedef struct srv srv;

/* Binds and starts serving (503 on every route until srv_set_engine; in
 * router mode, p.router set, every route at once and no engine ever).
 * The strings of p are copied.  PK_EINVAL for bad params, PK_EIO when the
 * address cannot be bound (reason in err), PK_ENOMEM. */
pk_status srv_new(const srv_params *p, srv **out, char *err, size_t err_len);

/* The port bound (the one picked when params.port was 0). */
int srv_port(const srv *s);

/* Starts serving requests on e (which must outlive the server or be freed
 * after srv_free).  model_path is shown by /props and names the model when
 * no alias was given.  Call once.  PK_EINVAL when the chat template named
 * in the params is unknown (reason in err); the server then keeps
 * answering 503. */
pk_status srv_set_engine(srv *s, eng *e, const char *model_path, char *err, size_t err_len);
/* KV events' publisher (docs/kv-events.md), whose counters /metrics
 * shows: borrowed, outliving the server.  Call before srv_set_engine. */
void srv_set_kv_events(srv *s, struct kvev_pub *kv);
/* This replica's name for routers and KV events' topic, as llm-d's
 * guides write it: "$POD_IP:port" ($POD_IP from Kubernetes' downward
 * API), else "<host name>:port". */
void srv_replica_name(int port, char *out, size_t cap);
/* The model's name in responses: the alias list's first name in sort
 * order, else the file's name, else m's description. */
void srv_model_name(const char *alias, const char *model_path, const model *m, char *out, size_t cap);

/* Stops accepting, ends the requests in flight (their tasks cancelled) and
 * frees everything.  NULL is a no-op. */
void srv_free(srv *s);

#endif
