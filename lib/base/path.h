/* Paths made of a folder and a name, never cut short. */
#ifndef SF_BASE_PATH_H
#define SF_BASE_PATH_H

#include <stddef.h>

/* The kernel's PATH_MAX (with the NUL): open and friends refuse a longer
 * path with ENAMETOOLONG, so a buffer of this size holds any usable path. */
#define SF_PATH_CAP 4096

/* Writes "DIR/NAME" into buf (cap bytes). A path that does not fit is not
 * cut (cut, it would name another file: "<dir>/shard-00" for
 * "<dir>/shard-000012.sfs"): -ENAMETOOLONG with sf_last_error() naming
 * the folder (its first 200 bytes), its length and the most that NAME
 * leaves room for; buf is then "". 0 on success. */
int sf_path_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
