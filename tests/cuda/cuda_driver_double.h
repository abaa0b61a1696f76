/*
 * A test double of the CUDA driver (libcuda.so.1), built as a shared
 * library and loaded by the CUDA backend through GM_CUDA_DRIVER_PATH in
 * place of the real driver. It implements every entry point of
 * src/cuda/cuda_driver.h on host memory (device memory is malloc'd; with
 * unified addressing a device address is its host address, and so is the
 * device address of cuMemHostAlloc'd memory, but registered memory and
 * write-combined memory have a distinct device address, as cuda.h's
 * "Disjoint Addressing" describes: see gm_cuda_double_device_address) and checks
 * what the real driver requires of its arguments: a current context, live
 * handles, flags, device ranges inside allocations, pitches of 2-D/3-D
 * copies, reserved fields, aligned memsets, kernel parameter arrays (read
 * with the sizes the PTX declares), dynamic shared memory limits. A
 * requirement broken is a "violation": the call fails as the driver would
 * and the violation is counted for the tests to assert on.
 *
 * Modules are PTX text, ELF cubins, or fatbins holding either (nvcc's
 * container; the first uncompressed PTX entry is read, else the first
 * uncompressed cubin; compressed entries are not). The double reads each
 * kernel's parameter sizes and offsets (PTX .entry signatures, or the
 * cubin's .nv.info KPARAM_INFO attributes), its static shared memory and the
 * module's __constant__ / __device__ variables. Launches run on the host:
 * kernels named like one of the library's built-in kernels run on the
 * kernel simulator (src/host/sim) with that host-compiled kernel, after a
 * check that both agree on the parameters, with the launch's grid, block,
 * dynamic shared memory and the values read through kernelParams; pointer
 * parameters must be NULL or memory the device reaches at that address (a
 * distinct device address of mapped host memory is translated for the
 * simulator; one in a by-value parameter is a violation), and the module's
 * constant arrays are copied into the simulator's before each run (so each
 * module keeps its own). gm_test_fill_u32 and gm_test_scale_f32 (see
 * tests/cuda/test_kernels.h) run from hand-written host code; any other
 * kernel is CUDA_ERROR_NOT_SUPPORTED at launch. All work is synchronous:
 * async calls complete before they return and callbacks run inside
 * cuStreamAddCallback (given CUDA_SUCCESS, or what
 * gm_cuda_double_set_callback_status set, as after a context error).
 *
 * The test program links this library to reach the control functions
 * below; the backend's dlopen of the same file gets the same instance.
 * Not thread-safe: calls must not overlap (tests join their threads).
 */
#ifndef GM_CUDA_DRIVER_DOUBLE_H
#define GM_CUDA_DRIVER_DOUBLE_H

#include <stddef.h>

#include <cuda.h>

/* Forget everything (objects are freed) and restore the defaults below. */
void gm_cuda_double_reset(void);

/* Number of devices cuDeviceGetCount reports (default 1, at most 4). */
void gm_cuda_double_set_device_count(int count);

/* Device memory (default 64 MiB): cuMemAlloc beyond it is CUDA_ERROR_OUT_OF_MEMORY. */
void gm_cuda_double_set_device_memory(size_t bytes);

/* Page-locked host memory cuMemHostAlloc may hand out (default 64 MiB). */
void gm_cuda_double_set_pinned_memory(size_t bytes);

/* Device-to-device cuMemcpy2D/3D(Async) with a pitch not a multiple of `align` fail with
 * CUDA_ERROR_INVALID_VALUE, as the real driver may for pitches not from cuMemAllocPitch
 * (reset: 0, any pitch). */
void gm_cuda_double_set_dtod_pitch_align(size_t align);

/* CU_DEVICE_ATTRIBUTE_MAX_PITCH (default 2^31 - 1); copies with larger pitches fail. */
void gm_cuda_double_set_max_pitch(int pitch);

/*
 * Fault injection: the n-th call (1-based, counted from now) of the entry
 * point `symbol` (its exported name, e.g. "cuMemAlloc_v2"; NULL for any
 * entry point) returns `result` without doing anything. One fault at a
 * time; cuGetErrorName / cuGetErrorString are never counted.
 */
void gm_cuda_double_fail(const char *symbol, long n, CUresult result);

/*
 * A sticky error (e.g. CUDA_ERROR_ILLEGAL_ADDRESS after a kernel fault):
 * from now on every entry point that works in a context returns `result`
 * (frees, destroys and synchronizations included), as the real driver does
 * until the process ends; device queries and the context stack
 * (cuCtxGet/Set/Push/PopCurrent, the primary context's retain and release)
 * still work. CUDA_SUCCESS (and a reset) turns it off.
 */
void gm_cuda_double_set_sticky(CUresult result);

/* The status cuStreamAddCallback's functions receive from now on (reset: CUDA_SUCCESS). */
void gm_cuda_double_set_callback_status(CUresult status);

/*
 * Hold (1) the functions of later cuStreamAddCallback calls instead of
 * running them inside the call, as a driver thread runs them later; 0 runs
 * them inside again (reset: 0). gm_cuda_double_run_held_callbacks runs the
 * held ones in order with `status` (any thread may call it while another is
 * inside the driver) and returns how many ran. A reset drops held ones.
 * Until a held function has run, its stream has work left (cuStreamQuery is
 * CUDA_ERROR_NOT_READY) and so has an event recorded on that stream after it
 * (cuEventQuery and cuEventElapsedTime are CUDA_ERROR_NOT_READY); the waits
 * (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize) do not wait.
 */
void gm_cuda_double_hold_callbacks(int hold);
int gm_cuda_double_run_held_callbacks(CUresult status);

/*
 * What cuStreamIsCapturing reports (reset: 0): 0 no stream capturing; 1
 * every stream capturing; 2 a blocking stream capturing, so that the legacy
 * stream (CU_STREAM_LEGACY or NULL) is unusable and its query fails with
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, as the driver documents.
 */
void gm_cuda_double_set_capturing(int capturing);

/* The call log since the last reset or clear: count, and the symbol of call i (0-based). */
long gm_cuda_double_call_count(void);
const char *gm_cuda_double_call_name(long i);
void gm_cuda_double_clear_calls(void);

/* How many logged calls were to `symbol`. */
long gm_cuda_double_count_calls(const char *symbol);

/* Index in the log of the first call to `symbol` at or after `from`, or -1. */
long gm_cuda_double_find_call(const char *symbol, long from);

/*
 * Everything the driver holds for the process: allocations (device,
 * managed, pinned), host registrations, IPC mappings, streams, events,
 * modules and primary-context retains. 0 once all was released.
 */
long gm_cuda_double_live_objects(void);

/* Violations of the driver's argument rules since the reset, and the last one's text. With
 * GM_CUDA_DOUBLE_FATAL_VIOLATIONS set in the environment, a violation aborts the process
 * (for test programs that do not assert on this count). */
long gm_cuda_double_violations(void);
const char *gm_cuda_double_last_violation(void);

/*
 * Mapped host memory (cuMemHostRegister or cuMemHostAlloc with DEVICEMAP).
 * CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM reports `can`
 * (reset: 0) and decides the device address of later registrations: the host
 * address when 1; when 0 a distinct one in a reserved PROT_NONE region, so
 * that a CPU access through it faults. Write-combined cuMemHostAlloc memory
 * always gets a distinct one; other cuMemHostAlloc memory is reached at its
 * host address (unified addressing). Driver calls that take a device address
 * (copies' device sides, memsets, cuMemGetAddressRange, pointer kernel
 * parameters) translate a distinct one back, and a host address of such
 * memory there is a violation; so is a distinct device address where a host
 * address belongs (copies' host sides, cuMemHostGetDevicePointer,
 * cuMemHostRegister / Unregister, cuMemFreeHost). cuPointerGetAttribute
 * answers for both addresses.
 */
void gm_cuda_double_set_host_pointer_for_registered_mem(int can);

/* The device address of host memory at `host` (0: none), and the reverse (NULL: none). */
CUdeviceptr gm_cuda_double_device_address(const void *host);
void *gm_cuda_double_host_address(CUdeviceptr device);

/* Flags an object was created with; -1 when it is not a live object of that kind. */
long gm_cuda_double_stream_flags(CUstream stream);
long gm_cuda_double_event_flags(CUevent event);
long gm_cuda_double_host_flags(const void *host); /* cuMemHostAlloc or cuMemHostRegister flags */

/*
 * Handle and address reuse (ABA). By default a destroyed stream, event or
 * module is never handed out again and freed device memory waits in a
 * quarantine, so that a stale handle or address is refused. The real driver
 * reuses them, though: with reuse on (1), a destroyed stream's, event's or
 * module's handle value (and so its functions' handles) is the one the NEXT
 * creation of that kind returns, newest first; freed device, managed or
 * page-locked memory's address is the one the next allocation of the same
 * kind and size returns (filled with 0xa5 bytes: the driver promises no
 * contents), newest first, and so is the distinct
 * device address of registered (or write-combined) memory given up, for the
 * next mapping of the same size and offset in its page. A stream or event
 * with a held callback not run yet is reused once it has run. Deterministic:
 * code that keys records by handle or address meets a new object under a
 * dead one's key. The reset's default is GM_CUDA_DOUBLE_REUSE_HANDLES from
 * the environment (set and not "0": on), so a whole test run can use it.
 */
void gm_cuda_double_set_reuse_handles(int reuse);
int gm_cuda_double_reuse_handles(void);

/* Dynamic shared memory of the last cuLaunchKernel, and the function's opt-in limit. */
unsigned gm_cuda_double_last_launch_shared(void);
long gm_cuda_double_function_max_dynamic_shared(CUfunction function);

#endif /* GM_CUDA_DRIVER_DOUBLE_H */
