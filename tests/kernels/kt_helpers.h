/*
 * Helpers for the kernel suites: host-simulator contexts with a chosen warp
 * size, float / int device arrays from host buffers and back, launches of
 * 1-D grids, seeded random sizes, and the test kernels of sim_kernels.c
 * (registered through the public registry like an application's own).
 */
#ifndef GM_TEST_KT_HELPERS_H
#define GM_TEST_KT_HELPERS_H

#include <stdint.h>

#include "gm_test.h"
#include "kernels_internal.h"

/* A host-simulator context with warp size 32 or 64. */
gm_context *kt_context(int warp_size);

/* Unload the context's modules, then destroy it. */
void kt_destroy(gm_context **ctx_p);

/* A device array of n elements of dtype holding the bytes of `host` (NULL: uninitialized). */
gm_array *kt_device(gm_context *ctx, gm_dtype dtype, int64_t n, const void *host);

/* Copy a 1-D device array of n elements of dtype into `host`. */
void kt_to_host(gm_array *array, gm_dtype dtype, int64_t n, void *host);

/* Blocks needed for n threads in blocks of `block`. */
uint32_t kt_blocks(int64_t n, uint32_t block);

/* Seeded pseudo-random integer in [lo, hi]. */
int64_t kt_rand(int64_t lo, int64_t hi);

/* Seeded pseudo-random float in [-1, 1). */
float kt_randf(void);

/* The test kernels (sim_kernels.c) as an image set and as a table. */
extern const gm_host_table kt_test_table;
extern const gm_image_set kt_test_set;

/* Find a kernel (built-in or test) on the context, asserting success. */
gm_kernel *kt_kernel(gm_context *ctx, const char *name);

#endif
