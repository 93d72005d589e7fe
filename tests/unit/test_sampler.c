/* Unit tests for lib/reader/sampler.c: epoch order, rank distribution, resume. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardfeed/error.h"
#include "sampler.h"

static const int MODES[] = {SF_SHUFFLE_NONE, SF_SHUFFLE_GLOBAL, SF_SHUFFLE_BLOCK};
static const uint64_t SIZES[] = {1, 7, 100, 1000, 1001};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static reader_sampler_config cfg_of(uint64_t n, uint64_t seed, int mode)
{
    reader_sampler_config c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.seed = seed;
    c.shuffle = mode;
    c.batch_size = 1;
    c.world_size = 1;
    if (mode == SF_SHUFFLE_BLOCK) {
        c.block_size = 8;
        c.window = 32;
    }
    return c;
}

static reader_sampler *make(const reader_sampler_config *c)
{
    reader_sampler *s = NULL;
    int rc = reader_sampler_create(&s, c);
    cr_assert_eq(rc, 0, "create failed: %d %s", rc, sf_last_error());
    cr_assert_not_null(s);
    return s;
}

/* Fills out[0..n) with the epoch's sequence S. */
static void order_of(const reader_sampler *s, uint64_t n, uint64_t *out)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = reader_sampler_at(s, i);
}

static void assert_permutation(const uint64_t *a, uint64_t n)
{
    unsigned char *seen = calloc(n, 1);
    cr_assert_not_null(seen);
    for (uint64_t i = 0; i < n; i++) {
        cr_assert_lt(a[i], n, "id %llu out of range at %llu", (unsigned long long)a[i],
                     (unsigned long long)i);
        cr_assert_eq(seen[a[i]], 0, "id %llu repeated", (unsigned long long)a[i]);
        seen[a[i]] = 1;
    }
    free(seen);
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* ---- order ---------------------------------------------------------------- */

Test(sampler, order_is_a_permutation_and_deterministic)
{
    for (size_t m = 0; m < COUNT(MODES); m++) {
        for (size_t k = 0; k < COUNT(SIZES); k++) {
            uint64_t n = SIZES[k];
            reader_sampler_config c = cfg_of(n, 42, MODES[m]);
            reader_sampler *a = make(&c), *b = make(&c);
            uint64_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y),
                     *e0 = malloc(n * sizeof *e0);
            order_of(a, n, e0);
            assert_permutation(e0, n);
            for (uint64_t ep = 1; ep <= 4; ep++) {
                cr_assert_eq(reader_sampler_set_epoch(a, ep), 0);
                cr_assert_eq(reader_sampler_set_epoch(b, ep), 0);
                cr_assert_eq(reader_sampler_epoch(a), ep);
                order_of(a, n, x);
                order_of(b, n, y);
                assert_permutation(x, n);
                cr_assert_arr_eq(x, y, n * sizeof *x, "mode %d n %llu epoch %llu: not reproducible",
                                 MODES[m], (unsigned long long)n, (unsigned long long)ep);
                if (MODES[m] == SF_SHUFFLE_NONE) {
                    for (uint64_t i = 0; i < n; i++)
                        cr_assert_eq(x[i], i);
                } else if (n >= 100) {
                    cr_assert(memcmp(x, e0, n * sizeof *x) != 0,
                              "mode %d n %llu: epoch %llu equals epoch 0", MODES[m],
                              (unsigned long long)n, (unsigned long long)ep);
                }
            }
            /* Going back to epoch 0 rebuilds the same order. */
            cr_assert_eq(reader_sampler_set_epoch(a, 0), 0);
            order_of(a, n, x);
            cr_assert_arr_eq(x, e0, n * sizeof *x);
            cr_assert_eq(reader_sampler_at(a, n), UINT64_MAX);
            free(x);
            free(y);
            free(e0);
            reader_sampler_free(a);
            reader_sampler_free(b);
        }
    }
}

Test(sampler, different_seeds_differ)
{
    for (size_t m = 1; m < COUNT(MODES); m++) {
        for (size_t k = 2; k < COUNT(SIZES); k++) {
            uint64_t n = SIZES[k];
            reader_sampler_config c1 = cfg_of(n, 1, MODES[m]), c2 = cfg_of(n, 2, MODES[m]);
            reader_sampler *a = make(&c1), *b = make(&c2);
            uint64_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            for (uint64_t ep = 0; ep < 3; ep++) {
                reader_sampler_set_epoch(a, ep);
                reader_sampler_set_epoch(b, ep);
                order_of(a, n, x);
                order_of(b, n, y);
                cr_assert(memcmp(x, y, n * sizeof *x) != 0, "mode %d n %llu: seeds 1 and 2 agree",
                          MODES[m], (unsigned long long)n);
            }
            free(x);
            free(y);
            reader_sampler_free(a);
            reader_sampler_free(b);
        }
    }
}

/* The order does not depend on rank, world size, batch size or drop/pad. */
Test(sampler, order_independent_of_distribution_params)
{
    for (size_t m = 1; m < COUNT(MODES); m++) {
        uint64_t n = 1001;
        reader_sampler_config c = cfg_of(n, 7, MODES[m]);
        reader_sampler *ref = make(&c);
        reader_sampler_set_epoch(ref, 3);
        c.batch_size = 13;
        c.world_size = 4;
        c.rank = 3;
        c.drop_last = 1;
        c.uneven = SF_UNEVEN_DROP;
        reader_sampler *o = make(&c);
        reader_sampler_set_epoch(o, 3);
        for (uint64_t i = 0; i < n; i++)
            cr_assert_eq(reader_sampler_at(ref, i), reader_sampler_at(o, i));
        reader_sampler_free(ref);
        reader_sampler_free(o);
    }
}

/* GLOBAL: every (position, id) cell is hit about epochs/N times. */
Test(sampler, global_shuffle_is_roughly_uniform)
{
    enum { N = 10, EPOCHS = 20000 };
    static unsigned hist[N][N];
    reader_sampler_config c = cfg_of(N, 12345, SF_SHUFFLE_GLOBAL);
    reader_sampler *s = make(&c);
    for (uint64_t ep = 0; ep < EPOCHS; ep++) {
        cr_assert_eq(reader_sampler_set_epoch(s, ep), 0);
        for (uint64_t p = 0; p < N; p++)
            hist[p][reader_sampler_at(s, p)]++;
    }
    const double expect = (double)EPOCHS / N;
    for (int p = 0; p < N; p++)
        for (int v = 0; v < N; v++)
            cr_assert(hist[p][v] > 0.85 * expect && hist[p][v] < 1.15 * expect,
                      "position %d id %d: %u hits, expected ~%.0f", p, v, hist[p][v], expect);
    reader_sampler_free(s);
}

/* ---- BLOCK mode ----------------------------------------------------------- */

static void check_block_locality(uint64_t n, uint32_t bs, uint32_t win, uint64_t seed)
{
    reader_sampler_config c = cfg_of(n, seed, SF_SHUFFLE_BLOCK);
    c.block_size = bs;
    c.window = win;
    reader_sampler *s = make(&c);
    uint32_t b = bs ? bs : SF_SAMPLER_DEFAULT_BLOCK;
    uint64_t w = win ? win : (uint64_t)SF_SAMPLER_DEFAULT_WINDOW_MULT * b;
    /* A window spans at most ceil(w/b)+1 blocks when all blocks are full; a
     * shorter last block (n % b != 0) can add one more. */
    uint64_t bound = ceil_div(w, b) + 1 + (n % b != 0);
    uint64_t nblocks = ceil_div(n, b);
    unsigned char *seen = malloc(nblocks);
    uint64_t *x = calloc(n, sizeof *x);
    for (uint64_t ep = 0; ep < 5; ep++) {
        reader_sampler_set_epoch(s, ep);
        order_of(s, n, x);
        assert_permutation(x, n);
        for (uint64_t start = 0; start < n; start += w) {
            uint64_t end = start + w < n ? start + w : n, distinct = 0;
            memset(seen, 0, nblocks);
            for (uint64_t p = start; p < end; p++) {
                uint64_t blk = x[p] / b;
                if (!seen[blk]++)
                    distinct++;
            }
            cr_assert_leq(distinct, bound,
                          "n %llu bs %u win %llu: window at %llu spans %llu blocks (bound %llu)",
                          (unsigned long long)n, b, (unsigned long long)w,
                          (unsigned long long)start, (unsigned long long)distinct,
                          (unsigned long long)bound);
        }
        if (w == 1) {
            /* No within-window shuffle: each block appears whole, ascending. */
            for (uint64_t p = 0; p < n;) {
                uint64_t first = x[p];
                cr_assert_eq(first % b, 0);
                uint64_t end = first + b < n ? first + b : n;
                for (uint64_t id = first; id < end; id++, p++)
                    cr_assert_eq(x[p], id);
            }
        }
    }
    free(seen);
    free(x);
    reader_sampler_free(s);
}

Test(sampler, block_mode_locality)
{
    for (size_t k = 0; k < COUNT(SIZES); k++) {
        uint64_t n = SIZES[k];
        check_block_locality(n, 8, 32, 1);
        check_block_locality(n, 8, 30, 2);
        check_block_locality(n, 10, 4, 3);
        check_block_locality(n, 7, 1, 4);
        check_block_locality(n, 1, 5, 5);
        check_block_locality(n, 0, 0, 6); /* defaults 64 / 1024 */
    }
    check_block_locality(5000, 0, 0, 7);
    check_block_locality(5003, 64, 100, 8);
}

/* window > 1 mixes items: S is not just whole blocks in ascending order,
 * and with block_size 1 and window >= n it is a full shuffle. */
Test(sampler, block_mode_shuffles_within_windows)
{
    enum { N = 1000 };
    reader_sampler_config c = cfg_of(N, 11, SF_SHUFFLE_BLOCK);
    c.block_size = 8;
    c.window = 32;
    reader_sampler *s = make(&c);
    uint64_t ascending_pairs = 0;
    for (uint64_t p = 0; p + 1 < N; p++)
        ascending_pairs += reader_sampler_at(s, p + 1) == reader_sampler_at(s, p) + 1;
    /* Whole blocks would give 7 of every 8 pairs ascending (~875). */
    cr_assert_lt(ascending_pairs, 300, "%llu ascending neighbours: windows not shuffled",
                 (unsigned long long)ascending_pairs);
    reader_sampler_free(s);

    c.block_size = 1;
    c.window = N;
    s = make(&c);
    uint64_t fixed = 0;
    for (uint64_t p = 0; p < N; p++)
        fixed += reader_sampler_at(s, p) == p;
    cr_assert_lt(fixed, 10, "%llu fixed points", (unsigned long long)fixed);
    reader_sampler_free(s);
}

Test(sampler, block_mode_epochs_differ)
{
    reader_sampler_config c = cfg_of(1000, 9, SF_SHUFFLE_BLOCK);
    c.block_size = 10;
    c.window = 1;
    reader_sampler *s = make(&c);
    uint64_t x[1000], y[1000];
    order_of(s, 1000, x);
    reader_sampler_set_epoch(s, 1);
    order_of(s, 1000, y);
    cr_assert(memcmp(x, y, sizeof x) != 0, "block order identical across epochs");
    reader_sampler_free(s);
}

/* ---- distribution --------------------------------------------------------- */

static void check_distribution(uint64_t n, int mode, uint32_t B, uint32_t W, int drop_last,
                               int uneven)
{
    reader_sampler *s[8] = {0};
    reader_sampler_config c = cfg_of(n, 77, mode);
    c.batch_size = B;
    c.world_size = W;
    c.drop_last = drop_last;
    c.uneven = uneven;
    for (uint32_t r = 0; r < W; r++) {
        c.rank = r;
        s[r] = make(&c);
        cr_assert_eq(reader_sampler_set_epoch(s[r], 2), 0);
    }
    uint64_t G = (uint64_t)B * W, full = n / G, R = n % G, cnt;
    if (R == 0 || drop_last)
        cnt = 0;
    else if (uneven == SF_UNEVEN_PAD)
        cnt = ceil_div(R, W);
    else
        cnt = R / W;
    uint64_t nb = full + (cnt > 0), per_rank = full * B + cnt;
    if (W == 1 && !drop_last) {
        cr_assert_eq(per_rank, n, "world_size 1 must neither pad nor drop");
    }
    unsigned *count = calloc(n, sizeof *count);
    uint64_t *ids = malloc(B * sizeof *ids);
    uint64_t total = 0;
    for (uint32_t r = 0; r < W; r++) {
        cr_assert_eq(reader_sampler_num_batches(s[r]), nb,
                     "n %llu B %u W %u drop %d uneven %d rank %u: %llu batches, expected %llu",
                     (unsigned long long)n, B, W, drop_last, uneven, r,
                     (unsigned long long)reader_sampler_num_batches(s[r]), (unsigned long long)nb);
        cr_assert_eq(reader_sampler_samples_per_epoch(s[r]), per_rank);
        uint64_t got = 0;
        for (uint64_t b = 0; b < nb; b++) {
            uint32_t k = reader_sampler_batch(s[r], b, ids);
            cr_assert_eq(k, b < full ? B : cnt);
            cr_assert_gt(k, 0);
            for (uint32_t i = 0; i < k; i++) {
                cr_assert_lt(ids[i], n);
                count[ids[i]]++;
            }
            got += k;
        }
        cr_assert_eq(got, per_rank);
        cr_assert_eq(reader_sampler_batch(s[r], nb, ids), 0);
        cr_assert_eq(reader_sampler_batch(s[r], nb + 5, ids), 0);
        total += got;
    }
    cr_assert_eq(total, (uint64_t)W * per_rank);

    uint64_t missing = 0, extra = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (count[i] == 0)
            missing++;
        else
            extra += count[i] - 1;
    }
    if (R == 0) {
        cr_assert_eq(missing, 0);
        cr_assert_eq(extra, 0);
    } else if (drop_last) {
        cr_assert_eq(missing, R);
        cr_assert_eq(extra, 0);
    } else if (uneven == SF_UNEVEN_PAD) {
        /* Padding wraps to S[0], S[1], ...: those ids are the duplicates. */
        uint64_t pad = W * cnt - R;
        cr_assert_eq(missing, 0);
        cr_assert_eq(extra, pad, "n %llu B %u W %u: %llu duplicates, expected padding %llu",
                     (unsigned long long)n, B, W, (unsigned long long)extra,
                     (unsigned long long)pad);
        for (uint64_t p = 0; p < pad; p++)
            cr_assert_geq(count[reader_sampler_at(s[0], p % n)], 2);
    } else {
        cr_assert_eq(missing, R - W * cnt);
        cr_assert_eq(extra, 0);
    }
    free(count);
    free(ids);
    for (uint32_t r = 0; r < W; r++)
        reader_sampler_free(s[r]);
}

Test(sampler, ranks_cover_the_dataset)
{
    static const uint32_t batch_sizes[] = {1, 3, 8, 64};
    for (size_t m = 0; m < COUNT(MODES); m++)
        for (size_t k = 0; k < COUNT(SIZES); k++)
            for (uint32_t W = 1; W <= 4; W++)
                for (size_t bi = 0; bi < COUNT(batch_sizes); bi++)
                    for (int drop = 0; drop <= 1; drop++)
                        for (int un = SF_UNEVEN_PAD; un <= SF_UNEVEN_DROP; un++)
                            check_distribution(SIZES[k], MODES[m], batch_sizes[bi], W, drop, un);
}

Test(sampler, padding_larger_than_dataset_wraps)
{
    /* n = 1, 4 ranks: every rank gets id 0. n = 2, 8 ranks: 0/1 alternate. */
    check_distribution(1, SF_SHUFFLE_GLOBAL, 1, 4, 0, SF_UNEVEN_PAD);
    check_distribution(2, SF_SHUFFLE_GLOBAL, 5, 8, 0, SF_UNEVEN_PAD);
    check_distribution(3, SF_SHUFFLE_NONE, 2, 8, 0, SF_UNEVEN_PAD);
    reader_sampler_config c = cfg_of(1, 0, SF_SHUFFLE_NONE);
    c.world_size = 4;
    c.batch_size = 2;
    for (uint32_t r = 0; r < 4; r++) {
        c.rank = r;
        reader_sampler *s = make(&c);
        uint64_t ids[2] = {99, 99};
        cr_assert_eq(reader_sampler_num_batches(s), 1);
        cr_assert_eq(reader_sampler_batch(s, 0, ids), 1);
        cr_assert_eq(ids[0], 0);
        reader_sampler_free(s);
    }
    /* DROP with fewer samples than ranks: nothing at all. */
    c.uneven = SF_UNEVEN_DROP;
    c.rank = 0;
    reader_sampler *s = make(&c);
    cr_assert_eq(reader_sampler_num_batches(s), 0);
    cr_assert_eq(reader_sampler_samples_per_epoch(s), 0);
    reader_sampler_free(s);
}

/* Concatenation of rank batches in (batch, rank) order, for one config. */
static uint64_t concat(uint64_t n, int mode, uint32_t B, uint32_t W, int drop_last, int uneven,
                       uint64_t epoch, uint64_t *out)
{
    reader_sampler *s[8] = {0};
    reader_sampler_config c = cfg_of(n, 5, mode);
    c.batch_size = B;
    c.world_size = W;
    c.drop_last = drop_last;
    c.uneven = uneven;
    for (uint32_t r = 0; r < W; r++) {
        c.rank = r;
        s[r] = make(&c);
        reader_sampler_set_epoch(s[r], epoch);
    }
    uint64_t len = 0, nb = reader_sampler_num_batches(s[0]);
    for (uint64_t b = 0; b < nb; b++)
        for (uint32_t r = 0; r < W; r++)
            len += reader_sampler_batch(s[r], b, out + len);
    for (uint32_t r = 0; r < W; r++)
        reader_sampler_free(s[r]);
    return len;
}

Test(sampler, global_order_independent_of_world_size)
{
    static const uint32_t Bs[] = {8, 4, 2, 1}, Ws[] = {1, 2, 4, 8};
    static const uint64_t ns[] = {8, 64, 1000, 1001, 1003, 13, 5};
    uint64_t *ref = malloc(2000 * sizeof *ref), *got = malloc(2000 * sizeof *got);
    uint64_t *seq = malloc(1003 * sizeof *seq);
    for (size_t m = 0; m < COUNT(MODES); m++) {
        for (size_t k = 0; k < COUNT(ns); k++) {
            uint64_t n = ns[k], full_len = n / 8 * 8;
            reader_sampler_config c = cfg_of(n, 5, MODES[m]);
            reader_sampler *o = make(&c);
            reader_sampler_set_epoch(o, 1);
            order_of(o, n, seq);
            reader_sampler_free(o);
            for (int drop = 0; drop <= 1; drop++) {
                for (int un = SF_UNEVEN_PAD; un <= SF_UNEVEN_DROP; un++) {
                    uint64_t ref_len = concat(n, MODES[m], Bs[0], Ws[0], drop, un, 1, ref);
                    for (size_t wi = 0; wi < COUNT(Ws); wi++) {
                        uint64_t len = concat(n, MODES[m], Bs[wi], Ws[wi], drop, un, 1, got);
                        /* Every concatenation is S, wrapped, cut to its length. */
                        for (uint64_t i = 0; i < len; i++)
                            cr_assert_eq(got[i], seq[i % n]);
                        if (n % 8 == 0 || drop) {
                            cr_assert_eq(len, ref_len);
                            cr_assert_arr_eq(got, ref, len * sizeof *got);
                        } else {
                            /* Full global batches identical; the tail differs
                             * only by the padding or dropping. */
                            cr_assert_arr_eq(got, ref, full_len * sizeof *got);
                            if (un == SF_UNEVEN_PAD)
                                cr_assert_geq(len, n);
                            else
                                cr_assert_geq(len, full_len);
                        }
                    }
                }
            }
        }
    }
    free(ref);
    free(got);
    free(seq);
}

/* ---- resume ---------------------------------------------------------------- */

Test(sampler, resume_from_any_batch)
{
    for (size_t m = 0; m < COUNT(MODES); m++) {
        reader_sampler_config c = cfg_of(1001, 31337, MODES[m]);
        c.batch_size = 16;
        c.world_size = 3;
        c.rank = 1;
        reader_sampler *a = make(&c);
        cr_assert_eq(reader_sampler_set_epoch(a, 7), 0);
        uint64_t nb = reader_sampler_num_batches(a);
        uint64_t (*all)[16] = calloc(nb, sizeof *all);
        uint32_t *cnt = calloc(nb, sizeof *cnt);
        for (uint64_t b = 0; b < nb; b++)
            cnt[b] = reader_sampler_batch(a, b, all[b]);
        for (uint64_t k = 0; k <= nb; k += 5) {
            reader_sampler *f = make(&c);
            cr_assert_eq(reader_sampler_set_epoch(f, 7), 0);
            for (uint64_t b = k; b < nb; b++) {
                uint64_t ids[16];
                cr_assert_eq(reader_sampler_batch(f, b, ids), cnt[b]);
                cr_assert_arr_eq(ids, all[b], cnt[b] * sizeof ids[0]);
            }
            reader_sampler_free(f);
        }
        /* Moving through other epochs and back gives the same batches. */
        reader_sampler_set_epoch(a, 8);
        reader_sampler_set_epoch(a, 7);
        for (uint64_t b = 0; b < nb; b++) {
            uint64_t ids[16];
            cr_assert_eq(reader_sampler_batch(a, b, ids), cnt[b]);
            cr_assert_arr_eq(ids, all[b], cnt[b] * sizeof ids[0]);
        }
        free(all);
        free(cnt);
        reader_sampler_free(a);
    }
}

/* ---- configuration ---------------------------------------------------------- */

static void expect_invalid(const reader_sampler_config *c, int code, const char *field)
{
    reader_sampler *s = (reader_sampler *)0x1;
    int rc = reader_sampler_create(&s, c);
    cr_assert_eq(rc, code, "expected %d, got %d (%s)", code, rc, sf_last_error());
    cr_assert_null(s);
    if (field)
        cr_assert_not_null(strstr(sf_last_error(), field), "message '%s' lacks '%s'",
                           sf_last_error(), field);
}

Test(sampler, invalid_configs_rejected)
{
    reader_sampler_config good = cfg_of(10, 0, SF_SHUFFLE_GLOBAL), c;
    c = good; c.batch_size = 0;
    expect_invalid(&c, SF_E_INVALID, "batch_size");
    c = good; c.world_size = 0;
    expect_invalid(&c, SF_E_INVALID, "world_size");
    c = good; c.world_size = 2; c.rank = 2;
    expect_invalid(&c, SF_E_INVALID, "rank");
    c = good; c.n = 0;
    expect_invalid(&c, SF_E_INVALID, "n must");
    c = good; c.shuffle = 3;
    expect_invalid(&c, SF_E_INVALID, "shuffle");
    c = good; c.shuffle = -1;
    expect_invalid(&c, SF_E_INVALID, "shuffle");
    c = good; c.uneven = 2;
    expect_invalid(&c, SF_E_INVALID, "uneven");
    c = good; c.n = (uint64_t)UINT32_MAX + 1;
    expect_invalid(&c, SF_E_LIMIT, NULL);
    c.shuffle = SF_SHUFFLE_BLOCK;
    expect_invalid(&c, SF_E_LIMIT, NULL);
    cr_assert_eq(reader_sampler_create(NULL, &good), SF_E_INVALID);
    reader_sampler *s = (reader_sampler *)0x1;
    cr_assert_eq(reader_sampler_create(&s, NULL), SF_E_INVALID);
    cr_assert_null(s);
    cr_assert_eq(reader_sampler_set_epoch(NULL, 0), SF_E_INVALID);
    reader_sampler_free(NULL);
}

/* NONE mode allocates nothing, so any n works. */
Test(sampler, none_mode_takes_huge_n)
{
    reader_sampler_config c = cfg_of((uint64_t)1 << 40, 0, SF_SHUFFLE_NONE);
    c.batch_size = 4;
    c.world_size = 3;
    c.rank = 2;
    reader_sampler *s = make(&c);
    cr_assert_eq(reader_sampler_set_epoch(s, 9), 0);
    uint64_t G = 12, n = c.n;
    cr_assert_eq(reader_sampler_num_batches(s), n / G + 1);
    uint64_t ids[4];
    cr_assert_eq(reader_sampler_batch(s, 1000, ids), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ids[i], 1000 * G + 8 + (uint64_t)i);
    /* R = 2^40 mod 12 = 4: c = ceil(4/3) = 2; rank 2 takes tail offsets 4,5
     * → wrapped to S[0], S[1]. */
    cr_assert_eq(reader_sampler_batch(s, n / G, ids), 2);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 1);
    cr_assert_eq(reader_sampler_at(s, n - 1), n - 1);
    reader_sampler_free(s);
}

/* An order built ahead on another thread (reader_sampler_prepare) is the
 * order set_epoch builds itself, for the epoch asked for and after a build
 * ahead of another epoch; set_epoch during the build waits for it. */
typedef struct prep_job {
    reader_sampler *s;
    uint64_t epoch;
} prep_job;

static void *prepare_on_thread(void *arg)
{
    prep_job *j = arg;
    cr_assert_eq(reader_sampler_prepare(j->s, j->epoch), 0);
    return NULL;
}

Test(sampler, order_built_ahead_is_the_same_order)
{
    for (size_t m = 0; m < COUNT(MODES); m++) {
        for (size_t z = 0; z < COUNT(SIZES); z++) {
            uint64_t n = SIZES[z];
            reader_sampler_config c = cfg_of(n, 42, MODES[m]);
            reader_sampler *plain = make(&c), *ahead = make(&c);
            uint64_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
            /* epoch 1 ahead on a thread, taken; then 3 ahead but 2 asked for (built in place);
             * then 3, taken from the spare built before. */
            const uint64_t ahead_of[] = {1, 3, UINT64_MAX}, asked[] = {1, 2, 3};
            for (int i = 0; i < 3; i++) {
                pthread_t th;
                prep_job j = {ahead, ahead_of[i]};
                if (ahead_of[i] != UINT64_MAX)
                    cr_assert_eq(pthread_create(&th, NULL, prepare_on_thread, &j), 0);
                cr_assert_eq(reader_sampler_set_epoch(ahead, asked[i]), 0);
                if (ahead_of[i] != UINT64_MAX)
                    pthread_join(th, NULL);
                cr_assert_eq(reader_sampler_set_epoch(plain, asked[i]), 0);
                order_of(plain, n, want);
                order_of(ahead, n, got);
                assert_permutation(got, n);
                cr_assert_eq(memcmp(want, got, n * sizeof *got), 0,
                             "mode %d n %llu epoch %llu: the order built ahead differs", MODES[m],
                             (unsigned long long)n, (unsigned long long)asked[i]);
            }
            free(want);
            free(got);
            reader_sampler_free(plain);
            reader_sampler_free(ahead);
        }
    }
}

/* The order is part of the resume contract: a checkpoint (epoch, batch)
 * taken with one version resumes the same samples with the next, so the
 * orders may never change. The first ids and a digest of the whole order for
 * fixed seeds pin them (values from the sampler as it was before its build
 * was split into steps). */
static uint64_t order_digest(const reader_sampler *s, uint64_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the ids */
    for (uint64_t i = 0; i < n; i++) {
        h ^= reader_sampler_at(s, i);
        h *= 1099511628211ull;
    }
    return h;
}

Test(sampler, orders_never_change)
{
    static const struct {
        int mode;
        uint64_t n, seed, epoch;
        uint32_t block, window;
        uint64_t first[4], digest;
    } pinned[] = {
        {SF_SHUFFLE_GLOBAL, 1000, 42, 0, 0, 0, {208, 574, 666, 268}, 0x235e7e77d8aeb637ull},
        {SF_SHUFFLE_GLOBAL, 100003, 7, 5, 0, 0, {1226, 95324, 32685, 23231}, 0xaf4bf12277948ce6ull},
        {SF_SHUFFLE_BLOCK, 1001, 42, 1, 8, 32, {663, 818, 820, 344}, 0x6b2a0b2fd6e8d94bull},
        {SF_SHUFFLE_BLOCK, 100003, 9, 3, 0, 0, {19440, 37167, 60848, 44881}, 0x992fc275aa1b50f8ull},
        {SF_SHUFFLE_BLOCK, 5000, 3, 2, 1, 7, {217, 1145, 3672, 1776}, 0x1172fb4b3f92d0e3ull},
        /* Past 2^18 ids the shuffles prefetch their swaps (sampler.c): the
         * whole order, the blocks' order and the windows of the last one.
         * Values from the sampler before it prefetched. */
        {SF_SHUFFLE_GLOBAL, 1000003, 5, 2, 0, 0, {577981, 217471, 524752, 706861},
         0x84ae485265b1c8e4ull},
        {SF_SHUFFLE_BLOCK, 600001, 8, 1, 1, 600001, {380263, 37066, 454278, 430423},
         0x917985caa77f493dull},
    };
    for (size_t k = 0; k < COUNT(pinned); k++) {
        reader_sampler_config c = cfg_of(pinned[k].n, pinned[k].seed, pinned[k].mode);
        c.block_size = pinned[k].block;
        c.window = pinned[k].window;
        reader_sampler *s = make(&c);
        cr_assert_eq(reader_sampler_set_epoch(s, pinned[k].epoch), 0);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(reader_sampler_at(s, (uint64_t)i), pinned[k].first[i],
                         "case %zu: position %d holds %llu, not %llu", k, i,
                         (unsigned long long)reader_sampler_at(s, (uint64_t)i),
                         (unsigned long long)pinned[k].first[i]);
        cr_assert_eq(order_digest(s, pinned[k].n), pinned[k].digest, "case %zu: the order changed", k);
        reader_sampler_free(s);
    }
}

/* The reader builds the next epoch's order a slice per batch: cut into
 * steps of any size, the build gives the order built in one go, and its
 * cost says how many steps it takes at most (the reader sizes its slices by
 * it, to be done within the epoch). */
Test(sampler, order_built_in_steps_is_the_same_order)
{
    static const struct {
        int mode;
        uint32_t block, window;
    } shapes[] = {
        {SF_SHUFFLE_GLOBAL, 0, 0}, {SF_SHUFFLE_BLOCK, 8, 32}, {SF_SHUFFLE_BLOCK, 1, 1},
        {SF_SHUFFLE_BLOCK, 3, 5},  {SF_SHUFFLE_BLOCK, 0, 0},  {SF_SHUFFLE_BLOCK, 64, 7},
    };
    static const uint64_t budgets[] = {1, 2, 7, 64, 1000};
    for (size_t k = 0; k < COUNT(shapes); k++) {
        for (size_t z = 0; z < COUNT(SIZES); z++) {
            uint64_t n = SIZES[z];
            reader_sampler_config c = cfg_of(n, 11, shapes[k].mode);
            c.block_size = shapes[k].block;
            c.window = shapes[k].window;
            reader_sampler *plain = make(&c);
            uint64_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
            int rc;
            cr_assert_eq(reader_sampler_set_epoch(plain, 4), 0);
            order_of(plain, n, want);
            for (size_t b = 0; b < COUNT(budgets); b++) {
                reader_sampler *stepped = make(&c);
                uint64_t cost = reader_sampler_build_cost(stepped), calls = 0;
                while ((rc = reader_sampler_prepare_step(stepped, 4, budgets[b])) == 0)
                    calls++;
                cr_assert_eq(rc, 1);
                calls++;
                cr_assert_leq(calls, cost / budgets[b] + 1,
                              "shape %zu n %llu budget %llu: %llu calls for a cost of %llu", k,
                              (unsigned long long)n, (unsigned long long)budgets[b],
                              (unsigned long long)calls, (unsigned long long)cost);
                cr_assert_eq(reader_sampler_set_epoch(stepped, 4), 0);
                order_of(stepped, n, got);
                cr_assert_eq(memcmp(want, got, n * sizeof *got), 0,
                             "shape %zu n %llu budget %llu: the order built in steps differs", k,
                             (unsigned long long)n, (unsigned long long)budgets[b]);
                reader_sampler_free(stepped);
            }
            /* set_epoch while the build is part way finishes it itself. */
            reader_sampler *part = make(&c);
            rc = reader_sampler_prepare_step(part, 4, 5);
            cr_assert(n < 7 ? rc >= 0 : rc == 0, "shape %zu n %llu: %d after 5 steps", k,
                      (unsigned long long)n, rc);
            cr_assert_eq(reader_sampler_set_epoch(part, 4), 0);
            order_of(part, n, got);
            cr_assert_eq(memcmp(want, got, n * sizeof *got), 0,
                         "shape %zu n %llu: the order finished by set_epoch differs", k,
                         (unsigned long long)n);
            /* ... and a step for the epoch it took has nothing left to do. */
            cr_assert_eq(reader_sampler_prepare_step(part, 4, 1), 1);
            reader_sampler_free(part);
            free(want);
            free(got);
            reader_sampler_free(plain);
        }
    }
}
