/* XXH3-64 for everything shardfeed hashes. On x86-64, Debian's libxxhash
 * also exports runtime-dispatched variants (xxh_x86dispatch.h) that use
 * AVX2/AVX-512 where the CPU has them: 38 GB/s against 11 GB/s for the
 * baseline SSE2 build on the development machine, same digests. Including
 * this header instead of <xxhash.h> maps XXH3_64bits and XXH3_64bits_update
 * to them. */
#ifndef SF_FORMAT_HASH_H
#define SF_FORMAT_HASH_H

#include <xxhash.h>
#if defined(__x86_64__) && !defined(SF_NO_XXH_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

#endif
