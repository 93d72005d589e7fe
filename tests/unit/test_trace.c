/* Pipeline traces and the bottleneck verdict: every delivered batch's
 * stages recorded in order (each engine, with and without a device), the
 * trace's bounds, its API states, the verdict rule on constructed stats, and
 * one constructed copy-bound run (copies slowed 20 ms each: a margin of
 * orders of magnitude over the microseconds the reads take). The JSON
 * itself is checked by tests/cli/test_bench.py with Python's json. */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "npy.h"
#include "device.h"
#include "reader_internal.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

#define SAMPLES 101
#define IMG_FLOATS 1024 /* 4 KiB per sample */

static char g_root[256];

static void setup(void)
{
    snprintf(g_root, sizeof g_root, "trace-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root), "mkdtemp: %s", strerror(errno));
    char in[512], out[512], path[600];
    snprintf(in, sizeof in, "%s/in", g_root);
    snprintf(out, sizeof out, "%s/ds", g_root);
    cr_assert_eq(mkdir(in, 0755), 0);
    static float img[IMG_FLOATS];
    uint64_t shape[1] = {IMG_FLOATS};
    for (int i = 0; i < SAMPLES; i++) {
        for (int j = 0; j < IMG_FLOATS; j++)
            img[j] = (float)(i * 7 + j);
        int64_t label = i;
        snprintf(path, sizeof path, "%s/img_%d.npy", in, i);
        unit_write_npy(path, SF_DTYPE_FLOAT32, 1, shape, img, sizeof img);
        snprintf(path, sizeof path, "%s/label_%d.npy", in, i);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.shard_size = 128 << 10; /* several shards */
    cr_assert_eq(sf_pack_npy_dir(NULL, in, out, &po), 0, "%s", sf_last_error());
}

static void teardown(void)
{
    reader_device_host_set_delay_us(0);
    if (g_root[0])
        unit_rm_tree(g_root);
}

TestSuite(trace, .init = setup, .fini = teardown, .timeout = 120);

static const char *ds_dir(void)
{
    static char d[512];
    snprintf(d, sizeof d, "%s/ds", g_root);
    return d;
}

static uint64_t ts(const reader_trace_batch *b, int k)
{
    return atomic_load(&((reader_trace_batch *)b)->t[k]);
}

/* Every record that was handed out has every stage, in pipeline order; the
 * delivered (epoch, index) pairs are exactly those the loop saw. */
static void check_records(sf_reader *r, uint64_t epochs, int device)
{
    reader_trace *tr = atomic_load(&r->trace);
    cr_assert_not_null(tr);
    uint64_t nbat = sf_reader_num_batches(r), delivered = 0;
    uint8_t *seen = calloc(epochs * nbat, 1);
    for (uint64_t i = 0; i < tr->nb; i++) {
        const reader_trace_batch *b = &tr->b[i];
        if (!ts(b, SF_TS_HANDED))
            continue;
        delivered++;
        cr_assert_lt(b->epoch, epochs);
        cr_assert_lt(b->index, nbat);
        cr_assert_eq(seen[b->epoch * nbat + b->index], 0, "batch e%llu b%llu handed twice",
                     (unsigned long long)b->epoch, (unsigned long long)b->index);
        seen[b->epoch * nbat + b->index] = 1;
        cr_assert_lt(b->slot, r->opts.prefetch);
        int order[] = {SF_TS_SUBMITTED, SF_TS_CLAIMED, SF_TS_READ, SF_TS_CHECKSUMMED, SF_TS_HANDED,
                       SF_TS_RELEASED};
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            cr_assert_neq(ts(b, order[k]), 0, "batch e%llu b%llu: stage %d missing",
                          (unsigned long long)b->epoch, (unsigned long long)b->index, order[k]);
            if (k)
                cr_assert_leq(ts(b, order[k - 1]), ts(b, order[k]),
                              "batch e%llu b%llu: stage %d before stage %d", (unsigned long long)b->epoch,
                              (unsigned long long)b->index, order[k], order[k - 1]);
        }
        if (device) {
            cr_assert_leq(ts(b, SF_TS_CHECKSUMMED), ts(b, SF_TS_DEV_ENQUEUED));
            cr_assert_leq(ts(b, SF_TS_DEV_ENQUEUED), ts(b, SF_TS_HANDED));
            cr_assert_neq(ts(b, SF_TS_DEV_DONE), 0);
            cr_assert_leq(ts(b, SF_TS_DEV_ENQUEUED), ts(b, SF_TS_DEV_DONE));
            cr_assert_leq(ts(b, SF_TS_DEV_DONE), ts(b, SF_TS_RELEASED));
        } else {
            cr_assert_eq(ts(b, SF_TS_DEV_ENQUEUED), 0);
            cr_assert_eq(ts(b, SF_TS_DEV_DONE), 0);
        }
    }
    cr_assert_eq(delivered, epochs * nbat, "%llu of %llu batches recorded as delivered",
                 (unsigned long long)delivered, (unsigned long long)(epochs * nbat));
    free(seen);
}

static void run_traced(int engine, int device, int verify)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 3;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.engine = engine;
    o.device = device;
    o.verify = verify;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    /* An engine-named test runs that engine (AUTO picks mmap for these small
     * cached records, so asking for AUTO would not run io_uring at all). */
    sf_reader_statistics at_open;
    cr_assert_eq(sf_reader_stats(&at_open, r), 0);
    static const char *const names[] = {[SF_ENGINE_URING] = "uring", [SF_ENGINE_PREAD] = "pread",
                                        [SF_ENGINE_MMAP] = "mmap"};
    if (engine == SF_ENGINE_URING && strcmp(at_open.engine, "uring") != 0) {
        sf_reader_close(r);
        cr_skip_test("io_uring is not available here (the reader fell back to %s)", at_open.engine);
    }
    cr_assert_str_eq(at_open.engine, names[engine]);
    cr_assert_eq(sf_reader_trace_start(r, 0), 0, "%s", sf_last_error());
    const uint64_t epochs = 2;
    for (uint64_t e = 0; e < epochs; e++) {
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b) {
            if (device)
                cr_assert_eq(sf_batch_wait(r, b), 0);
            cr_assert_eq(sf_reader_release(r, b), 0);
        }
    }
    check_records(r, epochs, device);
    char path[600];
    snprintf(path, sizeof path, "%s/trace.json", g_root);
    cr_assert_eq(sf_reader_trace_write(r, path), 0, "%s", sf_last_error());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char head[16] = {0};
    cr_assert_eq(fread(head, 1, 15, f), 15);
    fclose(f);
    cr_assert_str_eq(head, "{\"traceEvents\":");
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    cr_assert_geq(st.trace_events, epochs * sf_reader_num_batches(r));
    cr_assert_eq(st.trace_dropped, 0);
    cr_assert_gt(st.elapsed_seconds, 0);
    sf_reader_close(r);
}

Test(trace, stages_in_order_uring)
{
    run_traced(SF_ENGINE_URING, SF_DEVICE_CPU, SF_VERIFY_ON);
}

Test(trace, stages_in_order_pread)
{
    run_traced(SF_ENGINE_PREAD, SF_DEVICE_CPU, SF_VERIFY_ON);
}

Test(trace, stages_in_order_mmap_verify_off)
{
    run_traced(SF_ENGINE_MMAP, SF_DEVICE_CPU, SF_VERIFY_OFF);
}

Test(trace, stages_in_order_with_device_copies)
{
    reader_device_host_set_delay_us(500);
    run_traced(SF_ENGINE_PREAD, SF_DEVICE_HOST_COPY, SF_VERIFY_ON);
}

Test(trace, bounded_by_max_batches_and_states)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 4;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    char path[600];
    snprintf(path, sizeof path, "%s/t.json", g_root);
    cr_assert_eq(sf_reader_trace_write(r, path), SF_E_STATE, "write without a trace");
    cr_assert_eq(sf_reader_trace_start(r, 3), 0);
    cr_assert_eq(sf_reader_trace_start(r, 3), SF_E_STATE, "two traces at once");
    const sf_batch *b;
    while (sf_reader_next(&b, r) == 0 && b)
        sf_reader_release(r, b);
    reader_trace *tr = atomic_load(&r->trace);
    cr_assert_eq(tr->cap_b, 3);
    cr_assert_eq(tr->nb, 3, "records beyond max_batches");
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_gt(st.trace_dropped, 0, "batches past the cap are counted as dropped");
    cr_assert_eq(sf_reader_trace_write(r, path), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_trace_write(r, path), SF_E_STATE, "the trace ended with the write");
    /* A second trace, after a reposition that drops read-ahead. */
    cr_assert_eq(sf_reader_trace_start(r, 0), 0);
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_not_null(b);
    sf_reader_release(r, b);
    cr_assert_eq(sf_reader_set_epoch(r, 5), 0);
    while (sf_reader_next(&b, r) == 0 && b)
        sf_reader_release(r, b);
    cr_assert_neq(atomic_load(&r->trace), tr, "a new trace");
    cr_assert_eq(atomic_load(&r->trace)->prev, tr, "the old one is kept until close");
    cr_assert_eq(sf_reader_trace_write(r, "/nonexistent-dir/x/trace.json"), -ENOENT);
    sf_reader_close(r);
}

/* A write that fails keeps the trace: a second write, to a path that can be
 * written, writes what was recorded; only then does the trace end. A start
 * after a failed write drops the unwritten trace for a new one. */
Test(trace, a_failed_write_keeps_the_trace_for_another)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 4;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_trace_start(r, 0), 0, "%s", sf_last_error());
    const sf_batch *b;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
        cr_assert_not_null(b);
        sf_reader_release(r, b);
    }
    cr_assert_eq(sf_reader_trace_write(r, "/nonexistent-dir/x/trace.json"), -ENOENT);
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    uint64_t events = st.trace_events;
    cr_assert_gt(events, 0);
    /* Recording stopped with the failed write: batches read meanwhile are
     * not in the trace. */
    cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
    sf_reader_release(r, b);
    char path[600];
    snprintf(path, sizeof path, "%s/retry.json", g_root);
    cr_assert_eq(sf_reader_trace_write(r, path), 0, "the retry: %s", sf_last_error());
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
    cr_assert_gt(sb.st_size, 0);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char *json = calloc(1, (size_t)sb.st_size + 1);
    cr_assert_eq(fread(json, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    cr_assert(strstr(json, "\"batches_recorded\":") != NULL);
    cr_assert_eq(atomic_load(&r->trace)->nb,
                 strtoull(strstr(json, "\"batches_recorded\":") + strlen("\"batches_recorded\":"),
                          NULL, 10));
    cr_assert_geq(atomic_load(&r->trace)->nb, 3, "the batches read before the failed write");
    free(json);
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    cr_assert_eq(st.trace_events, events, "the counts of the stopped trace");
    cr_assert_eq(sf_reader_trace_write(r, path), SF_E_STATE, "the trace ended with the write");

    /* A failed write, then a start: a new trace; the old one is kept until close. */
    cr_assert_eq(sf_reader_trace_start(r, 0), 0, "%s", sf_last_error());
    reader_trace *first = atomic_load(&r->trace);
    cr_assert_eq(sf_reader_trace_write(r, "/nonexistent-dir/x/trace.json"), -ENOENT);
    cr_assert_eq(sf_reader_trace_start(r, 0), 0, "%s", sf_last_error());
    cr_assert_neq(atomic_load(&r->trace), first, "a new trace");
    cr_assert_eq(atomic_load(&r->trace)->prev, first);
    cr_assert_eq(sf_reader_trace_write(r, path), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_trace_write(r, path), SF_E_STATE);
    cr_assert_eq(sf_reader_trace_write(r, NULL), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "path is NULL"), "%s", sf_last_error());
    sf_reader_close(r);
}

/* ---- the verdict rule on constructed stats ---- */

static sf_reader_bottleneck verdict_of(double elapsed, double wait, double dev_wait, double io, double hash,
                                       double enq)
{
    sf_reader_statistics st;
    memset(&st, 0, sizeof st);
    st.batches = 10;
    st.io_threads = 2;
    st.elapsed_seconds = elapsed;
    st.wait_seconds = wait;
    st.device_wait_seconds = dev_wait;
    st.io_seconds = io;
    st.checksum_seconds = hash;
    st.device_enqueue_seconds = enq;
    sf_reader_bottleneck v;
    cr_assert_eq(sf_reader_verdict(&v, &st), 0);
    return v;
}

Test(trace, verdict_rule)
{
    sf_reader_bottleneck v = verdict_of(10, 0.5, 0.2, 3, 1, 0);
    cr_assert_str_eq(v.verdict, "consumer-bound", "waits under 10%%");
    cr_assert_float_eq(v.consumer_wait, 0.05, 1e-9);
    cr_assert_float_eq(v.device_wait, 0.02, 1e-9);
    cr_assert_float_eq(v.io_busy, 0.2, 1e-9);
    cr_assert_float_eq(v.io_share, 0.75, 1e-9);
    cr_assert_float_eq(v.checksum_share, 0.25, 1e-9);
    cr_assert_str_eq(verdict_of(10, 6, 0, 15, 2, 0).verdict, "io-bound");
    cr_assert_str_eq(verdict_of(10, 6, 0, 5, 12, 0).verdict, "checksum-bound");
    cr_assert_str_eq(verdict_of(10, 1, 5, 15, 2, 0).verdict, "copy-bound", "waits for copies");
    cr_assert_str_eq(verdict_of(10, 6, 0, 3, 2, 9).verdict, "copy-bound", "threads enqueuing copies");
    cr_assert_str_eq(verdict_of(10, 0.6, 0.5, 3, 2, 0).verdict, "io-bound", "11%% of waits together");
    /* Image decoding is its own stage: larger than reading, hashing and enqueuing. */
    sf_reader_statistics dec;
    memset(&dec, 0, sizeof dec);
    dec.batches = 10;
    dec.io_threads = 2;
    dec.elapsed_seconds = 10;
    dec.wait_seconds = 6;
    dec.io_seconds = 3;
    dec.checksum_seconds = 1;
    dec.decode_seconds = 12;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "decode-bound");
    cr_assert_float_eq(v.decode_share, 0.75, 1e-9);
    cr_assert_float_eq(v.io_share, 0.1875, 1e-9);
    cr_assert_float_eq(v.io_busy, 0.8, 1e-9);
    dec.decode_seconds = 2;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "io-bound");
    /* I/O threads waiting for slots whose copies queue behind the consumer's
     * device work: the consumer's GPU sets the pace, unless the copies kept
     * the copy engine busy. */
    dec.device_slot_wait_seconds = 9;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "consumer-bound");
    dec.device_copy_seconds = 6;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "copy-bound");
    dec.device_copy_seconds = 4;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "consumer-bound");
    dec.device_slot_wait_seconds = 2.5;
    cr_assert_eq(sf_reader_verdict(&v, &dec), 0);
    cr_assert_str_eq(v.verdict, "io-bound", "reading took longer than the waits for slots");
    sf_reader_statistics none;
    memset(&none, 0, sizeof none);
    cr_assert_eq(sf_reader_verdict(&v, &none), 0);
    cr_assert_str_eq(v.verdict, "none");
    cr_assert_eq(sf_reader_verdict(NULL, &none), SF_E_INVALID);
}

Test(trace, slow_device_copies_are_copy_bound)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 16;
    o.prefetch = 3;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    reader_device_host_set_delay_us(20000);
    const sf_batch *b;
    while (sf_reader_next(&b, r) == 0 && b) {
        cr_assert_eq(sf_batch_wait(r, b), 0);
        sf_reader_release(r, b);
    }
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    sf_reader_bottleneck v;
    sf_reader_verdict(&v, &st);
    cr_assert_str_eq(v.verdict, "copy-bound", "waits: %.3f s for batches, %.3f s for copies, %.3f s elapsed",
                     st.wait_seconds, st.device_wait_seconds, st.elapsed_seconds);
    sf_reader_close(r);
}
