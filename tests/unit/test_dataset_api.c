/* The random-access API's refusals (lib/dataset/dataset.c,
 * dataset_metadata.c): a NULL argument is SF_E_INVALID whose message names
 * the function and the argument, and a sample, field or shard out of range
 * says which and how many there are. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtype.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

static char g_root[4096];
static char g_dir[4200];
static sf_dataset *g_ds;

static void ds_init(void)
{
    snprintf(g_root, sizeof g_root, "dataset-api-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root), "mkdtemp: %s", strerror(errno));
    char in[4200];
    snprintf(in, sizeof in, "%s/npy", g_root);
    snprintf(g_dir, sizeof g_dir, "%s/ds", g_root);
    cr_assert_eq(mkdir(in, 0755), 0);
    for (uint64_t k = 0; k < 4; k++) {
        char path[4300];
        uint8_t img[16];
        uint64_t n = sizeof img;
        memset(img, (int)k, sizeof img);
        snprintf(path, sizeof path, "%s/img_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_UINT8, 1, &n, img, sizeof img);
        int64_t label = (int64_t)k;
        snprintf(path, sizeof path, "%s/label_%llu.npy", in, (unsigned long long)k);
        unit_write_npy(path, SF_DTYPE_INT64, 0, NULL, &label, sizeof label);
    }
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.jobs = 1;
    sf_pack_result res;
    cr_assert_eq(sf_pack_npy_dir(&res, in, g_dir, &po), 0, "pack: %s", sf_last_error());
    cr_assert_eq(sf_dataset_open(&g_ds, g_dir), 0, "%s", sf_last_error());
}

static void ds_fini(void)
{
    sf_dataset_close(g_ds);
    g_ds = NULL;
    unit_rm_tree(g_root);
}

TestSuite(dataset_api, .init = ds_init, .fini = ds_fini, .timeout = 60);

/* rc is SF_E_INVALID and the message holds `want`. */
#define EXPECT_REFUSED(rc, want)                                                                \
    do {                                                                                        \
        int rc_ = (rc);                                                                         \
        cr_expect_eq(rc_, SF_E_INVALID, "%s: rc %d", #rc, rc_);                                 \
        cr_expect(strstr(sf_last_error(), (want)) != NULL, "%s: '%s' lacks '%s'", #rc,          \
                  sf_last_error(), (want));                                                     \
    } while (0)

Test(dataset_api, a_null_argument_is_named)
{
    sf_dataset *ds = g_ds, *none = NULL;
    sf_field_info fi;
    sf_shard_info si;
    const char *key;
    const void *data;
    size_t len;
    uint64_t size;
    uint8_t buf[64];

    EXPECT_REFUSED(sf_dataset_open(NULL, g_dir), "sf_dataset_open: out is NULL");
    EXPECT_REFUSED(sf_dataset_open(&none, NULL), "sf_dataset_open: dir is NULL");

    EXPECT_REFUSED(sf_dataset_field(NULL, ds, 0), "sf_dataset_field: out is NULL");
    EXPECT_REFUSED(sf_dataset_field(&fi, NULL, 0), "sf_dataset_field: ds is NULL");

    EXPECT_REFUSED(sf_dataset_shard(NULL, ds, 0), "sf_dataset_shard: out is NULL");
    EXPECT_REFUSED(sf_dataset_shard(&si, NULL, 0), "sf_dataset_shard: ds is NULL");

    EXPECT_REFUSED(sf_dataset_key(NULL, &len, ds, 0), "sf_dataset_key: key is NULL");
    EXPECT_REFUSED(sf_dataset_key(&key, NULL, ds, 0), "sf_dataset_key: len is NULL");
    EXPECT_REFUSED(sf_dataset_key(&key, &len, NULL, 0), "sf_dataset_key: ds is NULL");

    EXPECT_REFUSED(sf_dataset_get(NULL, &size, ds, 0, 0, 0), "sf_dataset_get: data is NULL");
    EXPECT_REFUSED(sf_dataset_get(&data, NULL, ds, 0, 0, 0), "sf_dataset_get: size is NULL");
    EXPECT_REFUSED(sf_dataset_get(&data, &size, NULL, 0, 0, 0), "sf_dataset_get: ds is NULL");

    EXPECT_REFUSED(sf_dataset_value_size(NULL, ds, 0, 0), "sf_dataset_value_size: size is NULL");
    EXPECT_REFUSED(sf_dataset_value_size(&size, NULL, 0, 0), "sf_dataset_value_size: ds is NULL");

    EXPECT_REFUSED(sf_dataset_read_value(buf, sizeof buf, NULL, ds, 0, 0, 0),
                   "sf_dataset_read_value: size is NULL");
    EXPECT_REFUSED(sf_dataset_read_value(buf, sizeof buf, &size, NULL, 0, 0, 0),
                   "sf_dataset_read_value: ds is NULL");
    EXPECT_REFUSED(sf_dataset_read_value(NULL, 16, &size, ds, 0, 0, 0),
                   "sf_dataset_read_value: dst is NULL but cap is 16");

    EXPECT_REFUSED(sf_dataset_class_name(NULL, &len, ds, 0), "sf_dataset_class_name: name is NULL");
    EXPECT_REFUSED(sf_dataset_class_name(&key, NULL, ds, 0), "sf_dataset_class_name: len is NULL");
    EXPECT_REFUSED(sf_dataset_class_name(&key, &len, NULL, 0), "sf_dataset_class_name: ds is NULL");

    EXPECT_REFUSED(sf_dataset_metadata(NULL, &len, ds, "k"), "sf_dataset_metadata: value is NULL");
    EXPECT_REFUSED(sf_dataset_metadata(&data, NULL, ds, "k"), "sf_dataset_metadata: len is NULL");
    EXPECT_REFUSED(sf_dataset_metadata(&data, &len, NULL, "k"), "sf_dataset_metadata: ds is NULL");
    EXPECT_REFUSED(sf_dataset_metadata(&data, &len, ds, NULL), "sf_dataset_metadata: key is NULL");
}

Test(dataset_api, remote_retries_past_the_cap_are_refused_before_any_request)
{
    sf_remote_opts o = SF_REMOTE_OPTS_INIT;
    o.retries = UINT32_MAX; /* counted with the first attempt, it would wrap: no end */
    sf_dataset *ds = NULL;
    cr_assert_eq(sf_dataset_open_ex(&ds, "http://127.0.0.1:9/ds", &o), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "remote retries 4294967295: at most 100"), "%s",
              sf_last_error());
    cr_assert_null(ds);
}

/* A folder uses none of them, but a wrong struct is the caller's bug either way. */
Test(dataset_api, remote_options_are_checked_for_a_folder_too)
{
    sf_remote_opts o = SF_REMOTE_OPTS_INIT;
    o.version = 7;
    sf_dataset *ds = NULL;
    cr_assert_eq(sf_dataset_open_ex(&ds, g_dir, &o), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "sf_remote_opts"), "%s", sf_last_error());
    cr_assert_null(ds);
    o.version = SF_REMOTE_OPTS_VERSION;
    o.mode = 5;
    cr_assert_eq(sf_dataset_open_ex(&ds, g_dir, &o), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "remote mode 5"), "%s", sf_last_error());
    o.mode = SF_REMOTE_DIRECT;
    cr_assert_eq(sf_dataset_open_ex(&ds, g_dir, &o), 0, "%s", sf_last_error());
    sf_dataset_close(ds);
}

Test(dataset_api, out_of_range_says_which_and_how_many)
{
    sf_dataset *ds = g_ds;
    sf_field_info fi;
    sf_shard_info si;
    const char *key;
    const void *data;
    size_t len;
    uint64_t size;
    uint8_t buf[64];
    uint64_t shards = sf_dataset_num_shards(ds);
    char want[128];

    EXPECT_REFUSED(sf_dataset_field(&fi, ds, 2), "sf_dataset_field: no field 2 (the dataset has 2)");
    snprintf(want, sizeof want, "sf_dataset_shard: no shard %llu (the dataset has %llu)",
             (unsigned long long)shards, (unsigned long long)shards);
    EXPECT_REFUSED(sf_dataset_shard(&si, ds, shards), want);
    EXPECT_REFUSED(sf_dataset_key(&key, &len, ds, 4), "sf_dataset_key: no sample 4 (the dataset has 4)");
    EXPECT_REFUSED(sf_dataset_get(&data, &size, ds, 4, 0, 0), "sf_dataset_get: no sample 4 (the dataset has 4)");
    EXPECT_REFUSED(sf_dataset_get(&data, &size, ds, 0, 2, 0), "sf_dataset_get: no field 2 (the dataset has 2)");
    EXPECT_REFUSED(sf_dataset_value_size(&size, ds, 0, 9), "sf_dataset_value_size: no field 9");
    EXPECT_REFUSED(sf_dataset_read_value(buf, sizeof buf, &size, ds, 7, 0, 0),
                   "sf_dataset_read_value: no sample 7");
    /* In range, all is well. */
    cr_assert_eq(sf_dataset_read_value(buf, sizeof buf, &size, ds, 3, 0, 1), 0, "%s", sf_last_error());
    cr_assert_eq(size, 16);
    cr_assert_eq(buf[0], 3);
}

/* A folder path too long for "<dir>/manifest.sfm" to fit is refused as
 * such: cut short, it named another file (here "<dir>/manifest.", which
 * is not there: "no manifest"). */
Test(dataset_api, a_folder_path_too_long_for_the_manifest_is_refused)
{
    for (size_t len = 4080; len <= 4100; len++) {
        char *dir = malloc(len + 1);
        cr_assert_not_null(dir);
        for (size_t i = 0; i < len; i++)
            dir[i] = i % 2 ? '/' : 'd';
        dir[len] = '\0';
        sf_dataset *ds = NULL;
        int rc = sf_dataset_open(&ds, dir);
        cr_assert_null(ds);
        if (len + strlen("/manifest.sfm") < 4096) {
            cr_expect_eq(rc, -ENOENT, "%zu: %s", len, sf_last_error());
        } else {
            cr_expect_eq(rc, -ENAMETOOLONG, "%zu: %d %s", len, rc, sf_last_error());
            cr_expect(strstr(sf_last_error(), "the folder's path is too long"), "%zu: %s", len,
                      sf_last_error());
        }
        free(dir);
    }
}
