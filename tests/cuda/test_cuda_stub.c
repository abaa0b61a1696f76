/*
 * The CUDA toolkit's link-only stub libcuda.so, loaded as libcuda.so.1 from
 * a temporary directory: every entry point exists but cuInit fails with
 * CUDA_ERROR_STUB_LIBRARY, so init must report GM_ERR_NO_DEVICE naming it
 * (the stub cannot name its own errors: the backend's table does). Skipped
 * (77) when the build found no stub (GM_TEST_CUDA_STUB unset or missing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "gm_test.h"

#define SKIP 77

static char stub_dir[256];
static char stub_link[300];

/* Make <tmp>/libcuda.so.1 -> the stub and point the backend at it. */
static int link_stub(const char *stub)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(stub_dir, sizeof(stub_dir), "%s/gpumem-cuda-stub-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(stub_dir) == NULL)
        return -1;
    snprintf(stub_link, sizeof(stub_link), "%s/libcuda.so.1", stub_dir);
    if (symlink(stub, stub_link) != 0)
        return -1;
    return setenv("GM_CUDA_DRIVER_PATH", stub_link, 1);
}

static void unlink_stub(void)
{
    unlink(stub_link);
    rmdir(stub_dir);
}

static void test_stub_driver_has_no_device(void **state)
{
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    (void)state;
    assert_status(gm__cuda_backend.init(&args, &bctx), GM_ERR_NO_DEVICE);
    assert_null(bctx);
    assert_message_contains("cuInit failed: CUDA_ERROR_STUB_LIBRARY");
    assert_message_contains("CUresult 34");
    assert_message_contains("cuda: the driver did not initialize");
    /* a second attempt behaves the same (nothing left half-open) */
    assert_status(gm__cuda_backend.init(&args, &bctx), GM_ERR_NO_DEVICE);
}

int main(void)
{
    const char *stub = getenv("GM_TEST_CUDA_STUB");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stub_driver_has_no_device),
    };
    int failed = 0;

    if (stub == NULL || access(stub, R_OK) != 0) {
        printf("no CUDA stub library (GM_TEST_CUDA_STUB=%s): skipped\n",
               stub != NULL ? stub : "(unset)");
        return SKIP;
    }
    if (link_stub(stub) != 0) {
        perror("cannot link the stub into a temporary directory");
        return 1;
    }
    failed = cmocka_run_group_tests_name("cuda/stub", tests, gm_test_use_cmocka_allocator,
                                         gm_test_restore_allocator);
    unlink_stub();
    return failed;
}
