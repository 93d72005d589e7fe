/* zstd-compressed fields (SPEC.md "Compression"): the same samples written
 * uncompressed and with zstd on a fixed float32 field and a variable bytes
 * field must read identically through every engine, random access and
 * export; damaged and lying frames are corrupt records (error or
 * substitution), never big allocations; verify hashes stored bytes and
 * only --decompress finds a frame that hashes fine but does not decompress.
 * Datasets are written here with the format encoders and libzstd. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "format.h"
#include "hash.h"
#include "le.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

UNIT_SCRATCH("codec-test")

TestSuite(codec, .init = scratch_init, .fini = scratch_fini, .timeout = 180);

#define N 97
#define XN 64 /* float32 elements of field x */
#define ALIGN 16
#define DATASET_ID 0xc0dec0deull
#define SHARD0 40

/* What a writer may get wrong, at record `at` (sample id). */
enum tamper {
    T_NONE,
    T_X_SHORT,     /* x's frame holds 252 bytes, not item_size 256 */
    T_TOK_HUGE,    /* tok's frame header declares 2^40 bytes */
    T_X_TRUNCATED, /* x's frame misses its last byte (checksum over what is stored) */
};

static uint64_t tok_len(uint64_t i)
{
    return i * 37 % 50; /* 0 for i = 0, 50 */
}

static void x_value(float *x, uint64_t i)
{
    for (uint32_t j = 0; j < XN; j++)
        x[j] = (float)(i % 7) + (float)(j % 8) * 0.5f; /* compressible */
}

static void tok_value(uint8_t *t, uint64_t i)
{
    for (uint64_t j = 0; j < tok_len(i); j++)
        t[j] = (uint8_t)(i + (j % 5));
}

static void schema_of(sf_schema *s, int zx, int ztok)
{
    memset(s, 0, sizeof *s);
    s->field_count = 3;
    sf_field *f = s->fields;
    snprintf(f[0].name, sizeof f[0].name, "x");
    f[0].dtype = SF_DTYPE_FLOAT32;
    f[0].ndim = 1;
    f[0].shape[0] = XN;
    f[0].item_size = XN * 4;
    f[0].storage = SF_STORAGE_FIXED;
    f[0].codec = zx ? SF_CODEC_ZSTD : SF_CODEC_NONE;
    snprintf(f[1].name, sizeof f[1].name, "tok");
    f[1].dtype = SF_DTYPE_BYTES;
    f[1].ndim = 1;
    f[1].storage = SF_STORAGE_VARIABLE;
    f[1].codec = ztok ? SF_CODEC_ZSTD : SF_CODEC_NONE;
    snprintf(f[2].name, sizeof f[2].name, "label");
    f[2].dtype = SF_DTYPE_INT64;
    f[2].ndim = 0;
    f[2].item_size = 8;
    f[2].storage = SF_STORAGE_INLINE;
    cr_assert_eq(sf_schema_finish(s), 0, "%s", sf_last_error());
}

/* The stored bytes of a value: as is, or one zstd frame (content size in
 * its header, as ZSTD_compress writes it). */
static uint64_t store(uint8_t *out, uint64_t cap, const void *val, uint64_t len, int z)
{
    if (!z) {
        memcpy(out, val, len);
        return len;
    }
    size_t n = ZSTD_compress(out, cap, val, len, 3);
    cr_assert(!ZSTD_isError(n), "ZSTD_compress: %s", ZSTD_getErrorName(n));
    return n;
}

/* A frame whose header declares 2^40 bytes: magic, FHD (8-byte content
 * size, not single-segment), window descriptor, the size, then one empty
 * last raw block. */
static uint64_t huge_frame(uint8_t *out)
{
    sf_put_le32(out, ZSTD_MAGICNUMBER);
    out[4] = 0xC0;
    out[5] = 0x00;
    sf_put_le64(out + 6, 1ull << 40);
    out[14] = 0x01, out[15] = 0x00, out[16] = 0x00;
    return 17;
}

static void write_shard(const char *dir, const sf_schema *s, int zx, int ztok, enum tamper tamper,
                        uint64_t at, uint64_t si, uint64_t first, uint64_t count,
                        sf_shard_desc *desc)
{
    uint64_t cap = 1 << 20, pos = sf_data_offset(ALIGN);
    uint8_t *file = calloc(1, cap), *index = calloc(1, cap);
    XXH3_state_t *xxh = XXH3_createState();
    cr_assert_not_null(xxh);
    char keys[4096];
    uint64_t key_pos = 0;
    for (uint64_t r = 0; r < count; r++) {
        uint64_t i = first + r;
        float x[XN];
        uint8_t tok[64], sx[1024], stok[1024];
        x_value(x, i);
        tok_value(tok, i);
        uint64_t lx = store(sx, sizeof sx, x, sizeof x, zx);
        uint64_t ltok = store(stok, sizeof stok, tok, tok_len(i), ztok);
        if (i == at && tamper == T_X_SHORT)
            lx = store(sx, sizeof sx, x, sizeof x - 4, 1);
        if (i == at && tamper == T_X_TRUNCATED)
            lx--;
        if (i == at && tamper == T_TOK_HUGE)
            ltok = huge_frame(stok);
        sf_index_entry e;
        memset(&e, 0, sizeof e);
        if (s->var_slot[0] >= 0)
            e.var_len[s->var_slot[0]] = lx;
        e.var_len[s->var_slot[1]] = ltok;
        uint64_t off[SF_MAX_FIELDS], len[SF_MAX_FIELDS], size;
        cr_assert_eq(sf_record_layout(s, ALIGN, e.var_len, off, len, &size), 0);
        cr_assert_eq(len[0], lx);
        cr_assert_eq(len[1], ltok);
        memcpy(file + pos + off[0], sx, lx);
        memcpy(file + pos + off[1], stok, ltok);
        /* The record checksum covers the stored bytes, whatever they are. */
        const uint8_t *ptr[2] = {file + pos + off[0], file + pos + off[1]};
        e.checksum = sf_record_hash(xxh, ptr, len, 2);
        e.offset = pos;
        e.size = size;
        int kl = snprintf(keys + key_pos, sizeof keys - key_pos, "%llu", (unsigned long long)i);
        e.key_offset = (uint32_t)key_pos;
        e.key_length = (uint16_t)kl;
        key_pos += (uint64_t)kl;
        sf_put_le64(e.inline_val[0], i * 3 + 1);
        sf_index_entry_encode(index + r * s->entry_size, s, &e);
        pos = sf_align_up(pos + size, ALIGN);
    }
    uint64_t index_size = count * s->entry_size + key_pos;
    memcpy(index + count * s->entry_size, keys, key_pos);
    unit_seal_shard(dir, s, ALIGN, DATASET_ID, si, first, count, file, pos, index, index_size, desc);
    XXH3_freeState(xxh);
    free(file);
    free(index);
}

/* Writes g_root/name: x compressed with zx, tok with ztok, damaged by
 * `tamper` at sample `at`. */
static void make_dataset(char *dir, size_t cap, const char *name, int zx, int ztok,
                         enum tamper tamper, uint64_t at)
{
    snprintf(dir, cap, "%s/%s", g_root, name);
    cr_assert_eq(mkdir(dir, 0755), 0);
    sf_manifest m;
    memset(&m, 0, sizeof m);
    schema_of(&m.schema, zx, ztok);
    m.version_major = SF_FORMAT_MAJOR;
    m.version_minor = SF_FORMAT_MINOR;
    m.align = ALIGN;
    m.record_count = N;
    m.dataset_id = DATASET_ID;
    m.shard_count = 2;
    sf_shard_desc desc[2];
    m.shards = desc;
    write_shard(dir, &m.schema, zx, ztok, tamper, at, 0, 0, SHARD0, &desc[0]);
    write_shard(dir, &m.schema, zx, ztok, tamper, at, 1, SHARD0, N - SHARD0, &desc[1]);
    uint64_t size = sf_manifest_encoded_size(&m);
    uint8_t *buf = malloc(size);
    sf_manifest_encode(buf, &m);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, SF_MANIFEST_NAME);
    unit_write_file(path, buf, size);
    free(buf);
}

/* The batch of the uncompressed dataset and of the compressed one must be
 * the same, byte for byte: ids, dense arrays, packed bytes and offsets. */
static void same_batch(const sf_batch *a, const sf_batch *b)
{
    cr_assert_eq(a->size, b->size);
    cr_assert_eq(a->index, b->index);
    cr_assert_eq(memcmp(a->ids, b->ids, a->size * 8), 0);
    cr_assert_eq(memcmp(a->source_ids, b->source_ids, a->size * 8), 0);
    for (uint32_t f = 0; f < a->num_fields; f++) {
        const sf_batch_field *fa = &a->fields[f], *fb = &b->fields[f];
        cr_assert_eq(fa->bytes, fb->bytes, "field %s batch %llu: %llu vs %llu bytes", fa->name,
                     (unsigned long long)a->index, (unsigned long long)fa->bytes,
                     (unsigned long long)fb->bytes);
        cr_assert_eq(memcmp(fa->data, fb->data, fa->bytes), 0, "field %s batch %llu differs",
                     fa->name, (unsigned long long)a->index);
        cr_assert_eq(!fa->offsets, !fb->offsets);
        if (fa->offsets)
            cr_assert_eq(memcmp(fa->offsets, fb->offsets, (a->size + 1) * 8), 0);
    }
}

/* And both hold what was written. */
static void check_values(const sf_batch *b)
{
    const sf_batch_field *x = sf_batch_field_find(b, "x"), *tok = sf_batch_field_find(b, "tok");
    for (uint32_t k = 0; k < b->size; k++) {
        uint64_t i = b->source_ids[k];
        float want[XN];
        uint8_t wtok[64];
        x_value(want, i);
        tok_value(wtok, i);
        cr_assert_eq(memcmp((const uint8_t *)x->data + (uint64_t)k * sizeof want, want, sizeof want), 0);
        cr_assert_eq(tok->offsets[k + 1] - tok->offsets[k], tok_len(i));
        cr_assert_eq(memcmp((const uint8_t *)tok->data + tok->offsets[k], wtok, tok_len(i)), 0);
    }
}

static const int engines[] = {SF_ENGINE_URING, SF_ENGINE_PREAD, SF_ENGINE_MMAP, SF_ENGINE_AUTO};

Test(codec, compressed_and_uncompressed_read_identically_through_every_engine)
{
    char plain[4200], zall[4200], zx[4200];
    make_dataset(plain, sizeof plain, "plain", 0, 0, T_NONE, 0);
    make_dataset(zall, sizeof zall, "zall", 1, 1, T_NONE, 0);
    make_dataset(zx, sizeof zx, "zx", 1, 0, T_NONE, 0);
    const char *compressed[] = {zall, zx};
    struct stat sp, sz;
    char path[4300];
    snprintf(path, sizeof path, "%s/shard-000000.sfs", plain);
    cr_assert_eq(stat(path, &sp), 0);
    snprintf(path, sizeof path, "%s/shard-000000.sfs", zall);
    cr_assert_eq(stat(path, &sz), 0);
    cr_assert_lt(sz.st_size, sp.st_size / 2, "the values really are compressed");
    for (size_t d = 0; d < 2; d++) {
        cr_assert_eq(sf_verify(NULL, compressed[d], 1, NULL, NULL), 0, "%s", sf_last_error());
        for (size_t e = 0; e < sizeof engines / sizeof engines[0]; e++) {
            sf_reader_opts o = SF_READER_OPTS_INIT;
            o.batch_size = 9;
            o.shuffle = SF_READER_SHUFFLE_GLOBAL;
            o.seed = 5;
            o.engine = engines[e];
            sf_reader_opts op = o;
            op.engine = SF_ENGINE_PREAD;
            sf_reader *ra, *rb;
            cr_assert_eq(sf_reader_open(&ra, plain, &op), 0, "%s", sf_last_error());
            cr_assert_eq(sf_reader_open(&rb, compressed[d], &o), 0, "%s", sf_last_error());
            for (uint64_t ep = 0; ep < 2; ep++) {
                sf_reader_set_epoch(ra, ep);
                sf_reader_set_epoch(rb, ep);
                const sf_batch *a, *b;
                uint64_t seen = 0;
                for (;;) {
                    cr_assert_eq(sf_reader_next(&a, ra), 0, "%s", sf_last_error());
                    cr_assert_eq(sf_reader_next(&b, rb), 0, "%s", sf_last_error());
                    cr_assert_eq(!a, !b);
                    if (!a)
                        break;
                    same_batch(a, b);
                    check_values(b);
                    seen += b->size;
                    sf_reader_release(ra, a);
                    sf_reader_release(rb, b);
                }
                cr_assert_eq(seen, N);
            }
            sf_reader_statistics sa, sb;
            sf_reader_stats(&sa, ra);
            sf_reader_stats(&sb, rb);
            /* Same slots: the open-time scan found the same longest value. */
            cr_assert_eq(sa.slab_bytes, sb.slab_bytes);
            cr_assert_str_eq(sb.engine, engines[e] == SF_ENGINE_MMAP ? "mmap" : "pread");
            sf_reader_close(ra);
            sf_reader_close(rb);
        }
        /* O_DIRECT does not apply to staged reads: a clear refusal. */
        sf_reader_opts o = SF_READER_OPTS_INIT;
        o.direct = SF_DIRECT_ON;
        sf_reader *r = NULL;
        cr_assert_eq(sf_reader_open(&r, compressed[d], &o), SF_E_UNSUPPORTED);
        cr_assert(strstr(sf_last_error(), "compressed"), "%s", sf_last_error());
    }
}

Test(codec, random_access_and_export_match_the_uncompressed_dataset)
{
    char plain[4200], z[4200];
    make_dataset(plain, sizeof plain, "plain", 0, 0, T_NONE, 0);
    make_dataset(z, sizeof z, "z", 1, 1, T_NONE, 0);
    sf_dataset *dp, *dz;
    cr_assert_eq(sf_dataset_open(&dp, plain), 0, "%s", sf_last_error());
    cr_assert_eq(sf_dataset_open(&dz, z), 0, "%s", sf_last_error());
    sf_field_info fi;
    cr_assert_eq(sf_dataset_field(&fi, dz, 0), 0);
    cr_assert_eq(fi.codec, SF_CODEC_ZSTD);
    cr_assert_eq(sf_dataset_field(&fi, dz, 2), 0);
    cr_assert_eq(fi.codec, SF_CODEC_NONE);
    uint8_t buf[1024];
    for (uint64_t i = 0; i < N; i++) {
        for (uint32_t f = 0; f < 3; f++) {
            const void *want;
            uint64_t wsize, size = 7, got = 0;
            cr_assert_eq(sf_dataset_get(&want, &wsize, dp, i, f, 1), 0, "%s", sf_last_error());
            cr_assert_eq(sf_dataset_value_size(&size, dz, i, f), 0, "%s", sf_last_error());
            cr_assert_eq(size, wsize);
            cr_assert_eq(sf_dataset_read_value(buf, sizeof buf, &got, dz, i, f, 1), 0, "%s",
                         sf_last_error());
            cr_assert_eq(got, wsize);
            cr_assert_eq(memcmp(buf, want, wsize), 0, "sample %llu field %u",
                         (unsigned long long)i, f);
        }
    }
    const void *p;
    uint64_t size;
    cr_assert_eq(sf_dataset_get(&p, &size, dz, 3, 0, 1), SF_E_UNSUPPORTED);
    cr_assert_eq(sf_dataset_read_value(buf, 3, &size, dz, 3, 0, 1), SF_E_INVALID);
    cr_assert_eq(size, XN * 4, "a too-small buffer still learns the size");
    sf_dataset_close(dp);
    sf_dataset_close(dz);

    char ep[4300], ez[4300];
    snprintf(ep, sizeof ep, "%s/export-plain", g_root);
    snprintf(ez, sizeof ez, "%s/export-z", g_root);
    uint64_t np = 0, nz = 0;
    cr_assert_eq(sf_export_npy(&np, plain, ep), 0, "%s", sf_last_error());
    cr_assert_eq(sf_export_npy(&nz, z, ez), 0, "%s", sf_last_error());
    cr_assert_eq(np, nz);
    cr_assert_eq(nz, 3 * N);
    static const char *fields[] = {"x", "tok", "label"};
    for (uint64_t i = 0; i < N; i++) {
        for (int f = 0; f < 3; f++) {
            char a[4400], b[4400];
            snprintf(a, sizeof a, "%s/%s_%llu.npy", ep, fields[f], (unsigned long long)i);
            snprintf(b, sizeof b, "%s/%s_%llu.npy", ez, fields[f], (unsigned long long)i);
            FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
            cr_assert(fa && fb, "%s", b);
            uint8_t ba[4096], bb[4096];
            size_t la = fread(ba, 1, sizeof ba, fa), lb = fread(bb, 1, sizeof bb, fb);
            fclose(fa);
            fclose(fb);
            cr_assert_eq(la, lb, "%s", b);
            cr_assert_eq(memcmp(ba, bb, la), 0, "%s", b);
        }
    }
}

/* Reads a whole epoch (no shuffle); returns the first error, 0 otherwise.
 * With skip, checks every batch's values and counts substitutions of
 * `bad` by bad + 1. */
static int read_epoch(const char *dir, int engine, int skip, uint64_t bad, uint64_t *substituted)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.engine = engine;
    o.on_corrupt = skip ? SF_ON_CORRUPT_SKIP : SF_ON_CORRUPT_ERROR;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, dir, &o), 0, "%s", sf_last_error());
    const sf_batch *b;
    int rc;
    *substituted = 0;
    while ((rc = sf_reader_next(&b, r)) == 0 && b) {
        check_values(b);
        for (uint32_t k = 0; k < b->size; k++) {
            if (b->ids[k] == bad) {
                cr_assert_eq(b->source_ids[k], bad + 1, "deterministic: the next sample");
                ++*substituted;
            } else {
                cr_assert_eq(b->source_ids[k], b->ids[k]);
            }
        }
        sf_reader_release(r, b);
    }
    sf_reader_close(r);
    return rc;
}

/* Offset of sample i's first payload byte in shard 0 (i < SHARD0) of a
 * dataset with both fields compressed: the layout the writer used. */
static uint64_t record_offset(uint64_t i)
{
    sf_schema s;
    schema_of(&s, 1, 1);
    uint64_t pos = sf_data_offset(ALIGN), size;
    for (uint64_t k = 0; k < i; k++) {
        float x[XN];
        uint8_t tok[64], sx[1024], stok[1024];
        x_value(x, k);
        tok_value(tok, k);
        uint64_t vl[SF_MAX_FIELDS] = {0}, off[SF_MAX_FIELDS], len[SF_MAX_FIELDS];
        vl[s.var_slot[0]] = store(sx, sizeof sx, x, sizeof x, 1);
        vl[s.var_slot[1]] = store(stok, sizeof stok, tok, tok_len(k), 1);
        sf_record_layout(&s, ALIGN, vl, off, len, &size);
        pos = sf_align_up(pos + size, ALIGN);
    }
    return pos;
}

Test(codec, damaged_stored_bytes_fail_the_checksum_or_are_substituted)
{
    char z[4200];
    make_dataset(z, sizeof z, "z", 1, 1, T_NONE, 0);
    unit_flip_shard_byte(z, 0, record_offset(12) + 6); /* inside x's frame of sample 12 */
    for (size_t e = 0; e < 3; e++) {
        uint64_t subst;
        int rc = read_epoch(z, engines[e], 0, 12, &subst);
        cr_assert_eq(rc, SF_E_CHECKSUM, "%d: %s", rc, sf_last_error());
        cr_assert(strstr(sf_last_error(), "shard-000000.sfs: record 12 "), "%s", sf_last_error());
        cr_assert_eq(read_epoch(z, engines[e], 1, 12, &subst), 0, "%s", sf_last_error());
        cr_assert_eq(subst, 1);
    }
    cr_assert_eq(sf_verify(NULL, z, 1, NULL, NULL), SF_E_CORRUPT);
}

Test(codec, frames_that_do_not_decompress_are_corrupt_records)
{
    /* The checksum holds (the writer hashed what it stored): only
     * decompression can tell, and each case names shard, record and field. */
    static const struct {
        enum tamper t;
        uint64_t at;
        const char *shard_record, *field, *why;
    } cases[] = {
        {T_X_TRUNCATED, 45, "shard-000001.sfs: record 5 ", "field 'x'", "zstd"},
        {T_X_SHORT, 7, "shard-000000.sfs: record 7 ", "field 'x'", "252 bytes"},
        {T_TOK_HUGE, 8, "shard-000000.sfs: record 8 ", "field 'tok'", "1099511627776 bytes"},
    };
    char plain[4200];
    make_dataset(plain, sizeof plain, "plain", 0, 0, T_NONE, 0);
    sf_reader *rp;
    sf_reader_opts op = SF_READER_OPTS_INIT;
    cr_assert_eq(sf_reader_open(&rp, plain, &op), 0);
    sf_reader_statistics sp;
    sf_reader_stats(&sp, rp);
    sf_reader_close(rp);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char z[4200], name[32];
        snprintf(name, sizeof name, "bad%zu", c);
        make_dataset(z, sizeof z, name, 1, 1, cases[c].t, cases[c].at);
        for (size_t e = 0; e < 3; e++) {
            uint64_t subst;
            int rc = read_epoch(z, engines[e], 0, cases[c].at, &subst);
            cr_assert_eq(rc, SF_E_CORRUPT, "case %zu: %d %s", c, rc, sf_last_error());
            const char *msg = sf_last_error();
            cr_assert(strstr(msg, cases[c].shard_record) && strstr(msg, cases[c].field) &&
                          strstr(msg, cases[c].why),
                      "case %zu: %s", c, msg);
            cr_assert_eq(read_epoch(z, engines[e], 1, cases[c].at, &subst), 0, "%s", sf_last_error());
            cr_assert_eq(subst, 1, "case %zu: substituted deterministically", c);
        }
        /* A lying header sizes nothing: the slots are those of the honest dataset. */
        sf_reader *r;
        sf_reader_opts o = SF_READER_OPTS_INIT;
        cr_assert_eq(sf_reader_open(&r, z, &o), 0);
        sf_reader_statistics st;
        sf_reader_stats(&st, r);
        cr_assert_eq(st.slab_bytes, sp.slab_bytes, "case %zu", c);
        sf_reader_close(r);

        /* Random access refuses it before allocating. */
        sf_dataset *ds;
        cr_assert_eq(sf_dataset_open(&ds, z), 0);
        uint32_t field = cases[c].t == T_TOK_HUGE ? 1 : 0;
        uint64_t size = 0;
        uint8_t buf[1024];
        int rc = sf_dataset_read_value(buf, sizeof buf, &size, ds, cases[c].at, field, 1);
        cr_assert_eq(rc, SF_E_CORRUPT, "case %zu: %d", c, rc);
        cr_assert(strstr(sf_last_error(), cases[c].field), "%s", sf_last_error());
        if (cases[c].t == T_TOK_HUGE)
            cr_assert_eq(sf_dataset_value_size(&size, ds, cases[c].at, field), SF_E_CORRUPT);
        sf_dataset_close(ds);

        /* verify hashes stored bytes: intact. --decompress finds the value. */
        sf_verify_summary sum;
        cr_assert_eq(sf_verify(&sum, z, 1, NULL, NULL), 0, "case %zu: %s", c, sf_last_error());
        sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
        vo.decompress = 1;
        cr_assert_eq(sf_verify_ex(&sum, z, &vo, NULL, NULL), SF_E_CORRUPT);
        cr_assert_eq(sum.problems, 1, "case %zu", c);
    }
}

typedef struct seen_problem {
    int n;
    int64_t shard, record;
    char message[512];
} seen_problem;

static void on_problem(void *ctx, const sf_verify_problem *p)
{
    seen_problem *s = ctx;
    s->n++;
    s->shard = p->shard;
    s->record = p->record;
    snprintf(s->message, sizeof s->message, "%s", p->message);
}

Test(codec, verify_decompress_names_shard_record_and_field)
{
    char z[4200];
    make_dataset(z, sizeof z, "z", 1, 1, T_X_TRUNCATED, 45);
    sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
    vo.decompress = 1;
    seen_problem s = {0};
    cr_assert_eq(sf_verify_ex(NULL, z, &vo, on_problem, &s), SF_E_CORRUPT);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.shard, 1);
    cr_assert_eq(s.record, 5);
    cr_assert(strstr(s.message, "record 5: field 'x'"), "%s", s.message);
    /* An intact compressed dataset passes the full check too. */
    char ok[4200];
    make_dataset(ok, sizeof ok, "ok", 1, 1, T_NONE, 0);
    cr_assert_eq(sf_verify_ex(NULL, ok, &vo, NULL, NULL), 0, "%s", sf_last_error());
}

Test(codec, schema_rules)
{
    sf_schema s;
    schema_of(&s, 1, 1);
    /* Compressed fields have length slots, in schema order: x then tok. */
    cr_assert_eq(s.var_slot[0], 0);
    cr_assert_eq(s.var_slot[1], 1);
    cr_assert_eq(s.var_slot[2], -1);
    cr_assert_eq(s.n_var, 2);
    cr_assert_eq(s.entry_size, 32 + 8 * (2 + 1));
    schema_of(&s, 0, 1);
    cr_assert_eq(s.var_slot[0], -1);
    cr_assert_eq(s.var_slot[1], 0);
    cr_assert_eq(s.entry_size, 32 + 8 * (1 + 1));

    schema_of(&s, 1, 0);
    s.fields[0].codec = 2; /* reserved: the file breaks the format (verify: corrupt) */
    cr_assert_eq(sf_schema_finish(&s), SF_E_CORRUPT);
    cr_assert(strstr(sf_last_error(), "codec 2"), "%s", sf_last_error());
    schema_of(&s, 0, 0);
    s.fields[2].codec = SF_CODEC_ZSTD; /* inline */
    cr_assert_eq(sf_schema_finish(&s), SF_E_CORRUPT);
    cr_assert(strstr(sf_last_error(), "inline"), "%s", sf_last_error());
}
