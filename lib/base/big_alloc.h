/* Buffers of many megabytes that are filled once and then read at random
 * for a long time (a shard's index, the table that proves keys distinct).
 * In 4 KiB pages, each page is a fault when first written and a TLB miss
 * when read at random; on the development VM (a paravirtualised guest)
 * pread into a fresh 39 MB malloc'd buffer took 137 ms and hashing it
 * afterwards 77 ms, against 5 ms and 3 ms in transparent huge pages. */
#ifndef SF_BASE_BIG_ALLOC_H
#define SF_BASE_BIG_ALLOC_H

#include <stdint.h>

/* size zero-filled bytes, or NULL (out of memory). From SF_BIG_ALLOC_MIN
 * bytes on, an anonymous map aligned to 2 MiB and advised for huge pages
 * (a hint: where the kernel has none to give, 4 KiB pages); below it,
 * calloc. */
void *sf_big_alloc(uint64_t size);
/* Frees what sf_big_alloc(size) returned, given the same size; NULL ok. */
void sf_big_free(void *p, uint64_t size);

#define SF_BIG_ALLOC_MIN (1u << 20)

#endif
