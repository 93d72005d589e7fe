/* The public API's conventions, checked across the library: one way to
 * check an options struct's version, one table of option bounds that the
 * library enforces (shardfeed/params.h), the vocabulary's names. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "shardfeed/shardfeed.h"
#include "shardfeed_config.h"

Test(api, every_options_struct_takes_versions_1_to_newest_and_refuses_others)
{
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
    sf_reader_opts ro = SF_READER_OPTS_INIT;
    const unsigned bad[] = {0, 99};
    for (size_t i = 0; i < 2; i++) {
        po.version = vo.version = ro.version = bad[i];
        cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "/nonexistent-out", &po), SF_E_INVALID);
        cr_assert(strstr(sf_last_error(), "sf_pack_opts.version"), "%s", sf_last_error());
        cr_assert_eq(sf_verify_ex(NULL, "/nonexistent", &vo, NULL, NULL), SF_E_INVALID);
        cr_assert(strstr(sf_last_error(), "sf_verify_opts.version"), "%s", sf_last_error());
        sf_reader *r = NULL;
        cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
        cr_assert(strstr(sf_last_error(), "sf_reader_opts.version"), "%s", sf_last_error());
    }
}

Test(api, every_param_has_a_name_and_a_range)
{
    for (int p = 0; p < SF_PARAM_COUNT; p++) {
        sf_bounds b;
        cr_assert_eq(sf_param_bounds(&b, (sf_param)p), 0);
        cr_assert_leq(b.min, b.max, "param %d", p);
        const char *name = sf_param_name((sf_param)p);
        cr_assert_not_null(name);
        /* a member's spelling, as messages and Python's bounds keys show it */
        cr_assert_eq(strspn(name, "abcdefghijklmnopqrstuvwxyz_"), strlen(name), "%s", name);
    }
    sf_bounds b;
    cr_assert_eq(sf_param_bounds(&b, SF_PARAM_COUNT), SF_E_INVALID);
    cr_assert_eq(sf_param_bounds(&b, (sf_param)-1), SF_E_INVALID);
    cr_assert_null(sf_param_name(SF_PARAM_COUNT));
    cr_assert_eq(sf_param_bounds(&b, SF_PARAM_PACK_ZSTD_LEVEL), 0);
    cr_assert_eq(b.min, SF_PACK_MIN_ZSTD_LEVEL);
    cr_assert_eq(b.max, SF_PACK_MAX_ZSTD_LEVEL);
    cr_assert_str_eq(sf_param_name(SF_PARAM_PACK_ZSTD_LEVEL), "zstd_level");
}

/* What the table says is what the library enforces: one past the bound is
 * refused naming the option, the bound itself passes the check (and then
 * fails later, on the missing input). */
Test(api, the_library_enforces_the_bounds_it_publishes)
{
    sf_bounds b;
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_PACK_JOBS);
    po.jobs = (unsigned)b.max + 1;
    cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "/tmp/sf-api-out-never", &po), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "jobs"), "%s", sf_last_error());
    po.jobs = (unsigned)b.max;
    cr_assert_neq(sf_pack(NULL, "/nonexistent-in", "/tmp/sf-api-out-never", &po), SF_E_INVALID);

    po = (sf_pack_opts)SF_PACK_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_PACK_ALIGN);
    po.align = (uint32_t)b.max * 2;
    cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "/tmp/sf-api-out-never", &po), SF_E_INVALID);

    po = (sf_pack_opts)SF_PACK_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_PACK_PARTS);
    po.part_count = (uint32_t)b.max + 1;
    cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "/tmp/sf-api-out-never", &po), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "part_count"), "%s", sf_last_error());

    sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_VERIFY_JOBS);
    vo.jobs = (unsigned)b.max + 1;
    cr_assert_eq(sf_verify_ex(NULL, "/nonexistent", &vo, NULL, NULL), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "jobs"), "%s", sf_last_error());

    sf_reader_opts ro = SF_READER_OPTS_INIT;
    sf_reader *r = NULL;
    sf_param_bounds(&b, SF_PARAM_READER_BATCH_SIZE);
    ro.batch_size = (uint32_t)b.max + 1;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "batch_size"), "%s", sf_last_error());
    ro = (sf_reader_opts)SF_READER_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_READER_PREFETCH);
    ro.prefetch = (uint32_t)b.max + 1;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    ro = (sf_reader_opts)SF_READER_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_READER_IO_THREADS);
    ro.io_threads = (uint32_t)b.max + 1;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    ro = (sf_reader_opts)SF_READER_OPTS_INIT;
    sf_param_bounds(&b, SF_PARAM_READER_QUEUE_DEPTH);
    ro.queue_depth = (uint32_t)b.max + 1;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    /* a CPU reader's negative ordinal is named as such, not as a bad device */
    ro = (sf_reader_opts)SF_READER_OPTS_INIT;
    ro.device_index = -1;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "device_index -1"), "%s", sf_last_error());
    ro = (sf_reader_opts)SF_READER_OPTS_INIT;
    ro.device = 7;
    cr_assert_eq(sf_reader_open(&r, "/nonexistent", &ro), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "device 7: expected cpu"), "%s", sf_last_error());
}

/* Arguments the bounds table does not cover, refused before anything is
 * made or allocated: an empty output path (make_parents read past its NUL,
 * valgrind's "uninitialised value"), more parts than a pack makes (a calloc
 * of n_parts first: an overflow abort under ASan), merge flags no one
 * defines and a part_index without part_count (ignored before). */
Test(api, bad_pack_and_merge_arguments_are_refused_first)
{
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "", &po), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "the output folder's path is empty"), "%s", sf_last_error());
    const char *parts[] = {"/nonexistent-part"};
    cr_assert_eq(sf_pack_merge(NULL, parts, 1, "", 0), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "the output folder's path is empty"), "%s", sf_last_error());
    cr_assert_eq(sf_pack_merge(NULL, parts, SIZE_MAX, "/tmp/sf-api-out-never", 0), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "more than a pack makes"), "%s", sf_last_error());
    cr_assert_eq(sf_pack_merge(NULL, parts, 1, "/tmp/sf-api-out-never", 0xff00), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "unknown flags 0xff00"), "%s", sf_last_error());
    sf_dataset *ds = NULL;
    cr_assert_eq(sf_dataset_open(&ds, ""), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "the path is empty"), "%s", sf_last_error());
    cr_assert_null(ds);
    po.part_index = 5;
    cr_assert_eq(sf_pack(NULL, "/nonexistent-in", "/tmp/sf-api-out-never", &po), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "part_index 5 without part_count"), "%s", sf_last_error());
}

Test(api, a_null_out_is_named_as_such)
{
    cr_assert_eq(sf_param_bounds(NULL, SF_PARAM_READER_BATCH_SIZE), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "out is NULL"), "%s", sf_last_error());
    sf_bounds b;
    cr_assert_eq(sf_param_bounds(&b, SF_PARAM_COUNT), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "no parameter"), "%s", sf_last_error());
}

Test(api, every_error_code_has_its_own_description)
{
    for (int a = SF_E_BASE; a >= SF_E_LAST; a--) {
        cr_assert_str_neq(sf_strerror(a), "unknown error", "%d", a);
        for (int b = a - 1; b >= SF_E_LAST; b--)
            cr_assert_str_neq(sf_strerror(a), sf_strerror(b), "%d and %d", a, b);
    }
    cr_assert_str_eq(sf_strerror(SF_E_LAST - 1), "unknown error");
    cr_assert_str_eq(sf_strerror(SF_E_DEVICE), "device (CUDA) call failed");
}

Test(api, vocabulary_names)
{
    cr_assert_str_eq(sf_dtype_name(SF_DTYPE_FLOAT32), "float32");
    cr_assert_eq(sf_dtype_size(SF_DTYPE_COMPLEX128), 16);
    cr_assert_str_eq(sf_dtype_npy_descr(SF_DTYPE_UINT16), "<u2");
    cr_assert_null(sf_dtype_name(SF_DTYPE_COUNT));
    cr_assert_eq(sf_dtype_size(-1), 0);
    cr_assert_str_eq(sf_storage_name(SF_STORAGE_VARIABLE), "variable");
    cr_assert_null(sf_storage_name(SF_STORAGE_COUNT));
    cr_assert_str_eq(sf_codec_name(SF_CODEC_ZSTD), "zstd");
    cr_assert_null(sf_codec_name(SF_CODEC_COUNT));
}

Test(api, features_say_what_the_build_has)
{
    cr_expect_eq(sf_has_feature("uring"), 1);
    cr_expect_eq(sf_has_feature("remote"), SF_HAVE_REMOTE, "\"remote\" is libcurl at build time");
    cr_expect_eq(sf_has_feature("no-such-feature"), 0);
    cr_expect_eq(sf_has_feature(NULL), 0);
}
