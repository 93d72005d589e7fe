/* Fuzz target: the .npy header parser and the data normaliser.
 *
 * Input: the bytes of a .npy file. Checks, beyond "no crash, no UB":
 *  - parsing in chunks (following *need) gives the same result as parsing
 *    the whole file at once, and *need always asks for more than it had;
 *  - an accepted header describes the file exactly (offset + size = length);
 *  - input_npy_to_c_le equals a naive element-by-element reference conversion;
 *  - input_npy_write_header for the parsed dtype/shape parses back to the same. */
#include <inttypes.h>

#include "dtype.h"
#include "npy.h"
#include "fuzz_common.h"
#include "shardfeed/error.h"

/* Reference conversion: for every C-order position, find the source item
 * (Fortran or C order) and reverse each swap unit when big-endian. */
static void reference_convert(uint8_t *dst, const uint8_t *src, const input_npy_info *info)
{
    size_t isz = sf_dtype_size(info->dtype), unit = sf_dtype_swap_unit(info->dtype);
    for (uint64_t i = 0; i < info->count; i++) {
        uint64_t idx[INPUT_NPY_MAX_NDIM], rem = i;
        for (uint32_t k = info->ndim; k-- > 0;) {
            idx[k] = rem % info->shape[k];
            rem /= info->shape[k];
        }
        uint64_t s = 0;
        if (info->fortran_order) {
            for (uint32_t k = info->ndim; k-- > 0;)
                s = s * info->shape[k] + idx[k];
        } else {
            s = i;
        }
        const uint8_t *from = src + s * isz;
        uint8_t *to = dst + i * isz;
        if (info->big_endian && unit > 1) {
            for (size_t u = 0; u < isz; u += unit)
                for (size_t b = 0; b < unit; b++)
                    to[u + b] = from[u + unit - 1 - b];
        } else {
            memcpy(to, from, isz);
        }
    }
}

static int same_info(const input_npy_info *a, const input_npy_info *b)
{
    if (a->dtype != b->dtype || a->big_endian != b->big_endian ||
        a->fortran_order != b->fortran_order || a->ndim != b->ndim || a->count != b->count ||
        a->data_offset != b->data_offset || a->data_size != b->data_size ||
        a->version_major != b->version_major)
        return 0;
    for (uint32_t k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_npy_info whole, part;
    int rc_whole = input_npy_parse_header(&whole, data, size, size, NULL);
    FUZZ_CHECK(rc_whole != 1, "whole-file parse asked for more bytes");

    /* The way input_npy_file_open reads: a small first chunk, then what *need says. */
    size_t len = size < 16 ? size : 16;
    int rc = 0;
    for (int round = 0;; round++) {
        size_t need = 0;
        rc = input_npy_parse_header(&part, data, len, size, &need);
        if (rc != 1)
            break;
        FUZZ_CHECK(need > len && need <= size, "need %zu with %zu of %zu bytes", need, len, size);
        FUZZ_CHECK(round < 8, "parser keeps asking for more bytes");
        len = need;
    }
    FUZZ_CHECK(rc == rc_whole, "chunked parse rc %d, whole-file rc %d (%s)", rc, rc_whole,
               sf_last_error());
    if (rc != 0) {
        FUZZ_CHECK(rc < 0 && sf_last_error()[0] != '\0', "failure %d without a message", rc);
        return 0;
    }
    FUZZ_CHECK(same_info(&whole, &part), "chunked and whole-file parses differ");

    const input_npy_info *info = &whole;
    size_t isz = sf_dtype_size(info->dtype);
    FUZZ_CHECK(info->dtype >= SF_DTYPE_BOOL && info->dtype <= SF_DTYPE_COMPLEX128, "dtype %d", info->dtype);
    FUZZ_CHECK(info->ndim <= INPUT_NPY_MAX_NDIM, "ndim %u", info->ndim);
    uint64_t count = 1;
    for (uint32_t k = 0; k < info->ndim; k++)
        count *= info->shape[k]; /* the parser capped the product */
    FUZZ_CHECK(count == info->count, "count %" PRIu64 " vs %" PRIu64, info->count, count);
    FUZZ_CHECK(info->data_size == count * isz, "data_size");
    FUZZ_CHECK(info->data_offset <= size && info->data_offset + info->data_size == size,
               "layout %" PRIu64 "+%" PRIu64 " != %zu", info->data_offset, info->data_size, size);

    /* Conversion: bounded by the input size, so allocating is fine. */
    size_t n = (size_t)info->data_size;
    uint8_t *dst = malloc(n + 1), *ref = malloc(n + 1);
    FUZZ_CHECK(dst && ref, "out of memory");
    const uint8_t *src = data + info->data_offset;
    FUZZ_CHECK(input_npy_to_c_le(dst, src, info) == 0, "input_npy_to_c_le refused a parsed header: %s",
               sf_last_error());
    reference_convert(ref, src, info);
    FUZZ_CHECK(memcmp(dst, ref, n) == 0, "input_npy_to_c_le differs from the reference conversion");
    if (input_npy_is_native(info))
        FUZZ_CHECK(memcmp(dst, src, n) == 0, "input_npy_is_native but the data needed converting");
    free(dst);
    free(ref);

    /* The writer describes the same array; the file size is only a number
     * here, so arrays of any size are checked without allocating them. */
    uint8_t hdr[4096];
    size_t hlen = input_npy_write_header(hdr, sizeof hdr, info->dtype, info->ndim, info->shape);
    FUZZ_CHECK(hlen > 0 && hlen % 64 == 0, "input_npy_write_header gave %zu bytes", hlen);
    input_npy_info back;
    rc = input_npy_parse_header(&back, hdr, hlen, hlen + info->data_size, NULL);
    FUZZ_CHECK(rc == 0, "written header does not parse: %s", sf_last_error());
    FUZZ_CHECK(back.dtype == info->dtype && back.ndim == info->ndim && !back.big_endian &&
                   !back.fortran_order && back.data_offset == hlen && back.data_size == info->data_size,
               "written header parses differently");
    for (uint32_t k = 0; k < info->ndim; k++)
        FUZZ_CHECK(back.shape[k] == info->shape[k], "shape[%u]", k);
    return 0;
}
