/* Hostile input.
 *
 *  1. Huge counts and sizes: manifests (with valid checksums) claiming
 *     2^20..2^64 shards, 2^32 fields, 4 GiB of metadata, 2^64 records; a
 *     sparse 100 MB manifest; shards whose headers (valid checksums, the
 *     manifest agreeing) claim 2^24 records, a 1 GiB index, a 1 TiB file;
 *     .npy inputs whose headers claim 2^40 bytes or a 1 MiB header.
 *     sf_manifest_decode / sf_dataset_open / sf_verify / sf_pack_npy_dir
 *     must fail with an explicit error and no allocation larger than the
 *     bytes actually present (+ the fixed 8 MiB verify buffer): this binary
 *     is linked with -Wl,--wrap=malloc,calloc,realloc and records the
 *     largest request. Each case also runs in a child under a 256 MiB
 *     RLIMIT_AS (skipped in ASan builds), where a large allocation would
 *     fail or crash. A sparse shard that really is 1 GiB long with a 1 GiB
 *     index (the format's cap) must fail cleanly under that limit too.
 *  2. Path escape: shards whose keys are "../x", "..", "a/../../b", "/etc",
 *     "x\0y", ... and manifests whose field names are "../img", "a/b", "..",
 *     resealed with the format/ encoders so every checksum is right: verify
 *     and open must reject them, export must fail and write nothing inside
 *     or outside its directory. A symlink planted in the export directory
 *     under an output name must not be followed.
 *  3. Symlink loops in the input directory (a self loop, a two-link cycle,
 *     a link to the directory itself, the input directory being a loop):
 *     pack must refuse with an error naming the entry, and write nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format.h"
#include "npy.h"
#include "shardfeed/dataset.h"
#include "shardfeed/error.h"
#include "shardfeed/pack.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifndef HAVE_ASAN
#define HAVE_ASAN 0
#endif

/* ---- allocation tracking (-Wl,--wrap=...) ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
static _Atomic uint64_t max_alloc;

static void note(uint64_t n)
{
    uint64_t cur = atomic_load(&max_alloc);
    while (n > cur && !atomic_compare_exchange_weak(&max_alloc, &cur, n))
        ;
}
void *__wrap_malloc(size_t n)
{
    note(n);
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m)
{
    note(m && n > SIZE_MAX / m ? UINT64_MAX : (uint64_t)n * m);
    return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n)
{
    note(n);
    return __real_realloc(p, n);
}

/* ---- test plumbing ---- */
static int failures, checks;
static char base[1024];

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures++;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond))                                                                               \
            fail(__VA_ARGS__);                                                                     \
    } while (0)

static void die(const char *what)
{
    printf("ERROR: %s: %s (%s)\n", what, strerror(errno), sf_last_error());
    exit(1);
}

static void write_file(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
        die(path);
    close(fd);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die(path);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    if (!buf || read(fd, buf, (size_t)st.st_size) != st.st_size)
        die(path);
    close(fd);
    *len = (size_t)st.st_size;
    return buf;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void mkdir_p(const char *p)
{
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        die(p);
}

static void rm_rf(const char *p)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0)
        printf("warning: could not remove %s\n", p);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Packs n samples img f32 (2,2) + label i64 with keys "k000".. into dir. */
static void make_dataset(const char *in, const char *out, int n, uint32_t align)
{
    mkdir_p(in);
    for (int s = 0; s < n; s++) {
        uint8_t buf[256];
        char path[2048];
        uint64_t shape[2] = {2, 2};
        size_t h = input_npy_write_header(buf, sizeof buf, SF_DTYPE_FLOAT32, 2, shape);
        for (int i = 0; i < 16; i++)
            buf[h + i] = (uint8_t)(s * 16 + i);
        snprintf(path, sizeof path, "%s/img_k%03d.npy", in, s);
        write_file(path, buf, h + 16);
        h = input_npy_write_header(buf, sizeof buf, SF_DTYPE_INT64, 0, NULL);
        memset(buf + h, 0, 8);
        buf[h] = (uint8_t)s;
        snprintf(path, sizeof path, "%s/label_k%03d.npy", in, s);
        write_file(path, buf, h + 8);
    }
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    o.align = align;
    o.shard_size = 1 << 20;
    if (sf_pack_npy_dir(NULL, in, out, &o) != 0)
        die("pack");
}

/* Runs fn(arg) in a child under RLIMIT_AS; returns its exit status, or
 * 128 + signal. fn returns the library's rc; the child exits 0 when it is
 * an error, 1 when the call succeeded, 2 on ENOMEM. */
typedef int (*op_fn)(const char *arg);

static int in_child(op_fn fn, const char *arg, uint64_t limit)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!HAVE_ASAN) {
            struct rlimit rl = {limit, limit};
            setrlimit(RLIMIT_AS, &rl);
        }
        int rc = fn(arg);
        _exit(rc == 0 ? 1 : rc == -ENOMEM ? 2 : 0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int op_open(const char *dir)
{
    sf_dataset *ds;
    int rc = sf_dataset_open(&ds, dir);
    if (rc == 0)
        sf_dataset_close(ds);
    return rc;
}

static int op_verify(const char *dir)
{
    sf_verify_summary s;
    int rc = sf_verify(&s, dir, 1, NULL, NULL);
    return rc;
}

static char pack_out[2048];
static int op_pack(const char *in)
{
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    o.jobs = 1;
    return sf_pack_npy_dir(NULL, in, pack_out, &o);
}

/* Runs `fn` in process (tracking the largest allocation) and in a child
 * under a 256 MiB address-space limit. The call must fail. */
static void expect_bounded_failure(const char *what, op_fn fn, const char *arg, uint64_t present)
{
    atomic_store(&max_alloc, 0);
    int rc = fn(arg);
    uint64_t peak = atomic_load(&max_alloc);
    uint64_t bound = present + (9u << 20); /* bytes on disk + verify's 8 MiB buffer + slack */
    CHECK(rc != 0, "%s: accepted (rc 0)", what);
    CHECK(rc == 0 || sf_last_error()[0], "%s: error %d without a message", what, rc);
    CHECK(peak <= bound, "%s: allocated %" PRIu64 " bytes in one call (input is %" PRIu64 " bytes)", what, peak,
          present);
    int st = in_child(fn, arg, 256ull << 20);
    CHECK(st == 0, "%s: under a 256 MiB RLIMIT_AS the child %s %d", what, st >= 128 ? "died with signal" : "exited",
          st >= 128 ? st - 128 : st);
    printf("  %-66s rc %-6d largest allocation %9" PRIu64 " B  (%s)\n", what, rc, peak, sf_last_error());
}

/* ---- crafted datasets ---- */

typedef struct dataset_bytes {
    sf_manifest m;
    uint8_t *shard[4];
    size_t shard_len[4];
} dataset_bytes;

static void load_dataset(dataset_bytes *d, const char *dir)
{
    char p[2048];
    size_t len;
    snprintf(p, sizeof p, "%s/manifest.sfm", dir);
    uint8_t *buf = read_file(p, &len);
    if (sf_manifest_decode(&d->m, buf, len) != 0)
        die("decode manifest");
    free(buf);
    for (uint64_t i = 0; i < d->m.shard_count && i < 4; i++) {
        snprintf(p, sizeof p, "%s/shard-%06u.sfs", dir, (unsigned)i);
        d->shard[i] = read_file(p, &d->shard_len[i]);
    }
}

static void free_dataset(dataset_bytes *d)
{
    for (int i = 0; i < 4; i++)
        free(d->shard[i]);
    sf_manifest_clear(&d->m);
}

/* Writes the manifest (sf_manifest_encode: trailer computed) into dir. */
static void write_manifest(const char *dir, const sf_manifest *m)
{
    uint64_t size = sf_manifest_encoded_size(m);
    uint8_t *buf = malloc(size);
    sf_manifest_encode(buf, m);
    char p[2048];
    snprintf(p, sizeof p, "%s/manifest.sfm", dir);
    write_file(p, buf, size);
    free(buf);
}

/* Re-encodes shard i with new keys (NULL: keep), re-checksums the header,
 * index and footer and updates the manifest's descriptor. The schema hash
 * is taken from d->m.schema (which may have been tampered with). */
static void reseal_shard(dataset_bytes *d, int i, const char *const *keys, const uint16_t *key_lens)
{
    const sf_schema *s = &d->m.schema;
    uint8_t *f = d->shard[i];
    sf_shard_header h;
    if (sf_shard_header_decode(&h, f) != 0)
        die("header decode");
    uint64_t n = h.record_count, entries = n * s->entry_size;
    const uint8_t *old_index = f + h.index_offset;
    uint64_t keybytes = 0;
    for (uint64_t r = 0; r < n; r++) {
        sf_index_entry e;
        sf_index_entry_decode(&e, s, old_index + r * s->entry_size);
        keybytes += keys ? key_lens[r] : e.key_length;
    }
    uint64_t index_size = entries + keybytes;
    size_t new_len = (size_t)(h.index_offset + index_size + SF_SHARD_FOOTER_SIZE);
    uint8_t *nf = calloc(1, new_len);
    memcpy(nf, f, (size_t)h.index_offset);
    uint8_t *index = nf + h.index_offset;
    uint64_t kpos = 0;
    for (uint64_t r = 0; r < n; r++) {
        sf_index_entry e;
        sf_index_entry_decode(&e, s, old_index + r * s->entry_size);
        const char *key = keys ? keys[r] : (const char *)old_index + entries + e.key_offset;
        uint16_t klen = keys ? key_lens[r] : e.key_length;
        memcpy(index + entries + kpos, key, klen);
        e.key_offset = (uint32_t)kpos;
        e.key_length = klen;
        kpos += klen;
        sf_index_entry_encode(index + r * s->entry_size, s, &e);
    }
    h.index_size = index_size;
    h.schema_hash = sf_schema_hash(s);
    h.field_count = s->field_count;
    sf_shard_header_encode(nf, &h);
    sf_shard_footer ft = {h.index_offset, index_size, n, sf_hash(index, index_size), h.checksum, 0};
    sf_shard_footer_encode(nf + new_len - SF_SHARD_FOOTER_SIZE, &ft);
    free(d->shard[i]);
    d->shard[i] = nf;
    d->shard_len[i] = new_len;
    d->m.shards[i].file_size = new_len;
    d->m.shards[i].header_checksum = h.checksum;
    d->m.shards[i].index_checksum = ft.index_checksum;
}

static void write_dataset(const char *dir, const dataset_bytes *d)
{
    mkdir_p(dir);
    for (uint64_t i = 0; i < d->m.shard_count && i < 4; i++) {
        char p[2048];
        snprintf(p, sizeof p, "%s/shard-%06u.sfs", dir, (unsigned)i);
        write_file(p, d->shard[i], d->shard_len[i]);
    }
    write_manifest(dir, &d->m);
}

/* ---- 1. huge counts ---- */

/* A manifest file with the given header fields patched and the trailer
 * recomputed; the rest copied from a real one. */
static void patched_manifest(const char *dir, const char *src_dir, int off, int width, uint64_t value)
{
    char p[2048];
    size_t len;
    snprintf(p, sizeof p, "%s/manifest.sfm", src_dir);
    uint8_t *buf = read_file(p, &len);
    if (width == 8)
        put64(buf + off, value);
    else
        put32(buf + off, (uint32_t)value);
    put64(buf + len - 8, sf_hash(buf, len - 8));
    mkdir_p(dir);
    snprintf(p, sizeof p, "%s/manifest.sfm", dir);
    write_file(p, buf, len);
    /* the shards, so only the manifest is wrong */
    for (int i = 0; i < 2; i++) {
        char a[2048], b[2048];
        snprintf(a, sizeof a, "%s/shard-%06d.sfs", src_dir, i);
        snprintf(b, sizeof b, "%s/shard-%06d.sfs", dir, i);
        if (access(a, F_OK) == 0) {
            size_t l;
            uint8_t *s = read_file(a, &l);
            write_file(b, s, l);
            free(s);
        }
    }
    free(buf);
}

static uint64_t dir_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t total = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_blocks * 512; /* sparse files: what is there */
    }
    if (d)
        closedir(d);
    return total;
}

static void huge_counts(void)
{
    printf("1. huge counts and sizes\n");
    char in[2048], good[2048];
    snprintf(in, sizeof in, "%s/h-in", base);
    snprintf(good, sizeof good, "%s/h-good", base);
    make_dataset(in, good, 6, 64);

    static const struct {
        const char *what;
        int off, width;
        uint64_t value;
    } patches[] = {
        {"manifest: shard_count 2^20 (the cap), file of 2 shards", 24, 8, 1ull << 20},
        {"manifest: shard_count 2^40", 24, 8, 1ull << 40},
        {"manifest: shard_count 2^64-1", 24, 8, UINT64_MAX},
        {"manifest: shard_count 2^64/48 (size product wraps)", 24, 8, 0x0555555555555556ull},
        {"manifest: field_count 2^32-1", 20, 4, 0xFFFFFFFFu},
        {"manifest: field_count 64 (the cap), file of 2 fields", 20, 4, 64},
        {"manifest: metadata_size 2^32-1", 44, 4, 0xFFFFFFFFu},
        {"manifest: metadata_size 16 MiB (the cap)", 44, 4, 16u << 20},
        {"manifest: record_count 2^64-1", 32, 8, UINT64_MAX},
        {"manifest: align 2^31", 40, 4, 1u << 31},
    };
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        char dir[2100];
        snprintf(dir, sizeof dir, "%s/h-%zu", base, i);
        patched_manifest(dir, good, patches[i].off, patches[i].width, patches[i].value);
        char what[200];
        snprintf(what, sizeof what, "%s: open", patches[i].what);
        expect_bounded_failure(what, op_open, dir, dir_bytes(dir));
        snprintf(what, sizeof what, "%s: verify", patches[i].what);
        expect_bounded_failure(what, op_verify, dir, dir_bytes(dir));
        /* and the decoder alone, straight from the bytes */
        char p[2200];
        size_t len;
        snprintf(p, sizeof p, "%s/manifest.sfm", dir);
        uint8_t *buf = read_file(p, &len);
        sf_manifest m;
        atomic_store(&max_alloc, 0);
        int rc = sf_manifest_decode(&m, buf, len);
        CHECK(rc != 0 && atomic_load(&max_alloc) <= len, "%s: decode rc %d, allocation %" PRIu64, patches[i].what,
              rc, atomic_load(&max_alloc));
        if (rc == 0)
            sf_manifest_clear(&m);
        free(buf);
    }

    /* a sparse 100 MB manifest: refused by its size before reading */
    {
        char dir[2100], p[2200];
        snprintf(dir, sizeof dir, "%s/h-bigmanifest", base);
        patched_manifest(dir, good, 56, 8, 0); /* a valid copy, then grow it */
        snprintf(p, sizeof p, "%s/manifest.sfm", dir);
        if (truncate(p, 100ll << 20) != 0)
            die("truncate");
        expect_bounded_failure("manifest: sparse 100 MB file: open", op_open, dir, dir_bytes(dir));
        expect_bounded_failure("manifest: sparse 100 MB file: verify", op_verify, dir, dir_bytes(dir));
    }

    /* shards whose headers (valid checksums, manifest agreeing) claim a lot */
    static const struct {
        const char *what;
        int off;
        uint64_t value;
        int fix_manifest_counts;
    } hpatch[] = {
        {"shard: record_count 2^24 (the cap), manifest agrees", 32, 1ull << 24, 1},
        {"shard: record_count 2^64-1", 32, UINT64_MAX, 0},
        {"shard: index_size 1 GiB (the cap) in a small file", 64, 1ull << 30, 0},
        {"shard: index_size 2^64-1", 64, UINT64_MAX, 0},
        {"shard: index_offset 1 TiB", 56, 1ull << 40, 0},
        {"shard: index_offset 2^64-64 (offset+size wraps)", 56, UINT64_MAX - 63, 0},
        {"shard: index_entry_size 2^32-1", 72, 0xFFFFFFFFu, 0},
    };
    for (size_t i = 0; i < sizeof hpatch / sizeof hpatch[0]; i++) {
        dataset_bytes d;
        memset(&d, 0, sizeof d);
        load_dataset(&d, good);
        uint8_t *hb = d.shard[0];
        if (hpatch[i].off == 72)
            put32(hb + 72, (uint32_t)hpatch[i].value);
        else
            put64(hb + hpatch[i].off, hpatch[i].value);
        put64(hb + 120, sf_hash(hb, 120));
        uint64_t hsum = get64(hb + 120);
        /* footer agrees with the header, manifest agrees with both */
        uint8_t *ft = hb + d.shard_len[0] - SF_SHARD_FOOTER_SIZE;
        memcpy(ft + 0, hb + 56, 8);
        memcpy(ft + 8, hb + 64, 8);
        memcpy(ft + 16, hb + 32, 8);
        put64(ft + 32, hsum);
        put64(ft + 48, sf_hash(ft, 48));
        d.m.shards[0].header_checksum = hsum;
        if (hpatch[i].fix_manifest_counts) {
            d.m.shards[0].record_count = hpatch[i].value;
            d.m.record_count = hpatch[i].value;
        }
        char dir[2100];
        snprintf(dir, sizeof dir, "%s/hs-%zu", base, i);
        write_dataset(dir, &d);
        char what[200];
        snprintf(what, sizeof what, "%s: open", hpatch[i].what);
        expect_bounded_failure(what, op_open, dir, dir_bytes(dir));
        snprintf(what, sizeof what, "%s: verify", hpatch[i].what);
        expect_bounded_failure(what, op_verify, dir, dir_bytes(dir));
        free_dataset(&d);
    }

    /* a shard that really is 1 GiB + (sparse), claiming the 1 GiB index the
     * format allows: the reader may allocate it, but under a 256 MiB limit it
     * must fail with an error, not crash */
    {
        dataset_bytes d;
        memset(&d, 0, sizeof d);
        load_dataset(&d, good);
        uint8_t *hb = d.shard[0];
        uint64_t index_offset = get64(hb + 56), index_size = 1ull << 30;
        put64(hb + 64, index_size);
        put64(hb + 120, sf_hash(hb, 120));
        uint8_t ft[SF_SHARD_FOOTER_SIZE];
        sf_shard_footer f = {index_offset, index_size, get64(hb + 32), 0x1234 /* zeros hash: unknown */,
                             get64(hb + 120), 0};
        sf_shard_footer_encode(ft, &f);
        char dir[2100], p[2200];
        snprintf(dir, sizeof dir, "%s/hs-sparse", base);
        mkdir_p(dir);
        snprintf(p, sizeof p, "%s/shard-000000.sfs", dir);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        uint64_t size = index_offset + index_size + SF_SHARD_FOOTER_SIZE;
        if (fd < 0 || pwrite(fd, hb, (size_t)index_offset, 0) != (ssize_t)index_offset ||
            pwrite(fd, ft, sizeof ft, (off_t)(size - sizeof ft)) != (ssize_t)sizeof ft)
            die("sparse shard");
        close(fd);
        d.m.shards[0].file_size = size;
        d.m.shards[0].header_checksum = get64(hb + 120);
        d.m.shards[0].index_checksum = 0x1234;
        d.m.shard_count = 1;
        d.m.record_count = d.m.shards[0].record_count;
        write_manifest(dir, &d.m);
        int st = in_child(op_open, dir, 256ull << 20);
        CHECK(st == 0 || st == 2, "sparse 1 GiB shard with a 1 GiB index: open under 256 MiB: %s %d",
              st >= 128 ? "signal" : "exit", st >= 128 ? st - 128 : st);
        printf("  %-66s child %s\n", "shard: sparse 1 GiB file, 1 GiB index, 256 MiB RLIMIT_AS: open",
               HAVE_ASAN ? "ran without the limit (ASan)" : st == 2 ? "failed with ENOMEM" : "failed cleanly");
        free_dataset(&d);
    }

    /* .npy inputs that claim huge arrays or headers */
    {
        static const char *const dicts[] = {
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 262144), }",
            "{'descr': '<c16', 'fortran_order': True, 'shape': (4294967296, 4294967296), }",
            "{'descr': '<u1', 'fortran_order': False, 'shape': (18446744073709551615,), }",
        };
        for (size_t i = 0; i < sizeof dicts / sizeof dicts[0] + 1; i++) {
            char in2[2100], p[2200];
            snprintf(in2, sizeof in2, "%s/npy-%zu", base, i);
            mkdir_p(in2);
            uint8_t buf[512] = {0};
            size_t len;
            if (i < sizeof dicts / sizeof dicts[0]) {
                size_t dl = strlen(dicts[i]), total = (10 + dl + 1 + 63) / 64 * 64;
                memcpy(buf, "\x93NUMPY\x01\x00", 8);
                buf[8] = (uint8_t)(total - 10);
                buf[9] = (uint8_t)((total - 10) >> 8);
                memcpy(buf + 10, dicts[i], dl);
                memset(buf + 10 + dl, ' ', total - 10 - dl - 1);
                buf[total - 1] = '\n';
                len = total + 16;
            } else { /* v2 header claiming 1 MiB of header text, file of 64 bytes */
                memcpy(buf, "\x93NUMPY\x02\x00", 8);
                put32(buf + 8, 1u << 20);
                len = 64;
            }
            snprintf(p, sizeof p, "%s/img_0.npy", in2);
            write_file(p, buf, len);
            snprintf(pack_out, sizeof pack_out, "%s/npy-out-%zu", base, i);
            char what[200];
            snprintf(what, sizeof what, "pack: .npy header claiming %s",
                     i == 0 ? "2^40 bytes" : i == 1 ? "2^64 elements" : i == 2 ? "2^64 bytes" : "a 1 MiB header");
            expect_bounded_failure(what, op_pack, in2, len);
            snprintf(p, sizeof p, "%s/manifest.sfm", pack_out);
            CHECK(access(p, F_OK) != 0, "%s: a manifest was written", what);
        }
    }
}

/* ---- 2. path escape ---- */

static void path_escape(void)
{
    printf("2. keys and field names that would escape the export directory\n");
    char in[2048], good[2048];
    snprintf(in, sizeof in, "%s/p-in", base);
    snprintf(good, sizeof good, "%s/p-good", base);
    make_dataset(in, good, 3, 16);

    static const struct {
        const char *key;
        uint16_t len;
    } bad_keys[] = {
        {"../x", 4}, {"..", 2}, {".", 1}, {"a/../../b", 9}, {"/etc", 4}, {"x\0y", 3},
        {"../../../../tmp/pwn", 19}, {"a//b", 4}, {"a/", 2}, {"a/./b", 5}, {"nl\n", 3}, {"del\x7f", 4},
        /* ill-formed UTF-8: an overlong '/', a surrogate, a stray byte, a cut sequence */
        {"\xc0\xaf", 2}, {"\xed\xa0\x80", 3}, {"\xff", 1}, {"\xc3", 1},
    };
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        dataset_bytes d;
        memset(&d, 0, sizeof d);
        load_dataset(&d, good);
        const char *keys[3] = {"k000", bad_keys[i].key, "k002"};
        uint16_t lens[3] = {4, bad_keys[i].len, 4};
        reseal_shard(&d, 0, keys, lens);
        char dir[2100], exp_dir[2200], shown[64];
        snprintf(dir, sizeof dir, "%s/p-%zu/ds", base, i);
        char parent[2100];
        snprintf(parent, sizeof parent, "%s/p-%zu", base, i);
        mkdir_p(parent);
        write_dataset(dir, &d);
        size_t k = 0;
        for (size_t j = 0; j < bad_keys[i].len && k + 4 < sizeof shown; j++) {
            unsigned char c = (unsigned char)bad_keys[i].key[j];
            k += (size_t)snprintf(shown + k, sizeof shown - k, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
        }

        sf_verify_summary s;
        int rc = sf_verify(&s, dir, 1, NULL, NULL);
        CHECK(rc == SF_E_CORRUPT && s.problems > 0, "key '%s': verify rc %d, %" PRIu64 " problems", shown, rc,
              s.problems);
        sf_dataset *ds = NULL;
        int orc = sf_dataset_open(&ds, dir);
        CHECK(orc == SF_E_CORRUPT, "key '%s': open rc %d", shown, orc);
        if (orc == 0)
            sf_dataset_close(ds);
        snprintf(exp_dir, sizeof exp_dir, "%s/p-%zu/export", base, i);
        mkdir_p(exp_dir);
        snprintf(exp_dir, sizeof exp_dir, "%s/p-%zu/export/inner", base, i);
        mkdir_p(exp_dir); /* "../x" from here would land in export/, "../../x" in p-N/ */
        int before = count_entries(parent);
        uint64_t written = 99;
        rc = sf_export_npy(&written, dir, exp_dir);
        CHECK(rc != 0, "key '%s': export succeeded", shown);
        CHECK(count_entries(exp_dir) == 0, "key '%s': export wrote into its directory", shown);
        char up[2300];
        snprintf(up, sizeof up, "%s/p-%zu/export", base, i);
        CHECK(count_entries(up) == 1, "key '%s': export wrote next to its directory", shown);
        CHECK(count_entries(parent) == before, "key '%s': export wrote outside", shown);
        printf("  key %-24s verify: corrupt, open: rc %d, export: rc %d, nothing written\n", shown, orc, rc);
        free_dataset(&d);
    }

    static const char *const bad_names[] = {"../img", "..", "a/b", "", ".img", "x y"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        dataset_bytes d;
        memset(&d, 0, sizeof d);
        load_dataset(&d, good);
        memset(d.m.schema.fields[0].name, 0, sizeof d.m.schema.fields[0].name);
        memcpy(d.m.schema.fields[0].name, bad_names[i], strlen(bad_names[i]));
        reseal_shard(&d, 0, NULL, NULL); /* schema hash of the tampered table */
        char dir[2100], exp_dir[2200];
        snprintf(dir, sizeof dir, "%s/pf-%zu/ds", base, i);
        char parent[2100];
        snprintf(parent, sizeof parent, "%s/pf-%zu", base, i);
        mkdir_p(parent);
        write_dataset(dir, &d);
        sf_verify_summary s;
        int rc = sf_verify(&s, dir, 1, NULL, NULL);
        CHECK(rc == SF_E_CORRUPT && s.problems > 0, "field name '%s': verify rc %d", bad_names[i], rc);
        sf_dataset *ds = NULL;
        int orc = sf_dataset_open(&ds, dir);
        CHECK(orc != 0, "field name '%s': open accepted it", bad_names[i]);
        if (orc == 0)
            sf_dataset_close(ds);
        int before = count_entries(parent);
        snprintf(exp_dir, sizeof exp_dir, "%s/pf-%zu/export", base, i);
        rc = sf_export_npy(NULL, dir, exp_dir);
        CHECK(rc != 0, "field name '%s': export succeeded", bad_names[i]);
        CHECK(count_entries(parent) == before && count_entries(exp_dir) <= 0,
              "field name '%s': export wrote something", bad_names[i]);
        printf("  field name %-17s verify: corrupt, open: rc %d (%s), export: nothing written\n", bad_names[i], orc,
               sf_strerror(orc));
        free_dataset(&d);
    }

    /* a symlink planted in the export directory under an output name */
    {
        char exp_dir[2100], target[2100], link[2200];
        snprintf(exp_dir, sizeof exp_dir, "%s/planted", base);
        snprintf(target, sizeof target, "%s/planted-target", base);
        mkdir_p(exp_dir);
        write_file(target, "precious", 8);
        snprintf(link, sizeof link, "%s/img_k000.npy", exp_dir);
        if (symlink(target, link) != 0)
            die("symlink");
        int rc = sf_export_npy(NULL, good, exp_dir);
        size_t len;
        uint8_t *t = read_file(target, &len);
        CHECK(rc != 0 && len == 8 && memcmp(t, "precious", 8) == 0,
              "export followed a planted symlink (rc %d, target now %zu bytes)", rc, len);
        printf("  symlink planted as img_k000.npy in the export dir: export rc %d (%s), target untouched\n", rc,
               sf_last_error());
        free(t);
    }
}

/* ---- 3. symlink loops in the input ---- */

static void symlink_loops(void)
{
    printf("3. symlink loops in the input directory\n");
    static const struct {
        const char *what;
        const char *links[2][2]; /* name -> target */
        const char *named;       /* the error must name this entry */
    } cases[] = {
        {"self loop img_1.npy -> img_1.npy", {{"img_1.npy", "img_1.npy"}, {NULL, NULL}}, "img_1.npy"},
        {"cycle img_1.npy -> x_1.npy -> img_1.npy", {{"img_1.npy", "x_1.npy"}, {"x_1.npy", "img_1.npy"}}, "_1.npy"},
        {"directory loop sub -> .", {{"sub", "."}, {NULL, NULL}}, "sub"},
        {"directory loop up -> ..", {{"up", ".."}, {NULL, NULL}}, "up"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[2100], out[2100];
        snprintf(in, sizeof in, "%s/loop-%zu", base, i);
        snprintf(out, sizeof out, "%s/loop-out-%zu", base, i);
        make_dataset(in, out, 1, 64); /* one valid sample: img_k000, label_k000 */
        rm_rf(out);
        for (int l = 0; l < 2 && cases[i].links[l][0]; l++) {
            char p[2200];
            snprintf(p, sizeof p, "%s/%s", in, cases[i].links[l][0]);
            if (symlink(cases[i].links[l][1], p) != 0)
                die("symlink");
        }
        sf_pack_opts o = SF_PACK_OPTS_INIT;
        int rc = sf_pack_npy_dir(NULL, in, out, &o);
        const char *msg = sf_last_error();
        CHECK(rc == SF_E_INPUT && strstr(msg, cases[i].named) != NULL,
              "%s: pack rc %d, message '%s' does not name %s", cases[i].what, rc, msg, cases[i].named);
        char p[2200];
        snprintf(p, sizeof p, "%s/manifest.sfm", out);
        CHECK(access(p, F_OK) != 0, "%s: a manifest was written", cases[i].what);
        printf("  %-44s rc %d: %s\n", cases[i].what, rc, msg);
    }
    /* the input directory itself is a loop */
    char in[2100], out[2100];
    snprintf(in, sizeof in, "%s/loop-dir", base);
    snprintf(out, sizeof out, "%s/loop-dir-out", base);
    if (symlink("loop-dir", in) != 0)
        die("symlink");
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    int rc = sf_pack_npy_dir(NULL, in, out, &o);
    CHECK(rc != 0 && strstr(sf_last_error(), "loop-dir") != NULL, "input dir loop: rc %d '%s'", rc,
          sf_last_error());
    printf("  %-44s rc %d: %s\n", "input directory is a loop", rc, sf_last_error());
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = getenv("SF_TEST_TMP");
    if (!tmp || !*tmp)
        tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    mkdir_p(tmp);
    snprintf(base, sizeof base, "%s/sf-hostile-XXXXXX", tmp);
    if (!mkdtemp(base))
        die("mkdtemp");
    if (HAVE_ASAN)
        printf("(ASan build: the RLIMIT_AS children run without the limit)\n");
    huge_counts();
    path_escape();
    symlink_loops();
    rm_rf(base);
    printf("%d checks, %d failed\n", checks, failures);
    if (failures) {
        printf("FAILED\n");
        return 1;
    }
    printf("PASSED\n");
    return 0;
}
