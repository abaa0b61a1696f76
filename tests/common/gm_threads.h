/*
 * The number of threads of this process, for tests that check that threads
 * are gone (header only: tests that do not link the test helpers use it too).
 */
#ifndef GM_TEST_THREADS_H
#define GM_TEST_THREADS_H

#include <dirent.h>

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

#endif /* GM_TEST_THREADS_H */
