/*
 * srv_chat.c - the chat template a server renders prompts with: the model's
 * Jinja `tokenizer.chat_template` (or --chat-template-file) through the
 * Jinja engine (src/jinja, docs/chat-templates.md), else the built-in
 * layouts (--no-jinja, or a model template that does not compile).
 *
 * A Jinja render gets the variables transformers' apply_chat_template
 * passes: messages and tools as the request sent them (tools null when
 * there are none or tool_choice is "none"), add_generation_prompt, bos_token
 * and eos_token from the vocabulary, documents null, and the members of the
 * request's chat_template_kwargs (enable_thinking, ...).
 *
 * A template of one of the four built-in families (ChatML, Llama 3, ...)
 * that never reads `tools` cannot show a request's tools or tool turns; such
 * a request gets the family's built-in tool layout (tmpl_tools.c).  Any
 * other template renders as it is, tools or not, as llama-server does.
 *
 * Like llama-server, and unlike transformers, the variables also hold
 * date_string (today, "01 Dec 2026"), which Llama 3.x templates print,
 * datetime ("Dec 01 2026", firefunction's), and
 * enable_thinking is true unless chat_template_kwargs says otherwise (a
 * DeepSeek-R1 template closes its <think> block when it is not).  And a
 * template that prints tool-call arguments only right when they are JSON
 * objects (`arguments | tojson`: Llama 3.1, DeepSeek, gpt-oss), or lays
 * an object's members out in a layout of its own (Qwen3.5, Gemma 4), gets
 * the arguments OpenAI clients send as strings parsed into objects; a
 * probe at start finds out which templates those are, as llama.cpp's does.
 *
 * gpt-oss's harmony template (its source holds "<|channel|>") reads a turn's
 * analysis from `thinking`: an assistant turn's string reasoning_content is
 * copied there, and a turn that also has tool calls loses its content
 * (which the template would print as the analysis), as llama-server does.
 * Rendered without the generation prompt, the last <|return|> becomes
 * <|end|>: a finished turn in the prompt is closed as in inference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_parse.h"

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    pk_buf b = { 0 };
    char chunk[65536];
    for (size_t k; (k = fread(chunk, 1, sizeof chunk, f)) > 0;) pk_buf_put(&b, chunk, k);
    bool bad = ferror(f) || b.oom;
    fclose(f);
    pk_buf_put(&b, "", 0);
    if (bad || b.oom) { pk_buf_free(&b); return NULL; }
    return b.p ? b.p : strdup("");
}

static char *token_text(const tok_vocab *v, int32_t id)
{
    size_t n = 0;
    const char *t = id >= 0 ? tok_text(v, id, &n) : NULL;
    return t ? strndup(t, n) : strdup("");
}

/* The probe's text of one tool call, its arguments a string or an object. */
static char *probe_render(const jj_tmpl *t, bool as_object)
{
    json_t *ctx = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:o}}]},{s:s,s:s,s:s,s:s}],"
                            "s:[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}}}}}],s:b,s:s,s:s}",
        "messages", "role", "user", "content", "x",
        "role", "assistant", "content", "", "tool_calls", "id", "call00001", "type", "function", "function",
        "name", "probe_fn", "arguments",
        as_object ? json_pack("{s:s}", "probe_arg", "v1") : json_string("{\"probe_arg\": \"v1\"}"),
        "role", "tool", "tool_call_id", "call00001", "name", "probe_fn", "content", "ok",
        "tools", "type", "function", "function", "name", "probe_fn", "description", "A probe.",
        "parameters", "type", "object", "properties", "probe_arg", "type", "string",
        "add_generation_prompt", 0, "bos_token", "", "eos_token", "");
    char *out = NULL, err[64];
    size_t n;
    if (!ctx || jj_render(t, ctx, NULL, &out, &n, err, sizeof err)) out = NULL;
    json_decref(ctx);
    return out;
}

static bool wants_object_arguments(const jj_tmpl *t)
{
    char *as_str = probe_render(t, false), *as_obj = probe_render(t, true);
    bool printed = as_obj && strstr(as_obj, "\"probe_arg\": \"v1\"") &&
                   (!as_str || !strstr(as_str, "{\"probe_arg\": \"v1\"}") || strstr(as_str, "\"{\\\"probe_arg"));
    /* Templates that iterate the arguments (Qwen3.5's and Qwen3-Coder's
     * `arguments|items`) fail on a string and print the member in their
     * own layout (<parameter=probe_arg>\nv1). */
    bool walked = as_obj && !as_str && strstr(as_obj, "probe_arg") && strstr(as_obj, "v1");
    /* Templates that lay an object's values out their own way and print a
     * string as it is (Gemma 4's `probe_arg:<|"|>v1<|"|>`, beside the
     * string's JSON verbatim): the object's layout is what the model
     * writes and was taught, as llama.cpp finds from the members used. */
    bool laid_out = as_obj && strstr(as_obj, "v1") && !strstr(as_obj, "\"v1\"") && !strstr(as_obj, "'v1'");
    bool r = printed || walked || laid_out;
    free(as_str);
    free(as_obj);
    return r;
}

/* messages with every string `arguments` that parses as a JSON object made
 * that object (a new reference), or NULL when none needed it. */
static json_t *object_arguments(const json_t *msgs)
{
    json_t *copy = NULL;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            const json_t *f = json_object_get(json_array_get(calls, j), "function");
            json_t *args = json_is_string(json_object_get(f, "arguments"))
                           ? json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL) : NULL;
            if (!json_is_object(args)) { json_decref(args); continue; }
            if (!copy && !(copy = json_deep_copy(msgs))) { json_decref(args); return NULL; }
            json_t *cf = json_object_get(json_array_get(json_object_get(json_array_get(copy, i), "tool_calls"), j),
                                         "function");
            json_object_set_new(cf, "arguments", args);
        }
    }
    return copy;
}

/* messages (or the copy already made, which it takes) with each assistant
 * turn's reasoning_content also as `thinking`; NULL when nothing changed. */
static json_t *harmony_thinking(const json_t *msgs, json_t *copy)
{
    const json_t *src = copy ? copy : msgs;
    for (size_t i = 0; i < json_array_size(src); i++) {
        const json_t *m = json_array_get(src, i);
        const json_t *rc = json_object_get(m, "reasoning_content");
        if (!json_is_string(rc)) continue;
        if (!copy && !(copy = json_deep_copy(msgs))) return NULL;
        json_t *cm = json_array_get(copy, i);
        json_object_set(cm, "thinking", json_object_get(cm, "reasoning_content"));
        if (json_array_size(json_object_get(cm, "tool_calls"))) json_object_del(cm, "content");
        src = copy;
    }
    return copy;
}

/* The last "<|return|>" of the prompt made "<|end|>", in place (the
 * shorter text). */
static void harmony_close_return(char *p, size_t *n)
{
    static const char ret[] = "<|return|>", end[] = "<|end|>";
    size_t rl = sizeof ret - 1, el = sizeof end - 1;
    for (size_t i = *n >= rl ? *n - rl + 1 : 0; i-- > 0;)
        if (!memcmp(p + i, ret, rl)) {
            memcpy(p + i, end, el);
            memmove(p + i + el, p + i + rl, *n - i - rl);
            *n -= rl - el;
            p[*n] = 0;
            return;
        }
}

pk_status srv_chat_init(srv *s, const tok_vocab *v, tmpl_kind *k, const char **src, char *err, size_t err_len)
{
    const char *path = s->p.chat_template_file;
    const char *text = tok_chat_template(v);
    const char *inline_src = s->p.chat_template && *s->p.chat_template ? s->p.chat_template : NULL;
    if (inline_src) {
        text = inline_src;
        path = NULL;
    } else if (path) {
        if (!(s->jj.file_src = read_text(path)))
            return pk_errf(err, err_len, PK_EIO, "--chat-template-file %s: cannot read it", path);
        text = s->jj.file_src;
    }
    if (!text) return PK_OK;
    if (!s->p.jinja) {
        /* --no-jinja with a file: one of the built-in layouts, recognized */
        *k = tmpl_detect(text);
        *src = text;
        if (*k == TMPL_UNKNOWN)
            return pk_errf(err, err_len, PK_EUNSUPPORTED, "--chat-template-file %s is not one of the built-in "
                           "layouts (chatml, llama3, llama2, mistral); drop --no-jinja to render it as Jinja", path);
        return PK_OK;
    }
    char msg[256];
    pk_status st = jj_compile(text, strlen(text), &s->jj.t, msg, sizeof msg);
    if (st == PK_ENOMEM) return pk_errf(err, err_len, st, "out of memory");
    if (st && path) return pk_errf(err, err_len, PK_EFORMAT, "--chat-template-file %s: %s", path, msg);
    if (st && inline_src) return pk_errf(err, err_len, PK_EFORMAT, "--chat-template: %s", msg);
    if (st) {
        fprintf(stderr, "srv: the model's chat template does not compile as Jinja (%s); using the built-in "
                "layouts\n", msg);
        return PK_OK;
    }
    s->jj.bos = token_text(v, tok_bos(v));
    s->jj.eos = token_text(v, tok_eos(v));
    if (!s->jj.bos || !s->jj.eos) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    s->jj.object_arguments = wants_object_arguments(s->jj.t);
    *k = tmpl_detect(text);
    s->jj.knows_tools = strstr(text, "tools") != NULL || *k == TMPL_UNKNOWN;
    s->jj.harmony = strstr(text, "<|channel|>") != NULL;
    if (*k == TMPL_UNKNOWN) *k = TMPL_CHATML;
    *src = text;
    return PK_OK;
}

void srv_chat_free(srv *s)
{
    jj_free(s->jj.t);
    free(s->jj.file_src);
    free(s->jj.bos);
    free(s->jj.eos);
    memset(&s->jj, 0, sizeof s->jj);
}

static json_t *today(const char *fmt)
{
    time_t now = time(NULL);
    struct tm tm;
    char d[32];
    localtime_r(&now, &tm);
    strftime(d, sizeof d, fmt, &tm);
    return json_string(d);
}

static bool has_tool_turns(const json_t *msgs)
{
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if ((role && !strcmp(role, "tool")) || json_array_size(json_object_get(m, "tool_calls"))) return true;
    }
    return false;
}

static bool check_request(const json_t *body, bool *add_gen, const json_t **tools, srv_err *e)
{
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return srv_fail(e, 400, "messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return srv_fail(e, 400, "messages", "messages[%zu] must be an object with a string 'role'", i);
    }
    const json_t *g = json_object_get(body, "add_generation_prompt");
    if (g && !json_is_null(g) && !json_is_boolean(g))
        return srv_fail(e, 400, "add_generation_prompt", "'add_generation_prompt' must be a boolean");
    *add_gen = !g || json_is_null(g) || json_is_true(g);
    const json_t *t = json_object_get(body, "tools");
    if (t && !json_is_null(t) && !json_is_array(t)) return srv_fail(e, 400, "tools", "'tools' must be an array");
    for (size_t i = 0; t && i < json_array_size(t); i++)
        if (!json_is_object(json_array_get(t, i))) return srv_fail(e, 400, "tools", "tools[%zu] must be an object", i);
    const json_t *tc = json_object_get(body, "tool_choice");
    bool none = json_is_string(tc) && !strcmp(json_string_value(tc), "none");
    *tools = t && json_array_size(t) && !none ? t : NULL;
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return srv_fail(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    return true;
}

static bool render(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools_fmt,
                   srv_err *e)
{
    const json_t *req_tools = json_object_get(body, "tools");
    bool wants_tools = json_array_size(req_tools) || has_tool_turns(json_object_get(body, "messages"));
    if (!s->jj.t || (wants_tools && !s->jj.knows_tools))
        return srv_render_chat(body, s->tmpl, s->tmpl_src, prompt, n_prompt, tools_fmt, e);
    *prompt = NULL;
    *n_prompt = 0;
    *tools_fmt = SRV_TOOL_NONE;
    bool add_gen = true;
    const json_t *tools = NULL;
    if (!check_request(body, &add_gen, &tools, e)) return false;
    json_t *ctx = json_object();
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (ctx && json_is_object(kw)) json_object_update(ctx, (json_t *)kw);
    if (ctx && !json_object_get(ctx, "enable_thinking"))     /* --reasoning-budget 0: off, as llama-server */
        json_object_set_new(ctx, "enable_thinking", json_boolean(s->p.reasoning_budget != 0));
    const json_t *sent = json_object_get(body, "messages");
    json_t *msgs = s->jj.object_arguments ? object_arguments(sent) : NULL;
    if (s->jj.harmony) msgs = harmony_thinking(sent, msgs);
    if (!msgs) msgs = json_incref((json_t *)sent);
    if (!ctx || json_object_set_new(ctx, "messages", msgs) ||
        json_object_set_new(ctx, "tools", tools ? json_incref((json_t *)tools) : json_null()) ||
        json_object_set_new(ctx, "documents", json_null()) ||
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen)) ||
        json_object_set_new(ctx, "bos_token", json_string(s->jj.bos)) ||
        json_object_set_new(ctx, "eos_token", json_string(s->jj.eos)) ||
        json_object_set_new(ctx, "date_string", today("%d %b %Y")) ||
        json_object_set_new(ctx, "datetime", today("%b %d %Y"))) {
        json_decref(ctx);
        return srv_fail(e, 500, NULL, "out of memory");
    }
    char msg[256];
    jj_limits lim = { .max_output_bytes = s->p.max_body_bytes * 4 + (1u << 20) };
    pk_status st = jj_render(s->jj.t, ctx, &lim, prompt, n_prompt, msg, sizeof msg);
    json_decref(ctx);
    if (st == PK_ENOMEM) return srv_fail(e, 500, NULL, "out of memory");
    if (st) return srv_fail(e, 400, "messages", "chat template: %s", msg);
    if (s->jj.harmony && !add_gen) harmony_close_return(*prompt, n_prompt);
    if (tools) *tools_fmt = s->tmpl == TMPL_LLAMA3 ? SRV_TOOL_LLAMA3 : SRV_TOOL_QWEN;
    return true;
}

bool srv_chat_history(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools_fmt,
                      srv_err *e)
{
    *prompt = NULL;
    *n_prompt = 0;
    return render(s, body, prompt, n_prompt, tools_fmt, e);
}

/* ---- a final assistant message continued (the prefill) ---- */

typedef enum cont_mode { CONT_NONE = 0, CONT_CONTENT, CONT_REASONING } cont_mode;

/* The text a continued message holds: its string content, or its text
 * parts joined by a blank line (llama-server's join). */
static void part_text(const json_t *content, pk_buf *b)
{
    if (json_is_string(content)) {
        pk_buf_put(b, json_string_value(content), json_string_length(content));
        return;
    }
    bool first = true;
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i);
        const json_t *text = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_string(text) || (type && strcmp(type, "text"))) continue;
        if (!first) pk_buf_puts(b, "\n\n");
        pk_buf_put(b, json_string_value(text), json_string_length(text));
        first = false;
    }
}

static const char *role_of(const json_t *msgs, size_t i)
{
    return json_string_value(json_object_get(json_array_get(msgs, i), "role"));
}

/* What continuing m means by itself: its reasoning when that is all it
 * holds, else its content. */
static cont_mode natural_mode(const json_t *m)
{
    const json_t *c = json_object_get(m, "content");
    bool only_reasoning = json_string_length(json_object_get(m, "reasoning_content")) && !json_string_length(c) &&
                          !json_array_size(c);
    return only_reasoning ? CONT_REASONING : CONT_CONTENT;
}

/* Whether body's last message is continued rather than closed, and how:
 * continue_final_message asks for it (true, "content" or
 * "reasoning_content"); otherwise a last message from the assistant is
 * continued unless --no-prefill-assistant, or it carries tool calls (a
 * finished turn).  False with e on a contradiction. */
static bool cont_mode_of(const srv *s, const json_t *body, cont_mode *mode, srv_err *e)
{
    *mode = CONT_NONE;
    const json_t *msgs = json_object_get(body, "messages");
    size_t n = json_array_size(msgs);
    const json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = last ? role_of(msgs, n - 1) : NULL;
    bool assistant = role && !strcmp(role, "assistant");
    bool calls = json_array_size(json_object_get(last, "tool_calls")) > 0;
    const json_t *cfm = srv_field(body, "continue_final_message");
    const char *cfm_s = json_string_value(cfm);
    if (cfm && !json_is_boolean(cfm) && !(cfm_s && (!strcmp(cfm_s, "content") || !strcmp(cfm_s, "reasoning_content"))))
        return srv_fail(e, 400, "continue_final_message", "'continue_final_message' must be a boolean, "
                        "\"content\" or \"reasoning_content\"");
    if (cfm && !json_is_false(cfm)) {
        bool add_gen = false;
        if (!srv_get_bool(body, "add_generation_prompt", &add_gen, e)) return false;
        if (add_gen)
            return srv_fail(e, 400, "continue_final_message", "'add_generation_prompt' and "
                            "'continue_final_message' cannot both be true");
        if (!assistant)
            return srv_fail(e, 400, "continue_final_message", "'continue_final_message' continues the last "
                            "message, which must be the assistant's");
        if (calls)
            return srv_fail(e, 400, "continue_final_message", "an assistant message with tool calls cannot be "
                            "continued");
        *mode = !cfm_s ? natural_mode(last) : !strcmp(cfm_s, "content") ? CONT_CONTENT : CONT_REASONING;
    } else {
        if (!assistant || calls || s->p.no_prefill_assistant) return true;
        const char *before = n >= 2 ? role_of(msgs, n - 2) : NULL;
        if (before && !strcmp(before, "assistant"))
            return srv_fail(e, 400, "messages", "the messages end with two assistant messages: the last one "
                            "would be continued (prefilled) after a finished one");
        *mode = natural_mode(last);
    }
    if (n < 2) return srv_fail(e, 400, "messages", "a continued assistant message needs a message before it");
    return true;
}

/* Appends the continued message m to a prompt rendered up to the
 * assistant's generation prompt.  A prompt that opened <think> gets the
 * message's reasoning_content, then, unless the reasoning itself is
 * continued, the thinking closed and the content. */
static bool put_continuation(const json_t *m, cont_mode mode, char **prompt, size_t *n_prompt, bool *think_open)
{
    pk_buf b = { 0 };
    pk_buf_put(&b, *prompt, *n_prompt);
    bool opened = srv_reason_prompt_opens(*prompt, *n_prompt);
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (opened && json_is_string(rc)) pk_buf_put(&b, json_string_value(rc), json_string_length(rc));
    if (opened && mode == CONT_CONTENT) pk_buf_puts(&b, "\n</think>\n\n");
    if (mode == CONT_CONTENT || !opened) part_text(json_object_get(m, "content"), &b);
    if (b.oom) {
        pk_buf_free(&b);
        return false;
    }
    free(*prompt);
    *prompt = b.p;
    *n_prompt = b.n;
    if (think_open) *think_open = opened && mode == CONT_REASONING;
    return true;
}

bool srv_chat_prompt(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools_fmt,
                     bool *think_open, srv_err *e)
{
    *prompt = NULL;
    *n_prompt = 0;
    cont_mode mode;
    if (!cont_mode_of(s, body, &mode, e)) return false;
    if (!mode) {
        if (!render(s, body, prompt, n_prompt, tools_fmt, e)) return false;
        if (think_open) *think_open = srv_reason_prompt_opens(*prompt, *n_prompt);
        return true;
    }
    /* The conversation before the message, up to the assistant's turn, as
     * a request for a new answer would render it; then the message's text
     * as the start of that answer, so the model continues it. */
    const json_t *msgs = json_object_get(body, "messages");
    const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *head = json_copy((json_t *)body), *hm = json_array();
    bool oom = !head || !hm;
    for (size_t i = 0; !oom && i + 1 < json_array_size(msgs); i++)
        oom = json_array_append(hm, json_array_get(msgs, i)) != 0;
    oom = oom || json_object_set(head, "messages", hm) || json_object_set_new(head, "add_generation_prompt", json_true());
    json_decref(hm);
    if (oom) {
        json_decref(head);
        return srv_fail(e, 500, NULL, "out of memory");
    }
    json_object_del(head, "continue_final_message");
    bool ok = render(s, head, prompt, n_prompt, tools_fmt, e);
    json_decref(head);
    if (ok && !put_continuation(last, mode, prompt, n_prompt, think_open)) {
        free(*prompt);
        *prompt = NULL;
        ok = srv_fail(e, 500, NULL, "out of memory");
    }
    return ok;
}
