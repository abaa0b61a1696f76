#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gm_test.h"

static void *test_malloc_fn(size_t size)
{
    return test_malloc(size);
}

static void *test_calloc_fn(size_t count, size_t size)
{
    return test_calloc(count, size);
}

static void *test_realloc_fn(void *ptr, size_t size)
{
    return test_realloc(ptr, size);
}

static void test_free_fn(void *ptr)
{
    test_free(ptr);
}

int gm_test_use_cmocka_allocator(void **state)
{
    static const gm_host_allocator allocator = {test_malloc_fn, test_calloc_fn, test_realloc_fn,
                                                test_free_fn};
    (void)state;
    return gm_set_host_allocator(&allocator) == GM_OK ? 0 : -1;
}

int gm_test_restore_allocator(void **state)
{
    (void)state;
    return gm_set_host_allocator(NULL) == GM_OK ? 0 : -1;
}

void gm_test_check_status(gm_status got, gm_status expected, const char *text, const char *file,
                          int line)
{
    if (got == expected)
        return;
    print_error("%s:%d: %s returned %s, expected %s; last message: \"%s\"\n", file, line, text,
                gm_status_name(got), gm_status_name(expected), gm_last_error_message());
    _fail(file, line);
}

void gm_test_assert_message_contains(const char *needle, const char *file, int line)
{
    const char *message = gm_last_error_message();

    if (strstr(message, needle) != NULL)
        return;
    print_error("%s:%d: last error message \"%s\" does not contain \"%s\"\n", file, line, message,
                needle);
    _fail(file, line);
}

void gm_test_assert_message_begins(const char *prefix, const char *file, int line)
{
    const char *message = gm_last_error_message();

    if (strncmp(message, prefix, strlen(prefix)) == 0)
        return;
    print_error("%s:%d: last error message \"%s\" does not begin with \"%s\"\n", file, line,
                message, prefix);
    _fail(file, line);
}

long gm_test_status_kb(const char *field)
{
    char line[256];
    size_t n = strlen(field);
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, n) == 0 && line[n] == ':' &&
            sscanf(line + n + 1, " %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

long gm_test_vmlck_kb(void)
{
    return gm_test_status_kb("VmLck");
}

bool gm_test_cpu_read_faults(const void *p)
{
    pid_t pid = fork();
    int wstatus = 0;

    if (pid == 0) {
        volatile const char *v = p;
        char c = 0;

        signal(SIGSEGV, SIG_DFL); /* not cmocka's handler (nor ASan's) */
        signal(SIGBUS, SIG_DFL);
        c = *v;
        (void)c;
        _exit(0);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    return WIFSIGNALED(wstatus) && (WTERMSIG(wstatus) == SIGSEGV || WTERMSIG(wstatus) == SIGBUS);
}
