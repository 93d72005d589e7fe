/* The inputs layer: the formats pack reads (npy, imagefolder, list, tar) and
 * export writes back. Discovery lists an input and orders its samples; a
 * cursor reads one value at a time. Uses format/ and base/ only. */
#ifndef SF_INPUTS_INPUT_H
#define SF_INPUTS_INPUT_H

#include <stdint.h>
#include <sys/stat.h>

#include "format.h"

struct input_set;

/* What an input format provides besides discovery: reading one value of
 * one sample. Each worker thread opens its own cursor; a shard's samples
 * are read in order, which lets streaming formats (tar) read forward. */
typedef struct input_format {
    const char *name; /* "npy", "imagefolder", "list", "tar": the manifest's "source" */
    int (*cursor_open)(const struct input_set *in, void **cursor);
    /* Writes exactly in->sizes[sample * field_count + field] bytes to dst.
     * Errors name the input file. */
    int (*read)(void *cursor, const struct input_set *in, uint64_t sample, uint32_t field,
                uint8_t *dst);
    void (*cursor_close)(void *cursor);
    void (*free)(struct input_set *in); /* frees in->priv */
} input_format;

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

/* Discovery per format. Each lists its input, orders the samples, derives
 * and finishes the schema and fills sizes; errors name the input. */
int input_discover_npy(input_set *in, const char *dir);
int input_discover_imagefolder(input_set *in, const char *root);
int input_discover_list(input_set *in, const char *list_file);
int input_discover_tar(input_set *in, const char *path);
/* Picks the format of `path` ("auto") or uses the one named. */
int input_open(input_set *in, const char *path, const char *format);
void input_free(input_set *in);
/* "a/b", malloc'd; NULL when out of memory. */
char *input_path_join(const char *a, const char *b);
/* 1 when s ends with suffix, ignoring ASCII case. */
int input_ends_with(const char *s, const char *suffix);
/* 1 for the tar file names pack reads (.tar, .tar.gz, .tgz, .tar.zst, ...). */
int input_is_tar_name(const char *name);
/* Allocates keys[] and sizes[] for n samples (zeroed), sets sample_count. */
int input_alloc(input_set *in, uint64_t n);
/* Adds an input file to in->files_sum: `name` as every machine sees it
 * (relative to the input), its size and its modification time in ns
 * (input_mtime_ns), all from the stat discovery does anyway. */
void input_note_file(input_set *in, const char *name, uint64_t size, uint64_t mtime_ns);
uint64_t input_mtime_ns(const struct stat *st);
/* The identity of the input's files: a hash of files_sum and file_count. */
uint64_t input_files_hash(const input_set *in);

/* Opens an input file (a .npy, an image, a list or a row's file, a tar)
 * for reading. The open itself is non-blocking, so a FIFO or a device put
 * where a file was cannot hang the pack; anything but a regular file is
 * refused, naming it. Returns the fd, with *st filled, or a negative code
 * with "PATH: reason" in sf_last_error(). */
int input_open_file(const char *path, struct stat *st);
#endif
