/*
 * jj_filt.c - jinja2's filters and tests, and the methods of str, dict and
 * list that the immutable sandbox allows, with Python's semantics (str
 * methods count code points; case mapping is ASCII only).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>

#include "jj_impl.h"

static _Noreturn void ferr(jj_rt *rt, int line, const char *msg, const char *name)
{
    jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "%s%s%s", name ? name : "", name ? ": " : "", msg);
}

static jv buf_to_jv(jj_rt *rt, int line, pk_buf *b)
{
    if (b->oom) { pk_buf_free(b); jj_throw(jj_rt_fail(rt), PK_ENOMEM, line, "out of memory"); }
    jv r = jv_str(jj_rt_arena(rt), b->p ? b->p : "", b->n);
    pk_buf_free(b);
    return r;
}

static jv to_str(jj_rt *rt, jv v) { return jv_to_str(jj_rt_arena(rt), v); }

/* An argument by position (after the input) or keyword; *missing when absent. */
static jv arg(jv *args, const char **kw, int n, int pos, const char *name, jv dflt)
{
    for (int i = 1; i < n; i++) if (kw[i] && !strcmp(kw[i], name)) return args[i];
    int p = 0;
    for (int i = 1; i < n; i++) {
        if (kw[i]) continue;
        if (++p == pos) return args[i];
    }
    return dflt;
}

static bool py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

/* str.strip / lstrip / rstrip: chars NULL = whitespace. */
static jv strip(jj_rt *rt, jv s, jv chars, bool left, bool right)
{
    const char *p = s.s->p;
    size_t a = 0, b = s.s->n;
    bool ws = chars.t != JV_STR;
    #define IN_SET(c) (ws ? py_space((unsigned char)(c)) : memchr(chars.s->p, (c), chars.s->n) != NULL)
    if (left) while (a < b && IN_SET(p[a])) a++;
    if (right) while (b > a && IN_SET(p[b - 1])) b--;
    #undef IN_SET
    return jv_str(jj_rt_arena(rt), p + a, b - a);
}

static jv str_case(jj_rt *rt, jv s, int mode)   /* 0 lower, 1 upper, 2 capitalize, 3 title */
{
    jv r = jv_str(jj_rt_arena(rt), s.s->p, s.s->n);
    char *p = r.s->p;
    bool word_start = true;
    for (size_t i = 0; i < r.s->n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (mode == 0) p[i] = (char)tolower(c);
        else if (mode == 1) p[i] = (char)toupper(c);
        else if (mode == 2) p[i] = (char)(i == 0 ? toupper(c) : tolower(c));
        else {
            /* jinja2's title: a word starts after whitespace or one of -([{< */
            p[i] = (char)(word_start ? toupper(c) : tolower(c));
            word_start = py_space(c) || strchr("-({[<", c) != NULL;
            if (c == 0) word_start = false;
        }
    }
    return r;
}

static jv str_replace(jj_rt *rt, int line, jv s, jv old, jv new_, int64_t count)
{
    if (old.t != JV_STR || new_.t != JV_STR) ferr(rt, line, "replace() arguments must be strings", NULL);
    pk_buf *b = jj_buf(jj_rt_arena(rt));
    const char *p = s.s->p, *end = p + s.s->n;
    int64_t done = 0;
    if (old.s->n == 0) {
        /* Python inserts the new text between every character and at both ends */
        for (size_t i = 0; i <= s.s->n; i++) {
            if (count < 0 || done < count) { pk_buf_put(b, new_.s->p, new_.s->n); done++; }
            if (i < s.s->n) pk_buf_put(b, p + i, 1);
        }
        return buf_to_jv(rt, line, b);
    }
    while (p < end) {
        const char *hit = (count < 0 || done < count) ? memmem(p, (size_t)(end - p), old.s->p, old.s->n) : NULL;
        if (!hit) { pk_buf_put(b, p, (size_t)(end - p)); break; }
        pk_buf_put(b, p, (size_t)(hit - p));
        pk_buf_put(b, new_.s->p, new_.s->n);
        p = hit + old.s->n;
        done++;
    }
    return buf_to_jv(rt, line, b);
}

static jv str_split(jj_rt *rt, int line, jv s, jv sep, int64_t maxsplit, bool from_right)
{
    jj_arena *a = jj_rt_arena(rt);
    jv r = jv_list(a, 4);
    const char *p = s.s->p;
    size_t n = s.s->n;
    if (sep.t != JV_STR) {
        /* on runs of whitespace, no empty strings */
        jv parts = jv_list(a, 4);
        size_t i = 0;
        while (i < n) {
            while (i < n && py_space((unsigned char)p[i])) i++;
            if (i >= n) break;
            size_t j = i;
            while (j < n && !py_space((unsigned char)p[j])) j++;
            jv_push(a, &parts, jv_str(a, p + i, j - i));
            i = j;
        }
        if (maxsplit < 0 || (int64_t)parts.l->n <= maxsplit + 1) return parts;
        /* rare: a bounded whitespace split keeps the rest verbatim */
        size_t k = 0, pos = 0;
        while (k < (size_t)maxsplit) {
            while (pos < n && py_space((unsigned char)p[pos])) pos++;
            size_t j = pos;
            while (j < n && !py_space((unsigned char)p[j])) j++;
            jv_push(a, &r, jv_str(a, p + pos, j - pos));
            pos = j;
            k++;
        }
        while (pos < n && py_space((unsigned char)p[pos])) pos++;
        jv_push(a, &r, jv_str(a, p + pos, n - pos));
        (void)from_right;
        return r;
    }
    if (sep.s->n == 0) ferr(rt, line, "empty separator", NULL);
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, n - i, sep.s->p, sep.s->n) : NULL;
            if (!hit) { jv_push(a, &r, jv_str(a, p + i, n - i)); break; }
            jv_push(a, &r, jv_str(a, p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + sep.s->n;
            done++;
        }
        return r;
    }
    /* rsplit: find from the end, then reverse */
    jv rev = jv_list(a, 4);
    size_t end = n;
    int64_t done = 0;
    for (;;) {
        size_t hit = (size_t)-1;
        if ((maxsplit < 0 || done < maxsplit) && end >= sep.s->n)
            for (size_t k = end - sep.s->n + 1; k-- > 0;)
                if (memcmp(p + k, sep.s->p, sep.s->n) == 0) { hit = k; break; }
        if (hit == (size_t)-1) { jv_push(a, &rev, jv_str(a, p, end)); break; }
        jv_push(a, &rev, jv_str(a, p + hit + sep.s->n, end - hit - sep.s->n));
        end = hit;
        done++;
    }
    for (size_t k = rev.l->n; k-- > 0;) jv_push(a, &r, rev.l->v[k]);
    return r;
}

static int64_t str_find(jv s, jv sub, bool rev)
{
    if (sub.s->n > s.s->n) return -1;
    if (!rev) {
        const char *h = memmem(s.s->p, s.s->n, sub.s->p, sub.s->n);
        return h ? (int64_t)jj_utf8_len(s.s->p, (size_t)(h - s.s->p)) : -1;
    }
    for (size_t k = s.s->n - sub.s->n + 1; k-- > 0;)
        if (memcmp(s.s->p + k, sub.s->p, sub.s->n) == 0) return (int64_t)jj_utf8_len(s.s->p, k);
    return -1;
}

static bool affix(jv s, jv x, bool end)
{
    if (x.t == JV_LIST) {
        for (size_t i = 0; i < x.l->n; i++) if (affix(s, x.l->v[i], end)) return true;
        return false;
    }
    if (x.t != JV_STR || x.s->n > s.s->n) return false;
    return memcmp(s.s->p + (end ? s.s->n - x.s->n : 0), x.s->p, x.s->n) == 0;
}

/* "{} and {0} and {name}".format(...): fields without format specs. */
static jv str_format(jj_rt *rt, int line, jv s, jv *args, const char **kw, int n)
{
    pk_buf *b = jj_buf(jj_rt_arena(rt));
    int auto_i = 0;
    for (size_t i = 0; i < s.s->n; i++) {
        char c = s.s->p[i];
        if ((c == '{' || c == '}') && i + 1 < s.s->n && s.s->p[i + 1] == c) { pk_buf_put(b, &c, 1); i++; continue; }
        if (c != '{') { pk_buf_put(b, &c, 1); continue; }
        size_t j = i + 1;
        while (j < s.s->n && s.s->p[j] != '}') j++;
        if (j >= s.s->n) { pk_buf_free(b); ferr(rt, line, "Single '{' encountered in format string", NULL); }
        const char *f = s.s->p + i + 1;
        size_t fn = j - i - 1;
        jv v = jv_undef();
        bool found = false;
        if (fn == 0 || isdigit((unsigned char)f[0])) {
            int idx = fn == 0 ? auto_i++ : atoi(f), p = 0;
            for (int k = 0; k < n; k++) if (!kw[k] && p++ == idx) { v = args[k]; found = true; }
        } else {
            for (int k = 0; k < n; k++) if (kw[k] && strlen(kw[k]) == fn && !memcmp(kw[k], f, fn)) { v = args[k]; found = true; }
        }
        if (!found) { pk_buf_free(b); ferr(rt, line, "format(): missing argument", NULL); }
        jv_write_str(b, v);
        i = j;
    }
    return buf_to_jv(rt, line, b);
}

static jv items_of(jj_rt *rt, jv d)
{
    jj_arena *a = jj_rt_arena(rt);
    jv r = jv_list(a, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) {
        jv t = jv_list(a, 2);
        t.l->tuple = true;
        jv_push(a, &t, d.d->k[i]);
        jv_push(a, &t, d.d->v[i]);
        jv_push(a, &r, t);
    }
    return r;
}

jv jj_call_method(jj_rt *rt, int line, jv self, const char *name, jv *args, const char **kw,
                  int n, bool *found)
{
    jj_arena *a = jj_rt_arena(rt);
    *found = true;
    jv none = jv_none();
    jv *full = jj_alloc(a, (size_t)(n + 1) * sizeof *full);
    const char **fkw = jj_alloc(a, (size_t)(n + 1) * sizeof *fkw);
    full[0] = self;
    for (int i = 0; i < n; i++) { full[i + 1] = args[i]; fkw[i + 1] = kw[i]; }
    int fn = n + 1;
    #define A(pos, nm) arg(full, fkw, fn, pos, nm, none)
    if (self.t == JV_STR) {
        if (!strcmp(name, "strip")) return strip(rt, self, A(1, "chars"), true, true);
        if (!strcmp(name, "lstrip")) return strip(rt, self, A(1, "chars"), true, false);
        if (!strcmp(name, "rstrip")) return strip(rt, self, A(1, "chars"), false, true);
        if (!strcmp(name, "lower")) return str_case(rt, self, 0);
        if (!strcmp(name, "upper")) return str_case(rt, self, 1);
        if (!strcmp(name, "capitalize")) return str_case(rt, self, 2);
        if (!strcmp(name, "title")) return str_case(rt, self, 3);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            jv x = A(1, "prefix");
            if (x.t != JV_STR && x.t != JV_LIST) ferr(rt, line, "startswith/endswith arg must be str or a tuple of str", NULL);
            return jv_bool(affix(self, x, name[0] == 'e'));
        }
        if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
            jv m = A(2, "maxsplit");
            return str_split(rt, line, self, A(1, "sep"), m.t == JV_INT ? m.i : -1, name[0] == 'r');
        }
        if (!strcmp(name, "replace")) {
            jv c = A(3, "count");
            return str_replace(rt, line, self, A(1, "old"), A(2, "new"), c.t == JV_INT ? c.i : -1);
        }
        if (!strcmp(name, "find") || !strcmp(name, "rfind")) {
            jv x = A(1, "sub");
            if (x.t != JV_STR) ferr(rt, line, "must be str", "find");
            return jv_int(str_find(self, x, name[0] == 'r'));
        }
        if (!strcmp(name, "count")) {
            jv x = A(1, "sub");
            if (x.t != JV_STR) ferr(rt, line, "must be str", "count");
            if (x.s->n == 0) return jv_int((int64_t)jj_utf8_len(self.s->p, self.s->n) + 1);
            int64_t c = 0;
            for (const char *p = self.s->p, *e = p + self.s->n; (p = memmem(p, (size_t)(e - p), x.s->p, x.s->n)); p += x.s->n) c++;
            return jv_int(c);
        }
        if (!strcmp(name, "format")) return str_format(rt, line, self, args, kw, n);
        if (!strcmp(name, "join")) {
            jv items = jj_iter_list(rt, line, A(1, "iterable"));
            pk_buf *b = jj_buf(jj_rt_arena(rt));
            for (size_t i = 0; i < items.l->n; i++) {
                if (items.l->v[i].t != JV_STR) { pk_buf_free(b); ferr(rt, line, "sequence item: expected str instance", "join"); }
                if (i) pk_buf_put(b, self.s->p, self.s->n);
                pk_buf_put(b, items.l->v[i].s->p, items.l->v[i].s->n);
            }
            return buf_to_jv(rt, line, b);
        }
        if (!strcmp(name, "isdigit") || !strcmp(name, "isalpha") || !strcmp(name, "isspace") ||
            !strcmp(name, "isalnum") || !strcmp(name, "islower") || !strcmp(name, "isupper")) {
            bool ok = self.s->n > 0, cased = false;
            for (size_t i = 0; i < self.s->n; i++) {
                unsigned char c = (unsigned char)self.s->p[i];
                switch (name[2]) {
                case 'd': ok = ok && isdigit(c); break;
                case 'a': ok = ok && (name[4] == 'p' ? isalpha(c) : isalnum(c)); break;
                case 's': ok = ok && py_space(c); break;
                case 'l': if (isupper(c)) ok = false; cased |= islower(c) != 0; break;
                case 'u': if (islower(c)) ok = false; cased |= isupper(c) != 0; break;
                }
            }
            return jv_bool(ok && (name[2] == 'l' || name[2] == 'u' ? cased : true));
        }
    }
    if (self.t == JV_DICT) {
        if (!strcmp(name, "get")) {
            jv *v = jv_dget(self.d, A(1, "key"));
            return v ? *v : A(2, "default");
        }
        if (!strcmp(name, "items")) return items_of(rt, self);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            jv r = jv_list(a, self.d->n);
            for (size_t i = 0; i < self.d->n; i++) jv_push(a, &r, name[0] == 'k' ? self.d->k[i] : self.d->v[i]);
            return r;
        }
        if (!strcmp(name, "pop") || !strcmp(name, "update") || !strcmp(name, "clear") ||
            !strcmp(name, "setdefault") || !strcmp(name, "popitem"))
            jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "access to attribute '%s' of 'dict' object is unsafe.", name);
        if (!strcmp(name, "copy")) {
            jv r = jv_dict(a, self.d->n);
            for (size_t i = 0; i < self.d->n; i++) jv_dset(a, &r, self.d->k[i], self.d->v[i]);
            return r;
        }
    }
    if (self.t == JV_LIST) {
        if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "extend") || !strcmp(name, "insert") ||
            !strcmp(name, "remove") || !strcmp(name, "sort") || !strcmp(name, "reverse") || !strcmp(name, "clear"))
            jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "access to attribute '%s' of '%s' object is unsafe.", name,
                     jv_type_name(self));
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            jv x = A(1, "value");
            int64_t c = 0;
            for (size_t i = 0; i < self.l->n; i++) {
                if (!jv_eq(self.l->v[i], x)) continue;
                if (name[0] == 'i') return jv_int((int64_t)i);
                c++;
            }
            if (name[0] == 'i') ferr(rt, line, "x not in list", NULL);
            return jv_int(c);
        }
    }
    if (self.t == JV_UNDEF) jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "'%s' of an undefined value", name);
    #undef A
    *found = false;
    return none;
}

/* ---- filters ---------------------------------------------------------- */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_DICTSORT, F_FIRST, F_FLOAT, F_INDENT, F_INT,
    F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR,
    F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE,
    F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_D, F_E,
};
static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "count", "default", "dictsort", "first", "float", "indent", "int",
    "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount", "d", "e",
};

int jj_filter_index(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(filter_names); i++) if (!strcmp(filter_names[i], name)) return (int)i;
    return -1;
}

/* environment.getattr with dotted paths ("function.name"), as jinja2's
 * make_attrgetter; integer parts index lists; an undefined step becomes
 * dflt when there is one (UNDEF = none). */
static jv get_path_d(jj_rt *rt, int line, jv v, jv path, jv dflt)
{
    if (path.t == JV_INT) return jj_getitem(rt, line, v, path);
    if (path.t != JV_STR) ferr(rt, line, "attribute must be a string", NULL);
    const char *p = path.s->p;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t k = dot ? (size_t)(dot - p) : strlen(p);
        jj_arena *a = jj_rt_arena(rt);
        jv key = jv_str(a, p, k);
        bool num = k > 0;
        for (size_t i = 0; i < k; i++) num = num && isdigit((unsigned char)p[i]);
        v = num ? jj_getitem(rt, line, v, jv_int(atoll(key.s->p))) : jj_getitem(rt, line, v, key);
        if (v.t == JV_UNDEF && dflt.t != JV_UNDEF) v = dflt;
        if (!dot) return v;
        p = dot + 1;
    }
}

static jv get_path(jj_rt *rt, int line, jv v, jv path) { return get_path_d(rt, line, v, path, jv_undef()); }

static int cmp_ci(jj_rt *rt, int line, jv a, jv b, bool case_sensitive)
{
    if (!case_sensitive && a.t == JV_STR && b.t == JV_STR) {
        a = str_case(rt, a, 0);
        b = str_case(rt, b, 0);
    }
    return jj_compare(rt, line, a, b);
}

typedef struct sort_ctx { jj_rt *rt; int line; bool cs; jv attr; bool by_value; } sort_ctx;

static jv sort_key(sort_ctx *sc, jv v)
{
    if (sc->by_value) return v.l->v[1];
    if (sc->attr.t == JV_STR || sc->attr.t == JV_INT) return get_path(sc->rt, sc->line, v, sc->attr);
    return v;
}

/* Stable insertion-merge sort (Python's sort is stable); lists here are short. */
static void sort_list(sort_ctx *sc, jv *v, size_t n, bool reverse)
{
    for (size_t i = 1; i < n; i++) {
        jv x = v[i];
        jv kx = sort_key(sc, x);
        size_t j = i;
        while (j > 0) {
            int c = cmp_ci(sc->rt, sc->line, sort_key(sc, v[j - 1]), kx, sc->cs);
            if (reverse ? c >= 0 : c <= 0) break;
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static jv copy_list(jj_rt *rt, jv l)
{
    jv r = jv_list(jj_rt_arena(rt), l.l->n);
    for (size_t i = 0; i < l.l->n; i++) jv_push(jj_rt_arena(rt), &r, l.l->v[i]);
    return r;
}

static jv do_indent(jj_rt *rt, int line, jv s, jv width, bool first, bool blank)
{
    pk_buf *ind = jj_buf(jj_rt_arena(rt)), *b = jj_buf(jj_rt_arena(rt));
    if (width.t == JV_STR) pk_buf_put(ind, width.s->p, width.s->n);
    else for (int64_t i = 0; i < (width.t == JV_INT ? width.i : 4); i++) pk_buf_put(ind, " ", 1);
    pk_buf_put(ind, "", 0);
    const char *p = s.s->p, *e = p + s.s->n;
    bool first_line = true;
    /* s + "\n", then splitlines: every line, the trailing empty one dropped */
    while (p < e || first_line) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        size_t k = nl ? (size_t)(nl - p) : (size_t)(e - p);
        if (!first_line) pk_buf_put(b, "\n", 1);
        if ((first_line && first) || (!first_line && (k > 0 || blank))) pk_buf_put(b, ind->p, ind->n);
        pk_buf_put(b, p, k);
        first_line = false;
        if (!nl) break;
        p = nl + 1;
        if (p >= e) break;
    }
    pk_buf_free(ind);
    return buf_to_jv(rt, line, b);
}

static jv do_tojson(jj_rt *rt, int line, jv *args, const char **kw, int n)
{
    jj_dumps o = { .ensure_ascii = jv_truthy(arg(args, kw, n, 1, "ensure_ascii", jv_bool(false))),
                   .sort_keys = jv_truthy(arg(args, kw, n, 4, "sort_keys", jv_bool(false))) };
    jv ind = arg(args, kw, n, 2, "indent", jv_none()), sep = arg(args, kw, n, 3, "separators", jv_none());
    char spaces[64] = "";
    if (ind.t == JV_INT) {
        int k = (int)MIN(MAX(ind.i, 0), 63);
        memset(spaces, ' ', (size_t)k);
        spaces[k] = 0;
        o.indent = spaces;
    } else if (ind.t == JV_STR) {
        o.indent = ind.s->p;
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (sep.t == JV_LIST && sep.l->n == 2 && sep.l->v[0].t == JV_STR && sep.l->v[1].t == JV_STR) {
        o.item_sep = sep.l->v[0].s->p;
        o.key_sep = sep.l->v[1].s->p;
    }
    pk_buf *b = jj_buf(jj_rt_arena(rt));
    if (!jv_write_json(b, args[0], &o, 0)) {
        pk_buf_free(b);
        jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "Object of type %s is not JSON serializable", jv_type_name(args[0]));
    }
    return buf_to_jv(rt, line, b);
}

static jv select_items(jj_rt *rt, int line, jv *args, const char **kw, int n, bool by_attr, bool keep)
{
    (void)kw;            /* select's arguments are positional in jinja2 */
    jj_arena *a = jj_rt_arena(rt);
    jv r = jv_list(a, 4);
    r.l->gen = true;
    if (!jv_truthy(args[0])) return r;       /* jinja2: `if value:` before iterating */
    jv items = jj_iter_list(rt, line, args[0]);
    int k = 1;
    jv attr = jv_undef();
    if (by_attr) { if (n < 2) ferr(rt, line, "missing attribute", NULL); attr = args[k++]; }
    int test = -1;
    if (k < n) {
        if (args[k].t != JV_STR) ferr(rt, line, "the test name must be a string", NULL);
        test = jj_test_index(args[k].s->p);
        if (test < 0) jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "No test named '%s'.", args[k].s->p);
        k++;
    }
    jv *targs = jj_alloc(a, (size_t)(n + 1) * sizeof *targs);
    for (size_t i = 0; i < items.l->n; i++) {
        jv x = items.l->v[i];
        jv v = by_attr ? get_path(rt, line, x, attr) : x;
        bool ok;
        if (test < 0) ok = jv_truthy(v);
        else {
            targs[0] = v;
            for (int j = k; j < n; j++) targs[1 + j - k] = args[j];
            ok = jj_apply_test(rt, line, test, targs, 1 + n - k);
        }
        if (ok == keep) jv_push(a, &r, x);
    }
    return r;
}

/* Whether (int64_t)f is defined: finite, and inside int64's range. */
static bool f_fits_int(double f)
{
    return f >= -9223372036854775808.0 && f < 9223372036854775808.0;
}

static jv to_int(jv v, jv dflt)
{
    switch (v.t) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.b);
    /* Values past 64 bits (Python would make a big integer) take the
     * default, as what cannot be converted does. */
    case JV_FLOAT: return f_fits_int(v.f) ? jv_int((int64_t)v.f) : dflt;
    case JV_STR: {
        char *end;
        errno = 0;
        long long i = strtoll(v.s->p, &end, 10);
        bool range = errno == ERANGE;
        while (*end && py_space((unsigned char)*end)) end++;
        if (end != v.s->p && !*end) return range ? dflt : jv_int(i);
        double f = strtod(v.s->p, &end);
        while (*end && py_space((unsigned char)*end)) end++;
        if (end != v.s->p && !*end && f_fits_int(f)) return jv_int((int64_t)f);
        return dflt;
    }
    default: return dflt;
    }
}

jv jj_apply_filter(jj_rt *rt, int line, int filt, jv *args, const char **kw, int n)
{
    jj_arena *a = jj_rt_arena(rt);
    jv v = args[0], none = jv_none();
    const char *fname = filter_names[filt];
    switch (filt) {
    case F_SAFE: { jv s = to_str(rt, v); s.safe = true; return s; }
    case F_E: return jv_escape(a, v);
    case F_STRING: return to_str(rt, v);
    case F_D: case F_DEFAULT: {
        jv d = arg(args, kw, n, 1, "default_value", jv_str(a, "", 0));
        bool boolean = jv_truthy(arg(args, kw, n, 2, "boolean", jv_bool(false)));
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return d;
        return v;
    }
    case F_LENGTH: case F_COUNT:
        switch (v.t) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)jj_utf8_len(v.s->p, v.s->n));
        case JV_LIST:
            if (v.l->gen) ferr(rt, line, "object of type 'generator' has no len()", NULL);
            return jv_int((int64_t)v.l->n);
        case JV_DICT: return jv_int((int64_t)v.d->n);
        default: jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "object of type '%s' has no len()", jv_type_name(v));
        }
    case F_TRIM: { jv s = to_str(rt, v); return strip(rt, s, arg(args, kw, n, 1, "chars", none), true, true); }
    case F_UPPER: return str_case(rt, to_str(rt, v), 1);
    case F_LOWER: return str_case(rt, to_str(rt, v), 0);
    case F_CAPITALIZE: return str_case(rt, to_str(rt, v), 2);
    case F_TITLE: return str_case(rt, to_str(rt, v), 3);
    case F_REPLACE: {
        jv c = arg(args, kw, n, 3, "count", none);
        return str_replace(rt, line, to_str(rt, v), to_str(rt, arg(args, kw, n, 1, "old", none)),
                           to_str(rt, arg(args, kw, n, 2, "new", none)), c.t == JV_INT ? c.i : -1);
    }
    case F_TOJSON: return do_tojson(rt, line, args, kw, n);
    case F_ITEMS: {
        if (v.t == JV_UNDEF) { jv r = jv_list(a, 1); r.l->gen = true; return r; }
        if (v.t != JV_DICT) ferr(rt, line, "Can only get item pairs from a mapping.", NULL);
        jv r = items_of(rt, v);
        r.l->gen = true;
        return r;
    }
    case F_LIST: return copy_list(rt, jj_iter_list(rt, line, v));
    case F_JOIN: {
        jv items = jj_iter_list(rt, line, v);
        jv sep = arg(args, kw, n, 1, "d", jv_str(a, "", 0)), attr = arg(args, kw, n, 2, "attribute", none);
        pk_buf *b = jj_buf(jj_rt_arena(rt));
        for (size_t i = 0; i < items.l->n; i++) {
            if (i) jv_write_str(b, sep);
            jv x = attr.t != JV_NONE ? get_path(rt, line, items.l->v[i], attr) : items.l->v[i];
            jv_write_str(b, x);
        }
        return buf_to_jv(rt, line, b);
    }
    case F_FIRST: {
        jv items = jj_iter_list(rt, line, v);
        return items.l->n ? items.l->v[0] : jv_undef();
    }
    case F_LAST: {
        if (v.t == JV_UNDEF || (v.t == JV_LIST && v.l->gen))
            jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "'%s' object is not reversible", jv_type_name(v));
        jv items = jj_iter_list(rt, line, v);
        return items.l->n ? items.l->v[items.l->n - 1] : jv_undef();
    }
    case F_REVERSE: {
        if (v.t == JV_STR) {
            jv chars = jj_iter_list(rt, line, v);
            pk_buf *b = jj_buf(jj_rt_arena(rt));
            for (size_t i = chars.l->n; i-- > 0;) pk_buf_put(b, chars.l->v[i].s->p, chars.l->v[i].s->n);
            return buf_to_jv(rt, line, b);
        }
        jv items = jj_iter_list(rt, line, v), r = jv_list(a, items.l->n);
        for (size_t i = items.l->n; i-- > 0;) jv_push(a, &r, items.l->v[i]);
        r.l->gen = true;          /* reversed() */
        return r;
    }
    case F_INT: return to_int(v, arg(args, kw, n, 1, "default", jv_int(0)));
    case F_FLOAT: {
        if (v.t == JV_FLOAT) return v;
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_float(jv_num(v));
        if (v.t == JV_STR) {
            char *end;
            double f = strtod(v.s->p, &end);
            while (*end && py_space((unsigned char)*end)) end++;
            if (end != v.s->p && !*end) return jv_float(f);
        }
        return arg(args, kw, n, 1, "default", jv_float(0));
    }
    case F_ABS:
        if (v.t == JV_INT) return jv_int(v.i < 0 ? -v.i : v.i);
        if (v.t == JV_BOOL) return jv_int(v.b);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.f));
        ferr(rt, line, "bad operand type for abs()", NULL);
    case F_ROUND: {
        jv p = arg(args, kw, n, 1, "precision", jv_int(0)), m = arg(args, kw, n, 2, "method", jv_cstr(a, "common"));
        if (!jv_is_num(v)) ferr(rt, line, "round of a non-number", NULL);
        double s = pow(10, (double)(p.t == JV_INT ? p.i : 0)), x = jv_num(v) * s;
        const char *mm = m.t == JV_STR ? m.s->p : "common";
        double r = !strcmp(mm, "ceil") ? ceil(x) : !strcmp(mm, "floor") ? floor(x) : round(x);
        return jv_float(r / s);
    }
    case F_ATTR: return jj_getattr(rt, line, v, to_str(rt, arg(args, kw, n, 1, "name", none)).s->p);
    case F_SELECT: return select_items(rt, line, args, kw, n, false, true);
    case F_REJECT: return select_items(rt, line, args, kw, n, false, false);
    case F_SELECTATTR: return select_items(rt, line, args, kw, n, true, true);
    case F_REJECTATTR: return select_items(rt, line, args, kw, n, true, false);
    case F_MAP: {
        jv r = jv_list(a, 4);
        r.l->gen = true;
        if (!jv_truthy(v)) return r;
        jv items = jj_iter_list(rt, line, v);
        jv attr = arg(args, kw, n, 0, "attribute", jv_undef());
        for (int i = 1; i < n; i++) if (kw[i] && !strcmp(kw[i], "attribute")) attr = args[i];
        if (attr.t != JV_UNDEF) {
            jv dflt = arg(args, kw, n, 0, "default", jv_undef());
            for (int i = 1; i < n; i++) if (kw[i] && !strcmp(kw[i], "default")) dflt = args[i];
            for (size_t i = 0; i < items.l->n; i++) {
                jv_push(a, &r, get_path_d(rt, line, items.l->v[i], attr, dflt));
            }
            return r;
        }
        if (n < 2 || args[1].t != JV_STR) ferr(rt, line, "map requires a filter name or attribute=", NULL);
        int f = jj_filter_index(args[1].s->p);
        if (f < 0) jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "No filter named '%s'.", args[1].s->p);
        jv *fa = jj_alloc(a, (size_t)n * sizeof *fa);
        const char **fk = jj_alloc(a, (size_t)n * sizeof *fk);
        for (size_t i = 0; i < items.l->n; i++) {
            fa[0] = items.l->v[i];
            for (int j = 2; j < n; j++) { fa[j - 1] = args[j]; fk[j - 1] = kw[j]; }
            jv_push(a, &r, jj_apply_filter(rt, line, f, fa, fk, n - 1));
        }
        return r;
    }
    case F_UNIQUE: {
        jv items = jj_iter_list(rt, line, v), r = jv_list(a, items.l->n);
        r.l->gen = true;
        bool cs = jv_truthy(arg(args, kw, n, 1, "case_sensitive", jv_bool(false)));
        jv attr = arg(args, kw, n, 2, "attribute", none);
        jv seen = jv_list(a, items.l->n);
        for (size_t i = 0; i < items.l->n; i++) {
            jv k = attr.t != JV_NONE ? get_path(rt, line, items.l->v[i], attr) : items.l->v[i];
            if (!cs && k.t == JV_STR) k = str_case(rt, k, 0);
            bool dup = false;
            for (size_t j = 0; j < seen.l->n && !dup; j++) dup = jv_eq(seen.l->v[j], k);
            if (dup) continue;
            jv_push(a, &seen, k);
            jv_push(a, &r, items.l->v[i]);
        }
        return r;
    }
    case F_DICTSORT: {
        if (v.t != JV_DICT) ferr(rt, line, "You can only sort by either 'key' or 'value' of a dict", NULL);
        jv by = arg(args, kw, n, 2, "by", jv_cstr(a, "key"));
        sort_ctx sc = { rt, line, jv_truthy(arg(args, kw, n, 1, "case_sensitive", jv_bool(false))), jv_int(0),
                        by.t == JV_STR && !strcmp(by.s->p, "value") };
        jv r = items_of(rt, v);
        if (!sc.by_value) sc.attr = jv_int(0);
        sort_list(&sc, r.l->v, r.l->n, jv_truthy(arg(args, kw, n, 3, "reverse", jv_bool(false))));
        return r;
    }
    case F_SORT: {
        jv r = copy_list(rt, jj_iter_list(rt, line, v));
        sort_ctx sc = { rt, line, jv_truthy(arg(args, kw, n, 2, "case_sensitive", jv_bool(false))),
                        arg(args, kw, n, 3, "attribute", none), false };
        sort_list(&sc, r.l->v, r.l->n, jv_truthy(arg(args, kw, n, 1, "reverse", jv_bool(false))));
        return r;
    }
    case F_MIN: case F_MAX: {
        jv items = jj_iter_list(rt, line, v);
        if (!items.l->n) return jv_undef();
        bool cs = jv_truthy(arg(args, kw, n, 1, "case_sensitive", jv_bool(false)));
        jv best = items.l->v[0];
        for (size_t i = 1; i < items.l->n; i++) {
            int c = cmp_ci(rt, line, items.l->v[i], best, cs);
            if (filt == F_MIN ? c < 0 : c > 0) best = items.l->v[i];
        }
        return best;
    }
    case F_SUM: {
        jv items = jj_iter_list(rt, line, v), s = arg(args, kw, n, 2, "start", jv_int(0));
        jv attr = arg(args, kw, n, 1, "attribute", none);
        for (size_t i = 0; i < items.l->n; i++) {
            jv x = attr.t != JV_NONE ? get_path(rt, line, items.l->v[i], attr) : items.l->v[i];
            if (!jv_is_num(x) || !jv_is_num(s)) ferr(rt, line, "unsupported operand type(s) for +", "sum");
            int64_t r;
            if (s.t == JV_FLOAT || x.t == JV_FLOAT) s = jv_float(jv_num(s) + jv_num(x));
            else if (__builtin_add_overflow(s.t == JV_INT ? s.i : s.b, x.t == JV_INT ? x.i : x.b, &r))
                ferr(rt, line, "integer overflow", "sum");
            else s = jv_int(r);
        }
        return s;
    }
    case F_INDENT: {
        jv s = to_str(rt, v);
        return do_indent(rt, line, s, arg(args, kw, n, 1, "width", jv_int(4)),
                         jv_truthy(arg(args, kw, n, 2, "first", jv_bool(false))),
                         jv_truthy(arg(args, kw, n, 3, "blank", jv_bool(false))));
    }
    case F_WORDCOUNT: {
        jv s = to_str(rt, v);
        int64_t c = 0;
        bool in = false;
        for (size_t i = 0; i < s.s->n; i++) {
            unsigned char ch = (unsigned char)s.s->p[i];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in) c++;
            in = w;
        }
        return jv_int(c);
    }
    }
    ferr(rt, line, "unknown filter", fname);
}

/* ---- tests ------------------------------------------------------------ */

static const char *const test_names[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence",
    "iterable", "boolean", "true", "false", "in", "equalto", "eq", "==", "ne", "!=", "odd", "even",
    "divisibleby", "callable", "lower", "upper", "gt", "lt", "ge", "le", "sameas", "greaterthan",
    "lessthan",
};

int jj_test_index(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(test_names); i++) if (!strcmp(test_names[i], name)) return (int)i;
    return -1;
}

bool jj_apply_test(jj_rt *rt, int line, int test, jv *args, int n)
{
    jv v = args[0], x = n > 1 ? args[1] : jv_undef();
    const char *t = test_names[test];
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "number")) return jv_is_num(v);
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT;
    if (!strcmp(t, "sequence")) return v.t == JV_STR || (v.t == JV_LIST && !v.l->gen) || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(t, "iterable")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.b;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.b;
    if (!strcmp(t, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC;
    if (!strcmp(t, "sameas")) return v.t == x.t && (v.t == JV_NONE || v.t == JV_UNDEF || (v.t == JV_BOOL && v.b == x.b) || jv_eq(v, x));
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.t != JV_STR) return false;
        bool cased = false;
        for (size_t i = 0; i < v.s->n; i++) {
            unsigned char c = (unsigned char)v.s->p[i];
            if (t[0] == 'l' ? isupper(c) : islower(c)) return false;
            cased |= isalpha(c) != 0;
        }
        return cased;
    }
    if (n < 2 && strcmp(t, "odd") && strcmp(t, "even"))
        jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "test '%s' needs an argument", t);
    if (!strcmp(t, "in")) {
        if (x.t == JV_STR) return v.t == JV_STR && (v.s->n == 0 || memmem(x.s->p, x.s->n, v.s->p, v.s->n));
        if (x.t == JV_LIST) { for (size_t i = 0; i < x.l->n; i++) if (jv_eq(x.l->v[i], v)) return true; return false; }
        if (x.t == JV_DICT) return jv_dget(x.d, v) != NULL;
        jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "argument of type '%s' is not iterable", jv_type_name(x));
    }
    if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==")) return jv_eq(v, x);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_eq(v, x);
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        if (v.t != JV_INT) jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "test '%s' of a non-integer", t);
        int64_t d = t[0] == 'd' ? (x.t == JV_INT ? x.i : 0) : 2;
        if (d == 0) jj_throw(jj_rt_fail(rt), PK_EINVAL, line, "integer division or modulo by zero");
        int64_t m = ((v.i % d) + d) % d;
        return t[0] == 'o' ? m == 1 : m == 0;
    }
    int c = jj_compare(rt, line, v, x);
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan")) return c > 0;
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan")) return c < 0;
    if (!strcmp(t, "ge")) return c >= 0;
    return c <= 0;
}
