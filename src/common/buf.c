/* buf.c - see buf.h. */
#include "buf.h"

#include <math.h>
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

void pk_buf_put_float_repr(pk_buf *b, double f)
{
    if (isnan(f)) { pk_buf_puts(b, "nan"); return; }
    if (isinf(f)) { pk_buf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    char *ep = strchr(e, 'e');
    int exp10 = atoi(ep + 1);
    char digits[24];
    int nd = 0;
    for (const char *p = e; p < ep; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (f < 0 || (f == 0 && signbit(f))) pk_buf_put(b, "-", 1);
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            pk_buf_puts(b, "0.");
            for (int i = 0; i < -exp10 - 1; i++) pk_buf_put(b, "0", 1);
            pk_buf_put(b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp10; i++) pk_buf_put(b, i < nd ? &digits[i] : "0", 1);
            pk_buf_put(b, ".", 1);
            if (nd > exp10 + 1) pk_buf_put(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else pk_buf_put(b, "0", 1);
        }
    } else {
        pk_buf_put(b, digits, 1);
        if (nd > 1) { pk_buf_put(b, ".", 1); pk_buf_put(b, digits + 1, (size_t)(nd - 1)); }
        pk_buf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
}
