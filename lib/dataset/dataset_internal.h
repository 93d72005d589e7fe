/* The opened dataset, shared by every part of the reader. */
#ifndef SF_READER_DATASET_INTERNAL_H
#define SF_READER_DATASET_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <zstd.h>

#include "format.h"
#include "metadata.h"
#include "shard_file.h"
#include "shardfeed/dataset.h"
#include "shardfeed/remote.h"

typedef struct sf_open_shard {
    char name[SF_SHARD_NAME_MAX];
    sf_shard_meta meta;   /* header, footer, index bytes */
    /* read-only mmap of the whole file, or NULL until used (dataset_map) */
    _Atomic(const uint8_t *) map;
} sf_open_shard;

typedef struct dataset_files dataset_files;
typedef struct dataset_remote dataset_remote;

struct sf_dataset {
    char *dir;
    sf_manifest manifest;
    sf_open_shard *shards;
    dataset_files *files;     /* the shards' descriptors (shard_files.c) */
    dataset_remote *remote;   /* a dataset read from a URL (dataset_remote.c), else NULL */
    pthread_mutex_t map_lock; /* serialises lazy mmaps and dctx */
    ZSTD_DCtx *dctx;          /* random access's decompression context, when idle */
    char source[33];          /* metadata "source", "" when absent */
    uint32_t class_count;     /* metadata "class_names" */
    sf_class_name *classes;   /* into manifest.metadata */
};

/* Fills source and the class name table from the (validated) manifest. */
int sf_dataset_load_metadata(sf_dataset *ds);
void sf_dataset_free_metadata(sf_dataset *ds);

/* ---- Shard files (shard_files.c) ----
 *
 * A dataset keeps no descriptor per shard: shards are opened when first
 * read, relative to a descriptor of the dataset's folder (a rename of the
 * folder while open changes nothing), buffered or O_DIRECT, and at most
 * dataset_fd_cap of them stay open (the dataset's share of half the soft
 * RLIMIT_NOFILE, which all open datasets of the process share; it changes
 * as datasets open and close): past that the least recently used idle one
 * is closed. So a dataset of 20,000
 * shards opens and reads under `ulimit -n 256`. A shard's map is made on
 * first use too, and keeps no descriptor. Thread-safe. */
int dataset_files_init(sf_dataset *ds);
void dataset_files_free(sf_dataset *ds); /* none made ok */
/* Takes the dataset out of the process's descriptor budget (again in
 * dataset_files_free: once is enough). Before a close unmaps its shards:
 * another dataset's open reshares the budget, and its trim of this one
 * unmapped a map the close had unmapped already. */
void dataset_files_leave_budget(sf_dataset *ds);
/* The descriptor of `shard` (O_DIRECT with `direct`), opened if need be:
 * 0, or a negative code with detail naming the file (SF_E_UNSUPPORTED for
 * O_DIRECT on a file system without it). The caller holds it until
 * dataset_fd_release (once per successful acquire) and does not close it. */
int dataset_fd_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct);
/* dataset_fd_acquire for a caller already holding other shards: -EAGAIN
 * (no detail) where a dataset at a URL would wait for room in its cache,
 * which those shards' pins may be taking (a reader of several shards at
 * once waited for itself until the cache's wait ran out). It still
 * downloads the shard when there is room now. */
int dataset_fd_try_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct);
void dataset_fd_release(sf_dataset *ds, uint64_t shard, int direct);
/* Whether every shard's descriptors fit under the cap: then they stay open
 * once opened, and a descriptor acquired stays valid until the dataset
 * closes (io_uring may register them). */
int dataset_fd_all_kept(const sf_dataset *ds);
/* A dataset at a URL: unpins in the cache the shards this process keeps
 * pinned though nobody reads them now (shard_files.c, IDLE_PINNED). */
void dataset_files_unpin_idle(sf_dataset *ds);
/* A dataset at a URL: whether this dataset holds `shard`'s file open with
 * the cache's pin (in use, or idle and kept pinned): then it is in the
 * cache and stays there, and a prefetch of it has nothing to do. */
int dataset_files_cache_pinned(sf_dataset *ds, uint64_t shard);
/* A dataset at a URL: whether all its shards fit among the idle pins it
 * keeps (IDLE_PINNED shards, the descriptor budget, an IDLE_PINNED_SHARE
 * of the cache limit in bytes): then a shard read once stays pinned, open
 * and mapped until close, unless a download needs the room
 * (dataset_files_unpin_idle). 0 for a folder. */
int dataset_files_pins_last(const sf_dataset *ds);
/* A dataset at a URL: whether this dataset holds either of `shard`'s
 * files open (buffered or O_DIRECT), which at a URL means pinned in the
 * cache. Without the lock, as a hint: what it says may have changed by the
 * time it returns (another thread may let the shard go, or take it). */
int dataset_files_held(const sf_dataset *ds, uint64_t shard);
uint64_t dataset_fd_cap(const sf_dataset *ds);
/* The read-only map of the whole of `shard`, made on first use and kept
 * until the dataset closes (the fault guard is installed first: touch it
 * only under the guard). */
int dataset_map(const uint8_t **out, sf_dataset *ds, uint64_t shard);
/* Whether a map of dataset_map_pinned lasts only while its shard's
 * descriptor is acquired: a dataset at a URL, whose cache may evict a shard
 * once nobody pins it (a map of an evicted file would hold its disk space
 * past the cache's limit). Else the maps stay until close. */
int dataset_maps_follow_pins(const sf_dataset *ds);
/* dataset_map for a caller that holds `shard`'s buffered descriptor
 * (dataset_fd_acquire(.., shard, 0)): the map is valid until that
 * descriptor's release (dataset_maps_follow_pins), at least; it is unmade
 * when the shard gives up its pin in the cache (shard_files.c). */
int dataset_map_pinned(const uint8_t **out, sf_dataset *ds, uint64_t shard);

/* ---- Datasets at a URL (dataset_remote.c; README "Remote datasets") ----
 *
 * ds->dir is then the URL. Open fetches the manifest and each shard's
 * header, footer and index with range requests; a shard's descriptor
 * (dataset_fd_acquire) is its file in the node's cache, downloaded whole and
 * checked first (mode cache), while mode direct reads records with
 * dataset_remote_read and opens no descriptor. */

/* 0, or SF_E_INVALID naming what is wrong with `opts` (NULL ok): checked for
 * a folder too, so a caller's wrong struct fails there, not first at a URL. */
int dataset_remote_opts_check(const sf_remote_opts *opts);
/* Opens url's location (opts checked), fetches and decodes its manifest into
 * ds->manifest and, in mode cache, opens the cache. */
int dataset_remote_open(sf_dataset *ds, const char *url, const sf_remote_opts *opts);
void dataset_remote_close(sf_dataset *ds); /* NULL remote ok */
/* sf_shard_load_meta of shard i through range requests (fetched again
 * when damaged in transit): 0, or the failure with *bad the offset. Called
 * for many shards at once (dataset.c, load_shard_metas). */
int dataset_remote_load_meta(sf_dataset *ds, uint64_t i, uint64_t *bad);
/* The pinned descriptor of `shard`'s file in the cache (O_DIRECT with
 * `direct`), downloaded first when the cache lacks it (outside any lock of
 * the dataset's). A shard this process just downloaded is its checked .part
 * until its publish finishes (lib/remote/cache.c). With `nowait`, -EAGAIN
 * (no detail) where it would wait for room or for another download of it
 * (remote_cache_try_acquire). */
int dataset_remote_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct, int nowait);
/* `shard` downloaded from the store now, whether or not the cache holds it,
 * and checked as a download into the cache is (fill_shard), into a file of
 * the cache's folder that is never published (counted against its limit;
 * remote_cache_download_private): what `verify URL` checks, the store's
 * bytes, not a cached copy. dataset_remote_drop removes it. */
int dataset_remote_download(int *out, char *part, size_t part_cap, sf_dataset *ds,
                            uint64_t shard);
void dataset_remote_drop(int fd, const char *part);
/* The pinned descriptor of `shard`'s cached file (O_DIRECT with `direct`),
 * or -ENOENT when the cache lacks it (dataset_remote_acquire first: this one
 * never downloads, it runs under the files' lock). */
int dataset_remote_fd(int *out, sf_dataset *ds, uint64_t shard, int direct);
/* Unpins a descriptor of dataset_remote_fd about to be closed, marking its
 * file used now (the evictor's order). */
void dataset_remote_unpin(int fd);
/* Bytes [off, off + len) of `shard` by a range request (mode direct). */
int dataset_remote_read(sf_dataset *ds, uint64_t shard, void *dst, uint64_t off, uint64_t len);
/* Whether records are read by range requests (mode direct). */
int dataset_remote_direct(const sf_dataset *ds);
/* The cache folder's size limit in bytes (0: not at a URL). */
uint64_t dataset_remote_cache_limit(const sf_dataset *ds);
/* Tells the prefetcher that `shard` is being read: without a plan it fills
 * the cache with the shards after it (in shard order, wrapping), up to half
 * the cache limit ahead; with one, `shard` and those before it leave it. */
void dataset_remote_reading(sf_dataset *ds, uint64_t shard);
/* Tells the prefetcher the reader's plan: `shard` is the next one its
 * schedule will touch first (called in that order, ahead of the reads):
 * from then on the prefetcher fills the cache in the plan's order only, at
 * most PREFETCH_SHARDS and half the limit ahead, never in shard order.
 * `ahead`: a batch beyond those scheduled, planned only while the plan's
 * shards stay within a quarter of the limit. 1 when `shard` is in the plan
 * (or needs none), 0 when the plan is full (PLAN_CAP shards not yet read,
 * or that quarter): plan it again later. A no-op (1) unless the dataset is
 * at a URL in mode cache. */
int dataset_remote_plan(sf_dataset *ds, uint64_t shard, int ahead);
/* How many shards the prefetcher downloads ahead of the reader at most
 * (PREFETCH_SHARDS): what a plan should reach. 0 unless the dataset is at a
 * URL in mode cache (nothing plans then). */
uint64_t dataset_remote_plan_reach(const sf_dataset *ds);
/* Drops the plan: the reader's position moved (a resume, a restore, a new
 * iteration after a break), so the shards planned for the batches it left
 * will not be read there. Downloads under way go on and land in the cache;
 * they no longer count in the prefetcher's reach. A no-op unless the
 * dataset is at a URL in mode cache. */
void dataset_remote_plan_reset(sf_dataset *ds);

/* Says once on stderr (per process) when the shards that one window of the
 * reader's order touches (`window` positions made of runs of `block_size`
 * consecutive samples; 0: no shuffle) do not fit in the cache limit with
 * the prefetcher's reach: the numbers, and the limit or window that would
 * fit. Changes nothing: the order stays the local read's. A no-op unless
 * the dataset is at a URL in mode cache. */
void dataset_remote_check_window(const sf_dataset *ds, uint64_t block_size, uint64_t window);

/* Shard holding `sample`; *local receives the record number within it. */
uint64_t sf_dataset_locate(const sf_dataset *ds, uint64_t sample, uint64_t *local);
/* A record of `shard` failed its checks as read from the cache's copy (a
 * dataset at a URL in mode cache; "" into out for any other): the copy is
 * removed, so the next open of the shard downloads it again (its bytes
 * were checked when it was downloaded: damaged in the cache since, or
 * stored so at the store, which the download keeps), and out says where it
 * was, for the error, which named only the URL. */
void dataset_remote_damaged_copy(char *out, size_t cap, sf_dataset *ds, uint64_t shard);
/* fstat of the file the dataset holds open for `shard` (either entry): 0,
 * or -1 when it holds none. */
int dataset_files_cached_stat(sf_dataset *ds, uint64_t shard, struct stat *st);
/* Whether the file of `shard` is now shorter than when the dataset was
 * opened (*now: its size), for the detail of a read that came up short:
 * a shard truncated while being read. */
int sf_dataset_shard_shrank(const sf_dataset *ds, uint64_t shard, uint64_t *now);
/* Decodes the index entry of record `local` of shard `shard`. */
void sf_dataset_entry(sf_index_entry *e, const sf_dataset *ds, uint64_t shard, uint64_t local);

#endif
