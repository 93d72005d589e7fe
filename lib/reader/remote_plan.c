/* The plan a dataset at a URL in mode cache gets from the schedule: the
 * shards of the epoch's batches in the order they first touch them, from
 * the batch just scheduled to about the prefetcher's reach beyond it
 * (dataset_remote_plan). The prefetcher downloads what is planned, and only
 * that: a plan is the epoch's own order, where shard order is a guess.
 *
 * Why beyond the batches scheduled: the schedule runs `prefetch` batches (4
 * by default) ahead of the consumer. Under a global shuffle those touch
 * every shard, or more than the prefetcher's reach; in dataset order
 * (shuffle none) or a block shuffle they touch one or two. The prefetcher
 * then downloaded one shard at a time: from nginx serving each connection
 * at 20 MiB/s (as an object store serves each at a rate of its own), a cold
 * epoch of 13 shards of 94 MB took 15.6 s in dataset order, against 5.4 s
 * under a global shuffle and 4.8 s for curl fetching the 13 at once. So the
 * plan reaches as many samples ahead as the prefetcher's reach of shards
 * holds (that many shards times the dataset's samples per shard; under a
 * global shuffle, which touches a new shard at nearly every sample, twice
 * the reach). The batches beyond those scheduled are planned only while
 * the plan's shards stay within a quarter of the cache limit (the cache
 * evicts the least recently used: see dataset_remote_plan), and while it
 * has room (PLAN_CAP); a batch that did not fit is planned again at the
 * next schedule. Each batch is otherwise planned once an epoch as the walk
 * comes to it, and again as it is scheduled (as when the plan followed the
 * schedule only). A moved position (a resume, a restore, a failed batch
 * read again) drops the plan and starts it again there
 * (dataset_remote_plan_reset).
 *
 * The walk beyond the scheduled batch runs under r->lock, so each schedule
 * looks at PLAN_WALK_SAMPLES samples at most, but at least 2 batches (to
 * gain on the schedule, which moves 1): with 500,000 records in 14 shards
 * and batches of 1, the first schedule walked the epoch's whole order, and
 * from a warm cache the first batch came 19-31 ms after iter() instead of
 * 2.5-4.6.
 *
 * Memory: one batch of ids. */
#include <errno.h>
#include <stdlib.h>

#include "error_internal.h"
#include "reader_internal.h"

/* Samples the walk ahead looks at in one schedule, at most. */
#define PLAN_WALK_SAMPLES 16384u

struct reader_remote_plan {
    uint64_t ahead;   /* batches planned beyond the one scheduled */
    uint64_t epoch;   /* `planned` counts this epoch's batches */
    uint64_t gen;     /* ... since the reader's delivery position last moved (r->gen) */
    uint64_t planned; /* batches [0, planned) of `epoch` are planned */
    uint64_t *ids;    /* a batch's ids */
};

int reader_remote_plan_open(sf_reader *r)
{
    r->remote_plan = NULL;
    uint64_t reach = dataset_remote_plan_reach(r->ds);
    if (!reach)
        return 0; /* local, or read by range requests: nothing to plan */
    reader_remote_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->ids = malloc((size_t)r->batch_cap * sizeof *p->ids))) {
        free(p);
        return sf_fail(-ENOMEM, "out of memory");
    }
    uint64_t shards = r->ds->manifest.shard_count;
    uint64_t per_shard = shards ? (sf_dataset_num_samples(r->ds) + shards - 1) / shards : 1;
    /* In dataset order or a block shuffle the reach is a stretch of the
     * epoch's positions, and a rank's batch b holds positions b * G + rank *
     * batch_size onward, G the global batch (reader_sampler_batch): its
     * consecutive batches are G positions apart. Under a global shuffle it
     * is a count of the rank's own samples (each may touch another shard),
     * batch_size a batch. */
    uint64_t samples, stride;
    if (r->opts.shuffle == SF_READER_SHUFFLE_GLOBAL) {
        samples = 2 * reach;
        stride = r->opts.batch_size;
    } else {
        samples = reach * per_shard;
        stride = (uint64_t)r->opts.batch_size * r->opts.world_size;
    }
    p->ahead = (samples + stride - 1) / stride;
    p->epoch = UINT64_MAX;
    r->remote_plan = p;
    return 0;
}

void reader_remote_plan_close(sf_reader *r)
{
    reader_remote_plan *p = r->remote_plan;
    if (!p)
        return;
    free(p->ids);
    free(p);
    r->remote_plan = NULL;
}

/* Plans the shards `ids` touch, in that order, once for each run of one
 * shard; *last is the shard of the run before (UINT64_MAX: none). Each call
 * of reader_remote_plan_locked starts from none: a shard the last call
 * skipped as held was not planned, and may have been let go since. 0 when
 * the plan is full. */
static int plan_ids(sf_reader *r, const uint64_t *ids, uint32_t n, int ahead, uint64_t *last)
{
    uint64_t local;
    for (uint32_t pos = 0; pos < n; pos++) {
        uint64_t shard = sf_dataset_locate(r->ds, ids[pos], &local);
        if (shard != *last && !dataset_remote_plan(r->ds, shard, ahead)) {
            *last = UINT64_MAX;
            return 0;
        }
        *last = shard;
    }
    return 1;
}

void reader_remote_plan_locked(sf_reader *r, uint64_t epoch, uint64_t index, const uint64_t *ids,
                               uint32_t count)
{
    reader_remote_plan *p = r->remote_plan;
    if (!p)
        return;
    /* The sampler is at `epoch` (prepare_slot just cut batch `index` from
     * it). The position moved (sf_reader_set_state: a resume, a restore, or
     * back; or a failed batch is read again): what was planned for the
     * batches left behind will not be read now, so the plan starts again
     * from `index`. A new epoch reached in order keeps it (the walk stops at
     * the epoch's end: every shard planned is read). */
    if (r->gen != p->gen)
        dataset_remote_plan_reset(r->ds);
    if (epoch != p->epoch || r->gen != p->gen) {
        p->epoch = epoch;
        p->gen = r->gen;
        p->planned = index;
    }
    /* The scheduled batch is planned as it is cut, as ever, whether or not
     * the walk passed it: one of its shards planned ahead may have left the
     * plan since (read for an earlier batch) and been evicted. Such a shard
     * joins the plan at its tail, behind the walk's shards for later
     * batches. Put before them instead, the download counts of
     * test_remote_window stayed within their spread from run to run
     * (117-118 / 100 / 105-109, against 115-119 / 100 / 106-108), so the
     * plan stays one queue. */
    uint64_t last = UINT64_MAX;
    if (!plan_ids(r, ids, count, 0, &last))
        return;
    if (p->planned <= index) /* nothing behind the schedule is read */
        p->planned = index + 1;
    uint64_t until = index + p->ahead + 1;
    if (until > r->num_batches)
        until = r->num_batches;
    uint64_t walked = 0, batches = 0;
    last = UINT64_MAX;
    for (; p->planned < until; p->planned++) {
        if (batches >= 2 && walked >= PLAN_WALK_SAMPLES)
            return; /* on from here at the next schedule */
        uint32_t n = reader_sampler_batch(r->sampler, p->planned, p->ids);
        /* The plan is full (many small shards in a block shuffle): this
         * batch again at the next schedule, once reads have passed some
         * (the shards already planned are not planned twice). */
        if (!plan_ids(r, p->ids, n, 1, &last))
            return;
        walked += n;
        batches++;
    }
}
