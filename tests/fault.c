/*
 * fault.c - the allocation wrappers of fault.h.  __real_* are the libc
 * functions the linker's --wrap leaves reachable.
 */
#include "fault.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void free(void *p);

static _Thread_local bool exempt;   /* inside jansson's parser: see json_loadb below */
static atomic_long countdown;   /* 0: disarmed; else allocations left before the failing one */
static atomic_long n_allocs;
static atomic_bool hit;

void fault_arm(long n)
{
    atomic_store(&hit, false);
    atomic_store(&countdown, n);
}

long fault_allocs(void) { return atomic_load(&n_allocs); }
bool fault_hit(void) { return atomic_load(&hit); }

/* True for the armed allocation. */
static bool fail_now(void)
{
    if (exempt) return false;
    atomic_fetch_add(&n_allocs, 1);
    long c = atomic_load(&countdown);
    while (c > 0 && !atomic_compare_exchange_weak(&countdown, &c, c - 1)) {}
    if (c != 1) return false;
    atomic_store(&hit, true);
    return true;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return fail_now() ? NULL : __real_calloc(k, n); }
/* A failing realloc leaves the block as it was, as the real one does. */
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
void *__wrap_aligned_alloc(size_t align, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(align, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    return fail_now() ? 12 /* ENOMEM */ : __real_posix_memalign(p, align, n);
}

static void *json_malloc(size_t n) { return __wrap_malloc(n); }

/* jansson's lexer ignores a failed append to its token buffer and then
 * asserts (load.c, lex_save / lex_scan_string; 2.14, still so in 2.15.1):
 * an allocation that fails inside a parse aborts the process, whatever the
 * caller does.  So parses are exempt here (docs/security.md says so), and
 * everything jansson allocates to build, copy or dump values still fails. */
json_t *__real_json_loadb(const char *buf, size_t n, size_t flags, json_error_t *error);
json_t *__real_json_loads(const char *s, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *buf, size_t n, size_t flags, json_error_t *error)
{
    exempt = true;
    json_t *j = __real_json_loadb(buf, n, flags, error);
    exempt = false;
    return j;
}
json_t *__wrap_json_loads(const char *s, size_t flags, json_error_t *error)
{
    exempt = true;
    json_t *j = __real_json_loads(s, flags, error);
    exempt = false;
    return j;
}

void fault_route_jansson(void) { json_set_alloc_funcs(json_malloc, free); }
