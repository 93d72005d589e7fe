/* The geometry of a transform: torchvision's RandomResizedCrop sampling,
 * Resize(shorter side) + CenterCrop, and the random numbers they draw from
 * (a pure function of a 64-bit key). */
#include <assert.h>
#include <math.h>

#include "image.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Each input goes through a full mixing round, so keys of neighbouring
 * samples, epochs or seeds share no structure. */
uint64_t image_rng_key(uint64_t seed, uint64_t epoch, uint64_t id, uint64_t salt)
{
    uint64_t x = seed;
    uint64_t k = splitmix64(&x);
    x = k ^ epoch;
    k = splitmix64(&x);
    x = k ^ id;
    k = splitmix64(&x);
    x = k ^ salt;
    return splitmix64(&x);
}

void image_rng_init(image_rng *g, uint64_t key)
{
    g->state = key;
}

double image_rng_uniform(image_rng *g)
{
    return (double)(splitmix64(&g->state) >> 11) * 0x1.0p-53;
}

uint64_t image_rng_below(image_rng *g, uint64_t n)
{
    assert(n > 0);
    /* Lemire's multiply-shift with rejection: exactly uniform. */
    for (;;) {
        uint64_t x = splitmix64(&g->state);
        unsigned __int128 m = (unsigned __int128)x * n;
        uint64_t lo = (uint64_t)m;
        if (lo >= n || lo >= (0 - n) % n)
            return (uint64_t)(m >> 64);
    }
}

/* Python's round() of a non-negative double: half to even (nearbyint in the
 * default rounding mode). */
static int64_t round_half_even(double v)
{
    return (int64_t)nearbyint(v);
}

void image_rrc_box(uint32_t box[4], uint32_t width, uint32_t height, const double scale[2],
                   const double ratio[2], image_rng *g)
{
    double area = (double)width * (double)height;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * image_rng_uniform(g));
        double aspect = exp(lr0 + (lr1 - lr0) * image_rng_uniform(g));
        int64_t w = round_half_even(sqrt(target * aspect));
        int64_t h = round_half_even(sqrt(target / aspect));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            box[3] = (uint32_t)h;
            box[2] = (uint32_t)w;
            box[1] = (uint32_t)image_rng_below(g, height - (uint64_t)h + 1);
            box[0] = (uint32_t)image_rng_below(g, width - (uint64_t)w + 1);
            return;
        }
    }
    /* torchvision's fallback: the centre crop, clamped to the ratio range. */
    double in_ratio = (double)width / (double)height;
    double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
    double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
    int64_t w = width, h = height;
    if (in_ratio < rmin)
        h = round_half_even((double)w / rmin);
    else if (in_ratio > rmax)
        w = round_half_even((double)h * rmax);
    if (h < 1)
        h = 1;
    if (w < 1)
        w = 1;
    if (h > height)
        h = height;
    if (w > width)
        w = width;
    box[0] = (uint32_t)((width - w) / 2);
    box[1] = (uint32_t)((height - h) / 2);
    box[2] = (uint32_t)w;
    box[3] = (uint32_t)h;
}

/* torchvision's Resize(size) with one number: the shorter side becomes
 * `resize`, the longer int(resize * long / short) (truncated, as Python's
 * int() of the float quotient). */
static void resized_size(uint32_t *rw, uint32_t *rh, uint32_t width, uint32_t height,
                         uint32_t resize)
{
    if (width <= height) {
        *rw = resize;
        *rh = (uint32_t)floor((double)resize * (double)height / (double)width);
    } else {
        *rh = resize;
        *rw = (uint32_t)floor((double)resize * (double)width / (double)height);
    }
    if (*rw < 1)
        *rw = 1;
    if (*rh < 1)
        *rh = 1;
}

/* torchvision's center_crop offset on one axis: int(round((size - crop) /
 * 2.0)) when the crop fits, else minus the left/top padding
 * ((crop - size) // 2). */
static int64_t center_offset(uint32_t size, uint32_t crop)
{
    if (crop > size)
        return -(int64_t)((crop - size) / 2);
    return round_half_even((double)(size - crop) / 2.0);
}

static void axis_set(image_axis *a, double x0, double len, uint32_t dst, int64_t off, uint32_t out)
{
    a->x0 = x0;
    a->len = len;
    a->dst = dst;
    a->off = off;
    a->out = out;
}

void image_plan_make(image_plan *out, const image_spec *spec, uint32_t width, uint32_t height,
                     image_rng *g)
{
    if (spec->mode == IMAGE_MODE_RRC) {
        uint32_t box[4];
        image_rrc_box(box, width, height, spec->scale, spec->ratio, g);
        axis_set(&out->x, box[0], box[2], spec->out_w, 0, spec->out_w);
        axis_set(&out->y, box[1], box[3], spec->out_h, 0, spec->out_h);
    } else if (spec->mode == IMAGE_MODE_CENTER) {
        uint32_t rw, rh;
        resized_size(&rw, &rh, width, height, spec->resize);
        axis_set(&out->x, 0, width, rw, center_offset(rw, spec->out_w), spec->out_w);
        axis_set(&out->y, 0, height, rh, center_offset(rh, spec->out_h), spec->out_h);
    } else if (spec->mode == IMAGE_MODE_RESIZE) {
        axis_set(&out->x, 0, width, spec->out_w, 0, spec->out_w);
        axis_set(&out->y, 0, height, spec->out_h, 0, spec->out_h);
    } else {
        axis_set(&out->x, 0, width, width, 0, spec->out_w);
        axis_set(&out->y, 0, height, height, 0, spec->out_h);
    }
    /* Drawn after the box, as torchvision's transforms run in that order. */
    out->flip = spec->flip > 0 && image_rng_uniform(g) < spec->flip;
}
