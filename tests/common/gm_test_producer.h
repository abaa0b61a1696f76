/*
 * Scenarios shared by the host and HSA stream tests (a header of its own, as
 * gm_test_file.h).
 *
 * gm_test_wrapper_producer: another thread keeps queueing through a wrapper of a
 * created stream, directly and through callbacks of a stream of its own.
 * The created stream's synchronize must wait for what was queued before it,
 * and the owner's destroy (at the flush) for that and for its own callbacks'
 * work, not for the other thread's later work, which kept them waiting for
 * as long as it came. A watchdog stops the producer after 10 s (the check
 * then fails) so that a regression does not hang the suite.
 *
 * gm_test_destroy_waits_for_callbacks: the flush that destroys a wrapped
 * created stream still waits for its queued callbacks, which are given the
 * stream, and for those they queue through it meanwhile (it freed the core's
 * stream under a running one: ASan heap-use-after-free).
 */
#ifndef GM_TEST_PRODUCER_H
#define GM_TEST_PRODUCER_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "gm_test.h"

static _Atomic int producer_stop, producer_late;
static _Atomic long producer_queued, producer_ran;

static void producer_item(gm_stream *stream, gm_status status, void *user)
{
    struct timespec pause = {0, 2 * 1000 * 1000};

    (void)stream;
    (void)status;
    (void)user;
    nanosleep(&pause, NULL);
    atomic_fetch_add(&producer_ran, 1);
}

static gm_stream *producer_feeder;

/* A callback of the producer's own stream: queues an item through the wrapper. */
static void producer_feed(gm_stream *stream, gm_status status, void *user)
{
    (void)stream;
    (void)status;
    if (gm_stream_add_callback(user, producer_item, NULL) == GM_OK)
        atomic_fetch_add(&producer_queued, 1);
}

/*
 * Queues a 2 ms callback through the wrapper every millisecond until told to
 * stop, directly and through a callback of its own stream.
 */
static void *producer_main(void *arg)
{
    struct timespec pause = {0, 1000 * 1000};

    while (!atomic_load(&producer_stop)) {
        if (gm_stream_add_callback(arg, producer_item, NULL) == GM_OK)
            atomic_fetch_add(&producer_queued, 1);
        (void)gm_stream_add_callback(producer_feeder, producer_feed, arg);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Stops the producer after 10 s, noting that the call under test had not returned. */
static void *producer_watchdog(void *arg)
{
    struct timespec pause = {0, 10 * 1000 * 1000};

    for (int i = 0; i < 1000 && !atomic_load((_Atomic int *)arg); i++)
        nanosleep(&pause, NULL);
    if (!atomic_load((_Atomic int *)arg)) {
        atomic_store(&producer_late, 1);
        atomic_store(&producer_stop, 1);
    }
    return NULL;
}

/* Run the scenario on ctx (left alive). */
static void gm_test_wrapper_producer(gm_context *ctx)
{
    gm_stream *owner = NULL, *ext = NULL;
    pthread_t producer, watchdog;
    _Atomic int returned = 0;
    struct timespec pause = {0, 50 * 1000 * 1000};

    atomic_store(&producer_stop, 0);
    atomic_store(&producer_late, 0);
    atomic_store(&producer_queued, 0);
    atomic_store(&producer_ran, 0);
    assert_ok(gm_stream_create(ctx, 0, &owner));
    assert_ok(gm_stream_create(ctx, 0, &producer_feeder));
    assert_ok(gm_stream_wrap_external(ctx, gm_stream_native(owner), &ext));
    assert_int_equal(pthread_create(&producer, NULL, producer_main, ext), 0);
    nanosleep(&pause, NULL);
    assert_int_equal(pthread_create(&watchdog, NULL, producer_watchdog, (void *)&returned), 0);
    assert_ok(gm_stream_synchronize(owner));
    gm_stream_destroy(&owner);
    assert_ok(gm_deallocations_flush(ctx));
    atomic_store(&returned, 1);
    assert_int_equal(pthread_join(watchdog, NULL), 0);
    atomic_store(&producer_stop, 1);
    assert_int_equal(pthread_join(producer, NULL), 0);
    assert_int_equal(atomic_load(&producer_late), 0); /* returned while the producer ran */
    assert_ok(gm_stream_synchronize(producer_feeder));
    assert_ok(gm_stream_synchronize(ext)); /* the stream stayed for the wrapper */
    assert_int_equal(atomic_load(&producer_ran), atomic_load(&producer_queued));
    gm_stream_destroy(&ext);
    gm_stream_destroy(&producer_feeder);
}

/* Sleeps, then reads the stream it was given. */
static void gm_test_reader(gm_stream *stream, gm_status status, void *user)
{
    struct timespec pause = {0, 50 * 1000 * 1000};

    (void)status;
    nanosleep(&pause, NULL);
    *(void **)user = gm_stream_native(stream);
}

/* Sleeps, reads the stream it was given, then queues gm_test_reader through it (user[1]). */
static void gm_test_late_reader(gm_stream *stream, gm_status status, void *user)
{
    struct timespec pause = {0, 100 * 1000 * 1000};
    void **seen = user;

    (void)status;
    nanosleep(&pause, NULL);
    seen[0] = gm_stream_native(stream);
    if (gm_stream_add_callback(stream, gm_test_reader, &seen[1]) != GM_OK)
        seen[1] = NULL;
}

/* Run the destroy scenario on ctx (left alive). */
static void gm_test_destroy_waits_for_callbacks(gm_context *ctx)
{
    gm_stream *owner = NULL, *ext = NULL;
    void *native = NULL, *seen[2] = {NULL, NULL};

    assert_ok(gm_stream_create(ctx, 0, &owner));
    native = gm_stream_native(owner);
    assert_ok(gm_stream_wrap_external(ctx, native, &ext));
    assert_ok(gm_stream_add_callback(owner, gm_test_late_reader, (void *)seen));
    gm_stream_destroy(&owner);
    assert_ok(gm_deallocations_flush(ctx));
    assert_ptr_equal(seen[0], native); /* the callback had finished */
    assert_ptr_equal(seen[1], native); /* and the one it queued too */
    gm_stream_destroy(&ext);
}

#endif
