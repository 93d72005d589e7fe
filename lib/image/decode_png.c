/* PNG through libpng: palette, gray below 8 bits and 16-bit samples are
 * expanded or reduced to 8-bit (16-bit keeps its high byte, as PIL does for
 * RGB; PIL clips 16-bit gray instead: README "Images"), alpha and tRNS are
 * dropped (PIL's convert("RGB")), gray is replicated to RGB or kept; no
 * gamma correction (PIL applies none). Rows are decoded in order up to the
 * last one the crop needs; an interlaced image is decoded whole. */
#include <errno.h>
#include <png.h>
#include <string.h>

#include "error_internal.h"
#include "image.h"

typedef struct png_src {
    const uint8_t *data;
    size_t len, at;
    char msg[200];
} png_src;

static void on_error(png_structp p, png_const_charp msg)
{
    png_src *src = png_get_error_ptr(p);
    snprintf(src->msg, sizeof src->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void on_warning(png_structp p, png_const_charp msg)
{
    (void)p;
    (void)msg;
}

static void read_fn(png_structp p, png_bytep dst, png_size_t n)
{
    png_src *src = png_get_io_ptr(p);
    if (n > src->len - src->at)
        png_error(p, "truncated (the data ends before the image does)");
    memcpy(dst, src->data + src->at, n);
    src->at += n;
}

int image_png_header(image_header *out, const uint8_t *data, size_t len)
{
    /* The signature (8 bytes), IHDR's length and type (8), width, height. */
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 24 || memcmp(data, sig, 8) || memcmp(data + 12, "IHDR", 4))
        return sf_fail(SF_E_CORRUPT, "PNG header: no IHDR chunk where it must be");
    uint32_t w = (uint32_t)data[16] << 24 | (uint32_t)data[17] << 16 | (uint32_t)data[18] << 8 | data[19];
    uint32_t h = (uint32_t)data[20] << 24 | (uint32_t)data[21] << 16 | (uint32_t)data[22] << 8 | data[23];
    if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
        return sf_fail(SF_E_CORRUPT, "PNG header: invalid size %ux%u", w, h);
    *out = (image_header){IMAGE_PNG, w, h};
    return 0;
}

/* Sets the transformations to 8-bit, no alpha, `channels` (gray stays gray
 * for channels == 1; RGB to gray is image_luma afterwards). */
static void set_transforms(png_structp p, png_infop info, uint32_t channels)
{
    int ct = png_get_color_type(p, info), depth = png_get_bit_depth(p, info);
    if (ct == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(p);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(p);
    if (depth == 16)
        png_set_strip_16(p);
    png_set_strip_alpha(p);
    if (channels == 3 && !(ct & PNG_COLOR_MASK_COLOR))
        png_set_gray_to_rgb(p);
}

/* Copies `w` pixels of `ch` channels to `channels` channels. */
static void copy_row(uint8_t *dst, const uint8_t *src, uint32_t w, uint32_t ch, uint32_t channels)
{
    if (ch == channels) {
        memcpy(dst, src, (size_t)w * ch);
        return;
    }
    for (uint32_t i = 0; i < w; i++) /* RGB to gray */
        dst[i] = image_luma(src[3 * i], src[3 * i + 1], src[3 * i + 2]);
}

int image_png_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                     image_scratch *s)
{
    png_src src = {data, len, 0, {0}};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return sf_fail(-ENOMEM, "out of memory for a PNG decoder");
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        return sf_fail(SF_E_CORRUPT, "PNG: %s", src.msg);
    }
    /* libpng refuses a side over 1,000,000 pixels by default; PIL does not,
     * and the pixel count is already bounded (max_pixels, checked on the
     * header before this decode). */
    png_set_user_limits(p, 0x7fffffff, 0x7fffffff);
    png_set_read_fn(p, &src, read_fn);
    png_read_info(p, info);
    set_transforms(p, info, rq->channels);
    int passes = png_set_interlace_handling(p);
    png_read_update_info(p, info);
    uint32_t W = png_get_image_width(p, info), H = png_get_image_height(p, info);
    uint32_t ch = png_get_channels(p, info);
    size_t rowbytes = png_get_rowbytes(p, info);
    if ((ch != 1 && ch != 3) || rowbytes != (size_t)W * ch || (ch == 1 && rq->channels == 3) ||
        rq->x0 + rq->w > W || rq->y0 + rq->h > H)
        png_error(p, "unexpected layout after conversion to 8-bit RGB");
    size_t region = (size_t)rq->w * rq->h * rq->channels;
    /* Interlaced: the whole image (within the pixel limit checked before);
     * else one row at a time. */
    size_t work = passes > 1 ? rowbytes * H : rowbytes;
    if (image_grow((void **)&s->pix, &s->pix_cap, region + work))
        png_error(p, "out of memory");
    uint8_t *buf = s->pix + region;
    if (passes > 1) {
        for (int pass = 0; pass < passes; pass++)
            for (uint32_t y = 0; y < H; y++)
                png_read_row(p, buf + (size_t)y * rowbytes, NULL);
        for (uint32_t y = 0; y < rq->h; y++)
            copy_row(s->pix + (size_t)y * rq->w * rq->channels,
                     buf + (size_t)(rq->y0 + y) * rowbytes + (size_t)rq->x0 * ch, rq->w, ch,
                     rq->channels);
    } else {
        for (uint32_t y = 0; y < rq->y0 + rq->h; y++) {
            png_read_row(p, buf, NULL);
            if (y >= rq->y0)
                copy_row(s->pix + (size_t)(y - rq->y0) * rq->w * rq->channels,
                         buf + (size_t)rq->x0 * ch, rq->w, ch, rq->channels);
        }
    }
    png_destroy_read_struct(&p, &info, NULL);
    *out = (image_region){s->pix, (size_t)rq->w * rq->channels, rq->x0, rq->y0, rq->w, rq->h,
                          rq->channels};
    return 0;
}
