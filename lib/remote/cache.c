/* The shared cache of remote objects (cache.h: layout and invariants). */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "error_internal.h"
#include "io.h"
#include "nofile.h"
#include "path.h"

#define PART_PREFIX ".part-"
#define FILL_PREFIX ".fill-"
/* In every space this cache made (remote_cache_open): the evictor lists and
 * removes files only in folders that hold it. */
#define SPACE_MARK ".shardfeed-space"
#define PATH_MAX_LEN SF_PATH_CAP

/* At most this many downloads wait for the publisher: each holds two
 * descriptors (its .part and its .fill lock), and downloads that outrun the
 * disk's fsyncs (many small shards over a fast link) would otherwise pile
 * up toward RLIMIT_NOFILE; past it the downloader publishes its own. Also
 * at most a 16th of the soft RLIMIT_NOFILE: a dataset's shards take half of
 * it (shard_files.c), and with 64 descriptors queued here a reader under
 * `ulimit -n 96` ran out opening its 49th shard. Read once, at open (it
 * was read at every download's end). */
#define REMOTE_PUBLISH_QUEUE 32

/* A download of this process: under way (the other threads of the process
 * wait for it here, not on its .fill lock, which the publish keeps), or
 * arrived whole and checked and waiting to be made durable and renamed into
 * its final name by the publisher thread. Meanwhile the process reads the
 * .part: its bytes are the ones checked, and the reader checks every
 * record's checksum again as it reads. Other processes see the object only
 * under its final name, after the fsync (the .fill lock is held until the
 * rename). */
typedef enum { PENDING_DOWNLOADING, PENDING_READY, PENDING_PUBLISHING } pending_state;

typedef struct pending {
    struct pending *next;
    pending_state state;
    int part_fd;  /* READY on: the .part, LOCK_SH (counted, never evicted) */
    int fill_fd;  /* READY on: the .fill lock, held until the rename */
    char name[256];
    char part[PATH_MAX_LEN];
} pending;

struct remote_cache {
    char *root;  /* ROOT */
    char *dir;   /* ROOT/SPACE */
    uint64_t limit;
    unsigned wait_s; /* how long a download waits for room */
    unsigned publish_cap; /* downloads that may wait for the publisher */
    /* this process's downloads and their publishes (pending above) */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pending *pending;  /* newest first */
    /* Objects whose .fill wait ran out (fill_lock), with the progress stamp
     * they had then and when: another thread of this process needing one of
     * them within wait_s of that, the stamp not moved, fails at once, where
     * it waited wait_s again (k threads queued: k x 120 s). A ring of the
     * latest. */
    struct {
        char name[256];
        int64_t stamp;
        uint64_t at_ms;
    } stalled[4];
    unsigned stalled_next;
    pthread_t publisher;
    int publisher_running, stop;
    /* Held with ROOT/.lock (lock_root to unlock_root): this process's
     * threads queue for it here rather than poll the flock against each
     * other. */
    pthread_mutex_t root_mutex;
};

static atomic_uint part_counter;

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX_LEN];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return sf_fail(SF_E_INVALID, "cache folder path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return sf_fail(-errno, "cache folder %s: %s", buf, sf_errno_text(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return sf_fail(-errno, "cache folder %s: %s", buf, sf_errno_text(errno));
    return 0;
}

int remote_cache_open(remote_cache **out, const char *root, uint64_t limit, const char *space)
{
    *out = NULL;
    if (!root || !*root || !space || !*space || strchr(space, '/') || space[0] == '.')
        return sf_fail(SF_E_INVALID, "remote cache: bad folder or space");
    remote_cache *c = calloc(1, sizeof *c);
    size_t n = strlen(root) + strlen(space) + 2;
    if (!c || !(c->root = strdup(root)) || !(c->dir = malloc(n))) {
        if (c)
            free(c->root);
        free(c);
        return sf_fail(-ENOMEM, "out of memory");
    }
    snprintf(c->dir, n, "%s/%s", root, space);
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->root_mutex, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->limit = limit;
    c->wait_s = REMOTE_CACHE_WAIT_S;
    c->publish_cap = (unsigned)sf_nofile_share(16, 0, REMOTE_PUBLISH_QUEUE);
    int rc = make_dirs(c->dir);
    if (!rc) {
        /* relative to the folder: its path may leave no room for the mark's */
        int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd = -1;
        if (dfd >= 0) {
            fd = openat(dfd, SPACE_MARK, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
            int e = errno;
            close(dfd);
            errno = e;
        }
        if (fd < 0)
            rc = sf_fail(-errno, "cache folder %s: %s: %s", c->dir, SPACE_MARK, sf_errno_text(errno));
        else
            close(fd);
    }
    if (rc) {
        remote_cache_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static void publisher_stop(remote_cache *c);

void remote_cache_free(remote_cache *c)
{
    if (!c)
        return;
    publisher_stop(c);
    assert(!c->pending && "a download is under way at close");
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->root_mutex);
    free(c->root);
    free(c->dir);
    free(c);
}

const char *remote_cache_dir(const remote_cache *c)
{
    return c->dir;
}

void remote_cache_set_wait(remote_cache *c, unsigned seconds)
{
    c->wait_s = seconds;
}

void remote_cache_unpin(int fd)
{
    /* Used until now: the evictor's order is the files' times, and a shard
     * pinned for long was last touched when it was opened. */
    futimens(fd, NULL);
    flock(fd, LOCK_UN);
}

int remote_cache_repin(int fd)
{
    struct stat st;
    while (flock(fd, LOCK_SH) != 0 && errno == EINTR)
        ;
    /* Evicted (unlinked) while unpinned: no longer the cache's. */
    return fstat(fd, &st) == 0 && st.st_nlink > 0;
}

/* flock that retries EINTR. */
static int lock_fd(int fd, int op)
{
    int rc;
    while ((rc = flock(fd, op)) != 0 && errno == EINTR)
        ;
    return rc;
}

/* Opens `path` pinned, or -1 with errno (ENOENT: absent). A file unlinked
 * between the open and the lock (evicted, or a publish that failed) counts
 * as absent. */
static int open_pinned_path(const char *path, int oflags)
{
    /* O_NOFOLLOW: the cache makes only files; a link there is not its own.
     * O_NONBLOCK for the open alone: a FIFO under the name blocked it until
     * a writer came (check_cached then refuses anything but a file); it is
     * cleared at once, as io_uring answers -EAGAIN for a nonblocking file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | oflags);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!remote_cache_repin(fd)) {
        close(fd);
        errno = ENOENT;
        return -1;
    }
    /* Recently used: the last the evictor picks. */
    futimens(fd, NULL);
    return fd;
}

/* The longest path the cache makes for object `name` is its download's,
 * ROOT/SPACE/.part-NAME-PID-N; the others (ROOT/SPACE/NAME,
 * ROOT/SPACE/.fill-NAME, and ROOT/.lock, ROOT being shorter than
 * ROOT/SPACE/) are shorter. So once this one fits, as the entry points
 * check (check_name), no path below is cut short, which would name
 * another file (another object, another .fill lock). 0 or -ENAMETOOLONG
 * naming the folder. */
static int check_name(const remote_cache *c, const char *name)
{
    char longest[PATH_MAX_LEN], path[PATH_MAX_LEN];
    int n = snprintf(longest, sizeof longest, PART_PREFIX "%s-%ld-%u", name, (long)getpid(), UINT_MAX);
    if (n < 0 || (size_t)n >= sizeof longest)
        return sf_fail(SF_E_INVALID, "remote cache: bad object name '%.200s'", name);
    return sf_path_join(path, sizeof path, c->dir, longest);
}

/* DIR/NAME, for paths of a name check_name passed: cannot fail (asserted;
 * were it to, path is "", which names no file). */
static void cache_path(char *path, size_t cap, const char *dir, const char *name)
{
    int rc = sf_path_join(path, cap, dir, name);
    assert(rc == 0 && "the name passed check_name");
    (void)rc;
}

/* Opens ROOT/SPACE/NAME pinned (open_pinned_path). */
static int open_pinned(const remote_cache *c, const char *name, int oflags)
{
    char path[PATH_MAX_LEN];
    cache_path(path, sizeof path, c->dir, name);
    return open_pinned_path(path, oflags);
}

/* ---- accounting and eviction (under ROOT/.lock) ---- */

typedef struct entry {
    char path[PATH_MAX_LEN];
    uint64_t size;
    struct timespec mtime;
    int part;
} entry;

typedef struct listing {
    entry *e;
    size_t n, cap;
    uint64_t bytes;
} listing;

static int list_add(listing *l, const char *path, const struct stat *st, int part)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        entry *e = realloc(l->e, cap * sizeof *e);
        if (!e)
            return sf_fail(-ENOMEM, "out of memory");
        l->e = e;
        l->cap = cap;
    }
    entry *x = &l->e[l->n++];
    snprintf(x->path, sizeof x->path, "%s", path);
    x->size = (uint64_t)st->st_size;
    x->mtime = st->st_mtim;
    x->part = part;
    l->bytes += x->size;
    return 0;
}

/* Every object and download of every space under ROOT, with its size. A
 * space is a folder (not a symlink) holding SPACE_MARK; in it, objects are
 * the regular files whose names do not start with '.', and downloads the
 * .part- ones. Nothing else is counted or ever removed: a cache folder
 * named where other files live (cache_dir=/scratch, $HOME/.cache) took
 * every file of every subfolder for its own, dotfiles and symlinked folders
 * included, and evicted them, oldest first. */
static int list_cache(listing *l, const remote_cache *c)
{
    DIR *top = opendir(c->root);
    if (!top)
        return sf_fail(-errno, "cache folder %s: %s", c->root, sf_errno_text(errno));
    struct dirent *d;
    int rc = 0;
    while (!rc && (d = readdir(top))) {
        if (d->d_name[0] == '.')
            continue;
        char sub[PATH_MAX_LEN];
        if (snprintf(sub, sizeof sub, "%s/%s", c->root, d->d_name) >= (int)sizeof sub)
            continue;
        int dfd = open(sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            continue;
        struct stat mark;
        DIR *s = NULL;
        if (fstatat(dfd, SPACE_MARK, &mark, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(mark.st_mode) ||
            !(s = fdopendir(dfd))) {
            close(dfd);
            continue;
        }
        struct dirent *f;
        while (!rc && (f = readdir(s))) {
            int part = !strncmp(f->d_name, PART_PREFIX, strlen(PART_PREFIX));
            if (f->d_name[0] == '.' && !part)
                continue; /* ".", "..", SPACE_MARK, .fill- locks */
            char path[PATH_MAX_LEN];
            struct stat st;
            if (snprintf(path, sizeof path, "%s/%s", sub, f->d_name) >= (int)sizeof path ||
                fstatat(dirfd(s), f->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
                continue;
            rc = list_add(l, path, &st, part);
        }
        closedir(s); /* closes dfd */
    }
    closedir(top);
    return rc;
}

static int older(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

/* Removes the file at e if nobody holds a lock on it (an object nobody reads,
 * a download whose process died): 1 when removed. */
static int remove_if_unlocked(const entry *e)
{
    int fd = open(e->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int removed = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        removed = unlink(e->path) == 0;
        flock(fd, LOCK_UN);
    }
    close(fd);
    return removed;
}

/* Under ROOT/.lock: makes room for `need` more bytes. 1 when it fits, 0 when
 * what is left is pinned (*pinned: those bytes), or a negative code. */
static int make_room(const remote_cache *c, uint64_t need, uint64_t *pinned)
{
    listing l = {0};
    int rc = list_cache(&l, c);
    if (rc) {
        free(l.e);
        return rc;
    }
    /* Dead downloads first, then the least recently used objects. */
    for (size_t i = 0; i < l.n; i++)
        if (l.e[i].part && remove_if_unlocked(&l.e[i]))
            l.bytes -= l.e[i].size, l.e[i].size = 0;
    if (l.n)
        qsort(l.e, l.n, sizeof *l.e, older);
    for (size_t i = 0; i < l.n && l.bytes + need > c->limit; i++)
        if (!l.e[i].part && l.e[i].size && remove_if_unlocked(&l.e[i]))
            l.bytes -= l.e[i].size;
    int fits = l.bytes + need <= c->limit;
    *pinned = l.bytes;
    free(l.e);
    return fits;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Opens ROOT/.lock, the lock under which the cache's files are listed,
 * reserved and renamed: its descriptor, or a negative code. */
static int open_cache_lock(const remote_cache *c)
{
    char lockpath[PATH_MAX_LEN];
    cache_path(lockpath, sizeof lockpath, c->root, ".lock");
    int lk = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lk < 0)
        return sf_fail(-errno, "%s: %s", lockpath, sf_errno_text(errno));
    return lk;
}

/* `clock`'s now plus ms. */
static struct timespec now_plus_ms(clockid_t clock, uint64_t ms)
{
    struct timespec t;
    clock_gettime(clock, &t);
    uint64_t ns = (uint64_t)t.tv_nsec + (ms % 1000) * 1000000ULL;
    t.tv_sec += (time_t)(ms / 1000 + ns / 1000000000ULL);
    t.tv_nsec = (long)(ns % 1000000000ULL);
    return t;
}

static int is_past(const struct timespec *deadline)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec > deadline->tv_sec ||
           (t.tv_sec == deadline->tv_sec && t.tv_nsec >= deadline->tv_nsec);
}

/* LOCK_EX on ROOT/.lock (lk), which any process holds for milliseconds (a
 * listing and eviction, a reservation, a rename): polled, so that a holder
 * stopped (Ctrl-Z, a debugger) or hung fails this after the cache's wait,
 * naming the lock, where a blocking flock waited for ever without a word.
 * This process's threads first queue on root_mutex: polling, they raced
 * each other too, sleeping 1, 2, 4, 8 then 16 ms between tries, and 13
 * downloads starting together (a global shuffle's first batch) reserved
 * their files 8-17 ms apart. One wait covers both, so a call
 * fails within the cache's wait of its start even when it queued behind
 * another thread. 0 (release with unlock_root), or a negative code. */
static int lock_root(remote_cache *c, int lk)
{
    unsigned wait_s = c->wait_s ? c->wait_s : 1;
    /* On CLOCK_MONOTONIC, which a step of the wall clock (NTP, an
     * administrator's date) neither shortens nor stretches. The mutex's
     * wait takes a CLOCK_REALTIME deadline, the same wait from now: not
     * pthread_mutex_clocklock, which ThreadSanitizer (GCC 12) does not
     * intercept, so that it saw the unlock of a mutex never locked. */
    struct timespec deadline = now_plus_ms(CLOCK_MONOTONIC, (uint64_t)wait_s * 1000);
    struct timespec wall = now_plus_ms(CLOCK_REALTIME, (uint64_t)wait_s * 1000);
    int e = pthread_mutex_timedlock(&c->root_mutex, &wall);
    if (e && e != ETIMEDOUT)
        return sf_fail(-e, "remote cache %s: %s", c->root, sf_errno_text(e));
    unsigned step_ms = 1;
    while (!e) {
        if (flock(lk, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            int rc = sf_fail(-errno, "remote cache %s/.lock: %s", c->root, sf_errno_text(errno));
            pthread_mutex_unlock(&c->root_mutex);
            return rc;
        }
        if (is_past(&deadline))
            break;
        sleep_ms(step_ms);
        if (step_ms < 16)
            step_ms *= 2;
    }
    if (!e)
        pthread_mutex_unlock(&c->root_mutex);
    /* Timed out polling the flock, or queued behind a thread of this process
     * that was polling it: either way some process holds it. */
    return sf_fail(-ETIMEDOUT,
                   "remote cache %s: %s/.lock was held for the cache's wait of %u s (the cache "
                   "takes it for milliseconds: its holder is stopped or hung; lslocks names it)",
                   c->root, c->root, wait_s);
}

static void unlock_root(remote_cache *c, int lk)
{
    lock_fd(lk, LOCK_UN);
    pthread_mutex_unlock(&c->root_mutex);
}

/* Creates the .part file for `name` with its whole size reserved, holding
 * LOCK_EX: its descriptor, or a negative code. */
static int reserve_part(remote_cache *c, const char *name, uint64_t size, unsigned wait_s,
                        char *part, size_t part_cap)
{
    /* Not SF_E_LIMIT, a format's limit (sf_is_data_error): verify called
     * the dataset corrupt (exit 2) for a cache limit below one shard. The
     * option is too small (SF_E_INVALID); no room now is -ENOSPC. */
    if (size > c->limit)
        return sf_fail(SF_E_INVALID,
                       "remote cache %s: %s is %llu bytes, more than the cache limit of %llu "
                       "bytes: raise cache_limit",
                       c->root, name, (unsigned long long)size, (unsigned long long)c->limit);
    int lk = open_cache_lock(c);
    if (lk < 0)
        return lk;
    time_t deadline = time(NULL) + (time_t)wait_s;
    int rc;
    uint64_t pinned = 0;
    for (;;) {
        if ((rc = lock_root(c, lk)) != 0) {
            close(lk);
            return rc;
        }
        rc = make_room(c, size, &pinned);
        if (rc != 0)
            break; /* fits (1, lock held) or failed */
        unlock_root(c, lk);
        if (!wait_s) {
            /* The prefetcher, or a reader holding pins that the wait may
             * need (remote_cache_try_acquire): no room now. */
            close(lk);
            return -EAGAIN;
        }
        if (time(NULL) >= deadline) {
            close(lk);
            return sf_fail(-ENOSPC,
                           "remote cache %s: no room for %s (%llu bytes) in %u s: %llu of the "
                           "limit's %llu bytes are shards being read; raise cache_limit",
                           c->root, name, (unsigned long long)size, wait_s,
                           (unsigned long long)pinned, (unsigned long long)c->limit);
        }
        sleep_ms(50);
    }
    int fd = -1;
    if (rc == 1) {
        char part_name[PATH_MAX_LEN];
        snprintf(part_name, sizeof part_name, PART_PREFIX "%s-%ld-%u", name, (long)getpid(),
                 atomic_fetch_add(&part_counter, 1));
        cache_path(part, part_cap, c->dir, part_name);
        fd = open(part, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            rc = sf_fail(-errno, "%s: %s", part, sf_errno_text(errno));
        } else if (lock_fd(fd, LOCK_EX) != 0 || ftruncate(fd, (off_t)size) != 0) {
            rc = sf_fail(-errno, "%s: %s", part, sf_errno_text(errno));
            unlink(part);
            close(fd);
            fd = -1;
        }
    }
    unlock_root(c, lk);
    close(lk);
    return fd >= 0 ? fd : rc;
}

/* ---- test hooks ---- */

#ifdef SHARDFEED_TEST_HOOKS
/* SHARDFEED_TEST_PUBLISH_HOLD=PATH: a publish waits until PATH exists (the
 * tests read a shard whose publish has not finished, or kill the process
 * then). SHARDFEED_TEST_PUBLISH_FAIL=1: every publish fails as if its fsync
 * had. Compiled only into builds with the tests. */
static int test_publish_hook(void)
{
    const char *hold = getenv("SHARDFEED_TEST_PUBLISH_HOLD");
    while (hold && *hold && access(hold, F_OK) != 0)
        sleep_ms(10);
    const char *fail = getenv("SHARDFEED_TEST_PUBLISH_FAIL");
    return fail && *fail == '1' ? -EIO : 0;
}
#else
static int test_publish_hook(void)
{
    return 0;
}
#endif

/* ---- this process's downloads and their publishes ---- */

/* Under c->lock: this process's download of `name`, or NULL. */
static pending *pending_find_locked(remote_cache *c, const char *name)
{
    for (pending *p = c->pending; p; p = p->next)
        if (!strcmp(p->name, name))
            return p;
    return NULL;
}

/* Under c->lock: takes p off the list (it is the caller's to free). */
static void pending_remove_locked(remote_cache *c, pending *p)
{
    for (pending **q = &c->pending; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    pthread_cond_broadcast(&c->cv);
}

/* The .part of this process's download of `name` when it arrived whole and
 * checked (copied into part): 1, else 0. With `wait`, a download of it
 * under way here is waited for first. */
static int pending_ready_part(remote_cache *c, const char *name, int wait, char *part,
                              size_t part_cap)
{
    pthread_mutex_lock(&c->lock);
    pending *p;
    while (wait && (p = pending_find_locked(c, name)) && p->state == PENDING_DOWNLOADING)
        pthread_cond_wait(&c->cv, &c->lock);
    p = pending_find_locked(c, name);
    int ready = p && p->state != PENDING_DOWNLOADING;
    if (ready)
        snprintf(part, part_cap, "%s", p->part);
    pthread_mutex_unlock(&c->lock);
    return ready;
}

/* Opens object `name` pinned: this process's .part of it when its publish
 * has not finished, else its final file; -1 with errno (ENOENT: absent). A
 * .part renamed meanwhile is found under the final name; one whose publish
 * failed (removed) under neither. */
static int open_object(remote_cache *c, const char *name, int oflags, int wait)
{
    char part[PATH_MAX_LEN];
    if (pending_ready_part(c, name, wait, part, sizeof part)) {
        int fd = open_pinned_path(part, oflags);
        if (fd >= 0 || errno != ENOENT)
            return fd;
    }
    return open_pinned(c, name, oflags);
}

/* Makes p's .part durable and gives it its final name: fsync, rename under
 * ROOT/.lock (cache.h: a listing must never miss a file being renamed),
 * fsync of the folder. On failure the .part is removed, never renamed: no
 * final name but for durable bytes. Readers holding it keep reading it (its
 * bytes were checked); their next repin finds it gone and fetches again. */
static int publish(remote_cache *c, pending *p)
{
    char final[PATH_MAX_LEN];
    cache_path(final, sizeof final, c->dir, p->name);
    int rc = test_publish_hook();
    if (rc)
        rc = sf_fail(rc, "%s: fsync: %s (test hook)", p->part, sf_errno_text(-rc));
    else if (fsync(p->part_fd) != 0)
        rc = sf_fail(-errno, "%s: fsync: %s", p->part, sf_errno_text(errno));
    int lk = rc ? -1 : open_cache_lock(c);
    if (!rc && lk < 0)
        rc = lk;
    if (!rc && (rc = lock_root(c, lk)) == 0) {
        if (rename(p->part, final) != 0)
            rc = sf_fail(-errno, "%s: rename: %s", final, sf_errno_text(errno));
        unlock_root(c, lk);
    }
    if (lk >= 0)
        close(lk);
    if (rc)
        unlink(p->part);
    else
        rc = sf_fsync_dir(c->dir);
    return rc;
}

/* Publishes p and lets go of it: its .fill lock goes only now, so another
 * process waiting for the object finds it under its final name, durable. */
static void publish_and_free(remote_cache *c, pending *p)
{
    int rc = publish(c, p);
    if (rc)
        fprintf(stderr, "shardfeed: remote cache: %s (the shard is fetched again when next "
                        "needed)\n", sf_last_error());
    close(p->part_fd);
    close(p->fill_fd);
    pthread_mutex_lock(&c->lock);
    pending_remove_locked(c, p);
    pthread_mutex_unlock(&c->lock);
    free(p);
}

/* The publisher thread: publishes READY downloads, oldest first, until
 * stopped with none left (close finishes every publish). */
static void *publisher_main(void *arg)
{
    remote_cache *c = arg;
    pthread_setname_np(pthread_self(), "sf-publish");
    pthread_mutex_lock(&c->lock);
    for (;;) {
        pending *oldest = NULL;
        for (pending *p = c->pending; p; p = p->next)
            if (p->state == PENDING_READY)
                oldest = p;
        if (!oldest && c->stop)
            break;
        if (!oldest) {
            pthread_cond_wait(&c->cv, &c->lock);
            continue;
        }
        oldest->state = PENDING_PUBLISHING;
        pthread_mutex_unlock(&c->lock);
        publish_and_free(c, oldest);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Finishes every publish and stops the publisher (remote_cache_free). */
static void publisher_stop(remote_cache *c)
{
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    int running = c->publisher_running;
    pthread_mutex_unlock(&c->lock);
    if (running)
        pthread_join(c->publisher, NULL);
    c->publisher_running = 0;
}

/* p arrived whole and checked: readable here from now on, published in the
 * background (at once, here, when no thread can be started or the queue is
 * full). */
static void pending_ready(remote_cache *c, pending *p)
{
    pthread_mutex_lock(&c->lock);
    p->state = PENDING_READY;
    if (!c->publisher_running && !c->stop &&
        pthread_create(&c->publisher, NULL, publisher_main, c) == 0)
        c->publisher_running = 1;
    unsigned queued = 0;
    for (pending *q = c->pending; q; q = q->next)
        queued += q->state == PENDING_READY;
    int inline_publish = !c->publisher_running || queued > c->publish_cap;
    if (inline_publish)
        p->state = PENDING_PUBLISHING;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    if (inline_publish)
        publish_and_free(c, p);
}

/* Downloads `name` into p's .part (the caller holds its .fill lock, p's
 * fill_fd, and saw it absent) and checks it. On success p is READY: its
 * .part is pinned (LOCK_SH, as a reader pins an object), readable by this
 * process, and published in the background; with `pinned`, *pinned is a
 * descriptor of it (O_RDONLY | oflags) pinned before the publish can
 * remove it (a publish that fails). */
static int download(remote_cache *c, pending *p, uint64_t size, unsigned wait_s,
                    remote_fill_fn fill, void *ctx, int oflags, int *pinned)
{
    int fd = reserve_part(c, p->name, size, wait_s, p->part, sizeof p->part);
    if (fd < 0)
        return fd;
    int rc = fill(ctx, fd, size);
    /* From the writer's LOCK_EX to a reader's LOCK_SH, so that this
     * process's readers can pin the .part too. flock converts by unlocking
     * first: under ROOT/.lock, the only lock under which the evictor removes
     * an unlocked .part (a dead download), nobody sees it unlocked. */
    int lk = rc ? -1 : open_cache_lock(c);
    if (!rc && lk < 0)
        rc = lk;
    if (!rc && (rc = lock_root(c, lk)) == 0) {
        if (lock_fd(fd, LOCK_SH) != 0)
            rc = sf_fail(-errno, "%s: %s", p->part, sf_errno_text(errno));
        unlock_root(c, lk);
    }
    if (lk >= 0)
        close(lk);
    if (!rc && pinned && (*pinned = open_pinned_path(p->part, oflags)) < 0)
        rc = sf_fail(-errno, "%s: %s", p->part, sf_errno_text(errno));
    if (rc) {
        unlink(p->part);
        close(fd);
        return rc;
    }
    p->part_fd = fd;
    pending_ready(c, p);
    return 0;
}

/* The progress of another process's download of `name`: the newest
 * modification time (ns) of its .part (found once by listing the folder,
 * then stat'ed alone) or of the final file, 0 when there is neither yet. */
typedef struct progress {
    char part[PATH_MAX_LEN]; /* the .part found, or "" */
} progress;

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int64_t download_stamp(const remote_cache *c, const char *name, progress *pr)
{
    struct stat st;
    char path[PATH_MAX_LEN];
    cache_path(path, sizeof path, c->dir, name);
    int64_t newest = stat(path, &st) == 0 ? mtime_ns(&st) : 0;
    if (pr->part[0] && stat(pr->part, &st) == 0) {
        int64_t t = mtime_ns(&st);
        return t > newest ? t : newest;
    }
    pr->part[0] = '\0'; /* none yet, or gone: look for it */
    DIR *d = opendir(c->dir);
    if (!d)
        return newest;
    char prefix[PATH_MAX_LEN];
    int n = snprintf(prefix, sizeof prefix, PART_PREFIX "%s-", name);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, (size_t)n) && fstatat(dirfd(d), e->d_name, &st, 0) == 0) {
            int64_t t = mtime_ns(&st);
            newest = t > newest ? t : newest;
            cache_path(pr->part, sizeof pr->part, c->dir, e->d_name);
        }
    closedir(d);
    return newest;
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Under c->lock: whether a wait for `name` ran out at progress `stamp`
 * less than wait_s ago. */
static int stalled_at_locked(const remote_cache *c, const char *name, int64_t stamp,
                             uint64_t now, unsigned wait_s)
{
    for (unsigned i = 0; i < sizeof c->stalled / sizeof c->stalled[0]; i++)
        if (!strcmp(c->stalled[i].name, name) && c->stalled[i].stamp == stamp &&
            now - c->stalled[i].at_ms < (uint64_t)wait_s * 1000)
            return 1;
    return 0;
}

/* Opens and locks ROOT/SPACE/.fill-NAME (one process fills NAME at a time),
 * the right to download it: its descriptor, or
 * a negative code. Another process holding it is downloading the object:
 * waited for while that download writes (a .part of it whose time moves),
 * and for at most wait_s seconds in which it writes nothing (a process
 * stopped or hung: a plain blocking lock hung every reader of the object
 * with it); polled every 20 ms at most. With wait_s 0 (the prefetcher,
 * which has other work): -EAGAIN at once, without detail. */
static int fill_lock(remote_cache *c, const char *name, unsigned wait_s)
{
    char path[PATH_MAX_LEN], fill_name[PATH_MAX_LEN];
    snprintf(fill_name, sizeof fill_name, FILL_PREFIX "%s", name);
    cache_path(path, sizeof path, c->dir, fill_name);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return sf_fail(-errno, "%s: %s", path, sf_errno_text(errno));
    progress pr = {""};
    int64_t seen = -1;
    uint64_t since = monotonic_ms();
    unsigned nap = 1;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        int e = errno;
        if (e == EINTR)
            continue;
        if (e != EWOULDBLOCK || !wait_s) {
            close(fd);
            return e == EWOULDBLOCK ? -EAGAIN : sf_fail(-e, "%s: %s", path, sf_errno_text(e));
        }
        int64_t stamp = download_stamp(c, name, &pr);
        uint64_t now = monotonic_ms();
        pthread_mutex_lock(&c->lock);
        int stalled = stalled_at_locked(c, name, stamp, now, wait_s);
        int out = stalled || (stamp == seen && now - since >= (uint64_t)wait_s * 1000);
        if (out && !stalled) {
            unsigned i = c->stalled_next++ % (sizeof c->stalled / sizeof c->stalled[0]);
            snprintf(c->stalled[i].name, sizeof c->stalled[i].name, "%s", name);
            c->stalled[i].stamp = stamp;
            c->stalled[i].at_ms = now;
        }
        pthread_mutex_unlock(&c->lock);
        if (out) {
            close(fd);
            return sf_fail(-ETIMEDOUT,
                           "remote cache %s: another process is downloading %s and has written "
                           "nothing of it for %u s (stopped, hung, or waiting for room in the "
                           "cache? it holds %s)",
                           c->dir, name, wait_s, path);
        }
        if (stamp != seen) {
            seen = stamp;
            since = now;
        }
        sleep_ms(nap);
        nap = nap * 2 > 20 ? 20 : nap * 2;
    }
}

/* Fetches `name` unless another process did meanwhile (it held the .fill
 * lock) or another thread of this one is at it (the caller looks again):
 * 1 when it downloaded, 0 when not, or a negative code. With `pinned`:
 * *pinned is the download pinned (download), else -1. */
static int fetch_object(remote_cache *c, const char *name, uint64_t size, unsigned wait_s,
                        remote_fill_fn fill, void *ctx, int oflags, int *pinned)
{
    if (pinned)
        *pinned = -1;
    pending *p = calloc(1, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    p->state = PENDING_DOWNLOADING;
    pthread_mutex_lock(&c->lock);
    /* A download of this process whose .part the caller did not find is
     * being renamed or was removed (its publish failed): wait until it is
     * done, then look at the folder again. */
    pending *q;
    while ((q = pending_find_locked(c, name)) && q->state != PENDING_DOWNLOADING)
        pthread_cond_wait(&c->cv, &c->lock);
    int ours = !q;
    if (ours) {
        p->next = c->pending;
        c->pending = p;
    }
    pthread_mutex_unlock(&c->lock);
    if (!ours) {
        free(p);
        return wait_s ? 0 : -EAGAIN; /* a prefetch leaves it to that download */
    }
    int rc = p->fill_fd = fill_lock(c, name, wait_s);
    if (rc >= 0) {
        /* Another process may have filled it while this one waited. */
        char path[PATH_MAX_LEN];
        cache_path(path, sizeof path, c->dir, name);
        rc = access(path, F_OK) != 0 ? download(c, p, size, wait_s, fill, ctx, oflags, pinned)
                                     : 1;
        if (rc == 0)
            return 1; /* p is the publisher's */
        close(p->fill_fd);
        rc = rc == 1 ? 0 : rc;
    }
    pthread_mutex_lock(&c->lock);
    pending_remove_locked(c, p);
    pthread_mutex_unlock(&c->lock);
    free(p);
    return rc;
}

/* Removes object `name`'s final file under ROOT/.lock (the evictor's
 * lock: a listing never sees it half gone); with `st`, only if the name is
 * still that file (another process may have removed it and downloaded the
 * object again meanwhile). Readers holding it keep reading it; their next
 * repin finds it gone. 1 when this call removed it, 0 when the name was
 * already gone or another file, or a negative code. */
static int remove_object(remote_cache *c, const char *name, const struct stat *st)
{
    char path[PATH_MAX_LEN];
    cache_path(path, sizeof path, c->dir, name);
    int lk = open_cache_lock(c);
    if (lk < 0)
        return lk;
    int rc = lock_root(c, lk);
    if (!rc) {
        struct stat now;
        if (!st || (stat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)) {
            if (unlink(path) == 0)
                rc = 1;
            else if (errno != ENOENT)
                rc = sf_fail(-errno, "%s: %s", path, sf_errno_text(errno));
        }
        unlock_root(c, lk);
    }
    close(lk);
    return rc;
}

int remote_cache_remove(remote_cache *c, const char *name, const struct stat *st)
{
    int rc = check_name(c, name);
    return rc ? rc : remove_object(c, name, st);
}

/* Whether fd, `name` opened from the cache, is a file of `size` bytes,
 * which every object the cache published is. 0 if so; 1 when it was
 * another size (cut short or appended to after the download: with
 * `remove`, removed, so that the caller downloads it again), or a negative
 * code naming it. */
static int check_cached(remote_cache *c, const char *name, int fd, uint64_t size, int remove)
{
    char path[PATH_MAX_LEN];
    cache_path(path, sizeof path, c->dir, name);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return sf_fail(-errno, "%s: %s", path, sf_errno_text(errno));
    if (!S_ISREG(st.st_mode))
        return sf_fail(-EISDIR, "remote cache: %s is not a file (the cache makes only files "
                                "there): remove it",
                       path);
    if ((uint64_t)st.st_size == size)
        return 0;
    if (!remove)
        return 1;
    int rc = remove_object(c, name, &st);
    if (rc < 0)
        return rc;
    fprintf(stderr, "shardfeed: remote cache: %s was %lld bytes, the object is %llu: removed, "
                    "downloading it again\n",
            path, (long long)st.st_size, (unsigned long long)size);
    return 1;
}

/* The error for object `name` whose open failed with errno `e` (not
 * ENOENT). ELOOP is O_NOFOLLOW's answer for a symbolic link: said so, as
 * check_cached says it of a folder or a FIFO. */
static int open_failure(const remote_cache *c, const char *name, int e)
{
    char path[PATH_MAX_LEN];
    cache_path(path, sizeof path, c->dir, name);
    if (e == ELOOP)
        return sf_fail(-ELOOP, "remote cache: %s is a symbolic link, not a file (the cache "
                               "makes only files there): remove it",
                       path);
    return sf_fail(-e, "%s: %s", path, sf_errno_text(e));
}

/* Makes sure `name` is in the cache; with `out`, returns it pinned. */
/* `name` as an object's: no '/', no leading '.' (the cache's own files),
 * short enough for a pending download's record and every path (check_name). */
static int check_object_name(const remote_cache *c, const char *name)
{
    if (strchr(name, '/') || name[0] == '.' || strlen(name) >= sizeof ((pending *)0)->name)
        return sf_fail(SF_E_INVALID, "remote cache: bad object name '%s'", name);
    return check_name(c, name);
}

static int ensure(int *out, remote_cache *c, const char *name, uint64_t size, int oflags,
                  unsigned wait_s, remote_fill_fn fill, void *ctx)
{
    int rc = check_object_name(c, name);
    if (rc)
        return rc;
    for (int round = 0; round < 8; round++) {
        /* A prefetch (wait_s 0) waits for nothing, this process's downloads neither. */
        int fd = open_object(c, name, oflags, wait_s != 0);
        int bad = fd >= 0 ? check_cached(c, name, fd, size, 1) : 0;
        if (bad) {
            close(fd);
            if (bad < 0)
                return bad;
            continue; /* removed: downloaded again */
        }
        if (fd >= 0) {
            if (out)
                *out = fd;
            else
                close(fd);
            return 0;
        }
        if (errno != ENOENT)
            return open_failure(c, name, errno);
        int got;
        rc = fetch_object(c, name, size, wait_s, fill, ctx, oflags, out ? &got : NULL);
        if (rc == -EAGAIN) /* wait_s 0: no room now, or another download of it under way */
            return out ? -EAGAIN : 0; /* a prefetch leaves it to that download, or to later */
        if (rc < 0)
            return rc;
        if (rc && out)
            *out = got;
        if (rc)
            return 0; /* downloaded: not opened by name again (a failed publish removes it) */
        /* Evicted again before it could be opened, or its publish failed:
         * another round. */
    }
    return sf_fail(-ENOSPC, "remote cache %s: %s was evicted as soon as it arrived, 8 times: "
                               "the cache limit is too small for the processes sharing it",
                   c->root, name);
}

int remote_cache_acquire(int *fd, remote_cache *c, const char *name, uint64_t size, int oflags,
                         remote_fill_fn fill, void *ctx)
{
    *fd = -1;
    return ensure(fd, c, name, size, oflags, c->wait_s, fill, ctx);
}

int remote_cache_try_acquire(int *fd, remote_cache *c, const char *name, uint64_t size,
                             int oflags, remote_fill_fn fill, void *ctx)
{
    *fd = -1;
    return ensure(fd, c, name, size, oflags, 0, fill, ctx);
}

int remote_cache_acquire_cached(int *fd, remote_cache *c, const char *name, uint64_t size,
                                int oflags)
{
    *fd = -1;
    int rc = check_name(c, name);
    if (rc)
        return rc;
    int got = open_object(c, name, oflags, 0);
    /* Another size: not removed here, where removing waits for ROOT/.lock
     * (up to the cache's wait when another process holds it) and the caller
     * holds a lock of its own; remote_cache_acquire, which the caller calls
     * next (-ENOENT), removes it and downloads it again. */
    int bad = got >= 0 ? check_cached(c, name, got, size, 0) : 0;
    if (bad) {
        close(got);
        return bad < 0 ? bad : -ENOENT;
    }
    if ((*fd = got) >= 0)
        return 0;
    int e = errno;
    return e == ENOENT ? -ENOENT : open_failure(c, name, e);
}

int remote_cache_download_private(int *fd, char *part, size_t part_cap, remote_cache *c,
                                  const char *name, uint64_t size, remote_fill_fn fill, void *ctx)
{
    *fd = -1;
    if (part_cap)
        part[0] = 0;
    int rc = check_object_name(c, name);
    if (rc)
        return rc;
    int f = reserve_part(c, name, size, c->wait_s, part, part_cap);
    if (f < 0)
        return f;
    if ((rc = fill(ctx, f, size))) {
        remote_cache_drop(f, part);
        return rc;
    }
    *fd = f;
    return 0;
}

void remote_cache_drop(int fd, const char *part)
{
    /* Removed while its LOCK_EX is held: the evictor never sees it unlocked. */
    if (part && part[0])
        unlink(part);
    if (fd >= 0)
        close(fd);
}

int remote_cache_prefetch(remote_cache *c, const char *name, uint64_t size, int nowait,
                          remote_fill_fn fill, void *ctx)
{
    return ensure(NULL, c, name, size, 0, nowait ? 0 : c->wait_s, fill, ctx);
}
