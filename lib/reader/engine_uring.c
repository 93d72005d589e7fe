/* The io_uring engine: one ring per I/O thread, the shard files registered,
 * the slab registered as fixed buffers (one per slot, or 1 GiB pieces), and
 * READ_FIXED straight into each sample's place in its slot. Short reads
 * resubmit the remainder; -EAGAIN and -EINTR resubmit the read.
 *
 * Registration pins memory and counts against RLIMIT_MEMLOCK for users
 * without CAP_IPC_LOCK: where the limit refuses the whole slab, each ring
 * registers its share of it (memlock_share), in slots where one fits the
 * share and in smaller pieces where not, and reads the rest with plain IORING_OP_READ into the same slab,
 * saying once on stderr how much was registered and how to raise the limit.
 *
 * With checksums on, buffered reads go in pieces of SF_HASH_CHUNK bytes and
 * each piece is fed to its record's hash as soon as its completion is
 * reaped, while the bytes are still in L2 (a cached read is copied during
 * the submission that precedes the reap), not in a second pass over the
 * record from memory; a record's reads land in any order, so each record
 * being read keeps a hash state of its own (landing_*). */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "error_internal.h"
#include "hash.h"
#include "reader_internal.h"

#define MAX_REG_BUFS 1024u /* UIO_MAXIOV */
#define MAX_REG_BUF (1ull << 30)

typedef struct uring_req {
    reader_task *task;
    uint32_t k; /* read index within the task */
} uring_req;

typedef struct uring_thread {
    struct io_uring ring;
    int ring_ok;
    unsigned qd;
    int fixed_files;
    uint64_t chunk;  /* bytes per registered buffer */
    unsigned nbufs;  /* buffers registered: [slab + i*chunk, +chunk), i < nbufs */
    uring_req *reqs;
    unsigned *free_reqs, nfree;
    uring_req **retry; /* reads to resubmit (short, -EAGAIN, -EINTR) */
    unsigned nretry;
    reader_task **pend; /* claimed tasks with reads not yet submitted (FIFO) */
    unsigned pend_head, pend_count;
    /* Tasks claimed and not yet finished, each holding its shard's
     * descriptor or about to (below), and the most this ring may have.
     * Each pins a descriptor until its reads finish, and only idle ones can
     * be closed: a ring of queue depth 128 claimed up to 256 at once, and
     * 4 such rings over a global shuffle of thousands of shards ran out
     * of descriptors under `ulimit -n 256`.
     * Where the dataset keeps every shard open there is no limit; else the
     * rings share the dataset's cap (its share of the process's budget,
     * which shrinks when another dataset opens: read at each claim). */
    unsigned open_tasks;
    /* Of those, the tasks whose shard is open: a task opens its shard when
     * it reaches the FIFO's head, not at its claim. A URL's shard may have
     * to wait for room in the cache, which this ring's own open shards may
     * be taking: with a cache of two shards, a ring that opened two tasks
     * of two shards at their claim waited for itself on the third until
     * the cache's wait (120 s) ran out. So with any open, a shard that
     * would wait is not waited for (reader_task_try_open): the ring
     * finishes its reads first (`draining`), then opens it waiting. */
    unsigned holding;
    int draining;
    uint64_t unsubmitted; /* bytes of reads prepared and not yet submitted */
    /* Hash states for the records being read (landing_*): a record holds
     * one from its shard's open to its finish, which is at most qd records
     * (each open one has a read in flight or is the FIFO's head); 2 qd of
     * them were sized when records took theirs at their claim. */
    XXH3_state_t **states;
    unsigned nstates, nfree_states;
} uring_thread;

static int ring_init(struct io_uring *ring, unsigned qd)
{
    /* Optional setup flags first, then without them (fio's probing). */
    static const unsigned tries[] = {
#ifdef IORING_SETUP_DEFER_TASKRUN
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
#endif
#ifdef IORING_SETUP_COOP_TASKRUN
        IORING_SETUP_COOP_TASKRUN,
#endif
        0};
    int rc = -EINVAL;
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        rc = io_uring_queue_init(qd, ring, tries[i]);
        if (rc != -EINVAL)
            break;
    }
    return rc;
}

static void memlock_notice(uint64_t slab_bytes, uint64_t registered, uint64_t piece, int rc)
{
    static atomic_int said;
    if (atomic_exchange(&said, 1))
        return;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(lim, sizeof lim, "unlimited");
        else
            snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)(rl.rlim_cur >> 10));
    }
    fprintf(stderr,
            "shardfeed: io_uring registered %llu KiB of the %llu KiB batch slab (in pieces of "
            "%llu KiB; %s; RLIMIT_MEMLOCK is %s): the rest is read without fixed buffers; "
            "raise the limit (ulimit -l unlimited, systemd LimitMEMLOCK=infinity, docker "
            "--ulimit memlock=-1) for zero-copy registered reads\n",
            (unsigned long long)(registered >> 10), (unsigned long long)(slab_bytes >> 10),
            (unsigned long long)(piece >> 10), rc ? sf_strerror(rc) : "at most 1024 buffers", lim);
}

/* Registers the slab's first buffers of `piece` bytes, at most `max` of
 * them (0: no bound but the kernel's), as many as the kernel takes (halving
 * the count on failure); returns how many, with *rc the error that refused
 * more (0: none did). */
static unsigned register_pieces(uring_thread *u, uint8_t *slab, uint64_t slab_bytes,
                                uint64_t piece, uint64_t max, int *rc)
{
    uint64_t total = (slab_bytes + piece - 1) / piece;
    if (max && total > max)
        total = max;
    unsigned want = total > MAX_REG_BUFS ? MAX_REG_BUFS : (unsigned)total;
    struct iovec *iov = calloc(want, sizeof *iov);
    *rc = -ENOMEM;
    unsigned m = want;
    if (!iov)
        return 0;
    for (unsigned i = 0; i < want; i++) {
        uint64_t off = (uint64_t)i * piece;
        iov[i].iov_base = slab + off;
        iov[i].iov_len = slab_bytes - off < piece ? slab_bytes - off : piece;
    }
    int refused = 0; /* why the whole of it was not taken */
    for (; m > 0; m /= 2) {
        *rc = io_uring_register_buffers(&u->ring, iov, m);
        if (*rc == 0)
            break;
        if (!refused)
            refused = *rc;
    }
    free(iov);
    int ok = *rc == 0;
    *rc = refused;
    return ok ? m : 0;
}

/* A ring's share of RLIMIT_MEMLOCK once the limit has refused a whole
 * registration: half of it divided among the rings (every ring registers the
 * slab again, and the rings' own memory may count too), in whole pages; 0
 * when the limit is unlimited or too small for a page. Shared out, every
 * ring gets some, whichever registers first (they register at once, in their
 * threads). */
static uint64_t memlock_share(uint32_t rings)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (uint64_t)rl.rlim_cur / 2 / (rings ? rings : 1) / page * page;
}

/* Pieces that fit RLIMIT_MEMLOCK: a quarter of it, and no more than a ring's
 * share, in whole pages. */
static uint64_t memlock_piece(uint64_t share)
{
    struct rlimit rl;
    if (!share || getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return 0;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t quarter = (uint64_t)rl.rlim_cur / 4 / page * page;
    return quarter < share ? quarter : share;
}

/* One buffer per slot (1 GiB pieces of larger slots) first: reads never
 * straddle two. Where RLIMIT_MEMLOCK refuses that (it counts for users
 * without CAP_IPC_LOCK, and a slot may be larger than the whole limit),
 * smaller pieces that fit it: part of the slab is registered rather than
 * none. */
static void register_slab(reader_io_thread *t, uring_thread *u)
{
    sf_reader *r = t->r;
    uint64_t piece = r->layout.slot_bytes <= MAX_REG_BUF ? r->layout.slot_bytes : MAX_REG_BUF;
    int rc;
    unsigned n = register_pieces(u, r->slab, r->slab_bytes, piece, 0, &rc);
    uint64_t share = memlock_share(r->nthreads_wanted);
    if ((uint64_t)n * piece < r->slab_bytes && rc == -ENOMEM && share) {
        /* The limit binds (no CAP_IPC_LOCK): each ring takes its share, in
         * slots where one fits it, else in smaller pieces. */
        if (n)
            io_uring_unregister_buffers(&u->ring);
        int refused = rc; /* what the notice says: the limit refused the whole */
        if (piece > share)
            piece = memlock_piece(share);
        n = piece ? register_pieces(u, r->slab, r->slab_bytes, piece, share / piece, &rc) : 0;
        if (!rc)
            rc = refused;
        if (!n)
            piece = r->layout.slot_bytes <= MAX_REG_BUF ? r->layout.slot_bytes : MAX_REG_BUF;
    }
    u->chunk = piece;
    u->nbufs = n;
    uint64_t bytes = (uint64_t)n * piece;
    if (bytes > r->slab_bytes)
        bytes = r->slab_bytes;
    if (bytes < r->slab_bytes)
        memlock_notice(r->slab_bytes, bytes, piece, rc);
    pthread_mutex_lock(&r->lock);
    if (bytes < r->registered)
        r->registered = bytes;
    pthread_mutex_unlock(&r->lock);
}

static void uring_thread_fini(reader_io_thread *t)
{
    uring_thread *u = t->ctx;
    if (!u)
        return;
    if (u->ring_ok) {
        /* Unregistered first: that gives the pinned memory back to the
         * user's RLIMIT_MEMLOCK count at once, where the ring's own exit
         * does it later, on the kernel's workqueue, and a reader started
         * right after (a new Loader, the next run of a script) found it
         * still counted and registered nothing. */
        if (u->nbufs)
            io_uring_unregister_buffers(&u->ring);
        io_uring_queue_exit(&u->ring);
    }
    for (unsigned i = 0; i < u->nstates; i++)
        XXH3_freeState(u->states[i]);
    free(u->states);
    free(u->reqs);
    free(u->free_reqs);
    free(u->retry);
    free(u->pend);
    free(u);
    t->ctx = NULL;
}

/* How many more tasks this ring may claim now (uring_thread.open_tasks). */
static unsigned open_room(const uring_thread *u, const sf_reader *r)
{
    if (dataset_fd_all_kept(r->ds))
        return UINT_MAX - u->open_tasks;
    uint64_t share = dataset_fd_cap(r->ds) / (r->nthreads_wanted ? r->nthreads_wanted : 1);
    if (share < 1)
        share = 1;
    return u->open_tasks >= share ? 0 : (unsigned)(share - u->open_tasks < UINT_MAX ? share - u->open_tasks : UINT_MAX);
}

static int uring_thread_init(reader_io_thread *t)
{
    sf_reader *r = t->r;
    uring_thread *u = calloc(1, sizeof *u);
    if (!u)
        return sf_fail(-ENOMEM, "out of memory");
    t->ctx = u;
    u->qd = r->opts.queue_depth;
    u->reqs = calloc(u->qd, sizeof *u->reqs);
    u->free_reqs = calloc(u->qd, sizeof *u->free_reqs);
    u->retry = calloc(u->qd, sizeof *u->retry);
    u->pend = calloc(u->qd, sizeof *u->pend);
    if (!u->reqs || !u->free_reqs || !u->retry || !u->pend)
        return sf_fail(-ENOMEM, "out of memory");
    if (r->opts.verify == SF_VERIFY_ON) {
        if (!(u->states = calloc(2 * (size_t)u->qd, sizeof *u->states)))
            return sf_fail(-ENOMEM, "out of memory");
        for (; u->nstates < 2 * u->qd; u->nstates++)
            if (!(u->states[u->nstates] = XXH3_createState()))
                return sf_fail(-ENOMEM, "out of memory");
        u->nfree_states = u->nstates;
    }
    for (unsigned i = 0; i < u->qd; i++)
        u->free_reqs[i] = u->qd - 1 - i;
    u->nfree = u->qd;
    int rc = ring_init(&u->ring, u->qd);
    if (rc == -ENOMEM) {
        /* A ring's memory may count against RLIMIT_MEMLOCK (always before
         * Linux 5.12, and here on 6.18 without CAP_IPC_LOCK): the usual
         * cause, where the message said only ENOMEM. */
        struct rlimit ml;
        char limit[48] = "unlimited";
        if (getrlimit(RLIMIT_MEMLOCK, &ml) == 0 && ml.rlim_cur != RLIM_INFINITY)
            snprintf(limit, sizeof limit, "%llu KiB", (unsigned long long)ml.rlim_cur / 1024);
        return sf_fail(rc,
                       "io_uring_queue_init (queue depth %u): %s (RLIMIT_MEMLOCK is %s, which "
                       "a ring's memory may count against: raise it, ulimit -l, or use "
                       "engine pread)",
                       u->qd, sf_strerror(rc), limit);
    }
    if (rc)
        return sf_fail(rc, "io_uring_queue_init: %s", sf_strerror(rc));
    u->ring_ok = 1;

    /* Registered files: the fd set this reader reads from, indexed by shard,
     * when the dataset keeps them all open (a few hundred shards or fewer);
     * otherwise each read names the descriptor its task holds. */
    uint64_t count = r->ds->manifest.shard_count;
    if (count && count <= INT32_MAX && dataset_fd_all_kept(r->ds)) {
        int *fds = malloc(count * sizeof *fds);
        int err = fds ? 0 : -ENOMEM;
        for (uint64_t i = 0; i < count && !err; i++)
            if (!(err = dataset_fd_acquire(&fds[i], r->ds, i, r->direct)))
                dataset_fd_release(r->ds, i, r->direct); /* kept open until close */
        if (!err)
            u->fixed_files = io_uring_register_files(&u->ring, fds, (unsigned)count) == 0;
        free(fds);
    }
    register_slab(t, u);
    return 0;
}

static unsigned submit_read(reader_io_thread *t, uring_thread *u, uring_req *q)
{
    sf_reader *r = t->r;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        /* The SQ holds qd entries and at most qd reads are outstanding, so
         * this only happens when earlier ones were not submitted yet. */
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    reader_task *task = q->task;
    reader_read *rd = &task->reads[q->k];
    uint64_t left = rd->len - rd->done, most = task->landing ? SF_HASH_CHUNK : SF_IO_CHUNK;
    unsigned len = (unsigned)(left < most ? left : most);
    uint8_t *dst = rd->dst + rd->done;
    uint64_t off = rd->off + rd->done;
    int fd = u->fixed_files ? (int)task->file_idx : task->fd;
    uint64_t rel = (uint64_t)(dst - r->slab), idx = rel / u->chunk;
    if (idx < u->nbufs && len && (rel + len - 1) / u->chunk == idx)
        io_uring_prep_read_fixed(sqe, fd, dst, len, off, (int)idx);
    else
        io_uring_prep_read(sqe, fd, dst, len, off);
    if (u->fixed_files)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, q);
    return len;
}

static void pend_pop(uring_thread *u)
{
    u->pend_head = (u->pend_head + 1) % u->qd;
    u->pend_count--;
}

static void req_free(uring_thread *u, uring_req *q)
{
    u->free_reqs[u->nfree++] = (unsigned)(q - u->reqs);
}

/* Gives a task about to be read a hash state for hashing on landing, where
 * checksums are on (the pool is empty otherwise) and its reads are buffered
 * (O_DIRECT reads land in memory by DMA: no cache to catch them in); sets
 * task->landing either way (a task is reused batch after batch). */
static void landing_begin(uring_thread *u, reader_task *task)
{
    task->landing = NULL;
    if (!u->nfree_states || task->fd_direct)
        return;
    task->landing = u->states[--u->nfree_states];
    task->landing_k = 0;
    task->landing_off = 0;
    XXH3_64bits_reset(task->landing);
}

/* Feeds the task's hash whatever has landed in order since the last call:
 * the rest of read landing_k, and the reads after it, as far as they have
 * landed. */
static void landing_hash(sf_reader *r, reader_task *task)
{
    uint64_t t0 = reader_now_ns();
    while (task->landing_k < task->nreads) {
        const reader_read *rd = &task->reads[task->landing_k];
        if (task->landing_off < rd->done) {
            XXH3_64bits_update(task->landing, rd->dst + task->landing_off, rd->done - task->landing_off);
            task->landing_off = rd->done;
        }
        if (task->landing_off < rd->len)
            break;
        task->landing_k++;
        task->landing_off = 0;
    }
    reader_account_time(r, 0, reader_now_ns() - t0);
}

/* The task's digest when every byte was hashed on landing (else the
 * checks hash it: reader_task_done), and its state back to the pool. */
static void landing_end(reader_io_thread *t, uring_thread *u, reader_task *task)
{
    if (!task->landing)
        return;
    if (!task->err) {
        landing_hash(t->r, task);
        if (task->landing_k == task->nreads) {
            task->digest = XXH3_64bits_digest(task->landing);
            task->hashed = 1;
        }
    }
    u->states[u->nfree_states++] = task->landing;
    task->landing = NULL;
}

/* A task's reads are all done: its digest, its shard back, then its checks. */
static void task_finish(reader_io_thread *t, uring_thread *u, reader_task *task)
{
    landing_end(t, u, task);
    reader_task_close(t->r, task);
    assert(u->open_tasks > 0 && u->holding > 0);
    u->open_tasks--;
    if (--u->holding == 0)
        u->draining = 0;
    reader_task_done(t, task);
}

/* One read finished (successfully or not) for good. */
static void req_finish(reader_io_thread *t, uring_thread *u, uring_req *q)
{
    reader_task *task = q->task;
    req_free(u, q);
    if (--task->inflight == 0 && task->next_read == task->nreads)
        task_finish(t, u, task);
}

static void req_fail(reader_io_thread *t, uring_thread *u, uring_req *q, int err)
{
    reader_task *task = q->task;
    reader_task_fail(t->r, task, err, "read failed");
    /* Submit nothing more for it; it can only be the FIFO's head. */
    if (task->next_read < task->nreads) {
        task->next_read = task->nreads;
        if (u->pend_count && u->pend[u->pend_head] == task)
            pend_pop(u);
    }
    req_finish(t, u, q);
}

static void complete(reader_io_thread *t, uring_thread *u, struct io_uring_cqe *cqe)
{
    uring_req *q = io_uring_cqe_get_data(cqe);
    reader_read *rd = &q->task->reads[q->k];
    int res = cqe->res;
    if (res == -EAGAIN || res == -EINTR) {
        u->retry[u->nretry++] = q;
    } else if (res < 0) {
        req_fail(t, u, q, res);
    } else if (res == 0) {
        req_fail(t, u, q, SF_E_TRUNCATED);
    } else {
        rd->done += (uint64_t)res;
        if (q->task->landing)
            landing_hash(t->r, q->task); /* while it is in cache */
        if (rd->done < rd->len)
            u->retry[u->nretry++] = q; /* short read: the remainder */
        else
            req_finish(t, u, q);
    }
}

static void reap(reader_io_thread *t, uring_thread *u)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&u->ring, head, cqe)
    {
        complete(t, u, cqe);
        seen++;
    }
    io_uring_cq_advance(&u->ring, seen);
}

static void enter(reader_io_thread *t, uring_thread *u, int wait)
{
    uint64_t t0 = reader_now_ns();
    int rc;
    do
        rc = wait ? io_uring_submit_and_wait(&u->ring, 1) : io_uring_submit_and_get_events(&u->ring);
    while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
    reader_account_time(t->r, reader_now_ns() - t0, 0);
    u->unsubmitted = 0;
    reap(t, u);
}

static void uring_run(reader_io_thread *t)
{
    sf_reader *r = t->r;
    uring_thread *u = t->ctx;
    for (;;) {
        /* Resubmissions first, then new reads while there is room. */
        while (u->nretry)
            u->unsubmitted += submit_read(t, u, u->retry[--u->nretry]);
        while (u->nfree) {
            if (!u->pend_count) {
                int idle = u->nfree == u->qd && !u->nretry;
                /* At the limit, some task's reads are in flight: their
                 * completions make room (enter() waits for them). */
                unsigned room = open_room(u, r);
                assert(room > 0 || !idle);
                if (!room)
                    break;
                reader_task **slot = u->pend;
                unsigned got = reader_claim(r, slot, u->nfree < room ? u->nfree : room, idle);
                if (!got) {
                    if (idle)
                        return; /* stop, and nothing in flight */
                    break;
                }
                if (got > 1 && got <= READER_GROUP_MAX && dataset_maps_follow_pins(r->ds)) {
                    /* At a URL: in runs of one shard (engine_pread.c, pread_claim). */
                    reader_task *grouped[READER_GROUP_MAX];
                    reader_group_by_shard(grouped, slot, got);
                    memcpy(slot, grouped, got * sizeof *slot);
                }
                u->pend_head = 0;
                for (unsigned i = 0; i < got; i++) {
                    if (slot[i]->nreads == 0) {
                        reader_task_done(t, slot[i]); /* inline fields only */
                        continue;
                    }
                    u->open_tasks++; /* counted from its claim: it will open */
                    u->pend[u->pend_count++] = slot[i];
                }
                continue;
            }
            reader_task *task = u->pend[u->pend_head];
            if (task->fd < 0) {
                if (u->draining)
                    break; /* until this ring's open shards are back */
                int rc = u->holding ? reader_task_try_open(r, task, r->direct)
                                    : reader_task_open(r, task, r->direct);
                if (rc == -EAGAIN && u->holding) {
                    u->draining = 1;
                    break;
                }
                if (rc) {
                    pend_pop(u);
                    u->open_tasks--;
                    reader_task_open_failed(r, task, rc);
                    reader_task_done(t, task);
                    continue;
                }
                u->holding++;
                landing_begin(u, task);
            }
            uint32_t k = task->next_read++;
            if (task->next_read == task->nreads)
                pend_pop(u);
            if (task->reads[k].len == 0) { /* an empty variable-length value */
                if (task->inflight == 0 && task->next_read == task->nreads)
                    task_finish(t, u, task);
                continue;
            }
            uring_req *q = &u->reqs[u->free_reqs[--u->nfree]];
            q->task = task;
            q->k = k;
            task->inflight++;
            u->unsubmitted += submit_read(t, u, q);
            /* Cached data is copied during submission: submitting every
             * SF_HASH_CHUNK bytes and reaping at once lets the record be
             * hashed while it is still in L2; uncached reads simply stay in
             * flight, up to queue_depth of them. */
            if (u->unsubmitted >= SF_HASH_CHUNK)
                enter(t, u, 0);
        }
        while (u->nretry)
            u->unsubmitted += submit_read(t, u, u->retry[--u->nretry]);
        if (u->nfree == u->qd && !u->unsubmitted)
            continue;
        enter(t, u, u->nfree < u->qd);
    }
}

const reader_engine_ops reader_engine_uring = {
    .name = "uring",
    .thread_init = uring_thread_init,
    .thread_fini = uring_thread_fini,
    .run = uring_run,
};
