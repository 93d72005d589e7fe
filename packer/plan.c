/* The shard plan: which records go into which shard and how large every
 * file will be, decided before anything is written. It depends only on the
 * inputs' names, sizes and schema and on the options, never on timing or
 * on the number of threads, which makes output byte-identical for any -j. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "format/hash.h"

#include "format/error_internal.h"
#include "format/le.h"
#include "pack_internal.h"

/* dataset_id: XXH3-64 over what determines the output, so a re-run of the
 * same command recognises its own shards and a different input does not. */
static uint64_t dataset_id(const pack_input *in, uint32_t align, uint64_t shard_size)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    static const char tag[] = "shardfeed pack npy v1";
    uint8_t schema[SF_MAX_FIELDS * SF_FIELD_DESC_SIZE], num[8];
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, tag, sizeof tag);
    sf_schema_encode(schema, &in->schema);
    XXH3_64bits_update(st, schema, (size_t)in->schema.field_count * SF_FIELD_DESC_SIZE);
    sf_put_le64(num, align);
    XXH3_64bits_update(st, num, 8);
    sf_put_le64(num, shard_size);
    XXH3_64bits_update(st, num, 8);
    sf_put_le64(num, in->sample_count);
    XXH3_64bits_update(st, num, 8);
    for (uint64_t s = 0; s < in->sample_count; s++) {
        XXH3_64bits_update(st, in->keys[s], strlen(in->keys[s]) + 1);
        for (uint32_t f = 0; f < in->field_count; f++) {
            sf_put_le64(num, in->file_sizes[s * in->field_count + f]);
            XXH3_64bits_update(st, num, 8);
        }
    }
    uint64_t id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return id;
}

int pack_make_plan(pack_plan *plan, const pack_input *in, uint32_t align, uint64_t shard_size)
{
    memset(plan, 0, sizeof *plan);
    if (!sf_valid_align(align))
        return sf_fail(SF_E_INVALID, "alignment %u is not a power of two between 1 and %u", align,
                       SF_MAX_ALIGN);
    if (in->sample_count > SF_MAX_RECORDS)
        return sf_fail(SF_E_LIMIT, "%llu samples (limit %llu)", (unsigned long long)in->sample_count,
                       (unsigned long long)SF_MAX_RECORDS);
    const sf_schema *s = &in->schema;
    uint64_t off[SF_MAX_FIELDS], size[SF_MAX_FIELDS];
    int rc = sf_record_layout(s, align, NULL, off, size, &plan->record_size);
    if (rc)
        return rc;
    plan->align = align;
    plan->shard_size = shard_size;
    plan->dataset_id = dataset_id(in, align, shard_size);
    if (plan->dataset_id == 0)
        return sf_fail(-ENOMEM, "out of memory");

    /* Greedy: add records while the file stays within shard_size; a shard
     * always takes at least one record. */
    uint64_t stride = sf_align_up(plan->record_size, align);
    uint64_t fixed = sf_data_offset(align) + SF_SHARD_FOOTER_SIZE;
    uint64_t cap = 16;
    plan->shards = malloc(cap * sizeof *plan->shards);
    if (!plan->shards)
        return sf_fail(-ENOMEM, "out of memory");
    uint64_t r = 0;
    while (r < in->sample_count) {
        pack_shard_plan sp = {.first = r};
        uint64_t keys = 0;
        while (r < in->sample_count && sp.count < SF_MAX_RECORDS_PER_SHARD) {
            uint64_t klen = strlen(in->keys[r]);
            uint64_t index = (sp.count + 1) * s->entry_size + keys + klen;
            uint64_t total = fixed + (sp.count + 1) * stride + index;
            if (sp.count > 0 && (total > shard_size || index > SF_MAX_INDEX_BYTES ||
                                 total > SF_MAX_SHARD_BYTES))
                break;
            keys += klen;
            sp.count++;
            r++;
        }
        sp.index_offset = sf_data_offset(align) + sp.count * stride;
        sp.index_size = sp.count * s->entry_size + keys;
        sp.file_size = sp.index_offset + sp.index_size + SF_SHARD_FOOTER_SIZE;
        if (plan->shard_count == SF_MAX_SHARDS)
            return sf_fail(SF_E_LIMIT, "more than %u shards: raise --shard-size", SF_MAX_SHARDS);
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

void pack_plan_free(pack_plan *plan)
{
    if (!plan)
        return;
    free(plan->shards);
    plan->shards = NULL;
}
