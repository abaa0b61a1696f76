/*
 * Tests for streams and events (src/core/stream.c, src/core/event.c):
 * created streams destroyed through the queue, the built-in streams,
 * wrapped external streams, synchronize / query / callbacks,
 * auto_synchronize nesting, events, and a failing wait for the context's
 * queued device work (device_synchronize).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/gm_threads.h"
#include "../common/gm_test_producer.h"
#include "rt_helpers.h"

#define BIG (INT64_MAX / 4)

static int group_setup(void **state)
{
    setenv("GM_HOST_DEVICE_MEMORY", "64M", 1);
    return gm_test_use_cmocka_allocator(state);
}

static int test_setup(void **state)
{
    (void)state;
    rt_fault_reset();
    return 0;
}

/* For tests whose library threads allocate and free (cmocka's allocator is not thread-safe). */
static int c_allocator_setup(void **state)
{
    rt_fault_reset();
    return gm_test_restore_allocator(state);
}

static int c_allocator_teardown(void **state)
{
    return gm_test_use_cmocka_allocator(state);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};

    nanosleep(&ts, NULL);
}

/* A callback that blocks its stream until `release` is set, then records its arguments. */
typedef struct gate {
    atomic_int release;
    atomic_int ran;
    gm_stream *seen_stream;
    gm_status seen_status;
} gate;

static void gate_callback(gm_stream *stream, gm_status status, void *user)
{
    gate *g = user;

    while (atomic_load(&g->release) == 0)
        sleep_ms(1);
    g->seen_stream = stream;
    g->seen_status = status;
    atomic_store(&g->ran, 1);
}

static void test_create_destroy(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *a = NULL, *b = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, GM_STREAM_DEFAULT, &a));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &b));
    assert_non_null(gm_stream_native(a));
    assert_ptr_not_equal(gm_stream_native(a), gm_stream_native(b));
    assert_status(gm_stream_create(ctx, 4, &b), GM_ERR_INVALID_ARG);
    assert_status(gm_stream_create(ctx, 0, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_create(NULL, 0, &b), GM_ERR_NULL_POINTER);
    gm_stream_destroy(&a);
    assert_null(a);
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 0);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 1);
    gm_stream_destroy(&b);
    gm_stream_destroy(&b);
    gm_stream_destroy(NULL);
    assert_null(gm_stream_native(NULL));
    rt_fault_fail_at(RT_STREAM_CREATE, rt_fault_calls(RT_STREAM_CREATE) + 1, GM_ERR_DRIVER);
    assert_status(gm_stream_create(ctx, 0, &a), GM_ERR_DRIVER);
    assert_null(a);
    gm_context_destroy(&ctx);
}

static void *per_thread_main(void *arg)
{
    return gm_per_thread_default_stream(arg);
}

/* What a second thread does with the per-thread handle it is given. */
typedef struct per_thread_job {
    gm_stream *handle;
    gate *g;
    gm_status status;
} per_thread_job;

/* Block the calling thread's per-thread stream on the gate, through the shared handle. */
static void *per_thread_block(void *arg)
{
    per_thread_job *job = arg;

    job->status = gm_stream_add_callback(job->handle, gate_callback, job->g);
    return NULL;
}

/*
 * The built-in streams. cmocka's leak-checking allocator keeps per-thread
 * lists, so this test, which makes gpumem allocate on a second thread, runs
 * on the C library's allocator (ASan checks it for leaks).
 */
static void test_builtin_streams(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *def = NULL, *legacy = NULL, *mine = NULL, *other = NULL, *copy = NULL;
    pthread_t thread;
    void *result = NULL;

    (void)state;
    assert_ok(gm_set_host_allocator(NULL));
    ctx = rt_fault_ctx();
    def = gm_default_stream(ctx);
    legacy = gm_legacy_default_stream(ctx);
    mine = gm_per_thread_default_stream(ctx);
    assert_non_null(def);
    assert_non_null(legacy);
    assert_non_null(mine);
    assert_ptr_equal(gm_default_stream(ctx), def);
    assert_ptr_equal(gm_legacy_default_stream(ctx), legacy);
    assert_ptr_equal(gm_per_thread_default_stream(ctx), mine);
    assert_int_equal(pthread_create(&thread, NULL, per_thread_main, ctx), 0);
    assert_int_equal(pthread_join(thread, &result), 0);
    other = result;
    assert_non_null(other);
    assert_ptr_equal(other, mine); /* one handle, like CU_STREAM_PER_THREAD */
    copy = def;
    gm_stream_destroy(&copy); /* built-in: ignored */
    assert_ptr_equal(copy, def);
    assert_ok(gm_stream_synchronize(def));
    assert_ok(gm_stream_synchronize(other));
    assert_ok(gm_stream_query(legacy));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_null(gm_default_stream(NULL));
    assert_message_contains("gm_default_stream: ctx is NULL");
    assert_null(gm_legacy_default_stream(NULL));
    assert_null(gm_per_thread_default_stream(NULL));
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/*
 * Each built-in handle stays itself, distinct from the others, however they are
 * asked for in turn and whatever streams come and go around them (the context
 * keeps the wrapper each kind gave last instead of walking its streams).
 */
static void test_builtin_streams_among_many(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *created[40] = {NULL}, *first[3] = {NULL}, *got[3] = {NULL};

    (void)state;
    for (int i = 0; i < 20; i++)
        assert_ok(gm_stream_create(ctx, i % 2 ? GM_STREAM_NON_BLOCKING : 0, &created[i]));
    first[2] = gm_per_thread_default_stream(ctx);
    first[1] = gm_legacy_default_stream(ctx);
    first[0] = gm_default_stream(ctx);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 3; i++) {
            int which = (i + round) % 3;

            got[which] = which == 0   ? gm_default_stream(ctx)
                         : which == 1 ? gm_legacy_default_stream(ctx)
                                      : gm_per_thread_default_stream(ctx);
        }
        for (int i = 0; i < 3; i++) {
            assert_non_null(got[i]);
            assert_ptr_equal(got[i], first[i]);
        }
        assert_ptr_not_equal(got[2], got[0]);
        assert_ptr_not_equal(got[2], got[1]);
        for (int i = 0; i < 10; i++) /* streams come and go */
            gm_stream_destroy(&created[(round * 10 + i) % 40]);
        for (int i = 0; i < 10; i++)
            assert_ok(gm_stream_create(ctx, 0, &created[(round * 10 + i + 20) % 40]));
    }
    assert_ok(gm_stream_synchronize(first[0]));
    assert_ok(gm_stream_synchronize(first[1]));
    assert_ok(gm_stream_synchronize(first[2]));
    for (int i = 0; i < 40; i++)
        gm_stream_destroy(&created[i]);
    gm_context_destroy(&ctx);
}

/*
 * A context on the C library's allocator (a second thread allocates), its
 * per-thread handle, and `body` run once on another thread with that handle
 * and `g` (job.status is what it got).
 */
static gm_context *per_thread_setup(void *(*body)(void *), gate *g, per_thread_job *job)
{
    gm_context *ctx = NULL;
    pthread_t thread;

    assert_ok(gm_set_host_allocator(NULL));
    memset(g, 0, sizeof(*g));
    ctx = rt_fault_ctx();
    *job = (per_thread_job){gm_per_thread_default_stream(ctx), g, GM_ERR_INTERNAL};
    assert_non_null(job->handle);
    assert_int_equal(pthread_create(&thread, NULL, body, job), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_ok(job->status);
    return ctx;
}

/*
 * The per-thread default stream is one handle that means the calling
 * thread's stream wherever it is used (CUDA's CU_STREAM_PER_THREAD, Numba's
 * per_thread_default_stream()): work another thread queues through it goes
 * to that thread's stream, so it does not hold back this thread's.
 */
static void test_per_thread_handle_resolves(void **state)
{
    gate g;
    per_thread_job job;
    gm_context *ctx = per_thread_setup(per_thread_block, &g, &job);
    gm_stream *h = job.handle;

    (void)state;
    sleep_ms(20);
    assert_int_equal(atomic_load(&g.ran), 0); /* the other thread's stream is held */
    assert_ok(gm_stream_query(h));            /* this thread's is idle */
    assert_ok(gm_stream_synchronize(h));
    atomic_store(&g.release, 1);
    for (int i = 0; i < 5000 && atomic_load(&g.ran) == 0; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&g.ran), 1);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* Open an auto_synchronize scope on the per-thread handle and leave it open. */
static void *open_scope_and_leave(void *arg)
{
    per_thread_job *job = arg;

    job->status = gm_stream_auto_synchronize_begin(job->handle);
    return NULL;
}

/* Release a gate after a pause, from another thread. */
static void *release_later(void *arg)
{
    gate *g = arg;

    sleep_ms(30);
    atomic_store(&g->release, 1);
    return NULL;
}

/*
 * auto_synchronize scopes on the per-thread handle nest per thread: a scope
 * another thread left open does not keep this thread's outermost end from
 * synchronizing this thread's stream.
 */
static void test_per_thread_scopes(void **state)
{
    gate g;
    per_thread_job job;
    gm_context *ctx = per_thread_setup(open_scope_and_leave, &g, &job);
    gm_stream *h = job.handle;
    pthread_t thread;

    (void)state;
    assert_status(gm_stream_auto_synchronize_end(h), GM_ERR_STATE); /* none open here */
    assert_ok(gm_stream_auto_synchronize_begin(h));
    assert_ok(gm_stream_auto_synchronize_begin(h));
    assert_ok(gm_stream_add_callback(h, gate_callback, &g));
    assert_int_equal(pthread_create(&thread, NULL, release_later, &g), 0);
    assert_ok(gm_stream_auto_synchronize_end(h)); /* inner */
    assert_ok(gm_stream_auto_synchronize_end(h)); /* outermost: waits for the gate */
    assert_int_equal(atomic_load(&g.ran), 1);
    assert_int_equal(pthread_join(thread, NULL), 0);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* A scope left open on a per-thread handle ends with its context: a new context's has none. */
static void test_per_thread_scope_left_open(void **state)
{
    gm_context *ctx = rt_fault_ctx();

    (void)state;
    assert_ok(gm_stream_auto_synchronize_begin(gm_per_thread_default_stream(ctx)));
    gm_context_destroy(&ctx);
    for (int round = 0; round < 3; round++) { /* a later handle may get the old address */
        ctx = rt_fault_ctx();
        assert_status(gm_stream_auto_synchronize_end(gm_per_thread_default_stream(ctx)),
                      GM_ERR_STATE);
        assert_message_contains("no auto_synchronize scope is open");
        gm_context_destroy(&ctx);
    }
}

/*
 * The bodies below run on a thread of their own, whose per-thread scope
 * slots start empty (cmocka's asserts belong to the main thread): each
 * returns the line of its first failed check, 0 when all held.
 */
static char thread_message[512]; /* the failing thread's last error message */
#define CHECK_ON_THREAD(cond)                                                                \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            snprintf(thread_message, sizeof(thread_message), "%s", gm_last_error_message()); \
            return (void *)(intptr_t)__LINE__;                                               \
        }                                                                                    \
    } while (0)
#define SCOPE_CONTEXTS 9 /* one more than a thread may have per-thread scopes open in */

static bool make_contexts(gm_context **ctx, int n)
{
    for (int i = 0; i < n; i++) {
        if (gm_context_create(NULL, &ctx[i]) != GM_OK)
            return false;
    }
    return true;
}

static void destroy_contexts(gm_context **ctx, int n)
{
    for (int i = 0; i < n; i++)
        gm_context_destroy(&ctx[i]);
}

/* Per-thread scopes open in 8 contexts; a 9th is refused until one of them ends. */
static void *scopes_in_many_contexts(void *arg)
{
    gm_context *ctx[SCOPE_CONTEXTS] = {NULL};
    gm_stream *h[SCOPE_CONTEXTS];

    (void)arg;
    CHECK_ON_THREAD(make_contexts(ctx, SCOPE_CONTEXTS));
    for (int i = 0; i < SCOPE_CONTEXTS; i++)
        h[i] = gm_per_thread_default_stream(ctx[i]);
    for (int i = 0; i < SCOPE_CONTEXTS - 1; i++)
        CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(h[i]) == GM_OK);
    CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(h[0]) == GM_OK); /* nesting needs no slot */
    CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(h[SCOPE_CONTEXTS - 1]) == GM_ERR_STATE);
    CHECK_ON_THREAD(strstr(gm_last_error_message(), "scopes open in 8 contexts already") != NULL);
    CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h[SCOPE_CONTEXTS - 1]) == GM_ERR_STATE);
    CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h[1]) == GM_OK); /* frees its slot */
    CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(h[SCOPE_CONTEXTS - 1]) == GM_OK);
    CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h[0]) == GM_OK); /* inner */
    for (int i = 0; i < SCOPE_CONTEXTS; i++) {
        if (i != 1)
            CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h[i]) == GM_OK);
    }
    CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h[0]) == GM_ERR_STATE);
    destroy_contexts(ctx, SCOPE_CONTEXTS);
    return NULL;
}

/* Scopes left open in 8 destroyed contexts do not use up the thread's slots. */
static void *scopes_left_in_destroyed_contexts(void *arg)
{
    gm_context *ctx[SCOPE_CONTEXTS] = {NULL};

    (void)arg;
    CHECK_ON_THREAD(make_contexts(ctx, SCOPE_CONTEXTS - 1));
    for (int i = 0; i < SCOPE_CONTEXTS - 1; i++)
        CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(gm_per_thread_default_stream(ctx[i])) ==
                        GM_OK);
    destroy_contexts(ctx, SCOPE_CONTEXTS - 1);
    for (int round = 0; round < 2; round++) { /* the second round reuses a reclaimed slot */
        gm_stream *h = NULL;

        CHECK_ON_THREAD(gm_context_create(NULL, &ctx[0]) == GM_OK);
        h = gm_per_thread_default_stream(ctx[0]);
        CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h) == GM_ERR_STATE); /* none open */
        CHECK_ON_THREAD(gm_stream_auto_synchronize_begin(h) == GM_OK);
        CHECK_ON_THREAD(gm_stream_auto_synchronize_end(h) == GM_OK);
        gm_context_destroy(&ctx[0]);
    }
    return NULL;
}

static void run_on_thread(void *(*body)(void *))
{
    pthread_t thread;
    void *failed_line = NULL;

    assert_int_equal(pthread_create(&thread, NULL, body, NULL), 0);
    assert_int_equal(pthread_join(thread, &failed_line), 0);
    if (failed_line != NULL)
        fail_msg("check at line %d failed (last error there: %s)", (int)(intptr_t)failed_line,
                 thread_message);
}

static void test_per_thread_scopes_in_many_contexts(void **state)
{
    (void)state;
    run_on_thread(scopes_in_many_contexts);
}

static void test_per_thread_scopes_of_destroyed_contexts(void **state)
{
    (void)state;
    run_on_thread(scopes_left_in_destroyed_contexts);
}

/*
 * A synchronous copy waits for what the legacy stream's rule orders before
 * it, whatever path it takes: a copy host -> device of a transposed host
 * view, staged through a host temporary (the path CUDA and HSA take: their
 * strided copies refuse host sides), read its host source before that wait,
 * so it copied stale bytes that a device -> host copy queued on a blocking
 * stream was about to write.
 */
static void test_sync_staged_copy_waits_for_blocking_streams(void **state)
{
    enum { N = 10 };
    static double p[N * N * N], fresh[N * N * N], back[N * N * N];
    int64_t shape[3] = {N, N, N};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *a = NULL;
    gm_array *dnew = NULL, *dout = NULL;
    gm_ndview pv, pt, backv, nv;
    gate g;
    pthread_t th;

    (void)state;
    memset(&g, 0, sizeof(g));
    rt_fault_ops()->copy_strided = gm__unsupported_copy_strided;
    for (int k = 0; k < N * N * N; k++) {
        p[k] = 1.0 + k;
        fresh[k] = 5000.0 + k;
    }
    assert_ok(gm_ndview_init(p, GM_FLOAT64, 3, shape, NULL, GM_ORDER_C, &pv));
    assert_ok(gm_ndview_init(back, GM_FLOAT64, 3, shape, NULL, GM_ORDER_C, &backv));
    assert_ok(gm_ndview_init(fresh, GM_FLOAT64, 3, shape, NULL, GM_ORDER_C, &nv));
    assert_ok(gm_device_array(ctx, 3, shape, GM_FLOAT64, GM_ORDER_C, &dnew));
    assert_ok(gm_device_array(ctx, 3, shape, GM_FLOAT64, GM_ORDER_C, &dout));
    assert_ok(gm_array_copy_to_device(dnew, &nv, NULL));
    assert_ok(gm_stream_create(ctx, 0, &a)); /* blocking */
    assert_ok(gm_stream_add_callback(a, gate_callback, &g));
    assert_ok(gm_array_copy_to_host(dnew, &pv, a)); /* p <- fresh, after the gate */
    assert_int_equal(pthread_create(&th, NULL, release_later, &g), 0);
    assert_ok(gm_ndview_transpose(&pv, &pt));
    assert_ok(gm_copy(ctx, gm_array_view(dout), &pt, NULL)); /* after a's copy */
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_ok(gm_stream_synchronize(a));
    assert_ok(gm_array_copy_to_host(dout, &backv, NULL));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < N; k++)
                if (back[(i * N + j) * N + k] != 5000.0 + (double)(k * N * N + j * N + i))
                    fail_msg("dout[%d][%d][%d] = %g: the source's bytes before the copy queued "
                             "on the blocking stream wrote them",
                             i, j, k, back[(i * N + j) * N + k]);
    gm_array_release(&dnew);
    gm_array_release(&dout);
    gm_stream_destroy(&a);
    gm_context_destroy(&ctx);
}

/* Stream work standing for an earlier asynchronous failure (a kernel fault). */
static gm_status work_fails(void *user)
{
    (void)user;
    return gm__error(GM_ERR_LAUNCH, "earlier stream work failed");
}

/*
 * A stream's error stays until the user's synchronize takes it (runtime.h):
 * a later copy on that stream that fails part-way (its host step cannot be
 * queued) must not take it while it waits for its own queued steps.
 */
static void test_failed_copy_keeps_stream_error(void **state)
{
    double a[4] = {1, 2, 3, 4}, b[4] = {0};
    int64_t shape[1] = {4};
    gm_context *ctx = rt_fault_ctx();
    gm_stream *s = NULL;
    gm_backend_stream *bs = NULL;
    gm_ndview av, bv;

    (void)state;
    assert_ok(gm_ndview_init(a, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &av));
    assert_ok(gm_ndview_init(b, GM_FLOAT64, 1, shape, NULL, GM_ORDER_C, &bv));
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm__stream_backend("test", ctx, s, &bs));
    assert_ok(rt_fault_ops()->stream_enqueue_host(ctx->bctx, bs, work_fails, NULL, NULL));
    rt_fault_fail_at(RT_ENQUEUE_HOST, 2, GM_ERR_NO_MEMORY);
    assert_status(gm_copy(ctx, &bv, &av, s), GM_ERR_NO_MEMORY); /* host to host, on s */
    assert_status(gm_stream_synchronize(s), GM_ERR_LAUNCH);
    assert_message_contains("earlier stream work failed");
    assert_ok(gm_stream_synchronize(s));
    gm_stream_destroy(&s);
    gm_context_destroy(&ctx);
}

/* Counts its calls. */
static void count_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    atomic_fetch_add((_Atomic int *)user, 1);
}

/* gm_test_producer.h's destroy scenario on the host backend. */
static void test_destroy_of_wrapped_stream_waits_for_callbacks(void **state)
{
    gm_context *ctx = rt_fault_ctx();

    (void)state;
    gm_test_destroy_waits_for_callbacks(ctx);
    gm_context_destroy(&ctx);
}

/*
 * A wrapper of a created stream keeps it: the owner's destroy (at the flush)
 * leaves it to the wrapper, which still works, and no new wrapper finds it.
 * Used to free the stream under the wrapper (ASan: heap-use-after-free). A
 * handle is refused from its owner's gm_stream_destroy on, not only once the
 * queue has flushed the destroy (it used to be wrappable until then).
 */
static void test_wrapper_keeps_destroyed_stream(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *ext = NULL, *again = NULL;
    void *native = NULL;
    _Atomic int calls = 0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    native = gm_stream_native(owner);
    assert_ok(gm_stream_wrap_external(ctx, native, &ext));
    gm_stream_destroy(&owner);
    for (int flushed = 0; flushed < 2; flushed++) {
        assert_status(gm_stream_wrap_external(ctx, native, &again), GM_ERR_INVALID_HANDLE);
        assert_message_contains("destroyed");
        assert_null(again);
        if (flushed == 0) {
            assert_int_equal(rt_stats(ctx).pending_count, 1); /* the destroy is queued */
            assert_ok(gm_deallocations_flush(ctx));           /* the backend's destroy runs */
        }
    }
    assert_ok(gm_stream_query(ext));
    assert_ok(gm_stream_add_callback(ext, count_callback, (void *)&calls));
    assert_ok(gm_stream_synchronize(ext));
    assert_int_equal(calls, 1);
    gm_stream_destroy(&ext);
    assert_ok(gm_deallocations_flush(ctx)); /* the last wrapper: the stream goes */
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 1);

    /* without a wrapper: refused while the destroy is queued, and once it ran */
    assert_ok(gm_stream_create(ctx, 0, &owner));
    native = gm_stream_native(owner);
    gm_stream_destroy(&owner);
    assert_status(gm_stream_wrap_external(ctx, native, &again), GM_ERR_INVALID_HANDLE);
    assert_message_contains("gm_stream_wrap_external: ");
    assert_message_contains("destroyed with gm_stream_destroy");
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 2);
    assert_status(gm_stream_wrap_external(ctx, native, &again), GM_ERR_INVALID_HANDLE);
    assert_null(again);

    /* a new stream is wrappable, whatever address it got */
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    gm_stream_destroy(&ext);
    gm_stream_destroy(&owner);
    gm_context_destroy(&ctx);
}

/*
 * A destroy that fails keeps the stream queued and its handle refused, behind
 * another stream's too; teardown drops both (no leak, no stale list entry).
 */
static void test_failing_stream_destroy_stays_refused(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *again = NULL, *owner2 = NULL;
    void *native = NULL, *native2 = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_create(ctx, 0, &owner2));
    native = gm_stream_native(owner);
    native2 = gm_stream_native(owner2);
    rt_fault_fail_at(RT_STREAM_DESTROY, rt_fault_calls(RT_STREAM_DESTROY) + 1, GM_ERR_DRIVER);
    gm_stream_destroy(&owner);
    gm_stream_destroy(&owner2);
    assert_true(gm_deallocations_flush(ctx) != GM_OK);
    assert_status(gm_stream_wrap_external(ctx, native, &again), GM_ERR_INVALID_HANDLE);
    assert_message_contains("destroyed with gm_stream_destroy");
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    assert_status(gm_stream_wrap_external(ctx, native2, &again), GM_ERR_INVALID_HANDLE);
    rt_fault_fail_at(RT_STREAM_DESTROY, rt_fault_calls(RT_STREAM_DESTROY) + 2, GM_ERR_DRIVER);
    assert_true(gm_deallocations_flush(ctx) != GM_OK); /* owner goes, owner2 fails */
    assert_status(gm_stream_wrap_external(ctx, native2, &again), GM_ERR_INVALID_HANDLE);
    assert_message_contains("destroyed with gm_stream_destroy");
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
}

/*
 * A bookkeeping allocator that hands a freed block back to the next request
 * of the same size (newest first), as a heap often does, so that an address
 * is reused deterministically. Blocks carry their size in a header.
 */
#define REUSE_HEADER 16
#define REUSE_MAX    256
static pthread_mutex_t reuse_lock = PTHREAD_MUTEX_INITIALIZER;
static void *reuse_freed[REUSE_MAX];
static int reuse_count;

static size_t reuse_size(void *block)
{
    return *(size_t *)block;
}

static void *reuse_malloc(size_t size)
{
    void *block = NULL;

    pthread_mutex_lock(&reuse_lock);
    for (int i = reuse_count - 1; i >= 0 && block == NULL; i--)
        if (reuse_size(reuse_freed[i]) == size) {
            block = reuse_freed[i];
            memmove(&reuse_freed[i], &reuse_freed[i + 1],
                    (size_t)(reuse_count - i - 1) * sizeof(void *));
            reuse_count--;
        }
    pthread_mutex_unlock(&reuse_lock);
    if (block == NULL && (block = malloc(REUSE_HEADER + size)) == NULL)
        return NULL;
    *(size_t *)block = size;
    return (char *)block + REUSE_HEADER;
}

static void reuse_free(void *ptr)
{
    void *block = ptr == NULL ? NULL : (char *)ptr - REUSE_HEADER;

    if (block == NULL)
        return;
    pthread_mutex_lock(&reuse_lock);
    if (reuse_count == REUSE_MAX) { /* the oldest goes */
        free(reuse_freed[0]);
        memmove(&reuse_freed[0], &reuse_freed[1], (REUSE_MAX - 1) * sizeof(void *));
        reuse_count--;
    }
    reuse_freed[reuse_count++] = block;
    pthread_mutex_unlock(&reuse_lock);
}

static void *reuse_calloc(size_t count, size_t size)
{
    void *ptr = count != 0 && size > SIZE_MAX / count ? NULL : reuse_malloc(count * size);

    if (ptr != NULL)
        memset(ptr, 0, count * size);
    return ptr;
}

static void *reuse_realloc(void *ptr, size_t size)
{
    void *fresh = reuse_malloc(size);
    size_t old = ptr == NULL ? 0 : reuse_size((char *)ptr - REUSE_HEADER);

    if (fresh != NULL && ptr != NULL) {
        memcpy(fresh, ptr, old < size ? old : size);
        reuse_free(ptr);
    }
    return fresh;
}

static void reuse_allocator_end(void)
{
    assert_ok(gm_set_host_allocator(NULL));
    for (int i = 0; i < reuse_count; i++)
        free(reuse_freed[i]);
    reuse_count = 0;
}

/* What a foreign release run by the flush saw when it made a stream and wrapped it. */
typedef struct reuse_probe {
    gm_context *ctx;
    void *old_native;
    gm_stream *made, *wrapped;
    bool reused;
    gm_status wrap;
} reuse_probe;

static void make_and_wrap_release(void *user)
{
    reuse_probe *p = user;

    assert_ok(gm_stream_create(p->ctx, 0, &p->made));
    p->reused = gm_stream_native(p->made) == p->old_native;
    p->wrap = gm_stream_wrap_external(p->ctx, gm_stream_native(p->made), &p->wrapped);
}

static void release_in_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    gm_array_release((gm_array **)user);
}

/*
 * The handle of a destroyed stream is refused only until the backend's
 * destroy ran: the heap may hand its address to a new stream at once, in the
 * same flush (here the release of a foreign array released in a callback,
 * queued behind the destroy, makes one, with an allocator that reuses the
 * freed block), and that live stream must
 * be wrappable. It was refused (the stream stayed listed as dying until the
 * whole batch was released).
 */
static void test_new_stream_at_destroyed_address(void **state)
{
    const gm_host_allocator reuse = {reuse_malloc, reuse_calloc, reuse_realloc, reuse_free};
    gm_context *ctx = NULL;
    int64_t n = 64;
    gm_array *dev = NULL, *foreign = NULL;
    gm_stream *old = NULL, *cbs = NULL;
    reuse_probe p = {NULL, NULL, NULL, NULL, false, GM_ERR_INTERNAL};

    (void)state;
    assert_ok(gm_set_host_allocator(&reuse));
    ctx = rt_fault_ctx();
    p.ctx = ctx;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &dev));
    assert_ok(
        gm_array_from_foreign(ctx, gm_array_view(dev), make_and_wrap_release, &p, NULL, &foreign));
    assert_ok(gm_stream_create(ctx, 0, &cbs));
    assert_ok(gm_stream_create(ctx, 0, &old));
    p.old_native = gm_stream_native(old);
    gm_stream_destroy(&old);
    /* released in a callback, its release is queued behind the destroy */
    assert_ok(gm_stream_add_callback(cbs, release_in_callback, &foreign));
    assert_ok(gm_stream_synchronize(cbs));
    assert_null(foreign);
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    assert_ok(gm_deallocations_flush(ctx));
    assert_true(p.reused); /* the case this test is about */
    assert_ok(p.wrap);
    assert_non_null(p.wrapped);
    gm_stream_destroy(&p.wrapped);
    gm_stream_destroy(&p.made);
    gm_stream_destroy(&cbs);
    gm_array_release(&dev);
    gm_context_destroy(&ctx);
    reuse_allocator_end();
}

/* A wrapped stream is never destroyed by gpumem: the owner keeps using it. */
static void test_wrap_external(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *ext = NULL;
    int64_t n = 16;
    gm_array *a = NULL;
    int token = 0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_ptr_equal(gm_stream_native(ext), gm_stream_native(owner));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_ok(gm_array_memset(a, 1, ext));
    assert_ok(gm_stream_synchronize(ext));
    gm_stream_destroy(&ext);
    assert_null(ext);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the wrapper, count only */
    assert_int_equal(rt_stats(ctx).pending_device_bytes, 0);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_ok(gm_array_memset(a, 2, owner));
    assert_ok(gm_stream_synchronize(owner));
    assert_status(gm_stream_wrap_external(ctx, NULL, &ext), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_wrap_external(ctx, &token, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_wrap_external(NULL, &token, &ext), GM_ERR_NULL_POINTER);
    assert_true(gm_stream_wrap_external(ctx, &token, &ext) != GM_OK);
    assert_null(ext);
    assert_int_equal(rt_fault_calls(RT_STREAM_DESTROY), 0);
    gm_array_release(&a);
    gm_stream_destroy(&owner);
    gm_context_destroy(&ctx);
}

static void test_synchronize_query_callback(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_event *ev = NULL;
    gate g;

    (void)state;
    memset(&g, 0, sizeof(g));
    g.seen_status = GM_ERR_INTERNAL;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_add_callback(st, gate_callback, &g));
    assert_ok(gm_event_create(ctx, false, &ev));
    assert_ok(gm_event_record(ev, st));
    assert_status(gm_stream_query(NULL), GM_ERR_NULL_POINTER); /* an older message */
    assert_status(gm_stream_query(st), GM_ERR_NOT_READY);
    assert_message_contains("gm_stream_query: the stream still has work pending");
    assert_status(gm_stream_query(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_event_query(ev), GM_ERR_NOT_READY);
    assert_message_contains("gm_event_query: the event has not completed yet");
    atomic_store(&g.release, 1);
    assert_ok(gm_stream_synchronize(st));
    assert_ok(gm_stream_query(st));
    assert_int_equal(atomic_load(&g.ran), 1);
    assert_ptr_equal(g.seen_stream, st);
    assert_int_equal(g.seen_status, GM_OK);
    assert_int_equal(rt_stats(ctx).pending_count, 0); /* a callback is no deallocation */
    assert_status(gm_stream_add_callback(st, NULL, &g), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_add_callback(NULL, gate_callback, &g), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_synchronize(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_query(NULL), GM_ERR_NULL_POINTER);
    rt_fault_fail_at(RT_ADD_CALLBACK, 2, GM_ERR_DRIVER);
    assert_status(gm_stream_add_callback(st, gate_callback, &g), GM_ERR_DRIVER);
    assert_ok(gm_event_query(ev));
    gm_event_destroy(&ev);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* A callback that records whether a gate's callback had run before it. */
typedef struct probe {
    gate *g;
    int saw_gate_ran; /* -1: the probe has not run */
    gm_stream *stream;
} order_probe;

static void probe_callback(gm_stream *stream, gm_status status, void *user)
{
    order_probe *p = user;

    (void)status;
    p->saw_gate_ran = atomic_load(&p->g->ran);
    p->stream = stream;
}

/*
 * The default stream is the legacy stream (Numba's default_stream() is stream
 * 0 with the legacy APIs): its work waits for earlier work on blocking
 * streams, and events recorded on it (or on NULL) time that wait.
 */
static void test_default_stream_is_legacy(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *s = NULL, *def = gm_default_stream(ctx);
    gm_event *start = NULL, *end = NULL;
    gate g;
    order_probe p = {&g, -1, NULL};
    float ms = 0.0f;

    (void)state;
    memset(&g, 0, sizeof(g));
    assert_non_null(def);
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_create(ctx, true, &end));
    assert_ok(gm_event_record(start, NULL));
    assert_ok(gm_stream_add_callback(s, gate_callback, &g));
    assert_ok(gm_stream_add_callback(def, probe_callback, &p));
    assert_ok(gm_event_record(end, def));
    sleep_ms(50);
    assert_status(gm_stream_query(def), GM_ERR_NOT_READY); /* waits for s's work */
    assert_status(gm_event_query(end), GM_ERR_NOT_READY);
    atomic_store(&g.release, 1);
    assert_ok(gm_stream_synchronize(def));
    assert_int_equal(p.saw_gate_ran, 1); /* the gate had run before the probe */
    assert_ptr_equal(p.stream, def);
    assert_ok(gm_event_elapsed_ms(start, end, &ms));
    assert_true(ms >= 45.0f); /* the gate held `end` back for at least the 50 ms sleep */
    assert_ok(gm_stream_query(s));
    gm_event_destroy(&start);
    gm_event_destroy(&end);
    gm_stream_destroy(&s);
    gm_context_destroy(&ctx);
}

/* Records the thread a stream's callback runs on: its kernel id (a pthread_t is reused). */
static void thread_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    *(long *)user = (long)syscall(SYS_gettid);
}

/*
 * A destroyed stream's worker serves the next stream made (host_stream.c):
 * the new stream gets none of the old one's state (its unreported error, its
 * non-blocking flag), and more streams than the context keeps idle workers
 * for are destroyed and made again without harm; the context joins the idle
 * workers when it goes (TSan and LSan would report them otherwise).
 */
static void test_destroyed_stream_worker_reused(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *s = NULL, *many[24] = {NULL}, *def = gm_default_stream(ctx);
    gm_backend_stream *bs = NULL;
    long first = 0, second = -1, threads[24] = {0};
    gate g;
    order_probe p = {&g, -1, NULL};

    (void)state;
    memset(&g, 0, sizeof(g));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(gm_stream_add_callback(s, thread_callback, &first));
    assert_ok(gm__stream_backend("test", ctx, s, &bs));
    assert_ok(rt_fault_ops()->stream_enqueue_host(ctx->bctx, bs, work_fails, NULL, NULL));
    gm_stream_destroy(&s); /* its error unreported */
    assert_ok(gm_deallocations_flush(ctx));
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_add_callback(s, thread_callback, &second));
    assert_ok(gm_stream_synchronize(s)); /* not the old stream's error */
    assert_int_equal(first, second);     /* the same worker */
    /* blocking, unlike the old stream: legacy work waits for it */
    assert_ok(gm_stream_add_callback(s, gate_callback, &g));
    assert_ok(gm_stream_add_callback(def, probe_callback, &p));
    sleep_ms(20);
    assert_status(gm_stream_query(def), GM_ERR_NOT_READY);
    atomic_store(&g.release, 1);
    assert_ok(gm_stream_synchronize(def));
    assert_int_equal(p.saw_gate_ran, 1);
    gm_stream_destroy(&s);
    /* more than the idle workers kept, twice over; each stream runs its own work */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 24; i++) {
            assert_ok(gm_stream_create(ctx, i % 2 == 0 ? 0 : GM_STREAM_NON_BLOCKING, &many[i]));
            assert_ok(gm_stream_add_callback(many[i], thread_callback, &threads[i]));
        }
        for (int i = 0; i < 24; i++)
            assert_ok(gm_stream_synchronize(many[i]));
        for (int i = 0; i < 24; i++) {
            for (int j = 0; j < i; j++)
                assert_int_not_equal(threads[i], threads[j]); /* a worker each */
        }
        for (int i = 0; i < 24; i++)
            gm_stream_destroy(&many[i]);
        assert_ok(gm_deallocations_flush(ctx));
    }
    assert_ok(gm_stream_create(ctx, 0, &s)); /* live at teardown, with idle workers */
    gm_context_destroy(&ctx);
}

/*
 * Legacy-stream work still waits for a busy blocking stream once other
 * streams, blocking or not, have gone busy and idle again meanwhile (the
 * simulator counts the blocking streams holding work, so that an idle context
 * does not walk its streams for each legacy item), and runs at once when the
 * only busy stream is non-blocking.
 */
static void test_legacy_waits_after_other_streams_idle(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *a = NULL, *b = NULL, *n = NULL, *def = gm_default_stream(ctx);
    gate g[2], gn;
    atomic_int count;

    (void)state;
    memset(g, 0, sizeof(g));
    memset(&gn, 0, sizeof(gn));
    atomic_init(&count, 0);
    assert_ok(gm_stream_create(ctx, 0, &a));
    assert_ok(gm_stream_create(ctx, 0, &b));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &n));
    for (int round = 0; round < 2; round++) {
        order_probe p = {&g[round], -1, NULL};

        assert_ok(gm_stream_add_callback(a, gate_callback, &g[round]));
        /* while a holds its gate, n and b go busy and idle once each */
        assert_ok(gm_stream_add_callback(n, count_callback, &count));
        assert_ok(gm_stream_synchronize(n));
        assert_ok(gm_stream_add_callback(b, count_callback, &count));
        assert_ok(gm_stream_synchronize(b));
        assert_ok(gm_stream_add_callback(def, probe_callback, &p));
        sleep_ms(50);
        assert_status(gm_stream_query(def), GM_ERR_NOT_READY); /* waits for a's gate */
        atomic_store(&g[round].release, 1);
        assert_ok(gm_stream_synchronize(def));
        assert_int_equal(p.saw_gate_ran, 1);
        /* every stream busy and idle again, in turn and together */
        assert_ok(gm_stream_add_callback(b, count_callback, &count));
        assert_ok(gm_stream_add_callback(n, count_callback, &count));
        assert_ok(gm_stream_add_callback(def, count_callback, &count));
        assert_ok(gm_context_synchronize(ctx));
    }
    /* only a non-blocking stream busy: the legacy stream does not wait for it */
    assert_ok(gm_stream_add_callback(n, gate_callback, &gn));
    assert_ok(gm_stream_add_callback(def, count_callback, &count));
    assert_ok(gm_stream_synchronize(def));
    assert_int_equal(atomic_load(&gn.ran), 0);
    atomic_store(&gn.release, 1);
    assert_ok(gm_stream_synchronize(n));
    assert_int_equal(atomic_load(&count), 11);
    gm_stream_destroy(&a);
    gm_stream_destroy(&b);
    gm_stream_destroy(&n);
    gm_context_destroy(&ctx);
}

/* A callback that takes a while, then sets a flag. */
static void slow_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    sleep_ms(30);
    atomic_store((atomic_int *)user, 1);
}

static void test_auto_synchronize(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    atomic_int done;

    (void)state;
    atomic_init(&done, 0);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_auto_synchronize_begin(st));
    assert_ok(gm_stream_auto_synchronize_begin(st));
    assert_ok(gm_stream_add_callback(st, slow_callback, &done));
    assert_ok(gm_stream_auto_synchronize_end(st));
    assert_int_equal(rt_fault_calls(RT_STREAM_SYNCHRONIZE), 0);
    assert_ok(gm_stream_auto_synchronize_end(st)); /* depth 0: synchronizes */
    assert_int_equal(rt_fault_calls(RT_STREAM_SYNCHRONIZE), 1);
    assert_int_equal(atomic_load(&done), 1);
    assert_status(gm_stream_auto_synchronize_end(st), GM_ERR_STATE);
    assert_message_contains("no auto_synchronize scope is open");
    assert_ok(gm_stream_auto_synchronize_begin(st));
    rt_fault_fail_at(RT_STREAM_SYNCHRONIZE, 2, GM_ERR_LAUNCH);
    assert_status(gm_stream_auto_synchronize_end(st), GM_ERR_LAUNCH);
    assert_message_begins("gm_stream_auto_synchronize_end: stream_synchronize: injected failure");
    rt_fault_fail_at(RT_STREAM_SYNCHRONIZE, 3, GM_ERR_LAUNCH);
    assert_status(gm_stream_synchronize(st), GM_ERR_LAUNCH);
    assert_message_begins("gm_stream_synchronize: stream_synchronize: injected failure");
    assert_status(gm_stream_auto_synchronize_begin(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_stream_auto_synchronize_end(NULL), GM_ERR_NULL_POINTER);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* What a callback saw when it called gm_context_synchronize. */
typedef struct sync_probe {
    gm_context *ctx;
    gm_status status;
    char message[128];
} sync_probe;

static void sync_in_callback(gm_stream *stream, gm_status status, void *user)
{
    sync_probe *p = user;

    (void)stream;
    (void)status;
    p->status = gm_context_synchronize(p->ctx);
    snprintf(p->message, sizeof(p->message), "%s", gm_last_error_message());
}

/* gm_context_synchronize waits for every stream (created, legacy default, per-thread). */
static void test_context_synchronize(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *a = NULL, *b = NULL;
    atomic_int done_a, done_b, done_default, done_legacy;
    sync_probe probe = {0};
    int64_t calls = 0;

    (void)state;
    atomic_init(&done_a, 0);
    atomic_init(&done_b, 0);
    atomic_init(&done_default, 0);
    atomic_init(&done_legacy, 0);
    assert_ok(gm_stream_create(ctx, 0, &a));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &b));
    assert_ok(gm_stream_add_callback(a, slow_callback, &done_a));
    assert_ok(gm_stream_add_callback(b, slow_callback, &done_b));
    assert_ok(
        gm_stream_add_callback(gm_per_thread_default_stream(ctx), slow_callback, &done_default));
    assert_ok(gm_stream_add_callback(gm_legacy_default_stream(ctx), slow_callback, &done_legacy));
    calls = rt_fault_calls(RT_DEVICE_SYNCHRONIZE);
    assert_ok(gm_context_synchronize(ctx));
    assert_int_equal(rt_fault_calls(RT_DEVICE_SYNCHRONIZE), calls + 1);
    assert_int_equal(atomic_load(&done_a), 1);
    assert_int_equal(atomic_load(&done_b), 1);
    assert_int_equal(atomic_load(&done_default), 1);
    assert_int_equal(atomic_load(&done_legacy), 1);
    assert_ok(gm_stream_query(a));
    assert_ok(gm_stream_query(b));
    /* Inside a callback it would wait for its own stream: refused. */
    probe.ctx = ctx;
    probe.status = GM_ERR_INTERNAL;
    assert_ok(gm_stream_add_callback(a, sync_in_callback, &probe));
    assert_ok(gm_stream_synchronize(a));
    assert_int_equal(probe.status, GM_ERR_STATE);
    assert_non_null(strstr(probe.message, "gm_context_synchronize: not allowed inside a stream "
                                          "callback"));
    /* The backend's failure, named by the public call. */
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, rt_fault_calls(RT_DEVICE_SYNCHRONIZE) + 1,
                     GM_ERR_DRIVER);
    assert_status(gm_context_synchronize(ctx), GM_ERR_DRIVER);
    assert_message_contains("gm_context_synchronize: ");
    assert_status(gm_context_synchronize(NULL), GM_ERR_NULL_POINTER);
    gm_stream_destroy(&a);
    gm_stream_destroy(&b);
    gm_context_destroy(&ctx);
}

/* What a callback's synchronous calls returned. */
typedef struct sync_calls {
    gm_context *ctx;
    gm_array *x;
    gm_kernel *fill_kernel;
    gm_array *pinned;
    gm_status fill, memset, copy, to_device, to_host_new, launch, constant, scope;
    gm_status host_copy, host_fill, create;
    gm_context *created;
    bool host_ok;
    char message[256];
} sync_calls;

static void sync_calls_callback(gm_stream *stream, gm_status status, void *user)
{
    sync_calls *c = user;
    const struct timespec pause = {0, 50 * 1000 * 1000};
    float host[16], v = 7.0f;
    int64_t n = 16;
    gm_ndview hv;
    gm_array *a = NULL, *b = NULL;
    gm_arg args[3];

    (void)stream;
    (void)status;
    nanosleep(&pause, NULL); /* the main thread queues work on the legacy stream meanwhile */
    (void)gm_ndview_init(host, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &hv);
    args[0] = gm_arg_array(c->x);
    args[1] = gm_arg_f32(v);
    args[2] = gm_arg_i64(n);
    c->fill = gm_array_fill(c->x, &v, NULL);
    snprintf(c->message, sizeof(c->message), "%s", gm_last_error_message());
    c->memset = gm_array_memset(c->x, 0, NULL);
    c->copy = gm_copy(c->ctx, &hv, gm_array_view(c->x), NULL);
    c->to_device = gm_to_device(c->ctx, &hv, NULL, &a);
    c->to_host_new = gm_array_copy_to_host_new(c->x, NULL, &b);
    c->launch =
        gm_launch(c->fill_kernel, (gm_dim3){1, 1, 1}, (gm_dim3){16, 1, 1}, 0, NULL, 3, args);
    c->constant = gm_module_set_constant(gm_kernel_module(c->fill_kernel), "none", &v, sizeof(v));
    c->scope = gm_stream_auto_synchronize_begin(gm_default_stream(c->ctx)); /* its end would be */
    c->create = gm_context_create(NULL, &c->created); /* CUDA's init would be refused there */
    {
        float other[16];
        gm_ndview ov;

        (void)gm_ndview_init(other, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &ov);
        c->host_fill = gm_array_fill(c->pinned, &v, NULL); /* pinned: host memory */
        c->host_copy = gm_copy(c->ctx, &ov, gm_array_view(c->pinned), NULL);
        c->host_ok = other[0] == 7.0f && other[15] == 7.0f;
    }
    gm_array_release(&a);
    gm_array_release(&b);
}

/*
 * A synchronous call (no stream) inside a callback waits for the legacy
 * stream, whose work queued after the callback waits for the callback's
 * stream: refused (GM_ERR_STATE, runtime.h forbids it), not a hang.
 */
static void test_sync_calls_in_callback(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *s = NULL;
    gm_array *y = NULL;
    int64_t n = 16;
    float one = 1.0f;
    sync_calls c;

    (void)state;
    memset(&c, 0, sizeof(c));
    assert_ok(gm_set_host_allocator(NULL)); /* the callback allocates on a worker thread */
    assert_ok(gm_context_create(NULL, &ctx));
    c.ctx = ctx;
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &c.x));
    assert_ok(gm_device_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &y));
    assert_ok(gm_pinned_array(ctx, 1, &n, GM_FLOAT32, GM_ORDER_C, &c.pinned));
    assert_ok(gm_kernel_find(ctx, "fill_f32", &c.fill_kernel));
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_add_callback(s, sync_calls_callback, &c));
    assert_ok(gm_array_fill(y, &one, gm_default_stream(ctx))); /* waits for s's callback */
    assert_ok(gm_stream_synchronize(s));
    assert_int_equal(c.fill, GM_ERR_STATE);
    assert_non_null(strstr(c.message, "gm_array_fill: a synchronous operation on device "
                                      "memory is not allowed inside a stream callback"));
    assert_int_equal(c.host_copy, GM_OK); /* host to host waits for nothing: allowed */
    assert_int_equal(c.host_fill, GM_OK);
    assert_true(c.host_ok);
    assert_int_equal(c.memset, GM_ERR_STATE);
    assert_int_equal(c.copy, GM_ERR_STATE);
    assert_int_equal(c.to_device, GM_ERR_STATE);
    assert_int_equal(c.to_host_new, GM_ERR_STATE);
    assert_int_equal(c.launch, GM_ERR_STATE);
    assert_int_equal(c.constant, GM_ERR_STATE);
    assert_int_equal(c.scope, GM_ERR_STATE);
    assert_int_equal(c.create, GM_ERR_STATE);
    assert_null(c.created);
    assert_status(gm_stream_auto_synchronize_end(gm_default_stream(ctx)), GM_ERR_STATE);
    assert_message_contains("no auto_synchronize scope is open"); /* none was opened */
    assert_ok(gm_context_synchronize(ctx));
    gm_array_release(&c.x);
    gm_array_release(&c.pinned);
    gm_array_release(&y);
    gm_stream_destroy(&s);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/*
 * runtime.h: an event never recorded is complete to gm_event_query and
 * gm_event_synchronize (as cuEventQuery has it); gm_event_elapsed_ms does not
 * wait (GM_ERR_NOT_READY while the end event is pending, as
 * cuEventElapsedTime) and refuses an event never recorded; *ms_p is written
 * only on success. (The header used to leave both cases unsaid.)
 */
static void test_event_states(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_event *start = NULL, *end = NULL;
    gate g;
    float ms = -1.0f;

    (void)state;
    memset(&g, 0, sizeof(g));
    atomic_init(&g.release, 0);
    atomic_init(&g.ran, 0);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_create(ctx, true, &end));
    assert_ok(gm_event_query(end));
    assert_ok(gm_event_synchronize(end));
    assert_ok(gm_event_record(start, st));
    assert_status(gm_event_elapsed_ms(start, end, &ms), GM_ERR_INVALID_ARG);
    assert_message_contains("the end event was never recorded");
    assert_ok(gm_stream_add_callback(st, gate_callback, &g));
    assert_ok(gm_event_record(end, st));
    assert_status(gm_event_query(end), GM_ERR_NOT_READY);
    assert_status(gm_event_elapsed_ms(start, end, &ms), GM_ERR_NOT_READY);
    assert_true(ms == -1.0f);
    atomic_store(&g.release, 1);
    assert_ok(gm_event_synchronize(end));
    assert_ok(gm_event_elapsed_ms(start, end, &ms));
    assert_true(ms >= 0.0f);
    gm_event_destroy(&start);
    gm_event_destroy(&end);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/*
 * The simulator completes an event recorded while nothing is queued on any
 * stream at the record itself (its marker would complete as soon as its
 * worker woke; the round trip cost a synchronous pinned fill 12-70 us), with
 * the record's time; with work queued anywhere the marker goes through its
 * stream, and one on the legacy stream waits for a blocking stream's work.
 */
static void test_event_on_idle_context(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *a = NULL, *b = NULL;
    gm_event *start = NULL, *end = NULL;
    gate g;
    float ms = -1.0f;

    (void)state;
    memset(&g, 0, sizeof(g));
    atomic_init(&g.release, 0);
    atomic_init(&g.ran, 0);
    assert_ok(gm_stream_create(ctx, 0, &a));
    assert_ok(gm_stream_create(ctx, 0, &b));
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_create(ctx, true, &end));
    assert_ok(gm_event_record(start, a));
    assert_ok(gm_event_query(start)); /* complete at once, no synchronize */
    sleep_ms(20);
    assert_ok(gm_event_record(end, NULL));
    assert_ok(gm_event_query(end));
    assert_ok(gm_event_elapsed_ms(start, end, &ms));
    assert_true(ms >= 20.0f);
    assert_ok(gm_stream_add_callback(b, gate_callback, &g)); /* b holds work now */
    assert_ok(gm_event_record(end, NULL));
    assert_status(gm_event_query(end), GM_ERR_NOT_READY); /* the legacy stream waits for b */
    atomic_store(&g.release, 1);
    assert_ok(gm_event_synchronize(end));
    assert_int_equal(atomic_load(&g.ran), 1);
    gm_event_destroy(&start);
    gm_event_destroy(&end);
    gm_stream_destroy(&a);
    gm_stream_destroy(&b);
    gm_context_destroy(&ctx);
}

static void test_events(void **state)
{
    gm_context *ctx = rt_fault_ctx(), *other = NULL;
    gm_stream *st = NULL;
    gm_event *start = NULL, *end = NULL, *plain = NULL, *foreign = NULL;
    float ms = -1.0f;
    atomic_int done;

    (void)state;
    atomic_init(&done, 0);
    assert_ok(gm_context_create(NULL, &other));
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_event_create(ctx, true, &start));
    assert_ok(gm_event_create(ctx, true, &end));
    assert_ok(gm_event_create(ctx, false, &plain));
    assert_ok(gm_event_create(other, true, &foreign));
    assert_ok(gm_event_record(start, st));
    assert_ok(gm_stream_add_callback(st, slow_callback, &done));
    assert_ok(gm_event_record(end, st));
    assert_ok(gm_event_synchronize(end));
    assert_ok(gm_event_query(end));
    assert_ok(gm_event_elapsed_ms(start, end, &ms));
    assert_true(ms >= 20.0f);
    assert_ok(gm_event_record(plain, NULL)); /* the default stream */
    assert_ok(gm_stream_wait_event(st, plain));
    assert_ok(gm_stream_synchronize(st));
    assert_status(gm_event_elapsed_ms(start, plain, &ms), GM_ERR_INVALID_ARG);
    assert_message_contains("the end event was created without timing");
    assert_status(gm_event_elapsed_ms(start, foreign, &ms), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_event_elapsed_ms(start, end, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_event_elapsed_ms(NULL, end, &ms), GM_ERR_NULL_POINTER);
    assert_status(gm_event_record(foreign, st), GM_ERR_WRONG_CONTEXT);
    assert_status(gm_stream_wait_event(st, foreign), GM_ERR_WRONG_CONTEXT);
    assert_message_contains("gm_stream_wait_event: the event belongs to another context than "
                            "the stream");
    assert_status(gm_stream_wait_event(st, NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_event_record(NULL, st), GM_ERR_NULL_POINTER);
    assert_status(gm_event_query(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_event_synchronize(NULL), GM_ERR_NULL_POINTER);
    assert_status(gm_event_create(NULL, true, &plain), GM_ERR_NULL_POINTER);
    assert_status(gm_event_create(ctx, true, NULL), GM_ERR_NULL_POINTER);
    gm_event_destroy(&start);
    gm_event_destroy(&end);
    assert_null(start);
    assert_int_equal(rt_stats(ctx).pending_count, 2); /* the two events */
    assert_int_equal(rt_fault_calls(RT_EVENT_DESTROY), 0);
    rt_fault_fail_at(RT_EVENT_CREATE, rt_fault_calls(RT_EVENT_CREATE) + 1, GM_ERR_DRIVER);
    assert_status(gm_event_create(ctx, false, &start), GM_ERR_DRIVER);
    assert_null(start);
    gm_event_destroy(NULL);
    gm_event_destroy(&start);
    gm_event_destroy(&plain);
    gm_event_destroy(&foreign);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
    assert_int_equal(rt_fault_calls(RT_EVENT_DESTROY), 3);
    gm_context_destroy(&other);
}

/*
 * gm_stream_wait_event with a NULL stream makes the default stream wait, as
 * Numba's Event.wait(stream=0) and as gm_event_record takes NULL: the event is
 * recorded on a non-blocking stream (not ordered with the legacy stream) behind
 * a gate, so only the wait orders the default stream's callback after it.
 */
static void test_wait_event_on_default_stream(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_event *ev = NULL;
    gate g;
    order_probe probe = {&g, -1, NULL};

    (void)state;
    memset(&g, 0, sizeof g);
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &st));
    assert_ok(gm_event_create(ctx, false, &ev));
    assert_ok(gm_stream_add_callback(st, gate_callback, &g));
    assert_ok(gm_event_record(ev, st));
    assert_ok(gm_stream_wait_event(NULL, ev));
    assert_ok(gm_stream_add_callback(gm_default_stream(ctx), probe_callback, &probe));
    sleep_ms(20);
    assert_int_equal(probe.saw_gate_ran, -1); /* held back by the wait */
    atomic_store(&g.release, 1);
    assert_ok(gm_stream_synchronize(gm_default_stream(ctx)));
    assert_int_equal(probe.saw_gate_ran, 1);
    gm_event_destroy(&ev);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

typedef struct release_job {
    gm_context *ctx;
    gm_array *array;
    gm_status flush_status;
    int delay_ms;
} release_job;

/* A callback that releases an array and tries to flush. */
static void release_callback(gm_stream *stream, gm_status status, void *user)
{
    release_job *job = user;

    (void)stream;
    (void)status;
    sleep_ms(job->delay_ms);
    gm_array_release(&job->array);
    job->flush_status = gm_deallocations_flush(job->ctx);
}

/*
 * Releasing inside a callback only queues (no flush on the worker thread),
 * and destroying the context while such a callback is pending does not
 * deadlock. Frees happen on the worker thread, so the C allocator is used.
 */
static void test_callback_releases(void **state)
{
    gm_context_options o = rt_options(0, 10.0, BIG); /* every release would flush */
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    int64_t n = 64;
    release_job job = {NULL, NULL, GM_OK, 0};

    (void)state;
    assert_ok(gm_set_host_allocator(NULL));
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_stream_create(ctx, 0, &st));
    job.ctx = ctx;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &job.array));
    assert_ok(gm_stream_add_callback(st, release_callback, &job));
    assert_ok(gm_stream_synchronize(st));
    assert_null(job.array);
    assert_int_equal(job.flush_status, GM_ERR_STATE);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the array */
    assert_int_equal(rt_stats(ctx).flushes, 0);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    job.delay_ms = 30;
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &job.array));
    assert_ok(gm_stream_add_callback(st, release_callback, &job));
    gm_context_destroy(&ctx); /* waits for the callback, which takes the context's lock */
    assert_null(job.array);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/*
 * Callbacks are no deallocations: many of them neither count in the queue
 * nor trigger a flush (which would wait for every stream); their
 * bookkeeping is reused by the next callback and freed on user threads
 * (the cmocka allocator checks that nothing leaks and nothing is freed twice).
 */
static void test_callbacks_not_queued(void **state)
{
    gm_context_options o = rt_options(3, 10.0, BIG);
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    _Atomic int calls = 0;

    (void)state;
    assert_ok(gm_context_create(&o, &ctx));
    assert_ok(gm_stream_create(ctx, 0, &st));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20; i++)
            assert_ok(gm_stream_add_callback(st, count_callback, (void *)&calls));
        assert_ok(gm_stream_synchronize(st));
    }
    assert_int_equal(atomic_load(&calls), 60);
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_int_equal(rt_stats(ctx).flushes, 0);
    assert_int_equal(rt_stats(ctx).freed_count, 0);
    gm_stream_destroy(&st);
    gm_context_destroy(&ctx);
}

/* Host work that fails. */
static gm_status failing_work(void *user)
{
    (void)user;
    return gm__error(GM_ERR_LAUNCH, "injected host-work failure");
}

/*
 * An error a built-in stream still holds at context teardown is logged (a
 * created stream's destroy logs its own; nothing destroys a built-in one).
 */
static void test_teardown_reports_builtin_stream_error(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *def = NULL;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    def = gm_default_stream(ctx);
    assert_non_null(def);
    assert_ok(ctx->ops->stream_enqueue_host(ctx->bctx, def->bstream, failing_work, NULL, NULL));
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(rt_log_contains(GM_LOG_WARN, "gm_context_destroy: a built-in stream reported"));
    assert_true(rt_log_contains(GM_LOG_WARN, "injected host-work failure"));
}

/* Streams a callback destroys: its own and another one. */
typedef struct destroy_job {
    gm_stream *own;
    gm_stream *other;
} destroy_job;

static void destroy_streams_callback(gm_stream *stream, gm_status status, void *user)
{
    destroy_job *job = user;
    struct timespec pause = {0, 20 * 1000 * 1000}; /* the context is being destroyed by now */

    (void)stream;
    (void)status;
    nanosleep(&pause, NULL);
    gm_stream_destroy(&job->other);
    gm_stream_destroy(&job->own);
}

/*
 * A callback may destroy streams, its own included, while the context is
 * being destroyed: the teardown returns (it used to walk the context's
 * stream list while the callback unlinked from it, and spun forever on the
 * unlinked stream; TSan saw the race when the stream was another one).
 */
static void test_callback_destroys_streams_during_teardown(void **state)
{
    gm_context *ctx = NULL;
    destroy_job job = {NULL, NULL};

    (void)state;
    assert_ok(gm_set_host_allocator(NULL)); /* the worker frees */
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_stream_create(ctx, 0, &job.own));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &job.other));
    assert_ok(gm_stream_add_callback(job.own, destroy_streams_callback, &job));
    gm_context_destroy(&ctx);
    assert_null(ctx);
    assert_null(job.own);
    assert_null(job.other);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* Every bookkeeping allocation of stream and event calls may fail. */
static void test_injected_alloc_failures(void **state)
{
    int64_t n = 1;

    (void)state;
    for (;; n++) {
        gm_context *ctx = NULL;
        gm_stream *st = NULL, *ext = NULL;
        gm_event *ev = NULL;
        atomic_int done;
        gm_status s = GM_OK;

        atomic_init(&done, 0);
        rt_fault_reset();
        rt_alloc_fail_at(n);
        s = rt_fault_context(NULL, &ctx);
        if (s == GM_OK)
            s = gm_stream_create(ctx, 0, &st);
        if (s == GM_OK)
            s = gm_stream_wrap_external(ctx, gm_stream_native(st), &ext);
        if (s == GM_OK && gm_per_thread_default_stream(ctx) == NULL)
            s = gm_last_error();
        if (s == GM_OK)
            s = gm_event_create(ctx, true, &ev);
        if (s == GM_OK)
            s = gm_event_record(ev, ext);
        if (s == GM_OK)
            s = gm_stream_add_callback(st, slow_callback, &done);
        if (s == GM_OK)
            s = gm_stream_synchronize(st);
        gm_event_destroy(&ev);
        gm_stream_destroy(&ext);
        gm_stream_destroy(&st);
        gm_context_destroy(&ctx);
        if (rt_alloc_sweep_done(s, n, 1000))
            break;
    }
    print_message("%lld bookkeeping allocations failed in turn\n", (long long)n);
    assert_true(n > 5);
}

/*
 * A failing device_synchronize (the wait for the context's queued work
 * before memory is freed) is logged and the release goes on: a flush still
 * frees and returns GM_OK, and context teardown still completes, freeing
 * what was queued (cmocka checks for leaks).
 */
static void test_device_synchronize_fails(void **state)
{
    int64_t n = 64, calls = 0;
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL;
    gm_dealloc_stats s0;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    gm_array_release(&a);
    s0 = rt_stats(ctx);
    assert_int_equal(s0.pending_count, 1);
    calls = rt_fault_calls(RT_DEVICE_SYNCHRONIZE);
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, calls + 1, GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_clear_error();
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(gm_last_error(), GM_OK); /* logged, not left as the flush's error */
    assert_int_equal(rt_fault_calls(RT_DEVICE_SYNCHRONIZE), calls + 1);
    assert_true(rt_log_contains(GM_LOG_WARN, "deallocation queue: waiting for queued device work "
                                             "failed: device_synchronize: injected failure"));
    assert_int_equal(rt_stats(ctx).freed_count, s0.freed_count + 1);
    assert_int_equal(rt_stats(ctx).pending_count, 0);

    /* teardown, with a released array and a destroyed stream queued */
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    gm_array_release(&a);
    gm_stream_destroy(&st);
    assert_int_equal(rt_stats(ctx).pending_count, 2);
    calls = rt_fault_calls(RT_DEVICE_SYNCHRONIZE);
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, calls + 1, GM_ERR_DRIVER);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(rt_fault_calls(RT_DEVICE_SYNCHRONIZE) > calls);
    assert_true(rt_log_contains(GM_LOG_WARN, "gm_context_destroy: waiting for queued device work "
                                             "failed: device_synchronize: injected failure"));
    assert_false(rt_log_contains(GM_LOG_ERROR, "gm_context_destroy"));
}

/* What the callback that tried to chain during teardown got. */
static gm_stream *chain_target;
static atomic_int chain_status;

static void chained(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    atomic_store(&chain_status, 100); /* never runs: the chaining was refused */
}

static void chain_during_teardown(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    sleep_ms(200); /* the context's destruction has begun meanwhile */
    atomic_store(&chain_status, (int)gm_stream_add_callback(chain_target, chained, NULL));
}

/*
 * A callback that queues more stream work while the context is being
 * destroyed: refused (GM_ERR_STATE), since the teardown waits only for what
 * was queued before it (the chained callback ran during teardown and crashed
 * on a stream the teardown had queued for destruction).
 */
static void test_no_chaining_during_teardown(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *a = NULL;

    (void)state;
    atomic_store(&chain_status, 1);
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &a));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &chain_target));
    assert_ok(gm_stream_add_callback(a, chain_during_teardown, NULL));
    gm_context_destroy(&ctx);
    assert_int_equal(atomic_load(&chain_status), GM_ERR_STATE);
}

/*
 * A bookkeeping allocator whose first call after arming stalls: it holds a
 * callback inside gm_stream_add_callback, past its check of the context's
 * closing, while the main thread starts gm_context_destroy.
 */
static atomic_int stall_armed, stall_entered;

static void *stalling_malloc(size_t size)
{
    if (atomic_exchange(&stall_armed, 0) != 0) {
        atomic_store(&stall_entered, 1);
        sleep_ms(100); /* the context's destruction begins meanwhile */
    }
    return malloc(size);
}

static void *plain_calloc(size_t count, size_t size)
{
    return calloc(count, size);
}

static void *plain_realloc(void *ptr, size_t size)
{
    return realloc(ptr, size);
}

/* What the callback chained as the teardown began did. */
typedef struct late_chain {
    gm_context *ctx;
    gm_event *event;
    atomic_int chain_status;
    atomic_int ran;
} late_chain;

static void chained_late(gm_stream *stream, gm_status status, void *user)
{
    late_chain *job = user;

    (void)stream;
    (void)status;
    sleep_ms(50);
    (void)gm_event_create(job->ctx, false, &job->event); /* freed with the context */
    atomic_store(&job->ran, 1);
}

static void chain_as_teardown_begins(gm_stream *stream, gm_status status, void *user)
{
    late_chain *job = user;

    (void)status;
    atomic_store(&stall_armed, 1);
    atomic_store(&job->chain_status, (int)gm_stream_add_callback(stream, chained_late, job));
}

/*
 * A callback that chains another one just as the context's destruction
 * begins (its check of the context passed before): the chained callback is
 * accepted and waited for like the work queued before the destroy, so what
 * it makes is freed with the context (the teardown waited only for the first
 * callback; the chained one ran during the teardown, after the events were
 * freed, and its event leaked).
 */
static void test_chaining_as_teardown_begins(void **state)
{
    gm_host_allocator stalling = {stalling_malloc, plain_calloc, plain_realloc, free};
    gm_context *ctx = NULL;
    gm_stream *st = NULL;
    late_chain job;

    (void)state;
    memset(&job, 0, sizeof(job));
    atomic_store(&job.chain_status, 1);
    atomic_store(&stall_entered, 0);
    assert_ok(gm_set_host_allocator(&stalling)); /* workers allocate */
    assert_ok(gm_context_create(NULL, &ctx));
    job.ctx = ctx;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_stream_add_callback(st, chain_as_teardown_begins, &job));
    while (atomic_load(&stall_entered) == 0)
        sleep_ms(1);
    rt_log_capture(GM_LOG_INFO);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_int_equal(atomic_load(&job.chain_status), GM_OK);
    assert_int_equal(atomic_load(&job.ran), 1);
    assert_true(rt_log_contains(GM_LOG_INFO, "destroying 1 events still alive"));
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* A callback that queues another one on a second stream, then goes on a while. */
typedef struct cross_chain {
    gm_stream *other;
    atomic_int returned; /* the first callback has (nearly) returned */
    atomic_int seen;     /* what the second one saw of it: 1 returned, 0 still running */
    atomic_int ran;
    gm_status chain_status;
} cross_chain;

static void cross_second(gm_stream *stream, gm_status status, void *user)
{
    cross_chain *job = user;

    (void)stream;
    (void)status;
    atomic_store(&job->seen, atomic_load(&job->returned));
    atomic_store(&job->ran, 1);
}

static void cross_first(gm_stream *stream, gm_status status, void *user)
{
    cross_chain *job = user;

    (void)stream;
    (void)status;
    job->chain_status = gm_stream_add_callback(job->other, cross_second, job);
    sleep_ms(50); /* the other stream's worker is idle: it would start the second one now */
    atomic_store(&job->returned, 1);
}

/*
 * Work a callback queues on another stream of its context runs after the
 * callback returns (runtime.h, as on HSA, whose one handler thread runs the
 * callbacks in turn): the other stream's worker started it at once, while
 * the first callback still ran.
 */
static void test_callback_work_on_other_stream_waits_for_it(void **state)
{
    gm_context *ctx = NULL;
    gm_stream *s = NULL;
    cross_chain job;

    (void)state;
    memset(&job, 0, sizeof(job));
    job.chain_status = GM_ERR_INTERNAL;
    assert_ok(gm_set_host_allocator(NULL)); /* the callback allocates on a worker thread */
    assert_ok(gm_context_create(NULL, &ctx));
    assert_ok(gm_stream_create(ctx, 0, &s));
    assert_ok(gm_stream_create(ctx, GM_STREAM_NON_BLOCKING, &job.other));
    assert_ok(gm_stream_add_callback(s, cross_first, &job));
    assert_ok(gm_stream_synchronize(s));
    assert_ok(gm_stream_synchronize(job.other)); /* the second callback was queued by now */
    assert_ok(job.chain_status);
    assert_int_equal(atomic_load(&job.ran), 1);
    assert_int_equal(atomic_load(&job.seen), 1);
    gm_stream_destroy(&job.other);
    gm_stream_destroy(&s);
    gm_context_destroy(&ctx);
    assert_ok(gm_test_use_cmocka_allocator(NULL));
}

/* A gated callback that queries the stream it is given once released. */
typedef struct query_probe {
    atomic_int release;
    atomic_int ran;
    gm_status status;
} query_probe;

static void query_when_released(gm_stream *stream, gm_status status, void *user)
{
    query_probe *p = user;

    (void)status;
    while (atomic_load(&p->release) == 0)
        sleep_ms(1);
    p->status = gm_stream_query(stream); /* the wrapper must still be there */
    atomic_store(&p->ran, 1);
}

static void destroy_in_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    gm_stream_destroy((gm_stream **)user);
}

/*
 * A wrapped stream destroyed while a callback on it is pending: the callback
 * still gets a valid stream (ASan saw a heap-use-after-free of the wrapper).
 */
static void test_wrapped_stream_outlives_its_callbacks(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *ext = NULL;
    query_probe p;

    (void)state;
    memset(&p, 0, sizeof(p));
    p.status = GM_ERR_INTERNAL;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_ok(gm_stream_add_callback(ext, query_when_released, &p));
    gm_stream_destroy(&ext); /* returns at once */
    assert_null(ext);
    atomic_store(&p.release, 1);
    assert_ok(gm_stream_synchronize(owner));
    assert_int_equal(atomic_load(&p.ran), 1);
    assert_true(p.status == GM_OK || p.status == GM_ERR_NOT_READY);
    /* destroyed inside a callback: queued at once, unwrapped by a flush after its work */
    memset(&p, 0, sizeof(p));
    p.status = GM_ERR_INTERNAL;
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_ok(gm_stream_add_callback(ext, query_when_released, &p));
    assert_ok(gm_stream_add_callback(owner, destroy_in_callback, &ext));
    atomic_store(&p.release, 1);
    assert_ok(gm_stream_synchronize(owner));
    assert_null(ext);
    assert_int_equal(atomic_load(&p.ran), 1);
    assert_true(p.status == GM_OK || p.status == GM_ERR_NOT_READY);
    gm_stream_destroy(&owner);
    gm_context_destroy(&ctx);
}

/*
 * A wrapper destroyed in a callback is queued for unwrapping at once, so the
 * flush after the owner destroys the stream it wraps unwraps it first (it
 * was left on a side list that a later call queued onto the freed stream:
 * a heap-use-after-free under ASan).
 */
static void test_wrapper_destroyed_in_callback_before_its_target(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *ext = NULL, *other = NULL, *ext2 = NULL;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_ok(gm_stream_add_callback(owner, destroy_in_callback, &ext));
    assert_ok(gm_stream_synchronize(owner));
    assert_null(ext);
    assert_int_equal(rt_stats(ctx).pending_count, 1); /* the wrapper, queued by the callback */
    gm_stream_destroy(&owner);
    assert_ok(gm_deallocations_flush(ctx)); /* the wrapper, then the stream it wrapped */
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    assert_ok(gm_stream_create(ctx, 0, &other));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(other), &ext2));
    gm_stream_destroy(&ext2);
    assert_ok(gm_deallocations_flush(ctx));
    gm_stream_destroy(&other);
    gm_context_destroy(&ctx);
}

/* A gated callback that chains `chained` through the stream it is given. */
typedef struct chain_probe {
    atomic_int release;
    atomic_int chained_ran;
    gm_status chain_status;
    void *native; /* what the chained callback's stream resolved to */
} chain_probe;

static void chained_callback(gm_stream *stream, gm_status status, void *user)
{
    chain_probe *p = user;

    (void)status;
    p->native = gm_stream_native(stream); /* the wrapper it is given: still there */
    atomic_store(&p->chained_ran, 1);
}

static void chaining_callback(gm_stream *stream, gm_status status, void *user)
{
    chain_probe *p = user;

    (void)status;
    while (atomic_load(&p->release) == 0)
        sleep_ms(1);
    p->chain_status = gm_stream_add_callback(stream, chained_callback, p);
}

/*
 * A wrapper destroyed while a callback queued through it is pending, which
 * chains another through it: it is queued only once the last has returned,
 * so flushes meanwhile leave it (they freed it, and the chained callback
 * read freed memory: ASan).
 */
static void test_wrapper_outlives_chained_callbacks(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *owner = NULL, *ext = NULL;
    chain_probe p;

    (void)state;
    memset(&p, 0, sizeof(p));
    p.chain_status = GM_ERR_INTERNAL;
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_ok(gm_stream_add_callback(ext, chaining_callback, &p));
    gm_stream_destroy(&ext);
    assert_int_equal(rt_stats(ctx).pending_count, 0); /* held by the callback */
    assert_ok(gm_deallocations_flush(ctx));           /* does not wait for it */
    atomic_store(&p.release, 1);
    for (int i = 0; i < 5000 && atomic_load(&p.chained_ran) == 0; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&p.chained_ran), 1);
    assert_ok(p.chain_status);
    assert_ptr_equal(p.native, gm_stream_native(owner));
    assert_ok(gm_stream_synchronize(owner));
    for (int i = 0; i < 5000 && rt_stats(ctx).pending_count == 0; i++)
        sleep_ms(1); /* the last callback queues it as it returns */
    assert_int_equal(rt_stats(ctx).pending_count, 1);
    assert_ok(gm_deallocations_flush(ctx));
    assert_int_equal(rt_stats(ctx).pending_count, 0);
    gm_stream_destroy(&owner);
    gm_context_destroy(&ctx);
}

static atomic_int slow_callback_done;

static void slow_wrapped_callback(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
    sleep_ms(200);
    atomic_store(&slow_callback_done, 1);
}

/*
 * Teardown whose device wait fails while a callback queued through a
 * wrapper has still to run (the simulator's fini runs it): the wrapper stays
 * until the callback releases it, and its entry, queued after the queue's
 * drain, is freed after the fini. Listed, it was freed under the callback
 * (a use after free as the callback dropped its hold); destroyed first, its
 * entry was never freed (a leak).
 */
static void teardown_with_wrapped_callback(bool destroy_first)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *ext = NULL;

    atomic_store(&slow_callback_done, 0);
    assert_ok(
        gm_stream_wrap_external(ctx, gm_stream_native(gm_per_thread_default_stream(ctx)), &ext));
    assert_ok(gm_stream_add_callback(ext, slow_wrapped_callback, NULL));
    if (destroy_first)
        gm_stream_destroy(&ext); /* held by the callback */
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, rt_fault_calls(RT_DEVICE_SYNCHRONIZE) + 1,
                     GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_int_equal(atomic_load(&slow_callback_done), 1);
}

static void test_teardown_with_wrapped_callbacks_pending(void **state)
{
    (void)state;
    teardown_with_wrapped_callback(false);
    teardown_with_wrapped_callback(true);
}

static void release_after_a_while(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    sleep_ms(100);
    gm_array_release((gm_array **)user); /* a callback may release arrays */
}

/*
 * Teardown whose device wait fails while a callback that releases an array
 * still runs: it waits for the callback before it frees the live arrays (the
 * array was released twice: a double free).
 */
static void test_teardown_waits_for_running_callbacks(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *a = NULL;
    int64_t n = 64;

    (void)state;
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    assert_ok(gm_stream_add_callback(st, release_after_a_while, &a));
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, rt_fault_calls(RT_DEVICE_SYNCHRONIZE) + 1,
                     GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_null(a);
}

static atomic_int behind_ran;

static void release_behind_work(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    atomic_store(&behind_ran, 1);
    gm_array_release((gm_array **)user);
}

/*
 * Teardown whose device wait fails while a callback that releases an array
 * is queued behind more stream work than the callback wait's patience: it
 * runs before the wait gives up, or is skipped after (the backend still runs
 * the stream during the teardown); it released the array the teardown had
 * freed (a double free).
 */
static void test_teardown_abandons_late_callbacks(void **state)
{
    gm_context *ctx = rt_fault_ctx();
    gm_stream *st = NULL;
    gm_array *big = NULL, *a = NULL;
    int64_t n = 64, big_n = 32 << 20;

    (void)state;
    atomic_store(&behind_ran, 0);
    assert_ok(gm_stream_create(ctx, 0, &st));
    assert_ok(gm_device_array(ctx, 1, &big_n, GM_UINT8, GM_ORDER_C, &big));
    assert_ok(gm_device_array(ctx, 1, &n, GM_UINT8, GM_ORDER_C, &a));
    for (int i = 0; i < 1200; i++) /* well over 500 ms of stream work */
        assert_ok(gm_array_memset(big, i & 0xff, st));
    assert_ok(gm_stream_add_callback(st, release_behind_work, &a));
    rt_fault_fail_at(RT_DEVICE_SYNCHRONIZE, rt_fault_calls(RT_DEVICE_SYNCHRONIZE) + 1,
                     GM_ERR_DRIVER);
    rt_log_capture(GM_LOG_WARN);
    gm_context_destroy(&ctx);
    rt_log_stop();
    assert_true(atomic_load(&behind_ran) == 0 || a == NULL);
}

typedef struct wrapping_thread {
    gm_context *ctx;
    gm_stream *wrapper;
    gm_status status;
} wrapping_thread;

/* Wrap the thread's own stream, queue a callback that destroys the wrapper, exit. */
static void *wrap_and_exit(void *arg)
{
    wrapping_thread *t = arg;
    gm_stream *mine = gm_per_thread_default_stream(t->ctx);

    t->status = gm_stream_wrap_external(t->ctx, gm_stream_native(mine), &t->wrapper);
    if (t->status == GM_OK)
        t->status = gm_stream_add_callback(t->wrapper, destroy_in_callback, &t->wrapper);
    return NULL;
}

/*
 * Threads that wrap their per-thread streams and destroy the wrappers in
 * callbacks: a flush unwraps them, and the exited threads' streams (with
 * the simulator's worker threads) go. They stayed until the context did.
 */
static void *nothing(void *arg)
{
    return arg;
}

static void test_per_thread_wrappers_destroyed_in_callbacks(void **state)
{
    enum { THREADS = 8 };
    gm_context *ctx = NULL;
    wrapping_thread threads[THREADS];
    pthread_t tid;
    int base = 0, n = 0;

    (void)state;
    assert_ok(gm_context_create(NULL, &ctx));
    assert_int_equal(pthread_create(&tid, NULL, nothing, NULL), 0); /* ThreadSanitizer starts */
    assert_int_equal(pthread_join(tid, NULL), 0);                   /* a thread with the first */
    base = gm_test_thread_count_settled();
    assert_true(base > 0);
    for (int i = 0; i < THREADS; i++) {
        threads[i] = (wrapping_thread){ctx, NULL, GM_ERR_INTERNAL};
        assert_int_equal(pthread_create(&tid, NULL, wrap_and_exit, &threads[i]), 0);
        assert_int_equal(pthread_join(tid, NULL), 0);
        assert_ok(threads[i].status);
    }
    assert_ok(gm_context_synchronize(ctx));
    for (int i = 0; i < THREADS; i++)
        assert_null(threads[i].wrapper);
    assert_int_equal(rt_stats(ctx).pending_count, THREADS);
    assert_ok(gm_deallocations_flush(ctx));
    n = gm_test_thread_count();
    for (int i = 0; i < 2500 && n > base; i++) { /* each worker ends itself: wait ~5 s at most */
        sleep_ms(2);
        n = gm_test_thread_count();
    }
    assert_int_equal(n, base);
    gm_context_destroy(&ctx);
}

/* gm_test_producer.h's scenario on the host backend. */
static void test_wrapper_producer_does_not_starve(void **state)
{
    gm_context *ctx = rt_fault_ctx();

    (void)state;
    gm_test_wrapper_producer(ctx);
    gm_context_destroy(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_create_destroy, test_setup),
        cmocka_unit_test_setup(test_builtin_streams, test_setup),
        cmocka_unit_test_setup(test_builtin_streams_among_many, test_setup),
        cmocka_unit_test_setup(test_per_thread_handle_resolves, test_setup),
        cmocka_unit_test_setup(test_per_thread_scopes, test_setup),
        cmocka_unit_test_setup(test_per_thread_scope_left_open, test_setup),
        cmocka_unit_test_setup(test_per_thread_scopes_in_many_contexts, test_setup),
        cmocka_unit_test_setup(test_per_thread_scopes_of_destroyed_contexts, test_setup),
        cmocka_unit_test_setup(test_wrap_external, test_setup),
        cmocka_unit_test_setup(test_failing_stream_destroy_stays_refused, test_setup),
        cmocka_unit_test_setup_teardown(test_new_stream_at_destroyed_address, c_allocator_setup,
                                        c_allocator_teardown),
        cmocka_unit_test_setup(test_wrapper_keeps_destroyed_stream, test_setup),
        cmocka_unit_test_setup(test_destroy_of_wrapped_stream_waits_for_callbacks, test_setup),
        cmocka_unit_test_setup_teardown(test_wrapper_producer_does_not_starve, c_allocator_setup,
                                        c_allocator_teardown),
        cmocka_unit_test_setup(test_synchronize_query_callback, test_setup),
        cmocka_unit_test_setup(test_default_stream_is_legacy, test_setup),
        cmocka_unit_test_setup(test_legacy_waits_after_other_streams_idle, test_setup),
        cmocka_unit_test_setup(test_destroyed_stream_worker_reused, test_setup),
        cmocka_unit_test_setup(test_context_synchronize, test_setup),
        cmocka_unit_test_setup(test_no_chaining_during_teardown, test_setup),
        cmocka_unit_test_setup(test_chaining_as_teardown_begins, test_setup),
        cmocka_unit_test_setup(test_callback_work_on_other_stream_waits_for_it, test_setup),
        cmocka_unit_test_setup(test_wrapped_stream_outlives_its_callbacks, test_setup),
        cmocka_unit_test_setup(test_wrapper_destroyed_in_callback_before_its_target, test_setup),
        cmocka_unit_test_setup(test_wrapper_outlives_chained_callbacks, test_setup),
        cmocka_unit_test_setup(test_teardown_with_wrapped_callbacks_pending, test_setup),
        cmocka_unit_test_setup(test_teardown_waits_for_running_callbacks, test_setup),
        cmocka_unit_test_setup(test_teardown_abandons_late_callbacks, test_setup),
        cmocka_unit_test_setup_teardown(test_per_thread_wrappers_destroyed_in_callbacks,
                                        c_allocator_setup, c_allocator_teardown),
        cmocka_unit_test_setup(test_auto_synchronize, test_setup),
        cmocka_unit_test_setup(test_sync_calls_in_callback, test_setup),
        cmocka_unit_test_setup(test_events, test_setup),
        cmocka_unit_test_setup(test_event_on_idle_context, test_setup),
        cmocka_unit_test_setup(test_event_states, test_setup),
        cmocka_unit_test_setup(test_wait_event_on_default_stream, test_setup),
        cmocka_unit_test_setup(test_callback_releases, test_setup),
        cmocka_unit_test_setup(test_callbacks_not_queued, test_setup),
        cmocka_unit_test_setup(test_teardown_reports_builtin_stream_error, test_setup),
        cmocka_unit_test_setup(test_callback_destroys_streams_during_teardown, test_setup),
        cmocka_unit_test_setup(test_injected_alloc_failures, test_setup),
        cmocka_unit_test_setup(test_device_synchronize_fails, test_setup),
        cmocka_unit_test_setup(test_sync_staged_copy_waits_for_blocking_streams, test_setup),
        cmocka_unit_test_setup(test_failed_copy_keeps_stream_error, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gm_test_restore_allocator);
}
