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
    if (fd < 0) {
        int err = errno;
        struct stat ds;
        /* A mistyped path is not "not a dataset": name what is missing. */
        if ((err == ENOENT || err == ENOTDIR) && stat(dir, &ds) != 0)
            return sf_fail(-errno, "%s: %s%s", dir, strerror(errno), sf_errno_hint(errno));
        if (err == ENOTDIR || (err == ENOENT && !S_ISDIR(ds.st_mode)))
            return sf_fail(-ENOTDIR, "%s: not a folder (a dataset is a folder holding %s)", dir,
                           SF_MANIFEST_NAME);
        return sf_fail(-err, "%s: %s%s", path,
                       err == ENOENT ? "no manifest (not a dataset, or packing did not finish)"
                                     : strerror(err),
                       sf_errno_hint(err));
    }
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
