/* The streaming reader's internals, shared by the files of lib/reader, one
 * job each:
 *
 *   reader.c        the reader's life: open (the jobs below, in order), close
 *   options.c       options: defaults and ranges
 *   direct.c        the O_DIRECT policy; a task's shard descriptor
 *   engine.c        engine selection (mincore residency), the I/O threads
 *   engine_uring.c  the io_uring engine
 *   engine_pread.c  the pread and mmap engines, and ranges (a dataset at a
 *                   URL in mode direct)
 *   slab.c          the slab: the slot layout and the one mapping
 *   slots.c         a slot's arrays; where each sample of a batch goes in it
 *   schedule.c      the slot life cycle: scheduling, claims, the batch-ready
 *                   point, delivery and release
 *   records.c       record checks, failed reads, substitution of corrupt samples
 *   staged.c        records with compressed fields: staging, decompression
 *   transform.c     image fields: decode, crop, resize into the slot (lib/image)
 *   device.c        device delivery, the reader's side (device.h: the
 *                   interface; device_host.c, device_cuda.c: implementations)
 *   stats.c         statistics and the verdict
 *   sampler.c       the order of samples (sampler.h)
 *   trace.c         tracing (trace.h)
 *
 * Pipeline. The slab holds K slots, each in one state of its life cycle
 * (below, at enum reader_slot_state). The scheduler (under r->lock) gives free slots
 * to the next batches of the schedule position, in order, and prepares one
 * task per sample: where each payload field lies in the shard file and where
 * it goes in the slot. I/O threads claim tasks in batch order and read them
 * through the engine; when a task's reads are done the thread hashes it
 * (reader_task_done); the thread finishing a slot's last task runs the
 * batch-ready point (substitution of corrupt samples, the device copy)
 * and marks the slot READY. sf_reader_next hands slots out in (epoch, index)
 * order.
 *
 * A reposition (set_epoch, restore, an error) bumps r->gen: slots loading for
 * the old generation give back their unclaimed tasks and are freed as soon
 * as their claimed reads finish; held slots stay valid.
 */
#ifndef SF_READER_INTERNAL_H
#define SF_READER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "dataset_internal.h"
#include "device.h"
#include "sampler.h"
#include "trace.h"
#include "shardfeed/reader.h"

#define SF_DIRECT_ALIGN 4096u /* O_DIRECT granularity we require (safe for 512e/4Kn) */
/* on_corrupt = skip: the samples after a damaged one tried as its stand-in
 * (damaged, or too long to fit) before giving up (records.c), and the
 * samples Decode without a size looks through for an intact first image
 * (transform.c). */
#define READER_SUBST_MAX_TRIES 4096u
#define SF_IO_CHUNK (1u << 30) /* largest single read we submit */
/* Engines that copy synchronously (pread, mmap) copy and hash in pieces of
 * this size, so each piece is hashed while it is still in L2. */
#define SF_HASH_CHUNK (256u << 10)

/* One read of one payload field of one sample. */
typedef struct reader_read {
    uint64_t off;  /* file offset */
    uint64_t len;  /* bytes */
    uint64_t done; /* bytes read so far (engines resubmit the remainder) */
    uint8_t *dst;  /* in the slab */
    uint64_t out_len; /* bytes the value takes at dst: len, or its decompressed size */
} reader_read;

typedef struct reader_slot reader_slot;

/* One sample of a batch being loaded. */
typedef struct reader_task {
    reader_slot *slot;
    uint32_t pos;       /* position in the batch */
    uint32_t nreads;    /* = schema n_payload */
    uint64_t id;        /* sample id being read */
    uint64_t shard, local;
    uint64_t offset;    /* record offset in the shard file */
    uint64_t checksum;  /* expected, from the index */
    int fd;             /* buffered or O_DIRECT fd of the shard while open
                           (reader_task_open), else -1 */
    int fd_direct;      /* fd is the O_DIRECT one */
    uint32_t file_idx;  /* index of fd among the engine's files (registered file slot) */
    int err;            /* 0, or the read error */
    int corrupt;        /* 0, or why it is to be substituted (on_corrupt = SKIP): SF_E_CHECKSUM,
                         * SF_E_CORRUPT (a bad value), SF_E_TRUNCATED */
    int hashed;         /* the engine hashed the payload as it arrived: digest is set */
    uint64_t digest;
    uint32_t next_read; /* engine use: first read not yet submitted */
    uint32_t inflight;  /* engine use: reads submitted and not completed */
    /* engine use (io_uring): the record hash of the bytes landed so far, in
     * order (reads before landing_k whole, landing_off bytes of read
     * landing_k), fed as each piece lands; NULL when not hashing so. */
    struct XXH3_state_s *landing;
    uint32_t landing_k;
    uint64_t landing_off;
    reader_read *reads; /* nreads entries (into slot->reads) */
} reader_task;

/* Slot life cycle. Every change of a slot's state is made under r->lock by
 * slot_set_state (schedule.c), which asserts that the slot is in `from` and
 * that the change is one of this table's.
 *
 *                 schedule_locked            batch_ready
 *        FREE ----------------------> LOADING -----------> READY
 *         ^                              |                   |  |
 *         +<-----------------------------+                   |  | sf_reader_next
 *         |  batch_ready (stale), reposition_locked          |  v
 *         +<-------------------------------------------------+ HELD
 *         |  sf_reader_next (failed batch), reposition_locked   |
 *         |                                                     | sf_reader_release,
 *         |                                                     v first lock
 *         +<-------------------------------------------- RELEASING
 *            sf_reader_release, second lock
 *
 *   from       to         by                  when
 *   FREE       LOADING    schedule_locked     the slot gets the next batch of the schedule;
 *                                             one whose copy may still read it (device_busy)
 *                                             only after an I/O thread waited for that copy
 *                                             (reader_claim): placing writes into the slot
 *   LOADING    READY      batch_ready         its samples are read, checked, substituted and
 *                                             (with a device) their copy enqueued
 *   LOADING    FREE       batch_ready         the same, but a reposition made the batch stale
 *   LOADING    FREE       reposition_locked   the reposition took back its unclaimed tasks and
 *                                             none was in flight
 *   READY      HELD       sf_reader_next      delivered to the caller
 *   READY      FREE       sf_reader_next      the batch failed: dropped with the read-ahead
 *   READY      FREE       reposition_locked   read-ahead of the old position, dropped
 *   HELD       RELEASING  sf_reader_release   the first of two locks: a concurrent second
 *                                             release of the batch finds it not HELD
 *   RELEASING  FREE       sf_reader_release   the second lock, after the device's release (the
 *                                             fence on the caller's stream), outside the lock;
 *                                             the release never waits for the copy
 *
 * r->held counts the slots in HELD or RELEASING: the caller's. */
enum reader_slot_state {
    SLOT_FREE = 0,
    SLOT_LOADING,   /* its batch's samples are being read by the I/O threads */
    SLOT_READY,     /* read and checked, waiting for sf_reader_next */
    SLOT_HELD,      /* delivered: the caller's until sf_reader_release */
    SLOT_RELEASING, /* a release is waiting for the device, outside r->lock */
    SLOT_STATES
};
/* reader_slot_next[from]: the states a slot may go to from `from`. */
#define SLOT_TO(state) (1u << (state))
static const unsigned reader_slot_next[SLOT_STATES] = {
    [SLOT_FREE] = SLOT_TO(SLOT_LOADING),
    [SLOT_LOADING] = SLOT_TO(SLOT_READY) | SLOT_TO(SLOT_FREE),
    [SLOT_READY] = SLOT_TO(SLOT_HELD) | SLOT_TO(SLOT_FREE),
    [SLOT_HELD] = SLOT_TO(SLOT_RELEASING),
    [SLOT_RELEASING] = SLOT_TO(SLOT_FREE),
};

struct reader_slot {
    uint32_t index;      /* position in r->slots */
    int state;           /* enum reader_slot_state: slot_set_state, under r->lock */
    int device_busy;     /* a device copy may still read the host slot: a FREE slot with it
                            set is not scheduled until an I/O thread has waited for that
                            copy (reader_claim), never the consumer (its release) */
    uint64_t gen;        /* r->gen when scheduled */
    uint8_t *base;       /* slot_bytes of the slab */
    sf_batch batch;      /* what the caller sees */
    sf_batch_field *fields;
    uint64_t *ids, *source_ids;
    uint64_t *var_off;   /* n_var arrays of batch_size + 1 offsets */
    reader_task *tasks;  /* batch_size */
    reader_read *reads;  /* batch_size * n_payload */
    uint32_t claimed;    /* tasks handed to I/O threads, under r->lock */
    atomic_uint remaining; /* tasks not finished (claimed or not) */
    atomic_int err;      /* first hard error of the batch */
    atomic_uint corrupt; /* tasks that failed their checksum */
    char errmsg[1024];   /* detail of err (written by the thread that set err) */
    reader_trace_batch *trec; /* this batch's trace record, or NULL (set in prepare_slot) */
    atomic_uint reads_left; /* tracing: tasks whose reads are not complete */
};

/* Where fields live inside a slot (slab.c). */
typedef struct reader_slot_layout {
    uint64_t field_off[SF_MAX_FIELDS]; /* offset of each field's array in the slot */
    uint64_t field_cap[SF_MAX_FIELDS]; /* capacity in bytes: what the largest batch needs */
    uint64_t slot_bytes;               /* page multiple */
    int exact;                         /* no variable-length field: a full batch writes every
                                          byte of a slot */
    int var_unaligned;                 /* a var field whose length in some record is not a
                                          multiple of SF_DIRECT_ALIGN, or -1 */
} reader_slot_layout;

typedef struct reader_engine_ops reader_engine_ops;
typedef struct reader_images reader_images; /* transform.c */

/* What an I/O thread hashes and decompresses with, made when the thread
 * starts (reader_scratch_init) so that nothing is allocated per record: the
 * XXH3 state of record checksums, and for a dataset with compressed fields
 * the staging buffer and ZSTD_DCtx of staged.c. */
typedef struct reader_scratch {
    void *xxh;       /* XXH3_state_t */
    void *dctx;      /* ZSTD_DCtx, or NULL when nothing is compressed */
    uint8_t *stage;  /* r->stage_bytes, or NULL */
    void *image;     /* transform.c: the thread's image buffers (image_scratch), or NULL */
} reader_scratch;

/* Per I/O thread. */
typedef struct reader_io_thread {
    struct sf_reader *r;
    unsigned idx;
    pthread_t tid;
    reader_scratch scratch; /* the thread's own, for every engine */
    void *ctx;   /* engine state (a ring, ...) */
    int init_rc; /* result of the engine's thread_init */
    char errmsg[1024]; /* its detail */
} reader_io_thread;

struct reader_engine_ops {
    const char *name;
    /* Once per reader, after the slab exists (maps, ...). May be NULL. */
    int (*open)(struct sf_reader *r);
    void (*close)(struct sf_reader *r);
    /* In the I/O thread, before it runs. Returns 0 or a negative code with
     * sf_fail detail (ENOSYS/EPERM from io_uring setup make auto fall back). */
    int (*thread_init)(reader_io_thread *t);
    void (*thread_fini)(reader_io_thread *t);
    /* The thread's loop: claim tasks with reader_claim, read them, call
     * reader_task_done for each; return when claim says stop (after all
     * reads in flight have completed). */
    void (*run)(reader_io_thread *t);
};

extern const reader_engine_ops reader_engine_uring, reader_engine_pread, reader_engine_mmap;
/* A dataset at a URL in mode direct: records by range requests (engine_pread.c). */
extern const reader_engine_ops reader_engine_ranges;

typedef struct reader_readahead reader_readahead;
/* readahead.c: posix_fadvise(WILLNEED) over the blocks of a block shuffle
 * about a window before they are read. open decides whether it is on. */
int reader_readahead_open(sf_reader *r);
void reader_readahead_close(sf_reader *r);
/* Under r->lock, after batch `index` of `epoch` was cut: queues the blocks
 * of the batches up to a window further on. */
void reader_readahead_plan_locked(sf_reader *r, uint64_t epoch, uint64_t index);
/* Under r->lock: takes up to max queued blocks for this thread to hint. */
unsigned reader_readahead_take_locked(sf_reader *r, uint64_t *blocks, unsigned max);
/* Outside the lock: hints those blocks' bytes. */
void reader_readahead_issue(sf_reader *r, const uint64_t *blocks, unsigned n);

typedef struct reader_remote_plan reader_remote_plan;
/* remote_plan.c: the shards of the batches scheduled and of those about the
 * prefetcher's reach further on, handed to a dataset at a URL in mode cache
 * (dataset_remote_plan). open decides whether it is on. */
int reader_remote_plan_open(sf_reader *r);
void reader_remote_plan_close(sf_reader *r);
/* Under r->lock, after batch `index` of `epoch` was cut (its `count` ids):
 * plans its shards, then those of the batches up to the plan's reach beyond
 * it not planned yet (a bounded walk a call). */
void reader_remote_plan_locked(sf_reader *r, uint64_t epoch, uint64_t index, const uint64_t *ids,
                               uint32_t count);

struct sf_reader {
    sf_dataset *ds;
    const sf_schema *schema;
    sf_reader_opts opts;  /* defaults resolved */
    reader_sampler *sampler;
    uint64_t num_batches;
    uint64_t order_id;    /* reader_sampler_order_id: what sf_resume_state.order_id holds */
    uint64_t n;           /* samples in the dataset */
    uint32_t batch_cap;   /* the most samples one batch holds: slots are sized for it */

    /* slab */
    reader_slot_layout layout;
    uint8_t *slab;
    uint64_t slab_bytes;
    reader_slot *slots;

    /* device delivery: the implementation and its state, NULL for the CPU */
    const reader_device_ops *device_ops;
    reader_device *device; /* opened on the slab at open */

    /* files: the dataset's (dataset_fd_acquire), O_DIRECT ones too */
    int direct;
    const char *direct_reason; /* why direct is what it is (static text) */

    /* image transforms (transform.c): NULL when none */
    reader_images *images;

    /* block shuffle's read-ahead hints (readahead.c): NULL when off;
     * under `lock` except reader_readahead_issue */
    reader_readahead *readahead;
    /* a dataset at a URL in mode cache: the schedule's plan (remote_plan.c);
     * NULL otherwise; under `lock` */
    reader_remote_plan *remote_plan;

    /* compressed fields (staged.c): set by reader_staged_plan */
    int compressed;       /* some field has a codec or an image transform: records go
                             through a staging buffer */
    uint32_t payload_field[SF_MAX_FIELDS]; /* payload position -> field */
    int8_t zvar_slot[SF_MAX_FIELDS]; /* compressed variable-length field -> column of zlen, or -1 */
    uint32_t n_zvar;
    uint32_t *zlen;       /* n × n_zvar decompressed lengths, by sample id (0: header unusable) */
    uint64_t stage_bytes; /* most compressed stored bytes in one record */
    uint64_t stored_max;  /* most stored payload bytes in one record, staged or not */

    /* engine */
    const reader_engine_ops *engine;
    reader_io_thread *threads;
    uint32_t nthreads;
    uint32_t nthreads_wanted; /* set before any starts: the threads may read it (nthreads
                               * grows as they start) */
    uint64_t registered;  /* uring: bytes of the slab registered in every ring */

    pthread_mutex_t lock;
    pthread_cond_t work_cv;  /* I/O threads wait for tasks */
    pthread_cond_t ready_cv; /* the consumer waits for a batch */
    /* Threads asleep on work_cv and ready_cv (schedule.c): a wake goes only
     * to a thread that has something to do. */
    uint32_t io_waiting, consumers_waiting;
    /* Wakes owed, given after r->lock is let go (schedule.c unlock_and_wake):
     * a thread woken while the waker still holds the lock goes straight
     * back to sleep on the lock. */
    uint32_t wake_io;
    int wake_consumer;
    int stop;
    uint32_t threads_inited;
    uint64_t gen;
    int started;          /* the first sf_reader_next has scheduled */
    int retry_waits;      /* a batch failed: nothing is scheduled until the next
                           * sf_reader_next (or a reposition) retries it */
    /* delivery position: the batch sf_reader_next returns next */
    uint64_t del_epoch, del_index;
    int restored;             /* sf_reader_restore moved the position and nothing was
                                 delivered since: set_epoch of that epoch keeps it */
    /* schedule position: the next batch to give a slot to */
    uint64_t sched_epoch, sched_index;
    uint32_t held;        /* slots HELD or RELEASING (slot_set_state keeps it) */
    /* the next epoch's order, built ahead (schedule.c) outside r->lock, a
     * slice per batch scheduled, by the I/O threads as they claim, so the
     * schedule does not stall at an epoch boundary */
    int order_ahead;       /* shuffled: orders are built ahead (set at open) */
    atomic_int order_busy; /* an I/O thread is running a slice */
    int order_pending;     /* under lock: order_want asked for and not yet taken */
    uint64_t order_want;   /* under lock */
    int order_building;    /* under lock: order_epoch's build has steps left */
    uint64_t order_epoch;  /* under lock: the epoch being built */
    uint64_t order_credit; /* under lock: steps granted and not yet run */
    uint64_t order_slice;  /* steps granted per batch scheduled */

    /* refills (schedule.c, refill_wait_locked), under lock */
    reader_slot *refilling; /* the slot whose copy an I/O thread waits for, outside the
                               lock (one at a time), or NULL */
    int refill_err;         /* such a wait failed: the next sf_reader_next says so */
    char refill_msg[384];

    /* stats */
    atomic_uint_fast64_t st_bytes, st_io_ns, st_hash_ns, st_decode_ns;
    atomic_uint_fast64_t st_devenq_ns;  /* I/O threads enqueuing device copies */
    atomic_uint_fast64_t st_devwait_ns; /* callers in sf_batch_wait and release waits */
    atomic_uint_fast64_t st_slotwait_ns; /* I/O threads waiting for a slot's previous copy */
    uint64_t st_samples, st_batches, st_subst, st_wait_ns; /* under lock, counted at delivery */
    uint64_t st_first_ns, st_last_ns; /* under lock: first sf_reader_next call, latest return */

    /* tracing (trace.h): the latest trace, older ones chained by prev */
    _Atomic(reader_trace *) trace;
};

/* ---- options.c ---- */
/* Copies `in` (NULL: the defaults) to *o with every 0 replaced by its
 * default; SF_E_INVALID naming the field when one is out of range. */
int reader_resolve_opts(sf_reader_opts *o, const sf_reader_opts *in);

/* ---- direct.c ---- */
/* Checks that every read can be O_DIRECT (SF_E_UNSUPPORTED saying why not),
 * and that the file system takes it; sets r->direct. */
int reader_direct_open(sf_reader *r);
/* Applies opts.direct: ON opens as reader_direct_open (its errors); AUTO
 * reads with O_DIRECT when the dataset is larger than the memory the page
 * cache may use and its records are 64 KiB or more (direct.c says why),
 * else buffered, never failing for it; sets r->direct_reason. */
int reader_direct_choose(sf_reader *r);
/* Opens task t's shard for its reads (t->fd; O_DIRECT with `direct`) from
 * the dataset's capped set of descriptors, until reader_task_close: 0, or a
 * negative code with detail naming the file. */
int reader_task_open(sf_reader *r, reader_task *t, int direct);
/* reader_task_open for a thread holding other tasks' shards open:
 * -EAGAIN (no detail) where the shard would wait for room in a URL's cache
 * that those shards may be taking (dataset_fd_try_acquire). */
int reader_task_try_open(sf_reader *r, reader_task *t, int direct);
void reader_task_close(sf_reader *r, reader_task *t); /* not open ok */

/* ---- engine.c ---- */
/* tasks[0..n) into out[0..n), grouped by shard: the groups in the order
 * their shards first appear in the claim (the order the cache's prefetcher
 * planned for), each group's tasks in claim order. At a URL a thread reads
 * a claim in such runs: one pin of each shard, where claim order switched
 * shards at nearly every record of a global shuffle. n at most
 * READER_GROUP_MAX. */
#define READER_GROUP_MAX 256u
void reader_group_by_shard(reader_task **out, reader_task *const *tasks, unsigned n);
/* Whether records are small: only fixed-size, uncompressed fields, at most
 * SF_SMALL_RECORD payload bytes in all. The copy engines take those a claim
 * (a batch, typically) at a time. */
#define SF_SMALL_RECORD (64u << 10)
int reader_small_records(const sf_reader *r);
/* Chooses the engine (opts, the records, whether the shards are in the page
 * cache) and starts its I/O threads; auto falls back from io_uring to pread
 * where io_uring is not available. */
int reader_engine_start(sf_reader *r);
/* Stops and joins the I/O threads (their reads in flight finish first). */
void reader_engine_stop(sf_reader *r);

/* ---- slab.c ---- */
/* Computes the slot layout for batches of at most `samples` samples (all
 * distinct): fixed fields take samples * item_size, each variable-length
 * field the largest sum of `samples` of its values (a scan of the indexes;
 * for a compressed field its decompressed lengths, r->zlen, which
 * reader_staged_plan read). */
int reader_slab_layout(reader_slot_layout *out, const sf_reader *r, uint32_t samples);
/* Maps `bytes` of page-aligned anonymous memory, pre-faulted with `populate`. */
int reader_slab_alloc(uint8_t **out, uint64_t bytes, int populate);
void reader_slab_free(uint8_t *slab, uint64_t bytes);

/* ---- slots.c ---- */
/* The most samples one batch holds (slots are sized for it): batch_size,
 * or fewer when the only batch is short. */
uint32_t reader_batch_cap(const sf_reader *r);
/* Allocates every slot's arrays and points its batch's fields into the
 * slab; reader_slots_free frees them (none made ok). */
int reader_slots_init(sf_reader *r);
void reader_slots_free(sf_reader *r);
/* The batch_cap + 1 offsets of variable-length field f in slot s. */
uint64_t *reader_slot_var_off(const sf_reader *r, const reader_slot *s, uint32_t f);
/* Bytes the value of payload field f of sample `id` (index entry e) takes
 * in a slot: its stored length, or its decompressed length when compressed. */
uint64_t reader_slot_value_len(const sf_reader *r, uint32_t f, uint64_t id,
                               const sf_index_entry *e);
/* Points position `pos` of slot s at sample `id` (task, reads, inline
 * values); `repack` moves the packed variable-length bytes after it to fit
 * a substitute's lengths. */
void reader_place_sample(sf_reader *r, reader_slot *s, uint32_t pos, uint64_t id, int repack);
/* Places claimed tasks of a schema without variable-length fields, outside
 * r->lock (schedule.c places the others when it prepares a slot). */
void reader_place_claimed(sf_reader *r, reader_task **tasks, unsigned n);
/* Sets each field's `bytes` for the slot's batch. */
void reader_set_field_bytes(sf_reader *r, reader_slot *s);

/* ---- schedule.c, for open and close ---- */
/* Sets up building each next epoch's order ahead (shuffled orders only),
 * and asks for the order after the sampler's epoch. */
void reader_order_start(sf_reader *r);

/* ---- schedule.c, for the engines ---- */
/* Claims up to `max` tasks in batch order. With `block`, waits until there
 * is at least one or the reader stops. Returns the count; 0 means stop (when
 * blocking) or nothing now (when not). */
unsigned reader_claim(sf_reader *r, reader_task **out, unsigned max, int block);
/* Called by the engine on I/O thread `io` once all of a task's reads have
 * finished (t->err set on failure): checks the record (with the thread's
 * hash state), finishes the slot when it was the last. */
void reader_task_done(reader_io_thread *io, reader_task *t);
/* reader_task_done for n tasks at once (in claim order), with one
 * update of the shared counters per slot instead of one per task. */
void reader_tasks_done(reader_io_thread *io, reader_task *const *tasks, unsigned n);

/* ---- records.c ---- */
/* Sets t->err and its detail on the slot (first error wins); a shard cut
 * short makes the record corrupt instead (substituted, or SF_E_TRUNCATED). */
void reader_task_fail(sf_reader *r, reader_task *t, int err, const char *what);
/* reader_task_fail for an open of the task's shard that failed, with the
 * open's message. */
void reader_task_open_failed(sf_reader *r, reader_task *t, int err);
/* A value of task t does not decompress (SF_E_CORRUPT, detail in
 * sf_last_error()): a corrupt sample to substitute (on_corrupt = SKIP) or
 * the batch's error. */
void reader_task_bad_value(sf_reader *r, reader_task *t);
/* Fails task t's batch with err and the message `msg` whatever on_corrupt
 * says: a sample the options cannot deliver (not damage: nothing to
 * substitute). The first failure of a batch is the one reported. */
void reader_task_fail_config(sf_reader *r, reader_task *t, int err, const char *msg);
/* Judges finished tasks: each one's checksum (hashed with `xxh` unless the
 * engine did) and its bool values; marks it corrupt or fails it. All n at
 * once: one call per claim's run of a slot, not per record. */
void reader_verify_tasks(sf_reader *r, struct XXH3_state_s *xxh, reader_task *const *tasks,
                         unsigned n);
/* At the batch-ready point: reads an intact sample in place of each corrupt
 * one of slot s, with the finishing thread's scratch. */
void reader_substitute_corrupt(sf_reader *r, reader_slot *s, reader_scratch *st);

/* ---- staged.c: records with compressed fields ----
 *
 * A record of a dataset with compressed fields is read whole before any of
 * it is decompressed: uncompressed fields straight into the slot, compressed
 * ones into the I/O thread's staging buffer; the stored bytes are hashed
 * (the record checksum covers them), and only a record that checks out is
 * decompressed, each value straight into its place in the slot with the
 * thread's ZSTD_DCtx. Memory: per I/O thread one staging buffer of
 * stage_bytes (the largest sum of a record's compressed stored bytes, from
 * the index; times reader_staged_claim_max for small ones, at most
 * SF_STAGED_CLAIM_BYTES) and one ZSTD_DCtx; per reader the zlen table (4 bytes per
 * compressed variable-length value). */

/* Copies len bytes at file offset off of task's shard to dst. */
typedef int (*reader_copy_fn)(const sf_reader *r, const reader_task *task, uint8_t *dst,
                              uint64_t off, uint64_t len);

/* reader_copy_fn that also hashes the bytes as the next piece of `h`, in
 * the same pass (hash_copy.h). */
struct sf_copy_hash;
typedef int (*reader_copy_hashed_fn)(const sf_reader *r, const reader_task *task,
                                     struct sf_copy_hash *h, uint8_t *dst, uint64_t off,
                                     uint64_t len);

/* A copy engine's way of reaching a task's shard: `open` (NULL: nothing to
 * open, the maps) before its copies, reader_task_close after; `prefetch`
 * (NULL: none) starts bringing a task's stored bytes into cache while the
 * thread works on the one before; `copy_hashed` (NULL: none; the copy is
 * the kernel's, pread's) copies and hashes in one pass where the CPU has a
 * fused kernel (sf_copy_hash_fast), and `copy_streamed` copies as it does
 * without the hash (verify off). */
typedef struct reader_copy_ops {
    reader_copy_fn copy;
    int (*open)(sf_reader *r, reader_task *task);
    void (*prefetch)(const sf_reader *r, const reader_task *task);
    reader_copy_hashed_fn copy_hashed;
    reader_copy_fn copy_streamed; /* NULL: none; copy without the hash, its long runs written
                                     around the caches as copy_hashed's (sf_copy_streamed) */
} reader_copy_ops;

/* At open, before the slab layout: finds the compressed fields and, for the
 * variable-length ones, every value's decompressed length (reading each
 * frame header: one small pread per value) and the longest per field. */
int reader_staged_plan(sf_reader *r, uint64_t dec_max[SF_MAX_FIELDS]);
/* Makes an I/O thread's scratch (its XXH3 state; the staging buffer and
 * ZSTD_DCtx when records are compressed): 0 or -ENOMEM. */
int reader_scratch_init(reader_scratch *st, const sf_reader *r);
void reader_scratch_fini(reader_scratch *st); /* zeroed or initialised */
/* Reads task t's record with `copy`, hashes its stored bytes and, when the
 * checksum holds (or verify is off), decompresses its compressed values into
 * the slot. Sets t->digest/hashed when verifying. Returns 0, SF_E_CHECKSUM
 * (not decompressed), SF_E_CORRUPT (a value broke SPEC.md "Compression";
 * sf_last_error() names the field), or a read error. */
int reader_staged_load(reader_scratch *st, sf_reader *r, reader_task *t, reader_copy_fn copy);
/* Records whose stored bytes are small go a claim at a time, like small
 * uncompressed ones (engine_pread.c): taken one by one, the clock readings,
 * the shared counters and the slot's count per record cost about a tenth
 * of the reader's time on 784-byte images (README "Compressed records a
 * claim at a time"). A claim's stored bytes (at most SF_STAGED_CLAIM_BYTES
 * in all; the compressed ones in the thread's staging buffer, the others
 * in the slot) are copied, then hashed, then decompressed, each pass over
 * what the one before left in L2. */
#define SF_STAGED_CLAIM_BYTES (256u << 10)
#define SF_STAGED_CLAIM_MAX 256u
/* The most records reader_staged_claim takes at once: 0 when records are
 * not compressed, have image fields, or store more than half of
 * SF_STAGED_CLAIM_BYTES (stored_max: all payload fields, compressed or not). */
unsigned reader_staged_claim_max(const sf_reader *r);
/* Loads tasks[0..n) (n <= reader_staged_claim_max) as reader_staged_load
 * does each, opening, copying with and closing through `ops`; fails or
 * marks corrupt what does not load, and hands all n to reader_tasks_done. */
void reader_staged_claim(reader_io_thread *io, reader_task *const *tasks, unsigned n,
                         const reader_copy_ops *ops);
/* reader_copy_fn through the task's open descriptor (reader_task_open). */
int reader_staged_pread(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                        uint64_t len);

/* ---- transform.c: image fields (shardfeed/reader.h, "images") ----
 *
 * A field with a transform is read like a compressed one: its encoded bytes
 * go to the I/O thread's staging buffer, are hashed with the record, and
 * only a record that checks out is decoded, straight into the slot, where
 * the field is a fixed-size uint8 array. */

/* At open, after the dataset: resolves opts.images (SF_E_INVALID naming the
 * option, SF_E_UNSUPPORTED for a compressed field). */
int reader_images_open(sf_reader *r);
void reader_images_close(sf_reader *r); /* none opened ok */
/* Whether field f carries an image transform. */
int reader_image_field(const sf_reader *r, uint32_t f);
/* Bytes one sample of image field f takes in a slot (its pixels). */
uint64_t reader_image_item_size(const sf_reader *r, uint32_t f);
/* Makes bf (a batch field of f) the fixed uint8 array of its pixels. */
void reader_image_batch_field(const sf_reader *r, uint32_t f, sf_batch_field *bf);
/* The thread's image buffers: 0 or -ENOMEM; fini of none made ok. */
int reader_image_scratch_init(reader_scratch *st, const sf_reader *r);
void reader_image_scratch_fini(reader_scratch *st);
/* Decodes the encoded image src (len bytes) of task t's field f into dst.
 * 0, SF_E_CORRUPT (sf_last_error() names the key and why), -ENOMEM, or
 * SF_E_SCHEMA: an image of another size than Decode()'s, which has already
 * failed the batch (reader_task_fail_config: configuration, not damage). */
int reader_image_value(reader_scratch *st, sf_reader *r, reader_task *t, uint32_t f,
                       const uint8_t *src, uint64_t len, uint8_t *dst);

/* ---- device.c: device delivery (device.h is the interface) ---- */
/* The device implementation opts asks for: NULL for the CPU. */
int reader_device_select(const reader_device_ops **out, const sf_reader_opts *opts);
/* Opens r->device_ops on the slab (before io_uring registers it). */
int reader_device_open(sf_reader *r);
/* At the batch-ready point: sets the batch's device fields and enqueues the
 * copy of the slot's used bytes. */
int reader_device_copy(sf_reader *r, reader_slot *s);

static inline uint64_t reader_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The trace being recorded, or NULL (one relaxed load and a flag when off). */
static inline reader_trace *reader_trace_on(const sf_reader *r)
{
    reader_trace *tr = atomic_load_explicit(&((sf_reader *)r)->trace, memory_order_acquire);
    return tr && atomic_load_explicit(&tr->on, memory_order_relaxed) ? tr : NULL;
}

/* I/O threads account their time here: thread-seconds reading (syscalls,
 * ring waits, copies) and hashing, for the stats and the trace's runs. */
static inline void reader_account_time(sf_reader *r, uint64_t io_ns, uint64_t hash_ns)
{
    if (io_ns)
        atomic_fetch_add_explicit(&r->st_io_ns, io_ns, memory_order_relaxed);
    if (hash_ns)
        atomic_fetch_add_explicit(&r->st_hash_ns, hash_ns, memory_order_relaxed);
    reader_trace *tr = reader_trace_on(r);
    if (tr)
        reader_trace_io_time(tr, io_ns, hash_ns);
}

/* I/O threads' time decoding images (transform.c), apart from reading: a
 * reader limited by decoding is "decode-bound", not "io-bound". */
static inline void reader_account_decode(sf_reader *r, uint64_t decode_ns)
{
    if (decode_ns)
        atomic_fetch_add_explicit(&r->st_decode_ns, decode_ns, memory_order_relaxed);
}

#endif
