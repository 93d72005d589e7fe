/* An open .npy input file: header parsed, data ready to be read. */
#ifndef SF_INPUTS_NPY_FILE_H
#define SF_INPUTS_NPY_FILE_H

#include <stdint.h>

#include "format.h"
#include "npy.h"
#include "path.h"

typedef struct input_npy_file {
    int fd;
    uint64_t file_size;
    input_npy_info info;
    char path[SF_PATH_CAP];
} input_npy_file;

/* Opens dir/name and parses its header; errors name the file. A dir/name
 * too long for SF_PATH_CAP is -ENAMETOOLONG naming the folder. */
int input_npy_file_open(input_npy_file *f, const char *dir, const char *name);
/* Fails with SF_E_SCHEMA, naming the file, unless the array has the field's
 * dtype and shape. `first` names the file the schema came from. */
int input_npy_file_check(const input_npy_file *f, const sf_field *field, const char *first);
/* Reads the array into dst (info.data_size bytes) as C-order little-endian.
 * Non-native arrays go through *scratch (grown as needed, caller frees). */
int input_npy_file_read(input_npy_file *f, uint8_t *dst, uint8_t **scratch, uint64_t *scratch_cap);
void input_npy_file_close(input_npy_file *f);

#endif
