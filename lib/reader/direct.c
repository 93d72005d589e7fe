/* The O_DIRECT policy: whether every read of a dataset can bypass the page
 * cache (file offsets, sizes and slot places all multiples of
 * SF_DIRECT_ALIGN, no compressed field, not the mmap engine), and the
 * O_DIRECT descriptors of the shards. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error_internal.h"
#include "reader_internal.h"

/* Whether every read can be O_DIRECT: file offsets, sizes and slot
 * destinations all multiples of SF_DIRECT_ALIGN. */
static int direct_check(const sf_reader *r)
{
    const sf_schema *s = r->schema;
    if (r->compressed)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: the dataset has compressed fields, which are read through a "
                       "staging buffer in the page cache; use direct=off");
    if (r->opts.engine == SF_ENGINE_MMAP)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: the mmap engine reads through the page cache; use the uring or "
                       "pread engine for O_DIRECT");
    if (r->ds->manifest.align % SF_DIRECT_ALIGN)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: records are aligned to %u bytes and O_DIRECT needs %u: pack again with "
                       "an align of %u",
                       r->ds->manifest.align, SF_DIRECT_ALIGN, SF_DIRECT_ALIGN);
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        if (fd->storage == SF_STORAGE_FIXED && fd->item_size % SF_DIRECT_ALIGN)
            return sf_fail(SF_E_UNSUPPORTED,
                           "direct: field '%s' is %llu bytes per sample, not a multiple of %u, so "
                           "it cannot be read with O_DIRECT",
                           fd->name, (unsigned long long)fd->item_size, SF_DIRECT_ALIGN);
    }
    if (r->layout.var_unaligned >= 0)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: variable-length field '%s' has values whose length is not a "
                       "multiple of %u, so it cannot be read with O_DIRECT",
                       s->fields[r->layout.var_unaligned].name, SF_DIRECT_ALIGN);
    return 0;
}

static int open_direct_fds(sf_reader *r)
{
    uint64_t count = r->ds->manifest.shard_count;
    r->direct_fds = malloc((count ? count : 1) * sizeof *r->direct_fds);
    if (!r->direct_fds)
        return sf_fail(-ENOMEM, "out of memory");
    for (uint64_t i = 0; i < count; i++)
        r->direct_fds[i] = -1;
    for (uint64_t i = 0; i < count; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", r->ds->dir, r->ds->shards[i].name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0) {
            if (errno == EINVAL)
                return sf_fail(SF_E_UNSUPPORTED,
                               "direct: %s: the file system does not support O_DIRECT (tmpfs?); "
                               "use direct=off",
                               path);
            return sf_fail(-errno, "%s: %s", path, strerror(errno));
        }
        r->direct_fds[i] = fd;
    }
    return 0;
}

int reader_direct_open(sf_reader *r)
{
    int rc = direct_check(r);
    if (!rc)
        rc = open_direct_fds(r);
    if (!rc)
        r->direct = 1;
    return rc;
}

void reader_direct_close(sf_reader *r)
{
    if (!r->direct_fds)
        return;
    for (uint64_t i = 0; i < r->ds->manifest.shard_count; i++)
        if (r->direct_fds[i] >= 0)
            close(r->direct_fds[i]);
    free(r->direct_fds);
    r->direct_fds = NULL;
}
