/* The CUDA implementation of the device interface. The slab (an anonymous
 * mmap, also registered with io_uring) is page-locked once with
 * cudaHostRegister, so the same pages serve the disk DMA and the H2D DMA; no
 * write-combined memory, since the CPU reads it for checksums. Each slot owns
 * a non-blocking stream, a device buffer carved from one pool allocated at
 * open (device memory stays constant afterwards), an event recorded after its
 * copy and an event the consumer's release records. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "error_internal.h"
#include "shardfeed_config.h"

#if SF_HAVE_CUDA
#include <cuda_runtime_api.h>

int reader_device_cuda_compiled(void)
{
    return 1;
}

struct reader_device {
    int ordinal;
    uint8_t *slab;
    uint64_t slab_bytes, slot_bytes;
    uint32_t slots;
    uint8_t *pool;
    cudaStream_t *stream;
    cudaEvent_t *copied, *released;
    /* Recorded right after copied: what a slot's refill waits on, with
     * cudaEventBlockingSync so that the I/O thread sleeps. copied stays a
     * spinning event: sf_batch_wait's latency is the consumer's. An I/O
     * thread spinning a core for every slot behind a GPU that runs behind
     * competes with the trainer for the CPU. */
    cudaEvent_t *landed;
    int *fenced; /* released[slot] was recorded and the next copy must wait on it */
    int registered;
    /* Counters: timing events around each copy on the slot's stream and
     * around the consumer's wait in its stream (wait_on), read when the
     * slot's next copy finds them complete. copied and released stay
     * without timing: they order streams, the fastest kind. */
    cudaEvent_t *copy_from, *copy_to, *wait_from, *wait_to;
    int *copy_timed, *wait_timed; /* a pair was recorded and not counted yet */
    pthread_mutex_t count_lock;
    uint64_t copy_bytes;
    double copy_ms, wait_ms;
};

/* A failing call on a device that exists: SF_E_DEVICE, not the
 * SF_E_UNSUPPORTED of "no GPU", which a program may take for "fall back to
 * the CPU". */
static int cuda_err(cudaError_t e, const char *what)
{
    return sf_fail(SF_E_DEVICE, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

/* open and close make their CUDA calls on a thread of their own. They need
 * the reader's device current, and the caller's thread must keep its own:
 * a trainer on cuda:0 opening a reader for cuda:1 would find itself on
 * cuda:1, and setting its device back would create a context on a device
 * its thread may never have used (cudaSetDevice initialises the device
 * since CUDA 12). On the caller's thread only if no thread can start. */
static void run_on_own_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) == 0)
        pthread_join(t, NULL);
    else
        fn(arg);
}

static void *close_on_device(void *arg)
{
    reader_device *d = arg;
    cudaSetDevice(d->ordinal);
    for (uint32_t i = 0; i < d->slots; i++) {
        if (d->stream && d->stream[i]) {
            cudaStreamSynchronize(d->stream[i]);
            cudaStreamDestroy(d->stream[i]);
        }
        if (d->copied && d->copied[i])
            cudaEventDestroy(d->copied[i]);
        if (d->landed && d->landed[i])
            cudaEventDestroy(d->landed[i]);
        if (d->released && d->released[i])
            cudaEventDestroy(d->released[i]);
        cudaEvent_t *timing[] = {d->copy_from, d->copy_to, d->wait_from, d->wait_to};
        for (size_t k = 0; k < sizeof timing / sizeof timing[0]; k++)
            if (timing[k] && timing[k][i])
                cudaEventDestroy(timing[k][i]);
    }
    if (d->pool)
        cudaFree(d->pool);
    if (d->registered)
        cudaHostUnregister(d->slab);
    return NULL;
}

static void cuda_close(reader_device *d)
{
    if (!d)
        return;
    run_on_own_thread(close_on_device, d);
    free(d->stream);
    free(d->copied);
    free(d->landed);
    free(d->released);
    free(d->fenced);
    free(d->copy_from);
    free(d->copy_to);
    free(d->wait_from);
    free(d->wait_to);
    free(d->copy_timed);
    free(d->wait_timed);
    pthread_mutex_destroy(&d->count_lock);
    free(d);
}

/* The CUDA side of open; the first failing call and what it was for. */
typedef struct open_job {
    reader_device *d;
    cudaError_t e;
    const char *what;
} open_job;

static void *open_on_device(void *arg)
{
    open_job *j = arg;
    reader_device *d = j->d;
    cudaError_t e;
    if ((e = cudaSetDevice(d->ordinal)) != cudaSuccess) {
        j->what = "cudaSetDevice";
    } else if ((e = cudaHostRegister(d->slab, d->slab_bytes, cudaHostRegisterDefault)) != cudaSuccess) {
        j->what = "cudaHostRegister of the batch slab";
    } else {
        d->registered = 1;
        if ((e = cudaMalloc((void **)&d->pool, d->slot_bytes * d->slots)) != cudaSuccess)
            j->what = "cudaMalloc of the device batch pool";
    }
    for (uint32_t i = 0; e == cudaSuccess && i < d->slots; i++) {
        if ((e = cudaStreamCreateWithFlags(&d->stream[i], cudaStreamNonBlocking)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&d->copied[i], cudaEventDisableTiming)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&d->landed[i], cudaEventDisableTiming |
                                                             cudaEventBlockingSync)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&d->released[i], cudaEventDisableTiming)) != cudaSuccess ||
            (e = cudaEventCreate(&d->copy_from[i])) != cudaSuccess ||
            (e = cudaEventCreate(&d->copy_to[i])) != cudaSuccess ||
            (e = cudaEventCreate(&d->wait_from[i])) != cudaSuccess ||
            (e = cudaEventCreate(&d->wait_to[i])) != cudaSuccess)
            j->what = "creating streams and events";
    }
    j->e = e;
    return NULL;
}

static int cuda_open(reader_device **out, int ordinal, uint8_t *slab, uint64_t slab_bytes,
                     uint32_t slots, uint64_t slot_bytes)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        /* A machine without a GPU usually has no driver either: cudart then says
         * "driver version is insufficient", which sends users after a driver
         * upgrade. Say what it means first. */
        return sf_fail(SF_E_UNSUPPORTED, "no GPU found: no CUDA device available (%s)",
                       cudaGetErrorString(e));
    if (ordinal < 0 || ordinal >= count)
        return sf_fail(SF_E_UNSUPPORTED, "no CUDA device cuda:%d (this machine has %d)", ordinal,
                       count);
    reader_device *d = calloc(1, sizeof *d);
    if (!d)
        return sf_fail(-ENOMEM, "out of memory");
    d->ordinal = ordinal;
    d->slab = slab;
    d->slab_bytes = slab_bytes;
    d->slots = slots;
    d->slot_bytes = slot_bytes;
    d->stream = calloc(slots, sizeof *d->stream);
    d->copied = calloc(slots, sizeof *d->copied);
    d->landed = calloc(slots, sizeof *d->landed);
    d->released = calloc(slots, sizeof *d->released);
    d->fenced = calloc(slots, sizeof *d->fenced);
    d->copy_from = calloc(slots, sizeof *d->copy_from);
    d->copy_to = calloc(slots, sizeof *d->copy_to);
    d->wait_from = calloc(slots, sizeof *d->wait_from);
    d->wait_to = calloc(slots, sizeof *d->wait_to);
    d->copy_timed = calloc(slots, sizeof *d->copy_timed);
    d->wait_timed = calloc(slots, sizeof *d->wait_timed);
    pthread_mutex_init(&d->count_lock, NULL);
    int rc = 0;
    if (!d->stream || !d->copied || !d->landed || !d->released || !d->fenced || !d->copy_from ||
        !d->copy_to || !d->wait_from || !d->wait_to || !d->copy_timed || !d->wait_timed)
        rc = sf_fail(-ENOMEM, "out of memory");
    open_job job = {d, cudaSuccess, NULL};
    if (!rc)
        run_on_own_thread(open_on_device, &job);
    if (!rc && job.e != cudaSuccess)
        rc = cuda_err(job.e, job.what);
    if (rc) {
        cuda_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* Adds the time between two timing events to *ms when both completed. */
static void count_pair(reader_device *d, cudaEvent_t from, cudaEvent_t to, double *ms)
{
    float t = 0;
    if (cudaEventQuery(to) == cudaSuccess && cudaEventElapsedTime(&t, from, to) == cudaSuccess) {
        pthread_mutex_lock(&d->count_lock);
        *ms += t;
        pthread_mutex_unlock(&d->count_lock);
    }
}

/* Before a slot's events are recorded again: counts the last copy's time
 * and the consumer's wait for it, when complete (a wait still pending on a
 * consumer's stream far behind is not counted). */
static void count_slot(reader_device *d, uint32_t slot)
{
    if (d->copy_timed[slot])
        count_pair(d, d->copy_from[slot], d->copy_to[slot], &d->copy_ms);
    if (d->wait_timed[slot])
        count_pair(d, d->wait_from[slot], d->wait_to[slot], &d->wait_ms);
    d->copy_timed[slot] = d->wait_timed[slot] = 0;
}

static int cuda_copy(reader_device *d, uint32_t slot, const reader_copy_range *ranges, uint32_t n)
{
    /* Called from I/O threads: the device is per thread in the runtime. */
    cudaError_t e = cudaSetDevice(d->ordinal);
    if (e == cudaSuccess && d->fenced[slot])
        e = cudaStreamWaitEvent(d->stream[slot], d->released[slot], 0);
    count_slot(d, slot);
    const uint8_t *src = d->slab + (uint64_t)slot * d->slot_bytes;
    uint8_t *dst = d->pool + (uint64_t)slot * d->slot_bytes;
    uint64_t bytes = 0;
    int queued = 0;
    if (e == cudaSuccess)
        e = cudaEventRecord(d->copy_from[slot], d->stream[slot]);
    for (uint32_t k = 0; e == cudaSuccess && k < n; k++) {
        e = cudaMemcpyAsync(dst + ranges[k].off, src + ranges[k].off, ranges[k].len,
                            cudaMemcpyHostToDevice, d->stream[slot]);
        bytes += ranges[k].len;
        queued |= e == cudaSuccess;
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(d->copy_to[slot], d->stream[slot]);
    if (e == cudaSuccess)
        e = cudaEventRecord(d->copied[slot], d->stream[slot]);
    if (e == cudaSuccess)
        e = cudaEventRecord(d->landed[slot], d->stream[slot]);
    if (e != cudaSuccess && queued) {
        /* Copies are queued but `copied` and `landed` do not follow them:
         * reuse, which waits for `landed`, would let the slot's host bytes be read
         * again while they are overwritten (the fake runtime's race check
         * caught it with cudaEventRecord failing). Wait for them here. */
        if (cudaStreamSynchronize(d->stream[slot]) != cudaSuccess)
            cudaDeviceSynchronize();
    }
    if (e == cudaSuccess) {
        d->copy_timed[slot] = 1;
        pthread_mutex_lock(&d->count_lock);
        d->copy_bytes += bytes;
        pthread_mutex_unlock(&d->count_lock);
    }
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaMemcpyAsync of a batch");
}

/* The consumer calls release and wait_on from its own thread, whose current
 * device may be another one: torch leaves it at cuda:0 unless the program
 * calls torch.cuda.set_device, and moves to a tensor's device only around its
 * own calls. A stream handle of the legacy or per-thread default stream
 * (torch's default stream is passed as cudaStreamLegacy) means that stream of
 * the *current* device, so both switch to the reader's device for their calls
 * and back, as torch's device guard does. */
static int device_enter(const reader_device *d, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    if (*prev == d->ordinal)
        return 0;
    cudaError_t e = cudaSetDevice(d->ordinal);
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaSetDevice");
}

static void device_leave(const reader_device *d, int prev)
{
    if (prev >= 0 && prev != d->ordinal)
        cudaSetDevice(prev);
}

static int cuda_release(reader_device *d, uint32_t slot, void *stream)
{
    d->fenced[slot] = 0;
    if (!stream)
        return 0;
    int prev;
    int rc = device_enter(d, &prev);
    cudaError_t e = rc ? cudaErrorInvalidDevice
                       : cudaEventRecord(d->released[slot], (cudaStream_t)stream);
    if (e == cudaSuccess) {
        d->fenced[slot] = 1;
    } else {
        /* Without the fence the slot's next copy could overwrite memory a
         * kernel queued on `stream` still reads: wait for that work here
         * (for all of the device's if the stream cannot be waited for), and
         * report the failure. */
        if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
            cudaDeviceSynchronize();
        rc = rc ? rc : cuda_err(e, "recording the release of a batch");
    }
    device_leave(d, prev);
    return rc;
}

static int cuda_wait_on(reader_device *d, uint32_t slot, void *stream)
{
    /* The consumer's stream may belong to any thread; the event carries its
     * device. */
    cudaStream_t s = (cudaStream_t)stream;
    int prev;
    int rc = device_enter(d, &prev);
    if (rc)
        return rc;
    int timed = !d->wait_timed[slot] && cudaEventRecord(d->wait_from[slot], s) == cudaSuccess;
    cudaError_t e = cudaStreamWaitEvent(s, d->copied[slot], 0);
    if (e == cudaSuccess && timed)
        d->wait_timed[slot] = cudaEventRecord(d->wait_to[slot], s) == cudaSuccess;
    device_leave(d, prev);
    return e == cudaSuccess ? 0 : cuda_err(e, "making a stream wait for a batch copy");
}

/* Waits on the host for `ev`, recorded after the slot's last copy. */
static int wait_copy(reader_device *d, uint32_t slot, cudaEvent_t ev)
{
    cudaError_t e = cudaEventSynchronize(ev);
    if (e != cudaSuccess) {
        /* The slot is freed after this returns, error or not, and its host
         * bytes refilled: with its copy still queued, that copy (and the
         * consumer's work queued after it) read a later batch's bytes. Wait
         * for the slot's stream, or the whole device, as cuda_copy does: the
         * reader's device, which may not be the calling thread's. */
        int prev;
        if (cudaStreamSynchronize(d->stream[slot]) != cudaSuccess && device_enter(d, &prev) == 0) {
            cudaDeviceSynchronize();
            device_leave(d, prev);
        }
    }
    return e == cudaSuccess ? 0 : cuda_err(e, "waiting for a batch copy");
}

/* sf_batch_wait: the consumer's wait, on the spinning event (latency). */
static int cuda_wait(reader_device *d, uint32_t slot)
{
    return wait_copy(d, slot, d->copied[slot]);
}

/* Before a slot's refill, on an I/O thread: sleeps (cudaEventBlockingSync). */
static int cuda_reuse(reader_device *d, uint32_t slot)
{
    return wait_copy(d, slot, d->landed[slot]);
}

static void *cuda_device_ptr(reader_device *d, uint32_t slot)
{
    return d->pool + (uint64_t)slot * d->slot_bytes;
}

static void *cuda_stream(reader_device *d, uint32_t slot)
{
    return d->stream[slot];
}

static void *cuda_event(reader_device *d, uint32_t slot)
{
    return d->copied[slot];
}

static uint64_t cuda_bytes(reader_device *d)
{
    return d->slot_bytes * d->slots;
}

static void cuda_counters(reader_device *d, reader_device_counters *out)
{
    pthread_mutex_lock(&d->count_lock);
    out->copy_bytes = d->copy_bytes;
    out->copy_seconds = d->copy_ms * 1e-3;
    out->stream_wait_seconds = d->wait_ms * 1e-3;
    pthread_mutex_unlock(&d->count_lock);
}

const reader_device_ops reader_device_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .copy = cuda_copy,
    .release = cuda_release,
    .wait_on = cuda_wait_on,
    .reuse = cuda_reuse,
    .wait = cuda_wait,
    .device_ptr = cuda_device_ptr,
    .stream = cuda_stream,
    .event = cuda_event,
    .bytes = cuda_bytes,
    .counters = cuda_counters,
    .close = cuda_close,
};

#else /* !SF_HAVE_CUDA: the same symbols, failing cleanly. */

int reader_device_cuda_compiled(void)
{
    return 0;
}

static int nocuda_open(reader_device **out, int ordinal, uint8_t *slab, uint64_t slab_bytes,
                       uint32_t slots, uint64_t slot_bytes)
{
    (void)out, (void)ordinal, (void)slab, (void)slab_bytes, (void)slots, (void)slot_bytes;
    return sf_fail(SF_E_UNSUPPORTED,
                   "this shardfeed was built without CUDA (configure with -DSHARDFEED_CUDA=ON)");
}

const reader_device_ops reader_device_cuda = {.name = "cuda", .open = nocuda_open};

#endif
