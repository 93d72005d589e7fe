/* The image layer on the command line, for tests/image/test_image.py (which
 * compares it with PIL and torchvision) and by hand:
 *
 *   sf_image_tool run FILE [--mode decode|rrc|center] [--size H W] [--resize N]
 *                 [--channels 1|3] [--hwc] [--flip P] [--no-dct] [--key K]
 *                 [--scale A B] [--ratio A B] [--max-pixels N] [--portable]
 *       writes the output pixels (raw uint8, CHW unless --hwc) to stdout;
 *       --portable: the resampler's plain C loops instead of its SIMD ones;
 *       exit 3 with "error CODE: message" on stderr when the image is refused
 *   sf_image_tool boxes WIDTH HEIGHT N [--scale A B] [--ratio A B]
 *       prints the RandomResizedCrop boxes (left top width height) of keys 0..N-1
 *   sf_image_tool probe FILE
 *       prints "FORMAT WIDTH HEIGHT"
 *   sf_image_tool jpeg-sampled RGB_FILE WIDTH HEIGHT HS VS OUT.jpg
 *       writes the raw RGB pixels as a JPEG (quality 92) whose luma is
 *       sampled HS x VS and chroma 1x1: layouts PIL does not write (4:1:0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#include "image.h"
#include "shardfeed/error.h"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf)
        exit(2);
    *len = n;
    return buf;
}

static int portable; /* run --portable */

/* jpeg-sampled: libjpeg's encoder with the luma's sampling factors set. */
static int jpeg_sampled(int argc, char **argv)
{
    if (argc != 8)
        return 2;
    size_t len;
    uint8_t *rgb = slurp(argv[2], &len);
    JDIMENSION w = (JDIMENSION)atol(argv[3]), h = (JDIMENSION)atol(argv[4]);
    if (len != (size_t)w * h * 3)
        return 2;
    FILE *f = fopen(argv[7], "wb");
    if (!f)
        return 2;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err); /* errors exit: a test tool */
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 92, TRUE);
    ci.comp_info[0].h_samp_factor = atoi(argv[5]);
    ci.comp_info[0].v_samp_factor = atoi(argv[6]);
    ci.comp_info[1].h_samp_factor = ci.comp_info[1].v_samp_factor = 1;
    ci.comp_info[2].h_samp_factor = ci.comp_info[2].v_samp_factor = 1;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < h) {
        JSAMPROW row = rgb + (size_t)ci.next_scanline * w * 3;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
    free(rgb);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: sf_image_tool run FILE [options] | boxes W H N [options] | probe FILE\n");
    exit(2);
}

/* Parses the options shared by run and boxes from argv[i..]. */
static void parse(image_spec *sp, uint64_t *key, int argc, char **argv, int i)
{
    for (; i < argc; i++) {
        const char *a = argv[i];
        int more = argc - i - 1;
        if (!strcmp(a, "--mode") && more >= 1) {
            const char *m = argv[++i];
            sp->mode = !strcmp(m, "rrc") ? IMAGE_MODE_RRC : !strcmp(m, "center") ? IMAGE_MODE_CENTER
                                                                                 : IMAGE_MODE_DECODE;
        } else if (!strcmp(a, "--size") && more >= 2) {
            sp->out_h = (uint32_t)atol(argv[++i]);
            sp->out_w = (uint32_t)atol(argv[++i]);
        } else if (!strcmp(a, "--resize") && more >= 1) {
            sp->resize = (uint32_t)atol(argv[++i]);
        } else if (!strcmp(a, "--channels") && more >= 1) {
            sp->channels = (uint32_t)atol(argv[++i]);
        } else if (!strcmp(a, "--hwc")) {
            sp->chw = 0;
        } else if (!strcmp(a, "--flip") && more >= 1) {
            sp->flip = atof(argv[++i]);
        } else if (!strcmp(a, "--no-dct")) {
            sp->dct_scale = 0;
        } else if (!strcmp(a, "--key") && more >= 1) {
            *key = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(a, "--scale") && more >= 2) {
            sp->scale[0] = atof(argv[++i]);
            sp->scale[1] = atof(argv[++i]);
        } else if (!strcmp(a, "--ratio") && more >= 2) {
            sp->ratio[0] = atof(argv[++i]);
            sp->ratio[1] = atof(argv[++i]);
        } else if (!strcmp(a, "--portable")) {
            portable = 1;
        } else if (!strcmp(a, "--max-pixels") && more >= 1) {
            sp->max_pixels = strtoull(argv[++i], NULL, 0);
        } else {
            usage();
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    image_spec sp = {IMAGE_MODE_DECODE, 0, 0, 3, 1, 0, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, 0, 1,
                     IMAGE_DEFAULT_MAX_PIXELS};
    uint64_t key = 0;
    if (!strcmp(argv[1], "jpeg-sampled"))
        return jpeg_sampled(argc, argv);
    if (!strcmp(argv[1], "boxes") && argc >= 5) {
        uint32_t w = (uint32_t)atol(argv[2]), h = (uint32_t)atol(argv[3]);
        long n = atol(argv[4]);
        parse(&sp, &key, argc, argv, 5);
        for (long k = 0; k < n; k++) {
            image_rng g;
            image_rng_init(&g, (uint64_t)k); /* the key run --key k uses */
            uint32_t box[4];
            image_rrc_box(box, w, h, sp.scale, sp.ratio, &g);
            printf("%u %u %u %u\n", box[0], box[1], box[2], box[3]);
        }
        return 0;
    }
    size_t len;
    uint8_t *data = slurp(argv[2], &len);
    image_header hd;
    int rc = image_probe(&hd, data, len);
    if (!strcmp(argv[1], "probe")) {
        if (!rc)
            printf("%s %u %u\n", hd.format == IMAGE_JPEG ? "jpeg" : hd.format == IMAGE_PNG ? "png" : "webp",
                   hd.width, hd.height);
    } else if (!strcmp(argv[1], "run")) {
        parse(&sp, &key, argc, argv, 3);
        if (!rc && sp.mode == IMAGE_MODE_DECODE && !sp.out_h) {
            sp.out_h = hd.height;
            sp.out_w = hd.width;
        }
        size_t n = (size_t)sp.out_h * sp.out_w * sp.channels;
        uint8_t *out = malloc(n ? n : 1);
        image_scratch s = {0};
        s.portable = portable;
        if (!rc)
            rc = image_transform(out, &sp, key, data, len, &s);
        if (!rc)
            fwrite(out, 1, n, stdout);
        image_scratch_free(&s);
        free(out);
    } else {
        usage();
    }
    free(data);
    if (rc) {
        fprintf(stderr, "error %d (%s): %s\n", rc, sf_strerror(rc), sf_last_error());
        return 3;
    }
    return 0;
}
