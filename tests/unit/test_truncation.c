/* A shard cut short while it is read. The fault guard (format/fault_guard.h)
 * turns SIGBUS from a file mapping into an error, and leaves other SIGBUS
 * to the handler that was there before. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/fault_guard.h"
#include "format/hash.h"
#include "format/le.h"
#include "reader/dataset_internal.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("truncation-test")

TestSuite(truncation, .init = scratch_init, .fini = scratch_fini, .timeout = 180);

/* ---- the guard ------------------------------------------------------------------------------ */

/* A file of three pages of known bytes, mapped whole, then cut to one page
 * and 100 bytes: page 2 faults, the rest of page 1 reads as zeros. */
typedef struct cut_map {
    uint8_t *map;
    size_t page;
} cut_map;

static cut_map map_cut_file(void)
{
    cut_map c = {NULL, (size_t)sysconf(_SC_PAGESIZE)};
    char path[4200];
    snprintf(path, sizeof path, "%s/file", g_root);
    uint8_t *buf = malloc(3 * c.page);
    for (size_t i = 0; i < 3 * c.page; i++)
        buf[i] = (uint8_t)(i * 7 + 1);
    unit_write_file(path, buf, 3 * c.page);
    free(buf);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    c.map = mmap(NULL, 3 * c.page, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(c.map, MAP_FAILED);
    close(fd);
    cr_assert_eq(truncate(path, (off_t)(c.page + 100)), 0);
    return c;
}

static void *copy_in_thread(void *arg)
{
    cut_map *c = arg;
    uint8_t *dst = malloc(c->page);
    intptr_t rc = sf_guarded_copy(dst, c->map + 2 * c->page, c->page);
    free(dst);
    return (void *)rc;
}

Test(truncation, guarded_copy_and_hash_return_an_error_where_memcpy_would_die)
{
    cut_map c = map_cut_file();
    uint8_t *dst = malloc(c.page);
    cr_assert_eq(sf_guarded_copy(dst, c.map, c.page), 0);
    for (size_t i = 0; i < c.page; i++)
        cr_assert_eq(dst[i], (uint8_t)(i * 7 + 1));
    /* Inside the last page: what the file still holds, then zeros. */
    cr_assert_eq(sf_guarded_copy(dst, c.map + c.page, c.page), 0);
    cr_assert_eq(dst[99], (uint8_t)((c.page + 99) * 7 + 1));
    cr_assert_eq(dst[100], 0);
    /* Past it: every time (SIGBUS is not left blocked), in any thread. */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sf_guarded_copy(dst, c.map + 2 * c.page, c.page), SF_E_TRUNCATED);
    cr_assert_eq(sf_guarded_copy(dst, c.map + c.page + 100, c.page), SF_E_TRUNCATED,
                 "a range that starts in the file and runs past its last page");
    pthread_t t;
    void *rc;
    cr_assert_eq(pthread_create(&t, NULL, copy_in_thread, &c), 0);
    pthread_join(t, &rc);
    cr_assert_eq((intptr_t)rc, SF_E_TRUNCATED);

    uint64_t d;
    const uint8_t *one[1] = {c.map};
    uint64_t one_len[1] = {c.page};
    cr_assert_eq(sf_guarded_hash(&d, one, one_len, 1), 0);
    cr_assert_eq(d, XXH3_64bits(c.map, c.page));
    const uint8_t *two[2] = {c.map, c.map + 2 * c.page};
    uint64_t two_len[2] = {c.page, 8};
    cr_assert_eq(sf_guarded_hash(&d, two, two_len, 2), SF_E_TRUNCATED);
    free(dst);
    munmap(c.map, 3 * c.page);
}

static int inner_then_outer_fault(void *arg)
{
    cut_map *c = arg;
    uint8_t b[64];
    /* The inner guard catches its own fault; the outer one is still armed. */
    if (sf_guarded_copy(b, c->map + 2 * c->page, sizeof b) != SF_E_TRUNCATED)
        return 1;
    volatile const uint8_t *p = c->map + 2 * c->page;
    return p[0]; /* faults: the outer guard's */
}

static int inner_only(void *arg)
{
    cut_map *c = arg;
    uint8_t b[64];
    return sf_guarded_copy(b, c->map + 2 * c->page, sizeof b) == SF_E_TRUNCATED ? 7 : 1;
}

Test(truncation, guards_nest)
{
    cut_map c = map_cut_file();
    cr_assert_eq(sf_fault_guarded(inner_only, &c), 7);
    cr_assert_eq(sf_fault_guarded(inner_then_outer_fault, &c), SF_E_TRUNCATED);
    munmap(c.map, 3 * c.page);
}

static void chained_handler(int sig)
{
    (void)sig;
    _exit(42);
}

/* Runs `touch` in a child after the guard is installed (with `own` as the
 * handler installed before it, or the default) and returns its wait status. */
static int child_fault(void (*own)(int))
{
    cut_map c = map_cut_file();
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        signal(SIGBUS, own ? own : SIG_DFL); /* what was there before (a sanitizer's, else) */
        if (sf_fault_guard_init() != 0)
            _exit(3);
        volatile const uint8_t *p = c.map + 2 * c.page;
        _exit(p[0] == 0 ? 4 : 5); /* not reached: the fault */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    munmap(c.map, 3 * c.page);
    return st;
}

Test(truncation, a_fault_outside_a_guard_goes_where_it_went_before)
{
    int st = child_fault(NULL);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "default action: died of SIGBUS (status %d)",
              st);
    st = child_fault(chained_handler);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 42, "the earlier handler ran (status %d)", st);
}
