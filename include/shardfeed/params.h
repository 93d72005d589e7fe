/* shardfeed — the bounds of every numeric option, in one place (as zstd's
 * ZSTD_cParam_getBounds): the library checks its options against these,
 * and front ends (the CLI, the Python module, bindings) ask for them
 * instead of retyping limits. A zero that an options struct documents as
 * "default" is not a value here: the bounds are for values given. */
#ifndef SHARDFEED_PARAMS_H
#define SHARDFEED_PARAMS_H

#include <stdint.h>

#include "shardfeed/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The limits, as constants for C callers. */
#define SF_READER_MAX_BATCH (1u << 24)   /* sf_reader_opts.batch_size */
#define SF_READER_MAX_PREFETCH 1024u     /* sf_reader_opts.prefetch */
#define SF_READER_MAX_IO_THREADS 256u    /* sf_reader_opts.io_threads */
#define SF_READER_MAX_QUEUE_DEPTH 4096u  /* sf_reader_opts.queue_depth */
#define SF_PACK_MAX_JOBS 1024u           /* sf_pack_opts.jobs */
#define SF_PACK_MAX_ALIGN (1u << 20)     /* sf_pack_opts.align: a power of two up to this */
#define SF_PACK_MIN_SHARD_SIZE 1ull      /* sf_pack_opts.shard_size (a shard takes one record at least) */
#define SF_PACK_MAX_SHARD_SIZE (1ull << 40)
#define SF_PACK_MAX_PARTS 1000000u       /* sf_pack_opts.part_count (at least 2) */
#define SF_PACK_MIN_ZSTD_LEVEL 1         /* "FIELD=zstd:LEVEL" in sf_pack_opts.compress */
#define SF_PACK_MAX_ZSTD_LEVEL 19
#define SF_VERIFY_MAX_JOBS 1024u         /* sf_verify_opts.jobs */
#define SF_PACK_MAX_IMAGE_SIDE 65500u    /* sf_pack_opts.image_max_side (JPEG's largest side) */
#define SF_PACK_DEFAULT_IMAGE_QUALITY 90u /* sf_pack_opts.image_quality 0 */

typedef enum sf_param {
    SF_PARAM_READER_BATCH_SIZE,
    SF_PARAM_READER_PREFETCH,
    SF_PARAM_READER_IO_THREADS,
    SF_PARAM_READER_QUEUE_DEPTH,
    SF_PARAM_READER_WORLD_SIZE,
    SF_PARAM_PACK_JOBS,
    SF_PARAM_PACK_ALIGN,
    SF_PARAM_PACK_SHARD_SIZE,
    SF_PARAM_PACK_PARTS,
    SF_PARAM_PACK_ZSTD_LEVEL,
    SF_PARAM_VERIFY_JOBS,
    SF_PARAM_COUNT
} sf_param;

typedef struct sf_bounds {
    int64_t min, max; /* inclusive */
} sf_bounds;

/* The inclusive range of `param`. SF_E_INVALID for an unknown param. */
SF_API int sf_param_bounds(sf_bounds *out, sf_param param);
/* The option's name as the options structs (and Python) spell it:
 * "batch_size", "jobs", ...; "zstd_level" for the LEVEL of
 * sf_pack_opts.compress's "FIELD=zstd:LEVEL" (Python's bounds key
 * "pack.zstd_level"); NULL for an unknown param. */
SF_API const char *sf_param_name(sf_param param);

#ifdef __cplusplus
}
#endif
#endif
