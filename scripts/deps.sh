#!/bin/sh
# gm_need PACKAGE...: install the Debian packages that are missing, with
# apt-get (needs root or sudo). Sourced by the other scripts.
gm_need() {
    gm_missing=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            gm_missing="$gm_missing $p"
    done
    [ -z "$gm_missing" ] && return 0
    echo "gpumem: installing missing packages:$gm_missing"
    gm_sudo=""
    [ "$(id -u)" -ne 0 ] && gm_sudo="sudo"
    $gm_sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $gm_sudo apt-get install -y -qq --no-install-recommends \
            $gm_missing >/dev/null ||
        { echo "gpumem: apt-get install failed:$gm_missing" >&2; exit 1; }
}

# What building the library and its examples needs.
GM_BUILD_PACKAGES="meson ninja-build pkg-config gcc libc6-dev"
# What the whole test suite needs besides: cmocka, clang (second compiler,
# TSan, libFuzzer), numpy (differential test), clang-format, the HSA headers
# and runtime (HSA backend build and its no-GPU test), clang/lld 15 with the
# AMDGPU target (kernel code objects and the HSA module tests), valgrind's
# headers (fiber stack annotations).
GM_TEST_PACKAGES="libcmocka-dev clang python3-numpy clang-format git libhsa-runtime-dev clang-15 lld-15 llvm-15 valgrind"
