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

#define TAG_MASK 0xFFFFFFFF00000000ull

/* Slots for `cap` of them, all empty; *slot untouched on failure. */
static int alloc_slots(uint64_t **slot, uint64_t cap, uint64_t keys)
{
    uint64_t *s = cap <= SIZE_MAX / sizeof *s ? calloc(cap, sizeof *s) : NULL;
    if (!s)
        return sf_fail(-ENOMEM, "out of memory for the key table of %llu keys (%llu MiB)",
                       (unsigned long long)keys, (unsigned long long)(cap * sizeof *s >> 20));
    *slot = s;
    return 0;
}

int sf_key_table_init(sf_key_table *t, uint64_t n, sf_key_fn key_of, void *ctx)
{
    assert(n <= SF_MAX_RECORDS);
    uint64_t cap = 16;
    while (cap < n + n / 2 + 1)
        cap *= 2;
    memset(t, 0, sizeof *t);
    int rc = alloc_slots(&t->slot, cap, n);
    if (rc)
        return rc;
    t->mask = cap - 1;
    t->key_of = key_of;
    t->ctx = ctx;
    return 0;
}

/* Doubles the slots; each key's place comes from its whole hash, so every
 * key is read again. */
static int grow(sf_key_table *t)
{
    uint64_t cap = 2 * (t->mask + 1), *slot = NULL;
    int rc = alloc_slots(&slot, cap, t->count + 1);
    if (rc)
        return rc;
    for (uint64_t i = 0; i <= t->mask; i++) {
        if (!t->slot[i])
            continue;
        const uint8_t *key;
        size_t len;
        t->key_of(t->ctx, (t->slot[i] & 0xFFFFFFFFu) - 1, &key, &len);
        uint64_t j = XXH3_64bits(key, len) & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->mask = cap - 1;
    return 0;
}

int sf_key_table_add(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t *first)
{
    assert(id < SF_MAX_RECORDS);
    /* At most 2/3 full. A table made for n keys is at least 1.5 n + 1
     * slots, so its first n adds never grow it. */
    if (3 * (t->count + 1) > 2 * (t->mask + 1)) {
        int rc = grow(t);
        if (rc)
            return rc;
    }
    uint64_t h = XXH3_64bits(key, len);
    uint64_t tag = h & TAG_MASK, j = h & t->mask;
    for (; t->slot[j]; j = (j + 1) & t->mask) {
        if ((t->slot[j] & TAG_MASK) != tag)
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
    t->count++;
    return 0;
}

void sf_key_table_free(sf_key_table *t)
{
    free(t->slot);
    memset(t, 0, sizeof *t);
}
