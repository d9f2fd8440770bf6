/*
 * jj_parse.c - template source to syntax tree: the lexer (text, tags and
 * whitespace control as jinja2 applies trim_blocks and lstrip_blocks) and a
 * recursive-descent parser with jinja2's precedence:
 *
 *   cond    = or ['if' or ['else' cond]]
 *   or      = and {'or' and}          and = not {'and' not}
 *   not     = 'not' not | compare     compare = math1 {cmp math1}
 *   math1   = concat {('+'|'-') concat}   concat = math2 {'~' math2}
 *   math2   = pow {('*'|'/'|'//'|'%') pow}   pow = unary {'**' unary}
 *   unary   = ('-'|'+') unary | primary postfix ; then {'|' filter | 'is' test | call}
 *
 * Like jinja2, the source's newlines are normalized to \n and one trailing
 * newline is dropped (keep_trailing_newline is off in transformers).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jj_impl.h"

typedef enum { T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME,
               T_STRING, T_INT, T_FLOAT, T_OP } tok_type;

typedef struct tok {
    tok_type t;
    int line;
    const char *s;      /* T_TEXT, T_NAME, T_STRING (arena copies), T_OP (in source) */
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct lexer {
    jj_arena *a;
    const char *src;
    size_t n, pos;
    int line;
    tok *toks;
    size_t n_toks, cap_toks;
} lexer;

static void emit(lexer *lx, tok t)
{
    if (lx->n_toks == lx->cap_toks) {
        size_t cap = lx->cap_toks ? 2 * lx->cap_toks : 256;
        tok *nt = jj_alloc(lx->a, cap * sizeof *nt);
        if (lx->n_toks) memcpy(nt, lx->toks, lx->n_toks * sizeof *nt);
        lx->toks = nt;
        lx->cap_toks = cap;
    }
    lx->toks[lx->n_toks++] = t;
}

static int count_lines(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_id0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void put_utf8(char *o, size_t *k, uint32_t cp)
{
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) { o[(*k)++] = (char)(0xc0 | cp >> 6); o[(*k)++] = (char)(0x80 | (cp & 0x3f)); }
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xe0 | cp >> 12); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*k)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*k)++] = (char)(0xf0 | cp >> 18); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[(*k)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal from its opening quote; Python's escapes, unknown ones kept. */
static void lex_string(lexer *lx)
{
    char q = lx->src[lx->pos];
    size_t start = ++lx->pos;
    while (lx->pos < lx->n && lx->src[lx->pos] != q) lx->pos += lx->src[lx->pos] == '\\' ? 2 : 1;
    if (lx->pos >= lx->n) jj_throw(lx->a->fail, PK_EFORMAT, lx->line, "unexpected end of string");
    const char *s = lx->src + start;
    size_t n = lx->pos - start;
    char *o = jj_alloc(lx->a, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[k++] = s[i]; continue; }
        char e = s[++i];
        int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (width && i + (size_t)width < n + 0) {
            uint32_t cp = 0;
            int j = 0;
            for (; j < width && hexval(s[i + 1 + j]) >= 0; j++) cp = cp * 16 + (uint32_t)hexval(s[i + 1 + j]);
            if (j == width) { put_utf8(o, &k, cp); i += (size_t)width; continue; }
        }
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '0': o[k++] = '\0'; break;
        case '\\': case '\'': case '"': o[k++] = e; break;
        case '\n': break;
        default: o[k++] = '\\'; o[k++] = e;
        }
    }
    lx->line += count_lines(s, n);
    lx->pos++;
    emit(lx, (tok){ .t = T_STRING, .line = lx->line, .s = o, .n = k });
}

static const char *ops2[] = { "//", "**", "==", "!=", "<=", ">=" };
static const char ops1[] = "+-*/%~<>()[]{},.:|=";

/* Tokens of one tag up to its end ("}}" or "%}"); returns whether the end
 * had a '-' (strip the whitespace after it) or '+' (keep it). */
static int lex_tag(lexer *lx, char close)
{
    for (;;) {
        while (lx->pos < lx->n && is_ws(lx->src[lx->pos])) lx->line += lx->src[lx->pos++] == '\n';
        if (lx->pos >= lx->n) jj_throw(lx->a->fail, PK_EFORMAT, lx->line, "unexpected end of template inside a tag");
        const char *p = lx->src + lx->pos;
        size_t left = lx->n - lx->pos;
        for (int sign = 0; sign < 3; sign++) {
            size_t off = sign ? 1 : 0;
            if (sign && p[0] != (sign == 1 ? '-' : '+')) continue;
            if (left >= off + 2 && p[off] == close && p[off + 1] == '}') {
                lx->pos += off + 2;
                return sign;
            }
        }
        char c = *p;
        if (c == '\'' || c == '"') { lex_string(lx); continue; }
        if (is_id0(c)) {
            size_t k = 1;
            while (k < left && (is_id0(p[k]) || is_digit(p[k]))) k++;
            emit(lx, (tok){ .t = T_NAME, .line = lx->line, .s = jj_strndup(lx->a, p, k), .n = k });
            lx->pos += k;
            continue;
        }
        if (is_digit(c)) {
            size_t k = 0;
            while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
            bool is_f = false;
            if (k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
                is_f = true;
                k++;
                while (k < left && is_digit(p[k])) k++;
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t e = k + 1;
                if (e < left && (p[e] == '+' || p[e] == '-')) e++;
                if (e < left && is_digit(p[e])) { is_f = true; k = e; while (k < left && is_digit(p[k])) k++; }
            }
            char num[64];
            size_t m = 0;
            for (size_t i = 0; i < k && m + 1 < sizeof num; i++) if (p[i] != '_') num[m++] = p[i];
            num[m] = 0;
            tok t = { .t = is_f ? T_FLOAT : T_INT, .line = lx->line };
            errno = 0;
            if (is_f) t.f = strtod(num, NULL); else t.i = strtoll(num, NULL, 10);
            if (!is_f && (errno == ERANGE || k >= sizeof num))   /* Python's would be a big integer */
                jj_throw(lx->a->fail, PK_EFORMAT, lx->line, "integer literal too large");
            emit(lx, t);
            lx->pos += k;
            continue;
        }
        size_t k = 0;
        for (size_t i = 0; i < ARRAY_LEN(ops2); i++)
            if (left >= 2 && memcmp(p, ops2[i], 2) == 0) k = 2;
        if (!k && strchr(ops1, c)) k = 1;
        if (!k) jj_throw(lx->a->fail, PK_EFORMAT, lx->line, "unexpected character '%c'", c);
        emit(lx, (tok){ .t = T_OP, .line = lx->line, .s = p, .n = k });
        lx->pos += k;
    }
}

/* Splits text from tags, applying '-' / '+' and trim_blocks / lstrip_blocks. */
static void lex_all(lexer *lx)
{
    int strip_next = 0;          /* the previous tag ended with '-': 1; a block end: 2 (trim) */
    bool line_starting = true;
    while (lx->pos < lx->n) {
        size_t start = lx->pos, open = lx->pos;
        const char *p = lx->src;
        while (open + 1 < lx->n && !(p[open] == '{' && (p[open + 1] == '{' || p[open + 1] == '%' || p[open + 1] == '#')))
            open++;
        if (open + 1 >= lx->n) open = lx->n;
        size_t t0 = start, t1 = open;
        if (strip_next == 1) while (t0 < t1 && is_ws(p[t0])) t0++;
        if (strip_next == 2 && t0 < t1 && p[t0] == '\n') { t0++; line_starting = true; }
        char kind = open < lx->n ? p[open + 1] : 0;
        char sign = open + 2 < lx->n ? p[open + 2] : 0;
        if (kind && sign == '-') {
            while (t1 > t0 && is_ws(p[t1 - 1])) t1--;
        } else if (kind && kind != '{' && sign != '+') {
            size_t l = t1;
            while (l > t0 && (p[l - 1] == ' ' || p[l - 1] == '\t' || p[l - 1] == '\r' || p[l - 1] == '\f' || p[l - 1] == '\v')) l--;
            if ((l > t0 && p[l - 1] == '\n') || (l == t0 && (t0 > start || line_starting))) t1 = l;
        }
        if (t1 > t0) emit(lx, (tok){ .t = T_TEXT, .line = lx->line, .s = p + t0, .n = t1 - t0 });
        lx->line += count_lines(p + start, open - start);
        if (!kind) { lx->pos = lx->n; break; }
        lx->pos = open + 2 + (sign == '-' || sign == '+');
        int end;
        if (kind == '#') {
            size_t e = lx->pos;
            while (e + 1 < lx->n && !(p[e] == '#' && p[e + 1] == '}')) e++;
            if (e + 1 >= lx->n) jj_throw(lx->a->fail, PK_EFORMAT, lx->line, "missing end of comment tag");
            end = e > lx->pos && p[e - 1] == '-' ? 1 : e > lx->pos && p[e - 1] == '+' ? 2 : 0;
            lx->line += count_lines(p + lx->pos, e - lx->pos);
            lx->pos = e + 2;
        } else {
            emit(lx, (tok){ .t = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = lx->line });
            end = lex_tag(lx, kind == '{' ? '}' : '%');
            emit(lx, (tok){ .t = kind == '{' ? T_VAR_END : T_BLOCK_END, .line = lx->line });
        }
        strip_next = end == 1 ? 1 : end == 2 || kind == '{' ? 0 : 2;
        line_starting = false;
    }
    emit(lx, (tok){ .t = T_EOF, .line = lx->line });
}

/* ---- parser ----------------------------------------------------------- */

typedef struct parser {
    jj_arena *a;
    tok *t;
    size_t i;
    int depth;
    int in_if;          /* inside an if's branches: an unknown filter waits for run time */
} parser;

static tok *cur(parser *ps) { return &ps->t[ps->i]; }
static _Noreturn void perr(parser *ps, const char *what)
{
    tok *t = cur(ps);
    jj_throw(ps->a->fail, PK_EFORMAT, t->line, "%s%s%.*s%s", what,
             t->t == T_NAME || t->t == T_OP ? " (at '" : t->t == T_EOF ? " (at the end)" : "",
             t->t == T_NAME || t->t == T_OP ? (int)t->n : 0, t->s ? t->s : "",
             t->t == T_NAME || t->t == T_OP ? "')" : "");
}
static bool is_op(parser *ps, const char *op)
{
    tok *t = cur(ps);
    return t->t == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static bool is_name(parser *ps, const char *name)
{
    tok *t = cur(ps);
    return t->t == T_NAME && strcmp(t->s, name) == 0;
}
static bool accept_op(parser *ps, const char *op) { if (is_op(ps, op)) { ps->i++; return true; } return false; }
static bool accept_name(parser *ps, const char *n) { if (is_name(ps, n)) { ps->i++; return true; } return false; }
static void expect_op(parser *ps, const char *op)
{
    if (!accept_op(ps, op)) {
        char m[40];
        snprintf(m, sizeof m, "expected '%s'", op);
        perr(ps, m);
    }
}
static const char *expect_ident(parser *ps)
{
    if (cur(ps)->t != T_NAME) perr(ps, "expected a name");
    return ps->t[ps->i++].s;
}

static jj_node *mk(parser *ps, jj_kind k)
{
    jj_node *n = jj_alloc(ps->a, sizeof *n);
    n->kind = k;
    n->line = cur(ps)->line;
    return n;
}

typedef struct nodevec { jj_node **v; const char **kw; int n, cap; } nodevec;
static void nv_push(parser *ps, nodevec *nv, jj_node *x, const char *kw)
{
    if (nv->n == nv->cap) {
        int cap = nv->cap ? 2 * nv->cap : 4;
        jj_node **v = jj_alloc(ps->a, (size_t)cap * sizeof *v);
        const char **k = jj_alloc(ps->a, (size_t)cap * sizeof *k);
        if (nv->n) { memcpy(v, nv->v, (size_t)nv->n * sizeof *v); memcpy(k, nv->kw, (size_t)nv->n * sizeof *k); }
        nv->v = v;
        nv->kw = k;
        nv->cap = cap;
    }
    nv->kw[nv->n] = kw;
    nv->v[nv->n++] = x;
}
static void set_kids(jj_node *n, nodevec *nv) { n->kids = nv->v; n->kw = nv->kw; n->n_kids = nv->n; }

static jj_node *parse_expr(parser *ps);
static jj_node *parse_or(parser *ps);
static jj_node *parse_unary(parser *ps, bool with_filter);

static void parse_args(parser *ps, jj_node *call)
{
    nodevec nv = { 0 };
    expect_op(ps, "(");
    while (!is_op(ps, ")")) {
        if (nv.n) expect_op(ps, ",");
        if (is_op(ps, ")")) break;
        const char *kw = NULL;
        if (cur(ps)->t == T_NAME && ps->t[ps->i + 1].t == T_OP && ps->t[ps->i + 1].n == 1 && ps->t[ps->i + 1].s[0] == '=') {
            kw = cur(ps)->s;
            ps->i += 2;
        }
        nv_push(ps, &nv, parse_expr(ps), kw);
    }
    ps->i++;
    set_kids(call, &nv);
}

static jj_node *parse_primary(parser *ps)
{
    tok *t = cur(ps);
    jj_node *n;
    if (t->t == T_NAME) {
        ps->i++;
        n = mk(ps, N_LIT);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) n->lit = jv_bool(true);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) n->lit = jv_bool(false);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) n->lit = jv_none();
        else { n->kind = N_NAME; n->name = t->s; }
        return n;
    }
    if (t->t == T_STRING) {
        pk_buf *b = jj_buf(ps->a);
        while (cur(ps)->t == T_STRING) { pk_buf_put(b, cur(ps)->s, cur(ps)->n); ps->i++; }
        n = mk(ps, N_LIT);
        n->lit = jv_str(ps->a, b->p ? b->p : "", b->n);
        bool oom = b->oom;
        pk_buf_free(b);
        if (oom) jj_throw(ps->a->fail, PK_ENOMEM, t->line, "out of memory");
        return n;
    }
    if (t->t == T_INT || t->t == T_FLOAT) {
        ps->i++;
        n = mk(ps, N_LIT);
        n->lit = t->t == T_INT ? jv_int(t->i) : jv_float(t->f);
        return n;
    }
    if (accept_op(ps, "(")) {
        nodevec nv = { 0 };
        bool tuple = false;
        while (!is_op(ps, ")")) {
            if (nv.n) { expect_op(ps, ","); tuple = true; if (is_op(ps, ")")) break; }
            nv_push(ps, &nv, parse_expr(ps), NULL);
        }
        ps->i++;
        if (nv.n == 1 && !tuple) return nv.v[0];
        n = mk(ps, N_TUPLE);
        set_kids(n, &nv);
        return n;
    }
    if (accept_op(ps, "[")) {
        nodevec nv = { 0 };
        while (!is_op(ps, "]")) {
            if (nv.n) { expect_op(ps, ","); if (is_op(ps, "]")) break; }
            nv_push(ps, &nv, parse_expr(ps), NULL);
        }
        ps->i++;
        n = mk(ps, N_LIST);
        set_kids(n, &nv);
        return n;
    }
    if (accept_op(ps, "{")) {
        nodevec nv = { 0 };
        while (!is_op(ps, "}")) {
            if (nv.n) { expect_op(ps, ","); if (is_op(ps, "}")) break; }
            nv_push(ps, &nv, parse_expr(ps), NULL);
            expect_op(ps, ":");
            nv_push(ps, &nv, parse_expr(ps), NULL);
        }
        ps->i++;
        n = mk(ps, N_DICT);
        set_kids(n, &nv);
        return n;
    }
    perr(ps, "unexpected token");
}

static jj_node *parse_subscript(parser *ps, jj_node *base)
{
    jj_node *parts[3] = { NULL, NULL, NULL };
    int k = 0;
    bool slice = false;
    for (;;) {
        if (is_op(ps, ":")) { slice = true; if (++k > 2) perr(ps, "bad slice"); ps->i++; continue; }
        if (is_op(ps, "]")) break;
        if (parts[k]) perr(ps, "expected ']'");
        parts[k] = parse_expr(ps);
    }
    ps->i++;
    jj_node *n = mk(ps, slice ? N_SLICE : N_ITEM);
    n->a = base;
    if (slice) { n->b = parts[0]; n->c = parts[1]; n->body = parts[2]; }
    else n->b = parts[0];
    if (!slice && !parts[0]) perr(ps, "empty subscript");
    return n;
}

static jj_node *parse_postfix(parser *ps, jj_node *n)
{
    for (;;) {
        if (accept_op(ps, ".")) {
            jj_node *x = mk(ps, N_ATTR);
            x->a = n;
            if (cur(ps)->t == T_INT) {
                x->kind = N_ITEM;
                x->b = mk(ps, N_LIT);
                x->b->lit = jv_int(cur(ps)->i);
                ps->i++;
            } else {
                x->name = expect_ident(ps);
            }
            n = x;
        } else if (accept_op(ps, "[")) {
            n = parse_subscript(ps, n);
        } else if (is_op(ps, "(")) {
            jj_node *x = mk(ps, N_CALL);
            x->a = n;
            parse_args(ps, x);
            n = x;
        } else {
            return n;
        }
    }
}

static jj_node *parse_filter(parser *ps, jj_node *n)
{
    jj_node *f = mk(ps, N_FILTER);
    f->name = expect_ident(ps);
    f->filt = jj_filter_index(f->name);
    /* jinja2 3 rejects an unknown filter at compile time unless it sits in an
     * if's branch (a template may guard a filter another engine has) */
    if (f->filt < 0 && !ps->in_if) jj_throw(ps->a->fail, PK_EFORMAT, f->line, "No filter named '%s'.", f->name);
    f->a = n;
    if (is_op(ps, "(")) parse_args(ps, f);
    return f;
}

static jj_node *parse_test(parser *ps, jj_node *n)
{
    jj_node *t = mk(ps, N_TEST);
    t->op = accept_name(ps, "not");
    t->name = expect_ident(ps);
    t->filt = jj_test_index(t->name);
    t->a = n;
    tok *c = cur(ps);
    if (is_op(ps, "(")) {
        parse_args(ps, t);
    } else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT || is_op(ps, "[") || is_op(ps, "{")) &&
               !is_name(ps, "else") && !is_name(ps, "or") && !is_name(ps, "and")) {
        if (is_name(ps, "is")) perr(ps, "You cannot chain multiple tests with is");
        jj_node *arg = parse_postfix(ps, parse_primary(ps));
        t->kids = jj_alloc(ps->a, sizeof *t->kids);
        t->kw = jj_alloc(ps->a, sizeof *t->kw);
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    return t;
}

static jj_node *parse_unary(parser *ps, bool with_filter)
{
    if (++ps->depth > 200) perr(ps, "expression nested too deeply");
    jj_node *n;
    if (is_op(ps, "-") || is_op(ps, "+")) {
        n = mk(ps, N_UNARY);
        n->op = is_op(ps, "-") ? OP_NEG : OP_POS;
        ps->i++;
        n->a = parse_unary(ps, false);
    } else {
        n = parse_postfix(ps, parse_primary(ps));
    }
    while (with_filter) {
        if (accept_op(ps, "|")) n = parse_filter(ps, n);
        else if (accept_name(ps, "is")) n = parse_test(ps, n);
        else if (is_op(ps, "(")) { jj_node *x = mk(ps, N_CALL); x->a = n; parse_args(ps, x); n = x; }
        else break;
    }
    ps->depth--;
    return n;
}

static jj_node *binary(parser *ps, int op, jj_node *l, jj_node *r)
{
    jj_node *n = mk(ps, N_BINARY);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jj_node *parse_pow(parser *ps)
{
    jj_node *l = parse_unary(ps, true);
    while (accept_op(ps, "**")) l = binary(ps, OP_POW, l, parse_unary(ps, true));
    return l;
}

static jj_node *parse_math2(parser *ps)
{
    jj_node *l = parse_pow(ps);
    for (;;) {
        int op = is_op(ps, "*") ? OP_MUL : is_op(ps, "/") ? OP_DIV : is_op(ps, "//") ? OP_FDIV : is_op(ps, "%") ? OP_MOD : 0;
        if (!op) return l;
        ps->i++;
        l = binary(ps, op, l, parse_pow(ps));
    }
}

static jj_node *parse_concat(parser *ps)
{
    jj_node *l = parse_math2(ps);
    if (!is_op(ps, "~")) return l;
    nodevec nv = { 0 };
    nv_push(ps, &nv, l, NULL);
    while (accept_op(ps, "~")) nv_push(ps, &nv, parse_math2(ps), NULL);
    jj_node *n = mk(ps, N_CONCAT);
    set_kids(n, &nv);
    return n;
}

static jj_node *parse_math1(parser *ps)
{
    jj_node *l = parse_concat(ps);
    for (;;) {
        int op = is_op(ps, "+") ? OP_ADD : is_op(ps, "-") ? OP_SUB : 0;
        if (!op) return l;
        ps->i++;
        l = binary(ps, op, l, parse_concat(ps));
    }
}

static jj_node *parse_compare(parser *ps)
{
    jj_node *l = parse_math1(ps);
    for (;;) {
        int op = is_op(ps, "==") ? OP_EQ : is_op(ps, "!=") ? OP_NE : is_op(ps, "<") ? OP_LT : is_op(ps, "<=") ? OP_LE
               : is_op(ps, ">") ? OP_GT : is_op(ps, ">=") ? OP_GE : is_name(ps, "in") ? OP_IN : 0;
        if (!op && is_name(ps, "not") && ps->t[ps->i + 1].t == T_NAME && !strcmp(ps->t[ps->i + 1].s, "in")) {
            op = OP_NOTIN;
            ps->i++;
        }
        if (!op) return l;
        ps->i++;
        l = binary(ps, op, l, parse_math1(ps));
    }
}

static jj_node *parse_not(parser *ps)
{
    if (accept_name(ps, "not")) {
        jj_node *n = mk(ps, N_NOT);
        n->a = parse_not(ps);
        return n;
    }
    return parse_compare(ps);
}

static jj_node *parse_and(parser *ps)
{
    jj_node *l = parse_not(ps);
    while (accept_name(ps, "and")) {
        jj_node *n = mk(ps, N_AND);
        n->a = l;
        n->b = parse_not(ps);
        l = n;
    }
    return l;
}

static jj_node *parse_or(parser *ps)
{
    jj_node *l = parse_and(ps);
    while (accept_name(ps, "or")) {
        jj_node *n = mk(ps, N_OR);
        n->a = l;
        n->b = parse_and(ps);
        l = n;
    }
    return l;
}

static jj_node *parse_expr(parser *ps)
{
    jj_node *e = parse_or(ps);
    while (accept_name(ps, "if")) {
        jj_node *n = mk(ps, N_COND);
        n->b = e;
        n->a = parse_or(ps);
        if (accept_name(ps, "else")) n->c = parse_expr(ps);
        e = n;
    }
    return e;
}

/* expr or a bare tuple "a, b" (in {{ }}, set values and for targets). */
static jj_node *parse_tuple(parser *ps, bool names_only)
{
    jj_node *first = names_only ? parse_primary(ps) : parse_expr(ps);
    if (!is_op(ps, ",")) return first;
    nodevec nv = { 0 };
    nv_push(ps, &nv, first, NULL);
    while (accept_op(ps, ",")) {
        if (cur(ps)->t == T_BLOCK_END || cur(ps)->t == T_VAR_END || is_op(ps, "=") || is_name(ps, "in")) break;
        nv_push(ps, &nv, names_only ? parse_primary(ps) : parse_expr(ps), NULL);
    }
    jj_node *n = mk(ps, N_TUPLE);
    set_kids(n, &nv);
    return n;
}

/* ---- statements ------------------------------------------------------- */

static void expect_block_end(parser *ps)
{
    if (cur(ps)->t != T_BLOCK_END) perr(ps, "expected the end of the statement block");
    ps->i++;
}

static jj_node *parse_body(parser *ps, const char *const *ends, const char **which);

static jj_node *parse_if(parser *ps)
{
    jj_node *n = mk(ps, N_IF);
    n->a = parse_tuple(ps, false);
    expect_block_end(ps);
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    const char *w;
    ps->in_if++;
    n->b = parse_body(ps, ends, &w);
    if (!strcmp(w, "elif")) {
        n->c = parse_if(ps);
        ps->in_if--;
        return n;
    }
    if (!strcmp(w, "else")) {
        expect_block_end(ps);
        static const char *const end[] = { "endif", NULL };
        n->c = parse_body(ps, end, &w);
    }
    ps->in_if--;
    expect_block_end(ps);
    return n;
}

static jj_node *parse_for(parser *ps)
{
    jj_node *n = mk(ps, N_FOR);
    n->a = parse_tuple(ps, true);
    if (!accept_name(ps, "in")) perr(ps, "expected 'in'");
    n->b = parse_or(ps);
    if (accept_name(ps, "if")) n->c = parse_expr(ps);
    if (accept_name(ps, "recursive")) perr(ps, "recursive loops are not supported");
    expect_block_end(ps);
    static const char *const ends[] = { "else", "endfor", NULL };
    const char *w;
    n->body = parse_body(ps, ends, &w);
    if (!strcmp(w, "else")) {
        expect_block_end(ps);
        static const char *const end[] = { "endfor", NULL };
        n->alt = parse_body(ps, end, &w);
    }
    expect_block_end(ps);
    return n;
}

static jj_node *parse_set(parser *ps)
{
    jj_node *n = mk(ps, N_SET);
    jj_node *target = parse_tuple(ps, true);
    if (target->kind == N_NAME && accept_op(ps, ".")) {
        n->name = expect_ident(ps);
    }
    n->a = target;
    if (accept_op(ps, "=")) {
        n->b = parse_tuple(ps, false);
        expect_block_end(ps);
        return n;
    }
    if (n->name || target->kind != N_NAME) perr(ps, "expected '='");
    n->kind = N_SETBLOCK;
    nodevec filters = { 0 };
    while (accept_op(ps, "|")) nv_push(ps, &filters, parse_filter(ps, NULL), NULL);
    set_kids(n, &filters);
    expect_block_end(ps);
    static const char *const ends[] = { "endset", NULL };
    const char *w;
    n->body = parse_body(ps, ends, &w);
    expect_block_end(ps);
    return n;
}

static void parse_params(parser *ps, jj_node *m)
{
    nodevec nv = { 0 };
    expect_op(ps, "(");
    while (!is_op(ps, ")")) {
        if (nv.n) expect_op(ps, ",");
        jj_node *p = mk(ps, N_NAME);
        p->name = expect_ident(ps);
        if (accept_op(ps, "=")) p->a = parse_expr(ps);
        nv_push(ps, &nv, p, NULL);
    }
    ps->i++;
    set_kids(m, &nv);
}

static jj_node *parse_macro(parser *ps)
{
    jj_node *n = mk(ps, N_MACRO);
    n->name = expect_ident(ps);
    parse_params(ps, n);
    expect_block_end(ps);
    static const char *const ends[] = { "endmacro", NULL };
    const char *w;
    n->body = parse_body(ps, ends, &w);
    expect_block_end(ps);
    return n;
}

static jj_node *parse_callblock(parser *ps)
{
    jj_node *n = mk(ps, N_CALLBLOCK);
    jj_node *m = mk(ps, N_MACRO);       /* the caller: its params and body */
    m->name = "caller";
    if (is_op(ps, "(")) parse_params(ps, m);
    n->a = parse_expr(ps);
    if (n->a->kind != N_CALL) perr(ps, "expected a call");
    expect_block_end(ps);
    static const char *const ends[] = { "endcall", NULL };
    const char *w;
    m->body = parse_body(ps, ends, &w);
    n->b = m;
    expect_block_end(ps);
    return n;
}

static jj_node *parse_filterblock(parser *ps)
{
    jj_node *n = mk(ps, N_FILTERBLOCK);
    nodevec filters = { 0 };
    do nv_push(ps, &filters, parse_filter(ps, NULL), NULL); while (accept_op(ps, "|"));
    set_kids(n, &filters);
    expect_block_end(ps);
    static const char *const ends[] = { "endfilter", NULL };
    const char *w;
    n->body = parse_body(ps, ends, &w);
    expect_block_end(ps);
    return n;
}

static jj_node *parse_statement(parser *ps)
{
    int line = cur(ps)->line;
    const char *kw = expect_ident(ps);
    jj_node *n;
    if (!strcmp(kw, "if")) return parse_if(ps);
    if (!strcmp(kw, "for")) return parse_for(ps);
    if (!strcmp(kw, "set")) return parse_set(ps);
    if (!strcmp(kw, "macro")) return parse_macro(ps);
    if (!strcmp(kw, "call")) return parse_callblock(ps);
    if (!strcmp(kw, "filter")) return parse_filterblock(ps);
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        n = mk(ps, kw[0] == 'b' ? N_BREAK : N_CONTINUE);
        expect_block_end(ps);
        return n;
    }
    if (!strcmp(kw, "generation")) {
        expect_block_end(ps);
        static const char *const ends[] = { "endgeneration", NULL };
        const char *w;
        n = parse_body(ps, ends, &w);
        expect_block_end(ps);
        return n;
    }
    jj_throw(ps->a->fail, PK_EFORMAT, line, "Encountered unknown tag '%s'.", kw);
}

/* Nodes up to a block whose keyword is in ends (NULL-terminated; NULL ends =
 * the end of the template); *which is that keyword, consumed. */
static jj_node *parse_body(parser *ps, const char *const *ends, const char **which)
{
    if (++ps->depth > 200) perr(ps, "blocks nested too deeply");
    nodevec nv = { 0 };
    jj_node *body = mk(ps, N_BODY);
    for (;;) {
        tok *t = cur(ps);
        if (t->t == T_EOF) {
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++;
                jj_throw(ps->a->fail, PK_EFORMAT, t->line, "Unexpected end of template: expected '%s'.", ends[k]);
            }
            break;
        }
        if (t->t == T_TEXT) {
            jj_node *x = mk(ps, N_TEXT);
            x->lit = jv_str(ps->a, t->s, t->n);
            nv_push(ps, &nv, x, NULL);
            ps->i++;
        } else if (t->t == T_VAR_BEGIN) {
            ps->i++;
            jj_node *x = mk(ps, N_OUTPUT);
            x->a = parse_tuple(ps, false);
            if (cur(ps)->t != T_VAR_END) perr(ps, "expected the end of the print statement");
            ps->i++;
            nv_push(ps, &nv, x, NULL);
        } else if (t->t == T_BLOCK_BEGIN) {
            ps->i++;
            bool ended = false;
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(ps, ends[k])) { *which = ends[k]; ps->i++; ended = true; break; }
            if (ended) break;
            nv_push(ps, &nv, parse_statement(ps), NULL);
        } else {
            perr(ps, "unexpected token");
        }
    }
    set_kids(body, &nv);
    ps->depth--;
    return body;
}

jj_node *jj_parse(jj_arena *a, const char *src, size_t n)
{
    char *norm = jj_alloc(a, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') { norm[k++] = '\n'; if (i + 1 < n && src[i + 1] == '\n') i++; }
        else norm[k++] = src[i];
    }
    if (k && norm[k - 1] == '\n') k--;
    lexer lx = { .a = a, .src = norm, .n = k, .line = 1 };
    lex_all(&lx);
    parser ps = { .a = a, .t = lx.toks };
    return parse_body(&ps, NULL, NULL);
}
