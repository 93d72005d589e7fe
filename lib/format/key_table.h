/* Finding repeated sample keys in a dataset (SPEC.md "Schema": writers give
 * every record a distinct key). Shared by open and verify. */
#ifndef SF_FORMAT_KEY_TABLE_H
#define SF_FORMAT_KEY_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* The key of record `id` (a global record number), for comparing bytes
 * when two hashes meet. */
typedef void (*sf_key_fn)(void *ctx, uint64_t id, const uint8_t **key, size_t *len);

/* Open addressing over 64-bit slots, each (upper 32 bits of the key's
 * XXH3-64) << 32 | (id + 1), 0 for empty. Sized once for the dataset's
 * record count, at most 2/3 full: 12 to 24 bytes per record. Keys stay
 * where the caller keeps them (the shard indexes). */
typedef struct sf_key_table {
    uint64_t *slot;
    uint64_t mask;
    sf_key_fn key_of;
    void *ctx;
} sf_key_table;

/* A table for up to n keys (n <= SF_MAX_RECORDS). 0 or -ENOMEM. */
int sf_key_table_init(sf_key_table *t, uint64_t n, sf_key_fn key_of, void *ctx);
/* Adds record `id`'s key. Returns 0 when no key added before equals it, or
 * 1 when one does (its id in *first; the table is unchanged). Byte
 * comparison decides, never the hash alone. */
int sf_key_table_add(sf_key_table *t, uint64_t id, const uint8_t *key, size_t len, uint64_t *first);
void sf_key_table_free(sf_key_table *t);

#endif
