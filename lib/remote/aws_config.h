/* Internal to lib/remote: what s3:// requests need from the environment and
 * the AWS files (remote_url.h says where each setting comes from). */
#ifndef SF_REMOTE_AWS_CONFIG_H
#define SF_REMOTE_AWS_CONFIG_H

#include <stddef.h>

typedef struct remote_aws {
    char *region;        /* never NULL once resolved */
    char *endpoint;      /* "http(s)://host[:port][/path]" without a trailing '/', or NULL */
    char *access_key;    /* NULL: anonymous */
    char *secret_key;    /* set exactly when access_key is */
    char *session_token; /* or NULL */
} remote_aws;

/* Caps on the files parsed (untrusted input). */
#define REMOTE_AWS_FILE_MAX (1u << 20) /* bytes */
#define REMOTE_AWS_LINE_MAX 16384u     /* bytes, a session token fits */

/* Fills *out from the environment and the files. `url` names the dataset in
 * errors. 0, SF_E_INVALID (a bad file or setting, sf_last_error() says which
 * file and line), -errno (a file that exists but cannot be read) or -ENOMEM;
 * on failure *out holds nothing. */
int remote_aws_resolve(remote_aws *out, const char *url);
/* Frees and wipes (the secrets) what *a holds. */
void remote_aws_clear(remote_aws *a);

/* Checks an endpoint setting ("http(s)://host[:port][/path]", no query,
 * fragment or user) from `source` (a variable or file name) and copies it
 * without trailing '/'s into *out (malloc'd). 0, SF_E_INVALID naming `url`,
 * `source` and the problem, or -ENOMEM. In url.c, with the other URL checks. */
int remote_endpoint_check(char **out, const char *endpoint, const char *source, const char *url);

/* The value of `key` in section `section` of an INI text of `len` bytes
 * (the AWS files' format: "[section]", "key = value", '#' and ';' comments,
 * indented lines are nested settings, ignored). `file` names the text in
 * errors. 0 with *value malloc'd (NULL when absent), *found_section set to
 * whether the section exists; SF_E_INVALID for junk (a line over
 * REMOTE_AWS_LINE_MAX, a NUL byte, an unterminated section header, a line
 * that is not "key = value"); -ENOMEM. */
int remote_ini_get(char **value, int *found_section, const char *text, size_t len, const char *file,
                   const char *section, const char *key);

#endif
