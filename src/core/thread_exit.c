/*
 * Thread keys and exit notices (core.h). The notice is a pthread key whose
 * value, set on a thread's first gm__thread_key call, is that thread's key:
 * its destructor runs when the thread exits and tells every watch. The main
 * thread gets no notice (exit() ends the process), which is as it should be.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core.h"

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static gm__thread_watch watches = {&watches, &watches, NULL, NULL, 0};

static pthread_once_t notice_once = PTHREAD_ONCE_INIT;
static pthread_key_t notice;
static bool notice_made; /* written once, under notice_once */

static _Atomic uint64_t next_key = 1;
static _Thread_local uint64_t thread_key = 0;

/*
 * The notice's destructor: the exiting thread's key is `value`. The key is
 * dropped after: a later key destructor of the application that uses a
 * per-thread stream draws a new key and arms the notice again (the C
 * library runs destructors again for values set meanwhile).
 */
static void thread_exiting(void *value)
{
    uint64_t key = (uint64_t)(uintptr_t)value;

    pthread_mutex_lock(&watch_lock);
    for (gm__thread_watch *w = watches.next; w != &watches; w = w->next)
        w->on_exit(w->arg, key);
    pthread_mutex_unlock(&watch_lock);
    thread_key = 0;
}

static void make_notice(void)
{
    notice_made = pthread_key_create(&notice, thread_exiting) == 0;
}

/* The library unloaded (dlclose) while armed threads live: their notice must not call in. */
static void __attribute__((destructor)) drop_notice(void)
{
    if (notice_made)
        (void)pthread_key_delete(notice);
}

/* Whether a key survives the trip through the notice's void * (keys past 2^32 on 32-bit
 * systems would wrap: those threads are not armed). */
static bool fits_value(uint64_t key)
{
#if UINTPTR_MAX < UINT64_MAX
    return key <= UINTPTR_MAX;
#else
    (void)key;
    return true;
#endif
}

uint64_t gm__thread_key(void)
{
    if (thread_key == 0) {
        thread_key = atomic_fetch_add_explicit(&next_key, 1, memory_order_relaxed);
        (void)pthread_once(&notice_once, make_notice);
        if (notice_made && fits_value(thread_key))
            (void)pthread_setspecific(notice, (void *)(uintptr_t)thread_key);
    }
    return thread_key;
}

/*
 * fork: the child starts with no watch. Its contexts from the parent have no
 * threads there (and their locks may have been held at the fork by threads
 * that are not there), so its threads' exits must not call into them. The
 * list is not walked (another thread may have been changing it at the
 * fork): it is emptied, and the generation moves on, so that stopping a
 * watch of an earlier generation leaves the list alone. No prepare handler
 * takes the lock: a fork inside a log hook, which may run under a context's
 * lock that an exiting thread is waiting for with the watch lock held,
 * would wait for ever.
 */
static uint64_t watch_generation; /* changed only in a fork child, before any other thread */

static void fork_child(void)
{
    watches.prev = watches.next = &watches;
    watch_generation++;
    pthread_mutex_init(&watch_lock, NULL);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void add_fork_handler(void)
{
    (void)pthread_atfork(NULL, NULL, fork_child);
}

void gm__thread_watch_start(gm__thread_watch *watch, void (*on_exit)(void *arg, uint64_t key),
                            void *arg)
{
    (void)pthread_once(&fork_once, add_fork_handler);
    watch->on_exit = on_exit;
    watch->arg = arg;
    pthread_mutex_lock(&watch_lock);
    watch->generation = watch_generation;
    watch->prev = watches.prev;
    watch->next = &watches;
    watches.prev->next = watch;
    watches.prev = watch;
    pthread_mutex_unlock(&watch_lock);
}

void gm__thread_watch_stop(gm__thread_watch *watch)
{
    pthread_mutex_lock(&watch_lock);
    if (watch->next != NULL && watch->generation == watch_generation) {
        watch->prev->next = watch->next;
        watch->next->prev = watch->prev;
        watch->prev = watch->next = NULL;
    }
    pthread_mutex_unlock(&watch_lock);
}
