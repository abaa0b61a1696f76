/* Run-time version, from the same header meson reads. */
#include "core.h"

#define GM__STR2(x) #x
#define GM__STR(x)  GM__STR2(x)

int gm_version(void)
{
    return GM_VERSION;
}

const char *gm_version_string(void)
{
    return GM__STR(GM_VERSION_MAJOR) "." GM__STR(GM_VERSION_MINOR) "." GM__STR(GM_VERSION_PATCH);
}
