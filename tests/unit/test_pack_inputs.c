/* Unit tests of the inputs layer: the table of formats (names, detection,
 * messages), and how the packer opens input files: an input that
 * became a FIFO (or any other non-regular file) between discovery and the
 * read of its value is refused, naming it, and never waited on. Each of
 * those tests runs discovery (input_open), swaps one of the discovered
 * files for a FIFO, then reads through the format's cursor exactly as the
 * shard writer does. Opening a FIFO without O_NONBLOCK would block forever:
 * the suite's timeout turns that into a failure. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "pack_internal.h"
#include "shardfeed/error.h"
#include "unit_helpers.h"

UNIT_SCRATCH("pack-inputs-test")

TestSuite(pack_inputs, .init = scratch_init, .fini = scratch_fini, .timeout = 30);

static void path_of(char *buf, size_t cap, const char *rel)
{
    snprintf(buf, cap, "%s/%s", g_root, rel);
}

static void make_dir(const char *rel)
{
    char p[4200];
    path_of(p, sizeof p, rel);
    cr_assert_eq(mkdir(p, 0777), 0, "%s: %s", p, strerror(errno));
}

static void write_rel(const char *rel, const void *buf, size_t len)
{
    char p[4200];
    path_of(p, sizeof p, rel);
    unit_write_file(p, buf, len);
}

/* Replaces the file `rel` by a FIFO, as a user (or another program) could
 * between discovery and the read. */
static void swap_for_fifo(const char *rel)
{
    char p[4200];
    path_of(p, sizeof p, rel);
    cr_assert_eq(unlink(p), 0, "%s: %s", p, strerror(errno));
    cr_assert_eq(mkfifo(p, 0644), 0, "%s: %s", p, strerror(errno));
}

/* Discovers `rel` as `format`, swaps `swapped` for a FIFO, and reads every
 * value of every sample: the read of the swapped file must fail, naming
 * it as a FIFO. */
static void read_after_swap(const char *rel, const char *format, const char *swapped)
{
    char input[4200];
    path_of(input, sizeof input, rel);
    input_set in;
    int rc = input_open(&in, input, format);
    if (rc == SF_E_UNSUPPORTED) { /* tar inputs without libarchive */
        input_free(&in);
        cr_skip_test("%s", sf_last_error());
    }
    cr_assert_eq(rc, 0, "discovery: %s", sf_last_error());
    swap_for_fifo(swapped);
    void *cursor = NULL;
    cr_assert_eq(in.ops->cursor_open(&in, &cursor), 0);
    uint8_t buf[4096];
    int failed = 0;
    for (uint64_t s = 0; s < in.sample_count && !failed; s++)
        for (uint32_t f = 0; f < in.schema.field_count && !failed; f++) {
            cr_assert_leq(in.sizes[s * in.schema.field_count + f], sizeof buf);
            failed = in.ops->read(cursor, &in, s, f, buf) != 0;
        }
    in.ops->cursor_close(cursor);
    cr_assert(failed, "every value was read although %s is a FIFO", swapped);
    const char *msg = sf_last_error();
    cr_assert(strstr(msg, swapped) && strstr(msg, "a FIFO, not a regular file"), "message: %s", msg);
    input_free(&in);
}

Test(pack_inputs, npy_file_swapped_for_a_fifo)
{
    make_dir("npy");
    int64_t v = 7;
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/npy/label_%d.npy", g_root, i);
        unit_write_npy(p, SF_DTYPE_INT64, 0, NULL, &v, sizeof v);
    }
    read_after_swap("npy", "npy", "npy/label_2.npy");
}

Test(pack_inputs, image_swapped_for_a_fifo)
{
    make_dir("if");
    make_dir("if/cat");
    write_rel("if/cat/0.png", "png bytes", 9);
    write_rel("if/cat/1.png", "more png bytes", 14);
    read_after_swap("if", "imagefolder", "if/cat/1.png");
}

Test(pack_inputs, listed_file_swapped_for_a_fifo)
{
    make_dir("list");
    write_rel("list/a.bin", "aaaa", 4);
    write_rel("list/b.bin", "bbbbbb", 6);
    static const char csv[] = "a.bin,0\nb.bin,1\n";
    write_rel("list/list.csv", csv, sizeof csv - 1);
    read_after_swap("list/list.csv", "list", "list/b.bin");
}

Test(pack_inputs, list_that_is_a_fifo)
{
    make_dir("fifolist");
    char p[4200];
    path_of(p, sizeof p, "fifolist/list.csv");
    cr_assert_eq(mkfifo(p, 0644), 0);
    input_set in;
    cr_assert_neq(input_open(&in, p, "list"), 0);
    cr_assert(strstr(sf_last_error(), "a FIFO, not a regular file"), "message: %s", sf_last_error());
    input_free(&in);
}

/* Sets the checksum of ustar header h (again, after a change). */
static void ustar_reseal(uint8_t *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* One ustar member header for a regular file `name` of `size` bytes. */
static void ustar_header(uint8_t *h, const char *name, size_t size)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)size);
    memcpy(h + 136, "00000000000", 12);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    ustar_reseal(h);
}

/* A member `name` holding data[0, size) at `at`; returns where the next
 * header goes. */
static uint8_t *ustar_member(uint8_t *at, const char *name, const char *data, size_t size)
{
    ustar_header(at, name, size);
    memcpy(at + 512, data, size);
    return at + 512 + (size + 511) / 512 * 512;
}

Test(pack_inputs, tar_swapped_for_a_fifo)
{
    make_dir("tars");
    static uint8_t tar[512 * 6];
    memset(tar, 0, sizeof tar);
    ustar_member(ustar_member(tar, "s0.bin", "abc", 3), "s1.bin", "de", 2);
    write_rel("tars/a.tar", tar, sizeof tar);
    read_after_swap("tars/a.tar", "tar", "tars/a.tar");
}

/* ---- the table of formats ---- */

/* The format input_open picks for `rel` with --input-format auto (in.ops is
 * set also when discovery of these placeholder files then fails). */
static const input_format *detected(const char *rel)
{
    char p[4200];
    path_of(p, sizeof p, rel);
    input_set in;
    input_open(&in, p, "auto");
    const input_format *f = in.ops;
    input_free(&in);
    return f;
}

Test(pack_inputs, every_format_is_found_by_its_name)
{
    static const char *const names[] = {"npy", "imagefolder", "list", "tar"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const input_format *f = input_format_find(names[i]);
        cr_assert_not_null(f, "%s", names[i]);
        cr_assert_str_eq(f->name, names[i]);
        cr_assert(f->detect && f->discover && f->cursor_open && f->read && f->cursor_close, "%s", names[i]);
        cr_assert(f->dir_hint || f->file_hint, "%s takes neither a folder nor a file", names[i]);
    }
    cr_assert_null(input_format_find("auto"));
    cr_assert_null(input_format_find("NPY"));
}

Test(pack_inputs, an_unknown_format_lists_the_formats)
{
    input_set in;
    cr_assert_eq(input_open(&in, g_root, "parquet"), SF_E_INVALID);
    const char *msg = sf_last_error();
    cr_assert(strstr(msg, "'parquet'") && strstr(msg, "npy") && strstr(msg, "imagefolder") &&
                  strstr(msg, "list") && strstr(msg, "tar") && strstr(msg, "auto"),
              "message: %s", msg);
    input_free(&in);
}

/* Detection's message for the folder `rel`, which it must refuse. */
static const char *refused(const char *rel)
{
    static char msg[4096];
    char p[4200];
    path_of(p, sizeof p, rel);
    input_set in;
    cr_assert_eq(input_open(&in, p, "auto"), SF_E_INPUT, "%s was not refused", rel);
    cr_assert_null(in.ops, "%s: detection picked %s", rel, in.ops ? in.ops->name : "");
    snprintf(msg, sizeof msg, "%s", sf_last_error());
    input_free(&in);
    return msg;
}

/* A folder is the one format whose entries it holds: .npy files, tar
 * files or class folders. Entries of several are refused, naming each
 * format and what marked it; a folder without images does not count as a
 * class then (a folder of tars may hold other folders). */
Test(pack_inputs, detection_in_a_folder)
{
    make_dir("d1");
    make_dir("d1/c");
    write_rel("d1/x.npy", "not npy", 7);
    write_rel("d1/t.tar", "not tar", 7);
    const char *msg = refused("d1");
    cr_assert(strstr(msg, "d1: this folder holds the inputs of more than one format: npy (1 .npy file: 'x.npy') "
                          "and tar (1 tar file: 't.tar'); cannot tell which one to pack: name it with "
                          "--input-format npy or --input-format tar"),
              "message: %s", msg);
    make_dir("d2");
    make_dir("d2/c");
    make_dir("d2/logs");
    write_rel("d2/logs/run.txt", "x", 1);
    write_rel("d2/t.TAR.GZ", "not tar", 7);
    cr_assert_eq(detected("d2"), &input_format_tar);
    /* A class folder with an image, however deep: an ImageFolder too. */
    make_dir("d2/c/sub");
    write_rel("d2/c/sub/1.JPG", "x", 1);
    make_dir("d2/b");
    write_rel("d2/b/2.png", "x", 1);
    write_rel("d2/a.tar", "not tar", 7);
    msg = refused("d2");
    cr_assert(strstr(msg, "d2: this folder holds the inputs of more than one format: tar (2 tar files, e.g. "
                          "'a.tar') and imagefolder (2 class folders with images, e.g. 'b'); cannot tell which "
                          "one to pack: name it with --input-format tar or --input-format imagefolder"),
              "message: %s", msg);
    /* .npy files, tar files and classes: all three named. */
    write_rel("d2/x_0.npy", "not npy", 7);
    msg = refused("d2");
    cr_assert(strstr(msg, ": npy (1 .npy file: 'x_0.npy'), tar (2 tar files, e.g. 'a.tar') and imagefolder (2 "
                          "class folders with images, e.g. 'b'); ") &&
                  strstr(msg, "name it with --input-format npy, --input-format tar or --input-format imagefolder"),
              "message: %s", msg);
    /* A symlink loop in a folder without images ends the look. */
    make_dir("d4");
    make_dir("d4/c");
    char p[4200];
    path_of(p, sizeof p, "d4/c/up");
    cr_assert_eq(symlink("..", p), 0);
    write_rel("d4/t.tar", "not tar", 7);
    cr_assert_eq(detected("d4"), &input_format_tar);
    /* One format's entries alone: that format, as ever. */
    make_dir("d3");
    make_dir("d3/x.npy"); /* a folder, however it is named: a class */
    write_rel("d3/notes.csv", "a,b\n", 4);
    cr_assert_eq(detected("d3"), &input_format_imagefolder);
    make_dir("d5");
    write_rel("d5/x_0.npy", "not npy", 7);
    write_rel("d5/notes.txt", "x", 1);
    cr_assert_eq(detected("d5"), &input_format_npy);
    make_dir("d5/c"); /* no image: not a class, as before */
    cr_assert_eq(detected("d5"), &input_format_npy);
}

Test(pack_inputs, detection_of_a_file_by_its_name)
{
    write_rel("l.TSV", "a\t0\n", 4);
    cr_assert_eq(detected("l.TSV"), &input_format_list);
    write_rel("l.txt", "a,0\n", 4);
    cr_assert_eq(detected("l.txt"), &input_format_list);
    write_rel("s.tar.zst", "x", 1);
    cr_assert_eq(detected("s.tar.zst"), &input_format_tar);
    write_rel("x.npy", "x", 1); /* npy inputs are folders */
    cr_assert_null(detected("x.npy"));
}

Test(pack_inputs, undetected_inputs_say_what_is_looked_for)
{
    make_dir("plain");
    write_rel("plain/readme.md", "hi", 2);
    char p[4200];
    path_of(p, sizeof p, "plain");
    input_set in;
    cr_assert_eq(input_open(&in, p, NULL), SF_E_INPUT);
    cr_assert(strstr(sf_last_error(),
                     "plain: no .npy files, tar files or class folders: cannot tell the input format (name "
                     "it: the input_format option)"),
              "message: %s", sf_last_error());
    input_free(&in);
    write_rel("data.bin", "x", 1);
    path_of(p, sizeof p, "data.bin");
    cr_assert_eq(input_open(&in, p, NULL), SF_E_INPUT);
    const char *msg = sf_last_error();
    cr_assert(strstr(msg, "data.bin: cannot tell the input format from the name (a directory, ") &&
                  strstr(msg, ".tar.gz") && strstr(msg, ".tsv"),
              "message: %s", msg);
    input_free(&in);
}

/* ---- tar: what discovery accepts, the cursor reads ---- */

/* libarchive reads a header whose size field has a NUL inside its digits
 * ("0000", a NUL, "0000002": read as 0) within a tar, but will not start a
 * tar with it. Discovery reads the tar from its start and accepts it; pack then
 * enters an uncompressed tar at a sample's header, which for such a header
 * failed as "input changed while packing" on an unchanged tar (found by
 * fuzz_tar). Every value must read back, from a fresh cursor at any sample. */
Test(pack_inputs, tar_sample_at_a_header_libarchive_starts_no_tar_with)
{
    make_dir("lenient");
    static uint8_t tar[512 * 5];
    memset(tar, 0, sizeof tar);
    uint8_t *b = ustar_member(tar, "a.x", "abc", 3);
    ustar_member(b, "b.x", "", 0);
    memcpy(b + 124, "0000\0" "0000002", 12); /* size: digits, a NUL, digits */
    ustar_reseal(b);
    write_rel("lenient/l.tar", tar, sizeof tar);
    char p[4200];
    path_of(p, sizeof p, "lenient/l.tar");
    input_set in;
    cr_assert_eq(input_open(&in, p, "tar"), 0, "discovery: %s", sf_last_error());
    cr_assert_eq(in.sample_count, 2);
    cr_assert_eq(in.sizes[0], 3);
    cr_assert_eq(in.sizes[1], 0);
    for (uint64_t first = 0; first < 2; first++) {
        void *cursor = NULL;
        cr_assert_eq(in.ops->cursor_open(&in, &cursor), 0);
        for (uint64_t s = first; s < 2; s++) {
            uint8_t buf[8] = {0};
            cr_assert_eq(in.ops->read(cursor, &in, s, 0, buf), 0, "sample %llu (cursor from %llu): %s",
                         (unsigned long long)s, (unsigned long long)first, sf_last_error());
            cr_assert_eq(memcmp(buf, s == 0 ? "abc" : "", s == 0 ? 3 : 0), 0);
        }
        in.ops->cursor_close(cursor);
    }
    input_free(&in);
}

/* pack --image-max-side stores a re-encoded image at another size than its
 * member's, and sets in->sizes to it. A cursor still reads each sample's
 * members together, so it must check them against the sizes discovery
 * found: an unchanged tar reads (this failed as "input changed while
 * packing"), a member that did change is still refused. */
Test(pack_inputs, tar_members_checked_against_their_discovered_sizes)
{
    make_dir("reenc");
    static uint8_t tar[512 * 10];
    memset(tar, 0, sizeof tar);
    uint8_t *b = ustar_member(tar, "a.jpg", "AAAAA", 5);
    b = ustar_member(b, "a.cls", "1", 1);
    b = ustar_member(b, "b.jpg", "BBBBB", 5);
    ustar_member(b, "b.cls", "2", 1);
    write_rel("reenc/t.tar", tar, sizeof tar);
    char p[4200];
    path_of(p, sizeof p, "reenc/t.tar");
    input_set in;
    int rc = input_open(&in, p, "tar");
    if (rc == SF_E_UNSUPPORTED) {
        input_free(&in);
        cr_skip_test("%s", sf_last_error());
    }
    cr_assert_eq(rc, 0, "discovery: %s", sf_last_error());
    cr_assert_eq(in.sample_count, 2);
    cr_assert_str_eq(in.schema.fields[0].name, "cls");
    cr_assert_str_eq(in.schema.fields[1].name, "jpg");
    in.sizes[0 * 2 + 1] = 3; /* both images re-encoded, as pack_images_prepare leaves them */
    in.sizes[1 * 2 + 1] = 4;
    void *cursor = NULL;
    cr_assert_eq(in.ops->cursor_open(&in, &cursor), 0);
    for (uint64_t s = 0; s < 2; s++) {
        char v = 0;
        cr_assert_eq(in.ops->read(cursor, &in, s, 0, (uint8_t *)&v), 0, "sample %llu: %s", (unsigned long long)s,
                     sf_last_error());
        cr_assert_eq(v, s == 0 ? '1' : '2');
    }
    /* A re-encoded value is the spool's: never read from the tar. */
    uint8_t img[8];
    cr_assert_eq(in.ops->read(cursor, &in, 1, 1, img), SF_E_STATE);
    in.ops->cursor_close(cursor);
    /* a.jpg grows by a byte (within its block, so every offset holds). */
    ustar_member(tar, "a.jpg", "AAAAAA", 6);
    write_rel("reenc/t.tar", tar, sizeof tar);
    cr_assert_eq(in.ops->cursor_open(&in, &cursor), 0);
    char v = 0;
    cr_assert_eq(in.ops->read(cursor, &in, 0, 0, (uint8_t *)&v), SF_E_INPUT);
    cr_assert(strstr(sf_last_error(), "member 'a.jpg': input changed while packing"), "message: %s",
              sf_last_error());
    in.ops->cursor_close(cursor);
    input_free(&in);
}
