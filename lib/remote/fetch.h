/* The transport of remote reads: GET an object, or a byte range of it, of a
 * remote_location with libcurl, retrying what passes, into a caller's buffer
 * or file.
 *
 * A fetcher is one curl easy handle (its connection kept alive between
 * requests) and is used by one thread at a time; remote_pool hands fetchers
 * out to threads and keeps the idle ones. Response bodies are untrusted:
 * nothing is written past the destination, a body longer than asked for is
 * an error, and error bodies are kept only up to REMOTE_ERROR_BODY_MAX bytes.
 *
 * Retries. A request is retried, up to `retries` more times, when it fails
 * for a reason that may pass: a connection refused, reset or dropped, no
 * byte received for timeout_ms, HTTP 5xx, 429 or 408, or a body shorter than
 * the range asked for (a 206 whose length is not the range's). The waits
 * grow exponentially from REMOTE_BACKOFF_BASE_MS to REMOTE_BACKOFF_MAX_MS,
 * each a random point in its upper half (jitter: processes that failed
 * together do not retry together). A range resumes where the body stopped.
 * A 206 whose Content-Range does not name exactly the bytes asked for (or
 * names none) is refused before any byte is copied, and retried: a cache
 * keyed on the URL alone may answer with another range. Anything else (403,
 * 404, a server that ignores Range: a 200 to a range not at byte 0, or
 * whose body is longer than the range) fails at once. The
 * final error (sf_last_error) names the object's URL as given (no secrets),
 * the byte range, the HTTP status or curl's reason, the store's message (S3's
 * XML <Message>, else the body's start) and the attempts made. */
#ifndef SF_REMOTE_FETCH_H
#define SF_REMOTE_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "remote_url.h"

#define REMOTE_ERROR_BODY_MAX 1024u  /* bytes of an error body kept */
#define REMOTE_MESSAGE_MAX 200u      /* characters of the store's message quoted */
#define REMOTE_BACKOFF_BASE_MS 50u
#define REMOTE_BACKOFF_MAX_MS 4000u
#define REMOTE_RECV_BUFFER (256u << 10) /* curl's receive buffer, per fetcher */
#define REMOTE_MIN_RATE 1024u /* bytes/s: slower for the whole timeout fails the attempt */
#define REMOTE_WRITEBACK_STEP (4u << 20) /* a download's write-back starts per step */
#define REMOTE_WRITE_CHUNK (128u << 10) /* a download is written to its file in chunks this size */
/* remote_pool_fetch_to_fd: an object of at least 2 x REMOTE_PART_MIN bytes
 * is fetched as up to REMOTE_PARTS ranges at once, each on its own
 * connection (one connection's copy was the limit on loopback). Callers
 * with several downloads running ask for fewer: ext4 writes one file's
 * parts one at a time, under the file's lock (dataset_remote.c). */
#define REMOTE_PART_MIN (8u << 20)
#define REMOTE_PARTS 4u

typedef struct remote_policy {
    uint32_t retries;    /* attempts after the first */
    uint32_t timeout_ms; /* no byte for this long: the attempt fails */
} remote_policy;

typedef struct remote_fetcher remote_fetcher;

#define REMOTE_ETAG_MAX 128

/* A fetcher for objects under `loc` (which must outlive it). 0 or -ENOMEM. */
int remote_fetcher_open(remote_fetcher **out, const remote_location *loc,
                        const remote_policy *policy);
void remote_fetcher_free(remote_fetcher *f); /* NULL ok */
/* The strong ETag (quotes included) of f's last successful reply: "" when
 * it had none, a weak one or one over REMOTE_ETAG_MAX bytes. */
const char *remote_fetcher_etag(const remote_fetcher *f);
/* f's next requests carry If-Match: etag (NULL or "": none, the default):
 * a store whose object has another ETag answers 412, which fails at once,
 * SF_E_REMOTE, "the object changed at the store since the dataset was
 * opened". A fetcher taken from a pool has none set; give it back without
 * one. */
void remote_fetcher_if_match(remote_fetcher *f, const char *etag);
/* Whether f's last request failed because the store holds another object
 * than the one asked for: 404 (none), 412 to its If-Match (changed since
 * open), or another size than the manifest's. Asking again cannot help
 * while the dataset stays open, where other failures (a timeout, a 503,
 * damaged bytes) may pass. */
int remote_fetcher_replaced(const remote_fetcher *f);

/* Bytes [off, off + len) of object `name` into buf (len > 0). 0, or a
 * negative code: -ENOENT (404: the store has no such object), SF_E_REMOTE
 * (every other failure, after the retries), with the detail in
 * sf_last_error(). */
int remote_fetch_range(remote_fetcher *f, const char *name, uint64_t off, uint64_t len, void *buf);
/* remote_fetch_range of an object the caller knows to be `size` bytes (the
 * manifest's): a reply giving another size (a 206's Content-Range total, a
 * 200's length) is SF_E_REMOTE naming the URL and both sizes, never
 * retried (the store holds another object than the manifest's). */
int remote_fetch_range_sized(remote_fetcher *f, const char *name, uint64_t size, uint64_t off,
                             uint64_t len, void *buf);
/* The whole of object `name` into a malloc'd buffer (*out, *len; the caller
 * frees it). A body over `max` bytes is SF_E_LIMIT, refused as it arrives. */
int remote_fetch_object(remote_fetcher *f, const char *name, uint64_t max, uint8_t **out,
                        uint64_t *len);
/* The whole answer to a GET of the location's bucket with `query` (already
 * in SigV4's canonical form: names sorted, values percent-encoded), e.g.
 * ListObjectsV2's "list-type=2&prefix=...": s3 only (remote_bucket_url).
 * As remote_fetch_object otherwise. */
int remote_fetch_listing(remote_fetcher *f, const char *query, uint64_t max, uint8_t **out, uint64_t *len);
/* Bytes [0, size) of object `name` written to fd from its offset 0, with
 * ranges (a retry resumes where it stopped). 0 or a negative code; an
 * object of another size than `size` is SF_E_REMOTE (as _sized). */
int remote_fetch_to_fd(remote_fetcher *f, const char *name, uint64_t size, int fd);

/* Fetchers shared by threads: take one (made when none is idle), give it
 * back after the request. Thread-safe. */
typedef struct remote_pool remote_pool;
int remote_pool_open(remote_pool **out, const remote_location *loc, const remote_policy *policy);
void remote_pool_free(remote_pool *p); /* NULL ok; every fetcher given back */
int remote_pool_take(remote_fetcher **out, remote_pool *p);
void remote_pool_give(remote_pool *p, remote_fetcher *f);
/* What a caller of remote_pool_fetch_to_fd sees of the bytes as they
 * arrive, before they are written (to check them while they are still in
 * the CPU's cache). Part k is the object's bytes [lo, hi): `begin` runs
 * before its first request, `bytes` with each piece of it accepted, at the
 * piece's offset in the object, in order within the part (a retry resumes
 * after the last piece); a part whose body turned out longer than its range
 * is fetched again from lo, and `bytes` then starts at lo again. Both run
 * on the thread fetching the part; parts run at once. */
typedef struct remote_watch {
    void (*begin)(void *ctx, unsigned part, uint64_t lo, uint64_t hi);
    void (*bytes)(void *ctx, unsigned part, uint64_t off, const uint8_t *p, size_t n);
    void *ctx;
} remote_watch;
/* remote_fetch_to_fd in up to max_parts (1..REMOTE_PARTS) ranges fetched
 * at once by as many threads, each with a fetcher of the pool, each written
 * at its offset (each retried as remote_fetch_range is, a retry resuming
 * where its range stopped), shown to `watch` (NULL: none) as they arrive.
 * With `etag` (NULL: none) every range is asked If-Match it, so that the
 * parts of one download are of one version of the object, the one open saw
 * (412 otherwise: remote_fetcher_if_match). 0, or the failure of the lowest
 * failing range, the others finished first; *replaced (NULL: not asked)
 * says whether that failure was remote_fetcher_replaced's kind. */
int remote_pool_fetch_to_fd(remote_pool *p, const char *name, uint64_t size, const char *etag, int fd,
                            unsigned max_parts, const remote_watch *watch, int *replaced);

/* ---- for the tests: the transport's decisions, without a server ---- */

/* Whether an attempt that ended with curl code `curl_rc` (a CURLcode) and,
 * for CURLE_OK, HTTP `status` may succeed if tried again. */
int remote_retryable(int curl_rc, long status);
/* The store's message in an error body: the text of S3's <Message> element,
 * else the body's start; control characters replaced, at most
 * REMOTE_MESSAGE_MAX characters, "" for none. */
void remote_store_message(char *out, size_t cap, const char *body, size_t len);
/* The wait before retry `attempt` (1, 2, ...), in milliseconds, for a random
 * number `rnd`: in [d/2, d] for d = min(base << (attempt-1), max). */
uint32_t remote_backoff_ms(uint32_t attempt, uint64_t rnd);

#endif
