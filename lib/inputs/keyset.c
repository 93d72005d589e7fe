/* Open addressing with linear probing, kept at most half full. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "hash.h"
#include "keyset.h"

struct pack_keyset_slot {
    const char *key; /* NULL: empty */
    uint64_t value;
};

static uint64_t slot_of(const pack_keyset *s, const char *key)
{
    return XXH3_64bits(key, strlen(key)) & (s->cap - 1);
}

static int grow(pack_keyset *s)
{
    uint64_t cap = s->cap ? s->cap * 2 : 1024;
    struct pack_keyset_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return sf_fail(-ENOMEM, "out of memory for %llu keys", (unsigned long long)s->n);
    struct pack_keyset_slot *old = s->slots;
    uint64_t old_cap = s->cap;
    s->slots = slots;
    s->cap = cap;
    for (uint64_t i = 0; i < old_cap; i++) {
        if (!old[i].key)
            continue;
        uint64_t j = slot_of(s, old[i].key);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = old[i];
    }
    free(old);
    return 0;
}

int pack_keyset_add(pack_keyset *s, const char *key, uint64_t value, uint64_t *existing)
{
    if (2 * (s->n + 1) > s->cap) {
        int rc = grow(s);
        if (rc)
            return rc;
    }
    uint64_t j = slot_of(s, key);
    while (s->slots[j].key) {
        if (strcmp(s->slots[j].key, key) == 0) {
            *existing = s->slots[j].value;
            return 1;
        }
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j].key = key;
    s->slots[j].value = value;
    s->n++;
    return 0;
}

void pack_keyset_free(pack_keyset *s)
{
    free(s->slots);
    memset(s, 0, sizeof *s);
}
