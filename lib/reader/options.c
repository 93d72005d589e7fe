/* Reader options: the defaults of sf_reader_opts fields left 0 and the
 * checks of every field against its range. The defaults that depend on the
 * dataset and the engine (I/O threads) are engine.c's. */
#include "error_internal.h"
#include "reader_internal.h"

_Static_assert((int)SF_READER_SHUFFLE_NONE == (int)SF_SHUFFLE_NONE &&
                   (int)SF_READER_SHUFFLE_GLOBAL == (int)SF_SHUFFLE_GLOBAL &&
                   (int)SF_READER_SHUFFLE_BLOCK == (int)SF_SHUFFLE_BLOCK,
               "public shuffle modes mirror the sampler's");
_Static_assert((int)SF_READER_UNEVEN_PAD == (int)SF_UNEVEN_PAD &&
                   (int)SF_READER_UNEVEN_DROP == (int)SF_UNEVEN_DROP,
               "public uneven policies mirror the sampler's");

#define MAX_PREFETCH 1024u
#define MAX_THREADS 256u
#define MAX_QUEUE_DEPTH 4096u

int reader_resolve_opts(sf_reader_opts *o, const sf_reader_opts *in)
{
    static const sf_reader_opts def = SF_READER_OPTS_INIT;
    if (!in)
        in = &def;
    if (in->version < 1 || in->version > SF_READER_OPTS_VERSION)
        return sf_fail(SF_E_INVALID,
                       "sf_reader_opts.version is %u; this library takes 1..%d (start from "
                       "SF_READER_OPTS_INIT)",
                       in->version, SF_READER_OPTS_VERSION);
    *o = *in;
    if (!o->batch_size)
        o->batch_size = SF_READER_DEFAULT_BATCH;
    if (!o->world_size)
        o->world_size = 1;
    if (!o->prefetch)
        o->prefetch = SF_READER_DEFAULT_PREFETCH;
    if (!o->queue_depth)
        o->queue_depth = 32;
    if (o->batch_size > (1u << 24))
        return sf_fail(SF_E_INVALID, "batch_size %u is above the limit of %u", o->batch_size, 1u << 24);
    if (o->rank >= o->world_size)
        return sf_fail(SF_E_INVALID, "rank %u is not below world_size %u", o->rank, o->world_size);
    if (o->shuffle < SF_READER_SHUFFLE_NONE || o->shuffle > SF_READER_SHUFFLE_BLOCK)
        return sf_fail(SF_E_INVALID, "shuffle %d: expected none (0), global (1) or block (2)", o->shuffle);
    if (o->uneven != SF_READER_UNEVEN_PAD && o->uneven != SF_READER_UNEVEN_DROP)
        return sf_fail(SF_E_INVALID, "uneven %d: expected pad (0) or drop (1)", o->uneven);
    if (o->engine < SF_ENGINE_AUTO || o->engine > SF_ENGINE_MMAP)
        return sf_fail(SF_E_INVALID, "engine %d: expected auto, uring, pread or mmap", o->engine);
    if (o->device < SF_DEVICE_CPU || o->device > SF_DEVICE_HOST_COPY || o->device_index < 0)
        return sf_fail(SF_E_INVALID, "device %d:%d: expected cpu, cuda:N or host-copy", o->device,
                       o->device_index);
    if (o->direct < SF_DIRECT_AUTO || o->direct > SF_DIRECT_OFF)
        return sf_fail(SF_E_INVALID, "direct %d: expected auto, on or off", o->direct);
    if (o->verify != SF_VERIFY_ON && o->verify != SF_VERIFY_OFF)
        return sf_fail(SF_E_INVALID, "verify %d: expected on (0) or off (1)", o->verify);
    if (o->on_corrupt != SF_ON_CORRUPT_ERROR && o->on_corrupt != SF_ON_CORRUPT_SKIP)
        return sf_fail(SF_E_INVALID, "on_corrupt %d: expected error (0) or skip (1)", o->on_corrupt);
    if (o->prefetch > MAX_PREFETCH)
        return sf_fail(SF_E_INVALID, "prefetch %u is above the limit of %u", o->prefetch, MAX_PREFETCH);
    if (o->io_threads > MAX_THREADS)
        return sf_fail(SF_E_INVALID, "io_threads %u is above the limit of %u", o->io_threads, MAX_THREADS);
    if (o->queue_depth > MAX_QUEUE_DEPTH)
        return sf_fail(SF_E_INVALID, "queue_depth %u is above the limit of %u", o->queue_depth,
                       MAX_QUEUE_DEPTH);
    return 0;
}
