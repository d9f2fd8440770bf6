/* huge.c - 2 MiB-aligned anonymous mappings advised for huge pages (huge.h). */
#define _DEFAULT_SOURCE
#include "huge.h"

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_up(size_t n) { return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

void *pk_huge_alloc(size_t size)
{
    if (size == 0 || size > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
    size_t len = round_up(size);
    /* map one huge page more, then trim both ends to the aligned part */
    char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
    if (tail) munmap(p + len, tail);
    (void)madvise(p, len, MADV_HUGEPAGE);   /* advice only: EINVAL without THP support */
    return p;
}

void pk_huge_free(void *p, size_t size)
{
    if (p) munmap(p, round_up(size));
}
