/*
 * libgpumem.so must load with dlopen() (Python's ctypes, plugin hosts): no
 * initial-exec TLS that would demand static TLS space, every symbol resolved.
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    void *lib = NULL;
    int (*version)(void) = NULL;

    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/libgpumem.so\n", argv[0]);
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(%s) failed: %s\n", argv[1], dlerror());
        return 1;
    }
    *(void **)&version = dlsym(lib, "gm_version");
    if (version == NULL || version() <= 0) {
        fprintf(stderr, "gm_version missing or wrong\n");
        return 1;
    }
    printf("dlopen ok, gm_version() = %d\n", version());
    dlclose(lib);
    return 0;
}
