/* Repeated-key detection: linear probing over hashes, bytes compared on a
 * match of the hash's upper half. The slots are one array in huge pages
 * (sf_big_alloc): at ten million keys it is 128 MiB, every add a cache miss
 * and, in 4 KiB pages, a TLB miss too. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "big_alloc.h"
#include "error_internal.h"
#include "format.h"
/* Keys are short: XXH3 inlined (same digests as hash.h's dispatched
 * library calls, without a call and a dispatch per key, 15% of open's
 * user time at ten million keys). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include "key_table.h"

#define TAG_MASK 0xFFFFFFFF00000000ull

/* Slots for `cap` of them, all empty; *slot untouched on failure. */
static int alloc_slots(uint64_t **slot, uint64_t cap, uint64_t keys)
{
    uint64_t *s = cap <= SIZE_MAX / sizeof *s ? sf_big_alloc(cap * sizeof *s) : NULL;
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
    sf_big_free(t->slot, (t->mask + 1) * sizeof *t->slot);
    t->slot = slot;
    t->mask = cap - 1;
    return 0;
}

/* Doubles the table until `more` keys fit at most 2/3 full. */
static int make_room(sf_key_table *t, uint64_t more)
{
    while (3 * (t->count + more) > 2 * (t->mask + 1)) {
        int rc = grow(t);
        if (rc)
            return rc;
    }
    return 0;
}

/* sf_key_table_add with the key's hash known and room made. */
static int add_hashed(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t h,
                      uint64_t *first)
{
    assert(id < SF_MAX_RECORDS);
    assert(3 * (t->count + 1) <= 2 * (t->mask + 1));
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

int sf_key_table_add(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t *first)
{
    /* A table made for n keys is at least 1.5 n + 1 slots, so its first n
     * adds never grow it. */
    int rc = make_room(t, 1);
    if (rc)
        return rc;
    return add_hashed(t, id, key, len, XXH3_64bits(key, len), first);
}

/* How many keys ahead sf_key_table_add_range hashes and prefetches: enough
 * to cover a DRAM miss with the work of the adds before it. */
#define PREFETCH_WINDOW 16

int sf_key_table_add_range(sf_key_table *t, uint64_t id, uint64_t n, uint64_t *dup, uint64_t *first)
{
    assert(n <= SF_MAX_RECORDS && id <= SF_MAX_RECORDS - n);
    int rc = make_room(t, n);
    if (rc)
        return rc;
    for (uint64_t done = 0; done < n;) {
        const uint8_t *key[PREFETCH_WINDOW];
        size_t len[PREFETCH_WINDOW];
        uint64_t h[PREFETCH_WINDOW], w = n - done < PREFETCH_WINDOW ? n - done : PREFETCH_WINDOW;
        for (uint64_t i = 0; i < w; i++) {
            t->key_of(t->ctx, id + done + i, &key[i], &len[i]);
            h[i] = XXH3_64bits(key[i], len[i]);
            __builtin_prefetch(&t->slot[h[i] & t->mask], 1);
        }
        for (uint64_t i = 0; i < w; i++) {
            if (add_hashed(t, id + done + i, key[i], len[i], h[i], first)) {
                *dup = id + done + i;
                return 1;
            }
        }
        done += w;
    }
    return 0;
}

void sf_key_table_free(sf_key_table *t)
{
    if (t->slot)
        sf_big_free(t->slot, (t->mask + 1) * sizeof *t->slot);
    memset(t, 0, sizeof *t);
}

/* Keys per bucket that sf_key_hashes_distinct aims at: its table of
 * 2-4 slots a key (8 bytes each) stays in L2. */
#define BUCKET_KEYS 4096

/* Bucket of hash h among 2^bits (its top bits). */
static uint64_t bucket_of(uint64_t h, unsigned bits)
{
    return bits ? h >> (64 - bits) : 0;
}

/* Whether the n hashes in h (none 0) are distinct, with `table` of `cap`
 * (a power of two >= 2n) slots as scratch. */
static int bucket_distinct(const uint64_t *h, uint64_t n, uint64_t *table, uint64_t cap)
{
    memset(table, 0, cap * sizeof *table);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t j = h[i] & (cap - 1);
        for (; table[j]; j = (j + 1) & (cap - 1))
            if (table[j] == h[i])
                return 0;
        table[j] = h[i];
    }
    return 1;
}

static uint64_t key_hash(sf_key_fn key_of, void *ctx, uint64_t id)
{
    const uint8_t *key;
    size_t len;
    key_of(ctx, id, &key, &len);
    return XXH3_64bits(key, len);
}

/* Sorts the hashes of ids 0..n-1 into their buckets: hashes[start[b] ..
 * start[b+1]) hold bucket b's. The keys are hashed twice (counting, then
 * placing), which costs less than a second array of n hashes. Returns 0,
 * or 1 when a hash is 0 (the tables' empty mark: leave it to the exact
 * check). */
static int fill_buckets(uint64_t *hashes, uint64_t *start, uint64_t *cursor, unsigned bits, uint64_t n,
                        sf_key_fn key_of, void *ctx)
{
    uint64_t nb = (uint64_t)1 << bits;
    for (uint64_t id = 0; id < n; id++) {
        uint64_t h = key_hash(key_of, ctx, id);
        if (h == 0)
            return 1;
        start[bucket_of(h, bits) + 1]++;
    }
    for (uint64_t b = 0; b < nb; b++) {
        start[b + 1] += start[b];
        cursor[b] = start[b];
    }
    for (uint64_t id = 0; id < n; id++) {
        uint64_t h = key_hash(key_of, ctx, id);
        hashes[cursor[bucket_of(h, bits)]++] = h;
    }
    for (uint64_t b = 0; b < nb; b++)
        assert(cursor[b] == start[b + 1]);
    return 0;
}

int sf_key_hashes_distinct(int *distinct, uint64_t n, sf_key_fn key_of, void *ctx)
{
    assert(n <= SF_MAX_RECORDS);
    *distinct = 0;
    unsigned bits = 0;
    while ((n >> bits) > BUCKET_KEYS)
        bits++;
    uint64_t nb = (uint64_t)1 << bits;
    uint64_t *start = calloc(nb + 1, sizeof *start), *cursor = malloc(nb * sizeof *cursor);
    uint64_t *hashes = sf_big_alloc(n * sizeof *hashes), *table = NULL;
    int rc = 0;
    if (!start || !cursor || !hashes) {
        rc = sf_fail(-ENOMEM, "out of memory for the hashes of %llu keys", (unsigned long long)n);
        goto out;
    }
    if (fill_buckets(hashes, start, cursor, bits, n, key_of, ctx))
        goto out;
    uint64_t most = 0, cap = 16;
    for (uint64_t b = 0; b < nb; b++)
        most = start[b + 1] - start[b] > most ? start[b + 1] - start[b] : most;
    while (cap < 2 * most)
        cap *= 2;
    if (!(table = malloc(cap * sizeof *table))) {
        rc = sf_fail(-ENOMEM, "out of memory for the hashes of %llu keys", (unsigned long long)n);
        goto out;
    }
    int all = 1;
    for (uint64_t b = 0; b < nb && all; b++) {
        uint64_t count = start[b + 1] - start[b], c = 16;
        while (c < 2 * count)
            c *= 2;
        all = bucket_distinct(hashes + start[b], count, table, c);
    }
    *distinct = all;
out:
    free(table);
    sf_big_free(hashes, n * sizeof *hashes);
    free(cursor);
    free(start);
    return rc;
}
