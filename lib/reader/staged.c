/* Records with compressed fields: the open-time plan (which fields, how long
 * each variable-length value is once decompressed) and the staged load of a
 * record (reader_internal.h, "staged.c"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include "hash.h"

#include "value_codec.h"
#include "error_internal.h"
#include "reader_internal.h"

#define CONFIRM_CHUNK (256u << 10)

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
    for (uint64_t sh = 0; sh < r->ds->manifest.shard_count; sh++) {
        for (uint64_t i = 0; i < r->ds->shards[sh].meta.header.record_count; i++) {
            sf_dataset_entry(&e, r->ds, sh, i);
            (void)sf_record_layout(s, r->ds->manifest.align, e.var_len, off, len, &size);
            uint64_t sum = 0;
            for (k = 0; k < s->n_payload; k++)
                if (field_staged(r, r->payload_field[k]))
                    sum += len[k];
            if (sum > r->stage_bytes)
                r->stage_bytes = sum;
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
    if (reader_image_scratch_init(st, r) || r->stage_bytes > SIZE_MAX ||
        !(st->stage = malloc((size_t)r->stage_bytes)) || !(st->dctx = ZSTD_createDCtx())) {
        reader_scratch_fini(st);
        return sf_fail(-ENOMEM, "out of memory for a %llu-byte staging buffer",
                       (unsigned long long)r->stage_bytes);
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

int reader_staged_load(reader_scratch *st, sf_reader *r, reader_task *t, reader_copy_fn copy)
{
    const sf_schema *s = r->schema;
    XXH3_state_t *xxh = st->xxh;
    int verify = r->opts.verify == SF_VERIFY_ON;
    uint64_t t0 = reader_now_ns(), io_ns = 0, hash_ns = 0, t1;
    uint8_t *src[SF_MAX_FIELDS];
    uint64_t staged = 0;
    int rc = 0;
    if (verify)
        XXH3_64bits_reset(xxh);
    for (uint32_t k = 0; k < t->nreads && !rc; k++) {
        reader_read *rd = &t->reads[k];
        int z = field_staged(r, r->payload_field[k]);
        /* Sized from the index at open: every record's values fit. */
        src[k] = z ? st->stage + staged : rd->dst;
        staged += z ? rd->len : 0;
        rc = copy(r, t, src[k], rd->off, rd->len);
        if (rc)
            break;
        rd->done = rd->len;
        t1 = reader_now_ns();
        io_ns += t1 - t0;
        t0 = t1;
        if (verify) {
            XXH3_64bits_update(xxh, src[k], rd->len);
            t0 = reader_now_ns();
            hash_ns += t0 - t1;
        }
    }
    if (!rc && verify) {
        t->digest = XXH3_64bits_digest(xxh);
        t->hashed = 1;
        if (t->digest != t->checksum)
            rc = SF_E_CHECKSUM; /* never decompress what fails its checksum */
    }
    uint64_t decode_ns = 0;
    for (uint32_t k = 0; k < t->nreads && !rc; k++) {
        uint32_t fi = r->payload_field[k];
        const sf_field *f = &s->fields[fi];
        if (reader_image_field(r, fi)) {
            uint64_t d0 = reader_now_ns();
            rc = reader_image_value(st, r, t, fi, src[k], t->reads[k].len, t->reads[k].dst);
            decode_ns += reader_now_ns() - d0;
        } else if (f->codec != SF_CODEC_NONE) {
            rc = sf_decompress_value(t->reads[k].dst, t->reads[k].out_len, f, src[k],
                                     t->reads[k].len, st->dctx);
        }
    }
    /* Decompression counts as I/O time: it is the read of a compressed
     * field. Image decoding is a stage of its own. */
    reader_account_time(r, io_ns + (reader_now_ns() - t0) - decode_ns, hash_ns);
    reader_account_decode(r, decode_ns);
    return rc;
}
