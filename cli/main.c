/* shardfeed: pack, verify, inspect and export datasets. */
#include <getopt.h>
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
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return cli_help(stdout, "help") == 0 ? EXIT_OK : EXIT_USAGE;
    if (argc == 2 && cli_help(stdout, argv[1]) == 0)
        return EXIT_OK;
    return cli_usage_error("help", "no command '%s'", argv[1]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_overview(stderr);
        return EXIT_USAGE;
    }
    /* Each command's getopt_long is quiet: cli_help_option says what was
     * wrong in one line, naming the command ("shardfeed pack"). */
    opterr = 0;
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
        if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0))
            return cli_help(stdout, "version") == 0 ? EXIT_OK : EXIT_USAGE;
        if (argc > 2)
            return cli_usage_error("version", "takes no argument ('%s')", argv[2]);
        int major, minor;
        sf_format_version(&major, &minor);
        printf("shardfeed %s (format %d.%d)\n", sf_version(), major, minor);
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return help(argc - 1, argv + 1);
    fprintf(stderr,
            "shardfeed: unknown command '%s' (commands: pack, merge, verify, inspect, export, push, "
            "bench, version, help; see 'shardfeed help')\n",
            cmd);
    return EXIT_USAGE;
}
