/* The reader allocates nothing per record once it is open (shardfeed/reader.h:
 * "nothing proportional to the data is allocated afterwards"): epochs of a
 * dataset with two payload fields, on every engine, with and without a
 * corrupt record to substitute, while every malloc of the process is
 * counted.
 *
 * The count replaces malloc and friends in this executable (glibc's
 * documented way to replace the allocator, forwarding to __libc_malloc), so
 * it also sees allocations made inside shared libraries (XXH3_createState in
 * libxxhash), which -Wl,--wrap cannot. Under AddressSanitizer, which owns
 * the allocator, the test is skipped. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shardfeed/shardfeed.h"
#include "unit_helpers.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNTING_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COUNTING_MALLOC 0
#endif
#endif
#ifndef COUNTING_MALLOC
#define COUNTING_MALLOC 1
#endif

static atomic_int g_counting;
static atomic_ulong g_allocations;

#if COUNTING_MALLOC
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static void count(void)
{
    if (atomic_load_explicit(&g_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&g_allocations, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    count();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    count();
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    count();
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    count();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    count();
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *p)
{
    __libc_free(p);
}
#endif

UNIT_SCRATCH("reader-alloc-test")

TestSuite(reader_alloc, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

#define N 200
#define IMG 300
#define BOX 4

/* N samples: img uint8 [IMG] and box float32 [BOX] (two payload fields),
 * label int64 (inline), packed with --align 64 into several shards. */
static void make_dataset(char *dir, size_t cap, const char *name)
{
    char in[4200];
    snprintf(in, sizeof in, "%s/%s-npy", g_root, name);
    snprintf(dir, cap, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    uint8_t img[IMG];
    float box[BOX];
    uint64_t img_shape = IMG, box_shape = BOX;
    char path[4300];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < IMG; j++)
            img[j] = (uint8_t)(i * 7 + j);
        for (int j = 0; j < BOX; j++)
            box[j] = (float)(i + j);
        int64_t label = i;
        snprintf(path, sizeof path, "%s/img_%d.npy", in, i);
        unit_write_npy(path, SF_DTYPE_UINT8, 1, &img_shape, img, sizeof img);
        snprintf(path, sizeof path, "%s/box_%d.npy", in, i);
        unit_write_npy(path, SF_DTYPE_FLOAT32, 1, &box_shape, box, sizeof box);
        snprintf(path, sizeof path, "%s/label_%d.npy", in, i);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.align = 64;
    po.shard_size = 16 * 1024;
    sf_pack_result res;
    cr_assert_eq(sf_pack_npy_dir(&res, in, dir, &po), 0, "pack: %s", sf_last_error());
    cr_assert_gt(res.shards, 1);
}

/* Reads `epochs` epochs, releasing each batch; no allocation and no
 * Criterion assertion inside (an assertion may allocate): the outcome is
 * returned. Returns 0, or the first error. */
static int read_epochs(sf_reader *r, int epochs, uint64_t *samples, uint64_t *substituted)
{
    for (int e = 0; e < epochs; e++) {
        int rc = sf_reader_set_epoch(r, (uint64_t)e);
        for (const sf_batch *b; rc == 0;) {
            if ((rc = sf_reader_next(&b, r)) || !b)
                break;
            *samples += b->size;
            *substituted += b->substituted;
            rc = sf_reader_release(r, b);
        }
        if (rc)
            return rc;
    }
    return 0;
}

Test(reader_alloc, no_allocation_per_record_after_open_on_any_engine)
{
    if (!COUNTING_MALLOC)
        cr_skip_test("the allocator belongs to the sanitizer in this build");
    char clean[4200], corrupt[4200];
    make_dataset(clean, sizeof clean, "clean");
    make_dataset(corrupt, sizeof corrupt, "corrupt");
    /* The first record's first img byte: substituted under on_corrupt = skip. */
    unit_flip_shard_byte(corrupt, 0, sf_data_offset(64));
    static const struct {
        int engine;
        const char *name;
    } engines[] = {{SF_ENGINE_AUTO, "auto"},
                   {SF_ENGINE_URING, "uring"},
                   {SF_ENGINE_PREAD, "pread"},
                   {SF_ENGINE_MMAP, "mmap"}};
    char seen[1024] = ""; /* every case that allocated, for one failure naming them all */
    size_t len = 0;
    for (size_t e = 0; e < sizeof engines / sizeof engines[0]; e++) {
        for (int bad = 0; bad < 2; bad++) {
            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.engine = engines[e].engine;
            o.batch_size = 16;
            o.shuffle = SF_READER_SHUFFLE_GLOBAL;
            o.on_corrupt = SF_ON_CORRUPT_SKIP;
            sf_reader *r = NULL;
            cr_assert_eq(sf_reader_open(&r, bad ? corrupt : clean, &o), 0, "%s", sf_last_error());
            uint64_t samples = 0, substituted = 0;
            atomic_store(&g_allocations, 0);
            atomic_store(&g_counting, 1);
            int rc = read_epochs(r, 3, &samples, &substituted);
            atomic_store(&g_counting, 0);
            unsigned long allocations = atomic_load(&g_allocations);
            cr_assert_eq(rc, 0, "%s: %s", engines[e].name, sf_last_error());
            cr_assert_eq(samples, 3 * N);
            cr_assert_eq(substituted, bad ? 3 : 0, "%s: %llu substitutions", engines[e].name,
                         (unsigned long long)substituted);
            if (allocations && len < sizeof seen)
                len += (size_t)snprintf(seen + len, sizeof seen - len, " %s/%s: %lu;",
                                        engines[e].name, bad ? "corrupt" : "clean", allocations);
            sf_reader_close(r);
        }
    }
    cr_assert_eq(len, 0, "allocations during 3 epochs (%d records), by engine/dataset:%s", 3 * N,
                 seen);
}
