/* Unit tests for the streaming reader (lib/reader/reader.c, slab.c, engine_*.c):
 * coverage and order per epoch, ranks, resume, byte-exact delivery through
 * every engine (buffered and O_DIRECT), corrupt records, slot accounting,
 * memory stability, and io_uring without registered buffers.
 *
 * Each test builds its small datasets itself (.npy files written here, then
 * sf_pack_npy_dir) under the current directory, which ctest sets to the build
 * tree: a real disk, where O_DIRECT works (tmpfs would refuse it). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtype.h"
#include "npy.h"
#include "dataset_internal.h"
#include "reader_internal.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

/* ---- test datasets ---------------------------------------------------------- */

static char g_root[4096]; /* this test's scratch directory, removed at the end */

static void scratch_fini(void)
{
    if (g_root[0])
        unit_rm_tree(g_root);
}

static void scratch_init(void)
{
    /* Sticky and world-writable, like /tmp: the memlock test runs as another
     * uid and must still be able to remove its own scratch directory. */
    if (mkdir("reader-scratch", 01777) == 0 || errno == EEXIST)
        chmod("reader-scratch", 01777);
    snprintf(g_root, sizeof g_root, "reader-scratch/reader-test-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root), "mkdtemp: %s", strerror(errno));
}

TestSuite(reader, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

/* The deterministic content of sample `k`'s image: byte j. */
static uint8_t img_byte(uint64_t k, uint64_t j)
{
    return (uint8_t)(k * 131u + j * 7u + (j >> 8) * 13u + 1u);
}

static int64_t label_of(uint64_t k)
{
    return (int64_t)(k * 3 + 1);
}

typedef struct test_ds {
    char dir[4200];
    uint64_t n;
    uint64_t img_bytes;
} test_ds;

/* n samples: img uint8 [img_bytes] (fixed), label int64 scalar (inline). */
static test_ds make_ds(const char *name, uint64_t n, uint64_t img_bytes, uint32_t align)
{
    test_ds d;
    memset(&d, 0, sizeof d);
    d.n = n;
    d.img_bytes = img_bytes;
    char in[4200];
    snprintf(in, sizeof in, "%s/%s-npy", g_root, name);
    snprintf(d.dir, sizeof d.dir, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(in, 0755), 0);
    uint8_t *img = malloc(img_bytes);
    cr_assert_not_null(img);
    for (uint64_t k = 0; k < n; k++) {
        char path[4300];
        for (uint64_t j = 0; j < img_bytes; j++)
            img[j] = img_byte(k, j);
        snprintf(path, sizeof path, "%s/img_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_UINT8, 1, &img_bytes, img, img_bytes);
        int64_t label = label_of(k);
        snprintf(path, sizeof path, "%s/label_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
    free(img);
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.align = align;
    po.jobs = 2;
    po.shard_size = 64 * 1024; /* several shards even for small sets */
    sf_pack_result res;
    int rc = sf_pack_npy_dir(&res, in, d.dir, &po);
    cr_assert_eq(rc, 0, "pack: %s", sf_last_error());
    cr_assert_eq(res.samples, n);
    return d;
}

/* The key number of each sample id (the packer orders keys naturally, but the
 * test does not rely on it). */
static uint64_t *key_numbers(const test_ds *d)
{
    sf_dataset *ds;
    cr_assert_eq(sf_dataset_open(&ds, d->dir), 0, "%s", sf_last_error());
    uint64_t *k = malloc(d->n * sizeof *k);
    for (uint64_t i = 0; i < d->n; i++) {
        const char *key;
        size_t len;
        cr_assert_eq(sf_dataset_key(&key, &len, ds, i), 0);
        char buf[64];
        cr_assert_lt(len, sizeof buf);
        memcpy(buf, key, len);
        buf[len] = 0;
        k[i] = strtoull(buf, NULL, 10);
    }
    sf_dataset_close(ds);
    return k;
}

static sf_reader *open_reader(const test_ds *d, const sf_reader_opts *o)
{
    sf_reader *r = NULL;
    int rc = sf_reader_open(&r, d->dir, o);
    /* The kernel tears io_uring rings down asynchronously: right after a
     * close, the rings and registered buffers of the previous reader may
     * still count against a small RLIMIT_MEMLOCK. Give it a moment. */
    for (int tries = 0; rc == -ENOMEM && strstr(sf_last_error(), "io_uring_queue_init") && tries < 100;
         tries++) {
        usleep(20000);
        rc = sf_reader_open(&r, d->dir, o);
    }
    cr_assert_eq(rc, 0, "sf_reader_open: %s (%s)", sf_strerror(rc), sf_last_error());
    cr_assert_not_null(r);
    return r;
}

/* Checks every byte of a batch against the source arrays. */
static void check_batch(const test_ds *d, const uint64_t *keys, const sf_batch *b)
{
    const sf_batch_field *img = sf_batch_field_find(b, "img");
    const sf_batch_field *lab = sf_batch_field_find(b, "label");
    cr_assert_not_null(img);
    cr_assert_not_null(lab);
    cr_assert_eq(img->storage, SF_STORAGE_FIXED);
    cr_assert_eq(lab->storage, SF_STORAGE_INLINE);
    cr_assert_eq(img->item_size, d->img_bytes);
    cr_assert_eq(img->bytes, b->size * d->img_bytes);
    cr_assert_eq(((uintptr_t)img->data) % 4096, 0, "field arrays are page-aligned");
    cr_assert_eq(((uintptr_t)lab->data) % 4096, 0, "field arrays are page-aligned");
    for (uint32_t i = 0; i < b->size; i++) {
        uint64_t id = b->source_ids[i];
        cr_assert_lt(id, d->n);
        uint64_t k = keys[id];
        const uint8_t *p = (const uint8_t *)img->data + i * d->img_bytes;
        for (uint64_t j = 0; j < d->img_bytes; j++)
            if (p[j] != img_byte(k, j))
                cr_assert_fail("batch %llu sample %u (id %llu) byte %llu: %u, expected %u",
                               (unsigned long long)b->index, i, (unsigned long long)id,
                               (unsigned long long)j, p[j], img_byte(k, j));
        int64_t label;
        memcpy(&label, (const uint8_t *)lab->data + i * 8, 8);
        cr_assert_eq(label, label_of(k), "label of id %llu", (unsigned long long)id);
    }
}

/* Reads the rest of the current epoch; appends ids to out (if non-NULL) and
 * returns the number of batches. Checks bytes when keys != NULL. */
static uint64_t read_epoch(sf_reader *r, const test_ds *d, const uint64_t *keys, uint64_t *out,
                           uint64_t *nout)
{
    const sf_batch *b;
    uint64_t batches = 0;
    int rc;
    while ((rc = sf_reader_next(&b, r)) == 0 && b) {
        if (keys)
            check_batch(d, keys, b);
        for (uint32_t i = 0; i < b->size && out; i++)
            out[(*nout)++] = b->ids[i];
        cr_assert_eq(sf_reader_release(r, b), 0);
        batches++;
    }
    cr_assert_eq(rc, 0, "sf_reader_next: %s (%s)", sf_strerror(rc), sf_last_error());
    return batches;
}

/* ---- coverage, order ------------------------------------------------------------ */

Test(reader, every_sample_once_per_epoch_and_bytes_match)
{
    test_ds d = make_ds("a", 103, 300, 64);
    uint64_t *keys = key_numbers(&d);
    static const int modes[] = {SF_READER_SHUFFLE_NONE, SF_READER_SHUFFLE_GLOBAL, SF_READER_SHUFFLE_BLOCK};
    for (size_t m = 0; m < 3; m++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 8;
        o.shuffle = modes[m];
        o.block_size = 4;
        o.seed = 7;
        sf_reader *r = open_reader(&d, &o);
        cr_assert_eq(sf_reader_num_batches(r), 13); /* ceil(103 / 8), short last batch */
        for (uint64_t e = 0; e < 3; e++) {
            cr_assert_eq(sf_reader_set_epoch(r, e), 0);
            uint64_t ids[103], n = 0;
            cr_assert_eq(read_epoch(r, &d, keys, ids, &n), 13);
            cr_assert_eq(n, 103);
            uint8_t seen[103] = {0};
            for (uint64_t i = 0; i < n; i++) {
                cr_assert_lt(ids[i], 103);
                cr_assert_eq(seen[ids[i]]++, 0, "id %llu twice", (unsigned long long)ids[i]);
            }
            if (modes[m] == SF_READER_SHUFFLE_NONE)
                for (uint64_t i = 0; i < n; i++)
                    cr_assert_eq(ids[i], i);
        }
        sf_reader_statistics st;
        cr_assert_eq(sf_reader_stats(&st, r), 0);
        cr_assert_eq(st.samples, 3 * 103);
        cr_assert_eq(st.batches, 3 * 13);
        cr_assert_geq(st.bytes_read, 3 * 103 * 300);
        sf_reader_close(r);
    }
    free(keys);
}

Test(reader, same_seed_same_order_epochs_differ)
{
    test_ds d = make_ds("a", 200, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 16;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.seed = 1234;
    uint64_t a[3][200], b[3][200], na, nb;
    sf_reader *r1 = open_reader(&d, &o);
    o.engine = SF_ENGINE_PREAD; /* the order does not depend on the engine either */
    sf_reader *r2 = open_reader(&d, &o);
    for (int e = 0; e < 3; e++) {
        na = nb = 0;
        sf_reader_set_epoch(r1, (uint64_t)e);
        sf_reader_set_epoch(r2, (uint64_t)e);
        read_epoch(r1, &d, NULL, a[e], &na);
        read_epoch(r2, &d, NULL, b[e], &nb);
        cr_assert_eq(na, 200);
        cr_assert_eq(nb, 200);
        cr_assert_arr_eq(a[e], b[e], sizeof a[e], "epoch %d differs between two readers", e);
    }
    cr_assert(memcmp(a[0], a[1], sizeof a[0]) != 0, "epochs 0 and 1 have the same order");
    cr_assert(memcmp(a[1], a[2], sizeof a[0]) != 0, "epochs 1 and 2 have the same order");
    sf_reader_close(r1);
    sf_reader_close(r2);
}

/* The next epoch's order is built ahead, a slice per batch, by the I/O
 * threads (schedule.c): every crossing takes it from the sampler's spare in
 * O(1), none builds it (only create did, for epoch 0), and the orders built
 * in slices are the ones a sampler builds in one go. 12,000 samples in
 * batches of 4: each order is about 6 slices, on both shuffles and every
 * engine (each claims through reader_claim). */
Test(reader, each_next_order_is_built_ahead_by_the_io_threads)
{
    enum { N = 12000, B = 4, EPOCHS = 4 };
    test_ds d = make_ds("ahead", N, 8, 64);
    static const int shuffles[] = {SF_READER_SHUFFLE_GLOBAL, SF_READER_SHUFFLE_BLOCK};
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    uint64_t *got = malloc(N * sizeof *got), *want = malloc(B * sizeof *want);
    cr_assert(got && want);
    for (size_t m = 0; m < 2; m++)
        for (size_t e = 0; e < 3; e++) {
            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.batch_size = B;
            o.shuffle = shuffles[m];
            o.engine = engines[e];
            o.seed = 77;
            sf_reader *r = open_reader(&d, &o);
            cr_assert_gt(reader_sampler_build_cost(r->sampler), 4 * 4096,
                         "the build must take several slices for this test to show anything");
            reader_sampler_config c = {.n = N, .seed = 77, .batch_size = B, .world_size = 1,
                                       .shuffle = shuffles[m] == SF_READER_SHUFFLE_GLOBAL
                                                      ? SF_SHUFFLE_GLOBAL : SF_SHUFFLE_BLOCK};
            reader_sampler *one_go;
            cr_assert_eq(reader_sampler_create(&one_go, &c), 0, "%s", sf_last_error());
            for (uint64_t ep = 0; ep < EPOCHS; ep++) {
                uint64_t n = 0;
                cr_assert_eq(read_epoch(r, &d, NULL, got, &n), N / B);
                cr_assert_eq(n, N);
                cr_assert_eq(reader_sampler_set_epoch(one_go, ep), 0);
                for (uint64_t b = 0; b < N / B; b++) {
                    cr_assert_eq(reader_sampler_batch(one_go, b, want), B);
                    cr_assert_arr_eq(got + b * B, want, B * sizeof *want,
                                     "shuffle %zu engine %zu epoch %llu batch %llu: not the order "
                                     "built in one go", m, e, (unsigned long long)ep,
                                     (unsigned long long)b);
                }
            }
            /* Epochs 1-3 and the read-ahead into 4 crossed without a build. */
            cr_assert_eq(reader_sampler_set_epoch_builds(r->sampler), 1,
                         "shuffle %zu engine %zu: %llu orders built at a crossing (1 is create's)",
                         m, e, (unsigned long long)reader_sampler_set_epoch_builds(r->sampler));
            reader_sampler_free(one_go);
            sf_reader_close(r);
        }
    free(got);
    free(want);
}

Test(reader, end_of_epoch_then_next_epoch_without_set_epoch)
{
    test_ds d = make_ds("a", 20, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    sf_reader *r = open_reader(&d, &o);
    const sf_batch *b;
    for (uint64_t e = 0; e < 3; e++) {
        for (uint64_t i = 0; i < 3; i++) {
            cr_assert_eq(sf_reader_next(&b, r), 0);
            cr_assert_not_null(b, "epoch %llu batch %llu", (unsigned long long)e, (unsigned long long)i);
            cr_assert_eq(b->epoch, e);
            cr_assert_eq(b->index, i);
            cr_assert_eq(b->size, i < 2 ? 8u : 4u);
            sf_reader_release(r, b);
        }
        cr_assert_eq(sf_reader_next(&b, r), 0);
        cr_assert_null(b, "end of epoch %llu", (unsigned long long)e);
        sf_resume_state s;
        sf_reader_state(&s, r);
        cr_assert_eq(s.epoch, e + 1);
        cr_assert_eq(s.next_batch, 0);
    }
    sf_reader_close(r);
}

/* ---- ranks ---------------------------------------------------------------------- */

Test(reader, world_sizes_1_to_4_equal_batches_and_cover_the_dataset)
{
    const uint64_t n = 101;
    test_ds d = make_ds("a", n, 64, 64);
    for (uint32_t w = 1; w <= 4; w++) {
        for (int uneven = 0; uneven < 2; uneven++) {
            uint64_t count[101] = {0}, total = 0, nb0 = 0;
            for (uint32_t rank = 0; rank < w; rank++) {
                sf_reader_opts o = SF_READER_OPTS_INIT;
                o.batch_size = 6;
                o.shuffle = SF_READER_SHUFFLE_GLOBAL;
                o.seed = 99;
                o.world_size = w;
                o.rank = rank;
                o.uneven = uneven;
                sf_reader *r = open_reader(&d, &o);
                sf_reader_set_epoch(r, 2);
                uint64_t ids[200], k = 0;
                uint64_t nb = read_epoch(r, &d, NULL, ids, &k);
                cr_assert_eq(nb, sf_reader_num_batches(r));
                cr_assert_eq(k, sf_reader_samples_per_epoch(r));
                if (rank == 0)
                    nb0 = nb;
                cr_assert_eq(nb, nb0, "world %u: rank %u has %llu batches, rank 0 %llu", w, rank,
                             (unsigned long long)nb, (unsigned long long)nb0);
                for (uint64_t i = 0; i < k; i++)
                    count[ids[i]]++;
                total += k;
                sf_reader_close(r);
            }
            uint64_t G = 6 * w, R = n % G, c = w == 1 ? R : (uneven ? R / w : (R + w - 1) / w);
            uint64_t expect = n / G * G + (w == 1 ? R : c * w);
            cr_assert_eq(total, expect, "world %u uneven %d: %llu samples", w, uneven,
                         (unsigned long long)total);
            uint64_t missing = 0, extra = 0;
            for (uint64_t i = 0; i < n; i++) {
                if (count[i] == 0)
                    missing++;
                if (count[i] > 1)
                    extra += count[i] - 1;
            }
            if (uneven == SF_READER_UNEVEN_PAD) {
                cr_assert_eq(missing, 0, "world %u: %llu samples never read", w, (unsigned long long)missing);
                cr_assert_eq(extra, total - n, "padding is the only repetition");
            } else {
                cr_assert_eq(extra, 0);
                cr_assert_eq(missing, n - total);
            }
        }
    }
}

/* ---- resume ---------------------------------------------------------------------- */

typedef struct pos {
    uint64_t epoch, index, first_id;
} pos;

/* Reads batches until `epochs` epochs have ended; records each batch. */
static uint64_t run_until(sf_reader *r, uint64_t last_epoch, pos *out, uint64_t max)
{
    uint64_t k = 0;
    for (;;) {
        sf_resume_state s;
        sf_reader_state(&s, r);
        if (s.epoch > last_epoch)
            return k;
        const sf_batch *b;
        int rc = sf_reader_next(&b, r);
        cr_assert_eq(rc, 0, "%s", sf_last_error());
        if (!b)
            continue;
        cr_assert_lt(k, max);
        out[k++] = (pos){b->epoch, b->index, b->ids[0] * 1000003u + b->ids[b->size - 1]};
        sf_reader_release(r, b);
    }
}

Test(reader, resume_after_k_batches_equals_uninterrupted_run)
{
    test_ds d = make_ds("a", 90, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 7;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.seed = 5;
    o.world_size = 2;
    o.rank = 1;
    sf_reader *r = open_reader(&d, &o);
    uint64_t nb = sf_reader_num_batches(r);
    cr_assert_eq(nb, 7); /* ceil(90 / 14), padded */
    pos all[64];
    uint64_t total = run_until(r, 2, all, 64);
    cr_assert_eq(total, 3 * nb);
    sf_reader_close(r);

    /* Interrupt after k batches (k = 0 .. 3 epochs, boundaries included),
     * restore in a new reader, compare the rest. */
    for (uint64_t k = 0; k <= total; k += (k % 3 == 0 ? 1 : 2)) {
        r = open_reader(&d, &o);
        uint64_t got = 0;
        while (got < k) {
            const sf_batch *b;
            cr_assert_eq(sf_reader_next(&b, r), 0);
            if (!b)
                continue;
            cr_assert_eq(b->ids[0] * 1000003u + b->ids[b->size - 1], all[got].first_id);
            got++;
            sf_reader_release(r, b);
        }
        sf_resume_state s;
        cr_assert_eq(sf_reader_state(&s, r), 0);
        sf_reader_close(r);
        cr_assert_eq(s.epoch * nb + s.next_batch, k, "state after %llu batches",
                     (unsigned long long)k);

        r = open_reader(&d, &o);
        cr_assert_eq(sf_reader_restore(r, &s), 0);
        pos rest[64];
        uint64_t m = run_until(r, 2, rest, 64);
        sf_reader_close(r);
        cr_assert_eq(k + m, total, "k=%llu: %llu batches after resume", (unsigned long long)k,
                     (unsigned long long)m);
        for (uint64_t i = 0; i < m; i++) {
            cr_assert_eq(rest[i].epoch, all[k + i].epoch);
            cr_assert_eq(rest[i].index, all[k + i].index);
            cr_assert_eq(rest[i].first_id, all[k + i].first_id, "k=%llu batch %llu differs",
                         (unsigned long long)k, (unsigned long long)i);
        }
    }
}

/* The documented loop (include/shardfeed/reader.h, README) calls set_epoch
 * at the top of every epoch. After a restore, the loop starts at the saved
 * epoch: its set_epoch must keep the restored position, not replay the
 * epoch, and the following epochs start at batch 0 as usual. */
static uint64_t documented_loop(sf_reader *r, uint64_t from_epoch, uint64_t epochs, pos *out,
                                uint64_t max)
{
    uint64_t k = 0;
    for (uint64_t epoch = from_epoch; epoch < epochs; epoch++) {
        cr_assert_eq(sf_reader_set_epoch(r, epoch), 0);
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b) {
            cr_assert_lt(k, max);
            cr_assert_eq(b->epoch, epoch);
            out[k++] = (pos){b->epoch, b->index, b->ids[0] * 1000003u + b->ids[b->size - 1]};
            sf_reader_release(r, b);
        }
    }
    return k;
}

Test(reader, resume_with_the_documented_loop_replays_nothing)
{
    test_ds d = make_ds("a", 90, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 7;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.seed = 9;
    sf_reader *r = open_reader(&d, &o);
    uint64_t nb = sf_reader_num_batches(r);
    pos all[64];
    uint64_t total = documented_loop(r, 0, 3, all, 64);
    cr_assert_eq(total, 3 * nb);
    sf_reader_close(r);

    for (uint64_t k = 1; k < total; k += 4) {
        /* Interrupt after k batches, inside the documented loop. */
        r = open_reader(&d, &o);
        uint64_t epoch = k / nb;
        for (uint64_t e = 0; e <= epoch; e++) {
            cr_assert_eq(sf_reader_set_epoch(r, e), 0);
            uint64_t upto = e < epoch ? nb : k % nb;
            for (uint64_t i = 0; i < upto; i++) {
                const sf_batch *b;
                cr_assert_eq(sf_reader_next(&b, r), 0);
                cr_assert_not_null(b);
                sf_reader_release(r, b);
            }
        }
        sf_resume_state s;
        cr_assert_eq(sf_reader_state(&s, r), 0);
        sf_reader_close(r);

        r = open_reader(&d, &o);
        cr_assert_eq(sf_reader_restore(r, &s), 0);
        pos rest[64];
        uint64_t m = documented_loop(r, s.epoch, 3, rest, 64);
        sf_reader_close(r);
        cr_assert_eq(k + m, total, "k=%llu: %llu batches after resume (an epoch replayed?)",
                     (unsigned long long)k, (unsigned long long)m);
        for (uint64_t i = 0; i < m; i++)
            cr_assert_eq(rest[i].first_id, all[k + i].first_id, "k=%llu batch %llu differs",
                         (unsigned long long)k, (unsigned long long)i);
    }
}

/* After a restore, set_epoch of another epoch still moves to its start, and
 * a second set_epoch of the restored epoch (once batches were delivered)
 * restarts it as documented. */
Test(reader, set_epoch_after_restore_of_another_epoch_starts_it)
{
    test_ds d = make_ds("a", 90, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 7;
    sf_reader *r = open_reader(&d, &o);
    sf_resume_state s = {.epoch = 1, .next_batch = 3}, now;
    cr_assert_eq(sf_reader_restore(r, &s), 0);
    cr_assert_eq(sf_reader_set_epoch(r, 2), 0);
    cr_assert_eq(sf_reader_state(&now, r), 0);
    cr_assert_eq(now.epoch, 2);
    cr_assert_eq(now.next_batch, 0);

    cr_assert_eq(sf_reader_restore(r, &s), 0);
    cr_assert_eq(sf_reader_set_epoch(r, 1), 0);
    cr_assert_eq(sf_reader_state(&now, r), 0);
    cr_assert_eq(now.next_batch, 3, "the restored position is kept");
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_eq(b->index, 3);
    sf_reader_release(r, b);
    cr_assert_eq(sf_reader_set_epoch(r, 1), 0);
    cr_assert_eq(sf_reader_state(&now, r), 0);
    cr_assert_eq(now.next_batch, 0, "set_epoch after delivery restarts the epoch");
    sf_reader_close(r);
}

/* A state carries the digest of what decides its batches: restoring it into a
 * reader of other order options or another dataset was taken silently, and
 * resumed at that batch number in other batches (skipping or repeating
 * samples). The rank is not part of it; order_id 0 is taken unchecked. */
Test(reader, a_state_of_other_order_options_or_another_dataset_is_refused)
{
    test_ds a = make_ds("a", 90, 64, 64), b = make_ds("b", 90, 65, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 7;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.seed = 5;
    o.world_size = 2;
    sf_reader *r = open_reader(&a, &o);
    const sf_batch *batch;
    cr_assert_eq(sf_reader_next(&batch, r), 0);
    sf_reader_release(r, batch);
    sf_resume_state s;
    cr_assert_eq(sf_reader_state(&s, r), 0);
    cr_assert_neq(s.order_id, 0);
    sf_reader_close(r);

    sf_reader_opts other[6];
    for (int i = 0; i < 6; i++)
        other[i] = o;
    other[0].batch_size = 6;
    other[1].seed = 6;
    other[2].shuffle = SF_READER_SHUFFLE_NONE;
    other[3].world_size = 3;
    other[4].drop_last = 1;
    other[5].rank = 1; /* the same batches on another rank: accepted */
    for (int i = 0; i < 6; i++) {
        r = open_reader(&a, &other[i]);
        int rc = sf_reader_restore(r, &s);
        if (i == 5) {
            cr_assert_eq(rc, 0, "%s", sf_last_error());
        } else {
            cr_assert_eq(rc, SF_E_INVALID, "options %d", i);
            cr_assert(strstr(sf_last_error(), "another dataset or other order options"), "%s", sf_last_error());
        }
        sf_reader_close(r);
    }
    r = open_reader(&b, &o); /* another dataset of as many samples */
    cr_assert_eq(sf_reader_restore(r, &s), SF_E_INVALID);
    sf_resume_state unchecked = {.epoch = s.epoch, .next_batch = s.next_batch};
    cr_assert_eq(sf_reader_restore(r, &unchecked), 0, "%s", sf_last_error());
    sf_reader_close(r);
    r = open_reader(&a, &o); /* its own options: resumes */
    cr_assert_eq(sf_reader_restore(r, &s), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_next(&batch, r), 0);
    cr_assert_eq(batch->index, 1);
    sf_reader_release(r, batch);
    sf_reader_close(r);
}

Test(reader, set_epoch_mid_epoch_discards_read_ahead_keeps_held_batches)
{
    test_ds d = make_ds("a", 120, 500, 64);
    uint64_t *keys = key_numbers(&d);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 10;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.prefetch = 3;
    sf_reader *r = open_reader(&d, &o);
    const sf_batch *held, *b;
    cr_assert_eq(sf_reader_next(&held, r), 0);
    cr_assert_not_null(held);
    uint64_t first = held->ids[0];
    cr_assert_eq(sf_reader_next(&b, r), 0);
    sf_reader_release(r, b);
    cr_assert_eq(sf_reader_set_epoch(r, 4), 0);
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_eq(b->epoch, 4);
    cr_assert_eq(b->index, 0);
    check_batch(&d, keys, b);
    check_batch(&d, keys, held); /* untouched by the reposition */
    cr_assert_eq(held->ids[0], first);
    uint64_t e4 = b->ids[0];
    sf_reader_release(r, b);
    sf_reader_release(r, held);
    sf_reader_close(r);

    r = open_reader(&d, &o);
    sf_reader_set_epoch(r, 4);
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_eq(b->ids[0], e4);
    sf_reader_close(r); /* with a batch held: close frees it */
    free(keys);
}

/* ---- engines, O_DIRECT --------------------------------------------------------------- */

static void read_all_checked(const test_ds *d, const uint64_t *keys, sf_reader_opts *o,
                             const char *what)
{
    sf_reader *r = open_reader(d, o);
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    for (uint64_t e = 0; e < 2; e++) {
        sf_reader_set_epoch(r, e);
        uint64_t ids[600], n = 0;
        read_epoch(r, d, keys, ids, &n);
        cr_assert_eq(n, d->n, "%s", what);
    }
    sf_reader_close(r);
}

/* Evicts a file's pages from the page cache (clean ones: fsync first).
 * Returns 0 when mincore then shows the first page out. */
static int evict(const char *path)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    unsigned char v = 1;
    mincore(map, 1, &v);
    munmap(map, (size_t)st.st_size);
    close(fd);
    return v & 1 ? -1 : 0;
}

Test(reader, auto_reads_small_records_with_mmap_when_warm_and_uring_when_cold)
{
    test_ds d = make_ds("autoeng", 64, 1024, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    sf_reader *r = open_reader(&d, &o);
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_str_eq(st.engine, "mmap", "small records in the page cache");
    sf_reader_close(r);
    char path[4300];
    snprintf(path, sizeof path, "%s/shard-000000.sfs", d.dir);
    if (evict(path) != 0)
        cr_skip_test("this file system keeps the shard in memory (tmpfs?)");
    r = open_reader(&d, &o);
    sf_reader_stats(&st, r);
    /* uring, or pread where io_uring is blocked. */
    cr_assert(strcmp(st.engine, "uring") == 0 || strcmp(st.engine, "pread") == 0,
              "cold small records: %s", st.engine);
    sf_reader_close(r);
    uint64_t *keys = key_numbers(&d);
    read_all_checked(&d, keys, &o, "auto, cold");
    free(keys);
}

Test(reader, every_engine_buffered_and_direct_delivers_the_source_bytes)
{
    test_ds d = make_ds("dio", 150, 8192, 4096);
    uint64_t *keys = key_numbers(&d);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP, SF_ENGINE_AUTO};
    /* auto: small records (8 KiB) just written, so in the page cache: mmap. */
    static const char *names[] = {"uring", "pread", "mmap", "mmap"};
    for (size_t i = 0; i < 4; i++) {
        for (uint32_t threads = 1; threads <= 3; threads += 2) {
            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.batch_size = 16;
            o.shuffle = SF_READER_SHUFFLE_GLOBAL;
            o.engine = engines[i];
            o.io_threads = threads;
            o.queue_depth = threads == 1 ? 3 : 64;
            sf_reader *r = open_reader(&d, &o);
            sf_reader_statistics st;
            sf_reader_stats(&st, r);
            cr_assert_str_eq(st.engine, names[i]);
            cr_assert_eq(st.direct, 0);
            cr_assert_eq(st.io_threads, threads);
            struct rlimit ml;
            if (engines[i] == SF_ENGINE_URING && (geteuid() == 0 ||
                (getrlimit(RLIMIT_MEMLOCK, &ml) == 0 && ml.rlim_cur == RLIM_INFINITY)))
                cr_assert_eq(st.registered_bytes, st.slab_bytes, "no memlock limit: the whole slab registers");
            sf_reader_close(r);
            read_all_checked(&d, keys, &o, names[i]);
        }
    }
    /* O_DIRECT with uring and pread, if this file system supports it. */
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/shard-000000.sfs", d.dir);
    int fd = open(probe, O_RDONLY | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
        free(keys);
        cr_skip_test("O_DIRECT is not supported on this file system");
    }
    cr_assert_geq(fd, 0, "%s: %s", probe, strerror(errno));
    close(fd);
    for (size_t i = 0; i < 2; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 16;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        o.engine = engines[i];
        o.direct = SF_DIRECT_ON;
        sf_reader *r = open_reader(&d, &o);
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_eq(st.direct, 1, "%s: O_DIRECT", names[i]);
        sf_reader_close(r);
        read_all_checked(&d, keys, &o, names[i]);
    }
    free(keys);
}

Test(reader, direct_on_refuses_layouts_that_do_not_allow_it)
{
    test_ds a = make_ds("small", 10, 100, 64);    /* 64-byte alignment */
    test_ds b = make_ds("odd", 10, 5000, 4096);   /* aligned records, 5000-byte field */
    test_ds c = make_ds("good", 10, 4096, 4096);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.direct = SF_DIRECT_ON;
    sf_reader *r = NULL;
    cr_assert_eq(sf_reader_open(&r, a.dir, &o), SF_E_UNSUPPORTED);
    cr_assert_null(r);
    cr_assert(strstr(sf_last_error(), "align") != NULL, "%s", sf_last_error());
    cr_assert_eq(sf_reader_open(&r, b.dir, &o), SF_E_UNSUPPORTED);
    cr_assert(strstr(sf_last_error(), "'img'") != NULL, "%s", sf_last_error());
    o.engine = SF_ENGINE_MMAP;
    cr_assert_eq(sf_reader_open(&r, c.dir, &o), SF_E_UNSUPPORTED);
    cr_assert(strstr(sf_last_error(), "mmap") != NULL, "%s", sf_last_error());
}

/* direct = auto: O_DIRECT only for a dataset larger than the memory the page
 * cache may use ($SHARDFEED_PAGE_CACHE_BYTES stands in for a machine with
 * less memory than the dataset) whose records are 64 KiB or more and whose
 * layout allows it; buffered otherwise, never an error; the stats say why. */
static void expect_direct(const test_ds *d, sf_reader_opts *o, int direct, const char *why)
{
    sf_reader *r = open_reader(d, o);
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_eq(st.direct, direct, "%s: direct %d (%s)", d->dir, st.direct, st.direct_reason);
    cr_assert(strstr(st.direct_reason, why) != NULL, "%s: '%s' lacks '%s'", d->dir,
              st.direct_reason, why);
    sf_reader_close(r);
}

Test(reader, direct_auto_bypasses_the_page_cache_only_for_data_larger_than_memory)
{
    test_ds big = make_ds("large", 12, 65536, 4096);   /* 64 KiB records, aligned */
    test_ds small = make_ds("small", 12, 8192, 4096);  /* aligned, but 8 KiB records */
    test_ds odd = make_ds("odd", 12, 65537, 4096);     /* large, not a multiple of 4096 */
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 4;
    cr_assert_eq(o.direct, SF_DIRECT_AUTO, "auto is the default");
    unsetenv("SHARDFEED_PAGE_CACHE_BYTES");
    expect_direct(&big, &o, 0, "fits in memory");
    cr_assert_eq(setenv("SHARDFEED_PAGE_CACHE_BYTES", "65536", 1), 0);
    expect_direct(&small, &o, 0, "under 64 KiB");
    expect_direct(&odd, &o, 0, "does not allow");
    o.direct = SF_DIRECT_OFF;
    expect_direct(&big, &o, 0, "off");
    o.direct = SF_DIRECT_AUTO;
    o.engine = SF_ENGINE_MMAP; /* reads through the page cache */
    expect_direct(&big, &o, 0, "does not allow");
    o.engine = SF_ENGINE_AUTO;
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/shard-000000.sfs", big.dir);
    int fd = open(probe, O_RDONLY | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
        expect_direct(&big, &o, 0, "refused");
        unsetenv("SHARDFEED_PAGE_CACHE_BYTES");
        cr_skip_test("O_DIRECT is not supported on this file system");
    }
    cr_assert_geq(fd, 0, "%s: %s", probe, strerror(errno));
    close(fd);
    expect_direct(&big, &o, 1, "larger than the memory");
    uint64_t *keys = key_numbers(&big);
    read_all_checked(&big, keys, &o, "auto, O_DIRECT");
    free(keys);
    unsetenv("SHARDFEED_PAGE_CACHE_BYTES");
}

/* ---- corrupt records -------------------------------------------------------------------- */

/* Flips one payload byte of sample `id` in its shard file. */
static void corrupt_sample(const test_ds *d, uint64_t id, uint64_t byte)
{
    sf_dataset *ds;
    cr_assert_eq(sf_dataset_open(&ds, d->dir), 0);
    uint64_t local, shard = sf_dataset_locate(ds, id, &local);
    sf_index_entry e;
    sf_dataset_entry(&e, ds, shard, local);
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", d->dir, ds->shards[shard].name);
    sf_dataset_close(ds);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t v;
    cr_assert_eq(pread(fd, &v, 1, (off_t)(e.offset + byte)), 1);
    v ^= 0x5a;
    cr_assert_eq(pwrite(fd, &v, 1, (off_t)(e.offset + byte)), 1);
    close(fd);
}

Test(reader, corrupt_record_is_an_error_naming_file_record_offset)
{
    test_ds d = make_ds("a", 64, 256, 64);
    corrupt_sample(&d, 37, 100);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 3; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 8;
        o.engine = engines[i];
        sf_reader *r = open_reader(&d, &o);
        const sf_batch *b;
        int rc;
        uint64_t delivered = 0;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            delivered++;
            sf_reader_release(r, b);
        }
        cr_assert_eq(rc, SF_E_CHECKSUM, "engine %zu: %d %s", i, rc, sf_last_error());
        cr_assert_eq(delivered, 4, "batches before the corrupt one");
        const char *msg = sf_last_error();
        cr_assert(strstr(msg, "shard-") && strstr(msg, ".sfs") && strstr(msg, "record") &&
                      strstr(msg, "sample 37") && strstr(msg, "byte") && strstr(msg, "checksum"),
                  "message: %s", msg);
        /* The position did not move: the same batch fails again. */
        sf_resume_state s;
        sf_reader_state(&s, r);
        cr_assert_eq(s.next_batch, 4);
        cr_assert_eq(sf_reader_next(&b, r), SF_E_CHECKSUM);
        /* Without verification the bytes come through as stored. */
        sf_reader_close(r);
        o.verify = SF_VERIFY_OFF;
        r = open_reader(&d, &o);
        uint64_t n = 0;
        cr_assert_eq(read_epoch(r, &d, NULL, NULL, &n), 8);
        sf_reader_close(r);
    }
}

Test(reader, corrupt_record_is_substituted_and_counted_under_skip)
{
    test_ds d = make_ds("a", 64, 256, 64);
    uint64_t *keys = key_numbers(&d);
    corrupt_sample(&d, 37, 0);
    corrupt_sample(&d, 50, 255);
    corrupt_sample(&d, 51, 17); /* 50 and 51 corrupt: 50 becomes 52 */
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 3; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 8;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        o.engine = engines[i];
        o.on_corrupt = SF_ON_CORRUPT_SKIP;
        sf_reader *r = open_reader(&d, &o);
        for (uint64_t e = 0; e < 2; e++) {
            sf_reader_set_epoch(r, e);
            const sf_batch *b;
            uint64_t samples = 0, subst = 0, seen[64] = {0};
            int rc;
            while ((rc = sf_reader_next(&b, r)) == 0 && b) {
                cr_assert_eq(b->size, 8, "batch shapes never change");
                check_batch(&d, keys, b); /* checks the substitute's bytes and label */
                uint32_t here = 0;
                for (uint32_t k = 0; k < b->size; k++) {
                    seen[b->ids[k]]++;
                    if (b->ids[k] == b->source_ids[k])
                        continue;
                    here++;
                    uint64_t want = b->ids[k] == 37 ? 38 : b->ids[k] == 50 ? 52 : b->ids[k] == 51 ? 52 : 999;
                    cr_assert_eq(b->source_ids[k], want, "id %llu substituted by %llu",
                                 (unsigned long long)b->ids[k], (unsigned long long)b->source_ids[k]);
                }
                cr_assert_eq(b->substituted, here);
                subst += here;
                samples += b->size;
                sf_reader_release(r, b);
            }
            cr_assert_eq(rc, 0, "%s", sf_last_error());
            cr_assert_eq(samples, 64);
            cr_assert_eq(subst, 3);
            for (int k = 0; k < 64; k++)
                cr_assert_eq(seen[k], 1);
        }
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_eq(st.corrupt_substitutions, 6, "engine %zu: %llu", i,
                     (unsigned long long)st.corrupt_substitutions);
        sf_reader_close(r);
    }
    free(keys);
}

/* Records larger than a hash piece (SF_HASH_CHUNK, 256 KiB): io_uring reads
 * them in pieces and hashes each as it lands, so a damaged byte in the
 * first, the middle or the last piece must fail its record, and intact
 * records must come through whole, on every engine, buffered and direct. */
Test(reader, records_of_several_hash_pieces_are_checked_whole_on_every_engine)
{
    const uint64_t img = 614400; /* pieces of 262144, 262144 and 90112 bytes; O_DIRECT-sized */
    test_ds d = make_ds("big", 6, img, 4096);
    uint64_t *keys = key_numbers(&d);
    corrupt_sample(&d, 1, 3);
    corrupt_sample(&d, 3, 262144 + 1000);
    corrupt_sample(&d, 4, img - 1);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 3; i++) {
        for (int direct = 0; direct < (engines[i] == SF_ENGINE_MMAP ? 1 : 2); direct++) {
            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.batch_size = 2;
            o.engine = engines[i];
            o.direct = direct ? SF_DIRECT_ON : SF_DIRECT_OFF;
            o.on_corrupt = SF_ON_CORRUPT_SKIP;
            sf_reader *r = open_reader(&d, &o);
            const sf_batch *b;
            uint64_t substituted = 0;
            int rc;
            while ((rc = sf_reader_next(&b, r)) == 0 && b) {
                check_batch(&d, keys, b); /* every byte of what was delivered */
                for (uint32_t k = 0; k < b->size; k++) {
                    int bad = b->ids[k] == 1 || b->ids[k] == 3 || b->ids[k] == 4;
                    cr_assert_eq(b->ids[k] != b->source_ids[k], bad, "engine %zu direct %d: sample %llu",
                                 i, direct, (unsigned long long)b->ids[k]);
                    substituted += bad;
                }
                sf_reader_release(r, b);
            }
            cr_assert_eq(rc, 0, "engine %zu direct %d: %s", i, direct, sf_last_error());
            cr_assert_eq(substituted, 3);
            sf_reader_close(r);
        }
    }
    free(keys);
}

/* n samples of two fixed payload fields, img uint8 [40] and aux int32 [3]
 * = {k, 7k, -k}, and label (inline): records of several reads, which the
 * small-record path hashes as one. */
static test_ds make_two_field_ds(uint64_t n)
{
    test_ds d;
    memset(&d, 0, sizeof d);
    d.n = n;
    d.img_bytes = 40;
    char in[4200];
    snprintf(in, sizeof in, "%s/two-npy", g_root);
    snprintf(d.dir, sizeof d.dir, "%s/two", g_root);
    cr_assert_eq(mkdir(in, 0755), 0);
    for (uint64_t k = 0; k < n; k++) {
        char path[4300];
        uint8_t img[40];
        for (uint64_t j = 0; j < sizeof img; j++)
            img[j] = img_byte(k, j);
        uint64_t img_shape = sizeof img, aux_shape = 3;
        snprintf(path, sizeof path, "%s/img_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_UINT8, 1, &img_shape, img, sizeof img);
        int32_t aux[3] = {(int32_t)k, (int32_t)(7 * k), -(int32_t)k};
        snprintf(path, sizeof path, "%s/aux_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_INT32, 1, &aux_shape, aux, sizeof aux);
        int64_t label = label_of(k);
        snprintf(path, sizeof path, "%s/label_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.align = 64;
    po.shard_size = 4096; /* several shards */
    sf_pack_result res;
    cr_assert_eq(sf_pack_npy_dir(&res, in, d.dir, &po), 0, "pack: %s", sf_last_error());
    cr_assert_eq(res.samples, n);
    return d;
}

/* Each position of b holds one sample whole: img, aux and label of the same k. */
static void check_two_field_batch(const sf_batch *b)
{
    const sf_batch_field *img = sf_batch_field_find(b, "img");
    const sf_batch_field *aux = sf_batch_field_find(b, "aux");
    const sf_batch_field *lab = sf_batch_field_find(b, "label");
    cr_assert(img && aux && lab);
    for (uint32_t i = 0; i < b->size; i++) {
        int32_t a[3];
        memcpy(a, (const uint8_t *)aux->data + i * 12, sizeof a);
        uint64_t k = (uint64_t)a[0];
        cr_assert(a[1] == 7 * a[0] && a[2] == -a[0], "aux of position %u", i);
        const uint8_t *p = (const uint8_t *)img->data + i * 40;
        for (uint64_t j = 0; j < 40; j++)
            cr_assert_eq(p[j], img_byte(k, j), "img of position %u (sample k %llu)", i,
                         (unsigned long long)k);
        int64_t label;
        memcpy(&label, (const uint8_t *)lab->data + i * 8, 8);
        cr_assert_eq(label, label_of(k));
    }
}

Test(reader, records_of_two_payload_fields_are_checked_whole_on_every_engine)
{
    test_ds d = make_two_field_ds(40);
    /* Byte 65 of a record is in its second payload field (the first is
     * padded to the 64-byte alignment): the hash must cover both. */
    corrupt_sample(&d, 9, 65);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 3; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 8;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        o.engine = engines[i];
        o.on_corrupt = SF_ON_CORRUPT_SKIP;
        sf_reader *r = open_reader(&d, &o);
        const sf_batch *b;
        uint64_t seen[40] = {0}, subst = 0;
        int rc;
        while ((rc = sf_reader_next(&b, r)) == 0 && b) {
            check_two_field_batch(b);
            for (uint32_t k = 0; k < b->size; k++) {
                seen[b->ids[k]]++;
                if (b->ids[k] != b->source_ids[k]) {
                    cr_assert_eq(b->ids[k], 9);
                    cr_assert_eq(b->source_ids[k], 10);
                    subst++;
                }
            }
            sf_reader_release(r, b);
        }
        cr_assert_eq(rc, 0, "engine %zu: %s", i, sf_last_error());
        cr_assert_eq(subst, 1, "engine %zu", i);
        for (int k = 0; k < 40; k++)
            cr_assert_eq(seen[k], 1);
        sf_reader_close(r);
        /* Under on_corrupt = ERROR the same record fails, named. */
        o.on_corrupt = SF_ON_CORRUPT_ERROR;
        r = open_reader(&d, &o);
        while ((rc = sf_reader_next(&b, r)) == 0 && b)
            sf_reader_release(r, b);
        cr_assert_eq(rc, SF_E_CHECKSUM, "engine %zu: %d", i, rc);
        cr_assert(strstr(sf_last_error(), "sample 9") != NULL, "%s", sf_last_error());
        sf_reader_close(r);
    }
}

/* ---- slots -------------------------------------------------------------------------------- */

Test(reader, holding_every_slot_then_next_is_a_state_error)
{
    test_ds d = make_ds("a", 100, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 4;
    o.prefetch = 3;
    sf_reader *r = open_reader(&d, &o);
    const sf_batch *b[3], *x;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sf_reader_next(&b[i], r), 0);
        cr_assert_not_null(b[i]);
        cr_assert_eq(b[i]->index, (uint64_t)i);
    }
    cr_assert_eq(sf_reader_next(&x, r), SF_E_STATE);
    cr_assert_null(x);
    cr_assert(strstr(sf_last_error(), "release") != NULL);
    /* It names the batches held, so the stray reference can be found. */
    cr_assert(strstr(sf_last_error(), "batches still held (epoch, index): (0, 0) (0, 1) (0, 2);"),
              "%s", sf_last_error());
    /* Releasing out of order frees a slot; delivery stays in order. */
    cr_assert_eq(sf_reader_release(r, b[1]), 0);
    cr_assert_eq(sf_reader_release(r, b[1]), SF_E_INVALID, "double release");
    cr_assert_eq(sf_reader_next(&x, r), 0);
    cr_assert_eq(x->index, 3);
    cr_assert_eq(b[0]->index, 0, "held batches untouched");
    cr_assert_eq(b[2]->index, 2);
    sf_reader_release(r, b[0]);
    sf_reader_release(r, b[2]);
    sf_reader_release(r, x);
    sf_reader_close(r);
}

Test(reader, the_state_error_lists_the_first_eight_batches_held_in_order)
{
    test_ds d = make_ds("a", 100, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 2;
    o.prefetch = 11;
    sf_reader *r = open_reader(&d, &o);
    const sf_batch *b[11], *x;
    for (int i = 0; i < 11; i++)
        cr_assert_eq(sf_reader_next(&b[i], r), 0);
    /* Slots are not held in batch order once one is given back and reused. */
    sf_reader_release(r, b[0]);
    cr_assert_eq(sf_reader_next(&b[0], r), 0);
    cr_assert_eq(b[0]->index, 11);
    cr_assert_eq(sf_reader_next(&x, r), SF_E_STATE);
    cr_assert(strstr(sf_last_error(), "(epoch, index): (0, 1) (0, 2) (0, 3) (0, 4) (0, 5) (0, 6) "
                                      "(0, 7) (0, 8) and 3 later ones;"),
              "%s", sf_last_error());
    for (int i = 0; i < 11; i++)
        sf_reader_release(r, b[i]);
    sf_reader_close(r);
}

/* Two threads releasing one batch at once (release may be called from any
 * thread): exactly one succeeds, the other is told the batch is not held,
 * and the slot is given back once. Afterwards exactly `prefetch` batches can
 * be held, no more and no fewer. With the host-copy device and slow copies,
 * the first release waits for the slot's copy outside the reader's lock,
 * which leaves the second one a wide window. */
typedef struct release_race {
    sf_reader *r;
    const sf_batch *b;
    pthread_barrier_t *go;
    int rc;
} release_race;

static void *release_racer(void *arg)
{
    release_race *x = arg;
    pthread_barrier_wait(x->go);
    x->rc = sf_reader_release(x->r, x->b);
    return NULL;
}

Test(reader, two_threads_releasing_one_batch_give_its_slot_back_once)
{
    test_ds d = make_ds("a", 64, 256, 64);
    for (int device = 0; device < 2; device++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 4;
        o.prefetch = 3;
        o.device = device ? SF_DEVICE_HOST_COPY : SF_DEVICE_CPU;
        reader_device_host_set_delay_us(device ? 500 : 0);
        sf_reader *r = open_reader(&d, &o);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        for (int round = 0; round < 200;) {
            const sf_batch *b;
            cr_assert_eq(sf_reader_next(&b, r), 0, "round %d: %s", round, sf_last_error());
            if (!b)
                continue; /* end of an epoch */
            round++;
            release_race x[2] = {{r, b, &go, 1}, {r, b, &go, 1}};
            pthread_t t;
            cr_assert_eq(pthread_create(&t, NULL, release_racer, &x[1]), 0);
            release_racer(&x[0]);
            pthread_join(t, NULL);
            cr_assert((x[0].rc == 0 && x[1].rc == SF_E_INVALID) ||
                          (x[1].rc == 0 && x[0].rc == SF_E_INVALID),
                      "round %d (device %d): the two releases returned %d and %d", round, device,
                      x[0].rc, x[1].rc);
        }
        pthread_barrier_destroy(&go);
        /* 200 batches in, at batch 8 of a 16-batch epoch: these four calls
         * meet no end of an epoch. */
        const sf_batch *held[3], *x;
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(sf_reader_next(&held[i], r), 0, "%s", sf_last_error());
            cr_assert_not_null(held[i]);
        }
        cr_assert_eq(sf_reader_next(&x, r), SF_E_STATE, "a fourth batch with prefetch = 3");
        for (int i = 0; i < 3; i++)
            cr_assert_eq(sf_reader_release(r, held[i]), 0);
        sf_reader_close(r);
    }
    reader_device_host_set_delay_us(0);
}

Test(reader, bad_arguments)
{
    test_ds d = make_ds("a", 10, 64, 64);
    sf_reader *r = NULL;
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.world_size = 2;
    o.rank = 2;
    cr_assert_eq(sf_reader_open(&r, d.dir, &o), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "rank") != NULL);
    o = (sf_reader_opts)SF_READER_OPTS_INIT;
    o.version = 99;
    cr_assert_eq(sf_reader_open(&r, d.dir, &o), SF_E_INVALID);
    o = (sf_reader_opts)SF_READER_OPTS_INIT;
    o.engine = 17;
    cr_assert_eq(sf_reader_open(&r, d.dir, &o), SF_E_INVALID);
    cr_assert_lt(sf_reader_open(&r, "no-such-dataset", NULL), 0);
    cr_assert_null(r);
    sf_reader_close(NULL);
    r = open_reader(&d, NULL);
    sf_resume_state s = {.epoch = 0, .next_batch = 99};
    cr_assert_eq(sf_reader_restore(r, &s), SF_E_INVALID);
    sf_batch fake;
    cr_assert_eq(sf_reader_release(r, &fake), SF_E_INVALID);
    cr_assert_eq(sf_reader_next(NULL, r), SF_E_INVALID);
    sf_reader_close(r);
}

/* Epochs above SF_MAX_EPOCH are refused: restored at UINT64_MAX's end (or
 * set to it and read through), the schedule's epoch + 1 wrapped to epoch 0
 * and replayed its order. The limit's end is the last one: reading on
 * counted up to SF_MAX_EPOCH + 1, whose state sf_reader_restore refused. */
Test(reader, epochs_above_the_limit_are_refused_and_the_limit_does_not_wrap)
{
    test_ds d = make_ds("a", 10, 64, 64);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 5;
    sf_reader *r = open_reader(&d, &o);
    uint64_t nb = r->num_batches;
    cr_assert_eq(nb, 2);
    const uint64_t bad[] = {UINT64_MAX, UINT64_MAX - 1, SF_MAX_EPOCH + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sf_resume_state s = {.epoch = bad[i], .next_batch = nb};
        cr_assert_eq(sf_reader_restore(r, &s), SF_E_INVALID, "epoch %llu", (unsigned long long)bad[i]);
        cr_assert(strstr(sf_last_error(), "sf_reader_restore: epoch") &&
                      strstr(sf_last_error(), "SF_MAX_EPOCH = 2^63 - 1 = 9223372036854775807"),
                  "%s", sf_last_error());
        cr_assert_eq(sf_reader_set_epoch(r, bad[i]), SF_E_INVALID);
        cr_assert(strstr(sf_last_error(), "sf_reader_set_epoch: epoch") &&
                      strstr(sf_last_error(), "SF_MAX_EPOCH"),
                  "%s", sf_last_error());
    }
    /* Nothing moved. */
    sf_resume_state at;
    cr_assert_eq(sf_reader_state(&at, r), 0);
    cr_assert_eq(at.epoch, 0);
    cr_assert_eq(at.next_batch, 0);
    /* The limit itself: its end is final, not followed by 0 (or by SF_MAX_EPOCH + 1). */
    sf_resume_state s = {.epoch = SF_MAX_EPOCH, .next_batch = nb - 1};
    cr_assert_eq(sf_reader_restore(r, &s), 0, "%s", sf_last_error());
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
    cr_assert_not_null(b);
    cr_assert_eq(b->epoch, SF_MAX_EPOCH);
    cr_assert_eq(b->index, nb - 1);
    sf_reader_release(r, b);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
        cr_assert_null(b, "the end of the last epoch, every time");
        cr_assert_eq(sf_reader_state(&at, r), 0);
        cr_assert_eq(at.epoch, SF_MAX_EPOCH);
        cr_assert_eq(at.next_batch, nb);
        cr_assert_eq(sf_reader_restore(r, &at), 0, "a state it made: %s", sf_last_error());
    }
    /* (set_epoch of the epoch just restored keeps that position: its end.) */
    cr_assert_eq(sf_reader_set_epoch(r, 0), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_set_epoch(r, SF_MAX_EPOCH), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
    cr_assert_eq(b->epoch, SF_MAX_EPOCH);
    sf_reader_release(r, b);
    sf_reader_close(r);
}

/* A batch is its reader's: sf_batch_wait and _wait_on refuse another
 * reader's, also a CPU batch, which they would otherwise pass at once. */
Test(reader, batch_wait_refuses_a_batch_of_another_reader)
{
    test_ds d = make_ds("a", 10, 64, 64);
    sf_reader *r1 = open_reader(&d, NULL), *r2 = open_reader(&d, NULL);
    const sf_batch *b = NULL;
    cr_assert_eq(sf_reader_next(&b, r1), 0, "%s", sf_last_error());
    cr_assert_not_null(b);
    cr_assert_eq(b->device, SF_DEVICE_CPU);
    cr_assert_eq(sf_batch_wait(r1, b), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait(r2, b), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "sf_batch_wait: not a batch of this reader"), "%s",
              sf_last_error());
    int stream;
    cr_assert_eq(sf_batch_wait_on(r1, b, &stream), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait_on(r2, b, &stream), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "sf_batch_wait_on: not a batch of this reader"), "%s",
              sf_last_error());
    sf_batch fake;
    memset(&fake, 0, sizeof fake); /* device 0: SF_DEVICE_CPU */
    cr_assert_eq(sf_batch_wait(r1, &fake), SF_E_INVALID);
    cr_assert_eq(sf_batch_wait(r1, NULL), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "batch is NULL"), "%s", sf_last_error());
    cr_assert_eq(sf_reader_release(r1, b), 0, "%s", sf_last_error());
    sf_reader_close(r2);
    sf_reader_close(r1);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

Test(reader, rss_is_flat_over_epochs_and_the_slab_is_the_only_large_allocation)
{
    test_ds d = make_ds("a", 256, 16384, 4096);
    static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP};
    for (size_t i = 0; i < 2; i++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 32;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        o.engine = engines[i];
        long before = rss_kib();
        sf_reader *r = open_reader(&d, &o);
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_geq(st.slab_bytes, 4ull * 32 * 16384);
        read_epoch(r, &d, NULL, NULL, NULL);
        long one = rss_kib();
        for (int e = 1; e < 20; e++)
            read_epoch(r, &d, NULL, NULL, NULL);
        long twenty = rss_kib();
        long slab_kib = (long)(st.slab_bytes >> 10);
        cr_assert_leq(labs(twenty - one), 256, "RSS after 1 epoch %ld KiB, after 20 %ld KiB", one, twenty);
        cr_assert_geq(one - before, slab_kib - 64, "the slab is resident after an epoch");
        cr_assert_leq(one - before, slab_kib + 2048,
                      "RSS grew by %ld KiB for a %ld KiB slab: something else is large",
                      one - before, slab_kib);
        sf_reader_close(r);
    }
}

/* ---- io_uring without registered buffers (RLIMIT_MEMLOCK) ----------------------------------- */

/* Drops CAP_IPC_LOCK (tests run as root in CI, which hides the limit) and
 * sets a small RLIMIT_MEMLOCK, as an ordinary user has. Criterion runs each
 * test in its own process, so this does not leak into other tests. */
static uid_t g_chown_to;

static int chown_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return lchown(path, g_chown_to, g_chown_to);
}

static int drop_ipc_lock(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct c[2];
    if (syscall(SYS_capget, &h, c) != 0)
        return -1;
    c[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    c[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    c[CAP_IPC_LOCK / 32].inheritable &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &h, c) != 0)
        return -1;
    struct rlimit rl = {512 << 10, 512 << 10};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return -1;
    /* Locked memory is accounted per user: as root, become a uid of our own
     * so concurrent test processes do not share one budget. */
    if (geteuid() == 0) {
        /* The scratch tree becomes that user's, so it can read it and the
         * suite's fini can remove it. */
        g_chown_to = (uid_t)(60000 + getpid() % 5000);
        if (nftw(g_root, chown_entry, 16, FTW_PHYS) != 0)
            return -1;
        uid_t id = g_chown_to;
        if (setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0)
            return -1;
    }
    return 0;
}

Test(reader, uring_registers_pieces_of_the_slab_under_a_small_memlock_limit, .timeout = 120)
{
    test_ds d = make_ds("a", 150, 8192, 4096);
    uint64_t *keys = key_numbers(&d);
    if (drop_ipc_lock() != 0) {
        free(keys);
        cr_skip_test("cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK: %s", strerror(errno));
    }
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 80; /* 644 KiB slots: more than the 512 KiB limit */
    o.engine = SF_ENGINE_URING;
    o.io_threads = 2; /* rings count against the limit too: keep them few */
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    sf_reader *r = open_reader(&d, &o);
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_str_eq(st.engine, "uring");
    /* Not one slot fits: pieces of the slab that fit the limit are registered
     * instead (a quarter of it each), not nothing; reads straddle them. */
    cr_assert_gt(st.registered_bytes, 0, "nothing registered: the slab was not cut into pieces");
    cr_assert_leq(st.registered_bytes, 512 << 10);
    cr_assert_eq(st.registered_bytes % (128 << 10), 0, "pieces of a quarter of the limit");
    sf_reader_close(r);
    read_all_checked(&d, keys, &o, "uring registered in pieces");
    /* Small slots fit: some or all get registered, the rest read plainly.
     * The kernel gives back the closed reader's locked memory (its rings
     * and buffers) from a work queue after io_uring's descriptors close:
     * an open right after can find the limit still taken (1 run in 12 did,
     * registering nothing), so it is tried again for up to 2 s. */
    o.batch_size = 4;
    o.prefetch = 16; /* 16 slots of 32 KiB + a label page: the limit takes some */
    for (int tries = 0;; tries++) {
        r = open_reader(&d, &o);
        sf_reader_stats(&st, r);
        if (st.registered_bytes > 0 || tries == 40)
            break;
        sf_reader_close(r);
        usleep(50 * 1000);
    }
    cr_assert_gt(st.registered_bytes, 0);
    cr_assert_lt(st.registered_bytes, st.slab_bytes);
    sf_reader_close(r);
    read_all_checked(&d, keys, &o, "uring partly registered");
    free(keys);
}

/* prefetch 0 chooses from the slot size: as many slots as make 2 MiB, at
 * least 4 and at most 8; a prefetch given is kept. */
Test(reader, default_prefetch_is_deeper_for_small_slots)
{
    test_ds d = make_ds("pf", 300, 8192, 4096);
    struct {
        uint32_t batch, prefetch, want;
    } cases[] = {
        {4, 0, 8},    /* about 36 KiB a slot: 8 at most */
        {32, 0, 7},   /* 256 KiB of records and a page of labels: 2 MiB make 7 */
        {64, 0, 4},   /* 512 KiB and more: 4 */
        {128, 0, 4},
        {4, 5, 5},    /* given: kept */
        {128, 9, 9},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = cases[c].batch;
        o.prefetch = cases[c].prefetch;
        sf_reader *r = open_reader(&d, &o);
        sf_reader_statistics st;
        cr_assert_eq(sf_reader_stats(&st, r), 0);
        cr_assert_eq(st.prefetch, cases[c].want, "case %zu: prefetch %u, slot %llu bytes", c,
                     st.prefetch, (unsigned long long)(st.slab_bytes / st.prefetch));
        if (!cases[c].prefetch && st.prefetch > 4)
            cr_assert_leq(st.slab_bytes, 2u << 20, "case %zu: slab over 2 MiB", c);
        /* and the epoch reads whole */
        const sf_batch *b;
        uint64_t samples = 0;
        while (sf_reader_next(&b, r) == 0 && b) {
            samples += b->size;
            cr_assert_eq(sf_reader_release(r, b), 0);
        }
        cr_assert_eq(samples, 300);
        sf_reader_close(r);
    }
}

/* Past 4, the slots chosen never need more shards open at once than the
 * descriptor cap (half the soft RLIMIT_NOFILE) allows: a batch of 4 from
 * as many shards, under a soft limit of 24 (cap 12), gets 4 slots, not 8. */
Test(reader, default_prefetch_stays_within_the_descriptor_cap)
{
    test_ds d = make_ds("pffd", 300, 8192, 4096); /* 64 KiB shards: 7 records each */
    struct rlimit rl, low;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    uint32_t want[2] = {8, 4};
    for (int limited = 0; limited < 2; limited++) {
        low = rl;
        low.rlim_cur = limited ? 24 : 1024; /* the soft limit only: it may be set back */
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0, "%s", strerror(errno));
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.batch_size = 4;
        o.shuffle = SF_READER_SHUFFLE_GLOBAL;
        sf_reader *r = open_reader(&d, &o);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
        sf_reader_statistics st;
        cr_assert_eq(sf_reader_stats(&st, r), 0);
        cr_assert_eq(st.prefetch, want[limited], "soft limit %llu: prefetch %u",
                     (unsigned long long)low.rlim_cur, st.prefetch);
        sf_reader_close(r);
    }
}

/* The open datasets of a process share half the soft RLIMIT_NOFILE (32 of
 * 64 here), equally among those that cannot keep all their shards open: a
 * second one halves the first's share. A forked child starts a budget of
 * its own: the parent's datasets are not its to reshare (a child's open took
 * their locks, which a parent thread may have held at the fork, and hung). */
Test(reader, the_process_shares_one_descriptor_budget_and_a_forked_child_starts_its_own)
{
    test_ds d = make_ds("budget", 300, 8192, 4096); /* 43 shards: 86 entries, over 32 */
    struct rlimit rl, low;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    low = rl;
    low.rlim_cur = 64;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0, "%s", strerror(errno));
    sf_dataset *a, *b;
    cr_assert_eq(sf_dataset_open(&a, d.dir), 0, "%s", sf_last_error());
    cr_assert_not(dataset_fd_all_kept(a));
    cr_assert_eq(dataset_fd_cap(a), 32);
    cr_assert_eq(sf_dataset_open(&b, d.dir), 0, "%s", sf_last_error());
    cr_assert_eq(dataset_fd_cap(a), 16);
    cr_assert_eq(dataset_fd_cap(b), 16);
    sf_dataset_close(b);
    cr_assert_eq(dataset_fd_cap(a), 32, "a closed dataset's share went back");
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        uint64_t cap = 0;
        sf_dataset *c;
        if (sf_dataset_open(&c, d.dir) == 0) {
            cap = dataset_fd_cap(c);
            sf_dataset_close(c);
        }
        sf_dataset_close(a); /* the parent's: leaves nothing of the child's budget */
        if (write(pipefd[1], &cap, sizeof cap) != (ssize_t)sizeof cap)
            _exit(2);
        _exit(0);
    }
    close(pipefd[1]);
    uint64_t child_cap = 0;
    cr_assert_eq(read(pipefd[0], &child_cap, sizeof child_cap), (ssize_t)sizeof child_cap);
    close(pipefd[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_eq(child_cap, 32, "the child shared with its parent's dataset: %llu",
                 (unsigned long long)child_cap);
    cr_assert_eq(dataset_fd_cap(a), 32);
    sf_dataset_close(a);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
}

/* ---- device delivery ------------------------------------------------------------------------- */

/* The reader opens its device on the slab (prefetch slots of slot_bytes,
 * page-aligned) and copies each batch from its slot to the same offsets of
 * the slot's device buffer. Through the host-copy device, the test double of
 * the device interface (device.h). */
Test(reader, device_gets_the_slab_and_copies_every_batch_from_its_slot)
{
    test_ds d = make_ds("a", 50, 4096, 4096);
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 10;
    o.prefetch = 4;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r = open_reader(&d, &o);
    cr_assert_eq(r->device_ops, &reader_device_host);
    cr_assert_eq((uintptr_t)r->slab % 4096, 0);
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    cr_assert_eq(st.prefetch, 4);
    cr_assert_eq(st.device_bytes, st.slab_bytes, "one device buffer of slot_bytes per slot");
    const sf_batch *b;
    uint64_t batches = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        uint32_t slot = UINT32_MAX;
        for (uint32_t i = 0; i < st.prefetch; i++)
            if (&r->slots[i].batch == b)
                slot = i;
        cr_assert_lt(slot, st.prefetch);
        const uint8_t *host = r->slab + slot * r->layout.slot_bytes;
        const uint8_t *dev = r->device_ops->device_ptr(r->device, slot);
        cr_assert_eq(b->device, SF_DEVICE_HOST_COPY);
        cr_assert_eq(sf_batch_wait(r, b), 0);
        for (uint32_t f = 0; f < b->num_fields; f++) {
            const sf_batch_field *bf = &b->fields[f];
            const uint8_t *data = bf->data, *device_data = bf->device_data;
            cr_assert(data >= host && data + bf->bytes <= host + r->layout.slot_bytes,
                      "field %s outside its slot", bf->name);
            cr_assert_eq(device_data - dev, data - host, "field %s at another offset", bf->name);
            cr_assert_eq(memcmp(device_data, data, bf->bytes), 0, "field %s", bf->name);
        }
        cr_assert_eq(sf_reader_release(r, b), 0);
        batches++;
    }
    cr_assert_eq(batches, 5);
    sf_reader_close(r);
}
