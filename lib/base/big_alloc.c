/* Huge-page-backed large buffers (big_alloc.h). */
#include "big_alloc.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uint64_t)2 << 20)

static uint64_t mapped_size(uint64_t size)
{
    return (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

void *sf_big_alloc(uint64_t size)
{
    if (size < SF_BIG_ALLOC_MIN)
        return calloc(size ? size : 1, 1);
    if (size > SIZE_MAX - 2 * HUGE_PAGE)
        return NULL;
    /* Map a huge page more than needed and keep the aligned part: the
     * kernel backs only 2 MiB-aligned ranges with huge pages. */
    uint64_t len = mapped_size(size), span = len + HUGE_PAGE;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *start = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    if (start + len < p + span)
        munmap(start + len, (size_t)(p + span - (start + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(start, len, MADV_HUGEPAGE);
#endif
    return start;
}

void sf_big_free(void *p, uint64_t size)
{
    if (!p)
        return;
    if (size < SF_BIG_ALLOC_MIN)
        free(p);
    else
        munmap(p, mapped_size(size));
}
