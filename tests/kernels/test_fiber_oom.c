/*
 * A launch that runs out of memory for the simulator's fibers gives their
 * address space back. Each thread of a block that waits at a barrier holds
 * a fiber: a stack (GM_SIM_STACK_BYTES, 1 MiB here) and a 1 MiB guard, so a
 * block of 1024 threads reserves 2 GiB. In a child process whose address
 * space is limited (RLIMIT_AS) to what it uses plus 1 GiB, that block fails
 * with GM_ERR_NO_MEMORY part-way; then a 512 MiB device array must still be
 * had (the fibers made before the failure held about 1 GiB of the limit),
 * and a small launch must run and compute. Skipped under a sanitizer, whose
 * shadow memory does not fit an address-space limit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpumem/kernel.h>

#include "gm_sanitizer.h"
#include "kt_helpers.h"

#define MIB (1024L * 1024L)

/* Every thread waits at a barrier (so all hold a fiber at once), then writes its index. */
GM_KERNEL(kt_fiber_hog, (int32_t *, out))
{
    uint32_t t = gm_thread_idx_x();

    gm_syncthreads();
    out[t] = (int32_t)t;
}

GM_HOST_TABLE(kt_hog_table, GM_HOST_KERNELS(kt_fiber_hog), GM_HOST_NO_GLOBALS);
static const gm_image_set kt_hog_set = {"fiber_hog", &kt_hog_table, NULL, 0, NULL, 0};

/*
 * The child's steps; its exit status says where it stopped: 0 all passed,
 * 2 setup, 3 the big launch did not fail with GM_ERR_NO_MEMORY, 4 the
 * device array could not be had, 5 the small launch failed or computed
 * wrong.
 */
static int child(void)
{
    int32_t out[1024];
    gm_context *ctx = NULL;
    gm_kernel *k = NULL;
    gm_array *d = NULL, *big = NULL;
    int64_t bytes = 512 * MIB;
    struct rlimit limit;
    long vm = 0;
    gm_status st = GM_OK;

    setenv("GM_SIM_STACK_BYTES", "1M", 1);
    setenv("GM_SIM_THREADS", "1", 1); /* blocks run on the launching thread */
    memset(out, 0xff, sizeof out);
    ctx = kt_context(32);
    d = kt_device(ctx, GM_INT32, 1024, out);
    if (gm_register_image_set(&kt_hog_set) != GM_OK ||
        gm_kernel_find(ctx, "kt_fiber_hog", &k) != GM_OK)
        return 2;
    vm = gm_test_status_kb("VmSize"); /* the address space in use */
    if (vm < 0)
        return 2;
    limit.rlim_cur = limit.rlim_max = (rlim_t)(vm * 1024L + 1024 * MIB);
    if (setrlimit(RLIMIT_AS, &limit) != 0)
        return 2;
    {
        gm_arg args[1] = {gm_arg_array(d)};

        st = gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(1024, 1, 1), 0, NULL, 1, args);
        if (st != GM_ERR_NO_MEMORY) {
            fprintf(stderr, "the 1024-thread launch returned %s: %s\n", gm_status_name(st),
                    gm_last_error_message());
            return 3;
        }
        fprintf(stderr, "as expected: %s\n", gm_last_error_message());
    }
    if (gm_device_array(ctx, 1, &bytes, GM_UINT8, GM_ORDER_C, &big) != GM_OK) {
        fprintf(stderr, "512 MiB after the failed launch: %s\n", gm_last_error_message());
        return 4;
    }
    gm_array_release(&big);
    {
        gm_arg args[1] = {gm_arg_array(d)};

        memset(out, 0xff, sizeof out);
        if (gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(64, 1, 1), 0, NULL, 1, args) != GM_OK)
            return 5;
    }
    kt_to_host(d, GM_INT32, 1024, out);
    for (int32_t i = 0; i < 64; i++)
        if (out[i] != i)
            return 5;
    gm_array_release(&d);
    kt_destroy(&ctx);
    return 0;
}

static void test_fiber_oom_gives_back(void **state)
{
    pid_t pid;
    int status = 0;

    (void)state;
#if defined(GM_TEST_SANITIZER)
    skip();
#endif
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child());
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 2)
        fail_msg("the child could not set up the test");
    if (WEXITSTATUS(status) == 3)
        fail_msg("the 1024-thread launch did not run out of memory under the limit");
    if (WEXITSTATUS(status) == 4)
        fail_msg("the fibers of the failed launch kept their address space: no 512 MiB array");
    if (WEXITSTATUS(status) == 5)
        fail_msg("a small launch after the failed one did not run correctly");
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fiber_oom_gives_back)};

    return cmocka_run_group_tests(tests, NULL, NULL);
}
