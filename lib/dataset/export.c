/* Export: every sample back in the layout of the input it was packed from
 * (SPEC.md "Metadata" source), or as .npy files. This is the driver; each
 * format's layout (the names of its files, their bytes, list.csv) is the
 * inputs layer's, next to its reader (input.h "export").
 *
 * Nothing is lost, overwritten or written outside the output folder:
 *  - the output folder is new or empty;
 *  - every output name is planned before anything is written, and two
 *    samples (or a sample and list.csv) that would write the same name, or
 *    a file where another needs a folder, stop the export naming both; on a
 *    file system that ignores case, names that differ only in ASCII case
 *    count as the same;
 *  - names come from validated keys and field names (SPEC.md "Schema": a
 *    key is a relative path with no "." or ".." component), every folder is
 *    opened relative to the one above it with O_NOFOLLOW, and every file is
 *    written without a name (O_TMPFILE) and then linked under its own with
 *    linkat, which fails with EEXIST rather than replace anything
 *    (new_file.h; where the file system has no O_TMPFILE, a hidden
 *    temporary made with O_EXCL and renamed with RENAME_NOREPLACE): nothing
 *    that exists is ever opened for writing or replaced (a planted symlink
 *    or hard link, or a name this file system folds together in a way the
 *    plan did not foresee, such as Unicode normalization, stops the export
 *    instead);
 *  - a file gets its name only once it is complete, so an export that fails
 *    or is killed (SIGKILL included) leaves no file cut short under its
 *    name. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "error_internal.h"
#include "hash.h"
#include "input.h"
#include "new_file.h"

#define WHAT_LIST 0xFF /* output entry: the format's list (list.csv), not a field's file */
#define REL_MAX INPUT_EXPORT_NAME_MAX

/* ---- output names ---------------------------------------------------------- */

typedef struct exporter {
    sf_dataset *ds;
    const sf_schema *s;
    const char *out_dir;
    int dirfd;
    const input_format *format; /* whose layout: the dataset's source, npy, or npy when it cannot */
    const input_export *ex;     /* &format->export */
    input_layout layout;
    int fold_case;     /* the output's file system treats 'A' and 'a' alike */
    long name_max;     /* longest file name the output's file system takes */
    sf_new_file_method method; /* how files get their names there (new_file.h) */
    mode_t file_mode;  /* 0644 less the umask, as the probe file got it */
    uint64_t written;  /* files created and completely written */
    uint8_t *vbuf;     /* the value being written, copied out of its shard; grown to the largest */
    uint64_t vcap;
} exporter;

/* The path, relative to the output folder, of the file sample i's field f
 * is written to (f == WHAT_LIST: list.csv); returns its length, or 0 when
 * that field writes no file of its own. */
static size_t out_name(const exporter *x, uint64_t i, uint32_t f, char *buf)
{
    if (f == WHAT_LIST)
        return (size_t)snprintf(buf, REL_MAX, "%s", x->ex->list_name);
    const char *key;
    size_t klen;
    sf_dataset_key(&key, &klen, x->ds, i);
    size_t n = x->ex->file_name(buf, &x->layout, key, klen, f);
    assert(n < REL_MAX);
    return n;
}

/* Describes output entry (i, f) for a message: "sample 3 (key 'x_1', field 'img')". */
static void describe(char *buf, size_t cap, const exporter *x, uint64_t i, uint32_t f)
{
    if (f == WHAT_LIST) {
        snprintf(buf, cap, "the generated %s", x->ex->list_name);
        return;
    }
    const char *key;
    size_t klen;
    sf_dataset_key(&key, &klen, x->ds, i);
    snprintf(buf, cap, "sample %llu (key '%.*s', field '%s')", (unsigned long long)i, (int)klen, key,
             x->s->fields[f].name);
}

static unsigned char fold(const exporter *x, unsigned char c)
{
    return x->fold_case && c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

static uint64_t name_hash(const exporter *x, const char *p, size_t len)
{
    if (!x->fold_case)
        return XXH3_64bits(p, len);
    char f[REL_MAX];
    for (size_t k = 0; k < len; k++)
        f[k] = (char)fold(x, (unsigned char)p[k]);
    return XXH3_64bits(f, len);
}

static int same_name(const exporter *x, const char *a, const char *b, size_t len)
{
    for (size_t k = 0; k < len; k++)
        if (fold(x, (unsigned char)a[k]) != fold(x, (unsigned char)b[k]))
            return 0;
    return 1;
}

/* Every output file and every folder above one, hashed: open addressing
 * over 4-byte slots (entry number + 1), kept at most 2/3 full, so about 16
 * bytes per entry plus 6 to 12 of slots. */
typedef struct name_entry {
    uint64_t hash;
    uint32_t sample;
    uint8_t what;   /* field, or WHAT_LIST */
    uint8_t folder; /* the first `len` bytes of that file's path name a folder */
    uint16_t len;
} name_entry;

typedef struct name_table {
    name_entry *e;
    uint64_t n, ecap;
    uint32_t *slot;
    uint64_t mask;
} name_table;

static int table_grow(name_table *t)
{
    if (t->n + 1 >= UINT32_MAX)
        return sf_fail(SF_E_LIMIT, "export: more than %u output files and folders", UINT32_MAX - 2);
    if (t->n == t->ecap) {
        uint64_t c = t->ecap ? t->ecap * 2 : 1024;
        name_entry *e = realloc(t->e, c * sizeof *e);
        if (!e)
            return sf_fail(-ENOMEM, "export: out of memory for %llu output names", (unsigned long long)t->n);
        t->e = e;
        t->ecap = c;
    }
    if (3 * (t->n + 1) <= 2 * (t->mask + 1) && t->slot)
        return 0;
    uint64_t cap = t->slot ? 2 * (t->mask + 1) : 2048;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return sf_fail(-ENOMEM, "export: out of memory for %llu output names", (unsigned long long)t->n);
    for (uint64_t k = 0; k < t->n; k++) {
        uint64_t j = t->e[k].hash & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = (uint32_t)(k + 1);
    }
    free(t->slot);
    t->slot = slot;
    t->mask = cap - 1;
    return 0;
}

/* Records that output entry (i, f), whose path is rel, needs rel[0..len) as
 * a file (folder == 0) or as a folder. Fails when another entry needs the
 * same name as a file, or as the other kind. */
static int claim(exporter *x, name_table *t, uint64_t i, uint32_t f, const char *rel, size_t len,
                 int folder)
{
    int rc = table_grow(t);
    if (rc)
        return rc;
    uint64_t h = name_hash(x, rel, len), j = h & t->mask;
    for (; t->slot[j]; j = (j + 1) & t->mask) {
        const name_entry *o = &t->e[t->slot[j] - 1];
        char other[REL_MAX];
        if (o->hash != h || o->len != len)
            continue;
        out_name(x, o->sample, o->what, other);
        if (!same_name(x, rel, other, len))
            continue;
        if (folder && o->folder)
            return 0; /* another file in the same folder */
        char a[400], b[400];
        describe(a, sizeof a, x, o->sample, o->what);
        describe(b, sizeof b, x, i, f);
        return sf_fail(SF_E_UNSUPPORTED,
                       "%s: %s and %s would both write '%.*s'%s%s: export refuses rather than lose "
                       "one%s",
                       x->out_dir, a, b, (int)len, rel,
                       folder != o->folder ? " (one as a file, the other as a folder)" : "",
                       x->fold_case ? " on this file system, which ignores case" : "",
                       x->format != &input_format_npy ? " (the npy layout, sf_export_npy, names files differently)" : "");
    }
    t->slot[j] = (uint32_t)(t->n + 1);
    t->e[t->n++] = (name_entry){h, (uint32_t)i, (uint8_t)f, (uint8_t)folder, (uint16_t)len};
    return 0;
}

/* Plans output entry (i, f): its folders and file are claimed, and each
 * part of its path must fit the file system's name limit. */
static int plan_entry(exporter *x, name_table *t, uint64_t i, uint32_t f)
{
    char rel[REL_MAX];
    size_t len = out_name(x, i, f, rel);
    if (len == 0)
        return 0;
    size_t start = 0;
    for (size_t k = 0; k <= len; k++) {
        if (k < len && rel[k] != '/')
            continue;
        if ((long)(k - start) > x->name_max) {
            char a[400];
            describe(a, sizeof a, x, i, f);
            return sf_fail(-ENAMETOOLONG,
                           "%s: %s: its output name '%.*s' has a part of %zu bytes, longer than this "
                           "file system's limit of %ld (file name too long)",
                           x->out_dir, a, (int)len, rel, k - start, x->name_max);
        }
        int rc = claim(x, t, i, f, rel, k, k < len);
        if (rc)
            return rc;
        start = k + 1;
    }
    return 0;
}

/* Every name the export will write, checked before anything is written. */
static int plan_names(exporter *x)
{
    name_table t = {0};
    int rc = 0;
    if (x->ex->list_name)
        rc = plan_entry(x, &t, 0, WHAT_LIST);
    for (uint64_t i = 0; i < x->ds->manifest.record_count && !rc; i++)
        for (uint32_t f = 0; f < x->s->field_count && !rc; f++)
            rc = plan_entry(x, &t, i, f);
    free(t.e);
    free(t.slot);
    return rc;
}

/* ---- writing ----------------------------------------------------------------- */

/* Opens the folder of the file `rel` under the output folder, making the
 * folders on the way: each opened with O_NOFOLLOW below its parent.
 * *dir_fd receives it, to be closed by the caller when it is not x->dirfd;
 * *base the file's name in it. */
static int open_folder(int *dir_fd, const char **base, const exporter *x, const char *rel)
{
    int dfd = x->dirfd;
    const char *p = rel;
    const char *slash;
    int rc = 0;
    while ((slash = strchr(p, '/')) != NULL) {
        char comp[REL_MAX];
        size_t n = (size_t)(slash - p);
        memcpy(comp, p, n);
        comp[n] = '\0';
        if (mkdirat(dfd, comp, 0777) != 0 && errno != EEXIST) {
            rc = sf_fail(-errno, "%s/%.*s: cannot create: %s%s", x->out_dir, (int)(slash - rel), rel,
                         strerror(errno), sf_errno_hint(errno));
            break;
        }
        int nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            rc = sf_fail(-errno, "%s/%.*s: cannot open as a folder: %s%s", x->out_dir,
                         (int)(slash - rel), rel, strerror(errno), sf_errno_hint(errno));
            break;
        }
        if (dfd != x->dirfd)
            close(dfd);
        dfd = nfd;
        p = slash + 1;
    }
    if (rc) {
        if (dfd != x->dirfd)
            close(dfd);
        return rc;
    }
    *dir_fd = dfd;
    *base = p;
    return 0;
}

/* The message of a file that could not be created or named: EEXIST means
 * the name was taken meanwhile (it is left as it was). */
static int fail_create(const exporter *x, const char *rel, int rc)
{
    int e = -rc;
    return sf_fail(rc, "%s/%s: cannot create: %s%s%s", x->out_dir, rel, strerror(e),
                   e == EEXIST ? " (something else made it, or this file system treats "
                                 "another sample's name as the same one)"
                               : "",
                   sf_errno_hint(e));
}

/* Starts the new file `rel` (sf_new_file_open in its folder, which is made
 * when missing). *dir_fd: as open_folder's. */
static int create_rel(sf_new_file *nf, int *dir_fd, const exporter *x, const char *rel)
{
    const char *base;
    int rc = open_folder(dir_fd, &base, x, rel);
    if (rc)
        return rc;
    if ((rc = sf_new_file_open(nf, *dir_fd, base, x->method, x->file_mode)) != 0) {
        if (*dir_fd != x->dirfd)
            close(*dir_fd);
        return fail_create(x, rel, rc);
    }
    return 0;
}

/* Names the complete file nf (sf_new_file_commit), or says why not. */
static int commit_rel(sf_new_file *nf, const exporter *x, const char *rel)
{
    int rc = sf_new_file_commit(nf);
    if (rc == -EEXIST)
        return fail_create(x, rel, rc);
    if (rc)
        return sf_fail(rc, "%s/%s: write failed: %s%s", x->out_dir, rel, strerror(-rc), sf_errno_hint(-rc));
    return 0;
}

/* Writes a new file `rel`: head, then data. It has its name only once it
 * is complete; a file that cannot be written whole is removed. */
static int write_rel(exporter *x, const char *rel, const uint8_t *head, uint64_t head_len,
                     const void *data, uint64_t size)
{
    sf_new_file nf;
    int dfd;
    int rc = create_rel(&nf, &dfd, x, rel);
    if (rc)
        return rc;
    rc = sf_write_full(nf.fd, head, head_len);
    if (!rc)
        rc = sf_write_full(nf.fd, data, size);
    if (rc) {
        sf_new_file_discard(&nf);
        sf_fail(rc, "%s/%s: write failed: %s%s", x->out_dir, rel, strerror(-rc), sf_errno_hint(-rc));
    } else if ((rc = commit_rel(&nf, x, rel)) == 0) {
        x->written++;
    }
    if (dfd != x->dirfd)
        close(dfd);
    return rc;
}

/* The value of field f of sample i, copied (or decompressed) into x->vbuf.
 * A copy, not a pointer into the shard's map: sf_dataset_read_value reads
 * the map under the fault guard, so a shard cut short during the export is
 * an error naming it (a write(2) from the map would fail with EFAULT naming
 * the output file, and a CSV cell would die of SIGBUS). `check`: verify the
 * record's checksum first. Payload values are checked against their dtype
 * (bools are 0 or 1). */
static int fetch_value(exporter *x, uint64_t i, uint32_t f, int check, const void **data, uint64_t *size)
{
    const sf_field *fd = &x->s->fields[f];
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
        rc = sf_dataset_read_value(x->vbuf, x->vcap, size, x->ds, i, f, check);
    *data = x->vbuf;
    if (rc || fd->storage == SF_STORAGE_INLINE) /* inline bools: checked at open */
        return rc;
    uint32_t k = 0;
    for (uint32_t g = 0; g < f; g++)
        k += x->s->fields[g].storage != SF_STORAGE_INLINE;
    if ((rc = sf_payload_value_check(x->s, k, *data, *size))) {
        uint64_t local, shard = sf_dataset_locate(x->ds, i, &local);
        char where[4300];
        snprintf(where, sizeof where, "%s/%s: record %llu (sample %llu)", x->ds->dir,
                 x->ds->shards[shard].name, (unsigned long long)local, (unsigned long long)i);
        return sf_fail_prefix(rc, where);
    }
    return 0;
}

/* Writes the files of sample i (every field is fetched, so the record's
 * checksum and values are checked even when a field writes no file). */
static int export_sample(exporter *x, uint64_t i)
{
    int rc = 0;
    for (uint32_t f = 0; f < x->s->field_count && !rc; f++) {
        const void *data;
        uint64_t size;
        if ((rc = fetch_value(x, i, f, f == 0, &data, &size)))
            break;
        char rel[REL_MAX];
        if (out_name(x, i, f, rel) == 0)
            continue;
        uint8_t head[INPUT_EXPORT_HEAD_MAX];
        size_t hlen = 0;
        if (x->ex->file_head && (rc = x->ex->file_head(head, &hlen, &x->s->fields[f], size))) {
            char where[4400];
            snprintf(where, sizeof where, "%s/%s", x->out_dir, rel);
            rc = sf_fail_prefix(rc, where);
        } else {
            rc = write_rel(x, rel, head, hlen, data, size);
        }
    }
    return rc;
}

/* What a list row gets its values from: sample `i`'s, fetched like any
 * other (its checksum was checked when the sample's files were written). */
typedef struct row_values {
    exporter *x;
    uint64_t i;
} row_values;

static int row_value(void *ctx, uint32_t f, const void **value, uint64_t *size)
{
    row_values *r = ctx;
    return fetch_value(r->x, r->i, f, 0, value, size);
}

/* The format's list (list.csv), written after the files (so a list only
 * exists for a complete export): a header, then a row per sample. */
static int write_list(exporter *x)
{
    const char *name = x->ex->list_name;
    sf_new_file nf;
    int dfd;
    int rc = create_rel(&nf, &dfd, x, name);
    if (rc)
        return rc;
    /* stdio writes to a duplicate, closed by fclose; nf.fd stays open for
     * the commit (an unnamed file is linked through its descriptor). */
    int dup_fd = fcntl(nf.fd, F_DUPFD_CLOEXEC, 0);
    FILE *list = dup_fd < 0 ? NULL : fdopen(dup_fd, "w");
    if (!list) {
        int e = errno;
        if (dup_fd >= 0)
            close(dup_fd);
        sf_new_file_discard(&nf);
        if (dfd != x->dirfd)
            close(dfd);
        return sf_fail(-e, "%s/%s: %s%s", x->out_dir, name, strerror(e), sf_errno_hint(e));
    }
    rc = x->ex->list_header(list, &x->layout);
    for (uint64_t i = 0; i < x->ds->manifest.record_count && !rc; i++) {
        const char *key;
        size_t klen;
        sf_dataset_key(&key, &klen, x->ds, i);
        row_values r = {x, i};
        rc = x->ex->list_row(list, &x->layout, key, klen, row_value, &r);
    }
    int bad = ferror(list);
    if ((fclose(list) != 0 || bad) && !rc)
        rc = sf_fail(-EIO, "%s/%s: write failed", x->out_dir, name);
    if (rc)
        sf_new_file_discard(&nf);
    else if ((rc = commit_rel(&nf, x, name)) == 0)
        x->written++;
    if (dfd != x->dirfd)
        close(dfd);
    return rc;
}

/* ---- the output folder ------------------------------------------------------- */

/* The output folder: created when missing (*created = 1), else it must be
 * an empty folder. */
static int prepare_out_dir(const char *out_dir, int *created)
{
    *created = 0;
    if (mkdir(out_dir, 0777) == 0) {
        *created = 1;
        return 0;
    }
    if (errno != EEXIST)
        return sf_fail(-errno, "%s: cannot create: %s", out_dir, strerror(errno));
    DIR *d = opendir(out_dir);
    if (!d)
        return sf_fail(-errno, "%s: %s%s", out_dir, strerror(errno), sf_errno_hint(errno));
    struct dirent *de;
    const char *found = NULL;
    while (!found && (de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            found = de->d_name;
    int rc = found ? sf_fail(SF_E_EXISTS,
                             "%s: not empty (it holds '%s'): export writes into a new or empty "
                             "folder, so that it never replaces a file",
                             out_dir, found)
                   : 0;
    closedir(d);
    return rc;
}

/* What the export needs to know of the (empty) output folder's file system:
 * whether it ignores ASCII case (a probe file, looked up again in capitals,
 * then removed), the mode a new file gets there (the probe's: 0644 less the
 * umask; before Linux 6.0, O_TMPFILE ignored the umask on file systems
 * without POSIX ACLs, so new files are given this mode rather than 0644),
 * and how new files get their names
 * (sf_new_file_probe). */
static void probe_output(exporter *x)
{
    static const char probe[] = ".shardfeed-case-probe", upper[] = ".SHARDFEED-CASE-PROBE";
    x->fold_case = 0;
    x->file_mode = 0644;
    x->method = sf_new_file_probe(x->dirfd);
    int fd = openat(x->dirfd, probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* not writable: the export itself will say so */
    close(fd);
    struct stat a, b;
    if (fstatat(x->dirfd, probe, &a, AT_SYMLINK_NOFOLLOW) == 0) {
        x->file_mode = a.st_mode & 07777;
        x->fold_case = fstatat(x->dirfd, upper, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
                       a.st_dev == b.st_dev;
    }
    unlinkat(x->dirfd, probe, 0);
}

/* The layout of the format called `source` (looked up once per export):
 * a source no format has (written by another tool), or a schema the
 * format cannot lay out, exports as .npy files. */
static void choose_layout(exporter *x, const char *source)
{
    x->format = input_format_find(source);
    x->layout = (input_layout){.schema = x->s, .data_field = -1};
    if (!x->format || (x->format->export.layout && x->format->export.layout(&x->layout) != 0)) {
        x->format = &input_format_npy;
        x->layout = (input_layout){.schema = x->s, .data_field = -1};
    }
    x->ex = &x->format->export;
    assert(x->ex->file_name && (!x->ex->list_name || (x->ex->list_header && x->ex->list_row)));
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
    exporter x = {.ds = ds, .s = &ds->manifest.schema, .out_dir = out_dir, .dirfd = -1};
    choose_layout(&x, force_layout ? force_layout : ds->source);

    int created = 0;
    rc = prepare_out_dir(out_dir, &created);
    if (!rc && (x.dirfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = sf_fail(-errno, "%s: %s%s", out_dir, strerror(errno), sf_errno_hint(errno));
    if (!rc) {
        probe_output(&x);
        x.name_max = fpathconf(x.dirfd, _PC_NAME_MAX);
        if (x.name_max <= 0)
            x.name_max = 255;
        rc = plan_names(&x);
    }
    /* Nothing written yet: leave no trace of a refused export. */
    if (rc && created)
        rmdir(out_dir);
    for (uint64_t i = 0; i < ds->manifest.record_count && !rc; i++)
        rc = export_sample(&x, i);
    if (!rc && x.ex->list_name)
        rc = write_list(&x);
    if (x.dirfd >= 0)
        close(x.dirfd);
    free(x.vbuf);
    sf_dataset_close(ds);
    if (files_written)
        *files_written = x.written;
    return rc;
}

int sf_export(uint64_t *files_written, const char *dataset_dir, const char *out_dir)
{
    return export_layout(dataset_dir, out_dir, NULL, files_written);
}

int sf_export_npy(uint64_t *files_written, const char *dataset_dir, const char *out_dir)
{
    return export_layout(dataset_dir, out_dir, "npy", files_written);
}
