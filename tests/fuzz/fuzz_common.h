/* Helpers shared by the fuzz targets in tests/fuzz/. Header-only so that each
 * target stays one .c file plus this header, built either with libFuzzer
 * (-fsanitize=fuzzer) or with replay_main.c (any compiler).
 *
 * FUZZ_CHECK aborts: an abort is what libFuzzer and the replay driver report
 * as a finding, with the message on stderr. */
#ifndef SF_TESTS_FUZZ_COMMON_H
#define SF_TESTS_FUZZ_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Little-endian helpers independent of the library's (so an oracle does not
 * share code with what it checks). */
static inline uint64_t fz_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint32_t fz_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void fz_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A per-process scratch directory: /dev/shm when available (fsync is free
 * there, and the packer fsyncs every shard), else $TMPDIR or /tmp. Removed,
 * with its files (one level of subdirectories), at exit. */
static char fz_root[512];

static inline void fz_rm_tree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[4096];
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            struct stat st;
            if (depth > 0 && lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                fz_rm_tree(p, depth - 1);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline void fz_cleanup(void)
{
    if (fz_root[0])
        fz_rm_tree(fz_root, 3);
}

static inline const char *fz_tmp_root(void)
{
    if (fz_root[0])
        return fz_root;
    const char *base = getenv("SF_FUZZ_TMP");
    struct stat st;
    if (!base || !*base)
        base = (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
                   ? "/dev/shm"
                   : (getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(fz_root, sizeof fz_root, "%s/sf-fuzz-XXXXXX", base);
    if (!mkdtemp(fz_root)) {
        fprintf(stderr, "mkdtemp %s: %s\n", fz_root, strerror(errno));
        abort();
    }
    atexit(fz_cleanup);
    return fz_root;
}

/* Creates (if needed) and empties fz_root/name; returns its path in `out`. */
static inline void fz_fresh_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fz_tmp_root(), name);
    fz_rm_tree(out, 2);
    if (mkdir(out, 0755) != 0) {
        fprintf(stderr, "mkdir %s: %s\n", out, strerror(errno));
        abort();
    }
}

static inline void fz_write_file(const char *dir, const char *name, const void *buf, size_t len)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "create %s: %s\n", p, strerror(errno));
        abort();
    }
    const uint8_t *b = buf;
    while (len) {
        ssize_t n = write(fd, b, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "write %s: %s\n", p, strerror(errno));
            abort();
        }
        b += n;
        len -= (size_t)n;
    }
    close(fd);
}

/* Reads a whole file (malloc'd, caller frees); NULL if it cannot. */
static inline uint8_t *fz_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return buf;
}

/* An independent statement of what an accepted key must be: a relative path
 * that stays inside the directory it is joined to (no NUL, no leading '/',
 * no empty, "." or ".." component). */
static inline int fuzz_key_stays_inside(const char *key, size_t len)
{
    if (len == 0 || key[0] == '/' || memchr(key, '\0', len) != NULL)
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && key[i] != '/')
            continue;
        size_t c = i - start;
        if (c == 0 || (c == 1 && key[start] == '.') ||
            (c == 2 && key[start] == '.' && key[start + 1] == '.'))
            return 0;
        start = i + 1;
    }
    return 1;
}

#endif
