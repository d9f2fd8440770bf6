/*
 * srv_tools.c - finding tool calls in generated text (see srv_tools.h).
 *
 * Both formats reduce to: scan for where a call may start, try to read one
 * JSON object there with jansson (which reports how many bytes it used),
 * check that it names a function, and keep everything else as content.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "srv_tools.h"
#include "../common/buf.h"

static const char QWEN_OPEN[] = "<tool_call>";
static const char QWEN_CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>";

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* First occurrence of needle in s[from..n), or n. */
static size_t find(const char *s, size_t from, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = from; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) return i;
    return n;
}

static bool starts(const char *s, size_t i, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return i + k <= n && !memcmp(s + i, prefix, k);
}

/* Length of the longest proper prefix of tag that s[0..n) ends with. */
static size_t partial_suffix(const char *s, size_t n, const char *tag)
{
    size_t k = strlen(tag);
    for (size_t m = MIN(k - 1, n); m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

/* The arguments value as compact JSON text: objects as they are, a string
 * holding a JSON object unwrapped.  NULL when neither (or out of memory). */
static char *args_text(json_t *v, bool require_object)
{
    json_t *parsed = NULL;
    if (json_is_string(v)) {
        parsed = json_loadb(json_string_value(v), json_string_length(v), 0, NULL);
        if (parsed && json_is_object(parsed)) v = parsed;
        else if (require_object) v = NULL;
        else {
            json_decref(parsed);
            parsed = NULL;
            return strdup(json_string_value(v));
        }
    }
    char *s = v && json_is_object(v) ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(parsed);
    return s;
}

/*
 * Reads one call object at s[i..n).  On success fills *call (owned strings)
 * and *used (bytes of the object).  Qwen's calls carry "arguments" (absent
 * means none); Llama's "parameters", also accepted the other way round.
 */
static bool read_call(const char *s, size_t i, size_t n, bool strict, srv_tool_call *call, size_t *used)
{
    json_error_t err;
    if (i >= n || s[i] != '{') return false;
    json_t *o = json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK, &err);
    if (!o) return false;
    bool ok = false;
    json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (json_is_string(name) && json_string_length(name) > 0 && (args || !strict)) {
        call->arguments = args ? args_text(args, strict) : strdup("{}");
        call->name = strdup(json_string_value(name));
        ok = call->arguments && call->name;
        if (!ok) {
            free(call->arguments);
            free(call->name);
            call->arguments = call->name = NULL;
        }
    }
    json_decref(o);
    *used = (size_t)err.position;
    return ok;
}

static bool add_call(srv_tool_msg *m, srv_tool_call c)
{
    srv_tool_call *p = realloc(m->calls, ((size_t)m->n_calls + 1) * sizeof *p);
    if (!p) return false;
    m->calls = p;
    m->calls[m->n_calls++] = c;
    return true;
}

static void parse_qwen(const char *s, size_t n, srv_tool_msg *m, pk_buf *content)
{
    size_t pos = 0;
    while (pos < n) {
        size_t t = find(s, pos, n, QWEN_OPEN);
        pk_buf_put(content, s + pos, t - pos);
        if (t == n) break;
        size_t q = skip_ws(s, t + sizeof QWEN_OPEN - 1, n), used = 0;
        srv_tool_call c = {0};
        if (read_call(s, q, n, false, &c, &used)) {
            size_t r = skip_ws(s, q + used, n);
            /* A call cut off by the token limit right after its JSON still
             * counts: the object itself is complete. */
            if (starts(s, r, n, QWEN_CLOSE) || r == n) {
                if (!add_call(m, c)) {
                    content->oom = true;
                    free(c.name);
                    free(c.arguments);
                    return;
                }
                pos = r == n ? n : r + sizeof QWEN_CLOSE - 1;
                continue;
            }
            free(c.name);
            free(c.arguments);
        }
        pk_buf_put(content, s + t, sizeof QWEN_OPEN - 1);
        pos = t + sizeof QWEN_OPEN - 1;
    }
}

/* A '{' where a Llama call may begin: {"name" or {"type" after spaces. */
static bool llama_candidate(const char *s, size_t i, size_t n)
{
    size_t j = skip_ws(s, i + 1, n);
    return starts(s, j, n, "\"name\"") || starts(s, j, n, "\"type\"");
}

static void parse_llama3(const char *s, size_t n, srv_tool_msg *m, pk_buf *content)
{
    size_t pos = 0;
    while (pos < n) {
        size_t b = pos;
        while (b < n && !(s[b] == '{' && llama_candidate(s, b, n))) b++;
        if (b == n) {
            pk_buf_put(content, s + pos, n - pos);
            break;
        }
        size_t used = 0;
        srv_tool_call c = {0};
        if (!read_call(s, b, n, true, &c, &used)) {
            pk_buf_put(content, s + pos, b + 1 - pos);
            pos = b + 1;
            continue;
        }
        /* The python tag (and the spaces around it) belongs to the call. */
        size_t pre = b;
        while (pre > pos && is_ws(s[pre - 1])) pre--;
        size_t k = sizeof PY_TAG - 1;
        if (pre - pos >= k && !memcmp(s + pre - k, PY_TAG, k)) pre -= k;
        pk_buf_put(content, s + pos, pre - pos);
        if (!add_call(m, c)) {
            content->oom = true;
            free(c.name);
            free(c.arguments);
            return;
        }
        pos = b + used;
        /* Parallel calls come separated by ';' or new lines. */
        size_t r = pos;
        while (r < n && (is_ws(s[r]) || s[r] == ';')) r++;
        if (r < n && s[r] == '{' && llama_candidate(s, r, n)) pos = r;
    }
}

pk_status srv_tools_parse(srv_tool_fmt f, const char *text, size_t len, srv_tool_msg *out)
{
    memset(out, 0, sizeof *out);
    pk_buf content = {0};
    pk_buf_put(&content, "", 0);
    if (f == SRV_TOOL_QWEN) parse_qwen(text, len, out, &content);
    else if (f == SRV_TOOL_LLAMA3) parse_llama3(text, len, out, &content);
    else pk_buf_put(&content, text, len);
    if (content.oom) {
        free(content.p);
        srv_tool_msg_free(out);
        return PK_ENOMEM;
    }
    if (out->n_calls == 0 && content.n != len) {
        /* Nothing parsed as a call: the text goes back verbatim. */
        content.n = 0;
        pk_buf_put(&content, text, len);
    }
    if (out->n_calls > 0)
        while (content.n > 0 && is_ws(content.p[content.n - 1])) content.p[--content.n] = 0;
    if (content.oom) {
        free(content.p);
        srv_tool_msg_free(out);
        return PK_ENOMEM;
    }
    out->content = content.p;
    out->content_len = content.n;
    return PK_OK;
}

void srv_tool_msg_free(srv_tool_msg *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_calls; i++) {
        free(m->calls[i].name);
        free(m->calls[i].arguments);
    }
    free(m->calls);
    free(m->content);
    memset(m, 0, sizeof *m);
}

size_t srv_tools_content_prefix(srv_tool_fmt f, const char *text, size_t len)
{
    size_t k = len;
    if (f == SRV_TOOL_QWEN) {
        k = find(text, 0, len, QWEN_OPEN);
        if (k == len) k = len - partial_suffix(text, len, QWEN_OPEN);
    } else if (f == SRV_TOOL_LLAMA3) {
        size_t b = 0;
        while (b < len && text[b] != '{') b++;
        k = MIN(b, find(text, 0, len, PY_TAG));
        if (k == len) k = len - partial_suffix(text, len, PY_TAG);
    } else {
        return len;
    }
    /* White space before a call is dropped from the content, so it waits. */
    while (k > 0 && is_ws(text[k - 1])) k--;
    return k;
}
