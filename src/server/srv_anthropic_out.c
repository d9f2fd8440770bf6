/*
 * srv_anthropic_out.c - Anthropic's Messages API, the answers: the message
 * object, its SSE stream, and errors in Anthropic's shape.
 *
 * An answer is content blocks in the order the model wrote them: thinking
 * (the <think> part, srv_reason.h), text, then one tool_use per call
 * (srv_tools.h), as srv_gen_answer splits a chat answer for every format.
 * A stream numbers the blocks as it starts them and closes each before the
 * next starts, so every index has one start, its deltas and one stop:
 *
 *   message_start {message: {..., content: [], usage}}
 *   content_block_start {index 0, thinking}  content_block_delta thinking_delta ...
 *       signature_delta ""  content_block_stop {index 0}
 *   content_block_start {index 1, text}      content_block_delta text_delta ...
 *       content_block_stop {index 1}
 *   content_block_start {index 2, tool_use {id, name, input {}}}
 *       content_block_delta input_json_delta {partial_json}  content_block_stop {index 2}
 *   message_delta {delta: {stop_reason, stop_sequence}, usage}
 *   message_stop
 *
 * Text streams as it comes, except what may still turn into a tool call
 * (held until the end, as the OpenAI stream does); calls go out whole at the
 * end.  An answer with no block at all gets one empty text block, whole or
 * streamed, since clients read content[0].  Thinking blocks carry an empty
 * signature: there is nothing to sign them with, and Anthropic's clients
 * expect the field.  usage counts input_tokens without the prompt tokens the
 * cache held (cache_read_input_tokens), as Anthropic does.
 */
#include <stdlib.h>
#include <string.h>

#include "srv_gen.h"

enum { BLK_NONE = 0, BLK_THINKING, BLK_TEXT, BLK_TOOL };

static const char *error_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default:  return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *srv_anth_error_json(const srv_err *e)
{
    return json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", error_type(e->status), "message",
                     srv_json_text(e->msg, strlen(e->msg)));
}

static const char *stop_reason(const srv_gen *g, bool tool_use)
{
    switch (g->done.stop) {
    case ENG_STOP_LIMIT:
    case ENG_STOP_CTX:  return "max_tokens";
    case ENG_STOP_WORD: return "stop_sequence";
    default:            return tool_use ? "tool_use" : "end_turn";
    }
}

static json_t *stop_sequence(const srv_gen *g)
{
    return g->done.stop == ENG_STOP_WORD ? srv_json_text(g->done.stop_word, strlen(g->done.stop_word)) : json_null();
}

static json_t *usage_json(int32_t n_prompt, int32_t n_cached, int32_t n_out)
{
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", n_prompt - n_cached, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", n_cached, "output_tokens", n_out);
}

/* A call's arguments as the object Anthropic's input is ({} when the model
 * wrote some other JSON value). */
static json_t *call_input(const srv_tool_call *c)
{
    json_t *j = json_loads(c->arguments, JSON_DECODE_ANY, NULL);
    if (json_is_object(j)) return j;
    json_decref(j);
    return json_object();
}

static json_t *tool_use_block(const srv_tool_call *c, json_t *input)
{
    char id[40];
    srv_random_id(id, sizeof id, "toolu_");
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", c->name, "input", input);
}

json_t *srv_anth_response(srv_gen *g)
{
    srv_answer a;
    if (!srv_gen_answer(g, &a)) return NULL;
    json_t *content = json_array();
    if (a.reason_len)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 srv_json_text(a.reason, a.reason_len), "signature", ""));
    if (a.tm.content_len || (!a.reason_len && !a.tm.n_calls))
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 srv_json_text(a.tm.content, a.tm.content_len)));
    for (int i = 0; i < a.tm.n_calls; i++)
        json_array_append_new(content, tool_use_block(&a.tm.calls[i], call_input(&a.tm.calls[i])));
    const eng_event *d = &g->done;
    json_t *res = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", g->id, "type", "message", "role",
                            "assistant", "model", g->o.model, "content", content, "stop_reason",
                            stop_reason(g, a.tm.n_calls > 0), "stop_sequence", stop_sequence(g), "usage",
                            usage_json(d->n_prompt, d->n_cached, d->n_gen));
    srv_tool_msg_free(&a.tm);
    return res;
}

/* ---- streaming ---- */

static void message_start(srv_gen *g)
{
    if (g->sent_role) return;
    g->sent_role = true;
    json_t *msg = json_pack("{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}", "id", g->id, "type", "message", "role",
                            "assistant", "model", g->o.model, "content", "stop_reason", "stop_sequence", "usage",
                            usage_json(g->n_prompt, g->n_cached, 0));
    srv_gen_sse_event(g, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
}

static void block_delta(srv_gen *g, json_t *delta)
{
    srv_gen_sse_event(g, "content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index",
                                                          g->anth_n_blocks - 1, "delta", delta));
}

static void close_block(srv_gen *g)
{
    if (g->anth_open == BLK_NONE) return;
    if (g->anth_open == BLK_THINKING)
        block_delta(g, json_pack("{s:s, s:s}", "type", "signature_delta", "signature", ""));
    srv_gen_sse_event(g, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                                                         g->anth_n_blocks - 1));
    g->anth_open = BLK_NONE;
}

/* Closes the open block and starts the next one, of kind `kind`. */
static void open_block(srv_gen *g, int kind, json_t *block)
{
    close_block(g);
    srv_gen_sse_event(g, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                                          g->anth_n_blocks, "content_block", block));
    g->anth_n_blocks++;
    g->anth_open = kind;
}

/* n bytes of thinking or text, in the open block of that kind (started
 * when another kind, or none, is open). */
static void put_delta(srv_gen *g, int kind, const char *s, size_t n)
{
    if (!n) return;
    bool think = kind == BLK_THINKING;
    if (g->anth_open != kind)
        open_block(g, kind, think ? json_pack("{s:s, s:s}", "type", "thinking", "thinking", "")
                                  : json_pack("{s:s, s:s}", "type", "text", "text", ""));
    block_delta(g, json_pack("{s:s, s:o}", "type", think ? "thinking_delta" : "text_delta", think ? "thinking" : "text",
                             srv_json_text(s, n)));
}

void srv_anth_stream_token(srv_gen *g, const eng_event *ev)
{
    message_start(g);
    srv_new_text t = srv_gen_take_new(g);
    put_delta(g, BLK_THINKING, t.reason, t.n_reason);
    put_delta(g, BLK_TEXT, t.content, t.n_content);
}

void srv_anth_stream_end(srv_gen *g)
{
    message_start(g);
    srv_answer a;
    if (!srv_gen_answer(g, &a)) {
        g->out_oom = true;           /* its only failure: gen_read sends the error event */
        g->finished = true;
        return;
    }
    srv_tool_msg tm = a.tm;
    srv_new_text rest = srv_gen_take_rest(g, &a);
    put_delta(g, BLK_THINKING, rest.reason, rest.n_reason);
    put_delta(g, BLK_TEXT, rest.content, rest.n_content);
    for (int i = 0; i < tm.n_calls; i++) {
        json_t *input = call_input(&tm.calls[i]);
        char *args = input ? json_dumps(input, JSON_COMPACT) : NULL;
        json_decref(input);
        open_block(g, BLK_TOOL, tool_use_block(&tm.calls[i], json_object()));
        block_delta(g, args ? json_pack("{s:s, s:s}", "type", "input_json_delta", "partial_json", args) : NULL);
        free(args);
    }
    if (!g->anth_n_blocks) open_block(g, BLK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    close_block(g);
    const eng_event *d = &g->done;
    json_t *delta = json_pack("{s:s, s:o}", "stop_reason", stop_reason(g, tm.n_calls > 0), "stop_sequence",
                              stop_sequence(g));
    srv_gen_sse_event(g, "message_delta", json_pack("{s:s, s:o, s:o}", "type", "message_delta", "delta", delta,
                                                    "usage", usage_json(d->n_prompt, d->n_cached, d->n_gen)));
    srv_gen_sse_event(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    srv_tool_msg_free(&tm);
}

void srv_anth_stream_error(srv_gen *g)
{
    srv_gen_sse_event(g, "error", srv_anth_error_json(&g->err));
}
