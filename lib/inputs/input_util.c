/* What the input formats share (input_util.h). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "hash.h"
#include "le.h"
#include "input_util.h"

int input_set_init(input_set *in, const char *path, const input_format *format)
{
    memset(in, 0, sizeof *in);
    for (uint32_t f = 0; f < SF_MAX_FIELDS; f++)
        in->schema.var_slot[f] = in->schema.inline_slot[f] = -1;
    in->ops = format;
    if (!(in->path = strdup(path)))
        return sf_fail(-ENOMEM, "out of memory");
    return 0;
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

int input_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
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

uint64_t input_mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

void input_note_file(input_set *in, const char *name, uint64_t size, uint64_t mtime_ns)
{
    uint8_t num[16];
    size_t len = strlen(name);
    sf_put_le64(num, size);
    sf_put_le64(num + 8, mtime_ns);
    /* Sums: the same for any order of discovery (readdir's order differs
     * between machines and file systems). */
    in->files_sum += XXH3_64bits_withSeed(name, len, sf_hash(num, sizeof num));
    in->sizes_sum += XXH3_64bits_withSeed(name, len, sf_hash(num, 8));
    in->names_sum += sf_hash(name, len);
    in->file_count++;
}

static uint64_t sum_hash(uint64_t sum, uint64_t count)
{
    uint8_t buf[16];
    sf_put_le64(buf, sum);
    sf_put_le64(buf + 8, count);
    return sf_hash(buf, sizeof buf);
}

void input_files_hashes(const input_set *in, uint64_t *files, uint64_t *sizes, uint64_t *names)
{
    *files = sum_hash(in->files_sum, in->file_count);
    *sizes = sum_hash(in->sizes_sum, in->file_count);
    *names = sum_hash(in->names_sum, in->file_count);
}

int input_data_file_layout(input_layout *l)
{
    for (uint32_t f = 0; f < l->schema->field_count; f++) {
        const sf_field *fd = &l->schema->fields[f];
        if (fd->storage == SF_STORAGE_VARIABLE && fd->dtype == SF_DTYPE_BYTES) {
            l->data_field = (int)f;
            return 0;
        }
    }
    return 1;
}

size_t input_data_file_name(char buf[INPUT_EXPORT_NAME_MAX], const input_layout *l, const char *key,
                            size_t klen, uint32_t field)
{
    if ((int)field != l->data_field)
        return 0;
    int n = snprintf(buf, INPUT_EXPORT_NAME_MAX, "%.*s", (int)klen, key);
    assert(n > 0 && n < (int)INPUT_EXPORT_NAME_MAX);
    return (size_t)n;
}

int input_no_cursor_open(const input_set *in, void **cursor)
{
    (void)in;
    *cursor = NULL;
    return 0;
}

void input_no_cursor_close(void *cursor)
{
    (void)cursor;
}
