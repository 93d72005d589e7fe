/* Defensive reader/writer for NumPy .npy files (format versions 1.0, 2.0 and
 * 3.0, as documented in numpy/lib/format.py).
 *
 * The parser never evaluates the header: it accepts only the small Python
 * dict literal numpy writes ({'descr': ..., 'fortran_order': ..., 'shape':
 * ...}) and only the numeric dtypes shardfeed can store, so pickled object
 * arrays, structured and string dtypes are refused before any data is read.
 */
#ifndef SF_INPUTS_NPY_H
#define SF_INPUTS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define INPUT_NPY_MAX_NDIM 8              /* shardfeed's cap (SPEC.md); more dims -> SF_E_LIMIT */
#define INPUT_NPY_MAX_HEADER (1u << 20)   /* refuse header_len larger than this -> SF_E_LIMIT */

typedef struct input_npy_info {
    int dtype;            /* enum sf_dtype */
    int big_endian;       /* 1 when the file's data is big-endian ('>'), 0 otherwise ('<', '|', '=' on this little-endian host) */
    int fortran_order;    /* 1 when the header says fortran_order: True */
    uint32_t ndim;        /* 0 for a 0-d array (scalar) */
    uint64_t shape[INPUT_NPY_MAX_NDIM];
    uint64_t count;       /* number of elements: product of shape (1 for 0-d) */
    uint64_t data_offset; /* byte offset of the array data in the file */
    uint64_t data_size;   /* count * sf_dtype_size(dtype), overflow-checked */
    int version_major;    /* 1, 2 or 3 */
} input_npy_info;

/* Parses the header at the start of a .npy file. `buf` holds the first `len`
 * bytes of the file, `file_size` is the whole file's size. If `len` is too
 * short to hold the whole header, returns SF_E_TRUNCATED when file_size is
 * also too short, otherwise sets *need (if need != NULL) to the number of
 * bytes required and returns 1 (the caller reads more and calls again; it may
 * take more than one round). Returns 0 on success.
 * Failures go through sf_fail() with a message that does not name the file:
 *  SF_E_NPY: bad magic, unknown version, header not the expected dict literal,
 *    malformed shape, duplicate/missing/unknown keys, trailing bytes;
 *  SF_E_UNSUPPORTED: any dtype not in enum sf_dtype (object, structured,
 *    string, void, datetime, long double, ...);
 *  SF_E_LIMIT: ndim > INPUT_NPY_MAX_NDIM, header_len > INPUT_NPY_MAX_HEADER, element count
 *    or data size overflowing or above 2^40 bytes;
 *  SF_E_TRUNCATED: the file is shorter than header + data;
 *  SF_E_INVALID: bad arguments (out == NULL, len > file_size, ...). */
int input_npy_parse_header(input_npy_info *out, const uint8_t *buf, size_t len, uint64_t file_size,
                           size_t *need);

/* Converts the array data as stored in the file (`src`, info->data_size
 * bytes) into C order, little-endian, in `dst` (same size; dst != src).
 * Handles byte swapping (complex types swap each half separately) and
 * fortran_order (a general N-d transpose, any itemsize). Returns 0, or
 * SF_E_INVALID when `info` is not self-consistent. */
int input_npy_to_c_le(void *dst, const void *src, const input_npy_info *info);

/* True when the data can be used as stored (already C-order little-endian),
 * so callers can skip input_npy_to_c_le. */
int input_npy_is_native(const input_npy_info *info);

/* Writes a .npy header (version 1.0, or 2.0 if the header would not fit a
 * uint16 length) describing a C-order little-endian array, byte-identical to
 * what numpy.save writes (numpy >= 1.24: including the spare spaces numpy
 * reserves for growing the first axis), padded so the total header length is
 * a multiple of 64. Returns the header length in bytes, or 0 if `cap` is too
 * small, dtype is not an array dtype (SF_DTYPE_BOOL..SF_DTYPE_COMPLEX128), ndim >
 * INPUT_NPY_MAX_NDIM, or shape is NULL with ndim > 0. */
size_t input_npy_write_header(uint8_t *buf, size_t cap, int dtype, uint32_t ndim, const uint64_t *shape);

#endif
