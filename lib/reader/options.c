/* Reader options: the defaults of sf_reader_opts fields left 0 and the
 * checks of every field against its range. The defaults that depend on the
 * dataset and the engine (I/O threads) are engine.c's. */
#include <stddef.h>
#include <string.h>

#include "error_internal.h"
#include "reader_internal.h"
#include "shardfeed/params.h"

_Static_assert((int)SF_READER_SHUFFLE_NONE == (int)SF_SHUFFLE_NONE &&
                   (int)SF_READER_SHUFFLE_GLOBAL == (int)SF_SHUFFLE_GLOBAL &&
                   (int)SF_READER_SHUFFLE_BLOCK == (int)SF_SHUFFLE_BLOCK,
               "public shuffle modes mirror the sampler's");
_Static_assert((int)SF_READER_UNEVEN_PAD == (int)SF_UNEVEN_PAD &&
                   (int)SF_READER_UNEVEN_DROP == (int)SF_UNEVEN_DROP,
               "public uneven policies mirror the sampler's");

int reader_resolve_opts(sf_reader_opts *o, const sf_reader_opts *in)
{
    static const sf_reader_opts def = SF_READER_OPTS_INIT;
    if (!in)
        in = &def;
    int rc = sf_check_opts_version("sf_reader_opts", in->version, SF_READER_OPTS_VERSION);
    if (rc)
        return rc;
    /* A version-1 struct ends before `images`, a version-2 one before
     * `remote`: read only what it has. */
    memset(o, 0, sizeof *o);
    memcpy(o, in, in->version >= 3   ? sizeof *o
                  : in->version == 2 ? offsetof(sf_reader_opts, remote)
                                     : offsetof(sf_reader_opts, images));
    if (!o->batch_size)
        o->batch_size = SF_READER_DEFAULT_BATCH;
    if (!o->world_size)
        o->world_size = 1;
    if (!o->queue_depth)
        o->queue_depth = 32;
    /* The bounds are the one table front ends ask (shardfeed/params.h);
     * io_threads 0 is "choose". */
    if ((rc = sf_check_param(SF_PARAM_READER_BATCH_SIZE, o->batch_size)) ||
        (o->prefetch && (rc = sf_check_param(SF_PARAM_READER_PREFETCH, o->prefetch))) ||
        (rc = sf_check_param(SF_PARAM_READER_QUEUE_DEPTH, o->queue_depth)) ||
        (rc = sf_check_param(SF_PARAM_READER_WORLD_SIZE, o->world_size)) ||
        (o->io_threads && (rc = sf_check_param(SF_PARAM_READER_IO_THREADS, o->io_threads))))
        return rc;
    if (o->rank >= o->world_size)
        return sf_fail(SF_E_INVALID, "rank %u is not below world_size %u", o->rank, o->world_size);
    if (o->shuffle < SF_READER_SHUFFLE_NONE || o->shuffle > SF_READER_SHUFFLE_BLOCK)
        return sf_fail(SF_E_INVALID, "shuffle %d: expected none (0), global (1) or block (2)", o->shuffle);
    if (o->uneven != SF_READER_UNEVEN_PAD && o->uneven != SF_READER_UNEVEN_DROP)
        return sf_fail(SF_E_INVALID, "uneven %d: expected pad (0) or drop (1)", o->uneven);
    if (o->engine < SF_ENGINE_AUTO || o->engine > SF_ENGINE_MMAP)
        return sf_fail(SF_E_INVALID, "engine %d: expected auto, uring, pread or mmap", o->engine);
    if (o->device < SF_DEVICE_CPU || o->device > SF_DEVICE_HOST_COPY)
        return sf_fail(SF_E_INVALID, "device %d: expected cpu (0), cuda (1) or host-copy (2)",
                       o->device);
    if (o->device_index < 0) /* unused but by cuda; a negative one is a caller's bug anyway */
        return sf_fail(SF_E_INVALID, "device_index %d: a CUDA ordinal is 0 or more",
                       o->device_index);
    if (o->direct < SF_DIRECT_AUTO || o->direct > SF_DIRECT_OFF)
        return sf_fail(SF_E_INVALID, "direct %d: expected auto, on or off", o->direct);
    if (o->verify != SF_VERIFY_ON && o->verify != SF_VERIFY_OFF)
        return sf_fail(SF_E_INVALID, "verify %d: expected on (0) or off (1)", o->verify);
    if (o->on_corrupt != SF_ON_CORRUPT_ERROR && o->on_corrupt != SF_ON_CORRUPT_SKIP)
        return sf_fail(SF_E_INVALID, "on_corrupt %d: expected error (0) or skip (1)", o->on_corrupt);
    return 0;
}
