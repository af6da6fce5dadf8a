"""Kernel efficiency: each counted convolution and dense pass of a model, timed alone.

MFU says how much of the matmul ceiling a whole training step reaches; this says why not
more. Every forward, input-gradient and weight-gradient pass of every Conv2D and Dense
layer (the passes the FLOP counter counts) is run in isolation at the layer's real shapes
and batch, with the same TensorFlow kernels the train step uses (oneDNN on x86 CPUs, cuDNN
and cuBLAS on GPUs). The sum of these kernel times against the measured step time is the
share of the step spent outside them (pooling, activations, the optimizer update, loss and
metrics, framework overhead), which MFU does not count as useful work.

Example:

    rows = kernel_efficiency(model, batch_size=32, ceiling_gflops=230.0)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tools.lab.flops import count_flops

_REPEATS = 5
_MIN_SECONDS = 0.05


def _time_op(function: Callable[[], tf.Tensor]) -> float:
    """Median seconds of one call (calls batched until a measurement lasts _MIN_SECONDS)."""
    compiled = tf.function(function)
    compiled().numpy()
    calls, samples = 1, []
    while len(samples) < _REPEATS:
        started = time.perf_counter()
        for _ in range(calls):
            result = compiled()
        result.numpy()
        seconds = time.perf_counter() - started
        if seconds < _MIN_SECONDS and calls < 1024:
            calls *= 2
            continue
        samples.append(seconds / calls)
    return statistics.median(samples)


def _first_element(tensor: tf.Tensor) -> tf.Tensor:
    # Keeps the op alive and gives the sync point a tiny tensor to copy.
    return tf.reshape(tensor, [-1])[:1]


def _conv2d_passes(layer: keras.layers.Conv2D, input_shape: tuple, batch: int, dtype: str):
    x = tf.random.uniform([batch, *input_shape[1:]], dtype=dtype)
    w = tf.cast(layer.kernel, dtype)
    strides = [1, *layer.strides, 1]
    padding = layer.padding.upper()
    y = tf.nn.conv2d(x, w, strides, padding)
    g = tf.random.uniform(y.shape, dtype=dtype)
    return {
        "forward": lambda: _first_element(tf.nn.conv2d(x, w, strides, padding)),
        "input gradient": lambda: _first_element(tf.raw_ops.Conv2DBackpropInput(
            input_sizes=tf.shape(x), filter=w, out_backprop=g, strides=strides, padding=padding
        )),
        "weight gradient": lambda: _first_element(tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=tf.shape(w), out_backprop=g, strides=strides, padding=padding
        )),
    }


def _dense_passes(layer: keras.layers.Dense, input_shape: tuple, batch: int, dtype: str):
    rows = batch
    for d in input_shape[1:-1]:
        rows *= int(d)
    x = tf.random.uniform([rows, int(input_shape[-1])], dtype=dtype)
    w = tf.cast(layer.kernel, dtype)
    g = tf.random.uniform([rows, layer.units], dtype=dtype)
    return {
        "forward": lambda: _first_element(tf.matmul(x, w)),
        "input gradient": lambda: _first_element(tf.matmul(g, w, transpose_b=True)),
        "weight gradient": lambda: _first_element(tf.matmul(x, g, transpose_a=True)),
    }


def kernel_efficiency(
    model: keras.Model, batch_size: int, ceiling_gflops: float
) -> list[dict[str, Any]]:
    """Times every counted pass of the model's Conv2D and Dense layers alone.

    Args:
        model: a built functional model (its layers' input shapes are read from it).
        batch_size: the batch of the train step.
        ceiling_gflops: the matmul ceiling to express each pass's rate against.

    Returns:
        One row per pass: {"layer", "pass", "gflop", "ms", "gflops", "of_ceiling"}; passes
        the train step does not run (the first layer's input gradient) are left out.
    """
    dtype = keras.mixed_precision.global_policy().compute_dtype
    counted = {layer.name: layer for layer in count_flops(model).layers}
    rows = []
    for layer in model.layers:
        if layer.name not in counted or not layer._inbound_nodes:
            continue
        input_shape = tuple(layer._inbound_nodes[0].input_tensors[0].shape)
        if type(layer) is keras.layers.Conv2D and layer.data_format == "channels_last":
            passes = _conv2d_passes(layer, input_shape, batch_size, dtype)
        elif type(layer) is keras.layers.Dense:
            passes = _dense_passes(layer, input_shape, batch_size, dtype)
        else:
            continue
        flops = counted[layer.name]
        if flops.training < 3 * flops.forward:  # no input gradient for this layer
            passes.pop("input gradient")
        if flops.training < 2 * flops.forward:  # frozen: no weight gradient either
            passes.pop("weight gradient")
        for name, function in passes.items():
            seconds = _time_op(function)
            gflop = flops.forward * batch_size / 1e9
            rows.append({
                "layer": layer.name,
                "pass": name,
                "gflop": gflop,
                "ms": seconds * 1000.0,
                "gflops": gflop / seconds,
                "of_ceiling": gflop / seconds / ceiling_gflops,
            })
    return rows


def optimizer_update_ms(model: keras.Model) -> float:
    """Milliseconds of one update of the model's own optimizer (e.g. Adam) on all trainable
    weights, with gradients of ones, timed alone. Memory-bound work MFU does not count.

    It updates the model's weights and optimizer state: call it after the timed windows.
    """
    weights = model.trainable_variables
    gradients = [tf.ones_like(w) for w in weights]

    def update() -> tf.Tensor:
        model.optimizer.apply_gradients(zip(gradients, weights, strict=True))
        return _first_element(tf.convert_to_tensor(weights[0]))

    return _time_op(update) * 1000.0
