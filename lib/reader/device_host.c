/* The host implementation of the device interface: a copy thread plays
 * the DMA engine, so the reader's asynchronous slot protocol is exercised
 * exactly as on a GPU, without one.
 *
 * It models a consumer's streams too (sf_host_stream, device_host_stream.c):
 * a slot's copy and its release fence are events, recorded and waited on in
 * stream order as CUDA's are, so that tests (the Python ones included) can
 * see a consumer read device memory before its copy landed, or a copy
 * overwrite device memory that work queued before the release still has to
 * read. Both are counted as hazards.
 *
 * One lock (host_lock, device_host.h) guards every device, stream and event
 * of the model; host_changed is broadcast whenever any of them changes. A
 * test double needs no finer locking, and one lock cannot deadlock. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"

#include "device.h"
#include "device_host.h"
#include "error_internal.h"
#include "shardfeed/reader.h"

pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t host_changed = PTHREAD_COND_INITIALIZER;

static atomic_uint copy_delay_us;
static atomic_ulong copy_violations;
static atomic_ulong hazards;

unsigned long reader_device_host_violations(void)
{
    return atomic_load(&copy_violations);
}

void host_hazard(const char *what, const void *ptr, size_t len)
{
    atomic_fetch_add(&hazards, 1);
    fprintf(stderr, "shardfeed host-copy device: hazard: %s [%p, +%zu)\n", what, ptr, len);
}

uint64_t sf_host_stream_hazards(void)
{
    return atomic_load(&hazards);
}

/* What the slot's ranges hold: a copy must deliver the bytes the slot held
 * when it was enqueued. A difference means the reader overwrote a host slot
 * whose copy was still pending: the bug this implementation exists to catch. */
static uint64_t ranges_hash(const uint8_t *base, const reader_copy_range *r, uint32_t n)
{
    uint64_t h = 0;
    for (uint32_t k = 0; k < n; k++)
        h = h * 31 + XXH3_64bits(base + r[k].off, r[k].len);
    return h;
}

void reader_device_host_set_delay_us(unsigned us)
{
    atomic_store(&copy_delay_us, us);
}

void sf_host_copy_set_delay_us(unsigned us)
{
    reader_device_host_set_delay_us(us);
}

uint64_t host_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- events ---- */

host_event *host_event_new(void)
{
    host_event *e = calloc(1, sizeof *e);
    if (e)
        e->refs = 1;
    return e;
}

void host_event_unref(host_event *e)
{
    if (e && --e->refs == 0)
        free(e);
}

/* ---- the devices ---- */

enum { MAX_RANGES = 64 };

typedef struct host_slot {
    uint8_t *dev;                /* "device" buffer */
    reader_copy_range ranges[MAX_RANGES];
    uint32_t nranges;
    uint64_t expect;             /* ranges_hash of the host slot at enqueue time */
    int pending;                 /* a copy is queued or running */
    uint64_t seq;                /* copies enqueued, for FIFO order */
    host_event *copied;          /* recorded at each copy, done when it lands */
    host_event *released;        /* recorded on the consumer's stream at release */
    uint64_t fence;              /* the released recording the next copy waits for (0: none) */
    uint64_t copy_fence;         /* the one the pending copy waits for */
    unsigned reads[4];           /* consumer reads queued on streams, not yet run, by the
                                    copy (number mod 4) whose bytes they read */
} host_slot;

struct reader_device {
    struct reader_device *next_open; /* the list of open devices (streams look slots up) */
    uint8_t *slab;
    uint64_t slot_bytes;
    uint32_t slots;
    host_slot *s;
    uint8_t *pool;
    pthread_t thread;
    uint64_t next_seq;
    int stop;
    int hold; /* test hook: copies wait until released */
    uint64_t copy_bytes, copy_ns; /* counters, under host_lock */
};

static reader_device *open_devices;

host_slot_ref host_slot_find(const void *ptr, size_t len)
{
    const uint8_t *p = ptr;
    for (reader_device *d = open_devices; d; d = d->next_open) {
        uint64_t pool_bytes = d->slot_bytes * d->slots;
        if (p < d->pool || p + len > d->pool + pool_bytes || !d->slot_bytes)
            continue;
        uint32_t i = (uint32_t)((uint64_t)(p - d->pool) / d->slot_bytes);
        return (host_slot_ref){d, i};
    }
    return (host_slot_ref){NULL, 0};
}

uint64_t host_slot_copies(host_slot_ref r)
{
    return r.d->s[r.slot].copied->recorded;
}

int host_slot_copy_landed(host_slot_ref r, uint64_t gen)
{
    return r.d->s[r.slot].copied->done >= gen;
}

void host_slot_add_read(host_slot_ref r, uint64_t gen, int delta)
{
    r.d->s[r.slot].reads[gen & 3] += (unsigned)delta;
}

/* Reads still queued for one of the three copies before copy `gen`: reads of
 * copy `gen` itself were queued after a wait for it, and are fine. */
static int older_reads_queued(const host_slot *s, uint64_t gen)
{
    return s->reads[(gen - 1) & 3] || s->reads[(gen - 2) & 3] || s->reads[(gen - 3) & 3];
}

void reader_device_host_hold(reader_device *d, int on)
{
    pthread_mutex_lock(&host_lock);
    d->hold = on;
    pthread_cond_broadcast(&host_changed);
    pthread_mutex_unlock(&host_lock);
}

/* A pending copy may start once the consumer's release fence has passed. */
static int copy_may_start(const host_slot *s)
{
    return s->pending && (!s->copy_fence || s->released->done >= s->copy_fence);
}

static void *copy_thread(void *arg)
{
    reader_device *d = arg;
    pthread_setname_np(pthread_self(), "sf-copy");
    pthread_mutex_lock(&host_lock);
    for (;;) {
        /* The oldest pending copy that may start first, like one stream per
         * slot on one copy engine. At close, fences no longer matter. */
        host_slot *pick = NULL;
        uint32_t idx = 0;
        for (uint32_t i = 0; i < d->slots; i++)
            if ((d->stop ? d->s[i].pending : copy_may_start(&d->s[i])) &&
                (!pick || d->s[i].seq < pick->seq)) {
                pick = &d->s[i];
                idx = i;
            }
        if (!pick || (d->hold && !d->stop)) {
            if (d->stop)
                break;
            pthread_cond_wait(&host_changed, &host_lock);
            continue;
        }
        reader_copy_range ranges[MAX_RANGES];
        uint32_t n = pick->nranges;
        uint64_t gen = pick->copied->recorded;
        memcpy(ranges, pick->ranges, n * sizeof ranges[0]);
        pthread_mutex_unlock(&host_lock);
        unsigned us = atomic_load(&copy_delay_us);
        if (us) {
            struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&host_lock);
        /* A read queued before the slot's release has not run yet: this copy
         * overwrites what it was meant to read (a missing release fence). */
        if (older_reads_queued(pick, gen))
            host_hazard("a copy overwrites device memory that a consumer's read queued before "
                        "the release has not read yet", pick->dev, d->slot_bytes);
        pthread_mutex_unlock(&host_lock);
        const uint8_t *src = d->slab + (uint64_t)idx * d->slot_bytes;
        uint64_t t0 = host_now_ns(), bytes = 0;
        for (uint32_t k = 0; k < n; k++) {
            memcpy(pick->dev + ranges[k].off, src + ranges[k].off, ranges[k].len);
            bytes += ranges[k].len;
        }
        uint64_t t1 = host_now_ns();
        if (ranges_hash(pick->dev, ranges, n) != pick->expect)
            atomic_fetch_add(&copy_violations, 1);
        pthread_mutex_lock(&host_lock);
        d->copy_bytes += bytes;
        d->copy_ns += t1 - t0;
        pick->pending = 0;
        pick->copied->done = pick->copied->recorded;
        pthread_cond_broadcast(&host_changed);
    }
    pthread_mutex_unlock(&host_lock);
    return NULL;
}

static void host_free(reader_device *d)
{
    if (d->s)
        for (uint32_t i = 0; i < d->slots; i++) {
            host_event_unref(d->s[i].copied);
            host_event_unref(d->s[i].released);
        }
    free(d->s);
    free(d->pool);
    free(d);
}

static int host_open(reader_device **out, int ordinal, uint8_t *slab, uint64_t slab_bytes,
                     uint32_t slots, uint64_t slot_bytes)
{
    (void)slab_bytes;
    if (ordinal != 0)
        return sf_fail(SF_E_UNSUPPORTED, "host device: only device 0 exists");
    reader_device *d = calloc(1, sizeof *d);
    if (!d)
        return sf_fail(-ENOMEM, "out of memory");
    d->slab = slab;
    d->slots = slots;
    d->slot_bytes = slot_bytes;
    d->s = calloc(slots, sizeof *d->s);
    d->pool = calloc(1, slot_bytes * slots > 0 ? slot_bytes * slots : 1); /* zeroed, unlike cudaMalloc memory: tests look for stray bytes */
    int ok = d->s && d->pool;
    for (uint32_t i = 0; ok && i < slots; i++) {
        d->s[i].dev = d->pool + (uint64_t)i * slot_bytes;
        d->s[i].copied = host_event_new();
        d->s[i].released = host_event_new();
        ok = d->s[i].copied && d->s[i].released;
    }
    if (!ok) {
        host_free(d);
        return sf_fail(-ENOMEM, "host device: out of memory for %u slots", slots);
    }
    if (pthread_create(&d->thread, NULL, copy_thread, d) != 0) {
        host_free(d);
        return sf_fail(-EAGAIN, "host device: cannot start the copy thread");
    }
    pthread_mutex_lock(&host_lock);
    d->next_open = open_devices;
    open_devices = d;
    pthread_mutex_unlock(&host_lock);
    *out = d;
    return 0;
}

static int host_copy(reader_device *d, uint32_t slot, const reader_copy_range *ranges, uint32_t n)
{
    if (slot >= d->slots || n > MAX_RANGES)
        return sf_fail(SF_E_INVALID, "host device: bad copy request");
    pthread_mutex_lock(&host_lock);
    host_slot *s = &d->s[slot];
    /* A slot's copies are ordered, as on one stream: wait for the last one. */
    while (s->pending)
        pthread_cond_wait(&host_changed, &host_lock);
    memcpy(s->ranges, ranges, n * sizeof *ranges);
    s->nranges = n;
    s->expect = ranges_hash(d->slab + (uint64_t)slot * d->slot_bytes, ranges, n);
    s->seq = d->next_seq++;
    s->copy_fence = s->fence; /* the copy waits for the last release's fence */
    s->fence = 0;
    s->copied->recorded++;
    s->pending = 1;
    pthread_cond_broadcast(&host_changed);
    pthread_mutex_unlock(&host_lock);
    return 0;
}

static int host_wait(reader_device *d, uint32_t slot)
{
    pthread_mutex_lock(&host_lock);
    while (d->s[slot].pending)
        pthread_cond_wait(&host_changed, &host_lock);
    pthread_mutex_unlock(&host_lock);
    return 0;
}

static int host_release(reader_device *d, uint32_t slot, void *stream)
{
    pthread_mutex_lock(&host_lock);
    host_slot *s = &d->s[slot];
    s->fence = 0;
    int rc = 0;
    if (stream) {
        /* The next copy into the slot waits until `stream` has run what was
         * queued on it so far. */
        uint64_t rec = ++s->released->recorded;
        rc = host_stream_enqueue_locked(stream, HOST_ITEM_RECORD, s->released, rec, NULL, NULL, 0);
        if (!rc)
            s->fence = rec;
    }
    pthread_mutex_unlock(&host_lock);
    return rc;
}

static int host_wait_on(reader_device *d, uint32_t slot, void *stream)
{
    pthread_mutex_lock(&host_lock);
    host_event *ev = d->s[slot].copied;
    int rc = host_stream_enqueue_locked(stream, HOST_ITEM_WAIT, ev, ev->recorded, NULL, NULL, 0);
    pthread_mutex_unlock(&host_lock);
    return rc;
}

static void *host_device_ptr(reader_device *d, uint32_t slot)
{
    return d->s[slot].dev;
}

static void *host_none(reader_device *d, uint32_t slot)
{
    (void)d, (void)slot;
    return NULL;
}

static uint64_t host_bytes(reader_device *d)
{
    return d->slot_bytes * d->slots;
}

static void host_counters(reader_device *d, reader_device_counters *out)
{
    pthread_mutex_lock(&host_lock);
    out->copy_bytes = d->copy_bytes;
    out->copy_seconds = (double)d->copy_ns * 1e-9;
    uint64_t waited = 0;
    for (uint32_t i = 0; i < d->slots; i++)
        waited += d->s[i].copied->waited_ns;
    out->stream_wait_seconds = (double)waited * 1e-9;
    pthread_mutex_unlock(&host_lock);
}

static void host_close(reader_device *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&host_lock);
    for (reader_device **p = &open_devices; *p; p = &(*p)->next_open)
        if (*p == d) {
            *p = d->next_open;
            break;
        }
    d->stop = 1;
    pthread_cond_broadcast(&host_changed);
    pthread_mutex_unlock(&host_lock);
    pthread_join(d->thread, NULL);
    /* Streams may still hold the slots' events (a wait or a release queued
     * on them): each event is freed by its last holder, under the lock. */
    pthread_mutex_lock(&host_lock);
    for (uint32_t i = 0; i < d->slots; i++) {
        host_event_unref(d->s[i].copied);
        host_event_unref(d->s[i].released);
        d->s[i].copied = d->s[i].released = NULL;
    }
    pthread_mutex_unlock(&host_lock);
    host_free(d);
}

const reader_device_ops reader_device_host = {
    .name = "host",
    .open = host_open,
    .copy = host_copy,
    .release = host_release,
    .wait_on = host_wait_on,
    .reuse = host_wait,
    .wait = host_wait,
    .device_ptr = host_device_ptr,
    .stream = host_none,
    .event = host_none,
    .bytes = host_bytes,
    .counters = host_counters,
    .close = host_close,
};
