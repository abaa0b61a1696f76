/*
 * Modules and launches of the host simulator backend.
 *
 * A module is a gm_host_table (kernels compiled by the C compiler against
 * gpumem/kernel.h); a kernel is the table's gm_host_kernel itself. A launch
 * copies its argument values into a job and runs it on the kernel simulator
 * in stream order (stream_enqueue_host), so it is ordered with the copies on
 * the same stream; with no stream it runs at once on the calling thread,
 * after the legacy stream's earlier work.
 *
 * Launch jobs are allocated with the C library's malloc, not the
 * bookkeeping allocator, because the stream worker frees them.
 */
#include <stdlib.h>
#include <string.h>

#include "host_backend.h"
#include "host_launch.h"
#include "sim/sim.h"

#define JOB_ALIGN 16u

/* A global's bytes, [base, base + bytes). */
typedef struct host_global_range {
    uintptr_t base;
    size_t bytes;
} host_global_range;

/*
 * A loaded table, on its context's list (under mem_lock) while loaded, with
 * the ranges of its globals copied at load: the list is read for every copy
 * that names memory outside the registry, and the table of a set that has
 * been unregistered may be gone (gm_unregister_image_set).
 */
typedef struct host_module {
    const gm_host_table *table;
    struct host_module *next;
    int32_t nglobals;
    host_global_range globals[];
} host_module;

/* A launch with its own copy of the argument values. */
typedef struct host_launch_job {
    gm__sim_launch launch;
    void **args;
} host_launch_job;

static const host_module *as_module(const gm_backend_module *module)
{
    return (const host_module *)(const void *)module;
}

static const gm_host_kernel *as_kernel(const gm_backend_kernel *kernel)
{
    return (const gm_host_kernel *)(const void *)kernel;
}

/* Check a table's header and its kernels' ABI. */
static gm_status check_table(const gm_host_table *t)
{
    if (t->magic != GM_HOST_TABLE_MAGIC)
        return gm__error(GM_ERR_INVALID_ARG, "module_load: not a host kernel table (magic 0x%x)",
                         (unsigned)t->magic);
    if (t->abi != GM_HOST_KERNEL_ABI)
        return gm__error(GM_ERR_VERSION_MISMATCH,
                         "module_load: host kernel table built for simulator ABI %u, this library "
                         "runs ABI %u",
                         (unsigned)t->abi, (unsigned)GM_HOST_KERNEL_ABI);
    if (t->nkernels < 0 || t->nglobals < 0 || (t->nkernels > 0 && t->kernels == NULL) ||
        (t->nglobals > 0 && t->globals == NULL))
        return gm__error(GM_ERR_INVALID_ARG, "module_load: malformed host kernel table");
    for (int32_t i = 0; i < t->nkernels; i++) {
        const gm_host_kernel *k = t->kernels[i];

        if (k == NULL)
            continue;
        if (k->abi != GM_HOST_KERNEL_ABI)
            return gm__error(GM_ERR_VERSION_MISMATCH,
                             "module_load: kernel %d of the host table has ABI %u (expected %u)",
                             (int)i, (unsigned)k->abi, (unsigned)GM_HOST_KERNEL_ABI);
        if (k->name == NULL || k->block_fn == NULL || (k->nparams > 0 && k->param_sizes == NULL))
            return gm__error(
                GM_ERR_INVALID_ARG,
                "module_load: kernel %d of the host table is malformed: its %s is NULL", (int)i,
                k->name == NULL       ? "name"
                : k->block_fn == NULL ? "block function"
                                      : "parameter size list");
        if (k->nparams < 0)
            return gm__error(GM_ERR_INVALID_ARG,
                             "module_load: kernel %d ('%s') of the host table has %d parameters",
                             (int)i, k->name, (int)k->nparams);
        for (int32_t p = 0; k->param_decls != NULL && p < k->nparams; p++) {
            if (k->param_decls[p] == NULL)
                return gm__error(GM_ERR_INVALID_ARG,
                                 "module_load: kernel %d ('%s') of the host table is malformed: "
                                 "its parameter declaration %d is NULL",
                                 (int)i, k->name, (int)p);
        }
    }
    for (int32_t i = 0; i < t->nglobals; i++) {
        const gm_host_global *g = t->globals[i];

        if (g != NULL && (g->name == NULL || (g->bytes > 0 && g->address == NULL)))
            return gm__error(GM_ERR_INVALID_ARG,
                             "module_load: global %d of the host table is malformed: its %s is "
                             "NULL",
                             (int)i, g->name == NULL ? "name" : "address");
    }
    return GM_OK;
}

gm_status gm__host_module_load(gm_backend_ctx *bctx, gm_image_kind kind, const void *image,
                               size_t bytes, gm_backend_module **module_p)
{
    host_ctx *c = gm__host_ctx(bctx);
    const gm_host_table *t = NULL;
    host_module *m = NULL;
    int32_t nglobals = 0;
    gm_status status = GM_OK;

    if (image == NULL || module_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "module_load: %s is NULL",
                         image == NULL ? "image" : "module_p");
    if (kind != GM_IMAGE_HOST)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "module_load: the host simulator runs host kernel tables, not %s images",
                         kind == GM_IMAGE_CUDA ? "CUDA" : "AMDGPU");
    if (bytes < sizeof(gm_host_table))
        return gm__error(GM_ERR_INVALID_ARG, "module_load: a host table is %zu bytes, got %zu",
                         sizeof(gm_host_table), bytes);
    status = check_table(image);
    if (status != GM_OK)
        return status;
    t = image;
    for (int32_t i = 0; i < t->nglobals; i++)
        nglobals += t->globals[i] != NULL && t->globals[i]->bytes > 0 ? 1 : 0;
    m = gm__calloc(1, sizeof(*m) + (size_t)nglobals * sizeof(m->globals[0]));
    if (m == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_load: out of memory");
    m->table = t;
    for (int32_t i = 0; i < t->nglobals; i++) {
        const gm_host_global *g = t->globals[i];

        if (g != NULL && g->bytes > 0)
            m->globals[m->nglobals++] = (host_global_range){(uintptr_t)g->address, g->bytes};
    }
    gm__lock_take(&c->mem_lock);
    m->next = c->modules;
    c->modules = m;
    gm__lock_give(&c->mem_lock);
    *module_p = (gm_backend_module *)(void *)m;
    return GM_OK;
}

gm_status gm__host_module_unload(gm_backend_ctx *bctx, gm_backend_module *module)
{
    host_ctx *c = gm__host_ctx(bctx);
    host_module **p = &c->modules;

    gm__lock_take(&c->mem_lock);
    while (*p != NULL && *p != (host_module *)(void *)module)
        p = &(*p)->next;
    if (*p != NULL)
        *p = (*p)->next;
    gm__lock_give(&c->mem_lock);
    gm__free(module);
    return GM_OK;
}

bool gm__host_module_global(const host_ctx *c, uintptr_t addr, size_t bytes)
{
    for (const host_module *m = c->modules; m != NULL; m = m->next) {
        for (int32_t i = 0; i < m->nglobals; i++) {
            const host_global_range *g = &m->globals[i];

            if (addr - g->base < g->bytes && bytes <= g->bytes - (addr - g->base))
                return true;
        }
    }
    return false;
}

gm_status gm__host_module_get_kernel(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_backend_kernel **kernel_p)
{
    const gm_host_table *t = NULL;

    (void)bctx;
    if (module == NULL || name == NULL || kernel_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "module_get_kernel: an argument is NULL");
    t = as_module(module)->table;
    for (int32_t i = 0; i < t->nkernels; i++) {
        const gm_host_kernel *k = t->kernels[i];

        if (k != NULL && strcmp(k->name, name) == 0) {
            *kernel_p = (gm_backend_kernel *)(void *)(uintptr_t)k;
            return GM_OK;
        }
    }
    return gm__error(GM_ERR_NOT_FOUND, "module_get_kernel: no kernel '%s' in the host table", name);
}

/* The global `name` of a module, or NULL. */
static const gm_host_global *find_global(const gm_backend_module *module, const char *name)
{
    const gm_host_table *t = as_module(module)->table;

    for (int32_t i = 0; i < t->nglobals; i++) {
        const gm_host_global *g = t->globals[i];

        if (g != NULL && g->name != NULL && strcmp(g->name, name) == 0)
            return g;
    }
    return NULL;
}

gm_status gm__host_module_get_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, gm_devptr *ptr_p, size_t *bytes_p)
{
    const gm_host_global *g = NULL;

    (void)bctx;
    if (module == NULL || name == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "module_get_global: an argument is NULL");
    g = find_global(module, name);
    if (g == NULL)
        return gm__error(GM_ERR_NOT_FOUND, "module_get_global: no global '%s' in the host table",
                         name);
    if (ptr_p != NULL)
        *ptr_p = (gm_devptr)(uintptr_t)g->address;
    if (bytes_p != NULL)
        *bytes_p = g->bytes;
    return GM_OK;
}

gm_status gm__host_module_set_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                     const char *name, const void *data, size_t bytes)
{
    const gm_host_global *g = NULL;

    if (module == NULL || name == NULL || (data == NULL && bytes > 0))
        return gm__error(GM_ERR_NULL_POINTER, "module_set_global: an argument is NULL");
    g = find_global(module, name);
    if (g == NULL)
        return gm__error(GM_ERR_NOT_FOUND, "module_set_global: no global '%s' in the host table",
                         name);
    if (bytes > g->bytes)
        return gm__error(GM_ERR_OUT_OF_RANGE,
                         "module_set_global: '%s' holds %zu bytes, %zu were given", name, g->bytes,
                         bytes);
    gm__host_sync_barrier(gm__host_ctx(bctx));
    if (bytes > 0)
        memcpy(g->address, data, bytes);
    return GM_OK;
}

gm_status gm__host_kernel_attrs(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                                gm_kernel_attrs *attrs_p)
{
    const gm_host_kernel *k = as_kernel(kernel);
    size_t kernarg = 0;

    (void)bctx;
    if (kernel == NULL || attrs_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "kernel_attrs: an argument is NULL");
    for (int32_t i = 0; i < k->nparams; i++) {
        size_t size = k->param_sizes[i];
        size_t align = size >= 8u ? 8u : (size >= 4u ? 4u : (size >= 2u ? 2u : 1u));

        kernarg = (kernarg + align - 1u) / align * align + size;
    }
    memset(attrs_p, 0, sizeof(*attrs_p));
    attrs_p->kernarg_bytes = kernarg;
    attrs_p->kernarg_align = 8;
    attrs_p->max_threads_per_block = (int32_t)GM__SIM_MAX_THREADS;
    attrs_p->param_count = k->nparams;
    attrs_p->param_sizes = k->param_sizes;
    attrs_p->param_decls = k->param_decls;
    return GM_OK;
}

/* Stream work: run the launch on the simulator. */
static gm_status run_job(void *user)
{
    host_launch_job *job = user;

    return gm__sim_run("gm_launch", &job->launch);
}

static void free_job(void *user)
{
    free(user);
}

/* One allocation: the job, the argument pointers, then each value (16-byte aligned). */
static gm_status make_job(const gm_host_kernel *k, void **args, const size_t *arg_sizes, int nargs,
                          host_launch_job **job_p)
{
    size_t head = (sizeof(host_launch_job) + (size_t)nargs * sizeof(void *) + JOB_ALIGN - 1u) /
                  JOB_ALIGN * JOB_ALIGN;
    size_t total = head;
    host_launch_job *job = NULL;
    unsigned char *values = NULL;

    for (int i = 0; i < nargs; i++)
        total += (arg_sizes[i] + JOB_ALIGN - 1u) / JOB_ALIGN * JOB_ALIGN;
    job = malloc(total);
    if (job == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "gm_launch: kernel '%s': out of memory", k->name);
    memset(job, 0, sizeof(*job));
    job->args = (void **)(void *)(job + 1);
    values = (unsigned char *)job + head;
    for (int i = 0; i < nargs; i++) {
        memcpy(values, args[i], arg_sizes[i]);
        job->args[i] = values;
        values += (arg_sizes[i] + JOB_ALIGN - 1u) / JOB_ALIGN * JOB_ALIGN;
    }
    *job_p = job;
    return GM_OK;
}

/* Defensive checks of what the core has already validated. */
static gm_status check_launch(const gm_host_kernel *k, const gm_launch_config *c, void **args,
                              const size_t *arg_sizes, int nargs)
{
    uint64_t threads = (uint64_t)c->block[0] * c->block[1] * c->block[2];

    if (nargs != k->nparams || (nargs > 0 && (args == NULL || arg_sizes == NULL)))
        return gm__error(GM_ERR_INVALID_ARG, "gm_launch: kernel '%s' takes %d arguments, got %d",
                         k->name, (int)k->nparams, nargs);
    for (int i = 0; i < nargs; i++) {
        if (args[i] == NULL || arg_sizes[i] != k->param_sizes[i])
            return gm__error(GM_ERR_INVALID_ARG,
                             "gm_launch: kernel '%s': argument %d is %zu bytes, expected %zu",
                             k->name, i, arg_sizes[i], k->param_sizes[i]);
    }
    if (threads == 0 || threads > GM__SIM_MAX_THREADS || c->grid[0] == 0 || c->grid[1] == 0 ||
        c->grid[2] == 0)
        return gm__error(GM_ERR_INVALID_ARG, "gm_launch: kernel '%s': invalid grid or block",
                         k->name);
    return GM_OK;
}

gm_status gm__host_launch(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                          const gm_launch_config *config, void **args, const size_t *arg_sizes,
                          int nargs, gm_backend_stream *stream)
{
    const gm_host_kernel *k = as_kernel(kernel);
    host_launch_job *job = NULL;
    gm_status status = GM_OK;

    if (kernel == NULL || config == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "gm_launch: %s is NULL",
                         kernel == NULL ? "kernel" : "config");
    status = check_launch(k, config, args, arg_sizes, nargs);
    if (status == GM_OK)
        status = make_job(k, args, arg_sizes, nargs, &job);
    if (status != GM_OK)
        return status;
    job->launch.kernel = k;
    job->launch.args = job->args;
    memcpy(job->launch.grid, config->grid, sizeof(job->launch.grid));
    memcpy(job->launch.block, config->block, sizeof(job->launch.block));
    job->launch.dynamic_shared_bytes = config->dynamic_shared_bytes;
    job->launch.warp_size = gm__host_ctx(bctx)->warp_size == 64 ? 64u : 32u;
    status = gm__host_stream_enqueue_host(bctx, stream, run_job, job, free_job);
    /* Queued work is freed by its cleanup; so is synchronous work, failed or not. A queueing
     * failure (out of memory) runs nothing and frees nothing. */
    if (status != GM_OK && stream != NULL)
        free_job(job);
    return status;
}
