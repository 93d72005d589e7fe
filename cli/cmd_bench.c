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
 *        hashing -> checksum-bound, enqueuing device copies -> copy-bound,
 *        decoding images -> decode-bound.
 * --consumer-sleep-us N makes the consumer sleep N us per batch while it
 * holds it (a stand-in for a model step), so a consumer-bound run can be
 * made on purpose; --trace FILE writes a Chrome/Perfetto trace of every
 * batch's stages (sf_reader_trace_start/write). */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"
#include "cli.h"

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

static int parse_choice(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *const BENCH_SHUFFLES[3] = {"none", "global", "block"};
const char *const BENCH_ENGINES[4] = {"auto", "uring", "pread", "mmap"};

enum { O_BATCH = 256, O_EPOCHS, O_SHUFFLE, O_SEED, O_ENGINE, O_DIRECT, O_NOVERIFY, O_PREFETCH,
       O_THREADS, O_QD, O_SKIP, O_JSON, O_DEVICE, O_SLEEP, O_TRACE, O_IMAGE };

static const char *parse_device(sf_reader_opts *o, const char *arg)
{
    uint64_t v;
    if (strcmp(arg, "cpu") == 0) {
        o->device = SF_DEVICE_CPU;
    } else if (strcmp(arg, "host-copy") == 0) {
        o->device = SF_DEVICE_HOST_COPY;
    } else if (strcmp(arg, "cuda") == 0) {
        o->device = SF_DEVICE_CUDA;
    } else if (strncmp(arg, "cuda:", 5) == 0 && !cli_parse_uint(arg + 5, &v) && v < 1024) {
        o->device = SF_DEVICE_CUDA;
        o->device_index = (int)v;
    } else {
        return "--device takes cpu, cuda, cuda:N or host-copy";
    }
    return NULL;
}

/* A number from 1 to max into *out; else `bad`. */
/* A count within the library's bounds for `param` (shardfeed/params.h). */
static const char *parse_count(uint32_t *out, const char *arg, const char *flag, sf_param param)
{
    static char bad[96];
    sf_bounds b;
    uint64_t v;
    sf_param_bounds(&b, param);
    if (cli_parse_uint(arg, &v) || (int64_t)v < b.min || (int64_t)v > b.max) {
        snprintf(bad, sizeof bad, "%s takes a number from %lld to %lld", flag, (long long)b.min,
                 (long long)b.max);
        return bad;
    }
    *out = (uint32_t)v;
    return NULL;
}

/* One modifier of --image after the mode: flip, flip=P, hwc, gray, exact,
 * or a number (center: the resize). */
static int image_modifier(sf_image_opts *im, const char *tok)
{
    uint64_t v;
    if (strcmp(tok, "flip") == 0) {
        im->flip = 0.5;
    } else if (strncmp(tok, "flip=", 5) == 0) {
        char *end;
        im->flip = strtod(tok + 5, &end);
        return *end || !(im->flip >= 0 && im->flip <= 1) ? -1 : 0;
    } else if (strcmp(tok, "hwc") == 0) {
        im->layout = SF_IMAGE_HWC;
    } else if (strcmp(tok, "gray") == 0) {
        im->channels = 1;
    } else if (strcmp(tok, "exact") == 0) {
        im->exact = 1;
    } else if (im->mode == SF_IMAGE_CENTER_CROP && !cli_parse_uint(tok, &v) && v && v <= 65535) {
        im->resize = (uint32_t)v;
    } else {
        return -1;
    }
    return 0;
}

/* --image FIELD=MODE[:SIZE][:modifier...] (README "Images"): the field's
 * transform into the next free a->images entry. */
static const char *parse_image(bench_args *a, const char *arg)
{
    static const char *const bad = "--image takes FIELD=rrc:SIZE[:flip], FIELD=center:SIZE[:RESIZE] "
                                   "or FIELD=decode, each with optional :hwc, :gray, :exact, :flip=P";
    const char *eq = strchr(arg, '=');
    uint32_t i = a->o.num_images;
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof a->image_field[0])
        return bad;
    if (i == BENCH_MAX_IMAGES)
        return "--image: at most 8 fields";
    sf_image_opts *im = &a->images[i];
    *im = (sf_image_opts)SF_IMAGE_OPTS_INIT;
    memcpy(a->image_field[i], arg, (size_t)(eq - arg));
    a->image_field[i][eq - arg] = 0;
    im->field = a->image_field[i];
    char spec[128];
    if (strlen(eq + 1) >= sizeof spec)
        return bad;
    strcpy(spec, eq + 1);
    char *save = NULL, *tok = strtok_r(spec, ":", &save);
    static const char *const modes[] = {"none", "decode", "rrc", "center"};
    im->mode = tok ? parse_choice(tok, modes, 4) : -1;
    if (im->mode <= 0)
        return bad;
    if (im->mode != SF_IMAGE_DECODE) {
        uint64_t v;
        tok = strtok_r(NULL, ":", &save);
        if (!tok || cli_parse_uint(tok, &v) || v == 0 || v > 65535)
            return bad;
        im->height = im->width = (uint32_t)v;
    }
    while ((tok = strtok_r(NULL, ":", &save)))
        if (image_modifier(im, tok))
            return bad;
    a->o.images = a->images;
    a->o.num_images = i + 1;
    return NULL;
}

/* Applies option `c` (with `arg`) to `a`: NULL, or what is wrong with it. */
static const char *bench_option(bench_args *a, int c, const char *arg)
{
    sf_reader_opts *o = &a->o;
    switch (c) {
    case O_BATCH:
        return parse_count(&o->batch_size, arg, "--batch-size", SF_PARAM_READER_BATCH_SIZE);
    case O_EPOCHS:
        return cli_parse_uint(arg, &a->epochs) || a->epochs == 0 ? "--epochs takes a positive number" : NULL;
    case O_SHUFFLE:
        o->shuffle = parse_choice(arg, BENCH_SHUFFLES, 3);
        return o->shuffle < 0 ? "--shuffle takes none, global or block" : NULL;
    case O_SEED:
        return cli_parse_uint(arg, &o->seed) ? "--seed takes a non-negative number" : NULL;
    case O_ENGINE:
        o->engine = parse_choice(arg, BENCH_ENGINES, 4);
        return o->engine < 0 ? "--engine takes auto, uring, pread or mmap" : NULL;
    case O_DIRECT: o->direct = SF_DIRECT_ON; return NULL;
    case O_NOVERIFY: o->verify = SF_VERIFY_OFF; return NULL;
    case O_SKIP: o->on_corrupt = SF_ON_CORRUPT_SKIP; return NULL;
    case O_PREFETCH:
        return parse_count(&o->prefetch, arg, "--prefetch", SF_PARAM_READER_PREFETCH);
    case O_THREADS:
        return parse_count(&o->io_threads, arg, "--threads", SF_PARAM_READER_IO_THREADS);
    case O_QD:
        return parse_count(&o->queue_depth, arg, "--queue-depth", SF_PARAM_READER_QUEUE_DEPTH);
    case O_JSON: a->json = 1; return NULL;
    case O_SLEEP:
        return cli_parse_uint(arg, &a->sleep_us) || a->sleep_us > 60000000
                   ? "--consumer-sleep-us takes a number of microseconds up to 60000000"
                   : NULL;
    case O_TRACE:
        a->trace = arg;
        return *arg ? NULL : "--trace takes a file name";
    case O_DEVICE:
        return parse_device(o, arg);
    case O_IMAGE:
        return parse_image(a, arg);
    }
    assert(!"bench_option: an option getopt_long does not return");
    return NULL;
}

/* bench_parse's result when the command line asks for a run. */
#define BENCH_PARSED (-1)

/* The command line into *a: BENCH_PARSED, or the exit status after --help
 * or a usage error (which it prints). */
static int bench_parse(bench_args *a, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"batch-size", required_argument, NULL, O_BATCH}, {"epochs", required_argument, NULL, O_EPOCHS},
        {"shuffle", required_argument, NULL, O_SHUFFLE},  {"seed", required_argument, NULL, O_SEED},
        {"engine", required_argument, NULL, O_ENGINE},    {"direct", no_argument, NULL, O_DIRECT},
        {"no-verify", no_argument, NULL, O_NOVERIFY},     {"prefetch", required_argument, NULL, O_PREFETCH},
        {"threads", required_argument, NULL, O_THREADS},  {"queue-depth", required_argument, NULL, O_QD},
        {"skip-corrupt", no_argument, NULL, O_SKIP},      {"json", no_argument, NULL, O_JSON},
        {"device", required_argument, NULL, O_DEVICE},
        {"consumer-sleep-us", required_argument, NULL, O_SLEEP}, {"trace", required_argument, NULL, O_TRACE},
        {"image", required_argument, NULL, O_IMAGE},      CLI_REMOTE_LONGOPTS,
        {"help", no_argument, NULL, 'h'},                 {NULL, 0, NULL, 0}};
    *a = (bench_args){.o = SF_READER_OPTS_INIT, .epochs = 1, .remote = SF_REMOTE_OPTS_INIT};
    a->o.remote = &a->remote;
    a->o.batch_size = SF_READER_DEFAULT_BATCH;
    int c;
    static const char short_opts[] = "h";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        if (c == 'h' || c == '?')
            return cli_help_option(c, "bench", short_opts, argc, argv);
        const char *bad = cli_is_remote_option(c) ? cli_remote_option(&a->remote, c, optarg)
                                                  : bench_option(a, c, optarg);
        if (bad) {
            fprintf(stderr, "shardfeed bench: %s\n", bad);
            return EXIT_USAGE;
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("bench", optind == argc ? "no DATASET_DIR given" : "one DATASET_DIR, not %d",
                               argc - optind);
    a->dir = argv[optind];
    return BENCH_PARSED;
}

/* Every batch of every epoch, as a consumer would take them: 0 or the
 * error that stopped it. */
static int bench_loop(bench_result *res, sf_reader *r, const bench_args *a)
{
    int rc = 0;
    for (uint64_t e = 0; e < a->epochs && !rc; e++) {
        sf_reader_set_epoch(r, e);
        const sf_batch *b;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            res->samples += b->size;
            res->batches++;
            for (uint32_t f = 0; f < b->num_fields; f++)
                if (b->fields[f].storage != SF_STORAGE_INLINE)
                    res->bytes += b->fields[f].bytes;
            /* A device consumer uses the batch once its copy is done. */
            if (b->device != SF_DEVICE_CPU && (rc = sf_batch_wait(r, b)) != 0) {
                sf_reader_release(r, b);
                break;
            }
            if (a->sleep_us)
                sleep_us(a->sleep_us); /* the model step */
            sf_reader_release(r, b);
        }
    }
    return rc;
}

/* Trace of every batch, and of the read-ahead past the last one. */
static int bench_trace_start(sf_reader *r, const bench_args *a)
{
    sf_reader_statistics st;
    sf_reader_stats(&st, r); /* the slots: as given, or as the reader chose */
    uint64_t want = a->epochs * sf_reader_num_batches(r) + st.prefetch;
    return sf_reader_trace_start(r, want);
}

/* Opens the reader into *rp, reads, and measures into *res: EXIT_OK, or the
 * exit status of the error it printed. The caller closes *rp
 * (after printing: the stats' strings are the reader's). The clocks start
 * before the open (open_s, cpu_s) and around the loop (seconds). */
static int bench_run(bench_result *res, sf_reader **rp, const bench_args *a)
{
    *res = (bench_result){0};
    double t_open = now_s(), cpu0 = cpu_s();
    int rc = sf_reader_open(rp, a->dir, &a->o);
    if (rc)
        return cli_fail("bench", rc);
    sf_reader *r = *rp;
    if (a->trace && (rc = bench_trace_start(r, a))) {
        cli_error("bench", rc);
        return EXIT_USAGE;
    }
    double t0 = now_s();
    res->open_s = t0 - t_open;
    rc = bench_loop(res, r, a);
    res->seconds = now_s() - t0;
    if (rc)
        return cli_fail("bench", rc);
    if (a->trace && (rc = sf_reader_trace_write(r, a->trace))) {
        cli_error("bench", rc);
        return EXIT_USAGE;
    }
    sf_reader_stats(&res->st, r);
    sf_reader_verdict(&res->vd, &res->st);
    res->cpu_s = cpu_s() - cpu0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    res->peak_rss_kb = ru.ru_maxrss;
    return EXIT_OK;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    int status = bench_parse(&a, argc, argv);
    if (status != BENCH_PARSED)
        return status;
    bench_result res;
    sf_reader *r = NULL;
    status = bench_run(&res, &r, &a);
    if (status == EXIT_OK && a.json)
        bench_print_json(&a, &res);
    else if (status == EXIT_OK)
        bench_print_text(&a, &res);
    sf_reader_close(r);
    return status;
}
