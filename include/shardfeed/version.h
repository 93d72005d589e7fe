/* Library version. The on-disk format has its own version (SPEC.md). */
#ifndef SHARDFEED_VERSION_H
#define SHARDFEED_VERSION_H

#define SF_VERSION_MAJOR 0
#define SF_VERSION_MINOR 1
#define SF_VERSION_PATCH 0
#define SF_VERSION_STRING "0.1.0"

#endif
