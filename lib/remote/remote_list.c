/* ListObjectsV2 over an s3:// location, parsed defensively (remote_list.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "remote_list.h"

/* ---- The answer's XML ---------------------------------------------------------- */

/* The first `needle` in [hay, hay + len), or NULL (glibc's memmem: the
 * answer is not NUL-terminated). */
static const char *find_in(const char *hay, size_t len, const char *needle)
{
    return memmem(hay, len, needle, strlen(needle));
}

/* The text of the first <tag>...</tag> in [s, s + len): *text and *tlen;
 * 0 when absent or unclosed. */
static int element(const char *s, size_t len, const char *tag, const char **text, size_t *tlen)
{
    char open[32], close[32];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = find_in(s, len, open);
    if (!a)
        return 0;
    a += strlen(open);
    const char *b = find_in(a, len - (size_t)(a - s), close);
    if (!b)
        return 0;
    *text = a;
    *tlen = (size_t)(b - a);
    return 1;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The code point of the character reference "&#DDD;" or "&#xHH;" at s
 * (len bytes left), *used its length; -1 when malformed or not a key's
 * character. Stores write any character this way (s3rver: "'" as &#x27;),
 * so a key is not under its prefix until they are decoded; the digits are
 * untrusted: no 0 or other control character, surrogate, or code point
 * past U+10FFFF, and a run of digits is refused once past it (no wrap). */
static int32_t char_ref(const char *s, size_t len, size_t *used)
{
    int hex = len > 2 && (s[2] == 'x' || s[2] == 'X');
    size_t i = hex ? 3 : 2, first = i;
    uint32_t cp = 0;
    for (; i < len && s[i] != ';'; i++) {
        int d = hex ? hex_digit(s[i]) : s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : -1;
        if (d < 0)
            return -1;
        cp = cp * (hex ? 16 : 10) + (uint32_t)d; /* cp <= 0x10ffff before: never wraps */
        if (cp > 0x10ffff)
            return -1;
    }
    if (i == first || i == len) /* no digits, or no ';' */
        return -1;
    if (cp < 0x20 || cp == 0x7f || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *used = i + 1;
    return (int32_t)cp;
}

/* XML text with its references decoded into out (cap bytes with the NUL):
 * the named entities and character references, the latter as UTF-8. -1
 * when it does not fit or holds a control character, literal or by
 * reference (a key may not: remote_list.h), or a malformed character
 * reference; an '&' that starts neither is kept as it is. */
static int decode_text(char *out, size_t cap, const char *s, size_t len)
{
    static const struct {
        const char *ref;
        char c;
    } named[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        char c = s[i];
        size_t used = 1;
        if ((unsigned char)c < 0x20 || c == 0x7f)
            return -1;
        if (c == '&' && len - i > 1 && s[i + 1] == '#') {
            int32_t cp = char_ref(s + i, len - i, &used);
            if (cp < 0)
                return -1;
            static const unsigned char lead[] = {0, 0, 0xc0, 0xe0, 0xf0}; /* UTF-8's first byte, by length */
            size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (o + n >= cap)
                return -1;
            for (size_t k = n - 1; k > 0; k--, cp >>= 6)
                out[o + k] = (char)(0x80 | (cp & 0x3f));
            out[o] = (char)(lead[n] | cp);
            o += n;
            i += used;
            continue;
        }
        if (c == '&')
            for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
                size_t n = strlen(named[k].ref);
                if (len - i >= n && memcmp(s + i, named[k].ref, n) == 0) {
                    c = named[k].c;
                    used = n;
                    break;
                }
            }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
        i += used;
    }
    out[o] = '\0';
    return 0;
}

/* A decimal size of at most REMOTE_LIST_SIZE_MAX; -1 for anything else. */
static int parse_size(uint64_t *out, const char *s, size_t len)
{
    if (len == 0 || len > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0'); /* v <= 5 TiB before: never wraps */
        if (v > REMOTE_LIST_SIZE_MAX)
            return -1;
    }
    *out = v;
    return 0;
}

/* One <Contents> element: its key below the prefix and its size to fn. */
static int parse_object(const char *s, size_t len, const char *prefix, const char *what, remote_list_fn fn,
                        void *ctx)
{
    const char *t;
    size_t tl;
    char key[REMOTE_LIST_KEY_MAX + 1];
    if (!element(s, len, "Key", &t, &tl))
        return sf_fail(SF_E_REMOTE, "%s: the store's listing has an object without a <Key>", what);
    if (decode_text(key, sizeof key, t, tl) != 0)
        return sf_fail(SF_E_REMOTE, "%s: the store's listing has a key over %u bytes or with a control "
                       "character", what, REMOTE_LIST_KEY_MAX);
    size_t pl = strlen(prefix);
    if (strncmp(key, prefix, pl) != 0)
        return sf_fail(SF_E_REMOTE, "%s: the store's listing names '%.200s', which is not under the prefix "
                       "asked for", what, key);
    uint64_t size;
    if (!element(s, len, "Size", &t, &tl) || parse_size(&size, t, tl) != 0)
        return sf_fail(SF_E_REMOTE, "%s: the store's listing gives '%.200s' no size, or one that is not a "
                       "number of at most 5 TiB", what, key);
    const char *name = key + pl;
    if (!*name || strchr(name, '/'))
        return 0; /* the prefix's own "folder" object, or one in a sub-"folder": not a file here */
    return fn(ctx, name, size);
}

int remote_list_parse(remote_list_page *page, const char *xml, size_t len, const char *prefix,
                      const char *what, remote_list_fn fn, void *ctx)
{
    memset(page, 0, sizeof *page);
    if (!find_in(xml, len, "<ListBucketResult"))
        return sf_fail(SF_E_REMOTE, "%s: the store's answer is not a listing (no <ListBucketResult>)", what);
    size_t end = len; /* a page cut short would hide the objects after the cut: refused */
    while (end > 0 && (xml[end - 1] == ' ' || xml[end - 1] == '\n' || xml[end - 1] == '\r' || xml[end - 1] == '\t'))
        end--;
    static const char close[] = "</ListBucketResult>";
    if (end < sizeof close - 1 || memcmp(xml + end - (sizeof close - 1), close, sizeof close - 1) != 0)
        return sf_fail(SF_E_REMOTE, "%s: the store's listing is cut short (it does not end with %s)", what, close);
    len = end;
    const char *s = xml;
    size_t left = len, tl;
    const char *t;
    while (element(s, left, "Contents", &t, &tl)) {
        int rc = parse_object(t, tl, prefix, what, fn, ctx);
        if (rc)
            return rc;
        page->objects++;
        size_t used = (size_t)(t + tl - s) + strlen("</Contents>");
        s += used;
        left -= used;
    }
    if (element(xml, len, "IsTruncated", &t, &tl))
        page->truncated = tl == 4 && memcmp(t, "true", 4) == 0;
    if (!page->truncated)
        return 0;
    if (!element(xml, len, "NextContinuationToken", &t, &tl) || tl == 0 || tl > REMOTE_LIST_TOKEN_MAX)
        return sf_fail(SF_E_REMOTE, "%s: the store's listing is truncated without a usable "
                       "<NextContinuationToken>", what);
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)t[i] <= ' ' || (unsigned char)t[i] >= 0x7f)
            return sf_fail(SF_E_REMOTE, "%s: the store's continuation token has a byte that is not printable",
                           what);
    memcpy(page->next_token, t, tl);
    page->next_token[tl] = '\0';
    return 0;
}

/* ---- The requests ---------------------------------------------------------------- */

/* The location's key prefix as the store's keys spell it (percent-decoded),
 * with a trailing '/' unless it is the bucket's root. Malloc'd. */
static char *raw_prefix(const remote_location *loc)
{
    const char *enc = remote_location_key_prefix(loc);
    char *raw = malloc(strlen(enc) + 2), *o = raw;
    if (!raw)
        return NULL;
    for (const char *p = enc; *p; p++) {
        int hi, lo;
        if (p[0] == '%' && (hi = hex_digit(p[1])) >= 0 && (lo = hex_digit(p[2])) >= 0) {
            *o++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    if (o != raw)
        *o++ = '/';
    *o = '\0';
    return raw;
}

/* ListObjectsV2's query, its names sorted as SigV4's canonical query wants. */
static char *list_query(const char *prefix, const char *token)
{
    size_t cap = 64 + 3 * strlen(prefix) + 3 * strlen(token);
    char *q = malloc(cap), *o = q;
    if (!q)
        return NULL;
    if (*token) {
        o += sprintf(o, "continuation-token=");
        remote_query_encode(o, cap - (size_t)(o - q), token);
        o += strlen(o);
        *o++ = '&';
    }
    o += sprintf(o, "delimiter=%%2F&list-type=2&prefix=");
    remote_query_encode(o, cap - (size_t)(o - q), prefix);
    return q;
}

int remote_list(const remote_location *loc, const remote_policy *policy, remote_list_fn fn, void *ctx)
{
    if (remote_location_kind(loc) != REMOTE_S3)
        return sf_fail(SF_E_UNSUPPORTED, "%s: a web server has no listing of its files",
                       remote_location_display(loc));
    remote_fetcher *f = NULL;
    remote_list_page *page = malloc(sizeof *page);
    char *prefix = raw_prefix(loc), token[REMOTE_LIST_TOKEN_MAX + 1] = "";
    int rc = page && prefix ? remote_fetcher_open(&f, loc, policy) : -ENOMEM;
    char what[512];
    snprintf(what, sizeof what, "listing the objects of %s", remote_location_display(loc));
    for (uint32_t pages = 0; !rc; pages++) {
        if (pages == REMOTE_LIST_PAGES_MAX) {
            rc = sf_fail(SF_E_REMOTE, "%s: more than %u pages", what, REMOTE_LIST_PAGES_MAX);
            break;
        }
        char *query = list_query(prefix, token);
        uint8_t *xml = NULL;
        uint64_t len = 0;
        rc = query ? remote_fetch_listing(f, query, REMOTE_LIST_PAGE_MAX, &xml, &len) : -ENOMEM;
        free(query);
        if (!rc)
            rc = remote_list_parse(page, (const char *)xml, (size_t)len, prefix, what, fn, ctx);
        free(xml);
        if (rc || !page->truncated)
            break;
        if (strcmp(page->next_token, token) == 0) { /* the same page again: it would never end */
            rc = sf_fail(SF_E_REMOTE, "%s: the store gave the same continuation token twice", what);
            break;
        }
        memcpy(token, page->next_token, sizeof token);
    }
    if (rc == -ENOMEM)
        sf_fail(rc, "%s: out of memory", what);
    remote_fetcher_free(f);
    free(prefix);
    free(page);
    return rc;
}
