/* buf.c - see buf.h. */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `extra` more bytes and the NUL; false (oom set) when not. */
static bool reserve(pk_buf *b, size_t extra)
{
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = MAX(b->cap * 2, b->n + extra + 1024);
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void pk_buf_put(pk_buf *b, const void *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void pk_buf_puts(pk_buf *b, const char *s) { pk_buf_put(b, s, strlen(s)); }

void pk_buf_printf(pk_buf *b, const char *fmt, ...)
{
    /* into the room there is; a second pass only when it was too small */
    for (int pass = 0; pass < 2 && !b->oom; pass++) {
        size_t room = b->cap - b->n;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(room ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        reserve(b, (size_t)k);
    }
}

void pk_buf_free(pk_buf *b)
{
    free(b->p);
    *b = (pk_buf){ 0 };
}

pk_status pk_grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return PK_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *p = realloc(*v, c * elem);
    if (!p) return PK_ENOMEM;
    *v = p;
    *cap = c;
    return PK_OK;
}
