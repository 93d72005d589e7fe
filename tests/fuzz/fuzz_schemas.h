/* A few fixed schemas the shard-level fuzz targets decode indexes against:
 * together they cover fixed, variable-length and inline fields, inter-field
 * padding and the payload-less record. */
#ifndef SF_TESTS_FUZZ_SCHEMAS_H
#define SF_TESTS_FUZZ_SCHEMAS_H

#include "format.h"
#include "fuzz_common.h"

static inline void fz_field(sf_schema *s, const char *name, int dtype, int storage, uint32_t ndim,
                     const uint64_t *shape)
{
    sf_field *f = &s->fields[s->field_count++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->dtype = (uint8_t)dtype;
    f->storage = (uint8_t)storage;
    f->ndim = (uint8_t)ndim;
    uint64_t size = sf_dtype_size(dtype);
    for (uint32_t d = 0; d < ndim; d++) {
        f->shape[d] = shape[d];
        size *= shape[d];
    }
    f->item_size = storage == SF_STORAGE_VARIABLE ? 0 : size;
}

#define FZ_N_SCHEMAS 4

/* Schema `which` % FZ_N_SCHEMAS, finished. */
static inline void fz_schema(sf_schema *s, unsigned which)
{
    static const uint64_t img[] = {3, 8, 8}, aux[] = {13}, var[] = {0};
    memset(s, 0, sizeof *s);
    switch (which % FZ_N_SCHEMAS) {
    case 0: /* what pack writes for images + labels */
        fz_field(s, "img", SF_DTYPE_FLOAT32, SF_STORAGE_FIXED, 3, img);
        fz_field(s, "label", SF_DTYPE_INT64, SF_STORAGE_INLINE, 0, NULL);
        break;
    case 1: /* one variable-length field */
        fz_field(s, "data", SF_DTYPE_BYTES, SF_STORAGE_VARIABLE, 1, var);
        break;
    case 2: /* everything mixed: padding between fields, two var slots */
        fz_field(s, "aux", SF_DTYPE_UINT8, SF_STORAGE_FIXED, 1, aux);
        fz_field(s, "v", SF_DTYPE_INT32, SF_STORAGE_VARIABLE, 1, var);
        fz_field(s, "label", SF_DTYPE_UINT16, SF_STORAGE_INLINE, 0, NULL);
        fz_field(s, "w", SF_DTYPE_FLOAT64, SF_STORAGE_VARIABLE, 1, var);
        break;
    default: /* inline only: records have no payload */
        fz_field(s, "y", SF_DTYPE_UINT8, SF_STORAGE_INLINE, 0, NULL);
        break;
    }
    int rc = sf_schema_finish(s);
    FUZZ_CHECK(rc == 0, "fixed schema %u does not finish", which % FZ_N_SCHEMAS);
}

#endif
