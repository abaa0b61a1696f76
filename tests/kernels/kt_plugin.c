/*
 * A plugin's kernels, built as a shared module that test_plugin_unload.c
 * dlopens, loads with gm_module_load_image, unloads and dlcloses. It only
 * uses the headers: the simulator's entry points come from the library the
 * program linked.
 */
#include <gpumem/kernel.h>

/* out[g] = seed + the global index of the block's next thread, read after a barrier. */
GM_KERNEL(kt_plugin_shift, (int32_t *, out), (int32_t, seed))
{
    GM_SHARED_ARRAY(int32_t, s, 1024);
    uint32_t t = gm_thread_idx_x(), bd = gm_block_dim_x();
    int64_t g = gm_global_id_x();

    s[t] = seed + (int32_t)g;
    gm_syncthreads();
    out[g] = s[(t + 1u) % bd];
}

/* out[g] = seed + g, no barrier (one fiber runs the whole block). */
GM_KERNEL(kt_plugin_fill, (int32_t *, out), (int32_t, seed))
{
    int64_t g = gm_global_id_x();

    out[g] = seed + (int32_t)g;
}

GM_HOST_TABLE(kt_plugin_table, GM_HOST_KERNELS(kt_plugin_shift, kt_plugin_fill),
              GM_HOST_NO_GLOBALS);
