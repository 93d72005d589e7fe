/* A shard cut short while it is read: the fault guard (lib/base/fault_guard.h)
 * turns SIGBUS from a mapping into an error, random access returns an error
 * naming the shard, and every engine of the streaming reader ends the epoch
 * with an error naming the shard or, with on_corrupt = SKIP, substitutes
 * the lost records and delivers only intact samples. (tests/reliability/
 * truncation.py runs the same at 50 truncation points through the CLI and
 * Python.) */
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

#include "fault_guard.h"
#include "hash.h"
#include "le.h"
#include "dataset_internal.h"
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
    cr_assert_eq(sf_guarded_hash(&d, NULL, one, one_len, 1), 0);
    cr_assert_eq(d, XXH3_64bits(c.map, c.page));
    const uint8_t *two[2] = {c.map, c.map + 2 * c.page};
    uint64_t two_len[2] = {c.page, 8};
    XXH3_state_t *xxh = XXH3_createState();
    cr_assert_not_null(xxh);
    cr_assert_eq(sf_guarded_hash(&d, xxh, two, two_len, 2), SF_E_TRUNCATED);
    XXH3_freeState(xxh);
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

/* ---- datasets ------------------------------------------------------------------------------- */

enum kind { FIXED, VAR, ZSTD };
#define N 240
#define IMG 600

static uint64_t var_len(uint64_t i)
{
    return 200 + i * 53 % 1800;
}

/* The value of sample i's payload field (img or data), as packed. */
static uint64_t expected(enum kind k, uint64_t i, uint8_t *out)
{
    uint64_t len = k == FIXED ? IMG : var_len(i);
    for (uint64_t j = 0; j < len; j++)
        out[j] = (uint8_t)(k == FIXED ? i * 31 + j * 7 : (j / 16) * 3 + i); /* var: compressible */
    return len;
}

/* Packs N samples of `k` into g_root/NAME (shards of about 48 KiB, so
 * several): FIXED from .npy files (img uint8 [600] + label), VAR and ZSTD
 * from a list of files (data bytes + label; ZSTD compresses data). */
static void make_dataset(char *out, size_t cap, const char *name, enum kind k)
{
    char in[4200], path[4400];
    snprintf(in, sizeof in, "%s/%s-in", g_root, name);
    snprintf(out, cap, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    uint8_t *v = malloc(4096);
    FILE *list = NULL;
    if (k != FIXED) {
        snprintf(path, sizeof path, "%s/list.csv", in);
        list = fopen(path, "w");
        cr_assert_not_null(list);
    }
    for (uint64_t i = 0; i < N; i++) {
        uint64_t len = expected(k, i, v);
        int64_t label = (int64_t)i;
        if (k == FIXED) {
            uint64_t shape[1] = {IMG};
            snprintf(path, sizeof path, "%s/img_%llu.npy", in, (unsigned long long)i);
            unit_write_npy(path, SF_DTYPE_UINT8, 1, shape, v, len);
            snprintf(path, sizeof path, "%s/label_%llu.npy", in, (unsigned long long)i);
            unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, 8);
        } else {
            snprintf(path, sizeof path, "%s/f%llu.bin", in, (unsigned long long)i);
            unit_write_file(path, v, len);
            fprintf(list, "f%llu.bin,%llu\n", (unsigned long long)i, (unsigned long long)i);
        }
    }
    free(v);
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    o.align = 64;
    o.shard_size = 48 << 10;
    o.compress = k == ZSTD ? "data=zstd" : NULL;
    if (list) {
        fclose(list);
        snprintf(path, sizeof path, "%s/list.csv", in);
    }
    int rc = sf_pack(NULL, list ? path : in, out, &o);
    cr_assert_eq(rc, 0, "pack: %s", sf_last_error());
}

/* The input's number of the sample (ids follow keys, but say so here). */
static uint64_t key_number(sf_dataset *ds, uint64_t id)
{
    const char *key;
    size_t len;
    cr_assert_eq(sf_dataset_key(&key, &len, ds, id), 0);
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)len, key);
    return strtoull(buf[0] == 'f' ? buf + 1 : buf, NULL, 10);
}

/* Where shard `shard`'s records lie, and a cut in the middle of its data:
 * the records that end past the cut are lost. */
typedef struct cut_plan {
    char path[4300];
    uint64_t first, count; /* samples of the shard */
    uint64_t cut;          /* new file size */
    uint64_t readable;     /* the end of its last page: bytes past cut up to here read as 0 */
    uint64_t start[N], end[N]; /* by local record: where its payload starts and ends */
} cut_plan;

static void plan_cut(cut_plan *p, sf_dataset *ds, uint64_t shard)
{
    const sf_open_shard *sh = &ds->shards[shard];
    snprintf(p->path, sizeof p->path, "%s/%s", ds->dir, sh->name);
    p->first = ds->manifest.shards[shard].first_record;
    p->count = sh->meta.header.record_count;
    cr_assert_leq(p->count, N);
    for (uint64_t i = 0; i < p->count; i++) {
        sf_index_entry e;
        sf_dataset_entry(&e, ds, shard, i);
        p->start[i] = e.offset;
        p->end[i] = e.offset + e.size;
    }
    /* Not page-aligned, inside a record in the middle of the data area. */
    sf_index_entry e;
    sf_dataset_entry(&e, ds, shard, p->count / 2);
    p->cut = e.offset + e.size / 2;
    p->readable = sf_align_up(p->cut, (uint64_t)sysconf(_SC_PAGESIZE));
    cr_assert_lt(p->readable, p->end[p->count - 1], "some records lie wholly past the last page");
}

/* ---- random access -------------------------------------------------------------------------- */

static void random_access_after_a_cut(enum kind k)
{
    char dir[4200];
    make_dataset(dir, sizeof dir, "ra", k);
    sf_dataset *ds;
    cr_assert_eq(sf_dataset_open(&ds, dir), 0, "%s", sf_last_error());
    uint64_t shard = sf_dataset_num_shards(ds) - 2;
    cut_plan p;
    plan_cut(&p, ds, shard);
    uint8_t *buf = malloc(1 << 16), *want = malloc(1 << 16);
    uint64_t size;
    /* Mapped (and its DCtx used) before the cut. */
    cr_assert_eq(sf_dataset_read_value(buf, 1 << 16, &size, ds, p.first, 0, 1), 0, "%s",
                 sf_last_error());
    cr_assert_eq(truncate(p.path, (off_t)p.cut), 0);
    const char *name = ds->shards[shard].name;
    for (int check = 0; check < 2; check++) {
        for (uint64_t i = 0; i < p.count; i++) {
            uint64_t id = p.first + i;
            uint64_t wlen = expected(k, key_number(ds, id), want);
            int rc = sf_dataset_read_value(buf, 1 << 16, &size, ds, id, 0, check);
            if (p.end[i] <= p.cut) {
                cr_assert_eq(rc, 0, "record %llu before the cut: %s", (unsigned long long)i,
                             sf_last_error());
                cr_assert_eq(size, wlen);
                cr_assert_eq(memcmp(buf, want, wlen), 0, "record %llu", (unsigned long long)i);
                continue;
            }
            /* Past the cut. Bytes in the file's last page read as zeros
             * where the file ended (mmap's rule): the checksum finds them,
             * and a compressed value made of them does not decompress;
             * unchecked and uncompressed, they are what the page holds.
             * Anything past that page faults. */
            int seen_zeros = p.start[i] < p.readable;
            if (rc == 0) {
                cr_assert(!check && k != ZSTD && p.end[i] <= p.readable,
                          "record %llu past the cut read without an error", (unsigned long long)i);
                continue;
            }
            cr_assert(rc == SF_E_TRUNCATED || (check && seen_zeros && rc == SF_E_CHECKSUM) ||
                          (k == ZSTD && seen_zeros && rc == SF_E_CORRUPT),
                      "record %llu past the cut (check %d): %s (%s)", (unsigned long long)i, check,
                      sf_strerror(rc), sf_last_error());
            cr_assert_not_null(strstr(sf_last_error(), name), "names the shard: %s", sf_last_error());
            if (rc == SF_E_TRUNCATED)
                cr_assert_not_null(strstr(sf_last_error(), "cut short"), "%s", sf_last_error());
            if (!seen_zeros)
                cr_assert_eq(rc, SF_E_TRUNCATED, "record %llu wholly past the file's last page",
                             (unsigned long long)i);
            if (k == FIXED && check) {
                const void *ptr;
                cr_assert_eq(sf_dataset_get(&ptr, &size, ds, id, 0, 1), rc, "sf_dataset_get");
            }
            if (k == ZSTD && !seen_zeros)
                cr_assert_eq(sf_dataset_value_size(&size, ds, id, 0), SF_E_TRUNCATED,
                             "the frame header is past the end");
        }
    }
    /* After faults inside zstd, the dataset's context still decompresses. */
    for (uint64_t id = 0; id < p.first; id += 17) {
        uint64_t wlen = expected(k, key_number(ds, id), want);
        cr_assert_eq(sf_dataset_read_value(buf, 1 << 16, &size, ds, id, 0, 1), 0, "%s",
                     sf_last_error());
        cr_assert_eq(size, wlen);
        cr_assert_eq(memcmp(buf, want, wlen), 0);
    }
    free(buf);
    free(want);
    sf_dataset_close(ds);
}

Test(truncation, random_access_to_a_cut_shard_is_an_error_naming_it_fixed)
{
    random_access_after_a_cut(FIXED);
}

Test(truncation, random_access_to_a_cut_shard_is_an_error_naming_it_var)
{
    random_access_after_a_cut(VAR);
}

Test(truncation, random_access_to_a_cut_shard_is_an_error_naming_it_zstd)
{
    random_access_after_a_cut(ZSTD);
}

/* ---- the streaming reader ------------------------------------------------------------------- */

/* Records of the plan's shard that end past the cut. */
static uint64_t records_lost(const cut_plan *p)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < p->count; i++)
        n += p->end[i] > p->cut;
    return n;
}

/* Reads an epoch in dataset order, cutting the last shard but one after the
 * first batch: every engine must end with an error naming the shard, or
 * (skip) deliver the epoch with the lost records substituted by intact ones. */
static void read_through_a_cut(enum kind k)
{
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP, SF_ENGINE_AUTO};
    char pristine[4200];
    make_dataset(pristine, sizeof pristine, "pristine", k);
    uint8_t *want = malloc(1 << 16);
    for (size_t e = 0; e < 4; e++) {
        for (int skip = 0; skip < 2; skip++) {
            char dir[4300], cmd[9000];
            snprintf(dir, sizeof dir, "%s/copy-%zu-%d", g_root, e, skip);
            snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", pristine, dir);
            cr_assert_eq(system(cmd), 0);
            sf_dataset *ds;
            cr_assert_eq(sf_dataset_open(&ds, dir), 0);
            uint64_t shard = sf_dataset_num_shards(ds) - 2;
            cut_plan p;
            plan_cut(&p, ds, shard);
            const char *name = ds->shards[shard].name;

            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.batch_size = 8;
            o.prefetch = 3;
            o.engine = engines[e];
            o.on_corrupt = skip ? SF_ON_CORRUPT_SKIP : SF_ON_CORRUPT_ERROR;
            sf_reader *r;
            cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
            const sf_batch *b;
            uint64_t seen = 0;
            int rc;
            while ((rc = sf_reader_next(&b, r)) == 0 && b) {
                if (b->index == 0)
                    cr_assert_eq(truncate(p.path, (off_t)p.cut), 0);
                const sf_batch_field *f = &b->fields[0];
                for (uint32_t j = 0; j < b->size; j++) {
                    uint64_t src = b->source_ids[j];
                    uint64_t len = expected(k, key_number(ds, src), want);
                    const uint8_t *got = (const uint8_t *)f->data +
                                         (f->offsets ? f->offsets[j] : (uint64_t)j * IMG);
                    uint64_t glen = f->offsets ? f->offsets[j + 1] - f->offsets[j] : IMG;
                    cr_assert(glen == len && memcmp(got, want, len) == 0,
                              "engine %zu: sample %llu (from %llu) is not intact", e,
                              (unsigned long long)b->ids[j], (unsigned long long)src);
                    cr_assert(src < p.first || src >= p.first + p.count ||
                                  p.end[src - p.first] <= p.cut,
                              "a lost record was delivered");
                }
                seen += b->size;
                sf_reader_release(r, b);
            }
            sf_reader_statistics st;
            sf_reader_stats(&st, r);
            if (skip) {
                cr_assert_eq(rc, 0, "engine %s, skip: %s", st.engine, sf_last_error());
                cr_assert_eq(seen, N);
                cr_assert_eq(st.corrupt_substitutions, records_lost(&p), "engine %s", st.engine);
            } else {
                cr_assert(rc == SF_E_TRUNCATED || rc == SF_E_CHECKSUM || (k == ZSTD && rc == SF_E_CORRUPT),
                          "engine %s: %s (%s)", st.engine, sf_strerror(rc), sf_last_error());
                cr_assert_not_null(strstr(sf_last_error(), name), "engine %s: %s", st.engine,
                                   sf_last_error());
                cr_assert_lt(seen, N);
            }
            sf_reader_close(r);
            sf_dataset_close(ds);
        }
    }
    free(want);
}

Test(truncation, every_engine_reading_a_cut_shard_errs_or_substitutes_fixed)
{
    read_through_a_cut(FIXED);
}

Test(truncation, every_engine_reading_a_cut_shard_errs_or_substitutes_var)
{
    read_through_a_cut(VAR);
}

Test(truncation, every_engine_reading_a_cut_shard_errs_or_substitutes_zstd)
{
    read_through_a_cut(ZSTD);
}
