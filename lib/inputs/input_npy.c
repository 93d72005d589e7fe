/* The npy input: a directory of {field}_{key}.npy files. Export writes
 * every field of every sample as such a file (also for datasets of other
 * formats, with --npy). */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "shard_file.h"
#include "natsort.h"
#include "npy_file.h"
#include "input_util.h"

/* The format's own tables (input_set.priv). */
typedef struct npy_priv {
    const char *dir;
    uint32_t field_count;
    char **names; /* [sample * field_count + field]: file name in dir */
} npy_priv;

typedef struct npy_entry {
    char *name;  /* file name */
    char *field; /* points into a copy of the stem */
    char *key;
} npy_entry;

static int entry_cmp(const void *pa, const void *pb)
{
    const npy_entry *a = pa, *b = pb;
    int c = input_natcmp(a->key, b->key);
    return c ? c : strcmp(a->field, b->field);
}

static int str_cmp(const void *pa, const void *pb)
{
    return strcmp(*(char *const *)pa, *(char *const *)pb);
}

static void free_entries(npy_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(e[i].name);
        free(e[i].field); /* field and key share one allocation */
    }
    free(e);
}

/* Splits "img_12.npy" into field "img" and key "12": the key is what follows
 * the last underscore. */
static int parse_name(npy_entry *e, const char *dir, const char *name)
{
    size_t len = strlen(name);
    if (len < 4 || strcmp(name + len - 4, ".npy") != 0)
        return sf_fail(SF_E_INPUT, "%s/%s: not a .npy file (inputs are named {field}_{key}.npy)",
                       dir, name);
    char *stem = strndup(name, len - 4);
    if (!stem)
        return sf_fail(-ENOMEM, "out of memory");
    char *us = strrchr(stem, '_');
    if (!us || us == stem || us[1] == '\0') {
        free(stem);
        return sf_fail(SF_E_INPUT, "%s/%s: name is not {field}_{key}.npy", dir, name);
    }
    *us = '\0';
    if (!sf_valid_field_name(stem, strlen(stem))) {
        free(stem);
        return sf_fail(SF_E_INPUT,
                       "%s/%s: the field name before the key's '_' is not valid (1 to %u bytes of "
                       "[A-Za-z0-9._-], not starting with '.')",
                       dir, name, SF_MAX_NAME);
    }
    char why[600];
    if (!sf_key_check(us + 1, strlen(us + 1), why, sizeof why)) {
        free(stem);
        return sf_fail(SF_E_INPUT, "%s/%s: %s", dir, name, why);
    }
    e->field = stem;
    e->key = us + 1;
    e->name = strdup(name);
    if (!e->name) {
        free(stem);
        return sf_fail(-ENOMEM, "out of memory");
    }
    return 0;
}

static int list_dir(input_set *in, const char *dir, npy_entry **out, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return sf_fail(-errno, "%s: cannot open input directory: %s", dir, sf_errno_text(errno));
    int dfd = dirfd(d);
    size_t n = 0, cap = 0;
    npy_entry *v = NULL;
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        /* Follow symlinks to regular files; a loop or dangling link fails here. */
        if (fstatat(dfd, de->d_name, &st, 0) != 0) {
            rc = sf_fail(SF_E_INPUT, "%s/%s: %s", dir, de->d_name, strerror(errno));
            break;
        }
        if (!S_ISREG(st.st_mode)) {
            rc = sf_fail(SF_E_INPUT, "%s/%s: not a regular file (inputs are {field}_{key}.npy files)",
                         dir, de->d_name);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            npy_entry *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = sf_fail(-ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        rc = parse_name(&v[n], dir, de->d_name);
        if (rc)
            break;
        input_note_file(in, de->d_name, (uint64_t)st.st_size, input_mtime_ns(&st));
        n++;
        errno = 0;
    }
    if (!rc && errno)
        rc = sf_fail(-errno, "%s: reading directory: %s", dir, strerror(errno));
    closedir(d);
    if (rc) {
        free_entries(v, n);
        return rc;
    }
    if (n == 0) {
        free(v);
        return sf_fail(SF_E_INPUT, "%s: no .npy files", dir);
    }
    *out = v;
    *count = n;
    return 0;
}

/* Distinct field names in bytewise order: the schema's field order. */
static int collect_fields(const char *dir, const npy_entry *e, size_t n, char names[][SF_MAX_NAME + 1],
                          uint32_t *nf)
{
    char **all = malloc(n * sizeof *all);
    if (!all)
        return sf_fail(-ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        all[i] = e[i].field;
    qsort(all, n, sizeof *all, str_cmp);
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(all[i], all[i - 1]) == 0)
            continue;
        if (k == SF_MAX_FIELDS) {
            int rc = sf_fail(SF_E_LIMIT,
                             "%s: more than %u distinct fields (a field is the part of a file name "
                             "before its last '_': '%s', '%s', ...; {field}_{key}.npy)",
                             dir, SF_MAX_FIELDS, names[0], all[i]);
            free(all);
            return rc;
        }
        snprintf(names[k++], SF_MAX_NAME + 1, "%s", all[i]);
    }
    free(all);
    *nf = k;
    return 0;
}

static int field_pos(char names[][SF_MAX_NAME + 1], uint32_t nf, const char *field)
{
    for (uint32_t i = 0; i < nf; i++)
        if (strcmp(names[i], field) == 0)
            return (int)i;
    return -1;
}

/* Any file of sample `s` that exists (every sample has at least one). */
static const char *present_name(const npy_priv *p, size_t s)
{
    for (uint32_t f = 0; f < p->field_count; f++)
        if (p->names[s * p->field_count + f])
            return p->names[s * p->field_count + f];
    return "?";
}

/* Groups sorted entries by key; every key needs every field. */
static int group_samples(input_set *in, npy_priv *p, npy_entry *e, size_t n,
                         char names[][SF_MAX_NAME + 1])
{
    uint32_t nf = p->field_count;
    size_t samples = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(e[i].key, e[i - 1].key) != 0)
            samples++;
    in->schema.field_count = nf; /* input_alloc sizes by it */
    int rc = input_alloc(in, samples);
    if (rc)
        return rc;
    p->names = calloc(samples * nf, sizeof *p->names);
    if (!p->names)
        return sf_fail(-ENOMEM, "out of memory");
    /* How many samples have each field, and one of its files: for the
     * message when a sample lacks one (a field of one odd file says
     * "extra file there", not only "missing here"). */
    uint64_t have[SF_MAX_FIELDS] = {0};
    const char *example[SF_MAX_FIELDS] = {0};
    for (size_t k = 0; k < n; k++) {
        int f = field_pos(names, nf, e[k].field);
        have[f]++;
        example[f] = example[f] ? example[f] : e[k].name;
    }
    size_t s = 0, i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && strcmp(e[j].key, e[i].key) == 0)
            j++;
        if (!(in->keys[s] = strdup(e[i].key)))
            return sf_fail(-ENOMEM, "out of memory");
        for (size_t k = i; k < j; k++) {
            p->names[s * nf + (size_t)field_pos(names, nf, e[k].field)] = e[k].name;
            e[k].name = NULL;
        }
        for (uint32_t f = 0; f < nf; f++)
            if (!p->names[s * nf + f])
                return sf_fail(SF_E_INPUT,
                               "%s/%s_%s.npy: missing (sample '%s' has %s/%s but no '%s' file; "
                               "field '%s' is in %llu of the %zu samples, e.g. %s/%s: every sample "
                               "needs every field)",
                               p->dir, names[f], in->keys[s], in->keys[s], p->dir,
                               present_name(p, s), names[f], names[f], (unsigned long long)have[f],
                               samples, p->dir, example[f]);
        s++;
        i = j;
    }
    return 0;
}

/* The schema field implied by one .npy file. */
static void field_from_npy(sf_field *f, const char *name, const input_npy_info *info)
{
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->dtype = (uint8_t)info->dtype;
    f->ndim = (uint8_t)info->ndim;
    for (uint32_t d = 0; d < info->ndim; d++)
        f->shape[d] = info->shape[d];
    f->item_size = info->data_size;
    /* Small scalars (labels) live in the index so a reader has them all
     * after open, without a read per sample. */
    f->storage = info->data_size <= SF_MAX_INLINE_BYTES ? SF_STORAGE_INLINE : SF_STORAGE_FIXED;
}

static void npy_free(input_set *in)
{
    npy_priv *p = in->priv;
    if (!p)
        return;
    for (uint64_t i = 0; p->names && i < in->sample_count * p->field_count; i++)
        free(p->names[i]);
    free(p->names);
    free(p);
    in->priv = NULL;
}

typedef struct npy_cursor {
    uint8_t *scratch; /* non-native byte order or layout: converted from here */
    uint64_t scratch_cap;
} npy_cursor;

static int npy_cursor_open(const input_set *in, void **cursor)
{
    (void)in;
    *cursor = calloc(1, sizeof(npy_cursor));
    return *cursor ? 0 : sf_fail(-ENOMEM, "out of memory");
}

static void npy_cursor_close(void *cursor)
{
    npy_cursor *c = cursor;
    free(c->scratch);
    free(c);
}

static int npy_read(void *cursor, const input_set *in, uint64_t sample, uint32_t field, uint8_t *dst)
{
    npy_cursor *c = cursor;
    const npy_priv *p = in->priv;
    input_npy_file nf;
    int rc = input_npy_file_open(&nf, p->dir, p->names[sample * p->field_count + field]);
    if (rc)
        return rc;
    if ((rc = input_npy_file_check(&nf, &in->schema.fields[field], p->names[field])))
        rc = sf_fail_prefix(rc, "input changed while packing");
    else
        rc = input_npy_file_read(&nf, dst, &c->scratch, &c->scratch_cap);
    input_npy_file_close(&nf);
    return rc;
}

static int npy_discover(input_set *in, const char *dir)
{
    npy_priv *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    in->priv = p;
    p->dir = in->path;
    npy_entry *e = NULL;
    size_t n = 0;
    int rc = list_dir(in, dir, &e, &n);
    if (rc)
        return rc;
    qsort(e, n, sizeof *e, entry_cmp);
    char names[SF_MAX_FIELDS][SF_MAX_NAME + 1];
    rc = collect_fields(p->dir, e, n, names, &p->field_count);
    if (!rc)
        rc = group_samples(in, p, e, n, names);
    free_entries(e, n);
    if (rc)
        return rc;

    uint32_t nf = p->field_count;
    for (uint64_t s = 0; s < in->sample_count; s++) {
        for (uint32_t f = 0; f < nf; f++) {
            input_npy_file nf_;
            rc = input_npy_file_open(&nf_, dir, p->names[s * nf + f]);
            if (rc)
                return rc;
            input_npy_file_close(&nf_);
            if (s == 0) {
                /* The field is what this file holds: a field it cannot be
                 * (an empty dimension, too large) is this file's error. */
                field_from_npy(&in->schema.fields[f], names[f], &nf_.info);
                if ((rc = sf_field_check(&in->schema.fields[f])))
                    return sf_fail_prefix(rc, nf_.path);
            } else if ((rc = input_npy_file_check(&nf_, &in->schema.fields[f], p->names[f]))) {
                return rc;
            }
            in->sizes[s * nf + f] = nf_.info.data_size;
            in->bytes_in += nf_.info.data_size;
        }
        if (s == 0 && (rc = sf_schema_finish(&in->schema)))
            return sf_fail_prefix(rc, dir);
    }
    return 0;
}

/* ---- export: {field}_{key}.npy, C order, little-endian ---- */

/* The key's folders stay folders: img_a/b.npy for key "a/b". */
static size_t npy_export_name(char buf[INPUT_EXPORT_NAME_MAX], const input_layout *l, const char *key,
                              size_t klen, uint32_t field)
{
    const char *slash = memrchr(key, '/', klen);
    size_t dlen = slash ? (size_t)(slash - key) + 1 : 0;
    int n = snprintf(buf, INPUT_EXPORT_NAME_MAX, "%.*s%s_%.*s.npy", (int)dlen, key,
                     l->schema->fields[field].name, (int)(klen - dlen), key + dlen);
    assert(n > 0 && n < (int)INPUT_EXPORT_NAME_MAX);
    return (size_t)n;
}

/* The header numpy.save writes for the value. A variable-length field
 * exports as a 1-d array of its elements, bytes as uint8. */
static int npy_export_head(uint8_t *buf, size_t *len, const sf_field *f, uint64_t size)
{
    uint64_t var_shape[1] = {size / sf_dtype_size(f->dtype)};
    const uint64_t *shape = f->storage == SF_STORAGE_VARIABLE ? var_shape : f->shape;
    int dtype = f->dtype == SF_DTYPE_BYTES ? SF_DTYPE_UINT8 : f->dtype;
    *len = input_npy_write_header(buf, INPUT_EXPORT_HEAD_MAX, dtype, f->ndim, shape);
    if (*len == 0)
        return sf_fail(SF_E_UNSUPPORTED, "cannot describe field '%s' as .npy", f->name);
    return 0;
}

/* ---- the format ---- */

/* A folder holding a .npy file. */
static int npy_detect(const char *name, int is_dir)
{
    return !is_dir && input_ends_with(name, ".npy");
}

const input_format input_format_npy = {
    .name = "npy",
    .dir_hint = ".npy files",
    .dir_count = {".npy file", ".npy files"},
    .detect = npy_detect,
    .discover = npy_discover,
    .cursor_open = npy_cursor_open,
    .read = npy_read,
    .cursor_close = npy_cursor_close,
    .free = npy_free,
    .export = {.file_name = npy_export_name, .file_head = npy_export_head},
};
