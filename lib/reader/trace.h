/* Tracing of the reader's pipeline (sf_reader_trace_start/write), internal.
 *
 * Two kinds of records, both in memory allocated when the trace starts:
 *  - one reader_trace_batch per scheduled batch (up to cap_b), handed out in
 *    prepare_slot under r->lock; every stage stores its CLOCK_MONOTONIC time
 *    into its slot of t[] (relaxed atomic stores: the writer may read while
 *    the I/O threads still run);
 *  - reader_trace_span: an interval on one thread's track. I/O threads reserve
 *    blocks of spans with one atomic add per SPAN_BLOCK spans and fill them
 *    without locking; a span's t1 is stored last (release), so the writer
 *    skips spans still being written (t1 == 0).
 * Each I/O thread accumulates one "run" at a time: the samples of one batch
 * it read and hashed back to back, with the time spent in each; a run ends
 * when the thread moves to another batch or blocks waiting for work.
 *
 * Traces are never freed before sf_reader_close (the I/O threads join
 * first), so a thread that still holds a pointer into an older trace writes
 * into memory that stays valid.
 */
#ifndef SF_READER_TRACE_H
#define SF_READER_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

enum reader_trace_stage {
    SF_TS_SUBMITTED = 0, /* prepare_slot: the batch got its slot, its reads are queued */
    SF_TS_CLAIMED,       /* an I/O thread claimed its first sample */
    SF_TS_READ,          /* every sample's reads are complete */
    SF_TS_CHECKSUMMED,   /* every record hashed (and corrupt samples substituted) */
    SF_TS_DEV_ENQUEUED,  /* the device copy was enqueued */
    SF_TS_DEV_DONE,      /* the copy was seen complete (sf_batch_wait or the slot's refill) */
    SF_TS_HANDED,        /* sf_reader_next returned it */
    SF_TS_RELEASED,      /* the slot was given back */
    SF_TS_COUNT
};

typedef struct reader_trace_batch {
    uint64_t epoch, index;
    uint32_t slot, size;
    _Atomic uint64_t t[SF_TS_COUNT]; /* 0: not reached */
} reader_trace_batch;

enum reader_span_kind {
    SF_SPAN_IO_RUN = 0,   /* an I/O thread reading and hashing samples of one batch */
    SF_SPAN_WAIT,         /* the caller blocked in sf_reader_next */
    SF_SPAN_DEVICE_WAIT,  /* the caller blocked in sf_batch_wait */
    SF_SPAN_SLOT_WAIT     /* an I/O thread waiting for a slot's last copy before refilling it */
};

typedef struct reader_trace_span {
    uint64_t t0;
    uint64_t io_ns, hash_ns; /* IO_RUN: time in reads and in hashing */
    int64_t batch;           /* index into the trace's batch records, or -1 */
    uint32_t thread;         /* IO_RUN: the I/O thread's index */
    uint32_t kind;           /* enum reader_span_kind */
    uint32_t samples;        /* IO_RUN: samples finished in the run */
    uint32_t pad;
    _Atomic uint64_t t1;     /* stored last; 0 while being written */
} reader_trace_span;

typedef struct reader_trace {
    struct reader_trace *prev; /* the reader's older traces */
    uint64_t id;           /* process-wide unique: keys the I/O threads' thread-local state */
    uint64_t t0;           /* when the trace started */
    atomic_int on;
    reader_trace_batch *b;
    uint64_t cap_b, nb;    /* nb under r->lock */
    uint64_t dropped_b;    /* under r->lock */
    reader_trace_span *sp;
    uint64_t cap_s;
    atomic_uint_fast64_t ns;        /* spans reserved (may exceed cap_s) */
    atomic_uint_fast64_t dropped_s; /* spans not recorded: full */
    int final;             /* stopped and counted (under r->lock): */
    uint64_t final_kept, final_dropped;
    int unwritten;         /* stopped, but writing it failed: a write may retry (under r->lock) */
} reader_trace;

struct sf_reader;
struct reader_task;

/* Creates a trace for up to max_batches batches (0: SF_TRACE_MAX_BATCHES),
 * sized for the reader's threads. */
int reader_trace_create(reader_trace **out, const struct sf_reader *r, uint64_t max_batches);
void reader_trace_free_all(reader_trace *tr);
/* Writes tr as trace-event JSON. */
int reader_trace_write_json(const reader_trace *tr, const struct sf_reader *r, const char *path);
/* Records kept and dropped so far. */
void reader_trace_counts(const reader_trace *tr, uint64_t *kept, uint64_t *dropped);

/* Appends a span (any thread; one atomic add). */
void reader_trace_span_add(reader_trace *tr, int kind, uint64_t t0, uint64_t t1,
                           const reader_trace_batch *b);

/* The I/O thread hooks (thread-local run state). */
void reader_trace_io_thread(unsigned idx);       /* once, when the thread starts */
void reader_trace_io_claimed(reader_trace *tr);  /* claim returned tasks */
void reader_trace_io_time(reader_trace *tr, uint64_t io_ns, uint64_t hash_ns);
void reader_trace_io_task(reader_trace *tr, const reader_trace_batch *b); /* a task finished */
void reader_trace_io_idle(reader_trace *tr);     /* about to block for work, or exit */

static inline void reader_trace_stamp(reader_trace_batch *b, int stage, uint64_t now)
{
    if (b)
        atomic_store_explicit(&b->t[stage], now, memory_order_relaxed);
}

#endif
