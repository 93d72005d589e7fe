/* shardfeed — error codes shared by every part of the library.
 *
 * Convention (libgit2/LMDB style): 0 is success, negative is failure.
 * OS and io_uring errors pass through as -errno; shardfeed's own failures
 * use the reserved block SF_E_BASE .. SF_E_LAST so they never collide with
 * an errno value. sf_strerror() names both. The detail (which file, shard,
 * record, byte offset) is kept in a thread-local string, sf_last_error().
 */
#ifndef SHARDFEED_ERROR_H
#define SHARDFEED_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SHARDFEED_BUILDING) && defined(__GNUC__)
#define SF_API __attribute__((visibility("default")))
#else
#define SF_API
#endif

enum sf_error {
    SF_OK = 0,
    SF_E_BASE = -30900,
    SF_E_BAD_MAGIC = -30900,   /* not a shardfeed file, or wrong kind of file */
    SF_E_VERSION = -30901,     /* format version newer than this reader */
    SF_E_CHECKSUM = -30902,    /* a stored XXH3-64 digest does not match */
    SF_E_TRUNCATED = -30903,   /* file shorter than its structure says */
    SF_E_CORRUPT = -30904,     /* structural inconsistency */
    SF_E_LIMIT = -30905,       /* a count or size exceeds SPEC.md's caps */
    SF_E_RESERVED = -30906,    /* a reserved bit or byte is set */
    SF_E_NPY = -30907,         /* malformed .npy file */
    SF_E_UNSUPPORTED = -30908, /* valid, but not supported: an input shardfeed does not take,
                                  a feature compiled out of this build, no such device */
    SF_E_SCHEMA = -30909,      /* a sample does not match the schema */
    SF_E_INPUT = -30910,       /* input directory layout problem */
    SF_E_EXISTS = -30911,      /* output already holds something else */
    SF_E_INVALID = -30912,     /* invalid argument or option */
    SF_E_STATE = -30913,       /* call not valid in this state */
    SF_E_REMOTE = -30914,      /* a remote store (s3://, http(s)://) failed or refused a request,
                                  retries included: the detail names the URL, HTTP status and
                                  the store's message */
    SF_E_DEVICE = -30915,      /* the CUDA runtime failed a call on a device that exists (an
                                  allocation, a copy, a wait): the detail names the call and
                                  CUDA's error. No GPU, or none in the build, is SF_E_UNSUPPORTED */
    SF_E_LAST = -30915
};

/* Static description of an error code (sf_error or -errno). Never NULL. */
SF_API const char *sf_strerror(int err);

/* 1 when `err` says that a dataset's stored bytes break the format: bad
 * magic, a format version this build does not read, a checksum mismatch,
 * truncation, a structural inconsistency, a value over a limit, a reserved
 * bit or code: what sf_verify reports as a problem and the command line
 * exits 2 for. 0 for everything else (usage, environment, -errno). */
SF_API int sf_is_data_error(int err);

/* The detail of the last failure in this thread ("" if none). Valid until the
 * next failing shardfeed call in the same thread. */
SF_API const char *sf_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
