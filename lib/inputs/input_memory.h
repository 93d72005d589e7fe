/* Inputs held in memory: the list parser and the tar scan on a buffer, for
 * the unit tests and the fuzz targets (tests/fuzz/fuzz_list.c, fuzz_tar.c).
 * Each prepares `in` as input_open does (it always needs input_free) and
 * discovers it as the file `name`, whose name counts as on disk (a list's
 * delimiter comes from its suffix). */
#ifndef SF_INPUTS_INPUT_MEMORY_H
#define SF_INPUTS_INPUT_MEMORY_H

#include <stddef.h>

#include "input.h"

/* The list buf[0, len), copied. The files its rows name are not looked
 * at: field "data" has size 0 and must not be read. */
int input_list_open_memory(input_set *in, const char *name, const void *buf, size_t len);
/* The tar buf[0, len) (any compression), which must stay until input_free:
 * cursors read every value from it. SF_E_UNSUPPORTED without libarchive. */
int input_tar_open_memory(input_set *in, const char *name, const void *buf, size_t len);

#endif
