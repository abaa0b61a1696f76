/*
 * Cooperative fibers for the kernel simulator: a hand-written context switch
 * on x86-64 and aarch64 (callee-saved registers and the stack pointer are
 * saved in the fiber, the return address stays on its stack), ucontext
 * elsewhere. Stacks are mmap'ed
 * with a guard page and carry the AddressSanitizer, ThreadSanitizer and
 * Valgrind annotations, so sanitizer builds can run kernels.
 *
 * A fiber belongs to one OS thread: it is created, switched to and destroyed
 * there. Every OS thread has a "main" fiber (gm__fiber_init_main) standing for
 * its own stack; switching back to it ends a run of fibers.
 */
#ifndef GPUMEM_SRC_HOST_SIM_FIBER_H
#define GPUMEM_SRC_HOST_SIM_FIBER_H

#include <stddef.h>
#include <stdint.h>

#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__ELF__) && \
    !defined(GM_SIM_FORCE_UCONTEXT)
#define GM__FIBER_ASM 1
#else
#include <ucontext.h>
#endif

/* Sanitizers that need to hear about every switch. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM__FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define GM__FIBER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GM__FIBER_ASAN)
#define GM__FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(GM__FIBER_TSAN)
#define GM__FIBER_TSAN 1
#endif

/* The saved registers, then the stack pointer a fresh fiber starts with (kept there so that
 * gm__fiber_reset touches nothing else: on x86-64, one cache line). */
#if defined(__x86_64__)
#define GM__FIBER_REGS       8 /* rbx rbp r12-r15 rsp, start: one cache line */
#define GM__FIBER_SP_SLOT    6 /* where the stack pointer is saved */
#define GM__FIBER_START_SLOT 7
#else
#define GM__FIBER_REGS       22 /* x19-x30, sp, d8-d15, start */
#define GM__FIBER_SP_SLOT    12
#define GM__FIBER_START_SLOT 21
#endif

typedef struct gm__fiber gm__fiber;
typedef void (*gm__fiber_fn)(gm__fiber *fiber);

struct gm__fiber {
#if defined(GM__FIBER_ASM)
    /* callee-saved registers and stack pointer while switched out */
    _Alignas(64) uint64_t regs[GM__FIBER_REGS];
#else
    ucontext_t uc;
#endif
    gm__fiber_fn fn; /* entry: fn(fiber); must never return */
    void *map;       /* the mapping (guard page included); NULL for a main fiber */
    size_t map_bytes;
    const void *stack_lo; /* lowest usable stack byte (sanitizer bounds) */
    size_t stack_bytes;   /* usable bytes */
    size_t color;         /* bytes left unused at the top, to spread stacks over cache sets */
    unsigned valgrind_id;
    void *asan_fake_stack;
    void *tsan_fiber;
    int tsan_owned; /* tsan_fiber was created here (not the thread's own) */
};

/* Describe the calling OS thread's own stack as a fiber. Returns 0. */
int gm__fiber_init_main(gm__fiber *main_fiber);

/*
 * Create a fiber with a stack of stack_bytes (rounded up to pages) that runs
 * fn(fiber) when first switched to. `color` (< 4096) is left unused at the
 * top of the stack. Returns 0, or -1 when memory is short.
 */
int gm__fiber_create(gm__fiber *fiber, size_t stack_bytes, size_t color, gm__fiber_fn fn);

/*
 * Make a fiber start over at fn(fiber) on its next switch, discarding the
 * frames it was suspended in (used when a run ends, so that no fiber keeps
 * a frame of the kernel's code between runs, and after a launch abandons its
 * fibers). Not the running one.
 */
void gm__fiber_reset(gm__fiber *fiber);

/* Release a fiber made by gm__fiber_create (not the running one). */
void gm__fiber_destroy(gm__fiber *fiber);

/*
 * Suspend `from` (the running fiber) and run `to`, where the switch that
 * suspended `to` returns `value` (a fiber's first entry ignores it).
 * Returns, when some fiber switches back to `from`, the value that switch
 * passed. `leaving` says `from` will never be resumed as it stands
 * (finished or abandoned), which lets ASan drop its fake stack.
 */
int gm__fiber_switch_annotated(gm__fiber *from, gm__fiber *to, int leaving, int value);

#if defined(GM__FIBER_ASM) && !defined(GM__FIBER_ASAN) && !defined(GM__FIBER_TSAN)
/* The bare switch (fiber.c). */
int gm__fiber_switch_asm(uint64_t *save, const uint64_t *load, int value);

static inline int gm__fiber_switch(gm__fiber *from, gm__fiber *to, int leaving, int value)
{
    (void)leaving;
    return gm__fiber_switch_asm(from->regs, to->regs, value);
}
#else
static inline int gm__fiber_switch(gm__fiber *from, gm__fiber *to, int leaving, int value)
{
    return gm__fiber_switch_annotated(from, to, leaving, value);
}
#endif

/*
 * Default fiber stack size: GM_SIM_STACK_BYTES (16 KiB to 1 GiB), else 512 KiB,
 * CUDA's limit on a thread's local memory (1 MiB under ASan). Stacks are
 * reserved, not committed: only the pages a kernel touches cost memory.
 */
size_t gm__fiber_default_stack_bytes(void);

#endif /* GPUMEM_SRC_HOST_SIM_FIBER_H */
