/* Remote locations: what a dataset URL names and how to reach it.
 *
 *   s3://BUCKET[/PREFIX]   an S3 (or S3-compatible) bucket and key prefix
 *   http://HOST[:PORT]/PATH, https://...   a folder served as static files
 *
 * A dataset at s3://bucket/prefix has the objects prefix/manifest.sfm,
 * prefix/shard-000000.sfs, ...: exactly the local folder's file names.
 *
 * For s3:// the location resolves, once, what AWS's own tools would:
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *                endpoint_url in the config file; with one, objects are
 *                addressed path-style (ENDPOINT/BUCKET/KEY, what S3-compatible
 *                stores serve); without, AWS's own virtual-host URL
 *                https://BUCKET.s3.REGION.amazonaws.com/KEY (path-style on
 *                s3.REGION.amazonaws.com for a bucket with dots, which a
 *                wildcard certificate does not cover)
 *   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region in the
 *                config file, else us-east-1
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *                else the profile in the credentials file, else the profile in
 *                the config file, else none (anonymous: unsigned requests)
 *   profile      AWS_PROFILE, else "default"; a profile named by AWS_PROFILE
 *                that neither file has is an error
 *   files        AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials;
 *                AWS_CONFIG_FILE, else ~/.aws/config (absent files are skipped)
 *
 * The files are parsed as untrusted input: size and line length capped, junk
 * is an error naming the file and line, never a crash.
 */
#ifndef SF_REMOTE_URL_H
#define SF_REMOTE_URL_H

#include <stddef.h>

typedef enum remote_kind { REMOTE_HTTP = 1, REMOTE_S3 = 2 } remote_kind;
typedef struct remote_location remote_location; /* opaque */

/* 1 when `path` starts with s3://, http:// or https:// (any case), else 0
 * (a local path; NULL is not a URL). */
int remote_is_url(const char *path);

/* `url` as messages may show it, whether or not it parses: a password
 * between "://" and the last '@' before the next '/' shown as "***"
 * ("https://user:***@host/path"), the rest as given; cut to cap - 1 bytes
 * (never inside the password). NULL is "(null)". What
 * remote_location_display gives, for a URL not (yet) opened. */
void remote_url_redact(char *out, size_t cap, const char *url);

/* Parses `url` and, for s3://, resolves endpoint, region and credentials
 * (above). 0, or SF_E_INVALID (a malformed URL, a bad setting) /
 * SF_E_UNSUPPORTED (another scheme) / -errno (a file that exists but cannot
 * be read), with sf_last_error() naming the URL and what is wrong. */
int remote_location_open(remote_location **out, const char *url);
void remote_location_free(remote_location *loc); /* NULL ok; wipes the secrets */

remote_kind remote_location_kind(const remote_location *loc);
/* The URL as given, without secrets (a password in an http URL is shown as
 * "***"); for error messages. Valid until remote_location_free. */
const char *remote_location_display(const remote_location *loc);
/* The region requests are signed for (s3) or NULL (http). */
const char *remote_location_region(const remote_location *loc);
/* 1 when requests are signed (s3 with credentials), else 0. */
int remote_location_signed(const remote_location *loc);
/* 1 for s3 at AWS itself (no endpoint set: AWS_ENDPOINT_URL and the like),
 * else 0. */
int remote_location_aws(const remote_location *loc);

/* The http(s) URL of object `name` ("manifest.sfm", "shard-000001.sfs")
 * under the location, percent-encoded where needed (every byte but
 * A-Z a-z 0-9 - . _ ~ and '/': what SigV4's canonical URI wants, so the URL
 * curl signs is the one S3 checks). `name` is a relative object name: not
 * empty, no leading '/', no "." or ".." segment. Malloc'd, caller frees.
 * 0, SF_E_INVALID (a bad name) or -ENOMEM. */
int remote_object_url(char **out, const remote_location *loc, const char *name);

/* `value` percent-encoded for a query as SigV4's canonical query wants it
 * (every byte but A-Z a-z 0-9 - . _ ~, '/' too) into out: cut short, whole
 * characters only, when it does not fit in `cap` bytes (3 per byte and the
 * NUL always do). */
void remote_query_encode(char *out, size_t cap, const char *value);

/* s3: the URL of the bucket itself with `query` ("BUCKET_URL/?QUERY"), for
 * requests about the bucket (ListObjectsV2). Malloc'd. 0, SF_E_UNSUPPORTED
 * (an http location: no bucket) or -ENOMEM. */
int remote_bucket_url(char **out, const remote_location *loc, const char *query);
/* s3: the key prefix, percent-encoded as in object URLs ('/' kept), without
 * a trailing '/'; "" for the bucket's root or an http location. */
const char *remote_location_key_prefix(const remote_location *loc);

/* Sets on a curl easy handle (CURL *) what every request to this location
 * needs: for s3 with credentials, SigV4 signing (CURLOPT_AWS_SIGV4
 * "aws:amz:REGION:s3", the key pair as user and password) and its headers
 * (CURLOPT_HTTPHEADER: "x-amz-content-sha256: UNSIGNED-PAYLOAD", which S3
 * requires and curl 7.88 does not add, and with a session token
 * x-amz-security-token; a caller that sets its own header list afterwards
 * starts it with remote_headers_append);
 * for anonymous s3 and plain http, nothing. Never logs secrets. 0 or
 * SF_E_INVALID (a curl without SigV4: it names the version). */
int remote_curl_prepare(void *curl_easy, const remote_location *loc);

/* Appends the headers remote_curl_prepare sets (none unless signed) to a
 * caller's header list, for a caller that needs headers of its own on the
 * same request. With payload_sha256 (64 hex digits: payload_hash.h) the
 * signed x-amz-content-sha256 carries it instead of UNSIGNED-PAYLOAD, and
 * the store refuses a body that hashes otherwise. 0 or -ENOMEM (the list is
 * then freed and *list NULL). */
struct curl_slist;
int remote_headers_append(struct curl_slist **list, const remote_location *loc, const char *payload_sha256);

#endif
