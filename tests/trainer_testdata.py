"""Shared by the Trainer tests: tiny digits Examples in the ingest layout, and FnArgs.

Also the entry point of the Trainer tests' worker processes (multi-worker, logical devices,
kill and resume):

    python tests/unit/trainer_testdata.py SPEC.json

SPEC: {"fn_args": {...FnArgs fields...}, "tf_config": {...} | null, "logical_cpus": int,
"weights_out": path | null, "kill_after_epoch": int | null, "result_out": path | null},
or {"distillation_steps": {...distillation_first_steps' arguments...}, "logical_cpus": int,
"result_out": path}.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

# mptfx is imported inside the functions: run as a script, this file puts the repository
# on sys.path first (the end of this file).

LABEL_NAMES = [str(d) for d in range(10)]
EVAL_FRACTION = 0.2


def write_digits_examples(root: str, count: int, shard_mb: float | None = None,
                          encoding: str = "png") -> str:
    """Writes `count` real 8x8 digits with the Ingest's writer under root; returns the uri.
    `shard_mb` (default: the Ingest's) sets the shard size, so a small one gives each split
    several files; `encoding` ("png" or "jpeg") is how each image file is encoded."""
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    order = np.random.default_rng(0).permutation(len(images))[:count]
    encode = tf.io.encode_jpeg if encoding == "jpeg" else tf.io.encode_png
    encoded = [(encode(images[i]).numpy(), int(digits.target[i]), (8, 8, 1)) for i in order]
    folder = "examples" if encoding == "png" else f"examples-{encoding}"
    return _write_examples(root, encoded, LABEL_NAMES, "png", shard_mb, folder)


def write_photo_examples(root: str, count: int, size: int = 224) -> str:
    """Writes `count` JPEG photos of size x size px (quality 90), crops of scikit-learn's
    two real photographs (427 x 640 px; enlarged by a whole factor first when `size` does
    not fit), labelled by the photograph they come from; returns the uri."""
    import tensorflow as tf
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    factor = -(-(size + 1) // min(photo.shape[0] for photo in photos))  # ceiling
    if factor > 1:
        photos = [np.repeat(np.repeat(photo, factor, axis=0), factor, axis=1) for photo in photos]
    rng = np.random.default_rng(0)
    encoded = []
    for i in range(count):
        label = i % len(photos)
        photo = photos[label]
        top = int(rng.integers(0, photo.shape[0] - size))
        left = int(rng.integers(0, photo.shape[1] - size))
        crop = np.ascontiguousarray(photo[top:top + size, left:left + size])
        encoded.append((tf.io.encode_jpeg(crop, quality=90).numpy(), label, crop.shape))
    return _write_examples(root, encoded, ["china", "flower"], "jpg")


def _write_examples(root: str, encoded: list[tuple[bytes, int, tuple[int, ...]]],
                    label_names: list[str], extension: str, shard_mb: float | None = None,
                    folder: str = "examples") -> str:
    """Writes (file bytes, label, (height, width, channels)) with the Ingest's writer under
    `root/folder`, the first EVAL_FRACTION to the eval split; returns the Examples uri."""
    from components.examples_format import (
        EVAL_SPLIT,
        LABEL_NAMES_FIELD,
        TRAIN_SPLIT,
        labels_path,
    )
    from components.ingest.reader import DecodedImage
    from components.ingest.writer import SplitWriters, build_example, write_json

    num_eval = int(round(len(encoded) * EVAL_FRACTION))
    uri = os.path.join(root, folder)
    sizes = {} if shard_mb is None else {"shard_mb": shard_mb}
    with SplitWriters(uri, [EVAL_SPLIT, TRAIN_SPLIT], **sizes) as writers:
        for i, (data, label, shape) in enumerate(encoded):
            image = DecodedImage(i, data, *(int(d) for d in shape))
            name = label_names[label]
            writers.write(EVAL_SPLIT if i < num_eval else TRAIN_SPLIT, build_example(
                image, label, name, f"{name}/img_{i:04d}.{extension}"))
    write_json(labels_path(uri), {LABEL_NAMES_FIELD: label_names})
    return uri


def fn_args_dict(examples_uri: str, out: str, model: str = "seed_cnn",
                 input_size: tuple[int, int] | str = (8, 8), params: dict | None = None,
                 **trainer: object) -> dict:
    """The FnArgs fields run_fn reads, as a JSON-able dict (see `make_fn_args`)."""
    from components.examples_format import EVAL_SPLIT, TRAIN_SPLIT, split_dir

    return {
        # As TFX passes them: every file of the split folder.
        "train_files": [os.path.join(split_dir(examples_uri, TRAIN_SPLIT), "*")],
        "eval_files": [os.path.join(split_dir(examples_uri, EVAL_SPLIT), "*")],
        "serving_model_dir": os.path.join(out, "model", "Format-Serving"),
        "model_run_dir": os.path.join(out, "model_run"),
        "base_model": trainer.pop("base_model", None),
        "custom_config": {
            "data": {"channels": "auto"},
            "model": {"name": model, "params": params or {},
                      "input_size": input_size if input_size == "auto" else list(input_size)},
            "trainer": {"epochs": 2, "batch_size": 32, "precision": "float32", **trainer},
            "export": {"serving_precision": "float32"},
        },
    }


def make_fn_args(fields: dict, light: bool = False):
    """FnArgs from `fn_args_dict`'s output; `light` gives a plain namespace with the same
    attributes instead (worker processes: importing TFX costs ~25 CPU seconds)."""
    if light:
        import types

        return types.SimpleNamespace(**fields)
    from tfx.components.trainer.fn_args_utils import FnArgs  # tfx.v1 costs 4 s more

    return FnArgs(**fields)


def fit_fields(fields: dict, extra_callbacks: tuple | list = ()):
    """The Trainer's fit step (`fit.fit_model`) on `fn_args_dict`'s output, with the runtime
    the trainer section resolves to on this machine; returns the FitResult (raises what
    fit_model raises, e.g. the one-line ValueError of a weights file that does not fit)."""
    from components.trainer.config import TrainerConfig
    from components.trainer.fit import fit_model
    from components.trainer.runtime import resolve_runtime, resolve_task

    fn_args = make_fn_args(fields, light=True)
    config = TrainerConfig.from_custom_config(fields["custom_config"])
    task = resolve_task(config.model, config.data, fn_args.train_files)
    return fit_model(fn_args, config.trainer, resolve_runtime(config.trainer, {}), task,
                     fields["model_run_dir"], {}, extra_callbacks=extra_callbacks)


def train_mixed_serving(root: str, count: int = 300):
    """`train_and_export` under mixed_bfloat16 (the reduced precision this CPU runs at a
    usable speed), 3 epochs, with `export.serving_precision: mixed`, on `count` digits
    written under `root`; returns (fn_args, result, examples_uri)."""
    from components.trainer import module

    examples_uri = write_digits_examples(root, count)
    # A constant rate without label smoothing: 3 epochs of cosine decay from a warm-up leave
    # the model too weak for the tests' "better than chance" checks.
    fields = fn_args_dict(examples_uri, os.path.join(root, "out"), epochs=3,
                          precision="mixed_bfloat16", xla="off", autotune="off",
                          lr_schedule="constant", warmup_epochs=0, label_smoothing=0.0)
    fields["custom_config"]["export"]["serving_precision"] = "mixed"
    fn_args = make_fn_args(fields)
    return fn_args, module.train_and_export(fn_args), examples_uri


def distillation_first_steps(examples_uri: str, teacher: str, cells: list[list[str]],
                             global_batch: int = 32) -> list[dict]:
    """One train step of a seed_cnn student (dropout off) distilled from the teacher at
    `teacher`, from the same float32 weights on the same real batch, for each [policy,
    strategy] cell ("one_device", or "mirrored" over every logical CPU), the teacher built
    under the cell's policy too. Returns, per cell, the step's `distillation_loss`, `loss`,
    `gradient_norm` (unscaled) and `step_skipped` as the train step reports them."""
    import keras
    import tensorflow as tf

    from components.examples_format import TRAIN_SPLIT, split_dir
    from components.trainer.build import build_training_model, compile_training_model
    from components.trainer.config import LossScaleSection
    from components.trainer.data import make_dataset
    from components.trainer.distill import Distillation
    from components.trainer.teacher import build_teacher, read_teacher

    files = [os.path.join(split_dir(examples_uri, TRAIN_SPLIT), "*")]
    images, labels = next(iter(make_dataset(files, (16, 16), 1, global_batch, shuffle=False,
                                            seed=0, cache_max_mb=0)))
    keras.mixed_precision.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    start = build_training_model("seed_cnn", {"dropout": 0.0}, (16, 16, 1), 10,
                                 "float32").get_weights()
    source = read_teacher(teacher)
    cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
    rows = []
    for policy, strategy_name in cells:
        strategy = (tf.distribute.MirroredStrategy(cpus) if strategy_name == "mirrored"
                    else tf.distribute.OneDeviceStrategy(cpus[0]))
        keras.mixed_precision.set_dtype_policy(policy)
        with strategy.scope():
            model = build_training_model("seed_cnn", {"dropout": 0.0}, (16, 16, 1), 10, policy)
            model.set_weights(start)
            built = build_teacher(source, policy, strategy)
            model.distill_from(Distillation(built.predict, 4.0, 0.1, built.input_size,
                                            built.channels))
            compile_training_model(model, "classification", 1e-3, policy, LossScaleSection(),
                                   grad_accum_steps=1, xla=False, label_smoothing=0.1)
        dataset = tf.data.Dataset.from_tensors((images, labels))  # one step: its own values
        history = model.fit(dataset, epochs=1, verbose=0).history
        logs = {key: values[-1] for key, values in history.items()}
        rows.append({"policy": policy, "strategy": strategy_name,
                     "replicas": strategy.num_replicas_in_sync,
                     "teacher_precision": built.precision,
                     **{key: float(logs[key]) for key in (
                         "distillation_loss", "loss", "gradient_norm", "step_skipped")}})
        keras.mixed_precision.set_dtype_policy("float32")
    return rows


def _kill_after_epoch(epoch_number: int) -> None:
    """Makes the Trainer's BackupAndRestore SIGKILL this process right after it has saved
    epoch `epoch_number` (1-based): a preempted worker, at a known point."""
    import signal

    import keras

    class KilledAfterBackup(keras.callbacks.BackupAndRestore):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            super().on_epoch_end(epoch, logs)
            if epoch + 1 == epoch_number:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    keras.callbacks.BackupAndRestore = KilledAfterBackup


def _main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    if spec.get("tf_config"):
        os.environ["TF_CONFIG"] = json.dumps(spec["tf_config"])
    import logging

    import tensorflow as tf

    # As pipelines/local_runner.py runs a component: its log at INFO.
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("absl").setLevel(logging.INFO)

    if spec.get("logical_cpus", 1) > 1:
        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * spec["logical_cpus"]
        )
    if spec.get("kill_after_epoch"):
        _kill_after_epoch(int(spec["kill_after_epoch"]))
    from components.trainer import module

    if spec.get("distillation_steps"):
        with open(spec["result_out"], "w") as f:
            json.dump(distillation_first_steps(**spec["distillation_steps"]), f)
        return
    results = []
    for fields in spec["runs"]:
        result = module.train_and_export(make_fn_args(fields, light=True))
        results.append({"summary": result.summary.to_dict(), "chief": result.chief,
                        "serving_model_dir": result.serving_model_dir})
        if spec.get("weights_out"):
            weights = result.model.get_weights()
            np.savez(spec["weights_out"].format(run=len(results) - 1), *weights)
    if spec.get("result_out"):
        with open(spec["result_out"], "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _main(sys.argv[1])
