/*
 * The status list's strings, the per-thread error detail, the log hook and
 * the bookkeeping allocator.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>

#include "core.h"

#define GM__LOG_MESSAGE_MAX 1024
#define GM__LOG_LEVEL_UNSET (-1)

static _Thread_local gm_status tls_last_status = GM_OK;
static _Thread_local char tls_last_message[GM__ERROR_MESSAGE_MAX];

/*
 * What the thread's last few gm__error calls overwrote, for gm__error_back_to:
 * entry `n % GM__ERROR_HISTORY` holds the state before the thread's gm__error
 * call number n (counted in tls_error_calls).
 */
#define GM__ERROR_HISTORY 8
static _Thread_local uint64_t tls_error_calls;
static _Thread_local struct {
    uint64_t call;
    gm_status status;
    char message[GM__ERROR_MESSAGE_MAX];
} tls_error_history[GM__ERROR_HISTORY];

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static gm_log_fn log_hook = NULL;
static void *log_user = NULL;
/*
 * Calls of the hook still running, each listed (on its own stack) with the
 * generation of its hook (log_generation counts gm_set_log_hook calls): the
 * setter waits until no call of the hook it replaced is listed (under
 * log_lock; log_drained is broadcast as calls of a replaced hook end), so
 * that the caller may free the old hook's user data. (Counted by the parity
 * of the generation, the calls of the hook installed two setters later
 * shared the replaced hook's count: under steady logging a setter waited for
 * them too, as long as the logging went on.)
 */
typedef struct log_call {
    uint64_t generation;
    struct log_call *prev;
    struct log_call *next;
} log_call;
static uint64_t log_generation = 0;
static log_call log_calls = {0, &log_calls, &log_calls};
static pthread_cond_t log_drained = PTHREAD_COND_INITIALIZER;
/* Set while this thread runs the hook: what gpumem would log meanwhile is dropped. */
static _Thread_local bool tls_in_hook = false;
static _Atomic int log_level = GM__LOG_LEVEL_UNSET;

static gm_host_allocator host_allocator = {malloc, calloc, realloc, free};

const char *gm_status_string(gm_status status)
{
    switch (status) {
#define GM__STATUS_STRING(name, value, text) \
    case GM_##name:                          \
        return text;
        GM_STATUS_LIST(GM__STATUS_STRING)
#undef GM__STATUS_STRING
    }
    return "unknown status";
}

const char *gm_status_name(gm_status status)
{
    switch (status) {
#define GM__STATUS_NAME(name, value, text) \
    case GM_##name:                        \
        return #name;
        GM_STATUS_LIST(GM__STATUS_NAME)
#undef GM__STATUS_NAME
    }
    return "UNKNOWN";
}

const char *gm_last_error_message(void)
{
    return tls_last_message;
}

gm_status gm_last_error(void)
{
    return tls_last_status;
}

void gm_clear_error(void)
{
    tls_last_status = GM_OK;
    tls_last_message[0] = '\0';
}

/* Copy a message between the thread's buffers (all GM__ERROR_MESSAGE_MAX bytes long). */
static void message_copy(char *dst, const char *src)
{
    size_t n = strnlen(src, GM__ERROR_MESSAGE_MAX - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

gm_status gm__error(gm_status status, const char *fmt, ...)
{
    va_list ap;
    char text[GM__ERROR_MESSAGE_MAX]; /* the arguments may point at the current message */
    unsigned slot = (unsigned)(tls_error_calls % GM__ERROR_HISTORY);

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    tls_error_history[slot].call = tls_error_calls++;
    tls_error_history[slot].status = tls_last_status;
    message_copy(tls_error_history[slot].message, tls_last_message);
    message_copy(tls_last_message, text);
    tls_last_status = status;
    gm__log(GM_LOG_DEBUG, "%s (%s)", tls_last_message, gm_status_name(status));
    return status;
}

void gm__error_save(gm__saved_error *saved)
{
    saved->status = tls_last_status;
    saved->calls = tls_error_calls;
    message_copy(saved->message, tls_last_message);
}

void gm__error_restore(const gm__saved_error *saved)
{
    tls_last_status = saved->status;
    message_copy(tls_last_message, saved->message);
    /* The errors undone here no longer count: a mark taken before the save keeps its
     * entry of the history for as long as if they had never been recorded. */
    if (saved->calls <= tls_error_calls)
        tls_error_calls = saved->calls;
}

uint64_t gm__error_mark(void)
{
    return tls_error_calls;
}

void gm__error_back_to(uint64_t mark)
{
    unsigned slot = (unsigned)(mark % GM__ERROR_HISTORY);

    if (tls_error_calls <= mark)
        return; /* nothing recorded since (or undone by a restore) */
    if (tls_error_calls - mark <= GM__ERROR_HISTORY && tls_error_history[slot].call == mark) {
        tls_last_status = tls_error_history[slot].status;
        message_copy(tls_last_message, tls_error_history[slot].message);
    } else { /* more errors since than the history keeps: no error is better than a stale one */
        gm_clear_error();
    }
}

gm_status gm__error_within(const char *fn, gm_status status)
{
    char detail[GM__ERROR_MESSAGE_MAX];

    if (status == GM_OK)
        return status;
    snprintf(detail, sizeof(detail), "%s", tls_last_message);
    return gm__error(status, "%s: %s", fn, detail);
}

gm_status gm__error_named(const char *fn, gm_status status)
{
    size_t n = strlen(fn);

    if (status == GM_OK || (strncmp(tls_last_message, fn, n) == 0 && tls_last_message[n] == ':'))
        return status;
    return gm__error_within(fn, status);
}

/* Parse GM_LOG_LEVEL: a level name or a digit 0-5; anything else is "warn". */
int gm__parse_log_level(const char *text)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug", "trace"};
    int level = GM_LOG_WARN;

    if (text == NULL || text[0] == '\0')
        return level;
    if (text[0] >= '0' && text[0] <= '5' && text[1] == '\0')
        return text[0] - '0';
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
        if (strcasecmp(text, names[i]) == 0)
            level = i;
    }
    return level;
}

/* GM_LOG_LEVEL, read once; one that is no level is said with the first message a hook
 * receives, unless gm_set_log_level chose a level meanwhile. */
static pthread_once_t env_level_once = PTHREAD_ONCE_INIT;
static int env_level;
static char bad_level_text[64];
static atomic_int bad_level_state; /* 0: none or said, 1: to say */

static void read_env_level(void)
{
    const char *text = getenv("GM_LOG_LEVEL");

    env_level = gm__parse_log_level(text);
    if (text != NULL && text[0] != '\0' && env_level == GM_LOG_WARN &&
        strcasecmp(text, "warn") != 0 && strcmp(text, "2") != 0) {
        snprintf(bad_level_text, sizeof(bad_level_text), "%s", text);
        atomic_store(&bad_level_state, 1);
    }
}

static int current_log_level(void)
{
    int level = log_level;

    if (level == GM__LOG_LEVEL_UNSET) {
        pthread_once(&env_level_once, read_env_level);
        level = env_level;
        /* only if gm_set_log_level did not choose one meanwhile */
        if (!atomic_compare_exchange_strong(&log_level, &(int){GM__LOG_LEVEL_UNSET}, level))
            level = log_level;
    }
    return level;
}

/* Whether a call of the hook of `generation` is running (log_lock held). */
static bool calls_running(uint64_t generation)
{
    for (const log_call *c = log_calls.next; c != &log_calls; c = c->next) {
        if (c->generation == generation)
            return true;
    }
    return false;
}

void gm_set_log_hook(gm_log_fn hook, void *user)
{
    uint64_t replaced = 0;

    pthread_mutex_lock(&log_lock);
    replaced = log_generation++;
    log_hook = hook;
    log_user = user;
    /* A hook that replaces itself cannot wait for its own call. */
    while (!tls_in_hook && calls_running(replaced))
        pthread_cond_wait(&log_drained, &log_lock);
    pthread_mutex_unlock(&log_lock);
}

void gm_set_log_level(gm_log_level level)
{
    if (level < GM_LOG_OFF)
        level = GM_LOG_OFF;
    if (level > GM_LOG_TRACE)
        level = GM_LOG_TRACE;
    atomic_store(&bad_level_state, 0); /* the level is the caller's now */
    log_level = (int)level;
}

gm_log_level gm_get_log_level(void)
{
    return (gm_log_level)current_log_level();
}

int gm__log_enabled(gm_log_level level)
{
    return level != GM_LOG_OFF && (int)level <= current_log_level();
}

void gm__log(gm_log_level level, const char *fmt, ...)
{
    char message[GM__LOG_MESSAGE_MAX];
    gm_log_fn hook = NULL;
    void *user = NULL;
    log_call call = {0, NULL, NULL};
    va_list ap;

    if (tls_in_hook || !gm__log_enabled(level)) /* a hook calling gpumem: not again */
        return;
    pthread_mutex_lock(&log_lock);
    hook = log_hook;
    user = log_user;
    if (hook != NULL) {
        call.generation = log_generation;
        call.prev = log_calls.prev;
        call.next = &log_calls;
        log_calls.prev->next = &call;
        log_calls.prev = &call;
    }
    pthread_mutex_unlock(&log_lock);
    if (hook == NULL)
        return;
    tls_in_hook = true;
    if (atomic_load(&bad_level_state) == 1 && atomic_exchange(&bad_level_state, 0) == 1) {
        snprintf(message, sizeof(message),
                 "GM_LOG_LEVEL=\"%s\" is not a level (off, error, warn, info, debug, trace or "
                 "0-5); using warn",
                 bad_level_text);
        hook(GM_LOG_WARN, message, user);
    }
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    hook(level, message, user);
    tls_in_hook = false;
    pthread_mutex_lock(&log_lock);
    call.prev->next = call.next;
    call.next->prev = call.prev;
    if (call.generation != log_generation) /* its hook was replaced: a setter may wait */
        pthread_cond_broadcast(&log_drained);
    pthread_mutex_unlock(&log_lock);
}

void gm_log_stderr(gm_log_level level, const char *message, void *user)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug", "trace"};
    const char *name = (level >= GM_LOG_OFF && level <= GM_LOG_TRACE) ? names[level] : "?";

    (void)user;
    fprintf(stderr, "gpumem[%s]: %s\n", name, message != NULL ? message : "");
}

gm_status gm_set_host_allocator(const gm_host_allocator *allocator)
{
    if (allocator == NULL) {
        host_allocator = (gm_host_allocator){malloc, calloc, realloc, free};
        return GM_OK;
    }
    if (allocator->malloc_fn == NULL || allocator->calloc_fn == NULL ||
        allocator->realloc_fn == NULL || allocator->free_fn == NULL)
        return gm__error(GM_ERR_INVALID_ARG,
                         "gm_set_host_allocator: every function pointer must be non-NULL");
    host_allocator = *allocator;
    return GM_OK;
}

void *gm__malloc(size_t size)
{
    return host_allocator.malloc_fn(size);
}

void *gm__calloc(size_t count, size_t size)
{
    return host_allocator.calloc_fn(count, size);
}

void *gm__realloc(void *ptr, size_t size)
{
    return host_allocator.realloc_fn(ptr, size);
}

void gm__free(void *ptr)
{
    if (ptr != NULL)
        host_allocator.free_fn(ptr);
}
