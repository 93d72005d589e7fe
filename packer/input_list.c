/* Placeholder until the list input lands. */
#include "format/error_internal.h"
#include "pack_internal.h"

int pack_input_list(pack_input *in, const char *path)
{
    (void)in;
    return sf_fail(SF_E_UNSUPPORTED, "%s: list inputs are not implemented yet", path);
}
