/* gm__lock (src/core/lock.h): exclusion, try, and waking a thread that went to sleep. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "lock.h"
#include "gm_test.h"

#define THREADS    4
#define ROUNDS     100000
#define COUNTER_AT 7

typedef struct shared {
    gm__lock lock;
    int64_t counter[16]; /* plain memory: only the lock orders it */
    _Atomic int started;
} shared;

/* Read-modify-write plain memory with the lock held, widened so lost updates would show. */
static void *bump(void *arg)
{
    shared *s = arg;

    atomic_fetch_add(&s->started, 1);
    for (int i = 0; i < ROUNDS; i++) {
        gm__lock_take(&s->lock);
        int64_t v = s->counter[COUNTER_AT];

        for (int k = 0; k < 16; k++)
            s->counter[k] += k == COUNTER_AT ? 0 : 1;
        s->counter[COUNTER_AT] = v + 1;
        gm__lock_give(&s->lock);
    }
    return NULL;
}

/* Every increment under the lock survives when threads contend for it. */
static void test_lock_excludes(void **state)
{
    static shared s; /* zeroed: a free lock (GM__LOCK_INIT) */
    pthread_t threads[THREADS];

    (void)state;
    gm__lock_init(&s.lock);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, bump, &s), 0);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    assert_int_equal(s.counter[COUNTER_AT], (int64_t)THREADS * ROUNDS);
    assert_int_equal(s.counter[0], (int64_t)THREADS * ROUNDS);
    assert_int_equal(atomic_load(&s.lock.state), 0);
}

/* try takes a free lock only. */
static void test_lock_try(void **state)
{
    gm__lock lock = GM__LOCK_INIT;

    (void)state;
    assert_true(gm__lock_try(&lock));
    assert_false(gm__lock_try(&lock));
    gm__lock_give(&lock);
    assert_true(gm__lock_try(&lock));
    gm__lock_give(&lock);
    assert_int_equal(atomic_load(&lock.state), 0);
}

/* Take the lock once and note it. */
static void *take_once(void *arg)
{
    shared *s = arg;

    atomic_fetch_add(&s->started, 1);
    gm__lock_take(&s->lock);
    s->counter[0]++;
    gm__lock_give(&s->lock);
    return NULL;
}

/*
 * Threads that find the lock held for long stop spinning and sleep (the
 * state says so: 2), and giving the lock back wakes them all in turn.
 */
static void test_lock_wakes_sleepers(void **state)
{
    static shared s;
    pthread_t threads[THREADS];
    struct timespec pause = {0, 1000000};
    int waited_ms = 0;

    (void)state;
    gm__lock_init(&s.lock);
    gm__lock_take(&s.lock);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, take_once, &s), 0);
    while ((atomic_load(&s.started) < THREADS || atomic_load(&s.lock.state) != 2) &&
           waited_ms < 10000) {
        nanosleep(&pause, NULL);
        waited_ms++;
    }
    assert_int_equal(atomic_load(&s.lock.state), 2); /* a waiter announced it sleeps */
    nanosleep(&pause, NULL);
    assert_int_equal(s.counter[0], 0); /* nobody got in while it was held */
    gm__lock_give(&s.lock);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    assert_int_equal(s.counter[0], THREADS);
    assert_int_equal(atomic_load(&s.lock.state), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_excludes),
        cmocka_unit_test(test_lock_try),
        cmocka_unit_test(test_lock_wakes_sleepers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
