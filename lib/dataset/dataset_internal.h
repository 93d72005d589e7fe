/* The opened dataset, shared by every part of the reader. */
#ifndef SF_READER_DATASET_INTERNAL_H
#define SF_READER_DATASET_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <zstd.h>

#include "format.h"
#include "metadata.h"
#include "shard_file.h"
#include "shardfeed/dataset.h"

typedef struct sf_open_shard {
    char name[SF_SHARD_NAME_MAX];
    int fd;
    sf_shard_meta meta;   /* header, footer, index bytes */
    const uint8_t *map;   /* read-only mmap of the whole file, or NULL until used */
} sf_open_shard;

struct sf_dataset {
    char *dir;
    sf_manifest manifest;
    sf_open_shard *shards;
    pthread_mutex_t map_lock; /* serialises lazy mmaps and dctx */
    ZSTD_DCtx *dctx;          /* random access's decompression context, when idle */
    char source[33];          /* metadata "source", "" when absent */
    uint32_t class_count;     /* metadata "class_names" */
    sf_class_name *classes;   /* into manifest.metadata */
};

/* Fills source and the class name table from the (validated) manifest. */
int sf_dataset_load_metadata(sf_dataset *ds);
void sf_dataset_free_metadata(sf_dataset *ds);

/* Shard holding `sample`; *local receives the record number within it. */
uint64_t sf_dataset_locate(const sf_dataset *ds, uint64_t sample, uint64_t *local);
/* Whether the file of `shard` is now shorter than when the dataset was
 * opened (*now: its size), for the detail of a read that came up short:
 * a shard truncated while being read. */
int sf_dataset_shard_shrank(const sf_dataset *ds, uint64_t shard, uint64_t *now);
/* Decodes the index entry of record `local` of shard `shard`. */
void sf_dataset_entry(sf_index_entry *e, const sf_dataset *ds, uint64_t shard, uint64_t local);

#endif
