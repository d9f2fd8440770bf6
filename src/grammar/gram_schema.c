/*
 * gram_schema.c - JSON Schema -> GBNF text (then gram_parse compiles it).
 *
 * One rule per schema node, named sN (N in visiting order), plus the shared
 * JSON rules below.  Everything generated is valid by construction: where a
 * schema allows more than we can describe exactly we generate a subset of
 * it (additional properties next to listed ones are left out, \u escapes
 * are never produced, February stops at 28), and where we cannot even do
 * that we refuse with the keyword's name and path rather than produce
 * something a validator would reject.
 *
 * Objects keep the schema's property order.  Commas between optional
 * properties use two chains: A_i (nothing written yet) and B_i (something
 * written, so the next one needs a comma), so any subset of the optional
 * ones may appear, each once.
 *
 * The same walk writes Gemma 4's value syntax (gram.h, GRAM_SYNTAX_GEMMA4):
 * a `syntax` names the shared rules each node refers to and what goes
 * between tokens, and the few places that spell a value (keys, literals,
 * patterns, a number's fraction) ask it which one they write.
 */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/buf.h"
#include "gram.h"

#define MAX_REFS 256
#define MAX_DEPTH 64
#define INT_CAP 999999999999999LL    /* 15 digits: what "no bound" becomes */
#define G4_FLOAT_INT_MAX 9999999LL   /* g4-float's integer part: 7 digits */

#define JSON_RULES \
    "ws ::= [ \\t\\n]{0,20}\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n" \
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n" \
    "string ::= \"\\\"\" char* \"\\\"\"\n" \
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt]\n" \
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n" \
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n" \
    "boolean ::= \"true\" | \"false\"\n" \
    "null ::= \"null\"\n"

#define FORMAT_RULES \
    "f-date ::= [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" f-d31 | ( \"0\" [469] | \"11\" ) \"-\" f-d30" \
    " | \"02-\" f-d28 )\n" \
    "f-d28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n" \
    "f-d30 ::= f-d28 | \"29\" | \"30\"\n" \
    "f-d31 ::= f-d30 | \"31\"\n" \
    "f-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )?" \
    " ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n" \
    "f-date-time ::= f-date \"T\" f-time\n" \
    "f-uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n"

/* Gemma 4's values.  A string runs to the first <|"|> mark: g4-s0..s4 are
 * the states of that search (how much of the mark was just seen), the last
 * ">" closing the string, so the text holds no mark; NUL is left out (a
 * key's reader refuses one).  A key the template prints bare is read up to
 * ':' or '}' and past leading blanks.  Numbers are Python's repr within 15
 * significant digits, where the digits written are the digits it prints:
 * an integer part of up to 7 digits and a fraction of up to 8 without
 * trailing zeros, 0.0001 and up in fixed notation, the exponents outside
 * that range with two digits at least. */
#define GEMMA4_RULES \
    "g4-value ::= g4-object | g4-array | g4-string | g4-number | g4-boolean | g4-null\n" \
    "g4-object ::= \"{\" ( g4-key \":\" g4-value ( \",\" g4-key \":\" g4-value )* )? \"}\"\n" \
    "g4-array ::= \"[\" ( g4-value ( \",\" g4-value )* )? \"]\"\n" \
    "g4-key ::= [^ \\t\\n\\r:}<\\x00-\\x1F] [^:}\\x00-\\x1F]*\n" \
    "g4-string ::= \"<|\\\"|>\" g4-s0\n" \
    "g4-s0 ::= [^<\\x00] g4-s0 | \"<\" g4-s1\n" \
    "g4-s1 ::= [^<|\\x00] g4-s0 | \"<\" g4-s1 | \"|\" g4-s2\n" \
    "g4-s2 ::= [^<\\\"\\x00] g4-s0 | \"<\" g4-s1 | \"\\\"\" g4-s3\n" \
    "g4-s3 ::= [^<|\\x00] g4-s0 | \"<\" g4-s1 | \"|\" g4-s4\n" \
    "g4-s4 ::= [^<>\\x00] g4-s0 | \"<\" g4-s1 | \">\"\n" \
    "g4-char ::= [^<\\x00]\n" \
    "g4-integer ::= \"0\" | \"-\"? [1-9] [0-9]{0,15}\n" \
    "g4-number ::= g4-integer | \"-\"? g4-float\n" \
    "g4-float ::= [1-9] [0-9]{0,6} \".\" g4-frac | \"0.\" g4-frac0" \
    " | [1-9] ( \".\" [0-9]{0,6} [1-9] )? \"e\" g4-exp\n" \
    "g4-frac ::= \"0\" | [0-9]{0,7} [1-9]\n" \
    "g4-frac0 ::= \"0\" | \"0\"{0,3} [1-9] ( [0-9]{0,6} [1-9] )?\n" \
    "g4-exp ::= \"-\" ( \"0\" [5-9] | [1-9] [0-9] | [12] [0-9] [0-9] )" \
    " | \"+\" ( \"1\" [6-9] | [2-9] [0-9] | [12] [0-9] [0-9] )\n" \
    "g4-boolean ::= \"true\" | \"false\"\n" \
    "g4-null ::= \"None\"\n"

/* Gemma 4's string mark, which no string it writes may hold. */
static const char G4_QUOTE[] = "<|\"|>";

/* A JSON string character in a pattern: what `.` and classes may produce. */
#define STR_SAFE "\\x00-\\x1F\"\\\\"

/* What a schema's values are written with, per gram_syntax. */
typedef struct syntax {
    const char *ws;            /* between two tokens: " ws" (JSON's blanks) or "" */
    const char *value, *object, *string, *integer, *number, *boolean, *null;
    const char *key, *chr;     /* an object's free key; one character of a length-bounded string */
    const char *quote;         /* a string's delimiter as a GBNF literal */
    const char *no_char;       /* class ranges a pattern's `.` and [^...] leave out */
    bool gemma4;               /* keys bare and sorted, literals and fractions as Python prints them */
} syntax;

static const syntax SYNTAXES[] = {
    [GRAM_SYNTAX_JSON] = { " ws", "value", "object", "string", "integer", "number", "boolean", "null", "string",
                           "char", "\"\\\"\"", STR_SAFE, false },
    [GRAM_SYNTAX_GEMMA4] = { "", "g4-value", "g4-object", "g4-string", "g4-integer", "g4-number", "g4-boolean",
                             "g4-null", "g4-key", "g4-char", "\"<|\\\"|>\"", "\\x00<", true },
};

static const char JSON_OBJECT_GBNF[] = "root ::= object\n" JSON_RULES;

const char *gram_json_object_gbnf(void) { return JSON_OBJECT_GBNF; }

typedef struct conv {
    pk_buf out;                /* rules for schema nodes */
    json_t *root;
    int32_t n_rules;
    const char *ref_name[MAX_REFS];
    int32_t ref_rule[MAX_REFS];
    int32_t n_refs;
    gram_error *err;
    pk_status st;
    char path[256];
    int depth;
    const syntax *syn;
} conv;

static int32_t fail(conv *c, pk_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t fail(conv *c, pk_status st, const char *fmt, ...)
{
    if (c->st) return -1;
    c->st = st;
    if (c->err) {
        char m[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        c->err->pos = -1;
        snprintf(c->err->msg, sizeof c->err->msg, "%.120s at #%.70s", m, c->path);
    }
    return -1;
}

void gram_put_literal(pk_buf *b, const char *s, size_t n)
{
    pk_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') pk_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20) pk_buf_printf(b, "\\x%02X", ch);
        else pk_buf_put(b, &s[i], 1);
    }
    pk_buf_puts(b, "\"");
}

/* ---- Gemma 4's spelling of values ---- */

/* Whether Gemma 4's call reader takes key k bare, as the template prints
 * every key: it reads a bare key up to ':' or '}' (a control byte ends it
 * too), after skipping blanks, and one that opens with the mark as quoted. */
static bool g4_bare_key(const char *k)
{
    if (!k[0] || strchr(" \t\n\r", k[0]) || !strncmp(k, G4_QUOTE, sizeof G4_QUOTE - 1)) return false;
    for (const char *p = k; *p; p++)
        if (*p == ':' || *p == '}' || (unsigned char)*p < 0x20) return false;
    return true;
}

/* s[0..n) between the marks; false when it holds one, which would end it. */
static bool g4_put_string(pk_buf *t, const char *s, size_t n)
{
    if (memmem(s, n, G4_QUOTE, sizeof G4_QUOTE - 1)) return false;
    pk_buf_puts(t, G4_QUOTE);
    pk_buf_put(t, s, n);
    pk_buf_puts(t, G4_QUOTE);
    return true;
}

/* A key bare where the reader takes it so, else quoted (the template
 * would print it bare and lose it). */
static bool g4_put_key(pk_buf *t, const char *k)
{
    if (!g4_bare_key(k)) return g4_put_string(t, k, strlen(k));
    pk_buf_puts(t, k);
    return true;
}

/* jinja2's dictsort: keys compared with ASCII letters folded (polykv's
 * Jinja folds the same), ties kept in their order. */
static int fold_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int x = tolower((unsigned char)*a), y = tolower((unsigned char)*b);
        if (x != y || !x) return x - y;
    }
}

/* Sorts name[0..n) as dictsort does (insertion: stable), carrying sch and
 * must (either may be NULL) along. */
static void dictsort(const char **name, json_t **sch, bool *must, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && fold_cmp(name[j - 1], name[j]) > 0; j--) {
            const char *tn = name[j]; name[j] = name[j - 1]; name[j - 1] = tn;
            if (sch) { json_t *ts = sch[j]; sch[j] = sch[j - 1]; sch[j - 1] = ts; }
            if (must) { bool tm = must[j]; must[j] = must[j - 1]; must[j - 1] = tm; }
        }
}

/* v as the template's format_argument prints it: false for a string (or
 * key) holding the mark; out of memory as t->oom. */
static bool g4_put_value(pk_buf *t, const json_t *v)
{
    size_t i, n;
    const json_t *x;
    const char *k;
    bool ok = true;
    switch (json_typeof(v)) {
    case JSON_STRING: return g4_put_string(t, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: pk_buf_printf(t, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return true;
    case JSON_REAL: pk_buf_put_float_repr(t, json_real_value(v)); return true;
    case JSON_TRUE: pk_buf_puts(t, "true"); return true;
    case JSON_FALSE: pk_buf_puts(t, "false"); return true;
    case JSON_NULL: pk_buf_puts(t, "None"); return true;
    case JSON_ARRAY:
        pk_buf_puts(t, "[");
        json_array_foreach(v, i, x) {
            if (i) pk_buf_puts(t, ",");
            ok = ok && g4_put_value(t, x);
        }
        pk_buf_puts(t, "]");
        return ok;
    case JSON_OBJECT: {
        n = json_object_size(v);
        const char **keys = malloc((n + 1) * sizeof *keys);
        if (!keys) { t->oom = true; return true; }
        i = 0;
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        dictsort(keys, NULL, NULL, n);
        pk_buf_puts(t, "{");
        for (i = 0; i < n && ok; i++) {
            if (i) pk_buf_puts(t, ",");
            ok = g4_put_key(t, keys[i]);
            pk_buf_puts(t, ":");
            ok = ok && g4_put_value(t, json_object_get(v, keys[i]));
        }
        pk_buf_puts(t, "}");
        free(keys);
        return ok;
    }
    }
    return false;
}

/* A value's text in the conversion's syntax as one literal: JSON's compact
 * form, or Gemma 4's as its template prints the value. */
static bool put_value_lit(conv *c, const json_t *v)
{
    pk_buf t = {0};
    bool ok = true;
    if (c->syn->gemma4) {
        ok = g4_put_value(&t, v);
    } else {
        char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (j) pk_buf_puts(&t, j);
        else t.oom = true;
        free(j);
    }
    bool oom = t.oom;
    if (!ok) fail(c, PK_EUNSUPPORTED, "a string or key holding Gemma 4's string mark <|\"|>");
    else if (oom) fail(c, PK_ENOMEM, "out of memory");
    else gram_put_literal(&c->out, t.p, t.n);
    pk_buf_free(&t);
    return ok && !oom;
}

static int32_t gen(conv *c, const json_t *s);

static const char *const ANNOTATIONS[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "strict",
    "readOnly", "writeOnly", "deprecated", "$defs", "definitions",
};
static const char *const HANDLED[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
};

static bool known_key(const char *k)
{
    for (size_t i = 0; i < ARRAY_LEN(ANNOTATIONS); i++) if (!strcmp(k, ANNOTATIONS[i])) return true;
    for (size_t i = 0; i < ARRAY_LEN(HANDLED); i++) if (!strcmp(k, HANDLED[i])) return true;
    return false;
}

/* Starts rule sN and returns N. */
static int32_t begin(conv *c)
{
    int32_t r = c->n_rules++;
    pk_buf_printf(&c->out, "s%d ::= ", r);
    return r;
}

/* ---- integers: exact ranges as digit patterns ---- */

/* Same-length decimal strings lo <= hi: an alternation matching exactly
 * the numbers between them (the classic digit-by-digit split). */
static void put_digits_range(pk_buf *b, const char *lo, const char *hi, int n)
{
    if (n == 0) { pk_buf_puts(b, "\"\""); return; }
    if (lo[0] == hi[0]) {
        pk_buf_printf(b, "\"%c\" ", lo[0]);
        put_digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zeros = true, hi_nines = true;
    for (int i = 1; i < n; i++) { lo_zeros &= lo[i] == '0'; hi_nines &= hi[i] == '9'; }
    if (lo_zeros && hi_nines) {
        pk_buf_printf(b, "[%c-%c]", lo[0], hi[0]);
        if (n > 1) pk_buf_printf(b, " [0-9]{%d}", n - 1);
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    pk_buf_puts(b, "( ");
    char first = lo[0];
    if (!lo_zeros) {
        pk_buf_printf(b, "\"%c\" ( ", lo[0]);
        put_digits_range(b, lo + 1, nines, n - 1);
        pk_buf_puts(b, " ) | ");
        first++;
    }
    char last = hi_nines ? hi[0] : (char)(hi[0] - 1);
    if (first <= last) {
        pk_buf_printf(b, "[%c-%c]", first, last);
        if (n > 1) pk_buf_printf(b, " [0-9]{%d}", n - 1);
        pk_buf_puts(b, " | ");
    }
    if (!hi_nines) {
        pk_buf_printf(b, "\"%c\" ( ", hi[0]);
        put_digits_range(b, zeros, hi + 1, n - 1);
        pk_buf_puts(b, " ) | ");
    }
    b->n -= 3;                  /* the last " | " */
    b->p[b->n] = 0;
    pk_buf_puts(b, " )");
}

/* Non-negative integers in [lo, hi] (no leading zeros), as alternatives. */
static void put_nat_range(pk_buf *b, long long lo, long long hi)
{
    bool first = true;
    long long p10 = 1;
    for (int d = 1; d <= 16 && lo <= hi; d++, p10 *= 10) {
        long long dmin = d == 1 ? 0 : p10, dmax = p10 * 10 - 1;
        if (hi < dmin || lo > dmax) continue;
        long long a = MAX(lo, dmin), z = MIN(hi, dmax);
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sz, sizeof sz, "%lld", z);
        pk_buf_puts(b, first ? "( " : " | ");
        first = false;
        put_digits_range(b, sa, sz, d);
    }
    pk_buf_puts(b, " )");
}

static bool get_num(const json_t *s, const char *k, double *v)
{
    json_t *x = json_object_get(s, k);
    if (!x) return false;
    *v = json_number_value(x);
    return json_is_number(x);
}

static void gen_integer(conv *c, const json_t *s)
{
    double lo = -(double)INT_CAP, hi = (double)INT_CAP, v;
    bool bounded = false;
    if (get_num(s, "minimum", &v)) { lo = MAX(lo, ceil(v)); bounded = true; }
    if (get_num(s, "exclusiveMinimum", &v)) { lo = MAX(lo, floor(v) + 1); bounded = true; }
    if (get_num(s, "maximum", &v)) { hi = MIN(hi, floor(v)); bounded = true; }
    if (get_num(s, "exclusiveMaximum", &v)) { hi = MIN(hi, ceil(v) - 1); bounded = true; }
    if (!bounded) { pk_buf_puts(&c->out, c->syn->integer); return; }
    if (lo > hi || lo < -(double)INT_CAP || hi > (double)INT_CAP) {
        fail(c, PK_EUNSUPPORTED, "integer bounds that are empty or beyond 15 digits");
        return;
    }
    long long a = (long long)lo, z = (long long)hi;
    pk_buf_puts(&c->out, "( ");
    bool any = false;
    if (a < 0) {                                  /* -1 .. -|a| */
        pk_buf_puts(&c->out, "\"-\" ");
        put_nat_range(&c->out, z < 0 ? -z : 1, -a);
        any = true;
    }
    if (z >= 0) {
        if (any) pk_buf_puts(&c->out, " | ");
        put_nat_range(&c->out, MAX(a, 0), z);
    }
    pk_buf_puts(&c->out, " )");
}

static void gen_number(conv *c, const json_t *s)
{
    double v;
    if (json_object_get(s, "maximum") || json_object_get(s, "exclusiveMaximum")) {
        fail(c, PK_EUNSUPPORTED, "unsupported keyword 'maximum' on a number (integers only)");
        return;
    }
    bool excl = false;
    if (!get_num(s, "minimum", &v) && !(excl = get_num(s, "exclusiveMinimum", &v))) {
        pk_buf_puts(&c->out, c->syn->number);
        return;
    }
    /* An integer part above the bound, any fraction: always >= (or >) v. */
    long long a = (long long)floor(v) + 1;
    if (v < -(double)INT_CAP || v > (double)INT_CAP) { fail(c, PK_EUNSUPPORTED, "minimum beyond 15 digits"); return; }
    /* Below zero we generate only the non-negative part: a valid subset. */
    pk_buf_puts(&c->out, "( ");
    put_nat_range(&c->out, MAX(a, 0), INT_CAP);
    if (!c->syn->gemma4) {
        pk_buf_puts(&c->out, " ) ( \".\" [0-9]{1,16} )?");
    } else {
        /* Floats in g4-float's bounds, where the digits written are the
         * ones Python prints back. */
        pk_buf_puts(&c->out, " )");
        if (MAX(a, 1) <= G4_FLOAT_INT_MAX) {
            pk_buf_puts(&c->out, " | ( ");
            put_nat_range(&c->out, MAX(a, 1), G4_FLOAT_INT_MAX);
            pk_buf_puts(&c->out, " ) \".\" g4-frac");
        }
        if (a <= 0) pk_buf_puts(&c->out, " | \"0.\" g4-frac0");
    }
    if (!excl && v == floor(v)) {                  /* the bound itself */
        pk_buf_printf(&c->out, " | \"%lld\"", (long long)v);
    }
}

/* ---- strings ---- */

/* A string matching pattern p[0..n), between the syntax's delimiters.  JSON
 * escapes '"' and '\\' and cannot hold control bytes raw; Gemma 4's
 * strings hold both raw but no '<', which could begin the closing mark. */
static void put_pattern(conv *c, const char *p, size_t n)
{
    pk_buf *b = &c->out;
    const syntax *syn = c->syn;
    size_t i = 0, end = n;
    if (i < end && p[i] == '^') i++;
    if (end > i && p[end - 1] == '$' && (end < 2 || p[end - 2] != '\\')) end--;
    pk_buf_printf(b, "%s ( ", syn->quote);
    int open = 0;
    bool atom = false;          /* something a quantifier may repeat was just written */
    while (i < end && !c->st) {
        char ch = p[i];
        bool was_atom = atom;
        atom = true;
        if ((ch == '*' || ch == '+' || ch == '?' || ch == '{') && !was_atom) {
            fail(c, PK_EFORMAT, "pattern: '%c' at offset %zu has nothing to repeat", ch, i);
            return;
        }
        if (ch == '(') {
            i++;
            if (i + 1 < end && p[i] == '?' && p[i + 1] == ':') i += 2;
            else if (i < end && p[i] == '?') { fail(c, PK_EUNSUPPORTED, "unsupported pattern construct '(?'"); return; }
            pk_buf_puts(b, "( ");
            open++;
            atom = false;
        } else if (ch == ')') {
            if (!open) { fail(c, PK_EFORMAT, "unbalanced ')' in pattern"); return; }
            pk_buf_puts(b, ") ");
            open--;
            i++;
        } else if (ch == '|') {
            pk_buf_puts(b, "| ");
            i++;
            atom = false;
        } else if (ch == '*' || ch == '+' || ch == '?') {
            pk_buf_printf(b, "%c ", ch);
            i++;
            if (i < end && (p[i] == '?' || p[i] == '+')) i++;   /* lazy/possessive: same language */
            atom = false;
        } else if (ch == '{') {
            size_t k = i + 1;
            while (k < end && (p[k] == ',' || (p[k] >= '0' && p[k] <= '9'))) k++;
            if (k >= end || p[k] != '}' || k == i + 1) { fail(c, PK_EUNSUPPORTED, "unsupported pattern '{'"); return; }
            /* {m}, {m,} or {m,n}, checked here so that a bad one is named in the pattern's terms */
            char *after;
            long lo = strtol(p + i + 1, &after, 10), hi = lo;
            if (after == p + i + 1) { fail(c, PK_EUNSUPPORTED, "unsupported pattern repetition '{,n}'"); return; }
            if (*after == ',' && after + 1 == p + k) {
                hi = -1;
                after++;
            } else if (*after == ',') {
                hi = strtol(after + 1, &after, 10);
            }
            if (after != p + k) { fail(c, PK_EUNSUPPORTED, "unsupported pattern '{'"); return; }
            if ((hi >= 0 && hi < lo) || lo > 10000 || hi > 10000) {
                fail(c, hi >= 0 && hi < lo ? PK_EFORMAT : PK_EUNSUPPORTED, "pattern: repetition '%.*s' at offset "
                     "%zu: bounds must satisfy m <= n <= 10000", (int)(k - i + 1), p + i, i);
                return;
            }
            pk_buf_put(b, p + i, k - i + 1);
            pk_buf_puts(b, " ");
            i = k + 1;
            if (i < end && (p[i] == '?' || p[i] == '+')) i++;
            atom = false;
        } else if (ch == '.') {
            pk_buf_printf(b, "[^%s\\n] ", syn->no_char);
            i++;
        } else if (ch == '[') {
            size_t k = i + 1;
            bool neg = k < end && p[k] == '^';
            if (neg) k++;
            pk_buf_printf(b, "[%s%s", neg ? "^" : "", neg ? syn->no_char : "");
            size_t start = k;
            for (; k < end && (p[k] != ']' || k == start); k++) {
                if (p[k] == '\\' && k + 1 < end) {
                    char e = p[++k];
                    if (e == 'd') pk_buf_puts(b, "0-9");
                    else if (e == 'w') pk_buf_puts(b, "a-zA-Z0-9_");
                    else if (e == 's') pk_buf_puts(b, " ");
                    else if (e == '"' || e == '\\')
                        pk_buf_puts(b, !syn->gemma4 ? "" : e == '"' ? "\\\"" : "\\\\");   /* JSON: left out */
                    else if (e == ']' || e == '[' || e == '-' || e == '^')
                        pk_buf_puts(b, e == ']' ? "\\]" : e == '[' ? "\\[" : e == '-' ? "\\-" : "\\^");
                    else if (e == '.' || e == '/' || e == '(' || e == ')' || e == '+' || e == '*' || e == '?' ||
                             e == '{' || e == '}' || e == '|' || e == '$')
                        pk_buf_put(b, &e, 1);
                    else { fail(c, PK_EUNSUPPORTED, "unsupported pattern escape '\\%c' in a class", e); return; }
                } else if (p[k] == '"' && syn->gemma4) {
                    pk_buf_puts(b, "\\\"");
                } else if (p[k] == '"' || p[k] == '\\' || (unsigned char)p[k] < 0x20 ||
                           (p[k] == '<' && syn->gemma4)) {
                    /* not producible unescaped in JSON, nor safely in Gemma 4: left out (a subset) */
                } else if (p[k] == '[') {
                    pk_buf_puts(b, "\\[");
                } else {
                    pk_buf_put(b, &p[k], 1);
                }
            }
            if (k >= end) { fail(c, PK_EFORMAT, "unterminated '[' in pattern"); return; }
            pk_buf_puts(b, "] ");
            i = k + 1;
        } else if (ch == '\\') {
            if (i + 1 >= end) { fail(c, PK_EFORMAT, "pattern ends in '\\'"); return; }
            char e = p[i + 1];
            i += 2;
            if (e == 'd') pk_buf_puts(b, "[0-9] ");
            else if (e == 'w') pk_buf_puts(b, "[a-zA-Z0-9_] ");
            else if (e == 's') pk_buf_puts(b, "\" \" ");
            else if (e == 'D') pk_buf_printf(b, "[^%s0-9] ", syn->no_char);
            else if (e == 'W') pk_buf_printf(b, "[^%sa-zA-Z0-9_] ", syn->no_char);
            else if (e == 'S') pk_buf_printf(b, "[^%s \\t\\n\\r] ", syn->no_char);
            else if (strchr(".^$|()[]{}*+?/-\\\"", e)) {
                if ((e == '"' || e == '\\') && !syn->gemma4) pk_buf_printf(b, "\"\\\\\\%c\" ", e);   /* escaped in JSON */
                else { char lit[2] = { e, 0 }; gram_put_literal(b, lit, 1); pk_buf_puts(b, " "); }
            } else { fail(c, PK_EUNSUPPORTED, "unsupported pattern escape '\\%c'", e); return; }
        } else if (ch == '^' || ch == '$') {
            fail(c, PK_EUNSUPPORTED, "unsupported pattern anchor inside the pattern");
            return;
        } else {
            size_t k = i + 1;           /* one UTF-8 character */
            while (k < end && ((unsigned char)p[k] & 0xC0) == 0x80) k++;
            if (ch == '"' && !syn->gemma4) pk_buf_puts(b, "\"\\\\\\\"\" ");
            else if (ch == '<' && syn->gemma4) {
                fail(c, PK_EUNSUPPORTED, "'<' in a pattern (it may begin Gemma 4's string mark)");
                return;
            } else if ((unsigned char)ch < 0x20) { fail(c, PK_EUNSUPPORTED, "control character in pattern"); return; }
            else { gram_put_literal(b, p + i, k - i); pk_buf_puts(b, " "); }
            i = k;
        }
    }
    if (open) { fail(c, PK_EFORMAT, "unbalanced '(' in pattern"); return; }
    pk_buf_printf(b, ") %s", syn->quote);
}

/* Compiles a pattern's rule text g[n] alone, so that a pattern the
 * grammar cannot hold is refused here, in the pattern's words, rather
 * than later at some line of the whole generated grammar. */
static void check_pattern(conv *c, const char *pattern, const char *g, size_t n)
{
    if (c->out.oom) { fail(c, PK_ENOMEM, "out of memory"); return; }
    pk_buf t = {0};
    pk_buf_puts(&t, "root ::= ");
    pk_buf_put(&t, g, n);
    gram_grammar *gg = NULL;
    gram_error e;
    pk_status st = t.oom ? PK_ENOMEM : gram_parse(t.p, t.n, NULL, &gg, &e);
    pk_buf_free(&t);
    gram_free(gg);
    if (st == PK_ENOMEM) fail(c, PK_ENOMEM, "out of memory");
    else if (st) fail(c, PK_EUNSUPPORTED, "pattern '%.40s%s' cannot be compiled: %s", pattern,
                      strlen(pattern) > 40 ? "..." : "", e.msg);
}

static void gen_string(conv *c, const json_t *s)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if ((fmt || pat) && (mn || mx)) {
        fail(c, PK_EUNSUPPORTED, "unsupported keyword 'minLength/maxLength' together with '%s'",
             fmt ? "format" : "pattern");
        return;
    }
    if (fmt && pat) { fail(c, PK_EUNSUPPORTED, "unsupported keyword 'pattern' together with 'format'"); return; }
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) { fail(c, PK_EFORMAT, "'format' must be a string"); return; }
        if (strcmp(f, "date") && strcmp(f, "time") && strcmp(f, "date-time") && strcmp(f, "uuid")) {
            fail(c, PK_EUNSUPPORTED, "unsupported format '%s' (date, time, date-time, uuid)", f);
            return;
        }
        pk_buf_printf(&c->out, "%s f-%s %s", c->syn->quote, f, c->syn->quote);
        return;
    }
    if (pat) {
        const char *p = json_string_value(pat);
        if (!p) { fail(c, PK_EFORMAT, "'pattern' must be a string"); return; }
        size_t from = c->out.n;
        put_pattern(c, p, strlen(p));
        if (!c->st) check_pattern(c, p, c->out.p + from, c->out.n - from);
        return;
    }
    if (!mn && !mx) { pk_buf_puts(&c->out, c->syn->string); return; }
    json_int_t lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if ((mn && (!json_is_integer(mn) || lo < 0)) || (mx && (!json_is_integer(mx) || hi < lo))) {
        fail(c, PK_EFORMAT, "minLength/maxLength must be integers with 0 <= minLength <= maxLength");
        return;
    }
    if (lo > 10000 || hi > 10000) { fail(c, PK_EUNSUPPORTED, "string lengths over 10000"); return; }
    const syntax *syn = c->syn;
    if (hi < 0) pk_buf_printf(&c->out, "%s %s{%lld,} %s", syn->quote, syn->chr, (long long)lo, syn->quote);
    else pk_buf_printf(&c->out, "%s %s{%lld,%lld} %s", syn->quote, syn->chr, (long long)lo, (long long)hi,
                       syn->quote);
}

/* ---- objects and arrays ---- */

static bool in_required(const json_t *req, const char *k)
{
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), k)) return true;
    return false;
}

static void path_push(conv *c, size_t *mark, const char *a, const char *b)
{
    *mark = strlen(c->path);
    snprintf(c->path + *mark, sizeof c->path - *mark, "/%s%s%s", a, b ? "/" : "", b ? b : "");
}

/* Property k's key as a literal, then its ':' and value: rule sR, or any
 * value when r < 0. */
static void put_kv(conv *c, const char *k, int32_t r)
{
    const syntax *syn = c->syn;
    pk_buf t = {0};
    bool ok = true;
    if (syn->gemma4) {
        ok = g4_put_key(&t, k);
    } else {
        json_t *js = json_string(k);
        char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;   /* the key, JSON-escaped */
        json_decref(js);
        if (q) pk_buf_puts(&t, q);
        else t.oom = true;
        free(q);
    }
    if (!ok) fail(c, PK_EUNSUPPORTED, "a key holding Gemma 4's string mark <|\"|>");
    else if (t.oom) fail(c, PK_ENOMEM, "out of memory");
    else gram_put_literal(&c->out, t.p, t.n);
    pk_buf_free(&t);
    if (r >= 0) pk_buf_printf(&c->out, "%s \":\"%s s%d%s\n", syn->ws, syn->ws, r, syn->ws);
    else pk_buf_printf(&c->out, "%s \":\"%s %s%s\n", syn->ws, syn->ws, syn->value, syn->ws);
}

static void gen_object(conv *c, json_t *s, int32_t self)
{
    const syntax *syn = c->syn;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req))) {
        fail(c, PK_EFORMAT, "'properties' must be an object and 'required' an array");
        return;
    }
    if (addl && !json_is_boolean(addl) && !json_is_object(addl)) {
        fail(c, PK_EFORMAT, "'additionalProperties' must be a boolean or a schema");
        return;
    }
    /* Names: the listed properties, then required ones that are not listed. */
    size_t n = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
    const char **name = calloc(n + 1, sizeof *name);
    json_t **sch = calloc(n + 1, sizeof *sch);
    bool *must = calloc(n + 1, sizeof *must);
    int32_t *rule = calloc(n + 1, sizeof *rule);
    if (!name || !sch || !must || !rule) { fail(c, PK_ENOMEM, "out of memory"); goto out; }
    size_t k = 0;
    const char *key;
    json_t *v;
    if (props) json_object_foreach(props, key, v) { name[k] = key; sch[k] = v; must[k] = req && in_required(req, key); k++; }
    size_t i;
    if (req) json_array_foreach(req, i, v) {
        if (!json_is_string(v)) { fail(c, PK_EFORMAT, "'required' must list strings"); goto out; }
        if (props && json_object_get(props, json_string_value(v))) continue;
        bool dup = false;
        for (size_t j = 0; j < k; j++) dup |= !strcmp(name[j], json_string_value(v));
        if (!dup) { name[k] = json_string_value(v); sch[k] = NULL; must[k] = true; k++; }
    }
    n = k;
    /* The template prints a dict's keys sorted. */
    if (syn->gemma4) dictsort(name, sch, must, n);
    if (n == 0) {                                  /* a map: keys free, values by additionalProperties */
        if (addl && json_is_false(addl)) { pk_buf_printf(&c->out, "\"{\"%s \"}\"\n", syn->ws); goto out; }
        int32_t vr = -1;
        if (addl && json_is_object(addl)) {
            const char *w = syn->ws, *fk = syn->key;
            pk_buf_printf(&c->out, "\"{\"%s ( %s%s \":\"%s ", w, fk, w, w);
            size_t mark = 0;
            path_push(c, &mark, "additionalProperties", NULL);
            /* the value rule is emitted after this line */
            pk_buf_printf(&c->out, "s%d-v%s ( \",\"%s %s%s \":\"%s s%d-v%s )* )? \"}\"\n", self, w, w, fk, w, w,
                          self, w);
            vr = gen(c, addl);
            if (vr >= 0) pk_buf_printf(&c->out, "s%d-v ::= s%d\n", self, vr);
            c->path[mark] = 0;
        } else {
            pk_buf_printf(&c->out, "%s\n", syn->object);
        }
        goto out;
    }
    /* Value rules first (each one its own line), then the chains. */
    pk_buf_printf(&c->out, "\"{\"%s s%d-a0 \"}\"\n", syn->ws, self);
    for (k = 0; k < n && !c->st; k++) {
        size_t mark = 0;
        path_push(c, &mark, "properties", name[k]);
        rule[k] = sch[k] ? gen(c, sch[k]) : -1;
        c->path[mark] = 0;
    }
    for (k = 0; k < n && !c->st; k++) {
        pk_buf_printf(&c->out, "s%d-kv%zu ::= ", self, k);
        put_kv(c, name[k], rule[k]);
        if (must[k]) {
            pk_buf_printf(&c->out, "s%d-a%zu ::= s%d-kv%zu s%d-b%zu\n", self, k, self, k, self, k + 1);
            pk_buf_printf(&c->out, "s%d-b%zu ::= \",\"%s s%d-kv%zu s%d-b%zu\n", self, k, syn->ws, self, k, self,
                          k + 1);
        } else {
            pk_buf_printf(&c->out, "s%d-a%zu ::= s%d-kv%zu s%d-b%zu | s%d-a%zu\n", self, k, self, k, self, k + 1,
                          self, k + 1);
            pk_buf_printf(&c->out, "s%d-b%zu ::= \",\"%s s%d-kv%zu s%d-b%zu | s%d-b%zu\n", self, k, syn->ws, self, k,
                          self, k + 1, self, k + 1);
        }
    }
    pk_buf_printf(&c->out, "s%d-a%zu ::= \"\"\ns%d-b%zu ::= \"\"\n", self, n, self, n);
out:
    free(name);
    free(sch);
    free(must);
    free(rule);
}

static void gen_array(conv *c, json_t *s, int32_t self)
{
    const char *w = c->syn->ws;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *jmin = json_object_get(s, "minItems"), *jmax = json_object_get(s, "maxItems");
    json_int_t mn = jmin ? json_integer_value(jmin) : 0, mx = jmax ? json_integer_value(jmax) : -1;
    if ((jmin && (!json_is_integer(jmin) || mn < 0)) || (jmax && (!json_is_integer(jmax) || mx < mn))) {
        fail(c, PK_EFORMAT, "minItems/maxItems must be integers with 0 <= minItems <= maxItems");
        return;
    }
    if (mn > 1000 || mx > 1000) { fail(c, PK_EUNSUPPORTED, "minItems/maxItems over 1000"); return; }
    const char *prefix_key = "prefixItems";
    if (items && json_is_array(items) && !prefix) {
        /* draft 4-2019's tuple form, which llama.cpp's converter reads too:
         * exactly those items, in order. */
        prefix = items;
        prefix_key = "items";
        items = NULL;
    }
    if (items && !json_is_object(items) && !json_is_boolean(items)) {
        fail(c, PK_EUNSUPPORTED, "unsupported keyword 'items' as a list beside prefixItems");
        return;
    }
    if (prefix) {
        if (!json_is_array(prefix)) { fail(c, PK_EFORMAT, "'prefixItems' must be an array"); return; }
        if (jmin || jmax) {
            fail(c, PK_EUNSUPPORTED, "unsupported keyword 'minItems/maxItems' with a tuple ('%s')", prefix_key);
            return;
        }
        size_t np = json_array_size(prefix);
        pk_buf_printf(&c->out, "\"[\"%s", w);
        for (size_t i = 0; i < np; i++)
            pk_buf_printf(&c->out, "%s%s s%d-p%zu%s", i ? " \",\"" : "", i ? w : "", self, i, w);
        pk_buf_puts(&c->out, " \"]\"\n");
        for (size_t i = 0; i < np && !c->st; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            size_t mark = 0;
            path_push(c, &mark, prefix_key, idx);
            int32_t r = gen(c, json_array_get(prefix, i));
            if (r >= 0) pk_buf_printf(&c->out, "s%d-p%zu ::= s%d\n", self, i, r);
            c->path[mark] = 0;
        }
        return;
    }
    if (mx == 0 || (items && json_is_false(items))) { pk_buf_printf(&c->out, "\"[\"%s \"]\"\n", w); return; }
    const char *it = c->syn->value;
    char itn[32];
    if (items && json_is_object(items)) {
        snprintf(itn, sizeof itn, "s%d-i", self);
        it = itn;
    }
    if (mn == 0) pk_buf_printf(&c->out, "\"[\"%s ( %s%s ( \",\"%s %s%s )", w, it, w, w, it, w);
    else pk_buf_printf(&c->out, "\"[\"%s %s%s ( \",\"%s %s%s )", w, it, w, w, it, w);
    json_int_t lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) pk_buf_printf(&c->out, "{%lld,}", (long long)lo);
    else pk_buf_printf(&c->out, "{%lld,%lld}", (long long)lo, (long long)mx - 1);
    pk_buf_puts(&c->out, mn == 0 ? " )? \"]\"\n" : " \"]\"\n");
    if (it == itn) {
        size_t mark = 0;
        path_push(c, &mark, "items", NULL);
        int32_t r = gen(c, items);
        if (r >= 0) pk_buf_printf(&c->out, "%s ::= s%d\n", itn, r);
        c->path[mark] = 0;
    }
}

/* ---- schema nodes ---- */

static int32_t gen_ref(conv *c, const char *ref)
{
    const char *name = NULL;
    json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) { defs = json_object_get(c->root, "$defs"); name = ref + 8; }
    else if (!strncmp(ref, "#/definitions/", 14)) { defs = json_object_get(c->root, "definitions"); name = ref + 14; }
    else if (!strcmp(ref, "#")) { name = ""; }
    else return fail(c, PK_EUNSUPPORTED, "unsupported $ref '%s' (only #, #/$defs/... and #/definitions/...)", ref);
    for (int32_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_name[i], ref)) return c->ref_rule[i];
    json_t *target = name[0] ? json_object_get(defs, name) : c->root;
    if (!target) return fail(c, PK_EFORMAT, "$ref '%s' points nowhere", ref);
    if (c->n_refs == MAX_REFS) return fail(c, PK_EUNSUPPORTED, "more than %d $ref targets", MAX_REFS);
    /* Named before it is generated, so a recursive reference finds it. */
    int32_t r = c->n_rules++;
    c->ref_name[c->n_refs] = ref;
    c->ref_rule[c->n_refs++] = r;
    int32_t t = gen(c, target);
    if (t < 0) return -1;
    pk_buf_printf(&c->out, "s%d ::= s%d\n", r, t);
    return r;
}

/* The body of one type's alternative for schema s. */
static void gen_type(conv *c, json_t *s, const char *t, int32_t self)
{
    if (!strcmp(t, "string")) gen_string(c, s);
    else if (!strcmp(t, "integer")) gen_integer(c, s);
    else if (!strcmp(t, "number")) gen_number(c, s);
    else if (!strcmp(t, "boolean")) pk_buf_puts(&c->out, c->syn->boolean);
    else if (!strcmp(t, "null")) pk_buf_puts(&c->out, c->syn->null);
    else if (!strcmp(t, "object") || !strcmp(t, "array")) {
        /* Its own rule so multi-line output stays one alternative. */
        int32_t r = c->n_rules++;
        pk_buf_printf(&c->out, "s%d\n", r);
        pk_buf_printf(&c->out, "s%d ::= ", r);
        if (t[0] == 'o') gen_object(c, s, r); else gen_array(c, s, r);
        (void)self;
        return;
    } else { fail(c, PK_EUNSUPPORTED, "unsupported type '%s'", t); return; }
    pk_buf_puts(&c->out, "\n");
}

/* Merges allOf's object schemas into one (properties and required). */
static json_t *merge_all_of(conv *c, json_t *s)
{
    json_t *m = json_deep_copy(s), *all = json_object_get(s, "allOf");
    if (!m) return NULL;
    json_object_del(m, "allOf");
    if (!json_is_array(all)) { fail(c, PK_EFORMAT, "'allOf' must be an array"); json_decref(m); return NULL; }
    size_t i;
    json_t *part;
    json_array_foreach(all, i, part) {
        json_t *ref = json_object_get(part, "$ref");
        if (ref && json_is_string(ref) && !strncmp(json_string_value(ref), "#/$defs/", 8))
            part = json_object_get(json_object_get(c->root, "$defs"), json_string_value(ref) + 8);
        const char *key;
        json_t *v;
        json_object_foreach(part, key, v) {
            if (!strcmp(key, "properties")) {
                json_t *p = json_object_get(m, "properties");
                if (!p) json_object_set_new(m, "properties", (p = json_object()));
                json_object_update(p, v);
            } else if (!strcmp(key, "required")) {
                json_t *r = json_object_get(m, "required");
                if (!r) json_object_set_new(m, "required", (r = json_array()));
                json_array_extend(r, v);
            } else if (!strcmp(key, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object")) {
                json_object_set(m, "type", v);
            } else if (strcmp(key, "title") && strcmp(key, "description") && strcmp(key, "$comment")) {
                fail(c, PK_EUNSUPPORTED, "unsupported keyword '%s' inside allOf (objects only)", key);
                json_decref(m);
                return NULL;
            }
        }
    }
    return m;
}

/* Emits rule sN for schema s (the caller has written nothing of it) and
 * returns N, or -1 after a failure. */
static int32_t gen(conv *c, const json_t *cs)
{
    json_t *s = (json_t *)cs;
    if (c->st) return -1;
    if (++c->depth > MAX_DEPTH) return fail(c, PK_EUNSUPPORTED, "schema nested deeper than %d", MAX_DEPTH);
    int32_t self = -1;
    if (json_is_true(s)) { self = begin(c); pk_buf_printf(&c->out, "%s\n", c->syn->value); goto out; }
    if (json_is_false(s)) { fail(c, PK_EUNSUPPORTED, "unsupported schema 'false' (nothing is valid)"); goto out; }
    if (!json_is_object(s)) { fail(c, PK_EFORMAT, "a schema must be an object or a boolean"); goto out; }
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v)
        if (!known_key(key)) { fail(c, PK_EUNSUPPORTED, "unsupported keyword '%s'", key); goto out; }
    if ((v = json_object_get(s, "allOf"))) {
        json_t *m = merge_all_of(c, s);
        if (m) self = gen(c, m);
        json_decref(m);
        goto out;
    }
    if ((v = json_object_get(s, "$ref"))) {
        if (!json_is_string(v)) { fail(c, PK_EFORMAT, "'$ref' must be a string"); goto out; }
        int32_t r = gen_ref(c, json_string_value(v));
        if (r < 0) goto out;
        self = begin(c);
        pk_buf_printf(&c->out, "s%d\n", r);
        goto out;
    }
    if ((v = json_object_get(s, "const"))) {
        self = begin(c);
        if (put_value_lit(c, v)) pk_buf_puts(&c->out, "\n");
        goto out;
    }
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v)) { fail(c, PK_EFORMAT, "'enum' must be a non-empty array"); goto out; }
        self = begin(c);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) pk_buf_puts(&c->out, " | ");
            if (!put_value_lit(c, e)) goto out;
        }
        pk_buf_puts(&c->out, "\n");
        goto out;
    }
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (any) {
        if (!json_is_array(any) || !json_array_size(any)) { fail(c, PK_EFORMAT, "'anyOf'/'oneOf' must be a non-empty array"); goto out; }
        size_t n = json_array_size(any);
        int32_t *alt = calloc(n, sizeof *alt);
        if (!alt) { fail(c, PK_ENOMEM, "out of memory"); goto out; }
        for (size_t i = 0; i < n && !c->st; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            size_t mark = 0;
            path_push(c, &mark, json_object_get(s, "anyOf") ? "anyOf" : "oneOf", idx);
            alt[i] = gen(c, json_array_get(any, i));
            c->path[mark] = 0;
        }
        if (!c->st) {
            self = begin(c);
            for (size_t i = 0; i < n; i++) pk_buf_printf(&c->out, "%ss%d", i ? " | " : "", alt[i]);
            pk_buf_puts(&c->out, "\n");
        }
        free(alt);
        goto out;
    }
    json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = json_object_get(s, "properties") || json_object_get(s, "required") ||
                        json_object_get(s, "additionalProperties") ? "object"
                      : json_object_get(s, "items") || json_object_get(s, "prefixItems") ? "array"
                      : json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
                        json_object_get(s, "pattern") || json_object_get(s, "format") ? "string" : NULL;
        self = begin(c);
        if (t) gen_type(c, s, t, self);
        else pk_buf_printf(&c->out, "%s\n", c->syn->value);
        goto out;
    }
    if (json_is_string(type)) {
        self = begin(c);
        gen_type(c, s, json_string_value(type), self);
        goto out;
    }
    if (!json_is_array(type) || !json_array_size(type)) { fail(c, PK_EFORMAT, "'type' must be a string or a list"); goto out; }
    {
        size_t n = json_array_size(type);
        int32_t *alt = calloc(n, sizeof *alt);
        if (!alt) { fail(c, PK_ENOMEM, "out of memory"); goto out; }
        for (size_t i = 0; i < n && !c->st; i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (!t) { fail(c, PK_EFORMAT, "'type' lists strings"); break; }
            alt[i] = begin(c);
            gen_type(c, s, t, alt[i]);
        }
        if (!c->st) {
            self = begin(c);
            for (size_t i = 0; i < n; i++) pk_buf_printf(&c->out, "%ss%d", i ? " | " : "", alt[i]);
            pk_buf_puts(&c->out, "\n");
        }
        free(alt);
    }
out:
    c->depth--;
    return c->st ? -1 : self;
}

/* Copies rules text to b with `pfx` before every schema rule name (sN...),
 * leaving literals, classes and the shared rules' names alone. */
static void put_prefixed(pk_buf *b, const char *t, size_t n, const char *pfx)
{
    for (size_t i = 0; i < n;) {
        char ch = t[i];
        if (ch == '"' || ch == '[') {
            char close = ch == '"' ? '"' : ']';
            size_t k = i + 1;
            while (k < n && t[k] != close) k += t[k] == '\\' ? 2 : 1;
            k = MIN(k + 1, n);
            pk_buf_put(b, t + i, k - i);
            i = k;
            continue;
        }
        bool word_start = i == 0 || !(t[i - 1] == '-' || t[i - 1] == '_' || (t[i - 1] >= 'a' && t[i - 1] <= 'z') ||
                                      (t[i - 1] >= 'A' && t[i - 1] <= 'Z') || (t[i - 1] >= '0' && t[i - 1] <= '9'));
        if (word_start && ch == 's' && i + 1 < n && t[i + 1] >= '0' && t[i + 1] <= '9') pk_buf_puts(b, pfx);
        pk_buf_put(b, &ch, 1);
        i++;
    }
}

const char *gram_syntax_rules(gram_syntax syn)
{
    return syn == GRAM_SYNTAX_GEMMA4 ? GEMMA4_RULES FORMAT_RULES : JSON_RULES FORMAT_RULES;
}

pk_status gram_schema_rules(const char *schema, size_t len, const char *prefix, gram_syntax syn, char **out,
                            gram_error *err)
{
    *out = NULL;
    if (err) { memset(err, 0, sizeof *err); err->pos = -1; }
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) {
        if (err) {
            err->pos = je.position;
            err->line = je.line;
            err->col = je.column;
            snprintf(err->msg, sizeof err->msg, "schema is not JSON: %s", je.text);
        }
        return PK_EFORMAT;
    }
    /* An unknown syntax writes JSON rather than read past the table. */
    conv c = { .root = root, .err = err, .syn = &SYNTAXES[syn == GRAM_SYNTAX_GEMMA4 ? syn : GRAM_SYNTAX_JSON] };
    int32_t r = gen(&c, root);
    pk_buf b = {0};
    if (!c.st) {
        pk_buf_printf(&b, "%sroot ::= %ss%d\n", prefix, prefix, r);
        put_prefixed(&b, c.out.p ? c.out.p : "", c.out.n, prefix);
        if (b.oom || c.out.oom) c.st = PK_ENOMEM;
    }
    pk_buf_free(&c.out);
    json_decref(root);
    if (c.st) {
        pk_buf_free(&b);
        if (c.st == PK_ENOMEM && err) snprintf(err->msg, sizeof err->msg, "out of memory");
        return c.st;
    }
    *out = b.p;
    return PK_OK;
}

pk_status gram_schema_to_gbnf(const char *schema, size_t len, char **out, gram_error *err)
{
    char *rules;
    pk_status st = gram_schema_rules(schema, len, "", GRAM_SYNTAX_JSON, &rules, err);
    if (st) { *out = NULL; return st; }
    pk_buf b = {0};
    pk_buf_puts(&b, rules);
    pk_buf_puts(&b, gram_syntax_rules(GRAM_SYNTAX_JSON));
    free(rules);
    if (b.oom) { pk_buf_free(&b); *out = NULL; return PK_ENOMEM; }
    *out = b.p;
    return PK_OK;
}
