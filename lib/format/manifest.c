/* The dataset manifest: encode and a defensive decode. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "format.h"
#include "le.h"
#include "metadata.h"

const uint8_t sf_manifest_magic[SF_MAGIC_SIZE] = {0x89, 'S', 'F', 'M', 'A', 'N', 'I', '\n'};

/* Manifest file:
 *   header          64 bytes (below)
 *   field table     field_count * 144 bytes (schema.c)
 *   shard table     shard_count * 48 bytes (below)
 *   metadata        metadata_size bytes: entries {u32 key_len, u32 value_len, key, value}
 *   trailer          8 bytes: XXH3-64 of every byte before it
 *
 * Header, 64 bytes:
 *   0  8  magic 89 53 46 4D 41 4E 49 0A ("\x89SFMANI\n")
 *   8  2  version_major
 *  10  2  version_minor
 *  12  4  required_flags (reserved: zero in 1.x)
 *  16  4  optional_flags (unused: ignored)
 *  20  4  field_count
 *  24  8  shard_count
 *  32  8  record_count
 *  40  4  align
 *  44  4  metadata_size
 *  48  8  dataset_id
 *  56  8  reserved, zero
 *
 * Shard descriptor, 48 bytes:
 *   0  8  record_count
 *   8  8  first_record
 *  16  8  file_size
 *  24  8  header_checksum (the shard header's checksum field)
 *  32  8  index_checksum  (the shard footer's index_checksum)
 *  40  8  reserved, zero
 */
_Static_assert(56 + 8 == SF_MANIFEST_HEADER_SIZE, "manifest header size");
_Static_assert(40 + 8 == SF_SHARD_DESC_SIZE, "shard descriptor size");

uint64_t sf_manifest_encoded_size(const sf_manifest *m)
{
    return SF_MANIFEST_HEADER_SIZE + (uint64_t)m->schema.field_count * SF_FIELD_DESC_SIZE +
           m->shard_count * SF_SHARD_DESC_SIZE + m->metadata_size + SF_MANIFEST_TRAILER_SIZE;
}

void sf_manifest_encode(uint8_t *out, const sf_manifest *m)
{
    uint64_t total = sf_manifest_encoded_size(m);
    memset(out, 0, total);
    memcpy(out, sf_manifest_magic, SF_MAGIC_SIZE);
    sf_put_le16(out + 8, m->version_major);
    sf_put_le16(out + 10, m->version_minor);
    sf_put_le32(out + 12, m->required_flags);
    sf_put_le32(out + 16, m->optional_flags);
    sf_put_le32(out + 20, m->schema.field_count);
    sf_put_le64(out + 24, m->shard_count);
    sf_put_le64(out + 32, m->record_count);
    sf_put_le32(out + 40, m->align);
    sf_put_le32(out + 44, m->metadata_size);
    sf_put_le64(out + 48, m->dataset_id);
    uint8_t *p = out + SF_MANIFEST_HEADER_SIZE;
    sf_schema_encode(p, &m->schema);
    p += (size_t)m->schema.field_count * SF_FIELD_DESC_SIZE;
    for (uint64_t i = 0; i < m->shard_count; i++, p += SF_SHARD_DESC_SIZE) {
        const sf_shard_desc *d = &m->shards[i];
        sf_put_le64(p + 0, d->record_count);
        sf_put_le64(p + 8, d->first_record);
        sf_put_le64(p + 16, d->file_size);
        sf_put_le64(p + 24, d->header_checksum);
        sf_put_le64(p + 32, d->index_checksum);
    }
    if (m->metadata_size)
        memcpy(p, m->metadata, m->metadata_size);
    p += m->metadata_size;
    sf_put_le64(p, sf_hash(out, (size_t)(p - out)));
}

static int decode_field(sf_field *f, const uint8_t *p, uint32_t i)
{
    memset(f, 0, sizeof *f);
    /* The name must be NUL-terminated within 64 bytes and followed by zeros
     * only, so every byte of the descriptor has one meaning. */
    size_t nlen = strnlen((const char *)p, 64);
    if (nlen > SF_MAX_NAME)
        return sf_fail(SF_E_CORRUPT, "field %u: name is not terminated", i);
    if (!sf_all_zero(p + nlen, 64 - nlen))
        return sf_fail(SF_E_RESERVED, "field %u: bytes after the name are not zero", i);
    memcpy(f->name, p, nlen);
    f->dtype = p[64];
    f->ndim = p[65];
    f->storage = p[66];
    f->codec = p[67];
    if (!sf_all_zero(p + 68, 4))
        return sf_fail(SF_E_RESERVED, "field %u: reserved bytes 68..71 are not zero", i);
    for (uint32_t d = 0; d < SF_MAX_NDIM; d++)
        f->shape[d] = sf_get_le64(p + 72 + 8 * d);
    f->item_size = sf_get_le64(p + 136);
    return 0;
}

int sf_manifest_decode(sf_manifest *m, const uint8_t *buf, uint64_t len)
{
    memset(m, 0, sizeof *m);
    if (len < SF_MANIFEST_MIN_SIZE)
        return sf_fail(SF_E_TRUNCATED, "manifest: %llu bytes, too short", (unsigned long long)len);
    if (memcmp(buf, sf_manifest_magic, SF_MAGIC_SIZE) != 0)
        return sf_fail(SF_E_BAD_MAGIC, "manifest: bad magic at byte 0");
    if (len > SF_MANIFEST_MAX_SIZE)
        return sf_fail(SF_E_LIMIT, "manifest: %llu bytes exceeds the limit",
                       (unsigned long long)len);
    /* The checksum covers everything, so check it before trusting any count. */
    uint64_t stored = sf_get_le64(buf + len - SF_MANIFEST_TRAILER_SIZE);
    if (sf_hash(buf, (size_t)(len - SF_MANIFEST_TRAILER_SIZE)) != stored)
        return sf_fail(SF_E_CHECKSUM, "manifest: checksum mismatch (file damaged or truncated)");
    m->version_major = sf_get_le16(buf + 8);
    m->version_minor = sf_get_le16(buf + 10);
    if (m->version_major != SF_FORMAT_MAJOR)
        return sf_fail(SF_E_VERSION, "manifest: format version %u.%u, this reader reads %u.x",
                       m->version_major, m->version_minor, SF_FORMAT_MAJOR);
    m->required_flags = sf_get_le32(buf + 12);
    if (m->required_flags)
        return sf_fail(SF_E_RESERVED, "manifest: reserved flag bits 0x%08x set", m->required_flags);
    m->optional_flags = sf_get_le32(buf + 16);
    if (!sf_all_zero(buf + 56, 8))
        return sf_fail(SF_E_RESERVED, "manifest: reserved bytes 56..63 are not zero");
    uint32_t field_count = sf_get_le32(buf + 20);
    m->shard_count = sf_get_le64(buf + 24);
    m->record_count = sf_get_le64(buf + 32);
    m->align = sf_get_le32(buf + 40);
    m->metadata_size = sf_get_le32(buf + 44);
    m->dataset_id = sf_get_le64(buf + 48);
    if (field_count == 0 || field_count > SF_MAX_FIELDS)
        return sf_fail(SF_E_LIMIT, "manifest: %u fields (must be 1..%u)", field_count, SF_MAX_FIELDS);
    if (m->shard_count > SF_MAX_SHARDS)
        return sf_fail(SF_E_LIMIT, "manifest: %llu shards (limit %u)",
                       (unsigned long long)m->shard_count, SF_MAX_SHARDS);
    if (m->record_count > SF_MAX_RECORDS)
        return sf_fail(SF_E_LIMIT, "manifest: %llu records (limit %llu)",
                       (unsigned long long)m->record_count, (unsigned long long)SF_MAX_RECORDS);
    if (m->metadata_size > SF_MAX_METADATA)
        return sf_fail(SF_E_LIMIT, "manifest: %u bytes of metadata (limit %u)", m->metadata_size,
                       SF_MAX_METADATA);
    if (!sf_valid_align(m->align))
        return sf_fail(SF_E_CORRUPT, "manifest: alignment %u is not a power of two <= %u", m->align,
                       SF_MAX_ALIGN);
    uint64_t expect = SF_MANIFEST_HEADER_SIZE + (uint64_t)field_count * SF_FIELD_DESC_SIZE +
                      m->shard_count * SF_SHARD_DESC_SIZE + m->metadata_size +
                      SF_MANIFEST_TRAILER_SIZE;
    if (expect != len)
        return sf_fail(len < expect ? SF_E_TRUNCATED : SF_E_CORRUPT,
                       "manifest: %llu bytes, its counts say %llu", (unsigned long long)len,
                       (unsigned long long)expect);

    const uint8_t *p = buf + SF_MANIFEST_HEADER_SIZE;
    m->schema.field_count = field_count;
    for (uint32_t i = 0; i < field_count; i++, p += SF_FIELD_DESC_SIZE) {
        int rc = decode_field(&m->schema.fields[i], p, i);
        if (rc)
            return sf_fail_prefix(rc, "manifest");
    }
    int rc = sf_schema_finish(&m->schema);
    if (rc)
        return sf_fail_prefix(rc, "manifest schema");

    m->shards = calloc(m->shard_count ? m->shard_count : 1, sizeof *m->shards);
    if (!m->shards)
        return sf_fail(-ENOMEM, "manifest: out of memory");
    uint64_t next_first = 0;
    for (uint64_t i = 0; i < m->shard_count; i++, p += SF_SHARD_DESC_SIZE) {
        sf_shard_desc *d = &m->shards[i];
        d->record_count = sf_get_le64(p + 0);
        d->first_record = sf_get_le64(p + 8);
        d->file_size = sf_get_le64(p + 16);
        d->header_checksum = sf_get_le64(p + 24);
        d->index_checksum = sf_get_le64(p + 32);
        if (!sf_all_zero(p + 40, 8)) {
            sf_manifest_clear(m);
            return sf_fail(SF_E_RESERVED, "manifest: shard %llu: reserved bytes are not zero",
                           (unsigned long long)i);
        }
        if (d->record_count == 0 || d->record_count > SF_MAX_RECORDS_PER_SHARD ||
            d->first_record != next_first || d->file_size > SF_MAX_SHARD_BYTES ||
            d->file_size < sf_data_offset(m->align) + SF_SHARD_FOOTER_SIZE) {
            sf_manifest_clear(m);
            return sf_fail(SF_E_CORRUPT, "manifest: shard %llu: inconsistent counts or size",
                           (unsigned long long)i);
        }
        next_first += d->record_count;
    }
    if (next_first != m->record_count) {
        sf_manifest_clear(m);
        return sf_fail(SF_E_CORRUPT, "manifest: shards hold %llu records, header says %llu",
                       (unsigned long long)next_first, (unsigned long long)m->record_count);
    }
    rc = sf_metadata_check(p, m->metadata_size);
    if (rc) {
        sf_manifest_clear(m);
        return sf_fail_prefix(rc, "manifest");
    }
    if (m->metadata_size) {
        m->metadata = malloc(m->metadata_size);
        if (!m->metadata) {
            sf_manifest_clear(m);
            return sf_fail(-ENOMEM, "manifest: out of memory");
        }
        memcpy(m->metadata, p, m->metadata_size);
    }
    return 0;
}

void sf_manifest_clear(sf_manifest *m)
{
    if (!m)
        return;
    free(m->shards);
    free(m->metadata);
    m->shards = NULL;
    m->metadata = NULL;
}
