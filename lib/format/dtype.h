/* What the format layer adds to the public vocabulary (shardfeed/types.h):
 * byte-swapping units for the .npy codec and the packer. */
#ifndef SF_FORMAT_DTYPE_H
#define SF_FORMAT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "shardfeed/types.h"

/* Size of one byte-swappable unit: the element size, except complex types
 * whose real and imaginary parts swap separately. 0 for an unknown code. */
size_t sf_dtype_swap_unit(int dtype);

#endif
