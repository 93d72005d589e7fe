#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_error(const char *cmd, int rc)
{
    const char *detail = sf_last_error();
    fprintf(stderr, "shardfeed %s: %s\n", cmd, detail[0] ? detail : sf_strerror(rc));
}

int cli_exit_status(int rc)
{
    if (rc == 0)
        return EXIT_OK;
    return sf_is_data_error(rc) ? EXIT_CORRUPT : EXIT_USAGE;
}

int cli_fail(const char *cmd, int rc)
{
    cli_error(cmd, rc);
    return cli_exit_status(rc);
}

const char *cli_shown(char *out, size_t cap, const char *path)
{
    return sf_url_shown(out, cap, path);
}

int cli_parse_uint(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MiB", 1048576.0},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"T", 1099511627776.0}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double b = floor(v * units[i].mult);
            if (b < 1 || b > 1.8e19)
                return -1;
            *out = (uint64_t)b;
            return 0;
        }
    }
    return -1;
}

const char *cli_bytes(char *buf, size_t cap, double bytes)
{
    static const char *u[] = {"B", "kB", "MB", "GB", "TB"};
    int i = 0;
    while (bytes >= 1000 && i < 4) {
        bytes /= 1000;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", bytes, u[i]);
    return buf;
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 if there is none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0; /* overlong, a surrogate, or past U+10FFFF */
    return len;
}

void cli_json_stringn(FILE *f, const char *s, size_t n)
{
    /* JSON text is UTF-8 (RFC 8259): a byte that starts no well-formed
     * sequence (a file name in another encoding) becomes U+FFFD, as
     * Python's errors="replace" makes it; raw, it made the output invalid. */
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = utf8_seq(u + i, n - i);
        if (len == 0)
            fputs("\\ufffd", f);
        else if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fwrite(u + i, 1, len, f);
        i += len ? len : 1;
    }
    fputc('"', f);
}

void cli_json_string(FILE *f, const char *s)
{
    cli_json_stringn(f, s, strlen(s));
}

int cli_is_remote_option(int c)
{
    return c == CLI_O_REMOTE_MODE || c == CLI_O_CACHE_DIR || c == CLI_O_CACHE_LIMIT;
}

const char *cli_remote_option(sf_remote_opts *r, int c, const char *arg)
{
    uint64_t v;
    char text[32];
    switch (c) {
    case CLI_O_REMOTE_MODE:
        if (strcmp(arg, "cache") == 0)
            r->mode = SF_REMOTE_CACHE;
        else if (strcmp(arg, "direct") == 0)
            r->mode = SF_REMOTE_DIRECT;
        else
            return "--remote-mode takes cache or direct";
        return NULL;
    case CLI_O_CACHE_DIR:
        if (!*arg)
            return "--cache-dir takes a folder";
        r->cache_dir = arg;
        return setenv("SHARDFEED_CACHE_DIR", arg, 1) == 0 ? NULL : "--cache-dir: setenv failed";
    case CLI_O_CACHE_LIMIT:
        if (cli_parse_size(arg, &v) || v == 0)
            return "--cache-limit takes a size in bytes (4096, 512MiB, 20GiB)";
        r->cache_limit = v;
        snprintf(text, sizeof text, "%llu", (unsigned long long)v);
        return setenv("SHARDFEED_CACHE_LIMIT", text, 1) == 0 ? NULL : "--cache-limit: setenv failed";
    default:
        return "not a remote option";
    }
}

const int cli_stop_signals[CLI_STOP_SIGNALS] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void cli_catch_stop_signals(void (*handler)(int), struct sigaction saved[CLI_STOP_SIGNALS])
{
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    for (int i = 0; i < CLI_STOP_SIGNALS; i++)
        sigaddset(&act.sa_mask, cli_stop_signals[i]);
    for (int i = 0; i < CLI_STOP_SIGNALS; i++)
        if (sigaction(cli_stop_signals[i], NULL, &saved[i]) == 0 && saved[i].sa_handler != SIG_IGN)
            sigaction(cli_stop_signals[i], &act, NULL);
}

void cli_restore_stop_signals(const struct sigaction saved[CLI_STOP_SIGNALS])
{
    for (int i = 0; i < CLI_STOP_SIGNALS; i++)
        sigaction(cli_stop_signals[i], &saved[i], NULL);
}
