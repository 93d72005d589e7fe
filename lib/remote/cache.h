/* The node's cache of whole remote objects (shards), shared by processes
 * through the file system only: no shared memory, no daemon, nothing a crash
 * leaves locked (flock locks die with their holder).
 *
 * Layout: ROOT/.lock serialises the space accounting; ROOT/SPACE/.shardfeed-space
 * marks a folder as a space (the only folders whose files are counted and
 * evicted: ROOT may be a folder holding other files); ROOT/SPACE/NAME is an
 * object that arrived whole and passed its check; ROOT/SPACE/.part-NAME-PID-N
 * is a download in progress (its writer holds LOCK_EX on it: one whose lock
 * can be taken belongs to a dead process and is removed);
 * ROOT/SPACE/.fill-NAME (empty) makes one process download NAME while the
 * others wait for it.
 *
 * Invariants:
 *  - an object is under its final name only after it was written whole,
 *    fsynced and checked (the download is renamed into place), so a process
 *    killed mid-download leaves only a .part file. The process that
 *    downloaded it reads the checked .part meanwhile (pinned with LOCK_SH,
 *    as objects are), while its publisher thread fsyncs and renames it,
 *    holding the .fill lock until then; a publish that fails removes the
 *    .part; remote_cache_free finishes every publish;
 *  - the bytes of ROOT's files (final and .part: a download reserves its
 *    whole size with ftruncate before its first byte) stay at or under the
 *    limit: room is made first, under ROOT/.lock, by evicting the least
 *    recently used objects (mtime, set at every acquire);
 *  - an object pinned (a descriptor holding LOCK_SH) is never evicted: the
 *    evictor takes LOCK_EX without waiting and passes by what it cannot
 *    lock. A download that cannot find room waits for pins to go, up to
 *    REMOTE_CACHE_WAIT_S, then fails saying the limit is too small. */
#ifndef SF_REMOTE_CACHE_H
#define SF_REMOTE_CACHE_H

#include <stdint.h>
#include <sys/stat.h>

#define REMOTE_CACHE_WAIT_S 120

typedef struct remote_cache remote_cache;

/* Writes the object into fd (opened for writing, at size 0..size) and checks
 * it: 0, or a negative code with sf_fail detail. */
typedef int (*remote_fill_fn)(void *ctx, int fd, uint64_t size);

/* The cache at `root` (made, with its parents, if missing) holding at most
 * `limit` bytes; this user's objects go to the subfolder `space`. */
int remote_cache_open(remote_cache **out, const char *root, uint64_t limit, const char *space);
void remote_cache_free(remote_cache *c); /* NULL ok */
const char *remote_cache_dir(const remote_cache *c); /* ROOT/SPACE */
/* How long a download waits for room, and a reader for another process's
 * download of the object that writes nothing (default REMOTE_CACHE_WAIT_S). */
void remote_cache_set_wait(remote_cache *c, unsigned seconds);

/* A descriptor of object `name` (`size` bytes) opened with O_RDONLY | oflags
 * and pinned (LOCK_SH), fetched with fill first when the cache lacks it.
 * Close it, or remote_cache_unpin it, when done. */
int remote_cache_acquire(int *fd, remote_cache *c, const char *name, uint64_t size, int oflags,
                         remote_fill_fn fill, void *ctx);
/* remote_cache_acquire for a caller holding other objects pinned: it waits
 * for nothing that may need those pins to go (room in the cache, a download
 * of `name` by another thread or process, which may itself be waiting for
 * room) and returns -EAGAIN (no detail) instead. Downloads `name` when there
 * is room for it now. */
int remote_cache_try_acquire(int *fd, remote_cache *c, const char *name, uint64_t size,
                             int oflags, remote_fill_fn fill, void *ctx);
/* remote_cache_acquire without the fill: -ENOENT (no detail) when the
 * cache lacks `name`, for a caller that must not wait for a download (it
 * holds a lock others need to unpin).
 *
 * Both check what they find: a cached file of another size than `size`
 * (cut short or appended to since its download) is removed and fetched
 * again, saying so on stderr (here: -ENOENT, nothing removed: the removal
 * waits for ROOT/.lock, which this caller must not do; its
 * remote_cache_acquire removes it); anything but a file under the name is
 * an error naming its path. */
int remote_cache_acquire_cached(int *fd, remote_cache *c, const char *name, uint64_t size,
                                int oflags);
/* Removes object `name` from the cache if its file is still `st`'s (device
 * and inode: not a copy downloaded again since): a copy found damaged. Its
 * readers keep reading what they hold; the next acquire downloads it
 * again. 1 (removed now), 0 (already gone, or another file: nothing
 * removed) or a negative code. */
int remote_cache_remove(remote_cache *c, const char *name, const struct stat *st);
/* Unpins an acquired descriptor kept open (it may be evicted from now on). */
void remote_cache_unpin(int fd);
/* Pins an unpinned descriptor again: 1 when its file is still the cache's,
 * 0 when it was evicted meanwhile (close it and acquire again). */
int remote_cache_repin(int fd);
/* Fetches `name` into the cache if it is missing, without pinning it (the
 * prefetcher; with `nowait`, it returns 0 at once when there is no room now
 * or another download of it is under way). 0 or a negative code. */
int remote_cache_prefetch(remote_cache *c, const char *name, uint64_t size, int nowait,
                          remote_fill_fn fill, void *ctx);
/* `name` downloaded now with fill, whether or not the cache holds it, into
 * a .part of its own (room made under the limit as for any download; path
 * copied into `part`), never published: *fd (O_RDWR, LOCK_EX) is the
 * caller's until remote_cache_drop removes the file. What `verify URL`
 * checks: the store's bytes, not a copy cached earlier. A process killed
 * meanwhile leaves a .part the evictor removes, as of any download. */
int remote_cache_download_private(int *fd, char *part, size_t part_cap, remote_cache *c,
                                  const char *name, uint64_t size, remote_fill_fn fill, void *ctx);
/* Removes and closes what remote_cache_download_private made (fd -1 or part
 * "": that part only). */
void remote_cache_drop(int fd, const char *part);

#endif
