"""The matmul ceiling: the FLOP/s a large square matmul reaches on this device, per dtype.

MFU divides a model's counted training FLOP/s by this ceiling, so both are measured in the
same run (and, inside a throughput cell, interleaved with the model's timed windows, so a
neighbour's load disturbs both alike).

Example:

    ceiling = MatmulCeiling("float32", size=2048)
    ceiling.measure_gflops()   # one timed repeat, GFLOP/s
"""

from __future__ import annotations

import statistics
import time

import tensorflow as tf

# Square sizes tried when choosing the ceiling; the best median wins. Small sizes fit the
# caches, large ones amortise the packing, so the best size differs between machines.
CPU_SIZES = (1024, 2048, 4096)
GPU_SIZES = (2048, 4096, 8192)
# A size whose single matmul takes longer than this is not grown further (float16 on a CPU
# without native float16 arithmetic can be 100x slower than float32).
_MAX_SECONDS_PER_MATMUL = 1.5


class MatmulCeiling:
    """Times `a @ b` for two random `size`×`size` matrices of `dtype` on the default device.

    Args:
        dtype: "float32", "float16" or "bfloat16".
        size: matrix side.
        min_seconds: one measurement repeats the matmul until at least this long has passed
            (a fast GPU finishes one large matmul in milliseconds).
    """

    def __init__(self, dtype: str, size: int, min_seconds: float = 0.2) -> None:
        self.dtype = dtype
        self.size = int(size)
        self.min_seconds = min_seconds
        self._a = tf.cast(tf.random.uniform([self.size, self.size], -1.0, 1.0), dtype)
        self._b = tf.cast(tf.random.uniform([self.size, self.size], -1.0, 1.0), dtype)
        self._matmul = tf.function(tf.linalg.matmul)
        self._matmul(self._a, self._b)[0, 0].numpy()  # traces, warms the kernels
        self._per_measurement = 1

    @property
    def flops_per_matmul(self) -> int:
        """2·n³: one multiply and one add per inner-product term."""
        return 2 * self.size**3

    def measure_gflops(self) -> float:
        """Runs the matmul (repeated to last `min_seconds`) and returns GFLOP/s."""
        while True:
            started = time.perf_counter()
            for _ in range(self._per_measurement):
                result = self._matmul(self._a, self._b)
            result[0, 0].numpy()  # waits for the device
            seconds = time.perf_counter() - started
            if seconds >= self.min_seconds or self._per_measurement >= 1024:
                return self._per_measurement * self.flops_per_matmul / seconds / 1e9
            self._per_measurement *= 2


def measure_ceiling(dtype: str, sizes: tuple[int, ...], repeats: int) -> dict:
    """Measures each size (median of `repeats`) and returns the best.

    Returns:
        {"dtype", "gflops" (best median), "size" (where it was reached),
        "by_size": {size: median GFLOP/s}}.
    """
    by_size: dict[int, float] = {}
    for size in sizes:
        started = time.perf_counter()
        ceiling = MatmulCeiling(dtype, size)
        by_size[size] = statistics.median(ceiling.measure_gflops() for _ in range(repeats))
        if time.perf_counter() - started > _MAX_SECONDS_PER_MATMUL * (repeats + 1):
            break
    best = max(by_size, key=by_size.get)
    return {"dtype": dtype, "gflops": by_size[best], "size": best, "by_size": by_size}
