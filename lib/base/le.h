/* Explicit little-endian load/store helpers. Every integer in a shardfeed
 * file goes through these: never cast a struct onto file bytes. */
#ifndef SF_FORMAT_LE_H
#define SF_FORMAT_LE_H

#include <stdint.h>

static inline uint16_t sf_get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t sf_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t sf_get_le64(const uint8_t *p)
{
    return (uint64_t)sf_get_le32(p) | (uint64_t)sf_get_le32(p + 4) << 32;
}

static inline void sf_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void sf_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void sf_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* 1 when all `n` bytes are zero. */
static inline int sf_all_zero(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Rounds `v` up to a multiple of `align` (a power of two). */
static inline uint64_t sf_align_up(uint64_t v, uint64_t align)
{
    return (v + align - 1) & ~(align - 1);
}

#endif
