/* shardfeed push DATASET_DIR URL: upload a dataset (S3, or a web server taking PUT), manifest last. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
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

/* The signal that asked the push to stop (sf_push_opts.cancel), or 0, and
 * when it came (CLOCK_MONOTONIC, ms). */
static volatile sig_atomic_t stop_signal;
static volatile long long stop_at_ms;

static long long monotonic_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* async-signal-safe */
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The first signal stops the push. One more within a second is the same
 * stop arriving twice (a terminal's Ctrl-C reaches pack -o URL's packing
 * process directly and once more forwarded by pack), not a second request;
 * a later one kills at once. */
static void on_stop_signal(int sig)
{
    long long now = monotonic_ms();
    if (!stop_signal) {
        stop_at_ms = now;
        stop_signal = sig;
    } else if (now - stop_at_ms >= 1000) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

int cli_push(const char *cmd, const char *dir, const char *url, sf_push_opts *opts, int quiet, int *push_rc)
{
    push_progress progress = {quiet, 0, opts->progress, opts->progress_ctx};
    opts->progress = print_progress;
    opts->progress_ctx = &progress;
    /* SIGINT and the like stop the push rather than kill it: a multipart
     * upload under way is aborted at the store, where a killed push left
     * its parts stored (and billed) until a lifecycle rule removed them. A
     * signal the caller ignores (nohup, a background job) stays ignored. */
    struct sigaction saved[CLI_STOP_SIGNALS];
    stop_signal = 0;
    cli_catch_stop_signals(on_stop_signal, saved);
    opts->cancel = &stop_signal;
    double t0 = now_s();
    int rc = sf_push(dir, url, opts);
    cli_restore_stop_signals(saved);
    if (push_rc)
        *push_rc = rc;
    if (stop_signal) {
        /* Stopped, or the signal came during the manifest's PUT, which is
         * not cut short (a manifest is up whole or not at all): done, then.
         * pack -o URL says what the URL holds itself. */
        char shown[4200];
        if (!strcmp(cmd, "push") && rc == -ECANCELED)
            fprintf(stderr, "shardfeed push: stopped by signal %d: %s (a multipart upload under way, "
                            "if any, was aborted at the store; this run put no manifest)\n",
                    (int)stop_signal, sf_last_error());
        else if (!strcmp(cmd, "push") && rc == 0)
            fprintf(stderr, "shardfeed push: stopped by signal %d after the upload finished: %s "
                            "holds the dataset\n",
                    (int)stop_signal, cli_shown(shown, sizeof shown, url));
        else if (rc && rc != -ECANCELED)
            cli_fail(cmd, rc);
        fflush(NULL);
        raise(stop_signal); /* the handlers are restored: exit as the signal says */
        return EXIT_USAGE;
    }
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
