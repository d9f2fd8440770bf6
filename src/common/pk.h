/*
 * pk.h - what every polykv module shares: the status codes, ASSERT and the
 * few macros the style guide allows.
 *
 * Every fallible function returns a pk_status (0 = PK_OK, negative = error)
 * and hands its results back through out-parameters.  Bad input is a status,
 * never an abort; ASSERT is only for broken invariants (bugs) and fires in
 * every build.  DASSERT is the debug-only tier for hot loops.
 */
#ifndef PK_H
#define PK_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum pk_status {
    PK_OK           =  0,
    PK_ENOMEM       = -1,  /* allocation failed */
    PK_EIO          = -2,  /* open/read/write/mmap failed */
    PK_EFORMAT      = -3,  /* malformed or hostile file / message */
    PK_EINVAL       = -4,  /* invalid argument */
    PK_EFULL        = -5,  /* no room now: retry later */
    PK_ECANCELLED   = -6,  /* the caller gave up */
    PK_EUNSUPPORTED = -7,  /* well-formed but not something we run */
    PK_ENOTFOUND    = -8,  /* no such key / tensor / sequence */
    PK_ECONFLICT    = -9,  /* the object's state forbids it (children, users, a
                              different prefix) */
    PK_ETIMEDOUT    = -10, /* nothing came within the wait: ask again */
    PK_EREFUSED     = -11, /* a policy said no (admission): retry later */
} pk_status;

/* Returns a static, human-readable name for a status ("out of memory"). */
const char *pk_status_str(pk_status st);

/* Writes a printf-style message into err (err_len bytes; err may be NULL)
 * and returns st: the one-liner behind "return an error with a reason". */
pk_status pk_errf(char *err, size_t err_len, pk_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prints "file:line: ASSERT(expr) failed" to stderr and aborts. */
_Noreturn void pk_assert_fail(const char *expr, const char *file, int line);

#define ASSERT(x) do { if (!(x)) pk_assert_fail(#x, __FILE__, __LINE__); } while (0)
#ifdef NDEBUG
#define DASSERT(x) ((void)0)
#else
#define DASSERT(x) ASSERT(x)
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

/* Monotonic clock in microseconds / milliseconds (CLOCK_MONOTONIC). */
int64_t pk_time_us(void);
double  pk_time_ms(void);
/* Wall clock in milliseconds since the epoch (CLOCK_REALTIME), for
 * timestamps shown to clients. */
int64_t pk_wall_ms(void);

#endif
