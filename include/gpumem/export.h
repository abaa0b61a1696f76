/**
 * @file gpumem/export.h
 * @brief Symbol visibility: GM_API marks every exported function.
 *
 * The library is built with -fvisibility=hidden; only GM_API declarations are
 * visible. Define GM_STATIC when linking the static library on Windows.
 */
#ifndef GPUMEM_EXPORT_H
#define GPUMEM_EXPORT_H

#if defined(_WIN32) && !defined(GM_STATIC)
#if defined(GM_BUILDING_LIBRARY)
#define GM_API __declspec(dllexport)
#else
#define GM_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define GM_API __attribute__((visibility("default")))
#else
#define GM_API
#endif

#if defined(__GNUC__)
#define GM_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define GM_PRINTF_LIKE(fmt, args)
#endif

#endif /* GPUMEM_EXPORT_H */
