/* The format's vocabulary: names and sizes (shardfeed/types.h). */
#include "dtype.h"

struct dtype_desc {
    size_t size;
    size_t swap_unit;
    const char *name;
    const char *descr;
};

static const struct dtype_desc dtypes[SF_DTYPE_COUNT] = {
    [SF_DTYPE_BYTES] = {1, 1, "bytes", "|u1"},
    [SF_DTYPE_BOOL] = {1, 1, "bool", "|b1"},
    [SF_DTYPE_UINT8] = {1, 1, "uint8", "|u1"},
    [SF_DTYPE_INT8] = {1, 1, "int8", "|i1"},
    [SF_DTYPE_UINT16] = {2, 2, "uint16", "<u2"},
    [SF_DTYPE_INT16] = {2, 2, "int16", "<i2"},
    [SF_DTYPE_UINT32] = {4, 4, "uint32", "<u4"},
    [SF_DTYPE_INT32] = {4, 4, "int32", "<i4"},
    [SF_DTYPE_UINT64] = {8, 8, "uint64", "<u8"},
    [SF_DTYPE_INT64] = {8, 8, "int64", "<i8"},
    [SF_DTYPE_FLOAT16] = {2, 2, "float16", "<f2"},
    [SF_DTYPE_FLOAT32] = {4, 4, "float32", "<f4"},
    [SF_DTYPE_FLOAT64] = {8, 8, "float64", "<f8"},
    [SF_DTYPE_COMPLEX64] = {8, 4, "complex64", "<c8"},
    [SF_DTYPE_COMPLEX128] = {16, 8, "complex128", "<c16"},
};

static const struct dtype_desc *lookup(int dtype)
{
    if (dtype < 0 || dtype >= SF_DTYPE_COUNT)
        return NULL;
    return &dtypes[dtype];
}

size_t sf_dtype_size(int dtype)
{
    const struct dtype_desc *d = lookup(dtype);
    return d ? d->size : 0;
}

size_t sf_dtype_swap_unit(int dtype)
{
    const struct dtype_desc *d = lookup(dtype);
    return d ? d->swap_unit : 0;
}

const char *sf_dtype_name(int dtype)
{
    const struct dtype_desc *d = lookup(dtype);
    return d ? d->name : NULL;
}

const char *sf_dtype_npy_descr(int dtype)
{
    const struct dtype_desc *d = lookup(dtype);
    return d ? d->descr : NULL;
}

const char *sf_storage_name(int storage)
{
    static const char *const names[SF_STORAGE_COUNT] = {
        [SF_STORAGE_FIXED] = "fixed", [SF_STORAGE_VARIABLE] = "variable", [SF_STORAGE_INLINE] = "inline"};
    return storage >= 0 && storage < SF_STORAGE_COUNT ? names[storage] : NULL;
}

const char *sf_codec_name(int codec)
{
    static const char *const names[SF_CODEC_COUNT] = {[SF_CODEC_NONE] = "none", [SF_CODEC_ZSTD] = "zstd"};
    return codec >= 0 && codec < SF_CODEC_COUNT ? names[codec] : NULL;
}
