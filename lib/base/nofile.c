#include "nofile.h"

#include <assert.h>
#include <sys/resource.h>

uint64_t sf_nofile_share(unsigned divisor, uint64_t min, uint64_t max)
{
    assert(divisor > 0 && min <= max);
    struct rlimit rl;
    uint64_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                        ? (uint64_t)rl.rlim_cur
                        : 1024;
    uint64_t share = soft / divisor;
    return share < min ? min : share > max ? max : share;
}
