/* .npy header parsing and writing, data normalisation to C-order
 * little-endian. See npy.h for the contract and numpy/lib/format.py for the
 * format this mirrors.
 *
 * The header is untrusted input: it is scanned in place with a bounded
 * cursor (no allocation, no copies), every length is checked against the
 * bytes actually present, and sizes are capped before anyone allocates.
 */
#include "npy.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "error_internal.h"

/* '=' (native) and the output byte order are both "little-endian" only on a
 * little-endian host; refuse to build rather than silently mislabel data. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/inputs/npy.c assumes a little-endian host"
#endif

/* No single array may hold more than 2^40 bytes (SPEC.md's field cap). */
#define NPY_MAX_DATA ((uint64_t)1 << 40)
/* numpy aligns the data to 64 bytes so it can be memory-mapped. */
#define NPY_ALIGN 64
/* numpy >= 1.24 leaves room after the dict so the growth axis (the first one
 * for C order) can be rewritten with up to this many digits in place. */
#define NPY_GROWTH_DIGITS 21
/* Longest descr quoted in an error message; longer ones are cut. */
#define NPY_DESCR_SHOWN 40

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ------------------------------------------------------------------------ */
/* Header scanning                                                          */
/* ------------------------------------------------------------------------ */

/* A read position inside the header text; `base` only serves error offsets. */
struct cursor {
    const uint8_t *p;
    const uint8_t *end;
    const uint8_t *base;
};

static int at_end(const struct cursor *c)
{
    return c->p >= c->end;
}

static int peek(const struct cursor *c)
{
    return at_end(c) ? -1 : *c->p;
}

/* Python allows spaces and tabs between tokens; numpy only writes spaces. */
static void skip_ws(struct cursor *c)
{
    while (!at_end(c) && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static size_t offset_of(const struct cursor *c)
{
    return (size_t)(c->p - c->base);
}

static int syntax_error(const struct cursor *c, const char *what)
{
    return sf_fail(SF_E_NPY, "malformed .npy header at byte %zu: expected %s", offset_of(c), what);
}

static int expect_char(struct cursor *c, char ch, const char *what)
{
    if (peek(c) != (unsigned char)ch)
        return syntax_error(c, what);
    c->p++;
    return 0;
}

/* A quoted string literal. Only plain printable ASCII is accepted: no
 * escapes, no prefixes. Every valid key and descr fits that, and it keeps
 * the bytes safe to quote in error messages. */
static int parse_string(struct cursor *c, const uint8_t **s, size_t *n)
{
    int quote = peek(c);
    if (quote != '\'' && quote != '"')
        return syntax_error(c, "a quoted string");
    c->p++;
    const uint8_t *start = c->p;
    while (!at_end(c) && *c->p != quote) {
        if (*c->p < 0x20 || *c->p > 0x7e || *c->p == '\\')
            return sf_fail(SF_E_NPY, "malformed .npy header at byte %zu: unsupported character in string",
                           offset_of(c));
        c->p++;
    }
    if (at_end(c))
        return syntax_error(c, "a closing quote");
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return 0;
}

/* Explicit, not strchr(): strchr would also "find" a NUL byte. */
static int is_order_char(int ch)
{
    return ch == '<' || ch == '>' || ch == '|' || ch == '=';
}

static int word_is(const uint8_t *s, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

static int is_ident_char(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* True / False, and nothing else: numpy rejects 0/1 for fortran_order. */
static int parse_bool(struct cursor *c, int *v)
{
    static const char *const names[2] = {"False", "True"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(names[i]);
        if ((size_t)(c->end - c->p) >= n && memcmp(c->p, names[i], n) == 0 &&
            !is_ident_char((c->end - c->p) > (ptrdiff_t)n ? c->p[n] : ' ')) {
            c->p += n;
            *v = i;
            return 0;
        }
    }
    return syntax_error(c, "True or False");
}

/* A non-negative decimal integer with Python 3 syntax (no leading zeros
 * except for zero itself). `allow_long` accepts Python 2's 'L' suffix, which
 * numpy strips from version 1.0/2.0 headers before evaluating them. */
static int parse_dim(struct cursor *c, uint64_t *v, int allow_long)
{
    if (peek(c) < '0' || peek(c) > '9')
        return syntax_error(c, "a non-negative integer");
    int leading_zero = peek(c) == '0';
    uint64_t x = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (leading_zero && d != 0)
            return syntax_error(c, "an integer without leading zeros");
        if (x > (UINT64_MAX - d) / 10)
            return sf_fail(SF_E_LIMIT, "shape dimension at byte %zu overflows 64 bits", offset_of(c));
        x = x * 10 + d;
        c->p++;
    }
    if (allow_long && peek(c) == 'L')
        c->p++;
    *v = x;
    return 0;
}

/* A tuple of dims: "()", "(5,)", "(3, 4)", "(3, 4,)". "(5)" is an int in
 * Python, not a tuple, so a single element needs its comma. */
static int parse_shape(struct cursor *c, input_npy_info *out, int allow_long)
{
    int rc = expect_char(c, '(', "'(' starting the shape tuple");
    if (rc)
        return rc;
    skip_ws(c);
    uint32_t n = 0;
    int trailing_comma = 0;
    while (peek(c) != ')') {
        if (n == INPUT_NPY_MAX_NDIM)
            return sf_fail(SF_E_LIMIT, "array has more than %d dimensions", INPUT_NPY_MAX_NDIM);
        uint64_t dim = 0;
        if ((rc = parse_dim(c, &dim, allow_long)) != 0)
            return rc;
        out->shape[n++] = dim;
        skip_ws(c);
        trailing_comma = peek(c) == ',';
        if (!trailing_comma)
            break;
        c->p++;
        skip_ws(c);
    }
    if ((rc = expect_char(c, ')', "',' or ')' in the shape tuple")) != 0)
        return rc;
    if (n == 1 && !trailing_comma)
        return sf_fail(SF_E_NPY, "malformed .npy header: shape is not a tuple");
    out->ndim = n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* dtype descriptors                                                        */
/* ------------------------------------------------------------------------ */

struct descr_code {
    const char *code; /* kind + item size, as after the byte-order char */
    int dtype;
};

static const struct descr_code descr_codes[] = {
    {"b1", SF_DTYPE_BOOL}, {"u1", SF_DTYPE_UINT8},   {"i1", SF_DTYPE_INT8},   {"u2", SF_DTYPE_UINT16},
    {"i2", SF_DTYPE_INT16},  {"u4", SF_DTYPE_UINT32},  {"i4", SF_DTYPE_INT32},  {"u8", SF_DTYPE_UINT64},
    {"i8", SF_DTYPE_INT64},  {"f2", SF_DTYPE_FLOAT16},  {"f4", SF_DTYPE_FLOAT32},  {"f8", SF_DTYPE_FLOAT64},
    {"c8", SF_DTYPE_COMPLEX64},  {"c16", SF_DTYPE_COMPLEX128},
};

/* A word for the error message, so users see why e.g. '<U5' is refused. */
static const char *kind_name(const uint8_t *s, size_t n)
{
    static const char *const long_double[] = {"f12", "f16", "c24", "c32"};
    size_t i = (n > 0 && is_order_char(s[0])) ? 1 : 0;
    if (i >= n)
        return "dtype";
    for (size_t k = 0; k < sizeof long_double / sizeof long_double[0]; k++)
        if (word_is(s + i, n - i, long_double[k]))
            return "long double dtype";
    switch (s[i]) {
    case 'O': return "object dtype (pickled data)";
    case 'S':
    case 'a': return "byte string dtype";
    case 'U': return "unicode string dtype";
    case 'V': return "void dtype";
    case 'M': return "datetime dtype";
    case 'm': return "timedelta dtype";
    default: return "dtype";
    }
}

static int unsupported_descr(const uint8_t *s, size_t n)
{
    int shown = n > NPY_DESCR_SHOWN ? NPY_DESCR_SHOWN : (int)n;
    return sf_fail(SF_E_UNSUPPORTED, "%s '%.*s%s' is not supported", kind_name(s, n), shown,
                   (const char *)s, n > NPY_DESCR_SHOWN ? "..." : "");
}

/* Maps a descr string ("<f4", "|u1", ">c16", ...) to an sf_dtype. */
static int classify_descr(const uint8_t *s, size_t n, input_npy_info *out)
{
    if (n < 2 || !is_order_char(s[0]))
        return unsupported_descr(s, n);
    for (size_t k = 0; k < sizeof descr_codes / sizeof descr_codes[0]; k++) {
        if (!word_is(s + 1, n - 1, descr_codes[k].code))
            continue;
        int dtype = descr_codes[k].dtype;
        /* '|' means "byte order not applicable", which is only true of
         * 1-byte items; numpy never writes it for anything wider. */
        if (s[0] == '|' && sf_dtype_size(dtype) != 1)
            return sf_fail(SF_E_NPY, "malformed .npy header: byte order '|' on multi-byte dtype '%.*s'", (int)n,
                           (const char *)s);
        out->dtype = dtype;
        out->big_endian = s[0] == '>';
        return 0;
    }
    return unsupported_descr(s, n);
}

/* The descr value is only located here; it is classified once the whole
 * dict has parsed, so a syntax error is reported as such even after an
 * unsupported descr. A list (numpy's form for structured dtypes) would need a
 * full literal parser to skip, and is refused on sight. */
static int parse_descr(struct cursor *c, const uint8_t **s, size_t *n)
{
    if (peek(c) == '[')
        return sf_fail(SF_E_UNSUPPORTED, "structured dtype (descr is a list) is not supported");
    return parse_string(c, s, n);
}

/* ------------------------------------------------------------------------ */
/* The header dict                                                          */
/* ------------------------------------------------------------------------ */

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4, KEY_ALL = 7 };

static int key_bit(const uint8_t *s, size_t n)
{
    if (word_is(s, n, "descr"))
        return KEY_DESCR;
    if (word_is(s, n, "fortran_order"))
        return KEY_FORTRAN;
    if (word_is(s, n, "shape"))
        return KEY_SHAPE;
    return 0;
}

/* What parse_dict collects besides the fields it fills in input_npy_info. */
struct dict_state {
    int seen; /* KEY_* bits of the keys met so far */
    int allow_long;
    const uint8_t *descr;
    size_t descr_len;
};

/* One "'key': value" pair. */
static int parse_entry(struct cursor *c, input_npy_info *out, struct dict_state *st)
{
    const uint8_t *key;
    size_t n;
    int rc = parse_string(c, &key, &n);
    if (rc)
        return rc;
    int bit = key_bit(key, n);
    if (!bit)
        return sf_fail(SF_E_NPY, "malformed .npy header: unknown key '%.*s'", n > 32 ? 32 : (int)n,
                       (const char *)key);
    if (st->seen & bit)
        return sf_fail(SF_E_NPY, "malformed .npy header: duplicate key '%.*s'", (int)n, (const char *)key);
    st->seen |= bit;
    skip_ws(c);
    if ((rc = expect_char(c, ':', "':' after a key")) != 0)
        return rc;
    skip_ws(c);
    switch (bit) {
    case KEY_DESCR: return parse_descr(c, &st->descr, &st->descr_len);
    case KEY_FORTRAN: return parse_bool(c, &out->fortran_order);
    default: return parse_shape(c, out, st->allow_long);
    }
}

static const char *missing_key(int seen)
{
    if (!(seen & KEY_DESCR))
        return "descr";
    if (!(seen & KEY_FORTRAN))
        return "fortran_order";
    return "shape";
}

/* The header text without its final '\n': "{...}" then padding spaces. */
static int parse_dict(const uint8_t *h, size_t n, input_npy_info *out)
{
    struct cursor c = {h, h + n, h};
    struct dict_state st = {0, out->version_major <= 2, NULL, 0};
    int rc;

    skip_ws(&c);
    if ((rc = expect_char(&c, '{', "'{'")) != 0)
        return rc;
    skip_ws(&c);
    while (peek(&c) != '}') {
        if ((rc = parse_entry(&c, out, &st)) != 0)
            return rc;
        skip_ws(&c);
        if (peek(&c) != ',')
            break;
        c.p++;
        skip_ws(&c);
    }
    if ((rc = expect_char(&c, '}', "',' or '}'")) != 0)
        return rc;
    skip_ws(&c);
    if (!at_end(&c))
        return syntax_error(&c, "only spaces after the dict");
    if (st.seen != KEY_ALL)
        return sf_fail(SF_E_NPY, "malformed .npy header: missing key '%s'", missing_key(st.seen));
    return classify_descr(st.descr, st.descr_len, out);
}

/* ------------------------------------------------------------------------ */
/* Sizes and file layout                                                    */
/* ------------------------------------------------------------------------ */

/* Element count and byte size, capped at NPY_MAX_DATA. Zero dims are skipped
 * in the capped product so that even an empty array cannot carry dims whose
 * product overflows (later stride arithmetic stays safe). */
static int compute_sizes(input_npy_info *out)
{
    uint64_t itemsize = sf_dtype_size(out->dtype);
    uint64_t product = 1;
    int empty = 0;
    for (uint32_t i = 0; i < out->ndim; i++) {
        uint64_t d = out->shape[i];
        if (d == 0) {
            empty = 1;
            continue;
        }
        if (product > NPY_MAX_DATA / d)
            return sf_fail(SF_E_LIMIT, "array has more than 2^40 elements");
        product *= d;
    }
    if (product > NPY_MAX_DATA / itemsize)
        return sf_fail(SF_E_LIMIT, "array data exceeds 2^40 bytes");
    out->count = empty ? 0 : product;
    out->data_size = out->count * itemsize;
    return 0;
}

static uint32_t read_le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t read_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The caller must supply `n` bytes before parsing can go on. */
static int want_bytes(size_t n, uint64_t file_size, size_t *need)
{
    if (file_size < n)
        return sf_fail(SF_E_TRUNCATED, "truncated: header needs %zu bytes, file has %" PRIu64, n, file_size);
    if (need)
        *need = n;
    return 1;
}

static int check_file_size(const input_npy_info *info, uint64_t file_size)
{
    uint64_t end = info->data_offset + info->data_size; /* both capped: no overflow */
    if (file_size < end)
        return sf_fail(SF_E_TRUNCATED, "truncated: data needs %" PRIu64 " bytes, file has %" PRIu64, end,
                       file_size);
    if (file_size > end)
        return sf_fail(SF_E_NPY, "%" PRIu64 " unexpected trailing bytes", file_size - end);
    return 0;
}

int input_npy_parse_header(input_npy_info *out, const uint8_t *buf, size_t len, uint64_t file_size,
                           size_t *need)
{
    if (!out || (!buf && len > 0) || len > file_size)
        return sf_fail(SF_E_INVALID, "input_npy_parse_header: invalid arguments");
    memset(out, 0, sizeof *out);

    /* Check what we have of the magic first: a short non-.npy file should
     * say "bad magic", not "truncated". */
    size_t have = len < sizeof npy_magic ? len : sizeof npy_magic;
    if (memcmp(buf ? buf : npy_magic, npy_magic, have) != 0)
        return sf_fail(SF_E_NPY, "not a .npy file (bad magic)");
    if (len < 8)
        return want_bytes(8, file_size, need);

    if (buf[6] < 1 || buf[6] > 3 || buf[7] != 0)
        return sf_fail(SF_E_NPY, "unsupported .npy version %u.%u", buf[6], buf[7]);
    out->version_major = buf[6];

    /* 1.0 stores the header length as uint16, 2.0 and 3.0 as uint32. */
    size_t prefix = out->version_major == 1 ? 10 : 12;
    if (len < prefix)
        return want_bytes(prefix, file_size, need);
    uint32_t header_len = out->version_major == 1 ? read_le16(buf + 8) : read_le32(buf + 8);
    if (header_len > INPUT_NPY_MAX_HEADER)
        return sf_fail(SF_E_LIMIT, "header of %" PRIu32 " bytes exceeds %u", header_len,
                       INPUT_NPY_MAX_HEADER);
    size_t data_offset = prefix + header_len;
    if (len < data_offset)
        return want_bytes(data_offset, file_size, need);

    /* numpy terminates the (space-padded) header with a newline. */
    if (header_len == 0 || buf[data_offset - 1] != '\n')
        return sf_fail(SF_E_NPY, "malformed .npy header: does not end with a newline");
    int rc = parse_dict(buf + prefix, header_len - 1, out);
    if (rc)
        return rc;
    if ((rc = compute_sizes(out)) != 0)
        return rc;
    out->data_offset = data_offset;
    return check_file_size(out, file_size);
}

/* ------------------------------------------------------------------------ */
/* Data conversion                                                          */
/* ------------------------------------------------------------------------ */

static int needs_swap(const input_npy_info *info)
{
    return info->big_endian && sf_dtype_swap_unit(info->dtype) > 1;
}

/* Fortran and C order coincide when at most one axis is longer than 1. */
static int needs_transpose(const input_npy_info *info)
{
    if (!info->fortran_order || info->count <= 1)
        return 0;
    uint32_t long_axes = 0;
    for (uint32_t i = 0; i < info->ndim && i < INPUT_NPY_MAX_NDIM; i++)
        long_axes += info->shape[i] > 1;
    return long_axes > 1;
}

int input_npy_is_native(const input_npy_info *info)
{
    return info && !needs_swap(info) && !needs_transpose(info);
}

/* Copies `n` bytes reversing each `unit`-byte group (n is a multiple of unit). */
static void copy_swapped(uint8_t *dst, const uint8_t *src, size_t n, size_t unit)
{
    size_t i;
    switch (unit) {
    case 2:
        for (i = 0; i < n; i += 2) {
            uint16_t v;
            memcpy(&v, src + i, 2);
            v = __builtin_bswap16(v);
            memcpy(dst + i, &v, 2);
        }
        return;
    case 4:
        for (i = 0; i < n; i += 4) {
            uint32_t v;
            memcpy(&v, src + i, 4);
            v = __builtin_bswap32(v);
            memcpy(dst + i, &v, 4);
        }
        return;
    case 8:
        for (i = 0; i < n; i += 8) {
            uint64_t v;
            memcpy(&v, src + i, 8);
            v = __builtin_bswap64(v);
            memcpy(dst + i, &v, 8);
        }
        return;
    default:
        for (i = 0; i < n; i += unit)
            for (size_t b = 0; b < unit; b++)
                dst[i + b] = src[i + unit - 1 - b];
        return;
    }
}

static void copy_items(uint8_t *dst, const uint8_t *src, size_t n, size_t unit, int swap)
{
    if (swap)
        copy_swapped(dst, src, n, unit);
    else
        memcpy(dst, src, n);
}

/* Writes the elements in C order (last index fastest) while reading them
 * from Fortran order (first index fastest): dst is walked linearly, src
 * through Fortran strides with an odometer over all but the last axis. */
static void transpose_f_to_c(uint8_t *dst, const uint8_t *src, const input_npy_info *info, size_t unit,
                             int swap)
{
    size_t isz = sf_dtype_size(info->dtype);
    uint32_t n = info->ndim;
    uint64_t stride[INPUT_NPY_MAX_NDIM]; /* Fortran byte strides */
    uint64_t idx[INPUT_NPY_MAX_NDIM] = {0};
    uint64_t s = isz;
    for (uint32_t k = 0; k < n; k++) {
        stride[k] = s;
        s *= info->shape[k]; /* <= data_size: no overflow */
    }
    uint64_t inner = info->shape[n - 1];
    uint64_t rows = info->count / inner;
    uint64_t off = 0; /* src offset of idx[0..n-2] with last index 0 */
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *sp = src + off;
        for (uint64_t j = 0; j < inner; j++, dst += isz, sp += stride[n - 1])
            copy_items(dst, sp, isz, unit, swap);
        for (uint32_t k = n - 1; k-- > 0;) {
            if (++idx[k] < info->shape[k]) {
                off += stride[k];
                break;
            }
            off -= stride[k] * (info->shape[k] - 1);
            idx[k] = 0;
        }
    }
}

/* Guards against an input_npy_info that was not produced by input_npy_parse_header. */
static int info_consistent(const input_npy_info *info)
{
    if (info->dtype < SF_DTYPE_BOOL || info->dtype > SF_DTYPE_COMPLEX128 || info->ndim > INPUT_NPY_MAX_NDIM)
        return 0;
    uint64_t count = 1;
    for (uint32_t i = 0; i < info->ndim; i++) {
        if (info->shape[i] && count > NPY_MAX_DATA / info->shape[i])
            return 0;
        count *= info->shape[i];
    }
    return count == info->count && count <= NPY_MAX_DATA / sf_dtype_size(info->dtype) &&
           info->data_size == count * sf_dtype_size(info->dtype);
}

int input_npy_to_c_le(void *dst, const void *src, const input_npy_info *info)
{
    if (!info || !info_consistent(info) || (info->data_size > 0 && (!dst || !src)))
        return sf_fail(SF_E_INVALID, "input_npy_to_c_le: invalid arguments");
    if (info->data_size == 0)
        return 0;
    size_t unit = sf_dtype_swap_unit(info->dtype);
    int swap = needs_swap(info);
    if (needs_transpose(info))
        transpose_f_to_c(dst, src, info, unit, swap);
    else
        copy_items(dst, src, (size_t)info->data_size, unit, swap);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Header writing                                                           */
/* ------------------------------------------------------------------------ */

/* Room for the longest dict: 8 dims of 20 digits plus the growth spaces. */
#define NPY_DICT_CAP 320

/* The dict exactly as numpy's _write_array_header formats it: keys sorted,
 * repr() of each value, "}" and then the growth-axis spaces. Returns its
 * length, or 0 if it did not fit (cannot happen with ndim <= 8). */
static size_t format_dict(char *d, const char *descr, uint32_t ndim, const uint64_t *shape)
{
    size_t n = 0;
    int w = snprintf(d, NPY_DICT_CAP, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    if (w < 0 || (size_t)w >= NPY_DICT_CAP)
        return 0;
    n = (size_t)w;
    for (uint32_t i = 0; i < ndim; i++) {
        /* Python's tuple repr: "(5,)" for one element, "(3, 4)" otherwise. */
        const char *sep = ndim == 1 ? "," : (i + 1 < ndim ? ", " : "");
        w = snprintf(d + n, NPY_DICT_CAP - n, "%" PRIu64 "%s", shape[i], sep);
        if (w < 0 || (size_t)w >= NPY_DICT_CAP - n)
            return 0;
        n += (size_t)w;
    }
    w = snprintf(d + n, NPY_DICT_CAP - n, "), }");
    if (w < 0 || (size_t)w >= NPY_DICT_CAP - n)
        return 0;
    n += (size_t)w;
    if (ndim > 0) {
        char digits[24];
        int nd = snprintf(digits, sizeof digits, "%" PRIu64, shape[0]);
        for (int k = nd; k < NPY_GROWTH_DIGITS && n + 1 < NPY_DICT_CAP; k++)
            d[n++] = ' ';
    }
    return n;
}

/* Total header size for a dict of `dict_len` bytes behind a `prefix`-byte
 * magic+length: numpy always adds 1..64 padding bytes (the last one the
 * '\n'), even when the unpadded header is already aligned. */
static size_t padded_total(size_t prefix, size_t dict_len)
{
    size_t hlen = dict_len + 1;
    return prefix + hlen + (NPY_ALIGN - (prefix + hlen) % NPY_ALIGN);
}

size_t input_npy_write_header(uint8_t *buf, size_t cap, int dtype, uint32_t ndim, const uint64_t *shape)
{
    if (dtype < SF_DTYPE_BOOL || dtype > SF_DTYPE_COMPLEX128 || ndim > INPUT_NPY_MAX_NDIM ||
        (ndim > 0 && !shape))
        return 0;
    char dict[NPY_DICT_CAP];
    size_t dict_len = format_dict(dict, sf_dtype_npy_descr(dtype), ndim, shape);
    if (dict_len == 0)
        return 0;

    /* Version 1.0 unless the header length does not fit its uint16. */
    int major = 1;
    size_t prefix = 10;
    size_t total = padded_total(prefix, dict_len);
    if (total - prefix > UINT16_MAX) {
        major = 2;
        prefix = 12;
        total = padded_total(prefix, dict_len);
    }
    if (!buf || cap < total)
        return 0;

    uint32_t header_len = (uint32_t)(total - prefix);
    memcpy(buf, npy_magic, sizeof npy_magic);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++)
        buf[8 + i] = (uint8_t)(header_len >> (8 * i));
    memcpy(buf + prefix, dict, dict_len);
    memset(buf + prefix + dict_len, ' ', total - prefix - dict_len - 1);
    buf[total - 1] = '\n';
    return total;
}
