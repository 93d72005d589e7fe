/* A set of strings with a number attached to each, for finding repeated
 * sample keys in one pass (list and tar inputs). The set points at the
 * caller's strings; they must outlive it. */
#ifndef SF_PACKER_KEYSET_H
#define SF_PACKER_KEYSET_H

#include <stdint.h>

typedef struct pack_keyset {
    struct pack_keyset_slot *slots;
    uint64_t cap, n;
} pack_keyset;

/* Adds `key` with `value`. Returns 0 when added, 1 when the key was
 * already there (its value in *existing, the set unchanged), or an error. */
int pack_keyset_add(pack_keyset *s, const char *key, uint64_t value, uint64_t *existing);
void pack_keyset_free(pack_keyset *s);

#endif
