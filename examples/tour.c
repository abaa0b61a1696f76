/* Placeholder until the views land: replaced by the tour of the library. */
#include <stdio.h>

#include <gpumem/gpumem.h>

int main(void)
{
    printf("gpumem %s\n", gm_version_string());
    return 0;
}
