"""Training FLOPs per sample, counted from a Keras model's layers.

Only the multiply-accumulate work of convolutions and dense layers is counted (one
multiply-add = 2 FLOPs), as model FLOP utilisation (MFU) is usually defined: it is the
work a matmul unit can do. Bias adds, activations, normalisation, pooling and the
optimizer update are left out, so MFU slightly understates how busy the machine is and
never overstates it.

Forward FLOPs per sample, for output spatial size `out` (product of the spatial output
dimensions), kernel size `K` (product of its dimensions), `Cin` input and `Cout` output
channels, `g` groups:

    Conv1D/2D/3D             2 · out · K · (Cin / g) · Cout     (2D: 2·H·W·K²·Cin·Cout)
    Conv1D/2D/3DTranspose    2 · in  · K · Cin · Cout           (each input pixel scatters a
                                                                 K·Cout patch; `in` = input
                                                                 spatial size)
    DepthwiseConv1D/2D       2 · out · K · Cin · depth_multiplier
    SeparableConv1D/2D       depthwise as above + 2 · out · Cin · depth_multiplier · Cout
    Dense                    2 · rows · Din · units              (rows = product of the
                                                                 non-batch leading dims, 1
                                                                 for a plain vector)

Training = forward + gradient w.r.t. the weights (same FLOPs as the forward, if the layer is
trainable) + gradient w.r.t. the layer's input (same FLOPs again, but only if something
upstream is trainable: the first convolution on the images needs no input gradient and
TensorFlow prunes it). So a middle layer costs 3× its forward pass and the first one 2×.

Example:

    count = count_flops(model)
    count.training_per_sample / 1e6   # MFLOP per image for one training step
"""

from __future__ import annotations

import dataclasses
import math

import keras


@dataclasses.dataclass(frozen=True)
class LayerFlops:
    """The counted FLOPs of one layer call, per sample.

    Attributes:
        name: layer name, nested models' layers as `outer/inner`.
        kind: the layer class name.
        forward: forward-pass FLOPs.
        training: forward + weight gradient + input gradient, as applicable.
    """

    name: str
    kind: str
    forward: int
    training: int


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """Per-sample FLOPs of a model, with the per-layer breakdown."""

    layers: tuple[LayerFlops, ...]

    @property
    def forward_per_sample(self) -> int:
        """Forward-pass FLOPs for one sample (inference)."""
        return sum(layer.forward for layer in self.layers)

    @property
    def training_per_sample(self) -> int:
        """FLOPs of one training step, per sample (forward + backward)."""
        return sum(layer.training for layer in self.layers)

    def to_dict(self) -> dict:
        """JSON-able summary with the per-layer breakdown."""
        return {
            "forward_per_sample": self.forward_per_sample,
            "training_per_sample": self.training_per_sample,
            "layers": [dataclasses.asdict(layer) for layer in self.layers],
        }


def count_flops(model: keras.Model) -> FlopCount:
    """Counts the convolution and dense FLOPs of `model` per sample (see module docstring).

    Raises:
        ValueError: if the model is not built (its input shape is unknown).
    """
    if not model.built or not model.inputs:
        raise ValueError(f"The model must be built with a known input. Received: {model.name}")
    return FlopCount(tuple(_count_graph(model, upstream_trainable=False, prefix="")))


def _graph_inputs(model: keras.Model) -> list:
    functional = getattr(model, "_functional", None)  # a built Sequential wraps one
    return list((functional or model).inputs)


def _count_graph(model: keras.Model, upstream_trainable: bool, prefix: str) -> list[LayerFlops]:
    """Walks the model's layer calls in topological order (the order of `model.layers`).

    A tensor "carries a gradient" when a trainable weight lies upstream of it; a layer
    call needs its input gradient exactly when one of its inputs carries one.
    """
    carries_gradient = {id(tensor): upstream_trainable for tensor in _graph_inputs(model)}
    counted: list[LayerFlops] = []
    for layer in model.layers:
        for node in layer._inbound_nodes:
            inputs = list(node.input_tensors)
            if not inputs or any(id(tensor) not in carries_gradient for tensor in inputs):
                continue  # a call from another graph (the layer is shared with another model)
            needs_input_gradient = any(carries_gradient[id(tensor)] for tensor in inputs)
            name = f"{prefix}{layer.name}"
            if isinstance(layer, keras.Model):
                counted.extend(_count_graph(layer, needs_input_gradient, f"{name}/"))
            else:
                forward = _forward_flops(layer, inputs[0].shape, node.output_tensors[0].shape)
                if forward:
                    multiplier = 1 + _is_trainable(layer) + needs_input_gradient
                    counted.append(
                        LayerFlops(name, type(layer).__name__, forward, forward * multiplier)
                    )
            output_gradient = needs_input_gradient or _is_trainable(layer)
            for tensor in node.output_tensors:
                carries_gradient[id(tensor)] = output_gradient
    return counted


def _is_trainable(layer: keras.Layer) -> bool:
    return layer.trainable and bool(layer.trainable_weights)


def _spatial(shape: tuple, data_format: str) -> list[int]:
    """The spatial dimensions of a batched shape `(batch, ..., channels)` or channels-first."""
    dims = shape[2:] if data_format == "channels_first" else shape[1:-1]
    return [int(d) for d in dims]


def _channels(shape: tuple, data_format: str) -> int:
    return int(shape[1] if data_format == "channels_first" else shape[-1])


def _forward_flops(layer: keras.Layer, input_shape: tuple, output_shape: tuple) -> int:
    """Forward FLOPs per sample of one layer call; 0 for layers that are not counted."""
    # Check the subclasses before their bases: transposed, depthwise and separable
    # convolutions all derive from keras' base convolution in some versions.
    if isinstance(layer, (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose,
                          keras.layers.Conv3DTranspose)):
        data_format = layer.data_format
        kernel = math.prod(layer.kernel_size)
        return (2 * math.prod(_spatial(input_shape, data_format)) * kernel
                * _channels(input_shape, data_format) * layer.filters)
    if isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
        data_format = layer.data_format
        out = math.prod(_spatial(output_shape, data_format))
        depthwise_channels = _channels(input_shape, data_format) * layer.depth_multiplier
        depthwise = 2 * out * math.prod(layer.kernel_size) * depthwise_channels
        return depthwise + 2 * out * depthwise_channels * layer.filters
    if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
        data_format = layer.data_format
        return (2 * math.prod(_spatial(output_shape, data_format)) * math.prod(layer.kernel_size)
                * _channels(input_shape, data_format) * layer.depth_multiplier)
    if isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        data_format = layer.data_format
        groups = getattr(layer, "groups", 1) or 1
        return (2 * math.prod(_spatial(output_shape, data_format)) * math.prod(layer.kernel_size)
                * (_channels(input_shape, data_format) // groups) * layer.filters)
    if isinstance(layer, keras.layers.Dense):
        rows = math.prod(int(d) for d in input_shape[1:-1])
        return 2 * rows * int(input_shape[-1]) * layer.units
    return 0
