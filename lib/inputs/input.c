/* What every input format shares: choosing the format of an input path,
 * the sample tables, and the manifest metadata the packer writes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "hash.h"
#include "le.h"
#include "input.h"

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "of another kind";
}

int input_open_file(const char *path, struct stat *st)
{
    /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait
     * forever; O_NOCTTY: a terminal never becomes ours. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return sf_fail(e == EMFILE || e == ENFILE || e == ENOMEM ? -e : SF_E_INPUT, "%s: cannot open: %s",
                       path, sf_errno_text(e));
    }
    int rc = 0;
    if (fstat(fd, st) != 0)
        rc = sf_fail(SF_E_INPUT, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode))
        rc = sf_fail(SF_E_INPUT, "%s: %s, not a regular file: refusing to read it", path,
                     file_kind(st->st_mode));
    else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            rc = sf_fail(-errno, "%s: fcntl: %s", path, strerror(errno));
    }
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int input_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

int input_is_tar_name(const char *name)
{
    static const char *const ext[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (input_ends_with(name, ext[i]))
            return 1;
    return 0;
}

static int is_list_name(const char *name)
{
    return input_ends_with(name, ".csv") || input_ends_with(name, ".tsv") || input_ends_with(name, ".txt");
}

/* A directory's format from what it holds: .npy files, tar files, or class
 * folders (ImageFolder). */
static int detect_dir(const char **format, const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open: %s", path, sf_errno_text(errno));
    int npy = 0, tar = 0, dirs = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode))
            dirs++;
        else if (input_ends_with(de->d_name, ".npy"))
            npy++;
        else if (input_is_tar_name(de->d_name))
            tar++;
    }
    closedir(d);
    if (npy)
        *format = "npy";
    else if (tar)
        *format = "tar";
    else if (dirs)
        *format = "imagefolder";
    else
        return sf_fail(SF_E_INPUT,
                       "%s: no .npy files, tar files or class folders: cannot tell the input format "
                       "(see --input-format)",
                       path);
    return 0;
}

char *input_path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (s) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

int input_open(input_set *in, const char *path, const char *format)
{
    memset(in, 0, sizeof *in);
    for (uint32_t f = 0; f < SF_MAX_FIELDS; f++)
        in->schema.var_slot[f] = in->schema.inline_slot[f] = -1;
    if (!(in->path = strdup(path)))
        return sf_fail(-ENOMEM, "out of memory");
    if (!format || strcmp(format, "auto") == 0) {
        struct stat st;
        if (stat(path, &st) != 0)
            return sf_fail(SF_E_INPUT, "%s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            int rc = detect_dir(&format, path);
            if (rc)
                return rc;
        } else if (input_is_tar_name(path)) {
            format = "tar";
        } else if (is_list_name(path)) {
            format = "list";
        } else {
            return sf_fail(SF_E_INPUT,
                           "%s: cannot tell the input format from the name (a directory, a .tar or a "
                           ".csv/.tsv list; see --input-format)",
                           path);
        }
    }
    if (strcmp(format, "npy") == 0)
        return input_discover_npy(in, path);
    if (strcmp(format, "imagefolder") == 0)
        return input_discover_imagefolder(in, path);
    if (strcmp(format, "list") == 0)
        return input_discover_list(in, path);
    if (strcmp(format, "tar") == 0)
        return input_discover_tar(in, path);
    return sf_fail(SF_E_INVALID, "unknown input format '%s' (npy, imagefolder, list, tar, auto)", format);
}

int input_alloc(input_set *in, uint64_t n)
{
    if (n > SF_MAX_RECORDS)
        return sf_fail(SF_E_LIMIT, "%s: %llu samples (limit %llu)", in->path, (unsigned long long)n,
                       (unsigned long long)SF_MAX_RECORDS);
    uint32_t nf = in->schema.field_count ? in->schema.field_count : 1;
    in->keys = calloc(n ? n : 1, sizeof *in->keys);
    in->sizes = calloc(n ? n * nf : 1, sizeof *in->sizes);
    if (!in->keys || !in->sizes)
        return sf_fail(-ENOMEM, "out of memory for %llu samples", (unsigned long long)n);
    in->sample_count = n;
    return 0;
}

uint64_t input_mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

void input_note_file(input_set *in, const char *name, uint64_t size, uint64_t mtime_ns)
{
    uint8_t num[16];
    sf_put_le64(num, size);
    sf_put_le64(num + 8, mtime_ns);
    /* A sum: the same for any order of discovery (readdir's order differs
     * between machines and file systems). */
    in->files_sum += XXH3_64bits_withSeed(name, strlen(name), sf_hash(num, sizeof num));
    in->file_count++;
}

uint64_t input_files_hash(const input_set *in)
{
    uint8_t buf[16];
    sf_put_le64(buf, in->files_sum);
    sf_put_le64(buf + 8, in->file_count);
    return sf_hash(buf, sizeof buf);
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
