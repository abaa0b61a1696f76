#!/usr/bin/env python3
"""The GTC 2017 Numba tutorial's memory-management experiment, run by Numba itself.

The same three cases as examples/tutorial.c (n = 100000 float32, out = x + y
with @vectorize(target='cuda')), timed the same way (best of 5 rounds of the
mean time per call over 200 calls), so that gpumem's figures can be read next
to Numba's on the same GPU:
  (a) host arrays in and out, (b) device arrays in, (c) device arrays in and a
  preallocated device output.
Numba launches asynchronously; gpumem's NULL-stream launch returns when the
kernel has finished, so each case is also timed with cuda.synchronize() after
every call. Prints figures; exits 77 (skip) when numba.cuda cannot run here.
"""
import sys
import time

SKIP = 77

try:
    import numpy as np
    from numba import cuda, vectorize
except ImportError as e:
    print(f"SKIP: numba.cuda cannot be imported: {e}")
    sys.exit(SKIP)

if not cuda.is_available():
    print("SKIP: numba.cuda finds no GPU")
    sys.exit(SKIP)


@vectorize(["float32(float32, float32)"], target="cuda")
def add_ufunc(x, y):
    return x + y


def time_us(step, loops=200, rounds=5):
    step()  # warm up (and compile)
    cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(loops):
            step()
        best = min(best, (time.perf_counter() - t0) / loops * 1e6)
    cuda.synchronize()
    return best


def main():
    n = 100000
    x = np.arange(n).astype(np.float32)
    y = 2 * x
    x_device = cuda.to_device(x)
    y_device = cuda.to_device(y)
    out_device = cuda.device_array(shape=(n,), dtype=np.float32)
    cases = [
        ("(a) host arrays in and out:        ", lambda: add_ufunc(x, y)),
        ("(b) device arrays in:              ", lambda: add_ufunc(x_device, y_device)),
        ("(c) device arrays in, preallocated:", lambda: add_ufunc(x_device, y_device, out=out_device)),
    ]
    import numba

    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    print(f"numba {numba.__version__} on {name}"
          f" (n = {n}; best of 5 rounds of 200 calls)")
    print(f"  {'':36} {'as launched':>12} {'synchronized':>13}")
    for name, step in cases:
        def synced(step=step):
            step()
            cuda.synchronize()

        print(f"  {name} {time_us(step):9.1f} us {time_us(synced):10.1f} us")
    result = add_ufunc(x, y)
    if not np.array_equal(result, 3 * x):
        print("wrong result")
        return 1
    print("  result checked: out[i] == 3 * i for every i")
    return 0


if __name__ == "__main__":
    sys.exit(main())
