/* Fuzz target: an S3 ListObjectsV2 answer as verify's stray check parses it
 * (lib/remote/remote_list.c: bytes from the network).
 *
 * Input: byte 0 picks the prefix the listing was asked for (0: the bucket's
 * root "", 1: "ds/", else "a&b/"); the rest is the answer's XML. Checks,
 * beyond "no crash, no UB, no leak, no read past the bytes":
 *  - the result is 0 or SF_E_REMOTE (the callback never stops it here);
 *  - every name handed out is directly under the prefix: not empty, no '/',
 *    no control character, at most REMOTE_LIST_KEY_MAX bytes; every size at
 *    most REMOTE_LIST_SIZE_MAX; at most one name per <Contents> counted;
 *  - a truncated page has a printable continuation token within its cap. */
#include <string.h>

#include "fuzz_common.h"
#include "remote_list.h"
#include "shardfeed/error.h"

typedef struct tally {
    uint64_t names;
} tally;

static int check_name(void *ctx, const char *name, uint64_t size)
{
    tally *t = ctx;
    size_t n = strlen(name);
    FUZZ_CHECK(n > 0 && n <= REMOTE_LIST_KEY_MAX, "a name of %zu bytes", n);
    FUZZ_CHECK(strchr(name, '/') == NULL, "name '%s' is in a sub-folder", name);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK((unsigned char)name[i] >= 0x20 && name[i] != 0x7f, "a control character in a name");
    FUZZ_CHECK(size <= REMOTE_LIST_SIZE_MAX, "size %llu", (unsigned long long)size);
    t->names++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const prefixes[] = {"", "ds/", "a&b/"};
    const char *prefix = prefixes[data[0] < 2 ? data[0] : 2];
    /* A copy of exactly the answer's bytes: a read past them is a finding. */
    size_t len = size - 1;
    char *xml = malloc(len ? len : 1);
    if (!xml)
        return 0;
    memcpy(xml, data + 1, len);
    tally t = {0};
    remote_list_page page;
    int rc = remote_list_parse(&page, xml, len, prefix, "s3://bkt/ds", check_name, &t);
    FUZZ_CHECK(rc == 0 || rc == SF_E_REMOTE, "rc %d", rc);
    if (rc == 0) {
        FUZZ_CHECK(t.names <= page.objects, "%llu names from %llu objects", (unsigned long long)t.names,
                   (unsigned long long)page.objects);
        if (page.truncated) {
            size_t n = strlen(page.next_token);
            FUZZ_CHECK(n > 0 && n <= REMOTE_LIST_TOKEN_MAX, "a token of %zu bytes", n);
            for (size_t i = 0; i < n; i++)
                FUZZ_CHECK(page.next_token[i] > ' ' && page.next_token[i] < 0x7f, "token byte %d",
                           page.next_token[i]);
        }
    } else {
        FUZZ_CHECK(strstr(sf_last_error(), "s3://bkt/ds") != NULL, "message '%s'", sf_last_error());
    }
    free(xml);
    return 0;
}
