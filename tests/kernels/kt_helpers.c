/* Helpers for the kernel suites; see kt_helpers.h. */
#include <stdlib.h>
#include <string.h>

#include "kt_helpers.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

gm_context *kt_context(int warp_size)
{
    gm_context_options o;
    gm_context *ctx = NULL;

    gm_context_options_default(&o);
    o.backend = GM_BACKEND_HOST;
    o.host_warp_size = warp_size;
    assert_ok(gm_context_create(&o, &ctx));
    return ctx;
}

void kt_destroy(gm_context **ctx_p)
{
    if (*ctx_p == NULL)
        return;
    /* gm_context_destroy does not call this yet; calling it twice is harmless. */
    gm__kernels_context_teardown(*ctx_p);
    gm_context_destroy(ctx_p);
}

gm_array *kt_device(gm_context *ctx, gm_dtype dtype, int64_t n, const void *host)
{
    gm_array *a = NULL;
    gm_ndview v;

    assert_ok(gm_device_array(ctx, 1, &n, dtype, GM_ORDER_C, &a));
    if (host != NULL) {
        assert_ok(gm_ndview_init((void *)(uintptr_t)host, dtype, 1, &n, NULL, GM_ORDER_C, &v));
        assert_ok(gm_array_copy_to_device(a, &v, NULL));
    }
    return a;
}

void kt_to_host(gm_array *array, gm_dtype dtype, int64_t n, void *host)
{
    gm_ndview v;

    assert_ok(gm_ndview_init(host, dtype, 1, &n, NULL, GM_ORDER_C, &v));
    assert_ok(gm_array_copy_to_host(array, &v, NULL));
}

uint32_t kt_blocks(int64_t n, uint32_t block)
{
    return n <= 0 ? 1u : (uint32_t)((n + block - 1) / block);
}

int64_t kt_rand(int64_t lo, int64_t hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (int64_t)(rng_state % (uint64_t)(hi - lo + 1));
}

float kt_randf(void)
{
    return (float)kt_rand(-1000000, 999999) / 1000000.0f;
}

gm_kernel *kt_kernel(gm_context *ctx, const char *name)
{
    gm_kernel *k = NULL;

    assert_ok(gm_register_image_set(&kt_test_set));
    assert_ok(gm_kernel_find(ctx, name, &k));
    assert_non_null(k);
    return k;
}
