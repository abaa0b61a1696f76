/*
 * Loading the HSA runtime at run time and translating its status codes.
 */
#define _GNU_SOURCE /* secure_getenv */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hsa_api.h"

/* One row per entry point, generated from the X-macro lists. */
typedef struct hsa_symbol_row {
    const char *name;
    size_t offset; /* of the member in gm__hsa_api */
    int required;
} hsa_symbol_row;

static const hsa_symbol_row hsa_symbol_rows[] = {
#define GM__HSA_ROW_REQUIRED(name) {#name, offsetof(gm__hsa_api, name), 1},
#define GM__HSA_ROW_OPTIONAL(name) {#name, offsetof(gm__hsa_api, name), 0},
    GM_HSA_API_REQUIRED(GM__HSA_ROW_REQUIRED) GM_HSA_API_OPTIONAL(GM__HSA_ROW_OPTIONAL)
#undef GM__HSA_ROW_REQUIRED
#undef GM__HSA_ROW_OPTIONAL
};

/* Every HSA status, core and AMD extension codes: X(name, what it means for gpumem). */
#define GM_HSA_STATUS_LIST(X)                                             \
    X(HSA_STATUS_SUCCESS, GM_OK)                                          \
    X(HSA_STATUS_INFO_BREAK, GM_OK)                                       \
    X(HSA_STATUS_ERROR, GM_ERR_DRIVER)                                    \
    X(HSA_STATUS_ERROR_INVALID_ARGUMENT, GM_ERR_INVALID_ARG)              \
    X(HSA_STATUS_ERROR_INVALID_QUEUE_CREATION, GM_ERR_DRIVER)             \
    X(HSA_STATUS_ERROR_INVALID_ALLOCATION, GM_ERR_INVALID_ARG)            \
    X(HSA_STATUS_ERROR_INVALID_AGENT, GM_ERR_INVALID_HANDLE)              \
    X(HSA_STATUS_ERROR_INVALID_REGION, GM_ERR_INVALID_HANDLE)             \
    X(HSA_STATUS_ERROR_INVALID_SIGNAL, GM_ERR_INVALID_HANDLE)             \
    X(HSA_STATUS_ERROR_INVALID_QUEUE, GM_ERR_INVALID_HANDLE)              \
    X(HSA_STATUS_ERROR_OUT_OF_RESOURCES, GM_ERR_OUT_OF_DEVICE_MEMORY)     \
    X(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, GM_ERR_LAUNCH)              \
    X(HSA_STATUS_ERROR_RESOURCE_FREE, GM_ERR_DRIVER)                      \
    X(HSA_STATUS_ERROR_NOT_INITIALIZED, GM_ERR_STATE)                     \
    X(HSA_STATUS_ERROR_REFCOUNT_OVERFLOW, GM_ERR_OVERFLOW)                \
    X(HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, GM_ERR_INVALID_ARG)        \
    X(HSA_STATUS_ERROR_INVALID_INDEX, GM_ERR_INVALID_ARG)                 \
    X(HSA_STATUS_ERROR_INVALID_ISA, GM_ERR_INVALID_ARG)                   \
    X(HSA_STATUS_ERROR_INVALID_ISA_NAME, GM_ERR_INVALID_ARG)              \
    X(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, GM_ERR_INVALID_ARG)           \
    X(HSA_STATUS_ERROR_INVALID_EXECUTABLE, GM_ERR_INVALID_HANDLE)         \
    X(HSA_STATUS_ERROR_FROZEN_EXECUTABLE, GM_ERR_STATE)                   \
    X(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, GM_ERR_NOT_FOUND)             \
    X(HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED, GM_ERR_DRIVER)           \
    X(HSA_STATUS_ERROR_VARIABLE_UNDEFINED, GM_ERR_NOT_FOUND)              \
    X(HSA_STATUS_ERROR_EXCEPTION, GM_ERR_CONTEXT_LOST)                    \
    X(HSA_STATUS_ERROR_INVALID_CODE_SYMBOL, GM_ERR_INVALID_HANDLE)        \
    X(HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL, GM_ERR_INVALID_HANDLE)  \
    X(HSA_STATUS_ERROR_INVALID_FILE, GM_ERR_INVALID_ARG)                  \
    X(HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER, GM_ERR_INVALID_HANDLE) \
    X(HSA_STATUS_ERROR_INVALID_CACHE, GM_ERR_DRIVER)                      \
    X(HSA_STATUS_ERROR_INVALID_WAVEFRONT, GM_ERR_LAUNCH)                  \
    X(HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP, GM_ERR_INVALID_HANDLE)       \
    X(HSA_STATUS_ERROR_INVALID_RUNTIME_STATE, GM_ERR_STATE)               \
    X(HSA_STATUS_ERROR_FATAL, GM_ERR_DRIVER)                              \
    X(HSA_STATUS_ERROR_INVALID_MEMORY_POOL, GM_ERR_INVALID_HANDLE)        \
    X(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, GM_ERR_CONTEXT_LOST)    \
    X(HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, GM_ERR_CONTEXT_LOST)          \
    X(HSA_STATUS_ERROR_MEMORY_FAULT, GM_ERR_CONTEXT_LOST)                 \
    X(HSA_STATUS_CU_MASK_REDUCED, GM_OK)

typedef struct hsa_status_row {
    int code;
    const char *name;
    gm_status status;
} hsa_status_row;

static const hsa_status_row hsa_status_rows[] = {
#define GM__HSA_STATUS_ROW(name, mapped) {(int)name, #name, mapped},
    GM_HSA_STATUS_LIST(GM__HSA_STATUS_ROW)
#undef GM__HSA_STATUS_ROW
};

/* The row of a status, or NULL for codes this list does not know. */
static const hsa_status_row *status_row(hsa_status_t status)
{
    for (size_t i = 0; i < sizeof(hsa_status_rows) / sizeof(hsa_status_rows[0]); i++) {
        if (hsa_status_rows[i].code == (int)status)
            return &hsa_status_rows[i];
    }
    return NULL;
}

const char *gm__hsa_status_name(hsa_status_t status)
{
    const hsa_status_row *row = status_row(status);

    return row != NULL ? row->name : "HSA_STATUS_UNKNOWN";
}

/* Unknown codes are errors the driver reported: GM_ERR_DRIVER. */
gm_status gm__hsa_status_map(hsa_status_t status)
{
    const hsa_status_row *row = status_row(status);

    return row != NULL ? row->status : GM_ERR_DRIVER;
}

/*
 * The runtime's description of `status` without a leading "<NAME>: " (ROCr
 * starts its strings with the name, which the caller prints already).
 */
static const char *runtime_message(const gm__hsa_api *api, hsa_status_t status)
{
    const char *text = NULL;
    const char *name = gm__hsa_status_name(status);
    size_t name_len = strlen(name);

    if (api == NULL || api->hsa_status_string == NULL)
        return "";
    if (api->hsa_status_string(status, &text) != HSA_STATUS_SUCCESS || text == NULL)
        return "";
    if (strncmp(text, name, name_len) == 0 && text[name_len] == ':')
        text += name_len + 1;
    while (*text == ' ')
        text++;
    return text;
}

gm_status gm__hsa_check(hsa_status_t status, const gm__hsa_api *api, gm_status forced,
                        const char *call, const char *file, int line)
{
    gm_status mapped = gm__hsa_status_map(status);

    if (mapped == GM_OK)
        return GM_OK;
    if (forced != GM_OK)
        mapped = forced;
    return gm__error(mapped, "%s failed: %s (0x%x): %s [%s:%d]", call, gm__hsa_status_name(status),
                     (unsigned)status, runtime_message(api, status), file, line);
}

/* Resolve every row into the table; a missing required symbol is an error. */
static gm_status resolve_symbols(gm__hsa_api *api, const char *path)
{
    for (size_t i = 0; i < sizeof(hsa_symbol_rows) / sizeof(hsa_symbol_rows[0]); i++) {
        const hsa_symbol_row *row = &hsa_symbol_rows[i];
        void *symbol = dlsym(api->library, row->name);

        if (symbol == NULL && row->required != 0)
            return gm__error(GM_ERR_NO_DRIVER,
                             "HSA backend: %s has no symbol %s; not an HSA runtime "
                             "or too old (ROCm >= 5.2 expected)",
                             path, row->name);
        /* ISO C has no void* -> function pointer conversion; copy the bits. */
        memcpy((char *)api + row->offset, &symbol, sizeof(symbol));
    }
    return GM_OK;
}

gm_status gm__hsa_api_load(gm__hsa_api *api)
{
    const char *path = secure_getenv(GM_HSA_RUNTIME_PATH_ENV); /* ignored when setuid */
    gm_status status = GM_OK;
    const char *why = NULL;

    memset(api, 0, sizeof(*api));
    if (path == NULL || path[0] == '\0')
        path = GM_HSA_RUNTIME_SONAME;
    /* NODELETE: ROCr keeps threads and atexit state that must outlive dlclose. */
    api->library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (api->library == NULL) {
        why = dlerror();
        return gm__error(GM_ERR_NO_DRIVER, "HSA backend: cannot open the HSA runtime %s: %s", path,
                         why != NULL ? why : "unknown dlopen error");
    }
    status = resolve_symbols(api, path);
    if (status != GM_OK)
        goto fail_resolve;
    gm__log(GM_LOG_DEBUG, "HSA backend: runtime %s loaded", path);
    return GM_OK;

fail_resolve:
    gm__hsa_api_unload(api);
    return status;
}

void gm__hsa_api_unload(gm__hsa_api *api)
{
    if (api->library != NULL)
        dlclose(api->library);
    memset(api, 0, sizeof(*api));
}
