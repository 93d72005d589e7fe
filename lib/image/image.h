/* The image layer: encoded images (JPEG, PNG, WebP) to fixed-size uint8
 * pixels, with the crop, resize and flip fused into the decode.
 *
 * Pure functions of their inputs: no reader or dataset knowledge, no
 * global state. The randomness of a random crop comes in as a 64-bit key
 * (the reader derives it from seed, epoch and sample id), so the same key
 * gives the same pixels on any thread.
 *
 * Pipeline of image_transform:
 *   1. image_probe: the format (by magic) and the size from the header;
 *      a size over max_pixels is refused here, before anything is
 *      allocated (a decompression bomb).
 *   2. image_plan_make: the geometry, torchvision's: which box of the
 *      source goes to which output size (RandomResizedCrop's sampling,
 *      Resize(shorter side) + CenterCrop, or none) and whether to flip.
 *   3. decode of only the source rows and columns the box needs (JPEG: DCT
 *      scaling to the smallest scale M/8 that still covers the output,
 *      jpeg_crop_scanline and jpeg_skip_scanlines), to RGB or gray.
 *   4. image_resample: bilinear with antialiasing (the triangle filter
 *      widened by the downscale factor, torchvision's antialias=True and
 *      PIL's), horizontal then vertical in fixed point (14-bit weights,
 *      7 fractional bits between the passes), rounded to nearest; the flip
 *      and the output layout (HWC or CHW) fused into the passes.
 */
#ifndef SF_IMAGE_H
#define SF_IMAGE_H

#include <stddef.h>
#include <stdint.h>

enum image_format { IMAGE_UNKNOWN = 0, IMAGE_JPEG, IMAGE_PNG, IMAGE_WEBP };

enum image_mode {
    IMAGE_MODE_DECODE = 1, /* no resizing: the image must be out_h x out_w */
    IMAGE_MODE_RRC = 2,    /* RandomResizedCrop(out, scale, ratio) */
    IMAGE_MODE_CENTER = 3, /* Resize(shorter side = resize) then CenterCrop(out) */
    IMAGE_MODE_RESIZE = 4  /* the whole image to out_h x out_w (pack's --image-max-side) */
};

/* PIL's Image.MAX_IMAGE_PIXELS times two, where PIL refuses an image
 * (DecompressionBombError): about 179 million pixels. */
#define IMAGE_DEFAULT_MAX_PIXELS 178956970ull

/* What to make of each image (resolved: no zero means "default" here). */
typedef struct image_spec {
    int mode;              /* enum image_mode */
    uint32_t out_h, out_w; /* output size */
    uint32_t channels;     /* 3 (RGB) or 1 (gray, PIL's "L" weights) */
    int chw;               /* 1: [C, H, W]; 0: [H, W, C] */
    uint32_t resize;       /* CENTER: the shorter side's size before the crop */
    double scale[2];       /* RRC: area fraction range */
    double ratio[2];       /* RRC: aspect ratio (w / h) range */
    double flip;           /* probability of a horizontal flip */
    int dct_scale;         /* JPEG: decode at a reduced DCT scale where the output allows */
    uint64_t max_pixels;   /* images with more pixels are refused */
} image_spec;

typedef struct image_header {
    int format; /* enum image_format */
    uint32_t width, height;
} image_header;

/* The format (from the magic bytes) and the size (from the header) of an
 * encoded image. SF_E_UNSUPPORTED for the magic of a format not decoded here
 * (BMP, GIF, TIFF, ...), SF_E_CORRUPT for bytes of no known format or a
 * header that does not parse; detail in sf_last_error(). */
int image_probe(image_header *out, const uint8_t *data, size_t len);

/* Axis of a plan: the source interval [x0, x0 + len) is resized to `dst`
 * pixels, of which the output takes [off, off + out) (pixels outside
 * [0, dst) are 0: a centre crop larger than the resized image). */
typedef struct image_axis {
    double x0, len;
    uint32_t dst, out;
    int64_t off; /* negative: a centre crop wider than the resized image (zero padding) */
} image_axis;

typedef struct image_plan {
    image_axis x, y;
    int flip;
} image_plan;

/* A deterministic stream of random numbers from a 64-bit key (splitmix64). */
typedef struct image_rng {
    uint64_t state;
} image_rng;
uint64_t image_rng_key(uint64_t seed, uint64_t epoch, uint64_t id, uint64_t salt);
void image_rng_init(image_rng *g, uint64_t key);
double image_rng_uniform(image_rng *g); /* [0, 1) */
uint64_t image_rng_below(image_rng *g, uint64_t n); /* [0, n), n > 0 */

/* The crop box torchvision's RandomResizedCrop.get_params draws for a
 * width x height image: 10 tries of an area in scale * area and a
 * log-uniform aspect ratio, the first that fits placed uniformly, else the
 * centre crop clamped to the ratio range. Integer box (left, top, w, h). */
void image_rrc_box(uint32_t box[4], uint32_t width, uint32_t height, const double scale[2],
                   const double ratio[2], image_rng *g);

/* The geometry of spec for a width x height image, drawing from g. */
void image_plan_make(image_plan *out, const image_spec *spec, uint32_t width, uint32_t height,
                     image_rng *g);

/* A thread's reusable buffers: grown on demand, never shrunk; nothing is
 * allocated once they are large enough. */
typedef struct image_scratch {
    uint8_t *pix;
    size_t pix_cap;
    void *tmp;    /* resampler rows */
    size_t tmp_cap;
    void *coef;   /* resampler weights and bounds */
    size_t coef_cap;
    int portable; /* 1: the resampler's plain C loops even where SIMD ones exist (the same
                   * pixels: integer arithmetic; tests compare the two) */
} image_scratch;
void image_scratch_free(image_scratch *s);
/* Grows buffer *p of *cap bytes to at least `need`: 0 or -ENOMEM. */
int image_grow(void **p, size_t *cap, size_t need);

/* Decoded pixels of a region of a (possibly DCT-scaled) image. */
typedef struct image_region {
    const uint8_t *pix;    /* rows of w * channels bytes, `stride` apart */
    size_t stride;
    uint32_t x0, y0, w, h; /* the region in the decoded image's coordinates */
    uint32_t channels;     /* 1 or 3 */
} image_region;

/* Resamples region `src` (holding every pixel the plan reads) into `out`
 * (out_h x out_w x channels, HWC or CHW): plan is in the region's image
 * coordinates. 0 or -ENOMEM. */
int image_resample(uint8_t *out, const image_plan *plan, const image_region *src, uint32_t channels,
                   int chw, image_scratch *s);

/* Source pixels [lo, hi) that output pixels [off, off + out) of axis a read
 * (the filter's support, clamped to the source interval), for an image
 * `size` pixels long on that axis. */
void image_axis_span(const image_axis *a, uint32_t size, uint32_t *lo, uint32_t *hi);

/* Decoders: decode the region [x0, x0 + w) x [y0, y0 + h) of the image
 * (after DCT scaling by *scale_num / 8 for JPEG, which may lower it) into
 * s->pix as `channels`-channel rows. A damaged stream is SF_E_CORRUPT. */
typedef struct image_request {
    uint32_t channels;
    uint32_t scale_num;    /* JPEG: 1..8, the DCT scale (num / 8); others: 8 */
    uint32_t x0, y0, w, h; /* the region, in scaled coordinates */
} image_request;
/* Sets the scaled size for a JPEG at scale_num / 8 (as libjpeg computes it). */
void image_jpeg_scaled_size(uint32_t *w, uint32_t *h, uint32_t width, uint32_t height,
                            uint32_t scale_num);
int image_jpeg_header(image_header *out, const uint8_t *data, size_t len);
int image_png_header(image_header *out, const uint8_t *data, size_t len);
int image_webp_header(image_header *out, const uint8_t *data, size_t len);
int image_jpeg_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                      image_scratch *s);
int image_png_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                     image_scratch *s);
int image_webp_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                      image_scratch *s);

/* RGB to gray with PIL's "L" weights (ITU-R 601-2 luma, fixed point). */
static inline uint8_t image_luma(uint8_t r, uint8_t g, uint8_t b)
{
    return (uint8_t)(((uint32_t)r * 19595u + (uint32_t)g * 38470u + (uint32_t)b * 7471u + 0x8000u) >> 16);
}

/* The whole pipeline: `data` (len bytes, an encoded image) to out
 * (spec->out_h x out_w x channels bytes), randomness from `key`.
 * Errors (detail in sf_last_error(), naming what was wrong with the image):
 * SF_E_UNSUPPORTED (not JPEG, PNG or WebP), SF_E_CORRUPT (damaged),
 * SF_E_LIMIT (more pixels than spec->max_pixels), SF_E_SCHEMA (DECODE: not
 * out_h x out_w), -ENOMEM. */
int image_transform(uint8_t *out, const image_spec *spec, uint64_t key, const uint8_t *data,
                    size_t len, image_scratch *s);

/* Pack's re-encoding (--image-max-side, --image-quality). */
/* The size of a width x height image fitted within max_side: unchanged
 * when both sides are within it, else the longer side max_side and the
 * shorter its share, rounded to the nearest, at least 1. */
void image_fit_size(uint32_t *w, uint32_t *h, uint32_t width, uint32_t height, uint32_t max_side);
/* width x height RGB pixels (HWC) to a baseline JPEG of quality 1..100:
 * *out is malloc'd (free it), *len its bytes. -ENOMEM, or SF_E_INVALID
 * with libjpeg's words. Deterministic: the same pixels and quality give
 * the same bytes. */
int image_jpeg_encode(uint8_t **out, size_t *len, const uint8_t *rgb, uint32_t width, uint32_t height,
                      int quality);

#endif
