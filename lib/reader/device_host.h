/* The host-copy device's model of a consumer's streams, shared by the
 * device (device_host.c) and the streams (device_host_stream.c). Everything
 * here is guarded by host_lock; host_changed is broadcast on every change. */
#ifndef SF_READER_DEVICE_HOST_H
#define SF_READER_DEVICE_HOST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

extern pthread_mutex_t host_lock;
extern pthread_cond_t host_changed;

/* An event as CUDA's: `recorded` counts recordings, `done` is the latest one
 * that completed. Held by its device and by each stream item naming it; the
 * last holder frees it (host_event_unref). */
typedef struct host_event {
    uint64_t recorded, done;
    unsigned refs;
    uint64_t waited_ns; /* time streams spent blocked waiting on it */
} host_event;

uint64_t host_now_ns(void);

host_event *host_event_new(void);
void host_event_unref(host_event *e);

/* A slot of an open host device, found by an address in its device buffer. */
typedef struct host_slot_ref {
    reader_device *d; /* NULL: no open host device holds the address */
    uint32_t slot;
} host_slot_ref;

host_slot_ref host_slot_find(const void *ptr, size_t len);
/* The slot's copies enqueued so far, and whether copy number `gen` has landed. */
uint64_t host_slot_copies(host_slot_ref r);
int host_slot_copy_landed(host_slot_ref r, uint64_t gen);
/* Counts consumer reads of copy number `gen` queued on streams that have
 * not run yet. */
void host_slot_add_read(host_slot_ref r, uint64_t gen, int delta);

/* Counts a hazard and says what it was on stderr. */
void host_hazard(const char *what, const void *ptr, size_t len);

enum host_item_kind {
    HOST_ITEM_WAIT = 1, /* the stream waits until event->done >= gen */
    HOST_ITEM_RECORD,   /* event->done = gen once the stream reaches it */
    HOST_ITEM_READ      /* a consumer's "kernel": copies len bytes from src to dst */
};

/* Queues an item on `stream` (an sf_host_stream; SF_E_INVALID for anything
 * else). Takes a reference to `event` (WAIT, RECORD). */
int host_stream_enqueue_locked(void *stream, int kind, host_event *event, uint64_t gen, void *dst,
                               const void *src, size_t len);

#endif
