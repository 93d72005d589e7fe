/* The process's descriptor budget, shared among the layers by fractions of
 * the soft RLIMIT_NOFILE: a dataset's shards take half of it (all open
 * datasets together), the remote cache's publish queue and its connection
 * pool a sixteenth each, and the rest stays the caller's. */
#ifndef SF_BASE_NOFILE_H
#define SF_BASE_NOFILE_H

#include <stdint.h>

/* The soft RLIMIT_NOFILE divided by `divisor`, clamped to [min, max]. A
 * limit that cannot be read, or an unlimited one, counts as Linux's default
 * soft limit, 1,024. Read at each call: callers keep it where it must not
 * change under them. */
uint64_t sf_nofile_share(unsigned divisor, uint64_t min, uint64_t max);

#endif
