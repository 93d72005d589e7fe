/* WebP through libwebp: decoded whole to RGB (alpha dropped, as PIL's
 * convert("RGB")), then the region is taken. */
#include <errno.h>
#include <string.h>
#include <webp/decode.h>

#include "error_internal.h"
#include "image.h"

int image_webp_header(image_header *out, const uint8_t *data, size_t len)
{
    int w, h;
    if (!WebPGetInfo(data, len, &w, &h) || w <= 0 || h <= 0)
        return sf_fail(SF_E_CORRUPT, "WebP header: does not parse");
    *out = (image_header){IMAGE_WEBP, (uint32_t)w, (uint32_t)h};
    return 0;
}

int image_webp_decode(image_region *out, const uint8_t *data, size_t len, const image_request *rq,
                      image_scratch *s)
{
    image_header hd = {0};
    int rc = image_webp_header(&hd, data, len);
    if (rc)
        return rc;
    if (rq->x0 + rq->w > hd.width || rq->y0 + rq->h > hd.height)
        return sf_fail(SF_E_CORRUPT, "WebP: region outside the image");
    size_t region = (size_t)rq->w * rq->h * rq->channels, full = (size_t)hd.width * hd.height * 3;
    if ((rc = image_grow((void **)&s->pix, &s->pix_cap, region + full)))
        return rc;
    uint8_t *buf = s->pix + region;
    if (!WebPDecodeRGBInto(data, len, buf, full, (int)hd.width * 3)) {
        WebPBitstreamFeatures ft;
        if (WebPGetFeatures(data, len, &ft) == VP8_STATUS_OK && ft.has_animation)
            return sf_fail(SF_E_CORRUPT, "WebP: an animated image (its frames are not decoded; "
                                         "store one frame as a still image)");
        return sf_fail(SF_E_CORRUPT, "WebP: the image data does not decode");
    }
    for (uint32_t y = 0; y < rq->h; y++) {
        uint8_t *dst = s->pix + (size_t)y * rq->w * rq->channels;
        const uint8_t *src = buf + ((size_t)(rq->y0 + y) * hd.width + rq->x0) * 3;
        if (rq->channels == 3)
            memcpy(dst, src, (size_t)rq->w * 3);
        else
            for (uint32_t i = 0; i < rq->w; i++)
                dst[i] = image_luma(src[3 * i], src[3 * i + 1], src[3 * i + 2]);
    }
    *out = (image_region){s->pix, (size_t)rq->w * rq->channels, rq->x0, rq->y0, rq->w, rq->h,
                          rq->channels};
    return 0;
}
