/* The shard plan: which records go into which shard, decided before
 * anything is written. It depends only on the inputs' keys, sizes and
 * schema and on the options, never on timing or on the number of threads,
 * which makes output byte-identical for any -j. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "hash.h"

#include "error_internal.h"
#include "le.h"
#include "pack_internal.h"

static void hash_u64(XXH3_state_t *st, uint64_t v)
{
    uint8_t num[8];
    sf_put_le64(num, v);
    XXH3_64bits_update(st, num, 8);
}

/* dataset_id: XXH3-64 over what determines the output, so a re-run of the
 * same command recognises its own shards and a different input does not. */
static uint64_t dataset_id(const input_set *in, uint32_t align, uint64_t shard_size,
                           const int *levels, const pack_images *images)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    static const char tag[] = "shardfeed pack v2";
    uint8_t schema[SF_MAX_FIELDS * SF_FIELD_DESC_SIZE];
    uint32_t nf = in->schema.field_count;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, tag, sizeof tag);
    XXH3_64bits_update(st, in->ops->name, strlen(in->ops->name) + 1);
    sf_schema_encode(schema, &in->schema);
    XXH3_64bits_update(st, schema, (size_t)nf * SF_FIELD_DESC_SIZE);
    for (uint32_t f = 0; f < nf; f++)
        hash_u64(st, (uint64_t)(int64_t)levels[f]);
    hash_u64(st, align);
    hash_u64(st, shard_size);
    /* Only when on, so that the ids of packs without them stay as they were. */
    if (images && images->max_side) {
        static const char image_tag[] = "image_reencode";
        XXH3_64bits_update(st, image_tag, sizeof image_tag);
        hash_u64(st, images->max_side);
        hash_u64(st, images->quality);
    }
    hash_u64(st, in->class_count);
    for (uint32_t c = 0; c < in->class_count; c++)
        XXH3_64bits_update(st, in->class_names[c], strlen(in->class_names[c]) + 1);
    hash_u64(st, in->sample_count);
    for (uint64_t s = 0; s < in->sample_count; s++) {
        XXH3_64bits_update(st, in->keys[s], strlen(in->keys[s]) + 1);
        for (uint32_t f = 0; f < nf; f++)
            hash_u64(st, in->sizes[s * nf + f]);
    }
    uint64_t id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return id ? id : 1;
}

/* File bytes of record r, stored uncompressed, padded to the alignment. */
static int record_stride(uint64_t *out, const input_set *in, uint64_t r, uint32_t align)
{
    const sf_schema *s = &in->schema;
    uint64_t slot_len[SF_MAX_FIELDS], off[SF_MAX_FIELDS], size[SF_MAX_FIELDS], rec;
    for (uint32_t f = 0; f < s->field_count; f++)
        if (s->var_slot[f] >= 0)
            slot_len[s->var_slot[f]] = in->sizes[r * s->field_count + f];
    int rc = sf_record_layout(s, align, slot_len, off, size, &rec);
    if (rc)
        return sf_fail_prefix(rc, in->keys[r]);
    *out = sf_align_up(rec, align);
    return 0;
}

int pack_make_plan(pack_plan *plan, const input_set *in, uint32_t align, uint64_t shard_size,
                   const int *levels, const pack_images *images)
{
    memset(plan, 0, sizeof *plan);
    if (!sf_valid_align(align))
        return sf_fail(SF_E_INVALID, "alignment %u is not a power of two between 1 and %u", align,
                       SF_MAX_ALIGN);
    if (in->sample_count > SF_MAX_RECORDS)
        return sf_fail(SF_E_LIMIT, "%llu samples (limit %llu)", (unsigned long long)in->sample_count,
                       (unsigned long long)SF_MAX_RECORDS);
    const sf_schema *s = &in->schema;
    plan->align = align;
    plan->shard_size = shard_size;
    memcpy(plan->levels, levels, sizeof plan->levels);
    plan->dataset_id = dataset_id(in, align, shard_size, levels, images);

    /* Greedy: add records while the file stays within shard_size; a shard
     * always takes at least one record. */
    uint64_t fixed = sf_data_offset(align) + SF_SHARD_FOOTER_SIZE;
    uint64_t cap = 16;
    plan->shards = malloc(cap * sizeof *plan->shards);
    if (!plan->shards)
        return sf_fail(-ENOMEM, "out of memory");
    uint64_t r = 0;
    while (r < in->sample_count) {
        pack_shard_plan sp = {.first = r};
        uint64_t keys = 0, data = 0;
        while (r < in->sample_count && sp.count < SF_MAX_RECORDS_PER_SHARD) {
            uint64_t klen = strlen(in->keys[r]), stride;
            int rc = record_stride(&stride, in, r, align);
            if (rc)
                return rc;
            uint64_t index = (sp.count + 1) * s->entry_size + keys + klen;
            uint64_t total = fixed + data + stride + index;
            if (sp.count > 0 && (total > shard_size || index > SF_MAX_INDEX_BYTES ||
                                 total > SF_MAX_SHARD_BYTES))
                break;
            if (total > SF_MAX_SHARD_BYTES)
                return sf_fail(SF_E_LIMIT, "sample '%s' does not fit in a shard", in->keys[r]);
            keys += klen;
            data += stride;
            sp.count++;
            r++;
        }
        sp.index_size = sp.count * s->entry_size + keys;
        if (plan->shard_count == SF_MAX_SHARDS)
            return sf_fail(SF_E_LIMIT, "more than %u shards: raise the shard_size option", SF_MAX_SHARDS);
        if (plan->shard_count == cap) {
            cap *= 2;
            pack_shard_plan *n = realloc(plan->shards, cap * sizeof *n);
            if (!n)
                return sf_fail(-ENOMEM, "out of memory");
            plan->shards = n;
        }
        plan->shards[plan->shard_count++] = sp;
    }
    return 0;
}

int pack_plan_values_hash(uint64_t *out, const pack_plan *plan, const input_set *in, const pack_images *images)
{
    uint32_t nf = in->schema.field_count;
    void *cursor = NULL;
    XXH3_state_t *st = XXH3_createState();
    uint8_t *buf = NULL;
    uint64_t cap = 0;
    int rc = st ? in->ops->cursor_open(in, &cursor) : sf_fail(-ENOMEM, "out of memory");
    if (!rc)
        XXH3_64bits_reset(st);
    /* In plan order, so a streaming input (a compressed tar) reads forward. */
    for (uint64_t i = 0; i < plan->shard_count && !rc; i++) {
        uint64_t r = plan->shards[i].first;
        for (uint32_t f = 0; f < nf && !rc; f++) {
            uint64_t len = in->sizes[r * nf + f];
            if (len > cap) {
                uint8_t *n = realloc(buf, len);
                if (!n) {
                    rc = sf_fail(-ENOMEM, "out of memory for a %llu-byte value", (unsigned long long)len);
                    break;
                }
                buf = n;
                cap = len;
            }
            if ((rc = pack_read_value(images, cursor, in, r, f, buf)))
                break;
            hash_u64(st, len);
            XXH3_64bits_update(st, buf, len);
        }
    }
    if (!rc)
        *out = XXH3_64bits_digest(st);
    if (cursor)
        in->ops->cursor_close(cursor);
    XXH3_freeState(st);
    free(buf);
    return rc;
}

int pack_plan_slice(pack_plan *plan, uint64_t first, uint64_t count, uint64_t part_id)
{
    if (first + count > plan->shard_count || count == 0)
        return sf_fail(SF_E_INVALID, "empty part");
    memmove(plan->shards, plan->shards + first, count * sizeof *plan->shards);
    plan->shard_count = count;
    plan->record_base = plan->shards[0].first;
    plan->dataset_id = part_id;
    return 0;
}

void pack_plan_free(pack_plan *plan)
{
    if (!plan)
        return;
    free(plan->shards);
    plan->shards = NULL;
}
