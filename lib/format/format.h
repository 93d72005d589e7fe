/* The shardfeed on-disk format: constants, decoded structures, and the
 * encode/decode functions for every structure. SPEC.md is the normative
 * description; the offset tables next to each encoder mirror it.
 *
 * Depends on libc and libxxhash only. Decoders take untrusted bytes: they
 * check magic, version, reserved bits, checksums and every limit below
 * before anything is allocated from a stored count or size.
 */
#ifndef SF_FORMAT_FORMAT_H
#define SF_FORMAT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

/* ---- version (SPEC.md "Versions") ---- */
#define SF_FORMAT_MAJOR 1
#define SF_FORMAT_MINOR 3

/* ---- file names inside a dataset directory ---- */
#define SF_MANIFEST_NAME "manifest.sfm"
#define SF_SHARD_NAME_FMT "shard-%06u.sfs" /* six digits; seven from 1,000,000 */
#define SF_SHARD_NAME_MAX 32
/* The index i < SF_MAX_SHARDS whose SF_SHARD_NAME_FMT name is exactly the
 * `len` bytes at `name`, or -1 (another name, or one that only looks alike:
 * "shard-+00001.sfs", "shard-01000000.sfs", fewer digits). */
int64_t sf_shard_name_index(const char *name, size_t len);

/* ---- limits every reader enforces before allocating (SPEC.md "Limits") ---- */
#define SF_MAX_FIELDS 64u
#define SF_MAX_NDIM 8u
#define SF_MAX_NAME 63u                      /* field name bytes */
#define SF_MAX_KEY 255u                      /* sample key bytes */
#define SF_MAX_ALIGN (1u << 20)
#define SF_MAX_FIELD_BYTES (1ull << 30)      /* one fixed field of one record */
#define SF_MAX_RECORD_BYTES (1ull << 32)     /* one record, padding included */
#define SF_MAX_RECORDS_PER_SHARD (1u << 24)
#define SF_MAX_INDEX_BYTES (1ull << 30)
#define SF_MAX_SHARD_BYTES (1ull << 40)
#define SF_MAX_SHARDS (1u << 20)
#define SF_MAX_RECORDS 0xFFFFFFFFull         /* records in a dataset */
#define SF_MAX_METADATA (16u << 20)
#define SF_MAX_INLINE_BYTES 8u

/* ---- encoded sizes ---- */
#define SF_MAGIC_SIZE 8
#define SF_SHARD_HEADER_SIZE 128
#define SF_SHARD_FOOTER_SIZE 64
#define SF_INDEX_ENTRY_BASE 32
#define SF_MANIFEST_HEADER_SIZE 64
#define SF_FIELD_DESC_SIZE 144
#define SF_SHARD_DESC_SIZE 48
#define SF_MANIFEST_TRAILER_SIZE 8

extern const uint8_t sf_shard_magic[SF_MAGIC_SIZE];
extern const uint8_t sf_footer_magic[SF_MAGIC_SIZE];
extern const uint8_t sf_manifest_magic[SF_MAGIC_SIZE];

typedef struct sf_field {
    char name[SF_MAX_NAME + 1];
    uint8_t dtype;   /* sf_dtype (shardfeed/types.h) */
    uint8_t ndim;
    uint8_t storage; /* sf_storage */
    uint8_t codec;   /* sf_codec; never on inline fields */
    uint64_t shape[SF_MAX_NDIM];
    uint64_t item_size; /* bytes of one value; 0 for SF_STORAGE_VARIABLE */
} sf_field;

typedef struct sf_schema {
    uint32_t field_count;
    sf_field fields[SF_MAX_FIELDS];
    /* Derived by sf_schema_finish(): */
    uint32_t n_payload, n_var, n_inline;
    uint32_t entry_size;           /* index entry bytes */
    /* field -> its length slot in the index entry, or -1. Variable-length
     * and compressed fields have one (n_var of them, in schema order): the
     * slot holds the value's stored byte length. */
    int8_t var_slot[SF_MAX_FIELDS];
    int8_t inline_slot[SF_MAX_FIELDS]; /* field -> position among inline fields, or -1 */
    uint8_t payload_field[SF_MAX_FIELDS]; /* payload field k (fixed or variable) -> field */
    uint64_t bool_payload;             /* bit k: payload field k has dtype bool */
} sf_schema;

/* Validates the fields (names, dtypes, shapes, sizes, storage rules) and fills
 * the derived members. */
int sf_schema_finish(sf_schema *s);
/* Validates one field descriptor (what sf_schema_finish checks of each):
 * SF_E_CORRUPT or SF_E_LIMIT with the detail naming the field. */
int sf_field_check(const sf_field *f);
/* Index of the field called `name`, or -1. */
int sf_schema_find(const sf_schema *s, const char *name);
/* 1 when `name` is a valid field name: 1..63 bytes of [A-Za-z0-9._-], not
 * starting with '.' (so "{field}_{key}.npy" and "{key}.{field}" stay plain
 * names). */
int sf_valid_field_name(const char *name, size_t len);
/* 1 when `key` is a valid sample key: 1..255 bytes of well-formed UTF-8
 * without control characters, a relative path whose '/'-separated
 * components are neither empty, "." nor "..". So a key joined to a
 * directory always names something inside it. */
int sf_valid_key(const char *key, size_t len);
/* sf_valid_key that says what is wrong: returns 1 for a valid key; else 0,
 * and when why != NULL writes the one message every part of shardfeed
 * gives for a bad key ("key '../x' has a '..' component at byte 0; ..."),
 * the key shown with unprintable bytes escaped. */
int sf_key_check(const char *key, size_t len, char *why, size_t cap);
#define SF_KEY_RULE                                                                        \
    "a key is a relative path of 1 to 255 bytes of UTF-8 without control characters, whose " \
    "'/'-separated parts are not empty, '.' or '..'"
/* Encodes the field table (field_count * SF_FIELD_DESC_SIZE bytes). */
void sf_schema_encode(uint8_t *out, const sf_schema *s);
/* XXH3-64 of the encoded field table: ties shards to their schema. */
uint64_t sf_schema_hash(const sf_schema *s);

/* ---- shard header (first 128 bytes of a shard file) ---- */
typedef struct sf_shard_header {
    uint16_t version_major, version_minor;
    uint32_t required_flags; /* reserved: must be zero */
    uint32_t optional_flags; /* unused: ignored */
    uint32_t align;
    uint64_t shard_index;
    uint64_t record_count;
    uint64_t first_record;
    uint64_t data_offset;
    uint64_t index_offset;
    uint64_t index_size;
    uint32_t index_entry_size;
    uint32_t field_count;
    uint64_t schema_hash;
    uint64_t dataset_id;
    uint64_t checksum;       /* filled by encode, checked by decode */
} sf_shard_header;

void sf_shard_header_encode(uint8_t out[SF_SHARD_HEADER_SIZE], sf_shard_header *h);
int sf_shard_header_decode(sf_shard_header *h, const uint8_t in[SF_SHARD_HEADER_SIZE]);

/* ---- shard footer (last 64 bytes) ---- */
typedef struct sf_shard_footer {
    uint64_t index_offset;
    uint64_t index_size;
    uint64_t record_count;
    uint64_t index_checksum;
    uint64_t header_checksum;
    uint64_t checksum;
} sf_shard_footer;

void sf_shard_footer_encode(uint8_t out[SF_SHARD_FOOTER_SIZE], sf_shard_footer *f);
int sf_shard_footer_decode(sf_shard_footer *f, const uint8_t in[SF_SHARD_FOOTER_SIZE]);

/* ---- index entries ---- */
typedef struct sf_index_entry {
    uint64_t offset;   /* absolute file offset of the record's payload */
    uint64_t size;     /* stored payload bytes, inter-field padding included */
    uint64_t checksum; /* XXH3-64 over the payload fields' bytes, padding excluded */
    uint32_t key_offset;
    uint16_t key_length;
    uint64_t var_len[SF_MAX_FIELDS];   /* stored lengths, by var slot */
    uint8_t inline_val[SF_MAX_FIELDS][SF_MAX_INLINE_BYTES]; /* by inline slot */
} sf_index_entry;

void sf_index_entry_encode(uint8_t *out, const sf_schema *s, const sf_index_entry *e);
/* Decodes one entry (s->entry_size bytes) and checks reserved bytes and the
 * zero high bytes of inline values. Does not check offsets (see
 * sf_index_check). */
int sf_index_entry_decode(sf_index_entry *e, const sf_schema *s, const uint8_t *in);

/* Byte offset (relative to the record's offset) and stored size of each
 * payload field of a record, in schema order; returns the record's stored
 * size. var_len is indexed by var slot (any field with a slot takes its
 * size from there, compressed fixed fields included). Fails with SF_E_LIMIT on overflow. */
int sf_record_layout(const sf_schema *s, uint32_t align, const uint64_t *var_len,
                     uint64_t *field_off, uint64_t *field_size, uint64_t *record_size);

/* Checks the whole decoded index of one shard for the structural rules of
 * SPEC.md ("Records", "Index"): offsets contiguous under the alignment, sizes
 * equal to the layout, keys contiguous and valid, inline bool values 0 or 1,
 * index right after the last record. (Keys distinct across the dataset:
 * sf_keyset.) `index` holds h->index_size bytes. On failure, sets the detail with
 * the record number and returns SF_E_CORRUPT or SF_E_LIMIT. */
int sf_index_check(const sf_schema *s, const sf_shard_header *h, const uint8_t *index);

/* Offset of the first byte of p[0..len) that is neither 0 nor 1, or
 * UINT64_MAX when there is none. */
uint64_t sf_first_non_bool(const uint8_t *p, uint64_t len);
/* Checks the value of payload field k (k < s->n_payload: the k-th fixed or
 * variable field, as it is after decompression) against SPEC.md "Data
 * types": the bytes of a bool value are 0 or 1. Returns 0, or SF_E_CORRUPT
 * with the detail naming the field and the byte. Costs one test for a
 * field that is not bool. The check of a record, like its checksum. */
int sf_payload_value_check(const sf_schema *s, uint32_t k, const uint8_t *value, uint64_t len);

/* ---- manifest ---- */
typedef struct sf_shard_desc {
    uint64_t record_count;
    uint64_t first_record;
    uint64_t file_size;
    uint64_t header_checksum;
    uint64_t index_checksum;
} sf_shard_desc;

typedef struct sf_manifest {
    uint16_t version_major, version_minor;
    uint32_t required_flags, optional_flags;
    uint32_t align;
    uint64_t record_count;
    uint64_t dataset_id;
    sf_schema schema;
    uint64_t shard_count;
    sf_shard_desc *shards; /* shard_count entries, malloc'd by decode */
    uint32_t metadata_size;
    uint8_t *metadata;     /* metadata_size bytes, malloc'd by decode */
} sf_manifest;

/* Size of the encoded manifest. */
uint64_t sf_manifest_encoded_size(const sf_manifest *m);
/* Encodes into `out` (sf_manifest_encoded_size bytes). */
void sf_manifest_encode(uint8_t *out, const sf_manifest *m);
/* Decodes and validates a whole manifest file held in buf[0..len). */
int sf_manifest_decode(sf_manifest *m, const uint8_t *buf, uint64_t len);
/* Frees what decode allocated. NULL ok. */
void sf_manifest_clear(sf_manifest *m);

/* Metadata entries: metadata.h. */
/* "part": u32 K, u32 N, u64 whole dataset_id, whole records, whole shards,
 * the part's first record and first shard within the whole. */
#define SF_PART_INFO_SIZE 48
/* "part_input" (1.2): u64 files hash, u64 values hash of the input the
 * part was planned from; merge compares them across parts. */
#define SF_PART_INPUT_SIZE 16
/* "part_files" (1.3): u64 names hash, u64 names-and-sizes hash; for a list
 * input then u64 list size, u64 list hash and the list's base name (1 to
 * 255 bytes, no NUL). */
#define SF_PART_FILES_SIZE 16
#define SF_PART_FILES_LIST_SIZE 32
/* Bytes of the "image_reencode" metadata value (SPEC.md "Metadata"). */
#define SF_IMAGE_REENCODE_SIZE 16

/* Minimum and maximum possible size of a manifest file, for callers that
 * must cap a read before allocating. */
#define SF_MANIFEST_MIN_SIZE (SF_MANIFEST_HEADER_SIZE + SF_FIELD_DESC_SIZE + SF_MANIFEST_TRAILER_SIZE)
#define SF_MANIFEST_MAX_SIZE                                                                   \
    ((uint64_t)SF_MANIFEST_HEADER_SIZE + (uint64_t)SF_MAX_FIELDS * SF_FIELD_DESC_SIZE +         \
     (uint64_t)SF_MAX_SHARDS * SF_SHARD_DESC_SIZE + SF_MAX_METADATA + SF_MANIFEST_TRAILER_SIZE)

/* ---- checksums ---- */
/* XXH3-64, seed 0, of buf[0..len). */
uint64_t sf_hash(const void *buf, size_t len);

/* XXH3_state_t of hash.h: a streaming state from XXH3_createState. */
struct XXH3_state_s;

/* Record checksum (SPEC.md "Checksums"): XXH3-64 over the payload fields'
 * bytes in schema order, padding excluded. field_ptr[k] points at payload
 * field k's bytes, field_size[k] is its length. A record of two or more
 * payload fields is hashed through `scratch`, a state the caller owns and
 * reuses (one per thread, made before its hot loop), so nothing is
 * allocated here and nothing can fail; with one field or none, scratch may
 * be NULL. */
uint64_t sf_record_hash(struct XXH3_state_s *scratch, const uint8_t *const *field_ptr,
                        const uint64_t *field_size, uint32_t n_payload);
/* sf_record_hash of ranges in a file mapping, under the fault guard
 * (fault_guard.h): 0, SF_E_TRUNCATED or -EIO. */
int sf_guarded_hash(uint64_t *out, struct XXH3_state_s *scratch, const uint8_t *const *ptr,
                    const uint64_t *len, uint32_t n);

/* First record offset in a shard with this alignment. */
static inline uint64_t sf_data_offset(uint32_t align)
{
    uint64_t a = align;
    return (SF_SHARD_HEADER_SIZE + a - 1) / a * a;
}

/* 1 when `a` is a power of two within [1, SF_MAX_ALIGN]. */
static inline int sf_valid_align(uint64_t a)
{
    return a >= 1 && a <= SF_MAX_ALIGN && (a & (a - 1)) == 0;
}

#endif
