/* Tar input in the WebDataset convention: a member "dir/000123.seg.png" is
 * field "seg.png" of the sample with key "dir/000123" (the name up to the
 * first '.' of its last component). A sample's members are consecutive in
 * one tar. The input is one tar (plain, .gz, .zst, .xz, .bz2: anything
 * libarchive's filters read) or a folder of them, taken in natural order as
 * one dataset.
 *
 * Every field is stored unchanged as variable-length bytes. The schema is
 * the first sample's fields sorted by name; every sample must have exactly
 * those. Discovery reads each tar's headers once, skipping the data, and
 * remembers where each sample starts (tar, member ordinal and, for tars
 * without compression, the header's byte offset). A read cursor keeps one
 * archive open and only moves forward in it, which suits the shard writer:
 * each shard's samples come in increasing order. A cursor starts in the
 * middle of a tar (a new shard) by opening it at the sample's header
 * offset when the tar is not compressed, and otherwise by reading it from
 * the start (compressed data cannot be entered in the middle; nor can a
 * tar at a header libarchive reads within one but starts none with).
 *
 * Export writes each value back as the member it came from, {key}.{field};
 * that needs no libarchive, so a build without it exports tar datasets and
 * refuses tar inputs. */
#include "shardfeed_config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "input_memory.h"
#include "input_util.h"
#include "tar_end.h"

/* ---- names ---- */

/* The tar file names pack reads. */
static int is_tar_name(const char *name)
{
    static const char *const ext[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (input_ends_with(name, ext[i]))
            return 1;
    return 0;
}

/* Export writes each value as the member it came from: {key}.{field}. */
static size_t tar_export_name(char buf[INPUT_EXPORT_NAME_MAX], const input_layout *l, const char *key,
                              size_t klen, uint32_t field)
{
    int n = snprintf(buf, INPUT_EXPORT_NAME_MAX, "%.*s.%s", (int)klen, key, l->schema->fields[field].name);
    assert(n > 0 && n < (int)INPUT_EXPORT_NAME_MAX);
    return (size_t)n;
}

/* A tar file, or a folder holding one. */
static int tar_detect(const char *name, int is_dir)
{
    return !is_dir && is_tar_name(name);
}

#if SF_HAVE_ARCHIVE
#include <archive.h>
#include <archive_entry.h>

#include "key_table.h"
#include "natsort.h"

#define TAR_BLOCK (64u << 10) /* libarchive's read size */

typedef struct tar_priv {
    char **tars; /* paths of the tar files, in dataset order */
    uint32_t ntars;
    uint8_t *plain;   /* [tar]: not compressed, so samples can be opened at their offset */
    uint32_t *tar_of; /* [sample]: index into tars */
    uint64_t *ord_of; /* [sample]: ordinal of its first member's header in its tar */
    int64_t *off_of;  /* [sample]: byte offset of that header (its pax/GNU extension headers first) */
    /* [sample * field_count + field]: each member's size as discovery read
     * it, what a read checks the tar against. Not in->sizes, which pack
     * changes to the stored sizes when it re-encodes images
     * (--image-max-side): a cursor reads a sample's members together, the
     * re-encoded ones too, and each must still be the size it was. */
    uint64_t *member_size;
    const uint8_t *mem; /* input_tar_open_memory: the one tar's bytes; NULL: the tars are files */
    size_t mem_len;
} tar_priv;

/* Where a member's header is: ordinal among its tar's headers, byte offset. */
typedef struct member_pos {
    uint64_t ord;
    int64_t off;
} member_pos;

/* Splits a member name into its key (copied into `key`) and field (a
 * pointer into `name`). A leading "./" (from `tar -C dir .`) is dropped. */
static int split_member(const char *tar, const char *name, char key[SF_MAX_KEY + 1], const char **field)
{
    const char *n = name;
    while (n[0] == '.' && n[1] == '/')
        n += 2;
    const char *slash = strrchr(n, '/');
    const char *base = slash ? slash + 1 : n;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return sf_fail(SF_E_INPUT,
                       "%s: member '%s': the file name is not KEY.FIELD (e.g. 000123.seg.png; the "
                       "key ends at the first '.')",
                       tar, name);
    size_t klen = (size_t)(dot - n);
    char why[600];
    if (!sf_key_check(n, klen, why, sizeof why))
        return sf_fail(SF_E_INPUT, "%s: member '%s': %s", tar, name, why);
    if (!sf_valid_field_name(dot + 1, strlen(dot + 1)))
        return sf_fail(SF_E_INPUT,
                       "%s: member '%s': '%s' is not a valid field name (1-%u characters of "
                       "[A-Za-z0-9._-], not starting with '.')",
                       tar, name, dot + 1, SF_MAX_NAME);
    memcpy(key, n, klen);
    key[klen] = '\0';
    *field = dot + 1;
    return 0;
}

/* ---- libarchive ---- */

/* Opens tar t of the input at byte `off`: 0 for its start, any compression,
 * else a header boundary of an uncompressed tar, from where it reads as a
 * tar of its own. *fd is the file it reads (opened by input_open_file:
 * never a FIFO; -1 for a tar in memory), closed by the caller after
 * archive_read_free; *st its stat. */
static int tar_open(struct archive **out, int *fd, const tar_priv *p, uint32_t t, int64_t off,
                    struct stat *st)
{
    const char *path = p->tars[t];
    struct archive *a = NULL;
    int rc = 0;
    *out = NULL;
    *fd = -1;
    if (p->mem) {
        memset(st, 0, sizeof *st);
        st->st_size = (off_t)p->mem_len;
    } else if ((*fd = input_open_file(path, st)) < 0) {
        rc = *fd;
        *fd = -1;
        return rc;
    }
    if (off < 0 || (uint64_t)off > (uint64_t)st->st_size || (*fd >= 0 && lseek(*fd, off, SEEK_SET) != off))
        rc = sf_fail(SF_E_INPUT, "%s: input changed while packing (cannot go to byte %lld)", path,
                     (long long)off);
    else if (!(a = archive_read_new()))
        rc = sf_fail(-ENOMEM, "out of memory");
    if (!rc) {
        if (off)
            archive_read_support_filter_none(a);
        else
            archive_read_support_filter_all(a);
        archive_read_support_format_tar(a); /* ustar, pax and GNU tar */
        int r = p->mem ? archive_read_open_memory(a, p->mem + off, p->mem_len - (size_t)off)
                       : archive_read_open_fd(a, *fd, TAR_BLOCK);
        if (r != ARCHIVE_OK && off)
            rc = sf_fail(SF_E_INPUT, "%s: input changed while packing (at byte %lld: %s)", path,
                         (long long)off, archive_error_string(a));
        else if (r != ARCHIVE_OK)
            rc = sf_fail(SF_E_INPUT, "%s: cannot read as a tar file: %s", path, archive_error_string(a));
    }
    if (rc) {
        if (a)
            archive_read_free(a);
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return rc;
    }
    *out = a;
    return 0;
}

/* The next header; 1 at the end of the archive. Warnings (an odd pax
 * attribute) pass; anything that loses data fails, naming the tar. */
static int next_header(struct archive *a, const char *tar, struct archive_entry **e)
{
    int r = archive_read_next_header(a, e);
    if (r == ARCHIVE_EOF)
        return 1;
    if (r == ARCHIVE_OK || r == ARCHIVE_WARN)
        return 0;
    return sf_fail(SF_E_INPUT, "%s: not a readable tar file: %s", tar, archive_error_string(a));
}

/* 1 for a member to skip (a directory), 0 for a regular file, or an error
 * for anything else: a link would stand for bytes the tar does not hold. */
static int member_kind(const char *tar, struct archive_entry *e)
{
    const char *name = archive_entry_pathname(e);
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR)
        return 1;
    if (!name)
        return sf_fail(SF_E_INPUT, "%s: a member without a name", tar);
    if (archive_entry_hardlink(e))
        return sf_fail(SF_E_INPUT, "%s: member '%s' is a hard link (only regular files are packed)",
                       tar, name);
    if (type != AE_IFREG)
        return sf_fail(SF_E_INPUT, "%s: member '%s' is a %s (only regular files are packed)", tar, name,
                       type == AE_IFLNK ? "symbolic link" : "device, FIFO or socket");
    if (!archive_entry_size_is_set(e))
        return sf_fail(SF_E_INPUT, "%s: member '%s' has no size", tar, name);
    if ((uint64_t)archive_entry_size(e) > SF_MAX_FIELD_BYTES)
        return sf_fail(SF_E_LIMIT, "%s: member '%s' is %lld bytes (one value may have at most %llu)",
                       tar, name, (long long)archive_entry_size(e), (unsigned long long)SF_MAX_FIELD_BYTES);
    return 0;
}

/* ---- discovery ---- */

/* What the scan has found so far. */
typedef struct scan {
    input_set *in;
    tar_priv *p;
    char **keys;     /* [sample] */
    uint64_t *sizes; /* [sample * nf + field] */
    size_t n, cap;
    sf_key_table seen; /* the keys of samples [0, n] (n: the one gathered) */
    /* The schema, fixed by the first sample. */
    uint32_t nf;
    char names[SF_MAX_FIELDS][SF_MAX_NAME + 1];
    /* The sample being gathered. */
    char *key;
    uint32_t tar;
    member_pos at;
    uint32_t cur_n;
    char cur_field[SF_MAX_FIELDS][SF_MAX_NAME + 1];
    uint64_t cur_size[SF_MAX_FIELDS];
    uint8_t cur_order[SF_MAX_FIELDS]; /* cur_field indices sorted by name */
} scan;

static int grow_samples(scan *sc)
{
    size_t cap = sc->cap ? sc->cap * 2 : 1024;
    char **k = realloc(sc->keys, cap * sizeof *k);
    if (k)
        sc->keys = k;
    uint32_t *t = realloc(sc->p->tar_of, cap * sizeof *t);
    if (t)
        sc->p->tar_of = t;
    uint64_t *o = realloc(sc->p->ord_of, cap * sizeof *o);
    if (o)
        sc->p->ord_of = o;
    int64_t *b = realloc(sc->p->off_of, cap * sizeof *b);
    if (b)
        sc->p->off_of = b;
    uint64_t *s = realloc(sc->sizes, cap * sc->nf * sizeof *s);
    if (s)
        sc->sizes = s;
    if (!k || !t || !o || !b || !s)
        return sf_fail(-ENOMEM, "out of memory for %zu samples", cap);
    sc->cap = cap;
    return 0;
}

/* cur_order = the gathered fields sorted by name (insertion sort: at
 * most SF_MAX_FIELDS, usually a handful). */
static void sort_fields(scan *sc)
{
    for (uint32_t i = 0; i < sc->cur_n; i++) {
        uint32_t j = i;
        while (j > 0 && strcmp(sc->cur_field[sc->cur_order[j - 1]], sc->cur_field[i]) > 0) {
            sc->cur_order[j] = sc->cur_order[j - 1];
            j--;
        }
        sc->cur_order[j] = (uint8_t)i;
    }
}

/* The first sample's fields, sorted, become the schema. */
static void fix_schema(scan *sc)
{
    sc->nf = sc->cur_n;
    for (uint32_t i = 0; i < sc->nf; i++)
        memcpy(sc->names[i], sc->cur_field[sc->cur_order[i]], sizeof sc->names[i]);
}

/* Compares the gathered sample's sorted fields with the schema's. */
static int check_fields(const scan *sc)
{
    const char *tar = sc->p->tars[sc->tar];
    uint32_t i = 0, j = 0;
    while (i < sc->nf || j < sc->cur_n) {
        const char *want = i < sc->nf ? sc->names[i] : NULL;
        const char *have = j < sc->cur_n ? sc->cur_field[sc->cur_order[j]] : NULL;
        int c = !want ? 1 : !have ? -1 : strcmp(want, have);
        if (c < 0)
            return sf_fail(SF_E_INPUT,
                           "%s: sample '%s' has no '%s' member (every sample needs the fields of the "
                           "first, '%s')",
                           tar, sc->key, want, sc->keys[0]);
        if (c > 0)
            return sf_fail(SF_E_INPUT,
                           "%s: member '%s.%s': field '%s' is not one of the first sample's ('%s')", tar,
                           sc->key, have, have, sc->keys[0]);
        i++;
        j++;
    }
    return 0;
}

/* Files the gathered sample (if any) as the next one of the dataset. */
static int finish_sample(scan *sc)
{
    if (!sc->key)
        return 0;
    sort_fields(sc);
    if (sc->n == 0)
        fix_schema(sc);
    int rc = 0;
    if (sc->n == sc->cap && (rc = grow_samples(sc)))
        return rc;
    sc->keys[sc->n] = sc->key; /* before check_fields: the first sample names itself */
    if (sc->n > 0 && (rc = check_fields(sc)))
        return rc;
    for (uint32_t i = 0; i < sc->nf; i++)
        sc->sizes[sc->n * sc->nf + i] = sc->cur_size[sc->cur_order[i]];
    sc->p->tar_of[sc->n] = sc->tar;
    sc->p->ord_of[sc->n] = sc->at.ord;
    sc->p->off_of[sc->n] = sc->at.off;
    sc->n++;
    sc->key = NULL;
    return 0;
}

/* The key of sample s < sc->n (the gathered sample's key is filed first). */
static void key_of_scanned(void *ctx, uint64_t s, const uint8_t **key, size_t *len)
{
    const scan *sc = ctx;
    *key = (const uint8_t *)sc->keys[s];
    *len = strlen(sc->keys[s]);
}

/* Starts a sample at member `at` of tar `t`; its key must be new. */
static int start_sample(scan *sc, uint32_t t, member_pos at, const char *key, const char *name)
{
    int rc = finish_sample(sc);
    if (rc)
        return rc;
    if (sc->n >= SF_MAX_RECORDS) /* a dataset's limit, and the key table's */
        return sf_fail(SF_E_LIMIT, "%s: member '%s': more than %llu samples", sc->p->tars[t], name,
                       (unsigned long long)SF_MAX_RECORDS);
    if (!(sc->key = strdup(key)))
        return sf_fail(-ENOMEM, "out of memory");
    uint64_t first;
    rc = sf_key_table_add(&sc->seen, sc->n, (const uint8_t *)key, strlen(key), &first);
    if (rc == 1) {
        rc = sf_fail(SF_E_INPUT,
                     "%s: member '%s': key '%s' appears again, after other samples (first in %s); a "
                     "sample's members must be consecutive",
                     sc->p->tars[t], name, key, sc->p->tars[sc->p->tar_of[first]]);
    }
    if (rc) {
        free(sc->key);
        sc->key = NULL;
        return rc;
    }
    sc->tar = t;
    sc->at = at;
    sc->cur_n = 0;
    return 0;
}

static int add_member(scan *sc, uint32_t t, member_pos at, struct archive_entry *e)
{
    const char *tar = sc->p->tars[t], *name = archive_entry_pathname(e), *field;
    char key[SF_MAX_KEY + 1];
    int rc = split_member(tar, name, key, &field);
    if (rc)
        return rc;
    if ((!sc->key || sc->tar != t || strcmp(key, sc->key) != 0) &&
        (rc = start_sample(sc, t, at, key, name)))
        return rc;
    for (uint32_t i = 0; i < sc->cur_n; i++)
        if (strcmp(sc->cur_field[i], field) == 0)
            return sf_fail(SF_E_INPUT, "%s: member '%s': sample '%s' has field '%s' twice", tar, name,
                           key, field);
    if (sc->cur_n == SF_MAX_FIELDS)
        return sf_fail(SF_E_LIMIT, "%s: member '%s': more than %u fields in sample '%s'", tar, name,
                       SF_MAX_FIELDS, key);
    snprintf(sc->cur_field[sc->cur_n], sizeof sc->cur_field[sc->cur_n], "%s", field);
    sc->cur_size[sc->cur_n++] = (uint64_t)archive_entry_size(e);
    return 0;
}

/* Opens tar t for discovery: *a reads its headers, from the file itself
 * when it is not compressed (*src NULL), else from *src, a stream that
 * decompresses it and checks it whole (tar_end.c). */
static int scan_open(struct archive **a, tar_stream **src, int *fd, const tar_priv *p, uint32_t t,
                     struct stat *st)
{
    *src = NULL;
    int rc = tar_open(a, fd, p, t, 0, st);
    if (rc || archive_filter_count(*a) == 1) /* no filter but the file */
        return rc;
    archive_read_free(*a);
    *a = NULL;
    const char *tar = p->tars[t];
    if (!(rc = tar_stream_open(src, tar, *fd, p->mem, p->mem_len)) && *src) {
        if (!(*a = archive_read_new())) {
            rc = sf_fail(-ENOMEM, "out of memory");
        } else {
            archive_read_support_format_tar(*a); /* and no filter: the stream decompressed it */
            if (tar_stream_attach(*a, *src) != ARCHIVE_OK && !(rc = tar_stream_failed(*src)))
                rc = sf_fail(SF_E_INPUT, "%s: cannot read as a tar file: %s", tar, archive_error_string(*a));
        }
    } else if (!rc) {
        rc = sf_fail(SF_E_INPUT, "%s: compressed, but its bytes read back plain", tar);
    }
    if (rc) {
        if (*a)
            archive_read_free(*a);
        *a = NULL;
        tar_stream_free(*src);
        *src = NULL;
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
    }
    return rc;
}

/* One pass over tar `t`'s headers, then its end checked (tar_end.c). */
static int scan_tar(scan *sc, uint32_t t)
{
    const char *tar = sc->p->tars[t];
    struct archive *a;
    tar_stream *src;
    struct stat st;
    int fd;
    int rc = scan_open(&a, &src, &fd, sc->p, t, &st);
    if (rc)
        return rc;
    sc->p->plain[t] = src == NULL; /* where a cursor may enter at a sample's header */
    const char *base = strrchr(tar, '/');
    input_note_file(sc->in, base ? base + 1 : tar, (uint64_t)st.st_size, input_mtime_ns(&st));
    struct archive_entry *e;
    char last[256] = "";
    tar_end ends = {0, 0, last};
    for (uint64_t ord = 0; (rc = next_header(a, tar, &e)) == 0; ord++) {
        const char *name = archive_entry_pathname(e);
        snprintf(last, sizeof last, "%s", name ? name : "");
        int kind = member_kind(tar, e);
        member_pos at = {ord, archive_read_header_position(a)};
        if (kind == 0)
            rc = add_member(sc, t, at, e);
        else if (kind < 0)
            rc = kind;
        /* Skipping reads through compressed data, so a truncated tar
         * fails here rather than while packing. */
        if (!rc && archive_read_data_skip(a) != ARCHIVE_OK)
            rc = sf_fail(SF_E_INPUT, "%s: member '%s': %s", tar, archive_entry_pathname(e),
                         archive_error_string(a));
        if (rc)
            break;
        ends.data_end = (uint64_t)archive_filter_bytes(a, 0);
    }
    ends.end = (uint64_t)archive_filter_bytes(a, 0);
    archive_read_free(a);
    int failed = rc < 0 ? tar_stream_failed(src) : 0;
    if (failed) /* the decompression's own error, not the tar reader's account of it */
        rc = failed;
    if (rc == 1) { /* the headers' end: what follows them, and the compressed stream whole */
        int bad = tar_end_check(tar, src, fd, sc->p->mem, sc->p->mem_len, &ends);
        rc = bad ? bad : rc;
    }
    tar_stream_free(src);
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        return rc;
    return finish_sample(sc); /* samples do not continue into the next tar */
}

static int cmp_nat(const void *a, const void *b)
{
    return input_natcmp(*(char *const *)a, *(char *const *)b);
}

static int add_tar(tar_priv *p, char *path, size_t *cap)
{
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    if (p->ntars == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **v = realloc(p->tars, c * sizeof *v);
        if (!v) {
            free(path);
            return sf_fail(-ENOMEM, "out of memory");
        }
        p->tars = v;
        *cap = c;
    }
    p->tars[p->ntars++] = path;
    return 0;
}

/* The tar files of a folder, in natural order; other files are counted
 * as skipped. */
static int list_tars(input_set *in, tar_priv *p, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open folder: %s", dir, sf_errno_text(errno));
    size_t cap = 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (errno = 0, de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        struct stat st;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        if (fstatat(dirfd(d), n, &st, 0) != 0)
            rc = sf_fail(SF_E_INPUT, "%s/%s: %s", dir, n, strerror(errno));
        else if (S_ISREG(st.st_mode) && is_tar_name(n))
            rc = add_tar(p, input_path_join(dir, n), &cap);
        else if (in->skipped++ == 0)
            snprintf(in->skipped_example, sizeof in->skipped_example, "%s/%s", dir, n);
    }
    if (!rc && errno)
        rc = sf_fail(SF_E_INPUT, "%s: reading folder: %s", dir, strerror(errno));
    closedir(d);
    if (!rc && p->ntars == 0)
        rc = sf_fail(SF_E_INPUT, "%s: no tar files (.tar, .tar.gz, .tgz, .tar.zst, .tar.xz, .tar.bz2)", dir);
    if (!rc)
        qsort(p->tars, p->ntars, sizeof *p->tars, cmp_nat);
    return rc;
}

static void set_schema(sf_schema *s, const scan *sc)
{
    s->field_count = sc->nf;
    for (uint32_t f = 0; f < sc->nf; f++) {
        sf_field *fd = &s->fields[f];
        memset(fd, 0, sizeof *fd);
        snprintf(fd->name, sizeof fd->name, "%s", sc->names[f]);
        fd->dtype = SF_DTYPE_BYTES;
        fd->ndim = 1;
        fd->storage = SF_STORAGE_VARIABLE;
    }
}

/* Hands the scan's tables to `in`. */
static int take_samples(input_set *in, scan *sc)
{
    set_schema(&in->schema, sc);
    int rc = input_alloc(in, sc->n);
    if (rc)
        return rc;
    for (size_t s = 0; s < sc->n; s++) {
        in->keys[s] = sc->keys[s];
        sc->keys[s] = NULL;
    }
    uint64_t values = (uint64_t)sc->n * sc->nf;
    memcpy(in->sizes, sc->sizes, values * sizeof *in->sizes);
    for (uint64_t i = 0; i < values; i++)
        in->bytes_in += in->sizes[i];
    sc->p->member_size = sc->sizes; /* kept as discovered, whatever in->sizes becomes */
    sc->sizes = NULL;
    if ((rc = sf_schema_finish(&in->schema)))
        return sf_fail_prefix(rc, in->path);
    return 0;
}

static void scan_free(scan *sc)
{
    for (size_t s = 0; s < sc->n; s++)
        free(sc->keys[s]);
    free(sc->keys);
    free(sc->sizes);
    free(sc->key);
    sf_key_table_free(&sc->seen);
}

/* ---- reading ---- */

typedef struct tar_cursor {
    struct archive *a; /* NULL: none open */
    int fd;            /* -1, or the file `a` reads when opened at an offset */
    uint32_t tar;
    uint64_t next_ord;  /* ordinal of the header the next read returns */
    uint64_t sample;    /* whose values are in buf; UINT64_MAX: none */
    uint8_t *buf[SF_MAX_FIELDS];
    uint64_t cap[SF_MAX_FIELDS];
} tar_cursor;

static void cursor_drop_archive(tar_cursor *c)
{
    if (c->a)
        archive_read_free(c->a);
    if (c->fd >= 0)
        close(c->fd);
    c->a = NULL;
    c->fd = -1;
}

/* Positions the cursor before the header of sample `s`'s first member.
 * It moves forward in the open archive when it can; otherwise it reopens
 * the tar: at the header itself when the tar is not compressed and
 * `enter` allows it (*entered is then 1), else from the start. */
static int seek_member(tar_cursor *c, const tar_priv *p, uint64_t s, int enter, int *entered)
{
    uint32_t t = p->tar_of[s];
    uint64_t ord = p->ord_of[s];
    int rc;
    int forward = c->a && c->tar == t && c->next_ord <= ord;
    *entered = 0;
    if (!forward || (p->plain[t] && enter && ord - c->next_ord > 16)) {
        cursor_drop_archive(c);
        c->tar = t;
        *entered = p->plain[t] && enter;
        c->next_ord = *entered ? ord : 0;
        struct stat st;
        rc = tar_open(&c->a, &c->fd, p, t, *entered ? p->off_of[s] : 0, &st);
        if (rc) {
            cursor_drop_archive(c);
            return rc;
        }
    }
    struct archive_entry *e;
    while (c->next_ord < ord) {
        if ((rc = next_header(c->a, p->tars[t], &e)))
            return rc < 0 ? rc
                          : sf_fail(SF_E_INPUT, "%s: input changed while packing (fewer members)",
                                    p->tars[t]);
        c->next_ord++;
    }
    return 0;
}

static int read_value(tar_cursor *c, const char *tar, const char *name, uint32_t f, uint64_t size)
{
    if (size > c->cap[f]) {
        uint8_t *b = realloc(c->buf[f], size);
        if (!b)
            return sf_fail(-ENOMEM, "out of memory for %s: member '%s'", tar, name);
        c->buf[f] = b;
        c->cap[f] = size;
    }
    uint64_t got = 0;
    while (got < size) {
        la_ssize_t n = archive_read_data(c->a, c->buf[f] + got, (size_t)(size - got));
        if (n < 0)
            return sf_fail(SF_E_INPUT, "%s: member '%s': %s", tar, name, archive_error_string(c->a));
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    if (got != size)
        return sf_fail(SF_E_INPUT, "%s: member '%s': input changed while packing (%llu bytes, was %llu)",
                       tar, name, (unsigned long long)got, (unsigned long long)size);
    return 0;
}

/* Reads every member of sample `s` into the per-field buffers, entering
 * an uncompressed tar at the sample's header when `enter` allows; *entered
 * says whether it did. */
static int read_sample(tar_cursor *c, const input_set *in, uint64_t s, int enter, int *entered)
{
    const tar_priv *p = in->priv;
    uint32_t t = p->tar_of[s], nf = in->schema.field_count;
    const char *tar = p->tars[t];
    int rc = seek_member(c, p, s, enter, entered);
    uint64_t have = 0; /* bit f: field f read */
    for (uint32_t got = 0; !rc && got < nf;) {
        struct archive_entry *e;
        if ((rc = next_header(c->a, tar, &e)) > 0)
            rc = sf_fail(SF_E_INPUT, "%s: input changed while packing (ends before sample '%s')", tar,
                         in->keys[s]);
        if (rc)
            break;
        c->next_ord++;
        int kind = member_kind(tar, e);
        if (kind != 0) {
            rc = kind < 0 ? kind : 0;
            continue;
        }
        const char *name = archive_entry_pathname(e), *field;
        char key[SF_MAX_KEY + 1];
        if ((rc = split_member(tar, name, key, &field)))
            break;
        int f = sf_schema_find(&in->schema, field);
        if (strcmp(key, in->keys[s]) != 0 || f < 0 || (have >> f & 1) ||
            (uint64_t)archive_entry_size(e) != p->member_size[s * nf + (uint32_t)f]) {
            rc = sf_fail(SF_E_INPUT, "%s: member '%s': input changed while packing", tar, name);
            break;
        }
        have |= 1ull << f;
        rc = read_value(c, tar, name, (uint32_t)f, p->member_size[s * nf + (uint32_t)f]);
        got++;
    }
    if (rc) {
        cursor_drop_archive(c); /* its position is unknown now */
        c->sample = UINT64_MAX;
        return rc;
    }
    c->sample = s;
    return 0;
}

/* Sample `s`, as discovery read it. Some headers libarchive reads within a
 * tar it will not start one with (a number field it parses leniently, such
 * as a size with a NUL among its digits): a sample entered at such a header
 * is read again from the tar's start, the way discovery read it, rather
 * than failing on an unchanged tar. */
static int load_sample(tar_cursor *c, const input_set *in, uint64_t s)
{
    int entered;
    int rc = read_sample(c, in, s, 1, &entered);
    if (rc && entered)
        rc = read_sample(c, in, s, 0, &entered);
    return rc;
}

static int tar_cursor_open(const input_set *in, void **cursor)
{
    (void)in;
    tar_cursor *c = calloc(1, sizeof *c);
    if (!c)
        return sf_fail(-ENOMEM, "out of memory");
    c->sample = UINT64_MAX;
    c->fd = -1;
    *cursor = c;
    return 0;
}

static void tar_cursor_close(void *cursor)
{
    tar_cursor *c = cursor;
    if (!c)
        return;
    cursor_drop_archive(c);
    for (uint32_t f = 0; f < SF_MAX_FIELDS; f++)
        free(c->buf[f]);
    free(c);
}

static int tar_read(void *cursor, const input_set *in, uint64_t s, uint32_t f, uint8_t *dst)
{
    tar_cursor *c = cursor;
    const tar_priv *p = in->priv;
    uint64_t at = s * in->schema.field_count + f, size = in->sizes[at];
    /* A re-encoded image is read from pack's spool, never from here. */
    if (size != p->member_size[at])
        return sf_fail(SF_E_STATE, "%s: sample '%s', field '%s': %llu bytes asked of a %llu-byte member",
                       p->tars[p->tar_of[s]], in->keys[s], in->schema.fields[f].name, (unsigned long long)size,
                       (unsigned long long)p->member_size[at]);
    int rc;
    if (c->sample != s && (rc = load_sample(c, in, s)))
        return rc;
    if (size)
        memcpy(dst, c->buf[f], size);
    return 0;
}

static void tar_free(input_set *in)
{
    tar_priv *p = in->priv;
    if (!p)
        return;
    for (uint32_t t = 0; t < p->ntars; t++)
        free(p->tars[t]);
    free(p->tars);
    free(p->tar_of);
    free(p->ord_of);
    free(p->off_of);
    free(p->member_size);
    free(p->plain);
    free(p);
    in->priv = NULL;
}

/* Reads the headers of every tar of the input into its samples. */
static int scan_tars(input_set *in, tar_priv *p, const char *path)
{
    int rc = 0;
    if (!(p->plain = calloc(p->ntars ? p->ntars : 1, 1)))
        rc = sf_fail(-ENOMEM, "out of memory");
    scan sc = {.in = in, .p = p};
    if (!rc)
        rc = sf_key_table_init(&sc.seen, 0, key_of_scanned, &sc);
    for (uint32_t t = 0; t < p->ntars && !rc; t++)
        rc = scan_tar(&sc, t);
    if (!rc && sc.n == 0)
        rc = sf_fail(SF_E_INPUT, "%s: no members (a tar input holds KEY.FIELD files)", path);
    if (!rc)
        rc = take_samples(in, &sc);
    scan_free(&sc);
    return rc;
}

static int tar_discover(input_set *in, const char *path)
{
    tar_priv *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    in->priv = p;
    struct stat st;
    size_t cap = 0;
    int rc;
    if (stat(path, &st) != 0)
        return sf_fail(SF_E_INPUT, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        rc = list_tars(in, p, path);
    else
        rc = add_tar(p, strdup(path), &cap);
    return rc ? rc : scan_tars(in, p, path);
}

int input_tar_open_memory(input_set *in, const char *name, const void *buf, size_t len)
{
    int rc = input_set_init(in, name, &input_format_tar);
    tar_priv *p = rc ? NULL : calloc(1, sizeof *p);
    if (!rc && !p)
        rc = sf_fail(-ENOMEM, "out of memory");
    if (rc)
        return rc;
    in->priv = p;
    p->mem = buf;
    p->mem_len = len;
    size_t cap = 0;
    rc = add_tar(p, strdup(name), &cap);
    return rc ? rc : scan_tars(in, p, name);
}

#else /* built without libarchive: tar inputs are detected, and refused */

static int tar_discover(input_set *in, const char *path)
{
    (void)in;
    return sf_fail(SF_E_UNSUPPORTED, "%s: this build has no tar support (libarchive was not found)",
                   path);
}

int input_tar_open_memory(input_set *in, const char *name, const void *buf, size_t len)
{
    (void)buf, (void)len;
    int rc = input_set_init(in, name, &input_format_tar);
    return rc ? rc : tar_discover(in, name);
}

/* Never called: discovery fails first. */
#define tar_cursor_open input_no_cursor_open
#define tar_cursor_close input_no_cursor_close
#define tar_free NULL
static int tar_read(void *cursor, const input_set *in, uint64_t s, uint32_t f, uint8_t *dst)
{
    (void)cursor, (void)s, (void)f, (void)dst;
    return sf_fail(SF_E_UNSUPPORTED, "%s: this build has no tar support", in->path);
}
#endif

const input_format input_format_tar = {
    .name = "tar",
    .dir_hint = "tar files",
    .dir_count = {"tar file", "tar files"},
    .file_hint = "a .tar, .tar.gz, .tgz, .tar.zst, .tar.xz or .tar.bz2 file",
    .detect = tar_detect,
    .discover = tar_discover,
    .cursor_open = tar_cursor_open,
    .read = tar_read,
    .cursor_close = tar_cursor_close,
    .free = tar_free,
    .export = {.file_name = tar_export_name},
};
