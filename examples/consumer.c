/* Smallest program built against an installed gpumem through pkg-config. */
#include <stdio.h>

#include <gpumem/gpumem.h>

int main(void)
{
    if (gm_version() != GM_VERSION) {
        fprintf(stderr, "header %d and library %d disagree\n", GM_VERSION, gm_version());
        return 1;
    }
    printf("linked gpumem %s\n", gm_version_string());
    return 0;
}
