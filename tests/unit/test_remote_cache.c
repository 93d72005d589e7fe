/* The node's cache of remote objects (lib/remote/cache.h), without a server:
 * a fill callback stands in for the download. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "io.h"
#include "unit_helpers.h"

static char root[256];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/sf-cache-test-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    unit_rm_tree(root);
}

/* Writes `size` bytes of (byte index + seed) and succeeds, or fails after
 * writing half when `fail` is set. */
typedef struct fill_spec {
    uint8_t seed;
    int fail;
    int calls;
} fill_spec;

static int fill(void *ctx, int fd, uint64_t size)
{
    fill_spec *f = ctx;
    f->calls++;
    uint8_t buf[4096];
    uint64_t n = f->fail ? size / 2 : size;
    for (uint64_t off = 0; off < n; off += sizeof buf) {
        uint64_t k = n - off < sizeof buf ? n - off : sizeof buf;
        for (uint64_t i = 0; i < k; i++)
            buf[i] = (uint8_t)(off + i + f->seed);
        cr_assert_eq(sf_write_full(fd, buf, k), 0);
    }
    return f->fail ? -EIO : 0;
}

/* fd holds the 10000 bytes fill wrote with `seed`. */
static void assert_filled(int fd, uint8_t seed)
{
    uint8_t buf[10000];
    cr_assert_eq(sf_pread_full(fd, buf, sizeof buf, 0), 0);
    for (unsigned i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], (uint8_t)(i + seed), "byte %u", i);
}

/* Bytes of the regular files under root/SPACE (what the limit counts),
 * and how many of them are named `prefix`*. */
static uint64_t folder_bytes(const char *dir, const char *prefix, unsigned *count)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    uint64_t total = 0;
    *count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[600];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            total += (uint64_t)st.st_size;
            *count += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
        }
    }
    closedir(d);
    return total;
}

static int exists(const remote_cache *c, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", remote_cache_dir(c), name);
    return access(path, F_OK) == 0;
}

/* Waits (up to 10 s) until this process's download of `name` is published:
 * until then its .part is in use, never evicted, and the evictor's order
 * is that of the published objects only. */
static void wait_published(const remote_cache *c, const char *name)
{
    for (int i = 0; i < 10000 && !exists(c, name); i++)
        usleep(1000);
    cr_assert(exists(c, name), "%s not published after 10 s", name);
}

TestSuite(remote_cache, .init = setup, .fini = teardown, .timeout = 60);

Test(remote_cache, an_object_is_filled_once_and_read_back_whole)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    fill_spec f = {.seed = 7};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0);
    assert_filled(fd, 7);
    close(fd);
    /* In the cache now: a second acquire does not fill again. */
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0);
    close(fd);
    cr_assert_eq(f.calls, 1);
    /* Published (made durable and renamed) by close at the latest. */
    char dir[600];
    snprintf(dir, sizeof dir, "%s", remote_cache_dir(c));
    remote_cache_free(c);
    unsigned parts;
    folder_bytes(dir, ".part-", &parts);
    cr_assert_eq(parts, 0, "no download left behind");
}

/* Holds every publish of this process (the test hook) until release_publishes
 * creates `gate` (a path under the test's root). */
static void hold_publishes(char *gate, size_t cap)
{
    snprintf(gate, cap, "%s/gate", root);
    cr_assert_eq(setenv("SHARDFEED_TEST_PUBLISH_HOLD", gate, 1), 0);
}

static void release_publishes(const char *gate)
{
    int g = open(gate, O_WRONLY | O_CREAT, 0644);
    cr_assert_geq(g, 0);
    close(g);
}

/* A download is read from its .part while its publish (fsync, rename) waits
 * (the test hook holds it until `gate` exists); nothing is under the final
 * name meanwhile, and close finishes the publish. */
Test(remote_cache, an_object_is_read_before_its_publish_finishes)
{
    char gate[600];
    hold_publishes(gate, sizeof gate);
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    fill_spec f = {.seed = 3};
    int fd, again;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0, "%s",
                 sf_last_error());
    assert_filled(fd, 3);
    cr_assert(!exists(c, "a.sfs"), "under its final name before its publish");
    unsigned parts;
    cr_assert_eq(folder_bytes(remote_cache_dir(c), ".part-", &parts), 10000);
    cr_assert_eq(parts, 1);
    /* Another acquire meanwhile finds the same download, not a new one. */
    cr_assert_eq(remote_cache_acquire(&again, c, "a.sfs", 10000, 0, fill, &f), 0);
    cr_assert_eq(f.calls, 1);
    close(again);
    char final[700], dir[600];
    snprintf(dir, sizeof dir, "%s", remote_cache_dir(c));
    snprintf(final, sizeof final, "%s/a.sfs", dir);
    release_publishes(gate);
    remote_cache_free(c); /* waits for the publish */
    cr_assert_eq(access(final, F_OK), 0, "not published at close");
    cr_assert_eq(folder_bytes(dir, ".part-", &parts), 10000);
    cr_assert_eq(parts, 0);
    /* The descriptor read before the publish is the file published. */
    struct stat a, b;
    cr_assert_eq(fstat(fd, &a), 0);
    cr_assert_eq(stat(final, &b), 0);
    cr_assert_eq(a.st_ino, b.st_ino);
    close(fd);
    unsetenv("SHARDFEED_TEST_PUBLISH_HOLD");
}

/* Downloads that outrun their publishes queue for the publisher only up to
 * a bound (each holds two descriptors); past it the downloader publishes
 * its own. With every publish held, 40 acquires stop at 34 .part files: the
 * one being published, 32 queued, and the 34th publishing inline. */
typedef struct acquire_many {
    remote_cache *c;
    int done;
} acquire_many;

static void *acquire_40(void *arg)
{
    acquire_many *a = arg;
    fill_spec f = {.seed = 7};
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "o%02d.sfs", i);
        int fd;
        cr_assert_eq(remote_cache_acquire(&fd, a->c, name, 10000, 0, fill, &f), 0, "%s",
                     sf_last_error());
        close(fd);
    }
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

Test(remote_cache, downloads_waiting_for_their_publish_are_bounded)
{
    char gate[600];
    hold_publishes(gate, sizeof gate);
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", remote_cache_dir(c));
    acquire_many a = {c, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, acquire_40, &a), 0);
    unsigned parts = 0;
    for (int i = 0; i < 1000 && parts < 33; i++) { /* at most 10 s */
        usleep(10000);
        folder_bytes(dir, ".part-", &parts);
    }
    usleep(300000); /* unbounded, the other six would arrive meanwhile */
    folder_bytes(dir, ".part-", &parts);
    /* 33 when the publisher thread had not yet taken the first when the
     * 33rd arrived (a loaded machine): 33 queued, the 33rd inline. */
    cr_assert(parts == 33 || parts == 34, "%u downloads held for their publish", parts);
    cr_assert(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE));
    release_publishes(gate);
    pthread_join(t, NULL);
    remote_cache_free(c);
    unsigned files;
    folder_bytes(dir, "o", &files);
    cr_assert_eq(files, 40);
    folder_bytes(dir, ".part-", &parts);
    cr_assert_eq(parts, 0);
    unsetenv("SHARDFEED_TEST_PUBLISH_HOLD");
}

/* A publish that fails (the hook fails it as a failed fsync would) leaves
 * no final name and no .part; what was read from the download was right. */
Test(remote_cache, a_failed_publish_leaves_nothing_under_the_final_name)
{
    cr_assert_eq(setenv("SHARDFEED_TEST_PUBLISH_FAIL", "1", 1), 0);
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    fill_spec f = {.seed = 5};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0, "%s",
                 sf_last_error());
    assert_filled(fd, 5);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", remote_cache_dir(c));
    remote_cache_free(c);
    unsigned parts;
    cr_assert_eq(folder_bytes(dir, "", &parts), 0, "a file is left");
    cr_assert_eq(remote_cache_repin(fd), 0, "the failed download still counts as cached");
    close(fd);
    unsetenv("SHARDFEED_TEST_PUBLISH_FAIL");
}

Test(remote_cache, a_failed_fill_leaves_nothing_under_the_final_name)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    fill_spec f = {.fail = 1};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), -EIO);
    cr_assert_eq(fd, -1);
    cr_assert(!exists(c, "a.sfs"));
    unsigned parts;
    cr_assert_eq(folder_bytes(remote_cache_dir(c), ".part-", &parts), 0);
    cr_assert_eq(parts, 0);
    remote_cache_free(c);
}

Test(remote_cache, the_folder_stays_under_the_limit_evicting_the_least_recently_used)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 2500, "space"), 0);
    fill_spec f = {0};
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "o%d", i);
        int fd;
        cr_assert_eq(remote_cache_acquire(&fd, c, name, 1000, 0, fill, &f), 0, "%s", sf_last_error());
        wait_published(c, name);
        /* o0 is used again each round: the evictor takes the others. */
        if (i > 0) {
            int fd0;
            usleep(12000); /* distinct mtimes: the coarse clock (10 ms at HZ=100) */
            cr_assert_eq(remote_cache_acquire(&fd0, c, "o0", 1000, 0, fill, &f), 0);
            close(fd0);
        }
        close(fd);
        unsigned n;
        cr_assert_leq(folder_bytes(remote_cache_dir(c), ".part-", &n), 2500);
    }
    cr_assert(exists(c, "o0"), "the most recently used object was evicted");
    cr_assert(exists(c, "o9"));
    cr_assert(!exists(c, "o1"));
    remote_cache_free(c);
}

/* Writes `bytes` bytes to path, made a day old (the evictor's oldest). */
static void old_file(const char *path, size_t bytes)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(ftruncate(fd, (off_t)bytes), 0);
    struct timespec t[2] = {{time(NULL) - 86400, 0}, {time(NULL) - 86400, 0}};
    cr_assert_eq(futimens(fd, t), 0);
    close(fd);
}

/* A cache folder where other files live (cache_dir=/scratch, $HOME/.cache):
 * only the spaces this cache made are its own. It took every file of every
 * subfolder, dotfiles and symlinked folders included, for cached objects
 * and evicted them, oldest first. */
Test(remote_cache, files_that_are_not_the_caches_are_never_counted_or_evicted)
{
    char path[600], outside[300];
    snprintf(path, sizeof path, "%s/notes", root);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/notes/important.txt", root);
    old_file(path, 3000);
    snprintf(path, sizeof path, "%s/top.bin", root);
    old_file(path, 3000);
    snprintf(outside, sizeof outside, "%s-outside", root);
    cr_assert_eq(mkdir(outside, 0755), 0);
    snprintf(path, sizeof path, "%s/data.bin", outside);
    old_file(path, 3000);
    snprintf(path, sizeof path, "%s/link", root);
    cr_assert_eq(symlink(outside, path), 0);
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 2500, "space"), 0);
    snprintf(path, sizeof path, "%s/space/.env", root); /* a dotfile in the space itself */
    old_file(path, 100);
    fill_spec f = {0};
    char name[32];
    for (int i = 0; i < 6; i++) { /* 6,000 bytes through a 2,500-byte cache */
        snprintf(name, sizeof name, "o%d", i);
        int fd;
        cr_assert_eq(remote_cache_acquire(&fd, c, name, 1000, 0, fill, &f), 0, "%s", sf_last_error());
        wait_published(c, name);
        close(fd);
    }
    cr_assert(!exists(c, "o0"), "nothing was evicted: the test proves nothing");
    const char *kept[] = {"notes/important.txt", "top.bin", "link/data.bin", "space/.env"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, kept[i]);
        cr_assert_eq(access(path, F_OK), 0, "%s was evicted", kept[i]);
    }
    remote_cache_free(c);
    snprintf(path, sizeof path, "%s/data.bin", outside);
    unlink(path);
    rmdir(outside);
}

/* A process stopped (Ctrl-Z, a debugger) while it held ROOT/.lock blocked
 * every other process of the node in flock, for ever and without a word.
 * Another open file description of the lock stands in for it here. */
/* A cache with a wait of 1 s, and ROOT/.lock held LOCK_EX through another
 * open file description (*holder; close it to let go). */
static remote_cache *open_with_root_held(int *holder)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    remote_cache_set_wait(c, 1);
    char path[600];
    snprintf(path, sizeof path, "%s/.lock", root);
    *holder = open(path, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(*holder, 0);
    cr_assert_eq(flock(*holder, LOCK_EX), 0);
    return c;
}

Test(remote_cache, a_lock_holder_that_never_lets_go_fails_the_download_after_the_wait)
{
    int holder;
    remote_cache *c = open_with_root_held(&holder);
    fill_spec f = {0};
    int fd = -1;
    time_t t0 = time(NULL);
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 1000, 0, fill, &f), -ETIMEDOUT, "%s",
                 sf_last_error());
    cr_assert_leq(time(NULL) - t0, 5);
    cr_assert(strstr(sf_last_error(), ".lock was held for the cache's wait of 1 s"), "%s",
              sf_last_error());
    cr_assert_eq(f.calls, 0);
    close(holder); /* let go: it works again */
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    close(fd);
    remote_cache_free(c);
}

Test(remote_cache, a_pinned_object_is_never_evicted)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 2500, "space"), 0);
    remote_cache_set_wait(c, 1);
    fill_spec f = {0};
    int a, b, d;
    cr_assert_eq(remote_cache_acquire(&a, c, "a", 1000, 0, fill, &f), 0);
    cr_assert_eq(remote_cache_acquire(&b, c, "b", 1000, 0, fill, &f), 0);
    /* Published (in the background: an fsync may take seconds on a busy
     * disk), so that below only the readers' pins keep them. */
    wait_published(c, "a");
    wait_published(c, "b");
    /* No room for a third while both are read: refused after the wait. */
    cr_assert_eq(remote_cache_acquire(&d, c, "d", 1000, 0, fill, &f), -ENOSPC);
    cr_assert(strstr(sf_last_error(), "raise cache_limit"), "%s", sf_last_error());
    cr_assert(exists(c, "a") && exists(c, "b"));
    /* b unpinned (kept open, as the dataset keeps idle descriptors): evicted. */
    remote_cache_unpin(b);
    cr_assert_eq(remote_cache_acquire(&d, c, "d", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    cr_assert(exists(c, "a"));
    cr_assert(!exists(c, "b"));
    cr_assert_eq(remote_cache_repin(b), 0, "an evicted descriptor is not the cache's");
    cr_assert_eq(remote_cache_repin(a), 1);
    close(a);
    close(b);
    close(d);
    remote_cache_free(c);
}

Test(remote_cache, a_try_acquire_that_would_wait_for_room_returns_at_once)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 2500, "space"), 0);
    fill_spec f = {0};
    int a, b, d, e;
    cr_assert_eq(remote_cache_try_acquire(&a, c, "a", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    cr_assert_eq(remote_cache_try_acquire(&b, c, "b", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    wait_published(c, "a");
    wait_published(c, "b");
    /* Both pinned: no room for a third, and the default wait (120 s) is not
     * taken: the caller's own pins may be what it would wait for. */
    time_t t0 = time(NULL);
    cr_assert_eq(remote_cache_try_acquire(&d, c, "d", 1000, 0, fill, &f), -EAGAIN);
    cr_assert_leq(time(NULL) - t0, 2);
    cr_assert_eq(d, -1);
    cr_assert_eq(f.calls, 2, "nothing fetched for d");
    cr_assert(!exists(c, "d"));
    /* One already there needs no room. */
    cr_assert_eq(remote_cache_try_acquire(&e, c, "a", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    close(e);
    remote_cache_unpin(b); /* room once b may go */
    /* The publisher may still hold b's .part descriptor (LOCK_SH) for a
     * moment after the rename that wait_published saw: asked again until
     * it lets go, each answer at once. */
    int rc = -EAGAIN;
    for (int i = 0; i < 200 && rc == -EAGAIN; i++) {
        rc = remote_cache_try_acquire(&d, c, "d", 1000, 0, fill, &f);
        if (rc == -EAGAIN)
            usleep(10000);
    }
    cr_assert_eq(rc, 0, "%s", sf_last_error());
    uint8_t got[1000];
    cr_assert_eq(sf_pread_full(d, got, sizeof got, 0), 0);
    for (unsigned i = 0; i < sizeof got; i++)
        cr_assert_eq(got[i], (uint8_t)i, "byte %u", i);
    close(a);
    close(b);
    close(d);
    remote_cache_free(c);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Another process's download of `name`: its .fill lock held (flock locks
 * belong to the open file, so another open in this process stands in for
 * it) and, while `writing`, a .part of it written to every 100 ms. */
typedef struct other_download {
    remote_cache *c;
    const char *name;
    int writing_ms; /* how long it writes before it lets go */
    int fill_fd;
} other_download;

static void other_start(other_download *o)
{
    char path[600];
    snprintf(path, sizeof path, "%s/.fill-%s", remote_cache_dir(o->c), o->name);
    o->fill_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(o->fill_fd, 0);
    cr_assert_eq(flock(o->fill_fd, LOCK_EX), 0);
}

static void *other_writes(void *arg)
{
    other_download *o = arg;
    char path[600];
    snprintf(path, sizeof path, "%s/.part-%s-99999-0", remote_cache_dir(o->c), o->name);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    for (int t = 0; fd >= 0 && t < o->writing_ms; t += 100) {
        (void)!pwrite(fd, "x", 1, (off_t)(t / 100));
        usleep(100 * 1000);
    }
    if (fd >= 0)
        close(fd);
    unlink(path); /* it failed: nothing published, the lock goes */
    close(o->fill_fd);
    return NULL;
}

Test(remote_cache, a_reader_waits_for_another_process_download_only_while_it_writes)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    remote_cache_set_wait(c, 1);
    fill_spec f = {0};
    int fd;
    /* A process that holds the lock and writes nothing (stopped, hung): the
     * wait ends after wait_s, naming the lock. It used to last for ever. */
    other_download stuck = {c, "s", 0, -1};
    other_start(&stuck);
    uint64_t t0 = now_ms();
    cr_assert_eq(remote_cache_acquire(&fd, c, "s", 1000, 0, fill, &f), -ETIMEDOUT);
    uint64_t waited = now_ms() - t0;
    cr_assert(waited >= 1000 && waited < 5000, "waited %llu ms", (unsigned long long)waited);
    cr_assert(strstr(sf_last_error(), "has written nothing of it for 1 s"), "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), ".fill-s"), "%s", sf_last_error());
    /* The prefetcher does not wait at all, and leaves the object to it. */
    t0 = now_ms();
    cr_assert_eq(remote_cache_prefetch(c, "s", 1000, 1, fill, &f), 0, "%s", sf_last_error());
    cr_assert_lt(now_ms() - t0, 500);
    cr_assert_eq(f.calls, 0);
    close(stuck.fill_fd);
    /* A download that writes for 2.5 s, past wait_s: waited for; when it
     * lets go without the object, this one downloads it. */
    other_download slow = {c, "w", 2500, -1};
    other_start(&slow);
    pthread_t tid;
    cr_assert_eq(pthread_create(&tid, NULL, other_writes, &slow), 0);
    t0 = now_ms();
    cr_assert_eq(remote_cache_acquire(&fd, c, "w", 10000, 0, fill, &f), 0, "%s", sf_last_error());
    waited = now_ms() - t0;
    pthread_join(tid, NULL);
    cr_assert_geq(waited, 2000, "did not wait for the download under way (%llu ms)",
                  (unsigned long long)waited);
    cr_assert_eq(f.calls, 1);
    assert_filled(fd, 0);
    close(fd);
    remote_cache_free(c);
}

typedef struct acquirer {
    remote_cache *c;
    const char *name;
    int rc;
    uint64_t ms;
} acquirer;

static void *acquire_one(void *arg)
{
    acquirer *a = arg;
    fill_spec f = {0};
    int fd = -1;
    uint64_t t0 = now_ms();
    a->rc = remote_cache_acquire(&fd, a->c, a->name, 1000, 0, fill, &f);
    a->ms = now_ms() - t0;
    if (fd >= 0)
        close(fd);
    return NULL;
}

Test(remote_cache, threads_behind_a_stalled_download_fail_together_and_prefetches_do_not_wait)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    remote_cache_set_wait(c, 2);
    other_download stuck = {c, "s", 0, -1};
    other_start(&stuck);
    /* 4 threads of this process need it: one waits on the lock, the others
     * on that thread. Each used to wait its own 2 s after the one before. */
    acquirer a[4];
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (acquirer){c, "s", 0, 0};
        cr_assert_eq(pthread_create(&tid[i], NULL, acquire_one, &a[i]), 0);
    }
    usleep(300 * 1000);
    /* Meanwhile a prefetch of it returns at once: it used to wait for the
     * thread of this process that waits. */
    fill_spec f = {0};
    uint64_t t0 = now_ms();
    cr_assert_eq(remote_cache_prefetch(c, "s", 1000, 1, fill, &f), 0, "%s", sf_last_error());
    cr_assert_lt(now_ms() - t0, 500, "the prefetch waited");
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        cr_assert_eq(a[i].rc, -ETIMEDOUT, "thread %d: %d", i, a[i].rc);
        cr_assert_lt(a[i].ms, 3500, "thread %d failed after %llu ms", i, (unsigned long long)a[i].ms);
    }
    cr_assert_eq(f.calls, 0);
    close(stuck.fill_fd);
    remote_cache_free(c);
}

/* This process's threads queue for ROOT/.lock on a mutex before they poll
 * the flock (they polled against each other, up to 16 ms apart). Behind a
 * holder that never lets go each fails within one wait of its own start:
 * one that queued behind another thread polls only for what is left of its
 * wait (it polled a whole wait more, and failed after 1.8 s of a 1 s wait
 * when it started 200 ms after the first). Once it lets go all get through. */
Test(remote_cache, threads_queued_for_the_root_lock_fail_within_one_wait_and_then_all_proceed)
{
    int holder;
    remote_cache *c = open_with_root_held(&holder);
    const char *names[4] = {"q0", "q1", "q2", "q3"};
    acquirer a[4];
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (acquirer){c, names[i], 0, 0};
        cr_assert_eq(pthread_create(&tid[i], NULL, acquire_one, &a[i]), 0);
        usleep(100 * 1000); /* staggered: each queues behind one polling */
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        cr_assert_eq(a[i].rc, -ETIMEDOUT, "thread %d: %d", i, a[i].rc);
        /* The wait is 1 s: each fails after about 1.0 s. The old code failed
         * thread 1 (queued behind thread 0, which polled until 1.0 s) after
         * 1.9 s; threads 2 and 3 timed out on the mutex at 1.0 s. */
        cr_assert_lt(a[i].ms, 1700, "thread %d failed after %llu ms", i, (unsigned long long)a[i].ms);
    }
    close(holder);
    for (int i = 0; i < 4; i++) {
        a[i] = (acquirer){c, names[i], 0, 0};
        cr_assert_eq(pthread_create(&tid[i], NULL, acquire_one, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        cr_assert_eq(a[i].rc, 0, "thread %d: %d", i, a[i].rc);
        wait_published(c, names[i]);
        cr_assert(exists(c, names[i]), "%s", names[i]);
    }
    remote_cache_free(c);
}

/* A copy of another size found by acquire_cached, whose caller holds a lock
 * of its own (the dataset's files lock): -ENOENT at once, nothing removed.
 * Removing it waits for ROOT/.lock, the cache's wait when another process
 * holds it, and every thread needing the caller's lock waited as long.
 * acquire, which the caller calls next, removes it and downloads it. */
Test(remote_cache, a_copy_of_another_size_is_left_to_acquire_without_waiting_for_the_root_lock)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1 << 20, "space"), 0);
    fill_spec f = {.seed = 3};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0);
    close(fd);
    wait_published(c, "a.sfs");
    char path[600];
    snprintf(path, sizeof path, "%s/a.sfs", remote_cache_dir(c));
    cr_assert_eq(truncate(path, 1000), 0);
    remote_cache_set_wait(c, 2);
    char lock[600];
    snprintf(lock, sizeof lock, "%s/.lock", root);
    int holder = open(lock, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(holder, 0);
    cr_assert_eq(flock(holder, LOCK_EX), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(remote_cache_acquire_cached(&fd, c, "a.sfs", 10000, 0), -ENOENT, "%s", sf_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_assert_lt(ms, 1000, "acquire_cached waited %.0f ms for the root lock", ms);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "the copy is left for acquire");
    cr_assert_eq(st.st_size, 1000);
    close(holder);
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 10000, 0, fill, &f), 0, "%s", sf_last_error());
    assert_filled(fd, 3);
    close(fd);
    cr_assert_eq(f.calls, 2, "downloaded again");
    remote_cache_free(c);
}

Test(remote_cache, a_dead_download_is_removed_when_room_is_needed)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 2500, "space"), 0);
    /* What a process killed mid-download leaves: a .part file nobody locks. */
    char part[600];
    snprintf(part, sizeof part, "%s/.part-x-99999-0", remote_cache_dir(c));
    int p = open(part, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(p, 0);
    cr_assert_eq(ftruncate(p, 2000), 0);
    close(p);
    fill_spec f = {0};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    close(fd);
    wait_published(c, "a"); /* then evictable for b below */
    cr_assert_neq(access(part, F_OK), 0, "the dead download is still there");
    /* One whose writer is alive (holds its lock) is left alone. */
    p = open(part, O_RDWR | O_CREAT, 0644);
    cr_assert_eq(ftruncate(p, 1000), 0);
    cr_assert_eq(flock(p, LOCK_EX), 0);
    cr_assert_eq(remote_cache_acquire(&fd, c, "b", 1000, 0, fill, &f), 0, "%s", sf_last_error());
    close(fd);
    cr_assert_eq(access(part, F_OK), 0);
    unsigned n;
    cr_assert_leq(folder_bytes(remote_cache_dir(c), ".part-", &n), 2500);
    close(p);
    remote_cache_free(c);
}

Test(remote_cache, an_object_larger_than_the_limit_is_refused_naming_it)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1000, "space"), 0);
    fill_spec f = {0};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "big.sfs", 1001, 0, fill, &f), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "big.sfs"), "%s", sf_last_error());
    cr_assert_eq(f.calls, 0);
    remote_cache_free(c);
}

Test(remote_cache, names_that_leave_the_folder_are_refused)
{
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, root, 1000, "space"), 0);
    fill_spec f = {0};
    int fd;
    cr_assert_eq(remote_cache_acquire(&fd, c, "../x", 10, 0, fill, &f), SF_E_INVALID);
    cr_assert_eq(remote_cache_acquire(&fd, c, ".lock", 10, 0, fill, &f), SF_E_INVALID);
    cr_assert_eq(f.calls, 0);
    remote_cache_free(c);
}

/* Makes folders under root until the path is exactly `len` bytes (names of
 * at most 255 bytes); the path in out (cap > len). */
static void make_long_dir(char *out, size_t cap, size_t len)
{
    cr_assert_gt(cap, len);
    snprintf(out, cap, "%s", root);
    size_t at = strlen(out);
    while (at < len) {
        size_t room = len - at - 1, n = room < 255 ? room : 255;
        if (room - n > 0 && room - n < 2)
            n = room - 2;
        out[at++] = '/';
        memset(out + at, 'd', n);
        at += n;
        out[at] = '\0';
        cr_assert_eq(mkdir(out, 0755), 0, "%zu: %s", at, strerror(errno));
    }
    cr_assert_eq(strlen(out), len);
}

/* A cache folder whose path leaves room for ROOT/SPACE/a.sfs but not for
 * the download's ROOT/SPACE/.part-a.sfs-PID-N nor its .fill-a.sfs lock:
 * refused as too long. Cut short, they named other files (".fill-a.sf",
 * ".part-a.sfs-1234"), which the download created, renamed and removed. */
Test(remote_cache, a_folder_too_long_for_a_download_path_is_refused)
{
    char *base = malloc(4096);
    cr_assert_not_null(base);
    make_long_dir(base, 4096, 4085 - strlen("/space"));
    remote_cache *c;
    cr_assert_eq(remote_cache_open(&c, base, 1 << 20, "space"), 0, "%s", sf_last_error());
    cr_assert_eq(strlen(remote_cache_dir(c)), 4085);
    fill_spec f = {0};
    int fd = -1;
    cr_assert_eq(remote_cache_acquire(&fd, c, "a.sfs", 100, 0, fill, &f), -ENAMETOOLONG, "%s", sf_last_error());
    cr_assert(strstr(sf_last_error(), "the folder's path is too long (4085 bytes"), "%s", sf_last_error());
    cr_assert_eq(fd, -1);
    cr_assert_eq(f.calls, 0);
    cr_assert_eq(remote_cache_acquire_cached(&fd, c, "a.sfs", 1, 0), -ENAMETOOLONG, "%s", sf_last_error());
    unsigned n;
    cr_assert_eq(folder_bytes(remote_cache_dir(c), ".part-", &n), 0);
    DIR *d = opendir(remote_cache_dir(c));
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        cr_assert(!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                      !strcmp(e->d_name, ".shardfeed-space"),
                  "%s made", e->d_name);
    closedir(d);
    remote_cache_free(c);
    free(base);
}
