/* An encoded image to its output pixels: format by magic, the pixel limit,
 * the plan, the DCT scale, the decode of the region the plan reads, the
 * resample (image.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error_internal.h"
#include "image.h"

static int magic_format(const uint8_t *d, size_t n)
{
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
        return IMAGE_JPEG;
    if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0)
        return IMAGE_PNG;
    if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0)
        return IMAGE_WEBP;
    return IMAGE_UNKNOWN;
}

/* The name of an image format this library does not decode, by its magic
 * (formats torchvision's ImageFolder accepts, and a few common others), or
 * NULL: then the bytes are no image format known here, i.e. damaged. */
static const char *other_format(const uint8_t *d, size_t n)
{
    if (n >= 2 && d[0] == 'B' && d[1] == 'M')
        return "BMP";
    if (n >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0))
        return "GIF";
    if (n >= 4 && (memcmp(d, "II*\0", 4) == 0 || memcmp(d, "MM\0*", 4) == 0))
        return "TIFF";
    if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7' && (d[2] == '\n' || d[2] == ' ' || d[2] == '\r' ||
                                                               d[2] == '\t'))
        return "PNM (PBM/PGM/PPM/PAM)";
    if (n >= 4 && memcmp(d, "\0\0\1\0", 4) == 0)
        return "ICO";
    if (n >= 12 && memcmp(d + 4, "ftyp", 4) == 0 &&
        (memcmp(d + 8, "avif", 4) == 0 || memcmp(d + 8, "heic", 4) == 0 || memcmp(d + 8, "mif1", 4) == 0))
        return "AVIF/HEIF";
    return NULL;
}

int image_probe(image_header *out, const uint8_t *data, size_t len)
{
    switch (magic_format(data, len)) {
    case IMAGE_JPEG:
        return image_jpeg_header(out, data, len);
    case IMAGE_PNG:
        return image_png_header(out, data, len);
    case IMAGE_WEBP:
        return image_webp_header(out, data, len);
    default:
        break;
    }
    /* Another format is the data's kind, not damage: SF_E_UNSUPPORTED (the
     * reader does not substitute it, which would drop every such image
     * without a word); bytes of no known format are damage: SF_E_CORRUPT. */
    const char *other = other_format(data, len);
    if (other)
        return sf_fail(SF_E_UNSUPPORTED, "a %s image, not a JPEG, PNG or WebP one", other);
    if (len == 0)
        return sf_fail(SF_E_CORRUPT, "not a JPEG, PNG or WebP image: an empty value");
    char first[3 * 4] = ""; /* "xx xx xx xx" */
    for (size_t i = 0, at = 0; i < len && i < 4; i++)
        at += (size_t)snprintf(first + at, sizeof first - at, "%s%02x", i ? " " : "", data[i]);
    return sf_fail(SF_E_CORRUPT, "not a JPEG, PNG or WebP image (first bytes %s)", first);
}

/* The smallest JPEG DCT scale M / 8 at which the plan's box still has at
 * least as many pixels as the output takes from it on both axes, so the
 * resample only ever reduces (or keeps) the size; M a power of two:
 * libjpeg-turbo has SIMD IDCTs for 8x8, 4x4 and 2x2 (and 1x1), the other
 * sizes are plain C, so 6/8 costs about what 8/8 does. */
static uint32_t jpeg_scale(const image_plan *pl)
{
    double fx = (double)pl->x.dst / pl->x.len, fy = (double)pl->y.dst / pl->y.len;
    double f = fx > fy ? fx : fy;
    uint32_t m = (uint32_t)ceil(8.0 * f - 1e-9);
    uint32_t p = 1;
    while (p < m && p < 8)
        p *= 2;
    return p;
}

static void axis_rescale(image_axis *a, double k)
{
    a->x0 *= k;
    a->len *= k;
}

static int decode_region(image_region *reg, int format, const uint8_t *data, size_t len,
                         const image_request *rq, image_scratch *s)
{
    switch (format) {
    case IMAGE_JPEG:
        return image_jpeg_decode(reg, data, len, rq, s);
    case IMAGE_PNG:
        return image_png_decode(reg, data, len, rq, s);
    default:
        return image_webp_decode(reg, data, len, rq, s);
    }
}

int image_transform(uint8_t *out, const image_spec *spec, uint64_t key, const uint8_t *data,
                    size_t len, image_scratch *s)
{
    image_header hd;
    int rc = image_probe(&hd, data, len);
    if (rc)
        return rc;
    if ((uint64_t)hd.width * hd.height > spec->max_pixels)
        return sf_fail(SF_E_LIMIT, "image of %ux%u pixels: more than the limit of %llu (max_pixels)",
                       hd.width, hd.height, (unsigned long long)spec->max_pixels);
    if (spec->mode == IMAGE_MODE_DECODE && (hd.width != spec->out_w || hd.height != spec->out_h))
        return sf_fail(SF_E_SCHEMA,
                       "image of %ux%u pixels (width x height), but Decode does not resize and "
                       "this batch's images are %ux%u (the first sample's size, or Decode's size=): "
                       "every image must have that size; resize or crop instead",
                       hd.width, hd.height, spec->out_w, spec->out_h);
    image_rng g;
    image_rng_init(&g, key);
    image_plan pl;
    image_plan_make(&pl, spec, hd.width, hd.height, &g);
    image_request rq = {spec->channels, 8, 0, 0, 0, 0};
    uint32_t W = hd.width, H = hd.height;
    if (hd.format == IMAGE_JPEG && spec->dct_scale && spec->mode != IMAGE_MODE_DECODE) {
        rq.scale_num = jpeg_scale(&pl);
        image_jpeg_scaled_size(&W, &H, hd.width, hd.height, rq.scale_num);
        /* A DCT-scaled pixel covers exactly 8 / scale_num source pixels
         * (the last row and column may be partial: W, H round up). */
        axis_rescale(&pl.x, rq.scale_num / 8.0);
        axis_rescale(&pl.y, rq.scale_num / 8.0);
    }
    uint32_t xlo, xhi, ylo, yhi;
    image_axis_span(&pl.x, W, &xlo, &xhi);
    image_axis_span(&pl.y, H, &ylo, &yhi);
    if (xhi <= xlo || yhi <= ylo) { /* the output is all padding */
        memset(out, 0, (size_t)spec->out_w * spec->out_h * spec->channels);
        return 0;
    }
    if (hd.format == IMAGE_JPEG) {
        /* A margin around the region: at the first rows after
         * jpeg_skip_scanlines and the first columns after jpeg_crop_scanline,
         * fancy (smooth) chroma upsampling lacks its neighbours and differs
         * from a whole decode by up to 3 (measured on 4:2:2 without a margin;
         * 1 was enough for 4:4:4, 4:2:2 and 4:2:0). JPEG_MARGIN rows and
         * columns more, one chroma sample at the largest sampling factor JPEG
         * allows (4), keep the pixels the resampler reads equal to a whole
         * decode's (tests/image: test_rrc_of_a_jpeg_decodes_only_its_region_...).
         * Each margin row costs Huffman decoding: 16 cost about 3 %. */
        enum { JPEG_MARGIN = 4 };
        xlo = xlo > JPEG_MARGIN ? xlo - JPEG_MARGIN : 0;
        ylo = ylo > JPEG_MARGIN ? ylo - JPEG_MARGIN : 0;
        xhi = xhi + JPEG_MARGIN < W ? xhi + JPEG_MARGIN : W;
        yhi = yhi + JPEG_MARGIN < H ? yhi + JPEG_MARGIN : H;
    }
    rq.x0 = xlo;
    rq.w = xhi - xlo;
    rq.y0 = ylo;
    rq.h = yhi - ylo;
    image_region reg;
    if ((rc = decode_region(&reg, hd.format, data, len, &rq, s)))
        return rc;
    return image_resample(out, &pl, &reg, spec->channels, spec->chw, s);
}
