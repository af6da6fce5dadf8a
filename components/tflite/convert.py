"""Convert the Trainer's `predict_normalized` signature to TF Lite flatbuffers.

Four variants, from the most faithful to the smallest:

- `fp32`: no optimisation; the reference the others are compared against.
- `fp16`: float16 weights (about half the size), float32 compute on CPU; GPU delegates
  run it in float16.
- `dynamic_int8`: int8 weights, activations quantized on the fly; no calibration data.
  Its hybrid ops quantize their inputs symmetrically (`symmetric_hybrid_inputs`): TF Lite
  2.16's asymmetric path gives wrong outputs for wide layers (below).
- `int8`: full-integer model calibrated on representative images; the only variant that
  runs on microcontrollers and the Edge TPU (with `uint8_io=True` for uint8 input/output).

Example:

    tflite_bytes = convert("/model/Format-Serving", "int8", representative_images=train[:200])
    open("model_int8.tflite", "wb").write(tflite_bytes)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils

SIGNATURE_KEY = "predict_normalized"
# A graph computing in these needs Flex ops (ERROR_NEEDS_FLEX_OPS): not convertible to builtins.
REDUCED_PRECISION_DTYPES = {tf.float16.as_datatype_enum: "float16",
                            tf.bfloat16.as_datatype_enum: "bfloat16"}
VARIANTS = ("fp32", "fp16", "dynamic_int8", "int8")
# A few hundred samples is what the TF Lite guide recommends; beyond that calibration only
# gets slower, so larger arrays are truncated.
MAX_REPRESENTATIVE_SAMPLES = 500


@dataclasses.dataclass(frozen=True)
class SignatureInput:
    """The image input of a SavedModel's `predict_normalized` signature.

    Attributes:
        name: keyword the signature function takes (`images` per the contract).
        height: training image height.
        width: training image width.
        channels: image channels (1 grayscale, 3 RGB).
    """

    name: str
    height: int
    width: int
    channels: int

    @property
    def input_size(self) -> tuple[int, int]:
        """`(height, width)`, the order `tf.image.resize` expects."""
        return (self.height, self.width)


def read_signature_input(saved_model_dir: str, loaded: tf.Module | None = None
                         ) -> SignatureInput:
    """Reads the image input spec of the `predict_normalized` signature (`loaded`: the
    SavedModel already loaded).

    The spec is the only place the serving model records its training size and channels,
    so reading it needs no other artifact.

    Args:
        saved_model_dir: directory holding `saved_model.pb`.

    Returns:
        The input name, height, width and channels.

    Raises:
        ValueError: when the signature is missing or its input is not float32
            `[None, H, W, C]` with known H, W, C.
    """
    _, signature_input = _load_signature(saved_model_dir, loaded)
    return signature_input


def reduced_precision_dtypes(saved_model_dir: str, loaded: tf.Module | None = None
                             ) -> list[str]:
    """The reduced-precision dtypes (float16, bfloat16) that the `predict_normalized`
    signature computes in; [] for a float32 graph. A `mixed` serving model computes in its
    training policy's dtype, so TF Lite converts its float32 rebuild instead. `loaded`: the
    SavedModel already loaded."""
    loaded = tf.saved_model.load(saved_model_dir) if loaded is None else loaded
    graph_def = loaded.signatures[SIGNATURE_KEY].graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    found = {
        REDUCED_PRECISION_DTYPES[value.type]
        for node in nodes
        for value in node.attr.values()
        if value.type in REDUCED_PRECISION_DTYPES
    }
    return sorted(found)


def convert(
    saved_model_dir: str,
    variant: str,
    representative_images: np.ndarray | None = None,
    uint8_io: bool = False,
    loaded: tf.Module | None = None,
) -> bytes:
    """Converts the SavedModel's `predict_normalized` signature to a TF Lite model.

    Args:
        saved_model_dir: directory holding `saved_model.pb` (the Model artifact's
            `Format-Serving`).
        variant: one of `VARIANTS`.
        representative_images: float32 `[N, H, W, C]` normalized training images in [0, 1];
            required for `int8`, ignored otherwise. 100-200 are enough.
        uint8_io: for `int8` only: make the model take and return uint8 instead of int8,
            as microcontroller and Edge TPU pipelines expect.
        loaded: `tf.saved_model.load(saved_model_dir)` when the caller has it already
            (one load for every variant).

    Returns:
        The TF Lite flatbuffer.

    Raises:
        ValueError: unknown variant, `int8` without representative images, or `uint8_io`
            with a variant other than `int8`.
    """
    if variant not in VARIANTS:
        raise ValueError(
            f"Unknown TF Lite variant {variant!r}; valid variants are {list(VARIANTS)}."
        )
    if uint8_io and variant != "int8":
        raise ValueError(
            f"uint8_io applies to the full-integer 'int8' variant only; received "
            f"variant={variant!r}."
        )
    converter = _signature_converter(saved_model_dir, loaded)
    if variant == "fp16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif variant == "dynamic_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return symmetric_hybrid_inputs(converter.convert())
    elif variant == "int8":
        images = _check_representative_images(representative_images)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: _one_image_batches(images)
        # Only int8 builtins: conversion fails loudly instead of silently keeping a float
        # op that an integer-only accelerator could not run.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if uint8_io:
            converter.inference_input_type = tf.uint8
            converter.inference_output_type = tf.uint8
    return converter.convert()


def symmetric_hybrid_inputs(tflite_model: bytes) -> bytes:
    """The model with every hybrid op set to quantize its float input symmetrically.

    The converter marks dynamic-range FULLY_CONNECTED ops `asymmetric_quantize_inputs`.
    On TF Lite 2.16 that path is wrong for a wide layer whose weight rows are mostly of
    one sign, which training produces: the 16,384 x 128 Dense of the seed CNN on 64x64
    photos came out up to 10 off (values of at most 6), so dynamic_int8 flipped 12 % of
    the images full int8 and fp32 classified alike; a synthetic 16,384-input layer
    reproduces it, a 4,096-input one does not (tests/integration/test_tflite.py). Symmetric
    input quantization (the option off) computes the same layer within 0.1 %. It costs
    at most one bit of input resolution for inputs that are all of one sign.
    """
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(tflite_model))
    changed = False
    for subgraph in model.subgraphs:
        for operator in subgraph.operators:
            if getattr(operator.builtinOptions, "asymmetricQuantizeInputs", False):
                operator.builtinOptions.asymmetricQuantizeInputs = False
                changed = True
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)) if changed else tflite_model


def _signature_converter(saved_model_dir: str, loaded: tf.Module | None = None
                         ) -> tf.lite.TFLiteConverter:
    """A converter for `predict_normalized`, with the batch dimension fixed to 1.

    `TFLiteConverter.from_saved_model(dir, signature_keys=[...])` aborts the whole process
    (`error: missing attribute 'value'`, `LLVM ERROR: Failed to infer result type(s)`) on
    a Keras 3 model saved inside a `tf.Module` with TF 2.16; an abort cannot be caught, so
    it would kill the pipeline step. Converting a concrete function that calls the loaded
    signature works for that layout and for `model.export` archives alike.

    The batch dimension is fixed to 1 because the signature's `None` leaves dynamic-shaped
    tensors that XNNPACK refuses to delegate (about 2x slower here) and that the Edge TPU
    compiler and TF Lite Micro reject. The TF Lite model has one signature,
    `serving_default` (input `images` `[1, H, W, C]`, output `probabilities` `[1, K]`),
    the key TF Lite runtimes use by default.
    """
    loaded, signature_input = _load_signature(saved_model_dir, loaded)
    predict = loaded.signatures[SIGNATURE_KEY]
    single_image = tf.TensorSpec(
        [1, signature_input.height, signature_input.width, signature_input.channels],
        tf.float32,
        name=signature_input.name,
    )

    @tf.function(input_signature=[single_image])
    def predict_one(images: tf.Tensor) -> dict[str, tf.Tensor]:
        return predict(**{signature_input.name: images})

    return tf.lite.TFLiteConverter.from_concrete_functions(
        [predict_one.get_concrete_function()], loaded
    )


def _load_signature(saved_model_dir: str, loaded: tf.Module | None = None
                    ) -> tuple[tf.Module, SignatureInput]:
    """Loads the SavedModel (unless `loaded` is it) and validates the input of its
    `predict_normalized` signature."""
    if loaded is None:
        loaded = tf.saved_model.load(saved_model_dir)
    if SIGNATURE_KEY not in loaded.signatures:
        raise ValueError(
            f"SavedModel {saved_model_dir!r} has no {SIGNATURE_KEY!r} signature; it has "
            f"{sorted(loaded.signatures.keys())}."
        )
    _, input_specs = loaded.signatures[SIGNATURE_KEY].structured_input_signature
    if len(input_specs) != 1:
        raise ValueError(
            f"Signature {SIGNATURE_KEY!r} of {saved_model_dir!r} must take one image input; "
            f"received inputs {sorted(input_specs)}."
        )
    ((name, spec),) = input_specs.items()
    shape = spec.shape.as_list() if spec.shape.rank is not None else None
    if spec.dtype != tf.float32 or shape is None or len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            f"Signature {SIGNATURE_KEY!r} of {saved_model_dir!r} must take float32 images of "
            f"shape [None, H, W, C] with known H, W, C; received {spec.dtype.name} "
            f"shape={shape} for input {name!r}."
        )
    signature_input = SignatureInput(name=name, height=shape[1], width=shape[2], channels=shape[3])
    return loaded, signature_input


def _check_representative_images(images: np.ndarray | None) -> np.ndarray:
    """Validates calibration images and returns them as float32, at most the cap."""
    if images is None or len(images) == 0:
        raise ValueError(
            "The 'int8' variant needs representative_images (normalized training images, "
            f"100-200 are enough); received {None if images is None else images.shape}."
        )
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4:
        raise ValueError(
            f"representative_images must be [N, H, W, C]; received shape {images.shape}."
        )
    return images[:MAX_REPRESENTATIVE_SAMPLES]


def _one_image_batches(images: np.ndarray) -> Iterator[list[np.ndarray]]:
    """Yields batches of one image, the batch size the converted model runs with."""
    for image in images:
        yield [image[np.newaxis]]
