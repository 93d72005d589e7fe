/* sf_push's arguments and options, and what it refuses before any request
 * (the uploads themselves: tests/remote/test_push.py, against s3rver). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "shardfeed/shardfeed.h"

static void no_aws_settings(void)
{
    static const char *const vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
                                       "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("HOME", "/nonexistent-home", 1);
}

TestSuite(push, .init = no_aws_settings);

Test(push, arguments)
{
    cr_assert_eq(sf_push(NULL, "s3://bucket/ds", NULL), SF_E_INVALID);
    cr_assert_eq(sf_push("/tmp", NULL, NULL), SF_E_INVALID);
    cr_assert_eq(sf_push("/tmp", "ftp://host/ds", NULL), SF_E_UNSUPPORTED);
    cr_assert_not_null(strstr(sf_last_error(), "ftp://host/ds"));
    cr_assert_eq(sf_push("/tmp", "s3://x/ds", NULL), SF_E_INVALID);
    cr_assert_not_null(strstr(sf_last_error(), "bad bucket name"));
}

Test(push, options)
{
    sf_push_opts o = SF_PUSH_OPTS_INIT;
    o.version = 99;
    cr_assert_eq(sf_push("/tmp", "s3://bucket/ds", &o), SF_E_INVALID);
    cr_assert_not_null(strstr(sf_last_error(), "sf_push_opts"));
    sf_push_opts small = SF_PUSH_OPTS_INIT;
    small.part_size = SF_PUSH_MIN_PART_SIZE - 1;
    cr_assert_eq(sf_push("/tmp", "s3://bucket/ds", &small), SF_E_INVALID);
    cr_assert_not_null(strstr(sf_last_error(), "part size"));
    sf_push_opts many = SF_PUSH_OPTS_INIT;
    many.retries = 101;
    cr_assert_eq(sf_push("/tmp", "s3://bucket/ds", &many), SF_E_INVALID);
    sf_push_opts negative = SF_PUSH_OPTS_INIT;
    negative.retries = -2; /* only -1 means the default */
    cr_assert_eq(sf_push("/tmp", "s3://bucket/ds", &negative), SF_E_INVALID);
    cr_assert_not_null(strstr(sf_last_error(), "retries -2"), "%s", sf_last_error());
}

/* No manifest: refused before anything is sent (no endpoint would answer here). */
Test(push, not_a_dataset)
{
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9", 1);
    cr_assert_eq(sf_push("/nonexistent-dataset", "s3://bucket/ds", NULL), SF_E_INPUT);
    cr_assert_not_null(strstr(sf_last_error(), "/nonexistent-dataset/manifest.sfm"));
    cr_assert_not_null(strstr(sf_last_error(), "no manifest"));
}
