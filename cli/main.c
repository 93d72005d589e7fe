/* shardfeed: pack, verify, inspect and export datasets. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shardfeed COMMAND [ARGS]\n"
            "\n"
            "  pack INPUT -o OUT_DIR [-j N] [--input-format F] [--compress F=zstd] [--part K/N] ...\n"
            "        pack .npy files, an ImageFolder tree, a list file or tar files into a\n"
            "        dataset of checksummed shards\n"
            "  merge PART_DIR... -o DATASET_DIR\n"
            "        join the parts of a 'pack --part K/N' run into one dataset\n"
            "  verify DATASET_DIR [-j N] [--json]\n"
            "        check every byte; exit 0 intact, 2 corrupt, 1 usage or environment error\n"
            "  inspect DATASET_DIR [--json]\n"
            "        show the schema, counts, shards and sizes\n"
            "  export DATASET_DIR -o DIR [--npy]\n"
            "        write every sample back in the layout it was packed from (or as .npy)\n"
            "  bench DATASET_DIR [--batch-size N] [--epochs N] [--shuffle MODE] [--engine E] [--json]\n"
            "        stream through the dataset with the reader; report samples/s, GB/s, CPU, RSS\n"
            "  version\n"
            "\n"
            "The format is described in SPEC.md; run 'shardfeed COMMAND --help' for details.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "pack") == 0)
        return cmd_pack(argc - 1, argv + 1);
    if (strcmp(cmd, "merge") == 0)
        return cmd_merge(argc - 1, argv + 1);
    if (strcmp(cmd, "verify") == 0)
        return cmd_verify(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        int major, minor;
        sf_format_version(&major, &minor);
        printf("shardfeed %s (format %d.%d)\n", sf_version(), major, minor);
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    fprintf(stderr, "shardfeed: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
