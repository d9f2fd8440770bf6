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
 * objects (`arguments | tojson`: Llama 3.1, DeepSeek, gpt-oss) gets the
 * arguments OpenAI clients send as strings parsed into objects; a probe at
 * start finds out which templates those are, as llama.cpp's does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_impl.h"

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
    bool r = as_obj && strstr(as_obj, "\"probe_arg\": \"v1\"") &&
             (!as_str || !strstr(as_str, "{\"probe_arg\": \"v1\"}") || strstr(as_str, "\"{\\\"probe_arg"));
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

pk_status srv_chat_init(srv *s, const tok_vocab *v, tmpl_kind *k, const char **src, char *err, size_t err_len)
{
    const char *path = s->p.chat_template_file;
    const char *text = tok_chat_template(v);
    if (path) {
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

static bool is_role(const json_t *m, const char *role)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

/* llama-server takes a conversation that ends with an assistant turn for
 * that turn to continue, and refuses two of them at the end: which one
 * would it continue? */
static bool two_assistants_at_end(const json_t *msgs)
{
    size_t n = json_array_size(msgs);
    return n >= 2 && is_role(json_array_get(msgs, n - 1), "assistant") &&
           is_role(json_array_get(msgs, n - 2), "assistant");
}

bool srv_chat_prompt(const srv *s, const json_t *body, char **prompt, size_t *n_prompt, srv_tool_fmt *tools_fmt,
                     srv_err *e)
{
    if (two_assistants_at_end(json_object_get(body, "messages")))
        return srv_fail(e, 400, "messages", "the conversation ends with two assistant turns; only one "
                        "final assistant turn can be continued");
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
    json_t *msgs = s->jj.object_arguments ? object_arguments(json_object_get(body, "messages")) : NULL;
    if (!msgs) msgs = json_incref(json_object_get(body, "messages"));
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
    if (tools) *tools_fmt = s->tmpl == TMPL_LLAMA3 ? SRV_TOOL_LLAMA3 : SRV_TOOL_QWEN;
    return true;
}
