/*
 * A test double of the ROCm HSA runtime (libhsa-runtime64), built as a shared
 * library that exports the hsa_* entry points gpumem uses, with the real
 * headers' prototypes. The HSA backend loads it in place of the runtime when
 * GM_HSA_RUNTIME_PATH names it; tests also link it to drive it through the
 * hsa_double_* functions below (dlopen of the same file returns the same
 * instance, so both see one state).
 *
 * What it models: one CPU agent and N GPU agents (gfx906 by default, or
 * gfx90a, wavefront 64, or gfx1100, wavefront 32);
 * pools (per GPU a coarse-grained global pool of configurable capacity and a
 * 64 KiB group pool; on the CPU a fine-grained pool, a kernarg pool and a
 * coarse-grained pool, reachable by GPUs only after
 * hsa_amd_agents_allow_access); memory locking (at an agent address that differs from the
 * host address, see hsa_double_host_address), pointer info and IPC;
 * signals with waits and async handlers (a handler thread); a DMA engine
 * thread running hsa_amd_memory_async_copy after its dependency signals, by
 * default newest-ready-first so that missing dependencies reorder copies;
 * AQL queues whose packets a host thread consumes only after the doorbell
 * names them, honouring barrier-AND dependencies and running dispatches
 * through host functions registered under the kernel's name, or else, for
 * the library's own kernels, on the kernel simulator's host-compiled code of
 * the same name (gpumem's kernel registry; arguments decoded from the
 * kernarg segment at the code object's metadata offsets, constant arrays
 * filled from the variable symbols' memory); code objects (ELF PT_LOAD
 * segments copied, .dynsym kernels "name.kd" read from their kernel
 * descriptors, or for code object v2 kernel symbols of the bare name read
 * from their amd_kernel_code_t, variables, the NT_AMDGPU_METADATA note);
 * GPU memory faults delivered to system event handlers. Everything the real
 * runtime requires is checked and a breach is recorded as a violation
 * (tests assert none).
 *
 * Fault injection: any hsa_status_t entry point can be made to fail on its
 * n-th call (by name, or counting every fallible call); asynchronous copies
 * can be made to fail on the DMA engine (completion signal set negative).
 * Dependencies (of copies and barrier-AND packets) are met only at exactly 0:
 * a negative one, a failed operation, blocks its dependants forever, as in
 * ROCr.
 */
#ifndef GM_TESTS_HSA_RUNTIME_DOUBLE_H
#define GM_TESTS_HSA_RUNTIME_DOUBLE_H

#include <stddef.h>
#include <stdint.h>

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HSA_DOUBLE_MAX_GPUS 4

typedef struct hsa_double_config {
    int gpu_count;              /* GPU agents (default 1; 0 models a machine without GPU) */
    uint64_t gpu_memory_bytes;  /* capacity of each GPU's coarse-grained pool (default 64 MiB) */
    uint64_t host_memory_bytes; /* capacity of the CPU pools together (default 256 MiB) */
    hsa_status_t init_status;   /* what hsa_init returns (default success) */
    uint32_t queue_max_size;    /* HSA_AGENT_INFO_QUEUE_MAX_SIZE (default 64: wraps often) */
    int report_memory_avail;    /* answer HSA_AMD_AGENT_INFO_MEMORY_AVAIL (default 1) */
    int copies_in_order;        /* DMA engine runs ready copies oldest-first (default 0) */
    int no_ipc;                 /* hsa_amd_ipc_memory_* fail with HSA_STATUS_ERROR */
    int rounded_pointer_sizes;  /* hsa_amd_pointer_info gives pool allocations' sizes rounded
                                   up to the granule, as ROCr before ROCm 5.4 (39632a71) */
    const char *gpu_arch;       /* the GPUs' processor: "gfx906" (default), "gfx90a" or "gfx1100";
                                   programs that never call hsa_double_reset can set it with the
                                   environment variable GM_HSA_DOUBLE_GPU */
    uint32_t isa_mach;          /* EF_AMDGPU_MACH the agent accepts (default 0: gpu_arch's) */
    const char *fault_kernel;   /* dispatching this kernel breaks its queue with
                                   HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, reported to the
                                   queue's error callback */
    const char *memory_fault_kernel; /* dispatching this kernel raises an ordinary GPU page
                                        fault: the queue stops silently (ROCr drops
                                        HSA_STATUS_ERROR_MEMORY_FAULT from queue callbacks)
                                        and the fault goes to the system event handlers */
    uint64_t fault_address;          /* the address such a fault reports (default 0x1000) */
    uint32_t fault_reason_mask;    /* its reasons (default HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT) */
    int unhandled_fault_violation; /* a memory fault no system event handler answers with
                                      HSA_STATUS_SUCCESS is a violation; default 0: abort(),
                                      as ROCr's VMFaultHandler does */
    uint64_t max_alloc_bytes;      /* HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE of every pool;
                                      larger allocations fail with INVALID_ALLOCATION, as in
                                      ROCr (default 0: the pool's size) */
    unsigned copy_delay_us;        /* the DMA engine takes this long per copy (default 0) */
    int no_sdma;                   /* hsa_amd_memory_async_copy_rect fails with OUT_OF_RESOURCES, as
                                      ROCr does without an SDMA engine (HSA_ENABLE_SDMA=0) */
    int no_handle_reuse;           /* 1: every object gets a fresh handle. Default 0: handles come
                                      back as ROCr's do (see "Handle reuse" below); programs that
                                      never call hsa_double_reset turn it off with the environment
                                      variable GM_HSA_DOUBLE_HANDLE_REUSE=0 */
} hsa_double_config;

/* Defaults for every field. */
void hsa_double_config_default(hsa_double_config *cfg);

/*
 * Tear down any state (threads, memory, signals, queues), clear counters,
 * violations, fault rules and registered kernels, and apply cfg (NULL:
 * defaults). Call before each test, with no HSA context open.
 */
void hsa_double_reset(const hsa_double_config *cfg);

/* The n-th call (1-based, counted from now) to `call` returns `status`;
 * sticky: that call and every later one. call NULL: count every fallible call. */
void hsa_double_fail(const char *call, long nth, hsa_status_t status, int sticky);

/*
 * The next n asynchronous copies submitted (hsa_amd_memory_async_copy and
 * _rect) whose destination holds byte `dst` (NULL: any copy) fail on the DMA
 * engine: once their dependencies are met they move nothing and set their
 * completion signal to `value` (negative; -1 if not) instead of decrementing
 * it, as ROCr reports a copy that failed. Work depending on that signal never
 * starts (dependencies are met at exactly 0). n 0 clears; so does a reset.
 */
void hsa_double_fail_copies(long n, const void *dst, hsa_signal_value_t value);

/* Remove fault rules. */
void hsa_double_fail_clear(void);

/* Name of the call an injected fault last hit ("" if none). */
const char *hsa_double_last_injected(void);

/* Calls made to `call` since the reset (NULL: every fallible call). */
long hsa_double_calls(const char *call);

/* Live runtime objects. */
typedef struct hsa_double_live {
    long signals, queues, pool_allocations, locks, executables, readers, ipc_attachments, handlers,
        pending_copies;
    uint64_t device_bytes;      /* allocated from GPU 0's coarse-grained pool */
    long system_event_handlers; /* registered with the runtime instance (gone at its last
                                   hsa_shut_down, as in ROCr, which deletes the instance) */
} hsa_double_live;

void hsa_double_get_live(hsa_double_live *live);

/*
 * Handle reuse (on unless no_handle_reuse): ROCr hands out the handles of
 * destroyed objects again (signals from a pool, very often at once, queues,
 * executables, code object readers, and pool memory addresses after
 * hsa_amd_memory_pool_free), so state a caller keys by handle value may take
 * a new object for a dead one. The double does so deterministically and
 * aggressively: the next hsa_signal_create gives the most recently destroyed
 * signal's handle (newest first), the next hsa_queue_create the most
 * recently destroyed queue (same hsa_queue_t pointer and doorbell signal
 * handle; a new queue id), likewise executables and readers, and the next
 * allocation from a pool of the same granule-rounded size the most recently
 * freed block of that pool and size (memory freed while the device could
 * still touch it is kept aside, never reused). A handle still in the free
 * list is invalid as before. Counts since the reset:
 */
typedef struct hsa_double_reuse {
    long signals, queues, executables, readers, allocations;
} hsa_double_reuse;

void hsa_double_get_reuse(hsa_double_reuse *reuse);

/* Violations recorded so far; writes them, one per line, into buf when not NULL. */
long hsa_double_violations(char *buf, size_t bytes);

/*
 * Raise an ordinary GPU memory fault on GPU `gpu` as the kernel driver would:
 * the runtime's event thread passes HSA_AMD_GPU_MEMORY_FAULT_EVENT to every
 * registered system event handler; when none answers HSA_STATUS_SUCCESS the
 * process aborts as under ROCr (or a violation is recorded, with
 * unhandled_fault_violation). No queue callback is called.
 */
void hsa_double_memory_fault(int gpu, uint64_t address, uint32_t reason_mask);

/* Memory faults delivered so far: answered SUCCESS by a handler, and not. */
void hsa_double_fault_counts(long *handled, long *unhandled);

/* Hold (1) or release (0) the DMA engine and the packet processors. */
void hsa_double_pause(int paused);

/* A host implementation of a kernel, run once per dispatch with the packet
 * (its kernarg_address holds the arguments as the backend wrote them). */
typedef void (*hsa_double_kernel_fn)(const hsa_kernel_dispatch_packet_t *packet, void *user);

/* Register fn under the kernel's name (without ".kd"). */
void hsa_double_register_kernel(const char *name, hsa_double_kernel_fn fn, void *user);

/* A processed AQL packet. */
typedef struct hsa_double_packet {
    uint64_t queue_id;
    uint64_t packet_id;
    unsigned char bytes[64];     /* the packet as read after its header */
    char kernel[128];            /* dispatches: the kernel's name */
    unsigned char kernarg[1024]; /* dispatches: the kernarg segment */
    uint32_t kernarg_size;       /* dispatches: the descriptor's kernarg size */
    uint32_t group_fixed;        /* dispatches: the descriptor's group segment size */
    uint32_t private_fixed;      /* dispatches: the descriptor's private segment size */
    long sequence;               /* global order of completion among packets and copies */
} hsa_double_packet;

/* Packets processed so far (oldest first, the last 256 kept). */
long hsa_double_packet_count(void);
int hsa_double_get_packet(long index, hsa_double_packet *out);

/* A completed hsa_amd_memory_async_copy or hsa_amd_memory_async_copy_rect. */
typedef struct hsa_double_copy {
    void *dst;                     /* rect: the first byte written (base + offsets) */
    const void *src;               /* rect: the first byte read */
    void *host_dst;                /* dst as the CPU sees it (locked memory: its host address) */
    const void *host_src;          /* src as the CPU sees it */
    size_t size;                   /* bytes moved */
    int rect;                      /* 1 for hsa_amd_memory_async_copy_rect */
    uint32_t width, height, depth; /* rect: range (bytes, rows, planes) */
    size_t dst_pitch, dst_slice, src_pitch, src_slice;
    hsa_amd_copy_direction_t direction; /* rect */
    uint32_t ndeps;
    hsa_signal_t deps[8];
    hsa_signal_t completion;
    long sequence;
    int failed; /* made to fail by hsa_double_fail_copies: nothing moved */
} hsa_double_copy;

long hsa_double_copy_count(void);
int hsa_double_get_copy(long index, hsa_double_copy *out);

/*
 * Locked memory's two addresses. hsa_amd_memory_lock returns an agent address
 * that is never the host address (ROCr's in general is not): one in a
 * reserved PROT_NONE region, so a CPU access through it faults, and a GPU
 * access (a copy side) through the host address of locked memory is a
 * violation. The double translates agent addresses back where it touches
 * memory for the device: copies, and global_buffer kernel arguments before
 * host code runs (an agent address anywhere else in a kernarg segment is a
 * violation and the dispatch is not run).
 */
/* The host address the device reaches at `agent_address`: the address itself outside the
 * region of agent addresses, NULL for an agent address of no live lock. */
void *hsa_double_host_address(const void *agent_address);
/* The agent address of a host address inside locked memory (the newest lock holding it),
 * or NULL when no lock holds it. */
void *hsa_double_agent_address(const void *host_address);

#ifdef __cplusplus
}
#endif

#endif
