/*
 * jj_val.c - the arena, values, and how Python would print them: str(),
 * repr() and json.dumps() (the byte-exact part of matching jinja2).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jj_impl.h"

_Noreturn void jj_throw(jj_fail *f, pk_status st, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->st = st;
    f->line = line;
    longjmp(f->jb, 1);
}

/* ---- arena: chunks of at least 64 KiB, bump allocation ---------------- */

struct jj_chunk {
    jj_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *jj_alloc(jj_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jj_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->max_bytes && a->n_bytes + cap > a->max_bytes)
            jj_throw(a->fail, PK_EFULL, 0, "template memory limit (%zu bytes) reached", a->max_bytes);
        c = malloc(sizeof *c + cap);
        if (!c) jj_throw(a->fail, PK_ENOMEM, 0, "out of memory");
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->n_bytes += cap;
    }
    void *p = c->mem + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(jj_arena *a, const char *s, size_t n)
{
    char *p = jj_alloc(a, n + 1);
    memcpy(p, s, n);
    return p;
}

struct jj_tbuf { pk_buf b; jj_tbuf *next; };

pk_buf *jj_buf(jj_arena *a)
{
    jj_tbuf *t = jj_alloc(a, sizeof *t);
    t->next = a->bufs;
    a->bufs = t;
    return &t->b;
}

void jj_arena_free(jj_arena *a)
{
    for (jj_tbuf *t = a->bufs; t; t = t->next) pk_buf_free(&t->b);
    a->bufs = NULL;
    for (jj_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->n_bytes = 0;
}

/* ---- constructors ----------------------------------------------------- */

jv jv_str(jj_arena *a, const char *s, size_t n)
{
    jstr *js = jj_alloc(a, sizeof *js + n + 1);
    js->n = n;
    if (n) memcpy(js->p, s, n);
    jv v = { .t = JV_STR, .s = js };
    return v;
}

jv jv_cstr(jj_arena *a, const char *s) { return jv_str(a, s, strlen(s)); }

jv jv_list(jj_arena *a, size_t cap)
{
    jlist *l = jj_alloc(a, sizeof *l);
    l->cap = cap ? cap : 4;
    l->v = jj_alloc(a, l->cap * sizeof *l->v);
    jv v = { .t = JV_LIST, .l = l };
    return v;
}

void jv_push(jj_arena *a, jv *list, jv item)
{
    jlist *l = list->l;
    if (l->n == l->cap) {
        jv *nv = jj_alloc(a, 2 * l->cap * sizeof *nv);
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = item;
}

jv jv_dict(jj_arena *a, size_t cap)
{
    jdict *d = jj_alloc(a, sizeof *d);
    d->cap = cap ? cap : 4;
    d->k = jj_alloc(a, d->cap * sizeof *d->k);
    d->v = jj_alloc(a, d->cap * sizeof *d->v);
    jv v = { .t = JV_DICT, .d = d };
    return v;
}

jv *jv_dget(const jdict *d, jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

jv *jv_dget_s(const jdict *d, const char *k)
{
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].s->n == n && memcmp(d->k[i].s->p, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void jv_dset(jj_arena *a, jv *dict, jv k, jv v)
{
    jdict *d = dict->d;
    jv *old = jv_dget(d, k);
    if (old) { *old = v; return; }
    if (d->n == d->cap) {
        jv *nk = jj_alloc(a, 2 * d->cap * sizeof *nk), *nv = jj_alloc(a, 2 * d->cap * sizeof *nv);
        memcpy(nk, d->k, d->n * sizeof *nk);
        memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk;
        d->v = nv;
        d->cap *= 2;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- truth, equality -------------------------------------------------- */

bool jv_truthy(jv v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s->n > 0;
    case JV_LIST: return v.l->n > 0 || v.l->gen;
    case JV_DICT: return v.d->n > 0;
    default: return true;
    }
}

bool jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }

double jv_num(jv v)
{
    return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.t == JV_BOOL ? v.b : 0;
}

/* Values a template builds may nest as deep as its loops run (`set x =
 * [x]`); past this depth repr() writes "..." and == says unequal instead of
 * recursing off the stack (Python would raise RecursionError). */
enum { MAX_NEST = 500 };

static bool eq_at(jv a, jv b, int depth);
bool jv_eq(jv a, jv b) { return eq_at(a, b, 0); }

static bool eq_at(jv a, jv b, int depth)
{
    if (depth > MAX_NEST) return false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.i : a.b) == (b.t == JV_INT ? b.i : b.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s->n == b.s->n && memcmp(a.s->p, b.s->p, a.s->n) == 0;
    case JV_LIST:
        if (a.l->gen || b.l->gen) return a.l == b.l;
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!eq_at(a.l->v[i], b.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jv *o = jv_dget(b.d, a.d->k[i]);
            if (!o || !eq_at(a.d->v[i], *o, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.d == b.d;
    case JV_MACRO: return a.m == b.m;
    case JV_LOOP: return a.lp == b.lp;
    case JV_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

const char *jv_type_name(jv v)
{
    static const char *names[] = { "Undefined", "NoneType", "bool", "int", "float", "str",
                                   "list", "dict", "Namespace", "Macro", "LoopContext",
                                   "function" };
    if (v.t == JV_LIST && v.l->tuple) return "tuple";
    if (v.t == JV_LIST && v.l->gen) return "generator";
    return names[v.t];
}

/* ---- printing --------------------------------------------------------- */

/* Python's float repr (pk_buf_put_float_repr); JSON spells the values
 * without digits as json.dumps does. */
static void write_float(pk_buf *b, double f, bool json)
{
    if (json && isnan(f)) pk_buf_puts(b, "NaN");
    else if (json && isinf(f)) pk_buf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else pk_buf_put_float_repr(b, f);
}

static void write_str_repr(pk_buf *b, const jstr *s)
{
    bool has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    pk_buf_put(b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        if (c == (unsigned char)q || c == '\\') { pk_buf_put(b, "\\", 1); pk_buf_put(b, &s->p[i], 1); }
        else if (c == '\n') pk_buf_puts(b, "\\n");
        else if (c == '\r') pk_buf_puts(b, "\\r");
        else if (c == '\t') pk_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) pk_buf_printf(b, "\\x%02x", c);
        else pk_buf_put(b, &s->p[i], 1);
    }
    pk_buf_put(b, &q, 1);
}

static void repr_at(pk_buf *b, jv v, int depth);
void jv_write_repr(pk_buf *b, jv v) { repr_at(b, v, 0); }

static void repr_at(pk_buf *b, jv v, int depth)
{
    if (depth > MAX_NEST && (v.t == JV_LIST || v.t == JV_DICT)) { pk_buf_puts(b, "..."); return; }
    switch (v.t) {
    case JV_STR: write_str_repr(b, v.s); return;
    case JV_LIST:
        pk_buf_put(b, v.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) pk_buf_puts(b, ", ");
            repr_at(b, v.l->v[i], depth + 1);
        }
        if (v.l->tuple && v.l->n == 1) pk_buf_put(b, ",", 1);
        pk_buf_put(b, v.l->tuple ? ")" : "]", 1);
        return;
    case JV_DICT:
        pk_buf_put(b, "{", 1);
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) pk_buf_puts(b, ", ");
            repr_at(b, v.d->k[i], depth + 1);
            pk_buf_puts(b, ": ");
            repr_at(b, v.d->v[i], depth + 1);
        }
        pk_buf_put(b, "}", 1);
        return;
    default: jv_write_str(b, v);
    }
}

void jv_write_str(pk_buf *b, jv v)
{
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: pk_buf_puts(b, "None"); return;
    case JV_BOOL: pk_buf_puts(b, v.b ? "True" : "False"); return;
    case JV_INT: pk_buf_printf(b, "%lld", (long long)v.i); return;
    case JV_FLOAT: write_float(b, v.f, false); return;
    case JV_STR: pk_buf_put(b, v.s->p, v.s->n); return;
    case JV_LIST:
        if (v.l->gen) { pk_buf_puts(b, "<generator object>"); return; }
        jv_write_repr(b, v);
        return;
    case JV_DICT: jv_write_repr(b, v); return;
    case JV_NS: pk_buf_puts(b, "<Namespace "); jv_write_repr(b, (jv){ .t = JV_DICT, .d = v.d });
        pk_buf_puts(b, ">"); return;
    case JV_MACRO: pk_buf_puts(b, "<Macro>"); return;
    case JV_LOOP: pk_buf_puts(b, "<LoopContext>"); return;
    case JV_FUNC: pk_buf_puts(b, "<function>"); return;
    }
}

jv jv_to_str(jj_arena *a, jv v)
{
    if (v.t == JV_STR) return v;
    pk_buf *b = jj_buf(a);
    jv_write_str(b, v);
    if (b->oom) { pk_buf_free(b); jj_throw(a->fail, PK_ENOMEM, 0, "out of memory"); }
    jv r = jv_str(a, b->p ? b->p : "", b->n);
    pk_buf_free(b);
    return r;
}

jv jv_escape(jj_arena *a, jv v)
{
    if (v.t == JV_STR && v.safe) return v;
    jv s = jv_to_str(a, v);
    pk_buf *b = jj_buf(a);
    for (size_t i = 0; i < s.s->n; i++) {
        char c = s.s->p[i];
        switch (c) {
        case '&': pk_buf_puts(b, "&amp;"); break;
        case '<': pk_buf_puts(b, "&lt;"); break;
        case '>': pk_buf_puts(b, "&gt;"); break;
        case '"': pk_buf_puts(b, "&#34;"); break;
        case '\'': pk_buf_puts(b, "&#39;"); break;
        default: pk_buf_put(b, &c, 1);
        }
    }
    if (b->oom) { pk_buf_free(b); jj_throw(a->fail, PK_ENOMEM, 0, "out of memory"); }
    jv r = jv_str(a, b->p ? b->p : "", b->n);
    pk_buf_free(b);
    r.safe = true;
    return r;
}

/* ---- json.dumps ------------------------------------------------------- */

static uint32_t utf8_next(const unsigned char *p, size_t n, size_t *len)
{
    unsigned c = p[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)k > n) k = 1;
    uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
    for (int i = 1; i < k; i++) cp = (cp << 6) | (p[i] & 0x3f);
    *len = (size_t)k;
    return cp;
}

static void write_json_str(pk_buf *b, const jstr *s, bool ascii)
{
    pk_buf_put(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s->p;
    for (size_t i = 0; i < s->n;) {
        unsigned char c = p[i];
        if (c == '"') pk_buf_puts(b, "\\\"");
        else if (c == '\\') pk_buf_puts(b, "\\\\");
        else if (c == '\n') pk_buf_puts(b, "\\n");
        else if (c == '\r') pk_buf_puts(b, "\\r");
        else if (c == '\t') pk_buf_puts(b, "\\t");
        else if (c == '\b') pk_buf_puts(b, "\\b");
        else if (c == '\f') pk_buf_puts(b, "\\f");
        else if (c < 0x20 || (ascii && c == 0x7f)) pk_buf_printf(b, "\\u%04x", c);
        else if (c >= 0x80 && ascii) {
            size_t k;
            uint32_t cp = utf8_next(p + i, s->n - i, &k);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                pk_buf_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                pk_buf_printf(b, "\\u%04x", cp);
            }
            i += k;
            continue;
        } else {
            pk_buf_put(b, &s->p[i], 1);
        }
        i++;
    }
    pk_buf_put(b, "\"", 1);
}

static void newline_indent(pk_buf *b, const jj_dumps *o, int depth)
{
    pk_buf_put(b, "\n", 1);
    for (int i = 0; i < depth; i++) pk_buf_puts(b, o->indent);
}

static int cmp_keys(const void *x, const void *y)
{
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    if (a->t != JV_STR || b->t != JV_STR) return 0;
    size_t n = MIN(a->s->n, b->s->n);
    int c = memcmp(a->s->p, b->s->p, n);
    return c ? c : (a->s->n > b->s->n) - (a->s->n < b->s->n);
}

bool jv_write_json(pk_buf *b, jv v, const jj_dumps *o, int depth)
{
    if (depth > 200) return false;
    switch (v.t) {
    case JV_NONE: pk_buf_puts(b, "null"); return true;
    case JV_BOOL: pk_buf_puts(b, v.b ? "true" : "false"); return true;
    case JV_INT: pk_buf_printf(b, "%lld", (long long)v.i); return true;
    case JV_FLOAT: write_float(b, v.f, true); return true;
    case JV_STR: write_json_str(b, v.s, o->ensure_ascii); return true;
    case JV_LIST:
        if (v.l->gen) return false;
        if (v.l->n == 0) { pk_buf_puts(b, "[]"); return true; }
        pk_buf_put(b, "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) pk_buf_puts(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            if (!jv_write_json(b, v.l->v[i], o, depth + 1)) return false;
        }
        if (o->indent) newline_indent(b, o, depth);
        pk_buf_put(b, "]", 1);
        return true;
    case JV_DICT: {
        if (v.d->n == 0) { pk_buf_puts(b, "{}"); return true; }
        const jv **keys = malloc(v.d->n * sizeof *keys);
        if (!keys) { b->oom = true; return true; }
        for (size_t i = 0; i < v.d->n; i++) keys[i] = &v.d->k[i];
        if (o->sort_keys) qsort(keys, v.d->n, sizeof *keys, cmp_keys);
        pk_buf_put(b, "{", 1);
        bool ok = true;
        for (size_t j = 0; j < v.d->n && ok; j++) {
            size_t i = (size_t)(keys[j] - v.d->k);
            if (j) pk_buf_puts(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            jv k = v.d->k[i];
            if (k.t == JV_STR) write_json_str(b, k.s, o->ensure_ascii);
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                pk_buf_put(b, "\"", 1);
                jv_write_json(b, k, o, depth + 1);
                pk_buf_put(b, "\"", 1);
            } else ok = false;
            pk_buf_puts(b, o->key_sep);
            ok = ok && jv_write_json(b, v.d->v[i], o, depth + 1);
        }
        free(keys);
        if (!ok) return false;
        if (o->indent) newline_indent(b, o, depth);
        pk_buf_put(b, "}", 1);
        return true;
    }
    default: return false;
    }
}

/* ---- from JSON -------------------------------------------------------- */

jv jv_from_json(jj_arena *a, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv d = jv_dict(a, json_object_size(j));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) jv_dset(a, &d, jv_cstr(a, k), jv_from_json(a, x));
        return d;
    }
    case JSON_ARRAY: {
        jv l = jv_list(a, json_array_size(j));
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) jv_push(a, &l, jv_from_json(a, x));
        return l;
    }
    case JSON_STRING: return jv_str(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int(json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return jv_none();
    }
}

/* ---- UTF-8 ------------------------------------------------------------ */

size_t jj_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

size_t jj_utf8_off(const char *s, size_t n, size_t i)
{
    size_t c = 0, k = 0;
    for (; k < n; k++) {
        if (((unsigned char)s[k] & 0xc0) != 0x80) {
            if (c == i) return k;
            c++;
        }
    }
    return n;
}
