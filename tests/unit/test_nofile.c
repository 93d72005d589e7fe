/* Unit tests for lib/base/nofile.c: the shares of RLIMIT_NOFILE that a
 * dataset's shards (half), the remote cache's publish queue and the
 * connection pool (a sixteenth each) take, clamped, under the soft limits
 * that matter (a container's 128 and 1,024, a raised one). Each test sets
 * the soft limit of its own process (Criterion forks one per test). */
#include <criterion/criterion.h>
#include <sys/resource.h>

#include "nofile.h"

static void set_soft(rlim_t soft)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < soft)
        cr_skip_test("the hard RLIMIT_NOFILE is below %lu", (unsigned long)soft);
    rl.rlim_cur = soft;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

Test(nofile, a_share_follows_the_soft_limit)
{
    set_soft(128);
    cr_assert_eq(sf_nofile_share(2, 1, 65536), 64);
    cr_assert_eq(sf_nofile_share(16, 0, 32), 8);
    set_soft(1024);
    cr_assert_eq(sf_nofile_share(2, 1, 65536), 512);
    cr_assert_eq(sf_nofile_share(16, 4, 64), 64);
}

Test(nofile, a_share_is_clamped_to_its_bounds)
{
    set_soft(48);
    cr_assert_eq(sf_nofile_share(16, 4, 64), 4, "3 is below the pool's least");
    cr_assert_eq(sf_nofile_share(16, 0, 32), 3);
    set_soft(4096);
    cr_assert_eq(sf_nofile_share(16, 4, 64), 64, "256 is above the pool's most");
    cr_assert_eq(sf_nofile_share(16, 0, 32), 32);
    cr_assert_eq(sf_nofile_share(2, 1, 65536), 2048);
}
