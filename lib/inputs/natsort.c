#include <string.h>

#include "natsort.h"

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int input_natcmp(const char *a, const char *b)
{
    const char *pa = a, *pb = b;
    while (*pa && *pb) {
        if (is_digit(*pa) && is_digit(*pb)) {
            /* Compare numbers of any length without overflow: skip leading
             * zeros, then the longer run is larger, else compare digits. */
            while (*pa == '0')
                pa++;
            while (*pb == '0')
                pb++;
            size_t la = 0, lb = 0;
            while (is_digit(pa[la]))
                la++;
            while (is_digit(pb[lb]))
                lb++;
            if (la != lb)
                return la < lb ? -1 : 1;
            int c = memcmp(pa, pb, la);
            if (c)
                return c < 0 ? -1 : 1;
            pa += la;
            pb += lb;
            continue;
        }
        if (*pa != *pb)
            return (unsigned char)*pa < (unsigned char)*pb ? -1 : 1;
        pa++;
        pb++;
    }
    if (*pa || *pb)
        return *pa ? 1 : -1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}
