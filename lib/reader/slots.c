/* A slot's arrays and where each sample of its batch goes: the batch's
 * field descriptors, ids and offsets made at open, and per sample the reads
 * of its payload fields (file range -> place in the slot) and its inline
 * values. Which batch a slot holds, and when, is schedule.c's. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "le.h"
#include "reader_internal.h"

/* The most samples one batch holds: batch_size, except when the only batch
 * is the short last one (a dataset smaller than a global batch: the sampler
 * cuts it to ceil(n / world_size) samples instead of padding it to
 * batch_size). */
uint32_t reader_batch_cap(const sf_reader *r)
{
    uint64_t per_epoch = reader_sampler_samples_per_epoch(r->sampler);
    if (r->num_batches > 1 || per_epoch >= r->opts.batch_size)
        return r->opts.batch_size;
    return per_epoch ? (uint32_t)per_epoch : 1;
}

/* The batch_cap + 1 offsets of variable-length field f in slot s. */
uint64_t *reader_slot_var_off(const sf_reader *r, const reader_slot *s, uint32_t f)
{
    return s->var_off + (size_t)r->schema->var_slot[f] * (r->batch_cap + 1);
}

/* Bytes the value of payload field f of sample `id` (index entry e) takes
 * in a slot: its stored length, or for a compressed value its decompressed
 * length (staged.c), or for an image field its pixels (transform.c). */
uint64_t reader_slot_value_len(const sf_reader *r, uint32_t f, uint64_t id,
                               const sf_index_entry *e)
{
    const sf_field *fd = &r->schema->fields[f];
    if (fd->storage == SF_STORAGE_FIXED)
        return fd->item_size;
    if (reader_image_field(r, f))
        return reader_image_item_size(r, f);
    if (fd->codec != SF_CODEC_NONE)
        return r->zlen[id * r->n_zvar + (uint32_t)r->zvar_slot[f]];
    return e->var_len[r->schema->var_slot[f]];
}

int reader_slots_init(sf_reader *r)
{
    const sf_schema *sc = r->schema;
    uint32_t K = r->opts.prefetch, B = r->batch_cap;
    uint32_t np = sc->n_payload ? sc->n_payload : 1;
    r->slots = calloc(K, sizeof *r->slots);
    if (!r->slots)
        return sf_fail(-ENOMEM, "out of memory");
    for (uint32_t i = 0; i < K; i++) {
        reader_slot *s = &r->slots[i];
        s->index = i;
        s->base = r->slab + (uint64_t)i * r->layout.slot_bytes;
        s->fields = calloc(sc->field_count, sizeof *s->fields);
        s->ids = calloc(B, sizeof *s->ids);
        s->source_ids = calloc(B, sizeof *s->source_ids);
        s->var_off = sc->n_var ? calloc((size_t)sc->n_var * (B + 1), sizeof *s->var_off) : NULL;
        s->tasks = calloc(B, sizeof *s->tasks);
        s->reads = calloc((size_t)B * np, sizeof *s->reads);
        if (!s->fields || !s->ids || !s->source_ids || (sc->n_var && !s->var_off) || !s->tasks ||
            !s->reads)
            return sf_fail(-ENOMEM, "out of memory");
        for (uint32_t f = 0; f < sc->field_count; f++) {
            const sf_field *fd = &sc->fields[f];
            sf_batch_field *bf = &s->fields[f];
            bf->name = fd->name;
            bf->dtype = fd->dtype;
            bf->storage = fd->storage;
            bf->elem_size = sf_dtype_size(fd->dtype);
            bf->ndim = fd->ndim;
            memcpy(bf->shape, fd->shape, sizeof bf->shape);
            bf->item_size = fd->storage == SF_STORAGE_VARIABLE ? 0 : fd->item_size;
            bf->data = s->base + r->layout.field_off[f];
            if (fd->storage == SF_STORAGE_VARIABLE)
                bf->offsets = reader_slot_var_off(r, s, f);
            reader_image_batch_field(r, f, bf); /* an image field: fixed uint8 pixels */
        }
        s->batch.num_fields = sc->field_count;
        s->batch.fields = s->fields;
        s->batch.ids = s->ids;
        s->batch.source_ids = s->source_ids;
        for (uint32_t j = 0; j < B; j++) {
            s->tasks[j].slot = s;
            s->tasks[j].pos = j;
            s->tasks[j].fd = -1;
            s->tasks[j].nreads = sc->n_payload;
            s->tasks[j].reads = s->reads + (size_t)j * np;
        }
    }
    return 0;
}

void reader_slots_free(sf_reader *r)
{
    for (uint32_t i = 0; r->slots && i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        free(s->fields);
        free(s->ids);
        free(s->source_ids);
        free(s->var_off);
        free(s->tasks);
        free(s->reads);
    }
    free(r->slots);
    r->slots = NULL;
}

/* Points task `t` at record `local` of `shard` (sample `id`), nothing read. */
static void task_reset(reader_task *t, uint64_t id, uint64_t shard,
                       uint64_t local, uint64_t offset, uint64_t checksum)
{
    t->id = id;
    t->shard = shard;
    t->local = local;
    t->offset = offset;
    t->checksum = checksum;
    assert(t->fd < 0 && "a task placed again with its shard open");
    t->file_idx = (uint32_t)shard;
    t->err = 0;
    t->corrupt = 0;
    t->hashed = 0;
    t->next_read = 0;
    t->inflight = 0;
}

/* place_sample for schemas without variable-length fields, the common case
 * and the hot path for small samples: it runs once per sample (in the I/O
 * thread that claimed it), so it reads the three things it needs straight
 * from the index bytes (validated at open) instead of decoding whole entries. */
static void place_fixed_sample(sf_reader *r, reader_slot *s, reader_task *t, uint32_t pos,
                               uint64_t id, uint64_t shard, uint64_t local)
{
    const sf_schema *sc = r->schema;
    const uint8_t *ent = r->ds->shards[shard].meta.index + local * sc->entry_size;
    const uint8_t *inl = ent + SF_INDEX_ENTRY_BASE; /* no variable-length slots before them */
    task_reset(t, id, shard, local, sf_get_le64(ent), sf_get_le64(ent + 16));
    uint64_t field_start = 0;
    uint32_t k = 0;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        const sf_field *fd = &sc->fields[f];
        uint8_t *dst = s->base + r->layout.field_off[f] + pos * fd->item_size;
        if (fd->storage == SF_STORAGE_INLINE) {
            memcpy(dst, inl + 8 * (uint32_t)sc->inline_slot[f], fd->item_size);
            continue;
        }
        /* The record layout of SPEC.md: each payload field aligned. */
        if (k)
            field_start = sf_align_up(field_start, r->ds->manifest.align);
        t->reads[k++] =
            (reader_read){t->offset + field_start, fd->item_size, 0, dst, fd->item_size};
        field_start += fd->item_size;
    }
}

/* Points position `pos` of slot `s` at sample `id`: the reads of its payload
 * fields (file range -> place in the slot) and its inline values (copied now,
 * from the index). With `repack`, the position already holds a sample and the
 * variable-length fields' packed bytes after it are moved to fit the new
 * lengths (corrupt-sample substitution, after the whole batch was read). */
void reader_place_sample(sf_reader *r, reader_slot *s, uint32_t pos, uint64_t id, int repack)
{
    const sf_schema *sc = r->schema;
    reader_task *t = &s->tasks[pos];
    uint64_t local, shard = sf_dataset_locate(r->ds, id, &local);
    if (sc->n_var == 0) {
        place_fixed_sample(r, s, t, pos, id, shard, local);
        return;
    }
    sf_index_entry e;
    sf_dataset_entry(&e, r->ds, shard, local);
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], record_size;
    /* Cannot fail: every entry passed sf_index_check at open. */
    (void)sf_record_layout(sc, r->ds->manifest.align, e.var_len, off, len, &record_size);
    task_reset(t, id, shard, local, e.offset, e.checksum);
    uint32_t k = 0;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        const sf_field *fd = &sc->fields[f];
        uint8_t *arr = s->base + r->layout.field_off[f];
        if (fd->storage == SF_STORAGE_INLINE) {
            memcpy(arr + pos * fd->item_size, e.inline_val[sc->inline_slot[f]], fd->item_size);
            continue;
        }
        uint64_t out = reader_slot_value_len(r, f, id, &e);
        uint8_t *dst;
        if (fd->storage == SF_STORAGE_FIXED || reader_image_field(r, f)) {
            dst = arr + pos * out; /* out: the item size (an image field's pixels) */
        } else {
            uint64_t *vo = reader_slot_var_off(r, s, f);
            if (repack) {
                uint64_t old = vo[pos + 1] - vo[pos];
                if (out != old) {
                    uint64_t end = vo[s->batch.size];
                    memmove(arr + vo[pos] + out, arr + vo[pos + 1], end - vo[pos + 1]);
                    for (uint32_t j = pos + 1; j <= s->batch.size; j++)
                        vo[j] = vo[j] - old + out;
                }
            } else {
                vo[pos + 1] = vo[pos] + out;
            }
            /* reader_slab_layout's bound: a batch of distinct samples fits, and
             * substitute() refuses a repeat that would not. */
            assert(vo[repack ? s->batch.size : pos + 1] <= r->layout.field_cap[f]);
            dst = arr + vo[pos];
        }
        t->reads[k] = (reader_read){e.offset + off[k], len[k], 0, dst, out};
        k++;
    }
}

void reader_set_field_bytes(sf_reader *r, reader_slot *s)
{
    const sf_schema *sc = r->schema;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        sf_batch_field *bf = &s->fields[f];
        bf->bytes = bf->offsets ? bf->offsets[s->batch.size] : s->batch.size * bf->item_size;
    }
}

/* Index entries of a claim looked up ahead of their placement: a shuffled
 * batch's entries are scattered over the index, each a cache miss. */
#define PLACE_AHEAD 8u

/* Finds claimed task t's sample and asks for its index entry. */
static void locate_claimed(const sf_reader *r, reader_task *t)
{
    t->id = t->slot->ids[t->pos];
    t->shard = sf_dataset_locate(r->ds, t->id, &t->local);
    __builtin_prefetch(r->ds->shards[t->shard].meta.index + t->local * r->schema->entry_size);
}

/* Places claimed tasks of a schema without variable-length fields (see
 * prepare_slot): the samples their slots' batches have at their positions. */
void reader_place_claimed(sf_reader *r, reader_task **tasks, unsigned n)
{
    for (unsigned i = 0; i < n && i < PLACE_AHEAD; i++)
        locate_claimed(r, tasks[i]);
    for (unsigned i = 0; i < n; i++) {
        if (i + PLACE_AHEAD < n)
            locate_claimed(r, tasks[i + PLACE_AHEAD]);
        reader_task *t = tasks[i];
        place_fixed_sample(r, t->slot, t, t->pos, t->id, t->shard, t->local);
    }
}
