/*
 * Kernels on HSA: code objects loaded with hsa_code_object_reader_create_from_memory
 * -> hsa_executable_create_alt -> hsa_executable_load_agent_code_object ->
 * hsa_executable_freeze; kernels found by their "name.kd" symbol (the bare
 * name for code object v2); launches as
 * AQL kernel dispatch packets whose kernarg segment follows the code
 * object's metadata, hidden arguments (code object v4 and v5) included.
 */
#include <stdio.h>
#include <string.h>

#include "hsa_internal.h"

#define GM_HSA_DYNAMIC_STACK_BYTES 1024u /* private bytes for kernels with a dynamic call stack */

/* ------------------------------------------------------------- modules */

/* Our copy of the code object: the loader keeps pointers into it for tools. */
static gm_status copy_image(gm_backend_ctx *bctx, const void *image, size_t bytes,
                            gm_backend_module *module)
{
    const void *elf = NULL;
    size_t elf_bytes = 0;
    gm_status status = gm__hsa_codeobj_select(image, bytes, bctx->isa_name, &elf, &elf_bytes);

    if (status != GM_OK)
        return status;
    module->image = gm__malloc(elf_bytes);
    if (module->image == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_load: no memory for a %zu-byte code object",
                         elf_bytes);
    memcpy(module->image, elf, elf_bytes);
    module->image_bytes = elf_bytes;
    return GM_OK;
}

/* Reader, executable, load for our agent, freeze. */
static gm_status load_executable(gm_backend_ctx *bctx, gm_backend_module *module)
{
    const gm__hsa_api *api = &bctx->api;
    gm_status status = GM_HSA_CALL(api, hsa_code_object_reader_create_from_memory,
                                   (module->image, module->image_bytes, &module->reader));

    if (status != GM_OK)
        return status;
    status = GM_HSA_CALL(
        api, hsa_executable_create_alt,
        (bctx->profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &module->executable));
    if (status != GM_OK)
        goto fail_create;
    status = GM_HSA_CALL(api, hsa_executable_load_agent_code_object,
                         (module->executable, bctx->gpu, module->reader, NULL, NULL));
    if (status == GM_OK)
        status = GM_HSA_CALL(api, hsa_executable_freeze, (module->executable, NULL));
    if (status != GM_OK)
        goto fail_load;
    return GM_OK;

fail_load:
    (void)api->hsa_executable_destroy(module->executable);
fail_create:
    (void)api->hsa_code_object_reader_destroy(module->reader);
    return status;
}

gm_status gm__hsa_module_load(gm_backend_ctx *bctx, gm_image_kind kind, const void *image,
                              size_t bytes, gm_backend_module **module_p)
{
    gm_backend_module *module = NULL;
    gm_status status = GM_OK;

    if (kind != GM_IMAGE_AMDGPU)
        return gm__error(GM_ERR_UNSUPPORTED,
                         "module_load: the HSA backend loads AMDGPU code "
                         "objects only (image kind %d)",
                         (int)kind);
    module = gm__calloc(1, sizeof(*module));
    if (module == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_load: no memory");
    status = copy_image(bctx, image, bytes, module);
    if (status != GM_OK)
        goto fail_image;
    status = gm__hsa_codeobj_parse(module->image, module->image_bytes, &module->meta);
    if (status != GM_OK)
        goto fail_image;
    status = load_executable(bctx, module);
    if (status != GM_OK)
        goto fail_load;
    *module_p = module;
    return GM_OK;

fail_load:
    gm__hsa_codeobj_meta_free(&module->meta);
fail_image:
    gm__free(module->image);
    gm__free(module);
    return status;
}

gm_status gm__hsa_module_unload(gm_backend_ctx *bctx, gm_backend_module *module)
{
    gm_status status = GM_OK;

    if (module == NULL)
        return GM_OK;
    while (module->kernels != NULL) {
        gm_backend_kernel *k = module->kernels;

        module->kernels = k->next;
        gm__free(k);
    }
    status = GM_HSA_CALL(&bctx->api, hsa_executable_destroy, (module->executable));
    if (GM_HSA_CALL(&bctx->api, hsa_code_object_reader_destroy, (module->reader)) != GM_OK &&
        status == GM_OK)
        status = gm_last_error();
    gm__hsa_codeobj_meta_free(&module->meta);
    gm__free(module->image);
    gm__free(module);
    return status;
}

/* Look a symbol up for our agent; a missing one is GM_ERR_NOT_FOUND naming `what`. */
static gm_status find_symbol(gm_backend_ctx *bctx, gm_backend_module *module, const char *symbol,
                             const char *what, hsa_symbol_kind_t kind,
                             hsa_executable_symbol_t *sym_p)
{
    hsa_symbol_kind_t got = HSA_SYMBOL_KIND_VARIABLE;
    gm_status status = GM_HSA_CALL(&bctx->api, hsa_executable_get_symbol_by_name,
                                   (module->executable, symbol, &bctx->gpu, sym_p));

    if (status == GM_ERR_NOT_FOUND || status == GM_ERR_INVALID_ARG)
        return gm__error(GM_ERR_NOT_FOUND, "%s: no symbol %s in the module", what, symbol);
    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_executable_symbol_get_info,
                             (*sym_p, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, &got));
    if (status == GM_OK && got != kind)
        status = gm__error(GM_ERR_NOT_FOUND, "%s: %s is not a %s", what, symbol,
                           kind == HSA_SYMBOL_KIND_KERNEL ? "kernel" : "variable");
    return status;
}

/* Read the kernel descriptor's properties from its symbol. */
static gm_status read_kernel_symbol(gm_backend_ctx *bctx, hsa_executable_symbol_t sym,
                                    gm_backend_kernel *k)
{
    const gm__hsa_api *api = &bctx->api;
    gm_status status = GM_HSA_CALL(api, hsa_executable_symbol_get_info,
                                   (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k->object));

    if (status == GM_OK)
        status = GM_HSA_CALL(
            api, hsa_executable_symbol_get_info,
            (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &k->kernarg_bytes));
    if (status == GM_OK)
        status = GM_HSA_CALL(
            api, hsa_executable_symbol_get_info,
            (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT, &k->kernarg_align));
    if (status == GM_OK)
        status = GM_HSA_CALL(
            api, hsa_executable_symbol_get_info,
            (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, &k->group_bytes));
    if (status == GM_OK)
        status = GM_HSA_CALL(
            api, hsa_executable_symbol_get_info,
            (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, &k->private_bytes));
    if (status == GM_OK)
        status = GM_HSA_CALL(
            api, hsa_executable_symbol_get_info,
            (sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK, &k->dynamic_stack));
    return status;
}

/* The metadata must fit the descriptor the runtime loaded. */
static gm_status check_meta(const gm_backend_kernel *k)
{
    if (k->meta != NULL && k->meta->kernarg_size > k->kernarg_bytes)
        return gm__error(GM_ERR_INVALID_ARG,
                         "module_get_kernel: %s: metadata kernarg size %u "
                         "exceeds the descriptor's %u",
                         k->name, k->meta->kernarg_size, k->kernarg_bytes);
    return GM_OK;
}

/*
 * Build a kernel object for `name`: the metadata's .symbol for it, else
 * "name.kd" (code object v3 and later), else the bare name, which is how
 * code object v2 (no NT_AMDGPU_METADATA) names its kernel symbols.
 */
static gm_status make_kernel(gm_backend_ctx *bctx, gm_backend_module *module, const char *name,
                             gm_backend_kernel **kernel_p)
{
    gm_backend_kernel *k = gm__calloc(1, sizeof(*k));
    char symbol[GM_HSA_KERNEL_NAME_MAX + 4];
    hsa_executable_symbol_t sym = {0};
    uint64_t mark = gm__error_mark();
    gm_status status = GM_OK;

    if (k == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "module_get_kernel: no memory");
    k->module = module;
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->meta = gm__hsa_codeobj_find(&module->meta, name);
    if (k->meta != NULL && k->meta->symbol[0] != '\0')
        snprintf(symbol, sizeof(symbol), "%s", k->meta->symbol);
    else
        snprintf(symbol, sizeof(symbol), "%s.kd", name);
    status = find_symbol(bctx, module, symbol, "module_get_kernel", HSA_SYMBOL_KIND_KERNEL, &sym);
    if (status == GM_ERR_NOT_FOUND && k->meta == NULL) {
        sym.handle = 0;
        status = find_symbol(bctx, module, name, "module_get_kernel", HSA_SYMBOL_KIND_KERNEL, &sym);
        if (status == GM_OK) /* the v2 name: the miss of the v3 one is not an error */
            gm__error_back_to(mark);
        if (status == GM_ERR_NOT_FOUND && sym.handle == 0) /* neither exists */
            status = gm__error(GM_ERR_NOT_FOUND,
                               "module_get_kernel: no kernel symbol %s (code object v3 and "
                               "later) or %s (v2) in the module",
                               symbol, name);
    }
    if (status == GM_OK)
        status = read_kernel_symbol(bctx, sym, k);
    if (status == GM_OK)
        status = check_meta(k);
    if (status != GM_OK) {
        gm__free(k);
        return status;
    }
    *kernel_p = k;
    return GM_OK;
}

gm_status gm__hsa_module_get_kernel(gm_backend_ctx *bctx, gm_backend_module *module,
                                    const char *name, gm_backend_kernel **kernel_p)
{
    gm_backend_kernel *k = NULL;
    gm_status status = GM_OK;

    if (strlen(name) >= GM_HSA_KERNEL_NAME_MAX)
        return gm__error(GM_ERR_INVALID_ARG, "module_get_kernel: name of %zu bytes", strlen(name));
    pthread_mutex_lock(&bctx->lock);
    k = module->kernels;
    while (k != NULL && strcmp(k->name, name) != 0)
        k = k->next;
    if (k == NULL) {
        status = make_kernel(bctx, module, name, &k);
        if (status == GM_OK) {
            k->next = module->kernels;
            module->kernels = k;
        }
    }
    pthread_mutex_unlock(&bctx->lock);
    if (status == GM_OK)
        *kernel_p = k;
    return status;
}

/* Constant memory: the variable's agent address (writes go through copies). */
gm_status gm__hsa_module_get_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                    const char *name, gm_devptr *ptr_p, size_t *bytes_p)
{
    hsa_executable_symbol_t sym = {0};
    uint64_t address = 0;
    uint32_t size = 0;
    gm_status status =
        find_symbol(bctx, module, name, "module_get_global", HSA_SYMBOL_KIND_VARIABLE, &sym);

    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_executable_symbol_get_info,
                             (sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS, &address));
    if (status == GM_OK)
        status = GM_HSA_CALL(&bctx->api, hsa_executable_symbol_get_info,
                             (sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, &size));
    if (status != GM_OK)
        return status;
    *ptr_p = (gm_devptr)address;
    *bytes_p = size;
    return GM_OK;
}

/* Constant memory write: a synchronous copy on the legacy stream (after its work). */
gm_status gm__hsa_module_set_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                    const char *name, const void *data, size_t bytes)
{
    gm_devptr address = 0;
    size_t size = 0;
    gm_copy_desc d;
    gm_status status = GM_OK;

    if (module == NULL || name == NULL || (data == NULL && bytes > 0))
        return gm__error(GM_ERR_NULL_POINTER, "module_set_global: an argument is NULL");
    status = gm__hsa_module_get_global(bctx, module, name, &address, &size);
    if (status != GM_OK)
        return status;
    if (bytes > size)
        return gm__error(GM_ERR_OUT_OF_RANGE,
                         "module_set_global: '%s' holds %zu bytes, %zu "
                         "were given",
                         name, size, bytes);
    memset(&d, 0, sizeof(d));
    d.dst_side = GM_COPY_DEVICE;
    d.src_side = GM_COPY_HOST;
    d.dst = address;
    d.src = (gm_devptr)(uintptr_t)data;
    d.width_bytes = bytes;
    d.height = d.depth = d.dst_height = d.src_height = 1;
    d.dst_pitch = d.src_pitch = bytes;
    return gm__hsa_copy_unchecked(bctx, &d, NULL); /* the symbol's size bounded it */
}

/* The largest work-group the kernel allows (metadata), capped by the device. */
static uint32_t max_group(const gm_backend_ctx *bctx, const gm_backend_kernel *k)
{
    uint32_t device = (uint32_t)bctx->info.max_threads_per_block;

    if (k->meta != NULL && k->meta->max_flat_workgroup_size != 0 &&
        k->meta->max_flat_workgroup_size < device)
        return k->meta->max_flat_workgroup_size;
    return device;
}

/* Private bytes per work-item a dispatch asks for. */
static uint32_t private_bytes(const gm_backend_kernel *k)
{
    if (k->dynamic_stack && k->private_bytes < GM_HSA_DYNAMIC_STACK_BYTES)
        return GM_HSA_DYNAMIC_STACK_BYTES;
    return k->private_bytes;
}

gm_status gm__hsa_kernel_attrs(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                               gm_kernel_attrs *attrs_p)
{
    attrs_p->static_shared_bytes = kernel->group_bytes;
    attrs_p->private_bytes = private_bytes(kernel);
    attrs_p->kernarg_bytes = kernel->kernarg_bytes;
    attrs_p->kernarg_align = kernel->kernarg_align;
    attrs_p->max_threads_per_block = (int32_t)max_group(bctx, kernel);
    return GM_OK;
}

/* ----------------------------------------------------------- launches */

/* Grid dimensionality: the highest dimension with more than one work-item. */
static uint16_t grid_dims(const gm_launch_config *c)
{
    if (c->grid[2] > 1 || c->block[2] > 1)
        return 3;
    if (c->grid[1] > 1 || c->block[1] > 1)
        return 2;
    return 1;
}

/* Check the configuration against the device and the kernel. */
static gm_status check_config(const gm_backend_ctx *bctx, const gm_backend_kernel *k,
                              const gm_launch_config *c)
{
    uint64_t threads = (uint64_t)c->block[0] * c->block[1] * c->block[2];

    for (int i = 0; i < 3; i++) {
        if (c->grid[i] == 0 || c->block[i] == 0)
            return gm__error(GM_ERR_INVALID_ARG, "launch %s: zero grid or block dimension",
                             k->name);
        if (c->block[i] > (uint32_t)bctx->info.max_block_dim[i])
            return gm__error(GM_ERR_INVALID_ARG,
                             "launch %s: block dimension %d is %u, the "
                             "device allows %d",
                             k->name, i, c->block[i], (int)bctx->info.max_block_dim[i]);
        if ((uint64_t)c->grid[i] * c->block[i] > UINT32_MAX)
            return gm__error(GM_ERR_INVALID_ARG,
                             "launch %s: %u x %u work-items in dimension "
                             "%d exceed HSA's 32-bit grid",
                             k->name, c->grid[i], c->block[i], i);
    }
    if (threads > max_group(bctx, k))
        return gm__error(GM_ERR_INVALID_ARG, "launch %s: %llu threads per block, at most %u",
                         k->name, (unsigned long long)threads, max_group(bctx, k));
    if (k->group_bytes + (uint64_t)c->dynamic_shared_bytes > bctx->group_bytes)
        return gm__error(GM_ERR_LAUNCH,
                         "launch %s: %u static + %zu dynamic shared bytes exceed "
                         "the %llu-byte group segment",
                         k->name, k->group_bytes, c->dynamic_shared_bytes,
                         (unsigned long long)bctx->group_bytes);
    return GM_OK;
}

/* Store the low `size` bytes of value (little-endian, as AMDGPU kernargs are). */
static void put_uint(unsigned char *at, uint32_t size, uint64_t value)
{
    for (uint32_t i = 0; i < size && i < 8; i++)
        at[i] = (unsigned char)(value >> (8 * i));
}

/*
 * A hidden argument's value. Block counts are whole work-groups and
 * remainders 0, since grids are whole blocks. Zero for what gpumem does not
 * provide: global offsets; printf and hostcall buffers (no device printf);
 * heap (no device malloc); default queue and completion action (no device
 * enqueue); multigrid sync (no multi-device cooperative launch); private and
 * shared aperture bases (read from aperture registers on gfx9 and later).
 */
static uint64_t hidden_value(gm__hsa_arg_kind kind, const gm_launch_config *c, uint16_t dims,
                             const hsa_queue_t *queue)
{
    switch (kind) {
    case GM_HSA_ARG_HIDDEN_BLOCK_COUNT_X:
    case GM_HSA_ARG_HIDDEN_BLOCK_COUNT_Y:
    case GM_HSA_ARG_HIDDEN_BLOCK_COUNT_Z:
        return c->grid[kind - GM_HSA_ARG_HIDDEN_BLOCK_COUNT_X];
    case GM_HSA_ARG_HIDDEN_GROUP_SIZE_X:
    case GM_HSA_ARG_HIDDEN_GROUP_SIZE_Y:
    case GM_HSA_ARG_HIDDEN_GROUP_SIZE_Z:
        return c->block[kind - GM_HSA_ARG_HIDDEN_GROUP_SIZE_X];
    case GM_HSA_ARG_HIDDEN_GRID_DIMS:
        return dims;
    case GM_HSA_ARG_HIDDEN_DYNAMIC_LDS_SIZE:
        return c->dynamic_shared_bytes;
    case GM_HSA_ARG_HIDDEN_QUEUE_PTR:
        return (uint64_t)(uintptr_t)queue;
    default:
        return 0;
    }
}

/* Fill the kernarg segment from the metadata: explicit arguments in order, hidden ones. */
static gm_status fill_from_meta(const gm_backend_kernel *k, const gm_launch_config *c, void **args,
                                const size_t *sizes, int nargs, const hsa_queue_t *queue,
                                unsigned char *buf)
{
    const gm__hsa_kernel_meta *m = k->meta;
    uint16_t dims = grid_dims(c);
    int next = 0;

    if ((uint32_t)nargs != m->nexplicit)
        return gm__error(GM_ERR_INVALID_ARG, "launch %s: %d arguments given, the kernel takes %u",
                         k->name, nargs, m->nexplicit);
    for (uint32_t i = 0; i < m->nargs; i++) {
        const gm__hsa_arg *a = &m->args[i];

        if (!GM_HSA_ARG_IS_EXPLICIT(a->kind)) {
            put_uint(buf + a->offset, a->size, hidden_value(a->kind, c, dims, queue));
            continue;
        }
        if (sizes[next] != a->size)
            return gm__error(GM_ERR_INVALID_ARG,
                             "launch %s: argument %d is %zu bytes, the "
                             "kernel's metadata says %u",
                             k->name, next, sizes[next], a->size);
        memcpy(buf + a->offset, args[next], a->size);
        next++;
    }
    return GM_OK;
}

/* Without metadata (code object v2): each argument at its natural alignment. */
static gm_status fill_natural(const gm_backend_kernel *k, void **args, const size_t *sizes,
                              int nargs, unsigned char *buf)
{
    size_t offset = 0;

    for (int i = 0; i < nargs; i++) {
        size_t align = sizes[i] >= 8 ? 8 : sizes[i] >= 4 ? 4 : sizes[i] >= 2 ? 2 : 1;

        offset = (offset + align - 1) & ~(align - 1);
        if (offset + sizes[i] > k->kernarg_bytes)
            return gm__error(GM_ERR_INVALID_ARG,
                             "launch %s: arguments exceed the %u-byte "
                             "kernarg segment",
                             k->name, k->kernarg_bytes);
        memcpy(buf + offset, args[i], sizes[i]);
        offset += sizes[i];
    }
    return GM_OK;
}

/* A kernarg buffer (recycled when small enough), reachable by the GPU. Lock held. */
static gm_status kernarg_alloc(gm_backend_ctx *bctx, gm__hsa_op *op, size_t bytes)
{
    bool pooled = bytes <= GM_HSA_KERNARG_BYTES;
    gm_status status = GM_OK;

    if (pooled && bctx->nkernargs > 0) {
        op->kernarg = bctx->kernargs[--bctx->nkernargs];
    } else {
        status = gm__hsa_host_pool_alloc(bctx, bctx->kernarg_pool, bctx->kernarg_pool_needs_access,
                                         pooled ? GM_HSA_KERNARG_BYTES : bytes, &op->kernarg);
        if (status != GM_OK)
            return status;
    }
    op->kernarg_pooled = pooled;
    memset(op->kernarg, 0, pooled ? GM_HSA_KERNARG_BYTES : bytes);
    return GM_OK;
}

/* Write the dispatch packet fields (the header is written when published). */
static void make_packet(const gm_backend_kernel *k, const gm_launch_config *c, const gm__hsa_op *op,
                        hsa_kernel_dispatch_packet_t *pkt)
{
    memset(pkt, 0, sizeof(*pkt));
    pkt->setup = (uint16_t)(grid_dims(c) << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    pkt->workgroup_size_x = (uint16_t)c->block[0];
    pkt->workgroup_size_y = (uint16_t)c->block[1];
    pkt->workgroup_size_z = (uint16_t)c->block[2];
    pkt->grid_size_x = c->grid[0] * c->block[0]; /* HSA grids count work-items */
    pkt->grid_size_y = c->grid[1] * c->block[1];
    pkt->grid_size_z = c->grid[2] * c->block[2];
    pkt->private_segment_size = private_bytes(k);
    pkt->group_segment_size = (uint32_t)(k->group_bytes + c->dynamic_shared_bytes);
    pkt->kernel_object = k->object;
    pkt->kernarg_address = op->kernarg;
    pkt->completion_signal = op->done->handle;
}

/* Build and submit the dispatch on a resolved stream; sync: wait for it. Lock held. */
static gm_status dispatch(gm_backend_ctx *bctx, gm_backend_stream *stream,
                          const gm_backend_kernel *k, const gm_launch_config *c, void **args,
                          const size_t *sizes, int nargs, bool sync)
{
    hsa_queue_t *queue = NULL;
    hsa_kernel_dispatch_packet_t pkt;
    gm__hsa_op *op = NULL;
    gm__hsa_sig **deps = NULL;
    size_t ndeps = 0;
    gm_status status = gm__hsa_stream_queue(bctx, stream, &queue);

    if (status == GM_OK)
        status = gm__hsa_op_begin(bctx, stream, 1, true, "kernel dispatch", &op);
    if (status != GM_OK)
        return status;
    status = kernarg_alloc(bctx, op, k->kernarg_bytes > 0 ? k->kernarg_bytes : 16);
    if (status == GM_OK && k->meta != NULL)
        status = fill_from_meta(k, c, args, sizes, nargs, queue, op->kernarg);
    else if (status == GM_OK)
        status = fill_natural(k, args, sizes, nargs, op->kernarg);
    if (status == GM_OK)
        status = gm__hsa_queue_deps(stream, op, &deps, &ndeps);
    if (status == GM_OK) {
        make_packet(k, c, op, &pkt);
        status = gm__hsa_submit_dispatch(bctx, queue, deps, ndeps, &pkt);
    }
    gm__free(deps);
    if (status != GM_OK) {
        gm__hsa_op_abort(bctx, op);
        return status;
    }
    gm__hsa_queue_submitted(bctx, stream, op->done);
    if (sync)
        return gm__hsa_op_finish_sync(bctx, stream, op);
    gm__hsa_op_commit(bctx, stream, op);
    return GM_OK;
}

/*
 * Launches are asynchronous on a stream; with no stream (NULL) the dispatch
 * goes on the legacy stream and the caller waits for it, so the kernel has
 * finished, and its failure is returned, when the call returns (gm_launch's
 * contract, and the rule copies and memset follow).
 */
gm_status gm__hsa_launch(gm_backend_ctx *bctx, gm_backend_kernel *kernel,
                         const gm_launch_config *config, void **args, const size_t *arg_sizes,
                         int nargs, gm_backend_stream *stream)
{
    gm_status status = check_config(bctx, kernel, config);

    if (status != GM_OK)
        return status;
    pthread_mutex_lock(&bctx->lock);
    status = dispatch(bctx, gm__hsa_stream_resolve(bctx, stream), kernel, config, args, arg_sizes,
                      nargs, stream == NULL);
    pthread_mutex_unlock(&bctx->lock);
    return status;
}
