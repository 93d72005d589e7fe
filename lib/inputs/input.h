/* The inputs layer: the formats pack reads (npy, imagefolder, list, tar) and
 * export writes back. Each format is one file, input_NAME.c, that defines
 * one input_format, and one name in INPUT_FORMAT_LIST below: nothing else
 * names a format. Discovery lists an input and orders its samples; a cursor
 * reads one value at a time. Uses format/ and base/ only. */
#ifndef SF_INPUTS_INPUT_H
#define SF_INPUTS_INPUT_H

#include <stdint.h>

#include "format.h"

struct input_set;

/* An input format. The formats share helpers (input_util.h, natsort.h,
 * number_text.h) but never call back into the table. */
typedef struct input_format {
    const char *name; /* "npy", "imagefolder", "list", "tar": --input-format and the manifest's "source" */
    /* Detection (--input-format auto), which asks the formats in the order
     * of INPUT_FORMAT_LIST, the first one that says yes winning. A format
     * with a dir_hint takes a folder: it says yes when detect(name, is_dir)
     * is 1 for any entry of the folder. One with a file_hint takes a file:
     * yes when detect is 1 for the file's own path. The hints say what the
     * format looks for, in messages: ".npy files", "a .csv, .tsv or .txt
     * list". */
    const char *dir_hint, *file_hint;
    int (*detect)(const char *name, int is_dir);
    /* Lists the input at `path`, orders its samples, derives and finishes
     * the schema and fills keys and sizes (input_alloc); errors name the
     * input. Called on an input_set that input_open prepared; what it
     * leaves in in->priv is freed by `free`, also after a failure. */
    int (*discover)(struct input_set *in, const char *path);
    /* Each worker thread opens its own cursor; a shard's samples are read
     * in order, which lets streaming formats (tar) read forward. */
    int (*cursor_open)(const struct input_set *in, void **cursor);
    /* Writes exactly in->sizes[sample * field_count + field] bytes to dst.
     * Errors name the input file. */
    int (*read)(void *cursor, const struct input_set *in, uint64_t sample, uint32_t field,
                uint8_t *dst);
    void (*cursor_close)(void *cursor);
    void (*free)(struct input_set *in); /* frees in->priv */
} input_format;

/* The formats, in the order detection asks them. Adding one: a file
 * input_NAME.c defining `const input_format input_format_NAME`, and X(NAME)
 * here. */
#define INPUT_FORMAT_LIST(X) X(npy) X(tar) X(imagefolder) X(list)
#define INPUT_FORMAT_DECLARE(name) extern const input_format input_format_##name;
INPUT_FORMAT_LIST(INPUT_FORMAT_DECLARE)
#undef INPUT_FORMAT_DECLARE

/* Every sample found by discovery, in dataset order. */
typedef struct input_set {
    const input_format *ops;
    void *priv;             /* the format's own tables */
    char *path;             /* the input as given, for messages */
    uint64_t sample_count;
    char **keys;            /* [sample] */
    uint64_t *sizes;        /* [sample * field_count + field]: value bytes */
    sf_schema schema;       /* finished */
    uint64_t bytes_in;      /* value bytes of all samples */
    char **class_names;     /* ImageFolder: label -> name; NULL otherwise */
    uint32_t class_count;
    uint64_t skipped;       /* files found but not packed (ImageFolder: no image extension) */
    char skipped_example[512];
    /* Every input file discovery stat'ed, as an order-free sum of a hash
     * of each one's name, size and modification time (input_note_file),
     * so that every machine of a --part run gets the same value whatever
     * order its directories list in. */
    uint64_t files_sum, file_count;
} input_set;

/* The format called `name`; NULL when there is none. */
const input_format *input_format_find(const char *name);
/* Discovers the input at `path` as the format named `format`, or as the one
 * detection picks when `format` is NULL or "auto". On failure `in` still
 * needs input_free. */
int input_open(input_set *in, const char *path, const char *format);
void input_free(input_set *in);
/* The identity of the input's files: a hash of files_sum and file_count. */
uint64_t input_files_hash(const input_set *in);

#endif
