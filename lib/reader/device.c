/* Device delivery, the reader's side: which implementation of the device
 * interface (device.h) a reader uses, opening it on the slab, and a batch's
 * copy. The reader calls the interface itself at the other points of a
 * slot's life: its release, the reuse of a slot freed without one,
 * sf_batch_wait, close. */
#include <stdint.h>
#include <string.h>

#include "device.h"
#include "error_internal.h"
#include "reader_internal.h"
#include "shardfeed/shardfeed.h"
#include "shardfeed_config.h"

int reader_device_select(const reader_device_ops **out, const sf_reader_opts *opts)
{
    *out = NULL;
    switch (opts->device) {
    case SF_DEVICE_CPU:
        return 0;
    case SF_DEVICE_CUDA:
        if (!reader_device_cuda_compiled())
            return sf_fail(SF_E_UNSUPPORTED,
                           "device cuda:%d: this shardfeed was built without CUDA "
                           "(configure with -DSHARDFEED_CUDA=ON)", opts->device_index);
        *out = &reader_device_cuda;
        return 0;
    case SF_DEVICE_HOST_COPY:
        *out = &reader_device_host;
        return 0;
    default:
        return sf_fail(SF_E_INVALID, "unknown device %d", opts->device);
    }
}

int reader_device_open(sf_reader *r)
{
    int ordinal = r->opts.device == SF_DEVICE_CUDA ? r->opts.device_index : 0;
    int rc = r->device_ops->open(&r->device, ordinal, r->slab, r->slab_bytes, r->opts.prefetch,
                                 r->layout.slot_bytes);
    return rc ? sf_fail_prefix(rc, "device") : 0;
}

int reader_device_copy(sf_reader *r, reader_slot *s)
{
    const reader_device_ops *ops = r->device_ops;
    sf_batch *b = &s->batch;
    uint8_t *dev = ops->device_ptr(r->device, s->index);
    reader_copy_range ranges[SF_MAX_FIELDS];
    uint32_t n = 0;
    /* Each field's used bytes, images and labels together, in one go on the
     * slot's stream: they reach the device at the same time. */
    for (uint32_t f = 0; f < b->num_fields; f++) {
        sf_batch_field *bf = &s->fields[f];
        uint64_t off = (uint64_t)((uint8_t *)bf->data - s->base);
        bf->device_data = dev + off;
        if (bf->bytes)
            ranges[n++] = (reader_copy_range){off, bf->bytes};
    }
    b->device = r->opts.device;
    b->device_stream = ops->stream(r->device, s->index);
    b->device_event = ops->event(r->device, s->index);
    return ops->copy(r->device, s->index, ranges, n);
}

/* The slot whose batch `batch` is, or -1: a batch belongs to the reader
 * whose slots hold it (the address is the owner). */
static int64_t slot_of(const sf_reader *r, const sf_batch *batch)
{
    for (uint32_t i = 0; i < r->opts.prefetch; i++)
        if (&r->slots[i].batch == batch)
            return i;
    return -1;
}

/* Whether slot i's batch is the caller's (SLOT_HELD): a released batch's
 * pointer still names its slot, whose next batch a wait would wait for. */
static int held(sf_reader *r, uint32_t i)
{
    pthread_mutex_lock(&r->lock);
    int h = r->slots[i].state == SLOT_HELD;
    pthread_mutex_unlock(&r->lock);
    return h;
}

int sf_batch_wait(sf_reader *r, const sf_batch *batch)
{
    if (!r || !batch)
        return sf_fail(SF_E_INVALID, "sf_batch_wait: %s is NULL", !r ? "r" : "batch");
    /* Before the CPU shortcut: another reader's batch is a caller's mix-up
     * whatever its device, and saying 0 would hide it. */
    int64_t i = slot_of(r, batch);
    if (i < 0)
        return sf_fail(SF_E_INVALID, "sf_batch_wait: not a batch of this reader");
    if (batch->device == SF_DEVICE_CPU)
        return 0;
    if (!held(r, (uint32_t)i))
        return sf_fail(SF_E_INVALID, "sf_batch_wait: not a batch the caller holds (released "
                                     "already: its slot may hold another batch now)");
    reader_slot *s = &r->slots[i];
    uint64_t t0 = reader_now_ns();
    int rc = r->device ? r->device_ops->wait(r->device, (uint32_t)i) : 0;
    uint64_t t1 = reader_now_ns();
    atomic_fetch_add_explicit(&r->st_devwait_ns, t1 - t0, memory_order_relaxed);
    if (s->trec && !rc) {
        if (!atomic_load_explicit(&s->trec->t[SF_TS_DEV_DONE], memory_order_relaxed))
            reader_trace_stamp(s->trec, SF_TS_DEV_DONE, t1);
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_span_add(tr, SF_SPAN_DEVICE_WAIT, t0, t1, s->trec);
    }
    return rc;
}

int sf_batch_wait_on(sf_reader *r, const sf_batch *batch, void *stream)
{
    if (!r || !batch)
        return sf_fail(SF_E_INVALID, "sf_batch_wait_on: %s is NULL", !r ? "r" : "batch");
    int64_t i = slot_of(r, batch);
    if (i < 0)
        return sf_fail(SF_E_INVALID, "sf_batch_wait_on: not a batch of this reader");
    if (batch->device == SF_DEVICE_CPU)
        return 0;
    if (!stream)
        return sf_fail(SF_E_INVALID, "sf_batch_wait_on: NULL stream (the host waits with "
                                     "sf_batch_wait)");
    if (!held(r, (uint32_t)i))
        return sf_fail(SF_E_INVALID, "sf_batch_wait_on: not a batch the caller holds (released "
                                     "already: its slot may hold another batch now)");
    int rc = r->device_ops->wait_on(r->device, (uint32_t)i, stream);
    return rc ? sf_fail_prefix(rc, "sf_batch_wait_on") : 0;
}

int sf_has_feature(const char *name)
{
    if (!name)
        return 0;
    if (strcmp(name, "cuda") == 0)
        return reader_device_cuda_compiled();
    if (strcmp(name, "uring") == 0)
        return 1;
    if (strcmp(name, "remote") == 0)
        return SF_HAVE_REMOTE; /* libcurl found at build time: dataset URLs, push */
    return 0;
}
