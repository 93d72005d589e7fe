/* Records with compressed fields: the open-time plan (which fields, how long
 * each variable-length value is once decompressed) and the staged load of a
 * record (reader_internal.h, "staged.c"). */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include "hash.h"

#include "value_codec.h"
#include "error_internal.h"
#include "reader_internal.h"

#define CONFIRM_CHUNK (256u << 10)

/* Records whose source is prefetched ahead of the copy (reader_copy_ops). */
#define STAGED_COPY_AHEAD 2u

/* Hashes record e's stored payload fields from the buffered fd, CONFIRM_CHUNK
 * bytes at a time. Returns 0 when it matches the index, SF_E_CHECKSUM when
 * not, or a read error. */
static int record_intact(const sf_reader *r, int fd, const sf_index_entry *e, const uint64_t *off,
                         const uint64_t *len, uint8_t *buf, XXH3_state_t *st)
{
    XXH3_64bits_reset(st);
    for (uint32_t k = 0; k < r->schema->n_payload; k++) {
        for (uint64_t done = 0; done < len[k];) {
            uint64_t n = len[k] - done < CONFIRM_CHUNK ? len[k] - done : CONFIRM_CHUNK;
            int rc = sf_pread_full(fd, buf, n, e->offset + off[k] + done);
            if (rc)
                return rc;
            XXH3_64bits_update(st, buf, n);
            done += n;
        }
    }
    return XXH3_64bits_digest(st) == e->checksum ? 0 : SF_E_CHECKSUM;
}

/* The slot needs every variable-length value's decompressed length before
 * its reads are placed (packed bytes + offsets, exactly as for the
 * uncompressed dataset), and the slab needs the longest. The index holds
 * only stored lengths, so we read each frame header once here. A header
 * that is unusable gives length 0 (the value then fails when read, as a
 * corrupt record). A header that would raise a field's maximum -- and so
 * the slab -- is only believed once its record's checksum holds: a flipped
 * bit cannot make the reader allocate up to 2^30 bytes per batch position.
 * New maxima are rare in any order but a sorted one, so this costs few
 * whole-record reads. */
static int scan_lengths(sf_reader *r, uint64_t *dec_max)
{
    const sf_schema *s = r->schema;
    const sf_dataset *ds = r->ds;
    if (r->n > SIZE_MAX / sizeof *r->zlen / r->n_zvar)
        return sf_fail(-ENOMEM, "too many compressed values to index");
    r->zlen = malloc((size_t)r->n * r->n_zvar * sizeof *r->zlen);
    uint8_t *buf = malloc(CONFIRM_CHUNK);
    XXH3_state_t *st = XXH3_createState();
    int rc = 0;
    if (!r->zlen || !buf || !st)
        rc = sf_fail(-ENOMEM, "out of memory");
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size, id = 0;
    sf_index_entry e;
    for (uint64_t sh = 0; sh < ds->manifest.shard_count && !rc; sh++) {
        const sf_open_shard *os = &ds->shards[sh];
        int fd;
        if ((rc = dataset_fd_acquire(&fd, r->ds, sh, 0)))
            break;
        for (uint64_t i = 0; i < os->meta.header.record_count && !rc; i++, id++) {
            sf_dataset_entry(&e, ds, sh, i);
            (void)sf_record_layout(s, ds->manifest.align, e.var_len, off, len, &size); /* checked at open */
            int confirmed = 0;
            for (uint32_t k = 0; k < s->n_payload && !rc; k++) {
                uint32_t f = r->payload_field[k];
                int z = r->zvar_slot[f];
                if (z < 0)
                    continue;
                uint8_t head[SF_ZSTD_HEADER_MAX];
                uint64_t hl = len[k] < sizeof head ? len[k] : sizeof head, cs = 0;
                uint32_t *slot = &r->zlen[id * r->n_zvar + (uint32_t)z];
                *slot = 0;
                if ((rc = sf_pread_full(fd, head, hl, e.offset + off[k]))) {
                    rc = sf_fail(rc, "%s/%s: record %llu: reading a zstd frame header: %s", ds->dir,
                                 os->name, (unsigned long long)i, sf_strerror(rc));
                    break;
                }
                if (sf_zstd_content_size(&cs, &s->fields[f], head, hl) != 0)
                    continue;
                if (cs > dec_max[f] && !confirmed) {
                    int ok = record_intact(r, fd, &e, off, len, buf, st);
                    if (ok == SF_E_CHECKSUM)
                        continue;
                    if (ok) {
                        rc = sf_fail(ok, "%s/%s: record %llu: %s", ds->dir, os->name,
                                     (unsigned long long)i, sf_strerror(ok));
                        break;
                    }
                    confirmed = 1;
                }
                if (cs > dec_max[f])
                    dec_max[f] = cs;
                *slot = (uint32_t)cs;
            }
        }
        dataset_fd_release(r->ds, sh, 0);
    }
    XXH3_freeState(st);
    free(buf);
    return rc;
}

/* Whether field f's stored bytes go to the staging buffer: compressed, or
 * an encoded image to decode. */
static int field_staged(const sf_reader *r, uint32_t f)
{
    return r->schema->fields[f].codec != SF_CODEC_NONE || reader_image_field(r, f);
}

int reader_staged_plan(sf_reader *r, uint64_t dec_max[SF_MAX_FIELDS])
{
    const sf_schema *s = r->schema;
    memset(dec_max, 0, SF_MAX_FIELDS * sizeof *dec_max);
    r->compressed = r->images != NULL; /* image fields are staged too (transform.c) */
    r->n_zvar = 0;
    uint32_t k = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        r->zvar_slot[f] = -1;
        if (fd->storage == SF_STORAGE_INLINE)
            continue;
        r->payload_field[k++] = f;
        if (fd->codec == SF_CODEC_NONE)
            continue;
        r->compressed = 1;
        if (fd->storage == SF_STORAGE_VARIABLE)
            r->zvar_slot[f] = (int8_t)r->n_zvar++;
    }
    if (!r->compressed)
        return 0;
    /* The stage holds one record's compressed values: size it from the index. */
    uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size;
    sf_index_entry e;
    r->stage_bytes = 1;
    r->stored_max = 0;
    for (uint64_t sh = 0; sh < r->ds->manifest.shard_count; sh++) {
        for (uint64_t i = 0; i < r->ds->shards[sh].meta.header.record_count; i++) {
            sf_dataset_entry(&e, r->ds, sh, i);
            (void)sf_record_layout(s, r->ds->manifest.align, e.var_len, off, len, &size);
            uint64_t sum = 0, all = 0;
            for (k = 0; k < s->n_payload; k++) {
                all += len[k];
                if (field_staged(r, r->payload_field[k]))
                    sum += len[k];
            }
            if (sum > r->stage_bytes)
                r->stage_bytes = sum;
            if (all > r->stored_max)
                r->stored_max = all;
        }
    }
    return r->n_zvar ? scan_lengths(r, dec_max) : 0;
}

int reader_scratch_init(reader_scratch *st, const sf_reader *r)
{
    memset(st, 0, sizeof *st);
    st->xxh = XXH3_createState();
    if (!st->xxh)
        return sf_fail(-ENOMEM, "out of memory");
    if (!r->compressed)
        return 0;
    unsigned claim = reader_staged_claim_max(r);
    uint64_t bytes = r->stage_bytes * (claim ? claim : 1); /* claim: at most SF_STAGED_CLAIM_BYTES */
    if (reader_image_scratch_init(st, r) || bytes > SIZE_MAX ||
        !(st->stage = malloc((size_t)bytes)) || !(st->dctx = ZSTD_createDCtx())) {
        reader_scratch_fini(st);
        return sf_fail(-ENOMEM, "out of memory for a %llu-byte staging buffer",
                       (unsigned long long)bytes);
    }
    return 0;
}

void reader_scratch_fini(reader_scratch *st)
{
    XXH3_freeState(st->xxh);
    ZSTD_freeDCtx(st->dctx);
    reader_image_scratch_fini(st);
    free(st->stage);
    memset(st, 0, sizeof *st);
}

int reader_staged_pread(const sf_reader *r, const reader_task *task, uint8_t *dst, uint64_t off,
                        uint64_t len)
{
    (void)r;
    return sf_pread_full(task->fd, dst, len, off);
}

/* Where each read of task t lands: a staged field's stored bytes at the
 * next free byte from `stage` on, any other field straight at its slot
 * position. Returns the staged bytes. */
static uint64_t staged_sources(const sf_reader *r, const reader_task *t, uint8_t *stage,
                               uint8_t *src[SF_MAX_FIELDS])
{
    uint64_t staged = 0;
    for (uint32_t k = 0; k < t->nreads; k++) {
        int z = field_staged(r, r->payload_field[k]);
        /* Sized from the index at open: every record's values fit. */
        src[k] = z ? stage + staged : t->reads[k].dst;
        staged += z ? t->reads[k].len : 0;
    }
    return staged;
}

/* Hashes task t's stored bytes (at src) with xxh; sets t->digest/hashed.
 * Returns 0, or SF_E_CHECKSUM when they do not match the index. */
static int staged_check(XXH3_state_t *xxh, reader_task *t, uint8_t *const src[SF_MAX_FIELDS])
{
    if (t->nreads == 1) {
        t->digest = XXH3_64bits(src[0], t->reads[0].len);
    } else {
        XXH3_64bits_reset(xxh);
        for (uint32_t k = 0; k < t->nreads; k++)
            XXH3_64bits_update(xxh, src[k], t->reads[k].len);
        t->digest = XXH3_64bits_digest(xxh);
    }
    t->hashed = 1;
    return t->digest == t->checksum ? 0 : SF_E_CHECKSUM; /* never decompress what fails */
}

/* Decompresses (or decodes) task t's staged values from src into the slot;
 * adds the time spent decoding images to *decode_ns. */
static int staged_decode(reader_scratch *st, sf_reader *r, reader_task *t,
                         uint8_t *const src[SF_MAX_FIELDS], uint64_t *decode_ns)
{
    int rc = 0;
    for (uint32_t k = 0; k < t->nreads && !rc; k++) {
        uint32_t fi = r->payload_field[k];
        const sf_field *f = &r->schema->fields[fi];
        if (reader_image_field(r, fi)) {
            uint64_t d0 = reader_now_ns();
            rc = reader_image_value(st, r, t, fi, src[k], t->reads[k].len, t->reads[k].dst);
            *decode_ns += reader_now_ns() - d0;
        } else if (f->codec != SF_CODEC_NONE) {
            rc = sf_decompress_value(t->reads[k].dst, t->reads[k].out_len, f, src[k],
                                     t->reads[k].len, st->dctx);
        }
    }
    return rc;
}

int reader_staged_load(reader_scratch *st, sf_reader *r, reader_task *t, reader_copy_fn copy)
{
    int verify = r->opts.verify == SF_VERIFY_ON;
    uint64_t t0 = reader_now_ns(), t1, hash_ns = 0, decode_ns = 0;
    uint8_t *src[SF_MAX_FIELDS];
    (void)staged_sources(r, t, st->stage, src);
    int rc = 0;
    for (uint32_t k = 0; k < t->nreads && !rc; k++) {
        reader_read *rd = &t->reads[k];
        if (!(rc = copy(r, t, src[k], rd->off, rd->len)))
            rd->done = rd->len;
    }
    t1 = reader_now_ns();
    if (!rc && verify) {
        rc = staged_check(st->xxh, t, src);
        hash_ns = reader_now_ns() - t1;
    }
    if (!rc)
        rc = staged_decode(st, r, t, src, &decode_ns);
    /* Decompression counts as I/O time: it is the read of a compressed
     * field. Image decoding is a stage of its own. */
    reader_account_time(r, reader_now_ns() - t0 - hash_ns - decode_ns, hash_ns);
    reader_account_decode(r, decode_ns);
    return rc;
}

unsigned reader_staged_claim_max(const sf_reader *r)
{
    if (!r->compressed || r->images || r->stored_max > SF_STAGED_CLAIM_BYTES / 2)
        return 0;
    /* stage_bytes <= stored_max: the staging buffer holds the claim's staged bytes. */
    uint64_t n = SF_STAGED_CLAIM_BYTES / (r->stored_max ? r->stored_max : 1);
    return n > SF_STAGED_CLAIM_MAX ? SF_STAGED_CLAIM_MAX : (unsigned)n;
}

void reader_staged_claim(reader_io_thread *io, reader_task *const *tasks, unsigned n,
                         const reader_copy_ops *ops)
{
    sf_reader *r = io->r;
    reader_scratch *st = &io->scratch;
    uint8_t *base[SF_STAGED_CLAIM_MAX], *src[SF_MAX_FIELDS], *at = st->stage;
    assert(n <= reader_staged_claim_max(r));
    /* Copy: every record's stored bytes, the next one's prefetched. */
    uint64_t t0 = reader_now_ns();
    for (unsigned i = 0; ops->prefetch && i < n && i < STAGED_COPY_AHEAD; i++)
        ops->prefetch(r, tasks[i]);
    for (unsigned i = 0; i < n; i++) {
        reader_task *t = tasks[i];
        if (ops->prefetch && i + STAGED_COPY_AHEAD < n)
            ops->prefetch(r, tasks[i + STAGED_COPY_AHEAD]);
        base[i] = at;
        int rc = ops->open && t->nreads ? ops->open(r, t) : 0;
        if (rc) {
            reader_task_open_failed(r, t, rc);
            continue;
        }
        at += staged_sources(r, t, at, src);
        for (uint32_t k = 0; k < t->nreads && !rc; k++) {
            reader_read *rd = &t->reads[k];
            if (!(rc = ops->copy(r, t, src[k], rd->off, rd->len)))
                rd->done = rd->len;
        }
        reader_task_close(r, t);
        if (rc)
            reader_task_fail(r, t, rc, "read failed");
    }
    /* Check: each record hashed from the stage while the claim is in cache. */
    uint64_t t1 = reader_now_ns(), t2 = t1;
    if (r->opts.verify == SF_VERIFY_ON) {
        for (unsigned i = 0; i < n; i++)
            if (!tasks[i]->err && !tasks[i]->corrupt) {
                (void)staged_sources(r, tasks[i], base[i], src);
                (void)staged_check(st->xxh, tasks[i], src); /* judged when done */
            }
        t2 = reader_now_ns();
    }
    /* Decompress what checked out. */
    uint64_t decode_ns = 0;
    for (unsigned i = 0; i < n; i++) {
        reader_task *t = tasks[i];
        if (t->err || t->corrupt || (t->hashed && t->digest != t->checksum))
            continue;
        (void)staged_sources(r, t, base[i], src);
        int rc = staged_decode(st, r, t, src, &decode_ns);
        if (rc == SF_E_CORRUPT)
            reader_task_bad_value(r, t);
        else if (rc)
            reader_task_fail(r, t, rc, "read failed");
    }
    uint64_t t3 = reader_now_ns();
    reader_account_time(r, (t1 - t0) + (t3 - t2) - decode_ns, t2 - t1);
    reader_account_decode(r, decode_ns);
    reader_tasks_done(io, tasks, n);
}
