/* lib/remote's URLs and AWS settings: parsing, resolution from the
 * environment and the AWS files (HOME pointed at a scratch folder), object
 * URLs, bad input. Criterion runs each test in its own process, so the
 * environment set here stays in the test. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aws_config.h"
#include "remote_url.h"
#include "shardfeed/error.h"
#include "unit_helpers.h"

static char home[256];

static void clear_aws_env(void)
{
    static const char *const vars[] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
        "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_NO_SIGN_REQUEST"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void setup(void)
{
    clear_aws_env();
    const char *tmp = getenv("SF_TEST_TMP");
    if (tmp && *tmp)
        mkdir(tmp, 0755);
    snprintf(home, sizeof home, "%s/sf_remote_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(home));
    char aws[300];
    snprintf(aws, sizeof aws, "%s/.aws", home);
    cr_assert_eq(mkdir(aws, 0700), 0);
    setenv("HOME", home, 1);
}

static void teardown(void)
{
    unit_rm_tree(home);
}

TestSuite(remote_url, .init = setup, .fini = teardown);

static void write_aws_file(const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/.aws/%s", home, name);
    unit_write_file(path, (const uint8_t *)text, strlen(text));
}

/* Opens `url`, expecting success. */
static remote_location *open_ok(const char *url)
{
    remote_location *loc = NULL;
    int rc = remote_location_open(&loc, url);
    cr_assert_eq(rc, 0, "%s: %s (%s)", url, sf_strerror(rc), sf_last_error());
    cr_assert_not_null(loc);
    return loc;
}

/* Opens `url`, expecting `code` and an error that names the URL and says `why`. */
static void open_fails(const char *url, int code, const char *why)
{
    remote_location *loc = (remote_location *)1;
    int rc = remote_location_open(&loc, url);
    cr_assert_eq(rc, code, "%s: got %d (%s), expected %d", url, rc, sf_last_error(), code);
    cr_assert_null(loc);
    cr_assert_not_null(strstr(sf_last_error(), why), "%s: '%s' lacks '%s'", url, sf_last_error(), why);
}

static void expect_object_url(const remote_location *loc, const char *name, const char *want)
{
    char *u = NULL;
    int rc = remote_object_url(&u, loc, name);
    cr_assert_eq(rc, 0, "%s: %s", name, sf_last_error());
    cr_assert_str_eq(u, want);
    free(u);
}

Test(remote_url, is_url)
{
    cr_assert(remote_is_url("s3://bucket/x"));
    cr_assert(remote_is_url("S3://bucket"));
    cr_assert(remote_is_url("http://127.0.0.1:8080/ds"));
    cr_assert(remote_is_url("HTTPS://example.com/ds"));
    cr_assert_not(remote_is_url("/data/ds"));
    cr_assert_not(remote_is_url("s3:/bucket"));
    cr_assert_not(remote_is_url("ftp://host/ds"));
    cr_assert_not(remote_is_url("ds/http://x"));
    cr_assert_not(remote_is_url(NULL));
}

Test(remote_url, http_objects)
{
    remote_location *loc = open_ok("http://127.0.0.1:8080/data/ds/");
    cr_assert_eq(remote_location_kind(loc), REMOTE_HTTP);
    cr_assert_str_eq(remote_location_display(loc), "http://127.0.0.1:8080/data/ds/");
    cr_assert_null(remote_location_region(loc));
    cr_assert_not(remote_location_signed(loc));
    expect_object_url(loc, "manifest.sfm", "http://127.0.0.1:8080/data/ds/manifest.sfm");
    expect_object_url(loc, "sub dir/a+b#c.sfs", "http://127.0.0.1:8080/data/ds/sub%20dir/a%2Bb%23c.sfs");
    remote_location_free(loc);
}

Test(remote_url, http_password_not_displayed)
{
    remote_location *loc = open_ok("https://alice:s3cret@example.com/ds");
    cr_assert_str_eq(remote_location_display(loc), "https://alice:***@example.com/ds");
    cr_assert_null(strstr(remote_location_display(loc), "s3cret"));
    /* The request itself still carries the user (curl sends it as basic auth). */
    expect_object_url(loc, "manifest.sfm", "https://alice:s3cret@example.com/ds/manifest.sfm");
    remote_location_free(loc);
}

/* A URL that does not open names itself without its password too. */
static void open_fails_hiding(const char *url, const char *secret, int code, const char *why)
{
    open_fails(url, code, why);
    cr_assert_null(strstr(sf_last_error(), secret), "%s: '%s' shows the password", url, sf_last_error());
}

Test(remote_url, password_never_in_errors)
{
    open_fails_hiding("http://alice:TOPSECRET@127.0.0.1:99999999/ds", "TOPSECRET", SF_E_INVALID,
                      "http://alice:***@127.0.0.1:99999999/ds");
    open_fails_hiding("http://alice:TOPSECRET@127.0.0.1/ds#frag", "TOPSECRET", SF_E_INVALID, "fragment");
    open_fails_hiding("http://alice:TOPSECRET@127.0.0.1/ds?x@y", "TOPSECRET", SF_E_INVALID, "alice:***@");
    open_fails_hiding("https://alice:TOP:SECRET@h/ds#x", "SECRET", SF_E_INVALID, "https://alice:***@h/ds");
    open_fails_hiding("s3://alice:TOPSECRET@bucket/ds", "TOPSECRET", SF_E_INVALID, "bad bucket name");
    size_t n = 9000;
    char *lng = malloc(n + 1);
    cr_assert_not_null(lng);
    memset(lng, 'a', n);
    memcpy(lng, "http://alice:TOPSECRET@h/", 25);
    lng[n] = '\0';
    open_fails_hiding(lng, "TOPSECRET", SF_E_INVALID, "longer than");
    memset(lng, 'p', n); /* a password longer than the message shows */
    memcpy(lng, "http://alice:", 13);
    memcpy(lng + 8000, "@h/", 3);
    memset(lng + 8003, 'a', n - 8003);
    open_fails_hiding(lng, "pppp", SF_E_INVALID, "http://alice:***@");
    free(lng);
    setenv("AWS_ENDPOINT_URL", "http://AKIAEXAMPLE:wJalrSECRETKEY@127.0.0.1:9000", 1);
    open_fails_hiding("s3://bucket/ds", "wJalrSECRETKEY", SF_E_INVALID, "AKIAEXAMPLE:***@127.0.0.1:9000");
    setenv("AWS_ENDPOINT_URL", "http://k:SECRETKEY@127.0.0.1:9000/x#y", 1);
    open_fails_hiding("s3://bucket/ds", "SECRETKEY", SF_E_INVALID, "AWS_ENDPOINT_URL");
}

Test(remote_url, redact)
{
    char out[64];
    remote_url_redact(out, sizeof out, "http://alice:pw@h:1/a@b");
    cr_assert_str_eq(out, "http://alice:***@h:1/a@b");
    remote_url_redact(out, sizeof out, "http://alice@h/ds");
    cr_assert_str_eq(out, "http://alice@h/ds");
    remote_url_redact(out, sizeof out, "http://a:p@q@h/ds"); /* the last '@' of the authority */
    cr_assert_str_eq(out, "http://a:***@h/ds");
    remote_url_redact(out, sizeof out, "s3://bucket/k:v@x");
    cr_assert_str_eq(out, "s3://bucket/k:v@x");
    remote_url_redact(out, sizeof out, NULL);
    cr_assert_str_eq(out, "(null)");
    remote_url_redact(out, 10, "http://alice:pw@h/ds"); /* cut short: never inside the password */
    cr_assert_str_eq(out, "http://al");
    remote_url_redact(out, 15, "http://alice:pw@h/ds");
    cr_assert_str_eq(out, "http://alice:*");
}

Test(remote_url, bad_http_urls)
{
    open_fails("ftp://host/ds", SF_E_UNSUPPORTED, "not a dataset URL");
    open_fails("/local/ds", SF_E_UNSUPPORTED, "/local/ds");
    open_fails("http://127.0.0.1/ds?x=1", SF_E_INVALID, "query");
    open_fails("http://127.0.0.1/ds#frag", SF_E_INVALID, "fragment");
    open_fails("http://", SF_E_INVALID, "http://");
    open_fails("http://host:99999999/ds", SF_E_INVALID, "host:99999999");
}

Test(remote_url, s3_endpoint_is_path_style)
{
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4569/", 1);
    remote_location *loc = open_ok("s3://my-bucket/some/prefix/");
    cr_assert_eq(remote_location_kind(loc), REMOTE_S3);
    cr_assert_str_eq(remote_location_region(loc), "us-east-1");
    cr_assert_not(remote_location_signed(loc), "no credentials anywhere: anonymous");
    expect_object_url(loc, "manifest.sfm", "http://127.0.0.1:4569/my-bucket/some/prefix/manifest.sfm");
    expect_object_url(loc, "shard-000001.sfs", "http://127.0.0.1:4569/my-bucket/some/prefix/shard-000001.sfs");
    remote_location_free(loc);
    /* The service's own variable wins over the general one. */
    setenv("AWS_ENDPOINT_URL_S3", "https://s3.local:9000/base", 1);
    loc = open_ok("s3://my-bucket");
    expect_object_url(loc, "manifest.sfm", "https://s3.local:9000/base/my-bucket/manifest.sfm");
    remote_location_free(loc);
}

Test(remote_url, s3_keys_are_encoded_for_sigv4)
{
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4569", 1);
    remote_location *loc = open_ok("s3://bucket/a b/c+d=é~_.-");
    expect_object_url(loc, "x.sfs", "http://127.0.0.1:4569/bucket/a%20b/c%2Bd%3D%C3%A9~_.-/x.sfs");
    remote_location_free(loc);
}

Test(remote_url, s3_aws_urls)
{
    setenv("AWS_REGION", "eu-west-3", 1);
    remote_location *loc = open_ok("s3://bucket-1/ds");
    expect_object_url(loc, "manifest.sfm", "https://bucket-1.s3.eu-west-3.amazonaws.com/ds/manifest.sfm");
    remote_location_free(loc);
    /* A dotted bucket is not covered by *.s3.amazonaws.com's certificate. */
    loc = open_ok("s3://my.bucket/ds");
    expect_object_url(loc, "manifest.sfm", "https://s3.eu-west-3.amazonaws.com/my.bucket/ds/manifest.sfm");
    remote_location_free(loc);
}

Test(remote_url, bad_s3_urls)
{
    open_fails("s3://", SF_E_INVALID, "bad bucket name");
    open_fails("s3://ab/ds", SF_E_INVALID, "3 to 63");
    open_fails("s3://Bucket/ds", SF_E_INVALID, "lowercase");
    open_fails("s3://bucket_x/ds", SF_E_INVALID, "lowercase");
    open_fails("s3://-bucket/ds", SF_E_INVALID, "starts and ends");
    open_fails("s3://bucket/a//b", SF_E_INVALID, "empty path segment");
    open_fails("s3://bucket/a/../b", SF_E_INVALID, "'..'");
    open_fails("s3://bucket/a/./b", SF_E_INVALID, "'.'");
    open_fails("s3://bucket/a\tb", SF_E_INVALID, "control character");
    setenv("AWS_ENDPOINT_URL", "ftp://127.0.0.1", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "AWS_ENDPOINT_URL");
    setenv("AWS_ENDPOINT_URL", "http://user:pw@127.0.0.1", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "user name");
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1?x", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "query");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_REGION", "us-east-1:evil", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "not a region name");
}

Test(remote_url, bad_object_names)
{
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    remote_location *loc = open_ok("s3://bucket/ds");
    static const char *const bad[] = {"", "/abs", "a/../b", "..", "a//b", "a\nb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *u = (char *)1;
        cr_assert_eq(remote_object_url(&u, loc, bad[i]), SF_E_INVALID, "'%s'", bad[i]);
        cr_assert_null(u);
        cr_assert_not_null(strstr(sf_last_error(), "s3://bucket/ds"));
    }
    remote_location_free(loc);
}

Test(remote_url, region_order)
{
    write_aws_file("config", "[default]\nregion = ap-south-1\n[profile other]\nregion=eu-north-1\n");
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert_str_eq(remote_location_region(loc), "ap-south-1");
    remote_location_free(loc);
    setenv("AWS_PROFILE", "other", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert_str_eq(remote_location_region(loc), "eu-north-1");
    remote_location_free(loc);
    setenv("AWS_DEFAULT_REGION", "us-west-1", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert_str_eq(remote_location_region(loc), "us-west-1");
    remote_location_free(loc);
    setenv("AWS_REGION", "us-west-2", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert_str_eq(remote_location_region(loc), "us-west-2");
    remote_location_free(loc);
}

Test(remote_url, endpoint_from_config)
{
    write_aws_file("config", "[default]\nendpoint_url = http://127.0.0.1:7000\n");
    remote_location *loc = open_ok("s3://bucket/ds");
    expect_object_url(loc, "manifest.sfm", "http://127.0.0.1:7000/bucket/ds/manifest.sfm");
    remote_location_free(loc);
}

/* The header `name` a caller that sets its own headers gets (NULL: none). */
static char *signing_header(const remote_location *loc, const char *name)
{
    struct curl_slist *list = curl_slist_append(NULL, "Range: bytes=0-1");
    cr_assert_eq(remote_headers_append(&list, loc, NULL), 0);
    cr_assert_str_eq(list->data, "Range: bytes=0-1", "the caller's own headers come first, kept");
    char *found = NULL;
    for (struct curl_slist *h = list; h; h = h->next)
        if (strncmp(h->data, name, strlen(name)) == 0 && h->data[strlen(name)] == ':')
            found = strdup(h->data);
    curl_slist_free_all(list);
    return found;
}

static char *token_header(const remote_location *loc)
{
    return signing_header(loc, "x-amz-security-token");
}

Test(remote_url, credentials_file_and_profiles)
{
    write_aws_file("credentials", "# keys\n[default]\naws_access_key_id = AKIDDEFAULT\n"
                                  "aws_secret_access_key = secret/default+1\n\n"
                                  "[work]\r\naws_access_key_id=AKIDWORK\r\naws_secret_access_key=sw\r\n"
                                  "aws_session_token = tok3n\r\n");
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    cr_assert_null(token_header(loc));
    char *sha = signing_header(loc, "x-amz-content-sha256");
    cr_assert_not_null(sha, "S3 refuses a signed request without the payload's hash header");
    cr_assert_str_eq(sha, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    free(sha);
    CURL *c = curl_easy_init();
    cr_assert_eq(remote_curl_prepare(c, loc), 0, "%s", sf_last_error());
    curl_easy_cleanup(c);
    remote_location_free(loc);

    setenv("AWS_PROFILE", "work", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    char *h = token_header(loc);
    cr_assert_not_null(h);
    cr_assert_str_eq(h, "x-amz-security-token: tok3n");
    free(h);
    remote_location_free(loc);

    setenv("AWS_PROFILE", "nobody", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "profile 'nobody'");
}

Test(remote_url, environment_wins_over_files)
{
    write_aws_file("credentials", "[default]\naws_access_key_id = A\naws_secret_access_key = B\n");
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    setenv("AWS_SESSION_TOKEN", "ENVTOKEN", 1);
    remote_location *loc = open_ok("s3://bucket/ds");
    char *h = token_header(loc);
    cr_assert_not_null(h);
    cr_assert_str_eq(h, "x-amz-security-token: ENVTOKEN");
    free(h);
    remote_location_free(loc);
    /* Half a key pair is a mistake to report, not a reason to go anonymous. */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    open_fails("s3://bucket/ds", SF_E_INVALID, "the environment has an access key id");
}

Test(remote_url, credentials_in_config_and_file_locations)
{
    char path[400];
    snprintf(path, sizeof path, "%s/elsewhere.ini", home);
    static const char cfg[] = "[profile p]\naws_access_key_id=K\naws_secret_access_key=S\n";
    unit_write_file(path, (const uint8_t *)cfg, sizeof cfg - 1);
    setenv("AWS_CONFIG_FILE", path, 1);
    setenv("AWS_PROFILE", "p", 1);
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    remote_location_free(loc);
    write_aws_file("credentials", "[p]\naws_access_key_id = K2\n");
    open_fails("s3://bucket/ds", SF_E_INVALID, "its secret access key");
}

Test(remote_url, http_dot_segments_and_spaces)
{
    /* curl resolves dot segments: "/s/../t" read and wrote /t, where s3:// refuses them. */
    open_fails("http://127.0.0.1:9/s/../t", SF_E_INVALID, "a '.' or '..' path segment");
    open_fails("http://127.0.0.1:9/./t", SF_E_INVALID, "a '.' or '..' path segment");
    open_fails("http://127.0.0.1:9/t/..", SF_E_INVALID, "a '.' or '..' path segment");
    /* Percent-encoded: curl sends it as is, a server decodes and resolves it. */
    open_fails("http://127.0.0.1:9/a/%2e%2e/b", SF_E_INVALID, "a '.' or '..' path segment");
    open_fails("http://127.0.0.1:9/a/.%2E/b", SF_E_INVALID, "a '.' or '..' path segment");
    open_fails("http://127.0.0.1:9/%2e/b", SF_E_INVALID, "a '.' or '..' path segment");
    open_fails("http://127.0.0.1:9/a b", SF_E_INVALID, "percent-encode a space as %20");
    remote_location *loc = open_ok("http://127.0.0.1:9/a..b/.c/d.");
    expect_object_url(loc, "manifest.sfm", "http://127.0.0.1:9/a..b/.c/d./manifest.sfm");
    remote_location_free(loc);
    loc = open_ok("http://127.0.0.1:9/%2e%2e%2e/x%2e");
    remote_location_free(loc);
}

Test(remote_url, key_names_in_any_case)
{
    /* The AWS tools lower key names (configparser): these are a key pair there, and were
     * silently none here, every request then unsigned. */
    write_aws_file("credentials", "[default]\nAWS_ACCESS_KEY_ID = AKIDUPPER\nAws_Secret_Access_Key = s\n");
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    remote_location_free(loc);
}

Test(remote_url, credentials_another_way_are_refused)
{
    /* A role, a process or SSO: the AWS tools follow them, shardfeed does not, and going
     * on anonymously sent unsigned requests whose 403 said nothing of why. */
    write_aws_file("credentials", "[base]\naws_access_key_id = A\naws_secret_access_key = B\n"
                                  "[ci]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n");
    write_aws_file("config", "[profile tool]\ncredential_process = /bin/get-keys\n"
                             "[profile plain]\nregion = eu-west-1\n");
    setenv("AWS_PROFILE", "ci", 1);
    open_fails("s3://bucket/ds", SF_E_UNSUPPORTED, "profile 'ci' in ");
    open_fails("s3://bucket/ds", SF_E_UNSUPPORTED, "by role_arn, which shardfeed does not follow");
    setenv("AWS_PROFILE", "tool", 1);
    open_fails("s3://bucket/ds", SF_E_UNSUPPORTED, "by credential_process");
    /* A profile that asks for no credentials at all stays anonymous (a public bucket). */
    setenv("AWS_PROFILE", "plain", 1);
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert_not(remote_location_signed(loc));
    cr_assert_str_eq(remote_location_region(loc), "eu-west-1");
    remote_location_free(loc);
    /* Keys in the environment win, as before: the profile's role is never looked at. */
    setenv("AWS_PROFILE", "ci", 1);
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    remote_location_free(loc);
}

Test(remote_url, no_sign_request_reads_a_public_bucket_unsigned)
{
    /* A default profile on SSO is refused (credentials_another_way_are_refused); a public
     * bucket is still readable, unsigned, by saying so, as the AWS CLI's --no-sign-request. */
    write_aws_file("config", "[default]\nsso_session = corp\nregion = eu-west-1\n");
    open_fails("s3://bucket/ds", SF_E_UNSUPPORTED, "for a public bucket, AWS_NO_SIGN_REQUEST=YES");
    setenv("AWS_NO_SIGN_REQUEST", "yes", 1);
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert_not(remote_location_signed(loc));
    cr_assert_str_eq(remote_location_region(loc), "eu-west-1");
    remote_location_free(loc);
    /* Keys in the environment too: still unsigned. */
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert_not(remote_location_signed(loc));
    remote_location_free(loc);
    setenv("AWS_NO_SIGN_REQUEST", "FALSE", 1);
    loc = open_ok("s3://bucket/ds");
    cr_assert(remote_location_signed(loc));
    remote_location_free(loc);
    setenv("AWS_NO_SIGN_REQUEST", "maybe", 1);
    open_fails("s3://bucket/ds", SF_E_INVALID, "AWS_NO_SIGN_REQUEST is 'maybe': give YES or NO");
}

Test(remote_url, anonymous_without_credentials)
{
    write_aws_file("credentials", "[someone-else]\naws_access_key_id = A\naws_secret_access_key = B\n");
    remote_location *loc = open_ok("s3://bucket/ds");
    cr_assert_not(remote_location_signed(loc));
    cr_assert_null(signing_header(loc, "x-amz-content-sha256"), "anonymous requests are plain");
    CURL *c = curl_easy_init();
    cr_assert_eq(remote_curl_prepare(c, loc), 0);
    curl_easy_cleanup(c);
    remote_location_free(loc);
}

Test(remote_url, bad_credentials_files)
{
    char long_line[REMOTE_AWS_LINE_MAX + 64];
    memset(long_line, 'x', sizeof long_line);
    memcpy(long_line, "[default]\nk=", 12);
    long_line[sizeof long_line - 1] = '\0';
    write_aws_file("credentials", long_line);
    open_fails("s3://bucket/ds", SF_E_INVALID, "credentials:2: line longer than");
    write_aws_file("credentials", "[default\naws_access_key_id = A\n");
    open_fails("s3://bucket/ds", SF_E_INVALID, "credentials:1: a section header");
    write_aws_file("credentials", "[default]\njust words\n");
    open_fails("s3://bucket/ds", SF_E_INVALID, "credentials:2: not a 'key = value' line");
    write_aws_file("credentials", "[default]\naws_access_key_id = A B\naws_secret_access_key = S\n");
    open_fails("s3://bucket/ds", SF_E_INVALID, "access key id");
    char path[400];
    snprintf(path, sizeof path, "%s/.aws/credentials", home);
    unit_write_file(path, (const uint8_t *)"[default]\n\0x=y\n", 15);
    open_fails("s3://bucket/ds", SF_E_INVALID, "NUL byte");
    /* A folder where the file should be. */
    unlink(path);
    cr_assert_eq(mkdir(path, 0700), 0);
    open_fails("s3://bucket/ds", SF_E_INVALID, "not a regular file");
}

/* Random bytes and mutated files through the INI parser: an error or a
 * value, never a crash (ASan runs this), and a value is always a substring
 * of its line. */
Test(remote_url, ini_junk)
{
    static const char base[] = "[default]\naws_access_key_id = AKID\n[profile x]\nregion = r\n";
    unsigned seed = 12345;
    for (int round = 0; round < 20000; round++) {
        char buf[256];
        size_t len = (size_t)(rand_r(&seed) % (int)sizeof buf);
        if (round % 2) {
            len = sizeof base - 1;
            memcpy(buf, base, len);
            for (int k = 0; k < 4; k++)
                buf[rand_r(&seed) % (int)len] = (char)(rand_r(&seed) & 0xff);
        } else {
            for (size_t i = 0; i < len; i++)
                buf[i] = "[]=\n \t#;ab"[rand_r(&seed) % 10];
        }
        char *value = NULL;
        int found = 0;
        int rc = remote_ini_get(&value, &found, buf, len, "junk", "default", "aws_access_key_id");
        cr_assert(rc == 0 || rc == SF_E_INVALID);
        if (value) {
            cr_assert_eq(rc, 0);
            cr_assert(found);
            cr_assert_leq(strlen(value), len);
        }
        free(value);
    }
}
