/* sf_verify: the reader's own checks (format/shard_file.c), run over every
 * byte of every file, reporting every problem instead of stopping at the
 * first. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/error_internal.h"
#include "format/shard_file.h"
#include "shardfeed/dataset.h"

#define VERIFY_BUFFER (256u << 10) /* fits L2: the copy from the page cache is still cached when hashed */

typedef struct verify_run {
    const char *dir;
    const sf_manifest *m;
    sf_verify_fn cb;
    void *ctx;
    pthread_mutex_t lock; /* serialises callbacks and counters */
    _Atomic uint64_t next;
    uint64_t problems, records, bytes;
    int io_error;
    char io_message[1024];
} verify_run;

static void report(verify_run *v, int code, const char *file, int64_t shard, int64_t record,
                   uint64_t offset, const char *message)
{
    pthread_mutex_lock(&v->lock);
    v->problems++;
    if (v->cb) {
        sf_verify_problem p = {code, file, shard, record, offset, message};
        v->cb(v->ctx, &p);
    }
    pthread_mutex_unlock(&v->lock);
}

/* Damage in the files is a problem to report (exit 2); anything else (out
 * of memory, an I/O error, a permission) means verification could not run
 * (exit 1): a dataset is never called corrupt for the machine's sake. */
static int is_format_error(int rc)
{
    return rc <= SF_E_BASE && rc >= SF_E_LAST;
}

static void environment_error(verify_run *v, int rc, const char *file)
{
    pthread_mutex_lock(&v->lock);
    if (!v->io_error) {
        v->io_error = rc;
        snprintf(v->io_message, sizeof v->io_message, "%s/%s: %s", v->dir, file, sf_last_error());
    }
    pthread_mutex_unlock(&v->lock);
}

typedef struct scan_ctx {
    verify_run *v;
    const char *file;
    int64_t shard;
} scan_ctx;

static void on_scan_problem(void *arg, const sf_shard_problem *p)
{
    scan_ctx *c = arg;
    char msg[256];
    if (p->code == SF_E_CHECKSUM)
        snprintf(msg, sizeof msg, "record %lld: checksum mismatch in its payload at bytes %llu..",
                 (long long)p->record, (unsigned long long)p->offset);
    else if (p->record >= 0)
        snprintf(msg, sizeof msg, "record %lld: padding between fields is not zero at byte %llu",
                 (long long)p->record, (unsigned long long)p->offset);
    else
        snprintf(msg, sizeof msg, "padding is not zero at byte %llu", (unsigned long long)p->offset);
    report(c->v, p->code, c->file, c->shard, p->record, p->offset, msg);
}

static void verify_shard(verify_run *v, uint64_t i, uint8_t *buf)
{
    const sf_manifest *m = v->m;
    char name[SF_SHARD_NAME_MAX], path[4096];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
    snprintf(path, sizeof path, "%s/%s", v->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) {
            report(v, SF_E_CORRUPT, name, (int64_t)i, -1, 0, "shard file is missing");
        } else {
            sf_fail(-e, "cannot open: %s", strerror(e));
            environment_error(v, -e, name);
        }
        return;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    sf_shard_expect exp = {&m->schema, i, m->dataset_id, m->align, &m->shards[i]};
    sf_shard_meta meta;
    uint64_t bad = 0;
    int rc = sf_shard_load_meta(&meta, fd, &exp, &bad);
    if (rc) {
        if (is_format_error(rc))
            report(v, rc, name, (int64_t)i, -1, bad, sf_last_error());
        else
            environment_error(v, rc, name);
        close(fd);
        return;
    }
    scan_ctx c = {v, name, (int64_t)i};
    int64_t n = sf_shard_scan_data(&meta, &m->schema, fd, buf, VERIFY_BUFFER, on_scan_problem, &c);
    if (n < 0)
        environment_error(v, (int)n, name);
    pthread_mutex_lock(&v->lock);
    v->records += meta.header.record_count;
    v->bytes += meta.file_size;
    pthread_mutex_unlock(&v->lock);
    sf_shard_meta_clear(&meta);
    close(fd);
}

static void *verify_worker(void *arg)
{
    verify_run *v = arg;
    uint8_t *buf = malloc(VERIFY_BUFFER);
    if (!buf) {
        pthread_mutex_lock(&v->lock);
        v->io_error = -ENOMEM;
        snprintf(v->io_message, sizeof v->io_message, "out of memory");
        pthread_mutex_unlock(&v->lock);
        return NULL;
    }
    for (;;) {
        uint64_t i = atomic_fetch_add(&v->next, 1);
        if (i >= v->m->shard_count)
            break;
        verify_shard(v, i, buf);
    }
    free(buf);
    return NULL;
}

/* Shard-named files the manifest does not list are an error: a dataset is
 * exactly its manifest's shards. */
static void check_strays(verify_run *v)
{
    DIR *d = opendir(v->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned n;
        int end = 0;
        if (sscanf(de->d_name, "shard-%6u.sfs%n", &n, &end) == 1 && de->d_name[end] == '\0' &&
            n >= v->m->shard_count)
            report(v, SF_E_CORRUPT, de->d_name, -1, -1, 0,
                   "shard file not listed in the manifest (extra shard)");
    }
    closedir(d);
}

static int load_manifest(sf_manifest *m, const char *dir, verify_run *v)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, SF_MANIFEST_NAME);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            report(v, SF_E_CORRUPT, SF_MANIFEST_NAME, -1, -1, 0,
                   "manifest is missing (not a dataset, or packing did not finish)");
            return SF_E_CORRUPT;
        }
        return sf_fail(-errno, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    uint8_t *buf = NULL;
    if (!rc && (uint64_t)st.st_size > SF_MANIFEST_MAX_SIZE) {
        rc = SF_E_LIMIT;
        report(v, rc, SF_MANIFEST_NAME, -1, -1, 0, "larger than any valid manifest");
    } else if (!rc && !(buf = malloc((size_t)st.st_size + 1))) {
        rc = sf_fail(-ENOMEM, "out of memory");
    } else if (!rc && (rc = sf_pread_full(fd, buf, (uint64_t)st.st_size, 0))) {
        rc = sf_fail(rc, "%s: %s", path, sf_strerror(rc));
    } else if (!rc && (rc = sf_manifest_decode(m, buf, (uint64_t)st.st_size))) {
        report(v, rc, SF_MANIFEST_NAME, -1, -1, 0, sf_last_error());
    }
    free(buf);
    close(fd);
    return rc;
}

int sf_verify(sf_verify_summary *summary, const char *dir, unsigned jobs, sf_verify_fn cb, void *ctx)
{
    if (!dir)
        return sf_fail(SF_E_INVALID, "sf_verify: no directory");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sf_fail(-ENOTDIR, "%s: not a directory", dir);
    verify_run v = {.dir = dir, .cb = cb, .ctx = ctx};
    pthread_mutex_init(&v.lock, NULL);
    sf_manifest m;
    memset(&m, 0, sizeof m);
    int rc = load_manifest(&m, dir, &v);
    if (rc == 0) {
        v.m = &m;
        if (jobs == 0) {
            long n = sysconf(_SC_NPROCESSORS_ONLN);
            jobs = n > 0 ? (unsigned)n : 1;
        }
        if (jobs > m.shard_count)
            jobs = m.shard_count ? (unsigned)m.shard_count : 1;
        pthread_t *t = calloc(jobs, sizeof *t);
        unsigned started = 0;
        if (t)
            for (; started < jobs; started++)
                if (pthread_create(&t[started], NULL, verify_worker, &v) != 0)
                    break;
        if (started == 0)
            verify_worker(&v); /* no threads available: do it here */
        for (unsigned i = 0; i < started; i++)
            pthread_join(t[i], NULL);
        free(t);
        check_strays(&v);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (summary) {
        summary->shards = m.shard_count;
        summary->records = v.records;
        summary->bytes = v.bytes;
        summary->problems = v.problems;
        summary->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    sf_manifest_clear(&m);
    pthread_mutex_destroy(&v.lock);
    if (v.io_error)
        return sf_fail(v.io_error, "%s", v.io_message);
    if (v.problems)
        return sf_fail(SF_E_CORRUPT, "%s: %llu problem(s) found", dir, (unsigned long long)v.problems);
    if (rc < 0 && rc != SF_E_CORRUPT)
        return rc;
    return 0;
}
