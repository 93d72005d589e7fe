/* Internal: set the thread-local error detail. */
#ifndef SF_FORMAT_ERROR_INTERNAL_H
#define SF_FORMAT_ERROR_INTERNAL_H

#include <stdint.h>

#include "shardfeed/error.h"

/* Records a printf-style detail for sf_last_error() and returns `code`, so
 * callers can write `return sf_fail(SF_E_NPY, "%s: bad magic", path);`. */
int sf_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current detail with "prefix: " (used to add a file name to a
 * failure reported by a lower layer). Returns `code`. */
int sf_fail_prefix(int code, const char *prefix);

/* Text to append to the message of a failed open() that says which limit
 * to raise: for EMFILE the per-process limit on open files and how to raise
 * it (ulimit -n), for ENFILE the system's; "" for any other errno. */
const char *sf_errno_hint(int err);
/* strerror(err) followed by sf_errno_hint(err): for messages that print
 * an errno as text. A thread-local buffer, valid until the next call;
 * errno is left as it was. */
const char *sf_errno_text(int err);

/* The one check of an options struct's version field (every sf_*_opts):
 * 1..newest is accepted (a struct of an older version has the fields that
 * version had; the library reads only those), anything else is
 * SF_E_INVALID naming the struct. */
int sf_check_opts_version(const char *type, unsigned version, unsigned newest);

/* SF_E_INVALID naming the option when `value` is outside the bounds of
 * `param` (shardfeed/params.h: the one table of limits). */
int sf_check_param(int param, int64_t value);

/* Clears the detail. */
void sf_clear_error(void);

#endif
