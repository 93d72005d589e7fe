/* sf_pack_merge: joins the parts of a --part run into one dataset without
 * touching sample data. Each part's shards are copied (copy_file_range:
 * in-kernel, a reflink where the filesystem can) and only their 128-byte
 * header and 64-byte footer are rewritten with the whole dataset's shard
 * number, first record and dataset_id. Parts are slices of one shard plan,
 * so the result is byte for byte what a single pack writes. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error_internal.h"
#include "le.h"
#include "shard_file.h"
#include "pack_internal.h"
#include "shardfeed/pack.h"
#include "shardfeed/params.h"

/* The buffer a part's shard is read through while its records are
 * checked, as verify's. */
#define MERGE_SCAN_BUFFER (256u << 10)

typedef struct part {
    const char *dir;
    sf_manifest m;
    sf_part_info info;
} part;

static int load_part(part *p)
{
    int rc = sf_manifest_load(&p->m, p->dir);
    if (rc)
        return sf_fail_prefix(rc == -ENOENT ? SF_E_INPUT : rc, "not a finished dataset part");
    if (!sf_metadata_part(&p->info, &p->m))
        return sf_fail(SF_E_INPUT, "%s: not one part of a pack split into parts (its manifest has no 'part' entry)",
                       p->dir);
    return 0;
}

/* The whole dataset's metadata: the part's, without the keys only a part
 * has. */
static int whole_metadata(uint8_t **out, uint32_t *size, const sf_manifest *m)
{
    sf_metadata_builder b = {0};
    sf_metadata_iter it;
    const uint8_t *k, *v;
    uint32_t kl, vl;
    int rc = 0;
    sf_metadata_iter_init(&it, m->metadata, m->metadata_size);
    while (!rc && sf_metadata_next(&it, &k, &kl, &v, &vl)) {
        char key[256];
        if (sf_metadata_is_part_key(k, kl))
            continue;
        memcpy(key, k, kl); /* checked: 1..255 bytes */
        key[kl] = '\0';
        rc = sf_metadata_add(&b, key, v, vl);
    }
    if (rc) {
        sf_metadata_builder_free(&b);
        return rc;
    }
    *out = b.buf;
    *size = b.size;
    return 0;
}

/* What a part of format 1.3 records of its input's files (part_files) and
 * a part of 1.2 does not: names and sizes apart from modification times,
 * and a list input's list file. The first difference found, naming both
 * parts (b is part 0). Refused also under ignore_mtimes. */
static int check_same_files(const part *a, const part *b)
{
    const sf_part_info *x = &a->info, *y = &b->info;
    if (x->has_list != y->has_list)
        return sf_fail(SF_E_INPUT, "%s and %s were packed from different inputs (only %s from a list file); refusing to merge them",
                       b->dir, a->dir, x->has_list ? a->dir : b->dir);
    if (x->has_list && strcmp(x->list_name, y->list_name) != 0)
        return sf_fail(SF_E_INPUT, "%s and %s were packed from list files of different names ('%s' and '%s'); refusing to merge them",
                       b->dir, a->dir, y->list_name, x->list_name);
    if (x->has_list && x->list_size != y->list_size)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from different versions of the list file '%s' (%llu bytes "
                       "for %s, %llu bytes for %s): their labels or other columns differ; refusing to "
                       "merge them, also with the ignore_mtimes option",
                       b->dir, a->dir, x->list_name, (unsigned long long)y->list_size, b->dir,
                       (unsigned long long)x->list_size, a->dir);
    if (x->has_list && x->list_hash != y->list_hash)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from different versions of the list file '%s' (the same "
                       "size, %llu bytes, other bytes): their labels or other columns differ; refusing "
                       "to merge them, also with the ignore_mtimes option",
                       b->dir, a->dir, x->list_name, (unsigned long long)x->list_size);
    if (x->names_hash != y->names_hash)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from inputs whose file names differ (a file added, removed "
                       "or renamed between the parts); refusing to merge them, also with the ignore_mtimes option",
                       b->dir, a->dir);
    if (x->sizes_hash != y->sizes_hash)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from input files with the same names but different sizes "
                       "(an input changed between the parts); refusing to merge them, also with the "
                       "ignore_mtimes option",
                       b->dir, a->dir);
    return 0;
}

/* The parts were planned from one input: the same files (names, sizes and,
 * unless ignore_mtimes, modification times; for a list input, the list's
 * bytes) and the same sampled values. The whole dataset_id already covers
 * the keys, value sizes, schema and options. */
static int check_same_input(const part *a, const part *b, unsigned flags)
{
    const part *old = !a->info.has_input ? a : !b->info.has_input ? b : NULL;
    if (old)
        return sf_fail(SF_E_INPUT,
                       "%s: part without an input identity (no 'part_input' entry: packed by a shardfeed "
                       "before format 1.2), so it cannot be told from a part of another input; pack the "
                       "parts again",
                       old->dir);
    int files = a->info.has_files && b->info.has_files;
    int rc = files ? check_same_files(a, b) : 0;
    if (rc)
        return rc;
    if (a->info.values_hash != b->info.values_hash)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from inputs with the same names and sizes but different "
                       "contents (their samples of values differ); refusing to merge them",
                       b->dir, a->dir);
    if (a->info.files_hash == b->info.files_hash || (files && (flags & SF_MERGE_IGNORE_MTIMES)))
        return 0;
    if (files)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from input files with the same names and sizes but "
                       "different modification times (an input changed between the parts, or was "
                       "copied without keeping times: then the ignore_mtimes option, "
                       "SF_MERGE_IGNORE_MTIMES, merges them)",
                       b->dir, a->dir);
    /* A part of format 1.2 has one hash of names, sizes and times: which
     * of them differ is unknown, so the times cannot be ignored alone. */
    old = !a->info.has_files ? a : b;
    if (flags & SF_MERGE_IGNORE_MTIMES)
        return sf_fail(SF_E_INPUT,
                       "%s and %s were packed from input files that differ in names, sizes or "
                       "modification times, and %s was packed by a shardfeed before format 1.3 (no "
                       "'part_files' entry), which does not record which: the ignore_mtimes option "
                       "cannot tell that only the times differ; pack the parts again",
                       b->dir, a->dir, old->dir);
    return sf_fail(SF_E_INPUT,
                   "%s and %s were packed from input files that differ in names, sizes or modification "
                   "times (an input changed between the parts, or was copied without keeping times; %s "
                   "was packed by a shardfeed before format 1.3, which does not record which: pack the "
                   "parts again to merge parts of a copy without times)",
                   b->dir, a->dir, old->dir);
}

/* Every part of one run, each once, consistent with each other. p is sorted
 * by part index, so a repeat is two neighbours and a missing part a gap; each
 * refusal names the parts it is about, not only how many were given. */
static int check_parts(part *p, size_t n, unsigned flags)
{
    uint32_t count = p[0].info.count;
    for (size_t k = 1; k < n; k++)
        if (p[k].info.count != count)
            return sf_fail(SF_E_INPUT, "%s and %s are parts of different runs (%s is part %u of %u, "
                           "%s part %u of %u)", p[0].dir, p[k].dir, p[0].dir, p[0].info.index, count,
                           p[k].dir, p[k].info.index, p[k].info.count);
    for (size_t k = 1; k < n; k++)
        if (p[k].info.index == p[k - 1].info.index)
            return sf_fail(SF_E_INPUT, "%s and %s are both part %u of %u", p[k - 1].dir, p[k].dir,
                           p[k].info.index, count);
    for (size_t k = 0; k < n; k++)
        if (p[k].info.index != k)
            return sf_fail(SF_E_INPUT, "part %u of %u is missing: %zu part(s) given, the run made %u",
                           (unsigned)k, count, n, count);
    if (n != count) /* parts 0..n-1 given, n < count */
        return sf_fail(SF_E_INPUT, "part %zu of %u is missing: %zu part(s) given, the run made %u",
                       n, count, n, count);
    uint64_t shards = 0, records = 0;
    for (size_t k = 0; k < n; k++) {
        const part *a = &p[k], *b = &p[0];
        assert(a->info.index == k && a->info.count == count);
        if (a->info.whole_dataset_id != b->info.whole_dataset_id ||
            a->info.whole_records != b->info.whole_records ||
            a->info.whole_shards != b->info.whole_shards || a->m.align != b->m.align ||
            sf_schema_hash(&a->m.schema) != sf_schema_hash(&b->m.schema))
            return sf_fail(SF_E_INPUT, "%s and %s are parts of different runs (input, options or N differ)",
                           b->dir, a->dir);
        int rc = check_same_input(a, b, flags);
        if (rc)
            return rc;
        if (a->info.first_shard != shards || a->info.first_record != records)
            return sf_fail(SF_E_CORRUPT, "%s: part %u starts at shard %llu, record %llu; expected %llu, %llu",
                           a->dir, a->info.index, (unsigned long long)a->info.first_shard,
                           (unsigned long long)a->info.first_record, (unsigned long long)shards,
                           (unsigned long long)records);
        shards += a->m.shard_count;
        records += a->m.record_count;
    }
    if (shards != p[0].info.whole_shards || records != p[0].info.whole_records)
        return sf_fail(SF_E_CORRUPT, "the parts hold %llu shards and %llu records; the run made %llu and %llu",
                       (unsigned long long)shards, (unsigned long long)records,
                       (unsigned long long)p[0].info.whole_shards,
                       (unsigned long long)p[0].info.whole_records);
    return 0;
}

/* Copies `size` bytes of src (open as in) to dst (open as out). Errors name
 * both: a full disk is the output's, a read error the input's. */
static int copy_all(int in, int out, uint64_t size, const char *src, const char *dst)
{
    uint64_t done = 0;
    while (done < size) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)(size - done), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL))
                break; /* fall back to read + write below */
            return sf_fail(n < 0 ? -errno : SF_E_TRUNCATED, "copying %s to %s: %s", src, dst,
                           n < 0 ? strerror(errno) : "the input shrank");
        }
        done += (uint64_t)n;
    }
    uint8_t buf[1 << 16];
    while (done < size) {
        uint64_t want = size - done < sizeof buf ? size - done : sizeof buf;
        int rc = sf_pread_full(in, buf, want, done);
        if (!rc)
            rc = sf_write_full(out, buf, want);
        if (rc)
            return sf_fail(rc, "copying %s to %s: %s", src, dst, sf_strerror(rc));
        done += want;
    }
    return 0;
}

/* OUT/shard-NNNNNN.sfs of the whole, and its temporary name (OUT is the
 * locked output folder: pack_out_path). */
static void whole_shard_paths(char *tmp, char *dst, size_t cap, const char *out, uint64_t global,
                              uint64_t whole_id)
{
    char name[SF_SHARD_NAME_MAX];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)global);
    pack_temp_path(tmp, cap, out, name, whole_id);
    pack_out_path(dst, cap, out, name);
}

/* Checks every record of the part's shard open on `in` as verify does
 * (payload checksums, zero padding, bool values): a damaged part is
 * refused, naming its file, the record and the byte offset, before any of
 * it is copied. */
static int check_shard_data(const part *p, const sf_shard_meta *meta, int in, const char *src, uint8_t *buf)
{
    sf_first_problem f = {.count = 0};
    int64_t n = sf_shard_scan_data(meta, &p->m.schema, in, buf, MERGE_SCAN_BUFFER, sf_keep_first_problem, &f);
    if (n < 0)
        return sf_fail_prefix((int)n, src);
    if (n == 0)
        return 0;
    const sf_shard_problem *q = &f.first;
    char what[400];
    sf_shard_problem_text(what, sizeof what, q, &p->m.schema);
    return sf_fail(q->code, "%s: %s (%lld problem%s in this shard; verify %s lists them): a damaged part, refusing to merge it",
                   src, what, (long long)n, n == 1 ? "" : "s", p->dir);
}

/* Checks shard `local` of part p and copies it as shard `global` of the
 * whole, with its header and footer rewritten, under its temporary name
 * (the caller renames every shard once all are written). */
static int merge_shard(const part *p, uint64_t local, uint64_t global, const char *out, uint8_t *scan,
                       sf_shard_desc *desc)
{
    char name[SF_SHARD_NAME_MAX], src[SF_PATH_CAP], tmp[SF_PATH_CAP], dst[SF_PATH_CAP];
    snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)local);
    /* The part's folder was only checked short enough for its manifest's
     * name, which is shorter than a shard's: cut, this path would name
     * another file ("<part>/shard-00000"). */
    int rc = sf_path_join(src, sizeof src, p->dir, name);
    if (rc)
        return sf_fail_prefix(rc, "a part of the merge");
    whole_shard_paths(tmp, dst, sizeof tmp, out, global, p->info.whole_dataset_id);
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (in < 0)
        return sf_fail(errno == EMFILE || errno == ENFILE ? -errno : SF_E_INPUT, "%s: %s", src,
                       sf_errno_text(errno));
    posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
    sf_shard_expect exp = {&p->m.schema, local, p->m.dataset_id, p->m.align, &p->m.shards[local]};
    sf_shard_meta meta;
    uint64_t bad = 0;
    rc = sf_shard_load_meta(&meta, in, &exp, &bad);
    if (rc) {
        close(in);
        char where[4200];
        snprintf(where, sizeof where, "%s (byte %llu)", src, (unsigned long long)bad);
        return sf_fail_prefix(rc, where);
    }
    rc = check_shard_data(p, &meta, in, src, scan);
    int fd = -1;
    if (!rc && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644)) < 0)
        rc = sf_fail(-errno, "%s: cannot create: %s", tmp, sf_errno_text(errno));
    if (!rc)
        rc = copy_all(in, fd, meta.file_size, src, tmp);
    if (!rc) {
        sf_shard_header h = meta.header;
        h.shard_index = global;
        h.first_record = meta.header.first_record + p->info.first_record;
        h.dataset_id = p->info.whole_dataset_id;
        uint8_t hb[SF_SHARD_HEADER_SIZE], fb[SF_SHARD_FOOTER_SIZE];
        sf_shard_header_encode(hb, &h);
        sf_shard_footer f = meta.footer;
        f.header_checksum = h.checksum;
        sf_shard_footer_encode(fb, &f);
        if (pwrite(fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb ||
            pwrite(fd, fb, sizeof fb, (off_t)(meta.file_size - sizeof fb)) != (ssize_t)sizeof fb ||
            fsync(fd) != 0)
            rc = sf_fail(errno ? -errno : -EIO, "%s: write failed: %s", tmp, strerror(errno ? errno : EIO));
        *desc = (sf_shard_desc){h.record_count, h.first_record, meta.file_size, h.checksum,
                                f.index_checksum};
    }
    if (fd >= 0 && close(fd) != 0 && !rc)
        rc = sf_fail(-errno, "%s: close failed: %s", tmp, strerror(errno));
    if (rc && fd >= 0)
        unlink(tmp);
    sf_shard_meta_clear(&meta);
    close(in);
    return rc;
}

static int cmp_part(const void *a, const void *b)
{
    uint32_t x = ((const part *)a)->info.index, y = ((const part *)b)->info.index;
    return x < y ? -1 : x > y;
}

int sf_pack_merge(sf_pack_result *result, const char *const *parts, size_t n_parts,
                  const char *output_dir, unsigned flags)
{
    if (!parts || n_parts == 0 || !output_dir)
        return sf_fail(SF_E_INVALID, "sf_pack_merge: no parts or no output directory");
    if (n_parts > SF_PACK_MAX_PARTS) /* before allocating n_parts of anything */
        return sf_fail(SF_E_INVALID, "sf_pack_merge: %zu parts, more than a pack makes (%u)", n_parts,
                       SF_PACK_MAX_PARTS);
    if (flags & ~(SF_MERGE_FORCE | SF_MERGE_IGNORE_MTIMES))
        return sf_fail(SF_E_INVALID, "sf_pack_merge: unknown flags 0x%x (SF_MERGE_FORCE, SF_MERGE_IGNORE_MTIMES)",
                       flags & ~(SF_MERGE_FORCE | SF_MERGE_IGNORE_MTIMES));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    part *p = calloc(n_parts, sizeof *p);
    if (!p)
        return sf_fail(-ENOMEM, "out of memory");
    /* Held for the whole merge, taken before anything is looked at: two
     * runs writing one folder would remove each other's files. */
    pack_lock lock;
    int rc = pack_outdir_lock(&lock, output_dir, "merge");
    /* The output may not be one of the parts (the same folder, a symlink to
     * it): with force, preparing it deleted that part's manifest and shards
     * before they were copied, losing the input and the result. */
    struct stat out_st;
    int have_out = !rc && stat(output_dir, &out_st) == 0;
    for (size_t k = 0; k < n_parts && !rc; k++) {
        struct stat part_st;
        if (!parts[k])
            rc = sf_fail(SF_E_INVALID, "sf_pack_merge: part %zu is NULL", k);
        else if (have_out && stat(parts[k], &part_st) == 0 && part_st.st_dev == out_st.st_dev &&
                 part_st.st_ino == out_st.st_ino)
            rc = sf_fail(SF_E_INVALID, "%s: the output folder is the part %s itself: merge into another "
                         "folder (the part would be deleted before it was read)", output_dir, parts[k]);
    }
    for (size_t k = 0; k < n_parts && !rc; k++) {
        p[k].dir = parts[k];
        rc = load_part(&p[k]);
    }
    if (!rc) {
        qsort(p, n_parts, sizeof *p, cmp_part);
        rc = check_parts(p, n_parts, flags);
    }
    sf_manifest whole;
    memset(&whole, 0, sizeof whole);
    pack_plan plan;
    memset(&plan, 0, sizeof plan);
    uint8_t *reuse = NULL;
    pack_outdir_state state = PACK_OUT_WRITE;
    if (!rc) {
        whole = p[0].m;
        whole.dataset_id = p[0].info.whole_dataset_id;
        whole.record_count = p[0].info.whole_records;
        whole.shard_count = p[0].info.whole_shards;
        whole.shards = calloc(whole.shard_count, sizeof *whole.shards);
        whole.metadata = NULL;
        reuse = calloc(whole.shard_count, 1);
        if (!whole.shards || !reuse)
            rc = sf_fail(-ENOMEM, "out of memory");
    }
    if (!rc)
        rc = whole_metadata(&whole.metadata, &whole.metadata_size, &p[0].m);
    if (!rc) {
        plan.dataset_id = whole.dataset_id;
        plan.shard_count = whole.shard_count;
        rc = pack_outdir_prepare(output_dir, &plan, flags & SF_MERGE_FORCE, reuse, &state);
        /* Merged shards are written anew whatever is there: a complete
         * dataset of this id is replaced only when asked to. */
        if (!rc && state == PACK_OUT_COMPLETE)
            rc = sf_fail(SF_E_EXISTS, "%s: already holds a complete dataset of this run (the force option, SF_MERGE_FORCE, replaces it)",
                         output_dir);
    }
    /* Every shard is checked and written under its temporary name first;
     * only when all are do they take their names, so a damaged part leaves
     * no shard of the merge behind, and a dataset being replaced (--force)
     * whole (a crash among the renames leaves no manifest: not a dataset,
     * and the next run starts again). */
    uint64_t written = 0, bytes = 0;
    uint8_t *scan = NULL;
    if (!rc && !(scan = malloc(MERGE_SCAN_BUFFER)))
        rc = sf_fail(-ENOMEM, "out of memory");
    for (size_t k = 0; k < n_parts && !rc; k++)
        for (uint64_t s = 0; s < p[k].m.shard_count && !rc; s++) {
            rc = merge_shard(&p[k], s, written, output_dir, scan, &whole.shards[written]);
            if (!rc)
                bytes += whole.shards[written++].file_size;
        }
    free(scan);
    /* The manifest too is written before any shard takes its name, so that
     * only renames and removals remain (pack_outdir_install). */
    uint64_t msize = 0;
    if (!rc) {
        msize = sf_manifest_encoded_size(&whole);
        uint8_t *buf = malloc(msize);
        if (!buf) {
            rc = sf_fail(-ENOMEM, "out of memory");
        } else {
            sf_manifest_encode(buf, &whole);
            rc = pack_write_temp(output_dir, SF_MANIFEST_NAME, whole.dataset_id, buf, msize);
            free(buf);
        }
    }
    if (!rc)
        rc = pack_outdir_install(output_dir, &plan, state == PACK_OUT_REPLACE);
    else if (plan.shard_count)
        rc = pack_outdir_abandon(rc, output_dir, &plan, state);
    if (!rc && result) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        memset(result, 0, sizeof *result);
        result->samples = whole.record_count;
        result->shards = whole.shard_count;
        result->bytes_out = bytes + msize;
        result->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    pack_outdir_unlock(&lock);
    rc = pack_explain_fd_limit(rc);
    free(whole.shards);
    free(whole.metadata);
    free(reuse);
    for (size_t k = 0; k < n_parts; k++)
        sf_manifest_clear(&p[k].m);
    free(p);
    return rc;
}
