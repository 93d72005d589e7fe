/* shardfeed: pack, verify, inspect and export datasets. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* help [COMMAND | --man]: --man prints the man page (built by docs/man.cmake). */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        cli_overview(stdout);
        return EXIT_OK;
    }
    if (argc == 2 && strcmp(argv[1], "--man") == 0) {
        cli_man(stdout);
        return EXIT_OK;
    }
    if (argc == 2 && cli_help(stdout, argv[1]) == 0)
        return EXIT_OK;
    fprintf(stderr, "shardfeed help: no command '%s'\n\n", argv[1]);
    cli_overview(stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_overview(stderr);
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
    if (strcmp(cmd, "push") == 0)
        return cmd_push(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        int major, minor;
        sf_format_version(&major, &minor);
        printf("shardfeed %s (format %d.%d)\n", sf_version(), major, minor);
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return help(argc - 1, argv + 1);
    fprintf(stderr, "shardfeed: unknown command '%s'\n\n", cmd);
    cli_overview(stderr);
    return EXIT_USAGE;
}
