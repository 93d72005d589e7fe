/* The batch slab is sized from what a batch can hold: the largest sum of
 * batch_size values of each variable-length field (decompressed sizes for
 * compressed ones), for at most the samples an epoch gives a rank, and it
 * is not pre-faulted. Reading still delivers every sample intact, and a
 * substitute that would overflow a slot is passed over. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "le.h"
#include "dataset_internal.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("slab-test")

TestSuite(slab, .init = scratch_init, .fini = scratch_fini, .timeout = 180);

static uint64_t page(void)
{
    return (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Resident memory of this process, in bytes. */
static uint64_t rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &res), 2);
    fclose(f);
    return (uint64_t)res * page();
}

static uint8_t value_byte(uint64_t i, uint64_t j)
{
    return (uint8_t)(i * 11 + j / 64); /* compressible */
}

/* Packs a list dataset (data bytes + label) of n files, file i holding
 * len[i] bytes, into g_root/NAME. */
static void make_list_dataset(char *out, size_t cap, const char *name, uint64_t n,
                              const uint64_t *len, const char *compress)
{
    char in[4200], path[4400];
    snprintf(in, sizeof in, "%s/%s-in", g_root, name);
    snprintf(out, cap, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    snprintf(path, sizeof path, "%s/list.csv", in);
    FILE *list = fopen(path, "w");
    cr_assert_not_null(list);
    uint64_t most = 0;
    for (uint64_t i = 0; i < n; i++)
        most = len[i] > most ? len[i] : most;
    uint8_t *v = malloc(most ? most : 1);
    for (uint64_t i = 0; i < n; i++) {
        for (uint64_t j = 0; j < len[i]; j++)
            v[j] = value_byte(i, j);
        snprintf(path, sizeof path, "%s/f%06llu.bin", in, (unsigned long long)i);
        unit_write_file(path, v, len[i]);
        fprintf(list, "f%06llu.bin,%llu\n", (unsigned long long)i, (unsigned long long)i);
    }
    free(v);
    fclose(list);
    snprintf(path, sizeof path, "%s/list.csv", in);
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    o.align = 64;
    o.compress = compress;
    cr_assert_eq(sf_pack(NULL, path, out, &o), 0, "pack: %s", sf_last_error());
}

/* Packs n samples of img uint8 [item] + label int64 from .npy files. */
static void make_fixed_dataset(char *out, size_t cap, const char *name, uint64_t n, uint64_t item)
{
    char in[4200], path[4400];
    snprintf(in, sizeof in, "%s/%s-in", g_root, name);
    snprintf(out, cap, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    uint8_t *v = malloc(item);
    for (uint64_t i = 0; i < n; i++) {
        for (uint64_t j = 0; j < item; j++)
            v[j] = value_byte(i, j);
        int64_t label = (int64_t)i;
        uint64_t shape[1] = {item};
        snprintf(path, sizeof path, "%s/img_%llu.npy", in, (unsigned long long)i);
        unit_write_npy(path, SF_DTYPE_UINT8, 1, shape, v, item);
        snprintf(path, sizeof path, "%s/label_%llu.npy", in, (unsigned long long)i);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, 8);
    }
    free(v);
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    o.align = 64;
    cr_assert_eq(sf_pack_npy_dir(NULL, in, out, &o), 0, "pack: %s", sf_last_error());
}

/* Reads `epochs` epochs and checks every value against value_byte, with
 * the sample's number from the label field (= its input number). */
static uint64_t read_and_check(sf_reader *r, int epochs, const uint64_t *len)
{
    uint64_t seen = 0;
    for (int ep = 0; ep < epochs; ep++) {
        sf_reader_set_epoch(r, (uint64_t)ep);
        const sf_batch *b;
        int rc;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            const sf_batch_field *d = &b->fields[0], *lab = sf_batch_field_find(b, "label");
            cr_assert_not_null(lab);
            for (uint32_t k = 0; k < b->size; k++) {
                uint64_t i = sf_get_le64((const uint8_t *)lab->data + 8 * k);
                uint64_t o = d->offsets ? d->offsets[k] : k * d->item_size;
                uint64_t l = d->offsets ? d->offsets[k + 1] - o : d->item_size;
                cr_assert_eq(l, len ? len[i] : d->item_size, "sample %llu", (unsigned long long)i);
                const uint8_t *p = (const uint8_t *)d->data + o;
                for (uint64_t j = 0; j < l; j += 97)
                    cr_assert_eq(p[j], value_byte(i, j), "sample %llu byte %llu", (unsigned long long)i,
                                 (unsigned long long)j);
            }
            seen += b->size;
            sf_reader_release(r, b);
        }
        cr_assert_eq(rc, 0, "%s", sf_last_error());
    }
    return seen;
}

/* The bytes a batch of k samples can hold at most: the k longest values,
 * and the labels. */
static uint64_t batch_bytes(const uint64_t *len, uint64_t n, uint64_t k)
{
    uint64_t *s = malloc(n * sizeof *s), sum = 0;
    memcpy(s, len, n * sizeof *s);
    for (uint64_t a = 0; a < k && a < n; a++) { /* selection: n is small here */
        uint64_t m = a;
        for (uint64_t b = a + 1; b < n; b++)
            m = s[b] > s[m] ? b : m;
        uint64_t t = s[a];
        s[a] = s[m];
        s[m] = t;
        sum += s[a];
    }
    free(s);
    return sum + 8 * k;
}

/* An ImageFolder-like dataset: 300 values of 1-4 KiB and one of 12 MB. */
static void one_large_value(const char *compress)
{
    enum { n = 301 };
    uint64_t len[n];
    for (uint64_t i = 0; i < n; i++)
        len[i] = 1024 + i * 97 % 3072;
    len[150] = 12u << 20;
    char dir[4200];
    make_list_dataset(dir, sizeof dir, compress ? "large-z" : "large", n, len, compress);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 64;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.engine = SF_ENGINE_PREAD; /* io_uring would pin (fault in) what it registers */
    uint64_t before = rss();
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
    uint64_t opened = rss();
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    uint64_t one = batch_bytes(len, n, 64);
    cr_assert_lt(st.slab_bytes, 5 * one,
                 "slab %llu bytes for batches of at most %llu (4 slots): sized for 64 large values?",
                 (unsigned long long)st.slab_bytes, (unsigned long long)one);
    cr_assert_geq(st.slab_bytes, 4 * one, "every slot holds the largest batch");
    cr_assert_lt(opened - before, st.slab_bytes / 4,
                 "the slab is not pre-faulted at open (RSS grew %llu bytes, slab %llu)",
                 (unsigned long long)(opened - before), (unsigned long long)st.slab_bytes);
    cr_assert_eq(read_and_check(r, 2, len), 2 * n);
    sf_reader_close(r);
}

Test(slab, one_large_value_takes_one_place_per_slot_not_a_whole_batch)
{
    one_large_value(NULL);
}

Test(slab, compressed_values_are_sized_by_their_decompressed_lengths)
{
    one_large_value("data=zstd");
}

Test(slab, each_variable_length_field_gets_exactly_its_largest_sum_of_batch_size_values)
{
    enum { n = 301 };
    uint64_t len[n];
    for (uint64_t i = 0; i < n; i++)
        len[i] = 100 + i * 7919 % 5000;
    char dir[4200];
    make_list_dataset(dir, sizeof dir, "topk", n, len, NULL);
    /* Both ways of keeping the largest: a heap of the k largest (k <= n / 2),
     * or of the n - k smallest; and batches past the dataset's size. */
    static const uint32_t batches[] = {1, 64, 150, 151, 200, 300, 301, 1000};
    for (size_t c = 0; c < sizeof batches / sizeof batches[0]; c++) {
        uint64_t k = batches[c] < n ? batches[c] : n;
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = batches[c];
        o.prefetch = 2;
        sf_reader *r;
        cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        /* data: the k longest values; label: k int64. */
        uint64_t want = 2 * (sf_align_up(batch_bytes(len, n, k) - 8 * k, page()) +
                             sf_align_up(8 * k, page()));
        cr_assert_eq(st.slab_bytes, want, "batch %u: slab %llu, expected %llu", batches[c],
                     (unsigned long long)st.slab_bytes, (unsigned long long)want);
        sf_reader_close(r);
    }
}

/* Slot bytes of a fixed dataset (img of `item` bytes + label) for batches of k. */
static uint64_t fixed_slot(uint64_t item, uint64_t k)
{
    return sf_align_up(item * k, page()) + sf_align_up(8 * k, page());
}

Test(slab, a_batch_larger_than_the_dataset_is_sized_for_the_samples_there_are)
{
    char dir[4200];
    make_fixed_dataset(dir, sizeof dir, "small", 50, 4096);
    static const struct {
        uint32_t world, rank, batch, k;
    } cases[] = {{1, 0, 5000, 50}, {3, 1, 5000, 17 /* ceil(50 / 3) */}, {1, 0, 32, 32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = cases[c].batch;
        o.world_size = cases[c].world;
        o.rank = cases[c].rank;
        sf_reader *r;
        cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        /* batch 32 of 50: the normal case, exactly as before. */
        cr_assert_eq(st.slab_bytes, st.prefetch * fixed_slot(4096, cases[c].k),
                     "batch %u, world %u: slab %llu", cases[c].batch, cases[c].world,
                     (unsigned long long)st.slab_bytes);
        uint64_t per_epoch = sf_reader_samples_per_epoch(r);
        cr_assert_eq(read_and_check(r, 2, NULL), 2 * per_epoch);
        sf_reader_close(r);
    }
}

Test(slab, a_substitute_that_would_overflow_the_slot_is_passed_over)
{
    /* Room for the 2 longest values: 1000 + 10. Sample 0 is corrupt; its
     * next candidate, sample 1, is already in the batch, and twice its 1000
     * bytes do not fit, so sample 2 replaces it. */
    uint64_t len[4] = {10, 1000, 10, 10};
    char dir[4200];
    make_list_dataset(dir, sizeof dir, "subst", 4, len, NULL);
    sf_dataset *ds;
    cr_assert_eq(sf_dataset_open(&ds, dir), 0);
    sf_index_entry e;
    sf_dataset_entry(&e, ds, 0, 0);
    sf_dataset_close(ds);
    unit_flip_shard_byte(dir, 0, e.offset + 3);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 3; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 2;
        o.engine = engines[i];
        o.on_corrupt = SF_ON_CORRUPT_SKIP;
        sf_reader *r;
        cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
        const sf_batch *b;
        cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
        cr_assert_eq(b->substituted, 1);
        cr_assert_eq(b->source_ids[0], 2);
        cr_assert_eq(b->source_ids[1], 1);
        cr_assert_eq(b->fields[0].offsets[2], 1010);
        sf_reader_release(r, b);
        sf_reader_close(r);
    }
}
