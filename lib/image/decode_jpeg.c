/* JPEG through libjpeg-turbo: the header, and the decode of a region at a
 * DCT scale (scale_num / 8) with jpeg_crop_scanline and jpeg_skip_scanlines,
 * so that only the rows and iMCU columns the crop needs are decoded.
 * Colour: YCbCr and RGB to RGB by libjpeg (as PIL, which uses the same
 * library and defaults: islow IDCT, fancy upsampling); grayscale kept or
 * replicated; CMYK and YCCK to RGB with PIL's formula (Adobe's inverted
 * CMYK undone first, as PIL's "CMYK;I" does). A stream that ends early
 * (libjpeg's "premature end of data" warning, where it would pad with
 * gray) is corrupt, as PIL says "image file is truncated".
 * A progressive stream may hold any number of scans, and libjpeg walks every
 * block of the image for each: a 115 kB file of repeated 39-byte scans over a
 * 4096x4096 image kept a thread busy for 5.7 s, 760 kB for minutes. Real
 * encoders write about 10 (libjpeg's simple progression: 10; mozjpeg: a few
 * more); past IMAGE_JPEG_MAX_SCANS the stream is refused as corrupt, the limit
 * libjpeg-turbo advises for untrusted input lowered to what real files use. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

#include "error_internal.h"
#include "image.h"

#define IMAGE_JPEG_MAX_SCANS 100

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf jb;
    int truncated;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void on_error(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings are not printed; the one that means lost data is remembered. */
static void on_message(j_common_ptr c, int level)
{
    jpeg_err *e = (jpeg_err *)c->err;
    if (level < 0) {
        if (c->err->msg_code == JWRN_JPEG_EOF)
            e->truncated = 1;
        c->err->num_warnings++;
    }
}

/* Called by libjpeg between passes and scans (ci->progress). */
static void on_progress(j_common_ptr c)
{
    const struct jpeg_decompress_struct *ci = (const struct jpeg_decompress_struct *)c;
    jpeg_err *e = (jpeg_err *)c->err;
    if (ci->input_scan_number > IMAGE_JPEG_MAX_SCANS) {
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans (real encoders write about 10)",
                 IMAGE_JPEG_MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

/* Zeroes the struct first: a longjmp from jpeg_create_decompress (out of
 * memory) lands in the caller's handler, whose jpeg_destroy_decompress then
 * finds no memory manager and does nothing. */
static void err_init(struct jpeg_decompress_struct *ci, jpeg_err *e)
{
    memset(ci, 0, sizeof *ci);
    ci->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = on_error;
    e->pub.emit_message = on_message;
    e->progress.progress_monitor = on_progress;
    e->truncated = 0;
    e->msg[0] = 0;
}

int image_jpeg_header(image_header *out, const uint8_t *data, size_t len)
{
    struct jpeg_decompress_struct ci;
    jpeg_err e;
    err_init(&ci, &e);
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&ci);
        return sf_fail(SF_E_CORRUPT, "JPEG header: %s", e.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    out->format = IMAGE_JPEG;
    out->width = ci.image_width;
    out->height = ci.image_height;
    jpeg_destroy_decompress(&ci);
    return 0;
}

void image_jpeg_scaled_size(uint32_t *w, uint32_t *h, uint32_t width, uint32_t height,
                            uint32_t scale_num)
{
    /* jdiv_round_up(image_width * scale_num, 8), as jpeg_calc_output_dimensions. */
    *w = (uint32_t)(((uint64_t)width * scale_num + 7) / 8);
    *h = (uint32_t)(((uint64_t)height * scale_num + 7) / 8);
}

/* One decoded row (n pixels of `comps` components in libjpeg's output
 * colour space) to `channels` channels. */
static void convert_row(uint8_t *dst, const uint8_t *src, uint32_t n, int comps, int adobe_cmyk,
                        uint32_t channels)
{
    if ((uint32_t)comps == channels && comps != 4) { /* RGB to RGB, gray to gray */
        memcpy(dst, src, (size_t)n * channels);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint8_t r, g, b;
        if (comps == 1) {
            r = g = b = src[i];
        } else if (comps == 3) {
            r = src[3 * i];
            g = src[3 * i + 1];
            b = src[3 * i + 2];
        } else {
            /* PIL's cmyk2rgb on (possibly inverted) CMYK: nk - c * nk / 255. */
            const uint8_t *p = src + 4 * i;
            uint32_t c = p[0], m = p[1], y = p[2], k = p[3];
            if (adobe_cmyk) {
                c = 255 - c;
                m = 255 - m;
                y = 255 - y;
                k = 255 - k;
            }
            uint32_t nk = 255 - k, t;
#define MULDIV255(a, b) (t = (a) * (b) + 128, ((t >> 8) + t) >> 8)
            r = (uint8_t)(nk - MULDIV255(c, nk));
            g = (uint8_t)(nk - MULDIV255(m, nk));
            b = (uint8_t)(nk - MULDIV255(y, nk));
#undef MULDIV255
        }
        if (channels == 1) {
            dst[i] = comps == 1 ? r : image_luma(r, g, b);
        } else {
            dst[3 * i] = r;
            dst[3 * i + 1] = g;
            dst[3 * i + 2] = b;
        }
    }
}

int image_jpeg_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                      image_scratch *s)
{
    struct jpeg_decompress_struct ci;
    jpeg_err e;
    err_init(&ci, &e);
    /* volatile: read after a longjmp. */
    JSAMPLE *volatile row = NULL;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&ci);
        return sf_fail(SF_E_CORRUPT, "JPEG: %s", e.msg);
    }
    jpeg_create_decompress(&ci);
    ci.progress = &e.progress;
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int adobe_cmyk = 0;
    if (ci.jpeg_color_space == JCS_GRAYSCALE) {
        ci.out_color_space = JCS_GRAYSCALE;
    } else if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        ci.out_color_space = JCS_CMYK;
        /* Inverted, marker or not: PIL assumes Adobe's convention for
         * every CMYK JPEG, and pixels are to equal PIL's. */
        adobe_cmyk = 1;
    } else {
        ci.out_color_space = JCS_RGB;
    }
    ci.scale_num = rq->scale_num;
    ci.scale_denom = 8;

    jpeg_start_decompress(&ci);
    if (ci.output_width < rq->x0 + rq->w || ci.output_height < rq->y0 + rq->h) {
        jpeg_destroy_decompress(&ci);
        return sf_fail(SF_E_CORRUPT, "JPEG: decodes to %ux%u, not the %ux%u its header gave",
                       ci.output_width, ci.output_height, rq->x0 + rq->w, rq->y0 + rq->h);
    }
    JDIMENSION xoff = rq->x0, cw = rq->w;
    /* libjpeg-turbo 2.1.5's column crop is wrong well inside the crop for
     * a luma sampled 4x2 (4:1:0) at a reduced DCT scale (max 207 against a
     * whole decode, green stripes), where 4:4:4 to 4:1:1 agree: with a
     * sampling factor above 2 the whole width is decoded. Such files are
     * rare; the crop only saves time. */
    int crop_ok = ci.max_h_samp_factor <= 2 && ci.max_v_samp_factor <= 2;
    if (cw < ci.output_width && crop_ok)
        jpeg_crop_scanline(&ci, &xoff, &cw); /* widens to iMCU boundaries */
    else
        xoff = 0;
    const int comps = ci.output_components;
    size_t region = (size_t)rq->w * rq->h * rq->channels;
    size_t rowbytes = (size_t)ci.output_width * (size_t)comps;
    if (image_grow((void **)&s->pix, &s->pix_cap, region + rowbytes)) {
        jpeg_destroy_decompress(&ci);
        return -ENOMEM;
    }
    row = s->pix + region;
    if (rq->y0)
        jpeg_skip_scanlines(&ci, rq->y0);
    for (uint32_t y = 0; y < rq->h; y++) {
        JSAMPROW rp = row;
        if (jpeg_read_scanlines(&ci, &rp, 1) != 1) {
            jpeg_destroy_decompress(&ci);
            return sf_fail(SF_E_CORRUPT, "JPEG: no more rows after %u", rq->y0 + y);
        }
        if (e.truncated)
            break;
        convert_row(s->pix + (size_t)y * rq->w * rq->channels, row + (size_t)(rq->x0 - xoff) * comps,
                    rq->w, comps, adobe_cmyk, rq->channels);
    }
    if (!e.truncated && ci.output_scanline == ci.output_height)
        jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    if (e.truncated)
        return sf_fail(SF_E_CORRUPT, "JPEG: truncated (the data ends before the image does)");
    *out = (image_region){s->pix, (size_t)rq->w * rq->channels, rq->x0, rq->y0, rq->w, rq->h,
                          rq->channels};
    return 0;
}
