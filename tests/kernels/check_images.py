#!/usr/bin/env python3
"""Check the kernel images the build made (meson test kernels/images-*).

  check_images.py cuda FATBIN...           PTX and SASS of each fatbin
  check_images.py amdgpu READELF OBJDUMP CODE_OBJECT...

CUDA: the fatbin holds SASS for sm_75 .. sm_90 and PTX (uncompressed); the
PTX declares every kernel (.entry), uses bar.sync and .shared memory in the
kernels with barriers / shared tiles, bar.warp.sync for the wave barrier and
.const for constant memory. AMDGPU: every kernel has a protected FUNC symbol
and a NAME.kd descriptor, the barrier kernels contain s_barrier, and the
kernels with static shared tiles have a non-zero group segment size.
"""
import os
import re
import subprocess
import sys

# module -> (kernels, kernels with a block barrier, kernels with static shared memory)
MODULES = {
    "elementwise": (["add_f32", "add_f64", "fill_f32", "fill_i32", "copy_strided"], [], []),
    "matmul": (["matmul_f32"], ["matmul_f32"], ["matmul_f32"]),
    "reduce": (["reduce_sum_f32"], ["reduce_sum_f32"], ["reduce_sum_f32"]),
    "transpose": (["transpose_f32"], ["transpose_f32"], ["transpose_f32"]),
    "stencil": (["stencil1d_f32"], ["stencil1d_f32"], []),
    "poly_const": (["poly_eval_f32"], [], []),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def module_of(path):
    base = os.path.basename(path)
    return re.split(r"[.-]", base)[0] if not base.startswith("poly_const") else "poly_const"


def ptx_entries(text):
    """Map each .entry name of the PTX text to its body."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)^\}", text, re.S | re.M):
        out[m.group(1)] = m.group(0)
    return out


def check_cuda(paths):
    for path in paths:
        mod = module_of(path)
        kernels, barrier, shared = MODULES[mod]
        data = open(path, "rb").read()
        text = data.decode("latin-1")
        for sm in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90"):
            check("-arch " + sm in text, "%s: no SASS for %s" % (path, sm))
        check(".version" in text and ".target sm_90" in text, "%s: no PTX (compute_90)" % path)
        entries = ptx_entries(text)
        for k in kernels:
            check(k in entries, "%s: PTX has no .entry %s" % (path, k))
            body = entries.get(k, "")
            if k in barrier:
                check(re.search(r"\bbar(rier)?\.sync\b", body) is not None,
                      "%s: %s has no bar.sync" % (path, k))
            if k in shared:
                check(re.search(r"\.shared\b", text) is not None and "ld.shared" in body,
                      "%s: %s uses no .shared memory" % (path, k))
        if mod == "reduce":
            check("bar.warp.sync" in entries.get("reduce_sum_f32", ""),
                  "%s: gm_wavebarrier is not bar.warp.sync" % path)
        if mod == "stencil":
            check(".extern .shared" in text, "%s: no dynamic (.extern .shared) memory" % path)
        if mod == "poly_const":
            check(re.search(r"\.const\b.*gm_poly_coeffs", text) is not None,
                  "%s: gm_poly_coeffs is not in .const memory" % path)


def run(tool, *args):
    return subprocess.run([tool] + list(args), check=True, capture_output=True,
                          text=True).stdout


def group_segments(notes):
    """Kernel name -> .group_segment_fixed_size from the AMDGPU metadata note."""
    sizes, pending = {}, None
    for line in notes.splitlines():
        m = re.match(r"^\s{4}\.group_segment_fixed_size:\s+(\d+)", line)
        if m:
            pending = int(m.group(1))
        m = re.match(r"^\s{4}\.name:\s+(\S+)", line)
        if m and pending is not None:
            sizes[m.group(1)] = pending
            pending = None
    return sizes


def check_amdgpu(readelf, objdump, paths):
    for path in paths:
        mod = module_of(path)
        kernels, barrier, shared = MODULES[mod]
        symbols = run(readelf, "-s", "--wide", path)
        notes = run(readelf, "--notes", path)
        disasm = run(objdump, "-d", path)
        segments = group_segments(notes)
        for k in kernels:
            check(re.search(r"FUNC\s+GLOBAL\s+PROTECTED\s+\S+\s+%s$" % k, symbols, re.M),
                  "%s: no protected FUNC symbol %s" % (path, k))
            check(re.search(r"OBJECT\s+GLOBAL\s+PROTECTED\s+\S+\s+%s\.kd$" % k, symbols, re.M),
                  "%s: no %s.kd descriptor" % (path, k))
            check(k in segments, "%s: %s missing from the metadata" % (path, k))
            if k in shared:
                check(segments.get(k, 0) > 0,
                      "%s: %s has group segment size %s" % (path, k, segments.get(k)))
        if barrier:
            check("s_barrier" in disasm, "%s: no s_barrier" % path)
        if mod == "poly_const":
            check(re.search(r"OBJECT\s+GLOBAL\s+PROTECTED\s+\S+\s+gm_poly_coeffs$", symbols, re.M),
                  "%s: no gm_poly_coeffs global" % path)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    if argv[1] == "cuda":
        check_cuda(argv[2:])
    elif argv[1] == "amdgpu":
        check_amdgpu(argv[2], argv[3], argv[4:])
    else:
        sys.exit(__doc__)
    for f in failures:
        print("FAIL:", f)
    print("%d images checked, %d failures" % (len(argv) - (2 if argv[1] == "cuda" else 4),
                                               len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
