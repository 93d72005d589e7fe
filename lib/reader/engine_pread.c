/* The pread and mmap engines: each I/O thread takes samples in small groups and
 * copies its payload fields into the slot, with pread(2) (buffered or
 * O_DIRECT fds) or memcpy from a read-only map of the shard, hashing each
 * piece as soon as it is copied (warm data is memory-bound: hashing from L2
 * instead of re-reading the slot from DRAM is most of the checksum cost). */
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "hash.h"
#include "hash_copy.h"

#include "error_internal.h"
#include "fault_guard.h"
#include "reader_internal.h"

/* ---- shared: copy in pieces, hash each piece while it is hot ----
 *
 * Each thread hashes with its scratch's XXH3 state and, for compressed
 * datasets, stages with its buffer and ZSTD_DCtx (t->scratch, staged.c). */

typedef reader_copy_fn copy_fn;

typedef reader_copy_ops copy_ops;

/* Opens task's shard for `ops`, failing the task when it cannot be. A
 * record of inline fields only has nothing to read: its shard stays shut. */
static int task_begin(sf_reader *r, reader_task *task, const copy_ops *ops)
{
    int rc = ops->open && task->nreads ? ops->open(r, task) : 0;
    if (rc)
        reader_task_open_failed(r, task, rc);
    return rc;
}

/* A record with compressed fields: read whole, hashed, then decompressed. */
static void staged_task(reader_io_thread *t, reader_task *task, const copy_ops *ops)
{
    sf_reader *r = t->r;
    int rc = task_begin(r, task, ops);
    if (rc) {
        reader_task_done(t, task);
        return;
    }
    rc = reader_staged_load(&t->scratch, r, task, ops->copy);
    reader_task_close(r, task);
    if (rc == SF_E_CORRUPT)
        reader_task_bad_value(r, task);
    else if (rc && rc != SF_E_CHECKSUM) /* a mismatch is reader_task_done's to judge */
        reader_task_fail(r, task, rc, "read failed");
    reader_task_done(t, task);
}

/* copy_task with a fused copy-and-hash (ops->copy_hashed): each field
 * copied whole, hashed in the same pass, as the next piece of the record's
 * input. The pass is the copy's time (io_ns): the hash adds none of its own
 * to measure. */
static void copy_task_hashed(reader_io_thread *t, reader_task *task, const copy_ops *ops)
{
    sf_reader *r = t->r;
    uint64_t total = 0, t0 = reader_now_ns();
    for (uint32_t k = 0; k < task->nreads; k++)
        total += task->reads[k].len;
    sf_copy_hash h;
    sf_copy_hash_begin(&h, total, sf_copy_hash_fast());
    int rc = 0;
    for (uint32_t k = 0; k < task->nreads && !rc; k++) {
        reader_read *rd = &task->reads[k];
        assert(rd->done == 0);
        rc = ops->copy_hashed(r, task, &h, rd->dst, rd->off, rd->len);
        if (rc)
            reader_task_fail(r, task, rc, "read failed");
        else
            rd->done = rd->len;
    }
    reader_task_close(r, task);
    if (!rc) {
        task->digest = sf_copy_hash_digest(&h);
        task->hashed = 1;
    }
    reader_account_time(r, reader_now_ns() - t0, 0);
    reader_task_done(t, task);
}

/* Copies every payload field of `task` into its slot with `copy`, SF_HASH_CHUNK
 * bytes at a time, feeding each piece to the record hash right after it
 * lands (the same XXH3-64 as sf_record_hash: streaming over the fields in
 * order equals hashing their concatenation). */
static void copy_task(reader_io_thread *t, reader_task *task, const copy_ops *ops)
{
    sf_reader *r = t->r;
    if (r->compressed) {
        staged_task(t, task, ops);
        return;
    }
    if (task_begin(r, task, ops)) {
        reader_task_done(t, task);
        return;
    }
    XXH3_state_t *st = t->scratch.xxh;
    int verify = r->opts.verify == SF_VERIFY_ON;
    copy_fn copy = !verify && ops->copy_streamed ? ops->copy_streamed : ops->copy;
    if (verify && ops->copy_hashed && sf_copy_hash_fast() != SF_COPY_HASH_AUTO) {
        copy_task_hashed(t, task, ops);
        return;
    }
    uint64_t io_ns = 0, hash_ns = 0, t0 = reader_now_ns(), t1;
    int rc = 0;
    if (verify)
        XXH3_64bits_reset(st);
    for (uint32_t k = 0; k < task->nreads && !rc; k++) {
        reader_read *rd = &task->reads[k];
        while (rd->done < rd->len) {
            uint64_t left = rd->len - rd->done;
            uint64_t n = verify && left > SF_HASH_CHUNK ? SF_HASH_CHUNK : left;
            rc = copy(r, task, rd->dst + rd->done, rd->off + rd->done, n);
            if (rc) {
                reader_task_fail(r, task, rc, "read failed");
                break;
            }
            t1 = reader_now_ns();
            io_ns += t1 - t0;
            t0 = t1;
            if (verify) {
                XXH3_64bits_update(st, rd->dst + rd->done, n);
                t0 = reader_now_ns();
                hash_ns += t0 - t1;
            }
            rd->done += n;
        }
    }
    reader_task_close(r, task);
    if (verify && !rc) {
        task->digest = XXH3_64bits_digest(st);
        task->hashed = 1;
    }
    reader_account_time(r, io_ns, hash_ns);
    reader_task_done(t, task);
}

/* Small records (reader_small_records) go a claim at a time: copied one
 * after another, then hashed one-shot while the claim (at most CLAIM_BYTES)
 * is still in L2, with the clock read twice per claim and the shared
 * counters updated once. Per record, the clock readings, the streaming hash
 * state and the atomics cost more than copying 1 KiB. */

/* Copies the payload fields of tasks[0..n) into their slots, failing a
 * task whose read fails (reader_task_fail). */
typedef void (*claim_copy_fn)(sf_reader *r, reader_task *const *tasks, unsigned n);

/* Tasks whose source is prefetched ahead of the copy (mmap). */
#define COPY_AHEAD 2u

static void hash_task(reader_io_thread *t, reader_task *task)
{
    if (task->nreads == 1) {
        task->digest = XXH3_64bits(task->reads[0].dst, task->reads[0].len);
    } else {
        XXH3_state_t *st = t->scratch.xxh;
        XXH3_64bits_reset(st);
        for (uint32_t k = 0; k < task->nreads; k++)
            XXH3_64bits_update(st, task->reads[k].dst, task->reads[k].len);
        task->digest = XXH3_64bits_digest(st);
    }
    task->hashed = 1;
}

/* Copies every read of `task` whole with `copy`, or fails the task at the
 * first read that fails. */
static void copy_reads(sf_reader *r, reader_task *task, copy_fn copy)
{
    for (uint32_t k = 0; k < task->nreads; k++) {
        reader_read *rd = &task->reads[k];
        int rc = copy(r, task, rd->dst, rd->off, rd->len);
        if (rc) {
            reader_task_fail(r, task, rc, "read failed");
            return;
        }
        rd->done = rd->len;
    }
}

static void copy_small(reader_io_thread *t, reader_task **tasks, unsigned n,
                       claim_copy_fn copy_claim)
{
    sf_reader *r = t->r;
    uint64_t t0 = reader_now_ns();
    copy_claim(r, tasks, n);
    uint64_t t1 = reader_now_ns(), t2 = t1;
    if (r->opts.verify == SF_VERIFY_ON) {
        for (unsigned i = 0; i < n; i++)
            if (!tasks[i]->err && !tasks[i]->corrupt)
                hash_task(t, tasks[i]);
        t2 = reader_now_ns();
    }
    reader_account_time(r, t1 - t0, t2 - t1);
    reader_tasks_done(t, tasks, n);
}

/* ---- pread ---- */

static int pread_copy(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                      uint64_t len)
{
    (void)r;
    return sf_pread_full(task->fd, dst, len, off);
}

static int pread_open(sf_reader *r, reader_task *task)
{
    return reader_task_open(r, task, r->direct);
}

static const copy_ops pread_ops = {pread_copy, pread_open, NULL, NULL, NULL};

/* At a URL a claim goes in runs of one shard (reader_group_by_shard), as
 * mmap's do: in claim order a global shuffle's claim switched shards at
 * nearly every record, and where the cache has no room for every shard the
 * claim touches, each switch could download a shard again (2 epochs of
 * 6,000 small records in 13 shards, cache limit 900 KiB: over 60 s). */
static void pread_claim(sf_reader *r, reader_task *const *claim, unsigned n)
{
    reader_task *grouped[READER_GROUP_MAX];
    reader_task *const *tasks = claim;
    if (dataset_maps_follow_pins(r->ds) && n > 1 && n <= READER_GROUP_MAX) {
        reader_group_by_shard(grouped, claim, n);
        tasks = grouped;
    }
    for (unsigned i = 0; i < n; i++) {
        if (task_begin(r, tasks[i], &pread_ops))
            continue;
        copy_reads(r, tasks[i], pread_copy);
        reader_task_close(r, tasks[i]);
    }
}

/* Tasks taken per claim: one large sample, or enough small ones to make
 * about 256 KiB, so small samples do not pay for the reader's lock each. */
#define CLAIM_BYTES (256u << 10)
#define CLAIM_MAX READER_GROUP_MAX

/* Payload bytes of a record's fixed-size fields. */
static uint64_t fixed_bytes(const sf_reader *r)
{
    uint64_t per = 0;
    for (uint32_t f = 0; f < r->schema->field_count; f++)
        per += r->schema->fields[f].storage == SF_STORAGE_FIXED ? r->schema->fields[f].item_size : 0;
    return per;
}

static unsigned claim_size(const sf_reader *r)
{
    uint64_t per = fixed_bytes(r);
    uint64_t n = per ? CLAIM_BYTES / per : CLAIM_MAX;
    return n < 1 ? 1 : n > CLAIM_MAX ? CLAIM_MAX : (unsigned)n;
}

/* The thread's loop: small records a claim at a time with copy_claim, the
 * rest task by task with copy. */
static void copy_run(reader_io_thread *t, const copy_ops *ops, claim_copy_fn copy_claim)
{
    sf_reader *r = t->r;
    reader_task *tasks[CLAIM_MAX];
    unsigned staged = reader_staged_claim_max(r), got;
    unsigned want = staged && staged < claim_size(r) ? staged : claim_size(r);
    int small = reader_small_records(r);
    while ((got = reader_claim(r, tasks, want, 1)) > 0) {
        if (small) {
            copy_small(t, tasks, got, copy_claim);
            continue;
        }
        if (staged) {
            reader_staged_claim(t, tasks, got, ops);
            continue;
        }
        for (unsigned i = 0; i < got; i++)
            copy_task(t, tasks[i], ops);
    }
}

static void pread_run(reader_io_thread *t)
{
    copy_run(t, &pread_ops, pread_claim);
}

const reader_engine_ops reader_engine_pread = {
    .name = "pread",
    .run = pread_run,
};

/* ---- mmap ---- */

/* The shards' maps are the dataset's (dataset_map), each made when first
 * read from and kept until the dataset closes; a shard mapped keeps no
 * descriptor. A dataset at a URL is the exception (dataset_maps_follow_pins):
 * a map there lasts while its shard is pinned in the cache, so each read
 * holds the shard's descriptor as pread's do (mmap_task_open,
 * mmap_claim_pinned). */
static int mmap_open(sf_reader *r)
{
    (void)r;
    return sf_fault_guard_init();
}

/* The error for a fault (rc from the guard) copying from task's shard. */
static int mapped_error(const sf_reader *r, const reader_task *task, int rc)
{
    uint64_t now;
    if (rc == SF_E_TRUNCATED && !sf_dataset_shard_shrank(r->ds, task->shard, &now))
        rc = -EIO; /* SIGBUS, but the file is whole: a page that could not be read in */
    return rc;
}

/* Ranges are inside the file as it was when the dataset was opened
 * (sf_index_check placed every record before the index); a file cut shorter
 * since faults, which the fault guard turns into an error. */
static int mmap_copy(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                     uint64_t len)
{
    int rc = sf_guarded_copy(dst, atomic_load_explicit(&r->ds->shards[task->shard].map,
                                                       memory_order_acquire) + off, len);
    return rc ? mapped_error(r, task, rc) : 0;
}

/* Maps task's shard if it is not yet (the copies then read the map); a
 * map that follows the shard's pin is valid until reader_task_close. */
static int mmap_task_open(sf_reader *r, reader_task *task)
{
    const uint8_t *map;
    if (!dataset_maps_follow_pins(r->ds))
        return dataset_map(&map, r->ds, task->shard);
    int rc = reader_task_open(r, task, 0);
    if (!rc && (rc = dataset_map_pinned(&map, r->ds, task->shard)))
        reader_task_close(r, task);
    return rc;
}

/* Shuffled records are scattered over the map: each one's lines are cache
 * (and TLB) misses that the copy would otherwise wait for one by one. */
static void mmap_prefetch(const sf_reader *r, const reader_task *task)
{
    const uint8_t *map = atomic_load_explicit(&r->ds->shards[task->shard].map, memory_order_relaxed);
    for (uint32_t k = 0; k < task->nreads; k++) {
        const uint8_t *p = map + task->reads[k].off;
        for (uint64_t o = 0; o < task->reads[k].len; o += 64)
            __builtin_prefetch(p + o);
    }
}

/* A task's source ahead of its copy (reader_staged_claim): only where the
 * maps last until close (a map that follows a pin may be gone). */
static void mmap_prefetch_next(const sf_reader *r, const reader_task *task)
{
    if (!dataset_maps_follow_pins(r->ds) &&
        atomic_load_explicit(&r->ds->shards[task->shard].map, memory_order_relaxed))
        mmap_prefetch(r, task);
}

/* A piece copied from a map by one guarded call: hashed (h) or streamed. */
typedef struct hashed_job {
    sf_copy_hash *h;
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
} hashed_job;

static int hashed_range(void *arg)
{
    hashed_job *j = arg;
    sf_copy_hash_copy(j->h, j->dst, j->src, j->len);
    return 0;
}

static int mmap_copy_hashed(const sf_reader *r, const reader_task *task, sf_copy_hash *h,
                            uint8_t *dst, uint64_t off, uint64_t len)
{
    hashed_job j = {h, dst,
                    atomic_load_explicit(&r->ds->shards[task->shard].map, memory_order_acquire) + off,
                    (size_t)len};
    int rc = sf_fault_guarded(hashed_range, &j);
    return rc ? mapped_error(r, task, rc) : 0;
}

static int streamed_range(void *arg)
{
    hashed_job *j = arg;
    sf_copy_streamed(j->dst, j->src, j->len);
    return 0;
}

static int mmap_copy_streamed(const sf_reader *r, const reader_task *task, uint8_t *dst,
                              uint64_t off, uint64_t len)
{
    hashed_job j = {NULL, dst,
                    atomic_load_explicit(&r->ds->shards[task->shard].map, memory_order_acquire) + off,
                    (size_t)len};
    int rc = sf_fault_guarded(streamed_range, &j);
    return rc ? mapped_error(r, task, rc) : 0;
}

static const copy_ops mmap_ops = {mmap_copy, mmap_task_open, mmap_prefetch_next, mmap_copy_hashed,
                                  mmap_copy_streamed};

/* A claim's copy from the maps, as one guarded call: `next` is the task
 * being copied (volatile: read after a fault jumps back out). */
typedef struct claim_job {
    const sf_reader *r;
    reader_task *const *tasks;
    unsigned n;
    volatile unsigned next;
} claim_job;

static int mmap_claim_copy(void *arg)
{
    claim_job *c = arg;
    for (unsigned i = c->next; i < c->n; c->next = ++i) {
        if (i + COPY_AHEAD < c->n)
            mmap_prefetch(c->r, c->tasks[i + COPY_AHEAD]);
        reader_task *task = c->tasks[i];
        const uint8_t *map =
            atomic_load_explicit(&c->r->ds->shards[task->shard].map, memory_order_relaxed);
        for (uint32_t k = 0; k < task->nreads; k++) {
            reader_read *rd = &task->reads[k];
            memcpy(rd->dst, map + rd->off, rd->len);
            rd->done = rd->len;
        }
    }
    return 0;
}

/* Copies tasks[0..n), their shards mapped, under one guard rather than one
 * per record: arming it (sigsetjmp, two updates of the thread's key, an
 * indirect call) is a measurable share of copying a 784-byte record from
 * the page cache, and nothing per claim (README, "Small records"). A fault
 * fails the task it hit, and the copy goes on with the next. */
static void mmap_copy_mapped(sf_reader *r, reader_task *const *tasks, unsigned n)
{
    for (unsigned i = 0; i < n && i < COPY_AHEAD; i++)
        mmap_prefetch(r, tasks[i]);
    claim_job c = {r, tasks, n, 0};
    while (c.next < n) {
        int rc = sf_fault_guarded(mmap_claim_copy, &c);
        if (!rc)
            break;
        reader_task *task = tasks[c.next];
        reader_task_fail(r, task, mapped_error(r, task, rc), "read failed");
        c.next = c.next + 1;
    }
}

/* A dataset at a URL: a thread pins one shard at a time, as pread's do (a
 * claim that pinned every shard it touches could pin more than the cache
 * has room for, and wait on its own pins for a download's room). The claim
 * goes in runs of one shard's tasks, grouped first: the first that reads
 * pins and maps it for the run, copied under one guard, then released.
 * Ungrouped, a global shuffle's claim switched shards at nearly every
 * record, each switch a pin, an unpin and the prefetcher's lock. */
static void mmap_claim_pinned(sf_reader *r, reader_task *const *claim, unsigned n)
{
    reader_task *tasks[CLAIM_MAX];
    reader_group_by_shard(tasks, claim, n);
    for (unsigned i = 0, end; i < n; i = end) {
        reader_task *holder = NULL;
        for (end = i; end < n && tasks[end]->shard == tasks[i]->shard; end++)
            if (!holder && tasks[end]->nreads)
                holder = tasks[end];
        if (!holder)
            continue; /* nothing to read */
        int rc = task_begin(r, holder, &mmap_ops);
        for (unsigned k = i; rc && k < end; k++)
            if (tasks[k] != holder)
                reader_task_open_failed(r, tasks[k], rc);
        if (rc)
            continue;
        mmap_copy_mapped(r, tasks + i, end - i);
        reader_task_close(r, holder);
    }
}

static void mmap_claim(sf_reader *r, reader_task *const *tasks, unsigned n)
{
    if (dataset_maps_follow_pins(r->ds)) {
        mmap_claim_pinned(r, tasks, n);
        return;
    }
    /* Every shard of the claim mapped first: a task whose shard cannot be is
     * failed, and the copy passes it by. */
    int unmapped = 0;
    for (unsigned i = 0; i < n; i++)
        unmapped |= task_begin(r, tasks[i], &mmap_ops) != 0;
    if (unmapped) {
        for (unsigned i = 0; i < n; i++)
            if (!tasks[i]->err)
                copy_reads(r, tasks[i], mmap_copy);
        return;
    }
    mmap_copy_mapped(r, tasks, n);
}

static void mmap_run(reader_io_thread *t)
{
    copy_run(t, &mmap_ops, mmap_claim);
}

const reader_engine_ops reader_engine_mmap = {
    .name = "mmap",
    .open = mmap_open,
    .run = mmap_run,
};

/* ---- ranges: a dataset at a URL in mode direct ----
 *
 * Each payload field of a record is fetched with an HTTP range request
 * straight into its place in the slot (dataset_remote_read: retries and
 * timeouts are the transport's), by as many I/O threads as requests in
 * flight. A record whose bytes fail their checksum is fetched again, up to
 * RANGES_REFETCH times: damage on the way differs each time, damage at the
 * store does not, and is then judged by reader_task_done like any corrupt
 * record (on_corrupt). A record that stays unreadable after the transport's
 * retries is an error, or with on_corrupt = SKIP a corrupt sample. */

#define RANGES_REFETCH 6u

/* Runs: in dataset order (shuffle none: an evaluation pass, a stream), a
 * claim's records lie one after another in their shard, and one range
 * request fetches a run of them (at most RANGES_RUN_BYTES, records at most
 * RANGES_GAP bytes apart: alignment padding) into the thread's buffer, from
 * which each record is then copied and checked as if fetched alone. Claims
 * are RANGES_CLAIM records: with 4 slots of 256 that still leaves work for
 * all 16 threads where records are not adjacent after all (a rank's share
 * of world_size). The shuffles claim one record at a time: a block shuffle
 * mixes 16 blocks in each window, so the records of one claim are seldom
 * adjacent, and a claim of several would only serialise their requests. */
#define RANGES_CLAIM 32u
#define RANGES_RUN_BYTES (256u << 10)
#define RANGES_GAP 4096u

/* The run this thread fetched, which ranges_copy reads from where it covers
 * the bytes asked for (NULL: none). */
typedef struct fetched_run {
    uint8_t *buf;
    uint64_t shard, off, len;
} fetched_run;
static _Thread_local fetched_run *ranges_held;

static int ranges_copy(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                       uint64_t len)
{
    const fetched_run *run = ranges_held;
    if (run && task->shard == run->shard && off >= run->off && len <= run->len &&
        off - run->off <= run->len - len) {
        memcpy(dst, run->buf + (off - run->off), len);
        return 0;
    }
    return dataset_remote_read(r->ds, task->shard, dst, off, len);
}

/* Fetches every read of `task` whole: 0 or the first failure. */
static int ranges_fetch(reader_io_thread *t, reader_task *task)
{
    sf_reader *r = t->r;
    if (r->compressed)
        return reader_staged_load(&t->scratch, r, task, ranges_copy);
    for (uint32_t k = 0; k < task->nreads; k++) {
        reader_read *rd = &task->reads[k];
        int rc = ranges_copy(r, task, rd->dst, rd->off, rd->len);
        if (rc)
            return rc;
        rd->done = rd->len;
    }
    if (r->opts.verify == SF_VERIFY_ON) {
        hash_task(t, task);
        return task->digest == task->checksum ? 0 : SF_E_CHECKSUM;
    }
    return 0;
}

static void ranges_task(reader_io_thread *t, reader_task *task)
{
    sf_reader *r = t->r;
    uint64_t t0 = reader_now_ns();
    fetched_run *run = ranges_held;
    int rc = 0;
    for (uint32_t attempt = 0; attempt <= RANGES_REFETCH; attempt++) {
        task->hashed = 0;
        rc = ranges_fetch(t, task);
        if (rc != SF_E_CHECKSUM)
            break;
        ranges_held = NULL; /* fetched again, alone: the run's copy was damaged on the way */
    }
    ranges_held = run;
    reader_account_time(r, reader_now_ns() - t0, 0);
    if (rc == SF_E_CORRUPT) {
        reader_task_bad_value(r, task);
    } else if (rc && rc != SF_E_CHECKSUM) {
        if (r->opts.on_corrupt == SF_ON_CORRUPT_SKIP && r->opts.verify == SF_VERIFY_ON) {
            /* Unreadable: judged a corrupt sample, substituted. */
            task->hashed = 1;
            task->digest = ~task->checksum;
        } else {
            /* The transport's detail (URL, range, why) is this thread's. */
            char what[1280];
            snprintf(what, sizeof what, "range request failed (%s)", sf_last_error());
            reader_task_fail(r, task, rc, what);
        }
    }
    reader_task_done(t, task);
}

/* The stored bytes of task's payload fields: [*lo, *hi). 0 when it has none. */
static int task_span(const reader_task *task, uint64_t *lo, uint64_t *hi)
{
    if (!task->nreads)
        return 0;
    *lo = task->reads[0].off;
    *hi = task->reads[task->nreads - 1].off + task->reads[task->nreads - 1].len;
    return 1;
}

/* The end of the run that starts at tasks[i]: the tasks after it of the
 * same shard, each starting at most RANGES_GAP bytes after the one before
 * ends, within RANGES_RUN_BYTES; sets *run to its bytes. */
static unsigned run_end(reader_task *const *tasks, unsigned i, unsigned n, fetched_run *run)
{
    uint64_t lo, hi, a, b;
    if (!task_span(tasks[i], &lo, &hi))
        return i + 1;
    unsigned end = i + 1;
    for (; end < n && tasks[end]->shard == tasks[i]->shard && task_span(tasks[end], &a, &b); end++)
        if (a < hi || a - hi > RANGES_GAP || b - lo > RANGES_RUN_BYTES)
            break;
        else
            hi = b;
    run->shard = tasks[i]->shard;
    run->off = lo;
    run->len = hi - lo;
    return end;
}

static void ranges_run(reader_io_thread *t)
{
    sf_reader *r = t->r;
    reader_task *tasks[RANGES_CLAIM];
    fetched_run run = {0};
    unsigned want = r->opts.shuffle == SF_READER_SHUFFLE_NONE ? RANGES_CLAIM : 1, got;
    if (want > 1 && !(run.buf = malloc(RANGES_RUN_BYTES)))
        want = 1; /* every record its own request, as with a global shuffle */
    while ((got = reader_claim(r, tasks, want, 1)) > 0) {
        for (unsigned i = 0, end; i < got; i = end) {
            end = run_end(tasks, i, got, &run);
            assert(end - i == 1 || run.len <= RANGES_RUN_BYTES);
            /* A run that fails to arrive (after the transport's retries)
             * is fetched record by record: the errors then name each
             * record's range. */
            ranges_held = NULL;
            if (end - i > 1) {
                uint64_t t0 = reader_now_ns();
                if (dataset_remote_read(r->ds, run.shard, run.buf, run.off, run.len) == 0)
                    ranges_held = &run;
                reader_account_time(r, reader_now_ns() - t0, 0);
            }
            for (unsigned k = i; k < end; k++)
                ranges_task(t, tasks[k]);
            ranges_held = NULL;
        }
    }
    free(run.buf);
}

const reader_engine_ops reader_engine_ranges = {
    .name = "ranges",
    .run = ranges_run,
};
