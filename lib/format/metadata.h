/* Manifest metadata (SPEC.md "Metadata"): a sequence of entries
 * {u32 key_length, u32 value_length, key, value}, each key at most once.
 * The format layer owns every key SPEC.md defines: how it is encoded, how
 * it is checked, how it is read back. Writers build metadata with a
 * builder, readers walk it with an iterator or use the typed readers below;
 * nothing else parses entry bytes. */
#ifndef SF_FORMAT_METADATA_H
#define SF_FORMAT_METADATA_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

/* ---- entries ---- */

typedef struct sf_metadata_iter {
    const uint8_t *p;
    uint32_t size, pos;
} sf_metadata_iter;

/* Walks metadata that sf_metadata_check accepted (a decoded manifest's). */
void sf_metadata_iter_init(sf_metadata_iter *it, const uint8_t *metadata, uint32_t size);
/* The next entry: 1 with key and value set, 0 at the end. */
int sf_metadata_next(sf_metadata_iter *it, const uint8_t **key, uint32_t *key_len,
                     const uint8_t **value, uint32_t *value_len);

/* The value of `key` in a decoded (so checked) manifest: 1 with value and
 * len set, 0 when absent (value NULL, len 0). */
int sf_metadata_find(const uint8_t **value, uint32_t *len, const sf_manifest *m, const char *key);

/* Checks untrusted metadata bytes: framing, key lengths, no key twice, and
 * the value rules of the keys SPEC.md defines. SF_E_CORRUPT naming the
 * entry. */
int sf_metadata_check(const uint8_t *metadata, uint32_t size);

typedef struct sf_metadata_builder {
    uint8_t *buf;
    uint32_t size, cap;
} sf_metadata_builder; /* zero-initialise; sf_metadata_builder_free after */

/* Appends an entry (the caller adds each key once). SF_E_INVALID for a key
 * of 0 or more than 255 bytes, SF_E_LIMIT past SF_MAX_METADATA, -ENOMEM. */
int sf_metadata_add(sf_metadata_builder *b, const char *key, const void *value, uint32_t len);
void sf_metadata_builder_free(sf_metadata_builder *b);

/* ---- "source" ---- */

/* The input format a dataset was packed from, as a NUL-terminated string
 * in out[33] ("" when absent). */
void sf_metadata_source(char out[33], const sf_manifest *m);

/* ---- "class_names" ---- */

typedef struct sf_class_name {
    const uint8_t *name; /* UTF-8, not NUL-terminated; points into the manifest */
    uint32_t len;
} sf_class_name;

/* Appends "class_names" for labels 0..n-1. SF_E_INVALID naming a name that
 * is not a valid folder name. */
int sf_metadata_add_class_names(sf_metadata_builder *b, char *const *names, uint32_t n);
/* The class names of a decoded manifest: a malloc'd array in *out (free
 * it) pointing into m->metadata, or NULL and 0 when there are none. */
int sf_metadata_class_names(sf_class_name **out, uint32_t *n, const sf_manifest *m);

/* ---- "part", "part_input" and "part_files" ---- */

/* One part K of N of a --part run (SPEC.md "Metadata", "Parts"). */
typedef struct sf_part_info {
    uint32_t index, count;      /* K and N */
    uint64_t whole_dataset_id;  /* dataset_id of the whole pack */
    uint64_t whole_records, whole_shards;
    uint64_t first_record, first_shard; /* of this part within the whole */
    /* "part_input" (format 1.2): the identity of the input the part was
     * planned from, which merge compares across parts. */
    int has_input;
    uint64_t files_hash;  /* names, sizes and modification times */
    uint64_t values_hash; /* a sample of the values */
    /* "part_files" (format 1.3): the same files' names, and names and
     * sizes, apart from their times, so that merge can ignore only the
     * times and say what differs; for a list input, its list file. */
    int has_files;
    uint64_t names_hash, sizes_hash;
    int has_list;
    uint64_t list_size, list_hash; /* bytes, XXH3-64 of them */
    char list_name[256];           /* base name, 1 to 255 bytes */
} sf_part_info;

/* Appends "part", "part_input" and (has_files) "part_files". */
int sf_metadata_add_part(sf_metadata_builder *b, const sf_part_info *p);
/* The part a decoded manifest describes: 1 with *out set, 0 when it is not
 * a part (no "part" entry). */
int sf_metadata_part(sf_part_info *out, const sf_manifest *m);
/* 1 for the keys only a part has ("part", "part_input", "part_files"): a
 * merged dataset drops them. */
int sf_metadata_is_part_key(const uint8_t *key, uint32_t key_len);

/* ---- "image_reencode" ---- */

/* What pack --image-max-side did: images whose longer side exceeded
 * max_side were re-encoded as JPEG of `quality`, `count` of them. */
typedef struct sf_image_reencode {
    uint32_t max_side, quality;
    uint64_t count;
} sf_image_reencode;

/* Appends "image_reencode". */
int sf_metadata_add_image_reencode(sf_metadata_builder *b, const sf_image_reencode *r);
/* 1 with *out set when a decoded manifest has "image_reencode", else 0. */
int sf_metadata_image_reencode(sf_image_reencode *out, const sf_manifest *m);

#endif
