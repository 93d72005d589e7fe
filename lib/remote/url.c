/* Dataset URLs: parsing, object URLs, and what each curl request needs.
 * Without libcurl (SF_HAVE_REMOTE 0) only remote_is_url works; opening a
 * URL says the build lacks it (the stubs at the end). */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "aws_config.h"
#include "error_internal.h"
#include "remote_url.h"
#include "shardfeed_config.h"

static bool starts_with_nocase(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

int remote_is_url(const char *path)
{
    return path && (starts_with_nocase(path, "s3://") || starts_with_nocase(path, "http://") ||
                    starts_with_nocase(path, "https://"));
}

void remote_url_redact(char *out, size_t cap, const char *url)
{
    if (!cap)
        return;
    if (!url) {
        snprintf(out, cap, "(null)");
        return;
    }
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t auth_len = strcspn(auth, "/");
    const char *at = NULL;
    for (const char *c = auth; c < auth + auth_len; c++)
        if (*c == '@')
            at = c;
    const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    if (!colon) {
        snprintf(out, cap, "%s", url);
        return;
    }
    size_t head = (size_t)(colon + 1 - url);
    if (head >= cap)
        head = cap - 1; /* cut before the password: never a piece of it */
    snprintf(out, cap, "%.*s***%s", (int)head, url, at);
}

#if SF_HAVE_REMOTE
#include <curl/curl.h>

struct remote_location {
    remote_kind kind;
    char *display; /* the URL as given, a password shown as "***" */
    /* Objects are at BASE/[KEY_PREFIX/]NAME. http: base is the URL without
     * trailing '/' and key_prefix "". s3: base is the bucket's URL
     * (ENDPOINT/BUCKET, https://BUCKET.s3.REGION.amazonaws.com, ...) and
     * key_prefix the percent-encoded prefix, "" for the bucket's root. */
    char *base;
    char *key_prefix;
    remote_aws aws;               /* s3 only */
    char sigv4[96];               /* "aws:amz:REGION:s3" when signed, else "" */
    struct curl_slist *headers;   /* signed: the payload hash's and the session token's headers */
};

#define URL_MAX 8192u /* longer is a mistake, not a dataset */

/* ---- Percent-encoding ------------------------------------------------------- */

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* Appends `s` percent-encoded ('/' kept) at *p; the caller sized the buffer
 * for 3 bytes per input byte. */
static char *append_encoded(char *p, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (unreserved(*c) || *c == '/') {
            *p++ = (char)*c;
        } else {
            *p++ = '%';
            *p++ = hex[*c >> 4];
            *p++ = hex[*c & 15];
        }
    }
    *p = '\0';
    return p;
}

/* A key or key prefix: no control bytes, no empty, "." or ".." segment (curl
 * would squash the dot segments and sign another path than S3 stores).
 * Returns NULL when fine, else what is wrong. */
static const char *key_problem(const char *key)
{
    if (!*key)
        return "an empty object name";
    for (const unsigned char *c = (const unsigned char *)key; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return "a control character";
    const char *seg = key;
    for (;;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
        if (n == 0)
            return "an empty path segment ('//' or a leading '/')";
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return "a '.' or '..' path segment";
        if (!slash)
            return NULL;
        seg = slash + 1;
    }
}

/* ---- http(s) URLs and endpoints ---------------------------------------------- */

/* Whether the path `p` (after its leading '/') has a "." or ".." segment. */
static bool dot_segment(const char *p)
{
    for (;;) {
        size_t n = strcspn(p, "/"), dots = 0, i = 0;
        /* A dot is '.' or "%2e": curl leaves "%2e%2e" alone, a server decodes
         * and resolves it (nginx does), which reads and writes what ".." would. */
        while (i < n) {
            if (p[i] == '.')
                i += 1;
            else if (n - i >= 3 && p[i] == '%' && p[i + 1] == '2' && (p[i + 2] | 0x20) == 'e')
                i += 3;
            else
                break;
            dots++;
        }
        if (i == n && (dots == 1 || dots == 2))
            return true;
        if (!p[n])
            return false;
        p += n + 1;
    }
}

/* 1 when the URL in `h` has `part` (curl's URL API allocates it: freed). */
static int url_has_part(CURLU *h, CURLUPart part)
{
    char *value = NULL;
    CURLUcode uc = curl_url_get(h, part, &value, 0);
    curl_free(value);
    return uc == CURLUE_OK;
}

/* Checks an http(s) URL with curl's own parser: scheme, host, no query or
 * fragment (object names are appended to the path). `allow_user`: a user
 * and password may be given (a dataset URL; not an endpoint). Errors name
 * `source` and `what`. */
static int check_http_url(const char *url, bool allow_user, const char *what, const char *source)
{
    CURLU *h = curl_url();
    if (!h)
        return -ENOMEM;
    int rc = 0;
    char *scheme = NULL;
    CURLUcode uc = curl_url_set(h, CURLUPART_URL, url, 0);
    const char *path = strstr(url, "://");
    path = path ? strchr(path + 3, '/') : NULL;
    if (uc != CURLUE_OK)
        rc = sf_fail(SF_E_INVALID, "%s: %s: %s%s", source, what, curl_url_strerror(uc),
                     strpbrk(url, " \t") ? " (percent-encode a space as %20)" : "");
    else if (path && dot_segment(path + 1))
        rc = sf_fail(SF_E_INVALID, "%s: %s: has a '.' or '..' path segment (curl would resolve it and "
                     "read or write another path than the one given)", source, what);
    else if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        rc = sf_fail(SF_E_INVALID, "%s: %s: the scheme must be http or https", source, what);
    else if (url_has_part(h, CURLUPART_QUERY))
        rc = sf_fail(SF_E_INVALID, "%s: %s: has a query ('?...'): object names are appended to the path",
                     source, what);
    else if (url_has_part(h, CURLUPART_FRAGMENT))
        rc = sf_fail(SF_E_INVALID, "%s: %s: has a fragment ('#...')", source, what);
    else if (!allow_user && (url_has_part(h, CURLUPART_USER) || url_has_part(h, CURLUPART_PASSWORD)))
        rc = sf_fail(SF_E_INVALID, "%s: %s: has a user name: give credentials in AWS_ACCESS_KEY_ID "
                     "and AWS_SECRET_ACCESS_KEY or ~/.aws/credentials", source, what);
    curl_free(scheme);
    curl_url_cleanup(h);
    return rc;
}

static char *strip_trailing_slashes(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
    return s;
}

int remote_endpoint_check(char **out, const char *endpoint, const char *source, const char *url)
{
    *out = NULL;
    char where[600], shown[201];
    snprintf(where, sizeof where, "%s (endpoint from %s)", url, source);
    if (strlen(endpoint) > URL_MAX)
        return sf_fail(SF_E_INVALID, "%s: longer than %u bytes", where, URL_MAX);
    remote_url_redact(shown, sizeof shown, endpoint); /* a key:secret@ in it is refused, never shown */
    char what[300];
    snprintf(what, sizeof what, "bad endpoint URL '%s'", shown);
    int rc = check_http_url(endpoint, false, what, where);
    if (rc)
        return rc;
    *out = strdup(endpoint);
    if (!*out)
        return -ENOMEM;
    strip_trailing_slashes(*out);
    return 0;
}

/* "scheme://user:***@rest" for a URL with a password; the URL otherwise. */
static char *display_without_password(const char *url)
{
    size_t cap = strlen(url) + 4;
    char *d = malloc(cap);
    if (d)
        remote_url_redact(d, cap, url);
    return d;
}

/* ---- s3:// URLs ---------------------------------------------------------------- */

/* AWS's bucket naming rules (3-63 of a-z 0-9 . -, starting and ending with
 * a letter or digit); NULL when fine, else what is wrong. */
static const char *bucket_problem(const char *b, size_t n)
{
    if (n < 3 || n > 63)
        return "a bucket name has 3 to 63 characters";
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
              b[i] == '-'))
            return "a bucket name has only lowercase letters, digits, '.' and '-'";
    if (b[0] == '.' || b[0] == '-' || b[n - 1] == '.' || b[n - 1] == '-')
        return "a bucket name starts and ends with a letter or digit";
    return NULL;
}

static int s3_base_url(remote_location *loc, const char *bucket)
{
    const remote_aws *a = &loc->aws;
    size_t cap = strlen(bucket) + strlen(a->region) + (a->endpoint ? strlen(a->endpoint) : 0) + 64;
    loc->base = malloc(cap);
    if (!loc->base)
        return -ENOMEM;
    if (a->endpoint) /* S3-compatible stores: path-style */
        snprintf(loc->base, cap, "%s/%s", a->endpoint, bucket);
    else if (strchr(bucket, '.')) /* *.s3.amazonaws.com's certificate covers no dotted name */
        snprintf(loc->base, cap, "https://s3.%s.amazonaws.com/%s", a->region, bucket);
    else
        snprintf(loc->base, cap, "https://%s.s3.%s.amazonaws.com", bucket, a->region);
    return 0;
}

static int s3_open(remote_location *loc, const char *url)
{
    const char *b = url + strlen("s3://");
    size_t bn = strcspn(b, "/");
    const char *problem = bucket_problem(b, bn);
    const char *shown = loc->display; /* errors name the URL without a password */
    if (problem) {
        const char *db = shown + strlen("s3://");
        size_t dbn = strcspn(db, "/");
        return sf_fail(SF_E_INVALID, "%s: bad bucket name '%.*s': %s", shown, (int)(dbn > 64 ? 64 : dbn),
                       db, problem);
    }
    char bucket[64];
    memcpy(bucket, b, bn);
    bucket[bn] = '\0';
    char *prefix = strdup(b[bn] == '/' ? b + bn + 1 : "");
    if (!prefix)
        return -ENOMEM;
    strip_trailing_slashes(prefix);
    int rc = 0;
    if (*prefix && (problem = key_problem(prefix)) != NULL)
        rc = sf_fail(SF_E_INVALID, "%s: the key prefix has %s", shown, problem);
    if (!rc && !(loc->key_prefix = malloc(3 * strlen(prefix) + 1)))
        rc = -ENOMEM;
    if (!rc)
        append_encoded(loc->key_prefix, prefix);
    free(prefix);
    if (!rc)
        rc = remote_aws_resolve(&loc->aws, shown); /* url: only for messages */
    if (!rc)
        rc = s3_base_url(loc, bucket);
    if (rc || !loc->aws.access_key)
        return rc;
    snprintf(loc->sigv4, sizeof loc->sigv4, "aws:amz:%s:s3", loc->aws.region);
    /* S3 wants the payload's hash in x-amz-content-sha256 on every signed
     * request. curl cannot hash a body it streams from a callback, and 7.88
     * does not add the header at all; with it set, curl signs its value.
     * UNSIGNED-PAYLOAD for reads: the bytes that come back are checked
     * against the dataset's own checksums. Push replaces it with each
     * body's SHA-256 (remote_headers_append), which the store checks. */
    loc->headers = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!loc->headers)
        return -ENOMEM;
    if (loc->aws.session_token) {
        char *h = malloc(strlen(loc->aws.session_token) + 32);
        if (!h)
            return -ENOMEM;
        sprintf(h, "x-amz-security-token: %s", loc->aws.session_token);
        struct curl_slist *n = curl_slist_append(loc->headers, h);
        explicit_bzero(h, strlen(h));
        free(h);
        if (!n)
            return -ENOMEM;
        loc->headers = n;
    }
    return 0;
}

static int http_open(remote_location *loc, const char *url)
{
    int rc = check_http_url(url, true, "bad URL", loc->display);
    if (rc)
        return rc;
    loc->base = strdup(url);
    if (!loc->base)
        return -ENOMEM;
    strip_trailing_slashes(loc->base);
    loc->key_prefix = strdup("");
    return loc->key_prefix ? 0 : -ENOMEM;
}

/* ---- The location ------------------------------------------------------------------ */

int remote_location_open(remote_location **out, const char *url)
{
    *out = NULL;
    char shown[4200];
    remote_url_redact(shown, sizeof shown, url); /* before parsing: never the password */
    if (!remote_is_url(url))
        return sf_fail(SF_E_UNSUPPORTED, "%s: not a dataset URL (s3://, http:// or https://)", shown);
    if (strlen(url) > URL_MAX)
        return sf_fail(SF_E_INVALID, "%.64s...: a URL longer than %u bytes", shown, URL_MAX);
    remote_location *loc = calloc(1, sizeof *loc);
    if (!loc)
        return -ENOMEM;
    loc->kind = starts_with_nocase(url, "s3://") ? REMOTE_S3 : REMOTE_HTTP;
    loc->display = display_without_password(url);
    int rc = loc->display ? 0 : -ENOMEM;
    if (!rc)
        rc = loc->kind == REMOTE_S3 ? s3_open(loc, url) : http_open(loc, url);
    if (rc == -ENOMEM)
        rc = sf_fail(-ENOMEM, "%s: out of memory", loc->display ? loc->display : "a dataset URL");
    if (rc) {
        remote_location_free(loc);
        return rc;
    }
    *out = loc;
    return 0;
}

void remote_location_free(remote_location *loc)
{
    if (!loc)
        return;
    remote_aws_clear(&loc->aws);
    if (loc->headers) {
        for (struct curl_slist *h = loc->headers; h; h = h->next)
            explicit_bzero(h->data, strlen(h->data));
        curl_slist_free_all(loc->headers);
    }
    free(loc->display);
    free(loc->base);
    free(loc->key_prefix);
    free(loc);
}

remote_kind remote_location_kind(const remote_location *loc)
{
    return loc->kind;
}

const char *remote_location_display(const remote_location *loc)
{
    return loc->display;
}

const char *remote_location_region(const remote_location *loc)
{
    return loc->kind == REMOTE_S3 ? loc->aws.region : NULL;
}

int remote_location_signed(const remote_location *loc)
{
    return loc->sigv4[0] != '\0';
}

int remote_location_aws(const remote_location *loc)
{
    return loc->kind == REMOTE_S3 && !loc->aws.endpoint;
}

int remote_object_url(char **out, const remote_location *loc, const char *name)
{
    *out = NULL;
    const char *problem = name[0] == '/' ? "a leading '/'" : key_problem(name);
    if (problem)
        return sf_fail(SF_E_INVALID, "%s: object name '%.200s' has %s", loc->display, name, problem);
    size_t cap = strlen(loc->base) + 1 + strlen(loc->key_prefix) + 1 + 3 * strlen(name) + 1;
    char *u = malloc(cap);
    if (!u)
        return -ENOMEM;
    char *p = u + sprintf(u, "%s/", loc->base);
    if (loc->key_prefix[0])
        p += sprintf(p, "%s/", loc->key_prefix);
    append_encoded(p, name);
    *out = u;
    return 0;
}

void remote_query_encode(char *out, size_t cap, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)value; *c && o + 4 <= cap; c++) {
        if (unreserved(*c)) {
            out[o++] = (char)*c;
        } else {
            out[o++] = '%';
            out[o++] = hex[*c >> 4];
            out[o++] = hex[*c & 15];
        }
    }
    if (cap)
        out[o] = '\0';
}

int remote_bucket_url(char **out, const remote_location *loc, const char *query)
{
    *out = NULL;
    if (loc->kind != REMOTE_S3)
        return sf_fail(SF_E_UNSUPPORTED, "%s: not an s3:// location: no bucket to ask", loc->display);
    char *u = malloc(strlen(loc->base) + strlen(query) + 3);
    if (!u)
        return -ENOMEM;
    sprintf(u, "%s/?%s", loc->base, query);
    *out = u;
    return 0;
}

const char *remote_location_key_prefix(const remote_location *loc)
{
    return loc->key_prefix;
}

int remote_curl_prepare(void *curl_easy, const remote_location *loc)
{
    if (!remote_location_signed(loc))
        return 0;
    CURL *c = curl_easy;
    CURLcode cc = curl_easy_setopt(c, CURLOPT_AWS_SIGV4, loc->sigv4);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(c, CURLOPT_USERNAME, loc->aws.access_key);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(c, CURLOPT_PASSWORD, loc->aws.secret_key);
    if (cc == CURLE_OK && loc->headers)
        cc = curl_easy_setopt(c, CURLOPT_HTTPHEADER, loc->headers);
    if (cc != CURLE_OK)
        return sf_fail(SF_E_INVALID, "%s: libcurl %s cannot sign requests (AWS SigV4, curl 7.75 or newer): %s",
                       loc->display, curl_version_info(CURLVERSION_NOW)->version, curl_easy_strerror(cc));
    return 0;
}

#define PAYLOAD_HEADER "x-amz-content-sha256:"

int remote_headers_append(struct curl_slist **list, const remote_location *loc, const char *payload_sha256)
{
    char payload[sizeof PAYLOAD_HEADER + 80];
    assert(!payload_sha256 || strlen(payload_sha256) == 64);
    for (const struct curl_slist *h = loc->headers; h; h = h->next) {
        const char *line = h->data;
        if (payload_sha256 && strncasecmp(line, PAYLOAD_HEADER, strlen(PAYLOAD_HEADER)) == 0) {
            snprintf(payload, sizeof payload, "%s %s", PAYLOAD_HEADER, payload_sha256);
            line = payload; /* signed: the store checks the body against it */
        }
        struct curl_slist *n = curl_slist_append(*list, line);
        if (!n) {
            curl_slist_free_all(*list);
            *list = NULL;
            return -ENOMEM;
        }
        *list = n;
    }
    return 0;
}

#else /* !SF_HAVE_REMOTE: built without libcurl */

struct remote_location {
    remote_kind kind; /* never made */
};

int remote_endpoint_check(char **out, const char *endpoint, const char *source, const char *url)
{
    (void)endpoint, (void)source;
    *out = NULL;
    char shown[4200];
    remote_url_redact(shown, sizeof shown, url);
    return sf_fail(SF_E_UNSUPPORTED, "%s: this build has no libcurl", shown);
}

int remote_location_open(remote_location **out, const char *url)
{
    *out = NULL;
    char shown[4200];
    remote_url_redact(shown, sizeof shown, url);
    return sf_fail(SF_E_UNSUPPORTED,
                   "%s: this shardfeed was built without libcurl: s3:// and http(s):// datasets are "
                   "compiled out (install libcurl4-openssl-dev and build again)",
                   shown);
}

void remote_location_free(remote_location *loc)
{
    (void)loc;
}

remote_kind remote_location_kind(const remote_location *loc)
{
    return loc->kind;
}

const char *remote_location_display(const remote_location *loc)
{
    (void)loc;
    return "";
}

const char *remote_location_region(const remote_location *loc)
{
    (void)loc;
    return NULL;
}

int remote_location_signed(const remote_location *loc)
{
    (void)loc;
    return 0;
}

int remote_location_aws(const remote_location *loc)
{
    (void)loc;
    return 0;
}

int remote_object_url(char **out, const remote_location *loc, const char *name)
{
    (void)loc, (void)name;
    *out = NULL;
    return sf_fail(SF_E_UNSUPPORTED, "this build has no libcurl");
}

void remote_query_encode(char *out, size_t cap, const char *value)
{
    (void)value;
    if (cap)
        out[0] = '\0';
}

int remote_bucket_url(char **out, const remote_location *loc, const char *query)
{
    (void)loc, (void)query;
    *out = NULL;
    return sf_fail(SF_E_UNSUPPORTED, "this build has no libcurl");
}

const char *remote_location_key_prefix(const remote_location *loc)
{
    (void)loc;
    return "";
}

int remote_curl_prepare(void *curl_easy, const remote_location *loc)
{
    (void)curl_easy, (void)loc;
    return sf_fail(SF_E_UNSUPPORTED, "this build has no libcurl");
}

int remote_headers_append(struct curl_slist **list, const remote_location *loc, const char *payload_sha256)
{
    (void)list, (void)loc, (void)payload_sha256;
    return sf_fail(SF_E_UNSUPPORTED, "this build has no libcurl");
}

#endif
