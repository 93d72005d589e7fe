/* Listing the objects under an s3:// location (ListObjectsV2), for verify's
 * check of stray objects (README "Remote datasets").
 *
 * The listing asks for the objects directly under the location's prefix
 * (delimiter '/': objects in a sub-"folder" come back as CommonPrefixes,
 * which are ignored, as a folder's subfolders are by a local listing), page
 * by page. The store's XML is untrusted: a page is at most
 * REMOTE_LIST_PAGE_MAX bytes, a key at most REMOTE_LIST_KEY_MAX bytes and
 * free of control characters, a size a plain decimal of at most
 * REMOTE_LIST_SIZE_MAX, a continuation token at most REMOTE_LIST_TOKEN_MAX
 * printable bytes that changes from page to page, at most
 * REMOTE_LIST_PAGES_MAX pages; anything else is SF_E_REMOTE naming the
 * location and what is wrong, never a crash or a loop. Plain http(s) has
 * no listing: SF_E_UNSUPPORTED. */
#ifndef SF_REMOTE_LIST_H
#define SF_REMOTE_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "fetch.h"
#include "remote_url.h"

#define REMOTE_LIST_PAGE_MAX (16u << 20)       /* bytes of one page (1000 keys of 1 KiB, escaped) */
#define REMOTE_LIST_KEY_MAX 1024u              /* S3's limit on a key */
#define REMOTE_LIST_TOKEN_MAX 1024u
#define REMOTE_LIST_SIZE_MAX (5ull << 40)      /* S3's largest object: 5 TiB */
#define REMOTE_LIST_PAGES_MAX 100000u          /* 100 million objects */

/* Called for each object directly under the prefix: its name below the
 * prefix (no '/', not empty; XML's named entities and character
 * references decoded, the latter as UTF-8) and size. A
 * nonzero return stops the listing and is returned. */
typedef int (*remote_list_fn)(void *ctx, const char *name, uint64_t size);

typedef struct remote_list_page {
    int truncated;                            /* more pages follow */
    char next_token[REMOTE_LIST_TOKEN_MAX + 1]; /* their continuation token */
    uint64_t objects;                         /* <Contents> on this page */
} remote_list_page;

/* Parses one ListObjectsV2 answer (`xml`, `len` bytes, not NUL-terminated)
 * for objects whose keys start with `prefix` ("" or "dir/sub/": keys that
 * do not are an error, keys in a sub-"folder" are skipped), calling fn for
 * each. `what` names the listing in errors. 0, fn's nonzero return, or
 * SF_E_REMOTE. */
int remote_list_parse(remote_list_page *page, const char *xml, size_t len, const char *prefix,
                      const char *what, remote_list_fn fn, void *ctx);

/* Lists the objects directly under s3 location `loc`, fn for each (in the
 * store's order). 0, fn's nonzero return, SF_E_UNSUPPORTED (http), or a
 * failure of the requests (fetch.h: SF_E_REMOTE, -ENOENT for a missing
 * bucket) or of the parse. */
int remote_list(const remote_location *loc, const remote_policy *policy, remote_list_fn fn, void *ctx);

#endif
