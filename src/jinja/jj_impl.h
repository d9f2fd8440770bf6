/*
 * jj_impl.h - what the files of the Jinja module share: the arena, the
 * values, the syntax tree and the one way out on an error.
 *
 * DESIGN
 *   Everything a compile or a render allocates comes from one arena that is
 *   freed at once: a template's tree lives in the template's arena, a
 *   render's values in the render's own.  Values are never freed one by one
 *   and never mutated once another value can see them (the sandbox forbids
 *   list.append and dict.update; only a namespace's attributes change), so
 *   they need no reference counts.  Because nothing between a failure and
 *   jj_compile / jj_render holds a resource of its own, an error unwinds
 *   with longjmp to the entry point (jj_fail), which frees the arena; the
 *   evaluator's code therefore reads as the happy path.
 *
 *   jv (a value) is 16 bytes, passed by value:
 *     UNDEF NONE BOOL INT FLOAT        inline
 *     STR  -> jstr {n, p[n]}           UTF-8 bytes, NUL-terminated
 *     LIST -> jlist {n, v[]}           tuple changes repr(); gen marks a generator
 *     DICT / NS -> jdict {n, k[], v[]} insertion order; NS is namespace()
 *     MACRO -> jj_node (the macro)     LOOP -> jloop (the for's state)
 *     FUNC  -> builtin id (range, namespace, raise_exception, ...)
 */
#ifndef JJ_IMPL_H
#define JJ_IMPL_H

#include <setjmp.h>
#include <stdint.h>

#include "jj.h"
#include "../common/buf.h"

/* ---- failing ---------------------------------------------------------- */

typedef struct jj_fail {
    jmp_buf jb;
    pk_status st;
    int line;
    char msg[200];
} jj_fail;

/* Records the error (status, template line, message) and longjmps out. */
_Noreturn void jj_throw(jj_fail *f, pk_status st, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- the arena -------------------------------------------------------- */

typedef struct jj_chunk jj_chunk;
typedef struct jj_tbuf jj_tbuf;
typedef struct jj_arena {
    jj_chunk *head;
    jj_tbuf *bufs;                 /* growing buffers handed out by jj_buf */
    size_t n_bytes, max_bytes;     /* allocated so far, the cap (0 = none) */
    jj_fail *fail;                 /* where an allocation failure goes */
} jj_arena;

void *jj_alloc(jj_arena *a, size_t n);          /* zeroed, 16-aligned */
char *jj_strndup(jj_arena *a, const char *s, size_t n);
/* A growing text buffer whose memory the arena frees if an error unwinds
 * past it (pk_buf_free it when done; the struct itself is the arena's). */
pk_buf *jj_buf(jj_arena *a);
void jj_arena_free(jj_arena *a);

/* ---- values ----------------------------------------------------------- */

typedef enum jv_type {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS,
    JV_MACRO, JV_LOOP, JV_FUNC,
} jv_type;

typedef struct jstr { size_t n; char p[]; } jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
struct jj_node;

typedef struct jv {
    jv_type t;
    bool safe;               /* STR: a markupsafe.Markup (the `safe` filter's result) */
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d;
        struct jj_node *m;
        jloop *lp;
        int fn;
    };
} jv;

/* gen: a jinja2 filter's generator (map, select, items, ...): always true,
 * no len(), no index, not JSON; iterating it is all one can do. */
struct jlist { size_t n, cap; bool tuple, gen; jv *v; };
struct jdict { size_t n, cap; jv *k, *v; };
struct jloop {
    const jv *items;
    int64_t n, i;
};

enum jj_builtin { JJ_FN_RANGE = 1, JJ_FN_NAMESPACE, JJ_FN_DICT, JJ_FN_RAISE, JJ_FN_STRFTIME,
                  JJ_FN_CYCLE };

static inline jv jv_undef(void) { jv v = { .t = JV_UNDEF }; return v; }
static inline jv jv_none(void) { jv v = { .t = JV_NONE }; return v; }
static inline jv jv_bool(bool b) { jv v = { .t = JV_BOOL, .b = b }; return v; }
static inline jv jv_int(int64_t i) { jv v = { .t = JV_INT, .i = i }; return v; }
static inline jv jv_float(double f) { jv v = { .t = JV_FLOAT, .f = f }; return v; }

jv jv_str(jj_arena *a, const char *s, size_t n);
jv jv_cstr(jj_arena *a, const char *s);
jv jv_list(jj_arena *a, size_t cap);
void jv_push(jj_arena *a, jv *list, jv item);
jv jv_dict(jj_arena *a, size_t cap);
/* Sets key k (replacing an equal key in place, else appending). */
void jv_dset(jj_arena *a, jv *dict, jv k, jv v);
/* The value under key k, or NULL. */
jv *jv_dget(const jdict *d, jv k);
jv *jv_dget_s(const jdict *d, const char *k);

bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
bool jv_is_num(jv v);                 /* int, float or bool (Python's bool is an int) */
double jv_num(jv v);
const char *jv_type_name(jv v);

/* str(v) as Python prints it ("None", "True", "[1, 'a']"); repr(v). */
void jv_write_str(pk_buf *b, jv v);
void jv_write_repr(pk_buf *b, jv v);
jv jv_to_str(jj_arena *a, jv v);       /* v itself when it is a string */
/* markupsafe.escape: & < > " ' as HTML entities; a safe string as it is. */
jv jv_escape(jj_arena *a, jv v);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent NULL = none.
 * Returns false when v holds something JSON cannot (undefined, a macro). */
typedef struct jj_dumps {
    bool ensure_ascii, sort_keys;
    const char *indent;            /* NULL = no newlines */
    const char *item_sep, *key_sep;
} jj_dumps;
bool jv_write_json(pk_buf *b, jv v, const jj_dumps *o, int depth);

jv jv_from_json(jj_arena *a, const json_t *j);

/* Number of code points of a UTF-8 string, and the byte offset of code point
 * i (i <= the count). */
size_t jj_utf8_len(const char *s, size_t n);
size_t jj_utf8_off(const char *s, size_t n, size_t i);

/* ---- the syntax tree -------------------------------------------------- */

typedef enum jj_kind {
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BINARY, N_AND, N_OR, N_NOT, N_COND, N_CONCAT,
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK,
    N_BREAK, N_CONTINUE, N_BODY,
} jj_kind;

typedef struct jj_node jj_node;
struct jj_node {
    jj_kind kind;
    int line;
    int op;                  /* N_UNARY / N_BINARY: the operator token; N_TEST: negated */
    const char *name;        /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_MACRO, N_SET target attr */
    jv lit;                  /* N_LIT; N_TEXT (its string) */
    jj_node *a, *b, *c;      /* operands; N_IF: cond, then, else; N_FOR: target, iter, filter */
    jj_node **kids;          /* N_LIST/N_DICT items (dict: k0 v0 k1 v1), call args, N_BODY */
    int n_kids;
    const char **kw;         /* call keyword names, NULL for positional (parallel to kids) */
    jj_node *body, *alt;     /* N_FOR body / else, N_MACRO body (kids = params, defaults
                                in kids' ->a), N_CALLBLOCK body */
    int filt;                /* N_FILTER / N_TEST: index into the filter / test table */
};

/* Operators carried in jj_node.op. */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT, OP_LE,
       OP_GT, OP_GE, OP_IN, OP_NOTIN, OP_NEG, OP_POS };

/* Parses src into *out (a N_BODY), nodes from a; errors through a->fail. */
jj_node *jj_parse(jj_arena *a, const char *src, size_t n);

/* ---- filters, tests and methods (jj_filt.c) --------------------------- */

typedef struct jj_rt jj_rt;      /* the render's state (jj_eval.c) */

/* Index of a filter / test by name, or -1: the parser checks names at
 * compile time, as jinja2 does. */
int jj_filter_index(const char *name);
int jj_test_index(const char *name);

/* args[0] is the value filtered / tested; kw[i] names args[i] or is NULL. */
jv jj_apply_filter(jj_rt *rt, int line, int filt, jv *args, const char **kw, int n);
bool jj_apply_test(jj_rt *rt, int line, int test, jv *args, int n);
/* self.name(args): a str / dict / list method; *found false when there is none. */
jv jj_call_method(jj_rt *rt, int line, jv self, const char *name, jv *args, const char **kw,
                  int n, bool *found);

/* What jj_filt.c needs from the evaluator. */
jj_arena *jj_rt_arena(jj_rt *rt);
jj_fail *jj_rt_fail(jj_rt *rt);
/* obj.name / obj[key] with jinja2's rules (getattr then getitem). */
jv jj_getattr(jj_rt *rt, int line, jv obj, const char *name);
jv jj_getitem(jj_rt *rt, int line, jv obj, jv key);
/* Python's <: ints, floats and strings; anything else is an error. */
int jj_compare(jj_rt *rt, int line, jv a, jv b);
/* The items of an iterable (list, tuple, dict keys, string's characters). */
jv jj_iter_list(jj_rt *rt, int line, jv v);

#endif
