/* fakecuda: a strict stand-in for the CUDA runtime, for tests only.
 *
 * libfakecuda exports the cudart calls shardfeed uses (same names and
 * signatures as <cuda_runtime_api.h>), so the shipped lib/reader/device_cuda.c
 * and tools/gpu/gpu_check.cu run without a GPU (-DSHARDFEED_CUDA=FAKE).
 * What it models and what it does not: see the comment at the top of
 * fakecuda.c. This header is its test-only control and inspection API; it
 * needs no CUDA header, so a Python test can reach it through ctypes too.
 *
 * Configuration is read from the environment at the first call into the
 * library, and the setters below override it at any time:
 *   FAKECUDA_DEVICES        device count (default 1; 0: cudaGetDeviceCount
 *                           fails with cudaErrorNoDevice, as on a machine
 *                           without a GPU)
 *   FAKECUDA_MEM_MIB        memory of each device (default 16384)
 *   FAKECUDA_COPY_DELAY_US  each copy waits this long on its stream before it
 *                           runs, so that copies really are late (default 0)
 *   FAKECUDA_KERNEL_US      what a kernel launched by nvcc's stubs takes on
 *                           its stream (default 100); the fake runs no device
 *                           code
 *   FAKECUDA_STRICT=1       abort() at the first misuse or race, and turn
 *                           leaks at exit into exit status 3
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void fakecuda_set_device_count(int n);
void fakecuda_set_copy_delay_us(unsigned us);
void fakecuda_set_kernel_us(unsigned us);
/* abort() at the first misuse or race (as FAKECUDA_STRICT=1 does). */
void fakecuda_set_abort_on_misuse(int on);

/* Failure injection: the nth (1-based) call of `call` from now on (e.g.
 * "cudaMalloc") returns `err` (a cudaError_t) and does nothing else. One
 * pending injection per call name; nth 0 removes it. */
void fakecuda_fail_call(const char *call, unsigned nth, int err);

/* A stand-in consumer kernel: on `stream` (a cudaStream_t), reads device
 * memory [ptr, ptr + len) for `us` microseconds. A copy that writes that
 * memory while it runs is reported as a race. Returns a cudaError_t. */
int fakecuda_launch_read(const void *ptr, size_t len, unsigned us, void *stream);

/* Counters and live objects, by name:
 *   misuse       calls refused as misuse (each printed with its arguments)
 *   races        hazards seen while work ran: a copy's host source changed
 *                after it was enqueued, or two unordered device accesses to
 *                the same memory overlapped in time (each printed)
 *   unsupported  calls the fake does not model (each printed)
 *   copies, copy_bytes, kernels, records, waits, stream_syncs, event_syncs
 *   streams, events, device_allocs, device_bytes, host_registrations,
 *   host_allocs  (live now)
 *   contexts     devices with a primary context: made by cudaSetDevice
 *                and by the first call (but device queries) on a thread
 *                whose current device had none
 * An unknown name prints a message and returns UINT64_MAX. */
uint64_t fakecuda_stat(const char *name);

/* The device (ordinal) a stream or event was created on; -1 if the handle is
 * not a live one. */
int fakecuda_stream_device(const void *stream);
int fakecuda_event_device(const void *event);

/* 1 when [ptr, ptr + len) lies in one live cudaHostRegister'd range. */
int fakecuda_host_registered(const void *ptr, size_t len);

/* The stream handshake log: every cudaEventRecord (when called), every
 * cudaStreamWaitEvent, copy and kernel launch (when enqueued), in call
 * order. `record` identifies one recording of an event: a WAIT names the
 * recording it waits for (0: the event was never recorded, a no-op). Holds
 * the last FAKECUDA_LOG_CAP entries. */
enum fakecuda_log_kind {
    FAKECUDA_LOG_RECORD = 1, /* event recorded on stream */
    FAKECUDA_LOG_WAIT,       /* stream waits for the event's recording `record` */
    FAKECUDA_LOG_COPY,       /* cudaMemcpyAsync on stream */
    FAKECUDA_LOG_KERNEL,     /* a kernel (or fakecuda_launch_read) on stream */
};
#define FAKECUDA_LOG_CAP 65536
typedef struct fakecuda_log_entry {
    uint64_t seq;   /* 1, 2, ... over the process */
    int kind;       /* enum fakecuda_log_kind */
    void *stream;   /* cudaStream_t */
    void *event;    /* cudaEvent_t (RECORD, WAIT), else NULL */
    uint64_t record;
} fakecuda_log_entry;
size_t fakecuda_log_count(void);
/* Entry i (0: the oldest kept); 0 on success, -1 when i is out of range. */
int fakecuda_log_get(size_t i, fakecuda_log_entry *out);
void fakecuda_log_clear(void);

#ifdef __cplusplus
}
#endif

#endif
