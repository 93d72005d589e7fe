#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct progress {
    double start; /* of the stage drawn */
} progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A progress bar with rate and ETA, redrawn in place on a terminal; `what`
 * names the counted samples. */
static void draw(progress *p, uint64_t done, uint64_t total, uint64_t bytes, const char *what)
{
    double el = now_s() - p->start, frac = total ? (double)done / (double)total : 1.0;
    char bar[31], b[32], eta[32] = "--:--";
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    if (done > 0 && done < total) {
        long left = (long)(el / frac - el + 0.5);
        snprintf(eta, sizeof eta, "%ld:%02ld", left / 60, left % 60);
    } else if (done == total) {
        snprintf(eta, sizeof eta, "0:00");
    }
    fprintf(stderr, "\r[%s] %3.0f%%  %llu/%llu %s  %s/s  ETA %s   ", bar, 100.0 * frac,
            (unsigned long long)done, (unsigned long long)total, what,
            cli_bytes(b, sizeof b, el > 0 ? (double)bytes / el : 0), eta);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    draw(ctx, done, total, bytes, "samples");
}

/* The pre-pass of --image-max-side: every image decoded before the plan. */
static void on_image_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    progress *p = ctx;
    draw(p, done, total, bytes, "samples' images checked (--image-max-side)");
    if (done == total) /* the writing follows: its own rate and ETA */
        p->start = now_s();
}

static int parse_part(const char *s, uint32_t *k, uint32_t *n)
{
    char *end;
    unsigned long a = strtoul(s, &end, 10);
    if (end == s || *end != '/')
        return -1;
    const char *t = end + 1;
    unsigned long b = strtoul(t, &end, 10);
    if (end == t || *end || b == 0 || b > SF_PACK_MAX_PARTS || a >= b)
        return -1;
    *k = (uint32_t)a;
    *n = (uint32_t)b;
    return 0;
}

/* K and N from the launcher's environment; 0 when none says so. */
static int part_from_env(uint32_t *k, uint32_t *n, const char **from)
{
    static const char *const vars[][2] = {{"SLURM_PROCID", "SLURM_NTASKS"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *r = getenv(vars[i][0]), *s = getenv(vars[i][1]);
        if (!r || !s)
            continue;
        char buf[64];
        snprintf(buf, sizeof buf, "%s/%s", r, s);
        if (parse_part(buf, k, n) != 0) {
            fprintf(stderr, "shardfeed pack: %s=%s and %s=%s do not make a part K/N\n", vars[i][0], r,
                    vars[i][1], s);
            return -1;
        }
        *from = vars[i][0];
        return 1;
    }
    return 0;
}

/* OUT_DIR with every "%k" replaced by K. */
static char *expand_out(const char *out, uint32_t k)
{
    size_t cap = strlen(out) * 4 + 32, pos = 0;
    char *r = malloc(cap);
    if (!r)
        return NULL;
    for (const char *p = out; *p; p++) {
        if (p[0] == '%' && p[1] == 'k') {
            pos += (size_t)snprintf(r + pos, cap - pos, "%u", k);
            p++;
        } else {
            r[pos++] = *p;
        }
    }
    r[pos] = '\0';
    return r;
}

/* Packs `input` into folder `out_dir` and prints the summary; its shard
 * count in *shards unless NULL. */
static int run_pack(const char *input, const char *out_dir, sf_pack_opts *opts, int quiet, uint64_t *shards)
{
    progress prog = {now_s()};
    if (!quiet && isatty(STDERR_FILENO)) {
        opts->progress = on_progress;
        opts->image_progress = on_image_progress;
        opts->progress_ctx = &prog;
    }
    sf_pack_result r;
    int rc = sf_pack(&r, input, out_dir, opts);
    if (rc) {
        cli_error("pack", rc);
        return EXIT_USAGE;
    }
    if (shards)
        *shards = r.shards;
    if (!quiet && r.already_complete) {
        if (r.part_count)
            printf("part %u of %u: ", r.part_index, r.part_count);
        printf("%s: already complete: its %llu samples in %llu shards hold this input (every value read "
               "and compared), nothing written, %.2f s\n",
               out_dir, (unsigned long long)r.samples, (unsigned long long)r.shards, r.seconds);
    } else if (!quiet) {
        char a[32], b[32];
        double mbs = r.seconds > 0 ? (double)r.bytes_in / r.seconds / 1e6 : 0;
        if (r.part_count)
            printf("part %u of %u: ", r.part_index, r.part_count);
        printf("packed %llu samples into %llu shards in %s: %s of values, %s written, %.2f s, %.0f MB/s",
               (unsigned long long)r.samples, (unsigned long long)r.shards, out_dir,
               cli_bytes(a, sizeof a, (double)r.bytes_in), cli_bytes(b, sizeof b, (double)r.bytes_out),
               r.seconds, mbs);
        if (r.shards_reused)
            printf(" (%llu finished shards kept from an earlier run)", (unsigned long long)r.shards_reused);
        printf("\n");
        if (r.inputs_skipped)
            printf("skipped %llu file(s) that are not inputs of this format, e.g. %s\n",
                   (unsigned long long)r.inputs_skipped, r.skipped_example);
    }
    return EXIT_OK;
}

/* ---- -o URL: pack into a temporary folder, push it, remove the folder ---- */

static volatile pid_t pack_child; /* the process packing and uploading, for forward_signal */

/* The parent's handler: the child gets the signal (and stops as it would
 * have), the parent waits for it and then removes the temporary folder. */
static void forward_signal(int sig)
{
    if (pack_child > 0)
        kill(pack_child, sig);
}

static int remove_failed; /* an entry of the temporary folder that could not be removed */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        remove_failed = errno;
    return 0; /* go on: remove what can be removed */
}

static void remove_tree(const char *dir)
{
    remove_failed = 0;
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        remove_failed = errno;
    if (remove_failed)
        fprintf(stderr, "shardfeed pack: could not remove the temporary folder %s (%s): remove it by hand\n",
                dir, strerror(remove_failed));
}

/* How far the child got, in memory shared with the parent, so that the
 * parent's last line says only what is known of the URL however the child
 * ended (a signal included). */
enum {
    STAGE_PACKING,  /* nothing uploaded */
    STAGE_SHARDS,   /* uploading shards: no manifest put by this run */
    STAGE_MANIFEST, /* the manifest's PUT may have started: it may or may not be there */
    STAGE_DONE      /* the push finished: the URL holds the dataset */
};
typedef struct upload_state {
    volatile int stage;
    volatile int refused; /* push refused: a dataset is already there (SF_E_EXISTS) */
} upload_state;

static void track_upload(void *ctx, uint64_t done, uint64_t total, const char *name, uint64_t bytes)
{
    (void)name, (void)bytes;
    upload_state *s = ctx;
    s->stage = done == total ? STAGE_DONE : done + 1 == total ? STAGE_MANIFEST : STAGE_SHARDS;
}

/* The child: pack into `tmp`, then upload it as push does (manifest last). */
static int pack_and_push(const char *input, const char *tmp, const char *url, sf_pack_opts *opts, int retries,
                         int quiet, upload_state *state)
{
    uint64_t shards = 0;
    int status = run_pack(input, tmp, opts, quiet, &shards);
    if (status != EXIT_OK)
        return status;
    sf_push_opts push = SF_PUSH_OPTS_INIT;
    push.overwrite = opts->force;
    push.retries = retries;
    push.progress = track_upload;
    push.progress_ctx = state;
    /* No shard: the manifest is the first object put. */
    state->stage = shards ? STAGE_SHARDS : STAGE_MANIFEST;
    int rc = 0;
    status = cli_push("pack", tmp, url, &push, quiet, &rc);
    state->refused = rc == SF_E_EXISTS;
    return status;
}

/* What the URL holds after the child ended at `s`: the end of the last line. */
static void say_what_is_there(const char *how, const upload_state *s, const char *shown)
{
    if (s->refused)
        fprintf(stderr, "shardfeed pack: %s: %s already holds a dataset: nothing was uploaded (--force replaces "
                "it); the temporary folder is removed\n", how, shown);
    else if (s->stage == STAGE_PACKING)
        fprintf(stderr, "shardfeed pack: %s before the upload: nothing was uploaded to %s; the temporary "
                "folder is removed\n", how, shown);
    else if (s->stage == STAGE_SHARDS)
        fprintf(stderr, "shardfeed pack: %s before the manifest was uploaded: this run put no manifest at %s "
                "(shards without one are not a dataset); the temporary folder is removed\n", how, shown);
    else if (s->stage == STAGE_MANIFEST)
        fprintf(stderr, "shardfeed pack: %s while the manifest was being uploaded: %s may or may not hold it "
                "(run 'shardfeed verify %s' to see whether it is a dataset); the temporary folder is "
                "removed\n", how, shown, shown);
    else
        fprintf(stderr, "shardfeed pack: %s after the upload finished: %s holds the dataset; the temporary "
                "folder is removed\n", how, shown);
}

/* Runs pack_and_push in a child process so that the temporary folder is
 * removed however it ends: success, failure, or SIGINT/SIGTERM/SIGHUP/SIGQUIT (the
 * parent forwards them and cleans up; only SIGKILL of the parent leaves the
 * folder, named shardfeed-pack-*). The upload puts the manifest last and
 * deletes it when its own upload failed; a run stopped while the manifest's
 * PUT was under way may have stored it, and the last line says so (the
 * child's stage, in shared memory, tells what is known). */
static int pack_to_url(const char *input, const char *url, const char *tmp_parent, sf_pack_opts *opts,
                       int retries, int quiet)
{
    char tmp[4200], shown[4200];
    cli_shown(shown, sizeof shown, url); /* messages never show a password */
    /* What the upload would refuse at its start (the URL, the credentials,
     * a dataset already there without --force) is asked before packing,
     * which may take hours: it was learned only after. */
    sf_push_opts check = SF_PUSH_OPTS_INIT;
    check.overwrite = opts->force;
    check.retries = retries;
    int rc = sf_push_check(url, &check);
    if (rc) {
        int status = cli_fail("pack", rc);
        fprintf(stderr, "shardfeed pack: nothing was packed\n");
        return status;
    }
    if (snprintf(tmp, sizeof tmp, "%s/shardfeed-pack-XXXXXX", tmp_parent) >= (int)sizeof tmp)
        return cli_usage_error("pack", "--tmp-dir: path too long");
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "shardfeed pack: cannot make a temporary folder in %s: %s (--tmp-dir names another "
                "place)\n", tmp_parent, strerror(errno));
        return EXIT_USAGE;
    }
    struct statvfs fs;
    char room[32] = "?";
    if (statvfs(tmp, &fs) == 0)
        cli_bytes(room, sizeof room, (double)fs.f_bavail * (double)fs.f_frsize);
    if (!quiet)
        fprintf(stderr, "shardfeed pack: packing into the temporary folder %s (%s free there; it needs room "
                "for the whole packed dataset, about the size of the input's values, less with --compress "
                "or --image-max-side), then uploading it to %s; the folder is removed at the end\n",
                tmp, room, shown);
    sigset_t stop, old;
    sigemptyset(&stop);
    for (int i = 0; i < CLI_STOP_SIGNALS; i++) /* SIGQUIT too: it left the folder behind */
        sigaddset(&stop, cli_stop_signals[i]);
    upload_state *state = mmap(NULL, sizeof *state, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (state == MAP_FAILED) {
        fprintf(stderr, "shardfeed pack: out of memory: %s\n", strerror(errno));
        remove_tree(tmp);
        return EXIT_USAGE;
    }
    state->stage = STAGE_PACKING;
    state->refused = 0;
    sigprocmask(SIG_BLOCK, &stop, &old); /* until the handlers are in place */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        int status = pack_and_push(input, tmp, url, opts, retries, quiet, state);
        fflush(NULL);
        _exit(status);
    }
    int fork_errno = errno;
    struct sigaction saved[CLI_STOP_SIGNALS];
    pack_child = pid;
    cli_catch_stop_signals(forward_signal, saved); /* one ignored stays so, in the child too */
    sigprocmask(SIG_SETMASK, &old, NULL);
    int wstatus = 0;
    if (pid > 0)
        while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
        }
    pack_child = 0;
    remove_tree(tmp);
    cli_restore_stop_signals(saved);
    upload_state end = *state;
    munmap(state, sizeof *state);
    if (pid < 0) {
        fprintf(stderr, "shardfeed pack: cannot start the packing process: %s\n", strerror(fork_errno));
        return EXIT_USAGE;
    }
    if (WIFSIGNALED(wstatus)) {
        char how[64];
        snprintf(how, sizeof how, "stopped by signal %d", WTERMSIG(wstatus));
        say_what_is_there(how, &end, shown);
        raise(WTERMSIG(wstatus)); /* the handlers are restored: exit as the signal says */
        return EXIT_USAGE;
    }
    int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : EXIT_USAGE;
    if (status != EXIT_OK)
        say_what_is_there("failed", &end, shown);
    return status;
}

int cmd_pack(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'}, {"jobs", required_argument, NULL, 'j'},
        {"shard-size", required_argument, NULL, 's'}, {"align", required_argument, NULL, 'a'},
        {"input-format", required_argument, NULL, 'i'}, {"compress", required_argument, NULL, 'c'},
        {"part", required_argument, NULL, 'p'}, {"force", no_argument, NULL, 'f'},
        {"image-max-side", required_argument, NULL, 'M'}, {"image-quality", required_argument, NULL, 'Q'},
        {"tmp-dir", required_argument, NULL, 'T'}, {"retries", required_argument, NULL, 'R'}, {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    sf_pack_opts opts = SF_PACK_OPTS_INIT;
    const char *out = NULL, *tmp_dir = NULL;
    char compress[4096] = "";
    int quiet = 0, c, part_given = 0, retries = -1;
    uint64_t v;
    static const char short_opts[] = "o:j:qh";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'j':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > SF_PACK_MAX_JOBS) {
                fprintf(stderr, "shardfeed pack: -j takes a number from 1 to %u, not '%s'\n", SF_PACK_MAX_JOBS,
                        optarg);
                return EXIT_USAGE;
            }
            opts.jobs = (unsigned)v;
            break;
        case 's':
            if (cli_parse_size(optarg, &opts.shard_size)) {
                fprintf(stderr, "shardfeed pack: --shard-size takes a size such as 256MiB, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'a':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > SF_PACK_MAX_ALIGN || (v & (v - 1))) {
                fprintf(stderr, "shardfeed pack: --align takes a power of two from 1 to %u, not '%s'\n",
                        SF_PACK_MAX_ALIGN, optarg);
                return EXIT_USAGE;
            }
            opts.align = (uint32_t)v;
            break;
        case 'i': opts.input_format = optarg; break;
        case 'c':
            if (strlen(compress) + strlen(optarg) + 2 > sizeof compress) {
                fprintf(stderr, "shardfeed pack: --compress options too long\n");
                return EXIT_USAGE;
            }
            if (compress[0])
                strcat(compress, ",");
            strcat(compress, optarg);
            break;
        case 'p':
            if (parse_part(optarg, &opts.part_index, &opts.part_count)) {
                fprintf(stderr, "shardfeed pack: --part takes K/N with 0 <= K < N, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            part_given = 1;
            break;
        case 'M':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > SF_PACK_MAX_IMAGE_SIDE) {
                fprintf(stderr, "shardfeed pack: --image-max-side takes a number of pixels from 1 to %u, not '%s'\n",
                        SF_PACK_MAX_IMAGE_SIDE, optarg);
                return EXIT_USAGE;
            }
            opts.image_max_side = (uint32_t)v;
            break;
        case 'Q':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > 100) {
                fprintf(stderr, "shardfeed pack: --image-quality takes a JPEG quality from 1 to 100, not '%s'\n",
                        optarg);
                return EXIT_USAGE;
            }
            opts.image_quality = (uint32_t)v;
            break;
        case 'f': opts.force = 1; break;
        case 'T': tmp_dir = optarg; break;
        case 'R':
            if (cli_parse_uint(optarg, &v) || v > 100)
                return cli_usage_error("pack", "--retries: '%s' is not a count from 0 to 100", optarg);
            retries = (int)v;
            break;
        case 'q': quiet = 1; break;
        default: return cli_help_option(c, "pack", short_opts, argc, argv);
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("pack", optind == argc ? "no INPUT given" : "one INPUT, not %d", argc - optind);
    if (!out)
        return cli_usage_error("pack", "missing -o OUT_DIR (the dataset folder to write)");
    if (compress[0])
        opts.compress = compress;
    if (opts.image_quality && !opts.image_max_side)
        return cli_usage_error("pack", "--image-quality needs --image-max-side (only images larger than it are "
                                       "re-encoded)");
    if (sf_is_url(out)) {
        const char *from = "--part";
        int e = part_given ? 1 : part_from_env(&opts.part_index, &opts.part_count, &from);
        if (e < 0)
            return EXIT_USAGE;
        if (e > 0 && opts.part_count > 1)
            return cli_usage_error("pack", "running as part %u of %u (from %s) with -o URL: parts are merged "
                                   "from folders (pack the parts into folders, merge them, then 'shardfeed "
                                   "push' the result)", opts.part_index, opts.part_count, from);
        opts.part_count = opts.part_index = 0;
        char shown[4200];
        if (!sf_has_feature("remote")) /* say so before packing, not after */
            return cli_usage_error("pack", "-o %s: this shardfeed was built without libcurl: no uploads "
                                   "(pack into a folder)", cli_shown(shown, sizeof shown, out));
        if (!tmp_dir)
            tmp_dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
        return pack_to_url(argv[optind], out, tmp_dir, &opts, retries, quiet);
    }
    if (tmp_dir || retries >= 0)
        return cli_usage_error("pack", "--%s is for -o URL", tmp_dir ? "tmp-dir" : "retries");
    const char *from = NULL;
    if (!part_given) {
        int e = part_from_env(&opts.part_index, &opts.part_count, &from);
        if (e < 0)
            return EXIT_USAGE;
        if (e == 0 || opts.part_count == 1)
            opts.part_count = opts.part_index = 0; /* one process: the whole dataset */
        else if (!strstr(out, "%k")) {
            fprintf(stderr,
                    "shardfeed pack: running as part %u of %u (from %s): put %%k in -o (e.g. -o "
                    "parts/%%k) so the parts do not write the same directory\n",
                    opts.part_index, opts.part_count, from);
            return EXIT_USAGE;
        }
    }
    char *out_dir = expand_out(out, opts.part_index);
    if (!out_dir)
        return EXIT_USAGE;
    int status = run_pack(argv[optind], out_dir, &opts, quiet, NULL);
    free(out_dir);
    return status;
}
