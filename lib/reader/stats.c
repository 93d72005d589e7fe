/* Statistics and the verdict: what the reader counted (bytes, times of the
 * I/O threads, waits of the caller, device memory) and which stage limits
 * the rate of batches (the rule of sf_reader_verdict in shardfeed/reader.h). */
#include <string.h>

#include "error_internal.h"
#include "reader_internal.h"

int sf_reader_stats(sf_reader_statistics *out, const sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_stats: NULL argument");
    sf_reader *rw = (sf_reader *)r; /* the lock is not part of the value */
    memset(out, 0, sizeof *out);
    out->bytes_read = atomic_load(&rw->st_bytes);
    out->io_seconds = (double)atomic_load(&rw->st_io_ns) * 1e-9;
    out->checksum_seconds = (double)atomic_load(&rw->st_hash_ns) * 1e-9;
    out->decode_seconds = (double)atomic_load(&rw->st_decode_ns) * 1e-9;
    out->device_enqueue_seconds = (double)atomic_load(&rw->st_devenq_ns) * 1e-9;
    out->device_wait_seconds = (double)atomic_load(&rw->st_devwait_ns) * 1e-9;
    out->device_slot_wait_seconds = (double)atomic_load(&rw->st_slotwait_ns) * 1e-9;
    pthread_mutex_lock(&rw->lock);
    out->samples = r->st_samples;
    out->batches = r->st_batches;
    out->corrupt_substitutions = r->st_subst;
    out->wait_seconds = (double)r->st_wait_ns * 1e-9;
    if (r->st_last_ns > r->st_first_ns)
        out->elapsed_seconds = (double)(r->st_last_ns - r->st_first_ns) * 1e-9;
    reader_trace_counts(atomic_load(&rw->trace), &out->trace_events, &out->trace_dropped);
    pthread_mutex_unlock(&rw->lock);
    out->engine = r->engine ? r->engine->name : "none";
    out->direct = r->direct;
    out->direct_reason = r->direct_reason ? r->direct_reason : "";
    out->registered_bytes = r->registered;
    out->registered_buffers = r->registered && r->registered == r->slab_bytes;
    out->io_threads = r->nthreads;
    out->queue_depth = r->engine == &reader_engine_uring ? r->opts.queue_depth : 1;
    out->prefetch = r->opts.prefetch;
    out->slab_bytes = r->slab_bytes;
    out->device = r->opts.device == SF_DEVICE_CUDA ? "cuda"
                  : r->opts.device == SF_DEVICE_HOST_COPY ? "host-copy" : "cpu";
    out->device_bytes = r->device ? r->device_ops->bytes(r->device) : 0;
    if (r->device) {
        reader_device_counters c = {0, 0, 0};
        r->device_ops->counters(r->device, &c);
        out->device_copy_bytes = c.copy_bytes;
        out->device_copy_seconds = c.copy_seconds;
        out->device_stream_wait_seconds = c.stream_wait_seconds;
    }
    return 0;
}

/* The I/O threads' stage that took the most of their time (ties go to the
 * earlier: reading, hashing, enqueuing copies, decoding, waiting for slots'
 * copies). Slots' copies run behind the consumer's own work on the device,
 * unless the copies themselves kept the copy engine busy (half the elapsed
 * time or more). */
static const char *largest_stage(const sf_reader_statistics *st)
{
    int copies_busy = st->device_copy_seconds >= 0.5 * st->elapsed_seconds;
    const struct {
        double seconds;
        const char *verdict;
    } stage[] = {{st->io_seconds, "io-bound"},
                 {st->checksum_seconds, "checksum-bound"},
                 {st->device_enqueue_seconds, "copy-bound"},
                 {st->decode_seconds, "decode-bound"},
                 {st->device_slot_wait_seconds, copies_busy ? "copy-bound" : "consumer-bound"}};
    size_t best = 0;
    for (size_t i = 1; i < sizeof stage / sizeof stage[0]; i++)
        if (stage[i].seconds > stage[best].seconds)
            best = i;
    return stage[best].verdict;
}

/* The rule is documented in shardfeed/reader.h (sf_reader_verdict); the
 * README and `shardfeed bench` print the same. */
int sf_reader_verdict(sf_reader_bottleneck *out, const sf_reader_statistics *st)
{
    if (!out || !st)
        return sf_fail(SF_E_INVALID, "sf_reader_verdict: NULL argument");
    memset(out, 0, sizeof *out);
    out->verdict = "none";
    double el = st->elapsed_seconds;
    double busy = st->io_seconds + st->checksum_seconds + st->device_enqueue_seconds + st->decode_seconds;
    if (busy > 0) {
        out->io_share = st->io_seconds / busy;
        out->checksum_share = st->checksum_seconds / busy;
        out->copy_share = st->device_enqueue_seconds / busy;
        out->decode_share = st->decode_seconds / busy;
    }
    if (st->batches == 0 || !(el > 0))
        return 0;
    out->consumer_wait = st->wait_seconds / el;
    /* The consumer's waits for copies: on the host, and its streams' on the device. */
    double copy_wait = st->device_wait_seconds + st->device_stream_wait_seconds;
    out->device_wait = copy_wait / el;
    if (st->io_threads)
        out->io_busy = busy / ((double)st->io_threads * el);
    if (out->consumer_wait + out->device_wait < SF_VERDICT_STALL_MAX)
        out->verdict = "consumer-bound";
    else if (copy_wait > st->wait_seconds)
        out->verdict = "copy-bound";
    else
        out->verdict = largest_stage(st);
    return 0;
}
