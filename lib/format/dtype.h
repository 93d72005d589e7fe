/* Element types a shardfeed field can hold. The numeric codes are part of
 * the on-disk format (SPEC.md, "Data types"): never renumber. */
#ifndef SF_FORMAT_DTYPE_H
#define SF_FORMAT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum sf_dtype {
    SF_DT_BYTES = 0, /* opaque bytes (variable-length fields) */
    SF_DT_BOOL = 1,
    SF_DT_U8 = 2,
    SF_DT_I8 = 3,
    SF_DT_U16 = 4,
    SF_DT_I16 = 5,
    SF_DT_U32 = 6,
    SF_DT_I32 = 7,
    SF_DT_U64 = 8,
    SF_DT_I64 = 9,
    SF_DT_F16 = 10,
    SF_DT_F32 = 11,
    SF_DT_F64 = 12,
    SF_DT_C64 = 13,  /* complex64: two float32 */
    SF_DT_C128 = 14, /* complex128: two float64 */
    SF_DT_COUNT = 15
};

/* Bytes per element (1 for BYTES); 0 for an unknown code. */
size_t sf_dtype_size(int dtype);
/* Size of one byte-swappable unit: the element size, except complex types
 * whose real and imaginary parts swap separately. 0 for an unknown code. */
size_t sf_dtype_swap_unit(int dtype);
/* NumPy's name ("float32", "uint8", ...) or NULL for an unknown code. */
const char *sf_dtype_name(int dtype);
/* NumPy little-endian descr ("<f4", "|u1", ...) or NULL. */
const char *sf_dtype_npy_descr(int dtype);

#endif
