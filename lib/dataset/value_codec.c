/* zstd values: header checks and one-shot decompression (codec.h). */
#include <string.h>

#include "value_codec.h"
#include "error_internal.h"
#include "le.h"

int sf_zstd_content_size(uint64_t *out, const sf_field *f, const void *src, uint64_t len)
{
    *out = 0;
    /* A regular frame starts with ZSTD_MAGICNUMBER; a skippable frame (or
     * anything else) is not a value. */
    if (len < 4 || sf_get_le32(src) != ZSTD_MAGICNUMBER)
        return sf_fail(SF_E_CORRUPT, "field '%s': not a zstd frame", f->name);
    size_t hlen = len < SF_ZSTD_HEADER_MAX ? (size_t)len : SF_ZSTD_HEADER_MAX;
    unsigned long long cs = ZSTD_getFrameContentSize(src, hlen);
    if (cs == ZSTD_CONTENTSIZE_ERROR)
        return sf_fail(SF_E_CORRUPT, "field '%s': damaged zstd frame header", f->name);
    if (cs == ZSTD_CONTENTSIZE_UNKNOWN)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame without a content size", f->name);
    if (cs > SF_MAX_FIELD_BYTES)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame declares %llu bytes (limit %llu)",
                       f->name, cs, (unsigned long long)SF_MAX_FIELD_BYTES);
    if (f->storage == SF_STORAGE_FIXED && cs != f->item_size)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame declares %llu bytes, the field has %llu",
                       f->name, cs, (unsigned long long)f->item_size);
    if (cs % sf_dtype_size(f->dtype) != 0)
        return sf_fail(SF_E_CORRUPT,
                       "field '%s': zstd frame declares %llu bytes, not a multiple of the %zu-byte element",
                       f->name, cs, sf_dtype_size(f->dtype));
    *out = cs;
    return 0;
}

int sf_decompress_value(void *dst, uint64_t expect, const sf_field *f, const void *src,
                        uint64_t len, ZSTD_DCtx *dctx)
{
    uint64_t declared;
    int rc = sf_zstd_content_size(&declared, f, src, len);
    if (rc)
        return rc;
    if (declared != expect)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame declares %llu bytes, expected %llu",
                       f->name, (unsigned long long)declared, (unsigned long long)expect);
    /* Exactly one frame, ending exactly where the stored value ends. */
    size_t fsize = ZSTD_findFrameCompressedSize(src, (size_t)len);
    if (ZSTD_isError(fsize))
        return sf_fail(SF_E_CORRUPT, "field '%s': damaged zstd frame: %s", f->name,
                       ZSTD_getErrorName(fsize));
    if (fsize != len)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame is %zu bytes, the stored value %llu",
                       f->name, fsize, (unsigned long long)len);
    size_t got = ZSTD_decompressDCtx(dctx, dst, (size_t)expect, src, (size_t)len);
    if (ZSTD_isError(got))
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd: %s", f->name, ZSTD_getErrorName(got));
    if (got != expect)
        return sf_fail(SF_E_CORRUPT, "field '%s': zstd frame decompressed to %zu bytes, declared %llu",
                       f->name, got, (unsigned long long)expect);
    return 0;
}
