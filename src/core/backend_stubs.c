/*
 * Shared stubs for OPTIONAL backend ops. A backend without an op points its
 * slot here (never NULL); each stub records "<op> is not supported by this
 * backend" and returns GM_ERR_UNSUPPORTED without touching its outputs.
 */
#include "backend.h"

/* Record the standard "not supported" detail for op `op`. */
static gm_status unsupported(const char *op)
{
    return gm__error(GM_ERR_UNSUPPORTED, "%s is not supported by this backend", op);
}

/* mem_free_batch: none freed here; the queue frees each entry with mem_free. */
size_t gm__unsupported_mem_free_batch(gm_backend_ctx *bctx, const gm_devptr *ptrs, size_t n)
{
    (void)bctx;
    (void)ptrs;
    (void)n;
    return 0;
}

/* managed_alloc: no unified memory. */
gm_status gm__unsupported_managed_alloc(gm_backend_ctx *bctx, size_t bytes, gm_devptr *ptr_p)
{
    return unsupported("managed_alloc");
}

/* pointer_kind: the backend cannot classify addresses. */
gm_status gm__unsupported_pointer_kind(gm_backend_ctx *bctx, const void *ptr, int *kind_p)
{
    return unsupported("pointer_kind");
}

/* copy_strided: the core decomposes into pitched copies instead. */
gm_status gm__unsupported_copy_strided(gm_backend_ctx *bctx, const gm_ndview *dst,
                                       const gm_ndview *src, gm_backend_stream *stream)
{
    return unsupported("copy_strided");
}

/* copy_views: every copy is planned by the core (no error: nothing failed). */
bool gm__unsupported_copy_views(gm_backend_ctx *bctx, const gm_ndview *dst, const gm_ndview *src,
                                gm_status *status_p)
{
    (void)bctx;
    (void)dst;
    (void)src;
    (void)status_p;
    return false;
}

/* ipc_get_handle: no inter-process memory handles. */
gm_status gm__unsupported_ipc_get_handle(gm_backend_ctx *bctx, gm_devptr ptr, void *handle,
                                         size_t handle_bytes)
{
    return unsupported("ipc_get_handle");
}

/* ipc_open: no inter-process memory handles. */
gm_status gm__unsupported_ipc_open(gm_backend_ctx *bctx, const void *handle, size_t handle_bytes,
                                   gm_devptr *ptr_p)
{
    return unsupported("ipc_open");
}

/* ipc_close: no inter-process memory handles. */
gm_status gm__unsupported_ipc_close(gm_backend_ctx *bctx, gm_devptr ptr)
{
    return unsupported("ipc_close");
}
