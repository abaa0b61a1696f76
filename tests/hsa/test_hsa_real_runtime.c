/*
 * The HSA backend on the real ROCm runtime (Debian libhsa-runtime64) of a
 * machine without an AMD GPU: hsa_init fails with
 * HSA_STATUS_ERROR_OUT_OF_RESOURCES because /dev/kfd is missing, and the
 * backend must answer GM_ERR_NO_DEVICE carrying the runtime's own message.
 * Skipped (77) where /dev/kfd exists (the conformance test covers GPUs) or
 * where the runtime is not installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "gm_test.h"
#include "hsa_api.h"

static void test_no_device(void **state)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    assert_status(gm__hsa_backend.init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_null(bctx);
    assert_message_contains("hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)");
    /* ROCr's own text for the status, as hsa_status_string gives it */
    assert_message_contains("The runtime failed to allocate the necessary resources");
    /* twice: the runtime stays loadable after a failed init */
    assert_status(gm__hsa_backend.init(&args, &bctx), GM_ERR_NO_DEVICE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_device),
    };
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *bctx = NULL;
    gm_status status = GM_OK;

    unsetenv(GM_HSA_RUNTIME_PATH_ENV);
    if (access("/dev/kfd", F_OK) == 0) {
        printf("/dev/kfd exists: this machine may have an AMD GPU; see hsa/conformance\n");
        return 77;
    }
    status = gm__hsa_backend.init(&args, &bctx);
    if (status == GM_ERR_NO_DRIVER) {
        printf("no HSA runtime installed: %s\n", gm_last_error_message());
        return 77;
    }
    if (status == GM_OK)
        gm__hsa_backend.fini(bctx);
    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
