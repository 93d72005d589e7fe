/* Helpers shared by the unit tests that build datasets on disk. Static, so
 * each test binary gets its own copy. */
#ifndef SF_TESTS_UNIT_HELPERS_H
#define SF_TESTS_UNIT_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "format.h"
#include "npy.h"

static inline int unit_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a scratch tree (NULL or "" ok). */
static inline void unit_rm_tree(const char *root)
{
    if (root && root[0])
        nftw(root, unit_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes a C-order little-endian .npy file exactly as numpy.save would. */
static inline void unit_write_npy(const char *path, int dtype, uint32_t ndim, const uint64_t *shape,
                                  const void *data, size_t size)
{
    uint8_t hdr[4096];
    size_t h = input_npy_write_header(hdr, sizeof hdr, dtype, ndim, shape);
    cr_assert_gt(h, 0);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(hdr, 1, h, f), h);
    cr_assert_eq(fwrite(data, 1, size, f), size);
    fclose(f);
}

static inline void unit_write_file(const char *path, const uint8_t *buf, uint64_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* Inverts the byte at `off` of shard file `shard` of dataset `dir`. */
static inline void unit_flip_shard_byte(const char *dir, unsigned shard, uint64_t off)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/" SF_SHARD_NAME_FMT, dir, shard);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    int c = fgetc(f);
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    fputc(c ^ 0xff, f);
    fclose(f);
}

/* Finishes and writes shard `si` of a dataset built with the format
 * encoders: `file` holds the records up to `index_off` (the end of the last
 * record, aligned); `index` the encoded entries and keys (index_size
 * bytes). Encodes header, index and footer into `file` (which has room) and
 * fills the manifest's descriptor. */
static inline void unit_seal_shard(const char *dir, const sf_schema *s, uint32_t align,
                                   uint64_t dataset_id, uint64_t si, uint64_t first, uint64_t count,
                                   uint8_t *file, uint64_t index_off, const uint8_t *index,
                                   uint64_t index_size, sf_shard_desc *desc)
{
    sf_shard_header h;
    memset(&h, 0, sizeof h);
    h.version_major = SF_FORMAT_MAJOR;
    h.version_minor = SF_FORMAT_MINOR;
    h.align = align;
    h.shard_index = si;
    h.record_count = count;
    h.first_record = first;
    h.data_offset = sf_data_offset(align);
    h.index_offset = index_off;
    h.index_size = index_size;
    h.index_entry_size = s->entry_size;
    h.field_count = s->field_count;
    h.schema_hash = sf_schema_hash(s);
    h.dataset_id = dataset_id;
    sf_shard_header_encode(file, &h);
    memcpy(file + index_off, index, index_size);
    sf_shard_footer ft = {index_off, index_size, count, sf_hash(index, index_size), h.checksum, 0};
    sf_shard_footer_encode(file + index_off + index_size, &ft);
    uint64_t file_size = index_off + index_size + SF_SHARD_FOOTER_SIZE;
    char path[4200];
    snprintf(path, sizeof path, "%s/" SF_SHARD_NAME_FMT, dir, (unsigned)si);
    unit_write_file(path, file, file_size);
    *desc = (sf_shard_desc){count, first, file_size, h.checksum, ft.index_checksum};
}

/* The image samples of the device tests: in directory `dir` (made here),
 * img_{i}.npy float32 (3, 32, 32) holding i * 1000 + j at position j and
 * label_{i}.npy int64 holding i * 5, for i < samples. */
#define UNIT_IMG_FLOATS (3 * 32 * 32)
static inline void unit_write_image_samples(const char *dir, int samples)
{
    cr_assert_eq(mkdir(dir, 0755), 0, "%s: %s", dir, strerror(errno));
    static float img[UNIT_IMG_FLOATS];
    uint64_t shape[3] = {3, 32, 32};
    char path[4200];
    for (int i = 0; i < samples; i++) {
        for (int j = 0; j < UNIT_IMG_FLOATS; j++)
            img[j] = (float)(i * 1000 + j);
        int64_t label = i * 5;
        cr_assert_lt(snprintf(path, sizeof path, "%s/img_%d.npy", dir, i), (int)sizeof path);
        unit_write_npy(path, SF_DTYPE_FLOAT32, 3, shape, img, sizeof img);
        cr_assert_lt(snprintf(path, sizeof path, "%s/label_%d.npy", dir, i), (int)sizeof path);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
}

/* A suite's scratch directory g_root, made by scratch_init (the suite's
 * .init) under the current directory and removed by scratch_fini. */
#define UNIT_SCRATCH(prefix)                                                      \
    static char g_root[4096];                                                     \
    static void scratch_fini(void)                                                \
    {                                                                             \
        if (g_root[0])                                                            \
            unit_rm_tree(g_root);                                                 \
    }                                                                             \
    static void scratch_init(void)                                                \
    {                                                                             \
        snprintf(g_root, sizeof g_root, "%s-XXXXXX", prefix);                     \
        cr_assert_not_null(mkdtemp(g_root), "mkdtemp: %s", strerror(errno));      \
    }

#endif
