/* Record checks and the substitution of corrupt samples: a finished task's
 * checksum and value checks, a failed read's error (a shard cut short is a
 * corrupt record), and at the batch-ready point the synchronous read of
 * intact samples in place of corrupt ones (on_corrupt = SKIP). */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "hash.h"

#include "error_internal.h"
#include "reader_internal.h"


/* `copy`: the record's bytes as read failed their check (a checksum, a file
 * cut short while read): a URL's cached copy is then named and removed. */
static void vtask_fail(sf_reader *r, reader_task *t, int err, int copy, const char *fmt, va_list ap)
{
    if (!t->err)
        t->err = err;
    reader_slot *s = t->slot;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&s->err, &expected, err))
        return;
    int n = snprintf(s->errmsg, sizeof s->errmsg, "%s/%s: record %llu (sample %llu) at byte %llu: ",
                     r->ds->dir, r->ds->shards[t->shard].name, (unsigned long long)t->local,
                     (unsigned long long)t->id, (unsigned long long)t->offset);
    if (n > 0 && (size_t)n < sizeof s->errmsg)
        vsnprintf(s->errmsg + n, sizeof s->errmsg - (size_t)n, fmt, ap);
    /* Read from a cached copy of a URL's shard: the copy is named and
     * removed (the error named only the URL, and the copy stayed). Not for
     * a bad value whose checksum matched, nor a download's own failure:
     * those say nothing of the copy. */
    if (copy) {
        char where[600];
        dataset_remote_damaged_copy(where, sizeof where, r->ds, t->shard);
        size_t len = strlen(s->errmsg);
        snprintf(s->errmsg + len, sizeof s->errmsg - len, "%s", where);
    }
}

__attribute__((format(printf, 4, 5))) static void task_failf(sf_reader *r, reader_task *t, int err,
                                                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vtask_fail(r, t, err, 0, fmt, ap);
    va_end(ap);
}

/* task_failf for bytes read that failed their check (vtask_fail's `copy`). */
__attribute__((format(printf, 4, 5))) static void task_fail_read(sf_reader *r, reader_task *t,
                                                                 int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vtask_fail(r, t, err, 1, fmt, ap);
    va_end(ap);
}

/* A corrupt sample, substituted at the batch-ready point (on_corrupt = SKIP);
 * `why` (SF_E_CHECKSUM, SF_E_CORRUPT, SF_E_TRUNCATED) is what the error says
 * if no substitute is found. */
static void task_corrupt(reader_task *t, int why)
{
    if (t->corrupt)
        return; /* several of its reads failed: the first says why */
    t->corrupt = why;
    atomic_fetch_add(&t->slot->corrupt, 1);
}

void reader_task_fail(sf_reader *r, reader_task *t, int err, const char *what)
{
    /* A read that failed because the shard was cut short while being read
     * (end of file from pread or io_uring, SIGBUS caught by the mmap
     * engine's guard, EINVAL from an O_DIRECT read at the new, unaligned
     * end): the record is gone, as if it were corrupt, and on_corrupt = SKIP
     * substitutes it like one. */
    uint64_t now;
    if (err < 0 && err != -ENOMEM && sf_dataset_shard_shrank(r->ds, t->shard, &now)) {
        if (r->opts.on_corrupt == SF_ON_CORRUPT_SKIP)
            task_corrupt(t, SF_E_TRUNCATED);
        else
            task_fail_read(r, t, SF_E_TRUNCATED,
                       "%s: the file was cut short while being read (it is now %llu bytes, %llu "
                       "when the dataset was opened)",
                       what, (unsigned long long)now,
                       (unsigned long long)r->ds->shards[t->shard].meta.file_size);
        return;
    }
    task_failf(r, t, err, "%s: %s", what, sf_strerror(err));
}

void reader_task_open_failed(sf_reader *r, reader_task *t, int err)
{
    /* The open's own message (this thread's) says why: out of descriptors, a
     * shard replaced since the dataset was opened, O_DIRECT refused. */
    char what[600];
    snprintf(what, sizeof what, "cannot open the shard (%s)", sf_last_error());
    reader_task_fail(r, t, err, what);
}

void reader_task_bad_value(sf_reader *r, reader_task *t)
{
    if (r->opts.on_corrupt == SF_ON_CORRUPT_SKIP)
        task_corrupt(t, SF_E_CORRUPT);
    else
        task_failf(r, t, SF_E_CORRUPT, "%s", sf_last_error());
}

void reader_task_fail_config(sf_reader *r, reader_task *t, int err, const char *msg)
{
    task_failf(r, t, err, "%s", msg);
}

/* Hashes the task's payload fields where they landed in the slot, with
 * the thread's state `xxh`. Returns 0 or SF_E_CHECKSUM. */
static int check_task(sf_reader *r, XXH3_state_t *xxh, reader_task *t, uint64_t *got)
{
    if (t->hashed) {
        *got = t->digest;
        return *got == t->checksum ? 0 : SF_E_CHECKSUM;
    }
    const uint8_t *ptr[SF_MAX_FIELDS];
    uint64_t len[SF_MAX_FIELDS];
    for (uint32_t k = 0; k < t->nreads; k++) {
        ptr[k] = t->reads[k].dst;
        len[k] = t->reads[k].len;
    }
    uint64_t t0 = reader_now_ns();
    *got = sf_record_hash(xxh, ptr, len, t->nreads);
    reader_account_time(r, 0, reader_now_ns() - t0);
    return *got == t->checksum ? 0 : SF_E_CHECKSUM;
}

/* Reads task t synchronously through the buffered fd for substitute():
 * 0, SF_E_CHECKSUM, SF_E_CORRUPT or SF_E_TRUNCATED (not usable), or a read
 * error. */
static int remote_copy(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                       uint64_t len)
{
    return dataset_remote_read(r->ds, task->shard, dst, off, len);
}

static int load_sync(sf_reader *r, reader_task *t, reader_scratch *st)
{
    t->hashed = 0;
    /* A dataset at a URL in mode direct: by range requests, as its records
     * are read. Through a descriptor, that is the cache's copy of the whole
     * shard: a download per substitute, and the cache's errors ("evicted as
     * soon as it arrived") for a store's (a 404, a changed object). */
    int direct = dataset_remote_direct(r->ds);
    int rc = direct ? 0 : reader_task_open(r, t, 0);
    if (rc)
        return rc;
    if (r->compressed) {
        rc = reader_staged_load(st, r, t, direct ? remote_copy : reader_staged_pread);
    } else {
        uint64_t t0 = reader_now_ns();
        for (uint32_t k = 0; k < t->nreads && !rc; k++) {
            reader_read *rd = &t->reads[k];
            rc = direct ? dataset_remote_read(r->ds, t->shard, rd->dst, rd->off, rd->len)
                        : sf_pread_full(t->fd, rd->dst, rd->len, rd->off);
            if (rc && !direct && rc != SF_E_TRUNCATED)
                rc = sf_fail(rc, "%s/%s: %s", r->ds->dir, r->ds->shards[t->shard].name,
                             sf_strerror(rc));
            if (!rc)
                rd->done = rd->len;
        }
        reader_account_time(r, reader_now_ns() - t0, 0);
    }
    if (!direct)
        reader_task_close(r, t);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < t->nreads; k++)
        atomic_fetch_add_explicit(&r->st_bytes, t->reads[k].len, memory_order_relaxed);
    if (r->opts.verify != SF_VERIFY_ON)
        return 0;
    uint64_t got;
    rc = check_task(r, st->xxh, t, &got);
    /* The same value check as verify_task's: a substitute is handed out as
     * any sample is, so a bool byte other than 0 or 1 makes it unusable. */
    for (uint32_t k = 0; !rc && k < t->nreads; k++)
        rc = sf_payload_value_check(r->schema, k, t->reads[k].dst, t->reads[k].out_len);
    return rc;
}

/* Whether sample `cand` fits in place of position `pos` of slot s. The slot
 * has room for its batch_cap largest distinct values (reader_slab_layout); a
 * substitute may repeat a sample the batch already holds, which that bound
 * does not cover. */
static int substitute_fits(const sf_reader *r, const reader_slot *s, uint32_t pos, uint64_t cand)
{
    const sf_schema *sc = r->schema;
    uint64_t local, shard = sf_dataset_locate(r->ds, cand, &local);
    sf_index_entry e;
    sf_dataset_entry(&e, r->ds, shard, local);
    for (uint32_t f = 0; f < sc->field_count; f++) {
        if (sc->fields[f].storage != SF_STORAGE_VARIABLE || reader_image_field(r, f))
            continue;
        const uint64_t *vo = reader_slot_var_off(r, s, f);
        uint64_t others = vo[s->batch.size] - (vo[pos + 1] - vo[pos]);
        if (others + reader_slot_value_len(r, f, cand, &e) > r->layout.field_cap[f])
            return 0;
    }
    return 1;
}

/* Reads candidate after candidate (id+1, id+2, ... modulo n) into the
 * position of corrupt task `t`, synchronously through the buffered fd,
 * until one is intact. Runs at the batch-ready point, so the rest of the
 * batch is complete and packed variable-length bytes can be moved. */
static void substitute(sf_reader *r, reader_slot *s, reader_task *t, reader_scratch *st)
{
    const int why = t->corrupt; /* placing a candidate clears it */
    assert(why != 0);
    uint64_t bad = t->id, cand = bad, damaged = 0, too_long = 0;
    uint64_t tries = r->n - 1 < READER_SUBST_MAX_TRIES ? r->n - 1 : READER_SUBST_MAX_TRIES;
    for (uint64_t i = 0; i < tries; i++) {
        cand = (cand + 1) % r->n;
        if (!substitute_fits(r, s, t->pos, cand)) {
            too_long++;
            continue;
        }
        reader_place_sample(r, s, t->pos, cand, 1);
        int rc = load_sync(r, t, st);
        if (rc == 0) {
            s->source_ids[t->pos] = cand;
            s->batch.substituted++;
            return;
        }
        /* Corrupt, or cut off by a truncation of its shard: try the next. */
        if (rc != SF_E_CHECKSUM && rc != SF_E_CORRUPT && rc != SF_E_TRUNCATED) {
            /* Not reader_task_fail, which may call it one more corrupt sample. */
            /* load_sync's detail (a URL, an HTTP status), not only the code's name */
            task_failf(r, t, rc, "read failed (substituting a corrupt sample): %s", sf_last_error());
            return;
        }
        damaged++;
    }
    /* Back to the damaged sample, which the error names (shard, record and
     * offset are the task's), not the last candidate tried. */
    if (cand != bad)
        reader_place_sample(r, s, t->pos, bad, 1);
    const char *what = why == SF_E_CHECKSUM    ? "checksum mismatch"
                       : why == SF_E_TRUNCATED ? "cut short while being read"
                                               : "a value that does not decode";
    (why == SF_E_CORRUPT ? task_failf : task_fail_read)(r, t, why,
               "%s, and no substitute among the %llu samples that follow "
               "sample %llu: %llu damaged, %llu too long for the room this batch has left",
               what, (unsigned long long)tries, (unsigned long long)bad, (unsigned long long)damaged,
               (unsigned long long)too_long);
}

/* Judges task t's checksum (hashing it first with `xxh` unless the engine
 * did). */
static void verify_task(sf_reader *r, XXH3_state_t *xxh, reader_task *t)
{
    if (t->err || t->corrupt || r->opts.verify != SF_VERIFY_ON)
        return;
    uint64_t got;
    int rc = check_task(r, xxh, t, &got);
    for (uint32_t k = 0; !rc && k < t->nreads; k++) /* SPEC.md "Data types": bools are 0 or 1 */
        rc = sf_payload_value_check(r->schema, k, t->reads[k].dst, t->reads[k].out_len);
    if (rc == SF_E_CORRUPT) {
        reader_task_bad_value(r, t);
    } else if (rc == SF_E_CHECKSUM && r->opts.on_corrupt == SF_ON_CORRUPT_SKIP) {
        task_corrupt(t, SF_E_CHECKSUM);
    } else if (rc == SF_E_CHECKSUM) {
        task_fail_read(r, t, rc, "checksum mismatch (index says %016llx, payload hashes to %016llx)",
                   (unsigned long long)t->checksum, (unsigned long long)got);
    } else {
        assert(rc == 0);
    }
}

void reader_verify_tasks(sf_reader *r, XXH3_state_t *xxh, reader_task *const *tasks, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        verify_task(r, xxh, tasks[i]);
}

void reader_substitute_corrupt(sf_reader *r, reader_slot *s, reader_scratch *st)
{
    for (uint32_t pos = 0; pos < s->batch.size && !atomic_load(&s->err); pos++)
        if (s->tasks[pos].corrupt)
            substitute(r, s, &s->tasks[pos], st);
    reader_set_field_bytes(r, s);
}
