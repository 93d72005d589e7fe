/* Exhaustive corruption suite.
 *
 * Packs small datasets (20 samples, two shards of 10) and damages them one
 * way at a time, restoring the original bytes after each:
 *  - every bit of every shard header, index and footer and of the manifest;
 *  - RANDOM_FLIPS random bits of the data areas (record payloads, padding
 *    between fields and records, padding after the header);
 *  - truncation at every byte offset of the manifest and of every shard
 *    header, index and footer, plus RANDOM_TRUNCS random data-area offsets;
 *  - appended bytes, a missing shard, a stray shard.
 * After each: sf_verify (in process) must fail with problems reported (the
 * CLI's exit 2), one of them naming the damaged file and, for structures,
 * the structure's first byte, for a record payload the record, for padding
 * the exact byte. The reader (sf_dataset_open + sf_dataset_get with
 * check=1 on every field of every sample) must never return bytes that
 * differ from the packed arrays: damage is an explicit error or, for
 * padding (which record checksums do not cover), invisible to reads.
 * Every CLI_EVERY-th case is also run through `shardfeed verify` (the CLI
 * path is argv[1], optional) to check exit status 2 and the printed spot.
 *
 * Variants: img f32 (3,8,8) + label i64 at align 64; the same at the
 * default align 4096; and aux u8 (13,) + img + label + zz u8 (13,) at align
 * 64, which has padding inside and between records.
 *
 * Prints the counts; exit status 0 only when every case was caught. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format.h"
#include "npy.h"
#include "shardfeed/dataset.h"
#include "shardfeed/error.h"
#include "shardfeed/pack.h"

#define SAMPLES 20
#define PER_SHARD 10
#define RANDOM_FLIPS 10000
#define RANDOM_TRUNCS 1000
#define CLI_EVERY 997

static const char *cli_path;
static unsigned long failures;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (++failures > 50) {
        fprintf(stderr, "too many failures, stopping\n");
        exit(1);
    }
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ERROR: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s)\n", sf_last_error());
    va_end(ap);
    exit(1);
}

static uint64_t rng = 0x5eed;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the dataset ---- */

typedef struct field_def {
    const char *name;
    int dtype;
    uint32_t ndim;
    uint64_t shape[3];
    uint64_t size;
} field_def;

typedef struct variant {
    const char *name;
    uint32_t align;
    int n_fields;
    field_def fields[4]; /* sorted by name: the schema's order */
} variant;

static const variant variants[] = {
    {"img+label align 64", 64, 2,
     {{"img", SF_DTYPE_FLOAT32, 3, {3, 8, 8}, 768}, {"label", SF_DTYPE_INT64, 0, {0}, 8}}},
    {"img+label align 4096 (default)", 0, 2,
     {{"img", SF_DTYPE_FLOAT32, 3, {3, 8, 8}, 768}, {"label", SF_DTYPE_INT64, 0, {0}, 8}}},
    {"aux+img+label+zz align 64 (padding in and between records)", 64, 4,
     {{"aux", SF_DTYPE_UINT8, 1, {13}, 13},
      {"img", SF_DTYPE_FLOAT32, 3, {3, 8, 8}, 768},
      {"label", SF_DTYPE_INT64, 0, {0}, 8},
      {"zz", SF_DTYPE_UINT8, 1, {13}, 13}}},
};

typedef struct file_img {
    char name[32];
    uint8_t *bytes;
    uint64_t size;
    int shard; /* -1: the manifest */
    uint64_t index_offset, index_size, data_offset;
} file_img;

typedef struct ds_state {
    const variant *v;
    uint32_t align;
    char dir[4096];
    uint8_t expect[SAMPLES][4][768];
    /* record layout (payload fields only) */
    uint32_t n_payload;
    uint64_t foff[4], fsize[4], record_size, stride;
    file_img files[3]; /* manifest, shard 0, shard 1 */
} ds_state;

static void write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, a, alen) != (ssize_t)alen || (blen && write(fd, b, blen) != (ssize_t)blen))
        die("write %s: %s", path, strerror(errno));
    close(fd);
}

static uint8_t *read_all(const char *path, uint64_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die("open %s: %s", path, strerror(errno));
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    if (!buf || read(fd, buf, (size_t)st.st_size) != st.st_size)
        die("read %s", path);
    close(fd);
    *len = (uint64_t)st.st_size;
    return buf;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void make_dataset(ds_state *d, const variant *v, const char *base)
{
    memset(d, 0, sizeof *d);
    d->v = v;
    d->align = v->align ? v->align : SF_PACK_DEFAULT_ALIGN;
    char in[4096];
    snprintf(in, sizeof in, "%s/in-%u-%d", base, d->align, v->n_fields);
    snprintf(d->dir, sizeof d->dir, "%s/ds-%u-%d", base, d->align, v->n_fields);
    if (mkdir(in, 0755) != 0)
        die("mkdir %s: %s", in, strerror(errno));

    for (int s = 0; s < SAMPLES; s++) {
        for (int f = 0; f < v->n_fields; f++) {
            const field_def *fd = &v->fields[f];
            uint8_t *e = d->expect[s][f];
            if (fd->dtype == SF_DTYPE_FLOAT32) {
                for (uint64_t i = 0; i < fd->size / 4; i++) {
                    float x = (float)((int64_t)(rnd() % 20001) - 10000) / 97.0f;
                    memcpy(e + 4 * i, &x, 4);
                }
            } else if (fd->dtype == SF_DTYPE_INT64) {
                int64_t x = s * 7 - 3;
                memcpy(e, &x, 8);
            } else {
                for (uint64_t i = 0; i < fd->size; i++)
                    e[i] = (uint8_t)rnd();
            }
            uint8_t hdr[512];
            size_t h = input_npy_write_header(hdr, sizeof hdr, fd->dtype, fd->ndim, fd->shape);
            if (!h)
                die("input_npy_write_header");
            char path[8192];
            snprintf(path, sizeof path, "%s/%s_%d.npy", in, fd->name, s);
            write_file(path, hdr, h, e, (size_t)fd->size);
        }
    }

    /* Layout, and a shard size that gives exactly two shards of ten. */
    uint64_t end = 0;
    uint32_t inl = 0;
    for (int f = 0; f < v->n_fields; f++) {
        const field_def *fd = &v->fields[f];
        if (fd->size <= SF_MAX_INLINE_BYTES) {
            inl++;
            continue;
        }
        uint64_t pos = d->n_payload == 0 ? 0 : align_up(end, d->align);
        d->foff[d->n_payload] = pos;
        d->fsize[d->n_payload] = fd->size;
        d->n_payload++;
        end = pos + fd->size;
    }
    d->record_size = end;
    d->stride = align_up(end, d->align);
    uint64_t entry = SF_INDEX_ENTRY_BASE + 8 * inl;
    uint64_t shard_size = sf_data_offset(d->align) + SF_SHARD_FOOTER_SIZE + PER_SHARD * d->stride +
                          PER_SHARD * entry + 2 * PER_SHARD; /* keys "10".."19" */

    sf_pack_opts opts = SF_PACK_OPTS_INIT;
    opts.jobs = 2;
    opts.align = v->align;
    opts.shard_size = shard_size;
    sf_pack_result res;
    if (sf_pack_npy_dir(&res, in, d->dir, &opts) != 0)
        die("pack %s", in);
    if (res.shards != 2)
        die("expected 2 shards, got %" PRIu64, res.shards);

    snprintf(d->files[0].name, sizeof d->files[0].name, "%s", SF_MANIFEST_NAME);
    d->files[0].shard = -1;
    for (int i = 0; i < 3; i++) {
        file_img *fi = &d->files[i];
        if (i > 0) {
            snprintf(fi->name, sizeof fi->name, SF_SHARD_NAME_FMT, (unsigned)(i - 1));
            fi->shard = i - 1;
        }
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", d->dir, fi->name);
        fi->bytes = read_all(path, &fi->size);
        if (i > 0) {
            fi->data_offset = get64(fi->bytes + 48);
            fi->index_offset = get64(fi->bytes + 56);
            fi->index_size = get64(fi->bytes + 64);
            if (get64(fi->bytes + 32) != PER_SHARD)
                die("shard %d does not hold %d records", i - 1, PER_SHARD);
        }
    }
}

/* ---- one damaged state, checked ---- */

/* What a problem report must point at. */
typedef struct spot {
    const char *file;
    int64_t record;      /* -2: any */
    uint64_t lo, hi;     /* the reported offset must be in [lo, hi) */
    int payload_shard;   /* shard and record whose payload is damaged, or -1 */
    int payload_record;
    int padding;         /* reads must all succeed */
    int structural;      /* open must fail */
} spot;

typedef struct seen {
    const spot *want;
    int file_named, spot_named;
    uint64_t problems;
} seen;

static void on_problem(void *ctx, const sf_verify_problem *p)
{
    seen *s = ctx;
    s->problems++;
    if (strcmp(p->file, s->want->file) != 0)
        return;
    s->file_named = 1;
    if ((s->want->record == -2 || p->record == s->want->record) && p->offset >= s->want->lo &&
        p->offset < s->want->hi)
        s->spot_named = 1;
}

typedef struct counts {
    uint64_t tried, caught, named, reader_errors, reader_clean, cli_runs;
} counts;

/* Runs `shardfeed verify dir`; returns its exit status, stdout in out. */
static int run_cli(const char *dir, char *out, size_t cap)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        close(pfd[0]);
        execl(cli_path, cli_path, "verify", "-j", "1", dir, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    size_t got = 0;
    ssize_t n;
    while ((n = read(pfd[0], out + got, cap - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void check_damage(ds_state *d, const spot *want, counts *c, const char *what)
{
    c->tried++;
    seen s = {want, 0, 0, 0};
    sf_verify_summary sum;
    memset(&sum, 0, sizeof sum);
    int rc = sf_verify(&sum, d->dir, 1, on_problem, &s);
    if (rc != 0 && sum.problems > 0 && s.file_named) {
        c->caught++;
        if (s.spot_named)
            c->named++;
        else
            fail("%s: %s: reported on %s but not at the expected spot (record %" PRId64 ", bytes %" PRIu64
                 "..%" PRIu64 ")",
                 d->v->name, what, want->file, want->record, want->lo, want->hi);
    } else {
        fail("%s: %s: not caught (verify rc %d, %" PRIu64 " problems, file named %d)", d->v->name, what, rc,
             sum.problems, s.file_named);
    }

    if (cli_path && c->tried % CLI_EVERY == 0) {
        char out[65536], expect[8300];
        int st = run_cli(d->dir, out, sizeof out);
        snprintf(expect, sizeof expect, "CORRUPT %s/%s", d->dir, want->file);
        c->cli_runs++;
        if (st != 2 || !strstr(out, expect))
            fail("%s: %s: shardfeed verify exit %d, output lacks '%s':\n%s", d->v->name, what, st, expect, out);
    }

    /* The reader: never wrong bytes. */
    sf_dataset *ds;
    rc = sf_dataset_open(&ds, d->dir);
    if (rc != 0) {
        if (!sf_last_error()[0])
            fail("%s: %s: open failed without a message", d->v->name, what);
        c->reader_errors++;
        return;
    }
    if (want->structural)
        fail("%s: %s: open accepted damaged structure", d->v->name, what);
    int any_error = 0;
    for (int smp = 0; smp < SAMPLES; smp++) {
        for (int f = 0; f < d->v->n_fields; f++) {
            const void *p;
            uint64_t size;
            rc = sf_dataset_get(&p, &size, ds, (uint64_t)smp, (uint32_t)f, 1);
            int damaged = smp == want->payload_shard * PER_SHARD + want->payload_record;
            if (rc == 0) {
                if (size != d->v->fields[f].size || memcmp(p, d->expect[smp][f], (size_t)size) != 0)
                    fail("%s: %s: SILENT CORRUPTION: sample %d field %s returned wrong bytes", d->v->name,
                         what, smp, d->v->fields[f].name);
                else if (damaged)
                    fail("%s: %s: checked read of the damaged sample %d succeeded", d->v->name, what, smp);
            } else {
                any_error = 1;
                if (rc != SF_E_CHECKSUM || !damaged)
                    fail("%s: %s: sample %d field %d: unexpected error %d %s", d->v->name, what, smp, f, rc,
                         sf_last_error());
            }
        }
    }
    sf_dataset_close(ds);
    if (any_error)
        c->reader_errors++;
    else
        c->reader_clean++;
    if (want->payload_shard >= 0 && !any_error)
        fail("%s: %s: payload damage not seen by checked reads", d->v->name, what);
}

static void put_bytes(ds_state *d, int fi, uint64_t off, const void *p, size_t n)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", d->dir, d->files[fi].name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || pwrite(fd, p, n, (off_t)off) != (ssize_t)n)
        die("pwrite %s", path);
    close(fd);
}

static void restore(ds_state *d, int fi)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", d->dir, d->files[fi].name);
    write_file(path, d->files[fi].bytes, (size_t)d->files[fi].size, NULL, 0);
}

static void set_size(ds_state *d, int fi, uint64_t size)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", d->dir, d->files[fi].name);
    if (truncate(path, (off_t)size) != 0)
        die("truncate %s", path);
}

/* Where byte `off` of file `fi` is, as a spot verify must name. */
static spot locate(const ds_state *d, int fi, uint64_t off)
{
    const file_img *f = &d->files[fi];
    spot s = {f->name, -2, 0, UINT64_MAX, -1, -1, 0, 0};
    if (f->shard < 0) {
        s.structural = 1;
        return s;
    }
    uint64_t footer = f->size - SF_SHARD_FOOTER_SIZE;
    if (off < SF_SHARD_HEADER_SIZE) {
        s.structural = 1, s.lo = 0, s.hi = 1;
    } else if (off >= footer) {
        s.structural = 1, s.lo = footer, s.hi = footer + 1;
    } else if (off >= f->index_offset) {
        s.structural = 1, s.lo = f->index_offset, s.hi = f->index_offset + 1;
    } else {
        /* data area: a record's payload or padding */
        s.lo = off, s.hi = off + 1, s.padding = 1, s.record = -1;
        if (off >= f->data_offset) {
            uint64_t r = (off - f->data_offset) / d->stride, rel = (off - f->data_offset) % d->stride;
            for (uint32_t k = 0; k < d->n_payload; k++) {
                if (rel >= d->foff[k] && rel < d->foff[k] + d->fsize[k]) {
                    uint64_t rec = f->data_offset + r * d->stride;
                    s.record = (int64_t)r, s.lo = rec, s.hi = rec + 1, s.padding = 0;
                    s.payload_shard = f->shard, s.payload_record = (int)r;
                    return s;
                }
            }
            if (rel < d->record_size)
                s.record = (int64_t)r; /* padding between fields: reported with its record */
        }
    }
    return s;
}

static void flip(ds_state *d, int fi, uint64_t off, int bit, counts *c)
{
    uint8_t b = d->files[fi].bytes[off] ^ (uint8_t)(1u << bit);
    put_bytes(d, fi, off, &b, 1);
    spot s = locate(d, fi, off);
    char what[200];
    snprintf(what, sizeof what, "bit %d of byte %" PRIu64 " of %s flipped", bit, off, d->files[fi].name);
    check_damage(d, &s, c, what);
    put_bytes(d, fi, off, &d->files[fi].bytes[off], 1);
}

static void truncate_at(ds_state *d, int fi, uint64_t len, counts *c)
{
    set_size(d, fi, len);
    spot s = {d->files[fi].name, -2, 0, UINT64_MAX, -1, -1, 0, 1};
    char what[200];
    snprintf(what, sizeof what, "%s truncated to %" PRIu64 " bytes", d->files[fi].name, len);
    check_damage(d, &s, c, what);
    restore(d, fi);
}

static void report(const char *what, const counts *c)
{
    printf("  %-44s tried %7" PRIu64 "  caught %7" PRIu64 "  spot named %7" PRIu64
           "  reader: explicit error %6" PRIu64 ", clean reads %6" PRIu64 "  (cli checks %" PRIu64 ")\n",
           what, c->tried, c->caught, c->named, c->reader_errors, c->reader_clean, c->cli_runs);
}

static void add(counts *t, const counts *c)
{
    t->tried += c->tried, t->caught += c->caught, t->named += c->named;
    t->reader_errors += c->reader_errors, t->reader_clean += c->reader_clean, t->cli_runs += c->cli_runs;
}

int main(int argc, char **argv)
{
    if (argc > 1 && access(argv[1], X_OK) == 0)
        cli_path = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = getenv("SF_TEST_TMP");
    if (!tmp || !*tmp)
        tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    mkdir(tmp, 0755);
    char base[1024];
    snprintf(base, sizeof base, "%s/sf-corruption-XXXXXX", tmp);
    if (!mkdtemp(base))
        die("mkdtemp %s: %s", base, strerror(errno));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    counts all_flips = {0}, all_truncs = {0}, all_other = {0};
    static ds_state d;
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        make_dataset(&d, &variants[vi], base);
        sf_verify_summary sum;
        if (sf_verify(&sum, d.dir, 1, NULL, NULL) != 0)
            die("%s: the fresh dataset does not verify", d.v->name);
        printf("%s: %s, %" PRIu64 " + %" PRIu64 " + %" PRIu64 " bytes (manifest, shards), record stride %" PRIu64
               "\n",
               d.v->name, d.dir, d.files[0].size, d.files[1].size, d.files[2].size, d.stride);

        counts structural = {0}, random = {0}, truncs = {0}, other = {0};
        /* every bit of the manifest and of every header, index and footer */
        for (int fi = 0; fi < 3; fi++) {
            const file_img *f = &d.files[fi];
            for (uint64_t off = 0; off < f->size; off++) {
                int in_structure = f->shard < 0 || off < SF_SHARD_HEADER_SIZE || off >= f->index_offset;
                if (!in_structure)
                    continue;
                for (int bit = 0; bit < 8; bit++)
                    flip(&d, fi, off, bit, &structural);
            }
        }
        report("bit flips: manifest, headers, indexes, footers", &structural);
        /* random bits of the data areas */
        for (int i = 0; i < RANDOM_FLIPS; i++) {
            int fi = 1 + (int)(rnd() % 2);
            const file_img *f = &d.files[fi];
            uint64_t off = SF_SHARD_HEADER_SIZE + rnd() % (f->index_offset - SF_SHARD_HEADER_SIZE);
            flip(&d, fi, off, (int)(rnd() % 8), &random);
        }
        report("bit flips: random payload/padding bits", &random);
        /* truncation at every structural offset, and random data offsets */
        for (int fi = 0; fi < 3; fi++) {
            const file_img *f = &d.files[fi];
            for (uint64_t len = 0; len < f->size; len++) {
                int in_structure = f->shard < 0 || len < SF_SHARD_HEADER_SIZE || len >= f->index_offset;
                if (in_structure)
                    truncate_at(&d, fi, len, &truncs);
            }
        }
        for (int i = 0; i < RANDOM_TRUNCS; i++) {
            int fi = 1 + (int)(rnd() % 2);
            const file_img *f = &d.files[fi];
            truncate_at(&d, fi, SF_SHARD_HEADER_SIZE + rnd() % (f->index_offset - SF_SHARD_HEADER_SIZE), &truncs);
        }
        report("truncations", &truncs);
        /* appended bytes, missing and stray shards */
        for (int fi = 0; fi < 3; fi++) {
            static const uint8_t extra[4096];
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", d.dir, d.files[fi].name);
            for (int k = 0; k < 2; k++) {
                int fd = open(path, O_WRONLY | O_APPEND);
                size_t n = k ? sizeof extra : 1;
                if (fd < 0 || write(fd, extra, n) != (ssize_t)n)
                    die("append %s", path);
                close(fd);
                spot s = {d.files[fi].name, -2, 0, UINT64_MAX, -1, -1, 0, 1};
                char what[200];
                snprintf(what, sizeof what, "%zu zero bytes appended to %s", n, d.files[fi].name);
                check_damage(&d, &s, &other, what);
                restore(&d, fi);
            }
            if (fi > 0) {
                unlink(path);
                spot s = {d.files[fi].name, -2, 0, UINT64_MAX, -1, -1, 0, 1};
                check_damage(&d, &s, &other, "shard missing");
                restore(&d, fi);
            }
        }
        {
            char path[8192];
            snprintf(path, sizeof path, "%s/shard-000002.sfs", d.dir);
            write_file(path, d.files[1].bytes, (size_t)d.files[1].size, NULL, 0);
            /* open ignores files the manifest does not list: no structural
             * expectation for the reader, verify must still report it */
            spot s = {"shard-000002.sfs", -1, 0, 1, -1, -1, 1, 0};
            check_damage(&d, &s, &other, "stray shard-000002.sfs");
            unlink(path);
        }
        report("appended bytes, missing and stray shards", &other);
        if (sf_verify(NULL, d.dir, 1, NULL, NULL) != 0)
            die("%s: restoring the dataset failed", d.v->name);

        add(&all_flips, &structural);
        add(&all_flips, &random);
        add(&all_truncs, &truncs);
        add(&all_other, &other);
        for (int fi = 0; fi < 3; fi++)
            free(d.files[fi].bytes);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("TOTAL bit flips:   tried %" PRIu64 ", caught by verify %" PRIu64 " (spot named %" PRIu64
           "); reader: %" PRIu64 " explicit errors, %" PRIu64 " clean, 0 silent unless FAIL lines above\n",
           all_flips.tried, all_flips.caught, all_flips.named, all_flips.reader_errors, all_flips.reader_clean);
    printf("TOTAL truncations: tried %" PRIu64 ", caught %" PRIu64 "; other damage: tried %" PRIu64
           ", caught %" PRIu64 "; CLI cross-checks %" PRIu64 "; %.1f s\n",
           all_truncs.tried, all_truncs.caught, all_other.tried, all_other.caught,
           all_flips.cli_runs + all_truncs.cli_runs + all_other.cli_runs,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);

    /* clean up */
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", base);
    if (failures) {
        printf("FAILED: %lu problem(s)\n", failures);
        return 1;
    }
    printf("PASSED\n");
    return 0;
}
