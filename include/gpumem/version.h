/**
 * @file gpumem/version.h
 * @brief Compile-time version of gpumem. meson.build reads these defines;
 *        gm_version() returns the same numbers at run time.
 */
#ifndef GPUMEM_VERSION_H
#define GPUMEM_VERSION_H

#define GM_VERSION_MAJOR 0
#define GM_VERSION_MINOR 1
#define GM_VERSION_PATCH 0

/** Pack a version into one integer: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define GM_VERSION_ENCODE(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))

/** This header's version, packed with GM_VERSION_ENCODE. */
#define GM_VERSION GM_VERSION_ENCODE(GM_VERSION_MAJOR, GM_VERSION_MINOR, GM_VERSION_PATCH)

#endif /* GPUMEM_VERSION_H */
