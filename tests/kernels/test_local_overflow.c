/*
 * A GM_LOCAL_ARRAY larger than the simulator's fiber stack must hit the
 * guard region below it (kernel.h), not write over another thread's stack.
 * Stacks of 64 KiB (GM_SIM_STACK_BYTES=64K) and a block of 4 threads: thread
 * 2 keeps 32 KiB of locals across two barriers; thread 3 has a 100 KiB local
 * array and, between the barriers, writes its part more than 72 KiB below
 * its stack top (past its stack and what a one-page guard covered: the next
 * fiber's stack, as the stacks are mapped next to each other). The launch
 * runs in a child process, forked before this program used the library:
 * the child must die of the fault (under a sanitizer: report it and exit
 * non-zero); it must not finish with thread 2's locals overwritten.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpumem/kernel.h>

#include "kt_helpers.h"

#define KIB 1024

/* Thread 2: 32 KiB of locals, checked after the other threads ran; the elements changed. */
static __attribute__((noinline)) int32_t medium_locals(void)
{
    GM_LOCAL_ARRAY(volatile int32_t, a, 8 * KIB);
    int32_t bad = 0;

    for (int32_t i = 0; i < 8 * KIB; i++)
        a[i] = 1000003 + i;
    gm_syncthreads();
    gm_syncthreads();
    for (int32_t i = 0; i < 8 * KIB; i++)
        bad += a[i] != 1000003 + i;
    return bad;
}

/* Thread 3: 100 KiB of locals; writes the part past its 64 KiB stack and one page. */
static __attribute__((noinline)) void big_locals(void)
{
    GM_LOCAL_ARRAY(volatile int32_t, b, 25 * KIB);
    uintptr_t hi = (uintptr_t)&b[25 * KIB];

    gm_syncthreads();
    for (int32_t i = 0; i < 25 * KIB; i++)
        if ((uintptr_t)&b[i] < hi - 72 * KIB)
            b[i] = -1;
    gm_syncthreads();
}

GM_KERNEL(kt_local_overflow, (int32_t *, out), (int32_t, overflow))
{
    uint32_t t = gm_thread_idx_x();
    int32_t bad = 0;

    if (t == 2u) {
        bad = medium_locals();
    } else if (t == 3u && overflow != 0) {
        big_locals();
    } else {
        gm_syncthreads();
        gm_syncthreads();
    }
    out[t] = bad;
}

GM_HOST_TABLE(kt_overflow_table, GM_HOST_KERNELS(kt_local_overflow), GM_HOST_NO_GLOBALS);
static const gm_image_set kt_overflow_set = {"overflow", &kt_overflow_table, NULL, 0, NULL, 0};

/* The child: 0 and the overwritten count on the pipe when the launches finished. */
static void child(int fd)
{
    gm_context *ctx = NULL;
    gm_kernel *k = NULL;
    int32_t out[4] = {0, 0, 0, 0}, sum = 0;
    gm_array *d = NULL;

    setenv("GM_SIM_STACK_BYTES", "64K", 1);
    ctx = kt_context(32);
    d = kt_device(ctx, GM_INT32, 4, out);
    if (gm_register_image_set(&kt_overflow_set) != GM_OK ||
        gm_kernel_find(ctx, "kt_local_overflow", &k) != GM_OK)
        _exit(2);
    /* overflow 0: the block's fibers are made (thread 3's not the lowest); 1: the overflow */
    for (int32_t overflow = 0; overflow < 2; overflow++) {
        gm_arg args[2] = {gm_arg_array(d), gm_arg_i32(overflow)};

        if (gm_launch(k, gm_dim3_make(1, 1, 1), gm_dim3_make(4, 1, 1), 0, NULL, 2, args) != GM_OK)
            _exit(3);
    }
    kt_to_host(d, GM_INT32, 4, out);
    for (int i = 0; i < 4; i++)
        sum += out[i];
    if (write(fd, &sum, sizeof sum) != sizeof sum)
        _exit(4);
    _exit(0);
}

static void test_local_overflow_faults(void **state)
{
    int fds[2];
    pid_t pid;
    int status = 0;
    int32_t overwritten = -1;

    (void)state;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child(fds[1]);
    close(fds[1]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (read(fds[0], &overwritten, sizeof overwritten) != sizeof overwritten)
        overwritten = -1;
    close(fds[0]);
    if (WIFEXITED(status) && WEXITSTATUS(status) >= 2 && WEXITSTATUS(status) <= 4)
        fail_msg("the child could not set up the launch (exit %d)", WEXITSTATUS(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        fail_msg("a local array past the fiber stack did not fault; %d elements of another "
                 "thread's local array were overwritten",
                 overwritten);
    if (WIFSIGNALED(status))
        assert_int_equal(WTERMSIG(status), SIGSEGV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_local_overflow_faults)};

    return cmocka_run_group_tests(tests, NULL, NULL);
}
