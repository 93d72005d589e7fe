/* The dataset metadata SPEC.md defines ("Metadata"): the input format a
 * dataset was packed from and its class names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "error_internal.h"
#include "metadata.h"

int sf_dataset_load_metadata(sf_dataset *ds)
{
    sf_metadata_source(ds->source, &ds->manifest);
    return sf_metadata_class_names(&ds->classes, &ds->class_count, &ds->manifest);
}

void sf_dataset_free_metadata(sf_dataset *ds)
{
    free(ds->classes);
    ds->classes = NULL;
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
        return sf_fail(SF_E_INVALID, "sf_dataset_class_name: %s is NULL",
                       !name ? "name" : !len ? "len" : "ds");
    if (label >= ds->class_count)
        return sf_fail(SF_E_INVALID, "label %u: the dataset has %u classes", label, ds->class_count);
    *name = (const char *)ds->classes[label].name;
    *len = ds->classes[label].len;
    return 0;
}

int sf_dataset_metadata(const void **value, size_t *len, const sf_dataset *ds, const char *key)
{
    if (!value || !len || !ds || !key)
        return sf_fail(SF_E_INVALID, "sf_dataset_metadata: %s is NULL",
                       !value ? "value" : !len ? "len" : !ds ? "ds" : "key");
    const uint8_t *v;
    uint32_t n;
    sf_metadata_find(&v, &n, &ds->manifest, key);
    *value = v;
    *len = n;
    return 0;
}
