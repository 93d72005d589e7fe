/* shardfeed — the format's vocabulary: the codes every dataset file stores
 * for a field's element type, storage kind and codec (SPEC.md "Data types",
 * "Schema", "Compression"), with their names and sizes. The numbers are part
 * of the on-disk format: never renumbered. The library, the CLI and the
 * Python module all take them from here. */
#ifndef SHARDFEED_TYPES_H
#define SHARDFEED_TYPES_H

#include <stddef.h>

#include "shardfeed/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a field (SPEC.md "Data types"). Arrays are stored C order,
 * little-endian. */
typedef enum sf_dtype {
    SF_DTYPE_BYTES = 0, /* opaque bytes: variable-length fields only */
    SF_DTYPE_BOOL = 1,  /* one byte, 0 or 1 */
    SF_DTYPE_UINT8 = 2,
    SF_DTYPE_INT8 = 3,
    SF_DTYPE_UINT16 = 4,
    SF_DTYPE_INT16 = 5,
    SF_DTYPE_UINT32 = 6,
    SF_DTYPE_INT32 = 7,
    SF_DTYPE_UINT64 = 8,
    SF_DTYPE_INT64 = 9,
    SF_DTYPE_FLOAT16 = 10,    /* IEEE binary16 */
    SF_DTYPE_FLOAT32 = 11,
    SF_DTYPE_FLOAT64 = 12,
    SF_DTYPE_COMPLEX64 = 13,  /* float32 real, then imaginary */
    SF_DTYPE_COMPLEX128 = 14, /* float64 real, then imaginary */
    SF_DTYPE_COUNT = 15       /* codes >= this are reserved */
} sf_dtype;

/* Where a field's values are stored (SPEC.md "Schema"). */
typedef enum sf_storage {
    SF_STORAGE_FIXED = 0,    /* fixed shape, in the record's payload */
    SF_STORAGE_VARIABLE = 1, /* variable length, in the payload; its length in the index */
    SF_STORAGE_INLINE = 2,   /* fixed shape, at most 8 bytes, inside the index entry */
    SF_STORAGE_COUNT = 3
} sf_storage;

/* How a payload field's values are encoded (SPEC.md "Compression").
 * Readers hand out decompressed values whatever the codec. */
typedef enum sf_codec {
    SF_CODEC_NONE = 0, /* stored as is */
    SF_CODEC_ZSTD = 1, /* one zstd frame per value, with its content size */
    SF_CODEC_COUNT = 2
} sf_codec;

/* Bytes of one element (1 for BYTES); 0 for a code outside the enum. */
SF_API size_t sf_dtype_size(int dtype);
/* NumPy's name: "float32", "uint8", ..., "bytes"; NULL outside the enum. */
SF_API const char *sf_dtype_name(int dtype);
/* NumPy's little-endian descr: "<f4", "|u1", ...; NULL outside the enum. */
SF_API const char *sf_dtype_npy_descr(int dtype);
/* "fixed", "variable", "inline"; NULL outside the enum. */
SF_API const char *sf_storage_name(int storage);
/* "none", "zstd"; NULL outside the enum. */
SF_API const char *sf_codec_name(int codec);

#ifdef __cplusplus
}
#endif
#endif
