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
#include <assert.h>
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
 * pixel and a lane that is ignored, so each filter tap is one multiply-add. */
typedef float v4f __attribute__((vector_size(16)));

/* Four floats from p (any float alignment). In the horizontal pass: an RGB
 * pixel of a row of 3-float pixels, and the next pixel's red in the lane
 * that is ignored. */
static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The horizontal weights in a fixed number of taps per output pixel (the
 * widest span's; the rest zero), so four output pixels are summed side by
 * side: four independent chains of multiply-adds, not one whose adds wait
 * on each other (the add's latency was most of the horizontal pass). A zero
 * weight adds +0.0: each sum, and so each pixel, is the same as over the
 * span alone. For RGB each weight is kept in all four lanes (no broadcast
 * per tap). */
typedef struct row_taps {
    uint32_t n;         /* taps per output pixel */
    const uint32_t *lo; /* first source pixel of output pixel i (region coordinates) */
    const float *w;     /* n weights per output pixel (gray) */
    const v4f *w4;      /* the same, each in four lanes (RGB) */
} row_taps;

/* Output pixels i..i+3 of an RGB row, n taps each, to the three planes.
 * Inlined with n a constant for the usual tap counts (see resample_row),
 * so the tap loop unrolls whole. */
static inline __attribute__((always_inline)) void rgb_block4(float *restrict dst, size_t plane,
                                                             const float *restrict rowf,
                                                             const row_taps *t, uint32_t i,
                                                             uint32_t OW, int flip, uint32_t n)
{
    const v4f *w0 = t->w4 + (size_t)i * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    const float *p0 = rowf + 3 * (size_t)t->lo[i], *p1 = rowf + 3 * (size_t)t->lo[i + 1],
                *p2 = rowf + 3 * (size_t)t->lo[i + 2], *p3 = rowf + 3 * (size_t)t->lo[i + 3];
    v4f a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    for (uint32_t k = 0; k < n; k++) {
        a0 += w0[k] * load4(p0 + 3 * k);
        a1 += w1[k] * load4(p1 + 3 * k);
        a2 += w2[k] * load4(p2 + 3 * k);
        a3 += w3[k] * load4(p3 + 3 * k);
    }
    const v4f a[4] = {a0, a1, a2, a3};
    for (uint32_t q = 0; q < 4; q++) {
        uint32_t o = flip ? OW - 1 - (i + q) : i + q; /* the flip happens here, once */
        dst[o] = a[q][0];
        dst[plane + o] = a[q][1];
        dst[2 * plane + o] = a[q][2];
    }
}

/* One region row (converted to float in rowf: C floats a pixel, followed by
 * zeros where a padded tap reads past the last used column) through the
 * horizontal weights into row r of the C planes at `dst` (OW floats each,
 * `plane` floats apart), flipped if asked. */
static void resample_row(float *restrict dst, size_t plane, const float *restrict rowf,
                         const row_taps *t, uint32_t OW, uint32_t C, int flip)
{
    const uint32_t n = t->n;
    uint32_t i = 0;
    if (C == 3) {
        /* A downscale by s takes about 2s + 1 taps: 2 to 4 from the DCT-scaled
         * crops of RandomResizedCrop, more for larger reductions. */
        switch (n) {
#define RGB_TAPS(N)                                                                                \
    case N:                                                                                        \
        for (; i + 4 <= OW; i += 4)                                                                \
            rgb_block4(dst, plane, rowf, t, i, OW, flip, N);                                       \
        break;
            RGB_TAPS(2)
            RGB_TAPS(3)
            RGB_TAPS(4)
            RGB_TAPS(5)
            RGB_TAPS(6)
#undef RGB_TAPS
        default:
            for (; i + 4 <= OW; i += 4)
                rgb_block4(dst, plane, rowf, t, i, OW, flip, n);
        }
        for (; i < OW; i++) {
            const v4f *wk = t->w4 + (size_t)i * n;
            const float *p = rowf + 3 * (size_t)t->lo[i];
            v4f a = {0, 0, 0, 0};
            for (uint32_t k = 0; k < n; k++)
                a += wk[k] * load4(p + 3 * k);
            uint32_t o = flip ? OW - 1 - i : i;
            dst[o] = a[0];
            dst[plane + o] = a[1];
            dst[2 * plane + o] = a[2];
        }
        return;
    }
    for (; i < OW; i++) {
        const float *wk = t->w + (size_t)i * n, *p = rowf + t->lo[i];
        float a = 0;
        for (uint32_t k = 0; k < n; k++)
            a += wk[k] * p[k];
        dst[flip ? OW - 1 - i : i] = a;
    }
}

/* Output row j of one plane from its horizontally resampled rows: acc = sum
 * of w[k] * row (lo + k). Eight output pixels at a time are summed over
 * every tap in registers (two vectors: independent chains), so acc is
 * written once, not read and written again per tap. Rows live in a ring of
 * `ring` rows: row r at slot r % ring, `stride` floats apart. */
static void resample_column(float *restrict acc, const float *restrict rows, size_t stride,
                            uint32_t ring, const coef_span *sp, const float *restrict wy, uint32_t OW)
{
    enum { MAX_TAPS = 64 };
    const float *w = wy + sp->w_at;
    const float *t[MAX_TAPS];
    uint32_t n = sp->n;
    if (n > MAX_TAPS) { /* a reduction over 32x: rare, the plain loop */
        for (uint32_t i = 0; i < OW; i++)
            acc[i] = 0;
        for (uint32_t k = 0; k < n; k++) {
            const float *restrict r = rows + (size_t)((sp->lo + k) % ring) * stride;
            for (uint32_t i = 0; i < OW; i++)
                acc[i] += w[k] * r[i];
        }
        return;
    }
    for (uint32_t k = 0; k < n; k++)
        t[k] = rows + (size_t)((sp->lo + k) % ring) * stride;
    uint32_t i = 0;
    for (; i + 8 <= OW; i += 8) {
        v4f a0 = {0, 0, 0, 0}, a1 = a0;
        for (uint32_t k = 0; k < n; k++) {
            a0 += w[k] * load4(t[k] + i);
            a1 += w[k] * load4(t[k] + i + 4);
        }
        memcpy(acc + i, &a0, sizeof a0);
        memcpy(acc + i + 4, &a1, sizeof a1);
    }
    for (; i < OW; i++) {
        float a = 0;
        for (uint32_t k = 0; k < n; k++)
            a += w[k] * t[k][i];
        acc[i] = a;
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

/* The widest span of an axis: the most taps one output pixel takes. */
static uint32_t axis_taps(const coef_span *sp, uint32_t out)
{
    uint32_t n = 1;
    for (uint32_t i = 0; i < out; i++)
        n = sp[i].n > n ? sp[i].n : n;
    return n;
}

int image_resample(uint8_t *out, const image_plan *plan, const image_region *src, uint32_t channels,
                   int chw, image_scratch *s)
{
    const uint32_t C = channels, OW = plan->x.out, OH = plan->y.out;
    if (!OW || !OH)
        return 0;
    size_t wx_cap = axis_weight_cap(&plan->x), wy_cap = axis_weight_cap(&plan->y);
    /* Spans and weights of both axes, then the horizontal weights again in
     * fixed taps (at most 2 * ceil(support) + 2 each, as axis_weight_cap). */
    size_t taps_cap = wx_cap / OW;
    size_t coef_bytes = (size_t)OW * taps_cap * sizeof(v4f) + (OW + OH) * sizeof(coef_span) +
                        (wx_cap + wy_cap) * sizeof(float) + (size_t)OW * taps_cap * sizeof(float) +
                        (size_t)OW * sizeof(uint32_t);
    int rc;
    if ((rc = image_grow(&s->coef, &s->coef_cap, coef_bytes)))
        return rc;
    /* The four-lane weights first: realloc's block is 16-byte aligned. */
    v4f *wfix4 = s->coef;
    coef_span *sx = (coef_span *)(wfix4 + (size_t)OW * taps_cap), *sy = sx + OW;
    float *wx = (float *)(sy + OH), *wy = wx + wx_cap, *wfix = wy + wy_cap;
    uint32_t *lofix = (uint32_t *)(wfix + (size_t)OW * taps_cap);
    /* The region holds image pixels [x0, x0 + w): coefficients are relative to it. */
    axis_coefs(&plan->x, src->x0 + src->w, src->x0, sx, wx);
    axis_coefs(&plan->y, src->y0 + src->h, src->y0, sy, wy);
    /* Only the columns some tap reads (the region may hold a decoder's
     * margin around them). */
    uint32_t c0 = src->w, c1 = 0;
    for (uint32_t i = 0; i < OW; i++)
        if (sx[i].n) {
            c0 = sx[i].lo < c0 ? sx[i].lo : c0;
            c1 = sx[i].lo + sx[i].n > c1 ? sx[i].lo + sx[i].n : c1;
        }
    if (c1 <= c0)
        c0 = c1 = 0;
    const uint32_t NX = axis_taps(sx, OW), NY = axis_taps(sy, OH);
    assert(NX <= taps_cap);
    for (uint32_t i = 0; i < OW; i++) {
        /* A pixel outside the resized image reads column c0 with weight 0. */
        lofix[i] = sx[i].n ? sx[i].lo : c0;
        for (uint32_t k = 0; k < NX; k++) {
            float w = k < sx[i].n ? wx[sx[i].w_at + k] : 0.0f;
            wfix[(size_t)i * NX + k] = w;
            wfix4[(size_t)i * NX + k] = (v4f){w, w, w, w};
        }
    }
    const row_taps taps = {NX, lofix, wfix, wfix4};
    /* tmp: a ring of NY horizontally resampled rows (C planes of OW floats
     * each; the vertical pass reads at most NY consecutive rows, and rows
     * are needed in increasing order: span starts grow with j), one output
     * row (acc), and the current region row as floats (rowf: C floats a
     * pixel up to column c1 + NX, plus one for load4's ignored lane).
     * Small enough to stay in cache, where whole planes of the region did
     * not (about 0.8 MB for a 300-row crop). */
    const size_t stride = (size_t)C * OW, rowf_len = (size_t)C * (c1 + NX) + 1;
    size_t tmp_bytes = ((size_t)NY * stride + OW + rowf_len) * sizeof(float);
    if ((rc = image_grow((void **)&s->tmp, &s->tmp_cap, tmp_bytes)))
        return rc;
    float *ring = s->tmp, *acc = ring + (size_t)NY * stride, *rowf = acc + OW;
    /* Padded taps past c1 read zeros (finite: 0 * 0 adds nothing). */
    for (size_t q = (size_t)C * c1; q < rowf_len; q++)
        rowf[q] = 0.0f;
    /* Whether some output pixel lies outside the resized image (zero padding). */
    int padded = plan->x.off < 0 || plan->x.off + plan->x.out > plan->x.dst || plan->y.off < 0 ||
                 plan->y.off + plan->y.out > plan->y.dst;
    uint32_t have_lo = 0, have_hi = 0; /* region rows [have_lo, have_hi) are in the ring */
    for (uint32_t j = 0; j < OH; j++) {
        const coef_span *sp = &sy[j];
        if (sp->n) {
            uint32_t need_hi = sp->lo + sp->n;
            if (sp->lo < have_lo || sp->lo > have_hi) /* not contiguous with what is held */
                have_lo = have_hi = sp->lo;
            for (uint32_t r = have_hi; r < need_hi; r++) {
                const uint8_t *row = src->pix + (size_t)r * src->stride;
                for (size_t q = (size_t)C * c0; q < (size_t)C * c1; q++) /* vectorised */
                    rowf[q] = (float)row[q];
                resample_row(ring + (size_t)(r % NY) * stride, OW, rowf, &taps, OW, C, plan->flip);
            }
            have_hi = need_hi > have_hi ? need_hi : have_hi;
            if (have_hi - have_lo > NY)
                have_lo = have_hi - NY;
        }
        for (uint32_t c = 0; c < C; c++) {
            resample_column(acc, ring + (size_t)c * OW, stride, NY, sp, wy, OW);
            store_row(out, acc, sx, j, c, OW, OH, C, plan->flip, chw, sp->n != 0, padded);
        }
    }
    return 0;
}
