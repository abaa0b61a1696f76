/*
 * Reading AMDGPU code objects without the runtime: pick the code object for
 * an ISA out of a clang offload bundle, and parse the kernels' argument
 * layouts from the NT_AMDGPU_METADATA note (MessagePack, code objects v3-v5).
 *
 * The HSA runtime loads the code and gives kernel descriptors, segment sizes
 * and the kernarg size through its symbols, but not where each argument sits
 * nor which hidden arguments (code object v5: block counts, group sizes,
 * remainders, dynamic LDS size...) the kernel expects. Those come from here.
 * Pure functions over bytes: every offset is bounds-checked, since images are
 * input.
 */
#ifndef GPUMEM_SRC_HSA_HSA_CODEOBJ_H
#define GPUMEM_SRC_HSA_HSA_CODEOBJ_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#define GM_HSA_KERNEL_NAME_MAX 256

/* Argument value kinds: X(ENUM, "metadata .value_kind"). Explicit kinds first. */
#define GM_HSA_ARG_KINDS(X)                                     \
    X(BY_VALUE, "by_value")                                     \
    X(GLOBAL_BUFFER, "global_buffer")                           \
    X(DYNAMIC_SHARED_POINTER, "dynamic_shared_pointer")         \
    X(IMAGE, "image")                                           \
    X(SAMPLER, "sampler")                                       \
    X(PIPE, "pipe")                                             \
    X(QUEUE, "queue")                                           \
    X(HIDDEN_GLOBAL_OFFSET_X, "hidden_global_offset_x")         \
    X(HIDDEN_GLOBAL_OFFSET_Y, "hidden_global_offset_y")         \
    X(HIDDEN_GLOBAL_OFFSET_Z, "hidden_global_offset_z")         \
    X(HIDDEN_NONE, "hidden_none")                               \
    X(HIDDEN_PRINTF_BUFFER, "hidden_printf_buffer")             \
    X(HIDDEN_HOSTCALL_BUFFER, "hidden_hostcall_buffer")         \
    X(HIDDEN_DEFAULT_QUEUE, "hidden_default_queue")             \
    X(HIDDEN_COMPLETION_ACTION, "hidden_completion_action")     \
    X(HIDDEN_MULTIGRID_SYNC_ARG, "hidden_multigrid_sync_arg")   \
    X(HIDDEN_HEAP_V1, "hidden_heap_v1")                         \
    X(HIDDEN_BLOCK_COUNT_X, "hidden_block_count_x")             \
    X(HIDDEN_BLOCK_COUNT_Y, "hidden_block_count_y")             \
    X(HIDDEN_BLOCK_COUNT_Z, "hidden_block_count_z")             \
    X(HIDDEN_GROUP_SIZE_X, "hidden_group_size_x")               \
    X(HIDDEN_GROUP_SIZE_Y, "hidden_group_size_y")               \
    X(HIDDEN_GROUP_SIZE_Z, "hidden_group_size_z")               \
    X(HIDDEN_REMAINDER_X, "hidden_remainder_x")                 \
    X(HIDDEN_REMAINDER_Y, "hidden_remainder_y")                 \
    X(HIDDEN_REMAINDER_Z, "hidden_remainder_z")                 \
    X(HIDDEN_GRID_DIMS, "hidden_grid_dims")                     \
    X(HIDDEN_DYNAMIC_LDS_SIZE, "hidden_dynamic_lds_size")       \
    X(HIDDEN_QUEUE_PTR, "hidden_queue_ptr")                     \
    X(HIDDEN_PRIVATE_BASE, "hidden_private_base")               \
    X(HIDDEN_SHARED_BASE, "hidden_shared_base")                 \
    X(HIDDEN_TOOL_CORRELATION_ID, "hidden_tool_correlation_id") \
    X(HIDDEN_UNKNOWN, "hidden_")

typedef enum gm__hsa_arg_kind {
#define GM__HSA_ARG_ENUM(name, text) GM_HSA_ARG_##name,
    GM_HSA_ARG_KINDS(GM__HSA_ARG_ENUM)
#undef GM__HSA_ARG_ENUM
        GM_HSA_ARG_KIND_COUNT
} gm__hsa_arg_kind;

/* Whether a kind is an argument the caller passes (not filled by the launcher). */
#define GM_HSA_ARG_IS_EXPLICIT(kind) ((kind) <= GM_HSA_ARG_QUEUE)

/* One kernel argument as the metadata lays it out. */
typedef struct gm__hsa_arg {
    uint32_t offset;
    uint32_t size;
    gm__hsa_arg_kind kind;
} gm__hsa_arg;

/* One kernel's metadata (amdhsa.kernels[i]). */
typedef struct gm__hsa_kernel_meta {
    char name[GM_HSA_KERNEL_NAME_MAX];   /* .name */
    char symbol[GM_HSA_KERNEL_NAME_MAX]; /* .symbol ("name.kd") */
    uint32_t kernarg_size;               /* .kernarg_segment_size */
    uint32_t kernarg_align;              /* .kernarg_segment_align */
    uint32_t group_fixed;                /* .group_segment_fixed_size */
    uint32_t private_fixed;              /* .private_segment_fixed_size */
    uint32_t max_flat_workgroup_size;    /* .max_flat_workgroup_size (0: absent) */
    uint32_t wavefront_size;             /* .wavefront_size (0: absent) */
    uint32_t nargs;
    uint32_t nexplicit; /* arguments the caller passes */
    gm__hsa_arg *args;  /* nargs entries, gm__malloc'ed */
} gm__hsa_kernel_meta;

/* A code object's metadata. */
typedef struct gm__hsa_codeobj_meta {
    uint32_t abi_version; /* code object version: 3, 4 or 5 (from the ELF header) */
    char target[128];     /* amdhsa.target */
    size_t nkernels;
    gm__hsa_kernel_meta *kernels; /* gm__malloc'ed */
} gm__hsa_codeobj_meta;

/*
 * Find the AMDGPU ELF in `image`: the image itself when it is an ELF, or the
 * entry of a clang offload bundle ("__CLANG_OFFLOAD_BUNDLE__") whose target
 * id matches `isa_name` (an HSA ISA name such as
 * "amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-": same processor, and each
 * feature the entry names has the same sign in the ISA name when the ISA
 * names it). GM_ERR_INVALID_ARG for other images, GM_ERR_NOT_FOUND listing
 * the bundle's targets when none matches.
 */
gm_status gm__hsa_codeobj_select(const void *image, size_t bytes, const char *isa_name,
                                 const void **elf_p, size_t *elf_bytes_p);

/*
 * Parse the metadata of an AMDGPU ELF. An ELF without an NT_AMDGPU_METADATA
 * note (code object v2) gives GM_OK with no kernels. GM_ERR_INVALID_ARG for
 * malformed input, GM_ERR_NO_MEMORY. *meta is zeroed first and owns its
 * arrays: release with gm__hsa_codeobj_meta_free().
 */
gm_status gm__hsa_codeobj_parse(const void *elf, size_t bytes, gm__hsa_codeobj_meta *meta);

void gm__hsa_codeobj_meta_free(gm__hsa_codeobj_meta *meta);

/* The metadata of kernel `name` (.name or .symbol), or NULL. */
const gm__hsa_kernel_meta *gm__hsa_codeobj_find(const gm__hsa_codeobj_meta *meta, const char *name);

/* The .value_kind spelling of a kind. */
const char *gm__hsa_arg_kind_name(gm__hsa_arg_kind kind);

#endif /* GPUMEM_SRC_HSA_HSA_CODEOBJ_H */
