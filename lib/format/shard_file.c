#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hash.h"

#include "big_alloc.h"
#include "error_internal.h"
#include "fault_guard.h"
#include "le.h"
#include "path.h"
#include "shard_file.h"

static int at(uint64_t *bad_offset, uint64_t off, int rc)
{
    if (bad_offset)
        *bad_offset = off;
    return rc;
}

/* Header fields that must agree with the manifest. */
static int check_header_against(const sf_shard_header *h, const sf_shard_expect *exp)
{
    if (h->shard_index != exp->shard_index)
        return sf_fail(SF_E_CORRUPT, "shard header: shard index %llu, expected %llu",
                       (unsigned long long)h->shard_index, (unsigned long long)exp->shard_index);
    if (h->dataset_id != exp->dataset_id)
        return sf_fail(SF_E_CORRUPT, "shard header: belongs to another dataset (id %016llx, expected %016llx)",
                       (unsigned long long)h->dataset_id, (unsigned long long)exp->dataset_id);
    if (h->schema_hash != sf_schema_hash(exp->schema) || h->field_count != exp->schema->field_count)
        return sf_fail(SF_E_CORRUPT, "shard header: schema differs from the manifest's");
    if (h->align != exp->align)
        return sf_fail(SF_E_CORRUPT, "shard header: alignment %u, manifest says %u", h->align,
                       exp->align);
    const sf_shard_desc *d = exp->desc;
    if (d && (h->record_count != d->record_count || h->first_record != d->first_record))
        return sf_fail(SF_E_CORRUPT, "shard header: %llu records from %llu, manifest says %llu from %llu",
                       (unsigned long long)h->record_count, (unsigned long long)h->first_record,
                       (unsigned long long)d->record_count, (unsigned long long)d->first_record);
    if (d && h->checksum != d->header_checksum)
        return sf_fail(SF_E_CHECKSUM, "shard header: checksum differs from the manifest's record of it");
    return 0;
}

static int pread_source(void *ctx, void *buf, uint64_t len, uint64_t off)
{
    return sf_pread_full(*(const int *)ctx, buf, len, off);
}

int sf_shard_load_meta(sf_shard_meta *out, int fd, const sf_shard_expect *exp, uint64_t *bad_offset)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return sf_fail(-errno, "fstat: %s", strerror(errno));
    return sf_shard_load_meta_from(out, (uint64_t)st.st_size, pread_source, &fd, exp, bad_offset);
}

int sf_shard_load_meta_from(sf_shard_meta *out, uint64_t file_size, sf_shard_read_fn read_at,
                            void *ctx, const sf_shard_expect *exp, uint64_t *bad_offset)
{
    memset(out, 0, sizeof *out);
    out->file_size = file_size;
    const sf_shard_desc *d = exp->desc;
    if (d && out->file_size != d->file_size)
        return at(bad_offset, out->file_size < d->file_size ? out->file_size : d->file_size,
                  sf_fail(out->file_size < d->file_size ? SF_E_TRUNCATED : SF_E_CORRUPT,
                          "file is %llu bytes, manifest says %llu",
                          (unsigned long long)out->file_size, (unsigned long long)d->file_size));
    if (out->file_size < SF_SHARD_HEADER_SIZE + SF_SHARD_FOOTER_SIZE)
        return at(bad_offset, out->file_size,
                  sf_fail(SF_E_TRUNCATED, "file is %llu bytes, too short for a shard",
                          (unsigned long long)out->file_size));

    uint8_t hbuf[SF_SHARD_HEADER_SIZE], fbuf[SF_SHARD_FOOTER_SIZE];
    int rc = read_at(ctx, hbuf, sizeof hbuf, 0);
    if (rc)
        return at(bad_offset, 0, sf_fail(rc, "reading the header: %s", sf_strerror(rc)));
    rc = sf_shard_header_decode(&out->header, hbuf);
    if (rc)
        return at(bad_offset, 0, rc);
    rc = check_header_against(&out->header, exp);
    if (rc)
        return at(bad_offset, 0, rc);

    const sf_shard_header *h = &out->header;
    uint64_t footer_off = out->file_size - SF_SHARD_FOOTER_SIZE;
    rc = read_at(ctx, fbuf, sizeof fbuf, footer_off);
    if (rc)
        return at(bad_offset, footer_off, sf_fail(rc, "reading the footer: %s", sf_strerror(rc)));
    rc = sf_shard_footer_decode(&out->footer, fbuf);
    if (rc)
        return at(bad_offset, footer_off, rc);
    const sf_shard_footer *f = &out->footer;
    if (f->index_offset != h->index_offset || f->index_size != h->index_size ||
        f->record_count != h->record_count || f->header_checksum != h->checksum)
        return at(bad_offset, footer_off,
                  sf_fail(SF_E_CORRUPT, "footer at byte %llu disagrees with the header",
                          (unsigned long long)footer_off));
    if (h->index_offset + h->index_size != footer_off)
        return at(bad_offset, h->index_offset,
                  sf_fail(SF_E_CORRUPT, "index ends at %llu but the footer starts at %llu",
                          (unsigned long long)(h->index_offset + h->index_size),
                          (unsigned long long)footer_off));
    if (d && f->index_checksum != d->index_checksum)
        return at(bad_offset, footer_off,
                  sf_fail(SF_E_CHECKSUM, "index checksum in the footer differs from the manifest's"));

    /* index_size is capped by the header decoder and by the file size. */
    out->index = sf_big_alloc(h->index_size);
    if (!out->index)
        return sf_fail(-ENOMEM, "index of %llu bytes: out of memory", (unsigned long long)h->index_size);
    rc = read_at(ctx, out->index, h->index_size, h->index_offset);
    if (rc) {
        sf_shard_meta_clear(out);
        return at(bad_offset, h->index_offset, sf_fail(rc, "reading the index: %s", sf_strerror(rc)));
    }
    if (sf_hash(out->index, h->index_size) != f->index_checksum) {
        sf_shard_meta_clear(out);
        return at(bad_offset, h->index_offset,
                  sf_fail(SF_E_CHECKSUM, "index checksum mismatch (bytes %llu..%llu)",
                          (unsigned long long)h->index_offset,
                          (unsigned long long)(h->index_offset + h->index_size - 1)));
    }
    rc = sf_index_check(exp->schema, h, out->index);
    if (rc) {
        sf_shard_meta_clear(out);
        return at(bad_offset, h->index_offset, sf_fail_prefix(rc, "index"));
    }
    return 0;
}

void sf_shard_meta_clear(sf_shard_meta *m)
{
    if (!m)
        return;
    sf_big_free(m->index, m->header.index_size);
    m->index = NULL;
}

/* Sequential reader over the data area: ranges are consumed in increasing,
 * contiguous order, so one buffer refilled with large reads suffices. Over
 * a mapped shard (fd -1) the buffer is the mapping's [0, end). */
struct stream {
    int fd;
    uint8_t *buf;
    uint64_t cap;
    uint64_t buf_off; /* file offset of buf[0] */
    uint64_t buf_len;
    uint64_t end;     /* do not read past this offset */
};

/* Returns a pointer to at least 1 and at most `want` bytes at `off`, in *got. */
static int stream_get(struct stream *s, uint64_t off, uint64_t want, const uint8_t **p, uint64_t *got)
{
    if (off < s->buf_off || off >= s->buf_off + s->buf_len) {
        if (s->fd < 0)
            return SF_E_TRUNCATED; /* mapped: never asked past end; no sf_fail under the guard */
        uint64_t len = s->end - off < s->cap ? s->end - off : s->cap;
        int rc = sf_pread_full(s->fd, s->buf, len, off);
        if (rc)
            return sf_fail(rc, "reading data at byte %llu: %s", (unsigned long long)off,
                           sf_strerror(rc));
        s->buf_off = off;
        s->buf_len = len;
    }
    uint64_t avail = s->buf_off + s->buf_len - off;
    *p = s->buf + (off - s->buf_off);
    *got = avail < want ? avail : want;
    return 0;
}

/* Checks [off, off+len) is all zero; returns the first non-zero offset or
 * UINT64_MAX, or an error through *rc. */
static uint64_t stream_zero(struct stream *s, uint64_t off, uint64_t len, int *rc)
{
    while (len) {
        const uint8_t *p;
        uint64_t got;
        if ((*rc = stream_get(s, off, len, &p, &got)))
            return UINT64_MAX;
        for (uint64_t i = 0; i < got; i++)
            if (p[i])
                return off + i;
        off += got;
        len -= got;
    }
    return UINT64_MAX;
}

/* Hashes [off, off+len) into st; when `bools`, also finds the first byte
 * that is neither 0 nor 1 (its offset in *bad, else unchanged). */
static int stream_hash(struct stream *s, XXH3_state_t *st, uint64_t off, uint64_t len, int bools,
                       uint64_t *bad)
{
    while (len) {
        const uint8_t *p;
        uint64_t got;
        int rc = stream_get(s, off, len, &p, &got);
        if (rc)
            return rc;
        XXH3_64bits_update(st, p, got);
        uint64_t at = bools && *bad == UINT64_MAX ? sf_first_non_bool(p, got) : UINT64_MAX;
        if (at != UINT64_MAX)
            *bad = off + at;
        off += got;
        len -= got;
    }
    return 0;
}

/* One scan of the data area through a stream (sf_shard_scan_data,
 * sf_shard_scan_mapped). Its problems are counted in `problems` as they
 * are found, so a scan abandoned by the fault guard keeps its count. */
typedef struct scan_run {
    const sf_shard_meta *m;
    const sf_schema *sc;
    struct stream *s;
    XXH3_state_t *st;
    sf_shard_problem_fn cb;
    void *ctx;
    int64_t problems;
} scan_run;

static void scan_report(scan_run *run, const sf_shard_problem *p)
{
    if (run->cb)
        run->cb(run->ctx, p);
    run->problems++;
}

/* sf_guarded_fn: 0, or the stream's error. */
static int scan_records(void *arg)
{
    scan_run *run = arg;
    const sf_schema *sc = run->sc;
    const sf_shard_header *h = &run->m->header;
    struct stream *s = run->s;
    XXH3_state_t *st = run->st;
    uint64_t field_off[SF_MAX_FIELDS], field_size[SF_MAX_FIELDS];
    int rc = 0;
    uint64_t cursor = SF_SHARD_HEADER_SIZE;
    sf_index_entry e;

    for (uint64_t r = 0; r <= h->record_count && rc == 0; r++) {
        /* Zero padding up to this record (or, after the last one, the index). */
        uint64_t next = r < h->record_count ? 0 : h->index_offset;
        if (r < h->record_count) {
            sf_index_entry_decode(&e, sc, run->m->index + r * sc->entry_size); /* checked at load */
            uint64_t record_size;
            sf_record_layout(sc, h->align, e.var_len, field_off, field_size, &record_size);
            next = e.offset;
        }
        uint64_t bad = stream_zero(s, cursor, next - cursor, &rc);
        if (rc)
            break;
        if (bad != UINT64_MAX)
            scan_report(run, &(sf_shard_problem){SF_E_CORRUPT, -1, bad, SF_PROBLEM_PADDING, 0});
        if (r == h->record_count)
            break;
        XXH3_64bits_reset(st);
        uint32_t k = 0, bad_field = 0;
        uint64_t first_bad_pad = UINT64_MAX, first_bad_value = UINT64_MAX;
        cursor = e.offset;
        for (uint32_t f = 0; f < sc->field_count && rc == 0; f++) {
            if (sc->fields[f].storage == SF_STORAGE_INLINE)
                continue;
            uint64_t start = e.offset + field_off[k];
            bad = stream_zero(s, cursor, start - cursor, &rc);
            if (bad != UINT64_MAX && first_bad_pad == UINT64_MAX)
                first_bad_pad = bad;
            /* Stored bytes are the value unless compressed (verify
             * --decompress checks those). */
            int bools = (sc->bool_payload >> k & 1) && sc->fields[f].codec == SF_CODEC_NONE;
            uint64_t before = first_bad_value;
            if (rc == 0)
                rc = stream_hash(s, st, start, field_size[k], bools, &first_bad_value);
            if (before != first_bad_value)
                bad_field = f;
            cursor = start + field_size[k];
            k++;
        }
        if (rc)
            break;
        int hashed_ok = XXH3_64bits_digest(st) == e.checksum;
        if (!hashed_ok)
            scan_report(run, &(sf_shard_problem){SF_E_CHECKSUM, (int64_t)r, e.offset,
                                                 SF_PROBLEM_CHECKSUM, 0});
        if (first_bad_pad != UINT64_MAX)
            scan_report(run, &(sf_shard_problem){SF_E_CORRUPT, (int64_t)r, first_bad_pad,
                                                 SF_PROBLEM_PADDING, 0});
        /* A damaged payload is reported by its checksum; a bad value under
         * a good checksum was written so. */
        if (hashed_ok && first_bad_value != UINT64_MAX)
            scan_report(run, &(sf_shard_problem){SF_E_CORRUPT, (int64_t)r, first_bad_value,
                                                 SF_PROBLEM_VALUE, bad_field});
    }
    return rc;
}

int64_t sf_shard_scan_data(const sf_shard_meta *m, const sf_schema *sc, int fd, uint8_t *buf,
                           uint64_t buf_size, sf_shard_problem_fn cb, void *ctx)
{
    struct stream s = {.fd = fd, .buf = buf, .cap = buf_size, .end = m->header.index_offset};
    scan_run run = {m, sc, &s, XXH3_createState(), cb, ctx, 0};
    if (!run.st)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = scan_records(&run);
    XXH3_freeState(run.st);
    return rc ? rc : run.problems;
}

int64_t sf_shard_scan_mapped(const sf_shard_meta *m, const sf_schema *sc, const uint8_t *base,
                             uint64_t size, sf_shard_problem_fn cb, void *ctx)
{
    uint64_t end = m->header.index_offset;
    if (end > size)
        return sf_fail(SF_E_TRUNCATED, "the data area ends at byte %llu, past the %llu bytes mapped",
                       (unsigned long long)end, (unsigned long long)size);
    /* The whole area is the stream's buffer: nothing is read or copied. */
    struct stream s = {.fd = -1, .buf = (uint8_t *)base, .cap = end, .buf_len = end, .end = end};
    scan_run run = {m, sc, &s, XXH3_createState(), cb, ctx, 0};
    if (!run.st)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = sf_fault_guarded(scan_records, &run);
    XXH3_freeState(run.st);
    if (rc)
        return sf_fail(rc, "reading the mapped data area: %s (the file shrank, or its disk failed)",
                       sf_strerror(rc));
    return run.problems;
}

/* Reads dir/manifest.sfm whole, capped at the largest valid manifest. */
int sf_manifest_load(sf_manifest *m, const char *dir)
{
    char path[SF_PATH_CAP];
    /* A cut path would open another folder's manifest, or none: refused
     * (the buffer is the kernel's PATH_MAX, so open would too). */
    int rc = sf_path_join(path, sizeof path, dir, SF_MANIFEST_NAME);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sf_fail(-errno, "%s: %s%s", path,
                       errno == ENOENT ? "no manifest (not a dataset, or packing did not finish)"
                                       : strerror(errno),
                       sf_errno_hint(errno));
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = sf_fail(-errno, "%s: %s", path, strerror(errno));
    } else if ((uint64_t)st.st_size > SF_MANIFEST_MAX_SIZE) {
        rc = sf_fail(SF_E_LIMIT, "%s: %lld bytes, larger than any valid manifest", path,
                     (long long)st.st_size);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = sf_fail(-ENOMEM, "%s: out of memory", path);
    } else if ((rc = sf_pread_full(fd, buf, (uint64_t)st.st_size, 0))) {
        rc = sf_fail(rc, "%s: read failed: %s", path, sf_strerror(rc));
    } else if ((rc = sf_manifest_decode(m, buf, (uint64_t)st.st_size))) {
        sf_fail_prefix(rc, path);
    }
    free(buf);
    close(fd);
    return rc;
}

void sf_shard_problem_text(char *out, size_t cap, const sf_shard_problem *p, const sf_schema *s)
{
    switch (p->kind) {
    case SF_PROBLEM_CHECKSUM:
        snprintf(out, cap, "record %lld: checksum mismatch in its payload at bytes %llu..",
                 (long long)p->record, (unsigned long long)p->offset);
        break;
    case SF_PROBLEM_VALUE:
        snprintf(out, cap, "record %lld: bool field '%s' holds a byte other than 0 and 1 at byte %llu",
                 (long long)p->record, p->field < s->field_count ? s->fields[p->field].name : "?",
                 (unsigned long long)p->offset);
        break;
    case SF_PROBLEM_PADDING:
    default:
        if (p->record >= 0)
            snprintf(out, cap, "record %lld: padding between fields is not zero at byte %llu",
                     (long long)p->record, (unsigned long long)p->offset);
        else
            snprintf(out, cap, "padding is not zero at byte %llu", (unsigned long long)p->offset);
        break;
    }
}

void sf_keep_first_problem(void *ctx, const sf_shard_problem *p)
{
    sf_first_problem *f = ctx;
    if (f->count++ == 0)
        f->first = *p;
}
