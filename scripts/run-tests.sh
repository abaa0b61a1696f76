#!/bin/sh
# Quick start 2 (and what CI runs): every build and test gpumem has.
#   1. gcc -Dwerror=true, host backend, kernel images for CUDA and AMDGPU when
#      their toolchains exist: full test suite, install + pkg-config consumer
#   2. gcc -Dwerror=true -Dgpu_backend=cuda (when cuda.h exists): full suite,
#      incl. the CUDA backend against its driver test double and the real stub
#   3. gcc -Dwerror=true -Dgpu_backend=hsa (when hsa/hsa.h exists): full suite,
#      incl. the HSA backend against its runtime test double and the real runtime
#   4. clang -Dwerror=true: full suite
#   5. gcc ASan+UBSan: full suite; then the CUDA and HSA backends' suites (their
#      driver doubles, fault sweeps included) under ASan+UBSan when their headers exist
#   6. clang TSan: the core (its lock), host runtime and kernel suites (streams, queue, stress,
#      simulator), and with the HSA headers the HSA and conformance suites too; then the
#      kernel suites again in a -O0 TSan build (the simulator's fiber switches); then the
#      CUDA suites (stress on the driver double included) when cuda.h exists
#   7. clang-format check of every C source
#   8. libFuzzer smoke runs on the descriptor code, the copy engine, the runtime API and
#      streams/events/callbacks (clang)
# Build directories are build-ci-*; each run starts them fresh.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
gm_need $GM_BUILD_PACKAGES $GM_TEST_PACKAGES

step() { printf '\n=== %s ===\n' "$*"; }
jobs=$(nproc 2>/dev/null || echo 2)
logs=""
run_suite() { # build dir, then extra meson test arguments
    d=$1
    shift
    meson test -C "$d" --print-errorlogs --num-processes "$jobs" "$@"
    logs="$logs $d"
}
# GPU images are built once (step 1); the other builds skip them to save time.
no_images="-Dkernels_cuda=disabled -Dkernels_amdgpu=disabled"
rm -rf build-ci-*

step "1. gcc -Dwerror=true (host backend, all kernel images)"
CC=gcc meson setup build-ci-gcc -Dwerror=true -Dtests=enabled >/dev/null
ninja -C build-ci-gcc -j "$jobs"
run_suite build-ci-gcc

step "install + pkg-config consumer"
DESTDIR="$PWD/build-ci-install" meson install -C build-ci-gcc --quiet
prefix="$PWD/build-ci-install/usr/local"
pcdir=$(dirname "$(find "$prefix" -name gpumem.pc | head -n 1)")
PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$PWD/build-ci-install" \
    sh -c 'cc -std=c11 -Werror -Wall examples/consumer.c $(pkg-config --cflags --libs gpumem) -o build-ci-install/consumer'
LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libgpumem.so' | head -n 1)")" ./build-ci-install/consumer

if [ -f /usr/local/cuda/include/cuda.h ] || [ -f /usr/include/cuda.h ]; then
    step "2. gcc -Dwerror=true -Dgpu_backend=cuda"
    CC=gcc meson setup build-ci-cuda -Dwerror=true -Dtests=enabled -Dgpu_backend=cuda \
        -Dkernels_amdgpu=disabled >/dev/null
    ninja -C build-ci-cuda -j "$jobs"
    run_suite build-ci-cuda
else
    step "2. skipped: no CUDA toolkit (cuda.h)"
fi

if [ -f /usr/include/hsa/hsa.h ]; then
    step "3. gcc -Dwerror=true -Dgpu_backend=hsa"
    CC=gcc meson setup build-ci-hsa -Dwerror=true -Dtests=enabled -Dgpu_backend=hsa \
        -Dkernels_cuda=disabled >/dev/null
    ninja -C build-ci-hsa -j "$jobs"
    run_suite build-ci-hsa
else
    step "3. skipped: no HSA headers (apt-get install libhsa-runtime-dev)"
fi

step "4. clang -Dwerror=true"
CC=clang meson setup build-ci-clang -Dwerror=true -Dtests=enabled $no_images >/dev/null
ninja -C build-ci-clang -j "$jobs"
run_suite build-ci-clang

step "5. ASan + UBSan"
CC=gcc meson setup build-ci-asan -Dtests=enabled -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debug $no_images >/dev/null
ninja -C build-ci-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-ci-asan
# The GPU backends' suites too: their fault sweeps fail every driver call in turn, and
# ASan proves each error path frees what it took.
asan_backend() { # step number, backend, the other vendor's kernel-image option
    step "$1. ASan + UBSan, $2 backend on its test double"
    CC=gcc meson setup "build-ci-asan-$2" -Dtests=enabled -Db_sanitize=address,undefined \
        -Db_lundef=false -Dbuildtype=debug "-Dgpu_backend=$2" "$3=disabled" >/dev/null
    ninja -C "build-ci-asan-$2" -j "$jobs"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        run_suite "build-ci-asan-$2" --suite "$2" --suite conformance
}
if [ -f /usr/local/cuda/include/cuda.h ] || [ -f /usr/include/cuda.h ]; then
    asan_backend 5b cuda -Dkernels_amdgpu
fi
if [ -f /usr/include/hsa/hsa.h ]; then
    asan_backend 5c hsa -Dkernels_cuda
fi

# With the HSA headers the TSan build is an HSA build, so that the HSA backend's
# streams, signal chains and queue waits run under TSan against the double's
# packet-processor and DMA threads too.
step "6. TSan (concurrency suites)"
tsan_suites="--suite core --suite host --suite kernels"
tsan_opts=$no_images
if [ -f /usr/include/hsa/hsa.h ]; then
    tsan_suites="$tsan_suites --suite hsa --suite conformance"
    tsan_opts="-Dgpu_backend=hsa -Dkernels_cuda=disabled"
fi
CC=clang meson setup build-ci-tsan -Dtests=enabled -Db_sanitize=thread -Db_lundef=false \
    $tsan_opts >/dev/null
ninja -C build-ci-tsan -j "$jobs"
# shellcheck disable=SC2086
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_suite build-ci-tsan $tsan_suites

# The fiber switches of the simulator at -O0, where nothing is inlined unless forced: an
# instrumented frame returning between __tsan_switch_to_fiber and the switch crashed
# every kernel suite there, and the -O2 build above cannot show it.
step "6b. TSan at -O0 (the simulator's fibers)"
CC=clang meson setup build-ci-tsan-o0 -Dtests=enabled -Db_sanitize=thread -Db_lundef=false \
    -Dbuildtype=debug $no_images >/dev/null
ninja -C build-ci-tsan-o0 -j "$jobs"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_suite build-ci-tsan-o0 --suite kernels

# The CUDA backend's threads (stream callbacks on the driver's side, per-thread
# default-stream error slots, many user threads; cuda/stress-double) under TSan against
# its driver double, which serializes its own entry points like a driver's locks.
if [ -f /usr/local/cuda/include/cuda.h ] || [ -f /usr/include/cuda.h ]; then
    step "6c. TSan, CUDA backend on its test double"
    CC=clang meson setup build-ci-tsan-cuda -Dwerror=true -Dtests=enabled -Db_sanitize=thread \
        -Db_lundef=false -Dgpu_backend=cuda -Dkernels_amdgpu=disabled >/dev/null
    ninja -C build-ci-tsan-cuda -j "$jobs"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        run_suite build-ci-tsan-cuda --suite cuda
fi

step "7. clang-format"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find include src tests examples bench kernels -name '*.[ch]')
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -w) files clean"

if [ -x tests/fuzz/run_fuzz.sh ] && command -v clang >/dev/null; then
    step "8. libFuzzer smoke (30 s descriptors, 20 s copy engine, 30 s runtime API, 30 s streams)"
    # A fixed seed keeps CI reproducible; run longer, unseeded sessions by hand.
    GM_FUZZ_BUILD=build-ci-fuzz tests/fuzz/run_fuzz.sh 30 -seed=1
    GM_FUZZ_BUILD=build-ci-fuzz GM_FUZZ_TARGET=fuzz_copy tests/fuzz/run_fuzz.sh 20 -seed=1
    GM_FUZZ_BUILD=build-ci-fuzz GM_FUZZ_TARGET=fuzz_runtime tests/fuzz/run_fuzz.sh 30 -seed=1
    # at ~75 inputs/s libFuzzer's length control would keep these to a few bytes (one or
    # two calls) for the whole run; without it inputs of many operations come at once
    GM_FUZZ_BUILD=build-ci-fuzz GM_FUZZ_TARGET=fuzz_streams tests/fuzz/run_fuzz.sh 30 -seed=1 \
        -len_control=0
fi

step "summary"
passed=0 failed=0 skipped=0
for d in $logs; do
    log="$d/meson-logs/testlog.txt"
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    fl=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    sk=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    echo "$d: ${ok:-0} ok, ${fl:-0} failed, ${sk:-0} skipped"
    passed=$((passed + ${ok:-0})) failed=$((failed + ${fl:-0})) skipped=$((skipped + ${sk:-0}))
done
echo "$passed passed, $failed failed, $skipped skipped"
