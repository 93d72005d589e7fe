/* The device side of batch delivery, behind a small interface so that the
 * reader's pipeline logic (which slot is copied when, when a slot may be
 * reused) is the same for every device and is tested in CI without a GPU.
 *
 * Two implementations:
 *  - host (device_host.c): "device memory" is an ordinary allocation and the
 *    copy runs on a copy thread, asynchronously, like a DMA engine; tests can
 *    slow it down to expose ordering bugs;
 *  - cuda (device_cuda.c): the slab is page-locked with cudaHostRegister,
 *    every slot has its own stream, event and device buffer from a pool
 *    allocated once; copies are cudaMemcpyAsync on the slot's stream.
 *    Compiled only when SHARDFEED_CUDA is on; otherwise opening it fails with
 *    SF_E_UNSUPPORTED.
 *
 * Slot protocol (the reader follows it):
 *   copy(slot, ranges)   after the slot's reads completed: enqueue the copy of
 *                        the used ranges of the slot to the slot's device
 *                        buffer, after any release fence of the slot;
 *   wait_on(slot, stream) the consumer's stream waits for the slot's last
 *                        copy (on the device: the host does not block);
 *   (consumer uses device_ptr(slot) after waiting on event(slot))
 *   release(slot, stream) the consumer is done enqueuing work on the slot's
 *                        device buffer; work on `stream` (NULL: none) must
 *                        finish before the next copy overwrites it;
 *   reuse(slot)          before new reads overwrite the host slot: waits
 *                        until the slot's last copy has finished reading it.
 */
#ifndef SF_READER_DEVICE_H
#define SF_READER_DEVICE_H

#include <stdint.h>

typedef struct reader_device reader_device;

typedef struct reader_copy_range {
    uint64_t off; /* offset within the slot (host and device alike) */
    uint64_t len;
} reader_copy_range;

/* What a device counted (sf_reader_statistics). */
typedef struct reader_device_counters {
    uint64_t copy_bytes;        /* bytes copied to the device */
    double copy_seconds;        /* time the copies took on the device (CUDA: timed with events,
                                   counted once a slot's next copy finds them complete) */
    double stream_wait_seconds; /* time consumers' streams waited for copies (wait_on) */
} reader_device_counters;

typedef struct reader_device_ops {
    const char *name;
    /* Page-locks the slab (once), allocates one device buffer of slot_bytes
     * per slot and the per-slot stream and event. */
    int (*open)(reader_device **out, int ordinal, uint8_t *slab, uint64_t slab_bytes,
                uint32_t slots, uint64_t slot_bytes);
    int (*copy)(reader_device *d, uint32_t slot, const reader_copy_range *ranges, uint32_t n);
    int (*release)(reader_device *d, uint32_t slot, void *stream);
    /* Work queued on `stream` (not NULL) from now on waits for the slot's
     * last copy. */
    int (*wait_on)(reader_device *d, uint32_t slot, void *stream);
    int (*reuse)(reader_device *d, uint32_t slot);
    /* Blocks until the slot's copy is complete (for consumers without a
     * stream of their own, and for tests). */
    int (*wait)(reader_device *d, uint32_t slot);
    void *(*device_ptr)(reader_device *d, uint32_t slot);
    void *(*stream)(reader_device *d, uint32_t slot); /* cudaStream_t, or NULL on host */
    void *(*event)(reader_device *d, uint32_t slot);  /* cudaEvent_t recorded after the copy */
    /* Device memory the implementation holds (for the constant-memory check). */
    uint64_t (*bytes)(reader_device *d);
    void (*counters)(reader_device *d, reader_device_counters *out);
    void (*close)(reader_device *d);
} reader_device_ops;

extern const reader_device_ops reader_device_host;
extern const reader_device_ops reader_device_cuda;

/* Test hooks of the host implementation: each copy sleeps this long first;
 * how many copies found their host slot changed since they were enqueued. */
void reader_device_host_set_delay_us(unsigned us);
unsigned long reader_device_host_violations(void);
/* Test hook: while on, the copy thread starts no copy (they stay queued),
 * so a test can see that copies are asynchronous without timing them. */
void reader_device_host_hold(reader_device *d, int on);

/* 1 when CUDA support was compiled in. */
int reader_device_cuda_compiled(void);

#endif
