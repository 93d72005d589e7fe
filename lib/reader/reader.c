/* The reader's life: open (each job's part in order: options, dataset,
 * sampler, slot sizes, O_DIRECT, slab and slots, device, engine) and close,
 * and the accessors of what open fixed. reader_internal.h says which file
 * does what. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "reader_internal.h"

/* prefetch 0: as many slots as make 2 MiB, at least 4 and at most 8. A slot
 * of small records is filled in tens of microseconds (256 Fashion-MNIST
 * records: about 40), close to what one wake of a thread costs on this
 * 2-core VM, so 4 slots left the I/O threads waiting for the consumer to
 * release one. 16 read as fast but kept both I/O threads busy all the time,
 * and the consumer lost its core for milliseconds (README "Waking fewer
 * threads"). Slots of 512 KiB or more keep 4. Slots past 4 also never
 * need more shards open at once than the descriptor cap allows (a batch
 * reads from up to min(batch, shards) shards, each holding a descriptor
 * while read): 40 one-record shards in batches of 4 under RLIMIT_NOFILE 24
 * ran out of descriptors with 8 slots. A dataset at a URL keeps 4: its
 * cache's prefetcher plans downloads as far ahead as the slots reach, and
 * with a cache limit a quarter of the dataset, 8 slots made it evict
 * shards the epoch still needed (29 downloads for 24 first touches in
 * remote.test_remote_prefetch, at most 28 allowed). */
static uint32_t default_prefetch(const sf_reader *r)
{
    if (r->ds->remote)
        return SF_READER_DEFAULT_PREFETCH;
    uint64_t slot = r->layout.slot_bytes;
    uint64_t k = SF_READER_SMALL_SLOT_PREFETCH_BYTES / (slot ? slot : 1);
    uint64_t shards = r->ds->manifest.shard_count;
    uint64_t per_batch = r->batch_cap < shards ? r->batch_cap : shards;
    /* A dataset that keeps every shard open has no cap to stay within. */
    uint64_t fit = dataset_fd_cap(r->ds) / (per_batch ? per_batch : 1);
    if (!dataset_fd_all_kept(r->ds) && k > fit)
        k = fit;
    return k < SF_READER_DEFAULT_PREFETCH    ? SF_READER_DEFAULT_PREFETCH
           : k > SF_READER_MAX_AUTO_PREFETCH ? SF_READER_MAX_AUTO_PREFETCH
                                             : (uint32_t)k;
}

int sf_reader_open(sf_reader **out, const char *dir, const sf_reader_opts *opts)
{
    if (!out || !dir)
        return sf_fail(SF_E_INVALID, "sf_reader_open: NULL argument");
    *out = NULL;
    sf_reader_opts o;
    int rc = reader_resolve_opts(&o, opts);
    if (rc)
        return rc;
    sf_reader *r = calloc(1, sizeof *r);
    if (!r)
        return sf_fail(-ENOMEM, "out of memory");
    r->opts = o;
    /* Adaptive: a waiter spins a little before it sleeps. The lock is held
     * for a few microseconds at a time, less than a sleep and wake cost here
     * (README "Waking fewer threads"). */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&r->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&r->work_cv, NULL);
    pthread_cond_init(&r->ready_cv, NULL);
    if ((rc = reader_device_select(&r->device_ops, &o)))
        goto fail;
    if ((rc = sf_dataset_open_ex(&r->ds, dir, o.remote)))
        goto fail;
    r->schema = &r->ds->manifest.schema;
    r->n = r->ds->manifest.record_count;
    if (r->n == 0) {
        rc = sf_fail(SF_E_INVALID, "%s: the dataset has no samples", dir);
        goto fail;
    }
    reader_sampler_config sc = {
        .n = r->n,
        .seed = o.seed,
        .shuffle = o.shuffle,
        .block_size = o.block_size,
        .window = o.window,
        .batch_size = o.batch_size,
        .rank = o.rank,
        .world_size = o.world_size,
        .drop_last = o.drop_last,
        .uneven = o.uneven,
    };
    if ((rc = reader_sampler_create(&r->sampler, &sc)))
        goto fail;
    reader_order_start(r);
    r->num_batches = reader_sampler_num_batches(r->sampler);
    r->order_id = reader_sampler_order_id(r->sampler, r->ds->manifest.dataset_id);
    if (r->num_batches == 0) {
        /* drop_last or uneven = DROP with batch_size x world_size above the dataset's size drops
         * every sample: each sf_reader_next would end an epoch at once, a training loop run
         * without data and without an error. */
        rc = sf_fail(SF_E_INVALID, "%s: an epoch would have no batch: the dataset's %llu samples are fewer "
                     "than batch_size %u x world_size %u, and drop_last or uneven=drop drops them all "
                     "(use a smaller batch_size, or keep the last batch)",
                     dir, (unsigned long long)r->n, o.batch_size, o.world_size);
        goto fail;
    }
    if (r->ds->remote) {
        uint64_t block_size, window;
        reader_sampler_window(r->sampler, &block_size, &window);
        dataset_remote_check_window(r->ds, block_size, window);
    }
    r->batch_cap = reader_batch_cap(r);
    uint64_t dec_max[SF_MAX_FIELDS];
    if ((rc = reader_images_open(r)) || (rc = reader_staged_plan(r, dec_max)) ||
        (rc = reader_slab_layout(&r->layout, r, r->batch_cap)))
        goto fail;
    if ((rc = reader_direct_choose(r)))
        goto fail;
    if (!o.prefetch)
        o.prefetch = r->opts.prefetch = default_prefetch(r);
    if (r->layout.slot_bytes > UINT64_MAX / o.prefetch) {
        rc = sf_fail(SF_E_LIMIT, "batch slab too large");
        goto fail;
    }
    r->slab_bytes = r->layout.slot_bytes * o.prefetch;
    /* Pages that the first batches write anyway are faulted in now, at open,
     * rather than by the I/O threads while they read (a first touch costs
     * about 12 us in the development VM; README "Small records"); room
     * sized for the largest batch of variable-length values is not. */
    int populate = r->layout.exact && r->num_batches >= o.prefetch;
    if ((rc = reader_slab_alloc(&r->slab, r->slab_bytes, populate)) || (rc = reader_slots_init(r)))
        goto fail;
    if (r->device_ops && (rc = reader_device_open(r)))
        goto fail;
    if ((rc = reader_readahead_open(r)) || (rc = reader_remote_plan_open(r)) ||
        (rc = reader_engine_start(r)))
        goto fail;
    *out = r;
    return 0;
fail:
    sf_reader_close(r);
    return rc;
}

void sf_reader_close(sf_reader *r)
{
    if (!r)
        return;
    if (r->engine)
        reader_engine_stop(r);
    reader_trace_free_all(atomic_load(&r->trace));
    /* Before the slab is unmapped: the device unregisters it. */
    if (r->device)
        r->device_ops->close(r->device);
    reader_slots_free(r);
    reader_slab_free(r->slab, r->slab_bytes);
    reader_sampler_free(r->sampler);
    free(r->zlen);
    reader_images_close(r);
    reader_readahead_close(r);
    reader_remote_plan_close(r);
    sf_dataset_close(r->ds);
    pthread_cond_destroy(&r->ready_cv);
    pthread_cond_destroy(&r->work_cv);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

uint64_t sf_reader_num_batches(const sf_reader *r)
{
    return r ? r->num_batches : 0;
}

uint64_t sf_reader_samples_per_epoch(const sf_reader *r)
{
    return r ? reader_sampler_samples_per_epoch(r->sampler) : 0;
}

const sf_dataset *sf_reader_dataset(const sf_reader *r)
{
    return r ? r->ds : NULL;
}

const sf_batch_field *sf_batch_field_find(const sf_batch *b, const char *name)
{
    if (!b || !name)
        return NULL;
    for (uint32_t f = 0; f < b->num_fields; f++)
        if (strcmp(b->fields[f].name, name) == 0)
            return &b->fields[f];
    return NULL;
}
