#include <getopt.h>
#include <stdio.h>

#include "cli.h"

static void merge_usage(FILE *f)
{
    fprintf(f,
            "usage: shardfeed merge PART_DIR... -o DATASET_DIR [--force] [--ignore-mtimes]\n"
            "\n"
            "Joins the parts written by 'shardfeed pack --part K/N' (all N of them, in any\n"
            "order) into one dataset. Sample data is copied, not re-encoded: only each shard's\n"
            "header and footer change, and the result is byte for byte what one 'pack' of the\n"
            "whole input writes. Parts packed from different inputs are refused: each\n"
            "part records its input's file names, sizes and modification times, and a\n"
            "hash of the first value of every shard.\n"
            "\n"
            "  -o, --output DIR    the merged dataset (created if missing)\n"
            "      --force         replace a shardfeed dataset already in DIR\n"
            "      --ignore-mtimes merge parts whose input files' modification times differ\n"
            "                      (an input copied to each machine without keeping times)\n"
            "  -q, --quiet         no summary\n");
}

int cmd_merge(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"force", no_argument, NULL, 'f'},
                                             {"ignore-mtimes", no_argument, NULL, 'm'},
                                             {"quiet", no_argument, NULL, 'q'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int c, quiet = 0;
    unsigned flags = 0;
    while ((c = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'f': flags |= SF_MERGE_FORCE; break;
        case 'm': flags |= SF_MERGE_IGNORE_MTIMES; break;
        case 'q': quiet = 1; break;
        case 'h': merge_usage(stdout); return EXIT_OK;
        default: merge_usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc || !out) {
        merge_usage(stderr);
        return EXIT_USAGE;
    }
    sf_pack_result r;
    int rc = sf_pack_merge(&r, (const char *const *)argv + optind, (size_t)(argc - optind), out, flags);
    if (rc)
        return cli_fail("merge", rc);
    if (!quiet) {
        char b[32];
        printf("merged %d parts into %s: %llu samples in %llu shards, %s, %.2f s\n", argc - optind, out,
               (unsigned long long)r.samples, (unsigned long long)r.shards,
               cli_bytes(b, sizeof b, (double)r.bytes_out), r.seconds);
    }
    return EXIT_OK;
}
