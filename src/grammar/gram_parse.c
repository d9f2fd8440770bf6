/*
 * gram_parse.c - GBNF text -> compiled grammar (gram_impl.h).
 *
 * A recursive-descent parser writes each rule's body as alternatives ended
 * by END; groups and repetitions become numbered helper rules as they are
 * met, so the parser never needs to go back.  After the text: every
 * referenced rule must be defined, the root must exist, a repetition of
 * something nullable repeats its non-empty part (prime_stars), and no rule
 * may reach itself without consuming a character (left recursion).  Then
 * the bodies are laid end to end into `code`.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_impl.h"

#define MAX_REPEAT 10000
#define MAX_DEPTH 200           /* nesting of groups: bounds the C stack */

typedef struct ivec { int32_t *v; int32_t n, cap; } ivec;

typedef struct prule {
    char *name;                 /* NULL for helpers */
    ivec body;
    bool defined;
    bool star;                  /* a helper R ::= x R | "" (x* and x{m,}): x is body.v[0] */
    int64_t ref_pos, def_pos;   /* first reference, definition */
} prule;

typedef struct parser {
    const char *s;
    size_t n, i;
    prule *rules;
    int32_t n_rules, cap_rules;
    ivec ranges;                /* pairs, per class */
    gram_cset *csets;
    int32_t n_csets, cap_csets;
    gram_error *err;
    bool failed, oom;
    int depth;
} parser;

static bool iv_push(parser *p, ivec *v, int32_t x)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 16;
        int32_t *nv = realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv) { p->oom = p->failed = true; return false; }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

static void fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_at(parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = true;
    if (!p->err) return;
    p->err->pos = (int64_t)at;
    p->err->line = 1;
    p->err->col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') { p->err->line++; p->err->col = 1; }
        else p->err->col++;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
}

static int32_t new_rule(parser *p, const char *name, size_t len)
{
    if (p->n_rules == p->cap_rules) {
        int32_t cap = p->cap_rules ? p->cap_rules * 2 : 32;
        prule *nr = realloc(p->rules, (size_t)cap * sizeof *nr);
        if (!nr) { p->oom = p->failed = true; return -1; }
        p->rules = nr;
        p->cap_rules = cap;
    }
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->ref_pos = r->def_pos = -1;
    if (name) {
        if (!(r->name = malloc(len + 1))) { p->oom = p->failed = true; return -1; }
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    return p->n_rules++;
}

static int32_t find_rule(parser *p, const char *name, size_t len)
{
    for (int32_t i = 0; i < p->n_rules; i++)
        if (p->rules[i].name && strlen(p->rules[i].name) == len && !memcmp(p->rules[i].name, name, len))
            return i;
    return new_rule(p, name, len);
}

/* ---- lexing ---- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(parser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->i++;
        else if (c == '#') { while (p->i < p->n && p->s[p->i] != '\n') p->i++; }
        else break;
    }
}

static size_t name_len(const parser *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k])) k++;
    return k - at;
}

/* Whether a rule definition `name ::=` starts at p->i. */
static bool at_definition(const parser *p)
{
    size_t k = name_len(p, p->i);
    if (!k) return false;
    parser q = *p;
    q.i += k;
    skip_space(&q);
    return q.i + 3 <= q.n && !memcmp(q.s + q.i, "::=", 3);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escapes and UTF-8 decoded);
 * returns false at a malformed one. */
static bool read_char(parser *p, uint32_t *cp)
{
    size_t at = p->i;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n) { fail_at(p, at, "unfinished escape"); return false; }
        char e = p->s[p->i + 1];
        p->i += 2;
        int nhex = 0;
        switch (e) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/':
            *cp = (uint32_t)e; return true;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: fail_at(p, at, "unknown escape '\\%c'", e); return false;
        }
        uint32_t v = 0;
        for (int k = 0; k < nhex; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) { fail_at(p, at, "escape needs %d hex digits", nhex); return false; }
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF) { fail_at(p, at, "code point over U+10FFFF"); return false; }
        *cp = v;
        return true;
    }
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n) { fail_at(p, at, "invalid UTF-8"); return false; }
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80) { fail_at(p, at, "invalid UTF-8"); return false; }
        v = (v << 6) | (d & 0x3F);
    }
    p->i += (size_t)len;
    *cp = v;
    return true;
}

/* ---- classes ---- */

static int cmp_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

/* Makes a class of the pairs pushed since `from` (sorted and merged so
 * gram_cset_meets is exact); returns its id or -1. */
static int32_t end_cset(parser *p, int32_t from, bool neg)
{
    if (p->failed) return -1;
    int32_t np = (p->ranges.n - from) / 2;
    uint32_t *r = np ? (uint32_t *)p->ranges.v + from : NULL;    /* [] matches nothing */
    if (np) qsort(r, (size_t)np, 2 * sizeof *r, cmp_pair);
    int32_t w = 0;
    for (int32_t i = 0; i < np; i++) {
        if (w > 0 && r[2 * i] <= r[2 * (w - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (w - 1) + 1]) r[2 * (w - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * w] = r[2 * i];
            r[2 * w + 1] = r[2 * i + 1];
            w++;
        }
    }
    p->ranges.n = from + 2 * w;
    if (p->n_csets == p->cap_csets) {
        int32_t cap = p->cap_csets ? p->cap_csets * 2 : 64;
        gram_cset *nc = realloc(p->csets, (size_t)cap * sizeof *nc);
        if (!nc) { p->oom = p->failed = true; return -1; }
        p->csets = nc;
        p->cap_csets = cap;
    }
    p->csets[p->n_csets] = (gram_cset){ .off = from, .n = w, .neg = neg };
    return p->n_csets++;
}

static int32_t char_cset(parser *p, uint32_t lo, uint32_t hi, bool neg)
{
    int32_t from = p->ranges.n;
    if (!iv_push(p, &p->ranges, (int32_t)lo) || !iv_push(p, &p->ranges, (int32_t)hi)) return -1;
    return end_cset(p, from, neg);
}

/* ---- the grammar ---- */

static void parse_alts(parser *p, ivec *body, bool nested);

/* A helper rule whose only alternative is `items` (n of them) followed by
 * `tail` extra items; returns its id. */
static int32_t helper(parser *p, const int32_t *items, int32_t n, const int32_t *tail, int32_t n_tail,
                      bool with_empty)
{
    int32_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    ivec *b = &p->rules[r].body;
    for (int32_t k = 0; k < n; k++) iv_push(p, b, items[k]);
    for (int32_t k = 0; k < n_tail; k++) iv_push(p, b, tail[k]);
    iv_push(p, b, GRAM_END);
    if (with_empty) iv_push(p, b, GRAM_END);
    p->rules[r].defined = true;
    return r;
}

/* Digits at p->i as a count (capped past MAX_REPEAT so the bound check
 * fires), or -1 when there are none.  The text is not NUL-terminated. */
static long read_count(parser *p)
{
    long v = -1;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (p->s[p->i++] - '0');
        if (v > MAX_REPEAT) v = MAX_REPEAT + 1;
    }
    return v;
}

/* Applies a postfix operator to the item run body->v[from ..). */
static void parse_postfix(parser *p, ivec *body, int32_t from)
{
    if (p->failed || body->n == from) return;
    skip_space(p);
    if (p->i >= p->n) return;
    char c = p->s[p->i];
    if (c != '*' && c != '+' && c != '?' && c != '{') return;
    size_t at = p->i;
    long lo, hi;                  /* hi < 0: unbounded */
    p->i++;
    if (c == '*') { lo = 0; hi = -1; }
    else if (c == '+') { lo = 1; hi = -1; }
    else if (c == '?') { lo = 0; hi = 1; }
    else {
        skip_space(p);
        lo = read_count(p);
        if (lo < 0) { fail_at(p, at, "expected a number after '{'"); return; }
        skip_space(p);
        hi = lo;
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            skip_space(p);
            hi = read_count(p);                 /* -1 when absent: unbounded */
            skip_space(p);
        }
        if (p->i >= p->n || p->s[p->i] != '}') { fail_at(p, at, "expected '}' to end the repetition"); return; }
        p->i++;
        if (lo < 0 || lo > MAX_REPEAT || hi > MAX_REPEAT || (hi >= 0 && hi < lo)) {
            fail_at(p, at, "repetition bounds must satisfy 0 <= m <= n <= %d", MAX_REPEAT);
            return;
        }
    }
    /* The repeated thing as one item. */
    int32_t x;
    if (body->n - from == 1) x = body->v[from];
    else {
        int32_t r = helper(p, body->v + from, body->n - from, NULL, 0, false);
        if (r < 0) return;
        x = GRAM_REF(r);
    }
    body->n = from;
    for (long k = 0; k < lo; k++) iv_push(p, body, x);
    if (hi < 0) {                               /* R ::= x R | "" */
        int32_t r = new_rule(p, NULL, 0);
        if (r < 0) return;
        ivec *b = &p->rules[r].body;
        iv_push(p, b, x);
        iv_push(p, b, GRAM_REF(r));
        iv_push(p, b, GRAM_END);
        iv_push(p, b, GRAM_END);
        p->rules[r].defined = p->rules[r].star = true;
        iv_push(p, body, GRAM_REF(r));
    } else if (hi > lo) {                       /* R_k ::= x R_{k-1} | "" */
        int32_t prev = -1;
        for (long k = 0; k < hi - lo && !p->failed; k++) {
            int32_t tail = GRAM_REF(prev);
            prev = helper(p, &x, 1, &tail, prev >= 0 ? 1 : 0, true);
        }
        if (prev >= 0) iv_push(p, body, GRAM_REF(prev));
    }
}

static void parse_class(parser *p, ivec *body)
{
    size_t at = p->i;
    p->i++;                                     /* '[' */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    int32_t from = p->ranges.n;
    while (!p->failed) {
        if (p->i >= p->n) { fail_at(p, at, "unterminated character class"); return; }
        if (p->s[p->i] == ']') { p->i++; break; }
        uint32_t lo, hi;
        if (!read_char(p, &lo)) return;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            size_t at_hi = p->i;
            if (!read_char(p, &hi)) return;
            if (hi < lo) { fail_at(p, at_hi, "range end below its start"); return; }
        }
        iv_push(p, &p->ranges, (int32_t)lo);
        iv_push(p, &p->ranges, (int32_t)hi);
    }
    int32_t c = end_cset(p, from, neg);
    if (c >= 0) iv_push(p, body, c);
}

/* Items until '|', ')' (nested), the next definition or the end. */
static void parse_seq(parser *p, ivec *body, bool nested)
{
    for (;;) {
        skip_space(p);
        if (p->failed || p->i >= p->n) return;
        char c = p->s[p->i];
        if (c == '|' || (c == ')' && nested)) return;
        if (!nested && at_definition(p)) return;
        int32_t from = body->n;
        size_t at = p->i;
        if (c == '"') {
            p->i++;
            for (;;) {
                if (p->i >= p->n) { fail_at(p, at, "unterminated string literal"); return; }
                if (p->s[p->i] == '"') { p->i++; break; }
                uint32_t cp;
                if (!read_char(p, &cp)) return;
                int32_t cs = char_cset(p, cp, cp, false);
                if (cs < 0) return;
                iv_push(p, body, cs);
            }
            if (body->n == from) continue;      /* "" matches nothing: no item */
        } else if (c == '[') {
            parse_class(p, body);
        } else if (c == '.') {
            p->i++;
            int32_t cs = char_cset(p, 0, 0x10FFFF, false);
            if (cs >= 0) iv_push(p, body, cs);
        } else if (c == '(') {
            if (++p->depth > MAX_DEPTH) { fail_at(p, at, "groups nested deeper than %d", MAX_DEPTH); return; }
            p->i++;
            int32_t r = new_rule(p, NULL, 0);
            if (r < 0) return;
            ivec b = {0};
            parse_alts(p, &b, true);
            p->rules[r].body = b;               /* after: parse_alts may move p->rules */
            p->rules[r].defined = true;
            p->depth--;
            if (p->failed) return;
            skip_space(p);
            if (p->i >= p->n || p->s[p->i] != ')') { fail_at(p, at, "unclosed '('"); return; }
            p->i++;
            iv_push(p, body, GRAM_REF(r));
        } else if (is_name_char(c)) {
            size_t k = name_len(p, p->i);
            int32_t r = find_rule(p, p->s + p->i, k);
            if (r < 0) return;
            if (p->rules[r].ref_pos < 0) p->rules[r].ref_pos = (int64_t)p->i;
            p->i += k;
            iv_push(p, body, GRAM_REF(r));
        } else {
            fail_at(p, at, "unexpected '%c'", c);
            return;
        }
        parse_postfix(p, body, from);
    }
}

static void parse_alts(parser *p, ivec *body, bool nested)
{
    for (;;) {
        parse_seq(p, body, nested);
        iv_push(p, body, GRAM_END);
        if (p->failed) return;
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == '|') { p->i++; continue; }
        return;
    }
}

static void parse_rules(parser *p)
{
    for (;;) {
        skip_space(p);
        if (p->failed || p->i >= p->n) return;
        size_t at = p->i;
        size_t k = name_len(p, p->i);
        if (!k) { fail_at(p, at, "expected a rule name"); return; }
        int32_t r = find_rule(p, p->s + p->i, k);
        if (r < 0) return;
        p->i += k;
        skip_space(p);
        if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3)) { fail_at(p, p->i, "expected '::='"); return; }
        p->i += 3;
        if (p->rules[r].defined) { fail_at(p, at, "rule '%s' is defined twice", p->rules[r].name); return; }
        p->rules[r].defined = true;
        p->rules[r].def_pos = (int64_t)at;
        ivec b = {0};
        parse_alts(p, &b, false);
        p->rules[r].body = b;
    }
}

/* ---- checks ---- */

static bool item_nullable(const bool *nullable, int32_t item)
{
    return item < GRAM_END && nullable[GRAM_REF_RULE(item)];
}

/* DFS over "r may call s before consuming anything"; 1 = on the path. */
static int32_t left_cycle(const parser *p, const bool *nullable, int8_t *color, int32_t r)
{
    color[r] = 1;
    const ivec *b = &p->rules[r].body;
    bool at_start = true;
    for (int32_t k = 0; k < b->n; k++) {
        int32_t it = b->v[k];
        if (it == GRAM_END) { at_start = true; continue; }
        if (!at_start) continue;
        if (it < GRAM_END) {
            int32_t s = GRAM_REF_RULE(it);
            if (color[s] == 1) return s;
            if (color[s] == 0) {
                int32_t c = left_cycle(p, nullable, color, s);
                if (c >= 0) return c;
            }
        }
        if (!item_nullable(nullable, it)) at_start = false;
    }
    color[r] = 2;
    return -1;
}

/* Which rules derive the empty string: a fixed point, into nullable[p->n_rules]. */
static void find_nullable(const parser *p, bool *nullable)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < p->n_rules; r++) {
            if (nullable[r]) continue;
            const ivec *b = &p->rules[r].body;
            bool all = true;
            for (int32_t k = 0; k < b->n; k++) {
                if (b->v[k] == GRAM_END) {
                    if (all) { nullable[r] = changed = true; break; }
                    all = true;
                } else if (!item_nullable(nullable, b->v[k])) all = false;
            }
        }
    }
}

/* ---- repetitions of what may match nothing ---- */

/* x* over a nullable x is R ::= x R | "", and R reaches R without
 * consuming: left recursion, though the language is plain ((a*)*, (a?)*,
 * (a|b*)*, the regular expressions JSON Schema patterns are made of).
 * Since (x)* = (x')* where x' is x without the empty string, each such
 * star repeats x' instead.  x' (a "prime") has, for every alternative
 * Y1..Yn of x, the alternatives "Yk' Yk+1..Yn" for each k whose
 * Y1..Yk-1 may all be empty, up to the first Yk that may not (kept as
 * it is); a prime of a prime is never needed, primes being non-nullable.
 * The tails Yk+1..Yn are shared through a chain of helper rules, so a
 * long alternative costs its length, not its square.  Rules made here
 * come after n0, the rules of the text, and none of them is nullable. */
typedef struct primer {
    const bool *nullable;       /* [n0] */
    int32_t n0;
    int32_t *prime;             /* [n0] rule of r', -1 none yet */
    ivec pending;               /* rules whose prime is made but not filled */
} primer;

static bool may_be_empty(const primer *pr, int32_t item)
{
    return item < GRAM_END && GRAM_REF_RULE(item) < pr->n0 && pr->nullable[GRAM_REF_RULE(item)];
}

/* The prime of nullable rule r, made empty and queued the first time. */
static int32_t prime_of(parser *p, primer *pr, int32_t r)
{
    if (pr->prime[r] < 0) {
        int32_t q = new_rule(p, NULL, 0);
        if (q < 0) return -1;
        p->rules[q].defined = true;
        pr->prime[r] = q;
        iv_push(p, &pr->pending, r);
    }
    return pr->prime[r];
}

/* One alternative v[0, n) of a nullable rule, its non-empty forms pushed
 * to b, each ended by END. */
static void prime_alt(parser *p, primer *pr, const int32_t *v, int32_t n, ivec *b)
{
    int32_t last = 0;           /* the last k with Y1..Yk-1 nullable */
    while (last < n - 1 && may_be_empty(pr, v[last])) last++;
    /* tails[k] = rule of v[k+1, n) for k < last; v[last+1, n) goes inline */
    int32_t *tails = last ? malloc((size_t)last * sizeof *tails) : NULL;
    if (last && !tails) { p->oom = p->failed = true; return; }
    for (int32_t k = last - 1; k >= 0 && !p->failed; k--) {
        int32_t t = new_rule(p, NULL, 0);
        if (t < 0) break;
        ivec tb = {0};
        iv_push(p, &tb, v[k + 1]);
        if (k + 1 < last) iv_push(p, &tb, GRAM_REF(tails[k + 1]));
        else for (int32_t i = last + 1; i < n; i++) iv_push(p, &tb, v[i]);
        iv_push(p, &tb, GRAM_END);
        p->rules[t].body = tb;
        p->rules[t].defined = true;
        tails[k] = t;
    }
    for (int32_t k = 0; k <= last && !p->failed; k++) {
        int32_t y = may_be_empty(pr, v[k]) ? prime_of(p, pr, GRAM_REF_RULE(v[k])) : -1;
        if (p->failed) break;
        iv_push(p, b, y >= 0 ? GRAM_REF(y) : v[k]);
        if (k < last) iv_push(p, b, GRAM_REF(tails[k]));
        else for (int32_t i = last + 1; i < n; i++) iv_push(p, b, v[i]);
        iv_push(p, b, GRAM_END);
    }
    free(tails);
}

/* Fills the prime of rule r: every alternative's non-empty forms; an
 * alternative that is nothing but empty ones adds none.  A prime with no
 * alternative left (r matches only the empty string) matches nothing: []. */
static void fill_prime(parser *p, primer *pr, int32_t r)
{
    const int32_t *v = p->rules[r].body.v;      /* its own array: stays put while rules grow */
    int32_t n = p->rules[r].body.n, q = pr->prime[r];
    ivec b = {0};
    for (int32_t a = 0, k = 0; k < n && !p->failed; k++) {
        if (v[k] != GRAM_END) continue;
        if (k > a) prime_alt(p, pr, v + a, k - a, &b);
        a = k + 1;
    }
    if (!b.n && !p->failed) {
        int32_t none = end_cset(p, p->ranges.n, false);
        if (none >= 0) iv_push(p, &b, none);
        iv_push(p, &b, GRAM_END);
    }
    p->rules[q].body = b;
}

static void prime_stars(parser *p, const bool *nullable)
{
    primer pr = { .nullable = nullable, .n0 = p->n_rules };
    pr.prime = malloc((size_t)pr.n0 * sizeof *pr.prime);
    if (!pr.prime) { p->oom = p->failed = true; return; }
    for (int32_t r = 0; r < pr.n0; r++) pr.prime[r] = -1;
    for (int32_t r = 0; r < pr.n0 && !p->failed; r++) {
        if (!p->rules[r].star || !may_be_empty(&pr, p->rules[r].body.v[0])) continue;
        int32_t q = prime_of(p, &pr, GRAM_REF_RULE(p->rules[r].body.v[0]));
        if (q >= 0) p->rules[r].body.v[0] = GRAM_REF(q);
    }
    while (pr.pending.n && !p->failed) fill_prime(p, &pr, pr.pending.v[--pr.pending.n]);
    free(pr.pending.v);
    free(pr.prime);
}

static void check(parser *p, int32_t root, const char *root_name)
{
    for (int32_t r = 0; r < p->n_rules && !p->failed; r++)
        if (!p->rules[r].defined)
            fail_at(p, (size_t)p->rules[r].ref_pos, "undefined rule '%s'", p->rules[r].name);
    if (p->failed) return;
    if (root < 0 || !p->rules[root].defined || p->rules[root].def_pos < 0) {
        fail_at(p, 0, "no rule named '%s' (the start rule)", root_name);
        return;
    }
    bool *nullable = calloc((size_t)p->n_rules, sizeof *nullable);
    int8_t *color = NULL;
    if (!nullable) { p->oom = p->failed = true; return; }
    find_nullable(p, nullable);
    prime_stars(p, nullable);
    free(nullable);
    /* again over the rules prime_stars added */
    nullable = calloc((size_t)p->n_rules, sizeof *nullable);
    color = calloc((size_t)p->n_rules, sizeof *color);
    if (!nullable || !color) { p->oom = p->failed = true; goto out; }
    if (p->failed) goto out;
    find_nullable(p, nullable);
    for (int32_t r = 0; r < p->n_rules && !p->failed; r++) {
        if (color[r]) continue;
        int32_t c = left_cycle(p, nullable, color, r);
        if (c < 0) continue;
        int32_t named = p->rules[c].name ? c : p->rules[r].name ? r : root;
        fail_at(p, (size_t)MAX(p->rules[named].def_pos, 0), "left recursion through rule '%s'",
                p->rules[named].name);
    }
out:
    free(nullable);
    free(color);
}

static void free_parser(parser *p)
{
    for (int32_t r = 0; r < p->n_rules; r++) {
        free(p->rules[r].name);
        free(p->rules[r].body.v);
    }
    free(p->rules);
    free(p->ranges.v);
    free(p->csets);
}

pk_status gram_parse(const char *src, size_t len, const char *root, gram_grammar **out, gram_error *err)
{
    *out = NULL;
    if (err) memset(err, 0, sizeof *err);
    if (!root) root = "root";
    parser p = { .s = src ? src : "", .n = src ? len : 0, .err = err };
    parse_rules(&p);
    int32_t r_root = -1;
    for (int32_t r = 0; r < p.n_rules; r++)
        if (p.rules[r].name && !strcmp(p.rules[r].name, root)) r_root = r;
    if (!p.failed) check(&p, r_root, root);
    gram_grammar *g = NULL;
    if (p.failed) goto done;
    g = calloc(1, sizeof *g);
    int32_t n_code = 0, n_alt = 0;
    for (int32_t r = 0; r < p.n_rules; r++) {
        n_code += p.rules[r].body.n + 1;        /* +1: a guard END so pos+1 is always readable */
        for (int32_t k = 0; k < p.rules[r].body.n; k++) n_alt += p.rules[r].body.v[k] == GRAM_END;
    }
    if (g) {
        g->code = malloc((size_t)n_code * sizeof *g->code);
        g->alt = malloc((size_t)MAX(n_alt, 1) * sizeof *g->alt);
        g->rule_alt = malloc((size_t)(p.n_rules + 1) * sizeof *g->rule_alt);
        g->csets = malloc((size_t)MAX(p.n_csets, 1) * sizeof *g->csets);
        g->ranges = malloc((size_t)MAX(p.ranges.n, 1) * sizeof *g->ranges);
    }
    if (!g || !g->code || !g->alt || !g->rule_alt || !g->csets || !g->ranges) {
        p.oom = p.failed = true;
        goto done;
    }
    atomic_init(&g->refs, 1);
    g->n_rules = p.n_rules;
    g->root = r_root;
    g->n_csets = p.n_csets;
    if (p.n_csets) memcpy(g->csets, p.csets, (size_t)p.n_csets * sizeof *g->csets);
    if (p.ranges.n) memcpy(g->ranges, p.ranges.v, (size_t)p.ranges.n * sizeof *g->ranges);
    int32_t pc = 0, pa = 0;
    for (int32_t r = 0; r < p.n_rules; r++) {
        g->rule_alt[r] = pa;
        const ivec *b = &p.rules[r].body;
        bool start = true;
        for (int32_t k = 0; k < b->n; k++) {
            if (start) g->alt[pa++] = pc;
            g->code[pc++] = b->v[k];
            start = b->v[k] == GRAM_END;
        }
        g->code[pc++] = GRAM_END;
    }
    g->rule_alt[p.n_rules] = pa;
    g->n_code = pc;
done:
    if (p.failed && g) { gram_free(g); g = NULL; }
    free_parser(&p);
    if (p.oom) return PK_ENOMEM;
    if (p.failed) return PK_EFORMAT;
    *out = g;
    return PK_OK;
}

gram_grammar *gram_ref(gram_grammar *g)
{
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void gram_free(gram_grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    free(g->code);
    free(g->alt);
    free(g->rule_alt);
    free(g->csets);
    free(g->ranges);
    free(g);
}

int32_t gram_n_rules(const gram_grammar *g) { return g ? g->n_rules : 0; }

static bool csets_equal(const gram_grammar *a, const gram_grammar *b)
{
    for (int32_t c = 0; c < a->n_csets; c++)         /* by field: the struct has padding */
        if (a->csets[c].off != b->csets[c].off || a->csets[c].n != b->csets[c].n || a->csets[c].neg != b->csets[c].neg)
            return false;
    return true;
}

bool gram_equal(const gram_grammar *a, const gram_grammar *b)
{
    if (a == b) return true;
    if (!a || !b || a->n_code != b->n_code || a->n_rules != b->n_rules || a->root != b->root ||
        a->n_csets != b->n_csets)
        return false;
    int32_t n_alt = a->rule_alt[a->n_rules], n_ranges = 0;
    if (n_alt != b->rule_alt[b->n_rules]) return false;
    for (int32_t c = 0; c < a->n_csets; c++) n_ranges = MAX(n_ranges, a->csets[c].off + 2 * a->csets[c].n);
    return !memcmp(a->code, b->code, (size_t)a->n_code * sizeof *a->code) &&
           !memcmp(a->alt, b->alt, (size_t)n_alt * sizeof *a->alt) &&
           !memcmp(a->rule_alt, b->rule_alt, (size_t)(a->n_rules + 1) * sizeof *a->rule_alt) &&
           csets_equal(a, b) &&
           !memcmp(a->ranges, b->ranges, (size_t)n_ranges * sizeof *a->ranges);
}
