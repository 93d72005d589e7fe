/* sf_export_npy: every sample back as {field}_{key}.npy. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "format/error_internal.h"
#include "format/npy.h"

static int write_all(int fd, const uint8_t *p, uint64_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (uint64_t)n;
    }
    return 0;
}

/* Writes one array file relative to the output directory. The name is made
 * of a validated field name and key, so it has no '/' and cannot be "..";
 * O_NOFOLLOW refuses a symlink planted under that name. */
static int write_npy(int dirfd, const char *out_dir, const char *name, const sf_field *f,
                     const void *data, uint64_t size)
{
    uint8_t header[4096];
    uint64_t var_shape[1] = {size / sf_dtype_size(f->dtype)};
    /* A variable-length field exports as a 1-d array of its elements. */
    const uint64_t *shape = f->storage == SF_STORE_VAR ? var_shape : f->shape;
    int dtype = f->dtype == SF_DT_BYTES ? SF_DT_U8 : f->dtype;
    size_t hlen = npy_write_header(header, sizeof header, dtype, f->ndim, shape);
    if (hlen == 0)
        return sf_fail(SF_E_UNSUPPORTED, "%s/%s: cannot describe field '%s' as .npy", out_dir, name,
                       f->name);
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return sf_fail(-errno, "%s/%s: cannot create: %s", out_dir, name, strerror(errno));
    int rc = write_all(fd, header, hlen);
    if (!rc)
        rc = write_all(fd, data, size);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (rc)
        return sf_fail(rc, "%s/%s: write failed: %s", out_dir, name, strerror(-rc));
    return 0;
}

int sf_export_npy(const char *dataset_dir, const char *out_dir, uint64_t *files_written)
{
    if (!dataset_dir || !out_dir)
        return sf_fail(SF_E_INVALID, "sf_export_npy: NULL directory");
    sf_dataset *ds;
    int rc = sf_dataset_open(&ds, dataset_dir);
    if (rc)
        return rc;
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        rc = sf_fail(-errno, "%s: cannot create: %s", out_dir, strerror(errno));
        sf_dataset_close(ds);
        return rc;
    }
    int dirfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        rc = sf_fail(-errno, "%s: %s", out_dir, strerror(errno));
        sf_dataset_close(ds);
        return rc;
    }
    const sf_schema *s = &ds->manifest.schema;
    uint64_t written = 0;
    uint8_t *vbuf = NULL; /* compressed values, decompressed; grown to the largest */
    uint64_t vcap = 0;
    for (uint64_t i = 0; i < ds->manifest.record_count && !rc; i++) {
        const char *key;
        size_t klen;
        sf_dataset_key(&key, &klen, ds, i);
        for (uint32_t f = 0; f < s->field_count && !rc; f++) {
            const void *data;
            uint64_t size;
            /* The first field of a record checks the record's checksum. */
            if (s->fields[f].codec == SF_CODEC_NONE) {
                rc = sf_dataset_get(&data, &size, ds, i, f, f == 0);
            } else if (!(rc = sf_dataset_value_size(&size, ds, i, f)) && size > vcap) {
                uint8_t *p = realloc(vbuf, size); /* size is capped at 2^30 */
                rc = p ? 0 : sf_fail(-ENOMEM, "out of memory");
                vbuf = p ? p : vbuf;
                vcap = p ? size : vcap;
            }
            if (!rc && s->fields[f].codec != SF_CODEC_NONE) {
                rc = sf_dataset_read_value(vbuf, vcap, &size, ds, i, f, f == 0);
                data = vbuf;
            }
            if (rc)
                break;
            char name[SF_MAX_NAME + SF_MAX_KEY + 8];
            snprintf(name, sizeof name, "%s_%.*s.npy", s->fields[f].name, (int)klen, key);
            if (!sf_valid_key(key, klen) || strchr(name, '/') != NULL) {
                rc = sf_fail(SF_E_CORRUPT, "sample %llu: key would escape %s",
                             (unsigned long long)i, out_dir);
                break;
            }
            rc = write_npy(dirfd, out_dir, name, &s->fields[f], data, size);
            written += rc == 0;
        }
    }
    close(dirfd);
    free(vbuf);
    sf_dataset_close(ds);
    if (files_written)
        *files_written = written;
    return rc;
}
