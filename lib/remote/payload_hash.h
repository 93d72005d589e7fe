/* The SHA-256 of what a request sends, for SigV4's x-amz-content-sha256.
 *
 * A signed upload that names its payload's hash is checked by the store:
 * S3 (and the test servers' front, tests/remote/servers.py) refuses a body
 * whose bytes hash otherwise (400 XAmzContentSHA256Mismatch), so a byte
 * damaged on the way is never kept, where UNSIGNED-PAYLOAD would store it.
 * The hash is OpenSSL's (libcrypto, linked by libcurl's OpenSSL build
 * already): about 1.6 GB/s a core with the SHA extensions. */
#ifndef SF_REMOTE_PAYLOAD_HASH_H
#define SF_REMOTE_PAYLOAD_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define REMOTE_SHA256_HEX 65 /* 64 lowercase hex digits and the NUL */

/* The hash of `len` bytes: of mem when it is not NULL, else of the file
 * range [off, off + len) of fd (read with pread in chunks of 1 MiB). 0, the
 * read's -errno (-EIO when the file ends before the range does) or -ENOMEM. */
int remote_payload_sha256(char out[REMOTE_SHA256_HEX], const uint8_t *mem, int fd, uint64_t off,
                          uint64_t len);

/* XXH3-128 of the same bytes, the same way: what an upload that nothing
 * checks on the way is compared by when it is read back (upload.c). */
int remote_payload_xxh128(XXH128_hash_t *out, const uint8_t *mem, int fd, uint64_t off, uint64_t len);

#endif
