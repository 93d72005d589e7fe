#include "format.h"
#include "shardfeed/shardfeed.h"

const char *sf_version(void)
{
    return SF_VERSION_STRING;
}

void sf_format_version(int *major, int *minor)
{
    if (major)
        *major = SF_FORMAT_MAJOR;
    if (minor)
        *minor = SF_FORMAT_MINOR;
}
