/*
 * srv_tools.c - finding tool calls in generated text (see srv_tools.h).
 *
 * The JSON formats reduce to: scan for where a call may start, try to read
 * one JSON object there with jansson (which reports how many bytes it
 * used), check that it names a function, and keep everything else as
 * content.  QWEN_XML has no JSON around its values: each one is typed by
 * the tool's schema and the arguments object is written here.  Nor has
 * GEMMA4: its values are read in its own syntax and written out as JSON.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "srv_tools.h"
#include "../common/buf.h"
#include "../common/utf8.h"

static const char QWEN_OPEN[] = "<tool_call>";
static const char QWEN_CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>";
static const char MI_CALLS[] = "[TOOL_CALLS]";
static const char MI_ARGS[] = "[ARGS]";
static const char MI_ID[] = "[CALL_ID]";
static const char DS_CALLS[] = "<｜tool▁calls▁begin｜>";
static const char DS_CALLS_END[] = "<｜tool▁calls▁end｜>";
static const char DS_CALL[] = "<｜tool▁call▁begin｜>";
static const char DS_CALL_END[] = "<｜tool▁call▁end｜>";
static const char DS_SEP[] = "<｜tool▁sep｜>";
/* What the two DeepSeek openings share: a stream holds back from here. */
static const char DS_ANY[] = "<｜tool▁call";
static const char X_FUNC[] = "<function=";
static const char X_FUNC_END[] = "</function>";
static const char X_PARAM[] = "<parameter=";
static const char X_PARAM_END[] = "</parameter>";
static const char H_CHANNEL[] = "<|channel|>";
static const char H_MESSAGE[] = "<|message|>";
static const char H_START[] = "<|start|>";
static const char G4_CALL[] = "<|tool_call>";
static const char G4_FN[] = "call:";
static const char G4_CALL_END[] = "<tool_call|>";
static const char G4_QUOTE[] = "<|\"|>";
#define LIT(s) (sizeof s - 1)

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

/* A call named name[0..n_name) with the JSON value at s[i..n) as its
 * arguments; *used gets the value's bytes.  False (nothing added) when no
 * JSON value starts there or out of memory (content->oom set). */
static bool add_named_call(srv_tool_msg *m, pk_buf *content, const char *name, size_t n_name, const char *s, size_t i,
                           size_t n, size_t *used)
{
    json_error_t err;
    json_t *v = i < n ? json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &err) : NULL;
    if (!v || !(json_is_object(v) || json_is_string(v)) || !n_name) {
        json_decref(v);
        return false;
    }
    *used = (size_t)err.position;
    srv_tool_call c = { strndup(name, n_name), args_text(v, false) };
    json_decref(v);
    if (!c.name || !c.arguments || !add_call(m, c)) {
        free(c.name);
        free(c.arguments);
        content->oom = true;
        return false;
    }
    return true;
}

/* Mistral: [TOOL_CALLS] then a JSON array of calls, or name[ARGS]{...}
 * (each call after its own marker). */
static void parse_mistral(const char *s, size_t n, srv_tool_msg *m, pk_buf *content)
{
    size_t t = find(s, 0, n, MI_CALLS);
    pk_buf_put(content, s, t);
    size_t pos = t;
    while (pos < n && starts(s, pos, n, MI_CALLS)) {
        size_t q = skip_ws(s, pos + LIT(MI_CALLS), n);
        if (q < n && s[q] == '[') {
            json_error_t err;
            json_t *a = json_loadb(s + q, n - q, JSON_DISABLE_EOF_CHECK, &err);
            bool ok = json_is_array(a) && json_array_size(a) > 0;
            for (size_t k = 0; ok && k < json_array_size(a); k++) {
                json_t *o = json_array_get(a, k);
                json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
                ok = json_is_string(name) && json_string_length(name) && (!args || json_is_object(args) ||
                                                                         json_is_string(args));
            }
            for (size_t k = 0; ok && k < json_array_size(a); k++) {
                json_t *o = json_array_get(a, k), *args = json_object_get(o, "arguments");
                srv_tool_call c = { strdup(json_string_value(json_object_get(o, "name"))),
                                    args ? args_text(args, false) : strdup("{}") };
                if (!c.name || !c.arguments || !add_call(m, c)) {
                    free(c.name);
                    free(c.arguments);
                    content->oom = true;
                    ok = false;
                }
            }
            json_decref(a);
            if (!ok) break;
            pos = skip_ws(s, q + (size_t)err.position, n);
            continue;
        }
        size_t a = find(s, q, n, MI_ARGS), id = find(s, q, n, MI_ID), used = 0;
        size_t name_end = MIN(a, id);
        while (name_end > q && is_ws(s[name_end - 1])) name_end--;
        if (a == n || !add_named_call(m, content, s + q, name_end - q, s, skip_ws(s, a + LIT(MI_ARGS), n), n, &used))
            break;
        pos = skip_ws(s, skip_ws(s, a + LIT(MI_ARGS), n) + used, n);
    }
    pk_buf_put(content, s + pos, n - pos);     /* what did not parse stays as text */
}

/* DeepSeek R1 / V3.x calls between their full-width markers. */
static void parse_deepseek(const char *s, size_t n, srv_tool_msg *m, pk_buf *content)
{
    size_t t = MIN(find(s, 0, n, DS_CALLS), find(s, 0, n, DS_CALL));
    pk_buf_put(content, s, t);
    size_t pos = t;
    if (starts(s, pos, n, DS_CALLS)) pos += LIT(DS_CALLS);
    for (;;) {
        size_t q = skip_ws(s, pos, n);
        if (!starts(s, q, n, DS_CALL)) break;
        q += LIT(DS_CALL);
        size_t sep = find(s, q, n, DS_SEP), used = 0;
        if (sep == n) break;
        size_t a = sep + LIT(DS_SEP);
        const char *name = s + q;
        size_t n_name = sep - q;
        if (n_name == 8 && !memcmp(name, "function", 8)) {       /* R1: type, then the name on its line */
            name = s + a;
            size_t nl = a;
            while (nl < n && s[nl] != '\n') nl++;
            n_name = nl - a;
            a = skip_ws(s, nl, n);
            if (starts(s, a, n, "```json")) a += 7;
            else if (starts(s, a, n, "```")) a += 3;
        }
        a = skip_ws(s, a, n);
        if (!add_named_call(m, content, name, n_name, s, a, n, &used)) break;
        size_t r = skip_ws(s, a + used, n);
        if (starts(s, r, n, "```")) r = skip_ws(s, r + 3, n);
        if (starts(s, r, n, DS_CALL_END)) r += LIT(DS_CALL_END);
        pos = r;
    }
    size_t r = skip_ws(s, pos, n);
    if (starts(s, r, n, DS_CALLS_END)) pos = r + LIT(DS_CALLS_END);
    if (m->n_calls) pk_buf_put(content, s + pos, n - pos);
    else pk_buf_put(content, s + t, n - t);
}

/* ---- QWEN_XML ---- */

enum { T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64 };

static unsigned type_bit(const char *t)
{
    static const char *const names[] = { "string", "integer", "number", "boolean", "null", "object", "array" };
    for (size_t k = 0; t && k < ARRAY_LEN(names); k++)
        if (!strcmp(t, names[k])) return 1u << k;
    return 0;
}

/* The JSON types a parameter schema allows: its "type" (a name or a list),
 * or its anyOf / oneOf members' types; 0 when it names none. */
static unsigned schema_types(const json_t *sch)
{
    const json_t *t = json_object_get(sch, "type");
    unsigned bits = type_bit(json_string_value(t));
    for (size_t k = 0; k < json_array_size(t); k++) bits |= type_bit(json_string_value(json_array_get(t, k)));
    if (bits) return bits;
    static const char *const unions[] = { "anyOf", "oneOf" };
    for (size_t u = 0; u < ARRAY_LEN(unions); u++) {
        const json_t *a = json_object_get(sch, unions[u]);
        for (size_t k = 0; k < json_array_size(a); k++) {
            const json_t *m = json_object_get(json_array_get(a, k), "type");
            bits |= type_bit(json_string_value(m));
            for (size_t q = 0; q < json_array_size(m); q++) bits |= type_bit(json_string_value(json_array_get(m, q)));
        }
    }
    return bits;
}

/* The "properties" of the function called name in an OpenAI tools array
 * ({"type": "function", "function": {"name", "parameters"}}), or NULL. */
static const json_t *tool_properties(const json_t *tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name)) return json_object_get(json_object_get(fn, "parameters"), "properties");
    }
    return NULL;
}

static void put_json_string(pk_buf *b, const char *s, size_t n)
{
    pk_buf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        pk_buf_put(b, s + run, i - run);
        run = i + 1;
        if (c == '"') pk_buf_puts(b, "\\\"");
        else if (c == '\\') pk_buf_puts(b, "\\\\");
        else if (c == '\n') pk_buf_puts(b, "\\n");
        else if (c == '\r') pk_buf_puts(b, "\\r");
        else if (c == '\t') pk_buf_puts(b, "\\t");
        else if (c == '\b') pk_buf_puts(b, "\\b");
        else if (c == '\f') pk_buf_puts(b, "\\f");
        else pk_buf_printf(b, "\\u%04x", c);
    }
    pk_buf_put(b, s + run, n - run);
    pk_buf_put(b, "\"", 1);
}

/* Valid JSON text with the white space outside its strings dropped: the
 * value exactly as written (numbers keep their digits, keys their order). */
static void put_json_compact(pk_buf *b, const char *s, size_t n)
{
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\' && i + 1 < n) {
                pk_buf_put(b, s + i, 2);
                i++;
                continue;
            }
            if (c == '"') in_str = false;
        } else if (is_ws(c)) {
            continue;
        } else if (c == '"') {
            in_str = true;
        }
        pk_buf_put(b, &c, 1);
    }
}

static bool word_is(const char *s, size_t n, const char *w)
{
    size_t k = strlen(w);
    if (n != k) return false;
    for (size_t i = 0; i < k; i++)
        if (tolower((unsigned char)s[i]) != w[i]) return false;
    return true;
}

/* One parameter's value v[0..n) as JSON, typed by the schema's types
 * (0: none declared). */
static void put_xml_value(pk_buf *b, const char *v, size_t n, unsigned types)
{
    size_t a = 0, z = n;
    while (a < z && is_ws(v[a])) a++;
    while (z > a && is_ws(v[z - 1])) z--;
    const char *t = v + a;
    size_t tn = z - a;
    if ((types & T_NULL) && (word_is(t, tn, "null") || (tn == 4 && !memcmp(t, "None", 4)))) {
        pk_buf_puts(b, "null");
        return;
    }
    if ((types & T_BOOLEAN) && (word_is(t, tn, "true") || word_is(t, tn, "false"))) {
        pk_buf_puts(b, tolower((unsigned char)t[0]) == 't' ? "true" : "false");
        return;
    }
    json_t *j = NULL;
    if (types != T_STRING && tn > 0) j = json_loadb(t, tn, JSON_DECODE_ANY, NULL);
    bool as_json;
    if ((types & T_INTEGER && json_is_integer(j)) || (types & T_NUMBER && json_is_number(j)) ||
        (types & T_OBJECT && json_is_object(j)) || (types & T_ARRAY && json_is_array(j)))
        as_json = true;
    else if (types & T_STRING)
        as_json = false;
    else
        as_json = j && !json_is_string(j);
    json_decref(j);
    if (as_json) put_json_compact(b, t, tn);
    else put_json_string(b, v, n);
}

/* The name in "<function=NAME>" / "<parameter=NAME>" starting at s[i]:
 * its end (the '>'), or 0 when there is none on this line or it is empty
 * or not UTF-8. */
static size_t xml_name_end(const char *s, size_t i, size_t n)
{
    size_t e = i;
    while (e < n && s[e] != '>' && s[e] != '<' && s[e] != '\n' && s[e] != '\0') e++;
    return e < n && s[e] == '>' && e > i && pk_utf8_valid(s + i, e - i) ? e : 0;
}

/* Where a value starting at s[i] ends: the first "</parameter>", or the
 * first "<parameter=" or "</function>" (the close left out); n when none.
 * One pass that stops there, so a text of many cut-off calls stays linear. */
static size_t xml_value_end(const char *s, size_t i, size_t n)
{
    for (; i < n; i++)
        if (s[i] == '<' && (starts(s, i, n, X_PARAM_END) || starts(s, i, n, X_PARAM) || starts(s, i, n, X_FUNC_END)))
            return i;
    return n;
}

/*
 * One "<function=N>...</function>" at s[i..n): the call into *call (owned
 * strings) and the end of "</function>".  0 when it does not parse (cut
 * off, a name missing, text between the parameters) or out of memory
 * (content->oom set).
 */
static size_t read_xml_function(const char *s, size_t i, size_t n, const json_t *tools, srv_tool_call *call,
                                pk_buf *content)
{
    if (!starts(s, i, n, X_FUNC)) return 0;
    size_t nb = i + LIT(X_FUNC), ne = xml_name_end(s, nb, n);
    if (!ne) return 0;
    char *name = strndup(s + nb, ne - nb);
    if (!name) {
        content->oom = true;
        return 0;
    }
    const json_t *props = tool_properties(tools, name);
    pk_buf args = {0};
    pk_buf_put(&args, "{", 1);
    size_t pos = ne + 1, end = 0;
    for (int k = 0;; k++) {
        size_t q = skip_ws(s, pos, n);
        if (starts(s, q, n, X_FUNC_END)) {
            end = q + LIT(X_FUNC_END);
            break;
        }
        if (!starts(s, q, n, X_PARAM)) break;
        size_t pb = q + LIT(X_PARAM), pe = xml_name_end(s, pb, n);
        if (!pe) break;
        size_t v = pe + 1;
        size_t e = xml_value_end(s, v, n);
        if (e == n) break;                                  /* cut off inside the value */
        size_t ve = e;
        if (v < ve && s[v] == '\n') v++;
        if (v < ve && s[ve - 1] == '\n') ve--;
        if (!pk_utf8_valid(s + v, ve - v)) break;
        char *pname = strndup(s + pb, pe - pb);
        if (!pname) {
            args.oom = true;
            break;
        }
        if (k) pk_buf_put(&args, ",", 1);
        put_json_string(&args, pname, strlen(pname));
        pk_buf_put(&args, ":", 1);
        put_xml_value(&args, s + v, ve - v, schema_types(json_object_get(props, pname)));
        free(pname);
        pos = starts(s, e, n, X_PARAM_END) ? e + LIT(X_PARAM_END) : e;
    }
    pk_buf_put(&args, "}", 1);
    if (args.oom) content->oom = true;
    if (!end || args.oom) {
        free(name);
        pk_buf_free(&args);
        return 0;
    }
    call->name = name;
    call->arguments = args.p;
    return end;
}

/* Qwen3-Coder XML calls: "<tool_call>" then one or more functions, then
 * "</tool_call>" (or the end of a text cut off right after a function).
 * A block that does not parse stays content, its calls dropped. */
static void parse_qwen_xml(const char *s, size_t n, const json_t *tools, srv_tool_msg *m, pk_buf *content)
{
    size_t pos = 0;
    while (pos < n) {
        size_t t = find(s, pos, n, QWEN_OPEN);
        pk_buf_put(content, s + pos, t - pos);
        if (t == n) break;
        int first = m->n_calls;
        size_t q = skip_ws(s, t + LIT(QWEN_OPEN), n), end = 0;
        for (;;) {
            srv_tool_call c = {0};
            size_t e = read_xml_function(s, q, n, tools, &c, content);
            if (!e) break;
            if (!add_call(m, c)) {
                free(c.name);
                free(c.arguments);
                content->oom = true;
                break;
            }
            q = skip_ws(s, e, n);
            if (starts(s, q, n, QWEN_CLOSE) || q == n) {
                end = q == n ? n : q + LIT(QWEN_CLOSE);
                break;
            }
        }
        if (content->oom) return;
        if (end) {
            pos = end;
            continue;
        }
        while (m->n_calls > first) {
            m->n_calls--;
            free(m->calls[m->n_calls].name);
            free(m->calls[m->n_calls].arguments);
        }
        pk_buf_put(content, s + t, LIT(QWEN_OPEN));
        pos = t + LIT(QWEN_OPEN);
    }
}

/* ---- GEMMA4 ---- */

/* Nesting deeper than this is refused: the value reader recurses. */
#define G4_MAX_DEPTH 128

static size_t g4_value(const char *s, size_t i, size_t n, pk_buf *b, int depth);

/* A string "<|"|>TEXT<|"|>" at s[i] (TEXT any UTF-8 but the quote) as a
 * JSON string: its end, or 0. */
static size_t g4_string(const char *s, size_t i, size_t n, pk_buf *b)
{
    if (!starts(s, i, n, G4_QUOTE)) return 0;
    size_t a = i + LIT(G4_QUOTE), z = find(s, a, n, G4_QUOTE);
    if (z == n || !pk_utf8_valid(s + a, z - a)) return 0;
    put_json_string(b, s + a, z - a);
    return z + LIT(G4_QUOTE);
}

/* A JSON number at s[i], written as it is (its digits kept): its end, or 0. */
static size_t g4_number(const char *s, size_t i, size_t n, pk_buf *b)
{
    size_t j = i;
    if (j < n && s[j] == '-') j++;
    if (j < n && s[j] == '0') j++;
    else if (j < n && s[j] >= '1' && s[j] <= '9')
        while (j < n && isdigit((unsigned char)s[j])) j++;
    else return 0;
    if (j < n && s[j] == '.') {
        size_t d = ++j;
        while (j < n && isdigit((unsigned char)s[j])) j++;
        if (j == d) return 0;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        size_t d = j;
        while (j < n && isdigit((unsigned char)s[j])) j++;
        if (j == d) return 0;
    }
    pk_buf_put(b, s + i, j - i);
    return j;
}

/* A key at s[i]: bare, running to the ':' (the template prints keys so;
 * llama.cpp reads [^:}]+) but for control bytes, or quoted as strings are
 * (no NUL: JSON readers refuse one in a key).  Its end, or 0. */
static size_t g4_key(const char *s, size_t i, size_t n, pk_buf *b)
{
    size_t k = i;
    if (starts(s, i, n, G4_QUOTE)) {
        size_t a = i + LIT(G4_QUOTE);
        k = g4_string(s, i, n, b);
        return k && !memchr(s + a, 0, k - LIT(G4_QUOTE) - a) ? k : 0;
    }
    while (k < n && s[k] != ':' && s[k] != '}' && (unsigned char)s[k] >= 0x20) k++;
    if (k == i || k == n || s[k] != ':' || !pk_utf8_valid(s + i, k - i)) return 0;
    put_json_string(b, s + i, k - i);
    return k;
}

/* A dict "{key:value,...}" or an array "[value,...]" at s[i] as a JSON
 * object or array: its end, or 0. */
static size_t g4_items(const char *s, size_t i, size_t n, pk_buf *b, int depth)
{
    if (i >= n || (s[i] != '{' && s[i] != '[') || depth > G4_MAX_DEPTH) return 0;
    bool dict = s[i] == '{';
    const char close = dict ? '}' : ']';
    pk_buf_put(b, s + i, 1);
    size_t q = skip_ws(s, i + 1, n);
    if (q < n && s[q] == close) {
        pk_buf_put(b, &close, 1);
        return q + 1;
    }
    for (;;) {
        if (dict) {
            size_t k = g4_key(s, q, n, b);
            if (!k || k >= n || s[k] != ':') return 0;
            pk_buf_put(b, ":", 1);
            q = skip_ws(s, k + 1, n);
        }
        size_t e = g4_value(s, q, n, b, depth + 1);
        if (!e) return 0;
        q = skip_ws(s, e, n);
        if (q < n && s[q] == close) {
            pk_buf_put(b, &close, 1);
            return q + 1;
        }
        if (q >= n || s[q] != ',') return 0;
        pk_buf_put(b, ",", 1);
        q = skip_ws(s, q + 1, n);
    }
}

/* Any value at s[i], as the template's format_argument prints one: a
 * null it prints with Jinja's own str(), None, which reads back as null. */
static size_t g4_value(const char *s, size_t i, size_t n, pk_buf *b, int depth)
{
    static const char *const words[][2] = { { "true", "true" }, { "false", "false" }, { "null", "null" },
                                            { "None", "null" } };
    if (i >= n) return 0;
    if (s[i] == '{' || s[i] == '[') return g4_items(s, i, n, b, depth);
    if (s[i] == '<') return g4_string(s, i, n, b);
    for (size_t k = 0; k < ARRAY_LEN(words); k++)
        if (starts(s, i, n, words[k][0])) {
            pk_buf_puts(b, words[k][1]);
            return i + strlen(words[k][0]);
        }
    return g4_number(s, i, n, b);
}

/* Where a function's name starting at s[i] ends: at the first byte that
 * cannot be part of one. */
static size_t g4_name_stop(const char *s, size_t i, size_t n)
{
    while (i < n && s[i] && s[i] != '{' && !is_ws(s[i]) && !strchr("<>}[]:,\"'", s[i])) i++;
    return i;
}

/* The end of a function's name starting at s[i]: the '{' of its
 * arguments, or 0 when there is none right after a name. */
static size_t g4_name_end(const char *s, size_t i, size_t n)
{
    size_t e = g4_name_stop(s, i, n);
    return e < n && s[e] == '{' && e > i && pk_utf8_valid(s + i, e - i) ? e : 0;
}

bool srv_tools_gemma4_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n && g4_name_stop(name, 0, n) == n && pk_utf8_valid(name, n);
}

/* One call after "<|tool_call>" at s[i]: "call:NAME{...}<tool_call|>" (the
 * close may be missing at the end of a text cut off right after the
 * arguments).  Fills *call (owned strings) and returns its end; 0 when it
 * does not parse or out of memory (content->oom set). */
static size_t g4_call(const char *s, size_t i, size_t n, srv_tool_call *call, pk_buf *content)
{
    size_t q = skip_ws(s, i, n);
    if (!starts(s, q, n, G4_FN)) return 0;
    q += LIT(G4_FN);
    size_t ne = g4_name_end(s, q, n);
    if (!ne) return 0;
    pk_buf args = {0};
    size_t e = g4_items(s, ne, n, &args, 0);     /* a dict: the name ends at its '{' */
    size_t r = e ? skip_ws(s, e, n) : 0;
    size_t end = !e ? 0 : starts(s, r, n, G4_CALL_END) ? r + LIT(G4_CALL_END) : r == n ? n : 0;
    pk_buf_put(&args, "", 0);
    char *name = end && !args.oom ? strndup(s + q, ne - q) : NULL;
    if (!name) {
        if (args.oom || end) content->oom = true;
        pk_buf_free(&args);
        return 0;
    }
    call->name = name;
    call->arguments = args.p;
    return end;
}

/* Gemma 4: "<|tool_call>call:NAME{...}<tool_call|>" anywhere, any number;
 * a marker whose call does not parse stays content. */
static void parse_gemma4(const char *s, size_t n, srv_tool_msg *m, pk_buf *content)
{
    size_t pos = 0;
    while (pos < n) {
        size_t t = find(s, pos, n, G4_CALL);
        pk_buf_put(content, s + pos, t - pos);
        if (t == n) break;
        srv_tool_call c = {0};
        size_t e = g4_call(s, t + LIT(G4_CALL), n, &c, content);
        if (content->oom) return;
        if (e) {
            if (!add_call(m, c)) {
                free(c.name);
                free(c.arguments);
                content->oom = true;
                return;
            }
            pos = e;
            continue;
        }
        pk_buf_put(content, s + t, LIT(G4_CALL));
        pos = t + LIT(G4_CALL);
    }
}

/* What ends a harmony body: the first H_N_CLOSE end its message, the rest
 * begin another (a model may leave out the end). */
static const char *const H_ENDS[] = { "<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>" };
#define H_N_CLOSE 3

/* The end of a harmony message body starting at i.  With final false, a
 * body not ended yet stops short of a partial marker at the end of the
 * text, which the next bytes may complete. */
static size_t harmony_body_end(const char *s, size_t i, size_t n, bool final)
{
    size_t e = n;
    for (size_t k = 0; k < ARRAY_LEN(H_ENDS); k++) e = MIN(e, find(s, i, n, H_ENDS[k]));
    if (e == n && !final) {
        size_t held = 0;
        for (size_t k = 0; k < ARRAY_LEN(H_ENDS); k++) held = MAX(held, partial_suffix(s + i, n - i, H_ENDS[k]));
        e -= held;
    }
    return e;
}

/* gpt-oss harmony messages: calls, reasoning (analysis), content.  With
 * final false (a stream's text so far), only what the next bytes cannot
 * change: no calls, and bodies short of what may still be a marker. */
static void parse_harmony(const char *s, size_t n, srv_tool_msg *m, pk_buf *content, pk_buf *reasoning, bool final)
{
    size_t pos = 0, c = find(s, 0, n, H_CHANNEL);
    size_t st = find(s, 0, n, H_START);
    /* Plain text before any message is content, except the rest of a header:
     * after the prompt's "<|start|>assistant" a model may name the
     * recipient first (" to=functions.f<|channel|>commentary json<|message|>").
     * Which it is waits for the first marker. */
    if (!(c < st && find(s, 0, c, "to=") < c) && (final || MIN(c, st) < n)) pk_buf_put(content, s, MIN(c, st));
    while ((c = find(s, pos, n, H_CHANNEL)) < n) {
        /* The header: from the message's <|start|> (if any) to <|message|>. */
        size_t h0 = pos, msg = find(s, c, n, H_MESSAGE);
        size_t sp = find(s, pos, c, H_START);
        if (sp < c) h0 = sp;
        if (msg == n) break;                          /* a header cut off: nothing to show */
        size_t b = msg + LIT(H_MESSAGE), e = harmony_body_end(s, b, n, final);
        const char *fn = NULL;
        for (size_t i = h0; i + 13 <= msg; i++)
            if (!memcmp(s + i, "to=functions.", 13)) fn = s + i + 13;
        size_t ch = c + LIT(H_CHANNEL);
        if (fn && final) {
            size_t k = 0;
            while (fn + k < s + msg && !is_ws(fn[k]) && fn[k] != '<') k++;
            size_t used = 0, a = skip_ws(s, b, e);
            if (!add_named_call(m, content, fn, k, s, a, e, &used)) {
                /* Arguments that are not JSON go through as the model wrote them. */
                srv_tool_call call = { strndup(fn, k), strndup(s + b, e - b) };
                if (!call.name || !call.arguments || !add_call(m, call)) {
                    free(call.name);
                    free(call.arguments);
                    content->oom = true;
                    return;
                }
            }
        } else if (fn) {
            /* A call goes out whole at the end. */
        } else if (starts(s, ch, n, "analysis")) {
            pk_buf_put(reasoning, s + b, e - b);
        } else {
            pk_buf_put(content, s + b, e - b);
        }
        pos = e;
        for (size_t k = 0; k < H_N_CLOSE; k++)
            if (starts(s, pos, n, H_ENDS[k])) pos += strlen(H_ENDS[k]);
    }
}

srv_tool_fmt srv_tools_detect(const char *src, srv_tool_fmt fallback)
{
    if (!src) return fallback;
    if (strstr(src, "<|tool_call>call:")) return SRV_TOOL_GEMMA4;
    /* As llama.cpp decides: gpt-oss's template writes "to=" and "functions."
     * apart, so the channel marker alone says harmony. */
    if (strstr(src, H_CHANNEL)) return SRV_TOOL_HARMONY;
    if (strstr(src, DS_CALLS)) return SRV_TOOL_DEEPSEEK;
    if (strstr(src, MI_CALLS)) return SRV_TOOL_MISTRAL;
    /* Before Hermes: these templates wrap their functions in <tool_call> too. */
    if (strstr(src, X_FUNC) && strstr(src, X_PARAM)) return SRV_TOOL_QWEN_XML;
    if (strstr(src, QWEN_OPEN)) return SRV_TOOL_QWEN;
    if (strstr(src, PY_TAG) || (strstr(src, "<|start_header_id|>") && strstr(src, "ipython"))) return SRV_TOOL_LLAMA3;
    return fallback;
}

pk_status srv_tools_parse(srv_tool_fmt f, const json_t *tools, const char *text, size_t len, srv_tool_msg *out)
{
    memset(out, 0, sizeof *out);
    pk_buf content = {0}, reasoning = {0};
    pk_buf_put(&content, "", 0);
    if (f == SRV_TOOL_QWEN) parse_qwen(text, len, out, &content);
    else if (f == SRV_TOOL_LLAMA3) parse_llama3(text, len, out, &content);
    else if (f == SRV_TOOL_MISTRAL) parse_mistral(text, len, out, &content);
    else if (f == SRV_TOOL_DEEPSEEK) parse_deepseek(text, len, out, &content);
    else if (f == SRV_TOOL_HARMONY) parse_harmony(text, len, out, &content, &reasoning, true);
    else if (f == SRV_TOOL_QWEN_XML) parse_qwen_xml(text, len, tools, out, &content);
    else if (f == SRV_TOOL_GEMMA4) parse_gemma4(text, len, out, &content);
    else pk_buf_put(&content, text, len);
    if (content.oom || reasoning.oom) {
        free(content.p);
        free(reasoning.p);
        srv_tool_msg_free(out);
        return PK_ENOMEM;
    }
    if (reasoning.n) {
        out->reasoning = reasoning.p;
        out->reasoning_len = reasoning.n;
    } else {
        free(reasoning.p);
    }
    if (f == SRV_TOOL_HARMONY) {
        /* Harmony's content is the messages' bodies, never the raw text. */
    } else if (out->n_calls == 0 && content.n != len) {
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
    free(m->reasoning);
    memset(m, 0, sizeof *m);
}

size_t srv_tools_content_prefix(srv_tool_fmt f, const char *text, size_t len)
{
    size_t k = len;
    if (f == SRV_TOOL_QWEN || f == SRV_TOOL_QWEN_XML || f == SRV_TOOL_GEMMA4) {
        const char *tag = f == SRV_TOOL_GEMMA4 ? G4_CALL : QWEN_OPEN;
        k = find(text, 0, len, tag);
        if (k == len) k = len - partial_suffix(text, len, tag);
    } else if (f == SRV_TOOL_LLAMA3) {
        size_t b = 0;
        while (b < len && text[b] != '{') b++;
        k = MIN(b, find(text, 0, len, PY_TAG));
        if (k == len) k = len - partial_suffix(text, len, PY_TAG);
    } else if (f == SRV_TOOL_MISTRAL || f == SRV_TOOL_DEEPSEEK) {
        const char *tag = f == SRV_TOOL_MISTRAL ? MI_CALLS : DS_ANY;
        k = find(text, 0, len, tag);
        if (k == len) k = len - partial_suffix(text, len, tag);
    } else if (f == SRV_TOOL_HARMONY) {
        return 0;                   /* srv_tools_harmony_prefix: its content is not a prefix of the text */
    } else {
        return len;
    }
    /* White space before a call is dropped from the content, so it waits. */
    while (k > 0 && is_ws(text[k - 1])) k--;
    return k;
}

pk_status srv_tools_harmony_prefix(const char *text, size_t len, pk_buf *content, pk_buf *reasoning)
{
    srv_tool_msg none = {0};
    content->n = reasoning->n = 0;
    pk_buf_put(content, "", 0);
    pk_buf_put(reasoning, "", 0);
    parse_harmony(text, len, &none, content, reasoning, false);
    /* White space before a call is dropped from the content, so it waits. */
    while (content->n > 0 && is_ws(content->p[content->n - 1])) content->p[--content->n] = 0;
    return content->oom || reasoning->oom ? PK_ENOMEM : PK_OK;
}
