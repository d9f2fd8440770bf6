/*
 * srv_parse.h - request validation (srv_parse.c, srv_fields.c) and the chat
 * template a prompt is rendered with (srv_chat.c): what a route reads from
 * a request before anything runs.  Not for use outside src/server.
 */
#ifndef SRV_PARSE_H
#define SRV_PARSE_H

#include "srv_impl.h"

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
    json_t *tool_defs;             /* chat: the request's "tools", which type QWEN_XML arguments
                                      (borrowed from the body; each srv_gen holds its own reference) */
    srv_reasoning reasoning;       /* chat: where <think>...</think> goes */
    srv_think_tags think;          /* chat: how the template's model marks its thinking */
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
 * (QWEN_XML and GEMMA4 in their templates' own syntax, any other in QWEN's
 * or LLAMA3's JSON) whose arguments follow that tool's parameters schema
 * (NULL, true, when tool_choice does not force a call).  400 naming the
 * field for an unknown function, a schema we cannot constrain, or a name
 * GEMMA4's call syntax cannot hold. */
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

/* ---- several prompts (srv_multi.c), Anthropic requests (srv_anthropic.c) ---- */

/* Prompts of a completion request: a string, ids, a mixed array (one
 * prompt), {"prompt_string": ...}, or an array of those (several, at most
 * SRV_MAX_CHOICES).  ids[i] malloc'ed (free each and the arrays). */
bool srv_tokenize_prompts(const tok_vocab *v, const json_t *prompt, bool add_special, int32_t ***ids,
                          int32_t **n, int *k, srv_err *e);
/* The OpenAI chat request (messages, tools, tool_choice, stop ...) that an
 * Anthropic Messages request body asks for: *out a new reference.  False
 * with e: a 400 naming the field for a malformed one, a 500 for an image
 * (no vision, llama-server's answer) or out of memory.  Pure. */
bool srv_anth_to_chat(const json_t *body, json_t **out, srv_err *e);

#endif
