/* The check of a cache's download as its bytes arrive (lib/dataset/
 * download_check.h), driven here as remote_pool_fetch_to_fd drives it:
 * parts of the file begun and fed in pieces, then finished against the
 * file written. Every damaged byte of the data area is found, whatever the
 * parts' edges (records cut by an edge are read back from the file), with
 * the same damage digest; a part fetched again from its start is checked
 * again; bytes fed out of order are checked from the file instead. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "download_check.h"
#include "shard_file.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("download-check-test")

TestSuite(download_check, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

#define SAMPLES 60

/* One shard of SAMPLES records of varied lengths (list input: bytes +
 * label), its metadata as open reads it, its bytes, and a copy of it as
 * the "download" (fd) that the tests damage. */
typedef struct fixture {
    sf_manifest mf;
    sf_shard_meta meta;
    sf_shard_expect exp;
    uint8_t *bytes;
    uint64_t size;
    int fd;
} fixture;

static void fixture_open(fixture *fx)
{
    char in[4200], ds[4200], path[4400];
    snprintf(in, sizeof in, "%s/in", g_root);
    snprintf(ds, sizeof ds, "%s/ds", g_root);
    cr_assert_eq(mkdir(in, 0755), 0);
    snprintf(path, sizeof path, "%s/list.csv", in);
    FILE *list = fopen(path, "w");
    cr_assert_not_null(list);
    uint8_t v[3000];
    for (unsigned i = 0; i < SAMPLES; i++) {
        unsigned len = 100 + (i * 997) % 2900;
        for (unsigned j = 0; j < len; j++)
            v[j] = (uint8_t)(i * 31 + j * 7 + 1);
        snprintf(path, sizeof path, "%s/f%u.bin", in, i);
        unit_write_file(path, v, len);
        fprintf(list, "f%u.bin,%u\n", i, i);
    }
    cr_assert_eq(fclose(list), 0);
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    o.align = 64;
    o.shard_size = 1 << 20;
    snprintf(path, sizeof path, "%s/list.csv", in);
    cr_assert_eq(sf_pack(NULL, path, ds, &o), 0, "pack: %s", sf_last_error());
    cr_assert_eq(sf_manifest_load(&fx->mf, ds), 0, "%s", sf_last_error());
    cr_assert_eq(fx->mf.shard_count, 1);
    fx->exp = (sf_shard_expect){&fx->mf.schema, 0, fx->mf.dataset_id, fx->mf.align,
                                &fx->mf.shards[0]};
    snprintf(path, sizeof path, "%s/" SF_SHARD_NAME_FMT, ds, 0u);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sf_shard_load_meta(&fx->meta, fd, &fx->exp, NULL), 0, "%s", sf_last_error());
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    fx->size = (uint64_t)st.st_size;
    fx->bytes = malloc(fx->size);
    cr_assert_eq(pread(fd, fx->bytes, fx->size, 0), (ssize_t)fx->size);
    close(fd);
    snprintf(path, sizeof path, "%s/download", g_root);
    unit_write_file(path, fx->bytes, fx->size);
    fx->fd = open(path, O_RDWR);
    cr_assert_geq(fx->fd, 0);
}

static void fixture_close(fixture *fx)
{
    close(fx->fd);
    free(fx->bytes);
    sf_shard_meta_clear(&fx->meta);
    sf_manifest_clear(&fx->mf);
}

/* The file's byte at off inverted, in fx->bytes and in the download. */
static void flip(fixture *fx, uint64_t off)
{
    fx->bytes[off] ^= 0xff;
    cr_assert_eq(pwrite(fx->fd, fx->bytes + off, 1, (off_t)off), 1);
}

/* A download of fx->bytes in parts [cut[k], cut[k + 1]), each fed in
 * pieces of `piece` bytes, then finished against the download file. */
static int64_t download(download_check *c, fixture *fx, const uint64_t *cut, unsigned parts,
                        uint64_t piece, download_damage *d)
{
    download_check_reset(c);
    for (unsigned k = 0; k < parts; k++) {
        c->watch.begin(c->watch.ctx, k, cut[k], cut[k + 1]);
        for (uint64_t off = cut[k]; off < cut[k + 1]; off += piece) {
            uint64_t n = cut[k + 1] - off < piece ? cut[k + 1] - off : piece;
            c->watch.bytes(c->watch.ctx, k, off, fx->bytes + off, (size_t)n);
        }
    }
    return download_check_finish(c, fx->fd, &fx->exp, d);
}

/* The problems a plain scan of the download file finds. */
static int64_t scan_file(fixture *fx)
{
    uint8_t *buf = malloc(64 << 10);
    int64_t n = sf_shard_scan_data(&fx->meta, &fx->mf.schema, fx->fd, buf, 64 << 10, NULL, NULL);
    free(buf);
    return n;
}

Test(download_check, every_damaged_byte_is_found_whatever_the_parts)
{
    fixture fx;
    fixture_open(&fx);
    download_check c;
    download_check_init(&c, &fx.meta, &fx.mf.schema);
    uint64_t s = fx.size, end = fx.meta.header.index_offset;
    /* One part; four at odd offsets (records cut by every edge); four
     * cut where the fetcher cuts (whole 4 KiB pages here); two, the first
     * ending inside the header. */
    uint64_t one[2] = {0, s};
    uint64_t four[5] = {0, s / 4 + 3, s / 2 + 17, 3 * s / 4 + 101, s};
    uint64_t pages[5] = {0, 4096, 2 * 4096, 3 * 4096, s};
    uint64_t two[3] = {0, 100, s};
    cr_assert_gt(s, 4 * 4096, "the shard is too small for the parts above");
    download_damage d1, d4, dp, d2;
    cr_assert_eq(download(&c, &fx, one, 1, 1000, &d1), 0);
    cr_assert_eq(download(&c, &fx, four, 4, 777, &d4), 0);
    unsigned checked = 0;
    for (uint64_t off = SF_SHARD_HEADER_SIZE; off < end; off += 7) {
        flip(&fx, off);
        int64_t want = scan_file(&fx);
        cr_assert_geq(want, 1, "a flip at %llu is no problem to the plain scan",
                      (unsigned long long)off);
        cr_assert_eq(download(&c, &fx, one, 1, 1000, &d1), want, "one part, byte %llu",
                     (unsigned long long)off);
        cr_assert_eq(download(&c, &fx, four, 4, 777, &d4), want, "four parts, byte %llu",
                     (unsigned long long)off);
        cr_assert_eq(download(&c, &fx, pages, 4, 4096, &dp), want, "pages, byte %llu",
                     (unsigned long long)off);
        cr_assert_eq(download(&c, &fx, two, 2, 333, &d2), want, "two parts, byte %llu",
                     (unsigned long long)off);
        cr_assert(d1.digest == d4.digest && d1.digest == dp.digest && d1.digest == d2.digest,
                  "the damage at %llu folds to another digest with other parts",
                  (unsigned long long)off);
        flip(&fx, off);
        checked++;
    }
    cr_assert_gt(checked, 1000);
    download_check_free(&c);
    fixture_close(&fx);
}

/* A download in two parts split at mid whose second part first shows
 * `first_off` inverted in bytes that run 100 past it, then is fetched again
 * from its start with the bytes as they are (a body that ran past its
 * range, refused): the check's count. */
static int64_t refetched(download_check *c, fixture *fx, uint64_t mid, uint64_t first_off)
{
    download_damage d;
    uint64_t s = fx->size;
    download_check_reset(c);
    c->watch.begin(c->watch.ctx, 0, 0, mid);
    c->watch.bytes(c->watch.ctx, 0, 0, fx->bytes, (size_t)mid);
    c->watch.begin(c->watch.ctx, 1, mid, s);
    fx->bytes[first_off] ^= 0xff;
    c->watch.bytes(c->watch.ctx, 1, mid, fx->bytes + mid, (size_t)(first_off + 100 - mid));
    fx->bytes[first_off] ^= 0xff;
    c->watch.bytes(c->watch.ctx, 1, mid, fx->bytes + mid, (size_t)(s - mid));
    return download_check_finish(c, fx->fd, &fx->exp, &d);
}

Test(download_check, a_part_fetched_again_from_its_start_is_checked_again)
{
    fixture fx;
    fixture_open(&fx);
    download_check c;
    download_check_init(&c, &fx.meta, &fx.mf.schema);
    uint64_t mid = fx.size / 2 + 5;
    /* A record inside the second part: its first payload byte. */
    sf_index_entry e;
    sf_index_entry_decode(&e, &fx.mf.schema, fx.meta.index + 45 * fx.mf.schema.entry_size);
    cr_assert_gt(e.offset, mid + 4096);
    /* Damaged bytes first, then the file's right ones: nothing found. */
    cr_assert_eq(refetched(&c, &fx, mid, e.offset), 0);
    /* Right bytes first, then the damaged ones the file holds: found. */
    flip(&fx, e.offset);
    cr_assert_eq(refetched(&c, &fx, mid, e.offset), 1);
    download_check_free(&c);
    fixture_close(&fx);
}

Test(download_check, bytes_fed_out_of_order_are_checked_from_the_file)
{
    fixture fx;
    fixture_open(&fx);
    download_check c;
    download_check_init(&c, &fx.meta, &fx.mf.schema);
    uint64_t s = fx.size;
    sf_index_entry e;
    sf_index_entry_decode(&e, &fx.mf.schema, fx.meta.index + 20 * fx.mf.schema.entry_size);
    download_damage d;
    for (int damaged = 0; damaged < 2; damaged++) {
        if (damaged)
            flip(&fx, e.offset + 1);
        /* The watch never sees the bytes from 1000 to 5000: the scanner
         * cannot vouch for the part, which is read back whole. */
        download_check_reset(&c);
        c.watch.begin(c.watch.ctx, 0, 0, s);
        c.watch.bytes(c.watch.ctx, 0, 0, fx.bytes, 1000);
        c.watch.bytes(c.watch.ctx, 0, 5000, fx.bytes + 5000, (size_t)(s - 5000));
        cr_assert_eq(download_check_finish(&c, fx.fd, &fx.exp, &d), damaged);
    }
    download_check_free(&c);
    fixture_close(&fx);
}
