/*
 * Helpers shared by the HSA backend tests that run on the runtime double:
 * open a backend context on a freshly reset double, close it and prove that
 * nothing leaked and no runtime rule was broken, read code-object fixtures,
 * and a host implementation of the axpy test kernel.
 */
#ifndef GM_TESTS_HSA_TEST_UTIL_H
#define GM_TESTS_HSA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gm_test.h"
#include "hsa_runtime_double.h"

extern const gm_backend_ops *const hsa_ops;

/* Reset the double with cfg (NULL: defaults) and open device `device_id`. */
gm_backend_ctx *hsa_test_open(const hsa_double_config *cfg, int32_t device_id);

/* fini, then fail on leaked runtime objects or recorded violations. */
void hsa_test_close(gm_backend_ctx *bctx);

/* Fail the test if the double recorded a violation. */
void hsa_test_assert_no_violations(void);

/* Fail unless every runtime object is released. */
void hsa_test_assert_nothing_live(void);

/* Read the file an environment variable names (malloc'ed); NULL if unset/unreadable. */
void *hsa_test_read_fixture(const char *env, size_t *bytes_p);

/* Arguments of the axpy kernel as laid out by the code object (offsets 0, 8, 16, 24). */
typedef struct axpy_args {
    float a;
    const float *x;
    float *y;
    int32_t n;
} axpy_args;

/* Host axpy for the double: y[i] = a * x[i] + y[i] + bias[i % 4]; user: int32_t bias[4]
 * address (NULL: zeros). */
void hsa_test_axpy_host(const hsa_kernel_dispatch_packet_t *packet, void *user);

/* Wait until a signal is below 1 and return its value, failing the test after 5 s. A
 * runtime wait may return before its condition holds (hsa.h; the double does so at times),
 * so this waits again until it does. */
hsa_signal_value_t hsa_test_wait_done(hsa_signal_t signal);

/* Device helpers: allocate and copy synchronously, failing the test on error. */
gm_devptr hsa_test_to_device(gm_backend_ctx *bctx, const void *host, size_t bytes);
void hsa_test_to_host(gm_backend_ctx *bctx, void *host, gm_devptr dev, size_t bytes);

/* A 1-D copy descriptor. */
gm_copy_desc hsa_test_copy1d(gm_copy_side dst_side, gm_devptr dst, gm_copy_side src_side,
                             gm_devptr src, size_t bytes);

#endif
