/* Bilinear resampling with antialiasing, as torchvision's
 * F.resize(antialias=True) (and PIL's BILINEAR) computes it: each output
 * pixel is a normalised triangle-filter average of the source pixels within
 * `support` of its centre, the triangle widened by the downscale factor
 * (so a 2x reduction averages over 4 source pixels, not 2). Separable:
 * rows first, into a ring of int16 rows as many as the vertical filter
 * reads, then columns; in fixed point (below: within 1 of torchvision's
 * float result, the same bytes on every machine). Written here rather than
 * taken from a package: the crop, the partial (centre-crop) window of the
 * resized image, the flip and the CHW layout all fuse into the two passes,
 * and it must use torchvision's coefficients (libswscale and pixman use
 * other filters; README "Images"). */
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

/* Fixed point. The weights of each output pixel (torchvision's, computed
 * above in double and normalised) become integers that sum to exactly
 * 2^WEIGHT_BITS, none negative. The horizontal pass keeps FRAC_BITS below
 * the unit in int16 (at most 255 << 7 = 32640: the weights sum to one); the
 * vertical pass's sums (int16 rows times int16 weights) stay below
 * 32767 * 2^14 < 2^31. Both round to nearest, half up. Every error is far
 * below half a unit of the output (about 2^-15 of the range per weight,
 * 2^-8 of a unit between the passes), so an output pixel is torchvision's
 * float result rounded one way or the other: within 1 of it, as the float
 * resampler this replaced was, at about half its instructions (README
 * "Images"). And integer sums give the same pixels in any order: the plain
 * loops, the SSE2 and the SSSE3 ones agree bit for bit, on any machine
 * (tests/image/test_image.py compares them). */
enum { WEIGHT_BITS = 14, FRAC_BITS = 7 };
#define H_SHIFT (WEIGHT_BITS - FRAC_BITS)
#define V_SHIFT (WEIGHT_BITS + FRAC_BITS)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RESAMPLE_X86 1
#include <immintrin.h>
#else
#define RESAMPLE_X86 0
#endif

/* The n weights w of one output pixel (summing to 1) as integers summing
 * to 2^WEIGHT_BITS: the differences of the rounded running sums, so none is
 * negative and each is within 1 of w * 2^14. Weights that sum to 0 (no
 * source pixel within reach) stay 0. */
static void quantize(int16_t *q, const float *w, uint32_t n)
{
    double total = 0, run = 0;
    for (uint32_t k = 0; k < n; k++)
        total += w[k];
    long prev = 0;
    for (uint32_t k = 0; k < n; k++) {
        run += w[k];
        long cur = total <= 0   ? 0
                   : k + 1 == n ? 1L << WEIGHT_BITS
                                : lround(run / total * (1 << WEIGHT_BITS));
        assert(cur >= prev && cur - prev <= 1 << WEIGHT_BITS);
        q[k] = (int16_t)(cur - prev);
        prev = cur;
    }
}

static inline int16_t sat16(int32_t v)
{
    return (int16_t)(v < -32768 ? -32768 : v > 32767 ? 32767 : v);
}

static inline uint8_t satu8(int32_t v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The horizontal weights in output order (the flip is applied here, once):
 * n taps for every output pixel (the widest span's, rounded up to even; the
 * others' extra taps weigh 0), source pixel lo[o] first. */
typedef struct hcoefs {
    uint32_t n;
    const uint32_t *lo;
    const int16_t *w; /* n per output pixel */
    const void *wv;   /* x86 RGB: n / 2 vectors (w[k], w[k + 1]) x 4 a pixel, for pmaddwd */
} hcoefs;

/* Output pixel o (C values at dst). */
static inline void hpixel_plain(int16_t *restrict dst, const uint8_t *restrict row, const hcoefs *h,
                                uint32_t o, uint32_t C)
{
    const int16_t *w = h->w + (size_t)o * h->n;
    const uint8_t *p = row + (size_t)C * h->lo[o];
    for (uint32_t c = 0; c < C; c++) {
        int32_t a = 1 << (H_SHIFT - 1);
        for (uint32_t k = 0; k < h->n; k++)
            a += w[k] * p[(size_t)C * k + c];
        dst[c] = sat16(a >> H_SHIFT);
    }
}

/* One region row (C bytes a pixel; zeros past the last column read, so
 * that padded taps read something) through the horizontal weights into an
 * int16 row of OW pixels of C values. The plain loops. */
static void hpass_plain(int16_t *restrict dst, const uint8_t *restrict row, const hcoefs *h,
                        uint32_t OW, uint32_t C)
{
    for (uint32_t o = 0; o < OW; o++)
        hpixel_plain(dst + (size_t)C * o, row, h, o, C);
}

/* Output row i of the vertical pass: V values, each the sum over the n
 * rows t[k] weighted by w[k], from value `from` on. The plain loop. */
static void vpass_plain(uint8_t *restrict dst, const int16_t *const *t, const int16_t *w,
                        uint32_t n, uint32_t from, uint32_t V)
{
    for (uint32_t i = from; i < V; i++) {
        int32_t a = 1 << (V_SHIFT - 1);
        for (uint32_t k = 0; k < n; k++)
            a += w[k] * t[k][i];
        dst[i] = satu8(a >> V_SHIFT);
    }
}

#if RESAMPLE_X86
/* SSSE3: RGB rows, two output pixels at a time, two taps of a pixel per
 * pmaddwd (pshufb puts the two neighbours' reds, greens and blues side by
 * side as int16). Each output pair is one 16-byte store of which the last
 * 4 bytes are overwritten by the next (rows have room for them). */
__attribute__((target("ssse3"), always_inline)) static inline void
hpass_rgb_np(int16_t *restrict dst, const uint8_t *restrict row, const hcoefs *h, uint32_t OW,
             uint32_t np)
{
    const __m128i pairs = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i pack = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, -1, -1, -1, -1);
    const __m128i rnd = _mm_set1_epi32(1 << (H_SHIFT - 1));
    const __m128i *wv = h->wv;
    uint32_t o = 0;
    for (; o + 2 <= OW; o += 2) {
        const uint8_t *p0 = row + 3 * (size_t)h->lo[o], *p1 = row + 3 * (size_t)h->lo[o + 1];
        const __m128i *w0 = wv + (size_t)o * np, *w1 = w0 + np;
        __m128i a0 = rnd, a1 = rnd;
        for (uint32_t q = 0; q < np; q++) {
            __m128i x0 = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(p0 + 6 * q)), pairs);
            __m128i x1 = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(p1 + 6 * q)), pairs);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(x0, w0[q]));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(x1, w1[q]));
        }
        __m128i v = _mm_packs_epi32(_mm_srai_epi32(a0, H_SHIFT), _mm_srai_epi32(a1, H_SHIFT));
        _mm_storeu_si128((__m128i *)(dst + 3 * (size_t)o), _mm_shuffle_epi8(v, pack));
    }
    if (o < OW)
        hpixel_plain(dst + 3 * (size_t)o, row, h, o, 3);
}

/* Inlined with the pair count a constant for the usual ones (2 to 8 taps:
 * a downscale by s takes about 2s + 1), so the tap loop unrolls whole. */
__attribute__((target("ssse3"))) static void hpass_rgb_ssse3(int16_t *restrict dst,
                                                              const uint8_t *restrict row,
                                                              const hcoefs *h, uint32_t OW)
{
    switch (h->n / 2) {
    case 1:
        hpass_rgb_np(dst, row, h, OW, 1);
        break;
    case 2:
        hpass_rgb_np(dst, row, h, OW, 2);
        break;
    case 3:
        hpass_rgb_np(dst, row, h, OW, 3);
        break;
    case 4:
        hpass_rgb_np(dst, row, h, OW, 4);
        break;
    default:
        hpass_rgb_np(dst, row, h, OW, h->n / 2);
    }
}

/* SSE2 (every x86-64): 16 values at a time, two rows per pmaddwd (the two
 * rows' values interleaved, times (w[k], w[k + 1]) pairs in wv), summed in
 * four independent registers. */
static void vpass_sse2(uint8_t *restrict dst, const int16_t *const *t, const int16_t *w,
                       const __m128i *wv, uint32_t n, uint32_t V)
{
    const __m128i rnd = _mm_set1_epi32(1 << (V_SHIFT - 1)), z = _mm_setzero_si128();
    uint32_t i = 0;
    for (; i + 16 <= V; i += 16) {
        __m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        uint32_t k = 0;
        for (; k + 2 <= n; k += 2) {
            const __m128i wk = wv[k / 2];
            __m128i x0 = _mm_loadu_si128((const __m128i *)(t[k] + i));
            __m128i y0 = _mm_loadu_si128((const __m128i *)(t[k + 1] + i));
            __m128i x1 = _mm_loadu_si128((const __m128i *)(t[k] + i + 8));
            __m128i y1 = _mm_loadu_si128((const __m128i *)(t[k + 1] + i + 8));
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(x0, y0), wk));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(x0, y0), wk));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(x1, y1), wk));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(x1, y1), wk));
        }
        if (k < n) { /* an odd last row, paired with zeros */
            const __m128i wk = wv[k / 2];
            __m128i x0 = _mm_loadu_si128((const __m128i *)(t[k] + i));
            __m128i x1 = _mm_loadu_si128((const __m128i *)(t[k] + i + 8));
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(x0, z), wk));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(x0, z), wk));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(x1, z), wk));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(x1, z), wk));
        }
        __m128i lo = _mm_packs_epi32(_mm_srai_epi32(a0, V_SHIFT), _mm_srai_epi32(a1, V_SHIFT));
        __m128i hi = _mm_packs_epi32(_mm_srai_epi32(a2, V_SHIFT), _mm_srai_epi32(a3, V_SHIFT));
        _mm_storeu_si128((__m128i *)(dst + i), _mm_packus_epi16(lo, hi));
    }
    vpass_plain(dst, t, w, n, i, V);
}

static int have_ssse3(void)
{
    return __builtin_cpu_supports("ssse3");
}
#endif

#if RESAMPLE_X86
/* SSSE3: 16 RGB pixels (48 bytes) to 16 bytes of each plane, each plane's
 * bytes gathered from the three loads by pshufb and or-ed. */
__attribute__((target("ssse3"))) static uint32_t planes_rgb_ssse3(uint8_t *restrict r,
                                                                  uint8_t *restrict g,
                                                                  uint8_t *restrict b,
                                                                  const uint8_t *restrict line,
                                                                  uint32_t OW)
{
#define X -1
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, X, X, X, X, X, X, X, X, X, X);
    const __m128i rb = _mm_setr_epi8(X, X, X, X, X, X, 2, 5, 8, 11, 14, X, X, X, X, X);
    const __m128i rc = _mm_setr_epi8(X, X, X, X, X, X, X, X, X, X, X, 1, 4, 7, 10, 13);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, X, X, X, X, X, X, X, X, X, X, X);
    const __m128i gb = _mm_setr_epi8(X, X, X, X, X, 0, 3, 6, 9, 12, 15, X, X, X, X, X);
    const __m128i gc = _mm_setr_epi8(X, X, X, X, X, X, X, X, X, X, X, 2, 5, 8, 11, 14);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, X, X, X, X, X, X, X, X, X, X, X);
    const __m128i bb = _mm_setr_epi8(X, X, X, X, X, 1, 4, 7, 10, 13, X, X, X, X, X, X);
    const __m128i bc = _mm_setr_epi8(X, X, X, X, X, X, X, X, X, X, 0, 3, 6, 9, 12, 15);
#undef X
    uint32_t o = 0;
    for (; o + 16 <= OW; o += 16) {
        const __m128i *p = (const __m128i *)(line + 3 * (size_t)o);
        __m128i a = _mm_loadu_si128(p), bv = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2);
#define GATHER(ma, mb, mc)                                                                         \
    _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ma), _mm_shuffle_epi8(bv, mb)),                  \
                 _mm_shuffle_epi8(c, mc))
        _mm_storeu_si128((__m128i *)(r + o), GATHER(ra, rb, rc));
        _mm_storeu_si128((__m128i *)(g + o), GATHER(ga, gb, gc));
        _mm_storeu_si128((__m128i *)(b + o), GATHER(ba, bb, bc));
#undef GATHER
    }
    return o;
}
#endif

/* Output row j (C values a pixel, already flipped) to its place in `out`. */
static void store_line(uint8_t *restrict out, const uint8_t *restrict line, uint32_t j, uint32_t OW,
                       uint32_t OH, uint32_t C, int chw, int simd_rgb)
{
    if (!chw || C == 1) {
        memcpy(out + (size_t)j * OW * C, line, (size_t)OW * C);
        return;
    }
    assert(C <= 3);
    uint8_t *restrict dst[3];
    for (uint32_t c = 0; c < C; c++)
        dst[c] = out + ((size_t)c * OH + j) * OW;
    uint32_t from = 0;
#if RESAMPLE_X86
    if (simd_rgb)
        from = planes_rgb_ssse3(dst[0], dst[1], dst[2], line, OW);
#else
    (void)simd_rgb;
#endif
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t o = from; o < OW; o++)
            dst[c][o] = line[(size_t)C * o + c];
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
    /* The SIMD loops: x86-64 (SSE2; SSSE3 for RGB rows), unless a test asks
     * for the plain ones to compare them. */
    int simd = 0, simd_rgb = 0;
#if RESAMPLE_X86
    simd = !s->portable;
    simd_rgb = simd && C == 3 && have_ssse3();
#else
    (void)simd;
#endif
    size_t wx_cap = axis_weight_cap(&plan->x), wy_cap = axis_weight_cap(&plan->y);
    /* Horizontal taps per output pixel: at most 2 * ceil(support) + 2 (as
     * axis_weight_cap), an even number. */
    const size_t taps_cap = wx_cap / OW;
    assert(taps_cap % 2 == 0);
    size_t coef_bytes = (size_t)OW * (taps_cap / 2) * 16 + (OW + OH) * sizeof(coef_span) +
                        (wx_cap + wy_cap) * sizeof(float) +
                        ((size_t)OW * taps_cap + wy_cap) * sizeof(int16_t) +
                        (size_t)OW * sizeof(uint32_t);
    int rc;
    if ((rc = image_grow(&s->coef, &s->coef_cap, coef_bytes)))
        return rc;
    /* The 16-byte weight pairs first: realloc's block is 16-byte aligned. */
    uint8_t *wv = s->coef;
    coef_span *sx = (coef_span *)(wv + (size_t)OW * (taps_cap / 2) * 16), *sy = sx + OW;
    float *wx = (float *)(sy + OH), *wy = wx + wx_cap;
    int16_t *wxi = (int16_t *)(wy + wy_cap), *wyi = wxi + (size_t)OW * taps_cap;
    uint32_t *lofix = (uint32_t *)(wyi + wy_cap);
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
    const uint32_t NX = (axis_taps(sx, OW) + 1) & ~1u, NY = axis_taps(sy, OH);
    assert(NX <= taps_cap);
    for (uint32_t o = 0; o < OW; o++) {
        /* Output pixel o is pixel i of the resized row (flipped: from the right). */
        uint32_t i = plan->flip ? OW - 1 - o : o;
        /* A pixel outside the resized image reads column c0 with weight 0. */
        lofix[o] = sx[i].n ? sx[i].lo : c0;
        int16_t *q = wxi + (size_t)o * NX;
        memset(q, 0, NX * sizeof *q);
        quantize(q, wx + sx[i].w_at, sx[i].n);
#if RESAMPLE_X86
        for (uint32_t k = 0; simd_rgb && k < NX; k += 2)
            _mm_store_si128((__m128i *)wv + ((size_t)o * NX + k) / 2,
                            _mm_set1_epi32((int32_t)((uint32_t)(uint16_t)q[k] |
                                                     (uint32_t)(uint16_t)q[k + 1] << 16)));
#endif
    }
    for (uint32_t j = 0; j < OH; j++)
        quantize(wyi + sy[j].w_at, wy + sy[j].w_at, sy[j].n);
    const hcoefs hc = {NX, lofix, wxi, wv};
    /* tmp: the vertical weight pairs of one output row (16 bytes each), the
     * NY row pointers of its taps, a ring of NY horizontally resampled rows
     * (the vertical pass reads at most NY consecutive rows, in increasing
     * order: span starts grow with j; each row C * OW int16 and 8 more, for
     * the SIMD's overlapping stores), one output row (line), and the
     * current region row (rowp: C bytes a pixel up to column c1 + NX, then
     * zeros, and 8 more for the SIMD's 8-byte loads). A few tens of kB: in
     * cache. */
    const size_t stride = (size_t)C * OW + 8, rowp_len = (size_t)C * (c1 + NX) + 8;
    const size_t line_len = (size_t)C * OW + 16;
    size_t tmp_bytes = ((size_t)NY / 2 + 1) * 16 + (size_t)NY * sizeof(int16_t *) +
                       (size_t)NY * stride * sizeof(int16_t) + line_len + rowp_len;
    if ((rc = image_grow(&s->tmp, &s->tmp_cap, tmp_bytes)))
        return rc;
    uint8_t *vw = s->tmp;
    const int16_t **taps = (const int16_t **)(vw + ((size_t)NY / 2 + 1) * 16);
    int16_t *ring = (int16_t *)(taps + NY);
    uint8_t *line = (uint8_t *)(ring + (size_t)NY * stride), *rowp = line + line_len;
    memset(rowp + (size_t)C * c1, 0, rowp_len - (size_t)C * c1);
    uint32_t have_lo = 0, have_hi = 0; /* region rows [have_lo, have_hi) are in the ring */
    for (uint32_t j = 0; j < OH; j++) {
        const coef_span *sp = &sy[j];
        if (!sp->n) { /* outside the resized image (a centre crop larger than it): 0 */
            memset(line, 0, (size_t)C * OW);
            store_line(out, line, j, OW, OH, C, chw, simd_rgb);
            continue;
        }
        uint32_t need_hi = sp->lo + sp->n;
        if (sp->lo < have_lo || sp->lo > have_hi) /* not contiguous with what is held */
            have_lo = have_hi = sp->lo;
        for (uint32_t r = have_hi; r < need_hi; r++) {
            memcpy(rowp + (size_t)C * c0, src->pix + (size_t)r * src->stride + (size_t)C * c0,
                   (size_t)C * (c1 - c0));
            int16_t *dst = ring + (size_t)(r % NY) * stride;
#if RESAMPLE_X86
            if (simd_rgb) {
                hpass_rgb_ssse3(dst, rowp, &hc, OW);
                continue;
            }
#endif
            hpass_plain(dst, rowp, &hc, OW, C);
        }
        have_hi = need_hi > have_hi ? need_hi : have_hi;
        if (have_hi - have_lo > NY)
            have_lo = have_hi - NY;
        for (uint32_t k = 0; k < sp->n; k++)
            taps[k] = ring + (size_t)((sp->lo + k) % NY) * stride;
        const int16_t *w = wyi + sp->w_at;
#if RESAMPLE_X86
        if (simd) {
            for (uint32_t k = 0; k < sp->n; k += 2) {
                uint32_t hi = k + 1 < sp->n ? (uint16_t)w[k + 1] : 0; /* an odd last: (w, 0) */
                uint32_t pair = (uint16_t)w[k] | hi << 16;
                _mm_store_si128((__m128i *)vw + k / 2, _mm_set1_epi32((int32_t)pair));
            }
            vpass_sse2(line, taps, w, (const __m128i *)vw, sp->n, C * OW);
            store_line(out, line, j, OW, OH, C, chw, simd_rgb);
            continue;
        }
#endif
        vpass_plain(line, taps, w, sp->n, 0, C * OW);
        store_line(out, line, j, OW, OH, C, chw, simd_rgb);
    }
    return 0;
}
