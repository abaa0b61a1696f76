/*
 * The HSA runtime as the backend sees it: one X-macro list of the entry points
 * gpumem uses, a function-pointer table generated from it and filled with
 * dlopen/dlsym at run time (the library never links libhsa-runtime64), and one
 * expression-style wrapper that turns an hsa_status_t into a gm_status while
 * recording which call failed, where, and the runtime's own message.
 *
 * The HSA headers are used for types and prototypes only.
 */
#ifndef GPUMEM_SRC_HSA_HSA_API_H
#define GPUMEM_SRC_HSA_HSA_API_H

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include "core.h"

/* The soname opened when GM_HSA_RUNTIME_PATH is not set. */
#define GM_HSA_RUNTIME_SONAME "libhsa-runtime64.so.1"

/* Environment variable naming another runtime library to open instead (tests
 * point it at the test double, tests/hsa/hsa_runtime_double.c). */
#define GM_HSA_RUNTIME_PATH_ENV "GM_HSA_RUNTIME_PATH"

/* Entry points without which the backend cannot run (X(name)). */
#define GM_HSA_API_REQUIRED(X)                   \
    X(hsa_init)                                  \
    X(hsa_shut_down)                             \
    X(hsa_status_string)                         \
    X(hsa_system_get_info)                       \
    X(hsa_iterate_agents)                        \
    X(hsa_agent_get_info)                        \
    X(hsa_isa_get_info_alt)                      \
    X(hsa_amd_agent_iterate_memory_pools)        \
    X(hsa_amd_memory_pool_get_info)              \
    X(hsa_amd_agent_memory_pool_get_info)        \
    X(hsa_amd_memory_pool_allocate)              \
    X(hsa_amd_memory_pool_free)                  \
    X(hsa_amd_agents_allow_access)               \
    X(hsa_amd_memory_lock)                       \
    X(hsa_amd_memory_unlock)                     \
    X(hsa_amd_pointer_info)                      \
    X(hsa_amd_memory_async_copy)                 \
    X(hsa_signal_create)                         \
    X(hsa_signal_destroy)                        \
    X(hsa_signal_load_scacquire)                 \
    X(hsa_signal_store_screlease)                \
    X(hsa_signal_subtract_screlease)             \
    X(hsa_signal_wait_scacquire)                 \
    X(hsa_amd_signal_async_handler)              \
    X(hsa_queue_create)                          \
    X(hsa_queue_destroy)                         \
    X(hsa_queue_load_read_index_scacquire)       \
    X(hsa_queue_add_write_index_scacq_screl)     \
    X(hsa_code_object_reader_create_from_memory) \
    X(hsa_code_object_reader_destroy)            \
    X(hsa_executable_create_alt)                 \
    X(hsa_executable_load_agent_code_object)     \
    X(hsa_executable_freeze)                     \
    X(hsa_executable_destroy)                    \
    X(hsa_executable_get_symbol_by_name)         \
    X(hsa_executable_symbol_get_info)

/* Entry points a runtime may lack; their pointers stay NULL and the ops that
 * need them answer GM_ERR_UNSUPPORTED (IPC) or do without (pitched copies
 * fall back to one copy per row or plane; without the system event handler a
 * GPU memory fault is left to the runtime, which aborts the process). */
#define GM_HSA_API_OPTIONAL(X)        \
    X(hsa_amd_ipc_memory_create)      \
    X(hsa_amd_ipc_memory_attach)      \
    X(hsa_amd_ipc_memory_detach)      \
    X(hsa_amd_memory_async_copy_rect) \
    X(hsa_amd_register_system_event_handler)

/* The function-pointer table: one member per entry point, typed from the
 * runtime's own prototype. */
typedef struct gm__hsa_api {
    void *library; /* dlopen handle */
#define GM__HSA_API_MEMBER(name) __typeof__(&name) name;
    GM_HSA_API_REQUIRED(GM__HSA_API_MEMBER)
    GM_HSA_API_OPTIONAL(GM__HSA_API_MEMBER)
#undef GM__HSA_API_MEMBER
} gm__hsa_api;

/*
 * Open the runtime (GM_HSA_RUNTIME_PATH, else libhsa-runtime64.so.1) and
 * resolve every entry point. GM_ERR_NO_DRIVER naming the library or the
 * missing symbol on failure; nothing stays open then.
 */
gm_status gm__hsa_api_load(gm__hsa_api *api);

/* Close what gm__hsa_api_load opened and clear the table. */
void gm__hsa_api_unload(gm__hsa_api *api);

/*
 * Translate `status` returned by `call` (at file:line). HSA_STATUS_SUCCESS and
 * HSA_STATUS_INFO_BREAK give GM_OK. Errors are recorded with gm__error() as
 * "<call> failed: <HSA name> (0x<code>): <runtime message> [file:line]" and
 * give `forced` when it is not GM_OK, else the status gm__hsa_status_map()
 * gives.
 */
gm_status gm__hsa_check(hsa_status_t status, const gm__hsa_api *api, gm_status forced,
                        const char *call, const char *file, int line);

/* The gm_status an hsa_status_t stands for (OUT_OF_RESOURCES: out of device memory). */
gm_status gm__hsa_status_map(hsa_status_t status);

/* The name of an hsa_status_t ("HSA_STATUS_ERROR_OUT_OF_RESOURCES"), or "HSA_STATUS_UNKNOWN". */
const char *gm__hsa_status_name(hsa_status_t status);

/*
 * Call an HSA entry point through the table and yield its gm_status; the
 * goto stays at the call site:
 *     status = GM_HSA_CALL(api, hsa_amd_memory_unlock, (ptr));
 *     if (status != GM_OK)
 *         goto fail_unlock;
 */
#define GM_HSA_CALL(api, fn, args) \
    gm__hsa_check((api)->fn args, (api), GM_OK, #fn, __FILE__, __LINE__)

/* The same, but any failure yields `forced` (hsa_init failing means no device). */
#define GM_HSA_CALL_AS(api, forced, fn, args) \
    gm__hsa_check((api)->fn args, (api), (forced), #fn, __FILE__, __LINE__)

#endif /* GPUMEM_SRC_HSA_HSA_API_H */
