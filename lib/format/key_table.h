/* Finding repeated sample keys (SPEC.md "Schema": writers give every record
 * a distinct key): dataset open and verify, and pack's list and tar inputs,
 * whose keys are written by people. */
#ifndef SF_FORMAT_KEY_TABLE_H
#define SF_FORMAT_KEY_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* The key of record `id` (a global record number, or a sample number of
 * an input), for comparing bytes when two hashes meet and for growing. */
typedef void (*sf_key_fn)(void *ctx, uint64_t id, const uint8_t **key, size_t *len);

/* Open addressing over 64-bit slots, each (upper 32 bits of the key's
 * XXH3-64) << 32 | (id + 1), 0 for empty, at most 2/3 full: 12 to 24 bytes
 * per key. Keys stay where the caller keeps them (the shard indexes, an
 * input's key table). */
typedef struct sf_key_table {
    uint64_t *slot;
    uint64_t mask;
    uint64_t count; /* keys added */
    sf_key_fn key_of;
    void *ctx;
} sf_key_table;

/* A table sized for n keys (n <= SF_MAX_RECORDS; 0 when not known yet).
 * 0 or -ENOMEM. */
int sf_key_table_init(sf_key_table *t, uint64_t n, sf_key_fn key_of, void *ctx);
/* Adds the key of `id` (< SF_MAX_RECORDS). Returns 0 when no key added
 * before equals it, or 1 when one does (its id in *first; the table is
 * unchanged). Byte comparison decides, never the hash alone. Past the n
 * it was made for, the table doubles (reading every key again through
 * key_of), which can fail with -ENOMEM; up to n keys it never does. */
int sf_key_table_add(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t *first);
/* Adds the keys of ids id .. id + n - 1, read through key_of, in that
 * order: what n calls of sf_key_table_add do, stopping at the first key
 * that repeats one added before (returns 1, its id in *dup, the earlier
 * one's in *first). Faster for many keys: it hashes a few keys ahead and
 * prefetches their slots, so the cache misses overlap. 0, 1, or -ENOMEM
 * (growing past the n the table was made for). */
int sf_key_table_add_range(sf_key_table *t, uint64_t id, uint64_t n, uint64_t *dup, uint64_t *first);
void sf_key_table_free(sf_key_table *t);

/* Whether the keys of ids 0 .. n-1 (read through key_of) have distinct
 * XXH3-64 hashes, which proves the keys distinct: *distinct 1. Where two
 * hashes are equal, *distinct is 0 and nothing is proven (a repeated key,
 * or one collision in 2^64): ask a sf_key_table, which compares bytes and
 * names the records. Reads every key twice and touches 8 bytes a key in
 * memory in order, with no random access to DRAM (the hashes are sorted
 * into buckets that fit in cache), where the table misses the cache on
 * every add: the fast path of dataset open. 0 or -ENOMEM. */
int sf_key_hashes_distinct(int *distinct, uint64_t n, sf_key_fn key_of, void *ctx);

#endif
