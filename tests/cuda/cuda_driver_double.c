/*
 * The CUDA driver test double (see cuda_driver_double.h): every entry point
 * of src/cuda/cuda_driver.h's list, on host memory, checking its arguments
 * the way the real driver does. Function names come from cuda.h's prototypes
 * (cuMemAlloc is defined as cuMemAlloc_v2, and so on), so the symbols are
 * exactly those the backend resolves.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_driver_double.h"
#include "kernels_internal.h" /* the library's built-in image sets (their host tables) */
#include "sim/sim.h"          /* the kernel simulator that runs them */

#define MAX_DEVICES 4
#define MAX_ALLOCS  65536
#define MAX_HANDLES 16384
#define MAX_KERNELS 16
#define MAX_PARAMS  16
#define MAX_GLOBALS 8
#define MAX_LOG     65536
#define NAME_LEN    64
#define PARAM_BYTES 4096

#define MAGIC_STREAM   0x5354524du
#define MAGIC_EVENT    0x4556454eu
#define MAGIC_MODULE   0x4d4f4455u
#define MAGIC_FUNCTION 0x46554e43u
#define MAGIC_IPC      0x49504321u

#define DEFAULT_MEMORY      ((size_t)64 << 20)
#define DEFAULT_SHARED      (48 * 1024)
#define MAX_OPTIN_SHARED    (227 * 1024)
#define DEFAULT_MAX_PITCH   2147483647
#define HOST_REGISTER_FLAGS 0xfu /* PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY */
#define HOST_ALLOC_FLAGS    0x7u /* PORTABLE | DEVICEMAP | WRITECOMBINED */
#define HOST_DEVICEMAP      0x2u /* CU_MEMHOSTALLOC_DEVICEMAP == CU_MEMHOSTREGISTER_DEVICEMAP */
#define EVENT_FLAGS         0x7u /* BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS */

typedef enum alloc_kind {
    ALLOC_DEVICE,     /* cuMemAlloc */
    ALLOC_MANAGED,    /* cuMemAllocManaged */
    ALLOC_PINNED,     /* cuMemHostAlloc */
    ALLOC_REGISTERED, /* cuMemHostRegister (user memory) */
    ALLOC_IPC,        /* cuIpcOpenMemHandle mapping of a device allocation */
    ALLOC_GLOBAL      /* a module's global; freed with the module, not counted live */
} alloc_kind;

typedef struct alloc {
    int used;
    alloc_kind kind;
    uintptr_t base;   /* where the CPU reaches it (for device memory: its address) */
    uintptr_t device; /* where the device reaches it; 0: nowhere (see map_host) */
    size_t bytes;
    unsigned flags;
    void *mem; /* owned memory (device, managed, pinned, global) */
} alloc;

struct CUctx_st {
    int device;
    int retain;
};

struct CUstream_st {
    unsigned magic;
    unsigned flags;
    CUcontext ctx;  /* current when it was created */
    long last_held; /* the last held callback queued on it (its number; 0: none) */
};

struct CUevent_st {
    unsigned magic;
    unsigned flags;
    CUcontext ctx; /* current when it was created */
    long after;    /* complete once the held callback of this number has run */
    int recorded;
    double time_ms;
};

struct CUmod_st;

struct CUfunc_st {
    unsigned magic;
    struct CUmod_st *module;
    char name[NAME_LEN];
    int nparams;
    size_t sizes[MAX_PARAMS];
    size_t offsets[MAX_PARAMS];
    size_t static_shared; /* the entry's own .shared arrays */
    int max_dynamic_shared;
    const gm_host_kernel *host; /* the simulator's kernel of the same name, or NULL */
};

typedef struct module_global {
    char name[NAME_LEN];
    size_t bytes;
    void *mem;                  /* the module's own copy (what cuModuleGetGlobal returns) */
    const gm_host_global *host; /* the simulator's array of the same name, or NULL */
} module_global;

struct CUmod_st {
    unsigned magic;
    int nkernels;
    struct CUfunc_st kernels[MAX_KERNELS];
    int nglobals;
    module_global globals[MAX_GLOBALS];
};

/* What an entry point requires before it runs. */
typedef enum need { NEED_NOTHING, NEED_INIT, NEED_CONTEXT } need;

static struct {
    int initialized;
    int device_count;
    size_t device_memory, pinned_memory, device_used, pinned_used;
    int max_pitch;
    struct CUctx_st contexts[MAX_DEVICES];
    alloc allocs[MAX_ALLOCS];
    int alloc_top; /* one past the highest entry ever used: the scans stop there */
    struct CUstream_st *streams[MAX_HANDLES];
    struct CUevent_st *events[MAX_HANDLES];
    struct CUmod_st *modules[MAX_HANDLES];
    const char *log[MAX_LOG];
    long log_count;
    const char *fail_symbol;
    long fail_n;
    CUresult fail_result;
    CUresult sticky; /* every context call returns it (gm_cuda_double_set_sticky) */
    long violations;
    char last_violation[512];
    double clock_ms;
    unsigned last_launch_shared;
    CUresult callback_status; /* what cuStreamAddCallback's functions are given */
    int hold_callbacks;       /* gm_cuda_double_hold_callbacks: queue instead of running */
    size_t dtod_pitch_align;  /* gm_cuda_double_set_dtod_pitch_align (0: any pitch) */
    int held_count;
    struct {
        CUstream stream;
        CUstreamCallback fn;
        void *data;
        long number; /* 1, 2, ... in the order they were queued */
    } held[64];
    long held_queued, held_ran; /* numbers of the last held callback queued, and run */
    long legacy_last_held;      /* the last held callback queued on the NULL / legacy stream */
    int capturing; /* what cuStreamIsCapturing reports (gm_cuda_double_set_capturing) */
    int host_pointer_for_registered; /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (reset: 0) */
} S = {.device_count = 1,
       .device_memory = DEFAULT_MEMORY,
       .pinned_memory = DEFAULT_MEMORY,
       .max_pitch = DEFAULT_MAX_PITCH};

static _Thread_local CUcontext current_context = NULL; /* the top of the thread's stack */
static _Thread_local CUcontext context_stack[8];       /* the contexts below it */
static _Thread_local int context_depth = 0;
static _Thread_local int in_callback = 0;           /* running a cuStreamAddCallback function */
static _Thread_local long per_thread_last_held = 0; /* on this thread's CU_STREAM_PER_THREAD */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER; /* S.held, run by another thread */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * One lock around every entry point (API_LOCK, first thing in each): a test may
 * call in from many threads (cuda/stress-double), and the tables above are
 * shared. Stream callbacks run without it: they may not call the driver, and
 * may wait for threads that do.
 */
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int api_locked = 0;

static int api_lock_take(void)
{
    pthread_mutex_lock(&api_lock);
    api_locked = 1;
    return 1;
}

static void api_lock_drop(int *taken)
{
    if (*taken != 0) {
        api_locked = 0;
        pthread_mutex_unlock(&api_lock);
    }
}

#define API_LOCK \
    __attribute__((cleanup(api_lock_drop), unused)) int api_lock_taken_ = api_lock_take()

/* ------------------------------------------------------------ bookkeeping */

/* Count a broken driver rule and return the result the driver would give. */
static CUresult violation(CUresult result, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(S.last_violation, sizeof(S.last_violation), fmt, ap);
    va_end(ap);
    S.violations++;
    fprintf(stderr, "cuda driver double: violation: %s\n", S.last_violation);
    /* Programs that do not count violations themselves (the examples, the
     * conformance and stress programs) are run with this set: a misuse fails them. */
    if (getenv("GM_CUDA_DOUBLE_FATAL_VIOLATIONS") != NULL) {
        fprintf(stderr, "cuda driver double: GM_CUDA_DOUBLE_FATAL_VIOLATIONS is set: abort\n");
        abort();
    }
    return result;
}

/* Log the call, apply an armed fault, then check initialization and the current context. */
static CUresult enter(const char *symbol, need requirement)
{
    int fail = 0;

    pthread_mutex_lock(&log_lock);
    if (S.log_count < MAX_LOG)
        S.log[S.log_count++] = symbol;
    if (S.fail_n > 0 && (S.fail_symbol == NULL || strcmp(S.fail_symbol, symbol) == 0))
        fail = --S.fail_n == 0;
    pthread_mutex_unlock(&log_lock);
    if (fail != 0)
        return S.fail_result;
    /* cuStreamAddCallback: "The callback must not make any CUDA API calls". */
    if (in_callback != 0)
        return violation(CUDA_ERROR_NOT_PERMITTED, "%s inside a stream callback", symbol);
    if (requirement != NEED_NOTHING && S.initialized == 0)
        return violation(CUDA_ERROR_NOT_INITIALIZED, "%s before cuInit", symbol);
    if (requirement == NEED_CONTEXT && (current_context == NULL || current_context->retain <= 0))
        return violation(CUDA_ERROR_INVALID_CONTEXT, "%s without a current context", symbol);
    if (requirement == NEED_CONTEXT && S.sticky != CUDA_SUCCESS)
        return S.sticky; /* the context is unusable: "every later call returns it" */
    return CUDA_SUCCESS;
}

static alloc *new_alloc(alloc_kind kind, uintptr_t base, size_t bytes, unsigned flags, void *mem)
{
    /* device-side memory is reached at its address; page-locked host memory by map_host */
    uintptr_t device = kind == ALLOC_PINNED || kind == ALLOC_REGISTERED ? 0 : base;

    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (S.allocs[i].used == 0) {
            S.allocs[i] = (alloc){1, kind, base, device, bytes, flags, mem};
            if (i >= S.alloc_top)
                S.alloc_top = i + 1;
            return &S.allocs[i];
        }
    }
    return NULL;
}

/* The allocation of `kind` starting exactly at `base`. */
static alloc *alloc_at(uintptr_t base, alloc_kind kind)
{
    for (int i = 0; i < S.alloc_top; i++) {
        if (S.allocs[i].used != 0 && S.allocs[i].kind == kind && S.allocs[i].base == base)
            return &S.allocs[i];
    }
    return NULL;
}

/*
 * Device addresses of mapped host memory. With unified addressing the device
 * reaches cuMemHostAlloc memory at its host address, but cuda.h's "Exceptions,
 * Disjoint Addressing" are memory registered with cuMemHostRegister (unless
 * CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is non-zero on
 * every device) and memory allocated with CU_MEMHOSTALLOC_WRITECOMBINED: they
 * have "a distinct host and device address"; "the host address will
 * correspond to an invalid unmapped device address" and "the device address
 * will correspond to an invalid unmapped host address". The double hands
 * those device addresses out of one reserved PROT_NONE region (ALIAS_BYTES of
 * address space, never backed), at the host address's offset in its page, so
 * a CPU access through a device address faults, and a device access (copy
 * side, memset, kernel pointer argument) through the host address is a
 * violation. It translates device addresses back where it touches the memory
 * for the device. Addresses are handed out upward with a guard page after
 * each range, and reused only once the region is exhausted, so a stale one
 * (its registration gone) is caught. The region is kept for the process (a
 * reset does not reuse its addresses either).
 */
#define ALIAS_BYTES ((size_t)1 << 36)
#define ALIAS_PAGE  ((size_t)4096)
static char *alias_region; /* reserved on first use */
static size_t alias_next;  /* the next free offset in it */

/* Whether address lies in the region of device addresses of mapped host memory. */
static int in_alias(uintptr_t address)
{
    return alias_region != NULL && address >= (uintptr_t)alias_region &&
           address - (uintptr_t)alias_region < ALIAS_BYTES;
}

/* The pages (and guard page) [*lo_p, *hi_p) of the region that a range at offset `at` takes. */
static void alias_span(size_t at, size_t bytes, size_t *lo_p, size_t *hi_p)
{
    *lo_p = at / ALIAS_PAGE * ALIAS_PAGE;
    *hi_p = (at + bytes + ALIAS_PAGE - 1) / ALIAS_PAGE * ALIAS_PAGE + ALIAS_PAGE;
}

static void *reuse_take_block(alloc_kind kind, size_t bytes, size_t in_page);

/* A fresh device address for host range [host, host + bytes), or 0 (no room); in the
 * reuse mode, the newest one given up by a range of the same size and offset in its page. */
static uintptr_t alias_alloc(uintptr_t host, size_t bytes)
{
    size_t in_page = host % ALIAS_PAGE;
    size_t at = alias_next;
    size_t lo = 0;
    size_t hi = 0;
    int wrapped = 0;
    void *kept = reuse_take_block(ALLOC_REGISTERED, bytes, in_page);

    if (kept != NULL)
        return (uintptr_t)kept;

    if (alias_region == NULL) {
        void *r =
            mmap(NULL, ALIAS_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

        if (r == MAP_FAILED)
            return 0;
        alias_region = r;
    }
    if (bytes > ALIAS_BYTES / 4)
        return 0;
    for (;;) {
        const alloc *hit = NULL;
        size_t end = 0;

        alias_span(at + in_page, bytes, &lo, &hi);
        if (hi > ALIAS_BYTES) {
            if (wrapped != 0)
                return 0;
            wrapped = 1;
            at = 0;
            continue;
        }
        for (int i = 0; i < S.alloc_top && hit == NULL; i++) {
            const alloc *a = &S.allocs[i];
            size_t alo = 0;
            size_t ahi = 0;

            if (a->used == 0 || !in_alias(a->device))
                continue;
            alias_span((size_t)(a->device - (uintptr_t)alias_region), a->bytes, &alo, &ahi);
            if (lo < ahi && alo < hi) {
                hit = a;
                end = ahi;
            }
        }
        if (hit == NULL)
            break;
        at = end;
    }
    alias_next = hi;
    return (uintptr_t)alias_region + lo + in_page;
}

/*
 * Give page-locked host memory its device address: none without DEVICEMAP
 * (gpumem asks for it whenever it wants one; the double holds it to that);
 * else the host address for cuMemHostAlloc memory (unified addressing) and
 * for registered memory on a device that can use host pointers; a distinct
 * one for other registered memory and for write-combined memory. 0 when
 * there is no room for one.
 */
static int map_host(alloc *a)
{
    int distinct = a->kind == ALLOC_REGISTERED ? S.host_pointer_for_registered == 0
                                               : (a->flags & CU_MEMHOSTALLOC_WRITECOMBINED) != 0;

    a->device = 0;
    if ((a->flags & HOST_DEVICEMAP) == 0)
        return 1;
    a->device = distinct != 0 ? alias_alloc(a->base, a->bytes) : a->base;
    return a->device != 0;
}

/* Whether [address, address + bytes) lies in [start, start + size). */
static int in_range(uintptr_t start, size_t size, uintptr_t address, size_t bytes)
{
    return address >= start && address - start <= size && bytes <= size - (address - start);
}

/*
 * The allocation containing [address, address + bytes): by the address the
 * device uses (device_side), else by the host (CPU) address; NULL if none.
 */
static alloc *containing(uintptr_t address, size_t bytes, int device_side)
{
    for (int i = 0; i < S.alloc_top; i++) {
        alloc *a = &S.allocs[i];
        uintptr_t start = device_side != 0 ? a->device : a->base;

        if (a->used != 0 && start != 0 && in_range(start, a->bytes, address, bytes))
            return a;
    }
    return NULL;
}

/* Where the CPU reaches the byte the device reaches at `address` of allocation a. */
static void *cpu_address(const alloc *a, uintptr_t address)
{
    return (void *)(a->base + (address - a->device));
}

/*
 * A device range must lie inside memory the device reaches at that address;
 * *cpu_p receives where the CPU reaches its first byte.
 */
static CUresult device_range(const char *what, CUdeviceptr address, size_t bytes, void **cpu_p)
{
    alloc *a = containing((uintptr_t)address, bytes, 1);

    if (a != NULL) {
        *cpu_p = cpu_address(a, (uintptr_t)address);
        return CUDA_SUCCESS;
    }
    a = containing((uintptr_t)address, 1, 0);
    if (a != NULL && (a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED) && a->device == 0)
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "%s: device range 0x%llx + %zu is page-locked host memory not mapped "
                         "for the device (no DEVICEMAP)",
                         what, (unsigned long long)address, bytes);
    if (a != NULL && (a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED) &&
        a->device != a->base)
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "%s: device range 0x%llx + %zu is the host address of %s host memory; "
                         "the device reaches it at 0x%llx (cuMemHostGetDevicePointer)",
                         what, (unsigned long long)address, bytes,
                         a->kind == ALLOC_REGISTERED ? "registered" : "write-combined",
                         (unsigned long long)(a->device + ((uintptr_t)address - a->base)));
    if (in_alias((uintptr_t)address) && containing((uintptr_t)address, 1, 1) == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "%s: device range 0x%llx + %zu is a device address of mapped host "
                         "memory that is no longer registered or allocated",
                         what, (unsigned long long)address, bytes);
    return violation(CUDA_ERROR_INVALID_VALUE,
                     "%s: device range 0x%llx + %zu is outside every device allocation", what,
                     (unsigned long long)address, bytes);
}

static CUresult host_pointer(const char *what, const void *host)
{
    alloc *a = containing((uintptr_t)host, 1, 0);

    if (host == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: NULL host pointer", what);
    if (a != NULL && (a->kind == ALLOC_DEVICE || a->kind == ALLOC_GLOBAL || a->kind == ALLOC_IPC))
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: device memory %p given as host memory",
                         what, host);
    if (in_alias((uintptr_t)host))
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "%s: %p is the device address of mapped host memory, not a host address "
                         "(the CPU faults on it)",
                         what, host);
    return CUDA_SUCCESS;
}

static CUresult valid_stream(const char *what, CUstream stream)
{
    if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (S.streams[i] == stream)
            return CUDA_SUCCESS;
    }
    return violation(CUDA_ERROR_INVALID_HANDLE, "%s: stream %p is not live", what, (void *)stream);
}

/* The context a (live) stream belongs to: the built-in ones are the current context's. */
static CUcontext stream_context(CUstream stream)
{
    if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return current_context;
    return stream->ctx;
}

/* Where the number of the last held callback queued on a (live) stream is kept. */
static long *last_held_of(CUstream stream)
{
    if (stream == CU_STREAM_PER_THREAD)
        return &per_thread_last_held;
    if (stream == NULL || stream == CU_STREAM_LEGACY)
        return &S.legacy_last_held;
    return &stream->last_held;
}

/* Whether the held callback numbered `number` (0: none) has not run yet. */
static int held_pending(long number)
{
    int pending = 0;

    pthread_mutex_lock(&held_lock);
    pending = number > S.held_ran && number <= S.held_queued;
    pthread_mutex_unlock(&held_lock);
    return pending;
}

static int event_slot(CUevent event)
{
    for (int i = 0; event != NULL && i < MAX_HANDLES; i++) {
        if (S.events[i] == event)
            return i;
    }
    return -1;
}

static CUresult valid_event(const char *what, CUevent event)
{
    if (event_slot(event) < 0)
        return violation(CUDA_ERROR_INVALID_HANDLE, "%s: event %p is not live", what,
                         (void *)event);
    return CUDA_SUCCESS;
}

static int module_slot(CUmodule module)
{
    for (int i = 0; module != NULL && i < MAX_HANDLES; i++) {
        if (S.modules[i] == module)
            return i;
    }
    return -1;
}

static CUresult valid_function(const char *what, CUfunction function)
{
    if (function == NULL || function->magic != MAGIC_FUNCTION || module_slot(function->module) < 0)
        return violation(CUDA_ERROR_INVALID_HANDLE, "%s: function %p is not live", what,
                         (void *)function);
    return CUDA_SUCCESS;
}

/* Put a handle into the first free slot of a table; 0 when full. */
static int add_handle(void **table, void *handle)
{
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (table[i] == NULL) {
            table[i] = handle;
            return 1;
        }
    }
    return 0;
}

/*
 * Destroyed streams, events and modules are kept (dead) until the reset, so
 * that no later object gets the address of one: a handle used after its
 * destruction is then never mistaken for a live object (the driver's
 * handles are opaque, and a destroyed one is invalid; calloc would hand the
 * address out again). The reuse mode (below) hands them out again instead.
 */
static struct {
    void **dead;
    size_t count, capacity;
} graveyard;

static void bury(void *handle)
{
    if (graveyard.count == graveyard.capacity) {
        size_t capacity = graveyard.capacity != 0 ? 2 * graveyard.capacity : 64;
        void **dead = realloc(graveyard.dead, capacity * sizeof(*dead));

        if (dead == NULL) { /* cannot keep it: freeing it only weakens the check */
            free(handle);
            return;
        }
        graveyard.dead = dead;
        graveyard.capacity = capacity;
    }
    graveyard.dead[graveyard.count++] = handle;
}

/*
 * Freed device memory is not given back to malloc at once (the last
 * QUARANTINE_BLOCKS blocks, up to QUARANTINE_BYTES, wait): a device address
 * used after its cuMemFree then lies in no allocation and is refused, instead
 * of landing in a later allocation that malloc placed at the same address.
 * Under AddressSanitizer its own quarantine does this (and reports the use).
 */
#if defined(__SANITIZE_ADDRESS__)
#define GM_DOUBLE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM_DOUBLE_ASAN 1
#endif
#endif
#define QUARANTINE_BLOCKS 1024
#define QUARANTINE_BYTES  ((size_t)64 << 20)

static struct {
    void *mem[QUARANTINE_BLOCKS];
    size_t bytes[QUARANTINE_BLOCKS];
    int next, count;
    size_t total;
} quarantine;

static void quarantine_drop_oldest(void)
{
    int oldest = (quarantine.next - quarantine.count + QUARANTINE_BLOCKS) % QUARANTINE_BLOCKS;

    free(quarantine.mem[oldest]);
    quarantine.total -= quarantine.bytes[oldest];
    quarantine.count--;
}

static void quarantine_free(void *mem, size_t bytes)
{
#if defined(GM_DOUBLE_ASAN)
    free(mem);
    (void)bytes;
#else
    if (bytes > QUARANTINE_BYTES) {
        free(mem);
        return;
    }
    while (quarantine.count == QUARANTINE_BLOCKS || quarantine.total + bytes > QUARANTINE_BYTES)
        quarantine_drop_oldest();
    memset(mem, 0xdd, bytes); /* what a read of freed memory would see */
    quarantine.mem[quarantine.next] = mem;
    quarantine.bytes[quarantine.next] = bytes;
    quarantine.next = (quarantine.next + 1) % QUARANTINE_BLOCKS;
    quarantine.count++;
    quarantine.total += bytes;
#endif
}

/*
 * The reuse mode (gm_cuda_double_set_reuse_handles, GM_CUDA_DOUBLE_REUSE_HANDLES):
 * the real driver hands a destroyed object's handle value, and a freed
 * allocation's address, out again, so code that keys records by handle or
 * address may mistake a new object for a dead one (ABA). In this mode the
 * graveyard and the quarantine above are bypassed: a destroyed stream, event
 * or module (its functions' handles point into it) goes on a stack of its
 * kind, and the next creation of that kind takes the newest one back
 * (cleared, as new); freed device, managed and page-locked memory, and the
 * distinct device address of unregistered (or freed write-combined) host
 * memory, go on a stack too, and the next allocation of the same kind and
 * size (for a device address: the same size and offset in its page) takes
 * the newest back. A stream or event with a held callback not run yet is not
 * handed out again until it has run (the driver frees a destroyed stream's
 * resources once its work is done).
 */
#define REUSE_HANDLES 256
#define REUSE_BLOCKS  1024
#define REUSE_BYTES   ((size_t)256 << 20)

typedef struct reuse_handles {
    void *handle[REUSE_HANDLES];
    int count;
} reuse_handles;

static struct {
    int mode; /* -1: not read from the environment yet */
    reuse_handles streams, events, modules;
    struct {
        alloc_kind kind; /* ALLOC_DEVICE, ALLOC_MANAGED, ALLOC_PINNED; ALLOC_REGISTERED: alias */
        void *mem;       /* the memory; for an alias, its device address */
        size_t bytes;
    } blocks[REUSE_BLOCKS];
    int nblocks;
    size_t total; /* bytes of memory (not alias addresses) held */
} reuse = {.mode = -1};

static int reuse_default(void)
{
    const char *env = getenv("GM_CUDA_DOUBLE_REUSE_HANDLES");

    return env != NULL && env[0] != '\0' && strcmp(env, "0") != 0;
}

static int reuse_on(void)
{
    if (reuse.mode < 0)
        reuse.mode = reuse_default();
    return reuse.mode;
}

/* Keep a destroyed handle for the next creation of its kind; 0: not kept (caller buries). */
static int reuse_keep(reuse_handles *r, void *handle)
{
    if (reuse_on() == 0)
        return 0;
    if (r->count == REUSE_HANDLES) { /* the oldest goes to the graveyard */
        bury(r->handle[0]);
        memmove(r->handle, r->handle + 1, (REUSE_HANDLES - 1) * sizeof(r->handle[0]));
        r->count--;
    }
    r->handle[r->count++] = handle;
    return 1;
}

/* The newest kept handle that `ready` accepts (NULL: accept any), taken off the stack. */
static void *reuse_take(reuse_handles *r, int (*ready)(void *handle))
{
    for (int i = r->count - 1; reuse_on() != 0 && i >= 0; i--) {
        void *handle = r->handle[i];

        if (ready != NULL && ready(handle) == 0)
            continue;
        memmove(r->handle + i, r->handle + i + 1, (size_t)(r->count - i - 1) * sizeof(void *));
        r->count--;
        return handle;
    }
    return NULL;
}

static void reuse_block_drop(int i)
{
    if (reuse.blocks[i].kind != ALLOC_REGISTERED) {
        free(reuse.blocks[i].mem);
        reuse.total -= reuse.blocks[i].bytes;
    }
    memmove(reuse.blocks + i, reuse.blocks + i + 1,
            (size_t)(reuse.nblocks - i - 1) * sizeof(reuse.blocks[0]));
    reuse.nblocks--;
}

/* Keep freed memory (or a device address of host memory) for the next allocation like it. */
static int reuse_keep_block(alloc_kind kind, void *mem, size_t bytes)
{
    size_t counted = kind == ALLOC_REGISTERED ? 0 : bytes;

    if (reuse_on() == 0 || counted > REUSE_BYTES)
        return 0;
    while (reuse.nblocks == REUSE_BLOCKS || reuse.total + counted > REUSE_BYTES)
        reuse_block_drop(0);
    reuse.blocks[reuse.nblocks].kind = kind;
    reuse.blocks[reuse.nblocks].mem = mem;
    reuse.blocks[reuse.nblocks++].bytes = bytes;
    reuse.total += counted;
    return 1;
}

/* The newest kept block of the kind and size (for an alias also at `in_page` in its page). */
static void *reuse_take_block(alloc_kind kind, size_t bytes, size_t in_page)
{
    for (int i = reuse.nblocks - 1; reuse_on() != 0 && i >= 0; i--) {
        void *mem = reuse.blocks[i].mem;

        if (reuse.blocks[i].kind != kind || reuse.blocks[i].bytes != bytes ||
            (kind == ALLOC_REGISTERED && (uintptr_t)mem % ALIAS_PAGE != in_page))
            continue;
        memmove(reuse.blocks + i, reuse.blocks + i + 1,
                (size_t)(reuse.nblocks - i - 1) * sizeof(reuse.blocks[0]));
        reuse.nblocks--;
        if (kind != ALLOC_REGISTERED)
            reuse.total -= bytes;
        return mem;
    }
    return NULL;
}

/* Forget the kept handles and blocks (reset); the mode returns to the environment's. */
static void reuse_reset(void)
{
    reuse_handles *handles[3] = {&reuse.streams, &reuse.events, &reuse.modules};

    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < handles[k]->count; i++)
            free(handles[k]->handle[i]);
        handles[k]->count = 0;
    }
    while (reuse.nblocks > 0)
        reuse_block_drop(reuse.nblocks - 1);
    reuse.mode = reuse_default();
}

void gm_cuda_double_set_reuse_handles(int on)
{
    reuse.mode = on != 0;
}

int gm_cuda_double_reuse_handles(void)
{
    return reuse_on();
}

/* ---------------------------------------------------------- control API */

/* Release a module's globals (their memory and allocation records). */
static void free_globals(struct CUmod_st *module)
{
    for (int g = 0; g < module->nglobals; g++) {
        alloc *a = alloc_at((uintptr_t)module->globals[g].mem, ALLOC_GLOBAL);

        if (a != NULL)
            a->used = 0;
        free(module->globals[g].mem);
    }
    module->nglobals = 0;
}

static void free_module(struct CUmod_st *module)
{
    free_globals(module);
    free(module);
}

void gm_cuda_double_reset(void)
{
    for (int i = 0; i < S.alloc_top; i++) {
        if (S.allocs[i].used != 0 && S.allocs[i].kind != ALLOC_GLOBAL)
            free(S.allocs[i].mem);
    }
    for (int i = 0; i < MAX_HANDLES; i++) {
        free(S.streams[i]);
        free(S.events[i]);
        if (S.modules[i] != NULL)
            free_module(S.modules[i]);
    }
    for (size_t i = 0; i < graveyard.count; i++)
        free(graveyard.dead[i]);
    while (quarantine.count > 0)
        quarantine_drop_oldest();
    graveyard.count = 0;
    reuse_reset();
    memset(&S, 0, sizeof(S));
    S.device_count = 1;
    S.device_memory = DEFAULT_MEMORY;
    S.pinned_memory = DEFAULT_MEMORY;
    S.max_pitch = DEFAULT_MAX_PITCH;
    current_context = NULL;
    context_depth = 0;
}

void gm_cuda_double_set_device_count(int count)
{
    S.device_count = count < 0 ? 0 : count > MAX_DEVICES ? MAX_DEVICES : count;
}

void gm_cuda_double_set_device_memory(size_t bytes)
{
    S.device_memory = bytes;
}

void gm_cuda_double_set_pinned_memory(size_t bytes)
{
    S.pinned_memory = bytes;
}

void gm_cuda_double_set_max_pitch(int pitch)
{
    S.max_pitch = pitch;
}

void gm_cuda_double_fail(const char *symbol, long n, CUresult result)
{
    pthread_mutex_lock(&log_lock);
    S.fail_symbol = symbol;
    S.fail_n = n;
    S.fail_result = result;
    pthread_mutex_unlock(&log_lock);
}

void gm_cuda_double_set_sticky(CUresult result)
{
    pthread_mutex_lock(&log_lock);
    S.sticky = result;
    pthread_mutex_unlock(&log_lock);
}

long gm_cuda_double_call_count(void)
{
    return S.log_count;
}

const char *gm_cuda_double_call_name(long i)
{
    return i >= 0 && i < S.log_count ? S.log[i] : NULL;
}

void gm_cuda_double_clear_calls(void)
{
    S.log_count = 0;
}

long gm_cuda_double_count_calls(const char *symbol)
{
    long count = 0;

    for (long i = 0; i < S.log_count; i++)
        count += strcmp(S.log[i], symbol) == 0;
    return count;
}

long gm_cuda_double_find_call(const char *symbol, long from)
{
    for (long i = from < 0 ? 0 : from; i < S.log_count; i++) {
        if (strcmp(S.log[i], symbol) == 0)
            return i;
    }
    return -1;
}

long gm_cuda_double_live_objects(void)
{
    long live = 0;

    for (int i = 0; i < S.alloc_top; i++)
        live += S.allocs[i].used != 0 && S.allocs[i].kind != ALLOC_GLOBAL;
    for (int i = 0; i < MAX_HANDLES; i++)
        live += (S.streams[i] != NULL) + (S.events[i] != NULL) + (S.modules[i] != NULL);
    for (int d = 0; d < MAX_DEVICES; d++)
        live += S.contexts[d].retain;
    return live;
}

long gm_cuda_double_violations(void)
{
    return S.violations;
}

const char *gm_cuda_double_last_violation(void)
{
    return S.last_violation;
}

long gm_cuda_double_stream_flags(CUstream stream)
{
    for (int i = 0; stream != NULL && i < MAX_HANDLES; i++) {
        if (S.streams[i] == stream)
            return (long)stream->flags;
    }
    return -1;
}

long gm_cuda_double_event_flags(CUevent event)
{
    return event_slot(event) >= 0 ? (long)event->flags : -1;
}

void gm_cuda_double_set_host_pointer_for_registered_mem(int can)
{
    S.host_pointer_for_registered = can != 0;
}

CUdeviceptr gm_cuda_double_device_address(const void *host)
{
    const alloc *a = containing((uintptr_t)host, 1, 0);

    if (a == NULL || a->device == 0)
        return 0;
    return (CUdeviceptr)(a->device + ((uintptr_t)host - a->base));
}

void *gm_cuda_double_host_address(CUdeviceptr device)
{
    const alloc *a = containing((uintptr_t)device, 1, 1);

    return a != NULL ? cpu_address(a, (uintptr_t)device) : NULL;
}

long gm_cuda_double_host_flags(const void *host)
{
    alloc *a = alloc_at((uintptr_t)host, ALLOC_PINNED);

    if (a == NULL)
        a = alloc_at((uintptr_t)host, ALLOC_REGISTERED);
    return a != NULL ? (long)a->flags : -1;
}

unsigned gm_cuda_double_last_launch_shared(void)
{
    return S.last_launch_shared;
}

/*
 * CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: by default what the
 * block's 48 KiB leave beside the kernel's static shared memory (cuda.h:
 * "MAX_SHARED_MEMORY_PER_BLOCK - SHARED_SIZE_BYTES"), else what was set.
 */
static int dynamic_limit(const struct CUfunc_st *f)
{
    if (f->max_dynamic_shared >= 0)
        return f->max_dynamic_shared;
    return f->static_shared >= DEFAULT_SHARED ? 0 : DEFAULT_SHARED - (int)f->static_shared;
}

long gm_cuda_double_function_max_dynamic_shared(CUfunction function)
{
    return function != NULL ? dynamic_limit(function) : -1;
}

/* ------------------------------------------------- lifecycle and device */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_NOTHING);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (Flags != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuInit: Flags must be 0, got %u", Flags);
    S.initialized = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_NOTHING);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (driverVersion == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion: NULL");
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}

/* Names and strings of the codes the double produces; others are unknown, as for old drivers. */
static const struct {
    CUresult code;
    const char *name;
    const char *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument (double)"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory (double)"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error (double)"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected (double)"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context (double)"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle (double)"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found (double)"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready (double)"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure (double)"},
};

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].code == error) {
            *pStr = error_table[i].name;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].code == error) {
            *pStr = error_table[i].text;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc != CUDA_SUCCESS)
        return rc;
    *count = S.device_count;
    return CUDA_SUCCESS;
}

static CUresult valid_device(const char *what, CUdevice dev)
{
    if (dev < 0 || dev >= S.device_count)
        return violation(CUDA_ERROR_INVALID_DEVICE, "%s: device %d of %d", what, dev,
                         S.device_count);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, dev);
    if (rc == CUDA_SUCCESS && (name == NULL || len <= 0))
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName: buffer %p of %d", name, len);
    if (rc == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "gpumem CUDA driver double %d", dev);
    return rc;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        *pi = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        *pi = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        *pi = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        *pi = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        *pi = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *pi = 4;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        *pi = DEFAULT_SHARED;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *pi = MAX_OPTIN_SHARED;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        *pi = S.max_pitch;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        *pi = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
        *pi = S.host_pointer_for_registered;
        break;
    default:
        *pi = 0;
        break;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = S.device_memory;
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    S.contexts[dev].device = dev;
    S.contexts[dev].retain++;
    *pctx = &S.contexts[dev];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        rc = valid_device(__func__, dev);
    if (rc == CUDA_SUCCESS && S.contexts[dev].retain <= 0)
        rc = violation(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: not retained");
    if (rc == CUDA_SUCCESS)
        S.contexts[dev].retain--;
    return rc;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc == CUDA_SUCCESS)
        *pctx = current_context;
    return rc;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx != NULL &&
        (ctx < &S.contexts[0] || ctx >= &S.contexts[MAX_DEVICES] || ctx->retain <= 0))
        return violation(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: %p is not a live context",
                         (void *)ctx);
    if (ctx != NULL) /* replaces the top of the stack */
        current_context = ctx;
    else /* cuda.h: "equivalent to popping the top of the calling CPU thread's" stack */
        current_context = context_depth > 0 ? context_stack[--context_depth] : NULL;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx < &S.contexts[0] || ctx >= &S.contexts[MAX_DEVICES] || ctx->retain <= 0)
        return violation(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPushCurrent: %p is not a live context",
                         (void *)ctx);
    if (context_depth == (int)(sizeof(context_stack) / sizeof(context_stack[0])))
        return violation(CUDA_ERROR_OUT_OF_MEMORY, "cuCtxPushCurrent: the stack is full");
    if (current_context != NULL)
        context_stack[context_depth++] = current_context;
    current_context = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_INIT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (current_context == NULL)
        return violation(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent: no current context");
    if (pctx != NULL)
        *pctx = current_context;
    current_context = context_depth > 0 ? context_stack[--context_depth] : NULL;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    *free_bytes = S.device_memory - S.device_used;
    *total_bytes = S.device_memory;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

/* Allocate owned memory of a kind, charging the right pool. */
static CUresult allocate(const char *what, alloc_kind kind, size_t bytes, unsigned flags,
                         void **mem_p)
{
    size_t *used = kind == ALLOC_PINNED ? &S.pinned_used : &S.device_used;
    size_t limit = kind == ALLOC_PINNED ? S.pinned_memory : S.device_memory;
    void *mem = NULL;
    alloc *a = NULL;

    if (bytes == 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: 0 bytes", what);
    if (bytes > limit - *used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    mem = reuse_take_block(kind, bytes, 0); /* the reuse mode: the newest freed like it */
    if (mem != NULL)
        memset(mem, 0xa5, bytes); /* the driver promises no contents: code must not count on 0 */
    else
        mem = calloc(1, bytes);
    if (mem == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a = new_alloc(kind, (uintptr_t)mem, bytes, flags, mem);
    if (a != NULL && kind == ALLOC_PINNED && map_host(a) == 0) {
        a->used = 0; /* no device address left for it */
        a = NULL;
    }
    if (a == NULL) {
        free(mem);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *used += bytes;
    *mem_p = mem;
    return CUDA_SUCCESS;
}

/* Free owned memory at `base` of one of two kinds. */
static CUresult release(const char *what, uintptr_t base, alloc_kind kind, alloc_kind other)
{
    alloc *a = alloc_at(base, kind);

    if (a == NULL)
        a = alloc_at(base, other);
    if (a == NULL && in_alias(base))
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "%s: %p is the device address of mapped host memory; free the host "
                         "address",
                         what, (void *)base);
    if (a == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: %p is not an allocation's base", what,
                         (void *)base);
    *(a->kind == ALLOC_PINNED ? &S.pinned_used : &S.device_used) -= a->bytes;
    if (in_alias(a->device))
        (void)reuse_keep_block(ALLOC_REGISTERED, (void *)a->device, a->bytes);
    if (reuse_keep_block(a->kind, a->mem, a->bytes) != 0)
        ; /* the reuse mode: the next allocation like it gets this address */
    else if (a->kind == ALLOC_DEVICE)
        quarantine_free(a->mem, a->bytes); /* host code never reads device memory */
    else
        free(a->mem);
    a->used = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    void *mem = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = allocate(__func__, ALLOC_DEVICE, bytesize, 0, &mem);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)mem;
    return rc;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = release(__func__, (uintptr_t)dptr, ALLOC_DEVICE, ALLOC_MANAGED);
    return rc;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS && (Flags & ~HOST_ALLOC_FLAGS) != 0)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: flags 0x%x", Flags);
    if (rc == CUDA_SUCCESS)
        rc = allocate(__func__, ALLOC_PINNED, bytesize, Flags, pp);
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = release(__func__, (uintptr_t)p, ALLOC_PINNED, ALLOC_PINNED);
    return rc;
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (Flags != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuMemHostGetDevicePointer: Flags %u", Flags);
    if (in_alias((uintptr_t)p))
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "cuMemHostGetDevicePointer: %p is already a device address of mapped "
                         "host memory; it takes the host address",
                         p);
    a = containing((uintptr_t)p, 1, 0);
    if (a == NULL || (a->kind != ALLOC_PINNED && a->kind != ALLOC_REGISTERED) || a->device == 0)
        return CUDA_ERROR_INVALID_VALUE; /* not mapped page-locked memory */
    *pdptr = (CUdeviceptr)(a->device + ((uintptr_t)p - a->base));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (p == NULL || bytesize == 0 || (Flags & ~HOST_REGISTER_FLAGS) != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister(%p, %zu, 0x%x)", p, bytesize,
                         Flags);
    /* cuda.h: READ_ONLY "with a current context associated with a device that does not have
     * [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] set will cause cuMemHostRegister
     * to error with CUDA_ERROR_NOT_SUPPORTED" (the double's devices report 0) */
    if ((Flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (in_alias((uintptr_t)p))
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "cuMemHostRegister: %p is a device address of mapped host memory", p);
    /* any byte of the range already registered or pinned (the ranges intersect) */
    for (int i = 0; i < S.alloc_top; i++) {
        a = &S.allocs[i];
        if (a->used != 0 && (a->kind == ALLOC_REGISTERED || a->kind == ALLOC_PINNED) &&
            a->base < (uintptr_t)p + bytesize && (uintptr_t)p < a->base + a->bytes)
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    a = new_alloc(ALLOC_REGISTERED, (uintptr_t)p, bytesize, Flags, NULL);
    if (a != NULL && map_host(a) == 0) {
        a->used = 0; /* no device address left for it */
        a = NULL;
    }
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (in_alias((uintptr_t)p))
        return violation(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                         "cuMemHostUnregister: %p is the device address of registered memory; "
                         "unregister the host address",
                         p);
    a = alloc_at((uintptr_t)p, ALLOC_REGISTERED);
    if (a == NULL)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (in_alias(a->device))
        (void)reuse_keep_block(ALLOC_REGISTERED, (void *)a->device, a->bytes);
    a->used = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    void *mem = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS && flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuMemAllocManaged: flags 0x%x", flags);
    if (rc == CUDA_SUCCESS)
        rc = allocate(__func__, ALLOC_MANAGED, bytesize, flags, &mem);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)mem;
    return rc;
}

/*
 * Memory types, managed-ness, and the device and host addresses of an
 * allocation, found by either of its addresses (cuda.h: for the disjoint
 * addressing exceptions, HOST_POINTER and DEVICE_POINTER "may be used to
 * retrieve the host and device addresses from either address").
 */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    alloc *a = NULL;
    unsigned value = 0;
    uintptr_t offset = 0;
    uintptr_t address = 0;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (data == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuPointerGetAttribute: NULL data");
    a = containing((uintptr_t)ptr, 1, 0);
    if (a != NULL) {
        offset = (uintptr_t)ptr - a->base;
    } else {
        a = containing((uintptr_t)ptr, 1, 1);
        if (a == NULL)
            return CUDA_ERROR_INVALID_VALUE; /* not memory the driver knows */
        offset = (uintptr_t)ptr - a->device;
    }
    if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
        attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
        int host_side =
            a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED || a->kind == ALLOC_MANAGED;

        if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER)
            address = a->device != 0 ? a->device + offset : 0;
        else
            address = host_side != 0 ? a->base + offset : 0;
        if (address == 0)
            return CUDA_ERROR_INVALID_VALUE;     /* no such address: an answer, not a misuse */
        memcpy(data, &address, sizeof(address)); /* CUdeviceptr or void * */
        return CUDA_SUCCESS;
    }
    if (attribute == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        value = a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED ? CU_MEMORYTYPE_HOST
                                                                       : CU_MEMORYTYPE_DEVICE;
    else if (attribute == CU_POINTER_ATTRIBUTE_IS_MANAGED)
        value = a->kind == ALLOC_MANAGED;
    else
        return violation(CUDA_ERROR_INVALID_VALUE, "cuPointerGetAttribute: attribute %d",
                         (int)attribute);
    memcpy(data, &value, sizeof(value));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    a = containing((uintptr_t)dptr, 1, 1);
    if (a == NULL)
        return violation(CUDA_ERROR_NOT_FOUND, "cuMemGetAddressRange: 0x%llx is not allocated",
                         (unsigned long long)dptr);
    if (pbase != NULL)
        *pbase = (CUdeviceptr)a->device;
    if (psize != NULL)
        *psize = a->bytes;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    alloc *a = NULL;
    uint32_t magic = MAGIC_IPC;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    a = containing((uintptr_t)dptr, 1, 1);
    if (a == NULL || a->kind != ALLOC_DEVICE)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuIpcGetMemHandle: not device memory");
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &magic, sizeof(magic));
    memcpy(pHandle->reserved + 8, &a->base, sizeof(a->base));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    uint32_t magic = 0;
    uintptr_t base = 0;
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuIpcOpenMemHandle: Flags %u", Flags);
    memcpy(&magic, handle.reserved, sizeof(magic));
    memcpy(&base, handle.reserved + 8, sizeof(base));
    a = alloc_at(base, ALLOC_DEVICE);
    if (magic != MAGIC_IPC || a == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuIpcOpenMemHandle: bad handle");
    if (new_alloc(ALLOC_IPC, a->base, a->bytes, 0, NULL) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pdptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    alloc *a = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    a = alloc_at((uintptr_t)dptr, ALLOC_IPC);
    if (a == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuIpcCloseMemHandle: not an IPC mapping");
    a->used = 0;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- copies */

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static int ranges_overlap(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

/*
 * cuda_runtime_api.h (cudaMemcpy2D, cudaMemcpyAsync, cudaMemcpy3D, which are
 * these calls): "The memory areas may not overlap"; "If overlapping source
 * and destination objects are specified, undefined behavior will result".
 * The double's memmove would hide it.
 */
static CUresult copy_linear(const char *what, void *dst, const void *src, size_t bytes,
                            CUstream stream)
{
    CUresult rc = valid_stream(what, stream);

    if (rc == CUDA_SUCCESS && ranges_overlap((uintptr_t)dst, bytes, (uintptr_t)src, bytes))
        rc = violation(CUDA_ERROR_INVALID_VALUE,
                       "%s: source %p and destination %p of %zu bytes "
                       "overlap",
                       what, src, dst, bytes);
    if (rc == CUDA_SUCCESS && bytes > 0)
        memmove(dst, src, bytes);
    return rc;
}

/* Host to device: the device range (translated for the CPU) and the host pointer checked. */
static CUresult copy_htod(const char *what, CUdeviceptr dst, const void *src, size_t bytes,
                          CUstream stream)
{
    void *to = NULL;
    CUresult rc = device_range(what, dst, bytes, &to);

    if (rc == CUDA_SUCCESS)
        rc = host_pointer(what, src);
    if (rc == CUDA_SUCCESS)
        rc = copy_linear(what, to, src, bytes, stream);
    return rc;
}

static CUresult copy_dtoh(const char *what, void *dst, CUdeviceptr src, size_t bytes,
                          CUstream stream)
{
    void *from = NULL;
    CUresult rc = device_range(what, src, bytes, &from);

    if (rc == CUDA_SUCCESS)
        rc = host_pointer(what, dst);
    if (rc == CUDA_SUCCESS)
        rc = copy_linear(what, dst, from, bytes, stream);
    return rc;
}

static CUresult copy_dtod(const char *what, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                          CUstream stream)
{
    void *to = NULL;
    void *from = NULL;
    CUresult rc = device_range(what, dst, bytes, &to);

    if (rc == CUDA_SUCCESS)
        rc = device_range(what, src, bytes, &from);
    if (rc == CUDA_SUCCESS)
        rc = copy_linear(what, to, from, bytes, stream);
    return rc;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_htod(__func__, dstDevice, srcHost, ByteCount, NULL) : rc;
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_dtoh(__func__, dstHost, srcDevice, ByteCount, NULL) : rc;
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_dtod(__func__, dstDevice, srcDevice, ByteCount, NULL) : rc;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_htod(__func__, dstDevice, srcHost, ByteCount, hStream) : rc;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_dtoh(__func__, dstHost, srcDevice, ByteCount, hStream) : rc;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? copy_dtod(__func__, dstDevice, srcDevice, ByteCount, hStream) : rc;
}

/* One side of a pitched copy, normalized from CUDA_MEMCPY2D / CUDA_MEMCPY3D. */
typedef struct side {
    CUmemorytype type;
    uintptr_t base; /* host or device address of (x, y, z) = (0, 0, 0) after the offsets */
    size_t pitch;
    size_t height; /* rows per plane */
    uintptr_t cpu; /* where the CPU reaches base (check_side sets it) */
} side;

/* The bytes a side spans (defined with the overlap check below). */
static size_t side_extent(const side *s, size_t width, size_t rows, size_t depth);

/*
 * Check one side: type, pitch against width and the device's limit, the
 * whole extent; find where the CPU reaches it. CU_MEMORYTYPE_UNIFIED takes
 * either address of mapped host memory (cuda.h: "Either the host or the
 * unified device pointer value may be used").
 */
static CUresult check_side(const char *what, const char *name, side *s, size_t width, size_t rows,
                           size_t depth)
{
    size_t extent = side_extent(s, width, rows, depth);
    void *cpu = NULL;
    CUresult rc = CUDA_SUCCESS;

    if (s->type != CU_MEMORYTYPE_HOST && s->type != CU_MEMORYTYPE_DEVICE &&
        s->type != CU_MEMORYTYPE_UNIFIED)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: %s memory type %d", what, name,
                         (int)s->type);
    if (s->pitch < width)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: %s pitch %zu < WidthInBytes %zu", what,
                         name, s->pitch, width);
    if (s->pitch > (size_t)S.max_pitch)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: %s pitch %zu > max pitch %d", what, name,
                         s->pitch, S.max_pitch);
    s->cpu = s->base;
    if (s->type == CU_MEMORYTYPE_DEVICE ||
        (s->type == CU_MEMORYTYPE_UNIFIED && in_alias(s->base))) {
        rc = device_range(what, (CUdeviceptr)s->base, extent, &cpu);
        s->cpu = (uintptr_t)cpu;
        return rc;
    }
    return host_pointer(what, (const void *)s->base);
}

/*
 * cuda.h: "On intra-device memory copies (device to device, CUDA array to
 * device, CUDA array to CUDA array), cuMemcpy2D() may fail for pitches not
 * computed by cuMemAllocPitch()". Modelled, when asked, as pitches that are
 * not multiples of dtod_pitch_align (more than one row).
 */
static CUresult check_dtod_pitches(const char *what, const side *dst, const side *src, size_t rows,
                                   size_t depth)
{
    size_t a = S.dtod_pitch_align;

    if (a == 0 || dst->type == CU_MEMORYTYPE_HOST || src->type == CU_MEMORYTYPE_HOST ||
        (rows == 1 && depth == 1))
        return CUDA_SUCCESS;
    if (dst->pitch % a != 0 || src->pitch % a != 0)
        return CUDA_ERROR_INVALID_VALUE; /* the driver's refusal, not a misuse */
    (void)what;
    return CUDA_SUCCESS;
}

void gm_cuda_double_set_dtod_pitch_align(size_t align)
{
    S.dtod_pitch_align = align;
}

/* Bytes from a side's first row to the end of its last. */
static size_t side_extent(const side *s, size_t width, size_t rows, size_t depth)
{
    return (depth - 1) * s->pitch * s->height + (rows - 1) * s->pitch + width;
}

/*
 * Whether a row of dst shares a byte with a row of src, where the CPU reaches
 * them (check_side set cpu; the rows of a side
 * are at least width bytes apart, so a dst row can only meet the src rows
 * starting within width bytes of it: those next to floor((d - plane) / pitch)).
 */
static int pitched_overlap(const side *dst, const side *src, size_t width, size_t rows,
                           size_t depth)
{
    if (!ranges_overlap(dst->cpu, side_extent(dst, width, rows, depth), src->cpu,
                        side_extent(src, width, rows, depth)))
        return 0;
    for (size_t dz = 0; dz < depth; dz++) {
        for (size_t dy = 0; dy < rows; dy++) {
            uintptr_t d = dst->cpu + (dz * dst->height + dy) * dst->pitch;

            for (size_t sz = 0; sz < depth; sz++) {
                uintptr_t plane = src->cpu + sz * src->height * src->pitch;
                long long y0 = d >= plane ? (long long)((d - plane) / src->pitch)
                                          : -(long long)((plane - d) / src->pitch) - 1;

                for (long long y = y0 - 1; y <= y0 + 1; y++) {
                    if (y >= 0 && (size_t)y < rows &&
                        ranges_overlap(d, width, plane + (size_t)y * src->pitch, width))
                        return 1;
                }
            }
        }
    }
    return 0;
}

/* Copy depth planes of rows rows of width bytes between two checked sides. */
static void copy_pitched(const side *dst, const side *src, size_t width, size_t rows, size_t depth)
{
    for (size_t z = 0; z < depth; z++) {
        for (size_t y = 0; y < rows; y++) {
            memmove((void *)(dst->cpu + (z * dst->height + y) * dst->pitch),
                    (const void *)(src->cpu + (z * src->height + y) * src->pitch), width);
        }
    }
}

static side side_2d(CUmemorytype type, const void *host, CUdeviceptr device, size_t x, size_t y,
                    size_t pitch)
{
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)device;
    side s = {type, base + y * pitch + x, pitch, 1, 0};

    return s;
}

static CUresult memcpy_2d(const char *what, const CUDA_MEMCPY2D *p, CUstream stream)
{
    side src;
    side dst;
    CUresult rc = valid_stream(what, stream);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (p == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: NULL descriptor", what);
    src = side_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch);
    dst = side_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch);
    src.height = dst.height = p->Height;
    if (p->WidthInBytes == 0 || p->Height == 0)
        return CUDA_SUCCESS;
    rc = check_side(what, "src", &src, p->WidthInBytes, p->Height, 1);
    if (rc == CUDA_SUCCESS)
        rc = check_side(what, "dst", &dst, p->WidthInBytes, p->Height, 1);
    if (rc == CUDA_SUCCESS)
        rc = check_dtod_pitches(what, &dst, &src, p->Height, 1);
    if (rc == CUDA_SUCCESS && pitched_overlap(&dst, &src, p->WidthInBytes, p->Height, 1))
        rc = violation(CUDA_ERROR_INVALID_VALUE, "%s: source and destination overlap", what);
    if (rc == CUDA_SUCCESS)
        copy_pitched(&dst, &src, p->WidthInBytes, p->Height, 1);
    return rc;
}

CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D *pCopy)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? memcpy_2d(__func__, pCopy, NULL) : rc;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? memcpy_2d(__func__, pCopy, hStream) : rc;
}

static side side_3d(CUmemorytype type, const void *host, CUdeviceptr device, size_t x, size_t y,
                    size_t z, size_t pitch, size_t height)
{
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)device;
    side s = {type, base + (z * height + y) * pitch + x, pitch, height, 0};

    return s;
}

static CUresult check_3d_fields(const char *what, const CUDA_MEMCPY3D *p)
{
    if (p->reserved0 != NULL || p->reserved1 != NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: reserved0/reserved1 must be NULL", what);
    if (p->srcLOD != 0 || p->dstLOD != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: LOD must be 0", what);
    if (p->Depth > 1 && (p->srcHeight < p->Height || p->dstHeight < p->Height))
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: srcHeight %zu / dstHeight %zu < Height %zu",
                         what, p->srcHeight, p->dstHeight, p->Height);
    return CUDA_SUCCESS;
}

static CUresult memcpy_3d(const char *what, const CUDA_MEMCPY3D *p, CUstream stream)
{
    side src;
    side dst;
    CUresult rc = valid_stream(what, stream);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (p == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: NULL descriptor", what);
    rc = check_3d_fields(what, p);
    if (rc != CUDA_SUCCESS || p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return rc;
    src = side_3d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
                  p->srcPitch, p->srcHeight);
    dst = side_3d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
                  p->dstPitch, p->dstHeight);
    rc = check_side(what, "src", &src, p->WidthInBytes, p->Height, p->Depth);
    if (rc == CUDA_SUCCESS)
        rc = check_side(what, "dst", &dst, p->WidthInBytes, p->Height, p->Depth);
    if (rc == CUDA_SUCCESS)
        rc = check_dtod_pitches(what, &dst, &src, p->Height, p->Depth);
    if (rc == CUDA_SUCCESS && pitched_overlap(&dst, &src, p->WidthInBytes, p->Height, p->Depth))
        rc = violation(CUDA_ERROR_INVALID_VALUE, "%s: source and destination overlap", what);
    if (rc == CUDA_SUCCESS)
        copy_pitched(&dst, &src, p->WidthInBytes, p->Height, p->Depth);
    return rc;
}

CUresult CUDAAPI cuMemcpy3D(const CUDA_MEMCPY3D *pCopy)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? memcpy_3d(__func__, pCopy, NULL) : rc;
}

CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? memcpy_3d(__func__, pCopy, hStream) : rc;
}

/* ---------------------------------------------------------------- memset */

/* rows rows of width elements of `size` bytes, pitch bytes apart, set to `value`. */
static CUresult fill(const char *what, CUdeviceptr dst, size_t pitch, const void *value,
                     size_t size, size_t width, size_t rows, CUstream stream)
{
    void *cpu = NULL;
    CUresult rc = valid_stream(what, stream);

    if (rc != CUDA_SUCCESS || width == 0 || rows == 0)
        return rc;
    if (dst % size != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx not aligned to %zu", what,
                         (unsigned long long)dst, size);
    if (rows > 1 && pitch < width * size)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: pitch %zu < row %zu", what, pitch,
                         width * size);
    /* cuMemsetD2D16/32: "The dstDevice pointer and dstPitch offset must be two / four byte
     * aligned" (the pitch is unused for one row) */
    if (rows > 1 && pitch % size != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "%s: pitch %zu not aligned to %zu", what, pitch,
                         size);
    rc = device_range(what, dst, (rows - 1) * pitch + width * size, &cpu);
    for (size_t y = 0; rc == CUDA_SUCCESS && y < rows; y++) {
        for (size_t x = 0; x < width; x++)
            memcpy((char *)cpu + y * pitch + x * size, value, size);
    }
    return rc;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, N, &uc, 1, N, 1, NULL) : rc;
}

CUresult CUDAAPI cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, 2 * N, &us, 2, N, 1, NULL) : rc;
}

CUresult CUDAAPI cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, 4 * N, &ui, 4, N, 1, NULL) : rc;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, N, &uc, 1, N, 1, hStream) : rc;
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                  CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, 2 * N, &us, 2, N, 1, hStream) : rc;
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, 4 * N, &ui, 4, N, 1, hStream) : rc;
}

CUresult CUDAAPI cuMemsetD2D32(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                               size_t Width, size_t Height)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, dstPitch, &ui, 4, Width, Height, NULL)
                              : rc;
}

CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                    size_t Width, size_t Height, CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? fill(__func__, dstDevice, dstPitch, &ui, 4, Width, Height, hStream)
                              : rc;
}

/* ---------------------------------------------------- streams and events */

/* The reuse mode: a destroyed stream or event whose work is done may be handed out again. */
static int stream_reusable(void *handle)
{
    return held_pending(((struct CUstream_st *)handle)->last_held) == 0;
}

static int event_reusable(void *handle)
{
    return held_pending(((struct CUevent_st *)handle)->after) == 0;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    struct CUstream_st *stream = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if ((Flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: Flags 0x%x", Flags);
    stream = reuse_take(&reuse.streams, stream_reusable);
    if (stream == NULL)
        stream = calloc(1, sizeof(*stream));
    if (stream == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *stream = (struct CUstream_st){MAGIC_STREAM, Flags, current_context, 0};
    if (add_handle((void **)S.streams, stream) == 0) {
        free(stream);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = stream;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    for (int i = 0; hStream != NULL && i < MAX_HANDLES; i++) {
        if (S.streams[i] == hStream) {
            S.streams[i] = NULL;
            hStream->magic = 0;
            if (reuse_keep(&reuse.streams, hStream) == 0)
                bury(hStream);
            return CUDA_SUCCESS;
        }
    }
    return violation(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy: %p is not a created stream",
                     (void *)hStream);
}

/* Every stream's work is done when its call returns (the double runs nothing later). */
CUresult CUDAAPI cuCtxSynchronize(void)
{
    API_LOCK;

    return enter(__func__, NEED_CONTEXT);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? valid_stream(__func__, hStream) : rc;
}

/* A stream with a held callback not run yet has work left: CUDA_ERROR_NOT_READY. */
CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    if (rc == CUDA_SUCCESS && held_pending(*last_held_of(hStream)))
        rc = CUDA_ERROR_NOT_READY;
    return rc;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hEvent);
    if (rc == CUDA_SUCCESS && Flags != 0)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: Flags %u", Flags);
    return rc;
}

/* Run a stream callback as the driver would: no CUDA call is allowed inside it. */
static void run_callback(CUstream stream, CUstreamCallback fn, CUresult status, void *data)
{
    int locked = api_locked;

    api_lock_drop(&locked);
    in_callback++;
    fn(stream, status, data);
    in_callback--;
    if (locked != 0)
        api_lock_take();
}

CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                     unsigned int flags)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    if (rc == CUDA_SUCCESS && callback == NULL)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuStreamAddCallback: NULL callback");
    if (rc == CUDA_SUCCESS && flags != 0)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuStreamAddCallback: flags %u", flags);
    if (rc == CUDA_SUCCESS && S.hold_callbacks) {
        pthread_mutex_lock(&held_lock);
        if (S.held_count == (int)(sizeof(S.held) / sizeof(S.held[0])))
            rc = violation(CUDA_ERROR_OUT_OF_MEMORY, "cuStreamAddCallback: too many held");
        else {
            S.held[S.held_count].stream = hStream;
            S.held[S.held_count].fn = callback;
            S.held[S.held_count].data = userData;
            S.held[S.held_count++].number = ++S.held_queued;
            *last_held_of(hStream) = S.held_queued;
        }
        pthread_mutex_unlock(&held_lock);
        return rc;
    }
    if (rc == CUDA_SUCCESS)
        run_callback(hStream, callback, S.callback_status, userData);
    return rc;
}

void gm_cuda_double_hold_callbacks(int hold)
{
    S.hold_callbacks = hold;
}

int gm_cuda_double_run_held_callbacks(CUresult status)
{
    int n = 0;
    __typeof__(S.held) held; /* run outside held_lock: a callback may wait for a driver call */

    pthread_mutex_lock(&held_lock);
    n = S.held_count;
    memcpy(held, S.held, sizeof(held));
    S.held_count = 0;
    pthread_mutex_unlock(&held_lock);
    for (int i = 0; i < n; i++) {
        run_callback(held[i].stream, held[i].fn, status, held[i].data);
        pthread_mutex_lock(&held_lock);
        S.held_ran = held[i].number; /* the work behind it on its stream is done now */
        pthread_mutex_unlock(&held_lock);
    }
    return n;
}

void gm_cuda_double_set_callback_status(CUresult status)
{
    S.callback_status = status;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    if (rc == CUDA_SUCCESS && captureStatus == NULL)
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuStreamIsCapturing: NULL captureStatus");
    if (rc == CUDA_SUCCESS && S.capturing == 2 && (hStream == CU_STREAM_LEGACY || hStream == NULL))
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (rc == CUDA_SUCCESS)
        *captureStatus =
            S.capturing == 1 ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return rc;
}

void gm_cuda_double_set_capturing(int capturing)
{
    S.capturing = capturing;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUevent_st *event = NULL;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if ((Flags & ~EVENT_FLAGS) != 0 ||
        ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0))
        return violation(CUDA_ERROR_INVALID_VALUE, "cuEventCreate: Flags 0x%x", Flags);
    event = reuse_take(&reuse.events, event_reusable);
    if (event != NULL)
        memset(event, 0, sizeof(*event));
    else
        event = calloc(1, sizeof(*event));
    if (event == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    event->magic = MAGIC_EVENT;
    event->flags = Flags;
    event->ctx = current_context;
    if (add_handle((void **)S.events, event) == 0) {
        free(event);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = event;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    int slot = -1;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hEvent);
    if (rc != CUDA_SUCCESS)
        return rc;
    slot = event_slot(hEvent);
    S.events[slot] = NULL;
    hEvent->magic = 0;
    if (reuse_keep(&reuse.events, hEvent) == 0)
        bury(hEvent);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hEvent);
    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    /* cuda.h: "hEvent and hStream must be from the same context otherwise
     * CUDA_ERROR_INVALID_HANDLE is returned" (a built-in stream is the current context's). */
    if (rc == CUDA_SUCCESS && hEvent->ctx != stream_context(hStream))
        rc = violation(CUDA_ERROR_INVALID_HANDLE,
                       "cuEventRecord: event %p of context %p, stream %p of context %p",
                       (void *)hEvent, (void *)hEvent->ctx, (void *)hStream,
                       (void *)stream_context(hStream));
    if (rc == CUDA_SUCCESS) {
        S.clock_ms += 1.5;
        hEvent->recorded = 1;
        hEvent->time_ms = S.clock_ms;
        hEvent->after = *last_held_of(hStream); /* completes after the stream's held callbacks */
    }
    return rc;
}

/* An event recorded behind a held callback not run yet is not complete: CUDA_ERROR_NOT_READY. */
CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hEvent);
    if (rc == CUDA_SUCCESS && held_pending(hEvent->after))
        rc = CUDA_ERROR_NOT_READY;
    return rc;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    return rc == CUDA_SUCCESS ? valid_event(__func__, hEvent) : rc;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hStart);
    if (rc == CUDA_SUCCESS)
        rc = valid_event(__func__, hEnd);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) != 0 || hStart->recorded == 0 ||
        hEnd->recorded == 0)
        return CUDA_ERROR_INVALID_HANDLE; /* the driver's answer, not a misuse of it */
    /* "If cuEventRecord() has been called on both events but one or both of them has not yet
     * been completed ..., CUDA_ERROR_NOT_READY is returned." */
    if (held_pending(hStart->after) || held_pending(hEnd->after))
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)(hEnd->time_ms - hStart->time_ms);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------ PTX modules */

/* Bytes of a PTX type token: .b8 .u16 .s32 .f64 ... (0 for anything else). */
static size_t type_size(const char *token)
{
    size_t i = 0;
    unsigned long bits = 0;

    if (token[0] != '.' || strchr("busf", token[1]) == NULL || token[1] == '\0')
        return 0;
    for (i = 2; token[i] >= '0' && token[i] <= '9'; i++)
        bits = bits * 10 + (unsigned long)(token[i] - '0');
    return bits % 8 == 0 && bits > 0 ? bits / 8 : 0;
}

/* Copy the next token (letters, digits, '.', '_', '$', '[', ']') at *p into out. */
static const char *next_token(const char *p, char *out, size_t out_size)
{
    size_t n = 0;

    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    while (*p != '\0' && strchr(" \t\r\n,;()={}", *p) == NULL) {
        if (n + 1 < out_size)
            out[n++] = *p;
        p++;
    }
    out[n] = '\0';
    return p;
}

/* "name[16]" -> name and 16 (1 without brackets). */
static size_t split_array(char *token)
{
    char *bracket = strchr(token, '[');
    size_t count = 1;

    if (bracket != NULL) {
        count = (size_t)strtoul(bracket + 1, NULL, 10);
        *bracket = '\0';
    }
    return count;
}

/*
 * After ".param", ".shared" or a .const/.global keyword: read ".align N" (else the type's
 * size is the alignment), return the size of "type name[N]".
 */
static const char *typed_name(const char *p, char *name, size_t name_size, size_t *bytes_p,
                              size_t *align_p)
{
    char token[NAME_LEN];
    size_t size = 0;
    size_t align = 0;

    p = next_token(p, token, sizeof(token));
    if (strcmp(token, ".align") == 0) {
        p = next_token(p, token, sizeof(token));
        align = (size_t)strtoul(token, NULL, 10);
        p = next_token(p, token, sizeof(token));
    }
    size = type_size(token);
    p = next_token(p, name, name_size);
    *bytes_p = size * split_array(name);
    if (align_p != NULL)
        *align_p = align > 0 ? align : (size > 0 ? size : 1);
    return p;
}

/* Parse the parameter list of one .entry starting at its '('. */
static void parse_params(const char *p, struct CUfunc_st *f)
{
    const char *end = strchr(p, ')');
    size_t offset = 0;

    while (end != NULL && (p = strstr(p, ".param")) != NULL && p < end && f->nparams < MAX_PARAMS) {
        char name[NAME_LEN];
        size_t bytes = 0;
        size_t align = 1;

        p = typed_name(p + strlen(".param"), name, sizeof(name), &bytes, &align);
        offset = (offset + align - 1) / align * align;
        f->sizes[f->nparams] = bytes;
        f->offsets[f->nparams] = offset;
        offset += bytes;
        f->nparams++;
    }
}

/* Static shared memory of one .entry: its body's ".shared" arrays (not ".extern .shared"). */
static size_t parse_static_shared(const char *p)
{
    const char *body = strchr(p, '{');
    size_t total = 0;
    int depth = 0;

    for (p = body; p != NULL && *p != '\0'; p++) {
        depth += (*p == '{') - (*p == '}');
        if (depth == 0)
            break;
        if (strncmp(p, ".shared ", 8) == 0 &&
            (p - body < 8 || strncmp(p - 8, ".extern ", 8) != 0)) {
            char name[NAME_LEN];
            size_t bytes = 0;
            size_t align = 1;

            p = typed_name(p + strlen(".shared"), name, sizeof(name), &bytes, &align) - 1;
            total = (total + align - 1) / align * align + bytes;
        }
    }
    return total;
}

/* A new kernel of module m (name still empty), or NULL when the module is full. */
static struct CUfunc_st *add_kernel(struct CUmod_st *m)
{
    struct CUfunc_st *f = NULL;

    if (m->nkernels == MAX_KERNELS)
        return NULL;
    f = &m->kernels[m->nkernels++];
    f->magic = MAGIC_FUNCTION;
    f->module = m;
    f->max_dynamic_shared = -1; /* the default: dynamic_limit */
    return f;
}

static CUresult parse_entries(const char *text, struct CUmod_st *m)
{
    const char *p = text;

    while ((p = strstr(p, ".entry")) != NULL) {
        struct CUfunc_st *f = add_kernel(m);

        if (f == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        p = next_token(p + strlen(".entry"), f->name, sizeof(f->name));
        parse_params(p, f);
        f->static_shared = parse_static_shared(p);
    }
    return m->nkernels > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

/* Zeroed memory for a module global, registered as device memory. */
static CUresult global_memory(module_global *g)
{
    g->mem = calloc(1, g->bytes);
    if (g->mem == NULL || new_alloc(ALLOC_GLOBAL, (uintptr_t)g->mem, g->bytes, 0, g->mem) == NULL) {
        free(g->mem);
        g->mem = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Module-scope ".const" / ".global" definitions (outside every brace). */
static CUresult parse_globals(const char *text, struct CUmod_st *m)
{
    int depth = 0;

    for (const char *p = text; *p != '\0'; p++) {
        depth += (*p == '{') - (*p == '}');
        if (depth != 0 || (strncmp(p, ".const ", 7) != 0 && strncmp(p, ".global ", 8) != 0))
            continue;
        if (m->nglobals == MAX_GLOBALS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        module_global *g = &m->globals[m->nglobals];
        p = typed_name(strchr(p, ' '), g->name, sizeof(g->name), &g->bytes, NULL);
        if (g->bytes == 0)
            return CUDA_ERROR_INVALID_PTX;
        if (global_memory(g) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        m->nglobals++;
        p--;
    }
    return CUDA_SUCCESS;
}

/* Read the JIT options: the error log buffer and its size (both or neither). */
static CUresult jit_log(unsigned n, const CUjit_option *options, void **values, char **log,
                        size_t *log_size)
{
    int have_buffer = 0;
    int have_size = 0;

    if (n > 0 && (options == NULL || values == NULL))
        return violation(CUDA_ERROR_INVALID_VALUE, "cuModuleLoadDataEx: %u options, no arrays", n);
    for (unsigned i = 0; i < n; i++) {
        if (options[i] == CU_JIT_ERROR_LOG_BUFFER) {
            *log = values[i];
            have_buffer = 1;
        } else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
            *log_size = (size_t)(uintptr_t)values[i];
            have_size = 1;
        }
    }
    if (have_buffer != have_size)
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "cuModuleLoadDataEx: error log buffer without its size or vice versa");
    return CUDA_SUCCESS;
}

static CUresult load_ptx(const char *text, struct CUmod_st *m, char *log, size_t log_size)
{
    CUresult rc = CUDA_SUCCESS;

    if (strstr(text, "GM_DOUBLE_JIT_ERROR") != NULL) {
        if (log != NULL && log_size > 0)
            snprintf(log, log_size, "ptxas fatal: GM_DOUBLE_JIT_ERROR requested by the test");
        return CUDA_ERROR_INVALID_PTX;
    }
    if (strstr(text, ".version") == NULL || strstr(text, ".target") == NULL)
        return CUDA_ERROR_INVALID_IMAGE;
    rc = parse_entries(text, m);
    if (rc == CUDA_SUCCESS)
        rc = parse_globals(text, m);
    return rc;
}

/* ------------------------------------------------------------ fatbins */

/*
 * A fatbin (what nvcc -fatbin writes and the library embeds) is a 16-byte
 * header { u32 magic 0xBA55ED50, u16 version 1, u16 header size, u64 bytes
 * of entries } followed by entries, each a header of at least 64 bytes
 * { u16 kind (1 PTX, 2 ELF cubin), u16 version, u32 header size, u64
 * payload bytes, u32 compressed bytes, u32, u16 minor, u16 major, u32 arch,
 * u32 name offset, u32 name bytes, u64 flags, u64, u64 uncompressed bytes }
 * and its payload. A runtime-registered image may instead start with the
 * wrapper { u32 magic 0x466243B1, u32 version, const void *fatbin, ... }.
 * The double reads the first uncompressed PTX entry (its .entry and .const
 * declarations are what the driver would see after choosing the code), else
 * the first uncompressed cubin; it cannot decompress entries.
 */
#define FATBIN_MAGIC           0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC   0x466243B1u
#define FATBIN_HEADER_BYTES    16u
#define FATBIN_ENTRY_BYTES     64u
#define FATBIN_KIND_PTX        1u
#define FATBIN_KIND_ELF        2u
#define ELF_MAGIC              0x464c457fu /* "\177ELF" */
#define FATBIN_FLAG_COMPRESSED 0xa000u     /* LZ4 (0x2000) or the newer scheme (0x8000) */

static uint32_t read_u32(const unsigned char *p)
{
    uint32_t v = 0;

    memcpy(&v, p, sizeof(v));
    return v;
}

/* Whether p starts with the little-endian bytes of magic (stops at the first mismatch). */
static int has_magic(const unsigned char *p, uint32_t magic)
{
    for (int i = 0; i < 4; i++) {
        if (p[i] != (unsigned char)(magic >> (8 * i)))
            return 0;
    }
    return 1;
}

static uint64_t read_u64(const unsigned char *p)
{
    uint64_t v = 0;

    memcpy(&v, p, sizeof(v));
    return v;
}

/* The first uncompressed entry of `kind` in a fatbin: its payload and size. */
static CUresult fatbin_entry(const unsigned char *image, unsigned kind,
                             const unsigned char **payload_p, uint64_t *bytes_p)
{
    uint16_t version = (uint16_t)(image[4] | image[5] << 8);
    uint16_t header = (uint16_t)(image[6] | image[7] << 8);
    uint64_t total = read_u64(image + 8);
    const unsigned char *p = image + header;

    if (version != 1 || header < FATBIN_HEADER_BYTES)
        return CUDA_ERROR_INVALID_IMAGE;
    while (total >= FATBIN_ENTRY_BYTES) {
        uint64_t entry_header = read_u32(p + 4);
        uint64_t payload = read_u64(p + 8);
        int compressed = (read_u64(p + 40) & FATBIN_FLAG_COMPRESSED) != 0 ||
                         read_u64(p + 56) != 0 || read_u32(p + 16) != 0;

        if (entry_header < FATBIN_ENTRY_BYTES || entry_header > total ||
            payload > total - entry_header)
            return CUDA_ERROR_INVALID_IMAGE;
        if ((unsigned)(p[0] | p[1] << 8) == kind && compressed == 0) {
            *payload_p = p + entry_header;
            *bytes_p = payload;
            return CUDA_SUCCESS;
        }
        p += entry_header + payload;
        total -= entry_header + payload;
    }
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

/* ------------------------------------------------------------- cubins */

/*
 * An ELF cubin (e_machine 190): kernels are FUNC symbols marked as entries
 * (st_other 0x10); each has a ".nv.info.<kernel>" section of attributes
 * {u8 format, u8 attribute, ...}, where KPARAM_INFO (0x17, format 4: a u16
 * size then the value) gives {u32, u16 ordinal, u16 offset, u32 flags with
 * the size in bits 18..31} per parameter (other formats: 1 no value, 2 and
 * 3 a 2-byte value), and static shared memory is the
 * size of ".nv.shared.<kernel>". __constant__ and __device__ variables are
 * OBJECT symbols in ".nv.constant3" / ".nv.global*".
 */
#define ELF_MACHINE_CUDA   190u
#define ELF_SHDR_BYTES     64u
#define ELF_SYM_BYTES      24u
#define ELF_SHT_SYMTAB     2u
#define ELF_SHT_NOBITS     8u
#define ELF_STT_OBJECT     1u
#define ELF_STT_FUNC       2u
#define ELF_STO_CUDA_ENTRY 0x10u
#define EIFMT_NVAL         1u
#define EIFMT_HVAL         3u
#define EIFMT_SVAL         4u
#define EIATTR_KPARAM_INFO 0x17u
#define KPARAM_SIZE_SHIFT  18u
#define KPARAM_SIZE_MASK   0x3fffu

typedef struct elf_image {
    const unsigned char *data;
    uint64_t bytes; /* what may be read (UINT64_MAX for a bare cubin, as the driver trusts it) */
    uint64_t shoff;
    unsigned shnum, shstrndx;
} elf_image;

/* Section i's header field at `field` (u32 or u64 as asked). */
static uint64_t sh_field(const elf_image *e, unsigned i, unsigned field, int wide)
{
    const unsigned char *h = e->data + e->shoff + (uint64_t)i * ELF_SHDR_BYTES;

    return wide != 0 ? read_u64(h + field) : read_u32(h + field);
}

static int elf_range(const elf_image *e, uint64_t offset, uint64_t bytes)
{
    return offset <= e->bytes && bytes <= e->bytes - offset;
}

/* The NUL-terminated string at `offset` of string section `strtab`, or NULL. */
static const char *elf_string(const elf_image *e, unsigned strtab, uint64_t offset)
{
    uint64_t base = strtab < e->shnum ? sh_field(e, strtab, 24, 1) : 0;
    uint64_t size = strtab < e->shnum ? sh_field(e, strtab, 32, 1) : 0;

    if (offset >= size || memchr(e->data + base + offset, '\0', (size_t)(size - offset)) == NULL)
        return NULL;
    return (const char *)e->data + base + offset;
}

static const char *section_name(const elf_image *e, unsigned i)
{
    return elf_string(e, e->shstrndx, sh_field(e, i, 0, 0));
}

/* The section called prefix + name, or e->shnum. */
static unsigned find_section(const elf_image *e, const char *prefix, const char *name)
{
    size_t n = strlen(prefix);

    for (unsigned i = 0; i < e->shnum; i++) {
        const char *s = section_name(e, i);

        if (s != NULL && strncmp(s, prefix, n) == 0 && strcmp(s + n, name) == 0)
            return i;
    }
    return e->shnum;
}

/* Parameters from ".nv.info.<kernel>", static shared memory from ".nv.shared.<kernel>". */
static CUresult cubin_kernel(const elf_image *e, struct CUfunc_st *f)
{
    unsigned info = find_section(e, ".nv.info.", f->name);
    unsigned shared = find_section(e, ".nv.shared.", f->name);
    const unsigned char *p = NULL;
    const unsigned char *end = NULL;

    if (shared < e->shnum)
        f->static_shared = (size_t)sh_field(e, shared, 32, 1);
    if (info == e->shnum)
        return CUDA_SUCCESS; /* no attributes: no parameters */
    p = e->data + sh_field(e, info, 24, 1);
    end = p + sh_field(e, info, 32, 1);
    while (end - p >= 2) {
        unsigned format = p[0];
        size_t size = format == EIFMT_SVAL && end - p >= 4 ? (size_t)(p[2] | p[3] << 8) : 0;

        if (format == EIFMT_SVAL && (size_t)(end - p) - 4 < size)
            return CUDA_ERROR_INVALID_IMAGE;
        if (format == EIFMT_SVAL && p[1] == EIATTR_KPARAM_INFO && size >= 12) {
            unsigned ordinal = (unsigned)(p[8] | p[9] << 8);

            if (ordinal >= MAX_PARAMS)
                return CUDA_ERROR_INVALID_IMAGE;
            f->offsets[ordinal] = (size_t)(p[10] | p[11] << 8);
            f->sizes[ordinal] = (read_u32(p + 12) >> KPARAM_SIZE_SHIFT) & KPARAM_SIZE_MASK;
            if ((int)ordinal >= f->nparams)
                f->nparams = (int)ordinal + 1;
        }
        if (format < EIFMT_NVAL || format > EIFMT_SVAL)
            return CUDA_ERROR_INVALID_IMAGE;
        p += format == EIFMT_NVAL ? 2 : format == EIFMT_SVAL ? 4 + size : 4; /* B/HVAL: 4 */
    }
    return CUDA_SUCCESS;
}

/* One symbol: an entry becomes a kernel, a constant or device variable a global. */
static CUresult cubin_symbol(const elf_image *e, unsigned strtab, const unsigned char *sym,
                             struct CUmod_st *m)
{
    const char *name = elf_string(e, strtab, read_u32(sym));
    unsigned type = sym[4] & 0xfu;
    unsigned shndx = (unsigned)(sym[6] | sym[7] << 8);
    const char *section = shndx < e->shnum ? section_name(e, shndx) : NULL;

    if (name == NULL || strlen(name) >= NAME_LEN)
        return name == NULL ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
    if (type == ELF_STT_FUNC && (sym[5] & ELF_STO_CUDA_ENTRY) != 0) {
        struct CUfunc_st *f = add_kernel(m);

        if (f == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        snprintf(f->name, sizeof(f->name), "%s", name);
        return cubin_kernel(e, f);
    }
    if (type == ELF_STT_OBJECT && section != NULL && read_u64(sym + 16) > 0 &&
        (strncmp(section, ".nv.constant3", 13) == 0 || strncmp(section, ".nv.global", 10) == 0)) {
        module_global *g = NULL;

        if (m->nglobals == MAX_GLOBALS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g = &m->globals[m->nglobals];
        snprintf(g->name, sizeof(g->name), "%s", name);
        g->bytes = (size_t)read_u64(sym + 16);
        if (global_memory(g) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        m->nglobals++;
    }
    return CUDA_SUCCESS;
}

/* Kernels and globals of an ELF cubin of at most `bytes` bytes. */
static CUresult load_cubin(const unsigned char *data, uint64_t bytes, struct CUmod_st *m)
{
    elf_image e = {data, bytes, 0, 0, 0};
    CUresult rc = CUDA_SUCCESS;

    if (bytes < 64 || data[4] != 2 || data[5] != 1 ||
        (unsigned)(data[18] | data[19] << 8) != ELF_MACHINE_CUDA)
        return CUDA_ERROR_INVALID_IMAGE; /* 64-bit little-endian CUDA ELF only */
    e.shoff = read_u64(data + 0x28);
    e.shnum = (unsigned)(data[0x3c] | data[0x3d] << 8);
    e.shstrndx = (unsigned)(data[0x3e] | data[0x3f] << 8);
    if (e.shstrndx >= e.shnum || !elf_range(&e, e.shoff, (uint64_t)e.shnum * ELF_SHDR_BYTES))
        return CUDA_ERROR_INVALID_IMAGE;
    for (unsigned i = 0; i < e.shnum; i++) {
        if (sh_field(&e, i, 4, 0) != ELF_SHT_NOBITS &&
            !elf_range(&e, sh_field(&e, i, 24, 1), sh_field(&e, i, 32, 1)))
            return CUDA_ERROR_INVALID_IMAGE; /* sections with bytes lie inside the image */
    }
    for (unsigned i = 0; rc == CUDA_SUCCESS && i < e.shnum; i++) {
        const unsigned char *sym = data + sh_field(&e, i, 24, 1);
        uint64_t count = sh_field(&e, i, 32, 1) / ELF_SYM_BYTES;
        unsigned strtab = (unsigned)sh_field(&e, i, 40, 0);

        if (sh_field(&e, i, 4, 0) != ELF_SHT_SYMTAB)
            continue;
        if (strtab >= e.shnum)
            return CUDA_ERROR_INVALID_IMAGE;
        for (uint64_t k = 0; rc == CUDA_SUCCESS && k < count; k++)
            rc = cubin_symbol(&e, strtab, sym + k * ELF_SYM_BYTES, m);
    }
    if (rc == CUDA_SUCCESS && m->nkernels == 0)
        rc = CUDA_ERROR_INVALID_IMAGE;
    return rc;
}

/* A fatbin: its first uncompressed PTX entry, else its first uncompressed cubin. */
static CUresult load_fatbin(const unsigned char *image, struct CUmod_st *m, char *log,
                            size_t log_size)
{
    const unsigned char *payload = NULL;
    uint64_t bytes = 0;
    char *text = NULL;
    CUresult rc = fatbin_entry(image, FATBIN_KIND_PTX, &payload, &bytes);

    if (rc == CUDA_SUCCESS) {
        text = calloc(1, (size_t)bytes + 1);
        if (text == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(text, payload, (size_t)bytes);
        rc = load_ptx(text, m, log, log_size);
        free(text);
        return rc;
    }
    if (rc == CUDA_ERROR_NO_BINARY_FOR_GPU)
        rc = fatbin_entry(image, FATBIN_KIND_ELF, &payload, &bytes);
    if (rc == CUDA_SUCCESS)
        return load_cubin(payload, bytes, m);
    if (rc == CUDA_ERROR_NO_BINARY_FOR_GPU)
        fprintf(stderr, "cuda driver double: the fatbin has no uncompressed PTX or cubin\n");
    return rc;
}

/* ------------------------------------------- binding to the simulator */

/* The library's host constant array `name`, or NULL. */
static const gm_host_global *host_global(const char *name)
{
    for (int s = 0; s < gm__builtin_image_set_count; s++) {
        const gm_host_table *t = gm__builtin_image_sets[s]->host;

        for (int32_t i = 0; t != NULL && i < t->nglobals; i++) {
            if (t->globals[i] != NULL && strcmp(t->globals[i]->name, name) == 0)
                return t->globals[i];
        }
    }
    return NULL;
}

/* Bind a kernel to the simulator's kernel of its name; the signatures must agree. */
static CUresult bind_kernel(struct CUfunc_st *f)
{
    const gm_host_kernel *hk = NULL;

    (void)gm__builtin_set_with_kernel(f->name, &hk); /* the library's host-compiled kernel */

    if (hk == NULL)
        return CUDA_SUCCESS; /* not one of the library's kernels */
    if (hk->nparams != f->nparams) {
        fprintf(stderr,
                "cuda driver double: %s: the image declares %d parameters, the host "
                "kernel %d\n",
                f->name, f->nparams, (int)hk->nparams);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    for (int i = 0; i < f->nparams; i++) {
        if (hk->param_sizes[i] != f->sizes[i]) {
            fprintf(stderr,
                    "cuda driver double: %s: parameter %d is %zu bytes in the image, %zu "
                    "in the host kernel\n",
                    f->name, i, f->sizes[i], hk->param_sizes[i]);
            return CUDA_ERROR_INVALID_IMAGE;
        }
    }
    f->host = hk;
    return CUDA_SUCCESS;
}

/* Bind the module's kernels and constant arrays to the simulator's. */
static CUresult bind_module(struct CUmod_st *m)
{
    CUresult rc = CUDA_SUCCESS;

    for (int i = 0; rc == CUDA_SUCCESS && i < m->nkernels; i++)
        rc = bind_kernel(&m->kernels[i]);
    for (int i = 0; rc == CUDA_SUCCESS && i < m->nglobals; i++) {
        const gm_host_global *hg = host_global(m->globals[i].name);

        if (hg != NULL && hg->bytes != m->globals[i].bytes) {
            fprintf(stderr,
                    "cuda driver double: global %s is %zu bytes in the image, %zu on the "
                    "host\n",
                    m->globals[i].name, m->globals[i].bytes, hg->bytes);
            rc = CUDA_ERROR_INVALID_IMAGE;
        }
        m->globals[i].host = hg;
    }
    return rc;
}

/* Load PTX text, a fatbin, a fatbin wrapper or a cubin, and bind it to the simulator. */
static CUresult load_image(const void *image, struct CUmod_st *m, char *log, size_t log_size)
{
    const unsigned char *bytes = image;
    CUresult rc = CUDA_SUCCESS;

    if (has_magic(bytes, FATBIN_WRAPPER_MAGIC)) {
        memcpy(&image, bytes + 8, sizeof(image));
        bytes = image;
        if (bytes == NULL || has_magic(bytes, FATBIN_MAGIC) == 0)
            return CUDA_ERROR_INVALID_IMAGE;
    }
    if (has_magic(bytes, ELF_MAGIC))
        rc = load_cubin(bytes, UINT64_MAX, m); /* the driver takes the headers' word for it */
    else if (has_magic(bytes, FATBIN_MAGIC))
        rc = load_fatbin(bytes, m, log, log_size);
    else
        rc = load_ptx(image, m, log, log_size); /* reads up to the NUL, as the driver does */
    if (rc == CUDA_SUCCESS)
        rc = bind_module(m);
    return rc;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    struct CUmod_st *m = NULL;
    char *log = NULL;
    size_t log_size = 0;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = jit_log(numOptions, options, optionValues, &log, &log_size);
    if (rc == CUDA_SUCCESS && (module == NULL || image == NULL))
        rc = violation(CUDA_ERROR_INVALID_VALUE, "cuModuleLoadDataEx: NULL module or image");
    if (rc != CUDA_SUCCESS)
        return rc;
    m = reuse_take(&reuse.modules, NULL);
    if (m != NULL)
        memset(m, 0, sizeof(*m));
    else
        m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MAGIC_MODULE;
    rc = load_image(image, m, log, log_size);
    if (rc == CUDA_SUCCESS && add_handle((void **)S.modules, m) == 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        free_module(m);
        return rc;
    }
    *module = m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    int slot = -1;
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    slot = module_slot(hmod);
    if (slot < 0)
        return violation(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload: %p is not live", (void *)hmod);
    S.modules[slot] = NULL;
    free_globals(hmod); /* their addresses may be reused: they are memory, not handles */
    hmod->magic = 0;
    if (reuse_keep(&reuse.modules, hmod) == 0)
        bury(hmod); /* its functions' handles point into it */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (module_slot(hmod) < 0 || name == NULL)
        return violation(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: bad module or name");
    for (int i = 0; i < hmod->nkernels; i++) {
        if (strcmp(hmod->kernels[i].name, name) == 0) {
            *hfunc = &hmod->kernels[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                   const char *name)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (module_slot(hmod) < 0 || name == NULL)
        return violation(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetGlobal: bad module or name");
    for (int i = 0; i < hmod->nglobals; i++) {
        if (strcmp(hmod->globals[i].name, name) == 0) {
            if (dptr != NULL)
                *dptr = (CUdeviceptr)(uintptr_t)hmod->globals[i].mem;
            if (bytes != NULL)
                *bytes = hmod->globals[i].bytes;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_function(__func__, hfunc);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        *pi = 1024;
    else if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        *pi = dynamic_limit(hfunc);
    else if (attrib == CU_FUNC_ATTRIBUTE_NUM_REGS)
        *pi = 16;
    else if (attrib == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        *pi = (int)hfunc->static_shared;
    else
        *pi = 0; /* no local memory in the double's kernels */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_function(__func__, hfunc);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute: attribute %d", (int)attrib);
    if (value < 0 || (size_t)value + hfunc->static_shared > MAX_OPTIN_SHARED)
        return CUDA_ERROR_INVALID_VALUE; /* static + dynamic within the opt-in limit */
    hfunc->max_dynamic_shared = value;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_function(__func__, func);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (paramIndex >= (size_t)func->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *paramOffset = func->offsets[paramIndex];
    *paramSize = func->sizes[paramIndex];
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------- launches */

/* A launch as the kernels below see it. */
typedef struct launch {
    struct CUfunc_st *function;
    unsigned grid[3], block[3];
    unsigned shared;
    _Alignas(16) unsigned char params[PARAM_BYTES]; /* parameter block, laid out by offsets[] */
} launch;

static uint64_t param_u64(const launch *l, int i)
{
    uint64_t value = 0;

    memcpy(&value, l->params + l->function->offsets[i], sizeof(value));
    return value;
}

static uint32_t param_u32(const launch *l, int i)
{
    uint32_t value = 0;

    memcpy(&value, l->params + l->function->offsets[i], sizeof(value));
    return value;
}

/* Threads along x that exist and fall below n (the kernels are 1-D). */
static uint64_t active_threads(const launch *l, uint64_t n)
{
    uint64_t total = (uint64_t)l->grid[0] * l->block[0];

    return total < n ? total : n;
}

/* Where the CPU reaches what a kernel reaches at [address, address + bytes), or NULL. */
static char *kernel_range(uint64_t address, uint64_t bytes)
{
    alloc *a = containing((uintptr_t)address, (size_t)bytes, 1);

    return a != NULL ? cpu_address(a, (uintptr_t)address) : NULL;
}

/* gm_test_fill_u32(u32 *out, u32 value, u64 n): out[i] = value for i < n. */
static CUresult run_fill_u32(const launch *l)
{
    uint32_t value = param_u32(l, 1);
    uint64_t count = active_threads(l, param_u64(l, 2));
    char *out = count > 0 ? kernel_range(param_u64(l, 0), count * 4) : NULL;

    if (count > 0 && out == NULL)
        return violation(CUDA_ERROR_ILLEGAL_ADDRESS, "gm_test_fill_u32 writes outside memory");
    for (uint64_t i = 0; i < count; i++)
        memcpy(out + 4 * i, &value, 4);
    return CUDA_SUCCESS;
}

/* The module's global `name`, or NULL. */
static const module_global *find_global(const struct CUmod_st *m, const char *name)
{
    for (int i = 0; i < m->nglobals; i++) {
        if (strcmp(m->globals[i].name, name) == 0)
            return &m->globals[i];
    }
    return NULL;
}

/* gm_test_scale_f32(f32 *data, u64 n): data[i] = data[i] * coeffs[0] + coeffs[1]; needs
 * blockDim.x floats of dynamic shared memory. */
static CUresult run_scale_f32(const launch *l)
{
    uint64_t count = active_threads(l, param_u64(l, 1));
    char *data = count > 0 ? kernel_range(param_u64(l, 0), count * 4) : NULL;
    const module_global *coeffs = find_global(l->function->module, "gm_test_coeffs");
    float c[2] = {0.0f, 0.0f};

    if (coeffs == NULL || coeffs->bytes < sizeof(c))
        return violation(CUDA_ERROR_NOT_FOUND, "gm_test_scale_f32 without gm_test_coeffs");
    if (l->shared < 4u * l->block[0])
        return violation(CUDA_ERROR_ILLEGAL_ADDRESS,
                         "gm_test_scale_f32: %u bytes of dynamic "
                         "shared memory for %u threads",
                         l->shared, l->block[0]);
    if (count > 0 && data == NULL)
        return violation(CUDA_ERROR_ILLEGAL_ADDRESS, "gm_test_scale_f32 outside memory");
    memcpy(c, coeffs->mem, sizeof(c));
    for (uint64_t i = 0; i < count; i++) {
        float v = 0.0f;

        memcpy(&v, data + 4 * i, 4);
        v = v * c[0] + c[1];
        memcpy(data + 4 * i, &v, 4);
    }
    return CUDA_SUCCESS;
}

static CUresult check_dims(const launch *l)
{
    const unsigned max_block[3] = {1024, 1024, 64};
    const unsigned max_grid[3] = {2147483647u, 65535, 65535};

    for (int i = 0; i < 3; i++) {
        if (l->grid[i] == 0 || l->block[i] == 0 || l->grid[i] > max_grid[i] ||
            l->block[i] > max_block[i])
            return violation(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: grid/block dim %d", i);
    }
    if ((uint64_t)l->block[0] * l->block[1] * l->block[2] > 1024)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: more than 1024 threads");
    if (l->shared > (unsigned)dynamic_limit(l->function))
        return CUDA_ERROR_INVALID_VALUE; /* the driver refuses; the caller must opt in first */
    if (l->function->static_shared + l->shared > MAX_OPTIN_SHARED)
        return CUDA_ERROR_INVALID_VALUE; /* more than a block can have */
    return CUDA_SUCCESS;
}

/*
 * Pointer parameters (by the host kernel's declarations) must be NULL or
 * memory the device reaches at that address; a device address of mapped host
 * memory is translated, in the parameter block, to where the simulator (the
 * CPU) reaches it. Any other 8-byte word holding such a device address (a
 * pointer inside a by-value argument) cannot be translated: a violation,
 * rather than a CPU fault in the simulator.
 */
static CUresult translate_pointer_params(launch *l)
{
    const struct CUfunc_st *f = l->function;

    for (int i = 0; i < f->nparams; i++) {
        uint64_t address = 0;
        alloc *a = NULL;

        if (f->host->param_decls == NULL || strchr(f->host->param_decls[i], '*') == NULL ||
            f->sizes[i] != sizeof(address)) {
            for (size_t w = 0; w + sizeof(address) <= f->sizes[i]; w += sizeof(address)) {
                memcpy(&address, l->params + f->offsets[i] + w, sizeof(address));
                if (in_alias((uintptr_t)address))
                    return violation(CUDA_ERROR_ILLEGAL_ADDRESS,
                                     "cuLaunchKernel: %s: parameter %d holds device address "
                                     "0x%llx of mapped host memory at byte %zu, which the "
                                     "double cannot translate (not a pointer parameter)",
                                     f->name, i, (unsigned long long)address, w);
            }
            continue;
        }
        address = param_u64(l, i);
        if (address == 0)
            continue;
        a = containing((uintptr_t)address, 0, 1);
        if (a == NULL) {
            const alloc *h = containing((uintptr_t)address, 0, 0);

            return violation(
                CUDA_ERROR_ILLEGAL_ADDRESS,
                "cuLaunchKernel: %s: parameter %d (%s) = 0x%llx is not device memory%s", f->name, i,
                f->host->param_decls[i], (unsigned long long)address,
                h != NULL && (h->kind == ALLOC_PINNED || h->kind == ALLOC_REGISTERED)
                    ? " (the host address of page-locked memory; the device needs the address "
                      "cuMemHostGetDevicePointer gives)"
                    : "");
        }
        address = (uint64_t)(uintptr_t)cpu_address(a, (uintptr_t)address);
        memcpy(l->params + f->offsets[i], &address, sizeof(address));
    }
    return CUDA_SUCCESS;
}

/*
 * Run one of the library's kernels on the simulator: the parameter block
 * gives the argument values, the module's constant arrays are copied into
 * the simulator's before the run (each module keeps its own values, as on a
 * device).
 */
static CUresult run_host_kernel(launch *l)
{
    const struct CUfunc_st *f = l->function;
    const struct CUmod_st *m = f->module;
    void *args[MAX_PARAMS];
    gm__sim_launch sim;
    gm_status status = GM_OK;
    CUresult rc = translate_pointer_params(l);

    if (rc != CUDA_SUCCESS)
        return rc;
    for (int i = 0; i < m->nglobals; i++) {
        if (m->globals[i].host != NULL)
            memcpy(m->globals[i].host->address, m->globals[i].mem, m->globals[i].bytes);
    }
    for (int i = 0; i < f->nparams; i++)
        args[i] = (void *)(l->params + f->offsets[i]);
    memset(&sim, 0, sizeof(sim));
    sim.kernel = f->host;
    sim.args = args;
    memcpy(sim.grid, l->grid, sizeof(sim.grid));
    memcpy(sim.block, l->block, sizeof(sim.block));
    sim.dynamic_shared_bytes = l->shared;
    sim.warp_size = 32;
    status = gm__sim_run("cuLaunchKernel (driver double)", &sim);
    if (status == GM_OK)
        return CUDA_SUCCESS;
    fprintf(stderr, "cuda driver double: %s: %s\n", f->name, gm_last_error_message());
    return status == GM_ERR_NO_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_LAUNCH_FAILED;
}

/* Read every parameter through kernelParams[i] with the size the PTX declares. */
static CUresult read_params(launch *l, void **kernelParams, void **extra)
{
    const struct CUfunc_st *f = l->function;

    if (extra != NULL)
        return violation(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: extra is not used by gpumem");
    if (f->nparams > 0 && kernelParams == NULL)
        return violation(CUDA_ERROR_INVALID_VALUE,
                         "cuLaunchKernel: %s takes %d parameters, "
                         "kernelParams is NULL",
                         f->name, f->nparams);
    for (int i = 0; i < f->nparams; i++) {
        if (kernelParams[i] == NULL)
            return violation(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernelParams[%d] NULL", i);
        if (f->offsets[i] + f->sizes[i] > sizeof(l->params))
            return violation(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: parameters too large");
        memcpy(l->params + f->offsets[i], kernelParams[i], f->sizes[i]);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    static launch l; /* large; calls do not overlap */
    API_LOCK;
    CUresult rc = enter(__func__, NEED_CONTEXT);

    if (rc == CUDA_SUCCESS)
        rc = valid_function(__func__, f);
    if (rc == CUDA_SUCCESS)
        rc = valid_stream(__func__, hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    memset(&l, 0, sizeof(l));
    l = (launch){
        f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, {0}};
    rc = check_dims(&l);
    if (rc == CUDA_SUCCESS)
        rc = read_params(&l, kernelParams, extra);
    if (rc != CUDA_SUCCESS)
        return rc;
    S.last_launch_shared = sharedMemBytes;
    if (strcmp(f->name, "gm_test_fill_u32") == 0)
        return run_fill_u32(&l);
    if (strcmp(f->name, "gm_test_scale_f32") == 0)
        return run_scale_f32(&l);
    if (f->host != NULL)
        return run_host_kernel(&l);
    fprintf(stderr, "cuda driver double: cannot run kernel %s (not one of the library's)\n",
            f->name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
