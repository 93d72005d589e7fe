/* fakecuda's streams, events, copies and kernels. A stream is a FIFO of
 * operations run by its own worker thread; an event's recording is an
 * operation that completes when its stream reaches it; a wait is an
 * operation that holds its stream until a given recording completed. The
 * device accesses running at a given moment are listed, so that two that
 * nothing ordered are caught when they overlap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"

struct CUstream_st {
    struct CUstream_st *next;
    uint64_t id;
    int device;
    unsigned flags;
    int live;
    fc_op *head, *tail;       /* head: running or next to run; popped when done */
    uint64_t enqueued, done;  /* operations queued and completed, in order */
    int quit;
    pthread_t worker;
};

struct CUevent_st {
    struct CUevent_st *next;
    uint64_t id;
    int device;
    unsigned flags;
    int live;
    fc_record *latest; /* the last recording; NULL: never recorded */
};

typedef struct fc_function {
    struct fc_function *next;
    const void *host_fun;
    const char *name;
} fc_function;

/* nvcc's host stubs call these; they are declared only in nvcc's own
 * headers (crt/host_runtime.h, crt/device_functions.h). */
#pragma GCC visibility push(default)
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
#pragma GCC visibility pop

static fc_function *functions;

/* A device access in progress (a copy's device side, a read kernel). */
typedef struct fc_access {
    struct fc_access *next;
    const uint8_t *lo, *hi;
    int write;
    const struct CUstream_st *stream;
    const char *what;
} fc_access;

static fc_access *accesses;

/* ---- handles ------------------------------------------------------------------- */

static struct CUstream_st *find_stream(const fc_call *c, cudaStream_t h, cudaError_t *e)
{
    if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        *e = fc_unsupported(c, "the default stream (%p) is not modelled: use a stream from "
                               "cudaStreamCreate",
                            (void *)h);
        return NULL;
    }
    for (struct CUstream_st *s = fc.streams; s; s = s->next) {
        if (s != h)
            continue;
        if (!s->live) {
            *e = fc_misuse(c, cudaErrorInvalidResourceHandle,
                           "stream %p (S%llu) was destroyed by cudaStreamDestroy", (void *)h,
                           (unsigned long long)s->id);
            return NULL;
        }
        return s;
    }
    *e = fc_misuse(c, cudaErrorInvalidResourceHandle, "%p is not a stream from cudaStreamCreate",
                   (void *)h);
    return NULL;
}

static struct CUevent_st *find_event(const fc_call *c, cudaEvent_t h, cudaError_t *e)
{
    for (struct CUevent_st *ev = fc.events; ev; ev = ev->next) {
        if (ev != h)
            continue;
        if (!ev->live) {
            *e = fc_misuse(c, cudaErrorInvalidResourceHandle,
                           "event %p (E%llu) was destroyed by cudaEventDestroy", (void *)h,
                           (unsigned long long)ev->id);
            return NULL;
        }
        return ev;
    }
    *e = fc_misuse(c, cudaErrorInvalidResourceHandle, "%p is not an event from cudaEventCreate",
                   (void *)h);
    return NULL;
}

uint64_t fc_live_streams_locked(void)
{
    uint64_t n = 0;
    for (struct CUstream_st *s = fc.streams; s; s = s->next)
        n += s->live;
    return n;
}

uint64_t fc_live_events_locked(void)
{
    uint64_t n = 0;
    for (struct CUevent_st *ev = fc.events; ev; ev = ev->next)
        n += ev->live;
    return n;
}

int fakecuda_stream_device(const void *stream)
{
    fc_init_once();
    int dev = -1;
    pthread_mutex_lock(&fc.lock);
    for (struct CUstream_st *s = fc.streams; s; s = s->next)
        if (s == stream && s->live)
            dev = s->device;
    pthread_mutex_unlock(&fc.lock);
    return dev;
}

int fakecuda_event_device(const void *event)
{
    fc_init_once();
    int dev = -1;
    pthread_mutex_lock(&fc.lock);
    for (struct CUevent_st *ev = fc.events; ev; ev = ev->next)
        if (ev == event && ev->live)
            dev = ev->device;
    pthread_mutex_unlock(&fc.lock);
    return dev;
}

static void record_unref_locked(fc_record *rec)
{
    if (rec && --rec->refs == 0)
        free(rec);
}

/* ---- the log ------------------------------------------------------------------- */

void fc_log_locked(int kind, void *stream, void *event, uint64_t record)
{
    if (!fc.log && !(fc.log = calloc(FAKECUDA_LOG_CAP, sizeof *fc.log)))
        return;
    size_t i = (fc.log_start + fc.log_n) % FAKECUDA_LOG_CAP;
    if (fc.log_n == FAKECUDA_LOG_CAP)
        fc.log_start = (fc.log_start + 1) % FAKECUDA_LOG_CAP; /* the oldest goes */
    else
        fc.log_n++;
    fc.log[i] = (fakecuda_log_entry){++fc.log_seq, kind, stream, event, record};
}

size_t fakecuda_log_count(void)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    size_t n = fc.log_n;
    pthread_mutex_unlock(&fc.lock);
    return n;
}

int fakecuda_log_get(size_t i, fakecuda_log_entry *out)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    int ok = i < fc.log_n;
    if (ok)
        *out = fc.log[(fc.log_start + i) % FAKECUDA_LOG_CAP];
    pthread_mutex_unlock(&fc.lock);
    return ok ? 0 : -1;
}

void fakecuda_log_clear(void)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    fc.log_start = fc.log_n = 0;
    pthread_mutex_unlock(&fc.lock);
}

/* ---- device accesses in progress ------------------------------------------------ */

static void access_begin_locked(fc_access *a)
{
    for (fc_access *o = accesses; o; o = o->next)
        if (a->lo < o->hi && o->lo < a->hi && (a->write || o->write) && a->stream != o->stream)
            fc_race("%s on stream S%llu %s device memory [%p, +%zu) while %s on stream S%llu %s "
                    "[%p, +%zu): nothing orders the two (a missing cudaStreamWaitEvent?)",
                    a->what, (unsigned long long)a->stream->id, a->write ? "writes" : "reads",
                    (const void *)a->lo, (size_t)(a->hi - a->lo), o->what,
                    (unsigned long long)o->stream->id, o->write ? "writes" : "reads",
                    (const void *)o->lo, (size_t)(o->hi - o->lo));
    a->next = accesses;
    accesses = a;
}

static void access_end_locked(fc_access *a)
{
    for (fc_access **p = &accesses; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            return;
        }
}

/* ---- the worker ------------------------------------------------------------------ */

/* Runs a copy or a kernel, outside fc.lock. */
static void run_op(const struct CUstream_st *s, fc_op *op)
{
    fc_access acc[2];
    int n = 0;
    if (op->kind == FC_OP_COPY) {
        if (op->dir == cudaMemcpyHostToDevice || op->dir == cudaMemcpyDeviceToDevice)
            acc[n++] = (fc_access){NULL, op->dst, (uint8_t *)op->dst + op->len, 1, s, op->what};
        if (op->dir == cudaMemcpyDeviceToHost || op->dir == cudaMemcpyDeviceToDevice)
            acc[n++] = (fc_access){NULL, op->src, (const uint8_t *)op->src + op->len, 0, s, op->what};
    } else if (op->kind == FC_OP_READ) {
        acc[n++] = (fc_access){NULL, op->src, (const uint8_t *)op->src + op->len, 0, s, op->what};
    }
    pthread_mutex_lock(&fc.lock);
    for (int i = 0; i < n; i++)
        access_begin_locked(&acc[i]);
    pthread_mutex_unlock(&fc.lock);
    fc_sleep_us(op->us); /* a copy's delay, a kernel's duration */
    if (op->kind == FC_OP_COPY) {
        fc_dma(op);
        atomic_fetch_add(&fc_stats.copies, 1);
        atomic_fetch_add(&fc_stats.copy_bytes, op->len);
    }
    pthread_mutex_lock(&fc.lock);
    for (int i = 0; i < n; i++)
        access_end_locked(&acc[i]);
    pthread_mutex_unlock(&fc.lock);
}

static void *stream_worker(void *arg)
{
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&fc.lock);
    for (;;) {
        fc_op *op = s->head;
        if (!op) {
            if (s->quit)
                break;
            pthread_cond_wait(&fc.changed, &fc.lock);
            continue;
        }
        if (op->kind == FC_OP_WAIT && !op->rec->done) {
            pthread_cond_wait(&fc.changed, &fc.lock);
            continue;
        }
        if (op->kind == FC_OP_RECORD) {
            op->rec->done = 1;
            op->rec->t_ms = fc_now_ms();
        } else if (op->kind != FC_OP_WAIT) {
            pthread_mutex_unlock(&fc.lock);
            run_op(s, op);
            pthread_mutex_lock(&fc.lock);
        }
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done = op->seq;
        record_unref_locked(op->rec);
        free(op);
        pthread_cond_broadcast(&fc.changed);
    }
    pthread_mutex_unlock(&fc.lock);
    return NULL;
}

static fc_op *op_new(enum fc_op_kind kind, const fc_call *c)
{
    fc_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        snprintf(op->what, sizeof op->what, "%s(%s)", c->name, c->args);
    }
    return op;
}

static void enqueue_locked(struct CUstream_st *s, fc_op *op)
{
    op->seq = ++s->enqueued;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&fc.changed);
}

int fc_host_range_queued(const void *p, size_t len, uint64_t *stream_id)
{
    const uint8_t *lo = p, *hi = lo + len;
    for (struct CUstream_st *s = fc.streams; s; s = s->next)
        for (fc_op *op = s->head; op; op = op->next) {
            if (op->kind != FC_OP_COPY)
                continue;
            const uint8_t *h = op->dir == cudaMemcpyHostToDevice ? op->src
                               : op->dir == cudaMemcpyDeviceToHost ? (const uint8_t *)op->dst
                                                                   : NULL;
            if (h && h < hi && lo < h + op->len) {
                *stream_id = s->id;
                return 1;
            }
        }
    return 0;
}

void fc_device_drain_locked(int dev)
{
    for (struct CUstream_st *s = fc.streams; s; s = s->next) {
        uint64_t target = s->enqueued;
        while (s->device == dev && s->done < target)
            pthread_cond_wait(&fc.changed, &fc.lock);
    }
}

/* ---- streams --------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    FC_CALL("cudaStreamCreateWithFlags", "pStream=%p, flags=0x%x", (void *)pStream, flags);
    if (!pStream)
        return fc_misuse(&call_, cudaErrorInvalidValue, "pStream is NULL");
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return fc_misuse(&call_, cudaErrorInvalidValue, "unknown flags 0x%x", flags);
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return fc_error(cudaErrorMemoryAllocation);
    s->device = dev;
    s->flags = flags;
    s->live = 1;
    pthread_mutex_lock(&fc.lock);
    s->id = ++fc.next_id;
    if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
        pthread_mutex_unlock(&fc.lock);
        free(s);
        return fc_error(cudaErrorMemoryAllocation);
    }
    s->next = fc.streams;
    fc.streams = s;
    pthread_mutex_unlock(&fc.lock);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    FC_CALL("cudaStreamDestroy", "stream=%p", (void *)stream);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    if (s && s->done != s->enqueued)
        e = fc_misuse(&call_, cudaErrorIllegalState,
                      "stream S%llu still has %llu operations queued, the first %s: synchronize "
                      "it first (CUDA would run them after this call, on memory the caller may "
                      "free next)",
                      (unsigned long long)s->id, (unsigned long long)(s->enqueued - s->done),
                      s->head->what);
    if (!e) {
        s->live = 0;
        s->quit = 1;
        pthread_cond_broadcast(&fc.changed);
    }
    pthread_mutex_unlock(&fc.lock);
    if (!e)
        pthread_join(s->worker, NULL); /* the struct stays: a stale handle is recognised */
    return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    FC_CALL("cudaStreamSynchronize", "stream=%p", (void *)stream);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    if (s) {
        uint64_t target = s->enqueued;
        while (s->done < target)
            pthread_cond_wait(&fc.changed, &fc.lock);
        atomic_fetch_add(&fc_stats.stream_syncs, 1);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    FC_CALL("cudaStreamQuery", "stream=%p", (void *)stream);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    if (s && s->done != s->enqueued)
        e = fc_error(cudaErrorNotReady);
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device)
{
    FC_CALL("cudaStreamGetDevice", "stream=%p, device=%p", (void *)stream, (void *)device);
    if (!device)
        return fc_misuse(&call_, cudaErrorInvalidValue, "device is NULL");
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    if (s)
        *device = s->device;
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    FC_CALL("cudaStreamWaitEvent", "stream=%p, event=%p, flags=0x%x", (void *)stream,
            (void *)event, flags);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    struct CUevent_st *ev = s ? find_event(&call_, event, &e) : NULL;
    if (ev && flags != cudaEventWaitDefault)
        e = fc_misuse(&call_, cudaErrorInvalidValue, "flags 0x%x: only cudaEventWaitDefault "
                      "outside stream capture", flags);
    fc_op *op = NULL;
    if (ev && !e && ev->latest && !(op = op_new(FC_OP_WAIT, &call_)))
        e = fc_error(cudaErrorMemoryAllocation);
    if (ev && !e) {
        /* The recording current now; later recordings are not waited for. */
        fc_log_locked(FAKECUDA_LOG_WAIT, s, ev, ev->latest ? ev->latest->id : 0);
        atomic_fetch_add(&fc_stats.waits, 1);
        if (op) {
            op->rec = ev->latest;
            op->rec->refs++;
            enqueue_locked(s, op);
        }
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* ---- events ---------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    FC_CALL("cudaEventCreateWithFlags", "event=%p, flags=0x%x", (void *)event, flags);
    if (!event)
        return fc_misuse(&call_, cudaErrorInvalidValue, "event is NULL");
    if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))
        return fc_misuse(&call_, cudaErrorInvalidValue, "unknown flags 0x%x", flags);
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
        return fc_misuse(&call_, cudaErrorInvalidValue,
                         "cudaEventInterprocess needs cudaEventDisableTiming");
    if (flags & cudaEventInterprocess)
        return fc_unsupported(&call_, "interprocess events");
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return fc_error(cudaErrorMemoryAllocation);
    ev->device = dev;
    ev->flags = flags;
    ev->live = 1;
    pthread_mutex_lock(&fc.lock);
    ev->id = ++fc.next_id;
    ev->next = fc.events;
    fc.events = ev;
    pthread_mutex_unlock(&fc.lock);
    *event = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    FC_CALL("cudaEventDestroy", "event=%p", (void *)event);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUevent_st *ev = find_event(&call_, event, &e);
    if (ev) {
        /* A pending recording lives on in its stream and its waiters. */
        ev->live = 0;
        record_unref_locked(ev->latest);
        ev->latest = NULL;
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    FC_CALL("cudaEventRecord", "event=%p, stream=%p", (void *)event, (void *)stream);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUevent_st *ev = find_event(&call_, event, &e);
    struct CUstream_st *s = ev ? find_stream(&call_, stream, &e) : NULL;
    if (s && ev->device != s->device)
        e = fc_misuse(&call_, cudaErrorInvalidResourceHandle,
                      "event E%llu belongs to device %d, stream S%llu to device %d: cudaEventRecord "
                      "needs both on one device",
                      (unsigned long long)ev->id, ev->device, (unsigned long long)s->id, s->device);
    fc_op *op = NULL;
    fc_record *rec = NULL;
    if (s && !e && (!(op = op_new(FC_OP_RECORD, &call_)) || !(rec = calloc(1, sizeof *rec)))) {
        free(op);
        e = fc_error(cudaErrorMemoryAllocation);
    }
    if (s && !e) {
        *rec = (fc_record){++fc.next_id, 2, 0, 0, ev->device, !(ev->flags & cudaEventDisableTiming)};
        record_unref_locked(ev->latest);
        ev->latest = rec; /* one reference */
        op->rec = rec;    /* the other */
        enqueue_locked(s, op);
        fc_log_locked(FAKECUDA_LOG_RECORD, s, ev, rec->id);
        atomic_fetch_add(&fc_stats.records, 1);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    FC_CALL("cudaEventQuery", "event=%p", (void *)event);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUevent_st *ev = find_event(&call_, event, &e);
    if (ev && ev->latest && !ev->latest->done)
        e = fc_error(cudaErrorNotReady);
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    FC_CALL("cudaEventSynchronize", "event=%p", (void *)event);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUevent_st *ev = find_event(&call_, event, &e);
    fc_record *rec = ev ? ev->latest : NULL; /* never recorded: nothing to wait for */
    if (rec) {
        rec->refs++;
        while (!rec->done)
            pthread_cond_wait(&fc.changed, &fc.lock);
        record_unref_locked(rec);
    }
    if (ev)
        atomic_fetch_add(&fc_stats.event_syncs, 1);
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    FC_CALL("cudaEventElapsedTime", "ms=%p, start=%p, end=%p", (void *)ms, (void *)start,
            (void *)end);
    if (!ms)
        return fc_misuse(&call_, cudaErrorInvalidValue, "ms is NULL");
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUevent_st *a = find_event(&call_, start, &e);
    struct CUevent_st *b = a ? find_event(&call_, end, &e) : NULL;
    if (b) {
        if ((a->flags | b->flags) & cudaEventDisableTiming)
            e = fc_misuse(&call_, cudaErrorInvalidResourceHandle,
                          "an event created with cudaEventDisableTiming has no time");
        else if (!a->latest || !b->latest)
            e = fc_misuse(&call_, cudaErrorInvalidResourceHandle, "an event was never recorded");
        else if (a->device != b->device)
            e = fc_misuse(&call_, cudaErrorInvalidResourceHandle,
                          "the events belong to devices %d and %d", a->device, b->device);
        else if (!a->latest->done || !b->latest->done)
            e = fc_error(cudaErrorNotReady);
        else
            *ms = (float)(b->latest->t_ms - a->latest->t_ms);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* ---- copies ---------------------------------------------------------------------- */

static const char *memcpy_kind_name(enum cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
    }
    return "?";
}

/* cudaMemcpyDefault: the direction from where the pointers lie (UVA). */
static enum cudaMemcpyKind infer_kind(const void *dst, const void *src)
{
    fc_region *d = fc_region_find(dst), *s = fc_region_find(src);
    int dd = d && d->kind == FC_DEVICE, sd = s && s->kind == FC_DEVICE;
    return dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

static cudaError_t check_copy_locked(const fc_call *c, enum cudaMemcpyKind dir, void *dst,
                                     const void *src, size_t count)
{
    switch (dir) {
    case cudaMemcpyHostToDevice: {
        cudaError_t e = fc_check_device_range(c, "dst", dst, count);
        return e ? e : fc_check_host_range(c, "src", src, count);
    }
    case cudaMemcpyDeviceToHost: {
        cudaError_t e = fc_check_device_range(c, "src", src, count);
        return e ? e : fc_check_host_range(c, "dst", dst, count);
    }
    case cudaMemcpyDeviceToDevice: {
        cudaError_t e = fc_check_device_range(c, "dst", dst, count);
        return e ? e : fc_check_device_range(c, "src", src, count);
    }
    case cudaMemcpyHostToHost:
        return fc_unsupported(c, "host-to-host copies");
    case cudaMemcpyDefault:
        break;
    }
    return fc_misuse(c, cudaErrorInvalidMemcpyDirection, "kind %d", (int)dir);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    FC_CALL("cudaMemcpyAsync", "dst=%p, src=%p, count=%zu, kind=%s, stream=%p", dst, src, count,
            memcpy_kind_name(kind), (void *)stream);
    if ((unsigned)kind > cudaMemcpyDefault)
        return fc_misuse(&call_, cudaErrorInvalidMemcpyDirection, "kind %d", (int)kind);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(&call_, stream, &e);
    enum cudaMemcpyKind dir = kind == cudaMemcpyDefault ? infer_kind(dst, src) : kind;
    if (s && count)
        e = check_copy_locked(&call_, dir, dst, src, count);
    fc_op *op = NULL;
    if (s && count && !e && !(op = op_new(FC_OP_COPY, &call_)))
        e = fc_error(cudaErrorMemoryAllocation);
    if (op && !e) {
        op->dst = dst;
        op->src = src;
        op->len = count;
        op->dir = dir;
        op->us = fc.copy_delay_us;
        if (dir == cudaMemcpyHostToDevice)
            op->src_hash = fc_hash(src, count); /* what the copy must deliver */
        enqueue_locked(s, op);
        fc_log_locked(FAKECUDA_LOG_COPY, s, NULL, 0);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* ---- kernels --------------------------------------------------------------------- */

/* A kernel: on a stream of the current device (the programming guide: a
 * launch into another device's stream fails), `us` of stream time. */
static cudaError_t launch(const fc_call *c, dim3 grid, dim3 block, cudaStream_t stream,
                          enum fc_op_kind kind, const void *src, size_t len, unsigned us)
{
    int dev;
    cudaError_t e = fc_current_device(c, &dev);
    if (e)
        return e;
    pthread_mutex_lock(&fc.lock);
    struct CUstream_st *s = find_stream(c, stream, &e);
    if (s && s->device != dev)
        e = fc_misuse(c, cudaErrorInvalidResourceHandle,
                      "kernel launched from device %d into stream S%llu of device %d", dev,
                      (unsigned long long)s->id, s->device);
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (s && !e && ((uint64_t)grid.x * grid.y * grid.z == 0 || threads == 0 || threads > 1024))
        e = fc_misuse(c, cudaErrorInvalidConfiguration, "grid %ux%ux%u, block %ux%ux%u", grid.x,
                      grid.y, grid.z, block.x, block.y, block.z);
    if (s && !e && kind == FC_OP_READ)
        e = fc_check_device_range(c, "ptr", src, len);
    fc_op *op = NULL;
    if (s && !e && !(op = op_new(kind, c)))
        e = fc_error(cudaErrorMemoryAllocation);
    if (op && !e) {
        op->src = src;
        op->len = len;
        op->us = kind == FC_OP_READ ? us : fc.kernel_us;
        enqueue_locked(s, op);
        fc_log_locked(FAKECUDA_LOG_KERNEL, s, NULL, 0);
        atomic_fetch_add(&fc_stats.kernels, 1);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

int fakecuda_launch_read(const void *ptr, size_t len, unsigned us, void *stream)
{
    FC_CALL("fakecuda_launch_read", "ptr=%p, len=%zu, us=%u, stream=%p", ptr, len, us, stream);
    dim3 one = {1, 1, 1};
    return launch(&call_, one, one, stream, FC_OP_READ, ptr, len, us);
}

static fc_function *find_function_locked(const void *host_fun)
{
    for (fc_function *f = functions; f; f = f->next)
        if (f->host_fun == host_fun || (const void *)f == host_fun)
            return f;
    return NULL;
}

void **__cudaRegisterFatBinary(void *fatCubin)
{
    fc_init_once();
    static void *handle;
    handle = fatCubin; /* only its address matters to nvcc's stubs */
    return &handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

/* Referenced by nvcc's unoptimised host code (managed variables); nothing
 * to initialise here. */
char __cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)fatCubinHandle, (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim,
        (void)gDim, (void)wSize;
    fc_init_once();
    fc_function *f = calloc(1, sizeof *f);
    if (!f)
        abort();
    f->host_fun = hostFun;
    f->name = deviceName;
    pthread_mutex_lock(&fc.lock);
    f->next = functions;
    functions = f;
    pthread_mutex_unlock(&fc.lock);
}

/* The <<<grid, block, shared, stream>>> of a launch, from the call site to
 * the stub that launches (a stack, per thread). */
static _Thread_local struct {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
} tl_config[8];
static _Thread_local int tl_configs;

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st *stream)
{
    if (tl_configs == 8)
        return 1; /* nonzero: the stub does not launch */
    tl_config[tl_configs].grid = gridDim;
    tl_config[tl_configs].block = blockDim;
    tl_config[tl_configs].shared = sharedMem;
    tl_config[tl_configs].stream = stream;
    tl_configs++;
    return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                       void *stream)
{
    FC_CALL("__cudaPopCallConfiguration", "%s", "");
    if (tl_configs == 0)
        return fc_misuse(&call_, cudaErrorInvalidConfiguration, "no launch configuration pushed");
    tl_configs--;
    *gridDim = tl_config[tl_configs].grid;
    *blockDim = tl_config[tl_configs].block;
    *sharedMem = tl_config[tl_configs].shared;
    *(cudaStream_t *)stream = tl_config[tl_configs].stream;
    return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun)
{
    FC_CALL("__cudaGetKernel", "kernel=%p, fun=%p", (void *)kernel, fun);
    pthread_mutex_lock(&fc.lock);
    fc_function *f = find_function_locked(fun);
    pthread_mutex_unlock(&fc.lock);
    if (!f)
        return fc_misuse(&call_, cudaErrorInvalidDeviceFunction, "%p was never registered", fun);
    *kernel = (cudaKernel_t)(void *)f;
    return cudaSuccess;
}

static cudaError_t launch_function(const fc_call *c, const void *fun, dim3 grid, dim3 block,
                                   cudaStream_t stream)
{
    pthread_mutex_lock(&fc.lock);
    fc_function *f = find_function_locked(fun);
    pthread_mutex_unlock(&fc.lock);
    if (!f)
        return fc_misuse(c, cudaErrorInvalidDeviceFunction, "%p is not a registered kernel", fun);
    return launch(c, grid, block, stream, FC_OP_KERNEL, NULL, 0, 0);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream)
{
    FC_CALL("__cudaLaunchKernel", "kernel=%p, grid=%ux%ux%u, block=%ux%ux%u, shared=%zu, stream=%p",
            (void *)kernel, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z,
            sharedMem, (void *)stream);
    (void)args;
    return launch_function(&call_, kernel, gridDim, blockDim, stream);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream)
{
    FC_CALL("cudaLaunchKernel", "func=%p, grid=%ux%ux%u, block=%ux%ux%u, shared=%zu, stream=%p",
            func, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z, sharedMem,
            (void *)stream);
    (void)args;
    return launch_function(&call_, func, gridDim, blockDim, stream);
}
