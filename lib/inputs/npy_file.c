#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "shard_file.h"
#include "npy_file.h"
#include "input_util.h"
#include "path.h"

int input_npy_file_open(input_npy_file *f, const char *dir, const char *name)
{
    /* Cut short, the path named another file ("label_0.np" for
     * "label_0.npy"), which was read in its place: refused. */
    f->fd = -1;
    int rc = sf_path_join(f->path, sizeof f->path, dir, name);
    if (rc)
        return rc;
    struct stat st;
    f->fd = input_open_file(f->path, &st);
    if (f->fd < 0)
        return f->fd;
    f->file_size = (uint64_t)st.st_size;
    uint8_t small[4096];
    uint8_t *buf = small;
    size_t want = sizeof small;
    for (;;) {
        size_t len = (uint64_t)want < f->file_size ? want : (size_t)f->file_size;
        rc = sf_pread_full(f->fd, buf, len, 0);
        if (rc) {
            rc = sf_fail(SF_E_INPUT, "%s: read failed: %s", f->path, sf_strerror(rc));
            break;
        }
        size_t need = 0;
        rc = input_npy_parse_header(&f->info, buf, len, f->file_size, &need);
        if (rc != 1) {
            if (rc)
                sf_fail_prefix(rc, f->path);
            break;
        }
        /* The header is longer than what was read: read what it needs. */
        if (buf != small)
            free(buf);
        want = need;
        buf = malloc(want);
        if (!buf) {
            rc = sf_fail(-ENOMEM, "out of memory");
            break;
        }
    }
    if (buf != small)
        free(buf);
    if (rc)
        input_npy_file_close(f);
    return rc;
}

static void shape_str(char *buf, size_t cap, uint32_t ndim, const uint64_t *shape)
{
    size_t pos = (size_t)snprintf(buf, cap, "(");
    for (uint32_t d = 0; d < ndim && pos < cap; d++)
        pos += (size_t)snprintf(buf + pos, cap - pos, d ? ", %llu" : "%llu", (unsigned long long)shape[d]);
    if (pos < cap)
        snprintf(buf + pos, cap - pos, ndim == 1 ? ",)" : ")");
}

int input_npy_file_check(const input_npy_file *f, const sf_field *field, const char *first)
{
    const input_npy_info *info = &f->info;
    if (info->dtype != field->dtype)
        return sf_fail(SF_E_SCHEMA, "%s: dtype %s does not match %s of %s (the schema comes from the first sample)",
                       f->path, sf_dtype_name(info->dtype), sf_dtype_name(field->dtype), first);
    int same = info->ndim == field->ndim;
    for (uint32_t d = 0; same && d < field->ndim; d++)
        same = info->shape[d] == field->shape[d];
    if (!same) {
        char a[200], b[200];
        shape_str(a, sizeof a, info->ndim, info->shape);
        shape_str(b, sizeof b, field->ndim, field->shape);
        return sf_fail(SF_E_SCHEMA, "%s: shape %s does not match %s of %s (the schema comes from the first sample)",
                       f->path, a, b, first);
    }
    return 0;
}

int input_npy_file_read(input_npy_file *f, uint8_t *dst, uint8_t **scratch, uint64_t *scratch_cap)
{
    const input_npy_info *info = &f->info;
    uint8_t *target = dst;
    if (!input_npy_is_native(info)) {
        if (*scratch_cap < info->data_size) {
            uint8_t *n = realloc(*scratch, info->data_size);
            if (!n)
                return sf_fail(-ENOMEM, "%s: out of memory", f->path);
            *scratch = n;
            *scratch_cap = info->data_size;
        }
        target = *scratch;
    }
    int rc = sf_pread_full(f->fd, target, info->data_size, info->data_offset);
    if (rc)
        return sf_fail(SF_E_INPUT, "%s: %s while reading the array data", f->path,
                       rc == SF_E_TRUNCATED ? "file shrank" : sf_strerror(rc));
    if (target != dst)
        input_npy_to_c_le(dst, target, info);
    /* numpy can hold other bytes in a bool array; a dataset cannot. */
    uint64_t bad = info->dtype == SF_DTYPE_BOOL ? sf_first_non_bool(dst, info->data_size) : UINT64_MAX;
    if (bad != UINT64_MAX)
        return sf_fail(SF_E_INPUT, "%s: bool array holds byte 0x%02x at element %llu (bools are 0 or 1)",
                       f->path, dst[bad], (unsigned long long)bad);
    return 0;
}

void input_npy_file_close(input_npy_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}
