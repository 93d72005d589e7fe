/* The shards' file descriptors and maps, opened when first used and relative
 * to the dataset's directory descriptor (dataset_internal.h, "Shard files").
 *
 * Every (shard, mode) pair -- mode buffered or O_DIRECT -- has one entry.
 * While the dataset's shards all fit under the cap twice over (every shard
 * in both modes), an entry once opened stays open until close and a lookup
 * is one atomic load: the common case of a few hundred shards or fewer costs
 * nothing per read. Past that, open entries nobody uses sit on an LRU list
 * and the least recently used one is closed to make room; entries in use
 * (pinned by dataset_fd_acquire until dataset_fd_release) are never closed,
 * so the cap is exceeded only by what is being read at that moment (an I/O
 * thread pins at most its reads in flight).
 *
 * A dataset at a URL keeps a shard's file open only while it holds the
 * cache's pin on it (in use, or among the idle ones kept pinned: IDLE_PINNED),
 * and its map (mmap engine) no longer than that: an unpinned file may be
 * evicted, and one evicted but still open or mapped would keep its disk
 * space past the cache's limit.
 *
 * A shard is opened by name again after the dataset opened it (its O_DIRECT
 * entry, or any entry the LRU closed): each open is checked to find the same
 * file (device and inode) the dataset's open read the shard's index from,
 * of the same size, with the same header and footer bytes (which hold the
 * index's checksum: file systems hand a deleted file's inode number to the
 * next file made, so `rm` and a copy put another shard under the same
 * device and inode), so a folder re-packed or synced over while a trainer
 * reads it is an error naming the shard, never records read at the old
 * index's offsets from the new file. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "error_internal.h"
#include "fault_guard.h"
#include "nofile.h"

#define NO_ENTRY UINT64_MAX
#define FD_CAP_MIN 1u
#define FD_CAP_MAX 65536u

typedef struct shard_fd {
    _Atomic int fd;     /* -1: closed */
    /* users now (dataset_fd_acquire without its release), and at a URL one
     * more while `held`; changed under f->lock, except a remote entry's
     * between 1 and more (pin_again, unpin_not_last) */
    _Atomic uint32_t pins;
    /* on the LRU list (open, not kept; at a URL: held, else unused): neighbours */
    uint64_t prev, next;
    int cache_pinned;    /* a dataset at a URL: the file holds the cache's pin */
    /* a dataset at a URL: among the idle ones kept pinned (IDLE_PINNED), which
     * hold one pin of the entry's own; under f->lock */
    int held;
} shard_fd;

/* A dataset at a URL: entries whose last user released them keep their
 * cache pin (LOCK_SH), at most this many (the one kept longest is given up
 * first: a shard read again without the lock keeps its place, so this is
 * the order in which they were first kept, not of their last use), and
 * at most IDLE_PINNED_SHARE of the cache limit in bytes (other readers of
 * the cache, another dataset of this process or another process, may need
 * that room: a download waits for it, and a reader that has stopped does
 * not give its idle pins back). The
 * reader pins a shard for each record it reads, and two I/O threads seldom
 * overlap, so unpinning at every release cost an unpin, a repin and an
 * fstat per record: 0.40 s of a 60,000-record epoch from one cached shard,
 * 0.14 s without. A global shuffle switches shards at nearly every record,
 * so the count must cover the shards an epoch moves between: with 4, an
 * epoch over 13 cached shards made 81,000 flock and 41,000 fstat calls
 * (0.65 s warm; 0.25 s with 16). With 32, an epoch over 66 cached shards
 * (the small set in shards of 800 KiB) took 1.1-1.5 s against 0.008 s from
 * a local folder: a dataset of more shards than the count churns as if
 * there were none. So the count is large, and what bounds the pins is the
 * byte budget, which protects the cache's room, and the descriptor budget
 * (make_room_locked closes the least recently used idle entry, pin and
 * all). A process that stops reading keeps these pinned until it reads
 * again or closes; it unpins them before it downloads (room for the
 * download may need them evicted).
 *
 * A kept entry holds a pin of its own (shard_fd.held) rather than sitting
 * at 0 pins, and stays kept while readers use it again: its pins then go
 * from 1 up and back to 1 without f->lock (pin_again, unpin_not_last). At 0
 * it was taken off the lists under f->lock at every first use and put back
 * at every last release: 16 I/O threads reading the small set from a warm
 * cache took 2.5 times as long as from a folder of the same files, 2 us a
 * shard per claim (an H200 host's 16 cores, 2026-12-04). Only giving up the
 * hold (drop_hold_locked: the count, the byte budget, the descriptor share,
 * a download's room) takes the pins to 0, under f->lock, and closes the
 * entry then or at its last user's release. */
#define IDLE_PINNED 1024u
#define IDLE_PINNED_SHARE 8u /* at most 1/8 of the cache limit */

/* The file a shard's name named when the dataset first opened it. */
typedef struct shard_identity {
    uint64_t dev, ino;
    int known;
} shard_identity;

struct dataset_files {
    sf_dataset *ds;
    int dirfd;
    shard_identity *ids;   /* one per shard */
    uint64_t count;        /* entries: 2 per shard (buffered, O_DIRECT) */
    shard_fd *fds;
    pthread_mutex_t lock;  /* pins, the LRU list, opening and closing */
    uint64_t open;         /* entries with an fd */
    /* the most open entries kept (more only while pinned): this dataset's
     * share of the process's budget, changed under f->lock by whoever
     * reshares it (budget_share_locked) and read without it by the reader */
    _Atomic uint64_t cap;
    int keep;              /* every entry fits: opened ones stay open, no pins */
    int budgeted;          /* joined the process's budget (budget_join) */
    unsigned budget_generation; /* the budget's then (a forked child starts another) */
    dataset_files *budget_prev, *budget_next; /* the budget's sharing datasets (!keep) */
    uint64_t lru_head, lru_tail; /* least and most recently released */
    uint64_t idle_pinned[IDLE_PINNED]; /* oldest first: idle, cache_pinned */
    unsigned idle_pinned_n;
    uint64_t idle_pinned_bytes; /* their shards' files */
    /* a dataset at a URL, per shard: its map was made by dataset_map_pinned
     * and is unmade when its buffered entry gives up its cache pin */
    uint8_t *map_follows_pin;
    /* a dataset at a URL, per shard: its map is kept until close
     * (dataset_map), and its buffered entry keeps one pin until then */
    uint8_t *kept_pin;
    uint64_t kept_bytes; /* the files of those shards */
};

/* Half the soft RLIMIT_NOFILE, for all the process's open datasets
 * together: the rest stays the caller's (sockets, checkpoints, other files;
 * the shared libraries a Python process maps are not fds but its imports
 * are). */
static uint64_t fd_cap_default(void)
{
    return sf_nofile_share(2, FD_CAP_MIN, FD_CAP_MAX);
}

static uint64_t entry_of(uint64_t shard, int direct)
{
    return shard * 2 + (direct != 0);
}

static void lru_unlink(dataset_files *f, uint64_t e)
{
    shard_fd *x = &f->fds[e];
    if (x->prev != NO_ENTRY)
        f->fds[x->prev].next = x->next;
    else
        f->lru_head = x->next;
    if (x->next != NO_ENTRY)
        f->fds[x->next].prev = x->prev;
    else
        f->lru_tail = x->prev;
    x->prev = x->next = NO_ENTRY;
}

static void lru_push(dataset_files *f, uint64_t e)
{
    shard_fd *x = &f->fds[e];
    x->prev = f->lru_tail;
    x->next = NO_ENTRY;
    if (f->lru_tail != NO_ENTRY)
        f->fds[f->lru_tail].next = e;
    else
        f->lru_head = e;
    f->lru_tail = e;
}

/* Under f->lock: entry e (in use again, or closed) leaves idle_pinned. */
static void idle_pinned_forget_locked(dataset_files *f, uint64_t e)
{
    for (unsigned i = 0; i < f->idle_pinned_n; i++)
        if (f->idle_pinned[i] == e) {
            memmove(&f->idle_pinned[i], &f->idle_pinned[i + 1],
                    (f->idle_pinned_n - i - 1) * sizeof f->idle_pinned[0]);
            f->idle_pinned_n--;
            f->idle_pinned_bytes -= f->ds->manifest.shards[e / 2].file_size; /* entry_of: shard * 2 + direct */
            return;
        }
}

/* Under f->lock: entry e (nobody using it) is about to give up its cache
 * pin: the map of its shard goes first when it followed the pin. Once
 * unpinned, the cache may evict the file, and a map of an evicted file would
 * hold its disk space past the cache's limit until the dataset closed.
 * Nobody reads the map: a reader holds the entry's pin while it does
 * (dataset_map_pinned), and pins == 0 cannot change under f->lock. */
static void unmap_followed_locked(dataset_files *f, uint64_t e)
{
    uint64_t shard = e / 2; /* entry_of: shard * 2 + direct */
    assert(f->fds[e].pins == 0);
    if (e % 2 || !f->map_follows_pin || !f->map_follows_pin[shard])
        return;
    sf_open_shard *s = &f->ds->shards[shard];
    const uint8_t *map = atomic_exchange_explicit(&s->map, NULL, memory_order_acq_rel);
    assert(map && "a map that follows the pin exists until unmade here");
    munmap((void *)map, s->meta.file_size);
    f->map_follows_pin[shard] = 0;
}

/* Under f->lock: closes entry e, which nobody uses and no list holds,
 * giving up its cache pin if it holds one (its map first:
 * unmap_followed_locked). */
static void close_entry_locked(dataset_files *f, uint64_t e)
{
    shard_fd *x = &f->fds[e];
    assert(x->pins == 0 && !x->held && x->prev == NO_ENTRY && x->next == NO_ENTRY);
    unmap_followed_locked(f, e);
    if (x->cache_pinned)
        dataset_remote_unpin(atomic_load(&x->fd)); /* marks it used, for the evictor's order */
    x->cache_pinned = 0;
    close(atomic_load(&x->fd));
    atomic_store(&x->fd, -1);
    f->open--;
}

/* Under f->lock: closes idle entry e (on the LRU list, not held). */
static void close_idle_locked(dataset_files *f, uint64_t e)
{
    lru_unlink(f, e);
    close_entry_locked(f, e);
}

/* Under f->lock: remote entry e, kept pinned while idle, gives up its hold
 * and leaves the lists; closed now when nobody uses it, else at its last
 * user's release (which may keep it again). Readers take and give back
 * pins meanwhile without the lock, but never from or to 0: the decrement
 * here that reaches 0 is the last one. */
static void drop_hold_locked(dataset_files *f, uint64_t e)
{
    shard_fd *x = &f->fds[e];
    assert(x->held && x->cache_pinned && atomic_load(&x->pins) > 0);
    x->held = 0;
    lru_unlink(f, e);
    idle_pinned_forget_locked(f, e);
    if (atomic_fetch_sub_explicit(&x->pins, 1, memory_order_acq_rel) == 1)
        close_entry_locked(f, e);
}

/* Under f->lock: the oldest idle entry still pinned in the cache gives its
 * pin up, and is closed (unless a reader took it again meanwhile: then at
 * its release): a descriptor of a file the cache then evicts would
 * hold its disk space past the cache's limit (an unlinked file takes its
 * space until its last descriptor and map go), so a dataset at a URL keeps
 * open only what it holds pinned; it opens a shard by name again, pinned,
 * when it reads it next. */
static void idle_unpin_oldest_locked(dataset_files *f)
{
    assert(f->idle_pinned_n > 0);
    drop_hold_locked(f, f->idle_pinned[0]);
}

/* Under f->lock: the last user of remote entry e is releasing it: its pin
 * becomes the entry's hold (kept pinned and open), the oldest hold given
 * up while more than IDLE_PINNED entries or more than the byte budget are
 * kept (a shard larger than it is unpinned at once, as before). */
static void idle_pinned_push_locked(const sf_dataset *ds, dataset_files *f, uint64_t e)
{
    shard_fd *x = &f->fds[e];
    assert(x->cache_pinned && !x->held && atomic_load(&x->pins) > 0);
    if (f->idle_pinned_n == IDLE_PINNED)
        idle_unpin_oldest_locked(f);
    x->held = 1;
    lru_push(f, e);
    f->idle_pinned[f->idle_pinned_n++] = e;
    f->idle_pinned_bytes += ds->manifest.shards[e / 2].file_size; /* entry_of: shard * 2 + direct */
    uint64_t budget = dataset_remote_cache_limit(ds) / IDLE_PINNED_SHARE;
    while (f->idle_pinned_n && f->idle_pinned_bytes > budget)
        idle_unpin_oldest_locked(f); /* forgets it: the bytes go down */
    assert(f->idle_pinned_n || f->idle_pinned_bytes == 0);
}

int dataset_files_cache_pinned(sf_dataset *ds, uint64_t shard)
{
    dataset_files *f = ds->files;
    const shard_fd *x = &f->fds[entry_of(shard, 0)];
    pthread_mutex_lock(&f->lock);
    int pinned = atomic_load_explicit(&x->fd, memory_order_relaxed) >= 0 && x->cache_pinned;
    pthread_mutex_unlock(&f->lock);
    return pinned;
}

int dataset_files_cached_stat(sf_dataset *ds, uint64_t shard, struct stat *st)
{
    dataset_files *f = ds->files;
    int rc = -1;
    pthread_mutex_lock(&f->lock);
    for (int direct = 0; direct < 2 && rc; direct++) {
        int fd = atomic_load_explicit(&f->fds[entry_of(shard, direct)].fd, memory_order_relaxed);
        if (fd >= 0 && fstat(fd, st) == 0)
            rc = 0;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int dataset_files_pins_last(const sf_dataset *ds)
{
    const sf_manifest *m = &ds->manifest;
    if (!ds->remote || m->shard_count > IDLE_PINNED || m->shard_count > dataset_fd_cap(ds))
        return 0;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < m->shard_count; i++)
        bytes += m->shards[i].file_size;
    return bytes <= dataset_remote_cache_limit(ds) / IDLE_PINNED_SHARE;
}

int dataset_files_held(const sf_dataset *ds, uint64_t shard)
{
    /* At a URL an entry is open only while it holds the cache's pin; a
     * reader with O_DIRECT holds the shard's other entry. */
    const shard_fd *fds = ds->files->fds;
    return atomic_load_explicit(&fds[entry_of(shard, 0)].fd, memory_order_relaxed) >= 0 ||
           atomic_load_explicit(&fds[entry_of(shard, 1)].fd, memory_order_relaxed) >= 0;
}

void dataset_files_unpin_idle(sf_dataset *ds)
{
    dataset_files *f = ds->files;
    pthread_mutex_lock(&f->lock);
    while (f->idle_pinned_n)
        idle_unpin_oldest_locked(f);
    pthread_mutex_unlock(&f->lock);
}

/* Under f->lock: closes the least recently used idle entry (at a URL: gives
 * up its hold, closing it unless a reader uses it); 0 when none. */
static int close_lru_locked(dataset_files *f)
{
    uint64_t e = f->lru_head;
    if (e == NO_ENTRY)
        return 0;
    if (f->fds[e].held)
        drop_hold_locked(f, e);
    else
        close_idle_locked(f, e); /* closing drops its cache pin */
    return 1;
}

/* Under f->lock: closes least recently used entries until one more fits. */
static void make_room_locked(dataset_files *f)
{
    while (f->open >= atomic_load_explicit(&f->cap, memory_order_relaxed) && close_lru_locked(f))
        ;
}

/* ---- The process's budget ----
 *
 * All open datasets of a process draw on one budget of descriptors, half the
 * soft RLIMIT_NOFILE (each took half for itself before: a mix of two
 * 1,500-shard datasets held all 1,024 under a global shuffle, and the
 * trainer's next open of anything failed with "Too many open files").
 *
 * A dataset whose entries (every shard, in both modes) are at most half of
 * what is left -- the budget less the others' reservations and a floor for
 * each sharing dataset -- reserves them and keeps them open until close:
 * io_uring may register them, so they can never be taken back. Half, so
 * that whichever opens first (a Dataset for its schema, then a Loader's
 * own) leaves the next at least as much room as it took: not always enough
 * to keep its own (with one of the same size kept, only a third of the
 * budget is), but enough to share without closing any. The others share what
 * the reservations leave, equally, at least BUDGET_FLOOR each: a dataset
 * that joins or leaves reshares it, and those whose share shrank close idle
 * entries down to it at once (entries being read stay: only pinned ones
 * exceed a share, as before). So the process holds at most the budget, but
 * for the floors and the entries being read.
 *
 * Lock order: budget_lock, then a dataset's f->lock; nothing takes
 * budget_lock under an f->lock.
 *
 * A forked child starts a budget of its own (budget_fork_child): the
 * datasets it inherited are its parent's, whose locks a parent thread may
 * have held at the fork (a child's open that reshared took them and hung,
 * 16 in 1,500 forks), and whose descriptors and cache pins it shares with
 * the parent (a trim there would drop the parent's flock pins). */
#define BUDGET_FLOOR 16u

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned budget_generation; /* one more in each forked child */
static dataset_files *budget_sharing; /* the datasets without keep, linked */
static uint64_t budget_sharing_n;
static uint64_t budget_reserved; /* entries the keep datasets reserved */
/* fd_cap_default() when the last dataset joined; written under budget_lock,
 * read without it for a message */
static _Atomic uint64_t budget_total;

static void budget_fork_child(void)
{
    pthread_mutex_init(&budget_lock, NULL); /* a parent thread may have held it */
    budget_sharing = NULL;
    budget_sharing_n = budget_reserved = 0;
    budget_generation++;
}

static void budget_install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, budget_fork_child);
}

/* Under budget_lock: every sharing dataset's cap is its share now; those
 * other than `except` (joining: it has nothing open) close idle entries
 * past it. */
static void budget_share_locked(const dataset_files *except)
{
    uint64_t total = atomic_load_explicit(&budget_total, memory_order_relaxed);
    uint64_t left = total > budget_reserved ? total - budget_reserved : 0;
    uint64_t share = budget_sharing_n ? left / budget_sharing_n : left;
    if (share < BUDGET_FLOOR)
        share = BUDGET_FLOOR;
    for (dataset_files *d = budget_sharing; d; d = d->budget_next) {
        pthread_mutex_lock(&d->lock);
        atomic_store_explicit(&d->cap, share, memory_order_relaxed);
        if (d != except)
            while (d->open > share && close_lru_locked(d))
                ;
        pthread_mutex_unlock(&d->lock);
    }
}

/* f (its count and whether it is at a URL known) reserves its entries and
 * keeps them, or shares. */
static void budget_join(dataset_files *f)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, budget_install_fork_handler);
    pthread_mutex_lock(&budget_lock);
    f->budget_generation = budget_generation;
    uint64_t total = fd_cap_default();
    atomic_store_explicit(&budget_total, total, memory_order_relaxed);
    uint64_t committed = budget_reserved + budget_sharing_n * BUDGET_FLOOR;
    /* A dataset at a URL keeps its cache's files open only while pinned, so
     * that the cache can evict what it is not reading: it always shares. */
    f->keep = !f->ds->remote && committed <= total && f->count <= (total - committed) / 2;
    if (f->keep) {
        budget_reserved += f->count;
        atomic_store_explicit(&f->cap, f->count, memory_order_relaxed);
    } else {
        f->budget_next = budget_sharing;
        if (budget_sharing)
            budget_sharing->budget_prev = f;
        budget_sharing = f;
        budget_sharing_n++;
    }
    f->budgeted = 1;
    budget_share_locked(f);
    pthread_mutex_unlock(&budget_lock);
}

static void budget_leave(dataset_files *f)
{
    if (!f->budgeted)
        return;
    pthread_mutex_lock(&budget_lock);
    if (f->budget_generation != budget_generation) {
        /* opened by the parent of this forked child: not in this budget */
        f->budgeted = 0;
        pthread_mutex_unlock(&budget_lock);
        return;
    }
    if (f->keep) {
        assert(budget_reserved >= f->count);
        budget_reserved -= f->count;
    } else {
        if (f->budget_prev)
            f->budget_prev->budget_next = f->budget_next;
        else
            budget_sharing = f->budget_next;
        if (f->budget_next)
            f->budget_next->budget_prev = f->budget_prev;
        budget_sharing_n--;
    }
    f->budgeted = 0;
    budget_share_locked(f); /* the others' shares grow: nothing to close */
    pthread_mutex_unlock(&budget_lock);
}

int dataset_files_init(sf_dataset *ds)
{
    dataset_files *f = calloc(1, sizeof *f);
    if (!f)
        return sf_fail(-ENOMEM, "out of memory");
    ds->files = f;
    f->ds = ds;
    f->dirfd = -1;
    f->lru_head = f->lru_tail = NO_ENTRY;
    pthread_mutex_init(&f->lock, NULL);
    f->count = ds->manifest.shard_count * 2;
    f->fds = malloc((f->count ? f->count : 1) * sizeof *f->fds);
    f->ids = calloc(ds->manifest.shard_count ? ds->manifest.shard_count : 1, sizeof *f->ids);
    if (!f->fds || !f->ids)
        return sf_fail(-ENOMEM, "out of memory for the descriptors of %llu shards",
                       (unsigned long long)ds->manifest.shard_count);
    for (uint64_t e = 0; e < f->count; e++) {
        atomic_init(&f->fds[e].fd, -1);
        f->fds[e].pins = 0;
        f->fds[e].prev = f->fds[e].next = NO_ENTRY;
        f->fds[e].cache_pinned = f->fds[e].held = 0;
    }
    budget_join(f); /* f->keep and f->cap */
    if (ds->remote) {
        /* Files of the cache: pinned only while used (budget_join shares). */
        assert(!f->keep);
        f->map_follows_pin = calloc(ds->manifest.shard_count ? ds->manifest.shard_count : 1, 1);
        f->kept_pin = calloc(ds->manifest.shard_count ? ds->manifest.shard_count : 1, 1);
        return f->map_follows_pin && f->kept_pin ? 0 : sf_fail(-ENOMEM, "out of memory");
    }
    f->dirfd = open(ds->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->dirfd < 0)
        return sf_fail(-errno, "%s: %s", ds->dir, strerror(errno));
    return 0;
}

void dataset_files_leave_budget(sf_dataset *ds)
{
    if (ds->files)
        budget_leave(ds->files);
}

void dataset_files_free(sf_dataset *ds)
{
    dataset_files *f = ds->files;
    if (!f)
        return;
    budget_leave(f); /* first (if sf_dataset_close did not): a resharing dataset takes f->lock */
    for (uint64_t e = 0; f->fds && e < f->count; e++) {
        if (f->kept_pin && e % 2 == 0 && f->kept_pin[e / 2])
            f->fds[e].pins--; /* map_publish's */
        if (f->fds[e].held)
            f->fds[e].pins--; /* its hold */
        assert(f->fds[e].pins == 0 && "a shard descriptor is still in use at close");
        int fd = atomic_load(&f->fds[e].fd);
        if (fd >= 0)
            close(fd);
    }
    if (f->dirfd >= 0)
        close(f->dirfd);
    pthread_mutex_destroy(&f->lock);
    free(f->map_follows_pin);
    free(f->kept_pin);
    free(f->ids);
    free(f->fds);
    free(f);
    ds->files = NULL;
}

uint64_t dataset_fd_cap(const sf_dataset *ds)
{
    return atomic_load_explicit(&ds->files->cap, memory_order_relaxed);
}

/* Under f->lock: closed entry e of a dataset at a URL gets `fd`, pinned in
 * the cache (room made for it first: make_room_locked). */
static void remote_entry_set_locked(dataset_files *f, uint64_t e, int fd)
{
    assert(atomic_load_explicit(&f->fds[e].fd, memory_order_relaxed) < 0);
    atomic_store_explicit(&f->fds[e].fd, fd, memory_order_release);
    f->fds[e].cache_pinned = 1;
    f->open++;
}

/* Reads len bytes at off (both multiples of SAME_BLOCK for O_DIRECT) into
 * buf: the bytes read, or -1. */
#define SAME_BLOCK 4096u
static ssize_t read_some(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/* Whether the file open on fd (of st's size, buffered or O_DIRECT) is the
 * one shard's metadata was loaded from: its size, header and footer bytes
 * as they were. 1, 0, or -1 with errno. Reads through an aligned buffer, as
 * O_DIRECT needs: the first block, and the two around the footer. Before
 * the metadata is loaded (the open that loads it) there is nothing to
 * compare: 1. */
static int same_shard_file(const sf_dataset *ds, uint64_t shard, int fd, const struct stat *st)
{
    const sf_shard_meta *m = &ds->shards[shard].meta;
    if (!m->index)
        return 1;
    if ((uint64_t)st->st_size != m->file_size)
        return 0;
    assert(m->file_size >= SF_SHARD_HEADER_SIZE + SF_SHARD_FOOTER_SIZE && "checked at load");
    uint8_t want_h[SF_SHARD_HEADER_SIZE], want_f[SF_SHARD_FOOTER_SIZE];
    sf_shard_header h = m->header;
    sf_shard_footer ft = m->footer;
    sf_shard_header_encode(want_h, &h);
    sf_shard_footer_encode(want_f, &ft);
    uint8_t *buf;
    if ((errno = posix_memalign((void **)&buf, SAME_BLOCK, 2 * SAME_BLOCK)) != 0)
        return -1;
    uint64_t foot = m->file_size - SF_SHARD_FOOTER_SIZE, at = foot / SAME_BLOCK * SAME_BLOCK;
    int same = -1;
    ssize_t got = read_some(fd, buf, SAME_BLOCK, 0);
    if (got >= 0 && (got < (ssize_t)sizeof want_h || memcmp(buf, want_h, sizeof want_h)))
        same = 0;
    else if (got >= 0 && (got = read_some(fd, buf, 2 * SAME_BLOCK, at)) >= 0)
        same = (uint64_t)got >= foot - at + sizeof want_f &&
               !memcmp(buf + (foot - at), want_f, sizeof want_f);
    int e = errno;
    free(buf);
    errno = e;
    return same;
}

/* Under f->lock: opens entry e (shard, direct). */
static int open_entry_locked(sf_dataset *ds, uint64_t shard, int direct, int *out)
{
    dataset_files *f = ds->files;
    if (!f->keep)
        make_room_locked(f);
    const char *name = ds->shards[shard].name;
    int fd;
    if (ds->remote) {
        /* The cache checked the file's type and size (a copy damaged
         * since its download is removed: -ENOENT, downloaded in the next
         * round); its records are checked as they are read. Out of
         * descriptors (the cache's downloads and connections use them too),
         * idle shards give theirs back, as below. */
        int rc;
        while (((rc = dataset_remote_fd(&fd, ds, shard, direct)) == -EMFILE || rc == -ENFILE) &&
               close_lru_locked(f))
            ;
        if (rc)
            return rc;
        remote_entry_set_locked(f, entry_of(shard, direct), fd);
        *out = fd;
        return 0;
    }
    /* Out of descriptors (the process's other files count too): give back
     * idle shards' until it opens or none is left. */
    while ((fd = openat(f->dirfd, name, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0))) < 0 &&
           (errno == EMFILE || errno == ENFILE) && close_lru_locked(f))
        ;
    if (fd < 0) {
        int e = errno;
        if (direct && e == EINVAL)
            return sf_fail(SF_E_UNSUPPORTED,
                           "direct: %s/%s: the file system does not support O_DIRECT (tmpfs?); use "
                           "direct=off",
                           ds->dir, name);
        if (e == ENOENT) /* the manifest lists it: a dataset with a file gone (verify's "missing") */
            return sf_fail(SF_E_CORRUPT, "%s/%s: shard file is missing (the manifest lists it)", ds->dir,
                           name);
        char why[200] = "";
        if (e == EMFILE || e == ENFILE)
            snprintf(why, sizeof why,
                     "; %llu of the dataset's shards were open, all being read (its share of the "
                     "process's open datasets' %llu, half of RLIMIT_NOFILE, is %llu)",
                     (unsigned long long)f->open,
                     (unsigned long long)atomic_load_explicit(&budget_total, memory_order_relaxed),
                     (unsigned long long)atomic_load_explicit(&f->cap, memory_order_relaxed));
        return sf_fail(-e, "%s/%s: %s%s%s", ds->dir, name, strerror(e), why, sf_errno_hint(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sf_fail(-e, "%s/%s: %s", ds->dir, name, strerror(e));
    }
    shard_identity *id = &f->ids[shard];
    if (!id->known) {
        id->dev = (uint64_t)st.st_dev;
        id->ino = (uint64_t)st.st_ino;
        id->known = 1;
    } else {
        int same = id->dev == (uint64_t)st.st_dev && id->ino == (uint64_t)st.st_ino
                       ? same_shard_file(ds, shard, fd, &st)
                       : 0;
        if (same < 0) {
            int e = errno;
            close(fd);
            return sf_fail(-e, "%s/%s: reading its header and footer again: %s", ds->dir, name,
                           strerror(e));
        }
        if (!same) {
            close(fd);
            return sf_fail(SF_E_CORRUPT,
                           "%s/%s was replaced by another file since the dataset was opened (its "
                           "index no longer describes it): open the dataset again",
                           ds->dir, name);
        }
    }
    atomic_store_explicit(&f->fds[entry_of(shard, direct)].fd, fd, memory_order_release);
    f->open++;
    *out = fd;
    return 0;
}

/* A dataset at a URL pins and unpins its entries per read: taking f->lock
 * for each was most of an epoch's time when two I/O threads read one shard
 * (0.32 s against pread's 0.12 s from a local folder, 60,000 small records).
 * An entry another thread holds (pins > 0: open, pinned in the cache, off
 * the LRU list, its fd fixed) takes one more pin, and gives back one that
 * is not the last, without the lock; pins never reach or leave 0 that way,
 * so under f->lock "pins == 0" cannot change. 1 when it did. */
static int pin_again(shard_fd *x, int *fd)
{
    uint32_t p = atomic_load_explicit(&x->pins, memory_order_relaxed);
    while (p > 0)
        if (atomic_compare_exchange_weak_explicit(&x->pins, &p, p + 1, memory_order_acquire,
                                                  memory_order_relaxed)) {
            *fd = atomic_load_explicit(&x->fd, memory_order_relaxed);
            assert(*fd >= 0 && "a pinned entry is open");
            return 1;
        }
    return 0;
}

static int unpin_not_last(shard_fd *x)
{
    uint32_t p = atomic_load_explicit(&x->pins, memory_order_relaxed);
    while (p > 1)
        if (atomic_compare_exchange_weak_explicit(&x->pins, &p, p - 1, memory_order_release,
                                                  memory_order_relaxed))
            return 1;
    return 0;
}

/* dataset_fd_acquire of a dataset at a URL: the shard's file in the cache.
 * A download takes long and may wait for room, which other threads make by
 * releasing their pins under f->lock: it runs outside the lock and hands
 * over its pinned descriptor (a shard this process just downloaded may be
 * only its .part, whose publish may yet fail and remove it: opened by name
 * again, it would be gone). The open under the lock never downloads
 * (-ENOENT: evicted again meanwhile, another round). */
static int remote_fd_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct, int nowait)
{
    dataset_files *f = ds->files;
    uint64_t e = entry_of(shard, direct);
    shard_fd *x = &f->fds[e];
    dataset_remote_reading(ds, shard);
    if (pin_again(x, out))
        return 0;
    int rc = 0;
    /* Round 0 takes the shard from the cache if it is there (open or opened
     * by name, no download); the next rounds fetch it first. Only a download
     * makes the idle shards give up their pins: that closes them (and unmaps
     * them), which a shard read from the cache does not need. */
    for (int round = 0; round < 8; round++) {
        int got = -1; /* pinned, fetched first when missing */
        if (round > 0) {
            dataset_files_unpin_idle(ds); /* the download may need them evicted */
            if ((rc = dataset_remote_acquire(&got, ds, shard, direct, nowait))) {
                /* The download's own error (an object gone at the store is
                 * -ENOENT too, which below means "evicted again": not a
                 * reason to retry), or -EAGAIN (nowait). */
                *out = -1;
                return rc;
            }
        }
        pthread_mutex_lock(&f->lock);
        int fd = atomic_load_explicit(&x->fd, memory_order_relaxed);
        /* Open, it has a pin (a reader's, or its hold) since pin_again
         * failed: one more. */
        assert(fd < 0 || (x->pins > 0 && x->cache_pinned));
        if (fd < 0 && got >= 0) {
            make_room_locked(f);
            remote_entry_set_locked(f, e, fd = got);
            got = -1;
        } else if (fd < 0) {
            rc = open_entry_locked(ds, shard, direct, &fd);
        }
        if (!rc)
            x->pins++;
        pthread_mutex_unlock(&f->lock);
        if (got >= 0)
            close(got); /* another thread's descriptor came first */
        if (rc != -ENOENT) {
            *out = rc ? -1 : fd;
            return rc;
        }
    }
    *out = -1;
    return rc != -ENOENT ? rc
                         : sf_fail(-ENOSPC, "%s/%s: evicted from the cache as soon as it "
                                               "arrived, 8 times: raise the cache limit",
                                   ds->dir, ds->shards[shard].name);
}

static int fd_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct, int nowait)
{
    dataset_files *f = ds->files;
    assert(shard < ds->manifest.shard_count);
    uint64_t e = entry_of(shard, direct);
    shard_fd *x = &f->fds[e];
    if (f->keep) {
        /* Opened once, closed only with the dataset. */
        int fd = atomic_load_explicit(&x->fd, memory_order_acquire);
        if (fd >= 0) {
            *out = fd;
            return 0;
        }
    }
    if (ds->remote)
        return remote_fd_acquire(out, ds, shard, direct, nowait);
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    int fd = atomic_load_explicit(&x->fd, memory_order_relaxed);
    if (fd < 0)
        rc = open_entry_locked(ds, shard, direct, &fd);
    else if (!f->keep && x->pins == 0)
        lru_unlink(f, e); /* open and idle: in use again */
    if (!rc && !f->keep)
        x->pins++;
    pthread_mutex_unlock(&f->lock);
    *out = rc ? -1 : fd;
    return rc;
}

int dataset_fd_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct)
{
    return fd_acquire(out, ds, shard, direct, 0);
}

int dataset_fd_try_acquire(int *out, sf_dataset *ds, uint64_t shard, int direct)
{
    return fd_acquire(out, ds, shard, direct, 1);
}

void dataset_fd_release(sf_dataset *ds, uint64_t shard, int direct)
{
    dataset_files *f = ds->files;
    if (f->keep)
        return;
    uint64_t e = entry_of(shard, direct);
    shard_fd *x = &f->fds[e];
    if (ds->remote && unpin_not_last(x))
        return;
    pthread_mutex_lock(&f->lock);
    assert(x->pins > 0 && "released a shard descriptor that was not acquired");
    if (ds->remote && !x->held) {
        /* The last user (or one of the last: a reader may pin it again
         * meanwhile): its pin becomes the entry's hold. Held already, pins
         * were at least 2 and unpin_not_last would not have failed. */
        idle_pinned_push_locked(ds, f, e); /* may give the hold up at once */
        make_room_locked(f);
    } else if (--x->pins == 0) {
        assert(!ds->remote);
        lru_push(f, e);
        make_room_locked(f); /* pinned ones may have pushed it over the cap */
    }
    pthread_mutex_unlock(&f->lock);
}

int dataset_fd_all_kept(const sf_dataset *ds)
{
    return ds->files->keep;
}

/* A dataset at a URL, under ds->map_lock with the buffered entry of `shard`
 * pinned: publishes map `made` (NULL: the one there already), following the
 * pin (dataset_map_pinned) or kept until close (dataset_map: sf_dataset_get
 * hands out pointers valid until close). Marked before it is published, so
 * that map_kept never takes a map about to follow a pin for a kept one.
 * 1 when the map is kept from now on: the caller's pin then stays until
 * close (dataset_files_free), so that the cache never evicts the file
 * under it (a map keeps an evicted file's disk space: random access and
 * export over a dataset 4x the cache limit held 4.5x the limit on disk),
 * and the shard counts against the limit while kept. */
static int map_publish(sf_dataset *ds, uint64_t shard, const uint8_t *made, int follow)
{
    dataset_files *f = ds->files;
    pthread_mutex_lock(&f->lock);
    assert(f->fds[entry_of(shard, 0)].pins > 0);
    int keep_pin = 0;
    if (made) {
        f->map_follows_pin[shard] = (uint8_t)follow;
        keep_pin = !follow;
        atomic_store_explicit(&ds->shards[shard].map, made, memory_order_release);
    } else if (!follow && f->map_follows_pin[shard]) {
        f->map_follows_pin[shard] = 0;
        keep_pin = 1;
    }
    assert(!(keep_pin && f->kept_pin[shard]) && "a kept map holds one pin");
    f->kept_pin[shard] |= (uint8_t)keep_pin;
    if (keep_pin)
        f->kept_bytes += ds->shards[shard].meta.file_size;
    pthread_mutex_unlock(&f->lock);
    return keep_pin;
}

/* A dataset at a URL: the map of `shard` when it is kept until close, else
 * NULL (none, or one that follows a pin and may go). */
static const uint8_t *map_kept(sf_dataset *ds, uint64_t shard)
{
    dataset_files *f = ds->files;
    pthread_mutex_lock(&f->lock);
    const uint8_t *map = f->map_follows_pin[shard]
                             ? NULL
                             : atomic_load_explicit(&ds->shards[shard].map, memory_order_relaxed);
    pthread_mutex_unlock(&f->lock);
    return map;
}

/* A dataset at a URL, before dataset_map keeps `shard` pinned until close:
 * SF_E_INVALID at once when the shards kept so would pass the cache limit
 * (the option is too small for them: not SF_E_LIMIT, a data error's code).
 * They never give their room back, so waiting for it (as a download waits
 * for other readers' pins) would only end in the same error 120 s later. */
static int kept_room(sf_dataset *ds, uint64_t shard)
{
    dataset_files *f = ds->files;
    uint64_t limit = dataset_remote_cache_limit(ds), size = ds->shards[shard].meta.file_size;
    pthread_mutex_lock(&f->lock);
    int room = !limit || f->kept_pin[shard] || (f->kept_bytes <= limit && size <= limit - f->kept_bytes);
    uint64_t kept = f->kept_bytes;
    pthread_mutex_unlock(&f->lock);
    if (room)
        return 0;
    return sf_fail(SF_E_INVALID,
                   "%s/%s: sf_dataset_get keeps every shard it points into pinned in the cache until "
                   "close, and this one (%llu bytes) would take them past the cache limit (%llu "
                   "bytes, %llu kept): use sf_dataset_read_value, which copies, or raise cache_limit",
                   ds->dir, ds->shards[shard].name, (unsigned long long)size,
                   (unsigned long long)limit, (unsigned long long)kept);
}

/* dataset_map and dataset_map_pinned past their fast paths. */
static int map_shard(const uint8_t **out, sf_dataset *ds, uint64_t shard, int follow_pin)
{
    sf_open_shard *s = &ds->shards[shard];
    /* Every touch of a map runs under the fault guard. */
    int rc = sf_fault_guard_init();
    if (rc)
        return rc;
    pthread_mutex_lock(&ds->map_lock);
    if (ds->remote && !follow_pin && (rc = kept_room(ds, shard))) {
        pthread_mutex_unlock(&ds->map_lock);
        return rc;
    }
    const uint8_t *map = atomic_load_explicit(&s->map, memory_order_relaxed);
    int fd = -1;
    if ((!map || ds->remote) && !(rc = dataset_fd_acquire(&fd, ds, shard, 0))) {
        /* Read again under the pin: at a URL a map that followed another
         * reader's pin may have gone since (unmap_followed_locked does not
         * take map_lock), and one taken before the pin would be handed out
         * unmapped. Under the pin, the map there stays. */
        map = atomic_load_explicit(&s->map, memory_order_acquire);
        /* The map keeps the file; its descriptor goes back at once. */
        const uint8_t *made = NULL;
        if (!map) {
            void *p = mmap(NULL, s->meta.file_size, PROT_READ, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED)
                rc = sf_fail(-errno, "%s/%s: mmap failed: %s%s", ds->dir, s->name, strerror(errno),
                             errno == ENOMEM ? " (a process may have vm.max_map_count maps; the mmap "
                                               "engine keeps one per shard it read: use pread or uring)"
                                             : "");
            else
                map = made = p;
        }
        int kept = 0;
        if (map && ds->remote)
            kept = map_publish(ds, shard, made, follow_pin);
        else if (made)
            atomic_store_explicit(&s->map, made, memory_order_release);
        if (!kept)
            dataset_fd_release(ds, shard, 0);
    }
    pthread_mutex_unlock(&ds->map_lock);
    *out = map;
    return rc;
}

int dataset_map(const uint8_t **out, sf_dataset *ds, uint64_t shard)
{
    /* At a URL, a map that follows a reader's pin is made kept, under the
     * shard's pin (map_shard). */
    const uint8_t *map = ds->remote ? map_kept(ds, shard)
                                    : atomic_load_explicit(&ds->shards[shard].map, memory_order_acquire);
    if (map) {
        *out = map;
        return 0;
    }
    return map_shard(out, ds, shard, 0);
}

int dataset_maps_follow_pins(const sf_dataset *ds)
{
    return ds->remote != NULL;
}

int dataset_map_pinned(const uint8_t **out, sf_dataset *ds, uint64_t shard)
{
    if (!dataset_maps_follow_pins(ds))
        return dataset_map(out, ds, shard);
    /* The caller's pin keeps a map that exists. */
    assert(atomic_load_explicit(&ds->files->fds[entry_of(shard, 0)].pins, memory_order_relaxed) > 0 &&
           "dataset_map_pinned without the shard's descriptor acquired");
    const uint8_t *map = atomic_load_explicit(&ds->shards[shard].map, memory_order_acquire);
    if (map) {
        *out = map;
        return 0;
    }
    return map_shard(out, ds, shard, 1);
}

int sf_dataset_shard_shrank(const sf_dataset *ds, uint64_t shard, uint64_t *now)
{
    struct stat st;
    if (ds->remote)
        return 0; /* the cache's files are whole and never cut */
    if (fstatat(ds->files->dirfd, ds->shards[shard].name, &st, 0) != 0)
        return 0;
    *now = (uint64_t)st.st_size;
    return *now < ds->shards[shard].meta.file_size;
}
