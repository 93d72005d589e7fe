/* Shard header, footer and index: encoding, decoding, structural checks. */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include "hash.h"

#include "error_internal.h"
#include "fault_guard.h"
#include "format.h"
#include "le.h"

const uint8_t sf_shard_magic[SF_MAGIC_SIZE] = {0x89, 'S', 'F', 'S', 'H', 'R', 'D', '\n'};
const uint8_t sf_footer_magic[SF_MAGIC_SIZE] = {0x89, 'S', 'F', 'S', 'E', 'N', 'D', '\n'};

uint64_t sf_hash(const void *buf, size_t len)
{
    return XXH3_64bits(buf, len);
}

uint64_t sf_record_hash(XXH3_state_t *scratch, const uint8_t *const *field_ptr,
                        const uint64_t *field_size, uint32_t n_payload)
{
    /* Streaming XXH3 over several ranges equals one-shot XXH3 over their
     * concatenation; one range (the usual case) needs no state. */
    if (n_payload <= 1)
        return XXH3_64bits(n_payload ? field_ptr[0] : NULL, n_payload ? field_size[0] : 0);
    assert(scratch && "a record of several payload fields needs the caller's XXH3 state");
    XXH3_64bits_reset(scratch);
    for (uint32_t k = 0; k < n_payload; k++)
        XXH3_64bits_update(scratch, field_ptr[k], field_size[k]);
    return XXH3_64bits_digest(scratch);
}

/* Shard header, 128 bytes:
 *   0   8  magic 89 53 46 53 48 52 44 0A ("\x89SFSHRD\n")
 *   8   2  version_major
 *  10   2  version_minor
 *  12   4  required_flags (reserved: all bits must be zero in 1.x)
 *  16   4  optional_flags (unused: writers write zero, readers ignore)
 *  20   4  align
 *  24   8  shard_index
 *  32   8  record_count
 *  40   8  first_record
 *  48   8  data_offset
 *  56   8  index_offset
 *  64   8  index_size
 *  72   4  index_entry_size
 *  76   4  field_count
 *  80   8  schema_hash
 *  88   8  dataset_id
 *  96  24  reserved, zero
 * 120   8  checksum: XXH3-64 of bytes 0..119
 */
_Static_assert(96 + 24 + 8 == SF_SHARD_HEADER_SIZE, "shard header size");

void sf_shard_header_encode(uint8_t out[SF_SHARD_HEADER_SIZE], sf_shard_header *h)
{
    memset(out, 0, SF_SHARD_HEADER_SIZE);
    memcpy(out, sf_shard_magic, SF_MAGIC_SIZE);
    sf_put_le16(out + 8, h->version_major);
    sf_put_le16(out + 10, h->version_minor);
    sf_put_le32(out + 12, h->required_flags);
    sf_put_le32(out + 16, h->optional_flags);
    sf_put_le32(out + 20, h->align);
    sf_put_le64(out + 24, h->shard_index);
    sf_put_le64(out + 32, h->record_count);
    sf_put_le64(out + 40, h->first_record);
    sf_put_le64(out + 48, h->data_offset);
    sf_put_le64(out + 56, h->index_offset);
    sf_put_le64(out + 64, h->index_size);
    sf_put_le32(out + 72, h->index_entry_size);
    sf_put_le32(out + 76, h->field_count);
    sf_put_le64(out + 80, h->schema_hash);
    sf_put_le64(out + 88, h->dataset_id);
    h->checksum = sf_hash(out, 120);
    sf_put_le64(out + 120, h->checksum);
}

int sf_shard_header_decode(sf_shard_header *h, const uint8_t in[SF_SHARD_HEADER_SIZE])
{
    if (memcmp(in, sf_shard_magic, SF_MAGIC_SIZE) != 0)
        return sf_fail(SF_E_BAD_MAGIC, "shard header: bad magic at byte 0");
    h->checksum = sf_get_le64(in + 120);
    if (sf_hash(in, 120) != h->checksum)
        return sf_fail(SF_E_CHECKSUM, "shard header: checksum mismatch (bytes 0..127)");
    h->version_major = sf_get_le16(in + 8);
    h->version_minor = sf_get_le16(in + 10);
    if (h->version_major != SF_FORMAT_MAJOR)
        return sf_fail(SF_E_VERSION, "shard header: format version %u.%u, this reader reads %u.x",
                       h->version_major, h->version_minor, SF_FORMAT_MAJOR);
    h->required_flags = sf_get_le32(in + 12);
    if (h->required_flags != 0)
        return sf_fail(SF_E_RESERVED, "shard header: reserved flag bits 0x%08x set at byte 12",
                       h->required_flags);
    h->optional_flags = sf_get_le32(in + 16);
    if (!sf_all_zero(in + 96, 24))
        return sf_fail(SF_E_RESERVED, "shard header: reserved bytes 96..119 are not zero");
    h->align = sf_get_le32(in + 20);
    h->shard_index = sf_get_le64(in + 24);
    h->record_count = sf_get_le64(in + 32);
    h->first_record = sf_get_le64(in + 40);
    h->data_offset = sf_get_le64(in + 48);
    h->index_offset = sf_get_le64(in + 56);
    h->index_size = sf_get_le64(in + 64);
    h->index_entry_size = sf_get_le32(in + 72);
    h->field_count = sf_get_le32(in + 76);
    h->schema_hash = sf_get_le64(in + 80);
    h->dataset_id = sf_get_le64(in + 88);

    if (!sf_valid_align(h->align))
        return sf_fail(SF_E_CORRUPT, "shard header: alignment %u is not a power of two <= %u",
                       h->align, SF_MAX_ALIGN);
    if (h->data_offset != sf_data_offset(h->align))
        return sf_fail(SF_E_CORRUPT, "shard header: data offset %llu, expected %llu",
                       (unsigned long long)h->data_offset,
                       (unsigned long long)sf_data_offset(h->align));
    if (h->record_count == 0 || h->record_count > SF_MAX_RECORDS_PER_SHARD)
        return sf_fail(SF_E_LIMIT, "shard header: %llu records (must be 1..%u)",
                       (unsigned long long)h->record_count, SF_MAX_RECORDS_PER_SHARD);
    if (h->field_count == 0 || h->field_count > SF_MAX_FIELDS)
        return sf_fail(SF_E_LIMIT, "shard header: %u fields", h->field_count);
    if (h->index_size > SF_MAX_INDEX_BYTES || h->index_offset > SF_MAX_SHARD_BYTES ||
        h->index_offset < h->data_offset)
        return sf_fail(SF_E_LIMIT, "shard header: index offset %llu / size %llu out of range",
                       (unsigned long long)h->index_offset, (unsigned long long)h->index_size);
    if (h->index_entry_size < SF_INDEX_ENTRY_BASE ||
        h->index_size / h->index_entry_size < h->record_count)
        return sf_fail(SF_E_CORRUPT, "shard header: index of %llu bytes cannot hold %llu entries",
                       (unsigned long long)h->index_size, (unsigned long long)h->record_count);
    return 0;
}

/* Shard footer, 64 bytes, at file_size - 64:
 *   0  8  index_offset    (equal to the header's)
 *   8  8  index_size      (equal to the header's)
 *  16  8  record_count    (equal to the header's)
 *  24  8  index_checksum: XXH3-64 of the index bytes
 *  32  8  header_checksum (equal to the header's checksum)
 *  40  8  reserved, zero
 *  48  8  checksum: XXH3-64 of footer bytes 0..47
 *  56  8  magic 89 53 46 53 45 4E 44 0A ("\x89SFSEND\n")
 */
_Static_assert(48 + 8 + SF_MAGIC_SIZE == SF_SHARD_FOOTER_SIZE, "shard footer size");

void sf_shard_footer_encode(uint8_t out[SF_SHARD_FOOTER_SIZE], sf_shard_footer *f)
{
    memset(out, 0, SF_SHARD_FOOTER_SIZE);
    sf_put_le64(out + 0, f->index_offset);
    sf_put_le64(out + 8, f->index_size);
    sf_put_le64(out + 16, f->record_count);
    sf_put_le64(out + 24, f->index_checksum);
    sf_put_le64(out + 32, f->header_checksum);
    f->checksum = sf_hash(out, 48);
    sf_put_le64(out + 48, f->checksum);
    memcpy(out + 56, sf_footer_magic, SF_MAGIC_SIZE);
}

int sf_shard_footer_decode(sf_shard_footer *f, const uint8_t in[SF_SHARD_FOOTER_SIZE])
{
    if (memcmp(in + 56, sf_footer_magic, SF_MAGIC_SIZE) != 0)
        return sf_fail(SF_E_BAD_MAGIC, "shard footer: bad end magic (file truncated or not a shard)");
    f->checksum = sf_get_le64(in + 48);
    if (sf_hash(in, 48) != f->checksum)
        return sf_fail(SF_E_CHECKSUM, "shard footer: checksum mismatch");
    if (!sf_all_zero(in + 40, 8))
        return sf_fail(SF_E_RESERVED, "shard footer: reserved bytes 40..47 are not zero");
    f->index_offset = sf_get_le64(in + 0);
    f->index_size = sf_get_le64(in + 8);
    f->record_count = sf_get_le64(in + 16);
    f->index_checksum = sf_get_le64(in + 24);
    f->header_checksum = sf_get_le64(in + 32);
    return 0;
}

/* Index entry, s->entry_size bytes:
 *   0  8  offset       absolute file offset of the record payload
 *   8  8  size         stored payload bytes (inter-field padding included)
 *  16  8  checksum     XXH3-64 over the payload fields' bytes in schema order
 *  24  4  key_offset   into the key area that follows the entries
 *  28  2  key_length   1..255
 *  30  2  reserved, zero
 *  32  8*n_var     stored byte length of each variable-length or compressed field
 *  ..  8*n_inline  each inline value, little-endian, zero-filled above its size
 */
void sf_index_entry_encode(uint8_t *out, const sf_schema *s, const sf_index_entry *e)
{
    memset(out, 0, s->entry_size);
    sf_put_le64(out + 0, e->offset);
    sf_put_le64(out + 8, e->size);
    sf_put_le64(out + 16, e->checksum);
    sf_put_le32(out + 24, e->key_offset);
    sf_put_le16(out + 28, e->key_length);
    uint8_t *p = out + SF_INDEX_ENTRY_BASE;
    for (uint32_t v = 0; v < s->n_var; v++, p += 8)
        sf_put_le64(p, e->var_len[v]);
    for (uint32_t f = 0; f < s->field_count; f++) {
        int slot = s->inline_slot[f];
        if (slot < 0)
            continue;
        memcpy(p + 8 * slot, e->inline_val[slot], s->fields[f].item_size);
    }
}

int sf_index_entry_decode(sf_index_entry *e, const sf_schema *s, const uint8_t *in)
{
    e->offset = sf_get_le64(in + 0);
    e->size = sf_get_le64(in + 8);
    e->checksum = sf_get_le64(in + 16);
    e->key_offset = sf_get_le32(in + 24);
    e->key_length = sf_get_le16(in + 28);
    if (sf_get_le16(in + 30) != 0)
        return sf_fail(SF_E_RESERVED, "reserved index bytes 30..31 are not zero");
    const uint8_t *p = in + SF_INDEX_ENTRY_BASE;
    for (uint32_t v = 0; v < s->n_var; v++, p += 8)
        e->var_len[v] = sf_get_le64(p);
    for (uint32_t f = 0; f < s->field_count; f++) {
        int slot = s->inline_slot[f];
        if (slot < 0)
            continue;
        const uint8_t *val = p + 8 * slot;
        uint64_t size = s->fields[f].item_size;
        if (!sf_all_zero(val + size, SF_MAX_INLINE_BYTES - size))
            return sf_fail(SF_E_RESERVED, "inline value of field '%s' has non-zero unused bytes",
                           s->fields[f].name);
        memcpy(e->inline_val[slot], val, SF_MAX_INLINE_BYTES);
    }
    return 0;
}

int sf_record_layout(const sf_schema *s, uint32_t align, const uint64_t *var_len,
                     uint64_t *field_off, uint64_t *field_size, uint64_t *record_size)
{
    uint64_t pos = 0, end = 0;
    uint32_t k = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        if (fd->storage == SF_STORAGE_INLINE)
            continue;
        uint64_t size = s->var_slot[f] >= 0 ? var_len[s->var_slot[f]] : fd->item_size;
        if (size > SF_MAX_RECORD_BYTES)
            return sf_fail(SF_E_LIMIT, "field '%s': %llu bytes exceeds the record limit", fd->name,
                           (unsigned long long)size);
        pos = k == 0 ? 0 : sf_align_up(end, align);
        field_off[k] = pos;
        field_size[k] = size;
        end = pos + size;
        if (end > SF_MAX_RECORD_BYTES)
            return sf_fail(SF_E_LIMIT, "record of more than %llu bytes",
                           (unsigned long long)SF_MAX_RECORD_BYTES);
        k++;
    }
    *record_size = end;
    return 0;
}

uint64_t sf_first_non_bool(const uint8_t *p, uint64_t len)
{
    uint64_t i = 0;
    /* Eight bytes at a time: a bool byte has no bit set but the lowest. */
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & 0xFEFEFEFEFEFEFEFEull)
            break;
    }
    for (; i < len; i++)
        if (p[i] > 1)
            return i;
    return UINT64_MAX;
}

int sf_payload_value_check(const sf_schema *s, uint32_t k, const uint8_t *value, uint64_t len)
{
    assert(k < s->n_payload);
    if (!(s->bool_payload >> k & 1))
        return 0;
    uint64_t at = sf_first_non_bool(value, len);
    if (at == UINT64_MAX)
        return 0;
    return sf_fail(SF_E_CORRUPT, "field '%s': bool value holds byte 0x%02x at byte %llu of the value (bools are 0 or 1)",
                   s->fields[s->payload_field[k]].name, value[at], (unsigned long long)at);
}

/* Inline bool values hold only 0 and 1 (SPEC.md "Data types"). */
static int check_inline_bools(const sf_schema *s, const sf_index_entry *e, uint64_t r)
{
    for (uint32_t f = 0; f < s->field_count; f++) {
        int slot = s->inline_slot[f];
        if (slot < 0 || s->fields[f].dtype != SF_DTYPE_BOOL)
            continue;
        uint64_t at = sf_first_non_bool(e->inline_val[slot], s->fields[f].item_size);
        if (at != UINT64_MAX)
            return sf_fail(SF_E_CORRUPT, "record %llu: bool field '%s' holds byte 0x%02x (bools are 0 or 1)",
                           (unsigned long long)r, s->fields[f].name, e->inline_val[slot][at]);
    }
    return 0;
}

int sf_index_check(const sf_schema *s, const sf_shard_header *h, const uint8_t *index)
{
    uint64_t entries = h->record_count * s->entry_size;
    if (h->index_entry_size != s->entry_size)
        return sf_fail(SF_E_CORRUPT, "index entry size %u, schema needs %u", h->index_entry_size,
                       s->entry_size);
    if (entries > h->index_size)
        return sf_fail(SF_E_CORRUPT, "index too small for %llu entries",
                       (unsigned long long)h->record_count);
    uint64_t key_area = h->index_size - entries;
    const uint8_t *keys = index + entries;
    uint64_t expect_off = h->data_offset, key_pos = 0;
    uint64_t field_off[SF_MAX_FIELDS], field_size[SF_MAX_FIELDS];
    sf_index_entry e;
    for (uint64_t r = 0; r < h->record_count; r++) {
        int rc = sf_index_entry_decode(&e, s, index + r * s->entry_size);
        if (rc)
            return sf_fail_prefix(rc, "index entry");
        uint64_t record_size;
        rc = sf_record_layout(s, h->align, e.var_len, field_off, field_size, &record_size);
        if (rc)
            return rc;
        for (uint32_t f = 0; f < s->field_count; f++) {
            int v = s->var_slot[f];
            if (v < 0)
                continue;
            /* A frame is never empty; its stored length says nothing about
             * the element size (the frame's content size does: see
             * lib/dataset/value_codec.c). */
            if (s->fields[f].codec != SF_CODEC_NONE) {
                if (e.var_len[v] == 0)
                    return sf_fail(SF_E_CORRUPT, "record %llu: compressed field '%s' has a stored length of 0",
                                   (unsigned long long)r, s->fields[f].name);
                continue;
            }
            if (e.var_len[v] % sf_dtype_size(s->fields[f].dtype) != 0)
                return sf_fail(SF_E_CORRUPT, "record %llu: field '%s' length %llu is not a multiple of its element size",
                               (unsigned long long)r, s->fields[f].name,
                               (unsigned long long)e.var_len[v]);
        }
        if (e.offset != expect_off)
            return sf_fail(SF_E_CORRUPT, "record %llu: offset %llu, expected %llu",
                           (unsigned long long)r, (unsigned long long)e.offset,
                           (unsigned long long)expect_off);
        if (e.size != record_size)
            return sf_fail(SF_E_CORRUPT, "record %llu: size %llu, layout gives %llu",
                           (unsigned long long)r, (unsigned long long)e.size,
                           (unsigned long long)record_size);
        if (e.key_offset != key_pos || e.key_length == 0 || e.key_length > SF_MAX_KEY ||
            key_pos + e.key_length > key_area)
            return sf_fail(SF_E_CORRUPT, "record %llu: key at %u+%u outside the key area",
                           (unsigned long long)r, e.key_offset, e.key_length);
        char why[600];
        if (!sf_key_check((const char *)keys + key_pos, e.key_length, why, sizeof why))
            return sf_fail(SF_E_CORRUPT, "record %llu: %s", (unsigned long long)r, why);
        if ((rc = check_inline_bools(s, &e, r)))
            return rc;
        key_pos += e.key_length;
        expect_off = sf_align_up(e.offset + e.size, h->align);
        if (expect_off > h->index_offset)
            return sf_fail(SF_E_CORRUPT, "record %llu extends past the index", (unsigned long long)r);
    }
    if (key_pos != key_area)
        return sf_fail(SF_E_CORRUPT, "key area has %llu bytes, keys use %llu",
                       (unsigned long long)key_area, (unsigned long long)key_pos);
    if (expect_off != h->index_offset)
        return sf_fail(SF_E_CORRUPT, "index at %llu, expected right after the last record at %llu",
                       (unsigned long long)h->index_offset, (unsigned long long)expect_off);
    return 0;
}

/* ---- the record hash under the fault guard ---- */

typedef struct hash_job {
    XXH3_state_t *scratch;
    const uint8_t *const *ptr;
    const uint64_t *len;
    uint32_t n;
    uint64_t digest;
} hash_job;

static int hash_ranges(void *arg)
{
    hash_job *j = arg;
    j->digest = sf_record_hash(j->scratch, j->ptr, j->len, j->n);
    return 0;
}

int sf_guarded_hash(uint64_t *out, XXH3_state_t *scratch, const uint8_t *const *ptr,
                    const uint64_t *len, uint32_t n)
{
    /* The state is the caller's: a jump out of the guarded call leaves
     * nothing to free. */
    hash_job j = {scratch, ptr, len, n, 0};
    int rc = sf_fault_guarded(hash_ranges, &j);
    if (!rc)
        *out = j.digest;
    return rc;
}

int64_t sf_shard_name_index(const char *name, size_t len)
{
    static const char pre[] = "shard-", suf[] = ".sfs";
    const size_t np = sizeof pre - 1, ns = sizeof suf - 1;
    if (len < np + 6 + ns || len > np + 7 + ns || memcmp(name, pre, np) != 0 ||
        memcmp(name + len - ns, suf, ns) != 0)
        return -1;
    size_t digits = len - np - ns;
    int64_t v = 0;
    for (size_t i = 0; i < digits; i++) {
        char c = name[np + i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    /* %06u pads to six digits only: seven digits are a number >= 1,000,000. */
    if ((digits == 7 && v < 1000000) || v >= SF_MAX_SHARDS)
        return -1;
    return v;
}
