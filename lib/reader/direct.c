/* The O_DIRECT policy: whether every read of a dataset can bypass the page
 * cache (file offsets, sizes and slot places all multiples of
 * SF_DIRECT_ALIGN, no compressed field, not the mmap engine), and whether
 * direct = auto should; and a task's shard descriptor, buffered or
 * O_DIRECT, from the dataset's capped set. */
#include <assert.h>
#include <errno.h>
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

/* ---- direct = auto ----
 *
 * Measured on the bench's large set (2,000 records of 602 KB, --align 4096,
 * page cache dropped before each run; README "Reading batches (C)"): a
 * cold epoch read at 8,900-9,252 samples/s with O_DIRECT and 4,372-6,728
 * buffered, and a
 * warm one at about 14,000 buffered, where O_DIRECT stays at its cold rate.
 * So O_DIRECT wins only where the page cache cannot keep the dataset, so
 * that every epoch is cold anyway: when its shards are larger than the
 * memory the page cache may use. Records under 64 KiB (SF_DIRECT_AUTO_MIN)
 * were not measured and stay buffered, where the kernel's read-ahead and
 * the cache serve neighbours. */
#define SF_DIRECT_AUTO_MIN (64u << 10)

/* The memory the page cache may use, at most: $SHARDFEED_PAGE_CACHE_BYTES,
 * else the physical memory, or the process's cgroup (v2) memory.max when
 * smaller (a container's page cache counts against it). */
static uint64_t page_cache_bytes(void)
{
    const char *env = getenv("SHARDFEED_PAGE_CACHE_BYTES");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (!*end && !errno)
            return v;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    char line[512], path[600];
    FILE *f = fopen("/proc/self/cgroup", "re");
    int v2 = 0;
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "0::", 3) == 0) { /* the unified hierarchy: 0::/path */
                line[strcspn(line, "\n")] = '\0';
                v2 = snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3) <
                     (int)sizeof path;
                break;
            }
        fclose(f);
    }
    if (v2 && (f = fopen(path, "re"))) {
        unsigned long long max;
        if (fscanf(f, "%llu", &max) == 1 && max < mem) /* "max" means no limit */
            mem = max;
        fclose(f);
    }
    return mem;
}

/* Whether direct = auto reads with O_DIRECT (the rule above); sets
 * r->direct_reason either way. */
static int direct_wanted(sf_reader *r)
{
    if (r->ds->remote) {
        r->direct_reason = "auto: buffered (a dataset at a URL is read from its cache or by range "
                           "requests)";
        return 0;
    }
    uint64_t bytes = 0, samples = r->ds->manifest.record_count;
    for (uint64_t i = 0; i < r->ds->manifest.shard_count; i++)
        bytes += r->ds->shards[i].meta.file_size;
    if (bytes <= page_cache_bytes()) {
        r->direct_reason = "auto: buffered (the dataset fits in memory, so epochs after the first "
                           "read from the page cache)";
        return 0;
    }
    if (samples && bytes / samples < SF_DIRECT_AUTO_MIN) {
        r->direct_reason = "auto: buffered (larger than memory, but its records average under "
                           "64 KiB)";
        return 0;
    }
    return 1;
}

int reader_direct_choose(sf_reader *r)
{
    switch (r->opts.direct) {
    case SF_DIRECT_ON:
        r->direct_reason = "on: asked for";
        return reader_direct_open(r);
    case SF_DIRECT_OFF:
        r->direct_reason = "off: asked for";
        return 0;
    default:
        break;
    }
    if (!direct_wanted(r))
        return 0;
    if (direct_check(r)) {
        r->direct_reason = "auto: buffered (larger than memory, but its layout does not allow "
                           "O_DIRECT: direct=on says why)";
        return 0;
    }
    if (reader_direct_open(r)) {
        r->direct_reason = "auto: buffered (larger than memory, but the file system refused "
                           "O_DIRECT)";
        return 0;
    }
    r->direct_reason = "auto: O_DIRECT (larger than the memory the page cache may use, so every "
                       "epoch reads from disk, and records of 64 KiB or more, which read 1.4-2x "
                       "faster cold without the page cache)";
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

int reader_task_try_open(sf_reader *r, reader_task *t, int direct)
{
    assert(t->fd < 0 && "the task's shard is open already");
    int rc = dataset_fd_try_acquire(&t->fd, r->ds, t->shard, direct);
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
