#!/bin/sh
# Quick start 2 (and what CI runs): every build and test gpumem has.
#   1. gcc, -Dwerror=true: build, full test suite, install + pkg-config consumer
#   2. clang, -Dwerror=true: build, full test suite
#   3. gcc with ASan+UBSan: full test suite
#   4. clang-format check of every C source
#   5. libFuzzer smoke run on the descriptor code (clang)
# Build directories are build-ci-*; each run starts them fresh.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh

step() { printf '\n=== %s ===\n' "$*"; }
jobs=$(nproc 2>/dev/null || echo 2)

step "gcc -Dwerror=true"
rm -rf build-ci-gcc build-ci-clang build-ci-asan build-ci-install
CC=gcc meson setup build-ci-gcc -Dwerror=true -Dtests=enabled >/dev/null
ninja -C build-ci-gcc -j "$jobs"
meson test -C build-ci-gcc --print-errorlogs --num-processes "$jobs"

step "install + pkg-config consumer"
DESTDIR="$PWD/build-ci-install" meson install -C build-ci-gcc --quiet
prefix="$PWD/build-ci-install/usr/local"
pcdir=$(dirname "$(find "$prefix" -name gpumem.pc | head -n 1)")
PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$PWD/build-ci-install" \
    sh -c 'cc -std=c11 -Werror -Wall examples/consumer.c $(pkg-config --cflags --libs gpumem) -o build-ci-install/consumer'
LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libgpumem.so' | head -n 1)")" ./build-ci-install/consumer

step "clang -Dwerror=true"
CC=clang meson setup build-ci-clang -Dwerror=true -Dtests=enabled >/dev/null
ninja -C build-ci-clang -j "$jobs"
meson test -C build-ci-clang --print-errorlogs --num-processes "$jobs"

step "ASan + UBSan"
CC=gcc meson setup build-ci-asan -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debug >/dev/null
ninja -C build-ci-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-ci-asan --print-errorlogs --num-processes "$jobs"

step "clang-format"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find include src tests examples bench -name '*.[ch]')
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -w) files clean"

if [ -x tests/fuzz/run_fuzz.sh ] && command -v clang >/dev/null; then
    step "libFuzzer smoke (30 s)"
    tests/fuzz/run_fuzz.sh 30
fi

step "summary"
passed=0 failed=0 skipped=0
for d in build-ci-gcc build-ci-clang build-ci-asan; do
    log="$d/meson-logs/testlog.txt"
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    fl=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    sk=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    echo "$d: ${ok:-0} ok, ${fl:-0} failed, ${sk:-0} skipped"
    passed=$((passed + ${ok:-0})) failed=$((failed + ${fl:-0})) skipped=$((skipped + ${sk:-0}))
done
echo "$passed passed, $failed failed, $skipped skipped"
