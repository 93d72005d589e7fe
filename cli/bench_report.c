/* shardfeed bench's report of a run: one line of JSON (--json) or text
 * (throughput, what the reader ran with, where the time went, the verdict
 * and what it means). */
#include <string.h>

#include "bench.h"
#include "cli.h"

/* One line on what the verdict means, for the text output. */
static const char *verdict_hint(const char *v)
{
    if (strcmp(v, "consumer-bound") == 0)
        return "batches were ready when the consumer asked: its own work per batch sets the pace";
    if (strcmp(v, "io-bound") == 0)
        return "the consumer waited for batches; the I/O threads spent most of their time reading";
    if (strcmp(v, "checksum-bound") == 0)
        return "the consumer waited for batches; the I/O threads spent most of their time hashing "
               "records (--no-verify trades that for integrity; more --threads spread it)";
    if (strcmp(v, "copy-bound") == 0)
        return "the consumer waited for device copies more than for batches";
    if (strcmp(v, "decode-bound") == 0)
        return "the consumer waited for batches; the I/O threads spent most of their time decoding "
               "images (more --threads, smaller images: pack --image-max-side)";
    return "no batch was delivered";
}

static double samples_per_s(const bench_result *res)
{
    return res->seconds > 0 ? (double)res->samples / res->seconds : 0;
}

static double gb_per_s(const bench_result *res)
{
    return res->seconds > 0 ? (double)res->bytes / res->seconds / 1e9 : 0;
}

/* Throughput, CPU, memory and the reader's time, as JSON members. */
static void json_measurements(const bench_result *res)
{
    const sf_reader_statistics *st = &res->st;
    printf(",\"samples_per_s\":%.1f,\"gb_per_s\":%.3f,\"cpu_s\":%.3f,\"peak_rss_kb\":%ld,"
           "\"seconds\":%.6f,\"open_seconds\":%.6f,\"samples\":%llu,\"batches\":%llu,"
           "\"bytes\":%llu,\"bytes_read\":%llu,\"wait_s\":%.6f,\"io_thread_s\":%.6f,\"checksum_thread_s\":%.6f,"
           "\"decode_thread_s\":%.6f,\"corrupt_substitutions\":%llu,",
           samples_per_s(res), gb_per_s(res), res->cpu_s, res->peak_rss_kb, res->seconds, res->open_s,
           (unsigned long long)res->samples, (unsigned long long)res->batches,
           (unsigned long long)res->bytes, (unsigned long long)st->bytes_read, st->wait_seconds,
           st->io_seconds, st->checksum_seconds, st->decode_seconds,
           (unsigned long long)st->corrupt_substitutions);
}

/* The verdict and the fractions it came from, as JSON members. */
static void json_verdict(const bench_result *res)
{
    const sf_reader_statistics *st = &res->st;
    const sf_reader_bottleneck *vd = &res->vd;
    printf("\"elapsed_s\":%.6f,\"device_enqueue_s\":%.6f,\"device_wait_s\":%.6f,"
           "\"device_slot_wait_s\":%.6f,"
           "\"device_copy_bytes\":%llu,\"device_copy_s\":%.6f,\"device_stream_wait_s\":%.6f,"
           "\"verdict\":\"%s\",\"fractions\":{\"consumer_wait\":%.4f,\"device_wait\":%.4f,"
           "\"io_busy\":%.4f,\"io_share\":%.4f,\"checksum_share\":%.4f,\"copy_share\":%.4f,"
           "\"decode_share\":%.4f},",
           st->elapsed_seconds, st->device_enqueue_seconds, st->device_wait_seconds,
           st->device_slot_wait_seconds, (unsigned long long)st->device_copy_bytes,
           st->device_copy_seconds, st->device_stream_wait_seconds, vd->verdict,
           vd->consumer_wait, vd->device_wait, vd->io_busy, vd->io_share, vd->checksum_share,
           vd->copy_share, vd->decode_share);
}

static void json_trace(const bench_args *a, const bench_result *res)
{
    if (a->trace) {
        printf("\"trace\":{\"path\":");
        cli_json_string(stdout, a->trace);
        printf(",\"records\":%llu,\"dropped\":%llu},", (unsigned long long)res->st.trace_events,
               (unsigned long long)res->st.trace_dropped);
    } else {
        printf("\"trace\":null,");
    }
}

/* What was asked for and what the reader ran with, as the last member. */
static void json_options(const bench_args *a, const bench_result *res)
{
    const sf_reader_statistics *st = &res->st;
    const sf_reader_opts *o = &a->o;
    printf("\"options\":{\"batch_size\":%u,\"epochs\":%llu,\"shuffle\":\"%s\",\"seed\":%llu,"
           "\"engine\":\"%s\",\"engine_requested\":\"%s\",\"direct\":%s,\"direct_reason\":\"%s\","
           "\"verify\":%s,"
           "\"on_corrupt\":\"%s\",\"prefetch\":%u,\"io_threads\":%u,\"queue_depth\":%u,"
           "\"registered_bytes\":%llu,\"slab_bytes\":%llu,\"device\":\"%s\",\"device_bytes\":%llu,"
           "\"consumer_sleep_us\":%llu}",
           o->batch_size, (unsigned long long)a->epochs, BENCH_SHUFFLES[o->shuffle],
           (unsigned long long)o->seed, st->engine, BENCH_ENGINES[o->engine], st->direct ? "true" : "false",
           st->direct_reason,
           o->verify == SF_VERIFY_ON ? "true" : "false",
           o->on_corrupt == SF_ON_CORRUPT_SKIP ? "skip" : "error", st->prefetch, st->io_threads,
           st->queue_depth, (unsigned long long)st->registered_bytes,
           (unsigned long long)st->slab_bytes, st->device, (unsigned long long)st->device_bytes,
           (unsigned long long)a->sleep_us);
}

void bench_print_json(const bench_args *a, const bench_result *res)
{
    printf("{\"dataset\":");
    cli_json_string(stdout, a->dir);
    json_measurements(res);
    json_verdict(res);
    json_trace(a, res);
    json_options(a, res);
    printf("}\n");
}

/* Throughput, what the reader ran with and where the time went. */
static void bench_print_text_summary(const bench_args *a, const bench_result *res)
{
    const sf_reader_statistics *st = &res->st;
    char b1[32], b2[32];
    printf("%s: %llu samples in %llu batches, %llu epoch(s), %.3f s (open %.3f s)\n", a->dir,
           (unsigned long long)res->samples, (unsigned long long)res->batches,
           (unsigned long long)a->epochs, res->seconds, res->open_s);
    printf("  %.0f samples/s, %.3f GB/s (%s delivered), CPU %.2f s (%.0f%% of one core), peak RSS %ld KiB\n",
           samples_per_s(res), gb_per_s(res), cli_bytes(b1, sizeof b1, (double)res->bytes), res->cpu_s,
           res->seconds > 0 ? 100 * res->cpu_s / res->seconds : 0, res->peak_rss_kb);
    printf("  engine %s%s, %u I/O threads, queue depth %u, prefetch %u, slab %s%s\n", st->engine,
           st->direct ? " O_DIRECT" : "", st->io_threads, st->queue_depth, st->prefetch,
           cli_bytes(b2, sizeof b2, (double)st->slab_bytes),
           st->registered_bytes == st->slab_bytes ? ", registered"
           : st->registered_bytes ? ", partly registered" : "");
    printf("  direct %s\n", st->direct_reason);
    printf("  consumer waited %.3f s; I/O threads: %.3f s reading, %.3f s checksumming%s", st->wait_seconds,
           st->io_seconds, st->checksum_seconds, a->o.verify == SF_VERIFY_ON ? "" : " (verify off)");
    if (a->o.num_images)
        printf(", %.3f s decoding images", st->decode_seconds);
    printf("\n");
    if (st->corrupt_substitutions)
        printf("  %llu corrupt sample(s) substituted\n", (unsigned long long)st->corrupt_substitutions);
    if (a->o.device != SF_DEVICE_CPU)
        printf("  delivered to %s: %s of device memory, allocated once; copies: %.3f s enqueuing "
               "and %.3f s waiting for slots' last copies (I/O threads), consumer waited %.3f s "
               "for them\n",
               st->device, cli_bytes(b2, sizeof b2, (double)st->device_bytes),
               st->device_enqueue_seconds, st->device_slot_wait_seconds, st->device_wait_seconds);
    if (a->o.device != SF_DEVICE_CPU)
        printf("  host to device: %s copied in %.3f s of device time; consumers' streams waited "
               "%.3f s for copies\n",
               cli_bytes(b2, sizeof b2, (double)st->device_copy_bytes), st->device_copy_seconds,
               st->device_stream_wait_seconds);
    if (a->sleep_us)
        printf("  consumer slept %llu us per batch (--consumer-sleep-us)\n", (unsigned long long)a->sleep_us);
}

/* The verdict, the fractions it came from, and the trace file. */
static void bench_print_text_verdict(const bench_args *a, const bench_result *res)
{
    const sf_reader_bottleneck *vd = &res->vd;
    const sf_reader_statistics *st = &res->st;
    printf("  verdict: %s: %s\n", vd->verdict, verdict_hint(vd->verdict));
    printf("    consumer waited %.1f%% of the time for batches and %.1f%% for copies (consumer-bound "
           "below %.0f%% together); I/O threads busy %.1f%%: reading %.1f%%, hashing %.1f%%, "
           "enqueuing copies %.1f%%, decoding images %.1f%%\n",
           100 * vd->consumer_wait, 100 * vd->device_wait, 100 * SF_VERDICT_STALL_MAX, 100 * vd->io_busy,
           100 * vd->io_share, 100 * vd->checksum_share, 100 * vd->copy_share, 100 * vd->decode_share);
    if ((strcmp(vd->verdict, "io-bound") == 0 || strcmp(vd->verdict, "checksum-bound") == 0 ||
         strcmp(vd->verdict, "decode-bound") == 0) &&
        vd->io_busy < 0.5)
        printf("    (the I/O threads idled half the time while the consumer waited: more --prefetch "
               "or --threads may help more than faster storage)\n");
    if (a->trace)
        printf("  trace: %s (%llu records%s%llu dropped: a trace holds at most %u batches and %u "
               "spans); open it in https://ui.perfetto.dev\n",
               a->trace, (unsigned long long)st->trace_events, st->trace_dropped ? "; " : ", ",
               (unsigned long long)st->trace_dropped, SF_TRACE_MAX_BATCHES, SF_TRACE_MAX_SPANS);
}

void bench_print_text(const bench_args *a, const bench_result *res)
{
    bench_print_text_summary(a, res);
    bench_print_text_verdict(a, res);
}
