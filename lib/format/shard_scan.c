/* The check of a shard's data area, fed its bytes in order (shard_scan.h). */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "io.h"
#include "shard_scan.h"

uint64_t sf_shard_span_count(const sf_shard_meta *m)
{
    return m->header.record_count + 1;
}

/* The end of record r's last stored field (its offset when it stores none):
 * where the padding checked before record r + 1 begins. */
static uint64_t record_fields_end(const sf_shard_meta *m, const sf_schema *sc, uint64_t r)
{
    sf_index_entry e;
    uint64_t field_off[SF_MAX_FIELDS], field_size[SF_MAX_FIELDS], record_size;
    sf_index_entry_decode(&e, sc, m->index + r * sc->entry_size); /* checked at load */
    sf_record_layout(sc, m->header.align, e.var_len, field_off, field_size, &record_size);
    uint64_t end = e.offset;
    for (uint32_t f = 0, k = 0; f < sc->field_count; f++)
        if (sc->fields[f].storage != SF_STORAGE_INLINE) {
            end = e.offset + field_off[k] + field_size[k];
            k++;
        }
    return end;
}

uint64_t sf_shard_span_start(const sf_shard_meta *m, const sf_schema *sc, uint64_t span)
{
    uint64_t count = m->header.record_count;
    assert(span <= count + 1);
    if (span == 0)
        return SF_SHARD_HEADER_SIZE;
    if (span == count + 1)
        return m->header.index_offset;
    return record_fields_end(m, sc, span - 1);
}

/* How many of span starts 0..n (n: the end of the last span) are below x,
 * or with `or_equal`, at most x (span starts never decrease). */
static uint64_t starts_below(const sf_shard_meta *m, const sf_schema *sc, uint64_t x, int or_equal)
{
    uint64_t a = 0, b = sf_shard_span_count(m) + 1;
    while (a < b) {
        uint64_t mid = a + (b - a) / 2, at = sf_shard_span_start(m, sc, mid);
        if (at < x || (or_equal && at == x))
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

void sf_shard_spans_within(const sf_shard_meta *m, const sf_schema *sc, uint64_t lo, uint64_t hi,
                           uint64_t *first, uint64_t *end)
{
    uint64_t n = sf_shard_span_count(m);
    uint64_t a = starts_below(m, sc, lo, 0);
    *first = a < n ? a : n;
    /* Span k is inside when it starts before hi (an empty span at hi is
     * the next range's, so that ranges side by side share none) and ends by
     * hi, where span k + 1 starts. */
    uint64_t starts_before_hi = starts_below(m, sc, hi, 0);
    uint64_t up_to_hi = starts_below(m, sc, hi, 1); /* spans 0..up_to_hi - 2 end by hi */
    uint64_t e = up_to_hi ? up_to_hi - 1 : 0;
    e = e < starts_before_hi ? e : starts_before_hi;
    *end = e > *first ? e : *first;
}

static void report(sf_shard_scanner *s, const sf_shard_problem *p)
{
    if (s->cb)
        s->cb(s->ctx, p);
    s->problems++;
}

/* Cuts the span starting at s->pos into its pieces. */
static void enter_span(sf_shard_scanner *s)
{
    const sf_shard_meta *m = s->m;
    const sf_schema *sc = s->sc;
    uint64_t start = s->pos;
    s->piece = s->pieces = 0;
    s->first_bad_pad = s->first_bad_value = UINT64_MAX;
    s->bad_field = 0;
    s->pad_before_bad = 0;
    if (s->span == m->header.record_count) { /* the padding up to the index */
        s->p[s->pieces++] = (sf_scan_piece){start, m->header.index_offset - start, 0, 1, 0};
        return;
    }
    sf_index_entry e;
    uint64_t field_off[SF_MAX_FIELDS], field_size[SF_MAX_FIELDS], record_size;
    sf_index_entry_decode(&e, sc, m->index + s->span * sc->entry_size); /* checked at load */
    sf_record_layout(sc, m->header.align, e.var_len, field_off, field_size, &record_size);
    assert(e.offset >= start);
    s->p[s->pieces++] = (sf_scan_piece){start, e.offset - start, 0, 1, 0};
    uint64_t cursor = e.offset;
    for (uint32_t f = 0, k = 0; f < sc->field_count; f++) {
        if (sc->fields[f].storage == SF_STORAGE_INLINE)
            continue;
        uint64_t at = e.offset + field_off[k];
        /* Stored bytes are the value unless compressed (verify
         * --decompress checks those). */
        uint8_t bools = (sc->bool_payload >> k & 1) && sc->fields[f].codec == SF_CODEC_NONE;
        s->p[s->pieces++] = (sf_scan_piece){cursor, at - cursor, f, 1, 0};
        s->p[s->pieces++] = (sf_scan_piece){at, field_size[k], f, 0, bools};
        cursor = at + field_size[k];
        k++;
    }
    s->checksum = e.checksum;
    s->record_off = e.offset;
    XXH3_64bits_reset(s->st);
}

/* The span's last byte was fed: its problems. */
static void finish_span(sf_shard_scanner *s)
{
    if (s->span < s->m->header.record_count) {
        int64_t r = (int64_t)s->span;
        int hashed_ok = XXH3_64bits_digest(s->st) == s->checksum;
        if (!hashed_ok)
            report(s, &(sf_shard_problem){SF_E_CHECKSUM, r, s->record_off, SF_PROBLEM_CHECKSUM, 0});
        if (s->first_bad_pad != UINT64_MAX)
            report(s, &(sf_shard_problem){SF_E_CORRUPT, r, s->first_bad_pad, SF_PROBLEM_PADDING, 0});
        /* A damaged payload is reported by its checksum; a bad value under
         * a good checksum was written so. */
        if (hashed_ok && s->first_bad_value != UINT64_MAX)
            report(s, &(sf_shard_problem){SF_E_CORRUPT, r, s->first_bad_value, SF_PROBLEM_VALUE,
                                          s->bad_field});
    }
    s->span++;
    if (s->span < s->end_span)
        enter_span(s);
}

/* Moves past pieces fed whole, finishing spans fed whole. */
static void settle(sf_shard_scanner *s)
{
    while (s->span < s->end_span) {
        while (s->piece < s->pieces && s->pos == s->p[s->piece].off + s->p[s->piece].len)
            s->piece++;
        if (s->piece < s->pieces)
            return;
        finish_span(s);
    }
}

int sf_shard_scanner_init(sf_shard_scanner *s, const sf_shard_meta *m, const sf_schema *sc,
                          uint64_t first, uint64_t end, sf_shard_problem_fn cb, void *ctx)
{
    uint64_t n = sf_shard_span_count(m);
    *s = (sf_shard_scanner){.m = m, .sc = sc, .cb = cb, .ctx = ctx};
    if (!(s->st = XXH3_createState()))
        return sf_fail(-ENOMEM, "out of memory");
    s->end_span = end < n ? end : n;
    s->span = first < s->end_span ? first : s->end_span;
    s->pos = sf_shard_span_start(m, sc, s->span);
    if (s->span < s->end_span)
        enter_span(s);
    settle(s);
    return 0;
}

void sf_shard_scanner_free(sf_shard_scanner *s)
{
    if (!s)
        return;
    XXH3_freeState(s->st);
    s->st = NULL;
}

int sf_shard_scanner_feed(sf_shard_scanner *s, uint64_t off, const uint8_t *p, uint64_t n)
{
    if (s->span >= s->end_span || off + n <= s->pos)
        return 0;
    if (off > s->pos)
        return SF_E_INVALID; /* a gap: the bytes before off were never fed */
    p += s->pos - off;
    n -= s->pos - off;
    while (n && s->span < s->end_span) {
        const sf_scan_piece *q = &s->p[s->piece];
        assert(q->off <= s->pos && s->pos < q->off + q->len);
        uint64_t k = q->off + q->len - s->pos < n ? q->off + q->len - s->pos : n;
        if (q->zero) {
            /* Piece 0 is the padding before the record (outside every
             * record): reported at once, as found. */
            int before = s->piece == 0;
            if (before ? !s->pad_before_bad : s->first_bad_pad == UINT64_MAX)
                for (uint64_t i = 0; i < k; i++)
                    if (p[i]) {
                        if (before) {
                            s->pad_before_bad = 1;
                            report(s, &(sf_shard_problem){SF_E_CORRUPT, -1, s->pos + i,
                                                          SF_PROBLEM_PADDING, 0});
                        } else {
                            s->first_bad_pad = s->pos + i;
                        }
                        break;
                    }
        } else {
            XXH3_64bits_update(s->st, p, k);
            uint64_t at = q->bools && s->first_bad_value == UINT64_MAX ? sf_first_non_bool(p, k)
                                                                      : UINT64_MAX;
            if (at != UINT64_MAX) {
                s->first_bad_value = s->pos + at;
                s->bad_field = q->field;
            }
        }
        s->pos += k, p += k, n -= k;
        settle(s);
    }
    return 0;
}

int sf_shard_scanner_done(const sf_shard_scanner *s)
{
    return s->span >= s->end_span;
}

uint64_t sf_shard_scanner_next(const sf_shard_scanner *s)
{
    return s->pos;
}

int64_t sf_shard_scan_spans(const sf_shard_meta *m, const sf_schema *sc, int fd, uint8_t *buf,
                            uint64_t buf_size, uint64_t first, uint64_t end,
                            sf_shard_problem_fn cb, void *ctx)
{
    sf_shard_scanner s;
    int rc = sf_shard_scanner_init(&s, m, sc, first, end, cb, ctx);
    if (rc)
        return rc;
    uint64_t off = s.pos, stop = sf_shard_span_start(m, sc, s.end_span);
    while (!rc && off < stop) {
        uint64_t len = stop - off < buf_size ? stop - off : buf_size;
        if ((rc = sf_pread_full(fd, buf, len, off)))
            rc = sf_fail(rc, "reading data at byte %llu: %s", (unsigned long long)off,
                         sf_strerror(rc));
        else
            rc = sf_shard_scanner_feed(&s, off, buf, len);
        off += len;
    }
    assert(rc || sf_shard_scanner_done(&s));
    int64_t problems = s.problems;
    sf_shard_scanner_free(&s);
    return rc ? rc : problems;
}

int64_t sf_shard_scan_data(const sf_shard_meta *m, const sf_schema *sc, int fd, uint8_t *buf,
                           uint64_t buf_size, sf_shard_problem_fn cb, void *ctx)
{
    return sf_shard_scan_spans(m, sc, fd, buf, buf_size, 0, sf_shard_span_count(m), cb, ctx);
}
