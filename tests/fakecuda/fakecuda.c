/* fakecuda: a strict stand-in for the CUDA runtime API, for tests only.
 *
 * shardfeed's CUDA glue (lib/reader/device_cuda.c) and its GPU check
 * (tools/gpu/gpu_check.cu) are compiled against the real
 * <cuda_runtime_api.h> and linked with this library instead of cudart
 * (-DSHARDFEED_CUDA=FAKE), so tests execute exactly the code that ships.
 *
 * What it models, as CUDA documents it:
 *  - devices: a configured count (FAKECUDA_DEVICES; 0 gives cudaErrorNoDevice
 *    like a machine without a GPU), a current device per thread (0 at
 *    start), memory per device (cudaMemGetInfo), plausible properties and
 *    attributes; primary contexts: cudaSetDevice creates the device's (as
 *    since CUDA 12), and so does any call but the device queries on a thread
 *    whose current device has none; fakecuda_stat("contexts") counts them,
 *    so a context made on a device nobody asked for shows;
 *  - device memory: each cudaMalloc is a mapping of its own, PROT_NONE
 *    except inside the fake's own copies, with a guard page after it: host
 *    code touching device memory crashes as it would with a GPU. Freed
 *    allocations stay mapped and inaccessible, so a stale pointer is
 *    recognised as a use after free. cudaFree first waits for the device's
 *    queued work, as it synchronizes on a GPU;
 *  - host memory: cudaHostRegister/Unregister (the range must be mapped and
 *    not registered yet), cudaHostAlloc/cudaMallocHost/cudaFreeHost;
 *  - streams: each a FIFO run by its own worker thread, copies delayed by
 *    FAKECUDA_COPY_DELAY_US so that they really complete late; a recording
 *    of an event completes when its stream reaches it; cudaStreamWaitEvent
 *    waits for the recording current at the call (none: no wait);
 *    synchronize and query cover the work queued before the call. The
 *    programming guide's multi-device rules: a copy may go on any device's
 *    stream, a kernel only on the current device's; an event is recorded
 *    only on a stream of its own device; waits and synchronizes work across
 *    devices;
 *  - events: record, query, synchronize, elapsed time in stream order (the
 *    host clock when the worker reached the recording); elapsed time is
 *    refused for cudaEventDisableTiming, unrecorded or unfinished events, as
 *    by CUDA. Destroying an event with a recording pending is allowed: its
 *    waiters still wait for it, as on a GPU;
 *  - kernels: nvcc's launch stubs (__cudaRegisterFatBinary,
 *    __cudaRegisterFunction, __cudaPush/PopCallConfiguration,
 *    __cudaLaunchKernel, ...) are served; a launch is stream work taking
 *    FAKECUDA_KERNEL_US: no device code runs. fakecuda_launch_read is a test
 *    kernel that reads a device range (for the overlap check below).
 *
 * Stricter than CUDA, on purpose (each is a bug with a GPU even where CUDA
 * accepts the call):
 *  - cudaMemcpyAsync from or to pageable host memory is refused (with a GPU
 *    it is staged and silently synchronous);
 *  - cudaStreamDestroy with work still queued is refused (CUDA would finish
 *    it later, reading memory the caller is about to free), and so are
 *    cudaHostUnregister/cudaFreeHost of memory that queued copies use;
 *  - every misuse (unknown or destroyed handle, wrong device, out of
 *    bounds, use after free, double free, wrong copy direction, bad flags)
 *    fails with a message naming the call and its arguments, and is counted
 *    (fakecuda_stat("misuse")).
 *
 * Hazards seen while work runs (fakecuda_stat("races"), each printed):
 *  - a copy to the device whose host bytes changed between cudaMemcpyAsync
 *    and the copy (a host buffer reused while its copy was pending);
 *  - two accesses to overlapping device memory, one of them a write, running
 *    at the same time on different streams: nothing ordered them.
 *
 * Not modelled: the legacy and per-thread default streams (handle 0: refused
 * as unsupported), synchronous cudaMemcpy, graphs, managed memory, peer
 * access, IPC, device code and its effects, errors sticky to a context.
 * Times are host-clock times of a simulation: meaningless as GPU figures.
 *
 * This file: configuration, reporting, devices, errors, the control API and
 * the report at exit. fakecuda_mem.c: memory. fakecuda_stream.c: streams,
 * events, copies and kernels.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda_internal.h"

fc_state fc = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .changed = PTHREAD_COND_INITIALIZER,
    .dma = PTHREAD_MUTEX_INITIALIZER,
};
fc_counters fc_stats;

static pthread_once_t fc_once = PTHREAD_ONCE_INIT;
static _Thread_local int tl_device;
static _Thread_local cudaError_t tl_last_error;

/* ---- configuration ---------------------------------------------------------- */

static unsigned long env_ulong(const char *name, unsigned long dflt, unsigned long max)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || *end || x > max) {
        fprintf(stderr, "fakecuda: %s=%s: expected a number up to %lu\n", name, v, max);
        abort();
    }
    return x;
}

static void fc_init(void)
{
    fc.devices = (int)env_ulong("FAKECUDA_DEVICES", 1, FC_MAX_DEVICES);
    fc.mem_bytes = (size_t)env_ulong("FAKECUDA_MEM_MIB", 16384, 1 << 20) << 20;
    fc.copy_delay_us = (unsigned)env_ulong("FAKECUDA_COPY_DELAY_US", 0, 10000000);
    fc.kernel_us = (unsigned)env_ulong("FAKECUDA_KERNEL_US", 100, 10000000);
    fc.strict_exit = env_ulong("FAKECUDA_STRICT", 0, 1) == 1;
    atomic_store(&fc.abort_on_misuse, fc.strict_exit);
}

void fc_init_once(void)
{
    pthread_once(&fc_once, fc_init);
}

void fakecuda_set_device_count(int n)
{
    fc_init_once();
    if (n < 0 || n > FC_MAX_DEVICES) {
        fprintf(stderr, "fakecuda_set_device_count(%d): expected 0..%d\n", n, FC_MAX_DEVICES);
        abort();
    }
    pthread_mutex_lock(&fc.lock);
    fc.devices = n;
    pthread_mutex_unlock(&fc.lock);
}

void fakecuda_set_copy_delay_us(unsigned us)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    fc.copy_delay_us = us;
    pthread_mutex_unlock(&fc.lock);
}

void fakecuda_set_kernel_us(unsigned us)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    fc.kernel_us = us;
    pthread_mutex_unlock(&fc.lock);
}

void fakecuda_set_abort_on_misuse(int on)
{
    fc_init_once();
    atomic_store(&fc.abort_on_misuse, on);
}

/* ---- failure injection ------------------------------------------------------ */

#define FC_MAX_INJECT 8
static struct {
    char call[64];
    unsigned left; /* calls until it fires (1: the next one) */
    cudaError_t err;
} injections[FC_MAX_INJECT];

void fakecuda_fail_call(const char *call, unsigned nth, int err)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    int slot = -1;
    for (int i = 0; i < FC_MAX_INJECT; i++)
        if (injections[i].left && strcmp(injections[i].call, call) == 0)
            slot = i;
    for (int i = 0; slot < 0 && i < FC_MAX_INJECT; i++)
        if (!injections[i].left)
            slot = i;
    if (slot < 0 || strlen(call) >= sizeof injections[0].call) {
        fprintf(stderr, "fakecuda_fail_call(%s): too many injections or too long a name\n", call);
        abort();
    }
    snprintf(injections[slot].call, sizeof injections[slot].call, "%s", call);
    injections[slot].left = nth;
    injections[slot].err = (cudaError_t)err;
    pthread_mutex_unlock(&fc.lock);
}

/* The calls that need no context: the others create the current device's
 * primary context if it has none, as the runtime initialises lazily. */
static int needs_context(const char *call)
{
    static const char *const none[] = {
        "cudaGetDeviceCount", "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceProperties",
        "cudaDeviceGetAttribute", "cudaRuntimeGetVersion", "cudaDriverGetVersion",
        "__cudaPopCallConfiguration", "__cudaGetKernel",
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (strcmp(call, none[i]) == 0)
            return 0;
    return 1;
}

int fc_enter(fc_call *c, cudaError_t *err)
{
    fc_init_once();
    int fire = 0;
    pthread_mutex_lock(&fc.lock);
    for (int i = 0; i < FC_MAX_INJECT; i++)
        if (injections[i].left && strcmp(injections[i].call, c->name) == 0 &&
            --injections[i].left == 0) {
            fire = 1;
            *err = injections[i].err;
        }
    if (!fire && tl_device < fc.devices && needs_context(c->name))
        fc.context[tl_device] = 1;
    pthread_mutex_unlock(&fc.lock);
    if (fire) {
        fprintf(stderr, "fakecuda: %s(%s): injected failure %s\n", c->name, c->args,
                cudaGetErrorName(*err));
        tl_last_error = *err;
    }
    return fire;
}

/* ---- reporting -------------------------------------------------------------- */

/* Reporting never takes fc.lock: callers often hold it. */
static int fc_aborting(void)
{
    return atomic_load(&fc.abort_on_misuse);
}

cudaError_t fc_error(cudaError_t err)
{
    tl_last_error = err;
    return err;
}

static void fc_vreport(const char *kind, const fc_call *c, cudaError_t err, const char *fmt,
                       va_list ap)
{
    char why[768];
    vsnprintf(why, sizeof why, fmt, ap);
    if (c)
        fprintf(stderr, "fakecuda: %s: %s(%s) -> %s: %s\n", kind, c->name, c->args,
                cudaGetErrorName(err), why);
    else
        fprintf(stderr, "fakecuda: %s: %s\n", kind, why);
}

cudaError_t fc_misuse(const fc_call *c, cudaError_t err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fc_vreport("MISUSE", c, err, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fc_stats.misuse, 1);
    if (fc_aborting())
        abort();
    return fc_error(err);
}

cudaError_t fc_unsupported(const fc_call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fc_vreport("not modelled by the fake", c, cudaErrorNotSupported, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fc_stats.unsupported, 1);
    return fc_error(cudaErrorNotSupported);
}

void fc_race(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fc_vreport("RACE", NULL, cudaSuccess, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fc_stats.races, 1);
    if (fc_aborting())
        abort();
}

/* ---- helpers ---------------------------------------------------------------- */

double fc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void fc_sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (us && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

uint64_t fc_hash(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- devices ---------------------------------------------------------------- */

cudaError_t fc_current_device(const fc_call *c, int *dev)
{
    pthread_mutex_lock(&fc.lock);
    int n = fc.devices;
    pthread_mutex_unlock(&fc.lock);
    if (n == 0)
        return fc_error(cudaErrorNoDevice);
    if (tl_device >= n)
        return fc_misuse(c, cudaErrorInvalidDevice, "the thread's device %d is gone (%d devices)",
                         tl_device, n);
    *dev = tl_device;
    return cudaSuccess;
}

static cudaError_t check_ordinal(const fc_call *c, int device)
{
    pthread_mutex_lock(&fc.lock);
    int n = fc.devices;
    pthread_mutex_unlock(&fc.lock);
    if (n == 0)
        return fc_error(cudaErrorNoDevice);
    if (device < 0 || device >= n)
        return fc_misuse(c, cudaErrorInvalidDevice, "no device %d (%d devices)", device, n);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    FC_CALL("cudaGetDeviceCount", "count=%p", (void *)count);
    if (!count)
        return fc_misuse(&call_, cudaErrorInvalidValue, "count is NULL");
    pthread_mutex_lock(&fc.lock);
    *count = fc.devices;
    pthread_mutex_unlock(&fc.lock);
    return *count ? cudaSuccess : fc_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    FC_CALL("cudaSetDevice", "device=%d", device);
    cudaError_t e = check_ordinal(&call_, device);
    if (e == cudaSuccess) {
        tl_device = device;
        pthread_mutex_lock(&fc.lock);
        fc.context[device] = 1; /* CUDA 12: cudaSetDevice initialises the device */
        pthread_mutex_unlock(&fc.lock);
    }
    return e;
}

cudaError_t cudaGetDevice(int *device)
{
    FC_CALL("cudaGetDevice", "device=%p", (void *)device);
    if (!device)
        return fc_misuse(&call_, cudaErrorInvalidValue, "device is NULL");
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e == cudaSuccess)
        *device = dev;
    return e;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    FC_CALL("cudaMemGetInfo", "free=%p, total=%p", (void *)free_bytes, (void *)total);
    if (!free_bytes || !total)
        return fc_misuse(&call_, cudaErrorInvalidValue, "NULL output");
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    pthread_mutex_lock(&fc.lock);
    *total = fc.mem_bytes;
    *free_bytes = fc.mem_bytes - fc.used[dev];
    pthread_mutex_unlock(&fc.lock);
    return cudaSuccess;
}

/* Plausible values (an H100-like part), enough for code that prints them. */
static int attribute(enum cudaDeviceAttr attr, int device, int *value)
{
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return 1;
    case cudaDevAttrWarpSize: *value = 32; return 1;
    case cudaDevAttrClockRate: *value = 1980000; return 1; /* kHz */
    case cudaDevAttrMultiProcessorCount: *value = 132; return 1;
    case cudaDevAttrPciBusId: *value = 0x18 + device; return 1;
    case cudaDevAttrMemoryClockRate: *value = 2619000; return 1;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return 1;
    case cudaDevAttrAsyncEngineCount: *value = 3; return 1;
    case cudaDevAttrUnifiedAddressing: *value = 1; return 1;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return 1;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return 1;
    case cudaDevAttrCanUseHostPointerForRegisteredMem: *value = 1; return 1;
    case cudaDevAttrHostRegisterSupported: *value = 1; return 1;
    default: return 0;
    }
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    FC_CALL("cudaDeviceGetAttribute", "value=%p, attr=%d, device=%d", (void *)value, (int)attr,
            device);
    if (!value)
        return fc_misuse(&call_, cudaErrorInvalidValue, "value is NULL");
    cudaError_t e = check_ordinal(&call_, device);
    if (e)
        return e;
    if (!attribute(attr, device, value))
        return fc_unsupported(&call_, "attribute %d has no fake value (add it to attribute())",
                              (int)attr);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    FC_CALL("cudaGetDeviceProperties", "prop=%p, device=%d", (void *)prop, device);
    if (!prop)
        return fc_misuse(&call_, cudaErrorInvalidValue, "prop is NULL");
    cudaError_t e = check_ordinal(&call_, device);
    if (e)
        return e;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "fakecuda device %d (not a GPU)", device);
    pthread_mutex_lock(&fc.lock);
    prop->totalGlobalMem = fc.mem_bytes;
    pthread_mutex_unlock(&fc.lock);
    attribute(cudaDevAttrMaxThreadsPerBlock, device, &prop->maxThreadsPerBlock);
    attribute(cudaDevAttrWarpSize, device, &prop->warpSize);
    attribute(cudaDevAttrMultiProcessorCount, device, &prop->multiProcessorCount);
    attribute(cudaDevAttrComputeCapabilityMajor, device, &prop->major);
    attribute(cudaDevAttrComputeCapabilityMinor, device, &prop->minor);
    attribute(cudaDevAttrPciBusId, device, &prop->pciBusID);
    attribute(cudaDevAttrGlobalMemoryBusWidth, device, &prop->memoryBusWidth);
    attribute(cudaDevAttrAsyncEngineCount, device, &prop->asyncEngineCount);
    attribute(cudaDevAttrUnifiedAddressing, device, &prop->unifiedAddressing);
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->sharedMemPerBlock = 48 << 10;
    prop->canMapHostMemory = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    FC_CALL("cudaDeviceSynchronize", "%s", "");
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    pthread_mutex_lock(&fc.lock);
    fc_device_drain_locked(dev);
    pthread_mutex_unlock(&fc.lock);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    FC_CALL("cudaRuntimeGetVersion", "runtimeVersion=%p", (void *)v);
    if (!v)
        return fc_misuse(&call_, cudaErrorInvalidValue, "NULL output");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    FC_CALL("cudaDriverGetVersion", "driverVersion=%p", (void *)v);
    if (!v)
        return fc_misuse(&call_, cudaErrorInvalidValue, "NULL output");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

/* ---- errors ----------------------------------------------------------------- */

#define FC_ERRORS(X)                                                                               \
    X(cudaSuccess, "no error")                                                                     \
    X(cudaErrorInvalidValue, "invalid argument")                                                   \
    X(cudaErrorMemoryAllocation, "out of memory")                                                  \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                             \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                     \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                        \
    X(cudaErrorInvalidDeviceFunction, "invalid device function")                                   \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                     \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                            \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                   \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state")             \
    X(cudaErrorNotReady, "device not ready")                                                       \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                         \
    X(cudaErrorHostMemoryAlreadyRegistered,                                                        \
      "part or all of the requested memory range is already mapped")                              \
    X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
    X(cudaErrorNotSupported, "operation not supported")

const char *cudaGetErrorString(cudaError_t error)
{
#define FC_STRING(code, text)                                                                      \
    if (error == code)                                                                             \
        return text;
    FC_ERRORS(FC_STRING)
#undef FC_STRING
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
#define FC_NAME(code, text)                                                                        \
    if (error == code)                                                                             \
        return #code;
    FC_ERRORS(FC_NAME)
#undef FC_NAME
    return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tl_last_error;
    tl_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return tl_last_error;
}

/* ---- inspection ------------------------------------------------------------- */

static uint64_t live_regions(enum fc_region_kind kind, int bytes)
{
    uint64_t n = 0;
    for (fc_region *r = fc.regions; r; r = r->next)
        if (r->live && r->kind == kind)
            n += bytes ? r->size : 1;
    return n;
}

uint64_t fakecuda_stat(const char *name)
{
    fc_init_once();
    static const struct {
        const char *name;
        atomic_uint_fast64_t *v;
    } counters[] = {
        {"misuse", &fc_stats.misuse},
        {"races", &fc_stats.races},
        {"unsupported", &fc_stats.unsupported},
        {"copies", &fc_stats.copies},
        {"copy_bytes", &fc_stats.copy_bytes},
        {"kernels", &fc_stats.kernels},
        {"records", &fc_stats.records},
        {"waits", &fc_stats.waits},
        {"stream_syncs", &fc_stats.stream_syncs},
        {"event_syncs", &fc_stats.event_syncs},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        if (strcmp(name, counters[i].name) == 0)
            return atomic_load(counters[i].v);
    uint64_t v = UINT64_MAX;
    pthread_mutex_lock(&fc.lock);
    if (strcmp(name, "streams") == 0)
        v = fc_live_streams_locked();
    else if (strcmp(name, "events") == 0)
        v = fc_live_events_locked();
    else if (strcmp(name, "device_allocs") == 0)
        v = live_regions(FC_DEVICE, 0);
    else if (strcmp(name, "device_bytes") == 0)
        v = live_regions(FC_DEVICE, 1);
    else if (strcmp(name, "host_registrations") == 0)
        v = live_regions(FC_HOST_REGISTERED, 0);
    else if (strcmp(name, "host_allocs") == 0)
        v = live_regions(FC_HOST_ALLOC, 0);
    else if (strcmp(name, "contexts") == 0) {
        v = 0;
        for (int d = 0; d < FC_MAX_DEVICES; d++)
            v += (uint64_t)fc.context[d];
    }
    pthread_mutex_unlock(&fc.lock);
    if (v == UINT64_MAX)
        fprintf(stderr, "fakecuda_stat: no statistic named '%s'\n", name);
    return v;
}

/* ---- the report at exit ----------------------------------------------------- */

static const char *region_kind_name(enum fc_region_kind k)
{
    return k == FC_DEVICE ? "cudaMalloc" : k == FC_HOST_ALLOC ? "cudaHostAlloc" : "cudaHostRegister";
}

/* Leaks are reported when the process exits (a shared library's
 * destructor); with FAKECUDA_STRICT=1 they, and any misuse or race seen,
 * make the exit status 3. */
__attribute__((destructor)) static void fc_report_at_exit(void)
{
    int ran = 0;
    pthread_once(&fc_once, fc_init); /* a no-op when the library was used */
    pthread_mutex_lock(&fc.lock);
    ran = fc.next_id > 0;
    uint64_t leaks = 0;
    for (fc_region *r = fc.regions; r; r = r->next)
        if (r->live && leaks++ < 20)
            fprintf(stderr, "fakecuda: at exit: LEAK: %s #%llu of %zu bytes at %p (device %d)\n",
                    region_kind_name(r->kind), (unsigned long long)r->id, r->size, (void *)r->base,
                    r->device);
    uint64_t streams = fc_live_streams_locked(), events = fc_live_events_locked();
    int strict = fc.strict_exit;
    pthread_mutex_unlock(&fc.lock);
    if (streams || events)
        fprintf(stderr, "fakecuda: at exit: LEAK: %llu streams and %llu events not destroyed\n",
                (unsigned long long)streams, (unsigned long long)events);
    leaks += streams + events;
    uint64_t misuse = atomic_load(&fc_stats.misuse), races = atomic_load(&fc_stats.races);
    if (ran && (leaks || misuse || races))
        fprintf(stderr, "fakecuda: at exit: %llu leaks, %llu misuses, %llu races\n",
                (unsigned long long)leaks, (unsigned long long)misuse, (unsigned long long)races);
    if (strict && (leaks || misuse || races)) {
        fflush(NULL);
        _exit(3);
    }
}
