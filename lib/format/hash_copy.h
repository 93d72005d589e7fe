/* Copying and hashing in one pass: memcpy's result and XXH3-64's digest
 * (seed 0, the default secret: sf_record_hash's) of the bytes copied, each
 * 64-byte stripe loaded into registers once, stored to the destination and
 * folded into the hash's accumulators from those registers.
 *
 * Why not libxxhash: it hashes memory that is already there, so a checked
 * copy is two passes, the copy and then the hash re-reading what it wrote
 * (from L2 at best). Where the copy is bound by memory (warm large records:
 * page cache to slot), folding each stripe while it is in a register hides
 * the hash behind the loads; long runs are stored around the caches as
 * glibc's memcpy stores them (README "Checksums at the copy's speed": the
 * measurements). The algorithm is XXH3's long-input loop (xxhash.h,
 * XXH3_hashLong_64b_internal); inputs of up to 240 bytes use XXH3's own
 * short paths on a copy of the bytes. The digest equals XXH3_64bits of the
 * concatenation of the pieces for every length and every split: the unit
 * tests compare every kernel with libxxhash, and sf_copy_hash_fast checks
 * the kernel it picks once per process before reporting it.
 *
 * Usage: begin with the input's total length, then copy its pieces in order
 * (any sizes, summing to the total), then digest. The state is plain memory
 * (no allocation, nothing to free; the kernels make no assumption about its
 * address), so a copy abandoned by the fault guard leaves nothing behind. */
#ifndef SF_FORMAT_HASH_COPY_H
#define SF_FORMAT_HASH_COPY_H

#include <stddef.h>
#include <stdint.h>

#define SF_COPY_HASH_SHORT 240u /* XXH3's short inputs: hashed from a copy, at the end */

typedef struct sf_copy_hash {
    _Alignas(64) uint64_t acc[8];
    uint64_t total;   /* the input's length */
    uint64_t seen;    /* bytes copied so far: the stripes below seen / 64 are folded,
                         up to (total - 1) / 64 of them (XXH3's "regular" ones) */
    int kernel;       /* sf_copy_hash_kernel */
    uint8_t stripe[64];                   /* a stripe split between two pieces */
    uint8_t tail[SF_COPY_HASH_SHORT];     /* the last 64 bytes, or a short input whole */
} sf_copy_hash;

/* The kernels (SF_COPY_HASH_AUTO: the fastest this CPU runs). */
typedef enum sf_copy_hash_kernel {
    SF_COPY_HASH_AUTO = 0,
    SF_COPY_HASH_SCALAR = 1, /* portable; slower than memcpy + XXH3: for checking only */
    SF_COPY_HASH_AVX2 = 2,
    SF_COPY_HASH_AVX512 = 3
} sf_copy_hash_kernel;

/* Starts hashing an input of `total` bytes with `kernel` (AUTO: the one
 * sf_copy_hash_fast reports, else SCALAR). A kernel this CPU lacks is
 * replaced by SCALAR. */
void sf_copy_hash_begin(sf_copy_hash *h, uint64_t total, sf_copy_hash_kernel kernel);
/* memcpy(dst, src, n) (no overlap), and the n bytes hashed as the input's
 * next piece. n must not exceed what is left of the total. */
void sf_copy_hash_copy(sf_copy_hash *h, void *dst, const void *src, size_t n);
/* XXH3_64bits of the whole input; every byte of the total must have been copied. */
uint64_t sf_copy_hash_digest(const sf_copy_hash *h);

/* The fused kernel this CPU runs that beats a copy followed by a hash
 * (AVX2 or AVX-512 on x86-64), checked against libxxhash once per process;
 * SF_COPY_HASH_AUTO when there is none (then copy, then hash, is faster).
 * $SHARDFEED_COPY_HASH=off makes it report none (for measuring the two). */
sf_copy_hash_kernel sf_copy_hash_fast(void);
/* memcpy(dst, src, n) (no overlap) whose long runs (64 KiB and more) are
 * written around the caches, as sf_copy_hash_copy's are: for a destination
 * this thread does not read again (a batch slot), without the hash. Plain
 * memcpy where sf_copy_hash_fast reports no kernel. */
void sf_copy_streamed(void *dst, const void *src, size_t n);

/* Whether this CPU runs `kernel`. */
int sf_copy_hash_supported(sf_copy_hash_kernel kernel);

#endif
