/* The real CUDA delivery code (lib/reader/device_cuda.c, through the reader)
 * run against the fake CUDA runtime (tests/fakecuda, -DSHARDFEED_CUDA=FAKE):
 * bytes on the device equal the host batches on every engine; with copies
 * slower than the consumer no host slot is overwritten while its copy may
 * read it and no copy overwrites a device buffer a consumer stream still
 * reads; every release is fenced on the GPU; device memory is constant;
 * every failing CUDA call fails cleanly; teardown leaves nothing behind.
 *
 * The fake reports a host slot reused under a pending copy, or a copy
 * overlapping a consumer kernel it was not ordered with, as a race
 * (fakecuda_stat("races")), and refused calls as misuse: every test ends by
 * asserting both are zero. The timing margins are orders of magnitude (copies
 * and consumer kernels of milliseconds against reads of microseconds). */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "fakecuda.h"
#include "device.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

#define SAMPLES 97
#define BATCH 8

UNIT_SCRATCH("devcuda")

#define CK(call) cr_assert_eq((call), cudaSuccess, "%s: %s", #call, cudaGetErrorName(cudaGetLastError()))

/* Packs the samples of unit_write_image_samples (written to g_root/in by
 * the first call) to g_root/NAME, with `compress` (NULL: none). */
static void pack(const char *name, const char *compress)
{
    char in[4200], out[4200];
    snprintf(in, sizeof in, "%s/in", g_root);
    struct stat st;
    if (stat(in, &st) != 0)
        unit_write_image_samples(in, SAMPLES);
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.shard_size = 256 << 10;
    po.compress = compress;
    snprintf(out, sizeof out, "%s/%s", g_root, name);
    cr_assert_eq(sf_pack_npy_dir(NULL, in, out, &po), 0, "%s", sf_last_error());
}

static void setup(void)
{
    scratch_init();
    pack("ds", NULL);
    fakecuda_set_device_count(1);
    fakecuda_set_abort_on_misuse(0);
}

TestSuite(device_cuda, .init = setup, .fini = scratch_fini, .timeout = 120);

static const char *ds(const char *name)
{
    static char d[4200];
    snprintf(d, sizeof d, "%s/%s", g_root, name);
    return d;
}

static sf_reader *open_cuda(const char *name, int engine, unsigned prefetch, int device)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = BATCH;
    o.prefetch = prefetch;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.engine = engine;
    o.device = SF_DEVICE_CUDA;
    o.device_index = device;
    sf_reader *r = NULL;
    cr_assert_eq(sf_reader_open(&r, ds(name), &o), 0, "%s", sf_last_error());
    return r;
}

static void assert_no_misuse_nor_race(void)
{
    cr_assert_eq(fakecuda_stat("misuse"), 0, "the fake refused calls (see stderr)");
    cr_assert_eq(fakecuda_stat("races"), 0, "the fake saw races (see stderr)");
}

/* What the device holds after a close: nothing. */
static void assert_nothing_left(void)
{
    cr_assert_eq(fakecuda_stat("streams"), 0);
    cr_assert_eq(fakecuda_stat("events"), 0);
    cr_assert_eq(fakecuda_stat("device_allocs"), 0);
    cr_assert_eq(fakecuda_stat("host_registrations"), 0);
    cr_assert_eq(fakecuda_stat("host_allocs"), 0);
}

/* ---- a consumer: its own stream, pinned memory to read batches back into --- */

typedef struct consumer {
    cudaStream_t stream;
    uint8_t *back;
    size_t back_bytes;
} consumer;

static void consumer_open(consumer *c)
{
    CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    c->back_bytes = 1 << 20;
    CK(cudaHostAlloc((void **)&c->back, c->back_bytes, cudaHostAllocDefault));
}

static void consumer_close(consumer *c)
{
    CK(cudaStreamSynchronize(c->stream));
    CK(cudaStreamDestroy(c->stream));
    CK(cudaFreeHost(c->back));
}

/* The host batch holds the samples its ids name. */
static void check_host_batch(const sf_batch *b)
{
    const sf_batch_field *img = sf_batch_field_find(b, "img"), *lab = sf_batch_field_find(b, "label");
    const float *x = img->data;
    const int64_t *y = lab->data;
    for (uint32_t k = 0; k < b->size; k++) {
        uint64_t id = b->source_ids[k];
        cr_assert_eq(y[k], (int64_t)id * 5);
        const float *s = x + (uint64_t)k * UNIT_IMG_FLOATS;
        cr_assert(s[0] == (float)(id * 1000) &&
                  s[UNIT_IMG_FLOATS - 1] == (float)(id * 1000 + UNIT_IMG_FLOATS - 1),
                  "sample %llu's image holds another sample", (unsigned long long)id);
    }
}

/* Reads every field of b back from the device on the consumer's stream,
 * after the batch's event, and compares it with the host batch. */
static void check_device_batch(consumer *c, const sf_batch *b)
{
    cr_assert_eq(b->device, SF_DEVICE_CUDA);
    cr_assert_geq(fakecuda_stream_device(b->device_stream), 0, "device_stream is no live stream");
    cr_assert_geq(fakecuda_event_device(b->device_event), 0, "device_event is no live event");
    check_host_batch(b);
    CK(cudaStreamWaitEvent(c->stream, (cudaEvent_t)b->device_event, 0));
    for (uint32_t f = 0; f < b->num_fields; f++) {
        const sf_batch_field *bf = &b->fields[f];
        cr_assert_leq(bf->bytes, c->back_bytes);
        cr_assert_neq(bf->device_data, bf->data);
        memset(c->back, 0, bf->bytes);
        CK(cudaMemcpyAsync(c->back, bf->device_data, bf->bytes, cudaMemcpyDeviceToHost, c->stream));
        CK(cudaStreamSynchronize(c->stream));
        cr_assert_eq(memcmp(c->back, bf->data, bf->bytes), 0,
                     "field %s of batch %llu of epoch %llu differs on the device", bf->name,
                     (unsigned long long)b->index, (unsigned long long)b->epoch);
    }
}

/* A training step that never waits on the host: the consumer's "kernels"
 * read each field after the copy's event, and the batch is released behind
 * them at once. */
static void gpu_step(sf_reader *r, consumer *c, const sf_batch *b, unsigned kernel_us)
{
    CK(cudaStreamWaitEvent(c->stream, (cudaEvent_t)b->device_event, 0));
    for (uint32_t f = 0; f < b->num_fields; f++)
        cr_assert_eq(fakecuda_launch_read(b->fields[f].device_data, b->fields[f].bytes, kernel_us,
                                          c->stream),
                     cudaSuccess);
    cr_assert_eq(sf_reader_release_after(r, b, c->stream), 0, "%s", sf_last_error());
}

/* ---- bytes --------------------------------------------------------------------- */

Test(device_cuda, every_engine_delivers_the_host_batches_byte_for_byte)
{
    static const struct {
        const char *ds;
        int engine;
        const char *name;
    } runs[] = {
        {"ds", SF_ENGINE_URING, "uring"},
        {"ds", SF_ENGINE_PREAD, "pread"},
        {"ds", SF_ENGINE_MMAP, "mmap"},
        {"dsz", SF_ENGINE_PREAD, "pread"}, /* compressed: staged, decompressed, then copied */
    };
    pack("dsz", "img=zstd");
    fakecuda_set_copy_delay_us(2000); /* copies complete late */
    consumer c;
    consumer_open(&c);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        sf_reader *r = open_cuda(runs[i].ds, runs[i].engine, 3, 0);
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_str_eq(st.engine, runs[i].name);
        cr_assert_str_eq(st.device, "cuda");
        for (int epoch = 0; epoch < 3; epoch++) {
            uint64_t seen = 0;
            const sf_batch *b;
            while (sf_reader_next(&b, r) == 0 && b) {
                check_device_batch(&c, b);
                seen += b->size;
                cr_assert_eq(sf_reader_release_after(r, b, c.stream), 0, "%s", sf_last_error());
            }
            cr_assert_eq(seen, SAMPLES, "%s epoch %d", runs[i].name, epoch);
        }
        sf_reader_close(r);
    }
    consumer_close(&c);
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, batch_wait_blocks_until_the_copy_has_landed)
{
    /* A consumer without a stream of its own waits on the host, then reads
     * the device buffer on a stream that does not wait for the event. */
    fakecuda_set_copy_delay_us(5000);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    const sf_batch *b;
    while (sf_reader_next(&b, r) == 0 && b) {
        cr_assert_eq(sf_batch_wait(r, b), 0, "%s", sf_last_error());
        const sf_batch_field *bf = &b->fields[0];
        CK(cudaMemcpyAsync(c.back, bf->device_data, bf->bytes, cudaMemcpyDeviceToHost, c.stream));
        CK(cudaStreamSynchronize(c.stream));
        cr_assert_eq(memcmp(c.back, bf->data, bf->bytes), 0, "read back before the copy landed");
        cr_assert_eq(sf_reader_release(r, b), 0);
    }
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

/* ---- slots: no reuse while a copy or a fenced consumer may read them ----------- */

Test(device_cuda, slow_copies_never_see_their_host_slot_overwritten)
{
    /* Copies take 5 ms, the consumer's step nothing: without the wait for
     * the copy before a slot is read into again, the reads of the next batch
     * overwrite the host bytes a queued copy has yet to take. */
    fakecuda_set_copy_delay_us(5000);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    uint64_t batches = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b) {
            gpu_step(r, &c, b, 0);
            batches++;
        }
    }
    sf_reader_close(r);
    consumer_close(&c);
    cr_assert_gt(batches, 2 * 2, "too few batches to reuse the slots");
    assert_no_misuse_nor_race();
}

Test(device_cuda, batch_wait_on_orders_the_consumer_stream_after_the_copy)
{
    /* The consumer's stream waits through sf_batch_wait_on (what the Python
     * module's import does), never on the host: its kernels and read-backs
     * queued after it see the copied bytes, with copies late. The reader
     * counts the bytes copied and the stream's wait. */
    fakecuda_set_copy_delay_us(3000);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    uint64_t bytes = 0;
    const sf_batch *b;
    while (sf_reader_next(&b, r) == 0 && b) {
        check_host_batch(b);
        cr_assert_eq(sf_batch_wait_on(r, b, NULL), SF_E_INVALID, "a NULL stream is no stream");
        cr_assert_eq(sf_batch_wait_on(r, b, c.stream), 0, "%s", sf_last_error());
        for (uint32_t f = 0; f < b->num_fields; f++) {
            const sf_batch_field *bf = &b->fields[f];
            cr_assert_eq(fakecuda_launch_read(bf->device_data, bf->bytes, 0, c.stream), cudaSuccess);
            CK(cudaMemcpyAsync(c.back, bf->device_data, bf->bytes, cudaMemcpyDeviceToHost, c.stream));
            CK(cudaStreamSynchronize(c.stream));
            cr_assert_eq(memcmp(c.back, bf->data, bf->bytes), 0, "field %s of batch %llu differs",
                         bf->name, (unsigned long long)b->index);
            bytes += bf->bytes;
        }
        cr_assert_eq(sf_reader_release_after(r, b, c.stream), 0, "%s", sf_last_error());
    }
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    cr_assert_geq(st.device_copy_bytes, bytes, "H2D bytes counted");
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

Test(device_cuda, a_reposition_waits_for_the_copies_of_dropped_read_ahead)
{
    /* set_epoch drops read-ahead slots whose copies are still queued: they
     * must not be read into before those copies ran. */
    fakecuda_set_copy_delay_us(5000);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 3, 0);
    for (uint64_t e = 0; e < 6; e++) {
        const sf_batch *b;
        cr_assert_eq(sf_reader_next(&b, r), 0);
        gpu_step(r, &c, b, 0);
        cr_assert_eq(sf_reader_set_epoch(r, e + 1), 0);
    }
    const sf_batch *b;
    uint64_t seen = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        check_device_batch(&c, b);
        seen += b->size;
        cr_assert_eq(sf_reader_release_after(r, b, c.stream), 0);
    }
    cr_assert_eq(seen, SAMPLES);
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

Test(device_cuda, the_next_copy_waits_for_the_consumer_stream_that_read_the_slot)
{
    /* The consumer's kernels read each batch for 20 ms on its stream and
     * release at once; copies are fast. Without the release fence the next
     * copy into the slot's device buffer runs while the kernel still reads
     * it. */
    fakecuda_set_copy_delay_us(500);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    const sf_batch *b;
    uint64_t batches = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        gpu_step(r, &c, b, 20000);
        batches++;
    }
    sf_reader_close(r);
    consumer_close(&c);
    cr_assert_gt(batches, 2);
    assert_no_misuse_nor_race();
}

Test(device_cuda, a_release_that_cannot_be_recorded_still_keeps_the_next_copy_behind_the_kernel)
{
    /* Both slots held (no copy in flight, so the next cudaEventRecord is the
     * release's), a 20 ms kernel queued on the consumer's stream, and the
     * release's event record fails: the release reports it, and the slot's
     * next copy must still not run while the kernel reads the buffer. */
    fakecuda_set_copy_delay_us(200);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    const sf_batch *a, *b;
    cr_assert_eq(sf_reader_next(&a, r), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
    cr_assert(a && b);
    cr_assert_eq(sf_batch_wait(r, a), 0);
    cr_assert_eq(sf_batch_wait(r, b), 0);
    for (uint32_t f = 0; f < a->num_fields; f++)
        cr_assert_eq(fakecuda_launch_read(a->fields[f].device_data, a->fields[f].bytes, 20000,
                                          c.stream),
                     cudaSuccess);
    fakecuda_fail_call("cudaEventRecord", 1, cudaErrorIllegalAddress);
    cr_assert_neq(sf_reader_release_after(r, a, c.stream), 0, "a failed release went unnoticed");
    fakecuda_fail_call("cudaEventRecord", 0, 0);
    cr_assert(strstr(sf_last_error(), "recording the release of a batch"), "%s", sf_last_error());
    cr_assert_eq(sf_reader_release(r, b), 0, "%s", sf_last_error());
    const sf_batch *n;
    for (int i = 0; i < 4 && sf_reader_next(&n, r) == 0 && n; i++)
        gpu_step(r, &c, n, 0);
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

Test(device_cuda, a_failed_wait_for_a_slots_copy_fails_its_next_batch_and_keeps_the_copy_safe)
{
    /* Before an I/O thread refills a slot it waits for the slot's last copy
     * (cudaEventSynchronize). That wait failing must neither let the slot be
     * refilled while the 30 ms copy is still queued (the consumer's work
     * queued behind the copy would read the next batch's bytes: the fake's
     * race check, "the host bytes changed between the call and the copy")
     * nor go unreported: the wait falls back to the slot's stream, and the
     * next sf_reader_next fails with the CUDA error, once. */
    fakecuda_set_copy_delay_us(30000);
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 0);
    const sf_batch *a;
    cr_assert_eq(sf_reader_next(&a, r), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait_on(r, a, c.stream), 0, "%s", sf_last_error());
    const sf_batch_field *f = &a->fields[0];
    cr_assert_leq(f->bytes, c.back_bytes);
    CK(cudaMemcpyAsync(c.back, f->device_data, f->bytes, cudaMemcpyDeviceToHost, c.stream));
    fakecuda_fail_call("cudaEventSynchronize", 1, cudaErrorIllegalAddress);
    /* The release only records the fence: it does not wait, so it cannot fail here. */
    cr_assert_eq(sf_reader_release_after(r, a, c.stream), 0, "%s", sf_last_error());
    int failed = 0;
    char msg[1024] = "";
    const sf_batch *n;
    for (int i = 0; i < 4 && !failed; i++) {
        failed = sf_reader_next(&n, r);
        if (failed)
            snprintf(msg, sizeof msg, "%s", sf_last_error());
        else if (n)
            cr_assert_eq(sf_reader_release(r, n), 0, "%s", sf_last_error());
    }
    fakecuda_fail_call("cudaEventSynchronize", 0, 0);
    cr_assert_eq(failed, SF_E_DEVICE, "the failed wait went unnoticed (%d: %s)", failed, msg);
    cr_assert(strstr(msg, "into its slot again") && strstr(msg, "illegal memory access"), "%s",
              msg);
    /* The next call retries the batch, and reading goes on. */
    for (int i = 0; i < 3 && sf_reader_next(&n, r) == 0 && n; i++)
        cr_assert_eq(sf_reader_release(r, n), 0, "%s", sf_last_error());
    CK(cudaStreamSynchronize(c.stream));
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

Test(device_cuda, a_consumer_whose_gpu_runs_behind_never_waits_in_its_release)
{
    /* A training loop queues each step on its stream and releases the batch
     * at once, without waiting (PyTorch without .item()): its GPU runs steps
     * behind, so each slot's next copy, fenced behind the step that read the
     * slot, is still queued when the batch is released. The release must not
     * wait for it (it did: cudaEventSynchronize in the consumer's release
     * blocked a Python trainer 55% of its time on an H200); the I/O thread
     * that refills the slot waits instead, and says so in the statistics.
     * Kernels of 20 ms against reads of microseconds: every wait is the
     * GPU's. */
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 3, 0);
    const sf_batch *b;
    unsigned steps = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        check_host_batch(b);
        gpu_step(r, &c, b, 20000);
        steps++;
    }
    cr_assert_eq(steps, (SAMPLES + BATCH - 1) / BATCH);
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    /* The consumer's host-side wait for copies is the fences' recording
     * only; the GPU's pace shows as the I/O threads' wait for slots, about
     * (steps - prefetch) kernels' time. */
    double kernels = steps * 0.020 * 2; /* two fields, two kernels a step */
    cr_assert_lt(st.device_wait_seconds, 0.1 * kernels, "the consumer waited %.3f s on the host",
                 st.device_wait_seconds);
    cr_assert_gt(st.device_slot_wait_seconds, 0.25 * kernels,
                 "the I/O threads waited %.3f s for slots, against %.3f s of kernels",
                 st.device_slot_wait_seconds, kernels);
    sf_reader_bottleneck v;
    cr_assert_eq(sf_reader_verdict(&v, &st), 0);
    cr_assert_str_eq(v.verdict, "consumer-bound", "wait %.3f s, slot wait %.3f s, io %.3f s",
                     st.wait_seconds, st.device_slot_wait_seconds, st.io_seconds);
    CK(cudaStreamSynchronize(c.stream));
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
}

Test(device_cuda, every_release_is_waited_for_by_the_next_copy_of_its_slot)
{
    /* The handshake as the fake logged it, independent of timing: each
     * sf_reader_release_after(stream) records an event on that stream, and
     * the next copy into the slot is queued behind a wait for that very
     * recording, on the slot's own stream. */
    consumer c;
    consumer_open(&c);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 3, 0);
    fakecuda_log_clear();
    uint64_t releases = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b) {
            gpu_step(r, &c, b, 0);
            releases++;
        }
    }
    sf_reader_close(r);
    consumer_close(&c);
    size_t n = fakecuda_log_count();
    fakecuda_log_entry *log = calloc(n, sizeof *log);
    cr_assert_not_null(log);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(fakecuda_log_get(i, &log[i]), 0);
    uint64_t recorded = 0, fenced = 0;
    for (size_t i = 0; i < n; i++) {
        if (log[i].kind != FAKECUDA_LOG_RECORD || log[i].stream != c.stream)
            continue;
        recorded++;
        /* Its wait: on another stream, then that stream's next entry a copy. */
        for (size_t j = i + 1; j < n; j++) {
            if (log[j].kind != FAKECUDA_LOG_WAIT || log[j].record != log[i].record)
                continue;
            cr_assert_neq(log[j].stream, c.stream);
            size_t k = j + 1; /* (records of the timing events may come first) */
            while (k < n && (log[k].stream != log[j].stream || log[k].kind == FAKECUDA_LOG_RECORD))
                k++;
            cr_assert(k < n && log[k].kind == FAKECUDA_LOG_COPY,
                      "the wait for a release is not followed by the slot's copy");
            fenced++;
            break;
        }
    }
    free(log);
    cr_assert_eq(recorded, releases, "every release_after(stream) records on that stream");
    /* The last `prefetch` releases may have no next copy before the close. */
    cr_assert_geq(fenced + 3, recorded, "%llu of %llu releases fenced the next copy",
                  (unsigned long long)fenced, (unsigned long long)recorded);
    cr_assert_gt(fenced, 0);
    assert_no_misuse_nor_race();
}

/* ---- memory and teardown ------------------------------------------------------- */

static size_t device_free(void)
{
    size_t f, t;
    CK(cudaMemGetInfo(&f, &t));
    return f;
}

Test(device_cuda, device_memory_is_constant_over_50_epochs)
{
    size_t before = device_free();
    sf_reader *r = open_cuda("ds", SF_ENGINE_AUTO, 3, 0);
    size_t opened = device_free();
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_geq(before - opened, st.device_bytes, "the pool is device memory");
    cr_assert_eq(st.device_bytes, st.slab_bytes, "one device buffer per slot");
    uint64_t streams = fakecuda_stat("streams"), events = fakecuda_stat("events");
    for (uint64_t e = 0; e < 50; e++) {
        cr_assert_eq(sf_reader_set_epoch(r, e), 0);
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b)
            cr_assert_eq(sf_reader_release(r, b), 0);
        cr_assert_eq(device_free(), opened, "device memory changed in epoch %llu",
                     (unsigned long long)e);
        cr_assert_eq(fakecuda_stat("streams"), streams);
        cr_assert_eq(fakecuda_stat("events"), events);
    }
    sf_reader_close(r);
    cr_assert_eq(device_free(), before, "device memory not given back at close");
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, close_with_copies_in_flight_waits_for_them)
{
    fakecuda_set_copy_delay_us(20000);
    for (int held = 0; held < 2; held++) {
        sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 4, 0);
        const sf_batch *b;
        cr_assert_eq(sf_reader_next(&b, r), 0);
        if (!held)
            cr_assert_eq(sf_reader_release(r, b), 0);
        sf_reader_close(r); /* read-ahead copies still queued */
    }
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

/* io_uring registers the slab for reads; it must be page-locked by then, and
 * unlocked only after the rings are gone and before the slab is unmapped. */
static atomic_uint uring_registrations, unpinned_registrations, unmapped_while_pinned;
struct io_uring;
int __real_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov, unsigned n);
int __wrap_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov, unsigned n);
int __real_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len);

int __wrap_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov, unsigned n)
{
    atomic_fetch_add(&uring_registrations, 1);
    for (unsigned i = 0; i < n; i++)
        if (!fakecuda_host_registered(iov[i].iov_base, iov[i].iov_len))
            atomic_fetch_add(&unpinned_registrations, 1);
    return __real_io_uring_register_buffers(ring, iov, n);
}

int __wrap_munmap(void *addr, size_t len)
{
    if (fakecuda_host_registered(addr, 1))
        atomic_fetch_add(&unmapped_while_pinned, 1);
    return __real_munmap(addr, len);
}

Test(device_cuda, the_slab_is_page_locked_while_io_uring_and_the_copies_use_it)
{
    sf_reader *r = open_cuda("ds", SF_ENGINE_URING, 3, 0);
    const sf_batch *b;
    while (sf_reader_next(&b, r) == 0 && b)
        cr_assert_eq(sf_reader_release(r, b), 0);
    cr_assert_eq(fakecuda_stat("host_registrations"), 1);
    sf_reader_close(r);
    cr_assert_gt(atomic_load(&uring_registrations), 0, "io_uring registered no buffers");
    cr_assert_eq(atomic_load(&unpinned_registrations), 0,
                 "io_uring registered slab memory that cudaHostRegister had not locked yet");
    cr_assert_eq(atomic_load(&unmapped_while_pinned), 0, "the slab was unmapped while registered");
    cr_assert_eq(fakecuda_stat("host_registrations"), 0);
    assert_no_misuse_nor_race();
}

/* ---- devices and errors -------------------------------------------------------- */

Test(device_cuda, a_reader_on_the_second_device_puts_everything_there)
{
    fakecuda_set_device_count(2);
    fakecuda_set_copy_delay_us(1000);
    CK(cudaSetDevice(1));
    consumer c;
    consumer_open(&c);
    size_t before1 = device_free();
    CK(cudaSetDevice(0));
    size_t before0 = device_free();
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 3, 1);
    CK(cudaSetDevice(0));
    cr_assert_eq(device_free(), before0, "device 0 memory used by a reader on cuda:1");
    CK(cudaSetDevice(1));
    cr_assert_lt(device_free(), before1);
    const sf_batch *b;
    uint64_t seen = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        cr_assert_eq(fakecuda_stream_device(b->device_stream), 1);
        cr_assert_eq(fakecuda_event_device(b->device_event), 1);
        check_device_batch(&c, b);
        seen += b->size;
        cr_assert_eq(sf_reader_release_after(r, b, c.stream), 0, "%s", sf_last_error());
    }
    cr_assert_eq(seen, SAMPLES);
    sf_reader_close(r);
    consumer_close(&c);
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, open_and_close_leave_the_callers_current_device_alone)
{
    /* A trainer's thread on cuda:0 opening a reader for cuda:1 stays on
     * cuda:0 (its own allocations and launches go there), also when open
     * fails, and whichever thread closes the reader. */
    fakecuda_set_device_count(2);
    CK(cudaSetDevice(0));
    int dev = -1;
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 1);
    CK(cudaGetDevice(&dev));
    cr_assert_eq(dev, 0, "sf_reader_open moved the caller to device %d", dev);
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_eq(sf_batch_wait(r, b), 0);
    cr_assert_eq(sf_reader_release(r, b), 0);
    sf_reader_close(r);
    CK(cudaGetDevice(&dev));
    cr_assert_eq(dev, 0, "sf_reader_close moved the caller to device %d", dev);
    fakecuda_fail_call("cudaMalloc", 1, cudaErrorMemoryAllocation);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.device = SF_DEVICE_CUDA;
    o.device_index = 1;
    cr_assert_eq(sf_reader_open(&r, ds("ds"), &o), SF_E_DEVICE);
    CK(cudaGetDevice(&dev));
    cr_assert_eq(dev, 0, "a failed sf_reader_open moved the caller to device %d", dev);
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, a_reader_on_cuda_1_makes_no_context_on_another_device)
{
    /* A rank that opens its reader for cuda:1 from a thread that never used
     * CUDA (current device 0 by default), and the reader's own threads: a
     * context on device 0 would cost every rank's process memory on GPU 0. */
    fakecuda_set_device_count(2);
    sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 2, 1);
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0); /* an I/O thread has enqueued its copy */
    sf_reader_close(r);
    cr_assert_eq(fakecuda_stat("contexts"), 1, "a context was made on a device besides cuda:1");
    int dev = -1;
    CK(cudaGetDevice(&dev));
    cr_assert_eq(dev, 0);
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, no_device_and_a_missing_ordinal_fail_cleanly)
{
    fakecuda_set_device_count(0);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.device = SF_DEVICE_CUDA;
    sf_reader *r = NULL;
    cr_assert_eq(sf_reader_open(&r, ds("ds"), &o), SF_E_UNSUPPORTED);
    cr_assert_null(r);
    cr_assert(strstr(sf_last_error(), "no GPU found: no CUDA device available"), "%s", sf_last_error());
    fakecuda_set_device_count(1);
    o.device_index = 1;
    cr_assert_eq(sf_reader_open(&r, ds("ds"), &o), SF_E_UNSUPPORTED);
    cr_assert(strstr(sf_last_error(), "no CUDA device cuda:1 (this machine has 1)"), "%s",
              sf_last_error());
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

Test(device_cuda, every_failing_cuda_call_of_open_fails_the_open_cleanly)
{
    const unsigned prefetch = 3;
    static const struct {
        const char *call;
        unsigned calls; /* how many times open makes it */
        const char *says;
    } steps[] = {
        {"cudaSetDevice", 1, "cudaSetDevice"},
        {"cudaHostRegister", 1, "cudaHostRegister of the batch slab"},
        {"cudaMalloc", 1, "cudaMalloc of the device batch pool"},
        {"cudaStreamCreateWithFlags", prefetch, "creating streams and events"},
        {"cudaEventCreateWithFlags", 2 * prefetch, "creating streams and events"},
    };
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = BATCH;
    o.prefetch = prefetch;
    o.device = SF_DEVICE_CUDA;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        for (unsigned nth = 1; nth <= steps[i].calls; nth++) {
            fakecuda_fail_call(steps[i].call, nth, cudaErrorMemoryAllocation);
            sf_reader *r = NULL;
            cr_assert_eq(sf_reader_open(&r, ds("ds"), &o), SF_E_DEVICE,
                         "%s #%u failing did not fail the open", steps[i].call, nth);
            cr_assert_null(r);
            cr_assert(strstr(sf_last_error(), steps[i].says) && strstr(sf_last_error(), "out of memory"),
                      "%s #%u: %s", steps[i].call, nth, sf_last_error());
            fakecuda_fail_call(steps[i].call, 0, 0);
            assert_nothing_left();
        }
    /* and the open works again */
    sf_reader *r = NULL;
    cr_assert_eq(sf_reader_open(&r, ds("ds"), &o), 0, "%s", sf_last_error());
    sf_reader_close(r);
    assert_no_misuse_nor_race();
    assert_nothing_left();
}

/* Reads until an error, returned by next or by release_after; its code if one
 * came, else 0. The consumer makes no CUDA calls of its own that the failures
 * injected below could hit: it waits on the host and reads the host batch. */
static int read_until_error(sf_reader *r, cudaStream_t stream, char *msg, size_t cap)
{
    for (int epoch = 0; epoch < 3; epoch++) {
        const sf_batch *b;
        int rc;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            check_host_batch(b);
            if ((rc = sf_batch_wait(r, b)) != 0 || (rc = sf_reader_release_after(r, b, stream)) != 0)
                break;
        }
        if (rc) {
            snprintf(msg, cap, "%s", sf_last_error());
            return rc;
        }
    }
    return 0;
}

Test(device_cuda, a_failing_copy_wait_or_record_fails_a_batch_and_closes_cleanly)
{
    static const struct {
        const char *call;
        unsigned nth;
    } faults[] = {
        {"cudaMemcpyAsync", 7},     /* a batch's copy */
        {"cudaStreamWaitEvent", 5}, /* the fence before a copy */
        {"cudaEventRecord", 2},     /* after a copy */
        {"cudaEventRecord", 9},     /* one of them or a release's */
    };
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        sf_reader *r = open_cuda("ds", SF_ENGINE_PREAD, 3, 0);
        fakecuda_fail_call(faults[i].call, faults[i].nth, cudaErrorIllegalAddress);
        char msg[1024] = "";
        int read_rc = read_until_error(r, stream, msg, sizeof msg);
        cr_assert(read_rc, "%s #%u failing went unnoticed", faults[i].call, faults[i].nth);
        /* the CUDA error's own text, not only "not supported" (sf_strerror) */
        cr_assert(strstr(msg, "illegal memory access"), "%s: %s", faults[i].call, msg);
        cr_assert_eq(read_rc, SF_E_DEVICE, "%s: %d", faults[i].call, read_rc);
        sf_reader_close(r);
    }
    CK(cudaStreamDestroy(stream));
    assert_no_misuse_nor_race();
    assert_nothing_left();
}
