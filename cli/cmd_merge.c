#include <getopt.h>
#include <stdio.h>

#include "cli.h"

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
    static const char short_opts[] = "o:qh";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'f': flags |= SF_MERGE_FORCE; break;
        case 'm': flags |= SF_MERGE_IGNORE_MTIMES; break;
        case 'q': quiet = 1; break;
        default: return cli_help_option(c, "merge", short_opts, argc, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("merge", "no PART_DIR given");
    if (!out)
        return cli_usage_error("merge", "missing -o DATASET_DIR (the merged dataset's folder)");
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
