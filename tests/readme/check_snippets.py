#!/usr/bin/env python3
"""Keep README.md's C examples compiling and true.

Every ```c block in README.md must be preceded (blank lines aside) by a marker

    <!-- snippet: NAME -->

naming one entry of FIXTURES below, which says how the block is checked:

  mode "run":     the block is pasted into the body of main() between the
                  fixture's `before` code (the declarations the block assumes:
                  a context, host descriptors, ...) and its `after` code (which
                  checks what the block's comments claim and frees what the
                  fixture made); the program is built, linked against the
                  built libgpumem.so and run with GM_BACKEND=host (or
                  --backend's). It fails if a check fails, if the last error
                  the snippet left on the thread (gm_last_error) is not the
                  fixture's `expect_error` (a dict: by backend), if the
                  library logs a warning or an error (e.g. arrays still
                  alive at gm_context_destroy), or if a
                  sanitizer reports something (leaks included, in an ASan build).
  mode "compile": the block is a whole translation unit (a kernel file);
                  it is compiled (-c) only.
  "backends":     the backends a "run" block is for (default: all); with
                  --backend naming another, the block is skipped and says so.
  "globals_snippet": another block (a "compile" one) pasted before main(),
                  so that two examples of the README are checked together.

Blocks without a marker, unknown marker names and fixtures no block uses are
errors, so that a new example cannot go unchecked.

The programs are compiled with -Wall -Wextra -Wpedantic -Werror (the project
builds with warning_level=3) and the build's -std and -fsanitize flags.

Usage: check_snippets.py --readme README.md --include DIR --lib libgpumem.so
           [--std c11] [--sanitize address,undefined] [--keep DIR] -- CC...
Exit status: 0 all good, 1 a snippet failed, 77 skipped (no usable compiler).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

FIXTURES = {
    # "### Descriptors and views": the comments' strides, shapes and statuses.
    "views": {
        "mode": "run",
        "before": "",
        "after": r"""
CHECK(a.strides[0] == 24 && a.strides[1] == 4);
CHECK(t.shape[0] == 6 && t.shape[1] == 4 && t.strides[0] == 4 && t.strides[1] == 24);
CHECK(s.shape[0] == 4 && s.shape[1] == 2 && s.strides[0] == -24 && s.strides[1] == 8);
{
    gm_ndview fx_r;
    CHECK(gm_ndview_reshape(&s, 1, flat, GM_ORDER_C, &fx_r) == GM_ERR_NEEDS_COPY);
}
CHECK(r.ndim == 1 && r.shape[0] == 24 && r.strides[0] == 4 && r.data == (void *)data);
""",
        # The first reshape fails on purpose (numpy would copy).
        "expect_error": "GM_ERR_NEEDS_COPY",
    },
    # "### Device arrays, transfers, streams and events": assumes host
    # descriptors host_x and host_result; the result is written into an
    # F-ordered buffer ("strided host OK") and compared with the input.
    "transfers": {
        "mode": "run",
        "before": r"""
static float fx_x[4 * 6], fx_result[4 * 6];
int64_t fx_shape[2] = {4, 6};
gm_ndview host_x, host_result;
for (int i = 0; i < 24; i++)
    fx_x[i] = (float)i;
CHECK(gm_ndview_init(fx_x, GM_FLOAT32, 2, fx_shape, NULL, GM_ORDER_C, &host_x) == GM_OK);
CHECK(gm_ndview_init(fx_result, GM_FLOAT32, 2, fx_shape, NULL, GM_ORDER_F, &host_result) == GM_OK);
""",
        "after": r"""
CHECK(ctx == NULL && d_x == NULL && d_out == NULL && row == NULL && stream == NULL &&
      start == NULL && stop == NULL);
CHECK(ms >= 0.0f);
for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++)
        CHECK(fx_result[i + 4 * j] == fx_x[6 * i + j]);
""",
    },
    # "### Pinned, mapped and registered host memory": assumes a context ctx,
    # a 1-D shape and two user host descriptors `arrays`.
    "hostmem": {
        "mode": "run",
        "expect_error": {"hsa": "GM_ERR_UNSUPPORTED"},  # managed memory (the snippet checks it)
        "before": r"""
static float fx_a[1024], fx_b[300];
gm_context *ctx = NULL;
int64_t shape[1] = {1024}, fx_b_shape[1] = {300};
gm_ndview arrays[2];
CHECK(gm_context_create(NULL, &ctx) == GM_OK);
CHECK(gm_ndview_init(fx_a, GM_FLOAT32, 1, shape, NULL, GM_ORDER_C, &arrays[0]) == GM_OK);
CHECK(gm_ndview_init(fx_b, GM_FLOAT32, 1, fx_b_shape, NULL, GM_ORDER_C, &arrays[1]) == GM_OK);
""",
        "after": r"""
CHECK(gm_array_view(pinned)->memory == GM_MEMORY_PINNED);
CHECK(gm_array_view(tile)->memory == GM_MEMORY_PINNED);
CHECK(gm_array_view(tile)->strides[0] == 64 && gm_array_view(tile)->strides[1] == 4);
CHECK(gm_array_view(mapped)->memory == GM_MEMORY_MAPPED);
CHECK(device_side.memory == GM_MEMORY_DEVICE && device_side.shape[0] == 1024);
if (gm_context_backend(ctx) == GM_BACKEND_HSA) {
    CHECK(managed == NULL);
} else {
    CHECK(gm_array_view(managed)->memory == GM_MEMORY_MANAGED);
    CHECK(((const float *)gm_array_view(managed)->data)[0] == 1.0f);
}
CHECK(scope == NULL);
gm_array_release(&pinned);
gm_array_release(&tile);
gm_array_release(&mapped);
gm_array_release(&managed);
gm_context_destroy(&ctx);
""",
    },
    # "### The deallocation queue": assumes a context ctx.
    "dealloc": {
        "mode": "run",
        "before": r"""
gm_context *ctx = NULL;
CHECK(gm_context_create(NULL, &ctx) == GM_OK);
""",
        "after": r"""
CHECK(st.defer_depth == 0 && st.pending_count >= 0);
gm_context_destroy(&ctx);
""",
    },
    # "### Kernels": a kernel file, built for the simulator.
    "kernel": {"mode": "compile"},
    # The launch after it: assumes a context, a stream, device arrays x, y,
    # out of n float32 elements; checks out == x + y.
    "launch": {
        "mode": "run",
        "before": r"""
static float fx_x[1000], fx_y[1000], fx_out[1000];
gm_context *ctx = NULL;
gm_stream *stream = NULL;
gm_array *x = NULL, *y = NULL, *out = NULL;
int64_t n = 1000;
gm_ndview fx_hx, fx_hy, fx_hout;
for (int i = 0; i < 1000; i++) {
    fx_x[i] = (float)i;
    fx_y[i] = (float)(2 * i);
}
CHECK(gm_context_create(NULL, &ctx) == GM_OK);
CHECK(gm_stream_create(ctx, GM_STREAM_DEFAULT, &stream) == GM_OK);
CHECK(gm_ndview_init(fx_x, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &fx_hx) == GM_OK);
CHECK(gm_ndview_init(fx_y, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &fx_hy) == GM_OK);
CHECK(gm_ndview_init(fx_out, GM_FLOAT32, 1, &n, NULL, GM_ORDER_C, &fx_hout) == GM_OK);
CHECK(gm_to_device(ctx, &fx_hx, NULL, &x) == GM_OK);
CHECK(gm_to_device(ctx, &fx_hy, NULL, &y) == GM_OK);
CHECK(gm_device_array_like(ctx, &fx_hout, &out) == GM_OK);
""",
        "after": r"""
CHECK(gm_stream_synchronize(stream) == GM_OK);
CHECK(gm_array_copy_to_host(out, &fx_hout, NULL) == GM_OK);
for (int i = 0; i < 1000; i++)
    CHECK(fx_out[i] == (float)(3 * i));
gm_array_release(&x);
gm_array_release(&y);
gm_array_release(&out);
gm_stream_destroy(&stream);
gm_context_destroy(&ctx);
""",
    },
    # Registering your own kernels: the README's kernel file ("kernel" above) in the same
    # program, so that the two examples agree.
    "register": {
        "mode": "run",
        "backends": ("host",),  # the README's set has the host table only ("for the simulator")
        "globals_snippet": "kernel",
        "before": r"""
gm_context *ctx = NULL;
CHECK(gm_context_create(NULL, &ctx) == GM_OK);
""",
        "after": r"""
CHECK(scale != NULL);
{
    static float fx_x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t fx_n = 8;
    gm_ndview fx_v;
    gm_array *fx_d = NULL;
    gm_arg fx_args[3];

    CHECK(gm_ndview_init(fx_x, GM_FLOAT32, 1, &fx_n, NULL, GM_ORDER_C, &fx_v) == GM_OK);
    CHECK(gm_to_device(ctx, &fx_v, NULL, &fx_d) == GM_OK);
    fx_args[0] = gm_arg_array(fx_d);
    fx_args[1] = gm_arg_f32(2.0f);
    fx_args[2] = gm_arg_i64(fx_n);
    CHECK(gm_launch(scale, gm_dim3_make(1, 1, 1), gm_dim3_make(32, 1, 1), 0, NULL, 3,
                    fx_args) == GM_OK);
    CHECK(gm_array_copy_to_host(fx_d, &fx_v, NULL) == GM_OK);
    CHECK(fx_x[7] == 16.0f);
    gm_array_release(&fx_d);
}
CHECK(gm_unregister_image_set(&my_set) == GM_OK);
gm_context_destroy(&ctx);
""",
    },
}

PRELUDE = r"""/* Generated by tests/readme/check_snippets.py from %(readme)s. */
#include <gpumem/gpumem.h>
#include <stdio.h>
%(globals)s

static int fx_failures;
static int fx_logged;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%%s:%%d: check failed: %%s\n", __FILE__, __LINE__, #cond); \
            fx_failures++;                                                           \
        }                                                                            \
    } while (0)

static void fx_log(gm_log_level level, const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "gpumem log (level %%d): %%s\n", (int)level, message);
    fx_logged++;
}

int main(void)
{
    gm_set_log_hook(fx_log, NULL);
    gm_set_log_level(GM_LOG_WARN);
    gm_clear_error();
"""

EPILOGUE = r"""
    if (gm_last_error() != %(expect)s) {
        fprintf(stderr, "last error after the snippet: %%s (%%s), expected %(expect)s\n",
                gm_status_name(gm_last_error()), gm_last_error_message());
        fx_failures++;
    }
"""

END = r"""
    if (fx_logged > 0)
        fprintf(stderr, "the library logged %d warning(s) or error(s)\n", fx_logged);
    return fx_failures > 0 || fx_logged > 0;
}
"""


def c_string(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def extract_blocks(readme):
    """Yield (marker name or None, first line number of the code, code)."""
    with open(readme, encoding="utf-8") as f:
        lines = f.read().split("\n")
    marker_re = re.compile(r"^\s*<!--\s*snippet:\s*([A-Za-z0-9_-]+)\s*-->\s*$")
    i = 0
    while i < len(lines):
        if re.match(r"^```c\s*$", lines[i]):
            k = i - 1
            while k >= 0 and lines[k].strip() == "":
                k -= 1
            m = marker_re.match(lines[k]) if k >= 0 else None
            start = i + 1
            j = start
            while j < len(lines) and not re.match(r"^```\s*$", lines[j]):
                j += 1
            if j == len(lines):
                raise SystemExit(f"{readme}:{i + 1}: unterminated ```c block")
            yield (m.group(1) if m else None, start + 1, "\n".join(lines[start:j]) + "\n")
            i = j + 1
        else:
            i += 1


def indent(code, pad="    "):
    return "".join(pad + line if line.strip() else line for line in code.splitlines(True))


def wrap(name, fixture, readme, first_line, code, out_name, backend="host", codes=None):
    """The C source for a snippet, with #line so diagnostics point at README.md."""
    if fixture["mode"] == "compile":
        return f"#line {first_line} {c_string(readme)}\n{code}"
    globs = fixture.get("globals", "")
    if "globals_snippet" in fixture:  # another README block, a whole file, before main()
        other_line, other_code = codes[fixture["globals_snippet"]]
        globs = f"#line {other_line} {c_string(readme)}\n{other_code}"
    head = PRELUDE % {"readme": os.path.basename(readme), "globals": globs}
    head += "    /* fixture: what the snippet assumes */\n" + indent(fixture.get("before", "").lstrip("\n"))
    head += f"    /* README.md snippet '{name}' */\n"
    text = head + f"#line {first_line} {c_string(readme)}\n" + code
    resume = text.count("\n") + 2
    text += f"#line {resume} {c_string(out_name)}\n"
    expect = fixture.get("expect_error", "GM_OK")
    if isinstance(expect, dict):  # by backend
        expect = expect.get(backend, "GM_OK")
    text += EPILOGUE % {"expect": expect}
    text += "    /* fixture: checks of the snippet's claims, cleanup */\n"
    text += indent(fixture.get("after", "").lstrip("\n")) + END
    return text


def sanitize_flags(text):
    """-fsanitize=... from meson's b_sanitize, formatted as a string or a list."""
    names = [s.strip(" '\"") for s in text.strip("[] ").split(",")]
    names = [s for s in names if s and s != "none"]
    return ["-fsanitize=" + ",".join(names)] if names else []


def run(cmd, cwd, env=None, timeout=60):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {timeout} s)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", required=True)
    ap.add_argument("--include", required=True, help="the library's include directory")
    ap.add_argument("--lib", required=True, help="the built libgpumem.so")
    ap.add_argument("--std", default="c11", help="meson's c_std ('none': compiler default)")
    ap.add_argument("--sanitize", default="none", help="meson's b_sanitize")
    ap.add_argument("--keep", help="write the generated programs here and keep them")
    ap.add_argument("--backend", default="host",
                    help="GM_BACKEND for the programs (a GPU backend skips, 77, without a device)")
    ap.add_argument("cc", nargs="+", help="the compiler command (after --)")
    args = ap.parse_args()

    readme = os.path.abspath(args.readme)
    lib = os.path.abspath(args.lib)
    blocks = list(extract_blocks(readme))
    errors = []
    for name, line, _ in blocks:
        if name is None:
            errors.append(f"{readme}:{line - 1}: ```c block without a <!-- snippet: NAME --> marker")
        elif name not in FIXTURES:
            errors.append(f"{readme}:{line - 1}: unknown snippet name '{name}' "
                          f"(known: {', '.join(sorted(FIXTURES))})")
    used = [n for n, _, _ in blocks]
    for name in FIXTURES:
        if used.count(name) != 1:
            errors.append(f"fixture '{name}' is used by {used.count(name)} blocks of "
                          f"{readme} (exactly one expected)")
    if errors:
        print("\n".join(errors))
        return 1

    cc = args.cc
    if shutil.which(cc[0]) is None:
        print(f"SKIP: compiler {cc[0]!r} not found")
        return SKIP
    std = args.std.strip("[] '\"").split(",")[0].strip(" '\"")
    cflags = ([f"-std={std}"] if std and std != "none" else []) + [
        "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I", os.path.abspath(args.include)]
    cflags += sanitize_flags(args.sanitize)
    libdir = os.path.dirname(lib)
    ldflags = [lib, f"-Wl,-rpath,{libdir}"]

    work = args.keep or tempfile.mkdtemp(prefix="gm-readme-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env["GM_BACKEND"] = args.backend
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    try:
        # Can the compiler build and run anything at all with these flags?
        probe = os.path.join(work, "probe.c")
        with open(probe, "w") as f:
            f.write("int main(void) { return 0; }\n")
        rc, out = run(cc + cflags + [probe, "-o", os.path.join(work, "probe")], work)
        if rc != 0:
            print(f"SKIP: {' '.join(cc)} cannot build a trivial program with "
                  f"{' '.join(cflags)}:\n{out}")
            return SKIP
        if args.backend != "host":
            # Does the backend find a device here? (77 when it reports none)
            with open(probe, "w") as f:
                f.write("#include <gpumem/gpumem.h>\n"
                        "int main(void) {\n"
                        "    gm_context *ctx = NULL;\n"
                        "    gm_status st = gm_context_create(NULL, &ctx);\n"
                        "    if (st == GM_ERR_NO_DRIVER || st == GM_ERR_NO_DEVICE)\n"
                        "        return 77;\n"
                        "    gm_context_destroy(&ctx);\n"
                        "    return st == GM_OK ? 0 : 1;\n"
                        "}\n")
            rc, out = run(cc + cflags + [probe, "-o", os.path.join(work, "probe")] + ldflags, work)
            if rc == 0:
                rc, out = run([os.path.join(work, "probe")], work, env=env)
            if rc == SKIP:
                print(f"SKIP: backend {args.backend} finds no driver or device here")
                return SKIP
            if rc != 0:
                print(f"the probe of backend {args.backend} failed ({rc}):\n{out}")
                return 1

        failed = 0
        skipped = 0
        for name, line, code in blocks:
            fixture = FIXTURES[name]
            src = os.path.join(work, f"snippet_{name}.c")
            with open(src, "w") as f:
                f.write(wrap(name, fixture, readme, line, code, src, args.backend,
                             {n: (ln, c) for n, ln, c in blocks}))
            where = f"{os.path.basename(readme)}:{line - 1} snippet '{name}' ({fixture['mode']})"
            if fixture["mode"] == "run" and args.backend not in fixture.get("backends",
                                                                            (args.backend,)):
                print(f"skip  {where}: for backend {', '.join(fixture['backends'])} only")
                skipped += 1
                continue
            if fixture["mode"] == "compile":
                rc, out = run(cc + cflags + ["-c", src, "-o", src[:-2] + ".o"], work)
            else:
                exe = src[:-2]
                rc, out = run(cc + cflags + [src, "-o", exe] + ldflags, work)
                if rc == 0:
                    rc, out = run([exe], work, env=env)
                    if rc != 0:
                        out = f"(the program exited with {rc})\n" + out
                else:
                    out = "(does not compile)\n" + out
            if rc == 0:
                print(f"ok    {where}")
            else:
                failed += 1
                print(f"FAIL  {where}: generated source {src}\n{out.rstrip()}")
                if not args.keep:
                    print("---- generated source ----\n" + open(src).read())
        print(f"{len(blocks) - failed - skipped} of {len(blocks)} README C snippets ok"
              + (f", {skipped} not for backend {args.backend}" if skipped else ""))
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
