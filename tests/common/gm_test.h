/*
 * Shared helpers for the cmocka suites: route gpumem's bookkeeping allocator
 * through cmocka's leak-checking allocator, and assert statuses with their
 * names and the library's message in the failure text.
 */
#ifndef GM_TEST_H
#define GM_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gpumem/gpumem.h"

/* cmocka group setup/teardown: install / remove the leak-checking allocator. */
int gm_test_use_cmocka_allocator(void **state);
int gm_test_restore_allocator(void **state);

/* Fail the test unless `expr` returns `expected`, printing both names and the message. */
#define assert_status(expr, expected) \
    gm_test_check_status((expr), (expected), #expr, __FILE__, __LINE__)
#define assert_ok(expr) assert_status((expr), GM_OK)

void gm_test_check_status(gm_status got, gm_status expected, const char *text, const char *file,
                          int line);

/* Assert the calling thread's last error message contains `needle`. */
void gm_test_assert_message_contains(const char *needle, const char *file, int line);
#define assert_message_contains(needle) \
    gm_test_assert_message_contains((needle), __FILE__, __LINE__)

/* Assert the calling thread's last error message starts with `prefix`. */
void gm_test_assert_message_begins(const char *prefix, const char *file, int line);
#define assert_message_begins(prefix) gm_test_assert_message_begins((prefix), __FILE__, __LINE__)

/* A "<field>: <n> kB" line of /proc/self/status (VmLck, VmSize...): n, or -1. */
long gm_test_status_kb(const char *field);

/* Locked memory of this process in kB (VmLck), or -1. */
long gm_test_vmlck_kb(void);

/* Whether reading the byte at `p` in a forked child kills it (SIGSEGV or SIGBUS). */
bool gm_test_cpu_read_faults(const void *p);

#endif
