/* Writes one shard file: header, aligned records, index, footer; under a
 * temporary name, fsync'd, renamed, directory fsync'd (SPEC.md "Writer
 * rules"). Or keeps a finished shard of an interrupted run that checks
 * clean. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "format/hash.h"

#include "format/error_internal.h"
#include "format/le.h"
#include "format/shard_file.h"
#include "pack_internal.h"

/* Records are gathered in a buffer of at least this size between writes. */
#define WRITE_BUFFER (8u << 20)

static void add_progress(const pack_writer_ctx *ctx, uint64_t samples, uint64_t bytes)
{
    atomic_fetch_add(ctx->samples_done, samples);
    atomic_fetch_add(ctx->bytes_done, bytes);
}

/* Keeps shard i from an earlier run when it is exactly what this run would
 * write: same dataset, same records, every check of verify passing. */
static int try_keep(const pack_writer_ctx *ctx, uint64_t i, const char *path, pack_shard_result *res)
{
    const pack_shard_plan *sp = &ctx->plan->shards[i];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    sf_shard_expect exp = {&ctx->in->schema, i, ctx->plan->dataset_id, ctx->plan->align, NULL};
    sf_shard_meta m;
    int keep = 0;
    if (sf_shard_load_meta(&m, fd, &exp, NULL) == 0) {
        if (m.header.record_count == sp->count &&
            m.header.first_record == sp->first - ctx->plan->record_base) {
            uint8_t *buf = malloc(WRITE_BUFFER);
            if (buf && sf_shard_scan_data(&m, &ctx->in->schema, fd, buf, WRITE_BUFFER, NULL, NULL) == 0)
                keep = 1;
            free(buf);
        }
        res->header_checksum = m.header.checksum;
        res->index_checksum = m.footer.index_checksum;
        res->file_size = m.file_size;
        sf_shard_meta_clear(&m);
    }
    close(fd);
    sf_clear_error();
    return keep;
}

typedef struct writer {
    int fd;
    uint8_t *buf;        /* records gathered between writes */
    uint64_t cap, used;
    uint64_t written; /* bytes of the file written so far */
    uint8_t *raw;        /* a value before compression */
    uint64_t raw_cap;
    pack_compressor *zc;
    XXH3_state_t *hash;
    void *cursor; /* the worker's input cursor */
} writer;

static int grow(uint8_t **buf, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return 0;
    uint8_t *n = realloc(*buf, need);
    if (!n)
        return sf_fail(-ENOMEM, "out of memory for a %llu-byte record", (unsigned long long)need);
    *buf = n;
    *cap = need;
    return 0;
}

static int flush(writer *w, const char *path)
{
    int rc = pack_write_full(w->fd, w->buf, w->used);
    if (rc)
        return sf_fail(rc, "%s: write failed: %s", path, strerror(-rc));
    /* Start writeback of what was just written, so the disk works while
     * the next records are read and the shard's final fsync finds little
     * left to do. A hint only: fsync is what makes the data durable. */
    (void)sync_file_range(w->fd, (off64_t)w->written, (off64_t)w->used, SYNC_FILE_RANGE_WRITE);
    w->written += w->used;
    w->used = 0;
    return 0;
}

/* The most file bytes record r can take: values uncompressed or at their
 * compression bound, each padded to the alignment. */
static uint64_t record_bound(const pack_writer_ctx *ctx, uint64_t r)
{
    const sf_schema *s = &ctx->in->schema;
    uint64_t a = ctx->plan->align, total = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        if (s->fields[f].storage == SF_STORE_INLINE)
            continue;
        uint64_t len = ctx->in->sizes[r * s->field_count + f];
        if (s->fields[f].codec)
            len = pack_compress_bound(len);
        total += sf_align_up(len, a);
    }
    return total;
}

/* Appends record r (all fields of one input sample) at w->buf + w->used,
 * which has room for record_bound() bytes. */
static int add_record(const pack_writer_ctx *ctx, writer *w, uint64_t r, uint64_t file_off,
                      sf_index_entry *e)
{
    const pack_input *in = ctx->in;
    const sf_schema *s = &in->schema;
    uint64_t align = ctx->plan->align;
    uint8_t *rec = w->buf + w->used;
    uint64_t pos = 0; /* bytes of the record so far, padding included */
    int first = 1;
    XXH3_64bits_reset(w->hash);
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        uint64_t len = in->sizes[r * s->field_count + f];
        int rc;
        if (fd->storage == SF_STORE_INLINE) {
            uint8_t *val = e->inline_val[s->inline_slot[f]];
            memset(val, 0, SF_MAX_INLINE_BYTES);
            if ((rc = in->ops->read(w->cursor, in, r, f, val)))
                return rc;
            continue;
        }
        /* Each payload field starts on an alignment boundary. */
        uint64_t at = first ? 0 : sf_align_up(pos, align);
        memset(rec + pos, 0, at - pos);
        first = 0;
        uint64_t stored = len;
        if (fd->codec) {
            if ((rc = grow(&w->raw, &w->raw_cap, len ? len : 1)) ||
                (rc = in->ops->read(w->cursor, in, r, f, w->raw)) ||
                (rc = pack_compress(w->zc, ctx->plan->levels[f], rec + at, pack_compress_bound(len),
                                    w->raw, len, &stored)))
                return sf_fail_prefix(rc, in->keys[r]);
        } else if ((rc = in->ops->read(w->cursor, in, r, f, rec + at))) {
            return rc;
        }
        if (s->var_slot[f] >= 0)
            e->var_len[s->var_slot[f]] = stored;
        XXH3_64bits_update(w->hash, rec + at, stored);
        pos = at + stored;
    }
    uint64_t stride = sf_align_up(pos, align);
    memset(rec + pos, 0, stride - pos); /* padding up to the next record */
    e->offset = file_off;
    e->size = pos;
    e->checksum = XXH3_64bits_digest(w->hash);
    w->used += stride;
    add_progress(ctx, 1, pos);
    return 0;
}

static int pwrite_header(int fd, const uint8_t *hbuf)
{
    ssize_t n = pwrite(fd, hbuf, SF_SHARD_HEADER_SIZE, 0);
    if (n == SF_SHARD_HEADER_SIZE)
        return 0;
    return n < 0 ? -errno : -ENOSPC;
}

static int write_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, const char *tmp,
                       pack_shard_result *res)
{
    const pack_input *in = ctx->in;
    const pack_plan *plan = ctx->plan;
    const pack_shard_plan *sp = &plan->shards[i];
    const sf_schema *s = &in->schema;
    uint64_t data_off = sf_data_offset(plan->align);

    writer w = {.fd = -1, .cursor = cursor};
    w.cap = WRITE_BUFFER;
    w.buf = malloc(w.cap);
    uint8_t *index = calloc(1, sp->index_size ? sp->index_size : 1);
    w.hash = XXH3_createState();
    int rc = 0;
    if (!w.buf || !index || !w.hash) {
        rc = sf_fail(-ENOMEM, "out of memory for shard %llu", (unsigned long long)i);
        goto out;
    }
    for (uint32_t f = 0; f < s->field_count && !w.zc; f++)
        if (s->fields[f].codec && (rc = pack_compressor_new(&w.zc)))
            goto out;
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (w.fd < 0) {
        rc = sf_fail(-errno, "%s: cannot create: %s", tmp, pack_strerror(errno));
        goto out;
    }

    /* The header needs the index offset, known once the records are
     * written (compressed sizes): zeros now, the header at the end. */
    memset(w.buf, 0, data_off);
    w.used = data_off;
    uint8_t *keys = index + sp->count * s->entry_size;
    uint32_t key_pos = 0;
    uint64_t file_off = data_off;
    sf_index_entry e;
    memset(&e, 0, sizeof e);
    for (uint64_t k = 0; k < sp->count && rc == 0; k++) {
        uint64_t r = sp->first + k;
        uint64_t need = record_bound(ctx, r);
        if (atomic_load(ctx->abort))
            rc = SF_E_STATE; /* another worker failed; its error is the one reported */
        else if (w.used + need > w.cap && w.used > 0)
            rc = flush(&w, tmp);
        if (!rc)
            rc = grow(&w.buf, &w.cap, need);
        if (!rc)
            rc = add_record(ctx, &w, r, file_off, &e);
        if (rc)
            break;
        const char *key = in->keys[r];
        e.key_offset = key_pos;
        e.key_length = (uint16_t)strlen(key);
        memcpy(keys + key_pos, key, e.key_length);
        key_pos += e.key_length;
        sf_index_entry_encode(index + k * s->entry_size, s, &e);
        file_off = sf_align_up(e.offset + e.size, plan->align);
    }
    if (!rc)
        rc = flush(&w, tmp);
    if (rc)
        goto out;

    sf_shard_header h = {
        .version_major = SF_FORMAT_MAJOR,
        .version_minor = SF_FORMAT_MINOR,
        .align = plan->align,
        .shard_index = i,
        .record_count = sp->count,
        .first_record = sp->first - plan->record_base,
        .data_offset = data_off,
        .index_offset = file_off,
        .index_size = sp->index_size,
        .index_entry_size = s->entry_size,
        .field_count = s->field_count,
        .schema_hash = sf_schema_hash(s),
        .dataset_id = plan->dataset_id,
    };
    uint8_t hbuf[SF_SHARD_HEADER_SIZE];
    sf_shard_header_encode(hbuf, &h);
    sf_shard_footer f = {
        .index_offset = h.index_offset,
        .index_size = sp->index_size,
        .record_count = sp->count,
        .index_checksum = sf_hash(index, sp->index_size),
        .header_checksum = h.checksum,
    };
    uint8_t fbuf[SF_SHARD_FOOTER_SIZE];
    sf_shard_footer_encode(fbuf, &f);
    if ((rc = pack_write_full(w.fd, index, sp->index_size)) ||
        (rc = pack_write_full(w.fd, fbuf, sizeof fbuf)) ||
        (rc = pwrite_header(w.fd, hbuf))) {
        rc = sf_fail(rc, "%s: write failed: %s", tmp, strerror(-rc));
        goto out;
    }
    if (fsync(w.fd) != 0) {
        rc = sf_fail(-errno, "%s: fsync failed: %s", tmp, strerror(errno));
        goto out;
    }
    res->header_checksum = h.checksum;
    res->index_checksum = f.index_checksum;
    res->file_size = h.index_offset + sp->index_size + SF_SHARD_FOOTER_SIZE;
out:
    if (w.fd >= 0 && close(w.fd) != 0 && !rc)
        rc = sf_fail(-errno, "%s: close failed: %s", tmp, strerror(errno));
    pack_compressor_free(w.zc);
    free(w.buf);
    free(w.raw);
    free(index);
    XXH3_freeState(w.hash);
    return rc;
}

int pack_write_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, int try_reuse,
                     pack_shard_result *res)
{
    char name[SF_SHARD_NAME_MAX], path[4096], tmp[4096];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
    snprintf(path, sizeof path, "%s/%s", ctx->out_dir, name);
    pack_temp_path(tmp, sizeof tmp, ctx->out_dir, name, ctx->plan->dataset_id);
    memset(res, 0, sizeof *res);
    if (try_reuse) {
        if (try_keep(ctx, i, path, res)) {
            const pack_shard_plan *sp = &ctx->plan->shards[i];
            res->reused = 1;
            uint64_t bytes = 0;
            for (uint64_t r = sp->first; r < sp->first + sp->count; r++)
                for (uint32_t f = 0; f < ctx->in->schema.field_count; f++)
                    bytes += ctx->in->sizes[r * ctx->in->schema.field_count + f];
            add_progress(ctx, sp->count, bytes);
            return 0;
        }
        unlink(path);
    }
    int rc = write_shard(ctx, cursor, i, tmp, res);
    if (!rc && rename(tmp, path) != 0)
        rc = sf_fail(-errno, "%s: rename failed: %s", path, strerror(errno));
    if (!rc)
        rc = pack_fsync_dir(ctx->out_dir);
    if (rc)
        unlink(tmp);
    return rc;
}
