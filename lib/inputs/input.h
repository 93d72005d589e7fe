/* The inputs layer: the formats pack reads (npy, imagefolder, list, tar) and
 * export writes back. Each format is one file, input_NAME.c, that defines
 * one input_format, and one name in INPUT_FORMAT_LIST below; pack and
 * export find formats through that table (export's fallback layout is
 * npy's). Discovery lists an input and orders its samples; a cursor reads
 * one value at a time. Uses format/ and base/ only. */
#ifndef SF_INPUTS_INPUT_H
#define SF_INPUTS_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "format.h"

struct input_set;

/* ---- export: a dataset written back in a format's layout ----
 * lib/dataset/export.c is the driver and does everything that keeps data
 * safe: the output folder's rules, planning every name and refusing
 * collisions before anything is written, creating each file, fetching each
 * value (checked, under the fault guard), counting files. A format only
 * names the files and lays out their bytes. */

/* Longest path export names, relative to its folder, NUL included:
 * "{key}.{field}", "{field}_{key}.npy". */
#define INPUT_EXPORT_NAME_MAX (SF_MAX_KEY + SF_MAX_NAME + 8)
/* Room for the bytes a file starts with (a .npy header). */
#define INPUT_EXPORT_HEAD_MAX 4096

typedef struct input_layout {
    const sf_schema *schema;
    int data_field; /* the field whose values are whole files (imagefolder, list); -1: none */
} input_layout;

/* The value of field `field` of the sample being written, valid until the
 * next call: what export fetched from the dataset. */
typedef int (*input_value_fn)(void *ctx, uint32_t field, const void **value, uint64_t *size);

typedef struct input_export {
    /* Fills in a layout for l->schema (data_field is -1 on entry): 0, or 1
     * when this format cannot lay that schema out (imagefolder and list
     * need a variable-length bytes field), and export writes .npy files
     * instead. NULL: any schema. */
    int (*layout)(input_layout *l);
    /* The path, relative to the output folder, of the file that `field` of
     * the sample keyed key[0, klen) is written to, into buf; returns its
     * length, or 0 when the field writes no file of its own. Keys and field
     * names are valid (SPEC.md "Schema"), so no name leaves the folder. */
    size_t (*file_name)(char buf[INPUT_EXPORT_NAME_MAX], const input_layout *l, const char *key, size_t klen,
                        uint32_t field);
    /* The bytes a file of `field` starts with, before its value of `size`
     * bytes (a .npy header), into buf (INPUT_EXPORT_HEAD_MAX bytes); *len
     * is 0 for none. Fails naming the field. NULL: files hold the value
     * alone. */
    int (*file_head)(uint8_t *buf, size_t *len, const sf_field *field, uint64_t size);
    /* A file written after every sample's own files (so it exists only for
     * a complete export), one row per sample: list.csv. NULL: none. */
    const char *list_name;
    int (*list_header)(FILE *f, const input_layout *l);
    /* One sample's row: its key, then the values (through `value`) of the
     * fields that write no file of their own. */
    int (*list_row)(FILE *f, const input_layout *l, const char *key, size_t klen, input_value_fn value,
                    void *ctx);
} input_export;

/* An input format. The formats share helpers (input_util.h, natsort.h,
 * number_text.h) but never call back into the table. */
typedef struct input_format {
    const char *name; /* "npy", "imagefolder", "list", "tar": --input-format and the manifest's "source" */
    /* Detection (--input-format auto). A format with a file_hint takes a
     * file: the first, in the order of INPUT_FORMAT_LIST, for which
     * detect(path, 0) is 1. One with a dir_hint takes a folder: it marks
     * the folder's entries for which detect(name, is_dir) is 1. A folder is
     * the one format that marks any of its entries; when entries of more
     * than one are found, detection refuses, naming each format and what
     * marked it, rather than pick one: the user names the format. The
     * hints say what the format looks for, in messages: ".npy files", "a
     * .csv, .tsv or .txt list"; dir_count names a count of the entries
     * that marked it, one and many: "tar file", "tar files". */
    const char *dir_hint, *file_hint;
    const char *dir_count[2];
    int (*detect)(const char *name, int is_dir);
    /* Asked only of a folder whose entries several formats mark, for each
     * entry this format marked (`name` in the folder open at dirfd):
     * whether it still marks the folder, 1, or not, 0. ImageFolder's: a
     * folder holding an image file, so that a folder of tars with other
     * folders in it is still a tar input (those folders are skipped). NULL:
     * every entry detect marks. */
    int (*detect_confirm)(int dirfd, const char *name);
    /* Lists the input at `path`, orders its samples, derives and finishes
     * the schema and fills keys and sizes (input_alloc); errors name the
     * input. Called on an input_set that input_open prepared; what it
     * leaves in in->priv is freed by `free`, also after a failure. */
    int (*discover)(struct input_set *in, const char *path);
    /* Each worker thread opens its own cursor; a shard's samples are read
     * in order, which lets streaming formats (tar) read forward. */
    int (*cursor_open)(const struct input_set *in, void **cursor);
    /* Writes exactly in->sizes[sample * field_count + field] bytes to dst.
     * Errors name the input file. After discovery pack may set in->sizes of
     * values it stores re-encoded (--image-max-side) and then never reads
     * those here; so a format that reads more than the value asked for (tar:
     * all of a sample's members) checks the input against the sizes its own
     * discovery found, never against in->sizes. */
    int (*read)(void *cursor, const struct input_set *in, uint64_t sample, uint32_t field,
                uint8_t *dst);
    void (*cursor_close)(void *cursor);
    void (*free)(struct input_set *in); /* frees in->priv; NULL: nothing to free */
    /* Where the value of `field` of `sample` comes from, for messages about
     * its content (pack's image checks): the file's path. NULL: the input's
     * path with the sample's key and the field's name. */
    void (*value_source)(char *buf, size_t cap, const struct input_set *in, uint64_t sample, uint32_t field);
    input_export export; /* writing a dataset back in this format's layout */
} input_format;

/* The formats, in the order detection asks them about a file (and lists
 * them in messages). Adding one: a file
 * input_NAME.c defining `const input_format input_format_NAME`, and X(NAME)
 * here. */
#define INPUT_FORMAT_LIST(X) X(npy) X(tar) X(imagefolder) X(list)
#define INPUT_FORMAT_DECLARE(name) extern const input_format input_format_##name;
INPUT_FORMAT_LIST(INPUT_FORMAT_DECLARE)
#undef INPUT_FORMAT_DECLARE

/* Every sample found by discovery, in dataset order. */
typedef struct input_set {
    const input_format *ops; /* its format */
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
    /* Every input file discovery stat'ed, as order-free sums of a hash
     * of each one's name, size and modification time (files_sum), of its
     * name and size (sizes_sum) and of its name alone (names_sum)
     * (input_note_file), so that every machine of a --part run gets the
     * same values whatever order its directories list in, and merge can
     * tell which of them differ. */
    uint64_t files_sum, sizes_sum, names_sum, file_count;
    /* A list input: its list file (base name, size, XXH3-64 of its bytes),
     * which alone holds the labels and other columns. */
    int has_list;
    uint64_t list_size, list_hash;
    char list_name[256];
} input_set;

/* The format called `name`; NULL when there is none. */
const input_format *input_format_find(const char *name);
/* Discovers the input at `path` as the format named `format`, or as the one
 * detection picks when `format` is NULL or "auto". in->ops is the format
 * (NULL when none was found), also when discovery fails; `in` always needs
 * input_free. */
int input_open(input_set *in, const char *path, const char *format);
void input_free(input_set *in);
/* Where the value of `field` of `sample` comes from, for messages: its
 * file's path where the format knows it (input_format.value_source). */
void input_value_source(char *buf, size_t cap, const input_set *in, uint64_t sample, uint32_t field);
/* The identity of the input's files: a hash of file_count with files_sum
 * (names, sizes and modification times), sizes_sum (names and sizes) and
 * names_sum (names), SPEC.md "part_input" and "part_files". */
void input_files_hashes(const input_set *in, uint64_t *files, uint64_t *sizes, uint64_t *names);

#endif
