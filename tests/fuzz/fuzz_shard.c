/* Fuzz target: shard header, footer and index decoding.
 *
 * Input: [schema selector][flags][128-byte header][64-byte footer][index...]
 * (missing bytes read as zero). The schema is one of fuzz_schemas.h.
 * Flags let mutations get past the checksums to the structural checks:
 *   bit 0: set the header's index_size to the index bytes present,
 *   bit 1: set the header's data_offset to what its alignment implies,
 *   bit 2: set the header's entry size and field count to the schema's,
 *   (any of bits 0-2: recompute the header checksum)
 *   bit 3: also build the whole shard file (header, zero data, index, a
 *          matching footer) in a memfd and run sf_shard_load_meta and
 *          sf_shard_scan_data on it, when the index offset is small; also
 *          a scanner fed the mapped file at once (the same problems in the
 *          same order) and
 *          scanners over parts of the file fed in pieces (check_parts),
 *   bit 4: with bit 3, the data area holds the index's bytes over and over
 *          instead of zeros (padding and bool problems, not only checksums).
 * Checks: decode/encode of header and footer is the identity; an index that
 * sf_index_check accepts really is structurally sound (records inside the
 * data area, aligned, in order, sized by the layout; keys valid, inside the
 * key area and contiguous); load_meta accepts the built file exactly when
 * the index check passed. */
#include <inttypes.h>
#include <sys/mman.h>

#include "format.h"
#include "shard_file.h"
#include "shard_scan.h"
#include "fuzz_common.h"
#include "fuzz_schemas.h"
#include "shardfeed/error.h"

/* Every problem a scan reported, folded in order. */
typedef struct problem_log {
    uint64_t count, digest;
} problem_log;

static void log_problem(void *ctx, const sf_shard_problem *p)
{
    problem_log *l = ctx;
    uint64_t what[5] = {(uint64_t)p->kind, (uint64_t)p->record, p->offset, p->field,
                        (uint64_t)p->code};
    l->digest = l->digest * 0x9E3779B97F4A7C15u ^ sf_hash(what, sizeof what);
    l->count++;
}

/* Every problem a scan reported, folded in any order (scans of parts of a
 * file report the same problems as one scan, part by part). */
static void sum_problem(void *ctx, const sf_shard_problem *p)
{
    problem_log *l = ctx;
    uint64_t what[5] = {(uint64_t)p->kind, (uint64_t)p->record, p->offset, p->field,
                        (uint64_t)p->code};
    l->digest += sf_hash(what, sizeof what);
    l->count++;
}

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* The file's bytes [lo, hi) cut into k parts at points drawn from seed, as
 * a download's ranges are (dataset_remote.c): a scanner per part fed its
 * bytes in pieces of drawn sizes, then the spans no part holds whole
 * scanned from the file. The problems of all of them must be the one
 * scan's (`whole`, folded by sum_problem). */
static void check_parts(const sf_shard_meta *m, const sf_schema *s, int fd, const uint8_t *file,
                        uint64_t size, uint64_t seed, const problem_log *whole)
{
    unsigned k = 1 + (unsigned)(seed % 4);
    uint64_t cut[6] = {0};
    for (unsigned i = 1; i < k; i++)
        cut[i] = next_rand(&seed) % (size + 1);
    cut[k] = size;
    for (unsigned i = 1; i < k; i++) /* sorted: parts in file order */
        for (unsigned j = i; j > 1 && cut[j - 1] > cut[j]; j--) {
            uint64_t t = cut[j];
            cut[j] = cut[j - 1];
            cut[j - 1] = t;
        }
    problem_log got = {0};
    uint64_t spans = sf_shard_span_count(m), done = 0;
    uint8_t *buf = malloc(64 << 10);
    FUZZ_CHECK(buf, "out of memory");
    for (unsigned i = 0; i < k; i++) {
        uint64_t first, end;
        sf_shard_spans_within(m, s, cut[i], cut[i + 1], &first, &end);
        FUZZ_CHECK(first >= done && first <= spans && end <= spans, "spans %" PRIu64 "..%" PRIu64,
                   first, end);
        if (first >= end)
            continue;
        FUZZ_CHECK(sf_shard_span_start(m, s, first) >= cut[i] &&
                       sf_shard_span_start(m, s, end) <= cut[i + 1],
                   "spans outside their part");
        if (first > done) /* spans cut by a part's edge */
            FUZZ_CHECK(sf_shard_scan_spans(m, s, fd, buf, 64 << 10, done, first, sum_problem,
                                           &got) >= 0, "scan_spans");
        sf_shard_scanner sc;
        FUZZ_CHECK(sf_shard_scanner_init(&sc, m, s, first, end, sum_problem, &got) == 0, "init");
        for (uint64_t off = cut[i]; off < cut[i + 1];) {
            uint64_t n = 1 + next_rand(&seed) % 5000;
            n = n < cut[i + 1] - off ? n : cut[i + 1] - off;
            FUZZ_CHECK(sf_shard_scanner_feed(&sc, off, file + off, n) == 0, "feed");
            off += n;
        }
        FUZZ_CHECK(sf_shard_scanner_done(&sc), "a part's spans were not all fed");
        sf_shard_scanner_free(&sc);
        done = end;
    }
    if (done < spans)
        FUZZ_CHECK(sf_shard_scan_spans(m, s, fd, buf, 64 << 10, done, spans, sum_problem, &got) >= 0,
                   "scan_spans");
    free(buf);
    FUZZ_CHECK(got.count == whole->count && got.digest == whole->digest,
               "parts found %" PRIu64 " problems, one scan %" PRIu64, got.count, whole->count);
}

/* The whole data area of the file at `file` fed to one scanner at once. */
static int64_t scan_whole(const sf_shard_meta *m, const sf_schema *s, const uint8_t *file,
                          sf_shard_problem_fn cb, problem_log *log)
{
    sf_shard_scanner sc;
    FUZZ_CHECK(sf_shard_scanner_init(&sc, m, s, 0, sf_shard_span_count(m), cb, log) == 0, "init");
    uint64_t end = m->header.index_offset;
    FUZZ_CHECK(sf_shard_scanner_feed(&sc, SF_SHARD_HEADER_SIZE, file + SF_SHARD_HEADER_SIZE,
                                     end - SF_SHARD_HEADER_SIZE) == 0, "feed");
    FUZZ_CHECK(sf_shard_scanner_done(&sc), "not done");
    int64_t n = sc.problems;
    sf_shard_scanner_free(&sc);
    return n;
}

static void check_index_sound(const sf_schema *s, const sf_shard_header *h, const uint8_t *index)
{
    uint64_t entries = h->record_count * s->entry_size;
    FUZZ_CHECK(entries <= h->index_size, "entries past the index");
    const uint8_t *keys = index + entries;
    uint64_t key_area = h->index_size - entries, key_pos = 0, prev_end = h->data_offset;
    for (uint64_t r = 0; r < h->record_count; r++) {
        sf_index_entry e;
        FUZZ_CHECK(sf_index_entry_decode(&e, s, index + r * s->entry_size) == 0, "entry %" PRIu64, r);
        uint64_t off[SF_MAX_FIELDS], size[SF_MAX_FIELDS], rec;
        FUZZ_CHECK(sf_record_layout(s, h->align, e.var_len, off, size, &rec) == 0, "layout");
        FUZZ_CHECK(e.size == rec, "record %" PRIu64 " size %" PRIu64 " != layout %" PRIu64, r, e.size, rec);
        FUZZ_CHECK(e.offset % h->align == 0 && e.offset >= prev_end, "record %" PRIu64 " offset", r);
        FUZZ_CHECK(e.offset + e.size <= h->index_offset, "record %" PRIu64 " runs into the index", r);
        for (uint32_t k = 0; k < s->n_payload; k++)
            FUZZ_CHECK(off[k] + size[k] <= e.size, "field %u outside its record", k);
        prev_end = e.offset + e.size;
        FUZZ_CHECK(e.key_offset == key_pos && e.key_length >= 1 && key_pos + e.key_length <= key_area,
                   "record %" PRIu64 " key", r);
        const char *key = (const char *)keys + key_pos;
        FUZZ_CHECK(fuzz_key_stays_inside(key, e.key_length),
                   "record %" PRIu64 " key could escape a directory", r);
        key_pos += e.key_length;
    }
    FUZZ_CHECK(key_pos == key_area, "key area not fully used");
}

/* Builds the file and runs the file-level reader on it. */
static void check_file(const sf_schema *s, const uint8_t *hb, const sf_shard_header *h,
                       const uint8_t *index, int index_ok, int fill)
{
    if (h->index_offset > (1u << 20))
        return;
    int fd = memfd_create("fuzz-shard", MFD_CLOEXEC);
    if (fd < 0)
        return;
    uint64_t size = h->index_offset + h->index_size + SF_SHARD_FOOTER_SIZE;
    uint8_t fb[SF_SHARD_FOOTER_SIZE];
    sf_shard_footer f = {h->index_offset, h->index_size, h->record_count,
                         sf_hash(index, h->index_size), h->checksum, 0};
    sf_shard_footer_encode(fb, &f);
    int ok = ftruncate(fd, (off_t)size) == 0 &&
             pwrite(fd, hb, SF_SHARD_HEADER_SIZE, 0) == SF_SHARD_HEADER_SIZE &&
             pwrite(fd, index, h->index_size, (off_t)h->index_offset) == (ssize_t)h->index_size &&
             pwrite(fd, fb, sizeof fb, (off_t)(size - sizeof fb)) == (ssize_t)sizeof fb;
    for (uint64_t off = SF_SHARD_HEADER_SIZE; ok && fill && h->index_size && off < h->index_offset;) {
        uint64_t n = h->index_offset - off < h->index_size ? h->index_offset - off : h->index_size;
        ok = pwrite(fd, index, n, (off_t)off) == (ssize_t)n;
        off += n;
    }
    if (!ok) {
        close(fd);
        return;
    }
    sf_shard_expect exp = {s, h->shard_index, h->dataset_id, h->align, NULL};
    sf_shard_meta m;
    uint64_t bad = UINT64_MAX;
    int rc = sf_shard_load_meta(&m, fd, &exp, &bad);
    /* The header's schema hash is fuzzed: load_meta also checks it. */
    int schema_ok = h->schema_hash == sf_schema_hash(s) && h->field_count == s->field_count;
    if (schema_ok)
        FUZZ_CHECK((rc == 0) == index_ok, "load_meta rc %d but index check %d: %s", rc, index_ok,
                   sf_last_error());
    if (rc == 0) {
        FUZZ_CHECK(schema_ok && index_ok, "load_meta accepted what the checks refuse");
        FUZZ_CHECK(m.file_size == size && m.index != NULL, "meta");
        uint8_t *buf = malloc(64 << 10);
        FUZZ_CHECK(buf, "out of memory");
        problem_log read = {0}, mapped = {0};
        int64_t problems = sf_shard_scan_data(&m, s, fd, buf, 64 << 10, log_problem, &read);
        FUZZ_CHECK(problems >= 0 && (uint64_t)problems <= 3 * h->record_count + 1,
                   "scan_data returned %" PRId64, problems);
        free(buf);
        /* The same scan fed the mapped file at once: the same problems, in
         * the same order. */
        void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        FUZZ_CHECK(map != MAP_FAILED, "mmap");
        int64_t in_map = scan_whole(&m, s, map, log_problem, &mapped);
        problem_log summed = {0};
        FUZZ_CHECK(scan_whole(&m, s, map, sum_problem, &summed) == in_map, "again");
        check_parts(&m, s, fd, map, size, h->checksum ^ index_ok, &summed);
        munmap(map, size);
        FUZZ_CHECK(in_map == problems && mapped.count == read.count &&
                       mapped.digest == read.digest,
                   "one feed found %" PRId64 " problems, scan_data %" PRId64, in_map, problems);
        sf_shard_meta_clear(&m);
    } else {
        FUZZ_CHECK(rc < 0 && bad <= size, "load_meta failure %d at %" PRIu64, rc, bad);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    sf_schema schema;
    fz_schema(&schema, data[0]);
    uint8_t flags = data[1];
    data += 2;
    size -= 2;
    uint8_t hb[SF_SHARD_HEADER_SIZE] = {0}, fb[SF_SHARD_FOOTER_SIZE] = {0};
    memcpy(hb, data, size < sizeof hb ? size : sizeof hb);
    if (size > sizeof hb)
        memcpy(fb, data + sizeof hb, size - sizeof hb < sizeof fb ? size - sizeof hb : sizeof fb);
    size_t pre = sizeof hb + sizeof fb;
    size_t idx_len = size > pre ? size - pre : 0;
    uint8_t *index = malloc(idx_len ? idx_len : 1);
    FUZZ_CHECK(index, "out of memory");
    memcpy(index, data + (size > pre ? pre : size), idx_len);

    /* Raw decode, and the round trip of whatever decodes. */
    sf_shard_header h;
    sf_shard_footer f;
    uint8_t again[SF_SHARD_HEADER_SIZE];
    if (sf_shard_header_decode(&h, hb) == 0) {
        sf_shard_header_encode(again, &h);
        FUZZ_CHECK(memcmp(again, hb, sizeof hb) == 0, "header decode/encode is not the identity");
    }
    if (sf_shard_footer_decode(&f, fb) == 0) {
        uint8_t fagain[SF_SHARD_FOOTER_SIZE];
        sf_shard_footer_encode(fagain, &f);
        FUZZ_CHECK(memcmp(fagain, fb, sizeof fb) == 0, "footer decode/encode is not the identity");
    }

    if (flags & 7) {
        if (flags & 1)
            fz_put64(hb + 64, idx_len);
        if (flags & 2) {
            uint32_t align = fz_le32(hb + 20);
            if (sf_valid_align(align))
                fz_put64(hb + 48, sf_data_offset(align));
        }
        if (flags & 4) {
            uint8_t v[8];
            fz_put64(v, schema.entry_size);
            memcpy(hb + 72, v, 4);
            fz_put64(v, schema.field_count);
            memcpy(hb + 76, v, 4);
            fz_put64(hb + 80, sf_schema_hash(&schema));
        }
        fz_put64(hb + 120, sf_hash(hb, 120));
    }
    int rc = sf_shard_header_decode(&h, hb);
    if (rc == 0) {
        FUZZ_CHECK(sf_valid_align(h.align) && h.data_offset == sf_data_offset(h.align), "align");
        FUZZ_CHECK(h.record_count >= 1 && h.record_count <= SF_MAX_RECORDS_PER_SHARD, "records");
        FUZZ_CHECK(h.index_size <= SF_MAX_INDEX_BYTES && h.index_offset >= h.data_offset, "index");
        if (h.index_size <= idx_len) {
            rc = sf_index_check(&schema, &h, index);
            if (rc == 0)
                check_index_sound(&schema, &h, index);
            else
                FUZZ_CHECK(rc < 0 && sf_last_error()[0] != '\0', "failure %d without a message", rc);
            if (flags & 8)
                check_file(&schema, hb, &h, index, rc == 0, flags & 16);
        }
    }
    free(index);
    return 0;
}
