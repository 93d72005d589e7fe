/* Per-field zstd compression for the shard writer (SPEC.md "Compression"):
 * one frame per value, with its content size, so a reader can check the
 * size before it allocates. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "error_internal.h"
#include "shardfeed/params.h"
#include "pack_internal.h"

struct pack_compressor {
    ZSTD_CCtx *cctx;
};

/* One "FIELD=zstd[:LEVEL]" item of the spec. */
static int parse_item(sf_schema *schema, int *levels, const char *item, size_t len)
{
    const char *eq = memchr(item, '=', len);
    if (!eq)
        return sf_fail(SF_E_INVALID, "compress option '%.*s': expected FIELD=zstd[:LEVEL]", (int)len, item);
    char name[SF_MAX_NAME + 1];
    size_t nlen = (size_t)(eq - item);
    if (nlen == 0 || nlen > SF_MAX_NAME)
        return sf_fail(SF_E_INVALID, "compress option '%.*s': no such field", (int)len, item);
    memcpy(name, item, nlen);
    name[nlen] = '\0';
    int f = sf_schema_find(schema, name);
    if (f < 0) {
        char fields[SF_MAX_FIELDS * (SF_MAX_NAME + 2)] = "";
        for (uint32_t i = 0; i < schema->field_count; i++) {
            strcat(fields, i ? ", " : "");
            strcat(fields, schema->fields[i].name);
        }
        return sf_fail(SF_E_INVALID, "compress option: no field '%s' (fields: %s)", name, fields);
    }
    const char *codec = eq + 1;
    size_t clen = len - nlen - 1;
    int level = ZSTD_CLEVEL_DEFAULT;
    if (clen >= 4 && strncmp(codec, "zstd", 4) == 0 && (clen == 4 || codec[4] == ':')) {
        if (clen > 4) {
            char num[16];
            size_t l = clen - 5;
            char *end;
            if (l == 0 || l >= sizeof num)
                return sf_fail(SF_E_INVALID, "compress option %s: bad level", name);
            memcpy(num, codec + 5, l);
            num[l] = '\0';
            long v = strtol(num, &end, 10);
            if (*end || v < SF_PACK_MIN_ZSTD_LEVEL || v > SF_PACK_MAX_ZSTD_LEVEL)
                return sf_fail(SF_E_INVALID, "compress option %s: level '%s' is not in %d..%d", name, num,
                               SF_PACK_MIN_ZSTD_LEVEL, SF_PACK_MAX_ZSTD_LEVEL);
            level = (int)v;
        }
    } else {
        return sf_fail(SF_E_INVALID, "compress option %s: unknown codec '%.*s' (zstd is the one there is)",
                       name, (int)clen, codec);
    }
    if (schema->fields[f].storage == SF_STORAGE_INLINE)
        return sf_fail(SF_E_INVALID,
                       "compress option %s: the field is stored inline in the index (%llu bytes); "
                       "there is nothing to compress",
                       name, (unsigned long long)schema->fields[f].item_size);
    /* Given twice, one of the two would be dropped without a word. */
    if (schema->fields[f].codec == SF_CODEC_ZSTD)
        return sf_fail(SF_E_INVALID, "compress option %s: the field is named twice (once at level %d)",
                       name, levels[f]);
    schema->fields[f].codec = SF_CODEC_ZSTD;
    levels[f] = level;
    return 0;
}

int pack_compress_parse(sf_schema *schema, int *levels, const char *spec)
{
    if (!spec || !*spec)
        return 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int rc = parse_item(schema, levels, p, len);
        if (rc)
            return rc;
        p += len + (end != NULL);
    }
    int rc = sf_schema_finish(schema);
    return rc ? sf_fail_prefix(rc, "compress option") : 0;
}

uint64_t pack_compress_bound(uint64_t len)
{
    return ZSTD_compressBound((size_t)len);
}

int pack_compressor_new(pack_compressor **c)
{
    *c = calloc(1, sizeof **c);
    if (*c)
        (*c)->cctx = ZSTD_createCCtx();
    if (!*c || !(*c)->cctx) {
        pack_compressor_free(*c);
        *c = NULL;
        return sf_fail(-ENOMEM, "out of memory for a zstd context");
    }
    return 0;
}

void pack_compressor_free(pack_compressor *c)
{
    if (!c)
        return;
    ZSTD_freeCCtx(c->cctx);
    free(c);
}

int pack_compress(pack_compressor *c, int level, uint8_t *dst, uint64_t cap, const uint8_t *src,
                  uint64_t len, uint64_t *out_len)
{
    /* A single-call compression writes the content size into the frame
     * header and, for a given zstd version and level, the same bytes every
     * time: packing stays reproducible. */
    size_t n = ZSTD_compressCCtx(c->cctx, dst, (size_t)cap, src, (size_t)len, level);
    if (ZSTD_isError(n))
        return sf_fail(SF_E_UNSUPPORTED, "zstd: %s", ZSTD_getErrorName(n));
    *out_len = n;
    return 0;
}
