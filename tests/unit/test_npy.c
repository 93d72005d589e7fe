/* Unit tests for lib/inputs/npy.c: .npy header parsing, data normalisation and
 * header writing. Files written by numpy itself are embedded from
 * tests/data/npy/golden.inc (regenerate with tests/data/npy/make.py); the
 * malformed inputs are built here. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "npy.h"
#include "shardfeed/error.h"

struct npy_golden {
    const char *name;
    int dtype;
    int big_endian;
    int fortran_order;
    int version_major;
    uint32_t ndim;
    uint64_t shape[INPUT_NPY_MAX_NDIM];
    const unsigned char *file;
    size_t file_len;
    const unsigned char *cdata; /* expected C-order LE data; NULL: the file's own */
    size_t cdata_len;
};

struct npy_refused {
    const char *name;
    const unsigned char *file;
    size_t file_len;
};

struct npy_header_golden {
    int dtype;
    uint32_t ndim;
    uint64_t shape[INPUT_NPY_MAX_NDIM];
    const unsigned char *bytes;
    size_t len;
};

#include "../data/npy/golden.inc"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const struct npy_golden *golden(const char *name)
{
    for (size_t i = 0; i < COUNT(npy_goldens); i++)
        if (strcmp(npy_goldens[i].name, name) == 0)
            return &npy_goldens[i];
    cr_assert_fail("no golden named %s", name);
    return NULL;
}

static const unsigned char *expected_data(const struct npy_golden *g)
{
    return g->cdata ? g->cdata : g->file + g->file_len - g->cdata_len;
}

/* Parses a whole in-memory file. */
static int parse_all(input_npy_info *info, const void *buf, size_t len)
{
    return input_npy_parse_header(info, buf, len, len, NULL);
}

/* Builds a .npy file around `dict`: magic, version, length, the dict, space
 * padding to a 64-byte boundary and '\n' (a space instead when !newline),
 * then `data_len` bytes. Returns the file length. */
static size_t build(uint8_t *buf, size_t cap, int major, const char *dict, int newline, size_t data_len)
{
    size_t prefix = major == 1 ? 10 : 12;
    size_t dlen = strlen(dict);
    size_t total = (prefix + dlen + 1 + 63) / 64 * 64;
    cr_assert_leq(total + data_len, cap, "test buffer too small");
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    uint32_t hl = (uint32_t)(total - prefix);
    for (size_t i = 0; i < prefix - 8; i++)
        buf[8 + i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + prefix, dict, dlen);
    memset(buf + prefix + dlen, ' ', total - prefix - dlen);
    buf[total - 1] = newline ? '\n' : ' ';
    for (size_t i = 0; i < data_len; i++)
        buf[total + i] = (uint8_t)(i * 31 + 7);
    return total + data_len;
}

static uint8_t scratch[8192];

/* Parses `dict` wrapped as a version-`major` file with exactly the right
 * amount of data for what the dict says (0 bytes if it does not parse). */
static int parse_dict_v(input_npy_info *info, int major, const char *dict, size_t data_len)
{
    size_t n = build(scratch, sizeof scratch, major, dict, 1, data_len);
    return parse_all(info, scratch, n);
}

static int parse_dict(input_npy_info *info, const char *dict, size_t data_len)
{
    return parse_dict_v(info, 1, dict, data_len);
}

#define assert_fails(rc, code, dict)                                                                     \
    cr_assert_eq((rc), (code), "%s: got %d (%s), want %d", (dict), (rc), sf_last_error(), (code))

/* ------------------------------------------------------------------------ */
/* numpy-written files                                                      */
/* ------------------------------------------------------------------------ */

Test(npy_golden, parses_every_numpy_file)
{
    for (size_t i = 0; i < COUNT(npy_goldens); i++) {
        const struct npy_golden *g = &npy_goldens[i];
        input_npy_info info;
        int rc = parse_all(&info, g->file, g->file_len);
        cr_assert_eq(rc, 0, "%s: %d %s", g->name, rc, sf_last_error());
        cr_expect_eq(info.dtype, g->dtype, "%s dtype", g->name);
        cr_expect_eq(info.big_endian, g->big_endian, "%s big_endian", g->name);
        cr_expect_eq(info.fortran_order, g->fortran_order, "%s fortran_order", g->name);
        cr_expect_eq(info.version_major, g->version_major, "%s version", g->name);
        cr_assert_eq(info.ndim, g->ndim, "%s ndim", g->name);
        uint64_t count = 1;
        for (uint32_t d = 0; d < g->ndim; d++) {
            cr_expect_eq(info.shape[d], g->shape[d], "%s shape[%u]", g->name, d);
            count *= g->shape[d];
        }
        cr_expect_eq(info.count, count, "%s count", g->name);
        cr_expect_eq(info.data_size, g->cdata_len, "%s data_size", g->name);
        cr_expect_eq(info.data_size, count * sf_dtype_size(g->dtype), "%s data_size", g->name);
        cr_expect_eq(info.data_offset + info.data_size, g->file_len, "%s layout", g->name);
        cr_expect_eq(info.data_offset % 64, 0, "%s numpy aligns data to 64", g->name);
    }
}

Test(npy_golden, converts_every_numpy_file_to_c_le)
{
    for (size_t i = 0; i < COUNT(npy_goldens); i++) {
        const struct npy_golden *g = &npy_goldens[i];
        input_npy_info info;
        cr_assert_eq(parse_all(&info, g->file, g->file_len), 0, "%s", g->name);
        uint8_t *dst = malloc(g->cdata_len + 1);
        cr_assert_not_null(dst);
        memset(dst, 0xAA, g->cdata_len + 1);
        cr_assert_eq(input_npy_to_c_le(dst, g->file + info.data_offset, &info), 0, "%s", g->name);
        cr_expect_arr_eq(dst, expected_data(g), g->cdata_len, "%s converted data", g->name);
        cr_expect_eq(dst[g->cdata_len], 0xAA, "%s wrote past data_size", g->name);
        /* Native exactly when no conversion is needed. */
        int same = memcmp(g->file + info.data_offset, expected_data(g), g->cdata_len) == 0;
        cr_expect_eq(input_npy_is_native(&info), same, "%s input_npy_is_native", g->name);
        free(dst);
    }
}

Test(npy_golden, every_dtype_is_covered)
{
    int seen[SF_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < COUNT(npy_goldens); i++)
        seen[npy_goldens[i].dtype] = 1;
    for (int dt = SF_DTYPE_BOOL; dt < SF_DTYPE_COUNT; dt++)
        cr_expect(seen[dt], "no golden for %s", sf_dtype_name(dt));
}

Test(npy_golden, big_endian_equals_little_endian)
{
    static const char *const codes[] = {"u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8", "c8", "c16"};
    for (size_t i = 0; i < COUNT(codes); i++) {
        char be_name[16], le_name[16];
        snprintf(be_name, sizeof be_name, "be_%s", codes[i]);
        snprintf(le_name, sizeof le_name, "le_%s", codes[i]);
        const struct npy_golden *be = golden(be_name), *le = golden(le_name);
        input_npy_info bi, li;
        cr_assert_eq(parse_all(&bi, be->file, be->file_len), 0);
        cr_assert_eq(parse_all(&li, le->file, le->file_len), 0);
        cr_expect_eq(bi.big_endian, 1);
        cr_expect_eq(li.big_endian, 0);
        cr_expect_not(input_npy_is_native(&bi), "%s", be_name);
        cr_expect(input_npy_is_native(&li), "%s", le_name);
        uint8_t out[256];
        cr_assert_leq(bi.data_size, sizeof out);
        cr_assert_eq(input_npy_to_c_le(out, be->file + bi.data_offset, &bi), 0);
        cr_expect_arr_eq(out, le->file + li.data_offset, li.data_size, "%s", be_name);
    }
}

Test(npy_golden, complex_swaps_each_half)
{
    /* complex64 element 0 of values(): real -7.5, imaginary 3.0. */
    const struct npy_golden *g = golden("be_c8");
    input_npy_info info;
    cr_assert_eq(parse_all(&info, g->file, g->file_len), 0);
    float out[12];
    cr_assert_eq(input_npy_to_c_le(out, g->file + info.data_offset, &info), 0);
    cr_expect_eq(out[0], -7.5f);
    cr_expect_eq(out[1], 3.0f);
    cr_expect_eq(out[2], -6.25f);
    cr_expect_eq(out[3], 2.5f);
}

Test(npy_golden, versions_2_and_3)
{
    input_npy_info info;
    const struct npy_golden *v2 = golden("v2_f4"), *v3 = golden("v3_f4");
    cr_assert_eq(parse_all(&info, v2->file, v2->file_len), 0);
    cr_expect_eq(info.version_major, 2);
    cr_expect_eq(v2->file[6], 2);
    cr_expect_eq(info.data_offset, 128);
    cr_assert_eq(parse_all(&info, v3->file, v3->file_len), 0);
    cr_expect_eq(info.version_major, 3);
    cr_expect_eq(info.data_offset, 128);
    /* Same array under both versions: same data. */
    cr_expect_arr_eq(v2->file + 128, v3->file + 128, 16);
}

Test(npy_golden, zero_d_and_empty)
{
    input_npy_info info;
    const struct npy_golden *s = golden("scalar_f8");
    cr_assert_eq(parse_all(&info, s->file, s->file_len), 0);
    cr_expect_eq(info.ndim, 0);
    cr_expect_eq(info.count, 1);
    cr_expect_eq(info.data_size, 8);
    double v;
    memcpy(&v, s->file + info.data_offset, 8);
    cr_expect_eq(v, 3.5);

    const struct npy_golden *e = golden("empty_f4");
    cr_assert_eq(parse_all(&info, e->file, e->file_len), 0);
    cr_expect_eq(info.ndim, 2);
    cr_expect_eq(info.count, 0);
    cr_expect_eq(info.data_size, 0);
    cr_expect_eq(input_npy_to_c_le(NULL, NULL, &info), 0);
}

Test(npy_golden, refuses_numpy_files_with_unsupported_dtypes)
{
    static const struct {
        const char *name;
        const char *in_message;
    } want[] = {
        {"object", "'|O'"},          {"structured", "structured"}, {"unicode", "'<U2'"},
        {"bytes", "'|S2'"},          {"void", "'|V4'"},            {"datetime", "'<M8[D]'"},
        {"timedelta", "'<m8[s]'"},   {"longdouble", "'<f16'"},     {"clongdouble", "'<c32'"},
    };
    cr_assert_eq(COUNT(want), COUNT(npy_refused_files));
    for (size_t i = 0; i < COUNT(want); i++) {
        const struct npy_refused *r = &npy_refused_files[i];
        cr_assert_str_eq(r->name, want[i].name);
        input_npy_info info;
        int rc = parse_all(&info, r->file, r->file_len);
        cr_expect_eq(rc, SF_E_UNSUPPORTED, "%s: %d %s", r->name, rc, sf_last_error());
        cr_expect_not_null(strstr(sf_last_error(), want[i].in_message), "%s: %s", r->name, sf_last_error());
        cr_expect_not_null(strstr(sf_last_error(), "not supported"), "%s: %s", r->name, sf_last_error());
    }
}

/* ------------------------------------------------------------------------ */
/* Fortran order by index math                                              */
/* ------------------------------------------------------------------------ */

/* Builds Fortran-ordered (optionally big-endian) data whose element at C
 * linear index L holds L in every swap unit, converts it and checks that
 * the C-order result holds 0, 1, 2, ... */
static void check_fortran(int dtype, int big, uint32_t ndim, const uint64_t *shape)
{
    input_npy_info info = {0};
    info.dtype = dtype;
    info.big_endian = big;
    info.fortran_order = 1;
    info.ndim = ndim;
    info.count = 1;
    for (uint32_t k = 0; k < ndim; k++) {
        info.shape[k] = shape[k];
        info.count *= shape[k];
    }
    size_t isz = sf_dtype_size(dtype), unit = sf_dtype_swap_unit(dtype);
    info.data_size = info.count * isz;
    uint8_t *src = calloc(1, info.data_size), *dst = calloc(1, info.data_size);
    cr_assert(src && dst);

    for (uint64_t c = 0; c < info.count; c++) {
        /* C multi-index of c, then its Fortran linear position. */
        uint64_t rest = c, f = 0, fstride = 1, idx[INPUT_NPY_MAX_NDIM];
        for (uint32_t k = ndim; k-- > 0;) {
            idx[k] = rest % shape[k];
            rest /= shape[k];
        }
        for (uint32_t k = 0; k < ndim; k++) {
            f += idx[k] * fstride;
            fstride *= shape[k];
        }
        for (size_t u = 0; u < isz; u += unit)
            for (size_t b = 0; b < unit; b++) {
                size_t byte = big ? unit - 1 - b : b; /* LE byte b of value c */
                src[f * isz + u + byte] = (uint8_t)(b < 8 ? (c + u) >> (8 * b) : 0);
            }
    }
    cr_assert_eq(input_npy_to_c_le(dst, src, &info), 0);
    for (uint64_t c = 0; c < info.count; c++)
        for (size_t u = 0; u < isz; u += unit)
            for (size_t b = 0; b < unit; b++)
                cr_assert_eq(dst[c * isz + u + b], (uint8_t)(b < 8 ? (c + u) >> (8 * b) : 0),
                             "dtype %d ndim %u element %" PRIu64 " byte %zu", dtype, ndim, c, u + b);
    free(src);
    free(dst);
}

Test(npy_fortran, transposes_any_rank_and_itemsize)
{
    static const uint64_t s2[] = {7, 5}, s3[] = {2, 3, 4}, s5[] = {2, 3, 1, 4, 3};
    static const uint64_t s8[] = {2, 1, 3, 2, 1, 2, 3, 2};
    for (int dt = SF_DTYPE_BOOL; dt < SF_DTYPE_COUNT; dt++) {
        for (int big = 0; big <= 1; big++) {
            check_fortran(dt, big, 2, s2);
            check_fortran(dt, big, 3, s3);
            check_fortran(dt, big, 5, s5);
            check_fortran(dt, big, 8, s8);
        }
    }
}

Test(npy_fortran, single_long_axis_is_native)
{
    input_npy_info info = {.dtype = SF_DTYPE_FLOAT32, .fortran_order = 1, .ndim = 3, .shape = {1, 6, 1},
                           .count = 6, .data_size = 24};
    cr_expect(input_npy_is_native(&info));
    info.shape[0] = 2;
    info.shape[1] = 3;
    cr_expect_not(input_npy_is_native(&info));
    info.fortran_order = 0;
    cr_expect(input_npy_is_native(&info));
    info.big_endian = 1;
    cr_expect_not(input_npy_is_native(&info));
    info.dtype = SF_DTYPE_UINT8;
    info.data_size = 6;
    cr_expect(input_npy_is_native(&info), "byte order is moot for 1-byte items");
    cr_expect_not(input_npy_is_native(NULL));
}

Test(npy_fortran, rejects_inconsistent_info)
{
    uint8_t a[16] = {0}, b[16];
    input_npy_info info = {.dtype = SF_DTYPE_UINT16, .ndim = 1, .shape = {4}, .count = 4, .data_size = 8};
    cr_expect_eq(input_npy_to_c_le(b, a, &info), 0);
    info.data_size = 16;
    cr_expect_eq(input_npy_to_c_le(b, a, &info), SF_E_INVALID);
    info.data_size = 8;
    info.count = 5;
    cr_expect_eq(input_npy_to_c_le(b, a, &info), SF_E_INVALID);
    info.count = 4;
    info.ndim = 9;
    cr_expect_eq(input_npy_to_c_le(b, a, &info), SF_E_INVALID);
    info.ndim = 1;
    info.dtype = SF_DTYPE_BYTES;
    cr_expect_eq(input_npy_to_c_le(b, a, &info), SF_E_INVALID);
    cr_expect_eq(input_npy_to_c_le(b, a, NULL), SF_E_INVALID);
}

/* ------------------------------------------------------------------------ */
/* Header syntax                                                            */
/* ------------------------------------------------------------------------ */

Test(npy_header, accepts_python_literal_variants)
{
    static const char *const ok[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'shape': (2, 3), 'descr': '<f4', 'fortran_order': False}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
        "{'fortran_order':False,'shape':(2,3,),'descr':'<f4'}",
        "  {\t'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , 3 ) , }  ",
        "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L)}",
    };
    for (size_t i = 0; i < COUNT(ok); i++) {
        input_npy_info info;
        int rc = parse_dict(&info, ok[i], 24);
        cr_assert_eq(rc, 0, "%s: %s", ok[i], sf_last_error());
        cr_expect_eq(info.dtype, SF_DTYPE_FLOAT32, "%s", ok[i]);
        cr_expect_eq(info.big_endian, 0, "%s", ok[i]);
        cr_expect_eq(info.ndim, 2, "%s", ok[i]);
        cr_expect_eq(info.shape[0], 2, "%s", ok[i]);
        cr_expect_eq(info.shape[1], 3, "%s", ok[i]);
        cr_expect_eq(info.count, 6, "%s", ok[i]);
    }
}

Test(npy_header, shapes_and_fortran_flag)
{
    input_npy_info info;
    cr_assert_eq(parse_dict(&info, "{'descr': '<i8', 'fortran_order': True, 'shape': ()}", 8), 0);
    cr_expect_eq(info.ndim, 0);
    cr_expect_eq(info.count, 1);
    cr_expect_eq(info.fortran_order, 1);
    cr_assert_eq(parse_dict(&info, "{'descr': '<i8', 'fortran_order': False, 'shape': ( )}", 8), 0);
    cr_expect_eq(info.ndim, 0);
    cr_assert_eq(parse_dict(&info, "{'descr': '>u2', 'fortran_order': False, 'shape': (5,)}", 10), 0);
    cr_expect_eq(info.ndim, 1);
    cr_expect_eq(info.shape[0], 5);
    cr_expect_eq(info.big_endian, 1);
    cr_assert_eq(parse_dict(&info, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 7)}", 0), 0);
    cr_expect_eq(info.count, 0);
    cr_expect_eq(info.data_size, 0);
    cr_assert_eq(parse_dict(&info, "{'descr': '>i1', 'fortran_order': False, 'shape': (00,)}", 0), 0);
    cr_expect_eq(info.dtype, SF_DTYPE_INT8);
    cr_expect(input_npy_is_native(&info), "'>' on a 1-byte type needs no swap");
    cr_assert_eq(parse_dict(&info,
                            "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2, 1, 2, 1, 2, 1, 2)}", 16),
                 0);
    cr_expect_eq(info.ndim, 8);
    cr_expect_eq(info.dtype, SF_DTYPE_BOOL);
}

Test(npy_header, every_descr_maps_to_its_dtype)
{
    static const struct {
        const char *descr;
        int dtype;
        int big;
    } cases[] = {
        {"|b1", SF_DTYPE_BOOL, 0}, {"|u1", SF_DTYPE_UINT8, 0},   {"|i1", SF_DTYPE_INT8, 0},    {"<u2", SF_DTYPE_UINT16, 0},
        {">i2", SF_DTYPE_INT16, 1},  {"<u4", SF_DTYPE_UINT32, 0},  {">i4", SF_DTYPE_INT32, 1},   {"=u8", SF_DTYPE_UINT64, 0},
        {"<i8", SF_DTYPE_INT64, 0},  {">f2", SF_DTYPE_FLOAT16, 1},  {"<f4", SF_DTYPE_FLOAT32, 0},   {">f8", SF_DTYPE_FLOAT64, 1},
        {"<c8", SF_DTYPE_COMPLEX64, 0},  {">c16", SF_DTYPE_COMPLEX128, 1}, {"<b1", SF_DTYPE_BOOL, 0},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (3,)}", cases[i].descr);
        input_npy_info info;
        int rc = parse_dict(&info, dict, 3 * sf_dtype_size(cases[i].dtype));
        cr_assert_eq(rc, 0, "%s: %s", dict, sf_last_error());
        cr_expect_eq(info.dtype, cases[i].dtype, "%s", cases[i].descr);
        cr_expect_eq(info.big_endian, cases[i].big, "%s", cases[i].descr);
    }
}

Test(npy_header, refuses_unsupported_descr)
{
    static const char *const bad[] = {
        "|O", "|O8", "<U5", "|S3", "|a3", "|V8", "<M8[ns]", "<m8[s]", "<f16", "<f12", "<c32",
        "<c24", "<f1", "<i3", "<u16", "f4", "?", "|?", "<b2", "", "<", "<c4", "xyz",
    };
    for (size_t i = 0; i < COUNT(bad); i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (3,)}", bad[i]);
        input_npy_info info;
        int rc = parse_dict(&info, dict, 0);
        assert_fails(rc, SF_E_UNSUPPORTED, dict);
        char quoted[32];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        cr_expect_not_null(strstr(sf_last_error(), quoted), "%s: %s", bad[i], sf_last_error());
        cr_expect_not_null(strstr(sf_last_error(), "not supported"), "%s: %s", bad[i], sf_last_error());
    }
    input_npy_info info;
    int rc = parse_dict(&info, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3,)}", 0);
    assert_fails(rc, SF_E_UNSUPPORTED, "list descr");
    /* A 1-byte-only byte order on a wide type is not valid numpy output. */
    rc = parse_dict(&info, "{'descr': '|f4', 'fortran_order': False, 'shape': (3,)}", 12);
    assert_fails(rc, SF_E_NPY, "|f4");
}

Test(npy_header, refuses_malformed_dicts)
{
    static const char *const bad[] = {
        "",
        "{",
        "}",
        "[1, 2]",
        "{}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,),, }",
        "{, 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'shape': (3,)}",
        "{'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,)}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}",
        "{'Descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{descr: '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr' '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': 3}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (03,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0x3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': true, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': None, 'shape': (3,)}",
        "{'descr': <f4, 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4\", 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}\n",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)};",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} '",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} {}",
        "garbage",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} \x01",
    };
    for (size_t i = 0; i < COUNT(bad); i++) {
        input_npy_info info;
        int rc = parse_dict(&info, bad[i], 12);
        assert_fails(rc, SF_E_NPY, bad[i]);
    }
}

Test(npy_header, long_suffix_only_before_version_3)
{
    input_npy_info info;
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L)}";
    cr_expect_eq(parse_dict_v(&info, 2, dict, 24), 0, "%s", sf_last_error());
    cr_expect_eq(parse_dict_v(&info, 3, dict, 24), SF_E_NPY);
}

Test(npy_header, nul_byte_in_header)
{
    input_npy_info info;
    size_t n = build(scratch, sizeof scratch, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 1, 12);
    scratch[10 + 12] = '\0'; /* inside the descr string */
    cr_expect_eq(parse_all(&info, scratch, n), SF_E_NPY);
    n = build(scratch, sizeof scratch, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 1, 12);
    scratch[100] = '\0'; /* in the padding */
    cr_expect_eq(parse_all(&info, scratch, n), SF_E_NPY);
}

Test(npy_header, header_must_end_with_newline)
{
    input_npy_info info;
    size_t n = build(scratch, sizeof scratch, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 0, 12);
    int rc = parse_all(&info, scratch, n);
    assert_fails(rc, SF_E_NPY, "no newline");
    cr_expect_not_null(strstr(sf_last_error(), "newline"), "%s", sf_last_error());
    /* A zero-length header cannot hold the newline either. */
    memcpy(scratch, "\x93NUMPY\x01\x00\x00\x00", 10);
    rc = parse_all(&info, scratch, 10);
    assert_fails(rc, SF_E_NPY, "empty header");
}

/* ------------------------------------------------------------------------ */
/* Magic, version, limits                                                   */
/* ------------------------------------------------------------------------ */

Test(input_npy_file, bad_magic)
{
    static const char *const bad[] = {"\x93NUMPX\x01\x00", "PK\x03\x04\x14\x00\x00\x00", "\x94NUMPY\x01\x00",
                                      "ab"};
    for (size_t i = 0; i < COUNT(bad); i++) {
        input_npy_info info;
        size_t n = strlen(bad[i]);
        memcpy(scratch, bad[i], n);
        memset(scratch + n, ' ', 200);
        /* Even a short buffer of a long file is recognised as foreign. */
        int rc = input_npy_parse_header(&info, scratch, n, n + 200, NULL);
        assert_fails(rc, SF_E_NPY, "bad magic");
        cr_expect_str_eq(sf_last_error(), "not a .npy file (bad magic)");
    }
}

Test(input_npy_file, unknown_versions)
{
    static const uint8_t versions[][2] = {{0, 0}, {4, 0}, {1, 1}, {2, 1}, {255, 0}};
    for (size_t i = 0; i < COUNT(versions); i++) {
        input_npy_info info;
        size_t n = build(scratch, sizeof scratch, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 1,
                         12);
        scratch[6] = versions[i][0];
        scratch[7] = versions[i][1];
        int rc = parse_all(&info, scratch, n);
        assert_fails(rc, SF_E_NPY, "version");
        cr_expect_not_null(strstr(sf_last_error(), "version"), "%s", sf_last_error());
    }
}

Test(input_npy_file, truncated_at_every_length)
{
    const struct npy_golden *g = golden("le_f8");
    for (size_t len = 0; len < g->file_len; len++) {
        input_npy_info info;
        size_t need = 12345;
        int rc = input_npy_parse_header(&info, g->file, len, len, &need);
        assert_fails(rc, SF_E_TRUNCATED, "truncated file");
        cr_expect_eq(need, 12345, "need must not be set on failure");
    }
    input_npy_info info;
    input_npy_parse_header(&info, g->file, g->file_len - 1, g->file_len - 1, NULL);
    char msg[80];
    snprintf(msg, sizeof msg, "truncated: data needs %zu bytes, file has %zu", g->file_len, g->file_len - 1);
    cr_expect_str_eq(sf_last_error(), msg);
}

Test(input_npy_file, trailing_bytes)
{
    const struct npy_golden *g = golden("le_i4");
    memcpy(scratch, g->file, g->file_len);
    memset(scratch + g->file_len, 0, 3);
    input_npy_info info;
    int rc = parse_all(&info, scratch, g->file_len + 3);
    assert_fails(rc, SF_E_NPY, "trailing");
    cr_expect_str_eq(sf_last_error(), "3 unexpected trailing bytes");
}

Test(input_npy_file, need_more_bytes)
{
    const struct npy_golden *g = golden("v2_f4");
    static const struct {
        size_t len;
        size_t need;
    } steps[] = {{0, 8}, {5, 8}, {7, 8}, {8, 12}, {11, 12}, {12, 128}, {64, 128}, {127, 128}};
    for (size_t i = 0; i < COUNT(steps); i++) {
        input_npy_info info;
        size_t need = 0;
        int rc = input_npy_parse_header(&info, g->file, steps[i].len, g->file_len, &need);
        cr_expect_eq(rc, 1, "len %zu: %d %s", steps[i].len, rc, sf_last_error());
        cr_expect_eq(need, steps[i].need, "len %zu", steps[i].len);
        cr_expect_eq(input_npy_parse_header(&info, g->file, steps[i].len, g->file_len, NULL), 1);
    }
    /* A caller loop that reads what is asked for converges. */
    size_t have = 0, need = 0;
    input_npy_info info;
    int rc, rounds = 0;
    while ((rc = input_npy_parse_header(&info, g->file, have, g->file_len, &need)) == 1) {
        cr_assert_gt(need, have);
        have = need;
        cr_assert_lt(++rounds, 5);
    }
    cr_expect_eq(rc, 0, "%s", sf_last_error());
    cr_expect_eq(info.data_offset, 128);
    cr_expect_eq(info.version_major, 2);

    /* Version 1.0's prefix is 10 bytes. */
    const struct npy_golden *v1 = golden("le_f4");
    cr_expect_eq(input_npy_parse_header(&info, v1->file, 9, v1->file_len, &need), 1);
    cr_expect_eq(need, 10);
    cr_expect_eq(input_npy_parse_header(&info, v1->file, 10, v1->file_len, &need), 1);
    cr_expect_eq(need, 128);
}

Test(input_npy_file, invalid_arguments)
{
    const struct npy_golden *g = golden("le_f4");
    input_npy_info info;
    cr_expect_eq(input_npy_parse_header(NULL, g->file, g->file_len, g->file_len, NULL), SF_E_INVALID);
    cr_expect_eq(input_npy_parse_header(&info, NULL, 10, 100, NULL), SF_E_INVALID);
    cr_expect_eq(input_npy_parse_header(&info, g->file, g->file_len, g->file_len - 1, NULL), SF_E_INVALID);
}

Test(input_npy_file, header_len_beyond_file_or_limit)
{
    input_npy_info info;
    size_t n = build(scratch, sizeof scratch, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 1, 12);
    scratch[8] = 0xE8; /* header_len 1000 in a 140-byte file */
    scratch[9] = 0x03;
    size_t need = 0;
    int rc = input_npy_parse_header(&info, scratch, n, n, &need);
    assert_fails(rc, SF_E_TRUNCATED, "header_len 1000");
    /* A v1 header can claim at most 65535 bytes: fine for the limit but
     * beyond a small file. */
    scratch[8] = scratch[9] = 0xFF;
    assert_fails(input_npy_parse_header(&info, scratch, n, n, NULL), SF_E_TRUNCATED, "header_len 65535");

    n = build(scratch, sizeof scratch, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 1, 12);
    memcpy(scratch + 8, "\xFF\xFF\xFF\xFF", 4);
    rc = input_npy_parse_header(&info, scratch, n, UINT64_C(1) << 40, &need);
    assert_fails(rc, SF_E_LIMIT, "header_len 2^32-1");
    memcpy(scratch + 8, "\x01\x00\x10\x00", 4); /* INPUT_NPY_MAX_HEADER + 1 */
    rc = input_npy_parse_header(&info, scratch, n, UINT64_C(1) << 40, &need);
    assert_fails(rc, SF_E_LIMIT, "header_len 2^20+1");
    /* Exactly INPUT_NPY_MAX_HEADER is allowed: ask for the rest of it. */
    memcpy(scratch + 8, "\x00\x00\x10\x00", 4);
    rc = input_npy_parse_header(&info, scratch, n, UINT64_C(1) << 40, &need);
    cr_expect_eq(rc, 1, "%s", sf_last_error());
    cr_expect_eq(need, 12 + INPUT_NPY_MAX_HEADER);
}

Test(input_npy_file, ndim_limit)
{
    input_npy_info info;
    int rc = parse_dict(&info, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1)}", 1);
    assert_fails(rc, SF_E_LIMIT, "ndim 9");
    rc = parse_dict(&info, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1,)}", 1);
    cr_expect_eq(rc, 0, "%s", sf_last_error());
    cr_expect_eq(info.ndim, 8);
}

Test(input_npy_file, huge_shapes)
{
    static const char *const too_big[] = {
        "{'descr': '|u1', 'fortran_order': False, 'shape': (18446744073709551616,)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (18446744073709551615, 2)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (1099511627777,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,)}",
        "{'descr': '<c16', 'fortran_order': False, 'shape': (1048576, 65537)}",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 1099511627777)}",
    };
    for (size_t i = 0; i < COUNT(too_big); i++) {
        input_npy_info info;
        int rc = parse_dict(&info, too_big[i], 0);
        assert_fails(rc, SF_E_LIMIT, too_big[i]);
    }
    /* Exactly 2^40 bytes is allowed; only the file size is consulted. */
    input_npy_info info;
    size_t n = build(scratch, sizeof scratch, 1, "{'descr': '<u8', 'fortran_order': False, 'shape': (1024, 134217728)}",
                     1, 0);
    int rc = input_npy_parse_header(&info, scratch, n, n + (UINT64_C(1) << 40), NULL);
    cr_assert_eq(rc, 0, "%s", sf_last_error());
    cr_expect_eq(info.count, UINT64_C(1) << 37);
    cr_expect_eq(info.data_size, UINT64_C(1) << 40);
    rc = input_npy_parse_header(&info, scratch, n, n + (UINT64_C(1) << 40) - 1, NULL);
    assert_fails(rc, SF_E_TRUNCATED, "2^40 - 1");
}

Test(input_npy_file, messages_do_not_name_a_file)
{
    input_npy_info info;
    parse_dict(&info, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", 12);
    cr_expect_not_null(strstr(sf_last_error(), "'x'"), "%s", sf_last_error());
    cr_expect_null(strstr(sf_last_error(), ".npy:"), "%s", sf_last_error());
}

/* ------------------------------------------------------------------------ */
/* Header writing                                                           */
/* ------------------------------------------------------------------------ */

Test(npy_write, matches_numpy_bytes)
{
    for (size_t i = 0; i < COUNT(npy_header_goldens); i++) {
        const struct npy_header_golden *h = &npy_header_goldens[i];
        uint8_t buf[512];
        memset(buf, 0xEE, sizeof buf);
        size_t n = input_npy_write_header(buf, sizeof buf, h->dtype, h->ndim, h->shape);
        cr_assert_eq(n, h->len, "golden %zu: length %zu, numpy wrote %zu", i, n, h->len);
        cr_expect_arr_eq(buf, h->bytes, h->len, "golden %zu differs:\n%.*s\nnumpy:\n%.*s", i, (int)n, buf,
                         (int)h->len, h->bytes);
        cr_expect_eq(buf[n], 0xEE, "golden %zu wrote past its length", i);
        /* The exact size is enough room; one byte less is not. */
        cr_expect_eq(input_npy_write_header(buf, h->len, h->dtype, h->ndim, h->shape), h->len);
        cr_expect_eq(input_npy_write_header(buf, h->len - 1, h->dtype, h->ndim, h->shape), 0);
    }
}

Test(npy_write, round_trips_through_parser)
{
    static const uint64_t shapes[][3] = {{4, 0, 0}, {2, 3, 0}, {3, 1, 2}};
    static const uint32_t ndims[] = {1, 2, 3};
    for (int dt = SF_DTYPE_BOOL; dt < SF_DTYPE_COUNT; dt++) {
        for (size_t s = 0; s <= COUNT(ndims); s++) {
            uint32_t ndim = s < COUNT(ndims) ? ndims[s] : 0; /* last round: 0-d */
            uint8_t buf[1024] = {0};
            size_t n = input_npy_write_header(buf, sizeof buf, dt, ndim, shapes[s % COUNT(ndims)]);
            cr_assert_gt(n, 0);
            cr_expect_eq(n % 64, 0);
            cr_expect_eq(buf[n - 1], '\n');
            input_npy_info info;
            uint64_t count = 1;
            for (uint32_t k = 0; k < ndim; k++)
                count *= shapes[s % COUNT(ndims)][k];
            uint64_t size = n + count * sf_dtype_size(dt);
            int rc = input_npy_parse_header(&info, buf, n, size, NULL);
            cr_assert_eq(rc, 0, "%s ndim %u: %s", sf_dtype_name(dt), ndim, sf_last_error());
            cr_expect_eq(info.dtype, dt);
            cr_expect_eq(info.ndim, ndim);
            cr_expect_eq(info.count, count);
            cr_expect_eq(info.data_offset, n);
            cr_expect_eq(info.version_major, 1);
            cr_expect(input_npy_is_native(&info));
            for (uint32_t k = 0; k < ndim; k++)
                cr_expect_eq(info.shape[k], shapes[s % COUNT(ndims)][k]);
        }
    }
}

Test(npy_write, rejects_bad_arguments)
{
    uint8_t buf[512];
    uint64_t shape[INPUT_NPY_MAX_NDIM + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, SF_DTYPE_BYTES, 1, shape), 0);
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, SF_DTYPE_COUNT, 1, shape), 0);
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, -1, 1, shape), 0);
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, SF_DTYPE_FLOAT32, INPUT_NPY_MAX_NDIM + 1, shape), 0);
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, SF_DTYPE_FLOAT32, 1, NULL), 0);
    cr_expect_eq(input_npy_write_header(buf, 0, SF_DTYPE_FLOAT32, 1, shape), 0);
    cr_expect_eq(input_npy_write_header(NULL, 0, SF_DTYPE_FLOAT32, 1, shape), 0);
    cr_expect_eq(input_npy_write_header(buf, sizeof buf, SF_DTYPE_FLOAT32, 0, NULL), 128,
                 "0-d needs no shape");
}
