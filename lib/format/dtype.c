#include "dtype.h"

struct dtype_desc {
    size_t size;
    size_t swap_unit;
    const char *name;
    const char *descr;
};

static const struct dtype_desc dtypes[SF_DT_COUNT] = {
    [SF_DT_BYTES] = {1, 1, "bytes", "|u1"},
    [SF_DT_BOOL] = {1, 1, "bool", "|b1"},
    [SF_DT_U8] = {1, 1, "uint8", "|u1"},
    [SF_DT_I8] = {1, 1, "int8", "|i1"},
    [SF_DT_U16] = {2, 2, "uint16", "<u2"},
    [SF_DT_I16] = {2, 2, "int16", "<i2"},
    [SF_DT_U32] = {4, 4, "uint32", "<u4"},
    [SF_DT_I32] = {4, 4, "int32", "<i4"},
    [SF_DT_U64] = {8, 8, "uint64", "<u8"},
    [SF_DT_I64] = {8, 8, "int64", "<i8"},
    [SF_DT_F16] = {2, 2, "float16", "<f2"},
    [SF_DT_F32] = {4, 4, "float32", "<f4"},
    [SF_DT_F64] = {8, 8, "float64", "<f8"},
    [SF_DT_C64] = {8, 4, "complex64", "<c8"},
    [SF_DT_C128] = {16, 8, "complex128", "<c16"},
};

static const struct dtype_desc *lookup(int dtype)
{
    if (dtype < 0 || dtype >= SF_DT_COUNT)
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
