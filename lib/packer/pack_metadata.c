/* The manifest metadata pack writes (SPEC.md "Metadata"), built with the
 * format layer's encoders (metadata.h). */
#include <string.h>

#include "error_internal.h"
#include "pack_internal.h"

int pack_metadata_encode(uint8_t **out, uint32_t *size, const input_set *in, const sf_part_info *part,
                         const pack_images *images)
{
    sf_metadata_builder b = {0};
    const char *source = in->ops->name;
    int rc = sf_metadata_add(&b, "source", source, (uint32_t)strlen(source));
    if (!rc && in->class_count)
        rc = sf_metadata_add_class_names(&b, in->class_names, in->class_count);
    if (!rc && part && part->count)
        rc = sf_metadata_add_part(&b, part);
    if (!rc && images && images->max_side) {
        sf_image_reencode r = {images->max_side, images->quality, images->reencoded};
        rc = sf_metadata_add_image_reencode(&b, &r);
    }
    if (rc) {
        sf_metadata_builder_free(&b);
        return sf_fail_prefix(rc, in->path);
    }
    *out = b.buf;
    *size = b.size;
    return 0;
}
