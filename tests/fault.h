/*
 * fault.h - failing the N-th allocation, for tests/test_fault.c only.
 *
 * The fault build (`make test-fault`) links test_fault with the linker's
 * --wrap for malloc, calloc, realloc, strdup, aligned_alloc and
 * posix_memalign, so every call to them from the project's objects (the
 * library included) goes through tests/fault.c; jansson's allocations are
 * routed there too (json_set_alloc_funcs), except inside its parser
 * (json_loadb, json_loads: see fault.c).  Calls from inside libc, MHD
 * and other libraries are not counted.  One shot, as sqlite's and
 * libbacktrace's fault tests: the armed allocation fails, those before
 * and after succeed.  The counters are atomic: any thread may allocate.
 */
#ifndef TEST_FAULT_H
#define TEST_FAULT_H

#include <stdbool.h>

/* The n-th counted allocation from now fails (n >= 1); 0 disarms. */
void fault_arm(long n);
/* Counted allocations since the start. */
long fault_allocs(void);
/* True once the armed allocation has failed (reset by fault_arm). */
bool fault_hit(void);
/* Routes jansson's allocations through the counted ones. */
void fault_route_jansson(void);

#endif
