/* Copying and hashing in one pass (hash_copy.h). The names of XXH3's long
 * loop (xxhash.h, XXH3_hashLong_internal_loop) for the default 192-byte
 * secret: an input of L > 240 bytes is 64-byte stripes; stripe s < (L-1)/64
 * (the "regular" ones) is folded into the 8 accumulators with the secret at
 * 8 x (s mod 16), and after every 16th the accumulators are scrambled with
 * the secret's last 64 bytes; then the input's last 64 bytes (whole, even
 * where they overlap regular stripes) are folded with the secret at 121,
 * and the accumulators merged with the secret at 11. */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* XXH3's implementation, inlined here: its default secret (XXH3_kSecret)
 * and its short-input paths. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash_copy.h"
#include "le.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HC_X86 1
#else
#define HC_X86 0
#endif

#define STRIPE 64u
#define STRIPES_PER_BLOCK 16u /* (192 - 64) / 8 */
#define SECRET_SCRAMBLE 128u  /* 192 - 64 */
#define SECRET_LAST 121u      /* 192 - 64 - 7 */
#define SECRET_MERGE 11u
#define P32_1 0x9E3779B1u
#define P32_2 0x85EBCA77u
#define P32_3 0xC2B2AE3Du
#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

_Static_assert(sizeof XXH3_kSecret == 192, "XXH3's default secret is 192 bytes");

/* Copies n stripes from src to dst and folds them in as stripes first,
 * first + 1, ... (all regular). */
typedef void (*stripes_fn)(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t n,
                           uint64_t first);

/* ---- scalar (xxhash.h: XXH3_accumulate_512_scalar, XXH3_scrambleAcc_scalar) ---- */

static void fold_scalar(uint64_t *acc, const uint8_t *in, const uint8_t *secret)
{
    for (unsigned i = 0; i < 8; i++) {
        uint64_t v = sf_get_le64(in + 8 * i);
        uint64_t k = v ^ sf_get_le64(secret + 8 * i);
        acc[i ^ 1] += v;
        acc[i] += (k & 0xFFFFFFFFu) * (k >> 32);
    }
}

static void scramble_scalar(uint64_t *acc)
{
    for (unsigned i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= sf_get_le64(XXH3_kSecret + SECRET_SCRAMBLE + 8 * i);
        acc[i] = a * P32_1;
    }
}

static void stripes_scalar(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t n,
                           uint64_t first)
{
    unsigned k = (unsigned)(first % STRIPES_PER_BLOCK);
    for (size_t i = 0; i < n; i++) {
        memcpy(dst + STRIPE * i, src + STRIPE * i, STRIPE);
        fold_scalar(acc, dst + STRIPE * i, XXH3_kSecret + 8 * k);
        if (++k == STRIPES_PER_BLOCK) {
            k = 0;
            scramble_scalar(acc);
        }
    }
}

#if HC_X86
/* Whether a run of n stripes to dst is written around the caches
 * (non-temporal stores): long runs to 64-byte aligned memory, as glibc's
 * memcpy does at these sizes (rep movsb). A store that misses first reads
 * its line (read for ownership), a third more memory traffic for a copy
 * whose destination this thread does not read again: with them, 602 KB
 * records read with checksums at 0.82-0.88x the rate without; streamed,
 * at 1.02-1.10x (README "Checksums at the copy's speed"). */
#define STREAM_MIN_STRIPES 1024u /* 64 KiB */
static int streams(const uint8_t *dst, size_t n)
{
    return n >= STREAM_MIN_STRIPES && ((uintptr_t)dst & 63) == 0;
}

/* ---- AVX2 (xxhash.h: XXH3_accumulate_512_avx2): each stripe two halves,
 * loaded once, stored, folded from the registers ---- */

__attribute__((target("avx2"))) static void stripes_avx2(uint64_t *acc, uint8_t *dst,
                                                         const uint8_t *src, size_t n,
                                                         uint64_t first)
{
    const int stream = streams(dst, n);
    __m256i a0 = _mm256_loadu_si256((const __m256i *)acc);
    __m256i a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
    const __m256i prime = _mm256_set1_epi32((int)P32_1);
    const __m256i s0 = _mm256_loadu_si256((const __m256i *)(XXH3_kSecret + SECRET_SCRAMBLE));
    const __m256i s1 = _mm256_loadu_si256((const __m256i *)(XXH3_kSecret + SECRET_SCRAMBLE + 32));
    unsigned k = (unsigned)(first % STRIPES_PER_BLOCK);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *in = src + STRIPE * i;
        __m256i x0 = _mm256_loadu_si256((const __m256i *)in);
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(in + 32));
        if (stream) {
            _mm256_stream_si256((__m256i *)(dst + STRIPE * i), x0);
            _mm256_stream_si256((__m256i *)(dst + STRIPE * i + 32), x1);
        } else {
            _mm256_storeu_si256((__m256i *)(dst + STRIPE * i), x0);
            _mm256_storeu_si256((__m256i *)(dst + STRIPE * i + 32), x1);
        }
        const uint8_t *key = XXH3_kSecret + 8 * k;
        __m256i k0 = _mm256_xor_si256(x0, _mm256_loadu_si256((const __m256i *)key));
        __m256i k1 = _mm256_xor_si256(x1, _mm256_loadu_si256((const __m256i *)(key + 32)));
        __m256i p0 = _mm256_mul_epu32(k0, _mm256_shuffle_epi32(k0, _MM_SHUFFLE(0, 3, 0, 1)));
        __m256i p1 = _mm256_mul_epu32(k1, _mm256_shuffle_epi32(k1, _MM_SHUFFLE(0, 3, 0, 1)));
        a0 = _mm256_add_epi64(p0, _mm256_add_epi64(a0, _mm256_shuffle_epi32(x0, _MM_SHUFFLE(1, 0, 3, 2))));
        a1 = _mm256_add_epi64(p1, _mm256_add_epi64(a1, _mm256_shuffle_epi32(x1, _MM_SHUFFLE(1, 0, 3, 2))));
        if (++k == STRIPES_PER_BLOCK) {
            k = 0;
            __m256i d0 = _mm256_xor_si256(_mm256_xor_si256(a0, _mm256_srli_epi64(a0, 47)), s0);
            __m256i d1 = _mm256_xor_si256(_mm256_xor_si256(a1, _mm256_srli_epi64(a1, 47)), s1);
            __m256i h0 = _mm256_shuffle_epi32(d0, _MM_SHUFFLE(0, 3, 0, 1));
            __m256i h1 = _mm256_shuffle_epi32(d1, _MM_SHUFFLE(0, 3, 0, 1));
            a0 = _mm256_add_epi64(_mm256_mul_epu32(d0, prime),
                                  _mm256_slli_epi64(_mm256_mul_epu32(h0, prime), 32));
            a1 = _mm256_add_epi64(_mm256_mul_epu32(d1, prime),
                                  _mm256_slli_epi64(_mm256_mul_epu32(h1, prime), 32));
        }
    }
    _mm256_storeu_si256((__m256i *)acc, a0);
    _mm256_storeu_si256((__m256i *)(acc + 4), a1);
    if (stream)
        _mm_sfence();
}

/* ---- AVX-512 (xxhash.h: XXH3_accumulate_512_avx512): a stripe is one register ---- */

__attribute__((target("avx512f"))) static void stripes_avx512(uint64_t *acc, uint8_t *dst,
                                                              const uint8_t *src, size_t n,
                                                              uint64_t first)
{
    __m512i a = _mm512_loadu_si512((const void *)acc);
    const int stream = streams(dst, n);
    const __m512i prime = _mm512_set1_epi32((int)P32_1);
    const __m512i scr = _mm512_loadu_si512((const void *)(XXH3_kSecret + SECRET_SCRAMBLE));
    unsigned k = (unsigned)(first % STRIPES_PER_BLOCK);
    for (size_t i = 0; i < n; i++) {
        __m512i x = _mm512_loadu_si512((const void *)(src + STRIPE * i));
        if (stream)
            _mm512_stream_si512((void *)(dst + STRIPE * i), x);
        else
            _mm512_storeu_si512((void *)(dst + STRIPE * i), x);
        __m512i dk = _mm512_xor_si512(x, _mm512_loadu_si512((const void *)(XXH3_kSecret + 8 * k)));
        __m512i p = _mm512_mul_epu32(dk, _mm512_shuffle_epi32(dk, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1)));
        a = _mm512_add_epi64(p, _mm512_add_epi64(a, _mm512_shuffle_epi32(x, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2))));
        if (++k == STRIPES_PER_BLOCK) {
            k = 0;
            __m512i d = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_srli_epi64(a, 47)), scr);
            __m512i hi = _mm512_shuffle_epi32(d, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1));
            a = _mm512_add_epi64(_mm512_mul_epu32(d, prime),
                                 _mm512_slli_epi64(_mm512_mul_epu32(hi, prime), 32));
        }
    }
    _mm512_storeu_si512((void *)acc, a);
    if (stream)
        _mm_sfence(); /* the stores are seen before whatever the caller publishes next */
}
#endif

#if HC_X86
/* sf_copy_streamed's loops: whole 64-byte stripes to 64-byte aligned dst. */
__attribute__((target("avx512f"))) static void stream_avx512(uint8_t *dst, const uint8_t *src,
                                                             size_t n)
{
    for (size_t i = 0; i < n; i++)
        _mm512_stream_si512((void *)(dst + STRIPE * i),
                            _mm512_loadu_si512((const void *)(src + STRIPE * i)));
    _mm_sfence();
}

__attribute__((target("avx2"))) static void stream_avx2(uint8_t *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        _mm256_stream_si256((__m256i *)(dst + STRIPE * i),
                            _mm256_loadu_si256((const __m256i *)(src + STRIPE * i)));
        _mm256_stream_si256((__m256i *)(dst + STRIPE * i + 32),
                            _mm256_loadu_si256((const __m256i *)(src + STRIPE * i + 32)));
    }
    _mm_sfence();
}
#endif

void sf_copy_streamed(void *dst, const void *src, size_t n)
{
    if (n == 0)
        return;
#if HC_X86
    uint8_t *d = dst;
    const uint8_t *s = src;
    sf_copy_hash_kernel k = sf_copy_hash_fast();
    size_t head = (size_t)(-(uintptr_t)d & 63); /* bytes to the first aligned stripe */
    if (k != SF_COPY_HASH_AUTO && n >= head && streams(d + head, (n - head) / STRIPE)) {
        size_t m = (n - head) / STRIPE;
        memcpy(d, s, head);
        if (k == SF_COPY_HASH_AVX512)
            stream_avx512(d + head, s + head, m);
        else
            stream_avx2(d + head, s + head, m);
        memcpy(d + head + STRIPE * m, s + head + STRIPE * m, n - head - STRIPE * m);
        return;
    }
#endif
    memcpy(dst, src, n);
}

int sf_copy_hash_supported(sf_copy_hash_kernel kernel)
{
    switch (kernel) {
    case SF_COPY_HASH_SCALAR: return 1;
#if HC_X86
    case SF_COPY_HASH_AVX2: return __builtin_cpu_supports("avx2");
    case SF_COPY_HASH_AVX512: return __builtin_cpu_supports("avx512f");
#endif
    default: return 0;
    }
}

static stripes_fn kernel_fn(int kernel)
{
#if HC_X86
    if (kernel == SF_COPY_HASH_AVX512)
        return stripes_avx512;
    if (kernel == SF_COPY_HASH_AVX2)
        return stripes_avx2;
#endif
    (void)kernel;
    return stripes_scalar;
}

void sf_copy_hash_begin(sf_copy_hash *h, uint64_t total, sf_copy_hash_kernel kernel)
{
    static const uint64_t init[8] = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
    memcpy(h->acc, init, sizeof init);
    h->total = total;
    h->seen = 0;
    if (kernel == SF_COPY_HASH_AUTO)
        kernel = sf_copy_hash_fast();
    h->kernel = sf_copy_hash_supported(kernel) ? kernel : SF_COPY_HASH_SCALAR;
}

void sf_copy_hash_copy(sf_copy_hash *h, void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    uint64_t pos = h->seen, total = h->total;
    assert(n <= total - pos);
    if (n == 0)
        return; /* dst and src may be NULL then, which memcpy may not take */
    h->seen = pos + n;
    if (total <= SF_COPY_HASH_SHORT) {
        memcpy(d, s, n);
        memcpy(h->tail + pos, d, n);
        return;
    }
    uint64_t nreg = (total - 1) / STRIPE; /* regular stripes */
    size_t i = 0;
    /* The rest of a stripe the last piece began. */
    if (pos % STRIPE && pos / STRIPE < nreg) {
        size_t off = (size_t)(pos % STRIPE), k = STRIPE - off < n ? STRIPE - off : n;
        memcpy(d, s, k);
        memcpy(h->stripe + off, d, k);
        i = k;
        if (off + k == STRIPE) {
            uint8_t scratch[STRIPE];
            kernel_fn(h->kernel)(h->acc, scratch, h->stripe, 1, pos / STRIPE);
        }
    }
    /* Whole regular stripes: copied and folded in one pass. */
    uint64_t at = pos + i;
    if (i < n && at % STRIPE == 0 && at / STRIPE < nreg) {
        uint64_t left = nreg - at / STRIPE, whole = (n - i) / STRIPE;
        size_t m = (size_t)(whole < left ? whole : left);
        if (m) {
            kernel_fn(h->kernel)(h->acc, d + i, s + i, m, at / STRIPE);
            i += STRIPE * m;
            at += STRIPE * m;
        }
    }
    /* The rest: the beginning of a regular stripe the next piece ends, or
     * bytes past the regular stripes (at most 64: the last stripe's). */
    if (i < n) {
        memcpy(d + i, s + i, n - i);
        if (at / STRIPE < nreg) {
            assert(at % STRIPE == 0 && n - i < STRIPE);
            memcpy(h->stripe, d + i, n - i);
        }
    }
    /* The input's last 64 bytes, as far as this piece holds them. */
    uint64_t tail_lo = total - STRIPE, end = pos + n;
    if (end > tail_lo) {
        uint64_t a = pos > tail_lo ? pos : tail_lo;
        memcpy(h->tail + (a - tail_lo), d + (a - pos), (size_t)(end - a));
    }
}

static uint64_t fold128(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#else
    uint64_t lo_lo = (a & 0xFFFFFFFFu) * (b & 0xFFFFFFFFu);
    uint64_t hi_lo = (a >> 32) * (b & 0xFFFFFFFFu);
    uint64_t lo_hi = (a & 0xFFFFFFFFu) * (b >> 32);
    uint64_t hi_hi = (a >> 32) * (b >> 32);
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
    uint64_t upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    uint64_t lower = (cross << 32) | (lo_lo & 0xFFFFFFFFu);
    return lower ^ upper;
#endif
}

uint64_t sf_copy_hash_digest(const sf_copy_hash *h)
{
    assert(h->seen == h->total);
    if (h->total <= SF_COPY_HASH_SHORT)
        return XXH3_64bits(h->tail, (size_t)h->total);
    uint64_t acc[8];
    memcpy(acc, h->acc, sizeof acc);
    fold_scalar(acc, h->tail, XXH3_kSecret + SECRET_LAST);
    uint64_t r = h->total * P64_1;
    for (unsigned i = 0; i < 4; i++) {
        const uint8_t *k = XXH3_kSecret + SECRET_MERGE + 16 * i;
        r += fold128(acc[2 * i] ^ sf_get_le64(k), acc[2 * i + 1] ^ sf_get_le64(k + 8));
    }
    r ^= r >> 37;
    r *= 0x165667919E3779F9ull;
    r ^= r >> 32;
    return r;
}

/* ---- the kernel to use ---- */

static int fast_kernel = SF_COPY_HASH_AUTO;
static pthread_once_t fast_once = PTHREAD_ONCE_INIT;

/* Whether `kernel` gives xxhash's own digest (XXH3_64bits, from the same
 * xxhash.h as libxxhash) and memcpy's bytes, for lengths around its edges
 * (short, a block, a scramble, the last stripe's overlap, a run long enough
 * to be streamed), split in uneven pieces. */
#define CHECK_MAX (128u << 10) /* its second piece is over 64 KiB: streamed */
static int kernel_agrees(sf_copy_hash_kernel kernel)
{
    static const size_t lengths[] = {241, 1024, 1025, 2048 + 64, 5000, CHECK_MAX};
    uint8_t *src = malloc(CHECK_MAX), *dst = malloc(CHECK_MAX + 64);
    int ok = src && dst;
    for (size_t i = 0; ok && i < CHECK_MAX; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    /* 64-byte aligned, so that the longest's whole stripes (the kernels
     * run from stripe edges of the input) are streamed. */
    uint8_t *out = dst ? dst + (64 - (uintptr_t)dst % 64) % 64 : NULL;
    for (size_t l = 0; ok && l < sizeof lengths / sizeof *lengths; l++) {
        size_t len = lengths[l], cut = len / 3 + 5;
        sf_copy_hash h;
        sf_copy_hash_begin(&h, len, kernel);
        sf_copy_hash_copy(&h, out, src, cut);
        sf_copy_hash_copy(&h, out + cut, src + cut, len - cut);
        ok = sf_copy_hash_digest(&h) == XXH3_64bits(src, len) && memcmp(out, src, len) == 0;
    }
    free(src);
    free(dst);
    return ok;
}

static void pick_fast(void)
{
    const char *env = getenv("SHARDFEED_COPY_HASH");
    if (env && strcmp(env, "off") == 0)
        return;
    sf_copy_hash_kernel k = sf_copy_hash_supported(SF_COPY_HASH_AVX512) ? SF_COPY_HASH_AVX512
                            : sf_copy_hash_supported(SF_COPY_HASH_AVX2) ? SF_COPY_HASH_AVX2
                                                                         : SF_COPY_HASH_AUTO;
    if (k == SF_COPY_HASH_AUTO)
        return;
    if (!kernel_agrees(k)) {
        /* A bug of ours, never the data's (or no memory for the check):
         * say so once and hash as before. */
        fprintf(stderr, "shardfeed: the fused copy-and-hash did not pass its check against "
                        "xxhash on this CPU; copying and hashing separately (please report this)\n");
        return;
    }
    fast_kernel = k;
}

sf_copy_hash_kernel sf_copy_hash_fast(void)
{
    pthread_once(&fast_once, pick_fast);
    return (sf_copy_hash_kernel)fast_kernel;
}
