/* shardfeed — datasets read from a URL (README "Remote datasets").
 *
 * Wherever a dataset path is accepted, a URL is too: s3://bucket/prefix
 * (credentials, region and endpoint as AWS's own tools find them),
 * http://host/folder and https://host/folder (a dataset folder served as
 * static files with Range support). Opening reads the manifest and each
 * shard's header, footer and index with range requests; the records then
 * come one of two ways:
 *
 *   SF_REMOTE_CACHE (the default): whole shards are downloaded into a local
 *     cache folder shared by the processes of a node (file locks only), kept
 *     at or under cache_limit bytes by evicting the least recently used shard
 *     nobody reads, and read there by the local engines. A shard appears in
 *     the cache under its name only once it arrived whole and its header and
 *     footer are the ones open read.
 *   SF_REMOTE_DIRECT: every record is fetched with a range request straight
 *     into its place in the batch, many at once: for global shuffles over
 *     more data than the cache holds. Nothing is written to disk.
 *
 * Either way every record is checked against its checksum before it is
 * handed out. Requests that fail for a passing reason (5xx, 429, a reset
 * connection, a body shorter than asked for, no byte for timeout_ms) are
 * retried with exponential backoff and jitter; after the retries the error
 * names the URL, the HTTP status and the store's message.
 *
 * A dataset at a URL belongs to the process that opened it: its prefetch
 * and publish threads, connections and cache pins do not survive a fork.
 * A child must open the dataset again and neither use nor close the
 * parent's (the Python binding refuses it there, and close() leaves it). */
#ifndef SHARDFEED_REMOTE_H
#define SHARDFEED_REMOTE_H

#include <stdint.h>

#include "shardfeed/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum sf_remote_mode {
    SF_REMOTE_CACHE = 0,  /* whole shards through the local cache (default) */
    SF_REMOTE_DIRECT = 1  /* each record by a range request */
};

#define SF_REMOTE_OPTS_VERSION 1
#define SF_REMOTE_DEFAULT_CACHE_LIMIT (16ull << 30) /* 16 GiB */
#define SF_REMOTE_DEFAULT_RETRIES 6u
#define SF_REMOTE_DEFAULT_TIMEOUT_MS 30000u

/* Every member's zero value means its default. */
typedef struct sf_remote_opts {
    unsigned version;      /* SF_REMOTE_OPTS_VERSION */
    int mode;              /* enum sf_remote_mode */
    const char *cache_dir; /* NULL: $SHARDFEED_CACHE_DIR, else $XDG_CACHE_HOME/shardfeed,
                              else ~/.cache/shardfeed */
    uint64_t cache_limit;  /* bytes the cache folder may hold; 0: $SHARDFEED_CACHE_LIMIT
                              (bytes, or with a unit: 512MiB; anything else is SF_E_INVALID
                              at open), else SF_REMOTE_DEFAULT_CACHE_LIMIT */
    uint32_t retries;      /* attempts after the first failed one, at most
                              SF_REMOTE_MAX_RETRIES; 0: $SHARDFEED_REMOTE_RETRIES (0 to 100),
                              else 6 */
    uint32_t timeout_ms;   /* a request that receives nothing for this long fails (and is
                              retried); 0: $SHARDFEED_REMOTE_TIMEOUT_MS (100 to 3600000),
                              else 30000 */
} sf_remote_opts;

#define SF_REMOTE_MAX_RETRIES 100u

#define SF_REMOTE_OPTS_INIT {SF_REMOTE_OPTS_VERSION, SF_REMOTE_CACHE, NULL, 0, 0, 0}

/* 1 when `path` is a dataset URL (s3://, http://, https://), else 0. */
SF_API int sf_is_url(const char *path);

/* `path` as a message may show it, into out[0..cap): a URL with a password
 * (between "://" and the last '@' of its authority) shown as "***", cut to
 * cap - 1 bytes but never inside the password; anything else as given.
 * Returns out. */
SF_API const char *sf_url_shown(char *out, size_t cap, const char *path);

#ifdef __cplusplus
}
#endif
#endif
