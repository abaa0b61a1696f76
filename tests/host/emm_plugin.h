/*
 * The test memory-manager plugin (emm_plugin.c, built as a shared module and
 * loaded by test_emm.c through GM_MEMORY_MANAGER or the context options).
 *
 * It counts every call, delegates the memory work to the base allocator it
 * is given, hands out a malloc'ed owner token per allocation (checked and
 * freed by the matching free, so a missing free leaks under ASan), and fails
 * on demand. Its state is the memory_manager_user pointer when one is given,
 * else a static emm_state (emm_plugin_static_state()).
 */
#ifndef GM_TEST_EMM_PLUGIN_H
#define GM_TEST_EMM_PLUGIN_H

#include <stdint.h>

#include "gpumem/memory_manager.h"

/* The plugin's name in its tables. */
#define EMM_PLUGIN_NAME "emm-test"

typedef struct emm_state {
    /* calls so far */
    int64_t initialize, reset, memalloc, memfree, memhostalloc, memhostfree;
    int64_t mempin, memunpin, memory_info, ipc, defer_begin, defer_end;
    int64_t live_device_bytes; /* memalloc'ed minus memfree'd */
    int64_t live_host_bytes;   /* memhostalloc'ed minus memhostfree'd */
    int64_t live_pins;         /* mempin minus memunpin */
    int64_t bad_tokens;        /* frees whose owner token did not match */
    bool last_mapped;          /* memhostalloc's / mempin's last mapped flag */
    bool last_portable, last_wc;
    /* behaviour */
    int64_t device_budget;      /* > 0: memalloc beyond this many live bytes is out of memory;
                                   get_memory_info reports it as the total */
    bool memalloc_no_address;   /* memalloc returns GM_OK and address 0 */
    gm_status fail_memalloc;    /* returned by memalloc instead of allocating (GM_OK: work) */
    gm_status fail_memfree;     /* returned by memfree instead of freeing */
    gm_status lie_memfree;      /* returned by memfree after freeing */
    gm_status lie_memunpin[2];  /* returned by the first / each later memunpin after unpinning */
    gm_status fail_initialize;  /* returned by initialize */
    gm_status fail_reset;       /* returned by reset */
    gm_status fail_memory_info; /* returned by get_memory_info */
    gm_status fail_defer_begin; /* returned by defer_cleanup_begin */
    gm_status fail_defer_end;   /* returned by defer_cleanup_end */
    bool try_base_first;        /* memalloc, memhostalloc and mempin first make a base call
                                   that fails (counted in base_tries), then go on */
    int64_t base_tries;
} emm_state;

/*
 * GM_MEMORY_MANAGER_ENTRY: the full table (every optional function, frees at
 * once). Built with -DEMM_PLUGIN_INTERFACE_VERSION=N it claims version N.
 * Returns NULL when the EMM_PLUGIN_ENTRY_NULL environment variable is set.
 */
const gm_memory_manager *gm_memory_manager_entry(void);

/*
 * A table with GM_MEMORY_MANAGER_DEFERRED_FREE and only the mandatory
 * functions (gpumem manages host memory, pinning and IPC handles itself).
 */
const gm_memory_manager *emm_plugin_deferred(void);

/* The state used when memory_manager_user is NULL. */
emm_state *emm_plugin_static_state(void);

/* Function types for dlsym. */
typedef const gm_memory_manager *(*emm_table_fn)(void);
typedef emm_state *(*emm_state_fn)(void);

#endif
