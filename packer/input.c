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

#include "format/error_internal.h"
#include "format/hash.h"
#include "format/le.h"
#include "pack_internal.h"

const char *pack_strerror(int e)
{
    static _Thread_local char buf[320];
    snprintf(buf, sizeof buf, "%s%s", strerror(e), sf_errno_hint(e));
    return buf;
}

int pack_explain_fd_limit(int rc)
{
    if (!rc)
        return rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sf_last_error());
    if (strstr(msg, "ulimit -n") || strstr(msg, "fs.file-max"))
        return rc; /* said where it happened */
    /* strerror(EMFILE) is a prefix of strerror(ENFILE): test ENFILE first. */
    if (rc == -ENFILE || strstr(msg, strerror(ENFILE)))
        return sf_fail(rc, "%s%s", msg, sf_errno_hint(ENFILE));
    if (rc == -EMFILE || strstr(msg, strerror(EMFILE)))
        return sf_fail(rc, "%s%s", msg, sf_errno_hint(EMFILE));
    return rc;
}

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

int pack_open_input(const char *path, struct stat *st)
{
    /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait
     * forever; O_NOCTTY: a terminal never becomes ours. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return sf_fail(e == EMFILE || e == ENFILE || e == ENOMEM ? -e : SF_E_INPUT, "%s: cannot open: %s",
                       path, pack_strerror(e));
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

int pack_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

int pack_is_tar_name(const char *name)
{
    static const char *const ext[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (pack_ends_with(name, ext[i]))
            return 1;
    return 0;
}

static int is_list_name(const char *name)
{
    return pack_ends_with(name, ".csv") || pack_ends_with(name, ".tsv") || pack_ends_with(name, ".txt");
}

/* A directory's format from what it holds: .npy files, tar files, or class
 * folders (ImageFolder). */
static int detect_dir(const char **format, const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return sf_fail(SF_E_INPUT, "%s: cannot open: %s", path, pack_strerror(errno));
    int npy = 0, tar = 0, dirs = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode))
            dirs++;
        else if (pack_ends_with(de->d_name, ".npy"))
            npy++;
        else if (pack_is_tar_name(de->d_name))
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

char *pack_path_join(const char *a, const char *b)
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

int pack_input_open(pack_input *in, const char *path, const char *format)
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
        } else if (pack_is_tar_name(path)) {
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
        return pack_input_npy_dir(in, path);
    if (strcmp(format, "imagefolder") == 0)
        return pack_input_imagefolder(in, path);
    if (strcmp(format, "list") == 0)
        return pack_input_list(in, path);
    if (strcmp(format, "tar") == 0)
        return pack_input_tar(in, path);
    return sf_fail(SF_E_INVALID, "unknown input format '%s' (npy, imagefolder, list, tar, auto)", format);
}

int pack_input_alloc(pack_input *in, uint64_t n)
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

uint64_t pack_mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

void pack_input_note_file(pack_input *in, const char *name, uint64_t size, uint64_t mtime_ns)
{
    uint8_t num[16];
    sf_put_le64(num, size);
    sf_put_le64(num + 8, mtime_ns);
    /* A sum: the same for any order of discovery (readdir's order differs
     * between machines and file systems). */
    in->files_sum += XXH3_64bits_withSeed(name, strlen(name), sf_hash(num, sizeof num));
    in->file_count++;
}

uint64_t pack_input_files_hash(const pack_input *in)
{
    uint8_t buf[16];
    sf_put_le64(buf, in->files_sum);
    sf_put_le64(buf + 8, in->file_count);
    return sf_hash(buf, sizeof buf);
}

void pack_input_free(pack_input *in)
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

/* Appends one metadata entry (SPEC.md "Metadata"); NULL out: just counts. */
static uint32_t put_entry(uint8_t *out, const char *key, const uint8_t *val, uint32_t vlen)
{
    uint32_t klen = (uint32_t)strlen(key);
    if (out) {
        sf_put_le32(out, klen);
        sf_put_le32(out + 4, vlen);
        memcpy(out + 8, key, klen);
        if (vlen)
            memcpy(out + 8 + klen, val, vlen);
    }
    return 8 + klen + vlen;
}

static uint32_t class_names_value(uint8_t *out, const pack_input *in)
{
    uint32_t pos = 0;
    for (uint32_t c = 0; c < in->class_count; c++) {
        uint32_t len = (uint32_t)strlen(in->class_names[c]);
        if (out) {
            sf_put_le32(out + pos, len);
            memcpy(out + pos + 4, in->class_names[c], len);
        }
        pos += 4 + len;
    }
    return pos;
}

int pack_metadata_encode(uint8_t **out, uint32_t *size, const pack_input *in,
                         const pack_part_info *part)
{
    uint8_t partval[SF_PART_INFO_SIZE], inputval[SF_PART_INPUT_SIZE];
    if (part && part->count) {
        sf_put_le64(inputval, part->files_hash);
        sf_put_le64(inputval + 8, part->values_hash);
        sf_put_le32(partval, part->index);
        sf_put_le32(partval + 4, part->count);
        sf_put_le64(partval + 8, part->whole_dataset_id);
        sf_put_le64(partval + 16, part->whole_records);
        sf_put_le64(partval + 24, part->whole_shards);
        sf_put_le64(partval + 32, part->first_record);
        sf_put_le64(partval + 40, part->first_shard);
    }
    uint64_t classes = class_names_value(NULL, in);
    if (classes > SF_MAX_METADATA / 2)
        return sf_fail(SF_E_LIMIT, "%s: class names take %llu bytes (limit %u)", in->path,
                       (unsigned long long)classes, SF_MAX_METADATA / 2);
    const char *source = in->ops->name;
    uint32_t total = put_entry(NULL, "source", NULL, (uint32_t)strlen(source));
    if (in->class_count)
        total += put_entry(NULL, "class_names", NULL, (uint32_t)classes);
    if (part && part->count)
        total += put_entry(NULL, "part", NULL, sizeof partval) +
                 put_entry(NULL, "part_input", NULL, sizeof inputval);
    uint8_t *buf = malloc(total), *p = buf;
    if (!buf)
        return sf_fail(-ENOMEM, "out of memory");
    p += put_entry(p, "source", (const uint8_t *)source, (uint32_t)strlen(source));
    if (in->class_count) {
        uint8_t *val = malloc(classes ? classes : 1);
        if (!val) {
            free(buf);
            return sf_fail(-ENOMEM, "out of memory");
        }
        class_names_value(val, in);
        p += put_entry(p, "class_names", val, (uint32_t)classes);
        free(val);
    }
    if (part && part->count) {
        p += put_entry(p, "part", partval, sizeof partval);
        p += put_entry(p, "part_input", inputval, sizeof inputval);
    }
    *out = buf;
    *size = total;
    return 0;
}
