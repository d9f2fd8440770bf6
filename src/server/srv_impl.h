/*
 * srv_impl.h - what the files of the server module share: the server
 * object, the per-request context, reply helpers, request validation and
 * the generation driver.  Not for use outside src/server (and its tests).
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
    bool object_arguments;         /* it prints tool-call arguments only when they are objects */
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

/* ---- request validation (srv_parse.c) ---- */

/* What a completion request asks of its response (besides the task). */
typedef struct srv_gen_opts {
    srv_api api;
    bool stream;
    bool include_usage;            /* stream_options.include_usage */
    bool logprobs;                 /* per-token log-probs in the response */
    int32_t top_logprobs;          /* alternatives per token shown, 0..ENG_MAX_PROBS */
    bool return_tokens;            /* native "tokens" */
    int32_t n_choices;             /* n / n_cmpl: completions of the one prompt, 1.. */
    srv_tool_fmt tools;            /* chat: parse tool calls out of the text */
    srv_reasoning reasoning;       /* chat: where <think>...</think> goes */
    bool think_open;               /* chat: the prompt opened <think> (set by the chat handler) */
    bool verbose;                  /* "__verbose" in responses (--verbose) */
    bool post_sampling_probs;      /* probabilities after the samplers, as "prob" (native) */
    bool timings_per_token;        /* "timings" in every streamed chunk */
    bool return_progress;          /* streamed: prompt_progress chunks while the prompt is read */
    const json_t *response_fields; /* native, not streamed: the fields kept (borrowed from the
                                      request body, which outlives the reply), NULL: all */
    char model[SRV_MAX_NAME];      /* echoed "model" */
    json_t *echo;                  /* Responses: the request's fields its response object repeats
                                      (srv_responses.c); each srv_gen holds its own reference */
} srv_gen_opts;

/* What a request gets for the fields it leaves out (the server's flags). */
typedef struct srv_gen_defaults {
    int32_t n_slots;               /* bounds id_slot */
    smp_params sp;
    int32_t n_predict;
    srv_reasoning reasoning;
    bool verbose;
    const tok_vocab *voc;          /* tokenizes logit_bias strings; NULL: they are refused */
} srv_gen_defaults;

/* The defaults of s's flags (s ready). */
srv_gen_defaults srv_gen_defaults_of(srv *s);

/* Typed getters of request fields (srv_parse.c): a JSON null reads as
 * absent; srv_get_bool is false (with e, a 400 naming key) only for a
 * present value that is not a boolean, and leaves *out when absent. */
const json_t *srv_field(const json_t *o, const char *key);
bool srv_get_bool(const json_t *o, const char *key, bool *out, srv_err *e);
/* An integer field in [lo, hi], as every integer field is read: a real
 * with no fraction (5.0) counts as one.  Absent or null leaves *out; a 400
 * naming key otherwise. */
bool srv_get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, srv_err *e);

/* Reads the generation fields every completion endpoint shares (sampling,
 * max_tokens / n_predict, stop, seed, logprobs, stream, cache_prompt,
 * id_slot, n) from a JSON object into c (prompt left unset; stop strings
 * point into body) and o, starting from d.  Wrong types and out-of-range
 * values fail with a 400 naming the field. */
bool srv_parse_gen(const json_t *body, srv_api api, const srv_gen_defaults *d, eng_completion *c, srv_gen_opts *o,
                   srv_err *e);
/* srv_fields.c: the llama.cpp fields srv_parse_gen hands on (reasoning_format,
 * chat_template_kwargs, post_sampling_probs, response_fields,
 * timings_per_token, return_progress ...), and the refusal of the fields
 * polykv does not support. */
bool srv_parse_llama_fields(const json_t *body, srv_api api, const tok_vocab *voc, eng_completion *c,
                            srv_gen_opts *o, srv_err *e);
/* Frees what srv_parse_gen allocated in c (grammar, logit biases). */
void srv_gen_req_free(eng_completion *c);
/* (srv_parse_gen also reads grammar, json_schema and response_format into
 * c->grammar, a reference the caller owns: gram_free it once submitted or
 * refused.  It sets it only when everything else validated.) */

/* GBNF text / a JSON Schema -> *out (the caller's reference); 400 naming
 * param with the position or the unsupported keyword, 500 out of memory. */
bool srv_compile_gbnf(const char *src, size_t len, const char *param, struct gram_grammar **out, srv_err *e);
bool srv_compile_schema(const json_t *schema, const char *param, struct gram_grammar **out, srv_err *e);

/* tool_choice "required" or {"type": "function", "function": {"name"}}
 * on a chat with tools: *out constrains the answer to one call in format f
 * whose arguments follow that tool's parameters schema (NULL, true, when
 * tool_choice does not force a call).  400 naming the field for an unknown
 * function or a schema we cannot constrain. */
bool srv_tools_grammar(const json_t *body, srv_tool_fmt f, struct gram_grammar **out, srv_err *e);

/* The id at the start of s, a URL's path segment: plain decimal digits, no
 * sign, space or leading zero ("0" itself is one), at most max.  True with
 * *id and *end (the first byte after the digits), false for anything else. */
bool srv_url_id(const char *s, long max, long *id, const char **end);

/* A session id (len bytes from a body field, a header or a query, named
 * param in the error) into out: 0-63 bytes of valid UTF-8 without control
 * characters (NUL included), never cut.  400 naming param otherwise. */
bool srv_session_id(const char *id, size_t len, const char *param, char out[ENG_SESSION_CAP], srv_err *e);

/* Tokens of a prompt given as a string, an array of token ids, or a mixed
 * array of strings and ids (strings tokenized, BOS only before a leading
 * string when add_special); a one-element array holding one of those is
 * accepted too.  *out is malloc'ed.  400 for anything else, for ids outside
 * the vocabulary and for an empty result. */
bool srv_tokenize_prompt(const tok_vocab *v, const json_t *prompt, const char *field, bool add_special,
                         int32_t **out, int32_t *n_out, srv_err *e);
/* Text -> tokens.  *out malloc'ed.  PK_ENOMEM. */
pk_status srv_tokenize(const tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                       int32_t **out, int32_t *n_out);
/* srv_tokenize of a text that may give at most n_max tokens: PK_EFULL with
 * *out NULL and *n_out the count it gives when that is more, found without
 * holding more than n_max ids. */
pk_status srv_tokenize_at_most(const tok_vocab *v, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t n_max, int32_t **out, int32_t *n_out);

/* The chat prompt of an OpenAI chat request (messages, tools, tool_choice,
 * add_generation_prompt) rendered with template kind k: *prompt malloc'ed;
 * *tools gets the tool-call format to parse the answer with.  400 naming
 * the field for malformed messages or tools, or tools the template cannot
 * express. */
bool srv_render_chat(const json_t *body, tmpl_kind k, const char *tmpl_src, char **prompt, size_t *n_prompt,
                     srv_tool_fmt *tools, srv_err *e);

/* ---- the chat template (srv_chat.c) ---- */

/* At start (srv_set_engine): reads --chat-template-file or the model's
 * template and compiles it with the Jinja engine; *k becomes the family the
 * text looks like (it picks the tool-call format to parse answers with) and
 * *src the text.  A file that cannot be read or compiled is an error
 * (PK_EIO / PK_EFORMAT, message in err); the model's own template that does
 * not compile is reported on stderr and leaves the built-in layouts. */
pk_status srv_chat_init(srv *s, const tok_vocab *v, tmpl_kind *k, const char **src, char *err, size_t err_len);
void srv_chat_free(srv *s);
/* srv_render_chat's contract, with the server's template: Jinja when it
 * compiled (chat_template_kwargs go into its variables; a template error is
 * a 400 with its message), else the built-in layouts.  A last message from
 * the assistant (without tool calls, unless --no-prefill-assistant), or
 * any with continue_final_message, is continued: the messages before it
 * are rendered up to the assistant's generation prompt and its text
 * follows, open (a 400 for two trailing assistant messages, or
 * continue_final_message with add_generation_prompt true, with a last
 * message not the assistant's or with tool calls).  *think_open (NULL: not
 * asked) says whether the answer starts inside <think>.  Any request thread. */
bool srv_chat_prompt(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools,
                     bool *think_open, srv_err *e);

/* body's messages as finished turns, whoever spoke last (never a prefill):
 * what a pool holds, so that the request that follows it with a new turn
 * starts with its tokens. */
bool srv_chat_history(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools,
                      srv_err *e);

/* ---- running a task (srv_gen.c) ---- */

/* A generation in progress: the task, what it produced so far and, when
 * streaming, the bytes waiting to be sent. */
typedef struct srv_gen {
    srv *s;
    struct MHD_Connection *conn;
    eng_task *task;
    srv_gen_opts o;
    eng_completion req;            /* the request's parameters (prompt and stop unset; bias is
                                      the copy below) */
    eng_bias *bias;                /* [req.n_bias], owned */
    int32_t *prompt;               /* [n_prompt] for the "prompt" text of native answers and
                                      __verbose, owned; NULL when neither is asked */
    char id[48];
    int64_t created;               /* unix seconds */
    int32_t n_prompt;
    /* What came back. */
    char *text;                    /* all generated text, NUL-terminated */
    size_t n_text, cap_text;
    int32_t *tokens;
    int32_t n_tokens, cap_tokens;
    json_t *probs;                 /* per-token log-prob entries (not streamed) */
    eng_event done;                /* the DONE event (text NULL) */
    bool have_done;
    srv_err err;                   /* ERROR event, or the task abandoned */
    bool failed;
    bool refused;                  /* the ERROR is an admission refusal: 429 with cap */
    adm_answer cap;
    /* Streaming. */
    char *out;
    size_t n_out, cap_out, out_pos;
    size_t n_sent;                 /* chat: content bytes already sent (from the content's start) */
    size_t n_sent_reason;          /* chat: reasoning bytes already sent */
    bool sent_role, finished;      /* sent_role: Anthropic's message_start too */
    bool out_oom, oom_sent;        /* the output could not grow: a static error event ends it */
    double t_last_check;           /* last client liveness check (ms) */
    bool headers_sent;             /* the response is queued: no more interim probes */
    int probe;                     /* srv_conn_alive's SRV_PROBE_* before the headers */
    struct {                       /* Responses streams (srv_responses.c) */
        char msg_id[40], rs_id[40];    /* the message and reasoning items' ids */
        int32_t seq;                   /* sequence_number of the next event */
        int32_t n_items;               /* output items added so far */
        int32_t rs_index, msg_index;   /* their output_index, -1 until added */
        bool begun;                    /* response.created sent */
    } resp;
    /* timings_per_token: the HTTP thread's clock (placed, first token). */
    double t_placed_ms, t_first_ms;
    int32_t n_cached;              /* prompt tokens reused, from the PLACED event */
    int tenant;                    /* srv_req.tenant: >= 0, its events' reuse counts are masked */
    int32_t shown_cached;          /* what srv_tenant_mask_event lets a tenant see */
    /* Anthropic streams (srv_anthropic_out.c): content blocks started so
     * far, the last one open while anth_open says its kind (0: none open). */
    int32_t anth_n_blocks;
    int anth_open;
} srv_gen;

/* Submits c and answers the request: a JSON body when it completes, or an
 * SSE stream.  Takes nothing from the caller (c is copied by eng_submit). */
enum MHD_Result srv_gen_run(srv_req *r, const eng_completion *c, const srv_gen_opts *o);
/* Several completions answered together (n > 1, or several prompts):
 * cs[0..k) submitted at once, one answer combining them; not streamed. */
enum MHD_Result srv_gen_run_multi(srv_req *r, const eng_completion *cs, int k, const srv_gen_opts *o);
/* The seed of a prompt's choice j (0-based) of a request with seed: seed + j
 * in 32 bits, as llama-server seeds its child tasks, so each choice is what a
 * single request with that seed answers; SMP_SEED_RANDOM and j = 0 keep it. */
uint64_t srv_choice_seed(uint64_t seed, int j);
/* Prompts of a completion request: a string, ids, a mixed array (one
 * prompt), {"prompt_string": ...}, or an array of those (several, at most
 * SRV_MAX_CHOICES).  ids[i] malloc'ed (free each and the arrays). */
bool srv_tokenize_prompts(const tok_vocab *v, const json_t *prompt, bool add_special, int32_t ***ids,
                          int32_t **n, int *k, srv_err *e);
/* The chat route's work up to its task, for an OpenAI chat body (api
 * SRV_API_OAI_CHAT, or SRV_API_ANTHROPIC for a converted Messages request):
 * the fields parsed into c and o, the messages rendered with the template
 * (a forced tool call's grammar into c), the tool-call format and
 * reasoning set up, the prompt tokenized into *ids (malloc'ed, [*n]).
 * False with e (c then freed) for a bad request, a prompt over a slot, or
 * out of memory.  Any request thread. */
bool srv_chat_tokens(srv *s, const json_t *body, srv_api api, eng_completion *c, srv_gen_opts *o, int32_t **ids,
                     int32_t *n, srv_err *e);
/* srv_gen_run with ids[0..n) as c's prompt; frees ids. */
enum MHD_Result srv_gen_run_ids(srv_req *r, eng_completion *c, const srv_gen_opts *o, int32_t *ids, int32_t n);
/* The completion endpoints (/completion, /v1/completions): the body parsed
 * for api, its "prompt" tokenized, then srv_gen_run. */
enum MHD_Result srv_gen_prompt(srv_req *r, json_t *body, srv_api api);
/* False (e: 400 exceed_context_size_error) when a prompt text of n_bytes
 * certainly holds more tokens than a slot (tok_max_token_bytes), so an
 * over-long prompt costs no tokenization.  srv_prompt_bytes: the bytes of
 * the strings of the longest prompt in a "prompt" value (a string, one
 * prompt mixing strings and ids, or an array of prompts). */
bool srv_gen_text_fits(srv *s, size_t n_bytes, srv_err *e);
size_t srv_prompt_bytes(const json_t *prompt);

/* Appends bytes to the stream output; "data: <j>\n\n" for an SSE event
 * (j consumed), with an "event: <name>\n" line first for a named one. */
void srv_gen_out(srv_gen *g, const char *s, size_t n);
void srv_gen_sse(srv_gen *g, json_t *j);
void srv_gen_sse_event(srv_gen *g, const char *name, json_t *j);

/* The log-prob entry of one token event: {"id", "token", "bytes",
 * "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}. */
json_t *srv_gen_prob_entry(const srv_gen *g, const eng_event *ev);
/* A token's text as valid UTF-8 (special tokens rendered). */
json_t *srv_gen_piece(const srv_gen *g, int32_t id, json_t **bytes);
/* Sanitized JSON string of n bytes of (possibly split) UTF-8. */
json_t *srv_json_text(const char *s, size_t n);
/* The llama.cpp "timings" object of a finished task. */
json_t *srv_gen_timings(const eng_event *done);
/* The same while it streams (timings_per_token), from what the HTTP thread
 * saw: prompt time from placement to the first token, decode time since. */
json_t *srv_gen_timings_now(const srv_gen *g);
/* The prompt's text (special tokens rendered), "" when g kept no prompt. */
json_t *srv_gen_prompt_text(const srv_gen *g);

/* ---- formats (srv_openai.c, srv_native.c, srv_responses.c) ---- */

/* A finished chat generation's answer: the content and tool calls parsed
 * from it (tm, owned: srv_tool_msg_free), and its thinking (reason, into
 * g's text or tm; NULL when none).  False when out of memory. */
typedef struct srv_answer {
    srv_tool_msg tm;
    const char *reason;
    size_t reason_len;
    size_t content_off;            /* where the answer (after the thinking) starts in g's text */
} srv_answer;
bool srv_gen_answer(const srv_gen *g, srv_answer *a);

/* What a stream has not sent yet of g's text: the new reasoning, and the
 * new content short of what a tool call may still claim.  Marks both sent;
 * the pointers are into g->text. */
typedef struct srv_new_text { const char *reason, *content; size_t n_reason, n_content; } srv_new_text;
srv_new_text srv_gen_take_new(srv_gen *g);

/* A chat request answered in api's shape (OAI_CHAT or OAI_RESP): the
 * messages rendered (srv_chat_prompt), tools detected, the task run.
 * echo: srv_gen_opts.echo (NULL: none; borrowed for the call). */
enum MHD_Result srv_oai_chat_run(srv_req *r, const json_t *body, srv_api api, json_t *echo);

/* Responses (srv_responses.c).  srv_resp_to_chat: the chat request a
 * Responses request is (a new reference), or NULL with e (400 for what
 * has no chat equivalent, 500 out of memory). */
json_t *srv_resp_to_chat(const json_t *body, srv_err *e);
json_t *srv_resp_response(srv_gen *g);
void srv_resp_stream_token(srv_gen *g, const eng_event *ev);
void srv_resp_stream_end(srv_gen *g);
/* The response.in_progress event carrying a prompt_progress (its fields
 * set by the caller); sends response.created first when not yet sent. */
json_t *srv_resp_progress_event(srv_gen *g);
/* Writes j as one event of a Responses stream: "event: <type>" then the
 * data, numbered (sequence_number).  Takes j. */
void srv_resp_sse(srv_gen *g, json_t *j);
/* The stream's "error" event for err (the OpenAI error object, with the
 * Responses event's type, code, message and param); NULL out of memory. */
json_t *srv_resp_error_event(const srv_err *err);

json_t *srv_oai_response(srv_gen *g);
void srv_oai_stream_token(srv_gen *g, const eng_event *ev);
void srv_oai_stream_end(srv_gen *g);
json_t *srv_native_response(srv_gen *g);
void srv_native_stream_token(srv_gen *g, const eng_event *ev);
void srv_native_stream_end(srv_gen *g);

/* ---- Anthropic Messages (srv_anthropic.c: requests; srv_anthropic_out.c: answers) ---- */

/* The OpenAI chat request (messages, tools, tool_choice, stop ...) that an
 * Anthropic Messages request body asks for: *out a new reference.  False
 * with e: a 400 naming the field for a malformed one, a 500 for an image
 * (no vision, llama-server's answer) or out of memory.  Pure. */
bool srv_anth_to_chat(const json_t *body, json_t **out, srv_err *e);
/* {"type": "error", "error": {"type", "message"}} for e. */
json_t *srv_anth_error_json(const srv_err *e);
json_t *srv_anth_response(srv_gen *g);
void srv_anth_stream_token(srv_gen *g, const eng_event *ev);
void srv_anth_stream_end(srv_gen *g);
void srv_anth_stream_error(srv_gen *g);    /* an "error" event of g->err */

/* ---- the formats' table (srv_fmt.c) ---- */

/* How one API shapes a generation's answer; srv_gen.c uses nothing else
 * of the formats. */
typedef struct srv_fmt {
    const char *id_prefix;                               /* "chatcmpl-", "resp_", "msg_", "cmpl-" */
    json_t *(*response)(srv_gen *g);                     /* the whole answer (not streamed) */
    void (*stream_token)(srv_gen *g, const eng_event *ev);
    void (*stream_end)(srv_gen *g);
    void (*stream_error)(srv_gen *g);                    /* the event that ends a stream with g->err */
    json_t *(*progress)(srv_gen *g, const eng_event *ev);   /* a progress chunk's envelope */
    void (*send)(srv_gen *g, json_t *j);                 /* how the progress chunk goes out */
    const char *oom_event;                               /* a stream's last event, needing no memory */
    bool answers_as_array;                               /* several completions: an array (native) */
    bool echoes_prompt;                                  /* the answer carries the prompt's text */
} srv_fmt;

const srv_fmt *srv_fmt_of(srv_api api);

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
char *srv_metrics_text(const eng_stats *st, const srv_scrape *since, const char *model_name);
/* "idle", "prefill" or "decode", as /slots, /polykv/tps and /polykv/pools say it. */
const char *srv_slot_state(eng_slot_state s);
/* The /polykv/tps snapshot object. */
json_t *srv_tps_json(const srv *s, const eng_stats *st, const srv_view *v);

#endif
