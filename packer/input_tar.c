/* Placeholder until the tar input lands. */
#include "format/error_internal.h"
#include "pack_internal.h"

int pack_input_tar(pack_input *in, const char *path)
{
    (void)in;
    return sf_fail(SF_E_UNSUPPORTED, "%s: tar inputs are not implemented yet", path);
}
