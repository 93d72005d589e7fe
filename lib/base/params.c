/* The bounds of every numeric option (shardfeed/params.h). */
#include "shardfeed/params.h"

#include <stddef.h>
#include <stdint.h>

#include "error_internal.h"

static const struct {
    const char *name;
    sf_bounds b;
} params[SF_PARAM_COUNT] = {
    [SF_PARAM_READER_BATCH_SIZE] = {"batch_size", {1, SF_READER_MAX_BATCH}},
    [SF_PARAM_READER_PREFETCH] = {"prefetch", {1, SF_READER_MAX_PREFETCH}},
    [SF_PARAM_READER_IO_THREADS] = {"io_threads", {1, SF_READER_MAX_IO_THREADS}},
    [SF_PARAM_READER_QUEUE_DEPTH] = {"queue_depth", {1, SF_READER_MAX_QUEUE_DEPTH}},
    [SF_PARAM_READER_WORLD_SIZE] = {"world_size", {1, UINT32_MAX}},
    [SF_PARAM_PACK_JOBS] = {"jobs", {1, SF_PACK_MAX_JOBS}},
    [SF_PARAM_PACK_ALIGN] = {"align", {1, SF_PACK_MAX_ALIGN}},
    [SF_PARAM_PACK_SHARD_SIZE] = {"shard_size", {SF_PACK_MIN_SHARD_SIZE, SF_PACK_MAX_SHARD_SIZE}},
    [SF_PARAM_PACK_PARTS] = {"part_count", {2, SF_PACK_MAX_PARTS}},
    [SF_PARAM_PACK_ZSTD_LEVEL] = {"zstd_level", {SF_PACK_MIN_ZSTD_LEVEL, SF_PACK_MAX_ZSTD_LEVEL}},
    [SF_PARAM_VERIFY_JOBS] = {"jobs", {1, SF_VERIFY_MAX_JOBS}},
};

int sf_param_bounds(sf_bounds *out, sf_param param)
{
    if (!out)
        return sf_fail(SF_E_INVALID, "sf_param_bounds: out is NULL");
    if ((unsigned)param >= SF_PARAM_COUNT)
        return sf_fail(SF_E_INVALID, "sf_param_bounds: no parameter %d", (int)param);
    *out = params[param].b;
    return 0;
}

const char *sf_param_name(sf_param param)
{
    return (unsigned)param < SF_PARAM_COUNT ? params[param].name : NULL;
}

int sf_check_param(int param, int64_t value)
{
    const sf_bounds *b = &params[param].b;
    if (value >= b->min && value <= b->max)
        return 0;
    return sf_fail(SF_E_INVALID, "%s %lld is not in %lld..%lld", params[param].name, (long long)value,
                   (long long)b->min, (long long)b->max);
}
