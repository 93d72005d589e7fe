/* Fuzz target: pack -> read round trip. Aborts on any mismatch.
 *
 * The input describes 1..8 samples of one or two small arrays (field "a":
 * any numeric dtype, 0..3 dims of 1..4, optionally big-endian and/or
 * Fortran order; field "b": optional scalar or (2,) array), the keys, the
 * alignment, the shard size and the thread count; the remaining bytes are
 * the array data. They are written as {field}_{key}.npy files with a header
 * writer independent of the library's, packed with sf_pack_npy_dir, and
 * read back: every sf_dataset_get(check=1) must equal the C-order
 * little-endian array, found by key; sf_verify must pass; packing again
 * with the other thread count must give byte-identical files; re-running
 * the same pack must find the dataset already complete and not touch it.
 * Arrays with a zero-length dimension, and bool arrays holding bytes other
 * than 0 and 1, must be refused cleanly. */
#include <inttypes.h>
#include <time.h>

#include "dtype.h"
#include "fuzz_common.h"
#include "shardfeed/dataset.h"
#include "shardfeed/error.h"
#include "shardfeed/pack.h"

#define MAX_SAMPLES 8
#define MAX_ELEMS 64 /* 4*4*4 */

typedef struct arr {
    int dtype;
    int big_endian, fortran;
    uint32_t ndim;
    uint64_t shape[3];
    uint64_t count;
} arr;

typedef struct byte_src {
    const uint8_t *p;
    size_t n, pos;
} byte_src;

static uint8_t next_byte(byte_src *s)
{
    if (s->n == 0)
        return 0;
    uint8_t b = s->p[s->pos % s->n];
    s->pos++;
    return b;
}

/* An independent .npy v1.0 writer (what numpy writes, modulo spacing). */
static size_t write_npy_header(char *out, size_t cap, const arr *a)
{
    char dict[256], shape[96] = "(";
    size_t sl = 1;
    for (uint32_t d = 0; d < a->ndim; d++)
        sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%" PRIu64, d ? ", " : "", a->shape[d]);
    snprintf(shape + sl, sizeof shape - sl, a->ndim == 1 ? ",)" : ")");
    static const char *const code[] = {
        [SF_DTYPE_BOOL] = "b1", [SF_DTYPE_UINT8] = "u1",  [SF_DTYPE_INT8] = "i1",  [SF_DTYPE_UINT16] = "u2",
        [SF_DTYPE_INT16] = "i2",  [SF_DTYPE_UINT32] = "u4", [SF_DTYPE_INT32] = "i4", [SF_DTYPE_UINT64] = "u8",
        [SF_DTYPE_INT64] = "i8",  [SF_DTYPE_FLOAT16] = "f2", [SF_DTYPE_FLOAT32] = "f4", [SF_DTYPE_FLOAT64] = "f8",
        [SF_DTYPE_COMPLEX64] = "c8",  [SF_DTYPE_COMPLEX128] = "c16",
    };
    char order = sf_dtype_size(a->dtype) == 1 ? '|' : a->big_endian ? '>' : '<';
    int dl = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': %s, 'shape': %s, }", order,
                      code[a->dtype], a->fortran ? "True" : "False", shape);
    size_t total = (10 + (size_t)dl + 1 + 63) / 64 * 64;
    FUZZ_CHECK(total <= cap, "header buffer");
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)((total - 10) & 0xff);
    out[9] = (char)((total - 10) >> 8);
    memcpy(out + 10, dict, (size_t)dl);
    memset(out + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
    out[total - 1] = '\n';
    return total;
}

/* File data from the expected C-order little-endian bytes. */
static void to_file_layout(uint8_t *out, const uint8_t *c_le, const arr *a)
{
    size_t isz = sf_dtype_size(a->dtype), unit = sf_dtype_swap_unit(a->dtype);
    for (uint64_t i = 0; i < a->count; i++) {
        uint64_t idx[3], rem = i, dst = i;
        for (uint32_t k = a->ndim; k-- > 0;) {
            idx[k] = rem % a->shape[k];
            rem /= a->shape[k];
        }
        if (a->fortran) {
            dst = 0;
            for (uint32_t k = a->ndim; k-- > 0;)
                dst = dst * a->shape[k] + idx[k];
        }
        const uint8_t *from = c_le + i * isz;
        uint8_t *to = out + dst * isz;
        for (size_t u = 0; u < isz; u += unit)
            for (size_t b = 0; b < unit; b++)
                to[u + b] = a->big_endian ? from[u + unit - 1 - b] : from[u + b];
    }
}

static void write_array(const char *dir, const char *field, const char *key, const arr *a,
                        const uint8_t *c_le)
{
    char name[300], hdr[256];
    uint8_t file[256 + MAX_ELEMS * 16];
    size_t h = write_npy_header(hdr, sizeof hdr, a);
    memcpy(file, hdr, h);
    size_t n = (size_t)a->count * sf_dtype_size(a->dtype);
    to_file_layout(file + h, c_le, a);
    snprintf(name, sizeof name, "%s_%s.npy", field, key);
    fz_write_file(dir, name, file, h + n);
}

/* 1 when every file of dir a equals the same-named file of dir b. */
static int same_dirs(const char *a, const char *b)
{
    DIR *d = opendir(a);
    if (!d)
        return 0;
    int same = 1, files = 0;
    struct dirent *de;
    while (same && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char pa[4096], pb[4096];
        snprintf(pa, sizeof pa, "%s/%s", a, de->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, de->d_name);
        size_t la = 0, lb = 0;
        uint8_t *ba = fz_read_file(pa, &la), *bb = fz_read_file(pb, &lb);
        same = ba && bb && la == lb && memcmp(ba, bb, la) == 0;
        free(ba);
        free(bb);
        files++;
    }
    closedir(d);
    return same && files > 0;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int dtypes[] = {SF_DTYPE_BOOL, SF_DTYPE_UINT8,  SF_DTYPE_INT8,  SF_DTYPE_UINT16, SF_DTYPE_INT16,
                                 SF_DTYPE_UINT32,  SF_DTYPE_INT32, SF_DTYPE_UINT64, SF_DTYPE_INT64, SF_DTYPE_FLOAT16,
                                 SF_DTYPE_FLOAT32,  SF_DTYPE_FLOAT64, SF_DTYPE_COMPLEX64, SF_DTYPE_COMPLEX128};
    static const uint32_t aligns[] = {1, 2, 8, 64, 4096, 16};
    static const uint64_t shard_sizes[] = {1, 300, 1000, 5000, 1 << 20};
    static const char keychars[] = "0123456789abcXYZ.-";
    if (size < 10)
        return 0;
    uint32_t n = 1 + data[0] % MAX_SAMPLES;
    arr A = {0}, B = {0};
    A.dtype = dtypes[(data[1] & 0x7f) % 14];
    A.big_endian = (data[1] >> 7) & 1;
    A.ndim = data[2] % 4;
    A.fortran = (data[2] >> 4) & 1;
    int allow_zero = (data[2] >> 5) & 1, has_zero = 0;
    A.count = 1;
    for (uint32_t d = 0; d < A.ndim; d++) {
        A.shape[d] = allow_zero && data[3 + d] % 8 == 7 ? 0 : 1 + data[3 + d] % 4;
        has_zero |= A.shape[d] == 0;
        A.count *= A.shape[d];
    }
    int has_b = data[6] & 1;
    B.dtype = dtypes[(data[6] >> 1) % 14];
    B.ndim = (data[6] >> 5) & 1;
    B.shape[0] = 2;
    B.count = B.ndim ? 2 : 1;
    B.big_endian = (data[6] >> 6) & 1;
    uint32_t align = aligns[data[7] % 6];
    uint64_t shard_size = shard_sizes[data[8] % 5];
    uint8_t flags = data[9];
    unsigned jobs = 1 + (flags & 1);

    /* Keys. */
    byte_src src = {data + 10, size - 10, 0};
    char keys[MAX_SAMPLES][16];
    for (uint32_t i = 0; i < n; i++) {
        if (flags & 8) {
            size_t len = 1 + next_byte(&src) % 4;
            for (size_t k = 0; k < len; k++)
                keys[i][k] = keychars[next_byte(&src) % (sizeof keychars - 1)];
            keys[i][len] = '\0';
            if (keys[i][0] == '.')
                keys[i][0] = 'k';
        } else {
            snprintf(keys[i], sizeof keys[i], "%u", i);
        }
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0) {
                size_t l = strlen(keys[i]);
                keys[i][l] = 'z';
                keys[i][l + 1] = '\0';
                j = (uint32_t)-1; /* compare again from the start */
            }
    }

    /* Data and files. */
    char in[1024], out[1024], out2[1024];
    fz_fresh_dir(in, sizeof in, "in");
    fz_fresh_dir(out, sizeof out, "out");
    static uint8_t expect_a[MAX_SAMPLES][MAX_ELEMS * 16], expect_b[MAX_SAMPLES][32];
    size_t size_a = (size_t)A.count * sf_dtype_size(A.dtype);
    size_t size_b = (size_t)B.count * sf_dtype_size(B.dtype);
    for (uint32_t i = 0; i < n; i++) {
        for (size_t k = 0; k < size_a; k++)
            expect_a[i][k] = next_byte(&src);
        write_array(in, "a", keys[i], &A, expect_a[i]);
        if (has_b) {
            for (size_t k = 0; k < size_b; k++)
                expect_b[i][k] = next_byte(&src);
            write_array(in, "b", keys[i], &B, expect_b[i]);
        }
    }

    /* SPEC.md "Data types": a bool byte is 0 or 1; pack refuses others. */
    int bad_bool = 0;
    for (uint32_t i = 0; i < n; i++) {
        for (size_t k = 0; A.dtype == SF_DTYPE_BOOL && k < size_a; k++)
            bad_bool |= expect_a[i][k] > 1;
        for (size_t k = 0; has_b && B.dtype == SF_DTYPE_BOOL && k < size_b; k++)
            bad_bool |= expect_b[i][k] > 1;
    }

    sf_pack_opts opts = SF_PACK_OPTS_INIT;
    opts.jobs = jobs;
    opts.align = align;
    opts.shard_size = shard_size;
    sf_pack_result res;
    int rc = sf_pack_npy_dir(&res, in, out, &opts);
    if (has_zero || bad_bool) {
        FUZZ_CHECK(rc < 0 && sf_last_error()[0], "%s was packed (rc %d)",
                   has_zero ? "an empty array" : "a bool array holding other bytes than 0 and 1", rc);
        char m[1100];
        snprintf(m, sizeof m, "%s/manifest.sfm", out);
        FUZZ_CHECK(access(m, F_OK) != 0, "failed pack left a manifest");
        return 0;
    }
    FUZZ_CHECK(rc == 0, "pack failed: %d %s", rc, sf_last_error());
    FUZZ_CHECK(res.samples == n && res.shards >= 1, "result: %" PRIu64 " samples", res.samples);

    sf_dataset *ds;
    rc = sf_dataset_open(&ds, out);
    FUZZ_CHECK(rc == 0, "open failed: %s", sf_last_error());
    FUZZ_CHECK(sf_dataset_num_samples(ds) == n, "samples");
    FUZZ_CHECK(sf_dataset_num_fields(ds) == (uint32_t)(has_b ? 2 : 1), "fields");
    FUZZ_CHECK(sf_dataset_align(ds) == align, "align");
    int seen[MAX_SAMPLES] = {0};
    for (uint64_t s = 0; s < n; s++) {
        const char *key;
        size_t klen;
        FUZZ_CHECK(sf_dataset_key(&key, &klen, ds, s) == 0, "key");
        int which = -1;
        for (uint32_t i = 0; i < n; i++)
            if (strlen(keys[i]) == klen && memcmp(keys[i], key, klen) == 0)
                which = (int)i;
        FUZZ_CHECK(which >= 0 && !seen[which], "sample %" PRIu64 ": unknown or repeated key '%.*s'", s,
                   (int)klen, key);
        seen[which] = 1;
        for (uint32_t f = 0; f < sf_dataset_num_fields(ds); f++) {
            sf_field_info fi;
            FUZZ_CHECK(sf_dataset_field(&fi, ds, f) == 0, "field");
            int is_a = strcmp(fi.name, "a") == 0;
            const arr *a = is_a ? &A : &B;
            const uint8_t *want = is_a ? expect_a[which] : expect_b[which];
            size_t want_size = is_a ? size_a : size_b;
            FUZZ_CHECK((int)fi.dtype == a->dtype && fi.ndim == a->ndim, "field %s schema", fi.name);
            const void *p;
            uint64_t got;
            rc = sf_dataset_get(&p, &got, ds, s, f, 1);
            FUZZ_CHECK(rc == 0, "get sample %" PRIu64 " field %s: %s", s, fi.name, sf_last_error());
            FUZZ_CHECK(got == want_size && memcmp(p, want, want_size) == 0,
                       "sample '%s' field %s: bytes differ from the input (%" PRIu64 " vs %zu bytes)",
                       keys[which], fi.name, got, want_size);
        }
    }
    sf_dataset_close(ds);

    sf_verify_summary sum;
    rc = sf_verify(&sum, out, 1, NULL, NULL);
    FUZZ_CHECK(rc == 0 && sum.problems == 0 && sum.records == n, "verify: %d %s", rc, sf_last_error());

    if (flags & 2) { /* byte-identical for another -j */
        fz_fresh_dir(out2, sizeof out2, "out2");
        opts.jobs = jobs == 1 ? 2 : 1;
        rc = sf_pack_npy_dir(NULL, in, out2, &opts);
        FUZZ_CHECK(rc == 0, "second pack failed: %s", sf_last_error());
        FUZZ_CHECK(count_files(out) == count_files(out2) && same_dirs(out, out2),
                   "packing with -j %u and -j %u gives different files", jobs, opts.jobs);
    }
    if (flags & 4) { /* the same command again: a complete dataset, proven, left as it is */
        int before = count_files(out);
        opts.jobs = jobs;
        sf_pack_result again;
        rc = sf_pack_npy_dir(&again, in, out, &opts);
        FUZZ_CHECK(rc == 0 && again.already_complete, "re-run on a complete dataset: %d %s", rc,
                   sf_last_error());
        FUZZ_CHECK(count_files(out) == before, "the no-op re-run changed the directory");
        FUZZ_CHECK(sf_verify(NULL, out, 1, NULL, NULL) == 0, "the no-op re-run damaged the dataset");
    }
    return 0;
}
