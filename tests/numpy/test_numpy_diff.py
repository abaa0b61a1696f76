#!/usr/bin/env python3
"""Randomized differential test of gpumem's ndarray descriptor against numpy.

Usage: test_numpy_diff.py LIBGPUMEM.so [--seed N] [--cases N] [--only a,b]
                                       [--show N] [--lax]

Builds random numpy arrays inside one base buffer (random dtypes, shapes of up
to 6 dimensions with extents of 0 and 1, slicing with negative steps, integer
indexing, transposes, broadcasting, arbitrary byte strides), describes each
one with a gm_ndview (data = base buffer + a small delta, offset = the rest)
and compares every descriptor operation of the shared library, called through
ctypes, with what numpy does on the same array.

A numpy result is a view exactly when its data pointer lies in the base
buffer (np.shares_memory cannot tell for size-0 arrays); a copy means the
library must answer GM_ERR_NEEDS_COPY. Every failing call must leave its
output descriptor untouched; some calls are made with the output aliasing the
input.

A difference that is only in the stride of an axis of extent 1 (or in any
stride of an empty array) is "soft": such strides never address anything and
numpy itself is not consistent about them. Soft differences are listed and
fail the test unless --lax is given (or GM_NUMPY_DIFF_LAX=1).

Exit status: 0 all equal, 1 a mismatch (or an operation missing from the
library), 77 skipped (numpy missing, or a library built with a sanitizer
runtime that cannot be loaded into Python).
"""

import argparse
import ctypes
import os
import random
import sys
import time

SKIP = 77

try:
    import numpy as np
    from numpy.lib.stride_tricks import as_strided
except ImportError:
    print("SKIP: numpy cannot be imported by %s" % sys.executable)
    sys.exit(SKIP)
try:  # NumPy 2.0 moved byte_bounds out of the top-level namespace
    from numpy.lib.array_utils import byte_bounds
except ImportError:
    byte_bounds = np.byte_bounds

MAX_DIMS = 64
GM_NONE = -(2**63)

STATUS = {
    "OK": 0,
    "ERR_INVALID_ARG": -1,
    "ERR_NULL_POINTER": -2,
    "ERR_OUT_OF_RANGE": -3,
    "ERR_OVERFLOW": -4,
    "ERR_TOO_MANY_DIMS": -5,
    "ERR_SHAPE_MISMATCH": -6,
    "ERR_NEEDS_COPY": -7,
    "ERR_DTYPE": -8,
}
OK = STATUS["OK"]
INVALID_ARG = STATUS["ERR_INVALID_ARG"]
OUT_OF_RANGE = STATUS["ERR_OUT_OF_RANGE"]
SHAPE_MISMATCH = STATUS["ERR_SHAPE_MISMATCH"]
NEEDS_COPY = STATUS["ERR_NEEDS_COPY"]
STATUS_NAME = {v: k for k, v in STATUS.items()}

ORDERS = {"C": ord("C"), "F": ord("F"), "A": ord("A"), "K": ord("K")}

# numpy dtype -> (DLPack code, bits). bfloat16 has no numpy dtype.
DTYPES = {
    np.dtype(np.bool_): (6, 8),
    np.dtype(np.int8): (0, 8),
    np.dtype(np.int16): (0, 16),
    np.dtype(np.int32): (0, 32),
    np.dtype(np.int64): (0, 64),
    np.dtype(np.uint8): (1, 8),
    np.dtype(np.uint16): (1, 16),
    np.dtype(np.uint32): (1, 32),
    np.dtype(np.uint64): (1, 64),
    np.dtype(np.float16): (2, 16),
    np.dtype(np.float32): (2, 32),
    np.dtype(np.float64): (2, 64),
    np.dtype(np.complex64): (5, 64),
    np.dtype(np.complex128): (5, 128),
}
DTYPE_LIST = list(DTYPES)

BASE_BYTES = 1 << 20  # the base buffer every array lives in
PAD = 1 << 14  # arrays stay this far from both ends of it
MAX_ELEMS = 3000
# Far-out slice bounds and steps (GM_NONE, i.e. INT64_MIN, means "omitted").
HUGE = [2**63 - 1, -(2**63) + 1, 2**62, -(2**62), 2**31, -(2**31) - 1]


# --------------------------------------------------------------------------
# ctypes mirror of include/gpumem/{dtype,ndview}.h


class GmDtype(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class GmNdview(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("offset", ctypes.c_int64),
        ("dtype", GmDtype),
        ("ndim", ctypes.c_int32),
        ("memory", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


class GmSlice(ctypes.Structure):
    _fields_ = [("start", ctypes.c_int64), ("stop", ctypes.c_int64), ("step", ctypes.c_int64)]


class GmIndexItem(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int64), ("slice", GmSlice)]


INDEX_INT, INDEX_SLICE, INDEX_NEWAXIS, INDEX_ELLIPSIS = 0, 1, 2, 3

assert ctypes.sizeof(GmDtype) == 4
assert GmNdview.shape.offset == 40 and ctypes.sizeof(GmNdview) == 40 + 2 * 8 * MAX_DIMS
assert ctypes.sizeof(GmIndexItem) == 40

P = ctypes.POINTER
VIEW_P = P(GmNdview)
I64_P = P(ctypes.c_int64)
INT_P = P(ctypes.c_int)
c_int, c_i64, c_bool = ctypes.c_int, ctypes.c_int64, ctypes.c_bool

# name -> (restype, argtypes)
PROTOTYPES = {
    "gm_status_name": (ctypes.c_char_p, [c_int]),
    "gm_last_error_message": (ctypes.c_char_p, []),
    "gm_ndview_init": (
        c_int, [ctypes.c_void_p, GmDtype, c_int, I64_P, I64_P, c_int, VIEW_P]),
    "gm_ndview_validate": (c_int, [VIEW_P]),
    "gm_contiguous_strides": (c_int, [c_int, I64_P, c_i64, c_int, I64_P]),
    "gm_ndview_size": (c_i64, [VIEW_P]),
    "gm_ndview_nbytes": (c_i64, [VIEW_P]),
    "gm_ndview_itemsize": (c_i64, [VIEW_P]),
    "gm_ndview_is_c_contiguous": (c_bool, [VIEW_P]),
    "gm_ndview_is_f_contiguous": (c_bool, [VIEW_P]),
    "gm_ndview_is_contiguous": (c_bool, [VIEW_P]),
    "gm_ndview_extent": (c_int, [VIEW_P, I64_P, I64_P]),
    "gm_ndview_reshape": (c_int, [VIEW_P, c_int, I64_P, c_int, VIEW_P]),
    "gm_ndview_ravel": (c_int, [VIEW_P, c_int, VIEW_P]),
    "gm_ndview_transpose": (c_int, [VIEW_P, VIEW_P]),
    "gm_ndview_permute": (c_int, [VIEW_P, c_int, INT_P, VIEW_P]),
    "gm_ndview_swapaxes": (c_int, [VIEW_P, c_int, c_int, VIEW_P]),
    "gm_ndview_slice": (c_int, [VIEW_P, c_int, GmSlice, VIEW_P]),
    "gm_ndview_index": (c_int, [VIEW_P, c_int, c_i64, VIEW_P]),
    "gm_ndview_getitem": (c_int, [VIEW_P, c_int, P(GmIndexItem), VIEW_P]),
    "gm_ndview_expand_dims": (c_int, [VIEW_P, c_int, VIEW_P]),
    "gm_ndview_squeeze": (c_int, [VIEW_P, c_int, INT_P, VIEW_P]),
    "gm_ndview_view_dtype": (c_int, [VIEW_P, GmDtype, VIEW_P]),
    "gm_ndview_split": (c_int, [VIEW_P, c_i64, c_i64, VIEW_P, I64_P]),
    "gm_ndview_like": (c_int, [VIEW_P, VIEW_P]),
}


class Lib:
    """The library's functions; a missing symbol is recorded, not fatal."""

    def __init__(self, path):
        self.dll = ctypes.CDLL(path)
        self.missing = set()
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError:
                self.missing.add(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name[3:], fn)

    def has(self, *names):
        return not any(n in self.missing for n in names)

    def name(self, status):
        if self.has("gm_status_name"):
            return self.status_name(status).decode()
        return STATUS_NAME.get(status, str(status))

    def last_error(self):
        if not self.has("gm_last_error_message"):
            return ""
        return self.last_error_message().decode(errors="replace")


def i64_array(values):
    values = list(values)
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def int_array(values):
    values = list(values)
    return (ctypes.c_int * max(1, len(values)))(*values)


def gm_dtype_of(dt):
    code, bits = DTYPES[np.dtype(dt)]
    return GmDtype(code, bits, 1)


def sentinel_view():
    """An output descriptor filled with a recognisable pattern."""
    v = GmNdview()
    ctypes.memset(ctypes.byref(v), 0xA5, ctypes.sizeof(v))
    return v


def view_bytes(v):
    return ctypes.string_at(ctypes.addressof(v), ctypes.sizeof(v))


def view_tuple(v):
    n = v.ndim if 0 <= v.ndim <= MAX_DIMS else 0
    return (tuple(v.shape[:n]), tuple(v.strides[:n]))


def describe_view(v):
    shape, strides = view_tuple(v)
    return "ndim=%d shape=%s strides=%s offset=%d dtype=(%d,%d,%d)" % (
        v.ndim, shape, strides, v.offset, v.dtype.code, v.dtype.bits, v.dtype.lanes)


# --------------------------------------------------------------------------
# The base buffer and the descriptors of arrays inside it


class Base:
    def __init__(self):
        self.buf = np.zeros(BASE_BYTES, dtype=np.uint8)
        self.addr = self.buf.__array_interface__["data"][0]

    def inside(self, arr):
        """Whether arr addresses the base buffer, i.e. numpy made a view."""
        addr = arr.__array_interface__["data"][0]
        return self.addr <= addr < self.addr + BASE_BYTES

    def describe(self, arr, rng):
        """A gm_ndview of arr: data somewhere at or below the first element."""
        v = GmNdview()
        addr = arr.__array_interface__["data"][0]
        data = self.addr + rng.choice([0, 0, 8, rng.randrange(0, PAD)])
        if rng.random() < 0.03:
            data = addr + rng.randrange(1, 64)  # negative offset
        v.data = data
        v.offset = addr - data
        v.dtype = gm_dtype_of(arr.dtype)
        v.ndim = arr.ndim
        v.memory = rng.choice([0, 0, 1, 2, 3, 4])
        v.device_id = -1 if v.memory in (0, 2) else rng.randrange(0, 4)
        v.reserved = 0
        for i in range(arr.ndim):
            v.shape[i] = arr.shape[i]
            v.strides[i] = arr.strides[i]
        return v


def addr_of(arr):
    return arr.__array_interface__["data"][0]


# --------------------------------------------------------------------------
# Random arrays


def random_extent(rng):
    r = rng.random()
    if r < 0.025:
        return 0
    if r < 0.27:
        return 1
    return rng.randint(2, 5)


def random_shape(rng, max_ndim=6, max_elems=MAX_ELEMS):
    ndim = rng.choice([0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 6][: 1 + 2 * max_ndim])
    ndim = min(ndim, max_ndim)
    shape = [random_extent(rng) for _ in range(ndim)]
    while int(np.prod([max(d, 1) for d in shape])) > max_elems:
        i = max(range(ndim), key=lambda k: shape[k])
        shape[i] -= 1
    return tuple(shape)


def contiguous_array(rng, base, dt, shape, order):
    isz = dt.itemsize
    nbytes = int(np.prod(shape, dtype=np.int64)) * isz
    start = PAD + isz * rng.randrange(0, (BASE_BYTES - 2 * PAD - nbytes) // isz)
    flat = base.buf[start:start + nbytes].view(dt)
    return flat.reshape(shape, order=order)


def strided_array(rng, base, dt):
    """Arbitrary strides (negative, zero, overlapping, sometimes unaligned)."""
    isz = dt.itemsize
    shape = random_shape(rng)
    unit = isz if rng.random() < 0.85 else 1
    strides = []
    for d in shape:
        r = rng.random()
        if r < 0.1:
            s = 0
        else:
            s = unit * rng.randint(-40, 40)
        strides.append(s)
    lo = sum((d - 1) * s for d, s in zip(shape, strides) if d > 0 and s < 0)
    hi = sum((d - 1) * s for d, s in zip(shape, strides) if d > 0 and s > 0) + isz
    room = BASE_BYTES - 2 * PAD - (hi - lo)
    start = PAD - lo + rng.randrange(0, room)
    start -= (start - PAD) % unit
    first = base.buf[start:start + isz].view(dt)
    return as_strided(first, shape=shape, strides=strides)


def random_slice(rng, n):
    """A slice of an axis of n: half of them wild, half non-empty if n > 0."""
    def bound():
        r = rng.random()
        if r < 0.3:
            return None
        if r < 0.33:
            return rng.choice(HUGE)
        return rng.randint(-n - 2, n + 2)

    step = None if rng.random() < 0.25 else rng.choice([1, 1, 2, 3, -1, -1, -2, -3, 5, -7])
    if rng.random() < 0.02:
        step = rng.choice(HUGE)
    if n == 0 or rng.random() < 0.5:
        return slice(bound(), bound(), step)
    lo = rng.randrange(0, n)
    hi = rng.randint(lo + 1, n)
    if step is not None and step < 0:
        lo, hi = hi - 1, (lo - 1 if lo > 0 else None)
    if rng.random() < 0.3:  # the same bounds counted from the end
        lo = lo - n if lo is not None else None
        hi = hi - n if hi is not None and hi < n else hi
    return slice(lo, hi, step)


def op_slice(rng, a):
    if a.ndim == 0:
        return a
    ax = rng.randrange(a.ndim)
    return a[(slice(None),) * ax + (random_slice(rng, a.shape[ax]),)]


def op_index(rng, a):
    axes = [i for i in range(a.ndim) if a.shape[i] > 0]
    if not axes:
        return a
    ax = rng.choice(axes)
    idx = rng.randrange(-a.shape[ax], a.shape[ax])
    return a[(slice(None),) * ax + (idx, Ellipsis)]


def op_transpose(rng, a):
    perm = list(range(a.ndim))
    rng.shuffle(perm)
    return a.transpose(perm)


def op_newaxis(rng, a):
    if a.ndim >= 6:
        return a
    ax = rng.randint(0, a.ndim)
    return a[(slice(None),) * ax + (None, Ellipsis)]


def op_broadcast(rng, a):
    shape = list(a.shape)
    for i, d in enumerate(shape):
        if d == 1 and rng.random() < 0.5:
            shape[i] = rng.randint(2, 4)
    if len(shape) < 6 and rng.random() < 0.4:
        shape.insert(0, rng.randint(2, 3))
    if int(np.prod(shape)) > MAX_ELEMS:
        return a
    return np.broadcast_to(a, shape)


CHAIN_OPS = [op_slice, op_slice, op_slice, op_index, op_transpose, op_transpose,
             op_newaxis, op_broadcast]


def chained_array(rng, base, dt):
    """A contiguous array, then a few numpy view operations."""
    shape = random_shape(rng)
    a = contiguous_array(rng, base, dt, shape, rng.choice("CF"))
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        a = rng.choice(CHAIN_OPS)(rng, a)
    return a


def random_array(rng, base):
    dt = rng.choice(DTYPE_LIST)
    if rng.random() < 0.25:
        return strided_array(rng, base, dt)
    return chained_array(rng, base, dt)


# --------------------------------------------------------------------------
# Mismatch bookkeeping


class Report:
    def __init__(self, show, lax):
        self.show = show
        self.lax = lax
        self.checks = {}
        self.hard = {}
        self.soft = {}
        self.details = []
        self.soft_details = []
        self.outcomes = {}
        self.quirks = {}

    def count(self, family):
        self.checks[family] = self.checks.get(family, 0) + 1

    def quirk(self, family):
        """A known numpy oddity on strides that never address memory."""
        self.quirks[family] = self.quirks.get(family, 0) + 1

    def outcome(self, family, what):
        """Tally what numpy did (view / copy / error) for the summary."""
        book = self.outcomes.setdefault(family, {})
        book[what] = book.get(what, 0) + 1

    def mismatch(self, family, text, soft=False):
        book, details = (self.soft, self.soft_details) if soft else (self.hard, self.details)
        book[family] = book.get(family, 0) + 1
        if len(details) < self.show:
            details.append("[%s] %s" % (family, text))

    def failed(self):
        return bool(self.hard) or (bool(self.soft) and not self.lax)


def describe_array(base, arr, v=None):
    text = "input dtype=%s shape=%s strides=%s addr=base+%d" % (
        arr.dtype.name, arr.shape, arr.strides, addr_of(arr) - base.addr)
    if v is not None:
        text += " (desc data=base+%d offset=%d)" % (v.data - base.addr, v.offset)
    return text


def soft_only(exp_shape, exp_strides, got_strides):
    """Strides differ only where they never matter (extent 1, or empty)."""
    if 0 in exp_shape:
        return True
    return all(s1 == s2 or d == 1 for d, s1, s2 in zip(exp_shape, exp_strides, got_strides))


class Checker:
    def __init__(self, lib, base, report, rng):
        self.lib = lib
        self.base = base
        self.report = report
        self.rng = rng

    # -- helpers ------------------------------------------------------------

    def call(self, fn, v, *args, alias_ok=True):
        """Call fn(v, *args, out): out is a sentinel or aliases a copy of v.

        Returns (status, out, untouched, alias): untouched tells whether the
        output was left alone (required on failure), alias whether out was
        the input itself.
        """
        alias = alias_ok and self.rng.random() < 0.25
        v_in = GmNdview.from_buffer_copy(v)
        out = v_in if alias else sentinel_view()
        before = view_bytes(out)
        status = fn(ctypes.byref(v_in), *args, ctypes.byref(out))
        untouched = view_bytes(out) == before
        if not alias and view_bytes(v_in) != view_bytes(v):
            self.report.mismatch("input", "operation %s modified its input" % fn.__name__)
        return status, out, untouched, alias

    def status_text(self, status):
        text = self.lib.name(status)
        if status != OK:
            text += " (%s)" % self.lib.last_error()
        return text

    def compare_view(self, family, ctx, v, exp, got):
        """Compare the descriptor `got` with the numpy array `exp`."""
        problems = []
        exp_addr = addr_of(exp)
        exp_shape, exp_strides = tuple(exp.shape), tuple(exp.strides)
        got_shape, got_strides = view_tuple(got)
        if got.ndim != exp.ndim or got_shape != exp_shape:
            problems.append("shape")
        if got.data != v.data:
            problems.append("data pointer changed")
        if got.data is not None and got.data + got.offset != exp_addr:
            problems.append("address")
        if (got.dtype.code, got.dtype.bits, got.dtype.lanes) != tuple(DTYPES[exp.dtype]) + (1,):
            problems.append("dtype")
        if (got.memory, got.device_id) != (v.memory, v.device_id):
            problems.append("memory/device")
        if self.lib.has("gm_ndview_validate") and self.lib.ndview_validate(ctypes.byref(got)):
            problems.append("result does not validate")
        soft = False
        if not problems and got_strides != exp_strides:
            soft = soft_only(exp_shape, exp_strides, got_strides)
            problems.append("strides" + (" of extent-1 axes only" if soft else ""))
        if problems:
            self.report.mismatch(family, "%s: %s\n    ours:  %s addr=base+%s\n"
                                 "    numpy: shape=%s strides=%s addr=base+%d" % (
                                     ctx, ", ".join(problems), describe_view(got),
                                     None if got.data is None
                                     else got.data + got.offset - self.base.addr,
                                     exp_shape, exp_strides, exp_addr - self.base.addr),
                                 soft=soft)

    def expect(self, family, ctx, v, fn, args, numpy_fn, errors, copy_status=None):
        """Run numpy_fn() and our fn(v, *args); compare.

        errors: statuses accepted when numpy raises. copy_status: the status
        expected when numpy returns a copy (None: numpy never copies here).
        """
        self.report.count(family)
        try:
            exp = numpy_fn()
            exc = None
        except (ValueError, IndexError, TypeError) as e:
            exp, exc = None, e
        status, out, untouched, alias = self.call(fn, v, *args)
        ctx = "%s%s\n    %s" % (ctx, " [out aliases input]" if alias else "",
                                describe_array(self.base, self.current, v))
        if exc is not None:
            self.report.outcome(family, "error")
            if status not in errors:
                self.report.mismatch(family, "%s: numpy raises %s(%s); ours %s, expected %s" % (
                    ctx, type(exc).__name__, exc, self.status_text(status),
                    "/".join(self.lib.name(s) for s in errors)))
            elif not untouched:
                self.report.mismatch(family, "%s: output written on failure" % ctx)
            return
        if copy_status is not None and not self.base.inside(exp):
            self.report.outcome(family, "copy")
            if status != copy_status:
                self.report.mismatch(family, "%s: numpy copies; ours %s, expected %s%s" % (
                    ctx, self.status_text(status), self.lib.name(copy_status),
                    "" if status != OK else "\n    ours: " + describe_view(out)))
            elif not untouched:
                self.report.mismatch(family, "%s: output written on failure" % ctx)
            return
        self.report.outcome(family, "view")
        if status != OK:
            self.report.mismatch(family, "%s: numpy gives a view shape=%s strides=%s; ours %s" % (
                ctx, exp.shape, exp.strides, self.status_text(status)))
            return
        self.compare_view(family, ctx, v, exp, out)

    # -- families -----------------------------------------------------------

    def check_flags(self, a, v):
        lib, fam = self.lib, "flags"
        self.report.count(fam)
        ctx = describe_array(self.base, a, v)
        got = (bool(lib.ndview_is_c_contiguous(ctypes.byref(v))),
               bool(lib.ndview_is_f_contiguous(ctypes.byref(v))),
               bool(lib.ndview_is_contiguous(ctypes.byref(v))))
        exp = (bool(a.flags.c_contiguous), bool(a.flags.f_contiguous),
               bool(a.flags.c_contiguous or a.flags.f_contiguous))
        if got != exp:
            self.report.mismatch(fam, "%s: (C, F, any) ours %s numpy %s" % (ctx, got, exp))
        got = (lib.ndview_size(ctypes.byref(v)), lib.ndview_nbytes(ctypes.byref(v)),
               lib.ndview_itemsize(ctypes.byref(v)))
        if got != (a.size, a.nbytes, a.itemsize):
            self.report.mismatch(fam, "%s: (size, nbytes, itemsize) ours %s numpy %s" % (
                ctx, got, (a.size, a.nbytes, a.itemsize)))
        status = lib.ndview_validate(ctypes.byref(v))
        if status != OK:
            self.report.mismatch(fam, "%s: validate says %s" % (ctx, self.status_text(status)))

    def check_extent(self, a, v):
        self.report.count("extent")
        lo, hi = ctypes.c_int64(-1), ctypes.c_int64(-1)
        status = self.lib.ndview_extent(ctypes.byref(v), ctypes.byref(lo), ctypes.byref(hi))
        if a.size == 0:  # documented: lo == hi == offset (byte_bounds is junk here)
            exp = (v.offset, v.offset)
        else:
            blo, bhi = byte_bounds(a)
            exp = (blo - v.data, bhi - v.data)
        if status != OK or (lo.value, hi.value) != exp:
            self.report.mismatch("extent", "%s: ours %s (%d, %d), numpy %s" % (
                describe_array(self.base, a, v), self.status_text(status), lo.value, hi.value,
                exp))

    def check_init(self, a, v):
        self.report.count("init")
        order = self.rng.choice("CF")
        out = sentinel_view()
        shape = i64_array(a.shape)
        status = self.lib.ndview_init(None, gm_dtype_of(a.dtype), a.ndim, shape, None,
                                      ORDERS[order], ctypes.byref(out))
        # np.empty zeroes the strides of empty arrays; over a buffer numpy
        # keeps its _array_fill_strides rule, the one gm_contiguous_strides follows.
        exp = np.ndarray(a.shape, a.dtype, buffer=self.base.buf, order=order)
        ctx = "gm_ndview_init(shape=%s, order=%s)" % (a.shape, order)
        got = view_tuple(out)
        if status != OK or got[0] != exp.shape or out.offset != 0 or got[1] != exp.strides:
            soft = status == OK and got[0] == exp.shape and out.offset == 0 and soft_only(
                exp.shape, exp.strides, got[1])
            self.report.mismatch("init", "%s: ours %s %s; numpy strides %s" % (
                ctx, self.status_text(status), describe_view(out), exp.strides), soft=soft)
        strides = (ctypes.c_int64 * max(1, a.ndim))()
        status = self.lib.contiguous_strides(a.ndim, shape, a.itemsize, ORDERS[order], strides)
        got = tuple(strides[:a.ndim])
        if status != OK or got != exp.strides:
            self.report.mismatch("init", "gm_contiguous_strides(shape=%s, %d, %s): ours %s %s;"
                                 " numpy %s" % (a.shape, a.itemsize, order,
                                                self.status_text(status), got, exp.strides),
                                 soft=status == OK and soft_only(exp.shape, exp.strides, got))

    def check_reshape(self, a, v):
        shape, expected_error = random_target_shape(self.rng, a)
        order = self.rng.choice("CFA")
        if self.rng.random() < 0.03:
            order, expected_error = "K", INVALID_ARG
        ctx = "reshape(%s, order=%s)" % (tuple(shape), order)
        self.expect("reshape", ctx, v, self.lib.ndview_reshape,
                    (len(shape), i64_array(shape), ORDERS[order]),
                    lambda: a.reshape(shape, order=order), [expected_error],
                    copy_status=NEEDS_COPY)

    def check_ravel(self, a, v):
        order = self.rng.choice("CFAK")
        self.expect("ravel", "ravel(order=%s)" % order, v, self.lib.ndview_ravel,
                    (ORDERS[order],), lambda: a.ravel(order), [], copy_status=NEEDS_COPY)

    def check_transpose(self, a, v):
        self.expect("transpose", "transpose()", v, self.lib.ndview_transpose, (),
                    lambda: a.T, [])

    def check_permute(self, a, v):
        perm = list(range(a.ndim))
        self.rng.shuffle(perm)
        perm = [p - a.ndim if self.rng.random() < 0.3 else p for p in perm]
        errors = []
        r = self.rng.random()
        if r < 0.08 and a.ndim >= 2:
            perm[0] = perm[1]  # repeat
            errors = [INVALID_ARG]
        elif r < 0.14 and a.ndim >= 1:
            perm[0] = self.rng.choice([a.ndim, -a.ndim - 1, a.ndim + 3])
            errors = [OUT_OF_RANGE]
        elif r < 0.20:
            perm = perm + [0] if self.rng.random() < 0.5 or not perm else perm[:-1]
            errors = [INVALID_ARG]
        self.expect("permute", "permute(%s)" % perm, v, self.lib.ndview_permute,
                    (len(perm), int_array(perm)), lambda: a.transpose(perm), errors)

    def check_swapaxes(self, a, v):
        if a.ndim == 0:
            return
        i = self.rng.randrange(-a.ndim, a.ndim)
        j = self.rng.randrange(-a.ndim, a.ndim)
        if self.rng.random() < 0.1:
            j = self.rng.choice([a.ndim, -a.ndim - 1])
        self.expect("swapaxes", "swapaxes(%d, %d)" % (i, j), v, self.lib.ndview_swapaxes,
                    (i, j), lambda: a.swapaxes(i, j), [OUT_OF_RANGE])

    def check_slice(self, a, v):
        if a.ndim == 0:
            return
        ax = self.rng.randrange(a.ndim)
        errors = []
        if self.rng.random() < 0.05:
            ax = a.ndim + self.rng.randrange(0, 2)
            errors = [OUT_OF_RANGE]
        n = a.shape[ax] if ax < a.ndim else 3
        s = random_slice(self.rng, n)
        if self.rng.random() < 0.04:
            s = slice(s.start, s.stop, 0)
            errors = [INVALID_ARG, OUT_OF_RANGE]
        gs = GmSlice(*(GM_NONE if x is None else x for x in (s.start, s.stop, s.step)))
        idx = (slice(None),) * ax + (s,)
        self.expect("slice", "slice(axis=%d, %s)" % (ax, slice_text(s)), v,
                    self.lib.ndview_slice, (ax, gs), lambda: a[idx], errors)

    def check_index(self, a, v):
        if a.ndim == 0:
            return
        ax = self.rng.randrange(a.ndim)
        n = a.shape[ax]
        if n > 0 and self.rng.random() < 0.8:
            i = self.rng.randrange(-n, n)
        else:
            i = self.rng.choice([n, n + 1, -n - 1, -n - 2, 2**40, -2**40])
        errors = [OUT_OF_RANGE]
        if self.rng.random() < 0.05:
            ax = a.ndim
        idx = (slice(None),) * ax + (i, Ellipsis)
        self.expect("index", "index(axis=%d, %d)" % (ax, i), v, self.lib.ndview_index,
                    (ax, i), lambda: a[idx], errors)

    def check_getitem(self, a, v):
        items, errors = random_index_expr(self.rng, a)
        arr = (GmIndexItem * max(1, len(items)))()
        pyidx = []
        for k, it in enumerate(items):
            if isinstance(it, slice):
                arr[k].kind = INDEX_SLICE
                arr[k].slice = GmSlice(*(GM_NONE if x is None else x
                                         for x in (it.start, it.stop, it.step)))
            elif it is None:
                arr[k].kind = INDEX_NEWAXIS
            elif it is Ellipsis:
                arr[k].kind = INDEX_ELLIPSIS
            else:
                arr[k].kind = INDEX_INT
                arr[k].index = it
            pyidx.append(it)
        if Ellipsis not in pyidx:
            pyidx.append(Ellipsis)  # numpy would give a scalar for a full int index
        text = ", ".join(slice_text(x) if isinstance(x, slice) else
                         "None" if x is None else "..." if x is Ellipsis else str(x)
                         for x in items)
        self.expect("getitem", "a[%s]" % text, v, self.lib.ndview_getitem,
                    (len(items), arr), lambda: a[tuple(pyidx)], errors)

    def check_squeeze(self, a, v):
        ones = [i for i in range(a.ndim) if a.shape[i] == 1]
        r = self.rng.random()
        errors = [INVALID_ARG, OUT_OF_RANGE]
        if r < 0.3 or a.ndim == 0:
            axes = None
        elif r < 0.8 and ones:
            axes = self.rng.sample(ones, self.rng.randint(1, len(ones)))
            axes = [x - a.ndim if self.rng.random() < 0.3 else x for x in axes]
        else:
            axes = [self.rng.randrange(-a.ndim - 1, a.ndim + 1)
                    for _ in range(self.rng.randint(1, 2))]
        n = 0 if axes is None else len(axes)
        self.expect("squeeze", "squeeze(axes=%s)" % axes, v, self.lib.ndview_squeeze,
                    (n, None if axes is None else int_array(axes)),
                    lambda: np.squeeze(a, axis=None if axes is None else tuple(axes)), errors)

    def check_expand_dims(self, a, v):
        axis = self.rng.randint(-a.ndim - 1, a.ndim)
        if self.rng.random() < 0.06:
            axis = self.rng.choice([a.ndim + 1, -a.ndim - 2])
        self.expect("expand_dims", "expand_dims(%d)" % axis, v, self.lib.ndview_expand_dims,
                    (axis,), lambda: np.expand_dims(a, axis), [OUT_OF_RANGE, INVALID_ARG])

    def check_view_dtype(self, a, v):
        dt = self.rng.choice(DTYPE_LIST)
        self.expect("view_dtype", "view(%s)" % dt.name, v, self.lib.ndview_view_dtype,
                    (gm_dtype_of(dt),), lambda: a.view(dt), [INVALID_ARG])

    def check_like(self, a, v):
        self.report.count("like")
        status, out, _, _ = self.call(self.lib.ndview_like, v)
        exp = np.empty_like(a, order="K")
        if a.size == 0:
            # Empty arrays are C-contiguous; numpy then gives C strides, but
            # zeroes them when it allocates 0 bytes. Ours keep the fill rule.
            exp = np.ndarray(a.shape, a.dtype, buffer=self.base.buf, order="C")
        ok = (status == OK and view_tuple(out) == (exp.shape, exp.strides)
              and out.data is None and out.offset == 0
              and (out.memory, out.device_id) == (v.memory, v.device_id)
              and (out.dtype.code, out.dtype.bits) == DTYPES[a.dtype])
        if ok:
            return
        soft = (status == OK and view_tuple(out)[0] == exp.shape
                and soft_only(exp.shape, exp.strides, view_tuple(out)[1]))
        if soft and view_tuple(out)[1] == exp.strides:
            soft = False  # something else differs
        if soft and -(2**63) in a.strides:
            # numpy sorts by |stride| computed in int64, so |INT64_MIN| stays
            # negative and that axis sorts as the innermost; ours takes the
            # true magnitude. Only extent-1 axes can have such a stride.
            self.report.quirk("like")
            return
        self.report.mismatch("like", "%s: ours %s %s data=%s; numpy empty_like(K) "
                             "strides %s" % (describe_array(self.base, a, v),
                                             self.status_text(status), describe_view(out),
                                             out.data, exp.strides), soft=soft)

    def split_input(self, a, v):
        """Mostly a fresh 1-D array (split wants 1-D contiguous), else a itself."""
        if self.rng.random() < 0.3:
            return a, v
        b = contiguous_array(self.rng, self.base, a.dtype, (self.rng.randint(0, 20),), "C")
        if self.rng.random() < 0.25:
            b = b[::self.rng.choice([-1, 2, -3])]
        return b, self.base.describe(b, self.rng)

    def check_split(self, a, v):
        self.report.count("split")
        a, v = self.split_input(a, v)
        n = a.shape[0] if a.ndim == 1 else 0
        section = self.rng.choice([1, 2, 3, max(1, n - 1), n + 2, 0, -1])
        ok_input = a.ndim == 1 and a.flags.c_contiguous and section > 0
        cap = self.rng.choice([0, 1, 64])
        pieces = (GmNdview * max(1, cap))()
        ctypes.memset(pieces, 0xA5, ctypes.sizeof(pieces))
        count = ctypes.c_int64(-5)
        status = self.lib.ndview_split(ctypes.byref(v), section, cap,
                                       pieces if cap else None, ctypes.byref(count))
        ctx = "split(section=%d, max_pieces=%d)\n    %s" % (section, cap,
                                                             describe_array(self.base, a, v))
        if not ok_input:
            if status != INVALID_ARG or count.value != -5:
                self.report.mismatch("split", "%s: expected ERR_INVALID_ARG and count untouched,"
                                     " ours %s count=%d" % (ctx, self.status_text(status),
                                                            count.value))
            return
        exp = [a[i:i + section] for i in range(0, n, section)]
        if status != OK or count.value != len(exp):
            self.report.mismatch("split", "%s: ours %s count=%d, expected %d pieces" % (
                ctx, self.status_text(status), count.value, len(exp)))
            return
        for k, piece in enumerate(exp[:cap]):
            self.compare_view("split", ctx + " piece %d" % k, v, piece, pieces[k])
        for k in range(len(exp), cap):
            if view_bytes(pieces[k]) != view_bytes(sentinel_view()):
                self.report.mismatch("split", "%s: piece %d written past count" % (ctx, k))
                break

    def run_case(self, a, families):
        v = self.base.describe(a, self.rng)
        self.current = a
        for name in families:
            getattr(self, "check_" + name)(a, v)


def slice_text(s):
    def t(x):
        return "" if x is None else str(x)

    return "%s:%s%s" % (t(s.start), t(s.stop), "" if s.step is None else ":" + t(s.step))


def prime_factors(n):
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def random_target_shape(rng, a):
    """A target shape for a.reshape and the status expected if numpy refuses."""
    r = rng.random()
    if r < 0.1:
        return list(a.shape), SHAPE_MISMATCH  # numpy's same-shape fast path
    n = a.size
    k = rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 5, 6])
    if n == 0:
        k = max(k, 1)
        dims = [rng.randint(0, 4) for _ in range(k)]
        dims[rng.randrange(k)] = 0
    else:
        if k == 0 and n != 1:
            k = 1
        dims = [1] * k
        for p in prime_factors(n):
            dims[rng.randrange(k)] *= p
    r = rng.random()
    if r < 0.35 and k > 0:
        dims[rng.randrange(k)] = -1
    elif r < 0.40 and k > 1:
        i, j = rng.sample(range(k), 2)
        dims[i] = dims[j] = -1
        return dims, INVALID_ARG
    elif r < 0.47 and k > 0:
        dims[rng.randrange(k)] += rng.choice([1, 2])  # wrong size (usually)
    return dims, SHAPE_MISMATCH


def random_index_expr(rng, a):
    """Items for a[...] and the statuses accepted if numpy raises."""
    nd = a.ndim
    errors = set()
    nconsume = rng.randint(0, nd)
    if rng.random() < 0.05:
        nconsume = nd + 1
        errors.add(INVALID_ARG)  # too many indices
    items = []
    for ax in range(nconsume):
        n = a.shape[ax] if ax < nd else 2
        if rng.random() < 0.35:
            if n > 0 and rng.random() < 0.93:
                items.append(rng.randrange(-n, n))
            else:
                items.append(rng.choice([n, -n - 1, n + 5]))
                errors.add(OUT_OF_RANGE)
        else:
            items.append(random_slice(rng, n))
    if rng.random() < 0.4:
        # The ellipsis stands for zero or more axes: the ints after it then
        # apply to later axes than the ones their bounds were drawn for.
        pos = len(items) if rng.random() < 0.5 else rng.randint(0, len(items))
        items.insert(pos, Ellipsis)
        if rng.random() < 0.05:
            items.insert(rng.randint(0, len(items)), Ellipsis)
            errors.add(INVALID_ARG)
        if pos < len(items) - 1:
            errors.add(OUT_OF_RANGE)
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        items.insert(rng.randint(0, len(items)), None)
    return items, sorted(errors)


# --------------------------------------------------------------------------

FAMILIES = {
    "flags": ["gm_ndview_is_c_contiguous", "gm_ndview_is_f_contiguous",
              "gm_ndview_is_contiguous", "gm_ndview_size", "gm_ndview_nbytes",
              "gm_ndview_itemsize", "gm_ndview_validate"],
    "extent": ["gm_ndview_extent"],
    "init": ["gm_ndview_init", "gm_contiguous_strides"],
    "reshape": ["gm_ndview_reshape"],
    "ravel": ["gm_ndview_ravel"],
    "transpose": ["gm_ndview_transpose"],
    "permute": ["gm_ndview_permute"],
    "swapaxes": ["gm_ndview_swapaxes"],
    "slice": ["gm_ndview_slice"],
    "index": ["gm_ndview_index"],
    "getitem": ["gm_ndview_getitem"],
    "squeeze": ["gm_ndview_squeeze"],
    "expand_dims": ["gm_ndview_expand_dims"],
    "view_dtype": ["gm_ndview_view_dtype"],
    "like": ["gm_ndview_like"],
    "split": ["gm_ndview_split"],
}


def load_library(path):
    try:
        return Lib(path)
    except OSError as e:
        text = str(e)
        if "sanitizer" in text.lower() or "asan" in text.lower():
            print("SKIP: %s was built with a sanitizer runtime: %s" % (path, text))
            sys.exit(SKIP)
        if "static TLS" in text and not os.environ.get("GM_NUMPY_DIFF_PRELOADED"):
            # Initial-exec TLS larger than glibc's surplus: the library can be
            # loaded at start-up only. Say so, and carry on preloaded.
            print("NOTE: %s cannot be dlopen'ed (%s); re-running with LD_PRELOAD" % (path, text))
            preload = os.path.abspath(path)
            if os.environ.get("LD_PRELOAD"):
                preload += ":" + os.environ["LD_PRELOAD"]
            env = dict(os.environ, GM_NUMPY_DIFF_PRELOADED="1", LD_PRELOAD=preload)
            sys.stdout.flush()
            os.execve(sys.executable, [sys.executable] + sys.argv, env)
        raise


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("library", help="path of libgpumem.so")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("GM_NUMPY_DIFF_SEED",
                                                                   "20240611")))
    ap.add_argument("--cases", type=int, default=int(os.environ.get("GM_NUMPY_DIFF_CASES",
                                                                    "4000")))
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    ap.add_argument("--show", type=int, default=12, help="mismatch details to print")
    ap.add_argument("--lax", action="store_true",
                    default=os.environ.get("GM_NUMPY_DIFF_LAX", "") not in ("", "0"),
                    help="soft differences (strides of extent-1 axes) do not fail")
    ap.add_argument("--sanitized", action="store_true",
                    help="the library needs a sanitizer runtime: skip (exit 77)")
    return ap.parse_args()


def main():
    args = parse_args()
    if args.sanitized:
        print("SKIP: the library is built with a sanitizer runtime Python cannot load")
        return SKIP
    families = [f for f in args.only.split(",") if f] or list(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print("unknown families: %s (known: %s)" % (unknown, ", ".join(FAMILIES)))
        return 2
    lib = load_library(args.library)
    runnable = [f for f in families if lib.has(*FAMILIES[f])]
    for f in families:
        if f not in runnable:
            print("NOT IMPLEMENTED: %s (missing %s)" % (
                f, ", ".join(n for n in FAMILIES[f] if n in lib.missing)))
    print("numpy %s, seed %d, %d cases, families: %s" % (
        np.__version__, args.seed, args.cases, ", ".join(runnable)))
    rng = random.Random(args.seed)
    base = Base()
    report = Report(args.show, args.lax)
    checker = Checker(lib, base, report, rng)
    t0 = time.time()
    for _ in range(args.cases):
        checker.run_case(random_array(rng, base), runnable)
    return summarize(report, args, families, runnable, time.time() - t0)


def summarize(report, args, families, runnable, seconds):
    total = sum(report.checks.values())
    hard = sum(report.hard.values())
    soft = sum(report.soft.values())
    for f in runnable:
        outcomes = dict(report.outcomes.get(f, {}))
        if report.quirks.get(f):
            outcomes["numpy-quirk"] = report.quirks[f]
        print("  %-12s %6d checks  %4d mismatches  %4d soft  %s" % (
            f, report.checks.get(f, 0), report.hard.get(f, 0), report.soft.get(f, 0),
            " ".join("%s=%d" % kv for kv in sorted(outcomes.items()))))
    if report.hard.get("input"):
        print("  %-12s %6s         %4d mismatches" % ("input", "", report.hard["input"]))
    print("%d cases, %d mismatches, %d soft mismatches%s (%d checks in %.1f s, seed %d)" % (
        args.cases, hard, soft, " tolerated (--lax)" if args.lax else "", total, seconds,
        args.seed))
    for d in report.details:
        print("MISMATCH " + d)
    for d in report.soft_details:
        print("SOFT " + d)
    missing = len(runnable) != len(families)
    if missing:
        print("FAIL: some operations are missing from the library")
    return 1 if report.failed() or missing else 0


if __name__ == "__main__":
    sys.exit(main())
