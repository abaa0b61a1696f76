/*
 * Helpers for the runtime suites (host/context, host/dealloc, host/arrays,
 * host/hostmem, host/streams, host/stress):
 *
 *   - a fault-injecting ops table: a copy of gm__host_backend whose ops
 *     count their calls and fail on a chosen call with a chosen status;
 *   - a log hook that records what the library logged;
 *   - a bookkeeping allocator that fails on its Nth call (and otherwise
 *     forwards to cmocka's leak-checking allocator).
 */
#ifndef GM_TEST_RT_HELPERS_H
#define GM_TEST_RT_HELPERS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "gm_test.h"
#include "runtime_internal.h"

/* Ops the fault table counts and can fail. */
typedef enum rt_fault_op {
    RT_INIT = 0,
    RT_MEM_ALLOC,
    RT_MEM_FREE,
    RT_HOST_ALLOC,
    RT_HOST_FREE,
    RT_HOST_REGISTER,
    RT_HOST_UNREGISTER,
    RT_HOST_DEVICE_POINTER,
    RT_COPY,
    RT_COPY_STRIDED,
    RT_MEMSET,
    RT_STREAM_CREATE,
    RT_STREAM_DESTROY,
    RT_STREAM_SYNCHRONIZE,
    RT_ENQUEUE_HOST,
    RT_ADD_CALLBACK,
    RT_EVENT_CREATE,
    RT_EVENT_DESTROY,
    RT_DEVICE_SYNCHRONIZE,
    RT_MANAGED_ALLOC,
    RT_OP_COUNT
} rt_fault_op;

/* Reset counters and failures; the table wraps every counted op again. */
void rt_fault_reset(void);

/* Make call number `call` (1-based, counted since the reset) of `op` fail with `status`. */
void rt_fault_fail_at(rt_fault_op op, int64_t call, gm_status status);

/* Calls of `op` since the reset. */
int64_t rt_fault_calls(rt_fault_op op);

/* The fault table (mutable: a test may point a slot elsewhere until the next reset). */
gm_backend_ops *rt_fault_ops(void);

/* A context on the fault table (options NULL: defaults). */
gm_status rt_fault_context(const gm_context_options *options, gm_context **ctx_p);

/* Start recording log messages at or above `level` (installs the hook). */
void rt_log_capture(gm_log_level level);

/* Stop recording and remove the hook. */
void rt_log_stop(void);

/* Whether a recorded message at `level` contains `needle`. */
bool rt_log_contains(gm_log_level level, const char *needle);

/* Install a bookkeeping allocator whose call number `fail_at` (1-based) fails; 0: never. */
void rt_alloc_fail_at(int64_t fail_at);

/* Allocator calls since rt_alloc_fail_at. */
int64_t rt_alloc_calls(void);

/*
 * End of one step of an allocation-failure sweep: the scenario ran with
 * allocation n failing (rt_alloc_fail_at(n)) and returned `s`. Reinstalls
 * the leak-checking allocator, fails the test unless s is GM_OK or
 * GM_ERR_NO_MEMORY, and returns true once the scenario made fewer than n
 * allocations, i.e. every allocation point has failed once. `limit` bounds n.
 */
bool rt_alloc_sweep_done(gm_status s, int64_t n, int64_t limit);

/* Context options with the given queue bounds (others default). */
gm_context_options rt_options(int64_t max_count, double ratio, int64_t max_pinned);

/* A context on the fault table whose queue bounds are out of reach (1000 entries, far more
 * bytes than the device has), asserting success. */
gm_context *rt_fault_ctx(void);

/* Queue statistics, asserting success. */
gm_dealloc_stats rt_stats(gm_context *ctx);

#endif
