/* Internal interfaces of the packer: input discovery, the shard plan, the
 * output directory, the shard writer. */
#ifndef SF_PACKER_INTERNAL_H
#define SF_PACKER_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "format/format.h"

/* One sample's input files, found by input discovery. */
typedef struct pack_input {
    const char *dir;
    uint32_t field_count;            /* equal to schema.field_count */
    uint64_t sample_count;
    char **keys;                     /* [sample] */
    char **names;                    /* [sample * field_count + field]: file name in dir */
    uint64_t *file_sizes;            /* same indexing */
    sf_schema schema;                /* from the first sample, finished */
    uint64_t bytes_in;               /* array bytes of all inputs */
} pack_input;

/* Lists `dir`, groups {field}_{key}.npy files into samples in natural key
 * order, reads every .npy header and checks it against the schema taken
 * from the first sample. Errors name the file. */
int pack_input_npy_dir(pack_input *in, const char *dir);
void pack_input_free(pack_input *in);

/* Where each shard's records go and how large each file will be. */
typedef struct pack_shard_plan {
    uint64_t first, count;
    uint64_t index_offset, index_size, file_size;
} pack_shard_plan;

typedef struct pack_plan {
    uint32_t align;
    uint64_t shard_size;
    uint64_t dataset_id;
    uint64_t shard_count;
    pack_shard_plan *shards;
    uint64_t record_size; /* payload bytes of one record (fixed schema) */
} pack_plan;

int pack_make_plan(pack_plan *plan, const pack_input *in, uint32_t align, uint64_t shard_size);
void pack_plan_free(pack_plan *plan);

/* Output directory. `reuse[i]` is set for shard i when a final-named shard
 * of the same dataset_id exists and may be kept if it checks clean. */
int pack_outdir_prepare(const char *out, const pack_plan *plan, int force, uint8_t *reuse);
/* Writes `len` bytes to `path` under a temporary name, fsyncs, renames and
 * fsyncs the directory. */
int pack_write_atomic(const char *dir, const char *name, const uint8_t *buf, uint64_t len);
int pack_fsync_dir(const char *dir);
int pack_write_full(int fd, const uint8_t *buf, uint64_t len);

/* Shard writer. */
typedef struct pack_shard_result {
    uint64_t header_checksum, index_checksum;
    int reused;
} pack_shard_result;

typedef struct pack_writer_ctx {
    const pack_input *in;
    const pack_plan *plan;
    const char *out_dir;
    atomic_int *abort;            /* set by any worker on failure */
    _Atomic uint64_t *samples_done;
    _Atomic uint64_t *bytes_done;
} pack_writer_ctx;

/* Writes shard `i` (or keeps it when `try_reuse` and it checks clean). */
int pack_write_shard(const pack_writer_ctx *ctx, uint64_t i, int try_reuse, pack_shard_result *res);

#endif
