/* Compressed values (SPEC.md "Compression"): the checks every reader makes
 * on a zstd value, and its decompression. Used by the streaming reader,
 * random access and verify, so the rules live in one place. format/ stays
 * free of zstd; this is the reader's side. */
#ifndef SF_READER_CODEC_H
#define SF_READER_CODEC_H

#include <stdint.h>
#include <zstd.h>

#include "format.h"

/* Bytes of a stored value that always hold its whole frame header (when
 * the value is at least that long). */
/* ZSTD_FRAMEHEADERSIZE_MAX (18: magic 4 + header 2..14), which zstd.h only
 * exposes to static linkers. */
#define SF_ZSTD_HEADER_MAX 18u

/* The decompressed size a zstd value of field `f` declares, read from its
 * frame header in src[0..len) (the stored value, or at least its first
 * SF_ZSTD_HEADER_MAX bytes), checked before anyone allocates from it: a
 * zstd frame (not a skippable one) with its content size present, at most
 * SF_MAX_FIELD_BYTES, a multiple of the element size, and equal to item_size
 * for a fixed field. Returns 0, or SF_E_CORRUPT with the detail "field
 * 'NAME': ..." (callers prefix shard and record). */
int sf_zstd_content_size(uint64_t *out, const sf_field *f, const void *src, uint64_t len);

/* Decompresses the stored value src[0..len) of field `f` into dst, which
 * holds `expect` bytes: the value must declare exactly `expect` bytes
 * (sf_zstd_content_size), be one frame that uses exactly the `len` stored
 * bytes, and decompress to exactly `expect` bytes. `dctx` is the caller's
 * (one per thread, reused). Returns 0 or SF_E_CORRUPT with the detail. */
int sf_decompress_value(void *dst, uint64_t expect, const sf_field *f, const void *src,
                        uint64_t len, ZSTD_DCtx *dctx);

#endif
