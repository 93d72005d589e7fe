/* The pread and mmap engines: each I/O thread takes samples in small groups and
 * copies its payload fields into the slot, with pread(2) (buffered or
 * O_DIRECT fds) or memcpy from a read-only map of the shard, hashing each
 * piece as soon as it is copied (warm data is memory-bound: hashing from L2
 * instead of re-reading the slot from DRAM is most of the checksum cost). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "hash.h"

#include "error_internal.h"
#include "fault_guard.h"
#include "reader_internal.h"

/* ---- shared: copy in pieces, hash each piece while it is hot ----
 *
 * Each thread hashes with its scratch's XXH3 state and, for compressed
 * datasets, stages with its buffer and ZSTD_DCtx (t->scratch, staged.c). */

typedef reader_copy_fn copy_fn;

/* A record with compressed fields: read whole, hashed, then decompressed. */
static void staged_task(reader_io_thread *t, reader_task *task, copy_fn copy)
{
    sf_reader *r = t->r;
    int rc = reader_staged_load(&t->scratch, r, task, copy);
    if (rc == SF_E_CORRUPT)
        reader_task_bad_value(r, task);
    else if (rc && rc != SF_E_CHECKSUM) /* a mismatch is reader_task_done's to judge */
        reader_task_fail(r, task, rc, "read failed");
    reader_task_done(t, task);
}

/* Copies every payload field of `task` into its slot with `copy`, SF_HASH_CHUNK
 * bytes at a time, feeding each piece to the record hash right after it
 * lands (the same XXH3-64 as sf_record_hash: streaming over the fields in
 * order equals hashing their concatenation). */
static void copy_task(reader_io_thread *t, reader_task *task, copy_fn copy)
{
    sf_reader *r = t->r;
    if (r->compressed) {
        staged_task(t, task, copy);
        return;
    }
    XXH3_state_t *st = t->scratch.xxh;
    int verify = r->opts.verify == SF_VERIFY_ON;
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

static void pread_claim(sf_reader *r, reader_task *const *tasks, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        copy_reads(r, tasks[i], pread_copy);
}

/* Tasks taken per claim: one large sample, or enough small ones to make
 * about 256 KiB, so small samples do not pay for the reader's lock each. */
#define CLAIM_BYTES (256u << 10)
#define CLAIM_MAX 256u

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
static void copy_run(reader_io_thread *t, copy_fn copy, claim_copy_fn copy_claim)
{
    sf_reader *r = t->r;
    reader_task *tasks[CLAIM_MAX];
    unsigned want = claim_size(r), got;
    int small = reader_small_records(r);
    while ((got = reader_claim(r, tasks, want, 1)) > 0) {
        if (small) {
            copy_small(t, tasks, got, copy_claim);
            continue;
        }
        for (unsigned i = 0; i < got; i++)
            copy_task(t, tasks[i], copy);
    }
}

static void pread_run(reader_io_thread *t)
{
    copy_run(t, pread_copy, pread_claim);
}

const reader_engine_ops reader_engine_pread = {
    .name = "pread",
    .run = pread_run,
};

/* ---- mmap ---- */

typedef struct mmap_ctx {
    uint64_t count;
    const uint8_t **maps;
    uint64_t *sizes;
} mmap_ctx;

static void mmap_close(sf_reader *r)
{
    mmap_ctx *c = r->engine_ctx;
    if (!c)
        return;
    for (uint64_t i = 0; i < c->count; i++)
        if (c->maps[i])
            munmap((void *)c->maps[i], c->sizes[i]);
    free(c->maps);
    free(c->sizes);
    free(c);
    r->engine_ctx = NULL;
}

static int mmap_open(sf_reader *r)
{
    uint64_t count = r->ds->manifest.shard_count;
    mmap_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return sf_fail(-ENOMEM, "out of memory");
    r->engine_ctx = c;
    c->maps = calloc(count ? count : 1, sizeof *c->maps);
    c->sizes = calloc(count ? count : 1, sizeof *c->sizes);
    if (!c->maps || !c->sizes) {
        mmap_close(r);
        return sf_fail(-ENOMEM, "out of memory");
    }
    c->count = count;
    int rc = sf_fault_guard_init();
    if (rc) {
        mmap_close(r);
        return rc;
    }
    for (uint64_t i = 0; i < count; i++) {
        const sf_open_shard *s = &r->ds->shards[i];
        void *p = mmap(NULL, s->meta.file_size, PROT_READ, MAP_SHARED, s->fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            mmap_close(r);
            return sf_fail(-e, "%s/%s: mmap failed: %s", r->ds->dir, s->name, strerror(e));
        }
        c->maps[i] = p;
        c->sizes[i] = s->meta.file_size;
    }
    return 0;
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
    const mmap_ctx *c = r->engine_ctx;
    int rc = sf_guarded_copy(dst, c->maps[task->shard] + off, len);
    return rc ? mapped_error(r, task, rc) : 0;
}

/* Shuffled records are scattered over the map: each one's lines are cache
 * (and TLB) misses that the copy would otherwise wait for one by one. */
static void mmap_prefetch(const sf_reader *r, const reader_task *task)
{
    const mmap_ctx *c = r->engine_ctx;
    for (uint32_t k = 0; k < task->nreads; k++) {
        const uint8_t *p = c->maps[task->shard] + task->reads[k].off;
        for (uint64_t o = 0; o < task->reads[k].len; o += 64)
            __builtin_prefetch(p + o);
    }
}

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
    const mmap_ctx *m = c->r->engine_ctx;
    for (unsigned i = c->next; i < c->n; c->next = ++i) {
        if (i + COPY_AHEAD < c->n)
            mmap_prefetch(c->r, c->tasks[i + COPY_AHEAD]);
        reader_task *task = c->tasks[i];
        const uint8_t *map = m->maps[task->shard];
        for (uint32_t k = 0; k < task->nreads; k++) {
            reader_read *rd = &task->reads[k];
            memcpy(rd->dst, map + rd->off, rd->len);
            rd->done = rd->len;
        }
    }
    return 0;
}

/* One guard per claim rather than per record: arming it (sigsetjmp, two
 * updates of the thread's key, an indirect call) is a measurable share of
 * copying a 784-byte record from the page cache, and nothing per claim
 * (README, "Small records"). A fault fails the task it hit, and the copy goes
 * on with the next. */
static void mmap_claim(sf_reader *r, reader_task *const *tasks, unsigned n)
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

static void mmap_run(reader_io_thread *t)
{
    copy_run(t, mmap_copy, mmap_claim);
}

const reader_engine_ops reader_engine_mmap = {
    .name = "mmap",
    .open = mmap_open,
    .close = mmap_close,
    .run = mmap_run,
};
