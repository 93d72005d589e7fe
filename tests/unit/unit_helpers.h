/* Helpers shared by the unit tests that build datasets on disk. Static, so
 * each test binary gets its own copy. */
#ifndef SF_TESTS_UNIT_HELPERS_H
#define SF_TESTS_UNIT_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "format/npy.h"

static inline int unit_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a scratch tree (NULL or "" ok). */
static inline void unit_rm_tree(const char *root)
{
    if (root && root[0])
        nftw(root, unit_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes a C-order little-endian .npy file exactly as numpy.save would. */
static inline void unit_write_npy(const char *path, int dtype, uint32_t ndim, const uint64_t *shape,
                                  const void *data, size_t size)
{
    uint8_t hdr[4096];
    size_t h = npy_write_header(hdr, sizeof hdr, dtype, ndim, shape);
    cr_assert_gt(h, 0);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(hdr, 1, h, f), h);
    cr_assert_eq(fwrite(data, 1, size, f), size);
    fclose(f);
}

#endif
