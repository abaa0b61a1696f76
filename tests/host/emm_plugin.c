/*
 * The test memory-manager plugin; see emm_plugin.h. Uses only the base
 * allocator it is given (it does not link libgpumem).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emm_plugin.h"

#ifndef EMM_PLUGIN_INTERFACE_VERSION
#define EMM_PLUGIN_INTERFACE_VERSION GM_MEMORY_MANAGER_INTERFACE_VERSION
#endif

/* One allocation's owner token. */
typedef struct token {
    uint64_t address;
    size_t bytes;
} token;

static emm_state static_state;

/* The state used without a user pointer. */
emm_state *emm_plugin_static_state(void)
{
    return &static_state;
}

/* The state: the user pointer, else the static one. */
static emm_state *state_of(void *user)
{
    return user != NULL ? (emm_state *)user : &static_state;
}

/* A token for an allocation, or NULL when malloc fails. */
static void *token_new(uint64_t address, size_t bytes)
{
    token *t = malloc(sizeof(*t));

    if (t != NULL) {
        t->address = address;
        t->bytes = bytes;
    }
    return t;
}

/* Check and free a token; count a mismatch. */
static void token_free(emm_state *s, void *owner, uint64_t address, size_t bytes)
{
    token *t = owner;

    if (t == NULL || t->address != address || t->bytes != bytes)
        s->bad_tokens++;
    free(t);
}

/* Counts; fails on demand; checks the base it is given. */
static gm_status emm_initialize(const gm_memory_manager_base *base, void *user)
{
    emm_state *s = state_of(user);

    s->initialize++;
    return base->size >= sizeof(*base) ? s->fail_initialize : GM_ERR_VERSION_MISMATCH;
}

/* Counts; fails on demand. */
static gm_status emm_reset(const gm_memory_manager_base *base, void *user)
{
    emm_state *s = state_of(user);

    s->reset++;
    return s->fail_reset;
}

/* Device memory from the base, within the budget. */
static gm_status emm_memalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                              uint64_t *ptr_p, void **owner_p)
{
    emm_state *s = state_of(user);
    gm_status status = GM_OK;

    s->memalloc++;
    if (s->fail_memalloc != GM_OK)
        return s->fail_memalloc;
    if (s->memalloc_no_address) {
        *ptr_p = 0;
        return GM_OK;
    }
    if (s->device_budget > 0 && s->live_device_bytes + (int64_t)bytes > s->device_budget)
        return GM_ERR_OUT_OF_DEVICE_MEMORY;
    if (s->try_base_first && base->memalloc(base, SIZE_MAX / 2, ptr_p) != GM_OK)
        s->base_tries++; /* a slab too large for the device */
    status = base->memalloc(base, bytes, ptr_p);
    if (status != GM_OK)
        return status;
    *owner_p = token_new(*ptr_p, bytes);
    if (*owner_p == NULL) {
        (void)base->memfree(base, *ptr_p);
        return GM_ERR_NO_MEMORY;
    }
    s->live_device_bytes += (int64_t)bytes;
    return GM_OK;
}

/* Free through the base after checking the token. */
static gm_status emm_memfree(const gm_memory_manager_base *base, void *user, uint64_t ptr,
                             size_t bytes, void *owner)
{
    emm_state *s = state_of(user);
    gm_status status = GM_OK;

    s->memfree++;
    if (s->fail_memfree != GM_OK)
        return s->fail_memfree;
    status = base->memfree(base, ptr);
    if (status != GM_OK)
        return status;
    token_free(s, owner, ptr, bytes);
    s->live_device_bytes -= (int64_t)bytes;
    return s->lie_memfree;
}

/* The base's figures, or the budget as the total. */
static gm_status emm_memory_info(const gm_memory_manager_base *base, void *user, int64_t *free_p,
                                 int64_t *total_p)
{
    emm_state *s = state_of(user);

    s->memory_info++;
    if (s->fail_memory_info != GM_OK)
        return s->fail_memory_info;
    if (s->device_budget <= 0)
        return base->get_memory_info(base, free_p, total_p);
    *free_p = s->device_budget - s->live_device_bytes;
    *total_p = s->device_budget;
    return GM_OK;
}

/* Host memory from the base, recording the flags. */
static gm_status emm_memhostalloc(const gm_memory_manager_base *base, void *user, size_t bytes,
                                  bool mapped, bool portable, bool wc, void **ptr_p, void **owner_p)
{
    emm_state *s = state_of(user);
    gm_status status = GM_OK;

    s->memhostalloc++;
    s->last_mapped = mapped;
    s->last_portable = portable;
    s->last_wc = wc;
    if (s->try_base_first && base->memhostalloc(base, 0, mapped, portable, wc, ptr_p) != GM_OK)
        s->base_tries++; /* 0 bytes is refused */
    status = base->memhostalloc(base, bytes, mapped, portable, wc, ptr_p);
    if (status != GM_OK)
        return status;
    *owner_p = token_new((uint64_t)(uintptr_t)*ptr_p, bytes);
    s->live_host_bytes += (int64_t)bytes;
    return GM_OK;
}

/* Free host memory through the base. */
static gm_status emm_memhostfree(const gm_memory_manager_base *base, void *user, void *ptr,
                                 size_t bytes, void *owner)
{
    emm_state *s = state_of(user);

    s->memhostfree++;
    token_free(s, owner, (uint64_t)(uintptr_t)ptr, bytes);
    s->live_host_bytes -= (int64_t)bytes;
    return base->memhostfree(base, ptr);
}

/* Register through the base. */
static gm_status emm_mempin(const gm_memory_manager_base *base, void *user, void *ptr, size_t bytes,
                            bool mapped, void **owner_p)
{
    emm_state *s = state_of(user);
    gm_status status = GM_OK;

    s->mempin++;
    s->last_mapped = mapped;
    if (s->try_base_first && base->mempin(base, NULL, bytes, mapped) != GM_OK)
        s->base_tries++; /* NULL is refused */
    status = base->mempin(base, ptr, bytes, mapped);
    if (status != GM_OK)
        return status;
    *owner_p = token_new((uint64_t)(uintptr_t)ptr, bytes);
    s->live_pins++;
    return GM_OK;
}

/* Unregister through the base. */
static gm_status emm_memunpin(const gm_memory_manager_base *base, void *user, void *ptr,
                              size_t bytes, void *owner)
{
    emm_state *s = state_of(user);
    gm_status status = GM_OK;

    s->memunpin++;
    token_free(s, owner, (uint64_t)(uintptr_t)ptr, bytes);
    s->live_pins--;
    status = base->memunpin(base, ptr);
    if (status == GM_OK)
        status = s->lie_memunpin[s->memunpin == 1 ? 0 : 1];
    return status;
}

/* A recognizable handle: 0xE3, then the address and size of the allocation. */
static gm_status emm_ipc(const gm_memory_manager_base *base, void *user, uint64_t ptr, size_t bytes,
                         void *owner, void *handle)
{
    emm_state *s = state_of(user);
    const token *t = owner;
    unsigned char *h = handle;

    s->ipc++;
    if (t == NULL || t->address != ptr || t->bytes != bytes)
        return GM_ERR_INVALID_HANDLE;
    memset(h, 0xE3, GM_IPC_HANDLE_BYTES);
    memcpy(h + 8, &ptr, sizeof(ptr));
    memcpy(h + 16, &bytes, sizeof(bytes));
    return GM_OK;
}

/* Counts; fails on demand. */
static gm_status emm_defer_begin(const gm_memory_manager_base *base, void *user)
{
    emm_state *s = state_of(user);

    s->defer_begin++;
    return s->fail_defer_begin;
}

/* Counts; fails on demand. */
static gm_status emm_defer_end(const gm_memory_manager_base *base, void *user)
{
    emm_state *s = state_of(user);

    s->defer_end++;
    return s->fail_defer_end;
}

static const gm_memory_manager full_table = {
    .interface_version = EMM_PLUGIN_INTERFACE_VERSION,
    .size = (uint32_t)sizeof(gm_memory_manager),
    .name = EMM_PLUGIN_NAME,
    .flags = 0,
    .initialize = emm_initialize,
    .reset = emm_reset,
    .memalloc = emm_memalloc,
    .memfree = emm_memfree,
    .get_memory_info = emm_memory_info,
    .memhostalloc = emm_memhostalloc,
    .memhostfree = emm_memhostfree,
    .mempin = emm_mempin,
    .memunpin = emm_memunpin,
    .get_ipc_handle = emm_ipc,
    .defer_cleanup_begin = emm_defer_begin,
    .defer_cleanup_end = emm_defer_end,
};

static const gm_memory_manager deferred_table = {
    .interface_version = EMM_PLUGIN_INTERFACE_VERSION,
    .size = (uint32_t)sizeof(gm_memory_manager),
    .name = EMM_PLUGIN_NAME "-deferred",
    .flags = GM_MEMORY_MANAGER_DEFERRED_FREE,
    .memalloc = emm_memalloc,
    .memfree = emm_memfree,
    .get_memory_info = emm_memory_info,
};

/* The plugin entry (GM_MEMORY_MANAGER_ENTRY). */
const gm_memory_manager *gm_memory_manager_entry(void)
{
    return getenv("EMM_PLUGIN_ENTRY_NULL") != NULL ? NULL : &full_table;
}

/* The deferring table. */
const gm_memory_manager *emm_plugin_deferred(void)
{
    return &deferred_table;
}
