/*
 * Streams and events of the HSA backend on the runtime double, whose DMA
 * engine runs the newest ready copy first: any missing dependency signal
 * reorders copies and corrupts data, and every dependency is also checked
 * in the recorded copies and packets.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hsa_test_util.h"

enum { N = 50000 };

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The completed copy recorded with this destination (its GPU or host address), or fail. */
static hsa_double_copy find_copy(const void *dst)
{
    hsa_double_copy c;

    for (long i = hsa_double_copy_count() - 1; i >= 0; i--) {
        if (hsa_double_get_copy(i, &c) && (c.dst == dst || c.host_dst == dst))
            return c;
    }
    fail_msg("no copy to %p recorded", dst);
    return c;
}

static bool has_dep(const hsa_double_copy *c, hsa_signal_t s)
{
    for (uint32_t i = 0; i < c->ndeps && i < 8; i++) {
        if (c->deps[i].handle == s.handle)
            return true;
    }
    return false;
}

static gm_status copy_async(gm_backend_ctx *bctx, gm_backend_stream *s, gm_copy_side ds, void *dst,
                            gm_copy_side ss, const void *src, size_t bytes)
{
    gm_copy_desc d =
        hsa_test_copy1d(ds, (gm_devptr)(uintptr_t)dst, ss, (gm_devptr)(uintptr_t)src, bytes);

    return hsa_ops->copy(bctx, &d, s);
}

static uint32_t *pattern(uint32_t seed)
{
    uint32_t *p = malloc(N * 4);

    for (uint32_t i = 0; i < N; i++)
        p[i] = i * 2654435761u + seed;
    return p;
}

/* host -> d1 -> d2 -> host2 on one stream: each copy waits for the previous one. */
static void test_stream_order(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *src = pattern(1), *dst = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_devptr d1 = 0, d2 = 0;
    hsa_double_copy c1, c2, c3;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d1));
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d2));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    hsa_double_pause(1); /* all three queued before any runs */
    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)d1, GM_COPY_HOST, src, N * 4));
    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)d2, GM_COPY_DEVICE,
                         (void *)(uintptr_t)d1, N * 4));
    assert_ok(copy_async(bctx, s, GM_COPY_HOST, dst, GM_COPY_DEVICE, (void *)(uintptr_t)d2, N * 4));
    assert_status(hsa_ops->stream_query(bctx, s), GM_ERR_NOT_READY);
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_ok(hsa_ops->stream_query(bctx, s));
    assert_memory_equal(src, dst, N * 4);
    c1 = find_copy((void *)(uintptr_t)d1);
    c2 = find_copy((void *)(uintptr_t)d2);
    c3 = find_copy(dst);
    assert_true(has_dep(&c2, c1.completion));
    assert_true(has_dep(&c3, c2.completion));
    assert_true(c1.sequence < c2.sequence && c2.sequence < c3.sequence);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, d1));
    assert_ok(hsa_ops->mem_free(bctx, d2));
    hsa_test_close(bctx);
    free(src);
    free(dst);
}

/* CU_STREAM_LEGACY: legacy work waits for blocking streams, not for non-blocking ones,
 * and blocking streams' later work waits for it. */
static void test_legacy_stream(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(2), *b = pattern(3), *c = calloc(N, 4), *e = calloc(N, 4);
    gm_backend_stream *blocking = NULL, *nonblocking = NULL, *legacy = NULL, *deflt = NULL;
    gm_devptr da = 0, db = 0;
    hsa_double_copy ca, cb, cc, ce;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &db));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &blocking));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &nonblocking));
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_DEFAULT, &deflt));
    assert_ptr_equal(legacy, deflt);
    hsa_double_pause(1);
    assert_ok(
        copy_async(bctx, blocking, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    assert_ok(copy_async(bctx, nonblocking, GM_COPY_DEVICE, (void *)(uintptr_t)db, GM_COPY_HOST, b,
                         N * 4));
    assert_ok(
        copy_async(bctx, legacy, GM_COPY_HOST, c, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    assert_ok(
        copy_async(bctx, blocking, GM_COPY_HOST, e, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(bctx, blocking));
    assert_ok(hsa_ops->stream_synchronize(bctx, nonblocking));
    assert_ok(hsa_ops->stream_synchronize(bctx, legacy));
    assert_memory_equal(a, c, N * 4);
    assert_memory_equal(a, e, N * 4);
    ca = find_copy((void *)(uintptr_t)da);
    cb = find_copy((void *)(uintptr_t)db);
    cc = find_copy(c);
    ce = find_copy(e);
    assert_true(has_dep(&cc, ca.completion));
    assert_false(has_dep(&cc, cb.completion));
    assert_true(has_dep(&ce, cc.completion));
    assert_ok(hsa_ops->stream_destroy(bctx, blocking));
    assert_ok(hsa_ops->stream_destroy(bctx, nonblocking));
    assert_status(hsa_ops->stream_destroy(bctx, legacy), GM_ERR_INVALID_ARG);
    assert_ok(hsa_ops->mem_free(bctx, da));
    assert_ok(hsa_ops->mem_free(bctx, db));
    hsa_test_close(bctx);
    free(a);
    free(b);
    free(c);
    free(e);
}

static void *unpause_later(void *arg)
{
    (void)arg;
    sleep_ms(100);
    hsa_double_pause(0);
    return NULL;
}

/* A synchronous copy (NULL stream) waits for work queued on blocking streams. */
static void test_sync_copy_waits(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(4), *back = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_devptr da = 0;
    pthread_t t;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    pthread_create(&t, NULL, unpause_later, NULL);
    hsa_test_to_host(bctx, back, da, N * 4);
    pthread_join(t, NULL);
    assert_memory_equal(a, back, N * 4);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/* stream_destroy waits for pending work. */
static void test_destroy_waits(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(5), *back = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_devptr da = 0;
    pthread_t t;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    hsa_double_pause(1);
    assert_ok(
        copy_async(bctx, s, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    pthread_create(&t, NULL, unpause_later, NULL);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    pthread_join(t, NULL);
    assert_memory_equal(a, back, N * 4);
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/* An event recorded on one stream orders another stream's work after it. */
static void test_event_cross_stream(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(6), *back = calloc(N, 4);
    gm_backend_stream *s1 = NULL, *s2 = NULL;
    gm_backend_event *ev = NULL, *never = NULL;
    gm_devptr da = 0;
    hsa_double_packet pkt;
    hsa_barrier_and_packet_t bar;
    hsa_double_copy cb;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s1));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s2));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    assert_ok(hsa_ops->event_create(bctx, 0, &never));
    assert_ok(hsa_ops->event_query(bctx, never)); /* never recorded: complete */
    assert_ok(hsa_ops->event_synchronize(bctx, never));
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, s1, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    assert_ok(hsa_ops->event_record(bctx, ev, s1));
    assert_status(hsa_ops->event_query(bctx, ev), GM_ERR_NOT_READY);
    assert_ok(hsa_ops->stream_wait_event(bctx, s2, ev));
    for (int i = 0; i < 1000; i++) /* waiting again for one event adds nothing */
        assert_ok(hsa_ops->stream_wait_event(bctx, s2, ev));
    assert_ok(
        copy_async(bctx, s2, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    hsa_double_pause(0);
    assert_ok(hsa_ops->event_synchronize(bctx, ev));
    assert_ok(hsa_ops->event_query(bctx, ev));
    assert_ok(hsa_ops->stream_synchronize(bctx, s2));
    assert_memory_equal(a, back, N * 4);
    /* the record was a barrier-AND packet on s1's queue; s2's copy waited for its signal */
    assert_int_equal(hsa_double_packet_count(), 1);
    assert_true(hsa_double_get_packet(0, &pkt));
    memcpy(&bar, pkt.bytes, sizeof(bar));
    assert_int_equal(bar.header & 0xff, HSA_PACKET_TYPE_BARRIER_AND);
    assert_int_equal(bar.dep_signal[0].handle, find_copy((void *)(uintptr_t)da).completion.handle);
    cb = find_copy(back);
    assert_true(has_dep(&cb, bar.completion_signal));
    assert_int_equal(cb.ndeps, 1);
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->event_destroy(bctx, never));
    assert_ok(hsa_ops->stream_destroy(bctx, s1));
    assert_ok(hsa_ops->stream_destroy(bctx, s2));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

static gm_status sleep_work(void *user)
{
    sleep_ms(*(long *)user);
    return GM_OK;
}

/* Timing events: host time between completions; the refusals. */
static void test_event_timing(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_stream *s = NULL;
    gm_backend_event *start = NULL, *end = NULL, *plain = NULL;
    long ms = 30;
    float elapsed = -1.0f;

    (void)state;
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    assert_ok(hsa_ops->event_create(bctx, 1, &start));
    assert_ok(hsa_ops->event_create(bctx, 1, &end));
    assert_ok(hsa_ops->event_create(bctx, 0, &plain));
    assert_status(hsa_ops->event_elapsed(bctx, start, end, &elapsed), GM_ERR_INVALID_ARG);
    assert_message_contains("recorded");
    assert_ok(hsa_ops->event_record(bctx, start, s));
    assert_ok(hsa_ops->stream_enqueue_host(bctx, s, sleep_work, &ms, NULL));
    assert_ok(hsa_ops->event_record(bctx, end, s));
    assert_ok(hsa_ops->event_record(bctx, plain, s));
    assert_status(hsa_ops->event_elapsed(bctx, start, end, &elapsed), GM_ERR_NOT_READY);
    assert_ok(hsa_ops->event_synchronize(bctx, end));
    assert_ok(hsa_ops->event_elapsed(bctx, start, end, &elapsed));
    assert_true(elapsed >= 25.0f && elapsed < 5000.0f);
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_status(hsa_ops->event_elapsed(bctx, start, plain, &elapsed), GM_ERR_INVALID_ARG);
    assert_message_contains("timing");
    assert_status(hsa_ops->event_elapsed(bctx, start, NULL, &elapsed), GM_ERR_NULL_POINTER);
    assert_ok(hsa_ops->event_destroy(bctx, start));
    assert_ok(hsa_ops->event_destroy(bctx, end));
    assert_ok(hsa_ops->event_destroy(bctx, plain));
    assert_ok(hsa_ops->event_destroy(bctx, NULL));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    hsa_test_close(bctx);
}

typedef struct cb_log {
    int order[8];
    int n;
    gm_status status[8];
    const uint32_t *watch; /* must hold the expected data when the first callback runs */
    const uint32_t *expect;
    int data_ok;
} cb_log;

typedef struct cb_arg {
    cb_log *log;
    int id;
} cb_arg;

static void record_callback(gm_status status, void *user)
{
    cb_arg *a = user;

    if (a->log->n == 0 && a->log->watch != NULL)
        a->log->data_ok = memcmp(a->log->watch, a->log->expect, N * 4) == 0;
    a->log->status[a->log->n] = status;
    a->log->order[a->log->n++] = a->id;
}

static gm_status failing_work(void *user)
{
    (*(int *)user)++;
    return gm__error(GM_ERR_INVALID_ARG, "boom from host work");
}

static void count_cleanup(void *user)
{
    (*(int *)user) += 100;
}

/* Callbacks run in stream order after the work before them; host work errors are
 * reported once by the next synchronize and reach later callbacks. */
static void test_callbacks_and_host_work(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(7), *back = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_devptr da = 0;
    cb_log log;
    cb_arg args[3];
    int calls = 0;

    (void)state;
    memset(&log, 0, sizeof(log));
    log.watch = back;
    log.expect = a;
    da = hsa_test_to_device(bctx, a, N * 4);
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    hsa_double_pause(1);
    assert_ok(
        copy_async(bctx, s, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    for (int i = 0; i < 2; i++) {
        args[i] = (cb_arg){&log, i + 1};
        assert_ok(hsa_ops->stream_add_callback(bctx, s, record_callback, &args[i]));
    }
    assert_ok(hsa_ops->stream_enqueue_host(bctx, s, failing_work, &calls, count_cleanup));
    args[2] = (cb_arg){&log, 3};
    assert_ok(hsa_ops->stream_add_callback(bctx, s, record_callback, &args[2]));
    hsa_double_pause(0);
    assert_status(hsa_ops->stream_synchronize(bctx, s), GM_ERR_INVALID_ARG);
    assert_message_contains("boom from host work");
    assert_ok(hsa_ops->stream_synchronize(bctx, s)); /* reported once */
    assert_int_equal(calls, 101);
    assert_int_equal(log.n, 3);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    assert_int_equal(log.order[2], 3);
    assert_int_equal(log.status[0], GM_OK);
    assert_int_equal(log.status[2], GM_ERR_INVALID_ARG);
    assert_true(log.data_ok);
    /* stream NULL: synchronous, on this thread, fn's status returned */
    calls = 0;
    assert_status(hsa_ops->stream_enqueue_host(bctx, NULL, failing_work, &calls, count_cleanup),
                  GM_ERR_INVALID_ARG);
    assert_int_equal(calls, 101);
    assert_status(hsa_ops->stream_enqueue_host(bctx, s, NULL, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_status(hsa_ops->stream_add_callback(bctx, s, NULL, NULL), GM_ERR_NULL_POINTER);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

static void *other_thread_stream(void *arg)
{
    gm_backend_ctx *bctx = arg;
    gm_backend_stream *s = NULL;

    if (hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &s) != GM_OK)
        return NULL;
    return s;
}

/* What one short-lived thread saw: its id and its per-thread stream (wrapped if `wrap`). */
typedef struct thread_seen {
    gm_backend_ctx *bctx;
    pthread_t self;
    gm_backend_stream *stream;
    bool wrap;
    gm_backend_stream *wrapper;
} thread_seen;

static void *note_thread_stream(void *arg)
{
    thread_seen *seen = arg;

    seen->self = pthread_self();
    if (hsa_ops->stream_builtin(seen->bctx, GM_BUILTIN_STREAM_PER_THREAD, &seen->stream) != GM_OK)
        seen->stream = NULL;
    if (seen->stream != NULL && seen->wrap &&
        hsa_ops->stream_wrap(seen->bctx, hsa_ops->stream_native(seen->bctx, seen->stream),
                             &seen->wrapper) != GM_OK)
        seen->wrapper = NULL;
    return NULL;
}

/*
 * A thread that starts after another exited may get the same pthread_t
 * (glibc reuses a joined thread's descriptor): it must still get a stream
 * of its own, not the dead thread's. (The first thread wraps its stream, so
 * that it outlives the thread and its address is not reused either.)
 * Skipped if the C library never reuses the id here, since then the case
 * cannot arise.
 */
static void test_per_thread_id_reuse(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    thread_seen first = {bctx, 0, NULL, true, NULL}, later = {bctx, 0, NULL, false, NULL};
    pthread_t t;
    bool reused = false;

    (void)state;
    assert_int_equal(pthread_create(&t, NULL, note_thread_stream, &first), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_non_null(first.stream);
    assert_non_null(first.wrapper);
    for (int i = 0; i < 20 && !reused; i++) {
        assert_int_equal(pthread_create(&t, NULL, note_thread_stream, &later), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_non_null(later.stream);
        assert_ptr_not_equal(later.stream, first.stream);
        reused = pthread_equal(later.self, first.self) != 0;
    }
    hsa_ops->stream_unwrap(bctx, first.wrapper);
    hsa_test_close(bctx);
    if (!reused) {
        print_message("pthread ids were not reused: nothing to check\n");
        skip();
    }
}

/* What a short-lived thread does: a copy on its per-thread stream, synchronized if `sync`. */
typedef struct exiting_copy {
    gm_backend_ctx *bctx;
    bool sync;
    gm_devptr src;
    uint32_t *dst;
    void *native; /* its stream's native handle */
    gm_status status;
} exiting_copy;

static void *copy_and_exit(void *arg)
{
    exiting_copy *job = arg;
    gm_backend_stream *s = NULL;

    job->status = hsa_ops->stream_builtin(job->bctx, GM_BUILTIN_STREAM_PER_THREAD, &s);
    if (job->status == GM_OK)
        job->status = copy_async(job->bctx, s, GM_COPY_HOST, job->dst, GM_COPY_DEVICE,
                                 (void *)(uintptr_t)job->src, N * 4);
    if (job->status == GM_OK && job->sync)
        job->status = hsa_ops->stream_synchronize(job->bctx, s);
    if (job->status == GM_OK)
        job->native = hsa_ops->stream_native(job->bctx, s);
    return NULL;
}

/*
 * An exited thread's per-thread stream is freed once its work is done (its
 * native handle no longer wraps): at once when it was idle at the exit,
 * else at a later reap (here device_synchronize's); its queued copy still
 * lands. A wrapper keeps it meanwhile.
 */
static void test_per_thread_stream_ends_with_thread(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(12), *back = calloc(N, 4);
    exiting_copy job = {bctx, true, 0, back, NULL, GM_ERR_INTERNAL};
    gm_backend_stream *w = NULL;
    pthread_t t;

    (void)state;
    job.src = hsa_test_to_device(bctx, a, N * 4);
    assert_int_equal(pthread_create(&t, NULL, copy_and_exit, &job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(job.status);
    assert_memory_equal(a, back, N * 4);
    assert_status(hsa_ops->stream_wrap(bctx, job.native, &w), GM_ERR_INVALID_HANDLE);

    memset(back, 0, N * 4);
    job.sync = false;
    hsa_double_pause(1); /* the copy stays queued past the thread's exit */
    assert_int_equal(pthread_create(&t, NULL, copy_and_exit, &job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(job.status);
    assert_ok(hsa_ops->stream_wrap(bctx, job.native, &w)); /* still there */
    hsa_ops->stream_unwrap(bctx, w);
    assert_ok(hsa_ops->stream_wrap(bctx, job.native, &w)); /* work pending: still there */
    hsa_ops->stream_unwrap(bctx, w);
    hsa_double_pause(0);
    assert_ok(hsa_ops->device_synchronize(bctx));
    assert_memory_equal(a, back, N * 4);
    assert_status(hsa_ops->stream_wrap(bctx, job.native, &w), GM_ERR_INVALID_HANDLE);
    assert_ok(hsa_ops->mem_free(bctx, job.src));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/* A thread's per-thread stream: made to wait for an event, then the thread exits. */
typedef struct wait_job {
    gm_backend_ctx *bctx;
    gm_backend_event *ev;
    gm_status status;
} wait_job;

static void *wait_and_exit(void *arg)
{
    wait_job *job = arg;
    gm_backend_stream *s = NULL;

    job->status = hsa_ops->stream_builtin(job->bctx, GM_BUILTIN_STREAM_PER_THREAD, &s);
    if (job->status == GM_OK)
        job->status = hsa_ops->stream_wait_event(job->bctx, s, job->ev);
    return NULL;
}

/*
 * An exited thread's stream that waits for an event is work pending (its
 * wait is its work): it stays, and later legacy work still waits for the
 * event through it (the legacy copy reads what the non-blocking stream's
 * copy wrote before the event).
 */
static void test_retired_wait_orders_legacy(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(21), *back = calloc(N, 4);
    gm_backend_stream *nb = NULL, *legacy = NULL;
    gm_devptr da = 0;
    wait_job job = {bctx, NULL, GM_ERR_INTERNAL};
    pthread_t t;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &nb));
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    assert_ok(hsa_ops->event_create(bctx, 0, &job.ev));
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, nb, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    assert_ok(hsa_ops->event_record(bctx, job.ev, nb));
    assert_int_equal(pthread_create(&t, NULL, wait_and_exit, &job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ok(job.status);
    assert_ok(
        copy_async(bctx, legacy, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    hsa_double_pause(0);
    assert_ok(hsa_ops->device_synchronize(bctx));
    assert_memory_equal(a, back, N * 4);
    assert_ok(hsa_ops->event_destroy(bctx, job.ev));
    assert_ok(hsa_ops->stream_destroy(bctx, nb));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/* A backend callback that counts its calls. */
static void count_call(gm_status status, void *user)
{
    (void)status;
    atomic_fetch_add((_Atomic int *)user, 1);
}

/*
 * A wrapper released after its stream was destroyed by its owner, as context
 * teardown does with wrappers left to it: the stream stays until the wrapper
 * goes (AddressSanitizer reports a use after free, cmocka a leak, if not).
 */
static void test_unwrap_after_owner_destroyed(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_stream *owner = NULL, *w = NULL, *again = NULL;
    void *native = NULL;
    _Atomic int calls = 0;

    (void)state;
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &owner));
    native = hsa_ops->stream_native(bctx, owner);
    assert_ok(hsa_ops->stream_wrap(bctx, native, &w));
    assert_ok(hsa_ops->stream_destroy(bctx, owner));
    /* the wrapper keeps it: it still runs work, and no new wrapper finds it */
    assert_status(hsa_ops->stream_wrap(bctx, native, &again), GM_ERR_INVALID_HANDLE);
    assert_ok(hsa_ops->stream_add_callback(bctx, w, count_call, (void *)&calls));
    assert_ok(hsa_ops->stream_synchronize(bctx, w));
    assert_int_equal(calls, 1);
    hsa_ops->stream_unwrap(bctx, w);
    hsa_test_close(bctx);
}

static void test_per_thread_and_wrap(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(8), *back = calloc(N, 4);
    gm_backend_stream *mine = NULL, *again = NULL, *theirs = NULL, *s = NULL, *w = NULL;
    gm_devptr da = 0;
    void *native = NULL;
    pthread_t t;

    (void)state;
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &mine));
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_PER_THREAD, &again));
    assert_ptr_equal(mine, again);
    pthread_create(&t, NULL, other_thread_stream, bctx);
    pthread_join(t, (void **)&theirs);
    assert_non_null(theirs);
    assert_ptr_not_equal(mine, theirs);
    da = hsa_test_to_device(bctx, a, N * 4);
    assert_ok(
        copy_async(bctx, mine, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    assert_ok(hsa_ops->stream_synchronize(bctx, mine));
    assert_memory_equal(a, back, N * 4);
    /* wrapping a native handle */
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    native = hsa_ops->stream_native(bctx, s);
    assert_ok(hsa_ops->stream_wrap(bctx, native, &w));
    assert_ptr_equal(hsa_ops->stream_native(bctx, w), native);
    memset(back, 0, N * 4);
    assert_ok(
        copy_async(bctx, w, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)da, N * 4));
    assert_ok(hsa_ops->stream_synchronize(bctx, w));
    assert_memory_equal(a, back, N * 4);
    assert_status(hsa_ops->stream_destroy(bctx, w), GM_ERR_INVALID_ARG);
    hsa_ops->stream_unwrap(bctx, w);
    assert_status(hsa_ops->stream_wrap(bctx, back, &w), GM_ERR_INVALID_HANDLE);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/*
 * Hundreds of packets through a 64-slot queue; signals and kernargs are recycled.
 * A record whose copy has already finished completes at once, without a barrier
 * packet, and a thread held off the CPU for the copy's 300 us between copy and
 * record (TSan on a loaded machine) meets one: 300 records are not 300 packets.
 * So the loop counts the records whose copy was still pending when the record
 * returned (each of those wrote a packet; the DMA engine finishes the copies in
 * order, each behind the record before it) and goes on until 300 of them did.
 */
static void test_queue_wraps(void **state)
{
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    uint32_t *a = pattern(9), *back = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_backend_event *ev = NULL;
    gm_devptr da = 0;
    hsa_double_live live;
    long copies0 = 0, behind = 0;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 300; /* copies mostly still pending when the records come: packets */
    bctx = hsa_test_open(&cfg, 0);
    da = hsa_test_to_device(bctx, a, N * 4);
    assert_ok(hsa_ops->host_register(bctx, back, N * 4, 0));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    copies0 = hsa_double_copy_count();
    for (long i = 0; behind < 300; i++) {
        assert_in_range(i, 0, 2999); /* a machine that slow cannot show the wrap */
        assert_ok(copy_async(bctx, s, GM_COPY_HOST, back + (i % 10), GM_COPY_DEVICE,
                             (void *)(uintptr_t)da, 64));
        assert_ok(hsa_ops->event_record(bctx, ev, s));
        behind += hsa_double_copy_count() - copies0 <= i; /* copy i still pending */
    }
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_true(hsa_double_packet_count() >= behind);
    hsa_double_get_live(&live);
    assert_true(live.signals <= 70); /* the cache (64) and a few in use, not 600 */
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->host_unregister(bctx, back));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
    free(back);
}

/* Whether the runtime has p locked (the double's own hsa_amd_pointer_info). */
static bool is_locked(const void *p)
{
    hsa_amd_pointer_info_t info;

    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    assert_int_equal(hsa_amd_pointer_info(p, &info, NULL, NULL, NULL), HSA_STATUS_SUCCESS);
    return info.type == HSA_EXT_POINTER_TYPE_LOCKED;
}

/*
 * device_synchronize and event_synchronize release what the finished work
 * held before they return: pageable memory a copy locked is unlocked at once
 * (the caller may free it now; the core's deallocation queue frees copy
 * staging blocks right after device_synchronize), memset staging is freed.
 * The DMA engine takes 20 ms per copy, so the work is still pending when the
 * calls start and their reap on entry finds nothing done.
 */
static void test_synchronize_releases(void **state)
{
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *s = NULL, *t = NULL;
    gm_backend_event *ev = NULL;
    char *a = calloc(1, 8192), *b = calloc(1, 8192);
    gm_devptr dev = 0;
    hsa_double_live before, live;
    uint32_t v = 7;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 20000;
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->mem_alloc(bctx, 8192, &dev));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &t));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    hsa_double_get_live(&before);
    assert_int_equal(before.locks, 0);

    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)dev, GM_COPY_HOST, a, 8192));
    assert_ok(hsa_ops->memset(bctx, dev, &v, 4, 16, s));
    assert_ok(copy_async(bctx, t, GM_COPY_HOST, b, GM_COPY_DEVICE, (void *)(uintptr_t)dev, 4096));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 2);
    assert_int_equal(live.pool_allocations, before.pool_allocations + 1); /* memset staging */
    assert_ok(hsa_ops->device_synchronize(bctx));
    hsa_double_get_live(&live);
    assert_int_equal(live.pending_copies, 0);
    assert_int_equal(live.locks, 0);
    assert_int_equal(live.pool_allocations, before.pool_allocations);
    assert_false(is_locked(a));
    assert_false(is_locked(b));

    assert_ok(copy_async(bctx, t, GM_COPY_DEVICE, (void *)(uintptr_t)dev, GM_COPY_HOST, b, 8192));
    assert_ok(copy_async(bctx, s, GM_COPY_HOST, a, GM_COPY_DEVICE, (void *)(uintptr_t)dev, 8192));
    assert_ok(hsa_ops->event_record(bctx, ev, s));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 2);
    assert_ok(hsa_ops->event_synchronize(bctx, ev));
    assert_false(is_locked(a)); /* stream t's copy from b may still run: not waited for */
    assert_ok(hsa_ops->stream_synchronize(bctx, t));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 0);

    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->stream_destroy(bctx, t));
    assert_ok(hsa_ops->mem_free(bctx, dev));
    hsa_test_close(bctx);
    free(a);
    free(b);
}

/* Whether dev holds n bytes equal to expect's (read back synchronously). */
static bool device_equals(gm_backend_ctx *bctx, gm_devptr dev, const void *expect, size_t n)
{
    char *back = calloc(1, n);
    bool same = false;

    assert_non_null(back);
    hsa_test_to_host(bctx, back, dev, n);
    same = memcmp(back, expect, n) == 0;
    free(back);
    return same;
}

/*
 * Two streams copy from one pageable buffer at the same address, the first
 * copy finishing first (in-order DMA engine, 20 ms per copy). A range inside
 * an existing lock shares it. A longer one at the same address cannot be a
 * second registration there: libhsakmt keys registrations by address and
 * size but finds one to unlock by address alone, and with two of different
 * sizes at the address it finds neither (ROCr's hsa_amd_memory_unlock still
 * returns success, so both stay locked for good; the double records that).
 * So the longer copy is staged through a pool buffer, without waiting and
 * without a lock of its own. Either way the memory stays locked until the
 * last copy using it is done: reaping the first copy must not unlock what the
 * second one is moving (the double records an unlock under a pending or
 * running copy), and nothing stays locked at the end.
 */
static void test_shared_pageable_locks(void **state)
{
    static const size_t sizes[2][2] = {{8192, 4096}, {4096, 8192}}; /* inside; longer */
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *s = NULL, *t = NULL;
    char *page = calloc(1, 16384);
    gm_devptr d1 = 0, d2 = 0;
    hsa_double_live live;
    long pool = 0, locks = 0, unlocks = 0;

    (void)state;
    for (int i = 0; i < 16384; i++)
        page[i] = (char)(i * 7 + 1);
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 20000;
    cfg.copies_in_order = 1;
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->mem_alloc(bctx, 16384, &d1));
    assert_ok(hsa_ops->mem_alloc(bctx, 16384, &d2));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &t));
    for (int i = 0; i < 2; i++) {
        hsa_double_get_live(&live);
        pool = live.pool_allocations;
        locks = hsa_double_calls("hsa_amd_memory_lock");
        unlocks = hsa_double_calls("hsa_amd_memory_unlock");
        assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)d1, GM_COPY_HOST, page,
                             sizes[i][0]));
        assert_ok(copy_async(bctx, t, GM_COPY_DEVICE, (void *)(uintptr_t)d2, GM_COPY_HOST, page,
                             sizes[i][1]));
        hsa_double_get_live(&live);
        assert_int_equal(live.locks, 1); /* reused; the first copy's only, the longer staged */
        assert_int_equal(live.pool_allocations, pool + i); /* the staging buffer */
        assert_int_equal(hsa_double_calls("hsa_amd_memory_lock"), locks + 1);
        assert_int_equal(hsa_double_calls("hsa_amd_memory_unlock"), unlocks);
        assert_ok(hsa_ops->stream_synchronize(bctx, s));
        assert_true(is_locked(page) == (i == 0)); /* the shorter copy still uses the lock */
        assert_ok(hsa_ops->stream_synchronize(bctx, t));
        hsa_double_get_live(&live);
        assert_int_equal(live.locks, 0);
        assert_int_equal(live.pool_allocations, pool);
        assert_true(device_equals(bctx, d1, page, sizes[i][0]));
        assert_true(device_equals(bctx, d2, page, sizes[i][1]));
        hsa_test_assert_no_violations();
    }
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->stream_destroy(bctx, t));
    assert_ok(hsa_ops->mem_free(bctx, d1));
    assert_ok(hsa_ops->mem_free(bctx, d2));
    hsa_test_close(bctx);
    free(page);
}

/* A second context on the double test_open reset (device 0 too). */
static gm_backend_ctx *open_second(void)
{
    gm_backend_init_args args = {0, 0};
    gm_backend_ctx *b = NULL;

    assert_ok(hsa_ops->init(&args, &b));
    return b;
}

/*
 * Page-locking is the process's, so the locks of two contexts' copies meet
 * at one address: context b copying 8 KiB from where context a's pending
 * copy locked 4 KiB cannot lock there (a second registration of another
 * size, which libhsakmt could never unlock: the double records it) and is
 * staged through a pool buffer instead, in both directions; one of the same
 * length locks again (the driver counts it). Registering 8 KiB there from b
 * meanwhile is GM_ERR_STATE naming the other context's copy (b cannot make
 * a's copies go), and succeeds once a synchronized. The data arrive either
 * way, nothing waits for the other context, nothing stays locked.
 */
static void test_pageable_locks_across_contexts(void **state)
{
    hsa_double_config cfg;
    gm_backend_ctx *a = NULL, *b = NULL;
    gm_backend_stream *sa = NULL, *sb = NULL;
    char *page = aligned_alloc(4096, 16384), *out = aligned_alloc(4096, 16384);
    gm_devptr da = 0, db = 0, db2 = 0;
    hsa_double_live live;

    (void)state;
    assert_non_null(page);
    assert_non_null(out);
    for (int i = 0; i < 16384; i++)
        page[i] = (char)(i * 13 + 5);
    memset(out, 0, 16384);
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 20000;
    cfg.copies_in_order = 1;
    a = hsa_test_open(&cfg, 0);
    b = open_second();
    assert_ok(hsa_ops->mem_alloc(a, 16384, &da));
    assert_ok(hsa_ops->mem_alloc(b, 16384, &db));
    assert_ok(hsa_ops->mem_alloc(b, 16384, &db2));
    assert_ok(hsa_ops->stream_create(a, GM_STREAM_NON_BLOCKING, &sa));
    assert_ok(hsa_ops->stream_create(b, GM_STREAM_NON_BLOCKING, &sb));

    /* to the device: a locks 4 KiB at page; b's 8 KiB are staged, b's 4 KiB lock again */
    assert_ok(copy_async(a, sa, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, page, 4096));
    assert_ok(copy_async(b, sb, GM_COPY_DEVICE, (void *)(uintptr_t)db, GM_COPY_HOST, page, 8192));
    assert_ok(copy_async(b, sb, GM_COPY_DEVICE, (void *)(uintptr_t)db2, GM_COPY_HOST, page, 4096));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 2);
    hsa_test_assert_no_violations();

    /* registering another size where a's copy holds a lock: refused, at once */
    assert_status(hsa_ops->host_register(b, page, 8192, 0), GM_ERR_STATE);
    assert_message_contains("another context holds");
    hsa_test_assert_no_violations();
    assert_ok(hsa_ops->stream_synchronize(b, sb));
    assert_ok(hsa_ops->stream_synchronize(a, sa));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 0);
    assert_true(device_equals(a, da, page, 4096));
    assert_true(device_equals(b, db, page, 8192));
    assert_true(device_equals(b, db2, page, 4096));

    /* from the device: a locks 4 KiB of out; b's 8 KiB (the same bytes) are staged */
    assert_ok(copy_async(a, sa, GM_COPY_HOST, out, GM_COPY_DEVICE, (void *)(uintptr_t)da, 4096));
    assert_ok(copy_async(b, sb, GM_COPY_HOST, out, GM_COPY_DEVICE, (void *)(uintptr_t)db, 8192));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 1);
    assert_ok(hsa_ops->stream_synchronize(b, sb));
    assert_ok(hsa_ops->stream_synchronize(a, sa));
    assert_memory_equal(out, page, 8192);
    hsa_test_assert_no_violations();

    /* a synchronized: b registers 8 KiB; a's copies at page use it or are staged */
    assert_ok(hsa_ops->host_register(b, page, 8192, 0));
    assert_ok(copy_async(a, sa, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, page, 12288));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 1); /* the registration only */
    assert_ok(hsa_ops->stream_synchronize(a, sa));
    assert_true(device_equals(a, da, page, 12288));
    assert_ok(hsa_ops->host_unregister(b, page));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 0);
    hsa_test_assert_no_violations();

    assert_ok(hsa_ops->stream_destroy(a, sa));
    assert_ok(hsa_ops->stream_destroy(b, sb));
    assert_ok(hsa_ops->mem_free(a, da));
    assert_ok(hsa_ops->mem_free(b, db));
    assert_ok(hsa_ops->mem_free(b, db2));
    hsa_ops->fini(b);
    hsa_test_close(a);
    free(page);
    free(out);
}

/*
 * A copy starting where the user registered a shorter range and running
 * past it, in both directions, on a stream and synchronously: a lock of its
 * own there would be a second registration of another size, which libhsakmt
 * could never unlock, so it is staged; the registration is the only lock
 * meanwhile and the data arrive. A range inside the registration uses it.
 */
static void test_copy_past_registration(void **state)
{
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *s = NULL;
    char *page = aligned_alloc(4096, 16384), *out = aligned_alloc(4096, 16384);
    gm_devptr dev = 0;
    hsa_double_live live;
    gm_copy_desc d;
    long locks = 0;

    (void)state;
    assert_non_null(page);
    assert_non_null(out);
    for (int i = 0; i < 16384; i++)
        page[i] = (char)(i * 3 + 11);
    memset(out, 0, 16384);
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 5000;
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->mem_alloc(bctx, 16384, &dev));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s));
    assert_ok(hsa_ops->host_register(bctx, page, 4096, 0));
    assert_ok(hsa_ops->host_register(bctx, out, 4096, 0));
    locks = hsa_double_calls("hsa_amd_memory_lock");

    assert_ok(
        copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)dev, GM_COPY_HOST, page, 16384));
    assert_ok(
        copy_async(bctx, s, GM_COPY_HOST, out, GM_COPY_DEVICE, (void *)(uintptr_t)dev, 16384));
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 2); /* the registrations */
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_memory_equal(out, page, 16384);

    memset(out, 0, 16384);
    assert_ok(
        copy_async(bctx, NULL, GM_COPY_DEVICE, (void *)(uintptr_t)dev, GM_COPY_HOST, page, 8192));
    assert_ok(
        copy_async(bctx, NULL, GM_COPY_HOST, out, GM_COPY_DEVICE, (void *)(uintptr_t)dev, 8192));
    assert_memory_equal(out, page, 8192);
    assert_ok(copy_async(bctx, NULL, GM_COPY_HOST, out, GM_COPY_DEVICE, (void *)(uintptr_t)dev,
                         2048)); /* inside: the registration as it is */
    assert_int_equal(hsa_double_calls("hsa_amd_memory_lock"), locks);
    hsa_test_assert_no_violations();

    /* pitched: 20 rows of 100 bytes, host pitch 300 (5.8 KiB from page), device pitch 256 */
    memset(out, 0, 16384);
    d = hsa_test_copy1d(GM_COPY_DEVICE, dev, GM_COPY_HOST, (gm_devptr)(uintptr_t)page, 100);
    d.height = 20;
    d.dst_pitch = 256;
    d.src_pitch = 300;
    assert_ok(hsa_ops->copy(bctx, &d, s));
    d = hsa_test_copy1d(GM_COPY_HOST, (gm_devptr)(uintptr_t)out, GM_COPY_DEVICE, dev, 100);
    d.height = 20;
    d.dst_pitch = 300;
    d.src_pitch = 256;
    assert_ok(hsa_ops->copy(bctx, &d, s));
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    for (int y = 0; y < 20; y++) {
        assert_memory_equal(out + y * 300, page + y * 300, 100);
        assert_int_equal(out[y * 300 + 100], 0); /* between the rows: untouched */
    }
    assert_int_equal(hsa_double_calls("hsa_amd_memory_lock"), locks);
    hsa_test_assert_no_violations();

    assert_ok(hsa_ops->host_unregister(bctx, page));
    assert_ok(hsa_ops->host_unregister(bctx, out));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, dev));
    hsa_test_close(bctx);
    free(page);
    free(out);
}

/* The pageable copy a stream callback makes (copy_in_callback). */
typedef struct callback_copy {
    gm_backend_ctx *bctx;
    gm_backend_stream *stream;
    gm_devptr dev;
    char *host;
    gm_status status;
    long locks; /* live locks right after it */
} callback_copy;

static gm_status copy_in_callback(void *user)
{
    callback_copy *c = user;
    hsa_double_live live;

    c->status = copy_async(c->bctx, c->stream, GM_COPY_DEVICE, (void *)(uintptr_t)c->dev,
                           GM_COPY_HOST, c->host, 8192);
    hsa_double_get_live(&live);
    c->locks = live.locks;
    return GM_OK;
}

/*
 * Inside a stream callback nothing may wait: a copy there of 8 KiB at an
 * address where a pending copy of the context locked 4 KiB is staged, not
 * refused and not waited for.
 */
static void test_split_copy_in_callback(void **state)
{
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *s = NULL, *t = NULL, *u = NULL;
    char *page = aligned_alloc(4096, 16384);
    gm_devptr d1 = 0, d2 = 0;
    callback_copy c;

    (void)state;
    assert_non_null(page);
    for (int i = 0; i < 16384; i++)
        page[i] = (char)(i * 5 + 3);
    hsa_double_config_default(&cfg);
    cfg.copy_delay_us = 50000;
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->mem_alloc(bctx, 16384, &d1));
    assert_ok(hsa_ops->mem_alloc(bctx, 16384, &d2));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &t));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &u));
    memset(&c, 0, sizeof(c));
    c.bctx = bctx;
    c.stream = u;
    c.dev = d2;
    c.host = page;
    c.status = GM_ERR_NOT_READY; /* until the callback ran */
    assert_ok(copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)d1, GM_COPY_HOST, page, 4096));
    assert_ok(hsa_ops->stream_enqueue_host(bctx, t, copy_in_callback, &c, NULL));
    assert_ok(hsa_ops->stream_synchronize(bctx, t));
    assert_ok(c.status);
    assert_int_equal(c.locks, 1); /* staged: no lock of its own */
    assert_ok(hsa_ops->stream_synchronize(bctx, u));
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_true(device_equals(bctx, d1, page, 4096));
    assert_true(device_equals(bctx, d2, page, 8192));
    hsa_test_assert_no_violations();
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->stream_destroy(bctx, t));
    assert_ok(hsa_ops->stream_destroy(bctx, u));
    assert_ok(hsa_ops->mem_free(bctx, d1));
    assert_ok(hsa_ops->mem_free(bctx, d2));
    hsa_test_close(bctx);
    free(page);
}

/* ------------------------------------------- dependencies from several streams */

/* Resume the paused double once `call` was made `count` times since the reset: the
 * backend reached the point the test waits for (a gate on the call, not a delay). */
typedef struct call_gate {
    const char *call;
    long count;
} call_gate;

static void *unpause_after_call(void *arg)
{
    const call_gate *gate = arg;

    while (hsa_double_calls(gate->call) < gate->count)
        sleep_ms(1);
    hsa_double_pause(0);
    return NULL;
}

/* Whether a processed barrier-AND packet names every one of the n signals. */
static bool barrier_names(const hsa_signal_t *sigs, int n)
{
    for (long i = 0; i < hsa_double_packet_count(); i++) {
        hsa_double_packet pkt;
        hsa_barrier_and_packet_t bar;
        int found = 0;

        if (!hsa_double_get_packet(i, &pkt))
            continue;
        memcpy(&bar, pkt.bytes, sizeof(bar));
        if ((bar.header & 0xff) != HSA_PACKET_TYPE_BARRIER_AND)
            continue;
        for (int s = 0; s < n; s++) {
            for (int d = 0; d < 5; d++) {
                if (bar.dep_signal[d].handle == sigs[s].handle) {
                    found++;
                    break;
                }
            }
        }
        if (found == n)
            return true;
    }
    return false;
}

/* The completion signal of the barrier-AND packet depending on sig. */
static hsa_signal_t barrier_after(hsa_signal_t sig)
{
    hsa_signal_t none = {0};

    for (long i = 0; i < hsa_double_packet_count(); i++) {
        hsa_double_packet pkt;
        hsa_barrier_and_packet_t bar;

        if (!hsa_double_get_packet(i, &pkt))
            continue;
        memcpy(&bar, pkt.bytes, sizeof(bar));
        if ((bar.header & 0xff) == HSA_PACKET_TYPE_BARRIER_AND &&
            bar.dep_signal[0].handle == sig.handle)
            return bar.completion_signal;
    }
    fail_msg("no barrier-AND packet depends on 0x%llx", (unsigned long long)sig.handle);
    return none;
}

/* What host work saw of two copies' results when it ran. */
typedef struct two_results {
    const uint32_t *got[2];
    const uint32_t *want[2];
    int ran;
    int cleaned;
    int data_ok;
} two_results;

static gm_status check_two_results(void *user)
{
    two_results *r = user;

    r->ran++;
    r->data_ok =
        memcmp(r->got[0], r->want[0], N * 4) == 0 && memcmp(r->got[1], r->want[1], N * 4) == 0;
    return GM_OK;
}

static void clean_two_results(void *user)
{
    ((two_results *)user)->cleaned++;
}

/* Two streams copying device data back to the host, held in the paused double. */
typedef struct two_streams {
    gm_backend_stream *s[2];
    uint32_t *src[2], *back[2];
    gm_devptr dev[2];
    two_results seen;
} two_streams;

static void two_streams_start(gm_backend_ctx *bctx, two_streams *t, unsigned flags)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < 2; i++) {
        t->src[i] = pattern(20 + (uint32_t)i);
        t->back[i] = calloc(N, 4);
        t->dev[i] = hsa_test_to_device(bctx, t->src[i], N * 4);
        t->seen.got[i] = t->back[i];
        t->seen.want[i] = t->src[i];
        assert_ok(hsa_ops->stream_create(bctx, flags, &t->s[i]));
    }
    hsa_double_pause(1);
    for (int i = 0; i < 2; i++)
        assert_ok(copy_async(bctx, t->s[i], GM_COPY_HOST, t->back[i], GM_COPY_DEVICE,
                             (void *)(uintptr_t)t->dev[i], N * 4));
}

static void two_streams_end(gm_backend_ctx *bctx, two_streams *t)
{
    for (int i = 0; i < 2; i++) {
        assert_ok(hsa_ops->stream_destroy(bctx, t->s[i]));
        assert_ok(hsa_ops->mem_free(bctx, t->dev[i]));
        free(t->src[i]);
        free(t->back[i]);
    }
}

/* A non-blocking stream waiting for events recorded on both of t's streams. */
typedef struct waiting_stream {
    two_streams t;
    gm_backend_stream *s;
    gm_backend_event *ev[2];
} waiting_stream;

static void waiting_stream_start(gm_backend_ctx *bctx, waiting_stream *w)
{
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &w->s));
    two_streams_start(bctx, &w->t, GM_STREAM_NON_BLOCKING);
    for (int i = 0; i < 2; i++) {
        assert_ok(hsa_ops->event_create(bctx, 0, &w->ev[i]));
        assert_ok(hsa_ops->event_record(bctx, w->ev[i], w->t.s[i]));
        assert_ok(hsa_ops->stream_wait_event(bctx, w->s, w->ev[i]));
    }
}

static void waiting_stream_end(gm_backend_ctx *bctx, waiting_stream *w)
{
    for (int i = 0; i < 2; i++)
        assert_ok(hsa_ops->event_destroy(bctx, w->ev[i]));
    assert_ok(hsa_ops->stream_destroy(bctx, w->s));
    two_streams_end(bctx, &w->t);
}

/*
 * Host work on a stream that waits for events of two other streams: the
 * runtime's async handler takes one signal, so a barrier-AND packet on the
 * stream's queue merges the two records and the work runs after both copies.
 */
static void test_host_work_after_two_streams(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    hsa_signal_t records[2];
    waiting_stream w;

    (void)state;
    waiting_stream_start(bctx, &w);
    assert_ok(
        hsa_ops->stream_enqueue_host(bctx, w.s, check_two_results, &w.t.seen, clean_two_results));
    assert_status(hsa_ops->stream_query(bctx, w.s), GM_ERR_NOT_READY);
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(bctx, w.s));
    assert_int_equal(w.t.seen.ran, 1);
    assert_int_equal(w.t.seen.cleaned, 1);
    assert_true(w.t.seen.data_ok);
    for (int i = 0; i < 2; i++)
        records[i] = barrier_after(find_copy(w.t.back[i]).completion);
    assert_true(barrier_names(records, 2));
    waiting_stream_end(bctx, &w);
    hsa_test_close(bctx);
}

/* A bookkeeping allocator whose next calloc fails once armed. */
static _Atomic int fail_next_calloc;

static void *arming_calloc(size_t count, size_t size)
{
    if (atomic_exchange(&fail_next_calloc, 0) != 0)
        return NULL;
    return calloc(count, size);
}

/* device_synchronize on another thread; done is set when it returned. */
typedef struct sync_call {
    gm_backend_ctx *bctx;
    gm_status status;
    _Atomic int done;
} sync_call;

static void *device_synchronize_thread(void *arg)
{
    sync_call *c = arg;

    c->status = hsa_ops->device_synchronize(c->bctx);
    atomic_store(&c->done, 1);
    return NULL;
}

/*
 * device_synchronize without memory for its list of signals still waits for
 * every stream's work, one head at a time (wait_every_head): while the
 * double's DMA engine is paused it has not returned, and when it returns both
 * copies landed and nothing is pending.
 */
static void test_device_synchronize_without_memory(void **state)
{
    static const gm_host_allocator arming = {malloc, arming_calloc, realloc, free};
    sync_call c;
    two_streams t;
    pthread_t th;

    (void)state;
    assert_ok(gm_set_host_allocator(&arming)); /* before any object, as it must be */
    c.bctx = hsa_test_open(NULL, 0);
    c.status = GM_ERR_INTERNAL;
    atomic_init(&c.done, 0);
    two_streams_start(c.bctx, &t, GM_STREAM_NON_BLOCKING);
    atomic_store(&fail_next_calloc, 1);
    pthread_create(&th, NULL, device_synchronize_thread, &c);
    while (atomic_load(&fail_next_calloc) != 0) /* the list of signals was refused */
        sleep_ms(1);
    sleep_ms(50);
    assert_int_equal(atomic_load(&c.done), 0); /* still waiting for the paused copies */
    hsa_double_pause(0);
    pthread_join(th, NULL);
    assert_ok(c.status);
    for (int i = 0; i < 2; i++) {
        assert_memory_equal(t.back[i], t.src[i], N * 4);
        assert_ok(hsa_ops->stream_query(c.bctx, t.s[i]));
    }
    two_streams_end(c.bctx, &t);
    hsa_test_close(c.bctx);
    assert_ok(gm_set_host_allocator(NULL));
}

/*
 * The same wait after a GPU memory fault failed the context (the copies stay
 * pending, as behind a stopped GPU): device_synchronize ends with
 * GM_ERR_CONTEXT_LOST, as it does with its list of signals, instead of
 * waiting for the same head again and again. Given 5 s (a hang otherwise).
 */
static void test_device_synchronize_without_memory_failed_context(void **state)
{
    static const gm_host_allocator arming = {malloc, arming_calloc, realloc, free};
    sync_call c;
    two_streams t;
    pthread_t th;

    (void)state;
    assert_ok(gm_set_host_allocator(&arming));
    c.bctx = hsa_test_open(NULL, 0);
    c.status = GM_ERR_INTERNAL;
    atomic_init(&c.done, 0);
    two_streams_start(c.bctx, &t, GM_STREAM_NON_BLOCKING);
    hsa_double_memory_fault(0, 0x1000, HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
    atomic_store(&fail_next_calloc, 1);
    pthread_create(&th, NULL, device_synchronize_thread, &c);
    for (int i = 0; i < 5000 && atomic_load(&c.done) == 0; i++)
        sleep_ms(1);
    hsa_double_pause(0); /* lets a hung call end, so that a failure is reported, not a hang */
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&fail_next_calloc), 0); /* the list of signals was refused */
    assert_status(c.status, GM_ERR_CONTEXT_LOST);
    for (int i = 0; i < 2; i++) {
        while (hsa_ops->stream_query(c.bctx, t.s[i]) != GM_OK) /* the copies finish */
            sleep_ms(1);
    }
    two_streams_end(c.bctx, &t);
    hsa_test_close(c.bctx);
    assert_ok(gm_set_host_allocator(NULL));
}

/* A stream callback that counts its runs. */
static void count_callback(gm_status status, void *user)
{
    (void)status;
    atomic_fetch_add((_Atomic int *)user, 1);
}

/*
 * Destroying a stream after a GPU memory fault failed the context, while the
 * copy engine still holds one of its copies (from pageable memory the backend
 * locked) and a callback waits for that copy: the stream's drain ends at once
 * with the failure, yet nothing the runtime may still touch is released under
 * it (the double records unlocking under a pending copy; the callback's
 * handler would run on a freed work item and stream). Once the copy ran, the
 * callback ran, and a context-wide reap frees what the stream held.
 */
static void test_destroy_after_failure_keeps_pending_work(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *src = pattern(7);
    gm_backend_stream *s = NULL;
    gm_devptr dev = 0;
    hsa_double_live live;
    _Atomic int ran = 0;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &dev));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    hsa_double_pause(1);
    assert_ok(
        copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)dev, GM_COPY_HOST, src, N * 4));
    assert_ok(hsa_ops->stream_add_callback(bctx, s, count_callback, (void *)&ran));
    hsa_double_memory_fault(0, 0x1000, HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
    /* returns once the fault reached the context (the copy is held) */
    assert_status(hsa_ops->device_synchronize(bctx), GM_ERR_CONTEXT_LOST);
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    hsa_test_assert_no_violations(); /* the pageable source is still locked */
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 1);
    assert_int_equal(atomic_load(&ran), 0);
    hsa_double_pause(0);
    while (atomic_load(&ran) == 0) /* the copy ran, then the callback */
        sleep_ms(1);
    (void)hsa_ops->device_synchronize(bctx); /* reaps the destroyed stream's work */
    hsa_double_get_live(&live);
    assert_int_equal(live.locks, 0);
    assert_int_equal(atomic_load(&ran), 1);
    assert_ok(hsa_ops->mem_free(bctx, dev));
    hsa_test_close(bctx);
    free(src);
}

/*
 * The runtime refuses the async handler after the merging barrier-AND packet
 * was submitted: the call fails naming it, nothing of the work runs (the
 * caller keeps user), the merged signal outlives the packet that completes it
 * (no violation), and the stream takes host work again.
 */
static void test_host_work_merge_refused(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    call_gate gate = {"hsa_amd_signal_async_handler", 0};
    waiting_stream w;
    pthread_t th;

    (void)state;
    waiting_stream_start(bctx, &w);
    gate.count = hsa_double_calls(gate.call) + 1;
    hsa_double_fail(gate.call, 1, HSA_STATUS_ERROR, 0);
    pthread_create(&th, NULL, unpause_after_call, &gate);
    assert_status(
        hsa_ops->stream_enqueue_host(bctx, w.s, check_two_results, &w.t.seen, clean_two_results),
        GM_ERR_DRIVER);
    assert_message_contains("hsa_amd_signal_async_handler");
    pthread_join(th, NULL);
    /* the refusal does not wait for the merging barrier (the stream keeps its signal:
     * a wait under the context lock could deadlock); the stream's synchronize does */
    assert_ok(hsa_ops->stream_synchronize(bctx, w.s));
    assert_int_equal(hsa_double_packet_count(), 3); /* two records and the merging barrier */
    assert_int_equal(w.t.seen.ran, 0);
    assert_int_equal(w.t.seen.cleaned, 0);
    hsa_test_assert_no_violations();
    assert_ok(
        hsa_ops->stream_enqueue_host(bctx, w.s, check_two_results, &w.t.seen, clean_two_results));
    assert_ok(hsa_ops->stream_synchronize(bctx, w.s));
    assert_int_equal(w.t.seen.ran, 1);
    assert_int_equal(w.t.seen.cleaned, 1);
    assert_true(w.t.seen.data_ok);
    waiting_stream_end(bctx, &w);
    hsa_test_close(bctx);
}

static atomic_int merge_gate;

static gm_status wait_for_merge_gate(void *user)
{
    (void)user;
    while (atomic_load(&merge_gate) == 0)
        sleep_ms(1);
    return GM_OK;
}

static gm_status nothing_to_do(void *user)
{
    (void)user;
    return GM_OK;
}

typedef struct device_sync_call {
    gm_backend_ctx *bctx;
    gm_status status;
    atomic_int done;
} device_sync_call;

static void *device_sync_thread(void *arg)
{
    device_sync_call *c = arg;

    c->status = hsa_ops->device_synchronize(c->bctx);
    atomic_store(&c->done, 1);
    return NULL;
}

/*
 * A refused handler after the merging barrier went out: the barrier's own
 * dependencies stay referenced until it completes. They were dropped with
 * the operation, recycled by the signal cache for the blocking streams' next
 * work, which (the legacy rule) waits for the barrier: a cycle, and every
 * synchronize hung. Exits the process if it hangs.
 */
static void test_merge_refused_keeps_barrier_dependencies(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_stream *b1 = NULL, *b2 = NULL, *legacy = NULL;
    device_sync_call sync;
    pthread_t t;
    bool hung = true;

    (void)state;
    atomic_store(&merge_gate, 0);
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &b1));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &b2));
    assert_ok(hsa_ops->stream_builtin(bctx, GM_BUILTIN_STREAM_LEGACY, &legacy));
    /* the legacy stream's next work waits for both: a merging barrier */
    assert_ok(hsa_ops->stream_enqueue_host(bctx, b1, wait_for_merge_gate, NULL, NULL));
    assert_ok(hsa_ops->stream_enqueue_host(bctx, b2, wait_for_merge_gate, NULL, NULL));
    hsa_double_pause(1); /* the barrier stays queued */
    hsa_double_fail("hsa_amd_signal_async_handler", 1, HSA_STATUS_ERROR_OUT_OF_RESOURCES, 0);
    assert_status(hsa_ops->stream_enqueue_host(bctx, legacy, nothing_to_do, NULL, NULL),
                  GM_ERR_OUT_OF_DEVICE_MEMORY);
    atomic_store(&merge_gate, 1);
    assert_ok(hsa_ops->stream_synchronize(bctx, b1)); /* their work is reaped */
    assert_ok(hsa_ops->stream_synchronize(bctx, b2));
    /* new work on the blocking streams takes signals from the cache */
    assert_ok(hsa_ops->stream_enqueue_host(bctx, b1, nothing_to_do, NULL, NULL));
    assert_ok(hsa_ops->stream_enqueue_host(bctx, b2, nothing_to_do, NULL, NULL));
    hsa_double_pause(0);
    sync.bctx = bctx;
    sync.status = GM_ERR_INTERNAL;
    atomic_init(&sync.done, 0);
    assert_int_equal(pthread_create(&t, NULL, device_sync_thread, &sync), 0);
    for (int i = 0; i < 10000 && hung; i++) {
        hung = atomic_load(&sync.done) == 0;
        if (hung)
            sleep_ms(1);
    }
    if (hung) {
        print_error("device_synchronize still waits after 10 s: the merging barrier waits on "
                    "a recycled signal\n");
        fflush(NULL);
        _exit(1);
    }
    pthread_join(t, NULL);
    assert_ok(sync.status);
    assert_ok(hsa_ops->stream_destroy(bctx, b1));
    assert_ok(hsa_ops->stream_destroy(bctx, b2));
    hsa_test_assert_no_violations();
    hsa_test_close(bctx);
}

/*
 * Synchronous host work (stream NULL) waits, on the calling thread, for the
 * work of every blocking stream, two here: a barrier-AND packet on the legacy
 * stream's queue merges their copies; fn runs after both, then cleanup.
 */
static void test_sync_host_work_waits_for_streams(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    call_gate gate = {"hsa_amd_signal_async_handler", 0};
    hsa_signal_t copies[2];
    two_streams t;
    pthread_t th;

    (void)state;
    two_streams_start(bctx, &t, GM_STREAM_DEFAULT);
    gate.count = hsa_double_calls(gate.call) + 1;
    pthread_create(&th, NULL, unpause_after_call, &gate);
    assert_ok(
        hsa_ops->stream_enqueue_host(bctx, NULL, check_two_results, &t.seen, clean_two_results));
    pthread_join(th, NULL);
    assert_int_equal(t.seen.ran, 1);
    assert_int_equal(t.seen.cleaned, 1);
    assert_true(t.seen.data_ok);
    for (int i = 0; i < 2; i++)
        copies[i] = find_copy(t.back[i]).completion;
    assert_true(barrier_names(copies, 2));
    two_streams_end(bctx, &t);
    hsa_test_close(bctx);
}

/*
 * A stream waiting for six events (its dependency list grows past its first
 * four slots): a record on it is a chain of two barrier-AND packets (five
 * dependency slots each) naming all six, and its later copies wait for them.
 */
static void test_wait_for_six_events(void **state)
{
    enum { K = 6 };
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    gm_backend_stream *src_streams[K], *s = NULL;
    gm_backend_event *ev[K], *all = NULL;
    uint32_t *src[K], *back[K];
    gm_devptr dev[K];
    hsa_signal_t records[K];
    hsa_barrier_and_packet_t chain[2];
    hsa_double_copy after;
    hsa_double_packet last;
    int named = 0;

    (void)state;
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->event_create(bctx, 0, &all));
    for (int i = 0; i < K; i++) {
        src[i] = pattern(30 + (uint32_t)i);
        back[i] = calloc(N, 4);
        assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &dev[i]));
        assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &src_streams[i]));
        assert_ok(hsa_ops->event_create(bctx, 0, &ev[i]));
    }
    hsa_double_pause(1);
    for (int i = 0; i < K; i++) {
        assert_ok(copy_async(bctx, src_streams[i], GM_COPY_DEVICE, (void *)(uintptr_t)dev[i],
                             GM_COPY_HOST, src[i], N * 4));
        assert_ok(hsa_ops->event_record(bctx, ev[i], src_streams[i]));
        assert_ok(hsa_ops->stream_wait_event(bctx, s, ev[i]));
    }
    assert_ok(hsa_ops->event_record(bctx, all, s));
    for (int i = 0; i < K; i++)
        assert_ok(copy_async(bctx, s, GM_COPY_HOST, back[i], GM_COPY_DEVICE,
                             (void *)(uintptr_t)dev[i], N * 4));
    assert_status(hsa_ops->event_query(bctx, all), GM_ERR_NOT_READY);
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    for (int i = 0; i < K; i++) {
        assert_memory_equal(back[i], src[i], N * 4);
        records[i] = barrier_after(find_copy((void *)(uintptr_t)dev[i]).completion);
    }
    /* the chain: s's queue's two packets before its copies (its other queue threads may
     * process the sixth record between them), the first without a completion signal */
    after = find_copy(back[0]); /* s's first copy after the record waits for its signal */
    assert_int_equal(after.ndeps, 1);
    memset(&last, 0, sizeof(last));
    memset(chain, 0, sizeof(chain));
    for (long i = 0; i < hsa_double_packet_count(); i++) {
        hsa_double_packet pkt;

        assert_true(hsa_double_get_packet(i, &pkt));
        memcpy(&chain[1], pkt.bytes, sizeof(chain[1]));
        if (chain[1].completion_signal.handle == after.deps[0].handle) {
            last = pkt;
            break;
        }
    }
    assert_int_not_equal(last.sequence, 0);
    memcpy(&chain[1], last.bytes, sizeof(chain[1]));
    for (long i = 0; i < hsa_double_packet_count(); i++) {
        hsa_double_packet pkt;

        assert_true(hsa_double_get_packet(i, &pkt));
        if (pkt.queue_id == last.queue_id && pkt.packet_id + 1 == last.packet_id)
            memcpy(&chain[0], pkt.bytes, sizeof(chain[0]));
    }
    for (int p = 0; p < 2; p++)
        assert_int_equal(chain[p].header & 0xff, HSA_PACKET_TYPE_BARRIER_AND);
    assert_int_equal(chain[0].completion_signal.handle, 0);
    assert_int_not_equal(chain[1].completion_signal.handle, 0);
    for (int i = 0; i < K; i++) {
        for (int p = 0; p < 2; p++) {
            for (int d = 0; d < 5; d++)
                named += chain[p].dep_signal[d].handle == records[i].handle;
        }
    }
    assert_int_equal(named, K);
    for (int i = 0; i < K; i++) {
        assert_ok(hsa_ops->event_destroy(bctx, ev[i]));
        assert_ok(hsa_ops->stream_destroy(bctx, src_streams[i]));
        assert_ok(hsa_ops->mem_free(bctx, dev[i]));
        free(src[i]);
        free(back[i]);
    }
    assert_ok(hsa_ops->event_destroy(bctx, all));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    hsa_test_close(bctx);
}

static gm_status count_work(void *user)
{
    (*(int *)user)++;
    return GM_OK;
}

/*
 * An operation whose dependency barriers need more packets than a stream's
 * queue holds (16 here; ROCr's queues hold at most what the agent reports)
 * is refused as unsupported before anything is submitted, whether the
 * stream's queue exists yet or not; nothing of it runs and the streams stay
 * usable. 81 pending signals: 17 barrier-AND packets and the operation's.
 */
static void test_too_many_dependencies(void **state)
{
    enum { WAITS = 81 };
    hsa_double_config cfg;
    gm_backend_ctx *bctx = NULL;
    gm_backend_stream *src = NULL, *fresh = NULL, *queued = NULL;
    gm_backend_stream *targets[2] = {NULL, NULL};
    gm_backend_event *ev = NULL, *plain = NULL;
    uint32_t *a = pattern(40);
    gm_devptr da = 0;
    int ran = 0;

    (void)state;
    hsa_double_config_default(&cfg);
    cfg.queue_max_size = 16;
    bctx = hsa_test_open(&cfg, 0);
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &da));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &src));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &fresh));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &queued));
    targets[0] = fresh;
    targets[1] = queued;
    assert_ok(hsa_ops->event_create(bctx, 1, &ev)); /* timing: host work, no packets on src */
    assert_ok(hsa_ops->event_create(bctx, 0, &plain));
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, src, GM_COPY_DEVICE, (void *)(uintptr_t)da, GM_COPY_HOST, a, N * 4));
    for (int i = 0; i < WAITS; i++) {
        assert_ok(hsa_ops->event_record(bctx, ev, src));
        assert_ok(hsa_ops->stream_wait_event(bctx, fresh, ev));
        assert_ok(hsa_ops->stream_wait_event(bctx, queued, ev));
        if (i == 0) /* a barrier-AND packet: queued has a queue from now on */
            assert_ok(hsa_ops->event_record(bctx, plain, queued));
    }
    for (int t = 0; t < 2; t++) {
        long queues = hsa_double_calls("hsa_queue_create");

        assert_status(hsa_ops->event_record(bctx, plain, targets[t]), GM_ERR_UNSUPPORTED);
        assert_message_contains("needs 18 AQL packets (dependency barriers), more than the "
                                "queue's 16");
        assert_status(
            hsa_ops->stream_enqueue_host(bctx, targets[t], count_work, &ran, count_cleanup),
            GM_ERR_UNSUPPORTED);
        assert_int_equal(hsa_double_calls("hsa_queue_create"), queues);
    }
    hsa_double_pause(0);
    assert_ok(hsa_ops->stream_synchronize(bctx, src));
    for (int t = 0; t < 2; t++) { /* the waited-for work is done: the streams take work again */
        assert_ok(hsa_ops->stream_synchronize(bctx, targets[t]));
        assert_ok(hsa_ops->event_record(bctx, plain, targets[t]));
        assert_ok(hsa_ops->stream_enqueue_host(bctx, targets[t], count_work, &ran, NULL));
        assert_ok(hsa_ops->stream_synchronize(bctx, targets[t]));
    }
    assert_int_equal(ran, 2); /* the refused work never ran, nor its cleanup (+100) */
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->event_destroy(bctx, plain));
    assert_ok(hsa_ops->stream_destroy(bctx, src));
    assert_ok(hsa_ops->stream_destroy(bctx, fresh));
    assert_ok(hsa_ops->stream_destroy(bctx, queued));
    assert_ok(hsa_ops->mem_free(bctx, da));
    hsa_test_close(bctx);
    free(a);
}

/* ----------------------------------------- work behind a failed copy */

/*
 * A copy that fails asynchronously (its completion signal goes negative)
 * holds whatever depends on it forever, as in ROCr: copies and barrier-AND
 * packets start only once their dependencies are exactly 0. Waits for such
 * work must end with GM_ERR_CONTEXT_LOST naming the failed copy. Every wait
 * below runs on a thread given 5 s: a hang fails the test (the failed copy's
 * signal is then set to 0, so that the stuck work and the waiting thread end).
 */
typedef gm_status (*bounded_fn)(gm_backend_ctx *bctx, void *arg);

typedef struct bounded_call {
    gm_backend_ctx *bctx;
    bounded_fn fn;
    void *arg;
    gm_status status;
    char message[1024];
    _Atomic int done;
} bounded_call;

static void *bounded_thread(void *p)
{
    bounded_call *c = p;

    c->status = c->fn(c->bctx, c->arg);
    snprintf(c->message, sizeof(c->message), "%s", gm_last_error_message());
    atomic_store(&c->done, 1);
    return NULL;
}

/* Let the work stuck behind the failed copies go (test clean-up, or a hang's end). */
static void release_failed_copies(void)
{
    hsa_double_copy c;

    for (long i = 0; i < hsa_double_copy_count(); i++) {
        if (hsa_double_get_copy(i, &c) && c.failed)
            hsa_signal_store_screlease(c.completion, 0);
    }
}

/* fn(bctx, arg) on a thread; its status, its message in message. Fails after 5 s.
 * unpause_after > 0: the DMA engine is paused until that many copies were issued;
 * unpause_when_still != NULL: until that counter (the call's progress) stood still
 * for 100 ms. */
static long unpause_after;
static _Atomic long *unpause_when_still;

static gm_status bounded(gm_backend_ctx *bctx, bounded_fn fn, void *arg, const char *what,
                         char *message, size_t bytes)
{
    bounded_call c = {bctx, fn, arg, GM_ERR_INTERNAL, "", 0};
    pthread_t th;
    bool hung = true;

    assert_int_equal(pthread_create(&th, NULL, bounded_thread, &c), 0);
    /* a paused DMA engine (a call that queues its own copy first): go once it is queued */
    while (unpause_after > 0 && hsa_double_calls("hsa_amd_memory_async_copy") < unpause_after &&
           atomic_load(&c.done) == 0)
        sleep_ms(1);
    if (unpause_after > 0)
        hsa_double_pause(0);
    for (long last = -1, still = 0; unpause_when_still != NULL && still < 100;) {
        long now = atomic_load(unpause_when_still);

        still = now == last ? still + 1 : 0;
        last = now;
        sleep_ms(1);
    }
    if (unpause_when_still != NULL)
        hsa_double_pause(0);
    for (int i = 0; i < 5000 && hung; i++) {
        hung = atomic_load(&c.done) == 0;
        if (hung)
            sleep_ms(1);
    }
    if (hung) {
        release_failed_copies();
        pthread_join(th, NULL);
        fail_msg("%s hung behind a failed copy (still waiting after 5 s)", what);
    }
    pthread_join(th, NULL);
    snprintf(message, bytes, "%s", c.message);
    return c.status;
}

static gm_status call_stream_synchronize(gm_backend_ctx *bctx, void *s)
{
    return hsa_ops->stream_synchronize(bctx, s);
}

static gm_status call_event_synchronize(gm_backend_ctx *bctx, void *e)
{
    return hsa_ops->event_synchronize(bctx, e);
}

static gm_status call_device_synchronize(gm_backend_ctx *bctx, void *unused)
{
    (void)unused;
    return hsa_ops->device_synchronize(bctx);
}

typedef struct sync_copy_args {
    void *dst;
    const void *src;
} sync_copy_args;

static gm_status call_sync_copy(gm_backend_ctx *bctx, void *p)
{
    const sync_copy_args *a = p;

    return copy_async(bctx, NULL, GM_COPY_HOST, a->dst, GM_COPY_DEVICE, a->src, N * 4);
}

/* The message of a wait ended by work stuck behind the failed copy. */
static void assert_stuck_message(const char *message, const char *call, const char *stuck)
{
    char expect[256];

    if (strstr(message, call) == NULL ||
        strstr(message, "hsa_amd_memory_async_copy failed on the device (completion signal "
                        "-5)") == NULL ||
        strstr(message, "will never start") == NULL) {
        fail_msg("unexpected message: %s", message);
    }
    snprintf(expect, sizeof(expect), "and %s, which depends on it", stuck);
    if (strstr(message, expect) == NULL)
        fail_msg("message does not name \"%s\": %s", stuck, message);
}

/* A device array, a stream and a host pattern for these tests. */
typedef struct failed_copy_fixture {
    gm_backend_ctx *bctx;
    gm_backend_stream *s;
    gm_devptr d1, d2;
    uint32_t *src, *back;
} failed_copy_fixture;

/* The copy src -> d1 on stream s (NULL: the legacy stream) fails on the DMA engine with -5;
 * the DMA engine is left paused so that what follows is queued behind it. */
static void failed_copy_start(failed_copy_fixture *f, bool legacy)
{
    f->bctx = hsa_test_open(NULL, 0);
    f->src = pattern(11);
    f->back = calloc(N, 4);
    assert_ok(hsa_ops->mem_alloc(f->bctx, N * 4, &f->d1));
    assert_ok(hsa_ops->mem_alloc(f->bctx, N * 4, &f->d2));
    if (legacy)
        assert_ok(hsa_ops->stream_builtin(f->bctx, GM_BUILTIN_STREAM_LEGACY, &f->s));
    else
        assert_ok(hsa_ops->stream_create(f->bctx, GM_STREAM_NON_BLOCKING, &f->s));
    hsa_double_pause(1);
    hsa_double_fail_copies(1, (void *)(uintptr_t)f->d1, -5);
    assert_ok(copy_async(f->bctx, f->s, GM_COPY_DEVICE, (void *)(uintptr_t)f->d1, GM_COPY_HOST,
                         f->src, N * 4));
}

/* Release the stuck work, let it finish, and close (nothing leaked, no violation). */
static void failed_copy_end(failed_copy_fixture *f, bool legacy)
{
    hsa_double_copy c;
    bool seen = false;

    hsa_double_pause(0);
    for (long i = 0; i < hsa_double_copy_count(); i++)
        seen = seen || (hsa_double_get_copy(i, &c) && c.failed);
    assert_true(seen); /* the injected failure happened */
    release_failed_copies();
    for (int i = 0; i < 5000 && hsa_ops->stream_query(f->bctx, f->s) != GM_OK; i++)
        sleep_ms(1);
    assert_ok(hsa_ops->stream_query(f->bctx, f->s));
    if (!legacy) {
        gm_clear_error();
        assert_ok(hsa_ops->stream_destroy(f->bctx, f->s));
        assert_int_equal(gm_last_error(), GM_OK); /* its work's failure is logged only */
    }
    assert_ok(hsa_ops->mem_free(f->bctx, f->d1));
    assert_ok(hsa_ops->mem_free(f->bctx, f->d2));
    hsa_test_close(f->bctx);
    free(f->src);
    free(f->back);
}

/*
 * A failed copy, then on its stream a copy of its destination, an event
 * record (a barrier-AND packet) and a callback: stream_synchronize and
 * event_synchronize end with GM_ERR_CONTEXT_LOST naming the failed copy and
 * the copy stuck behind it; the callback has not run (its dependency never
 * completes). Later waits fail the same way, at once.
 */
static void test_failed_copy_stream_synchronize(void **state)
{
    failed_copy_fixture f;
    gm_backend_event *e = NULL;
    _Atomic int calls = 0;
    char message[1024];

    (void)state;
    failed_copy_start(&f, false);
    assert_ok(copy_async(f.bctx, f.s, GM_COPY_DEVICE, (void *)(uintptr_t)f.d2, GM_COPY_DEVICE,
                         (void *)(uintptr_t)f.d1, N * 4));
    assert_ok(hsa_ops->event_create(f.bctx, 0, &e));
    assert_ok(hsa_ops->event_record(f.bctx, e, f.s));
    assert_ok(hsa_ops->stream_add_callback(f.bctx, f.s, count_callback, &calls));
    hsa_double_pause(0);
    assert_status(bounded(f.bctx, call_stream_synchronize, f.s, "stream_synchronize", message,
                          sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "stream_synchronize", "hsa_amd_memory_async_copy");
    assert_status(
        bounded(f.bctx, call_event_synchronize, e, "event_synchronize", message, sizeof(message)),
        GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "event_synchronize", "hsa_amd_memory_async_copy");
    assert_status(bounded(f.bctx, call_stream_synchronize, f.s, "stream_synchronize again", message,
                          sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    assert_int_equal(atomic_load(&calls), 0);
    assert_ok(hsa_ops->event_destroy(f.bctx, e));
    failed_copy_end(&f, false);
}

/* An event recorded right behind a failed copy: its barrier packet never runs. */
static void test_failed_copy_event_synchronize(void **state)
{
    failed_copy_fixture f;
    gm_backend_event *e = NULL;
    char message[1024];

    (void)state;
    failed_copy_start(&f, false);
    assert_ok(hsa_ops->event_create(f.bctx, 0, &e));
    assert_ok(hsa_ops->event_record(f.bctx, e, f.s));
    hsa_double_pause(0);
    assert_status(
        bounded(f.bctx, call_event_synchronize, e, "event_synchronize", message, sizeof(message)),
        GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "event_synchronize", "event record");
    assert_ok(hsa_ops->event_destroy(f.bctx, e));
    failed_copy_end(&f, false);
}

/* device_synchronize with a copy stuck behind a failed one on another stream. */
static void test_failed_copy_device_synchronize(void **state)
{
    failed_copy_fixture f;
    char message[1024];

    (void)state;
    failed_copy_start(&f, false);
    assert_ok(copy_async(f.bctx, f.s, GM_COPY_HOST, f.back, GM_COPY_DEVICE, (void *)(uintptr_t)f.d1,
                         N * 4));
    hsa_double_pause(0);
    assert_status(bounded(f.bctx, call_device_synchronize, NULL, "device_synchronize", message,
                          sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "device_synchronize", "hsa_amd_memory_async_copy");
    failed_copy_end(&f, false);
}

/*
 * A synchronous copy (the legacy stream) queued behind a failed copy on the
 * legacy stream: it ends with GM_ERR_CONTEXT_LOST, not in a hang.
 */
static void test_failed_copy_then_sync_copy(void **state)
{
    failed_copy_fixture f;
    sync_copy_args a;
    char message[1024];

    (void)state;
    failed_copy_start(&f, true);
    a.dst = f.back;
    a.src = (void *)(uintptr_t)f.d1;
    unpause_after = 2; /* the failed copy and the synchronous one */
    assert_status(bounded(f.bctx, call_sync_copy, &a, "synchronous copy", message, sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    unpause_after = 0;
    assert_stuck_message(message, "hsa_amd_memory_async_copy: the context failed",
                         "hsa_amd_memory_async_copy");
    failed_copy_end(&f, true);
}

/* Records of one event on one stream, counted in records_done as they return. */
typedef struct record_many_args {
    gm_backend_event *e;
    gm_backend_stream *s;
} record_many_args;

static _Atomic long records_done;

static gm_status call_record_many(gm_backend_ctx *bctx, void *arg)
{
    const record_many_args *a = arg;

    for (int i = 0; i < 1000; i++) {
        gm_status status = hsa_ops->event_record(bctx, a->e, a->s);

        if (status != GM_OK)
            return status;
        atomic_fetch_add(&records_done, 1);
    }
    return GM_OK;
}

/*
 * Event records behind a copy that then fails: their barrier packets fill
 * the stream's AQL queue (64 packets in the double) and never leave it, so
 * the record that waits for free slots must end with GM_ERR_CONTEXT_LOST,
 * not wait forever; later waits name the failed copy and the stuck record.
 */
static void test_failed_copy_fills_queue(void **state)
{
    failed_copy_fixture f;
    record_many_args a;
    char message[1024];

    (void)state;
    failed_copy_start(&f, false); /* the DMA engine stays paused until the records stall */
    assert_ok(hsa_ops->event_create(f.bctx, 0, &a.e));
    a.s = f.s;
    atomic_store(&records_done, 0);
    unpause_when_still = &records_done;
    assert_status(bounded(f.bctx, call_record_many, &a, "event_record waiting for queue room",
                          message, sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    unpause_when_still = NULL;
    if (strstr(message, "event record: the queue failed while waiting for free packet slots") ==
        NULL)
        fail_msg("unexpected message: %s", message);
    assert_in_range(atomic_load(&records_done), 1, 63); /* the queue held them, then was full */
    assert_status(bounded(f.bctx, call_stream_synchronize, f.s, "stream_synchronize", message,
                          sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "stream_synchronize", "event record");
    assert_ok(hsa_ops->event_destroy(f.bctx, a.e));
    failed_copy_end(&f, false);
}

/*
 * A stream made to wait for an event is not idle, and its synchronize waits,
 * until the event completes (CUDA's rule, the simulator's): the wait adds
 * no operation of the stream's own, only the event's signal to its frontier,
 * which query and synchronize did not look at.
 */
static void test_wait_event_then_synchronize(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(21);
    gm_backend_stream *s1 = NULL, *s2 = NULL;
    gm_backend_event *ev = NULL;
    gm_devptr d = 0;
    gm_status query = GM_OK, ev_done = GM_OK;
    pthread_t t;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s1));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s2));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, s1, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, a, N * 4));
    assert_ok(hsa_ops->event_record(bctx, ev, s1));
    assert_ok(hsa_ops->stream_wait_event(bctx, s2, ev));
    query = hsa_ops->stream_query(bctx, s2);
    assert_int_equal(pthread_create(&t, NULL, unpause_later, NULL), 0);
    assert_ok(hsa_ops->stream_synchronize(bctx, s2));
    ev_done = hsa_ops->event_query(bctx, ev);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_status(query, GM_ERR_NOT_READY); /* s2 waits for ev */
    assert_status(ev_done, GM_OK);          /* synchronize(s2) waited for ev */
    assert_ok(hsa_ops->stream_query(bctx, s2));
    assert_ok(hsa_ops->stream_synchronize(bctx, s1));
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->stream_destroy(bctx, s1));
    assert_ok(hsa_ops->stream_destroy(bctx, s2));
    assert_ok(hsa_ops->mem_free(bctx, d));
    hsa_test_close(bctx);
    free(a);
}

/* A callback that, as runtime.h allows, queries another stream of its context. */
typedef struct query_cb {
    gm_backend_ctx *bctx;
    gm_backend_stream *other;
    _Atomic int go, done;
} query_cb;

static void query_callback(gm_status status, void *user)
{
    query_cb *c = user;

    (void)status;
    while (atomic_load(&c->go) == 0)
        sleep_ms(1);
    sleep_ms(200);
    (void)hsa_ops->stream_query(c->bctx, c->other); /* takes the context lock */
    atomic_store(&c->done, 1);
}

typedef struct enqueue_call {
    gm_backend_ctx *bctx;
    gm_backend_stream *s;
    gm_status status;
    _Atomic int done;
} enqueue_call;

static void *enqueue_thread(void *p)
{
    enqueue_call *e = p;

    e->status = hsa_ops->stream_enqueue_host(e->bctx, e->s, nothing_to_do, NULL, NULL);
    atomic_store(&e->done, 1);
    return NULL;
}

/*
 * Host work with two dependencies (a barrier merges them) whose async handler
 * the runtime refuses: the merging barrier's signal must outlive the packet,
 * and the refusal waited for it with the context lock held, while the
 * barrier waited for a callback that needs that lock (a deadlock). A hang
 * ends the process (the lock stays held): so this test runs last.
 */
static void test_refused_handler_does_not_wait_locked(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *a = pattern(31);
    gm_backend_stream *s = NULL, *s1 = NULL;
    gm_backend_event *ev = NULL;
    gm_devptr d = 0;
    query_cb cb;
    enqueue_call e;
    pthread_t t;
    bool hung = true;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_NON_BLOCKING, &s1));
    assert_ok(hsa_ops->event_create(bctx, 0, &ev));
    cb.bctx = bctx;
    cb.other = s1;
    atomic_init(&cb.go, 0);
    atomic_init(&cb.done, 0);
    hsa_double_pause(1);
    assert_ok(copy_async(bctx, s1, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, a, N * 4));
    assert_ok(hsa_ops->event_record(bctx, ev, s1));
    assert_ok(hsa_ops->stream_add_callback(bctx, s, query_callback, &cb));
    assert_ok(hsa_ops->stream_wait_event(bctx, s, ev)); /* s waits for two signals */
    hsa_double_fail("hsa_amd_signal_async_handler", 1, HSA_STATUS_ERROR_OUT_OF_RESOURCES, 0);
    e.bctx = bctx;
    e.s = s;
    e.status = GM_OK;
    atomic_init(&e.done, 0);
    assert_int_equal(pthread_create(&t, NULL, enqueue_thread, &e), 0);
    sleep_ms(100);
    atomic_store(&cb.go, 1);
    hsa_double_pause(0);
    for (int i = 0; i < 5000 && hung; i++) {
        hung = atomic_load(&e.done) == 0;
        if (hung)
            sleep_ms(1);
    }
    if (hung) {
        print_error("stream_enqueue_host (its async handler refused) still waits after 5 s "
                    "with the context lock held (the callback it waits for: done %d)\n",
                    atomic_load(&cb.done));
        fflush(NULL);
        _exit(1);
    }
    pthread_join(t, NULL);
    assert_int_equal(e.status, GM_ERR_OUT_OF_DEVICE_MEMORY); /* the runtime's OUT_OF_RESOURCES */
    assert_ok(hsa_ops->stream_synchronize(bctx, s));
    assert_int_equal(atomic_load(&cb.done), 1);
    assert_ok(hsa_ops->stream_synchronize(bctx, s1));
    assert_ok(hsa_ops->event_destroy(bctx, ev));
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->stream_destroy(bctx, s1));
    assert_ok(hsa_ops->mem_free(bctx, d));
    hsa_test_assert_no_violations();
    hsa_test_close(bctx);
    free(a);
}

/* A kernel launched behind a failed copy: its barrier-AND packet never runs. */
static void test_failed_copy_then_kernel(void **state)
{
    size_t bytes = 0;
    void *image = hsa_test_read_fixture("GM_TEST_HSACO_V5", &bytes);
    failed_copy_fixture f;
    gm_backend_module *module = NULL;
    gm_backend_kernel *k = NULL;
    float alpha = 1.0f;
    int32_t n = 16;
    void *args[4] = {&alpha, NULL, NULL, &n};
    size_t sizes[4] = {4, 8, 8, 4};
    gm_launch_config cfg = {{1, 1, 1}, {64, 1, 1}, 0};
    char message[1024];

    (void)state;
    if (image == NULL)
        skip();
    failed_copy_start(&f, false);
    hsa_double_register_kernel("axpy", hsa_test_axpy_host, NULL);
    args[1] = &f.d1;
    args[2] = &f.d2;
    assert_ok(hsa_ops->module_load(f.bctx, GM_IMAGE_AMDGPU, image, bytes, &module));
    assert_ok(hsa_ops->module_get_kernel(f.bctx, module, "axpy", &k));
    assert_ok(hsa_ops->launch(f.bctx, k, &cfg, args, sizes, 4, f.s));
    hsa_double_pause(0);
    assert_status(bounded(f.bctx, call_stream_synchronize, f.s, "stream_synchronize", message,
                          sizeof(message)),
                  GM_ERR_CONTEXT_LOST);
    assert_stuck_message(message, "stream_synchronize", "kernel dispatch");
    release_failed_copies();
    for (int i = 0; i < 5000 && hsa_ops->stream_query(f.bctx, f.s) != GM_OK; i++)
        sleep_ms(1);
    assert_ok(hsa_ops->module_unload(f.bctx, module));
    failed_copy_end(&f, false);
    free(image);
}

/* A synchronous copy that fails itself: GM_ERR_DRIVER and the copy named, the context
 * still usable (nothing waits for it). */
static void test_failed_sync_copy(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *src = pattern(12), *back = calloc(N, 4);
    gm_devptr d = 0;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d));
    hsa_double_fail_copies(1, (void *)(uintptr_t)d, -5);
    assert_status(
        copy_async(bctx, NULL, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, src, N * 4),
        GM_ERR_DRIVER);
    assert_message_contains("hsa_amd_memory_async_copy failed on the device (completion "
                            "signal -5)");
    assert_ok(
        copy_async(bctx, NULL, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, src, N * 4));
    assert_ok(
        copy_async(bctx, NULL, GM_COPY_HOST, back, GM_COPY_DEVICE, (void *)(uintptr_t)d, N * 4));
    assert_memory_equal(back, src, N * 4);
    assert_ok(hsa_ops->device_synchronize(bctx));
    assert_ok(hsa_ops->mem_free(bctx, d));
    hsa_test_close(bctx);
    free(src);
    free(back);
}

static gm_status count_run(void *user)
{
    (*(int *)user)++;
    return GM_OK;
}

/*
 * Synchronous host steps behind a copy that failed on the device (its one
 * dependency went negative, so the async handler still runs): the synchronous
 * caller gets the failure and nothing of the step runs, instead of GM_OK with
 * nothing done (the failure went to the legacy stream's error slot); the
 * failed copy's own stream reports it once.
 */
static void test_sync_host_work_after_failed_copy(void **state)
{
    gm_backend_ctx *bctx = hsa_test_open(NULL, 0);
    uint32_t *src = pattern(13), *dst = calloc(N, 4), *zero = calloc(N, 4);
    gm_backend_stream *s = NULL;
    gm_devptr d = 0;
    int runs = 0;

    (void)state;
    assert_ok(hsa_ops->mem_alloc(bctx, N * 4, &d));
    assert_ok(hsa_ops->stream_create(bctx, GM_STREAM_DEFAULT, &s)); /* blocking */
    for (int i = 0; i < 2; i++) {
        /* The copy fails only once the synchronous step waits for it (a failure seen
         * before is no dependency: the step follows it, as later stream work does). */
        call_gate gate = {"hsa_amd_signal_async_handler", 0};
        pthread_t th;

        hsa_double_pause(1);
        hsa_double_fail_copies(1, (void *)(uintptr_t)d, -3);
        assert_ok(
            copy_async(bctx, s, GM_COPY_DEVICE, (void *)(uintptr_t)d, GM_COPY_HOST, src, N * 4));
        gate.count = hsa_double_calls(gate.call) + 1;
        pthread_create(&th, NULL, unpause_after_call, &gate);
        if (i == 0) {
            assert_status(hsa_ops->stream_enqueue_host(bctx, NULL, count_run, &runs, NULL),
                          GM_ERR_DRIVER);
            assert_int_equal(runs, 0);
        } else {
            assert_status(copy_async(bctx, NULL, GM_COPY_HOST, dst, GM_COPY_HOST, src, N * 4),
                          GM_ERR_DRIVER);
            assert_memory_equal(dst, zero, N * 4);
        }
        pthread_join(th, NULL);
        assert_message_contains("an operation it waits for failed on the device (completion "
                                "signal -3)");
        assert_status(hsa_ops->stream_synchronize(bctx, s), GM_ERR_DRIVER); /* the copy's own */
        assert_ok(hsa_ops->stream_synchronize(bctx, s));
    }
    assert_ok(hsa_ops->stream_enqueue_host(bctx, NULL, count_run, &runs, NULL)); /* usable */
    assert_int_equal(runs, 1);
    assert_ok(hsa_ops->device_synchronize(bctx));
    hsa_test_assert_no_violations();
    assert_ok(hsa_ops->stream_destroy(bctx, s));
    assert_ok(hsa_ops->mem_free(bctx, d));
    hsa_test_close(bctx);
    free(src);
    free(dst);
    free(zero);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_legacy_stream),
        cmocka_unit_test(test_sync_copy_waits),
        cmocka_unit_test(test_destroy_waits),
        cmocka_unit_test(test_event_cross_stream),
        cmocka_unit_test(test_event_timing),
        cmocka_unit_test(test_callbacks_and_host_work),
        cmocka_unit_test(test_per_thread_and_wrap),
        cmocka_unit_test(test_per_thread_id_reuse),
        cmocka_unit_test(test_per_thread_stream_ends_with_thread),
        cmocka_unit_test(test_retired_wait_orders_legacy),
        cmocka_unit_test(test_unwrap_after_owner_destroyed),
        cmocka_unit_test(test_queue_wraps),
        cmocka_unit_test(test_synchronize_releases),
        cmocka_unit_test(test_shared_pageable_locks),
        cmocka_unit_test(test_pageable_locks_across_contexts),
        cmocka_unit_test(test_copy_past_registration),
        cmocka_unit_test(test_split_copy_in_callback),
        cmocka_unit_test(test_host_work_after_two_streams),
        cmocka_unit_test(test_host_work_merge_refused),
        cmocka_unit_test(test_merge_refused_keeps_barrier_dependencies), /* may _exit */
        cmocka_unit_test(test_sync_host_work_waits_for_streams),
        cmocka_unit_test(test_wait_for_six_events),
        cmocka_unit_test(test_too_many_dependencies),
        cmocka_unit_test(test_device_synchronize_without_memory),
        cmocka_unit_test(test_device_synchronize_without_memory_failed_context),
        cmocka_unit_test(test_destroy_after_failure_keeps_pending_work),
        cmocka_unit_test(test_failed_copy_stream_synchronize),
        cmocka_unit_test(test_failed_copy_event_synchronize),
        cmocka_unit_test(test_failed_copy_device_synchronize),
        cmocka_unit_test(test_failed_copy_then_sync_copy),
        cmocka_unit_test(test_failed_copy_then_kernel),
        cmocka_unit_test(test_failed_copy_fills_queue),
        cmocka_unit_test(test_wait_event_then_synchronize),
        cmocka_unit_test(test_failed_sync_copy),
        cmocka_unit_test(test_sync_host_work_after_failed_copy),
        cmocka_unit_test(test_refused_handler_does_not_wait_locked), /* last: may _exit */
    };

    return cmocka_run_group_tests(tests, gm_test_use_cmocka_allocator, gm_test_restore_allocator);
}
