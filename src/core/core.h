/*
 * Internal helpers shared by every part of the library: error recording,
 * logging and the bookkeeping allocator. Not installed.
 */
#ifndef GPUMEM_SRC_CORE_CORE_H
#define GPUMEM_SRC_CORE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "gpumem/gpumem.h"

/*
 * Record an error for the calling thread and return `status`, so that a
 * failing path reads `return gm__error(GM_ERR_X, "fn: what %d", v);`.
 * The message should start with the public call's name. Also logged at
 * debug level.
 */
gm_status gm__error(gm_status status, const char *fmt, ...) GM_PRINTF_LIKE(2, 3);

/*
 * Re-record the calling thread's last error as "fn: <last message>" and
 * return `status` (GM_OK is returned as is, nothing recorded). For a core
 * call site whose callee, a backend op or the memory manager, recorded a
 * message naming itself: the public call's name then leads.
 */
gm_status gm__error_within(const char *fn, gm_status status);
/* gm__error_within, unless the thread's message already starts with "fn: " (a failure
 * of several paths, some of which name the call themselves). */
gm_status gm__error_named(const char *fn, gm_status status);

/* Size of the thread's last-error message buffer. */
#define GM__ERROR_MESSAGE_MAX 1024

/* The calling thread's last error, kept across an internal step that may record its own. */
typedef struct gm__saved_error {
    gm_status status;
    uint64_t calls; /* the thread's count of recorded errors then (see gm__error_mark) */
    char message[GM__ERROR_MESSAGE_MAX];
} gm__saved_error;

void gm__error_save(gm__saved_error *saved);
/* Put a saved error back as the thread's last error, without logging it again. */
void gm__error_restore(const gm__saved_error *saved);

/*
 * A cheaper save for hot paths: a mark (the count of the thread's gm__error
 * calls so far), and after a step that failed but was then recovered from,
 * the thread's error put back as it was at the mark (cleared if more than a
 * few errors were recorded since, which the thread's short history no longer
 * holds).
 */
uint64_t gm__error_mark(void);
void gm__error_back_to(uint64_t mark);

/* Log through the hook if `level` passes the threshold. */
void gm__log(gm_log_level level, const char *fmt, ...) GM_PRINTF_LIKE(2, 3);

/* Parse a GM_LOG_LEVEL value: a level name or 0-5; anything else gives GM_LOG_WARN. */
int gm__parse_log_level(const char *text);

/* Whether a message at `level` would be delivered (to skip costly formatting). */
int gm__log_enabled(gm_log_level level);

/* The bookkeeping allocator (gm_set_host_allocator). */
void *gm__malloc(size_t size);
void *gm__calloc(size_t count, size_t size);
void *gm__realloc(void *ptr, size_t size);
void gm__free(void *ptr);

/*
 * The itemsize of a valid dtype, 0 for an invalid one (gm_dtype_itemsize,
 * inlined: it is on the hot path of every descriptor check).
 */
static inline int64_t gm__dtype_bytes(gm_dtype dtype)
{
    /* Per code, bit bits / 8 is set for each width it allows: int and uint 8-64, float
     * 16-64, bfloat 16, complex 64 and 128, bool 8 (code 3 is not a gm_dtype_code). */
    static const uint32_t widths[7] = {0x116, 0x116, 0x114, 0, 0x4, 0x10100, 0x2};
    bool valid = dtype.lanes >= 1 && dtype.code < 7 && (dtype.bits & 7) == 0 &&
                 ((widths[dtype.code] >> (dtype.bits >> 3)) & 1u) != 0;

    return valid ? (int64_t)(dtype.bits >> 3) * dtype.lanes : 0;
}

/* Whether two dtypes are the same (gm_dtype_equal, inlined for the same hot paths). */
static inline bool gm__dtype_same(gm_dtype a, gm_dtype b)
{
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/* Checked int64 arithmetic: return nonzero on overflow. */
static inline int gm__mul_overflow(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

static inline int gm__add_overflow(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

static inline int gm__sub_overflow(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_sub_overflow(a, b, out);
}

/*
 * Thread keys and exit notices (thread_exit.c), for per-thread state that
 * must go when its thread does: the per-thread default streams.
 *
 * gm__thread_key: a number for the calling thread, drawn once from a
 * process-wide counter, never 0 and never reused (pthread_self is no key:
 * glibc hands an exited thread's id to the next thread it creates). The
 * first call in a thread also arms its exit notice.
 *
 * A watch, started with a function and its argument, hears of every armed
 * thread that exits from then until the watch is stopped: the function runs
 * on the exiting thread (a pthread key destructor) with that thread's key,
 * under a process-wide lock that gm__thread_watch_stop also takes, so once
 * stop returns the function runs no more. It must not wait for anything
 * that may wait for a thread's exit (a join) or start or stop a watch.
 * If the system cannot arm a notice (no pthread key to be had), the thread
 * still gets its key and its state lives until the owner's teardown.
 */
typedef struct gm__thread_watch {
    struct gm__thread_watch *prev, *next;
    void (*on_exit)(void *arg, uint64_t key);
    void *arg;
    uint64_t generation; /* a fork child starts a new one, with no watch */
} gm__thread_watch;

uint64_t gm__thread_key(void);
void gm__thread_watch_start(gm__thread_watch *watch, void (*on_exit)(void *arg, uint64_t key),
                            void *arg);
void gm__thread_watch_stop(gm__thread_watch *watch);

#endif /* GPUMEM_SRC_CORE_CORE_H */
