#!/bin/sh
# Build a fuzzer with clang and run it.
#
#   [GM_FUZZ_TARGET=fuzz_ndview|fuzz_copy|fuzz_runtime|fuzz_streams] tests/fuzz/run_fuzz.sh [SECONDS] [libFuzzer options...]
#
# The target defaults to fuzz_ndview (descriptors and views); fuzz_copy is the
# host copy engine; fuzz_runtime is the public runtime API on the host backend
# against a model (FUZZ_RUNTIME_TRACE=1 prints a reproducer's calls);
# fuzz_streams is several streams, events, callbacks, auto_synchronize, host
# registration, foreign memory, DLPack and running out of device memory on
# the host backend, against a model of the ordering the API promises
# (FUZZ_STREAMS_TRACE=1 prints a reproducer's calls). SECONDS
# defaults to 60. The build directory is
# $GM_FUZZ_BUILD (default build-fuzz in the source tree); the growing corpus
# lives in its fuzz-corpus/ (fuzz-corpus-<target>/ for the other targets) and
# crash reproducers are written to it as fuzz-crash-*. Replay one with
#   build-fuzz/tests/fuzz/fuzz_ndview build-fuzz/fuzz-crash-<hash>
# Extra options go to libFuzzer, e.g. -jobs=4 -workers=4.
set -eu

seconds=${1:-60}
[ $# -gt 0 ] && shift
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${GM_FUZZ_BUILD:-$src/build-fuzz}
target=${GM_FUZZ_TARGET:-fuzz_ndview}
corpus=$build/fuzz-corpus
[ "$target" = fuzz_ndview ] || corpus=$build/fuzz-corpus-$target

if [ ! -f "$build/build.ninja" ]; then
    CC=${CC:-clang} meson setup "$build" "$src" -Dtests=enabled -Dexamples=disabled \
        -Dbench=disabled
fi
ninja -C "$build" "tests/fuzz/$target"
if [ ! -x "$build/tests/fuzz/$target" ]; then
    echo "run_fuzz.sh: $target was not built (needs clang with -fsanitize=fuzzer)" >&2
    exit 1
fi
mkdir -p "$corpus"
exec "$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=512 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-" "$@" "$corpus"
