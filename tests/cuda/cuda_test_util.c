#include <stdio.h>

#include "cuda_test_util.h"

int cuda_test_group_setup(void **state)
{
    gm_cuda_double_reset();
    return gm_test_use_cmocka_allocator(state);
}

int cuda_test_group_teardown(void **state)
{
    gm_cuda_double_reset();
    return gm_test_restore_allocator(state);
}

int cuda_test_setup(void **state)
{
    (void)state;
    gm_cuda_double_reset();
    gm_clear_error();
    return 0;
}

gm_backend_ctx *cuda_test_open(void)
{
    gm_backend_init_args args = {0, 32};
    gm_backend_ctx *bctx = NULL;

    assert_ok(CUDA_OPS->init(&args, &bctx));
    assert_non_null(bctx);
    gm_cuda_double_clear_calls();
    return bctx;
}

void cuda_test_close(gm_backend_ctx *bctx)
{
    CUDA_OPS->fini(bctx);
    assert_int_equal(gm_cuda_double_live_objects(), 0);
    assert_no_violations();
}

long cuda_test_work_calls(void)
{
    return gm_cuda_double_call_count() - gm_cuda_double_count_calls("cuCtxGetCurrent") -
           gm_cuda_double_count_calls("cuCtxSetCurrent") -
           gm_cuda_double_count_calls("cuCtxPushCurrent_v2") -
           gm_cuda_double_count_calls("cuCtxPopCurrent_v2");
}

void cuda_test_check_violations(const char *file, int line)
{
    if (gm_cuda_double_violations() == 0)
        return;
    print_error("%s:%d: the driver double counted %ld violation(s); last: %s\n", file, line,
                gm_cuda_double_violations(), gm_cuda_double_last_violation());
    _fail(file, line);
}
