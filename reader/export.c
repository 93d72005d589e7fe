/* Export: every sample back in the layout of the input it was packed from
 * (SPEC.md "Metadata" source), or as .npy files. Never writes outside the
 * output directory: names come from validated keys and field names (SPEC.md
 * "Schema": a key is a relative path with no "." or ".." component), and
 * every directory and file is opened relative to the one above it with
 * O_NOFOLLOW, so a symlink planted in the output is refused. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "format/error_internal.h"
#include "format/le.h"
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

/* Creates (truncating) `rel` under dirfd, making its folders. */
static int create_rel(int *out_fd, int dirfd, const char *out_dir, const char *rel)
{
    if (!sf_valid_key(rel, strlen(rel)))
        return sf_fail(SF_E_CORRUPT, "%s/%s: not a safe relative path", out_dir, rel);
    int dfd = dirfd;
    const char *p = rel;
    const char *slash;
    int rc = 0;
    while ((slash = strchr(p, '/')) != NULL) {
        char comp[SF_MAX_KEY + 1];
        size_t n = (size_t)(slash - p);
        memcpy(comp, p, n);
        comp[n] = '\0';
        if (mkdirat(dfd, comp, 0777) != 0 && errno != EEXIST) {
            rc = sf_fail(-errno, "%s/%.*s: cannot create: %s", out_dir, (int)(slash - rel), rel,
                         strerror(errno));
            break;
        }
        int nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            rc = sf_fail(-errno, "%s/%.*s: cannot open as a folder: %s", out_dir, (int)(slash - rel),
                         rel, strerror(errno));
            break;
        }
        if (dfd != dirfd)
            close(dfd);
        dfd = nfd;
        p = slash + 1;
    }
    if (!rc) {
        *out_fd = openat(dfd, p, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (*out_fd < 0)
            rc = sf_fail(-errno, "%s/%s: cannot create: %s", out_dir, rel, strerror(errno));
    }
    if (dfd != dirfd)
        close(dfd);
    return rc;
}

static int write_rel(int dirfd, const char *out_dir, const char *rel, const uint8_t *head,
                     uint64_t head_len, const void *data, uint64_t size)
{
    int fd;
    int rc = create_rel(&fd, dirfd, out_dir, rel);
    if (rc)
        return rc;
    rc = write_all(fd, head, head_len);
    if (!rc)
        rc = write_all(fd, data, size);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (rc)
        return sf_fail(rc, "%s/%s: write failed: %s", out_dir, rel, strerror(-rc));
    return 0;
}

static int write_npy(int dirfd, const char *out_dir, const char *rel, const sf_field *f,
                     const void *data, uint64_t size)
{
    uint8_t header[4096];
    uint64_t var_shape[1] = {size / sf_dtype_size(f->dtype)};
    /* A variable-length field exports as a 1-d array of its elements. */
    const uint64_t *shape = f->storage == SF_STORE_VAR ? var_shape : f->shape;
    int dtype = f->dtype == SF_DT_BYTES ? SF_DT_U8 : f->dtype;
    size_t hlen = npy_write_header(header, sizeof header, dtype, f->ndim, shape);
    if (hlen == 0)
        return sf_fail(SF_E_UNSUPPORTED, "%s/%s: cannot describe field '%s' as .npy", out_dir, rel,
                       f->name);
    return write_rel(dirfd, out_dir, rel, header, hlen, data, size);
}

typedef struct exporter {
    sf_dataset *ds;
    const sf_schema *s;
    const char *out_dir;
    int dirfd;
    FILE *list;    /* list layout: out/list.csv */
    int data_field; /* list layout: the field holding the file bytes */
    uint64_t written;
    uint8_t *vbuf;  /* compressed values, decompressed; grown to the largest */
    uint64_t vcap;
} exporter;

/* The value of field f of sample i, copied (or decompressed) into x->vbuf.
 * A copy, not a pointer into the shard's map: sf_dataset_read_value reads
 * the map under the fault guard, so a shard cut short during the export is
 * an error naming it, where a later write(2) from the map would fail with
 * EFAULT naming the output file and a CSV cell would die of SIGBUS. The
 * first field of a record checks the record's checksum. */
static int fetch_value(exporter *x, uint64_t i, uint32_t f, const void **data, uint64_t *size)
{
    *data = NULL;
    int rc = sf_dataset_value_size(size, x->ds, i, f);
    if (!rc && (*size > x->vcap || !x->vbuf)) { /* never NULL: empty values go to memchr too */
        uint8_t *p = realloc(x->vbuf, *size ? *size : 1); /* size is capped at 2^30 */
        if (!p)
            return sf_fail(-ENOMEM, "out of memory");
        x->vbuf = p;
        x->vcap = *size;
    }
    if (!rc)
        rc = sf_dataset_read_value(x->vbuf, x->vcap, size, x->ds, i, f, f == 0);
    *data = x->vbuf;
    return rc;
}

/* One cell of list.csv, quoted when it must be (RFC 4180). */
static void csv_cell(FILE *f, const sf_field *fd, const void *v, uint64_t size)
{
    fputc(',', f);
    if (fd->storage == SF_STORE_VAR || fd->ndim != 0) {
        const char *t = v;
        int quote = memchr(t, ',', size) || memchr(t, '"', size) || memchr(t, '\n', size) ||
                    memchr(t, '\r', size);
        if (quote)
            fputc('"', f);
        for (uint64_t i = 0; i < size; i++) {
            if (quote && t[i] == '"')
                fputc('"', f);
            fputc(t[i], f);
        }
        if (quote)
            fputc('"', f);
    } else if (fd->dtype == SF_DT_F64) {
        double d;
        uint64_t bits = sf_get_le64(v);
        memcpy(&d, &bits, 8);
        fprintf(f, "%.17g", d);
    } else if (fd->dtype == SF_DT_F32) {
        float x;
        uint32_t bits = sf_get_le32(v);
        memcpy(&x, &bits, 4);
        fprintf(f, "%.9g", (double)x);
    } else {
        uint8_t b[8] = {0};
        memcpy(b, v, size < 8 ? size : 8);
        int64_t i = (int64_t)sf_get_le64(b);
        fprintf(f, "%" PRId64, i);
    }
}

/* Writes sample i in the dataset's layout. */
static int export_sample(exporter *x, const char *layout, uint64_t i)
{
    const sf_schema *s = x->s;
    const char *key;
    size_t klen;
    sf_dataset_key(&key, &klen, x->ds, i);
    int rc = 0;
    for (uint32_t f = 0; f < s->field_count && !rc; f++) {
        const void *data;
        uint64_t size;
        rc = fetch_value(x, i, f, &data, &size);
        if (rc)
            break;
        char rel[SF_MAX_NAME + SF_MAX_KEY + 8];
        const sf_field *fd = &s->fields[f];
        if (strcmp(layout, "imagefolder") == 0 || strcmp(layout, "list") == 0) {
            if ((int)f == x->data_field) {
                snprintf(rel, sizeof rel, "%.*s", (int)klen, key);
                rc = write_rel(x->dirfd, x->out_dir, rel, NULL, 0, data, size);
                x->written += rc == 0;
            } else if (x->list) {
                csv_cell(x->list, fd, data, size);
            }
            continue;
        }
        if (strcmp(layout, "tar") == 0) {
            snprintf(rel, sizeof rel, "%.*s.%s", (int)klen, key, fd->name);
            rc = write_rel(x->dirfd, x->out_dir, rel, NULL, 0, data, size);
        } else {
            /* The key's folders stay folders: img_a/b.npy for key "a/b". */
            const char *slash = memrchr(key, '/', klen);
            size_t dlen = slash ? (size_t)(slash - key) + 1 : 0;
            snprintf(rel, sizeof rel, "%.*s%s_%.*s.npy", (int)dlen, key, fd->name, (int)(klen - dlen),
                     key + dlen);
            rc = write_npy(x->dirfd, x->out_dir, rel, fd, data, size);
        }
        x->written += rc == 0;
    }
    return rc;
}

/* list.csv: one header row, then path and every other field per sample. */
static int open_list(exporter *x)
{
    int fd;
    int rc = create_rel(&fd, x->dirfd, x->out_dir, "list.csv");
    if (rc)
        return rc;
    x->list = fdopen(fd, "w");
    if (!x->list) {
        close(fd);
        return sf_fail(-ENOMEM, "out of memory");
    }
    fputs("path", x->list);
    for (uint32_t f = 0; f < x->s->field_count; f++)
        if ((int)f != x->data_field)
            fprintf(x->list, ",%s", x->s->fields[f].name);
    fputc('\n', x->list);
    return 0;
}

static int export_layout(const char *dataset_dir, const char *out_dir, const char *force_layout,
                         uint64_t *files_written)
{
    if (files_written)
        *files_written = 0;
    if (!dataset_dir || !out_dir)
        return sf_fail(SF_E_INVALID, "export: NULL directory");
    sf_dataset *ds;
    int rc = sf_dataset_open(&ds, dataset_dir);
    if (rc)
        return rc;
    exporter x = {.ds = ds, .s = &ds->manifest.schema, .out_dir = out_dir, .data_field = -1};
    const char *layout = force_layout ? force_layout : ds->source;
    /* imagefolder and list keep a file's bytes in their first variable-length
     * bytes field; without one, fall back to .npy files. */
    for (uint32_t f = 0; f < x.s->field_count && x.data_field < 0; f++)
        if (x.s->fields[f].storage == SF_STORE_VAR && x.s->fields[f].dtype == SF_DT_BYTES)
            x.data_field = (int)f;
    int files = strcmp(layout, "imagefolder") == 0 || strcmp(layout, "list") == 0;
    if ((files && x.data_field < 0) || (!files && strcmp(layout, "tar") != 0))
        layout = "npy";
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        rc = sf_fail(-errno, "%s: cannot create: %s", out_dir, strerror(errno));
        sf_dataset_close(ds);
        return rc;
    }
    x.dirfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x.dirfd < 0) {
        rc = sf_fail(-errno, "%s: %s", out_dir, strerror(errno));
        sf_dataset_close(ds);
        return rc;
    }
    if (strcmp(layout, "list") == 0)
        rc = open_list(&x);
    for (uint64_t i = 0; i < ds->manifest.record_count && !rc; i++) {
        if (x.list) {
            const char *key;
            size_t klen;
            sf_dataset_key(&key, &klen, ds, i);
            fprintf(x.list, "%.*s", (int)klen, key);
        }
        rc = export_sample(&x, layout, i);
        if (x.list)
            fputc('\n', x.list);
    }
    if (x.list) {
        int bad = ferror(x.list);
        if ((fclose(x.list) != 0 || bad) && !rc)
            rc = sf_fail(-EIO, "%s/list.csv: write failed", out_dir);
        x.written += rc == 0;
    }
    close(x.dirfd);
    free(x.vbuf);
    sf_dataset_close(ds);
    if (files_written)
        *files_written = x.written;
    return rc;
}

int sf_export(const char *dataset_dir, const char *out_dir, uint64_t *files_written)
{
    return export_layout(dataset_dir, out_dir, NULL, files_written);
}

int sf_export_npy(const char *dataset_dir, const char *out_dir, uint64_t *files_written)
{
    return export_layout(dataset_dir, out_dir, "npy", files_written);
}
