/* Opening a dataset and random access through a read-only mmap. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hash.h"
#include "jobs.h"

#include "value_codec.h"
#include "dataset_internal.h"
#include "error_internal.h"
#include "fault_guard.h"
#include "key_table.h"
#include "le.h"

/* The key of record `local` of shard `shard`, from its index (entry bytes
 * 24..29: key_offset, key_length; checked by sf_index_check at load). */
static void shard_key(const sf_dataset *ds, uint64_t shard, uint64_t local, const uint8_t **key,
                      size_t *len)
{
    const sf_schema *s = &ds->manifest.schema;
    const sf_shard_meta *m = &ds->shards[shard].meta;
    const uint8_t *e = m->index + local * s->entry_size;
    *key = m->index + m->header.record_count * s->entry_size + sf_get_le32(e + 24);
    *len = sf_get_le16(e + 28);
}

static void key_of_record(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    const sf_dataset *ds = ctx;
    uint64_t local, shard = sf_dataset_locate(ds, id, &local);
    shard_key(ds, shard, local, key, len);
}

/* key_of_record for keys asked in order: the shard of the last one is
 * tried before a search. */
typedef struct key_cursor {
    const sf_dataset *ds;
    uint64_t shard;
} key_cursor;

static void key_of_next_record(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    key_cursor *c = ctx;
    const sf_shard_desc *d = &c->ds->manifest.shards[c->shard];
    if (id < d->first_record || id - d->first_record >= d->record_count) {
        uint64_t local;
        c->shard = sf_dataset_locate(c->ds, id, &local);
        d = &c->ds->manifest.shards[c->shard];
    }
    shard_key(c->ds, c->shard, id - d->first_record, key, len);
}

/* SPEC.md "Schema": the records of a dataset have distinct keys (export
 * writes a file per key, a trainer looks samples up by key). Fails naming
 * both records of the first repeat. */
static int check_distinct_keys(const sf_dataset *ds)
{
    const sf_manifest *m = &ds->manifest;
    /* Distinct hashes prove it without the table's cache miss per key; a
     * table, which compares bytes, finds the records of a repeat. */
    int distinct;
    key_cursor cursor = {ds, 0};
    int rc = sf_key_hashes_distinct(&distinct, m->record_count, key_of_next_record, &cursor);
    if (rc || distinct)
        return rc;
    sf_key_table t;
    uint64_t dup = 0, first = 0;
    rc = sf_key_table_init(&t, m->record_count, key_of_record, (void *)ds);
    if (!rc)
        rc = sf_key_table_add_range(&t, 0, m->record_count, &dup, &first);
    sf_key_table_free(&t);
    if (rc != 1)
        return rc;
    const uint8_t *key;
    size_t len;
    uint64_t local, shard = sf_dataset_locate(ds, dup, &local);
    uint64_t first_local, first_shard = sf_dataset_locate(ds, first, &first_local);
    shard_key(ds, shard, local, &key, &len);
    return sf_fail(SF_E_CORRUPT,
                   "%s/%s: record %llu (sample %llu) has the key '%.*s' of %s record %llu "
                   "(sample %llu): the keys of a dataset are distinct",
                   ds->dir, ds->shards[shard].name, (unsigned long long)local,
                   (unsigned long long)dup, (int)len, (const char *)key,
                   ds->shards[first_shard].name, (unsigned long long)first_local,
                   (unsigned long long)first);
}

/* Reads and checks shard i's header, footer and index from its file. */
static int load_shard_meta(sf_dataset *ds, uint64_t i, const sf_shard_expect *exp, uint64_t *bad)
{
    int fd;
    int rc = dataset_fd_acquire(&fd, ds, i, 0);
    if (rc)
        return rc;
    rc = sf_shard_load_meta(&ds->shards[i].meta, fd, exp, bad);
    dataset_fd_release(ds, i, 0);
    return rc;
}

/* Shards whose metadata is loaded at once. At a URL, one after another is
 * two round trips per shard (20,000 shards at 20 ms: 13 minutes). Local,
 * it is reading and checking every index: 390 MB for 10 million samples
 * (README "Scale"), CPU work and first touches of fresh memory, which
 * spread over the cores. */
#define META_THREADS_REMOTE 16u
#define META_THREADS_LOCAL 8u

_Static_assert(META_THREADS_REMOTE <= REMOTE_JOBS_THREADS_MAX && META_THREADS_LOCAL <= REMOTE_JOBS_THREADS_MAX,
               "more threads than remote_jobs_run runs");

typedef struct metas_run {
    sf_dataset *ds;
    _Atomic uint64_t next;
    remote_jobs jobs; /* a job: a shard; its detail: the shard's bad-byte offset */
} metas_run;

static void *metas_worker(void *arg)
{
    metas_run *run = arg;
    sf_dataset *ds = run->ds;
    const sf_manifest *m = &ds->manifest;
    for (uint64_t i; (i = atomic_fetch_add(&run->next, 1)) < m->shard_count;) {
        if (remote_jobs_failed_before(&run->jobs, i))
            break;
        uint64_t bad = 0;
        sf_shard_expect exp = {&m->schema, i, m->dataset_id, m->align, &m->shards[i]};
        int rc = ds->remote ? dataset_remote_load_meta(ds, i, &bad) : load_shard_meta(ds, i, &exp, &bad);
        if (rc)
            remote_jobs_note_failure(&run->jobs, i, rc, bad);
    }
    return NULL;
}

static unsigned meta_threads(const sf_dataset *ds)
{
    uint64_t n = ds->manifest.shard_count, t = META_THREADS_REMOTE;
    if (!ds->remote) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        t = cpus < 1 ? 1 : cpus > (long)META_THREADS_LOCAL ? META_THREADS_LOCAL : (uint64_t)cpus;
    }
    return (unsigned)(n < 1 ? 1 : n < t ? n : t);
}

/* Every shard's header, footer and index, checked, several shards at once:
 * 0, or the failure of the lowest-numbered shard that failed (the same
 * whatever order the threads ran in), prefixed with where it is. */
static int load_shard_metas(sf_dataset *ds, const char *dir)
{
    const sf_manifest *m = &ds->manifest;
    for (uint64_t i = 0; i < m->shard_count; i++)
        snprintf(ds->shards[i].name, sizeof ds->shards[i].name, SF_SHARD_NAME_FMT, (unsigned)i);
    metas_run run = {.ds = ds};
    remote_jobs_init(&run.jobs);
    remote_jobs_run(meta_threads(ds), metas_worker, &run);
    uint64_t failed = run.jobs.failed, bad = run.jobs.detail;
    int rc = remote_jobs_finish(&run.jobs);
    if (rc) {
        char where[4200];
        snprintf(where, sizeof where, "%s/%s (byte %llu)", dir, ds->shards[failed].name,
                 (unsigned long long)bad);
        sf_fail_prefix(rc, where);
    }
    return rc;
}

int sf_dataset_open(sf_dataset **out, const char *dir)
{
    return sf_dataset_open_ex(out, dir, NULL);
}

int sf_dataset_open_ex(sf_dataset **out, const char *dir, const sf_remote_opts *remote)
{
    if (!out || !dir)
        return sf_fail(SF_E_INVALID, "sf_dataset_open: %s is NULL", !out ? "out" : "dir");
    *out = NULL;
    if (!*dir) /* it said ": No such file or directory", naming nothing */
        return sf_fail(SF_E_INVALID, "sf_dataset_open: the path is empty (name a dataset folder or URL)");
    int rc = dataset_remote_opts_check(remote);
    if (rc)
        return rc;
    sf_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->dir = strdup(dir))) {
        free(ds);
        return sf_fail(-ENOMEM, "out of memory");
    }
    pthread_mutex_init(&ds->map_lock, NULL);
    rc = sf_is_url(dir) ? dataset_remote_open(ds, dir, remote)
                            : sf_manifest_load(&ds->manifest, dir);
    if (!rc)
        rc = sf_dataset_load_metadata(ds);
    if (rc) {
        sf_dataset_close(ds);
        return rc;
    }
    const sf_manifest *m = &ds->manifest;
    ds->shards = calloc(m->shard_count ? m->shard_count : 1, sizeof *ds->shards);
    if (!ds->shards) {
        sf_dataset_close(ds);
        return sf_fail(-ENOMEM, "out of memory");
    }
    rc = dataset_files_init(ds);
    if (!rc)
        rc = load_shard_metas(ds, dir);
    if (!rc)
        rc = check_distinct_keys(ds);
    if (rc) {
        sf_dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

void sf_dataset_close(sf_dataset *ds)
{
    if (!ds)
        return;
    dataset_files_leave_budget(ds); /* first: no other open trims it from now on */
    dataset_remote_close(ds); /* then: its prefetcher reads the shards' metadata */
    for (uint64_t i = 0; ds->shards && i < ds->manifest.shard_count; i++) {
        sf_open_shard *s = &ds->shards[i];
        const uint8_t *map = atomic_exchange(&s->map, NULL);
        if (map)
            munmap((void *)map, s->meta.file_size);
        sf_shard_meta_clear(&s->meta);
    }
    dataset_files_free(ds);
    free(ds->shards);
    sf_dataset_free_metadata(ds);
    sf_manifest_clear(&ds->manifest);
    pthread_mutex_destroy(&ds->map_lock);
    ZSTD_freeDCtx(ds->dctx);
    free(ds->dir);
    free(ds);
}

uint64_t sf_dataset_num_samples(const sf_dataset *ds)
{
    return ds ? ds->manifest.record_count : 0;
}

uint32_t sf_dataset_num_fields(const sf_dataset *ds)
{
    return ds ? ds->manifest.schema.field_count : 0;
}

uint64_t sf_dataset_num_shards(const sf_dataset *ds)
{
    return ds ? ds->manifest.shard_count : 0;
}

uint32_t sf_dataset_align(const sf_dataset *ds)
{
    return ds ? ds->manifest.align : 0;
}

uint64_t sf_dataset_id(const sf_dataset *ds)
{
    return ds ? ds->manifest.dataset_id : 0;
}

int sf_dataset_field(sf_field_info *out, const sf_dataset *ds, uint32_t field)
{
    if (!out || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_field: %s is NULL", !out ? "out" : "ds");
    if (field >= ds->manifest.schema.field_count)
        return sf_fail(SF_E_INVALID, "sf_dataset_field: no field %u (the dataset has %u)", field,
                       ds->manifest.schema.field_count);
    const sf_field *f = &ds->manifest.schema.fields[field];
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    out->dtype_name = sf_dtype_name(f->dtype);
    out->npy_descr = sf_dtype_npy_descr(f->dtype);
    out->elem_size = sf_dtype_size(f->dtype);
    out->ndim = f->ndim;
    memcpy(out->shape, f->shape, sizeof out->shape);
    out->item_size = f->item_size;
    out->storage = f->storage;
    out->codec = f->codec;
    return 0;
}

int sf_dataset_shard(sf_shard_info *out, const sf_dataset *ds, uint64_t shard)
{
    if (!out || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_shard: %s is NULL", !out ? "out" : "ds");
    if (shard >= ds->manifest.shard_count)
        return sf_fail(SF_E_INVALID, "sf_dataset_shard: no shard %llu (the dataset has %llu)",
                       (unsigned long long)shard, (unsigned long long)ds->manifest.shard_count);
    const sf_shard_desc *d = &ds->manifest.shards[shard];
    out->name = ds->shards[shard].name;
    out->first_sample = d->first_record;
    out->num_samples = d->record_count;
    out->file_size = d->file_size;
    return 0;
}

uint64_t sf_dataset_locate(const sf_dataset *ds, uint64_t sample, uint64_t *local)
{
    const sf_shard_desc *d = ds->manifest.shards;
    uint64_t lo = 0, hi = ds->manifest.shard_count; /* first_record is increasing */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (d[mid].first_record <= sample)
            lo = mid;
        else
            hi = mid;
    }
    *local = sample - d[lo].first_record;
    return lo;
}

void sf_dataset_entry(sf_index_entry *e, const sf_dataset *ds, uint64_t shard, uint64_t local)
{
    const sf_schema *s = &ds->manifest.schema;
    /* Entries were validated when the shard was opened. */
    sf_index_entry_decode(e, s, ds->shards[shard].meta.index + local * s->entry_size);
}

int sf_dataset_key(const char **key, size_t *len, const sf_dataset *ds, uint64_t sample)
{
    if (!key || !len || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_key: %s is NULL", !key ? "key" : !len ? "len" : "ds");
    if (sample >= ds->manifest.record_count)
        return sf_fail(SF_E_INVALID, "sf_dataset_key: no sample %llu (the dataset has %llu)",
                       (unsigned long long)sample, (unsigned long long)ds->manifest.record_count);
    uint64_t local, shard = sf_dataset_locate(ds, sample, &local);
    sf_index_entry e;
    sf_dataset_entry(&e, ds, shard, local);
    const sf_open_shard *sh = &ds->shards[shard];
    *key = (const char *)sh->meta.index + sh->meta.header.record_count * ds->manifest.schema.entry_size +
           e.key_offset;
    *len = e.key_length;
    return 0;
}

/* Prefixes the detail of a failure on a value with where it is. */
static int value_fail(int rc, const sf_dataset *ds, uint64_t sample)
{
    uint64_t local, shard = sf_dataset_locate(ds, sample, &local);
    char where[4300];
    snprintf(where, sizeof where, "%s/%s: record %llu (sample %llu)", ds->dir,
             ds->shards[shard].name, (unsigned long long)local, (unsigned long long)sample);
    return sf_fail_prefix(rc, where);
}

/* A guarded touch of a shard's map faulted (SIGBUS): the file was cut
 * short under the map, or paging it in failed. */
static int mapped_fail(const sf_dataset *ds, uint64_t sample)
{
    uint64_t local, shard = sf_dataset_locate(ds, sample, &local), now;
    int rc;
    if (sf_dataset_shard_shrank(ds, shard, &now))
        rc = sf_fail(SF_E_TRUNCATED,
                     "the file was cut short while being read (it is now %llu bytes, %llu when "
                     "the dataset was opened)",
                     (unsigned long long)now, (unsigned long long)ds->shards[shard].meta.file_size);
    else
        rc = sf_fail(-EIO, "reading through the memory map failed (SIGBUS: an I/O error while "
                           "paging the file in)");
    return value_fail(rc, ds, sample);
}

/* The SF_E_INVALID of a sample or field out of range, for function `fn`. */
static int no_value(const char *fn, const sf_dataset *ds, uint64_t sample, uint32_t field)
{
    if (sample >= ds->manifest.record_count)
        return sf_fail(SF_E_INVALID, "%s: no sample %llu (the dataset has %llu)", fn,
                       (unsigned long long)sample, (unsigned long long)ds->manifest.record_count);
    return sf_fail(SF_E_INVALID, "%s: no field %u (the dataset has %u)", fn, field,
                   ds->manifest.schema.field_count);
}

/* sf_dataset_get without the codec check: the stored bytes. With `held`
 * (a caller that copies the value out at once), a dataset at a URL pins the
 * shard in its cache, with a map that lasts as long as that pin, and sets
 * *held to the shard + 1 for value_let_go; without it (sf_dataset_get,
 * whose pointers last until close) the shard's map is kept until close, and
 * its pin with it (shard_files.c: an evicted file still mapped would hold
 * its disk space past the cache's limit). */
static int get_stored(const void **data, uint64_t *size, sf_dataset *ds, uint64_t sample,
                      uint32_t field, int check, uint64_t *held)
{
    if (!data || !size || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_get: %s is NULL",
                       !data ? "data" : !size ? "size" : "ds");
    if (sample >= ds->manifest.record_count || field >= ds->manifest.schema.field_count)
        return no_value("sf_dataset_get", ds, sample, field);
    const sf_schema *s = &ds->manifest.schema;
    uint64_t local, shard = sf_dataset_locate(ds, sample, &local);
    sf_open_shard *sh = &ds->shards[shard];
    sf_index_entry e;
    sf_dataset_entry(&e, ds, shard, local);
    const sf_field *f = &s->fields[field];
    if (f->storage == SF_STORAGE_INLINE && !check) {
        const uint8_t *entry = sh->meta.index + local * s->entry_size;
        *data = entry + SF_INDEX_ENTRY_BASE + 8 * (s->n_var + (uint32_t)s->inline_slot[field]);
        *size = f->item_size;
        return 0;
    }
    const uint8_t *map;
    int rc, fd;
    if (held && ds->remote) {
        if ((rc = dataset_fd_acquire(&fd, ds, shard, 0)))
            return rc;
        if ((rc = dataset_map_pinned(&map, ds, shard))) {
            dataset_fd_release(ds, shard, 0);
            return rc;
        }
        *held = shard + 1;
    } else if ((rc = dataset_map(&map, ds, shard))) {
        return rc;
    }
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], record_size;
    sf_record_layout(s, ds->manifest.align, e.var_len, off, len, &record_size);
    if (check) {
        const uint8_t *ptr[SF_MAX_FIELDS];
        for (uint32_t k = 0; k < s->n_payload; k++)
            ptr[k] = map + e.offset + off[k];
        /* Random access has no thread of its own to keep a hash state in:
         * each checked read of a record of several payload fields makes one. */
        XXH3_state_t *scratch = NULL;
        if (s->n_payload > 1 && !(scratch = XXH3_createState()))
            return sf_fail(-ENOMEM, "out of memory");
        uint64_t digest;
        rc = sf_guarded_hash(&digest, scratch, ptr, len, s->n_payload);
        XXH3_freeState(scratch);
        if (rc)
            return mapped_fail(ds, sample);
        if (digest != e.checksum)
            return sf_fail(SF_E_CHECKSUM, "%s/%s: record %llu (sample %llu) at byte %llu: checksum mismatch",
                           ds->dir, sh->name, (unsigned long long)local, (unsigned long long)sample,
                           (unsigned long long)e.offset);
        if (f->storage == SF_STORAGE_INLINE)
            return get_stored(data, size, ds, sample, field, 0, NULL); /* no map: inline */
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < field; i++)
        k += s->fields[i].storage != SF_STORAGE_INLINE;
    *data = map + e.offset + off[k];
    *size = len[k];
    return 0;
}

int sf_dataset_get(const void **data, uint64_t *size, sf_dataset *ds, uint64_t sample,
                   uint32_t field, int check)
{
    /* Bad arguments are SF_E_INVALID first, whatever the field. */
    if (data && size && ds && sample < ds->manifest.record_count &&
        field < ds->manifest.schema.field_count &&
        ds->manifest.schema.fields[field].codec != SF_CODEC_NONE)
        return sf_fail(SF_E_UNSUPPORTED,
                       "sf_dataset_get: field '%s' is compressed, so its stored bytes are not its "
                       "value: use sf_dataset_read_value",
                       ds->manifest.schema.fields[field].name);
    return get_stored(data, size, ds, sample, field, check, NULL);
}

/* What get_stored held for a caller that copied the value out. */
static void value_let_go(sf_dataset *ds, uint64_t held)
{
    if (held)
        dataset_fd_release(ds, held - 1, 0);
}

/* Codec work on a stored value that may lie in a shard's map: run under the
 * fault guard (sf_value_guarded). */
typedef struct value_job {
    const sf_field *f;
    const void *src;
    uint64_t len;
    void *dst;
    uint64_t size; /* the declared size (content_size), or the expected one (decompress) */
    ZSTD_DCtx *dctx;
} value_job;

static int job_content_size(void *arg)
{
    value_job *j = arg;
    return sf_zstd_content_size(&j->size, j->f, j->src, j->len);
}

static int job_decompress(void *arg)
{
    value_job *j = arg;
    return sf_decompress_value(j->dst, j->size, j->f, j->src, j->len, j->dctx);
}

/* Runs fn(j) under the fault guard: 0, or the failure with where it is. */
static int value_guarded(sf_guarded_fn fn, value_job *j, const sf_dataset *ds, uint64_t sample)
{
    int rc = sf_fault_guarded(fn, j);
    if (rc == SF_E_CORRUPT) /* the codec's verdict on the value */
        return value_fail(rc, ds, sample);
    return rc ? mapped_fail(ds, sample) : 0;
}

int sf_dataset_value_size(uint64_t *size, sf_dataset *ds, uint64_t sample, uint32_t field)
{
    if (!size || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_value_size: %s is NULL", !size ? "size" : "ds");
    if (sample >= ds->manifest.record_count || field >= ds->manifest.schema.field_count)
        return no_value("sf_dataset_value_size", ds, sample, field);
    const sf_field *f = &ds->manifest.schema.fields[field];
    value_job j = {.f = f};
    uint64_t held = 0;
    int rc = get_stored(&j.src, &j.len, ds, sample, field, 0, &held);
    if (!rc && f->codec == SF_CODEC_NONE)
        *size = j.len;
    /* Checked before anyone allocates from it (SPEC.md "Compression"). */
    else if (!rc && !(rc = value_guarded(job_content_size, &j, ds, sample)))
        *size = j.size;
    value_let_go(ds, held);
    return rc;
}

/* One ZSTD_DCtx kept by the dataset for random access; a caller that finds
 * it taken (another thread) uses a context of its own for that call. */
static ZSTD_DCtx *dctx_take(sf_dataset *ds)
{
    pthread_mutex_lock(&ds->map_lock);
    ZSTD_DCtx *c = ds->dctx;
    ds->dctx = NULL;
    pthread_mutex_unlock(&ds->map_lock);
    return c ? c : ZSTD_createDCtx();
}

static void dctx_give(sf_dataset *ds, ZSTD_DCtx *c)
{
    pthread_mutex_lock(&ds->map_lock);
    if (!ds->dctx) {
        ds->dctx = c;
        c = NULL;
    }
    pthread_mutex_unlock(&ds->map_lock);
    ZSTD_freeDCtx(c);
}

/* sf_dataset_read_value past its argument checks; what get_stored held
 * goes back in the caller. */
static int read_value_held(void *dst, uint64_t cap, uint64_t *size, sf_dataset *ds,
                           uint64_t sample, uint32_t field, int check, uint64_t *held)
{
    const sf_field *f = &ds->manifest.schema.fields[field];
    value_job j = {.f = f, .dst = dst};
    int rc = get_stored(&j.src, &j.len, ds, sample, field, check, held);
    if (rc)
        return rc;
    if (f->codec == SF_CODEC_NONE)
        j.size = j.len;
    else if ((rc = value_guarded(job_content_size, &j, ds, sample)))
        return rc;
    *size = j.size;
    if (cap < j.size)
        return sf_fail(SF_E_INVALID, "sf_dataset_read_value: the value of field '%s' is %llu bytes, the buffer %llu",
                       f->name, (unsigned long long)j.size, (unsigned long long)cap);
    if (f->codec == SF_CODEC_NONE) {
        rc = sf_guarded_copy(dst, j.src, j.len);
        return rc ? mapped_fail(ds, sample) : 0;
    }
    if (!(j.dctx = dctx_take(ds)))
        return sf_fail(-ENOMEM, "out of memory");
    rc = value_guarded(job_decompress, &j, ds, sample);
    /* A fault abandons zstd mid-frame: start the context afresh. */
    if (rc && rc != SF_E_CORRUPT)
        ZSTD_DCtx_reset(j.dctx, ZSTD_reset_session_and_parameters);
    dctx_give(ds, j.dctx);
    return rc;
}

int sf_dataset_read_value(void *dst, uint64_t cap, uint64_t *size, sf_dataset *ds, uint64_t sample,
                          uint32_t field, int check)
{
    if (!size || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_read_value: %s is NULL", !size ? "size" : "ds");
    if (!dst && cap)
        return sf_fail(SF_E_INVALID, "sf_dataset_read_value: dst is NULL but cap is %llu",
                       (unsigned long long)cap);
    if (sample >= ds->manifest.record_count || field >= ds->manifest.schema.field_count)
        return no_value("sf_dataset_read_value", ds, sample, field);
    uint64_t held = 0;
    int rc = read_value_held(dst, cap, size, ds, sample, field, check, &held);
    value_let_go(ds, held);
    return rc;
}
