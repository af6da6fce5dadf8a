"""Precision: what `auto` picks for described hardware, the mixed-precision lint, loss
scaling under float16 and the divergence guard. Real TensorFlow; other machines are
described through `DeviceDescription` lists, the one seam for hardware."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.trainer import module
from components.trainer.callbacks import (
    DivergenceGuard,
    TrainingDivergedError,
    TrainingStatsCallback,
)
from components.trainer.config import LossScaleSection
from components.trainer.lint import MixedPrecisionLintError, check_mixed_precision
from components.trainer.optimizer import (
    build_optimizer,
    current_loss_scale,
)
from components.trainer.precision import (
    DeviceDescription,
    describe_devices,
    read_cpu_features,
    resolve_precision_policy,
)
from models import available_models, build_model, register_model
from models.registry import unregister_model
from models.user_module import is_user_model

CPU = DeviceDescription("CPU", "/physical_device:CPU:0")
CPU_BF16 = DeviceDescription(
    "CPU", "/physical_device:CPU:0", cpu_features=frozenset({"avx512_bf16"})
)
CPU_AMX = DeviceDescription("CPU", "/physical_device:CPU:0", cpu_features=frozenset({"amx_bf16"}))
TPU = DeviceDescription("TPU", "/physical_device:TPU:0")


def _gpu(major: int, minor: int, index: int = 0) -> DeviceDescription:
    return DeviceDescription("GPU", f"/physical_device:GPU:{index}", (major, minor))


# --- auto precision ------------------------------------------------------------------


@pytest.mark.parametrize(
    "devices, prefer_bfloat16, policy, reason_part",
    [
        ([CPU], False, "float32", "CPU: mixed precision is slower here"),
        ([CPU_BF16], False, "mixed_bfloat16", "AVX512_BF16"),
        ([CPU_AMX], False, "mixed_bfloat16", "AMX_BF16"),
        ([CPU, _gpu(6, 1)], False, "float32", "WARNING: GPU /physical_device:GPU:0"),
        ([CPU_BF16, _gpu(6, 1)], False, "float32", "6.1 < 7.0"),
        ([CPU, _gpu(7, 0)], False, "mixed_float16", "7.0"),
        ([CPU, _gpu(7, 0)], True, "mixed_float16", "7.0"),
        ([CPU, _gpu(8, 0)], False, "mixed_float16", "8.0"),
        ([CPU, _gpu(8, 0)], True, "mixed_bfloat16", "prefer_bfloat16"),
        ([CPU, _gpu(9, 0)], False, "mixed_float16", "9.0"),
        ([CPU, _gpu(9, 0)], True, "mixed_bfloat16", "prefer_bfloat16"),
        ([CPU, _gpu(8, 0), _gpu(6, 1, index=1)], False, "float32", "GPU:1"),
        ([CPU, TPU], False, "mixed_bfloat16", "TPU"),
    ],
)
def test_auto_precision_follows_the_described_devices(
    devices, prefer_bfloat16, policy, reason_part
):
    resolved, reason = resolve_precision_policy("auto", devices, prefer_bfloat16)
    assert resolved == policy
    assert reason_part in reason


def test_cpu_bfloat16_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 fma\n"
    )
    assert read_cpu_features(str(cpuinfo)) == {"avx512_bf16"}
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n")
    assert read_cpu_features(str(cpuinfo)) == frozenset()
    assert read_cpu_features(str(tmp_path / "missing")) == frozenset()


def test_this_machine_resolves_from_its_own_cpu_flags():
    devices = describe_devices()
    cpus = [d for d in devices if d.kind == "CPU"]
    policy, _ = resolve_precision_policy("auto", devices)
    if not any(d.kind in ("GPU", "TPU") for d in devices):
        expected = "mixed_bfloat16" if cpus[0].cpu_features else "float32"
        assert policy == expected


# --- the mixed-precision lint ----------------------------------------------------------


@pytest.fixture
def float16_head_model():
    """A registry model whose last layer is a softmax Dense in the global policy."""

    @register_model("test_float16_head")
    def build(input_shape, num_classes):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(16, activation="relu", name="hidden")(x)
        return keras.Model(
            inputs, keras.layers.Dense(num_classes, activation="softmax", name="head")(x)
        )

    yield "test_float16_head"
    unregister_model("test_float16_head")


def test_lint_rejects_a_last_dense_computing_in_float16_naming_it_and_the_fix(
    float16_head_model, restore_dtype_policy
):
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    with pytest.raises(MixedPrecisionLintError) as caught:
        module.build_training_model(float16_head_model, {}, (8, 8, 1), 10, "mixed_float16")
    message = str(caught.value)
    assert "'head'" in message and "float16" in message
    assert 'dtype="float32"' in message


def test_the_same_model_passes_under_float32(float16_head_model, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("float32")
    module.build_training_model(float16_head_model, {}, (8, 8, 1), 10, "float32")


def test_lint_rejects_a_custom_layer_that_casts_by_itself(restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")

    class HalfCast(keras.layers.Layer):
        def call(self, x):
            return keras.ops.cast(x, "float16")  # ignores the policy's bfloat16

    inputs = keras.Input((4,))
    x = HalfCast(name="half_cast")(inputs)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
    with pytest.raises(MixedPrecisionLintError, match="'half_cast'.*autocasting"):
        check_mixed_precision(keras.Model(inputs, outputs), "mixed_bfloat16")


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_every_registry_model_passes_the_lint(policy, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy(policy)
    shapes = {"seed_cnn": (16, 16, 1), "photo_cnn": (32, 32, 3), "vit": (16, 16, 1),
              "mobilenet_v3_small": (32, 32, 3), "mobilenet_v3_large": (32, 32, 1),
              "efficientnet_v2_b0": (32, 32, 3), "convnext_tiny": (32, 32, 3),
              "resnet50": (16, 16, 3), "unet3d": (8, 8, 8, 1)}
    # A new zoo model gets checked here too. (A user's module file registered by a test that
    # ran earlier in this process is not the zoo's: it is linted when its run starts.)
    assert set(shapes) == {name for name in available_models() if not is_user_model(name)}
    for name, shape in shapes.items():
        model = build_model(name, shape, 2 if name == "unet3d" else 10)
        check_mixed_precision(model, policy)
        assert keras.backend.standardize_dtype(model.outputs[0].dtype) == "float32"


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_the_vit_computes_softmax_and_layernorm_in_float32(policy, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy(policy)
    model = build_model("vit", (16, 16, 3), 4)
    attention = model.get_layer("block1_attention")
    assert attention.compute_dtype == policy.removeprefix("mixed_")
    assert attention.softmax.compute_dtype == "float32"
    assert model.get_layer("block1_ln1").compute_dtype == "float32"
    assert model.get_layer("block1_mlp1").compute_dtype == policy.removeprefix("mixed_")


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_lint_refuses_an_attention_softmax_in_half_precision_naming_the_layer(
        policy, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy(policy)
    inputs = keras.Input(shape=(4, 8))
    x = keras.layers.MultiHeadAttention(2, 4, name="user_attention")(inputs, inputs)
    x = keras.layers.Dense(3)(keras.layers.Flatten()(x))
    outputs = keras.layers.Activation("softmax", dtype="float32")(x)
    with pytest.raises(MixedPrecisionLintError,
                       match=r"Layer 'user_attention' \(MultiHeadAttention\) computes its "
                             r"softmax .* in (b?float16)"):
        check_mixed_precision(keras.Model(inputs, outputs), policy)


# --- loss scaling ---------------------------------------------------------------------


def _float16_model() -> keras.Model:
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    return module.build_training_model("seed_cnn", {"dropout": 0.0}, (8, 8, 1), 10,
                                       "mixed_float16")


def test_inf_gradients_skip_the_step_and_halve_the_scale_which_grows_back(
    restore_dtype_policy,
):
    model = _float16_model()
    optimizer = build_optimizer(
        1e-3, "mixed_float16", LossScaleSection(initial=1024.0, growth_steps=3)
    )
    variables = model.trainable_variables
    optimizer.build(variables)
    before = [v.numpy() for v in variables]

    infinite = [tf.fill(v.shape, np.inf) for v in variables]
    optimizer.apply_gradients(zip(infinite, variables, strict=True))
    for old, variable in zip(before, variables, strict=True):
        np.testing.assert_array_equal(variable.numpy(), old)  # the step was skipped
    assert current_loss_scale(optimizer) == 512.0

    finite = [tf.fill(v.shape, 0.01) for v in variables]
    for _ in range(2):
        optimizer.apply_gradients(zip(finite, variables, strict=True))
    assert current_loss_scale(optimizer) == 512.0
    optimizer.apply_gradients(zip(finite, variables, strict=True))
    assert current_loss_scale(optimizer) == 1024.0  # grew after growth_steps finite steps
    assert not np.array_equal(variables[0].numpy(), before[0])


def test_a_fixed_loss_scale_never_changes_and_skips_nothing(restore_dtype_policy):
    model = _float16_model()
    optimizer = build_optimizer(1e-3, "mixed_float16", LossScaleSection(dynamic=False,
                                                                          initial=128.0))
    assert current_loss_scale(optimizer) == 128.0
    assert not isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    variables = model.trainable_variables
    optimizer.build(variables)
    optimizer.apply_gradients(zip([tf.ones(v.shape) for v in variables], variables, strict=True))
    assert current_loss_scale(optimizer) == 128.0


def _compiled_float16_model(initial_scale: float) -> keras.Model:
    model = _float16_model()
    module.compile_training_model(
        model, "classification", 1e-3, "mixed_float16",
        LossScaleSection(initial=initial_scale), grad_accum_steps=1, xla=False,
    )
    return model


def test_overflowing_steps_are_skipped_during_training_and_are_not_divergence(
    restore_dtype_policy,
):
    # 2^40 makes every float16 gradient overflow until the scale has halved ~25 times.
    model = _compiled_float16_model(initial_scale=2.0**40)
    rng = np.random.default_rng(0)
    images = rng.random((320, 8, 8, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 320)
    history = model.fit(
        images, labels, batch_size=8, epochs=1, verbose=0,
        callbacks=[TrainingStatsCallback(), DivergenceGuard(3, 1e-3, "mixed_float16")],
    )
    skipped = history.history["skipped_steps"][0]
    assert 10 <= skipped < 40
    assert history.history["loss_scale"][0] == 2.0 ** (40 - skipped)
    assert np.isfinite(history.history["loss"][0])
    assert np.isfinite(history.history["gradient_norm"][0])


def test_a_loss_that_stays_nan_stops_training_with_a_diagnostic(restore_dtype_policy):
    model = _compiled_float16_model(initial_scale=2.0**15)
    # NaN weights in the float32 output layer, as a real divergence leaves them: the loss is
    # NaN whatever the CPU's kernels do with NaN inputs (oneDNN's ReLU on AVX512 machines
    # turns a NaN image into zeros, and the loss of NaN images came out finite there).
    output = next(layer for layer in reversed(model.layers) if layer.weights)
    output.weights[-1].assign(np.full(output.weights[-1].shape, np.nan, np.float32))
    images = np.random.default_rng(0).random((64, 8, 8, 1), dtype=np.float32)
    labels = np.zeros(64, np.int64)
    with pytest.raises(TrainingDivergedError) as caught:
        model.fit(images, labels, batch_size=8, epochs=1, verbose=0,
                  callbacks=[DivergenceGuard(3, 1e-3, "mixed_float16")])
    message = str(caught.value)
    assert "3 consecutive steps" in message and "from step 1 (epoch 1, batch 1)" in message
    assert "last loss scale 4096" in message  # halved at each of the three NaN steps
    assert "trainer.learning_rate" in message and "NaN/inf" in message
