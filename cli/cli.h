/* The shardfeed command line: shared helpers of the subcommands. Uses only
 * the library's public headers. */
#ifndef SF_TOOLS_CLI_H
#define SF_TOOLS_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "shardfeed/shardfeed.h"

/* Exit codes, the same for every subcommand (README "Exit codes"). */
#define EXIT_OK 0
#define EXIT_USAGE 1   /* usage or environment error (missing folder, not a dataset, I/O) */
#define EXIT_CORRUPT 2 /* a dataset's files break the format: sf_is_data_error */

int cmd_pack(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_push(int argc, char **argv);

/* Help (cli/help.c: every command's text in one table). The overview of
 * every command; one command's full help (-1 for an unknown command); the
 * man page shardfeed(1), in roff, made of every command's help. */
void cli_overview(FILE *f);
int cli_help(FILE *f, const char *cmd);
void cli_man(FILE *f);
/* Prints "shardfeed CMD: <message> (see 'shardfeed help CMD')" on one line
 * and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* getopt_long (quiet: opterr = 0) over argv with short_opts returned 'h'
 * or an error ('?'): prints the help on stdout and returns EXIT_OK, or one
 * line on stderr naming the option and what was wrong (unknown, a value
 * missing or not taken) and returns EXIT_USAGE. */
int cli_help_option(int c, const char *cmd, const char *short_opts, int argc, char **argv);

/* Prints "shardfeed CMD: <detail>" for a failed library call. */
void cli_error(const char *cmd, int rc);
/* The exit status of a command that failed with library code `rc` while
 * reading a dataset: EXIT_CORRUPT when the dataset's bytes break the
 * format, EXIT_USAGE otherwise, EXIT_OK for 0. Every command that reads
 * datasets maps its failures with this, so one problem gets one status
 * whichever command meets it. (pack reads inputs, not datasets: its
 * failures are EXIT_USAGE.) */
int cli_exit_status(int rc);
/* cli_error, then cli_exit_status. */
int cli_fail(const char *cmd, int rc);
/* The options of a dataset at a URL (README "Remote datasets"), the same in
 * verify, inspect, export and bench: --remote-mode cache|direct,
 * --cache-dir DIR, --cache-limit SIZE. */
enum { CLI_O_REMOTE_MODE = 0x1000, CLI_O_CACHE_DIR, CLI_O_CACHE_LIMIT };
#define CLI_REMOTE_LONGOPTS                                                                        \
    {"remote-mode", required_argument, NULL, CLI_O_REMOTE_MODE},                                   \
        {"cache-dir", required_argument, NULL, CLI_O_CACHE_DIR},                                   \
        {"cache-limit", required_argument, NULL, CLI_O_CACHE_LIMIT}
/* 1 when getopt_long's `c` is one of those options. */
int cli_is_remote_option(int c);
/* Applies remote option `c` (with `arg`) to r and to the environment
 * (SHARDFEED_CACHE_DIR, SHARDFEED_CACHE_LIMIT: what the library reads when a
 * call takes no options, as verify's and export's do): NULL, or what is
 * wrong with it. */
const char *cli_remote_option(sf_remote_opts *r, int c, const char *arg);
/* `path` as messages show it (sf_url_shown: a URL's password as "***",
 * what the library's messages show). Returns out. */
const char *cli_shown(char *out, size_t cap, const char *path);
/* Uploads dataset folder `dir` to `url` with sf_push (push and pack -o URL):
 * a line per object and a summary unless `quiet`. EXIT_OK, or the failure
 * printed (as command `cmd`'s) and its exit status. Sets opts' progress
 * callback; one set there before is called first with each object.
 * sf_push's code in *push_rc unless NULL. */
int cli_push(const char *cmd, const char *dir, const char *url, sf_push_opts *opts, int quiet, int *push_rc);
/* The signals that stop a run rather than kill it: pack -o URL forwards
 * them to its packing process, push turns them into a cancel. */
#define CLI_STOP_SIGNALS 4
extern const int cli_stop_signals[CLI_STOP_SIGNALS];
/* Installs `handler` (the others blocked while it runs) for each stop
 * signal not ignored: one ignored (nohup, a background job) stays so. The
 * dispositions before go into saved, for cli_restore_stop_signals. */
void cli_catch_stop_signals(void (*handler)(int), struct sigaction saved[CLI_STOP_SIGNALS]);
void cli_restore_stop_signals(const struct sigaction saved[CLI_STOP_SIGNALS]);
/* Parses "256MiB", "1GiB", "4096", "64KiB", "1.5GiB"; 0 on success. */
int cli_parse_size(const char *s, uint64_t *out);
/* Parses a non-negative integer; 0 on success. */
int cli_parse_uint(const char *s, uint64_t *out);
/* Human-readable byte count ("6.02 GB"). */
const char *cli_bytes(char *buf, size_t cap, double bytes);
/* Writes `s` as a JSON string (quotes and escapes included). */
void cli_json_string(FILE *f, const char *s);
void cli_json_stringn(FILE *f, const char *s, size_t n);

#endif
