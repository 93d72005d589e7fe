/* shardfeed bench: streams a dataset through the public reader API and
 * reports throughput, CPU and memory, where the time went, and which stage
 * is the bottleneck.
 *
 * The verdict is sf_reader_verdict's (shardfeed/reader.h), from the
 * reader's stats over the loop:
 *   stall = (time the consumer waited in sf_reader_next + time it waited for
 *            device copies) / elapsed time;
 *   stall < 10%                                  -> consumer-bound
 *   else copy waits > batch waits                -> copy-bound
 *   else the I/O threads' largest share of time: reading -> io-bound,
 *        hashing -> checksum-bound, enqueuing device copies -> copy-bound.
 * --consumer-sleep-us N makes the consumer sleep N us per batch while it
 * holds it (a stand-in for a model step), so a consumer-bound run can be
 * made on purpose; --trace FILE writes a Chrome/Perfetto trace of every
 * batch's stages (sf_reader_trace_start/write). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"

#define BENCH_USAGE                                                                                \
    "usage: shardfeed bench DATASET_DIR [--batch-size N] [--epochs N]\n"                          \
    "           [--shuffle none|global|block] [--seed S] [--engine auto|uring|pread|mmap]\n"      \
    "           [--direct] [--no-verify] [--prefetch K] [--threads N] [--queue-depth N]\n"        \
    "           [--skip-corrupt] [--device cpu|cuda[:N]|host-copy] [--json]\n"                  \
    "           [--consumer-sleep-us N] [--trace FILE]\n"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

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
    return "no batch was delivered";
}

static int parse_choice(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

int cmd_bench(int argc, char **argv)
{
    enum { O_BATCH = 256, O_EPOCHS, O_SHUFFLE, O_SEED, O_ENGINE, O_DIRECT, O_NOVERIFY, O_PREFETCH,
           O_THREADS, O_QD, O_SKIP, O_JSON, O_DEVICE, O_SLEEP, O_TRACE };
    static const struct option longopts[] = {
        {"batch-size", required_argument, NULL, O_BATCH}, {"epochs", required_argument, NULL, O_EPOCHS},
        {"shuffle", required_argument, NULL, O_SHUFFLE},  {"seed", required_argument, NULL, O_SEED},
        {"engine", required_argument, NULL, O_ENGINE},    {"direct", no_argument, NULL, O_DIRECT},
        {"no-verify", no_argument, NULL, O_NOVERIFY},     {"prefetch", required_argument, NULL, O_PREFETCH},
        {"threads", required_argument, NULL, O_THREADS},  {"queue-depth", required_argument, NULL, O_QD},
        {"skip-corrupt", no_argument, NULL, O_SKIP},      {"json", no_argument, NULL, O_JSON},
        {"device", required_argument, NULL, O_DEVICE},
        {"consumer-sleep-us", required_argument, NULL, O_SLEEP}, {"trace", required_argument, NULL, O_TRACE},
        {"help", no_argument, NULL, 'h'},                 {NULL, 0, NULL, 0}};
    static const char *const shuffles[] = {"none", "global", "block"};
    static const char *const engines[] = {"auto", "uring", "pread", "mmap"};
    sf_reader_opts o = SF_READER_OPTS_INIT;
    uint64_t epochs = 1, v, sleep = 0;
    const char *trace = NULL;
    int json = 0, c;
    o.batch_size = SF_READER_DEFAULT_BATCH;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case O_BATCH:
            if (cli_parse_uint(optarg, &v) || v == 0 || v > (1u << 24))
                bad = "--batch-size takes a number from 1 to 16777216";
            else
                o.batch_size = (uint32_t)v;
            break;
        case O_EPOCHS:
            if (cli_parse_uint(optarg, &epochs) || epochs == 0)
                bad = "--epochs takes a positive number";
            break;
        case O_SHUFFLE:
            if ((o.shuffle = parse_choice(optarg, shuffles, 3)) < 0)
                bad = "--shuffle takes none, global or block";
            break;
        case O_SEED:
            if (cli_parse_uint(optarg, &o.seed))
                bad = "--seed takes a non-negative number";
            break;
        case O_ENGINE:
            if ((o.engine = parse_choice(optarg, engines, 4)) < 0)
                bad = "--engine takes auto, uring, pread or mmap";
            break;
        case O_DIRECT: o.direct = SF_DIRECT_ON; break;
        case O_NOVERIFY: o.verify = SF_VERIFY_OFF; break;
        case O_SKIP: o.on_corrupt = SF_ON_CORRUPT_SKIP; break;
        case O_PREFETCH:
            if (cli_parse_uint(optarg, &v) || v == 0 || v > 1024)
                bad = "--prefetch takes a number from 1 to 1024";
            else
                o.prefetch = (uint32_t)v;
            break;
        case O_THREADS:
            if (cli_parse_uint(optarg, &v) || v == 0 || v > 256)
                bad = "--threads takes a number from 1 to 256";
            else
                o.io_threads = (uint32_t)v;
            break;
        case O_QD:
            if (cli_parse_uint(optarg, &v) || v == 0 || v > 4096)
                bad = "--queue-depth takes a number from 1 to 4096";
            else
                o.queue_depth = (uint32_t)v;
            break;
        case O_JSON: json = 1; break;
        case O_SLEEP:
            if (cli_parse_uint(optarg, &sleep) || sleep > 60000000)
                bad = "--consumer-sleep-us takes a number of microseconds up to 60000000";
            break;
        case O_TRACE:
            if (!*optarg)
                bad = "--trace takes a file name";
            trace = optarg;
            break;
        case O_DEVICE:
            if (strcmp(optarg, "cpu") == 0) {
                o.device = SF_DEVICE_CPU;
            } else if (strcmp(optarg, "host-copy") == 0) {
                o.device = SF_DEVICE_HOST_COPY;
            } else if (strcmp(optarg, "cuda") == 0) {
                o.device = SF_DEVICE_CUDA;
            } else if (strncmp(optarg, "cuda:", 5) == 0 && !cli_parse_uint(optarg + 5, &v) && v < 1024) {
                o.device = SF_DEVICE_CUDA;
                o.device_index = (int)v;
            } else {
                bad = "--device takes cpu, cuda, cuda:N or host-copy";
            }
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    BENCH_USAGE "Reads every batch of every epoch through the reader (checksums on\n"
                                "unless --no-verify) and reports samples/s, GB/s, CPU seconds and peak\n"
                                "RSS, how the time split between waiting, I/O, checksums and device\n"
                                "copies, and a verdict: io-bound, checksum-bound, copy-bound or\n"
                                "consumer-bound (the rule: see README, \"Finding the bottleneck\").\n"
                                "  --consumer-sleep-us N  the consumer sleeps N us per batch (a model step)\n"
                                "  --trace FILE           write a Chrome/Perfetto trace of every batch's\n"
                                "                         stages (ui.perfetto.dev; at most 65536 batches)\n");
            return c == 'h' ? EXIT_OK : EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "shardfeed bench: %s\n", bad);
            return EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, BENCH_USAGE);
        return EXIT_USAGE;
    }
    const char *dir = argv[optind];
    double t_open = now_s(), cpu0 = cpu_s();
    sf_reader *r = NULL;
    int rc = sf_reader_open(&r, dir, &o);
    if (rc)
        return cli_fail("bench", rc);
    if (trace) {
        /* every batch, and the read-ahead past the last one */
        uint64_t want = epochs * sf_reader_num_batches(r) + (o.prefetch ? o.prefetch : SF_READER_DEFAULT_PREFETCH);
        if ((rc = sf_reader_trace_start(r, want))) {
            cli_error("bench", rc);
            sf_reader_close(r);
            return EXIT_USAGE;
        }
    }
    double t0 = now_s(), open_s = t0 - t_open;
    uint64_t samples = 0, batches = 0, bytes = 0; /* delivered payload bytes */
    for (uint64_t e = 0; e < epochs && !rc; e++) {
        sf_reader_set_epoch(r, e);
        const sf_batch *b;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            samples += b->size;
            batches++;
            for (uint32_t f = 0; f < b->num_fields; f++)
                if (b->fields[f].storage != SF_STORAGE_INLINE)
                    bytes += b->fields[f].bytes;
            /* A device consumer uses the batch once its copy is done. */
            if (b->device != SF_DEVICE_CPU && (rc = sf_batch_wait(r, b)) != 0) {
                sf_reader_release(r, b);
                break;
            }
            if (sleep)
                sleep_us(sleep); /* the model step */
            sf_reader_release(r, b);
        }
    }
    double seconds = now_s() - t0;
    if (rc) {
        int status = cli_fail("bench", rc);
        sf_reader_close(r);
        return status;
    }
    if (trace && (rc = sf_reader_trace_write(r, trace))) {
        cli_error("bench", rc);
        sf_reader_close(r);
        return EXIT_USAGE;
    }
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    sf_reader_bottleneck vd;
    sf_reader_verdict(&vd, &st);
    double cpu = cpu_s() - cpu0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double sps = seconds > 0 ? (double)samples / seconds : 0;
    double gbps = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
    if (json) {
        printf("{\"dataset\":");
        cli_json_string(stdout, dir);
        printf(",\"samples_per_s\":%.1f,\"gb_per_s\":%.3f,\"cpu_s\":%.3f,\"peak_rss_kb\":%ld,"
               "\"seconds\":%.6f,\"open_seconds\":%.6f,\"samples\":%llu,\"batches\":%llu,"
               "\"bytes\":%llu,\"bytes_read\":%llu,\"wait_s\":%.6f,\"io_thread_s\":%.6f,\"checksum_thread_s\":%.6f,"
               "\"corrupt_substitutions\":%llu,",
               sps, gbps, cpu, ru.ru_maxrss, seconds, open_s, (unsigned long long)samples,
               (unsigned long long)batches, (unsigned long long)bytes,
               (unsigned long long)st.bytes_read, st.wait_seconds,
               st.io_seconds, st.checksum_seconds, (unsigned long long)st.corrupt_substitutions);
        printf("\"elapsed_s\":%.6f,\"device_enqueue_s\":%.6f,\"device_wait_s\":%.6f,"
               "\"verdict\":\"%s\",\"fractions\":{\"consumer_wait\":%.4f,\"device_wait\":%.4f,"
               "\"io_busy\":%.4f,\"io_share\":%.4f,\"checksum_share\":%.4f,\"copy_share\":%.4f},",
               st.elapsed_seconds, st.device_enqueue_seconds, st.device_wait_seconds, vd.verdict,
               vd.consumer_wait, vd.device_wait, vd.io_busy, vd.io_share, vd.checksum_share,
               vd.copy_share);
        if (trace) {
            printf("\"trace\":{\"path\":");
            cli_json_string(stdout, trace);
            printf(",\"records\":%llu,\"dropped\":%llu},", (unsigned long long)st.trace_events,
                   (unsigned long long)st.trace_dropped);
        } else {
            printf("\"trace\":null,");
        }
        printf("\"options\":{\"batch_size\":%u,\"epochs\":%llu,\"shuffle\":\"%s\",\"seed\":%llu,"
               "\"engine\":\"%s\",\"engine_requested\":\"%s\",\"direct\":%s,\"verify\":%s,"
               "\"on_corrupt\":\"%s\",\"prefetch\":%u,\"io_threads\":%u,\"queue_depth\":%u,"
               "\"registered_bytes\":%llu,\"slab_bytes\":%llu,\"device\":\"%s\",\"device_bytes\":%llu,"
               "\"consumer_sleep_us\":%llu}}\n",
               o.batch_size, (unsigned long long)epochs, shuffles[o.shuffle],
               (unsigned long long)o.seed, st.engine, engines[o.engine], st.direct ? "true" : "false",
               o.verify == SF_VERIFY_ON ? "true" : "false",
               o.on_corrupt == SF_ON_CORRUPT_SKIP ? "skip" : "error", st.prefetch, st.io_threads,
               st.queue_depth, (unsigned long long)st.registered_bytes,
               (unsigned long long)st.slab_bytes, st.device, (unsigned long long)st.device_bytes,
               (unsigned long long)sleep);
    } else {
        char b1[32], b2[32];
        printf("%s: %llu samples in %llu batches, %llu epoch(s), %.3f s (open %.3f s)\n", dir,
               (unsigned long long)samples, (unsigned long long)batches, (unsigned long long)epochs,
               seconds, open_s);
        printf("  %.0f samples/s, %.3f GB/s (%s delivered), CPU %.2f s (%.0f%% of one core), peak RSS %ld KiB\n",
               sps, gbps, cli_bytes(b1, sizeof b1, (double)bytes), cpu,
               seconds > 0 ? 100 * cpu / seconds : 0, ru.ru_maxrss);
        printf("  engine %s%s, %u I/O threads, queue depth %u, prefetch %u, slab %s%s\n", st.engine,
               st.direct ? " O_DIRECT" : "", st.io_threads, st.queue_depth, st.prefetch,
               cli_bytes(b2, sizeof b2, (double)st.slab_bytes),
               st.registered_bytes == st.slab_bytes ? ", registered"
               : st.registered_bytes ? ", partly registered" : "");
        printf("  consumer waited %.3f s; I/O threads: %.3f s reading, %.3f s checksumming%s\n",
               st.wait_seconds, st.io_seconds, st.checksum_seconds,
               o.verify == SF_VERIFY_ON ? "" : " (verify off)");
        if (st.corrupt_substitutions)
            printf("  %llu corrupt sample(s) substituted\n", (unsigned long long)st.corrupt_substitutions);
        if (o.device != SF_DEVICE_CPU)
            printf("  delivered to %s: %s of device memory, allocated once; copies: %.3f s enqueuing "
                   "(I/O threads), consumer waited %.3f s for them\n",
                   st.device, cli_bytes(b2, sizeof b2, (double)st.device_bytes),
                   st.device_enqueue_seconds, st.device_wait_seconds);
        if (sleep)
            printf("  consumer slept %llu us per batch (--consumer-sleep-us)\n", (unsigned long long)sleep);
        printf("  verdict: %s: %s\n", vd.verdict, verdict_hint(vd.verdict));
        printf("    consumer waited %.1f%% of the time for batches and %.1f%% for copies (consumer-bound "
               "below %.0f%% together); I/O threads busy %.1f%%: reading %.1f%%, hashing %.1f%%, "
               "enqueuing copies %.1f%%\n",
               100 * vd.consumer_wait, 100 * vd.device_wait, 100 * SF_VERDICT_STALL_MAX, 100 * vd.io_busy,
               100 * vd.io_share, 100 * vd.checksum_share, 100 * vd.copy_share);
        if ((strcmp(vd.verdict, "io-bound") == 0 || strcmp(vd.verdict, "checksum-bound") == 0) &&
            vd.io_busy < 0.5)
            printf("    (the I/O threads idled half the time while the consumer waited: more --prefetch "
                   "or --threads may help more than faster storage)\n");
        if (trace)
            printf("  trace: %s (%llu records%s%llu dropped: a trace holds at most %u batches and %u "
                   "spans); open it in https://ui.perfetto.dev\n",
                   trace, (unsigned long long)st.trace_events, st.trace_dropped ? "; " : ", ",
                   (unsigned long long)st.trace_dropped, SF_TRACE_MAX_BATCHES, SF_TRACE_MAX_SPANS);
    }
    sf_reader_close(r);
    return EXIT_OK;
}
