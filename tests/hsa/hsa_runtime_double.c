/*
 * The HSA runtime test double (see hsa_runtime_double.h). One mutex guards
 * the whole state; one condition variable is broadcast on every change
 * (signal values, new work), and the worker threads (DMA engine, async
 * handler thread, one packet processor per queue) wait on it.
 *
 * Built with HSA_DOUBLE_OPAQUE_SYNC (hsa_runtime_double_opaque, without
 * sanitizers), it synchronizes as ROCr does in ThreadSanitizer's eyes: the
 * lock is a spin lock on plain atomics and waiters poll, so TSan sees no
 * edge through a signal (ROCr's signals are memory the GPU and its own
 * threads write, waited for by polling and kernel events). Registering an
 * async handler stays an edge to the handler's run (ROCr takes a pthread
 * mutex there, which TSan intercepts). The DMA engine and the packet
 * processors, the "hardware", are ignored by TSan (their accesses and
 * synchronization): only the async-handler thread, which runs the
 * backend's handlers, is observed. Used by the hsa suites named -opaque under TSan: a race
 * is reported wherever the backend relies on a signal's completion for
 * what a handler wrote without an edge of its own.
 */
#include <elf.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hsa/amd_hsa_kernel_code.h>

#include "hsa_codeobj.h"
#include "hsa_runtime_double.h"
#include "kernels_internal.h"
#include "sim.h"

#if defined(HSA_DOUBLE_OPAQUE_SYNC)
#include <sched.h>

/* ThreadSanitizer's interface, when the program has it (the annotations are exported). */
extern void AnnotateIgnoreReadsBegin(const char *file, int line) __attribute__((weak));
extern void AnnotateIgnoreReadsEnd(const char *file, int line) __attribute__((weak));
extern void AnnotateIgnoreWritesBegin(const char *file, int line) __attribute__((weak));
extern void AnnotateIgnoreWritesEnd(const char *file, int line) __attribute__((weak));
extern void AnnotateIgnoreSyncBegin(const char *file, int line) __attribute__((weak));
extern void AnnotateIgnoreSyncEnd(const char *file, int line) __attribute__((weak));
extern void __tsan_acquire(void *addr) __attribute__((weak));
extern void __tsan_release(void *addr) __attribute__((weak));

/* Whether TSan sees this thread's accesses (the libc calls it intercepts here too). */
static void tsan_ignore(bool begin)
{
    if (AnnotateIgnoreSyncEnd == NULL)
        return;
    if (begin) {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
        AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    } else {
        AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
}

/*
 * A spin lock TSan cannot see (this file is built without sanitizers); what
 * the double does under it, the runtime's bookkeeping, is hidden from TSan
 * too, as libhsa-runtime64's is (it is not instrumented).
 */
typedef struct dmutex {
    int word;
} dmutex;
#define DMUTEX_INIT \
    {               \
        0           \
    }

static void dmu_lock(dmutex *m)
{
    while (__atomic_exchange_n(&m->word, 1, __ATOMIC_ACQUIRE) != 0)
        sched_yield();
    tsan_ignore(true);
}

static void dmu_unlock(dmutex *m)
{
    tsan_ignore(false);
    __atomic_store_n(&m->word, 0, __ATOMIC_RELEASE);
}

/* Waiters poll (dwait_ms): nothing to wake. */
static void dwake(void)
{
}

/* A "hardware" thread: TSan ignores its accesses and synchronization until it ends. */
static void hardware_thread(bool begin)
{
    tsan_ignore(begin);
}

/* An edge TSan sees from a registration (release) to the handler's run (acquire). */
static void handler_edge(void *h, bool release)
{
    if (release && __tsan_release != NULL)
        __tsan_release(h);
    else if (!release && __tsan_acquire != NULL)
        __tsan_acquire(h);
}
#else
typedef pthread_mutex_t dmutex;
#define DMUTEX_INIT PTHREAD_MUTEX_INITIALIZER

static void dmu_lock(dmutex *m)
{
    pthread_mutex_lock(m);
}

static void dmu_unlock(dmutex *m)
{
    pthread_mutex_unlock(m);
}

static pthread_cond_t dcv = PTHREAD_COND_INITIALIZER;

static void dwake(void)
{
    pthread_cond_broadcast(&dcv);
}

static void hardware_thread(bool begin)
{
    (void)begin;
}

static void handler_edge(void *h, bool release)
{
    (void)h;
    (void)release;
}
#endif

/* hsa.h declares these with empty parentheses; give them prototypes. */
hsa_status_t hsa_init(void);
hsa_status_t hsa_shut_down(void);

#define CPU_AGENT        0xA000u
#define GPU_AGENT(g)     (0xB000u + (uint64_t)(g))
#define GPU_ISA(g)       (0xC000u + (uint64_t)(g))
#define POOL_DEVICE(g)   (0x1000u + (uint64_t)(g))
#define POOL_GROUP(g)    (0x2000u + (uint64_t)(g))
#define POOL_CPU_FINE    0x3001u
#define POOL_CPU_KERNARG 0x3002u
#define POOL_CPU_COARSE  0x3003u
#define POOL_CODE        0x4000u /* loaded code object segments (not a real pool) */
#define GRANULE          4096u
#define GROUP_BYTES      65536u
#define KEEP_RECORDS     256
#define VIOLATIONS_MAX   8192
#define MAX_HOST_GLOBALS 8  /* constant arrays one host-run kernel's table may have */
#define MAX_HOST_PARAMS  32 /* parameters of a host-run kernel */
#define MAX_FAULTS       16 /* memory faults waiting for the event thread */
#define STT_HSA_KERNEL   10 /* code object v2 kernel symbols (amd_hsa_elf.h) */
#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif

/* The GPUs the double can model (hsa_double_config.gpu_arch). */
typedef struct darch {
    const char *name;   /* HSA_AGENT_INFO_NAME */
    uint32_t mach;      /* EF_AMDGPU_MACH of its code objects */
    const char *isa;    /* HSA_ISA_INFO_NAME */
    uint32_t wavefront; /* HSA_AGENT_INFO_WAVEFRONT_SIZE */
} darch;

static const darch archs[] = {
    {"gfx906", 0x2f, "amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-", 64},
    {"gfx90a", 0x3f, "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", 64},
    {"gfx1100", 0x41, "amdgcn-amd-amdhsa--gfx1100", 32},
};

/* ------------------------------------------------------------- state */

typedef struct dsig {
    struct dsig *next;
    _Atomic int64_t value;
    bool no_interrupt; /* consumers named, the CPU not among them: ROCr makes a DefaultSignal */
} dsig;

typedef struct dalloc {
    struct dalloc *next;
    char *base;
    size_t size;
    uint64_t pool;
    uint32_t gpu_access; /* bit g: GPU g may access */
    uint64_t id;         /* for IPC handles */
} dalloc;

typedef struct dlock {
    struct dlock *next;
    char *base;  /* the host address locked (the CPU's view) */
    char *agent; /* the address hsa_amd_memory_lock returned (the GPUs' view), in the alias
                    region: never equal to base, and a CPU access through it faults */
    size_t size;
    uint32_t gpu_access;
} dlock;

typedef struct dipc {
    struct dipc *next;
    dalloc *source;
    char *mapped;
} dipc;

typedef struct dhandler {
    struct dhandler *next;
    dsig *signal;
    hsa_signal_condition_t cond;
    hsa_signal_value_t value;
    hsa_amd_signal_handler fn;
    void *arg;
} dhandler;

typedef struct dcopy {
    struct dcopy *next;
    hsa_double_copy rec;
    hsa_signal_t *deps; /* all of them (rec keeps the first 8) */
    long seq;
    hsa_signal_value_t fail_value; /* < 0: fails with this value (hsa_double_fail_copies) */
} dcopy;

typedef struct dsymbol {
    struct dsymbol *next;
    char name[256];
    int is_kernel;
    uint64_t address; /* kernel: descriptor; variable: data */
    uint32_t size;
    uint32_t group, private_size, kernarg;
    hsa_agent_t agent;
    const struct dexec *exec;        /* the executable it belongs to */
    const gm__hsa_kernel_meta *meta; /* kernels: the code object's metadata, or NULL */
    const gm_host_kernel *host;      /* kernels: the simulator's kernel of that name, or NULL */
    const gm_host_table *host_table; /* its table (for its constant arrays) */
} dsymbol;

typedef struct dsegment {
    struct dsegment *next;
    char *base;                /* a POOL_CODE record in g.allocs owns the memory */
    gm__hsa_codeobj_meta meta; /* the code object's NT_AMDGPU_METADATA (none: no kernels) */
} dsegment;

typedef struct dexec {
    struct dexec *next;
    hsa_profile_t profile;
    int frozen;
    dsymbol *symbols;
    dsegment *segments;
} dexec;

typedef struct dreader {
    struct dreader *next;
    const void *image;
    size_t size;
} dreader;

typedef struct dqueue {
    hsa_queue_t q; /* first: the pointer the backend holds */
    struct dqueue *next;
    _Atomic uint64_t read_index;
    _Atomic uint64_t write_index;
    void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data);
    void *data;
    int gpu;
    int stop, dead;
    pthread_t thread;
    dsig *doorbell;        /* its doorbell (on g.signals while the queue lives) */
    int64_t waiting_since; /* a published packet without doorbell: since when */
} dqueue;

/* A handler registered with hsa_amd_register_system_event_handler. */
typedef struct devent_handler {
    struct devent_handler *next;
    hsa_amd_system_event_callback_t fn;
    void *data;
} devent_handler;

typedef struct dkernel {
    struct dkernel *next;
    char name[128];
    hsa_double_kernel_fn fn;
    void *user;
} dkernel;

typedef struct fault_rule {
    int active;
    char call[64]; /* "" for any fallible call */
    long at;       /* fire when the counter reaches this */
    hsa_status_t status;
    int sticky;
} fault_rule;

typedef struct call_count {
    char name[64];
    long count;
} call_count;

static struct {
    dmutex mu;
    hsa_double_config cfg;
    int init_count;
    int configured; /* hsa_double_reset was called (else GM_HSA_DOUBLE_GPU applies) */
    int threads_running, stop_threads;
    pthread_t dma_thread, handler_thread;
    int paused;
    dsig *signals;
    dalloc *allocs;
    dalloc *freed_in_use; /* freed while the device could still touch them (a violation) */
    dlock *locks;
    dipc *ipcs;
    dhandler *handlers;
    dcopy *copies;
    dcopy *running; /* the copy the DMA engine is moving (off the copies list) */
    dqueue *queues;
    dexec *execs;
    dreader *readers;
    dkernel *kernels;
    /* destroyed objects whose handles the next creation hands out again, newest first
     * (handle reuse, as ROCr's; hsa_double_get_reuse) */
    dsig *free_signals;
    dsig *dead_signals; /* destroyed while still used (a violation): kept until the reset */
    dqueue *free_queues;
    dexec *free_execs;
    dreader *free_readers;
    dalloc *free_blocks; /* freed pool memory: base, granule-rounded size, pool */
    hsa_double_reuse reused;
    devent_handler *event_handlers;                     /* in registration order */
    hsa_amd_gpu_memory_fault_info_t faults[MAX_FAULTS]; /* for the event thread to deliver */
    int nfaults;
    long faults_handled, faults_unhandled;
    dmutex host_globals_mu; /* host runs of kernels with constant arrays, one at a time */
    uint64_t used[HSA_DOUBLE_MAX_GPUS];
    uint64_t host_used;
    uint64_t next_id;
    long sequence;
    call_count counts[96];
    int ncounts;
    long total_calls;
    unsigned long waits; /* hsa_signal_wait_scacquire calls (every third returns early) */
    fault_rule rule;
    long copy_fails;           /* hsa_double_fail_copies: copies still to fail */
    const char *copy_fail_dst; /* ...only those writing this byte (NULL: any) */
    hsa_signal_value_t copy_fail_value;
    char last_injected[64];
    char violations[VIOLATIONS_MAX];
    size_t violations_len;
    long nviolations;
    hsa_double_packet packets[KEEP_RECORDS];
    long npackets;
    hsa_double_copy done_copies[KEEP_RECORDS];
    long ncopies;
} g = {.mu = DMUTEX_INIT,
       .host_globals_mu = DMUTEX_INIT,
       /* hsa_double_config_default(), for programs that never call hsa_double_reset */
       .cfg = {.gpu_count = 1,
               .gpu_memory_bytes = 64u << 20,
               .host_memory_bytes = 256u << 20,
               .init_status = HSA_STATUS_SUCCESS,
               .queue_max_size = 64,
               .report_memory_avail = 1,
               .gpu_arch = "gfx906"}};

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The modelled GPU (gfx906 when gpu_arch names none). */
static const darch *gpu_arch(void)
{
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        if (g.cfg.gpu_arch != NULL && strcmp(g.cfg.gpu_arch, archs[i].name) == 0)
            return &archs[i];
    }
    return &archs[0];
}

/* The EF_AMDGPU_MACH the agents accept. */
static uint32_t gpu_mach(void)
{
    return g.cfg.isa_mach != 0 ? g.cfg.isa_mach : gpu_arch()->mach;
}

/* Wait on the condition variable for at most ms milliseconds. Lock held. */
static void wait_ms(long ms)
{
#if defined(HSA_DOUBLE_OPAQUE_SYNC)
    /* Poll: a short sleep without the lock (callers wait in loops, as for a wake-up). */
    const struct timespec pause = {0, 100 * 1000};

    (void)ms;
    dmu_unlock(&g.mu);
    nanosleep(&pause, NULL);
    dmu_lock(&g.mu);
#else
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&dcv, &g.mu, &ts);
#endif
}

/* Record a breach of the runtime's rules. Lock held. */
static void violation(const char *fmt, ...)
{
    va_list ap;
    int n = 0;

    g.nviolations++;
    if (g.violations_len + 2 >= sizeof(g.violations))
        return;
    va_start(ap, fmt);
    n = vsnprintf(g.violations + g.violations_len, sizeof(g.violations) - g.violations_len - 1, fmt,
                  ap);
    va_end(ap);
    if (n > 0)
        g.violations_len += (size_t)n;
    if (g.violations_len >= sizeof(g.violations) - 1)
        g.violations_len = sizeof(g.violations) - 2;
    g.violations[g.violations_len++] = '\n';
    g.violations[g.violations_len] = '\0';
}

/* ------------------------------------------------------- handle reuse */

/* AddressSanitizer's manual poisoning, when the program has it: freed pool memory waiting
 * for reuse stays unaddressable, as freed memory would be. */
extern void __asan_poison_memory_region(void const volatile *addr, size_t size)
    __attribute__((weak));
extern void __asan_unpoison_memory_region(void const volatile *addr, size_t size)
    __attribute__((weak));

static void poison(const void *p, size_t n, bool on)
{
    if (on && __asan_poison_memory_region != NULL)
        __asan_poison_memory_region(p, n);
    else if (!on && __asan_unpoison_memory_region != NULL)
        __asan_unpoison_memory_region(p, n);
}

/* Whether destroyed objects' handles are handed out again. Lock held. */
static bool reuse_handles(void)
{
    return g.cfg.no_handle_reuse == 0;
}

/* ------------------------------------------------------------- faults */

static call_count *counter(const char *name)
{
    for (int i = 0; i < g.ncounts; i++) {
        if (strcmp(g.counts[i].name, name) == 0)
            return &g.counts[i];
    }
    if (g.ncounts == (int)(sizeof(g.counts) / sizeof(g.counts[0])))
        return NULL;
    snprintf(g.counts[g.ncounts].name, sizeof(g.counts[0].name), "%s", name);
    g.counts[g.ncounts].count = 0;
    return &g.counts[g.ncounts++];
}

/*
 * Entry of every fallible function: count the call, refuse it before
 * hsa_init, and fire a matching fault rule.
 */
static hsa_status_t enter(const char *name)
{
    hsa_status_t status = HSA_STATUS_SUCCESS;
    call_count *c = NULL;
    long count = 0;

    dmu_lock(&g.mu);
    c = counter(name);
    count = c != NULL ? ++c->count : 0;
    g.total_calls++;
    if (g.init_count == 0 && strcmp(name, "hsa_init") != 0)
        status = HSA_STATUS_ERROR_NOT_INITIALIZED;
    if (g.rule.active != 0) {
        long n = g.rule.call[0] == '\0' ? g.total_calls : count;
        bool match = g.rule.call[0] == '\0' || strcmp(g.rule.call, name) == 0;

        if (match && (n == g.rule.at || (g.rule.sticky != 0 && n > g.rule.at))) {
            status = g.rule.status;
            snprintf(g.last_injected, sizeof(g.last_injected), "%s", name);
            if (g.rule.sticky == 0)
                g.rule.active = 0;
        }
    }
    dmu_unlock(&g.mu);
    return status;
}

void hsa_double_fail(const char *call, long nth, hsa_status_t status, int sticky)
{
    dmu_lock(&g.mu);
    memset(&g.rule, 0, sizeof(g.rule));
    g.rule.active = 1;
    g.rule.status = status;
    g.rule.sticky = sticky;
    if (call != NULL) {
        call_count *c = counter(call);

        snprintf(g.rule.call, sizeof(g.rule.call), "%s", call);
        g.rule.at = (c != NULL ? c->count : 0) + nth;
    } else {
        g.rule.at = g.total_calls + nth;
    }
    dmu_unlock(&g.mu);
}

void hsa_double_fail_copies(long n, const void *dst, hsa_signal_value_t value)
{
    dmu_lock(&g.mu);
    g.copy_fails = n > 0 ? n : 0;
    g.copy_fail_dst = dst;
    g.copy_fail_value = value < 0 ? value : -1;
    dmu_unlock(&g.mu);
}

void hsa_double_fail_clear(void)
{
    dmu_lock(&g.mu);
    memset(&g.rule, 0, sizeof(g.rule));
    dmu_unlock(&g.mu);
}

const char *hsa_double_last_injected(void)
{
    return g.last_injected;
}

long hsa_double_calls(const char *call)
{
    long n = 0;

    dmu_lock(&g.mu);
    if (call == NULL) {
        n = g.total_calls;
    } else {
        for (int i = 0; i < g.ncounts; i++) {
            if (strcmp(g.counts[i].name, call) == 0)
                n = g.counts[i].count;
        }
    }
    dmu_unlock(&g.mu);
    return n;
}

/* ------------------------------------------------------------- signals */

/* The live signal behind a handle, or NULL. Lock held. */
static dsig *find_signal(hsa_signal_t s)
{
    for (dsig *p = g.signals; p != NULL; p = p->next) {
        if ((uint64_t)(uintptr_t)p == s.handle)
            return p;
    }
    return NULL;
}

/* The queue whose doorbell a signal is, or NULL. Lock held. */
static struct dqueue *doorbell_of(uint64_t handle);

/*
 * A signal for a non-fallible call; records a violation for bad handles, and
 * for a queue's doorbell in anything but a store: ROCr's doorbell signal is
 * write-only (its loads, waits and read-modify-write operations assert), and
 * hsa.h makes the other operations on one undefined. Lock held.
 */
static dsig *use_signal(hsa_signal_t s, const char *call)
{
    dsig *sig = find_signal(s);

    if (sig == NULL)
        violation("%s: invalid or destroyed signal 0x%llx", call, (unsigned long long)s.handle);
    else if (strcmp(call, "hsa_signal_store_screlease") != 0 && doorbell_of(s.handle) != NULL)
        violation("%s: signal 0x%llx is a queue's doorbell, which only takes stores", call,
                  (unsigned long long)s.handle);
    return sig;
}

static bool condition_met(hsa_signal_condition_t cond, int64_t v, int64_t cmp)
{
    switch (cond) {
    case HSA_SIGNAL_CONDITION_EQ:
        return v == cmp;
    case HSA_SIGNAL_CONDITION_NE:
        return v != cmp;
    case HSA_SIGNAL_CONDITION_LT:
        return v < cmp;
    case HSA_SIGNAL_CONDITION_GTE:
        return v >= cmp;
    }
    return false;
}

/* Change a signal's value and wake everyone. Lock held. */
static void set_value(dsig *sig, int64_t value)
{
    atomic_store(&sig->value, value);
    dwake();
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                               const hsa_agent_t *consumers, hsa_signal_t *signal)
{
    hsa_status_t st = enter("hsa_signal_create");
    dsig *sig = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (signal == NULL || (num_consumers != 0 && consumers == NULL))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < num_consumers; i++) {
        for (uint32_t j = 0; j < i; j++) {
            if (consumers[i].handle == consumers[j].handle)
                return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* ROCr: duplicate consumers */
        }
    }
    dmu_lock(&g.mu);
    if (reuse_handles() && g.free_signals != NULL) { /* the newest destroyed handle, as ROCr's
                                                        signal pool gives it back */
        sig = g.free_signals;
        g.free_signals = sig->next;
        memset(sig, 0, sizeof(*sig));
        g.reused.signals++;
    }
    dmu_unlock(&g.mu);
    if (sig == NULL)
        sig = calloc(1, sizeof(*sig));
    if (sig == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    /* ROCr (hsa_amd_signal_create): consumers that leave out the CPU get a signal without
     * an interrupt event, which hsa_amd_signal_async_handler refuses. */
    sig->no_interrupt = num_consumers != 0;
    for (uint32_t i = 0; i < num_consumers; i++) {
        if (consumers[i].handle == CPU_AGENT)
            sig->no_interrupt = false;
    }
    atomic_store(&sig->value, initial_value);
    dmu_lock(&g.mu);
    sig->next = g.signals;
    g.signals = sig;
    dmu_unlock(&g.mu);
    signal->handle = (uint64_t)(uintptr_t)sig;
    return HSA_STATUS_SUCCESS;
}

static bool published_packet(const struct dqueue *q, uint64_t id, void *pkt, size_t size);

/* Whether a pending copy, handler or queued packet still uses the signal. Lock held. */
static const char *signal_user(uint64_t handle)
{
    /* the copy the DMA engine is moving (off g.copies, lock released) completes later too */
    if (g.running != NULL) {
        if (g.running->rec.completion.handle == handle)
            return "the DMA engine's running copy's completion";
        for (uint32_t i = 0; i < g.running->rec.ndeps; i++) {
            if (g.running->deps[i].handle == handle)
                return "the DMA engine's running copy's dependency";
        }
    }
    for (dcopy *c = g.copies; c != NULL; c = c->next) {
        if (c->rec.completion.handle == handle)
            return "a pending copy's completion";
        for (uint32_t i = 0; i < c->rec.ndeps; i++) {
            if (c->deps[i].handle == handle)
                return "a pending copy's dependency";
        }
    }
    for (dhandler *h = g.handlers; h != NULL; h = h->next) {
        if ((uint64_t)(uintptr_t)h->signal == handle)
            return "a pending async handler";
    }
    for (dqueue *q = g.queues; q != NULL; q = q->next) {
        for (uint64_t id = atomic_load(&q->read_index); id < atomic_load(&q->write_index); id++) {
            hsa_barrier_and_packet_t pkt;

            if (!published_packet(q, id, &pkt, sizeof(pkt)))
                continue;
            if (pkt.completion_signal.handle == handle)
                return "a queued packet's completion";
            for (int d = 0; d < 5 && (pkt.header & 0xff) == HSA_PACKET_TYPE_BARRIER_AND; d++) {
                if (pkt.dep_signal[d].handle == handle)
                    return "a queued barrier's dependency";
            }
        }
    }
    return NULL;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal)
{
    hsa_status_t st = enter("hsa_signal_destroy");
    dsig **link = &g.signals;
    const char *user = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && (uint64_t)(uintptr_t)*link != signal.handle)
        link = &(*link)->next;
    if (*link == NULL) {
        violation("hsa_signal_destroy: invalid or destroyed signal 0x%llx",
                  (unsigned long long)signal.handle);
        st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    } else if (doorbell_of(signal.handle) != NULL) {
        violation("hsa_signal_destroy: signal 0x%llx is a queue's doorbell (the runtime owns it; "
                  "hsa_queue_destroy releases it)",
                  (unsigned long long)signal.handle);
        st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    } else {
        dsig *sig = *link;

        user = signal_user(signal.handle);
        if (user != NULL)
            violation("hsa_signal_destroy: signal still used by %s", user);
        *link = sig->next;
        if (user != NULL) { /* ROCr retains a signal an async handler waits on, and a DMA engine
                               or packet processor still reads its memory: never reused, kept
                               (the double's handler and copy records may still point at it) */
            sig->next = g.dead_signals;
            g.dead_signals = sig;
        } else if (reuse_handles()) {
            sig->next = g.free_signals;
            g.free_signals = sig;
        } else {
            free(sig);
        }
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal)
{
    hsa_signal_value_t v = 0;
    dsig *sig = NULL;

    dmu_lock(&g.mu);
    sig = use_signal(signal, "hsa_signal_load_scacquire");
    if (sig != NULL)
        v = atomic_load(&sig->value);
    dmu_unlock(&g.mu);
    return v;
}

/*
 * Ringing a doorbell with packet id `value`: a single-producer queue's
 * doorbell only grows (hsa.h), and the packet must have had a free slot
 * when it was written: an id at or past read index + size overwrote a packet
 * the processor had not consumed (the read index only grows, so it was
 * further behind when the packet was written). Lock held.
 */
static void check_doorbell(const struct dqueue *q, const dsig *doorbell, hsa_signal_value_t value);

void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value)
{
    dsig *sig = NULL;
    const struct dqueue *q = NULL;

    dmu_lock(&g.mu);
    sig = use_signal(signal, "hsa_signal_store_screlease");
    q = sig != NULL ? doorbell_of(signal.handle) : NULL;
    if (q != NULL)
        check_doorbell(q, sig, value);
    if (sig != NULL)
        set_value(sig, value);
    dmu_unlock(&g.mu);
}

void hsa_signal_subtract_screlease(hsa_signal_t signal, hsa_signal_value_t value)
{
    dsig *sig = NULL;

    dmu_lock(&g.mu);
    sig = use_signal(signal, "hsa_signal_subtract_screlease");
    if (sig != NULL)
        set_value(sig, atomic_load(&sig->value) - value);
    dmu_unlock(&g.mu);
}

hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, hsa_signal_condition_t condition,
                                             hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint,
                                             hsa_wait_state_t wait_state_hint)
{
    int64_t deadline =
        timeout_hint > (uint64_t)INT64_MAX / 2 ? INT64_MAX : now_ns() + (int64_t)timeout_hint;
    hsa_signal_value_t v = 0;
    dsig *sig = NULL;
    bool spurious = false;

    (void)wait_state_hint;
    dmu_lock(&g.mu);
    /* "A wait operation can spuriously resume at any time sooner than the timeout ... even
     * when the condition has not been met" (hsa.h): every third wait that would block
     * returns at once. */
    spurious = ++g.waits % 3 == 0;
    sig = use_signal(signal, "hsa_signal_wait_scacquire");
    while (sig != NULL) {
        v = atomic_load(&sig->value);
        if (condition_met(condition, v, compare_value) || now_ns() >= deadline)
            break;
        if (spurious)
            break;
        wait_ms(5);
        sig = find_signal(signal); /* destroyed while waiting: stop */
    }
    dmu_unlock(&g.mu);
    return v;
}

/* ---------------------------------------------------- async handlers */

hsa_status_t hsa_amd_signal_async_handler(hsa_signal_t signal, hsa_signal_condition_t cond,
                                          hsa_signal_value_t value, hsa_amd_signal_handler handler,
                                          void *arg)
{
    hsa_status_t st = enter("hsa_amd_signal_async_handler");
    dhandler *h = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (handler == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    handler_edge(h, true); /* outside the lock: TSan ignores what is done under it */
    dmu_lock(&g.mu);
    h->signal = find_signal(signal);
    if (h->signal == NULL || doorbell_of(signal.handle) != NULL || h->signal->no_interrupt) {
        violation("hsa_amd_signal_async_handler: invalid signal 0x%llx%s",
                  (unsigned long long)signal.handle,
                  h->signal == NULL ? ""
                  : h->signal->no_interrupt
                      ? " (created for consumers without the CPU agent: not an interrupt signal)"
                      : " (a queue's doorbell, not an interrupt signal)");
        free(h);
        st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    } else {
        h->cond = cond;
        h->value = value;
        h->fn = handler;
        h->arg = arg;
        h->next = g.handlers;
        g.handlers = h;
        dwake();
    }
    dmu_unlock(&g.mu);
    return st;
}

/* Take one handler whose condition holds off the list. Lock held. */
static dhandler *ready_handler(void)
{
    for (dhandler **link = &g.handlers; *link != NULL; link = &(*link)->next) {
        dhandler *h = *link;

        if (condition_met(h->cond, atomic_load(&h->signal->value), h->value)) {
            *link = h->next;
            return h;
        }
    }
    return NULL;
}

/* ----------------------------------------------------- system events */

hsa_status_t hsa_amd_register_system_event_handler(hsa_amd_system_event_callback_t callback,
                                                   void *data)
{
    hsa_status_t st = enter("hsa_amd_register_system_event_handler");
    devent_handler *h = NULL, **link = &g.event_handlers;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (callback == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    h->fn = callback;
    h->data = data;
    dmu_lock(&g.mu);
    while (*link != NULL) /* ROCr appends to a vector; there is no unregister */
        link = &(*link)->next;
    *link = h;
    dmu_unlock(&g.mu);
    return HSA_STATUS_SUCCESS;
}

/* A GPU memory fault for the event thread to deliver. Lock held. */
static void push_fault(int gpu, uint64_t address, uint32_t reason_mask)
{
    hsa_amd_gpu_memory_fault_info_t *f = NULL;

    if (g.init_count == 0 || gpu < 0 || gpu >= g.cfg.gpu_count || g.nfaults == MAX_FAULTS) {
        violation("memory fault on GPU %d: no runtime, no such GPU or too many faults", gpu);
        return;
    }
    f = &g.faults[g.nfaults++];
    memset(f, 0, sizeof(*f));
    f->agent.handle = GPU_AGENT(gpu);
    f->virtual_address = address;
    f->fault_reason_mask = reason_mask;
    dwake();
}

/*
 * Runtime::VMFaultHandler: the oldest waiting fault, as
 * HSA_AMD_GPU_MEMORY_FAULT_EVENT, to every system event handler (a copy of
 * the list, called without the lock); unless one answers HSA_STATUS_SUCCESS,
 * ROCr prints the fault and aborts. Lock held.
 */
static void deliver_fault(void)
{
    hsa_amd_event_t event;
    devent_handler *copy = NULL;
    size_t n = 0, i = 0;
    bool handled = false;

    memset(&event, 0, sizeof(event));
    event.event_type = HSA_AMD_GPU_MEMORY_FAULT_EVENT;
    event.memory_fault = g.faults[0];
    g.nfaults--;
    memmove(g.faults, g.faults + 1, (size_t)g.nfaults * sizeof(g.faults[0]));
    for (devent_handler *h = g.event_handlers; h != NULL; h = h->next)
        n++;
    copy = n != 0 ? calloc(n, sizeof(*copy)) : NULL;
    for (devent_handler *h = g.event_handlers; h != NULL && copy != NULL; h = h->next)
        copy[i++] = *h;
    dmu_unlock(&g.mu);
    for (i = 0; copy != NULL && i < n; i++) {
        if (copy[i].fn(&event, copy[i].data) == HSA_STATUS_SUCCESS)
            handled = true;
    }
    free(copy);
    dmu_lock(&g.mu);
    if (handled) {
        g.faults_handled++;
    } else if (g.cfg.unhandled_fault_violation != 0) {
        g.faults_unhandled++;
        violation("memory fault by GPU agent 0x%llx on address 0x%llx: no system event handler "
                  "answered HSA_STATUS_SUCCESS (ROCr prints the fault and aborts the process)",
                  (unsigned long long)event.memory_fault.agent.handle,
                  (unsigned long long)event.memory_fault.virtual_address);
    } else {
        fprintf(stderr,
                "HSA runtime double: Memory access fault by GPU agent 0x%llx on address 0x%llx "
                "(reason mask 0x%x) and no system event handler answered HSA_STATUS_SUCCESS: "
                "aborting, as ROCr does\n",
                (unsigned long long)event.memory_fault.agent.handle,
                (unsigned long long)event.memory_fault.virtual_address,
                (unsigned)event.memory_fault.fault_reason_mask);
        abort();
    }
    dwake();
}

/* The runtime's async-event thread: deliver memory faults, run handlers whose condition holds. */
static void *handler_thread(void *unused)
{
    (void)unused;
    dmu_lock(&g.mu);
    while (g.stop_threads == 0) {
        dhandler *h = NULL;
        int64_t value = 0;

        if (g.nfaults > 0) {
            deliver_fault();
            continue;
        }
        h = ready_handler();
        if (h == NULL) {
            wait_ms(20);
            continue;
        }
        value = atomic_load(&h->signal->value);
        dmu_unlock(&g.mu);
        handler_edge(h, false);
        if (h->fn(value, h->arg)) {
            dmu_lock(&g.mu);
            h->next = g.handlers;
            g.handlers = h;
        } else {
            free(h);
            dmu_lock(&g.mu);
        }
    }
    dmu_unlock(&g.mu);
    return NULL;
}

/* ---------------------------------------------------------- agents */

static int gpu_index(hsa_agent_t agent)
{
    if (agent.handle >= GPU_AGENT(0) && agent.handle < GPU_AGENT(g.cfg.gpu_count))
        return (int)(agent.handle - GPU_AGENT(0));
    return -1;
}

static bool is_cpu(hsa_agent_t agent)
{
    return agent.handle == CPU_AGENT;
}

hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void *data), void *data)
{
    hsa_status_t st = enter("hsa_iterate_agents");
    hsa_agent_t agent = {CPU_AGENT};

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (callback == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    st = callback(agent, data);
    for (int i = 0; i < g.cfg.gpu_count && st == HSA_STATUS_SUCCESS; i++) {
        agent.handle = GPU_AGENT(i);
        st = callback(agent, data);
    }
    return st;
}

/* Answers common to both agent kinds; 1 when handled. */
static int agent_common_info(bool gpu, int attribute, void *value)
{
    switch (attribute) {
    case HSA_AGENT_INFO_DEVICE:
        *(hsa_device_type_t *)value = gpu ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU;
        return 1;
    case HSA_AGENT_INFO_FEATURE:
        *(hsa_agent_feature_t *)value =
            gpu ? HSA_AGENT_FEATURE_KERNEL_DISPATCH : HSA_AGENT_FEATURE_AGENT_DISPATCH;
        return 1;
    case HSA_AGENT_INFO_NAME:
        memset(value, 0, 64);
        strcpy(value, gpu ? gpu_arch()->name : "Double x86-64 CPU");
        return 1;
    case HSA_AGENT_INFO_VENDOR_NAME:
        memset(value, 0, 64);
        strcpy(value, "AMD");
        return 1;
    case HSA_AGENT_INFO_PROFILE:
        *(hsa_profile_t *)value = gpu ? HSA_PROFILE_BASE : HSA_PROFILE_FULL;
        return 1;
    default:
        return 0;
    }
}

/* GPU-only answers; 1 when handled. */
static int agent_gpu_info(int gpu, int attribute, void *value)
{
    static const uint16_t wg_dim[3] = {1024, 1024, 1024};
    hsa_dim3_t grid = {UINT32_MAX, UINT32_MAX, UINT32_MAX};

    switch (attribute) {
    case HSA_AGENT_INFO_WAVEFRONT_SIZE:
        *(uint32_t *)value = gpu_arch()->wavefront;
        return 1;
    case HSA_AGENT_INFO_WORKGROUP_MAX_SIZE:
        *(uint32_t *)value = 1024;
        return 1;
    case HSA_AGENT_INFO_WORKGROUP_MAX_DIM:
        memcpy(value, wg_dim, sizeof(wg_dim));
        return 1;
    case HSA_AGENT_INFO_GRID_MAX_DIM:
        memcpy(value, &grid, sizeof(grid));
        return 1;
    case HSA_AGENT_INFO_QUEUE_MAX_SIZE:
        *(uint32_t *)value = g.cfg.queue_max_size;
        return 1;
    case HSA_AGENT_INFO_QUEUE_MIN_SIZE:
        *(uint32_t *)value = 16;
        return 1;
    case HSA_AGENT_INFO_ISA:
        ((hsa_isa_t *)value)->handle = GPU_ISA(gpu);
        return 1;
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME:
        memset(value, 0, 64);
        strcpy(value, "Double Radeon (HSA test double)");
        return 1;
    case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT:
        *(uint32_t *)value = 60;
        return 1;
    case 0xA015: /* HSA_AMD_AGENT_INFO_MEMORY_AVAIL (ROCm >= 5.3) */
        if (g.cfg.report_memory_avail == 0)
            return 0;
        *(uint64_t *)value = g.cfg.gpu_memory_bytes - g.used[gpu];
        return 1;
    default:
        return 0;
    }
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value)
{
    hsa_status_t st = enter("hsa_agent_get_info");
    int gpu = gpu_index(agent);
    int handled = 0;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (value == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (gpu < 0 && !is_cpu(agent))
        return HSA_STATUS_ERROR_INVALID_AGENT;
    dmu_lock(&g.mu);
    handled = agent_common_info(gpu >= 0, (int)attribute, value);
    if (handled == 0 && gpu >= 0)
        handled = agent_gpu_info(gpu, (int)attribute, value);
    dmu_unlock(&g.mu);
    return handled != 0 ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attribute, void *value)
{
    hsa_status_t st = enter("hsa_isa_get_info_alt");

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (isa.handle < GPU_ISA(0) || isa.handle >= GPU_ISA(g.cfg.gpu_count))
        return HSA_STATUS_ERROR_INVALID_ISA;
    if (attribute == HSA_ISA_INFO_NAME_LENGTH)
        *(uint32_t *)value = (uint32_t)strlen(gpu_arch()->isa);
    else if (attribute == HSA_ISA_INFO_NAME) /* not NUL-terminated, as the spec allows */
        memcpy(value, gpu_arch()->isa, strlen(gpu_arch()->isa));
    else
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value)
{
    hsa_status_t st = enter("hsa_system_get_info");

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (attribute != HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    *(uint64_t *)value = 1000000000u; /* timestamps in nanoseconds */
    return HSA_STATUS_SUCCESS;
}

/* ------------------------------------------------------------- pools */

/* Which GPU a pool belongs to (-1: a CPU pool, -2: unknown). */
static int pool_gpu(uint64_t pool)
{
    for (int i = 0; i < g.cfg.gpu_count; i++) {
        if (pool == POOL_DEVICE(i) || pool == POOL_GROUP(i))
            return i;
    }
    if (pool == POOL_CPU_FINE || pool == POOL_CPU_KERNARG || pool == POOL_CPU_COARSE)
        return -1;
    return -2;
}

hsa_status_t hsa_amd_agent_iterate_memory_pools(
    hsa_agent_t agent, hsa_status_t (*callback)(hsa_amd_memory_pool_t, void *), void *data)
{
    hsa_status_t st = enter("hsa_amd_agent_iterate_memory_pools");
    int gpu = gpu_index(agent);
    hsa_amd_memory_pool_t pools[3];
    int n = 0;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (callback == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (gpu >= 0) {
        pools[n++].handle = POOL_GROUP(gpu); /* the group pool first: order must not matter */
        pools[n++].handle = POOL_DEVICE(gpu);
    } else if (is_cpu(agent)) {
        pools[n++].handle = POOL_CPU_COARSE;
        pools[n++].handle = POOL_CPU_FINE;
        pools[n++].handle = POOL_CPU_KERNARG;
    } else {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    for (int i = 0; i < n && st == HSA_STATUS_SUCCESS; i++)
        st = callback(pools[i], data);
    return st;
}

static uint32_t pool_flags(uint64_t pool)
{
    if (pool == POOL_CPU_FINE)
        return HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
    if (pool == POOL_CPU_KERNARG)
        return HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED |
               HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
    return HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
}

/* The largest allocation a pool grants (ROCr: max_single_alloc_size_). */
static size_t max_alloc(uint64_t pool)
{
    if (g.cfg.max_alloc_bytes != 0)
        return (size_t)g.cfg.max_alloc_bytes;
    return pool_gpu(pool) >= 0 ? g.cfg.gpu_memory_bytes : g.cfg.host_memory_bytes;
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t memory_pool,
                                          hsa_amd_memory_pool_info_t attribute, void *value)
{
    hsa_status_t st = enter("hsa_amd_memory_pool_get_info");
    int gpu = pool_gpu(memory_pool.handle);
    bool group = gpu >= 0 && memory_pool.handle == POOL_GROUP(gpu);

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (gpu == -2)
        return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    switch (attribute) {
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT:
        *(hsa_amd_segment_t *)value = group ? HSA_AMD_SEGMENT_GROUP : HSA_AMD_SEGMENT_GLOBAL;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
        if (group)
            violation("pool_get_info: GLOBAL_FLAGS of a group pool is undefined");
        *(uint32_t *)value = pool_flags(memory_pool.handle);
        break;
    case HSA_AMD_MEMORY_POOL_INFO_SIZE:
        *(size_t *)value = group      ? GROUP_BYTES
                           : gpu >= 0 ? g.cfg.gpu_memory_bytes
                                      : g.cfg.host_memory_bytes;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED:
        *(bool *)value = !group;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE:
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT:
        *(size_t *)value = GRANULE;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE:
        *(size_t *)value = group ? 0 : max_alloc(memory_pool.handle);
        break;
    default:
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent,
                                                hsa_amd_memory_pool_t memory_pool,
                                                hsa_amd_agent_memory_pool_info_t attribute,
                                                void *value)
{
    hsa_status_t st = enter("hsa_amd_agent_memory_pool_get_info");
    int gpu = gpu_index(agent);
    int owner = pool_gpu(memory_pool.handle);
    hsa_amd_memory_pool_access_t access = HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (attribute != HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS || owner == -2)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (gpu < 0 && !is_cpu(agent))
        return HSA_STATUS_ERROR_INVALID_AGENT;
    if (gpu >= 0 && owner == gpu)
        access = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
    else if (gpu >= 0 && owner == -1)
        access = HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
    else if (gpu < 0 && owner == -1)
        access = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
    else if (gpu >= 0 || owner >= 0)
        access = HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
    *(hsa_amd_memory_pool_access_t *)value = access;
    return HSA_STATUS_SUCCESS;
}

/* Reserve capacity for an allocation from pool; 0 when full. Lock held. */
static int reserve_capacity(uint64_t pool, size_t rounded)
{
    int gpu = pool_gpu(pool);

    if (gpu >= 0) {
        if (g.used[gpu] + rounded > g.cfg.gpu_memory_bytes)
            return 0;
        g.used[gpu] += rounded;
    } else {
        if (g.host_used + rounded > g.cfg.host_memory_bytes)
            return 0;
        g.host_used += rounded;
    }
    return 1;
}

static void release_capacity(uint64_t pool, size_t rounded)
{
    int gpu = pool_gpu(pool);

    if (gpu >= 0)
        g.used[gpu] -= rounded;
    else if (pool != POOL_CODE)
        g.host_used -= rounded;
}

static size_t round_granule(size_t size)
{
    return (size + GRANULE - 1) / GRANULE * GRANULE;
}

/* Add an allocation record. Lock held. */
static dalloc *track(char *base, size_t size, uint64_t pool)
{
    dalloc *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->base = base;
    a->size = size;
    a->pool = pool;
    a->id = ++g.next_id;
    if (pool_gpu(pool) >= 0)
        a->gpu_access = 1u << pool_gpu(pool);
    a->next = g.allocs;
    g.allocs = a;
    return a;
}

/* The newest freed block of pool with this rounded size, off the free list, or NULL. Lock
 * held. */
static char *reuse_block(uint64_t pool, size_t rounded)
{
    if (!reuse_handles())
        return NULL;
    for (dalloc **link = &g.free_blocks; *link != NULL; link = &(*link)->next) {
        dalloc *b = *link;
        char *mem = b->base;

        if (b->pool != pool || b->size != rounded)
            continue;
        *link = b->next;
        free(b);
        poison(mem, rounded, false);
        g.reused.allocations++;
        return mem;
    }
    return NULL;
}

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool, size_t size,
                                          uint32_t flags, void **ptr)
{
    hsa_status_t st = enter("hsa_amd_memory_pool_allocate");
    int gpu = pool_gpu(memory_pool.handle);
    size_t rounded = round_granule(size);
    char *mem = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (gpu == -2)
        return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    if (size == 0 || flags != 0 || ptr == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (gpu >= 0 && memory_pool.handle == POOL_GROUP(gpu))
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    if (size > max_alloc(memory_pool.handle)) /* ROCr: above the pool's ALLOC_MAX_SIZE */
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    dmu_lock(&g.mu);
    if (reserve_capacity(memory_pool.handle, rounded) == 0) {
        st = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    } else {
        mem = reuse_block(memory_pool.handle, rounded);
        if (mem == NULL)
            mem = aligned_alloc(GRANULE, rounded);
        if (mem == NULL || track(mem, size, memory_pool.handle) == NULL) {
            free(mem);
            release_capacity(memory_pool.handle, rounded);
            st = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        } else {
            memset(mem, 0xCD, rounded); /* uninitialized, like fresh device memory */
            *ptr = mem;
        }
    }
    dmu_unlock(&g.mu);
    return st;
}

static unsigned char *slot_of(const struct dqueue *q, uint64_t id);

/* The allocation containing [p, p + n) or NULL. Lock held. */
static dalloc *find_alloc(const void *p, size_t n)
{
    for (dalloc *a = g.allocs; a != NULL; a = a->next) {
        if ((const char *)p >= a->base && (const char *)p + n <= a->base + round_granule(a->size))
            return a;
    }
    return NULL;
}

/* Whether a copy reads or writes any byte of [lo, hi) (rects: from the first to the last byte
 * of each side). Lock held. */
static bool copy_meets(const dcopy *c, const char *lo, const char *hi)
{
    const char *src = c->rec.src, *dst = c->rec.dst;
    size_t ns = c->rec.size, nd = c->rec.size;

    if (c->rec.rect != 0) {
        ns = (size_t)(c->rec.depth - 1) * c->rec.src_slice +
             (size_t)(c->rec.height - 1) * c->rec.src_pitch + c->rec.width;
        nd = (size_t)(c->rec.depth - 1) * c->rec.dst_slice +
             (size_t)(c->rec.height - 1) * c->rec.dst_pitch + c->rec.width;
    }
    return (src < hi && src + ns > lo) || (dst < hi && dst + nd > lo);
}

/*
 * Freeing memory the device may still touch: a pending or running copy of it,
 * or a queued dispatch (not yet retired) whose kernarg segment it holds. ROCr
 * frees at once (the kernel driver unmaps the pages), so the DMA engine or the
 * packet processor would reach unmapped or reused memory. Records each and
 * says whether there was one. Lock held.
 */
static bool freed_in_use(const dalloc *a)
{
    const char *lo = a->base, *hi = a->base + round_granule(a->size);
    long before = g.nviolations;

    for (const dcopy *c = g.copies; c != NULL; c = c->next) {
        if (copy_meets(c, lo, hi)) {
            violation("hsa_amd_memory_pool_free: %p freed under a pending copy", (void *)a->base);
            break;
        }
    }
    if (g.running != NULL && copy_meets(g.running, lo, hi))
        violation("hsa_amd_memory_pool_free: %p freed under a running copy", (void *)a->base);
    for (const dqueue *q = g.queues; q != NULL; q = q->next) {
        for (uint64_t id = atomic_load(&q->read_index); id < atomic_load(&q->write_index); id++) {
            hsa_kernel_dispatch_packet_t pkt;

            if (published_packet(q, id, &pkt, sizeof(pkt)) &&
                (pkt.header & 0xff) == HSA_PACKET_TYPE_KERNEL_DISPATCH &&
                (const char *)pkt.kernarg_address >= lo && (const char *)pkt.kernarg_address < hi)
                violation("hsa_amd_memory_pool_free: %p is the kernarg segment of dispatch %llu, "
                          "still queued or running",
                          (void *)a->base, (unsigned long long)id);
        }
    }
    return g.nviolations != before;
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr)
{
    hsa_status_t st = enter("hsa_amd_memory_pool_free");
    dalloc **link = &g.allocs;
    bool in_use = false;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && ((*link)->base != ptr || (*link)->pool == POOL_CODE))
        link = &(*link)->next;
    if (*link == NULL) {
        violation("hsa_amd_memory_pool_free: %p is not the base of a pool allocation", ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else {
        dalloc *a = *link;

        for (dipc *i = g.ipcs; i != NULL; i = i->next) {
            if (i->source == a)
                violation("hsa_amd_memory_pool_free: %p is still attached through IPC", ptr);
        }
        in_use = freed_in_use(a);
        *link = a->next;
        release_capacity(a->pool, round_granule(a->size));
        if (in_use) { /* kept until the reset, so the double itself reads no freed memory */
            a->next = g.freed_in_use;
            g.freed_in_use = a;
        } else if (reuse_handles()) { /* its address comes back with the next such request */
            a->size = round_granule(a->size);
            poison(a->base, a->size, true);
            a->next = g.free_blocks;
            g.free_blocks = a;
        } else {
            free(a->base);
            free(a);
        }
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                         const uint32_t *flags, const void *ptr)
{
    hsa_status_t st = enter("hsa_amd_agents_allow_access");
    dalloc *a = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (num_agents == 0 || agents == NULL || flags != NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_lock(&g.mu);
    a = find_alloc(ptr, 1);
    if (a == NULL || a->base != ptr) {
        violation("hsa_amd_agents_allow_access: %p is not the base of a pool allocation", ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < num_agents && st == HSA_STATUS_SUCCESS; i++) {
        int gpu = gpu_index(agents[i]);

        if (gpu >= 0)
            a->gpu_access |= 1u << gpu;
        else if (!is_cpu(agents[i]))
            st = HSA_STATUS_ERROR_INVALID_AGENT;
    }
    dmu_unlock(&g.mu);
    return st;
}

/* ------------------------------------------------- locking and info */

/*
 * Agent addresses of locked memory. ROCr maps locked pageable memory for the
 * GPUs at an address of its own (hsa_amd_memory_lock's *agent_ptr), in
 * general not the host address: the GPU (copies, kernels) must use the agent
 * address, the CPU the host address. The double hands agent addresses out of
 * one reserved PROT_NONE region (ALIAS_BYTES of address space, never backed),
 * at the host address's offset in its page, so a CPU access through an agent
 * address faults and a GPU access through a host address is a violation. It
 * translates them back where it touches memory for the device (copies, kernel
 * arguments). A lock of the same range as a live lock shares its agent
 * address (the kernel driver counts registrations of one user range); any
 * other lock gets a fresh one, also when it overlaps a live lock (multiple
 * mappings, as the header allows). Agent addresses are handed out upward,
 * with a guard page after each range, and reused only once the region is
 * exhausted, so a stale one (its lock gone) is caught.
 */
#define ALIAS_BYTES ((size_t)1 << 36)
static char *alias_region; /* reserved on first use, kept for the process; under g.mu */
static size_t alias_next;  /* the next free offset in it; under g.mu */

/* Whether p lies in the region of agent addresses. Lock held. */
static bool in_alias(const void *p)
{
    return alias_region != NULL && (const char *)p >= alias_region &&
           (const char *)p < alias_region + ALIAS_BYTES;
}

/* The pages (and guard page) of the region [*lo_p, *hi_p) an agent range takes. */
static void alias_span(size_t at, size_t size, size_t *lo_p, size_t *hi_p)
{
    *lo_p = at / GRANULE * GRANULE;
    *hi_p = (at + size + GRANULE - 1) / GRANULE * GRANULE + GRANULE;
}

/* A fresh agent address for [host, host + size), or NULL (no room). Lock held. */
static char *alias_alloc(const char *host, size_t size)
{
    size_t in_page = (uintptr_t)host % GRANULE, at = alias_next, lo = 0, hi = 0;
    bool wrapped = false;

    if (alias_region == NULL) {
        void *r =
            mmap(NULL, ALIAS_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

        if (r == MAP_FAILED)
            return NULL;
        alias_region = r;
    }
    if (size > ALIAS_BYTES / 4)
        return NULL;
    for (;;) {
        const dlock *hit = NULL;
        size_t end = 0;

        alias_span(at + in_page, size, &lo, &hi);
        if (hi > ALIAS_BYTES) {
            if (wrapped)
                return NULL;
            wrapped = true;
            at = 0;
            continue;
        }
        for (const dlock *l = g.locks; l != NULL && hit == NULL; l = l->next) {
            size_t llo = 0, lhi = 0;

            alias_span((size_t)(l->agent - alias_region), l->size, &llo, &lhi);
            if (lo < lhi && llo < hi) {
                hit = l;
                end = lhi;
            }
        }
        if (hit == NULL)
            break;
        at = end;
    }
    alias_next = hi;
    return alias_region + lo + in_page;
}

/* The lock record containing host range [p, p + n), or NULL. Lock held. */
static dlock *find_lock(const void *p, size_t n)
{
    for (dlock *l = g.locks; l != NULL; l = l->next) {
        if ((const char *)p >= l->base && (const char *)p + n <= l->base + l->size)
            return l;
    }
    return NULL;
}

/* The lock record whose agent range contains [p, p + n), or NULL. Lock held. */
static dlock *find_alias(const void *p, size_t n)
{
    if (!in_alias(p))
        return NULL;
    for (dlock *l = g.locks; l != NULL; l = l->next) {
        if ((const char *)p >= l->agent && (const char *)p + n <= l->agent + l->size)
            return l;
    }
    return NULL;
}

/*
 * Where the CPU finds what the device reaches at [p, p + n): p itself outside
 * the agent-address region, the locked host memory inside it; NULL for an
 * agent address of no live lock. Lock held.
 */
static char *device_to_host(const void *p, size_t n)
{
    const dlock *l = NULL;

    if (!in_alias(p))
        return (char *)p;
    l = find_alias(p, n);
    return l != NULL ? l->base + ((const char *)p - l->agent) : NULL;
}

void *hsa_double_host_address(const void *agent_address)
{
    char *host = NULL;

    dmu_lock(&g.mu);
    host = device_to_host(agent_address, 1);
    dmu_unlock(&g.mu);
    return host;
}

void *hsa_double_agent_address(const void *host_address)
{
    const dlock *l = NULL;
    void *agent = NULL;

    dmu_lock(&g.mu);
    l = find_lock(host_address, 1);
    if (l != NULL)
        agent = l->agent + ((const char *)host_address - l->base);
    dmu_unlock(&g.mu);
    return agent;
}

hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents, int num_agent,
                                 void **agent_ptr)
{
    hsa_status_t st = enter("hsa_amd_memory_lock");
    dlock *l = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (host_ptr == NULL || size == 0 || agent_ptr == NULL || agents == NULL || num_agent <= 0)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    dmu_lock(&g.mu);
    if (find_alloc(host_ptr, 1) != NULL)
        violation("hsa_amd_memory_lock: %p is runtime pool memory already", host_ptr);
    if (in_alias(host_ptr)) {
        violation("hsa_amd_memory_lock: %p is an agent address of locked memory, not host memory",
                  host_ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < num_agent && st == HSA_STATUS_SUCCESS; i++) {
        int gpu = gpu_index(agents[i]);

        if (gpu < 0)
            st = HSA_STATUS_ERROR_INVALID_AGENT;
        else
            l->gpu_access |= 1u << gpu;
    }
    for (const dlock *other = g.locks; other != NULL && st == HSA_STATUS_SUCCESS;
         other = other->next) {
        /* ROCr locks it; libhsakmt then finds neither to unlock (hsa_amd_memory_unlock) */
        if (other->base == (char *)host_ptr && other->size != size) {
            violation("hsa_amd_memory_lock: %p+%zu: a lock of %zu bytes starts there already; "
                      "with two sizes at one address libhsakmt can unlock neither",
                      host_ptr, size, other->size);
            break;
        }
    }
    if (st == HSA_STATUS_SUCCESS) {
        for (const dlock *same = g.locks; same != NULL && l->agent == NULL; same = same->next) {
            if (same->base == (char *)host_ptr && same->size == size)
                l->agent = same->agent; /* one user range: the driver counts it */
        }
        if (l->agent == NULL)
            l->agent = alias_alloc(host_ptr, size);
        if (l->agent == NULL)
            st = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    if (st == HSA_STATUS_SUCCESS) {
        l->base = host_ptr;
        l->size = size;
        l->next = g.locks;
        g.locks = l;
        *agent_ptr = l->agent;
    } else {
        free(l);
    }
    dmu_unlock(&g.mu);
    return st;
}

/* Whether agent range [p, p + n) meets gone's mapping and no other lock keeps that mapping. */
static bool mapping_lost(const char *p, size_t n, const dlock *gone)
{
    if (!(p < gone->agent + gone->size && p + n > gone->agent))
        return false;
    for (const dlock *l = g.locks; l != NULL; l = l->next) {
        if (l != gone && l->agent == gone->agent)
            return false;
    }
    return true;
}

/* Whether a copy reads or writes through a lock record's agent range that goes with it. */
static bool copy_touches(const dcopy *c, const dlock *l)
{
    const char *src = c->rec.src, *dst = c->rec.dst;
    size_t n = c->rec.size;

    if (c->rec.rect != 0) { /* the spans from the first to the last byte of each side */
        n = (size_t)(c->rec.depth - 1) * c->rec.src_slice +
            (size_t)(c->rec.height - 1) * c->rec.src_pitch + c->rec.width;
        if (mapping_lost(src, n, l))
            return true;
        n = (size_t)(c->rec.depth - 1) * c->rec.dst_slice +
            (size_t)(c->rec.height - 1) * c->rec.dst_pitch + c->rec.width;
        return mapping_lost(dst, n, l);
    }
    return mapping_lost(src, n, l) || mapping_lost(dst, n, l);
}

/* How many different sizes the locks starting at host address p have (libhsakmt keys a
 * userptr registration by address and size; same address and size is one, counted). Lock held. */
static int sizes_at(const void *p)
{
    int n = 0;

    for (const dlock *l = g.locks; l != NULL; l = l->next) {
        bool seen = false;

        if (l->base != (const char *)p)
            continue;
        for (const dlock *k = g.locks; k != l && !seen; k = k->next)
            seen = k->base == l->base && k->size == l->size;
        n += seen ? 0 : 1;
    }
    return n;
}

hsa_status_t hsa_amd_memory_unlock(void *host_ptr)
{
    hsa_status_t st = enter("hsa_amd_memory_unlock");
    dlock **link = &g.locks;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && (*link)->base != host_ptr)
        link = &(*link)->next;
    if (*link == NULL && in_alias(host_ptr)) {
        violation("hsa_amd_memory_unlock: %p is an agent address; unlock takes the host address",
                  host_ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else if (*link == NULL) {
        violation("hsa_amd_memory_unlock: %p was not locked", host_ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else if (sizes_at(host_ptr) > 1) {
        /* libhsakmt (ROCT 5.2 fmm.c) finds a userptr registration for unmapping and
         * deregistering by its address alone, vm_find_object(addr, 0), which answers none when
         * two registrations of different sizes start there; ROCr's MemoryRegion::Unlock ignores
         * the thunk's status, so hsa_amd_memory_unlock returns success with both still locked. */
        violation("hsa_amd_memory_unlock: %p starts registrations of different sizes; libhsakmt "
                  "finds none of them by address, so nothing is unlocked (ROCr returns success)",
                  host_ptr);
    } else {
        dlock *l = *link;

        for (dcopy *c = g.copies; c != NULL; c = c->next) {
            if (copy_touches(c, l))
                violation("hsa_amd_memory_unlock: %p unlocked under a pending copy", host_ptr);
        }
        if (g.running != NULL && copy_touches(g.running, l))
            violation("hsa_amd_memory_unlock: %p unlocked under a running copy", host_ptr);
        *link = l->next;
        free(l);
    }
    dmu_unlock(&g.mu);
    return st;
}

/* hsa_memory_register is a no-op in ROCr: counted so tests can prove it is not relied on. */
hsa_status_t hsa_memory_register(void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    return enter("hsa_memory_register");
}

hsa_status_t hsa_memory_deregister(void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    return enter("hsa_memory_deregister");
}

/* Fill pointer info from an allocation record. Lock held. */
static void info_from_alloc(const dalloc *a, hsa_amd_pointer_info_t *info)
{
    int gpu = pool_gpu(a->pool);

    info->type = HSA_EXT_POINTER_TYPE_HSA;
    info->agentBaseAddress = a->base;
    info->hostBaseAddress = a->base;
    info->sizeInBytes = g.cfg.rounded_pointer_sizes != 0 ? round_granule(a->size) : a->size;
    info->agentOwner.handle = a->pool == POOL_CODE ? GPU_AGENT(0)
                              : gpu >= 0           ? GPU_AGENT(gpu)
                                                   : CPU_AGENT;
    info->global_flags = pool_flags(a->pool);
}

hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info,
                                  void *(*alloc)(size_t), uint32_t *num_agents_accessible,
                                  hsa_agent_t **accessible)
{
    hsa_status_t st = enter("hsa_amd_pointer_info");
    uint32_t size = 0;
    dalloc *a = NULL;
    dlock *l = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (ptr == NULL || info == NULL || info->size < sizeof(*info))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    (void)alloc;
    (void)num_agents_accessible;
    (void)accessible;
    size = info->size;
    memset(info, 0, sizeof(*info));
    info->size = size;
    dmu_lock(&g.mu);
    a = find_alloc(ptr, 1);
    l = a == NULL ? find_alias(ptr, 1) : NULL; /* an agent address */
    if (a == NULL && l == NULL && !in_alias(ptr))
        l = find_lock(ptr, 1); /* a host address (the newest lock holding it) */
    if (a != NULL) {
        info_from_alloc(a, info);
    } else if (l != NULL) {
        info->type = HSA_EXT_POINTER_TYPE_LOCKED;
        info->agentBaseAddress = l->agent;
        info->hostBaseAddress = l->base;
        info->sizeInBytes = l->size;
        info->agentOwner.handle = CPU_AGENT;
    } else {
        info->type = HSA_EXT_POINTER_TYPE_UNKNOWN;
    }
    dmu_unlock(&g.mu);
    return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- IPC */

hsa_status_t hsa_amd_ipc_memory_create(void *ptr, size_t len, hsa_amd_ipc_memory_t *handle)
{
    hsa_status_t st = enter("hsa_amd_ipc_memory_create");
    dalloc *a = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (g.cfg.no_ipc != 0)
        return HSA_STATUS_ERROR;
    dmu_lock(&g.mu);
    a = find_alloc(ptr, 1);
    if (a == NULL || a->base != ptr || a->size != len || handle == NULL) {
        violation("hsa_amd_ipc_memory_create: %p/%zu is not a whole allocation", ptr, len);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else {
        memset(handle, 0, sizeof(*handle));
        memcpy(handle->handle, &a->id, sizeof(a->id));
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_amd_ipc_memory_attach(const hsa_amd_ipc_memory_t *handle, size_t len,
                                       uint32_t num_agents, const hsa_agent_t *mapping_agents,
                                       void **mapped_ptr)
{
    hsa_status_t st = enter("hsa_amd_ipc_memory_attach");
    uint64_t id = 0;
    dalloc *a = NULL;
    dipc *m = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (g.cfg.no_ipc != 0)
        return HSA_STATUS_ERROR;
    if (handle == NULL || mapped_ptr == NULL || (num_agents != 0 && mapping_agents == NULL))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    memcpy(&id, handle->handle, sizeof(id));
    dmu_lock(&g.mu);
    for (a = g.allocs; a != NULL && a->id != id; a = a->next)
        continue;
    m = a != NULL && a->size == len ? calloc(1, sizeof(*m)) : NULL;
    if (m == NULL) {
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else {
        m->source = a;
        m->mapped = a->base; /* same process: the same address */
        m->next = g.ipcs;
        g.ipcs = m;
        *mapped_ptr = m->mapped;
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_amd_ipc_memory_detach(void *mapped_ptr)
{
    hsa_status_t st = enter("hsa_amd_ipc_memory_detach");
    dipc **link = &g.ipcs;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && (*link)->mapped != mapped_ptr)
        link = &(*link)->next;
    if (*link == NULL) {
        violation("hsa_amd_ipc_memory_detach: %p is not an attachment", mapped_ptr);
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    } else {
        dipc *m = *link;

        *link = m->next;
        free(m);
    }
    dmu_unlock(&g.mu);
    return st;
}

/* ------------------------------------------------------------ copies */

/*
 * Whether GPU `gpu` may DMA [p, p + n): its own pool memory, CPU pool memory
 * it was allowed to access, or memory locked for it, at the agent address
 * the lock returned (the host address is not mapped for the GPU). Lock held.
 */
static bool dma_reachable(int gpu, const void *p, size_t n)
{
    dalloc *a = find_alloc(p, n);
    dlock *l = find_alias(p, n);

    if (a != NULL)
        return a->pool == POOL_CODE || (a->gpu_access & (1u << gpu)) != 0;
    return l != NULL && (l->gpu_access & (1u << gpu)) != 0;
}

/* Check one side of a copy against its agent. Lock held. */
static bool copy_side_ok(const char *side, const void *p, size_t n, hsa_agent_t agent, int gpu)
{
    dalloc *a = find_alloc(p, n);
    dlock *l = a == NULL ? find_lock(p, n) : NULL;

    if (l != NULL && (l->gpu_access & (1u << gpu)) != 0) {
        violation("hsa_amd_memory_async_copy: %s %p+%zu is the host address of locked memory; the "
                  "GPU reaches it at the agent address hsa_amd_memory_lock returned (%p)",
                  side, p, n, (void *)(l->agent + ((const char *)p - l->base)));
        return false;
    }
    if (a != NULL && pool_gpu(a->pool) >= 0 && is_cpu(agent)) {
        violation("hsa_amd_memory_async_copy: %s %p is device memory but its agent is the CPU",
                  side, p);
        return false;
    }
    if (!dma_reachable(gpu, p, n)) {
        violation("hsa_amd_memory_async_copy: %s %p+%zu is not reachable by the GPU (pageable, "
                  "unlocked, out of bounds or access not allowed)",
                  side, p, n);
        return false;
    }
    return true;
}

/* Validate a copy's arguments. Lock held. */
static hsa_status_t check_copy(void *dst, hsa_agent_t dst_agent, const void *src,
                               hsa_agent_t src_agent, size_t size, uint32_t ndeps,
                               const hsa_signal_t *deps, hsa_signal_t completion)
{
    /* ROCr's Runtime::CopyMemory: the source agent's engine copies when it is a GPU, else the
     * destination agent's; that GPU must reach both sides. */
    int gpu = gpu_index(src_agent) >= 0 ? gpu_index(src_agent) : gpu_index(dst_agent);

    if (dst == NULL || src == NULL || completion.handle == 0 || (ndeps != 0 && deps == NULL))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if ((gpu_index(dst_agent) < 0 && !is_cpu(dst_agent)) ||
        (gpu_index(src_agent) < 0 && !is_cpu(src_agent)))
        return HSA_STATUS_ERROR_INVALID_AGENT;
    if (gpu < 0) {
        violation("hsa_amd_memory_async_copy: no GPU agent among dst/src agents");
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    if (use_signal(completion, "hsa_amd_memory_async_copy") == NULL)
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    for (uint32_t i = 0; i < ndeps; i++) {
        if (use_signal(deps[i], "hsa_amd_memory_async_copy dependency") == NULL)
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    if (!copy_side_ok("dst", dst, size, dst_agent, gpu) ||
        !copy_side_ok("src", src, size, src_agent, gpu))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    return HSA_STATUS_SUCCESS;
}

/* Whether a copy's destination holds byte p, an agent or host address (NULL: any copy). */
static bool copy_writes(const hsa_double_copy *r, const char *p)
{
    const char *dst = in_alias(p) ? r->dst : r->host_dst;
    size_t span = r->size;

    if (p == NULL)
        return true;
    if (r->rect != 0)
        span = (size_t)(r->depth - 1) * r->dst_slice + (size_t)(r->height - 1) * r->dst_pitch +
               r->width;
    return p >= dst && p < dst + span;
}

/* Queue a copy for the DMA engine with its dependencies. Lock held. */
static void queue_copy(dcopy *c, uint32_t ndeps, const hsa_signal_t *deps, hsa_signal_t completion)
{
    c->rec.ndeps = ndeps;
    c->rec.completion = completion;
    for (uint32_t i = 0; i < ndeps; i++) {
        c->deps[i] = deps[i];
        if (i < 8)
            c->rec.deps[i] = deps[i];
    }
    if (g.copy_fails > 0 && copy_writes(&c->rec, g.copy_fail_dst)) {
        g.copy_fails--;
        c->fail_value = g.copy_fail_value;
    }
    c->seq = ++g.next_id;
    c->next = g.copies;
    g.copies = c;
    dwake();
}

/* A copy record with room for ndeps dependencies (its deps NULL if that failed), or NULL. */
static dcopy *copy_alloc(uint32_t ndeps)
{
    dcopy *c = calloc(1, sizeof(*c));

    if (c != NULL)
        c->deps = calloc(ndeps + 1, sizeof(hsa_signal_t));
    return c;
}

/* Queue a checked copy (st success) or drop it, and give g.mu back (held on entry). */
static hsa_status_t copy_finish(dcopy *c, hsa_status_t st, uint32_t ndeps, const hsa_signal_t *deps,
                                hsa_signal_t completion)
{
    if (st == HSA_STATUS_SUCCESS)
        queue_copy(c, ndeps, deps, completion);
    dmu_unlock(&g.mu);
    if (st != HSA_STATUS_SUCCESS) {
        free(c->deps);
        free(c);
    }
    return st;
}

/*
 * ROCr answers a copy of nothing (0 bytes; a rectangle with a zero extent)
 * with HSA_STATUS_SUCCESS after checking its arguments, and never touches
 * its completion signal: whoever waits for it waits forever. A violation;
 * the double decrements the signal anyway so that the test ends and reports
 * it. Gives g.mu back (held on entry).
 */
static hsa_status_t empty_copy(dcopy *c, const char *what, hsa_signal_t completion)
{
    dsig *done = find_signal(completion);

    violation("%s: ROCr returns success and never signals the completion signal", what);
    if (done != NULL)
        set_value(done, atomic_load(&done->value) - 1);
    dmu_unlock(&g.mu);
    free(c->deps);
    free(c);
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src,
                                       hsa_agent_t src_agent, size_t size, uint32_t num_dep_signals,
                                       const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal)
{
    hsa_status_t st = enter("hsa_amd_memory_async_copy");
    dcopy *c = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    c = copy_alloc(num_dep_signals);
    if (c == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    dmu_lock(&g.mu);
    st = c->deps == NULL ? HSA_STATUS_ERROR_OUT_OF_RESOURCES
                         : check_copy(dst, dst_agent, src, src_agent, size, num_dep_signals,
                                      dep_signals, completion_signal);
    if (st == HSA_STATUS_SUCCESS && size == 0)
        return empty_copy(c, "hsa_amd_memory_async_copy: 0 bytes", completion_signal);
    if (st == HSA_STATUS_SUCCESS) {
        c->rec.dst = dst;
        c->rec.src = src;
        c->rec.host_dst = device_to_host(dst, size);
        c->rec.host_src = device_to_host(src, size);
        c->rec.size = size;
    }
    return copy_finish(c, st, num_dep_signals, dep_signals, completion_signal);
}

/* One side of a rect copy: its first byte and span, or a rule breach (0). Lock held. */
static bool rect_side(const char *side, const hsa_pitched_ptr_t *p, const hsa_dim3_t *off,
                      const hsa_dim3_t *range, char **start_p, size_t *span_p)
{
    if (((uintptr_t)p->base | p->pitch | p->slice) % 4 != 0) {
        violation("hsa_amd_memory_async_copy_rect: %s base, pitch or slice not dword-aligned",
                  side);
        return false;
    }
    if ((uint64_t)off->x + range->x > p->pitch ||
        (p->slice != 0 && (uint64_t)off->y + range->y > p->slice / p->pitch) ||
        (range->z > 1 && p->slice == 0)) {
        violation("hsa_amd_memory_async_copy_rect: %s rectangle outside its pitch or slice", side);
        return false;
    }
    *start_p = (char *)p->base + (size_t)off->z * p->slice + (size_t)off->y * p->pitch + off->x;
    *span_p = (size_t)(range->z - 1) * p->slice + (size_t)(range->y - 1) * p->pitch + range->x;
    return true;
}

/* Whether memory at p is one of a GPU's pool allocations. Lock held. */
static bool is_device_memory(const void *p, size_t n)
{
    dalloc *a = find_alloc(p, n);

    return a != NULL && pool_gpu(a->pool) >= 0;
}

/*
 * Validate a rect copy as ROCr does (dword-aligned bases, pitches and
 * slices; rectangles inside their pitch and slice; a GPU copy agent; no
 * host-to-host) and against the memory: the direction must name the sides'
 * kinds, both sides be reachable by the GPU, the spans not overlap. Fills
 * the record. Lock held.
 */
static hsa_status_t check_rect(const hsa_pitched_ptr_t *dst, const hsa_dim3_t *doff,
                               const hsa_pitched_ptr_t *src, const hsa_dim3_t *soff,
                               const hsa_dim3_t *range, hsa_agent_t agent,
                               hsa_amd_copy_direction_t dir, hsa_double_copy *rec)
{
    int gpu = gpu_index(agent);
    char *d = NULL, *s = NULL;
    size_t dspan = 0, sspan = 0;
    bool src_dev = dir == hsaDeviceToHost || dir == hsaDeviceToDevice;
    bool dst_dev = dir == hsaHostToDevice || dir == hsaDeviceToDevice;

    if (dir == hsaHostToHost)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (gpu < 0)
        return HSA_STATUS_ERROR_INVALID_AGENT; /* CPU agents are not supported */
    if (!rect_side("dst", dst, doff, range, &d, &dspan) ||
        !rect_side("src", src, soff, range, &s, &sspan))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (is_device_memory(s, sspan) != src_dev || is_device_memory(d, dspan) != dst_dev)
        violation("hsa_amd_memory_async_copy_rect: direction %d does not match the memory", dir);
    if (!dma_reachable(gpu, d, dspan) || !dma_reachable(gpu, s, sspan)) {
        violation("hsa_amd_memory_async_copy_rect: a side is not reachable by the GPU (a host "
                  "address of locked memory is not: the GPU uses the agent address)");
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    rec->host_dst = device_to_host(d, dspan);
    rec->host_src = device_to_host(s, sspan);
    if ((char *)rec->host_dst < (const char *)rec->host_src + sspan &&
        (const char *)rec->host_src < (char *)rec->host_dst + dspan)
        violation("hsa_amd_memory_async_copy_rect: source and destination overlap");
    rec->dst = d;
    rec->src = s;
    rec->size = (size_t)range->x * range->y * range->z;
    rec->rect = 1;
    rec->width = range->x;
    rec->height = range->y;
    rec->depth = range->z;
    rec->dst_pitch = dst->pitch;
    rec->dst_slice = dst->slice;
    rec->src_pitch = src->pitch;
    rec->src_slice = src->slice;
    rec->direction = dir;
    return HSA_STATUS_SUCCESS;
}

/* Check the signals of a copy. Lock held. */
static hsa_status_t check_copy_signals(const char *call, uint32_t ndeps, const hsa_signal_t *deps,
                                       hsa_signal_t completion)
{
    if (completion.handle == 0 || (ndeps != 0 && deps == NULL) || (ndeps == 0 && deps != NULL))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (use_signal(completion, call) == NULL)
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    for (uint32_t i = 0; i < ndeps; i++) {
        if (use_signal(deps[i], call) == NULL)
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    return HSA_STATUS_SUCCESS;
}

hsa_status_t
hsa_amd_memory_async_copy_rect(const hsa_pitched_ptr_t *dst, const hsa_dim3_t *dst_offset,
                               const hsa_pitched_ptr_t *src, const hsa_dim3_t *src_offset,
                               const hsa_dim3_t *range, hsa_agent_t copy_agent,
                               hsa_amd_copy_direction_t dir, uint32_t num_dep_signals,
                               const hsa_signal_t *dep_signals, hsa_signal_t completion_signal)
{
    hsa_status_t st = enter("hsa_amd_memory_async_copy_rect");
    dcopy *c = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (dst == NULL || src == NULL || dst_offset == NULL || src_offset == NULL || range == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    c = copy_alloc(num_dep_signals);
    if (c == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    dmu_lock(&g.mu);
    st = c->deps == NULL ? HSA_STATUS_ERROR_OUT_OF_RESOURCES
                         : check_copy_signals("hsa_amd_memory_async_copy_rect", num_dep_signals,
                                              dep_signals, completion_signal);
    if (st == HSA_STATUS_SUCCESS && dir != hsaHostToHost && gpu_index(copy_agent) >= 0 &&
        (range->x == 0 || range->y == 0 || range->z == 0))
        return empty_copy(c, "hsa_amd_memory_async_copy_rect: a zero extent", completion_signal);
    if (st == HSA_STATUS_SUCCESS)
        st = check_rect(dst, dst_offset, src, src_offset, range, copy_agent, dir, &c->rec);
    if (st == HSA_STATUS_SUCCESS && g.cfg.no_sdma != 0)
        st = HSA_STATUS_ERROR_OUT_OF_RESOURCES; /* ROCr: the blit is not an SDMA engine */
    return copy_finish(c, st, num_dep_signals, dep_signals, completion_signal);
}

/* Move a copy's bytes (a rect row by row). */
static void run_copy(const hsa_double_copy *r)
{
    if (r->rect == 0) {
        memmove(r->host_dst, r->host_src, r->size);
        return;
    }
    for (uint32_t z = 0; z < r->depth; z++) {
        for (uint32_t y = 0; y < r->height; y++)
            memmove((char *)r->host_dst + z * r->dst_slice + y * r->dst_pitch,
                    (const char *)r->host_src + z * r->src_slice + y * r->src_pitch, r->width);
    }
}

/*
 * Whether every dependency of a copy is done: exactly 0, as ROCr waits ("the
 * copy will start after every signal has been observed with the value 0"), so
 * a failed dependency (negative) holds the copy forever. Lock held.
 */
static bool copy_ready(const dcopy *c)
{
    for (uint32_t i = 0; i < c->rec.ndeps; i++) {
        dsig *d = find_signal(c->deps[i]);

        if (d != NULL && atomic_load(&d->value) != 0)
            return false;
    }
    return true;
}

/* Take the copy to run next: newest ready first unless copies_in_order. Lock held. */
static dcopy *take_copy(void)
{
    dcopy **best = NULL;

    for (dcopy **link = &g.copies; *link != NULL; link = &(*link)->next) {
        if (!copy_ready(*link))
            continue;
        if (best == NULL || (g.cfg.copies_in_order != 0) == ((*link)->seq < (*best)->seq))
            best = link;
    }
    if (best != NULL) {
        dcopy *c = *best;

        *best = c->next;
        return c;
    }
    return NULL;
}

/* Finish a copy: record it and decrement its completion signal, or set it to the
 * failure value (a failed copy, as the runtime reports one). Lock held. */
static void complete_copy(dcopy *c)
{
    dsig *done = use_signal(c->rec.completion, "DMA engine completion");

    c->rec.sequence = ++g.sequence;
    c->rec.failed = c->fail_value < 0;
    g.done_copies[g.ncopies % KEEP_RECORDS] = c->rec;
    g.ncopies++;
    if (done != NULL && c->fail_value < 0)
        set_value(done, c->fail_value);
    else if (done != NULL)
        set_value(done, atomic_load(&done->value) - 1);
    free(c->deps);
    free(c);
}

/* The DMA engine. */
static void *dma_thread(void *unused)
{
    (void)unused;
    hardware_thread(true);
    dmu_lock(&g.mu);
    while (g.stop_threads == 0) {
        dcopy *c = g.paused != 0 ? NULL : take_copy();

        if (c == NULL) {
            wait_ms(20);
            continue;
        }
        g.running = c;
        dmu_unlock(&g.mu);
        if (g.cfg.copy_delay_us != 0) {
            struct timespec ts = {0, (long)g.cfg.copy_delay_us * 1000L};

            nanosleep(&ts, NULL);
        }
        if (c->fail_value >= 0)
            run_copy(&c->rec);
        dmu_lock(&g.mu);
        g.running = NULL;
        complete_copy(c);
    }
    dmu_unlock(&g.mu);
    hardware_thread(false);
    return NULL;
}

/* ------------------------------------------------------ code objects */

hsa_status_t hsa_code_object_reader_create_from_memory(const void *code_object, size_t size,
                                                       hsa_code_object_reader_t *reader)
{
    hsa_status_t st = enter("hsa_code_object_reader_create_from_memory");
    dreader *r = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (code_object == NULL || size == 0 || reader == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_lock(&g.mu);
    if (reuse_handles() && g.free_readers != NULL) {
        r = g.free_readers;
        g.free_readers = r->next;
        memset(r, 0, sizeof(*r));
        g.reused.readers++;
    }
    dmu_unlock(&g.mu);
    if (r == NULL)
        r = calloc(1, sizeof(*r));
    if (r == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    r->image = code_object;
    r->size = size;
    dmu_lock(&g.mu);
    r->next = g.readers;
    g.readers = r;
    dmu_unlock(&g.mu);
    reader->handle = (uint64_t)(uintptr_t)r;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t reader)
{
    hsa_status_t st = enter("hsa_code_object_reader_destroy");
    dreader **link = &g.readers;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && (uint64_t)(uintptr_t)*link != reader.handle)
        link = &(*link)->next;
    if (*link == NULL) {
        st = HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
    } else {
        dreader *r = *link;

        *link = r->next;
        if (reuse_handles()) {
            r->next = g.free_readers;
            g.free_readers = r;
        } else {
            free(r);
        }
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t
hsa_executable_create_alt(hsa_profile_t profile,
                          hsa_default_float_rounding_mode_t default_float_rounding_mode,
                          const char *options, hsa_executable_t *executable)
{
    hsa_status_t st = enter("hsa_executable_create_alt");
    dexec *e = NULL;

    (void)default_float_rounding_mode;
    (void)options;
    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (executable == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_lock(&g.mu);
    if (reuse_handles() && g.free_execs != NULL) {
        e = g.free_execs;
        g.free_execs = e->next;
        memset(e, 0, sizeof(*e));
        g.reused.executables++;
    }
    dmu_unlock(&g.mu);
    if (e == NULL)
        e = calloc(1, sizeof(*e));
    if (e == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    e->profile = profile;
    dmu_lock(&g.mu);
    e->next = g.execs;
    g.execs = e;
    dmu_unlock(&g.mu);
    executable->handle = (uint64_t)(uintptr_t)e;
    return HSA_STATUS_SUCCESS;
}

/* Lock held. */
static dexec *find_exec(hsa_executable_t x)
{
    for (dexec *e = g.execs; e != NULL; e = e->next) {
        if ((uint64_t)(uintptr_t)e == x.handle)
            return e;
    }
    return NULL;
}

static dreader *find_reader(hsa_code_object_reader_t x)
{
    for (dreader *r = g.readers; r != NULL; r = r->next) {
        if ((uint64_t)(uintptr_t)r == x.handle)
            return r;
    }
    return NULL;
}

/* Copy the PT_LOAD segments into fresh memory; returns its base. Lock held. */
static char *load_segments(const unsigned char *img, size_t size, const Elf64_Ehdr *eh,
                           size_t *span_p)
{
    size_t span = 0;
    char *base = NULL;

    for (int pass = 0; pass < 2; pass++) {
        for (uint16_t i = 0; i < eh->e_phnum; i++) {
            Elf64_Phdr ph;

            if (eh->e_phoff + (uint64_t)(i + 1) * sizeof(ph) > size)
                return NULL;
            memcpy(&ph, img + eh->e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
            if (ph.p_type != PT_LOAD || ph.p_offset + ph.p_filesz > size)
                continue;
            if (pass == 0 && ph.p_vaddr + ph.p_memsz > span)
                span = ph.p_vaddr + ph.p_memsz;
            if (pass == 1)
                memcpy(base + ph.p_vaddr, img + ph.p_offset, ph.p_filesz);
        }
        if (pass == 0) {
            base = span != 0 ? aligned_alloc(GRANULE, round_granule(span)) : NULL;
            if (base == NULL)
                return NULL;
            memset(base, 0, round_granule(span));
        }
    }
    *span_p = span;
    return base;
}

/* The length of a kernel symbol's name without ".kd" (code object v3+; v2 names are bare). */
static size_t kernel_name_len(const char *name)
{
    size_t len = strlen(name);

    return len > 3 && strcmp(name + len - 3, ".kd") == 0 ? len - 3 : len;
}

/* Read a kernel's segment sizes: from its kernel descriptor (v3+) or amd_kernel_code_t (v2). */
static void read_descriptor(dsymbol *s, const char *at, bool v2)
{
    uint64_t kernarg = 0;

    if (v2) {
        memcpy(&s->group, at + offsetof(amd_kernel_code_t, workgroup_group_segment_byte_size), 4);
        memcpy(&s->private_size,
               at + offsetof(amd_kernel_code_t, workitem_private_segment_byte_size), 4);
        memcpy(&kernarg, at + offsetof(amd_kernel_code_t, kernarg_segment_byte_size), 8);
        s->kernarg = (uint32_t)kernarg;
        return;
    }
    memcpy(&s->group, at, 4);            /* group_segment_fixed_size */
    memcpy(&s->private_size, at + 4, 4); /* private_segment_fixed_size */
    memcpy(&s->kernarg, at + 8, 4);      /* kernarg_size */
}

/* Add a symbol from .dynsym of the code object loaded at seg. Lock held. */
static void add_symbol(dexec *e, const dsegment *seg, const char *name, const Elf64_Sym *sym,
                       hsa_agent_t agent)
{
    dsymbol *s = calloc(1, sizeof(*s));
    size_t len = strlen(name);
    char *base = seg->base;
    char kernel[sizeof(s->name)];
    const gm_image_set *set = NULL;
    bool v2 = ELF64_ST_TYPE(sym->st_info) == STT_HSA_KERNEL;

    if (s == NULL)
        return;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->address = (uint64_t)(uintptr_t)(base + sym->st_value);
    s->size = (uint32_t)sym->st_size;
    s->agent = agent;
    s->exec = e;
    s->is_kernel = v2 || (len > 3 && strcmp(name + len - 3, ".kd") == 0);
    if (s->is_kernel) {
        read_descriptor(s, base + sym->st_value, v2);
        s->meta = gm__hsa_codeobj_find(&seg->meta, name);
        /* The simulator's host-compiled kernel of the same name, without ".kd". */
        snprintf(kernel, sizeof(kernel), "%.*s", (int)kernel_name_len(name), name);
        set = gm__builtin_set_with_kernel(kernel, &s->host);
        s->host_table = set != NULL ? set->host : NULL;
    }
    s->next = e->symbols;
    e->symbols = s;
}

/* Read .dynsym's global objects. Lock held. */
static void load_symbols(dexec *e, const unsigned char *img, size_t size, const Elf64_Ehdr *eh,
                         const dsegment *seg, hsa_agent_t agent)
{
    for (uint16_t i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr sh, strs;

        if (eh->e_shoff + (uint64_t)(i + 1) * sizeof(sh) > size)
            return;
        memcpy(&sh, img + eh->e_shoff + (uint64_t)i * sizeof(sh), sizeof(sh));
        if (sh.sh_type != SHT_DYNSYM || sh.sh_link >= eh->e_shnum)
            continue;
        memcpy(&strs, img + eh->e_shoff + (uint64_t)sh.sh_link * sizeof(strs), sizeof(strs));
        for (uint64_t at = sh.sh_offset;
             at + sizeof(Elf64_Sym) <= sh.sh_offset + sh.sh_size && at + sizeof(Elf64_Sym) <= size;
             at += sizeof(Elf64_Sym)) {
            Elf64_Sym sym;

            memcpy(&sym, img + at, sizeof(sym));
            if ((ELF64_ST_TYPE(sym.st_info) == STT_OBJECT ||
                 ELF64_ST_TYPE(sym.st_info) == STT_HSA_KERNEL) &&
                sym.st_name < strs.sh_size && ELF64_ST_BIND(sym.st_info) == STB_GLOBAL)
                add_symbol(e, seg, (const char *)img + strs.sh_offset + sym.st_name, &sym, agent);
        }
    }
}

/* Check the ELF header against the agent. */
static hsa_status_t check_elf(const unsigned char *img, size_t size, Elf64_Ehdr *eh)
{
    if (size < sizeof(*eh))
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    memcpy(eh, img, sizeof(*eh));
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_machine != EM_AMDGPU)
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    if ((eh->e_flags & 0xff) != gpu_mach())
        return HSA_STATUS_ERROR_INVALID_ISA;
    return HSA_STATUS_SUCCESS;
}

/*
 * Load a code object's segments and remember them, with its metadata, with
 * the executable. Metadata that does not parse leaves the kernels unbound
 * to host code (their dispatches then run only registered functions).
 * Lock held.
 */
static hsa_status_t add_segment(dexec *e, const dreader *r, const Elf64_Ehdr *eh, dsegment **seg_p)
{
    dsegment *seg = calloc(1, sizeof(*seg));
    size_t span = 0;
    char *base = seg != NULL ? load_segments(r->image, r->size, eh, &span) : NULL;

    if (base == NULL || track(base, span, POOL_CODE) == NULL) {
        free(base);
        free(seg);
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    }
    seg->base = base;
    if (gm__hsa_codeobj_parse(r->image, r->size, &seg->meta) != GM_OK)
        memset(&seg->meta, 0, sizeof(seg->meta));
    seg->next = e->segments;
    e->segments = seg;
    *seg_p = seg;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable, hsa_agent_t agent,
                                                   hsa_code_object_reader_t code_object_reader,
                                                   const char *options,
                                                   hsa_loaded_code_object_t *loaded_code_object)
{
    hsa_status_t st = enter("hsa_executable_load_agent_code_object");
    dexec *e = NULL;
    dreader *r = NULL;
    Elf64_Ehdr eh;
    dsegment *seg = NULL;

    (void)options;
    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    e = find_exec(executable);
    r = find_reader(code_object_reader);
    if (e == NULL || r == NULL)
        st = e == NULL ? HSA_STATUS_ERROR_INVALID_EXECUTABLE
                       : HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
    else if (e->frozen != 0)
        st = HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
    else if (gpu_index(agent) < 0)
        st = HSA_STATUS_ERROR_INVALID_AGENT;
    else if (e->profile != HSA_PROFILE_BASE)
        st = HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS; /* the agent's profile is BASE */
    else
        st = check_elf(r->image, r->size, &eh);
    if (st == HSA_STATUS_SUCCESS)
        st = add_segment(e, r, &eh, &seg);
    if (st == HSA_STATUS_SUCCESS) {
        load_symbols(e, r->image, r->size, &eh, seg, agent);
        if (loaded_code_object != NULL)
            loaded_code_object->handle = (uint64_t)(uintptr_t)seg->base;
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char *options)
{
    hsa_status_t st = enter("hsa_executable_freeze");
    dexec *e = NULL;

    (void)options;
    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    e = find_exec(executable);
    if (e == NULL)
        st = HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    else if (e->frozen != 0)
        st = HSA_STATUS_ERROR_FROZEN_EXECUTABLE;
    else
        e->frozen = 1;
    dmu_unlock(&g.mu);
    return st;
}

/* Free an executable's symbols, its code segments' records and memory; keep: the struct
 * itself goes to the free list (its handle is handed out again). Lock held. */
static void free_exec(dexec *e, bool keep)
{
    while (e->symbols != NULL) {
        dsymbol *sym = e->symbols;

        e->symbols = sym->next;
        free(sym);
    }
    while (e->segments != NULL) {
        dsegment *seg = e->segments;
        dalloc **link = &g.allocs;

        while (*link != NULL && (*link)->base != seg->base)
            link = &(*link)->next;
        if (*link != NULL) {
            dalloc *rec = *link;

            *link = rec->next;
            free(rec);
        }
        e->segments = seg->next;
        gm__hsa_codeobj_meta_free(&seg->meta);
        free(seg->base);
        free(seg);
    }
    if (keep) {
        e->next = g.free_execs;
        g.free_execs = e;
    } else {
        free(e);
    }
}

hsa_status_t hsa_executable_destroy(hsa_executable_t executable)
{
    hsa_status_t st = enter("hsa_executable_destroy");
    dexec **link = &g.execs;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    while (*link != NULL && (uint64_t)(uintptr_t)*link != executable.handle)
        link = &(*link)->next;
    if (*link == NULL) {
        st = HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    } else {
        dexec *e = *link;

        *link = e->next;
        free_exec(e, reuse_handles());
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable, const char *symbol_name,
                                               const hsa_agent_t *agent,
                                               hsa_executable_symbol_t *symbol)
{
    hsa_status_t st = enter("hsa_executable_get_symbol_by_name");
    dexec *e = NULL;
    dsymbol *s = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (symbol_name == NULL || symbol == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_lock(&g.mu);
    e = find_exec(executable);
    if (e == NULL) {
        st = HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    } else {
        if (e->frozen == 0)
            violation("hsa_executable_get_symbol_by_name: executable not frozen");
        for (s = e->symbols; s != NULL && strcmp(s->name, symbol_name) != 0; s = s->next)
            continue;
        if (s == NULL)
            st = HSA_STATUS_ERROR_INVALID_SYMBOL_NAME;
        else if (agent == NULL || agent->handle != s->agent.handle)
            st = HSA_STATUS_ERROR_INVALID_AGENT; /* agent-allocated symbols need their agent */
        else
            symbol->handle = (uint64_t)(uintptr_t)s;
    }
    dmu_unlock(&g.mu);
    return st;
}

/* The symbol behind a handle in any live executable. Lock held. */
static dsymbol *find_symbol(uint64_t handle)
{
    for (dexec *e = g.execs; e != NULL; e = e->next) {
        for (dsymbol *s = e->symbols; s != NULL; s = s->next) {
            if ((uint64_t)(uintptr_t)s == handle)
                return s;
        }
    }
    return NULL;
}

/* Answer one symbol attribute; 0 if unknown. */
static int symbol_info(const dsymbol *s, int attribute, void *value)
{
    switch (attribute) {
    case HSA_EXECUTABLE_SYMBOL_INFO_TYPE:
        *(hsa_symbol_kind_t *)value =
            s->is_kernel ? HSA_SYMBOL_KIND_KERNEL : HSA_SYMBOL_KIND_VARIABLE;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT:
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS:
        *(uint64_t *)value = s->address;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE:
        *(uint32_t *)value = s->kernarg;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT:
        *(uint32_t *)value = 16;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE:
        *(uint32_t *)value = s->group;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE:
        *(uint32_t *)value = s->private_size;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK:
        *(bool *)value = false;
        return 1;
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE:
        *(uint32_t *)value = s->size;
        return 1;
    default:
        return 0;
    }
}

hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                            hsa_executable_symbol_info_t attribute, void *value)
{
    hsa_status_t st = enter("hsa_executable_symbol_get_info");
    dsymbol *s = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    s = find_symbol(executable_symbol.handle);
    if (s == NULL)
        st = HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
    else if (symbol_info(s, (int)attribute, value) == 0)
        st = HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_unlock(&g.mu);
    return st;
}

/* The kernel symbol whose descriptor is at `object`. Lock held. */
static dsymbol *find_kernel_object(uint64_t object)
{
    for (dexec *e = g.execs; e != NULL; e = e->next) {
        for (dsymbol *s = e->symbols; s != NULL; s = s->next) {
            if (s->is_kernel && s->address == object)
                return e->frozen != 0 ? s : NULL;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ queues */

/* The queue behind a public pointer. Lock held. */
static dqueue *find_queue(const hsa_queue_t *queue)
{
    for (dqueue *q = g.queues; q != NULL; q = q->next) {
        if (&q->q == queue)
            return q;
    }
    return NULL;
}

static unsigned char *slot_of(const dqueue *q, uint64_t id)
{
    return (unsigned char *)q->q.base_address + (id & (q->q.size - 1)) * 64;
}

/*
 * Copy the packet at `id` if it is published, its header loaded with acquire
 * as the packet processor does: a slot between the read and write indices may
 * still be being written by its producer (header INVALID until then), and
 * only a published packet's body is safe to read. False when it is not.
 */
static bool published_packet(const dqueue *q, uint64_t id, void *pkt, size_t size)
{
    const unsigned char *slot = slot_of(q, id);
    uint16_t header = __atomic_load_n((const uint16_t *)(const void *)slot, __ATOMIC_ACQUIRE);

    if ((header & 0xff) == HSA_PACKET_TYPE_INVALID)
        return false;
    memcpy(pkt, &header, sizeof(header));
    memcpy((unsigned char *)pkt + sizeof(header), slot + sizeof(header), size - sizeof(header));
    return true;
}

static struct dqueue *doorbell_of(uint64_t handle)
{
    for (dqueue *q = g.queues; q != NULL; q = q->next) {
        if (q->q.doorbell_signal.handle == handle)
            return q;
    }
    return NULL;
}

static void check_doorbell(const dqueue *q, const dsig *doorbell, hsa_signal_value_t value)
{
    uint64_t read = atomic_load(&q->read_index);

    if (q->q.type == HSA_QUEUE_TYPE_SINGLE && value < atomic_load(&doorbell->value))
        violation("queue %llu: doorbell of a single-producer queue rung with %lld after %lld "
                  "(it must not decrease)",
                  (unsigned long long)q->q.id, (long long)value,
                  (long long)atomic_load(&doorbell->value));
    if (value >= 0 && (uint64_t)value >= read + q->q.size)
        violation("queue %llu: packet %lld written before its slot was free (read index %llu, "
                  "%u slots): it overwrote a packet not yet consumed",
                  (unsigned long long)q->q.id, (long long)value, (unsigned long long)read,
                  (unsigned)q->q.size);
}

/* Break a queue: the runtime's error callback, no more processing. Lock held. */
static void queue_fail(dqueue *q, hsa_status_t status)
{
    q->dead = 1;
    if (q->callback == NULL) {
        violation("queue %llu failed (0x%x) without an error callback: ROCr would abort the "
                  "process",
                  (unsigned long long)q->q.id, (unsigned)status);
        return;
    }
    dmu_unlock(&g.mu);
    q->callback(status, &q->q, q->data);
    dmu_lock(&g.mu);
}

/* Whether the packet at the read index may be processed (published and announced). */
static bool packet_ready(dqueue *q)
{
    uint64_t id = atomic_load(&q->read_index);
    uint16_t header = __atomic_load_n((uint16_t *)(void *)slot_of(q, id), __ATOMIC_ACQUIRE);
    dsig *doorbell = find_signal(q->q.doorbell_signal);

    if ((header & 0xff) == HSA_PACKET_TYPE_INVALID)
        return false;
    if (doorbell != NULL && atomic_load(&doorbell->value) >= (int64_t)id) {
        q->waiting_since = 0;
        return true;
    }
    if (q->waiting_since == 0)
        q->waiting_since = now_ns();
    if (now_ns() - q->waiting_since < 1000000000)
        return false;
    violation("queue %llu: packet %llu published but the doorbell was not rung",
              (unsigned long long)q->q.id, (unsigned long long)id);
    q->waiting_since = 0;
    return true;
}

/* Whether a barrier-AND packet's dependencies are all done: exactly 0, as the packet
 * processor waits for them (a negative one, a failed operation, holds it forever). Lock
 * held. */
static bool barrier_ready(const hsa_barrier_and_packet_t *pkt)
{
    for (int d = 0; d < 5; d++) {
        dsig *s = NULL;

        if (pkt->dep_signal[d].handle == 0)
            continue;
        s = find_signal(pkt->dep_signal[d]);
        if (s == NULL)
            violation("barrier-AND: dependency 0x%llx is not a live signal",
                      (unsigned long long)pkt->dep_signal[d].handle);
        else if (atomic_load(&s->value) != 0)
            return false;
    }
    return true;
}

/* Check a dispatch packet against the kernel's descriptor and the rules. Lock held. */
static void check_dispatch(const dqueue *q, const hsa_kernel_dispatch_packet_t *p, const dsymbol *k)
{
    unsigned dims = (p->setup >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
    uint64_t threads = (uint64_t)p->workgroup_size_x * p->workgroup_size_y * p->workgroup_size_z;
    dalloc *args = find_alloc(p->kernarg_address, k->kernarg > 0 ? k->kernarg : 1);

    if (dims < 1 || dims > 3)
        violation("dispatch %s: setup dimensions %u", k->name, dims);
    if (threads == 0 || threads > 1024)
        violation("dispatch %s: work-group of %llu work-items", k->name,
                  (unsigned long long)threads);
    if (p->grid_size_x == 0 || p->grid_size_y == 0 || p->grid_size_z == 0)
        violation("dispatch %s: zero grid size", k->name);
    if ((dims < 2 && (p->workgroup_size_y != 1 || p->grid_size_y != 1)) ||
        (dims < 3 && (p->workgroup_size_z != 1 || p->grid_size_z != 1)))
        violation("dispatch %s: unused dimensions must be 1", k->name);
    if (p->reserved0 != 0 || p->reserved2 != 0)
        violation("dispatch %s: reserved fields not zero", k->name);
    if (p->group_segment_size < k->group || p->group_segment_size > GROUP_BYTES)
        violation("dispatch %s: group segment %u (kernel needs %u, at most %u)", k->name,
                  p->group_segment_size, k->group, GROUP_BYTES);
    if (p->private_segment_size < k->private_size)
        violation("dispatch %s: private segment %u < %u", k->name, p->private_segment_size,
                  k->private_size);
    if (p->kernarg_address == NULL || ((uintptr_t)p->kernarg_address & 15) != 0 || args == NULL)
        violation("dispatch %s: kernarg %p not 16-aligned runtime memory of %u bytes", k->name,
                  p->kernarg_address, k->kernarg);
    else if (args->pool != POOL_CPU_KERNARG || (args->gpu_access & (1u << q->gpu)) == 0)
        violation("dispatch %s: kernarg memory not from the kernarg pool or not reachable by "
                  "the GPU",
                  k->name);
}

/* Keep a copy of a processed packet. Lock held. */
static void record_packet(const dqueue *q, uint64_t id, const unsigned char *bytes,
                          const dsymbol *k, const void *kernarg)
{
    hsa_double_packet *r = &g.packets[g.npackets % KEEP_RECORDS];

    memset(r, 0, sizeof(*r));
    r->queue_id = q->q.id;
    r->packet_id = id;
    memcpy(r->bytes, bytes, 64);
    if (k != NULL) {
        size_t n = k->kernarg < sizeof(r->kernarg) ? k->kernarg : sizeof(r->kernarg);

        snprintf(r->kernel, sizeof(r->kernel), "%.*s", (int)kernel_name_len(k->name), k->name);
        if (kernarg != NULL && find_alloc(kernarg, n) != NULL)
            memcpy(r->kernarg, kernarg, n);
        r->kernarg_size = k->kernarg;
        r->group_fixed = k->group;
        r->private_fixed = k->private_size;
    }
    r->sequence = ++g.sequence;
    g.npackets++;
}

/* The host function registered for a kernel symbol ("name.kd", or v2's "name"). Lock held. */
static dkernel *registered(const dsymbol *k)
{
    size_t len = kernel_name_len(k->name);

    for (dkernel *r = g.kernels; r != NULL; r = r->next) {
        if (strlen(r->name) == len && strncmp(r->name, k->name, len) == 0)
            return r;
    }
    return NULL;
}

/* A dispatch to run on the simulator, gathered under the lock. */
typedef struct host_run {
    gm__sim_launch launch;
    void *args[MAX_HOST_PARAMS]; /* into the kernarg segment, at the metadata's offsets */
    struct {
        void *host;      /* the constant array of the host table */
        const void *dev; /* the code object's variable of the same name */
        size_t bytes;
    } globals[MAX_HOST_GLOBALS];
    int nglobals;
} host_run;

/* Point run->args at the explicit arguments in the kernarg segment. Lock held. */
static bool host_run_args(const dsymbol *k, const hsa_kernel_dispatch_packet_t *p, host_run *run)
{
    const gm__hsa_kernel_meta *m = k->meta;
    int32_t n = 0;

    for (uint32_t i = 0; i < m->nargs; i++) {
        const gm__hsa_arg *a = &m->args[i];

        if (!GM_HSA_ARG_IS_EXPLICIT(a->kind))
            continue;
        if (n >= k->host->nparams || n >= MAX_HOST_PARAMS || a->size != k->host->param_sizes[n] ||
            (uint64_t)a->offset + a->size > k->kernarg) {
            violation("dispatch %s: argument %d (offset %u, %u bytes) does not match the host "
                      "kernel's parameter",
                      k->name, (int)n, a->offset, a->size);
            return false;
        }
        run->args[n++] = (char *)p->kernarg_address + a->offset;
    }
    if (n != k->host->nparams) {
        violation("dispatch %s: the metadata has %d explicit arguments, the host kernel %d",
                  k->name, (int)n, (int)k->host->nparams);
        return false;
    }
    return true;
}

/* Pair the host table's constant arrays with the executable's variables. Lock held. */
static bool host_run_globals(const dsymbol *k, host_run *run)
{
    const gm_host_table *t = k->host_table;

    for (int32_t i = 0; i < t->nglobals; i++) {
        const gm_host_global *hg = t->globals[i];
        const dsymbol *v = k->exec->symbols;

        if (hg == NULL) /* GM_HOST_NO_GLOBALS */
            continue;
        while (v != NULL && (v->is_kernel || strcmp(v->name, hg->name) != 0))
            v = v->next;
        if (v == NULL || run->nglobals == MAX_HOST_GLOBALS) {
            violation("dispatch %s: constant array %s has no variable symbol in the executable",
                      k->name, hg->name);
            return false;
        }
        run->globals[run->nglobals].host = hg->address;
        run->globals[run->nglobals].dev = (const void *)(uintptr_t)v->address;
        run->globals[run->nglobals].bytes = hg->bytes < v->size ? hg->bytes : v->size;
        run->nglobals++;
    }
    return true;
}

/*
 * Prepare a dispatch of a kernel bound to host code: blocks = grid
 * work-items / work-group size (whole work-groups only), dynamic shared
 * memory = the packet's group segment less the descriptor's fixed size,
 * the wavefront size of the metadata. Breaches are violations. Lock held.
 */
static bool host_run_prepare(const dsymbol *k, const hsa_kernel_dispatch_packet_t *p, host_run *run)
{
    const uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
    const uint32_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
    uint32_t wave = k->meta != NULL && k->meta->wavefront_size != 0 ? k->meta->wavefront_size
                                                                    : gpu_arch()->wavefront;

    memset(run, 0, sizeof(*run));
    if (k->meta == NULL) {
        violation("dispatch %s: no metadata for the kernel", k->name);
        return false;
    }
    if (p->group_segment_size < k->group)
        return false; /* check_dispatch recorded it */
    for (int d = 0; d < 3; d++) {
        if (wg[d] == 0 || grid[d] % wg[d] != 0) {
            violation("dispatch %s: grid %u is not whole work-groups of %u (dimension %d)", k->name,
                      grid[d], wg[d], d);
            return false;
        }
        run->launch.grid[d] = grid[d] / wg[d];
        run->launch.block[d] = wg[d];
    }
    run->launch.kernel = k->host;
    run->launch.args = run->args;
    run->launch.dynamic_shared_bytes = p->group_segment_size - k->group;
    run->launch.warp_size = wave == 32 ? 32u : 64u;
    return host_run_args(k, p, run) && host_run_globals(k, run);
}

/* Run a prepared dispatch on the simulator (lock not held). */
static gm_status host_run_execute(host_run *run)
{
    gm_status status = GM_OK;

    if (run->nglobals > 0)
        dmu_lock(&g.host_globals_mu);
    for (int i = 0; i < run->nglobals; i++)
        memcpy(run->globals[i].host, run->globals[i].dev, run->globals[i].bytes);
    status = gm__sim_run("HSA double dispatch", &run->launch);
    if (run->nglobals > 0)
        dmu_unlock(&g.host_globals_mu);
    return status;
}

/* Whether the kernel's metadata has a global_buffer argument of 8 bytes at `offset`. */
static bool buffer_argument(const dsymbol *k, size_t offset)
{
    for (uint32_t i = 0; k->meta != NULL && i < k->meta->nargs; i++) {
        const gm__hsa_arg *a = &k->meta->args[i];

        if (a->offset == offset)
            return a->kind == GM_HSA_ARG_GLOBAL_BUFFER && a->size == 8;
    }
    return false;
}

/*
 * The kernarg segment as the kernel's host code must see it: a global_buffer
 * argument holding an agent address of locked memory becomes its host
 * address (the GPU reaches the memory at the agent address, the host code
 * runs on the CPU). *copy_p is a malloc'ed copy when something was
 * translated, else NULL (run on the segment as it is). Any other 8-byte
 * word holding an agent address (a pointer inside a by-value argument,
 * any word of a kernel without metadata) cannot be translated in general,
 * nor can an agent address whose lock is gone: violations, and false (the
 * dispatch is not run). Lock held.
 */
static bool host_kernarg(const dsymbol *k, const hsa_kernel_dispatch_packet_t *p,
                         unsigned char **copy_p)
{
    const unsigned char *seg = p->kernarg_address;
    bool ok = true;

    *copy_p = NULL;
    if (seg == NULL || k->kernarg < 8 || ((uintptr_t)seg & 7) != 0 ||
        find_alloc(seg, k->kernarg) == NULL || alias_region == NULL)
        return true;
    for (size_t at = 0; at + 8 <= k->kernarg; at += 8) {
        uint64_t word = 0;
        char *host = NULL;

        memcpy(&word, seg + at, 8);
        if (!in_alias((const void *)(uintptr_t)word))
            continue;
        if (!buffer_argument(k, at)) {
            violation("dispatch %s: kernarg bytes %zu..%zu hold agent address 0x%llx of locked "
                      "memory outside a global_buffer argument; the double cannot give the "
                      "host code its host address",
                      k->name, at, at + 8, (unsigned long long)word);
            ok = false;
            continue;
        }
        host = device_to_host((const void *)(uintptr_t)word, 1);
        if (host == NULL) {
            violation("dispatch %s: argument at kernarg offset %zu is agent address 0x%llx of no "
                      "live lock (unlocked memory)",
                      k->name, at, (unsigned long long)word);
            ok = false;
            continue;
        }
        if (*copy_p == NULL) {
            *copy_p = malloc(k->kernarg);
            if (*copy_p == NULL) {
                violation("dispatch %s: the double has no memory to translate arguments", k->name);
                return false;
            }
            memcpy(*copy_p, seg, k->kernarg);
        }
        word = (uint64_t)(uintptr_t)host;
        memcpy(*copy_p + at, &word, 8);
    }
    if (!ok) {
        free(*copy_p);
        *copy_p = NULL;
    }
    return ok;
}

/* Run a dispatch; false when the queue broke. Lock held. */
static bool run_dispatch(dqueue *q, uint64_t id, const hsa_kernel_dispatch_packet_t *p)
{
    dsymbol *k = find_kernel_object(p->kernel_object);
    dkernel *fn = NULL;
    host_run run;
    hsa_kernel_dispatch_packet_t hp;
    unsigned char *args = NULL;
    gm_status status = GM_OK;

    if (k == NULL) {
        violation("dispatch: kernel object 0x%llx is not a kernel of a frozen executable",
                  (unsigned long long)p->kernel_object);
        queue_fail(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT);
        return false;
    }
    check_dispatch(q, p, k);
    record_packet(q, id, (const unsigned char *)p, k, p->kernarg_address);
    if (g.cfg.fault_kernel != NULL &&
        strncmp(k->name, g.cfg.fault_kernel, strlen(g.cfg.fault_kernel)) == 0) {
        queue_fail(q, (hsa_status_t)HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION);
        return false;
    }
    if (g.cfg.memory_fault_kernel != NULL &&
        strncmp(k->name, g.cfg.memory_fault_kernel, strlen(g.cfg.memory_fault_kernel)) == 0) {
        /* A page fault: AqlQueue::ExceptionHandler drops HSA_STATUS_ERROR_MEMORY_FAULT (no
         * queue callback), the queue stays stopped, VMFaultHandler gets the event. */
        q->dead = 1;
        push_fault(q->gpu, g.cfg.fault_address != 0 ? g.cfg.fault_address : 0x1000,
                   g.cfg.fault_reason_mask != 0 ? g.cfg.fault_reason_mask
                                                : HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
        return false;
    }
    fn = registered(k);
    if (!host_kernarg(k, p, &args))
        return true; /* recorded: not run */
    hp = *p;         /* the host code reads locked memory at its host address */
    if (args != NULL)
        hp.kernarg_address = args;
    if (fn != NULL) {
        dmu_unlock(&g.mu);
        fn->fn(&hp, fn->user);
        dmu_lock(&g.mu);
    } else if (k->host != NULL && host_run_prepare(k, &hp, &run)) {
        dmu_unlock(&g.mu);
        status = host_run_execute(&run);
        dmu_lock(&g.mu);
    }
    free(args);
    if (status != GM_OK) { /* a barrier not every work-item reached: the wave faults */
        queue_fail(q, HSA_STATUS_ERROR_EXCEPTION);
        return false;
    }
    return true;
}

/* Retire the packet at the read index: completion, poison, header INVALID, next. Lock held. */
static void retire(dqueue *q, uint64_t id, hsa_signal_t completion)
{
    unsigned char *slot = slot_of(q, id);

    if (completion.handle != 0) {
        dsig *done = use_signal(completion, "packet completion");

        if (done != NULL)
            set_value(done, atomic_load(&done->value) - 1);
    }
    memset(slot + 4, 0xAB, 60); /* a producer writing the header first would publish this */
    __atomic_store_n((uint16_t *)(void *)slot, (uint16_t)HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
    atomic_store(&q->read_index, id + 1);
    dwake();
}

/* Process the packet at the read index (it is published). Lock held. */
static void process(dqueue *q)
{
    uint64_t id = atomic_load(&q->read_index);
    hsa_kernel_dispatch_packet_t pkt;
    unsigned type = 0, acquire = 0, release = 0;

    memcpy(&pkt, slot_of(q, id), sizeof(pkt));
    type = pkt.header & 0xff;
    acquire = (pkt.header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3;
    release = (pkt.header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3;
    if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH &&
        (acquire != HSA_FENCE_SCOPE_SYSTEM || release != HSA_FENCE_SCOPE_SYSTEM))
        violation("dispatch packet %llu: fences must be system scope for host-visible results",
                  (unsigned long long)id);
    if (type == HSA_PACKET_TYPE_BARRIER_AND) {
        hsa_barrier_and_packet_t bar;

        memcpy(&bar, &pkt, sizeof(bar));
        if (!barrier_ready(&bar)) {
            wait_ms(5);
            return;
        }
        record_packet(q, id, (const unsigned char *)&bar, NULL, NULL);
        retire(q, id, bar.completion_signal);
    } else if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
        if (run_dispatch(q, id, &pkt))
            retire(q, id, pkt.completion_signal);
    } else {
        violation("queue %llu: packet %llu of unsupported type %u", (unsigned long long)q->q.id,
                  (unsigned long long)id, type);
        queue_fail(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT);
    }
}

/* A queue's packet processor. */
static void *queue_thread(void *arg)
{
    dqueue *q = arg;

    hardware_thread(true);
    dmu_lock(&g.mu);
    while (q->stop == 0) {
        if (q->dead != 0 || g.paused != 0 || !packet_ready(q))
            wait_ms(20);
        else
            process(q);
    }
    dmu_unlock(&g.mu);
    hardware_thread(false);
    return NULL;
}

/* Stop a queue's thread and free it; keep: the struct and its doorbell go to the free list
 * (the queue's pointer and doorbell handle are handed out again). Lock held. */
static void queue_free(dqueue *q, bool keep)
{
    dqueue **link = &g.queues;
    dsig **sig = &g.signals;

    q->stop = 1;
    dwake();
    dmu_unlock(&g.mu);
    pthread_join(q->thread, NULL);
    dmu_lock(&g.mu);
    while (*link != NULL && *link != q)
        link = &(*link)->next;
    if (*link == q)
        *link = q->next;
    while (*sig != NULL && *sig != q->doorbell)
        sig = &(*sig)->next;
    if (*sig != NULL)
        *sig = q->doorbell->next;
    free(q->q.base_address);
    q->q.base_address = NULL;
    if (keep) {
        q->next = g.free_queues;
        g.free_queues = q;
    } else {
        free(q->doorbell);
        free(q);
    }
}

/* Allocate the ring (every header INVALID) and the doorbell. Lock held. */
static hsa_status_t queue_memory(dqueue *q, uint32_t size)
{
    dsig *doorbell = q->doorbell != NULL ? q->doorbell : calloc(1, sizeof(*doorbell));

    q->q.base_address = aligned_alloc(64, (size_t)size * 64);
    if (doorbell == NULL || q->q.base_address == NULL) {
        free(doorbell);
        free(q->q.base_address);
        q->doorbell = NULL;
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    memset(doorbell, 0, sizeof(*doorbell));
    q->doorbell = doorbell;
    memset(q->q.base_address, 0, (size_t)size * 64);
    for (uint32_t i = 0; i < size; i++)
        *(uint16_t *)(void *)slot_of(q, i) = HSA_PACKET_TYPE_INVALID;
    atomic_store(&doorbell->value, -1);
    doorbell->next = g.signals;
    g.signals = doorbell;
    q->q.doorbell_signal.handle = (uint64_t)(uintptr_t)doorbell;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t
hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                 void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data), void *data,
                 uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **queue)
{
    hsa_status_t st = enter("hsa_queue_create");
    int gpu = gpu_index(agent);
    dqueue *q = NULL;

    (void)private_segment_size;
    (void)group_segment_size;
    if (st != HSA_STATUS_SUCCESS)
        return st;
    if (gpu < 0)
        return HSA_STATUS_ERROR_INVALID_AGENT;
    if (queue == NULL || size < 16 || (size & (size - 1)) != 0 || size > g.cfg.queue_max_size ||
        (type != HSA_QUEUE_TYPE_MULTI && type != HSA_QUEUE_TYPE_SINGLE))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    dmu_lock(&g.mu);
    if (reuse_handles() && g.free_queues != NULL) { /* the newest destroyed queue's pointer */
        dsig *doorbell = NULL;

        q = g.free_queues;
        g.free_queues = q->next;
        doorbell = q->doorbell;
        memset(q, 0, sizeof(*q));
        q->doorbell = doorbell;
        g.reused.queues++;
    }
    dmu_unlock(&g.mu);
    if (q == NULL)
        q = calloc(1, sizeof(*q));
    if (q == NULL)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    dmu_lock(&g.mu);
    if (callback == NULL)
        violation("hsa_queue_create: no error callback (ROCr aborts the process on queue errors)");
    st = queue_memory(q, size);
    if (st == HSA_STATUS_SUCCESS) {
        q->q.type = type;
        q->q.features = HSA_QUEUE_FEATURE_KERNEL_DISPATCH;
        q->q.size = size;
        q->q.id = ++g.next_id;
        q->callback = callback;
        q->data = data;
        q->gpu = gpu;
        q->next = g.queues;
        g.queues = q;
        pthread_create(&q->thread, NULL, queue_thread, q);
        *queue = &q->q;
    } else {
        free(q);
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_queue_destroy(hsa_queue_t *queue)
{
    hsa_status_t st = enter("hsa_queue_destroy");
    dqueue *q = NULL;

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    q = find_queue(queue);
    if (q == NULL)
        st = HSA_STATUS_ERROR_INVALID_QUEUE;
    else
        queue_free(q, reuse_handles());
    dmu_unlock(&g.mu);
    return st;
}

uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue)
{
    dqueue *q = NULL;
    uint64_t v = 0;

    dmu_lock(&g.mu);
    q = find_queue(queue);
    if (q == NULL)
        violation("hsa_queue_load_read_index_scacquire: unknown queue");
    else
        v = atomic_load(&q->read_index);
    dmu_unlock(&g.mu);
    return v;
}

uint64_t hsa_queue_add_write_index_scacq_screl(const hsa_queue_t *queue, uint64_t value)
{
    dqueue *q = NULL;
    uint64_t v = 0;

    dmu_lock(&g.mu);
    q = find_queue(queue);
    if (q == NULL)
        violation("hsa_queue_add_write_index_scacq_screl: unknown queue");
    else
        v = atomic_fetch_add(&q->write_index, value);
    dmu_unlock(&g.mu);
    return v;
}

/* --------------------------------------------------------- lifecycle */

static void start_threads(void)
{
    g.stop_threads = 0;
    pthread_create(&g.dma_thread, NULL, dma_thread, NULL);
    pthread_create(&g.handler_thread, NULL, handler_thread, NULL);
    g.threads_running = 1;
}

/* Lock held on entry and exit. */
static void stop_threads(void)
{
    if (g.threads_running == 0)
        return;
    g.stop_threads = 1;
    dwake();
    dmu_unlock(&g.mu);
    pthread_join(g.dma_thread, NULL);
    pthread_join(g.handler_thread, NULL);
    dmu_lock(&g.mu);
    g.threads_running = 0;
}

hsa_status_t hsa_init(void)
{
    hsa_status_t st = enter("hsa_init");

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    if (g.configured == 0 && getenv("GM_HSA_DOUBLE_GPU") != NULL)
        g.cfg.gpu_arch = getenv("GM_HSA_DOUBLE_GPU");
    if (g.configured == 0 && getenv("GM_HSA_DOUBLE_HANDLE_REUSE") != NULL)
        g.cfg.no_handle_reuse = strcmp(getenv("GM_HSA_DOUBLE_HANDLE_REUSE"), "0") == 0;
    st = g.cfg.init_status;
    if (st == HSA_STATUS_SUCCESS && g.init_count++ == 0)
        start_threads();
    dmu_unlock(&g.mu);
    return st;
}

/* Count what is still alive at the last shutdown. Lock held. */
static void check_leaks(void)
{
    long n = 0;

    for (dsig *s = g.signals; s != NULL; s = s->next)
        n++;
    if (n != 0)
        violation("hsa_shut_down: %ld signal(s) never destroyed", n);
    if (g.queues != NULL)
        violation("hsa_shut_down: queues never destroyed");
    for (dalloc *a = g.allocs; a != NULL; a = a->next) {
        if (a->pool != POOL_CODE)
            violation("hsa_shut_down: %zu-byte allocation %p never freed", a->size, a->base);
    }
    if (g.locks != NULL)
        violation("hsa_shut_down: locked memory never unlocked");
    if (g.copies != NULL || g.running != NULL)
        violation("hsa_shut_down: asynchronous copies still pending");
    if (g.handlers != NULL)
        violation("hsa_shut_down: async signal handlers still waiting (ROCr drops them)");
    if (g.execs != NULL || g.readers != NULL)
        violation("hsa_shut_down: executables or readers never destroyed");
}

hsa_status_t hsa_shut_down(void)
{
    hsa_status_t st = enter("hsa_shut_down");

    if (st != HSA_STATUS_SUCCESS)
        return st;
    dmu_lock(&g.mu);
    if (g.init_count == 0) {
        st = HSA_STATUS_ERROR_NOT_INITIALIZED;
    } else if (--g.init_count == 0) {
        check_leaks();
        stop_threads();
        /* ROCr deletes the runtime instance: registrations and undelivered events go. */
        while (g.event_handlers != NULL) {
            devent_handler *h = g.event_handlers;

            g.event_handlers = h->next;
            free(h);
        }
        g.nfaults = 0;
    }
    dmu_unlock(&g.mu);
    return st;
}

hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string)
{
    static char text[256];

    if (status_string == NULL)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (status == HSA_STATUS_ERROR_OUT_OF_RESOURCES)
        *status_string = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the "
                         "necessary resources. (test double)";
    else if (status == HSA_STATUS_ERROR_INVALID_ARGUMENT)
        *status_string = "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does "
                         "not meet a precondition stated in the documentation of the "
                         "corresponding formal argument. (test double)";
    else {
        snprintf(text, sizeof(text), "test double status 0x%x", (unsigned)status);
        *status_string = text;
    }
    return HSA_STATUS_SUCCESS;
}

/* ---------------------------------------------------------- controls */

void hsa_double_config_default(hsa_double_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->gpu_count = 1;
    cfg->gpu_memory_bytes = 64u << 20;
    cfg->host_memory_bytes = 256u << 20;
    cfg->init_status = HSA_STATUS_SUCCESS;
    cfg->queue_max_size = 64;
    cfg->report_memory_avail = 1;
    cfg->gpu_arch = "gfx906";
}

/* Free every list. Lock held, threads stopped. */
static void free_everything(void)
{
    while (g.queues != NULL)
        queue_free(g.queues, false);
    while (g.free_queues != NULL) {
        dqueue *q = g.free_queues;

        g.free_queues = q->next;
        free(q->doorbell);
        free(q);
    }
    while (g.free_blocks != NULL) {
        dalloc *a = g.free_blocks;

        g.free_blocks = a->next;
        poison(a->base, a->size, false);
        free(a->base);
        free(a);
    }
    while (g.execs != NULL) {
        dexec *e = g.execs;

        g.execs = e->next;
        free_exec(e, false);
    }
#define FREE_LIST(head, type) \
    while ((head) != NULL) {  \
        type *item_ = (head); \
        (head) = item_->next; \
        free(item_);          \
    }
    while (g.allocs != NULL) {
        dalloc *a = g.allocs;

        g.allocs = a->next;
        if (a->pool != POOL_CODE)
            free(a->base);
        free(a);
    }
    while (g.freed_in_use != NULL) {
        dalloc *a = g.freed_in_use;

        g.freed_in_use = a->next;
        free(a->base);
        free(a);
    }
    while (g.copies != NULL) {
        dcopy *c = g.copies;

        g.copies = c->next;
        free(c->deps);
        free(c);
    }
    FREE_LIST(g.signals, dsig)
    FREE_LIST(g.free_signals, dsig)
    FREE_LIST(g.dead_signals, dsig)
    FREE_LIST(g.free_execs, dexec)
    FREE_LIST(g.free_readers, dreader)
    FREE_LIST(g.locks, dlock)
    FREE_LIST(g.ipcs, dipc)
    FREE_LIST(g.handlers, dhandler)
    FREE_LIST(g.readers, dreader)
    FREE_LIST(g.kernels, dkernel)
    FREE_LIST(g.event_handlers, devent_handler)
#undef FREE_LIST
    g.nfaults = 0;
}

void hsa_double_reset(const hsa_double_config *cfg)
{
    dmu_lock(&g.mu);
    stop_threads();
    free_everything();
    g.init_count = 0;
    g.paused = 0;
    memset(g.used, 0, sizeof(g.used));
    g.host_used = 0;
    g.ncounts = 0;
    g.total_calls = 0;
    memset(&g.rule, 0, sizeof(g.rule));
    g.copy_fails = 0;
    g.copy_fail_dst = NULL;
    g.last_injected[0] = '\0';
    g.violations[0] = '\0';
    g.violations_len = 0;
    g.nviolations = 0;
    g.npackets = 0;
    g.ncopies = 0;
    g.sequence = 0;
    g.faults_handled = 0;
    g.faults_unhandled = 0;
    memset(&g.reused, 0, sizeof(g.reused));
    g.configured = 1;
    if (cfg != NULL)
        g.cfg = *cfg;
    else
        hsa_double_config_default(&g.cfg);
    if (g.cfg.gpu_count > HSA_DOUBLE_MAX_GPUS)
        g.cfg.gpu_count = HSA_DOUBLE_MAX_GPUS;
    dmu_unlock(&g.mu);
}

void hsa_double_get_live(hsa_double_live *live)
{
    memset(live, 0, sizeof(*live));
    dmu_lock(&g.mu);
    for (dsig *s = g.signals; s != NULL; s = s->next)
        live->signals++;
    for (dqueue *q = g.queues; q != NULL; q = q->next)
        live->queues++;
    for (dalloc *a = g.allocs; a != NULL; a = a->next)
        live->pool_allocations += a->pool != POOL_CODE ? 1 : 0;
    for (dlock *l = g.locks; l != NULL; l = l->next)
        live->locks++;
    for (dexec *e = g.execs; e != NULL; e = e->next)
        live->executables++;
    for (dreader *r = g.readers; r != NULL; r = r->next)
        live->readers++;
    for (dipc *i = g.ipcs; i != NULL; i = i->next)
        live->ipc_attachments++;
    for (dhandler *h = g.handlers; h != NULL; h = h->next)
        live->handlers++;
    for (dcopy *c = g.copies; c != NULL; c = c->next)
        live->pending_copies++;
    for (devent_handler *h = g.event_handlers; h != NULL; h = h->next)
        live->system_event_handlers++;
    live->device_bytes = g.used[0];
    dmu_unlock(&g.mu);
}

void hsa_double_get_reuse(hsa_double_reuse *reuse)
{
    dmu_lock(&g.mu);
    *reuse = g.reused;
    dmu_unlock(&g.mu);
}

long hsa_double_violations(char *buf, size_t bytes)
{
    long n = 0;

    dmu_lock(&g.mu);
    n = g.nviolations;
    if (buf != NULL && bytes > 0)
        snprintf(buf, bytes, "%s", g.violations);
    dmu_unlock(&g.mu);
    return n;
}

void hsa_double_memory_fault(int gpu, uint64_t address, uint32_t reason_mask)
{
    dmu_lock(&g.mu);
    push_fault(gpu, address, reason_mask);
    dmu_unlock(&g.mu);
}

void hsa_double_fault_counts(long *handled, long *unhandled)
{
    dmu_lock(&g.mu);
    if (handled != NULL)
        *handled = g.faults_handled;
    if (unhandled != NULL)
        *unhandled = g.faults_unhandled;
    dmu_unlock(&g.mu);
}

void hsa_double_pause(int paused)
{
    dmu_lock(&g.mu);
    g.paused = paused;
    dwake();
    dmu_unlock(&g.mu);
}

void hsa_double_register_kernel(const char *name, hsa_double_kernel_fn fn, void *user)
{
    dkernel *k = calloc(1, sizeof(*k));

    if (k == NULL)
        return;
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->fn = fn;
    k->user = user;
    dmu_lock(&g.mu);
    k->next = g.kernels;
    g.kernels = k;
    dmu_unlock(&g.mu);
}

long hsa_double_packet_count(void)
{
    long n = 0;

    dmu_lock(&g.mu);
    n = g.npackets;
    dmu_unlock(&g.mu);
    return n;
}

int hsa_double_get_packet(long index, hsa_double_packet *out)
{
    int ok = 0;

    dmu_lock(&g.mu);
    if (index >= 0 && index < g.npackets && index >= g.npackets - KEEP_RECORDS) {
        *out = g.packets[index % KEEP_RECORDS];
        ok = 1;
    }
    dmu_unlock(&g.mu);
    return ok;
}

long hsa_double_copy_count(void)
{
    long n = 0;

    dmu_lock(&g.mu);
    n = g.ncopies;
    dmu_unlock(&g.mu);
    return n;
}

int hsa_double_get_copy(long index, hsa_double_copy *out)
{
    int ok = 0;

    dmu_lock(&g.mu);
    if (index >= 0 && index < g.ncopies && index >= g.ncopies - KEEP_RECORDS) {
        *out = g.done_copies[index % KEEP_RECORDS];
        ok = 1;
    }
    dmu_unlock(&g.mu);
    return ok;
}
/*
 * Programs that never call hsa_double_reset (the conformance program, the
 * stress test and the examples on the double) cannot assert that no rule was
 * broken: at exit, print what was recorded and fail the process.
 */
__attribute__((destructor)) static void report_unchecked_violations(void)
{
    if (g.configured != 0 || g.nviolations == 0)
        return;
    fprintf(stderr, "HSA runtime double: %ld violation(s) of the runtime's rules:\n%s",
            g.nviolations, g.violations);
    fflush(stderr);
    _exit(3);
}
