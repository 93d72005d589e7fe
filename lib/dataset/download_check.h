/* The check of a shard downloaded into the node's cache (dataset_remote.c),
 * made while its bytes arrive: every record's checksum, the padding and the
 * bool values (shard_scan.h) hashed from the transfer's buffers while they
 * are still in the CPU's cache, then the header, footer and index read
 * back from the file and compared with the ones open read. Where a scan of
 * the whole file after the download read 1.2 GB back from memory (the
 * remote-large set of tools/bench/run), only the records a part's edge
 * cuts (at most one per edge) are read back.
 *
 * A download comes in parts fetched at once (fetch.h: remote_watch); each
 * part has a scanner over the spans it holds whole. The spans no scanner
 * saw whole (cut by an edge, or in a part that started again or lost its
 * scanner) are scanned from the file when the download is done. */
#ifndef SF_DATASET_DOWNLOAD_CHECK_H
#define SF_DATASET_DOWNLOAD_CHECK_H

#include <stdint.h>

#include "fetch.h"
#include "shard_file.h"
#include "shard_scan.h"

/* The damage one download showed: a structure's bad offset, or each
 * damaged record and padding folded into a digest (a sum: parts report in
 * any order), so that two downloads compare equal only when they show the
 * same damage in the same places. */
typedef struct download_damage {
    uint64_t bad_offset;
    uint64_t digest;
} download_damage;

typedef struct download_part {
    sf_shard_scanner scan;
    int live;             /* scan is initialised */
    int in_order;         /* every byte of the part since lo was fed, in order */
    uint64_t lo, next;    /* the part's first byte; the next one expected */
    uint64_t first, end;  /* the spans scan checks */
    download_damage d;
} download_part;

typedef struct download_check {
    const sf_shard_meta *want; /* the metadata open read (outlives the check) */
    const sf_schema *schema;
    download_part part[REMOTE_PARTS];
    remote_watch watch; /* for remote_pool_fetch_to_fd; ctx is this check */
} download_check;

void download_check_init(download_check *c, const sf_shard_meta *want, const sf_schema *schema);
/* Forgets what the parts saw (before the download is fetched again). */
void download_check_reset(download_check *c);
void download_check_free(download_check *c); /* NULL ok */
/* After the download into fd: 0 (all of it checks), a negative code for
 * damage in its structure or a header, footer or index that differs from
 * open's (the offset in d->bad_offset), or the number of damaged records
 * and padding (> 0, each in d->digest). */
int64_t download_check_finish(download_check *c, int fd, const sf_shard_expect *exp,
                              download_damage *d);

#endif
