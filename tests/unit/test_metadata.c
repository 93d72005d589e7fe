/* The format layer's manifest metadata (lib/format/metadata.h): the builder,
 * the iterator, the checks on untrusted bytes and the typed readers of the
 * keys SPEC.md defines, in one place for writers (pack, merge) and readers
 * (dataset open). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "metadata.h"

static sf_manifest with(const sf_metadata_builder *b)
{
    sf_manifest m;
    memset(&m, 0, sizeof m);
    m.metadata = b->buf;
    m.metadata_size = b->size;
    return m;
}

Test(metadata, built_entries_check_iterate_and_read_back)
{
    sf_metadata_builder b = {0};
    char *names[] = {"cat", "dog", "Größe"};
    sf_part_info part = {.index = 1, .count = 3, .whole_dataset_id = 77, .whole_records = 1000,
                         .whole_shards = 9, .first_record = 300, .first_shard = 3, .has_input = 1,
                         .files_hash = 5, .values_hash = 6};
    cr_assert_eq(sf_metadata_add(&b, "source", "imagefolder", 11), 0);
    cr_assert_eq(sf_metadata_add_class_names(&b, names, 3), 0);
    cr_assert_eq(sf_metadata_add_part(&b, &part), 0);
    cr_assert_eq(sf_metadata_add(&b, "mine", "", 0), 0);
    cr_assert_eq(sf_metadata_check(b.buf, b.size), 0, "%s", sf_last_error());

    sf_manifest m = with(&b);
    char source[33];
    sf_metadata_source(source, &m);
    cr_assert_str_eq(source, "imagefolder");
    sf_class_name *cls;
    uint32_t n;
    cr_assert_eq(sf_metadata_class_names(&cls, &n, &m), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(cls[2].len, strlen("Größe"));
    cr_assert_eq(memcmp(cls[2].name, "Größe", cls[2].len), 0);
    free(cls);
    sf_part_info got;
    cr_assert_eq(sf_metadata_part(&got, &m), 1);
    cr_assert_eq(memcmp(&got, &part, sizeof got), 0);

    const char *want[] = {"source", "class_names", "part", "part_input", "mine"};
    sf_metadata_iter it;
    const uint8_t *k, *v;
    uint32_t kl, vl, i = 0;
    sf_metadata_iter_init(&it, b.buf, b.size);
    while (sf_metadata_next(&it, &k, &kl, &v, &vl)) {
        cr_assert_lt(i, 5);
        cr_assert_eq(kl, strlen(want[i]));
        cr_assert_eq(memcmp(k, want[i], kl), 0);
        cr_assert_eq(sf_metadata_is_part_key(k, kl), i == 2 || i == 3);
        i++;
    }
    cr_assert_eq(i, 5);
    sf_metadata_builder_free(&b);
}

Test(metadata, absent_keys_read_as_absent)
{
    sf_metadata_builder b = {0};
    cr_assert_eq(sf_metadata_add(&b, "other", "x", 1), 0);
    sf_manifest m = with(&b);
    char source[33];
    sf_metadata_source(source, &m);
    cr_assert_str_eq(source, "");
    sf_class_name *cls;
    uint32_t n;
    cr_assert_eq(sf_metadata_class_names(&cls, &n, &m), 0);
    cr_assert_null(cls);
    cr_assert_eq(n, 0);
    sf_part_info p;
    cr_assert_eq(sf_metadata_part(&p, &m), 0);
    sf_metadata_builder_free(&b);
}

Test(metadata, writers_refuse_what_readers_would_reject)
{
    sf_metadata_builder b = {0};
    char *bad[] = {"a/b"}, *dots[] = {".."};
    cr_assert_eq(sf_metadata_add_class_names(&b, bad, 1), SF_E_INVALID);
    cr_assert_eq(sf_metadata_add_class_names(&b, dots, 1), SF_E_INVALID);
    cr_assert_eq(sf_metadata_add(&b, "", "x", 1), SF_E_INVALID);
    char long_key[300];
    memset(long_key, 'k', 299);
    long_key[299] = '\0';
    cr_assert_eq(sf_metadata_add(&b, long_key, "x", 1), SF_E_INVALID);
    cr_assert_eq(b.size, 0);
    sf_metadata_builder_free(&b);
}

Test(metadata, a_repeated_key_is_corrupt_wherever_it_is)
{
    sf_metadata_builder b = {0};
    cr_assert_eq(sf_metadata_add(&b, "k1", "a", 1), 0);
    for (int i = 0; i < 1000; i++) {
        char key[16];
        snprintf(key, sizeof key, "x%d", i);
        cr_assert_eq(sf_metadata_add(&b, key, "", 0), 0);
    }
    cr_assert_eq(sf_metadata_check(b.buf, b.size), 0);
    cr_assert_eq(sf_metadata_add(&b, "k1", "b", 1), 0);
    cr_assert_eq(sf_metadata_check(b.buf, b.size), SF_E_CORRUPT);
    cr_assert(strstr(sf_last_error(), "appears twice"), "%s", sf_last_error());
    sf_metadata_builder_free(&b);
}

/* The largest metadata a manifest may hold, in the smallest entries: 16 MiB
 * of distinct 3-byte keys, 1.5 million entries. The check used to compare
 * every pair (10^12 comparisons: a manifest that hangs every reader); it
 * sorts now. */
Test(metadata, a_full_metadata_area_of_tiny_entries_is_checked, .timeout = 120)
{
    uint32_t n = SF_MAX_METADATA / 11, size = n * 11;
    uint8_t *p = malloc(size);
    cr_assert_not_null(p);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = p + (uint64_t)i * 11;
        sf_put_le32(e, 3);
        sf_put_le32(e + 4, 0);
        e[8] = (uint8_t)(i >> 16);
        e[9] = (uint8_t)(i >> 8);
        e[10] = (uint8_t)i;
    }
    cr_assert_eq(sf_metadata_check(p, size), 0, "%s", sf_last_error());
    p[(uint64_t)(n - 1) * 11 + 10] = p[10]; /* the last key now repeats the first */
    p[(uint64_t)(n - 1) * 11 + 9] = p[9];
    p[(uint64_t)(n - 1) * 11 + 8] = p[8];
    cr_assert_eq(sf_metadata_check(p, size), SF_E_CORRUPT);
    free(p);
}

Test(metadata, untrusted_framing_is_refused)
{
    uint8_t e[16];
    sf_put_le32(e, 4);
    sf_put_le32(e + 4, 100); /* value runs past the end */
    memcpy(e + 8, "keyX", 4);
    cr_assert_eq(sf_metadata_check(e, 12), SF_E_CORRUPT);
    sf_put_le32(e, 0); /* empty key */
    sf_put_le32(e + 4, 0);
    cr_assert_eq(sf_metadata_check(e, 8), SF_E_CORRUPT);
    cr_assert_eq(sf_metadata_check(e, 5), SF_E_CORRUPT); /* header cut */
    sf_put_le32(e, 4); /* "part" of the wrong size */
    sf_put_le32(e + 4, 4);
    memcpy(e + 8, "part", 4);
    memset(e + 12, 0, 4);
    cr_assert_eq(sf_metadata_check(e, 16), SF_E_CORRUPT);
}

/* "part_files" (format 1.3): the names and sizes hashes, and a list
 * input's list file, read back as written and dropped by a merge; a value
 * of another length, or a list name that is empty, too long or holds a
 * NUL, is corrupt. */
Test(metadata, part_files_reads_back_and_bad_values_are_corrupt)
{
    sf_part_info part = {.index = 0, .count = 2, .whole_dataset_id = 7, .whole_records = 10,
                         .whole_shards = 2, .has_input = 1, .files_hash = 1, .values_hash = 2,
                         .has_files = 1, .names_hash = 3, .sizes_hash = 4},
                 got;
    for (int list = 0; list < 2; list++) {
        sf_metadata_builder b = {0};
        if (list) {
            part.has_list = 1;
            part.list_size = 1234;
            part.list_hash = 5;
            strcpy(part.list_name, "list.csv");
        }
        cr_assert_eq(sf_metadata_add_part(&b, &part), 0);
        cr_assert_eq(sf_metadata_check(b.buf, b.size), 0, "%s", sf_last_error());
        sf_manifest m = with(&b);
        const uint8_t *v;
        uint32_t len;
        cr_assert_eq(sf_metadata_find(&v, &len, &m, "part_files"), 1);
        cr_assert_eq(len, list ? 32 + strlen("list.csv") : 16);
        cr_assert_eq(sf_metadata_is_part_key((const uint8_t *)"part_files", 10), 1);
        cr_assert_eq(sf_metadata_part(&got, &m), 1);
        cr_assert_eq(got.has_files, 1);
        cr_assert_eq(got.names_hash, 3);
        cr_assert_eq(got.sizes_hash, 4);
        cr_assert_eq(got.has_list, list);
        cr_assert_eq(got.list_size, list ? 1234 : 0);
        cr_assert_eq(got.list_hash, list ? 5 : 0);
        cr_assert_str_eq(got.list_name, list ? "list.csv" : "");
        sf_metadata_builder_free(&b);
    }
    /* Without has_files (a writer of 1.2): no entry, and read back so. */
    sf_metadata_builder b = {0};
    part.has_files = 0;
    cr_assert_eq(sf_metadata_add_part(&b, &part), 0);
    sf_manifest m = with(&b);
    cr_assert_eq(sf_metadata_part(&got, &m), 1);
    cr_assert_eq(got.has_input, 1);
    cr_assert_eq(got.has_files, 0);
    cr_assert_eq(got.has_list, 0);
    sf_metadata_builder_free(&b);

    uint8_t v[40] = {0};
    uint32_t bad[] = {0, 8, 24, 32};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sf_metadata_builder c = {0};
        cr_assert_eq(sf_metadata_add(&c, "part_files", v, bad[i]), 0);
        cr_assert_eq(sf_metadata_check(c.buf, c.size), SF_E_CORRUPT, "%u bytes", bad[i]);
        cr_assert(strstr(sf_last_error(), "part_files"), "%s", sf_last_error());
        sf_metadata_builder_free(&c);
    }
    memcpy(v + 32, "a\0c", 3); /* a NUL in the name */
    sf_metadata_builder d = {0};
    cr_assert_eq(sf_metadata_add(&d, "part_files", v, 35), 0);
    cr_assert_eq(sf_metadata_check(d.buf, d.size), SF_E_CORRUPT);
    sf_metadata_builder_free(&d);
    uint8_t *big = calloc(1, 32 + 256);
    memset(big + 32, 'n', 256);
    sf_metadata_builder e = {0};
    cr_assert_eq(sf_metadata_add(&e, "part_files", big, 32 + 255), 0);
    cr_assert_eq(sf_metadata_check(e.buf, e.size), 0, "%s", sf_last_error());
    sf_metadata_builder_free(&e);
    cr_assert_eq(sf_metadata_add(&e, "part_files", big, 32 + 256), 0);
    cr_assert_eq(sf_metadata_check(e.buf, e.size), SF_E_CORRUPT);
    sf_metadata_builder_free(&e);
    free(big);
    /* A writer never writes a name it could not read back. */
    sf_metadata_builder f = {0};
    part.has_files = part.has_list = 1;
    part.list_name[0] = '\0';
    cr_assert_eq(sf_metadata_add_part(&f, &part), SF_E_INVALID);
    sf_metadata_builder_free(&f);
}

/* "image_reencode" (pack --image-max-side): read back as written; a value of
 * another length, a side of 0 or a quality outside 1..100 is corrupt. */
Test(metadata, image_reencode_reads_back_and_bad_values_are_corrupt)
{
    sf_metadata_builder b = {0};
    sf_image_reencode r = {.max_side = 256, .quality = 90, .count = 1234567890123ull}, got;
    cr_assert_eq(sf_metadata_add_image_reencode(&b, &r), 0);
    cr_assert_eq(sf_metadata_check(b.buf, b.size), 0, "%s", sf_last_error());
    sf_manifest m = with(&b);
    cr_assert_eq(sf_metadata_image_reencode(&got, &m), 1);
    cr_assert_eq(memcmp(&got, &r, sizeof got), 0);
    sf_metadata_builder_free(&b);

    const uint32_t bad[][2] = {{0, 90}, {256, 0}, {256, 101}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sf_metadata_builder c = {0};
        sf_image_reencode v = {bad[i][0], bad[i][1], 1};
        cr_assert_eq(sf_metadata_add_image_reencode(&c, &v), 0);
        cr_assert_eq(sf_metadata_check(c.buf, c.size), SF_E_CORRUPT, "side %u quality %u", bad[i][0], bad[i][1]);
        cr_assert(strstr(sf_last_error(), "image_reencode"), "%s", sf_last_error());
        sf_metadata_builder_free(&c);
    }
    sf_metadata_builder d = {0};
    cr_assert_eq(sf_metadata_add(&d, "image_reencode", "0123456789abcde", 15), 0);
    cr_assert_eq(sf_metadata_check(d.buf, d.size), SF_E_CORRUPT);
    sf_metadata_builder_free(&d);
}
