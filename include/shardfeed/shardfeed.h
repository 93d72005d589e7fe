/* shardfeed — umbrella header: everything a program using the library needs.
 *
 * Conventions: opaque handles; the output parameter comes first; functions
 * return 0 or a negative code (an sf_error, or -errno); sf_strerror() names
 * a code and sf_last_error() gives the detail; free/close functions accept
 * NULL. Options structs start with a version field and have an _INIT macro;
 * each takes versions 1 to its newest. Numeric options are bounded by one
 * table (shardfeed/params.h). The format's vocabulary: shardfeed/types.h.
 */
#ifndef SHARDFEED_H
#define SHARDFEED_H

#include "shardfeed/dataset.h"
#include "shardfeed/error.h"
#include "shardfeed/pack.h"
#include "shardfeed/params.h"
#include "shardfeed/push.h"
#include "shardfeed/reader.h"
#include "shardfeed/remote.h"
#include "shardfeed/types.h"
#include "shardfeed/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version at run time ("0.1.0"); compare with SF_VERSION_STRING. */
SF_API const char *sf_version(void);
/* 1 when this build has the feature: "cuda" (device delivery compiled in),
 * "uring" (always), "remote" (libcurl: dataset URLs and sf_push). Unknown
 * names give 0. */
SF_API int sf_has_feature(const char *name);
/* The newest on-disk format version this library reads and writes. */
SF_API void sf_format_version(int *major, int *minor);

#ifdef __cplusplus
}
#endif
#endif
