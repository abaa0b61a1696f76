#!/bin/sh
# Quick start 1: build gpumem on the embedded host backend and run the tour.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
gm_need $GM_BUILD_PACKAGES
[ -d build-example ] || meson setup build-example -Dtests=disabled -Dbench=disabled >/dev/null
ninja -C build-example examples/tour >/dev/null
exec ./build-example/examples/tour
