/* shardfeed — push: upload a local dataset to an S3 (or S3-compatible) store,
 * or to a web server that takes PUT and DELETE (WebDAV: nginx's dav_methods).
 *
 * sf_push checks the dataset first (its manifest, every shard's header,
 * footer and index against it, and every record's checksum, padding and
 * bool values, as verify does), so a damaged dataset uploads nothing, then
 * uploads every shard file (holding the folder's .shardfeed.lock shared, so
 * that a pack or merge into it is refused meanwhile), and the manifest LAST, so a reader never finds a manifest
 * whose shards are not all there. After the manifest, shard objects an
 * earlier, larger dataset left under the destination (shard-NNNNNN.sfs at
 * or past the new shard count; nothing else) are deleted; a failure of
 * that still returns 0, with a warning on stderr naming what is left. Shards larger than multipart_threshold go
 * up to S3 as multipart uploads of part_size parts (to a web server, every
 * file in one PUT). On S3 with credentials each upload is signed with its
 * body's SHA-256, so the store refuses bytes damaged on the way; any other
 * upload (a web server, S3 without credentials) is read back whole and
 * compared with the local bytes, and uploaded again when it differs. Each
 * request is retried
 * with exponential backoff and jitter on a 5xx or 429 status, on a body the
 * store found damaged, and on a
 * transport failure (a reset, a timeout, a short answer); after the retries
 * the error (SF_E_REMOTE) names the object's URL, the HTTP status and the
 * store's own <Code> and <Message>. Credentials, region and endpoint come
 * from the environment and the AWS files as for reading (README "Remote
 * datasets").
 */
#ifndef SHARDFEED_PUSH_H
#define SHARDFEED_PUSH_H

#include <signal.h>
#include <stdint.h>

#include "shardfeed/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called after each object is uploaded (`done` of `total` objects, the
 * object's name and size). */
typedef void (*sf_push_progress_fn)(void *ctx, uint64_t done, uint64_t total, const char *name,
                                    uint64_t bytes);

#define SF_PUSH_OPTS_VERSION 2 /* 2: cancel */
#define SF_PUSH_DEFAULT_THRESHOLD (64ull << 20)
#define SF_PUSH_DEFAULT_PART_SIZE (16ull << 20)
#define SF_PUSH_MIN_PART_SIZE (64ull << 10) /* S3 itself wants 5 MiB but for the last part */
#define SF_PUSH_DEFAULT_RETRIES 8

typedef struct sf_push_opts {
    unsigned version;             /* SF_PUSH_OPTS_VERSION */
    uint64_t multipart_threshold; /* bytes; larger shards go up in parts. 0: 64 MiB */
    uint64_t part_size;           /* bytes, >= SF_PUSH_MIN_PART_SIZE. 0: 16 MiB (raised to
                                     keep a shard within S3's 10,000 parts) */
    int retries;                  /* attempts after the first, per request, 0 to 100.
                                     -1: 8 */
    unsigned backoff_ms;          /* the first retry's wait; doubles per retry up to 100x,
                                     with full jitter. 0: 200 ms */
    int overwrite;                /* the destination already holds a manifest: 0 refuses
                                     (SF_E_EXISTS), 1 deletes that manifest first */
    sf_push_progress_fn progress; /* or NULL */
    void *progress_ctx;
    /* Version 2. NULL, or a flag that stops the push once non-zero (a
     * signal handler may set it): the request under way ends at once, a
     * multipart upload under way is aborted at the store (its parts were
     * kept, and billed, until a lifecycle rule removed them), nothing more
     * goes up, and sf_push returns -ECANCELED. The manifest's own upload,
     * one small PUT, is not cut short: a manifest is up whole or not at all. */
    const volatile sig_atomic_t *cancel;
} sf_push_opts;

#define SF_PUSH_OPTS_INIT {SF_PUSH_OPTS_VERSION, 0, 0, -1, 0, 0, 0, 0, 0}

/* Uploads the dataset in folder `dataset_dir` to `url` (s3://BUCKET[/PREFIX],
 * or http(s)://HOST/PATH of a server taking PUT).
 * `opts` may be NULL (defaults). 0; a code from opening the dataset (its
 * files break the format: sf_is_data_error); SF_E_EXISTS (a dataset is
 * there and overwrite is 0); SF_E_REMOTE (the store failed a request after
 * the retries); SF_E_UNSUPPORTED (a build without libcurl); SF_E_INVALID;
 * -errno. On failure no manifest was uploaded (with
 * overwrite, the old one is gone too): the destination is not a dataset. */
SF_API int sf_push(const char *dataset_dir, const char *url, const sf_push_opts *opts);

/* What sf_push checks of `url` before it reads the dataset, without one:
 * the URL, the settings and credentials it needs, `opts` (NULL: defaults;
 * on AWS S3 a part_size under 5 MiB, which S3 refuses only once every part
 * is up), and, by one request, whether the destination already holds a
 * dataset. 0; SF_E_EXISTS (a dataset is there and overwrite is 0);
 * SF_E_REMOTE; SF_E_INVALID; SF_E_UNSUPPORTED. `pack -o URL` asks it before
 * packing, which may take hours, where it learned only after. A dataset
 * put there afterwards is still refused by sf_push. */
SF_API int sf_push_check(const char *url, const sf_push_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
