/* An open .npy input file: header parsed, data ready to be read. */
#ifndef SF_PACKER_NPY_FILE_H
#define SF_PACKER_NPY_FILE_H

#include <stdint.h>

#include "format.h"
#include "npy.h"

typedef struct npy_file {
    int fd;
    uint64_t file_size;
    npy_info info;
    char path[4096];
} npy_file;

/* Opens dir/name and parses its header; errors name the file. */
int npy_file_open(npy_file *f, const char *dir, const char *name);
/* Fails with SF_E_SCHEMA, naming the file, unless the array has the field's
 * dtype and shape. `first` names the file the schema came from. */
int npy_file_check(const npy_file *f, const sf_field *field, const char *first);
/* Reads the array into dst (info.data_size bytes) as C-order little-endian.
 * Non-native arrays go through *scratch (grown as needed, caller frees). */
int npy_file_read(npy_file *f, uint8_t *dst, uint8_t **scratch, uint64_t *scratch_cap);
void npy_file_close(npy_file *f);

#endif
