/* The dataset metadata SPEC.md defines ("Metadata"): the input format a
 * dataset was packed from and its class names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "error_internal.h"
#include "le.h"

int sf_dataset_load_metadata(sf_dataset *ds)
{
    const uint8_t *v;
    uint32_t len;
    if (sf_metadata_find(&v, &len, &ds->manifest, "source") && len < sizeof ds->source) {
        memcpy(ds->source, v, len);
        ds->source[len] = '\0';
    }
    if (!sf_metadata_find(&v, &len, &ds->manifest, "class_names"))
        return 0;
    /* The manifest decoder checked the framing: u32 length + name each. */
    uint32_t n = 0;
    for (uint64_t pos = 0; pos < len; n++)
        pos += 4 + (uint64_t)sf_get_le32(v + pos);
    ds->class_name = calloc(n ? n : 1, sizeof *ds->class_name);
    ds->class_len = calloc(n ? n : 1, sizeof *ds->class_len);
    if (!ds->class_name || !ds->class_len)
        return sf_fail(-ENOMEM, "out of memory for %u class names", n);
    uint64_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        ds->class_len[i] = sf_get_le32(v + pos);
        ds->class_name[i] = v + pos + 4;
        pos += 4 + (uint64_t)ds->class_len[i];
    }
    ds->class_count = n;
    return 0;
}

void sf_dataset_free_metadata(sf_dataset *ds)
{
    free(ds->class_name);
    free(ds->class_len);
    ds->class_name = NULL;
    ds->class_len = NULL;
    ds->class_count = 0;
}

const char *sf_dataset_source(const sf_dataset *ds)
{
    return ds ? ds->source : "";
}

uint32_t sf_dataset_num_classes(const sf_dataset *ds)
{
    return ds ? ds->class_count : 0;
}

int sf_dataset_class_name(const char **name, size_t *len, const sf_dataset *ds, uint32_t label)
{
    if (!name || !len || !ds)
        return sf_fail(SF_E_INVALID, "sf_dataset_class_name: NULL argument");
    if (label >= ds->class_count)
        return sf_fail(SF_E_INVALID, "label %u: the dataset has %u classes", label, ds->class_count);
    *name = (const char *)ds->class_name[label];
    *len = ds->class_len[label];
    return 0;
}

int sf_dataset_metadata(const void **value, uint32_t *len, const sf_dataset *ds, const char *key)
{
    if (!value || !len || !ds || !key)
        return sf_fail(SF_E_INVALID, "sf_dataset_metadata: NULL argument");
    const uint8_t *v;
    sf_metadata_find(&v, len, &ds->manifest, key);
    *value = v;
    return 0;
}
