/* GET with retries into a buffer or a file (fetch.h). Without libcurl
 * (SF_HAVE_REMOTE 0) only the decisions are built; the rest refuses with
 * SF_E_UNSUPPORTED (remote_location_open refuses first). */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "error_internal.h"
#include "fetch.h"
#include "jobs.h"
#include "io.h"
#include "nofile.h"
#include "shardfeed_config.h"

uint32_t remote_backoff_ms(uint32_t attempt, uint64_t rnd)
{
    uint64_t d = REMOTE_BACKOFF_MAX_MS;
    if (attempt >= 1 && attempt - 1 < 16)
        d = (uint64_t)REMOTE_BACKOFF_BASE_MS << (attempt - 1);
    if (d > REMOTE_BACKOFF_MAX_MS)
        d = REMOTE_BACKOFF_MAX_MS;
    return (uint32_t)(d / 2 + rnd % (d / 2 + 1));
}

/* Copies text into out, control characters as spaces, at most max chars. */
static void copy_printable(char *out, size_t cap, const char *s, size_t len, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n < max && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}

/* memmem over a body that need not be NUL-terminated. */
static const char *find(const char *hay, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return hay + i;
    return NULL;
}

void remote_store_message(char *out, size_t cap, const char *body, size_t len)
{
    if (cap == 0)
        return;
    out[0] = '\0';
    const char *m = find(body, len, "<Message>");
    if (m) {
        m += strlen("<Message>");
        const char *end = find(m, len - (size_t)(m - body), "</Message>");
        size_t n = end ? (size_t)(end - m) : len - (size_t)(m - body);
        copy_printable(out, cap, m, n, REMOTE_MESSAGE_MAX);
        return;
    }
    copy_printable(out, cap, body, len, REMOTE_MESSAGE_MAX);
}

#if SF_HAVE_REMOTE
#include <curl/curl.h>

struct remote_fetcher {
    CURL *easy;
    const remote_location *loc;
    remote_policy policy;
    uint64_t rnd;            /* xorshift state for the jitter */
    char curl_err[CURL_ERROR_SIZE];
    remote_fetcher *next;    /* on the pool's idle list */
    char etag[REMOTE_ETAG_MAX + 1]; /* the last successful reply's strong ETag, "" if none */
    char if_match[REMOTE_ETAG_MAX + 1]; /* sent as If-Match, "" for none */
    int replaced; /* the last request failed as the object is not open's (remote_fetcher_replaced) */
};

/* Where one attempt's body goes. Exactly one of: a fixed buffer (buf, cap),
 * a growing one (grow: *gbuf up to max), a file (fd >= 0 at fd_off + got). */
typedef struct sink {
    CURL *easy;
    uint8_t *buf;
    uint64_t cap;
    int grow;
    uint64_t max;
    int fd;
    uint64_t fd_off;    /* the file offset of the range's first byte */
    uint64_t flushed;   /* bytes from fd_off whose write-back was started */
    uint64_t written;   /* bytes from fd_off written to fd; [written, got) are in wbuf */
    uint8_t *wbuf;      /* REMOTE_WRITE_CHUNK bytes: the file gets whole chunks */
    const remote_watch *watch; /* shown the bytes as they are accepted (NULL: none) */
    unsigned part;      /* the part of the object this range is, for watch */
    uint64_t got;       /* body bytes accepted this request (into the destination) */
    int too_long;       /* the body went past the destination: refused */
    int write_err;      /* the file write failed: -errno */
    long status;        /* the status the body belongs to (0: not known yet) */
    int ranged_from_0;  /* a range request starting at byte 0: a 200 may answer it */
    int ranged;         /* a range request */
    int ignored_range;  /* a 200 to a range the object's size exceeds: the server ignores Range */
    uint64_t from, to;  /* the range this attempt asked for (ranged) */
    int range_ok;       /* the response's Content-Range names exactly [from, to] */
    int wrong_range;    /* a 206 for another range than asked, or naming none: refused */
    char seen_range[48]; /* that Content-Range's value, for the error ("" if none) */
    uint64_t total;     /* the object's size in a 206's Content-Range (0: none seen) */
    uint64_t expect;    /* the object's size as the caller knows it (0: unknown) */
    char etag[REMOTE_ETAG_MAX + 1]; /* this response's strong ETag ("" if none or weak) */
    char encoding[32];  /* its Content-Encoding other than identity ("" if none) */
    char location[256]; /* its Location (a redirect's target, for the error) */
    char err[REMOTE_ERROR_BODY_MAX + 1];
    size_t err_len;
} sink;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static uint64_t seed_random(const void *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)p ^
                 ((uint64_t)getpid() << 16);
    return x ? x : 0x9e3779b97f4a7c15ull;
}

static uint64_t next_random(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

int remote_fetcher_open(remote_fetcher **out, const remote_location *loc,
                        const remote_policy *policy)
{
    *out = NULL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return sf_fail(-EIO, "libcurl did not initialise: %s", curl_easy_strerror(curl_init_rc));
    remote_fetcher *f = calloc(1, sizeof *f);
    if (!f || !(f->easy = curl_easy_init())) {
        free(f);
        return sf_fail(-ENOMEM, "out of memory for a curl handle");
    }
    f->loc = loc;
    f->policy = *policy;
    f->rnd = seed_random(f);
    *out = f;
    return 0;
}

const char *remote_fetcher_etag(const remote_fetcher *f)
{
    return f->etag;
}

int remote_fetcher_replaced(const remote_fetcher *f)
{
    return f->replaced;
}

void remote_fetcher_if_match(remote_fetcher *f, const char *etag)
{
    snprintf(f->if_match, sizeof f->if_match, "%s", etag && strlen(etag) <= REMOTE_ETAG_MAX ? etag : "");
}

void remote_fetcher_free(remote_fetcher *f)
{
    if (!f)
        return;
    curl_easy_cleanup(f->easy);
    free(f);
}

/* ---- decisions ---- */

int remote_retryable(int curl_rc, long status)
{
    switch ((CURLcode)curl_rc) {
    case CURLE_OK:
        return status >= 500 || status == 429 || status == 408;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* ---- one attempt ---- */

static int pwrite_full(int fd, const char *data, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t k = pwrite(fd, data, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        data += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

/* Writes the bytes held in s->wbuf ([written, got)) to the file. */
static int sink_flush(sink *s)
{
    assert(s->got - s->written <= REMOTE_WRITE_CHUNK);
    int rc = pwrite_full(s->fd, (const char *)s->wbuf, (size_t)(s->got - s->written),
                         s->fd_off + s->written);
    if (!rc)
        s->written = s->got;
    return rc;
}

/* Takes n body bytes for the file: into s->wbuf, written whenever it fills.
 * curl hands over pieces of any size at any offset; written as they came (4
 * ranges of one file at once), a cold epoch of tools/bench/run's
 * remote-large set (1.2 GB) spent 28% of its CPU time spinning on the
 * file's lock (ext4 takes it per write) and 7% zeroing the rest of partly
 * written pages. Whole chunks at chunk offsets: 1.2-1.3 s instead of 1.8-2.1
 * s, and 1.4 instead of 2.2-2.6 CPU seconds (chunks of 64 kB and 256 kB
 * alike; 1 MB ones were slower than none: the copy out of a buffer that
 * large misses the CPU's cache). */
static int sink_write(sink *s, const char *data, size_t n)
{
    while (n > 0) {
        size_t held = (size_t)(s->got - s->written);
        size_t k = REMOTE_WRITE_CHUNK - held < n ? REMOTE_WRITE_CHUNK - held : n;
        memcpy(s->wbuf + held, data, k);
        s->got += k, data += k, n -= k;
        if (s->got - s->written == REMOTE_WRITE_CHUNK) {
            int rc = sink_flush(s);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Starts writing back each REMOTE_WRITEBACK_STEP bytes of a download as
 * they arrive (without waiting), so that the fsync the cache does before it
 * renames the file into place waits for the last step only: a 50 MB shard's
 * fsync took 80-150 ms after the download on this VM's disk. A hint: its
 * failure changes nothing but the timing. */
static void start_writeback(sink *s)
{
    if (s->flushed > s->written)
        s->flushed = 0; /* an overlong body's range is written again */
    if (s->written - s->flushed < REMOTE_WRITEBACK_STEP)
        return;
    sync_file_range(s->fd, (off_t)(s->fd_off + s->flushed), (off_t)(s->written - s->flushed),
                    SYNC_FILE_RANGE_WRITE);
    s->flushed = s->written;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    sink *s = arg;
    size_t n = size * nmemb;
    if (!s->status)
        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    if (s->status < 200 || s->status > 299) {
        /* An error's body: its start is the store's message. */
        size_t room = REMOTE_ERROR_BODY_MAX - s->err_len;
        size_t k = n < room ? n : room;
        memcpy(s->err + s->err_len, data, k);
        s->err_len += k;
        return n;
    }
    if (s->ranged && s->status == 200 && !s->ranged_from_0) {
        s->ignored_range = 1; /* the whole object, not the range: never copied */
        return 0;
    }
    if (s->ranged && ((s->status == 206 && !s->range_ok) || (s->status != 200 && s->status != 206))) {
        /* Bytes of another range (a cache keyed on the URL alone, a broken
         * server) would land where the asked ones belong: never copied.
         * Another 2xx (203 from a transforming proxy, 226, ...) says not
         * which bytes it holds: refused the same way. */
        s->wrong_range = 1;
        return 0;
    }
    /* A 200 to a range from byte 0 is the whole object: longer than the
     * range, the server ignored Range (no retry makes it honour it). */
    int whole_object = s->ranged && s->status == 200;
    if (s->fd >= 0) {
        if (n > s->cap - s->got) {
            s->too_long = !whole_object;
            s->ignored_range = whole_object;
            return 0;
        }
        if (s->watch)
            s->watch->bytes(s->watch->ctx, s->part, s->fd_off + s->got, (const uint8_t *)data, n);
        int rc = sink_write(s, data, n);
        if (rc) {
            s->write_err = rc;
            return 0;
        }
        start_writeback(s);
        return n;
    }
    if (s->grow) {
        if (n > s->max - s->got) {
            s->too_long = 1;
            return 0;
        }
        if (s->got + n > s->cap) {
            uint64_t cap = s->cap ? s->cap : 4096;
            while (cap < s->got + n)
                cap *= 2;
            if (cap > s->max)
                cap = s->max;
            uint8_t *p = realloc(s->buf, (size_t)cap ? (size_t)cap : 1);
            if (!p) {
                s->write_err = -ENOMEM;
                return 0;
            }
            s->buf = p;
            s->cap = cap;
        }
    } else if (n > s->cap - s->got) {
        /* More than the range asked for: never written past the buffer. */
        s->too_long = !whole_object;
        s->ignored_range = whole_object;
        return 0;
    }
    memcpy(s->buf + s->got, data, n);
    s->got += n;
    return n;
}

/* A decimal number at *p (before end), at most 19 digits: 0 with *p past
 * it, or -1 when there is none. */
static int parse_u64(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    int digits = 0;
    for (; *p < end && **p >= '0' && **p <= '9' && digits < 19; (*p)++)
        v = v * 10 + (uint64_t)(**p - '0'), digits++;
    *out = v;
    return digits ? 0 : -1;
}

/* Content-Range: bytes A-B/TOTAL of a 206. A-B must be the range asked
 * for (range_ok; on_body refuses the body otherwise), and TOTAL is the
 * object's size, which the caller checks against the manifest's
 * (remote_fetch_range_sized). */
/* When the header line [data, end) is `key` (lower case, with its ':'):
 * its value, trimmed, untrusted bytes shown as '?', cut to cap - 1, into
 * out; 1. Else 0. */
static int header_value(const char *data, const char *end, const char *key, char *out, size_t cap)
{
    size_t k = strlen(key);
    if ((size_t)(end - data) <= k || strncasecmp(data, key, k) != 0)
        return 0;
    const char *v = data + k;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t n = 0;
    for (; v < end && n < cap - 1; v++)
        out[n++] = *v >= 0x20 && *v < 0x7f ? *v : '?';
    out[n] = '\0';
    return 1;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    sink *s = arg;
    size_t n = size * nmemb;
    const char *end = data + n;
    if (n >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        s->range_ok = 0; /* a status line: a new response's headers follow */
        s->total = 0;
        s->seen_range[0] = '\0';
        s->etag[0] = s->encoding[0] = s->location[0] = '\0';
        return n;
    }
    if (header_value(data, end, "content-encoding:", s->encoding, sizeof s->encoding)) {
        if (!strcasecmp(s->encoding, "identity"))
            s->encoding[0] = '\0';
        return n;
    }
    if (header_value(data, end, "location:", s->location, sizeof s->location))
        return n;
    static const char etag_key[] = "etag:";
    if (n > sizeof etag_key - 1 && strncasecmp(data, etag_key, sizeof etag_key - 1) == 0) {
        /* Untrusted: kept only whole, printable and strong ("W/..." never
         * matches an If-Match, which compares strongly). */
        const char *v = data + sizeof etag_key - 1, *e = end;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        size_t len = (size_t)(e - v);
        int ok = len >= 2 && len <= REMOTE_ETAG_MAX && v[0] == '"' && v[len - 1] == '"';
        for (size_t i = 0; ok && i < len; i++)
            ok = v[i] > 0x20 && v[i] < 0x7f;
        if (ok) {
            memcpy(s->etag, v, len);
            s->etag[len] = '\0';
        }
        return n;
    }
    static const char key[] = "content-range:";
    if (n <= sizeof key - 1 || strncasecmp(data, key, sizeof key - 1) != 0)
        return n;
    const char *p = data + sizeof key - 1;
    while (p < end && *p == ' ')
        p++;
    size_t shown = 0; /* curl's header line is not NUL-terminated */
    while (p + shown < end && p[shown] != '\r' && p[shown] != '\n' &&
           shown < sizeof s->seen_range - 1) {
        char ch = p[shown]; /* untrusted: printable only */
        s->seen_range[shown++] = ch >= 0x20 && ch < 0x7f ? ch : '?';
    }
    s->seen_range[shown] = '\0';
    uint64_t a, b, total;
    if (end - p < 6 || strncasecmp(p, "bytes ", 6) != 0)
        return n;
    p += 6;
    if (parse_u64(&p, end, &a) || p >= end || *p++ != '-' || parse_u64(&p, end, &b) || p >= end ||
        *p++ != '/')
        return n;
    s->range_ok = s->ranged && a == s->from && b == s->to;
    s->total = parse_u64(&p, end, &total) ? 0 : total; /* a "*" total (size unknown): none */
    return n;
}

/* How an attempt ended. */
typedef struct outcome {
    CURLcode curl;
    long status;
    int short_body;   /* 2xx, but fewer bytes than asked for */
    int encoded;      /* 2xx with a Content-Encoding (gzip...): its bytes are not the object's */
    int ignored_range;/* 200 to a range that is not the whole object */
    int wrong_range;  /* 206 for another range than asked, or naming none */
    int wrong_size;   /* the store's object is not the size the caller expects */
} outcome;

/* One GET of url (with Range bytes=from-to when ranged). */
static int attempt(remote_fetcher *f, const char *url, int ranged, uint64_t from, uint64_t to,
                   sink *s, outcome *o)
{
    CURL *c = f->easy;
    curl_easy_reset(c);
    char range[64];
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)f->policy.timeout_ms);
    /* Less than REMOTE_MIN_RATE for timeout_ms: the connection is stalled. A
     * limit of 1 byte/s let a server trickling 2 bytes a second hold one
     * request for as long as it liked (a manifest: 10 minutes). */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, (long)REMOTE_MIN_RATE);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     (long)(f->policy.timeout_ms + 999) / 1000 ? (long)(f->policy.timeout_ms + 999) / 1000 : 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    /* 16 KB by default: a shard's download was one write per 16 KB. */
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, (long)REMOTE_RECV_BUFFER);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, f->curl_err);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (ranged) {
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)from, (unsigned long long)to);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    /* A whole object of at most s->max bytes (a manifest): a Content-Length
     * past it is refused before its body (it was once s->max bytes, up to
     * 65 MB, had arrived). */
    if (s->grow && s->max)
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->max);
    int rc = remote_curl_prepare(c, f->loc);
    if (rc)
        return rc;
    struct curl_slist *headers = NULL;
    if (f->if_match[0]) {
        /* The location's own headers (signing) and If-Match: one list. */
        char line[sizeof f->if_match + 16];
        snprintf(line, sizeof line, "If-Match: %s", f->if_match);
        struct curl_slist *h;
        if (remote_headers_append(&headers, f->loc, NULL) != 0 ||
            !(h = curl_slist_append(headers, line))) {
            curl_slist_free_all(headers);
            return sf_fail(-ENOMEM, "out of memory");
        }
        headers = h;
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    }
    f->curl_err[0] = '\0';
    s->easy = c;
    s->status = 0;
    s->err_len = 0;
    s->ranged = ranged;
    s->ranged_from_0 = ranged && from == 0;
    s->ignored_range = 0;
    s->from = from;
    s->to = to;
    s->range_ok = 0;
    s->wrong_range = 0;
    s->seen_range[0] = '\0';
    s->total = 0;
    s->etag[0] = s->encoding[0] = s->location[0] = '\0';
    memset(o, 0, sizeof *o);
    o->curl = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &o->status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(headers);
    if (o->curl == CURLE_FILESIZE_EXCEEDED && s->grow) {
        s->too_long = 1; /* as a body that went past s->max: SF_E_LIMIT, not retried */
        o->curl = CURLE_WRITE_ERROR;
    }
    o->ignored_range = s->ignored_range;
    o->wrong_range = s->wrong_range;
    /* Whatever became of the transfer: the size is known once the headers
     * came, and a range that arrived whole before a failure is taken as done
     * (request_url), so its object must be checked here. */
    if (s->expect && o->status >= 200 && o->status <= 299) {
        curl_off_t whole = -1;
        if (o->status == 206)
            o->wrong_size = s->total && s->total != s->expect;
        else if (curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &whole) == CURLE_OK &&
                 whole >= 0)
            o->wrong_size = (uint64_t)whole != s->expect; /* a 200: the whole object */
        if (o->wrong_size && o->status != 206)
            s->total = (uint64_t)whole; /* a Content-Range's total is not this body's */
    }
    return 0;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The code of a final failure: -ENOENT for an object the store does not
 * have (404), SF_E_REMOTE for the rest. */
static int failure_code(const outcome *o)
{
    return o->curl == CURLE_OK && o->status == 404 ? -ENOENT : SF_E_REMOTE;
}

/* Whether this process has (nearly) all the descriptors RLIMIT_NOFILE
 * allows open: libcurl reports a socket() that failed with EMFILE as
 * "Couldn't connect to server", with no errno (CURLINFO_OS_ERRNO is 0), so
 * a connection's final failure looks at the count itself. Listing
 * /proc/self/fd takes a descriptor too: failing with EMFILE says the same. */
static int out_of_descriptors(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return errno == EMFILE || errno == ENFILE;
    uint64_t open_now = 0;
    for (struct dirent *e; (e = readdir(d));)
        open_now += e->d_name[0] != '.';
    closedir(d);
    return open_now + 4 >= (uint64_t)rl.rlim_cur; /* 4: the listing's own, and a margin */
}

/* The final error, naming the object, the range and why. */
static int fail_request(remote_fetcher *f, const char *name, int ranged, uint64_t from,
                        uint64_t to, const outcome *o, const sink *s, uint32_t attempts)
{
    char what[384], msg[REMOTE_MESSAGE_MAX + 8] = "", range[80] = "";
    if (ranged)
        snprintf(range, sizeof range, " (bytes %llu-%llu)", (unsigned long long)from,
                 (unsigned long long)to);
    f->replaced = o->wrong_size || (o->curl == CURLE_OK && o->status == 404) ||
                  (o->curl == CURLE_OK && o->status == 412 && f->if_match[0]);
    if (o->wrong_size)
        return sf_fail(SF_E_REMOTE, "%s/%s: the store's object is %llu bytes, the manifest "
                                     "says %llu (replaced since it was packed, or not this "
                                     "dataset's): upload the dataset again",
                       remote_location_display(f->loc), name, (unsigned long long)s->total,
                       (unsigned long long)s->expect);
    if (o->curl == CURLE_OK && o->status == 412 && f->if_match[0])
        return sf_fail(SF_E_REMOTE, "%s/%s%s: HTTP 412: the object changed at the store since the "
                                     "dataset was opened (its ETag is no longer %s): open the "
                                     "dataset again",
                       remote_location_display(f->loc), name, range, f->if_match);
    if (o->encoded)
        return sf_fail(SF_E_REMOTE, "%s/%s%s: HTTP %ld with Content-Encoding: %s, not asked for: "
                                     "the server must send the files as they are (nginx: no gzip "
                                     "for .sfs and .sfm)",
                       remote_location_display(f->loc), name, range, o->status, s->encoding);
    if (o->curl == CURLE_OK && o->status >= 300 && o->status <= 399) {
        /* Without its query: a presigned target's signature is a credential. */
        int shown = (int)strcspn(s->location, "?");
        return sf_fail(SF_E_REMOTE, "%s/%s%s: HTTP %ld, a redirect%s%.*s%s: redirects are not "
                                     "followed; give the final URL",
                       remote_location_display(f->loc), name, range, o->status,
                       s->location[0] ? " to " : "", shown, s->location,
                       s->location[shown] ? "?..." : "");
    }
    if (o->ignored_range)
        snprintf(what, sizeof what, "HTTP 200 to a range request: the server does not support "
                                    "Range, which remote datasets need");
    else if (o->wrong_range && o->status != 206)
        snprintf(what, sizeof what, "HTTP %ld to a range request: neither 206 with the bytes asked "
                                    "for nor 200 with the whole object",
                 o->status);
    else if (o->wrong_range && s->seen_range[0])
        snprintf(what, sizeof what, "HTTP 206 with Content-Range \"%s\", not the bytes asked for",
                 s->seen_range);
    else if (o->wrong_range)
        snprintf(what, sizeof what, "HTTP 206 without a Content-Range naming the bytes sent");
    else if (o->curl != CURLE_OK && o->curl != CURLE_WRITE_ERROR)
        snprintf(what, sizeof what, "%s%s", f->curl_err[0] ? f->curl_err : curl_easy_strerror(o->curl),
                 o->curl == CURLE_COULDNT_CONNECT && out_of_descriptors() ? sf_errno_hint(EMFILE) : "");
    else if (s->too_long)
        snprintf(what, sizeof what, "HTTP %ld: the body is longer than the %llu bytes asked for",
                 o->status, (unsigned long long)(ranged ? to - from + 1 : s->max));
    else if (o->short_body)
        snprintf(what, sizeof what, "HTTP %ld: the body ended after %llu of %llu bytes",
                 o->status, (unsigned long long)s->got, (unsigned long long)(to - from + 1));
    else {
        remote_store_message(msg, sizeof msg, s->err, s->err_len);
        snprintf(what, sizeof what, "HTTP %ld%s%s", o->status, msg[0] ? ": " : "", msg);
    }
    int code = failure_code(o);
    if (s->grow && s->too_long)
        code = SF_E_LIMIT;
    return sf_fail(code, "%s/%s%s: %s (%u attempt%s)", remote_location_display(f->loc), name,
                   range, what, attempts, attempts == 1 ? "" : "s");
}

/* GETs object `name` into s: the range [from, from + len) (ranged), or
 * the whole object. A retried range resumes after the bytes already in. */
static int request_url(remote_fetcher *f, const char *url, const char *name, int ranged, uint64_t from,
                       uint64_t len, sink *s)
{
    int rc = 0;
    outcome o;
    uint32_t tries = 0;
    f->replaced = 0;
    for (;;) {
        tries++;
        uint64_t start = from + s->got, last = from + len - 1;
        if (s->grow) {
            s->got = 0; /* a whole object starts again */
            start = from;
        }
        if ((rc = attempt(f, url, ranged, start, last, s, &o)))
            break;
        if (s->write_err) {
            rc = s->write_err == -ENOMEM ? sf_fail(-ENOMEM, "out of memory") : s->write_err;
            if (s->write_err != -ENOMEM)
                sf_fail(rc, "writing the download of %s/%s: %s", remote_location_display(f->loc),
                        name, strerror(-rc));
            break;
        }
        if (o.ignored_range || o.wrong_size) {
            rc = fail_request(f, name, ranged, from, last, &o, s, tries);
            break;
        }
        /* Every byte of the range arrived, then the transfer failed (a
         * Content-Length past the body, a reset before a chunked body's
         * end): done. A retry resumed at from + got, a range starting past
         * its end, which a server refuses (416) or ignores (200, the whole
         * object: reported as a server without Range). The bytes are
         * checked as any others are. */
        if (ranged && s->got == len && o.curl != CURLE_OK && remote_retryable(o.curl, 0) &&
            (o.status == 206 || o.status == 200) && !s->too_long && !s->wrong_range)
            o.curl = CURLE_OK;
        int ok2xx = o.curl == CURLE_OK && o.status >= 200 && o.status <= 299;
        if (ok2xx && s->encoding[0]) {
            /* compressed bytes as the object's: open called the dataset corrupt (bad
             * magic, exit 2) */
            o.encoded = 1;
            rc = fail_request(f, name, ranged, from, last, &o, s, tries);
            break;
        }
        if (ok2xx && ranged && s->got < len)
            o.short_body = 1;
        if (ok2xx && !o.short_body && !s->too_long) {
            memcpy(f->etag, s->etag, sizeof f->etag);
            break; /* done */
        }
        int again = o.short_body || o.wrong_range || remote_retryable(o.curl, o.status) ||
                    (o.curl == CURLE_WRITE_ERROR && s->too_long && !s->grow);
        if (!again || tries > f->policy.retries) {
            rc = fail_request(f, name, ranged, from, last, &o, s, tries);
            break;
        }
        if (s->too_long && !s->grow) {
            s->got = s->written = 0; /* an overlong body is not trusted: that range again */
            s->too_long = 0;
        }
        sleep_ms(remote_backoff_ms(tries, next_random(&f->rnd)));
    }
    return rc;
}

/* request_url of object `name`. */
static int request(remote_fetcher *f, const char *name, int ranged, uint64_t from, uint64_t len,
                   sink *s)
{
    char *url = NULL;
    int rc = remote_object_url(&url, f->loc, name);
    if (rc)
        return rc;
    rc = request_url(f, url, name, ranged, from, len, s);
    free(url);
    return rc;
}

int remote_fetch_range(remote_fetcher *f, const char *name, uint64_t off, uint64_t len, void *buf)
{
    return remote_fetch_range_sized(f, name, 0, off, len, buf);
}

int remote_fetch_range_sized(remote_fetcher *f, const char *name, uint64_t size, uint64_t off,
                             uint64_t len, void *buf)
{
    if (len == 0)
        return 0;
    sink s = {.buf = buf, .cap = len, .fd = -1, .expect = size};
    return request(f, name, 1, off, len, &s);
}

int remote_fetch_object(remote_fetcher *f, const char *name, uint64_t max, uint8_t **out,
                        uint64_t *len)
{
    sink s = {.grow = 1, .max = max, .fd = -1};
    int rc = request(f, name, 0, 0, 0, &s);
    if (rc) {
        free(s.buf);
        return rc;
    }
    *out = s.buf ? s.buf : malloc(1);
    *len = s.got;
    return *out ? 0 : sf_fail(-ENOMEM, "out of memory");
}

int remote_fetch_listing(remote_fetcher *f, const char *query, uint64_t max, uint8_t **out, uint64_t *len)
{
    char *url = NULL, label[64];
    int rc = remote_bucket_url(&url, f->loc, query);
    if (rc)
        return rc;
    snprintf(label, sizeof label, "?%.40s%s", query, strlen(query) > 40 ? "..." : ""); /* in errors */
    sink s = {.grow = 1, .max = max, .fd = -1};
    rc = request_url(f, url, label, 0, 0, 0, &s);
    free(url);
    if (rc) {
        free(s.buf);
        return rc;
    }
    *out = s.buf ? s.buf : malloc(1);
    *len = s.got;
    return *out ? 0 : sf_fail(-ENOMEM, "out of memory");
}

/* Bytes [off, off + len) of the `size`-byte object `name` into fd at the
 * same offset. */
static int fetch_range_to_fd(remote_fetcher *f, const char *name, uint64_t size, uint64_t off,
                             uint64_t len, int fd, const remote_watch *watch, unsigned part)
{
    f->replaced = 0; /* not the last request's: an error before the request is not one */
    if (len == 0)
        return 0;
    sink s = {.cap = len, .fd = fd, .fd_off = off, .expect = size,
              .wbuf = malloc(REMOTE_WRITE_CHUNK), .watch = watch, .part = part};
    if (!s.wbuf)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = request(f, name, 1, off, len, &s);
    if (!rc && (rc = sink_flush(&s))) /* the last chunk (got is len) */
        sf_fail(rc, "writing the download of %s/%s: %s", remote_location_display(f->loc), name,
                strerror(-rc));
    free(s.wbuf);
    if (!rc && s.got > s.flushed) /* the last step's write-back too */
        sync_file_range(fd, (off_t)(off + s.flushed), (off_t)(s.got - s.flushed),
                        SYNC_FILE_RANGE_WRITE);
    return rc;
}

int remote_fetch_to_fd(remote_fetcher *f, const char *name, uint64_t size, int fd)
{
    return fetch_range_to_fd(f, name, size, 0, size, fd, NULL, 0);
}

/* ---- the pool ---- */

/* Fetchers a pool keeps idle, each with its connection open, for the next
 * take: a 16th of the soft RLIMIT_NOFILE, between 4 and 64; more are
 * closed as they are given back. Open reads the shards' metadata on 16
 * threads and a cold epoch downloads on several, and a pool that kept every
 * fetcher held 48 sockets through the epoch: beside the dataset's half of
 * the limit, a reader under `ulimit -n 128` ran out of descriptors. Under
 * the default 1,024 the 64 cover every thread that fetches at once (mode
 * direct's I/O threads take one per record: fewer kept would connect
 * again). */
#define REMOTE_POOL_IDLE_MIN 4u
#define REMOTE_POOL_IDLE_MAX 64u

struct remote_pool {
    const remote_location *loc;
    remote_policy policy;
    pthread_mutex_t lock;
    remote_fetcher *idle;
    unsigned idle_n, idle_cap;
};

int remote_pool_open(remote_pool **out, const remote_location *loc, const remote_policy *policy)
{
    remote_pool *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    p->loc = loc;
    p->policy = *policy;
    p->idle_cap = (unsigned)sf_nofile_share(16, REMOTE_POOL_IDLE_MIN, REMOTE_POOL_IDLE_MAX);
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return 0;
}

void remote_pool_free(remote_pool *p)
{
    if (!p)
        return;
    while (p->idle) {
        remote_fetcher *f = p->idle;
        p->idle = f->next;
        remote_fetcher_free(f);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int remote_pool_take(remote_fetcher **out, remote_pool *p)
{
    pthread_mutex_lock(&p->lock);
    remote_fetcher *f = p->idle;
    if (f) {
        p->idle = f->next;
        p->idle_n--;
    }
    pthread_mutex_unlock(&p->lock);
    if (f) {
        *out = f;
        return 0;
    }
    return remote_fetcher_open(out, p->loc, &p->policy);
}

void remote_pool_give(remote_pool *p, remote_fetcher *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&p->lock);
    int keep = p->idle_n < p->idle_cap;
    if (keep) {
        f->next = p->idle;
        p->idle = f;
        p->idle_n++;
    }
    pthread_mutex_unlock(&p->lock);
    if (!keep)
        remote_fetcher_free(f);
}

/* ---- one object in parts at once ---- */

_Static_assert(REMOTE_PARTS <= REMOTE_JOBS_THREADS_MAX, "more threads than remote_jobs_run runs");

typedef struct parts_run {
    remote_pool *pool;
    const char *name;
    const char *etag; /* sent as If-Match with every part, or NULL */
    uint64_t size, part;
    int fd;
    const remote_watch *watch;
    _Atomic uint64_t next;  /* the next part to take */
    remote_jobs jobs;       /* a job: a part */
} parts_run;

static void *parts_worker(void *arg)
{
    parts_run *run = arg;
    for (uint64_t k; (k = atomic_fetch_add(&run->next, 1)) * run->part < run->size;) {
        if (remote_jobs_failed_before(&run->jobs, UINT64_MAX))
            break; /* the download failed: no more parts */
        uint64_t off = k * run->part;
        uint64_t len = run->size - off < run->part ? run->size - off : run->part;
        if (run->watch)
            run->watch->begin(run->watch->ctx, (unsigned)k, off, off + len);
        remote_fetcher *f;
        int replaced = 0;
        int rc = remote_pool_take(&f, run->pool);
        if (!rc) {
            remote_fetcher_if_match(f, run->etag);
            rc = fetch_range_to_fd(f, run->name, run->size, off, len, run->fd, run->watch,
                                   (unsigned)k);
            replaced = rc && f->replaced;
            remote_fetcher_if_match(f, NULL);
            remote_pool_give(run->pool, f);
        }
        if (!rc)
            continue;
        remote_jobs_note_failure(&run->jobs, k, rc, (uint64_t)replaced);
        break; /* the others finish the parts they fetch */
    }
    return NULL;
}

#ifdef SHARDFEED_TEST_HOOKS
/* SHARDFEED_TEST_PART_MIN=BYTES: the least bytes a part needs, for the
 * tests' small shards to come in parts (a part stays whole write chunks).
 * Compiled only into builds with the tests. */
static uint64_t part_min(void)
{
    const char *v = getenv("SHARDFEED_TEST_PART_MIN");
    unsigned long long n = v && *v ? strtoull(v, NULL, 10) : 0;
    return n ? n : REMOTE_PART_MIN;
}
#else
static uint64_t part_min(void)
{
    return REMOTE_PART_MIN;
}
#endif

int remote_pool_fetch_to_fd(remote_pool *p, const char *name, uint64_t size, const char *etag, int fd,
                            unsigned max_parts, const remote_watch *watch, int *replaced)
{
    assert(max_parts >= 1 && max_parts <= REMOTE_PARTS);
    uint64_t parts = (size + part_min() - 1) / part_min();
    parts = parts < 1 ? 1 : parts > max_parts ? max_parts : parts;
    /* Parts of whole write chunks: each writes the file at chunk offsets. */
    uint64_t part = (size + parts - 1) / parts;
    part = (part + REMOTE_WRITE_CHUNK - 1) / REMOTE_WRITE_CHUNK * REMOTE_WRITE_CHUNK;
    parts_run run = {.pool = p, .name = name, .etag = etag, .size = size, .fd = fd, .part = part,
                     .watch = watch};
    remote_jobs_init(&run.jobs);
    remote_jobs_run((unsigned)parts, parts_worker, &run);
    if (replaced)
        *replaced = run.jobs.rc && run.jobs.detail; /* the reported failure's */
    return remote_jobs_finish(&run.jobs);
}

#else /* !SF_HAVE_REMOTE */

int remote_retryable(int curl_rc, long status)
{
    (void)curl_rc, (void)status;
    return 0;
}

static int no_curl(void)
{
    return sf_fail(SF_E_UNSUPPORTED, "this shardfeed was built without libcurl: no remote datasets");
}

int remote_fetcher_open(remote_fetcher **out, const remote_location *loc,
                        const remote_policy *policy)
{
    (void)loc, (void)policy;
    *out = NULL;
    return no_curl();
}

void remote_fetcher_free(remote_fetcher *f)
{
    (void)f;
}

const char *remote_fetcher_etag(const remote_fetcher *f)
{
    (void)f;
    return "";
}

int remote_fetcher_replaced(const remote_fetcher *f)
{
    (void)f;
    return 0;
}

void remote_fetcher_if_match(remote_fetcher *f, const char *etag)
{
    (void)f, (void)etag;
}

int remote_fetch_range(remote_fetcher *f, const char *name, uint64_t off, uint64_t len, void *buf)
{
    (void)f, (void)name, (void)off, (void)len, (void)buf;
    return no_curl();
}

int remote_fetch_range_sized(remote_fetcher *f, const char *name, uint64_t size, uint64_t off,
                             uint64_t len, void *buf)
{
    (void)size;
    return remote_fetch_range(f, name, off, len, buf);
}

int remote_fetch_object(remote_fetcher *f, const char *name, uint64_t max, uint8_t **out,
                        uint64_t *len)
{
    (void)f, (void)name, (void)max, (void)out, (void)len;
    return no_curl();
}

int remote_fetch_to_fd(remote_fetcher *f, const char *name, uint64_t size, int fd)
{
    (void)f, (void)name, (void)size, (void)fd;
    return no_curl();
}

int remote_fetch_listing(remote_fetcher *f, const char *query, uint64_t max, uint8_t **out, uint64_t *len)
{
    (void)f, (void)query, (void)max, (void)out, (void)len;
    return no_curl();
}

int remote_pool_fetch_to_fd(remote_pool *p, const char *name, uint64_t size, const char *etag, int fd,
                            unsigned max_parts, const remote_watch *watch, int *replaced)
{
    (void)p, (void)name, (void)size, (void)etag, (void)fd, (void)max_parts, (void)watch;
    if (replaced)
        *replaced = 0;
    return no_curl();
}

int remote_pool_open(remote_pool **out, const remote_location *loc, const remote_policy *policy)
{
    (void)loc, (void)policy;
    *out = NULL;
    return no_curl();
}

void remote_pool_free(remote_pool *p)
{
    (void)p;
}

int remote_pool_take(remote_fetcher **out, remote_pool *p)
{
    (void)p;
    *out = NULL;
    return no_curl();
}

void remote_pool_give(remote_pool *p, remote_fetcher *f)
{
    (void)p, (void)f;
}

#endif
