#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"npy", no_argument, NULL, 'n'},
                                             CLI_REMOTE_LONGOPTS,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL, *bad;
    sf_remote_opts remote = SF_REMOTE_OPTS_INIT;
    int c, npy = 0;
    static const char short_opts[] = "o:h";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'n')
            npy = 1;
        else if (!cli_is_remote_option(c))
            return cli_help_option(c, "export", short_opts, argc, argv);
        else if ((bad = cli_remote_option(&remote, c, optarg)))
            return cli_usage_error("export", "%s", bad);
    }
    if (optind + 1 != argc)
        return cli_usage_error("export", optind == argc ? "no DATASET_DIR given" : "one DATASET_DIR, not %d",
                               argc - optind);
    if (!out)
        return cli_usage_error("export", "missing -o DIR (the folder to export to)");
    uint64_t n = 0;
    int rc = npy ? sf_export_npy(&n, argv[optind], out) : sf_export(&n, argv[optind], out);
    if (rc) {
        int status = cli_fail("export", rc);
        if (n)
            fprintf(stderr, "shardfeed export: stopped after writing %llu files to %s\n",
                    (unsigned long long)n, out);
        return status;
    }
    printf("exported %llu files to %s\n", (unsigned long long)n, out);
    return EXIT_OK;
}
