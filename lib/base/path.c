/* Paths of a folder and a name (path.h). */
#include "path.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error_internal.h"

int sf_path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n >= 0 && (size_t)n < cap)
        return 0;
    if (cap)
        buf[0] = '\0';
    size_t room = cap > strlen(name) + 2 ? cap - 2 - strlen(name) : 0;
    return sf_fail(-ENAMETOOLONG, "%.200s...: the folder's path is too long (%zu bytes; with /%s at most %zu)",
                   dir, strlen(dir), name, room);
}
