/*
 * The number of threads of this process, for tests that check that threads
 * are gone (header only: tests that do not link the test helpers use it too).
 */
#ifndef GM_TEST_THREADS_H
#define GM_TEST_THREADS_H

#include <dirent.h>
#include <time.h>

/* Threads of this process (/proc/self/task entries), or -1. */
static inline int gm_test_thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e = NULL;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/*
 * The thread count to come back to: the lowest of several looks over about
 * 50 ms, since a thread that pthread_join has just returned for may still be
 * listed in /proc a moment longer (the kernel wakes the joiner before it
 * unlists the task), which made a base taken at once one too high now and
 * then, and a later "back to base" pass with a thread still running.
 */
static inline int gm_test_thread_count_settled(void)
{
    struct timespec pause = {0, 5 * 1000 * 1000};
    int n = gm_test_thread_count();

    for (int i = 0; i < 10; i++) {
        int m = 0;

        nanosleep(&pause, NULL);
        m = gm_test_thread_count();
        n = m >= 0 && m < n ? m : n;
    }
    return n;
}

#endif /* GM_TEST_THREADS_H */
