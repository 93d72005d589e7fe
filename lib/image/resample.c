/* Bilinear resampling with antialiasing, as torchvision's
 * F.resize(antialias=True) (and PIL's BILINEAR) computes it: each output
 * pixel is a normalised triangle-filter average of the source pixels within
 * `support` of its centre, the triangle widened by the downscale factor
 * (so a 2x reduction averages over 4 source pixels, not 2). Separable:
 * rows first (into float), then columns; rounded half to even at the end,
 * as torch's round() does. Written here rather than taken from a package:
 * the crop, the partial (centre-crop) window of the resized image, the
 * flip and the CHW layout all fuse into the two passes, and it must agree
 * with torchvision's coefficients exactly (libswscale and pixman use other
 * filters; README "Images"). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "image.h"

/* The weights of one output pixel: source pixels [lo, lo + n). */
typedef struct coef_span {
    uint32_t lo, n;
    uint32_t w_at; /* index of its first weight in the weight array */
} coef_span;

static double axis_scale(const image_axis *a)
{
    return a->len / (double)a->dst;
}

static double axis_support(const image_axis *a)
{
    double s = axis_scale(a);
    return s >= 1.0 ? s : 1.0; /* the triangle's support is 1 source pixel, times the downscale */
}

/* The interval of source pixels the axis may read: its box, inside the image. */
static void axis_clamp(const image_axis *a, uint32_t size, int64_t *lo, int64_t *hi)
{
    *lo = (int64_t)floor(a->x0);
    *hi = (int64_t)ceil(a->x0 + a->len);
    if (*lo < 0)
        *lo = 0;
    if (*hi > (int64_t)size)
        *hi = size;
    if (*hi < *lo)
        *hi = *lo;
}

/* Source bounds of destination pixel u (torch's _compute_indices_weights_aa). */
static void pixel_bounds(const image_axis *a, int64_t u, int64_t clo, int64_t chi, int64_t *lo,
                         int64_t *hi, double *center)
{
    double support = axis_support(a);
    *center = a->x0 + ((double)u + 0.5) * axis_scale(a);
    *lo = (int64_t)(*center - support + 0.5);
    *hi = (int64_t)(*center + support + 0.5);
    if (*lo < clo)
        *lo = clo;
    if (*hi > chi)
        *hi = chi;
    if (*hi < *lo)
        *hi = *lo;
}

/* Whether output pixel i of the axis falls inside the resized image. */
static int axis_inside(const image_axis *a, uint32_t i)
{
    int64_t u = a->off + (int64_t)i;
    return u >= 0 && u < (int64_t)a->dst;
}

void image_axis_span(const image_axis *a, uint32_t size, uint32_t *lo, uint32_t *hi)
{
    int64_t clo, chi, mn = INT64_MAX, mx = INT64_MIN;
    axis_clamp(a, size, &clo, &chi);
    for (uint32_t i = 0; i < a->out; i++) {
        if (!axis_inside(a, i))
            continue;
        int64_t l, h;
        double c;
        pixel_bounds(a, a->off + (int64_t)i, clo, chi, &l, &h, &c);
        if (l < mn)
            mn = l;
        if (h > mx)
            mx = h;
    }
    if (mn == INT64_MAX || mx <= mn) {
        *lo = *hi = 0;
        return;
    }
    *lo = (uint32_t)mn;
    *hi = (uint32_t)mx;
}

/* The weights of every output pixel of axis a over source interval
 * [0, size), relative to region start `base`: spans[i], weights in w.
 * An output pixel outside the resized image gets n = 0 (it stays 0). */
static void axis_coefs(const image_axis *a, uint32_t size, uint32_t base, coef_span *spans,
                       float *w)
{
    int64_t clo, chi;
    axis_clamp(a, size, &clo, &chi);
    double inv = 1.0 / axis_support(a);
    uint32_t at = 0;
    for (uint32_t i = 0; i < a->out; i++) {
        spans[i] = (coef_span){0, 0, at};
        if (!axis_inside(a, i))
            continue;
        int64_t lo, hi;
        double center;
        pixel_bounds(a, a->off + (int64_t)i, clo, chi, &lo, &hi, &center);
        double sum = 0;
        for (int64_t k = lo; k < hi; k++) {
            double x = fabs(((double)k - center + 0.5) * inv);
            double t = x < 1.0 ? 1.0 - x : 0.0;
            w[at + (uint32_t)(k - lo)] = (float)t;
            sum += t;
        }
        for (int64_t k = lo; k < hi && sum != 0.0; k++)
            w[at + (uint32_t)(k - lo)] = (float)(w[at + (uint32_t)(k - lo)] / sum);
        spans[i].lo = (uint32_t)(lo - base);
        spans[i].n = (uint32_t)(hi - lo);
        at += spans[i].n;
    }
}

/* The most weights axis a needs: per output pixel at most 2 * ceil(support) + 1. */
static size_t axis_weight_cap(const image_axis *a)
{
    return (size_t)a->out * (2 * (size_t)ceil(axis_support(a)) + 2);
}

/* Rounds half to even (as torch's round()) and clamps to 0..255: adding and
 * subtracting 1.5 * 2^23 leaves the nearest integer in the default rounding
 * mode, without a libm call, so the loop vectorises. */
static inline uint8_t to_u8(float v)
{
    /* Round in float, clamp in integers: no float comparison (which GCC
     * will not if-convert without -ffast-math), so the store loop
     * vectorises. |v| stays far below 2^22 (weights sum to 1). */
    int i = (int)((v + 12582912.0f) - 12582912.0f);
    i = i < 0 ? 0 : i;
    return (uint8_t)(i > 255 ? 255 : i);
}

/* Four floats in one SSE register (GCC and clang vector extensions): an RGB
 * pixel and a pad lane, so each filter tap is one multiply-add. */
typedef float v4f __attribute__((vector_size(16)));

/* One region row through the horizontal weights into the C planes of tmp
 * (row r of each plane, OW floats; planes `plane` floats apart). rowf: room
 * for the row as float pixels. */
static void resample_row(float *restrict tmp, size_t plane, const uint8_t *restrict row,
                         uint32_t x0, uint32_t x1, const coef_span *sx, const float *restrict wx,
                         uint32_t OW, uint32_t C, int flip, v4f *restrict rowf)
{
    if (C == 3) {
        for (uint32_t x = x0; x < x1; x++) /* only the columns some tap reads */
            rowf[x] = (v4f){(float)row[3 * x], (float)row[3 * x + 1], (float)row[3 * x + 2], 0.0f};
        for (uint32_t i = 0; i < OW; i++) {
            const float *wk = wx + sx[i].w_at;
            const v4f *p = rowf + sx[i].lo;
            v4f acc = {0, 0, 0, 0};
            for (uint32_t k = 0; k < sx[i].n; k++)
                acc += wk[k] * p[k];
            uint32_t o = flip ? OW - 1 - i : i; /* the flip happens here, once */
            tmp[o] = acc[0];
            tmp[plane + o] = acc[1];
            tmp[2 * plane + o] = acc[2];
        }
        return;
    }
    for (uint32_t i = 0; i < OW; i++) {
        const float *wk = wx + sx[i].w_at;
        const uint8_t *p = row + sx[i].lo;
        float a = 0;
        for (uint32_t k = 0; k < sx[i].n; k++)
            a += wk[k] * (float)p[k];
        tmp[flip ? OW - 1 - i : i] = a;
    }
}

/* Output row j of one plane from its horizontally resampled rows: acc = sum
 * of w[k] * row (lo + k), whole rows at once (contiguous: vectorised). */
static void resample_column(float *restrict acc, const float *restrict rows, const coef_span *sp,
                            const float *restrict wy, uint32_t OW)
{
    const float *w = wy + sp->w_at;
    for (uint32_t i = 0; i < OW; i++)
        acc[i] = 0;
    for (uint32_t k = 0; k < sp->n; k++) {
        const float *restrict t = rows + (size_t)(sp->lo + k) * OW;
        const float wk = w[k];
        for (uint32_t i = 0; i < OW; i++)
            acc[i] += wk * t[i];
    }
}

/* Writes channel c of output row j (acc: OW floats, already flipped)
 * rounded and laid out. Pixels outside the resized image (a centre crop
 * larger than it) are 0. */
static void store_row(uint8_t *restrict out, float *restrict acc, const coef_span *sx, uint32_t j,
                      uint32_t c, uint32_t OW, uint32_t OH, uint32_t C, int flip, int chw,
                      int row_inside, int padded)
{
    for (uint32_t i = 0; padded && i < OW; i++)
        if (!row_inside || !sx[flip ? OW - 1 - i : i].n)
            acc[i] = 0;
    if (chw) {
        uint8_t *dst = out + ((size_t)c * OH + j) * OW;
        for (uint32_t i = 0; i < OW; i++)
            dst[i] = to_u8(acc[i]);
        return;
    }
    uint8_t *dst = out + (size_t)j * OW * C + c;
    for (uint32_t i = 0; i < OW; i++)
        dst[(size_t)i * C] = to_u8(acc[i]);
}

int image_grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    void *q = realloc(*p, need);
    if (!q)
        return sf_fail(-ENOMEM, "out of memory for a %zu-byte image buffer", need);
    *p = q;
    *cap = need;
    return 0;
}

void image_scratch_free(image_scratch *s)
{
    free(s->pix);
    free(s->tmp);
    free(s->coef);
    memset(s, 0, sizeof *s);
}

int image_resample(uint8_t *out, const image_plan *plan, const image_region *src, uint32_t channels,
                   int chw, image_scratch *s)
{
    const uint32_t C = channels, OW = plan->x.out, OH = plan->y.out;
    size_t wx_cap = axis_weight_cap(&plan->x), wy_cap = axis_weight_cap(&plan->y);
    size_t coef_bytes = (OW + OH) * sizeof(coef_span) + (wx_cap + wy_cap) * sizeof(float);
    /* The planes and an output row (rounded up to 4 floats: rowf is 16-byte
     * aligned after them), and a region row of 4-float pixels. */
    size_t tmp_bytes = (((size_t)src->h * OW * C + OW + 3u) & ~(size_t)3u) * sizeof(float) +
                       (size_t)src->w * sizeof(v4f);
    int rc;
    if ((rc = image_grow(&s->coef, &s->coef_cap, coef_bytes)) ||
        (rc = image_grow((void **)&s->tmp, &s->tmp_cap, tmp_bytes ? tmp_bytes : 1)))
        return rc;
    coef_span *sx = s->coef, *sy = sx + OW;
    float *wx = (float *)(sy + OH), *wy = wx + wx_cap;
    /* The region holds image pixels [x0, x0 + w): coefficients are relative to it. */
    axis_coefs(&plan->x, src->x0 + src->w, src->x0, sx, wx);
    axis_coefs(&plan->y, src->y0 + src->h, src->y0, sy, wy);
    /* Rows: every region row to OW float pixels, one plane per channel;
     * then columns, rounded, flipped and laid out. tmp holds the planes,
     * one output row (acc) and one region row as float pixels (rowf). */
    size_t plane = (size_t)src->h * OW;
    float *tmp = s->tmp, *acc = tmp + plane * C;
    /* 16-byte aligned: realloc's block is, and the offset is a multiple of 4 floats. */
    v4f *rowf = (v4f *)(tmp + ((plane * C + OW + 3u) & ~(size_t)3u));
    /* Only the rows and columns some tap reads (the region may hold a
     * decoder's margin around them). */
    uint32_t r0 = src->h, r1 = 0, c0 = src->w, c1 = 0;
    for (uint32_t j = 0; j < OH; j++)
        if (sy[j].n) {
            r0 = sy[j].lo < r0 ? sy[j].lo : r0;
            r1 = sy[j].lo + sy[j].n > r1 ? sy[j].lo + sy[j].n : r1;
        }
    for (uint32_t i = 0; i < OW; i++)
        if (sx[i].n) {
            c0 = sx[i].lo < c0 ? sx[i].lo : c0;
            c1 = sx[i].lo + sx[i].n > c1 ? sx[i].lo + sx[i].n : c1;
        }
    for (uint32_t r = r0; r < r1; r++)
        resample_row(tmp + (size_t)r * OW, plane, src->pix + (size_t)r * src->stride, c0, c1, sx, wx,
                     OW, C, plan->flip, rowf);
    /* Whether some output pixel lies outside the resized image (zero padding). */
    int padded = plan->x.off < 0 || plan->x.off + plan->x.out > plan->x.dst || plan->y.off < 0 ||
                 plan->y.off + plan->y.out > plan->y.dst;
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t j = 0; j < OH; j++) {
            resample_column(acc, tmp + c * plane, &sy[j], wy, OW);
            store_row(out, acc, sx, j, c, OW, OH, C, plan->flip, chw, sy[j].n != 0, padded);
        }
    return 0;
}
