/* shardfeed — packing sample files into a dataset of shards. */
#ifndef SHARDFEED_PACK_H
#define SHARDFEED_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "shardfeed/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SF_PACK_OPTS_VERSION 3
#define SF_PACK_DEFAULT_SHARD_SIZE (256ull << 20)
#define SF_PACK_DEFAULT_ALIGN 4096u

/* Called from the packing thread about five times a second and once at the
 * end (samples_done == samples_total). */
typedef void (*sf_pack_progress_fn)(void *ctx, uint64_t samples_done, uint64_t samples_total,
                                    uint64_t bytes_done);

typedef struct sf_pack_opts {
    unsigned version;    /* SF_PACK_OPTS_VERSION */
    unsigned jobs;       /* worker threads; 0: one per online CPU */
    uint64_t shard_size; /* target shard file size in bytes; 0: 256 MiB */
    uint32_t align;      /* record alignment, a power of two <= 1 MiB; 0: 4096 */
    int force;           /* replace a shardfeed dataset in the output, once the new one is written */
    sf_pack_progress_fn progress; /* NULL: none */
    void *progress_ctx;
    /* "auto" or NULL (from the input: a directory of .npy files, of tar
     * files or of class folders; a .tar file; a .csv/.tsv/.txt list; a
     * directory holding the inputs of more than one is refused, naming
     * them), "npy", "imagefolder", "list" or "tar". */
    const char *input_format;
    /* "FIELD=zstd[:LEVEL][,FIELD=...]", or NULL: nothing compressed. */
    const char *compress;
    /* part_count > 0: write only part part_index of part_count of the
     * whole dataset, as a dataset of its own (merge them with
     * sf_pack_merge). */
    uint32_t part_index, part_count;
    /* Version 2. image_max_side > 0: every image of the input's image
     * fields (an ImageFolder's "image", a list's "data", a tar's "jpg",
     * "jpeg", "png" and "webp") is decoded, and one whose longer side
     * exceeds image_max_side is stored re-encoded: resized to fit (aspect
     * kept), an RGB JPEG of image_quality (1..100; 0: 90). Smaller images
     * are stored unchanged. A value that does not decode fails the pack,
     * naming its file. 0: values stored unchanged, nothing decoded. */
    uint32_t image_max_side;
    uint32_t image_quality;
    /* Version 3. With image_max_side, every image is decoded (and the larger
     * ones re-encoded) in a pre-pass before any shard is planned: this is
     * called for it as `progress` is for the writing (same context, about five
     * times a second, once at the end with samples_done == samples_total),
     * counting samples whose images are done and the image bytes read. NULL:
     * none. */
    sf_pack_progress_fn image_progress;
} sf_pack_opts;

#define SF_PACK_OPTS_INIT {SF_PACK_OPTS_VERSION, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0, 0, 0, 0, NULL}

typedef struct sf_pack_result {
    uint64_t samples;
    uint64_t shards;
    uint64_t shards_reused; /* finished shards kept from an interrupted run */
    uint64_t bytes_in;      /* value bytes read from the inputs */
    uint64_t bytes_out;     /* bytes of all shard files and the manifest */
    double seconds;
    uint64_t inputs_skipped; /* files not packed (ImageFolder: no image extension) */
    char skipped_example[512]; /* the first of them */
    uint32_t part_index, part_count; /* as packed; part_count 0: the whole dataset */
    /* The output already held this dataset complete, every shard proven to
     * hold this input's records: nothing was written. */
    int already_complete;
} sf_pack_result;

/* Packs INPUT (see sf_pack_opts.input_format) into OUTPUT_DIR (SPEC.md,
 * README "pack"). `result` may be NULL. On failure, sf_last_error() names
 * the file and the reason, and no manifest is written. OUTPUT_DIR is a
 * local folder: a URL (s3://, http(s)://) is SF_E_INVALID, as for
 * sf_pack_merge; pack into a folder and upload it with sf_push (what the
 * command line's `shardfeed pack -o URL` does). */
SF_API int sf_pack(sf_pack_result *result, const char *input, const char *output_dir,
                   const sf_pack_opts *opts);
/* sf_pack with input_format "npy": a directory of {field}_{key}.npy files. */
SF_API int sf_pack_npy_dir(sf_pack_result *result, const char *input_dir, const char *output_dir,
                           const sf_pack_opts *opts);

/* sf_pack_merge flags. */
#define SF_MERGE_FORCE 1u         /* replace a dataset in OUTPUT_DIR, once the merge is written */
#define SF_MERGE_IGNORE_MTIMES 2u /* parts whose inputs differ only in modification times merge */

/* Joins the parts of one --part run (their directories, in any order)
 * into OUTPUT_DIR: shards are copied and only their headers and footers
 * rewritten, so the result is byte for byte what a single pack of the
 * whole input writes. Fails, naming the part, when a part is missing,
 * repeated, from another run, or planned from another input (its
 * "part_input" and "part_files": the input files' names, sizes and
 * modification times, a list input's list file, and a sample of values;
 * the message says which differ). `flags`: SF_MERGE_*. result->bytes_in is 0. */
SF_API int sf_pack_merge(sf_pack_result *result, const char *const *parts, size_t n_parts,
                         const char *output_dir, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
