/* pk.c - status names, the assert hook and the clock. */
#define _POSIX_C_SOURCE 200809L
#include "pk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const char *pk_status_str(pk_status st)
{
    switch (st) {
    case PK_OK:           return "ok";
    case PK_ENOMEM:       return "out of memory";
    case PK_EIO:          return "I/O error";
    case PK_EFORMAT:      return "malformed input";
    case PK_EINVAL:       return "invalid argument";
    case PK_EFULL:        return "no room, retry later";
    case PK_ECANCELLED:   return "cancelled";
    case PK_EUNSUPPORTED: return "unsupported";
    case PK_ENOTFOUND:    return "not found";
    case PK_ECONFLICT:    return "conflict";
    case PK_ETIMEDOUT:    return "no answer in time";
    case PK_EREFUSED:     return "refused by policy, retry later";
    }
    return "unknown status";
}

pk_status pk_errf(char *err, size_t err_len, pk_status st, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

_Noreturn void pk_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "%s:%d: ASSERT(%s) failed\n", file, line, expr);
    fflush(stderr);
    abort();
}

int64_t pk_time_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double pk_time_ms(void)
{
    return (double)pk_time_us() / 1000.0;
}

int64_t pk_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
