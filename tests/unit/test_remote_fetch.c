/* The transport's decisions and error paths (lib/remote/fetch.h), against a
 * scripted responder on 127.0.0.1 run by the test itself: each connection
 * gets the next canned response, whatever it asked for. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fetch.h"
#include "shardfeed/error.h"
#include "remote_url.h"
#include "shardfeed_config.h"

#define MAX_SCRIPT 8

/* One canned response: the head (status line and headers, without the
 * blank line) and the body actually sent. */
typedef struct canned {
    const char *head;
    const char *body;
    size_t body_len;
} canned;

typedef struct responder {
    int listen_fd;
    int port;
    pthread_t tid;
    canned script[MAX_SCRIPT];
    int n, served;
    char ranges[MAX_SCRIPT][64]; /* the Range header of each request, "" if none */
} responder;

static void read_request(int fd, char *range, size_t cap)
{
    char buf[8192];
    size_t got = 0;
    range[0] = '\0';
    while (got < sizeof buf - 1) {
        ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    buf[got] = '\0';
    const char *r = strcasestr(buf, "\r\nRange: bytes=");
    if (r) {
        r += strlen("\r\nRange: bytes=");
        size_t k = strcspn(r, "\r\n");
        snprintf(range, cap, "%.*s", (int)k, r);
    }
}

static void *serve(void *arg)
{
    responder *s = arg;
    while (s->served < s->n) {
        int c = accept(s->listen_fd, NULL, NULL);
        if (c < 0)
            break;
        canned *k = &s->script[s->served];
        read_request(c, s->ranges[s->served], sizeof s->ranges[0]);
        s->served++;
        char head[1024];
        int h = snprintf(head, sizeof head, "%s\r\nConnection: close\r\n\r\n", k->head);
        /* A client that hung up early is no failure of the responder's. */
        if (write(c, head, (size_t)h) == h && k->body_len)
            (void)!write(c, k->body, k->body_len);
        close(c);
    }
    return NULL;
}

static void responder_start(responder *s)
{
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(s->listen_fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s->listen_fd, 8), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(s->listen_fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&s->tid, NULL, serve, s), 0);
}

static void responder_stop(responder *s)
{
    shutdown(s->listen_fd, SHUT_RDWR);
    close(s->listen_fd);
    pthread_join(s->tid, NULL);
}

static void add(responder *s, const char *head, const char *body, size_t len)
{
    cr_assert_lt(s->n, MAX_SCRIPT);
    s->script[s->n++] = (canned){head, body, len};
}

/* A location at the responder and a fetcher with `retries`. */
static void open_fetcher(remote_location **loc, remote_fetcher **f, const responder *s,
                         uint32_t retries)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ds", s->port);
    cr_assert_eq(remote_location_open(loc, url), 0, "%s", sf_last_error());
    remote_policy p = {.retries = retries, .timeout_ms = 5000};
    cr_assert_eq(remote_fetcher_open(f, *loc, &p), 0);
}

TestSuite(remote_fetch, .timeout = 60);

Test(remote_fetch, what_is_retried)
{
    cr_assert(remote_retryable(0 /* CURLE_OK */, 500));
    cr_assert(remote_retryable(0, 503));
    cr_assert(remote_retryable(0, 429));
    cr_assert_not(remote_retryable(0, 404));
    cr_assert_not(remote_retryable(0, 403));
    cr_assert_not(remote_retryable(0, 200));
}

Test(remote_fetch, the_backoff_grows_with_jitter_in_its_upper_half_and_is_capped)
{
    for (uint32_t attempt = 1; attempt < 40; attempt++) {
        uint64_t d = attempt <= 16 ? (uint64_t)REMOTE_BACKOFF_BASE_MS << (attempt - 1) : ~0ull;
        if (d > REMOTE_BACKOFF_MAX_MS)
            d = REMOTE_BACKOFF_MAX_MS;
        uint32_t lo = ~0u, hi = 0;
        for (uint64_t r = 0; r < 5000; r++) {
            uint32_t ms = remote_backoff_ms(attempt, r * 2654435761u);
            lo = ms < lo ? ms : lo;
            hi = ms > hi ? ms : hi;
        }
        cr_assert_geq(lo, d / 2, "attempt %u", attempt);
        cr_assert_leq(hi, d, "attempt %u", attempt);
        cr_assert_lt(lo, hi, "attempt %u: no jitter", attempt);
    }
}

Test(remote_fetch, the_stores_message_is_s3s_message_element_capped_and_printable)
{
    char out[REMOTE_MESSAGE_MAX + 8];
    const char *xml = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please "
                      "reduce\nyour request rate.</Message></Error>";
    remote_store_message(out, sizeof out, xml, strlen(xml));
    cr_assert_str_eq(out, "Please reduce your request rate.");
    char big[5000];
    memset(big, 'x', sizeof big);
    memcpy(big, "<Message>", 9);
    remote_store_message(out, sizeof out, big, sizeof big);
    cr_assert_eq(strlen(out), REMOTE_MESSAGE_MAX);
    remote_store_message(out, sizeof out, "plain\x01text", 10);
    cr_assert_str_eq(out, "plain text");
    remote_store_message(out, sizeof out, "", 0);
    cr_assert_str_eq(out, "");
}

#if SF_HAVE_REMOTE

static const char s3_slowdown[] =
    "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request "
    "rate.</Message></Error>";

Test(remote_fetch, after_the_retries_the_error_names_the_url_status_and_message)
{
    responder s = {0};
    static char head[128];
    snprintf(head, sizeof head,
             "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: %zu",
             strlen(s3_slowdown));
    for (int i = 0; i < 3; i++)
        add(&s, head, s3_slowdown, strlen(s3_slowdown));
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 2);
    uint8_t buf[16];
    int rc = remote_fetch_range(f, "shard-000001.sfs", 100, sizeof buf, buf);
    cr_assert_eq(rc, SF_E_REMOTE, "%d: %s", rc, sf_last_error());
    const char *m = sf_last_error();
    cr_assert(strstr(m, "/ds/shard-000001.sfs"), "%s", m);
    cr_assert(strstr(m, "bytes 100-115"), "%s", m);
    cr_assert(strstr(m, "HTTP 503"), "%s", m);
    cr_assert(strstr(m, "Please reduce your request rate."), "%s", m);
    cr_assert(strstr(m, "3 attempts"), "%s", m);
    cr_assert_eq(s.served, 3);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_short_206_is_retried_from_where_it_stopped)
{
    responder s = {0};
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 4",
        "abcd", 4);
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 14-19/100\r\nContent-Length: 6",
        "efghij", 6);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 3);
    char buf[11] = {0};
    cr_assert_eq(remote_fetch_range(f, "o", 10, 10, buf), 0, "%s", sf_last_error());
    cr_assert_str_eq(buf, "abcdefghij");
    cr_assert_str_eq(s.ranges[0], "10-19");
    cr_assert_str_eq(s.ranges[1], "14-19", "the retry did not resume");
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_body_longer_than_the_range_is_never_written_past_the_buffer)
{
    static char big[4096];
    memset(big, 'Z', sizeof big);
    responder s = {0};
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-7/9000\r\nContent-Length: 4096",
        big, sizeof big);
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-7/9000\r\nContent-Length: 8",
        "12345678", 8);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 3);
    char buf[8 + 64];
    memset(buf, '#', sizeof buf);
    cr_assert_eq(remote_fetch_range(f, "o", 0, 8, buf), 0, "%s", sf_last_error());
    cr_assert_eq(memcmp(buf, "12345678", 8), 0);
    for (size_t i = 8; i < sizeof buf; i++)
        cr_assert_eq(buf[i], '#', "byte %zu past the range was written", i);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_missing_object_fails_at_once_with_enoent)
{
    responder s = {0};
    add(&s, "HTTP/1.1 404 Not Found\r\nContent-Length: 9", "not found", 9);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 5);
    uint8_t buf[4];
    cr_assert_eq(remote_fetch_range(f, "manifest.sfm", 0, 4, buf), -ENOENT);
    cr_assert(strstr(sf_last_error(), "HTTP 404"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "1 attempt)"), "%s", sf_last_error());
    cr_assert_eq(s.served, 1, "a 404 was retried");
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_server_that_ignores_range_is_refused)
{
    responder s = {0};
    add(&s, "HTTP/1.1 200 OK\r\nContent-Length: 20", "0123456789abcdefghij", 20);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 3);
    char buf[20];
    cr_assert_eq(remote_fetch_range(f, "o", 5, 4, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "Range"), "%s", sf_last_error());
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_200_with_the_whole_object_to_a_range_from_byte_0_fails_at_once)
{
    responder s = {0};
    add(&s, "HTTP/1.1 200 OK\r\nContent-Length: 20", "0123456789abcdefghij", 20);
    add(&s, "HTTP/1.1 200 OK\r\nContent-Length: 20", "0123456789abcdefghij", 20);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 1);
    char buf[10];
    cr_assert_eq(remote_fetch_range(f, "o", 0, 10, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "does not support Range"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "(1 attempt)"), "%s", sf_last_error());
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
    cr_assert_eq(s.served, 1, "retried a server that ignores Range");
}

Test(remote_fetch, a_206_for_other_bytes_than_asked_is_refused_unread_and_retried)
{
    /* A cache keyed on the URL alone answers with the range it holds. */
    responder s = {0};
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10",
        "HEADERBYTE", 10);
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 50-59/100\r\nContent-Length: 10",
        "0123456789", 10);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 3);
    char buf[11] = {0};
    cr_assert_eq(remote_fetch_range_sized(f, "o", 100, 50, 10, buf), 0, "%s", sf_last_error());
    cr_assert_str_eq(buf, "0123456789");
    cr_assert_eq(s.served, 2);
    cr_assert_str_eq(s.ranges[1], "50-59");
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_206_naming_no_range_or_another_one_fails_after_the_retries)
{
    responder s = {0};
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Length: 10", "HEADERBYTE", 10);
    add(&s, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 40-49/100\r\nContent-Length: 10",
        "HEADERBYTE", 10);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 1);
    char buf[10];
    memset(buf, '#', sizeof buf);
    cr_assert_eq(remote_fetch_range(f, "o", 50, 10, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "Content-Range \"bytes 40-49/100\", not the bytes asked for"),
              "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "(bytes 50-59)"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "2 attempts"), "%s", sf_last_error());
    for (size_t i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], '#', "byte %zu of a refused body was written", i);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, another_2xx_to_a_range_is_refused_unread_and_retried)
{
    /* A 203 (a transforming proxy) to a range, chunked (no Content-Length to
     * check), with a Content-Range naming the asked bytes but holding others:
     * a 2xx other than 206 and 200 says nothing of which bytes it holds. */
    responder s = {0};
    add(&s, "HTTP/1.1 203 Non-Authoritative Information\r\nContent-Range: bytes 50-59/100\r\n"
            "Transfer-Encoding: chunked",
        "a\r\nOTHERBYTES\r\n0\r\n\r\n", 20);
    add(&s, "HTTP/1.1 203 Non-Authoritative Information\r\nTransfer-Encoding: chunked",
        "a\r\nOTHERBYTES\r\n0\r\n\r\n", 20);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 1);
    char buf[10];
    memset(buf, '#', sizeof buf);
    cr_assert_eq(remote_fetch_range_sized(f, "o", 100, 50, 10, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "HTTP 203 to a range request"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "2 attempts"), "%s", sf_last_error());
    for (size_t i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], '#', "byte %zu of a refused body was written", i);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_whole_object_of_another_size_is_named_by_its_own_length)
{
    /* A 200 to a range from byte 0 is the whole object: its size is its
     * Content-Length, whatever Content-Range it also carries. */
    responder s = {0};
    add(&s, "HTTP/1.1 200 OK\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10",
        "0123456789", 10);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 0);
    char buf[10];
    cr_assert_eq(remote_fetch_range_sized(f, "o", 100, 0, 10, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "the store's object is 10 bytes, the manifest says 100"),
              "%s", sf_last_error());
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_whole_object_over_its_cap_is_refused_as_it_arrives)
{
    static char big[3000];
    memset(big, 'M', sizeof big);
    responder s = {0};
    add(&s, "HTTP/1.1 200 OK\r\nContent-Length: 3000", big, sizeof big);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 3);
    uint8_t *out = NULL;
    uint64_t len = 0;
    cr_assert_eq(remote_fetch_object(f, "manifest.sfm", 1000, &out, &len), SF_E_LIMIT);
    cr_assert_null(out);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

Test(remote_fetch, a_refused_connection_is_retried_then_named)
{
    /* A port nobody listens on: bound, then closed. */
    responder s = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    s.port = ntohs(a.sin_port);
    close(fd);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 2);
    uint8_t buf[4];
    cr_assert_eq(remote_fetch_range(f, "o", 0, 4, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "127.0.0.1"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "3 attempts"), "%s", sf_last_error());
    remote_fetcher_free(f);
    remote_location_free(loc);
}

/* A redirect is not followed: it said only "HTTP 302 (1 attempt)". */
Test(remote_fetch, a_redirect_names_its_target_and_says_it_is_not_followed)
{
    responder s = {0};
    add(&s, "HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/ds/o?X-Amz-Signature=s3cr3t\r\n"
            "Content-Length: 0",
        "", 0);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 2);
    uint8_t buf[4];
    cr_assert_eq(remote_fetch_range(f, "o", 0, 4, buf), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "HTTP 302, a redirect to https://elsewhere.example/ds/o?...: "
                                      "redirects are not followed"),
              "%s", sf_last_error());
    cr_assert_null(strstr(sf_last_error(), "s3cr3t"), "%s", sf_last_error());
    cr_assert_eq(s.served, 1);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

/* Compressed bytes are not the object's: open called such a dataset
 * corrupt (bad magic, exit 2). */
Test(remote_fetch, a_body_with_a_content_encoding_is_refused_naming_it)
{
    responder s = {0};
    add(&s, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4", "\x1f\x8b\x08\x00", 4);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 2);
    uint8_t *out = NULL;
    uint64_t len = 0;
    cr_assert_eq(remote_fetch_object(f, "manifest.sfm", 1000, &out, &len), SF_E_REMOTE);
    cr_assert(strstr(sf_last_error(), "Content-Encoding: gzip, not asked for"), "%s", sf_last_error());
    cr_assert_null(out);
    cr_assert_eq(s.served, 1);
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

/* The ETag a reply carried, for If-Match later: strong ones only (a weak
 * one never matches an If-Match). */
Test(remote_fetch, a_replys_strong_etag_is_kept)
{
    responder s = {0};
    add(&s, "HTTP/1.1 206 Partial Content\r\nETag: \"abc-1\"\r\nContent-Range: bytes 0-3/10\r\n"
            "Content-Length: 4", "abcd", 4);
    add(&s, "HTTP/1.1 206 Partial Content\r\nETag: W/\"weak\"\r\nContent-Range: bytes 0-3/10\r\n"
            "Content-Length: 4", "abcd", 4);
    responder_start(&s);
    remote_location *loc;
    remote_fetcher *f;
    open_fetcher(&loc, &f, &s, 0);
    uint8_t buf[4];
    cr_assert_eq(remote_fetch_range(f, "o", 0, 4, buf), 0, "%s", sf_last_error());
    cr_assert_str_eq(remote_fetcher_etag(f), "\"abc-1\"");
    cr_assert_eq(remote_fetch_range(f, "o", 0, 4, buf), 0, "%s", sf_last_error());
    cr_assert_str_eq(remote_fetcher_etag(f), "");
    remote_fetcher_free(f);
    remote_location_free(loc);
    responder_stop(&s);
}

#endif
