#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void pack_usage(FILE *f)
{
    fprintf(f,
            "usage: shardfeed pack INPUT -o OUT_DIR [options]\n"
            "\n"
            "INPUT is one of (the format is told from the name or the folder's contents):\n"
            "  npy          a folder of {field}_{key}.npy files (img_0.npy, label_0.npy, ...): files\n"
            "               with the same key form one sample, in natural key order (2 before 10)\n"
            "  imagefolder  ROOT/<class>/<image>: fields image (the file's bytes) and label\n"
            "  list         a .csv/.tsv/.txt list of path,label[,more columns] rows: fields data\n"
            "               (the file's bytes), label (int64), then one field per further column\n"
            "  tar          a .tar(.gz/.zst/.xz/.bz2)/.tgz, or a folder of them: WebDataset members\n"
            "               KEY.FIELD (dir/0001.seg.png: key dir/0001, field seg.png)\n"
            "\n"
            "  -o, --output DIR       output dataset directory (created if missing)\n"
            "  -j, --jobs N           worker threads (default: one per CPU)\n"
            "      --shard-size SIZE  target shard size, e.g. 256MiB, 1GiB (default 256MiB)\n"
            "      --align N          record alignment, power of two <= 1MiB (default 4096)\n"
            "      --force            replace a shardfeed dataset already in OUT_DIR\n"
            "  -q, --quiet            no progress line and no summary\n"
            "\n"
            "Re-running the same command after an interruption keeps finished shards.\n");
}

static void on_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    (void)ctx;
    char b[32];
    fprintf(stderr, "\rpacking: %llu/%llu samples (%.0f%%), %s   ", (unsigned long long)done,
            (unsigned long long)total, total ? 100.0 * (double)done / (double)total : 100.0,
            cli_bytes(b, sizeof b, (double)bytes));
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int cmd_pack(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'}, {"jobs", required_argument, NULL, 'j'},
        {"shard-size", required_argument, NULL, 's'}, {"align", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'}, {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    sf_pack_opts opts = SF_PACK_OPTS_INIT;
    const char *out = NULL;
    int quiet = 0, c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "o:j:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'j':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > 1024) {
                fprintf(stderr, "shardfeed pack: -j takes a number from 1 to 1024, not '%s'\n", optarg);
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
            if (cli_parse_uint(optarg, &v) || v == 0 || v > (1u << 20) || (v & (v - 1))) {
                fprintf(stderr, "shardfeed pack: --align takes a power of two from 1 to 1048576, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            opts.align = (uint32_t)v;
            break;
        case 'f': opts.force = 1; break;
        case 'q': quiet = 1; break;
        case 'h': pack_usage(stdout); return EXIT_OK;
        default: pack_usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind + 1 != argc || !out) {
        pack_usage(stderr);
        return EXIT_USAGE;
    }
    if (!quiet && isatty(STDERR_FILENO))
        opts.progress = on_progress;
    sf_pack_result r;
    int rc = sf_pack(&r, argv[optind], out, &opts); /* input format: auto */
    if (rc) {
        cli_error("pack", rc);
        return EXIT_USAGE;
    }
    if (!quiet) {
        char a[32], b[32];
        double mbs = r.seconds > 0 ? (double)r.bytes_in / r.seconds / 1e6 : 0;
        printf("packed %llu samples into %llu shards in %s: %s of arrays, %s written, %.2f s, %.0f MB/s",
               (unsigned long long)r.samples, (unsigned long long)r.shards, out,
               cli_bytes(a, sizeof a, (double)r.bytes_in), cli_bytes(b, sizeof b, (double)r.bytes_out),
               r.seconds, mbs);
        if (r.shards_reused)
            printf(" (%llu finished shards kept from an earlier run)", (unsigned long long)r.shards_reused);
        printf("\n");
    }
    return EXIT_OK;
}
