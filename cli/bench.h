/* shardfeed bench: what its parts share (cmd_bench.c parses and runs,
 * bench_report.c prints). Uses only the library's public headers. */
#ifndef SF_CLI_BENCH_H
#define SF_CLI_BENCH_H

#include <stdint.h>

#include "shardfeed/shardfeed.h"

/* --shuffle and --engine names, indexed by sf_reader_opts.shuffle / .engine. */
extern const char *const BENCH_SHUFFLES[3];
extern const char *const BENCH_ENGINES[4];

#define BENCH_MAX_IMAGES 8

/* What the command line asked for. */
typedef struct bench_args {
    sf_reader_opts o;
    sf_image_opts images[BENCH_MAX_IMAGES]; /* --image: o.images points here */
    sf_remote_opts remote; /* --remote-mode, --cache-dir, --cache-limit: o.remote points here */
    char image_field[BENCH_MAX_IMAGES][64];
    const char *dir;
    uint64_t epochs;
    uint64_t sleep_us; /* --consumer-sleep-us */
    const char *trace; /* --trace FILE, or NULL */
    int json;
} bench_args;

/* What a run measured. */
typedef struct bench_result {
    uint64_t samples, batches, bytes; /* bytes: delivered payload bytes */
    double open_s, seconds, cpu_s;
    long peak_rss_kb;
    sf_reader_statistics st;
    sf_reader_bottleneck vd;
} bench_result;

/* The report as one JSON object on one line (README "shardfeed bench"). */
void bench_print_json(const bench_args *a, const bench_result *res);
/* The report as text for a person. */
void bench_print_text(const bench_args *a, const bench_result *res);

#endif
