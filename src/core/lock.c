/*
 * The contended paths of gm__lock (lock.h): spin a little, since the
 * critical sections it guards are a few dozen instructions, then sleep.
 * A sleeper marks the lock 2 before sleeping, so the holder's exchange in
 * gm__lock_give sees that and wakes one; a woken thread takes the lock as 2
 * again (others may still sleep), which costs at most one spare wake.
 */
#include "lock.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__linux__) && defined(SYS_futex)
#define GM__LOCK_FUTEX 1
#else
#include <sched.h> /* no futex (or only futex_time64): sleeping is yielding */
#endif

/* Polls of a held lock before sleeping. */
#define SPINS 100

/* A hint to the core that this is a spin-wait loop. */
static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleep while the lock's state is 2 (returns at once if it changed). */
static void sleep_on(gm__lock *lock)
{
#if defined(GM__LOCK_FUTEX)
    (void)syscall(SYS_futex, &lock->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
#else
    (void)lock;
    sched_yield();
#endif
}

void gm__lock_wait(gm__lock *lock)
{
    for (int i = 0; i < SPINS; i++) {
        int expected = 0;

        relax();
        if (atomic_load_explicit(&lock->state, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&lock->state, &expected, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
    }
    while (atomic_exchange_explicit(&lock->state, 2, memory_order_acquire) != 0)
        sleep_on(lock);
}

void gm__lock_wake(gm__lock *lock)
{
#if defined(GM__LOCK_FUTEX)
    (void)syscall(SYS_futex, &lock->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
    (void)lock;
#endif
}
