/* The device stage: connects the reader's slot pipeline (sf_reader_stage)
 * to a device implementation (reader_device_ops: CUDA, or the host copy thread
 * used in tests). Every batch's fields are copied as soon as its reads and
 * checksums are done; the consumer gets device pointers and an event. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "error_internal.h"
#include "reader_internal.h"
#include "shardfeed/shardfeed.h"

typedef struct device_stage {
    const reader_device_ops *ops;
    reader_device *dev;
    int kind;        /* enum sf_reader_device */
    int ordinal;
    uint8_t *slab;
    uint64_t slot_bytes;
} device_stage;

static int stage_slab(void *ctx, void *slab, uint64_t bytes, uint32_t slots, uint64_t slot_bytes)
{
    device_stage *d = ctx;
    d->slab = slab;
    d->slot_bytes = slot_bytes;
    return d->ops->open(&d->dev, d->ordinal, slab, bytes, slots, slot_bytes);
}

static int stage_ready(void *ctx, uint32_t slot, sf_batch *b)
{
    device_stage *d = ctx;
    uint8_t *base = d->slab + (uint64_t)slot * d->slot_bytes;
    uint8_t *dev = d->ops->device_ptr(d->dev, slot);
    reader_copy_range ranges[SF_MAX_FIELDS];
    uint32_t n = 0;
    /* Each field's used bytes, images and labels together, in one go on the
     * slot's stream: they reach the device at the same time. */
    for (uint32_t f = 0; f < b->num_fields; f++) {
        sf_batch_field *bf = (sf_batch_field *)&b->fields[f];
        uint64_t off = (uint64_t)((uint8_t *)bf->data - base);
        bf->device_data = dev + off;
        if (bf->bytes)
            ranges[n++] = (reader_copy_range){off, bf->bytes};
    }
    b->device = d->kind;
    b->device_stream = d->ops->stream(d->dev, slot);
    b->device_event = d->ops->event(d->dev, slot);
    return d->ops->copy(d->dev, slot, ranges, n);
}

static int stage_release(void *ctx, uint32_t slot, void *stream)
{
    device_stage *d = ctx;
    int rc = d->ops->release(d->dev, slot, stream);
    int rc2 = d->ops->reuse(d->dev, slot); /* the copy no longer reads the host slot */
    return rc ? rc : rc2;
}

static void stage_reuse(void *ctx, uint32_t slot)
{
    device_stage *d = ctx;
    d->ops->reuse(d->dev, slot);
}

static void stage_close(void *ctx, void *slab, uint64_t bytes)
{
    (void)slab, (void)bytes;
    device_stage *d = ctx;
    if (d->dev)
        d->ops->close(d->dev);
    free(d);
}

int sf_device_stage_create(sf_reader_stage *stage, const sf_reader_opts *opts)
{
    const reader_device_ops *ops;
    switch (opts->device) {
    case SF_DEVICE_CUDA:
        if (!reader_device_cuda_compiled())
            return sf_fail(SF_E_NOT_SUPPORTED,
                           "device cuda:%d: this shardfeed was built without CUDA "
                           "(configure with -DSHARDFEED_CUDA=ON)", opts->device_index);
        ops = &reader_device_cuda;
        break;
    case SF_DEVICE_HOST_COPY:
        ops = &reader_device_host;
        break;
    default:
        return sf_fail(SF_E_INVALID, "unknown device %d", opts->device);
    }
    device_stage *d = calloc(1, sizeof *d);
    if (!d)
        return sf_fail(-ENOMEM, "out of memory");
    d->ops = ops;
    d->kind = opts->device;
    d->ordinal = opts->device == SF_DEVICE_CUDA ? opts->device_index : 0;
    *stage = (sf_reader_stage){d, stage_slab, stage_ready, stage_release, stage_reuse, stage_close};
    return 0;
}

uint64_t sf_device_stage_bytes(const sf_reader_stage *stage)
{
    if (stage->on_slab != stage_slab)
        return 0;
    const device_stage *d = stage->ctx;
    return d->dev ? d->ops->bytes(d->dev) : 0;
}

int sf_device_stage_wait(const sf_reader_stage *stage, uint32_t slot)
{
    if (stage->on_slab != stage_slab)
        return 0;
    const device_stage *d = stage->ctx;
    return d->dev ? d->ops->wait(d->dev, slot) : 0;
}

int sf_has_feature(const char *name)
{
    if (!name)
        return 0;
    if (strcmp(name, "cuda") == 0)
        return reader_device_cuda_compiled();
    if (strcmp(name, "uring") == 0)
        return 1;
    return 0;
}
