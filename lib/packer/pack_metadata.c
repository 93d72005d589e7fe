/* The manifest metadata pack writes (SPEC.md "Metadata"): "source",
 * "class_names", and "part" and "part_input" for one part of a --part run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "le.h"
#include "pack_internal.h"

/* Appends one metadata entry (SPEC.md "Metadata"); NULL out: just counts. */
static uint32_t put_entry(uint8_t *out, const char *key, const uint8_t *val, uint32_t vlen)
{
    uint32_t klen = (uint32_t)strlen(key);
    if (out) {
        sf_put_le32(out, klen);
        sf_put_le32(out + 4, vlen);
        memcpy(out + 8, key, klen);
        if (vlen)
            memcpy(out + 8 + klen, val, vlen);
    }
    return 8 + klen + vlen;
}

static uint32_t class_names_value(uint8_t *out, const input_set *in)
{
    uint32_t pos = 0;
    for (uint32_t c = 0; c < in->class_count; c++) {
        uint32_t len = (uint32_t)strlen(in->class_names[c]);
        if (out) {
            sf_put_le32(out + pos, len);
            memcpy(out + pos + 4, in->class_names[c], len);
        }
        pos += 4 + len;
    }
    return pos;
}

int pack_metadata_encode(uint8_t **out, uint32_t *size, const input_set *in,
                         const pack_part_info *part)
{
    uint8_t partval[SF_PART_INFO_SIZE], inputval[SF_PART_INPUT_SIZE];
    if (part && part->count) {
        sf_put_le64(inputval, part->files_hash);
        sf_put_le64(inputval + 8, part->values_hash);
        sf_put_le32(partval, part->index);
        sf_put_le32(partval + 4, part->count);
        sf_put_le64(partval + 8, part->whole_dataset_id);
        sf_put_le64(partval + 16, part->whole_records);
        sf_put_le64(partval + 24, part->whole_shards);
        sf_put_le64(partval + 32, part->first_record);
        sf_put_le64(partval + 40, part->first_shard);
    }
    uint64_t classes = class_names_value(NULL, in);
    if (classes > SF_MAX_METADATA / 2)
        return sf_fail(SF_E_LIMIT, "%s: class names take %llu bytes (limit %u)", in->path,
                       (unsigned long long)classes, SF_MAX_METADATA / 2);
    const char *source = in->ops->name;
    uint32_t total = put_entry(NULL, "source", NULL, (uint32_t)strlen(source));
    if (in->class_count)
        total += put_entry(NULL, "class_names", NULL, (uint32_t)classes);
    if (part && part->count)
        total += put_entry(NULL, "part", NULL, sizeof partval) +
                 put_entry(NULL, "part_input", NULL, sizeof inputval);
    uint8_t *buf = malloc(total), *p = buf;
    if (!buf)
        return sf_fail(-ENOMEM, "out of memory");
    p += put_entry(p, "source", (const uint8_t *)source, (uint32_t)strlen(source));
    if (in->class_count) {
        uint8_t *val = malloc(classes ? classes : 1);
        if (!val) {
            free(buf);
            return sf_fail(-ENOMEM, "out of memory");
        }
        class_names_value(val, in);
        p += put_entry(p, "class_names", val, (uint32_t)classes);
        free(val);
    }
    if (part && part->count) {
        p += put_entry(p, "part", partval, sizeof partval);
        p += put_entry(p, "part_input", inputval, sizeof inputval);
    }
    *out = buf;
    *size = total;
    return 0;
}
