/* Read-ahead hints for block shuffles: posix_fadvise(WILLNEED) over each
 * block's bytes about one shuffle window before the reader gets there.
 *
 * Why: a block shuffle reads runs of block_size consecutive samples, but it
 * shuffles the positions of a whole window (16 blocks by default) together,
 * so the reads of one batch jump between about 16 places in the shards. The
 * kernel's own read-ahead follows one sequential stream per open file and
 * sees none here: on cold data every record is a small random read. Each
 * block is one contiguous byte range, though, and the sampler knows the
 * whole epoch's order. So when a batch is scheduled, the blocks of the
 * batches up to one window further on are queued, and an I/O thread asks the
 * kernel to read each block's range in the background (one large request
 * instead of block_size small ones); the reads then find the pages cached.
 *
 * Only hints: nothing waits on them, a full queue drops them, and a failed
 * posix_fadvise is ignored. Off for O_DIRECT (no page cache to fill), for
 * datasets at a URL (a shard may not be in the cache yet, and its file must
 * not be opened to hint it), for the other shuffles (none is sequential:
 * the kernel's read-ahead serves it; global has no runs to hint), and with
 * SHARDFEED_READAHEAD=0 in the environment.
 *
 * Memory: a bit per block and a queue of 4 windows of block numbers. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "reader_internal.h"

#define QUEUE_WINDOWS 4u
#define WARM_STREAK 8u
#define PROBE_EVERY 16u

struct reader_readahead {
    uint32_t block_size;
    uint64_t blocks;      /* in the dataset */
    uint64_t ahead;       /* batches looked ahead: one window's worth */
    uint64_t epoch;       /* `queued` holds this epoch's blocks */
    uint64_t planned;     /* batches [0, planned) of `epoch` have been looked at */
    uint8_t *queued;      /* a bit per block: queued this epoch */
    uint64_t *ids;        /* a batch's ids */
    uint64_t *queue;      /* blocks to hint, first in first out */
    uint32_t head, count, cap;
    /* Blocks found cached in a row by the hinting threads: past
     * WARM_STREAK only one block in PROBE_EVERY is looked at (the data is
     * warm: hints would only cost their system calls); a block found
     * uncached brings every block back. */
    atomic_uint streak;
    uint32_t probe;
};

int reader_readahead_open(sf_reader *r)
{
    r->readahead = NULL;
    const char *env = getenv("SHARDFEED_READAHEAD");
    if (r->opts.shuffle != SF_READER_SHUFFLE_BLOCK || r->direct || r->ds->remote ||
        (env && strcmp(env, "0") == 0))
        return 0;
    reader_readahead *ra = calloc(1, sizeof *ra);
    if (!ra)
        return sf_fail(-ENOMEM, "out of memory");
    ra->block_size = r->opts.block_size ? r->opts.block_size : SF_SAMPLER_DEFAULT_BLOCK;
    uint64_t window = r->opts.window ? r->opts.window : (uint64_t)SF_SAMPLER_DEFAULT_WINDOW_MULT * ra->block_size;
    ra->blocks = (r->n - 1) / ra->block_size + 1;
    ra->ahead = (window + r->opts.batch_size - 1) / r->opts.batch_size;
    uint64_t wblocks = window / ra->block_size + 2;
    ra->cap = (uint32_t)(QUEUE_WINDOWS * (wblocks > r->batch_cap ? wblocks : r->batch_cap));
    ra->epoch = UINT64_MAX;
    ra->queued = calloc((size_t)(ra->blocks + 7) / 8, 1);
    ra->ids = malloc((size_t)r->batch_cap * sizeof *ra->ids);
    ra->queue = malloc((size_t)ra->cap * sizeof *ra->queue);
    if (!ra->queued || !ra->ids || !ra->queue) {
        r->readahead = ra;
        reader_readahead_close(r);
        return sf_fail(-ENOMEM, "out of memory");
    }
    r->readahead = ra;
    return 0;
}

void reader_readahead_close(sf_reader *r)
{
    reader_readahead *ra = r->readahead;
    if (!ra)
        return;
    free(ra->queued);
    free(ra->ids);
    free(ra->queue);
    free(ra);
    r->readahead = NULL;
}

void reader_readahead_plan_locked(sf_reader *r, uint64_t epoch, uint64_t index)
{
    reader_readahead *ra = r->readahead;
    if (!ra)
        return;
    if (epoch != ra->epoch) {
        ra->epoch = epoch;
        ra->planned = 0;
        memset(ra->queued, 0, (size_t)(ra->blocks + 7) / 8);
    }
    /* The sampler is at `epoch` (prepare_slot just cut batch `index` from it). */
    if (ra->planned < index) /* repositioned forward (a resume): nothing behind it is read */
        ra->planned = index;
    uint64_t until = index + ra->ahead + 1;
    if (until > r->num_batches)
        until = r->num_batches;
    for (; ra->planned < until; ra->planned++) {
        uint32_t n = reader_sampler_batch(r->sampler, ra->planned, ra->ids);
        for (uint32_t i = 0; i < n; i++) {
            uint64_t b = ra->ids[i] / ra->block_size;
            if (ra->queued[b / 8] & (1u << (b % 8)))
                continue;
            ra->queued[b / 8] |= (uint8_t)(1u << (b % 8));
            if (atomic_load_explicit(&ra->streak, memory_order_relaxed) >= WARM_STREAK &&
                ra->probe++ % PROBE_EVERY)
                continue;
            if (ra->count < ra->cap) /* else dropped: only a hint */
                ra->queue[(ra->head + ra->count++) % ra->cap] = b;
        }
    }
}

unsigned reader_readahead_take_locked(sf_reader *r, uint64_t *blocks, unsigned max)
{
    reader_readahead *ra = r->readahead;
    unsigned n = 0;
    while (ra && n < max && ra->count) {
        blocks[n++] = ra->queue[ra->head];
        ra->head = (ra->head + 1) % ra->cap;
        ra->count--;
    }
    return n;
}

/* Whether the page holding byte `at` is in the page cache: a one-byte read
 * that fails rather than wait for the disk. On warm data a WILLNEED hint
 * costs a walk over every page of the range; one read per block costs
 * little. The block's last page: a block is read forwards, so a cached last
 * page means the block was read, or hinted, already. */
static int cached(int fd, uint64_t at)
{
    char c;
    struct iovec v = {&c, 1};
    return preadv2(fd, &v, 1, (off_t)at, RWF_NOWAIT) == 1;
}

/* The bytes of samples [first, end) of one shard: from the first record's
 * payload to the end of the last one's. */
static void hint_run(sf_reader *r, uint64_t shard, uint64_t first_local, uint64_t last_local)
{
    reader_readahead *ra = r->readahead;
    sf_index_entry a, z;
    sf_dataset_entry(&a, r->ds, shard, first_local);
    sf_dataset_entry(&z, r->ds, shard, last_local);
    int fd;
    if (z.offset + z.size <= a.offset || dataset_fd_acquire(&fd, r->ds, shard, 0))
        return;
    if (cached(fd, z.offset + z.size - 1)) {
        atomic_fetch_add_explicit(&ra->streak, 1, memory_order_relaxed);
    } else {
        atomic_store_explicit(&ra->streak, 0, memory_order_relaxed);
        (void)posix_fadvise(fd, (off_t)a.offset, (off_t)(z.offset + z.size - a.offset), POSIX_FADV_WILLNEED);
    }
    dataset_fd_release(r->ds, shard, 0);
}

void reader_readahead_issue(sf_reader *r, const uint64_t *blocks, unsigned n)
{
    reader_readahead *ra = r->readahead;
    for (unsigned k = 0; k < n; k++) {
        uint64_t id = blocks[k] * ra->block_size;
        uint64_t end = id + ra->block_size < r->n ? id + ra->block_size : r->n;
        /* A block may span the end of a shard: one run per shard. */
        while (id < end) {
            uint64_t local, shard = sf_dataset_locate(r->ds, id, &local);
            uint64_t in_shard = r->ds->manifest.shards[shard].record_count - local;
            uint64_t run = end - id < in_shard ? end - id : in_shard;
            hint_run(r, shard, local, local + run - 1);
            id += run;
        }
    }
}
