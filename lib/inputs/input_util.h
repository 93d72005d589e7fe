/* What the input formats share (lib/inputs/input_util.c): paths, names,
 * opening input files, the sample tables, the input's file identity. The
 * formats use these, never input.c's table. */
#ifndef SF_INPUTS_INPUT_UTIL_H
#define SF_INPUTS_INPUT_UTIL_H

#include <stdint.h>
#include <sys/stat.h>

#include "input.h"

/* An empty set for the input at `path`, about to be discovered as
 * `format`: input_free frees whatever discovery leaves in it. */
int input_set_init(input_set *in, const char *path, const input_format *format);
/* Allocates keys[] and sizes[] for n samples (zeroed), sets sample_count;
 * sizes has schema.field_count values per sample. */
int input_alloc(input_set *in, uint64_t n);

/* "a/b", malloc'd; NULL when out of memory. */
char *input_path_join(const char *a, const char *b);
/* 1 when s ends with suffix, ignoring ASCII case. */
int input_ends_with(const char *s, const char *suffix);

/* Opens an input file (a .npy, an image, a list or a row's file, a tar)
 * for reading. The open itself is non-blocking, so a FIFO or a device put
 * where a file was cannot hang the pack; anything but a regular file is
 * refused, naming it. Returns the fd, with *st filled, or a negative code
 * with "PATH: reason" in sf_last_error(). */
int input_open_file(const char *path, struct stat *st);

/* Adds an input file to in->files_sum: `name` as every machine sees it
 * (relative to the input), its size and its modification time in ns
 * (input_mtime_ns), all from the stat discovery does anyway. */
void input_note_file(input_set *in, const char *name, uint64_t size, uint64_t mtime_ns);
uint64_t input_mtime_ns(const struct stat *st);

/* Export layouts that write each sample's file bytes to the path its key
 * names (imagefolder, list): the data field is the first variable-length
 * bytes field, and no other field writes a file of its own. */
int input_data_file_layout(input_layout *l);
size_t input_data_file_name(char buf[INPUT_EXPORT_NAME_MAX], const input_layout *l, const char *key,
                            size_t klen, uint32_t field);

/* A cursor for formats that keep nothing between reads (read gets NULL). */
int input_no_cursor_open(const input_set *in, void **cursor);
void input_no_cursor_close(void *cursor);

#endif
