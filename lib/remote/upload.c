/* sf_push: a local dataset up to an S3 store (or a web server taking PUT),
 * shards first, manifest last (shardfeed/push.h).
 *
 * The manifest's bytes are read once, at the start, and those bytes are
 * what goes up last; every shard is checked against them (header, footer,
 * index: sf_shard_load_meta) twice: all of them before anything is
 * uploaded, every record's bytes then too (sf_shard_scan_data, as verify
 * does), so a damaged dataset uploads nothing; and each again on the
 * descriptor it is uploaded from (header, footer, index), so a folder
 * re-packed during the push fails it instead of mixing two datasets.
 * A pack or merge writing the folder (its .shardfeed.lock held) is refused,
 * and one started during the push is refused in turn (lock_shared).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error_internal.h"
#include "format.h"
#include "path.h"
#include "payload_hash.h"
#include "remote_list.h"
#include "remote_url.h"
#include "shard_file.h"
#include "shardfeed/push.h"
#include "shardfeed/remote.h"
#include "shardfeed_config.h"

#if SF_HAVE_REMOTE
#include <curl/curl.h>

#define RESPONSE_CAP (64u << 10) /* an error or a multipart answer; more is dropped */
#define MAX_PARTS 10000u         /* S3's limit per upload */
#define LOCK_NAME ".shardfeed.lock"
/* Metadata a multipart upload's object carries: a token of that upload, so a
 * retried completion whose first answer was lost can tell its own object
 * from one an earlier push left under the same name. */
#define UPLOAD_TOKEN_HEADER "x-amz-meta-shardfeed-upload"

/* ---- One request, and its retries -------------------------------------------- */

typedef struct push_ctx {
    const remote_location *loc;
    CURL *curl;
    int retries;
    unsigned backoff_ms;
    unsigned seed; /* jitter */
    const char *extra_header; /* one more header on each attempt of a request, or NULL */
    bool last_retryable;      /* the last request's final failure was worth retrying */
    bool replaced;            /* --overwrite deleted the manifest of the dataset that was there */
    const volatile sig_atomic_t *cancel; /* sf_push_opts.cancel, or NULL */
    bool uncancellable;       /* cleaning up (an abort, a DELETE) or the manifest: runs to its end */
    char errbuf[CURL_ERROR_SIZE];
} push_ctx;

/* Whether the caller asked the push to stop (sf_push_opts.cancel). */
static bool cancelled(const push_ctx *p)
{
    return p->cancel && *p->cancel && !p->uncancellable;
}

static int cancel_error(void)
{
    return sf_fail(-ECANCELED, "push cancelled");
}

/* curl's progress callback: non-zero ends the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return cancelled(arg);
}

/* What a request sends: nothing, memory, or a range of a file. */
typedef struct body_src {
    const uint8_t *mem;
    int fd;
    uint64_t off, len, pos;
    int read_errno; /* the local file failed or shrank (EIO): the upload stopped */
} body_src;

typedef struct response {
    long status;
    char body[RESPONSE_CAP + 1];
    size_t body_len;
    char etag[256];
    int64_t total_size; /* from Content-Range ("bytes 0-0/SIZE"), or -1 */
    char upload_token[64]; /* x-amz-meta-shardfeed-upload (UPLOAD_TOKEN_HEADER) */
} response;

static size_t read_body(char *dst, size_t size, size_t n, void *arg)
{
    body_src *b = arg;
    uint64_t want = (uint64_t)size * n, left = b->len - b->pos;
    if (want > left)
        want = left;
    if (want == 0)
        return 0;
    if (b->mem) {
        memcpy(dst, b->mem + b->pos, want);
    } else {
        ssize_t got = pread(b->fd, dst, want, (off_t)(b->off + b->pos));
        if (got <= 0) { /* the file shrank or failed: abort, never send short */
            b->read_errno = got < 0 ? errno : EIO;
            return CURL_READFUNC_ABORT;
        }
        want = (uint64_t)got;
    }
    b->pos += want;
    return want;
}

static int seek_body(void *arg, curl_off_t off, int origin)
{
    body_src *b = arg;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > b->len)
        return CURL_SEEKFUNC_FAIL;
    b->pos = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

static size_t keep_response(char *src, size_t size, size_t n, void *arg)
{
    response *r = arg;
    size_t len = size * n, room = RESPONSE_CAP - r->body_len;
    memcpy(r->body + r->body_len, src, len < room ? len : room);
    r->body_len += len < room ? len : room;
    r->body[r->body_len] = '\0';
    return len;
}

/* A header's value when `line` is "name: value" (any case), trimmed; NULL otherwise. */
static const char *header_value(const char *line, size_t len, const char *name, size_t *vlen)
{
    size_t n = strlen(name);
    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return NULL;
    const char *v = line + n + 1;
    size_t vl = len - n - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
        vl--;
    *vlen = vl;
    return v;
}

/* Keeps the ETag (a part's, for completing a multipart upload) and the
 * object size a Content-Range gives. */
static size_t keep_headers(char *line, size_t size, size_t n, void *arg)
{
    response *r = arg;
    size_t len = size * n, vl;
    const char *v;
    if ((v = header_value(line, len, "etag", &vl)) != NULL && vl < sizeof r->etag) {
        memcpy(r->etag, v, vl);
        r->etag[vl] = '\0';
    } else if ((v = header_value(line, len, UPLOAD_TOKEN_HEADER, &vl)) != NULL &&
               vl < sizeof r->upload_token) {
        memcpy(r->upload_token, v, vl);
        r->upload_token[vl] = '\0';
    } else if ((v = header_value(line, len, "content-range", &vl)) != NULL) {
        const char *slash = memchr(v, '/', vl);
        char digits[24];
        size_t dl = slash ? vl - (size_t)(slash + 1 - v) : 0;
        if (dl > 0 && dl < sizeof digits) {
            memcpy(digits, slash + 1, dl);
            digits[dl] = '\0';
            char *end;
            long long t = strtoll(digits, &end, 10);
            if (*end == '\0' && t >= 0)
                r->total_size = t;
        }
    }
    return len;
}

/* The text of <tag>...</tag> in an S3 XML answer, copied into out ("" when absent). */
static void xml_text(char *out, size_t cap, const char *xml, const char *tag)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    out[0] = '\0';
    const char *s = strstr(xml, open);
    const char *e = s ? strstr(s + strlen(open), close) : NULL;
    if (!e)
        return;
    s += strlen(open);
    size_t n = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
    for (size_t i = 0; i < n; i++) /* printable only: it goes into messages and URLs */
        out[i] = (s[i] >= ' ' && s[i] <= '~') ? s[i] : '?';
    out[n] = '\0';
}

/* The store received other bytes than the ones whose hash was signed (or
 * whose Content-MD5 was sent): damaged on the way, or the local file
 * changed after it was hashed. */
static bool body_mismatch(const response *r)
{
    return r->status == 400 && (strstr(r->body, "<Code>XAmzContentSHA256Mismatch</Code>") != NULL ||
                                strstr(r->body, "<Code>BadDigest</Code>") != NULL);
}

/* A status or transport failure worth another attempt. S3 answers some
 * failures of CompleteMultipartUpload with 200 and an <Error> body. */
static bool retryable(CURLcode cc, const response *r, bool error_body)
{
    if (cc != CURLE_OK)
        return cc != CURLE_URL_MALFORMAT && cc != CURLE_UNSUPPORTED_PROTOCOL &&
               cc != CURLE_ABORTED_BY_CALLBACK && cc != CURLE_READ_ERROR && cc != CURLE_OUT_OF_MEMORY &&
               cc != CURLE_LOGIN_DENIED;
    /* 408, and S3's 400 RequestTimeout (the store gave up on a slow body): try again, as AWS's
     * SDKs do; a body that arrived damaged is sent again too (a file changed since it was
     * hashed fails the same way every time, and the push with it). */
    return r->status == 429 || r->status >= 500 || r->status == 408 || error_body || body_mismatch(r) ||
           (r->status == 400 && strstr(r->body, "<Code>RequestTimeout</Code>") != NULL);
}

static void backoff(push_ctx *p, int attempt)
{
    uint64_t cap = (uint64_t)p->backoff_ms << (attempt < 7 ? attempt : 7);
    if (cap > (uint64_t)p->backoff_ms * 100)
        cap = (uint64_t)p->backoff_ms * 100;
    uint64_t ms = cap / 2 + (uint64_t)rand_r(&p->seed) % (cap / 2 + 1); /* jitter in [cap/2, cap] */
    /* In steps of at most 50 ms: a cancel (sf_push_opts.cancel) ends the wait. */
    for (uint64_t left = ms; left && !cancelled(p);) {
        uint64_t step = left < 50 ? left : 50;
        struct timespec ts = {0, (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        left -= step;
    }
}

/* One request with its retries (GET reads the first byte only: it asks
 * whether an object exists, and a refusal still brings the store's XML).
 * `what` names the object in errors (the
 * dataset URL's display form and the object name: never a secret). 0 when
 * the final answer is 2xx (r->status), else SF_E_REMOTE naming the URL,
 * the status and the store's <Code>/<Message>, or curl's reason. A 404 is
 * returned as 0 with r->status 404 when `allow_404`. */
/* An attempt's common setup on the reset handle (its connection cache
 * kept): the URL, the stall rule, the body to `write` (with `wdata`), the
 * location's TLS and auth settings. 0 or a negative code. */
static int attempt_setup(push_ctx *p, const char *url, curl_write_callback write, void *wdata)
{
    CURL *c = p->curl;
    curl_easy_reset(c);
    p->errbuf[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, p->errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* a stalled transfer is a failure */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, wdata);
    return remote_curl_prepare(c, p->loc);
}

/* Runs the attempt set up, ended at once by a cancel (also one before it
 * starts): then CURLE_ABORTED_BY_CALLBACK with cancelled(p). */
static CURLcode attempt_perform(push_ctx *p)
{
    if (cancelled(p))
        return CURLE_ABORTED_BY_CALLBACK;
    curl_easy_setopt(p->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(p->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
    return curl_easy_perform(p->curl);
}

/* `method what` failed after attempt + 1 attempts: curl's error, or the
 * HTTP status with the store's <Code> and <Message> from r's body, then
 * `tail`. SF_E_REMOTE. */
static int attempts_failed(const push_ctx *p, const char *method, const char *what, CURLcode cc,
                           const response *r, int attempt, const char *tail)
{
    if (cc != CURLE_OK)
        return sf_fail(SF_E_REMOTE, "%s %s: %s (after %d attempt%s)", method, what,
                       p->errbuf[0] ? p->errbuf : curl_easy_strerror(cc), attempt + 1, attempt ? "s" : "");
    char code[128], message[512];
    xml_text(code, sizeof code, r->body, "Code");
    xml_text(message, sizeof message, r->body, "Message");
    return sf_fail(SF_E_REMOTE, "%s %s: HTTP %ld%s%s%s%s (after %d attempt%s)%s", method, what, r->status,
                   code[0] ? " " : "", code, message[0] ? ": " : "", message, attempt + 1, attempt ? "s" : "",
                   tail);
}

static int request(push_ctx *p, response *r, const char *method, const char *url, const char *what,
                   body_src *body, bool allow_404)
{
    CURLcode cc = CURLE_OK;
    bool error_body = false;
    int attempt = 0;
    /* A signed upload names its body's hash, which the store checks (payload_hash.h): hashed
     * once, before the first attempt, so every attempt sends the bytes that were hashed. */
    char sha256[REMOTE_SHA256_HEX] = "";
    bool sends = strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0;
    if (sends && remote_location_signed(p->loc)) {
        int rc = remote_payload_sha256(sha256, body ? body->mem : (const uint8_t *)"", body ? body->fd : -1,
                                       body ? body->off : 0, body ? body->len : 0);
        if (rc)
            return sf_fail(rc, "%s %s: reading the local file to hash it failed (%s%s)", method, what,
                           strerror(-rc), rc == -EIO ? ": did it shrink?" : "");
    }
    for (;; attempt++) {
        CURL *c = p->curl;
        memset(r, 0, sizeof *r);
        r->total_size = -1;
        int rc = attempt_setup(p, url, keep_response, r);
        if (rc)
            return rc;
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, keep_headers);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
        struct curl_slist *headers = NULL;
        if (p->extra_header || sha256[0]) {
            rc = remote_headers_append(&headers, p->loc, sha256[0] ? sha256 : NULL);
            struct curl_slist *h = rc || !p->extra_header ? headers : curl_slist_append(headers, p->extra_header);
            if (!h) {
                curl_slist_free_all(headers);
                return sf_fail(-ENOMEM, "%s %s: out of memory", method, what);
            }
            headers = h;
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        }
        if (strcmp(method, "PUT") == 0) {
            body->pos = 0;
            curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
            curl_easy_setopt(c, CURLOPT_READDATA, body);
            curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, seek_body);
            curl_easy_setopt(c, CURLOPT_SEEKDATA, body);
            curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body->len);
        } else if (strcmp(method, "POST") == 0) {
            curl_easy_setopt(c, CURLOPT_POST, 1L);
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? (const char *)body->mem : "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body->len : 0));
        } else if (strcmp(method, "GET") == 0) {
            curl_easy_setopt(c, CURLOPT_RANGE, "0-0"); /* whether it exists; errors keep their body */
        } else {
            curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        }
        cc = attempt_perform(p);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(headers);
        if (cc == CURLE_ABORTED_BY_CALLBACK && cancelled(p))
            return cancel_error();
        error_body = cc == CURLE_OK && r->status == 200 && strcmp(method, "POST") == 0 &&
                     strstr(r->body, "<Error>") != NULL;
        if (cc == CURLE_OK && !error_body &&
            ((r->status >= 200 && r->status < 300) || (allow_404 && r->status == 404)))
            return 0;
        p->last_retryable = retryable(cc, r, error_body);
        if (attempt >= p->retries || !p->last_retryable)
            break;
        backoff(p, attempt);
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK && body && body->read_errno)
        return sf_fail(-body->read_errno, "%s %s: reading the local file failed (%s%s)", method, what,
                       strerror(body->read_errno), body->read_errno == EIO ? ": did it shrink?" : "");
    return attempts_failed(p, method, what, cc, r, attempt,
                           cc == CURLE_OK && body_mismatch(r)
                               ? ": the store received other bytes than the ones read and hashed here, "
                                 "each time (did the local file change during the push?)"
                               : "");
}

/* ---- Objects -------------------------------------------------------------------- */

/* "s3://bucket/prefix/NAME": how errors name an object. */
static void object_what(char *out, size_t cap, const remote_location *loc, const char *name)
{
    const char *d = remote_location_display(loc);
    size_t n = strlen(d);
    while (n && d[n - 1] == '/')
        n--;
    snprintf(out, cap, "%.*s/%s", (int)n, d, name);
}

/* The object URL of `name` plus a query already in SigV4's canonical form
 * (names sorted, each with '='), so the URL curl signs is the canonical one. */
static int object_url_q(char **out, const remote_location *loc, const char *name, const char *query)
{
    char *u = NULL;
    int rc = remote_object_url(&u, loc, name);
    if (rc || !query)
        return *out = u, rc;
    char *q = malloc(strlen(u) + strlen(query) + 2);
    if (q)
        sprintf(q, "%s?%s", u, query);
    free(u);
    *out = q;
    return q ? 0 : -ENOMEM;
}

static int put_single(push_ctx *p, const char *name, body_src *body)
{
    char *url = NULL, what[4400];
    object_what(what, sizeof what, p->loc, name);
    int rc = object_url_q(&url, p->loc, name, NULL);
    response *r = malloc(sizeof *r);
    if (!rc && !r)
        rc = -ENOMEM;
    if (!rc)
        rc = request(p, r, "PUT", url, what, body, false);
    free(r);
    free(url);
    return rc;
}

/* ---- Reading back what nothing checked on the way ------------------------------- */

/* The body of a read-back GET: hashed as it comes, never kept. An error's
 * body goes to r (its <Code> and <Message> for the error). */
typedef struct read_back {
    CURL *curl;
    response *r;
    XXH3_state_t *hash;
    uint64_t got, max;
    bool too_long; /* more bytes than were sent: the object differs */
} read_back;

static size_t hash_response(char *src, size_t size, size_t n, void *arg)
{
    read_back *rb = arg;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(rb->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200)
        return keep_response(src, size, n, rb->r);
    if (len > rb->max - rb->got) {
        rb->too_long = true;
        return 0;
    }
    rb->got += len;
    XXH3_128bits_update(rb->hash, src, len);
    return len;
}

/* GETs object `url` whole and compares it with `body` (whose hash is
 * `want`): *same tells whether the store holds exactly those bytes. 0, or
 * the GET's failure after its retries (SF_E_REMOTE naming the URL and the
 * status). */
static int read_back_object(push_ctx *p, const char *url, const char *what, const body_src *body,
                            XXH128_hash_t want, bool *same)
{
    response *r = malloc(sizeof *r);
    XXH3_state_t *h = XXH3_createState();
    int rc = r && h ? 0 : -ENOMEM;
    CURLcode cc = CURLE_OK;
    for (int attempt = 0; !rc; attempt++) {
        CURL *c = p->curl;
        memset(r, 0, sizeof *r);
        XXH3_128bits_reset(h);
        read_back rb = {.curl = c, .r = r, .hash = h, .max = body->len};
        if ((rc = attempt_setup(p, url, hash_response, &rb)))
            break;
        cc = attempt_perform(p);
        if (cc == CURLE_ABORTED_BY_CALLBACK && cancelled(p)) {
            rc = cancel_error();
            break;
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        if (r->status == 200 && (cc == CURLE_OK || rb.too_long)) {
            XXH128_hash_t got = XXH3_128bits_digest(h);
            *same = !rb.too_long && rb.got == body->len && XXH128_isEqual(got, want);
            break;
        }
        if (attempt >= p->retries || !retryable(cc, r, false)) {
            char reading[4500];
            snprintf(reading, sizeof reading, "%s (reading back what was uploaded)", what);
            rc = attempts_failed(p, "GET", reading, cc, r, attempt, "");
            break;
        }
        backoff(p, attempt);
    }
    if (rc == -ENOMEM)
        rc = sf_fail(-ENOMEM, "GET %s (reading back what was uploaded): out of memory", what);
    XXH3_freeState(h);
    free(r);
    return rc;
}

typedef struct multipart {
    char token[40];       /* UPLOAD_TOKEN_HEADER's value */
    char upload_id[1024]; /* percent-encoded for the query */
    char (*etags)[256];
    uint32_t parts;
} multipart;

static int mp_request(push_ctx *p, response *r, const char *method, const char *name, const char *query,
                      body_src *body, const char *what)
{
    char *url = NULL;
    int rc = object_url_q(&url, p->loc, name, query);
    if (!rc)
        rc = request(p, r, method, url, what, body, false);
    free(url);
    return rc;
}

static void mp_abort(push_ctx *p, response *r, const char *name, const multipart *m, const char *what)
{
    char query[1100];
    snprintf(query, sizeof query, "uploadId=%s", m->upload_id);
    int saved_retries = p->retries;
    p->retries = 1; /* best effort: the store expires abandoned uploads by its own rules */
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", sf_last_error());
    bool saved_uncancellable = p->uncancellable;
    p->uncancellable = true; /* a cancelled push aborts its upload too */
    (void)mp_request(p, r, "DELETE", name, query, NULL, what);
    p->uncancellable = saved_uncancellable;
    sf_fail(0, "%s", detail); /* the failure reported is the one that stopped the upload */
    p->retries = saved_retries;
}

static int complete_body(char **xml, size_t *len, const multipart *m)
{
    size_t cap = 64 + (size_t)m->parts * (64 + sizeof m->etags[0]);
    char *x = malloc(cap);
    if (!x)
        return -ENOMEM;
    size_t o = (size_t)snprintf(x, cap, "<CompleteMultipartUpload>");
    for (uint32_t i = 0; i < m->parts; i++)
        o += (size_t)snprintf(x + o, cap - o, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
                              i + 1, m->etags[i]);
    o += (size_t)snprintf(x + o, cap - o, "</CompleteMultipartUpload>");
    *xml = x;
    *len = o;
    return 0;
}

/* After a failed CompleteMultipartUpload: an earlier attempt may have
 * completed it and lost its answer (a reset), and the retries then fail
 * (NoSuchUpload, or a 500 from stores that dropped the parts). True when the
 * object is there with this upload's token and size. */
static bool completed_earlier(push_ctx *p, response *r, const char *name, const char *token,
                              uint64_t size)
{
    char detail[2048], *url = NULL, what[4400];
    snprintf(detail, sizeof detail, "%s", sf_last_error());
    object_what(what, sizeof what, p->loc, name);
    int saved = p->retries;
    p->retries = 0;
    int rc = remote_object_url(&url, p->loc, name);
    if (!rc)
        rc = request(p, r, "GET", url, what, NULL, false);
    p->retries = saved;
    free(url);
    if (!rc && strcmp(r->upload_token, token) == 0 && r->total_size >= 0 && (uint64_t)r->total_size == size)
        return true;
    sf_fail(0, "%s", detail); /* the completion's failure is the one to report */
    return false;
}

/* CompleteMultipartUpload with its own retries: before each retry, whether
 * an attempt whose answer was lost completed it after all. */
static int mp_complete(push_ctx *p, response *r, const char *name, const multipart *m, uint64_t size,
                       const char *what)
{
    char *xml = NULL, query[1100];
    size_t len = 0;
    snprintf(query, sizeof query, "uploadId=%s", m->upload_id);
    int rc = complete_body(&xml, &len, m);
    body_src b = {.mem = (const uint8_t *)xml, .len = len};
    int retries = p->retries;
    p->retries = 0;
    for (int attempt = 0; !rc || rc == SF_E_REMOTE; attempt++) {
        rc = mp_request(p, r, "POST", name, query, &b, what);
        if (rc != SF_E_REMOTE)
            break;
        bool again = p->last_retryable && attempt < retries;
        if (completed_earlier(p, r, name, m->token, size)) {
            rc = 0;
            break;
        }
        if (!again)
            break;
        backoff(p, attempt);
    }
    p->retries = retries;
    free(xml);
    return rc;
}

/* S3 multipart upload of [0, size) of `fd` as `name`, parts of `part_size`. */
static int put_multipart(push_ctx *p, const char *name, int fd, uint64_t size, uint64_t part_size)
{
    char what[4400];
    object_what(what, sizeof what, p->loc, name);
    multipart m = {.parts = (uint32_t)((size + part_size - 1) / part_size)};
    response *r = malloc(sizeof *r);
    m.etags = calloc(m.parts, sizeof m.etags[0]);
    int rc = r && m.etags ? 0 : -ENOMEM;
    char token_header[128];
    snprintf(m.token, sizeof m.token, "%08x%08x%08x", (unsigned)rand_r(&p->seed), (unsigned)rand_r(&p->seed),
             (unsigned)time(NULL));
    snprintf(token_header, sizeof token_header, "%s: %s", UPLOAD_TOKEN_HEADER, m.token);
    p->extra_header = token_header;
    /* Not cut short: an upload the store made but whose id never arrived
     * could not be aborted. A cancel then stops at the first part. */
    bool saved_uncancellable = p->uncancellable;
    p->uncancellable = true;
    if (!rc)
        rc = mp_request(p, r, "POST", name, "uploads=", NULL, what);
    p->uncancellable = saved_uncancellable;
    p->extra_header = NULL;
    if (!rc) {
        char id[900];
        xml_text(id, sizeof id, r->body, "UploadId");
        if (!id[0])
            rc = sf_fail(SF_E_REMOTE, "POST %s?uploads: the store's answer has no UploadId", what);
        remote_query_encode(m.upload_id, sizeof m.upload_id, id); /* S3 sends unreserved characters */
    }
    for (uint32_t i = 0; !rc && i < m.parts; i++) {
        char query[1100];
        snprintf(query, sizeof query, "partNumber=%u&uploadId=%s", i + 1, m.upload_id);
        uint64_t off = (uint64_t)i * part_size;
        body_src part = {.fd = fd, .off = off, .len = size - off < part_size ? size - off : part_size};
        char part_what[4500]; /* a failed part's error names it: which bytes the store refused */
        snprintf(part_what, sizeof part_what, "%s (part %u of %u, bytes %llu-%llu)", what, i + 1,
                 m.parts, (unsigned long long)off, (unsigned long long)(off + part.len - 1));
        rc = mp_request(p, r, "PUT", name, query, &part, part_what);
        if (!rc && !r->etag[0])
            rc = sf_fail(SF_E_REMOTE, "PUT %s part %u: the store's answer has no ETag", what, i + 1);
        if (!rc)
            memcpy(m.etags[i], r->etag, sizeof m.etags[i]);
    }
    if (!rc)
        rc = mp_complete(p, r, name, &m, size, what);
    if (rc && rc != -ENOMEM && m.upload_id[0])
        mp_abort(p, r, name, &m, what);
    free(m.etags);
    free(r);
    return rc;
}

/* Uploads `body` as object `name`: in parts of part_size when part_size is
 * not 0 (S3 multipart), else in one PUT. A signed upload is checked by the
 * store as it arrives (its body's SHA-256). One nothing checks on the way
 * (a web server's PUT, S3 without credentials) is read back whole and
 * compared with the local bytes: a proxy that flipped a byte, or a server
 * that kept a truncated body, answered 2xx all the same. An object that
 * differs is uploaded again, up to --retries times, and then fails the push
 * naming it. */
static int upload_object(push_ctx *p, const char *name, body_src *body, uint64_t part_size)
{
    bool check = !remote_location_signed(p->loc);
    XXH128_hash_t want = {0, 0};
    char what[4400], *url = NULL;
    object_what(what, sizeof what, p->loc, name);
    int rc = check ? remote_payload_xxh128(&want, body->mem, body->fd, body->off, body->len) : 0;
    if (rc)
        return sf_fail(rc, "PUT %s: reading the local file to hash it failed (%s%s)", what, strerror(-rc),
                       rc == -EIO ? ": did it shrink?" : "");
    if (check && (rc = object_url_q(&url, p->loc, name, NULL)))
        return sf_fail(rc, "PUT %s: out of memory", what);
    for (int round = 0;; round++) {
        rc = part_size ? put_multipart(p, name, body->fd, body->len, part_size) : put_single(p, name, body);
        bool same = true;
        if (!rc && check)
            rc = read_back_object(p, url, what, body, want, &same);
        if (rc || same)
            break;
        if (round >= p->retries) {
            rc = sf_fail(SF_E_REMOTE, "PUT %s: the object the store kept differs from the %llu bytes "
                         "sent, read back after each of %d uploads (an upload without credentials, or "
                         "to a web server, is checked by nobody on the way: a proxy or the server "
                         "changed the bytes)", what, (unsigned long long)body->len, round + 1);
            break;
        }
        backoff(p, round);
    }
    free(url);
    return rc;
}

/* ---- The dataset ------------------------------------------------------------------ */

typedef struct local_dataset {
    const char *dir;
    uint8_t *manifest_bytes;
    uint64_t manifest_len;
    sf_manifest manifest;
    int lock_fd; /* .shardfeed.lock held shared, or -1 */
    char lock_path[SF_PATH_CAP];
} local_dataset;

/* Refuses a folder a pack or merge is writing: they hold .shardfeed.lock
 * exclusively for their whole run; push holds it shared for its own, so a
 * pack or merge started meanwhile is refused in turn. A finished pack
 * unlinks the file, so push creates it where it is missing (and says who
 * holds it, for the refusal's message), and, as pack does, locks the file
 * the path still names. A folder push may not write is pushed unlocked when
 * it has no lock file, as before. */
static int lock_shared(local_dataset *d)
{
    /* Refused when too long: the open below would fail and the folder be
     * pushed unlocked, as one without a lock file is. */
    int rc = sf_path_join(d->lock_path, sizeof d->lock_path, d->dir, LOCK_NAME);
    if (rc)
        return rc;
    for (int attempt = 0; attempt < 1000; attempt++) {
        bool created = false;
        d->lock_fd = open(d->lock_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
        if (d->lock_fd < 0 && errno == ENOENT) {
            d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
            created = d->lock_fd >= 0;
            if (d->lock_fd < 0 && errno == EEXIST)
                continue; /* made by another run meanwhile */
        }
        if (d->lock_fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
            d->lock_fd = open(d->lock_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
        if (d->lock_fd < 0)
            return 0; /* not ours to create, and none there */
        struct stat held, named;
        if (fstat(d->lock_fd, &held) != 0 || !S_ISREG(held.st_mode))
            return sf_fail(SF_E_EXISTS, "%s: not shardfeed's lock file; refusing to push the folder", d->lock_path);
        if (flock(d->lock_fd, LOCK_SH | LOCK_NB) != 0)
            return sf_fail(SF_E_STATE, "%s: a pack or merge is writing this folder (%s is held): push it "
                           "when that is done", d->dir, LOCK_NAME);
        if (lstat(d->lock_path, &named) != 0 || named.st_dev != held.st_dev || named.st_ino != held.st_ino) {
            close(d->lock_fd); /* unlinked by the pack that held it: lock the one there now */
            d->lock_fd = -1;
            continue;
        }
        if (created) { /* what a refused pack names; only the first of several pushes writes it */
            char host[256] = "?", line[512];
            if (gethostname(host, sizeof host - 1) != 0)
                snprintf(host, sizeof host, "?");
            host[sizeof host - 1] = '\0';
            int n = snprintf(line, sizeof line, "shardfeed lock: push pid %ld on %s\n", (long)getpid(), host);
            if (n > 0)
                (void)!pwrite(d->lock_fd, line, (size_t)n, 0);
        }
        return 0;
    }
    return sf_fail(-EBUSY, "%s: the lock file keeps being replaced; is a shardfeed pack writing %s?",
                   d->lock_path, d->dir);
}

/* Lets go of the lock; the last holder removes the file, as a finished pack
 * does (a pack that opened it meanwhile finds its path gone, and retries),
 * when it is empty or one of shardfeed's: never a user's own file. */
static void unlock(local_dataset *d)
{
    if (d->lock_fd < 0)
        return;
    static const char tag[] = "shardfeed lock: ";
    char head[sizeof tag - 1];
    ssize_t n = pread(d->lock_fd, head, sizeof head, 0);
    bool ours = n == 0 || (n == (ssize_t)sizeof head && memcmp(head, tag, sizeof head) == 0);
    struct stat held, named;
    if (ours && flock(d->lock_fd, LOCK_EX | LOCK_NB) == 0 && fstat(d->lock_fd, &held) == 0 &&
        lstat(d->lock_path, &named) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino)
        unlink(d->lock_path);
    close(d->lock_fd);
    d->lock_fd = -1;
}

static int read_manifest(local_dataset *d)
{
    char path[SF_PATH_CAP];
    int rc = sf_path_join(path, sizeof path, d->dir, SF_MANIFEST_NAME);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sf_fail(e == ENOENT ? SF_E_INPUT : -e, "%s: %s", path,
                       e == ENOENT ? "no manifest: not a dataset (or not a finished one)" : sf_errno_text(e));
    }
    struct stat st;
    rc = fstat(fd, &st) ? sf_fail(-errno, "%s: %s", path, strerror(errno)) : 0;
    if (!rc && (st.st_size < (off_t)SF_MANIFEST_MIN_SIZE || (uint64_t)st.st_size > SF_MANIFEST_MAX_SIZE))
        rc = sf_fail(SF_E_CORRUPT, "%s: %lld bytes, not the size of a manifest", path, (long long)st.st_size);
    if (!rc) {
        d->manifest_len = (uint64_t)st.st_size;
        d->manifest_bytes = malloc(d->manifest_len);
        rc = d->manifest_bytes ? sf_pread_full(fd, d->manifest_bytes, d->manifest_len, 0) : -ENOMEM;
        if (rc && rc != -ENOMEM)
            rc = sf_fail(rc, "%s: %s", path, rc == SF_E_TRUNCATED ? "shrank while read" : strerror(-rc));
    }
    close(fd);
    if (!rc && (rc = sf_manifest_decode(&d->manifest, d->manifest_bytes, d->manifest_len)) != 0)
        rc = sf_fail_prefix(rc, path);
    return rc;
}

/* A problem in a shard's records, as an error naming the file, the record and the byte. */
static int data_problem(const char *path, const sf_schema *schema, const sf_first_problem *f)
{
    const sf_shard_problem *pr = &f->first;
    char what[256];
    sf_shard_problem_text(what, sizeof what, pr, schema);
    char more[64] = "";
    if (f->count > 1)
        snprintf(more, sizeof more, " (and %lld more problem%s)", (long long)(f->count - 1),
                 f->count > 2 ? "s" : "");
    return sf_fail(pr->code ? pr->code : SF_E_CORRUPT, "%s: %s%s: the dataset is damaged, nothing was "
                   "uploaded (shardfeed verify lists every problem)", path, what, more);
}

/* Opens shard `i` and checks its header, footer and index against the
 * manifest; with `scan_buf` (SCAN_BUFFER bytes), every record's bytes too
 * (sf_shard_scan_data, as verify does). The descriptor in *fd_out on success. */
#define SCAN_BUFFER (256u << 10)
static int open_checked_shard(int *fd_out, const local_dataset *d, uint64_t i, char *name, size_t cap,
                              uint8_t *scan_buf)
{
    snprintf(name, cap, SF_SHARD_NAME_FMT, (unsigned)i);
    char path[SF_PATH_CAP];
    int rc = sf_path_join(path, sizeof path, d->dir, name);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sf_fail(e == ENOENT ? SF_E_TRUNCATED : -e, "%s: %s", path,
                       e == ENOENT ? "missing: the dataset is not complete" : sf_errno_text(e));
    }
    const sf_manifest *m = &d->manifest;
    sf_shard_expect exp = {&m->schema, i, m->dataset_id, m->align, &m->shards[i]};
    sf_shard_meta meta;
    rc = sf_shard_load_meta(&meta, fd, &exp, NULL);
    if (rc) {
        close(fd);
        return sf_fail_prefix(rc, path);
    }
    if (scan_buf) {
        sf_first_problem f = {0};
        int64_t n = sf_shard_scan_data(&meta, &m->schema, fd, scan_buf, SCAN_BUFFER, sf_keep_first_problem, &f);
        if (n < 0)
            rc = sf_fail((int)n, "%s: reading its records: %s", path, sf_strerror((int)n));
        else if (n > 0 || f.count > 0)
            rc = data_problem(path, &m->schema, &f);
    }
    sf_shard_meta_clear(&meta);
    if (rc) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

/* Every shard, every record, before the first byte is uploaded: a damaged
 * dataset uploads nothing. This reads the whole dataset once more than the
 * upload does (README "Uploading": the cost, measured). */
static int check_all_shards(const push_ctx *p, const local_dataset *d)
{
    uint8_t *buf = malloc(SCAN_BUFFER);
    if (!buf)
        return sf_fail(-ENOMEM, "sf_push: out of memory");
    int rc = 0;
    for (uint64_t i = 0; !rc && i < d->manifest.shard_count; i++) {
        if (cancelled(p)) { /* between shards: a check may take as long as the upload */
            rc = cancel_error();
            break;
        }
        char name[64];
        int fd = -1;
        rc = open_checked_shard(&fd, d, i, name, sizeof name, buf);
        if (!rc)
            close(fd);
    }
    free(buf);
    return rc;
}

static void local_close(local_dataset *d)
{
    sf_manifest_clear(&d->manifest);
    free(d->manifest_bytes);
    unlock(d);
}

/* ---- Push ------------------------------------------------------------------------- */

static int opts_check(sf_push_opts *o, const sf_push_opts *given)
{
    sf_push_opts defaults = SF_PUSH_OPTS_INIT;
    if (given) {
        int rc = sf_check_opts_version("sf_push_opts", given->version, SF_PUSH_OPTS_VERSION);
        if (rc)
            return rc;
        /* A version-1 struct ends before `cancel`: read only what it has. */
        memset(o, 0, sizeof *o);
        memcpy(o, given, given->version >= 2 ? sizeof *o : offsetof(sf_push_opts, cancel));
    } else {
        *o = defaults;
    }
    if (!o->multipart_threshold)
        o->multipart_threshold = SF_PUSH_DEFAULT_THRESHOLD;
    if (!o->part_size)
        o->part_size = SF_PUSH_DEFAULT_PART_SIZE;
    if (o->retries < -1)
        return sf_fail(SF_E_INVALID, "sf_push: retries %d: -1 (the default, %d) or 0 to 100",
                       o->retries, SF_PUSH_DEFAULT_RETRIES);
    if (o->retries == -1)
        o->retries = SF_PUSH_DEFAULT_RETRIES;
    if (!o->backoff_ms)
        o->backoff_ms = 200;
    if (o->part_size < SF_PUSH_MIN_PART_SIZE || o->part_size > (5ull << 30))
        return sf_fail(SF_E_INVALID, "sf_push: part size %llu is outside 64 KiB to 5 GiB",
                       (unsigned long long)o->part_size);
    if (o->retries > 100 || o->backoff_ms > 60000)
        return sf_fail(SF_E_INVALID, "sf_push: at most 100 retries and a 60 s first backoff");
    return 0;
}

/* The manifest already at the destination: refused (overwrite 0), or
 * deleted first when `delete` (with overwrite 1). */
static int clear_destination(push_ctx *p, const sf_push_opts *o, bool delete)
{
    char *url = NULL, what[4400];
    object_what(what, sizeof what, p->loc, SF_MANIFEST_NAME);
    response *r = malloc(sizeof *r);
    int rc = r ? remote_object_url(&url, p->loc, SF_MANIFEST_NAME) : -ENOMEM;
    if (!rc)
        rc = request(p, r, "GET", url, what, NULL, true);
    if (rc == SF_E_REMOTE && r->status == 403 && remote_location_kind(p->loc) == REMOTE_S3) {
        /* Most often not a refusal to read a manifest that is there: S3 answers 403, not 404,
         * for any missing object when the caller may not list the bucket. */
        char said[2048];
        snprintf(said, sizeof said, "%s", sf_last_error());
        if (remote_location_signed(p->loc))
            rc = sf_fail(rc, "%s: push reads the manifest to find a dataset already there, and S3 answers "
                             "403, not 404, for a missing object when the credentials lack s3:ListBucket "
                             "on the bucket (grant it, or check the credentials)",
                         said);
        else
            rc = sf_fail(rc, "%s: the request was anonymous: no credentials were found (AWS_ACCESS_KEY_ID "
                             "and AWS_SECRET_ACCESS_KEY, or a key pair in ~/.aws/credentials for the "
                             "profile AWS_PROFILE names, else [default])",
                         said);
    }
    /* 416 to the one-byte range: an empty object is there (a manifest cut
     * short); it was reported as the store's refusal, and --overwrite
     * could not replace it. */
    if (rc == SF_E_REMOTE && r->status == 416)
        rc = 0;
    char code[64] = "";
    if (!rc && r->status == 404 && remote_location_kind(p->loc) == REMOTE_S3)
        xml_text(code, sizeof code, r->body, "Code");
    if (!strcmp(code, "NoSuchBucket")) /* said here, not after every record was read */
        rc = sf_fail(SF_E_REMOTE, "GET %s: HTTP 404 NoSuchBucket: the bucket does not exist (create "
                                  "it first, or check the URL and the endpoint)",
                     what);
    else if (!rc && r->status != 404) {
        if (!o->overwrite)
            rc = sf_fail(SF_E_EXISTS, "%s: a dataset is already there (%s): push refuses to replace it "
                         "(push --overwrite, or pack --force, deletes its manifest first)",
                         remote_location_display(p->loc), what);
        else if (delete) {
            /* Not cut short: a manifest deleted whose answer was lost would
             * leave p->replaced unset, and the error silent about it. */
            bool saved_uncancellable = p->uncancellable;
            p->uncancellable = true;
            if ((rc = request(p, r, "DELETE", url, what, NULL, true)) == 0)
                p->replaced = true;
            p->uncancellable = saved_uncancellable;
        }
    }
    free(r);
    free(url);
    return rc;
}

static int push_shard(push_ctx *p, const local_dataset *d, const sf_push_opts *o, uint64_t i,
                      uint64_t *bytes, char *name, size_t cap)
{
    int fd = -1;
    int rc = open_checked_shard(&fd, d, i, name, cap, NULL);
    if (rc)
        return rc;
    uint64_t size = d->manifest.shards[i].file_size;
    *bytes = size;
    uint64_t part = o->part_size;
    if (size / part >= MAX_PARTS) /* S3 takes at most 10,000 parts */
        part = (size + MAX_PARTS - 1) / MAX_PARTS;
    /* A plain web server (WebDAV PUT) has no multipart uploads: one PUT. */
    bool in_parts = size > o->multipart_threshold && remote_location_kind(p->loc) == REMOTE_S3;
    body_src b = {.fd = fd, .len = size};
    rc = upload_object(p, name, &b, in_parts ? part : 0);
    close(fd);
    return rc;
}

/* The manifest, last. A failure may still have stored it (an answer lost
 * after the store wrote it): it is deleted then, so a failed push never
 * leaves a manifest behind. */
static int push_manifest(push_ctx *p, const local_dataset *d)
{
    if (cancelled(p))
        return cancel_error();
    body_src b = {.mem = d->manifest_bytes, .len = d->manifest_len};
    p->uncancellable = true; /* up whole, or deleted: never cut short by a cancel */
    int rc = upload_object(p, SF_MANIFEST_NAME, &b, 0);
    if (!rc) {
        p->uncancellable = false; /* the stale shards' removal may stop (a warning says so) */
        return 0;
    }
    if (!rc || rc == -ENOMEM)
        return rc;
    char detail[2048], *url = NULL, what[4400];
    snprintf(detail, sizeof detail, "%s", sf_last_error());
    object_what(what, sizeof what, p->loc, SF_MANIFEST_NAME);
    response *r = malloc(sizeof *r);
    int del = r ? remote_object_url(&url, p->loc, SF_MANIFEST_NAME) : -ENOMEM;
    if (!del)
        del = request(p, r, "DELETE", url, what, NULL, true);
    free(r);
    free(url);
    if (del) {
        /* sf_fail writes the buffer sf_last_error() returns: the DELETE's reason is copied first. */
        char why[2048];
        snprintf(why, sizeof why, "%s", sf_last_error());
        return sf_fail(rc, "%s; deleting a manifest the store may have kept also failed (%s): %s may "
                       "hold the manifest", detail, why, what);
    }
    return sf_fail(rc, "%s", detail);
}

/* ---- Shards an earlier dataset left past this one's last ----------------------- */

/* Whether `name` is exactly a shard file's name (SF_SHARD_NAME_FMT), its index in *index. */
static bool shard_name_index(const char *name, uint64_t *index)
{
    int64_t n = sf_shard_name_index(name, strlen(name));
    if (n < 0) /* "shard-+00001.sfs", " 1", fewer digits: not ours */
        return false;
    *index = (uint64_t)n;
    return true;
}

typedef struct stale_list {
    uint64_t first; /* the new dataset's shard count */
    uint64_t *index;
    size_t n, cap;
} stale_list;

static int on_listed(void *ctx, const char *name, uint64_t size)
{
    (void)size;
    stale_list *s = ctx;
    uint64_t i;
    if (!shard_name_index(name, &i) || i < s->first)
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *grown = realloc(s->index, cap * sizeof *grown);
        if (!grown)
            return sf_fail(-ENOMEM, "out of memory");
        s->index = grown;
        s->cap = cap;
    }
    s->index[s->n++] = i;
    return 0;
}

static int by_index_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* DELETEs object `name`. With `was_there`, asks first (a one-byte GET)
 * and deletes only what is there: a web server may answer a DELETE of a
 * missing file 2xx, which would keep remove_stale_shards' walk going. */
static int delete_object(push_ctx *p, response *r, const char *name, bool *was_there)
{
    char *url = NULL, what[4400];
    object_what(what, sizeof what, p->loc, name);
    int rc = remote_object_url(&url, p->loc, name);
    if (!rc && was_there) {
        rc = request(p, r, "GET", url, what, NULL, true);
        *was_there = !rc && r->status != 404;
        if (!rc && !*was_there) {
            free(url);
            return 0;
        }
    }
    if (!rc)
        rc = request(p, r, "DELETE", url, what, NULL, true);
    free(url);
    return rc;
}

static void stale_warning(const push_ctx *p, const char *left, const char *why)
{
    const char *url = remote_location_display(p->loc);
    fprintf(stderr, "shardfeed: push: warning: %s is pushed and complete, but removing the shards an "
            "earlier dataset left there past this one's last failed (%s); left there: %s; `shardfeed verify "
            "%s` reports such shards as extra until they are deleted\n", url, why, left, url);
}

/* After the new manifest is up: deletes shard-NNNNNN.sfs objects under the
 * destination whose index is >= its shard count (an earlier, larger
 * dataset's), and nothing else. After, not before: a reader of the new
 * manifest never reads past its count, while a push that fails before its
 * manifest is up deletes nothing more than --overwrite's manifest. On S3 the
 * prefix is listed (ListObjectsV2) and the highest index is deleted first,
 * so a cleanup that stops leaves a run of shards after the new ones; a web
 * server has no listing: shards are deleted from the count up until one is
 * not there (a GET answers 404). A failure here does not fail the push (the dataset is
 * complete and consistent): a warning on stderr names what is left. */
static void remove_stale_shards(push_ctx *p, uint64_t count)
{
    response *r = malloc(sizeof *r);
    if (!r) {
        char left[96];
        snprintf(left, sizeof left, "any shard from " SF_SHARD_NAME_FMT " on", (unsigned)count);
        stale_warning(p, left, "out of memory");
        return;
    }
    char name[64], left[192], why[2048];
    if (remote_location_kind(p->loc) != REMOTE_S3) {
        for (uint64_t i = count; i <= 999999; i++) {
            snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
            bool there = false;
            if (delete_object(p, r, name, &there)) {
                snprintf(why, sizeof why, "%s", sf_last_error());
                snprintf(left, sizeof left, "%s and any later shard", name);
                stale_warning(p, left, why);
                break;
            }
            if (!there)
                break;
        }
        free(r);
        return;
    }
    stale_list s = {.first = count};
    remote_policy policy = {(uint32_t)p->retries, SF_REMOTE_DEFAULT_TIMEOUT_MS};
    int rc = remote_list(p->loc, &policy, on_listed, &s);
    if (rc) {
        snprintf(why, sizeof why, "listing it: %s", sf_last_error());
        snprintf(left, sizeof left, "any shard from " SF_SHARD_NAME_FMT " on", (unsigned)count);
        stale_warning(p, left, why);
    } else {
        if (s.n) /* qsort of NULL, even of 0 items, is undefined */
            qsort(s.index, s.n, sizeof *s.index, by_index_desc);
        for (size_t k = 0; k < s.n; k++) {
            snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)s.index[k]);
            if (delete_object(p, r, name, NULL)) {
                snprintf(why, sizeof why, "%s", sf_last_error());
                char lowest[64];
                snprintf(lowest, sizeof lowest, SF_SHARD_NAME_FMT, (unsigned)s.index[s.n - 1]);
                if (k == s.n - 1)
                    snprintf(left, sizeof left, "%s", name);
                else
                    snprintf(left, sizeof left, "%zu shards, %s to %s", s.n - k, lowest, name);
                stale_warning(p, left, why);
                break;
            }
        }
    }
    free(s.index);
    free(r);
}

/* What the store would refuse only at the end of an upload: S3 itself takes
 * parts of at least 5 MiB but the last (CompleteMultipartUpload fails
 * EntityTooSmall, after every part went up); S3-compatible stores
 * (an endpoint set) may take less, down to SF_PUSH_MIN_PART_SIZE. */
static int location_check(const remote_location *loc, const sf_push_opts *o)
{
    if (remote_location_kind(loc) == REMOTE_S3 && remote_location_aws(loc) &&
        o->part_size < (5ull << 20))
        return sf_fail(SF_E_INVALID,
                       "%s: part size %llu bytes: S3 takes parts of at least 5 MiB but the last "
                       "(it refuses the finished upload otherwise, EntityTooSmall); smaller parts "
                       "are for S3-compatible stores (AWS_ENDPOINT_URL)",
                       remote_location_display(loc), (unsigned long long)o->part_size);
    return 0;
}

/* Opens what push needs of `url`: its settings, credentials, a handle. */
static int push_open(push_ctx *p, remote_location **loc, const char *url, const sf_push_opts *o)
{
    int rc = remote_location_open(loc, url);
    if (rc)
        return rc;
    *p = (push_ctx){.loc = *loc, .retries = o->retries, .backoff_ms = o->backoff_ms,
                    .seed = (unsigned)time(NULL) ^ (unsigned)getpid(), .cancel = o->cancel};
    if ((rc = location_check(*loc, o)))
        return rc;
    if (!(p->curl = curl_easy_init()))
        return sf_fail(-ENOMEM, "sf_push: curl_easy_init failed");
    return 0;
}

int sf_push_check(const char *url, const sf_push_opts *opts)
{
    if (!url)
        return sf_fail(SF_E_INVALID, "sf_push_check: a URL is needed");
    sf_push_opts o;
    int rc = opts_check(&o, opts);
    if (rc)
        return rc;
    remote_location *loc = NULL;
    push_ctx p = {0};
    rc = push_open(&p, &loc, url, &o);
    if (!rc)
        rc = clear_destination(&p, &o, false);
    if (p.curl)
        curl_easy_cleanup(p.curl);
    remote_location_free(loc);
    return rc;
}

int sf_push(const char *dataset_dir, const char *url, const sf_push_opts *opts)
{
    if (!dataset_dir || !url)
        return sf_fail(SF_E_INVALID, "sf_push: a dataset folder and a URL are needed");
    sf_push_opts o;
    int rc = opts_check(&o, opts);
    if (rc)
        return rc;
    remote_location *loc = NULL;
    push_ctx p = {0};
    local_dataset d = {.dir = dataset_dir, .lock_fd = -1};
    rc = push_open(&p, &loc, url, &o);
    if (!rc)
        rc = lock_shared(&d);
    if (!rc)
        rc = read_manifest(&d);
    /* Whether a dataset is there before every record is read (which may
     * take hours), refused without overwrite; asked again once the dataset
     * checked whole (one may have arrived meanwhile), and with overwrite
     * deleted only then. */
    if (!rc)
        rc = clear_destination(&p, &o, false);
    if (!rc)
        rc = check_all_shards(&p, &d);
    if (!rc)
        rc = clear_destination(&p, &o, true);
    uint64_t total = d.manifest.shard_count + 1;
    for (uint64_t i = 0; !rc && i < d.manifest.shard_count; i++) {
        if (cancelled(&p)) {
            rc = cancel_error();
            break;
        }
        char name[64];
        uint64_t bytes = 0;
        rc = push_shard(&p, &d, &o, i, &bytes, name, sizeof name);
        if (!rc && o.progress)
            o.progress(o.progress_ctx, i + 1, total, name, bytes);
    }
    if (!rc)
        rc = push_manifest(&p, &d);
    if (!rc && o.progress)
        o.progress(o.progress_ctx, total, total, SF_MANIFEST_NAME, d.manifest_len);
    if (!rc)
        remove_stale_shards(&p, d.manifest.shard_count);
    if (rc && p.replaced) {
        /* sf_fail writes the buffer sf_last_error() returns: the reason is copied first. */
        char why[4096];
        snprintf(why, sizeof why, "%s", sf_last_error());
        rc = sf_fail(rc, "%s; the dataset that was at %s is no longer readable: --overwrite deleted its "
                     "manifest before this push failed (push again to finish)",
                     why, remote_location_display(loc));
    }
    if (p.curl)
        curl_easy_cleanup(p.curl);
    local_close(&d);
    remote_location_free(loc);
    return rc;
}

#else /* !SF_HAVE_REMOTE */

int sf_push(const char *dataset_dir, const char *url, const sf_push_opts *opts)
{
    (void)dataset_dir, (void)opts;
    remote_location *loc = NULL;
    return remote_location_open(&loc, url); /* says the build has no libcurl */
}

int sf_push_check(const char *url, const sf_push_opts *opts)
{
    return sf_push(".", url, opts);
}

#endif
