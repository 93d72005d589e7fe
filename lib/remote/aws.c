/* s3:// settings from the environment and the AWS files (~/.aws/credentials,
 * ~/.aws/config), resolved in the order AWS's own tools use (remote_url.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aws_config.h"
#include "error_internal.h"
#include "io.h"

/* ---- The INI format of the AWS files ------------------------------------- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* [*start, *end) trimmed of blanks on both sides. */
static void trim(const char **start, const char **end)
{
    while (*start < *end && is_blank(**start))
        (*start)++;
    while (*end > *start && is_blank((*end)[-1]))
        (*end)--;
}

static bool span_equals(const char *s, const char *e, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(e - s) == n && memcmp(s, word, n) == 0;
}

/* Key names match in any case, as in the AWS tools (Python's configparser
 * lowers them: AWS_ACCESS_KEY_ID = ... in a profile is a key pair there);
 * section names match exactly, as there too. */
static bool key_equals(const char *s, const char *e, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(e - s) == n && strncasecmp(s, word, n) == 0;
}

static int ini_scan(char **value, int *found_section, const char *text, size_t len, const char *file,
                    const char *section, const char *key)
{
    *found_section = 0;
    if (memchr(text, '\0', len))
        return sf_fail(SF_E_INVALID, "%s: holds a NUL byte: not an AWS settings file", file);
    bool in_section = false;
    unsigned line_no = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        line_no++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        if ((size_t)(eol - p) > REMOTE_AWS_LINE_MAX)
            return sf_fail(SF_E_INVALID, "%s:%u: line longer than %u bytes", file, line_no,
                           REMOTE_AWS_LINE_MAX);
        const char *s = p, *e = eol;
        p = nl ? nl + 1 : end;
        if (s < e && is_blank(*s))
            continue; /* an indented line: a nested setting (s3 = ...), not ours */
        trim(&s, &e);
        if (s == e || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            if (e[-1] != ']' || e - s < 2)
                return sf_fail(SF_E_INVALID, "%s:%u: a section header without its closing ']'", file,
                               line_no);
            const char *ns = s + 1, *ne = e - 1;
            trim(&ns, &ne);
            in_section = span_equals(ns, ne, section);
            if (in_section)
                *found_section = 1;
            continue;
        }
        const char *eq = memchr(s, '=', (size_t)(e - s));
        if (!eq)
            return sf_fail(SF_E_INVALID, "%s:%u: not a 'key = value' line", file, line_no);
        if (!in_section)
            continue;
        const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
        trim(&ks, &ke);
        trim(&vs, &ve);
        if (!key_equals(ks, ke, key))
            continue;
        free(*value); /* the last one wins, as in Python's configparser */
        *value = strndup(vs, (size_t)(ve - vs));
        if (!*value)
            return -ENOMEM;
    }
    return 0;
}

int remote_ini_get(char **value, int *found_section, const char *text, size_t len, const char *file,
                   const char *section, const char *key)
{
    *value = NULL;
    int rc = ini_scan(value, found_section, text, len, file, section, key);
    if (rc) { /* junk anywhere makes the whole file unusable */
        free(*value);
        *value = NULL;
    }
    return rc;
}

/* ---- Reading the files ---------------------------------------------------- */

/* A settings file's text: *text NULL when `path` does not exist. */
static int read_settings_file(char **text, size_t *len, const char *path)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        int e = errno;
        return sf_fail(-e, "%s: %s", path, sf_errno_text(e));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = sf_fail(-errno, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = sf_fail(SF_E_INVALID, "%s: not a regular file", path);
    } else if ((uint64_t)st.st_size > REMOTE_AWS_FILE_MAX) {
        rc = sf_fail(SF_E_INVALID, "%s: %lld bytes, more than the %u an AWS settings file may have",
                     path, (long long)st.st_size, REMOTE_AWS_FILE_MAX);
    } else {
        *len = (size_t)st.st_size;
        *text = malloc(*len + 1);
        if (!*text)
            rc = -ENOMEM;
        else if ((rc = sf_pread_full(fd, *text, *len, 0)) != 0)
            rc = sf_fail(rc == SF_E_TRUNCATED ? -EIO : rc, "%s: %s", path,
                         rc == SF_E_TRUNCATED ? "shrank while read" : strerror(-rc));
    }
    close(fd);
    if (rc) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

/* One AWS settings file, read once, and the section the profile has in it. */
typedef struct settings_file {
    char path[4096];
    char *text; /* NULL: the file does not exist */
    size_t len;
    char section[300];
    int has_section;
} settings_file;

/* Path from `env_var`, else $HOME/`home_rel`; "" when neither is set. */
static int settings_path(char *buf, size_t cap, const char *env_var, const char *home_rel)
{
    const char *p = getenv(env_var);
    const char *home = getenv("HOME");
    int n;
    if (p && *p)
        n = snprintf(buf, cap, "%s", p);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/%s", home, home_rel);
    else
        n = snprintf(buf, cap, "%s", "");
    if (n < 0 || (size_t)n >= cap)
        return sf_fail(SF_E_INVALID, "%s: the path of the AWS %s file is too long",
                       p && *p ? env_var : "HOME", home_rel);
    return 0;
}

static int settings_open(settings_file *f, const char *env_var, const char *home_rel,
                         const char *profile, bool config_style)
{
    memset(f, 0, sizeof *f);
    int rc = settings_path(f->path, sizeof f->path, env_var, home_rel);
    if (rc || !f->path[0])
        return rc;
    /* The config file names a profile "[profile NAME]", except "[default]";
     * the credentials file names it "[NAME]". */
    if (config_style && strcmp(profile, "default") != 0)
        snprintf(f->section, sizeof f->section, "profile %s", profile);
    else
        snprintf(f->section, sizeof f->section, "%s", profile);
    rc = read_settings_file(&f->text, &f->len, f->path);
    if (rc || !f->text)
        return rc;
    char *unused = NULL;
    rc = remote_ini_get(&unused, &f->has_section, f->text, f->len, f->path, f->section, "");
    free(unused);
    return rc;
}

static void settings_close(settings_file *f)
{
    if (f->text) {
        explicit_bzero(f->text, f->len);
        free(f->text);
    }
    f->text = NULL;
}

static int settings_get(char **value, const settings_file *f, const char *key)
{
    *value = NULL;
    if (!f->text || !f->has_section)
        return 0;
    int unused;
    return remote_ini_get(value, &unused, f->text, f->len, f->path, f->section, key);
}

/* ---- Checks on the values --------------------------------------------------- */

/* A region goes into a host name and into curl's "aws:amz:REGION:s3". */
static bool region_ok(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((r[i] >= 'a' && r[i] <= 'z') || (r[i] >= '0' && r[i] <= '9') || r[i] == '-'))
            return false;
    return true;
}

/* Keys and tokens go into an HTTP header or curl's user:password: printable
 * ASCII without spaces, so no value can add a header or split the pair. */
static bool secret_ok(const char *s, bool allow_colon)
{
    if (!*s || strlen(s) > REMOTE_AWS_LINE_MAX)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~' || (!allow_colon && *s == ':'))
            return false;
    return true;
}

/* ---- Resolution -------------------------------------------------------------- */

static int dup_into(char **dst, const char *src)
{
    *dst = strdup(src);
    return *dst ? 0 : -ENOMEM;
}

static int resolve_region(remote_aws *a, const settings_file *config, const char *url)
{
    const char *env = getenv("AWS_REGION");
    const char *source = "AWS_REGION";
    if (!env || !*env) {
        env = getenv("AWS_DEFAULT_REGION");
        source = "AWS_DEFAULT_REGION";
    }
    int rc;
    if (env && *env)
        rc = dup_into(&a->region, env);
    else if ((rc = settings_get(&a->region, config, "region")) == 0 && !a->region)
        rc = dup_into(&a->region, "us-east-1");
    else
        source = config->path;
    if (rc)
        return rc;
    if (!region_ok(a->region))
        return sf_fail(SF_E_INVALID, "%s: region '%.64s' (from %s) is not a region name (a-z, 0-9, '-')",
                       url, a->region, source);
    return 0;
}

static int resolve_endpoint(remote_aws *a, const settings_file *config, const char *url)
{
    static const char *const vars[] = {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return remote_endpoint_check(&a->endpoint, v, vars[i], url);
    }
    char *from_file = NULL;
    int rc = settings_get(&from_file, config, "endpoint_url");
    if (rc == 0 && from_file && *from_file)
        rc = remote_endpoint_check(&a->endpoint, from_file, config->path, url);
    free(from_file);
    return rc;
}

/* Credentials from the key pair `id`/`secret` (either may be NULL) found in
 * `source`: both or neither. */
static int take_key_pair(remote_aws *a, const char *id, const char *secret, const char *token,
                         const char *source, const char *url)
{
    if (!id && !secret)
        return 0;
    if (!id || !secret)
        return sf_fail(SF_E_INVALID, "%s: %s has %s but not %s", url, source,
                       id ? "an access key id" : "a secret access key",
                       id ? "its secret access key" : "its access key id");
    if (!secret_ok(id, false) || !secret_ok(secret, true))
        return sf_fail(SF_E_INVALID, "%s: the %s in %s is empty or holds spaces or control characters",
                       url, !secret_ok(id, false) ? "access key id" : "secret access key", source);
    if (token && *token && !secret_ok(token, true))
        return sf_fail(SF_E_INVALID, "%s: the session token in %s holds spaces or control characters",
                       url, source);
    int rc = dup_into(&a->access_key, id);
    if (!rc)
        rc = dup_into(&a->secret_key, secret);
    if (!rc && token && *token)
        rc = dup_into(&a->session_token, token);
    return rc;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int credentials_from_file(remote_aws *a, const settings_file *f, const char *url)
{
    char *id = NULL, *secret = NULL, *token = NULL;
    int rc = settings_get(&id, f, "aws_access_key_id");
    if (!rc)
        rc = settings_get(&secret, f, "aws_secret_access_key");
    if (!rc)
        rc = settings_get(&token, f, "aws_session_token");
    if (!rc) {
        char source[4400];
        snprintf(source, sizeof source, "%s [%s]", f->path, f->section);
        rc = take_key_pair(a, id && *id ? id : NULL, secret && *secret ? secret : NULL, token, source,
                           url);
    }
    if (secret)
        explicit_bzero(secret, strlen(secret));
    if (token)
        explicit_bzero(token, strlen(token));
    free(id);
    free(secret);
    free(token);
    return rc;
}

/* Settings of a profile that give credentials some other way than a key
 * pair, which the AWS tools follow and shardfeed does not. */
static const char *const OTHER_CREDENTIALS[] = {"role_arn", "credential_process", "sso_session",
                                                "sso_start_url", "web_identity_token_file"};

/* A profile with no key pair that asks for credentials another way (a
 * role, a process, SSO) is refused: going on without credentials sent
 * every request unsigned, and the store's 403 said nothing of why. One
 * that asks for nothing (a region, an endpoint) stays anonymous. */
static int refuse_other_credentials(const settings_file *creds, const settings_file *config,
                                    const char *profile, const char *url)
{
    const settings_file *files[] = {creds, config};
    for (unsigned i = 0; i < 2; i++)
        for (unsigned k = 0; k < sizeof OTHER_CREDENTIALS / sizeof OTHER_CREDENTIALS[0]; k++) {
            char *v = NULL;
            int rc = settings_get(&v, files[i], OTHER_CREDENTIALS[k]);
            bool found = v != NULL;
            free(v);
            if (rc)
                return sf_fail_prefix(rc, url);
            if (found)
                return sf_fail(SF_E_UNSUPPORTED, "%s: profile '%s' in %s gets its credentials by %s, which "
                               "shardfeed does not follow: give it a key pair, or export one (e.g. `aws "
                               "configure export-credentials --profile %s --format env`); for a public "
                               "bucket, AWS_NO_SIGN_REQUEST=YES",
                               url, profile, files[i]->path, OTHER_CREDENTIALS[k], profile);
        }
    return 0;
}

static int resolve_credentials(remote_aws *a, const settings_file *creds, const settings_file *config,
                               const char *profile, const char *url)
{
    int rc = take_key_pair(a, env_nonempty("AWS_ACCESS_KEY_ID"), env_nonempty("AWS_SECRET_ACCESS_KEY"),
                           env_nonempty("AWS_SESSION_TOKEN"), "the environment", url);
    if (rc || a->access_key)
        return rc;
    rc = credentials_from_file(a, creds, url);
    if (rc || a->access_key)
        return rc;
    rc = credentials_from_file(a, config, url);
    if (rc || a->access_key)
        return rc;
    return refuse_other_credentials(creds, config, profile, url);
}

/* AWS_NO_SIGN_REQUEST, as GDAL reads it and as the AWS CLI's
 * --no-sign-request means: every request unsigned, whatever credentials
 * the environment and files hold (a public bucket read by someone whose
 * default profile is SSO, which would otherwise be refused). *on: 1 or 0. */
static int no_sign_request(bool *on, const char *url)
{
    const char *v = env_nonempty("AWS_NO_SIGN_REQUEST");
    *on = false;
    if (!v)
        return 0;
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (unsigned i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i]))
            *on = true;
        if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i]))
            return 0;
    }
    return sf_fail(SF_E_INVALID, "%s: AWS_NO_SIGN_REQUEST is '%.64s': give YES or NO", url, v);
}

int remote_aws_resolve(remote_aws *out, const char *url)
{
    memset(out, 0, sizeof *out);
    const char *profile = env_nonempty("AWS_PROFILE");
    bool named = profile != NULL;
    if (!profile)
        profile = "default";
    if (strlen(profile) > 256)
        return sf_fail(SF_E_INVALID, "%s: AWS_PROFILE is longer than 256 bytes", url);
    settings_file creds, config;
    int rc = settings_open(&creds, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", profile, false);
    int rc2 = rc ? 0 : settings_open(&config, "AWS_CONFIG_FILE", ".aws/config", profile, true);
    if (rc) {
        settings_close(&creds);
        return sf_fail_prefix(rc, url);
    }
    rc = rc2 ? sf_fail_prefix(rc2, url) : 0;
    if (!rc && named && !creds.has_section && !config.has_section)
        rc = sf_fail(SF_E_INVALID, "%s: AWS_PROFILE names profile '%s', which neither %s nor %s has",
                     url, profile, creds.path[0] ? creds.path : "(no credentials file)",
                     config.path[0] ? config.path : "(no config file)");
    if (!rc)
        rc = resolve_region(out, &config, url);
    if (!rc)
        rc = resolve_endpoint(out, &config, url);
    bool unsigned_only = false;
    if (!rc)
        rc = no_sign_request(&unsigned_only, url);
    if (!rc && !unsigned_only)
        rc = resolve_credentials(out, &creds, &config, profile, url);
    settings_close(&creds);
    settings_close(&config);
    if (rc)
        remote_aws_clear(out);
    return rc;
}

static void free_secret(char **s)
{
    if (*s) {
        explicit_bzero(*s, strlen(*s));
        free(*s);
    }
    *s = NULL;
}

void remote_aws_clear(remote_aws *a)
{
    free(a->region);
    free(a->endpoint);
    a->region = a->endpoint = NULL;
    free_secret(&a->access_key);
    free_secret(&a->secret_key);
    free_secret(&a->session_token);
}
