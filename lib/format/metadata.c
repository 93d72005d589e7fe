/* Manifest metadata (metadata.h). */
#include "metadata.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "le.h"

/* ---- entries ---- */

void sf_metadata_iter_init(sf_metadata_iter *it, const uint8_t *metadata, uint32_t size)
{
    *it = (sf_metadata_iter){metadata, size, 0};
}

int sf_metadata_next(sf_metadata_iter *it, const uint8_t **key, uint32_t *key_len,
                     const uint8_t **value, uint32_t *value_len)
{
    if ((uint64_t)it->pos + 8 > it->size)
        return 0;
    const uint8_t *e = it->p + it->pos;
    *key_len = sf_get_le32(e);
    *value_len = sf_get_le32(e + 4);
    *key = e + 8;
    *value = e + 8 + *key_len;
    it->pos += 8 + *key_len + *value_len; /* checked: within size */
    return 1;
}

int sf_metadata_find(const uint8_t **value, uint32_t *len, const sf_manifest *m, const char *key)
{
    size_t want = strlen(key);
    sf_metadata_iter it;
    const uint8_t *k, *v;
    uint32_t kl, vl;
    sf_metadata_iter_init(&it, m->metadata, m->metadata_size);
    while (sf_metadata_next(&it, &k, &kl, &v, &vl)) {
        if (kl == want && memcmp(k, key, want) == 0) {
            *value = v;
            *len = vl;
            return 1;
        }
    }
    *value = NULL;
    *len = 0;
    return 0;
}

static int key_is(const uint8_t *key, uint32_t len, const char *name)
{
    return len == strlen(name) && memcmp(key, name, len) == 0;
}

/* "class_names": u32 length + name per label, each name a valid one-part
 * key (a folder name: UTF-8, no '/', not "." or ".."). */
static int check_class_names(const uint8_t *v, uint32_t len)
{
    uint64_t pos = 0, n = 0;
    while (pos < len) {
        if (len - pos < 4)
            return sf_fail(SF_E_CORRUPT, "metadata class_names: length cut at byte %llu",
                           (unsigned long long)pos);
        uint32_t nlen = sf_get_le32(v + pos);
        if (nlen > len - pos - 4 || !sf_valid_key((const char *)v + pos + 4, nlen) ||
            memchr(v + pos + 4, '/', nlen))
            return sf_fail(SF_E_CORRUPT, "metadata class_names: name %llu is not a valid folder name",
                           (unsigned long long)n);
        pos += 4 + (uint64_t)nlen;
        n++;
    }
    return 0;
}

/* The value rules of the keys SPEC.md defines. */
static int check_known(const uint8_t *key, uint32_t klen, const uint8_t *v, uint32_t vlen)
{
    if (key_is(key, klen, "source")) {
        if (vlen == 0 || vlen > 32)
            return sf_fail(SF_E_CORRUPT, "metadata source: %u bytes (1 to 32)", vlen);
        for (uint32_t i = 0; i < vlen; i++)
            if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '_'))
                return sf_fail(SF_E_CORRUPT, "metadata source: not [a-z0-9_]");
        return 0;
    }
    if (key_is(key, klen, "class_names"))
        return check_class_names(v, vlen);
    if (key_is(key, klen, "part")) {
        if (vlen != SF_PART_INFO_SIZE)
            return sf_fail(SF_E_CORRUPT, "metadata part: %u bytes, not %u", vlen, SF_PART_INFO_SIZE);
        uint32_t k = sf_get_le32(v), n = sf_get_le32(v + 4);
        if (n < 2 || k >= n)
            return sf_fail(SF_E_CORRUPT, "metadata part: %u of %u", k, n);
        return 0;
    }
    if (key_is(key, klen, "part_input") && vlen != SF_PART_INPUT_SIZE)
        return sf_fail(SF_E_CORRUPT, "metadata part_input: %u bytes, not %u", vlen, SF_PART_INPUT_SIZE);
    if (key_is(key, klen, "part_files") && vlen != SF_PART_FILES_SIZE &&
        (vlen <= SF_PART_FILES_LIST_SIZE || vlen > SF_PART_FILES_LIST_SIZE + 255 ||
         memchr(v + SF_PART_FILES_LIST_SIZE, '\0', vlen - SF_PART_FILES_LIST_SIZE)))
        return sf_fail(SF_E_CORRUPT, "metadata part_files: %u bytes, not %u or %u plus a name of 1 to 255 bytes without NUL",
                       vlen, SF_PART_FILES_SIZE, SF_PART_FILES_LIST_SIZE);
    if (key_is(key, klen, "image_reencode")) {
        if (vlen != SF_IMAGE_REENCODE_SIZE)
            return sf_fail(SF_E_CORRUPT, "metadata image_reencode: %u bytes, not %u", vlen,
                           SF_IMAGE_REENCODE_SIZE);
        uint32_t side = sf_get_le32(v), quality = sf_get_le32(v + 4);
        if (side == 0 || quality < 1 || quality > 100)
            return sf_fail(SF_E_CORRUPT, "metadata image_reencode: max side %u, quality %u", side, quality);
    }
    return 0;
}

typedef struct key_ref {
    const uint8_t *key;
    uint32_t len, at; /* byte offset of the entry */
} key_ref;

static int cmp_key(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    int c = memcmp(x->key, y->key, x->len);
    return c ? c : (x->at < y->at ? -1 : x->at > y->at);
}

/* A key appears once, so every reader finds the same value. Sorted, not
 * compared pairwise: 16 MiB of one-byte keys are 1.8 million entries. */
static int check_distinct(key_ref *refs, uint64_t n)
{
    qsort(refs, n, sizeof *refs, cmp_key);
    for (uint64_t i = 1; i < n; i++)
        if (refs[i].len == refs[i - 1].len && memcmp(refs[i].key, refs[i - 1].key, refs[i].len) == 0)
            return sf_fail(SF_E_CORRUPT, "metadata: key at byte %u appears twice (first at byte %u)",
                           refs[i].at, refs[i - 1].at);
    return 0;
}

int sf_metadata_check(const uint8_t *p, uint32_t size)
{
    /* At most one entry per 9 bytes (8 of header, a key of at least 1). */
    key_ref *refs = malloc((size / 9 + 1) * sizeof *refs);
    if (!refs)
        return sf_fail(-ENOMEM, "out of memory for %u bytes of metadata", size);
    uint64_t pos = 0, n = 0;
    int rc = 0;
    while (pos < size && !rc) {
        if (size - pos < 8) {
            rc = sf_fail(SF_E_CORRUPT, "metadata: entry header cut at byte %llu", (unsigned long long)pos);
            break;
        }
        uint32_t klen = sf_get_le32(p + pos), vlen = sf_get_le32(p + pos + 4);
        if (klen == 0 || klen > 255 || (uint64_t)klen + vlen > size - pos - 8) {
            rc = sf_fail(SF_E_CORRUPT, "metadata: entry at byte %llu runs past the end",
                         (unsigned long long)pos);
            break;
        }
        refs[n++] = (key_ref){p + pos + 8, klen, (uint32_t)pos};
        rc = check_known(p + pos + 8, klen, p + pos + 8 + klen, vlen);
        pos += 8 + (uint64_t)klen + vlen;
    }
    if (!rc)
        rc = check_distinct(refs, n);
    free(refs);
    return rc;
}

int sf_metadata_add(sf_metadata_builder *b, const char *key, const void *value, uint32_t len)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > 255)
        return sf_fail(SF_E_INVALID, "metadata key '%s': 1 to 255 bytes", key);
    uint64_t need = (uint64_t)b->size + 8 + klen + len;
    if (need > SF_MAX_METADATA)
        return sf_fail(SF_E_LIMIT, "metadata '%s': %llu bytes of metadata in all (limit %u)", key,
                       (unsigned long long)need, SF_MAX_METADATA);
    if (need > b->cap) {
        uint64_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap *= 2;
        uint8_t *nb = realloc(b->buf, cap);
        if (!nb)
            return sf_fail(-ENOMEM, "out of memory");
        b->buf = nb;
        b->cap = (uint32_t)(cap < SF_MAX_METADATA ? cap : SF_MAX_METADATA);
    }
    uint8_t *e = b->buf + b->size;
    sf_put_le32(e, (uint32_t)klen);
    sf_put_le32(e + 4, len);
    memcpy(e + 8, key, klen);
    if (len)
        memcpy(e + 8 + klen, value, len);
    b->size = (uint32_t)need;
    return 0;
}

void sf_metadata_builder_free(sf_metadata_builder *b)
{
    free(b->buf);
    *b = (sf_metadata_builder){0};
}

/* ---- "source" ---- */

void sf_metadata_source(char out[33], const sf_manifest *m)
{
    const uint8_t *v;
    uint32_t len;
    out[0] = '\0';
    if (sf_metadata_find(&v, &len, m, "source") && len <= 32) { /* checked: 1..32 bytes */
        memcpy(out, v, len);
        out[len] = '\0';
    }
}

/* ---- "class_names" ---- */

int sf_metadata_add_class_names(sf_metadata_builder *b, char *const *names, uint32_t n)
{
    uint64_t total = 0;
    for (uint32_t c = 0; c < n; c++) {
        size_t len = strlen(names[c]);
        if (!sf_valid_key(names[c], len) || memchr(names[c], '/', len))
            return sf_fail(SF_E_INVALID, "class name '%s' is not a valid folder name", names[c]);
        total += 4 + len;
    }
    if (total > SF_MAX_METADATA)
        return sf_fail(SF_E_LIMIT, "class names take %llu bytes (limit %u)", (unsigned long long)total,
                       SF_MAX_METADATA);
    uint8_t *val = malloc(total ? total : 1);
    if (!val)
        return sf_fail(-ENOMEM, "out of memory");
    uint64_t pos = 0;
    for (uint32_t c = 0; c < n; c++) {
        uint32_t len = (uint32_t)strlen(names[c]);
        sf_put_le32(val + pos, len);
        memcpy(val + pos + 4, names[c], len);
        pos += 4 + (uint64_t)len;
    }
    int rc = sf_metadata_add(b, "class_names", val, (uint32_t)total);
    free(val);
    return rc;
}

int sf_metadata_class_names(sf_class_name **out, uint32_t *n, const sf_manifest *m)
{
    const uint8_t *v;
    uint32_t len;
    *out = NULL;
    *n = 0;
    if (!sf_metadata_find(&v, &len, m, "class_names"))
        return 0;
    /* Checked by sf_metadata_check: u32 length + name each, exactly. */
    uint32_t count = 0;
    for (uint64_t pos = 0; pos < len; count++)
        pos += 4 + (uint64_t)sf_get_le32(v + pos);
    sf_class_name *names = calloc(count ? count : 1, sizeof *names);
    if (!names)
        return sf_fail(-ENOMEM, "out of memory for %u class names", count);
    uint64_t pos = 0;
    for (uint32_t i = 0; i < count; i++) {
        names[i].len = sf_get_le32(v + pos);
        names[i].name = v + pos + 4;
        pos += 4 + (uint64_t)names[i].len;
    }
    *out = names;
    *n = count;
    return 0;
}

/* ---- "part", "part_input" and "part_files" ---- */

int sf_metadata_add_part(sf_metadata_builder *b, const sf_part_info *p)
{
    uint8_t part[SF_PART_INFO_SIZE], input[SF_PART_INPUT_SIZE], files[SF_PART_FILES_LIST_SIZE + 255];
    size_t name = p->has_files && p->has_list ? strnlen(p->list_name, sizeof p->list_name) : 0;
    if (p->has_files && p->has_list && (name == 0 || name > 255))
        return sf_fail(SF_E_INVALID, "part_files: a list name of %zu bytes (1 to 255)", name);
    sf_put_le32(part, p->index);
    sf_put_le32(part + 4, p->count);
    sf_put_le64(part + 8, p->whole_dataset_id);
    sf_put_le64(part + 16, p->whole_records);
    sf_put_le64(part + 24, p->whole_shards);
    sf_put_le64(part + 32, p->first_record);
    sf_put_le64(part + 40, p->first_shard);
    sf_put_le64(input, p->files_hash);
    sf_put_le64(input + 8, p->values_hash);
    int rc = sf_metadata_add(b, "part", part, sizeof part);
    if (!rc)
        rc = sf_metadata_add(b, "part_input", input, sizeof input);
    if (rc || !p->has_files)
        return rc;
    uint32_t len = SF_PART_FILES_SIZE;
    sf_put_le64(files, p->names_hash);
    sf_put_le64(files + 8, p->sizes_hash);
    if (p->has_list) {
        sf_put_le64(files + 16, p->list_size);
        sf_put_le64(files + 24, p->list_hash);
        memcpy(files + SF_PART_FILES_LIST_SIZE, p->list_name, name);
        len = SF_PART_FILES_LIST_SIZE + (uint32_t)name;
    }
    return sf_metadata_add(b, "part_files", files, len);
}

int sf_metadata_part(sf_part_info *out, const sf_manifest *m)
{
    const uint8_t *v;
    uint32_t len;
    memset(out, 0, sizeof *out);
    if (!sf_metadata_find(&v, &len, m, "part"))
        return 0;
    /* Sizes checked by sf_metadata_check. */
    out->index = sf_get_le32(v);
    out->count = sf_get_le32(v + 4);
    out->whole_dataset_id = sf_get_le64(v + 8);
    out->whole_records = sf_get_le64(v + 16);
    out->whole_shards = sf_get_le64(v + 24);
    out->first_record = sf_get_le64(v + 32);
    out->first_shard = sf_get_le64(v + 40);
    if (sf_metadata_find(&v, &len, m, "part_input")) {
        out->has_input = 1;
        out->files_hash = sf_get_le64(v);
        out->values_hash = sf_get_le64(v + 8);
    }
    if (sf_metadata_find(&v, &len, m, "part_files")) {
        out->has_files = 1;
        out->names_hash = sf_get_le64(v);
        out->sizes_hash = sf_get_le64(v + 8);
        if (len > SF_PART_FILES_LIST_SIZE) {
            out->has_list = 1;
            out->list_size = sf_get_le64(v + 16);
            out->list_hash = sf_get_le64(v + 24);
            memcpy(out->list_name, v + SF_PART_FILES_LIST_SIZE, len - SF_PART_FILES_LIST_SIZE);
        }
    }
    return 1;
}

int sf_metadata_is_part_key(const uint8_t *key, uint32_t key_len)
{
    return key_is(key, key_len, "part") || key_is(key, key_len, "part_input") ||
           key_is(key, key_len, "part_files");
}

/* ---- "image_reencode" ---- */

int sf_metadata_add_image_reencode(sf_metadata_builder *b, const sf_image_reencode *r)
{
    uint8_t v[SF_IMAGE_REENCODE_SIZE];
    sf_put_le32(v, r->max_side);
    sf_put_le32(v + 4, r->quality);
    sf_put_le64(v + 8, r->count);
    return sf_metadata_add(b, "image_reencode", v, sizeof v);
}

int sf_metadata_image_reencode(sf_image_reencode *out, const sf_manifest *m)
{
    const uint8_t *v;
    uint32_t len;
    memset(out, 0, sizeof *out);
    if (!sf_metadata_find(&v, &len, m, "image_reencode"))
        return 0;
    /* Size checked by sf_metadata_check. */
    out->max_side = sf_get_le32(v);
    out->quality = sf_get_le32(v + 4);
    out->count = sf_get_le64(v + 8);
    return 1;
}
