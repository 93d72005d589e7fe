/* Image transforms in the reader (shardfeed/reader.h, "images"): which
 * fields carry one, how they look in a batch, and the decode of a record's
 * image straight into its place in the slot. The pixels are lib/image's
 * work; this file only connects it to the reader: options to specs, the
 * per-sample key (seed, epoch, sample id, field), the thread's scratch,
 * and the corrupt-sample message naming shard, record and key. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "image.h"
#include "reader_internal.h"

struct reader_images {
    uint32_t count;
    int8_t spec_of[SF_MAX_FIELDS]; /* field -> index into spec, or -1 */
    image_spec spec[SF_MAX_FIELDS];
};

static const image_spec *field_spec(const sf_reader *r, uint32_t f)
{
    if (!r->images || r->images->spec_of[f] < 0)
        return NULL;
    return &r->images->spec[r->images->spec_of[f]];
}

int reader_image_field(const sf_reader *r, uint32_t f)
{
    return field_spec(r, f) != NULL;
}

uint64_t reader_image_item_size(const sf_reader *r, uint32_t f)
{
    const image_spec *sp = field_spec(r, f);
    return sp ? (uint64_t)sp->out_h * sp->out_w * sp->channels : 0;
}

void reader_image_batch_field(const sf_reader *r, uint32_t f, sf_batch_field *bf)
{
    const image_spec *sp = field_spec(r, f);
    if (!sp)
        return;
    bf->dtype = SF_DTYPE_UINT8;
    bf->storage = SF_STORAGE_FIXED;
    bf->elem_size = 1;
    bf->ndim = 3;
    memset(bf->shape, 0, sizeof bf->shape);
    uint64_t c = sp->channels, h = sp->out_h, w = sp->out_w;
    uint64_t chw[3] = {c, h, w}, hwc[3] = {h, w, c};
    memcpy(bf->shape, sp->chw ? chw : hwc, sizeof chw);
    bf->item_size = c * h * w;
    bf->offsets = NULL;
}

/* The size of sample i's image in field f, or an error naming the sample
 * and its key. */
static int image_size_of(sf_reader *r, uint32_t f, uint64_t i, const image_spec *sp, image_header *hd)
{
    uint64_t size;
    int rc = sf_dataset_value_size(&size, r->ds, i, f);
    uint8_t *buf = rc ? NULL : malloc(size ? size : 1);
    if (!rc && !buf)
        return sf_fail(-ENOMEM, "out of memory");
    if (!rc && !(rc = sf_dataset_read_value(buf, size, &size, r->ds, i, f, 1)))
        rc = image_probe(hd, buf, size);
    free(buf);
    if (!rc && (uint64_t)hd->width * hd->height > sp->max_pixels)
        rc = sf_fail(SF_E_LIMIT, "%ux%u pixels, more than max_pixels", hd->width, hd->height);
    if (rc == -ENOMEM || !rc)
        return rc;
    const char *k = "";
    size_t kl = 0;
    (void)sf_dataset_key(&k, &kl, r->ds, i);
    char why[512];
    snprintf(why, sizeof why, "%s", sf_last_error());
    return sf_fail(rc, "sample %llu (key '%.*s'): field '%s': %s", (unsigned long long)i, (int)kl, k,
                   r->schema->fields[f].name, why);
}

/* DECODE with no size given: the size of the first sample's image. With
 * on_corrupt = skip, of the first intact one among the first
 * READER_SUBST_MAX_TRIES, as a batch substitutes a damaged sample: one bad
 * image first failed the whole run. A format the transforms do not decode
 * (BMP) is not skipped, as in a batch (reader_image_value). */
static int first_image_size(sf_reader *r, uint32_t f, image_spec *sp)
{
    uint64_t n = sf_dataset_num_samples(r->ds);
    int skip = r->opts.on_corrupt == SF_ON_CORRUPT_SKIP;
    uint64_t tries = !skip ? 1 : n < READER_SUBST_MAX_TRIES ? n : READER_SUBST_MAX_TRIES;
    char first[640] = "";
    int first_rc = 0;
    for (uint64_t i = 0; i < tries; i++) {
        image_header hd;
        int rc = image_size_of(r, f, i, sp, &hd);
        if (!rc) {
            sp->out_h = hd.height;
            sp->out_w = hd.width;
            return 0;
        }
        if (rc == -ENOMEM || rc == SF_E_UNSUPPORTED ||
            (rc != SF_E_CORRUPT && rc != SF_E_CHECKSUM && rc != SF_E_LIMIT && rc != SF_E_TRUNCATED))
            return sf_fail_prefix(rc, "images: Decode without a size takes the first sample's size");
        if (i == 0) {
            first_rc = rc;
            snprintf(first, sizeof first, "%s", sf_last_error());
        }
    }
    if (tries <= 1)
        return sf_fail(first_rc, "images: Decode without a size takes the first sample's size: %s", first);
    return sf_fail(first_rc,
                   "images: Decode without a size takes the first intact sample's size, and none of "
                   "the first %llu is: %s",
                   (unsigned long long)tries, first);
}

static int bad_opt(const sf_image_opts *o, const char *what)
{
    return sf_fail(SF_E_INVALID, "images: field '%s': %s", o->field ? o->field : "(null)", what);
}

/* One sf_image_opts to a resolved spec for field f. */
static int resolve(sf_reader *r, const sf_image_opts *o, uint32_t f, image_spec *sp)
{
    const sf_field *fd = &r->schema->fields[f];
    if (fd->storage != SF_STORAGE_VARIABLE)
        return bad_opt(o, "not a variable-length field of encoded images");
    if (fd->codec != SF_CODEC_NONE)
        return sf_fail(SF_E_UNSUPPORTED,
                       "images: field '%s' is compressed (zstd): decoding images from compressed "
                       "values is not implemented (pack the images uncompressed)", o->field);
    if (o->mode < SF_IMAGE_DECODE || o->mode > SF_IMAGE_CENTER_CROP)
        return bad_opt(o, "mode: expected decode (1), random resized crop (2) or center crop (3)");
    if (o->layout != SF_IMAGE_CHW && o->layout != SF_IMAGE_HWC)
        return bad_opt(o, "layout: expected CHW (0) or HWC (1)");
    if (o->channels != 0 && o->channels != 1 && o->channels != 3)
        return bad_opt(o, "channels: expected 3 (RGB) or 1 (gray)");
    if (!(o->flip >= 0 && o->flip <= 1))
        return bad_opt(o, "flip: a probability from 0 to 1");
    if ((o->height == 0) != (o->width == 0) || (o->mode != SF_IMAGE_DECODE && o->height == 0))
        return bad_opt(o, "height and width: both set (or both 0 for decode)");
    if (o->height > 65535 || o->width > 65535)
        return bad_opt(o, "height and width: at most 65535");
    *sp = (image_spec){
        .mode = o->mode,
        .out_h = o->height,
        .out_w = o->width,
        .channels = o->channels ? o->channels : 3,
        .chw = o->layout == SF_IMAGE_CHW,
        .resize = o->resize ? o->resize : (o->height > o->width ? o->height : o->width),
        .scale = {o->scale_min, o->scale_max},
        .ratio = {o->ratio_min, o->ratio_max},
        .flip = o->flip,
        .dct_scale = !o->exact,
        .max_pixels = o->max_pixels ? o->max_pixels : SF_IMAGE_DEFAULT_MAX_PIXELS,
    };
    if (sp->scale[0] == 0 && sp->scale[1] == 0) {
        sp->scale[0] = 0.08;
        sp->scale[1] = 1.0;
    }
    if (sp->ratio[0] == 0 && sp->ratio[1] == 0) {
        sp->ratio[0] = 3.0 / 4.0;
        sp->ratio[1] = 4.0 / 3.0;
    }
    if (!(sp->scale[0] > 0 && sp->scale[0] <= sp->scale[1] && sp->scale[1] <= 1))
        return bad_opt(o, "scale: expected 0 < scale_min <= scale_max <= 1");
    if (!(sp->ratio[0] > 0 && sp->ratio[0] <= sp->ratio[1] && isfinite(sp->ratio[1])))
        return bad_opt(o, "ratio: expected 0 < ratio_min <= ratio_max");
    if (o->resize > 65535)
        return bad_opt(o, "resize: at most 65535");
    if (sp->mode == IMAGE_MODE_DECODE && sp->out_h == 0)
        return first_image_size(r, f, sp);
    return 0;
}

int reader_images_open(sf_reader *r)
{
    const sf_reader_opts *o = &r->opts;
    if (!o->num_images)
        return 0;
    if (!o->images || o->num_images > SF_MAX_FIELDS)
        return sf_fail(SF_E_INVALID, "images: %u transforms%s", o->num_images,
                       o->images ? ": more than one per field" : " but no array");
    reader_images *im = calloc(1, sizeof *im);
    if (!im)
        return sf_fail(-ENOMEM, "out of memory");
    r->images = im;
    memset(im->spec_of, -1, sizeof im->spec_of);
    for (uint32_t i = 0; i < o->num_images; i++) {
        const sf_image_opts *io = &o->images[i];
        int rc = sf_check_opts_version("sf_image_opts", io->version, SF_IMAGE_OPTS_VERSION);
        if (rc)
            return rc;
        if (!io->field)
            return sf_fail(SF_E_INVALID, "images: sf_image_opts %u: field is NULL (name the field to decode)", i);
        uint32_t f = 0;
        while (io->field && f < r->schema->field_count && strcmp(r->schema->fields[f].name, io->field))
            f++;
        if (!io->field || f == r->schema->field_count)
            return bad_opt(io, "no such field in the dataset");
        if (im->spec_of[f] >= 0)
            return bad_opt(io, "two transforms for one field");
        if ((rc = resolve(r, io, f, &im->spec[im->count])))
            return rc;
        im->spec_of[f] = (int8_t)im->count++;
    }
    return 0;
}

void reader_images_close(sf_reader *r)
{
    free(r->images);
    r->images = NULL;
}

int reader_image_scratch_init(reader_scratch *st, const sf_reader *r)
{
    if (!r->images)
        return 0;
    st->image = calloc(1, sizeof(image_scratch));
    return st->image ? 0 : sf_fail(-ENOMEM, "out of memory");
}

void reader_image_scratch_fini(reader_scratch *st)
{
    if (st->image)
        image_scratch_free(st->image);
    free(st->image);
    st->image = NULL;
}

int reader_image_value(reader_scratch *st, sf_reader *r, reader_task *t, uint32_t f,
                       const uint8_t *src, uint64_t len, uint8_t *dst)
{
    const image_spec *sp = field_spec(r, f);
    uint64_t key = image_rng_key(r->opts.seed, t->slot->batch.epoch, t->id, f);
    int rc = image_transform(dst, sp, key, src, (size_t)len, st->image);
    if (rc == 0 || rc == -ENOMEM)
        return rc;
    const char *k = "";
    size_t kl = 0;
    (void)sf_dataset_key(&k, &kl, r->ds, t->id);
    char why[256];
    snprintf(why, sizeof why, "%s", sf_last_error());
    if (rc == SF_E_SCHEMA || rc == SF_E_UNSUPPORTED) {
        /* Decode() of an image of another size, or an image in a format the
         * transforms do not decode (BMP, TIFF...: ImageFolder packs them as
         * torchvision does): the options do not fit the data. Substituting
         * it (on_corrupt = skip) would drop every such image without a
         * word. */
        char msg[640];
        snprintf(msg, sizeof msg, "key '%.*s': field '%s': %s%s", (int)kl, k, r->schema->fields[f].name, why,
                 rc == SF_E_UNSUPPORTED ? " (shardfeed.image transforms decode JPEG, PNG and WebP; read other "
                                          "formats without a transform and decode them yourself, or convert "
                                          "them before packing)"
                                        : "");
        reader_task_fail_config(r, t, rc, msg);
        return sf_fail(rc, "%s", msg);
    }
    /* Whatever else is wrong with the image, it is a sample that cannot be
     * delivered: corrupt. */
    return sf_fail(SF_E_CORRUPT, "key '%.*s': field '%s': the image does not decode: %s", (int)kl, k,
                   r->schema->fields[f].name, why);
}
