/* shardfeed push DATASET_DIR URL: upload a dataset (S3, or a web server taking PUT), manifest last. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct push_progress {
    int quiet;
    uint64_t bytes;
    sf_push_progress_fn next; /* the caller's own callback, or NULL */
    void *next_ctx;
} push_progress;

static void print_progress(void *ctx, uint64_t done, uint64_t total, const char *name, uint64_t bytes)
{
    push_progress *p = ctx;
    p->bytes += bytes;
    if (p->next)
        p->next(p->next_ctx, done, total, name, bytes);
    if (p->quiet)
        return;
    char b[32];
    printf("[%llu/%llu] %s (%s)\n", (unsigned long long)done, (unsigned long long)total, name,
           cli_bytes(b, sizeof b, (double)bytes));
    fflush(stdout);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cli_push(const char *cmd, const char *dir, const char *url, sf_push_opts *opts, int quiet, int *push_rc)
{
    push_progress progress = {quiet, 0, opts->progress, opts->progress_ctx};
    opts->progress = print_progress;
    opts->progress_ctx = &progress;
    double t0 = now_s();
    int rc = sf_push(dir, url, opts);
    if (push_rc)
        *push_rc = rc;
    if (rc)
        return cli_fail(cmd, rc);
    if (!quiet) {
        char b[32], shown[4200];
        printf("pushed %s to %s (%s in %.1f s)\n", dir, cli_shown(shown, sizeof shown, url),
               cli_bytes(b, sizeof b, (double)progress.bytes),
               now_s() - t0);
    }
    return EXIT_OK;
}

int cmd_push(int argc, char **argv)
{
    static const struct option longopts[] = {{"part-size", required_argument, NULL, 'p'},
                                             {"multipart-threshold", required_argument, NULL, 't'},
                                             {"retries", required_argument, NULL, 'r'},
                                             {"overwrite", no_argument, NULL, 'w'},
                                             {"quiet", no_argument, NULL, 'q'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    sf_push_opts opts = SF_PUSH_OPTS_INIT;
    int quiet = 0;
    uint64_t v;
    int c;
    static const char short_opts[] = "qh";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        if (c == 'p' || c == 't') {
            if (cli_parse_size(optarg, &v) != 0 || v == 0)
                return cli_usage_error("push", "--%s: '%s' is not a size (e.g. 16MiB)",
                                       c == 'p' ? "part-size" : "multipart-threshold", optarg);
            *(c == 'p' ? &opts.part_size : &opts.multipart_threshold) = v;
        } else if (c == 'r') {
            if (cli_parse_uint(optarg, &v) != 0 || v > 100)
                return cli_usage_error("push", "--retries: '%s' is not a count from 0 to 100", optarg);
            opts.retries = (int)v;
        } else if (c == 'w') {
            opts.overwrite = 1;
        } else if (c == 'q') {
            quiet = 1;
        } else {
            return cli_help_option(c, "push", short_opts, argc, argv);
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("push", "needs DATASET_DIR and a URL (s3://BUCKET/PREFIX or http(s)://...), got %d argument%s",
                               argc - optind, argc - optind == 1 ? "" : "s");
    return cli_push("push", argv[optind], argv[optind + 1], &opts, quiet, NULL);
}
