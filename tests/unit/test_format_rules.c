/* The format's rules as the library states them: what is wrong with a bad
 * key (one message for every caller), the exact decimal text of list
 * numbers (lib/inputs/number_text.h), repeated keys (lib/format/key_table.h),
 * bool bytes, and the hint a failed open gives when the process is out of
 * file descriptors (verify and export; the CLI tests cover inspect). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "format.h"
#include "key_table.h"
#include "number_text.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("format-rules-test")

TestSuite(rules, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

static void key_says(const char *key, size_t len, const char *problem)
{
    char why[600];
    cr_assert_eq(sf_key_check(key, len, why, sizeof why), 0, "key accepted");
    cr_assert(strstr(why, problem), "'%s' lacks '%s'", why, problem);
    cr_assert(strstr(why, SF_KEY_RULE), "%s", why);
    cr_assert_eq(sf_valid_key(key, len), 0);
}

Test(rules, key_messages_say_what_is_wrong)
{
    key_says("", 0, "is empty");
    key_says("../x", 4, "has a '..' component at byte 0");
    key_says("a/..", 4, "has a '..' component at byte 2");
    key_says("./a", 3, "has a '.' component at byte 0");
    key_says("a//b", 4, "has an empty component");
    key_says("a/", 2, "has an empty component");
    key_says("a\tb", 3, "has a control character at byte 1");
    key_says("a\x7f", 2, "has a control character at byte 1");
    key_says("ab\xc0\xaf", 4, "is not well-formed UTF-8 at byte 2");   /* overlong '/' */
    key_says("\xed\xa0\x80", 3, "is not well-formed UTF-8 at byte 0"); /* a surrogate */
    char long_key[300];
    memset(long_key, 'k', sizeof long_key);
    key_says(long_key, sizeof long_key, "is longer than 255 bytes (300 bytes)");
    /* The key is shown escaped and cut: never a raw control byte. */
    char why[600];
    sf_key_check("x\n", 2, why, sizeof why);
    cr_assert(strstr(why, "'x\\x0a'"), "%s", why);
    sf_key_check(long_key, sizeof long_key, why, sizeof why);
    cr_assert(strstr(why, "kkk...'"), "%s", why);
    /* Valid ones. */
    const char *ok[] = {"a", "cat/img 1.jpg", "Größe/a.png", ".hidden", "a..b", "...", "日本/x"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert_eq(sf_key_check(ok[i], strlen(ok[i]), why, sizeof why), 1, "%s", ok[i]);
}

static void int_text(const char *t, int ok, int64_t want)
{
    int64_t v = 0;
    cr_assert_eq(input_i64_from_text(t, strlen(t), &v), ok, "'%s'", t);
    if (!ok)
        return;
    cr_assert_eq(v, want, "'%s'", t);
    char back[INPUT_NUMBER_TEXT_MAX];
    cr_assert_eq(input_i64_to_text(back, v), strlen(t));
    cr_assert_str_eq(back, t);
}

Test(rules, int64_text_is_one_spelling)
{
    int_text("0", 1, 0);
    int_text("-12", 1, -12);
    int_text("9223372036854775807", 1, INT64_MAX);
    int_text("-9223372036854775808", 1, INT64_MIN);
    const char *bad[] = {"", "-", "+1", "01", "-0", " 1", "1 ", "1.0", "1e3", "0x1A",
                         "9223372036854775808", "-9223372036854775809", "99999999999999999999", "1a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        int_text(bad[i], 0, 0);
}

static void float_text(double v, const char *want)
{
    char t[INPUT_NUMBER_TEXT_MAX];
    size_t n = input_f64_to_text(t, v);
    cr_assert_eq(n, strlen(t));
    cr_assert_str_eq(t, want);
    double back;
    cr_assert_eq(input_f64_from_text(t, n, &back), 1, "'%s'", t);
    cr_assert(isnan(v) ? isnan(back) : memcmp(&back, &v, 8) == 0, "'%s'", t);
}

Test(rules, float64_text_is_the_shortest_that_reads_back)
{
    /* What Python's repr() writes for each (tests/cli/test_list_types.py
     * compares with Python itself on many more). */
    float_text(0.1, "0.1");
    float_text(1.0, "1.0");
    float_text(-0.0, "-0.0");
    float_text(2500.0, "2500.0");
    float_text(1e15, "1000000000000000.0");
    float_text(1e16, "1e+16");
    float_text(0.0001, "0.0001");
    float_text(0.00001, "1e-05");
    float_text(1.5e300, "1.5e+300");
    float_text(5e-324, "5e-324");
    float_text(1.7976931348623157e308, "1.7976931348623157e+308");
    float_text(0x1p-24, "5.960464477539063e-08"); /* a lopsided interval: not printf's 17 digits */
    float_text(NAN, "nan");
    float_text(INFINITY, "inf");
    float_text(-INFINITY, "-inf");
    const char *bad[] = {"", "1", "1e3", "0x1A", "+1.0", ".5", "5.", "1.50", "NaN", "Infinity",
                         "-nan", " 1.0", "1.0 ", "0.10000000000000001", "1E+16", "1e16", "nan(1)"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v;
        cr_assert_eq(input_f64_from_text(bad[i], strlen(bad[i]), &v), 0, "'%s' accepted", bad[i]);
    }
    /* Any double: its text reads back to the same bits. */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        memcpy(&v, &x, 8);
        if (isnan(v))
            continue;
        char t[INPUT_NUMBER_TEXT_MAX];
        size_t n = input_f64_to_text(t, v);
        double back;
        cr_assert_eq(input_f64_from_text(t, n, &back), 1, "'%s'", t);
        cr_assert_eq(memcmp(&back, &v, 8), 0, "'%s'", t);
    }
}

static const char *const g_keys[] = {"a", "b", "ab", "ba", "a/b", "b", "A", "a", "abc"};

static void key_at(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    (void)ctx;
    *key = (const uint8_t *)g_keys[id];
    *len = strlen(g_keys[id]);
}

Test(rules, key_table_finds_each_repeat_and_its_first)
{
    sf_key_table t;
    size_t n = sizeof g_keys / sizeof g_keys[0];
    cr_assert_eq(sf_key_table_init(&t, n, key_at, NULL), 0);
    uint64_t first, repeats = 0;
    for (uint64_t id = 0; id < n; id++) {
        int r = sf_key_table_add(&t, id, (const uint8_t *)g_keys[id], strlen(g_keys[id]), &first);
        cr_assert(r == 0 || r == 1);
        if (r == 1) {
            repeats++;
            cr_assert_str_eq(g_keys[first], g_keys[id]);
            cr_assert_lt(first, id);
            cr_assert_eq(first, id == 5 ? 1 : 0, "key %s: first %llu", g_keys[id], (unsigned long long)first);
        }
    }
    cr_assert_eq(repeats, 2);
    sf_key_table_free(&t);
}

/* Keys "k0", "k1", ... as one buffer of fixed-width slots: the table
 * reads them back by id when it grows. */
#define GROW_KEYS 5000
static char g_grow_keys[GROW_KEYS][8];

static void grow_key_at(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    (void)ctx;
    cr_assert_lt(id, GROW_KEYS);
    *key = (const uint8_t *)g_grow_keys[id];
    *len = strlen(g_grow_keys[id]);
}

/* Tar inputs do not know their sample count while they scan: a table made
 * for no keys grows as they come and still finds every repeat. */
Test(rules, key_table_grows_past_its_size)
{
    sf_key_table t;
    cr_assert_eq(sf_key_table_init(&t, 0, grow_key_at, NULL), 0);
    uint64_t first_mask = t.mask, first;
    for (uint64_t id = 0; id < GROW_KEYS; id++) {
        snprintf(g_grow_keys[id], sizeof g_grow_keys[id], "k%llu", (unsigned long long)id);
        int r = sf_key_table_add(&t, id, (const uint8_t *)g_grow_keys[id], strlen(g_grow_keys[id]), &first);
        cr_assert_eq(r, 0, "k%llu: %d", (unsigned long long)id, r);
    }
    cr_assert_gt(t.mask, first_mask, "the table did not grow");
    cr_assert_leq(3 * t.count, 2 * (t.mask + 1), "more than 2/3 full");
    /* Every key again: each is found, with its own id, and not added. */
    for (uint64_t id = 0; id < GROW_KEYS; id++) {
        char again[8];
        snprintf(again, sizeof again, "k%llu", (unsigned long long)id);
        cr_assert_eq(sf_key_table_add(&t, GROW_KEYS, (const uint8_t *)again, strlen(again), &first), 1, "%s",
                     again);
        cr_assert_eq(first, id, "%s: first %llu", again, (unsigned long long)first);
    }
    cr_assert_eq(t.count, GROW_KEYS);
    sf_key_table_free(&t);
}

/* Keys of ids [0, n) for the range adds: "r<id>", except that id
 * g_range_repeat (when set) repeats g_range_first's key. */
static uint64_t g_range_repeat = UINT64_MAX, g_range_first;

static void range_key_at(void *ctx, uint64_t id, const uint8_t **key, size_t *len)
{
    char(*keys)[12] = ctx;
    uint64_t of = id == g_range_repeat ? g_range_first : id;
    *key = (const uint8_t *)keys[of];
    *len = strlen(keys[of]);
}

/* Adds keys 0..n-1 as ranges of `step` ids; returns what the first
 * failing range returned (0 when none), *dup and *first from it. */
static int add_in_ranges(sf_key_table *t, uint64_t n, uint64_t step, uint64_t *dup, uint64_t *first)
{
    for (uint64_t id = 0; id < n; id += step) {
        int r = sf_key_table_add_range(t, id, n - id < step ? n - id : step, dup, first);
        if (r)
            return r;
    }
    return 0;
}

/* Dataset open adds every key through sf_key_table_add_range, which hashes
 * ahead of its adds: a repeat is found wherever it lies (inside one window
 * of look-ahead, across windows, across ranges), with the ids of both, in
 * a table in huge pages (200,000 keys: 4 MiB of slots) and in one that
 * grows. */
enum { RANGE_KEYS = 200000 };
static char g_range_keys[RANGE_KEYS][12];

Test(rules, key_table_range_finds_the_first_repeat)
{
    enum { N = RANGE_KEYS };
    char(*keys)[12] = g_range_keys;
    for (uint64_t i = 0; i < N; i++)
        snprintf(keys[i], sizeof keys[i], "r%llu", (unsigned long long)i);
    const uint64_t cases[][2] = {{1, 0}, {5, 3}, {17, 2}, {100, 99}, {150000, 7}, {N - 1, N - 2}};
    const uint64_t steps[] = {N, 1000, 3};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
            g_range_repeat = cases[c][0];
            g_range_first = cases[c][1];
            sf_key_table t;
            cr_assert_eq(sf_key_table_init(&t, k == 2 ? 0 : N, range_key_at, keys), 0);
            uint64_t dup = UINT64_MAX, first = UINT64_MAX;
            cr_assert_eq(add_in_ranges(&t, N, steps[k], &dup, &first), 1);
            cr_assert_eq(dup, cases[c][0], "step %llu: dup %llu", (unsigned long long)steps[k],
                         (unsigned long long)dup);
            cr_assert_eq(first, cases[c][1], "first %llu", (unsigned long long)first);
            cr_assert_eq(t.count, cases[c][0], "the keys before the repeat, and only they, were added");
            sf_key_table_free(&t);
        }
    }
    g_range_repeat = UINT64_MAX;
    sf_key_table t;
    cr_assert_eq(sf_key_table_init(&t, 0, range_key_at, keys), 0);
    uint64_t dup, first;
    cr_assert_eq(add_in_ranges(&t, N, 777, &dup, &first), 0);
    cr_assert_eq(t.count, N);
    cr_assert_leq(3 * t.count, 2 * (t.mask + 1), "more than 2/3 full");
    /* Every key again, one at a time: found with its own id. */
    for (uint64_t id = 0; id < N; id += 997) {
        cr_assert_eq(sf_key_table_add(&t, N, (const uint8_t *)keys[id], strlen(keys[id]), &first), 1);
        cr_assert_eq(first, id);
    }
    sf_key_table_free(&t);
}

/* The fast path of dataset open: distinct keys give distinct hashes (one
 * bucket, and 2^6 of them at 200,000 keys); a repeat anywhere, in the
 * same bucket by construction, gives equal ones. */
Test(rules, key_hashes_distinct_sees_every_repeat)
{
    for (uint64_t i = 0; i < RANGE_KEYS; i++)
        snprintf(g_range_keys[i], sizeof g_range_keys[i], "r%llu", (unsigned long long)i);
    const uint64_t sizes[] = {0, 1, 2, 100, 4096, 4097, RANGE_KEYS};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        g_range_repeat = UINT64_MAX;
        int distinct = -1;
        cr_assert_eq(sf_key_hashes_distinct(&distinct, sizes[k], range_key_at, g_range_keys), 0);
        cr_assert_eq(distinct, 1, "%llu distinct keys", (unsigned long long)sizes[k]);
        if (sizes[k] < 2)
            continue;
        const uint64_t repeats[][2] = {{1, 0}, {sizes[k] - 1, 0}, {sizes[k] / 2, sizes[k] / 2 - 1}, {sizes[k] - 1, sizes[k] - 2}};
        for (size_t r = 0; r < sizeof repeats / sizeof repeats[0]; r++) {
            g_range_repeat = repeats[r][0];
            g_range_first = repeats[r][1];
            cr_assert_eq(sf_key_hashes_distinct(&distinct, sizes[k], range_key_at, g_range_keys), 0);
            cr_assert_eq(distinct, 0, "%llu keys, %llu repeats %llu", (unsigned long long)sizes[k],
                         (unsigned long long)repeats[r][0], (unsigned long long)repeats[r][1]);
        }
    }
    g_range_repeat = UINT64_MAX;
}

Test(rules, bool_bytes)
{
    uint8_t v[40];
    for (size_t len = 0; len <= sizeof v; len++) {
        for (size_t at = 0; at <= len; at++) {
            for (size_t i = 0; i < len; i++)
                v[i] = (uint8_t)(i & 1);
            if (at < len)
                v[at] = at % 2 ? 0x81 : 2;
            cr_assert_eq(sf_first_non_bool(v, len), at < len ? at : UINT64_MAX, "len %zu at %zu", len, at);
        }
    }
}

/* A small dataset packed from two .npy samples. */
static void small_dataset(const char *in, const char *out)
{
    cr_assert_eq(mkdir(in, 0777), 0);
    for (int i = 0; i < 2; i++) {
        char p[4300];
        uint8_t img[4] = {1, 2, 3, (uint8_t)i};
        uint64_t shape[1] = {4};
        snprintf(p, sizeof p, "%s/img_%d.npy", in, i);
        unit_write_npy(p, SF_DTYPE_UINT8, 1, shape, img, sizeof img);
    }
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    cr_assert_eq(sf_pack_npy_dir(NULL, in, out, &po), 0, "%s", sf_last_error());
}

/* Leaves exactly `spare` descriptors free: under a limit of 256, every
 * free one is taken by /dev/null, then the last `spare` are given back. */
static int g_dummy[256], g_ndummy;

static void leave_spare_fds(int spare)
{
    while (g_ndummy)
        close(g_dummy[--g_ndummy]);
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = 256; /* the soft limit only: root or not, it may be set again */
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
    int fd;
    while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        g_dummy[g_ndummy++] = fd;
    cr_assert_eq(errno, EMFILE);
    for (int i = 0; i < spare; i++)
        close(g_dummy[--g_ndummy]);
}

Test(rules, out_of_file_descriptors_says_which_limit)
{
    char in[4200], ds[4200], out[4200];
    snprintf(in, sizeof in, "%s/emfile-in", g_root);
    snprintf(ds, sizeof ds, "%s/emfile-ds", g_root);
    snprintf(out, sizeof out, "%s/emfile-out", g_root);
    small_dataset(in, ds);

    leave_spare_fds(0);
    sf_verify_summary s;
    int rc = sf_verify(&s, ds, 1, NULL, NULL);
    cr_assert_eq(rc, -EMFILE, "%d %s", rc, sf_last_error());
    cr_assert(strstr(sf_last_error(), "ulimit -n"), "%s", sf_last_error());
    cr_assert_eq(sf_is_data_error(rc), 0);

    /* One spare: the dataset opens (its shard holds it), the output folder does not. */
    leave_spare_fds(1);
    uint64_t n = 99;
    rc = sf_export_npy(&n, ds, out);
    cr_assert_eq(rc, -EMFILE, "%d %s", rc, sf_last_error());
    cr_assert(strstr(sf_last_error(), "ulimit -n"), "%s", sf_last_error());
    cr_assert_eq(n, 0);
    cr_assert_neq(access(out, F_OK), 0, "a refused export left its folder");
}

/* Shard names as SF_SHARD_NAME_FMT writes them: six digits, seven from
 * 1,000,000 (up to SF_MAX_SHARDS). Parsers took six digits only ("%6u"), so
 * a dataset's shard 1,000,000 was a foreign file to pack and never an extra
 * shard to verify. */
Test(rules, shard_names_are_exactly_what_the_format_writes)
{
    const uint64_t good[] = {0, 1, 999999, 1000000, SF_MAX_SHARDS - 1};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char name[SF_SHARD_NAME_MAX];
        int n = snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)good[i]);
        cr_assert_eq(sf_shard_name_index(name, (size_t)n), (int64_t)good[i], "%s", name);
    }
    const char *bad[] = {"shard-00001.sfs",  "shard-0000001.sfs", "shard-+00001.sfs", "shard- 00001.sfs",
                         "shard-000001.sfz", "shard-000001.sfs.tmp", "Shard-000001.sfs", "shard-1048576.sfs",
                         "shard-9999999.sfs", "shard-01000000.sfs", "shard-.sfs",  "manifest.sfm"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(sf_shard_name_index(bad[i], strlen(bad[i])), -1, "%s", bad[i]);
}
