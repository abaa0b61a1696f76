/**
 * @file gpumem/memory_manager.h
 * @brief External memory managers: Numba's EMM plugin interface in C.
 *
 * Every device, pinned and mapped allocation a context makes, and every host
 * registration (gm_pin / gm_map / gm_register), goes through the context's
 * memory manager: a gm_memory_manager table of functions. gpumem's own
 * implementation is one such table (gm_builtin_memory_manager()); an
 * application or a library such as a pool allocator supplies another one:
 *
 *   - in gm_context_options.memory_manager (with memory_manager_user), or
 *   - by naming a shared object in the GM_MEMORY_MANAGER environment variable
 *     (when options.memory_manager is NULL): gpumem dlopen()s it and calls
 *     its GM_MEMORY_MANAGER_ENTRY function ("gm_memory_manager_entry", of
 *     type gm_memory_manager_entry_fn), which returns the table; the
 *     options' memory_manager_user is still passed to its functions. The
 *     values "", "default" and "builtin" select the built-in manager. Each
 *     context loads the object again (dlopen counts) and unloads it when it
 *     is destroyed, after the driver shut down.
 *
 * Every function receives the context's *base* allocator
 * (gm_memory_manager_base): the backend-facing functions the built-in
 * manager is made of, so that a plugin can delegate (a pool that grows with
 * base->memalloc), and the user pointer given with the table.
 *
 * Mandatory: memalloc, memfree, get_memory_info. Optional (NULL): the
 * host-memory pair memhostalloc/memhostfree and the registration pair
 * mempin/memunpin, both or neither of each (NULL: gpumem manages host memory
 * itself, like Numba's HostOnlyCUDAMemoryManager); get_ipc_handle (NULL: the
 * driver's handle of the allocation, like Numba's GetIpcHandleMixin; on CUDA
 * that needs memalloc's pointer to start a driver allocation, so a manager
 * that suballocates makes its own, or gets GM_ERR_UNSUPPORTED);
 * initialize, reset and the defer_cleanup_begin/end pair (NULL: nothing to do).
 *
 * Deallocation (Numba: "the EMM implements the deallocation strategy"): when
 * the last gm_array of an allocation is released, gpumem calls the manager's
 * memfree / memhostfree at once, on the releasing thread (after waiting for
 * the work queued on the context's streams, which may still use the memory,
 * as cuMemFree does: a device synchronization per release), unless the manager
 * sets GM_MEMORY_MANAGER_DEFERRED_FREE: then the free goes through the
 * context's deallocation queue (its bounds, flushes and defer_cleanup apply,
 * and its statistics count the memory). Host memory gpumem manages for a
 * manager without memhostalloc always goes through the queue. Two cases
 * always go through the queue: a release inside a stream callback (no free
 * may run on a driver thread; it runs at the next flush) and the built-in
 * manager (which sets the flag). Unpinning (memunpin) is always immediate.
 *
 * Out of memory: when memalloc, memhostalloc or mempin returns
 * GM_ERR_OUT_OF_DEVICE_MEMORY or GM_ERR_NO_MEMORY, gpumem flushes its queue
 * and calls it once more (not inside defer_cleanup), whatever the manager
 * (Numba retries mempin only when mapped; gm_pin, gm_map and gm_register
 * all retry, since a flush may unpin queued pinned memory).
 *
 * Managed (unified) memory is not part of the interface (nor of Numba's):
 * it is always allocated and freed by the built-in allocator.
 *
 * Threads: every function may be called from any thread, concurrently; a
 * manager must be thread-safe. memfree / memhostfree run on the thread that
 * releases the last reference or flushes the queue, never on a driver thread.
 * No function may call back into gpumem on the same context except the base
 * functions it is given.
 */
#ifndef GPUMEM_MEMORY_MANAGER_H
#define GPUMEM_MEMORY_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "runtime.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The interface version this header describes (Numba's interface_version is 1 too). */
#define GM_MEMORY_MANAGER_INTERFACE_VERSION 1

/** Name of the function a GM_MEMORY_MANAGER plugin exports (a gm_memory_manager_entry_fn). */
#define GM_MEMORY_MANAGER_ENTRY "gm_memory_manager_entry"

/**
 * gm_memory_manager.flags: free this manager's memory through the context's
 * deallocation queue instead of at once when its last reference goes.
 */
#define GM_MEMORY_MANAGER_DEFERRED_FREE (1u << 0)

typedef struct gm_memory_manager_base gm_memory_manager_base;

/**
 * The context's backend-facing allocator, given to every manager function.
 * Its functions call the driver directly: no queue, no retry, no accounting.
 * Owned by the context; valid while the context lives. Device addresses are
 * uint64_t (a CUdeviceptr or an HSA pointer; the host address on the host
 * simulator). Failures record a message (gm_last_error_message()).
 */
struct gm_memory_manager_base {
    uint32_t size;           /**< sizeof(gm_memory_manager_base) of the library */
    gm_backend_kind backend; /**< the driver behind the context */
    int32_t device_id;       /**< the context's device */
    /** @brief Allocate device memory (cuMemAlloc). OOM: GM_ERR_OUT_OF_DEVICE_MEMORY; 0 bytes:
     *         GM_ERR_INVALID_ARG. */
    gm_status (*memalloc)(const gm_memory_manager_base *base, size_t bytes, uint64_t *ptr_p);
    /** @brief Free memory from base->memalloc; 0 is a no-op. */
    gm_status (*memfree)(const gm_memory_manager_base *base, uint64_t ptr);
    /** @brief Page-locked host memory (cuMemHostAlloc); mapped: also mapped into the device.
     *         0 bytes: GM_ERR_INVALID_ARG. */
    gm_status (*memhostalloc)(const gm_memory_manager_base *base, size_t bytes, bool mapped,
                              bool portable, bool wc, void **ptr_p);
    /** @brief Free memory from base->memhostalloc; NULL is a no-op. */
    gm_status (*memhostfree)(const gm_memory_manager_base *base, void *ptr);
    /** @brief Page-lock existing host memory (cuMemHostRegister); mapped: map it too. Memory
     *         already page-locked: GM_ERR_STATE. */
    gm_status (*mempin)(const gm_memory_manager_base *base, void *ptr, size_t bytes, bool mapped);
    /** @brief Undo base->mempin of the range starting at ptr; a pointer that does not start a
     *         pinned range: GM_ERR_INVALID_ARG. */
    gm_status (*memunpin)(const gm_memory_manager_base *base, void *ptr);
    /** @brief Free and total device memory in bytes (cuMemGetInfo). */
    gm_status (*get_memory_info)(const gm_memory_manager_base *base, int64_t *free_p,
                                 int64_t *total_p);
    /**
     * @brief The driver's IPC handle of the allocation starting at ptr, written to
     *        handle (GM_IPC_HANDLE_BYTES bytes). GM_ERR_UNSUPPORTED where the
     *        backend has no IPC (the host simulator).
     */
    gm_status (*get_ipc_handle)(const gm_memory_manager_base *base, uint64_t ptr, void *handle);
};

/**
 * A memory manager: a table of functions (fill it with designated
 * initializers; leave unused optional slots NULL). gpumem copies the table
 * at context creation; the strings and functions it points to must stay
 * valid while a context uses it. Every function returns GM_OK or an error
 * status; recording a message is not required.
 */
struct gm_memory_manager {
    /** GM_MEMORY_MANAGER_INTERFACE_VERSION; any other value is GM_ERR_VERSION_MISMATCH. */
    uint32_t interface_version;
    /** sizeof(gm_memory_manager) the manager was compiled with; smaller than this
     *  library's is GM_ERR_VERSION_MISMATCH, bytes past it are ignored. */
    uint32_t size;
    /** For messages and gm_context_memory_manager(); may be NULL. */
    const char *name;
    /** GM_MEMORY_MANAGER_DEFERRED_FREE or 0; other bits are GM_ERR_INVALID_ARG. */
    uint32_t flags;

    /**
     * @brief Optional. Called once when a context starts using the manager,
     *        after its driver started (Numba's initialize). A failure fails
     *        gm_context_create() with that status.
     * @param base the context's base allocator. @param user memory_manager_user.
     */
    gm_status (*initialize)(const gm_memory_manager_base *base, void *user);

    /**
     * @brief Optional. The manager's last call for a context (Numba's reset):
     *        at gm_context_destroy(), after every allocation was freed and
     *        before the driver shuts down; also when gm_context_create()
     *        fails after initialize succeeded. A failure is logged.
     */
    gm_status (*reset)(const gm_memory_manager_base *base, void *user);

    /**
     * @brief Mandatory. Allocate `bytes` (> 0) of device memory.
     * @param ptr_p   receives the device address.
     * @param owner_p receives a token of the manager's choice (may stay NULL),
     *                given back to memfree and get_ipc_handle.
     * @return GM_OK; GM_ERR_OUT_OF_DEVICE_MEMORY (gpumem flushes its queue and
     *         retries once); any other error fails the allocating call.
     */
    gm_status (*memalloc)(const gm_memory_manager_base *base, void *user, size_t bytes,
                          uint64_t *ptr_p, void **owner_p);

    /**
     * @brief Mandatory. Free memory from memalloc (ptr, bytes and owner as it
     *        returned them). A failure is reported by the flush that called
     *        it (the entry stays queued), or for an immediate free logged and
     *        recorded as the thread's error by the void call that freed
     *        (gm_array_release: status.h).
     */
    gm_status (*memfree)(const gm_memory_manager_base *base, void *user, uint64_t ptr, size_t bytes,
                         void *owner);

    /** @brief Mandatory. Free and total device memory in bytes (Numba's get_memory_info).
     *  The total also sizes the deallocation queue's device-byte bound. */
    gm_status (*get_memory_info)(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                                 int64_t *total_p);

    /**
     * @brief Optional, with memhostfree. Page-locked host memory for
     *        gm_pinned_array (mapped false) and gm_mapped_array (mapped true,
     *        the device must be able to address it: gpumem asks the driver
     *        for its device address). portable / wc: Numba's flags.
     * @param ptr_p receives the host address. @param owner_p as for memalloc.
     */
    gm_status (*memhostalloc)(const gm_memory_manager_base *base, void *user, size_t bytes,
                              bool mapped, bool portable, bool wc, void **ptr_p, void **owner_p);

    /** @brief Optional, with memhostalloc. Free memory from memhostalloc. */
    gm_status (*memhostfree)(const gm_memory_manager_base *base, void *user, void *ptr,
                             size_t bytes, void *owner);

    /**
     * @brief Optional, with memunpin. Page-lock `bytes` of existing host memory
     *        at ptr (page-aligned ranges are not guaranteed); mapped: map it
     *        into the device too (Numba's mempin). Called by gm_pin / gm_map /
     *        gm_register for each merged range.
     * @param owner_p as for memalloc, given back to memunpin.
     */
    gm_status (*mempin)(const gm_memory_manager_base *base, void *user, void *ptr, size_t bytes,
                        bool mapped, void **owner_p);

    /** @brief Optional, with mempin. Undo mempin; called at once when the scope ends. */
    gm_status (*memunpin)(const gm_memory_manager_base *base, void *user, void *ptr, size_t bytes,
                          void *owner);

    /**
     * @brief Optional. Write the IPC handle (GM_IPC_HANDLE_BYTES bytes) of an
     *        allocation from memalloc (ptr, bytes, owner as memalloc returned).
     */
    gm_status (*get_ipc_handle)(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                                size_t bytes, void *owner, void *handle);

    /**
     * @brief Optional, with defer_cleanup_end. Called by gm_defer_cleanup_begin
     *        (after the queue's own scope opened; a failure closes it again and
     *        is returned) and gm_defer_cleanup_end (after the queue's scope
     *        closed and any flush that triggered; a failure is returned, the
     *        scope stays closed), at every nesting level (Numba: the EMM's
     *        defer_cleanup context manager).
     */
    gm_status (*defer_cleanup_begin)(const gm_memory_manager_base *base, void *user);
    gm_status (*defer_cleanup_end)(const gm_memory_manager_base *base, void *user);
};

/**
 * Type of the GM_MEMORY_MANAGER_ENTRY function of a plugin: returns the
 * plugin's table (static storage), or NULL (then gm_context_create fails
 * with GM_ERR_INVALID_ARG).
 */
typedef const gm_memory_manager *(*gm_memory_manager_entry_fn)(void);

/**
 * @brief gpumem's own manager (Numba's NumbaCUDAMemoryManager): every
 *        function delegates to the base; GM_MEMORY_MANAGER_DEFERRED_FREE.
 *        Giving it in the options is the same as giving NULL with
 *        GM_MEMORY_MANAGER unset.
 * @return a static table; never NULL; never freed.
 */
GM_API const gm_memory_manager *gm_builtin_memory_manager(void);

/**
 * @brief The table a context runs: the one given in its options, the one a
 *        GM_MEMORY_MANAGER plugin returned, or gm_builtin_memory_manager().
 * @return NULL for a NULL context; owned by whoever provided it.
 */
GM_API const gm_memory_manager *gm_context_memory_manager(const gm_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_MEMORY_MANAGER_H */
