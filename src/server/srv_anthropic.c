/*
 * srv_anthropic.c - Anthropic's Messages API, the requests: POST /v1/messages
 * and POST /v1/messages/count_tokens.  A Messages request is turned into the
 * OpenAI chat request it means, which then takes the chat route's own path
 * (srv_chat_tokens: template, tools, reasoning, the forced-call grammar), so
 * both APIs render the same conversation into the same tokens.  Only the
 * answer is Anthropic's (srv_anthropic_out.c).
 *
 * The conversion, block by block:
 *
 *   system: "..." | [text blocks]     -> a first system message (blocks joined by "\n")
 *   user:   text                      -> the message's text (blocks joined by "\n")
 *           tool_result               -> a tool message each, placed before the user's
 *                                        own text: they answer the assistant turn before
 *           image                     -> a 500 "image input is not supported", as
 *                                        llama-server answers without a vision model
 *   assistant: text                   -> content
 *           thinking                  -> reasoning_content (templates that keep thinking
 *                                        in the history render it)
 *           tool_use {id, name, input}-> tool_calls, the input as JSON text
 *           redacted_thinking         -> dropped: encrypted, meant for Anthropic's models
 *   tools [{name, description, input_schema}] -> function tools
 *   tool_choice auto | any | tool | none      -> auto | required | that function | none
 *   stop_sequences -> stop; thinking disabled -> enable_thinking false for the template
 *
 * Claude Code opens its system prompt with "x-anthropic-billing-header:
 * cc_version=...; cc_entrypoint=...; cch=<hash>;", the hash new with every
 * request: kept, it would make every prompt differ from its first bytes and
 * no prefix could be reused.  It is Anthropic's billing data, not an
 * instruction, so it is dropped.
 *
 * An empty `messages` is one empty user turn (llama-server accepts it too).
 * thinking's budget_tokens is checked, not enforced: polykv has no budget
 * inside the thinking, max_tokens bounds the whole answer.
 */
#include <stdlib.h>
#include <string.h>

#include "srv_gen.h"

/* Fields that mean the same in both requests, passed on as they are (with
 * polykv's own session and pool fields, which agents send on any route). */
static const char *const same_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "stream", "chat_template_kwargs",
    "session_id", "pool_id", "shared_prefix_n_tokens", "cache_prompt", "id_slot",
};

static bool no_vision(srv_err *e, const char *at)
{
    return srv_fail(e, 500, "messages", "image input is not supported: polykv serves text-only models (%s holds "
                    "an image)", at);
}

/* Appends one block's text, blocks joined by a newline (what llama-server
 * gives templates that take one string per message). */
static void put_text(pk_buf *b, bool *any, const json_t *text)
{
    if (*any) pk_buf_put(b, "\n", 1);
    pk_buf_put(b, json_string_value(text), json_string_length(text));
    *any = true;
}

/* Bytes of s[0..n) that are Claude Code's billing header: the prefix and
 * its `key=value;` fields with the white space after them (0: none, or a
 * prefix with no such field after it). */
static size_t billing_header_len(const char *s, size_t n)
{
    static const char prefix[] = "x-anthropic-billing-header:";
    size_t i = sizeof prefix - 1;
    if (n < i || memcmp(s, prefix, i)) return 0;
    for (int n_fields = 0;; n_fields++) {
        size_t j = i;
        while (j < n && (s[j] == ' ' || s[j] == '\n')) j++;
        size_t k = j;
        while (k < n && ((s[k] >= 'a' && s[k] <= 'z') || s[k] == '_')) k++;
        const char *semi = k < n ? memchr(s + k, ';', n - k) : NULL, *nl = k < n ? memchr(s + k, '\n', n - k) : NULL;
        if (k == j || k == n || s[k] != '=' || !semi || (nl && nl < semi)) return n_fields ? j : 0;
        i = (size_t)(semi - s) + 1;
    }
}

/* put_text of a system text less its billing header (a block that was
 * only the header adds nothing). */
static void put_system_text(pk_buf *b, bool *any, const json_t *text)
{
    const char *s = json_string_value(text);
    size_t n = json_string_length(text), skip = billing_header_len(s, n);
    if (skip && skip == n) return;
    if (*any) pk_buf_put(b, "\n", 1);
    pk_buf_put(b, s + skip, n - skip);
    *any = true;
}

/* The text of a buffer as a JSON string ("" when nothing was put). */
static json_t *buf_string(const pk_buf *b)
{
    return json_stringn(b->p ? b->p : "", b->n);
}

static bool append(json_t *msgs, json_t *m, srv_err *e)
{
    if (!m || json_array_append_new(msgs, m)) return srv_fail(e, 500, NULL, "out of memory");
    return true;
}

static bool convert_system(const json_t *sys, json_t *msgs, srv_err *e)
{
    if (!sys) return true;
    pk_buf b = {0};
    bool any = false;
    if (json_is_string(sys)) {
        put_system_text(&b, &any, sys);
    } else if (json_is_array(sys)) {
        for (size_t k = 0; k < json_array_size(sys); k++) {
            const json_t *blk = json_array_get(sys, k), *text = json_object_get(blk, "text");
            const char *type = json_string_value(json_object_get(blk, "type"));
            if (!type || strcmp(type, "text") || !json_is_string(text)) {
                pk_buf_free(&b);
                return srv_fail(e, 400, "system", "system[%zu] must be {\"type\": \"text\", \"text\": string}", k);
            }
            put_system_text(&b, &any, text);
        }
    } else {
        return srv_fail(e, 400, "system", "'system' must be a string or an array of text blocks");
    }
    bool ok = b.oom ? srv_fail(e, 500, NULL, "out of memory")
                    : !b.n || append(msgs, json_pack("{s:s, s:o}", "role", "system", "content", buf_string(&b)), e);
    pk_buf_free(&b);
    return ok;
}

/* A tool_result block as the tool message it is. */
static bool tool_result(const json_t *blk, const char *at, json_t *tools_out, srv_err *e)
{
    const json_t *id = json_object_get(blk, "tool_use_id"), *c = srv_field(blk, "content");
    bool is_error = false;             /* accepted; templates have no place for it */
    if (!json_is_string(id)) return srv_fail(e, 400, "messages", "%s: a tool_result needs a string 'tool_use_id'", at);
    if (!srv_get_bool(blk, "is_error", &is_error, e)) return false;
    if (c && !json_is_string(c) && !json_is_array(c))
        return srv_fail(e, 400, "messages", "%s.content must be a string or an array of blocks", at);
    pk_buf b = {0};
    bool any = false;
    if (json_is_string(c)) put_text(&b, &any, c);
    for (size_t k = 0; json_is_array(c) && k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k), *text = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        char where[96];
        snprintf(where, sizeof where, "%s.content[%zu]", at, k);
        if (type && !strcmp(type, "image")) {
            pk_buf_free(&b);
            return no_vision(e, where);
        }
        if (!type || strcmp(type, "text") || !json_is_string(text)) {
            pk_buf_free(&b);
            return srv_fail(e, 400, "messages", "%s: a tool_result holds text and image blocks", where);
        }
        put_text(&b, &any, text);
    }
    bool ok = b.oom ? srv_fail(e, 500, NULL, "out of memory")
                    : append(tools_out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content",
                                                  buf_string(&b)), e);
    pk_buf_free(&b);
    return ok;
}

/* A tool_use block as an OpenAI tool call. */
static bool tool_use(const json_t *blk, const char *at, json_t *calls, srv_err *e)
{
    const json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
    const json_t *input = srv_field(blk, "input");
    if (!json_is_string(id) || !json_is_string(name) || (input && !json_is_object(input)))
        return srv_fail(e, 400, "messages", "%s: a tool_use needs a string 'id' and 'name' and an object 'input'",
                        at);
    char *args = input ? json_dumps(input, JSON_COMPACT) : strdup("{}");
    json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name",
                                    name, "arguments", args) : NULL;
    free(args);
    return append(calls, call, e);
}

/* The blocks of one message: its text, thinking and calls, and the tool
 * messages its tool_results become. */
typedef struct msg_parts {
    pk_buf text, reason;
    bool has_text, has_reason;
    json_t *calls, *results;
} msg_parts;

static bool convert_block(const json_t *blk, const char *at, bool assistant, msg_parts *p, srv_err *e)
{
    const char *type = json_string_value(json_object_get(blk, "type"));
    if (!type) return srv_fail(e, 400, "messages", "%s must be an object with a string 'type'", at);
    if (!strcmp(type, "text")) {
        const json_t *text = json_object_get(blk, "text");
        if (!json_is_string(text)) return srv_fail(e, 400, "messages", "%s: a text block needs a string 'text'", at);
        put_text(&p->text, &p->has_text, text);
        return true;
    }
    if (!strcmp(type, "image")) return no_vision(e, at);
    if (assistant && !strcmp(type, "thinking")) {
        const json_t *t = json_object_get(blk, "thinking");
        if (!json_is_string(t))
            return srv_fail(e, 400, "messages", "%s: a thinking block needs a string 'thinking'", at);
        put_text(&p->reason, &p->has_reason, t);
        return true;
    }
    if (assistant && !strcmp(type, "redacted_thinking")) return true;
    if (assistant && !strcmp(type, "tool_use")) return tool_use(blk, at, p->calls, e);
    if (!assistant && !strcmp(type, "tool_result")) return tool_result(blk, at, p->results, e);
    return srv_fail(e, 400, "messages", "%s: a%s %s message cannot hold a '%s' block", at, assistant ? "n" : "",
                    assistant ? "assistant" : "user", type);
}

/* Messages[i] as chat messages appended to msgs. */
static bool convert_message(const json_t *m, size_t i, json_t *msgs, srv_err *e)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return srv_fail(e, 400, "messages", "messages[%zu].role must be \"user\" or \"assistant\"", i);
    bool assistant = role[0] == 'a';
    const json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) return append(msgs, json_pack("{s:s, s:O}", "role", role, "content", c), e);
    if (!json_is_array(c))
        return srv_fail(e, 400, "messages", "messages[%zu].content must be a string or an array of blocks", i);
    msg_parts p = { .calls = json_array(), .results = json_array() };
    bool ok = p.calls && p.results ? true : srv_fail(e, 500, NULL, "out of memory");
    for (size_t k = 0; ok && k < json_array_size(c); k++) {
        char at[64];
        snprintf(at, sizeof at, "messages[%zu].content[%zu]", i, k);
        ok = convert_block(json_array_get(c, k), at, assistant, &p, e);
    }
    if (ok && (p.text.oom || p.reason.oom)) ok = srv_fail(e, 500, NULL, "out of memory");
    for (size_t k = 0; ok && k < json_array_size(p.results); k++)
        ok = append(msgs, json_incref(json_array_get(p.results, k)), e);
    if (ok && (p.has_text || p.has_reason || json_array_size(p.calls))) {
        json_t *nm = json_pack("{s:s, s:o}", "role", role, "content", buf_string(&p.text));
        if (nm && json_array_size(p.calls)) json_object_set(nm, "tool_calls", p.calls);
        if (nm && p.has_reason) json_object_set_new(nm, "reasoning_content", buf_string(&p.reason));
        ok = append(msgs, nm, e);
    }
    pk_buf_free(&p.text);
    pk_buf_free(&p.reason);
    json_decref(p.calls);
    json_decref(p.results);
    return ok;
}

static bool convert_messages(const json_t *body, json_t *chat, srv_err *e)
{
    const json_t *msgs = srv_field(body, "messages");
    if (!msgs) return srv_fail(e, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs)) return srv_fail(e, 400, "messages", "'messages' must be an array");
    json_t *out = json_array();
    if (!out) return srv_fail(e, 500, NULL, "out of memory");
    bool ok = convert_system(srv_field(body, "system"), out, e);
    for (size_t i = 0; ok && i < json_array_size(msgs); i++) ok = convert_message(json_array_get(msgs, i), i, out, e);
    /* Nothing to answer but a system prompt, or not even that: an empty turn. */
    bool has_turn = false;
    for (size_t i = 0; ok && i < json_array_size(out); i++)
        has_turn |= strcmp(json_string_value(json_object_get(json_array_get(out, i), "role")), "system") != 0;
    if (ok && !has_turn) ok = append(out, json_pack("{s:s, s:s}", "role", "user", "content", ""), e);
    if (ok && json_object_set_new(chat, "messages", out)) return srv_fail(e, 500, NULL, "out of memory");
    if (!ok) json_decref(out);
    return ok;
}

static bool convert_tools(const json_t *tools, json_t *chat, srv_err *e)
{
    if (!tools) return true;
    if (!json_is_array(tools)) return srv_fail(e, 400, "tools", "'tools' must be an array");
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *name = json_object_get(t, "name");
        const json_t *desc = srv_field(t, "description"), *schema = srv_field(t, "input_schema");
        const char *type = json_string_value(srv_field(t, "type"));
        bool bad = type && strcmp(type, "custom");
        if (bad || !json_is_string(name) || (desc && !json_is_string(desc)) || (schema && !json_is_object(schema))) {
            json_decref(out);
            if (bad) return srv_fail(e, 400, "tools", "tools[%zu]: '%s' is one of Anthropic's server tools, which "
                                     "polykv does not run; give {name, description, input_schema}", i, type);
            return srv_fail(e, 400, "tools", "tools[%zu] must be {\"name\": string, \"description\": string, "
                            "\"input_schema\": object}", i);
        }
        json_t *fn = json_pack("{s:O, s:o}", "name", name, "parameters",
                               schema ? json_incref((json_t *)schema) : json_pack("{s:s}", "type", "object"));
        if (fn && desc) json_object_set(fn, "description", (json_t *)desc);
        if (json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn))) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!out || json_object_set_new(chat, "tools", out)) return srv_fail(e, 500, NULL, "out of memory");
    return true;
}

static bool convert_tool_choice(const json_t *tc, json_t *chat, srv_err *e)
{
    if (!tc) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    const json_t *name = json_object_get(tc, "name");
    json_t *v = NULL;
    if (type && !strcmp(type, "auto")) v = json_string("auto");
    else if (type && !strcmp(type, "any")) v = json_string("required");
    else if (type && !strcmp(type, "none")) v = json_string("none");
    else if (type && !strcmp(type, "tool") && json_is_string(name))
        v = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    else
        return srv_fail(e, 400, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                        "{\"type\": \"tool\", \"name\": string}");
    if (json_object_set_new(chat, "tool_choice", v)) return srv_fail(e, 500, NULL, "out of memory");
    return true;
}

static bool convert_stop(const json_t *ss, json_t *chat, srv_err *e)
{
    if (!ss) return true;
    if (!json_is_array(ss) || json_array_size(ss) > ENG_MAX_STOP - 1)
        return srv_fail(e, 400, "stop_sequences", "'stop_sequences' must be an array of at most %d strings",
                        ENG_MAX_STOP - 1);
    for (size_t i = 0; i < json_array_size(ss); i++)
        if (!json_is_string(json_array_get(ss, i)))
            return srv_fail(e, 400, "stop_sequences", "stop_sequences[%zu] must be a string", i);
    if (json_object_set(chat, "stop", (json_t *)ss)) return srv_fail(e, 500, NULL, "out of memory");
    return true;
}

/* thinking {type: enabled, budget_tokens} | {type: disabled}.  Enabled is
 * the templates' default; disabled tells the template, unless the request's
 * chat_template_kwargs already says. */
static bool convert_thinking(const json_t *th, json_t *chat, srv_err *e)
{
    if (!th) return true;
    const char *type = json_string_value(json_object_get(th, "type"));
    const json_t *budget = srv_field(th, "budget_tokens");
    if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        return srv_fail(e, 400, "thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": n} or "
                        "{\"type\": \"disabled\"}");
    if (budget && (!json_is_integer(budget) || json_integer_value(budget) < 0))
        return srv_fail(e, 400, "thinking", "thinking.budget_tokens must be a non-negative integer");
    if (!strcmp(type, "enabled")) return true;
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (!kw) {
        kw = json_object();
        if (json_object_set_new(chat, "chat_template_kwargs", kw)) return srv_fail(e, 500, NULL, "out of memory");
    }
    if (json_is_object(kw) && !json_object_get(kw, "enable_thinking") &&
        json_object_set_new(kw, "enable_thinking", json_false()))
        return srv_fail(e, 500, NULL, "out of memory");
    return true;
}

bool srv_anth_to_chat(const json_t *body, json_t **out, srv_err *e)
{
    *out = NULL;
    const json_t *meta = srv_field(body, "metadata");
    if (meta && !json_is_object(meta)) return srv_fail(e, 400, "metadata", "'metadata' must be an object");
    json_t *chat = json_object();
    if (!chat) return srv_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < ARRAY_LEN(same_fields); i++) {
        json_t *v = json_object_get(body, same_fields[i]);
        /* A copy: thinking may add to chat_template_kwargs. */
        if (v && json_object_set_new(chat, same_fields[i], json_deep_copy(v))) {
            json_decref(chat);
            return srv_fail(e, 500, NULL, "out of memory");
        }
    }
    bool ok = convert_messages(body, chat, e) && convert_tools(srv_field(body, "tools"), chat, e) &&
              convert_tool_choice(srv_field(body, "tool_choice"), chat, e) &&
              convert_stop(srv_field(body, "stop_sequences"), chat, e) &&
              convert_thinking(srv_field(body, "thinking"), chat, e);
    if (!ok) {
        json_decref(chat);
        return false;
    }
    *out = chat;
    return true;
}

/* ---- handlers ---- */

enum MHD_Result srv_h_anth_messages(srv_req *r, json_t *body)
{
    srv_err e;
    json_t *chat;
    eng_completion c;
    srv_gen_opts o;
    int32_t *ids, n;
    if (!srv_anth_to_chat(body, &chat, &e)) return srv_reply_error(r, &e);
    bool ok = srv_chat_tokens(r->s, chat, SRV_API_ANTHROPIC, &c, &o, &ids, &n, &e);
    /* Nothing of the answer points into chat: stop strings are copied into
     * the task, and Messages answers borrow no request field. */
    enum MHD_Result ret = ok ? srv_gen_run_ids(r, &c, &o, ids, n) : srv_reply_error(r, &e);
    json_decref(chat);
    return ret;
}

/* The prompt's tokens exactly as /v1/messages would submit them. */
enum MHD_Result srv_h_anth_count_tokens(srv_req *r, json_t *body)
{
    srv_err e;
    json_t *chat;
    eng_completion c;
    srv_gen_opts o;
    int32_t *ids, n;
    if (!srv_anth_to_chat(body, &chat, &e)) return srv_reply_error(r, &e);
    bool ok = srv_chat_tokens(r->s, chat, SRV_API_ANTHROPIC, &c, &o, &ids, &n, &e);
    json_decref(chat);
    if (!ok) return srv_reply_error(r, &e);
    free(ids);
    srv_gen_req_free(&c);
    return srv_reply_json(r, 200, json_pack("{s:i}", "input_tokens", n));
}
