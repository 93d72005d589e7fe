#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "error_internal.h"

/* Large enough for a path plus a sentence; longer details are cut. */
static _Thread_local char last_error[1024];

const char *sf_last_error(void)
{
    return last_error;
}

void sf_clear_error(void)
{
    last_error[0] = '\0';
}

int sf_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int sf_fail_prefix(int code, const char *prefix)
{
    /* Truncation of an over-long detail is fine: it is a message. */
    char tmp[sizeof last_error];
    memcpy(tmp, last_error, sizeof tmp);
    const char *detail = tmp[0] ? tmp : sf_strerror(code);
    size_t plen = strnlen(prefix, sizeof last_error - 3);
    memcpy(last_error, prefix, plen);
    memcpy(last_error + plen, ": ", 2);
    size_t room = sizeof last_error - plen - 3;
    size_t dlen = strnlen(detail, room);
    memcpy(last_error + plen + 2, detail, dlen);
    last_error[plen + 2 + dlen] = '\0';
    return code;
}

const char *sf_errno_hint(int err)
{
    static _Thread_local char hint[160];
    struct rlimit rl;
    if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(hint, sizeof hint,
                 " (the limit on open files per process is %llu: raise it, e.g. ulimit -n %llu)",
                 (unsigned long long)rl.rlim_cur,
                 (unsigned long long)(rl.rlim_cur < 4096 ? 65536 : rl.rlim_cur * 4));
    else if (err == EMFILE || err == ENFILE)
        snprintf(hint, sizeof hint, " (too many open files: raise the limit, %s)",
                 err == EMFILE ? "ulimit -n" : "sysctl fs.file-max");
    else
        hint[0] = '\0';
    return hint;
}

int sf_is_data_error(int err)
{
    switch (err) {
    case SF_E_BAD_MAGIC:
    case SF_E_VERSION:
    case SF_E_CHECKSUM:
    case SF_E_TRUNCATED:
    case SF_E_CORRUPT:
    case SF_E_LIMIT:
    case SF_E_RESERVED:
        return 1;
    default:
        return 0;
    }
}

const char *sf_strerror(int err)
{
    switch (err) {
    case SF_OK: return "success";
    case SF_E_BAD_MAGIC: return "not a shardfeed file (bad magic)";
    case SF_E_VERSION: return "unsupported format version";
    case SF_E_CHECKSUM: return "checksum mismatch";
    case SF_E_TRUNCATED: return "file is truncated";
    case SF_E_CORRUPT: return "corrupt structure";
    case SF_E_LIMIT: return "size or count exceeds a format limit";
    case SF_E_RESERVED: return "reserved bits or bytes are set";
    case SF_E_NPY: return "malformed .npy file";
    case SF_E_UNSUPPORTED: return "not supported";
    case SF_E_SCHEMA: return "sample does not match the dataset schema";
    case SF_E_INPUT: return "invalid input layout";
    case SF_E_EXISTS: return "output already exists";
    case SF_E_INVALID: return "invalid argument";
    case SF_E_STATE: return "operation not valid in this state";
    case SF_E_REMOTE: return "remote store request failed";
    case SF_E_DEVICE: return "device (CUDA) call failed";
    default: break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *sf_errno_text(int e)
{
    static _Thread_local char buf[320];
    int saved = errno; /* callers pass -errno beside it, evaluated in either order */
    snprintf(buf, sizeof buf, "%s%s", strerror(e), sf_errno_hint(e));
    errno = saved;
    return buf;
}

int sf_check_opts_version(const char *type, unsigned version, unsigned newest)
{
    if (version >= 1 && version <= newest)
        return 0;
    return sf_fail(SF_E_INVALID, "%s.version is %u; this library takes 1..%u (start from the _INIT macro)",
                   type, version, newest);
}
