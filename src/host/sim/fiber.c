/*
 * Fibers for the kernel simulator; see fiber.h.
 *
 * The assembly switch saves exactly what the C ABI says a call preserves:
 * x86-64 SysV rbx, rbp, r12-r15 (and rsp); AAPCS64 x19-x30, d8-d15 (and sp).
 * It does not save the floating-point control state (MXCSR, x87 control
 * word, FPCR): kernels must not change rounding modes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

#define GM__FIBER_DEFAULT_STACK ((size_t)128 * 1024)
#define GM__FIBER_ASAN_STACK    ((size_t)512 * 1024)

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
        "    movq %r12, %rdi\n"
        "    callq *%rbx\n"
        "    ud2\n"
        ".size gm__fiber_entry_asm, .-gm__fiber_entry_asm\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

/* First context: rsp at a slot holding gm__fiber_entry_asm, 8 below a 16-byte boundary,
 * so that the entry's call leaves the callee the ABI's alignment; r12 = fiber,
 * rbx = fiber_start. */
static void initial_frame(gm__fiber *fiber, uintptr_t top)
{
    uint64_t *slot = (uint64_t *)(top - 24u);

    slot[0] = (uint64_t)(uintptr_t)gm__fiber_entry_asm;
    slot[1] = 0;
    slot[2] = 0;
    memset(fiber->regs, 0, sizeof(fiber->regs));
    fiber->regs[0] = (uint64_t)(uintptr_t)fiber_start;
    fiber->regs[2] = (uint64_t)(uintptr_t)fiber;
    fiber->regs[6] = (uint64_t)(uintptr_t)slot;
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

/* First context: x19 = fiber, x20 = fiber_start, lr = gm__fiber_entry_asm, sp = top. */
static void initial_frame(gm__fiber *fiber, uintptr_t top)
{
    memset(fiber->regs, 0, sizeof(fiber->regs));
    fiber->regs[0] = (uint64_t)(uintptr_t)fiber;
    fiber->regs[1] = (uint64_t)(uintptr_t)fiber_start;
    fiber->regs[11] = (uint64_t)(uintptr_t)gm__fiber_entry_asm;
    fiber->regs[12] = (uint64_t)top;
}
#endif

/* Prepare the saved context so that the next switch starts fiber_start(fiber). */
static void make_context(gm__fiber *fiber)
{
    uintptr_t top = (uintptr_t)fiber->stack_lo + fiber->stack_bytes - fiber->color;

    initial_frame(fiber, top & ~(uintptr_t)15);
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

static void make_context(gm__fiber *fiber)
{
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

/* Every fiber starts here (on its own stack). */
static void fiber_start(gm__fiber *fiber)
{
    after_switch(fiber, NULL);
    fiber->fn(fiber);
}

/* ---------------------------------------------------------- the API */

int gm__fiber_init_main(gm__fiber *main_fiber)
{
    memset(main_fiber, 0, sizeof(*main_fiber));
#if defined(GM__TSAN)
    main_fiber->tsan_fiber = __tsan_get_current_fiber();
#endif
    return 0;
}

size_t gm__fiber_default_stack_bytes(void)
{
    const char *text = getenv("GM_SIM_STACK_BYTES");
    char *end = NULL;
    unsigned long long value = 0;

    if (text != NULL && text[0] != '\0') {
        errno = 0;
        value = strtoull(text, &end, 10);
        if (errno == 0 && end != NULL && *end == '\0' && value >= 16384u &&
            value <= (unsigned long long)1 << 30)
            return (size_t)value;
    }
#if defined(GM__ASAN)
    return GM__FIBER_ASAN_STACK;
#else
    return GM__FIBER_DEFAULT_STACK;
#endif
}

int gm__fiber_create(gm__fiber *fiber, size_t stack_bytes, size_t color, gm__fiber_fn fn)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t usable = (stack_bytes + page - 1u) / page * page;
    void *map = NULL;

    memset(fiber, 0, sizeof(*fiber));
    map = mmap(NULL, usable + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return -1;
    if (mprotect(map, page, PROT_NONE) != 0)
        goto fail_unmap;
    fiber->map = map;
    fiber->map_bytes = usable + page;
    fiber->stack_lo = (char *)map + page;
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
    make_context(fiber);
    return 0;
fail_unmap:
    munmap(map, usable + page);
    return -1;
}

void gm__fiber_reset(gm__fiber *fiber)
{
#if defined(GM__ASAN)
    ASAN_UNPOISON_MEMORY_REGION(fiber->stack_lo, fiber->stack_bytes);
#endif
    fiber->asan_fake_stack = NULL;
    make_context(fiber);
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
    ASAN_UNPOISON_MEMORY_REGION(fiber->stack_lo, fiber->stack_bytes);
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
