/* Fuzz target: the list input's parser (CSV and TSV: RFC 4180 quoting, a
 * byte order mark, CRLF, empty lines, header detection, column typing,
 * keys) on a buffer, and list.csv as export writes it.
 *
 * Input: byte 0 picks the list's name, which picks the delimiter (0: l.csv,
 * comma; 1: l.tsv, tab; else l.txt, a tab when the first line has one);
 * the rest is the list. The files its rows name are not looked at
 * (input_list_open_memory). Checks, beyond "no crash, no UB, no leak":
 *  - a refused list fails with a message naming the list;
 *  - an accepted one has the fields data (bytes, variable) and label
 *    (int64, inline) first, every further column int64, float64 or text,
 *    and keys that are valid paths and distinct;
 *  - list.csv written from it by the list format's export (header, then a
 *    row per sample) parses back to the same keys, schema and values, and
 *    that list's own list.csv is the same bytes: packing an exported list
 *    never changes a value or a cell. */
#include <stdio.h>

#include "fuzz_common.h"
#include "input_memory.h"
#include "shardfeed/error.h"

static const char *const list_names[] = {"l.csv", "l.tsv", "l.txt"};

/* The values of one sample, as export's row writer asks for them. */
typedef struct row_source {
    const input_set *in;
    uint64_t sample;
    uint8_t *buf;
    uint64_t cap;
} row_source;

/* Field f of r->sample, read as pack reads it (the list keeps every value
 * but the files' in memory). */
static uint8_t *read_value(row_source *r, uint32_t f, uint64_t *size)
{
    const input_set *in = r->in;
    FUZZ_CHECK(f != 0, "field 'data' (the files) asked for");
    *size = in->sizes[r->sample * in->schema.field_count + f];
    if (*size + 1 > r->cap) {
        r->buf = realloc(r->buf, *size + 1);
        FUZZ_CHECK(r->buf, "out of memory");
        r->cap = *size + 1;
    }
    int rc = in->ops->read(NULL, in, r->sample, f, r->buf);
    FUZZ_CHECK(rc == 0, "reading sample %llu field %u: %s", (unsigned long long)r->sample, f,
               sf_last_error());
    return r->buf;
}

static int row_value(void *ctx, uint32_t f, const void **value, uint64_t *size)
{
    *value = read_value(ctx, f, size);
    return 0;
}

/* list.csv of `in`, as export writes it (malloc'd, *len bytes). */
static char *export_list(const input_set *in, size_t *len)
{
    const input_export *ex = &in->ops->export;
    input_layout l = {.schema = &in->schema, .data_field = -1};
    FUZZ_CHECK(ex->layout(&l) == 0 && l.data_field == 0, "the list layout does not take its own schema");
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    FUZZ_CHECK(f, "open_memstream");
    FUZZ_CHECK(ex->list_header(f, &l) == 0, "list header");
    row_source r = {.in = in};
    for (r.sample = 0; r.sample < in->sample_count; r.sample++) {
        const char *key = in->keys[r.sample];
        FUZZ_CHECK(ex->list_row(f, &l, key, strlen(key), row_value, &r) == 0, "list row");
    }
    free(r.buf);
    FUZZ_CHECK(fclose(f) == 0, "fclose");
    return text;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What every accepted list must be. */
static void check_accepted(const input_set *in)
{
    const sf_schema *s = &in->schema;
    FUZZ_CHECK(in->sample_count > 0 && s->field_count >= 2, "%llu samples, %u fields",
               (unsigned long long)in->sample_count, s->field_count);
    FUZZ_CHECK(strcmp(s->fields[0].name, "data") == 0 && s->fields[0].dtype == SF_DTYPE_BYTES &&
                   s->fields[0].storage == SF_STORAGE_VARIABLE,
               "field 0 is not data");
    FUZZ_CHECK(strcmp(s->fields[1].name, "label") == 0 && s->fields[1].dtype == SF_DTYPE_INT64 &&
                   s->fields[1].storage == SF_STORAGE_INLINE,
               "field 1 is not label");
    for (uint32_t f = 2; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        int text = fd->dtype == SF_DTYPE_BYTES && fd->storage == SF_STORAGE_VARIABLE;
        int number = (fd->dtype == SF_DTYPE_INT64 || fd->dtype == SF_DTYPE_FLOAT64) &&
                     fd->storage == SF_STORAGE_INLINE;
        FUZZ_CHECK(text || number, "column %u typed %d/%d", f, fd->dtype, fd->storage);
    }
    char **keys = malloc(in->sample_count * sizeof *keys);
    FUZZ_CHECK(keys, "out of memory");
    for (uint64_t i = 0; i < in->sample_count; i++) {
        keys[i] = in->keys[i];
        FUZZ_CHECK(fuzz_key_stays_inside(keys[i], strlen(keys[i])), "key '%s' accepted", keys[i]);
        FUZZ_CHECK(in->sizes[i * s->field_count] == 0, "a file was looked at");
    }
    qsort(keys, in->sample_count, sizeof *keys, cmp_str);
    for (uint64_t i = 1; i < in->sample_count; i++)
        FUZZ_CHECK(strcmp(keys[i - 1], keys[i]) != 0, "key '%s' accepted twice", keys[i]);
    free(keys);
}

/* b, parsed from a's list.csv, holds a's samples. */
static void check_same(const input_set *a, const input_set *b)
{
    FUZZ_CHECK(a->sample_count == b->sample_count, "%llu samples, back %llu",
               (unsigned long long)a->sample_count, (unsigned long long)b->sample_count);
    uint32_t nf = a->schema.field_count;
    FUZZ_CHECK(nf == b->schema.field_count, "%u fields, back %u", nf, b->schema.field_count);
    for (uint32_t f = 0; f < nf; f++) {
        const sf_field *x = &a->schema.fields[f], *y = &b->schema.fields[f];
        FUZZ_CHECK(strcmp(x->name, y->name) == 0 && x->dtype == y->dtype && x->storage == y->storage &&
                       x->ndim == y->ndim,
                   "field %u: %s (dtype %d) came back as %s (dtype %d)", f, x->name, x->dtype, y->name,
                   y->dtype);
    }
    row_source ra = {.in = a}, rb = {.in = b};
    for (uint64_t i = 0; i < a->sample_count; i++) {
        FUZZ_CHECK(strcmp(a->keys[i], b->keys[i]) == 0, "key '%s' came back as '%s'", a->keys[i], b->keys[i]);
        ra.sample = rb.sample = i;
        for (uint32_t f = 1; f < nf; f++) {
            uint64_t na, nb;
            const uint8_t *va = read_value(&ra, f, &na), *vb = read_value(&rb, f, &nb);
            FUZZ_CHECK(na == nb && memcmp(va, vb, na) == 0, "sample %llu ('%s') field %s changed",
                       (unsigned long long)i, a->keys[i], a->schema.fields[f].name);
        }
    }
    free(ra.buf);
    free(rb.buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *name = list_names[data[0] < 2 ? data[0] : 2];
    input_set a;
    int rc = input_list_open_memory(&a, name, data + 1, size - 1);
    if (rc) {
        FUZZ_CHECK(rc < 0, "rc %d", rc);
        FUZZ_CHECK(rc == -ENOMEM || strstr(sf_last_error(), name), "message does not name the list: %s",
                   sf_last_error());
        input_free(&a);
        return 0;
    }
    check_accepted(&a);
    size_t len;
    char *csv = export_list(&a, &len);
    input_set b;
    rc = input_list_open_memory(&b, "exported.csv", csv, len);
    FUZZ_CHECK(rc == 0, "export's list.csv is refused: %s\n--- list.csv:\n%.*s", sf_last_error(), (int)len,
               csv);
    check_same(&a, &b);
    size_t len2;
    char *csv2 = export_list(&b, &len2);
    FUZZ_CHECK(len == len2 && memcmp(csv, csv2, len) == 0, "list.csv of the exported list differs");
    free(csv);
    free(csv2);
    input_free(&b);
    input_free(&a);
    return 0;
}
