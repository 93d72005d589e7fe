/* The host implementation of the device interface: a copy thread plays
 * the DMA engine, so the reader's asynchronous slot protocol is exercised
 * exactly as on a GPU, without one. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"

#include "device.h"
#include "error_internal.h"

static atomic_uint copy_delay_us;
static atomic_ulong copy_violations;

unsigned long reader_device_host_violations(void)
{
    return atomic_load(&copy_violations);
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

enum { MAX_RANGES = 64 };

typedef struct host_slot {
    uint8_t *dev;                /* "device" buffer */
    reader_copy_range ranges[MAX_RANGES];
    uint32_t nranges;
    uint64_t expect;             /* ranges_hash of the host slot at enqueue time */
    int pending;                 /* a copy is queued or running */
    uint64_t seq;                /* copies enqueued, for FIFO order */
} host_slot;

struct reader_device {
    uint8_t *slab;
    uint64_t slot_bytes;
    uint32_t slots;
    host_slot *s;
    uint8_t *pool;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    uint64_t next_seq;
    int stop;
    int hold; /* test hook: copies wait until released */
};

void reader_device_host_hold(reader_device *d, int on)
{
    pthread_mutex_lock(&d->lock);
    d->hold = on;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
}

static void *copy_thread(void *arg)
{
    reader_device *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        /* The oldest pending copy first, like one stream per slot on one
         * copy engine. */
        host_slot *pick = NULL;
        uint32_t idx = 0;
        for (uint32_t i = 0; i < d->slots; i++)
            if (d->s[i].pending && (!pick || d->s[i].seq < pick->seq)) {
                pick = &d->s[i];
                idx = i;
            }
        if (!pick || (d->hold && !d->stop)) {
            if (d->stop)
                break;
            pthread_cond_wait(&d->work, &d->lock);
            continue;
        }
        reader_copy_range ranges[MAX_RANGES];
        uint32_t n = pick->nranges;
        memcpy(ranges, pick->ranges, n * sizeof ranges[0]);
        pthread_mutex_unlock(&d->lock);
        unsigned us = atomic_load(&copy_delay_us);
        if (us) {
            struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        const uint8_t *src = d->slab + (uint64_t)idx * d->slot_bytes;
        for (uint32_t k = 0; k < n; k++)
            memcpy(pick->dev + ranges[k].off, src + ranges[k].off, ranges[k].len);
        if (ranges_hash(pick->dev, ranges, n) != pick->expect)
            atomic_fetch_add(&copy_violations, 1);
        pthread_mutex_lock(&d->lock);
        pick->pending = 0;
        pthread_cond_broadcast(&d->done);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
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
    if (!d->s || !d->pool) {
        free(d->s);
        free(d->pool);
        free(d);
        return sf_fail(-ENOMEM, "host device: out of memory for %u slots", slots);
    }
    for (uint32_t i = 0; i < slots; i++)
        d->s[i].dev = d->pool + (uint64_t)i * slot_bytes;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->done, NULL);
    if (pthread_create(&d->thread, NULL, copy_thread, d) != 0) {
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->work);
        pthread_cond_destroy(&d->done);
        free(d->s);
        free(d->pool);
        free(d);
        return sf_fail(-EAGAIN, "host device: cannot start the copy thread");
    }
    *out = d;
    return 0;
}

static int host_copy(reader_device *d, uint32_t slot, const reader_copy_range *ranges, uint32_t n)
{
    if (slot >= d->slots || n > MAX_RANGES)
        return sf_fail(SF_E_INVALID, "host device: bad copy request");
    pthread_mutex_lock(&d->lock);
    host_slot *s = &d->s[slot];
    /* A slot's copies are ordered, as on one stream: wait for the last one. */
    while (s->pending)
        pthread_cond_wait(&d->done, &d->lock);
    memcpy(s->ranges, ranges, n * sizeof *ranges);
    s->nranges = n;
    s->expect = ranges_hash(d->slab + (uint64_t)slot * d->slot_bytes, ranges, n);
    s->seq = d->next_seq++;
    s->pending = 1;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

static int host_wait(reader_device *d, uint32_t slot)
{
    pthread_mutex_lock(&d->lock);
    while (d->s[slot].pending)
        pthread_cond_wait(&d->done, &d->lock);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

static int host_release(reader_device *d, uint32_t slot, void *stream)
{
    /* Host "kernels" run synchronously: nothing to fence. */
    (void)d, (void)slot, (void)stream;
    return 0;
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

static void host_close(reader_device *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop = 1;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->work);
    pthread_cond_destroy(&d->done);
    free(d->s);
    free(d->pool);
    free(d);
}

const reader_device_ops reader_device_host = {
    .name = "host",
    .open = host_open,
    .copy = host_copy,
    .release = host_release,
    .reuse = host_wait,
    .wait = host_wait,
    .device_ptr = host_device_ptr,
    .stream = host_none,
    .event = host_none,
    .bytes = host_bytes,
    .close = host_close,
};
