/* Repeated-key detection: linear probing over hashes, bytes compared on a
 * match of the hash's upper half. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "format.h"
#include "hash.h"
#include "key_table.h"

int sf_key_table_init(sf_key_table *t, uint64_t n, sf_key_fn key_of, void *ctx)
{
    assert(n <= SF_MAX_RECORDS);
    uint64_t cap = 16;
    while (cap < n + n / 2 + 1)
        cap *= 2;
    memset(t, 0, sizeof *t);
    if (cap > SIZE_MAX / sizeof *t->slot || !(t->slot = calloc(cap, sizeof *t->slot)))
        return sf_fail(-ENOMEM, "out of memory for the key table of %llu records (%llu MiB)",
                       (unsigned long long)n, (unsigned long long)(cap * sizeof *t->slot >> 20));
    t->mask = cap - 1;
    t->key_of = key_of;
    t->ctx = ctx;
    return 0;
}

int sf_key_table_add(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t *first)
{
    assert(id < SF_MAX_RECORDS);
    uint64_t h = XXH3_64bits(key, len);
    uint64_t tag = h & 0xFFFFFFFF00000000ull, j = h & t->mask;
    for (; t->slot[j]; j = (j + 1) & t->mask) {
        if ((t->slot[j] & 0xFFFFFFFF00000000ull) != tag)
            continue;
        uint64_t other = (t->slot[j] & 0xFFFFFFFFu) - 1;
        const uint8_t *okey;
        size_t olen;
        t->key_of(t->ctx, other, &okey, &olen);
        if (olen == len && memcmp(okey, key, len) == 0) {
            *first = other;
            return 1;
        }
    }
    t->slot[j] = tag | (id + 1);
    return 0;
}

void sf_key_table_free(sf_key_table *t)
{
    free(t->slot);
    memset(t, 0, sizeof *t);
}
