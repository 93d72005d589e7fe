/* sf_verify: the reader's own checks (lib/format/shard_file.c), run over every
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

#include "value_codec.h"
#include "dataset_internal.h"
#include "error_internal.h"
#include "key_table.h"
#include "le.h"
#include "remote_list.h"
#include "remote_url.h"
#include "shard_file.h"
#include "shardfeed/dataset.h"
#include "shardfeed/params.h"

#define VERIFY_BUFFER (256u << 10) /* fits L2: the copy from the page cache is still cached when hashed */

/* A shard's keys, kept for the distinct-key check after the shards are
 * read: the key area of its index and where each key starts. */
typedef struct shard_keys {
    uint8_t *area;
    uint32_t *start;      /* record_count + 1 offsets into area */
    uint64_t area_offset; /* file offset of the key area */
} shard_keys;

typedef struct verify_run {
    const char *dir;
    int dirfd; /* a local dataset's folder, its shards opened in it; -1 */
    const char *shown; /* dir as messages name it: a URL without its password */
    sf_dataset *remote; /* a dataset at a URL: its shards come from the cache */
    const sf_manifest *m;
    shard_keys *keys; /* [shard]; area NULL for a shard that did not load */
    sf_verify_fn cb;
    void *ctx;
    int decompress;   /* also decompress every compressed value */
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

/* Damage in the files is a problem to report (exit 2: sf_is_data_error);
 * anything else (out of memory, an I/O error, a permission) means
 * verification could not run (exit 1): a dataset is never called corrupt
 * for the machine's sake. */
static void environment_error(verify_run *v, int rc, const char *file)
{
    pthread_mutex_lock(&v->lock);
    if (!v->io_error) {
        v->io_error = rc;
        snprintf(v->io_message, sizeof v->io_message, "%s/%s: %s", v->shown, file, sf_last_error());
    }
    pthread_mutex_unlock(&v->lock);
}

typedef struct scan_ctx {
    verify_run *v;
    const char *file;
    int64_t shard;
    uint8_t *bad; /* record_count bits: checksum failed (NULL: not kept) */
} scan_ctx;

static void on_scan_problem(void *arg, const sf_shard_problem *p)
{
    scan_ctx *c = arg;
    char msg[256];
    sf_shard_problem_text(msg, sizeof msg, p, &c->v->m->schema);
    if (p->kind == SF_PROBLEM_CHECKSUM && c->bad)
        c->bad[p->record / 8] |= (uint8_t)(1u << (p->record % 8));
    report(c->v, p->code, c->file, c->shard, p->record, p->offset, msg);
}

/* Buffers of decompress_shard, grown to the largest value seen. */
typedef struct grow_buf {
    uint8_t *p;
    uint64_t cap;
} grow_buf;

static int grow(grow_buf *b, uint64_t need)
{
    if (need <= b->cap)
        return 0;
    if (need > SIZE_MAX)
        return sf_fail(-ENOMEM, "out of memory");
    uint8_t *p = realloc(b->p, (size_t)need);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory for a %llu-byte value", (unsigned long long)need);
    b->p = p;
    b->cap = need;
    return 0;
}

/* verify --decompress: every compressed value of every record whose checksum
 * held (a failed one is reported already) must decompress exactly as SPEC.md
 * "Compression" says, with the reader's own code (codec.c). The stored bytes
 * hashing fine is not enough: a writer can checksum a bad frame. */
static void decompress_shard(verify_run *v, const sf_shard_meta *meta, int fd, const char *name,
                             int64_t shard, const uint8_t *bad)
{
    const sf_schema *s = &v->m->schema;
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    grow_buf in = {0}, out = {0};
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size;
    sf_index_entry e;
    int rc = dctx ? 0 : sf_fail(-ENOMEM, "out of memory");
    for (uint64_t r = 0; r < meta->header.record_count && !rc; r++) {
        if (bad && bad[r / 8] & (1u << (r % 8)))
            continue;
        sf_index_entry_decode(&e, s, meta->index + r * s->entry_size); /* checked at load */
        sf_record_layout(s, meta->header.align, e.var_len, off, len, &size);
        uint32_t k = 0;
        for (uint32_t f = 0; f < s->field_count && !rc; f++) {
            const sf_field *fld = &s->fields[f];
            if (fld->storage == SF_STORAGE_INLINE)
                continue;
            uint32_t pk = k++;
            if (fld->codec == SF_CODEC_NONE)
                continue;
            uint64_t at = e.offset + off[pk], need;
            if ((rc = grow(&in, len[pk])) || (rc = sf_pread_full(fd, in.p, len[pk], at)))
                break;
            int bad_value = sf_zstd_content_size(&need, fld, in.p, len[pk]);
            if (!bad_value && !(rc = grow(&out, need ? need : 1)))
                bad_value = sf_decompress_value(out.p, need, fld, in.p, len[pk], dctx);
            if (!bad_value && !rc)
                bad_value = sf_payload_value_check(s, pk, out.p, need);
            if (bad_value && !rc) {
                char msg[600];
                snprintf(msg, sizeof msg, "record %llu: %s", (unsigned long long)r, sf_last_error());
                report(v, SF_E_CORRUPT, name, shard, (int64_t)r, at, msg);
            }
        }
    }
    if (rc) {
        if (rc < 0 || !sf_is_data_error(rc))
            sf_fail(rc, "decompressing: %s", sf_strerror(rc));
        environment_error(v, rc, name);
    }
    free(in.p);
    free(out.p);
    ZSTD_freeDCtx(dctx);
}

/* Copies a loaded shard's keys for check_keys. */
static int keep_keys(shard_keys *k, const sf_shard_meta *meta, const sf_schema *s)
{
    uint64_t n = meta->header.record_count, entries = n * s->entry_size;
    uint64_t area = meta->header.index_size - entries; /* sf_index_check: the keys fill it */
    k->area = malloc(area ? area : 1);
    k->start = malloc((n + 1) * sizeof *k->start);
    if (!k->area || !k->start) {
        free(k->area);
        free(k->start);
        k->area = NULL;
        k->start = NULL;
        return sf_fail(-ENOMEM, "out of memory for the keys");
    }
    memcpy(k->area, meta->index + entries, area);
    for (uint64_t r = 0; r < n; r++)
        k->start[r] = sf_get_le32(meta->index + r * s->entry_size + 24); /* key_offset */
    k->start[n] = (uint32_t)area;
    k->area_offset = meta->header.index_offset + entries;
    return 0;
}

static uint64_t shard_of(const sf_manifest *m, uint64_t id)
{
    uint64_t lo = 0, hi = m->shard_count; /* first_record increases */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (m->shards[mid].first_record <= id)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void key_of_record(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    const verify_run *v = ctx;
    uint64_t i = shard_of(v->m, id), r = id - v->m->shards[i].first_record;
    const shard_keys *k = &v->keys[i];
    *key = k->area + k->start[r];
    *len = k->start[r + 1] - k->start[r];
}

/* SPEC.md "Schema": the records of a dataset have distinct keys. Every
 * record whose key repeats an earlier record's (in dataset order) is a
 * problem naming both. Shards that did not load were reported already. */
static void check_keys(verify_run *v)
{
    const sf_manifest *m = v->m;
    uint64_t loaded = 0; /* the table is sized by what was read, not by what the manifest claims */
    for (uint64_t i = 0; i < m->shard_count; i++)
        loaded += v->keys[i].area ? m->shards[i].record_count : 0;
    sf_key_table t;
    if (sf_key_table_init(&t, loaded, key_of_record, v) != 0) {
        environment_error(v, -ENOMEM, SF_MANIFEST_NAME);
        return;
    }
    for (uint64_t i = 0; i < m->shard_count; i++) {
        const shard_keys *k = &v->keys[i];
        for (uint64_t r = 0; k->area && r < m->shards[i].record_count; r++) {
            const uint8_t *key;
            size_t len;
            uint64_t id = m->shards[i].first_record + r, first;
            key_of_record(v, id, &key, &len);
            if (sf_key_table_add(&t, id, key, len, &first) == 0)
                continue;
            uint64_t fi = shard_of(m, first);
            char name[SF_SHARD_NAME_MAX], msg[600];
            snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
            snprintf(msg, sizeof msg,
                     "record %llu: key '%.*s' repeats the key of " SF_SHARD_NAME_FMT
                     " record %llu (keys are distinct)",
                     (unsigned long long)r, (int)len, (const char *)key, (unsigned)fi,
                     (unsigned long long)(first - m->shards[fi].first_record));
            report(v, SF_E_CORRUPT, name, (int64_t)i, (int64_t)r, k->area_offset + k->start[r], msg);
        }
    }
    sf_key_table_free(&t);
}

/* Closes what verify_shard opened; a URL's shard: removes its download. */
static void shard_close(int fd, const char *part)
{
    if (part[0])
        dataset_remote_drop(fd, part);
    else
        close(fd);
}

static void verify_shard(verify_run *v, uint64_t i, uint8_t *buf)
{
    const sf_manifest *m = v->m;
    char name[SF_SHARD_NAME_MAX];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
    int fd = -1;
    char part[4200] = ""; /* a URL's: the download's file, removed when done */
    if (v->remote) {
        int rc = dataset_remote_download(&fd, part, sizeof part, v->remote, i);
        if (rc) {
            if (sf_is_data_error(rc))
                report(v, rc, name, (int64_t)i, -1, 0, sf_last_error());
            else
                environment_error(v, rc, name);
            return;
        }
    } else if ((fd = openat(v->dirfd, name, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        if (e == ENOENT) {
            report(v, SF_E_CORRUPT, name, (int64_t)i, -1, 0, "shard file is missing");
        } else {
            sf_fail(-e, "cannot open: %s%s", strerror(e), sf_errno_hint(e));
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
        if (sf_is_data_error(rc))
            report(v, rc, name, (int64_t)i, -1, bad, sf_last_error());
        else
            environment_error(v, rc, name);
        shard_close(fd, part);
        return;
    }
    if (keep_keys(&v->keys[i], &meta, &m->schema) != 0)
        environment_error(v, -ENOMEM, name);
    int zfields = 0;
    for (uint32_t f = 0; f < m->schema.field_count; f++)
        zfields += m->schema.fields[f].codec != SF_CODEC_NONE;
    uint8_t *failed = NULL;
    if (v->decompress && zfields && !(failed = calloc(meta.header.record_count / 8 + 1, 1))) {
        sf_fail(-ENOMEM, "out of memory");
        environment_error(v, -ENOMEM, name);
    }
    scan_ctx c = {v, name, (int64_t)i, failed};
    int64_t n = sf_shard_scan_data(&meta, &m->schema, fd, buf, VERIFY_BUFFER, on_scan_problem, &c);
    if (n < 0)
        environment_error(v, (int)n, name);
    else if (failed)
        decompress_shard(v, &meta, fd, name, (int64_t)i, failed);
    free(failed);
    pthread_mutex_lock(&v->lock);
    v->records += meta.header.record_count;
    v->bytes += meta.file_size;
    pthread_mutex_unlock(&v->lock);
    sf_shard_meta_clear(&meta);
    shard_close(fd, part);
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

/* A shard-named file the manifest does not list is an error: a dataset is
 * exactly its manifest's shards. */
static void check_stray_name(verify_run *v, const char *name)
{
    int64_t n = sf_shard_name_index(name, strlen(name));
    if (n >= 0 && (uint64_t)n >= v->m->shard_count)
        report(v, SF_E_CORRUPT, name, -1, -1, 0, "shard file not listed in the manifest (extra shard)");
}

static void check_strays(verify_run *v)
{
    DIR *d = opendir(v->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        check_stray_name(v, de->d_name);
    closedir(d);
}

static int on_listed_object(void *ctx, const char *name, uint64_t size)
{
    (void)size;
    check_stray_name(ctx, name);
    return 0;
}

/* The same check over the objects directly under an s3:// dataset's prefix
 * (ListObjectsV2). A web server has no listing: nothing to check (the
 * command line says so). A listing the store refuses or that fails is an
 * environment error: verification could not check everything. */
static void check_strays_remote(verify_run *v)
{
    remote_location *loc = NULL;
    int rc = remote_location_open(&loc, v->dir);
    if (!rc && remote_location_kind(loc) == REMOTE_S3) {
        remote_policy policy = {SF_REMOTE_DEFAULT_RETRIES, SF_REMOTE_DEFAULT_TIMEOUT_MS};
        rc = remote_list(loc, &policy, on_listed_object, v);
    }
    remote_location_free(loc);
    if (rc) {
        pthread_mutex_lock(&v->lock);
        if (!v->io_error) {
            v->io_error = rc;
            snprintf(v->io_message, sizeof v->io_message, "checking for stray objects: %s", sf_last_error());
        }
        pthread_mutex_unlock(&v->lock);
    }
}

/* The manifest through the one loader open uses: a missing one means the
 * folder is not a dataset (exit 1), a damaged one is a problem (exit 2). */
static int load_manifest(sf_manifest *m, const char *dir, verify_run *v)
{
    int rc = sf_manifest_load(m, dir);
    if (rc == -ENOENT)
        return sf_fail(rc, "%s: not a dataset: no %s (or packing did not finish)", dir, SF_MANIFEST_NAME);
    if (sf_is_data_error(rc)) {
        /* The detail starts with the path, which the problem names. */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s: ", dir, SF_MANIFEST_NAME);
        const char *msg = sf_last_error();
        if (strncmp(msg, path, strlen(path)) == 0)
            msg += strlen(path);
        report(v, rc, SF_MANIFEST_NAME, -1, -1, 0, msg);
    }
    return rc;
}

/* A dataset at a URL: opened as the reader opens it (its manifest, every
 * shard's header, footer and index checked, the keys distinct: damage there
 * fails the open, reported as the one problem), then each shard is
 * downloaded whole (dataset_remote_download: checked on arrival, fetched
 * again when damaged on the way) and scanned like a local one. Not read
 * from the cache: a cached copy is what the store held when it was
 * downloaded (a byte flipped at the store since was reported OK). *m
 * becomes a copy of the dataset's manifest (freed with the dataset). */
static int open_remote(verify_run *v, sf_manifest *m)
{
    sf_dataset *ds;
    int rc = sf_dataset_open(&ds, v->dir);
    if (rc == 0) {
        v->remote = ds;
        *m = ds->manifest;
        return 0;
    }
    if (!sf_is_data_error(rc))
        return rc;
    if (v->cb) {
        sf_verify_problem p = {rc, SF_MANIFEST_NAME, -1, -1, 0, sf_last_error()};
        v->cb(v->ctx, &p);
    }
    return sf_fail(SF_E_CORRUPT, "%s: 1 problem(s) found", v->shown);
}

int sf_verify(sf_verify_summary *summary, const char *dir, unsigned jobs, sf_verify_fn cb, void *ctx)
{
    sf_verify_opts o = SF_VERIFY_OPTS_INIT;
    o.jobs = jobs;
    return sf_verify_ex(summary, dir, &o, cb, ctx);
}

int sf_verify_ex(sf_verify_summary *summary, const char *dir, const sf_verify_opts *opts,
                 sf_verify_fn cb, void *ctx)
{
    static const sf_verify_opts def = SF_VERIFY_OPTS_INIT;
    if (!opts)
        opts = &def;
    if (!dir)
        return sf_fail(SF_E_INVALID, "sf_verify: no directory");
    int vrc = sf_check_opts_version("sf_verify_opts", opts->version, SF_VERIFY_OPTS_VERSION);
    if (!vrc && opts->jobs)
        vrc = sf_check_param(SF_PARAM_VERIFY_JOBS, opts->jobs);
    if (vrc)
        return vrc;
    unsigned jobs = opts->jobs;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char shown[4200];
    if (sf_is_url(dir))
        remote_url_redact(shown, sizeof shown, dir);
    else
        snprintf(shown, sizeof shown, "%s", dir);
    verify_run v = {.dir = dir, .dirfd = -1, .shown = shown, .cb = cb, .ctx = ctx,
                    .decompress = opts->decompress};
    sf_manifest m;
    memset(&m, 0, sizeof m);
    int rc;
    if (sf_is_url(dir)) {
        if ((rc = open_remote(&v, &m)))
            return rc;
    } else {
        struct stat st;
        if (stat(dir, &st) != 0)
            return sf_fail(-errno, "%s: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return sf_fail(-ENOTDIR, "%s: not a folder (a dataset is a folder holding %s)", dir,
                           SF_MANIFEST_NAME);
        /* Shards are opened in the folder by name, as the reader opens them
         * (shard_files.c): "DIR/shard-NNNNNN.sfs" made with snprintf was
         * cut short for a DIR of 4079..4082 bytes, which the manifest's
         * check lets through, and another file was opened. */
        if ((v.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            return sf_fail(-errno, "%s: %s", dir, sf_errno_text(errno));
    }
    pthread_mutex_init(&v.lock, NULL);
    rc = v.remote ? 0 : load_manifest(&m, dir, &v);
    if (rc == 0 && !(v.keys = calloc(m.shard_count ? m.shard_count : 1, sizeof *v.keys)))
        rc = sf_fail(-ENOMEM, "out of memory");
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
        if (v.remote)
            check_strays_remote(&v);
        else
            check_strays(&v);
        if (!v.io_error)
            check_keys(&v);
    }
    for (uint64_t i = 0; v.keys && i < m.shard_count; i++) {
        free(v.keys[i].area);
        free(v.keys[i].start);
    }
    free(v.keys);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (summary) {
        summary->shards = m.shard_count;
        summary->records = v.records;
        summary->bytes = v.bytes;
        summary->problems = v.problems;
        summary->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    if (v.remote)
        sf_dataset_close(v.remote); /* m was its manifest */
    else
        sf_manifest_clear(&m);
    if (v.dirfd >= 0)
        close(v.dirfd);
    pthread_mutex_destroy(&v.lock);
    if (v.io_error)
        return sf_fail(v.io_error, "%s", v.io_message);
    if (v.problems)
        return sf_fail(SF_E_CORRUPT, "%s: %llu problem(s) found", v.shown, (unsigned long long)v.problems);
    if (rc < 0 && !sf_is_data_error(rc))
        return rc;
    return 0;
}
