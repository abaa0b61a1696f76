/*
 * Multi-thread stress test of the runtime (run under TSan in CI): threads
 * allocate, view, copy on their own streams, fill, record events, open
 * defer_cleanup scopes, flush, and release concurrently, while sharing one
 * array (retain / derive / release) and one small deallocation queue that
 * flushes all the time. Every thread checks its data; the main thread checks
 * the queue drains to nothing.
 *
 * cmocka's leak-checking allocator is single-threaded, so this suite runs on
 * the C library's allocator (ASan checks it for leaks).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_helpers.h"

#define NTHREADS 8
#define N        96 /* elements per array: 8 x 12 */

/* Iterations per thread; GM_STRESS_ITERS overrides it for longer local runs. */
static int iters = 150;

typedef struct worker {
    gm_context *ctx;
    gm_array *shared;
    int id;
    gm_status failed;
    char where[128];
} worker;

/* Record the first failure of a worker. */
static bool check(worker *w, gm_status s, const char *what)
{
    if (s == GM_OK)
        return true;
    if (w->failed == GM_OK) {
        w->failed = s;
        snprintf(w->where, sizeof(w->where), "%s: %s", what, gm_last_error_message());
    }
    return false;
}

/* Values of iteration `it` of worker `id`. */
static double value(int id, int it, int k)
{
    return id * 1e6 + it * 1e3 + k;
}

/* to_device a strided host view, view it reversed, copy back, verify. */
static bool round_trip(worker *w, gm_stream *st, int it)
{
    double host[2 * N];
    int64_t n = N, stride = 16, shape[2] = {8, 12};
    gm_index_item rev[1] = {GM_IDX_SLICE(GM_NONE, GM_NONE, -1)};
    gm_ndview hv;
    gm_array *a = NULL, *v = NULL, *r = NULL, *h = NULL;
    bool ok = check(w, gm_ndview_init(host, GM_FLOAT64, 1, &n, &stride, GM_ORDER_C, &hv), "init");

    for (int k = 0; k < N; k++)
        host[2 * k] = value(w->id, it, k);
    ok = ok && check(w, gm_to_device(w->ctx, &hv, st, &a), "to_device");
    ok = ok && check(w, gm_array_getitem(a, 1, rev, &v), "getitem");
    ok = ok && check(w, gm_array_reshape(a, 2, shape, GM_ORDER_C, &r), "reshape");
    gm_array_release(&a); /* the views keep the buffer */
    ok = ok && check(w, gm_array_copy_to_host_new(v, st, &h), "copy_to_host_new");
    ok = ok && check(w, gm_stream_synchronize(st), "synchronize");
    for (int k = 0; ok && k < N; k++) {
        if (((double *)gm_array_view(h)->data)[k] != value(w->id, it, N - 1 - k))
            ok = check(w, GM_ERR_INTERNAL, "round trip data");
    }
    gm_array_release(&h);
    gm_array_release(&v);
    gm_array_release(&r);
    return ok;
}

/* Read the shared array through a derived view on this worker's stream. */
static bool read_shared(worker *w, gm_stream *st)
{
    gm_index_item first_row[1] = {GM_IDX_INT(0)};
    gm_array *mine = gm_array_retain(w->shared), *row = NULL, *h = NULL;
    bool ok = check(w, gm_array_getitem(mine, 1, first_row, &row), "shared getitem");

    gm_array_release(&mine);
    ok = ok && check(w, gm_array_copy_to_host_new(row, st, &h), "shared copy");
    ok = ok && check(w, gm_stream_synchronize(st), "shared synchronize");
    for (int k = 0; ok && k < 12; k++) {
        if (((double *)gm_array_view(h)->data)[k] != 42.0)
            ok = check(w, GM_ERR_INTERNAL, "shared data");
    }
    gm_array_release(&h);
    gm_array_release(&row);
    return ok;
}

/* Fill, pinned memory, events and a short-lived stream. */
static bool side_work(worker *w, gm_stream *st, int it)
{
    int64_t shape[2] = {8, 12};
    int32_t x = it;
    gm_array *a = NULL, *p = NULL;
    gm_event *ev = NULL;
    gm_stream *tmp = NULL;
    bool ok = check(w, gm_device_array(w->ctx, 2, shape, GM_INT32, GM_ORDER_F, &a), "alloc");

    ok = ok && check(w, gm_array_fill(a, &x, st), "fill");
    ok = ok && check(w, gm_pinned_array(w->ctx, 2, shape, GM_INT32, GM_ORDER_C, &p), "pinned");
    ok = ok && check(w, gm_array_copy_to_host(a, gm_array_view(p), st), "to pinned");
    ok = ok && check(w, gm_event_create(w->ctx, false, &ev), "event");
    ok = ok && check(w, gm_event_record(ev, st), "record");
    ok = ok && check(w, gm_event_synchronize(ev), "event synchronize");
    for (int k = 0; ok && k < N; k++) {
        if (((int32_t *)gm_array_view(p)->data)[k] != it)
            ok = check(w, GM_ERR_INTERNAL, "fill data");
    }
    if (ok && it % 10 == 0)
        ok = check(w, gm_stream_create(w->ctx, GM_STREAM_NON_BLOCKING, &tmp), "stream");
    gm_stream_destroy(&tmp);
    gm_event_destroy(&ev);
    gm_array_release(&p);
    gm_array_release(&a);
    return ok;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    gm_stream *st = NULL;
    bool ok = true;

    if (w->id % 2 == 0)
        ok = check(w, gm_stream_create(w->ctx, 0, &st), "stream_create");
    else
        st = gm_per_thread_default_stream(w->ctx);
    for (int it = 0; ok && it < iters; it++) {
        bool defer = it % 7 == 0;

        if (defer)
            ok = check(w, gm_defer_cleanup_begin(w->ctx), "defer begin");
        ok = ok && round_trip(w, st, it) && read_shared(w, st) && side_work(w, st, it);
        if (defer)
            ok = check(w, gm_defer_cleanup_end(w->ctx), "defer end") && ok;
        if (ok && it % 13 == 0)
            ok = check(w, gm_deallocations_flush(w->ctx), "flush");
    }
    gm_stream_destroy(&st);
    return NULL;
}

static void test_stress(void **state)
{
    gm_context_options o = rt_options(4, 0.01, 64 * 1024);
    int64_t shape[2] = {4, 12};
    double fortytwo = 42.0;
    worker workers[NTHREADS];
    pthread_t threads[NTHREADS];
    gm_context *ctx = NULL;
    gm_array *shared = NULL;
    gm_dealloc_stats s;

    (void)state;
    assert_ok(gm_set_host_allocator(NULL));
    if (getenv("GM_BACKEND") != NULL) /* the same stress on a GPU backend (README) */
        o.backend = GM_BACKEND_DEFAULT;
    assert_ok(gm_context_create(&o, &ctx));
    printf("stress on the %s backend\n", gm_backend_name(gm_context_backend(ctx)));
    assert_ok(gm_device_array(ctx, 2, shape, GM_FLOAT64, GM_ORDER_C, &shared));
    assert_ok(gm_array_fill(shared, &fortytwo, NULL));
    for (int i = 0; i < NTHREADS; i++) {
        workers[i] = (worker){ctx, shared, i, GM_OK, ""};
        assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        if (workers[i].failed != GM_OK)
            fail_msg("worker %d: %s: %s", i, gm_status_name(workers[i].failed), workers[i].where);
    }
    gm_array_release(&shared);
    assert_ok(gm_deallocations_flush(ctx));
    s = rt_stats(ctx);
    assert_int_equal(s.pending_count, 0);
    assert_int_equal(s.pending_device_bytes, 0);
    assert_int_equal(s.pending_pinned_bytes, 0);
    assert_int_equal(s.defer_depth, 0);
    assert_true(s.flushes > 10);
    assert_true(s.freed_count > (int64_t)NTHREADS * iters);
    gm_context_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress),
    };
    const char *env = getenv("GM_STRESS_ITERS");

    if (env != NULL && atoi(env) > 0)
        iters = atoi(env);
    setenv("GM_HOST_DEVICE_MEMORY", "256M", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
