/* RGB pixels to a baseline JPEG through libjpeg-turbo: what pack writes for
 * an image it re-encodes (--image-max-side). libjpeg's defaults otherwise
 * (as PIL's save(quality=Q)): 4:2:0 chroma, standard Huffman tables, islow
 * DCT, no optimisation pass, JFIF header; so the bytes depend only on the
 * pixels, the quality and the library's version. */
#include <assert.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#include "error_internal.h"
#include "image.h"

typedef struct encode_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} encode_err;

static void on_encode_error(j_common_ptr c)
{
    encode_err *e = (encode_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

int image_jpeg_encode(uint8_t **out, size_t *len, const uint8_t *rgb, uint32_t width, uint32_t height,
                      int quality)
{
    struct jpeg_compress_struct ci;
    encode_err e;
    memset(&ci, 0, sizeof ci);
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = on_encode_error;
    e.msg[0] = 0;
    /* volatile: read after a longjmp. libjpeg mallocs and grows it. */
    unsigned char *volatile buf = NULL;
    unsigned long size = 0;
    if (setjmp(e.jb)) {
        jpeg_destroy_compress(&ci);
        free(buf);
        if (strstr(e.msg, "nsufficient memory"))
            return sf_fail(-ENOMEM, "out of memory encoding a %ux%u JPEG", width, height);
        return sf_fail(SF_E_INVALID, "JPEG encoder: %s", e.msg);
    }
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, (unsigned char **)&buf, &size);
    ci.image_width = width;
    ci.image_height = height;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    size_t stride = (size_t)width * 3;
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)ci.next_scanline * stride);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    *out = buf;
    *len = size;
    return 0;
}

void image_fit_size(uint32_t *w, uint32_t *h, uint32_t width, uint32_t height, uint32_t max_side)
{
    assert(width > 0 && height > 0 && max_side > 0);
    *w = width;
    *h = height;
    if (width <= max_side && height <= max_side)
        return;
    /* The longer side becomes max_side, the shorter its share rounded to
     * the nearest (half away from zero), at least 1. */
    if (width >= height) {
        *w = max_side;
        *h = (uint32_t)(((uint64_t)height * max_side * 2 + width) / (2 * (uint64_t)width));
    } else {
        *h = max_side;
        *w = (uint32_t)(((uint64_t)width * max_side * 2 + height) / (2 * (uint64_t)height));
    }
    if (*w < 1)
        *w = 1;
    if (*h < 1)
        *h = 1;
}
