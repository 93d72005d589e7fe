/* fakecuda's shared state (see fakecuda.c for what it models). One mutex,
 * fc.lock, guards all of it; one condition variable, fc.changed, is
 * broadcast whenever any stream makes progress. Statistics are atomics so
 * that reports need no lock. */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The library is built with hidden visibility: what it exports is what
 * these headers declare (cudart's entry points and fakecuda_*). */
#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>

#include "fakecuda.h"
#pragma GCC visibility pop

#define FC_MAX_DEVICES 16

/* The call being served, with its arguments, for every message. */
typedef struct fc_call {
    const char *name;
    char args[256];
} fc_call;

/* Reads the configuration once (every entry point calls it first). */
void fc_init_once(void);
/* Serves injected failures and sets up the library on first use: returns 1
 * (and *err) when the call must fail now. */
int fc_enter(fc_call *c, cudaError_t *err);

/* Starts a cudart entry point: `call_` describes it from here on. */
#define FC_CALL(name_, ...)                                                                        \
    fc_call call_ = {name_, {0}};                                                                  \
    snprintf(call_.args, sizeof call_.args, __VA_ARGS__);                                          \
    do {                                                                                           \
        cudaError_t inj_;                                                                          \
        if (fc_enter(&call_, &inj_))                                                               \
            return inj_;                                                                           \
    } while (0)

/* A refused call: printed with its arguments, counted, abort() in strict
 * mode; returns err (and makes it the thread's last error). */
cudaError_t fc_misuse(const fc_call *c, cudaError_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A call the fake does not model: printed and counted, not a misuse. */
cudaError_t fc_unsupported(const fc_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* An expected failure (no device, out of memory, not ready): not printed. */
cudaError_t fc_error(cudaError_t err);
/* A hazard seen while work ran (no call to fail): printed, counted. */
void fc_race(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The calling thread's device; fails (with the CUDA error) without one.
 * Takes fc.lock: call it before taking it. */
cudaError_t fc_current_device(const fc_call *c, int *dev);

/* ---- memory (fakecuda_mem.c) ---------------------------------------------- */

enum fc_region_kind { FC_DEVICE, FC_HOST_ALLOC, FC_HOST_REGISTERED };

typedef struct fc_region {
    struct fc_region *next;
    enum fc_region_kind kind;
    uint64_t id;
    uint8_t *base;
    size_t size;   /* bytes asked for */
    size_t mapped; /* bytes mapped by the fake (device: with the guard page) */
    int device;
    int live;      /* 0 after cudaFree, cudaFreeHost or cudaHostUnregister */
    unsigned flags;
} fc_region;

/* The region (newest first, live or not) whose bytes hold p. */
fc_region *fc_region_find(const void *p);
/* Checks that [p, p + len) is in one live device allocation. */
cudaError_t fc_check_device_range(const fc_call *c, const char *role, const void *p, size_t len);
/* Checks that [p, p + len) is page-locked host memory (cudaHostRegister or
 * cudaHostAlloc). */
cudaError_t fc_check_host_range(const fc_call *c, const char *role, const void *p, size_t len);
/* Device bytes in use on dev. */
size_t fc_device_used(int dev);

/* ---- streams and events (fakecuda_stream.c) ------------------------------ */

/* One recording of an event: done once its stream reaches it. */
typedef struct fc_record {
    uint64_t id;
    int refs;
    int done;
    double t_ms;
    int device;
    int timing;
} fc_record;

enum fc_op_kind { FC_OP_COPY, FC_OP_KERNEL, FC_OP_READ, FC_OP_RECORD, FC_OP_WAIT };

typedef struct fc_op {
    struct fc_op *next;
    enum fc_op_kind kind;
    uint64_t seq; /* 1, 2, ... on its stream */
    void *dst;    /* COPY */
    const void *src; /* COPY; READ: the device memory read */
    size_t len;
    enum cudaMemcpyKind dir;
    uint64_t src_hash; /* COPY to the device: the host bytes when enqueued */
    unsigned us;       /* COPY: the delay before it; KERNEL, READ: its duration */
    fc_record *rec;    /* RECORD, WAIT */
    char what[300];    /* the call that enqueued it */
} fc_op;

/* 1 when a queued op of a live stream touches host memory [p, p + len). */
int fc_host_range_queued(const void *p, size_t len, uint64_t *stream_id);
/* Waits (fc.lock held) until every stream of dev has done what was queued. */
void fc_device_drain_locked(int dev);
/* Live streams and events (fc.lock held). */
uint64_t fc_live_streams_locked(void);
uint64_t fc_live_events_locked(void);
/* The worker side of a copy: host access through mprotect (fakecuda_mem.c). */
void fc_dma(const fc_op *op);

/* ---- helpers --------------------------------------------------------------- */

double fc_now_ms(void);
void fc_sleep_us(unsigned us);
uint64_t fc_hash(const void *p, size_t n);

typedef struct fc_state {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_mutex_t dma; /* one copy at a time touches the device arena */
    /* configuration */
    int devices;
    size_t mem_bytes;
    unsigned copy_delay_us, kernel_us;
    atomic_int abort_on_misuse; /* read without the lock: misuse is reported with it held */
    int strict_exit;
    /* objects, newest first; nothing is ever unlinked, so a stale handle or
     * pointer is recognised as such rather than mistaken for a new one */
    fc_region *regions;
    struct CUstream_st *streams;
    struct CUevent_st *events;
    uint64_t next_id;
    size_t used[FC_MAX_DEVICES];
    int context[FC_MAX_DEVICES]; /* the device's primary context exists */
    /* the handshake log (a ring) */
    fakecuda_log_entry *log;
    size_t log_start, log_n;
    uint64_t log_seq;
} fc_state;

extern fc_state fc;

/* Counters (fakecuda_stat's names). */
typedef struct fc_counters {
    atomic_uint_fast64_t misuse, races, unsupported, copies, copy_bytes, kernels, records, waits,
        stream_syncs, event_syncs;
} fc_counters;
extern fc_counters fc_stats;

/* Appends to the log (fc.lock held). */
void fc_log_locked(int kind, void *stream, void *event, uint64_t record);

#endif
