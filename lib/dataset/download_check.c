/* A download's check as its bytes arrive (download_check.h). */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "download_check.h"
#include "error_internal.h"
#include "hash.h"

/* Reads of the spans no part's scanner saw whole. */
#define GAP_BUFFER (256u << 10)

static void note_damage(void *ctx, const sf_shard_problem *p)
{
    download_damage *d = ctx;
    uint64_t what[4] = {(uint64_t)p->kind, (uint64_t)p->record, p->offset, p->field};
    d->digest += XXH3_64bits(what, sizeof what);
}

static void part_clear(download_part *p)
{
    if (p->live)
        sf_shard_scanner_free(&p->scan);
    *p = (download_part){0};
}

/* (Re)starts part p's scanner at its first byte. */
static void part_start(download_check *c, download_part *p)
{
    if (p->live)
        sf_shard_scanner_free(&p->scan);
    p->d = (download_damage){0};
    p->live = sf_shard_scanner_init(&p->scan, c->want, c->schema, p->first, p->end, note_damage,
                                    &p->d) == 0;
    p->in_order = p->live;
    p->next = p->lo;
}

static void on_begin(void *ctx, unsigned k, uint64_t lo, uint64_t hi)
{
    download_check *c = ctx;
    assert(k < REMOTE_PARTS);
    download_part *p = &c->part[k];
    part_clear(p);
    p->lo = lo;
    sf_shard_spans_within(c->want, c->schema, lo, hi, &p->first, &p->end);
    part_start(c, p);
}

static void on_bytes(void *ctx, unsigned k, uint64_t off, const uint8_t *bytes, size_t n)
{
    download_check *c = ctx;
    assert(k < REMOTE_PARTS);
    download_part *p = &c->part[k];
    if (off == p->lo && p->next != p->lo)
        part_start(c, p); /* its body was refused and the part fetched again */
    if (!p->in_order)
        return;
    if (off != p->next || sf_shard_scanner_feed(&p->scan, off, bytes, n) != 0)
        p->in_order = 0; /* its spans are scanned from the file */
    p->next = off + n;
}

void download_check_init(download_check *c, const sf_shard_meta *want, const sf_schema *schema)
{
    *c = (download_check){.want = want, .schema = schema};
    c->watch = (remote_watch){on_begin, on_bytes, c};
}

void download_check_reset(download_check *c)
{
    for (unsigned k = 0; k < REMOTE_PARTS; k++)
        part_clear(&c->part[k]);
}

void download_check_free(download_check *c)
{
    if (c)
        download_check_reset(c);
}

/* Spans [a, b) scanned from the file. */
static int64_t scan_gap(download_check *c, int fd, uint64_t a, uint64_t b, uint8_t **buf,
                        download_damage *d)
{
    if (!*buf && !(*buf = malloc(GAP_BUFFER)))
        return sf_fail(-ENOMEM, "out of memory");
    return sf_shard_scan_spans(c->want, c->schema, fd, *buf, GAP_BUFFER, a, b, note_damage, d);
}

int64_t download_check_finish(download_check *c, int fd, const sf_shard_expect *exp,
                              download_damage *d)
{
    const sf_shard_meta *want = c->want;
    sf_shard_meta got;
    uint64_t bad = 0;
    int rc = sf_shard_load_meta(&got, fd, exp, &bad);
    /* The index read back is open's (the same checksum over it): the
     * scanners, which walked open's index, walked this file's. */
    if (!rc && (got.header.checksum != want->header.checksum ||
                got.footer.index_checksum != want->footer.index_checksum))
        rc = sf_fail(SF_E_CORRUPT, "its header or footer differs from the ones open read (the "
                                   "shard was replaced since): open the dataset again");
    sf_shard_meta_clear(&got);
    *d = (download_damage){0};
    if (rc) {
        d->bad_offset = bad;
        return rc;
    }
    int64_t problems = 0;
    uint64_t done = 0, spans = sf_shard_span_count(want);
    uint8_t *buf = NULL;
    for (unsigned k = 0; k < REMOTE_PARTS && problems >= 0; k++) {
        download_part *p = &c->part[k];
        if (!p->live || !p->in_order || !sf_shard_scanner_done(&p->scan) || p->first >= p->end ||
            p->first < done)
            continue;
        int64_t n = p->first > done ? scan_gap(c, fd, done, p->first, &buf, d) : 0;
        if (n < 0) {
            problems = n;
            break;
        }
        problems += n + p->scan.problems;
        d->digest += p->d.digest;
        done = p->end;
    }
    if (problems >= 0 && done < spans) {
        int64_t n = scan_gap(c, fd, done, spans, &buf, d);
        problems = n < 0 ? n : problems + n;
    }
    free(buf);
    return problems;
}
