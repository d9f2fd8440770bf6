/*
 * buf.h - a growing text buffer: the one the server's and the template's
 * writers share (tool-call parsing, Prometheus text, chat rendering, the
 * request body); and the growing of plain arrays.
 *
 * The text is always NUL-terminated once anything was put.  An allocation
 * failure sets oom and makes every later put a no-op, so a writer puts
 * everything and checks oom once at the end.  Zero-initialize to start;
 * pk_buf_free (or free(b.p)) when done.
 */
#ifndef PK_BUF_H
#define PK_BUF_H

#include "pk.h"

typedef struct pk_buf {
    char *p;
    size_t n, cap;    /* bytes of text (without the NUL), bytes allocated */
    bool oom;
} pk_buf;

void pk_buf_put(pk_buf *b, const void *s, size_t n);
void pk_buf_puts(pk_buf *b, const char *s);
void pk_buf_printf(pk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* f as Python's repr() writes a float: the shortest digits that read back
 * the same, fixed notation for decimal exponents in [-4, 16) with at least
 * one digit after the point ("3.0"), else d[.ddd]e+XX with two exponent
 * digits or more ("1e-05"); nan, inf, -inf.  What chat templates print
 * (jinja2's str of a float), and what a grammar writing such a value must
 * produce. */
void pk_buf_put_float_repr(pk_buf *b, double f);
/* Frees the text and zeroes b (oom too). */
void pk_buf_free(pk_buf *b);

/* An array *v of *cap elements of elem bytes made room for at least `need`
 * (doubling, from 64): PK_OK, or PK_ENOMEM with *v and *cap unchanged. */
pk_status pk_grow(void **v, size_t *cap, size_t need, size_t elem);

#endif
