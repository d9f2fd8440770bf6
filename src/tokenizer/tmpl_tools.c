/*
 * tmpl_tools.c - Qwen2.5 and Llama 3.1 prompts with tools (see tmpl_tools.h).
 *
 * Each renderer walks the messages once, in the order the Jinja template
 * does, appending to a growing buffer; the texts between the pieces are
 * the templates' own literals.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl_tools.h"
#include "../common/buf.h"

static bool ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static void put_trimmed(pk_buf *o, const char *s)
{
    size_t a = 0, b = strlen(s);
    while (a < b && ws(s[a])) a++;
    while (b > a && ws(s[b - 1])) b--;
    pk_buf_put(o, s + a, b - a);
}

/* Jinja's tojson: json.dumps with default separators, or indent. */
static void put_json(pk_buf *o, const json_t *v, int indent)
{
    size_t flags = JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | (indent ? JSON_INDENT(indent) : JSON_INDENT(0));
    char *s = json_dumps(v, flags);
    if (!s) {
        o->oom = true;
        return;
    }
    pk_buf_puts(o, s);
    free(s);
}

/* A call's arguments as the templates print them: a string holding a
 * JSON object is printed as the object. */
static void put_args(pk_buf *o, const json_t *args)
{
    if (!args) {
        pk_buf_puts(o, "{}");
        return;
    }
    if (json_is_string(args)) {
        json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        if (obj && json_is_object(obj)) {
            put_json(o, obj, 0);
            json_decref(obj);
            return;
        }
        json_decref(obj);
    }
    put_json(o, args, 0);
}

static void fail(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || !err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static const char *role_of(const json_t *m) { return json_string_value(json_object_get(m, "role")); }

/* Content as text; NULL content reads as empty. */
static const char *content_of(const json_t *m)
{
    const char *s = json_string_value(json_object_get(m, "content"));
    return s ? s : "";
}

static const json_t *calls_of(const json_t *m)
{
    const json_t *c = json_object_get(m, "tool_calls");
    return json_is_array(c) && json_array_size(c) > 0 ? c : NULL;
}

/* The function object of one call ({"function": {...}} or the bare one). */
static const json_t *call_fn(const json_t *call)
{
    const json_t *f = json_object_get(call, "function");
    return json_is_object(f) ? f : call;
}

static bool check_messages(const json_t *messages, char *err, size_t err_len)
{
    static const char *roles[] = { "system", "user", "assistant", "tool", "ipython" };
    if (!json_is_array(messages)) {
        fail(err, err_len, "messages must be an array");
        return false;
    }
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        const char *role = json_is_object(m) ? role_of(m) : NULL;
        bool known = false;
        for (size_t r = 0; role && r < ARRAY_LEN(roles); r++) known |= !strcmp(role, roles[r]);
        if (!known) {
            fail(err, err_len, "messages[%zu]: unknown or missing role", i);
            return false;
        }
        const json_t *c = json_object_get(m, "content");
        if (c && !json_is_string(c) && !json_is_null(c)) {
            fail(err, err_len, "messages[%zu].content must be a string or null", i);
            return false;
        }
        const json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_array(calls) && !json_is_null(calls)) {
            fail(err, err_len, "messages[%zu].tool_calls must be an array", i);
            return false;
        }
        for (size_t k = 0; json_is_array(calls) && k < json_array_size(calls); k++) {
            const json_t *f = call_fn(json_array_get(calls, k));
            if (!json_is_object(f) || !json_is_string(json_object_get(f, "name"))) {
                fail(err, err_len, "messages[%zu].tool_calls[%zu] needs a function name", i, k);
                return false;
            }
        }
    }
    return true;
}

static const char QWEN_DEFAULT_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static void render_qwen(pk_buf *o, const json_t *msgs, const json_t *tools, bool add_assistant)
{
    size_t n = json_array_size(msgs);
    const json_t *first = n ? json_array_get(msgs, 0) : NULL;
    bool first_system = first && !strcmp(role_of(first), "system");
    bool have_tools = tools && json_array_size(tools) > 0;
    if (have_tools) {
        pk_buf_puts(o, "<|im_start|>system\n");
        pk_buf_puts(o, first_system ? content_of(first) : QWEN_DEFAULT_SYSTEM);
        pk_buf_puts(o, "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            pk_buf_puts(o, "\n");
            put_json(o, json_array_get(tools, i), 0);
        }
        pk_buf_puts(o, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                 "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                 "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else {
        pk_buf_puts(o, "<|im_start|>system\n");
        pk_buf_puts(o, first_system ? content_of(first) : QWEN_DEFAULT_SYSTEM);
        pk_buf_puts(o, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = role_of(m);
        const json_t *calls = calls_of(m);
        bool is_tool = !strcmp(role, "tool") || !strcmp(role, "ipython");
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0) ||
            (!strcmp(role, "assistant") && !calls)) {
            pk_buf_puts(o, "<|im_start|>");
            pk_buf_puts(o, role);
            pk_buf_puts(o, "\n");
            pk_buf_puts(o, content_of(m));
            pk_buf_puts(o, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            pk_buf_puts(o, "<|im_start|>assistant");
            if (*content_of(m)) {
                pk_buf_puts(o, "\n");
                pk_buf_puts(o, content_of(m));
            }
            for (size_t k = 0; k < json_array_size(calls); k++) {
                const json_t *f = call_fn(json_array_get(calls, k));
                pk_buf_puts(o, "\n<tool_call>\n{\"name\": \"");
                pk_buf_puts(o, json_string_value(json_object_get(f, "name")));
                pk_buf_puts(o, "\", \"arguments\": ");
                put_args(o, json_object_get(f, "arguments"));
                pk_buf_puts(o, "}\n</tool_call>");
            }
            pk_buf_puts(o, "<|im_end|>\n");
        } else if (is_tool) {
            const char *prev = i > 0 ? role_of(json_array_get(msgs, i - 1)) : NULL;
            const char *next = i + 1 < n ? role_of(json_array_get(msgs, i + 1)) : NULL;
            if (!prev || strcmp(prev, role)) pk_buf_puts(o, "<|im_start|>user");
            pk_buf_puts(o, "\n<tool_response>\n");
            pk_buf_puts(o, content_of(m));
            pk_buf_puts(o, "\n</tool_response>");
            if (!next || strcmp(next, role)) pk_buf_puts(o, "<|im_end|>\n");
        }
    }
    if (add_assistant) pk_buf_puts(o, "<|im_start|>assistant\n");
}

static bool render_llama31(pk_buf *o, const json_t *msgs, const json_t *tools, bool add_assistant,
                           char *err, size_t err_len)
{
    size_t n = json_array_size(msgs), i = 0;
    bool have_tools = tools && json_array_size(tools) > 0;
    const char *system = "";
    if (n && !strcmp(role_of(json_array_get(msgs, 0)), "system")) system = content_of(json_array_get(msgs, i++));

    pk_buf_puts(o, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (have_tools) pk_buf_puts(o, "Environment: ipython\n");
    pk_buf_puts(o, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    put_trimmed(o, system);
    pk_buf_puts(o, "<|eot_id|>");

    if (have_tools) {
        if (i == n) {
            fail(err, err_len, "tools need a first user message to go into");
            return false;
        }
        pk_buf_puts(o, "<|start_header_id|>user<|end_header_id|>\n\n");
        pk_buf_puts(o, "Given the following functions, please respond with a JSON for a function call "
                 "with its proper arguments that best answers the given prompt.\n\n"
                 "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
                 "name and its value}.Do not use variables.\n\n");
        for (size_t t = 0; t < json_array_size(tools); t++) {
            put_json(o, json_array_get(tools, t), 4);
            pk_buf_puts(o, "\n\n");
        }
        put_trimmed(o, content_of(json_array_get(msgs, i++)));
        pk_buf_puts(o, "<|eot_id|>");
    }

    for (; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = role_of(m);
        const json_t *calls = calls_of(m);
        bool has_calls = calls != NULL;
        if (!strcmp(role, "tool") || !strcmp(role, "ipython")) {
            pk_buf_puts(o, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            /* The template's `is iterable` holds for strings too, so a
             * string result is written JSON-encoded. */
            const json_t *c = json_object_get(m, "content");
            if (c && !json_is_null(c)) put_json(o, c, 0);
            else pk_buf_puts(o, "\"\"");
            pk_buf_puts(o, "<|eot_id|>");
        } else if (has_calls) {
            if (json_array_size(calls) != 1) {
                fail(err, err_len, "messages[%zu]: this model only supports one tool call per message", i);
                return false;
            }
            const json_t *f = call_fn(json_array_get(calls, 0));
            pk_buf_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            pk_buf_puts(o, json_string_value(json_object_get(f, "name")));
            pk_buf_puts(o, "\", \"parameters\": ");
            put_args(o, json_object_get(f, "arguments"));
            pk_buf_puts(o, "}<|eot_id|>");
        } else {
            pk_buf_puts(o, "<|start_header_id|>");
            pk_buf_puts(o, role);
            pk_buf_puts(o, "<|end_header_id|>\n\n");
            put_trimmed(o, content_of(m));
            pk_buf_puts(o, "<|eot_id|>");
        }
    }
    if (add_assistant) pk_buf_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return true;
}

pk_status tmpl_tools_render(tmpl_kind k, const json_t *messages, const json_t *tools, bool add_assistant,
                            char **out, size_t *n_out, char *err, size_t err_len)
{
    *out = NULL;
    *n_out = 0;
    if (k != TMPL_CHATML && k != TMPL_LLAMA3) {
        fail(err, err_len, "the %s chat template has no tool-call format", tmpl_name(k));
        return PK_EUNSUPPORTED;
    }
    if (!check_messages(messages, err, err_len)) return PK_EINVAL;
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        fail(err, err_len, "tools must be an array");
        return PK_EINVAL;
    }
    if (tools && !json_is_array(tools)) tools = NULL;
    pk_buf o = {0};
    pk_buf_put(&o, "", 0);
    bool ok = true;
    if (k == TMPL_CHATML) render_qwen(&o, messages, tools, add_assistant);
    else ok = render_llama31(&o, messages, tools, add_assistant, err, err_len);
    if (!ok || o.oom) {
        free(o.p);
        return ok ? PK_ENOMEM : PK_EINVAL;
    }
    *out = o.p;
    *n_out = o.n;
    return PK_OK;
}
