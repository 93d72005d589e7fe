/* Fuzz target: opening, reading and verifying a whole dataset from bytes.
 *
 * Input: [flags][u32 LE manifest length][manifest bytes][shard bytes]. The
 * bytes are written to a scratch directory as manifest.sfm and
 * shard-000000.sfs; then sf_dataset_open, sf_dataset_key and
 * sf_dataset_get(check=1) on every field of every sample (for compressed
 * fields sf_dataset_value_size and sf_dataset_read_value), and sf_verify_ex
 * with decompress.
 *
 * Flags let mutations get past the checksums (each one recomputed after the
 * fields it covers were patched):
 *   bit 0: reseal: shard header checksum; footer's header checksum, index
 *          checksum (over the range the header names) and own checksum;
 *          the manifest's first shard descriptor (file size, header and
 *          index checksums) and its trailer,
 *   bit 1: (with bit 0) copy the manifest's schema hash, field count and
 *          dataset id into the shard header,
 *   bit 2: (with bit 0) copy the header's index offset/size/record count
 *          into the footer,
 *   bit 4: leave the shard file out,  bit 5: add a stray shard-000001.sfs.
 *
 * Oracle: sf_verify_ex (decompress) == 0 implies open succeeds and every
 * checked read succeeds; open failing implies verify fails; verify reports problems
 * exactly when it fails with SF_E_CORRUPT; a checked read equals an
 * unchecked one; keys are valid file-name components. */
#include <inttypes.h>

#include "format.h"
#include "fuzz_common.h"
#include "shardfeed/dataset.h"
#include "shardfeed/error.h"

static void count_problem(void *ctx, const sf_verify_problem *p)
{
    uint64_t *n = ctx;
    FUZZ_CHECK(p->code < 0 && p->file && p->message, "malformed problem report");
    (*n)++;
}

/* A compressed value: its size is checked before it is trusted (at most
 * 2^30, item_size for a fixed field), reading it fails only as corrupt or
 * as a checksum mismatch, and never once verify --decompress passed. */
static void check_compressed(sf_dataset *ds, uint64_t i, uint32_t f, const sf_field_info *fi, int vrc)
{
    static uint8_t buf[1 << 16];
    uint64_t size = 0, got = 0;
    int rc = sf_dataset_value_size(&size, ds, i, f);
    FUZZ_CHECK(rc == 0 || rc == SF_E_CORRUPT, "value size: %d %s", rc, sf_last_error());
    if (rc == 0)
        FUZZ_CHECK(size <= (1ull << 30) && (fi->storage == SF_STORAGE_VARIABLE || size == fi->item_size),
                   "unchecked content size %" PRIu64, size);
    if (rc == 0 && size > sizeof buf) /* legal but large: only the size query */
        return;
    rc = sf_dataset_read_value(buf, sizeof buf, &got, ds, i, f, 1);
    if (vrc == 0)
        FUZZ_CHECK(rc == 0, "verify passed but reading sample %" PRIu64 " field %u failed: %s", i, f,
                   sf_last_error());
    FUZZ_CHECK(rc == 0 || rc == SF_E_CHECKSUM || rc == SF_E_CORRUPT, "read_value: %d %s", rc,
               sf_last_error());
    FUZZ_CHECK(rc != 0 || got == size, "read %" PRIu64 " bytes, size said %" PRIu64, got, size);
}

static void reseal(uint8_t flags, uint8_t *man, size_t mlen, uint8_t *sh, size_t slen)
{
    uint32_t fc = mlen >= 64 ? fz_le32(man + 20) : 0;
    int have_fields = fc >= 1 && fc <= SF_MAX_FIELDS && 64 + (uint64_t)fc * SF_FIELD_DESC_SIZE <= mlen;
    uint64_t hsum = 0, isum = 0;
    if (slen >= SF_SHARD_HEADER_SIZE) {
        if ((flags & 2) && have_fields) {
            fz_put64(sh + 80, sf_hash(man + 64, (size_t)fc * SF_FIELD_DESC_SIZE));
            uint8_t v[8];
            fz_put64(v, fc);
            memcpy(sh + 76, v, 4);
            memcpy(sh + 88, man + 48, 8);
        }
        hsum = sf_hash(sh, 120);
        fz_put64(sh + 120, hsum);
    }
    if (slen >= SF_SHARD_HEADER_SIZE + SF_SHARD_FOOTER_SIZE) {
        uint8_t *ft = sh + slen - SF_SHARD_FOOTER_SIZE;
        if (flags & 4) {
            memcpy(ft + 0, sh + 56, 8);  /* index_offset */
            memcpy(ft + 8, sh + 64, 8);  /* index_size */
            memcpy(ft + 16, sh + 32, 8); /* record_count */
        }
        uint64_t io = fz_le64(ft + 0), is = fz_le64(ft + 8);
        if (io <= slen - SF_SHARD_FOOTER_SIZE && is <= slen - SF_SHARD_FOOTER_SIZE - io)
            fz_put64(ft + 24, sf_hash(sh + io, (size_t)is));
        isum = fz_le64(ft + 24);
        fz_put64(ft + 32, hsum);
        fz_put64(ft + 48, sf_hash(ft, 48));
    }
    if (have_fields && 64 + (uint64_t)fc * SF_FIELD_DESC_SIZE + SF_SHARD_DESC_SIZE + 8 <= mlen) {
        uint8_t *d = man + 64 + (size_t)fc * SF_FIELD_DESC_SIZE;
        fz_put64(d + 16, slen);
        fz_put64(d + 24, hsum);
        fz_put64(d + 32, isum);
    }
    if (mlen >= 8)
        fz_put64(man + mlen - 8, sf_hash(man, mlen - 8));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint8_t flags = data[0];
    size_t mlen = fz_le32(data + 1);
    data += 5;
    size -= 5;
    if (mlen > size)
        mlen = size;
    size_t slen = size - mlen;
    uint8_t *man = malloc(mlen + 1), *sh = malloc(slen + 1);
    FUZZ_CHECK(man && sh, "out of memory");
    memcpy(man, data, mlen);
    memcpy(sh, data + mlen, slen);
    if (flags & 1)
        reseal(flags, man, mlen, sh, slen);

    char dir[1024];
    fz_fresh_dir(dir, sizeof dir, "ds");
    fz_write_file(dir, "manifest.sfm", man, mlen);
    if (!(flags & 16))
        fz_write_file(dir, "shard-000000.sfs", sh, slen);
    if (flags & 32)
        fz_write_file(dir, "shard-000001.sfs", sh, slen);
    free(man);
    free(sh);

    uint64_t reported = 0;
    sf_verify_summary sum;
    memset(&sum, 0, sizeof sum);
    sf_verify_opts vo = SF_VERIFY_OPTS_INIT;
    vo.jobs = 1;
    vo.decompress = 1;
    int vrc = sf_verify_ex(&sum, dir, &vo, count_problem, &reported);
    FUZZ_CHECK(reported == sum.problems, "callback saw %" PRIu64 ", summary says %" PRIu64, reported,
               sum.problems);
    FUZZ_CHECK((vrc == 0) == (sum.problems == 0), "verify rc %d with %" PRIu64 " problems (%s)", vrc,
               sum.problems, sf_last_error());
    FUZZ_CHECK(vrc == 0 || vrc == SF_E_CORRUPT, "verify could not run: %d %s", vrc, sf_last_error());

    sf_dataset *ds = NULL;
    int orc = sf_dataset_open(&ds, dir);
    if (orc != 0) {
        FUZZ_CHECK(orc < 0 && ds == NULL && sf_last_error()[0], "open failure %d", orc);
        FUZZ_CHECK(vrc != 0, "open fails (%s) but verify passes", sf_last_error());
        return 0;
    }
    uint64_t n = sf_dataset_num_samples(ds);
    uint32_t nf = sf_dataset_num_fields(ds);
    FUZZ_CHECK(n == sum.records || vrc != 0, "open sees %" PRIu64 " samples, verify %" PRIu64, n,
               sum.records);
    for (uint64_t i = 0; i < n; i++) {
        const char *key;
        size_t klen;
        FUZZ_CHECK(sf_dataset_key(&key, &klen, ds, i) == 0, "key of sample %" PRIu64, i);
        FUZZ_CHECK(klen <= 255 && fuzz_key_stays_inside(key, klen),
                   "sample %" PRIu64 ": unsafe key", i);
        for (uint32_t f = 0; f < nf; f++) {
            sf_field_info zi;
            FUZZ_CHECK(sf_dataset_field(&zi, ds, f) == 0, "field info");
            if (zi.codec != SF_CODEC_NONE) {
                check_compressed(ds, i, f, &zi, vrc);
                continue;
            }
            const void *p1 = NULL, *p0 = NULL;
            uint64_t s1 = 0, s0 = 0;
            int rc = sf_dataset_get(&p1, &s1, ds, i, f, 1);
            if (vrc == 0)
                FUZZ_CHECK(rc == 0, "verify passed but checked read of sample %" PRIu64 " field %u failed: %s",
                           i, f, sf_last_error());
            FUZZ_CHECK(rc == 0 || rc == SF_E_CHECKSUM, "get: %d %s", rc, sf_last_error());
            FUZZ_CHECK(sf_dataset_get(&p0, &s0, ds, i, f, 0) == 0, "unchecked get failed");
            if (rc == 0) {
                FUZZ_CHECK(p0 == p1 && s0 == s1, "checked and unchecked reads differ");
                sf_field_info fi;
                FUZZ_CHECK(sf_dataset_field(&fi, ds, f) == 0, "field info");
                if (fi.storage != SF_STORAGE_VARIABLE)
                    FUZZ_CHECK(s1 == fi.item_size, "size %" PRIu64 " of a fixed field", s1);
                volatile uint8_t sink = 0;
                for (uint64_t b = 0; b < s1; b++) /* touch every byte: ASan/mmap bounds */
                    sink ^= ((const uint8_t *)p1)[b];
                (void)sink;
            }
        }
    }
    FUZZ_CHECK(sf_dataset_get(&(const void *){NULL}, &(uint64_t){0}, ds, n, 0, 1) == SF_E_INVALID,
               "sample past the end");
    sf_dataset_close(ds);
    return 0;
}
