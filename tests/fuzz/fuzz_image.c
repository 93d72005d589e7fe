/* Fuzz target: the image layer's decode path (lib/image: format sniffing,
 * the JPEG, PNG and WebP decoders, the pixel limit, the plan and the
 * resampler), as the reader runs it on a stored value.
 *
 * Input: [selector byte] + the encoded image. The selector picks the
 * transform: bits 0-1 mode (decode, random resized crop, centre crop),
 * bit 2 one channel, bit 3 HWC, bit 4 no DCT scaling, bit 5 flip, bits 6-7
 * the output size and key. Checks, beyond "no crash, no UB, no leak":
 *  - the result is 0 or one of the documented refusals (SF_E_CORRUPT,
 *    SF_E_UNSUPPORTED, SF_E_LIMIT, SF_E_SCHEMA), never anything else;
 *  - the same input and key give the same pixels a second time, with a
 *    scratch that already holds the first run's buffers (no state leaks
 *    from one image into the next);
 *  - every output byte is written (the output starts poisoned twice, with
 *    two different patterns). */
#include "image.h"
#include "fuzz_common.h"
#include "shardfeed/error.h"

#define OUT_MAX (40 * 40 * 3)

static int run(uint8_t *out, const image_spec *sp, uint64_t key, const uint8_t *d, size_t n,
               image_scratch *s)
{
    int rc = image_transform(out, sp, key, d, n, s);
    FUZZ_CHECK(rc == 0 || rc == SF_E_CORRUPT || rc == SF_E_UNSUPPORTED || rc == SF_E_LIMIT ||
                   rc == SF_E_SCHEMA,
               "image_transform returned %d (%s)", rc, sf_last_error());
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const uint8_t *img = data + 1;
    size_t n = size - 1;
    static const uint32_t sizes[4][2] = {{16, 12}, {7, 9}, {40, 40}, {1, 33}};
    image_spec sp = {1 + (sel & 3) % 3, sizes[sel >> 6][0], sizes[sel >> 6][1],
                     (sel & 4) ? 1 : 3, !(sel & 8), 24, {0.08, 1.0}, {0.75, 4.0 / 3.0},
                     (sel & 32) ? 0.5 : 0.0, !(sel & 16), 1u << 22};
    if (sp.mode == IMAGE_MODE_DECODE) { /* decode: the image's own size, when small */
        image_header hd;
        if (image_probe(&hd, img, n) || (uint64_t)hd.width * hd.height * 3 > OUT_MAX)
            return 0;
        sp.out_w = hd.width;
        sp.out_h = hd.height;
    }
    size_t bytes = (size_t)sp.out_h * sp.out_w * sp.channels;
    static uint8_t a[OUT_MAX], b[OUT_MAX];
    image_scratch s = {0};
    uint64_t key = (uint64_t)sel * 0x9e3779b97f4a7c15ull;
    memset(a, 0xa5, sizeof a);
    int rc = run(a, &sp, key, img, n, &s);
    memset(b, 0x5a, sizeof b);
    int rc2 = run(b, &sp, key, img, n, &s);
    FUZZ_CHECK(rc == rc2, "second run returned %d, first %d", rc2, rc);
    if (rc == 0)
        FUZZ_CHECK(memcmp(a, b, bytes) == 0, "two runs of the same image and key differ");
    image_scratch_free(&s);
    return 0;
}
