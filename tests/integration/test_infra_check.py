"""The InfraValidator's check on real SavedModels, without a pipeline run: the exporter's
own models (a seed CNN, and tests/data/user_models/fails_on_blank_images.py, which fails on
the blank warm-up images), real tiny digits Examples, the real model process.

TF Serving's binary cannot run here (no PyPI, Debian or npm package): the sidecar client is
tested against tests/tf_serving_double.py's base-path double, which serves the SavedModel
through TF Serving's REST API as `tensorflow_model_server --model_base_path` would.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from components.infra.check import Limits, build_requests, check_candidate
from components.infra.config import quantity_bytes
from components.infra.model_process import ModelProcess
from components.infra.tf_serving import TFServingSidecar
from tests.tf_serving_double import serve_base_path
from tests.trainer_testdata import write_digits_examples

REPO = Path(__file__).resolve().parents[2]
FAILS_IN_SERVING = REPO / "tests" / "data" / "user_models" / "fails_on_blank_images.py"
LABELS = [str(d) for d in range(10)]
NUM_EXAMPLES = 4


def _limits(memory: str = "4Gi", max_load_seconds: float = 60.0,
            p99_latency_ms: float = 250.0) -> Limits:
    return Limits(max_load_seconds, p99_latency_ms, memory, quantity_bytes(memory))


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    """A seed CNN and the blank-failing model, exported as the Trainer exports, and Examples."""
    from components.trainer.export import export_serving_model
    from models import build_model
    from models.registry import unregister_model
    from models.user_module import register_user_model, stage_module_file

    root = tmp_path_factory.mktemp("candidates")
    good = export_serving_model(build_model("seed_cnn", (8, 8, 1), 10), "seed_cnn", {},
                                [8, 8], 1, LABELS, str(root / "good"))
    staged = stage_module_file(str(FAILS_IN_SERVING), str(root / "pipeline"))
    name = register_user_model(staged.path, "build_model", "classification", staged.sha256)
    bad = export_serving_model(build_model(name, (8, 8, 1), 10), name, {}, [8, 8], 1, LABELS,
                               str(root / "bad"))
    yield {"good": good, "bad": bad, "examples": write_digits_examples(str(root), 40),
           "jpeg_examples": write_digits_examples(str(root), 40, encoding="jpeg"),
           "swapped": _swapped_classes_model(root / "swapped"), "root": root}
    unregister_model(name)  # the registry is this process's: the next test file's too


def _swapped_classes_model(export_dir: Path) -> str:
    """A candidate whose `predict_image_bytes` answers the other class than its
    `serving_default` for the same image: the brightness decides, inverted."""
    import tensorflow as tf

    from components.examples_format import decode_image, parse_spec

    def classify(images: tf.Tensor, flip: bool) -> dict:
        brightness = tf.map_fn(lambda encoded: tf.reduce_mean(
            tf.cast(decode_image(encoded, 1), tf.float32)) / 255.0, images,
            fn_output_signature=tf.float32)
        scores = tf.stack([brightness, 1.0 - brightness], axis=-1)
        probabilities = tf.nn.softmax((scores[:, ::-1] if flip else scores) * 10.0)
        class_id = tf.argmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "class_id": class_id,
                "class_name": tf.strings.as_string(class_id)}

    module = tf.Module()
    module.serve = tf.function(
        lambda examples: classify(tf.io.parse_example(examples, parse_spec(label=False))
                                  ["image"], flip=False),
        input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    module.image_bytes = tf.function(lambda image_bytes: classify(image_bytes, flip=True),
                                     input_signature=[tf.TensorSpec([None], tf.string,
                                                                    name="image_bytes")])
    tf.saved_model.save(module, str(export_dir), signatures={
        "serving_default": module.serve, "predict_image_bytes": module.image_bytes})
    return str(export_dir)


def _check(candidates, model: str, limits: Limits, log: str, examples: str = "examples"):
    requests = build_requests(candidates[model], candidates[examples], NUM_EXAMPLES)
    with ModelProcess(limits.memory_limit_bytes, candidates["root"] / log) as server:
        return check_candidate(server, candidates[model], requests, limits), requests


def test_a_servable_candidate_is_blessed_with_its_load_time_latency_and_memory(candidates):
    result, requests = _check(candidates, "good", _limits(), "good.log")
    assert [r.label for r in requests] == [
        "warm-up record 1 (serving_default)", "warm-up record 2 (predict_image_bytes)",
        "warm-up record 3 (predict_images)",
        *[label for n in range(1, NUM_EXAMPLES + 1)
          for label in (f"eval example {n} (serving_default)",
                        f"image of eval example {n} (predict_image_bytes)")],
        "zeros (predict_normalized)"]
    assert result.blessed is True and result.reason == ""
    assert result.server == "model process" and result.requests == len(requests)
    assert result.signatures == ["predict_image_bytes", "predict_images", "predict_normalized",
                                 "serving_default"]
    assert 0 < result.load_seconds < 60 and result.start_seconds > 0
    assert 0 < result.p50_ms <= result.p99_ms
    # A process that imported TensorFlow and holds the model: hundreds of MiB, under 4 GiB.
    assert 100 < result.peak_rss_mb < 4096


@pytest.mark.parametrize("examples", ["examples", "jpeg_examples"])
def test_each_eval_image_file_is_sent_as_b64_and_answered_as_its_example(candidates, examples):
    result, requests = _check(candidates, "good", _limits(), f"{examples}.log", examples)
    images = [r for r in requests if r.body["signature_name"] == "predict_image_bytes"
              and r.same_as is not None]
    assert len(images) == NUM_EXAMPLES
    magic = b"\xff\xd8\xff" if examples == "jpeg_examples" else b"\x89PNG"
    for request in images:
        # The body a client sends with a photo: {"instances": [{"b64": <the file>}]}.
        [row] = request.body["instances"]
        assert base64.b64decode(row["b64"]).startswith(magic)
        reference = requests[request.same_as]
        assert reference.label == request.label.replace(
            "image of eval", "eval").replace("predict_image_bytes", "serving_default")
    assert result.blessed is True, result.reason


def test_a_candidate_answering_bytes_unlike_its_examples_is_refused_naming_both(candidates):
    result, _ = _check(candidates, "swapped", _limits(), "swapped.log")
    assert result.blessed is False
    # No warm-up records: 4 examples and their 4 files.
    assert result.reason == (
        "request 2 of 8 (image of eval example 1 (predict_image_bytes)) and request 1 (eval "
        "example 1 (serving_default)) answered differently for the same image: class_id [0] "
        "and [1]")


def test_a_signature_failing_on_its_warm_up_request_is_refused_naming_it(candidates):
    result, _ = _check(candidates, "bad", _limits(), "bad.log")
    assert result.blessed is False and result.load_seconds is None and result.requests == 0
    assert result.reason.startswith(
        "warm-up request 1 (serving_default) failed while loading: InvalidArgumentError: "
        "assertion failed: [StretchContrast: a blank image has no contrast to stretch")
    assert "\n" not in result.reason


def test_a_process_over_the_memory_limit_is_killed_and_refused(candidates):
    # TensorFlow alone takes more than 300 MiB resident: killed as the OOM killer would.
    result, _ = _check(candidates, "good", _limits(memory="300Mi"), "memory.log")
    assert result.blessed is False
    assert result.reason.startswith("the model process went over the memory limit 300 MiB "
                                    "while starting (resident ")
    assert result.reason.endswith("killed as the out-of-memory killer would")


@pytest.fixture
def sidecar(candidates, tmp_path):
    """The TF Serving double on a base path, and the client the InfraValidator's pod uses."""
    base = tmp_path / "candidate"
    base.mkdir()
    with serve_base_path(base, "digits") as double, \
            TFServingSidecar(double.url, str(base), "digits") as client:
        yield client, base


def test_tf_serving_gets_the_candidate_as_version_1_and_blesses_it(candidates, sidecar):
    client, base = sidecar
    requests = build_requests(candidates["good"], candidates["examples"], NUM_EXAMPLES)
    result = check_candidate(client, candidates["good"], requests, _limits())
    assert result.blessed is True and result.server == "tf serving"
    assert result.requests == len(requests) == 2 * NUM_EXAMPLES + 4
    assert result.peak_rss_mb is None  # the kubelet's to enforce, not visible from the node
    assert sorted(os.listdir(base)) == ["1"]  # copied in whole: no staging folder left
    assert (base / "1" / "saved_model.pb").exists()


def test_a_candidate_tf_serving_cannot_load_is_refused_with_its_error(candidates, sidecar):
    client, _ = sidecar
    requests = build_requests(candidates["bad"], candidates["examples"], NUM_EXAMPLES)
    result = check_candidate(client, candidates["bad"], requests, _limits())
    assert result.blessed is False and result.requests == 0
    assert result.reason.startswith("TF Serving did not load it: UNKNOWN: assertion failed: "
                                    "[StretchContrast: a blank image")


def test_over_the_latency_or_load_budget_is_refused_naming_the_key(candidates, tmp_path):
    requests = build_requests(candidates["good"], candidates["examples"], NUM_EXAMPLES)
    for name, limits, expected in [
            ("slow", _limits(p99_latency_ms=0.001), "is above infra.p99_latency_ms 0.001"),
            ("late", _limits(max_load_seconds=1e-6),
             "the candidate did not load within infra.max_load_seconds 1e-06 s")]:
        base = tmp_path / name
        base.mkdir()
        with serve_base_path(base, "digits") as double, \
                TFServingSidecar(double.url, str(base), "digits") as client:
            result = check_candidate(client, candidates["good"], requests, limits)
        assert result.blessed is False and expected in result.reason, result.reason
