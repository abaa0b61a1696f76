/*
 * Reading a whole file (GPU images, fixtures) in tests, with or without
 * cmocka: a header of its own so that the programs without cmocka
 * (tests/hsa/hsa_conformance.c) share it too.
 */
#ifndef GM_TEST_FILE_H
#define GM_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* The whole file at `path` in a malloc'd buffer (its size in *bytes_p), or NULL. */
static inline void *gm_test_read_file(const char *path, size_t *bytes_p)
{
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    char *data = NULL;
    long size = 0;

    *bytes_p = 0;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size > 0 && fseek(f, 0, SEEK_SET) == 0)
        data = malloc((size_t)size);
    if (data != NULL && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data != NULL)
        *bytes_p = (size_t)size;
    return data;
}

#endif
