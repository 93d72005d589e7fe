/* lib/remote/remote_list.c: ListObjectsV2 answers parsed as untrusted input
 * (truncated or cut-short XML, sizes past any object's, keys too long, with
 * control characters, outside the prefix or with "../", keys' character
 * references, decoded or malformed), continuation tokens, and the
 * listing's refusal of a location that has none. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_list.h"
#include "shardfeed/error.h"

typedef struct seen {
    char names[16][REMOTE_LIST_KEY_MAX + 1];
    uint64_t sizes[16];
    int n;
    int stop_after; /* 0: never */
} seen;

static int collect(void *ctx, const char *name, uint64_t size)
{
    seen *s = ctx;
    cr_assert_lt(s->n, 16);
    snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    s->sizes[s->n++] = size;
    return s->stop_after && s->n == s->stop_after ? 42 : 0;
}

static int parse(remote_list_page *page, const char *xml, const char *prefix, seen *s)
{
    return remote_list_parse(page, xml, strlen(xml), prefix, "s3://bkt/ds", collect, s);
}

#define HEAD "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
#define TAIL "</ListBucketResult>\n"
#define OBJ(key, size) "<Contents><Key>" key "</Key><ETag>\"x\"</ETag><Size>" size "</Size></Contents>"

Test(remote_list, objects_directly_under_the_prefix)
{
    seen s = {0};
    remote_list_page page;
    const char *xml = HEAD "<Name>bkt</Name><Prefix>ds/</Prefix><IsTruncated>false</IsTruncated>" OBJ(
        "ds/", "0") OBJ("ds/manifest.sfm", "1234") OBJ("ds/a&amp;b &lt;c&gt;", "7")
        OBJ("ds/sub/shard-000009.sfs", "5") OBJ("ds/../shard-000009.sfs", "5")
            OBJ("ds/shard-000009.sfs", "5497558138880") "<CommonPrefixes><Prefix>ds/sub/</Prefix></CommonPrefixes>" TAIL;
    cr_assert_eq(parse(&page, xml, "ds/", &s), 0, "%s", sf_last_error());
    cr_assert_eq(page.truncated, 0);
    cr_assert_eq(page.objects, 6);
    /* The prefix's own object and those in sub-"folders" (also through "..") are not files here. */
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.names[0], "manifest.sfm");
    cr_assert_eq(s.sizes[0], 1234);
    cr_assert_str_eq(s.names[1], "a&b <c>");
    cr_assert_str_eq(s.names[2], "shard-000009.sfs");
    cr_assert_eq(s.sizes[2], REMOTE_LIST_SIZE_MAX);
}

Test(remote_list, bucket_root_and_continuation)
{
    seen s = {0};
    remote_list_page page;
    const char *xml = HEAD "<IsTruncated>true</IsTruncated>" OBJ("shard-000000.sfs", "10")
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>" TAIL;
    cr_assert_eq(parse(&page, xml, "", &s), 0, "%s", sf_last_error());
    cr_assert_eq(page.truncated, 1);
    cr_assert_str_eq(page.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    cr_assert_eq(s.n, 1);
}

Test(remote_list, callback_stops_the_listing)
{
    seen s = {.stop_after = 1};
    remote_list_page page;
    const char *xml = HEAD OBJ("ds/a", "1") OBJ("ds/b", "2") TAIL;
    cr_assert_eq(parse(&page, xml, "ds/", &s), 42);
    cr_assert_eq(s.n, 1);
}

/* Each refused with SF_E_REMOTE, a message naming the listing, and no object after the bad one. */
static void refused(const char *xml, const char *why)
{
    seen s = {0};
    remote_list_page page;
    int rc = parse(&page, xml, "ds/", &s);
    cr_assert_eq(rc, SF_E_REMOTE, "%s: %d", why, rc);
    cr_assert(strstr(sf_last_error(), "s3://bkt/ds") != NULL, "%s: %s", why, sf_last_error());
}

Test(remote_list, hostile_answers_refused)
{
    refused("", "empty");
    refused("<Error><Code>AccessDenied</Code></Error>", "not a listing");
    refused(HEAD OBJ("ds/shard-000001.sfs", "1") "<Contents><Key>ds/shard-000002.sfs</Key><Si", "cut in an object");
    refused(HEAD OBJ("ds/shard-000001.sfs", "1"), "cut between objects");
    refused(HEAD OBJ("ds/a", "99999999999999999999999") TAIL, "a size past 64 bits");
    refused(HEAD OBJ("ds/a", "5497558138881") TAIL, "a size past 5 TiB");
    refused(HEAD OBJ("ds/a", "-1") TAIL, "a negative size");
    refused(HEAD OBJ("ds/a", "") TAIL, "an empty size");
    refused(HEAD OBJ("ds/a", "1 2") TAIL, "a size with a space");
    refused(HEAD "<Contents><Key>ds/a</Key></Contents>" TAIL, "no size");
    refused(HEAD "<Contents><Size>1</Size></Contents>" TAIL, "no key");
    refused(HEAD OBJ("../ds/shard-000001.sfs", "1") TAIL, "a key outside the prefix");
    refused(HEAD OBJ("other/shard-000001.sfs", "1") TAIL, "another prefix");
    refused(HEAD OBJ("ds/a\x01b", "1") TAIL, "a control character");
    refused(HEAD OBJ("ds/a", "1") OBJ("ds/\x7f", "1") TAIL, "DEL");
    refused(HEAD "<IsTruncated>true</IsTruncated>" TAIL, "truncated without a token");
    refused(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>" TAIL,
            "an empty token");
    refused(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>a b</NextContinuationToken>" TAIL,
            "a token with a space");
    /* A key one byte over S3's limit. */
    size_t n = REMOTE_LIST_KEY_MAX + 1;
    char *key = malloc(n + 1);
    memset(key, 'k', n);
    memcpy(key, "ds/", 3);
    key[n] = '\0';
    char *xml = malloc(n + 512);
    sprintf(xml, HEAD "<Contents><Key>%s</Key><Size>1</Size></Contents>" TAIL, key);
    refused(xml, "a key too long");
    key[n - 1] = '\0'; /* at the limit: taken */
    sprintf(xml, HEAD "<Contents><Key>%s</Key><Size>1</Size></Contents>" TAIL, key);
    seen s = {0};
    remote_list_page page;
    cr_assert_eq(parse(&page, xml, "ds/", &s), 0, "%s", sf_last_error());
    cr_assert_eq(strlen(s.names[0]), REMOTE_LIST_KEY_MAX - 3);
    /* A long token is refused, not truncated into another. */
    char *tok = malloc(2 * REMOTE_LIST_TOKEN_MAX + 256);
    memset(tok, 't', REMOTE_LIST_TOKEN_MAX + 1);
    tok[REMOTE_LIST_TOKEN_MAX + 1] = '\0';
    char *xml2 = malloc(2 * REMOTE_LIST_TOKEN_MAX + 512);
    sprintf(xml2, HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>%s</NextContinuationToken>" TAIL, tok);
    refused(xml2, "a token too long");
    free(tok);
    free(xml2);
    free(key);
    free(xml);
}

Test(remote_list, character_references_decoded_as_utf8)
{
    /* s3rver writes "'" as &#x27;: the key is under the prefix "it's/" only once decoded. */
    seen s = {0};
    remote_list_page page;
    const char *xml = HEAD OBJ("it&#x27;s/a&#39;b", "1") OBJ("it&#X27;s/&#xE9;t&#233;", "2")
        OBJ("it&apos;s/&#x1F600;&#x00041;&#0000000000000000000000000000066;", "3") OBJ("it's/&#x2f;x", "4") TAIL;
    cr_assert_eq(parse(&page, xml, "it's/", &s), 0, "%s", sf_last_error());
    cr_assert_eq(page.objects, 4);
    cr_assert_eq(s.n, 3); /* &#x2f; is a '/': a sub-"folder", as a literal one */
    cr_assert_str_eq(s.names[0], "a'b");
    cr_assert_str_eq(s.names[1], "\xc3\xa9t\xc3\xa9");
    cr_assert_str_eq(s.names[2], "\xf0\x9f\x98\x80" "AB"); /* leading zeros are not digits too many */
    cr_assert_eq(s.sizes[2], 3);
}

Test(remote_list, malformed_character_references_refused)
{
    refused(HEAD OBJ("ds/a&#;", "1") TAIL, "no digits");
    refused(HEAD OBJ("ds/a&#x;", "1") TAIL, "no hex digits");
    refused(HEAD OBJ("ds/a&#", "1") TAIL, "'&#' at the key's end");
    refused(HEAD OBJ("ds/a&#x27", "1") TAIL, "no ';'");
    refused(HEAD OBJ("ds/a&#39b", "1") TAIL, "no ';' before another character");
    refused(HEAD OBJ("ds/a&#x2g;", "1") TAIL, "not a hex digit");
    refused(HEAD OBJ("ds/a&#-39;", "1") TAIL, "a sign");
    refused(HEAD OBJ("ds/a&#xD800;", "1") TAIL, "a surrogate");
    refused(HEAD OBJ("ds/a&#57343;", "1") TAIL, "the last surrogate");
    refused(HEAD OBJ("ds/a&#x110000;", "1") TAIL, "past U+10FFFF");
    refused(HEAD OBJ("ds/a&#123456789012345678901234567890;", "1") TAIL, "30 digits");
    refused(HEAD OBJ("ds/a&#xFFFFFFFF00000027;", "1") TAIL, "a value that would wrap to 0x27");
    refused(HEAD OBJ("ds/a&#0;", "1") TAIL, "NUL");
    refused(HEAD OBJ("ds/a&#1;", "1") TAIL, "a control character");
    refused(HEAD OBJ("ds/a&#10;b", "1") TAIL, "a newline");
    refused(HEAD OBJ("ds/a&#x7F;", "1") TAIL, "DEL");
    /* A key whose multi-byte character would end one byte past S3's limit. */
    size_t n = REMOTE_LIST_KEY_MAX - 1;
    char *key = malloc(n + 16);
    memset(key, 'k', n);
    memcpy(key, "ds/", 3);
    strcpy(key + n, "&#xE9;");
    char *xml = malloc(n + 512);
    sprintf(xml, HEAD "<Contents><Key>%s</Key><Size>1</Size></Contents>" TAIL, key);
    refused(xml, "a key too long once decoded");
    strcpy(key + n - 1, "&#xE9;"); /* at the limit: taken */
    sprintf(xml, HEAD "<Contents><Key>%s</Key><Size>1</Size></Contents>" TAIL, key);
    seen s = {0};
    remote_list_page page;
    cr_assert_eq(parse(&page, xml, "ds/", &s), 0, "%s", sf_last_error());
    cr_assert_eq(strlen(s.names[0]), REMOTE_LIST_KEY_MAX - 3);
    free(key);
    free(xml);
}

Test(remote_list, every_prefix_of_a_page_is_refused_or_a_prefix_of_its_objects)
{
    /* Cut anywhere (as a body that stopped short): never a crash, never an object the whole page lacks. */
    const char *xml = HEAD OBJ("ds/shard-000001.sfs", "11") OBJ("ds/shard-000002.sfs", "22") TAIL;
    size_t len = strlen(xml);
    for (size_t cut = 0; cut < len - strlen(TAIL) + strlen("</ListBucketResult>"); cut++) {
        char *copy = malloc(cut ? cut : 1); /* exactly cut bytes: ASan sees a read past them */
        memcpy(copy, xml, cut);
        seen s = {0};
        remote_list_page page;
        int rc = remote_list_parse(&page, copy, cut, "ds/", "s3://bkt/ds", collect, &s);
        cr_assert_eq(rc, SF_E_REMOTE, "cut at %zu: %d", cut, rc);
        free(copy);
    }
}

Test(remote_list, a_web_server_has_no_listing)
{
    remote_location *loc = NULL;
    cr_assert_eq(remote_location_open(&loc, "http://127.0.0.1:1/ds"), 0, "%s", sf_last_error());
    seen s = {0};
    remote_policy policy = {0, 1000};
    cr_assert_eq(remote_list(loc, &policy, collect, &s), SF_E_UNSUPPORTED);
    cr_assert(strstr(sf_last_error(), "http://127.0.0.1:1/ds") != NULL);
    remote_location_free(loc);
}
