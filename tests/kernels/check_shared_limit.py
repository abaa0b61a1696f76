#!/usr/bin/env python3
"""GM_SHARED_ARRAY's size check on the simulator (include/gpumem/kernel.h).

A shared array of exactly GM_SHARED_ARRAY_MAX_BYTES (64 KiB) compiles; one
element more fails to compile with the macro's message naming the array, for
GM_SHARED_ARRAY, GM_SHARED_ARRAY2D and GM_SHARED_ARRAY3D, as C11 and as C++ when a C++ compiler
is given. Usage: check_shared_limit.py INCLUDE_DIR CC [CXX]
"""
import os
import subprocess
import sys
import tempfile

SOURCE = """#include <gpumem/kernel.h>
void touch(void);
void touch(void)
{
    GM_SHARED_ARRAY(float, tile, ONE_D);
    GM_SHARED_ARRAY2D(double, grid, 64, TWO_D_COLS);
    GM_SHARED_ARRAY3D(int16_t, cube, 32, 32, THREE_D_COLS);
    tile[0] = 1.0f;
    grid[0][0] = 2.0;
    cube[0][0][0] = 3;
}
"""


def compile_with(compiler, lang, include, defines, workdir):
    path = os.path.join(workdir, "shared." + ("c" if lang == "c" else "cpp"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(SOURCE)
    std = "-std=c11" if lang == "c" else "-std=c++17"
    cmd = [compiler, std, "-fsyntax-only", "-I", include] + ["-D%s=%d" % kv for kv in defines]
    cmd.append(path)
    run = subprocess.run(cmd, capture_output=True, text=True)
    return run.returncode, run.stdout + run.stderr


def main():
    include, compilers = sys.argv[1], [("c", sys.argv[2])]
    if len(sys.argv) > 3:
        compilers.append(("c++", sys.argv[3]))
    failures = 0
    # 16384 floats, 64 x 128 doubles and 32 x 32 x 32 int16s are 64 KiB each: the limit.
    ok = [("ONE_D", 16384), ("TWO_D_COLS", 128), ("THREE_D_COLS", 32)]
    cases = [
        ("at the limit", ok, None),
        ("1-D one element over", [("ONE_D", 16385)] + ok[1:], "tile"),
        ("2-D one column over", ok[:1] + [("TWO_D_COLS", 129)] + ok[2:], "grid"),
        ("3-D one column over", ok[:2] + [("THREE_D_COLS", 33)], "cube"),
    ]
    with tempfile.TemporaryDirectory() as workdir:
        for lang, compiler in compilers:
            for name, defines, too_big in cases:
                rc, out = compile_with(compiler, lang, include, defines, workdir)
                expect = "GM_SHARED_ARRAY %s is larger than the 64 KiB" % too_big
                if too_big is None and rc != 0:
                    print("FAIL %s %s: did not compile:\n%s" % (lang, name, out))
                    failures += 1
                elif too_big is not None and (rc == 0 or expect not in out):
                    print("FAIL %s %s: expected a compile error with %r, got rc %d:\n%s"
                          % (lang, name, expect, rc, out))
                    failures += 1
                else:
                    print("ok   %s %s" % (lang, name))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
