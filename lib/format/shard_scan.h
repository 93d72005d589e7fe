/* The check of a shard's data area (SPEC.md "Reader rules": every record's
 * checksum, zero padding, bool values), fed its bytes in file order from
 * wherever they are: a read buffer (verify, merge, push), or a download's
 * bytes as they arrive, each range of the file
 * with a scanner of its own (dataset_remote.c: the bytes are checked while
 * they are still in the CPU's cache, where a second pass read 1.2 GB back
 * from memory).
 *
 * The data area [SF_SHARD_HEADER_SIZE, index_offset) is cut into spans:
 * span r (r < record_count) is the padding before record r and record r's
 * stored fields; span record_count is the padding after the last record, up
 * to the index. Each span is checked on its own, so a scanner over spans
 * [first, end) finds exactly the problems a scan of the whole area finds in
 * them, in the same order; a span's problems are reported when its last
 * byte has been fed. */
#ifndef SF_FORMAT_SHARD_SCAN_H
#define SF_FORMAT_SHARD_SCAN_H

#include <stdint.h>

#include "format.h"
#include "hash.h"
#include "shard_file.h"

/* A span's pieces: zero padding, or a field's stored bytes (hashed). */
typedef struct sf_scan_piece {
    uint64_t off, len;
    uint32_t field;
    uint8_t zero;  /* padding: every byte must be 0 */
    uint8_t bools; /* an uncompressed bool field: every byte 0 or 1 */
} sf_scan_piece;

typedef struct sf_shard_scanner {
    const sf_shard_meta *m;
    const sf_schema *sc;
    sf_shard_problem_fn cb;
    void *ctx;
    XXH3_state_t *st;
    int64_t problems;  /* reported so far */
    uint64_t span;     /* the span being checked; == end_span: done */
    uint64_t end_span;
    uint64_t pos;      /* the file offset of the next byte needed */
    /* the current span */
    unsigned piece, pieces;
    sf_scan_piece p[1 + 2 * SF_MAX_FIELDS];
    uint64_t checksum; /* the record's, from its index entry */
    uint64_t record_off;
    uint64_t first_bad_pad, first_bad_value;
    uint32_t bad_field;
    int pad_before_bad; /* the padding before the record was reported */
} sf_shard_scanner;

/* The data area's spans: record_count + 1. */
uint64_t sf_shard_span_count(const sf_shard_meta *m);
/* The file offset where span `span` begins (0 <= span <= span count; the
 * span count's "start" is index_offset, where the last span ends). */
uint64_t sf_shard_span_start(const sf_shard_meta *m, const sf_schema *sc, uint64_t span);
/* The spans lying wholly inside the file's bytes [lo, hi): [*first, *end)
 * (empty when *first >= *end). */
void sf_shard_spans_within(const sf_shard_meta *m, const sf_schema *sc, uint64_t lo, uint64_t hi,
                           uint64_t *first, uint64_t *end);

/* A scanner of spans [first, end) of a shard whose metadata was loaded (m
 * and sc outlive it), reporting each problem to cb (NULL: counted only).
 * Problems of spans that need no byte are reported here. 0 or -ENOMEM. */
int sf_shard_scanner_init(sf_shard_scanner *s, const sf_shard_meta *m, const sf_schema *sc,
                          uint64_t first, uint64_t end, sf_shard_problem_fn cb, void *ctx);
void sf_shard_scanner_free(sf_shard_scanner *s); /* NULL ok; again ok */
/* The file's bytes [off, off + n). Bytes before the next one needed are
 * skipped (already fed, or before the first span), bytes after the last
 * span's end ignored; a gap (off past the next byte needed) is
 * SF_E_INVALID, with nothing fed. 0 otherwise. */
int sf_shard_scanner_feed(sf_shard_scanner *s, uint64_t off, const uint8_t *p, uint64_t n);
/* Every span was fed whole: its problems are all reported. */
int sf_shard_scanner_done(const sf_shard_scanner *s);
/* The file offset of the next byte the scanner needs. */
uint64_t sf_shard_scanner_next(const sf_shard_scanner *s);

/* sf_shard_scan_data over spans [first, end) only. */
int64_t sf_shard_scan_spans(const sf_shard_meta *m, const sf_schema *sc, int fd, uint8_t *buf,
                            uint64_t buf_size, uint64_t first, uint64_t end,
                            sf_shard_problem_fn cb, void *ctx);

#endif
