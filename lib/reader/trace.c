/* Pipeline traces: the records (trace.h), the I/O threads' runs, the
 * trace-event JSON writer, and the public sf_reader_trace_* functions.
 *
 * Output (Chrome trace-event JSON, read by Perfetto and chrome://tracing):
 * one process; a track per batch slot ("slot N") holding, for each batch
 * that used the slot, an "X" event "eE bI" from submitted to its last stage
 * with one child event per phase (queued, read, checksum, copy enqueue,
 * ready, held) and every stage's time in args (microseconds from the start
 * of the trace, like ts); with a device, a track per slot's copies ("slot N
 * copy": enqueued -> seen complete); a track per I/O thread with its runs
 * ("read+hash", args: batch, samples, read_us, hash_us); the caller's waits
 * on "consumer". */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error_internal.h"
#include "reader_internal.h"
#include "shardfeed/version.h"

#define SPAN_BLOCK 64u /* spans an I/O thread reserves at a time */

#define TID_CONSUMER 1
#define TID_REFILL 2
#define TID_IO 100
#define TID_SLOT 1000
#define TID_COPY 100000

static atomic_uint_fast64_t g_trace_ids;

/* ---- records ---------------------------------------------------------------- */

int reader_trace_create(reader_trace **out, const sf_reader *r, uint64_t max_batches)
{
    uint64_t cap_b = max_batches && max_batches < SF_TRACE_MAX_BATCHES ? max_batches : SF_TRACE_MAX_BATCHES;
    uint64_t threads = r->nthreads ? r->nthreads : 1;
    /* Per batch: a run per I/O thread that touched it (twice that, for
     * threads that come back to it) and at most three waits of the caller;
     * plus the blocks the threads hold. */
    uint64_t cap_s = cap_b * (2 * threads + 3) + SPAN_BLOCK * (threads + 2);
    if (cap_s > SF_TRACE_MAX_SPANS)
        cap_s = SF_TRACE_MAX_SPANS;
    reader_trace *tr = calloc(1, sizeof *tr);
    if (!tr)
        return sf_fail(-ENOMEM, "trace: out of memory");
    tr->b = calloc(cap_b, sizeof *tr->b);
    tr->sp = calloc(cap_s, sizeof *tr->sp);
    if (!tr->b || !tr->sp) {
        free(tr->b);
        free(tr->sp);
        free(tr);
        return sf_fail(-ENOMEM, "trace: out of memory for %llu batches and %llu spans",
                       (unsigned long long)cap_b, (unsigned long long)cap_s);
    }
    tr->cap_b = cap_b;
    tr->cap_s = cap_s;
    tr->id = atomic_fetch_add(&g_trace_ids, 1) + 1;
    tr->t0 = reader_now_ns();
    atomic_store(&tr->on, 1);
    *out = tr;
    return 0;
}

void reader_trace_free_all(reader_trace *tr)
{
    while (tr) {
        reader_trace *prev = tr->prev;
        free(tr->b);
        free(tr->sp);
        free(tr);
        tr = prev;
    }
}

static uint64_t spans_used(const reader_trace *tr)
{
    uint64_t n = atomic_load(&((reader_trace *)tr)->ns);
    return n < tr->cap_s ? n : tr->cap_s;
}

void reader_trace_counts(const reader_trace *tr, uint64_t *kept, uint64_t *dropped)
{
    *kept = *dropped = 0;
    if (!tr)
        return;
    if (tr->final) {
        *kept = tr->final_kept;
        *dropped = tr->final_dropped;
        return;
    }
    uint64_t spans = 0, n = spans_used(tr);
    for (uint64_t i = 0; i < n; i++)
        spans += atomic_load_explicit(&((reader_trace *)tr)->sp[i].t1, memory_order_acquire) != 0;
    *kept = tr->nb + spans;
    *dropped = tr->dropped_b + atomic_load(&((reader_trace *)tr)->dropped_s);
}

static reader_trace_span *span_reserve_one(reader_trace *tr)
{
    uint64_t k = atomic_fetch_add_explicit(&tr->ns, 1, memory_order_relaxed);
    if (k >= tr->cap_s) {
        atomic_fetch_add_explicit(&tr->dropped_s, 1, memory_order_relaxed);
        return NULL;
    }
    return &tr->sp[k];
}

static int64_t batch_ref(const reader_trace *tr, const reader_trace_batch *b)
{
    /* A record of an older trace (a batch scheduled before this one
     * started) is not this trace's: -1. */
    return b && b >= tr->b && b < tr->b + tr->cap_b ? (int64_t)(b - tr->b) : -1;
}

void reader_trace_span_add(reader_trace *tr, int kind, uint64_t t0, uint64_t t1,
                           const reader_trace_batch *b)
{
    reader_trace_span *s = span_reserve_one(tr);
    if (!s)
        return;
    s->t0 = t0;
    s->io_ns = s->hash_ns = 0;
    s->batch = batch_ref(tr, b);
    s->thread = 0;
    s->kind = (uint32_t)kind;
    s->samples = 0;
    atomic_store_explicit(&s->t1, t1 > t0 ? t1 : t0 + 1, memory_order_release);
}

/* ---- the I/O threads' runs (thread-local) --------------------------------------- */

typedef struct io_tls {
    uint64_t id; /* the trace this state belongs to */
    unsigned thread;
    reader_trace_span *cur, *end; /* reserved, unused spans */
    int active;                   /* a run is open */
    uint64_t start, last;         /* run start; end of its last sample */
    uint64_t io, hash;            /* the run's time */
    uint64_t pend_io, pend_hash;  /* accounted, not yet given to a sample */
    uint32_t samples;
    const reader_trace_batch *batch;
} io_tls;

static _Thread_local io_tls tls;

void reader_trace_io_thread(unsigned idx)
{
    memset(&tls, 0, sizeof tls);
    tls.thread = idx;
}

static void tls_sync(reader_trace *tr)
{
    if (tls.id == tr->id)
        return;
    unsigned thread = tls.thread;
    memset(&tls, 0, sizeof tls);
    tls.thread = thread;
    tls.id = tr->id;
}

static void run_flush(reader_trace *tr, uint64_t end)
{
    if (tls.cur == tls.end) {
        uint64_t k = atomic_fetch_add_explicit(&tr->ns, SPAN_BLOCK, memory_order_relaxed);
        if (k >= tr->cap_s) {
            atomic_fetch_add_explicit(&tr->dropped_s, 1, memory_order_relaxed);
            tls.cur = tls.end = NULL;
            return;
        }
        tls.cur = &tr->sp[k];
        tls.end = &tr->sp[k + SPAN_BLOCK < tr->cap_s ? k + SPAN_BLOCK : tr->cap_s];
    }
    reader_trace_span *s = tls.cur++;
    s->t0 = tls.start;
    s->io_ns = tls.io;
    s->hash_ns = tls.hash;
    s->batch = batch_ref(tr, tls.batch);
    s->thread = tls.thread;
    s->kind = SF_SPAN_IO_RUN;
    s->samples = tls.samples;
    atomic_store_explicit(&s->t1, end > tls.start ? end : tls.start + 1, memory_order_release);
}

void reader_trace_io_claimed(reader_trace *tr)
{
    tls_sync(tr);
    if (tls.active)
        return;
    tls.active = 1;
    tls.start = tls.last = reader_now_ns();
    tls.io = tls.hash = tls.pend_io = tls.pend_hash = 0;
    tls.samples = 0;
    tls.batch = NULL;
}

void reader_trace_io_time(reader_trace *tr, uint64_t io_ns, uint64_t hash_ns)
{
    tls_sync(tr);
    tls.pend_io += io_ns;
    tls.pend_hash += hash_ns;
}

void reader_trace_io_task(reader_trace *tr, const reader_trace_batch *b)
{
    tls_sync(tr);
    uint64_t now = reader_now_ns();
    if (!tls.active) {
        /* The trace started while this thread was busy. */
        uint64_t spent = tls.pend_io + tls.pend_hash;
        tls.active = 1;
        tls.start = now - spent > tr->t0 ? now - spent : tr->t0;
        tls.io = tls.hash = 0;
        tls.samples = 0;
        tls.batch = b;
    } else if (b != tls.batch && tls.samples) {
        run_flush(tr, tls.last);
        tls.start = tls.last;
        tls.io = tls.hash = 0;
        tls.samples = 0;
    }
    tls.batch = b;
    tls.io += tls.pend_io;
    tls.hash += tls.pend_hash;
    tls.pend_io = tls.pend_hash = 0;
    tls.samples++;
    tls.last = now;
}

void reader_trace_io_idle(reader_trace *tr)
{
    tls_sync(tr);
    if (tls.active && tls.samples)
        run_flush(tr, reader_now_ns());
    tls.active = 0;
    tls.samples = 0;
}

/* ---- JSON ----------------------------------------------------------------------- */

static const char *const stage_names[SF_TS_COUNT] = {
    "submitted", "claimed", "read", "checksummed", "device_enqueued", "device_done", "handed", "released"};

/* Microseconds since the trace started, with nanosecond digits: exact, so
 * nesting survives the decimal round trip. */
static void put_us(FILE *f, const reader_trace *tr, uint64_t t)
{
    uint64_t ns = t > tr->t0 ? t - tr->t0 : 0;
    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void put_dur(FILE *f, uint64_t a, uint64_t b)
{
    uint64_t ns = b > a ? b - a : 0;
    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void put_meta(FILE *f, int pid, int tid, const char *what, const char *name, int sort, int *first)
{
    fprintf(f, "%s\n{\"name\":\"%s_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", *first ? "" : ",",
            what, pid, tid);
    put_str(f, name);
    fprintf(f, "}},\n{\"name\":\"%s_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
            what, pid, tid, sort);
    *first = 0;
}

/* Clamps to the trace's start: times before it show at 0. */
static uint64_t clamp(const reader_trace *tr, uint64_t t)
{
    return t && t < tr->t0 ? tr->t0 : t;
}

static void put_x(FILE *f, const reader_trace *tr, int pid, int tid, const char *cat,
                  const char *name, uint64_t a, uint64_t b)
{
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", name, cat,
            pid, tid);
    put_us(f, tr, a);
    fputs(",\"dur\":", f);
    put_dur(f, a, b);
}

static void write_batches(FILE *f, const reader_trace *tr, int pid, uint64_t nb)
{
    static const struct {
        int from, to;
        const char *name;
    } phases[] = {{SF_TS_SUBMITTED, SF_TS_CLAIMED, "queued"},
                  {SF_TS_CLAIMED, SF_TS_READ, "read"},
                  {SF_TS_READ, SF_TS_CHECKSUMMED, "checksum"},
                  {SF_TS_CHECKSUMMED, SF_TS_DEV_ENQUEUED, "copy enqueue"},
                  {-1, SF_TS_HANDED, "ready"},
                  {SF_TS_HANDED, SF_TS_RELEASED, "held"}};
    for (uint64_t i = 0; i < nb; i++) {
        reader_trace_batch *b = &tr->b[i];
        uint64_t t[SF_TS_COUNT], end = 0;
        for (int k = 0; k < SF_TS_COUNT; k++) {
            t[k] = clamp(tr, atomic_load_explicit(&b->t[k], memory_order_relaxed));
            if (t[k] > end)
                end = t[k];
        }
        if (!t[SF_TS_SUBMITTED])
            continue;
        int delivered = t[SF_TS_HANDED] != 0;
        char label[64], name[96];
        snprintf(label, sizeof label, "e%" PRIu64 " b%" PRIu64, b->epoch, b->index);
        snprintf(name, sizeof name, "%s%s", label, delivered ? "" : " (not delivered)");
        int tid = TID_SLOT + (int)b->slot;
        put_x(f, tr, pid, tid, "batch", name, t[SF_TS_SUBMITTED], end);
        fprintf(f, ",\"args\":{\"record\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"index\":%" PRIu64
                   ",\"slot\":%u,\"size\":%u,\"delivered\":%s",
                i, b->epoch, b->index, b->slot, b->size, delivered ? "true" : "false");
        for (int k = 0; k < SF_TS_COUNT; k++)
            if (t[k]) {
                fprintf(f, ",\"%s\":", stage_names[k]);
                put_us(f, tr, t[k]);
            }
        fputs("}}", f);
        for (size_t p = 0; p < sizeof phases / sizeof phases[0]; p++) {
            int from = phases[p].from;
            if (from < 0) /* ready: from the copy's enqueue, or the checksums */
                from = t[SF_TS_DEV_ENQUEUED] ? SF_TS_DEV_ENQUEUED : SF_TS_CHECKSUMMED;
            uint64_t a = t[from], z = t[phases[p].to];
            if (!a || !z || z < a)
                continue;
            put_x(f, tr, pid, tid, "stage", phases[p].name, a, z);
            fprintf(f, ",\"args\":{\"batch\":\"%s\"}}", label);
        }
        if (t[SF_TS_DEV_ENQUEUED] && t[SF_TS_DEV_DONE] >= t[SF_TS_DEV_ENQUEUED]) {
            put_x(f, tr, pid, TID_COPY + (int)b->slot, "device", "copy", t[SF_TS_DEV_ENQUEUED],
                  t[SF_TS_DEV_DONE]);
            fprintf(f, ",\"args\":{\"batch\":\"%s\",\"note\":\"end: completion as seen by "
                       "sf_batch_wait or the slot's refill\"}}",
                    label);
        }
    }
}

static void write_spans(FILE *f, const reader_trace *tr, int pid, uint64_t nb)
{
    static const char *const kind_names[] = {"read+hash", "wait for batch", "wait for copy",
                                             "refill: wait for the slot's copy"};
    uint64_t n = spans_used(tr);
    for (uint64_t i = 0; i < n; i++) {
        const reader_trace_span *s = &tr->sp[i];
        uint64_t t1 = atomic_load_explicit(&((reader_trace_span *)s)->t1, memory_order_acquire);
        if (!t1 || s->kind > SF_SPAN_SLOT_WAIT)
            continue;
        int io = s->kind == SF_SPAN_IO_RUN, refill = s->kind == SF_SPAN_SLOT_WAIT;
        int tid = io ? TID_IO + (int)s->thread : refill ? TID_REFILL : TID_CONSUMER;
        put_x(f, tr, pid, tid, io ? "io" : refill ? "device" : "consumer", kind_names[s->kind],
              clamp(tr, s->t0), clamp(tr, t1));
        fputs(",\"args\":{", f);
        if (s->batch >= 0 && (uint64_t)s->batch < nb)
            fprintf(f, "\"batch\":\"e%" PRIu64 " b%" PRIu64 "\"", tr->b[s->batch].epoch,
                    tr->b[s->batch].index);
        else
            fputs("\"batch\":null", f);
        if (s->kind == SF_SPAN_IO_RUN) {
            fprintf(f, ",\"samples\":%u,\"read_us\":", s->samples);
            put_dur(f, 0, s->io_ns);
            fputs(",\"hash_us\":", f);
            put_dur(f, 0, s->hash_ns);
        }
        fputs("}}", f);
    }
}

int reader_trace_write_json(const reader_trace *tr, const sf_reader *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        return sf_fail(-e, "trace: %s: %s", path, strerror(e));
    }
    int pid = (int)getpid(), first = 1;
    sf_reader *rw = (sf_reader *)r;
    pthread_mutex_lock(&rw->lock);
    uint64_t nb = tr->nb, dropped_b = tr->dropped_b;
    pthread_mutex_unlock(&rw->lock);

    fputs("{\"traceEvents\":[", f);
    char name[4400];
    snprintf(name, sizeof name, "shardfeed reader %s", r->ds->dir);
    put_meta(f, pid, 0, "process", name, 0, &first);
    put_meta(f, pid, TID_CONSUMER, "thread", "consumer (sf_reader_next)", 1, &first);
    put_meta(f, pid, TID_REFILL, "thread", "slot refills (I/O threads)", 2, &first);
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        snprintf(name, sizeof name, "slot %u", i);
        put_meta(f, pid, TID_SLOT + (int)i, "thread", name, 10 + 2 * (int)i, &first);
        if (r->opts.device != SF_DEVICE_CPU) {
            snprintf(name, sizeof name, "slot %u copy", i);
            put_meta(f, pid, TID_COPY + (int)i, "thread", name, 11 + 2 * (int)i, &first);
        }
    }
    for (uint32_t i = 0; i < r->nthreads; i++) {
        snprintf(name, sizeof name, "I/O thread %u (%s)", i, r->engine ? r->engine->name : "?");
        put_meta(f, pid, TID_IO + (int)i, "thread", name, 10 + 2 * (int)r->opts.prefetch + (int)i, &first);
    }
    write_batches(f, tr, pid, nb);
    write_spans(f, tr, pid, nb);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"shardfeed\":\"%s\",\"dataset\":",
            SF_VERSION_STRING);
    put_str(f, r->ds->dir);
    fprintf(f, ",\"engine\":\"%s\",\"io_threads\":%u,\"prefetch\":%u,\"batch_size\":%u,"
               "\"verify\":%s,\"direct\":%s,\"device\":\"%s\","
               "\"batches_recorded\":%" PRIu64 ",\"batches_dropped\":%" PRIu64 ",\"max_batches\":%" PRIu64
               ",\"spans_dropped\":%" PRIu64 ",\"max_spans\":%" PRIu64 ","
               "\"stages\":\"submitted, claimed, read, checksummed, device_enqueued, device_done "
               "(as observed by sf_batch_wait or the release), handed, released; decompression is "
               "not a stage yet (no compressed fields)\"}}\n",
            r->engine ? r->engine->name : "none", r->nthreads, r->opts.prefetch, r->opts.batch_size,
            r->opts.verify == SF_VERIFY_ON ? "true" : "false", r->direct ? "true" : "false",
            r->opts.device == SF_DEVICE_CUDA ? "cuda" : r->opts.device == SF_DEVICE_HOST_COPY ? "host-copy" : "cpu",
            nb, dropped_b, tr->cap_b, (uint64_t)atomic_load(&((reader_trace *)tr)->dropped_s),
            tr->cap_s);
    int bad = ferror(f);
    int e = bad ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno ? errno : EIO;
    }
    if (bad)
        return sf_fail(-e, "trace: writing %s: %s", path, strerror(e));
    return 0;
}

/* ---- public ------------------------------------------------------------------------ */

int sf_reader_trace_start(sf_reader *r, uint64_t max_batches)
{
    if (!r)
        return sf_fail(SF_E_INVALID, "sf_reader_trace_start: NULL reader");
    if (reader_trace_on(r))
        return sf_fail(SF_E_STATE, "sf_reader_trace_start: a trace is already being recorded "
                                   "(sf_reader_trace_write ends it)");
    reader_trace *tr;
    int rc = reader_trace_create(&tr, r, max_batches);
    if (rc)
        return rc;
    pthread_mutex_lock(&r->lock);
    tr->prev = atomic_load(&r->trace);
    atomic_store_explicit(&r->trace, tr, memory_order_release);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int sf_reader_trace_write(sf_reader *r, const char *path)
{
    if (!r || !path)
        return sf_fail(SF_E_INVALID, "sf_reader_trace_write: %s is NULL", !r ? "r" : "path");
    pthread_mutex_lock(&r->lock);
    reader_trace *tr = atomic_load(&r->trace);
    int running = tr && atomic_load(&tr->on);
    if (!tr || (!running && !tr->unwritten)) {
        pthread_mutex_unlock(&r->lock);
        return sf_fail(SF_E_STATE, "sf_reader_trace_write: no trace is being recorded "
                                   "(sf_reader_trace_start starts one)");
    }
    atomic_store(&tr->on, 0);
    pthread_mutex_unlock(&r->lock);
    int rc = reader_trace_write_json(tr, r, path);
    uint64_t kept = 0, dropped = 0;
    /* Stopped: the counts no longer change but for a span or two being
     * finished right now; keep them, so stats need not count again. */
    if (running)
        reader_trace_counts(tr, &kept, &dropped);
    pthread_mutex_lock(&r->lock);
    if (running) {
        tr->final_kept = kept;
        tr->final_dropped = dropped;
        tr->final = 1;
    }
    /* A failed write (a folder that is not there, a full disk) keeps the
     * trace for another try: it cannot be recorded again. */
    tr->unwritten = rc != 0;
    pthread_mutex_unlock(&r->lock);
    return rc;
}
