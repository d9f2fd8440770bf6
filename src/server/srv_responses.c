/*
 * srv_responses.c - OpenAI's Responses API (POST /v1/responses) as a
 * translation of the chat path: the request becomes a chat request, runs
 * as one (srv_oai_chat_run: the template, tools, reasoning and the task),
 * and its answer is written as a `response` object or as the Responses
 * event stream.
 *
 * Request: `instructions` becomes a first system message, `input` (a
 * string, or a list of items) the messages: role messages with
 * input_text / output_text parts, function_call items (tool calls of the
 * assistant turn they follow), function_call_output items (tool messages),
 * reasoning items (the turn's reasoning_content).  Function tools move
 * under `function`, max_output_tokens is max_tokens, text.format is
 * response_format; every other field is the chat's (temperature, top_p,
 * stream, timings_per_token ...).  Nothing is stored, so
 * previous_response_id is refused.  /v1/responses/input_tokens counts the
 * prompt such a request renders.
 *
 * Answer: `output` holds a reasoning item (the thinking), a message with
 * one output_text part, then one function_call item per call; the object
 * repeats the request's settings (echo_of).  A stream:
 *
 *   response.created, response.in_progress (also one per prompt_progress)
 *   [reasoning]  output_item.added, reasoning_text.delta ..., reasoning_text.done, output_item.done
 *   [message]    output_item.added, content_part.added, output_text.delta ...,
 *                output_text.done, content_part.done, output_item.done
 *   [each call]  output_item.added, function_call_arguments.delta, .done, output_item.done
 *   response.completed (the whole response, usage, and timings)
 *
 * each as `event: <type>` + `data: {...}` with a sequence_number; deltas
 * follow the chat stream's rules (srv_openai.c): text that may still turn
 * into a tool call waits for the end, calls go out whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_gen.h"

/* ---- the request ---- */

/* Appends the text of an item's content (a string, or input_text /
 * output_text / refusal parts) to b, parts joined by a blank line. */
static bool content_text(const json_t *content, size_t i, pk_buf *b, srv_err *e)
{
    if (!content || json_is_null(content)) return true;
    if (json_is_string(content)) {
        if (b->n && json_string_length(content)) pk_buf_puts(b, "\n\n");
        pk_buf_put(b, json_string_value(content), json_string_length(content));
        return true;
    }
    if (!json_is_array(content))
        return srv_fail(e, 400, "input", "input[%zu].content must be a string or an array of content parts", i);
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *part = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *key = type && !strcmp(type, "refusal") ? "refusal" : "text";
        const json_t *text = json_object_get(part, key);
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "refusal")))
            return srv_fail(e, 400, "input", "input[%zu].content[%zu]: type '%s' is not supported (text parts only: "
                            "input_text, output_text, refusal)", i, k, type ? type : "(none)");
        if (!json_is_string(text))
            return srv_fail(e, 400, "input", "input[%zu].content[%zu].%s must be a string", i, k, key);
        if (b->n) pk_buf_puts(b, "\n\n");
        pk_buf_put(b, json_string_value(text), json_string_length(text));
    }
    return true;
}

static bool string_field(const json_t *item, const char *key, size_t i, const char **out, srv_err *e)
{
    *out = json_string_value(json_object_get(item, key));
    return *out || srv_fail(e, 400, "input", "input[%zu].%s must be a string", i, key);
}

/* The assistant message the assistant-side item i joins: the previous
 * one when the item before was the assistant's too, else a new one. */
static json_t *assistant_turn(json_t *msgs, json_t **turn)
{
    if (*turn) return *turn;
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
    if (m && json_array_append_new(msgs, m)) m = NULL;
    return *turn = m;
}

static bool append_text(json_t *msg, const char *key, const char *text, size_t n)
{
    const char *old = json_string_value(json_object_get(msg, key));
    pk_buf b = { 0 };
    if (old && *old) {
        pk_buf_puts(&b, old);
        if (n) pk_buf_puts(&b, "\n\n");
    }
    pk_buf_put(&b, text, n);
    bool ok = !b.oom && !json_object_set_new(msg, key, json_stringn(b.p ? b.p : "", b.n));
    pk_buf_free(&b);
    return ok;
}

/* One input item into msgs; *turn is the assistant message items join. */
static bool input_item(const json_t *item, size_t i, json_t *msgs, json_t **turn, srv_err *e)
{
    if (!json_is_object(item)) return srv_fail(e, 400, "input", "input[%zu] must be an object", i);
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    pk_buf b = { 0 };
    bool ok = true;
    if (role && (!type || !strcmp(type, "message"))) {
        ok = content_text(json_object_get(item, "content"), i, &b, e);
        bool assistant = !strcmp(role, "assistant");
        if (ok && assistant) {
            json_t *m = assistant_turn(msgs, turn);
            ok = (m && append_text(m, "content", b.p ? b.p : "", b.n)) || srv_fail(e, 500, NULL, "out of memory");
        } else if (ok) {
            if (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer"))
                ok = srv_fail(e, 400, "input", "input[%zu].role '%s' is not one of user, system, developer, "
                              "assistant", i, role);
            /* developer instructions are the system's in every template but gpt-oss's */
            json_t *m = ok ? json_pack("{s:s, s:s%}", "role", strcmp(role, "developer") ? role : "system", "content",
                                       b.p ? b.p : "", b.n) : NULL;
            if (ok && (!m || json_array_append_new(msgs, m))) ok = srv_fail(e, 500, NULL, "out of memory");
            *turn = NULL;
        }
    } else if (type && !strcmp(type, "function_call")) {
        const char *call_id, *name, *args;
        ok = string_field(item, "call_id", i, &call_id, e) && string_field(item, "name", i, &name, e) &&
             string_field(item, "arguments", i, &args, e);
        json_t *m = ok ? assistant_turn(msgs, turn) : NULL;
        if (ok && !json_is_array(json_object_get(m, "tool_calls")))
            json_object_set_new(m, "tool_calls", json_array());
        json_t *call = ok ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", call_id, "type", "function", "function",
                                      "name", name, "arguments", args) : NULL;
        if (ok && !m) json_decref(call);
        if (ok && (!m || !call || json_array_append_new(json_object_get(m, "tool_calls"), call)))
            ok = srv_fail(e, 500, NULL, "out of memory");
    } else if (type && !strcmp(type, "function_call_output")) {
        const char *call_id;
        ok = string_field(item, "call_id", i, &call_id, e) && content_text(json_object_get(item, "output"), i, &b, e);
        json_t *m = ok ? json_pack("{s:s, s:s, s:s%}", "role", "tool", "tool_call_id", call_id, "content",
                                   b.p ? b.p : "", b.n) : NULL;
        if (ok && (!m || json_array_append_new(msgs, m))) ok = srv_fail(e, 500, NULL, "out of memory");
        *turn = NULL;
    } else if (type && !strcmp(type, "reasoning")) {
        /* its reasoning_text content, else its summary's text */
        const json_t *parts = json_array_size(json_object_get(item, "content")) ? json_object_get(item, "content")
                                                                                : json_object_get(item, "summary");
        for (size_t k = 0; k < json_array_size(parts); k++) {
            const char *t = json_string_value(json_object_get(json_array_get(parts, k), "text"));
            if (!t) { ok = srv_fail(e, 400, "input", "input[%zu]: a reasoning part needs a string 'text'", i); break; }
            if (b.n) pk_buf_puts(&b, "\n\n");
            pk_buf_puts(&b, t);
        }
        json_t *m = ok ? assistant_turn(msgs, turn) : NULL;
        if (ok && (!m || !append_text(m, "reasoning_content", b.p ? b.p : "", b.n)))
            ok = srv_fail(e, 500, NULL, "out of memory");
    } else if (type && !strcmp(type, "message")) {
        ok = srv_fail(e, 400, "input", "input[%zu]: a message needs a string 'role'", i);
    } else {
        ok = srv_fail(e, 400, "input", "input[%zu]: items of type '%s' are not supported (messages, function_call, "
                      "function_call_output, reasoning)", i, type ? type : "(none)");
    }
    if (ok && b.oom) ok = srv_fail(e, 500, NULL, "out of memory");
    pk_buf_free(&b);
    return ok;
}

static json_t *messages_of(const json_t *body, srv_err *e)
{
    const json_t *input = srv_field(body, "input"), *instr = srv_field(body, "instructions");
    if (!input) return srv_fail(e, 400, "input", "'input' is required"), NULL;
    if (instr && !json_is_string(instr))
        return srv_fail(e, 400, "instructions", "'instructions' must be a string"), NULL;
    if (!json_is_string(input) && !json_is_array(input))
        return srv_fail(e, 400, "input", "'input' must be a string or an array of input items"), NULL;
    json_t *msgs = json_array();
    if (!msgs) return srv_fail(e, 500, NULL, "out of memory"), NULL;
    bool ok = true;
    if (instr) ok = !json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", instr));
    if (ok && json_is_string(input))
        ok = !json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
    if (!ok) srv_fail(e, 500, NULL, "out of memory");
    json_t *turn = NULL;
    for (size_t i = 0; ok && json_is_array(input) && i < json_array_size(input); i++)
        ok = input_item(json_array_get(input, i), i, msgs, &turn, e);
    if (ok && !json_array_size(msgs)) ok = srv_fail(e, 400, "input", "'input' holds no message");
    if (!ok) {
        json_decref(msgs);
        return NULL;
    }
    return msgs;
}

/* Function tools in the chat's shape ({"type": "function", "function":
 * {...}}); tools of other types (web search, files ...) have no chat
 * equivalent and are left out, as llama-server does. */
static json_t *tools_of(const json_t *tools, srv_err *e)
{
    if (!json_is_array(tools)) return srv_fail(e, 400, "tools", "'tools' must be an array"), NULL;
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type) {
            json_decref(out);
            return srv_fail(e, 400, "tools", "tools[%zu] must be an object with a string 'type'", i), NULL;
        }
        if (strcmp(type, "function")) continue;
        if (!json_is_string(json_object_get(t, "name"))) {
            json_decref(out);
            return srv_fail(e, 400, "tools", "tools[%zu]: a function tool needs a string 'name'", i), NULL;
        }
        json_t *fn = json_copy((json_t *)t);
        if (fn) json_object_del(fn, "type");
        if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn))) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!out) srv_fail(e, 500, NULL, "out of memory");
    return out;
}

/* tool_choice: the strings as they are; {"type": "function", "name": N}
 * in the chat's {"type": "function", "function": {"name": N}}. */
static bool tool_choice_of(const json_t *tc, json_t *chat, srv_err *e)
{
    if (!tc || json_is_string(tc)) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    const json_t *name = json_object_get(tc, "name");
    if (!type || strcmp(type, "function") || !json_is_string(name))
        return srv_fail(e, 400, "tool_choice", "'tool_choice' must be auto, none, required or {\"type\": "
                        "\"function\", \"name\": ...}");
    return !json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function",
                                                               "name", name)) ||
           srv_fail(e, 500, NULL, "out of memory");
}

/* text.format: json_schema and json_object as the chat's response_format. */
static bool format_of(const json_t *text, json_t *chat, srv_err *e)
{
    const json_t *f = json_object_get(text, "format");
    if (!f) return true;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (type && !strcmp(type, "text")) return true;
    json_t *rf = NULL;
    if (type && !strcmp(type, "json_object")) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (type && !strcmp(type, "json_schema") && json_is_object(json_object_get(f, "schema"))) {
        rf = json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema", json_object_get(f, "schema"));
    } else {
        return srv_fail(e, 400, "text", "'text.format' must be text, json_object or json_schema with a 'schema'");
    }
    return (rf && !json_object_set_new(chat, "response_format", rf)) || srv_fail(e, 500, NULL, "out of memory");
}

json_t *srv_resp_to_chat(const json_t *body, srv_err *e)
{
    const json_t *prev = srv_field(body, "previous_response_id");
    if (prev && (!json_is_string(prev) || json_string_length(prev)))
        return srv_fail(e, 400, "previous_response_id", "'previous_response_id' is not supported: polykv keeps no "
                        "responses; send the whole conversation in 'input'"), NULL;
    const json_t *text = srv_field(body, "text");
    if (text && !json_is_object(text)) return srv_fail(e, 400, "text", "'text' must be an object"), NULL;
    json_t *msgs = messages_of(body, e);
    if (!msgs) return NULL;
    json_t *chat = json_copy((json_t *)body);
    if (!chat || json_object_set_new(chat, "messages", msgs)) {
        json_decref(chat);
        return srv_fail(e, 500, NULL, "out of memory"), NULL;
    }
    static const char *const gone[] = { "input", "instructions", "tools", "tool_choice", "text", "reasoning",
                                        "max_output_tokens", "previous_response_id", "response_format" };
    for (size_t k = 0; k < ARRAY_LEN(gone); k++) json_object_del(chat, gone[k]);
    const json_t *tools = srv_field(body, "tools"), *max = srv_field(body, "max_output_tokens");
    json_t *ct = tools ? tools_of(tools, e) : NULL;
    bool ok = !tools || ct;
    if (ok && json_array_size(ct)) ok = !json_object_set(chat, "tools", ct) || srv_fail(e, 500, NULL, "out of memory");
    json_decref(ct);
    const json_t *tc = srv_field(body, "tool_choice");
    if (ok && json_is_string(tc)) json_object_set(chat, "tool_choice", (json_t *)tc);
    ok = ok && tool_choice_of(tc, chat, e) && format_of(text, chat, e);
    if (ok && max) ok = !json_object_set(chat, "max_tokens", (json_t *)max) || srv_fail(e, 500, NULL, "out of memory");
    if (!ok) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

/* What a response object repeats of its request (OpenAI's Response
 * fields), each as sent or its default. */
static json_t *echo_of(const json_t *body)
{
    json_t *j = json_pack("{s:n, s:n, s:n, s:n, s:[], s:s, s:b, s:{s:{s:s}}, s:{}, s:n, s:b, s:s, s:{s:n, s:n},"
                          " s:n}", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
                          "auto", "parallel_tool_calls", 1, "text", "format", "type", "text", "metadata",
                          "previous_response_id", "store", 0, "truncation", "disabled", "reasoning", "effort",
                          "summary", "user");
    static const char *const keys[] = { "instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                        "tool_choice", "parallel_tool_calls", "text", "metadata", "reasoning",
                                        "user" };
    for (size_t k = 0; j && k < ARRAY_LEN(keys); k++) {
        json_t *v = json_object_get(body, keys[k]);
        if (v && !json_is_null(v)) json_object_set(j, keys[k], v);
    }
    return j;
}

enum MHD_Result srv_h_responses(srv_req *r, json_t *body)
{
    srv_err e;
    json_t *chat = srv_resp_to_chat(body, &e);
    if (!chat) return srv_reply_error(r, &e);
    json_t *echo = echo_of(body);
    enum MHD_Result ret = echo ? srv_oai_chat_run(r, chat, SRV_API_OAI_RESP, echo)
                               : srv_reply_errorf(r, 500, "out of memory");
    json_decref(echo);
    json_decref(chat);
    return ret;
}

/* The prompt tokens the request would have: rendered as /v1/responses
 * renders it, nothing generated (OpenAI's /v1/responses/input_tokens). */
enum MHD_Result srv_h_responses_input_tokens(srv_req *r, json_t *body)
{
    srv_err e;
    json_t *chat = srv_resp_to_chat(body, &e);
    if (!chat) return srv_reply_error(r, &e);
    char *prompt = NULL;
    size_t n_prompt;
    srv_tool_fmt fmt;
    bool ok = srv_chat_prompt(r->s, chat, &prompt, &n_prompt, &fmt, NULL, &e);
    json_decref(chat);
    if (!ok) return srv_reply_error(r, &e);
    int32_t *ids = NULL, n = 0;
    pk_status st = srv_tokenize(r->s->voc, prompt, n_prompt, true, true, &ids, &n);
    free(prompt);
    free(ids);
    if (st != PK_OK) return srv_reply_errorf(r, 500, "tokenization failed: %s", pk_status_str(st));
    return srv_reply_json(r, 200, json_pack("{s:s, s:i}", "object", "response.input_tokens", "input_tokens", n));
}

/* ---- the answer's pieces ---- */

static const char *str(const char *s) { return s ? s : ""; }

static json_t *usage_json(const srv_gen *g)
{
    const eng_event *d = &g->done;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "input_tokens", d->n_prompt, "output_tokens", d->n_gen,
                     "total_tokens", d->n_prompt + d->n_gen, "input_tokens_details", "cached_tokens", d->n_cached);
}

static void item_ids(srv_gen *g)
{
    if (!g->resp.msg_id[0]) srv_random_id(g->resp.msg_id, sizeof g->resp.msg_id, "msg_");
    if (!g->resp.rs_id[0]) srv_random_id(g->resp.rs_id, sizeof g->resp.rs_id, "rs_");
}

static json_t *text_part(const char *text, size_t n)
{
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", srv_json_text(text, n), "annotations",
                     "logprobs");
}

/* The message item; text NULL: no part yet (an item just added). */
static json_t *message_item(const srv_gen *g, const char *text, size_t n, const char *status)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", g->resp.msg_id, "status", status, "role",
                     "assistant", "content", text ? json_pack("[o]", text_part(text, n)) : json_array());
}

static json_t *reasoning_item(const srv_gen *g, const char *text, size_t n, const char *status)
{
    json_t *content = text ? json_pack("[{s:s, s:o}]", "type", "reasoning_text", "text", srv_json_text(text, n))
                           : json_array();
    return json_pack("{s:s, s:s, s:[], s:o, s:s, s:s}", "type", "reasoning", "id", g->resp.rs_id, "summary",
                     "content", content, "encrypted_content", "", "status", status);
}

/* A call's item; tag is the random part its id and call_id share. */
static json_t *call_item(const srv_tool_call *c, const char *tag, bool done)
{
    char id[48], call_id[48];
    snprintf(id, sizeof id, "fc_%s", tag);
    snprintf(call_id, sizeof call_id, "call_%s", tag);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", id, "call_id", call_id, "name",
                     c->name, "arguments", done ? c->arguments : "", "status", done ? "completed" : "in_progress");
}

static json_t *response_obj(const srv_gen *g, const char *status, json_t *output)
{
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:n, s:n}", "id", g->id, "object", "response", "created_at",
                          (json_int_t)g->created, "status", status, "model", g->o.model, "output",
                          output ? output : json_array(), "error", "incomplete_details");
    if (j && g->o.echo) json_object_update_missing(j, g->o.echo);
    if (j && !strcmp(status, "completed")) {
        json_object_set_new(j, "completed_at", json_integer((json_int_t)time(NULL)));
        json_object_set_new(j, "usage", usage_json(g));
    }
    return j;
}

json_t *srv_resp_response(srv_gen *g)
{
    srv_answer a;
    if (!srv_gen_answer(g, &a)) return NULL;
    item_ids(g);
    json_t *out = json_array();
    if (a.reason_len) json_array_append_new(out, reasoning_item(g, str(a.reason), a.reason_len, "completed"));
    if (a.tm.content_len || !a.tm.n_calls)
        json_array_append_new(out, message_item(g, str(a.tm.content), a.tm.content_len, "completed"));
    for (int i = 0; i < a.tm.n_calls; i++) {
        char tag[32];
        srv_random_id(tag, sizeof tag, "");
        json_array_append_new(out, call_item(&a.tm.calls[i], tag, true));
    }
    srv_tool_msg_free(&a.tm);
    return response_obj(g, "completed", out);
}

/* ---- streaming ---- */

void srv_resp_sse(srv_gen *g, json_t *j)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!j || !type || json_object_set_new(j, "sequence_number", json_integer(g->resp.seq++))) {
        json_decref(j);
        srv_gen_sse(g, NULL);        /* out of memory: the stream ends with its error */
        return;
    }
    srv_gen_out(g, "event: ", 7);
    srv_gen_out(g, type, strlen(type));
    srv_gen_out(g, "\n", 1);
    srv_gen_sse(g, j);
}

static json_t *event(const char *type, int32_t output_index)
{
    json_t *j = json_pack("{s:s}", "type", type);
    if (j && output_index >= 0) json_object_set_new(j, "output_index", json_integer(output_index));
    return j;
}

/* An event about part 0 of item id. */
static json_t *part_event(const char *type, int32_t output_index, const char *id)
{
    json_t *j = event(type, output_index);
    if (j) json_object_set_new(j, "item_id", json_string(id));
    if (j) json_object_set_new(j, "content_index", json_integer(0));
    return j;
}

static void send_item(srv_gen *g, const char *type, int32_t output_index, json_t *item)
{
    json_t *j = event(type, output_index);
    if (j) json_object_set_new(j, "item", item);
    else json_decref(item);
    srv_resp_sse(g, j);
}

static void begin(srv_gen *g)
{
    if (g->resp.begun) return;
    g->resp.begun = true;
    item_ids(g);
    for (int k = 0; k < 2; k++) {
        json_t *j = event(k ? "response.in_progress" : "response.created", -1);
        if (j) json_object_set_new(j, "response", response_obj(g, "in_progress", NULL));
        srv_resp_sse(g, j);
    }
}

json_t *srv_resp_progress_event(srv_gen *g)
{
    begin(g);
    json_t *j = event("response.in_progress", -1);
    if (j) json_object_set_new(j, "response", response_obj(g, "in_progress", NULL));
    return j;
}

static void open_reasoning(srv_gen *g)
{
    if (g->resp.rs_index >= 0) return;
    g->resp.rs_index = g->resp.n_items++;
    send_item(g, "response.output_item.added", g->resp.rs_index, reasoning_item(g, NULL, 0, "in_progress"));
}

static void open_message(srv_gen *g)
{
    if (g->resp.msg_index >= 0) return;
    g->resp.msg_index = g->resp.n_items++;
    send_item(g, "response.output_item.added", g->resp.msg_index, message_item(g, NULL, 0, "in_progress"));
    json_t *j = part_event("response.content_part.added", g->resp.msg_index, g->resp.msg_id);
    if (j) json_object_set_new(j, "part", text_part("", 0));
    srv_resp_sse(g, j);
}

static void send_delta(srv_gen *g, bool reasoning, const char *text, size_t n)
{
    if (reasoning) open_reasoning(g);
    else open_message(g);
    json_t *j = reasoning ? part_event("response.reasoning_text.delta", g->resp.rs_index, g->resp.rs_id)
                          : part_event("response.output_text.delta", g->resp.msg_index, g->resp.msg_id);
    if (j) json_object_set_new(j, "delta", srv_json_text(text, n));
    if (j && !reasoning) json_object_set_new(j, "logprobs", json_array());
    if (j && g->o.timings_per_token) json_object_set_new(j, "timings", srv_gen_timings_now(g));
    srv_resp_sse(g, j);
}

void srv_resp_stream_token(srv_gen *g, const eng_event *ev)
{
    begin(g);
    srv_new_text t = srv_gen_take_new(g);
    if (t.n_reason) send_delta(g, true, t.reason, t.n_reason);
    if (t.n_content) send_delta(g, false, t.content, t.n_content);
}

/* The end of a stream: what was held back, each item done, the calls,
 * then response.completed with the output in item order. */
void srv_resp_stream_end(srv_gen *g)
{
    begin(g);
    srv_answer a;
    if (!srv_gen_answer(g, &a)) {
        g->out_oom = true;           /* its only failure: gen_read sends the error event */
        g->finished = true;
        return;
    }
    srv_new_text rest = srv_gen_take_rest(g, &a);
    if (rest.n_reason) send_delta(g, true, rest.reason, rest.n_reason);
    if (rest.n_content) send_delta(g, false, rest.content, rest.n_content);
    if (!a.tm.n_calls) open_message(g);          /* an empty answer is still a message */
    json_t *items[2] = { NULL, NULL };           /* reasoning and message, by output_index */
    if (g->resp.rs_index >= 0) {
        json_t *j = part_event("response.reasoning_text.done", g->resp.rs_index, g->resp.rs_id);
        if (j) json_object_set_new(j, "text", srv_json_text(str(a.reason), a.reason_len));
        srv_resp_sse(g, j);
        items[g->resp.rs_index] = reasoning_item(g, str(a.reason), a.reason_len, "completed");
        send_item(g, "response.output_item.done", g->resp.rs_index, json_incref(items[g->resp.rs_index]));
    }
    if (g->resp.msg_index >= 0) {
        json_t *j = part_event("response.output_text.done", g->resp.msg_index, g->resp.msg_id);
        const char *content = str(a.tm.content);
        if (j) json_object_set_new(j, "text", srv_json_text(content, a.tm.content_len));
        if (j) json_object_set_new(j, "logprobs", json_array());
        srv_resp_sse(g, j);
        j = part_event("response.content_part.done", g->resp.msg_index, g->resp.msg_id);
        if (j) json_object_set_new(j, "part", text_part(content, a.tm.content_len));
        srv_resp_sse(g, j);
        items[g->resp.msg_index] = message_item(g, content, a.tm.content_len, "completed");
        send_item(g, "response.output_item.done", g->resp.msg_index, json_incref(items[g->resp.msg_index]));
    }
    json_t *out = json_array();
    for (int k = 0; k < 2; k++)
        if (items[k]) json_array_append_new(out, items[k]);
    for (int i = 0; i < a.tm.n_calls; i++) {
        const srv_tool_call *c = &a.tm.calls[i];
        char tag[32], id[48];
        srv_random_id(tag, sizeof tag, "");
        snprintf(id, sizeof id, "fc_%s", tag);
        int32_t idx = g->resp.n_items++;
        send_item(g, "response.output_item.added", idx, call_item(c, tag, false));
        json_t *j = event("response.function_call_arguments.delta", idx);
        if (j) json_object_set_new(j, "item_id", json_string(id));
        if (j) json_object_set_new(j, "delta", json_string(c->arguments));
        srv_resp_sse(g, j);
        j = event("response.function_call_arguments.done", idx);
        if (j) json_object_set_new(j, "item_id", json_string(id));
        if (j) json_object_set_new(j, "name", json_string(c->name));
        if (j) json_object_set_new(j, "arguments", json_string(c->arguments));
        srv_resp_sse(g, j);
        json_t *item = call_item(c, tag, true);
        json_array_append(out, item);
        send_item(g, "response.output_item.done", idx, item);
    }
    srv_tool_msg_free(&a.tm);
    json_t *j = event("response.completed", -1);
    if (j) json_object_set_new(j, "response", response_obj(g, "completed", out));
    else json_decref(out);
    if (j) json_object_set_new(j, "timings", srv_gen_timings(&g->done));
    srv_resp_sse(g, j);
}

json_t *srv_resp_error_event(const srv_err *err)
{
    json_t *j = srv_error_json(err);
    if (!j) return NULL;
    json_object_set_new(j, "type", json_string("error"));
    json_object_set_new(j, "code", json_string(srv_error_type(err->status)));
    json_object_set_new(j, "message", srv_json_text(err->msg, strlen(err->msg)));
    json_object_set_new(j, "param", err->param[0] ? json_string(err->param) : json_null());
    return j;
}
