/* The format's rules as the library states them: what is wrong with a bad
 * key (one message for every caller). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "format/format.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("format-rules-test")

TestSuite(rules, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

static void key_says(const char *key, size_t len, const char *problem)
{
    char why[600];
    cr_assert_eq(sf_key_check(key, len, why, sizeof why), 0, "key accepted");
    cr_assert(strstr(why, problem), "'%s' lacks '%s'", why, problem);
    cr_assert(strstr(why, SF_KEY_RULE), "%s", why);
    cr_assert_eq(sf_valid_key(key, len), 0);
}

Test(rules, key_messages_say_what_is_wrong)
{
    key_says("", 0, "is empty");
    key_says("../x", 4, "has a '..' component at byte 0");
    key_says("a/..", 4, "has a '..' component at byte 2");
    key_says("./a", 3, "has a '.' component at byte 0");
    key_says("a//b", 4, "has an empty component");
    key_says("a/", 2, "has an empty component");
    key_says("a\tb", 3, "has a control character at byte 1");
    key_says("a\x7f", 2, "has a control character at byte 1");
    key_says("ab\xc0\xaf", 4, "is not well-formed UTF-8 at byte 2");   /* overlong '/' */
    key_says("\xed\xa0\x80", 3, "is not well-formed UTF-8 at byte 0"); /* a surrogate */
    char long_key[300];
    memset(long_key, 'k', sizeof long_key);
    key_says(long_key, sizeof long_key, "is longer than 255 bytes (300 bytes)");
    /* The key is shown escaped and cut: never a raw control byte. */
    char why[600];
    sf_key_check("x\n", 2, why, sizeof why);
    cr_assert(strstr(why, "'x\\x0a'"), "%s", why);
    sf_key_check(long_key, sizeof long_key, why, sizeof why);
    cr_assert(strstr(why, "kkk...'"), "%s", why);
    /* Valid ones. */
    const char *ok[] = {"a", "cat/img 1.jpg", "Größe/a.png", ".hidden", "a..b", "...", "日本/x"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert_eq(sf_key_check(ok[i], strlen(ok[i]), why, sizeof why), 1, "%s", ok[i]);
}
