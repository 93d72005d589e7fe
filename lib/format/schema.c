/* The schema (field table): validation, encoding and hashing. The field
 * table's decoder lives in manifest.c with the rest of the manifest. */
#include <stdio.h>
#include <string.h>

#include "error_internal.h"
#include "format.h"
#include "le.h"

/* Field descriptor, 144 bytes:
 *   0  64  name, NUL-padded (all bytes after the name are zero)
 *  64   1  dtype            (enum sf_dtype)
 *  65   1  ndim             (0..8)
 *  66   1  storage          (sf_storage)
 *  67   1  codec            (sf_codec: 0 stored as is, 1 zstd)
 *  68   4  reserved, zero
 *  72  64  shape[8], u64 each; dims past ndim are zero
 * 136   8  item_size        (bytes of one value; 0 for variable length)
 */
_Static_assert(64 + 1 + 1 + 1 + 1 + 4 + 64 + 8 == SF_FIELD_DESC_SIZE, "field descriptor size");

int sf_valid_field_name(const char *name, size_t len)
{
    if (len == 0 || len > SF_MAX_NAME || name[0] == '.')
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok)
            return 0;
    }
    return 1;
}

/* Length of the UTF-8 sequence at p[0..n) (1-4), or 0 when it is not
 * well-formed: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min, cp;
    if ((c & 0xE0) == 0xC0) {
        len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Appends key[0..len) to out for a message: printable ASCII and
 * well-formed UTF-8 as they are, any other byte as \xNN; at most 80 bytes of
 * the key, then "...". */
static void key_shown(char *out, size_t cap, const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    size_t o = 0, i = 0;
    while (i < len && i < 80 && o + 8 < cap) {
        size_t n = p[i] >= 0x80 ? utf8_seq(p + i, len - i) : 1;
        if (n > 1) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        } else {
            o += (size_t)snprintf(out + o, cap - o, p[i] >= 0x20 && p[i] < 0x7F ? "%c" : "\\x%02x", p[i]);
            i++;
        }
    }
    if (i < len && o + 4 < cap)
        o += (size_t)snprintf(out + o, cap - o, "...");
    out[o < cap ? o : cap - 1] = '\0';
}

/* What is wrong with a key, or NULL; *at receives the byte it concerns. */
static const char *key_problem(const unsigned char *p, size_t len, size_t *at)
{
    *at = 0;
    if (len == 0)
        return "is empty";
    if (len > SF_MAX_KEY)
        return "is longer than 255 bytes";
    size_t comp = 0; /* start of the current '/'-separated component */
    for (size_t i = 0; i <= len;) {
        if (i == len || p[i] == '/') {
            size_t clen = i - comp;
            *at = comp;
            /* No empty component (leading, trailing or doubled '/'), no "."
             * or "..": a key is always a relative path inside a directory. */
            if (clen == 0)
                return "has an empty component (a leading, trailing or doubled '/')";
            if (clen == 1 && p[comp] == '.')
                return "has a '.' component";
            if (clen == 2 && p[comp] == '.' && p[comp + 1] == '.')
                return "has a '..' component";
            comp = ++i;
            continue;
        }
        *at = i;
        if (p[i] < 0x20 || p[i] == 0x7F)
            return "has a control character";
        size_t n = utf8_seq(p + i, len - i);
        if (n == 0)
            return "is not well-formed UTF-8";
        i += n;
    }
    return NULL;
}

int sf_key_check(const char *key, size_t len, char *why, size_t cap)
{
    size_t at;
    const char *problem = key_problem((const unsigned char *)key, len, &at);
    if (!problem)
        return 1;
    if (why && cap) {
        char shown[400];
        key_shown(shown, sizeof shown, key, len);
        if (len == 0 || len > SF_MAX_KEY)
            snprintf(why, cap, "key '%s' %s (%zu bytes); %s", shown, problem, len, SF_KEY_RULE);
        else
            snprintf(why, cap, "key '%s' %s at byte %zu; %s", shown, problem, at, SF_KEY_RULE);
    }
    return 0;
}

int sf_valid_key(const char *key, size_t len)
{
    return sf_key_check(key, len, NULL, 0);
}

int sf_schema_find(const sf_schema *s, const char *name)
{
    for (uint32_t i = 0; i < s->field_count; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return (int)i;
    return -1;
}

int sf_field_check(const sf_field *f)
{
    size_t nlen = strnlen(f->name, sizeof f->name);
    if (!sf_valid_field_name(f->name, nlen)) {
        char shown[400];
        key_shown(shown, sizeof shown, f->name, nlen);
        return sf_fail(SF_E_CORRUPT,
                       "field name '%s' is not valid (1 to %u bytes of [A-Za-z0-9._-], not starting "
                       "with '.')",
                       shown, SF_MAX_NAME);
    }
    /* Codes SPEC.md does not define are reserved: a file that uses one
     * breaks the format (a later format version would say so in its
     * version or required_flags). */
    if (f->dtype >= SF_DTYPE_COUNT)
        return sf_fail(SF_E_CORRUPT, "field '%s': dtype code %u is reserved", f->name, f->dtype);
    if (f->ndim > SF_MAX_NDIM)
        return sf_fail(SF_E_LIMIT, "field '%s': %u dimensions (limit %u)", f->name, f->ndim,
                       SF_MAX_NDIM);
    if (f->codec >= SF_CODEC_COUNT)
        return sf_fail(SF_E_CORRUPT, "field '%s': codec %u is reserved", f->name, f->codec);
    /* An inline value lives in its index entry, where there is no room for
     * a frame and nothing to gain. */
    if (f->codec != SF_CODEC_NONE && f->storage == SF_STORAGE_INLINE)
        return sf_fail(SF_E_CORRUPT, "field '%s': inline fields cannot be compressed", f->name);
    for (uint32_t d = f->ndim; d < SF_MAX_NDIM; d++)
        if (f->shape[d] != 0)
            return sf_fail(SF_E_RESERVED, "field '%s': unused shape slot %u is not zero", f->name, d);

    size_t esize = sf_dtype_size(f->dtype);
    if (f->storage == SF_STORAGE_VARIABLE) {
        if (f->ndim != 1 || f->shape[0] != 0 || f->item_size != 0)
            return sf_fail(SF_E_CORRUPT,
                           "field '%s': a variable-length field has ndim 1, shape (0,), item_size 0",
                           f->name);
        return 0;
    }
    if (f->storage != SF_STORAGE_FIXED && f->storage != SF_STORAGE_INLINE)
        return sf_fail(SF_E_CORRUPT, "field '%s': storage code %u is reserved", f->name, f->storage);
    if (f->dtype == SF_DTYPE_BYTES)
        return sf_fail(SF_E_CORRUPT, "field '%s': dtype bytes is for variable-length fields only",
                       f->name);
    uint64_t size = esize;
    for (uint32_t d = 0; d < f->ndim; d++) {
        if (f->shape[d] == 0) /* SPEC "Schema": every dimension >= 1 */
            return sf_fail(SF_E_LIMIT,
                           "field '%s': shape dimension %u is 0 (a zero-size array is not a "
                           "value a fixed field can hold)",
                           f->name, d);
        if (f->shape[d] > SF_MAX_FIELD_BYTES || size > SF_MAX_FIELD_BYTES / f->shape[d])
            return sf_fail(SF_E_LIMIT,
                           "field '%s': shape dimension %u (%llu) takes the value past %llu bytes",
                           f->name, d, (unsigned long long)f->shape[d],
                           (unsigned long long)SF_MAX_FIELD_BYTES);
        size *= f->shape[d];
    }
    if (size != f->item_size)
        return sf_fail(SF_E_CORRUPT, "field '%s': item_size %llu does not match shape (%llu)",
                       f->name, (unsigned long long)f->item_size, (unsigned long long)size);
    if (f->storage == SF_STORAGE_INLINE && size > SF_MAX_INLINE_BYTES)
        return sf_fail(SF_E_CORRUPT, "field '%s': inline values hold at most %u bytes", f->name,
                       SF_MAX_INLINE_BYTES);
    return 0;
}

int sf_schema_finish(sf_schema *s)
{
    if (s->field_count == 0 || s->field_count > SF_MAX_FIELDS)
        return sf_fail(SF_E_LIMIT, "%u fields (must be 1..%u)", s->field_count, SF_MAX_FIELDS);
    s->n_payload = s->n_var = s->n_inline = 0;
    s->bool_payload = 0;
    for (uint32_t i = 0; i < s->field_count; i++) {
        const sf_field *f = &s->fields[i];
        int rc = sf_field_check(f);
        if (rc)
            return rc;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(s->fields[j].name, f->name) == 0)
                return sf_fail(SF_E_CORRUPT, "field name '%s' appears twice", f->name);
        s->var_slot[i] = -1;
        s->inline_slot[i] = -1;
        if (f->storage == SF_STORAGE_INLINE) {
            s->inline_slot[i] = (int8_t)s->n_inline++;
        } else {
            if (f->dtype == SF_DTYPE_BOOL)
                s->bool_payload |= 1ull << s->n_payload;
            s->payload_field[s->n_payload++] = (uint8_t)i;
            /* A compressed value's stored length varies per record even when
             * its field is fixed: it gets a length slot like a variable one. */
            if (f->storage == SF_STORAGE_VARIABLE || f->codec != SF_CODEC_NONE)
                s->var_slot[i] = (int8_t)s->n_var++;
        }
    }
    s->entry_size = SF_INDEX_ENTRY_BASE + 8 * (s->n_var + s->n_inline);
    return 0;
}

void sf_schema_encode(uint8_t *out, const sf_schema *s)
{
    for (uint32_t i = 0; i < s->field_count; i++) {
        const sf_field *f = &s->fields[i];
        uint8_t *p = out + (size_t)i * SF_FIELD_DESC_SIZE;
        memset(p, 0, SF_FIELD_DESC_SIZE);
        memcpy(p, f->name, strnlen(f->name, SF_MAX_NAME));
        p[64] = f->dtype;
        p[65] = f->ndim;
        p[66] = f->storage;
        p[67] = f->codec;
        for (uint32_t d = 0; d < SF_MAX_NDIM; d++)
            sf_put_le64(p + 72 + 8 * d, d < f->ndim ? f->shape[d] : 0);
        sf_put_le64(p + 136, f->item_size);
    }
}

uint64_t sf_schema_hash(const sf_schema *s)
{
    uint8_t buf[SF_MAX_FIELDS * SF_FIELD_DESC_SIZE];
    sf_schema_encode(buf, s);
    return sf_hash(buf, (size_t)s->field_count * SF_FIELD_DESC_SIZE);
}
