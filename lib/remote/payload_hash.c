/* Hashes of an upload's bytes: SHA-256 for SigV4, XXH3-128 for a read-back (payload_hash.h). */
#include "shardfeed_config.h"

#if SF_HAVE_REMOTE

#include <assert.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

#include "payload_hash.h"

#define HASH_CHUNK (1u << 20)

static void to_hex(char out[REMOTE_SHA256_HEX], const unsigned char *d, unsigned n)
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

typedef int (*feed_fn)(void *ctx, const uint8_t *p, size_t n); /* 0, or -ENOMEM */

/* Feeds the file range to feed(ctx): 0 or -errno. */
static int hash_file_range(feed_fn feed, void *ctx, int fd, uint64_t off, uint64_t len)
{
    uint8_t *buf = malloc(HASH_CHUNK);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t done = 0; done < len && !rc;) {
        size_t want = len - done < HASH_CHUNK ? (size_t)(len - done) : HASH_CHUNK;
        ssize_t got = pread(fd, buf, want, (off_t)(off + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) /* a file that ends early is never hashed short */
            rc = got < 0 ? -errno : -EIO;
        else if ((rc = feed(ctx, buf, (size_t)got)) == 0)
            done += (uint64_t)got;
    }
    free(buf);
    return rc;
}

static int feed_sha256(void *ctx, const uint8_t *p, size_t n)
{
    return EVP_DigestUpdate(ctx, p, n) == 1 ? 0 : -ENOMEM;
}

static int feed_xxh128(void *state, const uint8_t *p, size_t n)
{
    return XXH3_128bits_update(state, p, n) == XXH_OK ? 0 : -ENOMEM;
}

int remote_payload_sha256(char out[REMOTE_SHA256_HEX], const uint8_t *mem, int fd, uint64_t off,
                          uint64_t len)
{
    out[0] = '\0';
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -ENOMEM;
    int rc = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
    if (!rc && mem)
        rc = EVP_DigestUpdate(ctx, mem, (size_t)len) == 1 ? 0 : -ENOMEM;
    else if (!rc && len)
        rc = hash_file_range(feed_sha256, ctx, fd, off, len);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!rc && EVP_DigestFinal_ex(ctx, digest, &n) != 1)
        rc = -ENOMEM;
    EVP_MD_CTX_free(ctx);
    if (!rc) {
        assert(n == 32);
        to_hex(out, digest, n);
    }
    return rc;
}

int remote_payload_xxh128(XXH128_hash_t *out, const uint8_t *mem, int fd, uint64_t off, uint64_t len)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return -ENOMEM;
    int rc = XXH3_128bits_reset(st) == XXH_OK ? 0 : -ENOMEM;
    if (!rc && mem)
        rc = feed_xxh128(st, mem, (size_t)len);
    else if (!rc && len)
        rc = hash_file_range(feed_xxh128, st, fd, off, len);
    if (!rc)
        *out = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return rc;
}

#endif
