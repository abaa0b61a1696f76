/*
 * Fibers for the kernel simulator; see fiber.h.
 *
 * The assembly switch saves exactly what the C ABI says a call preserves:
 * x86-64 SysV rbx, rbp, r12-r15 (and rsp); AAPCS64 x19-x30, d8-d15 (and sp).
 * It does not save the floating-point control state (MXCSR, x87 control
 * word, FPCR): kernels must not change rounding modes.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fiber.h"

#if defined(GM__FIBER_ASAN)
#define GM__ASAN 1
#endif
#if defined(GM__FIBER_TSAN)
#define GM__TSAN 1
#endif

#if defined(GM__ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(GM__TSAN)
#include <sanitizer/tsan_interface.h>
#endif
#if defined(GM_HAVE_VALGRIND)
#include <valgrind/valgrind.h>
#endif

/*
 * Stacks are reserved, not committed: a page costs memory only once touched,
 * so the default can be CUDA's limit on a thread's local memory (512 KiB)
 * while a fiber of a kernel with small frames costs a page or two. Under
 * ASan frames carry redzones: twice that.
 */
#define GM__FIBER_DEFAULT_STACK ((size_t)512 * 1024)
/* The inaccessible region below each stack: CUDA's 512 KiB of local memory per thread
 * and then some (a frame overflowing the stack by less faults at once). */
#define GM__FIBER_GUARD      ((size_t)1024 * 1024)
#define GM__FIBER_ASAN_STACK ((size_t)1024 * 1024)

#if defined(MAP_NORESERVE)
#define GM__STACK_MAP_NORESERVE MAP_NORESERVE
#else
#define GM__STACK_MAP_NORESERVE 0
#endif
#if defined(MAP_STACK)
#define GM__STACK_MAP_STACK MAP_STACK
#else
#define GM__STACK_MAP_STACK 0
#endif
#define GM__STACK_MAP_FLAGS \
    (MAP_PRIVATE | MAP_ANONYMOUS | GM__STACK_MAP_NORESERVE | GM__STACK_MAP_STACK)

/* The fiber switched away from, for the sanitizer bookkeeping of the one resumed. */
static _Thread_local gm__fiber *tls_switch_from = NULL;
/* The value the last switch passed to the fiber it resumed (the annotated switch). */
static _Thread_local int tls_switch_value = 0;

static void fiber_start(gm__fiber *fiber);

/* ---------------------------------------------------- context switch */

#if defined(GM__FIBER_ASM)
int gm__fiber_switch_asm(uint64_t *save, const uint64_t *load, int value);
void gm__fiber_entry_asm(void);

#if defined(__x86_64__)
/*
 * Registers are saved in the fiber (regs[0..5] = rbx, rbp, r12-r15, regs[6] =
 * rsp) with plain moves rather than pushes: loads through a freshly switched
 * rsp of values pushed long ago defeat the stack engine's forwarding
 * prediction and stall on some cores. The return address stays on the stack
 * and is popped into an indirect jump rather than returned to: `ret` is
 * predicted from the return stack, which holds the call site of the fiber
 * switching away, so every switch to a fiber suspended at another call site
 * (threads that start or end while others wait at a barrier, a kernel with
 * several barriers) would be mispredicted; the jump is predicted from its
 * history (threads starting and ending cost about half as much with it).
 * The value passed in edx is returned in eax.
 *
 * A fiber starts at gm__fiber_entry_asm, popped from the top slot of its
 * stack, which pushes its own address back there as fiber_start's return
 * address (fiber_start never returns): the slot holds the same value for
 * the fiber's whole life, so that starting a fiber over writes only its
 * saved registers, not its stack.
 */
__asm__(".text\n"
        ".globl gm__fiber_switch_asm\n"
        ".hidden gm__fiber_switch_asm\n"
        ".type gm__fiber_switch_asm,@function\n"
        ".p2align 4\n"
        "gm__fiber_switch_asm:\n"
        "    movq %rbx, 0(%rdi)\n"
        "    movq %rbp, 8(%rdi)\n"
        "    movq %r12, 16(%rdi)\n"
        "    movq %r13, 24(%rdi)\n"
        "    movq %r14, 32(%rdi)\n"
        "    movq %r15, 40(%rdi)\n"
        "    movq %rsp, 48(%rdi)\n"
        "    movq 0(%rsi), %rbx\n"
        "    movq 8(%rsi), %rbp\n"
        "    movq 16(%rsi), %r12\n"
        "    movq 24(%rsi), %r13\n"
        "    movq 32(%rsi), %r14\n"
        "    movq 40(%rsi), %r15\n"
        "    movq 48(%rsi), %rsp\n"
        "    movl %edx, %eax\n"
        "    popq %rcx\n"
        "    jmp *%rcx\n"
        ".size gm__fiber_switch_asm, .-gm__fiber_switch_asm\n"
        ".globl gm__fiber_entry_asm\n"
        ".hidden gm__fiber_entry_asm\n"
        ".type gm__fiber_entry_asm,@function\n"
        "gm__fiber_entry_asm:\n"
        "    leaq gm__fiber_entry_asm(%rip), %rax\n"
        "    pushq %rax\n"
        "    movq %r12, %rdi\n"
        "    jmpq *%rbx\n"
        ".size gm__fiber_entry_asm, .-gm__fiber_entry_asm\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

/* The stack pointer a fresh fiber starts with: a slot holding gm__fiber_entry_asm, 8 below a
 * 16-byte boundary, so that the entry's push leaves fiber_start the ABI's alignment. */
static uint64_t start_sp(uintptr_t top)
{
    return (uint64_t)(top - 24u);
}

/* First context: rsp at the slot, r12 = fiber, rbx = fiber_start. The slot is written when
 * the stack is new (`stack`); afterwards it holds the same (see above). */
static void initial_frame(gm__fiber *fiber, int stack)
{
    uint64_t sp = fiber->regs[GM__FIBER_START_SLOT];

    if (stack != 0) {
        uint64_t *slot = (uint64_t *)(uintptr_t)sp;

        slot[0] = (uint64_t)(uintptr_t)gm__fiber_entry_asm;
        slot[1] = 0;
        slot[2] = 0;
    }
    memset(fiber->regs, 0, GM__FIBER_START_SLOT * sizeof(fiber->regs[0]));
    fiber->regs[0] = (uint64_t)(uintptr_t)fiber_start;
    fiber->regs[2] = (uint64_t)(uintptr_t)fiber;
    fiber->regs[GM__FIBER_SP_SLOT] = sp;
}
#elif defined(__aarch64__)
/* regs[0..9] = x19-x28, regs[10] = x29, regs[11] = x30 (lr), regs[12] = sp, regs[13..20] = d8-d15.
 * The value passed in w2 is returned in w0. This one returns with `ret` (a `br x30` would
 * need a landing pad at every call site under BTI). */
__asm__(".text\n"
        ".globl gm__fiber_switch_asm\n"
        ".hidden gm__fiber_switch_asm\n"
        ".type gm__fiber_switch_asm,%function\n"
        ".p2align 4\n"
        "gm__fiber_switch_asm:\n"
        "    stp x19, x20, [x0, #0]\n"
        "    stp x21, x22, [x0, #16]\n"
        "    stp x23, x24, [x0, #32]\n"
        "    stp x25, x26, [x0, #48]\n"
        "    stp x27, x28, [x0, #64]\n"
        "    stp x29, x30, [x0, #80]\n"
        "    mov x9, sp\n"
        "    str x9, [x0, #96]\n"
        "    stp d8, d9, [x0, #104]\n"
        "    stp d10, d11, [x0, #120]\n"
        "    stp d12, d13, [x0, #136]\n"
        "    stp d14, d15, [x0, #152]\n"
        "    ldp x19, x20, [x1, #0]\n"
        "    ldp x21, x22, [x1, #16]\n"
        "    ldp x23, x24, [x1, #32]\n"
        "    ldp x25, x26, [x1, #48]\n"
        "    ldp x27, x28, [x1, #64]\n"
        "    ldp x29, x30, [x1, #80]\n"
        "    ldr x9, [x1, #96]\n"
        "    mov sp, x9\n"
        "    ldp d8, d9, [x1, #104]\n"
        "    ldp d10, d11, [x1, #120]\n"
        "    ldp d12, d13, [x1, #136]\n"
        "    ldp d14, d15, [x1, #152]\n"
        "    mov w0, w2\n"
        "    ret\n"
        ".size gm__fiber_switch_asm, .-gm__fiber_switch_asm\n"
        ".globl gm__fiber_entry_asm\n"
        ".hidden gm__fiber_entry_asm\n"
        ".type gm__fiber_entry_asm,%function\n"
        "gm__fiber_entry_asm:\n"
        "    mov x0, x19\n"
        "    blr x20\n"
        "    brk #0\n"
        ".size gm__fiber_entry_asm, .-gm__fiber_entry_asm\n"
        ".section .note.GNU-stack,\"\",%progbits\n"
        ".text\n");

/* The stack pointer a fresh fiber starts with: the top. */
static uint64_t start_sp(uintptr_t top)
{
    return (uint64_t)top;
}

/* First context: x19 = fiber, x20 = fiber_start, lr = gm__fiber_entry_asm, sp = top. */
static void initial_frame(gm__fiber *fiber, int stack)
{
    uint64_t sp = fiber->regs[GM__FIBER_START_SLOT];

    (void)stack;
    memset(fiber->regs, 0, GM__FIBER_START_SLOT * sizeof(fiber->regs[0]));
    fiber->regs[0] = (uint64_t)(uintptr_t)fiber;
    fiber->regs[1] = (uint64_t)(uintptr_t)fiber_start;
    fiber->regs[11] = (uint64_t)(uintptr_t)gm__fiber_entry_asm;
    fiber->regs[GM__FIBER_SP_SLOT] = sp;
}
#endif

/* Prepare the saved context so that the next switch starts fiber_start(fiber); `stack`: the
 * stack is new (a reset reads only the saved registers' lines). */
static void make_context(gm__fiber *fiber, int stack)
{
    if (stack != 0) {
        uintptr_t top = (uintptr_t)fiber->stack_lo + fiber->stack_bytes - fiber->color;

        fiber->regs[GM__FIBER_START_SLOT] = start_sp(top & ~(uintptr_t)15);
    }
    initial_frame(fiber, stack);
}

/*
 * Inlined even at -O0: under TSan nothing instrumented may run between
 * __tsan_switch_to_fiber and the switch itself, and a call would enter and
 * leave an instrumented frame there (a crash in __tsan_func_entry at -O0).
 */
static inline __attribute__((always_inline)) void raw_switch(gm__fiber *from, gm__fiber *to)
{
    (void)gm__fiber_switch_asm(from->regs, to->regs, 0);
}

#else /* ucontext */

static _Thread_local gm__fiber *tls_starting = NULL;

static void ucontext_entry(void)
{
    fiber_start(tls_starting);
}

static void make_context(gm__fiber *fiber, int stack)
{
    (void)stack;
    getcontext(&fiber->uc);
    fiber->uc.uc_stack.ss_sp = (void *)fiber->stack_lo;
    fiber->uc.uc_stack.ss_size = fiber->stack_bytes - fiber->color;
    fiber->uc.uc_link = NULL;
    makecontext(&fiber->uc, ucontext_entry, 0);
}

static inline __attribute__((always_inline)) void raw_switch(gm__fiber *from, gm__fiber *to)
{
    tls_starting = to;
    swapcontext(&from->uc, &to->uc);
}
#endif

/* ------------------------------------------------- sanitizer glue */

/*
 * Just before leaving `from` for `to`. Inlined even at -O0, like raw_switch:
 * once __tsan_switch_to_fiber has run, a return from an instrumented frame
 * would pop the new fiber's shadow stack.
 */
static inline __attribute__((always_inline)) void before_switch(gm__fiber *from, gm__fiber *to,
                                                                int leaving)
{
    tls_switch_from = from;
#if defined(GM__ASAN)
    /* Leaving destroys the fake stack: it must not be handed back on a restart. */
    if (leaving != 0)
        from->asan_fake_stack = NULL;
    __sanitizer_start_switch_fiber(leaving != 0 ? NULL : &from->asan_fake_stack, to->stack_lo,
                                   to->stack_bytes);
#else
    (void)leaving;
#endif
#if defined(GM__TSAN)
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#else
    (void)to;
#endif
}

/* Just after `self` got control; fake_stack is NULL on a fiber's first entry. */
static void after_switch(gm__fiber *self, void *fake_stack)
{
#if defined(GM__ASAN)
    const void *old_lo = NULL;
    size_t old_bytes = 0;

    __sanitizer_finish_switch_fiber(fake_stack, &old_lo, &old_bytes);
    /* A main fiber's bounds are learned the first time it is left. */
    if (tls_switch_from != NULL && tls_switch_from->map == NULL &&
        tls_switch_from->stack_lo == NULL) {
        tls_switch_from->stack_lo = old_lo;
        tls_switch_from->stack_bytes = old_bytes;
    }
#else
    (void)fake_stack;
#endif
    (void)self;
}

#if defined(GM__ASAN)
/* The fiber started only to give up its fake stack (drop_fake_stack), or NULL. */
static _Thread_local gm__fiber *tls_dropping = NULL;
#endif

/* Every fiber starts here (on its own stack). */
static void fiber_start(gm__fiber *fiber)
{
    after_switch(fiber, fiber->asan_fake_stack);
#if defined(GM__ASAN)
    if (tls_dropping == fiber) /* leave for good: ASan destroys the fake stack */
        (void)gm__fiber_switch_annotated(fiber, tls_switch_from, 1, 0);
#endif
    fiber->fn(fiber);
}

#if defined(GM__ASAN)
/*
 * Clear the shadow of the frames a suspended fiber holds (they are about to
 * be discarded, or the stack unmapped). The frames below its saved stack
 * pointer have returned, and a frame unpoisons itself when it returns, so
 * only the part above needs it (with a margin for the red zone below the
 * pointer): a fiber that used a few frames of a large stack clears a few
 * frames' worth, and the shadow of the rest is never touched.
 */
static void unpoison_frames(gm__fiber *fiber)
{
    const char *lo = fiber->stack_lo;
    const char *hi = lo + fiber->stack_bytes;
#if defined(GM__FIBER_ASM)
    const char *sp = (const char *)(uintptr_t)fiber->regs[GM__FIBER_SP_SLOT];

    if (sp >= lo + 256 && sp <= hi)
        lo = (const char *)((uintptr_t)(sp - 256) & ~(uintptr_t)63);
#endif
    ASAN_UNPOISON_MEMORY_REGION(lo, (size_t)(hi - lo));
}

/*
 * A fiber suspended where it stands (not leaving) keeps the fake stack that
 * ASan's use-after-return detection allocates its frames on; discarding its
 * frames would leak that (megabytes) and the frames on it. ASan frees a
 * fake stack when its fiber switches away for good, so the fiber is started
 * (with its fake stack) only to do that, at once.
 */
static void drop_fake_stack(gm__fiber *fiber)
{
    gm__fiber here; /* the running context, whatever it is */

    gm__fiber_init_main(&here);
    make_context(fiber, 0);
    tls_dropping = fiber;
    (void)gm__fiber_switch_annotated(&here, fiber, 0, 0);
    tls_dropping = NULL;
}
#endif

/* ---------------------------------------------------------- the API */

int gm__fiber_init_main(gm__fiber *main_fiber)
{
    memset(main_fiber, 0, sizeof(*main_fiber));
#if defined(GM__TSAN)
    main_fiber->tsan_fiber = __tsan_get_current_fiber();
#endif
    return 0;
}

/*
 * Whether the system charges every writable private mapping in full
 * (vm.overcommit_memory = 2, strict accounting, found on some HPC nodes):
 * there MAP_NORESERVE is ignored and a reserved stack is a commitment, so
 * 1024 threads of 512 KiB would take 512 MiB of the commit limit per worker.
 */
static bool strict_overcommit(void)
{
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int c = f != NULL ? fgetc(f) : EOF;

    if (f != NULL)
        fclose(f);
    return c == '2';
}

/* GM_SIM_STACK_BYTES's value: digits, an optional K, M or G (powers of 1024) and an
 * optional "B" or "iB", from 16 KiB to 1 GiB; 0 when it is none (the host backend refuses
 * such a value when a context is created). */
static size_t stack_bytes_setting(const char *text)
{
    char *end = NULL;
    unsigned long long value = 0;
    int shift = 0;

    if (text == NULL || text[0] < '0' || text[0] > '9')
        return 0;
    errno = 0;
    value = strtoull(text, &end, 10);
    shift = (end[0] == 'K' || end[0] == 'k')   ? 10
            : (end[0] == 'M' || end[0] == 'm') ? 20
            : (end[0] == 'G' || end[0] == 'g') ? 30
                                               : 0;
    end += shift != 0 ? 1 : 0;
    if (errno != 0 || value > (1ull << 30) ||
        !(end[0] == '\0' || strcasecmp(end, "B") == 0 ||
          (shift != 0 && strcasecmp(end, "iB") == 0)))
        return 0;
    value <<= shift;
    return value >= 16384u && value <= (1ull << 30) ? (size_t)value : 0;
}

size_t gm__fiber_default_stack_bytes(void)
{
    size_t setting = stack_bytes_setting(getenv("GM_SIM_STACK_BYTES"));

    if (setting != 0)
        return setting;
#if defined(GM__ASAN)
    return strict_overcommit() ? GM__FIBER_ASAN_STACK / 4u : GM__FIBER_ASAN_STACK;
#else
    return strict_overcommit() ? GM__FIBER_DEFAULT_STACK / 4u : GM__FIBER_DEFAULT_STACK;
#endif
}

int gm__fiber_create(gm__fiber *fiber, size_t stack_bytes, size_t color, gm__fiber_fn fn)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t usable = (stack_bytes + page - 1u) / page * page;
    size_t guard = (GM__FIBER_GUARD + page - 1u) / page * page;
    void *map = NULL;

    memset(fiber, 0, sizeof(*fiber));
    /* The guard region below the stack, never accessible: a frame that overflows the stack
     * by up to GM__FIBER_GUARD faults instead of writing over another fiber's stack (one
     * page would let a large local array jump over it). Address space only. */
    map = mmap(NULL, guard + usable, PROT_NONE, GM__STACK_MAP_FLAGS, -1, 0);
    if (map == MAP_FAILED)
        return -1;
    /* The stack: reserved, not committed (no swap accounting either): pages cost memory
     * once touched. */
    if (mprotect((char *)map + guard, usable, PROT_READ | PROT_WRITE) != 0)
        goto fail_unmap;
#if defined(MADV_NOHUGEPAGE)
    /* A stack that may hold an aligned huge page could get one on first touch (transparent
     * huge pages set to always): 2 MiB of memory for a few frames. */
    if (usable >= (size_t)2 << 20)
        (void)madvise((char *)map + guard, usable, MADV_NOHUGEPAGE);
#endif
    fiber->map = map;
    fiber->map_bytes = guard + usable;
    fiber->stack_lo = (char *)map + guard;
    fiber->stack_bytes = usable;
    fiber->color = color % 4096u;
    fiber->fn = fn;
#if defined(GM_HAVE_VALGRIND)
    fiber->valgrind_id =
        VALGRIND_STACK_REGISTER((char *)fiber->stack_lo, (char *)fiber->stack_lo + usable);
#endif
#if defined(GM__TSAN)
    fiber->tsan_fiber = __tsan_create_fiber(0);
    fiber->tsan_owned = 1;
#endif
    make_context(fiber, 1);
    return 0;
fail_unmap:
    munmap(map, guard + usable);
    return -1;
}

void gm__fiber_reset(gm__fiber *fiber)
{
#if defined(GM__ASAN)
    unpoison_frames(fiber);
    if (fiber->asan_fake_stack != NULL) {
        drop_fake_stack(fiber);
        unpoison_frames(fiber);
    }
#endif
#if defined(GM__TSAN)
    /* TSan's shadow call stack of the fiber holds the frames discarded: start a fresh one
     * (else every reset would leave a few entries more, until it overflows). */
    if (fiber->tsan_owned != 0) {
        __tsan_destroy_fiber(fiber->tsan_fiber);
        fiber->tsan_fiber = __tsan_create_fiber(0);
    }
#endif
    make_context(fiber, 0);
}

void gm__fiber_destroy(gm__fiber *fiber)
{
    if (fiber == NULL || fiber->map == NULL)
        return;
#if defined(GM_HAVE_VALGRIND)
    VALGRIND_STACK_DEREGISTER(fiber->valgrind_id);
#endif
#if defined(GM__TSAN)
    if (fiber->tsan_owned != 0)
        __tsan_destroy_fiber(fiber->tsan_fiber);
#endif
#if defined(GM__ASAN)
    unpoison_frames(fiber);
    if (fiber->asan_fake_stack != NULL) {
        drop_fake_stack(fiber);
        unpoison_frames(fiber);
    }
#endif
    munmap(fiber->map, fiber->map_bytes);
    fiber->map = NULL;
}

int gm__fiber_switch_annotated(gm__fiber *from, gm__fiber *to, int leaving, int value)
{
    tls_switch_value = value;
    before_switch(from, to, leaving);
    raw_switch(from, to);
    after_switch(from, from->asan_fake_stack);
    return tls_switch_value;
}
