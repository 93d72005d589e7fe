#include <getopt.h>
#include <stdio.h>

#include "cli.h"

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: shardfeed export DATASET_DIR -o DIR\n"
                    "Writes every sample as DIR/{field}_{key}.npy; record checksums are checked.\n");
            return c == 'h' ? EXIT_OK : EXIT_USAGE;
        }
    }
    if (optind + 1 != argc || !out) {
        fprintf(stderr, "usage: shardfeed export DATASET_DIR -o DIR\n");
        return EXIT_USAGE;
    }
    uint64_t n = 0;
    int rc = sf_export_npy(argv[optind], out, &n);
    if (rc) {
        cli_error("export", rc);
        return rc == SF_E_CHECKSUM || rc == SF_E_CORRUPT ? EXIT_CORRUPT : EXIT_USAGE;
    }
    printf("exported %llu files to %s\n", (unsigned long long)n, out);
    return EXIT_OK;
}
