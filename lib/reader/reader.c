/* The streaming reader: options, open/close, the schedule of batches into
 * slots, in-order delivery, record checksums and the substitution of
 * corrupt samples. The I/O itself is in engine_*.c behind reader_engine_ops,
 * the batch memory in slab.c; reader_internal.h describes the pipeline. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "hash.h"

#include "error_internal.h"
#include "le.h"
#include "reader_internal.h"

_Static_assert((int)SF_READER_SHUFFLE_NONE == (int)SF_SHUFFLE_NONE &&
                   (int)SF_READER_SHUFFLE_GLOBAL == (int)SF_SHUFFLE_GLOBAL &&
                   (int)SF_READER_SHUFFLE_BLOCK == (int)SF_SHUFFLE_BLOCK,
               "public shuffle modes mirror the sampler's");
_Static_assert((int)SF_READER_UNEVEN_PAD == (int)SF_UNEVEN_PAD &&
                   (int)SF_READER_UNEVEN_DROP == (int)SF_UNEVEN_DROP,
               "public uneven policies mirror the sampler's");

#define MAX_PREFETCH 1024u
#define MAX_THREADS 256u
#define MAX_QUEUE_DEPTH 4096u
#define SUBST_MAX_TRIES 4096u /* consecutive corrupt ids tried before giving up */

/* Stamps a stage of the slot's batch in the trace, if it has a record. */
static inline void stamp(reader_slot *s, int stage)
{
    if (s->trec)
        reader_trace_stamp(s->trec, stage, reader_now_ns());
}

static unsigned ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* ---- options -------------------------------------------------------------- */

static int resolve_opts(sf_reader_opts *o, const sf_reader_opts *in)
{
    static const sf_reader_opts def = SF_READER_OPTS_INIT;
    if (!in)
        in = &def;
    if (in->version < 1 || in->version > SF_READER_OPTS_VERSION)
        return sf_fail(SF_E_INVALID,
                       "sf_reader_opts.version is %u; this library takes 1..%d (start from "
                       "SF_READER_OPTS_INIT)",
                       in->version, SF_READER_OPTS_VERSION);
    *o = *in;
    if (!o->batch_size)
        o->batch_size = SF_READER_DEFAULT_BATCH;
    if (!o->world_size)
        o->world_size = 1;
    if (!o->prefetch)
        o->prefetch = SF_READER_DEFAULT_PREFETCH;
    if (!o->queue_depth)
        o->queue_depth = 32;
    if (o->batch_size > (1u << 24))
        return sf_fail(SF_E_INVALID, "batch_size %u is above the limit of %u", o->batch_size, 1u << 24);
    if (o->rank >= o->world_size)
        return sf_fail(SF_E_INVALID, "rank %u is not below world_size %u", o->rank, o->world_size);
    if (o->shuffle < SF_READER_SHUFFLE_NONE || o->shuffle > SF_READER_SHUFFLE_BLOCK)
        return sf_fail(SF_E_INVALID, "shuffle %d: expected none (0), global (1) or block (2)", o->shuffle);
    if (o->uneven != SF_READER_UNEVEN_PAD && o->uneven != SF_READER_UNEVEN_DROP)
        return sf_fail(SF_E_INVALID, "uneven %d: expected pad (0) or drop (1)", o->uneven);
    if (o->engine < SF_ENGINE_AUTO || o->engine > SF_ENGINE_MMAP)
        return sf_fail(SF_E_INVALID, "engine %d: expected auto, uring, pread or mmap", o->engine);
    if (o->device < SF_DEVICE_CPU || o->device > SF_DEVICE_HOST_COPY || o->device_index < 0)
        return sf_fail(SF_E_INVALID, "device %d:%d: expected cpu, cuda:N or host-copy", o->device,
                       o->device_index);
    if (o->direct < SF_DIRECT_AUTO || o->direct > SF_DIRECT_OFF)
        return sf_fail(SF_E_INVALID, "direct %d: expected auto, on or off", o->direct);
    if (o->verify != SF_VERIFY_ON && o->verify != SF_VERIFY_OFF)
        return sf_fail(SF_E_INVALID, "verify %d: expected on (0) or off (1)", o->verify);
    if (o->on_corrupt != SF_ON_CORRUPT_ERROR && o->on_corrupt != SF_ON_CORRUPT_SKIP)
        return sf_fail(SF_E_INVALID, "on_corrupt %d: expected error (0) or skip (1)", o->on_corrupt);
    if (o->prefetch > MAX_PREFETCH)
        return sf_fail(SF_E_INVALID, "prefetch %u is above the limit of %u", o->prefetch, MAX_PREFETCH);
    if (o->io_threads > MAX_THREADS)
        return sf_fail(SF_E_INVALID, "io_threads %u is above the limit of %u", o->io_threads, MAX_THREADS);
    if (o->queue_depth > MAX_QUEUE_DEPTH)
        return sf_fail(SF_E_INVALID, "queue_depth %u is above the limit of %u", o->queue_depth,
                       MAX_QUEUE_DEPTH);
    return 0;
}

int reader_small_records(const sf_reader *r)
{
    const sf_schema *sc = r->schema;
    if (r->compressed || sc->n_var)
        return 0;
    uint64_t per = 0;
    for (uint32_t f = 0; f < sc->field_count; f++)
        per += sc->fields[f].storage == SF_STORAGE_FIXED ? sc->fields[f].item_size : 0;
    return per <= SF_SMALL_RECORD;
}

/* Warm (page-cache) reads are memcpy-bound, so the defaults aim at keeping
 * every core copying: see the measurements in the bench notes. The copy
 * engines run two threads per core, except on small records: a thread then
 * claims a whole batch, so one per core keeps every core copying, and more
 * only took turns with each other and with the consumer (Fashion-MNIST on
 * 2 cores: 2 threads delivered 8-33% more samples/s than 4, from C and from
 * Python, with pread and with mmap). */
static uint32_t default_threads(const sf_reader *r, const reader_engine_ops *e)
{
    unsigned n = ncpu();
    if (e == &reader_engine_uring || reader_small_records(r))
        return n < 2 ? 2 : n > 8 ? 8 : n;
    return n < 2 ? 4 : n > 8 ? 16 : 2 * n;
}

/* ---- O_DIRECT ------------------------------------------------------------- */

/* Whether every read can be O_DIRECT: file offsets, sizes and slot
 * destinations all multiples of SF_DIRECT_ALIGN. */
static int direct_check(const sf_reader *r)
{
    const sf_schema *s = r->schema;
    if (r->compressed)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: the dataset has compressed fields, which are read through a "
                       "staging buffer in the page cache; use direct=off");
    if (r->opts.engine == SF_ENGINE_MMAP)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: the mmap engine reads through the page cache; use the uring or "
                       "pread engine for O_DIRECT");
    if (r->ds->manifest.align % SF_DIRECT_ALIGN)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: records are aligned to %u bytes and O_DIRECT needs %u: repack with "
                       "--align %u",
                       r->ds->manifest.align, SF_DIRECT_ALIGN, SF_DIRECT_ALIGN);
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        if (fd->storage == SF_STORAGE_FIXED && fd->item_size % SF_DIRECT_ALIGN)
            return sf_fail(SF_E_UNSUPPORTED,
                           "direct: field '%s' is %llu bytes per sample, not a multiple of %u, so "
                           "it cannot be read with O_DIRECT",
                           fd->name, (unsigned long long)fd->item_size, SF_DIRECT_ALIGN);
    }
    if (r->layout.var_unaligned >= 0)
        return sf_fail(SF_E_UNSUPPORTED,
                       "direct: variable-length field '%s' has values whose length is not a "
                       "multiple of %u, so it cannot be read with O_DIRECT",
                       s->fields[r->layout.var_unaligned].name, SF_DIRECT_ALIGN);
    return 0;
}

static int open_direct_fds(sf_reader *r)
{
    uint64_t count = r->ds->manifest.shard_count;
    r->direct_fds = malloc((count ? count : 1) * sizeof *r->direct_fds);
    if (!r->direct_fds)
        return sf_fail(-ENOMEM, "out of memory");
    for (uint64_t i = 0; i < count; i++)
        r->direct_fds[i] = -1;
    for (uint64_t i = 0; i < count; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", r->ds->dir, r->ds->shards[i].name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0) {
            if (errno == EINVAL)
                return sf_fail(SF_E_UNSUPPORTED,
                               "direct: %s: the file system does not support O_DIRECT (tmpfs?); "
                               "use direct=off",
                               path);
            return sf_fail(-errno, "%s: %s", path, strerror(errno));
        }
        r->direct_fds[i] = fd;
    }
    return 0;
}

/* ---- slots ---------------------------------------------------------------- */

/* The batch_cap + 1 offsets of variable-length field f in slot s. */
static uint64_t *slot_var_off(const sf_reader *r, const reader_slot *s, uint32_t f)
{
    return s->var_off + (size_t)r->schema->var_slot[f] * (r->batch_cap + 1);
}

/* Bytes the value of payload field f of sample `id` (index entry e) takes
 * in a slot: its stored length, or for a compressed value its decompressed
 * length (staged.c). */
static uint64_t slot_value_len(const sf_reader *r, uint32_t f, uint64_t id, const sf_index_entry *e)
{
    const sf_field *fd = &r->schema->fields[f];
    if (fd->storage == SF_STORAGE_FIXED)
        return fd->item_size;
    if (fd->codec != SF_CODEC_NONE)
        return r->zlen[id * r->n_zvar + (uint32_t)r->zvar_slot[f]];
    return e->var_len[r->schema->var_slot[f]];
}

static int slots_init(sf_reader *r)
{
    const sf_schema *sc = r->schema;
    uint32_t K = r->opts.prefetch, B = r->batch_cap;
    uint32_t np = sc->n_payload ? sc->n_payload : 1;
    r->slots = calloc(K, sizeof *r->slots);
    if (!r->slots)
        return sf_fail(-ENOMEM, "out of memory");
    for (uint32_t i = 0; i < K; i++) {
        reader_slot *s = &r->slots[i];
        s->index = i;
        s->base = r->slab + (uint64_t)i * r->layout.slot_bytes;
        s->fields = calloc(sc->field_count, sizeof *s->fields);
        s->ids = calloc(B, sizeof *s->ids);
        s->source_ids = calloc(B, sizeof *s->source_ids);
        s->var_off = sc->n_var ? calloc((size_t)sc->n_var * (B + 1), sizeof *s->var_off) : NULL;
        s->tasks = calloc(B, sizeof *s->tasks);
        s->reads = calloc((size_t)B * np, sizeof *s->reads);
        if (!s->fields || !s->ids || !s->source_ids || (sc->n_var && !s->var_off) || !s->tasks ||
            !s->reads)
            return sf_fail(-ENOMEM, "out of memory");
        for (uint32_t f = 0; f < sc->field_count; f++) {
            const sf_field *fd = &sc->fields[f];
            sf_batch_field *bf = &s->fields[f];
            bf->name = fd->name;
            bf->dtype = fd->dtype;
            bf->storage = fd->storage;
            bf->elem_size = sf_dtype_size(fd->dtype);
            bf->ndim = fd->ndim;
            memcpy(bf->shape, fd->shape, sizeof bf->shape);
            bf->item_size = fd->storage == SF_STORAGE_VARIABLE ? 0 : fd->item_size;
            bf->data = s->base + r->layout.field_off[f];
            if (fd->storage == SF_STORAGE_VARIABLE)
                bf->offsets = slot_var_off(r, s, f);
        }
        s->batch.num_fields = sc->field_count;
        s->batch.fields = s->fields;
        s->batch.ids = s->ids;
        s->batch.source_ids = s->source_ids;
        for (uint32_t j = 0; j < B; j++) {
            s->tasks[j].slot = s;
            s->tasks[j].pos = j;
            s->tasks[j].nreads = sc->n_payload;
            s->tasks[j].reads = s->reads + (size_t)j * np;
        }
    }
    return 0;
}

static void slots_free(sf_reader *r)
{
    for (uint32_t i = 0; r->slots && i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        free(s->fields);
        free(s->ids);
        free(s->source_ids);
        free(s->var_off);
        free(s->tasks);
        free(s->reads);
    }
    free(r->slots);
    r->slots = NULL;
}

/* Points position `pos` of slot `s` at sample `id`: the reads of its payload
 * fields (file range -> place in the slot) and its inline values (copied now,
 * from the index). With `repack`, the position already holds a sample and the
 * variable-length fields' packed bytes after it are moved to fit the new
 * lengths (corrupt-sample substitution, after the whole batch was read). */
/* Points task `t` at record `local` of `shard` (sample `id`), nothing read. */
static void task_reset(const sf_reader *r, reader_task *t, uint64_t id, uint64_t shard,
                       uint64_t local, uint64_t offset, uint64_t checksum)
{
    t->id = id;
    t->shard = shard;
    t->local = local;
    t->offset = offset;
    t->checksum = checksum;
    t->fd = r->direct ? r->direct_fds[shard] : r->ds->shards[shard].fd;
    t->file_idx = (uint32_t)shard;
    t->err = 0;
    t->corrupt = 0;
    t->hashed = 0;
    t->next_read = 0;
    t->inflight = 0;
}

/* place_sample for schemas without variable-length fields, the common case
 * and the hot path for small samples: it runs once per sample (in the I/O
 * thread that claimed it), so it reads the three things it needs straight
 * from the index bytes (validated at open) instead of decoding whole entries. */
static void place_fixed_sample(sf_reader *r, reader_slot *s, reader_task *t, uint32_t pos,
                               uint64_t id, uint64_t shard, uint64_t local)
{
    const sf_schema *sc = r->schema;
    const uint8_t *ent = r->ds->shards[shard].meta.index + local * sc->entry_size;
    const uint8_t *inl = ent + SF_INDEX_ENTRY_BASE; /* no variable-length slots before them */
    task_reset(r, t, id, shard, local, sf_get_le64(ent), sf_get_le64(ent + 16));
    uint64_t field_start = 0;
    uint32_t k = 0;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        const sf_field *fd = &sc->fields[f];
        uint8_t *dst = s->base + r->layout.field_off[f] + pos * fd->item_size;
        if (fd->storage == SF_STORAGE_INLINE) {
            memcpy(dst, inl + 8 * (uint32_t)sc->inline_slot[f], fd->item_size);
            continue;
        }
        /* The record layout of SPEC.md: each payload field aligned. */
        if (k)
            field_start = sf_align_up(field_start, r->ds->manifest.align);
        t->reads[k++] =
            (reader_read){t->offset + field_start, fd->item_size, 0, dst, fd->item_size};
        field_start += fd->item_size;
    }
}

static void place_sample(sf_reader *r, reader_slot *s, uint32_t pos, uint64_t id, int repack)
{
    const sf_schema *sc = r->schema;
    reader_task *t = &s->tasks[pos];
    uint64_t local, shard = sf_dataset_locate(r->ds, id, &local);
    if (sc->n_var == 0) {
        place_fixed_sample(r, s, t, pos, id, shard, local);
        return;
    }
    sf_index_entry e;
    sf_dataset_entry(&e, r->ds, shard, local);
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], record_size;
    /* Cannot fail: every entry passed sf_index_check at open. */
    (void)sf_record_layout(sc, r->ds->manifest.align, e.var_len, off, len, &record_size);
    task_reset(r, t, id, shard, local, e.offset, e.checksum);
    uint32_t k = 0;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        const sf_field *fd = &sc->fields[f];
        uint8_t *arr = s->base + r->layout.field_off[f];
        if (fd->storage == SF_STORAGE_INLINE) {
            memcpy(arr + pos * fd->item_size, e.inline_val[sc->inline_slot[f]], fd->item_size);
            continue;
        }
        uint64_t out = slot_value_len(r, f, id, &e);
        uint8_t *dst;
        if (fd->storage == SF_STORAGE_FIXED) {
            dst = arr + pos * fd->item_size;
        } else {
            uint64_t *vo = slot_var_off(r, s, f);
            if (repack) {
                uint64_t old = vo[pos + 1] - vo[pos];
                if (out != old) {
                    uint64_t end = vo[s->batch.size];
                    memmove(arr + vo[pos] + out, arr + vo[pos + 1], end - vo[pos + 1]);
                    for (uint32_t j = pos + 1; j <= s->batch.size; j++)
                        vo[j] = vo[j] - old + out;
                }
            } else {
                vo[pos + 1] = vo[pos] + out;
            }
            /* reader_slab_layout's bound: a batch of distinct samples fits, and
             * substitute() refuses a repeat that would not. */
            assert(vo[repack ? s->batch.size : pos + 1] <= r->layout.field_cap[f]);
            dst = arr + vo[pos];
        }
        t->reads[k] = (reader_read){e.offset + off[k], len[k], 0, dst, out};
        k++;
    }
}

static void set_field_bytes(sf_reader *r, reader_slot *s)
{
    const sf_schema *sc = r->schema;
    for (uint32_t f = 0; f < sc->field_count; f++) {
        sf_batch_field *bf = &s->fields[f];
        bf->bytes = bf->offsets ? bf->offsets[s->batch.size] : s->batch.size * bf->item_size;
    }
}

/* Under r->lock: gives free slot `s` the batch (epoch, index) of the
 * sampler's current epoch. */
static void prepare_slot(sf_reader *r, reader_slot *s, uint64_t epoch, uint64_t index)
{
    uint32_t count = reader_sampler_batch(r->sampler, index, s->ids);
    s->state = SLOT_LOADING;
    s->gen = r->gen;
    s->claimed = 0;
    s->batch.epoch = epoch;
    s->batch.index = index;
    s->batch.size = count;
    s->batch.substituted = 0;
    memcpy(s->source_ids, s->ids, count * sizeof *s->ids);
    assert(count <= r->batch_cap); /* what the slot was sized for */
    for (uint32_t v = 0; v < r->schema->n_var; v++)
        s->var_off[(size_t)v * (r->batch_cap + 1)] = 0;
    /* Fixed-size records are placed by the I/O thread that claims them
     * (reader_claim), outside the lock: placing every sample here kept
     * the consumer, which schedules on release, busy under r->lock for the
     * whole batch while the I/O threads waited. Variable-length fields pack
     * each value after the previous one, so those are placed here, in order. */
    if (r->schema->n_var)
        for (uint32_t pos = 0; pos < count; pos++)
            place_sample(r, s, pos, s->ids[pos], 0);
    set_field_bytes(r, s);
    atomic_store(&s->err, 0);
    atomic_store(&s->corrupt, 0);
    s->errmsg[0] = '\0';
    s->trec = NULL;
    reader_trace *tr = reader_trace_on(r);
    if (tr && tr->nb < tr->cap_b) {
        reader_trace_batch *b = &tr->b[tr->nb++];
        b->epoch = epoch;
        b->index = index;
        b->slot = s->index;
        b->size = count;
        s->trec = b;
        stamp(s, SF_TS_SUBMITTED);
    } else if (tr) {
        tr->dropped_b++;
    }
    atomic_store(&s->reads_left, count);
    atomic_store(&s->remaining, count);
}

/* Under r->lock: fills every free slot with the next batches. Read-ahead
 * runs on into the next epoch, so epochs follow each other without a gap. */
static void schedule_locked(sf_reader *r)
{
    if (!r->started || r->stop || r->num_batches == 0)
        return;
    int any = 0;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (s->state != SLOT_FREE)
            continue;
        if (s->device_busy) {
            /* Freed without a release (read-ahead dropped by a reposition):
             * its copy may still be reading the host slot. Rare and short. */
            r->device_ops->reuse(r->device, s->index);
            s->device_busy = 0;
        }
        if (r->sched_index >= r->num_batches) {
            r->sched_epoch++;
            r->sched_index = 0;
            reader_sampler_set_epoch(r->sampler, r->sched_epoch);
        }
        prepare_slot(r, s, r->sched_epoch, r->sched_index++);
        any = 1;
    }
    if (any)
        pthread_cond_broadcast(&r->work_cv);
}

/* Under r->lock: moves the delivery position, dropping read-ahead that does
 * not belong to it. Loading slots give back their unclaimed tasks and are
 * freed once their reads in flight finish (batch_ready sees the old gen). */
static void reposition_locked(sf_reader *r, uint64_t epoch, uint64_t index, int force)
{
    if (!force && epoch == r->del_epoch && index == r->del_index)
        return;
    r->gen++;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (s->state == SLOT_READY) {
            s->state = SLOT_FREE;
        } else if (s->state == SLOT_LOADING) {
            unsigned unclaimed = s->batch.size - s->claimed;
            s->claimed = s->batch.size;
            if (unclaimed && atomic_fetch_sub(&s->remaining, unclaimed) == unclaimed)
                s->state = SLOT_FREE;
        }
    }
    r->del_epoch = r->sched_epoch = epoch;
    r->del_index = r->sched_index = index;
    reader_sampler_set_epoch(r->sampler, epoch);
    schedule_locked(r);
}

/* ---- the I/O threads' side ------------------------------------------------- */

/* Index entries of a claim looked up ahead of their placement: a shuffled
 * batch's entries are scattered over the index, each a cache miss. */
#define PLACE_AHEAD 8u

/* Finds claimed task t's sample and asks for its index entry. */
static void locate_claimed(const sf_reader *r, reader_task *t)
{
    t->id = t->slot->ids[t->pos];
    t->shard = sf_dataset_locate(r->ds, t->id, &t->local);
    __builtin_prefetch(r->ds->shards[t->shard].meta.index + t->local * r->schema->entry_size);
}

/* Places claimed tasks of a schema without variable-length fields (see
 * prepare_slot): the samples their slots' batches have at their positions. */
static void place_claimed(sf_reader *r, reader_task **tasks, unsigned n)
{
    for (unsigned i = 0; i < n && i < PLACE_AHEAD; i++)
        locate_claimed(r, tasks[i]);
    for (unsigned i = 0; i < n; i++) {
        if (i + PLACE_AHEAD < n)
            locate_claimed(r, tasks[i + PLACE_AHEAD]);
        reader_task *t = tasks[i];
        place_fixed_sample(r, t->slot, t, t->pos, t->id, t->shard, t->local);
    }
}

unsigned reader_claim(sf_reader *r, reader_task **out, unsigned max, int block)
{
    unsigned n = 0;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        if (r->stop)
            break;
        while (n < max) {
            reader_slot *best = NULL;
            for (uint32_t i = 0; i < r->opts.prefetch; i++) {
                reader_slot *s = &r->slots[i];
                if (s->state != SLOT_LOADING || s->gen != r->gen || s->claimed >= s->batch.size)
                    continue;
                if (!best || s->batch.epoch < best->batch.epoch ||
                    (s->batch.epoch == best->batch.epoch && s->batch.index < best->batch.index))
                    best = s;
            }
            if (!best)
                break;
            if (best->claimed == 0)
                stamp(best, SF_TS_CLAIMED);
            while (n < max && best->claimed < best->batch.size)
                out[n++] = &best->tasks[best->claimed++];
        }
        if (n || !block)
            break;
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_io_idle(tr); /* ends this thread's run */
        pthread_cond_wait(&r->work_cv, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    /* The claimed tasks are this thread's until reader_task_done, and
     * their slots stay LOADING until then, so placing them unlocked is safe.
     * Placing looks records up in the index: I/O time in the stats. */
    if (r->schema->n_var == 0 && n) {
        uint64_t t0 = reader_now_ns();
        place_claimed(r, out, n);
        reader_account_time(r, reader_now_ns() - t0, 0);
    }
    if (n) {
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_io_claimed(tr);
    }
    return n;
}

static void vtask_fail(sf_reader *r, reader_task *t, int err, const char *fmt, va_list ap)
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
}

__attribute__((format(printf, 4, 5))) static void task_failf(sf_reader *r, reader_task *t, int err,
                                                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vtask_fail(r, t, err, fmt, ap);
    va_end(ap);
}

/* A corrupt sample, substituted at the batch-ready point (on_corrupt = SKIP). */
static void task_corrupt(reader_task *t)
{
    if (t->corrupt)
        return; /* several of its reads failed */
    t->corrupt = 1;
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
            task_corrupt(t);
        else
            task_failf(r, t, SF_E_TRUNCATED,
                       "%s: the file was cut short while being read (it is now %llu bytes, %llu "
                       "when the dataset was opened)",
                       what, (unsigned long long)now,
                       (unsigned long long)r->ds->shards[t->shard].meta.file_size);
        return;
    }
    task_failf(r, t, err, "%s: %s", what, sf_strerror(err));
}

void reader_task_bad_value(sf_reader *r, reader_task *t)
{
    if (r->opts.on_corrupt == SF_ON_CORRUPT_SKIP)
        task_corrupt(t);
    else
        task_failf(r, t, SF_E_CORRUPT, "%s", sf_last_error());
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

/* Reads candidate after candidate (id+1, id+2, ... modulo n) into the
 * position of corrupt task `t`, synchronously through the buffered fd,
 * until one is intact. Runs at the batch-ready point, so the rest of the
 * batch is complete and packed variable-length bytes can be moved. */
/* Reads task t synchronously through the buffered fd for substitute():
 * 0, SF_E_CHECKSUM, SF_E_CORRUPT or SF_E_TRUNCATED (not usable), or a read
 * error. */
static int load_sync(sf_reader *r, reader_task *t, reader_stager *st)
{
    int rc = 0;
    t->hashed = 0;
    if (r->compressed) {
        rc = reader_stager_load(st, r, t, reader_staged_pread);
    } else {
        int fd = r->ds->shards[t->shard].fd;
        uint64_t t0 = reader_now_ns();
        for (uint32_t k = 0; k < t->nreads && !rc; k++) {
            reader_read *rd = &t->reads[k];
            rc = sf_pread_full(fd, rd->dst, rd->len, rd->off);
            if (!rc)
                rd->done = rd->len;
        }
        reader_account_time(r, reader_now_ns() - t0, 0);
    }
    if (rc)
        return rc;
    for (uint32_t k = 0; k < t->nreads; k++)
        atomic_fetch_add_explicit(&r->st_bytes, t->reads[k].len, memory_order_relaxed);
    uint64_t got;
    return r->opts.verify == SF_VERIFY_ON ? check_task(r, st->xxh, t, &got) : 0;
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
        if (sc->fields[f].storage != SF_STORAGE_VARIABLE)
            continue;
        const uint64_t *vo = slot_var_off(r, s, f);
        uint64_t others = vo[s->batch.size] - (vo[pos + 1] - vo[pos]);
        if (others + slot_value_len(r, f, cand, &e) > r->layout.field_cap[f])
            return 0;
    }
    return 1;
}

static void substitute(sf_reader *r, reader_slot *s, reader_task *t, reader_stager *st)
{
    uint64_t bad = t->id, cand = bad;
    uint64_t tries = r->n - 1 < SUBST_MAX_TRIES ? r->n - 1 : SUBST_MAX_TRIES;
    for (uint64_t i = 0; i < tries; i++) {
        cand = (cand + 1) % r->n;
        if (!substitute_fits(r, s, t->pos, cand))
            continue;
        place_sample(r, s, t->pos, cand, 1);
        int rc = load_sync(r, t, st);
        if (rc == 0) {
            s->source_ids[t->pos] = cand;
            s->batch.substituted++;
            return;
        }
        /* Corrupt, or cut off by a truncation of its shard: try the next. */
        if (rc != SF_E_CHECKSUM && rc != SF_E_CORRUPT && rc != SF_E_TRUNCATED) {
            /* Not reader_task_fail, which may call it one more corrupt sample. */
            task_failf(r, t, rc, "read failed (substituting a corrupt sample): %s", sf_strerror(rc));
            return;
        }
    }
    task_failf(r, t, SF_E_CHECKSUM,
               "checksum mismatch, and no intact sample among the %llu that follow sample %llu",
               (unsigned long long)tries, (unsigned long long)bad);
}

/* The batch-ready point, on the I/O thread that finished the slot's last
 * task (its stager `st` is free again): substitutes corrupt samples,
 * enqueues the device copy, and hands the slot to delivery (or frees it
 * when a reposition made it stale). */
static void batch_ready(sf_reader *r, reader_slot *s, reader_stager *st)
{
    pthread_mutex_lock(&r->lock);
    int live = s->gen == r->gen && !r->stop;
    pthread_mutex_unlock(&r->lock);
    if (live && !atomic_load(&s->err) && atomic_load(&s->corrupt)) {
        for (uint32_t pos = 0; pos < s->batch.size && !atomic_load(&s->err); pos++)
            if (s->tasks[pos].corrupt)
                substitute(r, s, &s->tasks[pos], st);
        set_field_bytes(r, s);
    }
    stamp(s, SF_TS_CHECKSUMMED);
    if (live && !atomic_load(&s->err) && r->device) {
        s->device_busy = 1;
        uint64_t t0 = reader_now_ns();
        int rc = reader_device_copy(r, s);
        uint64_t t1 = reader_now_ns();
        atomic_fetch_add_explicit(&r->st_devenq_ns, t1 - t0, memory_order_relaxed);
        if (s->trec)
            reader_trace_stamp(s->trec, SF_TS_DEV_ENQUEUED, t1);
        int expected = 0;
        if (rc && atomic_compare_exchange_strong(&s->err, &expected, rc))
            snprintf(s->errmsg, sizeof s->errmsg, "batch %llu of epoch %llu: device copy failed: %s",
                     (unsigned long long)s->batch.index, (unsigned long long)s->batch.epoch,
                     sf_strerror(rc));
    }
    pthread_mutex_lock(&r->lock);
    if (s->gen != r->gen) {
        s->state = SLOT_FREE;
        schedule_locked(r);
    } else {
        s->state = SLOT_READY;
        pthread_cond_broadcast(&r->ready_cv);
    }
    pthread_mutex_unlock(&r->lock);
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
        task_corrupt(t);
    } else if (rc == SF_E_CHECKSUM) {
        task_failf(r, t, rc, "checksum mismatch (index says %016llx, payload hashes to %016llx)",
                   (unsigned long long)t->checksum, (unsigned long long)got);
    } else {
        assert(rc == 0);
    }
}

/* Tasks of one slot, finished together on I/O thread `io`: one update of
 * the slot's counters (the shared atomics cost more than a small record's
 * copy). */
static void slot_tasks_done(reader_io_thread *io, reader_task *const *tasks, unsigned n)
{
    sf_reader *r = io->r;
    reader_slot *s = tasks[0]->slot;
    if (s->trec && atomic_fetch_sub(&s->reads_left, n) == n)
        stamp(s, SF_TS_READ);
    for (unsigned i = 0; i < n; i++)
        verify_task(r, io->stager.xxh, tasks[i]);
    reader_trace *tr = reader_trace_on(r);
    for (unsigned i = 0; tr && i < n; i++)
        reader_trace_io_task(tr, s->trec);
    if (atomic_fetch_sub(&s->remaining, n) == n)
        batch_ready(r, s, &io->stager);
}

void reader_tasks_done(reader_io_thread *io, reader_task *const *tasks, unsigned n)
{
    sf_reader *r = io->r;
    uint64_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        for (uint32_t k = 0; k < tasks[i]->nreads; k++)
            bytes += tasks[i]->reads[k].done;
    if (bytes)
        atomic_fetch_add_explicit(&r->st_bytes, bytes, memory_order_relaxed);
    /* Claims hand out tasks in batch order, so a slot's tasks are mostly
     * adjacent; where they are not, its count simply drops in several steps. */
    unsigned first = 0;
    for (unsigned i = 1; i <= n; i++)
        if (i == n || tasks[i]->slot != tasks[first]->slot) {
            slot_tasks_done(io, tasks + first, i - first);
            first = i;
        }
}

void reader_task_done(reader_io_thread *io, reader_task *t)
{
    reader_tasks_done(io, &t, 1);
}

/* ---- engine start/stop ------------------------------------------------------ */

static void *io_main(void *arg)
{
    reader_io_thread *t = arg;
    sf_reader *r = t->r;
    reader_trace_io_thread(t->idx);
    int rc = reader_stager_init(&t->stager, r);
    if (!rc && r->engine->thread_init)
        rc = r->engine->thread_init(t);
    if (rc)
        snprintf(t->errmsg, sizeof t->errmsg, "%s", sf_last_error());
    pthread_mutex_lock(&r->lock);
    t->init_rc = rc;
    r->threads_inited++;
    pthread_cond_broadcast(&r->ready_cv);
    pthread_mutex_unlock(&r->lock);
    if (rc == 0)
        r->engine->run(t);
    reader_trace *tr = reader_trace_on(r);
    if (tr)
        reader_trace_io_idle(tr);
    if (r->engine->thread_fini)
        r->engine->thread_fini(t);
    reader_stager_fini(&t->stager);
    return NULL;
}

static void stop_engine(sf_reader *r)
{
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i].tid, NULL);
    free(r->threads);
    r->threads = NULL;
    r->nthreads = 0;
    if (r->engine && r->engine->close)
        r->engine->close(r);
    r->engine = NULL;
}

static int start_engine(sf_reader *r, const reader_engine_ops *ops)
{
    r->engine = ops;
    r->stop = 0;
    r->threads_inited = 0;
    r->registered = ops == &reader_engine_uring ? r->slab_bytes : 0;
    uint32_t want = r->opts.io_threads ? r->opts.io_threads : default_threads(r, ops);
    int rc = ops->open ? ops->open(r) : 0;
    if (rc) {
        r->engine = NULL;
        return rc;
    }
    r->threads = calloc(want, sizeof *r->threads);
    if (!r->threads) {
        stop_engine(r);
        return sf_fail(-ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < want; i++) {
        reader_io_thread *t = &r->threads[i];
        t->r = r;
        t->idx = i;
        int e = pthread_create(&t->tid, NULL, io_main, t);
        if (e) {
            rc = sf_fail(-e, "cannot start I/O thread: %s", strerror(e));
            break;
        }
        r->nthreads++;
    }
    pthread_mutex_lock(&r->lock);
    while (r->threads_inited < r->nthreads)
        pthread_cond_wait(&r->ready_cv, &r->lock);
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->nthreads && !rc; i++)
        if (r->threads[i].init_rc)
            rc = sf_fail(r->threads[i].init_rc, "%s", r->threads[i].errmsg);
    if (rc)
        stop_engine(r);
    return rc;
}

/* Whether the shards' bytes are in the page cache: a sample of up to 256
 * pages per shard (65,536 in all) checked with mincore, on a mapping that
 * is dropped at once. A hint for the engine choice only. */
static int shards_resident(const sf_reader *r)
{
    uint64_t count = r->ds->manifest.shard_count, page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t per = count ? 65536 / count : 0;
    per = per > 256 ? 256 : per < 1 ? 1 : per;
    uint64_t seen = 0, in = 0;
    for (uint64_t i = 0; i < count; i++) {
        const sf_open_shard *sh = &r->ds->shards[i];
        uint64_t size = sh->meta.file_size, pages = (size + page - 1) / page;
        void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, sh->fd, 0);
        if (map == MAP_FAILED)
            return 0;
        for (uint64_t k = 0; k < per && k < pages; k++) {
            unsigned char v = 0;
            uint64_t pg = pages <= per ? k : k * pages / per;
            if (mincore((uint8_t *)map + pg * page, page, &v) == 0) {
                seen++;
                in += v & 1;
            }
        }
        munmap(map, size);
    }
    return seen > 0 && in * 10 >= seen * 9; /* 90% resident: warm */
}

static int start_io(sf_reader *r)
{
    /* Small fixed records already in the page cache are memcpy work: mmap
     * copies a whole claim with no system call per record, where io_uring
     * and pread pay one read each (about 1.5 M records/s on 2 cores against
     * 4.7 M for mmap on Fashion-MNIST; README "Small records"). Cold data
     * keeps io_uring, whose reads the kernel can batch and queue. */
    if (r->opts.engine == SF_ENGINE_AUTO && !r->direct && !r->compressed &&
        reader_small_records(r) && shards_resident(r))
        return start_engine(r, &reader_engine_mmap);
    /* A record with compressed fields is read whole into a staging buffer
     * and decompressed by the thread that read it (staged.c): synchronous
     * work per record, which the copy engines do; io_uring's asynchronous
     * reads straight into the slot have nothing to offer it. */
    if (r->compressed && r->opts.engine != SF_ENGINE_MMAP)
        return start_engine(r, &reader_engine_pread);
    switch (r->opts.engine) {
    case SF_ENGINE_URING: return start_engine(r, &reader_engine_uring);
    case SF_ENGINE_PREAD: return start_engine(r, &reader_engine_pread);
    case SF_ENGINE_MMAP: return start_engine(r, &reader_engine_mmap);
    default: break;
    }
    int rc = start_engine(r, &reader_engine_uring);
    if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES || rc == -ENOMEM) {
        static atomic_int said;
        if (!atomic_exchange(&said, 1))
            fprintf(stderr, "shardfeed: io_uring is not available (%s%s): using the pread engine\n",
                    sf_strerror(rc),
                    rc == -ENOMEM ? "; its rings count against RLIMIT_MEMLOCK: raise it with ulimit -l"
                                  : "; containers often block it with seccomp");
        rc = start_engine(r, &reader_engine_pread);
    }
    return rc;
}

/* ---- public API -------------------------------------------------------------- */

/* The most samples one batch holds: batch_size, except when the only batch
 * is the short last one (a dataset smaller than a global batch: the sampler
 * cuts it to ceil(n / world_size) samples instead of padding it to
 * batch_size). */
static uint32_t batch_cap(const sf_reader *r)
{
    uint64_t per_epoch = reader_sampler_samples_per_epoch(r->sampler);
    if (r->num_batches > 1 || per_epoch >= r->opts.batch_size)
        return r->opts.batch_size;
    return per_epoch ? (uint32_t)per_epoch : 1;
}

int sf_reader_open(sf_reader **out, const char *dir, const sf_reader_opts *opts)
{
    if (!out || !dir)
        return sf_fail(SF_E_INVALID, "sf_reader_open: NULL argument");
    *out = NULL;
    sf_reader_opts o;
    int rc = resolve_opts(&o, opts);
    if (rc)
        return rc;
    sf_reader *r = calloc(1, sizeof *r);
    if (!r)
        return sf_fail(-ENOMEM, "out of memory");
    r->opts = o;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->work_cv, NULL);
    pthread_cond_init(&r->ready_cv, NULL);
    if ((rc = reader_device_select(&r->device_ops, &o)))
        goto fail;
    if ((rc = sf_dataset_open(&r->ds, dir)))
        goto fail;
    r->schema = &r->ds->manifest.schema;
    r->n = r->ds->manifest.record_count;
    if (r->n == 0) {
        rc = sf_fail(SF_E_INVALID, "%s: the dataset has no samples", dir);
        goto fail;
    }
    reader_sampler_config sc = {
        .n = r->n,
        .seed = o.seed,
        .shuffle = o.shuffle,
        .block_size = o.block_size,
        .window = o.window,
        .batch_size = o.batch_size,
        .rank = o.rank,
        .world_size = o.world_size,
        .drop_last = o.drop_last,
        .uneven = o.uneven,
    };
    if ((rc = reader_sampler_create(&r->sampler, &sc)))
        goto fail;
    r->num_batches = reader_sampler_num_batches(r->sampler);
    r->batch_cap = batch_cap(r);
    uint64_t dec_max[SF_MAX_FIELDS];
    if ((rc = reader_staged_plan(r, dec_max)) ||
        (rc = reader_slab_layout(&r->layout, r, r->batch_cap)))
        goto fail;
    if (o.direct == SF_DIRECT_ON) {
        if ((rc = direct_check(r)) || (rc = open_direct_fds(r)))
            goto fail;
        r->direct = 1;
    }
    if (r->layout.slot_bytes > UINT64_MAX / o.prefetch) {
        rc = sf_fail(SF_E_LIMIT, "batch slab too large");
        goto fail;
    }
    r->slab_bytes = r->layout.slot_bytes * o.prefetch;
    /* Pages that the first batches write anyway are faulted in now, at open,
     * rather than by the I/O threads while they read (a first touch costs
     * about 12 us in the development VM; README "Small records"); room
     * sized for the largest batch of variable-length values is not. */
    int populate = r->layout.exact && r->num_batches >= o.prefetch;
    if ((rc = reader_slab_alloc(&r->slab, r->slab_bytes, populate)) || (rc = slots_init(r)))
        goto fail;
    if (r->device_ops && (rc = reader_device_open(r)))
        goto fail;
    if ((rc = start_io(r)))
        goto fail;
    *out = r;
    return 0;
fail:
    sf_reader_close(r);
    return rc;
}

void sf_reader_close(sf_reader *r)
{
    if (!r)
        return;
    if (r->engine)
        stop_engine(r);
    reader_trace_free_all(atomic_load(&r->trace));
    /* Before the slab is unmapped: the device unregisters it. */
    if (r->device)
        r->device_ops->close(r->device);
    slots_free(r);
    reader_slab_free(r->slab, r->slab_bytes);
    if (r->direct_fds) {
        for (uint64_t i = 0; i < r->ds->manifest.shard_count; i++)
            if (r->direct_fds[i] >= 0)
                close(r->direct_fds[i]);
        free(r->direct_fds);
    }
    reader_sampler_free(r->sampler);
    free(r->zlen);
    sf_dataset_close(r->ds);
    pthread_cond_destroy(&r->ready_cv);
    pthread_cond_destroy(&r->work_cv);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

uint64_t sf_reader_num_batches(const sf_reader *r)
{
    return r ? r->num_batches : 0;
}

uint64_t sf_reader_samples_per_epoch(const sf_reader *r)
{
    return r ? reader_sampler_samples_per_epoch(r->sampler) : 0;
}

int sf_reader_set_epoch(sf_reader *r, uint64_t epoch)
{
    if (!r)
        return sf_fail(SF_E_INVALID, "sf_reader_set_epoch: NULL reader");
    pthread_mutex_lock(&r->lock);
    /* The documented loop calls set_epoch at the top of every epoch, also
     * the first one after a restore: that call must not throw the restored
     * position away and replay the epoch. */
    if (!(r->restored && epoch == r->del_epoch))
        reposition_locked(r, epoch, 0, 0);
    r->restored = 0;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int sf_reader_state(sf_resume_state *out, const sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_state: NULL argument");
    sf_reader *rw = (sf_reader *)r; /* the lock is not part of the value */
    pthread_mutex_lock(&rw->lock);
    out->epoch = r->del_epoch;
    out->next_batch = r->del_index;
    pthread_mutex_unlock(&rw->lock);
    return 0;
}

int sf_reader_restore(sf_reader *r, const sf_resume_state *state)
{
    if (!r || !state)
        return sf_fail(SF_E_INVALID, "sf_reader_restore: NULL argument");
    if (state->next_batch > r->num_batches)
        return sf_fail(SF_E_INVALID, "resume state: batch %llu, but an epoch has %llu batches (were the options the same?)",
                       (unsigned long long)state->next_batch, (unsigned long long)r->num_batches);
    pthread_mutex_lock(&r->lock);
    reposition_locked(r, state->epoch, state->next_batch, 0);
    r->restored = 1;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* Under r->lock: "batches still held (epoch, index): (0, 3) (0, 4) ..." in
 * order, the first HELD_LISTED of them, for the error of a caller who holds
 * every slot: each names a batch a stray reference keeps. */
#define HELD_LISTED 8u
static const char *describe_held_locked(const sf_reader *r, char *buf, size_t cap)
{
    const sf_batch *list[HELD_LISTED];
    uint32_t n = 0, more = 0;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        const sf_batch *b = &r->slots[i].batch;
        if (r->slots[i].state != SLOT_HELD)
            continue;
        /* Insertion into the sorted list, dropping the latest past its end. */
        uint32_t j = n < HELD_LISTED ? n++ : HELD_LISTED;
        more += j == HELD_LISTED;
        for (; j > 0 && (list[j - 1]->epoch > b->epoch ||
                         (list[j - 1]->epoch == b->epoch && list[j - 1]->index > b->index));
             j--)
            if (j < HELD_LISTED)
                list[j] = list[j - 1];
        if (j < HELD_LISTED)
            list[j] = b;
    }
    size_t len = (size_t)snprintf(buf, cap, "batches still held (epoch, index):");
    for (uint32_t j = 0; j < n && len < cap; j++)
        len += (size_t)snprintf(buf + len, cap - len, " (%llu, %llu)",
                                (unsigned long long)list[j]->epoch, (unsigned long long)list[j]->index);
    if (more && len < cap)
        snprintf(buf + len, cap - len, " and %u later ones", more);
    return buf;
}

int sf_reader_next(const sf_batch **out, sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_next: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&r->lock);
    if (!r->st_first_ns)
        r->st_first_ns = reader_now_ns();
    if (!r->started) {
        r->started = 1;
        schedule_locked(r);
    }
    int rc = 0;
    r->restored = 0; /* the restored position is being consumed */
    for (;;) {
        if (r->del_index >= r->num_batches) {
            /* End of the epoch: say so once, then continue with the next. */
            r->del_epoch++;
            r->del_index = 0;
            break;
        }
        if (r->held >= r->opts.prefetch) {
            char held[256];
            rc = sf_fail(SF_E_STATE,
                         "the caller holds all %u batch slots (prefetch = %u): %s; release a batch "
                         "before asking for the next",
                         r->held, r->opts.prefetch, describe_held_locked(r, held, sizeof held));
            break;
        }
        reader_slot *s = NULL;
        for (uint32_t i = 0; i < r->opts.prefetch; i++) {
            reader_slot *c = &r->slots[i];
            if ((c->state == SLOT_READY || c->state == SLOT_LOADING) && c->gen == r->gen &&
                c->batch.epoch == r->del_epoch && c->batch.index == r->del_index) {
                s = c;
                break;
            }
        }
        if (s && s->state == SLOT_READY) {
            int err = atomic_load(&s->err);
            if (err) {
                /* Drop it and everything read ahead; the next call retries. */
                rc = sf_fail(err, "%s", s->errmsg);
                s->state = SLOT_FREE;
                reposition_locked(r, r->del_epoch, r->del_index, 1);
                break;
            }
            s->state = SLOT_HELD;
            r->held++;
            r->del_index++;
            r->st_batches++;
            r->st_samples += s->batch.size;
            r->st_subst += s->batch.substituted;
            stamp(s, SF_TS_HANDED);
            *out = &s->batch;
            break;
        }
        if (!s)
            schedule_locked(r);
        uint64_t t0 = reader_now_ns();
        pthread_cond_wait(&r->ready_cv, &r->lock);
        uint64_t t1 = reader_now_ns();
        r->st_wait_ns += t1 - t0;
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_span_add(tr, SF_SPAN_WAIT, t0, t1, s ? s->trec : NULL);
    }
    r->st_last_ns = reader_now_ns();
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int sf_reader_release_after(sf_reader *r, const sf_batch *batch, void *stream)
{
    if (!r || !batch)
        return sf_fail(SF_E_INVALID, "sf_reader_release: NULL argument");
    reader_slot *s = NULL;
    for (uint32_t i = 0; i < r->opts.prefetch; i++)
        if (&r->slots[i].batch == batch)
            s = &r->slots[i];
    pthread_mutex_lock(&r->lock);
    int held = s && s->state == SLOT_HELD;
    pthread_mutex_unlock(&r->lock);
    if (!held)
        return sf_fail(SF_E_INVALID, "sf_reader_release: not a batch the caller holds");
    /* Still HELD, so no other thread touches the slot: the device may wait
     * here, outside the lock. */
    int rc = 0;
    if (r->device && s->device_busy) {
        /* The next copy into the device buffer waits for the work on
         * `stream`; the host slot is free once its copy no longer reads it. */
        uint64_t t0 = reader_now_ns();
        rc = r->device_ops->release(r->device, s->index, stream);
        int waited = r->device_ops->reuse(r->device, s->index);
        rc = rc ? rc : waited;
        uint64_t t1 = reader_now_ns();
        atomic_fetch_add_explicit(&r->st_devwait_ns, t1 - t0, memory_order_relaxed);
        if (s->trec) {
            /* The copy has finished reading the slot: complete, at the latest now. */
            if (!atomic_load_explicit(&s->trec->t[SF_TS_DEV_DONE], memory_order_relaxed))
                reader_trace_stamp(s->trec, SF_TS_DEV_DONE, t1);
            reader_trace *tr = reader_trace_on(r);
            if (tr)
                reader_trace_span_add(tr, SF_SPAN_RELEASE_WAIT, t0, t1, s->trec);
        }
    }
    pthread_mutex_lock(&r->lock);
    stamp(s, SF_TS_RELEASED);
    s->device_busy = 0;
    s->state = SLOT_FREE;
    r->held--;
    schedule_locked(r);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int sf_reader_release(sf_reader *r, const sf_batch *batch)
{
    return sf_reader_release_after(r, batch, NULL);
}

int sf_batch_wait(sf_reader *r, const sf_batch *batch)
{
    if (!r || !batch)
        return sf_fail(SF_E_INVALID, "sf_batch_wait: NULL argument");
    if (batch->device == SF_DEVICE_CPU)
        return 0;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (&s->batch != batch)
            continue;
        uint64_t t0 = reader_now_ns();
        int rc = r->device ? r->device_ops->wait(r->device, i) : 0;
        uint64_t t1 = reader_now_ns();
        atomic_fetch_add_explicit(&r->st_devwait_ns, t1 - t0, memory_order_relaxed);
        if (s->trec && !rc) {
            if (!atomic_load_explicit(&s->trec->t[SF_TS_DEV_DONE], memory_order_relaxed))
                reader_trace_stamp(s->trec, SF_TS_DEV_DONE, t1);
            reader_trace *tr = reader_trace_on(r);
            if (tr)
                reader_trace_span_add(tr, SF_SPAN_DEVICE_WAIT, t0, t1, s->trec);
        }
        return rc;
    }
    return sf_fail(SF_E_INVALID, "sf_batch_wait: not a batch of this reader");
}

const sf_batch_field *sf_batch_field_find(const sf_batch *b, const char *name)
{
    if (!b || !name)
        return NULL;
    for (uint32_t f = 0; f < b->num_fields; f++)
        if (strcmp(b->fields[f].name, name) == 0)
            return &b->fields[f];
    return NULL;
}

int sf_reader_stats(sf_reader_statistics *out, const sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_stats: NULL argument");
    sf_reader *rw = (sf_reader *)r; /* the lock is not part of the value */
    memset(out, 0, sizeof *out);
    out->bytes_read = atomic_load(&rw->st_bytes);
    out->io_seconds = (double)atomic_load(&rw->st_io_ns) * 1e-9;
    out->checksum_seconds = (double)atomic_load(&rw->st_hash_ns) * 1e-9;
    out->device_enqueue_seconds = (double)atomic_load(&rw->st_devenq_ns) * 1e-9;
    out->device_wait_seconds = (double)atomic_load(&rw->st_devwait_ns) * 1e-9;
    pthread_mutex_lock(&rw->lock);
    out->samples = r->st_samples;
    out->batches = r->st_batches;
    out->corrupt_substitutions = r->st_subst;
    out->wait_seconds = (double)r->st_wait_ns * 1e-9;
    if (r->st_last_ns > r->st_first_ns)
        out->elapsed_seconds = (double)(r->st_last_ns - r->st_first_ns) * 1e-9;
    reader_trace_counts(atomic_load(&rw->trace), &out->trace_events, &out->trace_dropped);
    pthread_mutex_unlock(&rw->lock);
    out->engine = r->engine ? r->engine->name : "none";
    out->direct = r->direct;
    out->registered_bytes = r->registered;
    out->registered_buffers = r->registered && r->registered == r->slab_bytes;
    out->io_threads = r->nthreads;
    out->queue_depth = r->engine == &reader_engine_uring ? r->opts.queue_depth : 1;
    out->prefetch = r->opts.prefetch;
    out->slab_bytes = r->slab_bytes;
    out->device = r->opts.device == SF_DEVICE_CUDA ? "cuda"
                  : r->opts.device == SF_DEVICE_HOST_COPY ? "host-copy" : "cpu";
    out->device_bytes = r->device ? r->device_ops->bytes(r->device) : 0;
    return 0;
}

/* The rule is documented in shardfeed/reader.h (sf_reader_verdict); the
 * README and `shardfeed bench` print the same. */
int sf_reader_verdict(sf_reader_bottleneck *out, const sf_reader_statistics *st)
{
    if (!out || !st)
        return sf_fail(SF_E_INVALID, "sf_reader_verdict: NULL argument");
    memset(out, 0, sizeof *out);
    out->verdict = "none";
    double el = st->elapsed_seconds;
    double busy = st->io_seconds + st->checksum_seconds + st->device_enqueue_seconds;
    if (busy > 0) {
        out->io_share = st->io_seconds / busy;
        out->checksum_share = st->checksum_seconds / busy;
        out->copy_share = st->device_enqueue_seconds / busy;
    }
    if (st->batches == 0 || !(el > 0))
        return 0;
    out->consumer_wait = st->wait_seconds / el;
    out->device_wait = st->device_wait_seconds / el;
    if (st->io_threads)
        out->io_busy = busy / ((double)st->io_threads * el);
    if (out->consumer_wait + out->device_wait < SF_VERDICT_STALL_MAX)
        out->verdict = "consumer-bound";
    else if (st->device_wait_seconds > st->wait_seconds)
        out->verdict = "copy-bound";
    else if (st->device_enqueue_seconds > st->io_seconds && st->device_enqueue_seconds > st->checksum_seconds)
        out->verdict = "copy-bound";
    else if (st->checksum_seconds > st->io_seconds)
        out->verdict = "checksum-bound";
    else
        out->verdict = "io-bound";
    return 0;
}
