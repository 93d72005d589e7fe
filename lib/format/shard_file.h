/* Reading and checking a whole shard file. Shared by the reader (open,
 * verify) and the packer (resume keeps only shards that check clean), so
 * there is exactly one implementation of SPEC.md's reader rules. */
#ifndef SF_FORMAT_SHARD_FILE_H
#define SF_FORMAT_SHARD_FILE_H

#include <stdint.h>

#include "format.h"
#include "io.h"

/* What the manifest says a shard must be. */
typedef struct sf_shard_expect {
    const sf_schema *schema;
    uint64_t shard_index;
    uint64_t dataset_id;
    uint32_t align;
    const sf_shard_desc *desc; /* NULL: no manifest entry to compare with */
} sf_shard_expect;

/* A shard's metadata after sf_shard_load_meta. */
typedef struct sf_shard_meta {
    sf_shard_header header;
    sf_shard_footer footer;
    uint64_t file_size;
    uint8_t *index; /* header.index_size bytes, sf_big_alloc'd */
} sf_shard_meta;

/* Reads and checks the header, footer and index of the shard open on `fd`
 * (SPEC.md "Reader rules" 1-6). On failure returns a negative code with the
 * detail (including the byte offset) in sf_last_error(), and *bad_offset
 * (if non-NULL) set to the offset of the damaged structure. */
int sf_shard_load_meta(sf_shard_meta *out, int fd, const sf_shard_expect *exp, uint64_t *bad_offset);
/* Reads exactly len bytes at offset off of a shard: 0, or a negative code
 * (SF_E_TRUNCATED when the shard ends first) with sf_fail detail. */
typedef int (*sf_shard_read_fn)(void *ctx, void *buf, uint64_t len, uint64_t off);
/* sf_shard_load_meta of a shard of file_size bytes read through `read`
 * (a remote object's range requests): the same checks, the same errors. */
int sf_shard_load_meta_from(sf_shard_meta *out, uint64_t file_size, sf_shard_read_fn read_at,
                            void *ctx, const sf_shard_expect *exp, uint64_t *bad_offset);
void sf_shard_meta_clear(sf_shard_meta *m);

/* What sf_shard_scan_data found wrong. */
enum sf_shard_problem_kind {
    SF_PROBLEM_CHECKSUM, /* a record's payload does not hash to its checksum */
    SF_PROBLEM_PADDING,  /* a padding byte is not zero */
    SF_PROBLEM_VALUE,    /* a value breaks its dtype: a bool byte other than 0 and 1 */
};

/* One problem found in a shard's data area. */
typedef struct sf_shard_problem {
    int code;        /* SF_E_CHECKSUM for a record, SF_E_CORRUPT for padding and values */
    int64_t record;  /* record within the shard, or -1 for padding outside records */
    uint64_t offset; /* byte offset in the file */
    enum sf_shard_problem_kind kind;
    uint32_t field;  /* SF_PROBLEM_VALUE: the field */
} sf_shard_problem;

typedef void (*sf_shard_problem_fn)(void *ctx, const sf_shard_problem *p);

/* Problem p of a shard of schema s in words, into out[0..cap): "record 3:
 * checksum mismatch in its payload at bytes 4096..", "record 3: bool field
 * 'mask' holds a byte other than 0 and 1 at byte 4100", "padding is not
 * zero at byte 130". Verify, merge and push name problems with it. */
void sf_shard_problem_text(char *out, size_t cap, const sf_shard_problem *p, const sf_schema *s);

/* An sf_shard_problem_fn (ctx: an sf_first_problem) that keeps the first
 * problem reported and counts them all. */
typedef struct sf_first_problem {
    sf_shard_problem first;
    int64_t count;
} sf_first_problem;
void sf_keep_first_problem(void *ctx, const sf_shard_problem *p);

/* Streams the data area [128, index_offset) of a shard whose metadata was
 * loaded: hashes every record's payload and compares it with its index
 * entry, checks that every padding byte is zero, and that the stored
 * values of uncompressed bool fields are 0 or 1 (reported for records
 * whose checksum holds). Calls `cb` for each
 * problem (`cb` may be NULL). Reads sequentially through `buf` (buf_size bytes, >= 64 KiB).
 * Returns the number of problems (>= 0), or a negative code for an I/O error.
 * It is an sf_shard_scanner fed in order (shard_scan.h). */
int64_t sf_shard_scan_data(const sf_shard_meta *m, const sf_schema *s, int fd, uint8_t *buf,
                           uint64_t buf_size, sf_shard_problem_fn cb, void *ctx);

/* Reads and decodes DIR/manifest.sfm, its size capped at the largest valid
 * manifest before anything is allocated. Errors name the file. */
int sf_manifest_load(sf_manifest *m, const char *dir);

#endif
