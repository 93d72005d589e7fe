#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

typedef struct verify_out {
    const char *dir;
    char dir_shown[4200]; /* dir without a URL's password: what is printed */
    int json;
    uint64_t shown;
} verify_out;

static void on_problem(void *ctx, const sf_verify_problem *p)
{
    verify_out *o = ctx;
    if (o->json) {
        printf("%s{\"file\":", o->shown ? "," : "");
        cli_json_string(stdout, p->file);
        printf(",\"shard\":%lld,\"record\":%lld,\"offset\":%llu,\"error\":", (long long)p->shard,
               (long long)p->record, (unsigned long long)p->offset);
        cli_json_string(stdout, sf_strerror(p->code));
        printf(",\"message\":");
        cli_json_string(stdout, p->message);
        printf("}");
    } else {
        printf("CORRUPT %s/%s", o->dir_shown, p->file);
        if (p->record >= 0)
            printf(" record %lld", (long long)p->record);
        printf(" byte %llu: %s\n", (unsigned long long)p->offset, p->message);
    }
    o->shown++;
}

/* A web server has no listing: verify cannot look for stray files there. */
static int is_http_url(const char *path)
{
    return sf_is_url(path) && strncasecmp(path, "s3://", 5) != 0;
}

int cmd_verify(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'J'},
                                             {"jobs", required_argument, NULL, 'j'},
                                             {"decompress", no_argument, NULL, 'D'},
                                             CLI_REMOTE_LONGOPTS,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    verify_out o = {0};
    sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
    sf_remote_opts remote = SF_REMOTE_OPTS_INIT;
    uint64_t v;
    int c;
    static const char short_opts[] = "j:h";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        switch (c) {
        case 'J': o.json = 1; break;
        case 'D': vo.decompress = 1; break;
        case 'j':
            if (cli_parse_uint(optarg, &v) || v == 0 || v > SF_VERIFY_MAX_JOBS) {
                fprintf(stderr, "shardfeed verify: -j takes a number from 1 to %u\n", SF_VERIFY_MAX_JOBS);
                return EXIT_USAGE;
            }
            vo.jobs = (unsigned)v;
            break;
        default:
            if (!cli_is_remote_option(c))
                return cli_help_option(c, "verify", short_opts, argc, argv);
            const char *bad = cli_remote_option(&remote, c, optarg);
            if (bad)
                return cli_usage_error("verify", "%s", bad);
            break;
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("verify", optind == argc ? "no DATASET_DIR given" : "one DATASET_DIR, not %d",
                               argc - optind);
    o.dir = argv[optind];
    cli_shown(o.dir_shown, sizeof o.dir_shown, o.dir);
    if (o.json)
        printf("{\"problems\":[");
    sf_verify_summary s;
    memset(&s, 0, sizeof s);
    int rc = sf_verify_ex(&s, o.dir, &vo, on_problem, &o);
    /* Problems found make it corrupt even when something else then stopped
     * the run; without any, the code says (a folder that is not a dataset
     * is a usage error). */
    int status = s.problems ? EXIT_CORRUPT : cli_exit_status(rc);
    int stopped = rc != 0 && rc != SF_E_CORRUPT; /* could not check everything */
    if (o.json) {
        printf("],\"ok\":%s,\"shards\":%llu,\"records\":%llu,\"bytes\":%llu,\"seconds\":%.6f,"
               "\"strays_checked\":%s",
               status == EXIT_OK ? "true" : "false", (unsigned long long)s.shards,
               (unsigned long long)s.records, (unsigned long long)s.bytes, s.seconds,
               is_http_url(o.dir) ? "false" : "true");
        if (stopped) {
            printf(",\"error\":");
            cli_json_string(stdout, sf_last_error());
        }
        printf("}\n");
        return status;
    }
    char b[32];
    double rate = s.seconds > 0 ? (double)s.bytes / s.seconds : 0;
    if (status == EXIT_OK)
        printf("OK %s: %llu shards, %llu records, %s verified in %.2f s (%s/s)\n", o.dir_shown,
               (unsigned long long)s.shards, (unsigned long long)s.records,
               cli_bytes(b, sizeof b, (double)s.bytes), s.seconds, cli_bytes((char[32]){0}, 32, rate));
    if (s.problems)
        printf("CORRUPT %s: %llu problem(s)\n", o.dir_shown, (unsigned long long)s.problems);
    if (is_http_url(o.dir) && !stopped)
        printf("note: stray files cannot be checked over HTTP (a web server has no listing): only the "
               "manifest's files were checked\n");
    if (stopped)
        cli_error("verify", rc);
    return status;
}
