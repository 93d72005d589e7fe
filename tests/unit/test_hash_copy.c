/* The fused copy-and-hash (hash_copy.h) against libxxhash: for every kernel
 * this CPU runs, the destination holds the source's bytes and the digest is
 * XXH3_64bits of them, whatever the length and however the input is cut
 * into pieces; and nothing outside the destination is written. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "hash_copy.h"

#define MAX_LEN 9000u
#define GUARD 64u

static const sf_copy_hash_kernel kernels[] = {SF_COPY_HASH_SCALAR, SF_COPY_HASH_AVX2,
                                              SF_COPY_HASH_AVX512};

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)next_random();
}

/* Copies src[0..len) into dst with `kernel`, cut where `cuts` says (sorted
 * offsets in (0, len)), and checks the bytes, the digest and the guards. */
static void check_copy(sf_copy_hash_kernel kernel, const uint8_t *src, size_t len,
                       const size_t *cuts, size_t ncuts, size_t dst_skew)
{
    static uint8_t buf[MAX_LEN + 2 * GUARD + 64];
    memset(buf, 0xA5, sizeof buf);
    uint8_t *dst = buf + GUARD + dst_skew;
    sf_copy_hash h;
    sf_copy_hash_begin(&h, len, kernel);
    size_t at = 0;
    for (size_t c = 0; c <= ncuts; c++) {
        size_t end = c < ncuts ? cuts[c] : len;
        sf_copy_hash_copy(&h, dst + at, src + at, end - at);
        at = end;
    }
    cr_assert_eq(sf_copy_hash_digest(&h), XXH3_64bits(src, len),
                 "kernel %d, %zu bytes in %zu pieces: digest differs from XXH3_64bits", kernel,
                 len, ncuts + 1);
    cr_assert(memcmp(dst, src, len) == 0, "kernel %d, %zu bytes: the copy differs", kernel, len);
    for (size_t i = 0; i < GUARD + dst_skew; i++)
        cr_assert_eq(buf[i], 0xA5, "kernel %d wrote before the destination", kernel);
    for (size_t i = GUARD + dst_skew + len; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0xA5, "kernel %d wrote past the destination", kernel);
}

Test(hash_copy, every_length_in_one_piece_matches_xxh3)
{
    static uint8_t src[MAX_LEN];
    fill_random(src, sizeof src);
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        if (!sf_copy_hash_supported(kernels[k]))
            continue;
        /* Every length up to a few blocks: short inputs, the 240/241 edge,
         * stripe and block edges (1024 bytes, a scramble each), and every
         * overlap of the last stripe with the regular ones. */
        for (size_t len = 0; len <= 4 * 1024 + 130; len++)
            check_copy(kernels[k], src + (len % 7), len, NULL, 0, len % 5);
        for (size_t len = MAX_LEN - 200; len <= MAX_LEN - 7; len++)
            check_copy(kernels[k], src, len, NULL, 0, 0);
    }
}

Test(hash_copy, any_split_into_pieces_matches_xxh3)
{
    static uint8_t src[MAX_LEN];
    fill_random(src, sizeof src);
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        if (!sf_copy_hash_supported(kernels[k]))
            continue;
        for (unsigned round = 0; round < 3000; round++) {
            size_t len = (size_t)(next_random() % (MAX_LEN - 16)) + 1;
            size_t ncuts = (size_t)(next_random() % 9), cuts[8];
            if (ncuts > len - 1)
                ncuts = len - 1;
            ncuts = ncuts > 8 ? 8 : ncuts;
            /* Cuts anywhere, sorted, distinct; a third of the rounds at
             * stripe edges +-1, where a piece ends or starts a stripe. */
            size_t n = 0;
            for (size_t c = 0; c < ncuts; c++) {
                size_t at = round % 3 == 0 ? (size_t)(next_random() % (len / 64 + 1)) * 64 +
                                                 (size_t)(next_random() % 3) - 1
                                           : (size_t)(next_random() % len);
                if (at == 0 || at >= len)
                    continue;
                size_t j = n;
                while (j > 0 && cuts[j - 1] > at)
                    j--;
                if (j > 0 && cuts[j - 1] == at)
                    continue;
                memmove(cuts + j + 1, cuts + j, (n - j) * sizeof *cuts);
                cuts[j] = at;
                n++;
            }
            check_copy(kernels[k], src + round % 13, len, cuts, n, round % 11);
        }
    }
}

Test(hash_copy, stripe_sized_pieces_and_single_bytes_match_xxh3)
{
    static uint8_t src[MAX_LEN];
    fill_random(src, sizeof src);
    static size_t cuts[MAX_LEN];
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        if (!sf_copy_hash_supported(kernels[k]))
            continue;
        size_t sizes[] = {1, 63, 64, 65, 1024, 1023};
        size_t lens[] = {241, 1025, 2049, 3000};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
                size_t n = 0;
                for (size_t at = sizes[s]; at < lens[l]; at += sizes[s])
                    cuts[n++] = at;
                check_copy(kernels[k], src, lens[l], cuts, n, 3);
            }
    }
}

Test(hash_copy, the_fast_kernel_is_one_this_cpu_runs_or_none)
{
    sf_copy_hash_kernel k = sf_copy_hash_fast();
    cr_assert(k == SF_COPY_HASH_AUTO || sf_copy_hash_supported(k));
    cr_assert_neq(k, SF_COPY_HASH_SCALAR, "the scalar kernel is slower than copy then hash");
    /* A kernel this CPU lacks falls back to one that gives the same digest. */
    static uint8_t src[3000], dst[3000];
    fill_random(src, sizeof src);
    sf_copy_hash h;
    sf_copy_hash_begin(&h, sizeof src, (sf_copy_hash_kernel)99);
    sf_copy_hash_copy(&h, dst, src, sizeof src);
    cr_assert_eq(sf_copy_hash_digest(&h), XXH3_64bits(src, sizeof src));
}

/* Pieces of 64 KiB and more to 64-byte aligned memory are written with
 * non-temporal stores: the same bytes and digest, aligned or not. */
Test(hash_copy, long_runs_streamed_or_not_match_xxh3)
{
    size_t cap = (1u << 20) + 4096;
    uint8_t *src = malloc(cap), *buf = malloc(cap + 2 * GUARD + 64);
    cr_assert(src && buf);
    fill_random(src, cap);
    size_t lens[] = {65536, 65536 + 1, 65536 + 64 * 16 + 7, 602112, (1u << 20) + 100};
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        if (!sf_copy_hash_supported(kernels[k]))
            continue;
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
            for (size_t skew = 0; skew < 3; skew++) {
                size_t len = lens[l], cut = skew == 2 ? 100 : 0; /* a head that misaligns the rest */
                memset(buf, 0xA5, cap + 2 * GUARD + 64);
                uint8_t *dst = buf + GUARD + (skew == 1 ? 8 : 0);
                dst = (uint8_t *)(((uintptr_t)dst + 63) & ~(uintptr_t)63) + (skew == 1 ? 8 : 0);
                sf_copy_hash h;
                sf_copy_hash_begin(&h, len, kernels[k]);
                if (cut)
                    sf_copy_hash_copy(&h, dst, src, cut);
                sf_copy_hash_copy(&h, dst + cut, src + cut, len - cut);
                cr_assert_eq(sf_copy_hash_digest(&h), XXH3_64bits(src, len),
                             "kernel %d, %zu bytes, skew %zu", kernels[k], len, skew);
                cr_assert(memcmp(dst, src, len) == 0);
                for (uint8_t *p = buf; p < dst; p++)
                    cr_assert_eq(*p, 0xA5);
                for (uint8_t *p = dst + len; p < buf + cap + 2 * GUARD + 64; p++)
                    cr_assert_eq(*p, 0xA5);
            }
    }
    free(src);
    free(buf);
}

/* The streamed copy (verify off) is memcpy, whatever the length and the
 * alignment of either side, and writes nothing outside the destination. */
Test(hash_copy, the_streamed_copy_is_memcpy)
{
    size_t cap = (1u << 18) + 4096;
    uint8_t *src = malloc(cap), *buf = malloc(cap + 256);
    cr_assert(src && buf);
    fill_random(src, cap);
    size_t lens[] = {0, 1, 63, 4096, 65535, 65536, 65536 + 63, 65536 + 130, 200000, 1u << 18};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (size_t skew = 0; skew < 70; skew += 7) {
            memset(buf, 0xA5, cap + 256);
            uint8_t *dst = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + skew;
            sf_copy_streamed(dst, src + skew / 2, lens[l]);
            cr_assert(memcmp(dst, src + skew / 2, lens[l]) == 0, "%zu bytes, skew %zu", lens[l], skew);
            for (uint8_t *p = buf; p < dst; p++)
                cr_assert_eq(*p, 0xA5);
            for (uint8_t *p = dst + lens[l]; p < buf + cap + 256; p++)
                cr_assert_eq(*p, 0xA5);
        }
    free(src);
    free(buf);
}

/* Empty pieces (NULL pointers allowed) change nothing. */
Test(hash_copy, empty_pieces_are_nothing)
{
    static uint8_t src[1000], dst[1000];
    fill_random(src, sizeof src);
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        if (!sf_copy_hash_supported(kernels[k]))
            continue;
        sf_copy_hash h;
        sf_copy_hash_begin(&h, sizeof src, kernels[k]);
        sf_copy_hash_copy(&h, NULL, NULL, 0);
        sf_copy_hash_copy(&h, dst, src, 300);
        sf_copy_hash_copy(&h, NULL, NULL, 0);
        sf_copy_hash_copy(&h, dst + 300, src + 300, sizeof src - 300);
        cr_assert_eq(sf_copy_hash_digest(&h), XXH3_64bits(src, sizeof src));
        sf_copy_hash_begin(&h, 0, kernels[k]);
        sf_copy_hash_copy(&h, NULL, NULL, 0);
        cr_assert_eq(sf_copy_hash_digest(&h), XXH3_64bits(NULL, 0));
    }
    sf_copy_streamed(NULL, NULL, 0);
}
