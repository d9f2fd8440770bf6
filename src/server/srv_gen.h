/*
 * srv_gen.h - running a generation (srv_gen.c) and the formats that shape
 * its answer: the table (srv_fmt.c), OpenAI (srv_openai.c), llama.cpp's
 * native (srv_native.c), Responses (srv_responses.c) and Anthropic
 * (srv_anthropic.c, srv_anthropic_out.c).  Not for use outside src/server.
 */
#ifndef SRV_GEN_H
#define SRV_GEN_H

#include "srv_parse.h"

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
    pk_buf h_content, h_reason;    /* harmony: what of the content and reasoning a stream may send,
                                      from the text so far (srv_tools_harmony_prefix), owned */
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
 * new content short of what a tool call (or with harmony, a header or a
 * partial marker) may still claim.  Marks both sent; the pointers are into
 * g->text, or g's harmony buffers, valid until the next call. */
typedef struct srv_new_text { const char *reason, *content; size_t n_reason, n_content; } srv_new_text;
srv_new_text srv_gen_take_new(srv_gen *g);
/* At a stream's end: what the finished answer a holds beyond what
 * srv_gen_take_new sent (the pointers into a).  No content when what was
 * sent is not a prefix of a's content. */
srv_new_text srv_gen_take_rest(const srv_gen *g, const srv_answer *a);

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

/* ---- Anthropic Messages' answers (srv_anthropic_out.c) ---- */

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

#endif
