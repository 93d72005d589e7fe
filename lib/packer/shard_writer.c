/* Writes one shard file: header, aligned records, index, footer; under a
 * temporary name, fsync'd, renamed, directory fsync'd (SPEC.md "Writer
 * rules"). Or keeps a shard that is already there, once proven to be
 * exactly what this run writes: the same code makes the shard from the
 * input with nothing as its sink, and the file must match it. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hash.h"

#include "error_internal.h"
#include "le.h"
#include "shard_file.h"
#include "pack_internal.h"

/* Records are gathered in a buffer of at least this size between writes. */
#define WRITE_BUFFER (8u << 20)

static void add_progress(const pack_writer_ctx *ctx, uint64_t samples, uint64_t bytes)
{
    atomic_fetch_add(ctx->samples_done, samples);
    atomic_fetch_add(ctx->bytes_done, bytes);
}

typedef struct writer {
    int fd;              /* the sink: the temporary file, or -1: nothing is written */
    uint8_t *buf;        /* records gathered between writes */
    uint64_t cap, used;
    uint64_t written; /* bytes of the file written so far */
    uint8_t *raw;        /* a value before compression */
    uint64_t raw_cap;
    pack_compressor *zc;
    XXH3_state_t *hash;
    void *cursor; /* the worker's input cursor */
    uint64_t samples, bytes; /* progress reported so far */
} writer;

/* A shard as the writer makes it, all but the records: what a file that
 * is already there must match to be kept. */
typedef struct shard_image {
    uint8_t header[SF_SHARD_HEADER_SIZE];
    uint8_t footer[SF_SHARD_FOOTER_SIZE];
    uint8_t *index; /* index_size bytes, malloc'd */
    uint64_t index_size;
    uint64_t samples, bytes; /* progress reported while making it */
    pack_shard_result res;
} shard_image;

static void image_clear(shard_image *img)
{
    free(img->index);
    img->index = NULL;
}

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
    if (w->fd >= 0) {
        int rc = sf_write_full(w->fd, w->buf, w->used);
        if (rc)
            return sf_fail(rc, "%s: write failed: %s", path, strerror(-rc));
        /* Start writeback of what was just written, so the disk works
         * while the next records are read and the shard's final fsync
         * finds little left to do. A hint only: fsync makes it durable. */
        (void)sync_file_range(w->fd, (off64_t)w->written, (off64_t)w->used, SYNC_FILE_RANGE_WRITE);
    }
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
        if (s->fields[f].storage == SF_STORAGE_INLINE)
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
    const input_set *in = ctx->in;
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
        if (fd->storage == SF_STORAGE_INLINE) {
            uint8_t *val = e->inline_val[s->inline_slot[f]];
            memset(val, 0, SF_MAX_INLINE_BYTES);
            if ((rc = pack_read_value(ctx->images, w->cursor, in, r, f, val)))
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
                (rc = pack_read_value(ctx->images, w->cursor, in, r, f, w->raw)) ||
                (rc = pack_compress(w->zc, ctx->plan->levels[f], rec + at, pack_compress_bound(len),
                                    w->raw, len, &stored)))
                return sf_fail_prefix(rc, in->keys[r]);
        } else if ((rc = pack_read_value(ctx->images, w->cursor, in, r, f, rec + at))) {
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
    w->samples += 1;
    w->bytes += pos;
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

/* Makes shard i from the input, as SPEC.md lays it out: reads every value,
 * compresses, hashes, builds the index, header and footer into *img. With
 * fd >= 0 (the temporary file `tmp`) it writes the shard there and fsyncs
 * it; with fd < 0 it writes nothing. One code path for both, so a shard is
 * proven against exactly what would be written. */
static int make_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, int fd, const char *tmp,
                      shard_image *img)
{
    const input_set *in = ctx->in;
    const pack_plan *plan = ctx->plan;
    const pack_shard_plan *sp = &plan->shards[i];
    const sf_schema *s = &in->schema;
    uint64_t data_off = sf_data_offset(plan->align);

    writer w = {.fd = fd, .cursor = cursor};
    memset(img, 0, sizeof *img);
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
    sf_shard_header_encode(img->header, &h);
    sf_shard_footer f = {
        .index_offset = h.index_offset,
        .index_size = sp->index_size,
        .record_count = sp->count,
        .index_checksum = sf_hash(index, sp->index_size),
        .header_checksum = h.checksum,
    };
    sf_shard_footer_encode(img->footer, &f);
    if (w.fd >= 0) {
        if ((rc = sf_write_full(w.fd, index, sp->index_size)) ||
            (rc = sf_write_full(w.fd, img->footer, sizeof img->footer)) ||
            (rc = pwrite_header(w.fd, img->header))) {
            rc = sf_fail(rc, "%s: write failed: %s", tmp, strerror(-rc));
            goto out;
        }
        if (fsync(w.fd) != 0) {
            rc = sf_fail(-errno, "%s: fsync failed: %s", tmp, strerror(errno));
            goto out;
        }
    }
    img->res.header_checksum = h.checksum;
    img->res.index_checksum = f.index_checksum;
    img->res.file_size = h.index_offset + sp->index_size + SF_SHARD_FOOTER_SIZE;
    img->index = index;
    img->index_size = sp->index_size;
    index = NULL;
out:
    img->samples = w.samples;
    img->bytes = w.bytes;
    pack_compressor_free(w.zc);
    free(w.buf);
    free(w.raw);
    free(index);
    XXH3_freeState(w.hash);
    return rc;
}

/* 1 when the shard file open on fd (its metadata loaded as m) is exactly
 * what make_shard made: header, index and footer equal byte for byte (so
 * every record's size, offset, key, inline values and checksum), and its
 * data, every padding byte included, scanning clean against that index. */
static int file_matches(const pack_writer_ctx *ctx, const sf_shard_meta *m, int fd,
                        const shard_image *img)
{
    uint8_t h[SF_SHARD_HEADER_SIZE], f[SF_SHARD_FOOTER_SIZE];
    if (m->file_size != img->res.file_size || m->header.index_size != img->index_size ||
        sf_pread_full(fd, h, sizeof h, 0) != 0 || memcmp(h, img->header, sizeof h) != 0 ||
        sf_pread_full(fd, f, sizeof f, m->file_size - sizeof f) != 0 ||
        memcmp(f, img->footer, sizeof f) != 0 || memcmp(m->index, img->index, img->index_size) != 0)
        return 0;
    uint8_t *buf = malloc(WRITE_BUFFER);
    int clean = buf && sf_shard_scan_data(m, &ctx->in->schema, fd, buf, WRITE_BUFFER, NULL, NULL) == 0;
    free(buf);
    return clean;
}

/* 1 when the shard at `path` holds what this run writes as shard i (see
 * file_matches), with *res filled. A file that does not even load is not
 * proven, without reading the input. *rc: an error making the shard. */
static int prove(const pack_writer_ctx *ctx, void *cursor, uint64_t i, const char *path,
                 pack_shard_result *res, int *rc)
{
    *rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    sf_shard_expect exp = {&ctx->in->schema, i, ctx->plan->dataset_id, ctx->plan->align, NULL};
    sf_shard_meta m;
    if (sf_shard_load_meta(&m, fd, &exp, NULL) != 0) {
        sf_clear_error();
        close(fd);
        return 0;
    }
    int proven = 0;
    shard_image img;
    if ((*rc = make_shard(ctx, cursor, i, -1, path, &img)) == 0) {
        proven = file_matches(ctx, &m, fd, &img);
        if (proven) {
            *res = img.res;
        } else { /* its records are counted again as they are written */
            atomic_fetch_sub(ctx->samples_done, img.samples);
            atomic_fetch_sub(ctx->bytes_done, img.bytes);
        }
    }
    image_clear(&img);
    sf_shard_meta_clear(&m);
    close(fd);
    return proven;
}

static int write_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, const char *path,
                       pack_shard_result *res)
{
    char name[SF_SHARD_NAME_MAX], tmp[SF_PATH_CAP];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
    pack_temp_path(tmp, sizeof tmp, ctx->out_dir, name, ctx->plan->dataset_id);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sf_fail(-errno, "%s: cannot create: %s", tmp, sf_errno_text(errno));
    shard_image img;
    int rc = make_shard(ctx, cursor, i, fd, tmp, &img);
    if (close(fd) != 0 && !rc)
        rc = sf_fail(-errno, "%s: close failed: %s", tmp, strerror(errno));
    if (!rc) {
        *res = img.res;
        image_clear(&img);
    }
    if (ctx->keep_temporary && !rc)
        return 0; /* named with the others, once all are written */
    if (!rc && rename(tmp, path) != 0)
        rc = sf_fail(-errno, "%s: rename failed: %s", path, strerror(errno));
    if (!rc)
        rc = sf_fsync_dir(ctx->out_dir);
    if (rc)
        unlink(tmp);
    return rc;
}

int pack_write_shard(const pack_writer_ctx *ctx, void *cursor, uint64_t i, pack_shard_mode mode,
                     pack_shard_result *res)
{
    char name[SF_SHARD_NAME_MAX], path[SF_PATH_CAP];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
    pack_out_path(path, sizeof path, ctx->out_dir, name);
    memset(res, 0, sizeof *res);
    if (mode == PACK_SHARD_WRITE)
        return write_shard(ctx, cursor, i, path, res);
    int rc;
    if (prove(ctx, cursor, i, path, res, &rc)) {
        res->reused = 1;
        return 0;
    }
    if (rc)
        return rc;
    if (mode == PACK_SHARD_PROVE)
        return sf_fail(SF_E_EXISTS, "%s: does not hold this input's records", path);
    return write_shard(ctx, cursor, i, path, res);
}
