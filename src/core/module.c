/*
 * Modules, kernels and the kernel registry.
 *
 * A gm_module wraps a backend module: a host kernel table on the simulator,
 * a CUDA image on CUDA, an AMDGPU code object on HSA. The registry is a
 * process-wide list of image sets (the application's, newest first, then the
 * library's built-in ones); gm_kernel_find() loads the set holding a kernel
 * once per context. Every context's modules are kept on a per-context list
 * here (keyed by the context) until they are unloaded or the context is torn
 * down (gm__kernels_context_teardown).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels_internal.h"

#define ELF_MACHINE_CUDA     190
#define ELF_MACHINE_AMDGPU   224
#define FATBIN_MAGIC         0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define MAX_REGISTERED_SETS  256

/* Per-context state: the modules and the device limits. */
typedef struct ctx_state {
    struct ctx_state *next;
    gm_context *ctx;
    gm_backend_ctx *bctx; /* to recognize a new context at a destroyed one's address */
    gm_module *modules;
    bool have_info;
    gm_device_info info;
} ctx_state;

/*
 * What a context's module loaded from a registry set points at once the set
 * is unregistered: still owned by its context (m->set != NULL), never matched
 * again, so a set registered later at the same address loads its own.
 */
static const gm_image_set unregistered_set = {"(unregistered)", NULL, NULL, 0, NULL, 0};

static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static ctx_state *states = NULL;
static const gm_image_set *registered[MAX_REGISTERED_SETS];
static int nregistered = 0;

gm_status gm__unsupported_module_set_global(gm_backend_ctx *bctx, gm_backend_module *module,
                                            const char *name, const void *data, size_t bytes)
{
    (void)bctx;
    (void)module;
    (void)name;
    (void)data;
    (void)bytes;
    return gm__error(GM_ERR_UNSUPPORTED, "module_set_global is not supported by this backend");
}

/* ------------------------------------------------------ context state */

/* The context's state (lock held); created when `create`; NULL if absent or out of memory. */
static ctx_state *state_get(gm_context *ctx, bool create)
{
    ctx_state **p = &states;
    ctx_state *s = NULL;

    while (*p != NULL && (*p)->ctx != ctx)
        p = &(*p)->next;
    s = *p;
    if (s != NULL && s->bctx != ctx->bctx) {
        /* Left by a context destroyed without gm__kernels_context_teardown: its backend is
         * gone, so its modules can only be forgotten (their bookkeeping leaks). */
        gm__log(GM_LOG_WARN, "gm_kernel: forgetting the modules of a destroyed context");
        *p = s->next;
        s = NULL;
    }
    if (s != NULL || !create)
        return s;
    s = gm__calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->ctx = ctx;
    s->bctx = ctx->bctx;
    s->next = states;
    states = s;
    return s;
}

bool gm__kernels_host_global(gm_context *ctx, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    const ctx_state *s = NULL;
    bool found = false;

    pthread_mutex_lock(&kernels_lock);
    s = state_get(ctx, false);
    for (const gm_module *m = s != NULL ? s->modules : NULL; m != NULL && !found; m = m->next) {
        /* an unregistered set's memory may be gone (launch.h): not read */
        const gm_host_table *t =
            m->format == GM_IMAGE_FORMAT_HOST && m->set != &unregistered_set ? m->signatures : NULL;

        for (int32_t i = 0; t != NULL && i < t->nglobals && !found; i++) {
            const gm_host_global *g = t->globals[i];

            found = g != NULL && p >= (uintptr_t)g->address && p - (uintptr_t)g->address < g->bytes;
        }
    }
    pthread_mutex_unlock(&kernels_lock);
    return found;
}

/* The context's device limits in its state, read once (lock held). */
static gm_status state_info(gm_context *ctx, ctx_state *s)
{
    gm_status status = GM_OK;

    if (!s->have_info) {
        status = ctx->ops->device_info(ctx->bctx, &s->info);
        s->have_info = status == GM_OK;
        if (s->have_info)
            gm__device_info_complete(&s->info);
    }
    return status;
}

gm_status gm__kernels_device_info(gm_context *ctx, gm_device_info *info_p)
{
    ctx_state *s = NULL;
    gm_status status = GM_OK;

    pthread_mutex_lock(&kernels_lock);
    s = state_get(ctx, true);
    if (s == NULL)
        status = gm__error(GM_ERR_NO_MEMORY, "gm_launch: out of memory");
    else
        status = state_info(ctx, s);
    if (status == GM_OK)
        *info_p = s->info;
    pthread_mutex_unlock(&kernels_lock);
    return status;
}

/* ---------------------------------------------------- module objects */

static void kernels_free(gm_kernel *k)
{
    while (k != NULL) {
        gm_kernel *next = k->next;

        gm__free(k->name);
        gm__free(k);
        k = next;
    }
}

/* Unload and free a module that is on no list. */
static gm_status module_destroy(gm_module *m)
{
    gm_context *ctx = m->ctx;
    gm_status status = ctx->ops->module_unload(ctx->bctx, m->bmodule);

    kernels_free(m->kernels);
    gm__free(m->image);
    gm__free(m);
    return status;
}

/* gm__module_unload_fn of a queued module. */
static gm_status module_unload_entry(gm_context *ctx, void *handle)
{
    (void)ctx;
    return module_destroy(handle);
}

static void state_unlink(ctx_state *s, gm_module *m)
{
    gm_module **p = &s->modules;

    while (*p != NULL && *p != m)
        p = &(*p)->next;
    if (*p == m)
        *p = m->next;
}

void gm__kernels_context_teardown(gm_context *ctx)
{
    ctx_state **p = &states;
    ctx_state *s = NULL;

    pthread_mutex_lock(&kernels_lock);
    while (*p != NULL && (*p)->ctx != ctx)
        p = &(*p)->next;
    s = *p;
    if (s != NULL)
        *p = s->next;
    pthread_mutex_unlock(&kernels_lock);
    if (s == NULL)
        return;
    while (s->modules != NULL) {
        gm_module *m = s->modules;
        gm_status status = GM_OK;

        s->modules = m->next;
        gm__dealloc_entry_discard(m->entry);
        status = module_destroy(m);
        if (status != GM_OK)
            gm__log(GM_LOG_WARN, "gm_context_destroy: unloading a module failed: %s",
                    gm_last_error_message());
    }
    gm__free(s);
}

/* --------------------------------------------------------- formats */

/* The format of an image from its first bytes; AUTO when unrecognized. */
static gm_image_format detect_format(const void *image, size_t bytes)
{
    const unsigned char *p = image;
    uint32_t magic = 0;
    size_t i = 0;

    if (bytes >= 4)
        memcpy(&magic, p, 4);
    if (bytes >= sizeof(gm_host_table) && magic == GM_HOST_TABLE_MAGIC)
        return GM_IMAGE_FORMAT_HOST;
    if (magic == FATBIN_MAGIC || magic == FATBIN_WRAPPER_MAGIC)
        return GM_IMAGE_FORMAT_CUDA;
    if (bytes >= 20 && memcmp(p, "\177ELF", 4) == 0) {
        unsigned machine = (unsigned)p[18] | ((unsigned)p[19] << 8);

        if (machine == ELF_MACHINE_CUDA)
            return GM_IMAGE_FORMAT_CUDA;
        if (machine == ELF_MACHINE_AMDGPU)
            return GM_IMAGE_FORMAT_AMDGPU;
        return GM_IMAGE_FORMAT_AUTO;
    }
    while (i < bytes && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    if (bytes - i >= 2 && (memcmp(p + i, "//", 2) == 0 || p[i] == '.'))
        return GM_IMAGE_FORMAT_CUDA; /* PTX text */
    return GM_IMAGE_FORMAT_AUTO;
}

static const char *format_name(gm_image_format f)
{
    switch (f) {
    case GM_IMAGE_FORMAT_HOST:
        return "host kernel table";
    case GM_IMAGE_FORMAT_CUDA:
        return "CUDA";
    case GM_IMAGE_FORMAT_AMDGPU:
        return "AMDGPU";
    default:
        return "unknown";
    }
}

/* The format each backend runs. */
static gm_image_format backend_format(const gm_context *ctx)
{
    switch (ctx->ops->kind) {
    case GM_BACKEND_CUDA:
        return GM_IMAGE_FORMAT_CUDA;
    case GM_BACKEND_HSA:
        return GM_IMAGE_FORMAT_AMDGPU;
    default:
        return GM_IMAGE_FORMAT_HOST;
    }
}

static gm_image_kind image_kind(gm_image_format f)
{
    return f == GM_IMAGE_FORMAT_CUDA
               ? GM_IMAGE_CUDA
               : (f == GM_IMAGE_FORMAT_AMDGPU ? GM_IMAGE_AMDGPU : GM_IMAGE_HOST);
}

/* ------------------------------------------------------------ loading */

/* What a module is made from. */
typedef struct module_source {
    gm_image_format format;
    const void *image; /* the table, or the bytes */
    size_t bytes;
    void *owned; /* bytes the module takes over (gm__malloc), or NULL */
    const gm_image_set *set;
    const gm_host_table *signatures;
    const char *label;
} module_source;

/*
 * Load a module and put it on the context's list (lock held). Takes
 * src->owned in every case.
 */
static gm_status module_create(const char *fn, gm_context *ctx, const module_source *src,
                               gm_module **module_p)
{
    ctx_state *s = state_get(ctx, true);
    gm_module *m = gm__calloc(1, sizeof(*m));
    gm_status status = GM_ERR_NO_MEMORY;

    if (s == NULL || m == NULL) {
        status = gm__error(GM_ERR_NO_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    status = gm__dealloc_entry_create(fn, GM__DEALLOC_MODULE, &m->entry);
    if (status != GM_OK)
        goto fail;
    status = ctx->ops->module_load(ctx->bctx, image_kind(src->format), src->image, src->bytes,
                                   &m->bmodule);
    if (status != GM_OK) {
        status = gm__error_within(fn, status);
        goto fail_entry;
    }
    m->ctx = ctx;
    m->format = src->format;
    m->set = src->set;
    m->signatures = src->signatures;
    m->image = src->owned;
    m->entry->handle = m;
    m->entry->unload = module_unload_entry;
    snprintf(m->label, sizeof m->label, "%s", src->label);
    m->next = s->modules;
    s->modules = m;
    *module_p = m;
    return GM_OK;
fail_entry:
    gm__dealloc_entry_discard(m->entry);
fail:
    gm__free(m);
    gm__free(src->owned);
    return status;
}

/* Check the format against the backend and the host table header; fill src. */
static gm_status check_source(const char *fn, gm_context *ctx, gm_image_format format,
                              module_source *src)
{
    gm_image_format want = backend_format(ctx);

    if (format == GM_IMAGE_FORMAT_AUTO)
        format = detect_format(src->image, src->bytes);
    if (format == GM_IMAGE_FORMAT_AUTO)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: unrecognized image (not a host table, fatbin, cubin, PTX or AMDGPU "
                         "code object)",
                         fn);
    if (format < GM_IMAGE_FORMAT_HOST || format > GM_IMAGE_FORMAT_AMDGPU)
        return gm__error(GM_ERR_INVALID_ARG, "%s: unknown image format %d", fn, (int)format);
    if (format != want)
        return gm__error(GM_ERR_UNSUPPORTED, "%s: the %s backend runs %s images, not %s", fn,
                         ctx->ops->name, format_name(want), format_name(format));
    src->format = format;
    if (format == GM_IMAGE_FORMAT_HOST) {
        const gm_host_table *t = src->image;

        if (src->bytes < sizeof(*t) || t->magic != GM_HOST_TABLE_MAGIC)
            return gm__error(GM_ERR_INVALID_ARG, "%s: not a gm_host_table", fn);
        src->signatures = t;
        src->bytes = sizeof(*t);
    }
    return GM_OK;
}

/* Load from caller memory (copied) or from a buffer handed over (owned). */
static gm_status load_image(const char *fn, gm_context *ctx, gm_image_format format,
                            module_source *src, gm_module **module_p)
{
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && (src->image == NULL || module_p == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           src->image == NULL ? "image" : "module_p");
    if (status == GM_OK)
        status = check_source(fn, ctx, format, src);
    if (status == GM_OK && src->format != GM_IMAGE_FORMAT_HOST && src->owned == NULL) {
        /* One extra NUL byte keeps PTX text terminated. */
        src->owned = gm__calloc(1, src->bytes + 1);
        if (src->owned == NULL)
            status = gm__error(GM_ERR_NO_MEMORY, "%s: out of memory copying the image", fn);
        else
            memcpy(src->owned, src->image, src->bytes);
        src->image = src->owned;
    }
    if (status != GM_OK) {
        gm__free(src->owned);
        return status;
    }
    pthread_mutex_lock(&kernels_lock);
    status = module_create(fn, ctx, src, module_p);
    pthread_mutex_unlock(&kernels_lock);
    return status;
}

gm_status gm_module_load_image(gm_context *ctx, gm_image_format format, const void *image,
                               size_t bytes, gm_module **module_p)
{
    module_source src = {format, image, bytes, NULL, NULL, NULL, "image"};

    return load_image("gm_module_load_image", ctx, format, &src, module_p);
}

/* Read a whole file into a gm__malloc'ed buffer with one NUL byte after it. */
static gm_status read_file(const char *fn, const char *path, void **data_p, size_t *bytes_p)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    struct stat st;
    long size = 0;
    gm_status status = GM_OK;

    if (f == NULL)
        return gm__error(GM_ERR_NOT_FOUND, "%s: cannot open '%s'", fn, path);
    /* a directory opens too (its "size" is LONG_MAX): only regular files are images */
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        status = gm__error(GM_ERR_NOT_FOUND, "%s: cannot read '%s': not a regular file", fn, path);
        goto out;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        status = gm__error(GM_ERR_NOT_FOUND, "%s: cannot read '%s'", fn, path);
        goto out;
    }
    data = gm__malloc((size_t)size + 1u);
    if (data == NULL) {
        status = gm__error(GM_ERR_NO_MEMORY, "%s: out of memory reading '%s'", fn, path);
        goto out;
    }
    if (fread(data, 1, (size_t)size, f) != (size_t)size) {
        gm__free(data);
        status = gm__error(GM_ERR_NOT_FOUND, "%s: cannot read '%s'", fn, path);
        goto out;
    }
    data[size] = '\0';
    *data_p = data;
    *bytes_p = (size_t)size;
out:
    fclose(f);
    return status;
}

gm_status gm_module_load_file(gm_context *ctx, gm_image_format format, const char *path,
                              gm_module **module_p)
{
    static const char fn[] = "gm_module_load_file";
    module_source src = {format, NULL, 0, NULL, NULL, NULL, path};
    gm_status status = gm__check_context(fn, ctx);

    if (status == GM_OK && path == NULL)
        status = gm__error(GM_ERR_NULL_POINTER, "%s: path is NULL", fn);
    if (status == GM_OK && format == GM_IMAGE_FORMAT_HOST)
        status = gm__error(GM_ERR_INVALID_ARG,
                           "%s: host kernel tables cannot be loaded from a "
                           "file; use gm_module_load_image",
                           fn);
    if (status == GM_OK)
        status = read_file(fn, path, &src.owned, &src.bytes);
    if (status != GM_OK)
        return status;
    src.image = src.owned;
    if (detect_format(src.image, src.bytes) == GM_IMAGE_FORMAT_HOST) {
        gm__free(src.owned);
        return gm__error(GM_ERR_INVALID_ARG, "%s: '%s' is not a code image", fn, path);
    }
    return load_image(fn, ctx, format, &src, module_p);
}

void gm_module_unload(gm_module **module_p)
{
    gm_module *m = NULL;
    ctx_state *s = NULL;

    if (module_p == NULL || *module_p == NULL)
        return;
    m = *module_p;
    *module_p = NULL;
    if (m->set != NULL)
        return; /* owned by the context */
    pthread_mutex_lock(&kernels_lock);
    s = state_get(m->ctx, false);
    if (s != NULL)
        state_unlink(s, m);
    pthread_mutex_unlock(&kernels_lock);
    gm__dealloc_enqueue(m->ctx, m->entry);
}

/* ------------------------------------------------------------ kernels */

/* The kernel `name` of a host table, or NULL. */
static const gm_host_kernel *table_kernel(const gm_host_table *t, const char *name)
{
    if (t == NULL)
        return NULL;
    for (int32_t i = 0; i < t->nkernels; i++) {
        if (t->kernels[i] != NULL && t->kernels[i]->name != NULL &&
            strcmp(t->kernels[i]->name, name) == 0)
            return t->kernels[i];
    }
    return NULL;
}

const gm_image_set *gm__builtin_set_with_kernel(const char *name, const gm_host_kernel **kernel_p)
{
    for (int s = 0; s < gm__builtin_image_set_count; s++) {
        const gm_host_kernel *k = table_kernel(gm__builtin_image_sets[s]->host, name);

        if (k != NULL) {
            if (kernel_p != NULL)
                *kernel_p = k;
            return gm__builtin_image_sets[s];
        }
    }
    return NULL;
}

/* Fill the kernel's signature from the host table of its source, else from the driver. */
static void kernel_signature_from(gm_kernel *k, const gm_host_table *signatures)
{
    const gm_host_kernel *hk = table_kernel(signatures, k->name);

    if (hk != NULL) {
        k->nparams = hk->nparams;
        k->param_sizes = hk->param_sizes;
        k->param_decls = hk->param_decls;
    } else if (k->attrs.param_count >= 0 && k->attrs.param_sizes != NULL) {
        k->nparams = k->attrs.param_count;
        k->param_sizes = k->attrs.param_sizes;
        k->param_decls = k->attrs.param_decls;
    } else {
        k->nparams = -1;
    }
}

/* The module's kernel `name`, loaded on first use (lock held). */
static gm_status get_kernel_locked(const char *fn, gm_module *m, const char *name,
                                   gm_kernel **kernel_p)
{
    gm_context *ctx = m->ctx;
    gm_kernel *k = m->kernels;
    gm_status status = GM_OK;

    while (k != NULL && strcmp(k->name, name) != 0)
        k = k->next;
    if (k != NULL) {
        *kernel_p = k;
        return GM_OK;
    }
    k = gm__calloc(1, sizeof(*k));
    if (k == NULL || (k->name = gm__malloc(strlen(name) + 1)) == NULL) {
        gm__free(k);
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of memory", fn);
    }
    memcpy(k->name, name, strlen(name) + 1);
    k->attrs.param_count = -1;
    atomic_init(&k->host_pointer_checks, 16);
    status = ctx->ops->module_get_kernel(ctx->bctx, m->bmodule, name, &k->bkernel);
    if (status == GM_OK)
        status = ctx->ops->kernel_attrs(ctx->bctx, k->bkernel, &k->attrs);
    if (status != GM_OK) {
        kernels_free(k);
        if (status == GM_ERR_NOT_FOUND)
            return gm__error(status, "%s: no kernel '%s' in module '%s'", fn, name, m->label);
        return status;
    }
    kernel_signature_from(k, m->signatures);
    k->module = m;
    k->next = m->kernels;
    m->kernels = k;
    *kernel_p = k;
    return GM_OK;
}

gm_status gm_module_get_kernel(gm_module *module, const char *name, gm_kernel **kernel_p)
{
    static const char fn[] = "gm_module_get_kernel";
    gm_status status = GM_OK;

    if (module == NULL || name == NULL || kernel_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         module == NULL ? "module" : (name == NULL ? "name" : "kernel_p"));
    pthread_mutex_lock(&kernels_lock);
    status = get_kernel_locked(fn, module, name, kernel_p);
    pthread_mutex_unlock(&kernels_lock);
    return status;
}

gm_status gm_module_get_global(gm_module *module, const char *name, void **device_ptr_p,
                               size_t *bytes_p)
{
    static const char fn[] = "gm_module_get_global";
    gm_devptr ptr = 0;
    size_t bytes = 0;
    gm_status status = GM_OK;

    if (module == NULL || name == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         module == NULL ? "module" : "name");
    status =
        module->ctx->ops->module_get_global(module->ctx->bctx, module->bmodule, name, &ptr, &bytes);
    if (status == GM_ERR_NOT_FOUND)
        return gm__error(status, "%s: no global '%s' in module '%s'", fn, name, module->label);
    if (status != GM_OK)
        return status;
    if (device_ptr_p != NULL)
        *device_ptr_p = (void *)(uintptr_t)ptr;
    if (bytes_p != NULL)
        *bytes_p = bytes;
    return GM_OK;
}

/* set_constant without the backend's op: find the global and copy host to device. */
static gm_status set_constant_by_copy(const char *fn, gm_module *m, const char *name,
                                      const void *data, size_t bytes)
{
    gm_context *ctx = m->ctx;
    gm_devptr ptr = 0;
    size_t size = 0;
    gm_copy_desc d;
    gm_status status = ctx->ops->module_get_global(ctx->bctx, m->bmodule, name, &ptr, &size);

    if (status == GM_ERR_NOT_FOUND)
        return gm__error(status, "%s: no global '%s' in module '%s'", fn, name, m->label);
    if (status != GM_OK)
        return gm__error_within(fn, status);
    if (bytes > size)
        return gm__error(GM_ERR_OUT_OF_RANGE, "%s: '%s' holds %zu bytes, %zu were given", fn, name,
                         size, bytes);
    if (bytes == 0)
        return GM_OK;
    memset(&d, 0, sizeof d);
    d.dst_side = GM_COPY_DEVICE;
    d.src_side = GM_COPY_HOST;
    d.dst = ptr;
    d.src = (gm_devptr)(uintptr_t)data;
    d.width_bytes = bytes;
    d.height = d.depth = 1;
    d.dst_pitch = d.src_pitch = bytes;
    d.dst_height = d.src_height = 1;
    return gm__error_within(fn, ctx->ops->copy(ctx->bctx, &d, NULL));
}

gm_status gm_module_set_constant(gm_module *module, const char *name, const void *data,
                                 size_t bytes)
{
    static const char fn[] = "gm_module_set_constant";
    gm_context *ctx = NULL;
    gm_status status = GM_OK;

    if (module == NULL || name == NULL || (data == NULL && bytes > 0))
        return gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                         module == NULL ? "module" : (name == NULL ? "name" : "data"));
    status = gm__sync_allowed(fn, NULL); /* a synchronous copy */
    if (status != GM_OK)
        return status;
    ctx = module->ctx;
    if (ctx->ops->module_set_global != NULL &&
        ctx->ops->module_set_global != gm__unsupported_module_set_global) {
        status = ctx->ops->module_set_global(ctx->bctx, module->bmodule, name, data, bytes);
        if (status == GM_ERR_NOT_FOUND)
            return gm__error(status, "%s: no global '%s' in module '%s'", fn, name, module->label);
        if (status == GM_ERR_OUT_OF_RANGE) {
            char detail[256];

            snprintf(detail, sizeof detail, "%s", gm_last_error_message());
            return gm__error(status, "%s: %s", fn, detail);
        }
        return gm__error_within(fn, status);
    }
    return set_constant_by_copy(fn, module, name, data, bytes);
}

gm_module *gm_kernel_module(const gm_kernel *kernel)
{
    return kernel == NULL ? NULL : kernel->module;
}

gm_status gm_kernel_get_info(const gm_kernel *kernel, gm_kernel_info *info_p)
{
    gm_device_info dev;
    gm_status status = GM_OK;

    if (kernel == NULL || info_p == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "gm_kernel_get_info: %s is NULL",
                         kernel == NULL ? "kernel" : "info_p");
    status = gm__kernels_device_info(kernel->module->ctx, &dev);
    if (status != GM_OK)
        return status;
    memset(info_p, 0, sizeof(*info_p));
    info_p->name = kernel->name;
    info_p->nparams = kernel->nparams;
    info_p->static_shared_bytes = kernel->attrs.static_shared_bytes;
    info_p->private_bytes = kernel->attrs.private_bytes;
    info_p->max_threads_per_block = kernel->attrs.max_threads_per_block > 0
                                        ? kernel->attrs.max_threads_per_block
                                        : dev.max_threads_per_block;
    info_p->format = kernel->module->format;
    return GM_OK;
}

size_t gm_kernel_signature(const gm_kernel *kernel, char *buf, size_t size)
{
    size_t len = 0;
    char dummy[1];

    if (buf == NULL || size == 0) {
        buf = dummy;
        size = 1;
    }
    buf[0] = '\0';
    if (kernel == NULL)
        return 0;
#define GM__SIG_APPEND(...)                                                                 \
    do {                                                                                    \
        int n_ = snprintf(buf + (len < size ? len : size - 1), len < size ? size - len : 1, \
                          __VA_ARGS__);                                                     \
        len += n_ > 0 ? (size_t)n_ : 0;                                                     \
    } while (0)
    GM__SIG_APPEND("%s(", kernel->name);
    if (kernel->nparams < 0)
        GM__SIG_APPEND("...");
    for (int32_t i = 0; i < kernel->nparams; i++) {
        if (kernel->param_decls != NULL)
            GM__SIG_APPEND("%s%s", i > 0 ? ", " : "", kernel->param_decls[i]);
        else
            GM__SIG_APPEND("%s%zu bytes", i > 0 ? ", " : "", kernel->param_sizes[i]);
    }
    GM__SIG_APPEND(")");
#undef GM__SIG_APPEND
    return len;
}

/* ----------------------------------------------------------- registry */

/*
 * The checks of a set that need no backend. Each image's own (the host
 * table's ABI included: its CUDA or AMDGPU images may serve a GPU context
 * all the same) are made when a context loads it.
 */
static gm_status check_set(const char *fn, const gm_image_set *set)
{
    const char *name = set->name != NULL ? set->name : "(unnamed)";
    const gm_host_table *t = set->host;

    if (t != NULL && t->magic != GM_HOST_TABLE_MAGIC)
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: set '%s': its host table is not one (magic 0x%x, expected 0x%x)", fn,
                         name, (unsigned)t->magic, (unsigned)GM_HOST_TABLE_MAGIC);
    if (t != NULL &&
        (t->nkernels < 0 || t->nglobals < 0 || (t->nkernels > 0 && t->kernels == NULL) ||
         (t->nglobals > 0 && t->globals == NULL)))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: set '%s': its host table's kernel or global list is malformed", fn,
                         name);
    for (int32_t i = 0; t != NULL && i < t->nkernels; i++) { /* the registry finds by name */
        if (t->kernels[i] != NULL && t->kernels[i]->name == NULL)
            return gm__error(GM_ERR_INVALID_ARG,
                             "%s: set '%s': kernel %d of its host table has a NULL name", fn, name,
                             (int)i);
    }
    if (set->amdgpu_count < 0 || (set->amdgpu_count > 0 && set->amdgpu == NULL) ||
        (set->cuda == NULL) != (set->cuda_bytes == 0))
        return gm__error(GM_ERR_INVALID_ARG,
                         "%s: set '%s': amdgpu_count %d with amdgpu %s, or cuda %s with "
                         "cuda_bytes %zu",
                         fn, name, (int)set->amdgpu_count, set->amdgpu != NULL ? "set" : "NULL",
                         set->cuda != NULL ? "set" : "NULL", set->cuda_bytes);
    return GM_OK;
}

gm_status gm_register_image_set(const gm_image_set *set)
{
    static const char fn[] = "gm_register_image_set";
    gm_status status = GM_OK;

    if (set == NULL)
        return gm__error(GM_ERR_NULL_POINTER, "%s: set is NULL", fn);
    status = check_set(fn, set);
    if (status != GM_OK)
        return status;
    pthread_mutex_lock(&kernels_lock);
    for (int i = 0; i < nregistered; i++) {
        if (registered[i] == set)
            goto out;
    }
    if (nregistered == MAX_REGISTERED_SETS) {
        status = gm__error(GM_ERR_PERMISSION, "gm_register_image_set: at most %d sets",
                           MAX_REGISTERED_SETS);
        goto out;
    }
    registered[nregistered++] = set;
out:
    pthread_mutex_unlock(&kernels_lock);
    return status;
}

/* Unlist the set; the contexts' modules loaded from it stay theirs, detached from it. */
gm_status gm_unregister_image_set(const gm_image_set *set)
{
    gm_status status = GM_ERR_NOT_FOUND;

    pthread_mutex_lock(&kernels_lock);
    for (int i = 0; i < nregistered; i++) {
        if (registered[i] == set) {
            memmove(&registered[i], &registered[i + 1],
                    (size_t)(nregistered - i - 1) * sizeof(registered[0]));
            nregistered--;
            status = GM_OK;
            break;
        }
    }
    for (ctx_state *st = states; st != NULL && status == GM_OK; st = st->next) {
        for (gm_module *m = st->modules; m != NULL; m = m->next) {
            if (m->set == set)
                m->set = &unregistered_set;
        }
    }
    pthread_mutex_unlock(&kernels_lock);
    if (status != GM_OK)
        return gm__error(status, "gm_unregister_image_set: the set is not registered");
    return GM_OK;
}

/* Whether the set has an image for the backend. */
static bool set_has_format(const gm_image_set *set, gm_image_format f)
{
    switch (f) {
    case GM_IMAGE_FORMAT_HOST:
        return set->host != NULL;
    case GM_IMAGE_FORMAT_CUDA:
        return set->cuda != NULL && set->cuda_bytes > 0;
    default:
        return set->amdgpu != NULL && set->amdgpu_count > 0;
    }
}

/* Whether an AMDGPU image's arch suits the device (named like "gfx90a" or "gfx90a:sramecc+"). */
static bool arch_matches(const char *arch, const char *device)
{
    size_t n = strlen(arch);

    return arch[0] != '\0' && strncmp(device, arch, n) == 0 &&
           (device[n] == '\0' || device[n] == ':');
}

/* Load one of the set's AMDGPU objects: the device's arch first, then any the driver takes. */
static gm_status load_amdgpu_set(const char *fn, gm_context *ctx, const gm_image_set *set,
                                 const gm_device_info *info, gm_module **module_p)
{
    gm_status status = GM_ERR_NOT_FOUND;
    char detail[GM__ERROR_MESSAGE_MAX] = "";

    for (int pass = 0; pass < 2 && status != GM_OK; pass++) {
        for (int32_t i = 0; i < set->amdgpu_count && status != GM_OK; i++) {
            const gm_amdgpu_image *img = &set->amdgpu[i];
            module_source src = {
                GM_IMAGE_FORMAT_AMDGPU, img->data, img->bytes, NULL, set, set->host, set->name};

            if (img->data == NULL || arch_matches(img->arch, info->name) != (pass == 0))
                continue;
            status = module_create(fn, ctx, &src, module_p);
            /* The runtime refusing the object (another ISA: INVALID_ARG or UNSUPPORTED) means
             * try the next; anything else (memory, a failed context) is the answer. */
            if (status != GM_OK && status != GM_ERR_INVALID_ARG && status != GM_ERR_UNSUPPORTED &&
                status != GM_ERR_NOT_FOUND)
                return status;
            if (status != GM_OK)
                snprintf(detail, sizeof(detail), "; the last refusal: %s", gm_last_error_message());
        }
    }
    /* None of the objects is for this GPU (the driver refuses another ISA): not found. */
    if (status != GM_OK)
        return gm__error(GM_ERR_NOT_FOUND,
                         "%s: no AMDGPU object of '%s' loads on %s (the set has %d%s)", fn,
                         set->name, info->name, (int)set->amdgpu_count, detail);
    return status;
}

/* The context's module of a registry set, loaded on first use (lock held). */
static gm_status set_module(const char *fn, gm_context *ctx, const gm_image_set *set,
                            gm_module **module_p)
{
    ctx_state *s = state_get(ctx, true);
    gm_image_format f = backend_format(ctx);
    module_source src = {f, NULL, 0, NULL, set, set->host, set->name};

    if (s == NULL)
        return gm__error(GM_ERR_NO_MEMORY, "%s: out of memory", fn);
    for (gm_module *m = s->modules; m != NULL; m = m->next) {
        if (m->set == set) {
            *module_p = m;
            return GM_OK;
        }
    }
    if (f == GM_IMAGE_FORMAT_HOST) {
        src.image = set->host;
        src.bytes = sizeof(*set->host);
    } else if (f == GM_IMAGE_FORMAT_CUDA) {
        src.image = set->cuda;
        src.bytes = set->cuda_bytes;
    } else {
        gm_status status = state_info(ctx, s);

        if (status != GM_OK)
            return status;
        return load_amdgpu_set(fn, ctx, set, &s->info, module_p);
    }
    return module_create(fn, ctx, &src, module_p);
}

/*
 * The kernel `name` of the set (lock held); GM_ERR_NOT_FOUND when the set
 * lacks it. *unloadable_p is set when the set has it but none of its images
 * loads on the device (the message says why).
 */
static gm_status find_in_set(const char *fn, gm_context *ctx, const gm_image_set *set,
                             const char *name, gm_kernel **kernel_p, bool *unloadable_p)
{
    gm_module *m = NULL;
    gm_status status = GM_OK;

    if (!set_has_format(set, backend_format(ctx)))
        return GM_ERR_NOT_FOUND;
    if (set->host != NULL && table_kernel(set->host, name) == NULL)
        return GM_ERR_NOT_FOUND;
    status = set_module(fn, ctx, set, &m);
    *unloadable_p = status == GM_ERR_NOT_FOUND;
    if (status == GM_OK)
        status = get_kernel_locked(fn, m, name, kernel_p);
    return status;
}

gm_status gm_kernel_find(gm_context *ctx, const char *name, gm_kernel **kernel_p)
{
    static const char fn[] = "gm_kernel_find";
    gm_status status = gm__check_context(fn, ctx);
    gm_status first_error = GM_OK;
    char unloadable[GM__ERROR_MESSAGE_MAX] = "";
    gm__saved_error saved, first;
    int n = 0;

    if (status == GM_OK && (name == NULL || kernel_p == NULL))
        status = gm__error(GM_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                           name == NULL ? "name" : "kernel_p");
    if (status != GM_OK)
        return status;
    gm__error_save(&saved); /* a set tried before the one that has it leaves no error */
    pthread_mutex_lock(&kernels_lock);
    n = nregistered + gm__builtin_image_set_count;
    status = GM_ERR_NOT_FOUND;
    for (int i = 0; i < n && status != GM_OK; i++) {
        const gm_image_set *set = i < nregistered ? registered[nregistered - 1 - i]
                                                  : gm__builtin_image_sets[i - nregistered];
        bool no_image = false;

        status = find_in_set(fn, ctx, set, name, kernel_p, &no_image);
        if (status != GM_OK && status != GM_ERR_NOT_FOUND && first_error == GM_OK) {
            first_error = status;
            gm__error_save(&first); /* a later set's "not found" must not replace its message */
        }
        if (no_image && unloadable[0] == '\0')
            snprintf(unloadable, sizeof(unloadable), "%s", gm_last_error_message());
    }
    pthread_mutex_unlock(&kernels_lock);
    if (status == GM_OK) {
        gm__error_restore(&saved);
        return GM_OK;
    }
    if (first_error != GM_OK) {
        gm__error_restore(&first);
        return first_error;
    }
    if (unloadable[0] != '\0') /* the kernel exists, built for other GPUs */
        return gm__error(GM_ERR_NOT_FOUND, "%s (looking for kernel '%s')", unloadable, name);
    return gm__error(GM_ERR_NOT_FOUND,
                     "%s: no kernel '%s' for the %s backend in the %d registered and %d "
                     "built-in image sets (the library's built-in kernels for this backend: %s; "
                     "a program's own kernels are found once gm_register_image_set has "
                     "registered their set)",
                     fn, name, ctx->ops->name, n - gm__builtin_image_set_count,
                     gm__builtin_image_set_count,
                     gm__builtin_image_set_count > 0 &&
                             set_has_format(gm__builtin_image_sets[0], backend_format(ctx))
                         ? "present"
                         : "not built");
}
