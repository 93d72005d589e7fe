/* A dataset at a URL (dataset_internal.h, "Datasets at a URL"): its
 * manifest and shard metadata by range requests, its shards through the
 * node's cache (lib/remote/cache.h) or its records by range requests. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "dataset_internal.h"
#include "download_check.h"
#include "error_internal.h"
#include "fetch.h"
#include "hash.h"
#include "nofile.h"
#include "remote_url.h"

/* Open reads a shard's header with one request and its tail (footer, and
 * the index when it is at most this long) with another. */
#define META_TAIL (64u << 10)
/* Shards the prefetcher downloads at once at most, each on its own thread
 * and connections (one at a time, a shard's download waited for the one
 * before it, each paying its round trips and its fsync). An object store
 * serves each connection at a rate of its own (AWS's S3 guidelines plan one
 * request per 85-90 MB/s), so a node gets its link's rate only from many: 4
 * at once, a cold epoch of the small remote set (13 shards of 4 MB) from
 * nginx serving each connection at 20 MiB/s took 0.65 s where curl fetching
 * the same files 16 at once took 0.23 s (tools/bench/run, the remote set's
 * "20 MiB/s a connection" rows). A download holds its .part, its .fill lock
 * and a connection or more, so at most a 32nd of RLIMIT_NOFILE, and at least
 * 4 (4 under `ulimit -n 128`, as before there were more). */
#define PREFETCH_THREADS_MIN 4u
#define PREFETCH_THREADS_MAX 16u
/* The prefetcher keeps at most this many shards, and half the cache limit,
 * downloaded ahead of the one being read: as many as it may download at
 * once (x->threads, fewer under a low RLIMIT_NOFILE), so that a global
 * shuffle's first batch, which needs every shard, finds up to that many
 * under way together. */
#define PREFETCH_SHARDS PREFETCH_THREADS_MAX
/* Shards of the reader's plan (dataset_remote_plan) kept ahead at most. */
#define PLAN_CAP 64u

struct dataset_remote {
    remote_location *loc;
    remote_pool *pool;
    remote_policy policy;
    int mode;               /* enum sf_remote_mode */
    remote_cache *cache;    /* mode cache */
    uint64_t cache_limit;
    uint64_t manifest_hash; /* XXH3-64 of the manifest's bytes: names the cache subfolder */
    /* the prefetcher: `threads` threads fill the cache from `next`
     * while it is within reach of `reading` (positions in shard order,
     * wrapping); a shard is taken (next moves past it) when a thread starts
     * its download, so no two threads take the same one */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pthread_t tid[PREFETCH_THREADS_MAX];
    unsigned threads; /* at most this many (PREFETCH_THREADS_MIN..MAX) */
    unsigned running; /* threads started */
    int stop;
    uint64_t reading, next;
    _Atomic uint64_t last_hint;
    /* the reader's plan: the shards in the order its schedule first touches
     * them (a ring, oldest at plan_head); plan_done[i]: taken by a prefetch
     * thread (downloading or done).
     * Once a reader planned, the prefetcher follows the plan only. */
    uint64_t plan[PLAN_CAP];
    uint8_t plan_done[PLAN_CAP];
    uint32_t plan_head;
    /* changed under lock; read without it by the hints of a reader whose
     * shards are all held (dataset_remote_plan, dataset_remote_reading) */
    _Atomic uint32_t plan_len;
    _Atomic int planned; /* a reader plans: its plan run dry is no cue for shard order */
    /* shards this dataset is downloading now (fill_shard), by any thread */
    atomic_uint downloading;
    /* per shard: the ETag its object had when open read its metadata
     * (malloc'd; NULL: the store sent none). Mode direct reads each record
     * with If-Match on it: an object replaced by another of the same size
     * (which the size check passes) fails the read, HTTP 412, where with
     * checksums off its records were read from the new object unnoticed. */
    char **etags;
    /* shards whose download failed as their object is not the one open saw
     * (remote_fetcher_replaced: 404, 412, another size), under lock: asked
     * for again, they fail the same way at once. Without this a shard
     * changed at the store was downloaded by the prefetcher and then by each
     * I/O thread reading it, 3 downloads to report one error, each
     * refused. Rare, so a list. */
    struct replaced_shard {
        uint64_t shard;
        int rc;
        char *msg;
    } *replaced;
    uint64_t replaced_n;
};

int sf_is_url(const char *path)
{
    return path && remote_is_url(path);
}

const char *sf_url_shown(char *out, size_t cap, const char *path)
{
    if (!cap)
        return out;
    if (sf_is_url(path))
        remote_url_redact(out, cap, path);
    else
        snprintf(out, cap, "%s", path ? path : "(null)");
    return out;
}

/* ---- options ---- */

/* $SHARDFEED_CACHE_LIMIT: bytes, in decimal, with a unit as --cache-limit
 * takes them (K/KiB, M/MiB, G/GiB, T/TiB: powers of 1024). 0 when unset;
 * SF_E_INVALID naming it when it is anything else (it read "2MiB", "1e5"
 * as unset, so the 16 GiB default, and "-1" as 2^64 - 1, without a word). */
static int env_cache_limit(uint64_t *out)
{
    static const char name[] = "SHARDFEED_CACHE_LIMIT";
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},   {"B", 0},   {"K", 10},  {"KiB", 10}, {"M", 20},
                 {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40}};
    *out = 0;
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    uint64_t x = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - 9) / 10)
            goto bad;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    if (p == v)
        goto bad;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(p, units[i].suffix)) {
            if (x == 0 || x > UINT64_MAX >> units[i].shift)
                goto bad;
            *out = x << units[i].shift;
            return 0;
        }
bad:
    return sf_fail(SF_E_INVALID,
                   "$%s='%.40s': expected a size in bytes, e.g. 536870912 or 512MiB (units K, M, G, "
                   "T or KiB, MiB, GiB, TiB)",
                   name, v);
}

/* $name as an integer in [lo, hi] into *out (unchanged when unset):
 * SF_E_INVALID naming it when it is anything else. */
static int env_u32(uint32_t *out, const char *name, uint32_t lo, uint32_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    uint64_t x = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9' && x <= hi; p++)
        x = x * 10 + (uint64_t)(*p - '0');
    if (p == v || *p || x < lo || x > hi)
        return sf_fail(SF_E_INVALID, "$%s='%.40s': expected a whole number from %u to %u", name, v,
                       lo, hi);
    *out = (uint32_t)x;
    return 0;
}

/* opts->cache_dir, else the environment's choice (remote.h). */
static int cache_root(char *out, size_t cap, const sf_remote_opts *o)
{
    const char *v;
    int n;
    if (o && o->cache_dir && *o->cache_dir)
        n = snprintf(out, cap, "%s", o->cache_dir);
    else if ((v = getenv("SHARDFEED_CACHE_DIR")) && *v)
        n = snprintf(out, cap, "%s", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        n = snprintf(out, cap, "%s/shardfeed", v);
    else if ((v = getenv("HOME")) && *v)
        n = snprintf(out, cap, "%s/.cache/shardfeed", v);
    else
        return sf_fail(SF_E_INVALID, "no cache folder: set cache_dir (or SHARDFEED_CACHE_DIR, "
                                     "XDG_CACHE_HOME, HOME)");
    return n > 0 && (size_t)n < cap ? 0 : sf_fail(SF_E_INVALID, "cache folder path too long");
}

int dataset_remote_opts_check(const sf_remote_opts *o)
{
    if (!o)
        return 0;
    int rc = sf_check_opts_version("sf_remote_opts", o->version, SF_REMOTE_OPTS_VERSION);
    if (!rc && o->mode != SF_REMOTE_CACHE && o->mode != SF_REMOTE_DIRECT)
        rc = sf_fail(SF_E_INVALID, "remote mode %d: expected cache (0) or direct (1)", o->mode);
    /* Counted in 32 bits with the first attempt: UINT32_MAX would wrap and
     * retry for ever (push caps its retries alike). */
    if (!rc && o->retries > SF_REMOTE_MAX_RETRIES)
        rc = sf_fail(SF_E_INVALID, "remote retries %u: at most %u", o->retries,
                     SF_REMOTE_MAX_RETRIES);
    return rc;
}

/* ---- open ---- */

/* Runs fn(ds, arg) again while it fails for the bytes it fetched
 * (sf_is_data_error), up to 1 + retries runs: bytes damaged on the way are
 * fetched again; bytes stored damaged fail every time, and the error stands
 * as it would for a local file. (A proxy may damage the same byte of two
 * responses alike, so even identical damage twice proves nothing.) */
typedef int (*fetch_fn)(sf_dataset *ds, void *arg);

static int refetch_damaged(sf_dataset *ds, fetch_fn fn, void *arg)
{
    for (uint32_t attempt = 0;; attempt++) {
        int rc = fn(ds, arg);
        if (rc == 0 || !sf_is_data_error(rc) || attempt >= ds->remote->policy.retries)
            return rc;
    }
}

static int fetch_manifest_once(sf_dataset *ds, void *arg)
{
    const char *url = arg;
    sf_manifest_clear(&ds->manifest);
    memset(&ds->manifest, 0, sizeof ds->manifest);
    remote_fetcher *f;
    int rc = remote_pool_take(&f, ds->remote->pool);
    if (rc)
        return rc;
    uint8_t *buf = NULL;
    uint64_t len = 0;
    rc = remote_fetch_object(f, SF_MANIFEST_NAME, SF_MANIFEST_MAX_SIZE, &buf, &len);
    remote_pool_give(ds->remote->pool, f);
    if (rc == -ENOENT)
        return sf_fail(rc, "%s/%s: no manifest (HTTP 404: not a dataset, or packing or upload "
                           "did not finish)",
                       url, SF_MANIFEST_NAME);
    if (rc == SF_E_LIMIT)
        return sf_fail(rc, "%s/%s: larger than any valid manifest", url, SF_MANIFEST_NAME);
    if (rc)
        return rc;
    rc = sf_manifest_decode(&ds->manifest, buf, len);
    ds->remote->manifest_hash = sf_hash(buf, len);
    free(buf);
    if (rc) {
        char where[4200];
        snprintf(where, sizeof where, "%s/%s", url, SF_MANIFEST_NAME);
        sf_fail_prefix(rc, where);
    }
    return rc;
}

static int fetch_manifest(sf_dataset *ds, const char *url)
{
    return refetch_damaged(ds, fetch_manifest_once, (void *)url);
}

/* The cache's subfolder for this dataset: the URL's hash and the manifest's.
 * The manifest holds every shard's header and index checksums (and the
 * index every record's), so a dataset packed again at the same URL with
 * any byte of content changed never meets the old shards. (The dataset id
 * named it before; it comes from keys and sizes, not content, so a
 * re-pack with a sample's bytes changed reused the stale shards, which are
 * opened from the cache with no check against this manifest.) */
static int open_cache(sf_dataset *ds, const sf_remote_opts *o)
{
    dataset_remote *x = ds->remote;
    char root[4096], space[64];
    int rc = cache_root(root, sizeof root, o);
    if (rc)
        return rc;
    const char *url = remote_location_display(x->loc);
    snprintf(space, sizeof space, "%016llx-%016llx", (unsigned long long)sf_hash(url, strlen(url)),
             (unsigned long long)x->manifest_hash);
    return remote_cache_open(&x->cache, root, x->cache_limit, space);
}

int dataset_remote_open(sf_dataset *ds, const char *url, const sf_remote_opts *o)
{
    dataset_remote *x = calloc(1, sizeof *x);
    if (!x)
        return sf_fail(-ENOMEM, "out of memory");
    ds->remote = x;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->last_hint = UINT64_MAX;
    x->threads = (unsigned)sf_nofile_share(32, PREFETCH_THREADS_MIN, PREFETCH_THREADS_MAX);
    x->mode = o ? o->mode : SF_REMOTE_CACHE;
    x->policy.retries = o && o->retries ? o->retries : SF_REMOTE_DEFAULT_RETRIES;
    x->policy.timeout_ms = o && o->timeout_ms ? o->timeout_ms : SF_REMOTE_DEFAULT_TIMEOUT_MS;
    int rc;
    /* Python and the command line give neither: a dead or trickling server
     * cost 7 attempts of 30 s with no way to shorten them. */
    if ((!o || !o->retries) &&
        (rc = env_u32(&x->policy.retries, "SHARDFEED_REMOTE_RETRIES", 0, SF_REMOTE_MAX_RETRIES)))
        return rc;
    if ((!o || !o->timeout_ms) &&
        (rc = env_u32(&x->policy.timeout_ms, "SHARDFEED_REMOTE_TIMEOUT_MS", 100, 3600000)))
        return rc;
    x->cache_limit = o ? o->cache_limit : 0;
    if (!x->cache_limit && (rc = env_cache_limit(&x->cache_limit)))
        return rc;
    if (!x->cache_limit)
        x->cache_limit = SF_REMOTE_DEFAULT_CACHE_LIMIT;
    if ((rc = remote_location_open(&x->loc, url)) ||
        (rc = remote_pool_open(&x->pool, x->loc, &x->policy)) || (rc = fetch_manifest(ds, remote_location_display(x->loc))))
        return rc;
    uint64_t shards = ds->manifest.shard_count;
    if (!(x->etags = calloc(shards ? shards : 1, sizeof *x->etags)))
        return sf_fail(-ENOMEM, "out of memory");
    /* verify reads every shard whole through the cache, in either mode. */
    return open_cache(ds, o);
}

static void prefetch_stop(dataset_remote *x)
{
    pthread_mutex_lock(&x->lock);
    x->stop = 1;
    pthread_cond_broadcast(&x->cv);
    unsigned running = x->running;
    pthread_mutex_unlock(&x->lock);
    for (unsigned t = 0; t < running; t++)
        pthread_join(x->tid[t], NULL);
    x->running = 0;
}

void dataset_remote_close(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    if (!x)
        return;
    prefetch_stop(x);
    remote_cache_free(x->cache);
    remote_pool_free(x->pool);
    remote_location_free(x->loc);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->lock);
    for (uint64_t i = 0; x->etags && i < ds->manifest.shard_count; i++)
        free(x->etags[i]);
    free(x->etags);
    for (uint64_t i = 0; i < x->replaced_n; i++)
        free(x->replaced[i].msg);
    free(x->replaced);
    free(x);
    ds->remote = NULL;
}

uint64_t dataset_remote_cache_limit(const sf_dataset *ds)
{
    return ds->remote ? ds->remote->cache_limit : 0;
}

int dataset_remote_direct(const sf_dataset *ds)
{
    return ds->remote && ds->remote->mode == SF_REMOTE_DIRECT;
}

/* ---- shard metadata by ranges ---- */

typedef struct meta_source {
    remote_fetcher *f;
    const char *name;
    uint64_t size;
    uint8_t *tail;          /* the last tail_len bytes, once fetched */
    uint64_t tail_off, tail_len;
    char etag[REMOTE_ETAG_MAX + 1]; /* the first reply's: the later ones must match it */
    char failed[1024];      /* a request's error (URL, range, why), kept whole */
} meta_source;

/* A range of the shard, refused when the store's object is not m->size
 * bytes. A failure's detail is kept: the format layer names a failed read
 * only by its code ("reading the header: remote error"). */
static int meta_fetch(meta_source *m, void *buf, uint64_t off, uint64_t len)
{
    remote_fetcher_if_match(m->f, m->etag); /* a header and a footer of one object */
    int rc = remote_fetch_range_sized(m->f, m->name, m->size, off, len, buf);
    remote_fetcher_if_match(m->f, NULL);
    if (!rc && !m->etag[0])
        snprintf(m->etag, sizeof m->etag, "%s", remote_fetcher_etag(m->f));
    if (rc == SF_E_REMOTE)
        snprintf(m->failed, sizeof m->failed, "%s", sf_last_error());
    return rc;
}

static int meta_read(void *ctx, void *buf, uint64_t len, uint64_t off)
{
    meta_source *m = ctx;
    if (off > m->size || len > m->size - off)
        return sf_fail(SF_E_TRUNCATED, "bytes %llu..%llu are past the end of the %llu-byte shard",
                       (unsigned long long)off, (unsigned long long)(off + len),
                       (unsigned long long)m->size);
    if (!m->tail && off >= SF_SHARD_HEADER_SIZE && off + len == m->size) {
        /* The footer: fetch the tail, which holds a small index too. */
        uint64_t from = m->size - SF_SHARD_HEADER_SIZE > META_TAIL ? m->size - META_TAIL
                                                                  : SF_SHARD_HEADER_SIZE;
        if (from > off)
            from = off;
        m->tail_off = from;
        m->tail_len = m->size - from;
        if (!(m->tail = malloc(m->tail_len)))
            return sf_fail(-ENOMEM, "out of memory");
        int rc = meta_fetch(m, m->tail, m->tail_off, m->tail_len);
        if (rc) {
            free(m->tail);
            m->tail = NULL;
            return rc;
        }
    }
    if (m->tail && off >= m->tail_off && len <= m->tail_len - (off - m->tail_off)) {
        memcpy(buf, m->tail + (off - m->tail_off), len);
        return 0;
    }
    return meta_fetch(m, buf, off, len);
}

typedef struct meta_job {
    uint64_t i;
    const sf_shard_expect *exp;
    uint64_t *bad;
} meta_job;

static int load_meta_once(sf_dataset *ds, void *arg)
{
    meta_job *j = arg;
    uint64_t i = j->i;
    const sf_shard_expect *exp = j->exp;
    uint64_t *bad = j->bad;
    sf_shard_meta_clear(&ds->shards[i].meta);
    remote_fetcher *f;
    int rc = remote_pool_take(&f, ds->remote->pool);
    if (rc)
        return rc;
    meta_source m = {.f = f, .name = ds->shards[i].name,
                     .size = ds->manifest.shards[i].file_size};
    rc = sf_shard_load_meta_from(&ds->shards[i].meta, m.size, meta_read, &m, exp, bad);
    if (rc == SF_E_REMOTE && m.failed[0])
        rc = sf_fail(rc, "%s", m.failed);
    free(ds->remote->etags[i]); /* an earlier round's (refetch_damaged) */
    ds->remote->etags[i] = NULL;
    if (!rc && m.etag[0] && !(ds->remote->etags[i] = strdup(m.etag)))
        rc = sf_fail(-ENOMEM, "out of memory");
    free(m.tail);
    remote_pool_give(ds->remote->pool, f);
    return rc;
}

int dataset_remote_load_meta(sf_dataset *ds, uint64_t i, uint64_t *bad)
{
    const sf_manifest *m = &ds->manifest;
    sf_shard_expect exp = {&m->schema, i, m->dataset_id, m->align, &m->shards[i]};
    meta_job j = {i, &exp, bad};
    return refetch_damaged(ds, load_meta_once, &j);
}

/* ---- the cache ---- */

/* The failure a download of `shard` met as its object is not open's
 * (raised again in this thread), or 0. */
static int replaced_failure(dataset_remote *x, uint64_t shard)
{
    int rc = 0;
    pthread_mutex_lock(&x->lock);
    for (uint64_t i = 0; i < x->replaced_n && !rc; i++)
        if (x->replaced[i].shard == shard)
            rc = sf_fail(x->replaced[i].rc, "%s", x->replaced[i].msg);
    pthread_mutex_unlock(&x->lock);
    return rc;
}

/* Notes that a download of `shard` failed with rc (sf_last_error has the
 * detail) as its object is not open's. Out of memory: not noted (the next
 * download asks the store again). */
static void note_replaced(dataset_remote *x, uint64_t shard, int rc)
{
    char *msg = strdup(sf_last_error());
    pthread_mutex_lock(&x->lock);
    struct replaced_shard *more =
        msg ? realloc(x->replaced, (x->replaced_n + 1) * sizeof *x->replaced) : NULL;
    if (more) {
        x->replaced = more;
        x->replaced[x->replaced_n++] = (struct replaced_shard){shard, rc, msg};
        msg = NULL;
    }
    pthread_mutex_unlock(&x->lock);
    free(msg);
}

typedef struct fill_job {
    sf_dataset *ds;
    uint64_t shard;
} fill_job;

/* Downloads the shard (in up to `parts` ranges at once) and checks all of
 * it, its records' checksums too, as the bytes arrive (download_check.h).
 * A download that fails its checks is
 * fetched again, up to 1 + retries times: damage on the way comes and
 * goes. A shard whose every download shows the same damaged records (stored
 * so) is kept: the reader's record checks then judge each record, as for a
 * local shard (on_corrupt). */
static int fill_shard_parts(void *arg, int fd, uint64_t size, unsigned parts)
{
    fill_job *j = arg;
    sf_dataset *ds = j->ds;
    dataset_remote *x = ds->remote;
    const sf_manifest *mf = &ds->manifest;
    const char *name = ds->shards[j->shard].name;
    sf_shard_expect exp = {&mf->schema, j->shard, mf->dataset_id, mf->align, &mf->shards[j->shard]};
    download_check check;
    download_check_init(&check, &ds->shards[j->shard].meta, &mf->schema);
    int64_t first = 0;
    download_damage first_damage = {0};
    int alike = 1, rc = replaced_failure(x, j->shard);
    for (uint32_t attempt = 0; !rc; attempt++) {
        download_check_reset(&check);
        int replaced = 0;
        if ((rc = remote_pool_fetch_to_fd(x->pool, name, size, x->etags[j->shard], fd, parts,
                                          &check.watch, &replaced))) {
            if (replaced)
                note_replaced(x, j->shard, rc);
            break;
        }
        download_damage d;
        int64_t found = download_check_finish(&check, fd, &exp, &d);
        if (found == 0)
            break;
        if (found < 0 && !sf_is_data_error((int)found)) {
            rc = (int)found; /* the machine's trouble, not the bytes' */
            break;
        }
        if (attempt == 0) {
            first = found;
            first_damage = d;
        }
        alike &= found == first && d.bad_offset == first_damage.bad_offset &&
                 d.digest == first_damage.digest;
        if (attempt < x->policy.retries)
            continue;
        if (found > 0 && alike) {
            rc = 0; /* stored so */
        } else if (found > 0) {
            rc = sf_fail(SF_E_CHECKSUM,
                         "%s/%s: %u downloads of the shard failed their record checksums, "
                         "not alike (bytes damaged on the way)",
                         ds->dir, name, attempt + 1);
        } else {
            char where[4200];
            snprintf(where, sizeof where, "%s/%s (downloaded %u times)", ds->dir, name,
                     attempt + 1);
            rc = sf_fail_prefix((int)found, where);
        }
        break;
    }
    download_check_free(&check);
    return rc;
}

/* remote_fill_fn. A large shard downloaded alone comes in REMOTE_PARTS
 * ranges at once; with other downloads running, in REMOTE_PARTS divided by
 * their number (at least one). Ranges of one file are written under its
 * inode's lock one at a time: on tools/bench/run's remote-large set (13
 * shards of 94 MB, 4 prefetch threads) a cold epoch with 4 ranges a shard
 * spent 11% of its CPU time spinning on that lock and took 1.25 s (median
 * of 5 rounds), with one range a shard 1.00 s (curl fetching the same files
 * 16 at once to /dev/null: 0.61 s). Sharing 16 connections instead (4
 * ranges each while up to 4 run) took a cold epoch of that set 1.47 s
 * against 1.24 s on 2 cores (6 rounds each, 2026-12-04); more shards at
 * once, not more ranges each, is what a store's per-connection rate
 * needs. */
static int fill_shard(void *arg, int fd, uint64_t size)
{
    fill_job *j = arg;
    dataset_remote *x = j->ds->remote;
    unsigned running = atomic_fetch_add(&x->downloading, 1) + 1;
    unsigned parts = REMOTE_PARTS / running ? REMOTE_PARTS / running : 1;
    int rc = fill_shard_parts(arg, fd, size, parts);
    atomic_fetch_sub(&x->downloading, 1);
    return rc;
}

/* Downloads `shard` if the cache lacks it; `nowait`: give up at once when
 * the cache has no room (the prefetcher does not wait for the reader). */
static int ensure_shard(sf_dataset *ds, uint64_t shard, int nowait)
{
    fill_job j = {ds, shard};
    return remote_cache_prefetch(ds->remote->cache, ds->shards[shard].name,
                                 ds->manifest.shards[shard].file_size, nowait, fill_shard, &j);
}

int dataset_remote_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct, int nowait)
{
    fill_job j = {ds, shard};
    return (nowait ? remote_cache_try_acquire : remote_cache_acquire)(
        out, ds->remote->cache, ds->shards[shard].name, ds->manifest.shards[shard].file_size,
        direct ? O_DIRECT : 0, fill_shard, &j);
}

int dataset_remote_download(int *out, char *part, size_t part_cap, sf_dataset *ds,
                            uint64_t shard)
{
    fill_job j = {ds, shard};
    return remote_cache_download_private(out, part, part_cap, ds->remote->cache,
                                         ds->shards[shard].name,
                                         ds->manifest.shards[shard].file_size, fill_shard, &j);
}

void dataset_remote_drop(int fd, const char *part)
{
    remote_cache_drop(fd, part);
}

void dataset_remote_damaged_copy(char *out, size_t cap, sf_dataset *ds, uint64_t shard)
{
    if (!cap)
        return;
    out[0] = 0;
    dataset_remote *x = ds->remote;
    if (!x || x->mode != SF_REMOTE_CACHE || !x->cache)
        return;
    const char *name = ds->shards[shard].name;
    const char *dir = remote_cache_dir(x->cache);
    /* Only the file read (the one this dataset holds): the name may be a
     * good copy downloaded since, by another process or after an eviction. */
    struct stat st;
    int held = dataset_files_cached_stat(ds, shard, &st) == 0;
    int rc = held ? remote_cache_remove(x->cache, name, &st) : 0;
    if (!held)
        snprintf(out, cap, " (read from the cache's copy %s/%s: remove it to download it again)",
                 dir, name);
    else if (rc == 1)
        snprintf(out, cap, " (read from the cache's copy %s/%s, now removed: the next open of "
                           "the shard downloads it again; `shardfeed verify URL` checks the "
                           "store's)", dir, name);
    else if (rc == 0) /* gone already, or another copy (downloaded since): left alone */
        snprintf(out, cap, " (read from a copy of the cache's %s/%s no longer under that name: "
                           "the next open of the shard reads what is there now)", dir, name);
    else
        snprintf(out, cap, " (read from the cache's copy %s/%s, which could not be removed: %s)",
                 dir, name, sf_last_error());
}

int dataset_remote_fd(int *out, sf_dataset *ds, uint64_t shard, int direct)
{
    return remote_cache_acquire_cached(out, ds->remote->cache, ds->shards[shard].name,
                                       ds->manifest.shards[shard].file_size,
                                       direct ? O_DIRECT : 0);
}

void dataset_remote_unpin(int fd)
{
    remote_cache_unpin(fd);
}

/* ---- the prefetcher ---- */

/* Under x->lock: the next shard to fill, or UINT64_MAX when the reach (half
 * the cache limit, PREFETCH_SHARDS shards) is full. */
static uint64_t shard_order_next_locked(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    uint64_t n = ds->manifest.shard_count, ahead = 0, count = 0;
    for (uint64_t p = (x->reading + 1) % n; p != x->next % n; p = (p + 1) % n) {
        ahead += ds->manifest.shards[p].file_size;
        if (++count >= n)
            return UINT64_MAX;
    }
    uint64_t s = x->next % n;
    if (s == x->reading || count >= PREFETCH_SHARDS ||
        ahead + ds->manifest.shards[s].file_size > x->cache_limit / 2)
        return UINT64_MAX;
    return s;
}

/* Under x->lock: the first shard of the plan not yet taken, or UINT64_MAX
 * when there is none or the reach (PREFETCH_SHARDS, half the cache limit of
 * shards taken and not yet read) is full. */
static uint64_t plan_next_locked(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    uint64_t ahead = 0, count = 0;
    for (uint32_t k = 0; k < x->plan_len; k++) {
        uint32_t i = (x->plan_head + k) % PLAN_CAP;
        uint64_t size = ds->manifest.shards[x->plan[i]].file_size;
        if (!x->plan_done[i])
            return count < PREFETCH_SHARDS && ahead + size <= x->cache_limit / 2 ? x->plan[i]
                                                                                : UINT64_MAX;
        ahead += size;
        count++;
    }
    return UINT64_MAX;
}

static uint64_t prefetch_next_locked(sf_dataset *ds)
{
    return ds->remote->planned ? plan_next_locked(ds) : shard_order_next_locked(ds);
}

/* Under x->lock: the next shard to prefetch, taken (no other thread takes
 * it), or UINT64_MAX when the reach is full. A failed download is the
 * reader's to meet. */
static uint64_t prefetch_take_locked(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    uint64_t s = prefetch_next_locked(ds);
    if (s == UINT64_MAX)
        return s;
    if (!x->planned) {
        x->next = s + 1;
        return s;
    }
    for (uint32_t k = 0; k < x->plan_len; k++) {
        uint32_t i = (x->plan_head + k) % PLAN_CAP;
        if (x->plan[i] == s)
            x->plan_done[i] = 1;
    }
    return s;
}

static void *prefetch_main(void *arg);

/* Under x->lock: starts the prefetch threads not yet running. */
static void prefetch_start_locked(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    while (!x->stop && x->running < x->threads &&
           pthread_create(&x->tid[x->running], NULL, prefetch_main, ds) == 0)
        x->running++;
}

/* Under x->lock: the reader reached `shard`: it leaves the plan (passed;
 * nothing evicts for its sake now), and only it. Under a global shuffle
 * the I/O threads reach a batch's shards in any order: when a read also
 * passed every shard planned before it, the first read of a shard planned
 * late dropped the others, and the prefetcher either never took them (a
 * cold epoch of the small remote set, 13 shards of 4 MB, then fetched them
 * one or two at a time as the readers came to them: 129 ms where curl
 * fetching them all at once took 45 ms) or, for those it had taken, stopped
 * counting them in its reach and ran ahead, evicting them before they were
 * read where the cache limit is tight. Every planned shard is read after it
 * is planned (the schedule plans a batch before its reads), and a read
 * after a plan takes the lock (dataset_remote_plan resets last_hint), so
 * each entry is passed by the read it was planned for. 1 when `shard` was
 * there (the reach has room again), else 0. */
static int plan_pass_locked(dataset_remote *x, uint64_t shard)
{
    uint32_t k = 0;
    while (k < x->plan_len && x->plan[(x->plan_head + k) % PLAN_CAP] != shard)
        k++;
    if (k == x->plan_len)
        return 0;
    /* The entries before it move up one, into its place. */
    for (uint32_t i = k; i > 0; i--) {
        uint32_t to = (x->plan_head + i) % PLAN_CAP, from = (x->plan_head + i - 1) % PLAN_CAP;
        x->plan[to] = x->plan[from];
        x->plan_done[to] = x->plan_done[from];
    }
    x->plan_head = (x->plan_head + 1) % PLAN_CAP;
    x->plan_len--;
    return 1;
}

uint64_t dataset_remote_plan_reach(const sf_dataset *ds)
{
    const dataset_remote *x = ds->remote;
    return x && x->cache && x->mode == SF_REMOTE_CACHE ? PREFETCH_SHARDS : 0;
}

int dataset_remote_plan(sf_dataset *ds, uint64_t shard, int ahead)
{
    dataset_remote *x = ds->remote;
    if (!x || !x->cache || x->mode != SF_REMOTE_CACHE)
        return 1;
    assert(shard < ds->manifest.shard_count);
    /* A shard this dataset holds is in the cache and stays there: nothing to
     * prefetch, and a plan of it would only wake the prefetch threads and
     * make every read of it a pass under the lock. Warm, a global shuffle
     * over 13 cached shards planned and passed a shard at nearly every
     * record: 0.032 s an epoch of 60,000 small records against 0.014 s from
     * the same shards in a local folder. A hint: a held shard that is let
     * go before the reader gets to it is downloaded then, if evicted. */
    if (atomic_load_explicit(&x->planned, memory_order_relaxed) && dataset_files_held(ds, shard))
        return 1;
    pthread_mutex_lock(&x->lock);
    x->planned = 1;
    int known = 0;
    uint64_t bytes = ds->manifest.shards[shard].file_size;
    for (uint32_t k = 0; k < x->plan_len && !known; k++) {
        known = x->plan[(x->plan_head + k) % PLAN_CAP] == shard;
        bytes += ds->manifest.shards[x->plan[(x->plan_head + k) % PLAN_CAP]].file_size;
    }
    /* Looking ahead, the plan stays within a quarter of the limit: the
     * cache evicts the least recently used, and a shard downloaded far
     * ahead of its read is older than those read since, so under a tight
     * limit it went first and was downloaded again (a block shuffle over
     * 100 shards with the limit at a quarter of them: 124-138 downloads
     * with the plan up to the prefetcher's whole reach, 115 before). */
    int room = known || (x->plan_len < PLAN_CAP && (!ahead || bytes <= x->cache_limit / 4));
    if (!known && room) {
        uint32_t i = (x->plan_head + x->plan_len++) % PLAN_CAP;
        x->plan[i] = shard;
        x->plan_done[i] = 0;
        /* The next read of any shard takes the lock: one of `shard` while
         * last_hint still named it would not pass it (plan_pass_locked). */
        atomic_store(&x->last_hint, UINT64_MAX);
        prefetch_start_locked(ds);
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->lock);
    return room;
}

void dataset_remote_plan_reset(sf_dataset *ds)
{
    dataset_remote *x = ds->remote;
    if (!x || !x->cache || x->mode != SF_REMOTE_CACHE)
        return;
    /* Left there, the entries planned for the batches the reader left were
     * never passed (plan_pass_locked), so they filled the prefetcher's reach
     * (PREFETCH_SHARDS of them taken) or the plan (PLAN_CAP), and the
     * prefetcher stopped: each shard from then on was the reader's own
     * download, one at a time. */
    pthread_mutex_lock(&x->lock);
    x->plan_head = 0;
    x->plan_len = 0;
    atomic_store(&x->last_hint, UINT64_MAX);
    pthread_mutex_unlock(&x->lock);
}

static void *prefetch_main(void *arg)
{
    sf_dataset *ds = arg;
    dataset_remote *x = ds->remote;
    pthread_setname_np(pthread_self(), "sf-prefetch");
    pthread_mutex_lock(&x->lock);
    while (!x->stop) {
        uint64_t s = prefetch_take_locked(ds);
        if (s == UINT64_MAX) {
            pthread_cond_wait(&x->cv, &x->lock);
            continue;
        }
        pthread_mutex_unlock(&x->lock);
        /* A failure is the reader's to meet and report when it gets there.
         * A shard this dataset holds pinned is there: checking it in the
         * cache (open, lock, stat, touch, close) was 900 rounds an epoch of
         * a global shuffle over 13 cached shards, which the plan names again
         * batch after batch. */
        if (!dataset_files_cache_pinned(ds, s))
            ensure_shard(ds, s, 1);
        pthread_mutex_lock(&x->lock);
    }
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

void dataset_remote_reading(sf_dataset *ds, uint64_t shard)
{
    dataset_remote *x = ds->remote;
    /* Read before written: the I/O threads call this for every record, and
     * a write would move the line between their cores each time. */
    if (!x || !x->cache || x->mode != SF_REMOTE_CACHE)
        return;
    /* An empty plan has nothing to pass (the shards read are all held:
     * dataset_remote_plan), and with a plan shard order is no cue. */
    if (atomic_load_explicit(&x->planned, memory_order_relaxed) &&
        atomic_load_explicit(&x->plan_len, memory_order_relaxed) == 0)
        return;
    if (atomic_load_explicit(&x->last_hint, memory_order_relaxed) == shard ||
        atomic_exchange(&x->last_hint, shard) == shard)
        return;
    pthread_mutex_lock(&x->lock);
    uint64_t n = ds->manifest.shard_count;
    /* The distance from the shard read to the next to fill, in shard order:
     * a reader that moved past it (or back, a new epoch) restarts it. */
    uint64_t dist = (x->next % n + n - shard) % n;
    if (dist == 0 || dist > PREFETCH_SHARDS + 1)
        x->next = shard + 1;
    x->reading = shard;
    /* With a plan the reach moves only when shards leave it; the prefetch
     * threads are woken then, not for every record: records of a global
     * shuffle alternate between shards, and waking 4 threads per record to
     * find nothing to do made 687,000 futex calls of a cold epoch of
     * tools/bench/run's remote set (60,000 records in 12 shards), 169,000
     * now, and took its epoch from 1.2 s to 0.8 s. */
    if (!x->planned || plan_pass_locked(x, shard)) {
        prefetch_start_locked(ds);
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->lock);
}

/* ---- the shuffle window against the cache limit ---- */

/* Block size the advice for a global shuffle proposes (the reader's default). */
#define ADVICE_BLOCK 64u

/* About how many shards a run of `block_size` consecutive samples touches,
 * `per_shard` samples a shard on average: the run starts anywhere in a
 * shard and crosses (block_size - 1) / per_shard boundaries. */
static double shards_per_block(uint64_t block_size, double per_shard)
{
    return 1.0 + (double)(block_size - 1) / per_shard;
}

/* The most samples a window of runs of `block_size` may hold to touch at
 * most `room` bytes of shards (0: not even one run fits). */
static uint64_t window_fitting(double room, uint64_t block_size, double per_shard,
                               double shard_bytes)
{
    double blocks = room / (shards_per_block(block_size, per_shard) * shard_bytes);
    return blocks < 1.0 ? 0 : (uint64_t)blocks * block_size;
}

void dataset_remote_check_window(const sf_dataset *ds, uint64_t block_size, uint64_t window)
{
    static atomic_int said;
    const dataset_remote *x = ds->remote;
    const sf_manifest *m = &ds->manifest;
    if (!x || !x->cache || x->mode != SF_REMOTE_CACHE || !window || !block_size ||
        !m->shard_count || !m->record_count || atomic_load(&said))
        return;
    uint64_t total = 0;
    for (uint64_t i = 0; i < m->shard_count; i++)
        total += m->shards[i].file_size;
    /* Estimated from the averages: the runs of a window are drawn from all
     * over the dataset, so the shards they touch rarely overlap. */
    double shard_bytes = (double)total / (double)m->shard_count;
    double per_shard = (double)m->record_count / (double)m->shard_count;
    double blocks = (double)((window + block_size - 1) / block_size);
    double shards = blocks * shards_per_block(block_size, per_shard);
    if (shards > (double)m->shard_count)
        shards = (double)m->shard_count;
    double bytes = shards * shard_bytes;
    /* The prefetcher's reach (prefetch_next_locked) is cached besides. */
    double reach = PREFETCH_SHARDS * shard_bytes;
    if (reach > (double)x->cache_limit / 2)
        reach = (double)x->cache_limit / 2;
    if (bytes + reach <= (double)x->cache_limit || atomic_exchange(&said, 1))
        return;
    int global = block_size == 1 && window >= m->record_count;
    uint64_t advice_block = global ? ADVICE_BLOCK : block_size;
    uint64_t fit = window_fitting((double)x->cache_limit - reach, advice_block, per_shard,
                                  shard_bytes);
    char alt[256];
    if (fit && global)
        snprintf(alt, sizeof alt, ", or shuffle block with blocks of %llu samples in a window "
                                  "of at most %llu",
                 (unsigned long long)advice_block, (unsigned long long)fit);
    else if (fit)
        snprintf(alt, sizeof alt, ", or a window of at most %llu samples",
                 (unsigned long long)fit);
    else
        snprintf(alt, sizeof alt, " (not even one block of %llu samples fits)",
                 (unsigned long long)advice_block);
    fprintf(stderr,
            "shardfeed: %s: a shuffle window of %llu samples (%s%llu) touches about %.0f of "
            "the %llu shards, %llu bytes, and the prefetcher keeps up to %llu bytes ahead: "
            "more than the cache limit of %llu bytes, so shards are evicted before the "
            "window is done with them and downloaded again and again (the order is not "
            "changed). It fits with cache_limit of at least %llu bytes%s; or use remote "
            "mode direct\n",
            ds->dir, (unsigned long long)window, global ? "global shuffle, runs of " : "blocks of ",
            (unsigned long long)block_size, shards, (unsigned long long)m->shard_count,
            (unsigned long long)bytes, (unsigned long long)reach,
            (unsigned long long)x->cache_limit,
            (unsigned long long)(bytes + PREFETCH_SHARDS * shard_bytes) + 1, alt);
}

/* ---- direct ranges ---- */

int dataset_remote_read(sf_dataset *ds, uint64_t shard, void *dst, uint64_t off, uint64_t len)
{
    remote_fetcher *f;
    int rc = remote_pool_take(&f, ds->remote->pool);
    if (rc)
        return rc;
    remote_fetcher_if_match(f, ds->remote->etags[shard]);
    rc = remote_fetch_range_sized(f, ds->shards[shard].name, ds->manifest.shards[shard].file_size,
                                  off, len, dst);
    remote_fetcher_if_match(f, NULL);
    remote_pool_give(ds->remote->pool, f);
    return rc;
}
