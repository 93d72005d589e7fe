/* Engine selection and the I/O threads: which engine reads a dataset
 * (io_uring, pread, or mmap for small records already in the page cache, by
 * a mincore sample of the shards), how many threads, starting them (each
 * with its scratch) and stopping them. The engines themselves are
 * engine_uring.c and engine_pread.c behind reader_engine_ops. */
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error_internal.h"
#include "reader_internal.h"

static unsigned ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

int reader_small_records(const sf_reader *r)
{
    const sf_schema *sc = r->schema;
    if (r->compressed || sc->n_var)
        return 0;
    uint64_t per = 0;
    for (uint32_t f = 0; f < sc->field_count; f++)
        per += sc->fields[f].storage == SF_STORAGE_FIXED ? sc->fields[f].item_size : 0;
    return per <= SF_SMALL_RECORD;
}

/* Whether every record's stored payload is small (at most SF_SMALL_RECORD
 * bytes): reader_small_records, or for compressed fixed-size fields the
 * most any record stores (stored_max, from the index at open). Warm, such records cost a system call each with pread:
 * the Fashion-MNIST set with its images zstd-compressed read at 258-274 k
 * samples/s with pread and 368-426 k with mmap, interleaved (README
 * "Engines"); in the profile of the pread runs the kernel takes 43% (the
 * hypervisor's pvm_irq_enable 15%, the page-cache copy and lookup 16%),
 * libzstd 34%. */
static int small_stored_records(const sf_reader *r)
{
    if (!r->compressed)
        return reader_small_records(r);
    const sf_schema *sc = r->schema;
    for (uint32_t f = 0; f < sc->field_count; f++)
        if (sc->fields[f].storage == SF_STORAGE_VARIABLE)
            return 0;
    return r->stored_max <= SF_SMALL_RECORD;
}

/* Warm (page-cache) reads are memcpy-bound, so the defaults aim at keeping
 * every core copying: see the measurements in the bench notes. The copy
 * engines run two threads per core, except on small records: a thread then
 * claims a whole batch, so one per core keeps every core copying, and more
 * only took turns with each other and with the consumer (Fashion-MNIST on
 * 2 cores: 2 threads delivered 8-33% more samples/s than 4, from C and from
 * Python, with pread and with mmap). */
static uint32_t default_threads(const sf_reader *r, const reader_engine_ops *e)
{
    unsigned n = ncpu();
    /* Decoding images is CPU work, not copying: one thread per core (more
     * only took turns; transform.c). */
    if (r->images)
        return n > 16 ? 16 : n;
    /* Range requests wait on the network, not the CPU: the threads are the
     * requests in flight. */
    if (e == &reader_engine_ranges)
        return 16;
    /* Small compressed records from the maps (warm) go a claim at a time
     * too (staged.c), and decompressing them is CPU work: on the compressed
     * Fashion-MNIST set 2 threads delivered 11% more than 4 (README
     * "Compressed records a claim at a time"). With pread (cold data) a
     * thread waits on the disk per record: those keep two per core. */
    if (e == &reader_engine_uring || reader_small_records(r) ||
        (e == &reader_engine_mmap && reader_staged_claim_max(r)))
        return n < 2 ? 2 : n > 8 ? 8 : n;
    return n < 2 ? 4 : n > 8 ? 16 : 2 * n;
}

static void *io_main(void *arg)
{
    reader_io_thread *t = arg;
    sf_reader *r = t->r;
    /* Named for top -H, perf and gdb (and the tests, which wait for open to
     * end by this thread's appearance: tests/reliability/truncation.py). */
    pthread_setname_np(pthread_self(), "sf-io");
    reader_trace_io_thread(t->idx);
    int rc = reader_scratch_init(&t->scratch, r);
    if (!rc && r->engine->thread_init)
        rc = r->engine->thread_init(t);
    if (rc)
        snprintf(t->errmsg, sizeof t->errmsg, "%s", sf_last_error());
    pthread_mutex_lock(&r->lock);
    t->init_rc = rc;
    r->threads_inited++;
    pthread_cond_broadcast(&r->ready_cv);
    pthread_mutex_unlock(&r->lock);
    if (rc == 0)
        r->engine->run(t);
    reader_trace *tr = reader_trace_on(r);
    if (tr)
        reader_trace_io_idle(tr);
    if (r->engine->thread_fini)
        r->engine->thread_fini(t);
    reader_scratch_fini(&t->scratch);
    return NULL;
}

void reader_engine_stop(sf_reader *r)
{
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i].tid, NULL);
    free(r->threads);
    r->threads = NULL;
    r->nthreads = 0;
    if (r->engine && r->engine->close)
        r->engine->close(r);
    r->engine = NULL;
}

static int start_engine(sf_reader *r, const reader_engine_ops *ops)
{
    r->engine = ops;
    r->stop = 0;
    r->threads_inited = 0;
    r->registered = ops == &reader_engine_uring ? r->slab_bytes : 0;
    uint32_t want = r->opts.io_threads ? r->opts.io_threads : default_threads(r, ops);
    int rc = ops->open ? ops->open(r) : 0;
    if (rc) {
        r->engine = NULL;
        return rc;
    }
    r->nthreads_wanted = want;
    r->threads = calloc(want, sizeof *r->threads);
    if (!r->threads) {
        reader_engine_stop(r);
        return sf_fail(-ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < want; i++) {
        reader_io_thread *t = &r->threads[i];
        t->r = r;
        t->idx = i;
        int e = pthread_create(&t->tid, NULL, io_main, t);
        if (e) {
            rc = sf_fail(-e, "cannot start I/O thread: %s", strerror(e));
            break;
        }
        r->nthreads++;
    }
    pthread_mutex_lock(&r->lock);
    while (r->threads_inited < r->nthreads)
        pthread_cond_wait(&r->ready_cv, &r->lock);
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->nthreads && !rc; i++)
        if (r->threads[i].init_rc)
            rc = sf_fail(r->threads[i].init_rc, "%s", r->threads[i].errmsg);
    if (rc)
        reader_engine_stop(r);
    return rc;
}

/* Shards whose residency is sampled: evenly spread over the dataset, so a
 * dataset of 20,000 shards is not opened whole to choose an engine. */
#define RESIDENT_SHARDS 64u

/* Whether the shards' bytes are in the page cache: a sample of up to 256
 * pages in each of up to RESIDENT_SHARDS shards (65,536 pages in all)
 * checked with mincore, on a mapping that is dropped at once. A hint for
 * the engine choice only. */
static int shards_resident(const sf_reader *r)
{
    uint64_t count = r->ds->manifest.shard_count, page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t shards = count < RESIDENT_SHARDS ? count : RESIDENT_SHARDS;
    uint64_t per = shards ? 65536 / shards : 0;
    per = per > 256 ? 256 : per < 1 ? 1 : per;
    uint64_t seen = 0, in = 0;
    for (uint64_t j = 0; j < shards; j++) {
        uint64_t i = j * count / shards;
        const sf_open_shard *sh = &r->ds->shards[i];
        uint64_t size = sh->meta.file_size, pages = (size + page - 1) / page;
        int fd;
        if (dataset_fd_acquire(&fd, r->ds, i, 0))
            return 0;
        void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        dataset_fd_release(r->ds, i, 0);
        if (map == MAP_FAILED)
            return 0;
        for (uint64_t k = 0; k < per && k < pages; k++) {
            unsigned char v = 0;
            uint64_t pg = pages <= per ? k : k * pages / per;
            if (mincore((uint8_t *)map + pg * page, page, &v) == 0) {
                seen++;
                in += v & 1;
            }
        }
        munmap(map, size);
    }
    return seen > 0 && in * 10 >= seen * 9; /* 90% resident: warm */
}

/* The mmap engine maps each shard it reads once and keeps the map until the
 * dataset closes, so a dataset of more shards than the process may have
 * maps (vm.max_map_count, 65,530 by default, shared with everything else the
 * process maps) failed with ENOMEM part-way through an epoch. The budget:
 * $SHARDFEED_MAP_LIMIT, else half of vm.max_map_count. */
static uint64_t map_budget(void)
{
    const char *env = getenv("SHARDFEED_MAP_LIMIT");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (!*end)
            return v;
    }
    unsigned long long v = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 65530;
        fclose(f);
    }
    return v / 2;
}

/* Whether every shard's map fits the budget (map_budget). */
static int maps_fit(const sf_reader *r, uint64_t *budget)
{
    *budget = map_budget();
    return r->ds->manifest.shard_count <= *budget;
}

int reader_engine_start(sf_reader *r)
{
    /* Auto, for shards already in the page cache (reader.h says the rule):
     * the reads are memcpy work, and the copy engines copy and hash each
     * piece while it is in L2, where io_uring's reads land whole and are
     * hashed afterwards from memory. Small fixed records: mmap copies a
     * whole claim with no system call per record, where io_uring and pread
     * pay one read each (about 1.5 M records/s on 2 cores against 4.7 M for
     * mmap on Fashion-MNIST; README "Small records"). Large records: mmap
     * too, whose copy from the map can be fused with the hash (hash_copy.h:
     * each stripe hashed from the register it was copied through), where
     * pread's copy is the kernel's and the hash a second pass from L2: on
     * the development VM, 602 KB records, 20 epochs, three alternating
     * rounds, 20.0-27.0 GB/s against pread's 12.7-16.9 with checksums,
     * 20.7-31.1 against 17.7-20.4 without (README "Engines", "Checksums at
     * the copy's speed"). Its first epoch pays a page fault per few pages of each
     * map, costly in that VM (shadow paging: 0.17 s against pread's 0.075 s
     * for 1.2 GB), once per open. Records with compressed fields other than
     * small ones stay with pread, whose staged reads mmap does not speed up.
     * Cold data (and O_DIRECT) keeps io_uring, whose reads the kernel can
     * queue. */
    /* A dataset at a URL: its records by range requests (mode direct), or
     * its shards from the cache, taken as warm (no residency to sample: that
     * would download shards): small stored records by mmap where every
     * shard fits among the pins the dataset keeps (dataset_files_pins_last),
     * the rest by pread. A map there lasts only while its shard is pinned in
     * the cache (dataset_maps_follow_pins): where shards lose their pins
     * between reads, each read maps its shard again and faults its pages in
     * again (66 shards of 800 KiB with 32 pins kept: 10 warm epochs 13.8 s
     * by mmap, 10.7 s by pread). Large records stay with pread even then:
     * the cache's files are written in 128 KiB pieces and mapped in small
     * pages, whose faults made a first epoch from a filled cache 0.38 s by
     * mmap against 0.09 s by pread (1.2 GB, 2026-12-04). */
    if (dataset_remote_direct(r->ds))
        return start_engine(r, &reader_engine_ranges);
    uint64_t budget;
    int fit = maps_fit(r, &budget);
    if (r->ds->remote && r->opts.engine == SF_ENGINE_AUTO)
        return start_engine(r, small_stored_records(r) && fit && dataset_files_pins_last(r->ds)
                                   ? &reader_engine_mmap
                                   : &reader_engine_pread);
    if (r->opts.engine == SF_ENGINE_AUTO && !r->direct && shards_resident(r))
        return start_engine(r, (small_stored_records(r) || !r->compressed) && fit
                                   ? &reader_engine_mmap
                                   : &reader_engine_pread);
    if (r->opts.engine == SF_ENGINE_MMAP && !fit)
        return sf_fail(SF_E_UNSUPPORTED,
                       "%s: %llu shards, and the mmap engine keeps a map of each it reads until the "
                       "dataset closes: more than the %llu maps allowed (half of vm.max_map_count, or "
                       "$SHARDFEED_MAP_LIMIT); use the pread or uring engine",
                       r->ds->dir, (unsigned long long)r->ds->manifest.shard_count,
                       (unsigned long long)budget);
    /* A record with compressed fields is read whole into a staging buffer
     * and decompressed by the thread that read it (staged.c): synchronous
     * work per record, which the copy engines do; io_uring's asynchronous
     * reads straight into the slot have nothing to offer it. */
    if (r->compressed && r->opts.engine != SF_ENGINE_MMAP)
        return start_engine(r, &reader_engine_pread);
    switch (r->opts.engine) {
    case SF_ENGINE_URING: return start_engine(r, &reader_engine_uring);
    case SF_ENGINE_PREAD: return start_engine(r, &reader_engine_pread);
    case SF_ENGINE_MMAP: return start_engine(r, &reader_engine_mmap);
    default: break;
    }
    int rc = start_engine(r, &reader_engine_uring);
    if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES || rc == -ENOMEM) {
        static atomic_int said;
        if (!atomic_exchange(&said, 1))
            fprintf(stderr, "shardfeed: io_uring is not available (%s%s): using the pread engine\n",
                    sf_strerror(rc),
                    rc == -ENOMEM ? "; its rings count against RLIMIT_MEMLOCK: raise it with ulimit -l"
                                  : "; containers often block it with seccomp");
        rc = start_engine(r, &reader_engine_pread);
    }
    return rc;
}

/* reader_group_by_shard's table of the shards a claim touches: a power of two at
 * least twice READER_GROUP_MAX, so that probes stay short. */
#define GROUP_SLOTS (2 * READER_GROUP_MAX)
#define GROUP_SLOT_BITS 9u
_Static_assert(GROUP_SLOTS == 1u << GROUP_SLOT_BITS, "GROUP_SLOT_BITS names GROUP_SLOTS");

/* O(n): each shard gets its group's number from a small open-addressing
 * table, then a counting pass places every task after the earlier ones of
 * its group. (Scanning the claim once per group, as before, was 12% of a
 * warm epoch's time over 13 cached shards at 256 records a claim.) */
void reader_group_by_shard(reader_task **out, reader_task *const *tasks, unsigned n)
{
    assert(n <= READER_GROUP_MAX);
    uint64_t key[GROUP_SLOTS];
    uint16_t group_at[GROUP_SLOTS];
    uint8_t used[GROUP_SLOTS] = {0};
    uint16_t group_of[READER_GROUP_MAX], next[READER_GROUP_MAX + 1] = {0};
    unsigned groups = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t shard = tasks[i]->shard;
        unsigned h = (unsigned)((shard * 0x9E3779B97F4A7C15ull) >> (64 - GROUP_SLOT_BITS));
        while (used[h] && key[h] != shard)
            h = (h + 1) & (GROUP_SLOTS - 1);
        if (!used[h]) {
            used[h] = 1;
            key[h] = shard;
            group_at[h] = (uint16_t)groups++;
        }
        group_of[i] = group_at[h];
        next[group_of[i] + 1]++;
    }
    for (unsigned g = 0; g < groups; g++)
        next[g + 1] += next[g]; /* next[g]: where group g's first task goes */
    for (unsigned i = 0; i < n; i++)
        out[next[group_of[i]]++] = tasks[i];
    assert(groups == 0 || next[groups - 1] == n);
}
