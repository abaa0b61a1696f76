/**
 * @file gpumem/dlpack.h
 * @brief DLPack import and export of gm_array, with gpumem's own
 *        ABI-compatible definitions of the DLPack 1.0 structures.
 *
 * If the real <dlpack/dlpack.h> (any 1.x) was included first, its
 * definitions are used and none are made here. Otherwise this header defines
 * the same types, enumerators and macros (DLPACK_MAJOR_VERSION 1,
 * DLPACK_MINOR_VERSION 0) and defines DLPACK_DLPACK_H_, so that a later
 * include of the real header is skipped: include the real one first when
 * you need what newer DLPack minor versions add.
 *
 * Memory kinds and DLDevice (export; import maps back):
 *   host simulator backend: every kind is kDLCPU (device 0): its device
 *       memory is host memory a CPU consumer can read. Importing kDLCPU on
 *       the simulator asks it which kind of memory the pointer is in.
 *   CUDA: device kDLCUDA (device id), pinned and mapped kDLCUDAHost,
 *       managed kDLCUDAManaged, host kDLCPU.
 *   HSA: device kDLROCM (device id), pinned and mapped kDLROCMHost,
 *       host kDLCPU.
 * Import also accepts kDLCUDAHost / kDLROCMHost on the simulator (as pinned
 * host memory). Other device types, or a GPU type of another backend, are
 * GM_ERR_UNSUPPORTED; a kDLCUDA / kDLROCM device id other than the
 * context's is GM_ERR_WRONG_CONTEXT (pinned and managed memory carry
 * device id 0 whatever the context's device, as DLPack says).
 */
#ifndef GPUMEM_DLPACK_H
#define GPUMEM_DLPACK_H

#include <stddef.h>
#include <stdint.h>

#include "export.h"
#include "runtime.h"
#include "status.h"

#if defined(DLPACK_DLPACK_H_) && !defined(DLPACK_MAJOR_VERSION)
#error "gpumem/dlpack.h needs DLPack 1.x; a pre-1.0 dlpack.h was included first"
#elif !defined(DLPACK_MAJOR_VERSION)
#define DLPACK_DLPACK_H_

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

/** The DLPack ABI these definitions follow. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

/** A DLPack version: a different major means a different layout. */
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/** Where a tensor's memory is (the enumerator values are DLPack's). */
typedef enum {
    kDLCPU = 1,          /**< ordinary host memory */
    kDLCUDA = 2,         /**< CUDA device memory */
    kDLCUDAHost = 3,     /**< CUDA page-locked host memory */
    kDLOpenCL = 4,       /**< OpenCL */
    kDLVulkan = 7,       /**< Vulkan buffer */
    kDLMetal = 8,        /**< Metal */
    kDLVPI = 9,          /**< Verilog simulator buffer */
    kDLROCM = 10,        /**< ROCm device memory */
    kDLROCMHost = 11,    /**< ROCm page-locked host memory */
    kDLExtDev = 12,      /**< reserved extension device */
    kDLCUDAManaged = 13, /**< CUDA managed memory */
    kDLOneAPI = 14,      /**< oneAPI unified shared memory */
    kDLWebGPU = 15,      /**< WebGPU */
    kDLHexagon = 16      /**< Hexagon DSP */
} DLDeviceType;

/** A device: type and ordinal (0 for host, pinned and managed memory). */
typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

/** Type codes of DLDataType.code (gm_dtype_code uses the same values). */
typedef enum {
    kDLInt = 0U,
    kDLUInt = 1U,
    kDLFloat = 2U,
    kDLOpaqueHandle = 3U,
    kDLBfloat = 4U,
    kDLComplex = 5U,
    kDLBool = 6U
} DLDataTypeCode;

/** An element type; same layout as gm_dtype. */
typedef struct {
    uint8_t code;   /**< a DLDataTypeCode */
    uint8_t bits;   /**< bits per lane */
    uint16_t lanes; /**< lanes per element */
} DLDataType;

/** A strided tensor that owns nothing. */
typedef struct {
    void *data;           /**< base address of the memory */
    DLDevice device;      /**< where data lives */
    int32_t ndim;         /**< dimensions */
    DLDataType dtype;     /**< element type */
    int64_t *shape;       /**< ndim extents */
    int64_t *strides;     /**< ndim strides in elements, or NULL: compact row-major */
    uint64_t byte_offset; /**< bytes from data to the first element */
} DLTensor;

/** The unversioned (legacy, pre-1.0) managed tensor. */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;                             /**< the producer's context */
    void (*deleter)(struct DLManagedTensor *self); /**< frees self; may be NULL */
} DLManagedTensor;

/** DLManagedTensorVersioned.flags: the consumer must not write the data. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/** DLManagedTensorVersioned.flags: the producer made a copy the consumer owns alone. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

/** The versioned managed tensor (DLPack 1.x). */
struct DLManagedTensorVersioned {
    DLPackVersion version;                                  /**< of the producer's DLPack */
    void *manager_ctx;                                      /**< the producer's context */
    void (*deleter)(struct DLManagedTensorVersioned *self); /**< frees self; may be NULL */
    uint64_t flags;                                         /**< DLPACK_FLAG_BITMASK_* */
    DLTensor dl_tensor;
};

#ifdef __cplusplus
}
#endif

#elif DLPACK_MAJOR_VERSION != 1
#error "gpumem/dlpack.h needs DLPack 1.x; an incompatible dlpack.h was included first"
#endif /* DLPACK_MAJOR_VERSION */

#ifdef __cplusplus
extern "C" {
#endif

/** The versioned tensor under its plain name (the real header declares only the struct). */
typedef struct DLManagedTensorVersioned DLManagedTensorVersioned;

/**
 * @brief Export an array as a DLPack tensor without copying (the producer
 *        side of __dlpack__).
 *
 * The tensor holds a reference to the array (gm_array_retain), so the memory
 * stays valid until the consumer calls tensor->deleter(tensor), which
 * releases that reference and frees the tensor (allocated with gpumem's
 * bookkeeping allocator); the deleter may be called from any thread, and
 * must be called exactly once. The tensor may outlive the array's context:
 * gm_context_destroy() detaches every export still alive (logging a warning,
 * and counting their arrays among the live arrays it frees), after which the
 * tensor's data pointer dangles but its deleter stays safe to call, from any
 * thread, even while the context is being destroyed: it then frees only the
 * tensor. data is the buffer's start and byte_offset
 * the first element's offset in it (0 and NULL data for size-0 arrays);
 * strides are always given, in elements; flags are 0 (writable, not a copy);
 * version is {1, 0}.
 * @param array    the array (the caller keeps its own reference).
 * @param tensor_p receives the tensor.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_INVALID_ARG (a byte stride that
 *         is not a multiple of the item size); GM_ERR_NO_MEMORY.
 */
GM_API gm_status gm_array_to_dlpack(gm_array *array, DLManagedTensorVersioned **tensor_p);

/**
 * @brief Import a DLPack tensor without copying (the consumer side of
 *        from_dlpack), through gm_array_from_foreign().
 *
 * On success the array owns the tensor: tensor->deleter(tensor) (if not
 * NULL) is called when the last array viewing it is released (at once, or at
 * the next flush when that happens inside a stream callback). strides NULL
 * means compact row-major; strides are converted from elements to bytes;
 * byte_offset is honoured. Read-only tensors (DLPACK_FLAG_BITMASK_READ_ONLY)
 * are rejected: gm_array has no read-only mode, and every gm_array may be
 * written by copies, fills and kernels.
 * @param ctx     the context whose device the tensor must be on.
 * @param tensor  the tensor; ownership passes only on success.
 * @param array_p receives the array.
 * @return GM_OK; GM_ERR_NULL_POINTER; GM_ERR_VERSION_MISMATCH (major version
 *         not 1: the deleter is not called, the caller must call it);
 *         GM_ERR_PERMISSION (read-only); GM_ERR_DTYPE (a type gpumem lacks);
 *         GM_ERR_UNSUPPORTED / GM_ERR_WRONG_CONTEXT (device, see above);
 *         GM_ERR_OVERFLOW; GM_ERR_TOO_MANY_DIMS; GM_ERR_INVALID_ARG;
 *         GM_ERR_NO_MEMORY. On failure the caller keeps the tensor.
 */
GM_API gm_status gm_array_from_dlpack(gm_context *ctx, DLManagedTensorVersioned *tensor,
                                      gm_array **array_p);

/**
 * @brief gm_array_from_dlpack() for the legacy unversioned DLManagedTensor
 *        (no version, no flags: always writable).
 */
GM_API gm_status gm_array_from_dlpack_legacy(gm_context *ctx, DLManagedTensor *tensor,
                                             gm_array **array_p);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_DLPACK_H */
