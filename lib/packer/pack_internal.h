/* Internal interfaces of the packer: the shard plan, the output directory,
 * compression, the shard writer, merge. The inputs it packs are the inputs
 * layer's (input.h). */
#ifndef SF_PACKER_INTERNAL_H
#define SF_PACKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "format.h"
#include "input.h"
#include "metadata.h"
#include "io.h"
#include "path.h"
#include "shardfeed/pack.h"

/* For a failure `rc` of pack or merge that ran out of file descriptors
 * somewhere without saying so (an error passed up from format/ or
 * libarchive): adds which limit to raise to sf_last_error(). Returns rc. */
int pack_explain_fd_limit(int rc);

/* The first failure among a pool of worker threads (pack's writers, the
 * image pre-pass): its code and message, copied because sf_last_error is per
 * thread. pack_note_failure keeps only the first under `lock` and sets
 * `abort`, which every worker checks between values. */
typedef struct pack_failure {
    int error;
    char message[1024];
} pack_failure;
void pack_note_failure(pack_failure *f, pthread_mutex_t *lock, atomic_int *abort, int rc);
/* After the workers are joined: 0 when none failed, else the first failure
 * again as this thread's error. */
int pack_failure_raise(const pack_failure *f);
/* Waits under `lock` until *running is 0 (each worker decrements it under
 * `lock` and signals `finished` as it ends), calling tick(arg) (may be
 * NULL) about five times a second meanwhile, without the lock held. */
void pack_wait_workers(pthread_mutex_t *lock, pthread_cond_t *finished, const int *running,
                       void (*tick)(void *), void *arg);

/* Images re-encoded at pack time (lib/packer/pack_images.c: why a
 * pre-pass, and what it costs). */
typedef struct pack_images {
    uint32_t max_side;  /* 0: off, values stored as the input has them */
    uint32_t quality;
    uint8_t is_image[SF_MAX_FIELDS];
    int spool_fd;       /* the re-encoded images; -1: none */
    uint64_t *spooled;  /* [sample * field_count + field]: offset in the spool + 1; 0: the input's value */
    uint64_t reencoded; /* images re-encoded */
} pack_images;

/* With max_side 0, only initialises *im (off). Else decodes every image of
 * the input's image fields on `jobs` threads, re-encodes those larger than
 * max_side into a spool in spool_dir (the locked output folder), and sets
 * in->sizes to the sizes stored. A value that does not decode fails, naming
 * its file. `progress`
 * (may be NULL) is called from this thread while the others decode. Needs
 * pack_images_free, also after a failure. */
int pack_images_prepare(pack_images *im, input_set *in, uint32_t max_side, uint32_t quality, unsigned jobs,
                        const char *spool_dir, sf_pack_progress_fn progress, void *progress_ctx);
void pack_images_free(pack_images *im);
/* The value pack stores for (sample, field), in->sizes[...] bytes into dst:
 * the re-encoded image, or the input's value (in->ops->read through the
 * caller's cursor). im NULL: the input's. */
int pack_read_value(const pack_images *im, void *cursor, const input_set *in, uint64_t sample, uint32_t field,
                    uint8_t *dst);

/* The manifest metadata pack writes (SPEC.md "Metadata", metadata.h):
 * "source", "class_names" when the input has classes, "part" and
 * "part_input" for one part of a --part run (part NULL or count 0: none),
 * "image_reencode" when images were re-encoded (images NULL or off: none).
 * Returns a malloc'd buffer. */
int pack_metadata_encode(uint8_t **out, uint32_t *size, const input_set *in, const sf_part_info *part,
                         const pack_images *images);

/* Where each shard's records go, decided before anything is written. */
typedef struct pack_shard_plan {
    uint64_t first, count; /* records [first, first + count) of the input */
    uint64_t index_size;   /* entries + keys */
} pack_shard_plan;

typedef struct pack_plan {
    uint32_t align;
    uint64_t shard_size;
    uint64_t dataset_id;
    uint64_t shard_count;
    pack_shard_plan *shards;
    uint64_t record_base;      /* input sample of the dataset's record 0 (a part's first) */
    int levels[SF_MAX_FIELDS]; /* zstd level of each compressed field */
} pack_plan;

/* Cuts the samples into shards of at most shard_size bytes each, counting
 * values uncompressed (so the cut does not depend on compression). The
 * image options (when on) are part of the dataset_id. */
int pack_make_plan(pack_plan *plan, const input_set *in, uint32_t align, uint64_t shard_size,
                   const int *levels, const pack_images *images);
/* XXH3-64 of the values of the first record of every shard of the plan,
 * as stored (pack_read_value): a sample of the content (the plan itself
 * only knows names and sizes) that every part of a --part run reads alike. */
int pack_plan_values_hash(uint64_t *out, const pack_plan *plan, const input_set *in, const pack_images *images);
/* Keeps shards [first, first + count) of a plan, renumbered from 0, for
 * one part of a --part run; sets the part's dataset_id. */
int pack_plan_slice(pack_plan *plan, uint64_t first, uint64_t count, uint64_t part_id);
void pack_plan_free(pack_plan *plan);

/* Output directory (lib/packer/outdir.c). */

/* The output directory's lock: OUT/.shardfeed.lock, flock'ed by the pack or
 * merge writing OUT for its whole run (the kernel releases it when the
 * process dies), holding "shardfeed lock: <what> pid N on HOST". */
#define PACK_LOCK_NAME ".shardfeed.lock"
typedef struct pack_lock {
    int fd;          /* -1: not held */
    int created_dir; /* this run made OUT */
    char dir[SF_PATH_CAP];
    char path[SF_PATH_CAP];
} pack_lock;
/* The longest name pack or merge gives a file in OUT: a shard's temporary
 * (pack_temp_path) with SF_MAX_SHARDS' seven digits. */
#define PACK_NAME_MAX (sizeof ".shard-1048575.sfs.0123456789abcdef.tmp" - 1)
/* Creates OUT (and its parents) when missing and locks it. An OUT whose path
 * leaves no room for "/" and PACK_NAME_MAX bytes in SF_PATH_CAP is refused
 * first, -ENAMETOOLONG naming it: so no path pack or merge makes in OUT is
 * ever cut short (pack_out_path). A URL is
 * SF_E_INVALID (the library's pack and merge write folders only). Fails with
 * -EBUSY, naming the holder, when another pack or merge holds it. `what`
 * ("pack", "merge") is what the holder's message will say. */
int pack_outdir_lock(pack_lock *l, const char *out, const char *what);
/* Removes the lock file and releases the lock; removes OUT too when this
 * run made it and it is empty (a run that failed before writing). */
void pack_outdir_unlock(pack_lock *l);

/* What pack_outdir_prepare found. */
typedef enum pack_outdir_state {
    PACK_OUT_WRITE,    /* write the dataset; reuse[i]: shard i of this dataset_id is there */
    PACK_OUT_COMPLETE, /* a manifest of this dataset_id is there: prove, change nothing */
    PACK_OUT_REPLACE   /* --force over a dataset: write every shard under its temporary
                        * name, leave the old one whole, then pack_outdir_install */
} pack_outdir_state;

/* Looks at everything in the locked OUT before anything is changed. Files
 * shardfeed did not write (anything but the lock, a manifest or shard that
 * decodes, or a temporary named with a dataset_id) are refused even with
 * `force` and never removed; a different dataset_id's files are refused
 * without `force`. With `force`, over a manifest or shards (of any id),
 * *state is PACK_OUT_REPLACE and only temporaries are removed: the dataset
 * there stays whole until pack_outdir_install. Else, unless *state is
 * PACK_OUT_COMPLETE, removes the manifest, this dataset's temporaries and
 * what cannot be kept. `reuse[i]` is set for shard i when a final-named
 * shard of the same dataset_id is there (kept only if the writer proves
 * it, pack_write_shard); never with `force`. */
int pack_outdir_prepare(const char *out, const pack_plan *plan, int force, uint8_t *reuse,
                        pack_outdir_state *state);
/* Every shard of `plan` and its manifest are written, fsync'd, under their
 * temporary names: gives them their names, the manifest last. With
 * `replace` (PACK_OUT_REPLACE) it first removes the old manifest and then
 * the old shards past the plan. Renames and unlinks only, so it needs no
 * room on the disk; a failure part way drops the temporaries and says the
 * folder holds no dataset. */
int pack_outdir_install(const char *out, const pack_plan *plan, int replace);
/* Removes the temporaries of `plan`'s shards and manifest (a failed run's). */
void pack_outdir_drop_temps(const char *out, const pack_plan *plan);
/* A run that failed with rc after pack_outdir_prepare: drops its shards'
 * temporaries and returns rc, its message saying, when it was replacing a
 * dataset, that the dataset there is as it was. */
int pack_outdir_abandon(int rc, const char *out, const pack_plan *plan, pack_outdir_state state);
/* OUT/NAME into buf (SF_PATH_CAP bytes), for the OUT pack_outdir_lock took
 * and a NAME of at most PACK_NAME_MAX bytes: that lock refused an OUT too
 * long for it, so this cannot fail (asserted; were it to, buf would be "",
 * which names no file, never a path cut short, which names another). */
void pack_out_path(char *buf, size_t cap, const char *out, const char *name);
/* DIR/.NAME.<dataset_id as 16 hex digits>.tmp: the temporary name of NAME,
 * carrying the run's identity so that only its own run removes it. DIR is
 * the locked OUT (pack_out_path). */
void pack_temp_path(char *buf, size_t cap, const char *dir, const char *name, uint64_t dataset_id);
/* Writes `len` bytes to DIR/NAME's temporary name and fsyncs it (removed
 * again on failure). */
int pack_write_temp(const char *dir, const char *name, uint64_t dataset_id, const uint8_t *buf, uint64_t len);
/* pack_write_temp, then renames it to DIR/NAME and fsyncs the directory. */
int pack_write_atomic(const char *dir, const char *name, uint64_t dataset_id, const uint8_t *buf,
                      uint64_t len);

/* Compression (lib/packer/compress.c). */
/* Parses "FIELD=zstd[:LEVEL],..." and sets the codec of those fields of a
 * finished schema (re-finishing it); levels[f] gets each field's level.
 * Errors name the field. */
int pack_compress_parse(sf_schema *schema, int *levels, const char *spec);
/* Bytes a compressed value of len bytes may need. */
uint64_t pack_compress_bound(uint64_t len);
typedef struct pack_compressor pack_compressor;
int pack_compressor_new(pack_compressor **c);
void pack_compressor_free(pack_compressor *c);
/* One zstd frame (with its content size) of src into dst (cap bytes). */
int pack_compress(pack_compressor *c, int level, uint8_t *dst, uint64_t cap, const uint8_t *src,
                  uint64_t len, uint64_t *out_len);

/* Shard writer. */
typedef struct pack_shard_result {
    uint64_t header_checksum, index_checksum, file_size;
    int reused;
} pack_shard_result;

typedef struct pack_writer_ctx {
    const input_set *in;
    const pack_plan *plan;
    const char *out_dir;
    const pack_images *images;     /* re-encoded values */
    atomic_int *abort;             /* set by any worker on failure */
    _Atomic uint64_t *samples_done;
    _Atomic uint64_t *bytes_done;
    int keep_temporary;            /* leave each shard under its temporary name (PACK_OUT_REPLACE) */
} pack_writer_ctx;

/* What pack_write_shard does with shard i. Keeping or accepting a shard
 * that is already there takes a proof: the writer makes the shard from
 * the input exactly as it would write it, writing nothing, and the file's
 * header, index and footer must equal what it made, byte for byte, and
 * its data must scan clean against its index. */
typedef enum pack_shard_mode {
    PACK_SHARD_WRITE,         /* write it */
    PACK_SHARD_KEEP_PROVEN,   /* keep the file there if proven, else write it */
    PACK_SHARD_PROVE          /* prove the file there, write nothing: SF_E_EXISTS if not */
} pack_shard_mode;

/* Writes, keeps or proves shard `i`, reading inputs through `cursor`: the
 * calling worker's, kept across its shards so that streaming inputs
 * (compressed tars) read on, not again. */
int pack_write_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, pack_shard_mode mode,
                     pack_shard_result *res);

#endif
