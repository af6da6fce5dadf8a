"""Mixed-precision lint: refuse models that would train badly under the dtype policy.

Checked when the model is built, before any training step:

1. every layer that produces a model output computes in float32: softmax / sigmoid and the
   loss in float16 overflow or underflow and give NaN losses;
2. every layer's variables are float32 under a mixed policy (float16 variables lose small
   updates), and every layer computes in the policy's compute dtype or in float32;
3. every layer returns what it computes in: a custom layer that casts to another low
   precision itself does not follow Keras autocasting;
4. no layer computes a softmax inside it (attention) in float16 or bfloat16: summed over
   every token, exponentials in 11 (or 8) bits of mantissa lose the small attention
   weights, and the scores before it overflow float16 (`keras.layers.MultiHeadAttention`
   under a mixed policy does; models/vit.py's `SelfAttention` computes it in float32).

Example:

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model = build_model("seed_cnn", (16, 16, 1), 10)
    check_mixed_precision(model, "mixed_float16")  # raises MixedPrecisionLintError if unsafe
"""

from __future__ import annotations

from collections.abc import Iterator

import keras

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class MixedPrecisionLintError(ValueError):
    """A model is unsafe under its dtype policy; the message names the layer and the fix."""


def check_mixed_precision(model: keras.Model, policy_name: str) -> None:
    """Raises `MixedPrecisionLintError` if `model` is unsafe under the `policy_name` policy.

    Args:
        model: a built Keras model (functional, possibly with nested models).
        policy_name: the global dtype policy it was built under, e.g. "mixed_float16".

    Raises:
        MixedPrecisionLintError: naming the first offending layer, what is wrong and the fix.
    """
    problems = find_mixed_precision_problems(model, policy_name)
    if problems:
        more = f" ({len(problems) - 1} more problem(s) after fixing this one)" if len(
            problems
        ) > 1 else ""
        raise MixedPrecisionLintError(problems[0] + more)


def find_mixed_precision_problems(model: keras.Model, policy_name: str) -> list[str]:
    """Returns one message per problem found (empty when the model is safe)."""
    policy = keras.DTypePolicy(policy_name)
    compute_dtype = policy.compute_dtype
    mixed = compute_dtype != policy.variable_dtype
    problems: list[str] = []
    output_layers = {id(layer) for layer in _output_layers(model)}
    for layer in _layers(model):
        if isinstance(layer, keras.Model):
            continue  # its own layers are checked one by one
        where = f"Layer {layer.name!r} ({type(layer).__name__})"
        if id(layer) in output_layers and layer.compute_dtype != "float32":
            problems.append(
                f"{where} computes the model's output in {layer.compute_dtype} under "
                f"{policy_name}: a softmax/sigmoid output and the loss in "
                f"{layer.compute_dtype} overflow or underflow and give NaN losses. Fix: build "
                f'that layer with dtype="float32" (e.g. keras.layers.Dense(..., '
                f'dtype="float32")), or end the model with keras.layers.Activation('
                f'"softmax", dtype="float32")'
            )
            continue
        if mixed and layer.weights and layer.variable_dtype != "float32":
            problems.append(
                f"{where} stores its variables in {layer.variable_dtype} under {policy_name}: "
                "small updates are lost in low-precision weights. Fix: drop the layer's "
                f'dtype argument or pass dtype="{policy_name}" so its variables stay float32'
            )
            continue
        if layer.compute_dtype not in (compute_dtype, "float32"):
            problems.append(
                f"{where} computes in {layer.compute_dtype} but the policy is {policy_name} "
                f"(compute dtype {compute_dtype}). Fix: drop the layer's dtype argument, or "
                'pass dtype="float32" where full precision is needed'
            )
            continue
        softmax = _low_precision_softmax(layer)
        if mixed and softmax is not None:
            problems.append(
                f"{where} computes its softmax {softmax.name!r} in {softmax.compute_dtype} "
                f"under {policy_name}: attention weights summed over every token lose "
                "precision (and the scores overflow in float16). Fix: compute the "
                'softmax in float32 (keras.layers.Softmax(dtype="float32"), as models.vit.'
                'SelfAttention does), or build the layer with dtype="float32"'
            )
            continue
        for dtype in _output_dtypes(layer):
            if dtype in _FLOAT_DTYPES and dtype not in (layer.compute_dtype, "float32"):
                problems.append(
                    f"{where} returns {dtype} although it computes in {layer.compute_dtype}: "
                    "a custom layer must follow Keras autocasting. Fix: compute in "
                    "self.compute_dtype (inputs arrive cast to it) instead of casting to "
                    f"{dtype} yourself"
                )
                break
    return problems


def _layers(model: keras.Model) -> Iterator[keras.layers.Layer]:
    """Every layer of `model`, nested models' layers included, depth first."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _layers(layer)


def _low_precision_softmax(layer: keras.layers.Layer) -> keras.layers.Layer | None:
    """A Softmax sublayer of `layer` (at any depth, e.g. MultiHeadAttention's) that computes
    in less than float32, or None."""
    for sublayer in _sublayers(layer):
        if isinstance(sublayer, keras.layers.Softmax) and sublayer.compute_dtype in (
                "float16", "bfloat16"):
            return sublayer
    return None


def _sublayers(layer: keras.layers.Layer, seen: set[int] | None = None
               ) -> Iterator[keras.layers.Layer]:
    """The layers a layer holds as attributes (Keras tracks them so), depth first."""
    seen = seen if seen is not None else {id(layer)}
    for value in vars(layer).values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, keras.layers.Layer) and id(item) not in seen:
                seen.add(id(item))
                yield item
                yield from _sublayers(item, seen)


def _output_layers(model: keras.Model) -> Iterator[keras.layers.Layer]:
    """The layers whose outputs are the model's outputs (inside nested models too)."""
    names = getattr(model, "output_names", None)  # a functional model's output layers
    layers = [model.get_layer(name) for name in names] if names else model.layers[-1:]
    for layer in layers:
        if isinstance(layer, keras.Model):
            yield from _output_layers(layer)
        else:
            yield layer


def _output_dtypes(layer: keras.layers.Layer) -> list[str]:
    """The dtypes of the symbolic tensors the layer produced when the model was built
    (at its first call: Keras' `Layer.output`)."""
    try:
        outputs = layer.output
    except (AttributeError, ValueError):  # never called symbolically
        return []
    dtypes = []
    for tensor in keras.tree.flatten(outputs):
        dtype = getattr(tensor, "dtype", None)
        if dtype is not None:
            dtypes.append(keras.backend.standardize_dtype(dtype))
    return dtypes
