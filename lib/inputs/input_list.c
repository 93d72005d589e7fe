/* List input: a CSV or TSV file whose rows are `path,label[,more columns]`.
 *
 * Field "data" holds the bytes of the file a row names (relative to the
 * list's folder unless absolute), "label" the row's integer label (int64,
 * inline). Further columns become fields typed over all rows: int64 when
 * every cell is an integer, float64 when every cell is a number, else the
 * cell's text as variable-length bytes; a number is written exactly as
 * export writes it back (parse_int). The first row is a header when its
 * label cell is not empty and no number in any spelling; a header names
 * the further columns (the first two fields are always "data" and
 * "label"); without one they are col2, col3, ... The key of a sample is its path as written, without a
 * leading "./" or '/'.
 *
 * Cells follow RFC 4180 in both CSV and TSV: a cell that starts with '"'
 * ends at the next lone '"', "" stands for one '"', and the cell may hold
 * delimiters and newlines. CRLF line ends, a UTF-8 byte order mark and
 * empty lines are accepted. The list is read and parsed once; every cell's
 * text stays in one arena, and each column keeps one 8-byte value per row
 * (the number itself, or the text's offset in the arena).
 *
 * Export writes each file back to DIR/<key>, then DIR/list.csv: a header
 * row, then key and every other field's value per sample, numbers as
 * number_text.h writes them, so that the list packs to the same records. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "le.h"
#include "number_text.h"
#include "shard_file.h"
#include "key_table.h"
#include "input_memory.h"
#include "input_util.h"

enum { F_DATA, F_LABEL };

enum col_kind {
    COL_FILE,  /* column 0: v = arena offset of the path */
    COL_INT,   /* v = the int64 */
    COL_FLOAT, /* v = the float64's bits */
    COL_TEXT,  /* v = arena offset of the text */
};

typedef struct list_col {
    enum col_kind kind;
    uint64_t *v; /* [sample] */
} list_col;

typedef struct list_priv {
    char *dir;      /* the list's folder: relative paths start there */
    char *arena;    /* every cell's text, unescaped, each NUL-terminated */
    uint64_t *line; /* [sample]: the row's line in the list, for messages */
    uint32_t ncols;
    list_col cols[SF_MAX_FIELDS]; /* one per column = one per field */
} list_priv;

/* The list while it is parsed: all rows' cells, as arena offsets. */
typedef struct parser {
    const char *file; /* for messages */
    const char *buf;
    size_t len, pos;
    uint64_t line; /* physical line at pos, from 1 */
    char delim;
    char *arena; /* len + 1 bytes: no cell's text is longer than its source */
    size_t used;
    uint64_t *cells; /* [row * ncols + col] */
    size_t ncells, cells_cap;
    uint64_t *lines; /* [row]: where the row starts */
    size_t nrows, rows_cap;
    uint32_t ncols;
    int look_at_files; /* stat each row's file (discovery), or not (a list in memory) */
} parser;

static int push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        uint64_t *nv = realloc(*v, c * sizeof *nv);
        if (!nv)
            return sf_fail(-ENOMEM, "out of memory");
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

static int read_whole(const char *path, char **out, size_t *len, struct stat *stp)
{
    struct stat st;
    int fd = input_open_file(path, &st);
    if (fd < 0)
        return fd;
    int rc = 0;
    char *buf = NULL;
    *stp = st;
    if ((uint64_t)st.st_size >= SIZE_MAX / 2)
        rc = sf_fail(SF_E_LIMIT, "%s: too large for a list", path);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = sf_fail(-ENOMEM, "out of memory for the %lld-byte list %s", (long long)st.st_size, path);
    else if ((rc = sf_pread_full(fd, buf, (uint64_t)st.st_size, 0)))
        rc = sf_fail(SF_E_INPUT, "%s: read failed: %s", path, sf_strerror(rc));
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)st.st_size;
    return 0;
}

/* A NUL byte means a binary file, and cells are handled as C strings. */
static int check_no_nul(const parser *ps)
{
    const char *z = memchr(ps->buf, '\0', ps->len);
    if (!z)
        return 0;
    uint64_t line = 1;
    for (const char *c = ps->buf; c < z; c++)
        line += *c == '\n';
    return sf_fail(SF_E_INPUT, "%s:%llu: NUL byte (a list is text)", ps->file, (unsigned long long)line);
}

/* Comma for .csv, tab for .tsv; otherwise tab when the first line has one. */
static char pick_delimiter(const char *file, const char *buf, size_t len)
{
    if (input_ends_with(file, ".csv"))
        return ',';
    if (input_ends_with(file, ".tsv"))
        return '\t';
    const char *nl = memchr(buf, '\n', len);
    return memchr(buf, '\t', nl ? (size_t)(nl - buf) : len) ? '\t' : ',';
}

static int at_line_end(const parser *ps, size_t at)
{
    return at == ps->len || ps->buf[at] == '\n' ||
           (ps->buf[at] == '\r' && (at + 1 == ps->len || ps->buf[at + 1] == '\n'));
}

static int parse_quoted(parser *ps, uint64_t row_line)
{
    ps->pos++; /* the opening quote */
    for (;;) {
        if (ps->pos == ps->len)
            return sf_fail(SF_E_INPUT, "%s:%llu: quoted cell not closed", ps->file,
                           (unsigned long long)row_line);
        char c = ps->buf[ps->pos++];
        if (c == '"') {
            if (ps->pos < ps->len && ps->buf[ps->pos] == '"')
                ps->pos++; /* "" stands for one quote */
            else
                break;
        }
        ps->line += c == '\n';
        ps->arena[ps->used++] = c;
    }
    if (ps->pos < ps->len && ps->buf[ps->pos] == '\r' && at_line_end(ps, ps->pos))
        ps->pos++;
    if (ps->pos < ps->len && ps->buf[ps->pos] != ps->delim && ps->buf[ps->pos] != '\n')
        return sf_fail(SF_E_INPUT, "%s:%llu: text after a quoted cell's closing quote", ps->file,
                       (unsigned long long)ps->line);
    return 0;
}

/* One cell at pos into the arena; *row_end tells whether the row ends
 * after it. */
static int parse_cell(parser *ps, uint64_t row_line, int *row_end)
{
    size_t start = ps->used;
    int rc = 0;
    if (ps->pos < ps->len && ps->buf[ps->pos] == '"') {
        rc = parse_quoted(ps, row_line);
    } else {
        while (ps->pos < ps->len && ps->buf[ps->pos] != ps->delim && ps->buf[ps->pos] != '\n')
            ps->arena[ps->used++] = ps->buf[ps->pos++];
        if (ps->used > start && ps->arena[ps->used - 1] == '\r' && at_line_end(ps, ps->pos))
            ps->used--; /* CRLF */
    }
    if (rc)
        return rc;
    ps->arena[ps->used++] = '\0';
    if ((rc = push_u64(&ps->cells, &ps->ncells, &ps->cells_cap, start)))
        return rc;
    *row_end = ps->pos == ps->len || ps->buf[ps->pos] == '\n';
    if (ps->pos < ps->len) {
        ps->line += ps->buf[ps->pos] == '\n';
        ps->pos++; /* the delimiter or newline */
    }
    return 0;
}

/* Skips an empty line at pos; returns 1 when there was one. */
static int skip_empty_line(parser *ps)
{
    const char *b = ps->buf + ps->pos;
    size_t left = ps->len - ps->pos;
    size_t n = b[0] == '\n' ? 1 : (left >= 2 && b[0] == '\r' && b[1] == '\n') ? 2 : 0;
    ps->pos += n;
    ps->line += n > 0;
    return n > 0;
}

static int parse_rows(parser *ps)
{
    if (ps->len >= 3 && memcmp(ps->buf, "\xEF\xBB\xBF", 3) == 0)
        ps->pos = 3; /* UTF-8 byte order mark (spreadsheets write one) */
    ps->line = 1;
    while (ps->pos < ps->len) {
        if (skip_empty_line(ps))
            continue;
        uint64_t row_line = ps->line;
        size_t first = ps->ncells;
        int end = 0, rc;
        while (!end)
            if ((rc = parse_cell(ps, row_line, &end)))
                return rc;
        size_t cells = ps->ncells - first;
        if (ps->nrows == 0) {
            if (cells < 2)
                return sf_fail(SF_E_INPUT, "%s:%llu: one column; rows are path,label[,more columns] (%s)",
                               ps->file, (unsigned long long)row_line,
                               ps->delim == ',' ? "comma-separated" : "tab-separated");
            if (cells > SF_MAX_FIELDS)
                return sf_fail(SF_E_LIMIT, "%s:%llu: %zu columns (at most %u)", ps->file,
                               (unsigned long long)row_line, cells, SF_MAX_FIELDS);
            ps->ncols = (uint32_t)cells;
        } else if (cells != ps->ncols) {
            return sf_fail(SF_E_INPUT, "%s:%llu: %zu cells, expected %u as on line %llu", ps->file,
                           (unsigned long long)row_line, cells, ps->ncols,
                           (unsigned long long)ps->lines[0]);
        }
        if ((rc = push_u64(&ps->lines, &ps->nrows, &ps->rows_cap, row_line)))
            return rc;
    }
    return 0;
}

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Typing rule (README "list"): a cell is an int64 or a float64 only when
 * it is written exactly as export writes that number back
 * (lib/inputs/number_text.h), so packing never changes a cell's text: "7",
 * "-3", "0.5", "1.0", "1e-05", "nan" are numbers; "+7", "007", " 7", "7.",
 * "1e3", "0x1A", "NaN", "" and anything beyond int64 are not. */
static int parse_int(const char *s, int64_t *v)
{
    return input_i64_from_text(s, strlen(s), v);
}

static int parse_float(const char *s, double *v)
{
    return input_f64_from_text(s, strlen(s), v);
}

/* Whether a cell is meant as a number in some spelling (what strtod reads,
 * blanks around allowed): a first row whose label cell is one is data
 * (then held to the typing rule), never a header. */
static int looks_numeric(const char *s)
{
    s = skip_blanks(s);
    char *end;
    strtod(s, &end);
    return end != s && *skip_blanks(end) == '\0';
}

static const char *cell(const parser *ps, size_t row, uint32_t col)
{
    return ps->arena + ps->cells[row * ps->ncols + col];
}

/* Whether s holds a digit or a minus sign of any common spelling: ASCII,
 * U+2212 (minus), fullwidth U+FF0D and U+FF10..U+FF19 (UTF-8 E2 88 92,
 * EF BC 8D, EF BC 90..99). */
static int has_digit_or_minus(const char *s)
{
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if ((*u >= '0' && *u <= '9') || *u == '-')
            return 1;
        if (u[0] == 0xE2 && u[1] == 0x88 && u[2] == 0x92)
            return 1;
        if (u[0] == 0xEF && u[1] == 0xBC && (u[2] == 0x8D || (u[2] >= 0x90 && u[2] <= 0x99)))
            return 1;
    }
    return 0;
}

static char *full_path(const list_priv *p, const char *path)
{
    return path[0] == '/' ? strdup(path) : input_path_join(p->dir, path);
}

/* Whether the first row names its columns. Its label cell must read as a
 * name, not a number in any spelling: not empty, not what strtod reads, no
 * digit or minus sign at all (`1_000`, `1,000`, U+2212 `-1` and fullwidth
 * digits are numbers to a person, and dropping the row as a header lost
 * that sample without a word); and, where files are looked at, its path
 * cell must not be a file the list could mean (a first row `a.bin,O`, the
 * label mistyped, is data: the label is then refused, naming the line). */
static int first_row_is_header(const parser *ps, const list_priv *p)
{
    if (ps->nrows == 0)
        return 0;
    const char *label = cell(ps, 0, F_LABEL), *path = cell(ps, 0, F_DATA);
    if (!label[0] || looks_numeric(label) || has_digit_or_minus(label))
        return 0;
    if (!ps->look_at_files || !path[0])
        return 1;
    char *full = full_path(p, path);
    struct stat st;
    int exists = full && stat(full, &st) == 0;
    free(full);
    return !exists;
}

static void set_field(sf_field *f, const char *name, enum col_kind kind)
{
    memset(f, 0, sizeof *f);
    /* Names were checked (sf_valid_field_name: at most 63 bytes). */
    size_t n = strnlen(name, sizeof f->name - 1);
    memcpy(f->name, name, n);
    if (kind == COL_FILE || kind == COL_TEXT) {
        f->dtype = SF_DTYPE_BYTES;
        f->ndim = 1;
        f->storage = SF_STORAGE_VARIABLE;
    } else {
        f->dtype = kind == COL_INT ? SF_DTYPE_INT64 : SF_DTYPE_FLOAT64;
        f->storage = SF_STORAGE_INLINE;
        f->item_size = 8;
    }
}

/* Field names of columns 2.. from the header, or col2, col3, ... */
static int name_columns(const parser *ps, int header, char names[][SF_MAX_NAME + 1])
{
    snprintf(names[F_DATA], SF_MAX_NAME + 1, "data");
    snprintf(names[F_LABEL], SF_MAX_NAME + 1, "label");
    for (uint32_t c = 2; c < ps->ncols; c++) {
        if (!header) {
            snprintf(names[c], SF_MAX_NAME + 1, "col%u", c);
            continue;
        }
        const char *h = cell(ps, 0, c);
        if (!sf_valid_field_name(h, strlen(h)))
            return sf_fail(SF_E_INPUT,
                           "%s:%llu: column %u's name '%s' is not a field name (1-%u characters of "
                           "[A-Za-z0-9._-], not starting with '.')",
                           ps->file, (unsigned long long)ps->lines[0], c + 1, h, SF_MAX_NAME);
        for (uint32_t k = 0; k < c; k++)
            if (strcmp(names[k], h) == 0)
                return sf_fail(SF_E_INPUT, "%s:%llu: column %u's name '%s' is taken (by column %u%s)",
                               ps->file, (unsigned long long)ps->lines[0], c + 1, h, k + 1,
                               k < 2 ? ": the first two fields are always data and label" : "");
        snprintf(names[c], SF_MAX_NAME + 1, "%s", h);
    }
    return 0;
}

/* The key of a path as written: without leading "./" and '/'. */
static const char *key_part(const char *path)
{
    for (;;) {
        if (path[0] == '.' && path[1] == '/')
            path += 2;
        else if (path[0] == '/')
            path++;
        else
            return path;
    }
}

/* Key, size and (through the file's stat) existence of row `r`'s data;
 * without look_at_files only the key (the size stays 0). */
static int add_file(input_set *in, list_priv *p, uint64_t r, const char *path, int look_at_files)
{
    const char *k = key_part(path);
    char why[600];
    if (!sf_key_check(k, strlen(k), why, sizeof why))
        return sf_fail(SF_E_INPUT, "%s:%llu: path '%s': %s", in->path, (unsigned long long)p->line[r],
                       path, why);
    if (!(in->keys[r] = strdup(k)))
        return sf_fail(-ENOMEM, "out of memory");
    if (!look_at_files)
        return 0;
    char *full = full_path(p, path);
    if (!full)
        return sf_fail(-ENOMEM, "out of memory");
    struct stat st;
    int rc = 0;
    int serr = stat(full, &st) != 0 ? errno : 0;
    if (serr || !S_ISREG(st.st_mode))
        rc = sf_fail(SF_E_INPUT, "%s:%llu: %s: %s", in->path, (unsigned long long)p->line[r], full,
                     serr ? strerror(serr) : "not a regular file");
    else if ((uint64_t)st.st_size > SF_MAX_FIELD_BYTES)
        rc = sf_fail(SF_E_LIMIT, "%s:%llu: %s: %lld bytes (one value may have at most %llu)", in->path,
                     (unsigned long long)p->line[r], full, (long long)st.st_size,
                     (unsigned long long)SF_MAX_FIELD_BYTES);
    else if (access(full, R_OK) != 0)
        rc = sf_fail(SF_E_INPUT, "%s:%llu: %s: %s", in->path, (unsigned long long)p->line[r], full,
                     strerror(errno));
    free(full);
    if (!rc)
        in->sizes[r * p->ncols + F_DATA] = (uint64_t)st.st_size;
    if (!rc)
        input_note_file(in, path, (uint64_t)st.st_size, input_mtime_ns(&st));
    return rc;
}

static void key_of_sample(void *ctx, uint64_t s, const uint8_t **key, size_t *len)
{
    const input_set *in = ctx;
    *key = (const uint8_t *)in->keys[s];
    *len = strlen(in->keys[s]);
}

static int check_unique_keys(input_set *in, const list_priv *p)
{
    sf_key_table t;
    int rc = sf_key_table_init(&t, in->sample_count, key_of_sample, in);
    for (uint64_t r = 0; r < in->sample_count && !rc; r++) {
        uint64_t first;
        if (sf_key_table_add(&t, r, (const uint8_t *)in->keys[r], strlen(in->keys[r]), &first) == 1)
            rc = sf_fail(SF_E_INPUT, "%s:%llu: key '%s' repeats line %llu", in->path,
                         (unsigned long long)p->line[r], in->keys[r],
                         (unsigned long long)p->line[first]);
    }
    sf_key_table_free(&t);
    return rc;
}

/* Types extra column c over all rows: int64, else float64, else text. */
static int type_column(input_set *in, list_priv *p, const parser *ps, int header, uint32_t c)
{
    list_col *col = &p->cols[c];
    uint64_t n = in->sample_count, r;
    int64_t iv;
    double dv;
    col->kind = COL_INT;
    for (r = 0; r < n && parse_int(cell(ps, r + (size_t)header, c), &iv); r++)
        col->v[r] = (uint64_t)iv;
    if (r < n) {
        col->kind = COL_FLOAT;
        for (r = 0; r < n && parse_float(cell(ps, r + (size_t)header, c), &dv); r++)
            memcpy(&col->v[r], &dv, sizeof dv);
    }
    if (r < n) {
        col->kind = COL_TEXT;
        for (r = 0; r < n; r++) {
            const char *t = cell(ps, r + (size_t)header, c);
            uint64_t len = strlen(t);
            if (len > SF_MAX_FIELD_BYTES)
                return sf_fail(SF_E_LIMIT, "%s:%llu: column %u: cell of %llu bytes (at most %llu)",
                               in->path, (unsigned long long)p->line[r], c + 1,
                               (unsigned long long)len, (unsigned long long)SF_MAX_FIELD_BYTES);
            col->v[r] = (uint64_t)(t - ps->arena);
            in->sizes[r * p->ncols + c] = len;
        }
    } else {
        for (r = 0; r < n; r++)
            in->sizes[r * p->ncols + c] = 8;
    }
    return 0;
}

/* Fills every column's values, the keys and the sizes from the parsed rows. */
static int fill_samples(input_set *in, list_priv *p, const parser *ps, int header)
{
    uint64_t n = in->sample_count;
    for (uint32_t c = 0; c < p->ncols; c++)
        if (!(p->cols[c].v = malloc(n * sizeof *p->cols[c].v)))
            return sf_fail(-ENOMEM, "out of memory");
    if (!(p->line = malloc(n * sizeof *p->line)))
        return sf_fail(-ENOMEM, "out of memory");
    int rc = 0;
    p->cols[F_DATA].kind = COL_FILE;
    p->cols[F_LABEL].kind = COL_INT;
    for (uint64_t r = 0; r < n && !rc; r++) {
        size_t row = r + (size_t)header;
        p->line[r] = ps->lines[row];
        const char *path = cell(ps, row, F_DATA), *label = cell(ps, row, F_LABEL);
        int64_t v;
        if (!parse_int(label, &v))
            return sf_fail(SF_E_INPUT,
                           "%s:%llu: label '%s' is not an integer written in plain decimal (digits, "
                           "an optional '-', no leading zeros, '+' or blanks, within int64)",
                           in->path, (unsigned long long)p->line[r], label);
        p->cols[F_LABEL].v[r] = (uint64_t)v;
        in->sizes[r * p->ncols + F_LABEL] = 8;
        p->cols[F_DATA].v[r] = (uint64_t)(path - ps->arena);
        rc = add_file(in, p, r, path, ps->look_at_files);
    }
    for (uint32_t c = 2; c < p->ncols && !rc; c++)
        rc = type_column(in, p, ps, header, c);
    if (!rc)
        rc = check_unique_keys(in, p);
    for (uint64_t i = 0; !rc && i < n * p->ncols; i++)
        in->bytes_in += in->sizes[i];
    return rc;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static void list_free(input_set *in)
{
    list_priv *p = in->priv;
    if (!p)
        return;
    for (uint32_t c = 0; c < SF_MAX_FIELDS; c++)
        free(p->cols[c].v);
    free(p->line);
    free(p->arena);
    free(p->dir);
    free(p);
    in->priv = NULL;
}

static int read_data(const input_set *in, const list_priv *p, uint64_t s, uint8_t *dst)
{
    uint64_t size = in->sizes[s * p->ncols + F_DATA];
    char *path = full_path(p, p->arena + p->cols[F_DATA].v[s]);
    if (!path)
        return sf_fail(-ENOMEM, "out of memory");
    unsigned long long line = (unsigned long long)p->line[s];
    int rc = 0;
    struct stat st;
    int fd = input_open_file(path, &st);
    if (fd < 0) {
        char where[4200];
        snprintf(where, sizeof where, "%s:%llu", in->path, line);
        rc = sf_fail_prefix(fd, where);
    } else if ((uint64_t)st.st_size != size)
        rc = sf_fail(SF_E_INPUT, "%s:%llu: %s: input changed while packing (size %llu, was %llu)",
                     in->path, line, path, (unsigned long long)st.st_size, (unsigned long long)size);
    else if ((rc = sf_pread_full(fd, dst, size, 0)))
        rc = sf_fail(SF_E_INPUT, "%s:%llu: %s: read failed: %s", in->path, line, path, sf_strerror(rc));
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

static int list_read(void *cursor, const input_set *in, uint64_t s, uint32_t f, uint8_t *dst)
{
    (void)cursor;
    const list_priv *p = in->priv;
    const list_col *col = &p->cols[f];
    switch (col->kind) {
    case COL_FILE:
        return read_data(in, p, s, dst);
    case COL_INT:
    case COL_FLOAT:
        sf_put_le64(dst, col->v[s]);
        return 0;
    case COL_TEXT:
        memcpy(dst, p->arena + col->v[s], in->sizes[s * p->ncols + f]);
        return 0;
    }
    return sf_fail(SF_E_STATE, "%s: unknown column kind", in->path);
}

static void parser_free(parser *ps)
{
    free((char *)ps->buf);
    free(ps->arena);
    free(ps->cells);
    free(ps->lines);
}

/* Parses the list `path`, whose bytes are buf[0, len) (taken over: freed
 * here), into `in`. */
static int parse_list(input_set *in, const char *path, char *buf, size_t len, int look_at_files)
{
    parser ps = {.file = path, .buf = buf, .len = len, .look_at_files = look_at_files};
    list_priv *p = calloc(1, sizeof *p);
    in->priv = p;
    int rc = p ? 0 : sf_fail(-ENOMEM, "out of memory");
    if (!rc && !(p->dir = dir_of(path)))
        rc = sf_fail(-ENOMEM, "out of memory");
    if (!rc && !(ps.arena = malloc(ps.len + 1)))
        rc = sf_fail(-ENOMEM, "out of memory for the list %s", path);
    /* Read as one row, a list whose lines end in CR alone (classic Mac OS)
     * failed as "no rows" or on its first row's cell count. */
    if (!rc && memchr(ps.buf, '\r', ps.len) && !memchr(ps.buf, '\n', ps.len))
        rc = sf_fail(SF_E_INPUT, "%s: its lines end in a CR alone (classic Mac OS): convert them "
                                 "to LF or CRLF",
                     path);
    if (!rc && !(rc = check_no_nul(&ps))) {
        ps.delim = pick_delimiter(path, ps.buf, ps.len);
        rc = parse_rows(&ps);
    }
    int header = !rc && first_row_is_header(&ps, p);
    if (!rc && ps.nrows <= (size_t)header)
        rc = sf_fail(SF_E_INPUT, "%s: no rows (a list holds path,label rows)", path);
    char names[SF_MAX_FIELDS][SF_MAX_NAME + 1];
    if (!rc)
        rc = name_columns(&ps, header, names);
    if (!rc) {
        p->ncols = in->schema.field_count = ps.ncols;
        rc = input_alloc(in, ps.nrows - (size_t)header);
    }
    if (!rc)
        rc = fill_samples(in, p, &ps, header);
    if (!rc) {
        for (uint32_t c = 0; c < p->ncols; c++)
            set_field(&in->schema.fields[c], names[c], p->cols[c].kind);
        if ((rc = sf_schema_finish(&in->schema)))
            rc = sf_fail_prefix(rc, path);
    }
    if (!rc) {
        p->arena = ps.arena; /* path and text cells stay there */
        ps.arena = NULL;
    }
    parser_free(&ps);
    return rc;
}

static int list_discover(input_set *in, const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    struct stat st;
    int rc = read_whole(path, &buf, &len, &st);
    if (rc)
        return rc;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    input_note_file(in, base, (uint64_t)st.st_size, input_mtime_ns(&st));
    /* The list alone holds the labels (the dataset_id has only their
     * sizes): a part records its bytes' hash, for merge to compare. */
    in->has_list = 1;
    in->list_size = (uint64_t)len;
    in->list_hash = sf_hash(buf, len);
    snprintf(in->list_name, sizeof in->list_name, "%s", base);
    return parse_list(in, path, buf, len, 1);
}

int input_list_open_memory(input_set *in, const char *name, const void *buf, size_t len)
{
    int rc = input_set_init(in, name, &input_format_list);
    if (rc)
        return rc;
    char *copy = malloc(len + 1);
    if (!copy)
        return sf_fail(-ENOMEM, "out of memory for the list %s", name);
    memcpy(copy, buf, len);
    return parse_list(in, name, copy, len, 0);
}

/* ---- export: DIR/<path> for the files, then DIR/list.csv ---- */

/* Text as one CSV cell, quoted when it must be (RFC 4180). */
static void csv_text(FILE *f, const char *t, uint64_t size)
{
    int quote = memchr(t, ',', size) || memchr(t, '"', size) || memchr(t, '\n', size) ||
                memchr(t, '\r', size);
    if (quote)
        fputc('"', f);
    for (uint64_t i = 0; i < size; i++) {
        if (quote && t[i] == '"')
            fputc('"', f);
        fputc(t[i], f);
    }
    if (quote)
        fputc('"', f);
}

/* One cell of list.csv: text as it is, numbers as number_text.h writes
 * them, which is how discovery reads them back (a float64 cell keeps its
 * text: "0.1", not "0.10000000000000001"). */
static void csv_cell(FILE *f, const sf_field *fd, const void *v, uint64_t size)
{
    fputc(',', f);
    char t[INPUT_NUMBER_TEXT_MAX];
    if (fd->storage == SF_STORAGE_VARIABLE || fd->ndim != 0) {
        csv_text(f, v, size);
    } else if (fd->dtype == SF_DTYPE_FLOAT64) {
        double d;
        uint64_t bits = sf_get_le64(v);
        memcpy(&d, &bits, 8);
        fwrite(t, 1, input_f64_to_text(t, d), f);
    } else if (fd->dtype == SF_DTYPE_FLOAT32) {
        float x;
        uint32_t bits = sf_get_le32(v);
        memcpy(&x, &bits, 4);
        fprintf(f, "%.9g", (double)x);
    } else {
        /* An integer (or bool) of `size` bytes, little-endian. */
        uint8_t b[8] = {0};
        memcpy(b, v, size < 8 ? size : 8);
        uint64_t u = sf_get_le64(b);
        int is_signed = fd->dtype == SF_DTYPE_INT8 || fd->dtype == SF_DTYPE_INT16 ||
                        fd->dtype == SF_DTYPE_INT32 || fd->dtype == SF_DTYPE_INT64;
        if (is_signed && size < 8 && (u >> (8 * size - 1) & 1))
            u |= ~0ull << (8 * size); /* sign-extend */
        if (is_signed)
            fwrite(t, 1, input_i64_to_text(t, (int64_t)u), f);
        else
            fprintf(f, "%" PRIu64, u);
    }
}

/* "path", then the name of every field but the files' (data). */
static int list_export_header(FILE *f, const input_layout *l)
{
    fputs("path", f);
    for (uint32_t c = 0; c < l->schema->field_count; c++)
        if ((int)c != l->data_field)
            fprintf(f, ",%s", l->schema->fields[c].name);
    fputc('\n', f);
    return 0;
}

static int list_export_row(FILE *f, const input_layout *l, const char *key, size_t klen,
                           input_value_fn value, void *ctx)
{
    csv_text(f, key, klen);
    int rc = 0;
    for (uint32_t c = 0; c < l->schema->field_count && !rc; c++) {
        const void *v;
        uint64_t size;
        if ((int)c != l->data_field && !(rc = value(ctx, c, &v, &size)))
            csv_cell(f, &l->schema->fields[c], v, size);
    }
    fputc('\n', f);
    return rc;
}

/* ---- the format ---- */

static int list_detect(const char *name, int is_dir)
{
    return !is_dir && (input_ends_with(name, ".csv") || input_ends_with(name, ".tsv") ||
                       input_ends_with(name, ".txt"));
}

/* LIST:LINE: PATH, as the list's other messages about a row's file. */
static void list_value_source(char *buf, size_t cap, const input_set *in, uint64_t s, uint32_t f)
{
    const list_priv *p = in->priv;
    char *path = p->cols[f].kind == COL_FILE ? full_path(p, p->arena + p->cols[f].v[s]) : NULL;
    snprintf(buf, cap, "%s:%llu: %s", in->path, (unsigned long long)p->line[s], path ? path : in->keys[s]);
    free(path);
}

const input_format input_format_list = {
    .name = "list",
    .file_hint = "a .csv, .tsv or .txt list",
    .detect = list_detect,
    .discover = list_discover,
    .cursor_open = input_no_cursor_open,
    .read = list_read,
    .cursor_close = input_no_cursor_close,
    .free = list_free,
    .value_source = list_value_source,
    .export = {.layout = input_data_file_layout,
               .file_name = input_data_file_name,
               .list_name = "list.csv",
               .list_header = list_export_header,
               .list_row = list_export_row},
};
