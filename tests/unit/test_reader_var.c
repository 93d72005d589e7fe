/* Reader tests for variable-length fields: packed bytes + offsets per batch,
 * empty values, and corrupt-sample substitution that changes a packed
 * length. The packer does not produce variable-length fields yet, so the
 * dataset is written here with the format encoders (lib/format/format.h). */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"
#include "hash.h"
#include "le.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("reader-var-test")

TestSuite(reader_var, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

#define N 97
#define IMG 100
#define ALIGN 16
#define DATASET_ID 0x5eedf00dull

static uint64_t tok_len(uint64_t i)
{
    return i * 37 % 50; /* 0 for i = 0, 50, ... */
}

static uint8_t tok_byte(uint64_t i, uint64_t j)
{
    return (uint8_t)(i + j * 3 + 11);
}

static uint8_t img_byte(uint64_t i, uint64_t j)
{
    return (uint8_t)(i * 5 + j + 1);
}

static void schema_of(sf_schema *s)
{
    memset(s, 0, sizeof *s);
    s->field_count = 3;
    sf_field *f = s->fields;
    snprintf(f[0].name, sizeof f[0].name, "tok");
    f[0].dtype = SF_DTYPE_UINT8;
    f[0].ndim = 1;
    f[0].storage = SF_STORAGE_VARIABLE;
    snprintf(f[1].name, sizeof f[1].name, "img");
    f[1].dtype = SF_DTYPE_UINT8;
    f[1].ndim = 1;
    f[1].shape[0] = IMG;
    f[1].item_size = IMG;
    f[1].storage = SF_STORAGE_FIXED;
    snprintf(f[2].name, sizeof f[2].name, "label");
    f[2].dtype = SF_DTYPE_INT64;
    f[2].ndim = 0;
    f[2].item_size = 8;
    f[2].storage = SF_STORAGE_INLINE;
    cr_assert_eq(sf_schema_finish(s), 0, "%s", sf_last_error());
}

/* Writes shard `si` holding samples [first, first + count); fills its
 * manifest descriptor. */
static void write_shard(const char *dir, const sf_schema *s, uint64_t si, uint64_t first,
                        uint64_t count, sf_shard_desc *desc)
{
    uint64_t cap = 1 << 20, pos = sf_data_offset(ALIGN);
    uint8_t *file = calloc(1, cap);
    uint8_t *index = calloc(1, cap);
    XXH3_state_t *xxh = XXH3_createState();
    cr_assert_not_null(xxh);
    char keys[4096];
    uint64_t key_pos = 0;
    for (uint64_t r = 0; r < count; r++) {
        uint64_t i = first + r;
        sf_index_entry e;
        memset(&e, 0, sizeof e);
        e.var_len[0] = tok_len(i);
        uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size;
        cr_assert_eq(sf_record_layout(s, ALIGN, e.var_len, off, len, &size), 0);
        for (uint64_t j = 0; j < len[0]; j++)
            file[pos + off[0] + j] = tok_byte(i, j);
        for (uint64_t j = 0; j < IMG; j++)
            file[pos + off[1] + j] = img_byte(i, j);
        const uint8_t *ptr[2] = {file + pos + off[0], file + pos + off[1]};
        e.checksum = sf_record_hash(xxh, ptr, len, 2);
        e.offset = pos;
        e.size = size;
        int kl = snprintf(keys + key_pos, sizeof keys - key_pos, "%llu", (unsigned long long)i);
        e.key_offset = (uint32_t)key_pos;
        e.key_length = (uint16_t)kl;
        key_pos += (uint64_t)kl;
        sf_put_le64(e.inline_val[0], (uint64_t)(i * 3 + 1));
        sf_index_entry_encode(index + r * s->entry_size, s, &e);
        pos = sf_align_up(pos + size, ALIGN);
    }
    uint64_t index_size = count * s->entry_size + key_pos;
    memcpy(index + count * s->entry_size, keys, key_pos);
    unit_seal_shard(dir, s, ALIGN, DATASET_ID, si, first, count, file, pos, index, index_size, desc);
    XXH3_freeState(xxh);
    free(file);
    free(index);
}

static void make_var_dataset(char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/var", g_root);
    cr_assert_eq(mkdir(dir, 0755), 0);
    sf_manifest m;
    memset(&m, 0, sizeof m);
    schema_of(&m.schema);
    m.version_major = SF_FORMAT_MAJOR;
    m.version_minor = SF_FORMAT_MINOR;
    m.align = ALIGN;
    m.record_count = N;
    m.dataset_id = DATASET_ID;
    m.shard_count = 2;
    sf_shard_desc desc[2];
    m.shards = desc;
    write_shard(dir, &m.schema, 0, 0, 40, &desc[0]);
    write_shard(dir, &m.schema, 1, 40, N - 40, &desc[1]);
    uint64_t size = sf_manifest_encoded_size(&m);
    uint8_t *buf = malloc(size);
    sf_manifest_encode(buf, &m);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, SF_MANIFEST_NAME);
    unit_write_file(path, buf, size);
    free(buf);
    cr_assert_eq(sf_verify(NULL, dir, 1, NULL, NULL), 0, "the hand-written dataset verifies: %s",
                 sf_last_error());
}

/* Sample ids equal key numbers here (keys written in id order). */
static void check_batch(const sf_batch *b)
{
    const sf_batch_field *tok = sf_batch_field_find(b, "tok");
    const sf_batch_field *img = sf_batch_field_find(b, "img");
    const sf_batch_field *lab = sf_batch_field_find(b, "label");
    cr_assert(tok && img && lab);
    cr_assert_eq(tok->storage, SF_STORAGE_VARIABLE);
    cr_assert_not_null(tok->offsets);
    cr_assert_null(img->offsets);
    cr_assert_eq(tok->offsets[0], 0);
    cr_assert_eq(tok->bytes, tok->offsets[b->size]);
    for (uint32_t k = 0; k < b->size; k++) {
        uint64_t i = b->source_ids[k];
        uint64_t o = tok->offsets[k], l = tok->offsets[k + 1] - o;
        cr_assert_eq(l, tok_len(i), "batch %llu pos %u id %llu: tok length %llu",
                     (unsigned long long)b->index, k, (unsigned long long)i, (unsigned long long)l);
        const uint8_t *t = (const uint8_t *)tok->data + o;
        for (uint64_t j = 0; j < l; j++)
            cr_assert_eq(t[j], tok_byte(i, j), "id %llu tok byte %llu", (unsigned long long)i,
                         (unsigned long long)j);
        const uint8_t *p = (const uint8_t *)img->data + (uint64_t)k * IMG;
        for (uint64_t j = 0; j < IMG; j++)
            cr_assert_eq(p[j], img_byte(i, j), "id %llu img byte %llu", (unsigned long long)i,
                         (unsigned long long)j);
        int64_t label;
        memcpy(&label, (const uint8_t *)lab->data + k * 8, 8);
        cr_assert_eq(label, (int64_t)(i * 3 + 1));
    }
}

Test(reader_var, packed_bytes_and_offsets_through_every_engine)
{
    char dir[4200];
    make_var_dataset(dir, sizeof dir);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t e = 0; e < 3; e++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 9;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        o.engine = engines[e];
        o.seed = 3;
        sf_reader *r;
        cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
        for (uint64_t ep = 0; ep < 2; ep++) {
            sf_reader_set_epoch(r, ep);
            const sf_batch *b;
            uint64_t seen = 0;
            int rc;
            while ((rc = sf_reader_next(&b, r)) == 0 && b) {
                check_batch(b);
                seen += b->size;
                sf_reader_release(r, b);
            }
            cr_assert_eq(rc, 0, "%s", sf_last_error());
            cr_assert_eq(seen, N);
        }
        sf_reader_close(r);
    }
}

/* Offset of sample i's first payload byte in shard 0 (i < 40). */
static uint64_t record_offset(uint64_t i)
{
    sf_schema s;
    schema_of(&s);
    uint64_t pos = sf_data_offset(ALIGN);
    for (uint64_t k = 0; k < i; k++) {
        uint64_t vl[SF_MAX_FIELDS] = {tok_len(k)}, off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size;
        sf_record_layout(&s, ALIGN, vl, off, len, &size);
        pos = sf_align_up(pos + size, ALIGN);
    }
    return pos;
}

Test(reader_var, substitution_repacks_variable_length_bytes)
{
    char dir[4200];
    make_var_dataset(dir, sizeof dir);
    /* 10 (20 tok bytes) -> 11 (7 bytes): shorter; 30 (10) -> 31 (47): longer. */
    unit_flip_shard_byte(dir, 0, record_offset(10) + 3);
    unit_flip_shard_byte(dir, 0, record_offset(30) + 1);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t e = 0; e < 3; e++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 16;
        o.engine = engines[e];
        o.on_corrupt = SF_ON_CORRUPT_SKIP;
        sf_reader *r;
        cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
        const sf_batch *b;
        int rc;
        uint64_t subst = 0;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            check_batch(b);
            for (uint32_t k = 0; k < b->size; k++) {
                if (b->ids[k] == 10 || b->ids[k] == 30) {
                    cr_assert_eq(b->source_ids[k], b->ids[k] + 1);
                    subst++;
                } else {
                    cr_assert_eq(b->source_ids[k], b->ids[k]);
                }
            }
            sf_reader_release(r, b);
        }
        cr_assert_eq(rc, 0, "%s", sf_last_error());
        cr_assert_eq(subst, 2);
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_eq(st.corrupt_substitutions, 2);
        sf_reader_close(r);
    }
}
