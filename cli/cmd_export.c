#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void export_usage(FILE *f)
{
    fprintf(f,
            "usage: shardfeed export DATASET_DIR -o DIR [--npy]\n"
            "\n"
            "Writes every sample back in the layout the dataset was packed from:\n"
            "  imagefolder  DIR/<class>/<file>, byte for byte\n"
            "  tar          DIR/<key>.<field>: the members of the tar files\n"
            "  list         DIR/<path> and DIR/list.csv (path and the other columns)\n"
            "  npy          DIR/{field}_{key}.npy\n"
            "Record checksums are checked. DIR must be new or empty; two samples that\n"
            "would write the same name stop the export before anything is written.\n"
            "\n"
            "  -o, --output DIR   output directory (created if missing, else empty)\n"
            "      --npy          write {field}_{key}.npy files whatever the layout\n");
}

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"npy", no_argument, NULL, 'n'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int c, npy = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'n')
            npy = 1;
        else {
            export_usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? EXIT_OK : EXIT_USAGE;
        }
    }
    if (optind + 1 != argc || !out) {
        export_usage(stderr);
        return EXIT_USAGE;
    }
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
