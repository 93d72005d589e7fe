/* Fuzz target: the manifest decoder (sf_manifest_decode).
 *
 * Input: one flag byte, then the manifest bytes. With flag bit 0 set, the
 * trailer (XXH3 of everything before it) is recomputed first, so mutations
 * reach the decoder's structural checks instead of stopping at the
 * checksum. Checks, beyond "no crash, no UB, no allocation beyond the
 * input's size" (sizes come from counts that must match the length):
 *  - a decoded manifest re-encodes to exactly the input bytes (every byte
 *    has one meaning), and its schema is finished and self-consistent;
 *  - a failure returns a negative code with a message. */
#include <inttypes.h>

#include "format.h"
#include "fuzz_common.h"
#include "shardfeed/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    FUZZ_CHECK(buf, "out of memory");
    memcpy(buf, data + 1, len);
    if ((flags & 1) && len >= SF_MANIFEST_TRAILER_SIZE)
        fz_put64(buf + len - SF_MANIFEST_TRAILER_SIZE, sf_hash(buf, len - SF_MANIFEST_TRAILER_SIZE));

    sf_manifest m;
    int rc = sf_manifest_decode(&m, buf, len);
    if (rc != 0) {
        FUZZ_CHECK(rc < 0 && sf_last_error()[0] != '\0', "failure %d without a message", rc);
        FUZZ_CHECK(m.shards == NULL && m.metadata == NULL, "failed decode left allocations");
        free(buf);
        return 0;
    }

    FUZZ_CHECK(m.version_major == SF_FORMAT_MAJOR && m.required_flags == 0, "version/flags");
    FUZZ_CHECK(sf_valid_align(m.align), "align %u", m.align);
    FUZZ_CHECK(m.shard_count <= SF_MAX_SHARDS, "shard_count");
    FUZZ_CHECK(m.schema.field_count >= 1 && m.schema.field_count <= SF_MAX_FIELDS, "field_count");
    uint64_t next = 0;
    for (uint64_t i = 0; i < m.shard_count; i++) {
        const sf_shard_desc *d = &m.shards[i];
        FUZZ_CHECK(d->first_record == next, "shard %" PRIu64 " first_record", i);
        FUZZ_CHECK(d->record_count >= 1 && d->record_count <= SF_MAX_RECORDS_PER_SHARD, "count");
        FUZZ_CHECK(d->file_size >= sf_data_offset(m.align) + SF_SHARD_FOOTER_SIZE, "file_size");
        next += d->record_count;
    }
    FUZZ_CHECK(next == m.record_count, "records");
    /* Every field name is a valid, safe path component. */
    for (uint32_t f = 0; f < m.schema.field_count; f++) {
        const char *name = m.schema.fields[f].name;
        FUZZ_CHECK(sf_valid_field_name(name, strlen(name)), "field %u name not valid", f);
        FUZZ_CHECK(strchr(name, '/') == NULL && strcmp(name, "..") != 0 && strcmp(name, ".") != 0,
                   "field name '%s' could escape a directory", name);
        FUZZ_CHECK(sf_schema_find(&m.schema, name) == (int)f, "field names not unique");
    }
    sf_schema copy = m.schema;
    FUZZ_CHECK(sf_schema_finish(&copy) == 0, "decoded schema does not finish again");
    FUZZ_CHECK(copy.entry_size == m.schema.entry_size && copy.n_payload == m.schema.n_payload,
               "schema derived members differ");

    uint64_t enc = sf_manifest_encoded_size(&m);
    FUZZ_CHECK(enc == len, "encoded size %" PRIu64 " != %zu", enc, len);
    uint8_t *out = malloc(len);
    FUZZ_CHECK(out, "out of memory");
    sf_manifest_encode(out, &m);
    FUZZ_CHECK(memcmp(out, buf, len) == 0, "decode/encode is not the identity");
    free(out);
    sf_manifest_clear(&m);
    free(buf);
    return 0;
}
