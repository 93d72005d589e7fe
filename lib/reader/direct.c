/* The O_DIRECT policy: whether every read of a dataset can bypass the page
 * cache (file offsets, sizes and slot places all multiples of
 * SF_DIRECT_ALIGN, no compressed field, not the mmap engine); and a task's
 * shard descriptor, buffered or O_DIRECT, from the dataset's capped set. */
#include <assert.h>

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

int reader_direct_open(sf_reader *r)
{
    int rc = direct_check(r);
    int fd;
    /* Shards open on first read; whether the file system takes O_DIRECT is
     * known now, from the first one. */
    if (!rc && r->ds->manifest.shard_count && !(rc = dataset_fd_acquire(&fd, r->ds, 0, 1)))
        dataset_fd_release(r->ds, 0, 1);
    if (!rc)
        r->direct = 1;
    return rc;
}

int reader_task_open(sf_reader *r, reader_task *t, int direct)
{
    assert(t->fd < 0 && "the task's shard is open already");
    int rc = dataset_fd_acquire(&t->fd, r->ds, t->shard, direct);
    t->fd_direct = direct;
    return rc;
}

void reader_task_close(sf_reader *r, reader_task *t)
{
    if (t->fd < 0)
        return;
    dataset_fd_release(r->ds, t->shard, t->fd_direct);
    t->fd = -1;
}
