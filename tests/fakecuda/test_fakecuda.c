/* The fake CUDA runtime itself: that it follows CUDA's semantics where the
 * project relies on them (asynchronous streams, events in stream order,
 * cross-stream waits), and that every misuse and race it promises to catch
 * is caught. Each Criterion test runs in a process of its own, so each
 * starts with a fresh fake. */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakecuda.h"

#define CK(call) cr_assert_eq((call), cudaSuccess, "%s: %s", #call, cudaGetErrorName(cudaGetLastError()))
#define BYTES (256u * 1024)

static void quiet_setup(void)
{
    fakecuda_set_device_count(1);
    fakecuda_set_copy_delay_us(0);
    fakecuda_set_abort_on_misuse(0);
}

TestSuite(fakecuda, .init = quiet_setup, .timeout = 60);

/* Expects `call` to fail with `err` and to be counted as one misuse. */
#define EXPECT_MISUSE(call, err)                                                                   \
    do {                                                                                           \
        uint64_t m0_ = fakecuda_stat("misuse");                                                    \
        cr_assert_eq((call), (err), "%s must fail with %s", #call, #err);                          \
        cr_assert_eq(fakecuda_stat("misuse"), m0_ + 1, "%s must be reported as a misuse", #call);  \
    } while (0)

static uint8_t *pinned(size_t n, uint8_t fill)
{
    void *p = NULL;
    CK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    memset(p, fill, n);
    return p;
}

Test(fakecuda, device_count_is_configured_and_zero_means_no_device)
{
    int n = -1;
    fakecuda_set_device_count(3);
    CK(cudaGetDeviceCount(&n));
    cr_assert_eq(n, 3);
    CK(cudaSetDevice(2));
    EXPECT_MISUSE(cudaSetDevice(3), cudaErrorInvalidDevice);
    fakecuda_set_device_count(0);
    cr_assert_eq(cudaGetDeviceCount(&n), cudaErrorNoDevice);
    cr_assert_eq(n, 0);
    void *p;
    cr_assert_eq(cudaMalloc(&p, 16), cudaErrorNoDevice);
}

static void *create_a_stream(void *arg)
{
    cudaStream_t s;
    *(cudaError_t *)arg = cudaStreamCreate(&s);
    if (*(cudaError_t *)arg == cudaSuccess)
        *(cudaError_t *)arg = cudaStreamDestroy(s);
    return NULL;
}

Test(fakecuda, contexts_are_made_by_set_device_and_by_first_use)
{
    fakecuda_set_device_count(3);
    int n, dev;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceCount(&n));
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, 2));
    cr_assert_eq(fakecuda_stat("contexts"), 0, "device queries make no context");
    CK(cudaSetDevice(2));
    cr_assert_eq(fakecuda_stat("contexts"), 1);
    void *p;
    CK(cudaMalloc(&p, 10));
    CK(cudaFree(p));
    cr_assert_eq(fakecuda_stat("contexts"), 1);
    /* another thread starts on device 0: its first call makes that context */
    pthread_t t;
    cudaError_t e = cudaErrorUnknown;
    cr_assert_eq(pthread_create(&t, NULL, create_a_stream, &e), 0);
    pthread_join(t, NULL);
    CK(e);
    cr_assert_eq(fakecuda_stat("contexts"), 2);
}

Test(fakecuda, memory_info_follows_allocations)
{
    size_t free0, total, free1, free2;
    CK(cudaMemGetInfo(&free0, &total));
    cr_assert_eq(free0, total);
    void *p;
    CK(cudaMalloc(&p, BYTES));
    CK(cudaMemGetInfo(&free1, &total));
    cr_assert_geq(free0 - free1, BYTES);
    CK(cudaFree(p));
    CK(cudaMemGetInfo(&free2, &total));
    cr_assert_eq(free2, free0);
    cr_assert_eq(fakecuda_stat("device_allocs"), 0);
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cr_assert_eq(prop.totalGlobalMem, total);
    cr_assert(strstr(prop.name, "not a GPU"));
}

/* Runs `touch` in a child process: 1 when the child crashed. */
static int crashes(void (*touch)(volatile uint8_t *), volatile uint8_t *p)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        touch(p);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    /* A signal, or a sanitizer's report of one (it exits non-zero). */
    return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

static void host_read(volatile uint8_t *p)
{
    (void)p[0];
}

static void host_write(volatile uint8_t *p)
{
    p[0] = 1;
}

Test(fakecuda, the_host_cannot_touch_device_memory)
{
    uint8_t *d;
    CK(cudaMalloc((void **)&d, 100));
    cr_assert(crashes(host_read, d), "reading device memory on the host must crash");
    cr_assert(crashes(host_write, d), "writing device memory on the host must crash");
    cr_assert(crashes(host_read, d + 4096), "the guard page after an allocation must crash");
    /* The control: host memory the same way does not crash. */
    uint8_t *h = pinned(100, 0);
    cr_assert_not(crashes(host_read, h));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
}

Test(fakecuda, copies_are_asynchronous_and_round_trip)
{
    fakecuda_set_copy_delay_us(100000);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint8_t *src = pinned(BYTES, 0x5A), *back = pinned(BYTES, 0), *d;
    CK(cudaMalloc((void **)&d, BYTES));
    CK(cudaMemcpyAsync(d, src, BYTES, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(back, d, BYTES, cudaMemcpyDeviceToHost, s));
    cr_assert_eq(cudaStreamQuery(s), cudaErrorNotReady, "the copies must still be queued");
    cr_assert_eq(back[0], 0);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamQuery(s));
    cr_assert_eq(memcmp(back, src, BYTES), 0);
    cr_assert_eq(fakecuda_stat("copies"), 2);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFreeHost(src));
    CK(cudaFreeHost(back));
    cr_assert_eq(fakecuda_stat("misuse"), 0);
    cr_assert_eq(fakecuda_stat("races"), 0);
}

Test(fakecuda, registered_memory_is_page_locked_until_unregistered)
{
    size_t n = 4 * 4096;
    uint8_t *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    memset(m, 7, n);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    uint8_t *d;
    CK(cudaMalloc((void **)&d, n));
    EXPECT_MISUSE(cudaMemcpyAsync(d, m, n, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    CK(cudaHostRegister(m, n, cudaHostRegisterDefault));
    cr_assert(fakecuda_host_registered(m + 100, 200));
    EXPECT_MISUSE(cudaHostRegister(m + 4096, 4096, 0), cudaErrorHostMemoryAlreadyRegistered);
    CK(cudaMemcpyAsync(d, m, n, cudaMemcpyHostToDevice, s));
    EXPECT_MISUSE(cudaMemcpyAsync(d, m + 4096, n, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    CK(cudaStreamSynchronize(s));
    EXPECT_MISUSE(cudaHostUnregister(m + 4096), cudaErrorHostMemoryNotRegistered);
    CK(cudaHostUnregister(m));
    cr_assert_not(fakecuda_host_registered(m, 1));
    EXPECT_MISUSE(cudaHostUnregister(m), cudaErrorHostMemoryNotRegistered);
    EXPECT_MISUSE(cudaMemcpyAsync(d, m, n, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaHostRegister(m, 0, 0), cudaErrorInvalidValue);
    munmap(m, n);
    EXPECT_MISUSE(cudaHostRegister(m, n, 0), cudaErrorInvalidValue); /* not mapped any more */
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
}

Test(fakecuda, every_misuse_of_memory_fails_loudly)
{
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    uint8_t *d, *h = pinned(BYTES, 1);
    CK(cudaMalloc((void **)&d, 1000));
    /* out of bounds, wrong direction */
    EXPECT_MISUSE(cudaMemcpyAsync(d + 10, h, 991, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaMemcpyAsync(h, d, 1001, cudaMemcpyDeviceToHost, s), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaMemcpyAsync(h, d, 10, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaMemcpyAsync(d, h, 10, (enum cudaMemcpyKind)9, s), cudaErrorInvalidMemcpyDirection);
    CK(cudaMemcpyAsync(d, h, 1000, cudaMemcpyDefault, s)); /* the direction inferred (UVA) */
    CK(cudaStreamSynchronize(s));
    /* frees */
    EXPECT_MISUSE(cudaFree(d + 1), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaFree(h), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaFreeHost(d), cudaErrorInvalidValue);
    CK(cudaFree(d));
    EXPECT_MISUSE(cudaFree(d), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaMemcpyAsync(d, h, 10, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    CK(cudaFreeHost(h));
    EXPECT_MISUSE(cudaFreeHost(h), cudaErrorInvalidValue);
    CK(cudaFree(NULL));
    CK(cudaStreamDestroy(s));
    cr_assert_eq(fakecuda_stat("device_allocs"), 0);
    cr_assert_eq(fakecuda_stat("host_allocs"), 0);
}

Test(fakecuda, every_misuse_of_streams_and_events_fails_loudly)
{
    fakecuda_set_copy_delay_us(200000); /* the copy stays queued through the checks */
    cudaStream_t s;
    cudaEvent_t ev, plain;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaEventCreate(&plain));
    int junk;
    EXPECT_MISUSE(cudaStreamSynchronize((cudaStream_t)&junk), cudaErrorInvalidResourceHandle);
    EXPECT_MISUSE(cudaEventRecord((cudaEvent_t)&junk, s), cudaErrorInvalidResourceHandle);
    EXPECT_MISUSE(cudaStreamCreateWithFlags(&s, 0x40), cudaErrorInvalidValue);
    EXPECT_MISUSE(cudaStreamWaitEvent(s, ev, 0x10), cudaErrorInvalidValue);
    /* the default stream is not modelled: refused, and said so */
    uint64_t u0 = fakecuda_stat("unsupported");
    cr_assert_eq(cudaStreamSynchronize(NULL), cudaErrorNotSupported);
    cr_assert_eq(fakecuda_stat("unsupported"), u0 + 1);
    /* elapsed time: not without timing, not before recording, not before done */
    float ms;
    EXPECT_MISUSE(cudaEventElapsedTime(&ms, ev, plain), cudaErrorInvalidResourceHandle);
    cudaEvent_t e1;
    CK(cudaEventCreate(&e1));
    EXPECT_MISUSE(cudaEventElapsedTime(&ms, plain, e1), cudaErrorInvalidResourceHandle);
    uint8_t *d, *h = pinned(BYTES, 3);
    CK(cudaMalloc((void **)&d, BYTES));
    CK(cudaEventRecord(plain, s));
    CK(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(e1, s));
    cr_assert_eq(cudaEventElapsedTime(&ms, plain, e1), cudaErrorNotReady);
    /* destroying a stream with work queued, unregistering memory it uses */
    EXPECT_MISUSE(cudaStreamDestroy(s), cudaErrorIllegalState);
    EXPECT_MISUSE(cudaFreeHost(h), cudaErrorIllegalState);
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    EXPECT_MISUSE(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    CK(cudaEventDestroy(ev));
    EXPECT_MISUSE(cudaEventQuery(ev), cudaErrorInvalidResourceHandle);
    EXPECT_MISUSE(cudaEventDestroy(ev), cudaErrorInvalidResourceHandle);
    CK(cudaEventDestroy(plain));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
    cr_assert_eq(fakecuda_stat("streams"), 0);
    cr_assert_eq(fakecuda_stat("events"), 0);
}

Test(fakecuda, events_complete_in_stream_order)
{
    const unsigned delay = 100000;
    fakecuda_set_copy_delay_us(delay);
    cudaStream_t s;
    cudaEvent_t before, after, never;
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&before));
    CK(cudaEventCreate(&after));
    CK(cudaEventCreate(&never));
    uint8_t *d, *h = pinned(BYTES, 9);
    CK(cudaMalloc((void **)&d, BYTES));
    CK(cudaEventQuery(never)); /* never recorded: complete */
    CK(cudaEventSynchronize(never));
    CK(cudaEventRecord(before, s));
    CK(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(after, s));
    cr_assert_eq(cudaEventQuery(after), cudaErrorNotReady, "recorded behind a delayed copy");
    CK(cudaEventSynchronize(after));
    CK(cudaEventQuery(before));
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, before, after));
    /* The copy slept `delay` between the two recordings: a lower bound. */
    cr_assert_geq(ms, delay / 1000.0f * 0.999f, "elapsed %.3f ms", ms);
    CK(cudaEventDestroy(before));
    CK(cudaEventDestroy(after));
    CK(cudaEventDestroy(never));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
}

Test(fakecuda, a_wait_orders_two_streams_and_without_it_they_race)
{
    fakecuda_set_copy_delay_us(30000);
    cudaStream_t producer, consumer;
    cudaEvent_t copied;
    CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    uint8_t *d, *src = pinned(BYTES, 0x77), *back = pinned(BYTES, 0);
    CK(cudaMalloc((void **)&d, BYTES));

    /* Ordered: the consumer's readback waits for the producer's copy. */
    CK(cudaMemcpyAsync(d, src, BYTES, cudaMemcpyHostToDevice, producer));
    CK(cudaEventRecord(copied, producer));
    CK(cudaStreamWaitEvent(consumer, copied, 0));
    CK(cudaMemcpyAsync(back, d, BYTES, cudaMemcpyDeviceToHost, consumer));
    CK(cudaStreamSynchronize(consumer));
    cr_assert_eq(memcmp(back, src, BYTES), 0);
    cr_assert_eq(fakecuda_stat("races"), 0);

    /* Unordered: the same, without the wait, reads while the copy writes. */
    memset(src, 0x11, BYTES);
    CK(cudaMemcpyAsync(d, src, BYTES, cudaMemcpyHostToDevice, producer));
    CK(cudaMemcpyAsync(back, d, BYTES, cudaMemcpyDeviceToHost, consumer));
    CK(cudaDeviceSynchronize());
    cr_assert_geq(fakecuda_stat("races"), 1, "two unordered accesses overlapped unseen");

    CK(cudaStreamDestroy(producer));
    CK(cudaStreamDestroy(consumer));
    CK(cudaEventDestroy(copied));
    CK(cudaFree(d));
    CK(cudaFreeHost(src));
    CK(cudaFreeHost(back));
}

Test(fakecuda, a_wait_is_for_the_recording_current_at_the_call)
{
    fakecuda_set_copy_delay_us(30000);
    cudaStream_t slow, fast, waiter;
    cudaEvent_t ev;
    CK(cudaStreamCreate(&slow));
    CK(cudaStreamCreate(&fast));
    CK(cudaStreamCreate(&waiter));
    CK(cudaEventCreate(&ev));
    uint8_t *d, *src = pinned(BYTES, 0x42), *back = pinned(BYTES, 0);
    CK(cudaMalloc((void **)&d, BYTES));
    CK(cudaMemcpyAsync(d, src, BYTES, cudaMemcpyHostToDevice, slow));
    CK(cudaEventRecord(ev, slow));
    CK(cudaStreamWaitEvent(waiter, ev, 0));
    CK(cudaEventRecord(ev, fast)); /* completes at once; the waiter waits on */
    CK(cudaMemcpyAsync(back, d, BYTES, cudaMemcpyDeviceToHost, waiter));
    CK(cudaStreamSynchronize(waiter));
    cr_assert_eq(memcmp(back, src, BYTES), 0);
    cr_assert_eq(fakecuda_stat("races"), 0);
    /* The log names the recording each wait was for. */
    fakecuda_log_entry rec1 = {0}, wait = {0}, rec2 = {0}, e;
    for (size_t i = 0; fakecuda_log_get(i, &e) == 0; i++) {
        if (e.kind == FAKECUDA_LOG_RECORD && !rec1.seq)
            rec1 = e;
        else if (e.kind == FAKECUDA_LOG_RECORD)
            rec2 = e;
        else if (e.kind == FAKECUDA_LOG_WAIT)
            wait = e;
    }
    cr_assert_eq(rec1.stream, slow);
    cr_assert_eq(wait.stream, waiter);
    cr_assert_eq(wait.event, ev);
    cr_assert_eq(wait.record, rec1.record);
    cr_assert_neq(rec2.record, rec1.record);
    CK(cudaStreamDestroy(slow));
    CK(cudaStreamDestroy(fast));
    CK(cudaStreamDestroy(waiter));
    CK(cudaEventDestroy(ev));
    CK(cudaFree(d));
    CK(cudaFreeHost(src));
    CK(cudaFreeHost(back));
}

Test(fakecuda, a_copy_into_memory_a_kernel_reads_is_a_race_unless_fenced)
{
    fakecuda_set_copy_delay_us(30000); /* both last long enough to overlap when unordered */
    cudaStream_t kernel_stream, copy_stream;
    cudaEvent_t done;
    CK(cudaStreamCreate(&kernel_stream));
    CK(cudaStreamCreate(&copy_stream));
    CK(cudaEventCreate(&done));
    uint8_t *d, *h = pinned(BYTES, 5);
    CK(cudaMalloc((void **)&d, BYTES));
    /* fenced: the copy waits for the kernel's end */
    cr_assert_eq(fakecuda_launch_read(d, BYTES, 30000, kernel_stream), cudaSuccess);
    CK(cudaEventRecord(done, kernel_stream));
    CK(cudaStreamWaitEvent(copy_stream, done, 0));
    CK(cudaMemcpyAsync(d + 4096, h, 4096, cudaMemcpyHostToDevice, copy_stream));
    CK(cudaStreamSynchronize(copy_stream));
    cr_assert_eq(fakecuda_stat("races"), 0);
    /* not fenced */
    cr_assert_eq(fakecuda_launch_read(d, BYTES, 30000, kernel_stream), cudaSuccess);
    CK(cudaMemcpyAsync(d + 4096, h, 4096, cudaMemcpyHostToDevice, copy_stream));
    CK(cudaDeviceSynchronize());
    cr_assert_eq(fakecuda_stat("races"), 1);
    CK(cudaStreamDestroy(kernel_stream));
    CK(cudaStreamDestroy(copy_stream));
    CK(cudaEventDestroy(done));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
}

Test(fakecuda, host_bytes_changed_under_a_queued_copy_are_a_race)
{
    fakecuda_set_copy_delay_us(30000);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    uint8_t *d, *h = pinned(BYTES, 1);
    CK(cudaMalloc((void **)&d, BYTES));
    CK(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    cr_assert_eq(fakecuda_stat("races"), 0);
    CK(cudaMemcpyAsync(d, h, BYTES, cudaMemcpyHostToDevice, s));
    h[BYTES / 2] = 2; /* while the copy is queued */
    CK(cudaStreamSynchronize(s));
    cr_assert_eq(fakecuda_stat("races"), 1);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
}

Test(fakecuda, devices_follow_the_programming_guide)
{
    fakecuda_set_device_count(2);
    cudaStream_t s0, s1;
    cudaEvent_t e1;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreate(&s0));
    CK(cudaSetDevice(1));
    CK(cudaStreamCreate(&s1));
    CK(cudaEventCreate(&e1));
    uint8_t *d1, *h = pinned(BYTES, 1);
    CK(cudaMalloc((void **)&d1, BYTES));
    cr_assert_eq(fakecuda_stream_device(s1), 1);
    cr_assert_eq(fakecuda_event_device(e1), 1);
    int dev = -1;
    CK(cudaStreamGetDevice(s0, &dev));
    cr_assert_eq(dev, 0);
    size_t f0, f1, t;
    CK(cudaMemGetInfo(&f1, &t));
    CK(cudaSetDevice(0));
    CK(cudaMemGetInfo(&f0, &t));
    cr_assert_eq(f0, t, "device 1's allocation counted on device 0");
    cr_assert_lt(f1, t);
    /* from device 0: a copy into device 1's stream works, a kernel does not;
     * an event records only on its own device's stream; waits cross devices */
    CK(cudaMemcpyAsync(d1, h, BYTES, cudaMemcpyHostToDevice, s1));
    EXPECT_MISUSE(fakecuda_launch_read(d1, 16, 1, s1), cudaErrorInvalidResourceHandle);
    EXPECT_MISUSE(cudaEventRecord(e1, s0), cudaErrorInvalidResourceHandle);
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s0, e1, 0));
    CK(cudaStreamSynchronize(s0));
    CK(cudaEventQuery(e1));
    CK(cudaStreamDestroy(s0));
    CK(cudaStreamDestroy(s1));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d1));
    CK(cudaFreeHost(h));
}

Test(fakecuda, injected_failures_fire_once_on_the_nth_call)
{
    fakecuda_fail_call("cudaMalloc", 2, cudaErrorMemoryAllocation);
    void *a, *b, *c;
    CK(cudaMalloc(&a, 10));
    cr_assert_eq(cudaMalloc(&b, 10), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    CK(cudaMalloc(&c, 10));
    cr_assert_eq(fakecuda_stat("device_allocs"), 2);
    cr_assert_eq(fakecuda_stat("misuse"), 0, "an injected failure is no misuse");
    CK(cudaFree(a));
    CK(cudaFree(c));
}
