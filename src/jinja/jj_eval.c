/*
 * jj_eval.c - the tree walker: scopes, statements, expressions, and the
 * entry points jj_compile / jj_render.
 *
 * Scopes follow jinja2: the template's top level is one frame (the render's
 * variables live below it, in the globals frame); a for loop's body gets a
 * fresh frame each iteration (so a `set` inside it never outlives the
 * iteration, which is why templates carry state in a namespace); a macro's
 * body gets a frame whose parent is the frame the macro was defined in.  An
 * `if` opens no scope.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "jj_impl.h"

struct jj_tmpl {
    jj_arena a;
    jj_node *root;
};

typedef struct frame frame;
struct frame {
    frame *parent;
    const char **names;
    jv *vals;
    int n, cap;
};

/* A macro value: its definition and the frame it closes over. */
typedef struct jmacro { const jj_node *def; frame *env; const struct jmacro *caller; } jmacro;

struct jj_rt {
    jj_arena *a;
    jj_fail *fail;
    pk_buf *out;
    jj_limits lim;
    int64_t n_iters;
    int depth;                     /* macro calls nested */
    int eval_depth;                /* expression nodes nested: `a + b + ...` chains nest too */
    frame *globals;
};

enum { EX_OK, EX_BREAK, EX_CONTINUE };

jj_arena *jj_rt_arena(jj_rt *rt) { return rt->a; }
jj_fail *jj_rt_fail(jj_rt *rt) { return rt->fail; }

static _Noreturn void rt_err(jj_rt *rt, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void rt_err(jj_rt *rt, int line, const char *fmt, ...)
{
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    jj_throw(rt->fail, PK_EINVAL, line, "%s", m);
}

/* ---- frames ----------------------------------------------------------- */

static frame *frame_new(jj_rt *rt, frame *parent)
{
    frame *f = jj_alloc(rt->a, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(jj_rt *rt, frame *f, const char *name, jv v)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 8;
        const char **nn = jj_alloc(rt->a, (size_t)cap * sizeof *nn);
        jv *nv = jj_alloc(rt->a, (size_t)cap * sizeof *nv);
        if (f->n) { memcpy(nn, f->names, (size_t)f->n * sizeof *nn); memcpy(nv, f->vals, (size_t)f->n * sizeof *nv); }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static jv lookup(frame *f, const char *name)
{
    for (; f; f = f->parent)
        for (int i = f->n - 1; i >= 0; i--)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    return jv_undef();
}

/* ---- attribute and item access ---------------------------------------- */

static bool is_dict_method(const char *n)
{
    static const char *m[] = { "items", "keys", "values", "get", "pop", "update", "copy", "clear",
                               "setdefault", "popitem", "fromkeys" };
    for (size_t i = 0; i < ARRAY_LEN(m); i++) if (!strcmp(n, m[i])) return true;
    return false;
}

static jv loop_attr(jj_rt *rt, int line, jloop *lp, const char *name)
{
    int64_t i = lp->i, n = lp->n;
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items[i - 1] : jv_undef();
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items[i + 1] : jv_undef();
    if (!strcmp(name, "cycle")) return (jv){ .t = JV_FUNC, .fn = JJ_FN_CYCLE };
    (void)rt; (void)line;
    return jv_undef();
}

jv jj_getattr(jj_rt *rt, int line, jv obj, const char *name)
{
    switch (obj.t) {
    case JV_UNDEF: rt_err(rt, line, "'%s' is undefined (attribute of an undefined value)", name);
    case JV_DICT: {
        if (is_dict_method(name)) return (jv){ .t = JV_FUNC, .fn = 0 };
        jv *v = jv_dget_s(obj.d, name);
        return v ? *v : jv_undef();
    }
    case JV_NS: {
        jv *v = jv_dget_s(obj.d, name);
        return v ? *v : jv_undef();
    }
    case JV_LOOP: return loop_attr(rt, line, obj.lp, name);
    default: return jv_undef();
    }
}

static bool py_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (size_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

jv jj_getitem(jj_rt *rt, int line, jv obj, jv key)
{
    size_t k;
    switch (obj.t) {
    case JV_UNDEF: rt_err(rt, line, "indexing an undefined value");
    case JV_DICT: case JV_NS: {
        jv *v = jv_dget(obj.d, key);
        if (v) return *v;
        return key.t == JV_STR && obj.t == JV_DICT ? jj_getattr(rt, line, obj, key.s->p) : jv_undef();
    }
    case JV_LIST:
        if (obj.l->gen) return jv_undef();
        if ((key.t == JV_INT || key.t == JV_BOOL) && py_index(key.t == JV_INT ? key.i : key.b, obj.l->n, &k))
            return obj.l->v[k];
        return jv_undef();
    case JV_STR:
        if ((key.t == JV_INT || key.t == JV_BOOL) && py_index(key.t == JV_INT ? key.i : key.b, jj_utf8_len(obj.s->p, obj.s->n), &k)) {
            size_t b0 = jj_utf8_off(obj.s->p, obj.s->n, k), b1 = jj_utf8_off(obj.s->p, obj.s->n, k + 1);
            return jv_str(rt->a, obj.s->p + b0, b1 - b0);
        }
        return jv_undef();
    case JV_LOOP:
        return key.t == JV_STR ? loop_attr(rt, line, obj.lp, key.s->p) : jv_undef();
    default: return jv_undef();
    }
}

/* Python's slice indices for a sequence of n. */
static int64_t slice_bound(jv v, int64_t n, int64_t step, bool is_start, jj_rt *rt, int line)
{
    if (v.t == JV_NONE || v.t == JV_UNDEF) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    if (v.t != JV_INT && v.t != JV_BOOL) rt_err(rt, line, "slice indices must be integers or None");
    int64_t i = v.t == JV_INT ? v.i : v.b;
    if (i < 0) { i += n; if (i < 0) i = step > 0 ? 0 : -1; }
    else if (i >= n) i = step > 0 ? n : n - 1;
    return i;
}

static jv do_slice(jj_rt *rt, int line, jv obj, jv a, jv b, jv c)
{
    if (obj.t == JV_UNDEF) rt_err(rt, line, "slicing an undefined value");
    if ((obj.t != JV_LIST || obj.l->gen) && obj.t != JV_STR) return jv_undef();
    int64_t step = 1;
    if (c.t == JV_INT) step = c.i;
    else if (c.t != JV_NONE && c.t != JV_UNDEF) rt_err(rt, line, "slice indices must be integers or None");
    if (step == 0) rt_err(rt, line, "slice step cannot be zero");
    bool ascii = true;
    int64_t n;
    if (obj.t == JV_LIST) n = (int64_t)obj.l->n;
    else {
        for (size_t i = 0; i < obj.s->n && ascii; i++) ascii = !((unsigned char)obj.s->p[i] & 0x80);
        n = ascii ? (int64_t)obj.s->n : (int64_t)jj_utf8_len(obj.s->p, obj.s->n);
    }
    int64_t i0 = slice_bound(a, n, step, true, rt, line), i1 = slice_bound(b, n, step, false, rt, line);
    if (obj.t == JV_LIST) {
        jv r = jv_list(rt->a, 0);
        for (int64_t i = i0; step > 0 ? i < i1 : i > i1; i += step) jv_push(rt->a, &r, obj.l->v[i]);
        r.l->tuple = obj.l->tuple;
        return r;
    }
    pk_buf *s = jj_buf(rt->a);
    for (int64_t i = i0; step > 0 ? i < i1 : i > i1; i += step) {
        if (ascii) { pk_buf_put(s, obj.s->p + i, 1); continue; }
        size_t b0 = jj_utf8_off(obj.s->p, obj.s->n, (size_t)i), b1 = jj_utf8_off(obj.s->p, obj.s->n, (size_t)i + 1);
        pk_buf_put(s, obj.s->p + b0, b1 - b0);
    }
    jv r = jv_str(rt->a, s->p ? s->p : "", s->n);
    bool oom = s->oom;
    pk_buf_free(s);
    if (oom) jj_throw(rt->fail, PK_ENOMEM, line, "out of memory");
    return r;
}

jv jj_iter_list(jj_rt *rt, int line, jv v)
{
    switch (v.t) {
    case JV_UNDEF: return jv_list(rt->a, 1);
    case JV_LIST: return v;
    case JV_DICT: {
        jv r = jv_list(rt->a, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) jv_push(rt->a, &r, v.d->k[i]);
        return r;
    }
    case JV_STR: {
        jv r = jv_list(rt->a, v.s->n);
        for (size_t i = 0; i < v.s->n;) {
            size_t k = 1;
            while (i + k < v.s->n && ((unsigned char)v.s->p[i + k] & 0xc0) == 0x80) k++;
            jv_push(rt->a, &r, jv_str(rt->a, v.s->p + i, k));
            i += k;
        }
        return r;
    }
    default: rt_err(rt, line, "'%s' object is not iterable", jv_type_name(v));
    }
}

int jj_compare(jj_rt *rt, int line, jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT) { double x = jv_num(a), y = jv_num(b); return (x > y) - (x < y); }
        int64_t x = a.t == JV_INT ? a.i : a.b, y = b.t == JV_INT ? b.i : b.b;
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = MIN(a.s->n, b.s->n);
        int c = memcmp(a.s->p, b.s->p, n);
        return c ? (c > 0) - (c < 0) : (a.s->n > b.s->n) - (a.s->n < b.s->n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        if (++rt->eval_depth > 2000) jj_throw(rt->fail, PK_EFULL, line, "comparing lists nested too deeply");
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (jv_eq(a.l->v[i], b.l->v[i])) continue;
            int c = jj_compare(rt, line, a.l->v[i], b.l->v[i]);
            rt->eval_depth--;
            return c;
        }
        rt->eval_depth--;
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    rt_err(rt, line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

/* ---- expressions ------------------------------------------------------ */

static jv eval(jj_rt *rt, frame *f, const jj_node *n);
static int exec_body(jj_rt *rt, frame *f, const jj_node *body);

static jv render_to_str(jj_rt *rt, frame *f, const jj_node *body)
{
    pk_buf *saved = rt->out, *b = jj_buf(rt->a);
    rt->out = b;
    exec_body(rt, f, body);
    rt->out = saved;
    if (b->oom) { pk_buf_free(b); jj_throw(rt->fail, PK_ENOMEM, body->line, "out of memory"); }
    jv r = jv_str(rt->a, b->p ? b->p : "", b->n);
    pk_buf_free(b);
    return r;
}

static jv call_macro(jj_rt *rt, int line, const jmacro *m, jv *args, const char **kw, int n)
{
    const jj_node *def = m->def;
    if (++rt->depth > rt->lim.max_depth)
        jj_throw(rt->fail, PK_EFULL, line, "macro calls nested deeper than %d", rt->lim.max_depth);
    frame *f = frame_new(rt, m->env);
    int n_pos = 0;
    for (int i = 0; i < n; i++) if (!kw[i]) n_pos++;
    if (n_pos > def->n_kids) rt_err(rt, line, "macro '%s' takes not more than %d argument(s)", def->name, def->n_kids);
    for (int p = 0; p < def->n_kids; p++) {
        const jj_node *param = def->kids[p];
        jv v = jv_undef();
        bool set = false;
        if (p < n_pos) { v = args[p]; set = true; }
        for (int i = 0; i < n; i++) if (kw[i] && !strcmp(kw[i], param->name)) { v = args[i]; set = true; }
        if (!set && param->a) v = eval(rt, f, param->a);
        frame_set(rt, f, param->name, v);
    }
    for (int i = 0; i < n; i++) {
        if (!kw[i]) continue;
        bool known = false;
        for (int p = 0; p < def->n_kids; p++) known |= !strcmp(kw[i], def->kids[p]->name);
        if (!known) rt_err(rt, line, "macro '%s' takes no keyword argument '%s'", def->name, kw[i]);
    }
    if (m->caller) {
        jmacro *c = jj_alloc(rt->a, sizeof *c);
        *c = *m->caller;
        frame_set(rt, f, "caller", (jv){ .t = JV_MACRO, .m = (jj_node *)c });
    }
    jv r = render_to_str(rt, f, def->body);
    rt->depth--;
    return r;
}

static jv call_builtin(jj_rt *rt, int line, int fn, jv *args, const char **kw, int n)
{
    switch (fn) {
    case JJ_FN_RANGE: {
        int64_t a[3] = { 0, 0, 1 };
        if (n < 1 || n > 3) rt_err(rt, line, "range expected 1 to 3 arguments");
        for (int i = 0; i < n; i++) {
            if (args[i].t != JV_INT && args[i].t != JV_BOOL) rt_err(rt, line, "range() integer argument expected");
            a[n == 1 ? 1 : i] = args[i].t == JV_INT ? args[i].i : args[i].b;
        }
        if (a[2] == 0) rt_err(rt, line, "range() arg 3 must not be zero");
        jv r = jv_list(rt->a, 0);
        for (int64_t i = a[0]; a[2] > 0 ? i < a[1] : i > a[1];) {
            if (++rt->n_iters > rt->lim.max_loop_iters)
                jj_throw(rt->fail, PK_EFULL, line, "more than %lld loop iterations", (long long)rt->lim.max_loop_iters);
            jv_push(rt->a, &r, jv_int(i));
            if (__builtin_add_overflow(i, a[2], &i)) break;     /* past int64's end: past the stop too */
        }
        return r;
    }
    case JJ_FN_NAMESPACE: case JJ_FN_DICT: {
        jv d = jv_dict(rt->a, (size_t)n);
        for (int i = 0; i < n; i++) {
            if (kw[i]) { jv_dset(rt->a, &d, jv_cstr(rt->a, kw[i]), args[i]); continue; }
            if (args[i].t != JV_DICT) rt_err(rt, line, "%s() positional argument must be a mapping",
                                             fn == JJ_FN_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < args[i].d->n; k++) jv_dset(rt->a, &d, args[i].d->k[k], args[i].d->v[k]);
        }
        if (fn == JJ_FN_NAMESPACE) d.t = JV_NS;
        return d;
    }
    case JJ_FN_RAISE: {
        jv m = n > 0 ? jv_to_str(rt->a, args[0]) : jv_cstr(rt->a, "");
        rt_err(rt, line, "%s", m.s->p);
    }
    case JJ_FN_STRFTIME: {
        if (n < 1 || args[0].t != JV_STR) rt_err(rt, line, "strftime_now expects a format string");
        /* a fixed clock (tests, reproducible prompts) is read in UTC */
        time_t now = rt->lim.now ? rt->lim.now : time(NULL);
        struct tm tm;
        if (rt->lim.now) gmtime_r(&now, &tm);
        else localtime_r(&now, &tm);
        char out[256];
        size_t k = strftime(out, sizeof out, args[0].s->p, &tm);
        return jv_str(rt->a, out, k);
    }
    default: rt_err(rt, line, "this object is not callable");
    }
}

static jv eval_call(jj_rt *rt, frame *f, const jj_node *n)
{
    int na = n->n_kids;
    jv *args = jj_alloc(rt->a, (size_t)(na ? na : 1) * sizeof *args);
    for (int i = 0; i < na; i++) args[i] = eval(rt, f, n->kids[i]);
    const char **kw = n->kw;
    if (n->a->kind == N_ATTR) {
        jv self = eval(rt, f, n->a->a);
        if (self.t == JV_LOOP && !strcmp(n->a->name, "cycle")) {
            if (na == 0) rt_err(rt, n->line, "no items for cycling given");
            return args[self.lp->i % na];
        }
        bool found;
        jv r = jj_call_method(rt, n->line, self, n->a->name, args, kw, na, &found);
        if (found) return r;
        jv callee = jj_getattr(rt, n->line, self, n->a->name);
        if (callee.t == JV_MACRO) return call_macro(rt, n->line, (jmacro *)callee.m, args, kw, na);
        rt_err(rt, n->line, "'%s' object has no callable attribute '%s'", jv_type_name(self), n->a->name);
    }
    jv callee = eval(rt, f, n->a);
    if (callee.t == JV_MACRO) return call_macro(rt, n->line, (jmacro *)callee.m, args, kw, na);
    if (callee.t == JV_FUNC) return call_builtin(rt, n->line, callee.fn, args, kw, na);
    if (callee.t == JV_UNDEF) rt_err(rt, n->line, "'%s' is undefined", n->a->kind == N_NAME ? n->a->name : "value");
    rt_err(rt, n->line, "'%s' object is not callable", jv_type_name(callee));
}

static jv str_concat(jj_rt *rt, jv a, jv b)
{
    jstr *r = jj_alloc(rt->a, sizeof *r + a.s->n + b.s->n + 1);
    memcpy(r->p, a.s->p, a.s->n);
    memcpy(r->p + a.s->n, b.s->p, b.s->n);
    r->n = a.s->n + b.s->n;
    return (jv){ .t = JV_STR, .s = r };
}

static jv arith(jj_rt *rt, int line, int op, jv a, jv b)
{
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) rt_err(rt, line, "arithmetic on an undefined value");
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        /* Markup + str escapes the plain side and stays Markup (markupsafe) */
        if (!a.safe && !b.safe) return str_concat(rt, a, b);
        jv r = str_concat(rt, jv_escape(rt->a, a), jv_escape(rt->a, b));
        r.safe = true;
        return r;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && !a.l->gen && !b.l->gen) {
        jv r = jv_list(rt->a, a.l->n + b.l->n);
        for (size_t i = 0; i < a.l->n; i++) jv_push(rt->a, &r, a.l->v[i]);
        for (size_t i = 0; i < b.l->n; i++) jv_push(rt->a, &r, b.l->v[i]);
        r.l->tuple = a.l->tuple;
        return r;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) {
        int64_t k = b.t == JV_INT ? b.i : b.b, size;
        if (__builtin_mul_overflow(k, (int64_t)(a.t == JV_STR ? a.s->n : a.l->n), &size) ||
            size > (int64_t)rt->lim.max_output_bytes)
            jj_throw(rt->fail, PK_EFULL, line, "repetition larger than the output limit");
        jv r = a.t == JV_STR ? jv_str(rt->a, "", 0) : jv_list(rt->a, 0);
        for (int64_t i = 0; i < k; i++) {
            if (a.t == JV_STR) r = str_concat(rt, r, a);
            else for (size_t j = 0; j < a.l->n; j++) jv_push(rt->a, &r, a.l->v[j]);
        }
        return r;
    }
    if (!jv_is_num(a) || !jv_is_num(b))
        rt_err(rt, line, "unsupported operand type(s): '%s' and '%s'", jv_type_name(a), jv_type_name(b));
    bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    double x = jv_num(a), y = jv_num(b);
    /* a float's union member is not a bool: read only the one that is set */
    int64_t i = a.t == JV_INT ? a.i : a.t == JV_BOOL ? a.b : 0, j = b.t == JV_INT ? b.i : b.t == JV_BOOL ? b.b : 0, r;
    /* Python's integers do not overflow; ours are 64 bits, so a result
     * that leaves them is an error rather than a wrong number. */
    switch (op) {
    case OP_ADD:
        if (fl) return jv_float(x + y);
        if (__builtin_add_overflow(i, j, &r)) rt_err(rt, line, "integer overflow");
        return jv_int(r);
    case OP_SUB:
        if (fl) return jv_float(x - y);
        if (__builtin_sub_overflow(i, j, &r)) rt_err(rt, line, "integer overflow");
        return jv_int(r);
    case OP_MUL:
        if (fl) return jv_float(x * y);
        if (__builtin_mul_overflow(i, j, &r)) rt_err(rt, line, "integer overflow");
        return jv_int(r);
    case OP_DIV:
        if (y == 0) rt_err(rt, line, "division by zero");
        return jv_float(x / y);
    case OP_FDIV: case OP_MOD:
        if (y == 0) rt_err(rt, line, "integer division or modulo by zero");
        if (fl) {
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return op == OP_MOD ? jv_float(m) : jv_float(floor((x - m) / y + 0.5));
        } else {
            if (i == INT64_MIN && j == -1) rt_err(rt, line, "integer overflow");
            int64_t q = i / j, m = i % j;
            if (m != 0 && ((m < 0) != (j < 0))) { q--; m += j; }
            return op == OP_MOD ? jv_int(m) : jv_int(q);
        }
    case OP_POW:
        if (!fl && j >= 0) {
            if (i == 0 || i == 1) return jv_int(j == 0 ? 1 : i);
            if (i == -1) return jv_int(j % 2 ? -1 : 1);
            int64_t p = 1;           /* |i| >= 2: at most 63 steps before overflow */
            for (int64_t k = 0; k < j; k++)
                if (__builtin_mul_overflow(p, i, &p)) rt_err(rt, line, "integer overflow");
            return jv_int(p);
        }
        return jv_float(pow(x, y));
    default: rt_err(rt, line, "bad operator");
    }
}

static bool contains(jj_rt *rt, int line, jv needle, jv hay)
{
    switch (hay.t) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (needle.t != JV_STR) rt_err(rt, line, "'in <string>' requires string as left operand");
        return needle.s->n == 0 || memmem(hay.s->p, hay.s->n, needle.s->p, needle.s->n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.l->n; i++) if (jv_eq(hay.l->v[i], needle)) return true;
        return false;
    case JV_DICT: return jv_dget(hay.d, needle) != NULL;
    default: rt_err(rt, line, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

static jv eval_filter(jj_rt *rt, frame *f, const jj_node *n, jv input)
{
    /* jinja2 3 reports an unknown filter only when it runs */
    if (n->filt < 0) rt_err(rt, n->line, "No filter named '%s'.", n->name);
    int na = n->n_kids + 1;
    jv *args = jj_alloc(rt->a, (size_t)na * sizeof *args);
    const char **kw = jj_alloc(rt->a, (size_t)na * sizeof *kw);
    args[0] = input;
    for (int i = 1; i < na; i++) { args[i] = eval(rt, f, n->kids[i - 1]); kw[i] = n->kw[i - 1]; }
    return jj_apply_filter(rt, n->line, n->filt, args, kw, na);
}

static jv eval_node(jj_rt *rt, frame *f, const jj_node *n);

/* The parser bounds nesting of brackets, but a chain of 100k operators or
 * filters is a tree as deep; this keeps its walk off the end of the stack. */
static jv eval(jj_rt *rt, frame *f, const jj_node *n)
{
    if (++rt->eval_depth > 2000)
        jj_throw(rt->fail, PK_EFULL, n->line, "expression nested deeper than 2000 operations");
    jv v = eval_node(rt, f, n);
    rt->eval_depth--;
    return v;
}

static jv eval_node(jj_rt *rt, frame *f, const jj_node *n)
{
    switch (n->kind) {
    case N_LIT: return n->lit;
    case N_NAME: return lookup(f, n->name);
    case N_LIST: case N_TUPLE: {
        jv r = jv_list(rt->a, (size_t)n->n_kids);
        for (int i = 0; i < n->n_kids; i++) jv_push(rt->a, &r, eval(rt, f, n->kids[i]));
        r.l->tuple = n->kind == N_TUPLE;
        return r;
    }
    case N_DICT: {
        jv d = jv_dict(rt->a, (size_t)n->n_kids / 2);
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            jv k = eval(rt, f, n->kids[i]);
            if (k.t == JV_LIST || k.t == JV_DICT) rt_err(rt, n->line, "unhashable type: '%s'", jv_type_name(k));
            jv_dset(rt->a, &d, k, eval(rt, f, n->kids[i + 1]));
        }
        return d;
    }
    case N_ATTR: return jj_getattr(rt, n->line, eval(rt, f, n->a), n->name);
    case N_ITEM: return jj_getitem(rt, n->line, eval(rt, f, n->a), eval(rt, f, n->b));
    case N_SLICE: {
        jv obj = eval(rt, f, n->a);
        jv a = n->b ? eval(rt, f, n->b) : jv_none(), b = n->c ? eval(rt, f, n->c) : jv_none();
        jv c = n->body ? eval(rt, f, n->body) : jv_none();
        return do_slice(rt, n->line, obj, a, b, c);
    }
    case N_CALL: return eval_call(rt, f, n);
    case N_FILTER: return eval_filter(rt, f, n, eval(rt, f, n->a));
    case N_TEST: {
        if (n->filt < 0) rt_err(rt, n->line, "No test named '%s'.", n->name);
        int na = n->n_kids + 1;
        jv *args = jj_alloc(rt->a, (size_t)na * sizeof *args);
        args[0] = eval(rt, f, n->a);
        for (int i = 1; i < na; i++) args[i] = eval(rt, f, n->kids[i - 1]);
        bool r = jj_apply_test(rt, n->line, n->filt, args, na);
        return jv_bool(n->op ? !r : r);
    }
    case N_UNARY: {
        jv v = eval(rt, f, n->a);
        if (!jv_is_num(v)) rt_err(rt, n->line, "bad operand type for unary %s: '%s'", n->op == OP_NEG ? "-" : "+", jv_type_name(v));
        if (n->op == OP_POS) return v.t == JV_BOOL ? jv_int(v.b) : v;
        if (v.t == JV_INT && v.i == INT64_MIN) rt_err(rt, n->line, "integer overflow");
        return v.t == JV_FLOAT ? jv_float(-v.f) : jv_int(-(v.t == JV_INT ? v.i : v.b));
    }
    case N_BINARY: {
        jv a = eval(rt, f, n->a), b = eval(rt, f, n->b);
        switch (n->op) {
        case OP_EQ: return jv_bool(jv_eq(a, b));
        case OP_NE: return jv_bool(!jv_eq(a, b));
        case OP_LT: return jv_bool(jj_compare(rt, n->line, a, b) < 0);
        case OP_LE: return jv_bool(jj_compare(rt, n->line, a, b) <= 0);
        case OP_GT: return jv_bool(jj_compare(rt, n->line, a, b) > 0);
        case OP_GE: return jv_bool(jj_compare(rt, n->line, a, b) >= 0);
        case OP_IN: return jv_bool(contains(rt, n->line, a, b));
        case OP_NOTIN: return jv_bool(!contains(rt, n->line, a, b));
        default: return arith(rt, n->line, n->op, a, b);
        }
    }
    case N_AND: { jv a = eval(rt, f, n->a); return jv_truthy(a) ? eval(rt, f, n->b) : a; }
    case N_OR: { jv a = eval(rt, f, n->a); return jv_truthy(a) ? a : eval(rt, f, n->b); }
    case N_NOT: return jv_bool(!jv_truthy(eval(rt, f, n->a)));
    case N_COND:
        if (jv_truthy(eval(rt, f, n->a))) return eval(rt, f, n->b);
        return n->c ? eval(rt, f, n->c) : jv_undef();
    case N_CONCAT: {
        pk_buf *b = jj_buf(rt->a);
        for (int i = 0; i < n->n_kids; i++) jv_write_str(b, eval(rt, f, n->kids[i]));
        jv r = jv_str(rt->a, b->p ? b->p : "", b->n);
        bool oom = b->oom;
        pk_buf_free(b);
        if (oom) jj_throw(rt->fail, PK_ENOMEM, n->line, "out of memory");
        return r;
    }
    default: rt_err(rt, n->line, "not an expression");
    }
}

/* ---- statements ------------------------------------------------------- */

static void out_check(jj_rt *rt, int line)
{
    if (rt->out->oom) jj_throw(rt->fail, PK_ENOMEM, line, "out of memory");
    if (rt->out->n > rt->lim.max_output_bytes)
        jj_throw(rt->fail, PK_EFULL, line, "output longer than %zu bytes", rt->lim.max_output_bytes);
}

static void assign(jj_rt *rt, frame *f, const jj_node *target, jv v, int line)
{
    if (target->kind == N_NAME) { frame_set(rt, f, target->name, v); return; }
    if (target->kind != N_TUPLE) rt_err(rt, line, "cannot assign to this expression");
    jv items = jj_iter_list(rt, line, v);
    if ((int)items.l->n != target->n_kids)
        rt_err(rt, line, "cannot unpack %zu values into %d names", items.l->n, target->n_kids);
    for (int i = 0; i < target->n_kids; i++) assign(rt, f, target->kids[i], items.l->v[i], line);
}

static int exec_for(jj_rt *rt, frame *f, const jj_node *n)
{
    jv src = eval(rt, f, n->b);
    jv all = jj_iter_list(rt, n->line, src);
    jv items = all;
    if (n->c) {
        items = jv_list(rt->a, all.l->n);
        for (size_t i = 0; i < all.l->n; i++) {
            frame *tf = frame_new(rt, f);
            assign(rt, tf, n->a, all.l->v[i], n->line);
            if (jv_truthy(eval(rt, tf, n->c))) jv_push(rt->a, &items, all.l->v[i]);
        }
    }
    jloop *lp = jj_alloc(rt->a, sizeof *lp);
    lp->items = items.l->v;
    lp->n = (int64_t)items.l->n;
    for (lp->i = 0; lp->i < lp->n; lp->i++) {
        if (++rt->n_iters > rt->lim.max_loop_iters)
            jj_throw(rt->fail, PK_EFULL, n->line, "more than %lld loop iterations", (long long)rt->lim.max_loop_iters);
        frame *lf = frame_new(rt, f);
        frame_set(rt, lf, "loop", (jv){ .t = JV_LOOP, .lp = lp });
        assign(rt, lf, n->a, items.l->v[lp->i], n->line);
        if (exec_body(rt, lf, n->body) == EX_BREAK) break;
    }
    if (lp->n == 0 && n->alt) return exec_body(rt, f, n->alt);
    return EX_OK;
}

static jv apply_filters(jj_rt *rt, frame *f, const jj_node *n, jv v)
{
    for (int i = 0; i < n->n_kids; i++) v = eval_filter(rt, f, n->kids[i], v);
    return v;
}

static int exec(jj_rt *rt, frame *f, const jj_node *n)
{
    switch (n->kind) {
    case N_TEXT:
        pk_buf_put(rt->out, n->lit.s->p, n->lit.s->n);
        out_check(rt, n->line);
        return EX_OK;
    case N_OUTPUT:
        jv_write_str(rt->out, eval(rt, f, n->a));
        out_check(rt, n->line);
        return EX_OK;
    case N_IF:
        if (jv_truthy(eval(rt, f, n->a))) return exec_body(rt, f, n->b);
        return n->c ? (n->c->kind == N_IF ? exec(rt, f, n->c) : exec_body(rt, f, n->c)) : EX_OK;
    case N_FOR: return exec_for(rt, f, n);
    case N_SET: {
        jv v = eval(rt, f, n->b);
        if (!n->name) { assign(rt, f, n->a, v, n->line); return EX_OK; }
        jv ns = lookup(f, n->a->name);
        if (ns.t != JV_NS) rt_err(rt, n->line, "cannot assign attribute on non-namespace object");
        jv_dset(rt->a, &ns, jv_cstr(rt->a, n->name), v);
        return EX_OK;
    }
    case N_SETBLOCK:
        frame_set(rt, f, n->a->name, apply_filters(rt, f, n, render_to_str(rt, f, n->body)));
        return EX_OK;
    case N_MACRO: {
        jmacro *m = jj_alloc(rt->a, sizeof *m);
        m->def = n;
        m->env = f;
        frame_set(rt, f, n->name, (jv){ .t = JV_MACRO, .m = (jj_node *)m });
        return EX_OK;
    }
    case N_CALLBLOCK: {
        const jj_node *call = n->a;
        jv callee = eval(rt, f, call->a);
        if (callee.t != JV_MACRO) rt_err(rt, n->line, "call block on something that is not a macro");
        jmacro *caller = jj_alloc(rt->a, sizeof *caller);
        caller->def = n->b;
        caller->env = f;
        jmacro m = *(jmacro *)callee.m;
        m.caller = caller;
        jv *args = jj_alloc(rt->a, (size_t)(call->n_kids + 1) * sizeof *args);
        for (int i = 0; i < call->n_kids; i++) args[i] = eval(rt, f, call->kids[i]);
        jv r = call_macro(rt, n->line, &m, args, call->kw, call->n_kids);
        pk_buf_put(rt->out, r.s->p, r.s->n);
        out_check(rt, n->line);
        return EX_OK;
    }
    case N_FILTERBLOCK: {
        jv v = apply_filters(rt, f, n, render_to_str(rt, f, n->body));
        jv_write_str(rt->out, v);
        out_check(rt, n->line);
        return EX_OK;
    }
    case N_BREAK: return EX_BREAK;
    case N_CONTINUE: return EX_CONTINUE;
    case N_BODY: return exec_body(rt, f, n);
    default: rt_err(rt, n->line, "not a statement");
    }
}

static int exec_body(jj_rt *rt, frame *f, const jj_node *body)
{
    for (int i = 0; i < body->n_kids; i++) {
        int r = exec(rt, f, body->kids[i]);
        if (r != EX_OK) return r;
    }
    return EX_OK;
}

/* ---- entry points ----------------------------------------------------- */

static void put_err(char *err, size_t err_len, const jj_fail *fl)
{
    if (!err || !err_len) return;
    if (fl->line > 0) snprintf(err, err_len, "line %d: %s", fl->line, fl->msg);
    else snprintf(err, err_len, "%s", fl->msg);
}

pk_status jj_compile(const char *src, size_t n, jj_tmpl **out, char *err, size_t err_len)
{
    jj_tmpl *t = calloc(1, sizeof *t);
    if (!t) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    jj_fail fl = { 0 };
    t->a.fail = &fl;
    t->a.max_bytes = 64u << 20;
    if (setjmp(fl.jb)) {
        jj_arena_free(&t->a);
        free(t);
        put_err(err, err_len, &fl);
        return fl.st;
    }
    t->root = jj_parse(&t->a, src, n);
    t->a.fail = NULL;
    *out = t;
    return PK_OK;
}

void jj_free(jj_tmpl *t)
{
    if (!t) return;
    jj_arena_free(&t->a);
    free(t);
}

pk_status jj_render(const jj_tmpl *t, const json_t *ctx, const jj_limits *lim, char **out,
                    size_t *n_out, char *err, size_t err_len)
{
    jj_fail fl = { 0 };
    jj_arena a = { .fail = &fl };
    pk_buf b = { 0 };
    jj_rt rt = { .a = &a, .fail = &fl, .out = &b };
    if (lim) rt.lim = *lim;
    if (!rt.lim.max_output_bytes) rt.lim.max_output_bytes = 8u << 20;
    if (!rt.lim.max_memory_bytes) rt.lim.max_memory_bytes = 256u << 20;
    if (!rt.lim.max_loop_iters) rt.lim.max_loop_iters = 1000000;
    if (!rt.lim.max_depth) rt.lim.max_depth = 64;
    a.max_bytes = rt.lim.max_memory_bytes;
    if (setjmp(fl.jb)) {
        jj_arena_free(&a);
        pk_buf_free(&b);
        put_err(err, err_len, &fl);
        return fl.st;
    }
    rt.globals = frame_new(&rt, NULL);
    static const struct { const char *name; int fn; } builtins[] = {
        { "range", JJ_FN_RANGE }, { "namespace", JJ_FN_NAMESPACE }, { "dict", JJ_FN_DICT },
        { "raise_exception", JJ_FN_RAISE }, { "strftime_now", JJ_FN_STRFTIME },
    };
    for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
        frame_set(&rt, rt.globals, builtins[i].name, (jv){ .t = JV_FUNC, .fn = builtins[i].fn });
    if (ctx && json_is_object(ctx)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)ctx, k, v)
            frame_set(&rt, rt.globals, jj_strndup(&a, k, strlen(k)), jv_from_json(&a, v));
    }
    frame *top = frame_new(&rt, rt.globals);
    exec_body(&rt, top, t->root);
    pk_buf_put(&b, "", 0);
    if (b.oom) jj_throw(&fl, PK_ENOMEM, 0, "out of memory");
    jj_arena_free(&a);
    *n_out = b.n;
    *out = b.p ? b.p : strdup("");
    if (!*out) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    return PK_OK;
}
