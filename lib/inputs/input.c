/* The table of input formats: finding one by name, detecting the format of
 * an input path, and the life of an input_set. What the formats themselves
 * share is input_util.c. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error_internal.h"
#include "input_util.h"

#define INPUT_FORMAT_ENTRY(name) &input_format_##name,
static const input_format *const formats[] = {INPUT_FORMAT_LIST(INPUT_FORMAT_ENTRY)};
#define FORMAT_COUNT (sizeof formats / sizeof formats[0])

const input_format *input_format_find(const char *name)
{
    for (size_t i = 0; i < FORMAT_COUNT; i++)
        if (strcmp(formats[i]->name, name) == 0)
            return formats[i];
    return NULL;
}

/* "A, B or C": the folder hints (dir) or the file hints of the formats. */
static void join_hints(char *buf, size_t cap, int dir)
{
    const char *hint[FORMAT_COUNT];
    size_t n = 0, used = 0;
    for (size_t i = 0; i < FORMAT_COUNT; i++)
        if ((hint[n] = dir ? formats[i]->dir_hint : formats[i]->file_hint) != NULL)
            n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " or ",
                                 hint[i]);
}

/* 1 when folder entry `de` is a folder (symlinks followed). */
static int entry_is_dir(DIR *d, const struct dirent *de)
{
    if (de->d_type != DT_UNKNOWN && de->d_type != DT_LNK)
        return de->d_type == DT_DIR;
    struct stat st;
    return fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

/* The entries of a folder that mark one format as its own. */
typedef struct dir_marks {
    uint64_t count;
    char first[256]; /* the first name in bytewise order, for messages */
} dir_marks;

/* Counts, for each format with a dir_hint, the entries of the folder it
 * marks; with `confirm`, only those its detect_confirm (if any) keeps. */
static int count_marks(dir_marks *m, DIR *d, const char *path, int confirm)
{
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        int is_dir = entry_is_dir(d, de);
        for (size_t i = 0; i < FORMAT_COUNT; i++) {
            const input_format *f = formats[i];
            if (!f->dir_hint || !f->detect(n, is_dir) ||
                (confirm && f->detect_confirm && !f->detect_confirm(dirfd(d), n)))
                continue;
            if (m[i].count++ == 0 || strcmp(n, m[i].first) < 0)
                snprintf(m[i].first, sizeof m[i].first, "%s", n);
        }
        errno = 0;
    }
    if (errno)
        return sf_fail(SF_E_INPUT, "%s: reading folder: %s", path, sf_errno_text(errno));
    return 0;
}

/* "tar (1 tar file: 'x.tar') and imagefolder (2 class folders with
 * images, e.g. 'cat')", and "--input-format tar or --input-format
 * imagefolder", for the formats marked. */
static int refuse_ambiguous(const char *path, const dir_marks *m, size_t marked)
{
    char what[2048], names[512];
    size_t used = 0, nused = 0, k = 0;
    what[0] = names[0] = '\0';
    for (size_t i = 0; i < FORMAT_COUNT; i++) {
        if (!m[i].count)
            continue;
        const char *sep = k == 0 ? "" : k + 1 < marked ? ", " : " and ";
        const char *nsep = k == 0 ? "" : k + 1 < marked ? ", " : " or ";
        k++;
        if (used < sizeof what)
            used += (size_t)snprintf(what + used, sizeof what - used, "%s%s (%llu %s%s'%s')", sep,
                                     formats[i]->name, (unsigned long long)m[i].count,
                                     formats[i]->dir_count[m[i].count > 1], m[i].count > 1 ? ", e.g. " : ": ",
                                     m[i].first);
        if (nused < sizeof names)
            nused += (size_t)snprintf(names + nused, sizeof names - nused, "%s--input-format %s", nsep,
                                      formats[i]->name);
    }
    return sf_fail(SF_E_INPUT,
                   "%s: this folder holds the inputs of more than one format: %s; cannot tell which one to "
                   "pack: name it with %s",
                   path, what, names);
}

/* A folder's format: the one format that some entry of the folder marks
 * as its own. Entries of several formats are refused, naming them: picking
 * one would drop the other's samples without a word. */
static int detect_dir(const input_format **out, const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open: %s", path, sf_errno_text(errno));
    dir_marks m[FORMAT_COUNT];
    memset(m, 0, sizeof m);
    int rc = count_marks(m, d, path, 0);
    size_t marked = 0, confirmable = 0;
    for (size_t i = 0; i < FORMAT_COUNT; i++) {
        marked += m[i].count > 0;
        confirmable += m[i].count > 0 && formats[i]->detect_confirm;
    }
    /* Several formats: the closer look of the ones that have one. */
    if (!rc && marked > 1 && confirmable) {
        memset(m, 0, sizeof m);
        rewinddir(d);
        rc = count_marks(m, d, path, 1);
        marked = 0;
        for (size_t i = 0; i < FORMAT_COUNT; i++)
            marked += m[i].count > 0;
    }
    closedir(d);
    if (rc)
        return rc;
    if (marked > 1)
        return refuse_ambiguous(path, m, marked);
    for (size_t i = 0; i < FORMAT_COUNT; i++) {
        if (m[i].count) {
            *out = formats[i];
            return 0;
        }
    }
    char hints[512];
    join_hints(hints, sizeof hints, 1);
    return sf_fail(SF_E_INPUT, "%s: no %s: cannot tell the input format (name it: the input_format option)", path,
                   hints);
}

static int detect(const input_format **out, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return sf_fail(SF_E_INPUT, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return detect_dir(out, path);
    for (size_t i = 0; i < FORMAT_COUNT; i++) {
        if (formats[i]->file_hint && formats[i]->detect(path, 0)) {
            *out = formats[i];
            return 0;
        }
    }
    char hints[512];
    join_hints(hints, sizeof hints, 0);
    return sf_fail(SF_E_INPUT,
                   "%s: cannot tell the input format from the name (a directory, %s; name it: the input_format option)",
                   path, hints);
}

static int unknown_format(const char *name)
{
    char names[256];
    size_t used = 0;
    for (size_t i = 0; i < FORMAT_COUNT && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s, ", formats[i]->name);
    return sf_fail(SF_E_INVALID, "unknown input format '%s' (%sauto)", name, names);
}

int input_open(input_set *in, const char *path, const char *format)
{
    int rc = input_set_init(in, path, NULL);
    if (rc)
        return rc;
    const input_format *f = NULL;
    if (!format || strcmp(format, "auto") == 0)
        rc = detect(&f, path);
    else if (!(f = input_format_find(format)))
        rc = unknown_format(format);
    if (rc)
        return rc;
    in->ops = f;
    return f->discover(in, path);
}

void input_value_source(char *buf, size_t cap, const input_set *in, uint64_t sample, uint32_t field)
{
    if (in->ops->value_source)
        in->ops->value_source(buf, cap, in, sample, field);
    else
        snprintf(buf, cap, "%s: sample '%s', field '%s'", in->path, in->keys[sample],
                 in->schema.fields[field].name);
}

void input_free(input_set *in)
{
    if (!in)
        return;
    if (in->ops && in->ops->free)
        in->ops->free(in);
    for (uint64_t s = 0; in->keys && s < in->sample_count; s++)
        free(in->keys[s]);
    for (uint32_t c = 0; in->class_names && c < in->class_count; c++)
        free(in->class_names[c]);
    free(in->class_names);
    free(in->keys);
    free(in->sizes);
    free(in->path);
    memset(in, 0, sizeof *in);
}
