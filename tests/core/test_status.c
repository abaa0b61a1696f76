/* The status list, the per-thread error detail, the log hook, the version. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "gm_test.h"

/* Every status has a distinct name and string; OK is 0 and errors are negative. */
static void test_status_names_and_strings(void **state)
{
    static const gm_status all[] = {
#define GM__ALL(name, value, text) GM_##name,
        GM_STATUS_LIST(GM__ALL)
#undef GM__ALL
    };
    size_t n = sizeof(all) / sizeof(all[0]);

    (void)state;
    assert_int_equal(GM_OK, 0);
    assert_string_equal(gm_status_name(GM_OK), "OK");
    assert_string_equal(gm_status_name(GM_ERR_NEEDS_COPY), "ERR_NEEDS_COPY");
    assert_string_equal(gm_status_string(GM_ERR_OUT_OF_DEVICE_MEMORY), "out of device memory");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            assert_true(all[i] < 0);
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(all[i], all[j]);
            assert_string_not_equal(gm_status_name(all[i]), gm_status_name(all[j]));
            assert_string_not_equal(gm_status_string(all[i]), gm_status_string(all[j]));
        }
    }
    assert_string_equal(gm_status_name((gm_status)-999), "UNKNOWN");
    assert_string_equal(gm_status_string((gm_status)7), "unknown status");
}

static void test_error_message_is_recorded(void **state)
{
    (void)state;
    gm_clear_error();
    assert_int_equal(gm_last_error(), GM_OK);
    assert_string_equal(gm_last_error_message(), "");
    assert_int_equal(gm__error(GM_ERR_OUT_OF_RANGE, "gm_x: index %d", 42), GM_ERR_OUT_OF_RANGE);
    assert_int_equal(gm_last_error(), GM_ERR_OUT_OF_RANGE);
    assert_string_equal(gm_last_error_message(), "gm_x: index 42");
    gm_clear_error();
    assert_string_equal(gm_last_error_message(), "");
}

static void *raise_error_in_thread(void *arg)
{
    (void)arg;
    gm__error(GM_ERR_DTYPE, "thread-local message");
    return NULL;
}

/* Errors on another thread do not touch this thread's detail. */
static void test_error_message_is_thread_local(void **state)
{
    pthread_t thread;

    (void)state;
    gm__error(GM_ERR_INVALID_ARG, "main thread message");
    assert_int_equal(pthread_create(&thread, NULL, raise_error_in_thread, NULL), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_string_equal(gm_last_error_message(), "main thread message");
    assert_int_equal(gm_last_error(), GM_ERR_INVALID_ARG);
}

static void test_long_message_is_truncated(void **state)
{
    char big[4096];

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    gm__error(GM_ERR_INVALID_ARG, "%s", big);
    assert_true(strlen(gm_last_error_message()) > 100);
    assert_true(strlen(gm_last_error_message()) < sizeof(big) - 1);
}

typedef struct captured_log {
    int count;
    gm_log_level level;
    char text[256];
} captured_log;

static void capture_hook(gm_log_level level, const char *message, void *user)
{
    captured_log *log = user;

    log->count++;
    log->level = level;
    strncpy(log->text, message, sizeof(log->text) - 1);
}

/* The hook receives messages at or above the threshold only; no hook, no output. */
/* gm__error may be given the current message as an argument (it used to overlap). */
static void test_error_wrapping_its_own_message(void **state)
{
    (void)state;
    gm__error(GM_ERR_NOT_FOUND, "inner detail %d", 7);
    gm__error(GM_ERR_INVALID_ARG, "outer: %s", gm_last_error_message());
    assert_string_equal(gm_last_error_message(), "outer: inner detail 7");
    gm_clear_error();
}

/* gm__error_mark / gm__error_back_to: the error as it was at the mark comes back. */
static void test_error_back_to_mark(void **state)
{
    gm__saved_error saved;
    uint64_t mark = 0;

    (void)state;
    gm__error(GM_ERR_STATE, "sentinel");
    mark = gm__error_mark();
    gm__error_back_to(mark); /* nothing since: unchanged */
    assert_int_equal(gm_last_error(), GM_ERR_STATE);
    gm__error(GM_ERR_OUT_OF_DEVICE_MEMORY, "first attempt");
    gm__error(GM_ERR_DRIVER, "and another");
    gm__error_back_to(mark);
    assert_int_equal(gm_last_error(), GM_ERR_STATE);
    assert_string_equal(gm_last_error_message(), "sentinel");
    /* errors undone by a save/restore inside count no more (9 recorded, 6 left) */
    mark = gm__error_mark();
    gm__error(GM_ERR_OUT_OF_DEVICE_MEMORY, "first attempt");
    gm__error_save(&saved);
    for (int i = 0; i < 3; i++)
        gm__error(GM_ERR_DRIVER, "undone %d", i);
    gm__error_restore(&saved);
    assert_string_equal(gm_last_error_message(), "first attempt");
    for (int i = 0; i < 5; i++)
        gm__error(GM_ERR_DRIVER, "after %d", i);
    gm__error_back_to(mark);
    assert_string_equal(gm_last_error_message(), "sentinel");
    /* more errors since than the history holds: cleared rather than stale */
    mark = gm__error_mark();
    for (int i = 0; i < 9; i++)
        gm__error(GM_ERR_DRIVER, "kept %d", i);
    gm__error_back_to(mark);
    assert_int_equal(gm_last_error(), GM_OK);
    assert_string_equal(gm_last_error_message(), "");
}

static void test_log_hook_and_threshold(void **state)
{
    captured_log log = {0, GM_LOG_OFF, ""};

    (void)state;
    gm_set_log_hook(capture_hook, &log);
    gm_set_log_level(GM_LOG_WARN);
    gm__log(GM_LOG_INFO, "dropped %d", 1);
    assert_int_equal(log.count, 0);
    gm__log(GM_LOG_WARN, "kept %d", 2);
    assert_int_equal(log.count, 1);
    assert_int_equal(log.level, GM_LOG_WARN);
    assert_string_equal(log.text, "kept 2");
    gm_set_log_level(GM_LOG_DEBUG);
    gm__error(GM_ERR_DTYPE, "gm_y: bad");
    assert_int_equal(log.count, 2);
    assert_non_null(strstr(log.text, "gm_y: bad"));
    assert_non_null(strstr(log.text, "ERR_DTYPE"));
    gm_set_log_level(GM_LOG_OFF);
    gm__log(GM_LOG_ERROR, "dropped when off");
    assert_int_equal(log.count, 2);
    gm_set_log_hook(NULL, NULL);
    gm_set_log_level(GM_LOG_TRACE);
    gm__log(GM_LOG_ERROR, "no hook, nowhere to go");
    assert_int_equal(log.count, 2);
    assert_int_equal(gm_get_log_level(), GM_LOG_TRACE);
    gm_set_log_level((gm_log_level)99);
    assert_int_equal(gm_get_log_level(), GM_LOG_TRACE);
    gm_set_log_level(GM_LOG_WARN);
}

/* A hook that breaks the rule and calls gpumem, which fails and would log again: the nested
 * message is dropped, no recursion. */
static void calling_hook(gm_log_level level, const char *message, void *user)
{
    gm_dtype d;

    (void)level;
    (void)message;
    ++*(int *)user;
    (void)gm_dtype_from_name("still not a dtype", &d); /* an error, logged at debug */
}

static void test_log_hook_calling_gpumem(void **state)
{
    gm_dtype d;
    int calls = 0;

    (void)state;
    gm_set_log_level(GM_LOG_DEBUG);
    gm_set_log_hook(calling_hook, &calls);
    assert_status(gm_dtype_from_name("not a dtype", &d), GM_ERR_DTYPE);
    assert_int_equal(calls, 1); /* the hook's own error was not logged to it */
    gm_set_log_hook(NULL, NULL);
    gm_set_log_level(GM_LOG_WARN);
}

/* Threads logging through a slow hook while the main thread replaces it. */
typedef struct hook_watch {
    atomic_int running; /* calls of the hook in progress */
    atomic_int removed; /* set once gm_set_log_hook(NULL) returned */
    atomic_int late;    /* calls running or starting after that */
    atomic_int stop;
} hook_watch;

static void slow_hook(gm_log_level level, const char *message, void *user)
{
    hook_watch *w = user;
    const struct timespec pause = {0, 200 * 1000};

    (void)level;
    (void)message;
    atomic_fetch_add(&w->running, 1);
    if (atomic_load(&w->removed))
        atomic_fetch_add(&w->late, 1);
    nanosleep(&pause, NULL);
    atomic_fetch_sub(&w->running, 1);
}

static void *logging_thread(void *arg)
{
    hook_watch *w = arg;

    while (!atomic_load(&w->stop))
        gm__log(GM_LOG_WARN, "busy");
    return NULL;
}

static void test_set_log_hook_waits_for_running_calls(void **state)
{
    hook_watch *w = calloc(1, sizeof(*w));
    pthread_t threads[4];

    (void)state;
    assert_non_null(w);
    gm_set_log_level(GM_LOG_WARN);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, logging_thread, w), 0);
    for (int round = 0; round < 50; round++) {
        atomic_store(&w->removed, 0);
        gm_set_log_hook(slow_hook, w);
        nanosleep(&(struct timespec){0, 500 * 1000}, NULL);
        gm_set_log_hook(NULL, NULL);
        atomic_store(&w->removed, 1);
        assert_int_equal(atomic_load(&w->running), 0); /* none still inside the old hook */
    }
    atomic_store(&w->stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    assert_int_equal(atomic_load(&w->late), 0);
    free(w);
}

/*
 * Three hooks in turn: h0 (its first call holds until released), h1
 * (counts), h2 (its first call holds until released).
 */
static atomic_int h0_calls, h0_release, h1_calls, h2_calls, h2_release, h1_installed;

static void hold_first_call(atomic_int *calls, atomic_int *release)
{
    if (atomic_fetch_add(calls, 1) == 0) {
        while (atomic_load(release) == 0)
            nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
}

static void hook_h0(gm_log_level level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
    hold_first_call(&h0_calls, &h0_release);
}

static void hook_h1(gm_log_level level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
    atomic_fetch_add(&h1_calls, 1);
}

static void hook_h2(gm_log_level level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
    hold_first_call(&h2_calls, &h2_release);
}

static void *log_one(void *arg)
{
    (void)arg;
    gm__log(GM_LOG_WARN, "one");
    return NULL;
}

static void *install_h1(void *arg)
{
    (void)arg;
    gm_set_log_hook(hook_h1, NULL); /* waits for h0's call */
    atomic_store(&h1_installed, 1);
    return NULL;
}

/*
 * gm_set_log_hook waits for the calls of the hook it replaced, not for those
 * of a hook installed after it (the in-flight calls were counted by the
 * parity of the hook's generation: h2's call, two setters on, counted as
 * h0's, and h1's setter waited for it too).
 */
static void test_set_log_hook_waits_only_for_the_replaced_hook(void **state)
{
    pthread_t a, b, c;

    (void)state;
    gm_set_log_level(GM_LOG_WARN);
    gm_set_log_hook(hook_h0, NULL);
    assert_int_equal(pthread_create(&a, NULL, log_one, NULL), 0);
    while (atomic_load(&h0_calls) == 0) /* a is inside h0 */
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    assert_int_equal(pthread_create(&b, NULL, install_h1, NULL), 0);
    while (atomic_load(&h1_calls) == 0) /* h1 is installed (b now waits for a's call) */
        gm__log(GM_LOG_WARN, "probe");
    gm_set_log_hook(hook_h2, NULL); /* no call of h1 runs: at once */
    assert_int_equal(pthread_create(&c, NULL, log_one, NULL), 0);
    while (atomic_load(&h2_calls) == 0) /* c is inside h2 */
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    atomic_store(&h0_release, 1);
    pthread_join(a, NULL);
    for (int i = 0; i < 2000 && atomic_load(&h1_installed) == 0; i++)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    assert_int_equal(atomic_load(&h1_installed), 1); /* while h2's call still runs */
    atomic_store(&h2_release, 1);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    gm_set_log_hook(NULL, NULL);
}

/* GM_LOG_LEVEL accepts names (any case) and digits; junk falls back to warn. */
static void test_log_level_parsing(void **state)
{
    (void)state;
    assert_int_equal(gm__parse_log_level("debug"), GM_LOG_DEBUG);
    assert_int_equal(gm__parse_log_level("TRACE"), GM_LOG_TRACE);
    assert_int_equal(gm__parse_log_level("off"), GM_LOG_OFF);
    assert_int_equal(gm__parse_log_level("1"), GM_LOG_ERROR);
    assert_int_equal(gm__parse_log_level("5"), GM_LOG_TRACE);
    assert_int_equal(gm__parse_log_level("9"), GM_LOG_WARN);
    assert_int_equal(gm__parse_log_level("loud"), GM_LOG_WARN);
    assert_int_equal(gm__parse_log_level(""), GM_LOG_WARN);
    assert_int_equal(gm__parse_log_level(NULL), GM_LOG_WARN);
}

/* The library's run-time version matches the header it was built from. */
static void test_version_matches_header(void **state)
{
    char expected[32];

    (void)state;
    assert_int_equal(gm_version(), GM_VERSION);
    snprintf(expected, sizeof(expected), "%d.%d.%d", GM_VERSION_MAJOR, GM_VERSION_MINOR,
             GM_VERSION_PATCH);
    assert_string_equal(gm_version_string(), expected);
    assert_int_equal(GM_VERSION_ENCODE(1, 2, 3), 10203);
}

static void test_allocator_rejects_partial_table(void **state)
{
    gm_host_allocator partial = {malloc, calloc, NULL, free};

    (void)state;
    assert_status(gm_set_host_allocator(&partial), GM_ERR_INVALID_ARG);
    assert_message_contains("gm_set_host_allocator");
    assert_ok(gm_set_host_allocator(NULL));
}

/* The messages a hook received, in order. */
typedef struct log_lines {
    int count;
    char text[4][256];
} log_lines;

static void collect_hook(gm_log_level level, const char *message, void *user)
{
    log_lines *lines = user;

    (void)level;
    if (lines->count < 4)
        snprintf(lines->text[lines->count], sizeof(lines->text[0]), "%s", message);
    lines->count++;
}

/*
 * main sets GM_LOG_LEVEL to something that is no level before anything is
 * logged: the threshold is warn, and the first hook to receive a message
 * hears that first, once.
 */
static void test_bad_log_level_is_said(void **state)
{
    log_lines lines;

    (void)state;
    memset(&lines, 0, sizeof(lines));
    assert_int_equal(gm_get_log_level(), GM_LOG_WARN);
    gm_set_log_hook(collect_hook, &lines);
    gm__log(GM_LOG_WARN, "first");
    gm__log(GM_LOG_WARN, "second");
    gm_set_log_hook(NULL, NULL);
    assert_int_equal(lines.count, 3);
    assert_string_equal(lines.text[0], "GM_LOG_LEVEL=\"verbose\" is not a level (off, error, "
                                       "warn, info, debug, trace or 0-5); using warn");
    assert_string_equal(lines.text[1], "first");
    assert_string_equal(lines.text[2], "second");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_log_level_is_said), /* first: before anything is logged */
        cmocka_unit_test(test_status_names_and_strings),
        cmocka_unit_test(test_error_message_is_recorded),
        cmocka_unit_test(test_error_message_is_thread_local),
        cmocka_unit_test(test_long_message_is_truncated),
        cmocka_unit_test(test_error_wrapping_its_own_message),
        cmocka_unit_test(test_error_back_to_mark),
        cmocka_unit_test(test_log_hook_and_threshold),
        cmocka_unit_test(test_log_hook_calling_gpumem),
        cmocka_unit_test(test_set_log_hook_waits_for_running_calls),
        cmocka_unit_test(test_set_log_hook_waits_only_for_the_replaced_hook),
        cmocka_unit_test(test_log_level_parsing),
        cmocka_unit_test(test_version_matches_header),
        cmocka_unit_test(test_allocator_rejects_partial_table),
    };
    setenv("GM_LOG_LEVEL", "verbose", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
