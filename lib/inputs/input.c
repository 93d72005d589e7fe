/* The table of input formats: finding one by name, detecting the format of
 * an input path, and the life of an input_set. What the formats themselves
 * share is input_util.c. */
#include <dirent.h>
#include <errno.h>
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

/* A folder's format: the first format (in table order) that some entry of
 * the folder marks as its own. Stops reading at an entry of the first. */
static int detect_dir(const input_format **out, const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open: %s", path, sf_errno_text(errno));
    size_t best = FORMAT_COUNT;
    struct dirent *de;
    while (best > 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        struct stat st;
        int is_dir = fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        for (size_t i = 0; i < best; i++)
            if (formats[i]->dir_hint && formats[i]->detect(de->d_name, is_dir))
                best = i;
    }
    closedir(d);
    if (best == FORMAT_COUNT) {
        char hints[512];
        join_hints(hints, sizeof hints, 1);
        return sf_fail(SF_E_INPUT, "%s: no %s: cannot tell the input format (name it: the input_format option)", path,
                       hints);
    }
    *out = formats[best];
    return 0;
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
