#!/bin/sh
# Install gpumem's build and test dependencies with apt-get when any is
# missing (Debian/Ubuntu; needs root or sudo). Sourced by the other scripts.
gm_packages="meson ninja-build pkg-config gcc clang libcmocka-dev python3-numpy clang-format"
gm_missing=""
for p in $gm_packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        gm_missing="$gm_missing $p"
done
if [ -n "$gm_missing" ]; then
    echo "gpumem: installing missing packages:$gm_missing"
    gm_sudo=""
    [ "$(id -u)" -ne 0 ] && gm_sudo="sudo"
    $gm_sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $gm_sudo apt-get install -y -qq --no-install-recommends $gm_missing >/dev/null ||
        { echo "gpumem: apt-get install failed:$gm_missing" >&2; exit 1; }
fi
