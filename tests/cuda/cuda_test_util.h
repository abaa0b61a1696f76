/*
 * Helpers shared by the CUDA backend's tests on the driver test double:
 * open / close a backend context on the double and assert that the driver
 * saw no misuse and holds nothing afterwards.
 */
#ifndef GM_CUDA_TEST_UTIL_H
#define GM_CUDA_TEST_UTIL_H

#include "backend.h"
#include "cuda_driver_double.h"
#include "gm_test.h"

/* The table under test. */
#define CUDA_OPS (&gm__cuda_backend)

/* cmocka group setup / teardown: leak-checking allocator, fresh double. */
int cuda_test_group_setup(void **state);
int cuda_test_group_teardown(void **state);

/* Per-test setup: reset the double (default configuration). */
int cuda_test_setup(void **state);

/* init on device 0 (must succeed), then clear the call log. */
gm_backend_ctx *cuda_test_open(void);

/* fini, then assert the driver holds nothing and saw no violation. */
void cuda_test_close(gm_backend_ctx *bctx);

/* Driver calls logged since the last clear, less the context bookkeeping of each op's scope
 * (cuCtxGetCurrent, cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPopCurrent). */
long cuda_test_work_calls(void);

/* Fail the test if the double counted a violation (printing the last one). */
#define assert_no_violations() cuda_test_check_violations(__FILE__, __LINE__)
void cuda_test_check_violations(const char *file, int line);

#endif /* GM_CUDA_TEST_UTIL_H */
