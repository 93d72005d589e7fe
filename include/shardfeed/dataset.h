/* shardfeed — opening a dataset, inspecting it, random access through a
 * read-only memory map, verifying and exporting it. */
#ifndef SHARDFEED_DATASET_H
#define SHARDFEED_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "shardfeed/error.h"
#include "shardfeed/remote.h"
#include "shardfeed/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sf_dataset sf_dataset;

/* Opens the dataset in `dir`: reads and validates the manifest, every shard
 * header, footer and index (SPEC.md "Reader rules"). Record payloads are not
 * read or hashed here (see sf_verify and the reader's checksum option). */
SF_API int sf_dataset_open(sf_dataset **out, const char *dir);
/* sf_dataset_open of a folder or a URL (shardfeed/remote.h), with the
 * options of a dataset at a URL (NULL: the defaults; for a folder they are
 * checked, SF_E_INVALID as at a URL, and otherwise unused). */
SF_API int sf_dataset_open_ex(sf_dataset **out, const char *path, const sf_remote_opts *remote);
SF_API void sf_dataset_close(sf_dataset *ds); /* NULL ok */

typedef struct sf_field_info {
    const char *name;
    sf_dtype dtype;
    const char *dtype_name; /* sf_dtype_name(dtype): "float32", "int64", ... */
    const char *npy_descr;  /* sf_dtype_npy_descr(dtype): "<f4", "|u1", ... */
    size_t elem_size;
    uint32_t ndim;
    uint64_t shape[8];
    uint64_t item_size;   /* bytes of one value; 0 for variable length */
    sf_storage storage;
    sf_codec codec;       /* how values are stored; readers hand out decompressed values, only
                             sf_dataset_get sees stored bytes */
} sf_field_info;

SF_API uint64_t sf_dataset_num_samples(const sf_dataset *ds);
SF_API uint32_t sf_dataset_num_fields(const sf_dataset *ds);
SF_API int sf_dataset_field(sf_field_info *out, const sf_dataset *ds, uint32_t field);
SF_API uint64_t sf_dataset_num_shards(const sf_dataset *ds);
SF_API uint32_t sf_dataset_align(const sf_dataset *ds);
/* The manifest's dataset_id (SPEC.md), which every shard repeats. shardfeed's
 * packer makes it from the input format, keys, value sizes, schema, class
 * names and options: it names the dataset's plan, not its values (the same
 * inputs packed with the same options have the same id). 0 for NULL. */
SF_API uint64_t sf_dataset_id(const sf_dataset *ds);

typedef struct sf_shard_info {
    const char *name;   /* file name within the dataset directory */
    uint64_t first_sample;
    uint64_t num_samples;
    uint64_t file_size;
} sf_shard_info;

SF_API int sf_dataset_shard(sf_shard_info *out, const sf_dataset *ds, uint64_t shard);

/* The input format the dataset was packed from ("npy", "imagefolder",
 * "list", "tar"), or "" when its manifest does not say. */
SF_API const char *sf_dataset_source(const sf_dataset *ds);
/* Class names (ImageFolder datasets): label i is class i. 0 when the
 * manifest holds none. Names are UTF-8, not NUL-terminated. */
SF_API uint32_t sf_dataset_num_classes(const sf_dataset *ds);
SF_API int sf_dataset_class_name(const char **name, size_t *len, const sf_dataset *ds,
                                 uint32_t label);
/* Any metadata entry (SPEC.md "Metadata") by key: *value is NULL and *len 0
 * when it is absent. Valid until sf_dataset_close. */
SF_API int sf_dataset_metadata(const void **value, size_t *len, const sf_dataset *ds,
                               const char *key);

/* The key of a sample (not NUL-terminated). */
SF_API int sf_dataset_key(const char **key, size_t *len, const sf_dataset *ds, uint64_t sample);

/* Random access: a pointer to the stored bytes of `field` of `sample`, valid
 * until sf_dataset_close. Payload fields point into a read-only mmap of the
 * shard (mapped on first use); inline fields into the loaded index. The
 * bytes are little-endian, C order. With `check` set, the record's checksum
 * is verified first (SF_E_CHECKSUM on mismatch; SF_E_TRUNCATED, naming the
 * shard, when the file was cut short under the map). Zero-copy, so only for
 * uncompressed fields: a compressed field's stored bytes are not its value,
 * and it fails with SF_E_UNSUPPORTED (use sf_dataset_read_value).
 * Like any mmap (LMDB says the same of its pointers), touching the bytes
 * after the shard file was truncated, or rewritten in place, raises SIGBUS
 * in the caller: sf_dataset_read_value copies the value out under a guard
 * and returns an error instead. Use it where the files may change under a
 * running process. A dataset at a URL keeps every shard sf_dataset_get
 * mapped pinned in its cache until close (a map of an evicted file would
 * hold its disk space past the limit): they count against cache_limit, and
 * a shard that would take them past it fails at once with SF_E_INVALID
 * (cache_limit too small for them; not a data error).
 * sf_dataset_read_value holds a shard only as an epoch's reads do. */
SF_API int sf_dataset_get(const void **data, uint64_t *size, sf_dataset *ds, uint64_t sample,
                          uint32_t field, int check);

/* Random access for any field, compressed or not: the byte size of the
 * value of `field` of `sample` as sf_dataset_read_value writes it. For a
 * compressed variable-length field it is read from the value's zstd frame
 * header and checked (SPEC.md "Compression": at most 2^30 bytes, ...), so it
 * is safe to allocate; SF_E_CORRUPT names shard, record and field otherwise
 * (SF_E_TRUNCATED when the header lies past the end of a shard cut short). */
SF_API int sf_dataset_value_size(uint64_t *size, sf_dataset *ds, uint64_t sample, uint32_t field);

/* Copies the value of `field` of `sample` into dst[0..cap), decompressing a
 * compressed field, and sets *size to the value's byte size. When cap is too
 * small nothing is written and SF_E_INVALID is returned with *size set (dst
 * may be NULL with cap 0 to ask). With `check`, the record checksum (over the
 * stored bytes) is verified first. A value that does not decompress as
 * SPEC.md requires gives SF_E_CORRUPT naming shard, record and field.
 * A shard cut short since it was opened gives SF_E_TRUNCATED naming it (the
 * bytes are read from the map under a SIGBUS guard, never a signal; -EIO
 * for a page that could not be read). Unchecked, the part of a value in the
 * file's last, partial page past its new end reads as zeros (mmap's rule):
 * `check` finds that. Thread-safe for one dataset; the value belongs to the
 * caller. */
SF_API int sf_dataset_read_value(void *dst, uint64_t cap, uint64_t *size, sf_dataset *ds,
                                 uint64_t sample, uint32_t field, int check);

/* ---- verify ---- */
typedef struct sf_verify_problem {
    int code;          /* sf_error code */
    const char *file;  /* file name within the dataset directory */
    int64_t shard;     /* -1 for the manifest or a stray file */
    int64_t record;    /* record within the shard, -1 if none */
    uint64_t offset;   /* byte offset in `file` */
    const char *message;
} sf_verify_problem;

typedef void (*sf_verify_fn)(void *ctx, const sf_verify_problem *p);

typedef struct sf_verify_summary {
    uint64_t shards, records, bytes;
    uint64_t problems;
    double seconds;
} sf_verify_summary;

/* Checks everything SPEC.md defines: the manifest, each shard's header,
 * index, footer, every record checksum and padding byte, counts and sizes,
 * no shard missing and no stray shard file, keys distinct across the
 * dataset, bool values 0 or 1. Calls `cb` (may be NULL) for every problem
 * (its code one sf_is_data_error accepts), from one thread at a time.
 * Returns 0 when the dataset is intact, SF_E_CORRUPT when a problem was
 * found, or another negative code when verification itself could not run
 * (-ENOENT for a folder without a manifest: not a dataset).
 * `jobs` shards are read in parallel (0: one per CPU). */
SF_API int sf_verify(sf_verify_summary *summary, const char *dir, unsigned jobs, sf_verify_fn cb,
                     void *ctx);

/* Options of sf_verify_ex; every member's zero value means its default. */
#define SF_VERIFY_OPTS_VERSION 1
typedef struct sf_verify_opts {
    unsigned version; /* SF_VERIFY_OPTS_VERSION */
    unsigned jobs;    /* shards read in parallel; 0: one per CPU */
    int decompress;   /* nonzero: also decompress every compressed value (of each record
                         whose checksum holds) and check it as SPEC.md "Compression" says;
                         by default only the stored bytes are hashed */
} sf_verify_opts;
#define SF_VERIFY_OPTS_INIT {SF_VERIFY_OPTS_VERSION, 0, 0}

/* sf_verify with options (NULL: defaults). A compressed value that does not
 * decompress is a problem with code SF_E_CORRUPT, its shard, record, the
 * byte offset of the value, and a message naming the field. */
SF_API int sf_verify_ex(sf_verify_summary *summary, const char *dir, const sf_verify_opts *opts,
                        sf_verify_fn cb, void *ctx);

/* ---- export ---- */
/* Writes every sample back in the layout of the input it was packed from
 * (sf_dataset_source) into out_dir, which must be new (it is created) or an
 * empty folder (else SF_E_EXISTS):
 *   imagefolder  out_dir/<key>: the image file, byte for byte (the key is
 *                <class>/<path>), so the tree is the one that was packed;
 *   tar          out_dir/<key>.<field> for every field: the tar's members;
 *   list         out_dir/<key>: the file's bytes, and out_dir/list.csv with
 *                path and the other columns;
 *   npy or none  as sf_export_npy.
 * Never writes outside out_dir: names come from validated fields and keys,
 * folders and files are created with O_NOFOLLOW relative to their parent.
 * Never replaces a file: every output name is planned before anything is
 * written, and two samples (or a sample and list.csv) that would write the
 * same name, or a file where a folder must go, fail with SF_E_UNSUPPORTED
 * naming both (where out_dir's file system ignores case, names that differ
 * only in ASCII case are the same); a name part longer than the file system
 * takes fails with -ENAMETOOLONG; a file is written unnamed (O_TMPFILE)
 * and named once complete by a call that fails rather than replace (linkat;
 * without O_TMPFILE, a hidden temporary renamed with RENAME_NOREPLACE), so
 * an export that fails or is killed leaves no file cut short under its
 * name. Checks record checksums and bool values. *files_written (NULL: not
 * wanted): the files written whole, also on failure. */
SF_API int sf_export(uint64_t *files_written, const char *dataset_dir, const char *out_dir);
/* Writes every sample as out_dir/{field}_{key}.npy (a key's folders become
 * folders: key "a/b" gives a/img_b.npy), C-order
 * little-endian arrays that numpy.load reads; variable-length fields as 1-d
 * arrays. */
SF_API int sf_export_npy(uint64_t *files_written, const char *dataset_dir, const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif
