/*
 * Per-thread local memory on the simulator: a thread's GM_LOCAL_ARRAYs live
 * on its fiber's stack, which must hold CUDA's share of local memory (up to
 * 512 KiB a thread) while every thread of a block is suspended at a barrier
 * with its array live; and those stacks are reserved, not committed, so a
 * block of 1024 threads with small frames costs a few pages a thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <gpumem/kernel.h>

#include "gm_sanitizer.h"
#include "kt_helpers.h"

#define KT_BIG_LOCAL_INTS (64 * 1024) /* 256 KiB */

/*
 * Each thread fills 256 KiB of local memory with values of its own, waits at
 * a barrier (so every thread's array is live at once), then reads it back in
 * an order set by `step` (odd: a permutation the compiler cannot foresee).
 * errors[g] = values found wrong; next[g] = what the next thread of the block
 * wrote to shared memory before the barrier.
 */
GM_KERNEL(kt_big_local, (int32_t *, errors), (int32_t *, next), (int32_t, step))
{
    GM_LOCAL_ARRAY(int32_t, buf, KT_BIG_LOCAL_INTS);
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int64_t g = gm_global_id_x();
    int32_t base = (int32_t)g * 7, bad = 0, j = 0;

    for (int32_t i = 0; i < KT_BIG_LOCAL_INTS; i++)
        buf[i] = base + i;
    s[t] = (int32_t)g;
    gm_syncthreads();
    for (int32_t i = 0; i < KT_BIG_LOCAL_INTS; i++) {
        bad += buf[j] != base + j;
        j = (j + step) & (KT_BIG_LOCAL_INTS - 1);
    }
    errors[g] = bad;
    next[g] = s[(t + 1u) % bd];
}

/* A barrier and nothing else: every thread of the block takes a fiber. */
GM_KERNEL(kt_barrier_only, (int32_t *, out))
{
    int64_t g = gm_global_id_x();

    gm_syncthreads();
    out[g] = (int32_t)g;
}

GM_HOST_TABLE(kt_local_table, GM_HOST_KERNELS(kt_big_local, kt_barrier_only), GM_HOST_NO_GLOBALS);
static const gm_image_set kt_local_set = {"local memory tests", &kt_local_table, NULL, 0, NULL, 0};

static gm_kernel *local_kernel(gm_context *ctx, const char *name)
{
    gm_kernel *k = NULL;

    assert_ok(gm_register_image_set(&kt_local_set));
    assert_ok(gm_kernel_find(ctx, name, &k));
    return k;
}

static void run_big_local(gm_context *ctx, uint32_t grid, uint32_t block)
{
    int64_t n = (int64_t)grid * block;
    int32_t *errors = malloc((size_t)n * sizeof *errors), *next = malloc((size_t)n * sizeof *next);
    gm_array *derrors = kt_device(ctx, GM_INT32, n, NULL),
             *dnext = kt_device(ctx, GM_INT32, n, NULL);
    gm_kernel *k = local_kernel(ctx, "kt_big_local");
    gm_arg args[3] = {gm_arg_array(derrors), gm_arg_array(dnext), gm_arg_i32(40503)};

    assert_non_null(errors);
    assert_non_null(next);
    assert_ok(gm_launch(k, gm_dim3_make(grid, 1, 1), gm_dim3_make(block, 1, 1), 0, NULL, 3, args));
    kt_to_host(derrors, GM_INT32, n, errors);
    kt_to_host(dnext, GM_INT32, n, next);
    for (int64_t g = 0; g < n; g++) {
        int64_t want = g - g % block + (g % block + 1) % block;

        if (errors[g] != 0)
            fail_msg("kt_big_local %ux%u: thread %lld found %d wrong values", grid, block,
                     (long long)g, errors[g]);
        if (next[g] != (int32_t)want)
            fail_msg("kt_big_local %ux%u: next[%lld] = %d, expected %lld", grid, block,
                     (long long)g, next[g], (long long)want);
    }
    gm_array_release(&derrors);
    gm_array_release(&dnext);
    free(errors);
    free(next);
}

/* 256 KiB of local memory per thread, live in every thread of the block at a barrier. */
static void test_big_local_array(void **state)
{
    gm_context *ctx = kt_context(32);

    (void)state;
    run_big_local(ctx, 1, 1);  /* the block's first fiber */
    run_big_local(ctx, 1, 64); /* a fiber per thread, on the calling thread */
    run_big_local(ctx, 8, 32); /* and on the pool's threads */
    run_big_local(ctx, 1, 64); /* fibers started over after a run */
    kt_destroy(&ctx);
}

/* vm.overcommit_memory = 2: the simulator's default stacks are a quarter of the size. */
static int strict_overcommit(void)
{
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int c = f != NULL ? fgetc(f) : EOF;

    if (f != NULL)
        fclose(f);
    return c == '2';
}

/* VmRSS and VmSize of the process in kB (-1 when unknown). */
static void memory_kb(long *rss, long *size)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];

    *rss = *size = -1;
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "VmSize:", 7) == 0)
            *size = strtol(line + 7, NULL, 10);
    }
    fclose(f);
}

typedef struct {
    gm_context *ctx;
    gm_kernel *k;
    gm_array *out;
    gm_status status;
    long rss_kb, size_kb; /* growth over the launch */
} lazy_run;

/* On a new thread (a worker with no fibers yet): one block of 1024 threads, all at a barrier. */
static void *lazy_thread(void *arg)
{
    lazy_run *r = arg;
    gm_arg args[1] = {gm_arg_array(r->out)};
    long rss0 = 0, size0 = 0, rss1 = 0, size1 = 0;

    memory_kb(&rss0, &size0);
    r->status = gm_launch(r->k, gm_dim3_make(1, 1, 1), gm_dim3_make(1024, 1, 1), 0, NULL, 1, args);
    memory_kb(&rss1, &size1);
    r->rss_kb = rss0 < 0 || rss1 < 0 ? -1 : rss1 - rss0;
    r->size_kb = size0 < 0 || size1 < 0 ? -1 : size1 - size0;
    return NULL;
}

/* 1024 fibers reserve 1024 stacks of at least 512 KiB; only the pages touched cost memory. */
static void test_stacks_committed_lazily(void **state)
{
    gm_context *ctx = kt_context(32);
    lazy_run r;
    pthread_t thread;
    int32_t *got = malloc(1024 * sizeof *got);

    (void)state;
    assert_non_null(got);
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.k = local_kernel(ctx, "kt_barrier_only");
    r.out = kt_device(ctx, GM_INT32, 1024, NULL);
    assert_int_equal(pthread_create(&thread, NULL, lazy_thread, &r), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(r.status);
    kt_to_host(r.out, GM_INT32, 1024, got);
    for (int32_t i = 0; i < 1024; i++)
        assert_int_equal(got[i], i);
    if (r.rss_kb >= 0 && r.size_kb >= 0) {
        print_message("1024 fibers: +%ld MiB virtual, +%ld MiB resident\n", r.size_kb / 1024,
                      r.rss_kb / 1024);
        if (r.size_kb < 1024L * 512 && !strict_overcommit())
            fail_msg("1024 fibers reserved %ld KiB: stacks smaller than 512 KiB", r.size_kb);
#if !defined(GM_TEST_TSAN) /* each fiber carries ThreadSanitizer's state of a thread (most of a \
                            * megabyte, resident): the bound on resident memory does not apply */
        if (r.rss_kb > 64L * 1024)
            fail_msg("1024 fibers made %ld KiB resident: stacks committed eagerly", r.rss_kb);
#endif
    }
    gm_array_release(&r.out);
    free(got);
    kt_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_big_local_array),
        cmocka_unit_test(test_stacks_committed_lazily),
    };

    if (strict_overcommit()) /* smaller default stacks there: ask for CUDA's 512 KiB */
        setenv("GM_SIM_STACK_BYTES", "524288", 1);

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
