/* Fuzz target: a tar's members split into samples (WebDataset: the key is
 * a member's name up to the first '.' of its last part, the rest is the
 * field), through libarchive on a memory buffer, and the values read back
 * through the cursor pack reads with.
 *
 * Input: the bytes of one tar (plain, or any compression libarchive reads).
 * Checks, beyond "no crash, no UB, no leak":
 *  - a refused tar fails with a message naming it;
 *  - for an accepted one, a walk of the same bytes with libarchive alone
 *    finds only regular files and folders (links and devices are refused)
 *    and no error, and its regular files, split by hand, are the samples
 *    in order: the consecutive members of one key are one sample, whose
 *    fields are the schema's (sorted, distinct, every sample all of them)
 *    with the sizes discovery recorded; keys are valid and distinct;
 *  - every value reads back through one cursor, the samples in order and
 *    then in reverse (which makes the cursor open the tar again, at the
 *    sample's header when it is not compressed), equal to the member's
 *    bytes in the walk. An unchanged tar never reads differently from what
 *    discovery found. */
#include <archive.h>
#include <archive_entry.h>

#include "fuzz_common.h"
#include "input_memory.h"
#include "shardfeed/error.h"

#define TAR_NAME "f.tar"
#define KEEP_MAX (4u << 20) /* member bytes the walk keeps; past that values are not compared */

typedef struct member {
    char *key, *field;
    uint8_t *data; /* NULL when not kept */
    uint64_t size;
} member;

typedef struct walk {
    member *m;
    size_t n, cap;
    int failed;     /* a header or data error */
    int irregular;  /* a link, device, FIFO or socket */
    uint64_t kept;
} walk;

/* Splits `name` as the WebDataset convention says, independently of the
 * library: "./" prefixes dropped, key up to the first '.' of the last part. */
static void split(member *m, const char *name)
{
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    const char *slash = strrchr(name, '/');
    const char *dot = strchr(slash ? slash + 1 : name, '.');
    FUZZ_CHECK(dot, "an accepted member without a '.': %s", name);
    m->key = strndup(name, (size_t)(dot - name));
    m->field = strdup(dot + 1);
    FUZZ_CHECK(m->key && m->field, "out of memory");
}

static void read_member(walk *w, struct archive *a, member *m)
{
    uint8_t chunk[8192];
    uint64_t got = 0;
    int keep = w->kept + m->size <= KEEP_MAX;
    if (keep) {
        m->data = malloc(m->size + 1);
        FUZZ_CHECK(m->data, "out of memory");
        w->kept += m->size;
    } else if (archive_read_data_skip(a) != ARCHIVE_OK) {
        w->failed = 1;
        return;
    }
    while (keep) {
        la_ssize_t r = archive_read_data(a, chunk, sizeof chunk);
        if (r < 0) {
            w->failed = 1;
            return;
        }
        if (r == 0)
            break;
        if (got + (uint64_t)r <= m->size)
            memcpy(m->data + got, chunk, (size_t)r);
        got += (uint64_t)r;
    }
    if (keep && got != m->size)
        w->failed = 1; /* the header's size is not what the member holds */
}

static void walk_tar(walk *w, const uint8_t *data, size_t size)
{
    struct archive *a = archive_read_new();
    FUZZ_CHECK(a, "out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_memory(a, data, size) != ARCHIVE_OK) {
        w->failed = 1;
        archive_read_free(a);
        return;
    }
    struct archive_entry *e;
    int r;
    while (!w->failed && (r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            w->failed = 1;
            break;
        }
        mode_t type = archive_entry_filetype(e);
        if (type == AE_IFDIR)
            continue;
        if (type != AE_IFREG || archive_entry_hardlink(e)) {
            w->irregular = 1;
            continue;
        }
        const char *name = archive_entry_pathname(e);
        if (!name || !archive_entry_size_is_set(e)) {
            w->failed = 1;
            break;
        }
        if (w->n == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 16;
            w->m = realloc(w->m, w->cap * sizeof *w->m);
            FUZZ_CHECK(w->m, "out of memory");
        }
        member *m = &w->m[w->n++];
        memset(m, 0, sizeof *m);
        m->size = (uint64_t)archive_entry_size(e);
        split(m, name);
        read_member(w, a, m);
    }
    archive_read_free(a);
}

static void walk_free(walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->m[i].key);
        free(w->m[i].field);
        free(w->m[i].data);
    }
    free(w->m);
}

/* The walk's members, grouped, are the discovered samples. Returns, for
 * each (sample, field), the member it came from: first[s] + its place. */
static void check_samples(const input_set *in, const walk *w, size_t *member_of)
{
    const sf_schema *s = &in->schema;
    uint32_t nf = s->field_count;
    for (uint32_t f = 0; f < nf; f++) {
        FUZZ_CHECK(s->fields[f].dtype == SF_DTYPE_BYTES && s->fields[f].storage == SF_STORAGE_VARIABLE,
                   "field %s", s->fields[f].name);
        FUZZ_CHECK(f == 0 || strcmp(s->fields[f - 1].name, s->fields[f].name) < 0, "fields not sorted");
    }
    size_t i = 0;
    for (uint64_t smp = 0; smp < in->sample_count; smp++) {
        const char *key = in->keys[smp];
        FUZZ_CHECK(fuzz_key_stays_inside(key, strlen(key)), "key '%s' accepted", key);
        uint64_t seen = 0;
        size_t start = i;
        for (; i < w->n && strcmp(w->m[i].key, key) == 0; i++) {
            int f = sf_schema_find(s, w->m[i].field);
            FUZZ_CHECK(f >= 0, "member %s.%s: field not in the schema", key, w->m[i].field);
            FUZZ_CHECK(!(seen >> f & 1), "member %s.%s twice", key, w->m[i].field);
            seen |= 1ull << f;
            FUZZ_CHECK(in->sizes[smp * nf + (uint32_t)f] == w->m[i].size,
                       "member %s.%s: size %llu, found %llu", key, w->m[i].field,
                       (unsigned long long)w->m[i].size, (unsigned long long)in->sizes[smp * nf + (uint32_t)f]);
            member_of[smp * nf + (uint32_t)f] = i;
        }
        FUZZ_CHECK(i - start == nf, "sample '%s': %zu members, %u fields", key, i - start, nf);
        for (size_t k = 0; k < start; k++)
            FUZZ_CHECK(strcmp(w->m[k].key, key) != 0, "key '%s' came back after other samples", key);
    }
    FUZZ_CHECK(i == w->n, "%zu members, %zu in samples", w->n, i);
}

static void check_value(const input_set *in, void *cursor, const walk *w, const size_t *member_of,
                        uint64_t smp, uint32_t f, uint8_t *buf)
{
    uint32_t nf = in->schema.field_count;
    int rc = in->ops->read(cursor, in, smp, f, buf);
    FUZZ_CHECK(rc == 0, "sample %llu field %u does not read back: %s", (unsigned long long)smp, f,
               sf_last_error());
    const member *m = &w->m[member_of[smp * nf + f]];
    if (m->data)
        FUZZ_CHECK(memcmp(buf, m->data, m->size) == 0, "member %s.%s reads back differently", m->key,
                   m->field);
}

/* Every value through one cursor, in order and then backwards. */
static void check_reads(const input_set *in, const walk *w, const size_t *member_of)
{
    uint64_t largest = 1;
    for (uint64_t i = 0; i < in->sample_count * in->schema.field_count; i++)
        largest = in->sizes[i] > largest ? in->sizes[i] : largest;
    uint8_t *buf = malloc(largest);
    FUZZ_CHECK(buf, "out of memory");
    void *cursor;
    FUZZ_CHECK(in->ops->cursor_open(in, &cursor) == 0, "cursor: %s", sf_last_error());
    for (uint64_t s = 0; s < in->sample_count; s++)
        for (uint32_t f = 0; f < in->schema.field_count; f++)
            check_value(in, cursor, w, member_of, s, f, buf);
    for (uint64_t s = in->sample_count; s-- > 0;)
        for (uint32_t f = in->schema.field_count; f-- > 0;)
            check_value(in, cursor, w, member_of, s, f, buf);
    in->ops->cursor_close(cursor);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_set in;
    int rc = input_tar_open_memory(&in, TAR_NAME, data, size);
    if (rc) {
        FUZZ_CHECK(rc < 0, "rc %d", rc);
        FUZZ_CHECK(rc == -ENOMEM || strstr(sf_last_error(), TAR_NAME), "message does not name the tar: %s",
                   sf_last_error());
        input_free(&in);
        return 0;
    }
    walk w = {0};
    walk_tar(&w, data, size);
    FUZZ_CHECK(!w.irregular, "a tar with a link, device, FIFO or socket was accepted");
    FUZZ_CHECK(!w.failed, "a tar libarchive cannot walk cleanly was accepted");
    size_t *member_of = malloc(in.sample_count * in.schema.field_count * sizeof *member_of);
    FUZZ_CHECK(member_of, "out of memory");
    check_samples(&in, &w, member_of);
    /* Values are read (allocated) only for tars that hold a few MiB; the
     * walk kept them all then. */
    if (in.bytes_in <= KEEP_MAX)
        check_reads(&in, &w, member_of);
    free(member_of);
    walk_free(&w);
    input_free(&in);
    return 0;
}
