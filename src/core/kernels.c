/*
 * Launches: validation of the configuration against the device's limits,
 * typed checking of the arguments against the kernel's signature, and
 * marshalling into the backend's cuLaunchKernel-style argument array.
 * Nothing reaches the backend unless every check passed.
 */
#include <stdio.h>
#include <string.h>

#include "kernels_internal.h"
#include "smartarray_internal.h"

/* A parameter's class, from its declaration text ("const float * a"). */
typedef enum param_class {
    PARAM_UNKNOWN = 0,
    PARAM_POINTER = 1,
    PARAM_INTEGER = 2,
    PARAM_FLOAT = 3,
    PARAM_DOUBLE = 4
} param_class;

/* Whether c may be part of a C identifier. */
static bool ident_char(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Whether the n characters at word are one of the NULL-terminated `list`. */
static bool word_in(const char *word, size_t n, const char *const *list)
{
    for (; *list != NULL; list++) {
        if (strlen(*list) == n && strncmp(word, *list, n) == 0)
            return true;
    }
    return false;
}

/*
 * A parameter's class from its "type name" text. A pointer has a '*'. A
 * scalar's type words (the identifiers but the last, the name; qualifiers
 * ignored) decide: float or double, or all of them integer words (the C
 * keywords and <stdint.h> / <stddef.h> names). Anything else, a typedef of
 * the program's own included (`real`, a struct), is PARAM_UNKNOWN: only its
 * size is checked, since its kind cannot be known from the text.
 */
static param_class classify(const char *decl)
{
    static const char *const qualifiers[] = {
        "const", "volatile", "restrict", "__restrict", "__restrict__", "GM_RESTRICT", NULL};
    static const char *const integers[] = {
        "char",      "short",    "int",      "long",     "signed",    "unsigned",
        "_Bool",     "bool",     "size_t",   "ssize_t",  "ptrdiff_t", "intptr_t",
        "uintptr_t", "int8_t",   "int16_t",  "int32_t",  "int64_t",   "uint8_t",
        "uint16_t",  "uint32_t", "uint64_t", "intmax_t", "uintmax_t", NULL};
    const char *word[16];
    size_t len[16];
    int nwords = 0, ntype = 0, nint = 0;
    bool is_float = false, is_double = false;

    if (decl == NULL)
        return PARAM_UNKNOWN;
    if (strchr(decl, '*') != NULL)
        return PARAM_POINTER;
    for (const char *p = decl; *p != '\0';) {
        const char *q = p;

        while (ident_char(*q))
            q++;
        if (q == p) {
            p++;
            continue;
        }
        if (!word_in(p, (size_t)(q - p), qualifiers)) {
            if (nwords == 16)
                return PARAM_UNKNOWN;
            word[nwords] = p;
            len[nwords++] = (size_t)(q - p);
        }
        p = q;
    }
    ntype = nwords >= 2 ? nwords - 1 : nwords; /* the last word is the name */
    for (int i = 0; i < ntype; i++) {
        is_float = is_float || (len[i] == 5 && strncmp(word[i], "float", 5) == 0);
        is_double = is_double || (len[i] == 6 && strncmp(word[i], "double", 6) == 0);
        nint += word_in(word[i], len[i], integers) ? 1 : 0;
    }
    if (is_float)
        return PARAM_FLOAT;
    if (is_double)
        return PARAM_DOUBLE;
    return ntype > 0 && nint == ntype ? PARAM_INTEGER : PARAM_UNKNOWN;
}

static const char *arg_type_name(gm_arg_type t)
{
    static const char *const names[] = {"?",   "i32", "u32",     "i64",   "u64",
                                        "f32", "f64", "pointer", "bytes", "smart array"};

    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* The article before arg_type_name(t) ("an i32", "a u32"). */
static const char *arg_article(gm_arg_type t)
{
    return t == GM_ARG_I32 || t == GM_ARG_I64 || t == GM_ARG_F32 || t == GM_ARG_F64 ? "an" : "a";
}

/* Whether an argument of type t may bind to a parameter of class c. */
static bool kind_fits(param_class c, gm_arg_type t)
{
    switch (c) {
    case PARAM_POINTER:
        return t == GM_ARG_PTR || t == GM_ARG_SMART || t == GM_ARG_U64 || t == GM_ARG_BYTES;
    case PARAM_FLOAT:
        return t == GM_ARG_F32 || t == GM_ARG_BYTES;
    case PARAM_DOUBLE:
        return t == GM_ARG_F64 || t == GM_ARG_BYTES;
    case PARAM_INTEGER:
        return t == GM_ARG_I32 || t == GM_ARG_U32 || t == GM_ARG_I64 || t == GM_ARG_U64 ||
               t == GM_ARG_BYTES;
    default:
        return true;
    }
}

/* The size a scalar argument of type t has (the gm_arg_* helpers' sizes); 0 for BYTES. */
static uint32_t scalar_size(gm_arg_type t)
{
    switch (t) {
    case GM_ARG_I32:
    case GM_ARG_U32:
    case GM_ARG_F32:
        return 4;
    case GM_ARG_I64:
    case GM_ARG_U64:
    case GM_ARG_F64:
        return 8;
    case GM_ARG_PTR:
    case GM_ARG_SMART:
        return (uint32_t)sizeof(void *);
    default:
        return 0;
    }
}

/* The number and sizes of the arguments against the signature. */
static gm_status check_args(const char *fn, const gm_kernel *k, int nargs, const gm_arg *args)
{
    char sig[512];

    if (nargs < 0 || nargs > GM_MAX_KERNEL_ARGS)
        return gm__error(GM_ERR_INVALID_ARG, "%s: kernel '%s': nargs %d is outside 0..%d", fn,
                         k->name, nargs, GM_MAX_KERNEL_ARGS);
    if (nargs > 0 && args == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: kernel '%s': args is NULL", fn, k->name);
    for (int i = 0; i < nargs; i++) {
        /* a scalar's value is read from the 8-byte union: its size must be its type's */
        if (args[i].type < GM_ARG_I32 || args[i].type > GM_ARG_SMART || args[i].size == 0 ||
            (args[i].type != GM_ARG_BYTES && args[i].size != scalar_size(args[i].type)))
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: kernel '%s': argument %d has type %d and size %u (make "
                             "arguments with the gm_arg_* helpers)",
                             fn, k->name, i, (int)args[i].type, (unsigned)args[i].size);
        if (args[i].type == GM_ARG_BYTES && args[i].value.bytes == NULL)
            return gm__error(GM_ERR_NULL_POINTER, "%s: kernel '%s': argument %d: bytes is NULL", fn,
                             k->name, i);
        if (args[i].type == GM_ARG_SMART && args[i].value.ptr == NULL)
            return gm__error(GM_ERR_NULL_POINTER,
                             "%s: kernel '%s': argument %d: the smart array is NULL", fn, k->name,
                             i);
    }
    if (k->nparams < 0)
        return GM_OK;
    gm_kernel_signature(k, sig, sizeof sig);
    if (nargs != k->nparams)
        return gm__error(GM_ERR_INVALID_ARG, "%s: kernel %s takes %d arguments, %d were given", fn,
                         sig, (int)k->nparams, nargs);
    for (int i = 0; i < nargs; i++) {
        const char *decl = k->param_decls != NULL ? k->param_decls[i] : NULL;

        if (args[i].size != k->param_sizes[i])
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: kernel %s: argument %d (%s) is %zu bytes, %s %s of %u bytes "
                             "was given",
                             fn, sig, i, decl != NULL ? decl : "?", k->param_sizes[i],
                             arg_article(args[i].type), arg_type_name(args[i].type),
                             (unsigned)args[i].size);
        if (!kind_fits(classify(decl), args[i].type))
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: kernel %s: argument %d (%s) cannot take %s %s value", fn, sig, i,
                             decl, arg_article(args[i].type), arg_type_name(args[i].type));
    }
    return GM_OK;
}

/* Extents >= 1 and within a limit per axis. */
static gm_status check_dims(const char *fn, const gm_kernel *k, const char *what, gm_dim3 d,
                            const int32_t limit[3])
{
    const uint32_t v[3] = {d.x, d.y, d.z};

    for (int i = 0; i < 3; i++) {
        if (v[i] == 0)
            return gm__error(GM_ERR_INVALID_ARG, "%s: kernel '%s': %s (%u,%u,%u) has a zero extent",
                             fn, k->name, what, d.x, d.y, d.z);
        if (limit[i] > 0 && v[i] > (uint32_t)limit[i])
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: kernel '%s': %s extent %c = %u exceeds the device limit %d", fn,
                             k->name, what, "xyz"[i], v[i], (int)limit[i]);
    }
    return GM_OK;
}

/* Grid, block and shared memory against the device and the kernel. */
static gm_status check_config(const char *fn, const gm_kernel *k, const gm_device_info *dev,
                              gm_dim3 grid, gm_dim3 block, size_t dynamic_shared)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    int64_t limit = dev->max_threads_per_block;
    /* saturating: a dynamic size near SIZE_MAX must not wrap below the limit */
    uint64_t shared = (uint64_t)dynamic_shared > UINT64_MAX - k->attrs.static_shared_bytes
                          ? UINT64_MAX
                          : (uint64_t)k->attrs.static_shared_bytes + dynamic_shared;
    int64_t shared_limit = dev->shared_memory_per_block_optin > dev->shared_memory_per_block
                               ? dev->shared_memory_per_block_optin
                               : dev->shared_memory_per_block;
    gm_status status = check_dims(fn, k, "block", block, dev->max_block_dim);

    if (status == GM_OK)
        status = check_dims(fn, k, "grid", grid, dev->max_grid_dim);
    if (status != GM_OK)
        return status;
    if (k->attrs.max_threads_per_block > 0 && k->attrs.max_threads_per_block < limit)
        limit = k->attrs.max_threads_per_block;
    if (limit > 0 && threads > (uint64_t)limit)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: kernel '%s': block (%u,%u,%u) has %llu threads; the limit is %lld",
                         fn, k->name, block.x, block.y, block.z, (unsigned long long)threads,
                         (long long)limit);
    if (shared_limit > 0 && shared > (uint64_t)shared_limit)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: kernel '%s': %zu bytes of static and %zu bytes of dynamic shared "
                         "memory exceed the device's %lld bytes per block",
                         fn, k->name, k->attrs.static_shared_bytes, dynamic_shared,
                         (long long)shared_limit);
    return GM_OK;
}

/*
 * The simulator runs a kernel on any host address, where a GPU faults (bar
 * HMM or ATS): warn, once per kernel, of a pointer argument into memory that
 * is none of the context's (device, managed, pinned, mapped or registered
 * memory, a foreign or DLPack array's, a module's constant array): a plain
 * malloc block, a stack array. Only there (elsewhere the driver's fault says
 * it), and only for a kernel's first launches, so that a correct program
 * does not pay the lookups on every launch.
 */
static void warn_host_pointers(gm_context *ctx, gm_kernel *k, int nargs, const gm_arg *args)
{
    for (int i = 0; i < nargs; i++) {
        gm_memory_kind kind = GM_MEMORY_HOST;

        if (args[i].type != GM_ARG_PTR || args[i].value.ptr == NULL ||
            gm_pointer_kind(ctx, args[i].value.ptr, &kind) != GM_OK || kind != GM_MEMORY_HOST ||
            gm__kernels_host_global(ctx, args[i].value.ptr))
            continue;
        atomic_store(&k->host_pointer_checks, 0);
        gm__log(GM_LOG_WARN,
                "gm_launch: kernel '%s': argument %d (%s) = %p is not device, managed, pinned, "
                "mapped or registered memory of this context; the simulator runs it, a GPU "
                "would fault (warned once per kernel, looked for in its first 16 launches)",
                k->name, i,
                k->param_decls != NULL && i < k->nparams ? k->param_decls[i] : "a pointer",
                args[i].value.ptr);
        return;
    }
}

gm_status gm_launch(gm_kernel *kernel, gm_dim3 grid, gm_dim3 block, size_t dynamic_shared_bytes,
                    gm_stream *stream, int nargs, const gm_arg *args)
{
    static const char fn[] = "gm_launch";
    void *values[GM_MAX_KERNEL_ARGS];
    void *smart[GM_MAX_KERNEL_ARGS]; /* the device addresses of smart array arguments */
    size_t sizes[GM_MAX_KERNEL_ARGS];
    bool has_smart = false;
    gm_launch_config config;
    gm_device_info dev;
    gm_backend_stream *bstream = NULL;
    gm_context *ctx = NULL;
    gm_status status = GM_OK;

    if (kernel == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: kernel is NULL", fn);
    ctx = kernel->module->ctx;
    status = check_args(fn, kernel, nargs, args);
    if (status == GM_OK)
        status = gm__kernels_device_info(ctx, &dev);
    if (status == GM_OK)
        status = check_config(fn, kernel, &dev, grid, block, dynamic_shared_bytes);
    if (status == GM_OK)
        status = gm__stream_backend(fn, ctx, stream, &bstream);
    if (status == GM_OK)
        status = gm__sync_allowed(fn, stream);
    if (status != GM_OK)
        return status;
    if (ctx->ops->kind == GM_BACKEND_HOST && atomic_load(&kernel->host_pointer_checks) > 0 &&
        atomic_fetch_sub(&kernel->host_pointer_checks, 1) > 0)
        warn_host_pointers(ctx, kernel, nargs, args);
    for (int i = 0; i < nargs && status == GM_OK; i++) {
        values[i] = args[i].type == GM_ARG_BYTES ? (void *)(uintptr_t)args[i].value.bytes
                                                 : (void *)(uintptr_t)&args[i].value;
        sizes[i] = args[i].size;
        if (args[i].type == GM_ARG_SMART) {
            status = gm__smart_launch_begin(args[i].value.ptr, ctx, fn, i, &smart[i]);
            values[i] = &smart[i];
            has_smart = true;
        }
    }
    if (status != GM_OK)
        return status;
    config.grid[0] = grid.x;
    config.grid[1] = grid.y;
    config.grid[2] = grid.z;
    config.block[0] = block.x;
    config.block[1] = block.y;
    config.block[2] = block.z;
    config.dynamic_shared_bytes = dynamic_shared_bytes;
    status = ctx->ops->launch(ctx->bctx, kernel->bkernel, &config, values, sizes, nargs, bstream);
    for (int i = 0; i < nargs && status == GM_OK && has_smart; i++) {
        if (args[i].type == GM_ARG_SMART)
            gm__smart_launch_end(args[i].value.ptr, stream);
    }
    return status;
}
